//! The members' network: openraft's RPCs (append entries, vote, install snapshot)
//! carried as a MongoDB command, `{replSetRaft: <kind>, data: BinData}` on `admin`, over
//! an ordinary connection to the member's port, as mongod's members talk to one
//! another with internal commands (`replSetHeartbeat`, `replSetUpdatePosition`). The
//! request and the whole result (the answer or the remote's Raft error) travel as
//! postcard bytes in `data`; the receiving side is [`crate::rpc::handle`].
//!
//! One connection per peer, opened on first use and dropped on any failure (the next
//! call opens a new one); every call is bounded by openraft's per-RPC time limit.

use crate::rpc::{Kind, COMMAND};
use crate::types::{NodeId, TypeConfig};
use bson::{doc, Bson, Document};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{AnyError, BasicNode};
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The largest reply a peer may send (the wire protocol's own limit).
const MAX_REPLY_BYTES: usize = tailstream_wire::MAX_MESSAGE_SIZE;

/// Makes a [`Peer`] for each member the leader replicates to or a candidate asks.
#[derive(Clone, Default)]
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            conn: None,
            next_request_id: 1,
        }
    }
}

/// One other member, as this member calls it.
pub struct Peer {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
    next_request_id: i32,
}

/// What went wrong with a call: the network (retried by openraft), or an answer that
/// is not one (reported as the network's too: the peer is not a usable member).
fn net_error(e: impl std::fmt::Display) -> NetworkError {
    NetworkError::new(&AnyError::error(e.to_string()))
}

impl Peer {
    /// Sends one RPC and returns the peer's whole result, within `option`'s time limit.
    async fn call<Req, Res>(
        &mut self,
        kind: Kind,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Res, NetworkError>
    where
        Req: Serialize,
        Res: DeserializeOwned,
    {
        let limit = option.hard_ttl();
        match tokio::time::timeout(limit, self.exchange(kind, req)).await {
            Ok(Ok(res)) => Ok(res),
            Ok(Err(e)) => {
                self.conn = None;
                Err(e)
            }
            Err(_) => {
                self.conn = None;
                Err(net_error(format!(
                    "{} to {} timed out after {limit:?}",
                    kind.name(),
                    self.addr
                )))
            }
        }
    }

    async fn exchange<Req, Res>(&mut self, kind: Kind, req: &Req) -> Result<Res, NetworkError>
    where
        Req: Serialize,
        Res: DeserializeOwned,
    {
        let data = postcard::to_allocvec(req).map_err(net_error)?;
        let body = doc! {
            COMMAND: kind.name(),
            // The receiver may not know its own id yet (a member never initiated
            // learns it from its first call).
            "target": self.target as i64,
            "data": crate::rpc::data_value(data),
            "$db": "admin",
        };
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1).max(1);
        // Taken out for the exchange and put back only after a whole reply: openraft
        // drops a call that outlives its time limit, and a connection left with half a
        // request written or a reply unread would garble every later call on it.
        let mut stream = match self.conn.take() {
            Some(stream) => stream,
            None => connect(&self.addr).await?,
        };
        let reply = round_trip(&mut stream, request_id, &body).await?;
        self.conn = Some(stream);
        let ok = reply.get("ok").and_then(Bson::as_f64).unwrap_or(0.0);
        if ok != 1.0 {
            let errmsg = reply.get_str("errmsg").unwrap_or("no errmsg");
            return Err(net_error(format!(
                "{} refused {}: {errmsg}",
                self.addr,
                kind.name()
            )));
        }
        let data = crate::rpc::data_bytes(&reply).map_err(net_error)?;
        postcard::from_bytes(&data).map_err(net_error)
    }

    /// One RPC whose answer is the remote Raft's whole result: a network failure or the
    /// remote's Raft error as openraft expects them.
    async fn rpc<Req, Res, E>(&mut self, kind: Kind, req: &Req, option: &RPCOption) -> Rpc<Res, E>
    where
        Req: Serialize,
        Res: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let res: Result<Res, RaftError<NodeId, E>> = self
            .call(kind, req, option)
            .await
            .map_err(RPCError::Network)?;
        res.map_err(|e| {
            let node = BasicNode::new(&self.addr);
            RPCError::RemoteError(RemoteError::new_with_node(self.target, node, e))
        })
    }
}

/// A connection to the member at `addr`, authenticated with the set's key if it has
/// one (`member_auth`).
async fn connect(addr: &str) -> Result<TcpStream, NetworkError> {
    let mut stream = connect_anonymous(addr).await?;
    if let Some(conversation) = crate::member_auth::Conversation::start() {
        let first = round_trip(&mut stream, 1, &conversation.first()).await?;
        let (proof, server_signature) = conversation.proof(&first).map_err(net_error)?;
        let last = round_trip(&mut stream, 2, &proof).await?;
        crate::member_auth::Conversation::verify(&last, &server_signature)
            .map_err(|e| net_error(format!("authenticating to {addr}: {e}")))?;
    }
    Ok(stream)
}

/// A connection to `addr` that has not authenticated (for `hello`).
async fn connect_anonymous(addr: &str) -> Result<TcpStream, NetworkError> {
    let stream = TcpStream::connect(addr).await.map_err(net_error)?;
    stream.set_nodelay(true).map_err(net_error)?;
    Ok(stream)
}

/// Sends one command (its `$db` in `body`) on `stream` and reads its reply document.
async fn round_trip(
    stream: &mut TcpStream,
    request_id: i32,
    body: &Document,
) -> Result<Document, NetworkError> {
    let message = tailstream_wire::encode_msg(request_id, 0, 0, body);
    stream.write_all(&message).await.map_err(net_error)?;
    let Some((header, bytes)) = tailstream_wire::read_message(stream, MAX_REPLY_BYTES)
        .await
        .map_err(net_error)?
    else {
        return Err(net_error("the peer closed the connection"));
    };
    if header.response_to != request_id {
        return Err(net_error("a reply to another request"));
    }
    let (request, _) = tailstream_wire::decode(&header, &bytes).map_err(net_error)?;
    let tailstream_wire::Request::Msg(msg) = request else {
        return Err(net_error("a reply that is not an OP_MSG"));
    };
    msg.into_command().map_err(net_error)
}

/// One command on a new connection to `addr`, authenticated as a member (a request to
/// stand for election, a forwarded command): its reply, `ok: 0` included, or why none
/// came within `limit`.
pub async fn ask(addr: &str, body: &Document, limit: Duration) -> Result<Document, String> {
    ask_on(connect(addr), addr, body, limit).await
}

/// [`ask`] without authenticating, for commands anyone may run (a member's `hello`).
pub async fn ask_anonymous(
    addr: &str,
    body: &Document,
    limit: Duration,
) -> Result<Document, String> {
    ask_on(connect_anonymous(addr), addr, body, limit).await
}

async fn ask_on(
    connecting: impl std::future::Future<Output = Result<TcpStream, NetworkError>>,
    addr: &str,
    body: &Document,
    limit: Duration,
) -> Result<Document, String> {
    let exchange = async {
        let mut stream = connecting.await?;
        round_trip(&mut stream, 3, body).await
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(result) => result.map_err(|e| format!("{addr}: {e}")),
        Err(_) => Err(format!("{addr} did not answer within {limit:?}")),
    }
}

/// The most bytes of entries one append call carries: with the command around them,
/// well under the wire's 48 MB message limit.
const MAX_APPEND_BYTES: usize = 32 << 20;

/// About how many bytes an entry takes in a call: its commit's writes (the bulk, already
/// encoded: no entry is encoded twice to be measured) and an allowance for the rest (a
/// membership entry, a few KB at most, fits the 16 MB between MAX_APPEND_BYTES and the
/// wire's limit many times over).
fn entry_bytes(entry: &openraft::Entry<TypeConfig>) -> usize {
    /// The log id, the payload's kind and the commit's origin, encoded: under this.
    const ENTRY_OVERHEAD_BYTES: usize = 64;
    match &entry.payload {
        openraft::EntryPayload::Normal(commit) => commit.ops.len() + ENTRY_OVERHEAD_BYTES,
        _ => ENTRY_OVERHEAD_BYTES,
    }
}

/// The request cut to the entries that fit in one message (the first always goes, a
/// commit is never split); with the log id of the last one sent when some were left
/// out.
fn within_one_message(
    mut rpc: AppendEntriesRequest<TypeConfig>,
) -> (
    AppendEntriesRequest<TypeConfig>,
    Option<openraft::LogId<NodeId>>,
) {
    if rpc.entries.len() < 2 {
        return (rpc, None);
    }
    let mut bytes = 0usize;
    let mut fits = 0;
    for entry in &rpc.entries {
        bytes += entry_bytes(entry);
        if fits > 0 && bytes > MAX_APPEND_BYTES {
            break;
        }
        fits += 1;
    }
    if fits == rpc.entries.len() {
        return (rpc, None);
    }
    rpc.entries.truncate(fits);
    let last = rpc.entries.last().map(|e| e.log_id);
    (rpc, last)
}

/// Asks member `target` at `addr` to stand for election now (a leader stepping down:
/// see `handover`).
pub async fn ask_to_stand(addr: &str, target: NodeId, limit: Duration) -> Result<(), String> {
    let body = doc! {COMMAND: Kind::Elect.name(), "target": target as i64, "$db": "admin"};
    let reply = ask(addr, &body, limit).await?;
    match reply.get("ok").and_then(Bson::as_f64) {
        Some(1.0) => Ok(()),
        _ => Err(format!(
            "{addr} refused to stand: {}",
            reply.get_str("errmsg").unwrap_or("no errmsg")
        )),
    }
}

type Rpc<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<NodeId>> {
        let (rpc, last_sent) = within_one_message(rpc);
        let res = self.rpc(Kind::AppendEntries, &rpc, &option).await?;
        // Only a prefix went: openraft sends the rest next (its `PartialSuccess`).
        Ok(match (res, last_sent) {
            (AppendEntriesResponse::Success, Some(last)) => {
                AppendEntriesResponse::PartialSuccess(Some(last))
            }
            (res, _) => res,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.rpc(Kind::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<NodeId>> {
        self.rpc(Kind::Vote, &rpc, &option).await
    }
}

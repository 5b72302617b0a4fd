//! `replSetInitiate`: the configuration checked as mongod checks it, this server found
//! in it, every other member answering, then the set made (`replication::set`).

use super::{member_as, INVALID_REPLICA_SET_CONFIG, MAX_MEMBERS};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_replication::BasicNode;

/// The members of a `replSetInitiate` configuration, checked as mongod checks them.
pub(super) fn members_of(
    state: &ServerState,
    config: &Document,
) -> Result<BTreeMap<u64, BasicNode>> {
    let invalid = |msg: String| Error::new(INVALID_REPLICA_SET_CONFIG, msg);
    let name = config.get_str("_id").unwrap_or("");
    if name != state.config.repl_set {
        return Err(invalid(format!(
            "Attempting to initiate a replica set with name {name}, but command line reports {}; rejecting",
            state.config.repl_set
        )));
    }
    let Ok(list) = config.get_array("members") else {
        return Err(invalid("the configuration needs a members array".into()));
    };
    if list.len() > MAX_MEMBERS {
        return Err(invalid(format!(
            "a replica set has at most {MAX_MEMBERS} members, not {}",
            list.len()
        )));
    }
    let mut members = BTreeMap::new();
    for m in list {
        let Some(m) = m.as_document() else {
            return Err(invalid("every member is a document".into()));
        };
        let id = m
            .get("_id")
            .and_then(tailstream_engine::find::as_i64)
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid("every member needs a non-negative _id".into()))?;
        let host = m
            .get_str("host")
            .map_err(|_| invalid("every member needs a host".into()))?;
        let node = BasicNode::new(host);
        if members.values().any(|n: &BasicNode| n.addr == host)
            || members.insert(id as u64, node).is_some()
        {
            return Err(invalid(format!(
                "member _id {id} or host {host} appears twice"
            )));
        }
    }
    Ok(members)
}

/// Whether `host` names this server: its port on this host, or else whoever answers
/// there is this very process (its `hello`'s `topologyVersion.processId`; as mongod's
/// `isSelf` asks, so a member known by a name or a forwarded port finds itself).
pub(super) async fn is_me(state: &ServerState, host: &str) -> bool {
    let Some((name, port)) = host.rsplit_once(':') else {
        return false;
    };
    if port.parse::<u16>().ok() == Some(state.config.port)
        && (["localhost", "127.0.0.1", "::1", "[::1]"].contains(&name)
            || state.config.advertised_host() == host)
    {
        return true;
    }
    let hello = doc! {"hello": 1, "$db": "admin"};
    let Ok(reply) =
        tailstream_replication::network::ask_anonymous(host, &hello, IS_SELF_LIMIT).await
    else {
        return false;
    };
    reply
        .get_document("topologyVersion")
        .and_then(|tv| tv.get_object_id("processId"))
        .is_ok_and(|id| id == state.process_id)
}

/// How long asking a host whether it is this server may take.
const IS_SELF_LIMIT: Duration = Duration::from_secs(2);

/// `replSetInitiate` (`rs.initiate(config)`).
pub async fn initiate(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let already = || Error::new(codes::ALREADY_INITIALIZED, "already initialized");
    if state.repl.member().is_some() {
        return Err(already());
    }
    let config = match cmd.get("replSetInitiate") {
        Some(Bson::Document(c)) => c.clone(),
        // Without a configuration: the one-member set this server already is.
        _ => return Err(already()),
    };
    initiate_with(state, &config).await
}

/// Makes the set of `config` with this server in it (also `replSetReconfig` of the
/// one-member set: `rs.add` on a server that was alone).
pub(super) async fn initiate_with(state: &Arc<ServerState>, config: &Document) -> Result<Document> {
    let already = || Error::new(codes::ALREADY_INITIALIZED, "already initialized");
    // A configuration of one member (or none) names the one-member set this server
    // already is, whatever it says (mongod answers an initiated set so before it reads
    // the configuration).
    let listed = config.get_array("members").map_or(0, Vec::len);
    if listed <= 1 {
        return Err(already());
    }
    let members = members_of(state, config)?;
    let mut me = None;
    for (id, node) in &members {
        if is_me(state, &node.addr).await {
            me = Some(*id);
            break;
        }
    }
    let Some(me) = me else {
        return Err(Error::new(
            INVALID_REPLICA_SET_CONFIG,
            format!(
                "No host described in new configuration for replica set {} maps to this node",
                state.config.repl_set
            ),
        ));
    };
    quorum_check(&members, me).await?;
    let member = member_as(state, me).await?;
    member
        .initiate(members)
        .await
        .map_err(|e| Error::internal(format!("replSetInitiate: {e}")))?;
    Ok(Document::new())
}

/// How long initiation waits for each other member to answer before it refuses.
const QUORUM_CHECK_LIMIT: Duration = Duration::from_secs(5);
/// mongod's code when a proposed member does not answer.
const NODE_NOT_FOUND: i32 = 74;

/// Before anything is initiated, every other member must answer a `hello` (mongod's
/// quorum check), so a set is never left half made with a member that is not there.
async fn quorum_check(members: &BTreeMap<u64, BasicNode>, me: u64) -> Result<()> {
    let hello = doc! {"hello": 1, "$db": "admin"};
    let mut missing = Vec::new();
    for (id, node) in members.iter().filter(|(id, _)| **id != me) {
        let answer =
            tailstream_replication::network::ask_anonymous(&node.addr, &hello, QUORUM_CHECK_LIMIT);
        if let Err(e) = answer.await {
            missing.push(format!("{} (_id {id}: {e})", node.addr));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        NODE_NOT_FOUND,
        format!(
            "replSetInitiate quorum check failed because not all proposed set members responded affirmatively: {}",
            missing.join(", ")
        ),
    ))
}

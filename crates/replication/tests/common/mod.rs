//! Members for the tests: each an engine with its own data directory, a Raft on
//! openraft and a listener taking the members' `replSetRaft` commands over TCP (the
//! server's part, here reduced to reading OP_MSGs and answering them).
#![allow(dead_code)] // each test file uses its part

use bson::doc;
use openraft::{BasicNode, Config, Raft};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::{Engine, EngineOptions};
use tailstream_replication::network::Network;
use tailstream_replication::{rpc, LogStore, MemberProposer, Pending, StateMachine, TypeConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

pub const OPLOG_BYTES: u64 = 64 << 20;
/// How long the test waits for an election or for every member to apply (a bound on a
/// failing run, not a measurement).
pub const WAIT: Duration = Duration::from_secs(20);

pub struct Member {
    pub id: u64,
    pub addr: String,
    pub raft: Raft<TypeConfig>,
    pub engine: Arc<Engine>,
    pub listener: tokio::task::JoinHandle<()>,
    pub _dir: tempfile::TempDir,
}

/// Answers one connection's `replSetRaft` commands until it closes.
pub async fn serve_connection(mut stream: TcpStream, raft: Raft<TypeConfig>) {
    while let Ok(Some((header, body))) =
        tailstream_wire::read_message(&mut stream, tailstream_wire::MAX_MESSAGE_SIZE).await
    {
        let Ok((tailstream_wire::Request::Msg(msg), _)) = tailstream_wire::decode(&header, &body)
        else {
            return;
        };
        let Ok(cmd) = msg.into_command() else { return };
        let reply = match rpc::handle(&raft, &cmd).await {
            Ok(mut fields) => {
                fields.insert("ok", 1.0);
                fields
            }
            Err(errmsg) => doc! {"ok": 0.0, "errmsg": errmsg},
        };
        let bytes = tailstream_wire::encode_msg(0, header.request_id, 0, &reply);
        if stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// A member; `proposing`: its engine's writes go through the set (the write path).
pub async fn start(id: u64, config: Arc<Config>, proposing: bool) -> (Member, TcpListener) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions {
        dbpath: dir.path().to_path_buf(),
        oplog_size_bytes: OPLOG_BYTES,
    })
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pending = Arc::new(Pending::new(id));
    let sm = if proposing {
        StateMachine::proposing(engine.clone(), pending.clone())
    } else {
        StateMachine::new(engine.clone())
    };
    let log = LogStore::new(engine.clone());
    let appended = log.appended_bytes();
    let raft = Raft::new(id, config, Network, log, sm).await.unwrap();
    // As `set::Member::start` does.
    tailstream_replication::log_window::spawn(raft.clone(), appended);
    if proposing {
        let proposer = MemberProposer::new(
            id,
            raft.clone(),
            pending,
            Default::default(),
            tokio::runtime::Handle::current(),
        );
        engine.set_proposer(Some(Arc::new(proposer)));
    }
    let member = Member {
        id,
        addr,
        raft,
        engine,
        listener: tokio::spawn(async {}),
        _dir: dir,
    };
    (member, listener)
}

pub fn serve(member: &mut Member, listener: TcpListener) {
    let raft = member.raft.clone();
    member.listener = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).unwrap();
            tokio::spawn(serve_connection(stream, raft.clone()));
        }
    });
}

pub async fn leader_of(members: &[Member], not: Option<u64>) -> u64 {
    let raft = &members[0].raft;
    let metrics = raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.current_leader.is_some() && m.current_leader != not,
            "a leader is elected",
        )
        .await
        .unwrap();
    metrics.current_leader.unwrap()
}

pub async fn all_applied(members: &[Member], index: u64) {
    for m in members {
        m.raft
            .wait(Some(WAIT))
            .applied_index_at_least(Some(index), "every commit applied")
            .await
            .unwrap();
    }
}

/// The set's configuration: elections within a few seconds. A heartbeat late by an
/// election timeout (a loaded 2-core machine) starts an election; tests follow the
/// leader wherever it goes.
pub fn config() -> Arc<Config> {
    Arc::new(
        Config {
            cluster_name: "rs0".into(),
            heartbeat_interval: 100,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    )
}

/// Three members, serving and initiated.
pub async fn three(proposing: bool) -> Vec<Member> {
    three_with(config(), proposing).await
}

/// [`three`] with another configuration.
pub async fn three_with(config: Arc<Config>, proposing: bool) -> Vec<Member> {
    let mut members = Vec::new();
    for id in 1..=3 {
        let (mut m, listener) = start(id, config.clone(), proposing).await;
        serve(&mut m, listener);
        members.push(m);
    }
    let nodes: BTreeMap<u64, BasicNode> = members
        .iter()
        .map(|m| (m.id, BasicNode::new(&m.addr)))
        .collect();
    members[0].raft.initialize(nodes).await.unwrap();
    members
}

/// Stops a member: its Raft, its listener, its engine.
pub async fn stop(m: Member) {
    m.raft.shutdown().await.unwrap();
    m.listener.abort();
    m.engine.shutdown();
}

//! Three members, each an engine with its own data directory, a Raft on openraft and a
//! listener taking the members' `replSetRaft` commands over TCP (the server's part,
//! here reduced to reading OP_MSGs and answering them): the set elects a leader,
//! commits reach every member's store, and after the leader stops the other two elect
//! one of themselves and go on, losing nothing (issue 27).

use bson::doc;
use openraft::{BasicNode, Config, Raft};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::repl::{Ops, Space};
use tailstream_engine::{Engine, EngineOptions};
use tailstream_replication::network::Network;
use tailstream_replication::{rpc, Commit, LogStore, StateMachine, TypeConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const OPLOG_BYTES: u64 = 64 << 20;
/// How long the test waits for an election or for every member to apply (a bound on a
/// failing run, not a measurement).
const WAIT: Duration = Duration::from_secs(20);

struct Member {
    id: u64,
    addr: String,
    raft: Raft<TypeConfig>,
    engine: Arc<Engine>,
    listener: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

/// Answers one connection's `replSetRaft` commands until it closes.
async fn serve_connection(mut stream: TcpStream, raft: Raft<TypeConfig>) {
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

async fn start(id: u64, config: Arc<Config>) -> (Member, TcpListener) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions {
        dbpath: dir.path().to_path_buf(),
        oplog_size_bytes: OPLOG_BYTES,
    })
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let raft = Raft::new(
        id,
        config,
        Network,
        LogStore::new(engine.clone()),
        StateMachine::new(engine.clone()),
    )
    .await
    .unwrap();
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

fn serve(member: &mut Member, listener: TcpListener) {
    let raft = member.raft.clone();
    member.listener = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).unwrap();
            tokio::spawn(serve_connection(stream, raft.clone()));
        }
    });
}

fn commit(key: &str) -> Commit {
    let mut ops = Ops::new();
    ops.put(
        Space::Docs,
        format!("\x00\x00\x01\x00{key}").as_bytes(),
        key.as_bytes(),
    );
    Commit {
        ops: ops.into_bytes(),
    }
}

fn has(member: &Member, key: &str) -> bool {
    let stored = member
        .engine
        .store
        .get(Space::Docs, format!("\x00\x00\x01\x00{key}").as_bytes())
        .unwrap();
    stored.as_deref() == Some(key.as_bytes())
}

async fn leader_of(members: &[Member], not: Option<u64>) -> u64 {
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

/// Writes one commit through whichever member leads (retried while the leadership
/// moves: a write refused by a member that is no longer the leader is not applied);
/// returns its log index.
async fn write(members: &[Member], key: &str, not: Option<u64>) -> u64 {
    for _ in 0..20 {
        let leader = leader_of(members, not).await;
        let Some(m) = members.iter().find(|m| m.id == leader) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        match m.raft.client_write(commit(key)).await {
            Ok(res) => return res.log_id.index,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    panic!("no leader took the write of {key}");
}

async fn all_applied(members: &[Member], index: u64) {
    for m in members {
        m.raft
            .wait(Some(WAIT))
            .applied_index_at_least(Some(index), "every commit applied")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_members_elect_replicate_and_survive_the_leaders_loss() {
    let config = Arc::new(
        Config {
            cluster_name: "rs0".into(),
            // A heartbeat late by an election timeout (a loaded 2-core machine) starts
            // an election; `write` below follows the leader wherever it goes.
            heartbeat_interval: 100,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    );
    let mut members = Vec::new();
    for id in 1..=3 {
        let (mut m, listener) = start(id, config.clone()).await;
        serve(&mut m, listener);
        members.push(m);
    }
    let nodes: BTreeMap<u64, BasicNode> = members
        .iter()
        .map(|m| (m.id, BasicNode::new(&m.addr)))
        .collect();
    members[0].raft.initialize(nodes).await.unwrap();

    let mut last = 0;
    for i in 0..5 {
        last = write(&members, &format!("k{i}"), None).await;
    }
    all_applied(&members, last).await;
    for m in &members {
        assert!(
            (0..5).all(|i| has(m, &format!("k{i}"))),
            "member {} has every commit",
            m.id
        );
    }

    // The leader stops; the other two elect one of themselves.
    let leader = leader_of(&members, None).await;
    let l = members.iter().position(|m| m.id == leader).unwrap();
    let gone = members.remove(l);
    gone.raft.shutdown().await.unwrap();
    gone.listener.abort();
    gone.engine.shutdown();
    let new_leader = leader_of(&members, Some(leader)).await;
    assert_ne!(new_leader, leader);
    for i in 5..8 {
        last = write(&members, &format!("k{i}"), Some(leader)).await;
    }
    all_applied(&members, last).await;
    for m in &members {
        assert!(
            (0..8).all(|i| has(m, &format!("k{i}"))),
            "member {} lost nothing",
            m.id
        );
    }
    for m in members {
        m.raft.shutdown().await.unwrap();
        m.listener.abort();
        m.engine.shutdown();
    }
}

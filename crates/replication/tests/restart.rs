//! What a member stored survives its restart: the log, the vote, the commit point and
//! the state machine with its applied marker; an applied commit's writes are in the
//! engine's store (issue 27).

use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{BasicNode, Entry, EntryPayload, Membership, Vote};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tailstream_engine::repl::Ops;
use tailstream_engine::{Engine, EngineOptions};
use tailstream_replication::{Commit, LogStore, StateMachine, TypeConfig};

const OPLOG_BYTES: u64 = 64 << 20;

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(EngineOptions {
        dbpath: dir.to_path_buf(),
        oplog_size_bytes: OPLOG_BYTES,
    })
    .expect("open the engine")
}

fn commit_entry(index: u64, key: &[u8], value: &[u8]) -> Entry<TypeConfig> {
    let mut ops = Ops::new();
    ops.put(docs_space(), key, value);
    Entry {
        log_id: log_id(2, 1, index),
        payload: EntryPayload::Normal(Commit {
            origin: None,
            ops: ops.into_bytes(),
        }),
    }
}

/// The documents' space, named through the engine's re-export.
fn docs_space() -> tailstream_engine::repl::Space {
    tailstream_engine::repl::Space::Docs
}

#[tokio::test]
async fn a_members_log_vote_and_state_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let members: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|id| (id, BasicNode::new(format!("127.0.0.1:{}", 27016 + id))))
        .collect();
    let membership = Membership::new(
        vec![members.keys().copied().collect::<BTreeSet<_>>()],
        members,
    );
    let entries = vec![
        Entry {
            log_id: log_id(1, 1, 1),
            payload: EntryPayload::Membership(membership.clone()),
        },
        Entry {
            log_id: log_id(2, 1, 2),
            payload: EntryPayload::Blank,
        },
        commit_entry(3, b"\x00\x00\x01\x00a", b"first"),
        commit_entry(4, b"\x00\x00\x01\x00b", b"second"),
    ];
    {
        let engine = open(dir.path());
        let mut log = LogStore::new(engine.clone());
        let mut sm = StateMachine::new(engine.clone());
        log.blocking_append(entries.clone()).await.unwrap();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        log.save_committed(Some(log_id(2, 1, 3))).await.unwrap();
        // Applied up to 3 only: 4 is in the log, not yet in the state machine.
        sm.apply(entries[..3].to_vec()).await.unwrap();
        engine.shutdown();
    }
    let engine = open(dir.path());
    let mut log = LogStore::new(engine.clone());
    let mut sm = StateMachine::new(engine.clone());
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 1, 4)));
    assert_eq!(state.last_purged_log_id, None);
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(2, 1))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 1, 3)));
    assert_eq!(log.try_get_log_entries(1..5).await.unwrap(), entries);
    let (applied, stored) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(2, 1, 3)));
    assert_eq!(stored.membership(), &membership);
    let docs = docs_space();
    assert_eq!(
        engine.store.get(docs, b"\x00\x00\x01\x00a").unwrap(),
        Some(b"first".to_vec())
    );
    assert_eq!(engine.store.get(docs, b"\x00\x00\x01\x00b").unwrap(), None);
    // Applying the rest after the restart, as openraft does from the commit point.
    sm.apply(entries[3..].to_vec()).await.unwrap();
    assert_eq!(
        engine.store.get(docs, b"\x00\x00\x01\x00b").unwrap(),
        Some(b"second".to_vec())
    );
    engine.shutdown();
}

/// Entries apply one at a time, each atomic with its marker: a corrupt one is refused
/// whole, and the state machine stands at the entry before it.
#[tokio::test]
async fn a_corrupt_commit_is_refused_and_the_state_machine_stops_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mut sm = StateMachine::new(engine.clone());
    let good = commit_entry(1, b"\x00\x00\x01\x00a", b"x");
    let mut ops = Ops::new();
    ops.put(docs_space(), b"\x00\x00\x01\x00b", b"y");
    // A valid write, then bytes that are not one.
    let mut bytes = ops.into_bytes();
    bytes.extend_from_slice(&[1, 0, 255, 255, 255, 255]);
    let bad = Entry {
        log_id: log_id(2, 1, 2),
        payload: EntryPayload::Normal(Commit {
            origin: None,
            ops: bytes,
        }),
    };
    assert!(sm.apply(vec![good, bad]).await.is_err());
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(2, 1, 1)));
    let get = |key: &[u8]| engine.store.get(docs_space(), key).unwrap();
    assert_eq!(get(b"\x00\x00\x01\x00a"), Some(b"x".to_vec()));
    assert_eq!(get(b"\x00\x00\x01\x00b"), None);
    engine.shutdown();
}

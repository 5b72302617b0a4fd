//! A member that joins after the log was purged gets the state machine as a snapshot
//! file sent in many chunks over TCP and installed in pieces (issue 27's streamed
//! snapshot): it ends with the leader's documents byte for byte, and no file is left
//! on it.

mod common;

use common::{all_applied, serve, start, stop, WAIT};
use openraft::{BasicNode, Config, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use tailstream_engine::repl::{Ops, Space};
use tailstream_replication::Commit;

/// Chunks far smaller than the snapshot, so it crosses in many calls.
const CHUNK_BYTES: u64 = 64 << 10;
/// Each commit's document: the commits add up to several of the file's 4 MiB pieces.
const DOC_BYTES: usize = 100 << 10;
const COMMITS: usize = 120;

fn commit(i: usize) -> Commit {
    let mut ops = Ops::new();
    let value = vec![u8::try_from(i % 251).unwrap(); DOC_BYTES];
    ops.put(
        Space::Docs,
        format!("\x00\x00\x01\x00{i:05}").as_bytes(),
        &value,
    );
    Commit {
        origin: None,
        ops: ops.into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_member_gets_a_snapshot_in_chunks_and_pieces() {
    let config = Arc::new(
        Config {
            snapshot_policy: SnapshotPolicy::LogsSinceLast(10),
            max_in_snapshot_log_to_keep: 0,
            snapshot_max_chunk_size: CHUNK_BYTES,
            ..(*common::config()).clone()
        }
        .validate()
        .unwrap(),
    );
    let (mut leader, listener) = start(1, config.clone(), false).await;
    serve(&mut leader, listener);
    let nodes: BTreeMap<u64, BasicNode> = [(1, BasicNode::new(&leader.addr))].into();
    leader.raft.initialize(nodes).await.unwrap();
    leader
        .raft
        .wait(Some(WAIT))
        .metrics(|m| m.current_leader == Some(1), "the one member leads")
        .await
        .unwrap();
    let mut last = 0;
    for i in 0..COMMITS {
        last = leader
            .raft
            .client_write(commit(i))
            .await
            .unwrap()
            .log_id
            .index;
    }
    leader.raft.trigger().snapshot().await.unwrap();
    leader
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index >= last),
            "the log purged past every commit",
        )
        .await
        .unwrap();

    let (mut late, listener) = start(2, config, false).await;
    serve(&mut late, listener);
    leader
        .raft
        .add_learner(2, BasicNode::new(&late.addr), true)
        .await
        .unwrap();
    let members = [leader, late];
    all_applied(&members, last).await;
    let [leader, late] = members;
    let metrics = late.raft.metrics().borrow().clone();
    assert!(
        metrics.snapshot.is_some_and(|s| s.index >= last),
        "the late member's state came as a snapshot: {:?}",
        metrics.snapshot
    );
    let docs = |m: &common::Member| m.engine.store.export(&[Space::Docs]).unwrap();
    let got = docs(&late);
    assert_eq!(got.len(), COMMITS);
    assert_eq!(got, docs(&leader));
    // The leader knows the late member caught up, so it sends nothing more; a send it
    // repeated meanwhile (its answer late on a loaded machine) is dropped as stale by
    // openraft, and its file with it, soon after.
    leader
        .raft
        .wait(Some(WAIT))
        .metrics(
            |m| {
                m.replication.as_ref().is_some_and(|r| {
                    r.get(&2)
                        .is_some_and(|matched| matched.is_some_and(|l| l.index >= last))
                })
            },
            "the leader knows the late member caught up",
        )
        .await
        .unwrap();
    let dir = late.engine.repl_snapshot_dir().unwrap();
    let since = std::time::Instant::now();
    let left = loop {
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        if left.is_empty() || since.elapsed() > WAIT {
            break left;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(left.is_empty(), "files left on the late member: {left:?}");
    stop(leader).await;
    stop(late).await;
}

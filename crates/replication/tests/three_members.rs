//! Three members over TCP (see `common`): the set elects a leader, commits reach every
//! member's store, and after the leader stops the other two elect one of themselves and
//! go on, losing nothing (issue 27).

mod common;

use common::{all_applied, leader_of, stop, three, Member};
use std::time::Duration;
use tailstream_engine::repl::{Ops, Space};
use tailstream_replication::Commit;

fn commit(key: &str) -> Commit {
    let mut ops = Ops::new();
    ops.put(
        Space::Docs,
        format!("\x00\x00\x01\x00{key}").as_bytes(),
        key.as_bytes(),
    );
    Commit {
        origin: None,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_members_elect_replicate_and_survive_the_leaders_loss() {
    let mut members = three(false).await;
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
    stop(gone).await;
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
        stop(m).await;
    }
}

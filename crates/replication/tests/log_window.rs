//! The log's window (`log_window`): a follower purges its log every few MiB of entries
//! appended, far before openraft's 5,000 entries; the leader, whose log is what a
//! member behind is sent, keeps it.

mod common;

use common::{all_applied, leader_of, stop, three_with};
use openraft::Config;
use std::sync::Arc;
use tailstream_engine::repl::{Ops, Space};
use tailstream_replication::log_window::SNAPSHOT_EVERY_LOG_BYTES;
use tailstream_replication::Commit;

const ENTRY_BYTES: usize = 256 << 10;

fn commit(i: usize) -> Commit {
    let mut ops = Ops::new();
    let key = format!("\x00\x00\x01\x00{i:05}");
    ops.put(Space::Docs, key.as_bytes(), &vec![7u8; ENTRY_BYTES]);
    Commit {
        origin: None,
        ops: ops.into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_purge_their_log_by_size_and_the_leader_keeps_it() {
    // As the server's members: every entry in a snapshot purged at once.
    let config = Config {
        max_in_snapshot_log_to_keep: 0,
        ..(*common::config()).clone()
    };
    let members = three_with(Arc::new(config.validate().unwrap()), false).await;
    let leader = leader_of(&members, None).await;
    let l = members.iter().find(|m| m.id == leader).unwrap();
    // Three windows' worth, in a few dozen entries.
    let entries = 3 * SNAPSHOT_EVERY_LOG_BYTES as usize / ENTRY_BYTES;
    let mut last = 0;
    for i in 0..entries {
        last = l.raft.client_write(commit(i)).await.unwrap().log_id.index;
    }
    all_applied(&members, last).await;
    let window = SNAPSHOT_EVERY_LOG_BYTES as usize / ENTRY_BYTES;
    for m in members.iter().filter(|m| m.id != leader) {
        m.raft
            .wait(Some(common::WAIT))
            .metrics(
                |x| {
                    x.purged
                        .is_some_and(|p| p.index + 2 * window as u64 >= last)
                },
                "the follower purged its log to within two windows",
            )
            .await
            .unwrap();
    }
    let purged = l.raft.metrics().borrow().purged;
    assert!(
        purged.is_none_or(|p| p.index + (entries as u64) / 2 < last),
        "the leader kept its log: purged {purged:?}, last {last}"
    );
    for m in members {
        stop(m).await;
    }
}

//! The log's window: a snapshot (and so a purge of the log before it) every
//! [`SNAPSHOT_EVERY_LOG_BYTES`] of entries appended, besides openraft's own policy
//! (every 5,000 entries, whatever their size).
//!
//! Why: every entry is written twice on each member, into the log and, applied, into
//! the state machine. An entry purged while it is still in RocksDB's memtable (64 MiB
//! per space) is mostly dropped when the memtable is flushed, instead of being
//! written to a table file and compacted. With only openraft's count, 5,000 entries
//! of 1,000 documents of 1 KB are 5 GB of log: in the ingestion benchmark's key table
//! (0.6 GB over three rows, 8 clients, `w: "majority"`, 2 vCPUs) each member flushed
//! 739-761 MB of log beside 661-728 MB of oplog; with a snapshot every 4 MiB of log a
//! follower flushed 165-208 MB of it (every 16 MiB: 349-437 MB), the throughput the
//! same within the machine's noise (bench/history/2026-11-27-replset-log-window.md).
//! A snapshot is cheap to build (a held read view: `state_machine.rs`).
//!
//! Only a follower (or learner) does it: its log serves only itself while it follows.
//! The leader's log is what members behind are sent, and a purge there can push one
//! onto a snapshot, a full copy of the store: asking for one when every member had
//! every applied entry was not enough (the entries applied between the check and the
//! build were purged before a follower had them, and a 353 MB snapshot was sent in
//! the middle of the ingestion benchmark), so the leader keeps openraft's policy. A
//! follower that is elected leads with a shorter log: a member far behind it then
//! gets a snapshot, as it would past 5,000 entries.

use crate::types::{NodeId, TypeConfig};
use openraft::Raft;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of log appended between two snapshots asked for by size: a sixteenth of a
/// memtable, so most of the log is purged before its memtable is flushed (the
/// snapshot's read view holds what it can see until the next one replaces it: at
/// 16 MiB half the log was still flushed, at 4 MiB a quarter). Each costs the
/// follower a purge (a range delete and an fsync), 15 a second at 60 MB/s.
pub const SNAPSHOT_EVERY_LOG_BYTES: u64 = 4 << 20;

/// How often the window is looked at.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Whether this member's log serves only itself (see the module's doc).
fn follows(m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
    matches!(
        m.state,
        openraft::ServerState::Follower | openraft::ServerState::Learner
    ) && m.current_leader.is_some_and(|l| l != m.id)
}

/// Watches `appended` (the log's bytes appended, counted by `LogStore`) and, while
/// this member follows, asks `raft` for a snapshot past each
/// [`SNAPSHOT_EVERY_LOG_BYTES`]; ends with the Raft.
pub fn spawn(raft: Raft<TypeConfig>, appended: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asked_at = appended.load(Ordering::Relaxed);
        loop {
            tick.tick().await;
            let now = appended.load(Ordering::Relaxed);
            if now.saturating_sub(asked_at) < SNAPSHOT_EVERY_LOG_BYTES {
                continue;
            }
            let ready = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                if m.state == openraft::ServerState::Shutdown {
                    return;
                }
                follows(&m)
            };
            if !ready {
                continue;
            }
            if raft.trigger().snapshot().await.is_err() {
                return; // the Raft stopped
            }
            asked_at = now;
        }
    })
}

//! The primary's no-op oplog entries, as mongod writes them: `{msg: "new primary"}`
//! when a member takes office (so the new term has an entry of its own and the
//! cluster time moves), and `{msg: "periodic noop"}` when the primary has written
//! nothing for [`PERIODIC_NOOP_INTERVAL`] (mongod's `periodicNoopIntervalSecs`), so a
//! secondary's `lastWrite` stays within that of the primary's clock and drivers'
//! `maxStalenessSeconds` works on an idle set.

use crate::state::ServerState;
use std::sync::Arc;
use std::time::Duration;
use tailstream_replication::Member;

/// mongod's `periodicNoopIntervalSecs` default.
const PERIODIC_NOOP_INTERVAL: Duration = Duration::from_secs(10);

/// Runs for the life of the member: wakes on each change of its Raft's state and at
/// least once per interval.
pub async fn run(state: Arc<ServerState>, member: Arc<Member>) {
    let mut metrics = member.raft.metrics();
    let mut noted_term = None;
    loop {
        let changed = tokio::time::timeout(PERIODIC_NOOP_INTERVAL, metrics.changed()).await;
        if matches!(changed, Ok(Err(_))) {
            return; // the Raft shut down
        }
        if !member.may_write() {
            continue;
        }
        let term = metrics.borrow().current_term;
        let msg = if noted_term != Some(term) {
            "new primary"
        } else if idle_for(&state) >= PERIODIC_NOOP_INTERVAL {
            "periodic noop"
        } else {
            continue;
        };
        let written = crate::commands::blocking(&state, move |e| e.write_noop(msg)).await;
        match written {
            Ok(_) => noted_term = Some(term),
            Err(e) => tracing::debug!("the primary's {msg} entry: {}", e.message),
        }
    }
}

/// How long since the newest entry's cluster time (its seconds are wall-clock seconds).
fn idle_for(state: &ServerState) -> Duration {
    let newest = u64::from(state.engine.cluster_time().time);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Duration::from_secs(now.saturating_sub(newest))
}

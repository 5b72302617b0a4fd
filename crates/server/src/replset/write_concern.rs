//! `w: N` on a set: the write waits until N members have applied it (mongod counts
//! members whose applied optime reached the write's), or until `wtimeout`.
//!
//! A commit acknowledged here is already on a majority's logs (Raft), so `majority` and
//! `w: 1` need no wait; a number asks about application, which only each member knows:
//! the primary asks the others' `hello` for their `lastWrite.opTime` until enough of
//! them passed the write's time. (mongod's secondaries push their positions to the
//! primary instead, `replSetUpdatePosition`; asking is enough for the rare `w: N`
//! write, and costs the others nothing otherwise.)

use crate::state::ServerState;
use bson::{doc, Timestamp};
use std::time::{Duration, Instant};

/// The longest a `w: N` write waits without a `wtimeout` (mongod waits without end).
const NO_WTIMEOUT_LIMIT: Duration = Duration::from_secs(3600);
/// How long one member's `hello` may take.
const ASK_LIMIT: Duration = Duration::from_secs(1);
/// The first pause between rounds of asking, doubled up to the last.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LAST_PAUSE: Duration = Duration::from_millis(50);

/// The members that hold data: this one alone outside a set, else every member of the
/// set's configuration (voters and learners alike).
pub fn data_bearing_members(state: &ServerState) -> usize {
    match state.repl.member() {
        None => 1,
        Some(member) => member
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .count(),
    }
}

/// Waits until `members` members (this one among them) have applied the write of time
/// `write`, or `wtimeout` passes: false then.
pub async fn wait_for_members(
    state: &ServerState,
    members: u32,
    write: Timestamp,
    wtimeout: Option<Duration>,
) -> bool {
    let Some(member) = state.repl.member() else {
        return true;
    };
    // Boxed: every acknowledged write awaits this function, and the wait's future
    // would otherwise be copied into each write command's own (see `commands::gates`).
    Box::pin(wait_for_others(member, members, write, wtimeout)).await
}

/// [`wait_for_members`] on a member of a set.
async fn wait_for_others(
    member: &tailstream_replication::Member,
    members: u32,
    write: Timestamp,
    wtimeout: Option<Duration>,
) -> bool {
    let deadline = Instant::now() + wtimeout.unwrap_or(NO_WTIMEOUT_LIMIT);
    let others: Vec<String> = {
        let m = member.raft.metrics().borrow().clone();
        let nodes = m.membership_config.membership().nodes();
        nodes
            .filter(|(id, _)| **id != member.node)
            .map(|(_, n)| n.addr.clone())
            .collect()
    };
    let needed = (members as usize).saturating_sub(1);
    let mut done = vec![false; others.len()];
    let mut pause = FIRST_PAUSE;
    loop {
        for (host, done) in others.iter().zip(done.iter_mut()) {
            if !*done {
                *done = applied(host).await.is_some_and(|ts| ts >= write);
            }
        }
        if done.iter().filter(|d| **d).count() >= needed {
            return true;
        }
        if Instant::now() + pause > deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LAST_PAUSE);
    }
}

/// What member `host` has applied: its `hello`'s `lastWrite.opTime.ts`.
async fn applied(host: &str) -> Option<Timestamp> {
    let hello = doc! {"hello": 1, "$db": "admin"};
    let reply = tailstream_replication::network::ask_anonymous(host, &hello, ASK_LIMIT)
        .await
        .ok()?;
    reply
        .get_document("lastWrite")
        .and_then(|w| w.get_document("opTime"))
        .and_then(|o| o.get_timestamp("ts"))
        .ok()
}

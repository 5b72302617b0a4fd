//! A replica set's write path: the [`Proposer`] a member gives the engine, and what
//! a write saw of the pipelined commits, and waiting for it.
//!
//! A commit computed while earlier pipelined commits are still on their way to the
//! set reads their writes (the store's pending writes, see `Proposer`). When that
//! commit is itself proposed, its own entry comes after them, and waiting for it waits
//! for them. A write that proposes nothing (every document a duplicate key, an update
//! that matched nothing, an error) answers from what it read all the same, so its
//! reply must wait until what it read is committed, as mongod's reply to such a write
//! waits for the client's last optime: a duplicate key found only in a commit that
//! is then lost with its term would tell the client its document is stored.
//!
//! Each thread notes the newest pipelined commit its writes saw
//! ([`note_seen`], at every writer-lock acquisition of a commit); the server's
//! blocking call waits for it ([`crate::Engine::await_seen_writes`]) before it replies.

use crate::Engine;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use tailstream_query::error::{codes, Error, Result};

/// A replica set's write path (issue 27): a commit's writes are proposed to the set and
/// written into this member's store only once the set committed them (by the state
/// machine, `Engine::repl_apply_own`), never before; the commit then finishes in memory
/// as a local one does.
///
/// Two ways in. [`Proposer::submit`] (a pipelined commit: plain document writes) hands
/// the commit over under the writer lock and returns at once; the commit's writes are
/// held as pending in the store (`tailstream_storage::see_pending`) so the next commit,
/// computed while the set commits this one, reads them; the state machine stores the
/// entry and finishes it in memory ([`crate::Engine::repl_apply_pipelined`]), and the
/// caller waits for that after it let the writer lock go. [`Proposer::propose`] (every
/// other commit: catalog changes, capped collections, range deletes, trims) first waits
/// for every pipelined commit, then proposes and waits with the lock held.
pub trait Proposer: Send + Sync {
    /// Whether this member may write now (it leads the set and has applied everything
    /// before its own term); a commit is not even computed otherwise.
    fn writable(&self) -> bool;
    /// Blocks until `ops` are committed by the set and in this member's store; an error
    /// when they may never be (this member lost the lead: 10107 NotWritablePrimary).
    /// Waits first for every submitted commit (as [`Proposer::drain`]).
    fn propose(&self, ops: tailstream_storage::Ops) -> tailstream_query::error::Result<()>;
    /// Proposes a pipelined commit (called under the writer lock, in commit order);
    /// an error when this member may not write. The state machine applies it with
    /// `finish`.
    fn submit(
        &self,
        ops: tailstream_storage::Ops,
        finish: Finish,
    ) -> tailstream_query::error::Result<Box<dyn Submitted>>;
    /// Waits until no submitted commit is outstanding (each applied, or dead with the
    /// term it was proposed in); an error when this member lost the lead meanwhile.
    fn drain(&self) -> tailstream_query::error::Result<()>;
}

/// A submitted commit, to wait for (without the writer lock).
pub trait Submitted: Send {
    /// Blocks until the commit is applied here and finished in memory, and returns its
    /// durability sequence number; None when the operation's replication deadline (its
    /// `wtimeout`) passed first (noted on the operation; the commit stays queued, as
    /// mongod's write stays applied); an error when the wait stopped (the lead lost,
    /// the operation killed or out of time: the commit may still be applied later).
    fn wait(self: Box<Self>) -> tailstream_query::error::Result<Option<u64>>;
}

/// What the state machine finishes in memory once a pipelined commit is stored (what
/// `Txn::commit` does for a local commit): the recent oplog, the durability sequence,
/// the commit notice. Opaque outside the engine.
pub struct Finish {
    /// The commit's id among the store's pending writes.
    pub(crate) pending_id: u64,
    pub(crate) last_ts: Option<crate::core::time::ClusterTime>,
    pub(crate) ns_mask: u64,
    pub(crate) recent: Vec<crate::oplog::recent::RecentEntry>,
}

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Notes that this thread's write read the pipelined commits up to `pending_id`.
pub(crate) fn note_seen(pending_id: u64) {
    SEEN.with(|s| s.set(s.get().max(pending_id)));
}

/// How often a waiting reply looks at its operation and at the member's role.
const SEEN_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// Pipelined commits applied and forgotten, in id order.
#[derive(Default)]
pub(crate) struct Progress {
    ids: Mutex<Ids>,
    moved: Condvar,
}

/// Forgotten ranges kept, at most (a reply that waits longer than that many terms
/// changed is long gone).
const MAX_FORGOTTEN_RANGES: usize = 64;

#[derive(Default)]
struct Ids {
    /// Every pipelined commit up to this id was applied here, or forgotten.
    applied: u64,
    /// The ids forgotten (their term ended before they were committed), as inclusive
    /// ranges, newest last.
    forgotten: std::collections::VecDeque<(u64, u64)>,
}

impl Ids {
    fn was_forgotten(&self, id: u64) -> bool {
        self.forgotten
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&id))
    }
}

impl Progress {
    pub(crate) fn applied(&self, id: u64) {
        let mut ids = self.ids.lock();
        ids.applied = ids.applied.max(id);
        drop(ids);
        self.moved.notify_all();
    }

    /// Every id after the last applied, through `through`, will never be applied.
    pub(crate) fn forgotten(&self, through: u64) {
        let mut ids = self.ids.lock();
        if through > ids.applied {
            let from = ids.applied + 1;
            if ids.forgotten.len() == MAX_FORGOTTEN_RANGES {
                ids.forgotten.pop_front();
            }
            ids.forgotten.push_back((from, through));
            ids.applied = through;
        }
        drop(ids);
        self.moved.notify_all();
    }
}

fn not_primary() -> Error {
    Error::new(
        codes::NOT_WRITABLE_PRIMARY,
        "not primary: the writes this operation read were not committed",
    )
}

impl Engine {
    /// Starts an operation's note of what it saw (see the module's doc).
    pub fn forget_seen_writes(&self) {
        SEEN.with(|s| s.set(0));
    }

    /// Waits until every pipelined commit this thread's writes read is committed and
    /// applied; an error (10107) when one of them was forgotten with its term, when
    /// this member may no longer write, or when the operation must stop.
    pub fn await_seen_writes(&self) -> Result<()> {
        let seen = SEEN.with(|s| s.replace(0));
        if seen == 0 {
            return Ok(());
        }
        let op = tailstream_query::script::Operation::current();
        let mut ids = self.pipeline.ids.lock();
        loop {
            if ids.applied >= seen {
                return if ids.was_forgotten(seen) {
                    Err(not_primary())
                } else {
                    Ok(())
                };
            }
            if self.proposer().is_some_and(|p| !p.writable()) {
                return Err(not_primary());
            }
            op.check()?;
            let wait = match op.replication_deadline() {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) => left.min(SEEN_CHECK_INTERVAL),
                    None => {
                        // Its `wtimeout` passed: the reply says so (writeConcernError).
                        op.note_replication_timeout();
                        return Ok(());
                    }
                },
                None => SEEN_CHECK_INTERVAL,
            };
            self.pipeline.moved.wait_for(&mut ids, wait);
        }
    }
}

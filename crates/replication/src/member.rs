//! A member's write path: the engine's [`Proposer`] on openraft.
//!
//! A commit computed under the engine's writer lock is proposed as one entry and waits
//! (the writer lock held) until the entry is committed and applied here. Its entry names
//! it (`Commit::origin`: this member and a number); the state machine, finding the
//! number in [`Pending`], stores the writes only (`Engine::repl_apply_own`) and the
//! waiting commit brings the engine's memory along itself. Whichever of the two takes
//! the number out of `Pending` first decides: a proposal that failed (the lead moved)
//! but whose entry is applied later is applied like any other member's commit.
//!
//! Writable: this member leads and has applied an entry of its own term (everything
//! committed before it took office is applied), as mongod's new primary drains its
//! applier before it accepts writes. Until then a write fails with 10107.

use crate::types::{Commit, NodeId, Origin, TypeConfig};
use openraft::Raft;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use tailstream_engine::oplog::pipeline::{Finish, Proposer, Submitted};
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::script::Operation;
use tailstream_engine::repl::Ops;

/// Pipelined commits outstanding at once, at most (the next waits, the writer lock
/// held, for the oldest): bounds what waits in memory, pending and in the log.
const MAX_PIPELINED_COMMITS: usize = 64;

/// Bytes of pipelined commits outstanding at once, at most (one is always allowed).
const MAX_PIPELINED_BYTES: usize = 64 << 20;

/// A pipelined commit waiting for its entry: what finishes it, who waits for it.
struct Slot {
    finish: Finish,
    done: tokio::sync::oneshot::Sender<Result<u64>>,
    bytes: usize,
}

/// The pipelined commits outstanding, by number, and the term they were proposed in.
#[derive(Default)]
struct Pipeline {
    term: u64,
    slots: BTreeMap<u64, Slot>,
    bytes: usize,
}

/// How an applied entry is this member's.
pub enum Claim {
    /// Another member's, or one whose proposer gave it up: applied as any.
    Others,
    /// A waiting commit's, proposed with the writer lock held: stored only.
    Held,
    /// A pipelined commit's: stored and finished here, its waiter told.
    Pipelined(Finish, tokio::sync::oneshot::Sender<Result<u64>>),
}

/// This member's proposed commits whose entries are not applied yet, by number.
pub struct Pending {
    node: NodeId,
    pipeline: Mutex<Pipeline>,
    /// Signalled when pipelined commits leave (`drain` waits on it).
    left: Condvar,
    seqs: Mutex<HashSet<u64>>,
    /// A proposal that stopped waiting for its entry (its `maxTimeMS` passed, it was
    /// killed): its number and the term it was proposed in. Its entry
    /// may still commit, so no later commit may be computed in that term before it is
    /// applied here: a commit reads what the commits before it wrote.
    abandoned: Mutex<Option<(u64, u64)>>,
}

impl Pending {
    pub fn new(node: NodeId) -> Pending {
        Pending {
            node,
            pipeline: Mutex::new(Pipeline::default()),
            left: Condvar::new(),
            seqs: Mutex::new(HashSet::new()),
            abandoned: Mutex::new(None),
        }
    }

    fn abandon(&self, seq: u64, term: u64) {
        *self.abandoned.lock().unwrap_or_else(|e| e.into_inner()) = Some((seq, term));
    }

    /// Whether writes wait for an abandoned proposal's entry in `term` (a new term
    /// starts only once every entry before it is applied, so none waits then).
    pub fn holds_writes(&self, term: u64) -> bool {
        let mut g = self.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        match *g {
            Some((_, t)) if t == term => true,
            Some(_) => {
                *g = None;
                false
            }
            None => false,
        }
    }

    fn insert(&self, seq: u64) {
        self.seqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(seq);
    }

    /// Takes out `seq`: true when it was still waiting.
    fn take(&self, seq: u64) -> bool {
        self.seqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&seq)
    }

    fn pipeline(&self) -> std::sync::MutexGuard<'_, Pipeline> {
        self.pipeline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a commit with this origin is one of this member's still waiting (taken
    /// out: see [`Claim`]).
    pub fn claim(&self, origin: Option<Origin>) -> Claim {
        let Some(o) = origin.filter(|o| o.node == self.node) else {
            return Claim::Others;
        };
        let slot = {
            let mut p = self.pipeline();
            let slot = p.slots.remove(&o.seq);
            if let Some(s) = &slot {
                p.bytes -= s.bytes;
            }
            slot
        };
        if let Some(slot) = slot {
            self.left.notify_all();
            return Claim::Pipelined(slot.finish, slot.done);
        }
        let mut abandoned = self.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        if abandoned.is_some_and(|(seq, _)| seq == o.seq) {
            *abandoned = None; // its entry is applied (as any member's): writes go on
        }
        drop(abandoned);
        if self.take(o.seq) {
            Claim::Held
        } else {
            Claim::Others
        }
    }

    /// Whether pipelined commits of a term before `term` are outstanding: an entry of
    /// `term` is being applied, so they will never be (see [`Pending::forget_pipelined`]).
    pub fn pipelined_before(&self, term: u64) -> bool {
        let p = self.pipeline();
        !p.slots.is_empty() && p.term < term
    }

    /// Drops every outstanding pipelined commit (their waiters get 10107); the engine
    /// must then forget them too (`Engine::repl_pipeline_reset`).
    pub fn forget_pipelined(&self) {
        let slots = std::mem::take(&mut *self.pipeline());
        for (_, slot) in slots.slots {
            let _ = slot.done.send(Err(not_primary()));
        }
        self.left.notify_all();
    }

    /// Registers pipelined commit `seq`, waiting while the pipeline is full (with the
    /// writer lock held) unless the lead is gone (`still_leads`) or the operation stops.
    fn enter(&self, seq: u64, term: u64, slot: Slot, still_leads: impl Fn() -> bool) -> Result<()> {
        let fits = |p: &Pipeline| {
            p.slots.len() < MAX_PIPELINED_COMMITS
                && (p.slots.is_empty() || p.bytes + slot.bytes <= MAX_PIPELINED_BYTES)
        };
        let mut p = self.wait_until(fits, &still_leads)?;
        if !p.slots.is_empty() && p.term != term {
            return Err(not_primary());
        }
        p.term = term;
        p.bytes += slot.bytes;
        p.slots.insert(seq, slot);
        Ok(())
    }

    /// Takes pipelined commit `seq` back out (its proposal was refused).
    fn leave(&self, seq: u64) -> Option<Slot> {
        let mut p = self.pipeline();
        let slot = p.slots.remove(&seq);
        if let Some(s) = &slot {
            p.bytes -= s.bytes;
        }
        slot
    }

    /// Waits until no pipelined commit is outstanding; an error once the lead is gone.
    fn drain(&self, still_leads: impl Fn() -> bool) -> Result<()> {
        self.wait_until(|p| p.slots.is_empty(), &still_leads)
            .map(drop)
    }

    /// Waits (pipelined commits leaving) until `done` holds of the pipeline; an error
    /// once the lead is gone or the operation must stop.
    fn wait_until(
        &self,
        done: impl Fn(&Pipeline) -> bool,
        still_leads: &impl Fn() -> bool,
    ) -> Result<std::sync::MutexGuard<'_, Pipeline>> {
        let op = Operation::current();
        // Not sooner than MIN_QUEUE_WAIT: see there.
        let deadline = op
            .replication_deadline()
            .map(|d| d.max(std::time::Instant::now() + MIN_QUEUE_WAIT));
        let mut p = self.pipeline();
        while !done(&p) {
            if !still_leads() {
                return Err(not_primary());
            }
            op.check()?;
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                // This write did nothing yet: it fails whole (mongod would have applied
                // it and answered with a writeConcernError).
                return Err(Error::new(
                    WRITE_CONCERN_FAILED,
                    "waiting for replication timed out: the writes queued before this one \
                     are not committed yet",
                ));
            }
            p = self
                .left
                .wait_timeout(p, OPERATION_CHECK_INTERVAL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(p)
    }
}

fn not_primary() -> Error {
    Error::new(codes::NOT_WRITABLE_PRIMARY, "not primary")
}

/// mongod's WriteConcernFailed.
const WRITE_CONCERN_FAILED: i32 = 64;

/// The least a write waits for the commits queued before it (a catalog change drains
/// them; a full pipeline makes room) before its `wtimeout` fails it whole. With a
/// majority up they are committed in milliseconds, and the write then runs and waits
/// for its write concern as mongod's does; a wtimeout shorter than that wait (pymongo's
/// spec tests send 1 ms) failed such a write whole whenever the queue was not empty at
/// once (test_raise_wtimeout, in one CI run of three on 2 vCPUs).
const MIN_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// mongod's InterruptedDueToReplStateChange (retryable).
const INTERRUPTED_DUE_TO_REPL_STATE_CHANGE: i32 = 11602;

/// A write whose entry was proposed and whose wait ended because this member lost the
/// lead: unlike 10107 (nothing was proposed), its entry may still commit under the new
/// leader, so its fate is unknown (a retryable write is applied once all the same).
fn interrupted_by_state_change() -> Error {
    Error::new(
        INTERRUPTED_DUE_TO_REPL_STATE_CHANGE,
        "operation was interrupted because this member lost the lead; the write may \
         still commit",
    )
}

/// The engine's proposer for one member.
pub struct MemberProposer {
    node: NodeId,
    raft: Raft<TypeConfig>,
    pending: std::sync::Arc<Pending>,
    next_seq: AtomicU64,
    /// Set while the member hands its office over: no new proposal.
    writes_held: std::sync::Arc<AtomicBool>,
    runtime: tokio::runtime::Handle,
}

impl MemberProposer {
    /// `runtime`: where openraft runs; a proposal blocks its caller's thread (the
    /// engine's writes are synchronous), never that runtime's.
    pub fn new(
        node: NodeId,
        raft: Raft<TypeConfig>,
        pending: std::sync::Arc<Pending>,
        writes_held: std::sync::Arc<AtomicBool>,
        runtime: tokio::runtime::Handle,
    ) -> MemberProposer {
        MemberProposer {
            node,
            raft,
            pending,
            next_seq: AtomicU64::new(1),
            writes_held,
            runtime,
        }
    }
}

/// Whether `node` may write, by its Raft's metrics: it leads, a quorum has
/// acknowledged it as leader (a member restarted with its old term's vote believes it
/// leads until it hears otherwise), and it has applied an entry of its own term (see
/// the module's doc). The one rule the proposer and what the server tells drivers
/// share.
pub fn may_write(m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>, node: NodeId) -> bool {
    m.current_leader == Some(node)
        && m.state == openraft::ServerState::Leader
        && m.millis_since_quorum_ack.is_some()
        && m.last_applied.map(|l| l.leader_id.term) == Some(m.current_term)
}

/// How often a waiting proposal looks at its operation (killed, out of time).
const OPERATION_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// How a proposal's wait ended.
enum Waited {
    Committed,
    LostTheLead,
    /// The operation was killed, or its `maxTimeMS` passed.
    Stopped(Error),
}

/// Proposes `commit` and waits until it is committed and applied here, until this
/// member is no longer the leader of the term it proposed in, or until `op` must stop. The proposal holds the
/// engine's writer lock, which applying another leader's entries needs: a member that
/// found out it lost the lead (a leader restarted in an old term, a step-down) must
/// give the lock back at once rather than wait for an entry that may never commit.
/// Its entry may still commit under the new leader; `Pending` then applies it as any
/// other member's (the client saw an error, as mongod's interrupted writes do).
async fn commit_or_lose_the_lead(
    raft: &Raft<TypeConfig>,
    commit: Commit,
    term: u64,
    op: &Operation,
) -> Waited {
    let mut metrics = raft.metrics();
    let write = raft.client_write(commit);
    tokio::pin!(write);
    let mut check = tokio::time::interval(OPERATION_CHECK_INTERVAL);
    loop {
        tokio::select! {
            written = &mut write => {
                return if written.is_ok() { Waited::Committed } else { Waited::LostTheLead };
            }
            changed = metrics.changed() => {
                if changed.is_err() {
                    return Waited::LostTheLead;
                }
                let m = metrics.borrow();
                if m.current_term != term || m.state != openraft::ServerState::Leader {
                    return Waited::LostTheLead;
                }
            }
            // Not at the write's `wtimeout`: a driver expects a `writeConcernError` on an
            // applied write for that (pymongo's spec tests send 1 ms), and this write is
            // not applied even here yet.
            _ = check.tick() => {
                if let Err(e) = op.check() {
                    return Waited::Stopped(e);
                }
            }
        }
    }
}

/// Whether `node` may write now: [`may_write`] by its metrics, not handing its office
/// over (`writes_held`), and no write of its term waiting for an abandoned proposal's
/// entry (`pending`). The proposer and what the server tells drivers use this one rule.
pub(crate) fn writable(
    raft: &Raft<TypeConfig>,
    node: NodeId,
    writes_held: &AtomicBool,
    pending: &Pending,
) -> bool {
    if writes_held.load(Ordering::Acquire) {
        return false;
    }
    let metrics = raft.metrics();
    let term = {
        let m = metrics.borrow();
        if !may_write(&m, node) {
            return false;
        }
        m.current_term
    };
    !pending.holds_writes(term)
}

impl MemberProposer {
    /// Whether this member still leads in `term`.
    fn leads_in(&self, term: u64) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.current_term == term
            && m.state == openraft::ServerState::Leader
            && m.current_leader == Some(self.node)
    }

    /// The entry's payload: `ops`, named as this member's commit `seq`.
    fn commit(&self, seq: u64, ops: Ops) -> Commit {
        Commit {
            origin: Some(Origin {
                node: self.node,
                seq,
            }),
            ops: ops.into_bytes(),
        }
    }

    fn current_term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }
}

/// A pipelined commit's wait (see `Submitted`).
struct Ticket {
    done: tokio::sync::oneshot::Receiver<Result<u64>>,
    raft: Raft<TypeConfig>,
    term: u64,
    op: std::sync::Arc<Operation>,
    runtime: tokio::runtime::Handle,
}

impl Ticket {
    async fn wait_async(mut self) -> Result<Option<u64>> {
        let mut metrics = self.raft.metrics();
        let mut check = tokio::time::interval(OPERATION_CHECK_INTERVAL);
        let deadline = self.op.replication_deadline();
        let wtimeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(wtimeout);
        loop {
            tokio::select! {
                biased;
                done = &mut self.done => {
                    // A sender dropped unsent: the commit was forgotten with its term.
                    return done.unwrap_or_else(|_| Err(not_primary())).map(Some);
                }
                _ = &mut wtimeout => {
                    self.op.note_replication_timeout();
                    return Ok(None);
                }
                changed = metrics.changed() => {
                    let lost = changed.is_err() || {
                        let m = metrics.borrow();
                        m.current_term != self.term || m.state != openraft::ServerState::Leader
                    };
                    if lost {
                        // Applied meanwhile, or not (then it may be still, as any member's
                        // commit is, or be forgotten with its term).
                        return self
                            .done
                            .try_recv()
                            .unwrap_or_else(|_| Err(interrupted_by_state_change()))
                            .map(Some);
                    }
                }
                _ = check.tick() => self.op.check()?,
            }
        }
    }
}

impl Submitted for Ticket {
    fn wait(self: Box<Self>) -> Result<Option<u64>> {
        let runtime = self.runtime.clone();
        tokio::task::block_in_place(|| runtime.block_on(self.wait_async()))
    }
}

impl Proposer for MemberProposer {
    fn writable(&self) -> bool {
        writable(&self.raft, self.node, &self.writes_held, &self.pending)
    }

    fn submit(&self, ops: Ops, finish: Finish) -> Result<Box<dyn Submitted>> {
        if !self.writable() {
            return Err(not_primary());
        }
        let term = self.current_term();
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let bytes = ops.as_bytes().len();
        let (done, rx) = tokio::sync::oneshot::channel();
        let slot = Slot {
            finish,
            done,
            bytes,
        };
        self.pending
            .enter(seq, term, slot, || self.leads_in(term))?;
        let commit = self.commit(seq, ops);
        // Queued to openraft before the writer lock goes: entries keep commit order.
        let raft = self.raft.clone();
        let sent = tokio::task::block_in_place(|| {
            self.runtime
                .block_on(async { raft.client_write_ff(commit).await })
        });
        if sent.is_err() {
            self.pending.leave(seq);
            return Err(not_primary());
        }
        // openraft's own answer is not awaited: the state machine's, through `done`, is.
        drop(sent);
        Ok(Box::new(Ticket {
            done: rx,
            raft: self.raft.clone(),
            term,
            op: Operation::current(),
            runtime: self.runtime.clone(),
        }))
    }

    fn drain(&self) -> Result<()> {
        let term = self.current_term();
        self.pending.drain(|| self.leads_in(term))
    }

    fn propose(&self, ops: Ops) -> Result<()> {
        if !self.writable() {
            return Err(not_primary());
        }
        self.drain()?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.pending.insert(seq);
        let commit = self.commit(seq, ops);
        let raft = self.raft.clone();
        let term = raft.metrics().borrow().current_term;
        // The command's operation (its kill flag, `maxTimeMS`), current on this thread.
        let op = Operation::current();
        // Off openraft's runtime threads: a worker of it blocked here would stall the
        // very tasks that commit the entry.
        let result = tokio::task::block_in_place(|| {
            self.runtime
                .block_on(async { commit_or_lose_the_lead(&raft, commit, term, &op).await })
        });
        match result {
            Waited::Committed => Ok(()),
            // The entry was applied here meanwhile, by this proposal's claim.
            _ if !self.pending.take(seq) => Ok(()),
            // Not applied here, and now never finished by this proposal.
            Waited::LostTheLead => Err(interrupted_by_state_change()),
            Waited::Stopped(e) => {
                self.pending.abandon(seq, term);
                Err(e)
            }
        }
    }
}

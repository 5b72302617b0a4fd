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
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tailstream_engine::core::Proposer;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::script::Operation;
use tailstream_engine::repl::Ops;

/// This member's proposed commits whose entries are not applied yet, by number.
pub struct Pending {
    node: NodeId,
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

    /// Whether a commit with this origin is one of this member's, still waiting (taken
    /// out: its proposer finishes it).
    pub fn claim(&self, origin: Option<Origin>) -> bool {
        let Some(o) = origin.filter(|o| o.node == self.node) else {
            return false;
        };
        let mut abandoned = self.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        if abandoned.is_some_and(|(seq, _)| seq == o.seq) {
            *abandoned = None; // its entry is applied (as any member's): writes go on
        }
        drop(abandoned);
        self.take(o.seq)
    }
}

fn not_primary() -> Error {
    Error::new(codes::NOT_WRITABLE_PRIMARY, "not primary")
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

impl Proposer for MemberProposer {
    fn writable(&self) -> bool {
        writable(&self.raft, self.node, &self.writes_held, &self.pending)
    }

    fn propose(&self, ops: Ops) -> Result<()> {
        if !self.writable() {
            return Err(not_primary());
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        self.pending.insert(seq);
        let commit = Commit {
            origin: Some(Origin {
                node: self.node,
                seq,
            }),
            ops: ops.into_bytes(),
        };
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
            Waited::LostTheLead => Err(not_primary()),
            Waited::Stopped(e) => {
                self.pending.abandon(seq, term);
                Err(e)
            }
        }
    }
}

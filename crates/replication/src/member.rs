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
use tailstream_engine::repl::Ops;

/// This member's proposed commits whose entries are not applied yet, by number.
pub struct Pending {
    node: NodeId,
    seqs: Mutex<HashSet<u64>>,
}

impl Pending {
    pub fn new(node: NodeId) -> Pending {
        Pending {
            node,
            seqs: Mutex::new(HashSet::new()),
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
        origin.is_some_and(|o| o.node == self.node && self.take(o.seq))
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

/// Proposes `commit` and waits until it is committed and applied here, or until this
/// member is no longer the leader of the term it proposed in. The proposal holds the
/// engine's writer lock, which applying another leader's entries needs: a member that
/// found out it lost the lead (a leader restarted in an old term, a step-down) must
/// give the lock back at once rather than wait for an entry that may never commit.
/// Its entry may still commit under the new leader; `Pending` then applies it as any
/// other member's (the client saw an error, as mongod's interrupted writes do).
async fn commit_or_lose_the_lead(raft: &Raft<TypeConfig>, commit: Commit) -> bool {
    let mut metrics = raft.metrics();
    let term = metrics.borrow().current_term;
    let write = raft.client_write(commit);
    tokio::pin!(write);
    loop {
        tokio::select! {
            written = &mut write => return written.is_ok(),
            changed = metrics.changed() => {
                if changed.is_err() {
                    return false;
                }
                let m = metrics.borrow();
                if m.current_term != term || m.state != openraft::ServerState::Leader {
                    return false;
                }
            }
        }
    }
}

impl Proposer for MemberProposer {
    fn writable(&self) -> bool {
        !self.writes_held.load(Ordering::Acquire)
            && may_write(&self.raft.metrics().borrow(), self.node)
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
        // Off openraft's runtime threads: a worker of it blocked here would stall the
        // very tasks that commit the entry.
        let result = tokio::task::block_in_place(|| {
            self.runtime
                .block_on(async move { commit_or_lose_the_lead(&raft, commit).await })
        });
        match result {
            true => Ok(()),
            // Not applied here, and now never finished by this proposal.
            false if self.pending.take(seq) => Err(not_primary()),
            // The entry was applied here meanwhile, by this proposal's claim.
            false => Ok(()),
        }
    }
}

//! A leader handing its office over (mongod's `replSetStepDown`) and a member holding
//! back from elections (`replSetFreeze`, and a stepped-down leader for its step-down
//! period).
//!
//! openraft 0.9 has no leadership transfer (0.10 adds one), so a step-down is made of
//! what 0.9 offers, in this order:
//! 1. the leader holds new writes back (`Member::writes_held`: its proposer and `hello`
//!    see it at once, so drivers and writes go elsewhere);
//! 2. it waits, up to the catch-up period, for a voter whose log matches its own last
//!    entry (without one and without `force`, it takes the writes back and fails);
//! 3. it stops standing for election for the step-down period and stops its
//!    heartbeats, so the other members' leases run out;
//! 4. it asks the caught-up voter to stand for election now (`rpc::Kind::Elect`). The
//!    old leader grants that vote (the candidate's log is as long as its own); a third
//!    member grants it once its lease from the old leader has run out. A frozen
//!    member declines, and the next caught-up voter is asked. Failing all, the
//!    members' own election timers elect someone, never the old leader;
//! 5. once another term has begun, the old leader's heartbeats and writes come back
//!    (it is a follower: its proposer refuses on its own), and its elections after the
//!    step-down period.

use crate::set::Member;
use crate::types::NodeId;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a waiting step-down looks at the replication progress again (metrics
/// changes also wake it).
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long the old leader waits for a new term after asking for it, in election
/// timeouts (each election takes at most two: openraft's randomized maximum).
const NEW_TERM_WAIT_ELECTIONS: u32 = 4;

/// Why a step-down did not happen (mongod's codes are the server's to choose).
#[derive(Debug, PartialEq, Eq)]
pub enum StepDownError {
    /// This member is not a writable leader.
    NotLeader,
    /// No voter caught up within the catch-up period (and no `force`).
    NoneCaughtUp,
    /// No other member took office within the wait.
    NoNewTerm,
}

/// A step-down's terms.
#[derive(Debug, Clone, Copy)]
pub struct StepDown {
    /// How long the member stands for no election afterwards.
    pub period: Duration,
    /// The most it waits for a voter whose log matches its own.
    pub catch_up: Duration,
    /// Step down even when no voter caught up.
    pub force: bool,
    /// The set's election timeout (bounds the waits for a new term).
    pub election_timeout: Duration,
}

/// Until when this member does not stand for election; each hold replaces the one
/// before (as `replSetFreeze` does), and only the newest hold's timer lifts it.
#[derive(Default, Clone)]
pub struct ElectionHold(Arc<Mutex<Hold>>);

#[derive(Default)]
struct Hold {
    /// The newest hold's number: a timer lifts only its own hold.
    number: u64,
    until: Option<Instant>,
}

impl ElectionHold {
    /// Starts a hold until `until` (None: none); returns its number.
    fn start(&self, until: Option<Instant>) -> u64 {
        let mut hold = self.0.lock().unwrap_or_else(|e| e.into_inner());
        hold.number += 1;
        hold.until = until;
        hold.number
    }

    /// Whether hold `number` is still the newest.
    fn is_newest(&self, number: u64) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).number == number
    }

    fn held_now(&self) -> bool {
        let hold = self.0.lock().unwrap_or_else(|e| e.into_inner());
        hold.until.is_some_and(|end| Instant::now() < end)
    }
}

impl Member {
    /// Holds this member back from elections for `period` (zero: lifts a hold now).
    pub fn hold_elections(&self, period: Duration) {
        let number = self
            .elections
            .start((!period.is_zero()).then(|| Instant::now() + period));
        let runtime_config = self.raft.runtime_config();
        if period.is_zero() {
            runtime_config.elect(true);
            return;
        }
        runtime_config.elect(false);
        let raft = self.raft.clone();
        let elections = self.elections.clone();
        tokio::spawn(async move {
            tokio::time::sleep(period).await;
            if elections.is_newest(number) {
                raft.runtime_config().elect(true);
            }
        });
    }

    /// Stands for election now (asked by a leader stepping down), unless this member
    /// is held back from elections (frozen, or stepped down itself).
    pub async fn stand_for_election(&self) -> Result<(), String> {
        if self.elections_held() {
            return Err("this member is frozen: it stands for no election now".into());
        }
        self.raft.trigger().elect().await.map_err(|e| e.to_string())
    }

    /// Whether this member is held back from elections now.
    pub fn elections_held(&self) -> bool {
        self.elections.held_now()
    }

    /// Steps down (see the module's doc and [`StepDown`]).
    pub async fn step_down(&self, how: StepDown) -> Result<(), StepDownError> {
        if !self.may_write() {
            return Err(StepDownError::NotLeader);
        }
        self.writes_held.store(true, Ordering::Release);
        self.role_changed.notify_waiters();
        let result = self.hand_over(how).await;
        self.raft.runtime_config().heartbeat(true);
        self.writes_held.store(false, Ordering::Release);
        self.role_changed.notify_waiters();
        result
    }

    async fn hand_over(&self, how: StepDown) -> Result<(), StepDownError> {
        let StepDown {
            period,
            catch_up,
            force,
            election_timeout,
        } = how;
        let successors = self.caught_up_voters(catch_up).await;
        if successors.is_empty() && !force {
            return Err(StepDownError::NoneCaughtUp);
        }
        let term = self.raft.metrics().borrow().current_term;
        self.hold_elections(period);
        self.raft.runtime_config().heartbeat(false);
        // The first caught-up voter that is not frozen itself takes office.
        for (id, addr) in successors {
            match crate::network::ask_to_stand(&addr, id, election_timeout).await {
                Ok(()) => break,
                Err(e) => tracing::info!(successor = id, "step-down: {e}"),
            }
        }
        let wait = election_timeout * NEW_TERM_WAIT_ELECTIONS;
        let new_term = self
            .raft
            .wait(Some(wait))
            .metrics(|m| m.current_term > term, "another term began")
            .await;
        if new_term.is_err() {
            self.hold_elections(Duration::ZERO);
            return Err(StepDownError::NoNewTerm);
        }
        Ok(())
    }

    /// The voters other than this member whose logs match this member's last entry
    /// (waited for up to `limit`, until there is one): their ids and addresses.
    async fn caught_up_voters(&self, limit: Duration) -> Vec<(NodeId, String)> {
        let deadline = Instant::now() + limit;
        let mut metrics = self.raft.metrics();
        loop {
            let found = {
                let m = metrics.borrow();
                let last = m.last_log_index;
                let membership = m.membership_config.membership();
                let replication = m.replication.clone().unwrap_or_default();
                membership
                    .voter_ids()
                    .filter(|id| *id != self.node)
                    .filter(|id| {
                        replication
                            .get(id)
                            .is_some_and(|l| l.map(|l| l.index) >= last)
                    })
                    .filter_map(|id| membership.get_node(&id).map(|n| (id, n.addr.clone())))
                    .collect::<Vec<_>>()
            };
            let now = Instant::now();
            if !found.is_empty() || now >= deadline {
                return found;
            }
            let wait = (deadline - now).min(POLL_INTERVAL);
            let _ = tokio::time::timeout(wait, metrics.changed()).await;
        }
    }
}

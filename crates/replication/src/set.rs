//! A member of a replica set: its Raft started over its engine (the log store, the
//! proposing state machine, the engine's proposer), and the set's initiation.
//!
//! Initiation (`replSetInitiate` of several members) as openraft grows a cluster: the
//! initiating member starts as the only voter, takes office, snapshots its state
//! machine (so what it held before, and the log's start, reach the others as one
//! snapshot), adds every other member as a learner (each catches up from that snapshot)
//! and then makes them all voters. The others need no initiation: a member's Raft is
//! made on the first call it receives, with the id the call names.

use crate::member::{MemberProposer, Pending};
use crate::network::Network;
use crate::types::{NodeId, TypeConfig};
use crate::{LogStore, StateMachine};
use openraft::{BasicNode, ChangeMembers, Config, Raft};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::repl::log::Marker;
use tailstream_engine::Engine;

/// How long initiation waits for each of its steps (taking office, the snapshot, a
/// learner catching up) before it reports a failure.
const STEP_LIMIT: Duration = Duration::from_secs(60);

/// Entries one append call carries (see `config`).
const MAX_ENTRIES_PER_APPEND: u64 = 16;

/// mongod's default `settings.electionTimeoutMillis`.
pub const DEFAULT_ELECTION_TIMEOUT_MILLIS: u64 = 10_000;

/// openraft's `election_timeout_min` and `_max` in thousandths of the election timeout
/// (see `config`): lease (max) plus the randomized part (min to max) is 1 to 1.15 times it.
pub const ELECTION_MIN_PER_MILLE: u64 = 425;
pub const ELECTION_MAX_PER_MILLE: u64 = 575;

/// One member: its id and its Raft.
pub struct Member {
    pub node: NodeId,
    pub raft: Raft<TypeConfig>,
    /// Writes held back while this member hands its office over (see `handover`);
    /// shared with its proposer.
    pub(crate) writes_held: Arc<AtomicBool>,
    /// When this member may stand for election again (see `handover`).
    pub(crate) elections: crate::handover::ElectionHold,
    /// Woken when `writes_held` changes (a change the Raft's metrics do not show), for
    /// whoever reports the member's role (an awaitable `hello`).
    pub role_changed: tokio::sync::Notify,
    /// Pauses this member's application of entries (`rsSyncApplyStop`).
    pub apply_paused: Arc<AtomicBool>,
    /// Its proposals not applied yet (an abandoned one holds writes back).
    pending: Arc<crate::member::Pending>,
}

/// The member's Raft configuration: a follower stands for election after
/// `election_timeout_millis` to 1.15 times that without a leader's heartbeat (mongod's
/// `electionTimeoutMillis` with its `electionTimeoutOffsetLimitFraction` of 0.15),
/// heartbeats five times as often (mongod's 2 s against its 10 s; openraft also bounds
/// every append call by the heartbeat interval, and a tenth, 100 ms at a 1 s election
/// timeout, timed out appends that waited for a busy follower's fsync on 2 cores);
/// every log entry in a snapshot purged at once (a member behind the log gets the
/// snapshot).
///
/// openraft 0.9 times a follower of a live leader out after its leader lease (its
/// `election_timeout_max`, during which it also refuses votes) *plus* its own
/// randomized `election_timeout` (between min and max): so min and max are set to
/// [`ELECTION_MIN_PER_MILLE`] and [`ELECTION_MAX_PER_MILLE`] of the timeout, whose sum
/// spans 1 to 1.15 times it. With both at 1 and 2 times the timeout (the first form),
/// followers stood after 3 to 4 times it and a failover at 1,000 ms took 3.7 s (p50,
/// bench/history/2026-11-27-replset-failover.md). A candidate whose election fails
/// stands again after its own randomized part alone.
fn config(set_name: &str, election_timeout_millis: u64) -> Result<Arc<Config>, String> {
    let timeout = election_timeout_millis.max(100);
    let config = Config {
        cluster_name: set_name.to_string(),
        heartbeat_interval: heartbeat_interval_millis(timeout),
        election_timeout_min: timeout * ELECTION_MIN_PER_MILLE / 1000,
        election_timeout_max: timeout * ELECTION_MAX_PER_MILLE / 1000,
        max_in_snapshot_log_to_keep: 0,
        // Each chunk's call, the last one's answer waiting for the whole install
        // (the state machine cleared and written again, then synced): far longer
        // than openraft's default 200 ms for a large store (a timed-out last chunk
        // makes the leader send the snapshot again).
        install_snapshot_timeout: timeout.max(INSTALL_SNAPSHOT_TIMEOUT_MILLIS),
        // Entries per append call (openraft's default 300): a call is one message on
        // the wire, at most 48 MB, and a commit of 1,000 documents of 1 KB is about
        // 1 MB of writes. A single commit over that limit cannot be replicated yet.
        max_payload_entries: MAX_ENTRIES_PER_APPEND,
        ..Default::default()
    };
    config.validate().map(Arc::new).map_err(|e| e.to_string())
}

/// The longest a snapshot chunk's call may take (see `config`): a member joining a
/// set that holds 1 GB of documents had them all 9.3 s after it was added (the
/// snapshot written, sent and installed; bench/replset.sh --scenarios join, 2 vCPUs),
/// so a minute leaves room for stores several times that.
const INSTALL_SNAPSHOT_TIMEOUT_MILLIS: u64 = 60_000;

/// The leader's heartbeat interval for an election timeout (see `config`).
pub fn heartbeat_interval_millis(election_timeout_millis: u64) -> u64 {
    (election_timeout_millis / 5).max(20)
}

/// The id this member was started with before, if any (a restarted member rejoins).
pub fn stored_node(engine: &Engine) -> Option<NodeId> {
    let bytes = engine.repl_log_marker(Marker::Node).ok()??;
    Some(u64::from_be_bytes(bytes.as_slice().try_into().ok()?))
}

impl Member {
    /// Starts this member's Raft as `node` (kept in the log's markers); from now on
    /// the engine's writes go through the set.
    pub async fn start(
        engine: Arc<Engine>,
        node: NodeId,
        set_name: &str,
        election_timeout_millis: u64,
    ) -> Result<Member, String> {
        if let Some(stored) = stored_node(&engine) {
            if stored != node {
                return Err(format!(
                    "this member is {stored} in its set; a call named it {node}"
                ));
            }
        }
        engine
            .repl_log_set_marker(Marker::Node, &node.to_be_bytes())
            .map_err(|e| e.message)?;
        let pending = Arc::new(Pending::new(node));
        let writes_held = Arc::new(AtomicBool::new(false));
        let state_machine = StateMachine::proposing(engine.clone(), pending.clone());
        let apply_paused = state_machine.apply_pause_switch();
        let log = LogStore::new(engine.clone());
        let appended = log.appended_bytes();
        let raft = Raft::new(
            node,
            config(set_name, election_timeout_millis)?,
            Network,
            log,
            state_machine,
        )
        .await
        .map_err(|e| e.to_string())?;
        crate::log_window::spawn(raft.clone(), appended);
        let proposer = MemberProposer::new(
            node,
            raft.clone(),
            pending.clone(),
            writes_held.clone(),
            tokio::runtime::Handle::current(),
        );
        engine.set_proposer(Some(Arc::new(proposer)));
        Ok(Member {
            node,
            raft,
            writes_held,
            elections: Default::default(),
            role_changed: tokio::sync::Notify::new(),
            apply_paused,
            pending,
        })
    }

    /// Whether this member is handing its office over (writes held back).
    pub fn stepping_down(&self) -> bool {
        self.writes_held.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether this member may write now: it leads, has applied an entry of its term,
    /// is not handing its office over, and no write of its term stopped waiting for an
    /// entry that is not applied yet.
    pub fn may_write(&self) -> bool {
        crate::member::writable(&self.raft, self.node, &self.writes_held, &self.pending)
    }

    /// Initiates the set of `members` (this one among them; see the module's doc).
    pub async fn initiate(&self, members: BTreeMap<NodeId, BasicNode>) -> Result<(), String> {
        let me = members
            .get(&self.node)
            .ok_or("the configuration does not name this member")?
            .clone();
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        self.raft
            .initialize(BTreeMap::from([(self.node, me)]))
            .await
            .map_err(|e| fail("initiating", &e))?;
        let node = self.node;
        self.raft
            .wait(Some(STEP_LIMIT))
            .metrics(
                move |m| crate::member::may_write(m, node),
                "this member leads its new set",
            )
            .await
            .map_err(|e| fail("taking office", &e))?;
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| fail("snapshotting", &e))?;
        self.raft
            .wait(Some(STEP_LIMIT))
            .metrics(
                |m| m.snapshot.is_some() && m.purged.is_some(),
                "the log's start is a snapshot",
            )
            .await
            .map_err(|e| fail("snapshotting", &e))?;
        for (id, addr) in members.iter().filter(|(id, _)| **id != node) {
            self.raft
                .add_learner(*id, addr.clone(), true)
                .await
                .map_err(|e| fail(&format!("adding {}", addr.addr), &e))?;
        }
        let voters: BTreeSet<NodeId> = members.keys().copied().collect();
        self.raft
            .change_membership(voters, false)
            .await
            .map_err(|e| fail("making every member a voter", &e))?;
        Ok(())
    }

    /// A new configuration (`replSetReconfig`): `nodes` every member with its address,
    /// `voters` those of them that vote (the others are learners). New members join
    /// as learners and catch up first (a snapshot, then the log), then the voters are
    /// replaced in one joint change (openraft's joint consensus: any number of voters
    /// may change at once, safely), then members no longer listed are removed.
    pub async fn reconfigure(
        &self,
        nodes: BTreeMap<NodeId, BasicNode>,
        voters: BTreeSet<NodeId>,
    ) -> Result<(), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let current: BTreeSet<NodeId> = {
            let m = self.raft.metrics().borrow().clone();
            let ids = m
                .membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect();
            ids
        };
        for (id, node) in nodes.iter().filter(|(id, _)| !current.contains(id)) {
            self.raft
                .add_learner(*id, node.clone(), true)
                .await
                .map_err(|e| fail(&format!("adding {}", node.addr), &e))?;
        }
        self.raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), true)
            .await
            .map_err(|e| fail("changing the voters", &e))?;
        let gone: BTreeSet<NodeId> = current
            .into_iter()
            .filter(|id| !nodes.contains_key(id))
            .collect();
        if !gone.is_empty() {
            self.raft
                .change_membership(ChangeMembers::RemoveNodes(gone), false)
                .await
                .map_err(|e| fail("removing members", &e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_stands_after_one_to_1_15_election_timeouts() {
        // openraft: lease (max) + the randomized part (between min and max).
        let c = config("rs0", 1000).unwrap();
        assert_eq!(c.election_timeout_max + c.election_timeout_min, 1000);
        assert_eq!(c.election_timeout_max * 2, 1150);
        assert!(c.heartbeat_interval < c.election_timeout_min);
        // The smallest timeout accepted still leaves heartbeats below the elections.
        let c = config("rs0", 1).unwrap();
        assert!(c.heartbeat_interval < c.election_timeout_min);
    }
}

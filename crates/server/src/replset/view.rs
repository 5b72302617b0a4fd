//! What a member says of its set: `hello`'s fields (the SDAM specification's),
//! `replSetGetStatus` and `replSetGetConfig`, all from its Raft's metrics.

use super::election_timeout_millis;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::collections::BTreeMap;
use std::time::Duration;
use tailstream_replication::Member;

/// What `hello` says of the set, from this member's view of it.
pub struct View {
    pub writable: bool,
    pub secondary: bool,
    /// This member does not vote (a learner): mongod's `passive`.
    pub passive: bool,
    pub hosts: Vec<String>,
    /// The members that do not vote (mongod's `passives`).
    pub passives: Vec<String>,
    pub primary: Option<String>,
    pub me: String,
    pub term: u64,
    pub set_version: i64,
    /// `topologyVersion.counter`: grows with each change of term or role.
    pub counter: i64,
}

pub fn view(member: &Member) -> View {
    let m = member.raft.metrics().borrow().clone();
    let config = m.membership_config.membership();
    let nodes: BTreeMap<u64, String> = config
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    let voters: Vec<u64> = config.voter_ids().collect();
    let leads = m.current_leader == Some(member.node);
    let writable = member.may_write();
    // Within a term a leader goes from not yet writable to writable to stepping down,
    // and each later phase counts higher, so the counter only grows (drivers drop a
    // `hello` or error older than one they have: the SDAM specification's stale check).
    let phase = match (writable, leads) {
        (true, _) => 3,
        (false, true) if member.stepping_down() => 4,
        (false, true) => 2,
        _ => 0,
    };
    View {
        writable,
        // A learner (votes: 0) is a secondary too, a passive one (see `reconfig`).
        secondary: !leads && nodes.contains_key(&member.node),
        passive: !voters.contains(&member.node),
        hosts: voters
            .iter()
            .filter_map(|id| nodes.get(id).cloned())
            .collect(),
        passives: nodes
            .iter()
            .filter(|(id, _)| !voters.contains(id))
            .map(|(_, host)| host.clone())
            .collect(),
        primary: m.current_leader.and_then(|l| nodes.get(&l).cloned()),
        me: nodes.get(&member.node).cloned().unwrap_or_default(),
        term: m.current_term,
        set_version: m
            .membership_config
            .log_id()
            .map_or(1, |l| i64::try_from(l.index).unwrap_or(i64::MAX)),
        counter: i64::try_from(m.current_term.saturating_mul(COUNTER_PHASES) + phase)
            .unwrap_or(i64::MAX),
    }
}

/// `topologyVersion.counter` is the term times this, plus the leader's phase in it.
const COUNTER_PHASES: u64 = 8;

/// mongod's electionId: `7fffffff` then the term, big-endian.
pub fn election_id(term: u64) -> bson::oid::ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    bson::oid::ObjectId::from_bytes(bytes)
}

/// Rewrites `hello`'s set fields from this member's view.
pub fn hello_fields(state: &ServerState, name: &str, d: &mut Document) {
    let Some(member) = state.repl.member() else {
        return;
    };
    let v = view(member);
    d.insert(
        "topologyVersion",
        doc! {"processId": state.process_id, "counter": v.counter},
    );
    d.insert("hosts", v.hosts.clone());
    if v.passives.is_empty() {
        d.remove("passives");
    } else {
        d.insert("passives", v.passives.clone());
    }
    if v.passive {
        d.insert("passive", true);
    }
    d.insert(
        "setVersion",
        i32::try_from(v.set_version).unwrap_or(i32::MAX),
    );
    d.insert(
        if name == "hello" {
            "isWritablePrimary"
        } else {
            "ismaster"
        },
        v.writable,
    );
    // A member installing a snapshot serves no reads: not a secondary meanwhile
    // (mongod's member in initial sync, STARTUP2, is neither).
    d.insert("secondary", v.secondary && !state.engine.repl_installing());
    match &v.primary {
        Some(p) => d.insert("primary", p.clone()),
        None => d.remove("primary"),
    };
    if !v.me.is_empty() {
        d.insert("me", v.me.clone());
    }
    if v.writable {
        d.insert("electionId", election_id(v.term));
    } else {
        d.remove("electionId");
    }
}

/// An awaitable hello's wait: until the set's topology counter differs from `counter`,
/// or `limit` passes. None when this server is not a member of a set.
pub async fn wait_for_change(state: &ServerState, counter: i64, limit: Duration) -> Option<()> {
    let member = state.repl.member()?;
    let mut metrics = member.raft.metrics();
    let _ = tokio::time::timeout(limit, async {
        loop {
            // Registered before the check, so a change between the two is not missed.
            let role_changed = member.role_changed.notified();
            tokio::pin!(role_changed);
            role_changed.as_mut().enable();
            if view(member).counter != counter {
                return;
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                () = &mut role_changed => {}
            }
        }
    })
    .await;
    Some(())
}

/// The codes of mongod's errors that carry the server's `topologyVersion` (a member
/// that is not, or stops being, primary), so a driver ignores any older `hello` it
/// receives after the error. Shutdown errors (91, 11600) carry none, as mongod's outside
/// its quiesce mode: a driver then clears its pool.
const TOPOLOGY_ERRORS: &[i32] = &[189, 10107, 11602, 13435, 13436];

/// Adds `topologyVersion` to an error reply of those codes, on a member of a set.
pub fn add_topology_version(state: &ServerState, code: i32, body: &mut Document) {
    if !TOPOLOGY_ERRORS.contains(&code) {
        return;
    }
    if let Some(member) = state.repl.member() {
        let counter = view(member).counter;
        body.insert(
            "topologyVersion",
            doc! {"processId": state.process_id, "counter": counter},
        );
    }
}

/// A member of the set as `replSetGetStatus` and `replSetGetConfig` list it.
struct Listed {
    id: u64,
    host: String,
    voter: bool,
}

fn listed(member: &Member) -> Vec<Listed> {
    let m = member.raft.metrics().borrow().clone();
    let config = m.membership_config.membership();
    let voters: Vec<u64> = config.voter_ids().collect();
    config
        .nodes()
        .map(|(id, n)| Listed {
            id: *id,
            host: n.addr.clone(),
            voter: voters.contains(id),
        })
        .collect()
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `replSetGetStatus` (`rs.status()`) of a set of several members; None for the
/// one-member set (answered as before).
pub fn status(state: &ServerState) -> Option<Document> {
    let member = state.repl.member()?;
    let v = view(member);
    let m = member.raft.metrics().borrow().clone();
    let ts = state.engine.cluster_time();
    let term = as_i64(v.term);
    let optime = doc! {"ts": ts, "t": term};
    // The leader knows how far each member's log matches its own.
    let matched = m.replication.clone().unwrap_or_default();
    let members: Vec<Bson> = listed(member)
        .into_iter()
        .map(|l| {
            let me = l.id == member.node;
            let (state_code, state_str) = match (Some(l.id) == m.current_leader, l.voter) {
                (true, _) => (1, "PRIMARY"),
                // A learner (votes: 0) is a passive secondary.
                (false, _) => (2, "SECONDARY"),
            };
            // Health as this member sees it: itself, and on the leader whoever has
            // answered its replication; elsewhere unknown, shown healthy.
            let healthy = me || !v.writable || matched.get(&l.id).is_some_and(Option::is_some);
            let mut d = doc! {
                "_id": as_i64(l.id), "name": l.host, "health": if healthy { 1.0 } else { 0.0 },
                "state": state_code, "stateStr": state_str,
            };
            if me {
                d.insert("uptime", as_i64(state.started.elapsed().as_secs()));
                d.insert("optime", optime.clone());
                d.insert("self", true);
            }
            Bson::Document(d)
        })
        .collect();
    Some(doc! {
        "set": state.config.repl_set.clone(),
        "date": bson::DateTime::now(),
        "myState": if v.writable { 1 } else if v.secondary && !state.engine.repl_installing() { 2 } else { 5 },
        "term": term,
        "members": members,
        "optimes": {"lastCommittedOpTime": optime.clone(), "appliedOpTime": optime.clone(), "durableOpTime": optime},
    })
}

/// `replSetGetConfig` (`rs.conf()`) of a set of several members; None for the
/// one-member set.
pub fn config(state: &ServerState) -> Option<Document> {
    let member = state.repl.member()?;
    let v = view(member);
    let members: Vec<Bson> = listed(member)
        .into_iter()
        .map(|l| {
            Bson::Document(doc! {
                "_id": as_i64(l.id), "host": l.host, "arbiterOnly": false, "buildIndexes": true,
                "hidden": false, "priority": if l.voter { 1.0 } else { 0.0 }, "tags": {},
                "secondaryDelaySecs": 0i64, "votes": if l.voter { 1 } else { 0 },
            })
        })
        .collect();
    let election = i64::try_from(election_timeout_millis(state)).unwrap_or(i64::MAX);
    Some(doc! {
        "_id": state.config.repl_set.clone(),
        "version": i32::try_from(v.set_version).unwrap_or(i32::MAX),
        "term": as_i64(v.term),
        "members": members,
        "protocolVersion": 1i64,
        "writeConcernMajorityJournalDefault": true,
        "settings": {
            "chainingAllowed": false,
            "heartbeatIntervalMillis": tailstream_replication::set::heartbeat_interval_millis(election_timeout_millis(state)) as i64,
            "electionTimeoutMillis": election,
            "replicaSetId": state.engine.replica_set_id,
        },
    })
}

//! A replica set of several members (issue 27): the server's side of
//! `tailstream_replication`.
//!
//! A server is a one-member set that needs no initiation, as before, until either
//! `replSetInitiate` names several members (this server starts its Raft and initiates the
//! set: `replication::set`) or another member's first `replSetRaft` call arrives (this
//! server starts its Raft with the id the call names, and the leader brings it up to
//! date). A member started before starts its Raft again at startup (its id is in its
//! log's markers). From then on every write goes through the set, and `hello` answers
//! from the set's state: what drivers use to find the primary.
//!
//! Elections: `--setParameter replElectionTimeoutMillis=N` (mongod's
//! `settings.electionTimeoutMillis`, default 10,000) on every member.
//!
//! Members talk over the ordinary port without authentication for now: bind them to
//! loopback or a private network until `--keyFile` exists.

use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_replication::{set, BasicNode, Member};

/// The parameter that sets the election timeout.
pub const ELECTION_TIMEOUT_PARAMETER: &str = "replElectionTimeoutMillis";
/// mongod's code for a configuration it refuses.
const INVALID_REPLICA_SET_CONFIG: i32 = 93;
/// The most members a set may have (mongod's limit).
const MAX_MEMBERS: usize = 50;

/// This server's member of a set, once it is one.
#[derive(Default)]
pub struct ReplState {
    member: tokio::sync::OnceCell<Arc<Member>>,
}

impl ReplState {
    pub fn member(&self) -> Option<&Arc<Member>> {
        self.member.get()
    }
}

fn election_timeout_millis(state: &ServerState) -> u64 {
    state
        .config
        .parameter(ELECTION_TIMEOUT_PARAMETER)
        .and_then(|v| v.parse().ok())
        .unwrap_or(set::DEFAULT_ELECTION_TIMEOUT_MILLIS)
}

/// This server's member as `node`, started now if it is not yet.
async fn member_as(state: &Arc<ServerState>, node: u64) -> Result<&Arc<Member>> {
    let member = state
        .repl
        .member
        .get_or_try_init(|| async {
            Member::start(
                state.engine.clone(),
                node,
                &state.config.repl_set,
                election_timeout_millis(state),
            )
            .await
            .map(Arc::new)
            .map_err(|e| Error::internal(format!("starting this replica set member: {e}")))
        })
        .await?;
    if member.node != node {
        return Err(Error::new(
            INVALID_REPLICA_SET_CONFIG,
            format!("this member is {} in its set, not {node}", member.node),
        ));
    }
    Ok(member)
}

/// At startup: a member of a set starts its Raft again.
pub async fn restart(state: &Arc<ServerState>) -> Result<()> {
    if let Some(node) = set::stored_node(&state.engine) {
        member_as(state, node).await?;
        tracing::info!(node, "rejoining replica set {}", state.config.repl_set);
    }
    Ok(())
}

/// `replSetRaft`: another member's call (see `replication::network`).
pub async fn raft_command(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let target = cmd
        .get("target")
        .and_then(tailstream_engine::find::as_i64)
        .filter(|t| *t >= 0)
        .ok_or_else(|| Error::bad_value("replSetRaft needs its target member's id"))?;
    let member = member_as(state, target as u64).await?;
    tailstream_replication::rpc::handle(&member.raft, cmd)
        .await
        .map_err(Error::bad_value)
}

/// The members of a `replSetInitiate` configuration, checked as mongod checks them.
fn members_of(state: &ServerState, config: &Document) -> Result<BTreeMap<u64, BasicNode>> {
    let invalid = |msg: String| Error::new(INVALID_REPLICA_SET_CONFIG, msg);
    let name = config.get_str("_id").unwrap_or("");
    if name != state.config.repl_set {
        return Err(invalid(format!(
            "Attempting to initiate a replica set with name {name}, but command line reports {}; rejecting",
            state.config.repl_set
        )));
    }
    let Ok(list) = config.get_array("members") else {
        return Err(invalid("the configuration needs a members array".into()));
    };
    if list.len() > MAX_MEMBERS {
        return Err(invalid(format!(
            "a replica set has at most {MAX_MEMBERS} members, not {}",
            list.len()
        )));
    }
    let mut members = BTreeMap::new();
    for m in list {
        let Some(m) = m.as_document() else {
            return Err(invalid("every member is a document".into()));
        };
        let id = m
            .get("_id")
            .and_then(tailstream_engine::find::as_i64)
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid("every member needs a non-negative _id".into()))?;
        let host = m
            .get_str("host")
            .map_err(|_| invalid("every member needs a host".into()))?;
        let node = BasicNode::new(host);
        if members.values().any(|n: &BasicNode| n.addr == host)
            || members.insert(id as u64, node).is_some()
        {
            return Err(invalid(format!(
                "member _id {id} or host {host} appears twice"
            )));
        }
    }
    Ok(members)
}

/// Whether `host` names this server: its port, on this host.
fn is_me(state: &ServerState, host: &str) -> bool {
    let Some((name, port)) = host.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().ok() == Some(state.config.port)
        && (["localhost", "127.0.0.1", "::1", "[::1]"].contains(&name)
            || state.config.advertised_host() == host)
}

/// `replSetInitiate` (`rs.initiate(config)`).
pub async fn initiate(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let already = || Error::new(codes::ALREADY_INITIALIZED, "already initialized");
    if state.repl.member().is_some() {
        return Err(already());
    }
    let config = match cmd.get("replSetInitiate") {
        Some(Bson::Document(c)) => c.clone(),
        // Without a configuration: the one-member set this server already is.
        _ => return Err(already()),
    };
    // A configuration of one member (or none) names the one-member set this server
    // already is, whatever it says (mongod answers an initiated set so before it reads
    // the configuration).
    let listed = config.get_array("members").map_or(0, Vec::len);
    if listed <= 1 {
        return Err(already());
    }
    let members = members_of(state, &config)?;
    let Some(me) = members
        .iter()
        .find(|(_, n)| is_me(state, &n.addr))
        .map(|(id, _)| *id)
    else {
        return Err(Error::new(
            INVALID_REPLICA_SET_CONFIG,
            format!(
                "No host described in new configuration for replica set {} maps to this node",
                state.config.repl_set
            ),
        ));
    };
    quorum_check(&members, me).await?;
    let member = member_as(state, me).await?;
    member
        .initiate(members)
        .await
        .map_err(|e| Error::internal(format!("replSetInitiate: {e}")))?;
    Ok(Document::new())
}

/// How long initiation waits for each other member to answer before it refuses.
const QUORUM_CHECK_LIMIT: Duration = Duration::from_secs(5);
/// mongod's code when a proposed member does not answer.
const NODE_NOT_FOUND: i32 = 74;

/// Before anything is initiated, every other member must answer on its port (mongod's
/// quorum check), so a set is never left half made with a member that is not there.
async fn quorum_check(members: &BTreeMap<u64, BasicNode>, me: u64) -> Result<()> {
    let mut missing = Vec::new();
    for (id, node) in members.iter().filter(|(id, _)| **id != me) {
        let connected = tokio::time::timeout(
            QUORUM_CHECK_LIMIT,
            tokio::net::TcpStream::connect(node.addr.as_str()),
        )
        .await;
        if !matches!(connected, Ok(Ok(_))) {
            missing.push(format!("{} (_id {id})", node.addr));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        NODE_NOT_FOUND,
        format!(
            "replSetInitiate quorum check failed because not all proposed set members responded affirmatively: {} did not answer",
            missing.join(", ")
        ),
    ))
}

/// What `hello` says of the set, from this member's view of it.
pub struct View {
    pub writable: bool,
    pub secondary: bool,
    pub hosts: Vec<String>,
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
    let writable = tailstream_replication::member::may_write(&m, member.node);
    let role = match (writable, leads) {
        (true, _) => 3,
        (false, true) => 2,
        _ => 0,
    };
    View {
        writable,
        secondary: !leads && voters.contains(&member.node),
        hosts: voters
            .iter()
            .filter_map(|id| nodes.get(id).cloned())
            .collect(),
        primary: m.current_leader.and_then(|l| nodes.get(&l).cloned()),
        me: nodes.get(&member.node).cloned().unwrap_or_default(),
        term: m.current_term,
        set_version: m
            .membership_config
            .log_id()
            .map_or(1, |l| i64::try_from(l.index).unwrap_or(i64::MAX)),
        counter: i64::try_from(m.current_term.saturating_mul(4) + role).unwrap_or(i64::MAX),
    }
}

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
    d.insert("secondary", v.secondary);
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
            if view(member).counter != counter {
                return;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    Some(())
}

/// Writes are refused on a member that may not write (10107), before they start, as
/// mongod checks `canAcceptWritesFor`; the `local` database takes writes everywhere.
pub fn check_writable(state: &ServerState, db: &str) -> Result<()> {
    if db == "local" {
        return Ok(());
    }
    match state.repl.member() {
        Some(member) if !view(member).writable => {
            Err(Error::new(codes::NOT_WRITABLE_PRIMARY, "not primary"))
        }
        _ => Ok(()),
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
                (false, true) => (2, "SECONDARY"),
                (false, false) => (5, "STARTUP2"),
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
        "myState": if v.writable { 1 } else if v.secondary { 2 } else { 5 },
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
            "heartbeatIntervalMillis": (election / 10).max(20),
            "electionTimeoutMillis": election,
            "replicaSetId": state.engine.replica_set_id,
        },
    })
}

/// The reads mongod runs on a secondary only when the client opts in with a read
/// preference other than `primary` (its `secondaryAllowed: kOptIn` commands that read
/// collections); every other command either always runs (`hello`, `getMore` of a cursor
/// already open, status and session commands) or writes (10107).
const OPT_IN_READS: &[&str] = &[
    "aggregate",
    "collStats",
    "count",
    "dataSize",
    "dbHash",
    "dbStats",
    "dbstats",
    "distinct",
    "explain",
    "find",
    "listCollections",
    "listDatabases",
    "listIndexes",
    "mapReduce",
];

/// mongod's code when a read reaches a secondary without the client's consent.
const NOT_PRIMARY_NO_SECONDARY_OK: i32 = 13435;

/// Whether the command's `$readPreference` lets a secondary answer it.
fn secondary_ok(cmd: &Document) -> bool {
    match cmd.get("$readPreference") {
        Some(Bson::Document(rp)) => rp.get_str("mode").is_ok_and(|m| m != "primary"),
        _ => false,
    }
}

/// A read on a member that is not primary needs a secondary read preference (13435
/// NotPrimaryNoSecondaryOk otherwise, as mongod); the `local` database reads anywhere.
pub fn check_secondary_read(
    state: &ServerState,
    name: &str,
    db: &str,
    cmd: &Document,
) -> Result<()> {
    let Some(member) = state.repl.member() else {
        return Ok(());
    };
    if db == "local" || !OPT_IN_READS.contains(&name) || secondary_ok(cmd) {
        return Ok(());
    }
    if view(member).writable {
        return Ok(());
    }
    Err(Error::new(
        NOT_PRIMARY_NO_SECONDARY_OK,
        "not primary and secondaryOk=false",
    ))
}

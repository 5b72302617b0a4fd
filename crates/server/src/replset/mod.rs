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
//!
//! Files: `initiate` (replSetInitiate), `reconfig` (replSetReconfig), `stepdown`
//! (replSetStepDown, replSetFreeze), `view` (hello's fields, replSetGetStatus,
//! replSetGetConfig), `reads` (reads on a secondary, afterClusterTime), `noop` (the
//! primary's no-op entries), `write_concern` (`w: N`).

mod initiate;
mod noop;
mod reads;
mod reconfig;
mod stepdown;
mod view;
mod write_concern;

pub use initiate::initiate;
pub use reads::{check_secondary_read, forward_output_aggregation, wait_for_read_concern};
pub use reconfig::reconfig;
pub use stepdown::{freeze, step_down};
pub use view::{add_topology_version, config, hello_fields, status, view, wait_for_change};
pub use write_concern::{data_bearing_members, wait_for_members};

use crate::state::ServerState;
use bson::Document;
use std::sync::Arc;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_replication::{set, Member};

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

/// The set's election timeout, as every member was started with it.
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
            .map(|member| {
                let member = Arc::new(member);
                tokio::spawn(noop::run(state.clone(), member.clone()));
                member
            })
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
    if state.config.test_commands_enabled()
        && state.fail_points.stop_repl_producer()
        && tailstream_replication::rpc::carries_entries(cmd)
    {
        return Err(Error::bad_value(
            "stopReplProducer fail point: this member takes no new entries",
        ));
    }
    if tailstream_replication::rpc::is_elect(cmd) {
        member
            .stand_for_election()
            .await
            .map_err(|e| Error::new(codes::CONFLICTING_OPERATION_IN_PROGRESS, e))?;
        return Ok(Document::new());
    }
    tailstream_replication::rpc::handle(&member.raft, cmd)
        .await
        .map_err(Error::bad_value)
}

/// Writes are refused on a member that may not write (10107), before they start, as
/// mongod checks `canAcceptWritesFor`; the `local` database takes writes everywhere.
pub fn check_writable(state: &ServerState, db: &str) -> Result<()> {
    if db == "local" {
        return Ok(());
    }
    match state.repl.member() {
        Some(member) if !member.may_write() => {
            Err(Error::new(codes::NOT_WRITABLE_PRIMARY, "not primary"))
        }
        _ => Ok(()),
    }
}

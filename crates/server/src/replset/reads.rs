//! Reads on a member of a set: which reads a secondary serves (13435 otherwise), and
//! a read concern's `afterClusterTime` waited for (causal consistency).

use crate::state::ServerState;
use bson::{Bson, Document, Timestamp};
use std::time::Duration;
use tailstream_engine::query::error::{codes, Error, Result};

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

/// mongod's code for a read on a member that is neither primary nor secondary (here:
/// one installing a snapshot).
const NOT_PRIMARY_OR_SECONDARY: i32 = 13436;

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
/// No read (nor a cursor's next batch) runs while the member installs a snapshot
/// (13436 NotPrimaryOrSecondary, which drivers retry elsewhere).
pub fn check_secondary_read(
    state: &ServerState,
    name: &str,
    db: &str,
    cmd: &Document,
) -> Result<()> {
    let Some(member) = state.repl.member() else {
        return Ok(());
    };
    if state.engine.repl_installing() && (OPT_IN_READS.contains(&name) || name == "getMore") {
        // Half the old state machine, half the snapshot's (see `repl::snapshot`).
        return Err(Error::new(
            NOT_PRIMARY_OR_SECONDARY,
            "node is not in primary or recovering state",
        ));
    }
    if db == "local" || !OPT_IN_READS.contains(&name) || secondary_ok(cmd) {
        return Ok(());
    }
    if member.may_write() {
        return Ok(());
    }
    Err(Error::new(
        NOT_PRIMARY_NO_SECONDARY_OK,
        "not primary and secondaryOk=false",
    ))
}

/// The longest a read waits for its `afterClusterTime` without a `maxTimeMS` (mongod
/// waits without end; a bound keeps a client's mistake from holding a connection
/// forever).
const AFTER_CLUSTER_TIME_LIMIT: Duration = Duration::from_secs(3600);

/// The time a read concern asks this member to have applied first: its
/// `afterClusterTime`, or its `afterOpTime`'s `ts`.
fn read_after(cmd: &Document) -> Option<Timestamp> {
    let rc = cmd.get_document("readConcern").ok()?;
    match rc.get("afterClusterTime") {
        Some(Bson::Timestamp(ts)) => Some(*ts),
        _ => rc
            .get_document("afterOpTime")
            .ok()
            .and_then(|op| op.get_timestamp("ts").ok()),
    }
}

/// A read concern's `afterClusterTime` (causal consistency): on a member of a set, the
/// read waits until this member has applied everything up to that time (a secondary
/// behind the primary catches up first), or until its `maxTimeMS` passes (50
/// MaxTimeMSExpired). The one-member set has applied every time it handed out.
pub async fn wait_for_read_concern(state: &ServerState, cmd: &Document) -> Result<()> {
    if state.repl.member().is_none() {
        return Ok(());
    }
    let Some(after) = read_after(cmd) else {
        return Ok(());
    };
    if state.engine.cluster_time() >= after {
        return Ok(());
    }
    let limit = match cmd
        .get("maxTimeMS")
        .and_then(tailstream_engine::find::as_i64)
    {
        Some(ms) if ms > 0 => Duration::from_millis(ms as u64),
        _ => AFTER_CLUSTER_TIME_LIMIT,
    };
    let mut commits = state.engine.subscribe_commits();
    let waited = tokio::time::timeout(limit, async {
        while state.engine.cluster_time() < after {
            if commits.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    waited.map_err(|_| {
        Error::new(
            codes::MAX_TIME_MS_EXPIRED,
            "operation exceeded time limit waiting for the read concern's afterClusterTime",
        )
    })
}

/// An aggregation writing its results (`$out`, `$merge`) sent to a secondary with a
/// secondary read preference: mongod 5.0+ runs it there and sends the writes to the
/// primary; here the whole command goes to the primary, whose reply is returned as is
/// (its data is at least as new as this member's). None: the command runs here.
pub async fn forward_output_aggregation(
    state: &ServerState,
    writes: bool,
    name: &str,
    db: &str,
    cmd: &Document,
) -> Option<Result<Document>> {
    if !writes || name != "aggregate" || !secondary_ok(cmd) {
        return None;
    }
    let member = state.repl.member()?;
    if member.may_write() {
        return None;
    }
    let primary = super::view(member).primary?;
    let mut forwarded = cmd.clone();
    forwarded.remove("$readPreference");
    forwarded.insert("$db", db);
    // Boxed: every command awaits this function, and the request's future would
    // otherwise be copied into each command's own (see `commands::gates`).
    let ask = tailstream_replication::network::ask(&primary, &forwarded, FORWARD_LIMIT);
    let reply = Box::pin(ask).await;
    Some(reply.map_err(|e| Error::new(codes::NOT_WRITABLE_PRIMARY, format!("not primary: {e}"))))
}

/// How long a forwarded aggregation may take on the primary.
const FORWARD_LIMIT: Duration = Duration::from_secs(3600);

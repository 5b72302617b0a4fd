//! `replSetStepDown` (`rs.stepDown()`) and `replSetFreeze` (`rs.freeze()`), with
//! mongod's arguments, defaults and errors; the hand-over itself is
//! `replication::handover`.

use super::election_timeout_millis;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::time::Duration;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_replication::handover::{StepDown, StepDownError};

/// mongod's default `secondaryCatchUpPeriodSecs`.
const DEFAULT_CATCH_UP_SECS: i64 = 10;
/// mongod's code when no secondary caught up in time.
const EXCEEDED_TIME_LIMIT: i32 = 262;
/// mongod's code for freezing a member that is not a secondary.
const NOT_SECONDARY: i32 = 95;
/// The longest period either command takes (a day: mongod has no bound, but a
/// period past it is surely a mistake).
const MAX_PERIOD_SECS: i64 = 86_400;

/// A whole number of seconds from `field` of `cmd` (`default` when absent).
fn seconds(cmd: &Document, field: &str, default: Option<i64>) -> Result<i64> {
    match cmd.get(field) {
        None => default.ok_or_else(|| Error::bad_value(format!("{field} is required"))),
        Some(v) => match tailstream_engine::find::as_i64(v) {
            Some(n) if (0..=MAX_PERIOD_SECS).contains(&n) => Ok(n),
            Some(n) => Err(Error::bad_value(format!(
                "{field} must be between 0 and {MAX_PERIOD_SECS} seconds, not {n}"
            ))),
            None => Err(Error::new(
                codes::TYPE_MISMATCH,
                format!("{field} must be a number"),
            )),
        },
    }
}

fn secs(n: i64) -> Duration {
    Duration::from_secs(n.max(0) as u64)
}

/// `replSetStepDown: <secs>` with `secondaryCatchUpPeriodSecs` (10) and `force`.
pub async fn step_down(state: &ServerState, cmd: &Document) -> Result<Document> {
    let period = seconds(cmd, "replSetStepDown", Some(60))?;
    let force = matches!(cmd.get("force"), Some(Bson::Boolean(true)));
    // mongod's default catch-up period: none when forced, else 10 s.
    let default_catch_up = if force { 0 } else { DEFAULT_CATCH_UP_SECS };
    let catch_up = seconds(cmd, "secondaryCatchUpPeriodSecs", Some(default_catch_up))?;
    if period < catch_up {
        return Err(Error::bad_value(
            "stepdown period must be longer than secondaryCatchUpPeriodSecs",
        ));
    }
    let not_primary = || {
        Error::new(
            codes::NOT_WRITABLE_PRIMARY,
            "not primary so can't step down",
        )
    };
    let Some(member) = state.repl.member() else {
        // The one-member set: mongod's lone primary cannot step down either (no
        // electable secondary).
        return Err(Error::new(
            EXCEEDED_TIME_LIMIT,
            "No electable secondaries caught up: this server is a one-member replica set",
        ));
    };
    let election = Duration::from_millis(election_timeout_millis(state));
    let how = StepDown {
        period: secs(period),
        catch_up: secs(catch_up),
        force,
        election_timeout: election,
    };
    match member.step_down(how).await {
        Ok(()) => Ok(Document::new()),
        Err(StepDownError::NotLeader) => Err(not_primary()),
        Err(StepDownError::NoneCaughtUp) => Err(Error::new(
            EXCEEDED_TIME_LIMIT,
            format!(
                "No electable secondaries caught up as of {}. Please use the replSetStepDown command with the argument {{force: true}} to force node to step down.",
                bson::DateTime::now().try_to_rfc3339_string().unwrap_or_default()
            ),
        )),
        Err(StepDownError::NoNewTerm) => Err(Error::new(
            EXCEEDED_TIME_LIMIT,
            "no other member took office within the step-down's wait; this member stays primary",
        )),
    }
}

/// `replSetFreeze: <secs>`: this secondary stands for no election for that long; 0
/// lifts a freeze.
pub async fn freeze(state: &ServerState, cmd: &Document) -> Result<Document> {
    let period = seconds(cmd, "replSetFreeze", None)?;
    let Some(member) = state.repl.member() else {
        return Err(Error::new(
            NOT_SECONDARY,
            "cannot freeze node when primary or running for election. state: Primary",
        ));
    };
    let leads = member.raft.metrics().borrow().current_leader == Some(member.node);
    if leads {
        return Err(Error::new(
            NOT_SECONDARY,
            "cannot freeze node when primary or running for election. state: Primary",
        ));
    }
    member.hold_elections(secs(period));
    Ok(if period == 0 {
        doc! {"info": "unfreezing"}
    } else {
        Document::new()
    })
}

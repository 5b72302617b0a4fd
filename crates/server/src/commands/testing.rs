//! Test-only commands, enabled by `--setParameter enableTestCommands=1` (mongod's
//! spelling): `configureFailPoint` with the `failCommand` and
//! `failGetMoreAfterCursorCheckout` fail points that drivers' test suites use to
//! simulate errors, dropped connections and slow servers.

use crate::error_labels::RETRYABLE_WRITE_CODES;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tailstream_engine::query::error::{codes, Error, Result};

/// When a fail point fires.
#[derive(Debug, Clone)]
enum Mode {
    Off,
    AlwaysOn,
    /// Fires this many more times, then turns off.
    Times(i64),
    /// Does not fire for this many more evaluations, then stays on.
    Skip(i64),
}

#[derive(Debug, Clone)]
struct FailPoint {
    mode: Mode,
    data: Document,
    /// How many times it fired (configureFailPoint replies with it).
    entered: i64,
}

#[derive(Default)]
pub struct FailPoints {
    points: Mutex<HashMap<String, FailPoint>>,
    /// Cursors opened by a command with `maxTimeMS`: as in mongod, their getMores run
    /// under that time limit too, so `maxTimeAlwaysTimeOut` fires on them.
    time_limited_cursors: Mutex<HashSet<i64>>,
}

/// What `failCommand` makes the server do with one command.
#[derive(Debug, Default)]
pub struct Injected {
    pub block: Option<Duration>,
    pub close_connection: bool,
    pub error: Option<Error>,
    pub write_concern_error: Option<Document>,
}

impl FailPoints {
    pub fn configure(&self, cmd: &Document) -> Result<Document> {
        let name = match cmd.get("configureFailPoint") {
            Some(Bson::String(n)) => n.clone(),
            _ => {
                return Err(Error::type_mismatch(
                    "configureFailPoint takes the fail point's name",
                ))
            }
        };
        if !matches!(
            name.as_str(),
            "failCommand"
                | "failGetMoreAfterCursorCheckout"
                | "maxTimeAlwaysTimeOut"
                | "onPrimaryTransactionalWrite"
                | "stopReplProducer"
                | "rsSyncApplyStop"
        ) {
            return Err(Error::bad_value(format!(
                "Cannot find failPoint named: {name}"
            )));
        }
        let mode = match cmd.get("mode") {
            Some(Bson::String(s)) if s == "off" => Mode::Off,
            Some(Bson::String(s)) if s == "alwaysOn" => Mode::AlwaysOn,
            Some(Bson::Document(d)) => {
                if let Some(n) = d.get("times").and_then(tailstream_engine::find::as_i64) {
                    Mode::Times(n.max(0))
                } else if let Some(n) = d.get("skip").and_then(tailstream_engine::find::as_i64) {
                    Mode::Skip(n.max(0))
                } else if d.contains_key("activationProbability") {
                    Mode::AlwaysOn
                } else {
                    return Err(Error::failed_to_parse(format!(
                        "invalid fail point mode: {}",
                        tailstream_engine::format::doc_to_string(d)
                    )));
                }
            }
            _ => {
                return Err(Error::failed_to_parse(
                    "fail point mode must be 'off', 'alwaysOn' or a document",
                ))
            }
        };
        let data = cmd.get_document("data").cloned().unwrap_or_default();
        let mut points = self.points.lock();
        let previous = points.get(&name).map(|p| p.entered).unwrap_or(0);
        points.insert(
            name,
            FailPoint {
                mode,
                data,
                entered: 0,
            },
        );
        Ok(doc! {"count": previous})
    }

    /// Evaluates a fail point once; returns its data if it fires.
    fn fire(&self, name: &str, applies: impl Fn(&Document) -> bool) -> Option<Document> {
        let mut points = self.points.lock();
        let p = points.get_mut(name)?;
        if matches!(p.mode, Mode::Off) || !applies(&p.data) {
            return None;
        }
        let fires = match &mut p.mode {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(n) => {
                if *n > 0 {
                    *n -= 1;
                    true
                } else {
                    false
                }
            }
            Mode::Skip(n) => {
                if *n > 0 {
                    *n -= 1;
                    false
                } else {
                    true
                }
            }
        };
        if let Mode::Times(0) = p.mode {
            p.mode = Mode::Off;
        }
        if fires {
            p.entered += 1;
            Some(p.data.clone())
        } else {
            None
        }
    }

    /// What `failCommand` injects into this command, if it applies.
    pub fn fail_command(
        &self,
        command: &str,
        cmd: &Document,
        app_name: Option<&str>,
    ) -> Option<Injected> {
        let data = self.fire("failCommand", |data| {
            let listed = data.contains_key("failAllCommands")
                || match data.get("failCommands") {
                    Some(Bson::Array(names)) => names
                        .iter()
                        .filter_map(|n| n.as_str())
                        .any(|n| same_command(n, command)),
                    _ => false,
                };
            let app_ok = match data.get_str("appName") {
                Ok(want) => app_name == Some(want),
                Err(_) => true,
            };
            listed && app_ok
        })?;
        let mut out = Injected::default();
        if data.get_bool("blockConnection").unwrap_or(false) {
            let ms = data
                .get("blockTimeMS")
                .and_then(tailstream_engine::find::as_i64)
                .unwrap_or(0)
                .max(0) as u64;
            out.block = Some(Duration::from_millis(ms));
        }
        out.close_connection = data.get_bool("closeConnection").unwrap_or(false);
        if let Some(code) = data
            .get("errorCode")
            .and_then(tailstream_engine::find::as_i64)
        {
            let msg = data
                .get_str("errmsg")
                .unwrap_or("Failing command via 'failCommand' failpoint")
                .to_string();
            let mut e = Error::new(code as i32, msg);
            match data.get("errorLabels") {
                Some(Bson::Array(labels)) => {
                    for l in labels.iter().filter_map(|l| l.as_str()) {
                        e = e.with_label(l);
                    }
                }
                _ => {
                    if retryable_write(command, cmd)
                        && RETRYABLE_WRITE_CODES.contains(&(code as i32))
                    {
                        e = e.with_label("RetryableWriteError");
                    }
                }
            }
            out.error = Some(e);
        }
        if let Ok(wce) = data.get_document("writeConcernError") {
            out.write_concern_error = Some(wce.clone());
        }
        Some(out)
    }

    /// The error `failGetMoreAfterCursorCheckout` makes a getMore return, if it fires.
    pub fn fail_get_more(&self) -> Option<Error> {
        let data = self.fire("failGetMoreAfterCursorCheckout", |_| true)?;
        let code = data
            .get("errorCode")
            .and_then(tailstream_engine::find::as_i64)
            .unwrap_or(codes::INTERNAL_ERROR as i64);
        Some(Error::new(
            code as i32,
            "Failing getMore via 'failGetMoreAfterCursorCheckout' failpoint",
        ))
    }
}

/// Names under which mongod registers one command: `failCommands` matches a command by
/// any of its names (mongod's `Command::hasAlias`), so `["hello"]` also fails the legacy
/// `ismaster` handshake drivers send first.
const COMMAND_ALIASES: &[&[&str]] = &[
    &["hello", "isMaster", "ismaster"],
    &["findAndModify", "findandmodify"],
    &["buildInfo", "buildinfo"],
    &["dropIndexes", "deleteIndexes"],
];

/// Whether `listed` (a name in `failCommands`) names the command run as `run_as`.
fn same_command(listed: &str, run_as: &str) -> bool {
    listed == run_as
        || COMMAND_ALIASES
            .iter()
            .any(|names| names.contains(&listed) && names.contains(&run_as))
}

/// An error that makes the connection close without a reply (`onPrimaryTransactionalWrite`).
pub const CLOSE_CONNECTION: i32 = i32::MIN;

impl FailPoints {
    /// `maxTimeAlwaysTimeOut`: every command with a `maxTimeMS`, and every getMore on a
    /// cursor opened with one, fails as if it ran out of time.
    /// `stopReplProducer` (mongod's: a secondary stops fetching the oplog): while on,
    /// this member takes no new entries from the primary (heartbeats still pass, so it
    /// calls no election).
    pub fn stop_repl_producer(&self) -> bool {
        self.fire("stopReplProducer", |_| true).is_some()
    }

    pub fn max_time_expired(&self, cmd: &Document) -> Option<Error> {
        let time_limited = cmd.contains_key("maxTimeMS")
            || match cmd.get("getMore") {
                Some(Bson::Int64(id)) => self.time_limited_cursors.lock().contains(id),
                _ => false,
            };
        if !time_limited {
            return None;
        }
        self.fire("maxTimeAlwaysTimeOut", |_| true)?;
        Some(Error::new(
            codes::MAX_TIME_MS_EXPIRED,
            "operation exceeded time limit",
        ))
    }

    /// Notes the cursor a find or aggregate with `maxTimeMS` left open (`cursor_id` 0:
    /// none), and forgets cursors that are gone.
    pub fn note_cursor(&self, cmd: &Document, cursor_id: i64, cursor_open: impl Fn(i64) -> bool) {
        if cursor_id == 0 || !cmd.contains_key("maxTimeMS") || cmd.contains_key("getMore") {
            return;
        }
        let mut cursors = self.time_limited_cursors.lock();
        if cursors.len() >= 1024 {
            cursors.retain(|id| cursor_open(*id));
        }
        cursors.insert(cursor_id);
    }

    /// `onPrimaryTransactionalWrite`, evaluated once per statement of a retryable write
    /// as mongod does (so `{skip: n}` counts documents, not commands): Some(data) when it
    /// fires for any of them. The command then fails as a whole, before its commit.
    pub fn on_transactional_write(&self, statements: usize) -> Option<Document> {
        (0..statements.max(1)).find_map(|_| self.fire("onPrimaryTransactionalWrite", |_| true))
    }
}

/// Moves `errorLabels` of an injected writeConcernError to the reply's top level, and
/// labels a retryable write's retryable write-concern error as mongod does.
pub fn attach_write_concern_error(body: &mut Document, mut wce: Document, cmd: &Document) {
    let labels = match wce.remove("errorLabels") {
        Some(Bson::Array(l)) => l,
        _ => {
            let code = wce
                .get("code")
                .and_then(tailstream_engine::find::as_i64)
                .unwrap_or(0) as i32;
            if retryable_write(cmd.keys().next().map(|k| k.as_str()).unwrap_or(""), cmd)
                && RETRYABLE_WRITE_CODES.contains(&code)
            {
                vec![Bson::String("RetryableWriteError".into())]
            } else {
                Vec::new()
            }
        }
    };
    if !labels.is_empty() {
        body.insert("errorLabels", labels);
    }
    body.insert("writeConcernError", wce);
}

pub fn configure_fail_point(state: &ServerState, cmd: &Document) -> Result<Document> {
    let reply = state.fail_points.configure(cmd)?;
    // `rsSyncApplyStop` (mongod's: a secondary stops applying what it fetched) acts on
    // the member's state machine, which polls no fail point itself.
    if cmd.get_str("configureFailPoint") == Ok("rsSyncApplyStop") {
        if let Some(member) = state.repl.member() {
            let on = !matches!(cmd.get("mode"), Some(Bson::String(m)) if m == "off");
            member
                .apply_paused
                .store(on, std::sync::atomic::Ordering::Release);
        }
    }
    Ok(reply)
}

/// A retryable write (mongod labels its retryable errors RetryableWriteError): a
/// command with a txnNumber that is not part of a transaction, or the commit or abort
/// of one.
pub(crate) fn retryable_write(name: &str, cmd: &Document) -> bool {
    cmd.contains_key("txnNumber")
        && (!cmd.contains_key("autocommit")
            || matches!(name, "commitTransaction" | "abortTransaction"))
}

//! The database profiler, as mongod has it: the `profile` command sets a database's
//! level (0 off, 1 operations slower than `slowms`, 2 all), and each profiled command
//! leaves a document in that database's `system.profile`, a 1 MiB capped collection
//! created on first use. The documents carry what a user reads there: `op`, `ns`,
//! `command`, `nreturned`, `responseLength`, `millis`, `ts`, `client`, `appName`, and
//! `errCode`/`errMsg` for failures.
//!
//! With no database profiled (the usual case) the cost per command is one atomic load.

use crate::state::ServerState;
use bson::{doc, Bson, Document};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::matcher::Matcher;

/// mongod's default `slowms`.
const DEFAULT_SLOW_MS: i64 = 100;
/// The size mongod gives a profile collection it creates.
const PROFILE_COLLECTION_BYTES: i64 = 1024 * 1024;
/// Commands larger than this are recorded as a truncated summary, as mongod does.
const MAX_COMMAND_BYTES: usize = 50 * 1024;

#[derive(Clone)]
struct DbSettings {
    level: i32,
    sample_rate: f64,
    filter: Option<Arc<Matcher>>,
    filter_doc: Option<Document>,
}

pub struct Profiler {
    /// True while some database has a level above 0.
    any: AtomicBool,
    slow_ms: AtomicI64,
    dbs: RwLock<HashMap<String, DbSettings>>,
}

impl Default for Profiler {
    fn default() -> Profiler {
        Profiler {
            any: AtomicBool::new(false),
            slow_ms: AtomicI64::new(DEFAULT_SLOW_MS),
            dbs: RwLock::new(HashMap::new()),
        }
    }
}

/// What the profiler records about one finished command.
pub struct Finished<'a> {
    pub db: &'a str,
    pub name: &'a str,
    pub cmd: &'a Document,
    pub elapsed: Duration,
    pub nreturned: Option<i64>,
    pub response_length: Option<i64>,
    pub error: Option<&'a Error>,
    pub client: String,
    pub app_name: Option<String>,
    /// What the operation examined (its plan, keys, documents, oplog entries).
    pub examined: tailstream_engine::query::op_stats::Snapshot,
    /// A write's counts from its reply (`written_counts` in the command gates).
    pub written: Vec<(&'static str, i64)>,
}

impl Profiler {
    /// With the server's `--slowms` (mongod's default without it).
    pub fn new(slow_ms: Option<i64>) -> Profiler {
        let p = Profiler::default();
        if let Some(ms) = slow_ms {
            p.slow_ms.store(ms, Ordering::Relaxed);
        }
        p
    }

    /// Operations at least this slow (milliseconds) are logged, and profiled at level 1.
    pub fn slow_ms(&self) -> i64 {
        self.slow_ms.load(Ordering::Relaxed)
    }

    /// The `profile` command: `{profile: level, slowms, sampleRate, filter}`; replies with
    /// the settings in force before it (`was`, `slowms`, `sampleRate`).
    pub fn command(&self, db: &str, cmd: &Document) -> Result<Document> {
        let level = match cmd.get("profile").and_then(tailstream_engine::find::as_i64) {
            Some(l @ -1..=2) => l as i32,
            _ => {
                return Err(Error::bad_value(
                    "Invalid profiling level: must be -1, 0, 1 or 2",
                ))
            }
        };
        let before = self.dbs.read().get(db).cloned().unwrap_or(DbSettings {
            level: 0,
            sample_rate: 1.0,
            filter: None,
            filter_doc: None,
        });
        let mut reply = doc! {
            "was": before.level,
            "slowms": self.slow_ms.load(Ordering::Relaxed),
            "sampleRate": before.sample_rate,
        };
        if let Some(f) = &before.filter_doc {
            reply.insert("filter", f.clone());
        }
        if level == -1 {
            return Ok(reply);
        }
        let mut next = before;
        next.level = level;
        if let Some(ms) = cmd.get("slowms").and_then(tailstream_engine::find::as_i64) {
            self.slow_ms.store(ms, Ordering::Relaxed);
        }
        if let Some(r) = cmd.get("sampleRate") {
            match tailstream_engine::query::compare::as_f64(r) {
                Some(r) if (0.0..=1.0).contains(&r) => next.sample_rate = r,
                _ => {
                    return Err(Error::bad_value(
                        "'sampleRate' must be between 0.0 and 1.0 inclusive",
                    ))
                }
            }
        }
        match cmd.get("filter") {
            None => {}
            Some(Bson::String(s)) if s == "unset" => {
                next.filter = None;
                next.filter_doc = None;
            }
            Some(Bson::Document(f)) => {
                next.filter = Some(Arc::new(Matcher::new(f)?));
                next.filter_doc = Some(f.clone());
            }
            Some(_) => {
                return Err(Error::new(
                    codes::TYPE_MISMATCH,
                    "'filter' must be an object or the string 'unset'",
                ))
            }
        }
        let mut dbs = self.dbs.write();
        dbs.insert(db.to_string(), next);
        self.any
            .store(dbs.values().any(|s| s.level > 0), Ordering::Relaxed);
        Ok(reply)
    }

    /// True while some database is profiled.
    pub fn enabled(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// The profile document of a finished command, if its database profiles it.
    pub fn entry(&self, f: &Finished) -> Option<(Namespace, Document)> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let settings = self.dbs.read().get(f.db).cloned()?;
        let millis = f.elapsed.as_millis() as i64;
        let slow = millis >= self.slow_ms.load(Ordering::Relaxed);
        let wanted = match settings.level {
            2 => true,
            1 => slow || settings.filter.is_some(),
            _ => false,
        };
        if !wanted || f.name == "profile" {
            return None;
        }
        if settings.sample_rate < 1.0 && uniform_random() >= settings.sample_rate {
            return None;
        }
        let op = match f.name {
            "find" => "query",
            "getMore" => "getmore",
            "insert" => "insert",
            "update" => "update",
            "delete" => "remove",
            _ => "command",
        };
        let mut entry = doc! {
            "op": op,
            "ns": f.namespace(),
            "command": f.command_summary(),
        };
        f.insert_examined(&mut entry);
        if let Some(n) = f.nreturned {
            entry.insert("nreturned", n);
        }
        if let Some(n) = f.response_length {
            entry.insert("responseLength", n);
        }
        if let Some(e) = f.error {
            entry.insert("ok", 0.0);
            insert_error(&mut entry, e);
        }
        entry.insert("protocol", "op_msg");
        entry.insert("millis", millis);
        entry.insert("ts", bson::DateTime::now());
        entry.insert("client", f.client.clone());
        if let Some(a) = &f.app_name {
            entry.insert("appName", a.clone());
        }
        entry.insert("allUsers", Bson::Array(Vec::new()));
        entry.insert("user", "");
        if let Some(m) = &settings.filter {
            if !m.matches(&entry) {
                return None;
            }
        }
        Some((Namespace::new(f.db, "system.profile"), entry))
    }
}

impl Finished<'_> {
    /// The namespace the command worked on (`db.$cmd` for one without a collection).
    fn namespace(&self) -> String {
        let coll = match self.cmd.get(self.name) {
            Some(Bson::String(c)) => c.as_str(),
            _ if self.name == "getMore" => self.cmd.get_str("collection").unwrap_or("$cmd"),
            _ => "$cmd",
        };
        format!("{}.{}", self.db, coll)
    }

    /// mongod's figures of what the operation read and wrote, in its order: the plan,
    /// keys and documents examined, then (Tailstream's own, the figure seed 000 dug out
    /// of mongod's logs) the oplog entries and bytes a change stream read, then a
    /// write's counts. A command that read nothing through a plan gets none of them.
    fn insert_examined(&self, into: &mut Document) {
        let e = &self.examined;
        if !e.is_empty() {
            if let Some(p) = &e.plan_summary {
                into.insert("planSummary", p.clone());
            }
            into.insert("keysExamined", saturating_i64(e.keys_examined));
            into.insert("docsExamined", saturating_i64(e.docs_examined));
            if e.sorted_in_memory {
                into.insert("hasSortStage", true);
            }
            if e.used_disk {
                into.insert("usedDisk", true);
            }
            if e.oplog_entries_read > 0 || e.oplog_bytes_read > 0 {
                into.insert("oplogEntriesRead", saturating_i64(e.oplog_entries_read));
                into.insert("oplogBytesRead", saturating_i64(e.oplog_bytes_read));
            }
        }
        for (k, v) in &self.written {
            into.insert(*k, *v);
        }
    }

    fn command_summary(&self) -> Document {
        command_summary(self.name, self.cmd)
    }
}

/// The command, or a summary of it when it is large, as mongod records it (the slow
/// line, the profile, a cursor's `originatingCommand`).
pub fn command_summary(name: &str, cmd: &Document) -> Document {
    if bson::to_vec(cmd).map(|b| b.len()).unwrap_or(0) > MAX_COMMAND_BYTES {
        doc! {"$truncated": format!("{name} command of {} fields", cmd.len())}
    } else {
        cmd.clone()
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A failed command's error, as the profile entry and the slow-operation line show it.
fn insert_error(into: &mut Document, e: &Error) {
    into.insert("errMsg", e.message.clone());
    into.insert(
        "errName",
        tailstream_engine::query::error::code_name(e.code),
    );
    into.insert("errCode", e.code);
}

/// mongod's "Slow query" log line for a command slower than `slowms`.
pub fn log_slow(conn_id: i64, f: &Finished) {
    let mut attr = doc! {
        "type": "command",
        "ns": f.namespace(),
    };
    if let Some(a) = &f.app_name {
        attr.insert("appName", a.clone());
    }
    attr.insert("command", f.command_summary());
    f.insert_examined(&mut attr);
    if let Some(n) = f.nreturned {
        attr.insert("nreturned", n);
    }
    if let Some(e) = f.error {
        attr.insert("ok", 0);
        insert_error(&mut attr, e);
    }
    if let Some(n) = f.response_length {
        attr.insert("reslen", n);
    }
    attr.insert("remote", f.client.clone());
    attr.insert("protocol", "op_msg");
    attr.insert("durationMillis", f.elapsed.as_millis() as i64);
    crate::logging::emit(
        "I",
        "COMMAND",
        crate::logging::ID_SLOW_QUERY,
        &format!("conn{conn_id}"),
        "Slow query",
        attr,
    );
}

/// Writes a profile document, creating the database's capped `system.profile` first.
pub fn record(state: &ServerState, ns: &Namespace, entry: Document) {
    let engine = &state.engine;
    // While `fsync` holds writes (`db.fsyncLock()`), profile entries are dropped rather
    // than written into files being copied (or waited for).
    let Some(_pass) = engine.fsync_lock.try_enter_write() else {
        return;
    };
    if engine.collection(ns).is_none() {
        let options = doc! {"capped": true, "size": PROFILE_COLLECTION_BYTES};
        // Another command may create it at the same time: that is fine.
        let _ = engine.create_collection(ns, options);
    }
    if let Err(e) = engine.insert_documents(ns, vec![entry], true) {
        tracing::warn!(ns = %ns.full(), "profile entry not written: {}", e.message);
    }
}

/// A number in [0, 1) for `sampleRate`: std's randomly keyed hasher over a counter.
fn uniform_random() -> f64 {
    use std::hash::BuildHasher;
    static COUNTER: AtomicI64 = AtomicI64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let bits = std::collections::hash_map::RandomState::new().hash_one(n);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

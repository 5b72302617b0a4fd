//! In-progress operations, as mongod reports and kills them: the `currentOp` command,
//! the `$currentOp` aggregation stage and `killOp`.
//!
//! Every connection registers itself for its lifetime ([`Registry::connect`]); the
//! command it is running is a [`Running`] in its slot, set and cleared by `gates::run`
//! (one uncontended lock each way, the command document shared, not copied). A
//! report walks the connections; `killOp` kills the operation's [`Operation`], which
//! scripts, `sleep`, scans and awaiting getMores watch.

use crate::commands::args::{opt_bool, GENERIC_ARGS};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::matcher::Matcher;
use tailstream_engine::query::script::Operation;
use tailstream_wire::KeptField;

/// A client connection, as long as it is open.
pub struct ConnInfo {
    pub id: i64,
    /// The client's address as mongod shows it.
    pub peer: String,
    /// The `client` metadata of its first hello.
    pub client: OnceLock<Document>,
    /// The command it is running, if any.
    pub running: Mutex<Option<Running>>,
    /// The user it authenticated as (`user@db`), for `$ownOps` and `effectiveUsers`.
    pub user: Mutex<Option<String>>,
    /// The subject of the client's TLS certificate (RFC 2253, as mongod shows it), when
    /// it connected with TLS and showed one that verified: the user MONGODB-X509
    /// authentication takes.
    pub peer_subject: OnceLock<String>,
}

impl ConnInfo {
    /// `client.application.name` of the first hello (fail points and the profiler
    /// match on it).
    pub fn app_name(&self) -> Option<&str> {
        self.client
            .get()
            .and_then(|c| c.get_document("application").ok())
            .and_then(|a| a.get_str("name").ok())
    }
}

/// A command being run.
pub struct Running {
    pub opid: i32,
    pub started: Instant,
    pub op: Arc<Operation>,
    pub db: String,
    pub cmd: Arc<Document>,
    /// The `$clusterTime` the decoding left out of `cmd` (see `wire::KeptField`).
    pub cluster_time: Option<Arc<KeptField>>,
    /// Waiting for `fsync`'s lock to be released (a write while `db.fsyncLock()` holds).
    pub waiting_for_lock: bool,
}

pub struct Registry {
    conns: Mutex<HashMap<i64, Arc<ConnInfo>>>,
    next_opid: AtomicI32,
    /// Bumped by every killOp that found its operation: getMores awaiting data
    /// look whether theirs was the one.
    kills: tokio::sync::watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            conns: Default::default(),
            next_opid: AtomicI32::new(1),
            kills: tokio::sync::watch::channel(0).0,
        }
    }
}

/// What a report includes (the `$currentOp` options this server acts on).
#[derive(Default)]
pub struct Options {
    pub idle_connections: bool,
    pub idle_cursors: bool,
    /// Only the operations and cursors of this user (`$ownOps` / `ownOps`; the
    /// caller's user, None when it has none: then nothing is its own).
    pub own_ops: Option<Option<String>>,
}

impl Registry {
    pub fn connect(&self, id: i64, peer: String) -> Arc<ConnInfo> {
        let info = Arc::new(ConnInfo {
            id,
            peer,
            client: OnceLock::new(),
            running: Mutex::new(None),
            user: Mutex::new(None),
            peer_subject: OnceLock::new(),
        });
        self.conns.lock().insert(id, info.clone());
        info
    }

    pub fn disconnect(&self, id: i64) {
        self.conns.lock().remove(&id);
    }

    /// A new operation id: positive, increasing, wrapping as mongod's 32-bit ones.
    pub fn next_opid(&self) -> i32 {
        (self.next_opid.fetch_add(1, Ordering::Relaxed) & i32::MAX).max(1)
    }

    /// A receiver that sees every successful killOp.
    pub fn subscribe_kills(&self) -> tokio::sync::watch::Receiver<u64> {
        self.kills.subscribe()
    }

    /// Wakes whatever waits for its operation to be killed (awaiting getMores, writes
    /// waiting for the fsync lock), for each to look whether it was.
    pub fn signal_kill(&self) {
        self.kills.send_modify(|n| *n += 1);
    }

    /// Resolves with the operation's interruption error once `op` is killed (killOp,
    /// client gone) or runs past its deadline (maxTimeMS); never otherwise.
    pub async fn interrupted(&self, op: &Operation) -> Error {
        let mut kills = self.subscribe_kills();
        loop {
            if let Err(e) = op.check() {
                return e;
            }
            match op.deadline() {
                Some(d) => {
                    tokio::select! {
                        _ = kills.changed() => {}
                        _ = tokio::time::sleep_until(d.into()) => {}
                    }
                }
                None => {
                    let _ = kills.changed().await;
                }
            }
        }
    }

    /// Kills the operation `opid` with Interrupted; whether it was running.
    /// The user (`user@db`) of the connection running the current command (the one
    /// whose operation is `op`).
    pub fn user_running(&self, op: &Arc<Operation>) -> Option<String> {
        let conns: Vec<Arc<ConnInfo>> = self.conns.lock().values().cloned().collect();
        conns.into_iter().find_map(|c| {
            let running = c.running.lock();
            let mine = running.as_ref().is_some_and(|r| Arc::ptr_eq(&r.op, op));
            drop(running);
            if mine {
                c.user.lock().clone()
            } else {
                None
            }
        })
    }

    /// The user of the connection running operation `opid`, if that operation runs.
    pub fn user_of_opid(&self, opid: i64) -> Option<Option<String>> {
        let conns: Vec<Arc<ConnInfo>> = self.conns.lock().values().cloned().collect();
        conns.into_iter().find_map(|c| {
            let runs = c
                .running
                .lock()
                .as_ref()
                .is_some_and(|r| i64::from(r.opid) == opid);
            runs.then(|| c.user.lock().clone())
        })
    }

    pub fn kill(&self, opid: i64) -> bool {
        let conns: Vec<Arc<ConnInfo>> = self.conns.lock().values().cloned().collect();
        for c in conns {
            if let Some(r) = c.running.lock().as_ref() {
                if i64::from(r.opid) == opid {
                    r.op.kill(codes::INTERRUPTED);
                    self.signal_kill();
                    return true;
                }
            }
        }
        false
    }

    /// The report's documents: one per running command, then (as asked) one per idle
    /// connection and one per idle cursor.
    pub fn report(&self, state: &ServerState, opts: &Options) -> Vec<Document> {
        let mut conns: Vec<Arc<ConnInfo>> = self.conns.lock().values().cloned().collect();
        conns.sort_by_key(|c| c.id);
        let host = host(state);
        let now = bson::DateTime::now();
        let now_text = now
            .try_to_rfc3339_string()
            .unwrap_or_else(|_| now.to_string());
        let mut out = Vec::new();
        for c in conns {
            let user = c.user.lock().clone();
            if let Some(own) = &opts.own_ops {
                if own.is_none() || *own != user {
                    continue;
                }
            }
            let mut d = doc! {
                "type": "op",
                "host": host.clone(),
                "desc": format!("conn{}", c.id),
                "connectionId": tailstream_engine::ddl::stored_number(c.id),
                "client": c.peer.clone(),
            };
            if let Some(meta) = c.client.get() {
                d.insert("clientMetadata", meta.clone());
            }
            if let Some((name, db)) = user.as_deref().and_then(|u| u.rsplit_once('@')) {
                d.insert(
                    "effectiveUsers",
                    vec![Bson::Document(doc! {"user": name, "db": db})],
                );
            }
            let running = c.running.lock();
            match running.as_ref() {
                Some(r) => {
                    let elapsed = r.started.elapsed();
                    let name = r.cmd.keys().next().map(String::as_str).unwrap_or("");
                    d.insert("active", true);
                    d.insert("currentOpTime", now_text.clone());
                    d.insert("threaded", true);
                    d.insert("opid", r.opid);
                    if let Some(lsid) = r.cmd.get("lsid") {
                        d.insert("lsid", lsid.clone());
                    }
                    d.insert("secs_running", elapsed.as_secs() as i64);
                    d.insert("microsecs_running", elapsed.as_micros() as i64);
                    d.insert("op", op_type(name));
                    d.insert("ns", namespace(&r.db, name, &r.cmd));
                    d.insert("redacted", false);
                    let sent = KeptField::as_sent(&r.cmd, r.cluster_time.as_deref());
                    d.insert("command", sent.into_owned());
                    if let Some(p) = r.op.progress() {
                        insert_progress(&mut d, &p);
                    }
                    let examined = r.op.stats().snapshot();
                    if let Some(plan) = examined.plan_summary {
                        d.insert("planSummary", plan);
                    }
                    d.insert("numYields", 0);
                    d.insert("locks", Document::new());
                    d.insert("waitingForLock", r.waiting_for_lock);
                    d.insert("lockStats", Document::new());
                    d.insert("waitingForFlowControl", false);
                    d.insert("flowControlStats", Document::new());
                    if r.op.interrupted() {
                        d.insert("killPending", true);
                    }
                }
                None if opts.idle_connections => {
                    d.insert("active", false);
                    d.insert("currentOpTime", now_text.clone());
                    d.insert("threaded", true);
                }
                None => continue,
            }
            drop(running);
            out.push(d);
        }
        if opts.idle_cursors {
            for c in state.engine.cursors.idle() {
                if let Some(own) = &opts.own_ops {
                    let owner = c.origin.as_ref().and_then(|o| o.user.clone());
                    if own.is_none() || *own != owner {
                        continue;
                    }
                }
                let created = bson::DateTime::from_system_time(c.returned.created);
                // The last use, measured on the monotonic clock, never before the
                // opening (the two clocks' roundings differ by a millisecond).
                let last_access = bson::DateTime::from_millis(
                    (now.timestamp_millis() - c.idle_for.as_millis() as i64)
                        .max(created.timestamp_millis()),
                );
                let mut d = doc! {
                    "type": "idleCursor",
                    "host": host.clone(),
                    "ns": c.ns,
                };
                if let Some(lsid) = c.lsid {
                    d.insert("lsid", lsid);
                }
                d.insert(
                    "cursor",
                    doc! {
                        "cursorId": c.id,
                        "createdDate": created,
                        "lastAccessDate": last_access,
                        "nDocsReturned": i64::try_from(c.returned.docs).unwrap_or(i64::MAX),
                        "nBatchesReturned": i64::try_from(c.returned.batches).unwrap_or(i64::MAX),
                        "noCursorTimeout": c.no_timeout,
                        "tailable": c.tailable,
                        "awaitData": c.await_data,
                    },
                );
                if let Some(origin) = &c.origin {
                    if let Ok(cursor) = d.get_document_mut("cursor") {
                        cursor.insert("originatingCommand", origin.command.clone());
                    }
                }
                out.push(d);
            }
        }
        out
    }
}

/// A long operation's progress as mongod's currentOp shows it: `msg` (the meter's
/// text, `<name>: <done>/<total> <percent>%`) and `progress: {done, total}`.
fn insert_progress(d: &mut Document, p: &tailstream_engine::query::script::Progress) {
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    d.insert(
        "msg",
        format!("{}: {}/{} {}%", p.name, p.done, p.total, p.percent()),
    );
    d.insert(
        "progress",
        doc! {"done": as_i64(p.done), "total": as_i64(p.total)},
    );
}

/// mongod's `host` field: this machine's name and the port.
fn host(state: &ServerState) -> String {
    format!("{}:{}", crate::commands::hostname(), state.config.port)
}

/// The `op` field: the CRUD commands by their legacy operation names.
fn op_type(name: &str) -> &'static str {
    match name {
        "insert" => "insert",
        "find" => "query",
        "getMore" => "getmore",
        "update" => "update",
        "delete" => "remove",
        "killCursors" => "killcursors",
        _ => "command",
    }
}

/// The `ns` field: `db.collection` for a command on a collection, else `db.$cmd`.
fn namespace(db: &str, name: &str, cmd: &Document) -> String {
    let coll = match (name, cmd.get(name)) {
        ("getMore", _) => cmd.get_str("collection").ok(),
        (_, Some(Bson::String(c))) => Some(c.as_str()),
        _ => None,
    };
    match coll {
        Some(c) => format!("{db}.{c}"),
        None => format!("{db}.$cmd"),
    }
}

/// The options of a `$currentOp` stage (each a boolean; those about users and mongos
/// are accepted and change nothing on a server without authentication or shards).
pub fn stage_options(state: &ServerState, arg: &Bson) -> Result<Options> {
    let Bson::Document(spec) = arg else {
        return Err(Error::new(
            codes::FAILED_TO_PARSE,
            format!(
                "$currentOp options must be specified in an object, but found: {}",
                crate::commands::args::type_name(arg)
            ),
        ));
    };
    let mut opts = Options::default();
    for (k, v) in spec {
        let flag = match v {
            Bson::Boolean(b) => *b,
            _ => {
                return Err(Error::new(
                    codes::FAILED_TO_PARSE,
                    format!("The '{k}' parameter of the $currentOp stage must be a boolean value, but found: {}", crate::commands::args::type_name(v)),
                ))
            }
        };
        match k.as_str() {
            "idleConnections" => opts.idle_connections = flag,
            "idleCursors" => opts.idle_cursors = flag,
            "ownOps" => opts.own_ops = flag.then(|| caller_user(state)),
            "allUsers" | "idleSessions" | "localOps" | "truncateOps" | "backtrace" => {}
            _ => {
                return Err(Error::new(
                    codes::FAILED_TO_PARSE,
                    format!("Unrecognized option '{k}' in $currentOp stage."),
                ))
            }
        }
    }
    Ok(opts)
}

/// `{currentOp: 1, $all?, $ownOps?, <filter>...}`: `{inprog: [...]}`. `$all` adds
/// the idle connections and ignores the filter, as in mongod.
pub fn command(state: &ServerState, cmd: &Document) -> Result<Document> {
    let all = opt_bool(cmd, "$all")?.unwrap_or(false);
    let own_ops = opt_bool(cmd, "$ownOps")?.unwrap_or(false);
    let mut filter = Document::new();
    for (k, v) in cmd.iter().skip(1) {
        if k != "$all" && k != "$ownOps" && !GENERIC_ARGS.contains(&k.as_str()) {
            filter.insert(k.clone(), v.clone());
        }
    }
    let matcher = if all || filter.is_empty() {
        None
    } else {
        Some(Matcher::new(&filter)?)
    };
    let opts = Options {
        idle_connections: all,
        idle_cursors: false,
        own_ops: own_ops.then(|| caller_user(state)),
    };
    let inprog: Vec<Bson> = state
        .current_ops
        .report(state, &opts)
        .into_iter()
        .filter(|d| matcher.as_ref().is_none_or(|m| m.matches(d)))
        .map(Bson::Document)
        .collect();
    let mut reply = doc! {"inprog": inprog};
    if state.engine.fsync_lock.is_locked() {
        reply.insert("fsyncLock", true);
        reply.insert(
            "info",
            "use db.fsyncUnlock() to terminate the fsync write/snapshot lock",
        );
    }
    Ok(reply)
}

/// The user of the connection running this command (`$ownOps`).
fn caller_user(state: &ServerState) -> Option<String> {
    let op = crate::commands::OPERATION.try_with(Arc::clone).ok()?;
    state.current_ops.user_running(&op)
}

/// `{killOp: 1, op: <opid>}`: the operation is interrupted (11601) at its next check.
pub fn kill_op(state: &ServerState, cmd: &Document) -> Result<Document> {
    let opid = match cmd.get("op") {
        None => {
            return Err(Error::new(
                codes::NO_SUCH_KEY,
                "Missing expected field \"op\"",
            ))
        }
        Some(v) => match tailstream_engine::find::as_i64(v) {
            Some(n) => n,
            None => {
                return Err(Error::new(
                    codes::TYPE_MISMATCH,
                    format!(
                        "Expected field \"op\" to have numeric type, but found {}",
                        crate::commands::args::type_name(v)
                    ),
                ))
            }
        },
    };
    let found = state.current_ops.kill(opid);
    tracing::info!(opid, found, "killOp");
    Ok(doc! {"info": "attempting to kill op"})
}

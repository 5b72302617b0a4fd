//! Administrative and diagnostic commands: parameters, command-line options,
//! host and server status, sessions, fsync, oplog notes.

use super::blocking;
use crate::state::{apply_engine_parameters, ServerState};
use bson::{doc, Bson, Document};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tailstream_engine::query::error::{codes, Error, Result};

pub fn get_parameter(state: &ServerState, cmd: &Document) -> Result<Document> {
    let params = state.parameters.read();
    let all = matches!(cmd.get("getParameter"), Some(Bson::String(s)) if s == "*")
        || matches!(cmd.get("getParameter"), Some(Bson::Document(d)) if d.get_bool("allParameters").unwrap_or(false));
    if all {
        return Ok(params.clone());
    }
    let mut out = Document::new();
    for k in cmd.keys().skip(1) {
        if k.starts_with('$') || matches!(k.as_str(), "lsid" | "comment") {
            continue;
        }
        match params.get(k) {
            Some(v) => {
                out.insert(k.clone(), v.clone());
            }
            None => {
                return Err(Error::invalid_options(format!(
                    "no option found to get: {k}"
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(Error::invalid_options("no option found to get"));
    }
    Ok(out)
}

pub fn set_parameter(state: &ServerState, cmd: &Document) -> Result<Document> {
    let mut params = state.parameters.write();
    let mut out = Document::new();
    for (k, v) in cmd.iter().skip(1) {
        if k.starts_with('$') || matches!(k.as_str(), "lsid" | "comment") {
            continue;
        }
        if k == "enableTestCommands" {
            return Err(Error::bad_value(
                "enableTestCommands can only be set at startup",
            ));
        }
        if let Some(old) = params.insert(k.clone(), v.clone()) {
            out.insert("was", old);
        }
    }
    apply_engine_parameters(&params);
    Ok(out)
}

pub fn get_cmd_line_opts(state: &ServerState) -> Document {
    let c = &state.config;
    let mut set_parameter = Document::new();
    for p in &c.set_parameter {
        if let Some((k, v)) = p.split_once('=') {
            set_parameter.insert(k, v);
        }
    }
    let argv: Vec<Bson> = crate::config::Config::argv()
        .into_iter()
        .map(Bson::String)
        .collect();
    let mut parsed = doc! {
        "net": {
            "port": c.port as i32,
            "bindIp": c.bind_ip.clone(),
            "unixDomainSocket": {
                "enabled": !c.no_unix_socket,
                "pathPrefix": c.unix_socket_prefix.display().to_string(),
                "filePermissions": c.file_permissions as i32,
            },
        },
        "replication": {"replSet": c.repl_set.clone(), "oplogSizeMB": c.oplog_size_mb() as i64},
        "storage": {"dbPath": c.dbpath.display().to_string()},
        "setParameter": set_parameter,
    };
    let tls = tls_options(c);
    if !tls.is_empty() {
        if let Ok(net) = parsed.get_document_mut("net") {
            net.insert("tls", tls);
        }
    }
    if let Some(path) = &c.config_file {
        parsed.insert("config", path.display().to_string());
    }
    if let Some(ms) = c.slow_ms {
        parsed.insert("operationProfiling", doc! {"slowOpThresholdMs": ms});
    }
    if c.auth {
        parsed.insert("security", doc! {"authorization": "enabled"});
    }
    let system_log = system_log_options(c);
    if !system_log.is_empty() {
        parsed.insert("systemLog", system_log);
    }
    doc! {"argv": argv, "parsed": parsed}
}

/// `parsed.net.tls` of getCmdLineOpts: the TLS options set, under the config file's
/// names (the key file's path, never what it holds).
fn tls_options(c: &crate::config::Config) -> Document {
    let mut d = Document::new();
    if c.tls_mode != crate::tls::Mode::Disabled {
        d.insert("mode", c.tls_mode.name());
    }
    if let Some(path) = &c.tls_certificate_key_file {
        d.insert("certificateKeyFile", path.display().to_string());
    }
    if let Some(path) = &c.tls_ca_file {
        d.insert("CAFile", path.display().to_string());
    }
    if c.tls_allow_connections_without_certificates {
        d.insert("allowConnectionsWithoutCertificates", true);
    }
    if c.tls_allow_invalid_certificates {
        d.insert("allowInvalidCertificates", true);
    }
    d
}

/// `parsed.systemLog` of getCmdLineOpts: the log options set (from the command line or
/// the config file), under the config file's names.
fn system_log_options(c: &crate::config::Config) -> Document {
    let mut d = Document::new();
    if let Some(path) = &c.logpath {
        d.insert("destination", "file");
        d.insert("path", path.display().to_string());
    }
    if c.quiet {
        d.insert("quiet", true);
    }
    if c.log_rotate == crate::logging::Rotate::Reopen {
        d.insert("logRotate", "reopen");
    }
    d
}

/// This machine's name (hostInfo, currentOp's `host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

pub fn host_info() -> Document {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1);
    let mem_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0);
    let hostname = hostname();
    doc! {
        "system": {"currentTime": bson::DateTime::now(), "hostname": hostname, "cpuAddrSize": 64, "memSizeMB": mem_mb, "numCores": cores, "cpuArch": std::env::consts::ARCH},
        "os": {"type": "Linux", "name": std::env::consts::OS},
        "extra": {},
    }
}

/// serverStatus's `rocksdb` section (as MongoRocks named it): the storage engine's own
/// figures, and the write-ahead log's size on disk.
fn rocksdb_status(state: &ServerState) -> Document {
    state
        .engine
        .storage_figures()
        .into_iter()
        .map(|(name, v)| {
            (
                name.to_string(),
                Bson::Int64(i64::try_from(v).unwrap_or(i64::MAX)),
            )
        })
        .collect()
}

pub fn server_status(state: &ServerState) -> Document {
    let o = &state.opcounters;
    let uptime = state.started.elapsed();
    let engine = &state.engine;
    let (oldest, newest) = engine.oplog_window();
    let mut status = doc! {
        "host": state.config.advertised_host(),
        "version": super::handshake::VERSION,
        "process": "tailstream",
        "pid": std::process::id() as i64,
        "uptime": uptime.as_secs() as i64,
        "uptimeMillis": uptime.as_millis() as i64,
        "uptimeEstimate": uptime.as_secs() as i64,
        "localTime": bson::DateTime::now(),
        "asserts": state.metrics.asserts(),
        "connections": {
            "current": state.current_connections.load(Ordering::Relaxed) as i32,
            "available": (state.config.max_conns as i64 - state.current_connections.load(Ordering::Relaxed)) as i32,
            "totalCreated": state.total_connections.load(Ordering::Relaxed) as i64,
            "establishmentRateLimit": {
                "rejected": state.ingress.rejected.load(Ordering::Relaxed) as i64,
                "queued": state.ingress.queued.load(Ordering::Relaxed) as i64,
            },
        },
        "extra_info": crate::metrics::extra_info(),
        "globalLock": state.metrics.global_lock(uptime),
        "mem": crate::metrics::mem(),
        "network": state.metrics.network(),
        "transportSecurity": state.tls.transport_security(),
        "opLatencies": state.metrics.op_latencies(),
        "opcounters": {
            "insert": o.insert.load(Ordering::Relaxed) as i64,
            "query": o.query.load(Ordering::Relaxed) as i64,
            "update": o.update.load(Ordering::Relaxed) as i64,
            "delete": o.delete.load(Ordering::Relaxed) as i64,
            "getmore": o.getmore.load(Ordering::Relaxed) as i64,
            "command": o.command.load(Ordering::Relaxed) as i64,
        },
        "storageEngine": {"name": "rocksdb", "supportsCommittedReads": true, "persistent": true, "supportsSnapshotReadConcern": false},
        "rocksdb": rocksdb_status(state),
        "transactions": state.transactions.status(),
        "repl": {
            "hosts": [state.config.advertised_host()],
            "setName": state.config.repl_set.clone(),
            "isWritablePrimary": true,
            "secondary": false,
            "primary": state.config.advertised_host(),
            "me": state.config.advertised_host(),
        },
        "metrics": {
            "cursor": {
                "open": {"total": engine.cursors.len() as i64},
                "timedOut": engine.cursors.timed_out() as i64,
            },
            "document": state.metrics.document(),
            "operation": state.metrics.operation(),
            "queryExecutor": state.metrics.query_executor(),
            "ttl": {
                "deletedDocuments": tailstream_engine::ttl::TTL_DELETED.load(Ordering::Relaxed) as i64,
                "passes": tailstream_engine::ttl::TTL_PASSES.load(Ordering::Relaxed) as i64,
            },
        },
        "oplog": {
            "oldest": oldest,
            "newest": newest,
        },
        "durability": durability_status(engine),
    };
    if let Some(certificate) = state.tls.server_certificate_status() {
        status.insert("security", certificate.clone());
    }
    status
}

/// serverStatus `durability`: commit and fsync sequence numbers, how long the
/// group-commit thread's fsyncs took (`syncMicros.buckets`: [upper bound µs, count] of
/// the non-empty buckets; the last bound is -1 for a second or more), and how long each
/// commit waited for the end of the fsync that covered it (`commitToDurableMicros`).
fn durability_status(engine: &tailstream_engine::Engine) -> Document {
    let (count, total, max, buckets) = engine.durability.syncs.snapshot();
    let (waits, wait_total, wait_max, wait_buckets) = engine.durability.commit_waits.snapshot();
    doc! {
        "committed": engine.durability.last_committed() as i64,
        "synced": engine.durability.synced() as i64,
        "syncs": count as i64,
        "gatherTimeouts": engine.durability.gather_timeouts.load(std::sync::atomic::Ordering::Relaxed) as i64,
        "syncMicros": {"total": total as i64, "max": max as i64, "buckets": histogram_buckets(buckets)},
        "commitToDurableMicros": {
            "count": waits as i64,
            "total": wait_total as i64,
            "max": wait_max as i64,
            "buckets": histogram_buckets(wait_buckets),
        },
    }
}

/// A histogram's non-empty buckets as [upper bound µs (-1: unbounded), count].
fn histogram_buckets(buckets: Vec<(u64, u64)>) -> Vec<Bson> {
    buckets
        .into_iter()
        .map(|(upper, n)| {
            let upper = if upper == u64::MAX { -1 } else { upper as i64 };
            Bson::Array(vec![Bson::Int64(upper), Bson::Int64(n as i64)])
        })
        .collect()
}

/// The cluster-wide defaults: none set, so the implicit ones of a replica set
/// (read concern local, write concern majority, which is what this server applies).
/// `getDefaultRWConcern`: the defaults in force; `inMemory: true` adds `inMemory` to
/// the reply, as mongod does (this server's cache and store never differ).
pub fn get_default_rw_concern(state: &ServerState, cmd: &Document) -> Result<Document> {
    let in_memory = super::opt_bool(cmd, "inMemory")?.unwrap_or(false);
    Ok(state.rw_defaults.reply(in_memory))
}

/// `setDefaultRWConcern`: checks, persists and replies with the new defaults.
pub async fn set_default_rw_concern(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let wc = super::write::parse_write_concern(cmd)?;
    let owned = state.clone();
    let request = cmd.clone();
    blocking(state, move |e| owned.rw_defaults.set(e, &request)).await?;
    let mut reply = state.rw_defaults.reply(false);
    if let Some(wce) = super::write::await_write_concern(state, wc, None).await {
        reply.insert("writeConcernError", wce);
    }
    Ok(reply)
}

/// The feature compatibility versions a 7.0 server can be set to (its own and the last LTS).
const FCV_VERSIONS: &[&str] = &["6.0", "7.0"];

/// `setFeatureCompatibilityVersion`: 7.0 requires `confirm: true` for any change of
/// version. The version is reported by `getParameter` and kept in
/// `admin.system.version` (see `fcv`); this server's features are the same at either
/// version.
pub async fn set_feature_compatibility_version(
    state: &Arc<ServerState>,
    cmd: &Document,
) -> Result<Document> {
    let version = match cmd.get("setFeatureCompatibilityVersion") {
        Some(Bson::String(v)) => v.as_str(),
        Some(other) => {
            return Err(super::wrong_field_type(
                "setFeatureCompatibilityVersion",
                other,
                "string",
            ))
        }
        None => unreachable!("the command's first field names it"),
    };
    if !FCV_VERSIONS.contains(&version) {
        return Err(Error::new(
            FCV_INVALID_VERSION,
            format!(
                "Invalid feature compatibility version value '{version}'; expected '6.0' or '6.3' or '7.0'. \
                 See https://docs.mongodb.com/master/release-notes/7.0-compatibility/#feature-compatibility."
            ),
        ));
    }
    super::args::opt_bool(cmd, "fromConfigServer")?;
    let confirmed = super::opt_bool(cmd, "confirm")?.unwrap_or(false);
    let current = state
        .parameters
        .read()
        .get_document("featureCompatibilityVersion")
        .ok()
        .and_then(|d| d.get_str("version").ok())
        .unwrap_or("7.0")
        .to_string();
    if current != version && !confirmed {
        let message = if version == "7.0" {
            "Once you have upgraded to 7.0, you will not be able to downgrade FCV and binary version without support assistance. Please re-run this command with 'confirm: true' to acknowledge this and continue with the FCV upgrade."
        } else {
            "Once you have downgraded the FCV, if you choose to downgrade the binary version, it will require support assistance. Please re-run this command with 'confirm: true' to acknowledge this and continue with the FCV downgrade."
        };
        return Err(Error::new(FCV_CONFIRM_REQUIRED, message));
    }
    let wc = super::write::parse_write_concern(cmd)?;
    let stored = version.to_string();
    blocking(state, move |e| crate::fcv::persist(e, &stored)).await?;
    state.parameters.write().insert(
        "featureCompatibilityVersion",
        crate::fcv::parameter(version),
    );
    let mut reply = Document::new();
    if let Some(wce) = super::write::await_write_concern(state, wc, None).await {
        reply.insert("writeConcernError", wce);
    }
    Ok(reply)
}

/// mongod 7.0's code for a version its parser does not know (`parseVersion`); the
/// last continuous release (6.3) it knows is not offered here either.
const FCV_INVALID_VERSION: i32 = 4926900;

/// mongod 7.0's code for an FCV change sent without `confirm: true`.
const FCV_CONFIRM_REQUIRED: i32 = 7369100;

/// `lockInfo`: the locks held. Commands here take no lock manager's locks, so none.
pub fn lock_info() -> Document {
    doc! {"lockInfo": []}
}

/// `top`: time and count of the commands on each collection since the server started.
pub fn top(state: &ServerState) -> Document {
    doc! {"totals": state.top.report()}
}

/// `logRotate`: the log file is renamed with the time and a new one opened (or
/// reopened, `--logRotate reopen`); a log on standard error has nothing to rotate. Its
/// argument is `1` (every log) or the log to rotate: `server`, the only one a community
/// mongod registers (NoSuchKey for another, `audit` included).
pub fn log_rotate(cmd: &Document) -> Result<Document> {
    match cmd.get("logRotate") {
        Some(Bson::String(s)) if s != "server" => Err(Error::new(
            codes::NO_SUCH_KEY,
            "Unknown log type for rotate",
        )),
        _ => crate::logging::rotate()
            .map(|()| Document::new())
            .map_err(|e| Error::new(codes::OPERATION_FAILED, format!("log rotation failed: {e}"))),
    }
}

/// The plan cache commands: plans are chosen per query here and never cached, so
/// `planCacheClear` has nothing to clear; index filters are kept (`index_filters`).
/// The arguments are checked as mongod checks them (the collection's name, and the
/// query shape's fields as objects).
pub fn plan_cache(state: &ServerState, cmd: &Document, db: &str) -> Result<Document> {
    let name = cmd.keys().next().cloned().unwrap_or_default();
    let ns = super::collection_arg(cmd, db)?;
    for field in ["query", "sort", "projection", "collation"] {
        super::opt_doc(cmd, field)?;
    }
    let uuid = state.engine.collection(&ns).map(|m| m.uuid);
    let filters = &state.index_filters;
    Ok(match name.as_str() {
        "planCacheListFilters" => {
            let listed = uuid.map(|u| filters.list(u)).unwrap_or_default();
            doc! {"filters": listed}
        }
        "planCacheClearFilters" => {
            let shape = match cmd.get("query") {
                Some(_) => Some(filter_shape(cmd, Vec::new())?),
                None if cmd.contains_key("sort") || cmd.contains_key("projection") => {
                    return Err(Error::bad_value(
                        "sort or projection provided without query",
                    ))
                }
                None => None,
            };
            if let Some(u) = uuid {
                filters.clear(u, shape.as_ref());
            }
            Document::new()
        }
        "planCacheSetFilter" => {
            let indexes = filter_indexes(cmd)?;
            let filter = filter_shape(cmd, indexes)?;
            let Some(u) = uuid else {
                return Err(Error::bad_value("no such collection"));
            };
            filters.set(u, filter);
            Document::new()
        }
        _ => Document::new(),
    })
}

/// `planCacheSetFilter`'s `indexes`: key patterns or index names, at least one.
fn filter_indexes(cmd: &Document) -> Result<Vec<Bson>> {
    let indexes = match cmd.get("indexes") {
        None => return Err(Error::bad_value("required field indexes missing")),
        Some(Bson::Array(a)) => a,
        Some(_) => return Err(Error::bad_value("required field indexes must be an array")),
    };
    if indexes.is_empty() {
        return Err(Error::bad_value(
            "required field indexes must contain at least one index",
        ));
    }
    for index in indexes {
        match index {
            Bson::Document(d) if d.is_empty() => {
                return Err(Error::bad_value("index specification cannot be empty"))
            }
            Bson::Document(_) | Bson::String(_) => {}
            _ => {
                return Err(Error::bad_value(
                    "each item in indexes must be an object or string",
                ))
            }
        }
    }
    Ok(indexes.clone())
}

/// The query shape a filter command names (`query` required).
fn filter_shape(cmd: &Document, indexes: Vec<Bson>) -> Result<crate::index_filters::Filter> {
    let query = match cmd.get("query") {
        None => return Err(Error::bad_value("required field query missing")),
        Some(Bson::Document(q)) => q.clone(),
        Some(_) => return Err(Error::bad_value("required field query must be an object")),
    };
    Ok(crate::index_filters::Filter {
        query,
        sort: super::opt_doc(cmd, "sort")?.unwrap_or_default(),
        projection: super::opt_doc(cmd, "projection")?.unwrap_or_default(),
        collation: super::opt_doc(cmd, "collation")?.filter(|c| !c.is_empty()),
        indexes,
    })
}

pub fn repl_set_get_status(state: &ServerState) -> Document {
    if let Some(status) = crate::replset::status(state) {
        return status;
    }
    let ts = state.engine.cluster_time();
    let me = state.config.advertised_host();
    doc! {
        "set": state.config.repl_set.clone(),
        "date": bson::DateTime::now(),
        "myState": 1,
        "term": 1i64,
        "members": [{
            "_id": 0, "name": me, "health": 1.0, "state": 1, "stateStr": "PRIMARY",
            "uptime": state.started.elapsed().as_secs() as i64,
            "optime": {"ts": ts, "t": 1i64}, "self": true,
        }],
        "optimes": {"lastCommittedOpTime": {"ts": ts, "t": 1i64}, "appliedOpTime": {"ts": ts, "t": 1i64}, "durableOpTime": {"ts": ts, "t": 1i64}},
    }
}

/// `replSetGetConfig` (`rs.conf()`): the configuration of the one-member replica set
/// this server presents, shaped as mongod 7.0's.
pub fn repl_set_get_config(state: &ServerState, cmd: &Document) -> Result<Document> {
    if let Some(config) = crate::replset::config(state) {
        let mut reply = doc! {"config": config};
        if crate::commands::args::opt_bool(cmd, "commitmentStatus")? == Some(true) {
            reply.insert("commitmentStatus", true);
        }
        return Ok(reply);
    }
    let config = doc! {
        "_id": state.config.repl_set.clone(),
        "version": 1,
        "term": 1,
        "members": [{
            "_id": 0,
            "host": state.config.advertised_host(),
            "arbiterOnly": false,
            "buildIndexes": true,
            "hidden": false,
            "priority": 1.0,
            "tags": {},
            "secondaryDelaySecs": 0i64,
            "votes": 1,
        }],
        "protocolVersion": 1i64,
        "writeConcernMajorityJournalDefault": true,
        "settings": {
            "chainingAllowed": true,
            "heartbeatIntervalMillis": 2000,
            "heartbeatTimeoutSecs": 10,
            "electionTimeoutMillis": 10000,
            "catchUpTimeoutMillis": -1,
            "catchUpTakeoverDelayMillis": 30000,
            "getLastErrorModes": {},
            "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
            "replicaSetId": state.engine.replica_set_id,
        },
    };
    let mut reply = doc! {"config": config};
    // A one-member set's configuration is committed as soon as it exists.
    if crate::commands::args::opt_bool(cmd, "commitmentStatus")? == Some(true) {
        reply.insert("commitmentStatus", true);
    }
    Ok(reply)
}

/// endSessions, killSessions, killAllSessions, refreshSessions, startSession.
pub fn sessions(state: &ServerState, name: &str, cmd: &Document) -> Result<Document> {
    let lsids: Vec<Bson> = match cmd.get(name) {
        Some(Bson::Array(a)) => a.clone(),
        _ => Vec::new(),
    };
    match name {
        "startSession" => Ok(doc! {
            "id": {"id": bson::Binary::from_uuid(bson::Uuid::new())},
            "timeoutMinutes": 30,
        }),
        "endSessions" => {
            state.retry_cache.end_sessions(&lsids);
            lsids.iter().for_each(|l| state.transactions.end_session(l));
            state.local_sessions.end(&lsids);
            Ok(Document::new())
        }
        "killSessions" => {
            state.engine.cursors.kill_sessions(&lsids);
            lsids.iter().for_each(|l| state.transactions.end_session(l));
            Ok(Document::new())
        }
        "killAllSessions" | "killAllSessionsByPattern" => {
            if lsids.is_empty() {
                state.engine.cursors.kill_all();
                state.transactions.end_all();
            }
            Ok(Document::new())
        }
        _ => Ok(Document::new()),
    }
}

/// `fsync`: everything committed goes to disk and into the data files. With `lock: true` (`db.fsyncLock()`),
/// writes then wait until `fsyncUnlock` and the data files stay unchanged meanwhile,
/// so they can be copied (see `tailstream_engine::fsync_lock`).
pub async fn fsync(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    if crate::commands::args::opt_bool(cmd, "lock")?.unwrap_or(false) {
        let count = crate::commands::blocking(state, |e| e.lock_for_fsync()).await?;
        tracing::info!(lock_count = count, "fsync: locked against writes");
        return Ok(doc! {
            "info": "now locked against writes, use db.fsyncUnlock() to unlock",
            "lockCount": i64::from(count),
            "seeAlso": "http://dochub.mongodb.org/core/fsynccommand",
        });
    }
    // As mongod's checkpoint: the data files, not only the journal, hold every write.
    crate::commands::blocking(state, |e| e.checkpoint()).await?;
    Ok(doc! {"numFiles": 1})
}

/// `fsyncUnlock`: releases one `fsync` lock; writes resume when none is left.
pub async fn fsync_unlock(state: &Arc<ServerState>) -> Result<Document> {
    match crate::commands::blocking(state, |e| Ok(e.unlock_fsync())).await? {
        Some(count) => {
            tracing::info!(lock_count = count, "fsyncUnlock completed");
            Ok(doc! {"info": "fsyncUnlock completed", "lockCount": i64::from(count)})
        }
        None => Err(Error::new(
            codes::ILLEGAL_OPERATION,
            "fsyncUnlock called when not locked",
        )),
    }
}

pub async fn append_oplog_note(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let data = cmd
        .get_document("data")
        .map_err(|_| {
            Error::new(
                codes::NO_SUCH_KEY,
                "appendOplogNote requires a 'data' field",
            )
        })?
        .clone();
    blocking(state, move |e| {
        e.write_noop(&tailstream_engine::format::doc_to_string(&data))
    })
    .await?;
    Ok(Document::new())
}

/// `shutdown` (`db.shutdownServer()`): the server stops as on SIGTERM (every commit
/// synced, the store closed, the socket file removed). As mongod without
/// authentication, only a client on this host may ask (13 otherwise). No reply: the
/// connection closes as the process exits, which is what drivers and shells expect.
/// `force` and `timeoutSecs` are accepted; there is no secondary to wait for (mongod
/// skips the step-down of a one-member replica set too).
pub async fn shutdown(state: &ServerState, peer: &str, cmd: &Document) -> Result<Document> {
    super::args::opt_bool(cmd, "force")?;
    super::args::opt_i64(cmd, "timeoutSecs")?;
    if !is_local_peer(peer) {
        return Err(Error::new(
            codes::UNAUTHORIZED,
            "shutdown must run from localhost when running db without auth",
        ));
    }
    tracing::info!(client = peer, "shutdown requested by a client");
    state.shutdown_requested.notify_one();
    std::future::pending().await
}

/// Whether a connection's peer (as `whatsmyuri` shows it) is on this host.
fn is_local_peer(peer: &str) -> bool {
    peer.starts_with("anonymous unix socket")
        || peer
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback())
}

#[cfg(test)]
mod shutdown_tests {
    #[test]
    fn only_loopback_and_unix_socket_peers_are_local() {
        assert!(super::is_local_peer("127.0.0.1:51234"));
        assert!(super::is_local_peer("[::1]:51234"));
        assert!(super::is_local_peer("anonymous unix socket:27017"));
        assert!(!super::is_local_peer("10.1.2.3:51234"));
        assert!(!super::is_local_peer("[2001:db8::1]:51234"));
    }
}

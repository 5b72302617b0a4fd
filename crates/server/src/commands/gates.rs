//! A command's way from its document to its reply: [`run`], a chain of gates, each a
//! short function. Their order is mongod's, and it is visible to drivers (when several
//! checks fail, the first decides the error):
//!
//! 1. the command's name and its [`Spec`] in the registry: an unknown name fails with
//!    59 CommandNotFound before anything else, as mongod looks a command up first;
//! 2. the envelope ([`check_envelope`]): transaction fields, read concern, Stable API,
//!    `requireApiVersion`, snapshot reads; then the user's privileges, and on a replica
//!    set member that is not primary, a read without a secondary read preference
//!    (13435), and a read concern's `afterClusterTime` waited for;
//! 3. fail points, with test commands ([`fail_points`]);
//! 4. the session's transaction, entered or ended ([`enter_transaction`]);
//! 5. registered as running, for currentOp and killOp ([`Running`]);
//! 6. for a command that writes, a replica set member that may write (10107), the
//!    free-space floor, then the fsync lock ([`admit_write`]);
//! 7. the handler, admin-only commands refused elsewhere first ([`execute`]);
//! 8. afterwards: a failed command ends its transaction, the profiler's entry, and the
//!    reply, with an unsatisfied write concern or an injected one ([`reply_for`]).
//!
//! Every command's future passes through these gates, and a future is as large as its
//! largest state and is copied whole each time it is moved (into its caller's state,
//! into a box). So a gate whose wait is rare awaits it boxed behind a synchronous
//! fast path (the fsync lock, authentication, a forwarded aggregation, a wait for the
//! members of a set), and the handlers' futures are boxed ([`registry::BoxedRun`]):
//! a command's future went from 3,800 to 1,500 bytes, and its handler's inside its
//! operation and transaction scopes ([`execute`]) from 8,300 to 400 (the bus
//! benchmark: 103,000 → 97,800 instructions per message).

use super::registry::{self, Spec};
use super::testing::{self, Injected};
use super::{
    args, error_reply, ok_reply, operation_for, raw_cursor_reply, raw_ok_reply, write, Body, Call,
    Conn, Output, Reply, OPERATION,
};
use crate::current_op::ConnInfo;
use crate::state::ServerState;
use crate::transactions::{OpenTransaction, TxnFields};
use bson::{Bson, Document, RawDocumentBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tailstream_engine::fsync_lock::WritePass;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::script::Operation;
use tailstream_wire::KeptField;

/// Runs one command through the gates and builds its reply (never fails: errors
/// become `ok: 0` replies).
pub(super) async fn run(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    db: &str,
    cmd: Arc<Document>,
    payload: Option<Vec<RawDocumentBuf>>,
    cluster_time: Option<KeptField>,
) -> Reply {
    // What the decoding left raw, put back only where the command is shown.
    let cluster_time = cluster_time.map(Arc::new);
    let name = match command_name(&cmd) {
        Ok(name) => name,
        Err(e) => return Reply::error(state, &e),
    };
    state.opcounters.command.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let test_commands = state.config.test_commands_enabled();
    let spec = match look_up(&name, test_commands) {
        Ok(spec) => spec,
        Err(e) => return Reply::error(state, &e),
    };
    let class = crate::metrics::OpClass::of(&name);
    let _active = state.metrics.enter(class);
    note_client_and_session(state, conn, &name, &cmd);
    let txn = match check_envelope(spec, &name, db, &cmd) {
        Ok(txn) => txn,
        Err(e) => return Reply::error(state, &e),
    };
    if let Err(e) = crate::auth::check(state, conn, spec, db, &cmd).await {
        return Reply::error(state, &e);
    }
    if let Err(e) = crate::replset::check_secondary_read(state, spec.name, db, &cmd) {
        return Reply::error(state, &e);
    }
    if let Err(e) = crate::replset::wait_for_read_concern(state, &cmd).await {
        return Reply::error(state, &e);
    }
    let cmd = match state.rw_defaults.apply(spec, &cmd, txn.is_some()) {
        Some(with_defaults) => Arc::new(with_defaults),
        None => cmd,
    };
    let labels = Labels {
        name: &name,
        part_of_transaction: txn.is_some(),
        retryable_write: txn.is_none() && testing::retryable_write(&name, &cmd),
    };
    let injected = if test_commands {
        match Box::pin(fail_points(state, conn, &name, &cmd, &labels)).await {
            Ok(injected) => injected,
            Err(reply) => return reply,
        }
    } else {
        None
    };
    let open = match enter_transaction(state, &name, &cmd, txn.as_ref()) {
        Ok(open) => open,
        Err(e) => return Reply::error(state, &e),
    };
    let in_transaction = open.is_some();
    let writes = spec.writes.writes(&cmd);
    if let Some(forwarded) =
        crate::replset::forward_output_aggregation(state, writes, &name, db, &cmd).await
    {
        return match forwarded {
            Ok(reply) => Reply::body(Body::Doc(reply)),
            Err(e) => Reply::error(state, &e),
        };
    }
    let op = operation_for(&name, &cmd);
    if spec.write_concern && !in_transaction {
        // Its `wtimeout` bounds its waits for the set (`WriteConcern::bound_replication`).
        if let Ok(wc) = write::parse_write_concern(&cmd) {
            wc.bound_replication(state, &op);
        }
    }
    let running = Running::register(state, &conn.info, &op, db, (&cmd, &cluster_time), started);
    let _write_pass = match admit_write(state, writes, spec, db, &op, &running).await {
        Ok(pass) => pass,
        Err(e) => return Reply::error(state, &labels.apply_own(e)),
    };
    let call = Call {
        state,
        conn: &mut *conn,
        spec,
        name: &name,
        db,
        cmd: &cmd,
        payload,
    };
    let result = execute(call, Arc::clone(&op), open).await;
    drop(running);
    if in_transaction {
        end_failed_transaction(state, txn.as_ref(), &result);
    }
    if test_commands {
        note_time_limited_cursor(state, &cmd, &result);
    }
    let shown = Shown {
        cmd: &cmd,
        cluster_time: cluster_time.as_deref(),
    };
    note_cursor_origin(state, conn, (&name, shown), &result);
    // One clock read for the latency figures, the slow-operation check, the profiler
    // and top.
    let elapsed = started.elapsed();
    state
        .metrics
        .command_done(class, elapsed, batch_len(&result).unwrap_or(0));
    state.metrics.examined(op.stats(), scan_kind(&name, &cmd));
    profile(state, conn, (db, &name, shown), &op, elapsed, &result);
    count_in_top(state, spec, db, &name, &cmd, elapsed, result.is_ok());
    let failed_wce = match &result {
        Err(e) if !in_transaction && spec.write_concern => {
            Box::pin(failed_write_concern(state, &cmd, e.code)).await
        }
        _ => None,
    };
    reply_for(state, &cmd, &labels, injected, result, failed_wce)
}

/// Counts the command in `top` under the collection it names (commands on a database
/// or the server are not counted there, as in mongod's report); a dropped collection
/// or database leaves it.
fn count_in_top(
    state: &ServerState,
    spec: &Spec,
    db: &str,
    name: &str,
    cmd: &Document,
    elapsed: std::time::Duration,
    ok: bool,
) {
    let coll = match (name, cmd.get(name)) {
        ("getMore", _) => cmd.get_str("collection").ok(),
        (_, Some(Bson::String(c))) if !spec.admin_only => Some(c.as_str()),
        _ => None,
    };
    let Some(coll) = coll.filter(|c| !c.is_empty()) else {
        if ok && name == "dropDatabase" {
            state.top.dropped(db, None);
        }
        return;
    };
    let kind = crate::top::Kind::of(name);
    let writes = spec.writes.writes(cmd);
    state.top.record(db, coll, kind, writes, elapsed);
    if ok && name == "drop" {
        state.top.dropped(db, Some(coll));
    }
}

/// The command's name: its document's first key.
fn command_name(cmd: &Document) -> Result<String> {
    cmd.keys()
        .next()
        .cloned()
        .ok_or_else(|| Error::new(codes::FAILED_TO_PARSE, "Empty command object"))
}

/// The command's spec (59 CommandNotFound for a name the registry lacks).
fn look_up(name: &str, test_commands: bool) -> Result<&'static Spec> {
    registry::find(name, test_commands).ok_or_else(|| {
        Error::new(
            codes::COMMAND_NOT_FOUND,
            format!("no such command: '{name}'"),
        )
    })
}

/// Records the handshake's client metadata before fail points are evaluated, so a
/// `failCommand` with an `appName` applies to the very first hello of a connection (as
/// mongod does), and marks the command's session as used.
fn note_client_and_session(state: &ServerState, conn: &Conn, name: &str, cmd: &Document) {
    if conn.info.client.get().is_none() && matches!(name, "hello" | "isMaster" | "ismaster") {
        if let Some(Bson::Document(client)) = cmd.get("client") {
            let _ = conn.info.client.set(client.clone());
        }
    }
    if let Some(lsid) = cmd.get("lsid") {
        state.local_sessions.touch(lsid);
    }
}

/// The generic arguments around the command, checked as mongod parses them before the
/// command runs: transaction fields, read concern, the Stable API, `requireApiVersion`,
/// snapshot reads. Returns the transaction fields (None: not part of a transaction).
fn check_envelope(spec: &Spec, name: &str, db: &str, cmd: &Document) -> Result<Option<TxnFields>> {
    // A driver's usual command carries none of the fields: one pass over its keys
    // instead of a hashed lookup per field (800 instructions a command, callgrind
    // 2026-11-28); what it decides is what the checks decide (a unit test compares).
    if cmd.keys().all(|k| !ENVELOPE_FIELDS.contains(&k.as_str())) {
        check_api_version_required(cmd)?;
        return Ok(None);
    }
    check_envelope_fields(spec, name, db, cmd)
}

/// The fields [`check_envelope_fields`] looks at (`lsid` and `txnNumber` matter only
/// with `autocommit`): a command with none of them passes every check of it but
/// `requireApiVersion`'s.
const ENVELOPE_FIELDS: [&str; 6] = [
    "autocommit",
    "startTransaction",
    "readConcern",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
];

/// [`check_envelope`]'s checks, one field at a time.
fn check_envelope_fields(
    spec: &Spec,
    name: &str,
    db: &str,
    cmd: &Document,
) -> Result<Option<TxnFields>> {
    let txn = crate::transactions::fields(spec, name, db, cmd)?;
    let level = read_concern_level(cmd)?;
    check_stable_api(spec, name, cmd)?;
    check_api_version_required(cmd)?;
    check_snapshot_read(spec, name, txn.is_some(), level)?;
    Ok(txn)
}

/// How the errors of a command are labelled: in a transaction, with mongod's
/// TransientTransactionError where it applies; a retryable write's own errors of
/// mongod's retriable category (a member that stopped being primary: 10107, 189,
/// 11602, ...) with RetryableWriteError, so drivers retry it on the new primary.
struct Labels<'a> {
    name: &'a str,
    part_of_transaction: bool,
    retryable_write: bool,
}

impl Labels<'_> {
    fn apply(&self, mut e: Error) -> Error {
        if self.part_of_transaction {
            crate::transactions::label_transient(self.name, &mut e);
        }
        e
    }

    /// [`Self::apply`] for an error of the server's own (a fail point's error carries
    /// exactly the labels it was given).
    fn apply_own(&self, e: Error) -> Error {
        let e = self.apply(e);
        if self.retryable_write
            && crate::error_labels::RETRYABLE_WRITE_CODES.contains(&e.code)
            && !e.labels.iter().any(|l| l == "RetryableWriteError")
        {
            return e.with_label("RetryableWriteError");
        }
        e
    }
}

/// The test commands' fail points: `maxTimeAlwaysTimeOut`, and what `failCommand`
/// injects (a delay, a closed connection, an error, or a write concern error the reply
/// carries later). Err: the reply the command ends with.
async fn fail_points(
    state: &ServerState,
    conn: &Conn,
    name: &str,
    cmd: &Document,
    labels: &Labels<'_>,
) -> std::result::Result<Option<Injected>, Reply> {
    let injected = state
        .fail_points
        .fail_command(name, cmd, conn.info.app_name());
    if let Some(e) = state.fail_points.max_time_expired(cmd) {
        // An error in a getMore kills its cursor (as in mongod).
        if let Some(Bson::Int64(id)) = cmd.get("getMore") {
            state.engine.cursors.remove(*id);
        }
        return Err(Reply::error(state, &e));
    }
    if let Some(inj) = &injected {
        if let Some(d) = inj.block {
            tokio::time::sleep(d).await;
        }
        if inj.close_connection {
            return Err(Reply::close());
        }
        if let Some(e) = &inj.error {
            return Err(Reply::error(state, &labels.apply(e.clone())));
        }
    }
    Ok(injected)
}

/// A command in a transaction runs in it (see `transactions`); a command outside one
/// with a newer txnNumber ends the session's open transaction. commitTransaction and
/// abortTransaction find theirs themselves.
fn enter_transaction(
    state: &ServerState,
    name: &str,
    cmd: &Document,
    txn: Option<&TxnFields>,
) -> Result<Option<OpenTransaction>> {
    match txn {
        Some(f) if !matches!(name, "commitTransaction" | "abortTransaction") => {
            let start = matches!(cmd.get("startTransaction"), Some(Bson::Boolean(true)));
            state.transactions.enter(state, f, start).map(Some)
        }
        Some(_) => Ok(None),
        None => {
            if let Some((lsid, n)) = args::retry_key(cmd) {
                state.transactions.newer_number(lsid, n);
            }
            Ok(None)
        }
    }
}

/// The command in its connection's slot of the currentOp registry while it runs;
/// cleared when dropped.
struct Running(Arc<ConnInfo>);

impl Running {
    fn register(
        state: &ServerState,
        info: &Arc<ConnInfo>,
        op: &Arc<Operation>,
        db: &str,
        (cmd, cluster_time): (&Arc<Document>, &Option<Arc<KeptField>>),
        started: Instant,
    ) -> Running {
        *info.running.lock() = Some(crate::current_op::Running {
            opid: state.current_ops.next_opid(),
            started,
            op: op.clone(),
            db: db.to_string(),
            cmd: cmd.clone(),
            cluster_time: cluster_time.clone(),
            waiting_for_lock: false,
        });
        Running(info.clone())
    }

    /// currentOp shows it waiting for a lock (`waitingForLock`).
    fn set_waiting_for_lock(&self, waiting: bool) {
        if let Some(r) = self.0.running.lock().as_mut() {
            r.waiting_for_lock = waiting;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        *self.0.running.lock() = None;
    }
}

/// The gates of a command that writes data: the free-space floor, then the fsync lock.
/// The pass it returns lets the fsync lock wait for the command.
/// `writes`: whether the command writes (`Spec::writes`, decided once per command).
async fn admit_write(
    state: &ServerState,
    writes: bool,
    spec: &Spec,
    db: &str,
    op: &Arc<Operation>,
    running: &Running,
) -> Result<Option<WritePass>> {
    if !writes {
        return Ok(None);
    }
    crate::replset::check_writable(state, db)?;
    check_disk_space(state, spec)?;
    if let Some(pass) = state.engine.fsync_lock.try_enter_write() {
        return Ok(Some(pass));
    }
    // Boxed: the wait's future stays out of every command's (see `gates::run`'s doc).
    Box::pin(pass_fsync_lock(state, op, running))
        .await
        .map(Some)
}

/// Below the free-space floor, commands that add data are refused (deletes and drops
/// still run, so space can be freed from a client).
fn check_disk_space(state: &ServerState, spec: &Spec) -> Result<()> {
    if spec.writes == registry::Writes::Removes {
        return Ok(());
    }
    state.disk_space.check(&state.config.dbpath)
}

/// A write waits here while `fsync` holds the lock (`db.fsyncLock()`), shown by
/// currentOp as waiting for a lock; the lock in turn waits for the writes already past
/// this point. killOp, the client going away and maxTimeMS end the wait too, as they
/// end a wait for a lock in mongod.
async fn pass_fsync_lock(
    state: &ServerState,
    op: &Arc<Operation>,
    running: &Running,
) -> Result<WritePass> {
    let gate = &state.engine.fsync_lock;
    let waits = gate.is_locked();
    if waits {
        running.set_waiting_for_lock(true);
    }
    let entered = tokio::select! {
        pass = gate.enter_write() => Ok(pass),
        e = state.current_ops.interrupted(op) => Err(e),
    };
    if waits {
        running.set_waiting_for_lock(false);
    }
    entered
}

/// Runs the command in its operation (deadline, kill) and its transaction: admin-only
/// commands are refused on other databases, then its handler runs.
async fn execute(
    call: Call<'_>,
    op: Arc<Operation>,
    open: Option<OpenTransaction>,
) -> Result<Output> {
    OPERATION
        .scope(op, crate::transactions::scope(open, dispatch(call)))
        .await
}

async fn dispatch(call: Call<'_>) -> Result<Output> {
    let spec = call.spec;
    if spec.admin_only {
        args::admin_only(call.db, spec.name)?;
    }
    (spec.handler)(call).await
}

/// As in mongod, a failed command (or write) ends its transaction.
fn end_failed_transaction(state: &ServerState, txn: Option<&TxnFields>, result: &Result<Output>) {
    let failed = match result {
        Err(_) => true,
        Ok(Output::Doc(d)) => d.contains_key("writeErrors"),
        Ok(_) => false,
    };
    if let (true, Some(f)) = (failed, txn) {
        state.transactions.abort_open(f);
    }
}

/// `maxTimeAlwaysTimeOut` fires on the getMores of a cursor opened with `maxTimeMS`:
/// the fail points note such cursors.
fn note_time_limited_cursor(state: &ServerState, cmd: &Document, result: &Result<Output>) {
    if let Ok(Output::Doc(body)) = result {
        let cursor_id = body
            .get_document("cursor")
            .and_then(|c| c.get_i64("id"))
            .unwrap_or(0);
        state
            .fail_points
            .note_cursor(cmd, cursor_id, |id| state.engine.cursors.get(id).is_some());
    }
}

/// A find or aggregate that leaves a cursor open records who opened it and with what
/// command (mongod's `originatingCommand`), for `$currentOp` and the status page.
fn note_cursor_origin(
    state: &ServerState,
    conn: &Conn,
    (name, shown): (&str, Shown<'_>),
    result: &Result<Output>,
) {
    if !matches!(name, "find" | "aggregate") {
        return;
    }
    let id = match result {
        Ok(Output::Cursor(c)) => c.id,
        Ok(Output::Doc(body)) => body
            .get_document("cursor")
            .and_then(|c| c.get_i64("id"))
            .unwrap_or(0),
        Err(_) => 0,
    };
    if id == 0 {
        return;
    }
    let origin = tailstream_engine::cursor::CursorOrigin {
        command: crate::profiler::command_summary(name, &shown.as_sent()),
        client: conn.peer.clone(),
        app_name: conn.info.app_name().map(str::to_string),
        user: conn.auth.user.as_ref().map(|u| u.full_name()),
    };
    state.engine.cursors.set_origin(id, origin);
}

/// The reply: `ok: 1` with the cluster time (written raw where nothing is injected), a
/// raw cursor batch, a closed connection, or the error with its labels and the write
/// concern error mongod adds on failure; a `failCommand` write concern error last.
/// The reply to a command; `failed_wce`: the write concern error of a failed command
/// ([`failed_write_concern`]).
fn reply_for(
    state: &ServerState,
    cmd: &Document,
    labels: &Labels<'_>,
    injected: Option<Injected>,
    result: Result<Output>,
    failed_wce: Option<Document>,
) -> Reply {
    let injected_wce = injected.and_then(|i| i.write_concern_error);
    let mut body = match result {
        Ok(Output::Doc(body)) if injected_wce.is_none() => {
            return Reply::body(raw_ok_reply(state, body))
        }
        Ok(Output::Doc(body)) => ok_reply(state, body),
        Ok(Output::Cursor(c)) => return Reply::body(raw_cursor_reply(state, c)),
        Err(e) if e.code == testing::CLOSE_CONNECTION => return Reply::close(),
        Err(e) => {
            let mut body = error_reply(state, &labels.apply_own(e));
            if let Some(wce) = failed_wce {
                body.insert("writeConcernError", wce);
            }
            body
        }
    };
    if let Some(wce) = injected_wce {
        testing::attach_write_concern_error(&mut body, wce, cmd);
    }
    Reply::body(Body::Doc(body))
}

/// A command as its reports show it (the log, the profiler, a cursor's origin): its
/// document with the `$clusterTime` the decoding left raw put back in its place.
#[derive(Clone, Copy)]
struct Shown<'a> {
    cmd: &'a Document,
    cluster_time: Option<&'a KeptField>,
}

impl Shown<'_> {
    fn as_sent(&self) -> std::borrow::Cow<'_, Document> {
        KeptField::as_sent(self.cmd, self.cluster_time)
    }
}

/// Logs the command when it was slow, and leaves its entry in its database's
/// `system.profile` when that database is profiled (see `crate::profiler`).
fn profile(
    state: &ServerState,
    conn: &Conn,
    (db, name, shown): (&str, &str, Shown<'_>),
    op: &Operation,
    elapsed: std::time::Duration,
    result: &Result<Output>,
) {
    let slow = is_slow(state, name, shown.cmd, elapsed);
    if !slow && !state.profiler.enabled() {
        return;
    }
    let cmd = &*shown.as_sent();
    let nreturned = batch_len(result).map(|n| n as i64);
    let (response_length, error) = match result {
        Ok(Output::Doc(body)) => (bson::to_vec(body).map(|b| b.len() as i64).ok(), None),
        Ok(Output::Cursor(_)) => (None, None),
        Err(e) => (None, Some(e)),
    };
    let finished = crate::profiler::Finished {
        db,
        name,
        cmd,
        elapsed,
        nreturned,
        response_length,
        error,
        client: conn.peer.clone(),
        app_name: conn.info.app_name().map(str::to_string),
        examined: op.stats().snapshot(),
        written: written_counts(name, result),
    };
    if slow {
        crate::profiler::log_slow(conn.id, &finished);
    }
    if let Some((ns, entry)) = state.profiler.entry(&finished) {
        crate::profiler::record(state, &ns, entry);
    }
}

/// How a command's collection scan counts in `metrics.queryExecutor.collectionScans`:
/// once, when its plan is made (a getMore continues its cursor's scan); a tailable
/// find's apart (`nonTailable` leaves it out, as mongod's does).
fn scan_kind(name: &str, cmd: &Document) -> crate::metrics::ScanKind {
    use crate::metrics::ScanKind;
    match name {
        "getMore" => ScanKind::Continued,
        "find" if matches!(cmd.get("tailable"), Some(Bson::Boolean(true))) => ScanKind::Tailable,
        _ => ScanKind::Planned,
    }
}

/// What a write command's reply says it did, under mongod's slow-line and profile
/// names (`ninserted`, `nMatched`, `nModified`, `nUpserted`, `ndeleted`).
fn written_counts(name: &str, result: &Result<Output>) -> Vec<(&'static str, i64)> {
    let Ok(Output::Doc(body)) = result else {
        return Vec::new();
    };
    let n = || body.get("n").and_then(tailstream_engine::find::as_i64);
    let mut out = Vec::new();
    match name {
        "insert" => out.extend(n().map(|n| ("ninserted", n))),
        "delete" => out.extend(n().map(|n| ("ndeleted", n))),
        "update" => {
            let upserted = match body.get("upserted") {
                Some(Bson::Array(a)) => a.len() as i64,
                _ => 0,
            };
            let modified = body
                .get("nModified")
                .and_then(tailstream_engine::find::as_i64);
            if let (Some(n), Some(modified)) = (n(), modified) {
                out.push(("nMatched", n - upserted));
                out.push(("nModified", modified));
                out.push(("nUpserted", upserted));
            }
        }
        _ => {}
    }
    out
}

/// How many documents a command's reply returns (its cursor's batch), for a reply
/// with a cursor.
fn batch_len(result: &Result<Output>) -> Option<usize> {
    match result {
        Ok(Output::Cursor(c)) => Some(c.docs.len()),
        Ok(Output::Doc(body)) => body
            .get_document("cursor")
            .ok()
            .and_then(|c| {
                c.get_array("firstBatch")
                    .or_else(|_| c.get_array("nextBatch"))
                    .ok()
            })
            .map(Vec::len),
        Err(_) => None,
    }
}

/// Whether a command took longer than `slowms`, not counting what it was asked to wait
/// for: a `getMore`'s wait for new data (its `maxTimeMS`, else the one second an
/// awaitData cursor waits by default) and an awaitable `hello`'s `maxAwaitTimeMS`; an
/// idle change stream or a driver's monitor is not slow.
fn is_slow(state: &ServerState, name: &str, cmd: &Document, elapsed: std::time::Duration) -> bool {
    /// An awaitData getMore's wait when it gives no maxTimeMS (mongod's default).
    const DEFAULT_AWAIT_MS: i64 = 1000;
    let millis = i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX);
    let slow_ms = state.profiler.slow_ms();
    if millis < slow_ms {
        return false;
    }
    let asked_wait_ms = if name == "getMore" {
        cmd.get("maxTimeMS")
            .and_then(tailstream_engine::find::as_i64)
            .unwrap_or(DEFAULT_AWAIT_MS)
    } else {
        cmd.get("maxAwaitTimeMS")
            .and_then(tailstream_engine::find::as_i64)
            .unwrap_or(0)
    };
    // Not below zero: under slowms 0 a getMore that returned before its wait is slow too.
    millis.saturating_sub(asked_wait_ms.max(0)).max(0) >= slow_ms
}

/// mongod waits for a command's write concern even when the command fails (so that what
/// the client read before is as durable as it asked), and drivers report a
/// `writeConcernError` in the error reply first: an unsatisfiable `w` gets its error;
/// on a member of a set, with a `wtimeout` and `w: "majority"` or `w` > 1, the members
/// are waited for up to the newest committed time (the one `w: N` waits for after a
/// write), and a timeout gets mongod's error 64. Not for a member that stopped being
/// primary (mongod does not wait then), nor without a `wtimeout` (no endless wait for
/// an error reply).
async fn failed_write_concern(state: &ServerState, cmd: &Document, code: i32) -> Option<Document> {
    const STATE_CHANGES: [i32; 4] = [10107, 11602, 189, 91];
    let wc = write::parse_write_concern(cmd).ok()?;
    if wc.unsatisfiable(state) {
        return Some(write::unsatisfiable_write_concern_error());
    }
    state.repl.member()?;
    if STATE_CHANGES.contains(&code) || !(wc.majority || wc.members > 1) {
        return None;
    }
    let wtimeout = wc.wtimeout?;
    let members = if wc.majority {
        crate::replset::data_bearing_members(state) as u32 / 2 + 1
    } else {
        wc.members
    };
    let ts = state.engine.cluster_time();
    let met = crate::replset::wait_for_members(state, members, ts, Some(wtimeout)).await;
    (!met).then(|| write::wtimeout_error(&wc))
}

/// Aggregation stages outside the Stable API, version 1.
const API_V1_EXCLUDED_STAGES: &[&str] = &[
    "$currentOp",
    "$indexStats",
    "$listLocalSessions",
    "$listSessions",
    "$planCacheStats",
    "$collStats",
    "$search",
    "$searchMeta",
    "$listSearchIndexes",
    "$changeStreamSplitLargeEvent",
    "$changeStreamBucket",
];

/// The Stable API: its parameters, then, with `apiStrict: true`, the command (and its
/// stages) must be in API version 1.
fn check_stable_api(spec: &Spec, name: &str, cmd: &Document) -> Result<()> {
    if api_strict(cmd)? {
        check_api_version_1(spec, name, cmd)?;
    }
    Ok(())
}

/// Checks the stable-API parameters as mongod parses them: apiVersion a string and
/// "1", apiStrict and apiDeprecationErrors booleans and only with an apiVersion.
/// Returns whether apiStrict is true.
fn api_strict(cmd: &Document) -> Result<bool> {
    match cmd.get("apiVersion") {
        None => {
            if cmd.contains_key("apiStrict") || cmd.contains_key("apiDeprecationErrors") {
                return Err(Error::new(
                    codes::API_PARAMETERS_WITHOUT_VERSION,
                    "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion",
                ));
            }
            return Ok(false);
        }
        Some(Bson::String(v)) if v == "1" => {}
        Some(Bson::String(v)) if v == "2" => {
            return Err(Error::new(
                codes::API_VERSION_ERROR,
                "Cannot accept API version 2",
            ))
        }
        Some(Bson::String(_)) => {
            return Err(Error::new(
                codes::API_VERSION_ERROR,
                "API version must be \"1\"",
            ))
        }
        Some(v) => return Err(args::wrong_field_type("apiVersion", v, "string")),
    }
    for field in ["apiStrict", "apiDeprecationErrors"] {
        match cmd.get(field) {
            None | Some(Bson::Boolean(_)) => {}
            Some(v) => return Err(args::wrong_field_type(field, v, "bool")),
        }
    }
    Ok(matches!(cmd.get("apiStrict"), Some(Bson::Boolean(true))))
}

/// `apiStrict: true` refuses commands and aggregation stages outside API version 1,
/// as mongod does (323 APIStrictError).
fn check_api_version_1(spec: &Spec, name: &str, cmd: &Document) -> Result<()> {
    if !spec.api_v1 {
        return Err(Error::new(
            codes::API_STRICT_ERROR,
            format!("Provided apiStrict:true, but the command {name} is not in API Version 1"),
        ));
    }
    if spec.name != "aggregate" {
        return Ok(());
    }
    let Ok(pipeline) = cmd.get_array("pipeline") else {
        return Ok(());
    };
    for stage in pipeline.iter().filter_map(|s| s.as_document()) {
        if let Some(k) = stage
            .keys()
            .next()
            .filter(|k| API_V1_EXCLUDED_STAGES.contains(&k.as_str()))
        {
            return Err(Error::new(
                codes::API_STRICT_ERROR,
                format!("{k} is not allowed with 'apiStrict: true' in API Version 1"),
            ));
        }
    }
    Ok(())
}

/// Read concern levels mongod knows (its IDL refuses any other with BadValue).
const READ_CONCERN_LEVELS: &[&str] =
    &["local", "majority", "linearizable", "available", "snapshot"];

/// The command's read concern level, checked as mongod checks it (None: no level).
pub(crate) fn read_concern_level(cmd: &Document) -> Result<Option<&str>> {
    let level = match cmd.get("readConcern") {
        None => return Ok(None),
        Some(Bson::Document(rc)) => match rc.get("level") {
            None => return Ok(None),
            Some(Bson::String(l)) => l,
            Some(v) => return Err(args::wrong_field_type("readConcern.level", v, "string")),
        },
        Some(v) => return Err(args::wrong_field_type("readConcern", v, "object")),
    };
    if READ_CONCERN_LEVELS.contains(&level.as_str()) {
        Ok(Some(level.as_str()))
    } else {
        Err(Error::bad_value(format!(
            "Enumeration value '{level}' for field 'readConcern.level' is not a valid value."
        )))
    }
}

/// `requireApiVersion` (a server parameter): every command must declare its API version.
fn check_api_version_required(cmd: &Document) -> Result<()> {
    if crate::state::REQUIRE_API_VERSION.load(Ordering::Relaxed) && !cmd.contains_key("apiVersion")
    {
        return Err(Error::new(
            codes::API_VERSION_REQUIRED,
            "The apiVersion parameter is required, please configure your MongoClient's API version",
        ));
    }
    Ok(())
}

/// Outside transactions, only the snapshot reads take `readConcern: {level:
/// "snapshot"}`.
fn check_snapshot_read(
    spec: &Spec,
    name: &str,
    part_of_transaction: bool,
    level: Option<&str>,
) -> Result<()> {
    if !part_of_transaction && level == Some("snapshot") && !spec.snapshot_read {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            format!("Command {name} does not support {{ readConcern: {{ level: \"snapshot\" }} }}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn the_envelopes_one_pass_decides_as_its_checks() {
        let base = doc! {
            "insert": "c", "ordered": true, "lsid": {"id": 1}, "txnNumber": 1i64,
            "writeConcern": {"w": 1}, "comment": "x", "maxTimeMS": 5, "$db": "db",
        };
        let with = |extra: Document| {
            let mut d = base.clone();
            d.extend(extra);
            d
        };
        let commands = [
            base.clone(),
            doc! {"insert": "c"},
            with(doc! {"autocommit": false}),
            with(doc! {"autocommit": false, "startTransaction": true}),
            with(doc! {"autocommit": true}),
            with(doc! {"startTransaction": true}),
            with(doc! {"readConcern": {"level": "snapshot"}}),
            with(doc! {"readConcern": {"level": "nope"}}),
            with(doc! {"readConcern": 1}),
            with(doc! {"apiVersion": "1"}),
            with(doc! {"apiVersion": "1", "apiStrict": true}),
            with(doc! {"apiStrict": true}),
            with(doc! {"apiDeprecationErrors": false}),
            with(doc! {"apiVersion": 1}),
        ];
        let decided = |r: Result<Option<TxnFields>>| r.map(|t| t.is_some()).map_err(|e| e.code);
        for name in ["insert", "find", "getMore"] {
            let spec = registry::find(name, false).expect("a registered command");
            for cmd in &commands {
                assert_eq!(
                    decided(check_envelope(spec, name, "db", cmd)),
                    decided(check_envelope_fields(spec, name, "db", cmd)),
                    "{name}: {cmd}"
                );
            }
        }
    }
}

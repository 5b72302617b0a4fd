//! Sessions' multi-document transactions: which transaction each session has open,
//! and the rules mongod applies to the commands of one (see `engine::transaction` for
//! what a transaction reads and writes).
//!
//! A command is part of a transaction when it carries `autocommit: false` with its
//! session's `lsid` and a `txnNumber`; the first one also carries `startTransaction:
//! true`. The transaction lives until `commitTransaction` or `abortTransaction`, an
//! error in one of its commands, a newer `txnNumber` on the session, or `endSessions`.

use crate::commands::registry::Spec;
use crate::state::ServerState;
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_engine::query::args::wrong_type;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::transaction::Transaction;
use tailstream_engine::ClusterTime;

/// The open transaction a command runs in (taken out by the commit).
pub type OpenTransaction = Arc<Mutex<Option<Transaction>>>;

/// Sessions with a transaction, open or ended, at most: one more is refused.
pub const MAX_SESSIONS: usize = 100_000;

tokio::task_local! {
    /// The transaction of the command running on this task, if any.
    static CURRENT: OpenTransaction;
}

/// The transaction of the command being run, if it is part of one.
pub fn current() -> Option<OpenTransaction> {
    CURRENT.try_with(|t| t.clone()).ok()
}

/// Runs a command's future inside its transaction (see [`current`]).
pub async fn scope<F: std::future::Future>(t: Option<OpenTransaction>, f: F) -> F::Output {
    match t {
        Some(t) => CURRENT.scope(t, f).await,
        None => f.await,
    }
}

enum State {
    Open(OpenTransaction),
    Committed,
    Aborted,
}

struct SessionTransaction {
    number: i64,
    state: State,
    started: Instant,
}

#[derive(Default)]
pub struct Transactions {
    sessions: Mutex<HashMap<Vec<u8>, SessionTransaction>>,
    last_expiry: Mutex<Option<Instant>>,
    /// serverStatus's `transactions` totals.
    started: AtomicU64,
    committed: AtomicU64,
    aborted: AtomicU64,
}

/// An open transaction older than this is aborted (mongod's
/// transactionLifetimeLimitSeconds default; setParameter changes it), so an abandoned
/// one cannot hold its documents' locks and its snapshot forever.
pub const TRANSACTION_LIFETIME: Duration = Duration::from_secs(60);

/// The transaction lifetime in force: the `transactionLifetimeLimitSeconds` parameter
/// (at least 1 s), else [`TRANSACTION_LIFETIME`].
fn transaction_lifetime(state: &ServerState) -> Duration {
    state
        .parameters
        .read()
        .get("transactionLifetimeLimitSeconds")
        .and_then(tailstream_engine::find::as_i64)
        .filter(|s| *s >= 1)
        .map(|s| Duration::from_secs(s as u64))
        .unwrap_or(TRANSACTION_LIFETIME)
}

/// What a command's transaction fields say.
pub struct TxnFields {
    pub lsid: Bson,
    pub number: i64,
}

fn session_key(lsid: &Bson) -> Vec<u8> {
    crate::sessions::session_key(lsid)
}

fn no_such_transaction(number: i64, why: &str) -> Error {
    Error::new(
        codes::NO_SUCH_TRANSACTION,
        format!("Transaction with {{ txnNumber: {number} }} {why}"),
    )
    .with_label("TransientTransactionError")
}

/// The `lsid` and `txnNumber` of a command that is part of a transaction (it has
/// `autocommit`), checked as mongod checks them; None for other commands. Only the
/// commands the registry allows in a transaction (`Spec::in_transaction`) run in one.
pub fn fields(spec: &Spec, name: &str, db: &str, cmd: &Document) -> Result<Option<TxnFields>> {
    let Some(autocommit) = cmd.get("autocommit") else {
        if cmd.get_bool("startTransaction").is_ok() {
            return Err(Error::new(
                codes::INVALID_OPTIONS,
                "specifying startTransaction requires autocommit: false",
            ));
        }
        return Ok(None);
    };
    match autocommit {
        Bson::Boolean(false) => {}
        Bson::Boolean(true) => {
            return Err(Error::new(
                codes::INVALID_OPTIONS,
                "autocommit must be false",
            ))
        }
        v => return Err(wrong_type("OperationSessionInfo.autocommit", v, "bool")),
    }
    let lsid = cmd.get("lsid").cloned().ok_or_else(|| {
        Error::new(
            codes::INVALID_OPTIONS,
            "Transactions require a session id (lsid)",
        )
    })?;
    let number = match cmd.get("txnNumber") {
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => *n as i64,
        _ => {
            return Err(Error::new(
                codes::INVALID_OPTIONS,
                "'autocommit' field requires a transaction number to also be specified",
            ))
        }
    };
    if !spec.in_transaction {
        return Err(Error::new(
            codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            format!("Cannot run '{name}' in a multi-document transaction."),
        ));
    }
    // As mongod (CommandHelpers::canUseTransactions): no command of a transaction on
    // the local or config databases or on a system.profile collection.
    if db == "local" {
        return Err(Error::new(
            codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            "Cannot run command against the 'local' database in a transaction.",
        ));
    }
    if db == "config" {
        return Err(Error::new(
            codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            "Cannot run command against the config database in a transaction.",
        ));
    }
    if cmd.get_str(name) == Ok("system.profile") {
        return Err(Error::new(
            codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            format!(
                "Cannot run command against the '{db}.system.profile' collection in a transaction."
            ),
        ));
    }
    let starting = matches!(cmd.get("startTransaction"), Some(Bson::Boolean(true)));
    if starting {
        // As mongod's validateSessionOptions.
        let refused = match name {
            "killCursors" => Some(
                "Cannot run killCursors as the first operation in a multi-document transaction.",
            ),
            "commitTransaction" => Some("Cannot start a transaction with a commit"),
            "abortTransaction" => Some("Cannot start a transaction with an abort"),
            _ => None,
        };
        if let Some(msg) = refused {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                msg,
            ));
        }
    }
    if !starting && cmd.contains_key("readConcern") {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            "Only the first command in a transaction may specify a readConcern",
        ));
    }
    if cmd.contains_key("writeConcern") && !matches!(name, "commitTransaction" | "abortTransaction")
    {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            "Cannot set write concern after starting a transaction.",
        ));
    }
    Ok(Some(TxnFields { lsid, number }))
}

impl Transactions {
    /// The open transaction a command continues (or starts, with `startTransaction`).
    pub fn enter(
        &self,
        state: &ServerState,
        f: &TxnFields,
        start: bool,
    ) -> Result<OpenTransaction> {
        let key = session_key(&f.lsid);
        let mut sessions = self.sessions.lock();
        self.expire(&mut sessions, transaction_lifetime(state));
        let existing = sessions.get(&key);
        if start {
            if let Some(s) = existing {
                if s.number > f.number {
                    return Err(Error::new(
                        codes::TRANSACTION_TOO_OLD,
                        format!("Cannot start transaction {} on session because a newer transaction {} has already started.", f.number, s.number),
                    ));
                }
                if s.number == f.number {
                    return Err(Error::new(
                        codes::CONFLICTING_OPERATION_IN_PROGRESS,
                        format!(
                            "Transaction with {{ txnNumber: {} }} has already been started.",
                            f.number
                        ),
                    ));
                }
            }
            if existing.is_none() && sessions.len() >= MAX_SESSIONS {
                sessions.retain(|_, s| matches!(s.state, State::Open(_)));
                if sessions.len() >= MAX_SESSIONS {
                    return Err(Error::new(
                        codes::TOO_MANY_LOGICAL_SESSIONS,
                        "too many sessions with a transaction",
                    ));
                }
            }
            let t: OpenTransaction = Arc::new(Mutex::new(Some(state.engine.begin_transaction())));
            self.started.fetch_add(1, Ordering::Relaxed);
            let replaced = sessions.insert(
                key,
                SessionTransaction {
                    number: f.number,
                    state: State::Open(t.clone()),
                    started: Instant::now(),
                },
            );
            // An older open transaction of the session ends unfinished.
            self.count_if_open(replaced.as_ref());
            return Ok(t);
        }
        match existing {
            Some(s) if s.number == f.number => match &s.state {
                State::Open(t) => Ok(t.clone()),
                State::Aborted => Err(no_such_transaction(f.number, "has been aborted.")),
                State::Committed => Err(Error::new(
                    codes::TRANSACTION_COMMITTED,
                    format!(
                        "Transaction with {{ txnNumber: {} }} has been committed.",
                        f.number
                    ),
                )),
            },
            Some(s) if s.number > f.number => Err(Error::new(
                codes::TRANSACTION_TOO_OLD,
                format!(
                    "txnNumber {} is less than last txnNumber {} seen in this session",
                    f.number, s.number
                ),
            )),
            _ => Err(no_such_transaction(
                f.number,
                "does not match any in-progress transactions.",
            )),
        }
    }

    /// Aborts transactions open longer than `lifetime` (looked for at most once a second).
    fn expire(&self, sessions: &mut HashMap<Vec<u8>, SessionTransaction>, lifetime: Duration) {
        let mut last = self.last_expiry.lock();
        if last
            .map(|t| t.elapsed() < Duration::from_secs(1))
            .unwrap_or(false)
        {
            return;
        }
        *last = Some(Instant::now());
        for s in sessions.values_mut() {
            if matches!(s.state, State::Open(_)) && s.started.elapsed() > lifetime {
                self.mark_aborted(s);
            }
        }
    }

    /// Ends the session's open transaction (an error in one of its commands, as in mongod).
    pub fn abort_open(&self, f: &TxnFields) {
        let mut sessions = self.sessions.lock();
        if let Some(s) = sessions.get_mut(&session_key(&f.lsid)) {
            if s.number == f.number && matches!(s.state, State::Open(_)) {
                self.mark_aborted(s);
            }
        }
    }

    /// A command outside transactions with a newer `txnNumber` ends the open one.
    pub fn newer_number(&self, lsid: &Bson, number: i64) {
        let mut sessions = self.sessions.lock();
        if sessions.is_empty() {
            // Every retryable write comes here: without transactions, nothing to look up.
            return;
        }
        let key = session_key(lsid);
        if sessions.get(&key).is_some_and(|s| s.number < number) {
            let ended = sessions.remove(&key);
            self.count_if_open(ended.as_ref());
        }
    }

    /// endSessions / killSessions: the sessions' open transactions are aborted.
    pub fn end_session(&self, lsid: &Bson) {
        let ended = self.sessions.lock().remove(&session_key(lsid));
        self.count_if_open(ended.as_ref());
    }

    pub fn end_all(&self) {
        for (_, ended) in self.sessions.lock().drain() {
            self.count_if_open(Some(&ended));
        }
    }

    /// An open transaction ends unfinished.
    fn mark_aborted(&self, s: &mut SessionTransaction) {
        if matches!(s.state, State::Open(_)) {
            self.aborted.fetch_add(1, Ordering::Relaxed);
        }
        s.state = State::Aborted;
    }

    /// A session removed with its transaction open: that transaction was aborted.
    fn count_if_open(&self, ended: Option<&SessionTransaction>) {
        if ended.is_some_and(|s| matches!(s.state, State::Open(_))) {
            self.aborted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// serverStatus's `transactions`: totals since the start, and the open ones now
    /// (active: a command of it running, its transaction locked). No transaction is
    /// ever prepared here (no sharded two-phase commit yet).
    pub fn status(&self) -> Document {
        let sessions = self.sessions.lock();
        let (mut open, mut active) = (0i64, 0i64);
        for s in sessions.values() {
            if let State::Open(t) = &s.state {
                open += 1;
                if t.try_lock().is_none() {
                    active += 1;
                }
            }
        }
        drop(sessions);
        let total = |c: &AtomicU64| i64::try_from(c.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        bson::doc! {
            "currentActive": active,
            "currentInactive": open - active,
            "currentOpen": open,
            "totalAborted": total(&self.aborted),
            "totalCommitted": total(&self.committed),
            "totalStarted": total(&self.started),
            "totalPrepared": 0_i64,
            "totalPreparedThenCommitted": 0_i64,
            "totalPreparedThenAborted": 0_i64,
            "currentPrepared": 0_i64,
        }
    }

    /// Takes the open transaction out for its commit; Ok(None) for a commit repeated
    /// after it succeeded (mongod answers ok again).
    pub fn take_for_commit(&self, f: &TxnFields) -> Result<Option<Transaction>> {
        let mut sessions = self.sessions.lock();
        match sessions.get_mut(&session_key(&f.lsid)) {
            Some(s) if s.number == f.number => match &s.state {
                State::Open(t) => {
                    let t = t.lock().take();
                    s.state = State::Committed;
                    Ok(t)
                }
                State::Committed => Ok(None),
                State::Aborted => Err(no_such_transaction(f.number, "has been aborted.")),
            },
            _ => Err(no_such_transaction(
                f.number,
                "does not match any in-progress transactions.",
            )),
        }
    }

    /// A commit that failed: the transaction is aborted.
    pub fn commit_failed(&self, f: &TxnFields) {
        let mut sessions = self.sessions.lock();
        if let Some(s) = sessions.get_mut(&session_key(&f.lsid)) {
            if s.number == f.number {
                s.state = State::Aborted;
                self.aborted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn abort(&self, f: &TxnFields) -> Result<()> {
        let mut sessions = self.sessions.lock();
        match sessions.get_mut(&session_key(&f.lsid)) {
            Some(s) if s.number == f.number => match &s.state {
                State::Open(_) => {
                    self.mark_aborted(s);
                    Ok(())
                }
                State::Aborted => Err(no_such_transaction(f.number, "has been aborted.")),
                State::Committed => Err(Error::new(
                    codes::TRANSACTION_COMMITTED,
                    format!(
                        "Transaction with {{ txnNumber: {} }} has been committed.",
                        f.number
                    ),
                )),
            },
            _ => Err(no_such_transaction(
                f.number,
                "does not match any in-progress transactions.",
            )),
        }
    }
}

/// commitTransaction and abortTransaction: the session's transaction is committed or
/// aborted.
pub async fn commit_or_abort(
    state: &Arc<ServerState>,
    spec: &Spec,
    name: &str,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let Some(f) = fields(spec, name, db, cmd)? else {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            format!("{name} must be run within a transaction"),
        ));
    };
    if name == "commitTransaction" {
        commit(state, cmd, &f).await
    } else {
        state.transactions.abort(&f).map(|_| Document::new())
    }
}

/// commitTransaction: applies the transaction, then waits as its write concern asks.
async fn commit(state: &Arc<ServerState>, cmd: &Document, f: &TxnFields) -> Result<Document> {
    let wc = crate::commands::write::parse_write_concern(cmd)?;
    let committed = match state.transactions.take_for_commit(f)? {
        Some(t) => {
            let engine = state.engine.clone();
            let session = match &f.lsid {
                Bson::Document(lsid) => Some((lsid.clone(), f.number)),
                _ => None,
            };
            match tokio::task::spawn_blocking(move || engine.commit_transaction(t, session)).await {
                Ok(Ok(c)) => {
                    state.transactions.committed.fetch_add(1, Ordering::Relaxed);
                    c
                }
                Ok(Err(e)) => {
                    state.transactions.commit_failed(f);
                    return Err(e);
                }
                Err(e) => {
                    state.transactions.commit_failed(f);
                    return Err(Error::internal(format!("commit failed: {e}")));
                }
            }
        }
        None => None,
    };
    let mut reply = Document::new();
    if let Some(wce) = crate::commands::write::await_write_concern(state, wc, committed).await {
        reply.insert("writeConcernError", wce);
    }
    Ok(reply)
}

/// Snapshots that snapshot reads outside transactions may name by `atClusterTime`.
pub const MAX_SNAPSHOTS: usize = 256;
/// How long a snapshot stays readable (mongod's minSnapshotHistoryWindowInSeconds).
pub const SNAPSHOT_HISTORY: Duration = Duration::from_secs(300);

/// The store snapshots taken for `readConcern: {level: "snapshot"}` reads, by the
/// cluster time they reflect: a driver's snapshot session reads first without a
/// time, gets `atClusterTime` back, and names it in its later reads.
#[derive(Default)]
pub struct Snapshots {
    by_time: Mutex<BTreeMap<ClusterTime, (Instant, Arc<Transaction>)>>,
}

fn snapshot_too_old(at: bson::Timestamp) -> Error {
    Error::new(
        codes::SNAPSHOT_TOO_OLD,
        format!(
            "Read timestamp Timestamp({}, {}) is older than the oldest available timestamp.",
            at.time, at.increment
        ),
    )
}

/// The snapshot a read outside a transaction asks for with `readConcern: {level:
/// "snapshot"}`, and its cluster time (for the reply's `atClusterTime`); None for
/// other reads.
pub fn snapshot_read(
    state: &ServerState,
    cmd: &Document,
) -> Result<Option<(Arc<Transaction>, bson::Timestamp)>> {
    let Ok(rc) = cmd.get_document("readConcern") else {
        return Ok(None);
    };
    if rc.get_str("level") != Ok("snapshot") {
        return Ok(None);
    }
    let engine = &state.engine;
    let mut by_time = state.snapshots.by_time.lock();
    by_time.retain(|_, (taken, _)| taken.elapsed() < SNAPSHOT_HISTORY);
    let at = match rc.get("atClusterTime") {
        None => None,
        Some(Bson::Timestamp(t)) => Some(*t),
        Some(v) => return Err(wrong_type("atClusterTime", v, "timestamp")),
    };
    if let Some(at) = at {
        let key = ClusterTime::from(at);
        if let Some((_, t)) = by_time.get(&key) {
            return Ok(Some((t.clone(), at)));
        }
        // Only a time with no commit after it can still be read (a snapshot of now).
        let (ts, t) = engine.snapshot_now();
        if key > ts {
            return Err(Error::new(
                codes::INVALID_OPTIONS,
                "readConcern atClusterTime value must not be greater than the current clusterTime",
            ));
        }
        if ts != key {
            return Err(snapshot_too_old(at));
        }
        let t = Arc::new(t);
        by_time.insert(key, (Instant::now(), t.clone()));
        return Ok(Some((t, at)));
    }
    let (ts, t) = engine.snapshot_now();
    let t = by_time
        .entry(ts)
        .or_insert_with(|| (Instant::now(), Arc::new(t)))
        .1
        .clone();
    while by_time.len() > MAX_SNAPSHOTS {
        by_time.pop_first();
    }
    Ok(Some((t, ts.into())))
}

/// What a read command sees instead of the latest data: its transaction (snapshot
/// plus the transaction's own writes), or the snapshot a snapshot read asks for.
pub enum ReadView {
    Transaction(OpenTransaction),
    /// A snapshot read outside transactions, and its cluster time (the reply's
    /// `atClusterTime`).
    Snapshot(Arc<Transaction>, bson::Timestamp),
}

/// The view a read command reads through, if it is not the latest data.
pub fn read_view(state: &ServerState, cmd: &Document) -> Result<Option<ReadView>> {
    if let Some(t) = current() {
        return Ok(Some(ReadView::Transaction(t)));
    }
    Ok(snapshot_read(state, cmd)?.map(|(t, at)| ReadView::Snapshot(t, at)))
}

impl ReadView {
    /// The `atClusterTime` a snapshot read reports.
    pub fn at_cluster_time(&self) -> Option<bson::Timestamp> {
        match self {
            ReadView::Transaction(_) => None,
            ReadView::Snapshot(_, at) => Some(*at),
        }
    }

    /// Runs a read on the view, on the blocking pool.
    pub async fn read<T, F>(self, state: &Arc<ServerState>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&tailstream_engine::Engine, &Transaction) -> Result<T> + Send + 'static,
    {
        match self {
            ReadView::Transaction(t) => {
                crate::commands::in_transaction(state, t, move |e, t| f(e, t)).await
            }
            ReadView::Snapshot(t, _) => crate::commands::blocking(state, move |e| f(e, &t)).await,
        }
    }
}

/// mongod's rule (isTransientTransactionError): which errors of a command in a
/// transaction mean the whole transaction may be retried.
pub fn label_transient(name: &str, e: &mut Error) {
    const TRANSIENT: &[i32] = &[
        codes::WRITE_CONFLICT,
        24,  // LockTimeout
        267, // PreparedTransactionInProgress
        codes::SNAPSHOT_TOO_OLD,
        246, // SnapshotUnavailable
    ];
    // Network and primary-change errors (ErrorCodes::isRetriableError: the codes a
    // retryable write retries).
    use crate::error_labels::RETRYABLE_WRITE_CODES as RETRIABLE;
    let commit_or_abort = matches!(name, "commitTransaction" | "abortTransaction");
    let transient = TRANSIENT.contains(&e.code)
        || e.code == codes::NO_SUCH_TRANSACTION
        || (!commit_or_abort && RETRIABLE.contains(&e.code));
    let label = "TransientTransactionError";
    if transient && !e.labels.iter().any(|l| l == label) {
        e.labels.push(label.to_string());
    }
}

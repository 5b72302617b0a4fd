//! Server-side JavaScript as the query layer sees it: `$where`, `$function` and
//! `$accumulator` call through [`ScriptEngine`] / [`ScriptScope`], which an engine crate
//! (crates/js, QuickJS) implements and installs once at startup with [`install`]. Without
//! one installed, JavaScript is refused.
//!
//! Scripts obey the operation that runs them ([`Operation`]): its `maxTimeMS` deadline and
//! a kill (client gone, ...) stop a running script and `sleep()`. The operation also owns
//! the JavaScript scope its scripts share, so a script is compiled once per operation
//! (memoized by source text), not once per document. The current operation is a
//! thread-local set with [`Operation::enter`] by whoever runs the operation on a thread.

use crate::error::{codes, Error, Result};
use bson::{Bson, Document};
use std::cell::RefCell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The largest script source accepted (mongod has no such limit; this one keeps a
/// single command from handing the compiler megabytes of text).
pub const MAX_SOURCE_BYTES: usize = 1024 * 1024;

/// A JavaScript implementation.
pub trait ScriptEngine: Send + Sync {
    /// A fresh scope (its own heap, bounded) for one operation.
    fn new_scope(&self) -> Result<Box<dyn ScriptScope>>;
}

/// Handle of a function compiled in a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FunctionId(pub usize);

/// One operation's JavaScript heap. Calls take the operation so that a script stops at
/// its deadline or when it is killed.
pub trait ScriptScope: Send {
    /// Compiles `source` as mongod does: a function (`function (a) {...}`), or statements /
    /// an expression that become a function's body, the last expression being returned.
    /// Memoized by source.
    fn compile(&mut self, source: &str, op: &Arc<Operation>) -> Result<FunctionId>;
    /// Calls `f` with `args`; `this_doc` becomes `this` and the global `obj` ($where).
    fn call(
        &mut self,
        f: FunctionId,
        this_doc: Option<&Document>,
        args: &[Bson],
        op: &Arc<Operation>,
    ) -> Result<Bson>;
    /// Folds `calls` (argument lists) into `state` with `f(state, ...args)`, keeping the
    /// state in JavaScript between calls (`$accumulator`'s accumulate).
    fn fold(
        &mut self,
        f: FunctionId,
        state: Bson,
        calls: &[Bson],
        op: &Arc<Operation>,
    ) -> Result<Bson>;
    /// Like `call` with no arguments, but only the truthiness of the result is wanted.
    fn call_predicate(
        &mut self,
        f: FunctionId,
        this_doc: &Document,
        op: &Arc<Operation>,
    ) -> Result<bool>;
    /// Calls `f` with `this_doc` as `this` and returns the `(key, value)` pairs it
    /// passed to `emit(key, value)`, in order (mapReduce's map). An engine without
    /// `emit` refuses mapReduce.
    fn call_emitting(
        &mut self,
        _f: FunctionId,
        _this_doc: &Document,
        _op: &Arc<Operation>,
    ) -> Result<Vec<(Bson, Bson)>> {
        Err(no_map_reduce())
    }
    /// Makes each field of `vars` a global variable (mapReduce's `scope`).
    fn set_globals(&mut self, _vars: &Document, _op: &Arc<Operation>) -> Result<()> {
        Err(no_map_reduce())
    }
}

fn no_map_reduce() -> Error {
    Error::new(
        codes::JS_INTERPRETER_FAILURE,
        "this JavaScript engine cannot run mapReduce",
    )
}

static ENGINE: OnceLock<Box<dyn ScriptEngine>> = OnceLock::new();

/// Installs the JavaScript engine (the first call wins).
pub fn install(engine: Box<dyn ScriptEngine>) {
    let _ = ENGINE.set(engine);
}

/// Whether a JavaScript engine is installed.
pub fn available() -> bool {
    ENGINE.get().is_some()
}

// ---------------------------------------------------------------------------------------
// The operation a script runs for

const NOT_KILLED: i32 = 0;

/// One command's control block: deadline (`maxTimeMS`), kill state, and the JavaScript
/// scope its scripts share.
pub struct Operation {
    deadline: Option<Instant>,
    /// 0, or the error code it was killed with.
    killed: AtomicI32,
    /// Wakes `sleep()` when the operation is killed.
    wake: (Mutex<()>, Condvar),
    scope: Mutex<Option<Box<dyn ScriptScope>>>,
    /// What it examined (`crate::op_stats`).
    stats: crate::op_stats::OpStats,
    /// How far its long work has come (`currentOp`'s `msg` and `progress`).
    progress: Mutex<Option<Progress>>,
    /// A write's `wtimeout`, as a deadline: how long it waits for a replica set to
    /// commit it (None: until it is committed, or the operation stops).
    replication_deadline: Mutex<Option<Instant>>,
    /// Set when a wait for the set ended at that deadline (the write stays queued).
    replication_timed_out: std::sync::atomic::AtomicBool,
}

/// How far an operation's long work has come: what it is doing, and how much of how
/// much it has done (in the work's own unit: documents, bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub name: &'static str,
    pub done: u64,
    pub total: u64,
}

impl Progress {
    /// Done as a whole percentage of the total, at most 100 (a total may be an
    /// estimate); 0 without a total.
    pub fn percent(&self) -> u64 {
        self.done
            .saturating_mul(100)
            .checked_div(self.total)
            .unwrap_or(0)
            .min(100)
    }
}

impl std::fmt::Debug for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operation")
            .field("deadline", &self.deadline)
            .field("killed", &self.killed.load(Ordering::Relaxed))
            .finish()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Operation>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous operation when dropped.
pub struct EnterGuard {
    previous: Option<Arc<Operation>>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

impl Operation {
    /// An operation that must finish by `deadline` (None: no time limit).
    pub fn new(deadline: Option<Instant>) -> Arc<Operation> {
        Arc::new(Operation {
            deadline,
            killed: AtomicI32::new(NOT_KILLED),
            wake: (Mutex::new(()), Condvar::new()),
            scope: Mutex::new(None),
            stats: crate::op_stats::OpStats::default(),
            progress: Mutex::new(None),
            replication_deadline: Mutex::new(None),
            replication_timed_out: Default::default(),
        })
    }

    /// Sets how long the operation's writes wait for a replica set (see
    /// `replication_deadline`).
    pub fn set_replication_deadline(&self, deadline: Option<Instant>) {
        *self
            .replication_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = deadline;
    }

    pub fn replication_deadline(&self) -> Option<Instant> {
        *self
            .replication_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that a wait for the set ended at the replication deadline.
    pub fn note_replication_timeout(&self) {
        self.replication_timed_out.store(true, Ordering::Relaxed);
    }

    /// Whether a wait for the set ended at the replication deadline.
    pub fn replication_timed_out(&self) -> bool {
        self.replication_timed_out.load(Ordering::Relaxed)
    }

    /// Its long work's progress, if it reports one.
    pub fn progress(&self) -> Option<Progress> {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets (None: clears) the progress of the operation running on this thread.
    pub fn set_progress_current(progress: Option<Progress>) {
        CURRENT.with(|c| {
            if let Some(op) = c.borrow().as_ref() {
                *op.progress.lock().unwrap_or_else(|e| e.into_inner()) = progress;
            }
        });
    }

    /// What the operation examined so far.
    pub fn stats(&self) -> &crate::op_stats::OpStats {
        &self.stats
    }

    /// Adds to the figures of the operation running on this thread (`op_stats`);
    /// without one, nothing.
    pub fn count_current(f: impl FnOnce(&crate::op_stats::OpStats)) {
        CURRENT.with(|c| {
            if let Some(op) = c.borrow().as_ref() {
                f(&op.stats)
            }
        });
    }

    /// An operation with `maxTimeMS` from now (0 or None: no limit).
    pub fn with_max_time_ms(max_time_ms: Option<i64>) -> Arc<Operation> {
        let deadline = max_time_ms
            .filter(|ms| *ms > 0)
            .map(|ms| Instant::now() + Duration::from_millis(ms as u64));
        Operation::new(deadline)
    }

    /// The operation running on this thread, or a fresh unbounded one.
    pub fn current() -> Arc<Operation> {
        CURRENT
            .with(|c| c.borrow().clone())
            .unwrap_or_else(|| Operation::new(None))
    }

    /// Ok unless the operation running on this thread was killed or ran out of time
    /// (long reads call it between batches, so `killOp` and `maxTimeMS` stop them).
    pub fn check_current() -> Result<()> {
        CURRENT.with(|c| match c.borrow().as_ref() {
            Some(op) => op.check(),
            None => Ok(()),
        })
    }

    /// Makes this the thread's current operation until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> EnterGuard {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        EnterGuard { previous }
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Kills the operation with `code` (ClientDisconnect, Interrupted, ...): running
    /// scripts stop at their next check, a `sleep()` wakes at once.
    pub fn kill(&self, code: i32) {
        let _ = self
            .killed
            .compare_exchange(NOT_KILLED, code, Ordering::SeqCst, Ordering::SeqCst);
        let _guard = self.wake.0.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.1.notify_all();
    }

    /// Whether the operation must stop now.
    pub fn interrupted(&self) -> bool {
        self.killed.load(Ordering::Relaxed) != NOT_KILLED
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Ok while the operation may go on; else mongod's interruption error.
    pub fn check(&self) -> Result<()> {
        match self.killed.load(Ordering::Relaxed) {
            NOT_KILLED => {}
            codes::CLIENT_DISCONNECT => {
                return Err(Error::new(
                    codes::CLIENT_DISCONNECT,
                    "operation was interrupted because a client disconnected",
                ))
            }
            code => return Err(Error::new(code, "operation was interrupted")),
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::new(
                codes::MAX_TIME_MS_EXPIRED,
                "operation exceeded time limit",
            ));
        }
        Ok(())
    }

    /// Sleeps for `duration`, waking early (with the interruption error) when the
    /// operation is killed or reaches its deadline.
    pub fn sleep(&self, duration: Duration) -> Result<()> {
        let end = Instant::now() + duration;
        let mut guard = self.wake.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            let until = match self.deadline {
                Some(d) if d < end => d,
                _ => end,
            };
            let wait = until.saturating_duration_since(now);
            guard = self
                .wake
                .1
                .wait_timeout(guard, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Runs `f` with this operation's JavaScript scope, created on first use.
    fn with_scope<T>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut dyn ScriptScope) -> Result<T>,
    ) -> Result<T> {
        let Some(engine) = ENGINE.get() else {
            return Err(Error::new(
                codes::JS_INTERPRETER_FAILURE,
                "no JavaScript engine is available on this server",
            ));
        };
        let mut slot = self.scope.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(engine.new_scope()?);
        }
        f(slot.as_mut().unwrap().as_mut())
    }
}

// ---------------------------------------------------------------------------------------
// What the query layer calls

fn check_source(source: &str) -> Result<()> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(Error::bad_value(format!(
            "JavaScript source of {} bytes exceeds the limit of {MAX_SOURCE_BYTES} bytes",
            source.len()
        )));
    }
    Ok(())
}

/// Compiles `source` in the current operation's scope (to report a syntax error when a
/// `$where` is parsed, as mongod does).
pub fn compile(source: &str) -> Result<()> {
    check_source(source)?;
    let op = Operation::current();
    op.with_scope(|s| s.compile(source, &op).map(|_| ()))
}

/// Runs a `$where` predicate on `doc`.
pub fn run_where(source: &str, doc: &Document) -> Result<bool> {
    let op = Operation::current();
    op.check()?;
    op.with_scope(|s| {
        let f = s.compile(source, &op)?;
        s.call_predicate(f, doc, &op)
    })
}

/// Calls the function `source` with `args` (`$function`, `$accumulator`).
pub fn call_function(source: &str, args: &[Bson]) -> Result<Bson> {
    check_source(source)?;
    let op = Operation::current();
    op.check()?;
    op.with_scope(|s| {
        let f = s.compile(source, &op)?;
        s.call(f, None, args, &op)
    })
}

/// Folds argument lists into `state` with the function `source` (`$accumulator`).
pub fn fold(source: &str, state: Bson, calls: &[Bson]) -> Result<Bson> {
    let op = Operation::current();
    op.check()?;
    op.with_scope(|s| {
        let f = s.compile(source, &op)?;
        s.fold(f, state, calls, &op)
    })
}

/// Runs a mapReduce map function on `doc` and returns what it emitted.
pub fn map_emits(source: &str, doc: &Document) -> Result<Vec<(Bson, Bson)>> {
    check_source(source)?;
    let op = Operation::current();
    op.check()?;
    op.with_scope(|s| {
        let f = s.compile(source, &op)?;
        s.call_emitting(f, doc, &op)
    })
}

/// Sets global variables for the current operation's scripts (mapReduce's `scope`).
pub fn set_globals(vars: &Document) -> Result<()> {
    let op = Operation::current();
    op.with_scope(|s| s.set_globals(vars, &op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_go_to_the_operation_on_the_thread_and_nowhere_without_one() {
        Operation::count_current(|s| s.add_examined(5, 5)); // no operation: dropped
        let op = Operation::new(None);
        {
            let _in = op.enter();
            Operation::count_current(|s| s.add_examined(3, 2));
        }
        Operation::count_current(|s| s.add_examined(100, 100)); // left: not counted
        let got = op.stats().snapshot();
        assert_eq!((got.keys_examined, got.docs_examined), (3, 2));
    }

    #[test]
    fn deadline_and_kill() {
        let op = Operation::new(None);
        assert!(op.check().is_ok());
        op.kill(codes::CLIENT_DISCONNECT);
        assert_eq!(op.check().unwrap_err().code, codes::CLIENT_DISCONNECT);
        // The first kill wins.
        op.kill(codes::INTERRUPTED);
        assert_eq!(op.check().unwrap_err().code, codes::CLIENT_DISCONNECT);

        let expired = Operation::new(Some(Instant::now()));
        assert_eq!(
            expired.check().unwrap_err().code,
            codes::MAX_TIME_MS_EXPIRED
        );
        assert!(expired.interrupted());
        assert_eq!(
            expired.sleep(Duration::from_secs(3600)).unwrap_err().code,
            codes::MAX_TIME_MS_EXPIRED
        );
    }

    #[test]
    fn sleep_wakes_on_kill() {
        let op = Operation::new(None);
        let killer = op.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            killer.kill(codes::INTERRUPTED);
        });
        assert_eq!(
            op.sleep(Duration::from_secs(3600)).unwrap_err().code,
            codes::INTERRUPTED
        );
        t.join().unwrap();
    }

    #[test]
    fn enter_sets_and_restores_the_current_operation() {
        let outer = Operation::new(None);
        let inner = Operation::new(Some(Instant::now()));
        let _g = outer.enter();
        {
            let _g2 = inner.enter();
            assert!(Arc::ptr_eq(&Operation::current(), &inner));
        }
        assert!(Arc::ptr_eq(&Operation::current(), &outer));
    }

    #[test]
    fn sources_over_the_limit_are_refused() {
        let big = "x".repeat(MAX_SOURCE_BYTES + 1);
        assert_eq!(compile(&big).unwrap_err().code, codes::BAD_VALUE);
    }
}

//! A getMore as one engine call: look, and if an awaitData cursor has nothing new,
//! wait for what could bring something, then look again.
//!
//! The caller (the server's `getMore`) parses the command and builds the reply; it
//! hands in how to read on the blocking pool (with its operation context) and what
//! interrupts the operation (killOp, the client gone). Everything else is here:
//!
//! - **Subscribe first.** The commit notices (a collection change stream: only those of
//!   its namespace bit), the durable time and cursor closes are subscribed to before
//!   the first look, so a commit landing in between still wakes the getMore.
//! - **Where a look runs.** First on the calling (async) task, from memory only
//!   ([`Engine::get_more_in_memory`]: a change stream's recent oplog, a tailable
//!   cursor's few new documents); only a read that needs storage goes to the pool
//!   ([`Look::NeedsPool`]). Both give the same batch. The hand-off to the pool cost
//!   more than the read of a stream that keeps up.
//! - **Events wait for durability.** An event source shows only durable writes: while
//!   such a getMore waits, commits to what it watches ask for their own fsync
//!   (`CommitBus::waiting`), and the durable time passing such a commit wakes it. A
//!   tailable cursor wakes on the commit itself.
//! - **The deadline** (`maxTimeMS`, default 1 s) answers an empty batch; the cursor
//!   stays open. A cursor closed meanwhile is reported by the next look.

use crate::core::time::ClusterTime;
use crate::read::cursor::{Source, NEEDS_STORAGE};
use crate::read::find::CursorBatch;
use crate::Engine;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tailstream_query::error::{Error, Result};

/// How long a getMore on an awaitData cursor waits without `maxTimeMS` (mongod: 1 s).
pub const DEFAULT_AWAIT: Duration = Duration::from_secs(1);

/// A batch of events at least this large triggers reading ahead (see
/// [`crate::read::cursor::EventSource::prefetch`]).
const PREFETCH_MIN_EVENTS: usize = 100;

/// What a getMore asks for.
#[derive(Debug, Clone)]
pub struct GetMoreRequest {
    pub cursor_id: i64,
    /// The namespace the command names (must be the cursor's).
    pub ns: String,
    pub batch_size: Option<i64>,
    /// How long an awaitData cursor may wait for new data.
    pub max_await: Duration,
    /// The getMore's operation: a look made on the async task runs in it (its figures,
    /// `op_stats`); a read on the pool enters it there (`read_on_pool`).
    pub op: Option<Arc<tailstream_query::script::Operation>>,
}

/// A look at a cursor from an async task.
pub enum Look {
    /// The batch (possibly empty).
    Batch(CursorBatch),
    /// The read needs storage or more reading than an async task may do, or the cursor
    /// is busy: read it on the blocking pool ([`Engine::get_more`]).
    NeedsPool,
}

/// What the start of a getMore learns of its cursor.
#[derive(Clone, Copy)]
struct Kind {
    /// The namespace bits whose commits may bring it something.
    interest: u64,
    /// An event source that has read everything durable: wait before looking.
    caught_up: bool,
    /// An event source's error labels (None: not an event source).
    labeler: Option<Labeler>,
}

/// Adds a source's error labels to an error of its getMore.
type Labeler = fn(Error) -> Error;

impl Kind {
    /// An event source (its events are shown once durable).
    fn events(&self) -> bool {
        self.labeler.is_some()
    }

    fn label(&self, e: Error) -> Error {
        match self.labeler {
            Some(label) => label(e),
            None => e,
        }
    }
}

impl Engine {
    /// A getMore short enough to run on an async worker: an event source reads memory
    /// only; a tailable cursor whose last batch reached the newest document reads at
    /// most [`crate::read::find::INLINE_TAIL_BATCH`] documents (what commits added since,
    /// usually a few). [`Look::NeedsPool`] when the cursor is busy, is of another
    /// kind, or the batch would need storage.
    pub fn get_more_in_memory(
        &self,
        cursor_id: i64,
        ns: &str,
        batch_size: Option<i64>,
    ) -> Result<Look> {
        match self.get_more_with(cursor_id, ns, batch_size, true) {
            Ok(batch) => Ok(Look::Batch(batch)),
            Err(e) if e.code == NEEDS_STORAGE => Ok(Look::NeedsPool),
            Err(e) => Err(e),
        }
    }

    /// The whole getMore (see the module doc). `read_on_pool` reads the cursor on the
    /// blocking pool ([`Engine::get_more`] there); `interrupted` resolves with the error
    /// that ends the operation (the cursor is then closed, as an error in a getMore
    /// closes it in mongod). Errors carry the cursor's labels (a change stream's
    /// `ResumableChangeStreamError`).
    ///
    /// One async function, the loop included: every level of nested futures is moved
    /// (copied whole) once when it starts, which callgrind showed as memcpy in the
    /// change streams' fan-out.
    pub async fn get_more_awaiting<R, RF>(
        self: &Arc<Self>,
        req: GetMoreRequest,
        read_on_pool: R,
        interrupted: impl Future<Output = Error>,
    ) -> Result<CursorBatch>
    where
        R: Fn() -> RF,
        RF: Future<Output = Result<CursorBatch>>,
    {
        let kind = self.get_more_kind(req.cursor_id);
        let (req, read_on_pool) = (&req, &read_on_pool);
        let id = req.cursor_id;
        // Subscribe before the first look, so a commit landing in between still wakes
        // us. An event source hears only of commits to what it reads.
        let mut commits = self.subscribe_commits_for(kind.interest);
        commits.borrow_and_update();
        // From now on a commit to what the stream watches asks for its fsync itself.
        let _waiting = kind
            .events()
            .then(|| self.change_stream_waiting(kind.interest));
        let mut durable = self.durability.subscribe_durable_ts();
        durable.borrow_and_update();
        let mut closed = self.cursors.subscribe_closed();
        closed.borrow_and_update();
        // Whether the source has read everything durable, checked again now that we
        // listen: an event made durable between the first check and the subscriptions
        // would otherwise wait for the next fsync (another writer's) before it is read.
        let caught_up = kind.caught_up
            && self
                .event_cursor_state(id)
                .is_some_and(|(_, caught_up, _)| caught_up);
        let deadline = tokio::time::Instant::now() + req.max_await;
        tokio::pin!(interrupted);
        // A source that has read everything durable (the usual state of a stream that
        // keeps up, right after its previous batch) skips the first look and waits.
        let mut last_look = None;
        let mut first_look = true;
        loop {
            if !(first_look && caught_up) {
                let batch = self
                    .get_more_look(req, read_on_pool)
                    .await
                    .map_err(|e| kind.label(e))?;
                if !batch.docs.is_empty() || !batch.raw_docs.is_empty() || !batch.await_data {
                    self.prefetch_after(kind, &batch);
                    return Ok(batch);
                }
                last_look = Some(batch);
            }
            // An event source re-reads once the durable time reaches a commit it cares
            // about.
            let mut wake_at: Option<ClusterTime> = None;
            if kind.events() && first_look {
                // Writes committed before we registered as waiting may still wait for
                // their fsync; the ones after ask for it themselves.
                self.durability.request(self.durability.last_committed());
                wake_at = Some(commits.borrow().last_ts);
            }
            first_look = false;
            // Nothing new: the next commit (a tailable cursor) or the durable time
            // passing a commit of interest (an event source) wakes us; no polling.
            loop {
                tokio::select! {
                    changed = commits.changed() => {
                        if changed.is_err() {
                            return self.get_more_final(last_look, read_on_pool).await.map_err(|e| kind.label(e));
                        }
                        if kind.events() {
                            // Only a commit to what the source reads sets the durable
                            // time to wait for (it asked for its fsync itself).
                            let notice = *commits.borrow_and_update();
                            if notice.ns_mask & kind.interest != 0 {
                                wake_at = Some(wake_at.map_or(notice.last_ts, |w| w.min(notice.last_ts)));
                            }
                            continue;
                        }
                    }
                    changed = durable.changed(), if kind.events() => {
                        if changed.is_err() {
                            return self.get_more_final(last_look, read_on_pool).await.map_err(|e| kind.label(e));
                        }
                        let d = *durable.borrow_and_update();
                        if wake_at.is_none_or(|w| d < w) {
                            continue;
                        }
                    }
                    // Closed meanwhile: the next look reports it (CursorNotFound).
                    _ = closed.changed() => {}
                    e = &mut interrupted => {
                        self.cursors.remove(id);
                        return Err(kind.label(e));
                    }
                    _ = tokio::time::sleep_until(deadline) => {
                        return self.get_more_final(last_look, read_on_pool).await.map_err(|e| kind.label(e));
                    }
                }
                break;
            }
        }
    }

    /// `e` with the error labels of the cursor's kind (a change stream's
    /// `ResumableChangeStreamError`), for an error of a getMore raised outside the engine
    /// (the server's fail points).
    pub fn label_get_more_error(&self, cursor_id: i64, e: Error) -> Error {
        match self.event_labeler(cursor_id) {
            Some(label) => label(e),
            None => e,
        }
    }

    /// The error labels of an open event cursor (None: closed, or not an event source).
    /// Waits for a getMore that holds the cursor.
    fn event_labeler(&self, cursor_id: i64) -> Option<Labeler> {
        let c = self.cursors.get(cursor_id)?;
        let c = c.lock();
        match &c.source {
            Source::Events(s) => Some(s.error_labeler()),
            _ => None,
        }
    }

    /// Reads ahead on an event cursor (see `EventSource::prefetch`); skipped when a
    /// getMore holds the cursor.
    pub fn prefetch_events(&self, cursor_id: i64, max_events: usize) {
        let Some(c) = self.cursors.get(cursor_id) else {
            return;
        };
        let Some(mut c) = c.try_lock() else { return };
        if let Source::Events(s) = &mut c.source {
            s.prefetch(self, max_events);
        }
    }

    /// For an event cursor no getMore holds: its interest and whether it is caught up.
    /// One registry lookup and one cursor lock for both.
    fn event_cursor_state(&self, cursor_id: i64) -> Option<(u64, bool, Labeler)> {
        let c = self.cursors.get(cursor_id)?;
        let c = c.try_lock()?;
        match &c.source {
            Source::Events(s) => Some((s.interest(), s.caught_up(self), s.error_labeler())),
            _ => None,
        }
    }

    /// What kind of cursor a getMore continues. A cursor busy in another getMore (or
    /// reading ahead) reports no state: it is then checked the slow way.
    fn get_more_kind(&self, cursor_id: i64) -> Kind {
        if let Some((interest, caught_up, labeler)) = self.event_cursor_state(cursor_id) {
            return Kind {
                interest,
                caught_up,
                labeler: Some(labeler),
            };
        }
        Kind {
            interest: u64::MAX,
            caught_up: false,
            labeler: self.event_labeler(cursor_id),
        }
    }

    /// One look: from memory on this task, else on the pool.
    async fn get_more_look<R, RF>(
        &self,
        req: &GetMoreRequest,
        read_on_pool: &R,
    ) -> Result<CursorBatch>
    where
        R: Fn() -> RF,
        RF: Future<Output = Result<CursorBatch>>,
    {
        let look = {
            let _in_op = req.op.as_ref().map(|op| op.enter());
            self.get_more_in_memory(req.cursor_id, &req.ns, req.batch_size)?
        };
        match look {
            Look::Batch(batch) => Ok(batch),
            Look::NeedsPool => read_on_pool().await,
        }
    }

    /// The answer at the deadline: the last look's empty batch, or one read now if the
    /// getMore never looked.
    async fn get_more_final<R, RF>(
        &self,
        last_look: Option<CursorBatch>,
        read_on_pool: &R,
    ) -> Result<CursorBatch>
    where
        R: Fn() -> RF,
        RF: Future<Output = Result<CursorBatch>>,
    {
        match last_look {
            Some(batch) => Ok(batch),
            None => read_on_pool().await,
        }
    }

    /// A full batch of events suggests a backlog: build the next one while this one
    /// travels.
    fn prefetch_after(self: &Arc<Self>, kind: Kind, batch: &CursorBatch) {
        if kind.events() && batch.cursor_id != 0 && batch.raw_docs.len() >= PREFETCH_MIN_EVENTS {
            let n = batch.raw_docs.len();
            let engine = Arc::clone(self);
            let id = batch.cursor_id;
            tokio::task::spawn_blocking(move || engine.prefetch_events(id, n));
        }
    }
}

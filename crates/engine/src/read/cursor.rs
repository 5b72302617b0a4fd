//! Open cursors: what a `getMore` continues. A cursor either holds the rest of a
//! result computed up front (sorted finds, aggregations with a blocking stage) or a
//! resumable scan (with the stages of an aggregation that streams).
//! Cursors idle for `IDLE_TIMEOUT` are closed, as mongod does after 10 minutes.

use crate::catalog::CollMeta;
use crate::read::{Access, Scan};
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::matcher::Matcher;
use tailstream_query::pipeline::Streamed;
use tailstream_query::projection::Projection;

/// mongod's `cursorTimeoutMillis` default (the server parameter of that name sets it).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often idle cursors are looked for: mongod's `clientCursorMonitorFrequencySecs`
/// default, so a cursor closes at most this long after its timeout, as there.
pub const IDLE_CHECK_PERIOD: Duration = Duration::from_secs(4);
/// Open cursors at most; one more is refused rather than exhausting memory.
pub const MAX_OPEN_CURSORS: usize = 100_000;
/// A reply batch stops growing past this many bytes of documents (mongod: 16 MiB).
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Documents read from storage at a time by a scanning cursor.
const SCAN_CHUNK: usize = 256;
/// Documents in a first batch when the client gives no batchSize.
pub const DEFAULT_FIRST_BATCH: usize = 101;

pub enum Source {
    /// The remaining documents, computed in full already.
    Buffered(VecDeque<Document>),
    /// A scan that continues on the next getMore.
    /// `buf` holds documents read ahead of the client, so storage is read in chunks.
    Scan {
        meta: Arc<CollMeta>,
        matcher: Arc<Matcher>,
        scan: Box<Scan>,
        buf: VecDeque<Document>,
    },
    /// An aggregation whose stages stream, run as the cursor is read over its scan,
    /// or over the output of its last blocking stage (`$sort`, `$group`, `$count`;
    /// the parts before it ran when the cursor was made), or after a `$unionWith`
    /// (both of its sides read as the cursor is).
    Pipeline(Box<PipelineScan>),
    /// A blocking sort's runs spilled to disk, merged as the cursor is read
    /// (`spill_sort`).
    Sorted(Box<crate::read::spill_sort::Merge>),
    /// Events made by a layer above this one (change streams), read through
    /// [`EventSource`]: the cursor code never names them.
    Events(Box<dyn EventSource>),
}

/// A streamed aggregation: what feeds its stages, and the stages
/// (`tailstream_query::pipeline::Streamed`). Storage is read a chunk at a time; the
/// stages take one document at a time, as the cursor asks, so what a batch returns
/// does not depend on the chunks (an error in a document after the batch is the next
/// getMore's, as mongod's).
pub struct PipelineScan {
    feed: Feed,
    stages: Streamed,
    /// The feed gave its last document.
    fed: bool,
    /// What the stages gave and the cursor has not returned yet.
    out: VecDeque<Document>,
}

/// What a streamed aggregation's stages read.
pub(crate) enum Feed {
    /// The collection's scan (the pipeline's leading `$match` as its filter), with
    /// the documents read and not yet through the stages.
    Scan {
        meta: Arc<CollMeta>,
        matcher: Arc<Matcher>,
        scan: Box<Scan>,
        read: VecDeque<Document>,
    },
    /// A `$sort`'s or `$count`'s output (the stages before it already run, into it).
    Sorted(crate::read::spill_sort::Sorted),
    /// A `$group`'s output (the stages before it already run, into it).
    Grouped(Box<crate::read::spill_group::GroupOutput>),
    /// A `$unionWith`'s output: the part before it, then the other collection's.
    Union(Box<crate::read::union::UnionFeed>),
    /// A partitioned `$setWindowFields`' output, a partition at a time.
    Window(Box<crate::read::window::WindowOutput>),
}

impl Feed {
    pub(crate) fn scan(meta: Arc<CollMeta>, matcher: Arc<Matcher>, scan: Scan) -> Feed {
        Feed::Scan {
            meta,
            matcher,
            scan: Box::new(scan),
            read: VecDeque::new(),
        }
    }

    /// The next document (None: no more).
    pub(crate) fn next(&mut self, engine: &crate::Engine) -> Result<Option<Document>> {
        let store = &engine.store;
        match self {
            Feed::Scan {
                meta,
                matcher,
                scan,
                read,
            } => {
                while read.is_empty() && !scan.done {
                    let mut chunk = Vec::new();
                    scan.next_batch(store, meta.id, matcher, SCAN_CHUNK, &mut chunk)?;
                    read.extend(chunk.into_iter().map(|(_, d)| d));
                }
                Ok(read.pop_front())
            }
            Feed::Sorted(sorted) => sorted.next(),
            Feed::Grouped(groups) => groups.next(),
            Feed::Union(union) => union.next(engine),
            Feed::Window(window) => window.next(),
        }
    }
}

impl PipelineScan {
    pub(crate) fn new(feed: Feed, stages: Streamed) -> Self {
        PipelineScan {
            feed,
            stages,
            fed: false,
            out: VecDeque::new(),
        }
    }

    /// The next document out of the stages (None: the feed ended or a `$limit` was
    /// reached).
    pub(crate) fn next(&mut self, engine: &crate::Engine) -> Result<Option<Document>> {
        while self.out.is_empty() && !self.ended() {
            let Some(doc) = self.feed.next(engine)? else {
                self.fed = true;
                break;
            };
            let lookups = engine.collection_source();
            self.stages.push([doc], &lookups, &mut self.out)?;
        }
        Ok(self.out.pop_front())
    }

    /// No input can give more documents.
    fn ended(&self) -> bool {
        self.fed || self.stages.ended()
    }
}

/// An event's bytes, shared by every cursor that returns it (see
/// `changestream::SharedEvent`).
pub type RawEvent = Arc<bson::RawDocumentBuf>;

/// A cursor source of events, built above the read layer (change streams). Events
/// are shown only once durable: a getMore waiting on such a cursor waits for the
/// durable time to pass a commit it cares about, not for the commit.
pub trait EventSource: Send {
    /// Up to `want` events (0: as many as fit in a reply) ready now, and whether the
    /// source ended. Never waits. With `memory_only` (the read runs on an async worker)
    /// it reads memory only, a bounded amount, and fails with [`needs_storage`] when the
    /// batch a full read would give needs more, having put back what it took.
    fn next_events(
        &mut self,
        engine: &crate::Engine,
        want: usize,
        memory_only: bool,
    ) -> Result<(Vec<RawEvent>, bool)>;
    /// The position after the last batch (`postBatchResumeToken`).
    fn resume_token(&self) -> Document;
    /// A bucket of a parallel stream: the fields its cursor document adds (the
    /// stream's `combinedResumeToken`; a group consumer's `rejoin`).
    fn bucket_fields(&self) -> Option<Document> {
        None
    }
    /// The commit-notice namespace bits it reads (`CommitNotice::ns_mask`).
    fn interest(&self) -> u64;
    /// Whether it has nothing to return now (everything durable read, nothing queued):
    /// a getMore can wait without looking first.
    fn caught_up(&self, engine: &crate::Engine) -> bool;
    /// Builds the next batch ahead, after a full one went out (errors kept for the
    /// next getMore).
    fn prefetch(&mut self, engine: &crate::Engine, max_events: usize);
    /// Adds the error labels of this kind of source to an error of its getMore.
    fn error_labeler(&self) -> fn(Error) -> Error;
    /// The oplog time it reads next: everything before it has been read (how far
    /// behind the oplog's head a consumer is).
    fn position(&self) -> Option<crate::core::time::ClusterTime> {
        None
    }
    /// The oplog entries and bytes it has read in all.
    fn oplog_read(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Internal (never sent): a memory-only read would need storage.
pub(crate) const NEEDS_STORAGE: i32 = -1_000_001;

/// The error of a memory-only read that needs storage (see [`EventSource::next_events`]).
pub(crate) fn needs_storage() -> Error {
    Error::new(NEEDS_STORAGE, "this read needs storage")
}

pub struct Cursor {
    pub id: i64,
    /// The namespace reported in replies (`db.coll`, or `db.$cmd.aggregate`).
    pub ns: String,
    pub source: Source,
    pub projection: Option<Arc<Projection>>,
    /// `returnKey`: return these index key fields of each document instead of it.
    pub return_key: Option<Arc<Vec<String>>>,
    /// Documents still to return in total (from `limit`), None for no limit.
    pub remaining: Option<u64>,
    /// Matching documents still to skip.
    pub skip: u64,
    pub no_timeout: bool,
    pub last_used: Instant,
    /// The session that created it (killSessions/endSessions close its cursors).
    pub lsid: Option<bson::Bson>,
    /// Set while a getMore is running on it (a concurrent getMore is refused).
    pub busy: bool,
    /// An already projected document that did not fit in the previous batch.
    front: Option<Document>,
    /// Stays open at the end of the data and continues from there on the next getMore.
    pub tailable: bool,
    /// A getMore on it waits (up to its maxTimeMS) for new data instead of returning empty.
    pub await_data: bool,
    /// A tailable cursor whose last batch ended because it reached the newest document:
    /// its next batch is what was committed since, a few documents still in the memtable,
    /// cheap enough to read on the connection's task instead of the blocking pool.
    pub at_tail: bool,
    /// A [`Cursor::raw_tail`] cursor's claim on its collection's entries in the recent
    /// oplog: its getMores read the inserted documents from there, not from storage.
    pub watch: Option<crate::oplog::recent::WatchGuard>,
    /// What it has returned so far, for `$currentOp`'s idle cursors and the status page.
    pub returned: Returned,
    /// Who opened it, with what command ([`CursorRegistry::set_origin`]).
    pub origin: Option<Arc<CursorOrigin>>,
}

/// Who opened a cursor and with what command, as the layer above describes it (the
/// server: mongod's `originatingCommand`, the client's address, its appName). The
/// engine only keeps it with the cursor for `$currentOp` and the status page.
#[derive(Debug, Clone)]
pub struct CursorOrigin {
    pub command: Document,
    pub client: String,
    pub app_name: Option<String>,
    /// The authenticated user that opened it (`user@db`), if any: only that user may
    /// continue or kill it.
    pub user: Option<String>,
}

/// A cursor's output so far (mongod's `nDocsReturned`, `nBatchesReturned`), and when
/// it was opened (`createdDate`).
#[derive(Clone, Debug)]
pub struct Returned {
    pub created: std::time::SystemTime,
    pub docs: u64,
    pub batches: u64,
    pub bytes: u64,
}

impl Returned {
    fn new() -> Returned {
        Returned {
            created: std::time::SystemTime::now(),
            docs: 0,
            batches: 0,
            bytes: 0,
        }
    }

    /// A batch went out: `docs` documents (as `Document`s) and `raw` stored ones.
    pub fn batch(&mut self, docs: &[Document], raw: &[RawEvent]) {
        let bytes: usize = docs.iter().map(encoded_len).sum::<usize>()
            + raw.iter().map(|r| r.as_bytes().len()).sum::<usize>();
        self.docs += (docs.len() + raw.len()) as u64;
        self.batches += 1;
        self.bytes += bytes as u64;
    }
}

impl Cursor {
    pub fn new(ns: String, source: Source) -> Cursor {
        Cursor {
            id: 0,
            ns,
            source,
            projection: None,
            return_key: None,
            remaining: None,
            skip: 0,
            no_timeout: false,
            last_used: Instant::now(),
            lsid: None,
            busy: false,
            front: None,
            tailable: false,
            await_data: false,
            at_tail: false,
            watch: None,
            returned: Returned::new(),
            origin: None,
        }
    }

    /// Up to `batch_size` documents (0 or None: as many as fit in a reply), and
    /// whether the cursor is exhausted afterwards.
    pub fn next_batch(
        &mut self,
        engine: &crate::Engine,
        batch_size: Option<usize>,
    ) -> Result<(Vec<Document>, bool)> {
        let want = match batch_size {
            Some(0) | None => usize::MAX,
            Some(n) => n,
        };
        let want = match self.remaining {
            Some(r) => want.min(r as usize),
            None => want,
        };
        if self.tailable {
            // New documents may have been committed after the scan last reached the end.
            if let Source::Scan { scan, .. } = &mut self.source {
                scan.done = false;
            }
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        self.at_tail = false;
        while out.len() < want {
            let doc = match self.front.take() {
                Some(d) => d,
                None => {
                    let Some(doc) = self.pull(engine)? else {
                        self.at_tail = self.tailable;
                        break;
                    };
                    if self.skip > 0 {
                        self.skip -= 1;
                        continue;
                    }
                    let mut doc = match (&self.return_key, &self.projection) {
                        (Some(fields), _) => index_key_of(&doc, fields),
                        (None, Some(p)) => p.apply(&doc)?,
                        (None, None) => doc,
                    };
                    // The text score rides along as a hidden field until here.
                    doc.remove(tailstream_query::text::TEXT_SCORE_FIELD);
                    doc
                }
            };
            let size = encoded_len(&doc);
            if !out.is_empty() && bytes + size > MAX_BATCH_BYTES {
                // Starts the next batch instead.
                self.front = Some(doc);
                break;
            }
            bytes += size;
            out.push(doc);
            if let Some(r) = &mut self.remaining {
                *r -= 1;
            }
        }
        // A reply never holds more than the client asked for, nor (past its first
        // document) more than the reply's limit of bytes.
        assert!(
            out.len() <= want,
            "a batch of {} documents for {want} asked",
            out.len()
        );
        assert!(
            out.len() <= 1 || bytes <= MAX_BATCH_BYTES,
            "a batch of {bytes} bytes, over the {MAX_BATCH_BYTES} of a reply"
        );
        let exhausted = self.remaining == Some(0)
            || (!self.tailable
                && self.front.is_none()
                && match &self.source {
                    Source::Buffered(q) => q.is_empty(),
                    Source::Sorted(m) => m.is_empty(),
                    // As mongod's scans, which notice their end only when asked for one
                    // more document: a batch filled by the last one leaves the cursor open
                    // (the next getMore returns an empty, final batch).
                    Source::Scan { scan, buf, .. } => {
                        scan.done && buf.is_empty() && out.len() < want
                    }
                    Source::Pipeline(p) => p.ended() && p.out.is_empty() && out.len() < want,
                    Source::Events(_) => false,
                });
        Ok((out, exhausted))
    }

    /// Whether the next batch can go out as stored BSON ([`Cursor::next_raw_batch`]):
    /// a tailable cursor over a capped collection in insertion order, with no filter,
    /// projection, skip, limit or held-over document. A message bus's consumers are
    /// such cursors; decoding each message into a `Document` and encoding it again for
    /// the reply was a third of their getMore's instructions.
    pub fn raw_tail(&self) -> bool {
        self.tailable
            && self.projection.is_none()
            && self.return_key.is_none()
            && self.remaining.is_none()
            && self.skip == 0
            && self.front.is_none()
            && matches!(&self.source, Source::Scan { matcher, scan, buf, .. }
                if matcher.matches_everything()
                    && buf.is_empty()
                    && !scan.annotate_text_score
                    && matches!(scan.access, Access::NaturalScan { reverse: false }))
    }

    /// The collection a scan reads (None: another source).
    pub fn collection_id(&self) -> Option<u32> {
        match &self.source {
            Source::Scan { meta, .. } => Some(meta.id),
            _ => None,
        }
    }

    /// The next batch of a [`Cursor::raw_tail`] cursor, as stored BSON: up to
    /// `batch_size` documents (0 or None: as many as fit in a reply). A tailable cursor
    /// is never exhausted by a batch.
    /// `unmodified_after` and `evicted`: see `read::FromMemory`.
    pub fn next_raw_batch(
        &mut self,
        store: &tailstream_storage::Store,
        batch_size: Option<usize>,
        unmodified_after: Option<crate::core::time::ClusterTime>,
        evicted: &crate::core::evicted::EvictionMarks,
    ) -> Result<Vec<RawEvent>> {
        assert!(
            self.raw_tail(),
            "a raw batch of a cursor that needs decoding"
        );
        let want = match batch_size {
            Some(0) | None => usize::MAX,
            Some(n) => n,
        };
        let Source::Scan { meta, scan, .. } = &mut self.source else {
            unreachable!("raw_tail checked the source")
        };
        let mut out = Vec::new();
        self.at_tail = false;
        // New documents may have been committed after the scan last reached the end.
        scan.done = false;
        while out.len() < want && !scan.done {
            let bytes: usize = out.iter().map(|d: &RawEvent| d.as_bytes().len()).sum();
            let before = out.len();
            let memory = super::FromMemory {
                recent: self.watch.as_ref().map(|w| w.oplog()),
                unmodified_after,
                evicted,
            };
            scan.next_raw_natural(
                store,
                memory,
                meta,
                (
                    want - out.len(),
                    MAX_BATCH_BYTES - bytes.min(MAX_BATCH_BYTES),
                ),
                &mut out,
            )?;
            if out.len() == before && !scan.done {
                // The next document does not fit in this reply: it starts the next one.
                break;
            }
        }
        self.at_tail = scan.done;
        let bytes: usize = out.iter().map(|d| d.as_bytes().len()).sum();
        assert!(
            out.len() <= want && (out.len() <= 1 || bytes <= MAX_BATCH_BYTES),
            "a raw batch of {} documents and {bytes} bytes for {want} asked",
            out.len()
        );
        Ok(out)
    }

    /// The next matching document from the source, before skip and projection.
    fn pull(&mut self, engine: &crate::Engine) -> Result<Option<Document>> {
        let store = &engine.store;
        match &mut self.source {
            Source::Buffered(q) => Ok(q.pop_front()),
            Source::Sorted(m) => m.next_document(),
            Source::Scan {
                meta,
                matcher,
                scan,
                buf,
            } => {
                if buf.is_empty() {
                    let mut got = Vec::new();
                    while got.is_empty() && !scan.done {
                        scan.next_batch(store, meta.id, matcher, SCAN_CHUNK, &mut got)?;
                    }
                    buf.extend(got.into_iter().map(|(_, d)| d));
                }
                Ok(buf.pop_front())
            }
            Source::Pipeline(p) => p.next(engine),
            Source::Events(_) => Ok(None),
        }
    }
}

pub use tailstream_query::bson_size::{encoded_len, value_len};

/// All open cursors.
/// What `$currentOp` shows of a cursor no getMore is running on.
pub struct IdleCursor {
    pub id: i64,
    pub ns: String,
    pub returned: Returned,
    pub lsid: Option<bson::Bson>,
    pub idle_for: Duration,
    pub no_timeout: bool,
    pub tailable: bool,
    pub await_data: bool,
    pub origin: Option<Arc<CursorOrigin>>,
}

/// An open cursor's figures ([`CursorRegistry::stats`]).
pub struct CursorStats {
    pub id: i64,
    pub ns: String,
    pub change_stream: bool,
    pub tailable: bool,
    /// A getMore is running on it (for a tailable cursor: usually waiting for data).
    pub waiting: bool,
    pub idle_for: Duration,
    pub returned: Returned,
    /// An event source's next oplog time to read ([`EventSource::position`]).
    pub position: Option<crate::core::time::ClusterTime>,
    /// A tailable cursor whose last batch reached the newest document.
    pub at_tail: bool,
    /// An event source's oplog entries and bytes read in all ([`EventSource::oplog_read`]).
    pub oplog_read: (u64, u64),
    pub origin: Option<Arc<CursorOrigin>>,
}

impl CursorStats {
    /// An event source's distance behind the newest durable oplog entry, in entries
    /// (a collection's stream: that collection's), counted up to `cap`.
    pub fn lag_entries(&self, engine: &crate::Engine, cap: u64) -> Option<u64> {
        let next = self.position?;
        let ns = (!self.ns.contains(".$cmd")).then_some(self.ns.as_str());
        Some(engine.oplog_entries_from(ns, next, cap))
    }

    /// An event source's distance behind `head` (the newest durable oplog time), in
    /// seconds: from the oldest entry it has not read to the newest (0: caught up).
    pub fn lag_seconds(&self, head: crate::core::time::ClusterTime) -> Option<i64> {
        self.position.map(|next| {
            if next > head {
                0
            } else {
                i64::from(head.seconds().saturating_sub(next.seconds()))
            }
        })
    }
}

pub struct CursorRegistry {
    cursors: Mutex<HashMap<i64, Arc<Mutex<Cursor>>>>,
    /// Bumped whenever cursors are closed, so a getMore waiting for data on one of
    /// them notices at once instead of at the end of its await time.
    closed: tokio::sync::watch::Sender<u64>,
    /// Cursors closed for being idle past the timeout (serverStatus
    /// `metrics.cursor.timedOut`).
    timed_out: std::sync::atomic::AtomicU64,
}

impl Default for CursorRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl CursorRegistry {
    pub fn new() -> CursorRegistry {
        CursorRegistry {
            cursors: Mutex::new(HashMap::new()),
            closed: tokio::sync::watch::channel(0).0,
            timed_out: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Cursors closed so far for being idle past the timeout.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver that changes whenever cursors are closed.
    pub fn subscribe_closed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.closed.subscribe()
    }

    fn notify_closed(&self) {
        self.closed.send_modify(|n| *n += 1);
    }

    /// Registers a cursor and returns its new id.
    pub fn register(&self, mut cursor: Cursor) -> Result<i64> {
        let mut map = self.cursors.lock();
        if map.len() >= MAX_OPEN_CURSORS {
            return Err(Error::new(
                codes::OPERATION_FAILED,
                format!("too many open cursors (limit {MAX_OPEN_CURSORS})"),
            ));
        }
        let id = loop {
            let id = (rand_u64() >> 1) as i64;
            if id != 0 && !map.contains_key(&id) {
                break id;
            }
        };
        cursor.id = id;
        cursor.last_used = Instant::now();
        map.insert(id, Arc::new(Mutex::new(cursor)));
        Ok(id)
    }

    pub fn get(&self, id: i64) -> Option<Arc<Mutex<Cursor>>> {
        self.cursors.lock().get(&id).cloned()
    }

    pub fn remove(&self, id: i64) -> bool {
        let removed = self.cursors.lock().remove(&id).is_some();
        if removed {
            self.notify_closed();
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.cursors.lock().len()
    }

    /// The open cursors no getMore is running on (`$currentOp` with `idleCursors`).
    pub fn idle(&self) -> Vec<IdleCursor> {
        let cursors: Vec<Arc<Mutex<Cursor>>> = self.cursors.lock().values().cloned().collect();
        cursors
            .iter()
            // A cursor locked right now is in use: its getMore is an active operation.
            .filter_map(|c| c.try_lock())
            .filter(|c| !c.busy)
            .map(|c| IdleCursor {
                id: c.id,
                ns: c.ns.clone(),
                returned: c.returned.clone(),
                lsid: c.lsid.clone(),
                idle_for: c.last_used.elapsed(),
                no_timeout: c.no_timeout,
                tailable: c.tailable,
                await_data: c.await_data,
                origin: c.origin.clone(),
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every open cursor that is not being read this instant (a getMore waiting for
    /// data holds no lock and is included), with what it returned: the status page
    /// and `/metrics`.
    pub fn stats(&self) -> Vec<CursorStats> {
        let cursors: Vec<Arc<Mutex<Cursor>>> = self.cursors.lock().values().cloned().collect();
        cursors
            .iter()
            .filter_map(|c| c.try_lock())
            .map(|c| CursorStats {
                id: c.id,
                ns: c.ns.clone(),
                change_stream: matches!(c.source, Source::Events(_)),
                tailable: c.tailable,
                waiting: c.busy,
                idle_for: c.last_used.elapsed(),
                returned: c.returned.clone(),
                position: match &c.source {
                    Source::Events(e) => e.position(),
                    _ => None,
                },
                at_tail: c.at_tail,
                oplog_read: match &c.source {
                    Source::Events(e) => e.oplog_read(),
                    _ => (0, 0),
                },
                origin: c.origin.clone(),
            })
            .collect()
    }

    /// Who opened cursor `id`, if it is open and that was recorded.
    pub fn origin(&self, id: i64) -> Option<Arc<CursorOrigin>> {
        self.get(id).and_then(|c| c.lock().origin.clone())
    }

    /// Records who opened cursor `id` (nothing if it is closed already).
    pub fn set_origin(&self, id: i64, origin: CursorOrigin) {
        if let Some(c) = self.get(id) {
            c.lock().origin = Some(Arc::new(origin));
        }
    }

    /// Closes cursors idle for longer than the timeout; returns how many.
    pub fn reap_idle(&self, timeout: Duration) -> usize {
        let mut map = self.cursors.lock();
        let before = map.len();
        map.retain(|_, c| match c.try_lock() {
            Some(c) => c.busy || c.no_timeout || c.last_used.elapsed() < timeout,
            None => true,
        });
        let n = before - map.len();
        drop(map);
        if n > 0 {
            self.timed_out
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            self.notify_closed();
        }
        n
    }

    /// Closes every cursor opened by one of these sessions.
    pub fn kill_sessions(&self, lsids: &[bson::Bson]) -> usize {
        let mut map = self.cursors.lock();
        let before = map.len();
        map.retain(|_, c| {
            let c = c.lock();
            !c.lsid
                .as_ref()
                .map(|l| {
                    lsids
                        .iter()
                        .any(|k| tailstream_query::compare::bson_eq(k, l))
                })
                .unwrap_or(false)
        });
        let n = before - map.len();
        drop(map);
        if n > 0 {
            self.notify_closed();
        }
        n
    }

    pub fn kill_all(&self) -> usize {
        let mut map = self.cursors.lock();
        let n = map.len();
        map.clear();
        drop(map);
        self.notify_closed();
        n
    }
}

fn rand_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// A document's index key for `returnKey`: each key field with its value (null when
/// the document lacks it, as the index stores it).
fn index_key_of(doc: &Document, fields: &[String]) -> Document {
    fields
        .iter()
        .map(|f| {
            let v = tailstream_query::path::get_path(doc, f)
                .cloned()
                .unwrap_or(Bson::Null);
            (f.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use bson::doc;

    fn buffered(docs: Vec<Document>) -> Cursor {
        Cursor::new("db.c".into(), Source::Buffered(docs.into()))
    }

    fn ids(docs: &[Document]) -> Vec<i32> {
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn batches_hold_what_was_asked_and_the_limit_ends_the_cursor() {
        let e = TestEngine::open();
        let mut c = buffered((0..5).map(|i| doc! {"_id": i}).collect());
        let (docs, done) = c.next_batch(&e, Some(2)).unwrap();
        assert_eq!((ids(&docs), done), (vec![0, 1], false));
        let (docs, done) = c.next_batch(&e, None).unwrap();
        assert_eq!((ids(&docs), done), (vec![2, 3, 4], true));

        let mut c = buffered((0..5).map(|i| doc! {"_id": i}).collect());
        c.remaining = Some(3);
        c.skip = 1;
        let (docs, done) = c.next_batch(&e, Some(2)).unwrap();
        assert_eq!((ids(&docs), done), (vec![1, 2], false));
        let (docs, done) = c.next_batch(&e, Some(10)).unwrap();
        assert_eq!(
            (ids(&docs), done),
            (vec![3], true),
            "the limit of 3 reached"
        );
    }

    /// A reply stops short of 16 MiB of documents: the document that would pass it
    /// opens the next batch (a single larger one would still go alone).
    #[test]
    fn a_batch_stops_before_the_reply_limit() {
        let e = TestEngine::open();
        let pad = "x".repeat(6 * 1024 * 1024);
        let mut c = buffered((0..4).map(|i| doc! {"_id": i, "pad": &pad}).collect());
        let mut batches = Vec::new();
        loop {
            let (docs, done) = c.next_batch(&e, None).unwrap();
            let bytes: usize = docs.iter().map(encoded_len).sum();
            assert!(bytes <= MAX_BATCH_BYTES, "{bytes} bytes in one batch");
            batches.push(ids(&docs));
            if done {
                break;
            }
        }
        assert_eq!(batches, vec![vec![0, 1], vec![2, 3]]);
    }
}

#[cfg(test)]
mod encoded_len_tests {
    use super::encoded_len;
    use bson::{doc, Binary, Bson, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp};

    #[test]
    fn matches_the_encoded_size_for_every_type() {
        let long_array: Vec<Bson> = (0..120).map(Bson::Int32).collect();
        let docs = vec![
            doc! {},
            doc! {"a": 1.5, "b": "héllo", "c": {"d": [1, "x", {"e": null}]}},
            doc! {"big": long_array, "oid": bson::oid::ObjectId::new(), "t": true},
            doc! {"bin": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] }},
            doc! {"old": Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![9; 5] }},
            doc! {"re": Regex { pattern: "a.*b".into(), options: "i".into() }},
            doc! {"js": Bson::JavaScriptCode("x + 1".into()),
            "scope": Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code: "y".into(), scope: doc! {"y": 2} })},
            doc! {"ts": Timestamp { time: 1, increment: 2 }, "i64": 5i64, "dt": bson::DateTime::now(),
            "dec": Decimal128::from_bytes([0; 16]), "min": Bson::MinKey, "max": Bson::MaxKey,
            "u": Bson::Undefined, "sym": Bson::Symbol("s".into())},
        ];
        for d in docs {
            let mut v = Vec::new();
            d.to_writer(&mut v).unwrap();
            assert_eq!(encoded_len(&d), v.len(), "{d}");
        }
    }
}

//! Change streams: `aggregate` with a leading `$changeStream` on a collection, a
//! database or the deployment, continued by `getMore`.
//!
//! A stream is a position in the oplog (the smallest cluster time not read yet) and a
//! scope. A collection stream reads only its own entries, through the per-namespace
//! ordering (`oplog_by_ns`, which also lists the drop/rename/index entries of the
//! collection), so writes to other collections cost it nothing. Database and cluster
//! streams read the oplog itself. A stream never reads past the durable oplog time:
//! an event is visible only once its write is on disk, so no stream ever shows a
//! write that a crash could roll back ("majority" here means journaled).
//!
//! A stream is a cursor source of events ([`EventSource`]): the read layer's getMore
//! (`read/get_more.rs`) waits for the durable time to pass a commit the stream cares
//! about; this module only reads.

pub mod diff;
pub(crate) mod event;
pub mod prefilter;
pub mod token;

use crate::catalog::namespace::Namespace;
use crate::core::keys;
use crate::oplog::recent;
use crate::read::cursor::{needs_storage, Cursor, EventSource, Source, NEEDS_STORAGE};
use crate::read::find::CursorBatch;
use crate::Engine;
use bson::{Bson, Document, RawDocumentBuf};
use std::collections::VecDeque;
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::pipeline::{NoCollections, Pipeline};
use tailstream_storage::Space;
use token::ResumeToken;

/// A change event's bytes, shared: the event of a CRUD entry in the recent oplog is
/// built once and queued by every default-option stream on its collection, and a
/// copy per stream (1 KB each, 100 streams) was a fifth of a fan-out's server CPU.
pub type SharedEvent = crate::read::cursor::RawEvent;

/// An entry read for a stream, at its oplog time.
struct ReadEntry {
    ts: u64,
    body: EntryBody,
}

enum EntryBody {
    /// Ruled out on its digest: never read, never an event.
    Skipped,
    /// From the recent oplog, with its bytes; its default-option event is built once
    /// for all streams.
    Recent(Arc<recent::RecentEntry>),
    /// Read from storage and made into this stream's event there and then, from the
    /// storage engine's own buffer: copying each entry out first cost a catch-up an
    /// allocation and a 1 KB copy per event. Empty: the entry makes no event here (a
    /// transaction's entry may make several).
    Built(event::Events),
    /// The entry could not be read or made into an event; reported in its turn.
    Failed(Error),
}

/// What a stream watches.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    Collection(Namespace),
    Database(String),
    Cluster,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullDocument {
    Default,
    UpdateLookup,
    WhenAvailable,
    Required,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeChange {
    Off,
    WhenAvailable,
    Required,
}

#[derive(Debug, Clone)]
pub struct StreamSpec {
    pub scope: Scope,
    pub full_document: FullDocument,
    pub before_change: BeforeChange,
    pub show_expanded: bool,
    /// `showRawUpdateDescription` (an internal option of mongod's, for resharding and
    /// tools that apply events as oplog entries): update events carry the entry's own
    /// `o` as `rawUpdateDescription` instead of `updateDescription`.
    pub show_raw_update: bool,
    /// `showSystemEvents` (internal, as mongod's): database and cluster streams also
    /// show the events of `system.js`, `system.buckets.*` and `system.resharding.*`.
    pub show_system: bool,
    /// `$changeStreamSplitLargeEvent`: events over 16 MiB are returned in fragments.
    pub split_large: bool,
    /// The user's stages after `$changeStream` (re-parsed per batch: a parsed
    /// pipeline is not `Send`).
    pub stages: Vec<Document>,
    /// The aggregate's collation: the user's stages compare strings under it.
    pub collator: Option<std::sync::Arc<tailstream_query::collation::Collator>>,
    /// A collection stream's `ns` field, encoded once for all its events.
    pub(crate) collection_ns: Option<RawDocumentBuf>,
    /// The oplog's `ns` of a collection stream (`db.coll`), or the prefix of a database
    /// stream's (`db.`): made once, not per read.
    scope_ns: Option<String>,
}

impl StreamSpec {
    /// Default options: the event of a CRUD entry is the same for every such stream.
    fn plain(&self) -> bool {
        self.full_document == FullDocument::Default
            && self.before_change == BeforeChange::Off
            && !self.show_expanded
            && !self.show_raw_update
            && !self.show_system
    }
}

/// Oplog entries read from storage at a time by a stream with stages of its own
/// (whose filter may drop most of them).
const READ_CHUNK: usize = 256;
/// Entries read from storage at a time by a stream without stages, where every entry
/// read is an event of the batch: each chunk opens its iterators and reads again the
/// 64 KiB block where the last one stopped, a fifth more block reads at 256 entries.
const READ_CHUNK_PLAIN: usize = 4096;
/// Bytes of entries read from storage at a time, whatever their number.
const READ_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Entries looked at (read or skipped on their digest) at a time.
const MAX_SCANNED: usize = 65_536;
/// A reply's events stop growing past this many bytes (mongod: 16 MiB).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Events returned by an aggregate without a batchSize.
const DEFAULT_FIRST_BATCH: usize = 101;

/// An open change stream: the state a getMore continues from.
pub struct ChangeStream {
    spec: StreamSpec,
    /// The smallest oplog time not read yet.
    next_ts: u64,
    /// resumeAfter/startAfter an event: that event must be the stream's first entry at
    /// its time, or the token is not from this stream (280).
    verify: Option<ResumeToken>,
    /// Resume token of the last event returned, or the high-water mark reached.
    pbrt: ResumeToken,
    /// Events produced (after the user's pipeline) but not returned yet.
    pending: VecDeque<(SharedEvent, ResumeToken)>,
    /// An invalidate was produced: the cursor closes once `pending` is returned.
    invalidated: bool,
    /// The leading `$match`, decided on oplog_by_ns digests where it can be.
    prefilter: prefilter::Prefilter,
    /// An error met while reading ahead, reported by the next getMore.
    deferred_error: Option<Error>,
    /// Set during a memory-only read (see [`ChangeStream::next_batch`]).
    memory_only: bool,
    /// Keeps the watched namespaces' entries whole in the recent oplog while open.
    watch: recent::WatchGuard,
}

/// Parses `$changeStream`'s options and the stages after it.
fn parse_spec(
    db: &str,
    coll: Option<&str>,
    opts: &Document,
    rest: &[Document],
) -> Result<(StreamSpec, Document)> {
    let mut full_document = FullDocument::Default;
    let mut before_change = BeforeChange::Off;
    let mut show_expanded = false;
    let mut show_raw_update = false;
    let mut show_system = false;
    let mut all_for_cluster = false;
    let mut start = Document::new();
    for (k, v) in opts {
        let bool_opt = || -> Result<bool> {
            v.as_bool().ok_or_else(|| {
                Error::type_mismatch(format!(
                    "BSON field '$changeStream.{k}' is the wrong type '{}', expected type 'bool'",
                    tailstream_query::compare::type_name(v)
                ))
            })
        };
        match k.as_str() {
            "resumeAfter" | "startAfter" | "startAtOperationTime" => {
                start.insert(k.clone(), v.clone());
            }
            "fullDocument" => {
                full_document = match v.as_str() {
                    Some("default") => FullDocument::Default,
                    Some("updateLookup") => FullDocument::UpdateLookup,
                    Some("whenAvailable") => FullDocument::WhenAvailable,
                    Some("required") => FullDocument::Required,
                    _ => return Err(enum_error(k, v)),
                }
            }
            "fullDocumentBeforeChange" => {
                before_change = match v.as_str() {
                    Some("off") => BeforeChange::Off,
                    Some("whenAvailable") => BeforeChange::WhenAvailable,
                    Some("required") => BeforeChange::Required,
                    _ => return Err(enum_error(k, v)),
                }
            }
            "showExpandedEvents" => show_expanded = bool_opt()?,
            "showRawUpdateDescription" => show_raw_update = bool_opt()?,
            "allChangesForCluster" => all_for_cluster = bool_opt()?,
            "showSystemEvents" => show_system = bool_opt()?,
            "allowToRunOnConfigDB" | "allowToRunOnSystemNS" | "showMigrationEvents" => {
                bool_opt()?;
            }
            _ => {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field '$changeStream.{k}' is an unknown field."),
                ))
            }
        }
    }
    // mongod's order: a cluster stream's place first, then the internal databases
    // (admin only for a cluster stream), then the internal collections.
    if all_for_cluster && (db != "admin" || coll.is_some()) {
        let ns = match coll {
            Some(c) => format!("{db}.{c}"),
            None => format!("{db}.$cmd.aggregate"),
        };
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            format!(
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name; found {ns}"
            ),
        ));
    }
    if matches!(db, "config" | "local") || (db == "admin" && !all_for_cluster) {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("$changeStream may not be opened on the internal {db} database"),
        ));
    }
    let scope = match coll {
        Some(c) if c.starts_with("system.") => {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                format!("$changeStream may not be opened on the internal {db}.{c} collection"),
            ));
        }
        Some(c) => Scope::Collection(Namespace::new(db, c)),
        None if all_for_cluster => Scope::Cluster,
        None => Scope::Database(db.to_string()),
    };
    // The stages after $changeStream: only document-by-document transformations.
    let mut stages = rest.to_vec();
    let mut split_large = false;
    if let Some(pos) = stages
        .iter()
        .position(|s| s.contains_key("$changeStreamSplitLargeEvent"))
    {
        if pos + 1 != stages.len() {
            return Err(Error::new(
                7182802,
                "$changeStreamSplitLargeEvent must be the last stage in the pipeline",
            ));
        }
        stages.pop();
        split_large = true;
    }
    // Before the stages are parsed, as on mongod (the query crate does not know the
    // stage: it would call it unrecognized).
    if stages
        .iter()
        .any(|s| s.keys().next().is_some_and(|k| k == "$changeStream"))
    {
        return Err(Error::new(
            40602,
            "$changeStream is only valid as the first stage in a pipeline",
        ));
    }
    Pipeline::parse(&stages, db)?;
    for s in &stages {
        let name = s.keys().next().map(String::as_str).unwrap_or("");
        const ALLOWED: [&str; 8] = [
            "$match",
            "$project",
            "$addFields",
            "$set",
            "$unset",
            "$replaceRoot",
            "$replaceWith",
            "$redact",
        ];
        if !ALLOWED.contains(&name) {
            return Err(Error::new(
                codes::ILLEGAL_OPERATION,
                format!("{name} is not permitted in a $changeStream pipeline"),
            ));
        }
    }
    Ok((
        StreamSpec {
            collection_ns: match &scope {
                Scope::Collection(c) => Some(event::ns_raw(c)),
                _ => None,
            },
            scope_ns: match &scope {
                Scope::Collection(c) => Some(c.full()),
                Scope::Database(db) => Some(format!("{db}.")),
                _ => None,
            },
            scope,
            full_document,
            before_change,
            show_expanded,
            show_raw_update,
            show_system,
            split_large,
            stages,
            collator: None,
        },
        start,
    ))
}

fn enum_error(k: &str, v: &Bson) -> Error {
    match v {
        Bson::String(s) => Error::bad_value(format!(
            "Enumeration value '{s}' for field '$changeStream.{k}' is not a valid value."
        )),
        other => Error::type_mismatch(format!(
            "BSON field '$changeStream.{k}' is the wrong type '{}', expected type 'string'",
            tailstream_query::compare::type_name(other)
        )),
    }
}

/// Events built at most by one read of the recent oplog in a memory-only getMore (it
/// runs on an async worker thread); events already built are returned without limit.
const MAX_IN_MEMORY_BATCH: usize = 256;

/// Reads of the recent oplog at most in one memory-only getMore (the second usually
/// only finds that nothing more is durable): a stream further behind, or whose filter
/// keeps passing over entries, goes on in the blocking pool. One I/O thread serves
/// every connection, so a read there builds at most 2 × 256 events.
const MAX_IN_MEMORY_READS: usize = 2;

/// Error codes after which a driver may resume a change stream: mongod labels them
/// `ResumableChangeStreamError` when a change stream's getMore fails with them.
pub const RESUMABLE_CODES: [i32; 17] = [
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 63, 150, 13388, 234, 133,
];

impl Engine {
    /// `aggregate` with a leading `$changeStream`: opens the stream and returns its
    /// first batch (events already durable after the start point).
    #[allow(clippy::too_many_arguments)]
    pub fn open_change_stream(
        &self,
        db: &str,
        coll: Option<&str>,
        opts: &Document,
        rest: &[Document],
        batch_size: Option<i64>,
        lsid: Option<Bson>,
        collation: Option<&Document>,
    ) -> Result<CursorBatch> {
        let (mut spec, start) = parse_spec(db, coll, opts, rest)?;
        if let Scope::Collection(ns) = &spec.scope {
            // A view (and a time-series collection, a view on mongod) has no changes of
            // its own to stream.
            let catalog = self.catalog();
            if catalog.view(ns).is_some() || catalog.get(ns).is_some_and(|m| m.is_timeseries()) {
                return Err(crate::catalog::views::not_a_collection(ns));
            }
        }
        let meta = coll.and_then(|c| self.collection(&Namespace::new(db, c)));
        spec.collator = crate::read::find::operation_collator(meta.as_deref(), collation)?;
        if start.len() > 1 {
            if start.contains_key("resumeAfter") && start.contains_key("startAfter") {
                return Err(Error::new(
                    50865,
                    "Do not specify both 'startAfter' and 'resumeAfter' in a $changeStream stage.",
                ));
            }
            return Err(Error::new(
                40674,
                format!(
                    "Only one type of resume option is allowed, but multiple were found: {}",
                    crate::core::format::doc_to_string(&start)
                ),
            ));
        }
        let trim_ts = self.oplog_trim_ts();
        let lost = |t: u64| {
            Error::new(
                codes::CHANGE_STREAM_HISTORY_LOST,
                format!(
                    "Resume of change stream was not possible, as the resume point may no longer be in the oplog. (resume point {:?}, oldest oplog entry {:?})",
                    keys::u64_to_ts(t),
                    keys::u64_to_ts(trim_ts)
                ),
            )
        };
        let (next_ts, verify, pbrt) = match start.iter().next() {
            None => {
                // As mongod: from just after the newest committed write.
                let t = keys::ts_to_u64(self.cluster_time()) + 1;
                (t, None, ResumeToken::high_water_mark(t))
            }
            Some((k, v)) if k == "startAtOperationTime" => {
                let Bson::Timestamp(t) = v else {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '$changeStream.startAtOperationTime' is the wrong type '{}', expected type 'timestamp'",
                        tailstream_query::compare::type_name(v)
                    )));
                };
                let t = keys::ts_to_u64(*t);
                if t < trim_ts {
                    return Err(lost(t));
                }
                (t, None, ResumeToken::high_water_mark(t))
            }
            Some((k, v)) => {
                let token = ResumeToken::parse(v)?;
                if token.from_invalidate && k == "resumeAfter" {
                    return Err(Error::new(
                        codes::INVALID_RESUME_TOKEN,
                        "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification.",
                    ));
                }
                if token.ts < trim_ts {
                    return Err(lost(token.ts));
                }
                if token.is_high_water_mark() {
                    (token.ts, None, token)
                } else {
                    (token.ts, Some(token.clone()), token)
                }
            }
        };
        let ns = match &spec.scope {
            Scope::Collection(n) => n.full(),
            _ => format!("{db}.$cmd.aggregate"),
        };
        self.enable_recent_oplog();
        // The prefilter decides on raw names and bytes: not under a collation.
        let prefilter = match spec.collator {
            None => prefilter::Prefilter::from_stages(&spec.stages),
            Some(_) => prefilter::Prefilter::default(),
        };
        let watch = self.recent.watch(match &spec.scope {
            Scope::Collection(ns) => crate::core::bus::namespace_bit(&ns.full()),
            _ => u64::MAX,
        });
        let stream = ChangeStream {
            watch,
            spec,
            next_ts,
            verify,
            pbrt,
            pending: VecDeque::new(),
            invalidated: false,
            prefilter,
            deferred_error: None,
            memory_only: false,
        };
        let mut stream = stream;
        let want = match batch_size {
            Some(n) if n < 0 => return Err(Error::bad_value("batchSize must be non-negative")),
            Some(n) => n as usize,
            None => DEFAULT_FIRST_BATCH,
        };
        let (raw_docs, closed) = if want == 0 {
            (Vec::new(), false)
        } else {
            stream.next_batch(self, want, false)?
        };
        let pbrt = stream.pbrt.to_document();
        let mut cursor = Cursor::new(ns.clone(), Source::Events(Box::new(stream)));
        cursor.tailable = true;
        cursor.await_data = true;
        cursor.lsid = lsid;
        let id = if closed {
            0
        } else {
            self.cursors.register(cursor)?
        };
        Ok(CursorBatch {
            cursor_id: id,
            ns,
            raw_docs,
            await_data: id != 0,
            post_batch_resume_token: Some(pbrt),
            ..Default::default()
        })
    }
}

impl EventSource for ChangeStream {
    fn next_events(
        &mut self,
        engine: &Engine,
        want: usize,
        memory_only: bool,
    ) -> Result<(Vec<SharedEvent>, bool)> {
        self.next_batch(engine, want, memory_only)
    }

    fn resume_token(&self) -> Document {
        self.pbrt.to_document()
    }

    fn interest(&self) -> u64 {
        self.watch.mask()
    }

    fn caught_up(&self, engine: &Engine) -> bool {
        self.pending.is_empty()
            && !self.invalidated
            && self.verify.is_none()
            && self.deferred_error.is_none()
            && self.next_ts > engine.durability.durable_ts()
    }

    fn prefetch(&mut self, engine: &Engine, max_events: usize) {
        ChangeStream::prefetch(self, engine, max_events)
    }

    fn error_labeler(&self) -> fn(Error) -> Error {
        label_resumable
    }
}

/// mongod labels a change stream's getMore error `ResumableChangeStreamError` when a
/// driver may resume after it.
pub fn label_resumable(e: Error) -> Error {
    if RESUMABLE_CODES.contains(&e.code) && e.labels.is_empty() {
        e.with_label("ResumableChangeStreamError")
    } else {
        e
    }
}

impl ChangeStream {
    pub fn post_batch_resume_token(&self) -> Document {
        self.pbrt.to_document()
    }

    /// Up to `want` events (0: as many as fit in a reply) that are durable now, and
    /// whether the stream ended (invalidated). Never waits.
    /// With `memory_only`, reads only the recent oplog, a bounded amount of it, and
    /// answers only with the batch a full read would give: when that would need storage
    /// or more reading, it puts back what it took and fails with [`NEEDS_STORAGE`].
    pub fn next_batch(
        &mut self,
        engine: &Engine,
        want: usize,
        memory_only: bool,
    ) -> Result<(Vec<SharedEvent>, bool)> {
        self.memory_only = memory_only;
        let r = self.next_batch_inner(engine, want);
        self.memory_only = false;
        r
    }

    fn next_batch_inner(
        &mut self,
        engine: &Engine,
        want: usize,
    ) -> Result<(Vec<SharedEvent>, bool)> {
        let want = if want == 0 { usize::MAX } else { want };
        let pipeline = Pipeline::parse(&self.spec.stages, "")?;
        let vars = tailstream_query::expr::Variables {
            now: Some(bson::DateTime::now()),
            collator: self.spec.collator.clone(),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        // A memory-only read that gives up puts its events back and the token where it was.
        let mut taken_tokens = Vec::new();
        let pbrt_before = self.memory_only.then(|| self.pbrt.clone());
        let mut reads_left = if self.memory_only {
            MAX_IN_MEMORY_READS
        } else {
            usize::MAX
        };
        loop {
            while let Some((doc, token)) = self.pending.pop_front() {
                let size = doc.as_bytes().len();
                if out.len() >= want || (!out.is_empty() && bytes + size > MAX_BATCH_BYTES) {
                    self.pending.push_front((doc, token));
                    return Ok((out, false));
                }
                bytes += size;
                out.push(doc);
                if self.memory_only {
                    taken_tokens.push(token.clone());
                }
                self.advance_to(token);
            }
            if self.invalidated {
                return Ok((out, true));
            }
            if let Some(e) = self.deferred_error.take() {
                if out.is_empty() {
                    return Err(e);
                }
                // Return the events read before the error first.
                self.deferred_error = Some(e);
                return Ok((out, false));
            }
            let gave_up = if reads_left == 0 {
                Some(needs_storage())
            } else {
                reads_left -= 1;
                let read_want = if self.memory_only {
                    want.saturating_sub(out.len()).min(MAX_IN_MEMORY_BATCH)
                } else {
                    want
                };
                match self.read_more(engine, &pipeline, &vars, read_want) {
                    Ok(true) => None,
                    Ok(false) => {
                        if self.pending.is_empty() {
                            self.advance_to(ResumeToken::high_water_mark(
                                self.next_ts.saturating_sub(1),
                            ));
                        }
                        return Ok((out, false));
                    }
                    Err(e) if e.code == NEEDS_STORAGE => Some(e),
                    Err(e) => return Err(e),
                }
            };
            if let Some(e) = gave_up {
                debug_assert!(self.memory_only, "only a memory-only read gives up");
                debug_assert_eq!(out.len(), taken_tokens.len());
                for (doc, token) in out.into_iter().zip(taken_tokens).rev() {
                    self.pending.push_front((doc, token));
                }
                if let Some(t) = pbrt_before {
                    // Safe to move back: the token only ever trails what was returned.
                    self.pbrt = t;
                }
                return Err(e);
            }
        }
    }

    /// Reads the next chunk of durable entries into `pending` (up to `want` events);
    /// false when there was nothing left to read.
    fn read_more(
        &mut self,
        engine: &Engine,
        pipeline: &Pipeline,
        vars: &tailstream_query::expr::Variables,
        want: usize,
    ) -> Result<bool> {
        let durable = engine.durability.durable_ts();
        if self.next_ts > durable {
            return Ok(false);
        }
        if self.next_ts < engine.oplog_trim_ts() {
            return Err(Error::new(
                codes::CHANGE_STREAM_HISTORY_LOST,
                "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
            ));
        }
        if self.verify.is_some() && self.memory_only {
            return Err(needs_storage());
        }
        if let Some(expected) = self.verify.take() {
            self.verify_resume_point(engine, &expected, pipeline, vars)?;
            return Ok(true);
        }
        let limit = if self.spec.stages.is_empty() {
            want.saturating_sub(self.pending.len())
                .clamp(1, READ_CHUNK_PLAIN)
        } else {
            READ_CHUNK
        };
        let entries = self.read_entries(engine, durable, limit)?;
        if entries.is_empty() {
            self.next_ts = durable + 1;
            return Ok(false);
        }
        let shared_events = self.spec.plain() && matches!(self.spec.scope, Scope::Collection(_));
        'entries: for ReadEntry { ts, body } in entries {
            // A stream's position only moves forward: an entry before it would be an
            // event returned twice, or read past the trim point's check.
            assert!(
                ts >= self.next_ts,
                "a change stream read the entry at {:?} behind its position {:?}",
                keys::u64_to_ts(ts),
                keys::u64_to_ts(self.next_ts)
            );
            self.next_ts = ts + 1;
            let evs = match body {
                EntryBody::Skipped => continue,
                EntryBody::Failed(e) => return Err(e),
                EntryBody::Built(evs) => evs,
                EntryBody::Recent(recent) => {
                    let bytes = recent.bytes.as_deref().expect("listed with its bytes");
                    let entry = raw_entry(ts, bytes)?;
                    // The digest's first byte is the kind of change (writes to a
                    // system.views, the DDL of views, are 'c' there).
                    if shared_events
                        && matches!(recent.digest.first(), Some(b'i' | b'u' | b'r' | b'd'))
                    {
                        let built = recent.plain_event.get_or_init(|| {
                            event::transform(engine, &self.spec, ts, entry)
                                .ok()
                                .flatten()
                                .map(|e| (Arc::new(e.doc), e.token))
                        });
                        if let Some((doc, token)) = built {
                            self.push_through(pipeline, vars, Arc::clone(doc), token.clone())?;
                            if self.pending.len() >= want {
                                break;
                            }
                            continue;
                        }
                    }
                    event::transform_all(engine, &self.spec, ts, entry)?
                }
            };
            // A transaction's events all go to `pending` together: the next read starts
            // after its entry.
            for ev in evs {
                let invalidate = ev.invalidates.then(|| event::invalidate(&ev));
                self.push_through(pipeline, vars, Arc::new(ev.doc), ev.token)?;
                if let Some(inv) = invalidate {
                    self.push_through(pipeline, vars, Arc::new(inv.doc), inv.token)?;
                    self.invalidated = true;
                    break 'entries;
                }
            }
            if self.pending.len() >= want {
                break;
            }
        }
        if self.pending.is_empty() && !self.invalidated {
            // Everything read so far was filtered out: the position still advances.
            self.advance_to(ResumeToken::high_water_mark(self.next_ts.saturating_sub(1)));
        }
        Ok(true)
    }

    /// Reads ahead, after a full batch went out, so the next getMore finds its events
    /// ready: the client decoding one batch and the server building the next overlap.
    /// Only for streams without stages of their own (whose errors could otherwise be
    /// reported out of order); an error is kept for the next getMore.
    pub fn prefetch(&mut self, engine: &Engine, max_events: usize) {
        if !self.spec.stages.is_empty()
            || self.invalidated
            || self.verify.is_some()
            || self.deferred_error.is_some()
        {
            return;
        }
        let Ok(pipeline) = Pipeline::parse(&[], "") else {
            return;
        };
        let vars = tailstream_query::expr::Variables::default();
        let mut bytes: usize = self.pending.iter().map(|(d, _)| d.as_bytes().len()).sum();
        while self.pending.len() < max_events && bytes < MAX_BATCH_BYTES && !self.invalidated {
            let before = self.pending.len();
            match self.read_more(engine, &pipeline, &vars, max_events) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.deferred_error = Some(e);
                    break;
                }
            }
            bytes += self
                .pending
                .iter()
                .skip(before)
                .map(|(d, _)| d.as_bytes().len())
                .sum::<usize>();
        }
    }

    /// resumeAfter/startAfter an event: the entry at the token's time must produce that
    /// very event in this stream, else the token is not from this stream (280). The
    /// event itself is not returned again; after an invalidating event that was not
    /// itself the invalidate, the invalidate follows at once.
    fn verify_resume_point(
        &mut self,
        engine: &Engine,
        expected: &ResumeToken,
        pipeline: &Pipeline,
        vars: &tailstream_query::expr::Variables,
    ) -> Result<()> {
        let bytes = engine
            .store
            .get(Space::Oplog, &keys::oplog_key(expected.ts))
            .map_err(crate::core::storage_err)?;
        let Some(bytes) = bytes else {
            return Err(token_not_found(expected));
        };
        let entry = bson::RawDocument::from_bytes(&bytes)
            .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?;
        let mut evs = event::transform_all(engine, &self.spec, expected.ts, entry)?.into_iter();
        // In a transaction's entry, the event at the token's index; the ones after it in
        // the same entry come next.
        let Some(ev) = evs.find(|ev| ev.token.same_event(expected)) else {
            return Err(token_not_found(expected));
        };
        self.next_ts = expected.ts + 1;
        for rest in evs {
            self.push_through(pipeline, vars, Arc::new(rest.doc), rest.token)?;
        }
        if ev.invalidates && !expected.from_invalidate {
            let inv = event::invalidate(&ev);
            self.push_through(pipeline, vars, Arc::new(inv.doc), inv.token)?;
            self.invalidated = true;
        }
        Ok(())
    }

    /// Moves the post-batch resume token forward (never back). High-water marks are
    /// placed at the last time read (as mongod's latest oplog time), so after an event
    /// that was the last entry read, the token stays the event's own.
    fn advance_to(&mut self, token: ResumeToken) {
        // Tokens order by cluster time first; only equal times need the full encoding.
        let newer = match token.ts.cmp(&self.pbrt.ts) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => token.key_bytes() > self.pbrt.key_bytes(),
        };
        if newer {
            self.pbrt = token;
        }
    }

    /// Runs an event through the user's stages and queues what comes out.
    fn push_through(
        &mut self,
        pipeline: &Pipeline,
        vars: &tailstream_query::expr::Variables,
        doc: SharedEvent,
        token: ResumeToken,
    ) -> Result<()> {
        if self.spec.stages.is_empty() && doc.as_bytes().len() <= MAX_EVENT_BYTES {
            // No stages: the event itself, as it is (most streams, every event).
            self.pending.push_back((doc, token));
            return Ok(());
        }
        let results = if self.spec.stages.is_empty() {
            vec![doc]
        } else {
            let decoded = doc
                .to_document()
                .map_err(|e| Error::internal(e.to_string()))?;
            let id = decoded.get("_id").cloned();
            let mut out = Vec::new();
            for r in pipeline.run(Box::new(std::iter::once(Ok(decoded))), &NoCollections, vars)? {
                if r.get("_id") != id.as_ref() {
                    return Err(Error::new(
                        codes::CHANGE_STREAM_FATAL_ERROR,
                        "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline. \
                         Modifying the _id field of an event makes it impossible to resume the stream from that point. \
                         Only transformations that retain the unmodified _id field are allowed.",
                    )
                    .with_label("NonResumableChangeStreamError"));
                }
                out.push(Arc::new(
                    RawDocumentBuf::from_document(&r)
                        .map_err(|e| Error::internal(e.to_string()))?,
                ));
            }
            out
        };
        if results.is_empty() && self.pending.is_empty() {
            // Filtered out: the position is still past it.
            self.advance_to(token.clone());
        }
        for r in results {
            let size = r.as_bytes().len();
            if size <= MAX_EVENT_BYTES {
                self.pending.push_back((r, token.clone()));
            } else if self.spec.split_large {
                let decoded = r
                    .to_document()
                    .map_err(|e| Error::internal(e.to_string()))?;
                for (doc, t) in split_event(decoded, &token)? {
                    let raw = RawDocumentBuf::from_document(&doc)
                        .map_err(|e| Error::internal(e.to_string()))?;
                    self.pending.push_back((Arc::new(raw), t));
                }
            } else {
                return Err(Error::new(
                    codes::BSON_OBJECT_TOO_LARGE,
                    format!(
                        "Executor error during getMore :: caused by :: BSONObj size: {size} is invalid. Size must be between 0 and 16793600(16MB). \
                         Use $changeStreamSplitLargeEvent to split large events"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The next oplog entries of this stream's scope with times in `[next_ts, durable]`,
    /// at most `limit` of them read from storage (and [`READ_CHUNK_BYTES`]); an entry
    /// the prefilter rules out on its digest is not read. A stream that keeps up reads
    /// them from the in-memory recent oplog; entries read from storage are made into
    /// events on the spot.
    fn read_entries(&self, engine: &Engine, durable: u64, limit: usize) -> Result<Vec<ReadEntry>> {
        let mut out = Vec::new();
        let ns_full = match &self.spec.scope {
            Scope::Collection(_) => self.spec.scope_ns.as_deref(),
            _ => None,
        };
        let db_prefix = match &self.spec.scope {
            Scope::Database(_) => self.spec.scope_ns.as_deref(),
            _ => None,
        };
        let in_memory = engine.recent.read(self.next_ts, durable, READ_CHUNK, |e| {
            match (&ns_full, &db_prefix) {
                (Some(ns), _) => e.namespaces.iter().any(|n| n == ns),
                (None, Some(prefix)) => e.namespaces.iter().any(|n| n.starts_with(prefix)),
                (None, None) => true,
            }
        });
        if self.memory_only
            && (in_memory.is_none() || in_memory.iter().flatten().any(|e| e.bytes.is_none()))
        {
            return Err(needs_storage());
        }
        if let Some(found) = in_memory {
            // Opened only for an entry whose bytes were too large to keep in memory:
            // opening a RocksDB iterator per getMore cost more than the rest of this
            // function when a hundred streams were woken by each commit.
            let mut large = None;
            for e in found {
                let ts = e.ts;
                if !self.prefilter.is_empty()
                    && !self.prefilter.may_match(&e.digest, self.spec.full_document)
                {
                    out.push(ReadEntry {
                        ts,
                        body: EntryBody::Skipped,
                    });
                } else if e.bytes.is_some() {
                    out.push(ReadEntry {
                        ts,
                        body: EntryBody::Recent(e),
                    });
                } else if let Some(v) = large
                    .get_or_insert_with(|| engine.store.point_reader(Space::Oplog))
                    .get(&keys::oplog_key(ts))
                    .map_err(crate::core::storage_err)?
                {
                    if !push_built(&mut out, engine, &self.spec, ts, v) {
                        break;
                    }
                }
            }
            return Ok(out);
        }
        // Room for the chunk up front: growing a vector of events doubled the bytes moved.
        out.reserve(limit);
        let mut budget = ChunkBudget {
            entries_left: limit,
            bytes_left: READ_CHUNK_BYTES,
        };
        match &ns_full {
            Some(ns) => {
                // The collection's entries in order, from its index of the oplog; its
                // digests rule some out unread.
                let lower = keys::oplog_ns_key(ns, self.next_ts);
                let upper = keys::oplog_ns_key(ns, durable.saturating_add(1));
                let mut entries = engine.store.point_reader(Space::Oplog);
                for item in engine
                    .store
                    .scan(Space::OplogByNs, &lower, Some(&upper), false)
                {
                    let (k, digest) = item.map_err(crate::core::storage_err)?;
                    let ts = u64::from_be_bytes(k[k.len() - 8..].try_into().expect("8-byte time"));
                    if !self.prefilter.is_empty()
                        && !self.prefilter.may_match(&digest, self.spec.full_document)
                    {
                        out.push(ReadEntry {
                            ts,
                            body: EntryBody::Skipped,
                        });
                    } else if let Some(v) = entries
                        .get(&keys::oplog_key(ts))
                        .map_err(crate::core::storage_err)?
                    {
                        if !push_built(&mut out, engine, &self.spec, ts, v) || budget.spend(v) {
                            break;
                        }
                    }
                    if out.len() >= MAX_SCANNED {
                        break;
                    }
                }
            }
            None => {
                let lower = keys::oplog_key(self.next_ts);
                let upper = keys::oplog_key(durable.saturating_add(1));
                for item in engine.store.scan(Space::Oplog, &lower, Some(&upper), false) {
                    let (k, v) = item.map_err(crate::core::storage_err)?;
                    let ts = u64::from_be_bytes(k[..8].try_into().expect("8-byte time"));
                    if !push_built(&mut out, engine, &self.spec, ts, &v) || budget.spend(&v) {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }
}

/// What one read from storage may still load: entries, and bytes of entries.
struct ChunkBudget {
    entries_left: usize,
    bytes_left: usize,
}

impl ChunkBudget {
    /// Counts an entry loaded; whether the read is now full.
    fn spend(&mut self, entry: &[u8]) -> bool {
        self.entries_left = self.entries_left.saturating_sub(1);
        self.bytes_left = self.bytes_left.saturating_sub(entry.len());
        self.entries_left == 0 || self.bytes_left == 0
    }
}

/// Makes an oplog entry read from storage into the stream's event, built from the
/// storage engine's own buffer, and queues it in `out`; false when that failed (the
/// read stops there: the error is reported after the entries before it).
fn push_built(
    out: &mut Vec<ReadEntry>,
    engine: &Engine,
    spec: &StreamSpec,
    ts: u64,
    bytes: &[u8],
) -> bool {
    let body = match raw_entry(ts, bytes)
        .and_then(|entry| event::transform_all(engine, spec, ts, entry))
    {
        Ok(evs) => EntryBody::Built(evs),
        Err(e) => EntryBody::Failed(e),
    };
    let built = matches!(body, EntryBody::Built(_));
    out.push(ReadEntry { ts, body });
    built
}

/// An oplog entry's bytes as a document.
fn raw_entry(ts: u64, bytes: &[u8]) -> Result<&bson::RawDocument> {
    bson::RawDocument::from_bytes(bytes).map_err(|e| {
        Error::internal(format!(
            "corrupt oplog entry at {:?}: {e}",
            keys::u64_to_ts(ts)
        ))
    })
}

/// The largest event returned whole (mongod: BSONObjMaxUserSize).
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits an event into fragments of whole top-level fields, each under the event
/// limit, as `$changeStreamSplitLargeEvent` does: every fragment carries its own resume
/// token (the event's with `fragmentNum`) and `splitEvent: {fragment, of}`.
fn split_event(doc: Document, token: &ResumeToken) -> Result<Vec<(Document, ResumeToken)>> {
    // Room for the fragment's _id and splitEvent fields.
    const OVERHEAD: usize = 4096;
    let mut groups: Vec<Document> = vec![Document::new()];
    let mut size = 0usize;
    for (k, v) in doc.into_iter().filter(|(k, _)| k != "_id") {
        let field = bson::to_vec(&bson::doc! {k.clone(): v.clone()})
            .map(|b| b.len())
            .unwrap_or(0);
        if field + OVERHEAD > MAX_EVENT_BYTES {
            return Err(Error::new(
                codes::BSON_OBJECT_TOO_LARGE,
                format!("$changeStreamSplitLargeEvent cannot split the event: its field '{k}' alone is larger than 16MB"),
            ));
        }
        if size + field + OVERHEAD > MAX_EVENT_BYTES {
            groups.push(Document::new());
            size = 0;
        }
        size += field;
        groups.last_mut().expect("at least one group").insert(k, v);
    }
    let of = groups.len() as i32;
    Ok(groups
        .into_iter()
        .enumerate()
        .map(|(i, fields)| {
            let mut t = token.clone();
            t.fragment = Some(i as i32);
            let mut d = bson::doc! {"_id": t.to_document(), "splitEvent": {"fragment": i as i32 + 1, "of": of}};
            d.extend(fields);
            (d, t)
        })
        .collect())
}

fn token_not_found(t: &ResumeToken) -> Error {
    Error::new(
        codes::CHANGE_STREAM_FATAL_ERROR,
        format!(
            "cannot resume stream; the resume token was not found. {}",
            crate::core::format::doc_to_string(&t.to_document())
        ),
    )
}


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

pub mod bucket;
mod bucket_read;
pub mod consumer_group;
pub mod diff;
pub(crate) mod event;
pub mod prefilter;
pub mod token;

use crate::catalog::namespace::Namespace;
use crate::core::keys;
use crate::core::time::ClusterTime;
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
    ts: ClusterTime,
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
    /// A bucket of a parallel change stream: only its share of the events.
    pub bucket: Option<bucket::Bucket>,
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
    next_ts: ClusterTime,
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
    /// Resuming from a fragment of a split event: how many of that event's fragments
    /// were returned before (they are split again and passed over).
    skip_fragments: Option<usize>,
    /// Set during a memory-only read (see [`ChangeStream::next_batch`]).
    memory_only: bool,
    /// Keeps the watched namespaces' entries whole in the recent oplog while open.
    watch: recent::WatchGuard,
    /// The oplog entries and bytes it read.
    reads: OplogReads,
    /// A bucket of a consumer group: the group changed since its consumer joined (it
    /// should join again), as of the latest getMore.
    rejoin: bool,
    /// A cluster-wide bucket whose `nsRegex` names one collection: that collection
    /// (`bucket::Bucket::literal_namespace`, worked out once at the open).
    bucket_ns: Option<String>,
}

/// What a stream read of the oplog: in all (`/metrics`, the status page), and since the
/// last getMore reported it. A read ahead (`prefetch`) runs outside any operation; the
/// getMore that returns its events reports it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OplogReads {
    total_entries: u64,
    total_bytes: u64,
    unreported_entries: u64,
    unreported_bytes: u64,
}

impl OplogReads {
    fn add(&mut self, entries: u64, bytes: u64) {
        self.total_entries += entries;
        self.total_bytes += bytes;
        self.unreported_entries += entries;
        self.unreported_bytes += bytes;
    }

    /// Hands what was read since the last report to the running operation's figures,
    /// with mongod's plan of a change stream's getMore (a scan of the oplog).
    fn report(&mut self) {
        let (entries, bytes) = (self.unreported_entries, self.unreported_bytes);
        tailstream_query::script::Operation::count_current(|s| {
            s.note_plan(|| "COLLSCAN".to_string());
            s.add_oplog_read(entries, bytes);
        });
        self.unreported_entries = 0;
        self.unreported_bytes = 0;
    }
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
        let bool_opt = || tailstream_query::args::bool_value(&format!("$changeStream.{k}"), v);
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
    // A bucket of a parallel stream, read as an ordinary stream (see `bucket`).
    let mut one_bucket = None;
    if let Some(v) = stages.first().and_then(|s| s.get(bucket::STAGE)) {
        if stages[0].len() != 1 {
            return Err(Error::new(
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            ));
        }
        one_bucket = Some(bucket::Bucket::from_stage(v)?);
        stages.remove(0);
    }
    if stages.iter().any(|s| s.contains_key(bucket::STAGE)) {
        return Err(Error::new(
            40602,
            format!(
                "{} is only valid as the first stage after $changeStream",
                bucket::STAGE
            ),
        ));
    }
    let mut split_large = false;
    if let Some(pos) = stages
        .iter()
        .position(|s| s.contains_key("$changeStreamSplitLargeEvent"))
    {
        if !matches!(stages[pos].get("$changeStreamSplitLargeEvent"), Some(Bson::Document(d)) if d.is_empty())
        {
            return Err(Error::new(
                7182800,
                "$changeStreamSplitLargeEvent spec should be an empty object",
            ));
        }
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
            bucket: one_bucket,
        },
        start,
    ))
}

/// At most one start option (`resumeAfter`, `startAfter`, `startAtOperationTime`).
fn check_one_start(start: &Document) -> Result<()> {
    if start.len() <= 1 {
        return Ok(());
    }
    if start.contains_key("resumeAfter") && start.contains_key("startAfter") {
        return Err(Error::new(
            50865,
            "Do not specify both 'startAfter' and 'resumeAfter' in a $changeStream stage.",
        ));
    }
    Err(Error::new(
        40674,
        format!(
            "Only one type of resume option is allowed, but multiple were found: {}",
            crate::core::format::doc_to_string(start)
        ),
    ))
}

fn enum_error(k: &str, v: &Bson) -> Error {
    match v {
        Bson::String(s) => Error::bad_value(format!(
            "Enumeration value '{s}' for field '$changeStream.{k}' is not a valid value."
        )),
        other => tailstream_query::args::wrong_type(&format!("$changeStream.{k}"), other, "string"),
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
        check_one_start(&start)?;
        self.open_parsed(db, spec, &start, batch_size, lsid)
    }

    /// Opens a parallel change stream (see [`bucket`]): `split.count` buckets of the
    /// deployment's stream, spread by namespace or document key, only the namespaces
    /// `split.ns_regex` matches; `opts` are `$changeStream`'s (fullDocument, the start)
    /// and `stages` the pipeline after it, in every bucket. Every bucket starts at the
    /// same point (without a start option: after the newest committed write), unless
    /// `split.per_bucket` gives each its own (a token per bucket, in bucket order: what
    /// each bucket returned last, so none repeats an event). Returns one cursor per
    /// bucket, with no events yet.
    pub fn open_parallel_change_stream(
        &self,
        opts: &Document,
        stages: &[Document],
        split: bucket::Split,
        lsid: Option<Bson>,
    ) -> Result<Vec<CursorBatch>> {
        let bucket::Split {
            count,
            by,
            ns_regex,
            per_bucket,
        } = split;
        assert!(
            (1..=bucket::MAX_BUCKETS).contains(&count),
            "a bucket count the command checked"
        );
        assert!(
            per_bucket
                .as_ref()
                .is_none_or(|(_, t)| t.len() == count as usize),
            "a token per bucket, as the command checked"
        );
        let mut opts = opts.clone();
        opts.insert("allChangesForCluster", true);
        let starts = ["resumeAfter", "startAfter", "startAtOperationTime"];
        if per_bucket.is_none() && !starts.iter().any(|k| opts.contains_key(*k)) {
            let after_newest: bson::Timestamp = self.last_commit_time().next().into();
            opts.insert("startAtOperationTime", after_newest);
        }
        let (spec, shared_start) = parse_spec("admin", None, &opts, stages)?;
        if spec.bucket.is_some() {
            return Err(Error::bad_value(format!(
                "a parallel stream's pipeline may not hold {}: each bucket is one",
                bucket::STAGE
            )));
        }
        let group = bucket::Group::new(count);
        let mut cursors = Vec::with_capacity(count as usize);
        for index in 0..count {
            let mut start = shared_start.clone();
            if let Some((key, tokens)) = &per_bucket {
                start.insert(*key, tokens[index as usize].clone());
            }
            let one = bucket::Bucket {
                count,
                index,
                by,
                ns_regex: ns_regex.clone(),
                group: group.clone(),
                lease: None,
            };
            match self.open_bucket(&spec, one, &start, lsid.clone()) {
                Ok(c) => cursors.push(c),
                Err(e) => {
                    for c in &cursors {
                        self.cursors.remove(c.cursor_id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(cursors)
    }

    /// One bucket of a parallel stream (`spec` without a bucket yet) from `start`, its
    /// cursor registered with no events yet.
    pub(crate) fn open_bucket(
        &self,
        spec: &StreamSpec,
        one: bucket::Bucket,
        start: &Document,
        lsid: Option<Bson>,
    ) -> Result<CursorBatch> {
        assert!(spec.bucket.is_none(), "one bucket per stream");
        let mut spec = spec.clone();
        spec.bucket = Some(one);
        check_one_start(start)?;
        self.open_parsed("admin", spec, start, Some(0), lsid)
    }

    /// A parsed stream from its start (`resumeAfter`, `startAfter`,
    /// `startAtOperationTime` or none), its first batch read and its cursor registered.
    fn open_parsed(
        &self,
        db: &str,
        spec: StreamSpec,
        start: &Document,
        batch_size: Option<i64>,
        lsid: Option<Bson>,
    ) -> Result<CursorBatch> {
        let trim_ts = self.oplog_trim_ts();
        let lost = |t: ClusterTime| {
            Error::new(
                codes::CHANGE_STREAM_HISTORY_LOST,
                format!(
                    "Resume of change stream was not possible, as the resume point may no longer be in the oplog. (resume point {t}, oldest oplog entry {trim_ts})",
                ),
            )
        };
        let (next_ts, verify, pbrt) = match start.iter().next() {
            None => {
                // As mongod: from just after the newest committed write.
                let t = self.last_commit_time().next();
                (t, None, ResumeToken::high_water_mark(t))
            }
            Some((k, v)) if k == "startAtOperationTime" => {
                let t = tailstream_query::args::timestamp_value(
                    "$changeStream.startAtOperationTime",
                    v,
                )?;
                let t = ClusterTime::from(t);
                if t < trim_ts {
                    return Err(lost(t));
                }
                (t, None, ResumeToken::high_water_mark(t))
            }
            Some((k, v)) => {
                let token = ResumeToken::parse(v)?;
                if let (Some(b), Bson::Document(d)) = (&spec.bucket, v) {
                    b.check_token(d)?;
                }
                if token.fragment.is_some() && !spec.split_large {
                    return Err(Error::new(
                        codes::CHANGE_STREAM_FATAL_ERROR,
                        "To resume from a split event, the $changeStream pipeline must include a $changeStreamSplitLargeEvent stage",
                    ));
                }
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
        let bucket_ns = match (&spec.scope, &spec.bucket) {
            (Scope::Cluster, Some(b)) => b.literal_namespace(),
            _ => None,
        };
        let watch = self.recent.watch(match (&spec.scope, &bucket_ns) {
            (Scope::Collection(ns), _) => crate::core::bus::namespace_bit(&ns.full()),
            // A bucket of one collection hears of that collection's commits only.
            (_, Some(ns)) => crate::core::bus::namespace_bit(ns),
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
            skip_fragments: None,
            memory_only: false,
            reads: OplogReads::default(),
            rejoin: false,
            bucket_ns,
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
        stream.record_position();
        let pbrt = stream.post_batch_resume_token();
        let mut cursor = Cursor::new(ns.clone(), Source::Events(Box::new(stream)));
        cursor.tailable = true;
        cursor.await_data = true;
        cursor.lsid = lsid;
        cursor.returned.batch(&[], &raw_docs);
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
        self.post_batch_resume_token()
    }

    fn bucket_fields(&self) -> Option<Document> {
        ChangeStream::bucket_fields(self)
    }

    fn interest(&self) -> u64 {
        self.watch.mask()
    }

    fn caught_up(&self, engine: &Engine) -> bool {
        let leased = self.spec.bucket.as_ref().and_then(|b| b.lease.as_ref());
        // A group's bucket whose lease is lost looks at once (and fails, fenced).
        leased.is_none_or(|l| l.hold().is_ok())
            && self.pending.is_empty()
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

    fn position(&self) -> Option<ClusterTime> {
        Some(self.next_ts)
    }

    fn oplog_read(&self) -> (u64, u64) {
        (self.reads.total_entries, self.reads.total_bytes)
    }
}

/// mongod labels a change stream's getMore error `ResumableChangeStreamError` when a
/// driver may resume after it.
pub(crate) fn label_resumable(e: Error) -> Error {
    if RESUMABLE_CODES.contains(&e.code) && e.labels.is_empty() {
        e.with_label("ResumableChangeStreamError")
    } else {
        e
    }
}

impl ChangeStream {
    /// A bucket's also says whose it is (`_bucket`: see `bucket::Bucket::identity`).
    pub fn post_batch_resume_token(&self) -> Document {
        let mut t = self.pbrt.to_document();
        if let Some(b) = &self.spec.bucket {
            t.insert(bucket::BUCKET_FIELD, b.identity());
        }
        t
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
        self.hold_lease()?;
        self.memory_only = memory_only;
        let r = self.next_batch_inner(engine, want);
        self.memory_only = false;
        self.reads.report();
        self.record_position();
        r
    }

    /// A bucket's position, told to its parallel stream (see `bucket::Group`).
    fn record_position(&self) {
        if let Some(b) = &self.spec.bucket {
            b.group.record(b.index, &self.pbrt);
        }
    }

    /// A bucket's cursor fields: its parallel stream's combined resume point and, in
    /// a consumer group, whether its consumer should join again (none for other
    /// streams).
    pub fn bucket_fields(&self) -> Option<Document> {
        let b = self.spec.bucket.as_ref()?;
        let mut out = Document::new();
        if let Some(t) = b.group.combined() {
            let mut t = t.to_document();
            t.insert(bucket::SPLIT_FIELD, b.split_identity());
            out.insert("combinedResumeToken", t);
        }
        if b.lease.is_some() {
            out.insert("rejoin", self.rejoin);
        }
        Some(out)
    }

    /// A bucket of a consumer group: its consumer must still hold it (fenced
    /// otherwise); renews the consumer's lease.
    fn hold_lease(&mut self) -> Result<()> {
        if let Some(lease) = self.spec.bucket.as_ref().and_then(|b| b.lease.as_ref()) {
            self.rejoin = lease.hold()?;
        }
        Ok(())
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
                            self.advance_to(ResumeToken::high_water_mark(self.next_ts.prev()));
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
        self.check_not_trimmed(engine)?;
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
        let mut loaded_bytes = 0u64;
        let entries = self.read_entries(engine, durable, limit, &mut loaded_bytes)?;
        self.reads.add(entries.len() as u64, loaded_bytes);
        // Again after the read: a trim that committed during it deleted the collection's
        // index of the entries it removed, so the read may have passed over some of
        // them unawares. The trim point only moves forward: still at or below the
        // position, it removed nothing the read covered.
        self.check_not_trimmed(engine)?;
        if entries.is_empty() {
            self.next_ts = durable.next();
            return Ok(false);
        }
        let shared_events = self.spec.plain() && matches!(self.spec.scope, Scope::Collection(_));
        'entries: for ReadEntry { ts, body } in entries {
            // A stream's position only moves forward: an entry before it would be an
            // event returned twice, or read past the trim point's check.
            assert!(
                ts >= self.next_ts,
                "a change stream read the entry at {ts} behind its position {}",
                self.next_ts
            );
            self.next_ts = ts.next();
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
                        let built = recent.memo.get_or_init(|| {
                            event::transform(engine, &self.spec, ts, entry)
                                .ok()
                                .flatten()
                                .map(|e| Arc::new((Arc::new(e.doc), e.token)) as recent::Memo)
                        });
                        let built = built
                            .as_ref()
                            .and_then(|m| m.downcast_ref::<(SharedEvent, ResumeToken)>());
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
            self.advance_to(ResumeToken::high_water_mark(self.next_ts.prev()));
        }
        Ok(true)
    }

    /// ChangeStreamHistoryLost when the oplog trim passed the stream's position: the
    /// stream fails rather than skip what was trimmed.
    fn check_not_trimmed(&self, engine: &Engine) -> Result<()> {
        if self.next_ts < engine.oplog_trim_ts() {
            return Err(Error::new(
                codes::CHANGE_STREAM_HISTORY_LOST,
                "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
            ));
        }
        Ok(())
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
        self.reads.add(1, bytes.len() as u64);
        let entry = bson::RawDocument::from_bytes(&bytes)
            .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?;
        let mut evs = event::transform_all(engine, &self.spec, expected.ts, entry)?.into_iter();
        // In a transaction's entry, the event at the token's index; the ones after it in
        // the same entry come next.
        let Some(ev) = evs.find(|ev| ev.token.same_event(expected)) else {
            return Err(token_not_found(expected));
        };
        self.next_ts = expected.ts.next();
        if let Some(fragment) = expected.fragment {
            // The fragments after the token's: the event is split again as before.
            self.skip_fragments = Some(fragment as usize + 1);
            let pushed =
                self.push_through(pipeline, vars, Arc::new(ev.doc.clone()), ev.token.clone());
            self.skip_fragments = None;
            pushed?;
        }
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
        if token.cmp_position(&self.pbrt).is_gt() {
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
        if self.spec.bucket.as_ref().is_some_and(|b| !b.admits(&doc)) {
            // Another bucket's: the position is still past it.
            if self.pending.is_empty() {
                self.advance_to(token);
            }
            return Ok(());
        }
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
            if let (Some(_), true) = (self.skip_fragments, size <= MAX_EVENT_BYTES) {
                return Err(Error::new(
                    codes::CHANGE_STREAM_FATAL_ERROR,
                    "Attempted to resume from a split event fragment, but the event in the resumed stream was not large enough to be split",
                ));
            }
            if size <= MAX_EVENT_BYTES {
                self.pending.push_back((r, token.clone()));
            } else if self.spec.split_large {
                let decoded = r
                    .to_document()
                    .map_err(|e| Error::internal(e.to_string()))?;
                let fragments = split_event(decoded, &token)?;
                let skip = self.skip_fragments.take().unwrap_or(0);
                if skip > fragments.len() {
                    return Err(Error::new(
                        codes::CHANGE_STREAM_FATAL_ERROR,
                        "Attempted to resume from a split event, but the resumed stream produced a different split. \
                         Ensure that the pipeline used to resume is the same as the original",
                    ));
                }
                for (doc, t) in fragments.into_iter().skip(skip) {
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
    ///
    /// `loaded_bytes` grows by the bytes of the entries read (not of those ruled out).
    fn read_entries(
        &self,
        engine: &Engine,
        durable: ClusterTime,
        limit: usize,
        loaded_bytes: &mut u64,
    ) -> Result<Vec<ReadEntry>> {
        let mut out = Vec::new();
        // A bucket of one collection reads that collection's index of the oplog.
        let ns_full = match &self.spec.scope {
            Scope::Collection(_) => self.spec.scope_ns.as_deref(),
            _ => self.bucket_ns.as_deref(),
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
                if self.rules_out(&e.digest) {
                    out.push(ReadEntry {
                        ts,
                        body: EntryBody::Skipped,
                    });
                } else if let Some(b) = e.bytes.as_deref() {
                    *loaded_bytes += b.len() as u64;
                    let other_buckets = self.spec.bucket.as_ref().is_some_and(|bucket| {
                        bson::RawDocument::from_bytes(b).is_ok_and(|r| !bucket.may_keep_entry(r))
                    });
                    let body = if other_buckets {
                        EntryBody::Skipped
                    } else {
                        EntryBody::Recent(e)
                    };
                    out.push(ReadEntry { ts, body });
                } else if let Some(v) = large
                    .get_or_insert_with(|| engine.store.point_reader(Space::Oplog))
                    .get(&keys::oplog_key(ts))
                    .map_err(crate::core::storage_err)?
                {
                    *loaded_bytes += v.len() as u64;
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
        // A bucket reads the index of the namespaces it may have events of.
        let share = match (&self.spec.scope, &self.spec.bucket, &ns_full) {
            (Scope::Cluster, Some(b), None) => bucket_read::bucket_namespaces(engine, b)?,
            _ => None,
        };
        if let Some(namespaces) = share {
            let index =
                bucket_read::merged_index(engine, &namespaces, self.next_ts, durable, limit)?;
            let mut reads = IndexedReads::new(&mut out, loaded_bytes, &mut budget);
            for (ts, digest) in index {
                if reads.add(self, engine, ts, &digest)? {
                    break;
                }
            }
            reads.finish(self, engine)?;
            return Ok(out);
        }
        match &ns_full {
            Some(ns) => {
                // The collection's entries in order, from its index of the oplog; its
                // digests rule some out unread.
                let lower = keys::oplog_ns_key(ns, self.next_ts);
                let upper = keys::oplog_ns_key(ns, durable.next());
                let mut reads = IndexedReads::new(&mut out, loaded_bytes, &mut budget);
                for item in engine
                    .store
                    .scan(Space::OplogByNs, &lower, Some(&upper), false)
                {
                    let (k, digest) = item.map_err(crate::core::storage_err)?;
                    if reads.add(self, engine, keys::oplog_ns_key_time(&k), &digest)?
                        || reads.scanned() >= MAX_SCANNED
                    {
                        break;
                    }
                }
                reads.finish(self, engine)?;
            }
            None => {
                let lower = keys::oplog_key(self.next_ts);
                let upper = keys::oplog_key(durable.next());
                for item in engine.store.scan(Space::Oplog, &lower, Some(&upper), false) {
                    let (k, v) = item.map_err(crate::core::storage_err)?;
                    let ts = keys::oplog_key_time(&k);
                    *loaded_bytes += v.len() as u64;
                    if !push_built(&mut out, engine, &self.spec, ts, &v) || budget.spend(&v) {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether an index entry's digest rules its entry out unread: another bucket's
    /// write, or one the pipeline's prefilter cannot match.
    fn rules_out(&self, digest: &[u8]) -> bool {
        self.spec
            .bucket
            .as_ref()
            .is_some_and(|b| !b.may_keep_digest(digest))
            || (!self.prefilter.is_empty()
                && !self.prefilter.may_match(digest, self.spec.full_document))
    }
}

/// How many entries one [`IndexedReads`] fetch asks storage for: enough that a MultiGet
/// reads each block once for several of them (64 KiB oplog blocks hold about 60 1 KB
/// entries), few enough that a read stopped by its budget fetched little for nothing.
const FETCH_BATCH: usize = 64;

/// Entries named by an index of the oplog (a collection's, or a bucket's merged
/// namespaces'), fetched in batches of [`FETCH_BATCH`] through one MultiGet each and
/// queued in time order with the entries their digests ruled out.
struct IndexedReads<'o> {
    out: &'o mut Vec<ReadEntry>,
    loaded_bytes: &'o mut u64,
    budget: &'o mut ChunkBudget,
    /// Index entries not queued yet, in time order: whether each is to be fetched.
    waiting: Vec<(ClusterTime, bool)>,
    fetches: usize,
    scanned: usize,
    full: bool,
}

impl<'o> IndexedReads<'o> {
    fn new(
        out: &'o mut Vec<ReadEntry>,
        loaded_bytes: &'o mut u64,
        budget: &'o mut ChunkBudget,
    ) -> Self {
        IndexedReads {
            out,
            loaded_bytes,
            budget,
            waiting: Vec::with_capacity(FETCH_BATCH * 2),
            fetches: 0,
            scanned: 0,
            full: false,
        }
    }

    /// Index entries taken so far.
    fn scanned(&self) -> usize {
        self.scanned
    }

    /// Takes the index entry of `ts`; whether the read is full (stop adding).
    fn add(
        &mut self,
        stream: &ChangeStream,
        engine: &Engine,
        ts: ClusterTime,
        digest: &[u8],
    ) -> Result<bool> {
        debug_assert!(!self.full, "no entry after the read filled up");
        self.scanned += 1;
        let fetch = !stream.rules_out(digest);
        self.waiting.push((ts, fetch));
        self.fetches += usize::from(fetch);
        if self.fetches == FETCH_BATCH {
            self.flush(stream, engine)?;
        }
        Ok(self.full)
    }

    /// Fetches and queues what is waiting.
    fn finish(mut self, stream: &ChangeStream, engine: &Engine) -> Result<()> {
        if !self.full {
            self.flush(stream, engine)?;
        }
        Ok(())
    }

    fn flush(&mut self, stream: &ChangeStream, engine: &Engine) -> Result<()> {
        let keys: Vec<[u8; 8]> = self
            .waiting
            .iter()
            .filter(|(_, fetch)| *fetch)
            .map(|(ts, _)| keys::oplog_key(*ts))
            .collect();
        let values = engine
            .store
            .get_sorted(Space::Oplog, &keys, stream.spec.bucket.is_some())
            .map_err(crate::core::storage_err)?;
        let mut values = values.into_iter();
        for (ts, fetch) in self.waiting.drain(..) {
            if !fetch {
                self.out.push(ReadEntry {
                    ts,
                    body: EntryBody::Skipped,
                });
                continue;
            }
            // An entry the index names and storage no longer has was reclaimed: skip it
            // as the point reader did.
            let Some(v) = values.next().flatten() else {
                continue;
            };
            *self.loaded_bytes += v.len() as u64;
            if !push_built(self.out, engine, &stream.spec, ts, &v) || self.budget.spend(&v) {
                // Entries after this one are read again by the next read.
                self.full = true;
                break;
            }
        }
        // (`drain` removed the entries a full read left unqueued too.)
        self.fetches = 0;
        Ok(())
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
/// storage engine's own buffer, and queues it in `out` (another bucket's write is
/// queued as skipped, never made: `bucket::Bucket::may_keep_entry`); false when that
/// failed (the read stops there: the error is reported after the entries before it).
fn push_built(
    out: &mut Vec<ReadEntry>,
    engine: &Engine,
    spec: &StreamSpec,
    ts: ClusterTime,
    bytes: &[u8],
) -> bool {
    let body = match raw_entry(ts, bytes) {
        // Another bucket's write: not made into an event at all.
        Ok(entry)
            if spec
                .bucket
                .as_ref()
                .is_some_and(|b| !b.may_keep_entry(entry)) =>
        {
            EntryBody::Skipped
        }
        Ok(entry) => match event::transform_all(engine, spec, ts, entry) {
            Ok(evs) => EntryBody::Built(evs),
            Err(e) => EntryBody::Failed(e),
        },
        Err(e) => EntryBody::Failed(e),
    };
    let built = !matches!(body, EntryBody::Failed(_));
    out.push(ReadEntry { ts, body });
    built
}

/// An oplog entry's bytes as a document.
fn raw_entry(ts: ClusterTime, bytes: &[u8]) -> Result<&bson::RawDocument> {
    bson::RawDocument::from_bytes(bytes)
        .map_err(|e| Error::internal(format!("corrupt oplog entry at {ts}: {e}")))
}

/// The largest event returned whole (mongod: BSONObjMaxUserSize).
const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits an event into fragments of whole top-level fields, each under the event
/// limit, as `$changeStreamSplitLargeEvent` does: fields go smallest first (then by
/// name), each fragment taking as many as fit, so the first fragment carries most of the
/// event's context; every fragment has its own resume token (the event's with
/// `fragmentNum`, from 0) and `splitEvent: {fragment, of}` (from 1).
fn split_event(doc: Document, token: &ResumeToken) -> Result<Vec<(Document, ResumeToken)>> {
    let mut fields: Vec<(usize, String, Bson)> = doc
        .into_iter()
        .filter(|(k, _)| k != "_id")
        .map(|(k, v)| (bson_field_size(&k, &v), k, v))
        .collect();
    if fields.is_empty() {
        return Err(Error::new(
            7182502,
            "Cannot split an empty event or an event containing solely '_id' field",
        ));
    }
    fields.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let header = |i: usize| {
        let mut t = token.clone();
        t.fragment = Some(i as i32);
        let d =
            bson::doc! {"_id": t.to_document(), "splitEvent": {"fragment": i as i32 + 1, "of": 0}};
        (d, t)
    };
    // Room for the fragment's resume token in the reply's postBatchResumeToken.
    let max_fragment = MAX_EVENT_BYTES - bson_size(&header(0).1.to_document());
    let mut fragments: Vec<(Document, ResumeToken)> = Vec::new();
    let mut fields = fields.into_iter().peekable();
    while let Some((first_size, k, v)) = fields.next() {
        let (mut d, t) = header(fragments.len());
        let mut size = bson_size(&d) + first_size;
        d.insert(k, v);
        while let Some((next_size, _, _)) = fields.peek() {
            if size + next_size > max_fragment {
                break;
            }
            let (next_size, k, v) = fields.next().expect("peeked");
            size += next_size;
            d.insert(k, v);
        }
        if size > max_fragment {
            return Err(Error::new(
                7182500,
                format!(
                    "Splitting change event failed: fragment size {size} is greater than maximum allowed fragment size {max_fragment}"
                ),
            ));
        }
        fragments.push((d, t));
    }
    let of = fragments.len() as i32;
    for (d, _) in &mut fragments {
        if let Some(Bson::Document(split)) = d.get_mut("splitEvent") {
            split.insert("of", of);
        }
    }
    Ok(fragments)
}

/// The bytes a field takes inside a document: type byte, name and its NUL, value.
fn bson_field_size(key: &str, value: &Bson) -> usize {
    bson_size(&bson::doc! {key: value.clone()}) - EMPTY_DOCUMENT_BYTES
}

fn bson_size(d: &Document) -> usize {
    bson::to_vec(d).map(|b| b.len()).unwrap_or(usize::MAX / 2)
}

/// An empty BSON document: its length and the terminating NUL.
const EMPTY_DOCUMENT_BYTES: usize = 5;

fn token_not_found(t: &ResumeToken) -> Error {
    Error::new(
        codes::CHANGE_STREAM_FATAL_ERROR,
        format!(
            "cannot resume stream; the resume token was not found. {}",
            crate::core::format::doc_to_string(&t.to_document())
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use crate::write::{DeleteOp, UpdateOp};
    use bson::doc;

    fn spec(db: &str, coll: Option<&str>, opts: Document) -> Result<StreamSpec> {
        parse_spec(db, coll, &opts, &[]).map(|(s, _)| s)
    }

    fn spec_error(db: &str, coll: Option<&str>, opts: Document, stages: &[Document]) -> Error {
        parse_spec(db, coll, &opts, stages).expect_err("refused")
    }

    /// Opens a stream with a start option (or none) and no stages.
    fn open(e: &Engine, db: &str, coll: Option<&str>, opts: Document) -> Result<CursorBatch> {
        e.open_change_stream(db, coll, &opts, &[], None, None, None)
    }

    fn decoded(batch: &CursorBatch) -> Vec<Document> {
        batch
            .raw_docs
            .iter()
            .map(|d| d.to_document().unwrap())
            .collect()
    }

    /// The events committed since the stream's last batch (made durable first).
    fn next(e: &TestEngine, stream: &CursorBatch) -> Vec<Document> {
        e.sync();
        decoded(&e.get_more(stream.cursor_id, &stream.ns, None).unwrap())
    }

    fn op_types(events: &[Document]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e.get_str("operationType").unwrap())
            .collect()
    }

    fn ids(events: &[Document]) -> Vec<Bson> {
        events
            .iter()
            .map(|e| {
                e.get_document("documentKey")
                    .unwrap()
                    .get("_id")
                    .unwrap()
                    .clone()
            })
            .collect()
    }

    fn insert(e: &Engine, ns: &Namespace, id: i32) -> bson::Timestamp {
        let out = e
            .insert_documents(ns, vec![doc! {"_id": id}], true)
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        out.committed.unwrap().last_ts.unwrap().into()
    }

    fn token_of(event: &Document) -> ResumeToken {
        ResumeToken::parse(event.get("_id").unwrap()).unwrap()
    }

    #[test]
    fn options_are_read_into_the_spec() {
        let s = spec("db", Some("c"), doc! {}).unwrap();
        assert_eq!(s.scope, Scope::Collection(Namespace::new("db", "c")));
        assert!(s.plain());
        assert_eq!(s.scope_ns.as_deref(), Some("db.c"));
        let s = spec(
            "db",
            None,
            doc! {
                "fullDocument": "updateLookup",
                "fullDocumentBeforeChange": "required",
                "showExpandedEvents": true,
                "showSystemEvents": true,
                "showRawUpdateDescription": true,
            },
        )
        .unwrap();
        assert_eq!(s.scope, Scope::Database("db".into()));
        assert_eq!(s.full_document, FullDocument::UpdateLookup);
        assert_eq!(s.before_change, BeforeChange::Required);
        assert!(s.show_expanded && s.show_system && s.show_raw_update);
        assert!(!s.plain());
        assert_eq!(s.scope_ns.as_deref(), Some("db."));
        for (value, expected) in [
            ("default", FullDocument::Default),
            ("whenAvailable", FullDocument::WhenAvailable),
            ("required", FullDocument::Required),
        ] {
            let s = spec("db", Some("c"), doc! {"fullDocument": value}).unwrap();
            assert_eq!(s.full_document, expected, "{value}");
        }
        let s = spec("admin", None, doc! {"allChangesForCluster": true}).unwrap();
        assert_eq!(s.scope, Scope::Cluster);
        assert_eq!(s.scope_ns, None);
        // The start options are handed back for the caller to check.
        let (_, start) = parse_spec(
            "db",
            Some("c"),
            &doc! {"startAtOperationTime": bson::Timestamp { time: 1, increment: 2 }},
            &[],
        )
        .unwrap();
        assert_eq!(
            start.keys().collect::<Vec<_>>(),
            vec!["startAtOperationTime"]
        );
    }

    /// The codes mongod's IDL parser and change-stream checks give.
    #[test]
    fn bad_options_get_mongods_errors() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! {"fullDocument": "sometimes"},
                codes::BAD_VALUE,
                "Enumeration value 'sometimes' for field '$changeStream.fullDocument' is not a valid value.",
            ),
            (
                doc! {"fullDocument": 1},
                codes::TYPE_MISMATCH,
                "BSON field '$changeStream.fullDocument' is the wrong type 'int', expected type 'string'",
            ),
            (
                doc! {"fullDocumentBeforeChange": "updateLookup"},
                codes::BAD_VALUE,
                "Enumeration value 'updateLookup' for field '$changeStream.fullDocumentBeforeChange' is not a valid value.",
            ),
            (
                doc! {"showExpandedEvents": "yes"},
                codes::TYPE_MISMATCH,
                "BSON field '$changeStream.showExpandedEvents' is the wrong type 'string', expected type 'bool'",
            ),
            (
                doc! {"allowToRunOnSystemNS": 1},
                codes::TYPE_MISMATCH,
                "BSON field '$changeStream.allowToRunOnSystemNS' is the wrong type 'int', expected type 'bool'",
            ),
            (
                doc! {"resumeAt": {}},
                codes::UNRECOGNIZED_COMMAND_FIELD,
                "BSON field '$changeStream.resumeAt' is an unknown field.",
            ),
        ];
        for (opts, code, message) in cases {
            let e = spec_error("db", Some("c"), opts.clone(), &[]);
            assert_eq!((e.code, e.message.as_str()), (code, message), "{opts}");
        }
    }

    #[test]
    fn internal_namespaces_and_misplaced_cluster_streams_are_refused() {
        for (db, coll) in [
            ("admin", Some("c")),
            ("config", Some("c")),
            ("local", Some("oplog.rs")),
            ("admin", None),
            ("local", None),
            ("db", Some("system.views")),
            ("db", Some("system.js")),
        ] {
            let e = spec_error(db, coll, doc! {}, &[]);
            assert_eq!(e.code, codes::INVALID_NAMESPACE, "{db} {coll:?}");
            assert!(e
                .message
                .starts_with("$changeStream may not be opened on the internal"));
        }
        // Where a cluster stream may be opened is checked first (also on admin).
        for (db, coll, found) in [
            ("db", None, "db.$cmd.aggregate"),
            ("db", Some("c"), "db.c"),
            ("admin", Some("c"), "admin.c"),
            ("local", None, "local.$cmd.aggregate"),
        ] {
            let e = spec_error(db, coll, doc! {"allChangesForCluster": true}, &[]);
            assert_eq!(e.code, codes::INVALID_OPTIONS, "{db} {coll:?}");
            assert_eq!(
                e.message,
                format!("A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' database, and with no collection name; found {found}")
            );
        }
        // allChangesForCluster: false is the database stream it would be without it.
        let s = spec("db", None, doc! {"allChangesForCluster": false}).unwrap();
        assert_eq!(s.scope, Scope::Database("db".into()));
    }

    #[test]
    fn only_event_by_event_stages_may_follow() {
        let ok = parse_spec(
            "db",
            Some("c"),
            &doc! {},
            &[
                doc! {"$match": {"operationType": "insert"}},
                doc! {"$project": {"fullDocument": 1}},
                doc! {"$changeStreamSplitLargeEvent": {}},
            ],
        )
        .unwrap()
        .0;
        assert!(ok.split_large);
        assert_eq!(ok.stages.len(), 2, "the split stage is the stream's own");
        let cases = [
            (
                vec![doc! {"$group": {"_id": null}}],
                codes::ILLEGAL_OPERATION,
            ),
            (vec![doc! {"$sort": {"a": 1}}], codes::ILLEGAL_OPERATION),
            (vec![doc! {"$changeStream": {}}], 40602),
            (
                vec![
                    doc! {"$changeStreamSplitLargeEvent": {}},
                    doc! {"$match": {}},
                ],
                7182802,
            ),
        ];
        for (stages, code) in cases {
            let e = spec_error("db", Some("c"), doc! {}, &stages);
            assert_eq!(e.code, code, "{stages:?}");
        }
        // An unknown stage is unknown before it is out of place.
        let e = spec_error("db", Some("c"), doc! {}, &[doc! {"$nosuchstage": {}}]);
        assert_eq!(e.code, 40324);
        assert_eq!(
            spec_error("db", Some("c"), doc! {}, &[doc! {"$group": {"_id": null}}]).message,
            "$group is not permitted in a $changeStream pipeline"
        );
    }

    #[test]
    fn start_options_that_conflict_or_do_not_parse_are_refused() {
        let e = TestEngine::open();
        let ts = insert(&e, &Namespace::new("db", "c"), 1);
        let token = ResumeToken::high_water_mark(ClusterTime::from(ts)).to_document();
        let cases: Vec<(Document, i32)> = vec![
            (
                doc! {"resumeAfter": token.clone(), "startAfter": token.clone()},
                50865,
            ),
            (
                doc! {"resumeAfter": token.clone(), "startAtOperationTime": ts},
                40674,
            ),
            (doc! {"startAtOperationTime": 5}, codes::TYPE_MISMATCH),
            (
                doc! {"resumeAfter": {"_data": "zz"}},
                codes::INVALID_RESUME_TOKEN,
            ),
            (doc! {"startAfter": "token"}, codes::INVALID_RESUME_TOKEN),
        ];
        for (opts, code) in cases {
            let err = open(&e, "db", Some("c"), opts.clone()).expect_err("refused");
            assert_eq!(err.code, code, "{opts}");
        }
        let err = e
            .open_change_stream("db", Some("c"), &doc! {}, &[], Some(-1), None, None)
            .expect_err("refused");
        assert_eq!(err.code, codes::BAD_VALUE);
        assert_eq!(e.cursors.len(), 0, "no cursor left open by a refusal");
    }

    /// A collection stream returns its collection's events only, in commit order, and
    /// its post-batch token is the last event's.
    #[test]
    fn a_collection_stream_returns_its_own_events_in_commit_order() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        insert(&e, &c, 0);
        let stream = open(&e, "db", Some("c"), doc! {}).unwrap();
        assert!(stream.raw_docs.is_empty(), "nothing after the start");
        assert_ne!(stream.cursor_id, 0);
        assert_eq!(stream.ns, "db.c");
        insert(&e, &c, 1);
        insert(&e, &Namespace::new("db", "other"), 2);
        insert(&e, &Namespace::new("db2", "c"), 3);
        e.update(
            &c,
            vec![UpdateOp {
                q: doc! {"_id": 1},
                u: Bson::Document(doc! {"$set": {"a": 1}}),
                ..Default::default()
            }],
            true,
        )
        .unwrap();
        e.update(
            &c,
            vec![UpdateOp {
                q: doc! {"_id": 0},
                u: Bson::Document(doc! {"b": 2}),
                ..Default::default()
            }],
            true,
        )
        .unwrap();
        e.delete(
            &c,
            vec![DeleteOp {
                q: doc! {"_id": 1},
                limit: 1,
                ..Default::default()
            }],
            true,
        )
        .unwrap();
        let batch = {
            e.sync();
            e.get_more(stream.cursor_id, &stream.ns, None).unwrap()
        };
        let events = decoded(&batch);
        assert_eq!(
            op_types(&events),
            vec!["insert", "update", "replace", "delete"]
        );
        assert_eq!(
            ids(&events),
            vec![
                Bson::Int32(1),
                Bson::Int32(1),
                Bson::Int32(0),
                Bson::Int32(1)
            ]
        );
        let times: Vec<ClusterTime> = events.iter().map(|ev| token_of(ev).ts).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        assert_eq!(
            batch.post_batch_resume_token.as_ref(),
            events.last().map(|ev| ev.get_document("_id").unwrap())
        );
        assert!(next(&e, &stream).is_empty(), "each event once");
    }

    #[test]
    fn database_and_cluster_streams_see_their_scope_only() {
        let e = TestEngine::open();
        let database = open(&e, "db", None, doc! {}).unwrap();
        assert_eq!(database.ns, "db.$cmd.aggregate");
        let cluster = open(&e, "admin", None, doc! {"allChangesForCluster": true}).unwrap();
        assert_eq!(cluster.ns, "admin.$cmd.aggregate");
        insert(&e, &Namespace::new("db", "a"), 1);
        insert(&e, &Namespace::new("db", "b"), 2);
        insert(&e, &Namespace::new("other", "a"), 3);
        insert(&e, &Namespace::new("db", "system.js"), 4);
        insert(&e, &Namespace::new("config", "x"), 5);
        let namespaces = |events: Vec<Document>| -> Vec<String> {
            events
                .iter()
                .map(|ev| {
                    let ns = ev.get_document("ns").unwrap();
                    format!(
                        "{}.{}",
                        ns.get_str("db").unwrap(),
                        ns.get_str("coll").unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(namespaces(next(&e, &database)), vec!["db.a", "db.b"]);
        assert_eq!(
            namespaces(next(&e, &cluster)),
            vec!["db.a", "db.b", "other.a"]
        );
    }

    #[test]
    fn start_at_operation_time_includes_the_entry_at_that_time() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        let times: Vec<bson::Timestamp> = (0..3).map(|i| insert(&e, &c, i)).collect();
        e.sync();
        let stream = open(&e, "db", Some("c"), doc! {"startAtOperationTime": times[1]}).unwrap();
        let events = decoded(&stream);
        assert_eq!(ids(&events), vec![Bson::Int32(1), Bson::Int32(2)]);
        assert_eq!(events[0].get_timestamp("clusterTime").unwrap(), times[1]);
    }

    #[test]
    fn resuming_after_an_event_returns_the_events_after_it_only() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        let stream = open(&e, "db", Some("c"), doc! {}).unwrap();
        for i in 0..4 {
            insert(&e, &c, i);
        }
        let events = next(&e, &stream);
        assert_eq!(events.len(), 4);
        let second = events[1].get_document("_id").unwrap().clone();
        for option in ["resumeAfter", "startAfter"] {
            let resumed = open(&e, "db", Some("c"), doc! {option: second.clone()}).unwrap();
            assert_eq!(decoded(&resumed), events[2..].to_vec(), "{option}");
        }
        // The token of another collection's event was not made by this stream.
        let other = Namespace::new("db", "other");
        let on_other = open(&e, "db", Some("other"), doc! {}).unwrap();
        insert(&e, &other, 9);
        let foreign = next(&e, &on_other)[0].get_document("_id").unwrap().clone();
        let err = open(&e, "db", Some("c"), doc! {"resumeAfter": foreign}).expect_err("refused");
        assert_eq!(err.code, codes::CHANGE_STREAM_FATAL_ERROR);
        assert!(err.message.contains("the resume token was not found"));
    }

    /// A drop ends a collection stream with an invalidate; resumeAfter that invalidate
    /// is refused, startAfter it opens a stream on the collection made again.
    #[test]
    fn an_invalidated_stream_can_start_after_but_not_resume_after_its_invalidate() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        insert(&e, &c, 0);
        let stream = open(&e, "db", Some("c"), doc! {}).unwrap();
        e.drop_collection(&c).unwrap();
        e.sync();
        let last = e.get_more(stream.cursor_id, &stream.ns, None).unwrap();
        let events = decoded(&last);
        assert_eq!(op_types(&events), vec!["drop", "invalidate"]);
        assert_eq!(last.cursor_id, 0, "the cursor is closed");
        let invalidate = events[1].get_document("_id").unwrap().clone();
        assert!(token_of(&events[1]).from_invalidate);
        let err = open(
            &e,
            "db",
            Some("c"),
            doc! {"resumeAfter": invalidate.clone()},
        )
        .expect_err("refused");
        assert_eq!(err.code, codes::INVALID_RESUME_TOKEN);
        let after = open(&e, "db", Some("c"), doc! {"startAfter": invalidate}).unwrap();
        assert!(decoded(&after).is_empty());
        insert(&e, &c, 1);
        assert_eq!(ids(&next(&e, &after)), vec![Bson::Int32(1)]);
    }

    /// A stream whose start or position the trim passed fails with
    /// ChangeStreamHistoryLost (not resumable), instead of skipping what it lost.
    #[test]
    fn history_the_trim_removed_is_lost_not_skipped() {
        let e = TestEngine::trimmed_by_hand(64 * 1024);
        let c = Namespace::new("db", "c");
        let first = insert(&e, &c, 0);
        let behind = open(&e, "db", Some("c"), doc! {}).unwrap();
        let pad = "x".repeat(8 * 1024);
        for i in 1..20 {
            e.insert_documents(&c, vec![doc! {"_id": i, "pad": &pad}], true)
                .unwrap();
        }
        e.sync();
        while crate::oplog::trim::trim_oplog_round(&e).unwrap() {}
        assert!(e.oplog_trim_ts() > ClusterTime::from(first));
        let lost = |r: Result<CursorBatch>| {
            let err = r.expect_err("history lost");
            assert_eq!(
                err.code,
                codes::CHANGE_STREAM_HISTORY_LOST,
                "{}",
                err.message
            );
            assert!(label_resumable(err).labels.is_empty(), "not resumable");
        };
        lost(open(
            &e,
            "db",
            Some("c"),
            doc! {"startAtOperationTime": first},
        ));
        let token = ResumeToken::high_water_mark(ClusterTime::from(first)).to_document();
        lost(open(&e, "db", Some("c"), doc! {"resumeAfter": token}));
        lost(e.get_more(behind.cursor_id, &behind.ns, None));
        // From the trim point on, the history is whole.
        let from = bson::Timestamp::from(e.oplog_trim_ts());
        let whole = open(&e, "db", Some("c"), doc! {"startAtOperationTime": from}).unwrap();
        let events = decoded(&whole);
        let last = ids(&events).last().cloned();
        assert_eq!(last, Some(Bson::Int32(19)));
        assert!(events.iter().all(|ev| ClusterTime::from(
            ev.get_timestamp("clusterTime").unwrap()
        ) >= e.oplog_trim_ts()));
    }

    /// Why a read checks the trim point again after reading: a trim that lands
    /// between the check before it and the read deletes the collection's index of the
    /// trimmed entries, and the read alone passes over them without a sign.
    #[test]
    fn a_read_that_raced_a_trim_is_lost_not_a_gap() {
        let e = TestEngine::trimmed_by_hand(64 * 1024);
        let c = Namespace::new("db", "c");
        let start = ClusterTime::from(insert(&e, &c, 0));
        let pad = "x".repeat(8 * 1024);
        for i in 1..20 {
            e.insert_documents(&c, vec![doc! {"_id": i, "pad": &pad}], true)
                .unwrap();
        }
        e.sync();
        let spec = spec("db", Some("c"), doc! {}).unwrap();
        let stream = ChangeStream {
            watch: e.recent.watch(crate::core::bus::namespace_bit("db.c")),
            spec,
            next_ts: start,
            verify: None,
            pbrt: ResumeToken::high_water_mark(start),
            pending: VecDeque::new(),
            invalidated: false,
            prefilter: prefilter::Prefilter::default(),
            deferred_error: None,
            skip_fragments: None,
            memory_only: false,
            reads: OplogReads::default(),
            rejoin: false,
            bucket_ns: None,
        };
        // The check before the read passes; then the trim commits.
        stream.check_not_trimmed(&e).unwrap();
        while crate::oplog::trim::trim_oplog_round(&e).unwrap() {}
        let trim = e.oplog_trim_ts();
        assert!(trim > start);
        let mut bytes = 0;
        let read = stream
            .read_entries(&e, e.durability.durable_ts(), READ_CHUNK, &mut bytes)
            .unwrap();
        assert!(bytes > 8 * 1024, "the entries read, with their documents");
        let first = read.first().map(|r| r.ts).unwrap();
        assert!(
            first >= trim,
            "the read starts past the trim, not at {start}"
        );
        let err = stream.check_not_trimmed(&e).expect_err("lost");
        assert_eq!(err.code, codes::CHANGE_STREAM_HISTORY_LOST);
    }

    /// Events a filter drops are never returned, but the position still moves past
    /// them: the post-batch token of an empty batch is past the last write read.
    #[test]
    fn a_filtered_stream_moves_past_what_it_drops() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        let stream = e
            .open_change_stream(
                "db",
                Some("c"),
                &doc! {},
                &[doc! {"$match": {"operationType": "delete"}}],
                None,
                None,
                None,
            )
            .unwrap();
        let inserts: Vec<bson::Timestamp> = (0..3).map(|i| insert(&e, &c, i)).collect();
        let last_insert = *inserts.last().unwrap();
        e.sync();
        let batch = e.get_more(stream.cursor_id, &stream.ns, None).unwrap();
        assert!(batch.raw_docs.is_empty());
        let pbrt =
            ResumeToken::parse(&Bson::Document(batch.post_batch_resume_token.unwrap())).unwrap();
        assert!(pbrt.is_high_water_mark());
        assert!(pbrt.ts >= ClusterTime::from(last_insert));
        e.delete(
            &c,
            vec![DeleteOp {
                q: doc! {"_id": 2},
                limit: 1,
                ..Default::default()
            }],
            true,
        )
        .unwrap();
        let events = next(&e, &stream);
        assert_eq!(op_types(&events), vec!["delete"]);
        assert!(token_of(&events[0]).ts > pbrt.ts);
    }

    #[test]
    fn a_stage_that_changes_the_token_ends_the_stream() {
        let e = TestEngine::open();
        let stream = e
            .open_change_stream(
                "db",
                Some("c"),
                &doc! {},
                &[doc! {"$project": {"_id": 0}}],
                None,
                None,
                None,
            )
            .unwrap();
        insert(&e, &Namespace::new("db", "c"), 1);
        e.sync();
        let err = e
            .get_more(stream.cursor_id, &stream.ns, None)
            .expect_err("fatal");
        assert_eq!(err.code, codes::CHANGE_STREAM_FATAL_ERROR);
        assert_eq!(
            err.labels,
            vec!["NonResumableChangeStreamError".to_string()]
        );
    }

    #[test]
    fn batch_sizes_bound_each_batch() {
        let e = TestEngine::open();
        let c = Namespace::new("db", "c");
        let stream = e
            .open_change_stream("db", Some("c"), &doc! {}, &[], Some(0), None, None)
            .unwrap();
        assert_ne!(stream.cursor_id, 0, "batchSize 0 opens the cursor");
        assert!(stream.post_batch_resume_token.is_some());
        for i in 0..5 {
            insert(&e, &c, i);
        }
        e.sync();
        let mut sizes = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let b = e.get_more(stream.cursor_id, &stream.ns, Some(2)).unwrap();
            sizes.push(b.raw_docs.len());
            seen.extend(ids(&decoded(&b)));
        }
        assert_eq!(sizes, vec![2, 2, 1, 0]);
        assert_eq!(seen, (0..5).map(Bson::Int32).collect::<Vec<_>>());
    }

    #[test]
    fn only_transient_errors_are_labelled_resumable() {
        let labelled = label_resumable(Error::new(6, "host unreachable"));
        assert_eq!(
            labelled.labels,
            vec!["ResumableChangeStreamError".to_string()]
        );
        for code in [
            codes::CHANGE_STREAM_FATAL_ERROR,
            codes::CHANGE_STREAM_HISTORY_LOST,
            codes::INVALID_RESUME_TOKEN,
            codes::BAD_VALUE,
        ] {
            assert!(
                label_resumable(Error::new(code, "x")).labels.is_empty(),
                "{code}"
            );
        }
        // An error labelled already keeps its own label alone.
        let own = Error::new(6, "x").with_label("NonResumableChangeStreamError");
        assert_eq!(
            label_resumable(own).labels,
            vec!["NonResumableChangeStreamError".to_string()]
        );
    }

    /// `$changeStreamSplitLargeEvent`: fragments of whole top-level fields, each under
    /// the limit, each with the event's token plus its fragment number.
    #[test]
    fn a_large_event_splits_into_numbered_fragments() {
        // Each over half the limit: no two fit in one fragment.
        let big = "x".repeat(9 * 1024 * 1024);
        let token = ResumeToken::event(
            ClusterTime::from_u64(5),
            None,
            doc! {"operationType": "insert"},
        );
        let event = doc! {
            "_id": token.to_document(),
            "operationType": "insert",
            "fullDocument": {"_id": 1, "a": &big},
            "fullDocumentBeforeChange": {"_id": 1, "b": &big},
            "updateDescription": {"updatedFields": {"c": &big}},
        };
        let fragments = split_event(event, &token).unwrap();
        assert_eq!(fragments.len(), 3);
        for (i, (doc, t)) in fragments.iter().enumerate() {
            let bytes = bson::to_vec(doc).unwrap().len();
            assert!(bytes <= MAX_EVENT_BYTES, "fragment {i}: {bytes} bytes");
            assert_eq!(t.fragment, Some(i as i32));
            assert!(t.same_event(&token));
            assert_eq!(doc.get_document("_id").unwrap(), &t.to_document());
            assert_eq!(
                doc.get_document("splitEvent").unwrap(),
                &doc! {"fragment": i as i32 + 1, "of": 3}
            );
        }
        let keys: Vec<Vec<&str>> = fragments
            .iter()
            .map(|(d, _)| d.keys().skip(2).map(String::as_str).collect())
            .collect();
        assert_eq!(
            keys,
            vec![
                vec!["operationType", "fullDocument"],
                vec!["fullDocumentBeforeChange"],
                vec!["updateDescription"]
            ]
        );
        let too_big =
            doc! {"_id": token.to_document(), "fullDocument": {"a": "x".repeat(MAX_EVENT_BYTES)}};
        let err = split_event(too_big, &token).expect_err("one field over the limit");
        assert_eq!(err.code, 7182500);
        let only_id = doc! {"_id": token.to_document()};
        assert_eq!(split_event(only_id, &token).unwrap_err().code, 7182502);
    }

    /// mongod fills fragments smallest field first: the small fields after a large one
    /// still travel in the first fragment.
    #[test]
    fn fragments_take_the_smallest_fields_first() {
        let big = "x".repeat(9 * 1024 * 1024);
        let token = ResumeToken::event(
            ClusterTime::from_u64(5),
            None,
            doc! {"operationType": "update"},
        );
        let event = doc! {
            "_id": token.to_document(),
            "fullDocument": {"a": &big},
            "fullDocumentBeforeChange": {"a": &big},
            "operationType": "update",
            "ns": {"db": "d", "coll": "c"},
        };
        let keys: Vec<Vec<String>> = split_event(event, &token)
            .unwrap()
            .into_iter()
            .map(|(d, _)| d.keys().skip(2).cloned().collect())
            .collect();
        assert_eq!(
            keys,
            vec![
                vec!["operationType", "ns", "fullDocument"],
                vec!["fullDocumentBeforeChange"]
            ]
        );
    }
}

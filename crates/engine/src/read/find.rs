//! Read commands on top of the planner: find, getMore, count, distinct,
//! aggregate, and the plan summary that explain reports.

use crate::catalog::namespace::Namespace;
use crate::catalog::CollMeta;
use crate::core::time::ClusterTime;
use crate::oplog::{OPLOG_COLL, OPLOG_DB};
use crate::read::cursor::{Cursor, Feed, PipelineScan, Source, DEFAULT_FIRST_BATCH};
use crate::read::spill_group::GroupOutput;
use crate::read::spill_sort::{SortMemory, Sorted, SpillSort, DEFAULT_MAX_SORT_BYTES};
use crate::read::union::UnionFeed;
use crate::read::window::WindowOutput;
use crate::read::{self, Access, Plan, Scan};
use crate::write::WriteOutcome;
use crate::Engine;
use bson::{doc, Bson, Document};
use std::collections::VecDeque;
use std::sync::Arc;
use tailstream_query::collation::Collator;
use tailstream_query::compare::{as_f64, cmp_bson_with};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::matcher::Matcher;
use tailstream_query::pipeline::{Blocking, CollectionSource, Pipeline};
use tailstream_query::projection::Projection;
use tailstream_query::sort::{SortSpec, TopK};
use tailstream_query::value_set::ValueSet;
use tailstream_storage::Store;

/// The folder under the data directory a blocking sort spills to (mongod's name).
const SPILL_DIR: &str = "_tmp";

#[derive(Debug, Clone, Default)]
pub struct FindRequest {
    pub filter: Document,
    pub projection: Option<Document>,
    pub sort: Option<Document>,
    pub skip: u64,
    /// 0 or None: no limit.
    pub limit: Option<i64>,
    pub batch_size: Option<i64>,
    pub single_batch: bool,
    pub hint: Option<Bson>,
    pub no_cursor_timeout: bool,
    pub lsid: Option<Bson>,
    /// The `let` option: variables for `$expr` in the filter.
    pub let_vars: Option<Document>,
    pub tailable: bool,
    pub await_data: bool,
    /// Inclusive lower and exclusive upper bound on the hinted index's keys.
    pub min: Option<Document>,
    pub max: Option<Document>,
    /// Return the index keys of the index the query uses instead of the documents.
    pub return_key: bool,
    /// The `collation` option (None: the collection's default collation).
    pub collation: Option<Document>,
    /// The `allowDiskUse` option: `Some(false)` forbids a blocking sort to spill past
    /// its memory limit (mongod's allowDiskUseByDefault: it may otherwise).
    pub allow_disk_use: Option<bool>,
    /// The most bytes a blocking sort holds in memory (None: mongod's 100 MiB; the
    /// server passes its `internalQueryMaxBlockingSortMemoryUsageBytes`).
    pub max_sort_bytes: Option<usize>,
}

/// The collation an operation compares strings under: its own `collation` option, else
/// the collection's default (none: binary comparison).
pub fn operation_collator(
    meta: Option<&CollMeta>,
    requested: Option<&Document>,
) -> Result<Option<Arc<Collator>>> {
    match requested {
        // As mongod: an empty collation document is no collation given.
        Some(spec) if !spec.is_empty() => Collator::parse(spec),
        _ => match meta {
            Some(m) => m.default_collator(),
            None => Ok(None),
        },
    }
}

/// One batch of a cursor: id 0 means the cursor is exhausted and closed.
#[derive(Debug, Clone, Default)]
pub struct CursorBatch {
    pub cursor_id: i64,
    pub ns: String,
    pub docs: Vec<Document>,
    /// The cursor is open and tailable with awaitData: an empty batch may wait for data.
    pub await_data: bool,
    /// Change streams: the resume token of the position after this batch.
    pub post_batch_resume_token: Option<Document>,
    /// A bucket of a parallel change stream: the fields its cursor document adds
    /// (`combinedResumeToken`, `rejoin`; see `EventSource::bucket_fields`).
    pub bucket_fields: Option<Box<Document>>,
    /// Change streams: the events, as built from the oplog (never decoded); the
    /// documents of an unfiltered tailable cursor on a capped collection, as stored
    /// (`Cursor::raw_tail`). Either these or `docs`, never both.
    pub raw_docs: Vec<crate::read::cursor::RawEvent>,
}

/// An aggregation's options for reading its collection: the index to read it through
/// (`hint`), and what its blocking stages may hold: the operation's `allowDiskUse`, the
/// server's `internalQueryMaxBlockingSortMemoryUsageBytes` and
/// `internalDocumentSourceGroupMaxMemoryBytes` (None: the defaults).
#[derive(Debug, Clone, Default)]
pub struct AggregateOptions {
    pub hint: Option<Bson>,
    pub allow_disk_use: Option<bool>,
    pub max_sort_bytes: Option<usize>,
    /// What a `$group` holds before it spills (None: mongod's 100 MiB; the server
    /// passes its `internalDocumentSourceGroupMaxMemoryBytes`).
    pub max_group_bytes: Option<usize>,
}

/// Most documents a tailable cursor's getMore returns when it runs on an async worker
/// (see [`Engine::get_more_in_memory`]); a client behind by more gets them in the
/// following getMores.
pub const INLINE_TAIL_BATCH: usize = 1000;

impl Engine {
    pub fn find(&self, ns: &Namespace, req: FindRequest) -> Result<CursorBatch> {
        if let Some(view) = self.resolve_view(ns)? {
            return self.find_view(ns, &view, req);
        }
        let (filter, _) = crate::read::bind_let(&req.filter, req.let_vars.as_ref())?;
        let is_oplog = is_oplog(ns);
        // One catalog lookup serves the collation, the tailable check and the plan.
        let meta = if is_oplog { None } else { self.collection(ns) };
        let collator = operation_collator(meta.as_deref(), req.collation.as_ref())?;
        let matcher = Arc::new(Matcher::for_query_with_collation(
            &filter,
            collator.clone(),
        )?);
        let sort = match &req.sort {
            Some(s) if !s.is_empty() => Some(SortSpec::parse(s)?.with_collator(collator.clone())),
            _ => None,
        };
        let projection = match &req.projection {
            Some(p) if !p.is_empty() => Some(Arc::new(Projection::with_collation(
                p,
                Some(&req.filter),
                collator.clone(),
            )?)),
            _ => None,
        };
        if let Some(l) = req.limit {
            if l < 0 {
                return Err(Error::bad_value("LIMIT must be non-negative"));
            }
        }
        let wants_score = projection.as_ref().is_some_and(|p| p.uses_text_score())
            || sort.as_ref().is_some_and(|s| {
                s.fields
                    .iter()
                    .any(|(f, _)| f == tailstream_query::text::TEXT_SCORE_FIELD)
            });
        if wants_score && matcher.text().is_none() {
            return Err(Error::new(
                40218,
                "query requires text score metadata, but it is not available",
            ));
        }
        let batch_size = check_batch_size(req.batch_size)?;
        if req.tailable {
            let capped = is_oplog || meta.as_ref().is_some_and(|m| m.is_capped());
            if !capped && meta.is_some() {
                return Err(Error::bad_value(format!(
                    "error processing query: ns={} tailable cursor requested on non capped collection",
                    ns.full()
                )));
            }
            if let Some(s) = &sort {
                if !(s.fields.len() == 1 && s.fields[0].0 == "$natural" && !s.fields[0].1) {
                    return Err(Error::bad_value(
                        "cannot use tailable option with a sort other than {$natural: 1}",
                    ));
                }
            }
        } else if req.await_data {
            return Err(Error::failed_to_parse(
                "Cannot set 'awaitData' without also setting 'tailable'",
            ));
        }
        // returnKey: the key fields of the index used ({} when none is).
        let mut key_fields = Vec::new();
        // A time-series collection's buckets (`system.buckets.<name>`), made on reading.
        let buckets = match meta {
            None if !is_oplog => self.bucket_documents(ns)?,
            _ => None,
        };
        let source = if let Some(buckets) = buckets {
            Some(Source::Buffered(crate::read::buckets::select(
                buckets,
                &matcher,
                sort.as_ref(),
            )))
        } else if is_oplog {
            let reverse = sort
                .as_ref()
                .map(|s| s.fields.len() == 1 && s.fields[0].1)
                .unwrap_or(false);
            Some(Source::Scan {
                meta: Arc::new(oplog_meta()),
                matcher: matcher.clone(),
                scan: Box::new(self.oplog_scan(&matcher, reverse)),
                buf: VecDeque::new(),
            })
        } else {
            match meta {
                None => None,
                Some(meta) => {
                    let mut plan = read::plan(&meta, &matcher, sort.as_ref(), req.hint.as_ref())?;
                    crate::read::min_max::bound_plan(
                        &mut plan,
                        req.hint.as_ref(),
                        req.min.as_ref(),
                        req.max.as_ref(),
                        collator.as_deref(),
                    )?;
                    if req.return_key {
                        key_fields = plan_key_fields(&plan, sort.as_ref(), req.hint.as_ref());
                    }
                    let memory = self.sort_memory(req.max_sort_bytes, req.allow_disk_use);
                    Some(self.source_for(
                        meta,
                        matcher.clone(),
                        plan,
                        sort.as_ref(),
                        (req.limit, req.skip),
                        memory,
                    )?)
                }
            }
        };
        let source = match source {
            Some(s) => s,
            // A tailable cursor on a capped collection that does not exist yet stays dead,
            // as in mongod (there is no collection to tail).
            None => {
                return Ok(CursorBatch {
                    cursor_id: 0,
                    ns: ns.full(),
                    ..Default::default()
                })
            }
        };
        let mut cursor = Cursor::new(ns.full(), source);
        cursor.projection = projection;
        if req.return_key {
            cursor.return_key = Some(Arc::new(key_fields));
        }
        cursor.skip = req.skip;
        cursor.remaining = req.limit.filter(|l| *l > 0).map(|l| l as u64);
        cursor.no_timeout = req.no_cursor_timeout;
        cursor.lsid = req.lsid.clone();
        cursor.tailable = req.tailable;
        cursor.await_data = req.tailable && req.await_data;
        if cursor.raw_tail() {
            // Its getMores read the inserted documents from the recent oplog.
            self.enable_recent_oplog();
            let bit = crate::core::bus::namespace_bit(&ns.full());
            cursor.watch = Some(self.recent.watch(bit));
        }
        self.first_batch(
            cursor,
            Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
            req.single_batch,
        )
    }

    /// Builds the cursor source for a plan: a lazy scan when the plan yields the sort
    /// order, otherwise every match sorted in memory.
    fn source_for(
        &self,
        meta: Arc<CollMeta>,
        matcher: Arc<Matcher>,
        plan: Plan,
        sort: Option<&SortSpec>,
        (limit, skip): (Option<i64>, u64),
        memory: SortMemory,
    ) -> Result<Source> {
        let mut scan = Scan::new(plan.access.clone());
        scan.annotate_text_score = matcher.text().is_some();
        if matcher.geo_near().is_some() {
            // $near returns the nearest first (a sort, if given, reorders them stably).
            let all = scan.collect_all(&self.store, meta.id, &matcher)?;
            let mut docs =
                crate::read::geo_near::by_distance(&matcher, all.into_iter().map(|(_, d)| d));
            if let Some(s) = sort {
                docs.sort_by(|a, b| s.compare(&a.1, &b.1));
            }
            if let Some(l) = limit.filter(|l| *l > 0) {
                docs.truncate((l as u64 + skip) as usize);
            }
            return Ok(Source::Buffered(
                docs.into_iter().map(|(_, d, _)| d).collect(),
            ));
        }
        if plan.sorted || sort.is_none() {
            return Ok(Source::Scan {
                meta,
                matcher,
                scan: Box::new(scan),
                buf: VecDeque::new(),
            });
        }
        let sort = sort.unwrap();
        tailstream_query::script::Operation::count_current(|s| s.note_sort_in_memory());
        // The skipped matches and the limit's: the rest are never returned.
        let keep = limit
            .filter(|l| *l > 0)
            .map(|l| usize::try_from((l as u64).saturating_add(skip)).unwrap_or(usize::MAX));
        if keep.is_some() {
            // At most twice `keep` held while reading (a top-k sort, as mongod's).
            let mut top = TopK::new(sort.clone(), keep);
            scan.for_each_match(&self.store, meta.id, &matcher, |(_, d)| top.push(d))?;
            return Ok(Source::Buffered(top.finish().into()));
        }
        // Every match: past the memory limit, in runs on disk.
        let mut sorter = SpillSort::new(sort.clone(), memory);
        scan.try_for_each_match(&self.store, meta.id, &matcher, |(_, d)| sorter.push(d))?;
        Ok(match sorter.finish()? {
            Sorted::Memory(docs) => Source::Buffered(docs),
            Sorted::Merged(merge) => Source::Sorted(Box::new(merge)),
        })
    }

    /// What a blocking sort may hold in memory, and where it spills past that (mongod's
    /// `_tmp` folder under the data directory), unless the operation forbade it.
    pub(crate) fn sort_memory(
        &self,
        max_bytes: Option<usize>,
        allow_disk_use: Option<bool>,
    ) -> SortMemory {
        SortMemory {
            max_bytes: max_bytes
                .filter(|b| *b > 0)
                .unwrap_or(DEFAULT_MAX_SORT_BYTES),
            spill_dir: (allow_disk_use != Some(false)).then(|| self.opts.dbpath.join(SPILL_DIR)),
        }
    }

    /// Fills the first batch and registers the cursor if more remains.
    pub fn first_batch(
        &self,
        mut cursor: Cursor,
        batch_size: Option<usize>,
        single_batch: bool,
    ) -> Result<CursorBatch> {
        if batch_size == Some(0) && !single_batch {
            // batchSize 0: open the cursor without producing anything yet (mongod does the same).
            let ns = cursor.ns.clone();
            let id = self.cursors.register(cursor)?;
            return Ok(CursorBatch {
                cursor_id: id,
                ns,
                await_data: false,
                ..Default::default()
            });
        }
        let (docs, exhausted) = cursor.next_batch(self, batch_size)?;
        let ns = cursor.ns.clone();
        if exhausted || single_batch {
            return Ok(CursorBatch {
                cursor_id: 0,
                ns,
                docs,
                ..Default::default()
            });
        }
        let await_data = cursor.await_data;
        cursor.returned.batch(&docs, &[]);
        let id = self.cursors.register(cursor)?;
        Ok(CursorBatch {
            cursor_id: id,
            ns,
            docs,
            await_data,
            ..Default::default()
        })
    }

    /// The next batch of an open cursor; `ns` must be the cursor's namespace.
    pub fn get_more(
        &self,
        cursor_id: i64,
        ns: &str,
        batch_size: Option<i64>,
    ) -> Result<CursorBatch> {
        self.get_more_with(cursor_id, ns, batch_size, false)
    }

    /// Runs `req` to its end, handing each batch's documents to `each` (getMores of
    /// `batch_size`); `each` may stop early with `Break`. A cursor left open by an early
    /// stop or an error of `each` is killed.
    pub fn for_each_batch(
        &self,
        ns: &Namespace,
        req: FindRequest,
        batch_size: Option<i64>,
        mut each: impl FnMut(Vec<Document>) -> Result<std::ops::ControlFlow<()>>,
    ) -> Result<()> {
        let mut batch = self.find(ns, req)?;
        loop {
            let stop = each(std::mem::take(&mut batch.docs));
            if !matches!(stop, Ok(std::ops::ControlFlow::Continue(()))) {
                if batch.cursor_id != 0 {
                    self.kill_cursors(&[batch.cursor_id]);
                }
                return stop.map(|_| ());
            }
            if batch.cursor_id == 0 {
                return Ok(());
            }
            batch = self.get_more(batch.cursor_id, &ns.full(), batch_size)?;
        }
    }

    /// The next batch, `memory_only` as [`Self::get_more_in_memory`] reads it.
    pub(crate) fn get_more_with(
        &self,
        cursor_id: i64,
        ns: &str,
        batch_size: Option<i64>,
        memory_only: bool,
    ) -> Result<CursorBatch> {
        let batch_size = check_batch_size(batch_size)?;
        let Some(cursor) = self.cursors.get(cursor_id) else {
            return Err(Error::new(
                codes::CURSOR_NOT_FOUND,
                format!("cursor id {cursor_id} not found"),
            ));
        };
        let mut c = if memory_only {
            match cursor.try_lock() {
                // JavaScript never runs on an async worker: a filter with it reads on
                // the blocking pool.
                Some(c)
                    if matches!(c.source, Source::Events(_))
                        || (c.tailable
                            && c.at_tail
                            && !matches!(&c.source, Source::Scan { matcher, .. } if matcher.uses_script())) =>
                {
                    c
                }
                _ => return Err(crate::read::cursor::needs_storage()),
            }
        } else {
            cursor.lock()
        };
        if c.ns != ns {
            return Err(Error::new(
                codes::UNAUTHORIZED,
                format!("Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}", c.ns),
            ));
        }
        let mut pbrt = None;
        let mut bucket_fields = None;
        let mut raw_docs = Vec::new();
        let raw_tail = c.raw_tail();
        let unmodified_after = c
            .collection_id()
            .filter(|_| raw_tail)
            .and_then(|id| self.capped_modified.lock().get(&id).copied());
        let result = match &mut c.source {
            Source::Events(stream) => {
                // A memory-only read runs on an async worker: the stream keeps it short.
                let r = stream
                    .next_events(self, batch_size.unwrap_or(0), memory_only)
                    .map(|(events, closed)| {
                        raw_docs = events;
                        (Vec::new(), closed)
                    });
                pbrt = Some(stream.resume_token());
                bucket_fields = stream.bucket_fields().map(Box::new);
                r
            }
            _ if memory_only => {
                let want = batch_size
                    .filter(|n| *n > 0)
                    .unwrap_or(INLINE_TAIL_BATCH)
                    .min(INLINE_TAIL_BATCH);
                if raw_tail {
                    c.next_raw_batch(&self.store, Some(want), unmodified_after, &self.evicted)
                        .map(|docs| {
                            raw_docs = docs;
                            (Vec::new(), false)
                        })
                } else {
                    c.next_batch(self, Some(want))
                }
            }
            _ if raw_tail => c
                .next_raw_batch(&self.store, batch_size, unmodified_after, &self.evicted)
                .map(|docs| {
                    raw_docs = docs;
                    (Vec::new(), false)
                }),
            _ => c.next_batch(self, batch_size),
        };
        c.last_used = std::time::Instant::now();
        match result {
            Ok((docs, exhausted)) => {
                c.returned.batch(&docs, &raw_docs);
                let id = if exhausted {
                    self.cursors.remove(cursor_id);
                    0
                } else {
                    cursor_id
                };
                Ok(CursorBatch {
                    cursor_id: id,
                    ns: c.ns.clone(),
                    docs,
                    await_data: id != 0 && c.await_data,
                    post_batch_resume_token: pbrt,
                    bucket_fields,
                    raw_docs,
                })
            }
            Err(e) if e.code == crate::read::cursor::NEEDS_STORAGE => Err(e),
            Err(e) => {
                self.cursors.remove(cursor_id);
                Err(e)
            }
        }
    }

    /// Closes cursors; returns (killed, not found).
    pub fn kill_cursors(&self, ids: &[i64]) -> (Vec<i64>, Vec<i64>) {
        let mut killed = Vec::new();
        let mut not_found = Vec::new();
        for id in ids {
            if self.cursors.remove(*id) {
                killed.push(*id);
            } else {
                not_found.push(*id);
            }
        }
        (killed, not_found)
    }

    /// A scan of the oplog in ts order (or the reverse), from the lower bound of the
    /// query's `ts` predicate.
    fn oplog_scan(&self, matcher: &Matcher, reverse: bool) -> Scan {
        Scan::new(Access::OplogScan {
            from: if reverse {
                ClusterTime::ZERO
            } else {
                oplog_start(matcher)
            },
            reverse,
            floor: self.oplog_floor(),
        })
    }

    pub fn count(
        &self,
        ns: &Namespace,
        query: &Document,
        skip: u64,
        limit: u64,
        hint: Option<&Bson>,
        collation: Option<&Document>,
    ) -> Result<u64> {
        if let Some(view) = self.resolve_view(ns)? {
            // As mongod: an aggregation of the view's pipeline, the query, skip and limit.
            let mut extra = Vec::new();
            if skip > 0 {
                extra.push(doc! {"$skip": skip as i64});
            }
            if limit > 0 {
                extra.push(doc! {"$limit": limit.min(i64::MAX as u64) as i64});
            }
            extra.push(doc! {"$count": "count"});
            let counted = self.view_matches(&view, query, extra, hint)?;
            return Ok(counted
                .first()
                .and_then(|d| d.get("count"))
                .and_then(as_i64)
                .unwrap_or(0) as u64);
        }
        let meta = if is_oplog(ns) {
            Some(Arc::new(oplog_meta()))
        } else {
            self.collection(ns)
        };
        let collator = operation_collator(meta.as_deref(), collation)?;
        let matcher = Matcher::for_query_with_collation(query, collator)?;
        let Some(meta) = meta else {
            let n = match self.bucket_documents(ns)? {
                Some(buckets) => buckets.iter().filter(|b| matcher.matches(b)).count() as u64,
                None => 0,
            };
            let n = n.saturating_sub(skip);
            return Ok(if limit > 0 { n.min(limit) } else { n });
        };
        // Counts what a scan yields, loading each document for the matcher.
        let count_scan = |mut scan: Scan| -> Result<u64> {
            let (mut n, mut chunk) = (0u64, Vec::new());
            while !scan.done {
                chunk.clear();
                scan.next_batch(&self.store, meta.id, &matcher, 10_000, &mut chunk)?;
                n += chunk.len() as u64;
            }
            Ok(n)
        };
        let n = if is_oplog(ns) {
            count_scan(self.oplog_scan(&matcher, false))?
        } else {
            let plan = read::plan(&meta, &matcher, None, hint)?;
            if query.is_empty()
                && hint.is_none()
                && matches!(
                    plan.access,
                    Access::CollScan { .. } | Access::NaturalScan { .. }
                )
            {
                // Every document counts: count the collection's keys (one per document)
                // without loading a document (estimatedDocumentCount lands here).
                self.store
                    .count_prefix(
                        tailstream_storage::Space::Docs,
                        &crate::core::keys::coll_prefix(meta.id),
                    )
                    .map_err(crate::core::storage_err)?
            } else {
                count_scan(Scan::new(plan.access))?
            }
        };
        let n = n.saturating_sub(skip);
        Ok(if limit > 0 { n.min(limit) } else { n })
    }

    /// Distinct values of a field among matching documents (array elements count individually).
    pub fn distinct(
        &self,
        ns: &Namespace,
        key: &str,
        query: &Document,
        collation: Option<&Document>,
    ) -> Result<Vec<Bson>> {
        self.distinct_in(ns, key, query, None, collation)
    }

    /// `distinct` over the collection, or over `view` (a transaction's documents). Values
    /// equal under the collation count once (the first one met is returned).
    pub fn distinct_in(
        &self,
        ns: &Namespace,
        key: &str,
        query: &Document,
        view: Option<Vec<Document>>,
        collation: Option<&Document>,
    ) -> Result<Vec<Bson>> {
        let meta = self.collection(ns);
        let collator = operation_collator(meta.as_deref(), collation)?;
        let coll = collator.as_deref();
        let matcher = Matcher::for_query_with_collation(query, collator.clone())?;
        let parts: Vec<&str> = key.split('.').collect();
        let mut set = ValueSet::new(coll);
        // Each document's values are taken as it is read: the scan's documents are
        // not held (only the distinct values are, as mongod's).
        let mut take = |doc: Document| {
            let mut found = Vec::new();
            collect_path_values(&Bson::Document(doc), &parts, &mut found);
            for v in found {
                set.insert(v);
            }
        };
        match view {
            Some(docs) => {
                for d in docs {
                    if matcher.matches_or_fail(&d)? {
                        take(d);
                    }
                }
            }
            None if self.view(ns).is_some() => {
                if let Some(v) = self.resolve_view(ns)? {
                    self.view_matches(&v, query, Vec::new(), None)?
                        .into_iter()
                        .for_each(&mut take);
                }
            }
            None => {
                let Some(meta) = meta else {
                    return Ok(Vec::new());
                };
                let plan = read::plan(&meta, &matcher, None, None)?;
                Scan::new(plan.access).for_each_match(
                    &self.store,
                    meta.id,
                    &matcher,
                    |(_, d)| take(d),
                )?;
            }
        }
        let mut values = set.into_values();
        values.sort_by(|a, b| cmp_bson_with(a, b, coll));
        Ok(values)
    }

    /// Runs an aggregation pipeline on a collection (or, with `coll` None, a database-level
    /// pipeline that starts with a source stage such as `$documents`).
    #[allow(clippy::too_many_arguments)]
    pub fn aggregate(
        &self,
        db: &str,
        coll: Option<&str>,
        stages: &[Document],
        batch_size: Option<i64>,
        lsid: Option<Bson>,
        let_vars: Option<&Document>,
        collation: Option<&Document>,
        opts: AggregateOptions,
    ) -> Result<CursorBatch> {
        // A time-series collection's buckets, made on reading, are the input.
        let buckets = match coll {
            Some(c) => self.bucket_documents(&Namespace::new(db, c))?,
            None => None,
        };
        self.aggregate_in(
            db, coll, stages, batch_size, lsid, let_vars, buckets, collation, opts,
        )
    }

    /// `aggregate` reading the collection (or view), or `view` (a transaction's
    /// documents of it, the view's results already).
    #[allow(clippy::too_many_arguments)]
    pub fn aggregate_in(
        &self,
        db: &str,
        coll: Option<&str>,
        stages: &[Document],
        batch_size: Option<i64>,
        lsid: Option<Bson>,
        let_vars: Option<&Document>,
        view: Option<Vec<Document>>,
        collation: Option<&Document>,
        opts: AggregateOptions,
    ) -> Result<CursorBatch> {
        let batch_size = check_batch_size(batch_size)?;
        let meta = coll.and_then(|c| self.collection(&Namespace::new(db, c)));
        let collator = operation_collator(meta.as_deref(), collation)?;
        if let (Some(first), Some(c)) = (stages.first(), coll) {
            if let Some(spec) = first.get("$geoNear") {
                let ns = Namespace::new(db, c);
                let docs = self.geo_near_stage(&ns, spec, view)?;
                return self.aggregate_in(
                    db,
                    coll,
                    &stages[1..],
                    batch_size.map(|b| b as i64),
                    lsid,
                    let_vars,
                    Some(docs),
                    collation,
                    opts,
                );
            }
        }
        // No session catalog is kept: `$listLocalSessions` (a source stage) yields nothing.
        let stages = match stages.first() {
            Some(s) if coll.is_none() && s.contains_key("$listLocalSessions") => &stages[1..],
            _ => stages,
        };
        let mut vars = match let_vars {
            Some(l) => tailstream_query::expr::let_variables(l)?,
            None => tailstream_query::expr::Variables {
                now: Some(bson::DateTime::now()),
                ..Default::default()
            },
        };
        vars.collator = collator.clone();
        vars.forbid_disk_use = opts.allow_disk_use == Some(false);
        vars.max_group_bytes = opts.max_group_bytes;
        let cursor_ns = match coll {
            Some(c) => format!("{db}.{c}"),
            None => format!("{db}.$cmd.aggregate"),
        };
        // A view reads the collection under it, through its pipeline first.
        let resolved = match (coll, &view) {
            (Some(c), None) => self.resolve_view(&Namespace::new(db, c))?,
            _ => None,
        };
        let (read_coll, stages): (Option<&str>, std::borrow::Cow<'_, [Document]>) = match &resolved
        {
            Some(r) => {
                if stages.first().is_some_and(|s| s.contains_key("$collStats")) {
                    return Err(executor_error(
                        &cursor_ns,
                        crate::catalog::views::not_a_collection(&Namespace::new(
                            db,
                            coll.unwrap_or(""),
                        )),
                    ));
                }
                let mut full = r.pipeline.clone();
                full.extend_from_slice(stages);
                (Some(r.base.coll.as_str()), full.into())
            }
            None => (coll, stages.into()),
        };
        if let (None, Some(c)) = (&view, read_coll) {
            let memory = self.sort_memory(opts.max_sort_bytes, opts.allow_disk_use);
            let ns = Namespace::new(db, c);
            let hint = opts.hint.as_ref();
            if let Some(source) = self.streamed_source(&ns, &stages, &vars, hint, memory)? {
                let mut cursor = Cursor::new(cursor_ns, source);
                cursor.lsid = lsid;
                return self.first_batch(
                    cursor,
                    Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
                    false,
                );
            }
        }
        let input = PipelineInput {
            docs: view,
            hint: opts.hint,
            ..Default::default()
        };
        let (docs, pipeline) = self.run_stages(db, read_coll, &stages, &vars, input, 0)?;
        if let Some(out) = pipeline.output_stage() {
            let mut docs = docs;
            for d in &mut docs {
                d.remove(tailstream_query::text::TEXT_SCORE_FIELD);
            }
            self.write_output_stage(db, &cursor_ns, out, docs)?;
            return Ok(CursorBatch {
                cursor_id: 0,
                ns: cursor_ns,
                ..Default::default()
            });
        }
        let mut cursor = Cursor::new(cursor_ns, Source::Buffered(docs.into()));
        cursor.lsid = lsid;
        self.first_batch(
            cursor,
            Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
            false,
        )
    }

    /// Runs `stages` over collection `coll` of `db` (None: a database-level pipeline
    /// starting with a source stage) and returns what they yield, with the parsed
    /// pipeline (an output stage is the caller's to apply). `depth` counts the views
    /// entered through `$lookup`-like stages.
    pub(crate) fn run_stages(
        &self,
        db: &str,
        coll: Option<&str>,
        stages: &[Document],
        vars: &tailstream_query::expr::Variables,
        mut input: PipelineInput,
        depth: usize,
    ) -> Result<(Vec<Document>, Pipeline)> {
        let source = EngineSource {
            engine: self,
            depth,
        };
        if let (Some(first), Some(c)) = (stages.first(), coll) {
            if let Ok(spec) = first.get_document("$collStats") {
                let ns = Namespace::new(db, c);
                let stats = self.coll_stats_document(&ns, spec)?;
                let rest = Pipeline::parse(&stages[1..], db)?;
                let docs = rest.run(Box::new(std::iter::once(Ok(stats))), &source, vars)?;
                return Ok((docs, rest));
            }
        }
        let pipeline = Pipeline::parse(stages, db)?;
        let docs = match coll {
            Some(c) => {
                let ns = Namespace::new(db, c);
                let scan: Box<dyn Iterator<Item = Result<Document>> + '_> =
                    match (input.docs.take(), self.collection(&ns)) {
                        (Some(docs), _) => Box::new(docs.into_iter().map(Ok)),
                        (None, None) if is_oplog(&ns) => {
                            // The leading $match also filters the scan.
                            let matcher = leading_matcher(&pipeline, vars)?;
                            let scan = self.oplog_scan(&matcher, input.reverse);
                            Box::new(ScanIter::new(
                                &self.store,
                                Arc::new(oplog_meta()),
                                matcher,
                                scan,
                            ))
                        }
                        (None, None) => Box::new(std::iter::empty()),
                        (None, Some(meta)) => {
                            let (matcher, scan) =
                                self.pipeline_scan(&meta, &pipeline, vars, &input, None)?;
                            Box::new(ScanIter::new(&self.store, meta, matcher, scan))
                        }
                    };
                pipeline.run(scan, &source, vars)?
            }
            None => pipeline.run(Box::new(std::iter::empty()), &source, vars)?,
        };
        Ok((docs, pipeline))
    }

    /// The scan a pipeline over collection `meta` reads: its leading `$match` (with
    /// the `let` variables bound and the stage's collation) also filters the scan.
    fn pipeline_scan(
        &self,
        meta: &CollMeta,
        pipeline: &Pipeline,
        vars: &tailstream_query::expr::Variables,
        input: &PipelineInput,
        sort: Option<&SortSpec>,
    ) -> Result<(Arc<Matcher>, Scan)> {
        let matcher = leading_matcher(pipeline, vars)?;
        let natural = input
            .reverse
            .then(|| SortSpec::parse(&doc! {"$natural": -1}))
            .transpose()?;
        let sort = sort.or(natural.as_ref());
        let plan = read::plan(meta, &matcher, sort, input.hint.as_ref())?;
        assert!(
            plan.sorted || sort.is_none() || natural.is_some(),
            "a pipeline's sort dropped for a plan that does not give its order"
        );
        let mut scan = Scan::new(plan.access);
        if matcher.text().is_some() {
            scan.annotate_text_score = true;
            // The stage's own matcher checks the documents again: it needs the text
            // index too.
            if let Some(m) = pipeline.leading_matcher() {
                read::plan(meta, m, None, None)?;
            }
        }
        Ok((matcher, scan))
    }

    /// A cursor source running `stages` over collection `ns` as it is read, when every
    /// stage streams or is a `$sort`, a `$group`, a `$count`, a `$bucketAuto`, a
    /// partitioned `$setWindowFields` or a `$unionWith` (`Pipeline::segments`): a
    /// leading `$sort` the plan's index order gives is dropped (as mongod's sort is
    /// when an index provides it); each blocking stage runs over what the part before
    /// it gives, spilling past `memory` (a `$sort` through a find's sort's mechanism,
    /// `spill_sort`; a `$group` through `spill_group`; a `$bucketAuto` through
    /// `bucket_auto`; a `$setWindowFields` through `window`), a `$unionWith` gives
    /// that part's documents and then its own (`union`), and the part after the last
    /// one runs as the cursor is read. None for the other pipelines, which run in full
    /// before their first batch, and for the sources `run_stages` treats itself (a
    /// missing collection, the oplog, `$collStats`).
    pub(crate) fn streamed_source(
        &self,
        ns: &Namespace,
        stages: &[Document],
        vars: &tailstream_query::expr::Variables,
        hint: Option<&Bson>,
        memory: SortMemory,
    ) -> Result<Option<Source>> {
        let Some(meta) = self.collection(ns) else {
            return Ok(None);
        };
        if stages.first().is_some_and(|s| s.contains_key("$collStats")) {
            return Ok(None);
        }
        let mut pipeline = Pipeline::parse(stages, &ns.db)?;
        let mut sort = None;
        if let Some(i) = pipeline.leading_sort_position() {
            let (spec, _) = pipeline.leading_sort().expect("a $sort where it was found");
            let spec = SortSpec::parse(spec)?.with_collator(vars.collator.clone());
            let matcher = leading_matcher(&pipeline, vars)?;
            if read::serves_sort(&meta, &matcher, &spec, hint)? {
                pipeline = pipeline.without_stage(i);
                sort = Some(spec);
            }
        }
        let Ok(segments) = pipeline.segments(vars)? else {
            return Ok(None);
        };
        let input = PipelineInput {
            hint: hint.cloned(),
            ..Default::default()
        };
        let first = segments.first;
        let (matcher, scan) =
            self.pipeline_scan(&meta, first.pipeline(), vars, &input, sort.as_ref())?;
        let mut part = PipelineScan::new(Feed::scan(meta, matcher, scan), first);
        for (blocking, after) in segments.rest {
            let feed = match blocking {
                Blocking::Union(stage) => {
                    Feed::Union(Box::new(UnionFeed::new(part, stage, memory.clone())))
                }
                blocking => self.run_blocking(blocking, &mut part, &memory)?,
            };
            part = PipelineScan::new(feed, after);
        }
        Ok(Some(Source::Pipeline(Box::new(part))))
    }

    /// A blocking stage run over everything `input` gives: its output.
    fn run_blocking(
        &self,
        blocking: Blocking,
        input: &mut PipelineScan,
        memory: &SortMemory,
    ) -> Result<Feed> {
        Ok(match blocking {
            Blocking::Sort { spec, limit } => {
                tailstream_query::script::Operation::count_current(|s| s.note_sort_in_memory());
                match limit {
                    // At most `limit` held: a top-k sort.
                    Some(limit) => {
                        let mut top = TopK::new(spec, Some(limit));
                        while let Some(doc) = input.next(self)? {
                            top.push(doc);
                        }
                        Feed::Sorted(Sorted::Memory(top.finish().into()))
                    }
                    None => {
                        let mut sorter = SpillSort::new(spec, memory.clone());
                        while let Some(doc) = input.next(self)? {
                            sorter.push(doc)?;
                        }
                        Feed::Sorted(sorter.finish()?)
                    }
                }
            }
            Blocking::Group(stage) => Feed::Grouped(Box::new(GroupOutput::run(
                stage,
                input,
                self,
                memory.clone(),
            )?)),
            Blocking::Count(field) => {
                let mut n = 0usize;
                while input.next(self)?.is_some() {
                    n += 1;
                }
                Feed::Sorted(Sorted::Memory(Blocking::counted(&field, n).into()))
            }
            Blocking::BucketAuto(stage) => {
                let buckets = read::bucket_auto::run(stage, input, self, memory.clone())?;
                Feed::Sorted(Sorted::Memory(buckets.into()))
            }
            Blocking::Window(stage) => Feed::Window(Box::new(WindowOutput::run(
                stage,
                input,
                self,
                memory.clone(),
            )?)),
            Blocking::Union(_) => unreachable!("a $unionWith takes its input part whole"),
        })
    }

    /// Other collections as `$lookup`, `$unionWith` and `$graphLookup` read them.
    pub(crate) fn collection_source(&self) -> impl CollectionSource + '_ {
        EngineSource {
            engine: self,
            depth: 0,
        }
    }

    /// The results of a resolved view over `base` (its collection's documents as a
    /// transaction sees them).
    pub(crate) fn view_documents(
        &self,
        view: &crate::catalog::views::ResolvedView,
        base: Vec<Document>,
    ) -> Result<Vec<Document>> {
        let input = PipelineInput {
            docs: Some(base),
            ..Default::default()
        };
        let vars = tailstream_query::expr::Variables::default();
        let (docs, _) = self.run_stages(
            &view.base.db,
            Some(&view.base.coll),
            &view.pipeline,
            &vars,
            input,
            0,
        )?;
        Ok(docs)
    }

    /// A find on a view, run as mongod runs it: as an aggregation of the view's
    /// pipeline followed by `$match`, `$sort`, `$skip`, `$limit` and `$project`.
    fn find_view(
        &self,
        ns: &Namespace,
        view: &crate::catalog::views::ResolvedView,
        req: FindRequest,
    ) -> Result<CursorBatch> {
        let unsupported = |what: &str| {
            Error::new(
                codes::INVALID_PIPELINE_OPERATOR,
                format!("Option {what} not supported in aggregation."),
            )
        };
        if req.await_data && !req.tailable {
            return Err(Error::failed_to_parse(
                "Cannot set 'awaitData' without also setting 'tailable'",
            ));
        }
        if req.min.is_some() {
            return Err(unsupported("min"));
        }
        if req.max.is_some() {
            return Err(unsupported("max"));
        }
        if req.tailable {
            return Err(Error::new(
                codes::INVALID_PIPELINE_OPERATOR,
                "Tailable cursors are not supported in aggregation.",
            ));
        }
        if req.no_cursor_timeout {
            return Err(unsupported("noCursorTimeout"));
        }
        // mongod's exception: a single batch of one document (findOne).
        if req.single_batch && req.limit != Some(1) {
            return Err(unsupported("singleBatch"));
        }
        if matches!(req.limit, Some(l) if l < 0) {
            return Err(Error::bad_value("LIMIT must be non-negative"));
        }
        let batch_size = check_batch_size(req.batch_size)?;
        let mut stages = view.pipeline.clone();
        if !req.filter.is_empty() {
            stages.push(doc! {"$match": req.filter.clone()});
        }
        let mut reverse = false;
        match &req.sort {
            // `$natural` is the order the collection under the view is read in.
            Some(s) if s.len() == 1 && s.contains_key("$natural") => {
                reverse = s.get("$natural").and_then(as_f64).is_some_and(|d| d < 0.0);
            }
            Some(s) if !s.is_empty() => stages.push(doc! {"$sort": s.clone()}),
            _ => {}
        }
        if req.skip > 0 {
            stages.push(doc! {"$skip": req.skip as i64});
        }
        if let Some(l) = req.limit.filter(|l| *l > 0) {
            stages.push(doc! {"$limit": l});
        }
        if let Some(p) = req.projection.as_ref().filter(|p| !p.is_empty()) {
            stages.push(doc! {"$project": p.clone()});
        }
        let vars = match &req.let_vars {
            Some(l) => tailstream_query::expr::let_variables(l)?,
            None => tailstream_query::expr::Variables::default(),
        };
        let input = PipelineInput {
            docs: None,
            hint: req.hint.clone(),
            reverse,
        };
        let docs = self.run_on_view_base(view, &stages, &vars, input)?;
        let mut cursor = Cursor::new(ns.full(), Source::Buffered(docs.into()));
        cursor.lsid = req.lsid.clone();
        self.first_batch(
            cursor,
            Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
            req.single_batch,
        )
    }

    /// The documents of a view matching `query`, with `extra` stages after the match.
    fn view_matches(
        &self,
        view: &crate::catalog::views::ResolvedView,
        query: &Document,
        extra: Vec<Document>,
        hint: Option<&Bson>,
    ) -> Result<Vec<Document>> {
        let mut stages = view.pipeline.clone();
        if !query.is_empty() {
            stages.push(doc! {"$match": query.clone()});
        }
        stages.extend(extra);
        let input = PipelineInput {
            docs: None,
            hint: hint.cloned(),
            reverse: false,
        };
        let vars = tailstream_query::expr::Variables::default();
        self.run_on_view_base(view, &stages, &vars, input)
    }

    /// Runs `stages` (the view's pipeline and what follows it) over the view's base collection.
    fn run_on_view_base(
        &self,
        view: &crate::catalog::views::ResolvedView,
        stages: &[Document],
        vars: &tailstream_query::expr::Variables,
        input: PipelineInput,
    ) -> Result<Vec<Document>> {
        let (docs, _) =
            self.run_stages(&view.base.db, Some(&view.base.coll), stages, vars, input, 0)?;
        Ok(docs)
    }

    /// `$out` replaces the target collection; `$merge` upserts into it by `_id`.
    pub(crate) fn write_output_stage(
        &self,
        db: &str,
        source_ns: &str,
        stage: &Document,
        docs: Vec<Document>,
    ) -> Result<WriteOutcome> {
        let (name, spec) = stage
            .iter()
            .next()
            .ok_or_else(|| Error::internal("empty output stage"))?;
        let target = |v: &Bson| -> Result<Namespace> {
            match v {
                Bson::String(c) => Ok(Namespace::new(db, c)),
                Bson::Document(d) => Ok(Namespace::new(
                    d.get_str("db").unwrap_or(db),
                    d.get_str("coll")
                        .map_err(|_| Error::failed_to_parse("output stage needs a collection"))?,
                )),
                _ => Err(Error::failed_to_parse(format!(
                    "{name} needs a collection name or a document"
                ))),
            }
        };
        let refuse_view = |ns: &Namespace| -> Result<()> {
            if self.view(ns).is_some() {
                return Err(executor_error(
                    source_ns,
                    crate::catalog::views::not_a_collection(ns),
                ));
            }
            Ok(())
        };
        if name == "$out" {
            let ns = target(spec)?;
            refuse_view(&ns)?;
            self.drop_collection(&ns)?;
            let out = self.insert_documents(&ns, docs, true)?;
            if let Some(e) = out.errors.first() {
                return Err(e.error.clone());
            }
            if out.n == 0 {
                self.create_collection(&ns, Document::new())?;
            }
            return Ok(out);
        }
        let merge = crate::write::merge::MergeSpec::parse(db, spec)?;
        refuse_view(&merge.into)?;
        self.write_merge(&merge, docs)
    }

    /// The document `$collStats` produces (storageStats and/or count, as requested), for
    /// a collection or the oplog.
    fn coll_stats_document(&self, ns: &Namespace, spec: &Document) -> Result<Document> {
        let scale = match spec.get("storageStats") {
            Some(Bson::Document(s)) => s.get("scale").and_then(as_i64).unwrap_or(1),
            _ => 1,
        };
        let Some(stats) = self.storage_stats(ns, scale)? else {
            return Err(Error::new(codes::NAMESPACE_NOT_FOUND, format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{}] not found.", ns.full())));
        };
        let mut out = doc! {"ns": ns.full(), "localTime": bson::DateTime::now()};
        if spec.contains_key("storageStats") {
            out.insert("storageStats", stats.clone());
        }
        if spec.contains_key("count") {
            out.insert(
                "count",
                stats.get("count").cloned().unwrap_or(Bson::Int32(0)),
            );
        }
        Ok(out)
    }

    /// Document count and total BSON bytes of a collection (a key scan; for stats commands).
    pub fn collection_numbers(&self, meta: &CollMeta) -> (i64, i64) {
        let (mut count, mut size) = (0i64, 0i64);
        let prefix = crate::core::keys::coll_prefix(meta.id);
        for (_, v) in self
            .store
            .scan_prefix(tailstream_storage::Space::Docs, &prefix, false)
            .flatten()
        {
            count += 1;
            size += match read::stored_bytes(&self.store, &v) {
                Ok(read::StoredDoc::InOplog(entry)) => read::inserted_document(&entry)
                    .map(|d| d.as_bytes().len())
                    .unwrap_or(0) as i64,
                _ => v.len() as i64,
            };
        }
        (count, size)
    }

    /// The plan a find would use, for explain.
    pub fn explain_find(
        &self,
        ns: &Namespace,
        filter: &Document,
        sort: Option<&Document>,
        hint: Option<&Bson>,
        collation: Option<&Document>,
    ) -> Result<Document> {
        let meta = self.collection(ns);
        let collator = operation_collator(meta.as_deref(), collation)?;
        let matcher = Matcher::for_query_with_collation(filter, collator.clone())?;
        let sort = match sort {
            Some(s) if !s.is_empty() => Some(SortSpec::parse(s)?.with_collator(collator)),
            _ => None,
        };
        let Some(meta) = meta else {
            return Ok(doc! {"stage": "EOF"});
        };
        let plan = read::plan(&meta, &matcher, sort.as_ref(), hint)?;
        let mut winning = plan.explain();
        if !plan.sorted {
            winning = doc! {"stage": "SORT", "inputStage": winning};
        }
        Ok(winning)
    }
}

pub(crate) fn check_batch_size(b: Option<i64>) -> Result<Option<usize>> {
    match b {
        Some(n) if n < 0 => Err(Error::bad_value(format!(
            "BatchSize value must be non-negative, but received: {n}"
        ))),
        Some(n) => Ok(Some(n as usize)),
        None => Ok(None),
    }
}

/// Whether `ns` is the oplog, `local.oplog.rs` (no catalog entry: read by scans of
/// the oplog space).
fn is_oplog(ns: &Namespace) -> bool {
    ns.db == OPLOG_DB && ns.coll == OPLOG_COLL
}

/// The oplog's pseudo-collection metadata (scans of it ignore the id).
fn oplog_meta() -> CollMeta {
    CollMeta {
        ns: Namespace::new(OPLOG_DB, OPLOG_COLL),
        id: 0,
        uuid: bson::Uuid::from_bytes([0; 16]),
        options: doc! {"capped": true},
        indexes: vec![],
    }
}

/// Where an oplog query can start: the lower bound of its `ts` predicate.
fn oplog_start(matcher: &Matcher) -> ClusterTime {
    for (path, b) in matcher.index_predicates() {
        if path != "ts" {
            continue;
        }
        let v = b.eq.as_ref().or(b.gte.as_ref()).or(b.gt.as_ref());
        if let Some(Bson::Timestamp(t)) = v {
            return ClusterTime::from(*t);
        }
    }
    ClusterTime::ZERO
}

fn collect_path_values(v: &Bson, parts: &[&str], out: &mut Vec<Bson>) {
    if parts.is_empty() {
        match v {
            Bson::Array(a) => out.extend(a.iter().cloned()),
            other => out.push(other.clone()),
        }
        return;
    }
    match v {
        Bson::Document(d) => {
            if let Some(c) = d.get(parts[0]) {
                collect_path_values(c, &parts[1..], out);
            }
        }
        Bson::Array(a) => {
            if let Some(i) = tailstream_query::path::parse_index(parts[0]) {
                if let Some(e) = a.get(i) {
                    collect_path_values(e, &parts[1..], out);
                    return;
                }
            }
            for e in a {
                if let Bson::Document(_) = e {
                    collect_path_values(e, parts, out);
                }
            }
        }
        _ => {}
    }
}

/// A lazy iterator over a scan, reading storage in chunks.
struct ScanIter<'a> {
    store: &'a Store,
    meta: Arc<CollMeta>,
    matcher: Arc<Matcher>,
    scan: Scan,
    buf: VecDeque<Document>,
}

impl<'a> ScanIter<'a> {
    fn new(store: &'a Store, meta: Arc<CollMeta>, matcher: Arc<Matcher>, scan: Scan) -> Self {
        ScanIter {
            store,
            meta,
            matcher,
            scan,
            buf: VecDeque::new(),
        }
    }
}

impl Iterator for ScanIter<'_> {
    type Item = Result<Document>;
    fn next(&mut self) -> Option<Result<Document>> {
        while self.buf.is_empty() && !self.scan.done {
            let mut got = Vec::new();
            if let Err(e) =
                self.scan
                    .next_batch(self.store, self.meta.id, &self.matcher, 512, &mut got)
            {
                self.scan.done = true;
                return Some(Err(e));
            }
            self.buf.extend(got.into_iter().map(|(_, d)| d));
        }
        self.buf.pop_front().map(Ok)
    }
}

/// How a pipeline's input collection is read.
#[derive(Debug, Default)]
pub(crate) struct PipelineInput {
    /// The documents to use instead of the collection's (a transaction's view of them).
    pub docs: Option<Vec<Document>>,
    /// An index to read the collection through.
    pub hint: Option<Bson>,
    /// Read in reverse natural order (`$natural: -1` of a find on a view).
    pub reverse: bool,
}

/// A pipeline's leading `$match` (everything when it has none), with the `let`
/// variables bound and the operation's collation.
fn leading_matcher(
    pipeline: &Pipeline,
    vars: &tailstream_query::expr::Variables,
) -> Result<Arc<Matcher>> {
    let leading = pipeline.leading_match().cloned().unwrap_or_default();
    let leading = if vars.vars.is_empty() {
        leading
    } else {
        tailstream_query::pipeline::substitute_vars(&leading, vars)
    };
    Ok(Arc::new(Matcher::with_collation(
        &leading,
        vars.collator.clone(),
    )?))
}

/// mongod's wrapping of an error met while an aggregation runs.
fn executor_error(ns: &str, e: Error) -> Error {
    Error::new(
        e.code,
        format!(
            "Executor error during aggregate command on namespace: {ns} :: caused by :: {}",
            e.message
        ),
    )
}

/// Other collections for `$lookup`, `$unionWith` and `$graphLookup` (views included).
struct EngineSource<'a> {
    engine: &'a Engine,
    /// Views entered so far through such stages (cycles are refused when views are
    /// stored; this bounds the recursion regardless).
    depth: usize,
}

impl CollectionSource for EngineSource<'_> {
    fn scan(&self, db: &str, coll: &str) -> Result<Vec<Document>> {
        let ns = Namespace::new(db, coll);
        if let Some(view) = self.engine.resolve_view(&ns)? {
            if self.depth >= crate::catalog::views::MAX_VIEW_DEPTH {
                return Err(Error::new(
                    crate::catalog::views::VIEW_DEPTH_LIMIT_EXCEEDED,
                    format!(
                        "View depth too deep or view cycle detected; maximum depth is {}",
                        crate::catalog::views::MAX_VIEW_DEPTH
                    ),
                ));
            }
            let vars = tailstream_query::expr::Variables::default();
            let (docs, _) = self.engine.run_stages(
                &view.base.db,
                Some(&view.base.coll),
                &view.pipeline,
                &vars,
                PipelineInput::default(),
                self.depth + 1,
            )?;
            return Ok(docs);
        }
        let Some(meta) = self.engine.collection(&ns) else {
            return Ok(Vec::new());
        };
        let all = Matcher::new(&Document::new())?;
        let mut scan = Scan::new(Access::CollScan { reverse: false });
        Ok(scan
            .collect_all(&self.engine.store, meta.id, &all)?
            .into_iter()
            .map(|(_, d)| d)
            .collect())
    }

    fn find_equal(
        &self,
        db: &str,
        coll: &str,
        field: &str,
        values: &[Bson],
        collator: Option<&Arc<Collator>>,
    ) -> Result<Option<Vec<Document>>> {
        let ns = Namespace::new(db, coll);
        if self.engine.resolve_view(&ns)?.is_some() {
            return Ok(None);
        }
        let Some(meta) = self.engine.collection(&ns) else {
            return Ok(Some(Vec::new()));
        };
        // Record keys are `_id`s (the scan's order) except in these.
        if meta.is_capped() || meta.is_timeseries() {
            return Ok(None);
        }
        let filter = doc! {field: {"$in": values.to_vec()}};
        let matcher = Matcher::for_query_with_collation(&filter, collator.cloned())?;
        let plan = read::plan(&meta, &matcher, None, None)?;
        if !matches!(
            plan.access,
            Access::IndexScan { .. } | Access::IdPoints(_) | Access::IdRange { .. }
        ) {
            return Ok(None);
        }
        let mut found =
            Scan::new(plan.access).collect_all(&self.engine.store, meta.id, &matcher)?;
        // The scan's order: by record key.
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(found.into_iter().map(|(_, d)| d).collect()))
    }
}

/// A numeric command argument as i64 (ints, longs and integral doubles).
pub fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        other => as_f64(other).filter(|f| f.is_finite()).map(|f| f as i64),
    }
}

/// The key fields of the index a plan reads, for `returnKey`. Documents are stored by
/// `_id`, so a plan that reads them in `_id` order because of the query, the sort or a
/// hint is the `_id` index; a plain collection scan uses no index.
fn plan_key_fields(plan: &Plan, sort: Option<&SortSpec>, hint: Option<&Bson>) -> Vec<String> {
    let id = || vec!["_id".to_string()];
    match &plan.access {
        Access::IndexScan { index, .. } => index
            .pattern
            .fields
            .iter()
            .map(|(f, _)| f.clone())
            .collect(),
        Access::IdPoints(_) | Access::IdRange { .. } => id(),
        Access::CollScan { .. } => {
            let by_id_sort = sort
                .map(|s| s.fields.len() == 1 && s.fields[0].0 == "_id")
                .unwrap_or(false);
            let id_hint = match hint {
                Some(Bson::String(n)) => n == "_id_",
                Some(Bson::Document(d)) => d.contains_key("_id"),
                _ => false,
            };
            if by_id_sort || id_hint {
                id()
            } else {
                Vec::new()
            }
        }
        Access::OplogScan { .. } | Access::NaturalScan { .. } => Vec::new(),
    }
}

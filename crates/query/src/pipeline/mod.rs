//! In-memory aggregation pipelines: parsing/validation of stages and their execution over
//! documents. Cross-collection stages (`$lookup`, `$graphLookup`, `$unionWith`) read other
//! collections through [`CollectionSource`]; `$out`/`$merge` are reported by
//! [`Pipeline::output_stage`] and executed by the engine.

mod accumulator_n;
#[cfg(test)]
mod accumulator_n_tests;
mod group;
mod project;
mod stages;

use crate::error::{Error, Result};
use crate::expr::Variables;
use crate::matcher::Matcher;
use bson::{Bson, Document};
use stages::Stage;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::path::set_path;
pub use group::{
    group_key, AccOp, AccSpec, Grouper, HeldGroups, SpilledGroups, DEFAULT_MAX_GROUP_BYTES,
    SPILL_ORDER_FIELD,
};
pub use project::Tree as ProjectionTree;
pub use stages::bucket_auto::{
    keyed_memory_len as bucket_auto_memory_len, record as bucket_auto_record, BucketCutter,
    Keyed as BucketAutoKeyed,
};
pub use stages::{matcher_values, substitute_vars};

/// Access to other collections for $lookup / $unionWith / $graphLookup, supplied by the engine.
pub trait CollectionSource {
    fn scan(&self, db: &str, coll: &str) -> crate::Result<Vec<bson::Document>>;

    /// The documents of `coll` whose `field` equals one of `values` (a query's `$in`,
    /// under `collator`; none of them null, undefined or a regular expression), in the
    /// order [`Self::scan`] gives them, when an index on `field` finds them; None when
    /// none does (the caller then joins over the whole scan).
    fn find_equal(
        &self,
        _db: &str,
        _coll: &str,
        _field: &str,
        _values: &[Bson],
        _collator: Option<&Arc<crate::collation::Collator>>,
    ) -> crate::Result<Option<Vec<bson::Document>>> {
        Ok(None)
    }
}

/// A source with no collections (every scan is empty).
pub struct NoCollections;

impl CollectionSource for NoCollections {
    fn scan(&self, _db: &str, _coll: &str) -> Result<Vec<Document>> {
        Ok(Vec::new())
    }
}

/// A parsed aggregation pipeline.
pub struct Pipeline {
    stages: Vec<Stage>,
    specs: Vec<Document>,
    db: String,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("db", &self.db)
            .field("stages", &self.specs)
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Top,
    Facet,
    Lookup,
    UnionWith,
}

fn stage_name(spec: &Document) -> Result<(&str, &Bson)> {
    if spec.len() != 1 {
        return Err(Error::location(
            40323,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    let (k, v) = spec.iter().next().unwrap();
    Ok((k.as_str(), v))
}

impl Pipeline {
    /// Parses and validates all stages up front (errors before any data is read).
    pub fn parse(stages: &[bson::Document], db: &str) -> crate::Result<Pipeline> {
        Self::parse_in(stages, db, Context::Top)
    }

    fn parse_in(stages: &[Document], db: &str, ctx: Context) -> Result<Pipeline> {
        let mut parsed = Vec::with_capacity(stages.len());
        let n = stages.len();
        for (i, spec) in stages.iter().enumerate() {
            let (name, arg) = stage_name(spec)?;
            if (name == "$out" || name == "$merge") && ctx != Context::Top {
                return Err(match ctx {
                    Context::Facet => Error::location(
                        40600,
                        format!("{name} is not allowed to be used within a $facet stage"),
                    ),
                    Context::Lookup => Error::location(
                        51047,
                        format!("{name} is not allowed within a $lookup's sub-pipeline"),
                    ),
                    _ => Error::location(
                        31441,
                        format!("{name} is not allowed within a $unionWith's sub-pipeline"),
                    ),
                });
            }
            if (name == "$out" || name == "$merge") && i + 1 != n {
                return Err(Error::location(
                    40601,
                    format!("{name} can only be the final stage in the pipeline"),
                ));
            }
            if ctx == Context::Facet
                && matches!(
                    name,
                    "$facet" | "$collStats" | "$indexStats" | "$geoNear" | "$changeStream"
                )
            {
                return Err(Error::location(
                    40600,
                    format!("{name} is not allowed to be used within a $facet stage"),
                ));
            }
            if name == "$documents" && i != 0 {
                return Err(Error::location(
                    40602,
                    "$documents is only valid as the first stage in a pipeline",
                ));
            }
            let stage = Stage::parse(name, arg, db)?;
            // `$text` needs the collection's text index: only the first stage reads it.
            if stage.matcher().is_some_and(|m| m.text().is_some())
                && (i != 0 || ctx != Context::Top)
            {
                return Err(Error::location(
                    17313,
                    "$match with $text is only allowed as the first pipeline stage",
                ));
            }
            parsed.push(stage);
        }
        // $sort immediately followed by $limit: keep only the top k while sorting.
        for i in 0..parsed.len().saturating_sub(1) {
            if let Stage::Limit(k) = parsed[i + 1] {
                if let Stage::Sort { limit, .. } = &mut parsed[i] {
                    *limit = Some(k);
                }
            }
        }
        Ok(Pipeline {
            stages: parsed,
            specs: stages.to_vec(),
            db: db.to_string(),
        })
    }
    /// The leading `$match`'s matcher, for the engine to bind the indexes its special
    /// predicates (`$text`) need.
    pub fn leading_matcher(&self) -> Option<&Matcher> {
        self.stages.first().and_then(Stage::matcher)
    }

    /// The leading `$match` filter (if the first stage is `$match`), so the engine can use an index.
    pub fn leading_match(&self) -> Option<&bson::Document> {
        match self.stages.first() {
            Some(Stage::Match(m)) => Some(&m.filter),
            _ => None,
        }
    }

    /// The `$sort` specification that directly follows the leading `$match` (or is first),
    /// and the `$limit` right after it, as hints for the engine.
    pub fn leading_sort(&self) -> Option<(&bson::Document, Option<usize>)> {
        let i = if matches!(self.stages.first(), Some(Stage::Match(_))) {
            1
        } else {
            0
        };
        match self.stages.get(i) {
            Some(Stage::Sort { limit, .. }) => self.specs[i]
                .get_document("$sort")
                .ok()
                .map(|d| (d, *limit)),
            _ => None,
        }
    }

    /// The output stage (`{$out: ...}` or `{$merge: ...}`) if present, for the engine to execute.
    pub fn output_stage(&self) -> Option<&bson::Document> {
        match self.stages.last() {
            Some(Stage::Output) => self.specs.last(),
            _ => None,
        }
    }

    /// The raw stage specifications.
    pub fn stage_specs(&self) -> &[Document] {
        &self.specs
    }

    /// True if the pipeline starts with `$documents` (it reads no collection).
    pub fn starts_with_documents(&self) -> bool {
        matches!(self.stages.first(), Some(Stage::Documents(_)))
    }

    /// Runs over an input iterator, producing the output documents.
    pub fn run(
        &self,
        input: Box<dyn Iterator<Item = crate::Result<bson::Document>> + '_>,
        source: &dyn CollectionSource,
        vars: &crate::expr::Variables,
    ) -> crate::Result<Vec<bson::Document>> {
        let vars = vars.with_now();
        let ctx = RunCtx {
            source,
            cache: RefCell::new(RunCache::default()),
        };
        self.run_in(input, &ctx, &vars)
    }

    fn run_in<'i>(
        &self,
        input: Box<dyn Iterator<Item = Result<Document>> + 'i>,
        ctx: &RunCtx,
        vars: &Variables,
    ) -> Result<Vec<Document>> {
        let mut run = Run::new(self, ctx, vars)?;
        let mut input = input;
        // Asked before each document is read: a `$limit` met stops the reading.
        while run.wants_more() {
            let Some(item) = input.next() else {
                break;
            };
            run.push(item?)?;
        }
        run.finish()
    }

    /// Per-run matchers for `$match` stages that refer to variables, or that compare
    /// under the operation's collation (by stage index).
    fn run_matchers(&self, vars: &Variables) -> Result<HashMap<usize, Matcher>> {
        let mut matchers = HashMap::new();
        for (i, st) in self.stages.iter().enumerate() {
            if let Stage::Match(m) = st {
                if let Some(matcher) = run_matcher(m, vars)? {
                    matchers.insert(i, matcher);
                }
            }
        }
        Ok(matchers)
    }

    /// How many stages, from the first, take one document at a time.
    fn streaming_prefix(&self) -> usize {
        self.stages
            .iter()
            .position(|s| !s.is_streaming())
            .unwrap_or(self.stages.len())
    }

    /// Each stage's count still to go: a `$skip`'s or `$limit`'s number, 0 for others.
    fn counters(&self) -> Vec<usize> {
        self.stages
            .iter()
            .map(|s| match s {
                Stage::Skip(n) | Stage::Limit(n) => *n,
                _ => 0,
            })
            .collect()
    }

    /// Whether a `$limit` among the first `prefix` stages has let all its documents pass.
    fn limit_reached(&self, prefix: usize, counters: &[usize]) -> bool {
        self.stages[..prefix]
            .iter()
            .zip(counters)
            .any(|(s, n)| matches!(s, Stage::Limit(_)) && *n == 0)
    }

    /// One input document through the first `prefix` (streaming) stages.
    fn stream_one(
        &self,
        doc: Document,
        prefix: usize,
        ctx: &RunCtx,
        vars: &Variables,
        matchers: &HashMap<usize, Matcher>,
        counters: &mut [usize],
    ) -> Result<Vec<Document>> {
        let mut batch = vec![doc];
        for (i, stage) in self.stages[..prefix].iter().enumerate() {
            batch = stage.apply_streaming(batch, ctx, vars, matchers.get(&i), &mut counters[i])?;
            if batch.is_empty() {
                break;
            }
        }
        Ok(batch)
    }

    /// Where [`Self::leading_sort`] is.
    pub fn leading_sort_position(&self) -> Option<usize> {
        let i = usize::from(matches!(self.stages.first(), Some(Stage::Match(_))));
        matches!(self.stages.get(i), Some(Stage::Sort { .. })).then_some(i)
    }

    /// Whether every stage but the one at `except` streams and none writes.
    pub fn streams_except(&self, except: Option<usize>) -> bool {
        self.output_stage().is_none()
            && self
                .stages
                .iter()
                .enumerate()
                .all(|(i, s)| Some(i) == except || s.is_streaming())
    }

    /// The pipeline without its stage at `i` (a `$sort` its input's order already
    /// gives).
    pub fn without_stage(mut self, i: usize) -> Pipeline {
        self.stages.remove(i);
        self.specs.remove(i);
        self
    }

    /// The pipeline cut at its blocking stages, when each of them is a `$sort`, a
    /// `$group`, a `$count`, a `$bucketAuto`, a partitioned `$setWindowFields` or a
    /// `$unionWith` and it writes nothing: the streaming
    /// stages before the first, then each blocking stage with the streaming stages
    /// after it, for the engine to run each blocking stage over what the part before it
    /// gives (spilling past its memory limit; a `$unionWith` passes it on, then its own
    /// collection's) and stream the next part over its output. The pipeline back
    /// otherwise. With no blocking stage: one streamed part, as [`Self::streamed`].
    pub fn segments(mut self, vars: &Variables) -> Result<std::result::Result<Segments, Pipeline>> {
        let cuttable = |s: &Stage| {
            s.is_streaming()
                || matches!(
                    s,
                    Stage::Sort { .. }
                        | Stage::Group { .. }
                        | Stage::Count(_)
                        | Stage::UnionWith { .. }
                        | Stage::BucketAuto(_)
                )
                // Partitioned: one partition held at a time (unpartitioned, the whole
                // input is one, held either way).
                || matches!(s, Stage::SetWindowFields(w) if w.partition_by.is_some())
        };
        if self.output_stage().is_some() || !self.stages.iter().all(cuttable) {
            return Ok(Err(self));
        }
        let vars = vars.with_now();
        let mut rest = Vec::new();
        while let Some(at) = self.stages.iter().rposition(|s| !s.is_streaming()) {
            let after = Pipeline {
                stages: self.stages.split_off(at + 1),
                specs: self.specs.split_off(at + 1),
                db: self.db.clone(),
            };
            self.specs.pop();
            let blocking = match self.stages.pop() {
                Some(Stage::Sort { spec, limit }) => Blocking::Sort {
                    spec: stages::sort_limit_sample::sorted_under(spec, &vars),
                    limit,
                },
                Some(Stage::Group { id, accs }) => Blocking::Group(GroupStage {
                    id,
                    accs,
                    vars: vars.clone(),
                }),
                Some(Stage::Count(field)) => Blocking::Count(field),
                Some(Stage::UnionWith { db, coll, pipeline }) => Blocking::Union(UnionStage {
                    db,
                    coll,
                    pipeline,
                    vars: vars.clone(),
                }),
                Some(Stage::BucketAuto(stage)) => Blocking::BucketAuto(BucketAutoRun {
                    stage,
                    vars: vars.clone(),
                }),
                Some(Stage::SetWindowFields(stage)) => Blocking::Window(WindowRun {
                    stage,
                    vars: vars.clone(),
                }),
                _ => unreachable!("a blocking stage at {at}"),
            };
            let Ok(after) = after.streamed(&vars)? else {
                unreachable!("the stages after the last blocking one stream")
            };
            rest.push((blocking, after));
        }
        rest.reverse();
        let Ok(first) = self.streamed(&vars)? else {
            unreachable!("the stages before the first blocking one stream")
        };
        Ok(Ok(Segments { first, rest }))
    }

    /// This pipeline run as its cursor is read, when every stage streams and it writes
    /// nothing (see [`Streamed`]); the pipeline back otherwise.
    pub fn streamed(self, vars: &Variables) -> Result<std::result::Result<Streamed, Pipeline>> {
        if !self.streams_except(None) {
            return Ok(Err(self));
        }
        Ok(Ok(Streamed {
            matchers: self.run_matchers(vars)?,
            counters: self.counters(),
            vars: vars.with_now(),
            pipeline: self,
            lookups: RunCache::default(),
        }))
    }
}

/// The matcher a run builds for `$match` `m`, when its filter refers to variables or
/// compares under the operation's collation (None: the stage's own serves).
fn run_matcher(m: &stages::MatchStage, vars: &Variables) -> Result<Option<Matcher>> {
    let substitute = m.uses_vars && !vars.vars.is_empty();
    if m.rest.is_empty() || !(substitute || vars.collator.is_some()) {
        return Ok(None);
    }
    let filter = if substitute {
        substitute_vars(&m.rest, vars)
    } else {
        m.rest.clone()
    };
    Matcher::with_collation(&filter, vars.collator.clone()).map(Some)
}

/// A pipeline cut at its blocking stages ([`Pipeline::segments`]).
pub struct Segments {
    /// The streaming stages before the first blocking one, over the collection.
    pub first: Streamed,
    /// Each blocking stage, with the streaming stages over its output.
    pub rest: Vec<(Blocking, Streamed)>,
}

/// A stage that reads all its input before it gives anything, for the engine to run
/// between streamed parts of a pipeline ([`Pipeline::segments`]).
pub enum Blocking {
    /// A `$sort`'s order (under the run's collation) and the `$limit` folded into it.
    Sort {
        spec: crate::sort::SortSpec,
        limit: Option<usize>,
    },
    /// A `$group`.
    Group(GroupStage),
    /// `$count`: its output field.
    Count(String),
    /// `$unionWith`: not blocking, but a part of its own (its input, then another
    /// collection's documents through its pipeline).
    Union(UnionStage),
    /// `$bucketAuto`: its input sorted by `groupBy`, then cut into buckets.
    BucketAuto(BucketAutoRun),
    /// `$setWindowFields` with a `partitionBy`: its input sorted by partition and
    /// `sortBy`, then run one partition at a time.
    Window(WindowRun),
}

impl Blocking {
    /// `$count`'s output after `n` documents (none for none, as mongod's).
    pub fn counted(field: &str, n: usize) -> Vec<Document> {
        stages::group_bucket::count_of(field, n)
    }
}

/// A `$group` for the engine to run: [`Self::grouper`] folds the input, and what it
/// spilled is folded by [`Self::spilled`] once sorted by group.
pub struct GroupStage {
    id: crate::expr::Expr,
    accs: Vec<AccSpec>,
    vars: Variables,
}

impl GroupStage {
    pub fn grouper(&self) -> group::Grouper<'_> {
        group::Grouper::new(&self.id, &self.accs, &self.vars)
    }

    pub fn spilled(self) -> group::SpilledGroups {
        group::SpilledGroups::new(self.accs, self.vars)
    }
}

/// A `$bucketAuto` for the engine to run: it sorts what the stage needs of each input
/// document ([`Self::keyed`]: its value and its accumulators' arguments, not the
/// document) by value, counting them (on disk past its memory limit, as mongod's
/// sorter does for this stage, as [`bucket_auto_record`]s in [`Self::record_order`]),
/// and gives them in that order to [`Self::cutter`] (held: [`Self::bucket_held`]).
pub struct BucketAutoRun {
    stage: Box<stages::bucket_auto::BucketAutoStage>,
    vars: Variables,
}

impl BucketAutoRun {
    /// What the stage needs of a document.
    pub fn keyed(&self, doc: &Document) -> Result<BucketAutoKeyed> {
        self.stage.keyed(doc, &self.vars)
    }

    /// The order sort records are sorted in.
    pub fn record_order(&self) -> crate::sort::SortSpec {
        stages::bucket_auto::record_order(&self.vars)
    }

    /// The buckets of documents whose values and arguments were all held.
    pub fn bucket_held(&self, held: Vec<BucketAutoKeyed>) -> Result<Vec<Document>> {
        stages::bucket_auto::bucket_held(&self.stage, held, &self.vars)
    }

    /// The buckets of `total` documents given in `groupBy` order.
    pub fn cutter(&self, total: usize) -> BucketCutter<'_> {
        BucketCutter::new(&self.stage, total, &self.vars)
    }
}

/// A partitioned `$setWindowFields` for the engine to run: it sorts each input
/// document's [`Self::record`] by [`Self::order`] (partition, then `sortBy`; on disk
/// past the sort memory limit), then gives each partition's documents, read back with
/// [`Self::unpack`] and cut where [`Self::same_partition`] ends, to
/// [`Self::partition`]. One partition is held at a time (mongod holds one too, and
/// spills a large one; here a partition is held whole).
pub struct WindowRun {
    stage: Box<stages::window::WindowFieldsStage>,
    vars: Variables,
}

impl WindowRun {
    /// A document as a sort record (its partition, and itself).
    pub fn record(&self, doc: Document) -> Result<Document> {
        stages::window::partition_record(&self.stage, doc, &self.vars)
    }

    /// The order records are sorted in.
    pub fn order(&self) -> crate::sort::SortSpec {
        stages::window::partition_order(&self.stage, &self.vars)
    }

    /// A sorted record's partition and document.
    pub fn unpack(&self, record: Document) -> Result<(Bson, Document)> {
        stages::window::unpack_partition_record(record)
    }

    /// Whether two partition values name the same partition (under the collation).
    pub fn same_partition(&self, a: &Bson, b: &Bson) -> bool {
        crate::compare::cmp_bson_with(a, b, self.vars.collator.as_deref())
            == std::cmp::Ordering::Equal
    }

    /// One partition's documents (in `sortBy` order) with the stage's outputs set.
    pub fn partition(&self, docs: Vec<Document>) -> Result<Vec<Document>> {
        stages::window::window_partition(&self.stage, docs, &self.vars)
    }
}

/// A `$unionWith` for the engine to run: everything its input gives, then the
/// documents of [`Self::collection`] through [`Self::pipeline`] (mongod's order). The
/// engine runs the second part only once the first ended, as it runs a pipeline over a
/// collection, so neither side is held whole.
pub struct UnionStage {
    db: String,
    coll: String,
    pipeline: Option<Pipeline>,
    vars: Variables,
}

impl UnionStage {
    /// The database and collection (or view) whose documents come second.
    pub fn collection(&self) -> (&str, &str) {
        (&self.db, &self.coll)
    }

    /// Its pipeline's stages (none: the collection's documents as they are).
    pub fn stage_specs(&self) -> &[Document] {
        self.pipeline.as_ref().map_or(&[], |p| p.stage_specs())
    }

    /// The run's variables (`let`, `$$NOW`, the collation): the pipeline sees them too.
    pub fn vars(&self) -> &Variables {
        &self.vars
    }

    /// Its pipeline run over `docs` (the collection's documents, read whole: a view,
    /// or a pipeline the engine does not run as a cursor is read).
    pub fn run_over(
        &self,
        docs: Vec<Document>,
        source: &dyn CollectionSource,
    ) -> Result<Vec<Document>> {
        match &self.pipeline {
            Some(p) => p.run(Box::new(docs.into_iter().map(Ok)), source, &self.vars),
            None => Ok(docs),
        }
    }
}

/// A pipeline whose every stage takes one document at a time (`$match`, `$project`,
/// `$unwind`, `$limit`, `$lookup`, ...), run as its cursor is read: input documents are
/// pushed through when the cursor needs more, so an aggregation over a large collection
/// holds a batch, not its whole result, and returns its first batch without reading
/// the rest (as mongod's aggregation cursors). `$$NOW` is fixed when it is made, and
/// the collections `$lookup` reads are read once for the whole cursor, as they were for
/// a whole run.
pub struct Streamed {
    pipeline: Pipeline,
    vars: Variables,
    matchers: HashMap<usize, Matcher>,
    counters: Vec<usize>,
    lookups: RunCache,
}

impl Streamed {
    /// Runs `docs` through the stages, appending what comes out to `out`; stops early
    /// once a `$limit` is reached ([`Self::ended`]).
    pub fn push(
        &mut self,
        docs: impl IntoIterator<Item = Document>,
        source: &dyn CollectionSource,
        out: &mut std::collections::VecDeque<Document>,
    ) -> Result<()> {
        let ctx = RunCtx {
            source,
            cache: RefCell::new(std::mem::take(&mut self.lookups)),
        };
        let all = self.pipeline.stages.len();
        let mut result = Ok(());
        for doc in docs {
            if self.ended() {
                break;
            }
            match self.pipeline.stream_one(
                doc,
                all,
                &ctx,
                &self.vars,
                &self.matchers,
                &mut self.counters,
            ) {
                Ok(batch) => out.extend(batch),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.lookups = ctx.cache.into_inner();
        result
    }

    /// The pipeline streamed.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Whether a `$limit` has let all its documents through: no input can add more.
    pub fn ended(&self) -> bool {
        self.pipeline
            .limit_reached(self.pipeline.stages.len(), &self.counters)
    }
}

/// A run of a pipeline over documents given one at a time ([`Self::push`]): the
/// streaming stages take each as it comes, a first blocking stage that can folds
/// their output as it comes ([`Folding`]), and the stages after it run over what it
/// gives at [`Self::finish`].
struct Run<'a> {
    pipeline: &'a Pipeline,
    ctx: &'a RunCtx<'a>,
    vars: &'a Variables,
    matchers: HashMap<usize, Matcher>,
    /// How many stages, from the first, stream.
    prefix: usize,
    counters: Vec<usize>,
    folding: Option<Folding<'a>>,
    /// What the streaming stages gave, when no stage folds it.
    docs: Vec<Document>,
}

impl<'a> Run<'a> {
    fn new(pipeline: &'a Pipeline, ctx: &'a RunCtx<'a>, vars: &'a Variables) -> Result<Run<'a>> {
        let prefix = pipeline.streaming_prefix();
        Ok(Run {
            pipeline,
            ctx,
            vars,
            matchers: pipeline.run_matchers(vars)?,
            prefix,
            counters: pipeline.counters(),
            folding: Folding::of(pipeline.stages.get(prefix), ctx, vars)?,
            docs: Vec::new(),
        })
    }

    /// Whether more input can change the result: no `$limit` among the streaming
    /// stages has let all its documents through, and the folding stage takes more.
    fn wants_more(&self) -> bool {
        !self.pipeline.limit_reached(self.prefix, &self.counters)
            && self.folding.as_ref().is_none_or(Folding::wants_more)
    }

    fn push(&mut self, doc: Document) -> Result<()> {
        let (p, ctx, vars) = (self.pipeline, self.ctx, self.vars);
        let batch = p.stream_one(
            doc,
            self.prefix,
            ctx,
            vars,
            &self.matchers,
            &mut self.counters,
        )?;
        match self.folding.as_mut() {
            Some(f) => batch.into_iter().try_for_each(|d| f.add(d)),
            None => {
                self.docs.extend(batch);
                Ok(())
            }
        }
    }

    /// The run's output: the folding stage's result, or what the streaming stages
    /// gave, through the stages after them.
    fn finish(self) -> Result<Vec<Document>> {
        let (p, ctx, vars) = (self.pipeline, self.ctx, self.vars);
        let mut docs = self.docs;
        let mut rest = self.prefix;
        if let Some(f) = self.folding {
            docs = f.finish()?;
            rest += 1;
        }
        #[allow(clippy::needless_range_loop)] // i indexes stages, matchers and counters
        for i in rest..p.stages.len() {
            let st = &p.stages[i];
            if st.is_streaming() {
                let mut counter = self.counters[i];
                docs = st.apply_streaming(docs, ctx, vars, self.matchers.get(&i), &mut counter)?;
            } else {
                docs = st.apply_blocking(docs, ctx, vars)?;
            }
        }
        Ok(docs)
    }
}

/// The first blocking stage of a run when it can take its input one document at a
/// time, so the run holds its result instead of every document read (as MongoDB's
/// streaming `$group`, `$count` and top-k `$sort`; a `$facet` feeds each document to
/// each of its pipelines, which hold what they need of it).
enum Folding<'a> {
    Group(group::Grouper<'a>),
    /// `$sortByCount`: its `$group`, sorted at the end.
    SortByCount(group::Grouper<'a>),
    Bucket(stages::group_bucket::BucketFold<'a>),
    Facet(stages::FacetRun<'a>),
    /// `$count`: the output field and the documents counted so far.
    Count(&'a str, usize),
    /// `$sort` with a `$limit` folded into it.
    TopSort(crate::sort::TopK),
}

impl<'a> Folding<'a> {
    fn of(
        stage: Option<&'a Stage>,
        ctx: &'a RunCtx<'a>,
        vars: &'a Variables,
    ) -> Result<Option<Folding<'a>>> {
        let Some(stage) = stage else {
            return Ok(None);
        };
        Ok(match stage {
            Stage::Group { id, accs } => Some(Folding::Group(group::Grouper::new(id, accs, vars))),
            Stage::SortByCount { id, accs } => {
                Some(Folding::SortByCount(group::Grouper::new(id, accs, vars)))
            }
            Stage::Bucket(b) => Some(Folding::Bucket(stages::group_bucket::BucketFold::new(
                b, vars,
            ))),
            Stage::Facet(facets) => Some(Folding::Facet(stages::FacetRun::new(facets, ctx, vars)?)),
            Stage::Count(field) => Some(Folding::Count(field, 0)),
            Stage::Sort {
                spec,
                limit: Some(limit),
            } => Some(Folding::TopSort(stages::sort_limit_sample::top_sort(
                spec,
                Some(*limit),
                vars,
            ))),
            _ => None,
        })
    }

    /// Whether more input can change what it gives (a `$facet` whose pipelines all
    /// met a `$limit` takes no more).
    fn wants_more(&self) -> bool {
        match self {
            Folding::Facet(f) => f.wants_more(),
            _ => true,
        }
    }

    fn add(&mut self, doc: Document) -> Result<()> {
        match self {
            Folding::Group(g) | Folding::SortByCount(g) => g.add(&doc),
            Folding::Bucket(b) => b.add(&doc),
            Folding::Facet(f) => f.push(doc),
            Folding::Count(_, n) => {
                *n += 1;
                Ok(())
            }
            Folding::TopSort(t) => {
                t.push(doc);
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<Vec<Document>> {
        match self {
            Folding::Group(g) => g.finish(),
            Folding::SortByCount(g) => Ok(stages::group_bucket::by_count(g.finish()?)),
            Folding::Bucket(b) => b.finish(),
            Folding::Facet(f) => f.finish(),
            Folding::Count(field, n) => Ok(stages::group_bucket::count_of(field, n)),
            Folding::TopSort(t) => Ok(t.finish()),
        }
    }
}

/// A collection's documents read once for a run (by database and collection).
type CachedDocuments = Arc<Vec<Document>>;

/// What a run reads once: other collections' documents, and a `$lookup`'s index of
/// them by its `foreignField` (by database, collection and field).
#[derive(Default)]
struct RunCache {
    docs: HashMap<(String, String), CachedDocuments>,
    foreign: HashMap<(String, String, String), Arc<stages::ForeignIndex>>,
    /// Foreign fields no index serves (`CollectionSource::find_equal` said so once).
    unindexed: std::collections::HashSet<(String, String, String)>,
}

struct RunCtx<'a> {
    source: &'a dyn CollectionSource,
    cache: RefCell<RunCache>,
}

impl RunCtx<'_> {
    fn scan(&self, db: &str, coll: &str) -> Result<CachedDocuments> {
        let key = (db.to_string(), coll.to_string());
        if let Some(v) = self.cache.borrow().docs.get(&key) {
            return Ok(v.clone());
        }
        let docs = Arc::new(self.source.scan(db, coll)?);
        self.cache.borrow_mut().docs.insert(key, docs.clone());
        Ok(docs)
    }

    /// The documents of `coll` whose `field` equals one of `values`, read through an
    /// index on `field` (mongod's indexed nested-loop join); None when no index serves
    /// it or a value is one a `$in` could treat otherwise than `$lookup`'s equality
    /// (null, undefined, a regular expression, a document: its `$` keys are operators
    /// there).
    fn find_equal(
        &self,
        db: &str,
        coll: &str,
        field: &str,
        values: &[Bson],
        vars: &Variables,
    ) -> Result<Option<Vec<Document>>> {
        if values.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let odd = |v: &Bson| {
            matches!(
                v,
                Bson::Null | Bson::Undefined | Bson::RegularExpression(_) | Bson::Document(_)
            )
        };
        if values.iter().any(odd) {
            return Ok(None);
        }
        let key = (db.to_string(), coll.to_string(), field.to_string());
        if self.cache.borrow().unindexed.contains(&key) {
            return Ok(None);
        }
        let found = self
            .source
            .find_equal(db, coll, field, values, vars.collator.as_ref())?;
        if found.is_none() {
            self.cache.borrow_mut().unindexed.insert(key);
        }
        Ok(found)
    }

    /// Collection `coll`'s documents and their index by `field` (see
    /// [`stages::ForeignIndex`]), under the run's collation.
    fn foreign_index(
        &self,
        db: &str,
        coll: &str,
        field: &str,
        vars: &Variables,
    ) -> Result<(CachedDocuments, Arc<stages::ForeignIndex>)> {
        let docs = self.scan(db, coll)?;
        let key = (db.to_string(), coll.to_string(), field.to_string());
        if let Some(ix) = self.cache.borrow().foreign.get(&key) {
            return Ok((docs, ix.clone()));
        }
        let ix = Arc::new(stages::ForeignIndex::new(
            &docs,
            field,
            vars.collator.as_deref(),
        ));
        self.cache.borrow_mut().foreign.insert(key, ix.clone());
        Ok((docs, ix))
    }
}

#[cfg(test)]
mod tests;

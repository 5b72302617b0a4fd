//! `$unionWith` in a pipeline run as its cursor is read (`Pipeline::segments`): the
//! part before it gives all its documents first, then the other collection's
//! documents come through the stage's own pipeline, which starts only once the first
//! part ended (mongod's order, and its `DocumentSourceUnionWith` starts its
//! sub-pipeline then too). Neither side is held whole: a stage after the union
//! (a `$limit` met early) may never start the second side at all.
//!
//! The second side runs as an aggregation cursor over that collection would
//! (`Engine::streamed_source`: its own `$sort` and `$group` spill past their memory
//! limits). Over a view, or with a stage only a whole run gives (`$facet`, `$bucketAuto`,
//! ...), it runs whole when the first side has ended, and what it gives is held (as
//! the whole pipeline was before this file).

use crate::catalog::namespace::Namespace;
use crate::read::cursor::{PipelineScan, Source};
use crate::read::spill_sort::SortMemory;
use crate::Engine;
use bson::Document;
use std::collections::VecDeque;
use tailstream_query::error::Result;
use tailstream_query::pipeline::{CollectionSource, UnionStage};

/// A `$unionWith`'s output: its input's documents, then the other collection's.
pub(crate) struct UnionFeed {
    /// The part before the stage (None once it ended: what it held is let go).
    first: Option<PipelineScan>,
    second: Second,
    /// What the second side's blocking stages may hold (the operation's).
    memory: SortMemory,
}

/// The second side: not started while the first gives documents.
enum Second {
    NotStarted(UnionStage),
    Streamed(Box<PipelineScan>),
    Held(VecDeque<Document>),
}

impl UnionFeed {
    pub(crate) fn new(first: PipelineScan, stage: UnionStage, memory: SortMemory) -> UnionFeed {
        UnionFeed {
            first: Some(first),
            second: Second::NotStarted(stage),
            memory,
        }
    }

    /// The next document (None: both sides ended).
    pub(crate) fn next(&mut self, engine: &Engine) -> Result<Option<Document>> {
        if let Some(first) = &mut self.first {
            if let Some(doc) = first.next(engine)? {
                return Ok(Some(doc));
            }
            self.first = None;
        }
        if matches!(self.second, Second::NotStarted(_)) {
            let taken = std::mem::replace(&mut self.second, Second::Held(VecDeque::new()));
            let Second::NotStarted(stage) = taken else {
                unreachable!("the second side was just seen not started")
            };
            self.second = start(engine, stage, &self.memory)?;
        }
        match &mut self.second {
            Second::Streamed(part) => part.next(engine),
            Second::Held(docs) => Ok(docs.pop_front()),
            Second::NotStarted(_) => unreachable!("the second side was started above"),
        }
    }
}

/// Starts the second side: as a cursor's pipeline over the collection when it can be,
/// else run whole.
fn start(engine: &Engine, stage: UnionStage, memory: &SortMemory) -> Result<Second> {
    let (db, coll) = stage.collection();
    let ns = Namespace::new(db, coll);
    if engine.resolve_view(&ns)?.is_none() {
        let specs = stage.stage_specs();
        if let Some(source) =
            engine.streamed_source(&ns, specs, stage.vars(), None, memory.clone())?
        {
            let Source::Pipeline(part) = source else {
                unreachable!("a streamed source is a pipeline's")
            };
            return Ok(Second::Streamed(part));
        }
    }
    let source = engine.collection_source();
    let docs = source.scan(db, coll)?;
    Ok(Second::Held(stage.run_over(docs, &source)?.into()))
}

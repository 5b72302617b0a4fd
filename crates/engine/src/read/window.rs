//! A partitioned `$setWindowFields` in a pipeline run as its cursor is read
//! (`Pipeline::segments`): its input, as sort records (the partition and the
//! document), sorted by partition and `sortBy` through a blocking sort's mechanism
//! (`spill_sort`: on disk past the sort memory, 292 with `allowDiskUse: false`), then
//! read back one partition at a time as the cursor is read, each run by the query
//! crate (`WindowRun::partition`). mongod sorts the same way (it puts a `$sort` in
//! front of the stage) and holds a partition at a time; a partition is held whole
//! here (mongod spills a large one).

use crate::read::cursor::PipelineScan;
use crate::read::spill_sort::{SortMemory, Sorted, SpillSort};
use crate::Engine;
use bson::{Bson, Document};
use std::collections::VecDeque;
use tailstream_query::error::Result;
use tailstream_query::pipeline::WindowRun;

/// A `$setWindowFields`' output, a partition at a time.
pub(crate) struct WindowOutput {
    stage: WindowRun,
    sorted: Sorted,
    /// The first document of the next partition, read past the end of the last one.
    ahead: Option<(Bson, Document)>,
    /// The current partition's output not given yet.
    out: VecDeque<Document>,
}

impl WindowOutput {
    /// Sorts everything `input` gives.
    pub(crate) fn run(
        stage: WindowRun,
        input: &mut PipelineScan,
        engine: &Engine,
        memory: SortMemory,
    ) -> Result<WindowOutput> {
        let mut sorter = SpillSort::new(stage.order(), memory);
        while let Some(doc) = input.next(engine)? {
            sorter.push(stage.record(doc)?)?;
        }
        Ok(WindowOutput {
            stage,
            sorted: sorter.finish()?,
            ahead: None,
            out: VecDeque::new(),
        })
    }

    /// The next document (None: every partition given).
    pub(crate) fn next(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(doc) = self.out.pop_front() {
                return Ok(Some(doc));
            }
            let Some(docs) = self.next_partition()? else {
                return Ok(None);
            };
            self.out = self.stage.partition(docs)?.into();
        }
    }

    /// The next partition's documents, in order (None: no more).
    fn next_partition(&mut self) -> Result<Option<Vec<Document>>> {
        let (part, first) = match self.ahead.take() {
            Some(ahead) => ahead,
            None => match self.sorted.next()? {
                Some(record) => self.stage.unpack(record)?,
                None => return Ok(None),
            },
        };
        let mut docs = vec![first];
        while let Some(record) = self.sorted.next()? {
            let (p, doc) = self.stage.unpack(record)?;
            if !self.stage.same_partition(&p, &part) {
                self.ahead = Some((p, doc));
                break;
            }
            docs.push(doc);
        }
        Ok(Some(docs))
    }
}

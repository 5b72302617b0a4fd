//! `$bucketAuto` in a pipeline run as its cursor is read (`Pipeline::segments`): what
//! it needs of each input document (its `groupBy` value and its accumulators'
//! arguments, a sort record) sorted by value through a blocking sort's mechanism
//! (`spill_sort`: at most the operation's sort memory held, sorted runs on disk past
//! it, 292 with `allowDiskUse: false`; mongod's stage sorts through its sorter the same
//! way), then cut into buckets in that order by the query crate's `BucketCutter`,
//! which holds one bucket at a time and the buckets given.

use crate::read::cursor::PipelineScan;
use crate::read::spill_sort::{SortMemory, SpillSort};
use crate::Engine;
use bson::{doc, Document};
use tailstream_query::error::Result;
use tailstream_query::pipeline::{BucketAutoRun, BUCKET_AUTO_ORDER_FIELD};
use tailstream_query::sort::SortSpec;

/// Runs `stage` over everything `input` gives: the buckets.
pub(crate) fn run(
    stage: BucketAutoRun,
    input: &mut PipelineScan,
    engine: &Engine,
    memory: SortMemory,
) -> Result<Vec<Document>> {
    let spec = SortSpec::parse(&doc! {BUCKET_AUTO_ORDER_FIELD: 1})?.with_collator(stage.collator());
    let mut sorter = SpillSort::new(spec, memory);
    let mut total = 0usize;
    while let Some(doc) = input.next(engine)? {
        sorter.push(stage.record(&doc)?)?;
        total += 1;
    }
    let mut sorted = sorter.finish()?;
    let mut cutter = stage.cutter(total);
    let mut given = 0usize;
    while let Some(record) = sorted.next()? {
        cutter.push_record(record)?;
        given += 1;
    }
    assert_eq!(given, total, "the sort gives back every record");
    cutter.finish()
}

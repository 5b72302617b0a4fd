//! A `$group` past its memory limit: the groups it holds keep folding, and the
//! documents of the groups it has no room for are sorted on disk by group and folded
//! one group at a time as the cursor is read (mongod's `$group` spills its groups
//! instead; either way memory stays bounded and the output is the same, in another
//! order, which `$group` never promises).
//!
//! The grouping is the query crate's (`Grouper::add_or_spill`, `SpilledGroups`); this
//! file gives it the disk: the spill records go through a blocking sort's mechanism
//! (`spill_sort`, ordered by `SPILL_ORDER_FIELD`, stable, so a group's records keep the
//! order their documents came in). Memory: the held groups (at most
//! `internalDocumentSourceGroupMaxMemoryBytes`, about), the sort's run (at most its
//! memory limit), then one group at a time. With `allowDiskUse: false` nothing spills:
//! the `Grouper` fails with 292 past its limit.

use crate::read::cursor::PipelineScan;
use crate::read::spill_sort::{SortMemory, Sorted, SpillSort};
use bson::{doc, Document};
use tailstream_query::error::Result;
use tailstream_query::pipeline::{GroupStage, HeldGroups, SpilledGroups, SPILL_ORDER_FIELD};
use tailstream_query::sort::SortSpec;

/// A `$group`'s output: the groups held in memory, then the spilled ones.
pub(crate) struct GroupOutput {
    held: HeldGroups,
    /// The spill records, sorted by group (None: none spilled, or all given).
    records: Option<Sorted>,
    groups: SpilledGroups,
}

impl GroupOutput {
    /// Runs `stage` over everything `input` gives.
    pub(crate) fn run(
        stage: GroupStage,
        input: &mut PipelineScan,
        engine: &crate::Engine,
        memory: SortMemory,
    ) -> Result<GroupOutput> {
        let mut grouper = stage.grouper();
        let mut sorter: Option<SpillSort> = None;
        while let Some(doc) = input.next(engine)? {
            if let Some(record) = grouper.add_or_spill(&doc)? {
                let sorter = sorter.get_or_insert_with(|| {
                    let order = SortSpec::parse(&doc! {SPILL_ORDER_FIELD: 1})
                        .expect("an ascending sort on one field");
                    SpillSort::new(order, memory.clone())
                });
                sorter.push(record)?;
            }
        }
        let held = grouper.into_held();
        let records = sorter.map(SpillSort::finish).transpose()?;
        Ok(GroupOutput {
            held,
            records,
            groups: stage.spilled(),
        })
    }

    /// The next group's output (None: all given).
    pub(crate) fn next(&mut self) -> Result<Option<Document>> {
        if let Some(d) = self.groups.next_held(&mut self.held)? {
            return Ok(Some(d));
        }
        let Some(records) = &mut self.records else {
            return Ok(None);
        };
        while let Some(record) = records.next()? {
            if let Some(group) = self.groups.push(record)? {
                return Ok(Some(group));
            }
        }
        self.records = None;
        self.groups.finish()
    }
}

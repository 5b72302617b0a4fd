//! A find's in-memory sort (no index gives the order): the scan's matches in sort
//! order, or, with a limit, only the first limit + skip of them, held as
//! [`TopK`] holds them (at most twice that many at a time, as mongod's top-k sort).

use super::Scan;
use bson::Document;
use tailstream_query::error::Result;
use tailstream_query::matcher::Matcher;
use tailstream_query::sort::{SortSpec, TopK};
use tailstream_storage::Store;

/// Reads the scan to its end and sorts its matches, keeping the first `keep` (None:
/// all).
pub fn sorted(
    scan: &mut Scan,
    store: &Store,
    coll_id: u32,
    matcher: &Matcher,
    sort: &SortSpec,
    keep: Option<usize>,
) -> Result<Vec<Document>> {
    let mut top = TopK::new(sort.clone(), keep);
    let mut batch = Vec::new();
    while !scan.done {
        scan.next_batch(store, coll_id, matcher, usize::MAX, &mut batch)?;
        batch.drain(..).for_each(|(_, d)| top.push(d));
    }
    Ok(top.finish())
}

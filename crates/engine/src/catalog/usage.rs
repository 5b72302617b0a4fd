//! How often each index served a query (`$indexStats`' `accesses`): counted when the
//! planner picks an index, from the index's load or creation on (`since`), in memory
//! only, as mongod's counters (they restart with the server).

use bson::DateTime;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

/// One index's accesses.
#[derive(Debug)]
pub struct IndexUsage {
    ops: AtomicU64,
    since: DateTime,
}

impl Default for IndexUsage {
    fn default() -> Self {
        IndexUsage {
            ops: AtomicU64::new(0),
            since: DateTime::now(),
        }
    }
}

impl IndexUsage {
    pub fn record(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    /// The operations that used the index, and since when they are counted.
    pub fn snapshot(&self) -> (u64, DateTime) {
        (self.ops.load(Ordering::Relaxed), self.since)
    }
}

/// The `_id` indexes' counters, by collection UUID: the `_id` index is implicit (the
/// documents are keyed by `_id`), so it has no `IndexMeta` to hold them. Counted from
/// the first time the collection's `_id` index is used or its statistics are asked for.
/// Read-locked on the hot path (a query by `_id`), write-locked once per collection.
static ID_INDEXES: LazyLock<RwLock<HashMap<bson::Uuid, Arc<IndexUsage>>>> =
    LazyLock::new(Default::default);

/// The counters of a collection's `_id` index.
pub fn id_index(collection: bson::Uuid) -> Arc<IndexUsage> {
    if let Some(usage) = ID_INDEXES.read().get(&collection) {
        return usage.clone();
    }
    ID_INDEXES.write().entry(collection).or_default().clone()
}

/// Counts a use of a collection's `_id` index.
pub fn record_id_index(collection: bson::Uuid) {
    if let Some(usage) = ID_INDEXES.read().get(&collection) {
        usage.record();
        return;
    }
    id_index(collection).record();
}

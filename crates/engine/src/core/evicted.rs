//! How far eviction has reached in each capped collection, so that a tailable read can
//! tell that its position is still stored without reading it.
//!
//! A tailable cursor over a capped collection fails with CappedPositionLost when the
//! document it stopped at was evicted (as mongod's does), and it checked that with one
//! `Store::get` of its position per getMore: 2,200 of the 85,000 instructions of a
//! message read by 8 consumers (callgrind, 2026-11-28), more than the read of the
//! documents themselves from the recent oplog.
//!
//! The mark of a collection is a time at or above every natural key of it that is gone
//! from storage or going (deleted by a transaction not committed yet): a position
//! above it is still stored. No mark: nothing known, read storage.
//!
//! Ordering rules (who sets what, and when):
//! - natural keys leave storage oldest first (eviction), or all of a collection's at
//!   once (drop), or by a replicated commit applied on a member that is not primary;
//! - eviction raises the mark to the key it deletes before its transaction commits
//!   ([`EvictionMarks::raise`]), so a reader that finds the mark lower read it before
//!   the key left, when its position was still there;
//! - a drop, a replicated commit and a snapshot's install forget the mark before their
//!   writes reach storage ([`EvictionMarks::forget`], [`EvictionMarks::clear`]);
//! - a mark is set again when the collection's totals load: just below its first
//!   natural key (everything before went oldest first), or, for an empty collection,
//!   just below its next insert (every key before has an older time);
//! - a mark only rises while it is kept: a transaction that raised it and then failed
//!   leaves it higher than needed, which costs storage reads and no wrong answer.
//!
//! The reader checks its position against the mark after it read the documents after
//! that position (see `Scan::next_raw_natural`), as it did with the `Store::get`.

use super::time::ClusterTime;
use ahash::AHashMap;
use parking_lot::Mutex;

/// The eviction marks of the capped collections, by collection id (see the module's doc).
#[derive(Debug, Default)]
pub struct EvictionMarks {
    by_collection: Mutex<AHashMap<u32, ClusterTime>>,
}

impl EvictionMarks {
    /// Every natural key of `coll_id` at or below `through` is gone or going: the mark
    /// rises to it (or is set, the collection's totals having loaded).
    pub fn raise(&self, coll_id: u32, through: ClusterTime) {
        let mut marks = self.by_collection.lock();
        let mark = marks.entry(coll_id).or_insert(through);
        *mark = (*mark).max(through);
    }

    /// Nothing is known of `coll_id` until its totals load again.
    pub fn forget(&self, coll_id: u32) {
        self.by_collection.lock().remove(&coll_id);
    }

    /// Nothing is known of any collection (a snapshot replaces the store).
    pub fn clear(&self) {
        self.by_collection.lock().clear();
    }

    /// Whether the natural key of `coll_id` at `position`, once stored, is known to be
    /// stored still. False: not known (read storage).
    pub fn keeps(&self, coll_id: u32, position: ClusterTime) -> bool {
        self.by_collection
            .lock()
            .get(&coll_id)
            .is_some_and(|mark| position > *mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u32) -> ClusterTime {
        ClusterTime::new(secs, 1)
    }

    #[test]
    fn a_position_above_the_mark_is_kept_and_one_at_or_below_it_is_not_known() {
        let marks = EvictionMarks::default();
        assert!(!marks.keeps(7, t(5)), "no mark: not known");
        marks.raise(7, t(3));
        assert!(marks.keeps(7, t(4)));
        assert!(!marks.keeps(7, t(3)), "the mark itself is gone");
        assert!(!marks.keeps(7, t(2)));
        assert!(!marks.keeps(8, t(4)), "another collection has no mark");
    }

    #[test]
    fn a_mark_only_rises_until_it_is_forgotten() {
        let marks = EvictionMarks::default();
        marks.raise(7, t(6));
        marks.raise(7, t(2));
        assert!(
            !marks.keeps(7, t(5)),
            "a lower raise leaves the mark where it was"
        );
        assert!(marks.keeps(7, t(7)));
        marks.forget(7);
        assert!(!marks.keeps(7, t(7)), "forgotten: not known");
        marks.raise(7, t(2));
        assert!(marks.keeps(7, t(5)), "set again when the totals load");
        marks.raise(9, t(1));
        marks.clear();
        assert!(!marks.keeps(7, t(5)) && !marks.keeps(9, t(5)));
    }
}

//! The state machine's side: a replicated commit applied, and snapshots.
//!
//! A commit's writes arrive as [`Ops`] (documents, index entries, oplog entries,
//! catalog and counters, as the primary's commit wrote them) and are applied in one
//! atomic batch with the applied marker, so after a crash the marker names exactly
//! the last commit whose writes are in the store. The marker need not be synced: the
//! log is, and what was applied after the last sync is applied again from it.
//!
//! In progress (issue 27): the writes reach the store; the engine's in-memory state
//! (the catalog, the recent oplog, the commit bus that wakes change streams) does not
//! follow them yet, so a member applies but cannot yet serve what it applied.

use crate::{core::storage_err, Engine};
use tailstream_query::error::{Error, Result};
use tailstream_storage::{Op, Ops, Space};

/// The applied marker's key in `Meta`: the id of the last entry applied, as the
/// consensus layer encodes it (with the membership in force).
const APPLIED_KEY: &[u8] = b"repl_applied";

/// The spaces a snapshot holds: the whole state machine, every space but the log.
fn snapshot_spaces() -> Vec<Space> {
    Space::ALL
        .into_iter()
        .filter(|s| *s != Space::ReplLog)
        .collect()
}

impl Engine {
    /// Applies one replicated commit's writes and moves the applied marker to
    /// `applied`, in one atomic batch. A write into the log's own space is refused:
    /// a commit never carries one, so such an entry is corrupt.
    pub fn repl_apply(&self, ops: &Ops, applied: &[u8]) -> Result<()> {
        let into_log = ops.iter().any(|op| {
            let space = match op {
                Op::Put { space, .. } | Op::Delete { space, .. } => space,
                Op::DeleteRange { space, .. } => space,
            };
            space == Space::ReplLog
        });
        if into_log {
            return Err(Error::internal(
                "a replicated commit writes into the replicated log's space",
            ));
        }
        let mut batch = self.store.batch();
        batch.apply_ops(ops);
        batch.put(Space::Meta, APPLIED_KEY, applied);
        self.store.commit(batch).map_err(storage_err)
    }

    /// The applied marker: what the last [`Engine::repl_apply`] (or installed
    /// snapshot) set; none on a member that applied nothing yet.
    pub fn repl_applied(&self) -> Result<Option<Vec<u8>>> {
        self.store
            .get(Space::Meta, APPLIED_KEY)
            .map_err(storage_err)
    }

    /// Every key of the state machine's spaces, with the applied marker among them.
    pub fn repl_snapshot_export(&self) -> Result<Ops> {
        self.store.export(&snapshot_spaces()).map_err(storage_err)
    }

    /// Replaces the state machine's spaces with a snapshot's (synced); the log and
    /// its markers stay.
    pub fn repl_snapshot_import(&self, ops: &Ops) -> Result<()> {
        self.store
            .import(&snapshot_spaces(), ops)
            .map_err(storage_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;

    #[test]
    fn a_commit_applies_with_its_marker_and_a_snapshot_carries_both() {
        let leader = TestEngine::open();
        let mut ops = Ops::new();
        ops.put(Space::Docs, b"\x00\x00\x00\x63k", b"doc");
        ops.put(Space::Oplog, b"\x00\x00\x00\x01\x00\x00\x00\x01", b"entry");
        leader.engine.repl_apply(&ops, b"applied 1").unwrap();
        assert_eq!(
            leader.engine.repl_applied().unwrap(),
            Some(b"applied 1".to_vec())
        );
        let snapshot = leader.engine.repl_snapshot_export().unwrap();

        let follower = TestEngine::open();
        follower
            .engine
            .repl_log_append(&[(1, b"log".to_vec())])
            .unwrap();
        follower.engine.repl_snapshot_import(&snapshot).unwrap();
        let e = &follower.engine;
        assert_eq!(e.repl_applied().unwrap(), Some(b"applied 1".to_vec()));
        assert_eq!(
            e.store.get(Space::Docs, b"\x00\x00\x00\x63k").unwrap(),
            Some(b"doc".to_vec())
        );
        // The log is not the state machine's: it stays.
        assert_eq!(e.repl_log_last().unwrap(), Some((1, b"log".to_vec())));
        // Both hold the same state machine now.
        assert_eq!(e.repl_snapshot_export().unwrap(), snapshot);
    }

    #[test]
    fn a_commit_writing_into_the_log_is_refused() {
        let t = TestEngine::open();
        let mut ops = Ops::new();
        ops.put(Space::ReplLog, b"e", b"x");
        assert!(t.engine.repl_apply(&ops, b"m").is_err());
        assert_eq!(t.engine.repl_applied().unwrap(), None);
    }
}

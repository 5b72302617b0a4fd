//! What one operation examined, as mongod's `OpDebug` counts it for the slow-operation
//! log line, `system.profile` and explain: index keys and documents examined, the plan
//! it ran, and for change streams the oplog entries and bytes it read.
//!
//! The figures belong to the operation running on the thread ([`crate::script::Operation`]):
//! the read and write layers add to them with `script::Operation::count_current` after each step of a scan (one
//! thread-local look and a few relaxed atomic adds per step, not per document), and the
//! server reads them once the command has finished ([`OpStats::snapshot`]). Work done
//! outside any operation (a prefetch on its own thread, a background job) is counted
//! nowhere unless it keeps its own figures and hands them to the operation that delivers
//! its result (change streams do: see `changestream`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// An operation's figures; all start at zero.
#[derive(Debug, Default)]
pub struct OpStats {
    keys_examined: AtomicU64,
    docs_examined: AtomicU64,
    oplog_entries_read: AtomicU64,
    oplog_bytes_read: AtomicU64,
    /// The documents were sorted in memory, the plan not giving their order (mongod's
    /// `hasSortStage`, counted in `metrics.operation.scanAndOrder`).
    sorted_in_memory: AtomicBool,
    /// A blocking stage wrote to temporary files past its memory limit (mongod's
    /// `usedDisk`).
    used_disk: AtomicBool,
    /// mongod's `planSummary` of the operation's first plan (`COLLSCAN`,
    /// `IXSCAN { a: 1 }`, `IDHACK`); later plans (a `$lookup`'s) do not replace it.
    plan_summary: OnceLock<String>,
}

/// The figures at one moment, plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub keys_examined: u64,
    pub docs_examined: u64,
    pub oplog_entries_read: u64,
    pub oplog_bytes_read: u64,
    pub sorted_in_memory: bool,
    pub used_disk: bool,
    pub plan_summary: Option<String>,
}

impl Snapshot {
    /// Whether the operation read anything through a plan or the oplog (commands that
    /// read nothing log no such attributes, as in mongod).
    pub fn is_empty(&self) -> bool {
        self.plan_summary.is_none()
            && self.keys_examined == 0
            && self.docs_examined == 0
            && self.oplog_entries_read == 0
    }
}

impl OpStats {
    /// Adds index keys and documents examined by a scan step.
    pub fn add_examined(&self, keys: u64, docs: u64) {
        if keys > 0 {
            self.keys_examined.fetch_add(keys, Ordering::Relaxed);
        }
        if docs > 0 {
            self.docs_examined.fetch_add(docs, Ordering::Relaxed);
        }
    }

    /// Adds oplog entries read by a change stream and their bytes; each entry is also a
    /// document examined (mongod's `docsExamined` of a change stream's getMore).
    pub fn add_oplog_read(&self, entries: u64, bytes: u64) {
        if entries == 0 && bytes == 0 {
            return;
        }
        self.oplog_entries_read
            .fetch_add(entries, Ordering::Relaxed);
        self.oplog_bytes_read.fetch_add(bytes, Ordering::Relaxed);
        self.docs_examined.fetch_add(entries, Ordering::Relaxed);
    }

    /// The matches were sorted in memory.
    pub fn note_sort_in_memory(&self) {
        self.sorted_in_memory.store(true, Ordering::Relaxed);
    }

    /// A blocking stage spilled to disk.
    pub fn note_used_disk(&self) {
        self.used_disk.store(true, Ordering::Relaxed);
    }

    /// Records the plan, unless one was recorded already.
    pub fn note_plan(&self, summary: impl FnOnce() -> String) {
        if self.plan_summary.get().is_none() {
            let _ = self.plan_summary.set(summary());
        }
    }

    /// Keys and documents examined so far (cheaper than a snapshot: no plan copied).
    pub fn examined(&self) -> (u64, u64) {
        (
            self.keys_examined.load(Ordering::Relaxed),
            self.docs_examined.load(Ordering::Relaxed),
        )
    }

    /// Whether the recorded plan is `summary`.
    pub fn plan_is(&self, summary: &str) -> bool {
        self.plan_summary.get().is_some_and(|p| p == summary)
    }

    pub fn sorted_in_memory(&self) -> bool {
        self.sorted_in_memory.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            keys_examined: self.keys_examined.load(Ordering::Relaxed),
            docs_examined: self.docs_examined.load(Ordering::Relaxed),
            oplog_entries_read: self.oplog_entries_read.load(Ordering::Relaxed),
            oplog_bytes_read: self.oplog_bytes_read.load(Ordering::Relaxed),
            sorted_in_memory: self.sorted_in_memory.load(Ordering::Relaxed),
            used_disk: self.used_disk.load(Ordering::Relaxed),
            plan_summary: self.plan_summary.get().cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_add_up_and_the_first_plan_stays() {
        let s = OpStats::default();
        assert!(s.snapshot().is_empty());
        s.add_examined(3, 2);
        s.add_examined(0, 4);
        s.add_oplog_read(7, 700);
        s.note_plan(|| "IXSCAN { a: 1 }".into());
        s.note_plan(|| "COLLSCAN".into());
        let got = s.snapshot();
        assert_eq!(
            got,
            Snapshot {
                keys_examined: 3,
                docs_examined: 13,
                oplog_entries_read: 7,
                oplog_bytes_read: 700,
                sorted_in_memory: false,
                used_disk: false,
                plan_summary: Some("IXSCAN { a: 1 }".into()),
            }
        );
        assert!(!got.is_empty());
    }
}

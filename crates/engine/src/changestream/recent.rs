//! The newest oplog entries, in memory, for the change streams that are keeping up:
//! the writer hands each committed entry over once, and every stream that is
//! current reads it from here instead of from storage (no iterator, no block
//! lookup per stream). A stream that fell behind the oldest entry kept, or any
//! stream before the first change stream was opened, reads from storage as before.
//!
//! Bounded: at most `MAX_BYTES` of entries and `MAX_ENTRIES` entries; entries over
//! `MAX_ENTRY_BYTES` are listed without their bytes (readers load those from storage).

use parking_lot::RwLock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MAX_BYTES: usize = 64 << 20;
const MAX_ENTRIES: usize = 200_000;
const MAX_ENTRY_BYTES: usize = 64 << 10;

pub struct RecentEntry {
    pub ts: u64,
    /// The `oplog_by_ns` namespaces it is listed under.
    pub namespaces: Vec<String>,
    pub digest: Vec<u8>,
    /// The entry's BSON (None for large entries: read them from storage).
    pub bytes: Option<Arc<[u8]>>,
    /// The change event of a CRUD entry for streams with default options, built by
    /// the first such stream and copied by the others (fan-out: one build, not one
    /// per stream).
    pub plain_event: std::sync::OnceLock<Option<(bson::RawDocumentBuf, super::token::ResumeToken)>>,
}

impl RecentEntry {
    /// `digest`: the entry's `oplog_by_ns` digest, computed once by the writer.
    pub fn new(ts: u64, entry: &bson::RawDocument, digest: Vec<u8>) -> RecentEntry {
        let raw = entry.as_bytes();
        RecentEntry {
            ts,
            namespaces: crate::oplog::indexed_namespaces(entry),
            digest,
            bytes: (raw.len() <= MAX_ENTRY_BYTES).then(|| Arc::from(raw)),
            plain_event: std::sync::OnceLock::new(),
        }
    }

    fn size(&self) -> usize {
        64 + self.bytes.as_ref().map(|b| b.len()).unwrap_or(0) + self.digest.len()
    }
}

#[derive(Default)]
struct Ring {
    entries: VecDeque<Arc<RecentEntry>>,
    bytes: usize,
    /// Every committed entry with a time >= `from` is in `entries`.
    from: u64,
}

#[derive(Default)]
pub struct RecentOplog {
    enabled: AtomicBool,
    ring: RwLock<Ring>,
}

impl RecentOplog {
    /// Whether writers should hand their entries over (read under the writer lock).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Starts keeping entries from time `from` on. Called under the writer lock, so
    /// no commit can fall between this and the first hand-over.
    pub fn enable(&self, from: u64) {
        if !self.enabled() {
            let mut r = self.ring.write();
            r.entries.clear();
            r.bytes = 0;
            r.from = from;
            self.enabled.store(true, Ordering::Release);
        }
    }

    /// Appends a committed transaction's entries (in time order), dropping the oldest.
    pub fn push(&self, new: Vec<RecentEntry>) {
        let mut r = self.ring.write();
        for e in new {
            debug_assert!(
                r.entries.back().map(|b| b.ts < e.ts).unwrap_or(true),
                "entries arrive in time order"
            );
            r.bytes += e.size();
            r.entries.push_back(Arc::new(e));
        }
        while r.bytes > MAX_BYTES || r.entries.len() > MAX_ENTRIES {
            let Some(old) = r.entries.pop_front() else {
                break;
            };
            r.bytes -= old.size();
            r.from = old.ts + 1;
        }
    }

    /// The entries with times in `[from, to]` accepted by `wanted`, at most `limit`
    /// of them; None when the ring does not hold everything from `from` on.
    pub fn read(
        &self,
        from: u64,
        to: u64,
        limit: usize,
        mut wanted: impl FnMut(&RecentEntry) -> bool,
    ) -> Option<Vec<Arc<RecentEntry>>> {
        if !self.enabled() {
            return None;
        }
        let r = self.ring.read();
        if from < r.from {
            return None;
        }
        let start = r.entries.partition_point(|e| e.ts < from);
        let mut out = Vec::new();
        for e in r.entries.range(start..) {
            if e.ts > to || out.len() >= limit {
                break;
            }
            if wanted(e) {
                out.push(Arc::clone(e));
            }
        }
        Some(out)
    }
}

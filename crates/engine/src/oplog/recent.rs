//! The newest oplog entries, in memory, for the change streams that are keeping up:
//! the writer hands each committed entry over once, and every stream that is
//! current reads it from here instead of from storage (no iterator, no block
//! lookup per stream). A stream that fell behind the oldest entry kept, or any
//! stream before the first change stream was opened, reads from storage as before.
//!
//! Bounded: at most `MAX_BYTES` of entries and `MAX_ENTRIES` entries; entries over
//! `MAX_ENTRY_BYTES` are listed without their bytes (readers load those from storage).
//!
//! Only what open streams watch is copied: an entry whose namespaces no open stream's
//! [`WatchGuard`] covers is listed without its bytes too. A stream on collection A thus
//! costs writers to collection B no copy (the isolation target of issue 3); a stream
//! opened later on B reads B's earlier entries from storage, as it would large ones.

use crate::core::time::ClusterTime;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const MAX_BYTES: usize = 64 << 20;
const MAX_ENTRIES: usize = 200_000;
const MAX_ENTRY_BYTES: usize = 64 << 10;
/// Entries a read makes room for up to front (a tailing reader's batch: the
/// insert-to-wake-up delay gathers a few dozen at most).
const READ_CAPACITY: usize = 64;

/// A reader's memo of an entry (see [`RecentEntry::memo`]).
pub type Memo = Arc<dyn std::any::Any + Send + Sync>;

pub struct RecentEntry {
    pub ts: ClusterTime,
    /// The `oplog_by_ns` namespaces it is listed under.
    pub namespaces: Vec<String>,
    pub digest: Vec<u8>,
    /// The entry's BSON (None for large entries: read them from storage).
    pub bytes: Option<Arc<[u8]>>,
    /// What a reader made of the entry once for every reader like it (change streams:
    /// the event of a CRUD entry for streams with default options, built by the first
    /// such stream and shared by the others; fan-out: one build, not one per stream).
    /// Opaque here: the oplog layer does not know its readers.
    pub memo: std::sync::OnceLock<Option<Memo>>,
    /// An insert's collection (`ui`) and document, split off the entry by its first
    /// reader and shared by the others (tailable cursors on a capped collection: with
    /// N consumers, one parse and one copy instead of N). At most the entry's own size
    /// again, for the entries such cursors read.
    inserted: std::sync::OnceLock<Option<InsertedDocument>>,
    /// Where an insert's writer put the collection and the document (see
    /// [`RecentEntry::inserted_at`]).
    insert_at: Option<InsertAt>,
}

/// An insert entry's collection (`ui`) and the place of its document (`o`) in the
/// entry's bytes, as its writer knows them: the first reader copies the document from
/// there instead of walking the entry's fields (1,700 of a bus message's instructions,
/// callgrind 2026-11-28).
pub struct InsertAt {
    pub ui: [u8; 16],
    pub doc: std::ops::Range<usize>,
}

/// The collection and the document of an insert entry (see [`RecentEntry::inserted`]).
pub struct InsertedDocument {
    /// The collection's UUID (the entry's `ui`).
    pub ui: [u8; 16],
    pub doc: Arc<bson::RawDocumentBuf>,
}

impl RecentEntry {
    /// `digest` and `namespaces`: the entry's `oplog_by_ns` digest and namespaces,
    /// computed once by the writer; `watched`: the namespace bits open streams watch
    /// ([`RecentOplog::watched`]).
    pub fn new(
        ts: ClusterTime,
        entry: &bson::RawDocument,
        digest: Vec<u8>,
        namespaces: Vec<String>,
        watched: u64,
    ) -> RecentEntry {
        let raw = entry.as_bytes();
        let wanted = watched == u64::MAX
            || namespaces
                .iter()
                .any(|n| watched & crate::core::bus::namespace_bit(n) != 0);
        RecentEntry {
            ts,
            namespaces,
            digest,
            bytes: (wanted && raw.len() <= MAX_ENTRY_BYTES).then(|| Arc::from(raw)),
            memo: std::sync::OnceLock::new(),
            inserted: std::sync::OnceLock::new(),
            insert_at: None,
        }
    }

    /// The entry, an insert whose collection and document lie where `at` says.
    pub fn inserted_at(self, at: InsertAt) -> RecentEntry {
        RecentEntry {
            insert_at: Some(at),
            ..self
        }
    }

    /// The collection and document of an insert entry whose bytes the ring holds (None:
    /// another kind of entry, or a large one listed without its bytes).
    pub fn inserted(&self) -> Option<&InsertedDocument> {
        self.inserted
            .get_or_init(|| {
                let bytes = self.bytes.as_deref()?;
                if let Some(at) = &self.insert_at {
                    let doc = bson::RawDocument::from_bytes(bytes.get(at.doc.clone())?).ok()?;
                    return Some(InsertedDocument {
                        ui: at.ui,
                        doc: Arc::new(doc.to_owned()),
                    });
                }
                let raw = bson::RawDocument::from_bytes(bytes).ok()?;
                let fields = crate::oplog::EntryFields::read(raw).ok()?;
                if fields.op != Some("i") {
                    return None;
                }
                Some(InsertedDocument {
                    ui: fields.ui?.bytes.try_into().ok()?,
                    doc: Arc::new(fields.o?.to_owned()),
                })
            })
            .as_ref()
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
    from: ClusterTime,
}

pub struct RecentOplog {
    enabled: AtomicBool,
    ring: RwLock<Ring>,
    /// Open streams by namespace bit ([`crate::core::bus::namespace_bit`]).
    watchers: Mutex<[u32; 64]>,
    /// The bits with at least one open stream (read by writers without the lock).
    watched: AtomicU64,
}

impl Default for RecentOplog {
    fn default() -> Self {
        RecentOplog {
            enabled: AtomicBool::new(false),
            ring: RwLock::new(Ring::default()),
            watchers: Mutex::new([0; 64]),
            watched: AtomicU64::new(0),
        }
    }
}

/// An open stream's claim on the entries of the namespaces it watches; released on drop.
pub struct WatchGuard {
    oplog: Arc<RecentOplog>,
    mask: u64,
}

impl WatchGuard {
    /// The namespace bits watched (the commit-notice bits the stream wakes for).
    pub fn mask(&self) -> u64 {
        self.mask
    }

    /// The recent oplog that keeps the watched namespaces' entries.
    pub fn oplog(&self) -> &RecentOplog {
        &self.oplog
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.oplog.update_watchers(self.mask, false);
    }
}

impl RecentOplog {
    /// Registers a stream watching the namespace bits of `mask` (u64::MAX: all, for
    /// database and cluster streams): from now on their entries keep their bytes.
    pub fn watch(self: &Arc<Self>, mask: u64) -> WatchGuard {
        self.update_watchers(mask, true);
        WatchGuard {
            oplog: Arc::clone(self),
            mask,
        }
    }

    fn update_watchers(&self, mask: u64, add: bool) {
        let mut counts = self.watchers.lock();
        let mut watched = 0u64;
        for (bit, count) in counts.iter_mut().enumerate() {
            if mask & (1u64 << bit) != 0 {
                if add {
                    *count += 1;
                } else {
                    debug_assert!(*count > 0, "a watch released twice");
                    *count = count.saturating_sub(1);
                }
            }
            if *count > 0 {
                watched |= 1u64 << bit;
            }
        }
        self.watched.store(watched, Ordering::Release);
    }

    /// The namespace bits some open stream watches.
    pub fn watched(&self) -> u64 {
        self.watched.load(Ordering::Acquire)
    }

    /// Whether writers should hand their entries over (read under the writer lock).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Starts keeping entries from time `from` on. Called under the writer lock, so
    /// no commit can fall between this and the first hand-over.
    pub fn enable(&self, from: ClusterTime) {
        if !self.enabled() {
            let mut r = self.ring.write();
            r.entries.clear();
            r.bytes = 0;
            r.from = from;
            self.enabled.store(true, Ordering::Release);
        }
    }

    /// Forgets every entry and holds from `from` on: the store under it was replaced
    /// (a replica set's snapshot installed), so what the ring held says nothing of it.
    /// Readers before `from` read storage. Called under the writer lock.
    pub fn restart(&self, from: ClusterTime) {
        let mut r = self.ring.write();
        r.entries.clear();
        r.bytes = 0;
        r.from = from;
    }

    /// Appends a committed transaction's entries (in time order), dropping the oldest.
    pub fn push(&self, new: Vec<RecentEntry>) {
        let mut r = self.ring.write();
        for e in new {
            // Readers find entries by binary search on time and trust `from`: an entry
            // out of order, or below `from`, would be skipped by every stream.
            let after = r.entries.back().map_or(r.from, |b| b.ts.next());
            assert!(
                e.ts >= after,
                "recent oplog entry at {} arrives out of time order (expected {after} or later)",
                e.ts
            );
            r.bytes += e.size();
            r.entries.push_back(Arc::new(e));
        }
        while r.bytes > MAX_BYTES || r.entries.len() > MAX_ENTRIES {
            let Some(old) = r.entries.pop_front() else {
                break;
            };
            r.bytes = r
                .bytes
                .checked_sub(old.size())
                .expect("the recent oplog's byte count underflows");
            r.from = old.ts.next();
        }
        assert!(
            r.bytes <= MAX_BYTES && r.entries.len() <= MAX_ENTRIES,
            "the recent oplog is over its bounds: {} bytes, {} entries",
            r.bytes,
            r.entries.len()
        );
    }

    /// The entry at `ts`, if the ring holds it.
    pub fn get(&self, ts: ClusterTime) -> Option<Arc<RecentEntry>> {
        if !self.enabled() {
            return None;
        }
        let r = self.ring.read();
        if ts < r.from {
            return None;
        }
        let at = r.entries.partition_point(|e| e.ts < ts);
        r.entries.get(at).filter(|e| e.ts == ts).cloned()
    }

    /// The entries with times in `[from, to]` accepted by `wanted`, at most `limit`
    /// of them; None when the ring does not hold everything from `from` on.
    pub fn read(
        &self,
        from: ClusterTime,
        to: ClusterTime,
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
        debug_assert!(
            r.entries.front().is_none_or(|e| e.ts >= r.from),
            "the recent oplog holds an entry below its start"
        );
        let start = r.entries.partition_point(|e| e.ts < from);
        // Sized once for a tailing reader's batch, which grew it 0, 4, 8, 16 (250
        // instructions of a bus message read by 8 consumers, callgrind 2026-11-28); no
        // more than `READ_CAPACITY` up front, as a filter may keep few of many entries.
        let ahead = r.entries.len() - start;
        let mut out = Vec::with_capacity(limit.min(ahead).min(READ_CAPACITY));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ns: &str) -> bson::RawDocumentBuf {
        bson::RawDocumentBuf::from_document(&bson::doc! {"op": "i", "ns": ns, "o": {"_id": 1}})
            .unwrap()
    }

    #[test]
    fn only_watched_namespaces_keep_their_bytes() {
        let oplog = Arc::new(RecentOplog::default());
        assert_eq!(oplog.watched(), 0);
        let a = crate::core::bus::namespace_bit("db.a");
        let b = crate::core::bus::namespace_bit("db.b");
        assert_ne!(a, b, "the test needs two namespaces in different buckets");
        let on_a = oplog.watch(a);
        let twice_a = oplog.watch(a);
        assert_eq!(oplog.watched(), a);
        let kept = RecentEntry::new(
            ClusterTime::new(1, 1),
            &entry("db.a"),
            Vec::new(),
            vec!["db.a".into()],
            oplog.watched(),
        );
        let listed = RecentEntry::new(
            ClusterTime::new(1, 2),
            &entry("db.b"),
            Vec::new(),
            vec!["db.b".into()],
            oplog.watched(),
        );
        assert!(kept.bytes.is_some());
        assert!(listed.bytes.is_none(), "nobody watches db.b");
        assert_eq!(listed.namespaces, vec!["db.b".to_string()]);
        drop(on_a);
        assert_eq!(oplog.watched(), a, "a second stream still watches db.a");
        drop(twice_a);
        assert_eq!(oplog.watched(), 0);
        let all = oplog.watch(u64::MAX);
        assert!(RecentEntry::new(
            ClusterTime::new(1, 3),
            &entry("db.b"),
            Vec::new(),
            vec!["db.b".into()],
            oplog.watched()
        )
        .bytes
        .is_some());
        drop(all);
        assert_eq!(oplog.watched(), 0);
    }

    /// An insert entry's collection and document are split off once and shared; other
    /// entries, and entries kept without their bytes, have none.
    #[test]
    fn an_insert_entry_shares_its_document() {
        let ui = bson::Uuid::new();
        let insert = bson::rawdoc! {
            "op": "i", "ns": "db.a",
            "ui": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: ui.bytes().to_vec() },
            "o": {"_id": 1, "x": "y"},
        };
        let e = RecentEntry::new(ct(1), &insert, Vec::new(), vec!["db.a".into()], u64::MAX);
        let first = e.inserted().expect("an insert");
        assert_eq!(first.ui, ui.bytes());
        assert_eq!(
            first.doc.as_bytes(),
            bson::rawdoc! {"_id": 1, "x": "y"}.as_bytes()
        );
        assert!(
            Arc::ptr_eq(&first.doc, &e.inserted().unwrap().doc),
            "one copy, shared"
        );
        let update = bson::rawdoc! {"op": "u", "ns": "db.a", "o": {"$v": 2}};
        let u = RecentEntry::new(ct(2), &update, Vec::new(), vec!["db.a".into()], u64::MAX);
        assert!(u.inserted().is_none(), "not an insert");
        let unwatched = RecentEntry::new(ct(3), &insert, Vec::new(), vec!["db.a".into()], 0);
        assert!(unwatched.bytes.is_none() && unwatched.inserted().is_none());
    }

    /// The cluster time whose sortable integer is `v`.
    fn ct(v: u64) -> ClusterTime {
        ClusterTime::from_u64(v)
    }

    fn kept(ts: u64) -> RecentEntry {
        RecentEntry::new(
            ct(ts),
            &entry("db.a"),
            vec![b'i'],
            vec!["db.a".into()],
            u64::MAX,
        )
    }

    /// The times of the entries found, as their sortable integers.
    fn times(found: Option<Vec<Arc<RecentEntry>>>) -> Option<Vec<u64>> {
        found.map(|v| v.iter().map(|e| e.ts.as_u64()).collect())
    }

    #[test]
    fn reads_the_entries_in_a_range_only_while_it_holds_them_all() {
        let oplog = RecentOplog::default();
        assert!(
            oplog
                .read(ClusterTime::ZERO, ClusterTime::MAX, 10, |_| true)
                .is_none(),
            "not enabled"
        );
        oplog.enable(ct(10));
        oplog.push(vec![kept(10), kept(12)]);
        oplog.push(vec![kept(15)]);
        assert_eq!(
            times(oplog.read(ct(10), ct(15), 10, |_| true)),
            Some(vec![10, 12, 15])
        );
        assert_eq!(
            times(oplog.read(ct(11), ct(14), 10, |_| true)),
            Some(vec![12])
        );
        assert_eq!(
            times(oplog.read(ct(13), ct(20), 10, |_| true)),
            Some(vec![15])
        );
        assert_eq!(
            times(oplog.read(ct(16), ct(20), 10, |_| true)),
            Some(vec![])
        );
        assert_eq!(
            times(oplog.read(ct(10), ct(15), 2, |_| true)),
            Some(vec![10, 12])
        );
        assert_eq!(
            times(oplog.read(ct(10), ct(15), 10, |e| e.ts != ct(12))),
            Some(vec![10, 15])
        );
        // Before the start: those entries may exist, but only storage has them.
        assert!(oplog.read(ct(9), ct(15), 10, |_| true).is_none());
    }

    /// The oldest entries go once the ring is full, and a read from them is refused
    /// (the stream reads storage) rather than answered with a gap.
    #[test]
    fn a_full_ring_drops_its_oldest_entries_and_their_readers() {
        let oplog = RecentOplog::default();
        oplog.enable(ct(1));
        let extra = 10u64;
        for ts in 1..=MAX_ENTRIES as u64 + extra {
            oplog.push(vec![kept(ts)]);
        }
        let first_kept = extra + 1;
        assert!(oplog
            .read(ct(extra), ClusterTime::MAX, 1, |_| true)
            .is_none());
        assert_eq!(
            times(oplog.read(ct(first_kept), ClusterTime::MAX, 2, |_| true)),
            Some(vec![first_kept, first_kept + 1])
        );
        let r = oplog.ring.read();
        assert_eq!(r.entries.len(), MAX_ENTRIES);
        assert_eq!(r.from, ct(first_kept));
        assert_eq!(r.bytes, r.entries.iter().map(|e| e.size()).sum::<usize>());
    }

    #[test]
    #[should_panic(expected = "out of time order")]
    fn an_entry_older_than_the_newest_is_refused() {
        let oplog = RecentOplog::default();
        oplog.enable(ct(1));
        oplog.push(vec![kept(5)]);
        oplog.push(vec![kept(5)]);
    }

    #[test]
    #[should_panic(expected = "out of time order")]
    fn an_entry_below_the_start_is_refused() {
        let oplog = RecentOplog::default();
        oplog.enable(ct(8));
        oplog.push(vec![kept(7)]);
    }
}

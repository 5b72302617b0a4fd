//! The embedded key-value store behind Tailstream: RocksDB, one database with a
//! column family per kind of data. Everything above this crate sees only this
//! small interface (keyspaces, batches, ordered scans, fsync), so the engine
//! never touches RocksDB types and the store could be swapped.
//!
//! Durability model: every `commit` appends the batch to the write-ahead log's
//! in-memory buffer (RocksDB's `manual_wal_flush`: no system call per commit), and
//! `sync` writes that buffer and fsyncs the WAL, making everything committed so far
//! survive a process crash and a power loss. The engine calls `sync` from one thread
//! so concurrent writers share it (and at most 100 ms after any commit).

use rocksdb::{
    AsRawPtr, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use std::path::Path;

mod ops;
mod pending;
pub mod wal_tail;
pub use ops::{Op, Ops, MAX_ENCODED_BYTES, MAX_PART_BYTES};
pub use pending::{see_pending, Merged};

/// A stored key and its value, as the store returns them.
pub type KeyValue = (Box<[u8]>, Box<[u8]>);

/// A named, ordered keyspace (a RocksDB column family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// Documents: collection id ++ KeyString(_id) -> BSON.
    Docs,
    /// Secondary index entries: index id ++ KeyString(key values) ++ KeyString(_id) -> KeyString(_id).
    Index,
    /// The oplog: 8-byte big-endian cluster time -> oplog entry BSON.
    Oplog,
    /// The oplog ordered by namespace: namespace ++ 0x00 ++ cluster time -> empty.
    OplogByNs,
    /// Catalog: collection metadata by namespace.
    Catalog,
    /// Small counters and markers (id allocation, oplog trim point).
    Meta,
    /// Insertion order of capped collections: collection id ++ insert time -> KeyString(_id).
    Natural,
    /// Change-stream pre- and post-images: cluster time of the write ++ kind -> document BSON.
    Images,
    /// The replicated log of a replica set (issue 27): 8-byte big-endian log index ->
    /// the entry's bytes, as the consensus layer encodes it.
    ReplLog,
}

impl Space {
    /// Every space; a new one goes at the end (its place is its code in [`Ops`]).
    pub const ALL: [Space; 9] = [
        Space::Docs,
        Space::Index,
        Space::Oplog,
        Space::OplogByNs,
        Space::Catalog,
        Space::Meta,
        Space::Natural,
        Space::Images,
        Space::ReplLog,
    ];

    /// Keys only ever appended in ascending order and dropped from the oldest end (the
    /// oplog). Such a space is never compressed per level and never gets range
    /// tombstones, so its flushed files do not overlap and compaction moves them down
    /// the levels without rewriting them; the oldest keys go by whole files (see
    /// [`Store::retire_through`]).
    fn append_only(self) -> bool {
        matches!(self, Space::Oplog)
    }

    /// The length of the key prefix under which a write usually lands next to the
    /// previous write with the same prefix (a collection's or an index's 4-byte id:
    /// new `_id`s and index keys mostly ascend), given to RocksDB as the memtable's
    /// insert-hint prefix: it keeps one skip-list position per prefix and starts the
    /// next insert with that prefix there instead of at the top of the list. Without
    /// it RocksDB keeps one position for the whole memtable, so two collections written
    /// in turn send every insert down from the top. `Meta`'s length comes from the
    /// caller ([`StoreOptions::meta_insert_hint_prefix_bytes`]).
    fn insert_hint_prefix_bytes(self, opts: &StoreOptions) -> Option<usize> {
        match self {
            Space::Docs | Space::Index | Space::Natural => Some(4),
            Space::Meta => opts.meta_insert_hint_prefix_bytes,
            _ => None,
        }
    }

    fn cf_name(self) -> &'static str {
        match self {
            Space::Docs => "docs",
            Space::Index => "index",
            Space::Oplog => "oplog",
            Space::OplogByNs => "oplog_by_ns",
            Space::Catalog => "catalog",
            Space::Meta => "meta",
            Space::Natural => "natural",
            Space::Images => "images",
            Space::ReplLog => "repl_log",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("storage error: {0}")]
pub struct StorageError(String);

impl From<rocksdb::Error> for StorageError {
    fn from(e: rocksdb::Error) -> Self {
        StorageError(e.into_string())
    }
}

impl StorageError {
    /// Whether the operation failed for want of disk space (ENOSPC: RocksDB keeps the
    /// system's message in its own).
    pub fn is_out_of_space(&self) -> bool {
        self.0.contains("No space left on device")
    }
}

pub type Result<T> = std::result::Result<T, StorageError>;

/// What a range of keys holds (see [`Store::range_size`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RangeSize {
    pub entries: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
}

/// Live write-ahead log kept before the keyspaces that pin its oldest file are flushed
/// (see `Store::open`).
const MAX_TOTAL_WAL_BYTES: u64 = 512 << 20;

/// Tuning knobs that matter for the workload; defaults suit a small server.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Memtable size per column family.
    pub write_buffer_bytes: usize,
    /// Values at least this large go to blob files (less compaction rewriting of big documents).
    pub min_blob_bytes: u64,
    /// Block cache shared by every space.
    pub block_cache_bytes: usize,
    /// `Meta` keys whose first this many bytes match are written in place of each
    /// other over and over (the engine's retryable-write records: one session's), so
    /// the memtable keeps an insert position per such prefix (see
    /// `Space::insert_hint_prefix_bytes`). Keys shorter than this take the plain path.
    /// A position costs about 230 bytes of the memtable per prefix seen since its last
    /// flush, counted in its size. None: no positions kept.
    pub meta_insert_hint_prefix_bytes: Option<usize>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            write_buffer_bytes: 64 << 20,
            min_blob_bytes: 64 << 10,
            block_cache_bytes: 256 << 20,
            meta_insert_hint_prefix_bytes: None,
        }
    }
}

pub struct Store {
    /// Each space's column family, by `Space as usize`, looked up once at open: the
    /// crate's `DB::cf_handle` searches the DB's map by name on every call, 33 string
    /// comparisons per message of the bus benchmark (callgrind, 2026-11-28).
    ///
    /// They point into `db`'s map of column families. That map lives on the heap (a
    /// `BTreeMap`, its entries unmoved when `db` moves) and never changes after open:
    /// adding or dropping a column family takes `&mut DB` (single-threaded mode),
    /// which `Store` never takes. The `'static` never leaves the store: [`Store::cf`]
    /// lends them for as long as `&self`.
    cfs: [&'static ColumnFamily; Space::ALL.len()],
    db: DB,
    /// Per append-only space: the last key retired and reclaimed (empty: none). Its
    /// compaction filter drops keys up to it, should a compaction ever rewrite them.
    floors: Vec<(Space, std::sync::Arc<std::sync::RwLock<Vec<u8>>>)>,
    snapshots: std::sync::Mutex<Snapshots>,
    /// Set when an operation failed for want of disk space (see [`Store::wal_writable`]).
    out_of_space: std::sync::atomic::AtomicBool,
    /// Some operation failed for want of disk space since the store was opened (see
    /// [`Store::noting_space`]).
    ever_out_of_space: std::sync::atomic::AtomicBool,
    /// Held through each sync: a sync that fails for want of space is noted before the
    /// next one starts (the group-commit thread and the oplog's reclaiming both sync;
    /// racing, the second saw the first's failure as an unexplained "Seen error").
    sync_lock: std::sync::Mutex<()>,
    /// Writes proposed to a replica set and not stored yet (see `pending.rs`).
    pending: pending::Pending,
    /// The newest WAL file's end as the open found it (see `wal_tail.rs`).
    wal_tail_at_open: Option<wal_tail::WalTail>,
    /// The read options of [`Store::get`], made once: the crate's `get_cf` makes and
    /// frees a C++ `ReadOptions` per read, 830 of a point read's 2,500 instructions
    /// (callgrind: an insert's `_id` check).
    point_reads: ReadOptions,
    /// The write options of [`Store::commit`] (not synced: see `sync`), made once as
    /// `point_reads` is.
    writes: WriteOptions,
}

/// Which snapshots are open, and what waits for them to close before it is reclaimed.
#[derive(Default)]
struct Snapshots {
    /// Id the next snapshot gets; ids only grow.
    next: u64,
    live: std::collections::BTreeSet<u64>,
    /// Retired key ranges per space: (last retired key, `next` when retired). A snapshot
    /// with a smaller id may still read them.
    retired: Vec<(Space, Vec<u8>, u64)>,
}

/// A consistent read view of the whole store as of its creation (a RocksDB snapshot),
/// owning a reference to the store so it can live as long as a transaction does.
pub struct OwnedSnapshot {
    // Declared before `store`, and taken out in `drop`: released before the store can go.
    snap: Option<rocksdb::SnapshotWithThreadMode<'static, DB>>,
    store: std::sync::Arc<Store>,
    id: u64,
}

impl Drop for OwnedSnapshot {
    fn drop(&mut self) {
        self.snap.take();
        self.store.snapshots().live.remove(&self.id);
    }
}

impl OwnedSnapshot {
    fn snap(&self) -> &rocksdb::SnapshotWithThreadMode<'static, DB> {
        self.snap.as_ref().expect("released only on drop")
    }

    pub fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.snap().get_cf(self.store.cf(space), key)?)
    }

    /// Every key and value starting with `prefix`, in key order.
    pub fn scan_prefix(&self, space: Space, prefix: &[u8]) -> Result<Vec<KeyValue>> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(prefix.to_vec());
        if let Some(u) = prefix_successor(prefix) {
            ro.set_iterate_upper_bound(u);
        }
        self.snap()
            .iterator_cf_opt(
                self.store.cf(space),
                ro,
                IteratorMode::From(prefix, Direction::Forward),
            )
            .map(|r| r.map_err(StorageError::from))
            .collect()
    }
}

/// A value read by [`Store::get_sorted`]: the storage engine's own buffer (no copy), or
/// a pending write's bytes.
pub struct Fetched<'a>(FetchedBytes<'a>);

enum FetchedBytes<'a> {
    Stored(rocksdb::DBPinnableSlice<'a>),
    Pending(Box<[u8]>),
}

impl std::ops::Deref for Fetched<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            FetchedBytes::Stored(v) => v,
            FetchedBytes::Pending(v) => v,
        }
    }
}

/// See [`Store::point_reader`].
pub struct PointReader<'a> {
    it: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    positioned: bool,
    /// The pending writes, for a thread that sees them (see `pending.rs`).
    pending: Option<(&'a pending::Pending, Space)>,
    /// The last pending value returned.
    held: Option<Box<[u8]>>,
}

impl PointReader<'_> {
    /// The value of `key`; keys must be asked in ascending order for the stepping to help.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>> {
        if let Some((pending, space)) = self.pending {
            if let Some(v) = pending.get(space, key) {
                self.held = v;
                return Ok(self.held.as_deref());
            }
        }
        if self.positioned && self.it.valid() {
            // Step only onto the key right after the current one (a run of consecutive
            // keys): stepping onto any other entry would load its value for nothing,
            // which for a blob-stored value means reading megabytes from disk.
            if self.it.key().map(|k| is_successor(k, key)).unwrap_or(false) {
                self.it.next();
            }
        }
        if !(self.positioned && self.it.valid() && self.it.key() == Some(key)) {
            self.it.seek(key);
            self.positioned = true;
        }
        self.it.status()?;
        if self.it.valid() && self.it.key() == Some(key) {
            Ok(self.it.value())
        } else {
            Ok(None)
        }
    }
}

/// Calls a RocksDB C function that reports failure through an error-string pointer.
///
/// # Safety
/// `f` must be such a call, with valid arguments besides the error pointer.
unsafe fn c_call(f: impl FnOnce(*mut *mut std::ffi::c_char)) -> std::result::Result<(), String> {
    let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
    f(&mut err);
    if err.is_null() {
        return Ok(());
    }
    let message = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
    librocksdb_sys::rocksdb_free(err as *mut std::ffi::c_void);
    Err(message)
}

/// Whether `b` is `a` plus one, both read as big-endian integers of the same width
/// (without building `a + 1`: this runs for every entry a catching-up stream reads).
fn is_successor(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // a + 1 keeps a's bytes up to its last byte below 0xFF, which goes up by one;
    // the 0xFF bytes after it wrap to 0.
    let Some(last) = a.iter().rposition(|&x| x != 0xFF) else {
        return false;
    };
    a[..last] == b[..last] && b[last] == a[last] + 1 && b[last + 1..].iter().all(|&x| x == 0)
}

/// What a batch reserves at its first write. RocksDB's own batch starts with its
/// 12-byte header and doubles as it grows: a bus message's insert (five keys, 420
/// bytes of write-ahead log each) reallocated it five times, copying and glibc
/// `malloc`/`free` each time. Bigger batches grow from here as before.
const BATCH_RESERVED_BYTES: usize = 1 << 10;

/// A set of writes applied atomically by `Store::commit`.
pub struct Batch<'a> {
    store: &'a Store,
    inner: Option<WriteBatch>,
    /// The same writes as [`Ops`], when the batch was made by [`Store::recording_batch`]
    /// (a replica set ships them).
    recorded: Option<Ops>,
}

/// A space's options before its tuning: with RocksDB's memtable insert hint on keys'
/// first `hint_prefix_bytes` bytes (the crate has no setter for it; RocksDB's own
/// options string names its built-in fixed-prefix transform).
fn space_options(hint_prefix_bytes: Option<usize>) -> Options {
    let Some(n) = hint_prefix_bytes else {
        return Options::default();
    };
    Options::default()
        .get_options_from_string(format!(
            "memtable_insert_with_hint_prefix_extractor=fixed:{n}"
        ))
        .expect("RocksDB parses its own fixed-prefix transform")
}

impl Store {
    /// Opens (creating if needed) the store in `path`.
    pub fn open(path: &Path, opts: &StoreOptions) -> Result<Store> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.increase_parallelism(2);
        // A flush and a compaction can run at once, so a compaction never holds up the
        // flush that writers wait on.
        db_opts.set_max_background_jobs(4);
        // Write back file data as it is written instead of in one burst at the end of a
        // flush or compaction, whose fsync would otherwise stall the WAL's.
        db_opts.set_bytes_per_sync(1 << 20);
        db_opts.set_wal_bytes_per_sync(1 << 20);
        // Writers are already serialised by the engine's sequencer; pipelining lets the
        // WAL write of one batch overlap the memtable insert of the previous one.
        db_opts.set_enable_pipelined_write(true);
        // A commit appends to RocksDB's in-memory WAL buffer instead of writing it to the
        // file with a write(2) per batch: `sync` (the group-commit thread, at most
        // 100 ms after any commit, and at once for `j: true` writers) writes and fsyncs
        // it. Plain `{w: 1}` writes may thus be lost to a process crash within that
        // window, as mongod's unjournaled writes are; journaled ones never.
        db_opts.set_manual_wal_flush(true);
        // Reuse obsolete WAL files instead of deleting them and growing new ones: a sync
        // then overwrites blocks the file already has, so fdatasync writes only the data,
        // not the inode's new size through the filesystem journal (on ext4 a group
        // commit's fsync takes about half as long, and no longer queues behind the
        // journal commits of flushes and compactions). Records carry their log number,
        // so recovery stops at the stale tail of a reused file (RocksDB keeps recycling
        // with its default point-in-time recovery).
        db_opts.set_recycle_log_file_num(4);
        // Every commit also writes the small keyspaces (Meta's oplog state), whose
        // memtables fill slowly: each would keep every WAL file since its last flush
        // alive, up to RocksDB's default limit of 4 × all write buffers (8 GiB here).
        // Past this total the keyspaces holding the oldest file are flushed, so a WAL
        // file becomes obsolete (and reusable) after about this much writing, and
        // recovery after a crash replays at most this much.
        db_opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut floors = Vec::new();
        let cfs: Vec<ColumnFamilyDescriptor> = Space::ALL
            .iter()
            .map(|s| {
                if s.append_only() {
                    floors.push((*s, std::sync::Arc::new(std::sync::RwLock::new(Vec::new()))));
                }
                let mut o = space_options(s.insert_hint_prefix_bytes(opts));
                o.set_write_buffer_size(opts.write_buffer_bytes);
                o.set_max_write_buffer_number(4);
                // Ingestion bursts pile up level-0 files faster than 2 cores compact them;
                // slowing writers at 20 files (the default) turns a burst into a stall.
                o.set_level_zero_slowdown_writes_trigger(40);
                o.set_level_zero_stop_writes_trigger(64);
                o.set_compression_type(DBCompressionType::Lz4);
                // Levels 0 and 1 are rewritten soon: compressing them costs CPU for little.
                o.set_compression_per_level(&[
                    DBCompressionType::None,
                    DBCompressionType::None,
                    DBCompressionType::Lz4,
                    DBCompressionType::Lz4,
                    DBCompressionType::Lz4,
                    DBCompressionType::Lz4,
                    DBCompressionType::Lz4,
                ]);
                let mut table = BlockBasedOptions::default();
                table.set_block_cache(&cache);
                if matches!(s, Space::Docs | Space::Index) {
                    // Every insert looks up its _id (and unique keys) expecting a miss: a
                    // bloom filter answers most misses without reading a block.
                    table.set_bloom_filter(10.0, false);
                    table.set_cache_index_and_filter_blocks(true);
                    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
                    // The same for the memtable: a miss is answered without searching
                    // its skip list (2% of the write buffer).
                    o.set_memtable_prefix_bloom_ratio(0.02);
                    o.set_memtable_whole_key_filtering(true);
                }
                if matches!(s, Space::Oplog | Space::OplogByNs) {
                    // Read in order (a stream catching up): big blocks make one block
                    // read, checksum and cache lookup serve dozens of entries, where
                    // 4 KiB blocks held three or four 1 KB entries.
                    table.set_block_size(64 << 10);
                }
                o.set_block_based_table_factory(&table);
                if matches!(s, Space::Docs | Space::Oplog) {
                    o.set_enable_blob_files(true);
                    o.set_min_blob_size(opts.min_blob_bytes);
                    // Rewritten documents leave garbage in blob files. (The oplog's blob
                    // files go with the last table file that refers to them.)
                    o.set_enable_blob_gc(true);
                }
                if s.append_only() {
                    // One compression for every level: a file moves to the next level
                    // without being rewritten only if its compression matches that
                    // level's (and RocksDB moves level-0 files only without per-level
                    // compression). Uncompressed, as levels 0 and 1 of the other spaces.
                    o.set_compression_type(DBCompressionType::None);
                    o.set_compression_per_level(&[]);
                    let floor = std::sync::Arc::clone(
                        &floors.last().expect("one floor per append-only space").1,
                    );
                    o.set_compaction_filter(
                        "retired-keys",
                        move |_level: u32, key: &[u8], _value: &[u8]| {
                            let floor = floor.read().unwrap_or_else(|e| e.into_inner());
                            if !floor.is_empty() && key <= floor.as_slice() {
                                rocksdb::compaction_filter::Decision::Remove
                            } else {
                                rocksdb::compaction_filter::Decision::Keep
                            }
                        },
                    );
                }
                ColumnFamilyDescriptor::new(s.cf_name(), o)
            })
            .collect();
        // Read before RocksDB's recovery, which drops a torn tail without a word and
        // then rewrites the WAL.
        // A report only: a file it cannot read is RocksDB's to refuse.
        let wal_tail = wal_tail::newest_wal_tail(path).unwrap_or_else(|e| {
            tracing::warn!("cannot read the write-ahead log's end: {e}");
            None
        });
        if let Some(t) = wal_tail.as_ref().filter(|t| t.dropped_bytes > 0) {
            tracing::warn!(
                file = %t.file.display(),
                fileBytes = t.file_bytes,
                wholeRecordsEnd = t.whole_records_end,
                droppedBytes = t.dropped_bytes,
                reason = t.reason,
                "The write-ahead log ends in {}: recovery drops its last {} bytes, a write \
                 the crash left incomplete (a journaled write is acknowledged only once \
                 whole on disk)",
                t.reason,
                t.dropped_bytes
            );
        }
        let db = DB::open_cf_descriptors(&db_opts, path, cfs)?;
        let cfs = Space::ALL.map(|space| {
            assert_eq!(
                Space::ALL[space as usize],
                space,
                "a space's code is its place in Space::ALL"
            );
            let cf: *const ColumnFamily = db
                .cf_handle(space.cf_name())
                .expect("every space's column family was opened");
            // SAFETY: see `Store::cfs`: the handle lives, unmoved, as long as `db`,
            // which the store owns.
            unsafe { &*cf }
        });
        Ok(Store {
            cfs,
            db,
            wal_tail_at_open: wal_tail,
            floors,
            snapshots: Default::default(),
            out_of_space: Default::default(),
            ever_out_of_space: Default::default(),
            sync_lock: Default::default(),
            pending: Default::default(),
            point_reads: ReadOptions::default(),
            writes: {
                let mut wo = WriteOptions::default();
                wo.set_sync(false);
                wo
            },
        })
    }

    /// The newest WAL file's end as this open found it, before recovery: what a crash
    /// left there (None: no WAL file).
    pub fn wal_tail_at_open(&self) -> Option<&wal_tail::WalTail> {
        self.wal_tail_at_open.as_ref()
    }

    fn snapshots(&self) -> std::sync::MutexGuard<'_, Snapshots> {
        self.snapshots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Declares that the keys of an append-only space up to and including `last` will
    /// not be read again (the oplog below its trim point): readers must not ask for
    /// them. Call it after committing whatever made them dead. Snapshots already open still see them; once those are closed,
    /// [`Store::reclaim`] deletes the files holding only such keys. Cheap: the writer
    /// calls it on every trim instead of writing range tombstones, which would make
    /// the files overlap and the compactions rewrite them.
    pub fn retire_through(&self, space: Space, last: &[u8]) {
        assert!(space.append_only(), "{space:?} is not append-only");
        let mut s = self.snapshots();
        let epoch = s.next;
        match s
            .retired
            .iter_mut()
            .find(|(sp, _, e)| *sp == space && *e == epoch)
        {
            Some(r) => {
                if r.1.as_slice() < last {
                    r.1 = last.to_vec();
                }
            }
            None => s.retired.push((space, last.to_vec(), epoch)),
        }
    }

    /// Deletes the files of retired keys that no open snapshot can read any more (a
    /// file straddling the retired bound stays until the bound passes it), after
    /// syncing the write-ahead log. Returns how many retirements it applied. Call it
    /// from a background thread: it syncs the log and may write RocksDB's manifest.
    pub fn reclaim(&self) -> Result<usize> {
        let ready: Vec<(Space, Vec<u8>)> = {
            let mut s = self.snapshots();
            let oldest = s.live.first().copied().unwrap_or(u64::MAX);
            let mut ready: Vec<(Space, Vec<u8>)> = Vec::new();
            s.retired.retain(|(space, last, epoch)| {
                if *epoch > oldest {
                    return true;
                }
                match ready.iter_mut().find(|(sp, _)| sp == space) {
                    Some(r) if r.1 < *last => r.1 = last.clone(),
                    Some(_) => {}
                    None => ready.push((*space, last.clone())),
                }
                false
            });
            ready
        };
        if !ready.is_empty() {
            // A retirement follows the commit of the batch that made the keys dead
            // (for the oplog: the trim copied documents out of them). Deleting the
            // files is made durable at once by RocksDB's manifest; that batch may
            // still be only in the page cache. Sync it first, or a power loss could
            // keep the deletion and lose the copies.
            self.sync()?;
        }
        for (space, last) in &ready {
            if let Some((_, floor)) = self.floors.iter().find(|(sp, _)| sp == space) {
                let mut f = floor.write().unwrap_or_else(|e| e.into_inner());
                if f.as_slice() < last.as_slice() {
                    *f = last.clone();
                }
            }
            // Both ends inclusive: a file whose last key is `last` holds only retired keys.
            self.db
                .delete_file_in_range_cf(self.cf(*space), &[] as &[u8], last.as_slice())?;
        }
        Ok(ready.len())
    }

    /// Table files (all levels) of a space, for tests and diagnostics.
    pub fn file_count(&self, space: Space) -> u64 {
        (0..7)
            .map(|l| {
                self.db
                    .property_int_value_cf(
                        self.cf(space),
                        &format!("rocksdb.num-files-at-level{l}"),
                    )
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            })
            .sum()
    }

    fn cf(&self, space: Space) -> &ColumnFamily {
        let cf = self.cfs[space as usize];
        debug_assert!(
            self.db
                .cf_handle(space.cf_name())
                .is_some_and(|named| std::ptr::eq(named, cf)),
            "the handle kept for {space:?} is the one its name finds"
        );
        cf
    }

    pub fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.pending.active() {
            if let Some(v) = self.pending.get(space, key) {
                return Ok(v.map(Vec::from));
            }
        }
        let value = self
            .db
            .get_pinned_cf_opt(self.cf(space), key, &self.point_reads)?;
        Ok(value.map(|v| v.to_vec()))
    }

    /// Holds a commit's writes as pending under `id` (ids grow): a thread that sees
    /// pending writes ([`see_pending`]) reads them until [`Store::pending_remove`].
    /// A range delete is refused.
    pub fn pending_add(&self, id: u64, ops: &Ops) -> Result<()> {
        self.pending.add(id, ops)
    }

    /// Drops commit `id`'s pending writes: call once the batch holding them is committed.
    pub fn pending_remove(&self, id: u64) {
        self.pending.remove(id)
    }

    /// Drops every pending write (commits that will never be stored).
    pub fn pending_clear(&self) {
        self.pending.clear()
    }

    /// A read view (of the store alone: pending writes are not in it) of everything committed so far (see [`OwnedSnapshot`]).
    pub fn snapshot(self: &std::sync::Arc<Self>) -> OwnedSnapshot {
        // Registered before it is taken: `reclaim` never deletes what it can read.
        let mut registry = self.snapshots();
        let id = registry.next;
        registry.next += 1;
        registry.live.insert(id);
        drop(registry);
        let snap = self.db.snapshot();
        // SAFETY: the snapshot borrows `self.db`; the `Arc` stored beside it keeps the
        // store (and so the DB) alive until `OwnedSnapshot::drop` has released it.
        let snap: rocksdb::SnapshotWithThreadMode<'static, DB> =
            unsafe { std::mem::transmute(snap) };
        OwnedSnapshot {
            snap: Some(snap),
            store: std::sync::Arc::clone(self),
            id,
        }
    }

    pub fn batch(&self) -> Batch<'_> {
        Batch {
            store: self,
            inner: None,
            recorded: None,
        }
    }

    /// A batch that also keeps its writes as [`Ops`] ([`Batch::take_recorded`]).
    pub fn recording_batch(&self) -> Batch<'_> {
        Batch {
            recorded: Some(Ops::new()),
            ..self.batch()
        }
    }

    /// Applies the batch atomically (visible to reads on return). Survives a crash
    /// only once `sync` (which writes the WAL buffer and fsyncs it) has run after it.
    pub fn commit(&self, batch: Batch<'_>) -> Result<()> {
        let wb = batch.inner.unwrap_or_default();
        self.noting_space(self.db.write_opt(wb, &self.writes))
    }

    /// Makes every committed batch durable (fsync of the write-ahead log).
    pub fn sync(&self) -> Result<()> {
        let _one_at_a_time = self.sync_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.wal_writable()?;
        self.noting_space(self.db.flush_wal(true))
    }

    /// Passes a RocksDB result on, remembering a failure for want of disk space.
    /// RocksDB's log writer refuses every write after one of its writes failed, with
    /// a plain I/O error ("Seen error. Skip writing buffer."), and a probe with an
    /// empty batch can go through meanwhile (the log is not touched): after a failure
    /// for want of space, that refusal is the same failure, and reported as one (it
    /// aborted the server as an unknown fsync error, in about one run in fifteen of
    /// tests/test_disk_full.py).
    fn noting_space<T>(&self, r: std::result::Result<T, rocksdb::Error>) -> Result<T> {
        use std::sync::atomic::Ordering;
        r.map_err(|e| {
            let mut e = StorageError::from(e);
            if !e.is_out_of_space()
                && e.0.contains("Seen error")
                && self.ever_out_of_space.load(Ordering::SeqCst)
            {
                e = StorageError(format!(
                    "{} (the write-ahead log refuses writes since one found the disk full: \
                     No space left on device)",
                    e.0
                ));
            }
            if e.is_out_of_space() {
                self.out_of_space.store(true, Ordering::SeqCst);
                self.ever_out_of_space.store(true, Ordering::SeqCst);
            }
            e
        })
    }

    /// Whether the write-ahead log may be written, checked before every write of its
    /// buffer. When the disk fills up, RocksDB stops all writes. A failed write of the
    /// log buffer (with `manual_wal_flush`) is final until the database is reopened: a
    /// restart replays the log up to the last fsync. A failed flush or compaction heals
    /// by itself: RocksDB waits until one memtable's worth of space is free (it looks
    /// every 5 s), flushes every memtable and switches to a new log file. In both
    /// cases, writing the log buffer while writes are stopped fails with a plain I/O
    /// error ("Seen error"), which RocksDB takes as fatal. So after a failure for want
    /// of space nothing touches the log until an empty batch, which RocksDB refuses
    /// with the stored error as long as writes are stopped, goes through.
    fn wal_writable(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.out_of_space.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Through `noting_space`: the refusal may be the log writer's "Seen error",
        // which is that same failure for want of space.
        self.noting_space(
            self.db
                .write_opt(WriteBatch::default(), &WriteOptions::default()),
        )?;
        self.out_of_space.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Writes every committed batch to the data files (`fsync` without `lock`, as
    /// mongod's checkpoint): the WAL is synced, then every memtable is flushed, which
    /// also starts the next WAL file (a reused one when one is free) and lets the old
    /// ones go.
    pub fn checkpoint(&self) -> Result<()> {
        self.sync()?;
        let mut fo = rocksdb::FlushOptions::default();
        fo.set_wait(true);
        let cfs: Vec<&ColumnFamily> = Space::ALL.iter().map(|s| self.cf(*s)).collect();
        self.noting_space(self.db.flush_cfs_opt(&cfs, &fo))
    }

    /// Keeps the data files at rest for a copy (`fsync` with `lock: true`, after a
    /// [`Store::checkpoint`]): flushes and compactions stop until
    /// [`Store::resume_files`], so no file is created, changed or deleted meanwhile
    /// (the caller has stopped the writes first).
    pub fn pause_files(&self) -> Result<()> {
        // SAFETY: the pointer is the open database's own handle, valid while `self.db`
        // lives; pausing waits for running background jobs.
        let paused = unsafe {
            c_call(|err| librocksdb_sys::rocksdb_pause_background_work(self.db.as_raw_ptr(), err))
        };
        if let Err(e) = paused {
            return Err(StorageError(format!("pausing background work: {e}")));
        }
        Ok(())
    }

    /// Undoes [`Store::pause_files`].
    pub fn resume_files(&self) -> Result<()> {
        // SAFETY: as in `pause_files`; called once per pause.
        unsafe {
            c_call(|err| {
                librocksdb_sys::rocksdb_continue_background_work(self.db.as_raw_ptr(), err)
            })
        }
        .map_err(|e| StorageError(format!("resuming background work: {e}")))
    }

    /// Keys and values in `[lower, upper)` (upper `None` = to the end of the space),
    /// ascending or descending. Bounds are pushed into RocksDB so deleted ranges
    /// outside them are never visited.
    pub fn scan(
        &self,
        space: Space,
        lower: &[u8],
        upper: Option<&[u8]>,
        reverse: bool,
    ) -> Merged<impl Iterator<Item = Result<KeyValue>> + '_> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(lower.to_vec());
        if let Some(u) = upper {
            ro.set_iterate_upper_bound(u.to_vec());
        }
        let mode = if reverse {
            IteratorMode::End
        } else {
            IteratorMode::From(lower, Direction::Forward)
        };
        // The pending range is copied before the store's iterator opens (pending.rs).
        let merge = self.pending.merge(space, lower, upper, reverse);
        merge(
            self.db
                .iterator_cf_opt(self.cf(space), ro, mode)
                .map(|r| r.map_err(StorageError::from)),
        )
    }

    /// A reader for many point lookups in ascending key order: consecutive keys are
    /// read by stepping an iterator (each block is decoded once) instead of one
    /// `get` per key (a block-cache lookup and a block search each).
    /// The blocks it reads are not added to the block cache: a stream catching up
    /// reads each entry once, and would only push out blocks that are read again.
    pub fn point_reader(&self, space: Space) -> PointReader<'_> {
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        let it = self.db.raw_iterator_cf_opt(self.cf(space), ro);
        PointReader {
            it,
            positioned: false,
            pending: self.pending.active().then_some((&self.pending, space)),
            held: None,
        }
    }

    /// The values of `keys`, given in ascending order, in their order (`None`: no such
    /// key). One RocksDB MultiGet: each block holding some of the keys is found and read
    /// once for all of them, where a [`PointReader`] seeks every level's iterator per key
    /// that is not the successor of the one before (a bucket of a parallel change stream
    /// fetching one entry in eight spent a third of its CPU in those seeks).
    ///
    /// `shared`: readers running alongside will read the same blocks (the buckets of one
    /// parallel change stream, each fetching its share of every block): the blocks read
    /// go into the block cache so that one reads each block from the file and the others
    /// find it there. Otherwise, as the point reader, it leaves the cache alone.
    /// (Measured on the 16-core device, 8 buckets of 2,000,000 entries: 454,679 events/s
    /// with the point reader, 503,715 with MultiGet, 565,654 with MultiGet shared;
    /// bench/history/2026-11-27-parallel-stream-device.md.)
    pub fn get_sorted<K: AsRef<[u8]>>(
        &self,
        space: Space,
        keys: &[K],
        shared: bool,
    ) -> Result<Vec<Option<Fetched<'_>>>> {
        debug_assert!(
            keys.windows(2).all(|w| w[0].as_ref() < w[1].as_ref()),
            "keys ascending"
        );
        let mut ro = ReadOptions::default();
        ro.fill_cache(shared);
        let pending = self.pending.active();
        let found = self.db.batched_multi_get_cf_opt(
            self.cf(space),
            keys.iter().map(|k| k.as_ref()),
            true,
            &ro,
        );
        assert_eq!(found.len(), keys.len(), "a value or none per key");
        let mut out = Vec::with_capacity(keys.len());
        for (key, value) in keys.iter().zip(found) {
            if pending {
                if let Some(v) = self.pending.get(space, key.as_ref()) {
                    out.push(v.map(|b| Fetched(FetchedBytes::Pending(b))));
                    continue;
                }
            }
            out.push(value?.map(|v| Fetched(FetchedBytes::Stored(v))));
        }
        Ok(out)
    }

    /// All keys starting with `prefix`, ascending or descending.
    pub fn scan_prefix(
        &self,
        space: Space,
        prefix: &[u8],
        reverse: bool,
    ) -> Merged<impl Iterator<Item = Result<KeyValue>> + '_> {
        let upper = prefix_successor(prefix);
        self.scan(space, prefix, upper.as_deref(), reverse)
    }

    /// How many keys start with `prefix` (values are not copied out).
    pub fn count_prefix(&self, space: Space, prefix: &[u8]) -> Result<u64> {
        if self.pending.active() {
            let mut n = 0;
            for item in self.scan_prefix(space, prefix, false) {
                item?;
                n += 1;
            }
            return Ok(n);
        }
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(prefix.to_vec());
        if let Some(u) = prefix_successor(prefix) {
            ro.set_iterate_upper_bound(u);
        }
        // A one-off scan: its blocks would only push out blocks that are read again.
        ro.fill_cache(false);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(space), ro);
        it.seek(prefix);
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }

    /// How many keys start with `prefix`, and their key and value bytes (for statistics:
    /// the sizes collStats reports).
    pub fn prefix_size(&self, space: Space, prefix: &[u8]) -> Result<RangeSize> {
        let upper = prefix_successor(prefix);
        self.range_size(space, prefix, upper.as_deref())
    }

    /// How many keys lie in `[lower, upper)` (upper `None` = to the end of the space),
    /// and their key and value bytes. Nothing is copied out, and the blocks read are
    /// not added to the block cache (a one-off scan).
    pub fn range_size(
        &self,
        space: Space,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<RangeSize> {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(lower.to_vec());
        if let Some(u) = upper {
            ro.set_iterate_upper_bound(u.to_vec());
        }
        ro.fill_cache(false);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(space), ro);
        it.seek(lower);
        let mut size = RangeSize::default();
        while it.valid() {
            size.entries += 1;
            size.key_bytes += it.key().map_or(0, <[u8]>::len) as u64;
            size.value_bytes += it.value().map_or(0, <[u8]>::len) as u64;
            it.next();
        }
        it.status()?;
        Ok(size)
    }

    /// Compacts the keys starting with `prefix` (the `compact` command: one
    /// collection's documents or one index's entries), dropping their deleted versions
    /// from the files; runs in the caller's thread until done.
    pub fn compact_prefix(&self, space: Space, prefix: &[u8]) {
        let upper = prefix_successor(prefix);
        self.db
            .compact_range_cf(self.cf(space), Some(prefix), upper.as_deref());
    }

    /// The last key/value of a space whose key is below `upper` (or of the whole space).
    pub fn last(
        &self,
        space: Space,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Option<KeyValue>> {
        self.scan(space, lower, upper, true).next().transpose()
    }

    /// Approximate bytes on disk of one space (for stats).
    /// RocksDB's statistics of a space (levels, flushes, compactions), for diagnostics.
    pub fn stats_text(&self, space: Space) -> Option<String> {
        self.db
            .property_value_cf(self.cf(space), "rocksdb.cfstats")
            .ok()
            .flatten()
    }

    /// The storage engine's own figures for `serverStatus`, summed over the spaces,
    /// under mongod-style names (as MongoRocks' `rocksdb` section): data estimates,
    /// memtables, flushes and compactions, the block cache (shared: counted once).
    pub fn engine_figures(&self) -> Vec<(&'static str, u64)> {
        /// (name in serverStatus, RocksDB property, summed over spaces or shared).
        const FIGURES: [(&str, &str, bool); 10] = [
            (
                "estimateLiveDataSize",
                "rocksdb.estimate-live-data-size",
                true,
            ),
            ("totalSstFilesSize", "rocksdb.total-sst-files-size", true),
            ("memtablesSize", "rocksdb.size-all-mem-tables", true),
            ("estimateNumKeys", "rocksdb.estimate-num-keys", true),
            (
                "numImmutableMemtables",
                "rocksdb.num-immutable-mem-table",
                true,
            ),
            ("runningFlushes", "rocksdb.num-running-flushes", false),
            (
                "runningCompactions",
                "rocksdb.num-running-compactions",
                false,
            ),
            (
                "estimatePendingCompactionBytes",
                "rocksdb.estimate-pending-compaction-bytes",
                true,
            ),
            ("blockCacheUsage", "rocksdb.block-cache-usage", false),
            (
                "blockCachePinnedUsage",
                "rocksdb.block-cache-pinned-usage",
                false,
            ),
        ];
        let int = |space: Space, property: &str| {
            self.db
                .property_int_value_cf(self.cf(space), property)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        FIGURES
            .iter()
            .map(|(name, property, per_space)| {
                let value = if *per_space {
                    Space::ALL.iter().map(|s| int(*s, property)).sum()
                } else {
                    int(Space::ALL[0], property)
                };
                (*name, value)
            })
            .collect()
    }

    pub fn approximate_size(&self, space: Space) -> u64 {
        self.db
            .property_int_value_cf(self.cf(space), "rocksdb.total-sst-files-size")
            .ok()
            .flatten()
            .unwrap_or(0)
            + self
                .db
                .property_int_value_cf(self.cf(space), "rocksdb.size-all-mem-tables")
                .ok()
                .flatten()
                .unwrap_or(0)
    }
}

impl Batch<'_> {
    /// The RocksDB batch, made at the first write (a batch that stays empty costs
    /// nothing: a commit leaves one in its place).
    fn writes(&mut self) -> &mut WriteBatch {
        self.inner
            .get_or_insert_with(|| WriteBatch::with_capacity_bytes(BATCH_RESERVED_BYTES))
    }
    pub fn put(&mut self, space: Space, key: &[u8], value: &[u8]) {
        let cf = self.store.cf(space);
        self.writes().put_cf(cf, key, value);
        if let Some(ops) = &mut self.recorded {
            ops.put(space, key, value);
        }
    }
    pub fn delete(&mut self, space: Space, key: &[u8]) {
        let cf = self.store.cf(space);
        self.writes().delete_cf(cf, key);
        if let Some(ops) = &mut self.recorded {
            ops.delete(space, key);
        }
    }
    /// Deletes `[from, to)` with one range tombstone, whatever the number of keys.
    pub fn delete_range(&mut self, space: Space, from: &[u8], to: &[u8]) {
        let cf = self.store.cf(space);
        self.writes().delete_range_cf(cf, from, to);
        if let Some(ops) = &mut self.recorded {
            ops.delete_range(space, from, to);
        }
    }
    /// The writes as [`Ops`], for a batch made by [`Store::recording_batch`], taken out
    /// (the batch records nothing more): at its commit.
    pub fn take_recorded(&mut self) -> Option<Ops> {
        self.recorded.take()
    }
    pub fn is_empty(&self) -> bool {
        self.inner.as_ref().is_none_or(WriteBatch::is_empty)
    }
    /// Number of operations in the batch.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, WriteBatch::len)
    }
    /// Bytes the batch holds (its keys, values and their headers).
    pub fn size_in_bytes(&self) -> usize {
        self.inner.as_ref().map_or(0, WriteBatch::size_in_bytes)
    }
}

/// The bytes of write-ahead log a store at `path` holds (what opening it replays);
/// 0 when there is none or the directory cannot be read.
pub fn wal_bytes(path: &std::path::Path) -> u64 {
    wal_tail::wal_files(path)
        .unwrap_or_default()
        .iter()
        .filter_map(|(_, file)| std::fs::metadata(file).ok())
        .map(|m| m.len())
        .sum()
}

/// Turns RocksDB's performance counters off for the calling thread (call it first thing
/// on every thread that reads or writes the store). RocksDB counts by default: every
/// key comparison, memtable lookup and block read adds to a thread-local `PerfContext`
/// reached through a thread-local-storage wrapper call (`__tls_init`), and nothing here
/// reads those counters. On the bus benchmark that wrapper alone was 1.1% of the
/// server's instructions (callgrind, 2026-11-28; the figures in BENCHMARKS.md).
pub fn stop_perf_counters_on_this_thread() {
    rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::Disable);
}

/// The smallest key greater than every key with this prefix (None if the prefix is all 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column-family handles kept at open are the ones their names find, after the
    /// store has moved, for every space.
    #[test]
    fn each_space_keeps_its_own_column_family() {
        let dir = tempfile::tempdir().unwrap();
        let store = Box::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        for space in Space::ALL {
            let named = store.db.cf_handle(space.cf_name()).unwrap();
            assert!(std::ptr::eq(store.cf(space), named), "{space:?}");
        }
        let mut b = store.batch();
        b.put(Space::Natural, b"k", b"v");
        store.commit(b).unwrap();
        assert_eq!(
            store.get(Space::Natural, b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        assert_eq!(store.get(Space::Docs, b"k").unwrap(), None, "another space");
    }

    /// RocksDB counts key comparisons on a thread until it is told not to.
    #[test]
    fn a_thread_can_stop_rocksdbs_perf_counters() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = store.batch();
        for i in 0u32..100 {
            b.put(Space::Docs, &i.to_be_bytes(), b"v");
        }
        store.commit(b).unwrap();
        let comparisons_on_a_fresh_thread = |stop: bool| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    if stop {
                        stop_perf_counters_on_this_thread();
                    }
                    let mut counters = rocksdb::perf::PerfContext::default();
                    counters.reset();
                    for i in 0u32..100 {
                        assert!(store.get(Space::Docs, &i.to_be_bytes()).unwrap().is_some());
                    }
                    counters.metric(rocksdb::perf::PerfMetric::UserKeyComparisonCount)
                })
                .join()
                .unwrap()
            })
        };
        assert!(
            comparisons_on_a_fresh_thread(false) > 0,
            "RocksDB counts by default"
        );
        assert_eq!(comparisons_on_a_fresh_thread(true), 0);
    }

    fn level0_files(store: &Store, space: Space) -> u64 {
        store
            .db
            .property_int_value_cf(store.cf(space), "rocksdb.num-files-at-level0")
            .unwrap()
            .unwrap()
    }

    /// The WAL reader against RocksDB's own files: batches small and larger than a
    /// block (fragments) end the file cleanly; cut by a few bytes, the file ends in a
    /// record cut short, and the reopened store has every batch before it and not it.
    #[test]
    fn the_wal_end_reader_reads_rocksdbs_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = |i: u32| i.to_be_bytes();
        let sizes = [100usize, 50_000, 10, 70_000, 300];
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            for (i, size) in sizes.iter().enumerate() {
                let mut b = store.batch();
                b.put(Space::Docs, &key(i as u32), &vec![i as u8; *size]);
                store.commit(b).unwrap();
                store.sync().unwrap();
            }
            // Dropped without a flush: the batches exist only in the WAL.
        }
        let tail = wal_tail::newest_wal_tail(dir.path()).unwrap().unwrap();
        assert_eq!(tail.dropped_bytes, 0, "{tail:?}");
        assert!(tail.whole_records_end > 120_000, "{tail:?}");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&tail.file)
            .unwrap();
        file.set_len(tail.whole_records_end - 5).unwrap();
        drop(file);
        let cut = wal_tail::newest_wal_tail(dir.path()).unwrap().unwrap();
        assert_eq!(cut.file, tail.file);
        assert!(
            cut.dropped_bytes > 0 && cut.whole_records_end < tail.whole_records_end,
            "{cut:?}"
        );
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(store.wal_tail_at_open(), Some(&cut));
        let last = sizes.len() as u32 - 1;
        for i in 0..last {
            assert_eq!(
                store.get(Space::Docs, &key(i)).unwrap().map(|v| v.len()),
                Some(sizes[i as usize])
            );
        }
        assert_eq!(
            store.get(Space::Docs, &key(last)).unwrap(),
            None,
            "the cut batch"
        );
    }

    /// `get_sorted` returns each asked key's value in the asked order, `None` for the
    /// keys that are not there, whether the values sit in flushed files or in the
    /// memtable, with the block cache filled or not.
    #[test]
    fn sorted_gets_answer_every_key_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let key = |i: u64| i.to_be_bytes();
        let value = |i: u64| vec![(i % 251) as u8; 100 + (i % 7) as usize];
        let mut b = store.batch();
        for i in (0..2000u64).filter(|i| i % 3 != 0) {
            b.put(Space::Oplog, &key(i), &value(i));
        }
        store.commit(b).unwrap();
        store.db.flush_cf(store.cf(Space::Oplog)).unwrap();
        let mut b = store.batch();
        for i in (2000..2100u64).filter(|i| i % 3 != 0) {
            b.put(Space::Oplog, &key(i), &value(i));
        }
        store.commit(b).unwrap();
        let asked: Vec<[u8; 8]> = (0..2100u64).step_by(5).map(key).collect();
        for shared in [false, true] {
            let got = store.get_sorted(Space::Oplog, &asked, shared).unwrap();
            assert_eq!(got.len(), asked.len());
            for (k, v) in asked.iter().zip(&got) {
                let i = u64::from_be_bytes(*k);
                let want = (i % 3 != 0).then(|| value(i));
                assert_eq!(v.as_deref(), want.as_deref(), "key {i}, shared {shared}");
            }
        }
        let none: [[u8; 8]; 0] = [];
        assert!(store
            .get_sorted(Space::Oplog, &none, false)
            .unwrap()
            .is_empty());
    }

    /// The live WAL file after a checkpoint is a reused one, still holding the
    /// records of its previous life past the new ones; recovery must stop at them. Here
    /// they are puts of keys deleted since: replaying them would bring the keys back.
    #[test]
    fn spaces_keep_memtable_insert_positions_by_their_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            meta_insert_hint_prefix_bytes: Some(26),
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), &opts).unwrap();
        // Keys rewritten in place under two hinted prefixes in turn, and one key too
        // short for the prefix: each reads back its newest value.
        let key = |session: u8, seq: u8| [&[session; 26][..], &[0, 0, 0, seq]].concat();
        for round in 0..50u32 {
            let mut b = store.batch();
            for session in [1u8, 2] {
                b.put(Space::Meta, &key(session, 0), &round.to_be_bytes());
                b.put(
                    Space::Meta,
                    &key(session, (round % 3) as u8),
                    &round.to_be_bytes(),
                );
            }
            b.put(Space::Meta, b"short", &round.to_be_bytes());
            store.commit(b).unwrap();
        }
        for session in [1u8, 2] {
            assert_eq!(
                store.get(Space::Meta, &key(session, 0)).unwrap().unwrap(),
                49u32.to_be_bytes()
            );
            assert_eq!(
                store.get(Space::Meta, &key(session, 2)).unwrap().unwrap(),
                47u32.to_be_bytes()
            );
        }
        assert_eq!(
            store.get(Space::Meta, b"short").unwrap().unwrap(),
            49u32.to_be_bytes()
        );
        drop(store);
        // What RocksDB itself recorded for each space.
        let options_file = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("OPTIONS-")
            })
            .max()
            .expect("RocksDB writes an OPTIONS file");
        let text = std::fs::read_to_string(options_file).unwrap();
        let hint_of = |space: Space| {
            let section = format!("[CFOptions \"{}\"]", space.cf_name());
            let body = &text[text.find(&section).expect("a section per space")..];
            let body = &body[..body[1..].find("\n[").map_or(body.len(), |i| i + 1)];
            body.lines()
                .find_map(|l| {
                    l.trim()
                        .strip_prefix("memtable_insert_with_hint_prefix_extractor=")
                })
                .expect("the option is listed")
                .to_string()
        };
        assert_eq!(hint_of(Space::Meta), "rocksdb.FixedPrefix.26");
        for space in [Space::Docs, Space::Index, Space::Natural] {
            assert_eq!(hint_of(space), "rocksdb.FixedPrefix.4", "{space:?}");
        }
        for space in [Space::Oplog, Space::OplogByNs, Space::Catalog] {
            assert_eq!(hint_of(space), "nullptr", "{space:?}");
        }
    }

    #[test]
    fn recovery_from_a_reused_wal_file_ignores_its_stale_records() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            write_buffer_bytes: 64 << 10,
            ..StoreOptions::default()
        };
        let key = |i: u32| i.to_be_bytes();
        {
            let store = Store::open(dir.path(), &opts).unwrap();
            // Many small memtables: the WAL moves on to new files, and the old ones
            // are kept for reuse once their memtables are flushed.
            for i in 0..2000u32 {
                let mut b = store.batch();
                b.put(Space::Docs, &key(i), &[1u8; 1000]);
                store.commit(b).unwrap();
            }
            store.sync().unwrap();
            store.checkpoint().unwrap();
            let mut b = store.batch();
            for i in 0..2000u32 {
                b.delete(Space::Docs, &key(i));
            }
            store.commit(b).unwrap();
            store.sync().unwrap();
            let live_wal = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .max()
                .unwrap();
            let len = std::fs::metadata(&live_wal).unwrap().len();
            assert!(
                len > 40_000,
                "{} ({len} bytes) is a reused file, longer than the deletions it holds",
                live_wal.display()
            );
            // Dropped without a flush: the deletions exist only in the WAL.
        }
        let store = Store::open(dir.path(), &opts).unwrap();
        for i in 0..2000u32 {
            assert_eq!(store.get(Space::Docs, &key(i)).unwrap(), None, "key {i}");
        }
    }

    /// Five flushes of ascending keys into the oplog space: compaction moves the five
    /// files out of level 0 without merging them (no rewrite), and retiring the keys
    /// of the first two deletes exactly those two files, once no snapshot that was
    /// open before the retirement can still read them.
    #[test]
    fn retired_oplog_keys_go_by_whole_files_after_older_snapshots_close() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let key = |i: u64| i.to_be_bytes();
        for file in 0..5u64 {
            let mut b = store.batch();
            for i in file * 100..(file + 1) * 100 {
                b.put(Space::Oplog, &key(i), &[7u8; 1000]);
            }
            store.commit(b).unwrap();
            store.db.flush_cf(store.cf(Space::Oplog)).unwrap();
        }
        store
            .db
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())
            .unwrap();
        assert_eq!(
            level0_files(&store, Space::Oplog),
            0,
            "level-0 files moved down"
        );
        assert_eq!(
            store.file_count(Space::Oplog),
            5,
            "moved, not merged into one file"
        );

        let before = store.snapshot();
        store.retire_through(Space::Oplog, &key(199));
        let after = store.snapshot();
        assert_eq!(
            store.reclaim().unwrap(),
            0,
            "an older snapshot still reads them"
        );
        assert_eq!(store.file_count(Space::Oplog), 5);
        assert!(before.get(Space::Oplog, &key(0)).unwrap().is_some());
        drop(before);
        // Releasing the oldest snapshot lets RocksDB rewrite bottom-level files once (to
        // clear their sequence numbers); a file being rewritten is not deleted.
        store
            .db
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())
            .unwrap();
        assert_eq!(
            store.reclaim().unwrap(),
            1,
            "a newer snapshot does not hold them"
        );
        assert_eq!(store.file_count(Space::Oplog), 3);
        assert!(store.get(Space::Oplog, &key(199)).unwrap().is_none());
        assert!(store.get(Space::Oplog, &key(200)).unwrap().is_some());
        drop(after);

        // A bound inside a file keeps that file (it still holds live keys).
        store.retire_through(Space::Oplog, &key(250));
        store.reclaim().unwrap();
        assert_eq!(store.file_count(Space::Oplog), 3);
        assert!(store.get(Space::Oplog, &key(251)).unwrap().is_some());
        assert_eq!(store.reclaim().unwrap(), 0, "nothing left to apply");
    }

    #[test]
    fn count_prefix_counts_only_that_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = store.batch();
        for (p, n) in [(1u8, 3u8), (2, 5), (3, 1)] {
            for i in 0..n {
                b.put(Space::Docs, &[p, i], b"v");
            }
        }
        b.delete(Space::Docs, &[2, 0]);
        store.commit(b).unwrap();
        assert_eq!(store.count_prefix(Space::Docs, &[1]).unwrap(), 3);
        assert_eq!(store.count_prefix(Space::Docs, &[2]).unwrap(), 4);
        assert_eq!(store.count_prefix(Space::Docs, &[4]).unwrap(), 0);
        assert_eq!(store.count_prefix(Space::Index, &[1]).unwrap(), 0);
    }

    #[test]
    fn range_size_counts_the_keys_and_bytes_of_its_range_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = store.batch();
        b.put(Space::Index, &[1, 0], b"abc");
        b.put(Space::Index, &[1, 1, 7], b"");
        b.put(Space::Index, &[1, 2], b"de");
        b.put(Space::Index, &[2, 0], b"not counted");
        b.delete(Space::Index, &[1, 2]);
        store.commit(b).unwrap();
        let size = store.prefix_size(Space::Index, &[1]).unwrap();
        assert_eq!(
            size,
            RangeSize {
                entries: 2,
                key_bytes: 5,
                value_bytes: 3
            }
        );
        let from = store.range_size(Space::Index, &[1, 1], None).unwrap();
        assert_eq!((from.entries, from.key_bytes, from.value_bytes), (2, 5, 11));
        assert_eq!(
            store.prefix_size(Space::Docs, &[1]).unwrap(),
            RangeSize::default()
        );
    }

    #[test]
    fn successor_keys() {
        assert!(is_successor(&[0, 1], &[0, 2]));
        assert!(is_successor(&[0, 0xFF], &[1, 0]));
        assert!(!is_successor(&[0, 1], &[0, 3]));
        assert!(!is_successor(&[0xFF], &[0]));
        assert!(!is_successor(&[1], &[0, 2]));
        // Every pair of 2-byte keys around the carries, against integer arithmetic.
        let near = |v: u16| [v.wrapping_sub(1), v, v.wrapping_add(1)];
        for a in (0..=u16::MAX)
            .step_by(251)
            .chain([0x00FF, 0x01FF, 0xFEFF, 0xFFFE, 0xFFFF])
        {
            for b in near(a.wrapping_add(1)).into_iter().chain(near(a)) {
                assert_eq!(
                    is_successor(&a.to_be_bytes(), &b.to_be_bytes()),
                    a.checked_add(1) == Some(b),
                    "{a:#x} {b:#x}"
                );
            }
        }
    }

    #[test]
    fn batch_commit_scan_and_range_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = store.batch();
        for i in 0u8..10 {
            b.put(Space::Docs, &[1, i], &[i]);
        }
        b.put(Space::Docs, &[2, 0], &[99]);
        store.commit(b).unwrap();
        store.sync().unwrap();
        let keys: Vec<_> = store
            .scan_prefix(Space::Docs, &[1], false)
            .map(|r| r.unwrap().0.to_vec())
            .collect();
        assert_eq!(keys.len(), 10);
        assert_eq!(keys[0], vec![1, 0]);
        let rev: Vec<_> = store
            .scan_prefix(Space::Docs, &[1], true)
            .map(|r| r.unwrap().0.to_vec())
            .collect();
        assert_eq!(rev[0], vec![1, 9]);
        let mut b = store.batch();
        b.delete_range(Space::Docs, &[1, 0], &[1, 5]);
        store.commit(b).unwrap();
        let keys: Vec<_> = store
            .scan_prefix(Space::Docs, &[1], false)
            .map(|r| r.unwrap().0.to_vec())
            .collect();
        assert_eq!(
            keys,
            vec![vec![1, 5], vec![1, 6], vec![1, 7], vec![1, 8], vec![1, 9]]
        );
        assert_eq!(store.get(Space::Docs, &[2, 0]).unwrap(), Some(vec![99]));
        assert_eq!(
            store
                .last(Space::Docs, &[], None)
                .unwrap()
                .unwrap()
                .0
                .to_vec(),
            vec![2, 0]
        );
    }

    #[test]
    fn reopen_keeps_committed_data() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let mut b = store.batch();
            b.put(Space::Meta, b"k", b"v");
            store.commit(b).unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(store.get(Space::Meta, b"k").unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn prefix_successor_carries() {
        assert_eq!(prefix_successor(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF]), None);
    }
}

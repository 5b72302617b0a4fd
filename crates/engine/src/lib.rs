//! The engine: catalog, documents, indexes, oplog, cursors and the write path.
//!
//! Every write runs inside a [`Txn`] under one writer lock (the sequencer): it
//! takes cluster times from the clock, puts the documents, their index entries
//! and their oplog entries into one storage batch, and commits the batch. So
//! commit order equals oplog order, and a reader tailing the oplog never sees a
//! gap. Durability is separate (see [`durability`]): the commit returns a sequence
//! number that `j: true` writers wait on, and one thread's fsync covers them all.

pub mod catalog;
pub mod changestream;
pub mod core;
pub mod oplog;
pub mod read;
pub mod repl;
pub mod write;

// The modules' former paths, for the crates above (the server).
pub use crate::catalog::{namespace, timeseries, views};
pub use crate::core::{clock, durability, format, fsync_lock, keys};
pub use crate::read::{cursor, find, min_max};
pub use crate::write::{capped, ddl, transaction, ttl, validate};

pub use crate::core::bus::{namespace_bit, ChangeStreamWaiting, CommitNotice};
pub use crate::core::time::ClusterTime;
pub use crate::core::{MAX_DOCUMENT_SIZE, MAX_NESTING_DEPTH, MAX_WRITE_BATCH};
pub use crate::oplog::txn::Committed;

use crate::catalog::namespace::Namespace;
use crate::catalog::{Catalog, CollMeta};
use crate::core::bus::CommitBus;
use crate::core::clock::ClusterClock;
use crate::core::durability::Durability;
use crate::core::storage_err;
use crate::core::time::AtomicClusterTime;
use crate::oplog::txn::Writer;
use bson::Document;
use parking_lot::{Mutex, RwLock};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_storage::{Space, Store, StoreOptions};
use tokio::sync::watch;

pub use tailstream_query as query;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub dbpath: PathBuf,
    /// The oplog is trimmed from its oldest end once it holds more than this.
    pub oplog_size_bytes: u64,
}

pub struct Engine {
    pub store: Arc<Store>,
    /// `fsync` with `lock: true`: the gate write commands pass (see `fsync_lock`).
    pub fsync_lock: Arc<fsync_lock::FsyncLock>,
    /// Made when the data directory is created and kept with it, as mongod's
    /// `replicaSetId` is made by `replSetInitiate` and kept in `local.system.replset`.
    pub replica_set_id: bson::oid::ObjectId,
    catalog: RwLock<Arc<Catalog>>,
    writer: core::writer_lock::WriterLock<Writer>,
    pub durability: Arc<Durability>,
    pub cursors: cursor::CursorRegistry,
    /// The leases of change stream consumer groups (`changestream::consumer_group`).
    pub(crate) consumer_groups: changestream::consumer_group::Registry,
    /// Totals of capped collections, by collection id (see `capped`).
    capped: Mutex<ahash::AHashMap<u32, capped::CappedState>>,
    /// By capped collection id: no document inserted after this time has been updated
    /// or deleted by a user since, so its stored version is its insert's oplog entry
    /// (a raw tailable read takes it from the recent oplog without reading the
    /// collection). Set to the newest commit when the collection's totals load (what
    /// happened before is not known) and by every update and delete (the document they
    /// change was committed by then); absent: nothing known.
    capped_modified: Mutex<ahash::AHashMap<u32, ClusterTime>>,
    /// How far eviction reached in each capped collection (`core::evicted`).
    evicted: core::evicted::EvictionMarks,
    opts: EngineOptions,
    /// Where commits tell waiting readers (tailable cursors, change streams).
    pub(crate) bus: CommitBus,
    /// The newest oplog entries in memory, for change streams that keep up.
    recent: Arc<oplog::recent::RecentOplog>,
    /// Oldest retained oplog time, readable without the writer lock (change streams
    /// check it on every read; oplog scans never return entries below it).
    trim_ts: Arc<AtomicClusterTime>,
    /// Documents held by open transactions (see [`transaction`]).
    transaction_locks: transaction::LockTable,
    next_transaction_id: std::sync::atomic::AtomicU64,
    _lock_file: std::fs::File,
    syncer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Wakes the oplog maintenance thread (see [`spawn_oplog_maintenance`]): a commit
    /// that takes the oplog over its cap sends a token (never blocks: one pending
    /// token is enough). Dropped at shutdown to stop the thread.
    oplog_wake: Mutex<Option<std::sync::mpsc::SyncSender<()>>>,
    oplog_maintenance: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Receives every commit's writes (see [`core::CommitSink`]); set by replication.
    commit_sink: RwLock<Option<core::CommitSink>>,
    /// A replica set's write path (see [`oplog::pipeline::Proposer`]); none on a single node.
    proposer: RwLock<Option<Arc<dyn oplog::pipeline::Proposer>>>,
    /// How far a replica set's pipelined commits got (see `oplog::pipeline`).
    pipeline: oplog::pipeline::Progress,
    /// A snapshot is being installed (see `repl::snapshot`).
    installing: std::sync::atomic::AtomicBool,
}

impl Engine {
    /// Opens the data directory (creating it), refusing if another process holds it.
    pub fn open(opts: EngineOptions) -> Result<Arc<Engine>> {
        // Server-side JavaScript ($where, $function, $accumulator) runs on QuickJS.
        tailstream_query::script::install(Box::new(tailstream_js::QuickJs::new()));
        std::fs::create_dir_all(&opts.dbpath).map_err(|e| {
            Error::internal(format!(
                "cannot create data directory {}: {e}",
                opts.dbpath.display()
            ))
        })?;
        let lock_file = lock_dbpath(&opts.dbpath)?;
        let store_path = opts.dbpath.join("store");
        // RocksDB replays its write-ahead log inside `open`, with no progress to report:
        // say beforehand how much there is, so a long start is explained.
        let wal_bytes = tailstream_storage::wal_bytes(&store_path);
        if wal_bytes > 0 {
            tracing::info!(
                wal_bytes,
                "replaying the write-ahead log (writes not yet flushed to table files)"
            );
        }
        let opening = std::time::Instant::now();
        let store = Arc::new(
            Store::open(&store_path, &store_options())
                .map_err(|e| Error::internal(e.to_string()))?,
        );
        let open_millis = i64::try_from(opening.elapsed().as_millis()).unwrap_or(i64::MAX);
        // Before anything is read: a replica-set member's install a crash cut short.
        repl::snapshot::finish_interrupted_install(&store, &opts.dbpath)?;
        let catalog = load_catalog(&store)?;
        let last_ts = Writer::load_newest_time(&store)?;
        let (trim_ts, oplog_bytes) = Writer::load_oplog_state(&store)?;
        let replica_set_id = load_or_make_replica_set_id(&store)?;
        let durability = Durability::new(last_ts);
        let syncer = durability.spawn_syncer(Arc::clone(&store));
        if trim_ts > ClusterTime::ZERO {
            // Entries trimmed before a restart may still be on disk.
            store.retire_through(Space::Oplog, &keys::oplog_key(trim_ts.prev()));
        }
        let (oplog_wake, oplog_woken) = std::sync::mpsc::sync_channel::<()>(1);
        let first_notice = CommitNotice {
            seq: 0,
            last_ts,
            ns_mask: 0,
        };
        tracing::info!(
            dbpath = %opts.dbpath.display(),
            collections = catalog.colls.len(),
            oplog_bytes,
            wal_bytes,
            duration_millis = open_millis,
            "storage opened"
        );
        let engine = Arc::new(Engine {
            store,
            fsync_lock: Default::default(),
            replica_set_id,
            catalog: RwLock::new(Arc::new(catalog)),
            writer: core::writer_lock::WriterLock::new(Writer {
                clock: ClusterClock::after(last_ts),
                oplog_bytes,
                trim_ts,
                committed_ts: last_ts,
                pending_id: 0,
                state_bytes: oplog_bytes,
            }),
            durability,
            cursors: cursor::CursorRegistry::new(),
            consumer_groups: Default::default(),
            capped: Default::default(),
            capped_modified: Default::default(),
            evicted: Default::default(),
            opts,
            bus: CommitBus::new(first_notice),
            recent: Default::default(),
            trim_ts: Arc::new(AtomicClusterTime::new(trim_ts)),
            transaction_locks: Default::default(),
            next_transaction_id: std::sync::atomic::AtomicU64::new(1),
            _lock_file: lock_file,
            syncer: Mutex::new(Some(syncer)),
            oplog_wake: Mutex::new(Some(oplog_wake)),
            oplog_maintenance: Mutex::new(None),
            commit_sink: RwLock::new(None),
            proposer: RwLock::new(None),
            pipeline: Default::default(),
            installing: Default::default(),
        });
        *engine.oplog_maintenance.lock() = Some(oplog::trim::spawn_oplog_maintenance(
            Arc::downgrade(&engine),
            oplog_woken,
        ));
        Ok(engine)
    }

    /// Flushes everything to disk and stops the background sync thread.
    pub fn shutdown(&self) {
        self.oplog_wake.lock().take();
        if let Some(h) = self.oplog_maintenance.lock().take() {
            let _ = h.join();
        }
        self.durability.stop();
        if let Some(h) = self.syncer.lock().take() {
            let _ = h.join();
        }
    }

    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().clone()
    }

    pub fn collection(&self, ns: &Namespace) -> Option<Arc<CollMeta>> {
        self.catalog.read().get(ns)
    }

    /// Subscribe to commit notices (tailable cursors and change streams wait on this).
    pub fn subscribe_commits(&self) -> watch::Receiver<CommitNotice> {
        self.bus.subscribe()
    }

    /// Commit notices of the commits that wrote a namespace of `mask` (see
    /// [`CommitBus::subscribe_for`]).
    pub fn subscribe_commits_for(&self, mask: u64) -> watch::Receiver<CommitNotice> {
        self.bus.subscribe_for(mask)
    }

    /// Registers a change-stream getMore waiting for commits to `interest` until the
    /// guard drops (see [`CommitBus::waiting`]): a commit to a namespace someone waits
    /// on asks for its fsync itself, before it returns, so the event is shown one
    /// thread hop sooner than if the woken getMore asked.
    pub fn change_stream_waiting(&self, interest: u64) -> ChangeStreamWaiting<'_> {
        self.bus.waiting(interest)
    }

    /// The newest cluster time handed out (the server's `operationTime` when idle).
    pub fn cluster_time(&self) -> bson::Timestamp {
        self.last_commit_time().into()
    }

    /// The newest oplog time committed.
    pub(crate) fn last_commit_time(&self) -> ClusterTime {
        self.bus.last().last_ts
    }

    /// Oldest retained oplog time (everything before it was trimmed).
    pub fn oplog_trim_ts(&self) -> ClusterTime {
        self.trim_ts.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The oldest retained oplog time as a shared value that follows the trims (for
    /// oplog scans that outlive a trim).
    pub(crate) fn oplog_floor(&self) -> Arc<AtomicClusterTime> {
        Arc::clone(&self.trim_ts)
    }

    /// Oldest and newest retained oplog times.
    pub fn oplog_window(&self) -> (ClusterTime, ClusterTime) {
        let w = self.writer.lock();
        (w.trim_ts, w.clock.last())
    }

    /// The time of the oldest entry still in the oplog (`ClusterTime::ZERO` when it
    /// is empty): one seek, from above the last trim, so trimmed ranges are not read.
    /// The storage engine's own figures (`Store::engine_figures`) and the bytes of
    /// its write-ahead log (`walBytes`), for serverStatus.
    pub fn storage_figures(&self) -> Vec<(&'static str, u64)> {
        let mut figures = self.store.engine_figures();
        figures.push((
            "walBytes",
            tailstream_storage::wal_bytes(&self.opts.dbpath.join("store")),
        ));
        figures
    }

    /// The durable oplog entries at or after `from` (a reader's position): those of
    /// namespace `ns` (through the oplog's index by namespace), or all of them; counted
    /// up to `cap` (a reader far behind costs a bounded scan: the count is then "at
    /// least `cap`").
    pub fn oplog_entries_from(&self, ns: Option<&str>, from: ClusterTime, cap: u64) -> u64 {
        let head = self.durability.durable_ts();
        if from > head {
            return 0;
        }
        let (space, lo, hi) = match ns {
            Some(ns) => (
                Space::OplogByNs,
                keys::oplog_ns_key(ns, from),
                keys::oplog_ns_key(ns, head.next()),
            ),
            None => (
                Space::Oplog,
                keys::oplog_key(from).to_vec(),
                keys::oplog_key(head.next()).to_vec(),
            ),
        };
        self.store
            .scan(space, &lo, Some(&hi), false)
            .take(usize::try_from(cap).unwrap_or(usize::MAX))
            .filter(|item| item.is_ok())
            .count() as u64
    }

    pub fn oplog_first_time(&self) -> ClusterTime {
        let trim = self.trim_ts.load(std::sync::atomic::Ordering::SeqCst);
        let lower = keys::oplog_key(trim.next());
        match self.store.scan(Space::Oplog, &lower, None, false).next() {
            Some(Ok((k, _))) => keys::oplog_key_time(&k),
            _ => ClusterTime::ZERO,
        }
    }

    /// `fsync` with `lock: true` (blocking): writes stop; the first lock also puts
    /// every commit on disk and the data files at rest. The new lock count.
    pub fn lock_for_fsync(&self) -> Result<u32> {
        self.fsync_lock.lock(|| {
            self.checkpoint()?;
            self.store.pause_files().map_err(storage_err)
        })
    }

    /// `fsync` without `lock` (blocking): every commit on disk, and in the data files.
    pub fn checkpoint(&self) -> Result<()> {
        let seq = self.durability.last_committed();
        self.durability
            .wait_synced_blocking(seq)
            .map_err(|e| Error::new(codes::OUT_OF_DISK_SPACE, e))?;
        self.store.checkpoint().map_err(storage_err)
    }

    /// `fsyncUnlock`: the new lock count (writes resume at zero), or None when unlocked.
    pub fn unlock_fsync(&self) -> Option<u32> {
        self.fsync_lock.unlock(|| {
            if let Err(e) = self.store.resume_files() {
                tracing::error!("fsyncUnlock: {e}");
            }
        })
    }

    /// Whether a write that did not declare itself short ([`core::writer_lock`]) holds
    /// the writer lock right now (a hint: it may be released or taken the moment after).
    pub fn writer_held_long(&self) -> bool {
        self.writer.held_long()
    }

    /// Sends every later commit's writes to `sink` (None: stop), in commit order.
    pub fn set_commit_sink(&self, sink: Option<core::CommitSink>) {
        *self.commit_sink.write() = sink;
    }

    /// Makes every later commit go through the replica set (None: a single node).
    pub fn set_proposer(&self, proposer: Option<Arc<dyn oplog::pipeline::Proposer>>) {
        *self.proposer.write() = proposer;
    }

    /// The replica set's write path, when this member is in one.
    pub(crate) fn proposer(&self) -> Option<Arc<dyn oplog::pipeline::Proposer>> {
        self.proposer.read().clone()
    }

    /// The batch a commit writes into: recording its writes when a sink or the replica
    /// set wants them.
    pub(crate) fn write_batch(&self) -> tailstream_storage::Batch<'_> {
        if self.commit_sink.read().is_some() || self.proposer.read().is_some() {
            self.store.recording_batch()
        } else {
            self.store.batch()
        }
    }

    /// Hands a committed batch's recorded writes to the sink (under the writer lock).
    pub(crate) fn ship(&self, recorded: Option<tailstream_storage::Ops>) {
        // Nothing recorded (no sink, the usual case): the lock is not taken.
        let Some(ops) = recorded else { return };
        if let Some(sink) = self.commit_sink.read().as_ref() {
            sink(&ops);
        }
    }

    /// Reads the catalog again from the store (a replicated commit changed it).
    pub(crate) fn reload_catalog(&self) -> Result<()> {
        let catalog = load_catalog(&self.store)?;
        *self.catalog.write() = Arc::new(catalog);
        Ok(())
    }
}

/// The replica set id stored in the data directory, made (and synced) on first open.
fn load_or_make_replica_set_id(store: &Store) -> Result<bson::oid::ObjectId> {
    if let Some(v) = store
        .get(Space::Meta, keys::META_REPLICA_SET_ID)
        .map_err(storage_err)?
    {
        let bytes: [u8; 12] = v
            .as_slice()
            .try_into()
            .map_err(|_| Error::internal("corrupt replica set id in the data directory"))?;
        return Ok(bson::oid::ObjectId::from_bytes(bytes));
    }
    let id = bson::oid::ObjectId::new();
    let mut batch = store.batch();
    batch.put(Space::Meta, keys::META_REPLICA_SET_ID, &id.bytes());
    store.commit(batch).map_err(storage_err)?;
    store.sync().map_err(storage_err)?;
    Ok(id)
}

/// The catalog stored in the `Catalog` and `Meta` spaces, with the views of every
/// `system.views`.
fn load_catalog(store: &Store) -> Result<Catalog> {
    let mut catalog = Catalog::default();
    for item in store.scan_prefix(Space::Catalog, b"coll:", false) {
        let (_, v) = item.map_err(storage_err)?;
        let d = Document::from_reader(&mut &v[..])
            .map_err(|e| Error::internal(format!("corrupt catalog: {e}")))?;
        let meta = CollMeta::from_document(&d)?;
        catalog.colls.insert(meta.ns.full(), Arc::new(meta));
    }
    if let Some(v) = store
        .get(Space::Meta, keys::META_COUNTERS)
        .map_err(storage_err)?
    {
        let d =
            Document::from_reader(&mut v.as_slice()).map_err(|e| Error::internal(e.to_string()))?;
        catalog.next_coll_id = d.get_i64("nextCollId").unwrap_or(0) as u32;
        catalog.next_index_id = d.get_i64("nextIndexId").unwrap_or(0) as u32;
    }
    // Never hand out an id still in use, whatever the counters say.
    for c in catalog.colls.values() {
        catalog.next_coll_id = catalog.next_coll_id.max(c.id + 1);
        for i in &c.indexes {
            catalog.next_index_id = catalog.next_index_id.max(i.id + 1);
        }
    }
    catalog.next_coll_id = catalog.next_coll_id.max(1);
    catalog.next_index_id = catalog.next_index_id.max(1);
    load_views(store, &mut catalog)?;
    Ok(catalog)
}

/// Reads the view definitions of every `system.views` collection (at startup).
/// A definition that does not parse is skipped with a warning, as a bad document
/// written by hand would be.
fn load_views(store: &tailstream_storage::Store, catalog: &mut Catalog) -> Result<()> {
    let systems: Vec<Arc<CollMeta>> = catalog
        .colls
        .values()
        .filter(|c| c.ns.coll == catalog::views::SYSTEM_VIEWS)
        .cloned()
        .collect();
    let all = tailstream_query::matcher::Matcher::new(&Document::new())?;
    for sys in systems {
        let mut scan = crate::read::Scan::new(crate::read::Access::CollScan { reverse: false });
        for (_, d) in scan.collect_all(store, sys.id, &all)? {
            match catalog::ViewMeta::from_definition(&sys.ns.db, &d) {
                Ok(v) => {
                    catalog.views.insert(v.ns.full(), Arc::new(v));
                }
                Err(e) => tracing::warn!("{}", e.message),
            }
        }
    }
    Ok(())
}

/// Takes an exclusive lock on `<dbpath>/mongod.lock` so a second server on the same
/// directory refuses to start instead of corrupting the store.
/// The store's tuning: its defaults, and the engine's retry records kept apart per
/// driver session in the memtable (see `keys::RETRY_RECORD_HINT_PREFIX_BYTES`).
fn store_options() -> StoreOptions {
    StoreOptions {
        meta_insert_hint_prefix_bytes: Some(crate::core::keys::RETRY_RECORD_HINT_PREFIX_BYTES),
        ..StoreOptions::default()
    }
}

fn lock_dbpath(dbpath: &Path) -> Result<std::fs::File> {
    use fs2::FileExt;
    use std::io::Write;
    let path = dbpath.join("mongod.lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::internal(format!("cannot open lock file {}: {e}", path.display())))?;
    f.try_lock_exclusive().map_err(|_| {
        Error::new(
            codes::ILLEGAL_OPERATION,
            format!(
                "Unable to lock the lock file: {} (Resource temporarily unavailable). \
                 Another tailstream instance is probably already running on the dbpath {}",
                path.display(),
                dbpath.display()
            ),
        )
    })?;
    let _ = f.set_len(0);
    let _ = writeln!(f, "{}", std::process::id());
    Ok(f)
}

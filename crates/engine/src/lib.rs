//! The engine: catalog, documents, indexes, oplog, cursors and the write path.
//!
//! Every write runs inside a [`Txn`] under one writer lock (the sequencer): it
//! takes cluster times from the clock, puts the documents, their index entries
//! and their oplog entries into one storage batch, and commits the batch. So
//! commit order equals oplog order, and a reader tailing the oplog never sees a
//! gap. Durability is separate (see [`durability`]): the commit returns a sequence
//! number that `j: true` writers wait on, and one thread's fsync covers them all.

pub mod capped;
pub mod catalog;
pub mod changestream;
pub mod clock;
mod clustered;
pub mod cursor;
pub mod ddl;
pub mod durability;
pub mod find;
pub mod format;
pub mod fsync_lock;
mod geo_near;
pub mod keys;
mod merge;
pub mod min_max;
pub mod namespace;
pub mod oplog;
mod partial;
mod plugin_plan;
pub mod read;
pub mod timeseries;
pub mod transaction;
pub mod ttl;
pub mod validate;
mod validation;
pub mod views;
pub mod write;

use bson::{doc, Document};
use catalog::{Catalog, CollMeta};
use clock::ClusterClock;
use durability::Durability;
use namespace::Namespace;
use oplog::OplogChange;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_storage::{Batch, Space, Store, StoreOptions};
use tokio::sync::watch;

pub use tailstream_query as query;

/// Largest document mongod accepts (BSONObjMaxUserSize).
pub const MAX_DOCUMENT_SIZE: usize = 16 * 1024 * 1024;
/// Deepest nesting of documents/arrays accepted in a stored document.
pub const MAX_NESTING_DEPTH: usize = 100;
/// Most write operations in one insert/update/delete command (maxWriteBatchSize).
pub const MAX_WRITE_BATCH: usize = 100_000;

#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub dbpath: PathBuf,
    /// The oplog is trimmed from its oldest end once it holds more than this.
    pub oplog_size_bytes: u64,
}

/// What a committed transaction reports back.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// Durability sequence number: wait for `Durability::wait_synced(seq)` before a `j: true` ack.
    pub seq: u64,
    /// Cluster time of the last oplog entry written (the operation time).
    pub last_ts: Option<bson::Timestamp>,
}

/// What waiting readers (tailable cursors, change streams) are told after each commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitNotice {
    pub seq: u64,
    /// The newest oplog time committed (as the sortable u64 of [`keys::ts_to_u64`]).
    pub last_ts: u64,
    /// One bit per namespace the commit wrote ([`namespace_bit`]), so a change stream on
    /// another collection lets the commit pass without waking up.
    pub ns_mask: u64,
}

/// A waiting change-stream getMore, counted while it lives (see
/// [`Engine::change_stream_waiting`]).
pub struct ChangeStreamWaiting<'a> {
    counter: &'a std::sync::atomic::AtomicU32,
}

impl Drop for ChangeStreamWaiting<'_> {
    fn drop(&mut self) {
        self.counter
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The [`CommitNotice::ns_mask`] bit of a namespace (FNV-1a, 64 buckets).
pub fn namespace_bit(ns: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ns.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    1u64 << (h % 64)
}

pub(crate) struct Writer {
    clock: ClusterClock,
    /// Bytes of oplog entries currently retained.
    oplog_bytes: u64,
    /// Oldest retained oplog time (everything below it was trimmed).
    trim_ts: u64,
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

impl Writer {
    /// Stores the trim point and retained size (read back at open) in `batch`.
    fn put_oplog_state(&self, batch: &mut Batch<'_>) {
        let state = doc! {"trim": self.trim_ts as i64, "bytes": self.oplog_bytes as i64};
        let mut bytes = Vec::new();
        state.to_writer(&mut bytes).expect("serialise oplog state");
        batch.put(Space::Meta, keys::META_OPLOG_TRIM, &bytes);
    }
}

pub struct Engine {
    pub store: Arc<Store>,
    /// `fsync` with `lock: true`: the gate write commands pass (see `fsync_lock`).
    pub fsync_lock: Arc<fsync_lock::FsyncLock>,
    /// Made when the data directory is created and kept with it, as mongod's
    /// `replicaSetId` is made by `replSetInitiate` and kept in `local.system.replset`.
    pub replica_set_id: bson::oid::ObjectId,
    catalog: RwLock<Arc<Catalog>>,
    writer: Mutex<Writer>,
    pub durability: Arc<Durability>,
    pub cursors: cursor::CursorRegistry,
    /// Totals of capped collections, by collection id (see `capped`).
    capped: Mutex<std::collections::HashMap<u32, capped::CappedState>>,
    opts: EngineOptions,
    commits: watch::Sender<CommitNotice>,
    /// The same notices, one channel per namespace bit ([`namespace_bit`]): a change
    /// stream on one collection waits on its bit's channel, so commits to other
    /// collections do not wake it at all (with a thousand streams on other collections,
    /// one commit would otherwise wake a thousand tasks that all go back to sleep).
    commits_by_bit: Vec<watch::Sender<CommitNotice>>,
    /// Change-stream getMores waiting for events, by namespace bit (index 64: streams
    /// on a database or the deployment). See [`Engine::change_stream_waiting`].
    stream_waiters: [std::sync::atomic::AtomicU32; 65],
    /// The newest oplog entries in memory, for change streams that keep up.
    recent: Arc<changestream::recent::RecentOplog>,
    /// Oldest retained oplog time, readable without the writer lock (change streams
    /// check it on every read; oplog scans never return entries below it).
    trim_ts: Arc<std::sync::atomic::AtomicU64>,
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
        let store = Arc::new(
            Store::open(&opts.dbpath.join("store"), &StoreOptions::default())
                .map_err(|e| Error::internal(e.to_string()))?,
        );
        let catalog = load_catalog(&store)?;
        let last = store.last(Space::Oplog, &[], None).map_err(storage_err)?;
        let last_ts = last
            .as_ref()
            .map(|(k, _)| keys::u64_to_ts(u64::from_be_bytes(k[..8].try_into().unwrap())));
        let (trim_ts, oplog_bytes) = match store
            .get(Space::Meta, keys::META_OPLOG_TRIM)
            .map_err(storage_err)?
        {
            Some(v) => {
                let d = Document::from_reader(&mut v.as_slice())
                    .map_err(|e| Error::internal(e.to_string()))?;
                (
                    d.get_i64("trim").unwrap_or(0) as u64,
                    d.get_i64("bytes").unwrap_or(0) as u64,
                )
            }
            None => (0, 0),
        };
        let replica_set_id = load_or_make_replica_set_id(&store)?;
        let durability = Durability::new(last_ts.map(keys::ts_to_u64).unwrap_or(0));
        let syncer = durability.spawn_syncer(Arc::clone(&store));
        if trim_ts > 0 {
            // Entries trimmed before a restart may still be on disk.
            store.retire_through(Space::Oplog, &keys::oplog_key(trim_ts - 1));
        }
        let (oplog_wake, oplog_woken) = std::sync::mpsc::sync_channel::<()>(1);
        let first_notice = CommitNotice {
            seq: 0,
            last_ts: last_ts.map(keys::ts_to_u64).unwrap_or(0),
            ns_mask: 0,
        };
        let (commits, _) = watch::channel(first_notice);
        let commits_by_bit = (0..64).map(|_| watch::channel(first_notice).0).collect();
        tracing::info!(
            dbpath = %opts.dbpath.display(),
            collections = catalog.colls.len(),
            oplog_bytes,
            "storage opened"
        );
        let engine = Arc::new(Engine {
            store,
            fsync_lock: Default::default(),
            replica_set_id,
            catalog: RwLock::new(Arc::new(catalog)),
            writer: Mutex::new(Writer {
                clock: ClusterClock::after(last_ts),
                oplog_bytes,
                trim_ts,
            }),
            durability,
            cursors: cursor::CursorRegistry::new(),
            capped: Mutex::new(std::collections::HashMap::new()),
            opts,
            commits,
            commits_by_bit,
            stream_waiters: std::array::from_fn(|_| Default::default()),
            recent: Default::default(),
            trim_ts: Arc::new(std::sync::atomic::AtomicU64::new(trim_ts)),
            transaction_locks: Default::default(),
            next_transaction_id: std::sync::atomic::AtomicU64::new(1),
            _lock_file: lock_file,
            syncer: Mutex::new(Some(syncer)),
            oplog_wake: Mutex::new(Some(oplog_wake)),
            oplog_maintenance: Mutex::new(None),
        });
        *engine.oplog_maintenance.lock() = Some(spawn_oplog_maintenance(
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
        self.commits.subscribe()
    }

    /// Commit notices of the commits that wrote a namespace of `mask` (a single
    /// [`namespace_bit`]), or of every commit for any other mask. Each notice is the
    /// commit's own, with its full `ns_mask`.
    pub fn subscribe_commits_for(&self, mask: u64) -> watch::Receiver<CommitNotice> {
        if mask.count_ones() == 1 {
            self.commits_by_bit[mask.trailing_zeros() as usize].subscribe()
        } else {
            self.commits.subscribe()
        }
    }

    /// Registers a change-stream getMore waiting for commits to `interest` (a mask of
    /// namespace bits) until the guard drops. A commit to a namespace someone waits on
    /// asks for its fsync itself, before it returns: the event is then shown one
    /// thread hop sooner than if the woken getMore asked. A commit that checked just
    /// before the registration counted itself first (both SeqCst), so the getMore,
    /// asking once for `last_committed()` after registering, covers it.
    pub fn change_stream_waiting(&self, interest: u64) -> ChangeStreamWaiting<'_> {
        let slot = if interest.count_ones() == 1 {
            interest.trailing_zeros() as usize
        } else {
            64
        };
        self.stream_waiters[slot].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ChangeStreamWaiting {
            counter: &self.stream_waiters[slot],
        }
    }

    /// Whether a change stream waits on any namespace of `ns_mask`.
    fn change_streams_wait_on(&self, ns_mask: u64) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if self.stream_waiters[64].load(SeqCst) > 0 {
            return true;
        }
        let mut bits = ns_mask;
        while bits != 0 {
            if self.stream_waiters[bits.trailing_zeros() as usize].load(SeqCst) > 0 {
                return true;
            }
            bits &= bits - 1;
        }
        false
    }

    /// The newest cluster time handed out (the server's `operationTime` when idle).
    pub fn cluster_time(&self) -> bson::Timestamp {
        keys::u64_to_ts(self.commits.borrow().last_ts)
    }

    /// Oldest retained oplog time (everything before it was trimmed).
    pub fn oplog_trim_ts(&self) -> u64 {
        self.trim_ts.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The oldest retained oplog time as a shared value that follows the trims (for
    /// oplog scans that outlive a trim).
    pub(crate) fn oplog_floor(&self) -> Arc<std::sync::atomic::AtomicU64> {
        Arc::clone(&self.trim_ts)
    }

    /// Oldest and newest retained oplog times.
    pub fn oplog_window(&self) -> (u64, u64) {
        let w = self.writer.lock();
        (w.trim_ts, keys::ts_to_u64(w.clock.last()))
    }

    /// Whether a write holds the writer lock right now (a hint: it may be released
    /// or taken the moment after).
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

    pub fn writer_busy(&self) -> bool {
        self.writer.is_locked()
    }

    pub(crate) fn begin(&self) -> Txn<'_> {
        let w = self.writer.lock();
        Txn {
            engine: self,
            batch: self.store.batch(),
            w,
            base: self.catalog(),
            catalog: None,
            wall: bson::DateTime::now(),
            last_ts: None,
            oplog_added: 0,
            touched_capped: false,
            ns_mask: 0,
            recent: Vec::new(),
            session: None,
            apply_ops: Vec::new(),
            txn_ts: None,
        }
    }

    /// Starts the in-memory recent oplog (the first change stream does), under the
    /// writer lock so that no commit slips between its start and the first hand-over.
    pub(crate) fn enable_recent_oplog(&self) {
        if !self.recent.enabled() {
            let w = self.writer.lock();
            self.recent.enable(keys::ts_to_u64(w.clock.last()) + 1);
        }
    }

    /// Writes a no-op oplog entry (as mongod's periodic noop writer does), e.g. to
    /// advance the cluster time for readers.
    pub fn write_noop(&self, msg: &str) -> Result<Committed> {
        let mut txn = self.begin();
        txn.log(OplogChange {
            op: "n",
            ns: String::new(),
            ui: None,
            o: doc! {"msg": msg},
            o2: None,
        });
        txn.commit()
    }
}

/// One atomic write: data, index entries, oplog entries and catalog changes,
/// committed together under the writer lock.
pub(crate) struct Txn<'e> {
    engine: &'e Engine,
    w: MutexGuard<'e, Writer>,
    batch: Batch<'e>,
    /// The catalog as of the start (stable: it only changes under the writer lock we hold).
    base: Arc<Catalog>,
    /// A modified copy of the catalog, installed on commit.
    catalog: Option<Catalog>,
    wall: bson::DateTime,
    last_ts: Option<bson::Timestamp>,
    oplog_added: u64,
    /// Capped totals include this transaction's inserts: settle them at commit or drop.
    touched_capped: bool,
    /// Namespaces written (see [`CommitNotice::ns_mask`]).
    ns_mask: u64,
    /// This transaction's oplog entries, for the in-memory recent oplog (when enabled).
    recent: Vec<changestream::recent::RecentEntry>,
    /// The session (`lsid`, `txnNumber`) of a multi-document transaction being committed.
    /// Its operations are then collected in `apply_ops` and written at the commit as
    /// one `applyOps` entry carrying the session, as mongod writes a transaction: its
    /// change events share that entry's time and tell each other apart by their index
    /// in it (the resume token's `txnOpIndex`).
    session: Option<(Document, i64)>,
    apply_ops: Vec<bson::RawDocumentBuf>,
    /// The time of that entry, taken at the transaction's first operation.
    txn_ts: Option<bson::Timestamp>,
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.touched_capped {
            // Not committed (commit clears the flag): the totals counted work that never happened.
            self.engine.capped_settle(false);
        }
    }
}

impl<'e> Txn<'e> {
    pub fn batch(&mut self) -> &mut Batch<'e> {
        &mut self.batch
    }

    /// Whether this commit is a multi-document transaction's: its operations go into
    /// one `applyOps` entry (see `session`).
    pub fn collects_ops(&self) -> bool {
        self.session.is_some()
    }

    /// The time of the transaction's `applyOps` entry (taken once).
    fn txn_ts(&mut self) -> bson::Timestamp {
        match self.txn_ts {
            Some(ts) => ts,
            None => {
                let ts = self.w.clock.next();
                self.txn_ts = Some(ts);
                ts
            }
        }
    }

    /// Adds an operation to the transaction's `applyOps` entry; returns its time.
    fn collect_op(&mut self, op: bson::RawDocumentBuf) -> bson::Timestamp {
        let ts = self.txn_ts();
        self.apply_ops.push(op);
        ts
    }

    /// Appends an oplog entry (and its per-namespace index entry) with the next cluster
    /// time; in a transaction, adds it to the transaction's entry.
    pub fn log(&mut self, change: OplogChange) -> bson::Timestamp {
        if self.collects_ops() {
            let op = bson::RawDocumentBuf::from_document(&change.to_apply_op())
                .expect("an oplog operation is a valid document");
            return self.collect_op(op);
        }
        let ts = self.w.clock.next();
        let entry = change.to_entry(ts, self.wall);
        let mut bytes = Vec::with_capacity(256);
        entry
            .to_writer(&mut bytes)
            .expect("serialising a Document into a Vec cannot fail");
        self.put_oplog(&change.ns, ts, &bytes, None);
        ts
    }

    /// Stores a change-stream image (`before` or after) of the document the entry at `ts`
    /// changed (in a transaction: the operation just added to its entry).
    pub fn put_image(&mut self, ts: bson::Timestamp, kind: keys::ImageKind, doc: &Document) {
        let mut bytes = Vec::new();
        doc.to_writer(&mut bytes)
            .expect("serialising a Document into a Vec cannot fail");
        let t = keys::ts_to_u64(ts);
        if self.collects_ops() {
            let index = self.apply_ops.len().saturating_sub(1) as u32;
            self.batch
                .put(Space::Images, &keys::image_key_at(t, index, kind), &bytes);
        } else {
            self.batch
                .put(Space::Images, &keys::image_key(t, kind), &bytes);
        }
    }

    /// Appends an insert's oplog entry, built directly from the document's raw bytes
    /// (the hot path of bulk inserts: no Document is built or re-encoded).
    pub fn log_insert(
        &mut self,
        ns: &str,
        ui: bson::Uuid,
        doc: &bson::RawDocument,
        id: &bson::RawBsonRef<'_>,
    ) -> bson::Timestamp {
        use bson::raw::{RawBinaryRef, RawBsonRef};
        let mut o2 = bson::RawDocumentBuf::new();
        o2.append_ref("_id", *id);
        let ui_bytes = ui.bytes();
        // The operation's own fields: the whole of a transaction's operation, the
        // start of an entry.
        let append_op = |e: &mut bson::RawDocumentBuf| {
            e.append_ref("op", "i");
            e.append_ref("ns", ns);
            e.append_ref(
                "ui",
                RawBsonRef::Binary(RawBinaryRef {
                    subtype: bson::spec::BinarySubtype::Uuid,
                    bytes: &ui_bytes,
                }),
            );
            e.append_ref("o", RawBsonRef::Document(doc));
            e.append_ref("o2", RawBsonRef::Document(&o2));
        };
        if self.collects_ops() {
            let mut op = bson::RawDocumentBuf::new();
            append_op(&mut op);
            return self.collect_op(op);
        }
        let ts = self.w.clock.next();
        // Sized for the whole entry at once, and every field appended by reference: an
        // owned value per field was an allocation each, and growing the buffer field by
        // field copied the document again (a tenth of a small insert's instructions).
        let fixed = 160 + ns.len();
        let mut bytes = Vec::with_capacity(fixed + doc.as_bytes().len() + o2.as_bytes().len());
        bytes.extend_from_slice(&[5, 0, 0, 0, 0]);
        let mut e = bson::RawDocumentBuf::from_bytes(bytes).expect("the empty document");
        append_op(&mut e);
        e.append_ref("ts", RawBsonRef::Timestamp(ts));
        e.append_ref("t", RawBsonRef::Int64(1));
        e.append_ref("v", RawBsonRef::Int64(2));
        e.append_ref("wall", RawBsonRef::DateTime(self.wall));
        // What the entry holds is known here: not read back from its bytes.
        let head = oplog::EntryHead {
            op: "i",
            ns,
            o: Some(doc),
        };
        self.put_oplog(ns, ts, e.as_bytes(), Some(head));
        ts
    }

    /// Stores an oplog entry and lists it in `oplog_by_ns` under `ns` and, for a
    /// command, under every other namespace it touches (a rename's target, a database's
    /// collections). `head`: the entry's op, ns and o when the caller knows them (else
    /// read from `bytes`).
    fn put_oplog(
        &mut self,
        ns: &str,
        ts: bson::Timestamp,
        bytes: &[u8],
        head: Option<oplog::EntryHead<'_>>,
    ) {
        let t = keys::ts_to_u64(ts);
        self.oplog_added += bytes.len() as u64;
        self.batch.put(Space::Oplog, &keys::oplog_key(t), bytes);
        let raw = bson::RawDocument::from_bytes(bytes).ok();
        let head = head.or_else(|| raw.map(oplog::EntryHead::of));
        let digest = head.map(|h| h.digest()).unwrap_or_default();
        if !ns.is_empty() {
            self.ns_mask |= namespace_bit(ns);
            self.batch
                .put(Space::OplogByNs, &keys::oplog_ns_key(ns, t), &digest);
        }
        let recent = self.engine.recent.enabled();
        let is_command = head.is_some_and(|h| h.op == "c");
        // Only commands and streams need the list (the first one is `ns`).
        let namespaces = match head {
            Some(h) if recent || is_command => h.namespaces(),
            _ => Vec::new(),
        };
        if is_command {
            for target in namespaces.iter().skip(1) {
                self.ns_mask |= namespace_bit(target);
                self.batch
                    .put(Space::OplogByNs, &keys::oplog_ns_key(target, t), b"c");
            }
        }
        if recent {
            if let (Some(raw), Some(_)) = (raw, head) {
                self.recent.push(changestream::recent::RecentEntry::new(
                    t,
                    raw,
                    digest,
                    namespaces,
                    self.engine.recent.watched(),
                ));
            }
        }
        self.last_ts = Some(ts);
    }

    pub fn catalog(&self) -> &Catalog {
        self.catalog.as_ref().unwrap_or(&self.base)
    }

    pub fn catalog_mut(&mut self) -> &mut Catalog {
        if self.catalog.is_none() {
            self.catalog = Some((*self.base).clone());
        }
        self.catalog.as_mut().unwrap()
    }

    /// Installs a collection's new metadata (persisted in this batch).
    pub fn put_collection(&mut self, meta: CollMeta) -> Arc<CollMeta> {
        let mut bytes = Vec::new();
        meta.to_document()
            .to_writer(&mut bytes)
            .expect("serialise catalog entry");
        let key = keys::catalog_key(&meta.ns.full());
        self.batch.put(Space::Catalog, &key, &bytes);
        let arc = Arc::new(meta);
        self.catalog_mut().colls.insert(arc.ns.full(), arc.clone());
        self.persist_counters();
        arc
    }

    pub fn remove_collection(&mut self, ns: &Namespace) {
        self.batch
            .delete(Space::Catalog, &keys::catalog_key(&ns.full()));
        self.catalog_mut().colls.remove(&ns.full());
    }

    fn persist_counters(&mut self) {
        let mut bytes = Vec::new();
        self.catalog()
            .counters_document()
            .to_writer(&mut bytes)
            .expect("serialise counters");
        self.batch.put(Space::Meta, keys::META_COUNTERS, &bytes);
    }

    /// Marks the oplog entries of this commit as a transaction's (see `session`).
    pub fn set_session(&mut self, lsid: Document, txn_number: i64) {
        self.session = Some((lsid, txn_number));
    }

    pub fn touch_capped(&mut self) {
        self.touched_capped = true;
    }

    /// Writes a transaction's `applyOps` entry (mongod's field order: the session,
    /// then op, ns, o, ts, t, v, wall and prevOpTime).
    fn write_apply_ops(&mut self) {
        let (Some(ts), Some((lsid, number))) = (self.txn_ts, self.session.as_ref()) else {
            return;
        };
        let mut ops = bson::RawArrayBuf::new();
        for op in std::mem::take(&mut self.apply_ops) {
            ops.push(op);
        }
        let mut o = bson::RawDocumentBuf::new();
        o.append("applyOps", ops);
        let mut e = bson::RawDocumentBuf::new();
        if let Ok(raw) = bson::RawDocumentBuf::from_document(lsid) {
            e.append("lsid", raw);
        }
        e.append("txnNumber", *number);
        e.append("op", "c");
        e.append("ns", "admin.$cmd");
        e.append("o", o);
        e.append("ts", ts);
        e.append("t", 1i64);
        e.append("v", 2i64);
        e.append("wall", self.wall);
        let mut prev = bson::RawDocumentBuf::new();
        prev.append(
            "ts",
            bson::Timestamp {
                time: 0,
                increment: 0,
            },
        );
        prev.append("t", -1i64);
        e.append("prevOpTime", prev);
        self.put_oplog("admin.$cmd", ts, e.as_bytes(), None);
    }

    /// Commits atomically; returns the durability sequence number.
    pub fn commit(mut self) -> Result<Committed> {
        if !self.apply_ops.is_empty() {
            self.write_apply_ops();
        }
        if self.batch.is_empty() {
            return Ok(Committed {
                seq: self.engine.durability.last_committed(),
                last_ts: None,
            });
        }
        let touched_capped = std::mem::take(&mut self.touched_capped);
        if self.oplog_added > 0 {
            self.w.oplog_bytes += self.oplog_added;
            self.w.put_oplog_state(&mut self.batch);
        }
        let engine = self.engine;
        let batch = std::mem::replace(&mut self.batch, engine.store.batch());
        let catalog = self.catalog.take();
        let last_ts = self.last_ts;
        if let Err(e) = engine.store.commit(batch) {
            if touched_capped {
                engine.capped_settle(false);
            }
            return Err(storage_err(e));
        }
        if touched_capped {
            engine.capped_settle(true);
        }
        // Before the durable time can cover these entries, so a stream that reads up
        // to it finds them in memory.
        if !self.recent.is_empty() {
            engine.recent.push(std::mem::take(&mut self.recent));
        }
        let seq = engine.durability.committed(last_ts.map(keys::ts_to_u64));
        if let Some(c) = catalog {
            *engine.catalog.write() = Arc::new(c);
        }
        if let Some(ts) = last_ts {
            if engine.change_streams_wait_on(self.ns_mask) {
                engine.durability.request(seq);
            }
            let notice = CommitNotice {
                seq,
                last_ts: keys::ts_to_u64(ts),
                ns_mask: self.ns_mask,
            };
            engine.commits.send_replace(notice);
            let mut bits = self.ns_mask;
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                engine.commits_by_bit[bit].send_replace(notice);
                bits &= bits - 1;
            }
        }
        if self.w.oplog_bytes > engine.opts.oplog_size_bytes {
            if let Some(wake) = engine.oplog_wake.lock().as_ref() {
                // Full: a wake-up is already pending.
                let _ = wake.try_send(());
            }
        }
        Ok(Committed { seq, last_ts })
    }
}

/// Most oplog bytes one trim round removes: bounds the entries it holds in memory
/// and the writer-lock time of its copies.
const TRIM_ROUND_BYTES: u64 = 16 << 20;

/// An insert whose document may still live only in a trimmed oplog entry.
struct TrimCopy {
    coll_uuid: bson::Uuid,
    doc_key: Vec<u8>,
    ts: u64,
    doc: bson::RawDocumentBuf,
}

/// One round of oplog trimming: removes the oldest entries (at most
/// [`TRIM_ROUND_BYTES`]) towards a little under the cap (the slack keeps trims
/// infrequent). Returns whether the oplog is still over its cap.
///
/// Starts from the stored trim point, never searching for the oldest key. The
/// entries are read without the writer lock (they are immutable and all below the
/// newest commit); the lock is taken only to copy into their collection the
/// documents still stored only in a trimmed insert entry (their collection key
/// still points at it: checked under the lock, where no write can change it) and
/// to move the trim point, all in one atomic batch. Entries below the trim point
/// are gone for every reader at once (readers start at the trim point); their
/// storage is reclaimed by whole files later, so the oplog is never rewritten by
/// compaction. The per-namespace ordering and pre-images go with range tombstones.
fn trim_oplog_round(engine: &Engine) -> Result<bool> {
    let cap = engine.opts.oplog_size_bytes;
    let (trim_ts, oplog_bytes, newest) = {
        let w = engine.writer.lock();
        (w.trim_ts, w.oplog_bytes, keys::ts_to_u64(w.clock.last()))
    };
    if oplog_bytes <= cap {
        return Ok(false);
    }
    let slack = (cap / 64).max(256 * 1024).min(cap / 2);
    let mut to_free = oplog_bytes
        .saturating_sub(cap - slack)
        .min(TRIM_ROUND_BYTES);
    let coll_ids = coll_ids_by_uuid(&engine.catalog());
    let mut namespaces = std::collections::BTreeSet::new();
    let mut copies = Vec::new();
    let mut new_trim = trim_ts;
    let mut freed = 0u64;
    for item in engine
        .store
        .scan(Space::Oplog, &keys::oplog_key(trim_ts), None, false)
    {
        let (k, v) = item.map_err(storage_err)?;
        let t = u64::from_be_bytes(k[..8].try_into().unwrap());
        if to_free == 0 || t >= newest {
            break;
        }
        if let Ok(raw) = bson::RawDocument::from_bytes(&v) {
            namespaces.extend(oplog::indexed_namespaces(raw));
            if raw.get_str("op") == Ok("i") {
                copies.extend(trim_copy(&coll_ids, raw, t)?);
            }
        }
        let n = v.len() as u64;
        to_free = to_free.saturating_sub(n);
        freed += n;
        new_trim = t + 1;
    }
    if new_trim <= trim_ts {
        return Ok(false);
    }
    let mut batch = engine.store.batch();
    for ns in &namespaces {
        batch.delete_range(
            Space::OplogByNs,
            &keys::oplog_ns_key(ns, 0),
            &keys::oplog_ns_key(ns, new_trim),
        );
    }
    batch.delete_range(
        Space::Images,
        &keys::image_key(0, keys::ImageKind::Before),
        &keys::image_key(new_trim, keys::ImageKind::Before),
    );
    let mut w = engine.writer.lock();
    // Only this thread moves the trim point.
    assert_eq!(w.trim_ts, trim_ts, "oplog trim point moved during a trim");
    // Under the writer lock the catalog and the collection keys cannot change.
    let live = coll_ids_by_uuid(&engine.catalog());
    for c in &copies {
        if live.get(&c.coll_uuid) != coll_ids.get(&c.coll_uuid) {
            continue; // dropped, or renamed with its documents copied in
        }
        if let Some(v) = engine
            .store
            .get(Space::Docs, &c.doc_key)
            .map_err(storage_err)?
        {
            if keys::parse_doc_pointer(&v) == Some(c.ts) {
                batch.put(Space::Docs, &c.doc_key, c.doc.as_bytes());
            }
        }
    }
    w.trim_ts = new_trim;
    w.oplog_bytes = w.oplog_bytes.saturating_sub(freed);
    w.put_oplog_state(&mut batch);
    engine.store.commit(batch).map_err(storage_err)?;
    engine
        .trim_ts
        .store(new_trim, std::sync::atomic::Ordering::Release);
    let over = w.oplog_bytes > cap;
    drop(w);
    engine
        .store
        .retire_through(Space::Oplog, &keys::oplog_key(new_trim - 1));
    tracing::debug!(freed, new_trim, "oplog trimmed");
    Ok(over)
}

/// Collection ids by UUID (oplog entries name their collection by UUID).
fn coll_ids_by_uuid(catalog: &Catalog) -> std::collections::HashMap<bson::Uuid, u32> {
    catalog.colls.values().map(|c| (c.uuid, c.id)).collect()
}

/// The copy a trim may have to make for an insert entry: its collection (by UUID),
/// document key and document. None if the collection is gone.
fn trim_copy(
    coll_ids: &std::collections::HashMap<bson::Uuid, u32>,
    entry: &bson::RawDocument,
    ts: u64,
) -> Result<Option<TrimCopy>> {
    let Ok(bson::RawBsonRef::Binary(ui)) =
        entry.get("ui").map(|v| v.unwrap_or(bson::RawBsonRef::Null))
    else {
        return Ok(None);
    };
    let Ok(uuid) = <[u8; 16]>::try_from(ui.bytes).map(bson::Uuid::from_bytes) else {
        return Ok(None);
    };
    let Some(&coll_id) = coll_ids.get(&uuid) else {
        return Ok(None);
    };
    let doc = entry
        .get_document("o")
        .map_err(|e| Error::internal(format!("corrupt insert oplog entry: {e}")))?;
    let id = doc
        .get("_id")
        .ok()
        .flatten()
        .ok_or_else(|| Error::internal("insert oplog entry without _id"))?;
    let id = bson::Bson::try_from(id.to_raw_bson()).map_err(|e| Error::internal(e.to_string()))?;
    Ok(Some(TrimCopy {
        coll_uuid: uuid,
        doc_key: keys::doc_key(coll_id, &keys::id_key(&id)),
        ts,
        doc: doc.to_raw_document_buf(),
    }))
}

/// Starts the oplog's maintenance thread (mongod has one too): it trims the oplog
/// when a commit takes it over its cap (woken by the commit; trimming never runs on
/// a writer's path), and twice a second deletes the files of trimmed entries once no
/// snapshot can read them ([`Store::reclaim`]). Stops when the wake-up sender is
/// dropped or the engine is gone.
fn spawn_oplog_maintenance(
    engine: std::sync::Weak<Engine>,
    woken: std::sync::mpsc::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("oplog-maintain".into())
        .spawn(move || loop {
            let stop = matches!(
                woken.recv_timeout(std::time::Duration::from_millis(500)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
            );
            let Some(engine) = engine.upgrade() else {
                return;
            };
            // Trimming waits while `fsync` holds the files still (`db.fsyncLock()`).
            let Some(_pass) = engine.fsync_lock.try_enter_write() else {
                if stop {
                    return;
                }
                continue;
            };
            loop {
                match trim_oplog_round(&engine) {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        tracing::error!("oplog trim failed: {e}");
                        break;
                    }
                }
            }
            if let Err(e) = engine.store.reclaim() {
                tracing::warn!("reclaiming trimmed oplog files failed: {e}");
            }
            if stop {
                return;
            }
        })
        .expect("spawn the oplog maintenance thread")
}

/// Rewrites every pointer value of a collection with its document (before the
/// collection changes UUID, which trimming uses to find it).
pub(crate) fn materialize_collection(
    engine: &Engine,
    batch: &mut Batch<'_>,
    coll_id: u32,
) -> Result<()> {
    let prefix = keys::coll_prefix(coll_id);
    for item in engine.store.scan_prefix(Space::Docs, &prefix, false) {
        let (k, v) = item.map_err(storage_err)?;
        if let read::StoredDoc::InOplog(entry) = read::stored_bytes(&engine.store, &v)? {
            batch.put(Space::Docs, &k, read::inserted_document(&entry)?.as_bytes());
        }
    }
    Ok(())
}

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
    views::load_views(store, &mut catalog)?;
    Ok(catalog)
}

/// Takes an exclusive lock on `<dbpath>/mongod.lock` so a second server on the same
/// directory refuses to start instead of corrupting the store.
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

pub(crate) fn storage_err(e: tailstream_storage::StorageError) -> Error {
    if e.is_out_of_space() {
        // mongod's code for a write refused for want of disk space. After a failed
        // write of the write-ahead log RocksDB refuses writes until it is reopened
        // (see `Store::wal_writable`), hence the restart.
        return Error::new(
            codes::OUT_OF_DISK_SPACE,
            format!(
                "out of disk space ({e}); writes are refused: free disk space under the \
                 data directory and restart the server"
            ),
        );
    }
    Error::internal(e.to_string())
}

#[cfg(test)]
mod change_stream_waiting_tests {
    use super::*;

    /// A commit asks for its own fsync exactly when a waiting stream watches one of
    /// its namespaces: a collection stream its collection's bit, a database or
    /// deployment stream every bit; and only while the getMore waits.
    #[test]
    fn commits_ask_for_the_fsync_only_while_a_stream_watching_them_waits() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineOptions {
            dbpath: dir.path().to_path_buf(),
            oplog_size_bytes: 1 << 30,
        })
        .unwrap();
        let a = namespace_bit("db.a");
        let b = (0..64).map(|i| 1u64 << i).find(|bit| *bit != a).unwrap();
        assert!(!engine.change_streams_wait_on(a | b), "nobody waits");
        {
            let _on_a = engine.change_stream_waiting(a);
            let _again_on_a = engine.change_stream_waiting(a);
            assert!(engine.change_streams_wait_on(a));
            assert!(engine.change_streams_wait_on(a | b));
            assert!(
                !engine.change_streams_wait_on(b),
                "a commit to another collection"
            );
            drop(_again_on_a);
            assert!(engine.change_streams_wait_on(a), "one waiter is left");
        }
        assert!(!engine.change_streams_wait_on(a), "the getMores returned");
        {
            let _database = engine.change_stream_waiting(a | b);
            assert!(engine.change_streams_wait_on(b));
            let _deployment = engine.change_stream_waiting(u64::MAX);
            assert!(engine.change_streams_wait_on(1 << 63));
        }
        assert!(!engine.change_streams_wait_on(u64::MAX));
        engine.shutdown();
    }
}

//! The atomic write: a [`Txn`] puts documents, index entries, oplog entries and
//! catalog changes into one storage batch under the writer lock (the sequencer) and
//! commits it. Cluster times are taken from the clock under that lock, so commit order
//! equals oplog order and a reader tailing the oplog never sees a gap. The commit
//! hands its entries to the recent oplog (before the durable time can cover them) and
//! publishes a notice on the commit bus ([`crate::core::bus`]).

use crate::catalog::namespace::Namespace;
use crate::catalog::{Catalog, CollMeta};
use crate::core::bus::{namespace_bit, CommitNotice};
use crate::core::clock::ClusterClock;
use crate::core::raw_writer::{self, RawWriter};
use crate::core::time::ClusterTime;
use crate::core::{keys, storage_err};
use crate::oplog::{self, OplogChange};
use crate::Engine;
use bson::{doc, Document};
use parking_lot::MutexGuard;
use std::sync::Arc;
use tailstream_query::error::{Error, Result};
use tailstream_storage::{Batch, Space, Store};

/// What a committed transaction reports back.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// Durability sequence number: wait for `Durability::wait_synced(seq)` before a `j: true` ack.
    pub seq: u64,
    /// Cluster time of the last oplog entry written (the operation time).
    pub last_ts: Option<ClusterTime>,
}

pub(crate) struct Writer {
    pub(crate) clock: ClusterClock,
    /// Bytes of oplog entries currently retained.
    pub(crate) oplog_bytes: u64,
    /// Oldest retained oplog time (everything below it was trimmed).
    pub(crate) trim_ts: ClusterTime,
    /// Newest oplog time committed (ZERO for none): every commit's entries come after
    /// it, and the trim point never passes it (the newest entry is kept, so the clock
    /// restarts after it and a stream opened now starts inside the oplog).
    pub(crate) committed_ts: ClusterTime,
    /// The id of the last commit held as pending in the store (a replica set's
    /// pipelined commits, see `Proposer`).
    pub(crate) pending_id: u64,
    /// `oplog_bytes` when the oplog state was last stored or loaded (see
    /// [`OPLOG_STATE_EVERY_BYTES`]).
    pub(crate) state_bytes: u64,
}

/// A commit stores the oplog's state (trim point and retained size) once its
/// entries since the state last stored reach this many bytes; a trim always stores
/// it. The size of the entries after it is counted again when the state is loaded
/// (at open, after a snapshot install, on a member applying a commit that carries
/// it), so that count reads at most this much of the oplog (a millisecond or two).
/// Stored on every commit it was one of a bus message's six keys: 2,400
/// instructions to build and a memtable insert (callgrind, bus benchmark).
pub(crate) const OPLOG_STATE_EVERY_BYTES: u64 = 1 << 20;

/// An insert entry's bytes besides its `ns`, `o` and `o2`: the names, types, lengths
/// and fixed-size values (sized exactly: one allocation, no growth).
const INSERT_ENTRY_FIXED_BYTES: usize = 104;

/// An insert's oplog entry, `{op: "i", ns, ui, o, o2, ts, t: 1, v: 2, wall}`, written
/// straight into one buffer sized for it ([`RawWriter`]). The bytes are what
/// appending the same fields to a `RawDocumentBuf` gives (a unit test compares them).
/// Also where in them the document (`o`) lies.
fn insert_entry_bytes(
    ns: &str,
    ui: &[u8; 16],
    o: &bson::RawDocument,
    o2: &[u8],
    ts: ClusterTime,
    wall: bson::DateTime,
) -> (Vec<u8>, std::ops::Range<usize>) {
    let mut e = RawWriter::with_capacity(
        INSERT_ENTRY_FIXED_BYTES + ns.len() + o.as_bytes().len() + o2.len(),
    );
    e.string("op", "i");
    e.string("ns", ns);
    e.binary("ui", bson::spec::BinarySubtype::Uuid, ui);
    e.doc("o", o);
    let o_end = e.buf().len();
    let o_at = o_end - o.as_bytes().len()..o_end;
    e.name(raw_writer::DOCUMENT, "o2");
    e.buf().extend_from_slice(o2);
    e.timestamp("ts", ts.into());
    e.int64("t", 1);
    e.int64("v", 2);
    e.date_time("wall", wall);
    (e.into_bytes(), o_at)
}

impl Writer {
    /// Stores the trim point and the retained size, which counts the entries up to
    /// `through` (the newest entry committed with this batch or before it), in `batch`.
    pub(crate) fn put_oplog_state(&self, batch: &mut Batch<'_>, through: ClusterTime) {
        // `{trim: <i64>, bytes: <i64>, through: <i64>}`, written raw: building a
        // `Document` and serializing it was 3,700 instructions (callgrind).
        let mut state = RawWriter::with_capacity(48);
        state.int64("trim", self.trim_ts.as_u64() as i64);
        state.int64("bytes", self.oplog_bytes as i64);
        state.int64("through", through.as_u64() as i64);
        batch.put(Space::Meta, keys::META_OPLOG_TRIM, &state.into_bytes());
    }

    /// Whether this commit stores the oplog state (see [`OPLOG_STATE_EVERY_BYTES`]).
    fn oplog_state_due(&self) -> bool {
        self.oplog_bytes.saturating_sub(self.state_bytes) >= OPLOG_STATE_EVERY_BYTES
    }

    /// The time of the newest oplog entry in the store (ZERO for none).
    pub(crate) fn load_newest_time(store: &Store) -> Result<ClusterTime> {
        let last = store.last(Space::Oplog, &[], None).map_err(storage_err)?;
        Ok(last.map_or(ClusterTime::ZERO, |(k, _)| keys::oplog_key_time(&k)))
    }

    /// The trim point and retained size [`Self::put_oplog_state`] stored, the entries
    /// after its `through` counted in (nothing trimmed, nothing retained in a new data
    /// directory). A state without `through` (stored by every commit, before
    /// [`OPLOG_STATE_EVERY_BYTES`]) counts every entry.
    pub(crate) fn load_oplog_state(store: &Store) -> Result<(ClusterTime, u64)> {
        let Some(v) = store
            .get(Space::Meta, keys::META_OPLOG_TRIM)
            .map_err(storage_err)?
        else {
            return Ok((ClusterTime::ZERO, 0));
        };
        let d =
            Document::from_reader(&mut v.as_slice()).map_err(|e| Error::internal(e.to_string()))?;
        let trim = ClusterTime::from_u64(d.get_i64("trim").unwrap_or(0) as u64);
        let mut bytes = d.get_i64("bytes").unwrap_or(0) as u64;
        if let Ok(through) = d.get_i64("through") {
            let after = ClusterTime::from_u64(through as u64).next();
            for item in store.scan(Space::Oplog, &keys::oplog_key(after), None, false) {
                let (_, entry) = item.map_err(storage_err)?;
                bytes += entry.len() as u64;
            }
        }
        Ok((trim, bytes))
    }
}

impl Engine {
    pub(crate) fn begin(&self) -> Txn<'_> {
        let w = WriterGuard::new(self.writer.lock());
        Txn {
            engine: self,
            batch: self.write_batch(),
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

    /// A commit's end, in commit order: its durability sequence number (returned), and
    /// its notice to the waiting cursors and streams (a durability request first when
    /// a change stream waits on one of its namespaces).
    pub(crate) fn announce(&self, last_ts: Option<ClusterTime>, ns_mask: u64) -> u64 {
        let seq = self.durability.committed(last_ts);
        if let Some(ts) = last_ts {
            if self.bus.waits_on(ns_mask) {
                self.durability.request(seq);
            }
            self.bus.publish(CommitNotice {
                seq,
                last_ts: ts,
                ns_mask,
            });
        }
        seq
    }

    /// Wakes the oplog maintenance thread when the oplog holds more than its cap.
    fn wake_trim_if_over(&self, oplog_bytes: u64) {
        if oplog_bytes > self.opts.oplog_size_bytes {
            if let Some(wake) = self.oplog_wake.lock().as_ref() {
                // Full: a wake-up is already pending.
                let _ = wake.try_send(());
            }
        }
    }

    /// Starts the in-memory recent oplog (the first change stream does), under the
    /// writer lock so that no commit slips between its start and the first hand-over.
    pub(crate) fn enable_recent_oplog(&self) {
        if !self.recent.enabled() {
            let w = self.writer.lock();
            // From just after the newest committed entry, not the clock's newest time:
            // a commit that failed (a member that lost the lead) took a time from the
            // clock that no entry has, and the next leader's entries, applied here,
            // may come before it.
            self.recent.enable(w.committed_ts.next());
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
/// The writer lock as a commit holds it. While it is held, this thread's reads see
/// the store's pending writes (a replica set's pipelined commits not stored yet, see
/// `Proposer`); a pipelined commit lets it go before it waits for the set.
pub(crate) struct WriterGuard<'e>(Option<MutexGuard<'e, Writer>>);

impl<'e> WriterGuard<'e> {
    fn new(guard: MutexGuard<'e, Writer>) -> WriterGuard<'e> {
        tailstream_storage::see_pending(true);
        crate::oplog::pipeline::note_seen(guard.pending_id);
        WriterGuard(Some(guard))
    }

    fn release(&mut self) {
        if self.0.take().is_some() {
            tailstream_storage::see_pending(false);
        }
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::ops::Deref for WriterGuard<'_> {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        self.0.as_ref().expect("the writer lock is held")
    }
}

impl std::ops::DerefMut for WriterGuard<'_> {
    fn deref_mut(&mut self) -> &mut Writer {
        self.0.as_mut().expect("the writer lock is held")
    }
}

pub(crate) struct Txn<'e> {
    engine: &'e Engine,
    w: WriterGuard<'e>,
    batch: Batch<'e>,
    /// The catalog as of the start (stable: it only changes under the writer lock we hold).
    base: Arc<Catalog>,
    /// A modified copy of the catalog, installed on commit.
    catalog: Option<Catalog>,
    wall: bson::DateTime,
    last_ts: Option<ClusterTime>,
    oplog_added: u64,
    /// Capped totals include this transaction's inserts: settle them at commit or drop.
    touched_capped: bool,
    /// Namespaces written (see [`CommitNotice::ns_mask`]).
    ns_mask: u64,
    /// This transaction's oplog entries, for the in-memory recent oplog (when enabled).
    recent: Vec<oplog::recent::RecentEntry>,
    /// The session (`lsid`, `txnNumber`) of a multi-document transaction being committed.
    /// Its operations are then collected in `apply_ops` and written at the commit as
    /// one `applyOps` entry carrying the session, as mongod writes a transaction: its
    /// change events share that entry's time and tell each other apart by their index
    /// in it (the resume token's `txnOpIndex`).
    session: Option<(Document, i64)>,
    apply_ops: Vec<bson::RawDocumentBuf>,
    /// The time of that entry, taken at the transaction's first operation.
    txn_ts: Option<ClusterTime>,
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

    /// Bytes of writes this commit holds so far.
    pub(crate) fn batch_bytes(&self) -> usize {
        self.batch.size_in_bytes()
    }

    /// Whether this commit is a multi-document transaction's: its operations go into
    /// one `applyOps` entry (see `session`).
    pub fn collects_ops(&self) -> bool {
        self.session.is_some()
    }

    /// The time of the transaction's `applyOps` entry (taken once).
    fn txn_ts(&mut self) -> ClusterTime {
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
    fn collect_op(&mut self, op: bson::RawDocumentBuf) -> ClusterTime {
        let ts = self.txn_ts();
        self.apply_ops.push(op);
        ts
    }

    /// Appends an oplog entry (and its per-namespace index entry) with the next cluster
    /// time; in a transaction, adds it to the transaction's entry.
    pub fn log(&mut self, change: OplogChange) -> ClusterTime {
        if self.collects_ops() {
            let op = bson::RawDocumentBuf::from_document(&change.to_apply_op())
                .expect("an oplog operation is a valid document");
            return self.collect_op(op);
        }
        let ts = self.w.clock.next();
        let entry = change.to_entry(ts.into(), self.wall);
        let mut bytes = Vec::with_capacity(256);
        entry
            .to_writer(&mut bytes)
            .expect("serialising a Document into a Vec cannot fail");
        self.put_oplog(&change.ns, ts, &bytes, (None, None));
        ts
    }

    /// Stores a change-stream image (`before` or after) of the document the entry at `ts`
    /// changed (in a transaction: the operation just added to its entry).
    pub fn put_image(&mut self, ts: ClusterTime, kind: keys::ImageKind, doc: &Document) {
        let mut bytes = Vec::new();
        doc.to_writer(&mut bytes)
            .expect("serialising a Document into a Vec cannot fail");
        if self.collects_ops() {
            assert!(
                !self.apply_ops.is_empty(),
                "a transaction's image stored before its operation"
            );
            let index = (self.apply_ops.len() - 1) as u32;
            self.batch
                .put(Space::Images, &keys::image_key_at(ts, index, kind), &bytes);
        } else {
            self.batch
                .put(Space::Images, &keys::image_key(ts, kind), &bytes);
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
    ) -> ClusterTime {
        use bson::raw::{RawBinaryRef, RawBsonRef};
        let mut o2 = RawWriter::with_capacity(32);
        o2.value("_id", *id);
        let o2 = o2.finish();
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
        let (e, doc_at) = insert_entry_bytes(ns, &ui_bytes, doc, o2.as_bytes(), ts, self.wall);
        // What the entry holds is known here: not read back from its bytes.
        let head = oplog::EntryHead {
            op: "i",
            ns,
            o: Some(doc),
            o2: None,
        };
        let inserted = oplog::recent::InsertAt {
            ui: ui_bytes,
            doc: doc_at,
        };
        self.put_oplog(ns, ts, &e, (Some(head), Some(inserted)));
        ts
    }

    /// Stores an oplog entry and lists it in `oplog_by_ns` under `ns` and, for a
    /// command, under every other namespace it touches (a rename's target, a database's
    /// collections). `head`: the entry's op, ns and o when the caller knows them (else
    /// read from `bytes`); `inserted`: an insert's collection and where its document
    /// lies in `bytes`, for the recent oplog's readers.
    fn put_oplog(
        &mut self,
        ns: &str,
        ts: ClusterTime,
        bytes: &[u8],
        (head, inserted): (
            Option<oplog::EntryHead<'_>>,
            Option<oplog::recent::InsertAt>,
        ),
    ) {
        // Commit order is oplog order: this commit's entries in time order, all after
        // the previous commit's (a reader tailing the oplog never sees a gap fill in).
        let after = self.last_ts.unwrap_or(self.w.committed_ts);
        assert!(
            ts > after,
            "oplog entry at {ts} not after {after}: commit order must be oplog order",
        );
        self.oplog_added += bytes.len() as u64;
        self.batch.put(Space::Oplog, &keys::oplog_key(ts), bytes);
        let raw = bson::RawDocument::from_bytes(bytes).ok();
        let head = head.or_else(|| raw.map(oplog::EntryHead::of));
        let digest = head.map(|h| h.digest()).unwrap_or_default();
        if !ns.is_empty() {
            self.ns_mask |= namespace_bit(ns);
            self.batch
                .put(Space::OplogByNs, &keys::oplog_ns_key(ns, ts), &digest);
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
                    .put(Space::OplogByNs, &keys::oplog_ns_key(target, ts), b"c");
            }
        }
        if recent {
            if let (Some(raw), Some(_)) = (raw, head) {
                let entry = oplog::recent::RecentEntry::new(
                    ts,
                    raw,
                    digest,
                    namespaces,
                    self.engine.recent.watched(),
                );
                self.recent.push(match inserted {
                    Some(at) => entry.inserted_at(at),
                    None => entry,
                });
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
        assert!(
            self.last_ts.is_none() && self.txn_ts.is_none(),
            "a transaction's session set after its first operation was logged"
        );
        self.session = Some((lsid, txn_number));
    }

    pub fn touch_capped(&mut self) {
        self.touched_capped = true;
    }

    /// Writes a transaction's `applyOps` entry (mongod's field order: the session,
    /// then op, ns, o, ts, t, v, wall and prevOpTime).
    fn write_apply_ops(&mut self) {
        // Operations are collected only under a session, and the first one takes the time.
        let (Some(ts), Some((lsid, number))) = (self.txn_ts, self.session.as_ref()) else {
            panic!("an applyOps entry without a session or a time: only a transaction collects operations");
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
        e.append("ts", bson::Timestamp::from(ts));
        e.append("t", 1i64);
        e.append("v", 2i64);
        e.append("wall", self.wall);
        let mut prev = bson::RawDocumentBuf::new();
        prev.append("ts", bson::Timestamp::from(ClusterTime::ZERO));
        prev.append("t", -1i64);
        e.append("prevOpTime", prev);
        self.put_oplog("admin.$cmd", ts, e.as_bytes(), (None, None));
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
        // What a refused commit puts back (the stored state is the batch's own).
        let (bytes_before, state_before) = (self.w.oplog_bytes, self.w.state_bytes);
        if self.oplog_added > 0 {
            self.w.oplog_bytes = self
                .w
                .oplog_bytes
                .checked_add(self.oplog_added)
                .expect("the oplog's byte count overflows");
            if self.w.oplog_state_due() {
                let through = self.last_ts.expect("a commit with oplog bytes has entries");
                self.w.put_oplog_state(&mut self.batch, through);
                self.w.state_bytes = self.w.oplog_bytes;
            }
        }
        let engine = self.engine;
        let mut batch = std::mem::replace(&mut self.batch, engine.store.batch());
        let mut recorded = batch.take_recorded();
        let catalog = self.catalog.take();
        let last_ts = self.last_ts;
        let stored = match engine.proposer() {
            // A replica set: the set commits the writes and the state machine stores
            // them (`Engine::repl_apply_own`); the local batch is dropped unwritten.
            Some(proposer) => {
                drop(batch);
                let ops = recorded
                    .take()
                    .expect("a replica set's batch records its writes");
                // Pending writes cannot hold a range delete.
                if catalog.is_none() && !touched_capped && !ops.has_range_delete() {
                    return self.commit_pipelined(&*proposer, ops, (bytes_before, state_before));
                }
                proposer.propose(ops)
            }
            None => engine.store.commit(batch).map_err(storage_err),
        };
        if let Err(e) = stored {
            (self.w.oplog_bytes, self.w.state_bytes) = (bytes_before, state_before);
            if touched_capped {
                engine.capped_settle(false);
            }
            return Err(e);
        }
        if touched_capped {
            engine.capped_settle(true);
        }
        // In commit order: the writer lock is still held.
        engine.ship(recorded);
        if let Some(ts) = last_ts {
            self.w.committed_ts = ts;
        }
        // Before the durable time can cover these entries, so a stream that reads up
        // to it finds them in memory.
        if !self.recent.is_empty() {
            engine.recent.push(std::mem::take(&mut self.recent));
        }
        if let Some(c) = catalog {
            *engine.catalog.write() = Arc::new(c);
        }
        let seq = engine.announce(last_ts, self.ns_mask);
        engine.wake_trim_if_over(self.w.oplog_bytes);
        Ok(Committed { seq, last_ts })
    }

    /// A replica set's pipelined commit (see `Proposer`): its writes held as pending,
    /// proposed in commit order under the writer lock, which is then let go while the
    /// set commits it; the state machine finishes it in memory
    /// (`Engine::repl_apply_pipelined`). The writer's newest time and oplog size
    /// count it from now on: the next commit comes after it.
    fn commit_pipelined(
        mut self,
        proposer: &dyn crate::oplog::pipeline::Proposer,
        ops: tailstream_storage::Ops,
        before: (u64, u64),
    ) -> Result<Committed> {
        let engine = self.engine;
        self.w.pending_id += 1;
        let pending_id = self.w.pending_id;
        if let Err(e) = engine.store.pending_add(pending_id, &ops) {
            (self.w.oplog_bytes, self.w.state_bytes) = before;
            return Err(storage_err(e));
        }
        let finish = crate::oplog::pipeline::Finish {
            pending_id,
            last_ts: self.last_ts,
            ns_mask: self.ns_mask,
            recent: std::mem::take(&mut self.recent),
        };
        let submitted = match proposer.submit(ops, finish) {
            Ok(s) => s,
            Err(e) => {
                engine.store.pending_remove(pending_id);
                (self.w.oplog_bytes, self.w.state_bytes) = before;
                return Err(e);
            }
        };
        if let Some(ts) = self.last_ts {
            self.w.committed_ts = ts;
        }
        engine.wake_trim_if_over(self.w.oplog_bytes);
        let last_ts = self.last_ts;
        self.w.release();
        // None: the write's `wtimeout` passed first; it stays queued (the reply carries a
        // writeConcernError), and its durability point is not known yet.
        let seq = submitted
            .wait()?
            .unwrap_or_else(|| engine.durability.last_committed());
        Ok(Committed { seq, last_ts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use tailstream_storage::Space;

    fn noop(msg: &str) -> OplogChange {
        OplogChange {
            op: "n",
            ns: String::new(),
            ui: None,
            o: doc! {"msg": msg},
            o2: None,
        }
    }

    fn oplog_times(e: &Engine) -> Vec<ClusterTime> {
        crate::core::testing::stored_oplog(e, ClusterTime::ZERO)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    /// Each commit's entries are in time order and after every earlier commit's, and
    /// the commit reports its newest to the durability counter and the commit bus.
    #[test]
    fn each_commit_follows_the_previous_one_in_the_oplog() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        let docs = (0..3).map(|i| doc! {"_id": i}).collect();
        let first = e.insert_documents(&ns, docs, true).unwrap();
        let first = first.committed.unwrap();
        let second = e.write_noop("second").unwrap();
        let times = oplog_times(&e);
        // The collection's create entry, three inserts, the no-op.
        assert_eq!(times.len(), 5);
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
        assert_eq!(times[3], first.last_ts.unwrap());
        let newest = second.last_ts.unwrap();
        assert_eq!(times[4], newest);
        assert_eq!(second.seq, first.seq + 1);
        assert_eq!(e.writer.lock().committed_ts, newest);
        assert_eq!(ClusterTime::from(e.cluster_time()), second.last_ts.unwrap());
    }

    /// An insert's entry written byte by byte is the document the `bson` crate builds
    /// from the same fields.
    #[test]
    fn an_insert_entry_is_the_documented_document() {
        let doc = bson::rawdoc! {"_id": 7, "x": "y", "nested": {"a": [1, 2]}};
        let mut o2 = bson::RawDocumentBuf::new();
        o2.append("_id", 7);
        let ui = bson::Uuid::new();
        let ts = ClusterTime::from(bson::Timestamp {
            time: 1_700_000_000,
            increment: 42,
        });
        let wall = bson::DateTime::from_millis(1_700_000_000_123);
        let (bytes, doc_at) =
            insert_entry_bytes("db.coll", &ui.bytes(), &doc, o2.as_bytes(), ts, wall);
        assert_eq!(
            &bytes[doc_at.clone()],
            doc.as_bytes(),
            "the document's place"
        );
        // The recent oplog's readers take the document from that place as they would
        // from reading the entry.
        let raw = bson::RawDocument::from_bytes(&bytes).unwrap();
        let read = oplog::recent::RecentEntry::new(ts, raw, Vec::new(), Vec::new(), u64::MAX);
        let placed = oplog::recent::RecentEntry::new(ts, raw, Vec::new(), Vec::new(), u64::MAX)
            .inserted_at(oplog::recent::InsertAt {
                ui: ui.bytes(),
                doc: doc_at,
            });
        let (read, placed) = (read.inserted().unwrap(), placed.inserted().unwrap());
        assert_eq!((read.ui, &read.doc), (placed.ui, &placed.doc));
        let expected = bson::rawdoc! {
            "op": "i", "ns": "db.coll",
            "ui": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: ui.bytes().to_vec() },
            "o": doc.clone(), "o2": o2,
            "ts": bson::Timestamp { time: 1_700_000_000, increment: 42 },
            "t": 1i64, "v": 2i64, "wall": wall,
        };
        assert_eq!(bytes, expected.as_bytes());
        // Sized exactly: all but ns, o and o2 is fixed.
        let variable = "db.coll".len()
            + doc.as_bytes().len()
            + expected.get_document("o2").unwrap().as_bytes().len();
        assert_eq!(bytes.len(), INSERT_ENTRY_FIXED_BYTES + variable);
    }

    /// What is stored of the oplog's trim point and size, with the entries after it,
    /// is what an open reads.
    #[test]
    fn the_stored_oplog_state_reads_back() {
        let e = TestEngine::open();
        e.write_noop("grow the oplog").unwrap();
        let (trim, bytes, through) = {
            let w = e.writer.lock();
            let mut batch = e.store.batch();
            w.put_oplog_state(&mut batch, w.committed_ts);
            e.store.commit(batch).unwrap();
            (w.trim_ts, w.oplog_bytes, w.committed_ts)
        };
        assert!(bytes > 0, "the oplog holds entries");
        assert_eq!(Writer::load_oplog_state(&e.store).unwrap(), (trim, bytes));
        let stored = e
            .store
            .get(Space::Meta, keys::META_OPLOG_TRIM)
            .unwrap()
            .unwrap();
        assert_eq!(
            Document::from_reader(&mut stored.as_slice()).unwrap(),
            doc! {
                "trim": trim.as_u64() as i64,
                "bytes": bytes as i64,
                "through": through.as_u64() as i64,
            },
        );
        // An entry after it is counted in.
        e.write_noop("after the state").unwrap();
        let now = e.writer.lock().oplog_bytes;
        assert!(now > bytes);
        assert_eq!(Writer::load_oplog_state(&e.store).unwrap(), (trim, now));
    }

    /// A write that is dropped uncommitted leaves nothing, and its time is not reused.
    #[test]
    fn a_dropped_write_leaves_nothing_and_its_time_is_not_reused() {
        let e = TestEngine::open();
        let before = oplog_times(&e);
        let seq = e.durability.last_committed();
        let abandoned = {
            let mut txn = e.begin();
            txn.log(noop("dropped"))
        };
        assert_eq!(oplog_times(&e), before);
        assert_eq!(e.durability.last_committed(), seq);
        let next = e.write_noop("kept").unwrap();
        assert!(next.last_ts.unwrap() > abandoned);
    }

    #[test]
    fn an_empty_commit_writes_nothing() {
        let e = TestEngine::open();
        e.write_noop("one").unwrap();
        let seq = e.durability.last_committed();
        let c = e.begin().commit().unwrap();
        assert_eq!((c.seq, c.last_ts), (seq, None));
        assert_eq!(oplog_times(&e).len(), 1);
    }

    /// A transaction's operations are one applyOps entry at one time, after the
    /// previous commit, whatever times its operations were given.
    #[test]
    fn a_session_commit_is_one_apply_ops_entry() {
        let e = TestEngine::open();
        let before = e.write_noop("before").unwrap().last_ts.unwrap();
        let mut txn = e.begin();
        txn.set_session(doc! {"id": 1}, 7);
        let a = txn.log(noop("a"));
        let b = txn.log(noop("b"));
        assert_eq!(a, b, "one entry, one time");
        let c = txn.commit().unwrap();
        assert_eq!(c.last_ts, Some(a));
        assert!(a > before);
        let times = oplog_times(&e);
        assert_eq!(times, vec![before, a]);
        let bytes = e
            .store
            .get(Space::Oplog, &keys::oplog_key(a))
            .unwrap()
            .unwrap();
        let entry = Document::from_reader(&mut bytes.as_slice()).unwrap();
        assert_eq!(entry.get_i64("txnNumber").unwrap(), 7);
        assert_eq!(entry.get_str("ns").unwrap(), "admin.$cmd");
        let ops = entry
            .get_document("o")
            .unwrap()
            .get_array("applyOps")
            .unwrap();
        let msgs: Vec<&str> = ops
            .iter()
            .map(|op| op.as_document().unwrap().get_document("o").unwrap())
            .map(|o| o.get_str("msg").unwrap())
            .collect();
        assert_eq!(msgs, vec!["a", "b"]);
    }

    #[test]
    #[should_panic(expected = "session set after its first operation")]
    fn a_session_set_after_an_operation_is_refused() {
        let e = TestEngine::open();
        let mut txn = e.begin();
        txn.log(noop("alone"));
        txn.set_session(doc! {"id": 1}, 1);
    }

    fn stored_state(e: &Engine) -> Document {
        let v = e
            .store
            .get(Space::Meta, keys::META_OPLOG_TRIM)
            .unwrap()
            .expect("an oplog state stored");
        Document::from_reader(&mut v.as_slice()).unwrap()
    }

    /// Commits store the oplog's state only every `OPLOG_STATE_EVERY_BYTES`; an open
    /// counts the entries after it, so the retained size is exact after a restart.
    #[test]
    fn the_oplog_state_is_stored_now_and_then_and_counted_in_at_open() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        let pad = "x".repeat(4096);
        let mut last = ClusterTime::ZERO;
        for i in 0..700 {
            let out = e
                .insert_documents(&ns, vec![doc! {"_id": i, "pad": &pad}], true)
                .unwrap();
            last = out.committed.unwrap().last_ts.unwrap();
        }
        let counted = e.writer.lock().oplog_bytes;
        let stored: u64 = crate::core::testing::stored_oplog(&e, ClusterTime::ZERO)
            .iter()
            .map(|(_, n)| *n as u64)
            .sum();
        assert_eq!(counted, stored, "memory counts every entry");
        assert!(counted > 2 * OPLOG_STATE_EVERY_BYTES);
        // Stored by a commit a while ago, not by the newest.
        let state = stored_state(&e);
        let through = ClusterTime::from_u64(state.get_i64("through").unwrap() as u64);
        let state_bytes = state.get_i64("bytes").unwrap() as u64;
        assert!(through < last, "the newest commit stored the state");
        assert!(state_bytes < counted);
        assert!(counted - state_bytes < OPLOG_STATE_EVERY_BYTES + 8192);
        let e = e.reopen();
        assert_eq!(e.writer.lock().oplog_bytes, counted);
        // The next commits store it again only once a mebibyte more is written.
        e.write_noop("after the restart").unwrap();
        assert_eq!(stored_state(&e), state);
    }

    /// A state stored before `through` existed (by every commit) counts every entry:
    /// nothing after it is counted twice.
    #[test]
    fn an_oplog_state_without_through_counts_every_entry() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        e.insert_documents(&ns, vec![doc! {"_id": 1}], true)
            .unwrap();
        let counted = e.writer.lock().oplog_bytes;
        let old = doc! {"trim": 0i64, "bytes": counted as i64};
        let mut batch = e.store.batch();
        batch.put(
            Space::Meta,
            keys::META_OPLOG_TRIM,
            &bson::to_vec(&old).unwrap(),
        );
        e.store.commit(batch).unwrap();
        let e = e.reopen();
        assert_eq!(e.writer.lock().oplog_bytes, counted);
    }
}

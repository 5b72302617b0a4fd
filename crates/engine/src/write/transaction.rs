//! Multi-document transactions (`startTransaction`, `commitTransaction`, `abortTransaction`).
//!
//! A transaction reads a snapshot of the store taken when it starts, with its own
//! writes laid over it, and writes nothing to storage before it commits: it keeps,
//! per document it touched, the state at its snapshot and the state now (for its
//! reads and the conflict checks), and each of its writes in the order they ran. The
//! commit replays those writes in one atomic batch under the writer lock, like any
//! other write, so no reader (find, tailable cursor, change stream) ever sees part of
//! a transaction, an abort is just forgetting, and the oplog gets one `applyOps`
//! entry listing every operation, as mongod writes it (see `Txn::collects_ops`): a
//! document inserted and then updated in a transaction gives an insert event and an
//! update event, not one insert of its last state.
//!
//! Conflicts, as mongod reports them (WriteConflict, labelled TransientTransactionError):
//! a document written by an open transaction is locked to it until it ends, so another
//! transaction writing it fails; and a transaction writing a document that was changed
//! since its snapshot fails, at the write or, for a change that lands in between, at
//! the commit.
//!
//! Reads inside a transaction look documents up by `_id` when the filter names them,
//! and otherwise scan the collection (no secondary index is used).

use crate::catalog::namespace::Namespace;
use crate::catalog::validation::DocumentValidator;
use crate::core::time::ClusterTime;
use crate::read::cursor::{Cursor, Source, DEFAULT_FIRST_BATCH};
use crate::read::find::{check_batch_size, CursorBatch, FindRequest};
use crate::write::{
    check_delete_limit, compute_update, run_statements, upsert_document, ComputedUpdate, DeleteOp,
    PendingIndex, UpdateOp, WriteError, WriteOutcome,
};
use crate::{core::keys, core::storage_err, oplog::txn::Committed, read, Engine};
use bson::{doc, Bson, Document, RawDocumentBuf};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::matcher::Matcher;
use tailstream_query::projection::Projection;
use tailstream_query::sort::SortSpec;
use tailstream_query::update::{UpdateKind, UpdateSpec};
use tailstream_storage::{OwnedSnapshot, Space};

/// Writes an open transaction may make at most (mongod's limit is the 16 MiB of its
/// oplog entry; this bounds the memory a transaction holds).
pub const MAX_TRANSACTION_WRITES: usize = 100_000;

/// (namespace, `_id` KeyString) of a document.
type DocKey = (String, Vec<u8>);

/// Which open transaction holds each document it wrote.
pub(crate) type LockTable = Arc<Mutex<HashMap<DocKey, u64>>>;

/// A collection or indexes created in the transaction: applied at the commit, before
/// the documents (mongod allows these on collections the transaction creates).
enum PendingDdl {
    Create(Namespace, Document),
    CreateIndexes(Namespace, Vec<Document>),
}

struct Touched {
    ns: Namespace,
    id_ks: Vec<u8>,
    /// At the snapshot.
    base: Option<Document>,
    /// As the transaction left it (None: deleted).
    current: Option<Document>,
}

/// One write of a transaction, as it ran: what the commit replays.
struct TxnWrite {
    ns: Namespace,
    id_ks: Vec<u8>,
    kind: WriteKind,
}

// One per write of an open transaction, kept in memory until it ends: a boxed update
// would cost an allocation per write for no measured gain.
#[allow(clippy::large_enum_variant)]
enum WriteKind {
    Insert(Document),
    /// `old`: the document as the transaction saw it just before this write.
    Update {
        old: Document,
        change: ComputedUpdate,
    },
    /// The document as the transaction saw it just before.
    Delete(Document),
}

impl WriteKind {
    /// The document after this write (None: deleted).
    fn after(&self) -> Option<Document> {
        match self {
            WriteKind::Insert(d) => Some(d.clone()),
            WriteKind::Update { change, .. } => Some(change.new.clone()),
            WriteKind::Delete(_) => None,
        }
    }
}

pub struct Transaction {
    id: u64,
    snapshot: OwnedSnapshot,
    /// Every document written, in first-touch order, with its state at the snapshot
    /// and now.
    touched: Vec<Touched>,
    /// The writes in the order they ran, which is the order of the operations in the
    /// commit's `applyOps` entry.
    writes: Vec<TxnWrite>,
    by_key: HashMap<DocKey, usize>,
    locks: LockTable,
    ddl: Vec<PendingDdl>,
}

impl Drop for Transaction {
    fn drop(&mut self) {
        let mut locks = self.locks.lock();
        for key in self.by_key.keys() {
            if locks.get(key) == Some(&self.id) {
                locks.remove(key);
            }
        }
    }
}

/// mongod's error for a write that collides with another transaction's or a newer commit.
pub fn write_conflict() -> Error {
    Error::new(
        codes::WRITE_CONFLICT,
        "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction.",
    )
    .with_label("TransientTransactionError")
}

impl Engine {
    /// Takes the document `_id: id` of `ns` back from whichever open transaction wrote
    /// it, after a commit outside transactions changed it: that transaction can no
    /// longer commit (its snapshot's version is gone: WriteConflict at its commit), and
    /// other transactions may write the document meanwhile instead of waiting for it
    /// to end (a consumer group's bucket handed on while its previous holder's
    /// transaction is left open by a dead process).
    pub(crate) fn release_transaction_lock(&self, ns: &Namespace, id: &Bson) {
        let key = (ns.full(), keys::id_key(id));
        self.transaction_locks.lock().remove(&key);
    }

    /// Starts a transaction: its reads see what is committed now, and its own writes.
    pub fn begin_transaction(&self) -> Transaction {
        Transaction {
            id: self.next_transaction_id.fetch_add(1, Ordering::Relaxed),
            snapshot: self.store.snapshot(),
            touched: Vec::new(),
            writes: Vec::new(),
            by_key: HashMap::new(),
            locks: Arc::clone(&self.transaction_locks),
            ddl: Vec::new(),
        }
    }

    /// A read-only transaction on everything committed, with the cluster time of the
    /// newest commit it contains (for `readConcern: {level: "snapshot"}` reads).
    pub fn snapshot_now(&self) -> (ClusterTime, Transaction) {
        // Under the writer lock no commit is half done: the clock's last time is the
        // newest commit, and the snapshot holds exactly the commits up to it.
        let w = self.writer.lock();
        // A replica set's pipelined commits took times from the clock before they are
        // in the store: wait for them (a member that lost the lead has none to wait for
        // that will ever come, and takes the snapshot as it is).
        if let Some(p) = self.proposer() {
            let _ = p.drain();
        }
        let ts = w.clock.last();
        let t = self.begin_transaction();
        drop(w);
        (ts, t)
    }

    fn decode_in_snapshot(&self, t: &Transaction, value: &[u8]) -> Result<Document> {
        match keys::parse_doc_pointer(value) {
            None => read::decode(value),
            Some(ts) => {
                let entry = t
                    .snapshot
                    .get(Space::Oplog, &keys::oplog_key(ts))
                    .map_err(storage_err)?
                    .ok_or_else(|| {
                        Error::internal(format!(
                            "document points at oplog entry {ts} which is gone"
                        ))
                    })?;
                Document::try_from(read::inserted_document(&entry)?)
                    .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))
            }
        }
    }

    /// A document as the transaction sees it.
    fn transaction_doc(
        &self,
        t: &Transaction,
        ns: &Namespace,
        id_ks: &[u8],
    ) -> Result<Option<Document>> {
        if let Some(&i) = t.by_key.get(&(ns.full(), id_ks.to_vec())) {
            return Ok(t.touched[i].current.clone());
        }
        let Some(meta) = self.collection(ns) else {
            return Ok(None);
        };
        match t
            .snapshot
            .get(Space::Docs, &keys::doc_key(meta.id, id_ks))
            .map_err(storage_err)?
        {
            Some(v) => Ok(Some(self.decode_in_snapshot(t, &v)?)),
            None => Ok(None),
        }
    }

    /// Every document of a collection as the transaction sees it, in `_id` order.
    fn transaction_view(
        &self,
        t: &Transaction,
        ns: &Namespace,
    ) -> Result<Vec<(Vec<u8>, Document)>> {
        let mut docs = BTreeMap::new();
        if let Some(meta) = self.collection(ns) {
            let prefix = keys::coll_prefix(meta.id);
            for (k, v) in t
                .snapshot
                .scan_prefix(Space::Docs, &prefix)
                .map_err(storage_err)?
            {
                docs.insert(k[prefix.len()..].to_vec(), self.decode_in_snapshot(t, &v)?);
            }
        }
        for x in t.touched.iter().filter(|x| x.ns == *ns) {
            match &x.current {
                Some(d) => docs.insert(x.id_ks.clone(), d.clone()),
                None => docs.remove(&x.id_ks),
            };
        }
        Ok(docs.into_iter().collect())
    }

    /// The documents a filter may match, as the transaction sees them: those with the
    /// `_id`s the filter names, or else every document of the collection.
    fn transaction_candidates(
        &self,
        t: &Transaction,
        ns: &Namespace,
        matcher: &Matcher,
    ) -> Result<Vec<(Vec<u8>, Document)>> {
        if self.view(ns).is_some() {
            // A view's documents have no record keys (nothing writes them).
            return Ok(self
                .transaction_documents(t, ns)?
                .into_iter()
                .map(|d| (Vec::new(), d))
                .collect());
        }
        let by_id = self.collection(ns).is_some_and(|m| !m.is_timeseries());
        let Some(ids) = read::id_points(matcher).filter(|_| by_id) else {
            return self.transaction_view(t, ns);
        };
        let mut docs = Vec::with_capacity(ids.len());
        for id_ks in ids {
            if let Some(d) = self.transaction_doc(t, ns, &id_ks)? {
                docs.push((id_ks, d));
            }
        }
        Ok(docs)
    }

    /// The documents of a collection (or the results of a view) the transaction sees,
    /// for a read command.
    pub fn transaction_documents(&self, t: &Transaction, ns: &Namespace) -> Result<Vec<Document>> {
        if let Some(view) = self.resolve_view(ns)? {
            let base = self
                .transaction_view(t, &view.base)?
                .into_iter()
                .map(|(_, d)| d)
                .collect();
            return self.view_documents(&view, base);
        }
        Ok(self
            .transaction_view(t, ns)?
            .into_iter()
            .map(|(_, d)| d)
            .collect())
    }

    /// Records a write of the transaction and the document's new state, taking the
    /// document's lock at its first write.
    fn touch(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        id_ks: &[u8],
        kind: WriteKind,
    ) -> Result<()> {
        if t.writes.len() >= MAX_TRANSACTION_WRITES {
            return Err(Error::new(
                codes::TRANSACTION_TOO_LARGE,
                format!("a transaction may make at most {MAX_TRANSACTION_WRITES} writes"),
            ));
        }
        let new = kind.after();
        let write = TxnWrite {
            ns: ns.clone(),
            id_ks: id_ks.to_vec(),
            kind,
        };
        let key = (ns.full(), id_ks.to_vec());
        if let Some(&i) = t.by_key.get(&key) {
            t.touched[i].current = new;
            t.writes.push(write);
            return Ok(());
        }
        {
            let mut locks = t.locks.lock();
            match locks.get(&key) {
                Some(owner) if *owner != t.id => return Err(write_conflict()),
                _ => {
                    locks.insert(key.clone(), t.id);
                }
            }
        }
        let base = self.transaction_doc(t, ns, id_ks)?;
        let latest = match self.collection(ns) {
            Some(meta) => read::fetch(&self.store, meta.id, id_ks)?,
            None => None,
        };
        t.by_key.insert(key, t.touched.len());
        t.touched.push(Touched {
            ns: ns.clone(),
            id_ks: id_ks.to_vec(),
            base: base.clone(),
            current: new,
        });
        if latest != base {
            // Changed by a commit after the snapshot (the lock is released with the
            // transaction, which the caller aborts).
            return Err(write_conflict());
        }
        t.writes.push(write);
        Ok(())
    }

    pub fn transaction_insert(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        docs: Vec<RawDocumentBuf>,
        ordered: bool,
        bypass_document_validation: bool,
    ) -> Result<WriteOutcome> {
        ns.validate_for_write()?;
        let validator = self.validator(ns, bypass_document_validation)?;
        let mut out = WriteOutcome::default();
        let writable = self.transaction_writable(ns, "insert into");
        for (index, raw) in docs.into_iter().enumerate() {
            let inserted = match &writable {
                Ok(()) => self.transaction_insert_one(t, ns, raw, validator.as_ref()),
                Err(e) => Err(e.clone()),
            };
            match inserted {
                Ok(_) => out.n += 1,
                Err(error) => {
                    out.errors.push(WriteError { index, error });
                    if ordered {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether a transaction may write documents to `ns`: as outside one, and, as
    /// mongod, not to a system collection, a capped collection or a time-series
    /// collection.
    fn transaction_writable(&self, ns: &Namespace, what: &str) -> Result<()> {
        let catalog = self.catalog();
        crate::write::check_writable(&catalog, ns)?;
        if ns.coll.starts_with("system.") {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                format!(
                    "Cannot write to system collection {} within a transaction.",
                    ns.full()
                ),
            ));
        }
        if catalog.get(ns).is_some_and(|m| m.is_capped()) {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                format!(
                    "Collection '{}' is a capped collection. Writes in transactions are not allowed on capped collections.",
                    ns.full()
                ),
            ));
        }
        if catalog.get(ns).is_some_and(|m| m.is_timeseries()) {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                format!(
                    "Cannot {what} a time-series collection in a multi-document transaction: {}",
                    ns.full()
                ),
            ));
        }
        Ok(())
    }

    /// The collection's validator for a write, if it has one and the write does not bypass it.
    fn validator(&self, ns: &Namespace, bypass: bool) -> Result<Option<DocumentValidator>> {
        match self.collection(ns) {
            Some(meta) => DocumentValidator::for_write(&meta, bypass),
            None => Ok(None),
        }
    }

    fn transaction_insert_one(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        raw: RawDocumentBuf,
        validator: Option<&DocumentValidator>,
    ) -> Result<Bson> {
        let raw = crate::write::prepare_new_raw(raw)?;
        crate::write::check_stored_limits(&raw, true)?;
        let doc = Document::try_from(raw.as_ref()).map_err(|e| Error::bad_value(e.to_string()))?;
        if let Some(v) = validator {
            v.check_new(&doc)?;
        }
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let id_ks = keys::id_key(&id);
        if self.transaction_doc(t, ns, &id_ks)?.is_some() {
            return Err(crate::write::duplicate_key_error(
                ns,
                "_id_",
                &doc! {"_id": 1},
                &doc! {"_id": id.clone()},
            ));
        }
        self.touch(t, ns, &id_ks, WriteKind::Insert(doc))?;
        Ok(id)
    }

    pub fn transaction_update(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        ops: Vec<UpdateOp>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        Ok(run_statements(&ops, ordered, |index, op, out| {
            let (n, modified, upserted) = self.transaction_update_one(t, ns, op)?;
            out.n += n;
            out.n_modified += modified;
            if let Some(id) = upserted {
                out.upserted.push((index, id));
            }
            Ok(None)
        }))
    }

    fn transaction_update_one(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        op: &UpdateOp,
    ) -> Result<(u64, u64, Option<Bson>)> {
        let (filter, mut vars) = crate::read::bind_let(&op.q, op.let_vars.as_ref())?;
        vars.collator = self.transaction_collator(t, ns, op.collation.as_ref())?;
        let matcher = Matcher::for_query_with_collation(&filter, vars.collator.clone())?;
        let spec = UpdateSpec::parse(&op.u, op.array_filters.as_deref())?;
        if op.multi && matches!(spec.kind(), UpdateKind::Replacement) {
            return Err(Error::failed_to_parse(
                "multi update is not supported for replacement-style update",
            ));
        }
        ns.validate_for_write()?;
        self.transaction_writable(ns, "update")?;
        let validator = self.validator(ns, op.bypass_document_validation)?;
        let candidates = self.transaction_candidates(t, ns, &matcher)?;
        let targets = matching(candidates, &matcher, !op.multi)?;
        if targets.is_empty() {
            if !op.upsert {
                return Ok((0, 0, None));
            }
            let doc = upsert_document(&filter, &spec, &vars)?;
            let raw =
                RawDocumentBuf::from_document(&doc).map_err(|e| Error::bad_value(e.to_string()))?;
            let id = self.transaction_insert_one(t, ns, raw, validator.as_ref())?;
            return Ok((1, 0, Some(id)));
        }
        let (mut n, mut modified) = (0, 0);
        for (id_ks, old) in targets {
            n += 1;
            if let Some(change) = compute_update(&filter, &spec, &old, &vars)? {
                crate::write::encode_checked(&change.new, false)?;
                if let Some(v) = validator.as_ref().filter(|v| v.checks_update_of(&old)) {
                    v.check_updated(&change.new)?;
                }
                self.touch(t, ns, &id_ks, WriteKind::Update { old, change })?;
                modified += 1;
            }
        }
        Ok((n, modified, None))
    }

    pub fn transaction_delete(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        ops: Vec<DeleteOp>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        Ok(run_statements(&ops, ordered, |_, op, out| {
            check_delete_limit(op.limit)?;
            self.transaction_writable(ns, "delete from")?;
            let (filter, _) = crate::read::bind_let(&op.q, op.let_vars.as_ref())?;
            let collator = self.transaction_collator(t, ns, op.collation.as_ref())?;
            let matcher = Matcher::for_query_with_collation(&filter, collator)?;
            let candidates = self.transaction_candidates(t, ns, &matcher)?;
            let targets = matching(candidates, &matcher, op.limit != 0)?;
            let n = targets.len() as u64;
            for (id_ks, old) in targets {
                self.touch(t, ns, &id_ks, WriteKind::Delete(old))?;
            }
            out.n += n;
            Ok(None)
        }))
    }

    /// findAndModify in a transaction; returns (value, n, updatedExisting, upserted _id).
    pub fn transaction_find_and_modify(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        req: &crate::write::FindAndModify,
    ) -> Result<crate::write::FamOutcome> {
        let plan = match &req.collation {
            Some(c) if !c.is_empty() => crate::write::FamPlan::parse(ns, req, None)?,
            _ => {
                let default = self.transaction_collator(t, ns, None)?;
                let mut req = req.clone();
                req.collation = default.map(|c| c.spec().clone());
                crate::write::FamPlan::parse(ns, &req, None)?
            }
        };
        self.transaction_writable(ns, if req.remove { "delete from" } else { "update" })?;
        let validator = self.validator(ns, req.bypass_document_validation)?;
        let mut out = crate::write::FamOutcome::default();
        let mut candidates = matching(
            self.transaction_candidates(t, ns, &plan.matcher)?,
            &plan.matcher,
            false,
        )?;
        if let Some(s) = &plan.sort {
            candidates.sort_by(|a, b| s.compare(&a.1, &b.1));
        }
        let project = |d: Document| -> Result<Document> {
            match &plan.projection {
                Some(p) => p.apply(&d),
                None => Ok(d),
            }
        };
        match (candidates.into_iter().next(), &plan.spec) {
            (Some((id_ks, doc)), None) => {
                self.touch(t, ns, &id_ks, WriteKind::Delete(doc.clone()))?;
                out.n = 1;
                out.value = Some(project(doc)?);
            }
            (Some((id_ks, old)), Some(spec)) => {
                let new = match compute_update(&plan.filter, spec, &old, &plan.vars)? {
                    Some(change) => {
                        crate::write::encode_checked(&change.new, false)?;
                        if let Some(v) = validator.as_ref().filter(|v| v.checks_update_of(&old)) {
                            v.check_updated(&change.new)?;
                        }
                        let new = change.new.clone();
                        let old = old.clone();
                        self.touch(t, ns, &id_ks, WriteKind::Update { old, change })?;
                        new
                    }
                    None => old.clone(),
                };
                out.n = 1;
                out.updated_existing = true;
                out.value = Some(project(if req.new { new } else { old })?);
            }
            (None, Some(spec)) if req.upsert => {
                let doc = upsert_document(&plan.filter, spec, &plan.vars)?;
                let raw = RawDocumentBuf::from_document(&doc)
                    .map_err(|e| Error::bad_value(e.to_string()))?;
                let id = self.transaction_insert_one(t, ns, raw, validator.as_ref())?;
                out.n = 1;
                out.upserted = Some(id.clone());
                if req.new {
                    out.value = match self.transaction_doc(t, ns, &keys::id_key(&id))? {
                        Some(d) => Some(project(d)?),
                        None => None,
                    };
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// A find in a transaction: filter, sort, skip, limit and projection over its view.
    pub fn transaction_find(
        &self,
        t: &Transaction,
        ns: &Namespace,
        req: FindRequest,
    ) -> Result<CursorBatch> {
        let (filter, _) = crate::read::bind_let(&req.filter, req.let_vars.as_ref())?;
        let collator = self.transaction_collator(t, ns, req.collation.as_ref())?;
        let matcher = Matcher::for_query_with_collation(&filter, collator.clone())?;
        let projection = match &req.projection {
            Some(p) if !p.is_empty() => Some(Arc::new(Projection::with_collation(
                p,
                Some(&req.filter),
                collator.clone(),
            )?)),
            _ => None,
        };
        if matches!(req.limit, Some(l) if l < 0) {
            return Err(Error::bad_value("LIMIT must be non-negative"));
        }
        let batch_size = check_batch_size(req.batch_size)?;
        let mut docs: Vec<Document> = matching(
            self.transaction_candidates(t, ns, &matcher)?,
            &matcher,
            false,
        )?
        .into_iter()
        .map(|(_, d)| d)
        .collect();
        if let Some(s) = req.sort.as_ref().filter(|s| !s.is_empty()) {
            let sort = SortSpec::parse(s)?.with_collator(collator);
            docs.sort_by(|a, b| sort.compare(a, b));
        }
        let mut cursor = Cursor::new(ns.full(), Source::Buffered(docs.into()));
        cursor.projection = projection;
        cursor.skip = req.skip;
        cursor.remaining = req.limit.filter(|l| *l > 0).map(|l| l as u64);
        cursor.lsid = req.lsid.clone();
        self.first_batch(
            cursor,
            Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)),
            req.single_batch,
        )
    }

    /// An operation's collation in a transaction: its own, else the default collation of
    /// the collection (also of one the transaction creates).
    fn transaction_collator(
        &self,
        t: &Transaction,
        ns: &Namespace,
        requested: Option<&Document>,
    ) -> Result<Option<Arc<tailstream_query::collation::Collator>>> {
        if requested.is_some_and(|r| !r.is_empty()) {
            return crate::read::find::operation_collator(None, requested);
        }
        if let Some(meta) = self.collection(ns) {
            return meta.default_collator();
        }
        for d in &t.ddl {
            if let PendingDdl::Create(n, options) = d {
                if n == ns {
                    if let Ok(spec) = options.get_document("collation") {
                        return tailstream_query::collation::Collator::parse(spec);
                    }
                }
            }
        }
        Ok(None)
    }

    fn created_in(t: &Transaction, ns: &Namespace) -> bool {
        t.ddl
            .iter()
            .any(|d| matches!(d, PendingDdl::Create(n, _) if n == ns))
    }

    /// `create` in a transaction: the collection appears at the commit.
    pub fn transaction_create(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        options: Document,
    ) -> Result<()> {
        ns.validate_for_write()?;
        if options.contains_key("viewOn") {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                "Cannot create a view in a multi-document transaction.",
            ));
        }
        if options.contains_key("timeseries") {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                "Cannot create a time-series collection in a multi-document transaction.",
            ));
        }
        if self.view(ns).is_some() {
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!("A view already exists. NS: {}", ns.full()),
            ));
        }
        if self.collection(ns).is_some() || Self::created_in(t, ns) {
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!("Collection {} already exists.", ns.full()),
            ));
        }
        // A bad collation fails the command now, not the commit.
        match options.get("collation") {
            None => {}
            Some(Bson::Document(d)) if d.is_empty() => {
                return Err(Error::bad_value("'collation' cannot be an empty document"));
            }
            Some(Bson::Document(d)) => {
                tailstream_query::collation::Collator::parse(d)?;
            }
            Some(other) => {
                return Err(tailstream_query::args::wrong_type(
                    "create.collation",
                    other,
                    "object",
                ));
            }
        }
        t.ddl.push(PendingDdl::Create(ns.clone(), options));
        Ok(())
    }

    /// `createIndexes` in a transaction, on a collection it creates (or that does not
    /// exist yet, which it then creates): (indexes before, after, collection created).
    pub fn transaction_create_indexes(
        &self,
        t: &mut Transaction,
        ns: &Namespace,
        specs: Vec<Document>,
    ) -> Result<(usize, usize, bool)> {
        ns.validate_for_write()?;
        if self.view(ns).is_some() {
            return Err(crate::catalog::views::not_a_collection(ns));
        }
        if self.collection(ns).is_some() {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                format!("Cannot create new indexes on existing collection {} in a multi-document transaction.", ns.full()),
            ));
        }
        let created = !Self::created_in(t, ns);
        if created {
            t.ddl.push(PendingDdl::Create(ns.clone(), Document::new()));
        }
        let before = 1 + t
            .ddl
            .iter()
            .map(|d| match d {
                PendingDdl::CreateIndexes(n, s) if n == ns => s.len(),
                _ => 0,
            })
            .sum::<usize>();
        let n = specs.len();
        t.ddl.push(PendingDdl::CreateIndexes(ns.clone(), specs));
        Ok((before, before + n, created))
    }

    /// Commits: the transaction's collections and indexes, then its document changes,
    /// in one atomic batch and one `applyOps` entry (None if it changed nothing).
    pub fn commit_transaction(
        &self,
        mut t: Transaction,
        session: Option<(Document, i64)>,
    ) -> Result<Option<Committed>> {
        if t.writes.is_empty() && t.ddl.is_empty() {
            return Ok(None);
        }
        let mut txn = self.begin();
        if let Some((lsid, number)) = session {
            txn.set_session(lsid, number);
        }
        // The DDL first, inside the transaction's entry, as mongod logs it.
        for d in &t.ddl {
            match d {
                PendingDdl::Create(ns, options) => {
                    let options = crate::write::ddl::create_options(ns, options.clone())?;
                    let options = crate::write::ddl::collection_options(options)?;
                    self.create_collection_in(&mut txn, ns, options)?;
                }
                PendingDdl::CreateIndexes(ns, specs) => {
                    self.create_indexes_in(&mut txn, ns, specs)?;
                }
            }
        }
        // Every document written must still be as the snapshot had it (a commit since
        // then is a conflict), also one the transaction inserted and deleted again.
        for x in &t.touched {
            let latest = match txn.catalog().get(&x.ns) {
                Some(m) => read::fetch(&self.store, m.id, &x.id_ks)?,
                None => None,
            };
            if latest != x.base {
                return Err(write_conflict());
            }
        }
        let mut pending = PendingIndex::default();
        for w in std::mem::take(&mut t.writes) {
            match w.kind {
                WriteKind::Insert(doc) => {
                    let meta = self.ensure_collection(&mut txn, &w.ns)?;
                    let raw = RawDocumentBuf::from_document(&doc)
                        .map_err(|e| Error::bad_value(e.to_string()))?;
                    self.insert_in(&mut txn, &meta, raw, &mut pending)?;
                }
                WriteKind::Update { old, change } => {
                    let meta = txn.catalog().get(&w.ns).ok_or_else(write_conflict)?;
                    self.store_update(&mut txn, &meta, &w.id_ks, old, change, &mut pending)?;
                }
                WriteKind::Delete(old) => {
                    let meta = txn.catalog().get(&w.ns).ok_or_else(write_conflict)?;
                    self.delete_in(&mut txn, &meta, &w.id_ks, &old, Some(&mut pending));
                }
            }
        }
        txn.commit().map(Some)
    }
}

/// The candidates `matcher` keeps (only the first with `first_only`); an error that ends
/// the operation (a failing `$where`, maxTimeMS) fails it.
fn matching<K>(
    candidates: Vec<(K, Document)>,
    matcher: &Matcher,
    first_only: bool,
) -> Result<Vec<(K, Document)>> {
    let mut out = Vec::new();
    for (k, d) in candidates {
        if matcher.matches_or_fail(&d)? {
            out.push((k, d));
            if first_only {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;

    fn ns_c() -> Namespace {
        Namespace::new("db", "c")
    }

    fn raw(d: Document) -> RawDocumentBuf {
        RawDocumentBuf::from_document(&d).unwrap()
    }

    /// `db.c` with `{_id: i, v: i}` for i in 1..=4.
    fn engine_with_documents() -> TestEngine {
        let e = TestEngine::open();
        let docs = (1..=4).map(|i| doc! {"_id": i, "v": i}).collect();
        e.insert_documents(&ns_c(), docs, true).unwrap();
        e
    }

    fn set(q: Document, set: Document) -> UpdateOp {
        UpdateOp {
            q,
            u: Bson::Document(doc! {"$set": set}),
            ..Default::default()
        }
    }

    fn delete_one(q: Document) -> DeleteOp {
        DeleteOp {
            q,
            limit: 1,
            ..Default::default()
        }
    }

    /// Every document of `db.c` as committed now.
    fn committed_documents(e: &Engine) -> Vec<Document> {
        e.find(&ns_c(), FindRequest::default()).unwrap().docs
    }

    fn oplog_len(e: &Engine) -> usize {
        crate::core::testing::stored_oplog(e, ClusterTime::ZERO).len()
    }

    fn assert_write_conflict(e: &Error) {
        assert_eq!(e.code, codes::WRITE_CONFLICT, "{}", e.message);
        assert_eq!(e.labels, vec!["TransientTransactionError".to_string()]);
    }

    /// The single write error of an outcome.
    fn only_error(out: WriteOutcome) -> Error {
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        out.errors.into_iter().next().unwrap().error
    }

    #[test]
    fn reads_see_the_snapshot_with_the_transactions_own_writes_over_it() {
        let e = engine_with_documents();
        let mut t = e.begin_transaction();
        // Committed after the snapshot: not seen.
        e.insert_documents(&ns_c(), vec![doc! {"_id": 5, "v": 5}], true)
            .unwrap();
        e.update(&ns_c(), vec![set(doc! {"_id": 1}, doc! {"v": 100})], true)
            .unwrap();
        // The transaction's own.
        e.transaction_insert(
            &mut t,
            &ns_c(),
            vec![raw(doc! {"_id": 6, "v": 6})],
            true,
            false,
        )
        .unwrap();
        let out = e
            .transaction_update(
                &mut t,
                &ns_c(),
                vec![set(doc! {"_id": 2}, doc! {"v": 20})],
                true,
            )
            .unwrap();
        assert_eq!((out.n, out.n_modified), (1, 1));
        let out = e
            .transaction_delete(&mut t, &ns_c(), vec![delete_one(doc! {"v": 3})], true)
            .unwrap();
        assert_eq!(out.n, 1);
        assert_eq!(
            e.transaction_documents(&t, &ns_c()).unwrap(),
            vec![
                doc! {"_id": 1, "v": 1},
                doc! {"_id": 2, "v": 20},
                doc! {"_id": 4, "v": 4},
                doc! {"_id": 6, "v": 6},
            ]
        );
        let by_id = FindRequest {
            filter: doc! {"_id": 6},
            ..Default::default()
        };
        assert_eq!(
            e.transaction_find(&t, &ns_c(), by_id).unwrap().docs,
            vec![doc! {"_id": 6, "v": 6}]
        );
        let sorted = FindRequest {
            filter: doc! {"v": {"$gte": 4}},
            sort: Some(doc! {"v": -1}),
            limit: Some(2),
            projection: Some(doc! {"_id": 1}),
            ..Default::default()
        };
        assert_eq!(
            e.transaction_find(&t, &ns_c(), sorted).unwrap().docs,
            vec![doc! {"_id": 2}, doc! {"_id": 6}]
        );
        // Outside, nothing of the transaction shows.
        let ids: Vec<i32> = committed_documents(&e)
            .iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    }

    /// A document another open transaction wrote is locked to it: writing it fails
    /// with a transient write conflict until that transaction ends.
    #[test]
    fn a_document_another_transaction_wrote_is_a_write_conflict() {
        let e = engine_with_documents();
        let mut first = e.begin_transaction();
        e.transaction_update(
            &mut first,
            &ns_c(),
            vec![set(doc! {"_id": 1}, doc! {"v": 10})],
            true,
        )
        .unwrap();
        let mut second = e.begin_transaction();
        let out = e
            .transaction_update(
                &mut second,
                &ns_c(),
                vec![set(doc! {"_id": 1}, doc! {"v": 11})],
                true,
            )
            .unwrap();
        assert_write_conflict(&only_error(out));
        let out = e
            .transaction_delete(
                &mut second,
                &ns_c(),
                vec![delete_one(doc! {"_id": 1})],
                true,
            )
            .unwrap();
        assert_write_conflict(&only_error(out));
        // Another document is free.
        let out = e
            .transaction_update(
                &mut second,
                &ns_c(),
                vec![set(doc! {"_id": 2}, doc! {"v": 12})],
                true,
            )
            .unwrap();
        assert!(out.errors.is_empty());
        drop(second);
        // An abort releases the lock: a new transaction writes the document.
        drop(first);
        let mut third = e.begin_transaction();
        let out = e
            .transaction_update(
                &mut third,
                &ns_c(),
                vec![set(doc! {"_id": 1}, doc! {"v": 13})],
                true,
            )
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        e.commit_transaction(third, None).unwrap();
        assert_eq!(committed_documents(&e)[0], doc! {"_id": 1, "v": 13});
    }

    /// A document changed by a commit after the snapshot conflicts: at the write when
    /// the change came first, at the commit when it came in between, and then nothing
    /// of the transaction is written.
    #[test]
    fn a_commit_since_the_snapshot_is_a_write_conflict() {
        let e = engine_with_documents();
        let mut t = e.begin_transaction();
        e.update(&ns_c(), vec![set(doc! {"_id": 1}, doc! {"v": 100})], true)
            .unwrap();
        let out = e
            .transaction_update(
                &mut t,
                &ns_c(),
                vec![set(doc! {"_id": 1}, doc! {"v": 10})],
                true,
            )
            .unwrap();
        assert_write_conflict(&only_error(out));
        drop(t);

        let mut t = e.begin_transaction();
        e.transaction_update(
            &mut t,
            &ns_c(),
            vec![set(doc! {"_id": 2}, doc! {"v": 20})],
            true,
        )
        .unwrap();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 9})], true, false)
            .unwrap();
        e.update(&ns_c(), vec![set(doc! {"_id": 2}, doc! {"v": 200})], true)
            .unwrap();
        let before = (committed_documents(&e), oplog_len(&e));
        let err = e.commit_transaction(t, None).expect_err("conflict");
        assert_write_conflict(&err);
        assert_eq!((committed_documents(&e), oplog_len(&e)), before);
    }

    /// A document the transaction inserted and deleted again must still be absent at
    /// the commit: an insert of it since is a conflict too.
    #[test]
    fn an_insert_since_the_snapshot_conflicts_with_an_insert_and_delete() {
        let e = engine_with_documents();
        let mut t = e.begin_transaction();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 50})], true, false)
            .unwrap();
        e.transaction_delete(&mut t, &ns_c(), vec![delete_one(doc! {"_id": 50})], true)
            .unwrap();
        e.insert_documents(&ns_c(), vec![doc! {"_id": 50, "outside": true}], true)
            .unwrap();
        assert_write_conflict(&e.commit_transaction(t, None).expect_err("conflict"));
    }

    /// The commit replays the writes in the order they ran, as one applyOps entry
    /// with the session, mongod's fields and mongod's field order.
    #[test]
    fn the_commit_is_one_apply_ops_entry_of_the_writes_in_order() {
        let e = engine_with_documents();
        let other = Namespace::new("db", "other");
        e.insert_documents(&other, vec![doc! {"_id": 0}], true)
            .unwrap();
        let entries_before = oplog_len(&e);
        let mut t = e.begin_transaction();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 10})], true, false)
            .unwrap();
        e.transaction_update(
            &mut t,
            &ns_c(),
            vec![set(doc! {"_id": 10}, doc! {"a": 1})],
            true,
        )
        .unwrap();
        e.transaction_delete(&mut t, &ns_c(), vec![delete_one(doc! {"_id": 2})], true)
            .unwrap();
        e.transaction_insert(&mut t, &other, vec![raw(doc! {"_id": 1})], true, false)
            .unwrap();
        let lsid = doc! {"id": bson::Uuid::new()};
        let committed = e
            .commit_transaction(t, Some((lsid.clone(), 3)))
            .unwrap()
            .expect("a commit");
        assert_eq!(oplog_len(&e), entries_before + 1, "one entry");
        let ts = committed.last_ts.unwrap();
        let bytes = e
            .store
            .get(Space::Oplog, &keys::oplog_key(ts))
            .unwrap()
            .unwrap();
        let entry = Document::from_reader(&mut bytes.as_slice()).unwrap();
        let fields: Vec<&str> = entry.keys().map(String::as_str).collect();
        assert_eq!(
            fields,
            vec![
                "lsid",
                "txnNumber",
                "op",
                "ns",
                "o",
                "ts",
                "t",
                "v",
                "wall",
                "prevOpTime"
            ]
        );
        assert_eq!(entry.get_document("lsid").unwrap(), &lsid);
        assert_eq!(entry.get_i64("txnNumber").unwrap(), 3);
        assert_eq!(
            (entry.get_str("op").unwrap(), entry.get_str("ns").unwrap()),
            ("c", "admin.$cmd")
        );
        assert_eq!(ClusterTime::from(entry.get_timestamp("ts").unwrap()), ts);
        assert_eq!(
            entry.get_document("prevOpTime").unwrap(),
            &doc! {"ts": bson::Timestamp { time: 0, increment: 0 }, "t": -1i64}
        );
        let ops = entry
            .get_document("o")
            .unwrap()
            .get_array("applyOps")
            .unwrap();
        let summary: Vec<(&str, &str)> = ops
            .iter()
            .map(|op| op.as_document().unwrap())
            .map(|op| (op.get_str("op").unwrap(), op.get_str("ns").unwrap()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("i", "db.c"),
                ("u", "db.c"),
                ("d", "db.c"),
                ("i", "db.other")
            ]
        );
        let ids: Vec<Document> = committed_documents(&e);
        assert!(ids.contains(&doc! {"_id": 10, "a": 1}));
        assert!(!ids.iter().any(|d| d.get_i32("_id") == Ok(2)));
    }

    /// An abort is forgetting: no document, collection or oplog entry, and its locks go.
    #[test]
    fn an_abort_leaves_nothing() {
        let e = engine_with_documents();
        let before = (
            committed_documents(&e),
            oplog_len(&e),
            e.durability.last_committed(),
        );
        let created = Namespace::new("db", "created");
        let mut t = e.begin_transaction();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 7})], true, false)
            .unwrap();
        e.transaction_update(
            &mut t,
            &ns_c(),
            vec![set(doc! {"_id": 1}, doc! {"v": 0})],
            true,
        )
        .unwrap();
        e.transaction_delete(&mut t, &ns_c(), vec![delete_one(doc! {"_id": 2})], true)
            .unwrap();
        e.transaction_create(&mut t, &created, doc! {}).unwrap();
        drop(t);
        assert_eq!(
            (
                committed_documents(&e),
                oplog_len(&e),
                e.durability.last_committed()
            ),
            before
        );
        assert!(e.collection(&created).is_none());
        assert!(
            e.transaction_locks.lock().is_empty(),
            "its locks are released"
        );
    }

    #[test]
    fn an_empty_transaction_commits_nothing() {
        let e = engine_with_documents();
        let before = oplog_len(&e);
        let mut t = e.begin_transaction();
        // A read and an update that matches nothing write nothing.
        e.transaction_find(&t, &ns_c(), FindRequest::default())
            .unwrap();
        e.transaction_update(
            &mut t,
            &ns_c(),
            vec![set(doc! {"_id": 99}, doc! {"v": 0})],
            true,
        )
        .unwrap();
        assert!(e.commit_transaction(t, None).unwrap().is_none());
        assert_eq!(oplog_len(&e), before);
    }

    #[test]
    fn a_duplicate_id_in_a_transaction_is_a_duplicate_key() {
        let e = engine_with_documents();
        let mut t = e.begin_transaction();
        let out = e
            .transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 1})], true, false)
            .unwrap();
        assert_eq!(only_error(out).code, codes::DUPLICATE_KEY);
        // Its own insert counts as well; an unordered insert goes on after the error.
        let out = e
            .transaction_insert(
                &mut t,
                &ns_c(),
                vec![
                    raw(doc! {"_id": 7}),
                    raw(doc! {"_id": 7}),
                    raw(doc! {"_id": 8}),
                ],
                false,
                false,
            )
            .unwrap();
        assert_eq!(out.n, 2);
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].index, 1);
        assert_eq!(out.errors[0].error.code, codes::DUPLICATE_KEY);
        // A document it deleted can be inserted again.
        e.transaction_delete(&mut t, &ns_c(), vec![delete_one(doc! {"_id": 3})], true)
            .unwrap();
        let out = e
            .transaction_insert(
                &mut t,
                &ns_c(),
                vec![raw(doc! {"_id": 3, "again": true})],
                true,
                false,
            )
            .unwrap();
        assert!(out.errors.is_empty());
    }

    /// What mongod refuses in a transaction (263 OperationNotSupportedInTransaction),
    /// and a collection that exists already (48 NamespaceExists).
    #[test]
    fn what_mongod_refuses_in_a_transaction_is_refused() {
        let e = engine_with_documents();
        let capped = Namespace::new("db", "capped");
        e.create_collection(&capped, doc! {"capped": true, "size": 4096})
            .unwrap();
        let mut t = e.begin_transaction();
        for ns in [capped.clone(), Namespace::new("db", "system.js")] {
            let out = e
                .transaction_insert(&mut t, &ns, vec![raw(doc! {"_id": 1})], true, false)
                .unwrap();
            assert_eq!(
                only_error(out).code,
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                "{ns:?}"
            );
        }
        let view = e
            .transaction_create(
                &mut t,
                &Namespace::new("db", "v"),
                doc! {"viewOn": "c", "pipeline": []},
            )
            .expect_err("a view");
        assert_eq!(view.code, codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION);
        let index = e
            .transaction_create_indexes(
                &mut t,
                &ns_c(),
                vec![doc! {"key": {"a": 1}, "name": "a_1"}],
            )
            .expect_err("an index on an existing collection");
        assert_eq!(index.code, codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION);
        let exists = e
            .transaction_create(&mut t, &ns_c(), doc! {})
            .expect_err("exists");
        assert_eq!(exists.code, codes::NAMESPACE_EXISTS);
        assert_eq!(exists.message, "Collection db.c already exists.");
    }

    /// A collection and indexes created in the transaction appear at its commit, their
    /// entries ahead of its writes in its applyOps entry.
    #[test]
    fn a_collection_created_in_the_transaction_appears_at_the_commit() {
        let e = TestEngine::open();
        let created = Namespace::new("db", "created");
        let mut t = e.begin_transaction();
        e.transaction_create(&mut t, &created, doc! {}).unwrap();
        let (before, after, new) = e
            .transaction_create_indexes(
                &mut t,
                &created,
                vec![doc! {"key": {"a": 1}, "name": "a_1"}],
            )
            .unwrap();
        assert_eq!((before, after, new), (1, 2, false));
        e.transaction_insert(
            &mut t,
            &created,
            vec![raw(doc! {"_id": 1, "a": 5})],
            true,
            false,
        )
        .unwrap();
        let again = e
            .transaction_create(&mut t, &created, doc! {})
            .expect_err("created already");
        assert_eq!(again.code, codes::NAMESPACE_EXISTS);
        assert!(e.collection(&created).is_none(), "not before the commit");
        let committed = e
            .commit_transaction(t, Some((doc! {"id": 1}, 1)))
            .unwrap()
            .unwrap();
        let meta = e.collection(&created).expect("created at the commit");
        assert!(meta.index_by_name("a_1").is_some());
        let bytes = e
            .store
            .get(Space::Oplog, &keys::oplog_key(committed.last_ts.unwrap()))
            .unwrap()
            .unwrap();
        let entry = Document::from_reader(&mut bytes.as_slice()).unwrap();
        let ops = entry
            .get_document("o")
            .unwrap()
            .get_array("applyOps")
            .unwrap();
        let kinds: Vec<String> = ops
            .iter()
            .map(|op| op.as_document().unwrap())
            .map(|op| match op.get_str("op").unwrap() {
                "c" => op.get_document("o").unwrap().keys().next().unwrap().clone(),
                other => other.to_string(),
            })
            .collect();
        assert_eq!(kinds, vec!["create", "createIndexes", "i"]);
    }

    /// A snapshot read's time is the newest commit it contains.
    #[test]
    fn a_snapshot_holds_the_commits_up_to_its_time() {
        let e = engine_with_documents();
        let newest = e.write_noop("newest").unwrap().last_ts.unwrap();
        let (at, t) = e.snapshot_now();
        assert_eq!(at, newest);
        e.insert_documents(&ns_c(), vec![doc! {"_id": 5}], true)
            .unwrap();
        assert_eq!(e.transaction_documents(&t, &ns_c()).unwrap().len(), 4);
    }
}

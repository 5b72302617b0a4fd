//! Inserts, updates, deletes and findAndModify. Each command's documents, index
//! entries and oplog entries go into one atomic batch per operation.

pub mod capped;
pub mod ddl;
mod find_and_modify;
pub(crate) mod merge;
pub mod retry;
pub mod transaction;
pub mod ttl;
pub mod validate;
pub mod views;

pub(crate) use find_and_modify::FamPlan;
pub use find_and_modify::{FamOutcome, FindAndModify};
pub use retry::{Done, RetryRecord, RetryWrite};

use crate::catalog::namespace::Namespace;
use crate::catalog::validation::DocumentValidator;
use crate::catalog::{CollMeta, IndexMeta};
use crate::core::format::{doc_to_string, value_to_string};
use crate::oplog::{update_diff, OplogChange};
use crate::read::{self, Scan};
use crate::{
    core::keys, core::storage_err, core::MAX_DOCUMENT_SIZE, core::MAX_NESTING_DEPTH,
    oplog::txn::Committed, oplog::txn::Txn, Engine,
};
use ahash::{AHashMap, AHashSet};
use bson::{doc, Bson, Document, RawDocumentBuf};
use std::sync::Arc;
use tailstream_query::collation::Collator;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::expr::Variables;
use tailstream_query::keystring::KeyStringBuilder;
use tailstream_query::matcher::Matcher;
use tailstream_query::path::get_path;
use tailstream_query::sort::SortSpec;
use tailstream_query::update::{ApplyContext, ConditionMatcher, UpdateKind, UpdateSpec};
use tailstream_storage::Space;

/// The most bytes of documents one commit of a replicated insert takes (see
/// [`Engine::insert`]): with their oplog entries and index keys about twice that, well
/// under the 48 MB of one message between members; a single document (16 MB at most)
/// is a part alone.
pub const REPLICATED_INSERT_PART_BYTES: usize = 8 << 20;

/// The most bytes one commit of an `updateMany` or `deleteMany` writes (its storage
/// batch: documents, index keys, oplog entries, images): past it the write commits
/// what it has done and goes on in a new commit, as mongod writes each document of a
/// multi-document update or delete on its own (such a write is not atomic there
/// either). Before, one commit took every match: every matching document and the
/// batch of every change were in memory at once, and on a member of a set the commit
/// was one Raft entry of any size. 8 MiB, as a replicated insert's part.
pub const MULTI_WRITE_PART_BYTES: usize = 8 << 20;

/// Matching documents a multi-document update or delete reads per scan step.
const MULTI_WRITE_STEP_DOCS: usize = 256;

/// One failed operation of a write command, by its position in the command.
#[derive(Debug, Clone)]
pub struct WriteError {
    pub index: usize,
    pub error: Error,
}

#[derive(Debug, Default)]
pub struct WriteOutcome {
    pub n: u64,
    pub n_modified: u64,
    pub upserted: Vec<(usize, Bson)>,
    pub errors: Vec<WriteError>,
    /// The last commit (None when nothing was written).
    pub committed: Option<Committed>,
}

#[derive(Debug, Clone, Default)]
pub struct UpdateOp {
    pub q: Document,
    pub u: Bson,
    pub multi: bool,
    pub upsert: bool,
    pub array_filters: Option<Vec<Document>>,
    pub hint: Option<Bson>,
    /// The command's `let` variables (with the statement's `c` constants merged in).
    pub let_vars: Option<Document>,
    /// The command's `bypassDocumentValidation`.
    pub bypass_document_validation: bool,
    /// The statement's `collation` (None: the collection's default).
    pub collation: Option<Document>,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOp {
    pub q: Document,
    /// 0: every match; 1: the first.
    pub limit: i64,
    pub hint: Option<Bson>,
    pub let_vars: Option<Document>,
    /// The statement's `collation` (None: the collection's default).
    pub collation: Option<Document>,
}

/// Index entries added and removed by the current batch, for unique checks that
/// must see the batch's own writes. Made for every write (most leave it empty).
pub(crate) struct PendingIndex {
    added: AHashMap<(u32, Vec<u8>), Vec<u8>>,
    removed: AHashSet<Vec<u8>>,
    /// Documents inserted by the batch, by record key (collection and `_id`: a
    /// transaction may insert the same `_id` into two collections).
    ids: AHashSet<Vec<u8>>,
    /// Documents the batch deleted, by record key: an insert of the same `_id` after
    /// the delete (in a transaction) is no duplicate of the stored one.
    deleted_ids: AHashSet<Vec<u8>>,
}

/// The hasher seeds of every [`PendingIndex`]: drawn once per process. `RandomState::new`
/// for each of its four sets cost 300 instructions a write (the bus benchmark's 1→1
/// insert, callgrind, 2026-11-28); a copy of these costs a few. Still random per process,
/// so a client cannot choose keys that collide (its batch would go quadratic).
fn pending_seeds() -> ahash::RandomState {
    static SEEDS: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
    SEEDS.get_or_init(ahash::RandomState::new).clone()
}

impl Default for PendingIndex {
    fn default() -> PendingIndex {
        PendingIndex {
            added: AHashMap::with_hasher(pending_seeds()),
            removed: AHashSet::with_hasher(pending_seeds()),
            ids: AHashSet::with_hasher(pending_seeds()),
            deleted_ids: AHashSet::with_hasher(pending_seeds()),
        }
    }
}

impl PendingIndex {
    /// Notes that the batch removed this index entry of document `id_ks`.
    fn entry_removed(&mut self, entry: &(u32, Vec<u8>), key: Vec<u8>, id_ks: &[u8]) {
        self.removed.insert(key);
        // Added earlier in this batch (a transaction's insert, then this change).
        if self.added.get(entry).is_some_and(|owner| owner == id_ks) {
            self.added.remove(entry);
        }
    }
}

/// Matches array elements for `$pull` conditions and `arrayFilters` with the query
/// matcher, under the operation's collation.
#[derive(Default)]
pub(crate) struct QueryConditions {
    pub collator: Option<Arc<Collator>>,
}

impl QueryConditions {
    fn matcher(&self, filter: &Document) -> Result<Matcher> {
        Matcher::with_collation(filter, self.collator.clone())
    }
}

impl ConditionMatcher for QueryConditions {
    fn matches_value(&self, condition: &Document, value: &Bson) -> Result<bool> {
        let operator_form = condition
            .keys()
            .next()
            .map(|k| k.starts_with('$') && !matches!(k.as_str(), "$and" | "$or" | "$nor" | "$expr"))
            .unwrap_or(false);
        if operator_form || !matches!(value, Bson::Document(_)) {
            if !operator_form && !condition.is_empty() {
                // A field condition against a non-document element never matches.
                return Ok(false);
            }
            let m = self.matcher(&doc! {"v": condition.clone()})?;
            return Ok(m.matches(&doc! {"v": value.clone()}));
        }
        let Bson::Document(d) = value else {
            unreachable!()
        };
        Ok(self.matcher(condition)?.matches(d))
    }
}

impl Engine {
    /// Inserts documents given as `Document`s (converted to raw BSON first).
    pub fn insert_documents(
        &self,
        ns: &Namespace,
        docs: Vec<Document>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        let raw = docs
            .iter()
            .map(|d| RawDocumentBuf::from_document(d).map_err(|e| Error::bad_value(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        self.insert(ns, raw, ordered)
    }

    /// Inserts documents; an ordered insert stops at the first error.
    ///
    /// On a member of a replica set, an insert of more than
    /// [`REPLICATED_INSERT_PART_BYTES`] of documents is committed in parts: each commit is
    /// one Raft entry sent whole in one message between members (48 MB at most, its
    /// documents counted twice, as data and in their oplog entries). mongod's inserts
    /// outside a transaction are not atomic either: each document is its own write.
    pub fn insert(
        &self,
        ns: &Namespace,
        docs: Vec<RawDocumentBuf>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        self.insert_validated(ns, docs, ordered, false)
    }

    /// Inserts documents, checking them against the collection's validator unless
    /// `bypass_document_validation`; an ordered insert stops at the first error.
    pub fn insert_validated(
        &self,
        ns: &Namespace,
        docs: Vec<RawDocumentBuf>,
        ordered: bool,
        bypass_document_validation: bool,
    ) -> Result<WriteOutcome> {
        self.insert_recorded(ns, docs, ordered, bypass_document_validation, None)
    }

    /// [`Self::insert_validated`], each commit recording what it did for a retryable
    /// write (`retry`; see `write/retry.rs`). Write errors' indexes are the documents'
    /// positions in `docs`.
    pub fn insert_recorded(
        &self,
        ns: &Namespace,
        docs: Vec<RawDocumentBuf>,
        ordered: bool,
        bypass_document_validation: bool,
        mut retry: Option<&mut RetryWrite>,
    ) -> Result<WriteOutcome> {
        if let Some(r) = &retry {
            r.check_statements(docs.len())?;
        }
        ns.validate_for_write()?;
        let mut out = WriteOutcome::default();
        let mut txn = self.begin();
        if let Err(error) = check_writable(txn.catalog(), ns) {
            // Every document fails (the first alone when ordered), as on mongod.
            for index in 0..docs.len() {
                out.errors.push(WriteError {
                    index,
                    error: error.clone(),
                });
                if ordered {
                    break;
                }
            }
            return Ok(out);
        }
        let meta = self.ensure_collection(&mut txn, ns)?;
        let validator = DocumentValidator::for_write(&meta, bypass_document_validation)?;
        let mut pending = PendingIndex::default();
        let part_limit = self.proposer().map(|_| REPLICATED_INSERT_PART_BYTES);
        let mut part_bytes = 0usize;
        let mut part_done = Done::default();
        for (i, doc) in docs.into_iter().enumerate() {
            let doc_bytes = doc.as_bytes().len();
            if part_limit.is_some_and(|limit| part_bytes > 0 && part_bytes + doc_bytes > limit) {
                // The part so far is one commit; the rest goes on in a new one.
                if let Some(r) = retry.as_deref_mut() {
                    r.record(&mut txn, &std::mem::take(&mut part_done));
                }
                txn.commit()?;
                txn = self.begin();
                pending = PendingIndex::default();
                part_bytes = 0;
            }
            part_bytes += doc_bytes;
            let inserted = match &validator {
                Some(v) => Document::try_from(doc.as_ref())
                    .map_err(|e| Error::bad_value(e.to_string()))
                    .and_then(|d| v.check_new(&d)),
                None => Ok(()),
            }
            .and_then(|_| self.insert_in(&mut txn, &meta, doc, &mut pending));
            match inserted {
                Ok(_) => {
                    out.n += 1;
                    if let Some(r) = retry.as_deref() {
                        part_done.stmts.push(r.stmt(i));
                        part_done.n += 1;
                    }
                }
                Err(error) => {
                    out.errors.push(WriteError { index: i, error });
                    if ordered {
                        break;
                    }
                }
            }
        }
        if let Some(r) = retry {
            r.record(&mut txn, &part_done);
        }
        out.committed = Some(txn.commit()?);
        Ok(out)
    }

    /// Adds one document to the transaction; returns its `_id` and its record key. The
    /// document's bytes go to storage and into the oplog entry as they are; a `Document`
    /// is built only when secondary indexes need key values.
    pub(crate) fn insert_in(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        raw: RawDocumentBuf,
        pending: &mut PendingIndex,
    ) -> Result<(Bson, Vec<u8>)> {
        let raw = prepare_new_raw(raw)?;
        check_stored_limits(&raw, true)?;
        let id_ref = raw
            .get("_id")
            .ok()
            .flatten()
            .expect("prepared documents have an _id");
        let id =
            Bson::try_from(id_ref.to_raw_bson()).map_err(|e| Error::bad_value(e.to_string()))?;
        if let Some(spec) = meta.timeseries() {
            return self.insert_measurement(txn, meta, spec, raw, id, pending);
        }
        let id_ks = keys::id_key(&id);
        let dkey = keys::doc_key(meta.id, &id_ks);
        if pending.ids.contains(&dkey)
            || (!pending.deleted_ids.contains(&dkey)
                && self
                    .store
                    .get(Space::Docs, &dkey)
                    .map_err(storage_err)?
                    .is_some())
        {
            return Err(duplicate_key_error(
                &meta.ns,
                "_id_",
                &doc! {"_id": 1},
                &doc! {"_id": id.clone()},
            ));
        }
        let mut index_keys = Vec::new();
        if !meta.indexes.is_empty() {
            let doc =
                Document::try_from(raw.as_ref()).map_err(|e| Error::bad_value(e.to_string()))?;
            let entries = self.index_entries_checked(meta, &doc, &id_ks, pending, &[])?;
            for (index_id, values_ks) in entries {
                let k = keys::index_entry_key(index_id, &values_ks, &id_ks);
                txn.batch().put(Space::Index, &k, &id_ks);
                index_keys.push(k);
                pending.added.insert((index_id, values_ks), id_ks.clone());
            }
        }
        // The document is stored once, in its oplog entry; the collection keeps a pointer
        // until the entry is trimmed (see `trim_oplog`) or the document is rewritten.
        let ts = meta
            .ns
            .with_full(|ns| txn.log_insert(ns, meta.uuid, &raw, &id_ref));
        if txn.collects_ops() {
            // Inside a transaction's applyOps entry: no pointer can name it, stored whole.
            txn.batch().put(Space::Docs, &dkey, raw.as_bytes());
        } else {
            txn.batch().put(Space::Docs, &dkey, &keys::doc_pointer(ts));
        }
        if meta.is_capped() {
            txn.touch_capped();
            self.capped_insert(
                txn,
                meta,
                ts,
                &id_ks,
                raw.as_bytes().len() as u64,
                index_keys,
            )?;
        }
        pending.ids.insert(dkey);
        Ok((id, id_ks))
    }

    /// Adds a measurement to a time-series collection: no unique `_id` (there is no `_id`
    /// index), its record key is the cluster time of its oplog entry, and it is stored
    /// inline (the oplog trim finds pointers by `_id`, which is not the key here).
    fn insert_measurement(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        spec: &Document,
        raw: RawDocumentBuf,
        id: Bson,
        pending: &mut PendingIndex,
    ) -> Result<(Bson, Vec<u8>)> {
        crate::catalog::timeseries::check_measurement(spec, &raw)?;
        // Index keys first, so a document that cannot be indexed fails before its oplog
        // entry is written (no unique index exists here: the record key is not needed).
        let entries = if meta.indexes.is_empty() {
            Vec::new()
        } else {
            let doc =
                Document::try_from(raw.as_ref()).map_err(|e| Error::bad_value(e.to_string()))?;
            self.index_entries_checked(meta, &doc, &[], pending, &[])?
        };
        let id_ref = raw
            .get("_id")
            .ok()
            .flatten()
            .expect("prepared documents have an _id");
        let ts = txn.log_insert(&meta.oplog_ns(), meta.uuid, &raw, &id_ref);
        let record = keys::record_key(ts).to_vec();
        for (index_id, values_ks) in entries {
            txn.batch().put(
                Space::Index,
                &keys::index_entry_key(index_id, &values_ks, &record),
                &record,
            );
        }
        txn.batch().put(
            Space::Docs,
            &keys::doc_key(meta.id, &record),
            raw.as_bytes(),
        );
        Ok((id, record))
    }

    /// The index entries `(index id, encoded key values)` of a document, after checking
    /// unique indexes against stored entries and the batch's own. `old` lists entries the
    /// document had before an update (they do not conflict with themselves).
    fn index_entries_checked(
        &self,
        meta: &CollMeta,
        doc: &Document,
        id_ks: &[u8],
        pending: &PendingIndex,
        old: &[(u32, Vec<u8>)],
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        let mut out = Vec::new();
        for index in &meta.indexes {
            if !index.covers(doc) {
                continue;
            }
            let (key_sets, _multikey) = index.keys(doc)?;
            for (values_ks, values) in encoded_keys(index, key_sets) {
                if index.unique
                    && !old.iter().any(|(i, v)| *i == index.id && *v == values_ks)
                    && self.unique_conflict(index, &values_ks, id_ks, pending)?
                {
                    let key_value: Document = index
                        .pattern
                        .fields
                        .iter()
                        .map(|(f, _)| f.clone())
                        .zip(values)
                        .collect();
                    return Err(duplicate_key_error(
                        &meta.ns,
                        &index.name,
                        &index.key,
                        &key_value,
                    ));
                }
                out.push((index.id, values_ks));
            }
        }
        Ok(out)
    }

    fn unique_conflict(
        &self,
        index: &IndexMeta,
        values_ks: &[u8],
        id_ks: &[u8],
        pending: &PendingIndex,
    ) -> Result<bool> {
        if let Some(other) = pending.added.get(&(index.id, values_ks.to_vec())) {
            if other != id_ks {
                return Ok(true);
            }
        }
        let mut prefix = keys::index_prefix(index.id).to_vec();
        prefix.extend_from_slice(values_ks);
        for item in self.store.scan_prefix(Space::Index, &prefix, false) {
            let (k, v) = item.map_err(storage_err)?;
            // A string key's encoding is a byte prefix of longer strings' ("a" of "a\0b"):
            // only an entry that is exactly these values followed by its _id is equal.
            if k.len() != prefix.len() + v.len() || k[prefix.len()..] != v[..] {
                continue;
            }
            if pending.removed.contains(&k[..]) {
                continue;
            }
            if &v[..] != id_ks {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The index entries of a stored document (for removing them).
    pub(crate) fn index_entries_of(&self, meta: &CollMeta, doc: &Document) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        for index in &meta.indexes {
            if !index.covers(doc) {
                continue;
            }
            if let Ok((key_sets, _)) = index.keys(doc) {
                for (values_ks, _) in encoded_keys(index, key_sets) {
                    out.push((index.id, values_ks));
                }
            }
        }
        out
    }

    /// Runs update operations; each is its own atomic batch, so later operations see earlier ones.
    pub fn update(
        &self,
        ns: &Namespace,
        ops: Vec<UpdateOp>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        self.update_recorded(ns, ops, ordered, None)
    }

    /// [`Self::update`], each statement's commit recording what it did for a
    /// retryable write (`retry`; see `write/retry.rs`).
    pub fn update_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<UpdateOp>,
        ordered: bool,
        mut retry: Option<&mut RetryWrite>,
    ) -> Result<WriteOutcome> {
        if let Some(r) = &retry {
            r.check_statements(ops.len())?;
        }
        Ok(run_statements(&ops, ordered, |i, op, out| {
            // A failed multi-document update may have committed documents before its
            // failure: the write concern waits for them too.
            let mut part = None;
            let done = self.update_op(ns, op, retry.as_deref_mut().map(|r| (r, i)), &mut part);
            if part.is_some() {
                out.committed = part;
            }
            let (n, modified, upserted, committed) = done?;
            out.n += n;
            out.n_modified += modified;
            if let Some(id) = upserted {
                out.upserted.push((i, id));
            }
            Ok(committed)
        }))
    }

    fn update_op(
        &self,
        ns: &Namespace,
        op: &UpdateOp,
        retry: Option<(&mut RetryWrite, usize)>,
        part: &mut Option<Committed>,
    ) -> Result<(u64, u64, Option<Bson>, Option<Committed>)> {
        // As mongod: a multi-document write is not retryable (a retry after a part was
        // committed would write that part twice), and drivers never ask.
        if op.multi && retry.is_some() {
            return Err(Error::invalid_options(
                "Cannot use (or request) retryable writes with multi=true",
            ));
        }
        // Commits the statement, with its record for a retryable write.
        let finish = |mut txn: Txn<'_>, n: u64, modified: u64, upserted: Option<Bson>| {
            if let Some((r, i)) = retry {
                let stmt = r.stmt(i);
                let done = Done {
                    stmts: vec![stmt],
                    n,
                    n_modified: modified,
                    upserted: upserted.iter().map(|id| (stmt, id.clone())).collect(),
                    fam: None,
                };
                r.record(&mut txn, &done);
            }
            let committed = txn.commit()?;
            Ok((n, modified, upserted, Some(committed)))
        };
        let (filter, mut vars) = crate::read::bind_let(&op.q, op.let_vars.as_ref())?;
        vars.collator = crate::read::find::operation_collator(
            self.collection(ns).as_deref(),
            op.collation.as_ref(),
        )?;
        let matcher = Matcher::for_query_with_collation(&filter, vars.collator.clone())?;
        let spec = UpdateSpec::parse(&op.u, op.array_filters.as_deref())?;
        if op.multi && matches!(spec.kind(), UpdateKind::Replacement) {
            return Err(Error::failed_to_parse(
                "multi update is not supported for replacement-style update",
            ));
        }
        if op.upsert || self.collection(ns).is_some() {
            ns.validate_for_write()?;
        }
        let mut txn = self.begin();
        check_writable(txn.catalog(), ns)?;
        let bypass = op.bypass_document_validation;
        let Some(meta) = txn.catalog().get(ns) else {
            if !op.upsert {
                return Ok((0, 0, None, None));
            }
            let meta = self.ensure_collection(&mut txn, ns)?;
            let validator = DocumentValidator::for_write(&meta, bypass)?;
            let (id, _, _) =
                self.upsert_in(&mut txn, &meta, &filter, &spec, &vars, validator.as_ref())?;
            return finish(txn, 1, 0, Some(id));
        };
        let validator = DocumentValidator::for_write(&meta, bypass)?;
        let mut meta = meta;
        let mut scan = MultiScan::new(&meta, &matcher, op.hint.as_ref(), op.multi)?;
        let mut pending = PendingIndex::default();
        let (mut n, mut modified) = (0, 0);
        // Documents changed in the commit under way.
        let mut in_part = 0u64;
        let failure = loop {
            let step = match scan.next_step(&self.store, meta.id, &matcher) {
                Ok(Some(step)) => step,
                Ok(None) => break None,
                Err(e) => break Some(e),
            };
            let mut failed = None;
            for (id_ks, old) in step {
                let matched = (&filter, &spec, &vars, validator.as_ref());
                match self.update_matched(&mut txn, &meta, matched, id_ks, old, &mut pending) {
                    Ok(changed) => {
                        n += 1;
                        modified += u64::from(changed);
                        in_part += u64::from(changed);
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if failed.is_some() {
                break failed;
            }
            if scan.part_full(&txn) {
                *part = Some(txn.commit()?);
                in_part = 0;
                txn = self.begin();
                meta = scan.goes_on(&txn, ns, &meta)?;
                pending = PendingIndex::default();
            }
        };
        if let Some(e) = failure {
            // As mongod, which writes each document of a multi-document update on its
            // own: the documents changed before the failure stay changed.
            if op.multi && in_part > 0 {
                *part = Some(txn.commit()?);
            }
            return Err(e);
        }
        if n == 0 {
            if op.upsert {
                let (id, _, _) =
                    self.upsert_in(&mut txn, &meta, &filter, &spec, &vars, validator.as_ref())?;
                return finish(txn, 1, 0, Some(id));
            }
            return Ok((0, 0, None, None));
        }
        finish(txn, n, modified, None)
    }

    /// Applies an update to one matching document: computed, checked against the
    /// collection's validator, then written; whether it changed. (`matched`: the
    /// filter, the update, its variables and the validator.)
    fn update_matched(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        (filter, spec, vars, validator): (
            &Document,
            &UpdateSpec,
            &Variables,
            Option<&DocumentValidator>,
        ),
        id_ks: Vec<u8>,
        old: Document,
        pending: &mut PendingIndex,
    ) -> Result<bool> {
        let checked = validator.filter(|v| v.checks_update_of(&old));
        let Some(change) = compute_update(filter, spec, &old, vars)? else {
            return Ok(false);
        };
        if let Some(v) = checked {
            v.check_updated(&change.new)?;
        }
        self.store_update(txn, meta, &id_ks, old, change, pending)?;
        Ok(true)
    }

    /// Applies `spec` to one stored document; returns the new document if it changed.
    #[allow(clippy::too_many_arguments)]
    fn update_in(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        filter: &Document,
        spec: &UpdateSpec,
        id_ks: Vec<u8>,
        old: Document,
        pending: &mut PendingIndex,
        vars: &Variables,
    ) -> Result<Option<Document>> {
        let Some(change) = compute_update(filter, spec, &old, vars)? else {
            return Ok(None);
        };
        self.store_update(txn, meta, &id_ks, old, change, pending)
            .map(Some)
    }

    /// Writes an updated document: its index entries, the document, its oplog entry
    /// (a diff, or the whole document for a replacement) and change-stream images.
    pub(crate) fn store_update(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        id_ks: &[u8],
        old: Document,
        change: ComputedUpdate,
        pending: &mut PendingIndex,
    ) -> Result<Document> {
        let ComputedUpdate {
            new,
            updated,
            removed,
            replaced,
        } = change;
        let id_ks = id_ks.to_vec();
        let old_id = old.get("_id").cloned().unwrap_or(Bson::Null);
        let bytes = encode_checked(&new, false)?;
        if let Some(spec) = meta.timeseries() {
            let raw = bson::RawDocument::from_bytes(&bytes)
                .map_err(|e| Error::internal(e.to_string()))?;
            crate::catalog::timeseries::check_measurement(spec, raw)?;
        }
        let old_entries = self.index_entries_of(meta, &old);
        let new_entries = self.index_entries_checked(meta, &new, &id_ks, pending, &old_entries)?;
        for e in old_entries.iter().filter(|e| !new_entries.contains(e)) {
            let k = keys::index_entry_key(e.0, &e.1, &id_ks);
            txn.batch().delete(Space::Index, &k);
            pending.entry_removed(e, k, &id_ks);
        }
        for e in new_entries.iter().filter(|e| !old_entries.contains(e)) {
            let k = keys::index_entry_key(e.0, &e.1, &id_ks);
            txn.batch().put(Space::Index, &k, &id_ks);
            pending.removed.remove(&k);
            pending.added.insert(e.clone(), id_ks.clone());
        }
        txn.batch()
            .put(Space::Docs, &keys::doc_key(meta.id, &id_ks), &bytes);
        if meta.is_capped() {
            txn.touch_capped();
            let old_len = RawDocumentBuf::from_document(&old)
                .map(|r| r.as_bytes().len())
                .unwrap_or(0);
            self.capped_resized(txn, meta, old_len as u64, bytes.len() as u64)?;
        }
        let o = if replaced {
            new.clone()
        } else {
            match crate::oplog::doc_diff(&old, &new) {
                Some(diff) => doc! {"$v": 2, "diff": diff},
                None => update_diff(&new, &updated, &removed),
            }
        };
        let ts = txn.log(OplogChange::update(meta.oplog_ns(), meta.uuid, old_id, o));
        if meta.images_enabled() {
            txn.put_image(ts, keys::ImageKind::Before, &old);
            txn.put_image(ts, keys::ImageKind::After, &new);
        }
        Ok(new)
    }

    /// Inserts the document an upsert creates from its query and update.
    fn upsert_in(
        &self,
        txn: &mut Txn<'_>,
        meta: &Arc<CollMeta>,
        query: &Document,
        spec: &UpdateSpec,
        vars: &Variables,
        validator: Option<&DocumentValidator>,
    ) -> Result<(Bson, Vec<u8>, RawDocumentBuf)> {
        let doc = upsert_document(query, spec, vars)?;
        if let Some(v) = validator {
            v.check_new(&doc)?;
        }
        let mut pending = PendingIndex::default();
        // Prepared here (its `_id` made and put first), so the document returned is
        // the one stored.
        let raw = prepare_new_raw(
            RawDocumentBuf::from_document(&doc).map_err(|e| Error::bad_value(e.to_string()))?,
        )?;
        let (id, key) = self.insert_in(txn, meta, raw.clone(), &mut pending)?;
        Ok((id, key, raw))
    }

    /// Runs delete operations; each is its own atomic batch.
    pub fn delete(
        &self,
        ns: &Namespace,
        ops: Vec<DeleteOp>,
        ordered: bool,
    ) -> Result<WriteOutcome> {
        self.delete_recorded(ns, ops, ordered, None)
    }

    /// [`Self::delete`], each statement's commit recording what it did for a
    /// retryable write (`retry`; see `write/retry.rs`).
    pub fn delete_recorded(
        &self,
        ns: &Namespace,
        ops: Vec<DeleteOp>,
        ordered: bool,
        mut retry: Option<&mut RetryWrite>,
    ) -> Result<WriteOutcome> {
        if let Some(r) = &retry {
            r.check_statements(ops.len())?;
        }
        Ok(run_statements(&ops, ordered, |i, op, out| {
            let mut part = None;
            let done = self.delete_op(ns, op, retry.as_deref_mut().map(|r| (r, i)), &mut part);
            if part.is_some() {
                out.committed = part;
            }
            let (n, committed) = done?;
            out.n += n;
            Ok(committed)
        }))
    }

    fn delete_op(
        &self,
        ns: &Namespace,
        op: &DeleteOp,
        retry: Option<(&mut RetryWrite, usize)>,
        part: &mut Option<Committed>,
    ) -> Result<(u64, Option<Committed>)> {
        check_delete_limit(op.limit)?;
        if op.limit == 0 && retry.is_some() {
            return Err(Error::invalid_options(
                "Cannot use (or request) retryable writes with limit=0",
            ));
        }
        let (filter, _) = crate::read::bind_let(&op.q, op.let_vars.as_ref())?;
        let collator = crate::read::find::operation_collator(
            self.collection(ns).as_deref(),
            op.collation.as_ref(),
        )?;
        let matcher = Matcher::for_query_with_collation(&filter, collator)?;
        let mut txn = self.begin();
        check_writable(txn.catalog(), ns)?;
        let Some(mut meta) = txn.catalog().get(ns) else {
            return Ok((0, None));
        };
        let mut scan = MultiScan::new(&meta, &matcher, op.hint.as_ref(), op.limit == 0)?;
        let mut n = 0;
        // Documents deleted in the commit under way.
        let mut in_part = 0u64;
        loop {
            let step = match scan.next_step(&self.store, meta.id, &matcher) {
                Ok(Some(step)) => step,
                Ok(None) => break,
                Err(e) => {
                    // An interrupted deleteMany keeps what it deleted, as mongod's.
                    if op.limit == 0 && in_part > 0 {
                        *part = Some(txn.commit()?);
                    }
                    return Err(e);
                }
            };
            for (id_ks, doc) in step {
                self.delete_in(&mut txn, &meta, &id_ks, &doc, None);
                n += 1;
                in_part += 1;
            }
            if scan.part_full(&txn) {
                *part = Some(txn.commit()?);
                in_part = 0;
                txn = self.begin();
                meta = scan.goes_on(&txn, ns, &meta)?;
            }
        }
        if n == 0 {
            return Ok((0, None));
        }
        if let Some((r, i)) = retry {
            let done = Done {
                stmts: vec![r.stmt(i)],
                n,
                ..Done::default()
            };
            r.record(&mut txn, &done);
        }
        Ok((n, Some(txn.commit()?)))
    }

    /// Deletes a document in `txn`. `pending`: the batch's own index changes, for a batch
    /// whose later writes may take what this one frees (a transaction's replay); None
    /// where no write follows in the batch.
    pub(crate) fn delete_in(
        &self,
        txn: &mut Txn<'_>,
        meta: &CollMeta,
        id_ks: &[u8],
        doc: &Document,
        mut pending: Option<&mut PendingIndex>,
    ) {
        for entry in self.index_entries_of(meta, doc) {
            let key = keys::index_entry_key(entry.0, &entry.1, id_ks);
            txn.batch().delete(Space::Index, &key);
            if let Some(p) = pending.as_deref_mut() {
                p.entry_removed(&entry, key, id_ks);
            }
        }
        let dkey = keys::doc_key(meta.id, id_ks);
        txn.batch().delete(Space::Docs, &dkey);
        if let Some(p) = pending {
            p.ids.remove(&dkey);
            p.deleted_ids.insert(dkey);
        }
        if meta.is_capped() {
            let len = RawDocumentBuf::from_document(doc)
                .map(|r| r.as_bytes().len())
                .unwrap_or(0);
            // A failed reload of the totals is retried on the next use of the collection.
            let _ = self.capped_deleted(meta, len as u64);
        }
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let ts = txn.log(OplogChange::delete(meta.oplog_ns(), meta.uuid, id));
        if meta.images_enabled() {
            txn.put_image(ts, keys::ImageKind::Before, doc);
        }
    }
}

/// Matching documents as a write takes them: the `_id` key and the document.
type Matches = Vec<(Vec<u8>, Document)>;

/// The scan of an update or delete: its matches a step at a time (a multi-document
/// write) or the first one only, and when the write's commit is full
/// ([`MULTI_WRITE_PART_BYTES`]).
struct MultiScan {
    scan: Scan,
    /// Every match (`updateMany`, `deleteMany`), or the first.
    all: bool,
    /// Matches handed out so far. (A document a committed part moved ahead of an
    /// index scan is not met twice: the scan skips `_id`s it has returned.)
    taken: u64,
    /// The matches read for the next step.
    step: Matches,
}

impl MultiScan {
    fn new(meta: &CollMeta, matcher: &Matcher, hint: Option<&Bson>, all: bool) -> Result<Self> {
        let plan = read::plan(meta, matcher, None, hint)?;
        Ok(MultiScan {
            scan: Scan::new(plan.access),
            all,
            taken: 0,
            step: Vec::new(),
        })
    }

    /// The next matches to write (None when there are no more).
    fn next_step(
        &mut self,
        store: &tailstream_storage::Store,
        coll_id: u32,
        matcher: &Matcher,
    ) -> Result<Option<Matches>> {
        let want = if self.all { MULTI_WRITE_STEP_DOCS } else { 1 };
        while self.step.is_empty() && !self.scan.done && (self.all || self.taken == 0) {
            self.scan
                .next_batch(store, coll_id, matcher, want, &mut self.step)?;
        }
        if self.step.is_empty() {
            return Ok(None);
        }
        self.taken += self.step.len() as u64;
        Ok(Some(std::mem::take(&mut self.step)))
    }

    /// Whether the write should commit what it has done before it goes on.
    fn part_full(&self, txn: &Txn<'_>) -> bool {
        self.all && !self.scan.done && txn.batch_bytes() >= MULTI_WRITE_PART_BYTES
    }

    /// After a part's commit, in the next commit: the collection as it is now, or
    /// QueryPlanKilled (mongod's error) when it was dropped or the index the scan walks
    /// was, by another client between the two commits.
    fn goes_on(&self, txn: &Txn<'_>, ns: &Namespace, before: &CollMeta) -> Result<Arc<CollMeta>> {
        let killed = |why: String| {
            Error::new(
                codes::QUERY_PLAN_KILLED,
                format!("PlanExecutor error during a multi-document write :: caused by :: {why}"),
            )
        };
        let now = match txn.catalog().get(ns) {
            Some(now) if now.uuid == before.uuid => now,
            _ => return Err(killed("collection dropped".into())),
        };
        if let read::Access::IndexScan { index, .. } = &self.scan.access {
            if !now.indexes.iter().any(|i| i.id == index.id) {
                return Err(killed(format!("index '{}' dropped", index.name)));
            }
        }
        Ok(now)
    }
}

/// The document an upsert inserts, made from its query's equalities and the update.
pub(crate) fn upsert_document(
    query: &Document,
    spec: &UpdateSpec,
    vars: &Variables,
) -> Result<Document> {
    let seed = upsert_seed(query)?;
    let conditions = QueryConditions {
        collator: vars.collator.clone(),
    };
    let insert = ApplyContext {
        is_insert: true,
        positional: None,
        now: bson::DateTime::now(),
        matcher: &conditions,
        collator: vars.collator.as_deref(),
    };
    let doc = match spec.kind() {
        UpdateKind::Replacement => {
            let mut d = Document::new();
            spec.apply(&mut d, &insert)?;
            if !d.contains_key("_id") {
                if let Some(id) = seed.get("_id") {
                    let mut with_id = doc! {"_id": id.clone()};
                    with_id.extend(d);
                    d = with_id;
                }
            }
            d
        }
        UpdateKind::Pipeline => run_pipeline_update(spec, &seed, vars)?,
        UpdateKind::Operators => {
            let mut d = seed.clone();
            spec.apply(&mut d, &insert)?;
            if seed.get("_id").is_some() && d.get("_id") != seed.get("_id") {
                return Err(Error::new(
                    codes::IMMUTABLE_FIELD,
                    "Performing an update on the path '_id' would modify the immutable field '_id'",
                ));
            }
            d
        }
    };
    Ok(doc)
}

/// A document after an update, with what changed (for the oplog's diff).
pub(crate) struct ComputedUpdate {
    pub new: Document,
    pub updated: Document,
    pub removed: Vec<String>,
    /// A replacement document: the oplog entry holds the whole new document.
    pub replaced: bool,
}

/// Applies an update (operators, replacement or pipeline) to `old`; None when nothing
/// changes. Fails if the update would change `_id`.
pub(crate) fn compute_update(
    filter: &Document,
    spec: &UpdateSpec,
    old: &Document,
    vars: &Variables,
) -> Result<Option<ComputedUpdate>> {
    let mut new = old.clone();
    let (updated, removed, replaced) = match spec.kind() {
        UpdateKind::Pipeline => {
            new = run_pipeline_update(spec, old, vars)?;
            let (u, r) = top_level_diff(old, &new);
            (u, r, false)
        }
        kind => {
            let conditions = QueryConditions {
                collator: vars.collator.clone(),
            };
            let ctx = ApplyContext {
                is_insert: false,
                positional: positional_index(filter, old, &conditions),
                now: bson::DateTime::now(),
                matcher: &conditions,
                collator: vars.collator.as_deref(),
            };
            let outcome = spec.apply(&mut new, &ctx)?;
            if !outcome.modified {
                return Ok(None);
            }
            (
                outcome.updated_fields,
                outcome.removed_fields,
                matches!(kind, UpdateKind::Replacement),
            )
        }
    };
    if &new == old {
        return Ok(None);
    }
    let old_id = old.get("_id").cloned().unwrap_or(Bson::Null);
    if new.get("_id") != Some(&old_id) {
        return Err(Error::new(
            codes::IMMUTABLE_FIELD,
            format!(
                "After applying the update, the (immutable) field '_id' was found to have been altered to _id: {}",
                new.get("_id").map(value_to_string).unwrap_or_default()
            ),
        ));
    }
    Ok(Some(ComputedUpdate {
        new,
        updated,
        removed,
        replaced,
    }))
}

/// Whether users may write documents to `ns`: not to a view (mongod's error), and not
/// to `system.views` directly (view definitions change through create, collMod and
/// drop here, which keep the catalog's parsed views in step).
pub(crate) fn check_writable(catalog: &crate::catalog::Catalog, ns: &Namespace) -> Result<()> {
    if catalog.view(ns).is_some() {
        return Err(crate::catalog::views::not_a_collection(ns));
    }
    if ns.coll == crate::catalog::views::SYSTEM_VIEWS {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!(
                "cannot write to '{}' directly: views are changed with create, collMod and drop",
                ns.full()
            ),
        ));
    }
    Ok(())
}

/// A delete statement's `limit`: 0 (every match) or 1 (the first).
pub(crate) fn check_delete_limit(limit: i64) -> Result<()> {
    if limit != 0 && limit != 1 {
        return Err(Error::failed_to_parse(format!(
            "The limit field in delete objects must be 0 or 1. Got {limit}"
        )));
    }
    Ok(())
}

/// Runs a write command's statements in order; a failed statement is a write error,
/// and an ordered command stops at the first one.
pub(crate) fn run_statements<T>(
    statements: &[T],
    ordered: bool,
    mut apply: impl FnMut(usize, &T, &mut WriteOutcome) -> Result<Option<Committed>>,
) -> WriteOutcome {
    let mut out = WriteOutcome::default();
    for (i, statement) in statements.iter().enumerate() {
        match apply(i, statement, &mut out) {
            Ok(committed) => {
                if committed.is_some() {
                    out.committed = committed;
                }
            }
            Err(error) => {
                out.errors.push(WriteError { index: i, error });
                if ordered {
                    break;
                }
            }
        }
    }
    out
}

/// Encodes an index key's values with the index's per-field directions (strings by
/// their comparison keys when the index has a collation).
pub(crate) fn encode_key(index: &IndexMeta, values: &[Bson]) -> Vec<u8> {
    let mut k = KeyStringBuilder::new();
    let coll = index.collator();
    for (v, (_, desc)) in values.iter().zip(&index.pattern.fields) {
        k.append_collated(v, *desc, coll);
    }
    k.into_bytes()
}

/// The distinct encoded keys of one document in an index: key sets that differ only in
/// strings equal under the index's collation make one entry.
pub(crate) fn encoded_keys(
    index: &IndexMeta,
    key_sets: Vec<Vec<Bson>>,
) -> Vec<(Vec<u8>, Vec<Bson>)> {
    let mut out: Vec<(Vec<u8>, Vec<Bson>)> = Vec::with_capacity(key_sets.len());
    for values in key_sets {
        let ks = encode_key(index, &values);
        if index.collator.is_some() && out.iter().any(|(k, _)| *k == ks) {
            continue;
        }
        out.push((ks, values));
    }
    out
}

/// Gives a new document an `_id` (an ObjectId, first) if it has none, and checks its `_id`.
pub fn prepare_new_document(doc: Document) -> Result<Document> {
    let doc = match doc.get("_id") {
        None => {
            let mut d = Document::new();
            d.insert("_id", bson::oid::ObjectId::new());
            d.extend(doc);
            d
        }
        Some(_) if doc.keys().next().map(|k| k != "_id").unwrap_or(false) => {
            // mongod stores `_id` first.
            let mut d = Document::new();
            let mut rest = doc;
            let id = rest.remove("_id").unwrap();
            d.insert("_id", id);
            d.extend(rest);
            d
        }
        Some(_) => doc,
    };
    match doc.get("_id") {
        Some(Bson::Array(_)) => Err(Error::new(
            codes::INVALID_ID_FIELD,
            "The '_id' value cannot be of type array",
        )),
        Some(Bson::RegularExpression(_)) => Err(Error::new(
            codes::INVALID_ID_FIELD,
            "can't use a regex for _id",
        )),
        Some(Bson::Undefined) => Err(Error::new(
            codes::INVALID_ID_FIELD,
            "can't use a undefined for _id",
        )),
        Some(Bson::Document(d)) if d.keys().any(|k| k.starts_with('$')) => Err(Error::new(
            codes::DOLLAR_PREFIXED_FIELD_NAME,
            format!(
                "_id fields may not contain '$'-prefixed fields: {} is not valid for storage.",
                d.keys().find(|k| k.starts_with('$')).unwrap()
            ),
        )),
        _ => Ok(doc),
    }
}

/// Gives a new raw document an `_id` (an ObjectId, first) if it has none, moves an
/// existing `_id` to the front, and checks its type.
pub(crate) fn prepare_new_raw(raw: RawDocumentBuf) -> Result<RawDocumentBuf> {
    use bson::raw::RawBsonRef;
    let first_is_id = matches!(raw.iter().next(), Some(Ok((k, _))) if k == "_id");
    let id = raw
        .get("_id")
        .map_err(|e| Error::bad_value(e.to_string()))?;
    match id {
        Some(RawBsonRef::Array(_)) => {
            return Err(Error::new(
                codes::INVALID_ID_FIELD,
                "The '_id' value cannot be of type array",
            ))
        }
        Some(RawBsonRef::RegularExpression(_)) => {
            return Err(Error::new(
                codes::INVALID_ID_FIELD,
                "can't use a regex for _id",
            ))
        }
        Some(RawBsonRef::Undefined) => {
            return Err(Error::new(
                codes::INVALID_ID_FIELD,
                "can't use a undefined for _id",
            ))
        }
        Some(RawBsonRef::Document(d)) => {
            if let Some(Ok((k, _))) = d
                .iter()
                .find(|e| matches!(e, Ok((k, _)) if k.starts_with('$')))
            {
                return Err(Error::new(
                    codes::DOLLAR_PREFIXED_FIELD_NAME,
                    format!("_id fields may not contain '$'-prefixed fields: {k} is not valid for storage."),
                ));
            }
        }
        _ => {}
    }
    if first_is_id {
        return Ok(raw);
    }
    // mongod stores `_id` first.
    let mut out = RawDocumentBuf::new();
    let generated;
    match id {
        Some(v) => out.append_ref("_id", v),
        None => {
            generated = bson::oid::ObjectId::new();
            out.append("_id", generated);
        }
    }
    for elem in raw.iter() {
        let (k, v) = elem.map_err(|e| Error::bad_value(e.to_string()))?;
        if k != "_id" {
            out.append_ref(k, v);
        }
    }
    Ok(out)
}

/// Size and nesting limits of a stored document, checked on its raw bytes.
pub(crate) fn check_stored_limits(raw: &bson::RawDocument, insert: bool) -> Result<()> {
    let len = raw.as_bytes().len();
    if len > MAX_DOCUMENT_SIZE {
        return Err(if insert {
            Error::bad_value(format!(
                "object to insert too large. size in bytes: {len}, max size: {MAX_DOCUMENT_SIZE}"
            ))
        } else {
            Error::new(
                17419,
                format!("Resulting document after update is larger than {MAX_DOCUMENT_SIZE}"),
            )
        });
    }
    if len >= SMALLEST_TOO_DEEP && raw_depth(raw, 1) > MAX_NESTING_DEPTH {
        return Err(Error::new(
            codes::OVERFLOW,
            format!("Document exceeds maximum nesting depth of {MAX_NESTING_DEPTH}"),
        ));
    }
    Ok(())
}

/// The smallest document nested deeper than [`MAX_NESTING_DEPTH`]: the empty document
/// (5 bytes) inside `MAX_NESTING_DEPTH` levels of the smallest wrapper (an element with an
/// empty key holding the next level: its type byte, the key's NUL, and the level's own
/// length and trailing NUL, 7 bytes; an array level is at least as large). A smaller
/// document cannot be too deep, so the walk is skipped (it was 6% of a small insert).
const SMALLEST_TOO_DEEP: usize = 5 + 7 * MAX_NESTING_DEPTH;

/// Nesting depth of a raw document (1 for a flat one); stops descending once past the limit.
fn raw_depth(doc: &bson::RawDocument, depth: usize) -> usize {
    let mut max = depth;
    for (_, v) in doc.iter().flatten() {
        max = max.max(raw_value_depth(v, depth));
        if max > MAX_NESTING_DEPTH {
            break;
        }
    }
    max
}

fn raw_value_depth(v: bson::raw::RawBsonRef<'_>, depth: usize) -> usize {
    use bson::raw::RawBsonRef;
    match v {
        RawBsonRef::Document(d) => raw_depth(d, depth + 1),
        RawBsonRef::Array(a) => {
            let mut max = depth + 1;
            for e in a.into_iter().flatten() {
                max = max.max(raw_value_depth(e, depth + 1));
                if max > MAX_NESTING_DEPTH {
                    break;
                }
            }
            max
        }
        _ => depth,
    }
}

/// Serialises a document for storage, enforcing the size and depth limits.
pub(crate) fn encode_checked(doc: &Document, insert: bool) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(256);
    doc.to_writer(&mut bytes)
        .map_err(|e| Error::bad_value(format!("cannot serialise document: {e}")))?;
    if bytes.len() > MAX_DOCUMENT_SIZE {
        // mongod: BadValue from fixDocumentForInsert, 17419 from the update path.
        return Err(if insert {
            Error::bad_value(format!(
                "object to insert too large. size in bytes: {}, max size: {}",
                bytes.len(),
                MAX_DOCUMENT_SIZE
            ))
        } else {
            Error::new(
                17419,
                format!("Resulting document after update is larger than {MAX_DOCUMENT_SIZE}"),
            )
        });
    }
    if tailstream_query::path::nesting_depth(doc) > MAX_NESTING_DEPTH {
        return Err(Error::new(
            codes::OVERFLOW,
            format!("Document exceeds maximum nesting depth of {MAX_NESTING_DEPTH}"),
        ));
    }
    Ok(bytes)
}

pub(crate) fn duplicate_key_error(
    ns: &Namespace,
    index_name: &str,
    key_pattern: &Document,
    key_value: &Document,
) -> Error {
    Error::new(
        codes::DUPLICATE_KEY,
        format!(
            "E11000 duplicate key error collection: {} index: {} dup key: {}",
            ns.full(),
            index_name,
            doc_to_string(key_value)
        ),
    )
    .with_info(doc! {"keyPattern": key_pattern.clone(), "keyValue": key_value.clone()})
}

/// The document an upsert starts from: the query's equality conditions
/// (`{a: 1}`, `{a: {$eq: 1}}`, inside `$and`), with dotted paths expanded.
fn upsert_seed(query: &Document) -> Result<Document> {
    let mut seed = Document::new();
    collect_equalities(query, &mut seed)?;
    Ok(seed)
}

fn collect_equalities(query: &Document, seed: &mut Document) -> Result<()> {
    for (k, v) in query {
        if k == "$and" {
            if let Bson::Array(items) = v {
                for item in items {
                    if let Bson::Document(d) = item {
                        collect_equalities(d, seed)?;
                    }
                }
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let value = match v {
            Bson::Document(d) if d.keys().next().map(|f| f.starts_with('$')).unwrap_or(false) => {
                match d.get("$eq") {
                    Some(e) if d.len() == 1 => e.clone(),
                    _ => continue,
                }
            }
            Bson::RegularExpression(_) => continue,
            other => other.clone(),
        };
        set_path(seed, k, value)?;
    }
    Ok(())
}

fn set_path(doc: &mut Document, path: &str, value: Bson) -> Result<()> {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
            Ok(())
        }
        Some((head, rest)) => {
            let entry = doc
                .entry(head.to_string())
                .or_insert_with(|| Bson::Document(Document::new()));
            match entry {
                Bson::Document(d) => set_path(d, rest, value),
                _ => Err(Error::new(
                    codes::NOT_SINGLE_VALUE_FIELD,
                    format!("cannot infer query fields to set, path '{path}' is matched twice"),
                )),
            }
        }
    }
}

/// The position of the first array element the query matched, for the positional `$` operator.
pub(crate) fn positional_index(
    filter: &Document,
    doc: &Document,
    conditions: &QueryConditions,
) -> Option<usize> {
    for (k, cond) in filter {
        if k == "$and" {
            if let Bson::Array(items) = cond {
                for item in items {
                    if let Bson::Document(d) = item {
                        if let Some(i) = positional_index(d, doc, conditions) {
                            return Some(i);
                        }
                    }
                }
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        let parts: Vec<&str> = k.split('.').collect();
        for plen in 1..=parts.len() {
            let prefix = parts[..plen].join(".");
            let Some(Bson::Array(arr)) = get_path(doc, &prefix) else {
                continue;
            };
            let rest = parts[plen..].join(".");
            for (i, e) in arr.iter().enumerate() {
                let ok = if rest.is_empty() {
                    match cond {
                        Bson::Document(c) if c.contains_key("$elemMatch") => conditions
                            .matches_value(
                                c.get_document("$elemMatch").unwrap_or(&Document::new()),
                                e,
                            )
                            .unwrap_or(false),
                        Bson::Document(c)
                            if c.keys().next().map(|f| f.starts_with('$')).unwrap_or(false) =>
                        {
                            conditions.matches_value(c, e).unwrap_or(false)
                        }
                        other => tailstream_query::compare::bson_eq_with(
                            other,
                            e,
                            conditions.collator.as_deref(),
                        ),
                    }
                } else {
                    match e {
                        Bson::Document(ed) => conditions
                            .matcher(&doc! {rest.clone(): cond.clone()})
                            .map(|m| m.matches(ed))
                            .unwrap_or(false),
                        _ => false,
                    }
                };
                if ok {
                    return Some(i);
                }
            }
        }
    }
    None
}

fn run_pipeline_update(spec: &UpdateSpec, doc: &Document, vars: &Variables) -> Result<Document> {
    let stages = spec
        .pipeline()
        .ok_or_else(|| Error::internal("pipeline update without stages"))?;
    let pipeline = tailstream_query::pipeline::Pipeline::parse(stages, "")?;
    let input = vec![Ok(doc.clone())];
    let out = pipeline.run(Box::new(input.into_iter()), &NoCollections, vars)?;
    let mut new = out
        .into_iter()
        .next()
        .ok_or_else(|| Error::bad_value("the update pipeline removed the document"))?;
    // A pipeline that drops `_id` (e.g. $replaceWith) keeps the document's `_id`, first.
    if let (None, Some(id)) = (new.get("_id"), doc.get("_id")) {
        let mut with_id = doc! {"_id": id.clone()};
        with_id.extend(new);
        new = with_id;
    }
    Ok(new)
}

struct NoCollections;

impl tailstream_query::pipeline::CollectionSource for NoCollections {
    fn scan(&self, _db: &str, _coll: &str) -> Result<Vec<Document>> {
        Err(Error::new(
            codes::ILLEGAL_OPERATION,
            "stages reading other collections are not allowed in an update pipeline",
        ))
    }
}

/// Top-level fields changed and removed between two versions of a document.
fn top_level_diff(old: &Document, new: &Document) -> (Document, Vec<String>) {
    let mut updated = Document::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            updated.insert(k.clone(), v.clone());
        }
    }
    let removed = old
        .keys()
        .filter(|k| !new.contains_key(k.as_str()))
        .cloned()
        .collect();
    (updated, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use crate::read::find::FindRequest;

    /// Documents of `engine_with_padded`: more than a part's worth of bytes.
    const PADDED_DOCS: i32 = 3_000;
    const PAD_BYTES: usize = 4_096;

    fn ns_m() -> Namespace {
        Namespace::new("db", "m")
    }

    /// `db.m` with `{_id: i, x: i, pad}` for i below [`PADDED_DOCS`], `x` indexed.
    fn engine_with_padded() -> TestEngine {
        let e = TestEngine::open();
        let pad = "p".repeat(PAD_BYTES);
        let docs = (0..PADDED_DOCS)
            .map(|i| doc! {"_id": i, "x": i, "pad": pad.clone()})
            .collect();
        e.insert_documents(&ns_m(), docs, true).unwrap();
        e.create_indexes(&ns_m(), &[doc! {"key": {"x": 1}, "name": "x_1"}])
            .unwrap();
        assert!(PADDED_DOCS as usize * PAD_BYTES > MULTI_WRITE_PART_BYTES);
        e
    }

    #[test]
    fn an_update_many_commits_in_parts_and_writes_each_match_once() {
        let e = engine_with_padded();
        let before = e.durability.last_committed();
        // Walking the index on `x` while moving every entry ahead of the scan: the
        // entries a committed part moved (those still in the range: the first
        // thousand) must not be updated again.
        let op = UpdateOp {
            q: doc! {"x": {"$gte": 0, "$lt": 6_000}},
            u: Bson::Document(doc! {"$inc": {"x": 5_000, "n": 1}}),
            multi: true,
            hint: Some(Bson::String("x_1".into())),
            ..Default::default()
        };
        let out = e.update(&ns_m(), vec![op], true).unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!((out.n, out.n_modified), (3_000, 3_000));
        let commits = e.durability.last_committed() - before;
        assert!(commits >= 2, "{commits} commit(s): not in parts");
        let every = FindRequest {
            single_batch: true,
            batch_size: Some(i64::from(PADDED_DOCS)),
            ..Default::default()
        };
        let docs = e.find(&ns_m(), every).unwrap().docs;
        assert_eq!(docs.len(), PADDED_DOCS as usize);
        for d in docs {
            let id = d.get_i32("_id").unwrap();
            assert_eq!(d.get_i32("n"), Ok(1), "document {id}");
            assert_eq!(d.get_i32("x"), Ok(id + 5_000), "document {id}");
        }
    }

    #[test]
    fn a_delete_many_commits_in_parts() {
        // A delete writes a few hundred bytes a document (keys and its oplog entry):
        // enough small documents for more than one part.
        const SMALL_DOCS: i32 = 100_000;
        let e = TestEngine::open();
        let docs = (0..SMALL_DOCS).map(|i| doc! {"_id": i, "x": i}).collect();
        e.insert_documents(&ns_m(), docs, true).unwrap();
        e.create_indexes(&ns_m(), &[doc! {"key": {"x": 1}, "name": "x_1"}])
            .unwrap();
        let before = e.durability.last_committed();
        let op = DeleteOp {
            q: doc! {"x": {"$gte": 1}},
            limit: 0,
            ..Default::default()
        };
        let out = e.delete(&ns_m(), vec![op], true).unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(out.n, SMALL_DOCS as u64 - 1);
        assert!(e.durability.last_committed() - before >= 2, "not in parts");
        let docs = e.find(&ns_m(), FindRequest::default()).unwrap().docs;
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].get_i32("_id"), Ok(0));
    }

    #[test]
    fn a_multi_write_stops_when_its_collection_or_index_went_between_parts() {
        let e = engine_with_padded();
        let meta = e.collection(&ns_m()).unwrap();
        let matcher = Matcher::for_query(&doc! {"x": {"$gte": 0}}).unwrap();
        let hint = Bson::String("x_1".into());
        let scan = MultiScan::new(&meta, &matcher, Some(&hint), true).unwrap();
        {
            let txn = e.begin();
            assert!(
                scan.goes_on(&txn, &ns_m(), &meta).is_ok(),
                "nothing changed"
            );
        }
        e.drop_indexes(&ns_m(), &Bson::String("x_1".into()))
            .unwrap();
        {
            let txn = e.begin();
            let err = scan.goes_on(&txn, &ns_m(), &meta).unwrap_err();
            assert_eq!(err.code, codes::QUERY_PLAN_KILLED);
            assert!(
                err.message.contains("index 'x_1' dropped"),
                "{}",
                err.message
            );
        }
        e.drop_collection(&ns_m()).unwrap();
        let txn = e.begin();
        let err = scan.goes_on(&txn, &ns_m(), &meta).unwrap_err();
        assert_eq!(err.code_name(), "QueryPlanKilled");
        assert!(
            err.message.contains("collection dropped"),
            "{}",
            err.message
        );
    }

    fn nested(levels: usize) -> Document {
        let mut d = doc! {"x": 1};
        for _ in 1..levels {
            d = doc! {"a": d};
        }
        d
    }

    #[test]
    fn the_smallest_too_deep_document_is_that_size_and_refused() {
        // {"": {"": ... {}}}: MAX_NESTING_DEPTH + 1 levels of documents.
        let mut deepest = doc! {};
        for _ in 0..MAX_NESTING_DEPTH {
            deepest = doc! {"": deepest};
        }
        let raw = RawDocumentBuf::from_document(&deepest).unwrap();
        assert_eq!(raw.as_bytes().len(), SMALLEST_TOO_DEEP);
        assert_eq!(raw_depth(&raw, 1), MAX_NESTING_DEPTH + 1);
        assert!(check_stored_limits(&raw, true).is_err());
        // One level less is allowed, and so is the same depth with arrays (larger).
        let ok = RawDocumentBuf::from_document(deepest.get_document("").unwrap()).unwrap();
        assert!(check_stored_limits(&ok, true).is_ok());
        let mut arrays = bson::Bson::Document(doc! {});
        for _ in 0..MAX_NESTING_DEPTH {
            arrays = bson::Bson::Array(vec![arrays]);
        }
        let raw = RawDocumentBuf::from_document(&doc! {"a": arrays}).unwrap();
        assert!(raw.as_bytes().len() > SMALLEST_TOO_DEEP);
        assert!(check_stored_limits(&raw, true).is_err());
    }

    #[test]
    fn raw_depth_counts_documents_and_arrays() {
        let raw = RawDocumentBuf::from_document(&doc! {"a": {"b": [1, {"c": 1}]}}).unwrap();
        assert_eq!(raw_depth(&raw, 1), 4);
        assert_eq!(
            raw_depth(&RawDocumentBuf::from_document(&doc! {"a": 1}).unwrap(), 1),
            1
        );
    }

    #[test]
    fn nesting_limit_is_enforced_on_raw_documents() {
        let ok = RawDocumentBuf::from_document(&nested(MAX_NESTING_DEPTH)).unwrap();
        assert!(check_stored_limits(&ok, true).is_ok());
        let deep =
            RawDocumentBuf::from_document(&doc! {"first": 1, "deep": nested(MAX_NESTING_DEPTH)})
                .unwrap();
        assert_eq!(
            check_stored_limits(&deep, true).unwrap_err().code,
            codes::OVERFLOW
        );
    }

    #[test]
    fn raw_documents_get_an_id_first() {
        let raw = prepare_new_raw(RawDocumentBuf::from_document(&doc! {"a": 1}).unwrap()).unwrap();
        let keys: Vec<String> = raw.iter().map(|e| e.unwrap().0.to_string()).collect();
        assert_eq!(keys, vec!["_id", "a"]);
        let moved =
            prepare_new_raw(RawDocumentBuf::from_document(&doc! {"a": 1, "_id": 7}).unwrap())
                .unwrap();
        assert_eq!(
            Document::try_from(moved.as_ref()).unwrap(),
            doc! {"_id": 7, "a": 1}
        );
        let arr = prepare_new_raw(RawDocumentBuf::from_document(&doc! {"_id": [1]}).unwrap());
        assert_eq!(arr.unwrap_err().code, codes::INVALID_ID_FIELD);
    }
}

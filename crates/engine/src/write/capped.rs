//! Capped collections: a fixed-size collection that keeps insertion order and drops
//! its oldest documents when `size` (bytes) or `max` (documents) is exceeded.
//!
//! Insertion order lives in the `Natural` space (collection id ++ insert time ->
//! `_id`). Totals and the oldest live position ("head") are kept in memory, loaded
//! on first use, so evicting the oldest document never searches through the
//! tombstones of earlier evictions. Entries whose document was deleted by a user
//! stay until eviction reaches them ("dangling"); readers skip them.

use crate::catalog::CollMeta;
use crate::core::time::ClusterTime;
use crate::read;
use crate::{core::keys, core::storage_err, oplog::txn::Txn, Engine};
use bson::Document;
use std::collections::VecDeque;

use tailstream_query::error::Result;
use tailstream_storage::{prefix_successor, Space};

/// Live totals of one capped collection.
#[derive(Debug, Clone, Default)]
pub struct CappedState {
    pub bytes: u64,
    pub count: u64,
    /// Natural keys below this are gone: scans and evictions start here.
    pub head: Vec<u8>,
    /// Inserts of the transaction being built (not yet visible in storage), oldest first.
    pending: VecDeque<PendingInsert>,
    /// Empty when the totals loaded: the eviction mark is set just below the next
    /// insert (see `core::evicted`).
    mark_at_next_insert: bool,
}

#[derive(Debug, Clone)]
struct PendingInsert {
    natural_key: Vec<u8>,
    id_ks: Vec<u8>,
    size: u64,
    /// The `Index` keys the insert wrote, to undo them if it is evicted in the same batch.
    index_keys: Vec<Vec<u8>>,
}

/// The limits of a capped collection from its options.
pub fn limits(meta: &CollMeta) -> (u64, u64) {
    let size = meta
        .options
        .get("size")
        .and_then(crate::read::find::as_i64)
        .unwrap_or(0)
        .max(0) as u64;
    let max = meta
        .options
        .get("max")
        .and_then(crate::read::find::as_i64)
        .unwrap_or(0)
        .max(0) as u64;
    (size, max)
}

impl Engine {
    /// The capped state of a collection, computed from storage on first use.
    fn capped_state<'a>(
        &self,
        states: &'a mut ahash::AHashMap<u32, CappedState>,
        meta: &CollMeta,
    ) -> Result<&'a mut CappedState> {
        if let std::collections::hash_map::Entry::Vacant(e) = states.entry(meta.id) {
            let prefix = meta.id.to_be_bytes();
            let mut st = CappedState {
                head: prefix.to_vec(),
                ..Default::default()
            };
            // What changed before is not known: only later inserts count as unmodified.
            self.capped_modified
                .lock()
                .entry(meta.id)
                .or_insert_with(|| self.last_commit_time());
            let mut first = None;
            for item in self.store.scan_prefix(Space::Natural, &prefix, false) {
                let (k, id_ks) = item.map_err(storage_err)?;
                first = first.or_else(|| Some(keys::natural_key_time(&k)));
                if let Some(size) = self.stored_size(meta.id, &id_ks)? {
                    st.count += 1;
                    st.bytes += size;
                }
            }
            // Natural keys go oldest first: every one gone is below the first left.
            match first {
                Some(Some(ts)) => self.evicted.raise(meta.id, ts.prev()),
                Some(None) => self.evicted.forget(meta.id),
                None => st.mark_at_next_insert = true,
            }
            e.insert(st);
        }
        Ok(states.get_mut(&meta.id).expect("inserted above"))
    }

    /// Size in bytes of a stored document, None if it is gone.
    fn stored_size(&self, coll_id: u32, id_ks: &[u8]) -> Result<Option<u64>> {
        let key = keys::doc_key(coll_id, id_ks);
        match self.store.get(Space::Docs, &key).map_err(storage_err)? {
            None => Ok(None),
            Some(v) => match read::stored_bytes(&self.store, &v) {
                Ok(read::StoredDoc::InOplog(entry)) => Ok(Some(
                    read::inserted_document(&entry)?.as_bytes().len() as u64,
                )),
                _ => Ok(Some(v.len() as u64)),
            },
        }
    }

    /// Records an insert into a capped collection (its natural entry) and evicts the
    /// oldest documents while a limit is exceeded.
    pub(crate) fn capped_insert(
        &self,
        txn: &mut Txn<'_>,
        meta: &CollMeta,
        ts: ClusterTime,
        id_ks: &[u8],
        size: u64,
        index_keys: Vec<Vec<u8>>,
    ) -> Result<()> {
        let natural_key = keys::natural_key(meta.id, ts).to_vec();
        txn.batch().put(Space::Natural, &natural_key, id_ks);
        let mut states = self.capped.lock();
        let st = self.capped_state(&mut states, meta)?;
        if std::mem::take(&mut st.mark_at_next_insert) {
            // Every natural key before this one has an older time.
            self.evicted.raise(meta.id, ts.prev());
        }
        st.bytes += size;
        st.count += 1;
        st.pending.push_back(PendingInsert {
            natural_key,
            id_ks: id_ks.to_vec(),
            size,
            index_keys,
        });
        self.evict(txn, meta, st, true)
    }

    /// Adjusts the totals after an update changed a document's size, evicting if needed.
    pub(crate) fn capped_resized(
        &self,
        txn: &mut Txn<'_>,
        meta: &CollMeta,
        old: u64,
        new: u64,
    ) -> Result<()> {
        let mut states = self.capped.lock();
        let st = self.capped_state(&mut states, meta)?;
        st.bytes = (st.bytes + new).saturating_sub(old);
        self.capped_modified_now(meta.id);
        self.evict(txn, meta, st, false)
    }

    /// A user updates or deletes a document of capped collection `coll_id`: it was
    /// committed by now, so inserts up to the newest commit may have changed (see
    /// `Engine::capped_modified`).
    fn capped_modified_now(&self, coll_id: u32) {
        let now = self.last_commit_time();
        let mut modified = self.capped_modified.lock();
        let after = modified.entry(coll_id).or_insert(now);
        *after = (*after).max(now);
    }

    /// Adjusts the totals after a user deleted a document (its natural entry dangles).
    pub(crate) fn capped_deleted(&self, meta: &CollMeta, size: u64) -> Result<()> {
        let mut states = self.capped.lock();
        let st = self.capped_state(&mut states, meta)?;
        st.bytes = st.bytes.saturating_sub(size);
        st.count = st.count.saturating_sub(1);
        self.capped_modified_now(meta.id);
        Ok(())
    }

    /// convertToCapped: the collection becomes capped with its documents in `_id` order
    /// as insertion order, then is cut to `size`.
    pub fn convert_to_capped(
        &self,
        ns: &crate::catalog::namespace::Namespace,
        size: &bson::Bson,
    ) -> Result<crate::oplog::txn::Committed> {
        use tailstream_query::error::{codes, Error};
        let mut txn = self.begin();
        if txn.catalog().view(ns).is_some()
            || txn.catalog().get(ns).is_some_and(|m| m.is_timeseries())
        {
            return Err(crate::catalog::views::not_a_collection(ns));
        }
        let Some(meta) = txn.catalog().get(ns) else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("source collection {} does not exist", ns.full()),
            ));
        };
        let size = crate::write::ddl::round_capped_size(size)?;
        let mut options = meta.options.clone();
        options.insert("capped", true);
        options.insert("size", crate::write::ddl::stored_number(size));
        if !meta.is_capped() {
            // Existing documents get insertion positions below any real cluster time.
            let prefix = keys::coll_prefix(meta.id);
            for (n, item) in self
                .store
                .scan_prefix(Space::Docs, &prefix, false)
                .enumerate()
            {
                let (k, _) = item.map_err(storage_err)?;
                txn.batch().put(
                    Space::Natural,
                    &keys::natural_key(meta.id, ClusterTime::from_u64(n as u64 + 1)),
                    &k[4..],
                );
            }
        }
        let converted = CollMeta {
            ns: meta.ns.clone(),
            id: meta.id,
            uuid: meta.uuid,
            options,
            indexes: meta.indexes.clone(),
        };
        let converted = txn.put_collection(converted);
        txn.log(crate::oplog::OplogChange::command(
            &ns.db,
            Some(meta.uuid),
            bson::doc! {"convertToCapped": ns.coll.clone(), "size": size},
        ));
        self.capped_forget(meta.id);
        let committed = txn.commit()?;
        // Cut to size in a second transaction, now that the natural entries are stored.
        let mut txn = self.begin();
        txn.touch_capped();
        {
            let mut states = self.capped.lock();
            let st = self.capped_state(&mut states, &converted)?;
            self.evict(&mut txn, &converted, st, false)?;
        }
        let trimmed = txn.commit()?;
        Ok(
            if trimmed.last_ts.is_some() || trimmed.seq > committed.seq {
                trimmed
            } else {
                committed
            },
        )
    }

    /// cloneCollectionAsCapped: a new capped collection `to` of `size` bytes holding
    /// `from`'s documents in its natural order, inserted one batch after the other so
    /// the cap keeps the newest (as mongod, only the `_id` index; the inserts are in the
    /// oplog, so change streams see them). `from` is left as it was.
    pub fn clone_collection_as_capped(
        &self,
        from: &crate::catalog::namespace::Namespace,
        to: &crate::catalog::namespace::Namespace,
        size: &bson::Bson,
    ) -> Result<crate::oplog::txn::Committed> {
        use tailstream_query::error::{codes, Error};
        let source = self.collection(from);
        if self.view(from).is_some() || source.as_ref().is_some_and(|m| m.is_timeseries()) {
            return Err(crate::catalog::views::not_a_collection(from));
        }
        let Some(source) = source else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("source collection {} does not exist", from.full()),
            ));
        };
        if self.collection(to).is_some() || self.view(to).is_some() {
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!(
                    "cloneCollectionAsCapped failed - destination collection {} already exists. source collection: {}",
                    to.full(),
                    from.full()
                ),
            ));
        }
        let size = crate::write::ddl::round_capped_size(size)?;
        let mut last = self.create_collection(to, bson::doc! {"capped": true, "size": size})?;
        const CHUNK: i64 = 1000;
        let request = crate::read::find::FindRequest {
            // A capped source in insertion order; any other in `_id` order (its natural
            // order here, as convertToCapped takes it).
            sort: source.is_capped().then(|| bson::doc! {"$natural": 1}),
            batch_size: Some(CHUNK),
            ..Default::default()
        };
        self.for_each_batch(from, request, Some(CHUNK), |docs| {
            if docs.is_empty() {
                return Ok(std::ops::ControlFlow::Continue(()));
            }
            let out = self.insert_documents(to, docs, true)?;
            if let Some(e) = out.errors.into_iter().next() {
                return Err(e.error);
            }
            if let Some(c) = out.committed {
                last = c;
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok(last)
    }

    /// Forgets a dropped collection's totals.
    pub(crate) fn capped_forget(&self, coll_id: u32) {
        self.capped.lock().remove(&coll_id);
        // Nothing known until the totals load again (which sets it to the newest commit).
        self.capped_modified.lock().remove(&coll_id);
        self.evicted.forget(coll_id);
    }

    /// Called when a transaction touching capped collections commits or is abandoned:
    /// its inserts are now in storage (or never will be).
    pub(crate) fn capped_settle(&self, committed: bool) {
        let mut states = self.capped.lock();
        if committed {
            for st in states.values_mut() {
                st.pending.clear();
            }
        } else {
            // Totals included uncommitted work: recompute on next use.
            states.clear();
        }
    }

    /// Removes the oldest documents while a limit is exceeded. With `keep_newest`
    /// (after an insert), the document just inserted stays even when it alone exceeds
    /// the limits, as in mongod, whose capped deletion stops at the inserted record:
    /// it goes with the next insert.
    fn evict(
        &self,
        txn: &mut Txn<'_>,
        meta: &CollMeta,
        st: &mut CappedState,
        keep_newest: bool,
    ) -> Result<()> {
        let (size_limit, max) = limits(meta);
        let over = |st: &CappedState| {
            (size_limit > 0 && st.bytes > size_limit) || (max > 0 && st.count > max)
        };
        while over(st) && st.count > 0 {
            // Stored documents are older than this transaction's own inserts.
            if st.count as usize > st.pending.len() {
                let upper = prefix_successor(&meta.id.to_be_bytes()).expect("collection prefix");
                let first = self
                    .store
                    .scan(Space::Natural, &st.head, Some(&upper), false)
                    .next()
                    .transpose()
                    .map_err(storage_err)?;
                let Some((nkey, id_ks)) = first else { break };
                self.evicting(meta.id, &nkey);
                txn.batch().delete(Space::Natural, &nkey);
                st.head = nkey.to_vec();
                st.head.push(0);
                let Some(doc) = read::fetch(&self.store, meta.id, &id_ks)? else {
                    continue; // dangling: deleted by a user already, and not counted
                };
                let size = self.stored_size(meta.id, &id_ks)?.unwrap_or(0);
                self.remove_document(txn, meta, &id_ks, &doc);
                st.bytes = st.bytes.saturating_sub(size);
            } else {
                if keep_newest && st.pending.len() == 1 {
                    break;
                }
                let Some(p) = st.pending.pop_front() else {
                    break;
                };
                self.evicting(meta.id, &p.natural_key);
                txn.batch().delete(Space::Natural, &p.natural_key);
                for k in &p.index_keys {
                    txn.batch().delete(Space::Index, k);
                }
                txn.batch()
                    .delete(Space::Docs, &keys::doc_key(meta.id, &p.id_ks));
                st.bytes = st.bytes.saturating_sub(p.size);
            }
            st.count -= 1;
        }
        Ok(())
    }

    /// Natural key `nkey` of `coll_id` goes with the transaction being built: the
    /// eviction mark rises to it first (see `core::evicted`).
    fn evicting(&self, coll_id: u32, nkey: &[u8]) {
        match keys::natural_key_time(nkey) {
            Some(ts) => self.evicted.raise(coll_id, ts),
            None => self.evicted.forget(coll_id),
        }
    }

    /// Removes an evicted document and its index entries (no oplog entry: capped
    /// deletions follow from the inserts, as in mongod).
    fn remove_document(&self, txn: &mut Txn<'_>, meta: &CollMeta, id_ks: &[u8], doc: &Document) {
        for (index_id, values_ks) in self.index_entries_of(meta, doc) {
            txn.batch().delete(
                Space::Index,
                &keys::index_entry_key(index_id, &values_ks, id_ks),
            );
        }
        txn.batch()
            .delete(Space::Docs, &keys::doc_key(meta.id, id_ks));
    }
}

#[cfg(test)]
mod tests {
    use crate::catalog::namespace::Namespace;
    use crate::core::keys;
    use crate::core::testing::TestEngine;
    use crate::core::time::ClusterTime;
    use bson::doc;
    use tailstream_storage::Space;

    /// The insert times of the natural keys stored for collection `coll_id`.
    fn stored_times(t: &TestEngine, coll_id: u32) -> Vec<ClusterTime> {
        t.engine
            .store
            .scan_prefix(Space::Natural, &coll_id.to_be_bytes(), false)
            .map(|item| keys::natural_key_time(&item.unwrap().0).unwrap())
            .collect()
    }

    #[test]
    fn the_eviction_mark_follows_the_oldest_natural_key_left() {
        let t = TestEngine::open();
        let e = &t.engine;
        let ns = Namespace::new("db", "bus");
        e.create_collection(&ns, doc! {"capped": true, "size": 4096, "max": 2})
            .unwrap();
        let id = e.collection(&ns).unwrap().id;
        let insert = |n: i32| {
            e.insert_documents(&ns, vec![doc! {"_id": n}], true)
                .unwrap();
        };
        let keeps = |ts: ClusterTime| e.evicted.keeps(id, ts);
        insert(0);
        let first = stored_times(&t, id)[0];
        assert!(
            keeps(first),
            "empty when the totals loaded: set below the insert"
        );
        insert(1);
        insert(2);
        let left = stored_times(&t, id);
        assert!(left.len() == 2 && left[0] > first);
        assert!(!keeps(first), "evicted: at or below the mark");
        assert!(keeps(left[0]) && keeps(left[1]));

        e.capped_forget(id);
        assert!(!keeps(left[1]), "forgotten: not known");
        insert(3);
        let now = stored_times(&t, id);
        assert!(
            !keeps(left[0]),
            "the oldest left when the totals loaded was evicted"
        );
        assert_eq!(now[0], left[1]);
        assert!(keeps(now[0]) && keeps(now[1]));
    }
}

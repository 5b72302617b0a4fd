//! Collection and index DDL: create, drop, rename, collMod, createIndexes,
//! dropIndexes, dropDatabase. Each is one atomic batch with its oplog entry.

use crate::catalog::namespace::{validate_db_name, Namespace};
use crate::catalog::{CollMeta, IndexMeta};
use crate::core::{progress::ProgressMeter, storage_err};
use crate::oplog::OplogChange;
use crate::read::{Access, Scan};
use crate::write::encoded_keys;
use crate::{core::keys, oplog::txn::Committed, oplog::txn::Txn, Engine};
use bson::{doc, Bson, Document};
use std::collections::HashSet;
use std::sync::Arc;
use tailstream_query::collation::Collator;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::index_keys::KeyPattern;
use tailstream_query::matcher::Matcher;
use tailstream_storage::{prefix_successor, Space, Store};

/// Most secondary indexes on one collection (mongod: 64 including `_id`).
pub const MAX_INDEXES: usize = 63;

/// Options `create` accepts; anything else is refused (as mongod's IDL parser does).
const CREATE_OPTIONS: &[&str] = &[
    "capped",
    "size",
    "max",
    "validator",
    "validationLevel",
    "validationAction",
    "collation",
    "changeStreamPreAndPostImages",
    "storageEngine",
    "indexOptionDefaults",
    "viewOn",
    "pipeline",
    "timeseries",
    "expireAfterSeconds",
    "clusteredIndex",
    "idIndex",
    "autoIndexId",
    "flags",
    "encryptedFields",
    "comment",
];

/// Generic command arguments a `collMod` may carry besides its options.
const COLL_MOD_GENERIC: &[&str] = &[
    "$db",
    "lsid",
    "$clusterTime",
    "$readPreference",
    "writeConcern",
    "comment",
    "txnNumber",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
];

/// Options an index specification may carry.
const INDEX_OPTIONS: &[&str] = &[
    "key",
    "name",
    "v",
    "unique",
    "sparse",
    "partialFilterExpression",
    "expireAfterSeconds",
    "background",
    "hidden",
    "collation",
    "storageEngine",
    "ns",
    "dropDups",
    "wildcardProjection",
    "default_language",
    "language_override",
    "textIndexVersion",
    "weights",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
    "bucketSize",
    "prepareUnique",
    "clustered",
];

pub struct CreateIndexesOutcome {
    pub before: usize,
    pub after: usize,
    pub created_collection: bool,
    pub note: Option<&'static str>,
    pub committed: Option<Committed>,
}

impl Engine {
    /// The collection's metadata, creating the collection (with an oplog entry) if needed.
    pub(crate) fn ensure_collection(
        &self,
        txn: &mut Txn<'_>,
        ns: &Namespace,
    ) -> Result<Arc<CollMeta>> {
        if let Some(m) = txn.catalog().get(ns) {
            return Ok(m);
        }
        if txn.catalog().view(ns).is_some() {
            return Err(crate::catalog::views::not_a_collection(ns));
        }
        self.create_in(txn, ns, Document::new())
    }

    pub(crate) fn create_in(
        &self,
        txn: &mut Txn<'_>,
        ns: &Namespace,
        options: Document,
    ) -> Result<Arc<CollMeta>> {
        ns.validate_for_write()?;
        let id = {
            let c = txn.catalog_mut();
            let id = c.next_coll_id;
            c.next_coll_id += 1;
            id
        };
        let meta_options = options.clone();
        // A default collation applies to `_id` too: its unique index compares under it.
        let indexes = match options.get_document("collation") {
            Ok(collation) => {
                let index_id = {
                    let c = txn.catalog_mut();
                    let index_id = c.next_index_id;
                    c.next_index_id += 1;
                    index_id
                };
                let mut spec = CollMeta::id_index_spec();
                spec.insert("unique", true);
                spec.insert("collation", collation.clone());
                vec![Arc::new(IndexMeta::from_spec(index_id, &spec)?)]
            }
            Err(_) => Vec::new(),
        };
        let meta = CollMeta {
            ns: ns.clone(),
            id,
            uuid: bson::Uuid::new(),
            options: options.clone(),
            indexes,
        };
        let uuid = meta.uuid;
        let meta = txn.put_collection(meta);
        let timeseries = meta.is_timeseries();
        let mut o = doc! {"create": ns.coll.clone()};
        o.extend(options);
        // A time-series collection has no _id index.
        if !timeseries {
            o.insert("idIndex", CollMeta::id_index_spec_of(&meta_options));
        }
        txn.log(OplogChange::command(&ns.db, Some(uuid), o));
        Ok(meta)
    }

    /// The `create` command. An existing collection with the same options is not an error.
    pub fn create_collection(&self, ns: &Namespace, options: Document) -> Result<Committed> {
        let options = create_options(ns, options)?;
        if options.contains_key("viewOn") {
            return self.create_view(ns, &options);
        }
        let options = collection_options(options)?;
        let mut txn = self.begin();
        self.create_collection_in(&mut txn, ns, options)?;
        txn.commit()
    }

    /// Creates a collection with checked options in `txn` (an existing one with the
    /// same options is no error, and nothing is written).
    pub(crate) fn create_collection_in(
        &self,
        txn: &mut Txn<'_>,
        ns: &Namespace,
        options: Document,
    ) -> Result<()> {
        if let Some(existing) = txn.catalog().get(ns) {
            if existing.options == options {
                return Ok(());
            }
            return Err(namespace_exists(&existing));
        }
        if txn.catalog().view(ns).is_some() {
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!("A view already exists. NS: {}", ns.full()),
            ));
        }
        self.create_in(txn, ns, options)?;
        Ok(())
    }

    /// Drops a collection and its indexes, or a view. Dropping a missing collection is
    /// not an error (mongod 7.0).
    pub fn drop_collection(&self, ns: &Namespace) -> Result<Option<Committed>> {
        let mut txn = self.begin();
        if let Some(view) = txn.catalog().view(ns) {
            self.drop_view_in(&mut txn, &view)?;
            return Ok(Some(txn.commit()?));
        }
        let Some(meta) = txn.catalog().get(ns) else {
            return Ok(None);
        };
        if ns.db == "local" && ns.coll == "oplog.rs" {
            return Err(Error::new(
                codes::ILLEGAL_OPERATION,
                "can't drop live oplog while replicating",
            ));
        }
        self.drop_in(&mut txn, &meta);
        Ok(Some(txn.commit()?))
    }

    fn drop_in(&self, txn: &mut Txn<'_>, meta: &CollMeta) {
        let p = keys::coll_prefix(meta.id);
        txn.batch()
            .delete_range(Space::Docs, &p, &prefix_successor(&p).expect("prefix"));
        for i in &meta.indexes {
            let p = keys::index_prefix(i.id);
            txn.batch()
                .delete_range(Space::Index, &p, &prefix_successor(&p).expect("prefix"));
        }
        if meta.is_capped() {
            let p = meta.id.to_be_bytes();
            txn.batch()
                .delete_range(Space::Natural, &p, &prefix_successor(&p).expect("prefix"));
            self.capped_forget(meta.id);
        }
        txn.remove_collection(&meta.ns);
        if meta.ns.coll == crate::catalog::views::SYSTEM_VIEWS {
            // The database's view definitions go with it (as on mongod).
            let db = meta.ns.db.clone();
            txn.catalog_mut().views.retain(|_, v| v.ns.db != db);
        }
        txn.log(OplogChange::command(
            &meta.ns.db,
            Some(meta.uuid),
            doc! {"drop": meta.ns.coll.clone()},
        ));
    }

    /// Drops every collection of a database, then records `dropDatabase`.
    pub fn drop_database(&self, db: &str) -> Result<Option<Committed>> {
        validate_db_name(db)?;
        let mut txn = self.begin();
        let colls = txn.catalog().collections_in(db);
        for meta in &colls {
            self.drop_in(&mut txn, meta);
        }
        if colls.is_empty() {
            return Ok(None);
        }
        txn.log(OplogChange::command(db, None, doc! {"dropDatabase": 1}));
        Ok(Some(txn.commit()?))
    }

    /// Renames a collection (also across databases); documents stay where they are,
    /// only the catalog entry moves.
    pub fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> Result<Committed> {
        to.validate_for_write()?;
        if from == to {
            return Err(Error::new(
                codes::ILLEGAL_OPERATION,
                "Can't rename a collection to itself",
            ));
        }
        if from.coll == crate::catalog::views::SYSTEM_VIEWS
            || to.coll == crate::catalog::views::SYSTEM_VIEWS
        {
            return Err(Error::new(
                codes::ILLEGAL_OPERATION,
                format!(
                    "renaming {} is not supported: views are changed with create, collMod and drop",
                    crate::catalog::views::SYSTEM_VIEWS
                ),
            ));
        }
        let mut txn = self.begin();
        let is_view = |m: Option<&Arc<CollMeta>>| m.is_some_and(|m| m.is_timeseries());
        let source = txn.catalog().get(from);
        if txn.catalog().view(from).is_some() || is_view(source.as_ref()) {
            // A time-series collection is a view on mongod.
            return Err(Error::new(
                crate::catalog::views::COMMAND_NOT_SUPPORTED_ON_VIEW,
                format!("cannot rename view: {}", from.full()),
            ));
        }
        let Some(meta) = source else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("Source collection {} does not exist", from.full()),
            ));
        };
        if txn.catalog().view(to).is_some() || is_view(txn.catalog().get(to).as_ref()) {
            return Err(Error::new(
                codes::NAMESPACE_EXISTS,
                format!("a view already exists with that name: {}", to.full()),
            ));
        }
        let mut dropped_target = None;
        if let Some(target) = txn.catalog().get(to) {
            if !drop_target {
                return Err(Error::new(
                    codes::NAMESPACE_EXISTS,
                    "target namespace exists",
                ));
            }
            dropped_target = Some(target.uuid);
            self.drop_in(&mut txn, &target);
        }
        txn.remove_collection(from);
        let uuid = if from.db == to.db {
            meta.uuid
        } else {
            crate::write::ddl::materialize_collection(self, txn.batch(), meta.id)?;
            bson::Uuid::new()
        };
        let moved = CollMeta {
            ns: to.clone(),
            id: meta.id,
            uuid,
            options: meta.options.clone(),
            indexes: meta.indexes.clone(),
        };
        txn.put_collection(moved);
        let mut o = doc! {"renameCollection": from.full(), "to": to.full(), "stayTemp": false};
        match dropped_target {
            Some(u) => o.insert("dropTarget", bson::Binary::from_uuid(u)),
            None => o.insert("dropTarget", false),
        };
        txn.log(OplogChange::command(&from.db, Some(meta.uuid), o));
        txn.commit()
    }

    /// Builds indexes from their specifications (creating the collection if needed).
    pub fn create_indexes(
        &self,
        ns: &Namespace,
        specs: &[Document],
    ) -> Result<CreateIndexesOutcome> {
        ns.validate_for_write()?;
        if specs.is_empty() {
            return Err(Error::bad_value(
                "Must specify at least one index to create",
            ));
        }
        let mut txn = self.begin();
        let mut outcome = self.create_indexes_in(&mut txn, ns, specs)?;
        outcome.committed = Some(txn.commit()?);
        Ok(outcome)
    }

    /// Builds indexes in `txn` (see [`Engine::create_indexes`]; `committed` is left
    /// to the caller).
    pub(crate) fn create_indexes_in(
        &self,
        txn: &mut Txn<'_>,
        ns: &Namespace,
        specs: &[Document],
    ) -> Result<CreateIndexesOutcome> {
        let created_collection = txn.catalog().get(ns).is_none();
        let meta = self.ensure_collection(txn, ns)?;
        let before = meta.index_count();
        let mut indexes = meta.indexes.clone();
        let mut new_indexes: Vec<Arc<IndexMeta>> = Vec::new();
        let default_collation = meta.default_collator()?;
        for spec in specs {
            let mut spec = validate_index_spec(spec)?;
            // An index without a collation of its own has the collection's; an explicit
            // `simple` one has none.
            match spec.get_document("collation") {
                Ok(c) if c.get_str("locale") == Ok("simple") => {
                    spec.remove("collation");
                }
                Ok(_) => {}
                Err(_) => {
                    if let Some(c) = &default_collation {
                        spec.insert("collation", c.spec().clone());
                    }
                }
            }
            if meta.is_timeseries() && spec.get_bool("unique").unwrap_or(false) {
                return Err(Error::invalid_options(
                    "Unique indexes are not supported on time-series collections",
                ));
            }
            let name = spec.get_str("name").unwrap_or_default().to_string();
            let key = spec.get_document("key").cloned().unwrap_or_default();
            if is_id_index(&key) {
                if name != "_id_" && !name.is_empty() {
                    return Err(Error::new(
                        codes::INDEX_OPTIONS_CONFLICT,
                        "Index already exists with a different name: _id_".to_string(),
                    ));
                }
                continue;
            }
            if let Some(existing) = indexes.iter().find(|i| i.name == name) {
                if same_index(&existing.spec, &spec) {
                    continue;
                }
                return Err(Error::new(
                    codes::INDEX_KEY_SPECS_CONFLICT,
                    format!("An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}", crate::core::format::doc_to_string(&spec), crate::core::format::doc_to_string(&existing.spec)),
                ));
            }
            // The same key pattern under another collation is another index.
            if let Some(existing) = indexes.iter().find(|i| {
                tailstream_query::compare::cmp_documents(&i.key, &key).is_eq()
                    && i.spec.get("collation") == spec.get("collation")
            }) {
                if same_options(&existing.spec, &spec) {
                    return Err(Error::new(
                        codes::INDEX_OPTIONS_CONFLICT,
                        format!(
                            "Index already exists with a different name: {}",
                            existing.name
                        ),
                    ));
                }
                return Err(Error::new(
                    codes::INDEX_OPTIONS_CONFLICT,
                    format!("An equivalent index already exists with the same name but different options. Requested index: {}, existing index: {}", crate::core::format::doc_to_string(&spec), crate::core::format::doc_to_string(&existing.spec)),
                ));
            }
            let is_text = |k: &Document| k.values().any(|v| v.as_str() == Some("text"));
            if is_text(&key) {
                if let Some(existing) = indexes.iter().find(|i| is_text(&i.key)) {
                    return Err(Error::new(
                        codes::CANNOT_CREATE_INDEX,
                        format!(
                            "only one text index per collection allowed, found existing text index \"{}\"",
                            existing.name
                        ),
                    ));
                }
            }
            if indexes.iter().filter(|i| !i.is_id_index()).count() >= MAX_INDEXES {
                return Err(Error::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!(
                        "add index fails, too many indexes for {} key:{}",
                        ns.full(),
                        crate::core::format::doc_to_string(&key)
                    ),
                ));
            }
            let id = {
                let c = txn.catalog_mut();
                let id = c.next_index_id;
                c.next_index_id += 1;
                id
            };
            let index = Arc::new(IndexMeta::from_spec(id, &spec)?);
            indexes.push(index.clone());
            new_indexes.push(index);
        }
        if new_indexes.is_empty() {
            return Ok(CreateIndexesOutcome {
                before,
                after: before,
                created_collection,
                note: Some("all indexes already exist"),
                committed: None,
            });
        }
        build_index_entries(&self.store, txn, ns, &meta, &new_indexes)?;
        let after = 1 + indexes.iter().filter(|i| !i.is_id_index()).count();
        let uuid = meta.uuid;
        txn.put_collection(meta.with_indexes(indexes));
        for index in &new_indexes {
            let mut o = doc! {"createIndexes": ns.coll.clone()};
            o.extend(index.spec.clone());
            txn.log(OplogChange::command(&ns.db, Some(uuid), o));
        }
        Ok(CreateIndexesOutcome {
            before,
            after,
            created_collection,
            note: None,
            committed: None,
        })
    }

    /// reIndex: every secondary index's entries removed and built again from the
    /// documents, in one commit (the catalog and the oplog are unchanged: mongod does not
    /// replicate reIndex). Returns the index specifications, `_id`'s first.
    pub fn reindex(&self, ns: &Namespace) -> Result<(Vec<Document>, Committed)> {
        let mut txn = self.begin();
        if txn.catalog().view(ns).is_some() {
            return Err(Error::new(
                crate::catalog::views::COMMAND_NOT_SUPPORTED_ON_VIEW,
                "can't re-index a view",
            ));
        }
        let Some(meta) = txn.catalog().get(ns) else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("collection {} does not exist", ns.full()),
            ));
        };
        let secondary: Vec<Arc<IndexMeta>> = meta.secondary_indexes().cloned().collect();
        for index in &secondary {
            let p = keys::index_prefix(index.id);
            txn.batch()
                .delete_range(Space::Index, &p, &prefix_successor(&p).expect("prefix"));
        }
        build_index_entries(&self.store, &mut txn, ns, &meta, &secondary)?;
        let id_index = (!meta.is_timeseries()).then(|| meta.id_index());
        let specs = id_index
            .into_iter()
            .chain(secondary.iter().map(|i| i.spec.clone()))
            .collect();
        Ok((specs, txn.commit()?))
    }

    /// compact: the collection's documents and index entries compacted in the store.
    /// Returns the bytes the store's files shrank by (approximate, as mongod's
    /// `bytesFreed`: other writes may run meanwhile; never negative).
    pub fn compact_collection(&self, ns: &Namespace) -> Result<u64> {
        if self.view(ns).is_some() {
            return Err(Error::new(
                crate::catalog::views::COMMAND_NOT_SUPPORTED_ON_VIEW,
                "can't compact a view",
            ));
        }
        let Some(meta) = self.collection(ns) else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                "collection does not exist",
            ));
        };
        let size = |e: &Engine| {
            e.store.approximate_size(Space::Docs) + e.store.approximate_size(Space::Index)
        };
        let before = size(self);
        self.store
            .compact_prefix(Space::Docs, &keys::coll_prefix(meta.id));
        for index in meta.secondary_indexes() {
            self.store
                .compact_prefix(Space::Index, &keys::index_prefix(index.id));
        }
        Ok(before.saturating_sub(size(self)))
    }

    /// Drops indexes by name, key pattern, list of names, or "*" (all but `_id`).
    /// Returns the number of indexes before the drop.
    pub fn drop_indexes(&self, ns: &Namespace, which: &Bson) -> Result<(usize, Committed)> {
        let mut txn = self.begin();
        if txn.catalog().view(ns).is_some() {
            return Err(crate::catalog::views::not_a_collection(ns));
        }
        let Some(meta) = txn.catalog().get(ns) else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("ns not found {}", ns.full()),
            ));
        };
        let before = meta.index_count();
        let names: Vec<String> = match which {
            Bson::String(s) if s == "*" => {
                meta.secondary_indexes().map(|i| i.name.clone()).collect()
            }
            Bson::String(s) => vec![s.clone()],
            Bson::Array(a) => a
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        Error::type_mismatch("dropIndexes: index names must be strings")
                    })
                })
                .collect::<Result<_>>()?,
            Bson::Document(key) => {
                if is_id_index(key) {
                    return Err(Error::invalid_options("cannot drop _id index"));
                }
                let found: Vec<&Arc<IndexMeta>> = meta
                    .secondary_indexes()
                    .filter(|i| tailstream_query::compare::cmp_documents(&i.key, key).is_eq())
                    .collect();
                match found.as_slice() {
                    [i] => vec![i.name.clone()],
                    [a, b, ..] => {
                        // Indexes with one key pattern and different collations.
                        return Err(Error::new(
                            codes::AMBIGUOUS_INDEX_KEY_PATTERN,
                            format!(
                                "{} indexes found for key: {}, identify by name instead. Conflicting indexes: {}, {}",
                                found.len(),
                                crate::core::format::doc_to_string(key),
                                crate::core::format::doc_to_string(&a.spec),
                                crate::core::format::doc_to_string(&b.spec)
                            ),
                        ));
                    }
                    [] => {
                        return Err(Error::new(
                            codes::INDEX_NOT_FOUND,
                            format!(
                                "can't find index with key: {}",
                                crate::core::format::doc_to_string(key)
                            ),
                        ))
                    }
                }
            }
            _ => {
                return Err(Error::type_mismatch(
                    "dropIndexes: 'index' must be a string, an array of strings or a document",
                ))
            }
        };
        let mut remaining = meta.indexes.clone();
        for name in &names {
            if name == "_id_" {
                return Err(Error::invalid_options("cannot drop _id index"));
            }
            let Some(pos) = remaining.iter().position(|i| &i.name == name) else {
                return Err(Error::new(
                    codes::INDEX_NOT_FOUND,
                    format!("index not found with name [{name}]"),
                ));
            };
            let index = remaining.remove(pos);
            let p = keys::index_prefix(index.id);
            txn.batch()
                .delete_range(Space::Index, &p, &prefix_successor(&p).expect("prefix"));
            // As mongod: o2 carries the dropped index's specification (the dropIndexes event's
            // operationDescription).
            let mut change = OplogChange::command(
                &ns.db,
                Some(meta.uuid),
                doc! {"dropIndexes": ns.coll.clone(), "index": name.clone()},
            );
            change.o2 = Some(index.spec.clone());
            txn.log(change);
        }
        txn.put_collection(meta.with_indexes(remaining));
        Ok((before, txn.commit()?))
    }

    /// collMod: index options (expireAfterSeconds, hidden), validator settings,
    /// pre/post images, capped limits. Returns the changed values (old and new).
    pub fn coll_mod(&self, ns: &Namespace, cmd: &Document) -> Result<(Document, Committed)> {
        crate::catalog::validation::check_options("collMod", cmd)?;
        let mut txn = self.begin();
        if let Some(view) = txn.catalog().view(ns) {
            let (mut view_on, mut pipeline) = (None, None);
            for (k, v) in cmd {
                match k.as_str() {
                    "viewOn" => view_on = Some(v),
                    "pipeline" => pipeline = Some(v),
                    k if k == "collMod" || COLL_MOD_GENERIC.contains(&k) => {}
                    other => {
                        return Err(Error::invalid_options(format!(
                            "option not supported on a view: {other}"
                        )))
                    }
                }
            }
            self.modify_view(&mut txn, &view, view_on, pipeline)?;
            return Ok((Document::new(), txn.commit()?));
        }
        let Some(meta) = txn.catalog().get(ns) else {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("ns does not exist: {}", ns.full()),
            ));
        };
        for only_views in ["pipeline", "viewOn"] {
            if cmd.contains_key(only_views) {
                return Err(Error::invalid_options(format!(
                    "option only supported on a view: {only_views}"
                )));
            }
        }
        let mut options = meta.options.clone();
        let mut indexes = meta.indexes.clone();
        let mut reply = Document::new();
        let mut logged = doc! {"collMod": ns.coll.clone()};
        for (k, v) in cmd {
            match k.as_str() {
                k if k == "collMod" || COLL_MOD_GENERIC.contains(&k) => continue,
                "index" => {
                    let spec = v
                        .as_document()
                        .ok_or_else(|| Error::type_mismatch("collMod.index must be an object"))?;
                    let pos = if let Ok(name) = spec.get_str("name") {
                        indexes
                            .iter()
                            .position(|i| i.name == name && !i.is_id_index())
                    } else if let Ok(kp) = spec.get_document("keyPattern") {
                        let same_key = |i: &Arc<IndexMeta>| {
                            !i.is_id_index()
                                && tailstream_query::compare::cmp_documents(&i.key, kp).is_eq()
                        };
                        let matching: Vec<&Arc<IndexMeta>> =
                            indexes.iter().filter(|i| same_key(i)).collect();
                        if let [a, b, ..] = matching.as_slice() {
                            return Err(Error::new(
                                codes::AMBIGUOUS_INDEX_KEY_PATTERN,
                                format!(
                                    "index keyPattern {} matches {} indexes, must use index name. Conflicting indexes:{}, {}",
                                    crate::core::format::doc_to_string(kp),
                                    matching.len(),
                                    crate::core::format::doc_to_string(&a.spec),
                                    crate::core::format::doc_to_string(&b.spec)
                                ),
                            ));
                        }
                        indexes.iter().position(same_key)
                    } else {
                        return Err(Error::invalid_options(
                            "collMod.index requires either a name or a keyPattern",
                        ));
                    };
                    let Some(pos) = pos else {
                        return Err(Error::new(
                            codes::INDEX_NOT_FOUND,
                            format!(
                                "cannot find index {} for ns {}",
                                crate::core::format::doc_to_string(spec),
                                ns.full()
                            ),
                        ));
                    };
                    let mut new_spec = indexes[pos].spec.clone();
                    for (ok, ov) in spec {
                        match ok.as_str() {
                            "name" | "keyPattern" => {}
                            "expireAfterSeconds" => {
                                if !indexes[pos].spec.contains_key("expireAfterSeconds") {
                                    return Err(Error::invalid_options(
                                        "no expireAfterSeconds field to update",
                                    ));
                                }
                                reply.insert(
                                    "expireAfterSeconds_old",
                                    indexes[pos]
                                        .spec
                                        .get("expireAfterSeconds")
                                        .cloned()
                                        .unwrap_or(Bson::Null),
                                );
                                reply.insert("expireAfterSeconds_new", ov.clone());
                                new_spec.insert("expireAfterSeconds", ov.clone());
                            }
                            "hidden" => {
                                reply.insert(
                                    "hidden_old",
                                    indexes[pos].spec.get_bool("hidden").unwrap_or(false),
                                );
                                reply.insert("hidden_new", ov.clone());
                                new_spec.insert("hidden", ov.clone());
                            }
                            "unique" | "prepareUnique" => {
                                new_spec.insert(ok.clone(), ov.clone());
                            }
                            other => {
                                return Err(Error::invalid_options(format!(
                                    "unknown collMod index option {other}"
                                )))
                            }
                        }
                    }
                    indexes[pos] = Arc::new(IndexMeta::from_spec(indexes[pos].id, &new_spec)?);
                    logged.insert("index", spec.clone());
                }
                "timeseries" if meta.is_timeseries() => {
                    let current = meta.timeseries().cloned().unwrap_or_default();
                    if let Some(changed) = crate::catalog::timeseries::modify(&current, v)? {
                        options.insert("timeseries", changed);
                        logged.insert(k.clone(), v.clone());
                    }
                }
                "expireAfterSeconds" if meta.is_timeseries() => {
                    if v.as_str() == Some("off") {
                        options.remove("expireAfterSeconds");
                    } else {
                        let secs = crate::catalog::timeseries::expire_after_seconds("collMod", v)?;
                        options.insert("expireAfterSeconds", secs);
                    }
                    logged.insert(k.clone(), v.clone());
                }
                "validator"
                | "validationLevel"
                | "validationAction"
                | "changeStreamPreAndPostImages"
                | "expireAfterSeconds" => {
                    options.insert(k.clone(), v.clone());
                    logged.insert(k.clone(), v.clone());
                }
                "cappedSize" => {
                    if !meta.is_capped() {
                        return Err(Error::invalid_options(format!(
                            "Unable to modify capped size of a non-capped collection {}",
                            ns.full()
                        )));
                    }
                    options.insert("size", stored_number(round_capped_size(v)?));
                    logged.insert(k.clone(), v.clone());
                }
                "cappedMax" => {
                    if !meta.is_capped() {
                        return Err(Error::invalid_options(format!(
                            "Unable to modify capped max of a non-capped collection {}",
                            ns.full()
                        )));
                    }
                    options.insert("max", stored_number(capped_max_for_collmod(v)?));
                    logged.insert(k.clone(), v.clone());
                }
                other => {
                    return Err(Error::new(
                        codes::INVALID_OPTIONS,
                        format!("unknown option to collMod: {other}"),
                    ));
                }
            }
        }
        // As mongod: o2 keeps the previous values of the changed collection options (a
        // modify event's stateBeforeChange).
        let old_options: Document = options
            .keys()
            .chain(meta.options.keys())
            .filter(|k| options.get(*k) != meta.options.get(*k))
            .filter_map(|k| meta.options.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        let changed = CollMeta {
            ns: meta.ns.clone(),
            id: meta.id,
            uuid: meta.uuid,
            options,
            indexes,
        };
        txn.put_collection(changed);
        let mut change = OplogChange::command(&ns.db, Some(meta.uuid), logged);
        if !old_options.is_empty() {
            change.o2 = Some(doc! {"collectionOptions_old": old_options});
        }
        txn.log(change);
        Ok((reply, txn.commit()?))
    }
}

/// The NamespaceExists error of a name taken by `existing` (mongod's wording).
pub(crate) fn namespace_exists(existing: &CollMeta) -> Error {
    let message = if existing.is_timeseries() {
        format!(
            "A timeseries collection already exists. NS: {}",
            existing.ns.full()
        )
    } else {
        format!("Collection {} already exists.", existing.ns.full())
    };
    Error::new(codes::NAMESPACE_EXISTS, message)
}

fn is_id_index(key: &Document) -> bool {
    key.len() == 1
        && key
            .get("_id")
            .map(|v| tailstream_query::compare::as_f64(v) == Some(1.0))
            .unwrap_or(false)
}

fn same_options(a: &Document, b: &Document) -> bool {
    let strip = |d: &Document| -> Document {
        d.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "name" | "v" | "background" | "ns"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    strip(a) == strip(b)
}

fn same_index(a: &Document, b: &Document) -> bool {
    same_options(a, b) && a.get("name") == b.get("name")
}

/// Checks an index specification and returns it normalised (`v: 2` first).
fn validate_index_spec(spec: &Document) -> Result<Document> {
    let key = match spec.get("key") {
        Some(Bson::Document(k)) => k.clone(),
        Some(_) => return Err(Error::type_mismatch("The 'key' field must be an object")),
        None => {
            return Err(Error::failed_to_parse(
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    if key.is_empty() {
        return Err(Error::new(
            codes::CANNOT_CREATE_INDEX,
            "Index keys cannot be empty.",
        ));
    }
    for (k, v) in &key {
        if let Bson::String(kind) = v {
            let known = matches!(
                kind.as_str(),
                "text" | "2d" | "2dsphere" | "geoHaystack" | "columnstore"
            );
            if known && !tailstream_query::index_plugin::is_supported_plugin(kind) {
                return Err(Error::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!("Index type '{kind}' on field '{k}' is not supported"),
                ));
            }
        }
        if tailstream_query::compare::as_f64(v) == Some(0.0) {
            return Err(Error::new(
                codes::CANNOT_CREATE_INDEX,
                format!(
                    "Values in the index key pattern can't be all zeros or negative zero: {}",
                    crate::core::format::doc_to_string(&key)
                ),
            ));
        }
    }
    KeyPattern::parse(&key)?;
    let name = match spec.get("name") {
        Some(Bson::String(n)) if !n.is_empty() => n.clone(),
        Some(Bson::String(_)) => {
            return Err(Error::new(
                codes::CANNOT_CREATE_INDEX,
                "index name cannot be empty",
            ))
        }
        Some(_) => return Err(Error::type_mismatch("The 'name' field must be a string")),
        None => {
            return Err(Error::failed_to_parse(
                "The 'name' field is a required property of an index specification",
            ))
        }
    };
    for k in spec.keys() {
        if !INDEX_OPTIONS.contains(&k.as_str()) {
            return Err(Error::new(
                codes::INVALID_INDEX_SPECIFICATION_OPTION,
                format!(
                    "The field '{k}' is not valid for an index specification. Specification: {}",
                    crate::core::format::doc_to_string(spec)
                ),
            ));
        }
    }
    let mut out = doc! {"v": 2, "key": key.clone(), "name": name};
    for (k, v) in spec {
        match k.as_str() {
            "key" | "name" | "v" | "ns" => {}
            "unique" | "sparse" | "hidden" => {
                if v.as_bool().unwrap_or(false)
                    || matches!(v, Bson::Int32(1) | Bson::Int64(1) | Bson::Double(_))
                        && tailstream_query::compare::as_f64(v) != Some(0.0)
                {
                    out.insert(k.clone(), true);
                }
            }
            "expireAfterSeconds" => {
                let secs = tailstream_query::compare::as_f64(v).ok_or_else(|| {
                    Error::type_mismatch("TTL index 'expireAfterSeconds' option must be numeric")
                })?;
                if secs < 0.0 || secs > i32::MAX as f64 {
                    return Err(Error::new(codes::CANNOT_CREATE_INDEX, format!("TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number. Got {secs}")));
                }
                if key.len() > 1 {
                    return Err(Error::new(codes::CANNOT_CREATE_INDEX, "TTL indexes are single-field indexes, compound indexes do not support TTL."));
                }
                out.insert(k.clone(), secs as i32);
            }
            "partialFilterExpression" => {
                let f = v.as_document().ok_or_else(|| {
                    Error::type_mismatch("partialFilterExpression must be an object")
                })?;
                Matcher::new(f)?;
                out.insert(k.clone(), v.clone());
            }
            "collation" => {
                let c = v.as_document().ok_or_else(|| {
                    Error::type_mismatch(format!(
                        "The field 'collation' must be an object, but got {}",
                        tailstream_query::compare::type_name(v)
                    ))
                })?;
                if c.is_empty() {
                    return Err(Error::bad_value(
                        "The field 'collation' cannot be an empty object.",
                    ));
                }
                // Stored filled in, as mongod lists it; `simple` is stored as an explicit
                // "no collation" so the collection's default does not apply.
                match Collator::parse(c)? {
                    Some(coll) => out.insert(k.clone(), coll.spec().clone()),
                    None => out.insert(k.clone(), bson::doc! {"locale": "simple"}),
                };
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    tailstream_query::index_plugin::normalize_spec(out)
}

/// Checks `create` options and normalises capped sizes (rounded up to 256 bytes) and the
/// collation (filled in; `{locale: "simple"}` is no collation).
fn normalize_create_options(mut options: Document) -> Result<Document> {
    options.remove("comment");
    match options.get("collation") {
        None => {}
        Some(Bson::Document(spec)) if spec.is_empty() => {
            return Err(Error::bad_value("'collation' cannot be an empty document"));
        }
        Some(Bson::Document(spec)) => match Collator::parse(spec)? {
            Some(c) => {
                options.insert("collation", c.spec().clone());
            }
            None => {
                options.remove("collation");
            }
        },
        Some(other) => {
            return Err(tailstream_query::args::wrong_type(
                "create.collation",
                other,
                "object",
            ))
        }
    }
    let capped = options
        .get("capped")
        .map(|v| {
            v.as_bool().unwrap_or(false)
                || tailstream_query::compare::as_f64(v).unwrap_or(0.0) != 0.0
        })
        .unwrap_or(false);
    if capped {
        options.insert("capped", true);
        let size = options.get("size").ok_or_else(|| {
            Error::invalid_options("the 'size' field is required when 'capped' is true")
        })?;
        let size = create_limit(size, "size", 1, ONE_PB)?;
        options.insert("size", stored_number((size + 255) / 256 * 256));
        if let Some(max) = options.get("max") {
            let max = create_limit(max, "max", i64::MIN, (1 << 31) - 1)?;
            options.insert("max", stored_number(adjust_capped_max(max)));
        }
    } else {
        options.remove("capped");
        if options.contains_key("max") || options.contains_key("size") {
            // mongod ignores size/max without capped.
            options.remove("max");
            options.remove("size");
        }
    }
    Ok(options)
}

pub use crate::core::stored_number;

/// The largest capped size mongod accepts: 1 PB.
const ONE_PB: i64 = 1 << 50;

/// A whole-number limit at `path` as mongod's command parser reads it (`safeInt64`):
/// any number, doubles and decimals truncated (NaN is 0); anything else TypeMismatch.
fn limit_number(v: &Bson, path: &str) -> Result<i64> {
    tailstream_query::args::safe_int64(path, v)
}

/// A `create` limit (`size`, `max`) as mongod's command parser checks it: a number
/// (doubles truncated), within `[min, max]`.
fn create_limit(v: &Bson, field: &str, min: i64, max: i64) -> Result<i64> {
    let n = limit_number(v, &format!("create.{field}"))?;
    let out_of_range = |op: &str, bound: i64| {
        Error::location(
            51024,
            format!("BSON field 'create.{field}' value must be {op} {bound}, actual value '{n}'"),
        )
    };
    if n < min {
        return Err(out_of_range(">=", min));
    }
    if n > max {
        return Err(if field == "max" {
            out_of_range("<", max + 1)
        } else {
            out_of_range("<=", max)
        });
    }
    Ok(n)
}

/// mongod stores "no document limit" (a `max` of 0 or below) as 2^31 - 1.
fn adjust_capped_max(max: i64) -> i64 {
    if max <= 0 {
        0x7fff_ffff
    } else {
        max
    }
}

/// collMod's `cappedMax`: under 2^31; 0 or below means no document limit.
pub(crate) fn capped_max_for_collmod(v: &Bson) -> Result<i64> {
    let max = limit_number(v, "collMod.cappedMax")?;
    if max >= 1 << 31 {
        return Err(Error::bad_value(
            "max in a capped collection has to be < 2^31 or not set",
        ));
    }
    Ok(adjust_capped_max(max))
}

pub(crate) fn round_capped_size(v: &Bson) -> Result<i64> {
    let size = tailstream_query::compare::as_f64(v)
        .ok_or_else(|| Error::type_mismatch("capped size must be a number"))?;
    if size <= 0.0 {
        return Err(Error::bad_value("capped size must be greater than 0"));
    }
    let size = size as i64;
    if size > ONE_PB {
        return Err(Error::bad_value("size cannot exceed 1 PB"));
    }
    Ok((size + 255) / 256 * 256)
}

/// `create`'s options checked (known fields, validator, time-series and expiry
/// options normalized); a view's still carry `viewOn`.
pub(crate) fn create_options(ns: &Namespace, mut options: Document) -> Result<Document> {
    ns.validate_for_write()?;
    for k in options.keys() {
        if !CREATE_OPTIONS.contains(&k.as_str()) {
            return Err(Error::new(
                codes::UNRECOGNIZED_COMMAND_FIELD,
                format!("BSON field 'create.{k}' is an unknown field."),
            ));
        }
    }
    crate::catalog::validation::check_options("create", &options)?;
    options.remove("comment");
    if options.contains_key("pipeline") && !options.contains_key("viewOn") {
        return Err(Error::invalid_options(
            "'pipeline' requires 'viewOn' to also be specified",
        ));
    }
    if options.contains_key("timeseries") {
        crate::catalog::timeseries::normalize_create_options(ns, &mut options)?;
    } else if options.contains_key("expireAfterSeconds") {
        if !options.contains_key("clusteredIndex") {
            return Err(Error::invalid_options(
                "'expireAfterSeconds' is only supported on time-series collections or when the 'clusteredIndex' option is specified",
            ));
        }
        let secs = options
            .get("expireAfterSeconds")
            .cloned()
            .unwrap_or(Bson::Null);
        options.insert(
            "expireAfterSeconds",
            crate::catalog::timeseries::expire_after_seconds("create", &secs)?,
        );
    }
    Ok(options)
}

/// A collection's stored options, from checked `create` options.
pub(crate) fn collection_options(mut options: Document) -> Result<Document> {
    crate::catalog::clustered::normalize_options(&mut options)?;
    normalize_create_options(options)
}
/// Rewrites every pointer value of a collection with its document (before the
/// collection changes UUID, which trimming uses to find it).
pub(crate) fn materialize_collection(
    engine: &Engine,
    batch: &mut tailstream_storage::Batch<'_>,
    coll_id: u32,
) -> Result<()> {
    let prefix = keys::coll_prefix(coll_id);
    for item in engine.store.scan_prefix(Space::Docs, &prefix, false) {
        let (k, v) = item.map_err(crate::core::storage_err)?;
        if let crate::read::StoredDoc::InOplog(entry) =
            crate::read::stored_bytes(&engine.store, &v)?
        {
            batch.put(
                Space::Docs,
                &k,
                crate::read::inserted_document(&entry)?.as_bytes(),
            );
        }
    }
    Ok(())
}

/// Writes the entries of `indexes` for every document of the collection, in one pass
/// (an index build, and reIndex's rebuild); a unique index meeting a duplicate fails
/// with 11000 as mongod's index build does.
fn build_index_entries(
    store: &Store,
    txn: &mut Txn<'_>,
    ns: &Namespace,
    meta: &CollMeta,
    indexes: &[Arc<IndexMeta>],
) -> Result<()> {
    let all = Matcher::new(&Document::new())?;
    let mut scan = Scan::new(Access::CollScan { reverse: false });
    let mut seen_unique: Vec<HashSet<Vec<u8>>> = vec![HashSet::new(); indexes.len()];
    let mut chunk = Vec::new();
    // The total for currentOp and the progress lines: a scan of the keys alone, a small
    // part of the build's cost (which reads and decodes every document).
    let total = store
        .count_prefix(Space::Docs, &keys::coll_prefix(meta.id))
        .map_err(storage_err)?;
    let mut progress = ProgressMeter::new("Index Build: scanning collection", "documents", total);
    while !scan.done {
        chunk.clear();
        scan.next_batch(store, meta.id, &all, 1000, &mut chunk)?;
        progress.hit(chunk.len() as u64);
        for (id_ks, doc) in &chunk {
            for (n, index) in indexes.iter().enumerate() {
                if !index.covers(doc) {
                    continue;
                }
                let (key_sets, _) = index.keys(doc)?;
                for (values_ks, values) in encoded_keys(index, key_sets) {
                    if index.unique && !seen_unique[n].insert(values_ks.clone()) {
                        let key_value: Document = index
                            .pattern
                            .fields
                            .iter()
                            .map(|(f, _)| f.clone())
                            .zip(values)
                            .collect();
                        return Err(Error::new(
                            codes::DUPLICATE_KEY,
                            format!(
                                "Index build failed: E11000 duplicate key error collection: {} index: {} dup key: {}",
                                ns.full(),
                                index.name,
                                crate::core::format::doc_to_string(&key_value)
                            ),
                        )
                        .with_info(doc! {"keyPattern": index.key.clone(), "keyValue": key_value}));
                    }
                    txn.batch().put(
                        Space::Index,
                        &keys::index_entry_key(index.id, &values_ks, id_ks),
                        id_ks,
                    );
                }
            }
        }
    }
    Ok(())
}

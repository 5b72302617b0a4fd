//! The catalog: which collections exist, their ids, UUIDs, options and indexes.
//! Held in memory as immutable snapshots (`Arc<CollMeta>`), replaced whole on
//! every DDL change, and persisted in the `Catalog` space in the same batch as
//! the change's data and oplog entry.

pub mod buckets;
pub(crate) mod clustered;
pub mod namespace;
pub(crate) mod partial;
pub mod timeseries;
pub mod usage;
pub(crate) mod validation;
pub mod views;

use crate::catalog::namespace::Namespace;
use bson::{doc, Bson, Document};
use std::collections::BTreeMap;
use std::sync::Arc;
use tailstream_query::collation::Collator;
use tailstream_query::error::{Error, Result};
use tailstream_query::index_keys::{index_keys, KeyPattern};
use tailstream_query::index_plugin::IndexPlugin;
use tailstream_query::matcher::Matcher;

/// One secondary index (the `_id` index is implicit: documents are keyed by `_id`).
#[derive(Debug)]
pub struct IndexMeta {
    pub name: String,
    /// Storage prefix of this index's entries.
    pub id: u32,
    pub key: Document,
    pub pattern: KeyPattern,
    /// A special index type (hashed, text), None for an ordinary btree index.
    pub plugin: Option<Arc<IndexPlugin>>,
    pub unique: bool,
    pub sparse: bool,
    pub partial_filter: Option<Document>,
    pub partial_matcher: Option<Matcher>,
    pub expire_after_seconds: Option<i64>,
    /// The index's collation: its string keys are comparison keys under it.
    pub collator: Option<Arc<Collator>>,
    /// The specification as `listIndexes` reports it (`v`, `key`, `name` and options).
    pub spec: Document,
    /// The queries that used it (`$indexStats`).
    pub usage: usage::IndexUsage,
}

impl IndexMeta {
    /// Builds from a stored or validated spec document.
    pub fn from_spec(id: u32, spec: &Document) -> Result<IndexMeta> {
        let key = spec
            .get_document("key")
            .map_err(|_| Error::bad_value("index spec without key"))?
            .clone();
        let name = spec
            .get_str("name")
            .map_err(|_| Error::bad_value("index spec without name"))?
            .to_string();
        let pattern = KeyPattern::parse(&key)?;
        let collator = match spec.get_document("collation") {
            Ok(c) => Collator::parse(c)?,
            Err(_) => None,
        };
        let plugin = IndexPlugin::from_spec(spec)?.map(Arc::new);
        let partial_filter = spec.get_document("partialFilterExpression").ok().cloned();
        // As mongod: the partial filter is evaluated under the index's collation.
        let partial_matcher = match &partial_filter {
            Some(f) => Some(Matcher::with_collation(f, collator.clone())?),
            None => None,
        };
        let expire_after_seconds = match spec.get("expireAfterSeconds") {
            Some(Bson::Int32(v)) => Some(*v as i64),
            Some(Bson::Int64(v)) => Some(*v),
            Some(Bson::Double(v)) => Some(*v as i64),
            _ => None,
        };
        Ok(IndexMeta {
            name,
            id,
            key,
            pattern,
            plugin,
            unique: spec.get_bool("unique").unwrap_or(false),
            sparse: spec.get_bool("sparse").unwrap_or(false),
            partial_filter,
            partial_matcher,
            expire_after_seconds,
            collator,
            spec: spec.clone(),
            usage: Default::default(),
        })
    }

    /// The index keys of a document (values in key pattern order) and whether it makes
    /// the index multikey.
    pub fn keys(&self, doc: &Document) -> Result<(Vec<Vec<Bson>>, bool)> {
        match &self.plugin {
            Some(p) => p.keys(doc, &self.pattern),
            None => index_keys(doc, &self.pattern),
        }
    }

    pub fn collator(&self) -> Option<&Collator> {
        self.collator.as_deref()
    }

    /// The `_id` index of a collection with a default collation: `_id`s are unique, and
    /// found, under that collation (documents themselves are keyed by the exact `_id`).
    /// It is listed as the collection's `_id_` index, never as a secondary one.
    pub fn is_id_index(&self) -> bool {
        self.name == "_id_"
    }

    /// Whether a document has entries in this index (partial filter and sparseness).
    pub fn covers(&self, doc: &Document) -> bool {
        if let Some(m) = &self.partial_matcher {
            if !m.matches(doc) {
                return false;
            }
        }
        if self.sparse {
            return self
                .pattern
                .fields
                .iter()
                .any(|(path, _)| path_present(doc, path));
        }
        true
    }
}

fn path_present(doc: &Document, path: &str) -> bool {
    fn walk(v: &Bson, parts: &[&str]) -> bool {
        if parts.is_empty() {
            return true;
        }
        match v {
            Bson::Document(d) => d
                .get(parts[0])
                .map(|c| walk(c, &parts[1..]))
                .unwrap_or(false),
            Bson::Array(a) => a.iter().any(|e| walk(e, parts)),
            _ => false,
        }
    }
    let parts: Vec<&str> = path.split('.').collect();
    doc.get(parts[0])
        .map(|v| walk(v, &parts[1..]))
        .unwrap_or(false)
}

/// One collection.
#[derive(Debug)]
pub struct CollMeta {
    pub ns: Namespace,
    /// Storage prefix of this collection's documents (stable across renames).
    pub id: u32,
    pub uuid: bson::Uuid,
    /// Creation options as given to `create` (capped, size, max, validator, ...).
    pub options: Document,
    pub indexes: Vec<Arc<IndexMeta>>,
}

impl CollMeta {
    /// Whether writes keep pre- and post-images for change streams
    /// (`changeStreamPreAndPostImages: {enabled: true}`).
    pub fn images_enabled(&self) -> bool {
        self.options
            .get_document("changeStreamPreAndPostImages")
            .ok()
            .and_then(|d| d.get_bool("enabled").ok())
            .unwrap_or(false)
    }

    pub fn to_document(&self) -> Document {
        let indexes: Vec<Bson> = self
            .indexes
            .iter()
            .map(|i| Bson::Document(doc! {"id": i.id as i64, "spec": i.spec.clone()}))
            .collect();
        doc! {
            "ns": self.ns.full(),
            "id": self.id as i64,
            "uuid": bson::Binary::from_uuid(self.uuid),
            "options": self.options.clone(),
            "indexes": indexes,
        }
    }

    pub fn from_document(d: &Document) -> Result<CollMeta> {
        let bad = |what: &str| Error::internal(format!("corrupt catalog entry: {what}"));
        let ns = Namespace::parse(d.get_str("ns").map_err(|_| bad("ns"))?)?;
        let id = d.get_i64("id").map_err(|_| bad("id"))? as u32;
        let uuid = match d.get("uuid") {
            Some(Bson::Binary(b)) => b.to_uuid().map_err(|_| bad("uuid"))?,
            _ => return Err(bad("uuid")),
        };
        let options = d.get_document("options").cloned().unwrap_or_default();
        let mut indexes = Vec::new();
        for i in d.get_array("indexes").map_err(|_| bad("indexes"))? {
            let i = i.as_document().ok_or_else(|| bad("index"))?;
            let iid = i.get_i64("id").map_err(|_| bad("index id"))? as u32;
            indexes.push(Arc::new(IndexMeta::from_spec(
                iid,
                i.get_document("spec").map_err(|_| bad("spec"))?,
            )?));
        }
        Ok(CollMeta {
            ns,
            id,
            uuid,
            options,
            indexes,
        })
    }

    pub fn index_by_name(&self, name: &str) -> Option<&Arc<IndexMeta>> {
        self.indexes.iter().find(|i| i.name == name)
    }

    pub fn is_capped(&self) -> bool {
        self.options.get_bool("capped").unwrap_or(false)
    }

    /// The indexes `listIndexes` shows after `_id_`.
    pub fn secondary_indexes(&self) -> impl Iterator<Item = &Arc<IndexMeta>> {
        self.indexes.iter().filter(|i| !i.is_id_index())
    }

    /// How many indexes the collection has, `_id_` included.
    pub fn index_count(&self) -> usize {
        1 + self.secondary_indexes().count()
    }

    /// The collection's default collation (`create` with `collation`): what operations
    /// without one of their own compare strings under.
    pub fn default_collator(&self) -> Result<Option<Arc<Collator>>> {
        match self.options.get_document("collation") {
            Ok(spec) => Collator::parse(spec),
            Err(_) => Ok(None),
        }
    }

    /// A copy with a different index list (DDL builds new snapshots).
    pub fn with_indexes(&self, indexes: Vec<Arc<IndexMeta>>) -> CollMeta {
        CollMeta {
            ns: self.ns.clone(),
            id: self.id,
            uuid: self.uuid,
            options: self.options.clone(),
            indexes,
        }
    }

    /// The `_id` index as `listIndexes` shows it.
    pub fn id_index_spec() -> Document {
        doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    }

    /// This collection's `_id` index specification: it has the collection's collation.
    pub fn id_index_spec_of(options: &Document) -> Document {
        let mut spec = Self::id_index_spec();
        if let Ok(c) = options.get_document("collation") {
            spec.insert("collation", c.clone());
        }
        spec
    }

    /// The normalised `timeseries` options of a time-series collection.
    pub fn timeseries(&self) -> Option<&Document> {
        self.options.get_document("timeseries").ok()
    }

    pub fn is_timeseries(&self) -> bool {
        self.timeseries().is_some()
    }

    /// The namespace of this collection's oplog entries. A time-series collection's
    /// writes go under `<db>.system.buckets.<name>`, where mongod logs its bucket writes:
    /// change streams never show them (a system namespace), as on mongod.
    pub fn oplog_ns(&self) -> String {
        if self.is_timeseries() {
            format!("{}.system.buckets.{}", self.ns.db, self.ns.coll)
        } else {
            self.ns.full()
        }
    }

    /// Whether the collection was created with `clusteredIndex`.
    pub fn is_clustered(&self) -> bool {
        self.options.contains_key("clusteredIndex")
    }

    /// This collection's `_id` index as `listIndexes` shows it: a clustered collection's
    /// carries the name it was given and `clustered: true`.
    pub fn id_index(&self) -> Document {
        match self.options.get_document("clusteredIndex") {
            Ok(spec) => {
                let mut d = spec.clone();
                d.insert("clustered", true);
                d
            }
            Err(_) => Self::id_index_spec_of(&self.options),
        }
    }
}

/// A view: a read-only pipeline over another collection or view of its database.
/// Its definition is a document of `<db>.system.views` (as on mongod); the catalog
/// holds it parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewMeta {
    pub ns: Namespace,
    /// The collection or view it reads (same database).
    pub view_on: String,
    pub pipeline: Vec<Document>,
    pub collation: Option<Document>,
}

impl ViewMeta {
    /// The `system.views` document: `{_id: "<db>.<name>", viewOn, pipeline, collation?}`.
    pub fn definition(&self) -> Document {
        let mut d = doc! {"_id": self.ns.full()};
        d.extend(self.options());
        d
    }

    /// The options `listCollections` reports: `{viewOn, pipeline, collation?}`.
    pub fn options(&self) -> Document {
        let pipeline: Vec<Bson> = self.pipeline.iter().cloned().map(Bson::Document).collect();
        let mut d = doc! {"viewOn": self.view_on.clone(), "pipeline": pipeline};
        if let Some(c) = &self.collation {
            d.insert("collation", c.clone());
        }
        d
    }

    /// Parses a `system.views` document of database `db`.
    pub fn from_definition(db: &str, d: &Document) -> Result<ViewMeta> {
        let bad = |what: &str| {
            Error::internal(format!(
                "invalid view definition in {db}.system.views: {what}: {}",
                crate::core::format::doc_to_string(d)
            ))
        };
        let ns =
            Namespace::parse(d.get_str("_id").map_err(|_| bad("_id"))?).map_err(|_| bad("_id"))?;
        if ns.db != db {
            return Err(bad("_id names another database"));
        }
        let view_on = d.get_str("viewOn").map_err(|_| bad("viewOn"))?.to_string();
        let pipeline = d
            .get_array("pipeline")
            .map_err(|_| bad("pipeline"))?
            .iter()
            .map(|s| {
                s.as_document()
                    .cloned()
                    .ok_or_else(|| bad("pipeline stage"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ViewMeta {
            ns,
            view_on,
            pipeline,
            collation: d.get_document("collation").ok().cloned(),
        })
    }
}

/// All collections and views by full namespace, plus id counters.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    pub colls: BTreeMap<String, Arc<CollMeta>>,
    pub views: BTreeMap<String, Arc<ViewMeta>>,
    pub next_coll_id: u32,
    pub next_index_id: u32,
}

impl Catalog {
    pub fn get(&self, ns: &Namespace) -> Option<Arc<CollMeta>> {
        ns.with_full(|full| self.colls.get(full).cloned())
    }

    pub fn view(&self, ns: &Namespace) -> Option<Arc<ViewMeta>> {
        ns.with_full(|full| self.views.get(full).cloned())
    }

    pub fn views_in(&self, db: &str) -> Vec<Arc<ViewMeta>> {
        self.views
            .values()
            .filter(|v| v.ns.db == db)
            .cloned()
            .collect()
    }

    pub fn databases(&self) -> Vec<String> {
        let mut dbs: Vec<String> = self.colls.values().map(|c| c.ns.db.clone()).collect();
        dbs.dedup();
        dbs.sort();
        dbs.dedup();
        dbs
    }

    pub fn collections_in(&self, db: &str) -> Vec<Arc<CollMeta>> {
        self.colls
            .values()
            .filter(|c| c.ns.db == db)
            .cloned()
            .collect()
    }

    pub fn counters_document(&self) -> Document {
        doc! {"nextCollId": self.next_coll_id as i64, "nextIndexId": self.next_index_id as i64}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_meta_roundtrips_through_bson() {
        let idx = IndexMeta::from_spec(
            7,
            &doc! {"v": 2, "key": {"a": 1}, "name": "a_1", "unique": true},
        )
        .unwrap();
        let meta = CollMeta {
            ns: Namespace::new("db", "c"),
            id: 3,
            uuid: bson::Uuid::new(),
            options: doc! {"capped": true, "size": 4096},
            indexes: vec![Arc::new(idx)],
        };
        let back = CollMeta::from_document(&meta.to_document()).unwrap();
        assert_eq!(back.ns, meta.ns);
        assert_eq!(back.id, 3);
        assert_eq!(back.uuid, meta.uuid);
        assert!(back.is_capped());
        assert!(back.indexes[0].unique);
        assert_eq!(back.indexes[0].id, 7);
    }

    #[test]
    fn sparse_and_partial_coverage() {
        let sparse = IndexMeta::from_spec(
            1,
            &doc! {"v": 2, "key": {"a.b": 1}, "name": "x", "sparse": true},
        )
        .unwrap();
        assert!(sparse.covers(&doc! {"a": [{"b": 1}]}));
        assert!(!sparse.covers(&doc! {"a": {"c": 1}}));
        let partial = IndexMeta::from_spec(
            2,
            &doc! {"v": 2, "key": {"a": 1}, "name": "y", "partialFilterExpression": {"a": {"$gt": 5}}},
        )
        .unwrap();
        assert!(partial.covers(&doc! {"a": 6}));
        assert!(!partial.covers(&doc! {"a": 1}));
    }
}

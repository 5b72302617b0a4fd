//! Storage statistics as mongod reports them: collStats and `$collStats:
//! {storageStats}` (one document per collection, `local.oplog.rs` included, which is
//! a capped collection on mongod), and the index sizes dbStats adds up.
//!
//! Sizes are the bytes the store holds for a collection: its documents, and for each
//! index its entries (keys and values; the `_id` index is the documents' keys). The
//! number types are mongod's: `appendNumber` fields are 32-bit ints while they fit.

use crate::catalog::namespace::Namespace;
use crate::catalog::CollMeta;
use crate::core::{keys, storage_err, stored_number};
use crate::oplog::{OPLOG_COLL, OPLOG_DB};
use crate::Engine;
use bson::{doc, Bson, Document};
use tailstream_query::error::Result;
use tailstream_storage::Space;

/// The name mongod gives a collection's `_id` index.
const ID_INDEX_NAME: &str = "_id_";

/// What collStats reports of one collection, in bytes before scaling.
struct Numbers {
    count: i64,
    data_bytes: i64,
    capped: Option<CappedLimits>,
    index_sizes: Vec<(String, i64)>,
    /// The `nindexes` field (a time-series collection has no `_id` index).
    nindexes: i32,
}

/// A capped collection's limits: documents (0: none) and bytes.
struct CappedLimits {
    max_docs: i64,
    max_bytes: i64,
}

impl Engine {
    /// mongod's storage statistics of `ns` (collStats without `ns` and `ok`, and the
    /// `storageStats` of `$collStats`), sizes divided by `scale`; None when `ns` is
    /// neither a collection nor the oplog.
    pub fn storage_stats(&self, ns: &Namespace, scale: i64) -> Result<Option<Document>> {
        let numbers = if ns.db == OPLOG_DB && ns.coll == OPLOG_COLL {
            self.oplog_numbers()?
        } else {
            match self.collection(ns) {
                Some(meta) => self.collection_storage_numbers(&meta)?,
                None => return Ok(None),
            }
        };
        Ok(Some(stats_document(&numbers, scale.max(1))))
    }

    /// Bytes of each of the collection's indexes, `_id_` first (unscaled).
    pub fn index_sizes(&self, meta: &CollMeta) -> Result<Vec<(String, i64)>> {
        let mut sizes = Vec::new();
        if !meta.is_timeseries() {
            let ids = self
                .store
                .prefix_size(Space::Docs, &keys::coll_prefix(meta.id))
                .map_err(storage_err)?;
            sizes.push((ID_INDEX_NAME.to_string(), ids.key_bytes as i64));
        }
        for index in meta.secondary_indexes() {
            let entries = self
                .store
                .prefix_size(Space::Index, &keys::index_prefix(index.id))
                .map_err(storage_err)?;
            let bytes = entries.key_bytes + entries.value_bytes;
            sizes.push((index.name.clone(), bytes as i64));
        }
        Ok(sizes)
    }

    fn collection_storage_numbers(&self, meta: &CollMeta) -> Result<Numbers> {
        let (count, data_bytes) = self.collection_numbers(meta);
        let capped = meta.is_capped().then(|| CappedLimits {
            // As mongod: 0 when the collection has no document limit.
            max_docs: option_number(meta, "max"),
            max_bytes: option_number(meta, "size"),
        });
        Ok(Numbers {
            count,
            data_bytes,
            capped,
            index_sizes: self.index_sizes(meta)?,
            nindexes: meta.index_count() as i32 - i32::from(meta.is_timeseries()),
        })
    }

    /// The oplog as mongod reports it: a capped collection of its retained entries,
    /// with no document limit, the oplog's cap as its size limit and no index.
    fn oplog_numbers(&self) -> Result<Numbers> {
        let (floor, bytes) = {
            let w = self.writer.lock();
            (w.trim_ts, w.oplog_bytes)
        };
        let entries = self
            .store
            .range_size(Space::Oplog, &keys::oplog_key(floor), None)
            .map_err(storage_err)?
            .entries;
        Ok(Numbers {
            count: entries as i64,
            data_bytes: bytes as i64,
            capped: Some(CappedLimits {
                max_docs: 0,
                max_bytes: self.opts.oplog_size_bytes as i64,
            }),
            index_sizes: Vec::new(),
            nindexes: 0,
        })
    }
}

/// A whole-number collection option (`max`, `size` of a capped collection), 0 if unset.
fn option_number(meta: &CollMeta, name: &str) -> i64 {
    meta.options
        .get(name)
        .and_then(crate::read::find::as_i64)
        .unwrap_or(0)
}

/// The statistics in mongod's order and number types (storage_stats.cpp). Storage
/// size is the data size: the store does not report a collection's compressed size.
fn stats_document(n: &Numbers, scale: i64) -> Document {
    let index_total: i64 = n.index_sizes.iter().map(|(_, b)| b).sum();
    let mut out = doc! {
        "size": stored_number(n.data_bytes / scale),
        "count": stored_number(n.count),
    };
    if n.count > 0 {
        out.insert("avgObjSize", stored_number(n.data_bytes / n.count));
    }
    out.insert("numOrphanDocs", 0);
    out.insert("storageSize", stored_number(n.data_bytes / scale));
    out.insert("freeStorageSize", 0);
    out.insert("capped", n.capped.is_some());
    if let Some(limits) = &n.capped {
        out.insert("max", stored_number(limits.max_docs));
        out.insert("maxSize", stored_number(limits.max_bytes / scale));
    }
    let index_sizes: Document = n
        .index_sizes
        .iter()
        .map(|(name, bytes)| (name.clone(), stored_number(bytes / scale)))
        .collect();
    out.insert("nindexes", n.nindexes);
    out.insert("indexDetails", Document::new());
    out.insert("indexBuilds", Bson::Array(Vec::new()));
    out.insert("totalIndexSize", stored_number(index_total / scale));
    out.insert("indexSizes", index_sizes);
    out.insert(
        "totalSize",
        stored_number((n.data_bytes + index_total) / scale),
    );
    out.insert("scaleFactor", i32::try_from(scale).unwrap_or(i32::MAX));
    out
}

//! The `validate` command's check of one collection: every stored document must be
//! readable, well-formed BSON, and every index must hold exactly the entries its
//! documents produce.

use crate::catalog::CollMeta;
use crate::{core::keys, core::storage_err, read, Engine};
use tailstream_query::error::Result;
use tailstream_storage::Space;

/// What one validation found.
#[derive(Debug, Default)]
pub struct Validation {
    /// Documents read.
    pub records: i64,
    /// Documents whose bytes could not be read or are not valid BSON.
    pub corrupt_records: i64,
    /// Per secondary index (catalog order): name, entries stored, entries its documents produce.
    pub indexes: Vec<(String, i64, i64)>,
}

impl Validation {
    pub fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.corrupt_records > 0 {
            errors.push(format!(
                "{} document(s) could not be read as valid BSON",
                self.corrupt_records
            ));
        }
        for (name, stored, expected) in &self.indexes {
            if stored != expected {
                errors.push(format!(
                    "index {name} has {stored} entries but its documents produce {expected}"
                ));
            }
        }
        errors
    }
}

impl Engine {
    /// Reads every document and index entry of a collection (a full scan).
    pub fn validate_collection(&self, meta: &CollMeta) -> Result<Validation> {
        let mut v = Validation::default();
        let mut expected = vec![0i64; meta.indexes.len()];
        let prefix = keys::coll_prefix(meta.id);
        for item in self.store.scan_prefix(Space::Docs, &prefix, false) {
            let (_, value) = item.map_err(storage_err)?;
            v.records += 1;
            let doc = match read::stored_bytes(&self.store, &value) {
                Ok(read::StoredDoc::InOplog(entry)) => read::inserted_document(&entry)
                    .ok()
                    .and_then(|raw| bson::Document::try_from(raw).ok()),
                Ok(read::StoredDoc::Inline) => bson::RawDocument::from_bytes(&value)
                    .ok()
                    .and_then(|raw| bson::Document::try_from(raw).ok()),
                Err(_) => None,
            };
            let Some(doc) = doc else {
                v.corrupt_records += 1;
                continue;
            };
            for (i, index) in meta.indexes.iter().enumerate() {
                if index.covers(&doc) {
                    expected[i] += index
                        .keys(&doc)
                        .map(|(sets, _)| crate::write::encoded_keys(index, sets).len() as i64)
                        .unwrap_or(0);
                }
            }
        }
        for (i, index) in meta.indexes.iter().enumerate() {
            let stored = self
                .store
                .scan_prefix(Space::Index, &keys::index_prefix(index.id), false)
                .count() as i64;
            v.indexes.push((index.name.clone(), stored, expected[i]));
        }
        Ok(v)
    }
}

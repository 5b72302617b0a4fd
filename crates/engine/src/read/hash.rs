//! MD5 digests of stored data, as mongod computes them: `dbHash` (a collection's
//! documents in `_id` order, their BSON bytes) and `filemd5` (a GridFS file's chunks'
//! bytes in `n` order). Replica-set consistency checks and mongo-tools compare them.

use crate::catalog::namespace::Namespace;
use crate::read::find::FindRequest;
use crate::Engine;
use bson::{doc, Bson, Document};
use md5::{Digest, Md5};
use std::ops::ControlFlow;
use tailstream_query::error::{Error, Result};

/// Documents fetched per batch while hashing.
const HASH_BATCH: i64 = 1000;

/// What `filemd5` found: the number of chunks read and the digest of their data.
pub struct FileDigest {
    pub num_chunks: i32,
    pub md5: String,
}

impl Engine {
    /// The MD5 of a collection's documents' BSON bytes, in `_id` order (mongod's
    /// `dbHash` per collection); lowercase hex.
    pub fn collection_md5(&self, ns: &Namespace) -> Result<String> {
        let request = FindRequest {
            sort: Some(doc! {"_id": 1}),
            batch_size: Some(HASH_BATCH),
            ..Default::default()
        };
        let mut md5 = Md5::new();
        self.for_each_batch(ns, request, Some(HASH_BATCH), |docs| {
            for d in &docs {
                md5.update(bson_bytes(d)?);
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(hex(&md5.finalize()))
    }

    /// The MD5 of a GridFS file's chunks (`files_id` equal to `files_id`, `n` from 0
    /// on, each chunk's `data`), as mongod's `filemd5`: the chunks must be numbered 0,
    /// 1, 2, … (10040 "chunks out of order" otherwise) and read through an index on
    /// `files_id` (mongod plans it without a collection scan: 291 without one).
    pub fn file_md5(&self, chunks: &Namespace, files_id: &Bson) -> Result<FileDigest> {
        if let Some(meta) = self.collection(chunks) {
            let indexed = meta
                .secondary_indexes()
                .any(|i| i.key.keys().next().is_some_and(|k| k == "files_id"));
            if !indexed {
                return Err(Error::new(NO_QUERY_EXECUTION_PLANS, "No query solutions"));
            }
        }
        let request = FindRequest {
            filter: doc! {"files_id": files_id.clone(), "n": {"$gte": 0}},
            sort: Some(doc! {"files_id": 1, "n": 1}),
            batch_size: Some(HASH_BATCH),
            ..Default::default()
        };
        let mut md5 = Md5::new();
        let mut n = 0i32;
        self.for_each_batch(chunks, request, Some(HASH_BATCH), |docs| {
            for chunk in &docs {
                let number = chunk
                    .get("n")
                    .and_then(crate::read::find::as_i64)
                    .ok_or_else(|| Error::internal("a chunk's n is not a number"))?;
                if number != i64::from(n) {
                    return Err(Error::new(CHUNKS_OUT_OF_ORDER, "chunks out of order"));
                }
                md5.update(chunk_data(chunk)?);
                n += 1;
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(FileDigest {
            num_chunks: n,
            md5: hex(&md5.finalize()),
        })
    }
}

/// mongod's NoQueryExecutionPlans: filemd5 without an index on `files_id`.
const NO_QUERY_EXECUTION_PLANS: i32 = 291;
/// mongod's code for a chunk whose `n` is not the next number.
const CHUNKS_OUT_OF_ORDER: i32 = 10040;
/// mongod's codes for a chunk without `data`, and with `data` not binary.
const CHUNK_WITHOUT_DATA: i32 = 50848;
const CHUNK_DATA_NOT_BINARY: i32 = 50849;

fn chunk_data(chunk: &Document) -> Result<&[u8]> {
    match chunk.get("data") {
        Some(Bson::Binary(b)) => Ok(&b.bytes),
        None => Err(Error::new(
            CHUNK_WITHOUT_DATA,
            "The element that calls binDataClean() must be type of BinData, but type of misisng found. Field name is required",
        )),
        Some(other) => Err(Error::new(
            CHUNK_DATA_NOT_BINARY,
            format!(
                "The element that calls binDataClean() must be type of BinData, but type of {} found.",
                other.element_type() as u8
            ),
        )),
    }
}

fn bson_bytes(d: &Document) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    d.to_writer(&mut bytes)
        .map_err(|e| Error::internal(format!("cannot encode a stored document: {e}")))?;
    Ok(bytes)
}

/// Lowercase hex, as mongod's `digestToString`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::hex;
    use md5::{Digest, Md5};

    #[test]
    fn hex_is_mongods_digest_string() {
        assert_eq!(hex(&Md5::digest(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&[0x00, 0x0f, 0xa0]), "000fa0");
    }
}

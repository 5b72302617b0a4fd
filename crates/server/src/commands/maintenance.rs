//! Data checks and storage maintenance: `dbHash`, `filemd5`, `reIndex`, `compact`.

use super::{blocking, collection_arg};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use std::time::Instant;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};

/// Collections dbHash leaves out, as mongod: those the oplog does not replicate, and
/// incremental map-reduce output.
fn hashed(db: &str, coll: &str) -> bool {
    db != "local" && coll != "system.profile" && !coll.starts_with("tmp.mr.")
}

/// `dbHash`: the MD5 of each collection's documents in `_id` order, and of those
/// digests in name order (`md5`), with the capped collections and every collection's
/// UUID; `collections: [names]` limits it to those.
pub async fn db_hash(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let started = Instant::now();
    let wanted = wanted_collections(cmd)?;
    let mut metas = state.engine.catalog().collections_in(db);
    metas.retain(|m| {
        hashed(db, &m.ns.coll) && wanted.as_ref().is_none_or(|w| w.contains(&m.ns.coll))
    });
    // A time-series collection is hashed as mongod hashes it: its buckets, under
    // `system.buckets.<name>`.
    let hashed_name = |m: &tailstream_engine::catalog::CollMeta| {
        if m.is_timeseries() {
            format!(
                "{}{}",
                tailstream_engine::catalog::buckets::BUCKETS_PREFIX,
                m.ns.coll
            )
        } else {
            m.ns.coll.clone()
        }
    };
    metas.sort_by_key(|m| hashed_name(m));
    let names: Vec<Namespace> = metas
        .iter()
        .map(|m| Namespace::new(db, &hashed_name(m)))
        .collect();
    let digests = blocking(state, move |e| {
        names
            .iter()
            .map(|ns| e.collection_md5(ns))
            .collect::<Result<Vec<_>>>()
    })
    .await?;
    let mut collections = Document::new();
    let mut uuids = Document::new();
    let mut all = String::new();
    for (meta, digest) in metas.iter().zip(&digests) {
        collections.insert(hashed_name(meta), digest.clone());
        uuids.insert(hashed_name(meta), bson::Binary::from_uuid(meta.uuid));
        all.push_str(digest);
    }
    let capped: Vec<Bson> = metas
        .iter()
        .filter(|m| m.is_capped())
        .map(|m| Bson::String(m.ns.coll.clone()))
        .collect();
    Ok(doc! {
        "host": state.config.advertised_host(),
        "collections": collections,
        "capped": capped,
        "uuids": uuids,
        "md5": md5_hex(all.as_bytes()),
        "timeMillis": started.elapsed().as_millis() as i32,
    })
}

/// `collections`, when an array: the names to hash (BadValue for a name not a string).
fn wanted_collections(cmd: &Document) -> Result<Option<Vec<String>>> {
    let Some(Bson::Array(names)) = cmd.get("collections") else {
        return Ok(None);
    };
    names
        .iter()
        .map(|n| match n {
            Bson::String(s) => Ok(s.clone()),
            _ => Err(Error::bad_value("collections entries have to be strings")),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The GridFS bucket's name when `root` is not given.
const DEFAULT_GRIDFS_ROOT: &str = "fs";

/// `filemd5: <files_id>, root: <bucket>`: the MD5 of a GridFS file's chunks, from
/// `<root>.chunks` (`numChunks`, `md5`). `partialOk` (resuming from mongod's internal
/// MD5 state) is refused: that state is mongod's C struct, which no driver builds.
pub async fn file_md5(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let root = match cmd.get("root") {
        None => DEFAULT_GRIDFS_ROOT.to_string(),
        Some(Bson::String(s)) if s.is_empty() => DEFAULT_GRIDFS_ROOT.to_string(),
        Some(Bson::String(s)) => s.clone(),
        Some(_) => {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                "'root' must be of type String",
            ))
        }
    };
    if super::opt_bool(cmd, "partialOk")?.unwrap_or(false) {
        return Err(Error::bad_value("filemd5's partialOk is not supported"));
    }
    let chunks = Namespace::new(db, &format!("{root}.chunks"));
    let files_id = cmd.get("filemd5").cloned().unwrap_or(Bson::Null);
    let digest = blocking(state, move |e| e.file_md5(&chunks, &files_id)).await?;
    Ok(doc! {"numChunks": digest.num_chunks, "md5": digest.md5})
}

/// `reIndex`: the collection's indexes rebuilt from its documents. mongod 7.0 runs it
/// only on a standalone; here it runs (the rebuild is one local commit, not replicated).
pub async fn re_index(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let (specs, _) = blocking(state, move |e| e.reindex(&ns)).await?;
    let count = specs.len() as i32;
    Ok(doc! {
        "nIndexesWas": count,
        "nIndexes": count,
        "indexes": specs.into_iter().map(Bson::Document).collect::<Vec<_>>(),
    })
}

/// `compact`: the collection's data and indexes compacted in the store; `bytesFreed`
/// as mongod reports it. `force` and `freeSpaceTargetMB` are accepted (there is no
/// primary to protect: this server's one member may always compact).
pub async fn compact(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    super::opt_bool(cmd, "force")?;
    super::opt_i64(cmd, "freeSpaceTargetMB")?;
    let freed = blocking(state, move |e| e.compact_collection(&ns)).await?;
    Ok(doc! {"bytesFreed": freed as i64})
}

//! `parallelChangeStream` (issue 28, seed 004): the deployment's change stream split
//! into buckets, each a cursor read with ordinary `getMore`s on `admin.$cmd.aggregate`
//! (the engine's `changestream::bucket` says how events are spread).
//!
//! ```text
//! db.adminCommand({parallelChangeStream: 1, nBuckets: N, nsRegex: /re/,
//!                  startAtOperationTime: ts, by: "ns" | "documentKey",
//!                  pipeline: [...], fullDocument: ..., fullDocumentBeforeChange: ...,
//!                  showExpandedEvents: bool})
//! → {cursors: [NumberLong, ...], ns: "admin.$cmd.aggregate", ok: 1}
//! ```
//!
//! The reply has the seed's shape (its users can switch); a bucket's getMores return
//! its events and its `postBatchResumeToken`. Resuming: `resumeAfter` with one token
//! resumes every bucket after it (the seed's rule, at least once); with an array of a
//! token per bucket (each bucket's last `postBatchResumeToken`, in the order of
//! `cursors`), every bucket resumes after its own (exactly once).

use super::{blocking, type_name, Document};
use crate::state::ServerState;
use bson::{doc, Bson};
use std::sync::Arc;
use tailstream_engine::changestream::bucket::{self, Split};
use tailstream_engine::query::error::{Error, Result};

/// The `$changeStream` options a parallel stream passes to each of its buckets.
const STREAM_OPTIONS: [&str; 6] = [
    "fullDocument",
    "fullDocumentBeforeChange",
    "showExpandedEvents",
    "startAtOperationTime",
    "resumeAfter",
    "startAfter",
];

/// The name the split's fields are reported under.
const COMMAND: &str = "parallelChangeStream";

/// `pipeline`: the stages after `$changeStream`, in every bucket.
fn stages(cmd: &Document) -> Result<Vec<Document>> {
    match cmd.get("pipeline") {
        None => Ok(Vec::new()),
        Some(Bson::Array(items)) => items
            .iter()
            .map(|s| match s {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(Error::type_mismatch(format!(
                    "Each element of the 'pipeline' array must be an object, not {}",
                    type_name(other)
                ))),
            })
            .collect(),
        Some(other) => Err(Error::type_mismatch(format!(
            "BSON field 'parallelChangeStream.pipeline' is the wrong type '{}', expected type 'array'",
            type_name(other)
        ))),
    }
}

/// `resumeAfter` or `startAfter` given as an array: a token per bucket, in bucket
/// order (each bucket resumes after what it returned last: exactly once).
fn per_bucket_tokens(cmd: &Document, count: u32) -> Result<Option<(&'static str, Vec<Bson>)>> {
    for key in ["resumeAfter", "startAfter"] {
        if let Some(Bson::Array(tokens)) = cmd.get(key) {
            if tokens.len() != count as usize {
                return Err(Error::bad_value(format!(
                    "{key} holds {} tokens for {count} buckets: give one token for every \
                     bucket, or a single token for all of them",
                    tokens.len()
                )));
            }
            return Ok(Some((key, tokens.clone())));
        }
    }
    Ok(None)
}

pub async fn run(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let count = bucket::parse_count(cmd, COMMAND)?;
    let regex = bucket::parse_ns_regex(cmd, COMMAND)?;
    let by = bucket::parse_by(cmd, COMMAND)?;
    let stages = stages(cmd)?;
    let per_bucket = per_bucket_tokens(cmd, count)?;
    let mut opts = Document::new();
    for k in STREAM_OPTIONS {
        match cmd.get(k) {
            Some(Bson::Array(_)) => {} // per bucket (above)
            Some(v) => {
                opts.insert(k, v.clone());
            }
            None => {}
        }
    }
    let lsid = cmd.get("lsid").cloned();
    let split = Split {
        count,
        by,
        ns_regex: regex,
        per_bucket,
    };
    let buckets = blocking(state, move |e| {
        e.open_parallel_change_stream(&opts, &stages, split, lsid)
    })
    .await?;
    let ids: Vec<Bson> = buckets.iter().map(|b| Bson::Int64(b.cursor_id)).collect();
    Ok(doc! {"cursors": ids, "ns": "admin.$cmd.aggregate"})
}

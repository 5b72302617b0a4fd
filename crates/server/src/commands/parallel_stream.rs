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
use tailstream_engine::changestream::bucket::{compile, BucketBy, Split, MAX_BUCKETS};
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

/// mongod's IDL code for a required field that is missing.
const IDL_MISSING_FIELD: i32 = 40414;

fn field_error(code: i32, message: String) -> Error {
    Error::new(code, message)
}

/// `nBuckets`: a number from 1 to [`MAX_BUCKETS`].
fn bucket_count(cmd: &Document) -> Result<u32> {
    let v = cmd.get("nBuckets").ok_or_else(|| {
        field_error(
            IDL_MISSING_FIELD,
            "BSON field 'parallelChangeStream.nBuckets' is missing but a required field".into(),
        )
    })?;
    let n = match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(d) if d.fract() == 0.0 => *d as i64,
        other => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'parallelChangeStream.nBuckets' is the wrong type '{}', expected types '[long, int, decimal, double]'",
                type_name(other)
            )))
        }
    };
    if !(1..=i64::from(MAX_BUCKETS)).contains(&n) {
        return Err(Error::bad_value(format!(
            "nBuckets must be between 1 and {MAX_BUCKETS}, not {n}"
        )));
    }
    Ok(u32::try_from(n).expect("checked above"))
}

/// `nsRegex`: a regular expression (its `i`, `m`, `s` and `x` options kept) or a
/// string pattern.
fn ns_regex(cmd: &Document) -> Result<Option<regex::Regex>> {
    let (pattern, options) = match cmd.get("nsRegex") {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::RegularExpression(re)) => (re.pattern.clone(), re.options.clone()),
        Some(Bson::String(s)) => (s.clone(), String::new()),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'parallelChangeStream.nsRegex' is the wrong type '{}', expected types '[regex, string]'",
                type_name(other)
            )))
        }
    };
    compile(&pattern, &options).map(Some)
}

/// `by`: "ns" (the default) or "documentKey".
fn bucket_by(cmd: &Document) -> Result<BucketBy> {
    match cmd.get("by") {
        None => Ok(BucketBy::Namespace),
        Some(Bson::String(s)) if s == "ns" => Ok(BucketBy::Namespace),
        Some(Bson::String(s)) if s == "documentKey" => Ok(BucketBy::DocumentKey),
        Some(other) => Err(Error::bad_value(format!(
            "parallelChangeStream's 'by' must be \"ns\" or \"documentKey\", not {other}"
        ))),
    }
}

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
    let count = bucket_count(cmd)?;
    let regex = ns_regex(cmd)?;
    let by = bucket_by(cmd)?;
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

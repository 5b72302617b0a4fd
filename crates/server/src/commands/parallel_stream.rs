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
//!
//! Consumer groups (the engine's `changestream::consumer_group`): with `group` and
//! `consumer`, the call joins the group (creating it, from the split's fields, on the
//! first join) and returns the cursors of the buckets handed to this consumer, each
//! starting after the group's committed position of its bucket:
//!
//! ```text
//! db.adminCommand({parallelChangeStream: 1, group: "g", consumer: "c1", nBuckets: N,
//!                  leaseMS: 10000, ...the split's fields as above})
//! → {cursors: [...], buckets: [i, ...], ns, group, consumer, nBuckets, leaseMS,
//!    generation, ok: 1}
//! db.adminCommand({commitChangeStreamGroup: "g", consumer: "c1", bucket: i,
//!                  resumeToken: <the bucket's latest postBatchResumeToken>})
//! ```
//!
//! The commit runs inside the session's transaction when there is one (then it
//! happens with the consumer's own writes, or neither does).

use super::args::{opt_i64, opt_str};
use super::{blocking, in_transaction, type_name, Document};
use crate::state::ServerState;
use bson::{doc, Bson};
use std::sync::Arc;
use tailstream_engine::changestream::bucket::{self, Split};
use tailstream_engine::changestream::consumer_group::{JoinRequest, DEFINITION_FIELDS};
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
    if cmd.contains_key("group") {
        return join(state, cmd).await;
    }
    let count = bucket::parse_count(cmd, COMMAND)?;
    let regex = bucket::parse_ns_regex(cmd, COMMAND)?;
    let by = bucket::parse_by(cmd, COMMAND)?;
    let stages = bucket::parse_pipeline(cmd, COMMAND)?;
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

/// A required string field.
fn required_str<'a>(cmd: &'a Document, owner: &str, field: &str) -> Result<&'a str> {
    opt_str(cmd, field)?.ok_or_else(|| {
        Error::new(
            40414,
            format!("BSON field '{owner}.{field}' is missing but a required field"),
        )
    })
}

/// `parallelChangeStream` with `group`: a consumer joins the group and gets its
/// buckets' cursors.
async fn join(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let group = required_str(cmd, COMMAND, "group")?.to_string();
    let consumer = required_str(cmd, COMMAND, "consumer")?.to_string();
    if ["resumeAfter", "startAfter"]
        .iter()
        .any(|k| cmd.contains_key(*k))
    {
        return Err(Error::new(
            tailstream_engine::query::error::codes::INVALID_OPTIONS,
            "a change stream group resumes each bucket from its committed position: \
             resumeAfter and startAfter do not apply",
        ));
    }
    bucket::parse_pipeline(cmd, COMMAND)?;
    let mut given = Document::new();
    for k in DEFINITION_FIELDS {
        if let Some(v) = cmd.get(k) {
            given.insert(k, v.clone());
        }
    }
    let req = JoinRequest {
        group: group.clone(),
        consumer: consumer.clone(),
        given,
        lsid: cmd.get("lsid").cloned(),
    };
    let joined = blocking(state, move |e| e.join_consumer_group(req)).await?;
    let ids: Vec<Bson> = joined
        .buckets
        .iter()
        .map(|(_, b, _)| Bson::Int64(b.cursor_id))
        .collect();
    let buckets: Vec<Bson> = joined
        .buckets
        .iter()
        .map(|(i, _, _)| Bson::Int32(*i as i32))
        .collect();
    Ok(doc! {
        "cursors": ids,
        "buckets": buckets,
        "ns": "admin.$cmd.aggregate",
        "group": group,
        "consumer": consumer,
        "nBuckets": joined.count as i32,
        "leaseMS": joined.lease_ms,
        "generation": joined.generation as i64,
    })
}

/// `commitChangeStreamGroup`: a consumer stores a bucket's position (the group's
/// resume point for it), in its transaction when it runs one.
pub async fn commit(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    const OWNER: &str = "commitChangeStreamGroup";
    let group = match cmd.get(OWNER) {
        Some(Bson::String(g)) => g.clone(),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field '{OWNER}' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )))
        }
        None => return Err(Error::bad_value("commitChangeStreamGroup names a group")),
    };
    let consumer = required_str(cmd, OWNER, "consumer")?.to_string();
    let b = opt_i64(cmd, "bucket")?.ok_or_else(|| {
        Error::new(
            40414,
            format!("BSON field '{OWNER}.bucket' is missing but a required field"),
        )
    })?;
    let b = u32::try_from(b)
        .map_err(|_| Error::bad_value(format!("bucket must be a bucket number, not {b}")))?;
    let token = match cmd.get("resumeToken") {
        Some(Bson::Document(t)) => t.clone(),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field '{OWNER}.resumeToken' is the wrong type '{}', expected type 'object'",
                type_name(other)
            )))
        }
        None => {
            return Err(Error::new(
                40414,
                format!("BSON field '{OWNER}.resumeToken' is missing but a required field"),
            ))
        }
    };
    let wc = super::write::parse_write_concern(cmd)?;
    let (ns, op) = state.engine.group_commit(&group, &consumer, b, &token)?;
    let fenced = state.engine.group_fenced(&group, &consumer, b);
    let out = match crate::transactions::current() {
        Some(t) => {
            in_transaction(state, t, move |e, t| {
                e.transaction_update(t, &ns, vec![op], true)
            })
            .await?
        }
        None => blocking(state, move |e| e.update(&ns, vec![op], true)).await?,
    };
    if let Some(w) = out.errors.first() {
        return Err(w.error.clone());
    }
    if out.n == 0 {
        return Err(fenced);
    }
    let mut reply = Document::new();
    if crate::transactions::current().is_none() {
        if let Some(w) = super::write::await_write_concern(state, wc, out.committed).await {
            reply.insert("writeConcernError", w);
        }
    }
    Ok(reply)
}

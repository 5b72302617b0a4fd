//! The documents of users and roles (`admin.system.users`, `admin.system.roles`), read
//! and written through the engine like any collection, so they are durable, in the
//! oplog and dumped by the tools. Every write moves the [`generation`] on: sessions
//! resolve their grants again before their next command (mongod's user cache
//! invalidation), so a change applies to connections already authenticated.

use crate::commands::blocking;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tailstream_engine::find::FindRequest;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::write::{DeleteOp, UpdateOp, WriteOutcome};

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The users-and-roles generation: it changes after every write to either.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn written(outcome: WriteOutcome) -> Result<WriteOutcome> {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    match outcome.errors.first() {
        Some(w) => Err(w.error.clone()),
        None => Ok(outcome),
    }
}

/// The documents of `ns` matching `filter`, in `_id` order.
pub async fn load(
    state: &Arc<ServerState>,
    ns: Namespace,
    filter: Document,
) -> Result<Vec<Document>> {
    blocking(state, move |e| {
        let mut out = Vec::new();
        let req = FindRequest {
            filter,
            sort: Some(doc! {"_id": 1}),
            ..Default::default()
        };
        e.for_each_batch(&ns, req, None, |docs| {
            out.extend(docs);
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok(out)
    })
    .await
}

/// Inserts `doc`; its `_id` taken already is `on_duplicate`'s error.
pub async fn insert(
    state: &Arc<ServerState>,
    ns: Namespace,
    doc: Document,
    on_duplicate: impl FnOnce() -> Error,
) -> Result<()> {
    let outcome = blocking(state, move |e| e.insert_documents(&ns, vec![doc], true)).await?;
    match written(outcome) {
        Err(e) if e.code == codes::DUPLICATE_KEY => Err(on_duplicate()),
        other => other.map(|_| ()),
    }
}

/// Applies `update` (operators or a replacement) to the document `_id: id`; returns
/// how many matched (0 or 1).
pub async fn update(
    state: &Arc<ServerState>,
    ns: Namespace,
    id: String,
    update: Document,
) -> Result<u64> {
    let op = UpdateOp {
        q: doc! {"_id": id},
        u: Bson::Document(update),
        ..Default::default()
    };
    let outcome = blocking(state, move |e| e.update(&ns, vec![op], true)).await?;
    Ok(written(outcome)?.n)
}

/// Deletes every document matching `filter`; returns how many.
pub async fn delete(state: &Arc<ServerState>, ns: Namespace, filter: Document) -> Result<u64> {
    let op = DeleteOp {
        q: filter,
        limit: 0,
        ..Default::default()
    };
    let outcome = blocking(state, move |e| e.delete(&ns, vec![op], true)).await?;
    Ok(written(outcome)?.n)
}

/// A count as the `n` of mongod's replies.
pub fn count_reply(n: u64) -> Document {
    doc! {"n": i64::try_from(n).unwrap_or(i64::MAX)}
}

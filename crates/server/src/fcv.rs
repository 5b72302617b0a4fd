//! The feature compatibility version, kept as mongod keeps it: the document
//! `{_id: "featureCompatibilityVersion", version}` of `admin.system.version`, written by
//! `setFeatureCompatibilityVersion` and read at startup, so it survives a restart.

use bson::{doc, Bson, Document};
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::Result;
use tailstream_engine::Engine;

const VERSION_DB: &str = "admin";
const VERSION_COLL: &str = "system.version";
const DOCUMENT_ID: &str = "featureCompatibilityVersion";

fn version_namespace() -> Namespace {
    Namespace::new(VERSION_DB, VERSION_COLL)
}

/// The version stored, if one was ever set.
pub fn load(engine: &Engine) -> Option<String> {
    let request = tailstream_engine::find::FindRequest {
        filter: doc! {"_id": DOCUMENT_ID},
        single_batch: true,
        limit: Some(1),
        ..Default::default()
    };
    let batch = engine.find(&version_namespace(), request).ok()?;
    let stored = batch.docs.into_iter().next()?;
    stored.get_str("version").ok().map(str::to_string)
}

/// Stores `version` (replacing the document, as mongod's FCV document has no other
/// field once a transition finished).
pub fn persist(engine: &Engine, version: &str) -> Result<()> {
    let op = tailstream_engine::write::UpdateOp {
        q: doc! {"_id": DOCUMENT_ID},
        u: Bson::Document(doc! {"_id": DOCUMENT_ID, "version": version}),
        upsert: true,
        ..Default::default()
    };
    let outcome = engine.update(&version_namespace(), vec![op], true)?;
    match outcome.errors.into_iter().next() {
        Some(e) => Err(e.error),
        None => Ok(()),
    }
}

/// The `featureCompatibilityVersion` parameter `getParameter` reports.
pub fn parameter(version: &str) -> Document {
    doc! {"version": version}
}

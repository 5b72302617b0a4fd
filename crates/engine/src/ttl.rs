//! The TTL monitor: periodically deletes documents whose indexed date is older
//! than the index's `expireAfterSeconds`, with ordinary delete oplog entries.

use crate::namespace::Namespace;
use crate::write::DeleteOp;
use crate::Engine;
use bson::{doc, Bson};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Seconds between passes (mongod's `ttlMonitorSleepSecs`, default 60).
pub static TTL_MONITOR_SLEEP_SECS: AtomicU64 = AtomicU64::new(60);
/// mongod's `ttlMonitorEnabled`.
pub static TTL_MONITOR_ENABLED: AtomicBool = AtomicBool::new(true);
/// Documents removed so far (serverStatus `metrics.ttl.deletedDocuments`).
pub static TTL_DELETED: AtomicU64 = AtomicU64::new(0);
pub static TTL_PASSES: AtomicU64 = AtomicU64::new(0);

/// Starts the monitor thread; it holds only a weak reference so it ends with the engine.
pub fn spawn(engine: &Arc<Engine>) {
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("ttl-monitor".into())
        .spawn(move || loop {
            let secs = TTL_MONITOR_SLEEP_SECS.load(Ordering::Relaxed).max(1);
            std::thread::sleep(Duration::from_secs(secs));
            let Some(engine) = weak.upgrade() else { return };
            if TTL_MONITOR_ENABLED.load(Ordering::Relaxed) {
                engine.ttl_pass();
            }
        })
        .expect("spawn ttl monitor");
}

impl Engine {
    /// One pass over every TTL index.
    pub fn ttl_pass(&self) -> u64 {
        let catalog = self.catalog();
        let mut removed = 0;
        for meta in catalog.colls.values() {
            for index in &meta.indexes {
                let Some(secs) = index.expire_after_seconds else {
                    continue;
                };
                if index.pattern.fields.len() != 1 {
                    continue;
                }
                let field = &index.pattern.fields[0].0;
                let cutoff = bson::DateTime::from_millis(
                    bson::DateTime::now().timestamp_millis() - secs * 1000,
                );
                // A date, or an array holding a date, older than the cutoff.
                let q = doc! {field.clone(): {"$lt": Bson::DateTime(cutoff)}};
                let ns = Namespace::new(&meta.ns.db, &meta.ns.coll);
                match self.delete(
                    &ns,
                    vec![DeleteOp {
                        q,
                        limit: 0,
                        hint: None,
                        let_vars: None,
                        collation: None,
                    }],
                    false,
                ) {
                    Ok(out) => removed += out.n,
                    Err(e) => tracing::warn!(ns = %ns, "TTL deletion failed: {e}"),
                }
            }
        }
        TTL_PASSES.fetch_add(1, Ordering::Relaxed);
        TTL_DELETED.fetch_add(removed, Ordering::Relaxed);
        removed
    }
}

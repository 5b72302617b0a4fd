//! The TTL monitor: periodically deletes documents whose indexed date is older
//! than the index's `expireAfterSeconds`, with ordinary delete oplog entries.

use crate::catalog::namespace::Namespace;
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
            // No deletes while `fsync` holds the files still (`db.fsyncLock()`).
            if TTL_MONITOR_ENABLED.load(Ordering::Relaxed) {
                if let Some(_pass) = engine.fsync_lock.try_enter_write() {
                    engine.ttl_pass();
                }
            }
        })
        .expect("spawn ttl monitor");
}

impl Engine {
    /// One pass over every TTL index and every time-series collection with
    /// `expireAfterSeconds`.
    pub fn ttl_pass(&self) -> u64 {
        // In a replica set only the member that may write deletes (its deletes are
        // commits the others apply), as mongod's TTL monitor runs on the primary only.
        if self.proposer().is_some_and(|p| !p.writable()) {
            return 0;
        }
        let catalog = self.catalog();
        let mut removed = 0;
        for meta in catalog.colls.values() {
            // A time-series collection's expireAfterSeconds applies to its timeField
            // (mongod expires whole buckets, here each measurement once it is old enough).
            let timeseries = meta.timeseries().and_then(|spec| {
                let secs = meta
                    .options
                    .get("expireAfterSeconds")
                    .and_then(crate::read::find::as_i64)?;
                Some((spec.get_str("timeField").ok()?.to_string(), secs))
            });
            let index_ttls = meta.indexes.iter().filter_map(|index| {
                let secs = index.expire_after_seconds?;
                (index.pattern.fields.len() == 1).then(|| (index.pattern.fields[0].0.clone(), secs))
            });
            for (field, secs) in index_ttls.chain(timeseries) {
                let cutoff = bson::DateTime::from_millis(
                    bson::DateTime::now().timestamp_millis() - secs * 1000,
                );
                // A date, or an array holding a date, older than the cutoff.
                let q = doc! {field: {"$lt": Bson::DateTime(cutoff)}};
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
        // Retryable writes' records of sessions idle for longer than mongod keeps a
        // session (`write/retry.rs`).
        let cutoff = bson::DateTime::from_millis(
            bson::DateTime::now().timestamp_millis()
                - crate::write::retry::RETRY_RECORD_LIFETIME_MILLIS,
        );
        if let Err(e) = self.reap_retry_records(cutoff) {
            tracing::warn!("reaping retryable writes' records failed: {e}");
        }
        TTL_PASSES.fetch_add(1, Ordering::Relaxed);
        TTL_DELETED.fetch_add(removed, Ordering::Relaxed);
        removed
    }
}

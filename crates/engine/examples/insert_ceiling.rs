//! The engine's own insert ceiling: 1 KB documents in batches of 1000, straight into
//! `Engine::insert` with no network or client in the way. Prints docs/s and CPU s.
//! Usage: cargo run --release -p tailstream-engine --example insert_ceiling -- [batches] [oplog MB]
//! (an oplog smaller than batches MB measures the steady state of a full, trimmed oplog)

use bson::{doc, RawDocumentBuf};
use std::time::Instant;
use tailstream_engine::{namespace::Namespace, Engine, EngineOptions};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn main() {
    let batches: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let oplog_mb: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4096);
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions {
        dbpath: dir.path().to_path_buf(),
        oplog_size_bytes: oplog_mb << 20,
    })
    .unwrap();
    let ns = Namespace::new("bench", "t");
    let payload = "x".repeat(1000);
    let mut all = Vec::new();
    for b in 0..batches {
        let docs: Vec<RawDocumentBuf> = (0..1000)
            .map(|i| RawDocumentBuf::from_document(&doc! {"_id": bson::oid::ObjectId::new(), "i": (b * 1000 + i) as i64, "s": &payload}).unwrap())
            .collect();
        all.push(docs);
    }
    let (t0, c0) = (Instant::now(), cpu_seconds());
    for docs in all {
        let out = engine.insert(&ns, docs, true).unwrap();
        assert!(out.errors.is_empty());
    }
    let (dt, dc) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    println!(
        "{} docs in {:.2}s: {:.0} docs/s, {:.2} CPU s ({:.0} docs per CPU s)",
        batches * 1000,
        dt,
        (batches * 1000) as f64 / dt,
        dc,
        (batches * 1000) as f64 / dc
    );
    if std::env::var_os("STATS").is_some() {
        for space in [
            tailstream_storage::Space::Oplog,
            tailstream_storage::Space::Docs,
        ] {
            println!(
                "--- {space:?}\n{}",
                engine.store.stats_text(space).unwrap_or_default()
            );
        }
    }
    engine.shutdown();
}

//! Tailstream ingestion benchmark.
//!
//! Reproduces the "Data Ingestion" tables of the MongoDB performance tables
//! (insert speed by document size, by client write batch size, by primary key
//! type and by number of secondary indexes) against a Tailstream server that it
//! starts itself, or against any MongoDB-compatible server given with `--uri`.
//! See `bench/README.md`.

use std::{
    fs,
    path::PathBuf,
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use mongodb::{
    bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, DateTime, Document},
    options::{Acknowledgment, ClientOptions, CollectionOptions, WriteConcern},
    Client, Collection, IndexModel,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use serde::Serialize;
use tailstream_bench_common::{
    fmt::fmt_opt,
    machine::{clock_ticks, proc_cpu_ticks, proc_io_bytes, Machine},
    server::{default_server_bin, server_version, ServerProc},
    stats::percentile,
};

const DB: &str = "bench";
const COLL: &str = "ingest";
const MIB: f64 = 1024.0 * 1024.0;
/// One insert_many batch of the document-size table is kept under the server's
/// maxMessageSizeBytes (48 MB), so large documents still give every client work.
const MAX_BATCH_BYTES: usize = 48_000_000;
/// Printable characters the payload string `s` is made of.
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 .";
/// Targets of the issue for 1 KB documents in batches of 1,000.
const TARGET_W1: f64 = 100_000.0;
const TARGET_J: f64 = 20_000.0;

#[derive(Parser, Debug)]
#[command(
    name = "bench-ingest",
    about = "Ingestion benchmark (MongoDB performance tables: document size, batch size, _id type, indexes)"
)]
struct Args {
    /// Benchmark this server (any MongoDB-compatible server). Without it, a Tailstream
    /// server is started on a free port with a fresh temporary --dbpath.
    #[arg(long)]
    uri: Option<String>,
    /// Tailstream binary to start (default: $TAILSTREAM_BIN, then
    /// $HOME/.cache/tailstream/target/release/tailstream).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Extra argument for the Tailstream server it starts (repeatable), e.g.
    /// --server-arg=--oplogSize --server-arg=20480
    #[arg(long, allow_hyphen_values = true)]
    server_arg: Vec<String>,
    /// Parent directory of the temporary --dbpath (default: the system temp dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Pid of the server process, to measure its CPU and disk writes with --uri.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Before the run, initiate a replica set `rs0` of these members (host:port,
    /// comma-separated; the first is sent replSetInitiate) and wait for its primary:
    /// for a set started where no other client is at hand (the device machine).
    #[arg(long, value_delimiter = ',')]
    initiate: Vec<String>,
    /// Data inserted per table row, in GiB.
    #[arg(long, default_value_t = 1.0)]
    gb: f64,
    /// Quick check: 0.1 GiB per row.
    #[arg(long, conflicts_with = "gb")]
    quick: bool,
    /// Tables to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "size,batch,key,indexes")]
    tables: Vec<TableKind>,
    /// Write concern(s), comma-separated: w1 = {w: 1}, j = {w: 1, j: true},
    /// majority = {w: "majority"}. Every selected table runs once per write concern.
    #[arg(long, value_delimiter = ',', default_value = "w1")]
    write_concern: Vec<Wc>,
    /// Also run every selected table with {w: 1, j: true} (same as adding j to --write-concern).
    #[arg(long)]
    j: bool,
    /// Skip the targets table (1 KB documents, batches of 1,000, with {w: 1} and with j: true).
    #[arg(long)]
    no_targets: bool,
    /// Concurrent inserting tasks (one client; its pool opens a connection per task).
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Documents per insert_many for the document-size, key and index tables.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Use ordered insert_many (default: ordered=false).
    #[arg(long)]
    ordered: bool,
    /// Stop a row after this many seconds and report what it did.
    #[arg(long, default_value_t = 300.0)]
    max_seconds_per_row: f64,
    /// Before each row, wait up to this many seconds for the server's CPU to go idle
    /// (background flushes and compactions of the previous row); needs the server's pid.
    #[arg(long, default_value_t = 30.0)]
    settle_seconds: f64,
    /// Write the raw figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum TableKind {
    Size,
    Batch,
    Key,
    Indexes,
    #[value(skip)]
    Targets,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Wc {
    W1,
    J,
    Majority,
}

impl Wc {
    fn concern(self) -> WriteConcern {
        match self {
            Wc::W1 => WriteConcern::builder().w(Acknowledgment::Nodes(1)).build(),
            Wc::J => WriteConcern::builder()
                .w(Acknowledgment::Nodes(1))
                .journal(true)
                .build(),
            Wc::Majority => WriteConcern::builder().w(Acknowledgment::Majority).build(),
        }
    }
    fn label(self) -> &'static str {
        match self {
            Wc::W1 => "{w: 1}",
            Wc::J => "{w: 1, j: true}",
            Wc::Majority => "{w: \"majority\"}",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
enum KeyKind {
    #[serde(rename = "OBJECT_ID")]
    ObjectId,
    #[serde(rename = "UUID")]
    Uuid,
    #[serde(rename = "BUSINESS_ID")]
    BusinessId,
}

impl KeyKind {
    fn name(self) -> &'static str {
        match self {
            KeyKind::ObjectId => "OBJECT_ID",
            KeyKind::Uuid => "UUID",
            KeyKind::BusinessId => "BUSINESS_ID",
        }
    }
}

#[derive(Clone, Debug)]
struct RowSpec {
    table: TableKind,
    label: String,
    doc_size: usize,
    batch: usize,
    key: KeyKind,
    indexes: usize,
    extra_fields: bool,
    wc: Wc,
}

#[derive(Clone, Debug, Serialize)]
struct RowResult {
    table: TableKind,
    label: String,
    write_concern: Wc,
    doc_size_bytes: usize,
    batch: usize,
    key: KeyKind,
    secondary_indexes: usize,
    docs_planned: u64,
    docs_inserted: u64,
    insert_many_calls: u64,
    seconds: f64,
    data_mb: f64,
    docs_per_s: f64,
    mb_per_s: f64,
    avg_latency_ms: f64,
    p99_latency_ms: f64,
    max_latency_ms: f64,
    server_cpu_pct: Option<f64>,
    client_cpu_pct: Option<f64>,
    disk_write_mb: Option<f64>,
    disk_write_mb_s: Option<f64>,
    stopped_early: bool,
    count_after: Option<u64>,
}

#[derive(Serialize)]
struct Meta {
    #[serde(flatten)]
    machine: Machine,
    server_version: String,
    server_started_by_bench: bool,
    server_bin: Option<String>,
    server_args: Vec<String>,
    uri: String,
    write_concerns: Vec<Wc>,
    gb_per_row: f64,
    clients: usize,
    ordered: bool,
    max_seconds_per_row: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    meta: &'a Meta,
    rows: &'a [RowResult],
    warnings: &'a [String],
}

// ---------------------------------------------------------------------------
// /proc readings

struct Sample {
    at: Instant,
    server_ticks: Option<u64>,
    server_wbytes: Option<u64>,
    client_ticks: Option<u64>,
}

fn sample(pid: Option<u32>) -> Sample {
    let p = pid.map(|p| p.to_string());
    Sample {
        at: Instant::now(),
        server_ticks: p.as_deref().and_then(proc_cpu_ticks),
        server_wbytes: p.as_deref().and_then(|p| proc_io_bytes(p, "write_bytes")),
        client_ticks: proc_cpu_ticks("self"),
    }
}

// ---------------------------------------------------------------------------
// Documents

/// Builds the documents of one row: `{_id, i, s, d, n[, f1..f16]}`, every one of
/// exactly `doc_size` BSON bytes.
struct Gen {
    key: KeyKind,
    extra_fields: bool,
    s_len: usize,
    pool: String,
    base_ms: i64,
    names: Vec<String>,
}

impl Gen {
    fn new(spec: &RowSpec, seed: u64) -> Result<Gen> {
        let mut g = Gen {
            key: spec.key,
            extra_fields: spec.extra_fields,
            s_len: 0,
            pool: String::new(),
            base_ms: DateTime::now().timestamp_millis(),
            names: (1..=16).map(|k| format!("f{k}")).collect(),
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let empty = mongodb::bson::to_vec(&g.doc(0, &mut rng))?.len();
        if empty >= spec.doc_size {
            bail!(
                "document size {} is below the {empty} bytes of the fixed fields",
                spec.doc_size
            );
        }
        g.s_len = spec.doc_size - empty;
        // One random printable buffer; each document takes a slice of it at a random offset.
        let pool_len = g.s_len + (1 << 20);
        g.pool = (0..pool_len)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        let check = mongodb::bson::to_vec(&g.doc(1, &mut rng))?.len();
        debug_assert_eq!(check, spec.doc_size);
        if check != spec.doc_size {
            bail!(
                "internal error: generated a {check}-byte document, wanted {}",
                spec.doc_size
            );
        }
        Ok(g)
    }

    fn doc(&self, i: u64, rng: &mut SmallRng) -> Document {
        let id = match self.key {
            KeyKind::ObjectId => Bson::ObjectId(ObjectId::new()),
            KeyKind::Uuid => {
                let mut b = [0u8; 16];
                rng.fill(&mut b);
                b[6] = (b[6] & 0x0f) | 0x40; // version 4
                b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
                Bson::Binary(Binary {
                    subtype: BinarySubtype::Uuid,
                    bytes: b.to_vec(),
                })
            }
            // "ACC", a 5-digit account number out of 20,000, then 8 hex digits that grow
            // with time (here the insertion sequence, which keeps every id unique).
            KeyKind::BusinessId => Bson::String(format!(
                "ACC{:05}{:08X}",
                rng.gen_range(0..20_000u32),
                i as u32
            )),
        };
        let off = if self.pool.len() > self.s_len {
            rng.gen_range(0..=self.pool.len() - self.s_len)
        } else {
            0
        };
        let mut d = Document::new();
        d.insert("_id", id);
        d.insert("i", i as i64);
        d.insert("s", &self.pool[off..off + self.s_len]);
        d.insert("d", DateTime::from_millis(self.base_ms + i as i64));
        d.insert("n", rng.gen_range(0..1_000_000_000i64));
        if self.extra_fields {
            for (k, name) in self.names.iter().enumerate() {
                if k % 2 == 0 {
                    // f1, f3, ...: random integers
                    d.insert(name.as_str(), rng.gen_range(0..1_000_000_000_000i64));
                } else {
                    // f2, f4, ...: random 8-character strings
                    let s: String = (0..8)
                        .map(|_| ALPHABET[rng.gen_range(0..62)] as char)
                        .collect();
                    d.insert(name.as_str(), s);
                }
            }
        }
        d
    }
}

// ---------------------------------------------------------------------------
// Running a row

struct Ctx {
    client: Client,
    pid: Option<u32>,
    gb: f64,
    clients: usize,
    ordered: bool,
    max_seconds: f64,
    settle_seconds: f64,
    hz: f64,
}

struct TaskOut {
    inserted: u64,
    latencies_ms: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
async fn client_task(
    coll: Collection<Document>,
    gen: Arc<Gen>,
    batch: u64,
    n: u64,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    timed_out: Arc<AtomicBool>,
    deadline: Instant,
    seed: u64,
    ordered: bool,
) -> Result<TaskOut> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let batches = n.div_ceil(batch);
    let mut out = TaskOut {
        inserted: 0,
        latencies_ms: Vec::new(),
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if Instant::now() >= deadline {
            timed_out.store(true, Ordering::Relaxed);
            break;
        }
        let b = next.fetch_add(1, Ordering::Relaxed);
        if b >= batches {
            break;
        }
        let lo = b * batch;
        let hi = (lo + batch).min(n);
        let docs: Vec<Document> = (lo..hi).map(|i| gen.doc(i, &mut rng)).collect();
        let t = Instant::now();
        let res = coll.insert_many(docs).ordered(ordered).await;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        match res {
            Ok(r) => {
                if r.inserted_ids.len() as u64 != hi - lo {
                    stop.store(true, Ordering::Relaxed);
                    bail!(
                        "insert_many of documents {lo}..{hi} acknowledged {} of {} documents",
                        r.inserted_ids.len(),
                        hi - lo
                    );
                }
                out.inserted += hi - lo;
                out.latencies_ms.push(ms);
            }
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Err(anyhow!(e).context(format!(
                    "insert_many of documents {lo}..{hi} ({} documents of {} bytes) failed after {ms:.0} ms",
                    hi - lo,
                    gen.s_len
                )));
            }
        }
    }
    Ok(out)
}

/// Waits for the server's CPU use to drop below 10% of a core (over 0.5 s).
async fn settle(ctx: &Ctx) {
    let Some(pid) = ctx.pid.map(|p| p.to_string()) else {
        tokio::time::sleep(Duration::from_secs(1)).await;
        return;
    };
    let end = Instant::now() + Duration::from_secs_f64(ctx.settle_seconds);
    loop {
        let a = proc_cpu_ticks(&pid);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let b = proc_cpu_ticks(&pid);
        match (a, b) {
            (Some(a), Some(b))
                if (b.saturating_sub(a) as f64 / ctx.hz) > 0.05 && Instant::now() < end =>
            {
                continue
            }
            _ => return,
        }
    }
}

async fn run_row(ctx: &Ctx, spec: &RowSpec, warnings: &mut Vec<String>) -> Result<RowResult> {
    let what = format!(
        "{:?} table, row {} ({})",
        spec.table,
        spec.label,
        spec.wc.label()
    );
    let coll: Collection<Document> = ctx.client.database(DB).collection_with_options(
        COLL,
        CollectionOptions::builder()
            .write_concern(spec.wc.concern())
            .build(),
    );
    coll.drop()
        .await
        .with_context(|| format!("{what}: drop of {DB}.{COLL} failed"))?;
    if spec.indexes > 0 {
        let models: Vec<IndexModel> = (1..=spec.indexes)
            .map(|k| {
                let mut keys = Document::new();
                keys.insert(format!("f{k}"), 1i32);
                IndexModel::builder().keys(keys).build()
            })
            .collect();
        coll.create_indexes(models)
            .await
            .with_context(|| format!("{what}: createIndexes of {} indexes failed", spec.indexes))?;
    }
    let n = ((ctx.gb * 1024.0 * 1024.0 * 1024.0) / spec.doc_size as f64)
        .round()
        .max(1.0) as u64;
    let gen = Arc::new(Gen::new(spec, 42)?);
    settle(ctx).await;

    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    let before = sample(ctx.pid);
    let deadline = before.at + Duration::from_secs_f64(ctx.max_seconds);
    let tasks: Vec<_> = (0..ctx.clients)
        .map(|c| {
            tokio::spawn(client_task(
                coll.clone(),
                gen.clone(),
                spec.batch as u64,
                n,
                next.clone(),
                stop.clone(),
                timed_out.clone(),
                deadline,
                1000 + c as u64,
                ctx.ordered,
            ))
        })
        .collect();
    let mut inserted = 0u64;
    let mut lat: Vec<f64> = Vec::new();
    let mut first_err: Option<anyhow::Error> = None;
    for t in tasks {
        match t.await {
            Ok(Ok(out)) => {
                inserted += out.inserted;
                lat.extend(out.latencies_ms);
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(anyhow!("client task panicked: {e}"));
            }
        }
    }
    let after = sample(ctx.pid);
    if let Some(e) = first_err {
        return Err(e.context(what));
    }
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let data_mb = inserted as f64 * spec.doc_size as f64 / MIB;
    lat.sort_by(|a, b| a.total_cmp(b));
    let avg = if lat.is_empty() {
        0.0
    } else {
        lat.iter().sum::<f64>() / lat.len() as f64
    };
    let p99 = if lat.is_empty() {
        0.0
    } else {
        percentile(&lat, 99.0)
    };
    let cpu = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / ctx.hz / secs * 100.0),
        _ => None,
    };
    let disk_mb = match (before.server_wbytes, after.server_wbytes) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / MIB),
        _ => None,
    };
    let count_after = match coll.estimated_document_count().await {
        Ok(c) => {
            if c != inserted {
                warnings.push(format!(
                    "{what}: the server counts {c} documents in {DB}.{COLL} after {inserted} acknowledged inserts"
                ));
            }
            Some(c)
        }
        Err(e) => {
            warnings.push(format!("{what}: count of {DB}.{COLL} failed: {e}"));
            None
        }
    };
    Ok(RowResult {
        table: spec.table,
        label: spec.label.clone(),
        write_concern: spec.wc,
        doc_size_bytes: spec.doc_size,
        batch: spec.batch,
        key: spec.key,
        secondary_indexes: spec.indexes,
        docs_planned: n,
        docs_inserted: inserted,
        insert_many_calls: lat.len() as u64,
        seconds: secs,
        data_mb,
        docs_per_s: inserted as f64 / secs,
        mb_per_s: data_mb / secs,
        avg_latency_ms: avg,
        p99_latency_ms: p99,
        max_latency_ms: lat.last().copied().unwrap_or(0.0),
        server_cpu_pct: cpu(before.server_ticks, after.server_ticks),
        client_cpu_pct: cpu(before.client_ticks, after.client_ticks),
        disk_write_mb: disk_mb,
        disk_write_mb_s: disk_mb.map(|m| m / secs),
        stopped_early: timed_out.load(Ordering::Relaxed) && inserted < n,
        count_after,
    })
}

// ---------------------------------------------------------------------------
// Tables

fn rows_for(table: TableKind, wc: Wc, default_batch: usize) -> Vec<RowSpec> {
    let base = |label: String, doc_size: usize, batch: usize| RowSpec {
        table,
        label,
        doc_size,
        batch,
        key: KeyKind::ObjectId,
        indexes: 0,
        extra_fields: false,
        wc,
    };
    match table {
        TableKind::Size => [1usize, 4, 32, 256, 2048]
            .iter()
            .map(|&kb| {
                let size = kb * 1024;
                base(
                    kb.to_string(),
                    size,
                    default_batch.min((MAX_BATCH_BYTES / size).max(1)),
                )
            })
            .collect(),
        TableKind::Batch => [1usize, 10, 100, 1000, 2000]
            .iter()
            .map(|&b| base(b.to_string(), 4096, b))
            .collect(),
        TableKind::Key => [KeyKind::ObjectId, KeyKind::Uuid, KeyKind::BusinessId]
            .iter()
            .map(|&k| RowSpec {
                key: k,
                ..base(k.name().to_string(), 1024, default_batch)
            })
            .collect(),
        TableKind::Indexes => [0usize, 1, 2, 3, 4, 8, 16]
            .iter()
            .map(|&i| RowSpec {
                indexes: i,
                extra_fields: true,
                ..base(i.to_string(), 1024, default_batch)
            })
            .collect(),
        TableKind::Targets => vec![base("1".into(), 1024, 1000)],
    }
}

fn table_title(
    table: TableKind,
    wc: Wc,
    ctx: &Ctx,
    default_batch: usize,
) -> (String, String, String) {
    let common = format!(
        "{} GiB per row, {} clients, insert_many ordered={}, write concern {}",
        fmt_gb(ctx.gb),
        ctx.clients,
        ctx.ordered,
        wc.label()
    );
    match table {
        TableKind::Size => (
            format!("Expected insert speed by document size ({})", wc.label()),
            format!(
                "Empty collection, only the _id index (ObjectId). Batches of {default_batch} documents \
                 (fewer for large documents, to stay under 48 MB per insert_many: {} of 256 KB, {} of 2 MB). {common}.",
                default_batch.min(MAX_BATCH_BYTES / (256 << 10)),
                default_batch.min(MAX_BATCH_BYTES / (2048 << 10)),
            ),
            "Document Size (KB)".into(),
        ),
        TableKind::Batch => (
            format!("Impact of client write batch size on write speed ({})", wc.label()),
            format!("4 KB documents, _id ObjectId, documents per insert_many as shown. {common}."),
            "Write Batch Size".into(),
        ),
        TableKind::Key => (
            format!("Impact of primary key type on write speed ({})", wc.label()),
            format!(
                "1 KB documents in batches of {default_batch}. _id: ObjectId; random UUID (binary subtype 4); \
                 BUSINESS_ID = \"ACC\" + 5-digit account (20,000 accounts) + 8 hex digits growing with time. {common}."
            ),
            "Primary Key format".into(),
        ),
        TableKind::Indexes => (
            format!("Impact of number of indexes on write speed ({})", wc.label()),
            format!(
                "1 KB documents in batches of {default_batch} with 16 extra fields f1..f16 (odd: random integers, \
                 even: random 8-character strings); N secondary indexes {{f1: 1}} .. {{fN: 1}} created on the empty \
                 collection before loading. {common}."
            ),
            "Number of secondary indexes".into(),
        ),
        TableKind::Targets => (String::new(), String::new(), String::new()),
    }
}

fn fmt_gb(gb: f64) -> String {
    let s = format!("{gb:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn fmt_secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.2}")
    } else {
        format!("{s:.1}")
    }
}

fn markdown_table(
    title: &str,
    desc: &str,
    first_col: &str,
    rows: &[RowResult],
    max_seconds: f64,
) -> String {
    let mut s = format!("## {title}\n\n{desc}\n\n");
    s += &format!(
        "| {first_col} | Time Taken (s) | Data Loaded (MB) | Speed (docs/s) | Speed (MB/s) | Average Op Latency (ms) | p99 Op Latency (ms) | Server CPU (%) | Client CPU (%) | Disk write (MB/s) |\n"
    );
    s += "| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |\n";
    let mut stopped = false;
    for r in rows {
        let mark = if r.stopped_early {
            stopped = true;
            "*"
        } else {
            ""
        };
        s += &format!(
            "| {}{mark} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {} | {} | {} |\n",
            r.label,
            fmt_secs(r.seconds),
            r.data_mb,
            r.docs_per_s,
            r.mb_per_s,
            r.avg_latency_ms,
            r.p99_latency_ms,
            fmt_opt(r.server_cpu_pct, 0),
            fmt_opt(r.client_cpu_pct, 0),
            fmt_opt(r.disk_write_mb_s, 1),
        );
    }
    if stopped {
        s += &format!("\n\\* stopped after --max-seconds-per-row ({max_seconds} s):");
        for r in rows.iter().filter(|r| r.stopped_early) {
            s += &format!(
                " {}: {} of {} documents;",
                r.label, r.docs_inserted, r.docs_planned
            );
        }
        s.pop();
        s += "\n";
    }
    s
}

fn targets_table(w1: &RowResult, j: &RowResult) -> String {
    let mut s = String::from(
        "## Targets: 1 KB documents in batches of 1,000\n\n\
         | Write Concern | Documents | Time Taken (s) | Speed (docs/s) | Target (docs/s) | Met | Average Op Latency (ms) | p99 Op Latency (ms) | Server CPU (%) |\n\
         | :-- | --: | --: | --: | --: | :-: | --: | --: | --: |\n",
    );
    for (r, target) in [(w1, TARGET_W1), (j, TARGET_J)] {
        s += &format!(
            "| {} | {} | {} | {:.0} | ≥ {:.0} | {} | {:.1} | {:.1} | {} |\n",
            r.write_concern.label(),
            r.docs_inserted,
            fmt_secs(r.seconds),
            r.docs_per_s,
            target,
            if r.docs_per_s >= target { "yes" } else { "no" },
            r.avg_latency_ms,
            r.p99_latency_ms,
            fmt_opt(r.server_cpu_pct, 0),
        );
    }
    s
}

fn redact(uri: &str) -> String {
    // mongodb://user:password@host -> mongodb://***@host
    match (uri.find("://"), uri.rfind('@')) {
        (Some(p), Some(at)) if at > p => format!("{}***{}", &uri[..p + 3], &uri[at..]),
        _ => uri.to_string(),
    }
}

// ---------------------------------------------------------------------------

async fn run_all(
    args: &Args,
    uri: String,
    pid: Option<u32>,
    server_bin: Option<&str>,
) -> Result<()> {
    let mut opts = ClientOptions::parse(&uri).await.context("invalid --uri")?;
    opts.app_name = Some("tailstream-bench-ingest".into());
    opts.max_pool_size = Some((args.clients as u32 + 2).max(10));
    let client = Client::with_options(opts)?;
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .with_context(|| format!("cannot reach the server at {}", redact(&uri)))?;

    let mut warnings: Vec<String> = Vec::new();
    let version = match server_version(&client).await {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!("buildInfo failed: {e}"));
            "unknown (buildInfo failed)".into()
        }
    };
    let mut wcs = args.write_concern.clone();
    if args.j && !wcs.contains(&Wc::J) {
        wcs.push(Wc::J);
    }
    let ctx = Ctx {
        client: client.clone(),
        pid,
        gb: if args.quick { 0.1 } else { args.gb },
        clients: args.clients.max(1),
        ordered: args.ordered,
        max_seconds: args.max_seconds_per_row,
        settle_seconds: args.settle_seconds,
        hz: clock_ticks(),
    };
    let meta = Meta {
        machine: Machine::now(),
        server_version: version,
        server_started_by_bench: server_bin.is_some(),
        server_bin: server_bin.map(str::to_string),
        server_args: if server_bin.is_some() {
            args.server_arg.clone()
        } else {
            Vec::new()
        },
        uri: redact(&uri),
        write_concerns: wcs.clone(),
        gb_per_row: ctx.gb,
        clients: ctx.clients,
        ordered: ctx.ordered,
        max_seconds_per_row: ctx.max_seconds,
    };
    println!("# Ingestion benchmark\n");
    println!(
        "{} · server: {} · write concern: {} · scale: {} GiB per row · {} clients, insert_many ordered={}\n",
        meta.machine.header(),
        meta.server_version,
        wcs.iter().map(|w| w.label()).collect::<Vec<_>>().join(", "),
        fmt_gb(ctx.gb),
        ctx.clients,
        ctx.ordered
    );
    let cpu_note = if pid.is_some() {
        "Server CPU = server process CPU seconds / wall seconds × 100 (can exceed 100 with several cores); \
         Disk write = the server's /proc/<pid>/io write_bytes; MB = 2^20 bytes."
    } else {
        "Server CPU and Disk write are n/a: pass --server-pid to measure them; MB = 2^20 bytes."
    };
    println!("{cpu_note}\n");

    let mut results: Vec<RowResult> = Vec::new();
    let write_json = |results: &[RowResult], warnings: &[String]| -> Result<()> {
        if let Some(path) = &args.json {
            let report = Report {
                meta: &meta,
                rows: results,
                warnings,
            };
            fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    };

    let mut tables: Vec<TableKind> = Vec::new();
    for t in &args.tables {
        if !tables.contains(t) {
            tables.push(*t);
        }
    }
    for &wc in &wcs {
        for &table in &tables {
            let specs = rows_for(table, wc, args.batch);
            let mut rows = Vec::new();
            for spec in &specs {
                eprintln!(
                    "[{:?} {} {}] inserting {} GiB of {}-byte documents in batches of {}...",
                    table,
                    spec.label,
                    wc.label(),
                    fmt_gb(ctx.gb),
                    spec.doc_size,
                    spec.batch
                );
                let r = run_row(&ctx, spec, &mut warnings).await;
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = write_json(&results, &warnings);
                        return Err(e);
                    }
                };
                eprintln!(
                    "    {} docs in {:.1} s: {:.0} docs/s, {:.1} MB/s, latency avg {:.1} ms p99 {:.1} ms, server CPU {}%, client CPU {}%, disk {} MB/s{}",
                    r.docs_inserted,
                    r.seconds,
                    r.docs_per_s,
                    r.mb_per_s,
                    r.avg_latency_ms,
                    r.p99_latency_ms,
                    fmt_opt(r.server_cpu_pct, 0),
                    fmt_opt(r.client_cpu_pct, 0),
                    fmt_opt(r.disk_write_mb_s, 1),
                    if r.stopped_early { " (stopped early)" } else { "" }
                );
                rows.push(r.clone());
                results.push(r);
                write_json(&results, &warnings)?;
            }
            let (title, desc, col) = table_title(table, wc, &ctx, args.batch);
            println!(
                "{}",
                markdown_table(&title, &desc, &col, &rows, ctx.max_seconds)
            );
        }
    }

    if !args.no_targets {
        // The 1 KB / batch 1000 / ObjectId row, with {w: 1} and with j: true; reuse the
        // document-size table's row when it ran with the same write concern.
        let mut target_rows = Vec::new();
        for wc in [Wc::W1, Wc::J] {
            let found = results
                .iter()
                .find(|r| {
                    r.table == TableKind::Size
                        && r.label == "1"
                        && r.batch == 1000
                        && r.write_concern == wc
                })
                .cloned();
            let r = match found {
                Some(r) => r,
                None => {
                    let spec = &rows_for(TableKind::Targets, wc, 1000)[0];
                    eprintln!(
                        "[targets 1 KB x 1000 {}] inserting {} GiB...",
                        wc.label(),
                        fmt_gb(ctx.gb)
                    );
                    let r = run_row(&ctx, spec, &mut warnings).await?;
                    eprintln!(
                        "    {} docs in {:.1} s: {:.0} docs/s",
                        r.docs_inserted, r.seconds, r.docs_per_s
                    );
                    results.push(r.clone());
                    write_json(&results, &warnings)?;
                    r
                }
            };
            target_rows.push(r);
        }
        println!("{}", targets_table(&target_rows[0], &target_rows[1]));
    }

    // Leave no benchmark data behind.
    client
        .database(DB)
        .collection::<Document>(COLL)
        .drop()
        .await
        .with_context(|| format!("final drop of {DB}.{COLL} failed"))?;

    if !warnings.is_empty() {
        println!("## Warnings\n");
        for w in &warnings {
            println!("- {w}");
        }
        println!();
    }
    write_json(&results, &warnings)?;
    Ok(())
}

async fn real_main(args: Args) -> Result<()> {
    if args.gb.is_nan() || args.gb <= 0.0 {
        bail!("--gb must be positive");
    }
    if args.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if !args.initiate.is_empty() {
        initiate_set(&args.initiate).await?;
    }
    let mut server = match &args.uri {
        Some(_) => None,
        None => {
            let bin = args.server_bin.clone().unwrap_or_else(default_server_bin);
            let parent = args.data_dir.clone().unwrap_or_else(std::env::temp_dir);
            let s = ServerProc::tailstream(
                "the server",
                bin,
                &parent,
                "tailstream-bench-ingest",
                &args.server_arg,
            )?;
            eprintln!(
                "started {} (pid {}) on port {} with --dbpath {} {}",
                s.bin.display(),
                s.pid,
                s.port,
                s.dbpath().display(),
                args.server_arg.join(" ")
            );
            Some(s)
        }
    };
    let (uri, pid) = match (&args.uri, &server) {
        (Some(u), _) => (u.clone(), args.server_pid),
        (None, Some(s)) => (s.uri(), Some(s.pid)),
        (None, None) => unreachable!(),
    };
    let bin = server.as_ref().map(|s| s.bin.display().to_string());
    let res = tokio::select! {
        r = run_all(&args, uri, pid, bin.as_deref()) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let Some(s) = server.as_mut() else { return res };
    let mut res = res;
    if let Err(dead) = s.check_alive() {
        let tail = s.log_tail(40);
        res = Err(match res {
            Err(e) => e.context(format!("{dead}; server log:\n{tail}")),
            Ok(()) => anyhow!("{dead}; server log:\n{tail}"),
        });
    } else if res.is_err() {
        let problems = s.log_problems();
        if !problems.is_empty() {
            eprintln!("server log (warnings and errors):\n{}", problems.join("\n"));
        }
    }
    if let Some(msg) = s.stop() {
        eprintln!("warning: {msg}; server log:\n{}", s.log_tail(20));
    }
    if res.is_ok() {
        let problems = s.log_problems();
        if !problems.is_empty() {
            eprintln!(
                "the server logged warnings or errors:\n{}",
                problems.join("\n")
            );
        }
    }
    drop(server); // removes the temporary directory
    res
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match real_main(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `replSetInitiate` of a set `rs0` of `hosts` sent to the first, then waits until a
/// client of the set finds its primary (see `--initiate`).
async fn initiate_set(hosts: &[String]) -> Result<()> {
    let members: Vec<mongodb::bson::Document> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| mongodb::bson::doc! {"_id": i as i32, "host": h})
        .collect();
    let first = Client::with_uri_str(format!("mongodb://{}/?directConnection=true", hosts[0]))
        .await
        .context("connecting to the first member")?;
    let config = mongodb::bson::doc! {"_id": "rs0", "members": members};
    first
        .database("admin")
        .run_command(mongodb::bson::doc! {"replSetInitiate": config})
        .await
        .context("replSetInitiate")?;
    let set = Client::with_uri_str(format!("mongodb://{}/?replicaSet=rs0", hosts.join(",")))
        .await
        .context("connecting to the set")?;
    set.database("admin")
        .run_command(mongodb::bson::doc! {"ping": 1})
        .await
        .context("the set's primary")?;
    eprintln!("initiated replica set rs0 of {}", hosts.join(", "));
    Ok(())
}

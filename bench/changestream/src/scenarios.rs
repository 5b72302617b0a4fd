//! The five scenarios. Each starts a fresh server (or two), runs, and returns its
//! figures; problems that do not stop it (missing events, server log warnings)
//! go to `problems`.

use std::{
    fs,
    io::{Read, Seek, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use mongodb::{
    bson::{doc, Document, RawDocumentBuf, Timestamp},
    change_stream::{event::ResumeToken, ChangeStream},
    options::CollectionOptions,
    Client, Collection,
};
use serde::Serialize;
use tailstream_bench_common::{
    machine::{proc_io_bytes, wait_idle},
    server::ServerProc,
};

use crate::host::{drop_caches, free_disk_bytes, mono_ns};
use crate::load::{
    client, drain, drain_batches, filler, max_await, spawn_producer, w1, CpuMark, CpuSpan, Drained,
    MakeDoc, Pace, ProducerResult,
};
use crate::stats::{stats, Stats};

pub struct Ctx {
    pub bin: PathBuf,
    pub data_dir: PathBuf,
    pub problems: Vec<String>,
}

impl Ctx {
    /// Tailstream as a one-member replica set (change streams need one) with an
    /// oplog of `oplog_mb`, in a fresh directory under --data-dir.
    fn start(&self, oplog_mb: u64) -> Result<ServerProc> {
        // The binary is rebuilt now and then by someone else: wait for it a while.
        let deadline = Instant::now() + Duration::from_secs(300);
        while !self.bin.is_file() {
            if Instant::now() > deadline {
                bail!(
                    "Tailstream binary {} not found: build it or pass --server-bin / set $TAILSTREAM_BIN",
                    self.bin.display()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        let s = ServerProc::tailstream(
            "the server",
            self.bin.clone(),
            &self.data_dir,
            "tailstream-bench-changestream",
            &[
                "--replSet".into(),
                "rs0".into(),
                "--oplogSize".into(),
                oplog_mb.to_string(),
            ],
        )?;
        eprintln!(
            "  server pid {} on port {} (oplogSize {oplog_mb} MB)",
            s.pid, s.port
        );
        Ok(s)
    }

    /// Notes how the server ended and what it logged at WARN/ERROR.
    fn finish(&mut self, scenario: &str, mut server: ServerProc) {
        if let Err(e) = server.check_alive() {
            self.problems.push(format!(
                "{scenario}: {e}; its log:\n{}",
                server.log_tail(30)
            ));
        }
        let lines = server.log_problems();
        if !lines.is_empty() {
            let n = lines.len();
            let shown: Vec<String> = lines.into_iter().take(10).collect();
            self.problems.push(format!(
                "{scenario}: the server logged {n} WARN/ERROR line(s), first ones:\n    {}",
                shown.join("\n    ")
            ));
        }
        if let Some(e) = server.stop() {
            self.problems.push(format!("{scenario}: {e}"));
        }
    }
}

/// A live stream that got nothing for this long after the producer was done
/// will not get the rest (a getMore waits at most --max-await-ms).
fn give_up_after() -> Duration {
    (max_await() * 3).max(Duration::from_secs(5))
}

fn coll_w1(client: &Client, db: &str, name: &str) -> Collection<Document> {
    client.database(db).collection_with_options(
        name,
        CollectionOptions::builder().write_concern(w1()).build(),
    )
}

/// `{_id: ObjectId, i: i64, t: i64, s}` is 52 bytes of BSON plus the string:
/// `s` of 972 characters makes a 1,024-byte document.
const KB_DOC_PAD: usize = 972;

fn kb_doc_maker(seed: u64) -> MakeDoc {
    let pad = filler(KB_DOC_PAD, seed);
    Arc::new(
        move |i, t| doc! {"_id": mongodb::bson::oid::ObjectId::new(), "i": i as i64, "t": t, "s": pad.as_str()},
    )
}

async fn join_thread<T: Send + 'static>(h: std::thread::JoinHandle<T>) -> Result<T> {
    tokio::task::spawn_blocking(move || h.join())
        .await?
        .map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))
}

fn raw_i64(ev: &mongodb::bson::RawDocument, field: &str) -> Option<i64> {
    ev.get_document("fullDocument").ok()?.get_i64(field).ok()
}

// ---------------------------------------------------------------------------
// 1. catch-up

#[derive(Debug, Clone, Serialize)]
pub struct Catchup {
    pub docs: u64,
    pub doc_bytes: usize,
    pub insert_secs: f64,
    pub insert_docs_per_s: f64,
    /// How the stream was positioned before the inserts.
    pub start: String,
    pub batch_size: u32,
    /// The backlog read twice, by two clients (see [`StreamClient`]).
    pub reads: Vec<CatchupRead>,
}

/// How a stream is read (the catch-up reads with both; the latency consumer with one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StreamClient {
    /// `aggregate([{$changeStream}])` read a batch at a time through the driver's
    /// `RawBatchCursor`: events looked at inside the reply, as the server sent them.
    /// The client that is not the bottleneck, for the target.
    RawBatches,
    /// `watch()`, the driver's `ChangeStream<RawDocumentBuf>`: the driver copies
    /// every event twice and its resume token once (about a quarter of the
    /// client's CPU is memmove), on the same two cores as the server.
    Watch,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatchupRead {
    pub client: StreamClient,
    pub events: u64,
    pub missing: u64,
    /// BSON bytes of the events received.
    pub event_bytes: u64,
    pub read: CpuSpan,
    pub events_per_s: f64,
    pub mb_per_s: f64,
    pub error: Option<String>,
}

/// Where a stream opened later should start: the cluster time now (the
/// `operationTime` of a ping), else the resume token of an empty stream
/// opened now (its postBatchResumeToken).
enum StartPoint {
    OpTime(Timestamp),
    Token(ResumeToken),
}

async fn start_point(client: &Client, coll: &Collection<Document>) -> Result<StartPoint> {
    let reply = client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await?;
    if let Ok(ts) = reply.get_timestamp("operationTime") {
        return Ok(StartPoint::OpTime(ts));
    }
    let cs = coll.watch().await?;
    match cs.resume_token() {
        Some(t) => Ok(StartPoint::Token(t)),
        None => bail!(
            "neither an operationTime in the ping reply nor a resume token from an empty stream"
        ),
    }
}

pub async fn catchup(ctx: &mut Ctx, docs: u64, batch_size: u32) -> Result<Catchup> {
    let server = ctx.start(4096)?;
    let c = client(&server.uri(), 8).await?;
    let coll = coll_w1(&c, "bench", "catchup");
    c.database("bench").create_collection("catchup").await?;
    let start = start_point(&c, &coll).await?;

    eprintln!("  inserting {docs} documents of 1 KB (insert_many of 1,000, w:1, 4 clients)");
    let make = kb_doc_maker(1);
    let next_batch = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (coll, make, next_batch) = (coll.clone(), make.clone(), next_batch.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let b = next_batch.fetch_add(1, Ordering::Relaxed);
                let lo = b * 1000;
                if lo >= docs {
                    return Ok::<_, anyhow::Error>(());
                }
                let hi = (lo + 1000).min(docs);
                let batch: Vec<Document> = (lo..hi).map(|i| make(i, 0)).collect();
                let r = coll
                    .insert_many(batch)
                    .await
                    .with_context(|| format!("insert_many of documents {lo}..{hi}"))?;
                if r.inserted_ids.len() as u64 != hi - lo {
                    bail!(
                        "insert_many of documents {lo}..{hi} acknowledged {}",
                        r.inserted_ids.len()
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let insert_secs = t0.elapsed().as_secs_f64();
    if std::env::var_os("BENCH_CATCHUP_FLUSH").is_some() {
        // For profiling a small backlog: flush it to table files (as most of a
        // million events are), then give a profiler time to start counting.
        c.database("admin").run_command(doc! {"fsync": 1}).await?;
        eprintln!("  flushed to table files (BENCH_CATCHUP_FLUSH); reading in 3 s");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    eprintln!("  inserted in {insert_secs:.1} s; waiting for the server to go idle");
    wait_idle(server.pid, Duration::from_secs(60));

    let start_desc = match &start {
        StartPoint::OpTime(ts) => format!(
            "startAtOperationTime {{t: {}, i: {}}} (ping's operationTime)",
            ts.time, ts.increment
        ),
        StartPoint::Token(_) => "resumeAfter the postBatchResumeToken of an empty stream".into(),
    };
    let mut reads = Vec::new();
    for client_kind in [StreamClient::RawBatches, StreamClient::Watch] {
        let r = catchup_read(&server, &coll, &start, client_kind, docs, batch_size).await;
        eprintln!(
            "    {:?}: {} events in {:.2} s = {:.0} events/s; server {:.2} CPU s, client {:.2} CPU s",
            client_kind,
            r.events,
            r.read.wall_s,
            r.events_per_s,
            r.read.server_cpu_s,
            r.read.client_cpu_s
        );
        if let Some(e) = &r.error {
            ctx.problems
                .push(format!("catchup ({client_kind:?}): the stream failed: {e}"));
        }
        if r.missing > 0 {
            ctx.problems.push(format!(
                "catchup ({client_kind:?}): received {} of {docs} events",
                r.events
            ));
        }
        reads.push(r);
    }
    ctx.finish("catchup", server);
    Ok(Catchup {
        docs,
        doc_bytes: 1024,
        insert_secs,
        insert_docs_per_s: docs as f64 / insert_secs,
        start: start_desc,
        batch_size,
        reads,
    })
}

/// One stream from `start` reading the `docs` insert events after it.
async fn catchup_read(
    server: &ServerProc,
    coll: &Collection<Document>,
    start: &StartPoint,
    client_kind: StreamClient,
    docs: u64,
    batch_size: u32,
) -> CatchupRead {
    let mark = CpuMark::now(server);
    let mut bytes = 0u64;
    let drained = match client_kind {
        StreamClient::Watch => {
            let watch = coll
                .watch()
                .batch_size(batch_size)
                .max_await_time(max_await());
            let watch = match start {
                StartPoint::OpTime(ts) => watch.start_at_operation_time(*ts),
                StartPoint::Token(t) => watch.resume_after(t.clone()),
            };
            match watch.await {
                Ok(cs) => {
                    let mut cs: ChangeStream<RawDocumentBuf> = cs.with_type();
                    let done = AtomicBool::new(true);
                    drain(
                        &mut cs,
                        docs,
                        &done,
                        Duration::from_secs(10),
                        Instant::now() + Duration::from_secs(1800),
                        |ev| bytes += ev.as_bytes().len() as u64,
                    )
                    .await
                }
                Err(e) => Drained {
                    error: Some(e.to_string()),
                    ..Default::default()
                },
            }
        }
        StreamClient::RawBatches => {
            let (d, b) = drain_raw_batches(coll, start, docs, batch_size).await;
            bytes = b;
            d
        }
    };
    let read = mark.span();
    CatchupRead {
        client: client_kind,
        events: drained.received,
        missing: docs.saturating_sub(drained.received),
        event_bytes: bytes,
        events_per_s: drained.received as f64 / read.wall_s,
        mb_per_s: bytes as f64 / 1048576.0 / read.wall_s,
        read,
        error: drained.error,
    }
}

/// Reads `docs` insert events with `aggregate([{$changeStream}])` a batch at a
/// time, each event checked where it lies in the reply; the events and their bytes.
async fn drain_raw_batches(
    coll: &Collection<Document>,
    start: &StartPoint,
    docs: u64,
    batch_size: u32,
) -> (Drained, u64) {
    let opts = match start {
        StartPoint::OpTime(ts) => doc! {"startAtOperationTime": *ts},
        StartPoint::Token(t) => match mongodb::bson::to_bson(t) {
            Ok(t) => doc! {"resumeAfter": t},
            Err(e) => {
                let error = Some(e.to_string());
                return (
                    Drained {
                        error,
                        ..Default::default()
                    },
                    0,
                );
            }
        },
    };
    let cursor = coll
        .aggregate([doc! {"$changeStream": opts}])
        .batch_size(batch_size)
        .max_await_time(max_await())
        .batch()
        .await;
    let mut cursor = match cursor {
        Ok(c) => c,
        Err(e) => {
            let error = Some(e.to_string());
            return (
                Drained {
                    error,
                    ..Default::default()
                },
                0,
            );
        }
    };
    let mut bytes = 0u64;
    // The backlog is all there: nothing for 10 s ends the read.
    let all_written = AtomicBool::new(true);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let d = drain_batches(
        &mut cursor,
        docs,
        &all_written,
        Duration::from_secs(10),
        deadline,
        |ev| {
            if ev.get_str("operationType").ok() != Some("insert") {
                return Err(format!("an event that is not an insert: {ev:?}"));
            }
            bytes += ev.as_bytes().len() as u64;
            Ok(())
        },
    )
    .await;
    (d, bytes)
}

// ---------------------------------------------------------------------------
// 2. fan-out

#[derive(Debug, Clone, Serialize)]
pub struct FanoutRow {
    pub streams: usize,
    pub clients: usize,
    pub expected: u64,
    pub producer: ProducerResult,
    /// Streams that received every event exactly once.
    pub complete_streams: usize,
    pub missing_total: u64,
    pub duplicates_total: u64,
    pub errors: Vec<String>,
    /// Seconds to open every stream.
    pub open_secs: f64,
    /// From the producer's start to the last stream having everything.
    pub cpu: CpuSpan,
    pub server_cpu_per_s: f64,
    pub ratio_to_1: Option<f64>,
}

struct StreamOutcome {
    distinct: u64,
    duplicates: u64,
    drained: Drained,
}

const STREAMS_PER_CLIENT: usize = 50;

pub async fn fanout(
    ctx: &mut Ctx,
    counts: &[usize],
    secs: f64,
    rate: f64,
    batch: usize,
) -> Result<Vec<FanoutRow>> {
    let server = ctx.start(1024)?;
    let uri = server.uri();
    let mut rows: Vec<FanoutRow> = Vec::new();
    let mut all_counts = vec![0usize];
    all_counts.extend(counts.iter().copied().filter(|&n| n > 0));
    for &n in &all_counts {
        let name = format!("fanout{n}");
        let pace = Pace { rate, secs, batch };
        let expected = pace.total();
        let nclients = n.div_ceil(STREAMS_PER_CLIENT).max(1);
        eprintln!("  {n} stream(s) on {nclients} client(s), producer {rate} docs/s for {secs} s");
        let mut clients = Vec::new();
        for _ in 0..nclients {
            clients.push(client(&uri, STREAMS_PER_CLIENT as u32 + 10).await?);
        }
        clients[0]
            .database("bench")
            .create_collection(&name)
            .await?;

        let done = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicU64::new(0));
        // Streams that have every event, and when the last event arrived anywhere.
        let complete_n = Arc::new(AtomicU64::new(0));
        let last_event_ns = Arc::new(AtomicI64::new(0));
        let t_open = Instant::now();
        let mut tasks = Vec::new();
        for k in 0..n {
            let coll: Collection<Document> = clients[k / STREAMS_PER_CLIENT]
                .database("bench")
                .collection(&name);
            let (done, ready, complete_n, last_event_ns) = (
                done.clone(),
                ready.clone(),
                complete_n.clone(),
                last_event_ns.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let cs = coll.watch().max_await_time(max_await()).await;
                ready.fetch_add(1, Ordering::SeqCst);
                let mut cs: ChangeStream<RawDocumentBuf> = match cs {
                    Ok(cs) => cs.with_type(),
                    Err(e) => {
                        return StreamOutcome {
                            distinct: 0,
                            duplicates: 0,
                            drained: Drained {
                                error: Some(format!("watch: {e}")),
                                ..Default::default()
                            },
                        }
                    }
                };
                let mut seen = vec![0u64; (expected as usize).div_ceil(64)];
                let (mut distinct, mut duplicates) = (0u64, 0u64);
                let deadline = Instant::now() + Duration::from_secs_f64(secs + 300.0);
                let drained = drain(&mut cs, expected, &done, give_up_after(), deadline, |ev| {
                    if let Some(i) = raw_i64(ev, "i").filter(|&i| (i as u64) < expected) {
                        let (w, b) = (i as usize / 64, 1u64 << (i % 64));
                        if seen[w] & b != 0 {
                            duplicates += 1;
                        } else {
                            seen[w] |= b;
                            distinct += 1;
                        }
                    }
                    last_event_ns.fetch_max(mono_ns(), Ordering::Relaxed);
                })
                .await;
                if distinct == expected {
                    complete_n.fetch_add(1, Ordering::SeqCst);
                }
                StreamOutcome {
                    distinct,
                    duplicates,
                    drained,
                }
            }));
        }
        let open_deadline = Instant::now() + Duration::from_secs(300);
        while (ready.load(Ordering::SeqCst) as usize) < n && Instant::now() < open_deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let open_secs = t_open.elapsed().as_secs_f64();
        // Let every stream reach its waiting getMore, and the server settle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        wait_idle(server.pid, Duration::from_secs(5));

        let mark = CpuMark::now(&server);
        let producer = spawn_producer(
            uri.clone(),
            "bench".into(),
            name.clone(),
            pace,
            kb_doc_maker(2),
            done.clone(),
        );
        let producer = join_thread(producer).await?;
        // The span ends when every stream has everything; if some never do, at the
        // last event received (once nothing came for 2 s), so that waiting for
        // missing events does not dilute the CPU per second.
        let producer_end = mono_ns();
        let cpu = loop {
            if complete_n.load(Ordering::SeqCst) as usize >= n {
                break mark.span();
            }
            let last = last_event_ns.load(Ordering::Relaxed).max(producer_end);
            if mono_ns() - last > 2_000_000_000 {
                break mark.span_until_ns(last);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let mut complete = 0;
        let (mut missing, mut dups) = (0u64, 0u64);
        let mut errors = Vec::new();
        for t in tasks {
            let o = t.await?;
            if o.distinct == expected && o.duplicates == 0 {
                complete += 1;
            }
            missing += expected - o.distinct.min(expected);
            dups += o.duplicates;
            if let Some(e) = o.drained.error {
                if errors.len() < 5 {
                    errors.push(e);
                }
            }
        }
        if producer.acked != expected || !producer.errors.is_empty() {
            ctx.problems.push(format!(
                "fanout {n}: the producer had {} of {expected} inserts acknowledged; errors: {:?}",
                producer.acked, producer.errors
            ));
        }
        if n > 0 && (complete < n || !errors.is_empty()) {
            ctx.problems.push(format!(
                "fanout {n}: {complete} of {n} streams got every event; {missing} events missing in total, {dups} duplicates; errors: {errors:?}"
            ));
        }
        let per_s = cpu.server_per_s();
        let ratio_to_1 = rows
            .iter()
            .find(|r| r.streams == 1)
            .map(|r| per_s / r.server_cpu_per_s);
        eprintln!(
            "    server {:.3} CPU s/s, client {:.2} CPU s in {:.1} s; {complete}/{n} streams complete",
            per_s, cpu.client_cpu_s, cpu.wall_s
        );
        rows.push(FanoutRow {
            streams: n,
            clients: if n == 0 { 0 } else { nclients },
            expected,
            producer,
            complete_streams: complete,
            missing_total: missing,
            duplicates_total: dups,
            errors,
            open_secs,
            cpu,
            server_cpu_per_s: per_s,
            ratio_to_1,
        });
        drop(clients);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    ctx.finish("fanout", server);
    Ok(rows)
}

// ---------------------------------------------------------------------------
// 3. isolation

#[derive(Debug, Clone, Serialize)]
pub struct IsolationRun {
    pub with_stream: bool,
    pub producer: ProducerResult,
    pub cpu: CpuSpan,
    pub server_cpu_per_s: f64,
    /// The same without RocksDB's flush and compaction threads.
    pub server_foreground_cpu_per_s: f64,
    /// Events the stream on the idle collection received (must be 0).
    pub stream_events: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Isolation {
    pub rate: f64,
    pub batch: usize,
    pub secs: f64,
    pub runs: Vec<IsolationRun>,
    pub mean_without: f64,
    pub mean_with: f64,
    pub diff_pct: f64,
    /// The same means without the storage engine's background threads.
    pub fg_mean_without: f64,
    pub fg_mean_with: f64,
    pub fg_diff_pct: f64,
}

pub async fn isolation(ctx: &mut Ctx, secs: f64, rate: f64, batch: usize) -> Result<Isolation> {
    let server = ctx.start(4096)?;
    let uri = server.uri();
    let c = client(&uri, 8).await?;
    for name in ["a", "b"] {
        c.database("bench").create_collection(name).await?;
    }
    let mut runs = Vec::new();
    // The first run on a fresh, empty server is cheaper than any later one (nothing
    // to flush or compact yet): it warms the server up and is not counted.
    // Three ABBA rounds after the warm-up: with runs of 10 s the spread between runs
    // (±15%) is larger than the effect measured, so more runs than one round.
    let order = [
        false, false, true, true, false, false, true, true, false, false, true, true, false,
    ];
    for (i, with_stream) in order.into_iter().enumerate() {
        let warm_up = i == 0;
        eprintln!(
            "  {}{} stream on A, {rate} inserts/s into B for {secs} s",
            if warm_up {
                "(warm-up, not counted) "
            } else {
                ""
            },
            if with_stream { "one" } else { "no" }
        );
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = if with_stream {
            let a: Collection<Document> = c.database("bench").collection("a");
            let cs = a
                .watch()
                .max_await_time(max_await())
                .await
                .context("watch on A")?;
            let stop = stop.clone();
            let h = tokio::spawn(async move {
                let mut cs: ChangeStream<RawDocumentBuf> = cs.with_type();
                drain(
                    &mut cs,
                    u64::MAX,
                    &stop,
                    Duration::ZERO,
                    Instant::now() + Duration::from_secs(3600),
                    |_| {},
                )
                .await
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some(h)
        } else {
            None
        };
        wait_idle(server.pid, Duration::from_secs(20));
        let mark = CpuMark::now(&server);
        let done = Arc::new(AtomicBool::new(false));
        let pace = Pace { rate, secs, batch };
        let producer = join_thread(spawn_producer(
            uri.clone(),
            "bench".into(),
            "b".into(),
            pace,
            kb_doc_maker(3),
            done,
        ))
        .await?;
        let cpu = mark.span();
        stop.store(true, Ordering::SeqCst);
        let stream_events = match watcher {
            Some(h) => {
                let d = h.await?;
                if let Some(e) = &d.error {
                    ctx.problems
                        .push(format!("isolation: the stream on A failed: {e}"));
                }
                if d.received > 0 {
                    ctx.problems.push(format!(
                        "isolation: the stream on A (never written) returned {} events",
                        d.received
                    ));
                }
                Some(d.received)
            }
            None => None,
        };
        if !producer.errors.is_empty() || producer.failed > 0 {
            ctx.problems
                .push(format!("isolation: producer errors {:?}", producer.errors));
        }
        eprintln!(
            "    server {:.3} CPU s/s ({:.2} s in {:.1} s)",
            cpu.server_per_s(),
            cpu.server_cpu_s,
            cpu.wall_s
        );
        if warm_up {
            continue;
        }
        runs.push(IsolationRun {
            with_stream,
            producer,
            server_cpu_per_s: cpu.server_per_s(),
            server_foreground_cpu_per_s: cpu.server_foreground_per_s(),
            cpu,
            stream_events,
        });
    }
    ctx.finish("isolation", server);
    let mean = |w: bool, fg: bool| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.with_stream == w)
            .map(|r| {
                if fg {
                    r.server_foreground_cpu_per_s
                } else {
                    r.server_cpu_per_s
                }
            })
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let (mean_without, mean_with) = (mean(false, false), mean(true, false));
    let (fg_mean_without, fg_mean_with) = (mean(false, true), mean(true, true));
    Ok(Isolation {
        rate,
        batch,
        secs,
        runs,
        mean_without,
        mean_with,
        diff_pct: (mean_with - mean_without) / mean_without * 100.0,
        fg_mean_without,
        fg_mean_with,
        fg_diff_pct: (fg_mean_with - fg_mean_without) / fg_mean_without * 100.0,
    })
}

// ---------------------------------------------------------------------------
// 4. resume after large documents (seed 000, scaled down)

#[derive(Debug, Clone, Serialize)]
pub struct ResumeVariant {
    /// Where the large documents went: "foo" (the markers' collection) or "bar".
    pub big_collection: String,
    pub docs: u64,
    pub doc_bytes: u64,
    pub insert_secs: f64,
    pub page_cache_dropped: bool,
    /// From the aggregate that resumes to the first / last marker event.
    pub first_marker_ms: Option<f64>,
    pub last_marker_ms: Option<f64>,
    pub markers_received: u64,
    /// `read_bytes` of the server process during the resume.
    pub server_read_bytes: Option<u64>,
    pub cpu: CpuSpan,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Resume {
    pub variants: Vec<ResumeVariant>,
    /// Sequential read throughput of the disk under the data directory.
    pub seq_read_mb_s: f64,
    pub seq_read_method: String,
    pub seq_read_file_bytes: u64,
    /// Reading the large documents once, sequentially: docs × size / throughput.
    pub reference_s: f64,
    pub notes: Vec<String>,
}

/// Writes `bytes` of `content` (repeated) to a file in `dir`, syncs it, and reads
/// it back from the disk: after dropping the page cache when that works, else
/// with O_DIRECT. Returns (MB/s, method).
fn seq_read_throughput(dir: &Path, bytes: u64, content: &[u8]) -> Result<(f64, String)> {
    let path = dir.join(format!("seqread-{}.bin", std::process::id()));
    let res = (|| -> Result<(f64, String)> {
        let mut f = fs::File::create(&path)?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(content.len() as u64) as usize;
            f.write_all(&content[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        drop(f);
        let dropped = drop_caches();
        let t0 = Instant::now();
        let read = if dropped {
            let mut f = fs::File::open(&path)?;
            let mut buf = vec![0u8; 4 << 20];
            let mut total = 0u64;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break total;
                }
                total += n as u64;
            }
        } else {
            let f = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)?;
            let layout = std::alloc::Layout::from_size_align(4 << 20, 4096)?;
            // SAFETY: a non-zero-sized layout; freed below with the same layout.
            let ptr = unsafe { std::alloc::alloc(layout) };
            if ptr.is_null() {
                bail!("cannot allocate an aligned buffer");
            }
            let mut total = 0u64;
            let r = loop {
                use std::os::unix::io::AsRawFd;
                // SAFETY: reading into our own buffer of layout.size() bytes.
                let n =
                    unsafe { libc::read(f.as_raw_fd(), ptr as *mut libc::c_void, layout.size()) };
                if n < 0 {
                    break Err(std::io::Error::last_os_error());
                }
                if n == 0 {
                    break Ok(total);
                }
                total += n as u64;
            };
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            r.context("O_DIRECT read")?
        };
        let secs = t0.elapsed().as_secs_f64();
        let method = if dropped {
            "buffered read after dropping the page cache"
        } else {
            "O_DIRECT read, 4 MiB requests"
        };
        Ok((read as f64 / 1048576.0 / secs, method.to_string()))
    })();
    let _ = fs::remove_file(&path);
    res
}

pub async fn resume(ctx: &mut Ctx, mut docs: u64, doc_mb: f64) -> Result<Resume> {
    let doc_bytes = (doc_mb * 1048576.0) as u64;
    let mut notes = Vec::new();
    // Disk: the documents are stored twice (collection and oplog) plus the
    // reference file and a margin; one variant's server at a time.
    let ref_bytes = (docs * doc_bytes).min(1 << 30);
    let free = free_disk_bytes(&ctx.data_dir).unwrap_or(u64::MAX);
    let margin = 2u64 << 30;
    let need = |d: u64| 2 * d * doc_bytes + ref_bytes + margin;
    if need(docs) > free {
        let fit = free.saturating_sub(ref_bytes + margin) / (2 * doc_bytes);
        let msg = format!(
            "only {:.1} GB free under {}: {docs} documents of {doc_mb} MB need about {:.1} GB; scaled down to {fit}",
            free as f64 / 1e9,
            ctx.data_dir.display(),
            need(docs) as f64 / 1e9
        );
        eprintln!("  WARNING: {msg}");
        notes.push(msg);
        docs = fit;
        if docs < 3 {
            bail!("not enough disk space for the resume scenario");
        }
    }
    let oplog_mb = (((2 * docs * doc_bytes) >> 20) + 1024).max(8192);
    let big = filler(doc_bytes as usize, 4);

    eprintln!(
        "  measuring the disk's sequential read throughput ({} MB file)",
        ref_bytes >> 20
    );
    let (seq_mb_s, seq_method) = seq_read_throughput(&ctx.data_dir, ref_bytes, big.as_bytes())?;
    let reference_s = (docs * doc_bytes) as f64 / 1048576.0 / seq_mb_s;
    eprintln!("    {seq_mb_s:.0} MB/s ({seq_method}); reference {reference_s:.2} s");

    let mut variants = Vec::new();
    for big_coll in ["foo", "bar"] {
        eprintln!("  large documents into {big_coll}, markers into foo: {docs} × {doc_mb} MB");
        let server = ctx.start(oplog_mb)?;
        let v = resume_variant(&server, big_coll, docs, &big).await;
        ctx.finish(&format!("resume ({big_coll})"), server);
        let v = v?;
        if let Some(e) = &v.error {
            ctx.problems.push(format!("resume ({big_coll}): {e}"));
        }
        eprintln!(
            "    first marker {:?} ms, last marker {:?} ms, {} markers, server read {:?} bytes",
            v.first_marker_ms, v.last_marker_ms, v.markers_received, v.server_read_bytes
        );
        variants.push(v);
    }
    Ok(Resume {
        variants,
        seq_read_mb_s: seq_mb_s,
        seq_read_method: seq_method,
        seq_read_file_bytes: ref_bytes,
        reference_s,
        notes,
    })
}

async fn resume_variant(
    server: &ServerProc,
    big_coll: &str,
    docs: u64,
    big: &str,
) -> Result<ResumeVariant> {
    let c = client(&server.uri(), 4).await?;
    let foo = coll_w1(&c, "test", "foo");
    let big_c = coll_w1(&c, "test", big_coll);
    c.database("test").create_collection("foo").await?;
    if big_coll != "foo" {
        c.database("test").create_collection(big_coll).await?;
    }
    // The first marker's resume token: open, insert, read it, close.
    let token = {
        let mut cs = foo.watch().max_await_time(max_await()).await?;
        foo.insert_one(doc! {"msg": "marker 0"}).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(ev) = cs.next_if_any().await? {
                break ev.id;
            }
            if Instant::now() > deadline {
                bail!("the stream did not show the first marker within 30 s");
            }
        }
    };
    let t0 = Instant::now();
    for i in 0..docs {
        big_c
            .insert_one(doc! {"i": i as i64, "s": big})
            .await
            .with_context(|| format!("insert of large document {i}"))?;
        for m in 1..=3u64 {
            if i + 1 == docs * m / 3 {
                foo.insert_one(doc! {"msg": format!("marker {m}")}).await?;
            }
        }
    }
    let insert_secs = t0.elapsed().as_secs_f64();
    eprintln!("    inserted in {insert_secs:.1} s; waiting for the server to go idle");
    wait_idle(server.pid, Duration::from_secs(120));
    let page_cache_dropped = drop_caches();
    // Dropping the page cache also evicts the server's own code: page it back in with a
    // change stream of the same shape on another collection, so the figures below are
    // the resume's data reads, not the binary's.
    {
        let warm = coll_w1(&c, "test", "warmup");
        let mut cs = warm
            .watch()
            .pipeline([doc! {"$match": {"fullDocument.msg": {"$exists": true}}}])
            .max_await_time(max_await())
            .await?;
        warm.insert_one(doc! {"msg": "warm-up"}).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while cs.next_if_any().await?.is_none() {
            if Instant::now() > deadline {
                bail!("warm-up stream got no event within 30 s");
            }
        }
    }

    let rb0 = proc_io_bytes(&server.pid.to_string(), "read_bytes");
    let mark = CpuMark::now(server);
    let t0 = Instant::now();
    let (mut first, mut last, mut markers, mut error) = (None, None, 0u64, None);
    let opened = foo
        .watch()
        .pipeline([doc! {"$match": {"fullDocument.msg": {"$exists": true}}}])
        .resume_after(token)
        .max_await_time(max_await())
        .await;
    match opened {
        Err(e) => error = Some(format!("resume (aggregate) failed: {e}")),
        Ok(cs) => {
            let mut cs: ChangeStream<RawDocumentBuf> = cs.with_type();
            let deadline = Instant::now() + Duration::from_secs(1800);
            while last.is_none() {
                if Instant::now() > deadline {
                    error = Some(format!("only {markers} of 3 markers within 1,800 s"));
                    break;
                }
                match cs.next_if_any().await {
                    Ok(Some(ev)) => {
                        let ms = t0.elapsed().as_secs_f64() * 1e3;
                        let msg = ev
                            .get_document("fullDocument")
                            .ok()
                            .and_then(|d| d.get_str("msg").ok())
                            .unwrap_or("")
                            .to_string();
                        markers += 1;
                        if first.is_none() {
                            first = Some(ms);
                            if msg != "marker 1" {
                                error = Some(format!(
                                    "the first event after the resume is {msg:?}, not \"marker 1\""
                                ));
                            }
                        }
                        if msg == "marker 3" {
                            last = Some(ms);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        error = Some(format!("getMore failed after {markers} markers: {e}"));
                        break;
                    }
                }
            }
        }
    }
    let cpu = mark.span();
    let rb1 = proc_io_bytes(&server.pid.to_string(), "read_bytes");
    Ok(ResumeVariant {
        big_collection: big_coll.into(),
        docs,
        doc_bytes: big.len() as u64,
        insert_secs,
        page_cache_dropped,
        first_marker_ms: first,
        last_marker_ms: last,
        markers_received: markers,
        server_read_bytes: rb0.zip(rb1).map(|(a, b)| b.saturating_sub(a)),
        cpu,
        error,
    })
}

// ---------------------------------------------------------------------------
// 5. insert-to-event latency

#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    pub rate: f64,
    pub batch: usize,
    pub secs: f64,
    pub producer: ProducerResult,
    pub received: u64,
    pub missing: u64,
    pub latency: Stats,
    pub cpu: CpuSpan,
    pub error: Option<String>,
    /// The server's own write-ahead-log fsyncs during the row (serverStatus
    /// `durability.syncMicros`); None for a server that does not report them.
    pub wal_fsync: Option<WalFsyncs>,
    /// Each commit's wait for the end of the fsync that covered it (serverStatus
    /// `durability.commitToDurableMicros`): the server's part of an event's latency up
    /// to its visibility; None for a server that does not report it.
    pub commit_waits: Option<WalFsyncs>,
    /// Send to acknowledgement of the producer's inserts (`{w: 1}`: no wait for the
    /// disk), one figure per insert.
    pub acks: Stats,
    /// [`paced_log_latency`] at the row's pace, before and after it.
    pub durability_floor: Stats,
    /// The same bare log during the row, at the same time as the server (its writes
    /// and fsyncs add to the disk's load); only in the rows run with one alongside.
    pub concurrent_floor: Option<Stats>,
}

/// Percentiles of the server's fsyncs over a span, from its histogram (10 µs buckets
/// below 10 ms, 1 ms buckets up to 1 s): each figure is its bucket's upper bound.
#[derive(Debug, Clone, Serialize)]
pub struct WalFsyncs {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The p99 of fsync durations weighted by their length: the fsync that a write
    /// arriving at a random moment finds in progress is more likely a long one
    /// (the inspection paradox), so this is what a random event waits behind.
    pub p99_time_weighted_ms: f64,
}

/// One of the server's durability histograms (`syncMicros`: its fsyncs;
/// `commitToDurableMicros`: each commit's wait for the fsync covering it): (upper
/// bound µs, -1 for the open last bucket; count).
async fn durability_histogram(c: &Client, name: &str) -> Option<Vec<(i64, u64)>> {
    let status = c
        .database("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .ok()?;
    let buckets = status
        .get_document("durability")
        .ok()?
        .get_document(name)
        .ok()?
        .get_array("buckets")
        .ok()?;
    buckets
        .iter()
        .map(|b| {
            let pair = b.as_array()?;
            let num = |v: &mongodb::bson::Bson| match v {
                mongodb::bson::Bson::Int64(n) => Some(*n),
                mongodb::bson::Bson::Int32(n) => Some(*n as i64),
                _ => None,
            };
            Some((num(pair.first()?)?, num(pair.get(1)?)?.max(0) as u64))
        })
        .collect()
}

/// The fsyncs between two histograms.
fn wal_fsyncs_between(before: &[(i64, u64)], after: &[(i64, u64)]) -> Option<WalFsyncs> {
    let mut delta: Vec<(i64, u64)> = after
        .iter()
        .map(|&(upper, n)| {
            let was = before
                .iter()
                .find(|(u, _)| *u == upper)
                .map(|(_, n)| *n)
                .unwrap_or(0);
            (upper, n.saturating_sub(was))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    // The open last bucket (-1) sorts last.
    delta.sort_by_key(|(upper, _)| if *upper < 0 { i64::MAX } else { *upper });
    let count: u64 = delta.iter().map(|(_, n)| n).sum();
    if count == 0 {
        return None;
    }
    let ms = |upper: i64| {
        if upper < 0 {
            f64::INFINITY
        } else {
            upper as f64 / 1000.0
        }
    };
    // Percentile `q` with each bucket weighted by `weight(upper bound, count)`.
    let at = |q: f64, weight: &dyn Fn(i64, u64) -> f64| {
        let total: f64 = delta.iter().map(|&(u, n)| weight(u, n)).sum();
        let mut seen = 0.0;
        for &(upper, n) in &delta {
            seen += weight(upper, n);
            if seen >= q * total {
                return ms(upper);
            }
        }
        ms(delta.last().expect("non-empty").0)
    };
    let by_count = |_: i64, n: u64| n as f64;
    // The open last bucket (a second or more) weighs as one second.
    let by_time = |upper: i64, n: u64| n as f64 * if upper < 0 { 1e6 } else { upper as f64 };
    Some(WalFsyncs {
        count,
        p50_ms: at(0.50, &by_count),
        p99_ms: at(0.99, &by_count),
        max_ms: ms(delta.last().expect("non-empty").0),
        p99_time_weighted_ms: at(0.99, &by_time),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// How the consumer read its stream.
    pub client: StreamClient,
    pub rows: Vec<LatencyRow>,
    /// 4 KB appended and fdatasync'ed, in the server's dbpath.
    pub fsync: Stats,
    /// 4 KB rewritten in place (in a file already written) and fdatasync'ed: what a
    /// write-ahead log that reuses its files pays (no inode update per sync).
    pub fsync_in_place: Stats,
}

impl Latency {
    /// The lower of the two disk references: the unavoidable wait for durability.
    pub fn fsync_floor_p99_ms(&self) -> f64 {
        self.fsync.p99_ms.min(self.fsync_in_place.p99_ms)
    }
}

pub async fn latency(
    ctx: &mut Ctx,
    rates: &[f64],
    secs: f64,
    fsync_samples: usize,
    warmup_mb: u64,
    reader: StreamClient,
) -> Result<Latency> {
    let server = ctx.start(4096)?;
    let uri = server.uri();
    if warmup_mb > 0 {
        eprintln!(
            "  warm-up: {warmup_mb} MiB written to bench.latency_warmup, dropped, then fsync"
        );
        let c = client(&uri, 2).await?;
        let coll: Collection<Document> = c.database("bench").collection("latency_warmup");
        let chunk = filler(64 << 10, 7);
        for mb in 0..warmup_mb {
            let docs: Vec<Document> = (0..16)
                .map(|k| doc! {"mb": mb as i64, "k": k, "pad": &chunk})
                .collect();
            coll.insert_many(docs).await?;
        }
        coll.drop().await?;
        // A checkpoint, as a running server takes: the memtables go to the data files
        // and the write-ahead log moves on to its next file (a reused one, where the
        // server reuses them).
        // Twice, with a write between: the first may land right after the log moved
        // on by itself, when the current file is still empty and is kept.
        c.database("admin").run_command(doc! {"fsync": 1}).await?;
        coll.insert_one(doc! {"mb": -1}).await?;
        c.database("admin").run_command(doc! {"fsync": 1}).await?;
        coll.drop().await?;
        wait_idle(server.pid, Duration::from_secs(30));
    }
    let mut rows = Vec::new();
    // Each rate twice: alone, then with a second bare log running alongside the row
    // (the event p99 next to the disk's p99 of those very seconds).
    let runs: Vec<(f64, bool)> = rates
        .iter()
        .flat_map(|&rate| [(rate, false), (rate, true)])
        .collect();
    for (rate, alongside) in runs {
        // insert_one every millisecond at 1,000/s; above, insert_many every millisecond.
        let batch = ((rate / 1000.0).round() as usize).max(1);
        let pace = Pace { rate, secs, batch };
        let total = pace.total();
        let name = format!("latency{}{}", rate as u64, if alongside { "b" } else { "" });
        eprintln!(
            "  {rate} inserts/s ({batch} per insert every {:.1} ms) for {secs} s{}",
            batch as f64 / rate * 1e3,
            if alongside {
                ", a bare log alongside"
            } else {
                ""
            }
        );
        // The disk's durability floor at this pace, measured right before and right
        // after the row (the disk's stalls come and go: the two halves bracket it).
        let probe = |pace: Pace| {
            let dir = server.dbpath();
            tokio::task::spawn_blocking(move || paced_log_latency(&dir, &pace))
        };
        wait_idle(server.pid, Duration::from_secs(10));
        let mut floor = probe(pace).await??;
        let done = Arc::new(AtomicBool::new(false));
        // The consumer has a thread and a runtime of its own: its receive time is
        // not delayed by the producer's tasks.
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let consumer = {
            let (uri, name, done) = (uri.clone(), name.clone(), done.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let mut lat = vec![i64::MIN; total as usize];
                    let mut record = |ev: &mongodb::bson::RawDocument| {
                        let now = mono_ns();
                        if let (Some(i), Some(t)) = (raw_i64(ev, "i"), raw_i64(ev, "t")) {
                            if let Some(slot) = lat.get_mut(i as usize) {
                                *slot = now - t;
                            }
                        }
                    };
                    let deadline = Instant::now() + Duration::from_secs_f64(secs + 300.0);
                    let coll = async {
                        let c = client(&uri, 4).await?;
                        c.database("bench").create_collection(&name).await?;
                        Ok::<_, anyhow::Error>(c.database("bench").collection::<Document>(&name))
                    }
                    .await;
                    let coll = match coll {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(format!("{e:#}")));
                            return (lat, Drained::default());
                        }
                    };
                    let d = match reader {
                        StreamClient::Watch => {
                            let mut cs: ChangeStream<RawDocumentBuf> =
                                match coll.watch().max_await_time(max_await()).await {
                                    Ok(cs) => cs.with_type(),
                                    Err(e) => {
                                        let _ = ready_tx.send(Err(e.to_string()));
                                        return (lat, Drained::default());
                                    }
                                };
                            let _ = ready_tx.send(Ok(()));
                            drain(&mut cs, total, &done, give_up_after(), deadline, |ev| {
                                record(ev)
                            })
                            .await
                        }
                        StreamClient::RawBatches => {
                            let opened = coll
                                .aggregate([doc! {"$changeStream": {}}])
                                .max_await_time(max_await())
                                .batch()
                                .await;
                            let mut cursor = match opened {
                                Ok(c) => c,
                                Err(e) => {
                                    let _ = ready_tx.send(Err(e.to_string()));
                                    return (lat, Drained::default());
                                }
                            };
                            let _ = ready_tx.send(Ok(()));
                            drain_batches(
                                &mut cursor,
                                total,
                                &done,
                                give_up_after(),
                                deadline,
                                |ev| {
                                    record(ev);
                                    Ok(())
                                },
                            )
                            .await
                        }
                    };
                    (lat, d)
                })
            })
        };
        match tokio::task::spawn_blocking(move || ready_rx.recv()).await? {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("latency {rate}/s: cannot open the stream: {e}"),
            Err(_) => bail!("latency {rate}/s: the consumer thread ended"),
        }
        // With `alongside`, a second bare log runs during the row itself, from the
        // producer's start: it meets the disk's stalls of the row's own seconds (its
        // file is made first).
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let during = if alongside {
            let concurrent = LogProbe::prepare(&server.dbpath(), "bench-log-probe-during")?;
            Some(std::thread::spawn(move || -> Result<Vec<i64>> {
                if go_rx.recv().is_err() {
                    return Ok(Vec::new());
                }
                concurrent.run(&pace)
            }))
        } else {
            None
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        wait_idle(server.pid, Duration::from_secs(10));
        let status_client = client(&uri, 2).await?;
        let fsyncs_before = durability_histogram(&status_client, "syncMicros").await;
        let waits_before = durability_histogram(&status_client, "commitToDurableMicros").await;
        let mark = CpuMark::now(&server);
        let make: MakeDoc = Arc::new(|i, t| doc! {"i": i as i64, "t": t});
        let _ = go_tx.send(());
        let mut producer = join_thread(spawn_producer(
            uri.clone(),
            "bench".into(),
            name,
            pace,
            make,
            done,
        ))
        .await?;
        let (lat, d) = join_thread(consumer).await?;
        let cpu = mark.span();
        let concurrent_floor = match during {
            Some(t) => Some(stats(join_thread(t).await??)),
            None => None,
        };
        let wal_fsync = match (
            fsyncs_before,
            durability_histogram(&status_client, "syncMicros").await,
        ) {
            (Some(b), Some(a)) => wal_fsyncs_between(&b, &a),
            _ => None,
        };
        let commit_waits = match (
            waits_before,
            durability_histogram(&status_client, "commitToDurableMicros").await,
        ) {
            (Some(b), Some(a)) => wal_fsyncs_between(&b, &a),
            _ => None,
        };
        if let Some(w) = &commit_waits {
            eprintln!(
                "    server: commit to durable p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} commits)",
                w.p50_ms, w.p99_ms, w.max_ms, w.count
            );
        }
        let got: Vec<i64> = lat.into_iter().filter(|&x| x != i64::MIN).collect();
        let missing = total - got.len() as u64;
        if missing > 0 || d.error.is_some() || !producer.errors.is_empty() {
            ctx.problems.push(format!(
                "latency {rate}/s: {missing} of {total} events missing (the stream returned {} events{}); stream error: {:?}; producer: {} acknowledged, errors: {:?}",
                d.received,
                if d.gave_up { format!(", then nothing for {:.0} s after the producer was done", give_up_after().as_secs_f64()) } else { String::new() },
                d.error, producer.acked, producer.errors
            ));
        }
        let s = stats(got);
        let ack = stats(std::mem::take(&mut producer.ack_ns));
        eprintln!(
            "    p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {missing} missing; producer max lag {:.1} ms; inserts acknowledged (w: 1) p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            s.p50_ms, s.p99_ms, s.max_ms, producer.max_lag_ms, ack.p50_ms, ack.p99_ms, ack.max_ms
        );
        wait_idle(server.pid, Duration::from_secs(10));
        floor.extend(probe(pace).await??);
        let durability_floor = stats(floor);
        eprintln!(
            "    a bare log on this disk at the same pace (before and after the row): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            durability_floor.p50_ms, durability_floor.p99_ms, durability_floor.max_ms
        );
        if let Some(c) = &concurrent_floor {
            eprintln!(
                "    a bare log on this disk at the same pace during the row: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                c.p50_ms, c.p99_ms, c.max_ms
            );
        }
        rows.push(LatencyRow {
            rate,
            batch,
            secs,
            producer,
            received: s.count,
            missing,
            latency: s,
            cpu,
            error: d.error,
            wal_fsync,
            commit_waits,
            acks: ack,
            durability_floor,
            concurrent_floor,
        });
    }
    wait_idle(server.pid, Duration::from_secs(10));
    eprintln!("  fdatasync latency: {fsync_samples} × (append 4 KB + fdatasync) in the dbpath");
    let fsync = fsync_latency(&server.dbpath(), fsync_samples, false)?;
    eprintln!(
        "    p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        fsync.p50_ms, fsync.p99_ms, fsync.max_ms
    );
    eprintln!(
        "  fdatasync latency: {fsync_samples} × (rewrite 4 KB in place + fdatasync) in the dbpath"
    );
    let fsync_in_place = fsync_latency(&server.dbpath(), fsync_samples, true)?;
    eprintln!(
        "    p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        fsync_in_place.p50_ms, fsync_in_place.p99_ms, fsync_in_place.max_ms
    );
    ctx.finish("latency", server);
    Ok(Latency {
        client: reader,
        rows,
        fsync,
        fsync_in_place,
    })
}

/// The disk's own durability latency, `n` times 4 KB written and fdatasync'ed: appended
/// to a new file (each sync also updates the file's size), or, `in_place`, rewriting a
/// file written and synced beforehand (as a write-ahead log that recycles its files).
fn fsync_latency(dir: &Path, n: usize, in_place: bool) -> Result<Stats> {
    let path = dir.join("bench-fsync-probe");
    let mut f =
        fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let block = filler(4096, 5);
    if in_place {
        for _ in 0..n {
            f.write_all(block.as_bytes())?;
        }
        f.sync_all()?;
        f.seek(std::io::SeekFrom::Start(0))?;
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = mono_ns();
        f.write_all(block.as_bytes())?;
        f.sync_data()?;
        v.push(mono_ns() - t0);
    }
    drop(f);
    let _ = fs::remove_file(&path);
    Ok(stats(v))
}

/// Bytes each event adds to the server's write-ahead log in the latency rows (the
/// oplog entry, the document and its `_id` key: a few hundred bytes for these small
/// documents), what the paced log probe writes per event.
const LOG_BYTES_PER_EVENT: usize = 512;

/// The size of the paced log probe's file, rewritten in a cycle.
const LOG_PROBE_FILE_BYTES: u64 = 64 << 20;

/// The durability wait of a write-ahead log with nothing else to do, on this disk, for
/// writes arriving at the row's pace: `pace.batch` events every `pace.batch / pace.rate`
/// seconds for `pace.secs`. One thread writes everything that has arrived (into a file
/// written and synced beforehand, rewritten in place as a log that reuses its files),
/// fdatasyncs, and starts again: group commit with no CPU, network or database cost.
/// Each event's figure is the end of the fsync that made it durable minus its arrival
/// time, so an event arriving during a long fsync waits for the rest of it and for the
/// next one, as an event does in the server; a burst of back-to-back fsyncs (the other
/// references) samples a fraction of a second and misses the disk's stalls of several
/// milliseconds that come every second or so on a shared virtual disk.
fn paced_log_latency(dir: &Path, pace: &Pace) -> Result<Vec<i64>> {
    let probe = LogProbe::prepare(dir, "bench-log-probe")?;
    probe.run(pace)
}

/// A bare log's file, written and synced in full before the log runs (so the run
/// rewrites it in place, as a write-ahead log that reuses its files).
struct LogProbe {
    f: fs::File,
    path: PathBuf,
}

impl LogProbe {
    fn prepare(dir: &Path, name: &str) -> Result<LogProbe> {
        let path = dir.join(name);
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..LOG_PROBE_FILE_BYTES / chunk.len() as u64 {
            f.write_all(&chunk)?;
        }
        f.sync_all()?;
        Ok(LogProbe { f, path })
    }

    /// Writes at `pace` from now on, each arrival made durable by the next fdatasync;
    /// the latency of every write (its fsync's end minus its arrival).
    fn run(self, pace: &Pace) -> Result<Vec<i64>> {
        use std::os::unix::fs::FileExt;
        let LogProbe { f, path } = self;
        let interval_ns = (pace.batch as f64 / pace.rate * 1e9) as i64;
        let batches = (pace.total() / pace.batch as u64) as i64;
        let batch_bytes = LOG_BYTES_PER_EVENT * pace.batch;
        let record = filler(batch_bytes, 3).into_bytes();
        let mut pending: Vec<u8> = Vec::new();
        let mut out = Vec::with_capacity(pace.total() as usize);
        let mut offset = 0u64;
        let start = mono_ns();
        let mut written = 0i64; // batches made durable (or being made durable)
        while written < batches {
            let now = mono_ns();
            let arrived = (((now - start) / interval_ns) + 1).min(batches);
            if arrived <= written {
                let next = start + written * interval_ns;
                std::thread::sleep(Duration::from_nanos((next - now).max(0) as u64));
                continue;
            }
            pending.clear();
            for _ in written..arrived {
                pending.extend_from_slice(&record);
            }
            if offset + pending.len() as u64 > LOG_PROBE_FILE_BYTES {
                offset = 0;
            }
            f.write_all_at(&pending, offset)?;
            offset += pending.len() as u64;
            f.sync_data()?;
            let done = mono_ns();
            for b in written..arrived {
                let latency = done - (start + b * interval_ns);
                out.extend(std::iter::repeat_n(latency, pace.batch));
            }
            written = arrived;
        }
        drop(f);
        let _ = fs::remove_file(&path);
        Ok(out)
    }
}

#[cfg(test)]
mod wal_fsync_tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_buckets_added_in_the_span() {
        let before = vec![(20, 5), (13_000, 1)];
        let after = vec![(20, 105), (30, 1), (13_000, 1), (-1, 1)];
        let w = wal_fsyncs_between(&before, &after).unwrap();
        assert_eq!(w.count, 102);
        assert_eq!(w.p50_ms, 0.02);
        assert_eq!(w.p99_ms, 0.03);
        assert!(w.max_ms.is_infinite());
        // 100 × 20 µs + 1 × 30 µs + 1 × (1 s): by time, the long one is nearly everything.
        assert!(w.p99_time_weighted_ms.is_infinite());
        let short = wal_fsyncs_between(&[], &[(20, 99), (5_000, 1)]).unwrap();
        assert_eq!(short.p99_ms, 0.02);
        assert_eq!(short.p99_time_weighted_ms, 5.0);
        assert!(wal_fsyncs_between(&after, &after).is_none());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kb_doc_is_1024_bytes() {
        let d = super::kb_doc_maker(1)(7, 8);
        let mut buf = Vec::new();
        d.to_writer(&mut buf).unwrap();
        assert_eq!(buf.len(), 1024);
    }
}

//! Tailstream change-stream benchmark.
//!
//! Five scenarios, each against a fresh server (its own port and temporary
//! `--dbpath`, deleted at the end), each printing the server's CPU seconds
//! (/proc/<pid>/stat) next to its figure, and this process's own CPU (the client
//! must not be what limits a figure):
//!
//! 1. **catchup** — N events (1 KB inserts) written before the stream is
//!    opened, then read by one stream from a point before them
//!    (`startAtOperationTime`, batch size 10,000). A consumer that was down, or
//!    a new one replaying history, must catch up much faster than writes come
//!    in (target ≥ 250,000 events/s). Read twice by new streams: with the
//!    driver's raw batch cursor (events checked inside each reply; the target's
//!    figure, a client that is not the bottleneck), then with `watch()`, whose
//!    `ChangeStream` copies each event twice on the server's two cores.
//! 2. **fanout** — 1, 10, 100, 1,000 streams on one collection while a
//!    producer inserts 1,000 docs/s; every stream must get every event. The cost
//!    of an extra stream should be small next to the cost of the writes (target:
//!    100 streams cost at most 5× the server CPU of one). A row with no stream
//!    (the producer alone) is the baseline.
//! 3. **isolation** — one stream on collection A, never written, while 10,000
//!    inserts/s go to B: a collection stream must not pay for other collections'
//!    writes (target: server CPU at most 5% above the same load without the stream;
//!    after an uncounted warm-up run, runs in the order A B B A A B B A A B B A, A
//!    without and B with the stream, which cancels a linear drift such as the
//!    collection growing; the server's CPU is also given without RocksDB's flush and
//!    compaction threads, whose work lands in whichever run it happens to fall).
//! 4. **resume** — seed 000 ("Performance Analysis of Resuming a MongoDB Change
//!    Stream"), scaled down: a marker, 300 × 6 MB documents with a marker after
//!    every 100, then a stream resumed after the first marker with
//!    `$match: {"fullDocument.msg": {$exists: true}}`. MongoDB reads every large
//!    document back from disk to evaluate the filter; the target is the last
//!    marker in under 5% of the time a sequential read of those documents takes
//!    on this disk (page cache dropped first when we may). Second variant: the
//!    large documents go to another collection (`bar`): then the first marker must
//!    come in under 10 ms (the stream must not even look at `bar`'s writes). The
//!    server's `read_bytes` (/proc/<pid>/io) during the resume is reported.
//! 5. **latency** — insert-to-event latency p50/p99/max at 1,000 and 20,000
//!    inserts/s (the send time, CLOCK_MONOTONIC, is in the document; the consumer
//!    has a thread of its own). An event is shown only once its write is durable,
//!    so the disk's fsync latency (measured in the same run in the dbpath: 4 KB
//!    appended and fdatasync'ed, and 4 KB rewritten in place and fdatasync'ed, as
//!    a write-ahead log that reuses its files does) is a floor; the target is the
//!    stream's p99 within 1 ms of the lower of the two fsync p99s.
//!
//! Progress goes to stderr; the end of the run prints a Markdown section for
//! BENCHMARKS.md on stdout (a table per scenario, with its target and whether it
//! was met); `--json FILE` writes every figure. `--quick` scales everything
//! down to about a minute. Run it with `bash bench/changestream.sh`.
//! `BENCH_CATCHUP_FLUSH=1` flushes the catch-up backlog to table files and waits 3 s
//! before the stream opens (for profiling a small backlog, e.g. under callgrind).
//! `BENCH_TRACE=1` prints every aggregate and getMore reply (duration, events,
//! postBatchResumeToken) on stderr, to see what the server did when a figure
//! looks wrong.

mod host;
mod load;
mod scenarios;
mod stats;

use std::{fmt::Write as _, path::PathBuf, process::ExitCode};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use tailstream_bench_common::{
    fmt::{fmt_int, fmt_ms},
    machine::Machine,
    server::default_server_bin,
};

use scenarios::{Catchup, Ctx, FanoutRow, Isolation, Latency, Resume};

/// The same allocator as the server's: the client must not be the bottleneck (see
/// Cargo.toml).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "bench-changestream",
    about = "Change-stream benchmark for Tailstream: catch-up, fan-out, isolation, resume, latency"
)]
struct Args {
    /// Scenarios, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "catchup,fanout,isolation,resume,latency"
    )]
    scenarios: Vec<Scenario>,
    /// Everything scaled down to about a minute (explicit knobs still win).
    #[arg(long)]
    quick: bool,
    /// Tailstream binary (default: $TAILSTREAM_BIN, then
    /// $HOME/.cache/tailstream/target/release/tailstream).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Parent of the servers' temporary data directories.
    #[arg(long, default_value = "/tmp")]
    data_dir: PathBuf,
    /// Write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// maxAwaitTimeMS of the streams' getMores (how long a getMore with nothing to return waits).
    #[arg(long, default_value_t = 1000)]
    max_await_ms: u64,
    /// catchup: events written before the stream opens [default: 1,000,000; quick 100,000].
    #[arg(long)]
    catchup_docs: Option<u64>,
    /// catchup: the stream's batch size.
    #[arg(long, default_value_t = 10_000)]
    catchup_batch_size: u32,
    /// fanout: stream counts, comma-separated [default: 1,10,100,1000; quick 1,10,100].
    #[arg(long, value_delimiter = ',')]
    fanout_streams: Option<Vec<usize>>,
    /// fanout: seconds per row [default: 10; quick 3].
    #[arg(long)]
    fanout_secs: Option<f64>,
    /// fanout: the producer's inserts per second.
    #[arg(long, default_value_t = 1000.0)]
    fanout_rate: f64,
    /// fanout: documents per insert (10 = an insert_many every 10 ms at 1,000/s; 1 = insert_one every ms).
    #[arg(long, default_value_t = 10)]
    fanout_batch: usize,
    /// isolation: seconds per run [default: 10; quick 3].
    #[arg(long)]
    isolation_secs: Option<f64>,
    /// isolation: inserts per second into collection B.
    #[arg(long, default_value_t = 10_000.0)]
    isolation_rate: f64,
    /// isolation: documents per insert_many.
    #[arg(long, default_value_t = 100)]
    isolation_batch: usize,
    /// resume: large documents [default: 300; quick 30].
    #[arg(long)]
    resume_docs: Option<u64>,
    /// resume: size of a large document, MiB.
    #[arg(long, default_value_t = 6.0)]
    resume_doc_mb: f64,
    /// latency: seconds per rate [default: 10; quick 3].
    #[arg(long)]
    latency_secs: Option<f64>,
    /// latency: insert rates, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,20000")]
    latency_rates: Vec<f64>,
    /// latency: fdatasync samples of the disk reference.
    #[arg(long, default_value_t = 1000)]
    fsync_samples: usize,
    /// latency: MiB written (and dropped) before the rows, so the server runs as one
    /// that has been up a while (its write-ahead log files already cycled and reused),
    /// not a freshly made data directory [default: 1024; quick 0].
    #[arg(long)]
    latency_warmup_mb: Option<u64>,
    /// latency: how the consumer reads its stream: the driver's raw batch cursor (events
    /// looked at inside each reply), or watch() (the driver's ChangeStream, which copies
    /// each event).
    #[arg(long, value_enum, default_value = "watch")]
    latency_client: scenarios::StreamClient,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Scenario {
    Catchup,
    Fanout,
    Isolation,
    Resume,
    Latency,
}

#[derive(Debug, Serialize)]
struct Meta {
    #[serde(flatten)]
    machine: Machine,
    server_bin: String,
    server_version: String,
    quick: bool,
    open_files_limit: u64,
}

#[derive(Debug, Serialize, Default)]
struct Report {
    meta: Option<Meta>,
    catchup: Option<Catchup>,
    fanout: Option<Vec<FanoutRow>>,
    max_await_ms: u64,
    fanout_rate: f64,
    fanout_batch: usize,
    fanout_secs: f64,
    isolation: Option<Isolation>,
    resume: Option<Resume>,
    latency: Option<Latency>,
    problems: Vec<String>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Ok(false) when a scenario failed or reported a problem.
async fn run() -> Result<bool> {
    let a = Args::parse();
    let q = a.quick;
    let bin = a.server_bin.clone().unwrap_or_else(default_server_bin);
    let catchup_docs = a
        .catchup_docs
        .unwrap_or(if q { 100_000 } else { 1_000_000 });
    let fanout_streams = a.fanout_streams.clone().unwrap_or_else(|| {
        if q {
            vec![1, 10, 100]
        } else {
            vec![1, 10, 100, 1000]
        }
    });
    let fanout_secs = a.fanout_secs.unwrap_or(if q { 3.0 } else { 10.0 });
    let isolation_secs = a.isolation_secs.unwrap_or(if q { 3.0 } else { 10.0 });
    let resume_docs = a.resume_docs.unwrap_or(if q { 30 } else { 300 });
    let latency_secs = a.latency_secs.unwrap_or(if q { 3.0 } else { 10.0 });

    load::MAX_AWAIT_MS.store(a.max_await_ms, std::sync::atomic::Ordering::Relaxed);
    let nofile = host::raise_nofile_limit();
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let bin_mtime = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        })
        .unwrap_or_else(|| "missing".into());
    let meta = Meta {
        machine: Machine::now(),
        server_bin: format!("{} (built {bin_mtime})", bin.display()),
        server_version: version,
        quick: q,
        open_files_limit: nofile,
    };
    eprintln!(
        "{} · {} CPUs ({}) · {:.1} GiB RAM · {} · {}",
        meta.machine.date,
        meta.machine.nproc,
        meta.machine.cpu_model,
        meta.machine.mem_total_gib,
        meta.server_bin,
        meta.server_version
    );
    if fanout_streams.iter().any(|&n| n as u64 * 2 + 64 > nofile) {
        eprintln!("WARNING: open-files limit {nofile} is low for {fanout_streams:?} streams");
    }

    let mut ctx = Ctx {
        bin,
        data_dir: a.data_dir.clone(),
        problems: Vec::new(),
    };
    let mut rep = Report {
        meta: Some(meta),
        max_await_ms: a.max_await_ms,
        fanout_rate: a.fanout_rate,
        fanout_batch: a.fanout_batch,
        fanout_secs,
        ..Default::default()
    };
    let mut failed = false;
    for sc in &a.scenarios {
        eprintln!("\n== {sc:?}");
        let r: Result<()> = match sc {
            Scenario::Catchup => scenarios::catchup(&mut ctx, catchup_docs, a.catchup_batch_size)
                .await
                .map(|v| rep.catchup = Some(v)),
            Scenario::Fanout => scenarios::fanout(
                &mut ctx,
                &fanout_streams,
                fanout_secs,
                a.fanout_rate,
                a.fanout_batch,
            )
            .await
            .map(|v| rep.fanout = Some(v)),
            Scenario::Isolation => scenarios::isolation(
                &mut ctx,
                isolation_secs,
                a.isolation_rate,
                a.isolation_batch,
            )
            .await
            .map(|v| rep.isolation = Some(v)),
            Scenario::Resume => scenarios::resume(&mut ctx, resume_docs, a.resume_doc_mb)
                .await
                .map(|v| rep.resume = Some(v)),
            Scenario::Latency => scenarios::latency(
                &mut ctx,
                &a.latency_rates,
                latency_secs,
                a.fsync_samples,
                a.latency_warmup_mb.unwrap_or(if q { 0 } else { 1024 }),
                a.latency_client,
            )
            .await
            .map(|v| rep.latency = Some(v)),
        };
        if let Err(e) = r {
            eprintln!("  FAILED: {e:#}");
            ctx.problems
                .push(format!("{sc:?}: the scenario failed: {e:#}"));
            failed = true;
        }
        if let Some(path) = &a.json {
            rep.problems = ctx.problems.clone();
            write_json(path, &rep)?;
        }
    }
    rep.problems = ctx.problems.clone();
    if let Some(path) = &a.json {
        write_json(path, &rep)?;
    }
    println!("{}", markdown(&rep));
    Ok(!failed && rep.problems.is_empty())
}

fn write_json(path: &PathBuf, rep: &Report) -> Result<()> {
    let text = serde_json::to_string_pretty(rep)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

// ---------------------------------------------------------------------------
// Markdown

fn opt_ms(v: Option<f64>) -> String {
    v.map(|v| format!("{} ms", fmt_ms(v)))
        .unwrap_or_else(|| "**none**".into())
}

/// A figure read from one of the server's histograms: the open last bucket (a second
/// or more) has no upper bound.
fn fmt_bucket_ms(v: f64) -> String {
    if v.is_finite() {
        fmt_ms(v)
    } else {
        "≥ 1000".into()
    }
}

/// p50 / p99 / max of a span of one of the server's histograms.
fn fmt_buckets_ms(w: &scenarios::WalFsyncs) -> String {
    format!(
        "{} / {} / {}",
        fmt_bucket_ms(w.p50_ms),
        fmt_bucket_ms(w.p99_ms),
        fmt_bucket_ms(w.max_ms)
    )
}

fn met(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "**no**"
    }
}

fn markdown(rep: &Report) -> String {
    let mut s = String::new();
    let mut targets: Vec<(String, String, bool)> = Vec::new();
    let _ = writeln!(s, "## Change streams (`bench/changestream`)\n");
    if let Some(m) = &rep.meta {
        let _ = writeln!(
            s,
            "{} · server: {} · {}{}\n",
            m.machine.header(),
            m.server_version,
            m.server_bin,
            if m.quick {
                " · **--quick** run (scaled down)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        s,
        "Every scenario runs against a fresh server (`--replSet rs0`, temporary dbpath). Server CPU = the server \
         process's user + system CPU seconds over the measured span (/proc/<pid>/stat); client CPU = the \
         benchmark process's own (driver, producer, consumers), on the same machine. Writes use `{{w: 1}}`; \
         events are read as raw BSON (no decoding beyond the fields checked); streams' getMores use \
         maxAwaitTimeMS {}.\n",
        rep.max_await_ms
    );

    if let Some(c) = &rep.catchup {
        let _ = writeln!(s, "### Catch-up: one stream reads a backlog\n");
        let _ = writeln!(
            s,
            "{} inserts of 1 KB documents (insert_many of 1,000, 4 clients) before the stream opens; then one stream, \
             {}, batch size {}, reads them all.\n",
            fmt_int(c.docs),
            c.start,
            fmt_int(c.batch_size as u64)
        );
        let _ = writeln!(
            s,
            "Read twice, each time by a new stream from the same point: first with the driver's raw batch cursor \
             (`aggregate([{{$changeStream}}])`, events looked at inside each reply: the client that is not the \
             bottleneck, for the target), then with `watch()` (the driver's `ChangeStream`, which copies each event \
             twice and its resume token once, on the same 2 cores as the server).\n"
        );
        let _ = writeln!(s, "| client | events | inserted in | read in | events/s | MB/s of events | server CPU s | client CPU s | target | met |");
        let _ = writeln!(
            s,
            "| :-- | --: | --: | --: | --: | --: | --: | --: | :-- | :-: |"
        );
        for r in &c.reads {
            let for_target = r.client == scenarios::StreamClient::RawBatches;
            let ok = r.events_per_s >= 250_000.0 && r.missing == 0;
            let _ = writeln!(
                s,
                "| {} | {}{} | {:.1} s ({} docs/s) | {:.2} s | {} | {:.0} | {:.2} | {:.2} | {} | {} |",
                match r.client {
                    scenarios::StreamClient::RawBatches => "raw batches",
                    scenarios::StreamClient::Watch => "watch()",
                },
                fmt_int(r.events),
                if r.missing > 0 { format!(" (**{} missing**)", fmt_int(r.missing)) } else { String::new() },
                c.insert_secs,
                fmt_int(c.insert_docs_per_s as u64),
                r.read.wall_s,
                fmt_int(r.events_per_s as u64),
                r.mb_per_s,
                r.read.server_cpu_s,
                r.read.client_cpu_s,
                if for_target { "≥ 250,000 events/s" } else { "–" },
                if for_target { met(ok) } else { "–" }
            );
            if for_target {
                targets.push((
                    "catch-up ≥ 250,000 events/s".into(),
                    format!("{} events/s", fmt_int(r.events_per_s as u64)),
                    ok,
                ));
            }
        }
        let _ = writeln!(s);
    }

    if let Some(rows) = &rep.fanout {
        let _ = writeln!(s, "### Fan-out: N streams on one collection\n");
        let _ = writeln!(
            s,
            "A producer inserts {} docs/s of 1 KB ({} every {} ms) for {} s; every stream must receive every event. \
             The span is the producer's start to the last stream having everything (when some never do: to the last \
             event received); streams are spread over one client per 50 streams (a waiting getMore holds a connection).\n",
            fmt_int(rep.fanout_rate as u64),
            if rep.fanout_batch == 1 { "insert_one".to_string() } else { format!("insert_many of {}", rep.fanout_batch) },
            fmt_ms(rep.fanout_batch as f64 / rep.fanout_rate * 1e3),
            rep.fanout_secs
        );
        let _ = writeln!(s, "| streams | events per stream | streams complete | missing | span s | server CPU s | server CPU s/s | × 1 stream | above producer alone (CPU s/s) | client CPU s |");
        let _ = writeln!(
            s,
            "| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |"
        );
        let base = rows
            .iter()
            .find(|r| r.streams == 0)
            .map(|r| r.server_cpu_per_s);
        for r in rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {} | {} | {:.2} |",
                if r.streams == 0 {
                    "0 (producer alone)".to_string()
                } else {
                    fmt_int(r.streams as u64)
                },
                fmt_int(r.expected),
                if r.streams == 0 {
                    "–".to_string()
                } else {
                    format!("{}/{}", r.complete_streams, r.streams)
                },
                if r.missing_total > 0 || r.duplicates_total > 0 {
                    format!(
                        "**{} missing, {} dup**",
                        fmt_int(r.missing_total),
                        fmt_int(r.duplicates_total)
                    )
                } else {
                    "0".into()
                },
                r.cpu.wall_s,
                r.cpu.server_cpu_s,
                r.server_cpu_per_s,
                r.ratio_to_1
                    .map(|x| format!("{x:.2}×"))
                    .unwrap_or_else(|| "–".into()),
                base.filter(|_| r.streams > 0)
                    .map(|b| format!("{:+.3}", r.server_cpu_per_s - b))
                    .unwrap_or_else(|| "–".into()),
                r.cpu.client_cpu_s
            );
        }
        if let Some(r) = rows.iter().find(|r| r.streams == 100) {
            if let Some(x) = r.ratio_to_1 {
                let ok = x <= 5.0 && r.complete_streams == r.streams;
                let _ = writeln!(s, "\nTarget: 100 streams cost at most 5× the server CPU of one stream: {x:.2}× → {}.", met(ok));
                targets.push((
                    "fan-out: 100 streams ≤ 5× one stream (server CPU/s)".into(),
                    format!("{x:.2}×"),
                    ok,
                ));
            }
        }
        let _ = writeln!(s);
    }

    if let Some(iso) = &rep.isolation {
        let _ = writeln!(s, "### Isolation: a stream on an idle collection\n");
        let _ = writeln!(
            s,
            "{} inserts/s of 1 KB (insert_many of {} every {} ms) into collection B for {} s, with and without one \
             stream open on collection A (never written); after an uncounted warm-up run, runs ordered without, with, with, without (three times), which cancels a linear drift. \
             Storage background = the CPU of RocksDB's flush and compaction threads, set by the data written (the same in every run) but landing in whichever run it happens to fall; foreground = the rest.\n",
            fmt_int(iso.rate as u64),
            iso.batch,
            fmt_ms(iso.batch as f64 / iso.rate * 1e3),
            iso.secs
        );
        let _ = writeln!(s, "| run | stream on A | inserts acknowledged | span s | server CPU s | of which storage background s | server CPU s/s | foreground CPU s/s | client CPU s | events on A |");
        let _ = writeln!(
            s,
            "| --: | :-- | --: | --: | --: | --: | --: | --: | --: | --: |"
        );
        for (k, r) in iso.runs.iter().enumerate() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {:.2} | {} |",
                k + 1,
                if r.with_stream { "yes" } else { "no" },
                fmt_int(r.producer.acked),
                r.cpu.wall_s,
                r.cpu.server_cpu_s,
                r.cpu.server_storage_cpu_s,
                r.server_cpu_per_s,
                r.server_foreground_cpu_per_s,
                r.cpu.client_cpu_s,
                r.stream_events
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "–".into())
            );
        }
        // An open stream can only add work: a negative difference is the spread between
        // runs, not a saving, so the target bounds the increase.
        let ok = iso.diff_pct <= 5.0;
        let fg_ok = iso.fg_diff_pct <= 5.0;
        let _ = writeln!(
            s,
            "\nMean server CPU s/s: {:.3} without the stream, {:.3} with it: {:+.1}%. Target at most +5%: {}.\n\
             Mean foreground server CPU s/s (without storage background): {:.3} without the stream, {:.3} with it: {:+.1}%. At most +5%: {}.\n",
            iso.mean_without,
            iso.mean_with,
            iso.diff_pct,
            met(ok),
            iso.fg_mean_without,
            iso.fg_mean_with,
            iso.fg_diff_pct,
            met(fg_ok)
        );
        targets.push((
            "isolation: idle-collection stream within 5% server CPU".into(),
            format!("{:+.1}%", iso.diff_pct),
            ok,
        ));
        targets.push((
            "isolation, foreground server CPU (without RocksDB's flush/compaction threads)".into(),
            format!("{:+.1}%", iso.fg_diff_pct),
            fg_ok,
        ));
    }

    if let Some(r) = &rep.resume {
        let _ = writeln!(
            s,
            "### Resume after large documents (seed 000, scaled down)\n"
        );
        let v0 = r.variants.first();
        let (docs, size) = v0.map(|v| (v.docs, v.doc_bytes)).unwrap_or((0, 0));
        let _ = writeln!(
            s,
            "Marker 0 into `foo` (its event's resume token kept), then {} documents of {:.0} MiB inserted one by one, \
             with markers 1, 2, 3 into `foo` after each third; then a stream on `foo` resumes after marker 0 with \
             `[{{$match: {{\"fullDocument.msg\": {{$exists: true}}}}}}]` (default batch size). Times are from the \
             resuming aggregate to the marker's arrival. Reference: reading the {:.2} GB of large documents once, \
             sequentially, at {:.0} MB/s ({}, {} MB file on the same disk) = {:.2} s.\n",
            fmt_int(docs),
            size as f64 / 1048576.0,
            (docs * size) as f64 / 1e9,
            r.seq_read_mb_s,
            r.seq_read_method,
            r.seq_read_file_bytes >> 20,
            r.reference_s
        );
        for n in &r.notes {
            let _ = writeln!(s, "Note: {n}\n");
        }
        let _ = writeln!(s, "| large documents into | inserted in | page cache dropped | first marker | last marker | markers | server read from disk | server CPU s | client CPU s | target | measured | met |");
        let _ = writeln!(
            s,
            "| :-- | --: | :-: | --: | --: | --: | --: | --: | --: | :-- | --: | :-: |"
        );
        for v in &r.variants {
            let same = v.big_collection == "foo";
            let (target, measured, ok) = if same {
                let pct = v.last_marker_ms.map(|t| t / 1e3 / r.reference_s * 100.0);
                (
                    "last marker < 5% of the sequential read".to_string(),
                    pct.map(|p| format!("{p:.2}%"))
                        .unwrap_or_else(|| "n/a".into()),
                    pct.is_some_and(|p| p < 5.0) && v.error.is_none(),
                )
            } else {
                (
                    "first marker < 10 ms".to_string(),
                    opt_ms(v.first_marker_ms),
                    v.first_marker_ms.is_some_and(|t| t < 10.0) && v.error.is_none(),
                )
            };
            let _ = writeln!(
                s,
                "| `{}`{} | {:.1} s | {} | {} | {} | {}/3 | {} | {:.2} | {:.2} | {} | {} | {} |",
                v.big_collection,
                if same {
                    " (same as markers)"
                } else {
                    " (markers in `foo`)"
                },
                v.insert_secs,
                if v.page_cache_dropped { "yes" } else { "no" },
                opt_ms(v.first_marker_ms),
                opt_ms(v.last_marker_ms),
                v.markers_received,
                v.server_read_bytes
                    .map(|b| format!("{:.1} MB", b as f64 / 1e6))
                    .unwrap_or_else(|| "n/a".into()),
                v.cpu.server_cpu_s,
                v.cpu.client_cpu_s,
                target,
                measured,
                met(ok)
            );
            targets.push((
                format!(
                    "resume, large documents in `{}`: {target}",
                    v.big_collection
                ),
                measured,
                ok,
            ));
            if let Some(e) = &v.error {
                let _ = writeln!(s, "\n**Error** (`{}`): {e}\n", v.big_collection);
            }
        }
        let _ = writeln!(s);
    }

    if let Some(l) = &rep.latency {
        let _ = writeln!(s, "### Insert-to-event latency\n");
        let _ = writeln!(
            s,
            "A paced producer stamps each document with its send time (CLOCK_MONOTONIC); one stream's consumer, on a \
             thread of its own, takes receive − send; it reads {}. \
             **Bare log at the same pace** = the disk's durability floor for this row: one thread that only writes what has \
             arrived (512 bytes per event, into a file rewritten in place, as a write-ahead log that reuses its files) and \
             fdatasyncs, with writes arriving at the row's pace for the row's duration, right before and right after the \
             row; each write's figure is the end of the fsync that made it durable minus its arrival, as for an event. \
             The target compares the event p99 with this p99. Each rate runs twice: alone, then **with a bare log alongside**: the same log \
             run during the row, in its own file (it meets the stalls of the row's own seconds, and adds its writes and \
             fsyncs to the disk's load, so the events' latency of that row is not the one of the row alone); \
             that row's second reading of the target compares with this log's p99. \
             Burst references, {} fdatasyncs back to back in the server's dbpath (a fraction of a second, so they miss \
             the disk's stalls that come every second or so): append 4 KB + fdatasync p50 {} ms, p99 {} ms, max {} ms; \
             rewrite 4 KB in place + fdatasync p50 {} ms, p99 {} ms, max {} ms; the stricter reading of the target \
             takes the lower of these p99s.\n",
            match l.client {
                scenarios::StreamClient::RawBatches => {
                    "with the driver's raw batch cursor (`aggregate([{$changeStream: {}}])`, events looked at inside each reply)"
                }
                scenarios::StreamClient::Watch => {
                    "with `watch()` (the driver's `ChangeStream`, which copies each event)"
                }
            },
            fmt_int(l.fsync.count),
            fmt_ms(l.fsync.p50_ms),
            fmt_ms(l.fsync.p99_ms),
            fmt_ms(l.fsync.max_ms),
            fmt_ms(l.fsync_in_place.p50_ms),
            fmt_ms(l.fsync_in_place.p99_ms),
            fmt_ms(l.fsync_in_place.max_ms)
        );
        let _ = writeln!(
            s,
            "Server WAL fsyncs = the server's own group-commit fsyncs during the row (serverStatus `durability.syncMicros`, \
             10 µs buckets below 10 ms: each figure is its bucket's upper bound). The time-weighted p99 \
             weighs each fsync by its length: a write arriving at a random moment is more likely to find a long fsync in \
             progress, so that is the wait a random event sees.\n"
        );
        let _ = writeln!(s, "| inserts/s | per insert | events | missing | p50 ms | p99 ms | p99.9 ms | max ms | producer max lag ms | server WAL fsyncs: count, p50 / p99 / max ms; p99 time-weighted | bare log at the same pace: p50 / p99 / max ms | bare log during the row: p50 / p99 / max ms | server CPU s | client CPU s | target: p99 ≤ bare log p99 + 1 ms | met | p99 ≤ bare log during the row p99 + 1 ms | met | stricter: p99 ≤ burst fsync p99 + 1 ms | met |");
        let _ = writeln!(
            s,
            "| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | :-: | --: | :-: | --: | :-: |"
        );
        for r in &l.rows {
            let complete = r.missing == 0 && r.latency.count > 0;
            let limit = r.durability_floor.p99_ms + 1.0;
            let ok = complete && r.latency.p99_ms <= limit;
            let strict_limit = l.fsync_floor_p99_ms() + 1.0;
            let strict_ok = complete && r.latency.p99_ms <= strict_limit;
            let during_limit = r.concurrent_floor.as_ref().map(|c| c.p99_ms + 1.0);
            let during_ok = complete && during_limit.is_some_and(|l| r.latency.p99_ms <= l);
            let _ = writeln!(
                s,
                "| {}{} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} / {} / {} | {} | {:.2} | {:.2} | ≤ {} | {} | {} | {} | ≤ {} | {} |",
                fmt_int(r.rate as u64),
                if r.concurrent_floor.is_some() { ", bare log alongside" } else { "" },
                r.batch,
                fmt_int(r.received),
                if r.missing > 0 {
                    format!("**{}**", fmt_int(r.missing))
                } else {
                    "0".into()
                },
                fmt_ms(r.latency.p50_ms),
                fmt_ms(r.latency.p99_ms),
                fmt_ms(r.latency.p999_ms),
                fmt_ms(r.latency.max_ms),
                r.producer.max_lag_ms,
                match &r.wal_fsync {
                    Some(w) => format!(
                        "{}, {}; {}",
                        fmt_int(w.count),
                        fmt_buckets_ms(w),
                        fmt_bucket_ms(w.p99_time_weighted_ms)
                    ),
                    None => "–".into(),
                },
                fmt_ms(r.durability_floor.p50_ms),
                fmt_ms(r.durability_floor.p99_ms),
                fmt_ms(r.durability_floor.max_ms),
                match &r.concurrent_floor {
                    Some(c) => format!("{} / {} / {}", fmt_ms(c.p50_ms), fmt_ms(c.p99_ms), fmt_ms(c.max_ms)),
                    None => "–".into(),
                },
                r.cpu.server_cpu_s,
                r.cpu.client_cpu_s,
                fmt_ms(limit),
                met(ok),
                during_limit.map_or("–".into(), |l| format!("≤ {}", fmt_ms(l))),
                if during_limit.is_some() { met(during_ok).to_string() } else { "–".into() },
                fmt_ms(strict_limit),
                met(strict_ok)
            );
            let row_name = format!(
                "{} inserts/s{}",
                fmt_int(r.rate as u64),
                if r.concurrent_floor.is_some() {
                    " (bare log alongside)"
                } else {
                    ""
                }
            );
            targets.push((
                format!(
                    "latency at {row_name}: p99 ≤ a bare log's p99 at the same pace + 1 ms ({} ms)",
                    fmt_ms(limit)
                ),
                format!("{} ms", fmt_ms(r.latency.p99_ms)),
                ok,
            ));
            if let Some(l) = during_limit {
                targets.push((
                    format!(
                        "latency at {row_name}: p99 ≤ the p99 of the bare log alongside + 1 ms ({} ms)",
                        fmt_ms(l)
                    ),
                    format!("{} ms", fmt_ms(r.latency.p99_ms)),
                    during_ok,
                ));
            }
            targets.push((
                format!(
                    "latency at {row_name}, stricter reading: p99 ≤ burst fsync p99 + 1 ms ({} ms)",
                    fmt_ms(strict_limit)
                ),
                format!("{} ms", fmt_ms(r.latency.p99_ms)),
                strict_ok,
            ));
        }
        let _ = writeln!(
            s,
            "\nWhere an event's time goes: the producer's inserts acknowledged (`{{w: 1}}`: the \
             send, the insert on the server and the reply, without the wait for the disk) and \
             the server's commits waiting for the fsync that covered them (serverStatus \
             `durability.commitToDurableMicros`, buckets as above: from the commit to the end of \
             that fsync, which is when the event becomes visible), next to the events.\n"
        );
        let _ = writeln!(
            s,
            "| inserts/s | inserts acknowledged: p50 / p99 / max ms | commit to durable: p50 / p99 / max ms | events: p50 / p99 / max ms |"
        );
        let _ = writeln!(s, "| --: | --: | --: | --: |");
        for r in &l.rows {
            let _ = writeln!(
                s,
                "| {}{} | {} / {} / {} | {} | {} / {} / {} |",
                fmt_int(r.rate as u64),
                if r.concurrent_floor.is_some() {
                    ", bare log alongside"
                } else {
                    ""
                },
                fmt_ms(r.acks.p50_ms),
                fmt_ms(r.acks.p99_ms),
                fmt_ms(r.acks.max_ms),
                r.commit_waits.as_ref().map_or("–".into(), fmt_buckets_ms),
                fmt_ms(r.latency.p50_ms),
                fmt_ms(r.latency.p99_ms),
                fmt_ms(r.latency.max_ms),
            );
        }
        let _ = writeln!(s);
    }

    if !targets.is_empty() {
        let _ = writeln!(
            s,
            "### Targets\n\n| target | measured | met |\n| :-- | --: | :-: |"
        );
        for (t, m, ok) in &targets {
            let _ = writeln!(s, "| {t} | {m} | {} |", met(*ok));
        }
        let _ = writeln!(s);
    }
    if !rep.problems.is_empty() {
        let _ = writeln!(s, "### Problems seen\n");
        for p in &rep.problems {
            let _ = writeln!(s, "- {}", p.replace('\n', "\n  "));
        }
        let _ = writeln!(s);
    }
    s
}

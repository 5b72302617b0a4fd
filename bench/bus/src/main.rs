//! Tailstream message-bus benchmark (issue 4).
//!
//! Reproduces the experiment of "the tail of MongoDB" (2011): one producer
//! inserts `{time: <now>}` messages (here with a sequence number and a monotonic
//! send timestamp) into a capped collection, consumers follow it with a
//! tailable and awaitData cursor, and the latency of every message is measured and plotted
//! against its number. The same producer/consumer pair runs against Redis
//! Pub/Sub and Redis Streams. See `bench/README.md`.

mod bus;
mod plot;
mod redis_server;
mod stats;

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{Child, ChildStdin, Command, ExitCode, Stdio},
    sync::{atomic::Ordering, mpsc, Arc},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use mongodb::bson::doc;
use serde::Serialize;

use bus::{ConsumerResult, ProducerResult, StopCtl, System, ABORT};
use stats::{stats, Stats};
use tailstream_bench_common::{
    fmt::{fmt_int, fmt_ms, fmt_opt},
    machine::{
        clock_ticks, mono_ns, proc_cpu_ticks, proc_cpu_ticks_with_children, wait_idle, Machine,
    },
    server::{default_server_bin, server_version, ServerProc},
};

/// The seed's best standard deviation (AwaitData + dummy document, ~3,900 msg/s).
const SEED_BEST_STDDEV_MS: f64 = 0.662;

#[derive(Parser, Debug)]
#[command(
    name = "bench-bus",
    about = "Message-bus benchmark: capped collection + tailable/awaitData cursor (Tailstream) vs Redis Pub/Sub and Redis Streams"
)]
struct Args {
    /// Benchmark this MongoDB-compatible server instead of starting Tailstream.
    #[arg(long)]
    uri: Option<String>,
    /// Tailstream binary to start (default: $TAILSTREAM_BIN, then
    /// $HOME/.cache/tailstream/target/release/tailstream).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Pid of the server given with --uri, to measure its CPU.
    #[arg(long)]
    server_pid: Option<u32>,
    /// redis-server binary (default: redis-server on $PATH).
    #[arg(long)]
    redis_bin: Option<PathBuf>,
    /// Parent directory of the servers' temporary data directories (default: the system temp dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Messages per row.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Quick check: 10,000 messages per row.
    #[arg(long)]
    quick: bool,
    /// Systems, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tailstream,tailstream-w1,redis-pubsub,redis-streams,redis-streams-always"
    )]
    systems: Vec<System>,
    /// Scenarios, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "paced-4k,paced-20k,full,fanout8-4k,fanout8-full"
    )]
    scenarios: Vec<ScenarioKind>,
    /// Sends the producer keeps in flight (each waits for its acknowledgement).
    /// 1 = the seed's producer, one insert after the other.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Size of the capped collection, MiB.
    #[arg(long, default_value_t = 64)]
    capped_mb: u64,
    /// A consumer gives up when the producer has been done this long and nothing arrived.
    #[arg(long, default_value_t = 10.0)]
    idle_timeout_secs: f64,
    /// Run every consumer in a process of its own (default: a thread of this process each).
    #[arg(long)]
    separate_processes: bool,
    /// Directory for the PNG plots (default: bench/bus/results).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// No PNG plots.
    #[arg(long)]
    no_plots: bool,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The hidden consumer process of --separate-processes.
#[derive(Parser, Debug)]
struct ConsumerArgs {
    #[arg(long)]
    system: System,
    #[arg(long)]
    uri: String,
    #[arg(long)]
    messages: u64,
    #[arg(long)]
    idle_timeout_secs: f64,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum ScenarioKind {
    /// 1 producer at 4,000 msg/s, 1 consumer (the seed's rate).
    #[value(name = "paced-4k")]
    #[serde(rename = "paced-4k")]
    Paced4k,
    /// 1 producer at 20,000 msg/s, 1 consumer.
    #[value(name = "paced-20k")]
    #[serde(rename = "paced-20k")]
    Paced20k,
    /// 1 producer at full speed, 1 consumer.
    Full,
    /// 1 producer at 4,000 msg/s, 8 consumers.
    #[value(name = "fanout8-4k")]
    #[serde(rename = "fanout8-4k")]
    Fanout8_4k,
    /// 1 producer at full speed, 8 consumers.
    #[value(name = "fanout8-full")]
    #[serde(rename = "fanout8-full")]
    Fanout8Full,
}

impl ScenarioKind {
    fn name(self) -> &'static str {
        match self {
            ScenarioKind::Paced4k => "paced-4k",
            ScenarioKind::Paced20k => "paced-20k",
            ScenarioKind::Full => "full",
            ScenarioKind::Fanout8_4k => "fanout8-4k",
            ScenarioKind::Fanout8Full => "fanout8-full",
        }
    }
    fn rate(self) -> Option<f64> {
        match self {
            ScenarioKind::Paced4k | ScenarioKind::Fanout8_4k => Some(4000.0),
            ScenarioKind::Paced20k => Some(20000.0),
            ScenarioKind::Full | ScenarioKind::Fanout8Full => None,
        }
    }
    fn consumers(self) -> usize {
        match self {
            ScenarioKind::Fanout8_4k | ScenarioKind::Fanout8Full => 8,
            _ => 1,
        }
    }
    fn title(self) -> String {
        let rate = match self.rate() {
            Some(r) => format!("paced at {} msg/s", fmt_int(r as u64)),
            None => "full speed".into(),
        };
        let c = self.consumers();
        format!(
            "{rate}, 1 producer → {c} consumer{}",
            if c == 1 { "" } else { "s" }
        )
    }
}

#[derive(Debug, Clone, Serialize)]
struct ConsumerSummary {
    received: u64,
    missing: u64,
    duplicates: u64,
    out_of_order: u64,
    reopens: u64,
    gave_up: bool,
    errors: Vec<String>,
    stats: Stats,
}

#[derive(Debug, Clone, Serialize)]
struct RowResult {
    system: System,
    system_label: &'static str,
    scenario: ScenarioKind,
    messages: u64,
    consumers: usize,
    target_rate: Option<f64>,
    window: usize,
    /// First send to the last message received by the last consumer.
    seconds: f64,
    throughput: f64,
    /// Messages per second the producer sent (first to last send).
    send_rate: f64,
    latency: Stats,
    /// The producer's send to acknowledgement time.
    ack: Stats,
    per_consumer: Vec<ConsumerSummary>,
    server_cpu_s: Option<f64>,
    bench_cpu_s: Option<f64>,
    producer: ProducerResult,
    notes: Vec<String>,
}

struct Row {
    r: RowResult,
    /// Per consumer, latency by message number (u64::MAX = not received).
    latencies: Vec<Vec<u64>>,
}

#[derive(Serialize)]
struct Meta {
    #[serde(flatten)]
    machine: Machine,
    tailstream: Option<String>,
    redis: Option<String>,
    messages: u64,
    window: usize,
    capped_mb: u64,
    separate_processes: bool,
}

struct Ctx<'a> {
    args: &'a Args,
    n: u64,
    hz: f64,
    admin: &'a tokio::runtime::Runtime,
}

// ---------------------------------------------------------------------------
// Consumers: threads of this process, or processes

enum ConsumerHandle {
    Thread(JoinHandle<Result<ConsumerResult>>),
    Process {
        child: Child,
        stdin: Option<ChildStdin>,
        out: PathBuf,
    },
}

fn spawn_consumers(
    ctx: &Ctx,
    sys: System,
    uri: &str,
    k: usize,
    stop: &Arc<StopCtl>,
    ready_tx: &mpsc::Sender<usize>,
) -> Result<Vec<ConsumerHandle>> {
    let idle = Duration::from_secs_f64(ctx.args.idle_timeout_secs);
    let mut handles = Vec::new();
    for c in 0..k {
        let tx = ready_tx.clone();
        if ctx.args.separate_processes {
            let out = std::env::temp_dir().join(format!(
                "tailstream-bench-bus-consumer-{}-{c}.json",
                std::process::id()
            ));
            let mut child = Command::new(std::env::current_exe()?)
                .arg("__consumer")
                .arg("--system")
                .arg(sys.name())
                .arg("--uri")
                .arg(uri)
                .arg("--messages")
                .arg(ctx.n.to_string())
                .arg("--idle-timeout-secs")
                .arg(ctx.args.idle_timeout_secs.to_string())
                .arg("--out")
                .arg(&out)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .context("cannot start a consumer process")?;
            let stdout = child.stdout.take().expect("piped stdout");
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    match line {
                        Ok(l) if l.trim() == "ready" => {
                            let _ = tx.send(c);
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            let stdin = child.stdin.take();
            handles.push(ConsumerHandle::Process { child, stdin, out });
        } else {
            let uri = uri.to_string();
            let stop = stop.clone();
            let n = ctx.n;
            let h = std::thread::Builder::new()
                .name(format!("consumer-{c}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(bus::consume(
                        sys,
                        &uri,
                        n,
                        idle,
                        stop,
                        Box::new(move || {
                            let _ = tx.send(c);
                        }),
                    ))
                })?;
            handles.push(ConsumerHandle::Thread(h));
        }
    }
    Ok(handles)
}

fn signal_consumers(handles: &mut [ConsumerHandle], stop: &StopCtl, abort: bool) {
    if abort {
        stop.abort.store(true, Ordering::SeqCst);
    } else {
        stop.producer_done_ns.store(mono_ns(), Ordering::SeqCst);
    }
    for h in handles.iter_mut() {
        if let ConsumerHandle::Process { stdin, .. } = h {
            if let Some(s) = stdin.as_mut() {
                let _ = writeln!(s, "{}", if abort { "abort" } else { "done" });
                let _ = s.flush();
            }
        }
    }
}

fn join_consumer(h: ConsumerHandle) -> Result<ConsumerResult> {
    match h {
        ConsumerHandle::Thread(t) => t
            .join()
            .map_err(|_| anyhow!("a consumer thread panicked"))?,
        ConsumerHandle::Process {
            mut child,
            stdin,
            out,
        } => {
            drop(stdin);
            let status = child.wait()?;
            let text = fs::read_to_string(&out);
            let _ = fs::remove_file(&out);
            if !status.success() {
                bail!("a consumer process exited with {status} (its error is above)");
            }
            let text = text.with_context(|| format!("cannot read {}", out.display()))?;
            Ok(serde_json::from_str(&text)?)
        }
    }
}

fn consumer_main(args: ConsumerArgs) -> Result<()> {
    let stop = Arc::new(StopCtl::default());
    let s2 = stop.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line.as_deref().map(str::trim) {
                Ok("done") => s2.producer_done_ns.store(mono_ns(), Ordering::SeqCst),
                Ok("abort") => s2.abort.store(true, Ordering::SeqCst),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // The parent went away before saying "done": stop.
        if s2.producer_done_ns.load(Ordering::SeqCst) == 0 {
            s2.abort.store(true, Ordering::SeqCst);
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r = rt.block_on(bus::consume(
        args.system,
        &args.uri,
        args.messages,
        Duration::from_secs_f64(args.idle_timeout_secs),
        stop,
        Box::new(|| {
            println!("ready");
            let _ = std::io::stdout().flush();
        }),
    ))?;
    fs::write(&args.out, serde_json::to_string(&r)?)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// One row: one system × one scenario

fn run_row(ctx: &Ctx, sys: System, uri: &str, pid: Option<u32>, sc: ScenarioKind) -> Result<Row> {
    let n = ctx.n;
    let k = sc.consumers();
    ctx.admin
        .block_on(bus::prepare(sys, uri, ctx.args.capped_mb << 20))?;

    let stop = Arc::new(StopCtl::default());
    let (ready_tx, ready_rx) = mpsc::channel::<usize>();
    let mut handles = spawn_consumers(ctx, sys, uri, k, &stop, &ready_tx)?;
    drop(ready_tx);

    // Wait until every consumer is subscribed / has its cursor open.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ready = 0;
    let mut failure: Option<anyhow::Error> = None;
    while ready < k {
        match ready_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(_) => ready += 1,
            Err(_) => {
                let ended = handles.iter_mut().any(|h| match h {
                    ConsumerHandle::Thread(t) => t.is_finished(),
                    ConsumerHandle::Process { child, .. } => {
                        matches!(child.try_wait(), Ok(Some(_)))
                    }
                });
                if ended || Instant::now() > deadline || ABORT.load(Ordering::Relaxed) {
                    failure = Some(anyhow!(
                        "{} of {k} consumers became ready{}",
                        ready,
                        if ended {
                            " (a consumer ended early)"
                        } else {
                            " within 60 s"
                        }
                    ));
                    break;
                }
            }
        }
    }
    if let Some(f) = failure {
        signal_consumers(&mut handles, &stop, true);
        let mut errs = vec![format!("{f:#}")];
        for h in handles {
            if let Err(e) = join_consumer(h) {
                errs.push(format!("consumer: {e:#}"));
            }
        }
        bail!("{}", errs.join("; "));
    }

    let pid_s = pid.map(|p| p.to_string());
    let server_t0 = pid_s.as_deref().and_then(proc_cpu_ticks);
    let bench_t0 = proc_cpu_ticks_with_children("self");

    let uri_p = uri.to_string();
    let window = ctx.args.window;
    let producer = std::thread::Builder::new()
        .name("producer".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(bus::produce(sys, &uri_p, n, sc.rate(), window, k))
        })?;
    let produced = producer
        .join()
        .map_err(|_| anyhow!("the producer thread panicked"))?;
    signal_consumers(&mut handles, &stop, produced.is_err());
    let mut results = Vec::new();
    let mut consumer_errors = Vec::new();
    for h in handles {
        match join_consumer(h) {
            Ok(r) => results.push(r),
            Err(e) => consumer_errors.push(format!("{e:#}")),
        }
    }
    let server_t1 = pid_s.as_deref().and_then(proc_cpu_ticks);
    let bench_t1 = proc_cpu_ticks_with_children("self");
    let prod = produced.context("the producer failed")?;
    if !consumer_errors.is_empty() {
        bail!("consumer failed: {}", consumer_errors.join("; "));
    }

    let mut notes = Vec::new();
    if let Some(note) = ctx.admin.block_on(bus::check_stored(sys, uri, n))? {
        notes.push(note);
    }
    if prod.errors > 0 {
        notes.push(format!(
            "{} sends failed; first: {}",
            prod.errors,
            prod.first_errors.join("; ")
        ));
    }
    if prod.short_publishes > 0 {
        notes.push(format!(
            "{} PUBLISH replies counted fewer than {k} subscribers",
            prod.short_publishes
        ));
    }
    let last_recv = results.iter().map(|r| r.last_recv_ns).max().unwrap_or(0);
    let seconds = last_recv.saturating_sub(prod.first_send_ns) as f64 / 1e9;
    let send_secs = prod.last_send_ns.saturating_sub(prod.first_send_ns) as f64 / 1e9;
    let send_rate = if send_secs > 0.0 {
        (n - 1) as f64 / send_secs
    } else {
        0.0
    };
    if let Some(rate) = sc.rate() {
        if send_rate < rate * 0.95 {
            notes.push(format!(
                "the producer could not keep {} msg/s: it sent at {} msg/s ({} sends more than 1 ms behind schedule, at most {:.1} ms behind)",
                fmt_int(rate as u64),
                fmt_int(send_rate as u64),
                fmt_int(prod.behind_1ms),
                prod.max_behind_ms
            ));
        }
    }
    let mut per_consumer = Vec::new();
    for (c, r) in results.iter().enumerate() {
        let missing = n - r.received;
        let who = if k > 1 {
            format!("consumer {c}: ")
        } else {
            String::new()
        };
        if missing > 0 {
            let first_missing: Vec<String> = r
                .latencies_ns
                .iter()
                .enumerate()
                .filter(|(_, &l)| l == u64::MAX)
                .take(10)
                .map(|(i, _)| i.to_string())
                .collect();
            notes.push(format!(
                "{who}{missing} of {n} messages never arrived (gave up {:.0} s after the producer finished; first missing: {})",
                ctx.args.idle_timeout_secs,
                first_missing.join(", ")
            ));
        }
        if r.duplicates > 0 {
            notes.push(format!(
                "{who}{} messages arrived twice on the same cursor/subscription",
                r.duplicates
            ));
        }
        if r.reopens > 0 {
            notes.push(format!(
                "{who}the tailable cursor was closed by the server {} times and reopened",
                r.reopens
            ));
        }
        for e in &r.errors {
            notes.push(format!("{who}{e}"));
        }
        per_consumer.push(ConsumerSummary {
            received: r.received,
            missing,
            duplicates: r.duplicates,
            out_of_order: r.out_of_order,
            reopens: r.reopens,
            gave_up: r.gave_up,
            errors: r.errors.clone(),
            stats: stats([r.latencies_ns.as_slice()]),
        });
    }
    let latencies: Vec<Vec<u64>> = results.into_iter().map(|r| r.latencies_ns).collect();
    let latency = stats(latencies.iter().map(|v| v.as_slice()));
    let r = RowResult {
        system: sys,
        system_label: sys.label(),
        scenario: sc,
        messages: n,
        consumers: k,
        target_rate: sc.rate(),
        window,
        seconds,
        throughput: if seconds > 0.0 {
            n as f64 / seconds
        } else {
            0.0
        },
        send_rate,
        latency,
        ack: stats([prod.ack_ns.as_slice()]),
        per_consumer,
        server_cpu_s: match (server_t0, server_t1) {
            (Some(a), Some(b)) => Some((b - a) as f64 / ctx.hz),
            _ => None,
        },
        bench_cpu_s: match (bench_t0, bench_t1) {
            (Some(a), Some(b)) => Some((b - a) as f64 / ctx.hz),
            _ => None,
        },
        producer: prod,
        notes,
    };
    Ok(Row { r, latencies })
}

// ---------------------------------------------------------------------------
// Report

fn delivered(r: &RowResult) -> String {
    let missing: u64 = r.per_consumer.iter().map(|c| c.missing).sum();
    let dups: u64 = r.per_consumer.iter().map(|c| c.duplicates).sum();
    let mut parts = Vec::new();
    if missing == 0 {
        parts.push("all".to_string());
    } else {
        parts.push(format!("**{} lost**", fmt_int(missing)));
    }
    if dups > 0 {
        parts.push(format!("**{} dup**", fmt_int(dups)));
    }
    let reopens: u64 = r.per_consumer.iter().map(|c| c.reopens).sum();
    if reopens > 0 {
        parts.push(format!("{reopens} reopen"));
    }
    parts.join(", ")
}

fn scenario_table(sc: ScenarioKind, rows: &[&RowResult], n: u64, plot: Option<&str>) -> String {
    let k = sc.consumers();
    let mut s = format!("## {}\n\n", sc.title());
    s += "| System | Msgs | Duration (s) | Throughput (msg/s) | Send rate (msg/s) | p50 (ms) | p99 (ms) | p99.9 (ms) | max (ms) | mean (ms) | stddev (ms) | Ack p50 / p99 (ms) | Server CPU (s) | Bench CPU (s) | Delivered |\n";
    s += "| :-- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | :-- |\n";
    for r in rows {
        let l = &r.latency;
        s += &format!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
            r.system_label,
            if k > 1 { format!("{} × {k}", fmt_int(n)) } else { fmt_int(n) },
            r.seconds,
            fmt_int(r.throughput.round() as u64),
            fmt_int(r.send_rate.round() as u64),
            fmt_ms(l.p50_ms),
            fmt_ms(l.p99_ms),
            fmt_ms(l.p999_ms),
            fmt_ms(l.max_ms),
            fmt_ms(l.mean_ms),
            fmt_ms(l.stddev_ms),
            fmt_ms(r.ack.p50_ms),
            fmt_ms(r.ack.p99_ms),
            fmt_opt(r.server_cpu_s, 2),
            fmt_opt(r.bench_cpu_s, 2),
            delivered(r),
        );
    }
    if k > 1 {
        s += "\nLatency above: all consumers' messages together. Per consumer:\n\n";
        s += "| System | Consumer | Received | p50 (ms) | p99 (ms) | max (ms) | stddev (ms) | Reordered |\n";
        s += "| :-- | --: | --: | --: | --: | --: | --: | --: |\n";
        for r in rows {
            for (c, p) in r.per_consumer.iter().enumerate() {
                s += &format!(
                    "| {} | {c} | {} | {} | {} | {} | {} | {} |\n",
                    r.system_label,
                    fmt_int(p.received),
                    fmt_ms(p.stats.p50_ms),
                    fmt_ms(p.stats.p99_ms),
                    fmt_ms(p.stats.max_ms),
                    fmt_ms(p.stats.stddev_ms),
                    fmt_int(p.out_of_order),
                );
            }
        }
    }
    if let Some(p) = plot {
        s += &format!("\nPlot: `{p}`\n");
    }
    s
}

fn find(rows: &[Row], sys: System, sc: ScenarioKind) -> Option<&RowResult> {
    rows.iter()
        .map(|r| &r.r)
        .find(|r| r.system == sys && r.scenario == sc)
}

fn targets_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "## Targets (issue 4)\n\n| Target | Row | Measured | Met |\n| :-- | :-- | --: | :-: |\n",
    );
    let yes = |b: bool| if b { "yes" } else { "**no**" };
    let mut any = false;
    for sys in [System::Tailstream, System::TailstreamW1] {
        if let Some(r) = find(rows, sys, ScenarioKind::Paced20k) {
            any = true;
            s += &format!(
                "| p99 < 1 ms at 20,000 msg/s | {}, paced-20k (sent at {} msg/s) | {} ms | {} |\n",
                sys.label(),
                fmt_int(r.send_rate.round() as u64),
                fmt_ms(r.latency.p99_ms),
                yes(r.latency.p99_ms < 1.0 && r.send_rate >= 19_000.0)
            );
        }
    }
    for sys in [System::Tailstream, System::TailstreamW1] {
        for sc in [ScenarioKind::Paced4k, ScenarioKind::Paced20k] {
            if let Some(r) = find(rows, sys, sc) {
                any = true;
                s += &format!(
                    "| stddev < {SEED_BEST_STDDEV_MS} ms (the seed's best) | {}, {} | {} ms | {} |\n",
                    sys.label(),
                    sc.name(),
                    fmt_ms(r.latency.stddev_ms),
                    yes(r.latency.stddev_ms < SEED_BEST_STDDEV_MS)
                );
            }
        }
    }
    for sys in [System::Tailstream, System::TailstreamW1] {
        for sc in [ScenarioKind::Full, ScenarioKind::Fanout8Full] {
            if let Some(r) = find(rows, sys, sc) {
                any = true;
                s += &format!(
                    "| throughput ≥ 50,000 msg/s at full speed | {}, {} | {} msg/s | {} |\n",
                    sys.label(),
                    sc.name(),
                    fmt_int(r.throughput.round() as u64),
                    yes(r.throughput >= 50_000.0)
                );
            }
        }
    }
    for sc in [
        ScenarioKind::Paced4k,
        ScenarioKind::Paced20k,
        ScenarioKind::Fanout8_4k,
    ] {
        if let (Some(t), Some(rs)) = (
            find(rows, System::Tailstream, sc),
            find(rows, System::RedisStreamsAlways, sc),
        ) {
            any = true;
            for (what, a, b) in [
                ("p50", t.latency.p50_ms, rs.latency.p50_ms),
                ("p99", t.latency.p99_ms, rs.latency.p99_ms),
            ] {
                let ratio = if b > 0.0 { a / b } else { f64::INFINITY };
                s += &format!(
                    "| {what} within 2× of Redis Streams, both durable | {} vs {}, {} | {} vs {} ms = {:.2}× | {} |\n",
                    System::Tailstream.label(),
                    System::RedisStreamsAlways.label(),
                    sc.name(),
                    fmt_ms(a),
                    fmt_ms(b),
                    ratio,
                    yes(ratio <= 2.0)
                );
            }
        }
    }
    if !any {
        s += "| (no row for the targets ran) | | | |\n";
    }
    s
}

// ---------------------------------------------------------------------------

async fn tailstream_version(uri: &str) -> Result<String> {
    let client = bus::mongo_client(uri, "tailstream-bench-bus-setup", 2).await?;
    server_version(&client).await
}

async fn redis_version(uri: &str) -> Result<String> {
    let client = redis::Client::open(uri)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut con)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| format!("redis-server {}", v.trim()))
        .unwrap_or_else(|| "redis-server (unknown version)".into()))
}

fn run_all(args: &Args, admin: &tokio::runtime::Runtime) -> Result<()> {
    let n = if args.quick { 10_000 } else { args.messages };
    if n == 0 {
        bail!("--messages must be positive");
    }
    let ctx = Ctx {
        args,
        n,
        hz: clock_ticks(),
        admin,
    };
    let out_dir = args
        .out_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/results")));
    let parent = args.data_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut systems: Vec<System> = Vec::new();
    for s in System::ALL {
        if args.systems.contains(&s) {
            systems.push(s);
        }
    }
    let mut scenarios: Vec<ScenarioKind> = Vec::new();
    for s in &args.scenarios {
        if !scenarios.contains(s) {
            scenarios.push(*s);
        }
    }
    let redis_bin = if systems.iter().any(|s| !s.is_mongo()) {
        match args.redis_bin.clone().or_else(redis_server::find) {
            Some(b) => Some(b),
            None => bail!(
                "redis-server not found: install it (apt-get install -y redis-server; bench/bus.sh does), \
                 pass --redis-bin, or leave the Redis systems out with --systems tailstream,tailstream-w1"
            ),
        }
    } else {
        None
    };

    let mut rows: Vec<Row> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let mut ts_version = None;
    let mut redis_ver = None;

    // Tailstream (both write concerns on one server), then one redis-server per persistence setting.
    let mongo_systems: Vec<System> = systems.iter().copied().filter(|s| s.is_mongo()).collect();
    if !mongo_systems.is_empty() {
        let mut server = match &args.uri {
            Some(_) => None,
            None => {
                let bin = args.server_bin.clone().unwrap_or_else(default_server_bin);
                let s = ServerProc::tailstream(
                    "the Tailstream server",
                    bin,
                    &parent,
                    "tailstream-bench-bus",
                    &[],
                )?;
                eprintln!(
                    "started {} (pid {}) on port {} with --dbpath {}",
                    s.bin.display(),
                    s.pid,
                    s.port,
                    s.dbpath().display()
                );
                Some(s)
            }
        };
        let (uri, pid) = match (&args.uri, &server) {
            (Some(u), _) => (u.clone(), args.server_pid),
            (None, Some(s)) => (s.uri(), Some(s.pid)),
            (None, None) => unreachable!(),
        };
        ts_version = Some(match admin.block_on(tailstream_version(&uri)) {
            Ok(v) => v,
            Err(e) => {
                warnings.push(format!("buildInfo failed: {e:#}"));
                "unknown".into()
            }
        });
        'systems: for &sys in &mongo_systems {
            for &sc in &scenarios {
                if ABORT.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
                if let Some(p) = pid {
                    wait_idle(p, Duration::from_secs(15));
                }
                eprintln!(
                    "[{} · {}] {} messages...",
                    sys.name(),
                    sc.name(),
                    fmt_int(n)
                );
                match run_row(&ctx, sys, &uri, pid, sc) {
                    Ok(row) => {
                        progress(&row.r);
                        rows.push(row);
                    }
                    Err(e) => {
                        eprintln!("    failed: {e:#}");
                        warnings.push(format!(
                            "{} · {}: the row failed: {e:#}",
                            sys.label(),
                            sc.name()
                        ));
                    }
                }
                if let Some(s) = server.as_mut() {
                    if let Err(dead) = s.check_alive() {
                        warnings.push(format!("{dead}; its log:\n```\n{}\n```", s.log_tail(40)));
                        break 'systems;
                    }
                }
            }
        }
        if let Some(mut s) = server {
            if let Some(msg) = s.stop() {
                warnings.push(format!("{msg}; its log:\n```\n{}\n```", s.log_tail(20)));
            }
            let problems = s.log_problems();
            if !problems.is_empty() {
                warnings.push(format!(
                    "the Tailstream server logged warnings or errors:\n```\n{}\n```",
                    problems.join("\n")
                ));
            }
        }
    }
    for &sys in systems.iter().filter(|s| !s.is_mongo()) {
        let policy = sys.redis_appendfsync().expect("a Redis system");
        let mut server =
            redis_server::start(redis_bin.clone().expect("redis-server"), &parent, policy)?;
        eprintln!(
            "started redis-server (pid {}) on port {} ({})",
            server.pid,
            server.port,
            match policy {
                None => "no persistence".to_string(),
                Some(p) => format!("appendonly yes, appendfsync {p}"),
            }
        );
        let uri = format!("redis://127.0.0.1:{}/", server.port);
        if redis_ver.is_none() {
            redis_ver = admin.block_on(redis_version(&uri)).ok();
        }
        for &sc in &scenarios {
            if ABORT.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            eprintln!(
                "[{} · {}] {} messages...",
                sys.name(),
                sc.name(),
                fmt_int(n)
            );
            match run_row(&ctx, sys, &uri, Some(server.pid), sc) {
                Ok(row) => {
                    progress(&row.r);
                    rows.push(row);
                }
                Err(e) => {
                    eprintln!("    failed: {e:#}");
                    warnings.push(format!(
                        "{} · {}: the row failed: {e:#}",
                        sys.label(),
                        sc.name()
                    ));
                }
            }
            if let Err(dead) = server.check_alive() {
                warnings.push(format!(
                    "{dead}; its log:\n```\n{}\n```",
                    server.log_tail(40)
                ));
                break;
            }
        }
        if let Some(msg) = server.stop() {
            warnings.push(msg);
        }
    }

    // Report.
    let meta = Meta {
        machine: Machine::now(),
        tailstream: ts_version,
        redis: redis_ver,
        messages: n,
        window: args.window,
        capped_mb: args.capped_mb,
        separate_processes: args.separate_processes,
    };
    println!("# Message-bus benchmark (issue 4, seed 003: capped collection + tailable/awaitData cursor)\n");
    println!(
        "{} · server: {} · {} · {} messages per row · producer window {} · capped collection {} MiB · consumers: {}\n",
        meta.machine.header(),
        meta.tailstream.as_deref().unwrap_or("Tailstream not run"),
        meta.redis.as_deref().unwrap_or("Redis not run"),
        fmt_int(n),
        args.window,
        args.capped_mb,
        if args.separate_processes { "one process each" } else { "one thread each, in the benchmark's process" }
    );
    println!(
        "Latency = consumer receive time − the producer's send timestamp (both CLOCK_MONOTONIC on this machine); \
         stddev = population standard deviation of all latencies of the row; Duration = first send to the last \
         message received by the last consumer; Throughput = messages / Duration; Send rate = what the producer \
         achieved; Ack = the producer's send to the server's reply (insert / PUBLISH / XADD); Server CPU = the server process's user + system CPU seconds during the row (/proc/<pid>/stat); \
         Bench CPU = the benchmark's own (producer + consumers). \
         The producer keeps up to the window's sends in flight (each waits for its acknowledgement), \
         so a durable write's fsync does not cap the rate at one message per fsync; \
         Reordered = messages received after one with a higher number (sends in flight commit in any order).\n"
    );
    let mut plots: HashMap<ScenarioKind, String> = HashMap::new();
    if !args.no_plots && !rows.is_empty() {
        plot::init_fonts()?;
        fs::create_dir_all(&out_dir)
            .with_context(|| format!("cannot create {}", out_dir.display()))?;
        for &sc in &scenarios {
            let sc_rows: Vec<&Row> = rows.iter().filter(|r| r.r.scenario == sc).collect();
            if sc_rows.is_empty() {
                continue;
            }
            let panels: Vec<plot::Panel> = sc_rows
                .iter()
                .map(|r| plot::Panel {
                    title: r.r.system_label.to_string(),
                    series: r.latencies.iter().map(|v| v.as_slice()).collect(),
                    stats: r.r.latency.clone(),
                    color: plot::COLORS[System::ALL
                        .iter()
                        .position(|s| *s == r.r.system)
                        .unwrap_or(0)],
                })
                .collect();
            let file = format!(
                "bus-{}{}.png",
                sc.name(),
                if args.quick { "-quick" } else { "" }
            );
            let path = out_dir.join(&file);
            let title = format!(
                "Message number vs latency — {} · {} messages{}",
                sc.title(),
                fmt_int(n),
                if sc.consumers() > 1 {
                    " each (all consumers' points)"
                } else {
                    ""
                },
            );
            match plot::plot_scenario(&path, &title, n, &panels) {
                Ok(()) => {
                    // Shown relative to the working directory when under it.
                    let shown = std::env::current_dir()
                        .ok()
                        .and_then(|cwd| {
                            path.strip_prefix(&cwd)
                                .ok()
                                .map(|p| p.display().to_string())
                        })
                        .unwrap_or_else(|| path.display().to_string());
                    plots.insert(sc, shown);
                }
                Err(e) => warnings.push(format!("plot {} failed: {e:#}", path.display())),
            }
        }
    }
    for &sc in &scenarios {
        let sc_rows: Vec<&RowResult> = rows
            .iter()
            .map(|r| &r.r)
            .filter(|r| r.scenario == sc)
            .collect();
        if sc_rows.is_empty() {
            continue;
        }
        println!(
            "{}",
            scenario_table(sc, &sc_rows, n, plots.get(&sc).map(String::as_str))
        );
    }
    println!("{}", targets_table(&rows));
    let notes: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.r.notes
                .iter()
                .map(move |note| format!("{} · {}: {note}", r.r.system_label, r.r.scenario.name()))
        })
        .collect();
    if !notes.is_empty() || !warnings.is_empty() {
        println!("## Problems seen\n");
        for w in notes.iter().chain(warnings.iter()) {
            println!("- {w}");
        }
        println!();
    }
    if let Some(path) = &args.json {
        #[derive(Serialize)]
        struct Report<'a> {
            meta: &'a Meta,
            rows: Vec<&'a RowResult>,
            warnings: &'a [String],
        }
        let report = Report {
            meta: &meta,
            rows: rows.iter().map(|r| &r.r).collect(),
            warnings: &warnings,
        };
        fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn progress(r: &RowResult) {
    let missing: u64 = r.per_consumer.iter().map(|c| c.missing).sum();
    eprintln!(
        "    {:.2} s, {} msg/s (sent at {}), p50 {} ms, p99 {} ms, max {} ms, stddev {} ms, ack p50 {} p99 {} max {} ms, server CPU {} s, bench CPU {} s{}",
        r.seconds,
        fmt_int(r.throughput.round() as u64),
        fmt_int(r.send_rate.round() as u64),
        fmt_ms(r.latency.p50_ms),
        fmt_ms(r.latency.p99_ms),
        fmt_ms(r.latency.max_ms),
        fmt_ms(r.latency.stddev_ms),
        fmt_ms(r.ack.p50_ms),
        fmt_ms(r.ack.p99_ms),
        fmt_ms(r.ack.max_ms),
        fmt_opt(r.server_cpu_s, 2),
        fmt_opt(r.bench_cpu_s, 2),
        if missing > 0 { format!(", {missing} LOST") } else { String::new() }
    );
    for n in &r.notes {
        eprintln!("    note: {n}");
    }
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("__consumer") {
        let args = ConsumerArgs::parse_from(std::env::args().skip(1));
        return match consumer_main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("consumer error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    let admin = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    admin.spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: stopping");
            ABORT.store(true, Ordering::SeqCst);
        }
    });
    match run_all(&args, &admin) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

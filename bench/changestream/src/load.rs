//! What the scenarios share: clients, CPU accounting, the paced producer and the
//! loop that reads a change stream.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use mongodb::{
    bson::{Document, RawDocumentBuf},
    change_stream::ChangeStream,
    options::{Acknowledgment, ClientOptions, WriteConcern},
    Client,
};
use serde::Serialize;

use tailstream_bench_common::{
    machine::{clock_ticks, proc_cpu_ticks, proc_threads_cpu_ticks},
    server::ServerProc,
};

use crate::host::mono_ns;

/// maxAwaitTimeMS of every stream's getMore (--max-await-ms; 1 s is the
/// server's default too).
pub static MAX_AWAIT_MS: AtomicU64 = AtomicU64::new(1000);

pub fn max_await() -> Duration {
    Duration::from_millis(MAX_AWAIT_MS.load(Ordering::Relaxed))
}

/// A client with room for `pool` connections. A change stream's getMore holds
/// a connection while it waits, so every waiting stream needs one.
pub async fn client(uri: &str, pool: u32) -> Result<Client> {
    let mut opts = ClientOptions::parse(uri).await.context("bad URI")?;
    opts.max_pool_size = Some(pool.max(2));
    opts.app_name = Some("bench-changestream".into());
    if std::env::var_os("BENCH_TRACE").is_some() {
        opts.command_event_handler = Some(mongodb::event::EventHandler::callback(trace_command));
    }
    Client::with_options(opts).context("cannot create a client")
}

/// BENCH_TRACE=1: every aggregate and getMore reply on stderr (time, events,
/// postBatchResumeToken), to see what the server returned when a figure looks wrong.
fn trace_command(ev: mongodb::event::command::CommandEvent) {
    use mongodb::event::command::CommandEvent;
    match ev {
        CommandEvent::Succeeded(e)
            if e.command_name == "getMore" || e.command_name == "aggregate" =>
        {
            let c = e.reply.get_document("cursor").ok();
            let n = c
                .and_then(|c| {
                    c.get_array("nextBatch")
                        .or_else(|_| c.get_array("firstBatch"))
                        .ok()
                })
                .map_or(0, |a| a.len());
            let pbrt = c
                .and_then(|c| c.get_document("postBatchResumeToken").ok())
                .and_then(|d| d.get_str("_data").ok())
                .map(|s| s.chars().take(18).collect::<String>());
            eprintln!(
                "    [trace] {} {} ms: {n} docs, cursor {:?}, pbrt {}",
                e.command_name,
                e.duration.as_millis(),
                c.and_then(|c| c.get_i64("id").ok()),
                pbrt.unwrap_or_default()
            );
        }
        CommandEvent::Failed(e) => {
            eprintln!("    [trace] {} failed: {}", e.command_name, e.failure)
        }
        _ => {}
    }
}

/// `{w: 1}`: acknowledged by the server, not waiting for the journal. The event
/// still appears only once the write is durable (the server's rule).
pub fn w1() -> WriteConcern {
    WriteConcern::builder().w(Acknowledgment::Nodes(1)).build()
}

/// A printable pseudo-random string (xorshift; the content does not matter,
/// only that it does not compress to nothing).
pub fn filler(len: usize, seed: u64) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            CHARS[(x % CHARS.len() as u64) as usize] as char
        })
        .collect()
}

fn self_cpu_ticks() -> u64 {
    proc_cpu_ticks("self").unwrap_or(0)
}

/// CPU of the server and of this process from one moment on.
pub struct CpuMark {
    server_pid: String,
    server: u64,
    /// Of which the storage engine's background threads (flushes, compactions).
    server_storage: u64,
    client: u64,
    at: Instant,
    at_ns: i64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuSpan {
    pub wall_s: f64,
    pub server_cpu_s: f64,
    /// Of `server_cpu_s`, what RocksDB's flush and compaction threads used: work
    /// set by the data written, which lands in whichever span it happens to run.
    pub server_storage_cpu_s: f64,
    pub client_cpu_s: f64,
}

impl CpuSpan {
    pub fn server_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.server_cpu_s / self.wall_s
        } else {
            0.0
        }
    }

    /// Server CPU per second without the storage engine's background threads.
    pub fn server_foreground_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            (self.server_cpu_s - self.server_storage_cpu_s).max(0.0) / self.wall_s
        } else {
            0.0
        }
    }
}

impl CpuMark {
    pub fn now(server: &ServerProc) -> CpuMark {
        let server_pid = server.pid.to_string();
        CpuMark {
            server: proc_cpu_ticks(&server_pid).unwrap_or(0),
            server_storage: proc_threads_cpu_ticks(&server_pid, "rocksdb").unwrap_or(0),
            server_pid,
            client: self_cpu_ticks(),
            at: Instant::now(),
            at_ns: mono_ns(),
        }
    }

    /// CPU until now, wall time until `end_ns` (mono_ns) — for a span whose end
    /// is known only afterwards (what ran between is idle waiting).
    pub fn span_until_ns(&self, end_ns: i64) -> CpuSpan {
        CpuSpan {
            wall_s: (end_ns - self.at_ns).max(1) as f64 / 1e9,
            ..self.span()
        }
    }

    pub fn span(&self) -> CpuSpan {
        let hz = clock_ticks();
        let s = proc_cpu_ticks(&self.server_pid).unwrap_or(self.server);
        CpuSpan {
            wall_s: self.at.elapsed().as_secs_f64(),
            server_cpu_s: s.saturating_sub(self.server) as f64 / hz,
            server_storage_cpu_s: proc_threads_cpu_ticks(&self.server_pid, "rocksdb")
                .unwrap_or(self.server_storage)
                .saturating_sub(self.server_storage) as f64
                / hz,
            client_cpu_s: self_cpu_ticks().saturating_sub(self.client) as f64 / hz,
        }
    }
}

// ---------------------------------------------------------------------------
// The paced producer

#[derive(Debug, Clone, Default, Serialize)]
pub struct ProducerResult {
    /// Documents sent and acknowledged.
    pub acked: u64,
    /// Documents of failed inserts.
    pub failed: u64,
    pub secs: f64,
    /// The latest a tick was sent after its scheduled time (the producer could
    /// not keep the rate when this grows large).
    pub max_lag_ms: f64,
    /// Send to acknowledgement of each insert, in ns (its documents' send time to
    /// the reply's arrival): the write path alone, without the wait for the disk
    /// (`{w: 1}`), to set next to an event's latency.
    #[serde(skip)]
    pub ack_ns: Vec<i64>,
    /// The first errors.
    pub errors: Vec<String>,
}

pub type MakeDoc = Arc<dyn Fn(u64, i64) -> Document + Send + Sync>;

#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Documents per second.
    pub rate: f64,
    pub secs: f64,
    /// Documents per insert (1 = insert_one, else insert_many).
    pub batch: usize,
}

impl Pace {
    pub fn total(&self) -> u64 {
        (self.rate * self.secs).round() as u64
    }
}

/// Starts a producer in a thread of its own (with its own runtime and client,
/// so that hundreds of consumer tasks cannot delay its ticks): every
/// `batch / rate` seconds it sends the next `batch` documents, `make_doc(i,
/// send_time_ns)`. A tick does not wait for the previous one's reply (up to 64
/// inserts in flight), so a slow reply does not shift the schedule. `done` is
/// set when every insert has been answered.
pub fn spawn_producer(
    uri: String,
    db: String,
    coll: String,
    pace: Pace,
    make_doc: MakeDoc,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<ProducerResult> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let res = rt.block_on(produce(uri, db, coll, pace, make_doc));
        done.store(true, Ordering::SeqCst);
        res.unwrap_or_else(|e| ProducerResult {
            errors: vec![format!("{e:#}")],
            ..Default::default()
        })
    })
}

const IN_FLIGHT: usize = 64;

async fn produce(
    uri: String,
    db: String,
    coll: String,
    pace: Pace,
    make_doc: MakeDoc,
) -> Result<ProducerResult> {
    let client = client(&uri, IN_FLIGHT as u32 + 2).await?;
    let coll = client.database(&db).collection_with_options::<Document>(
        &coll,
        mongodb::options::CollectionOptions::builder()
            .write_concern(w1())
            .build(),
    );
    // One round trip first, so connecting is not part of the first tick.
    client
        .database(&db)
        .run_command(mongodb::bson::doc! {"ping": 1})
        .await?;
    let total = pace.total();
    let batch = pace.batch.max(1) as u64;
    let period = Duration::from_secs_f64(batch as f64 / pace.rate);
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let ack_ns = Arc::new(Mutex::new(Vec::<i64>::with_capacity(
        (total / batch) as usize + 1,
    )));
    let sem = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let start = tokio::time::Instant::now();
    let mut max_lag = Duration::ZERO;
    let mut i = 0u64;
    let mut tick = 0u32;
    while i < total {
        let at = start + period * tick;
        tokio::time::sleep_until(at).await;
        let permit = sem.clone().acquire_owned().await?;
        max_lag = max_lag.max(tokio::time::Instant::now().saturating_duration_since(at));
        let n = batch.min(total - i);
        let t = mono_ns();
        let docs: Vec<Document> = (i..i + n).map(|k| make_doc(k, t)).collect();
        let (coll, acked, failed, errors, ack_ns) = (
            coll.clone(),
            acked.clone(),
            failed.clone(),
            errors.clone(),
            ack_ns.clone(),
        );
        tokio::spawn(async move {
            let res = if n == 1 {
                coll.insert_one(docs.into_iter().next().unwrap())
                    .await
                    .map(|_| 1)
            } else {
                coll.insert_many(docs)
                    .await
                    .map(|r| r.inserted_ids.len() as u64)
            };
            match res {
                Ok(k) => {
                    ack_ns.lock().unwrap().push(mono_ns() - t);
                    acked.fetch_add(k, Ordering::Relaxed);
                    failed.fetch_add(n - k, Ordering::Relaxed);
                }
                Err(e) => {
                    failed.fetch_add(n, Ordering::Relaxed);
                    let mut errs = errors.lock().unwrap();
                    if errs.len() < 5 {
                        errs.push(e.to_string());
                    }
                }
            }
            drop(permit);
        });
        i += n;
        tick += 1;
    }
    let _all = sem.acquire_many(IN_FLIGHT as u32).await?;
    let errors = errors.lock().unwrap().clone();
    let ack_ns = std::mem::take(&mut *ack_ns.lock().unwrap());
    Ok(ProducerResult {
        acked: acked.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        max_lag_ms: max_lag.as_secs_f64() * 1e3,
        ack_ns,
        errors,
    })
}

// ---------------------------------------------------------------------------
// Reading a stream

#[derive(Debug, Clone, Default, Serialize)]
pub struct Drained {
    pub received: u64,
    /// Stopped without the expected count: the producer was done and nothing
    /// arrived for the idle time, or the deadline passed.
    pub gave_up: bool,
    pub error: Option<String>,
}

/// When a read of a stream stops short: past its deadline, or once the producer is
/// `done` and nothing came for `idle` (gave up); a read that expects everything
/// (`u64::MAX`) ends normally `idle` after the producer is done.
struct Patience {
    expect: u64,
    idle: Duration,
    deadline: Instant,
    last: Instant,
    done_seen: Option<Instant>,
}

impl Patience {
    fn new(expect: u64, idle: Duration, deadline: Instant) -> Patience {
        Patience {
            expect,
            idle,
            deadline,
            last: Instant::now(),
            done_seen: None,
        }
    }

    fn received(&mut self) {
        self.last = Instant::now();
    }

    /// `Some(gave_up)` when the read should stop now.
    fn stop(&mut self, done: &AtomicBool) -> Option<bool> {
        let now = Instant::now();
        if now > self.deadline {
            return Some(true);
        }
        if self.done_seen.is_none() && done.load(Ordering::SeqCst) {
            self.done_seen = Some(now);
        }
        let d = self.done_seen?;
        if self.expect == u64::MAX {
            (now.duration_since(d) >= self.idle).then_some(false)
        } else {
            (now.duration_since(self.last.max(d)) >= self.idle).then_some(true)
        }
    }
}

/// Reads a change stream opened as the driver's raw batch cursor
/// (`aggregate([{$changeStream: …}]).batch()`) with the same stop rules as [`drain`],
/// handing every event to `on_event` where it lies in the reply: no copy, no decoding
/// beyond what `on_event` reads (the driver's `ChangeStream` copies each event twice and
/// its resume token once, on the same cores as the server). An `Err` from `on_event`
/// stops the read with that error.
pub async fn drain_batches(
    cursor: &mut mongodb::raw_batch_cursor::RawBatchCursor,
    expect: u64,
    done: &AtomicBool,
    idle: Duration,
    deadline: Instant,
    mut on_event: impl FnMut(&mongodb::bson::RawDocument) -> Result<(), String>,
) -> Drained {
    use futures_util::StreamExt;
    let mut out = Drained::default();
    let mut patience = Patience::new(expect, idle, deadline);
    while out.received < expect {
        if let Some(gave_up) = patience.stop(done) {
            out.gave_up = gave_up;
            break;
        }
        let batch = match cursor.next().await {
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                out.error = Some(e.to_string());
                break;
            }
            None => {
                out.error = Some("the cursor ended".into());
                break;
            }
        };
        let events = match batch.doc_slices() {
            Ok(a) => a,
            Err(e) => {
                out.error = Some(e.to_string());
                break;
            }
        };
        for ev in events {
            let handled = ev.map_err(|e| e.to_string()).and_then(|v| {
                let d = v
                    .as_document()
                    .ok_or_else(|| "an event that is not a document".to_string())?;
                on_event(d)
            });
            if let Err(e) = handled {
                out.error = Some(e);
                break;
            }
            out.received += 1;
            patience.received();
        }
        if out.error.is_some() {
            break;
        }
    }
    out
}

/// Reads `cs` until `expect` events arrived, or `done` is set and nothing came
/// for `idle`, or `deadline`. `on_event` sees every event, raw (no decoding
/// beyond what it does itself, so the client stays cheap).
pub async fn drain(
    cs: &mut ChangeStream<RawDocumentBuf>,
    expect: u64,
    done: &AtomicBool,
    idle: Duration,
    deadline: Instant,
    mut on_event: impl FnMut(&RawDocumentBuf),
) -> Drained {
    let mut out = Drained::default();
    let mut patience = Patience::new(expect, idle, deadline);
    while out.received < expect {
        if let Some(gave_up) = patience.stop(done) {
            out.gave_up = gave_up;
            break;
        }
        match cs.next_if_any().await {
            Ok(Some(ev)) => {
                out.received += 1;
                patience.received();
                on_event(&ev);
            }
            Ok(None) => {}
            Err(e) => {
                out.error = Some(e.to_string());
                break;
            }
        }
    }
    out
}

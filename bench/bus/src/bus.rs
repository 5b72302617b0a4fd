//! The producer and the consumers, for each system: Tailstream (capped collection
//! and tailable/awaitData cursor, with the server's default write concern or
//! `{w: 1}`), Redis Pub/Sub and Redis Streams.
//!
//! Every message carries its sequence number `seq` (0..n), the producer's send
//! timestamp `t` (CLOCK_MONOTONIC nanoseconds, see [`mono_ns`]) and, as in the
//! seed, `time` (wall-clock seconds). A consumer's latency for a message is its
//! receive time (CLOCK_MONOTONIC, read when the driver hands the message over)
//! minus `t`.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use futures_util::{stream::FuturesUnordered, StreamExt};
use mongodb::{
    bson::{doc, Document, RawDocumentBuf},
    options::{Acknowledgment, ClientOptions, CollectionOptions, CursorType, WriteConcern},
    Client, Collection,
};
use serde::{Deserialize, Serialize};
use tailstream_bench_common::machine::mono_ns;

pub const DB: &str = "bench";
pub const COLL: &str = "bus";
pub const CHANNEL: &str = "bench-bus";
pub const STREAM: &str = "bench-bus";
/// How long a tailable cursor's getMore waits for data on the server.
pub const MAX_AWAIT: Duration = Duration::from_millis(1000);
/// Set by Ctrl-C: producers and consumers stop.
pub static ABORT: AtomicBool = AtomicBool::new(false);

/// Wall-clock seconds since the epoch (the seed's `{time: <now>}`).
fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// Tailstream, inserts with the server's default write concern (majority: durable).
    Tailstream,
    /// Tailstream, inserts with {w: 1}.
    TailstreamW1,
    /// Redis Pub/Sub, no persistence.
    RedisPubsub,
    /// Redis Streams (XADD / XREAD BLOCK), AOF with appendfsync everysec.
    RedisStreams,
    /// Redis Streams, AOF with appendfsync always (durable).
    RedisStreamsAlways,
    /// Redis Streams, AOF always, the producer shaped as a MongoDB driver's pool: one
    /// connection per send in flight, one command in flight per connection (the other
    /// Redis rows pipeline every send in flight on one connection, answered in one
    /// write). Not a target's peer: it shows what the connection shape costs Redis.
    RedisStreamsAlwaysConns,
}

impl System {
    pub const ALL: [System; 6] = [
        System::Tailstream,
        System::TailstreamW1,
        System::RedisPubsub,
        System::RedisStreams,
        System::RedisStreamsAlways,
        System::RedisStreamsAlwaysConns,
    ];

    pub fn label(self) -> &'static str {
        match self {
            System::Tailstream => "Tailstream (default w: majority)",
            System::TailstreamW1 => "Tailstream {w: 1}",
            System::RedisPubsub => "Redis Pub/Sub (no persistence)",
            System::RedisStreams => "Redis Streams (AOF everysec)",
            System::RedisStreamsAlways => "Redis Streams (AOF always)",
            System::RedisStreamsAlwaysConns => {
                "Redis Streams (AOF always), a connection per send in flight"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            System::Tailstream => "tailstream",
            System::TailstreamW1 => "tailstream-w1",
            System::RedisPubsub => "redis-pubsub",
            System::RedisStreams => "redis-streams",
            System::RedisStreamsAlways => "redis-streams-always",
            System::RedisStreamsAlwaysConns => "redis-streams-always-conns",
        }
    }

    pub fn is_mongo(self) -> bool {
        matches!(self, System::Tailstream | System::TailstreamW1)
    }

    /// Redis Streams, whatever its persistence and its producer's connections.
    pub fn is_stream(self) -> bool {
        matches!(
            self,
            System::RedisStreams | System::RedisStreamsAlways | System::RedisStreamsAlwaysConns
        )
    }

    /// The redis-server persistence this system runs with (None: not Redis).
    pub fn redis_appendfsync(self) -> Option<Option<&'static str>> {
        match self {
            System::RedisPubsub => Some(None),
            System::RedisStreams => Some(Some("everysec")),
            System::RedisStreamsAlways | System::RedisStreamsAlwaysConns => Some(Some("always")),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Connections

pub async fn mongo_client(uri: &str, app: &str, pool: u32) -> Result<Client> {
    let mut opts = ClientOptions::parse(uri)
        .await
        .context("invalid MongoDB URI")?;
    opts.app_name = Some(app.into());
    opts.max_pool_size = Some(pool.max(2));
    let client = Client::with_options(opts)?;
    client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .with_context(|| format!("cannot reach the server at {uri}"))?;
    Ok(client)
}

async fn redis_conn(uri: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(uri).context("invalid Redis URI")?;
    // No response timeout: XREAD BLOCK and a slow fsync (appendfsync always) are not errors.
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .with_context(|| format!("cannot connect to {uri}"))
}

/// Before the consumers start: Tailstream gets a fresh capped collection primed
/// with one dummy document (`seq: -1`), as in the seed — a tailable cursor on an
/// empty capped collection is closed at once by MongoDB (SERVER-13955), and the
/// dummy also tells the benchmark that a consumer's cursor is open. Redis Streams:
/// the stream is deleted.
pub async fn prepare(sys: System, uri: &str, capped_bytes: u64) -> Result<()> {
    if sys.is_mongo() {
        let client = mongo_client(uri, "tailstream-bench-bus-setup", 2).await?;
        let db = client.database(DB);
        db.collection::<Document>(COLL)
            .drop()
            .await
            .context("drop of bench.bus failed")?;
        db.create_collection(COLL)
            .capped(true)
            .size(capped_bytes)
            .await
            .context("create of the capped collection bench.bus failed")?;
        db.collection::<Document>(COLL)
            .insert_one(doc! {"seq": -1i64, "t": 0i64, "time": 0.0, "dummy": true})
            .await
            .context("insert of the dummy document failed")?;
    } else if sys.is_stream() {
        let mut con = redis_conn(uri).await?;
        let _: i64 = redis::cmd("DEL").arg(STREAM).query_async(&mut con).await?;
    }
    Ok(())
}

/// After a row: what the server holds (Tailstream: documents in the capped
/// collection, n + the dummy; Redis Streams: XLEN, n). Returns a note when it differs.
pub async fn check_stored(sys: System, uri: &str, n: u64) -> Result<Option<String>> {
    if sys.is_mongo() {
        let client = mongo_client(uri, "tailstream-bench-bus-setup", 2).await?;
        let coll = client.database(DB).collection::<Document>(COLL);
        let count = coll.count_documents(doc! {"seq": {"$gte": 0i64}}).await?;
        if count != n {
            return Ok(Some(format!(
                "the capped collection holds {count} messages after the row, not {n}"
            )));
        }
    } else if sys.is_stream() {
        let mut con = redis_conn(uri).await?;
        let len: u64 = redis::cmd("XLEN").arg(STREAM).query_async(&mut con).await?;
        if len != n {
            return Ok(Some(format!(
                "the stream holds {len} entries after the row, not {n}"
            )));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------
// Producer

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProducerResult {
    pub sent: u64,
    pub first_send_ns: u64,
    pub last_send_ns: u64,
    pub last_ack_ns: u64,
    /// Largest delay of a send behind its schedule (paced runs), ms.
    pub max_behind_ms: f64,
    /// Sends more than 1 ms behind their schedule.
    pub behind_1ms: u64,
    pub errors: u64,
    pub first_errors: Vec<String>,
    /// Pub/Sub: PUBLISH replies that counted fewer receivers than consumers.
    pub short_publishes: u64,
    /// Send to acknowledgement (the insert's / PUBLISH's / XADD's reply), ns, by message.
    #[serde(skip)]
    pub ack_ns: Vec<u64>,
}

enum Sender {
    Mongo(Collection<Document>),
    PubSub(redis::aio::MultiplexedConnection, i64),
    Stream(redis::aio::MultiplexedConnection),
    /// Idle connections: a send takes one and gives it back with its reply.
    StreamConns(std::sync::Mutex<Vec<redis::aio::MultiplexedConnection>>),
}

impl Sender {
    /// Sends message `seq`; returns its send timestamp and, for Pub/Sub, whether
    /// fewer subscribers than expected got it.
    async fn send(&self, seq: u64) -> (u64, Result<bool>) {
        let t = mono_ns();
        let r = match self {
            Sender::Mongo(coll) => coll
                .insert_one(doc! {"seq": seq as i64, "t": t as i64, "time": unix_secs()})
                .await
                .map(|_| false)
                .map_err(anyhow::Error::from),
            Sender::PubSub(con, expected) => {
                let mut con = con.clone();
                let payload = format!("{seq} {t} {:.6}", unix_secs());
                redis::cmd("PUBLISH")
                    .arg(CHANNEL)
                    .arg(payload)
                    .query_async::<i64>(&mut con)
                    .await
                    .map(|got| got < *expected)
                    .map_err(anyhow::Error::from)
            }
            Sender::StreamConns(idle) => {
                let con = idle.lock().unwrap().pop();
                match con {
                    // The producer keeps at most `window` sends in flight, one per connection.
                    None => Err(anyhow!(
                        "no idle connection: more sends in flight than connections"
                    )),
                    Some(mut con) => {
                        let r = xadd(&mut con, seq, t).await;
                        idle.lock().unwrap().push(con);
                        r
                    }
                }
            }
            Sender::Stream(con) => {
                let mut con = con.clone();
                xadd(&mut con, seq, t).await
            }
        };
        (t, r)
    }
}

/// XADD of message `seq` sent at `t` (ns) on `con`.
async fn xadd(con: &mut redis::aio::MultiplexedConnection, seq: u64, t: u64) -> Result<bool> {
    redis::cmd("XADD")
        .arg(STREAM)
        .arg("MAXLEN")
        .arg("~")
        .arg(1_000_000)
        .arg("*")
        .arg("seq")
        .arg(seq)
        .arg("t")
        .arg(t)
        .arg("time")
        .arg(format!("{:.6}", unix_secs()))
        .query_async::<redis::Value>(con)
        .await
        .map(|_| false)
        .map_err(anyhow::Error::from)
}

/// The producer's clock for paced rows: a periodic `timerfd` (CLOCK_MONOTONIC)
/// that expires when each message is due, polled by the producer's own runtime.
///
/// Why not a pacer thread: at 20,000 msg/s a thread that sleeps until each message
/// is due and then wakes the producer costs two thread wake-ups per message (a
/// quarter of a core on this 2-core machine, taken from the server it measures);
/// tokio's own timers have millisecond resolution. Why periodic: re-arming a
/// one-shot timer per message cost a syscall and a timer reprogramming each (8%
/// of the producer's CPU). With the timer in the producer's epoll set, a due
/// message costs at most one wake-up, none while replies keep the producer busy.
struct PaceTimer {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl PaceTimer {
    /// A timer that expires at `first_ns + k * interval_ns` for k = 0, 1, ...
    fn periodic(first_ns: u64, interval_ns: u64) -> Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: timerfd_create has no memory-safety preconditions; its result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("timerfd_create");
        }
        // SAFETY: fd is a fresh descriptor we own.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let ts = |ns: u64| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: ts(interval_ns.max(1)),
            it_value: ts(first_ns.max(1)),
        };
        // SAFETY: valid fd and a valid itimerspec; the old value is not requested.
        let rc = unsafe {
            libc::timerfd_settime(
                owned.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("timerfd_settime");
        }
        // SAFETY: an OwnedFd's descriptor stays open and the same while the AsyncFd owns it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
        }
        .map_err(|e| anyhow!("cannot register the timerfd: {e}"))?;
        Ok(Self { fd })
    }

    /// Waits until CLOCK_MONOTONIC reaches `at_ns` (returns at once if it has);
    /// `at_ns` is one of the timer's expiry times.
    async fn wait_until(&self, at_ns: u64) -> Result<()> {
        use std::os::fd::AsRawFd;
        while mono_ns() < at_ns {
            let mut guard = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into an 8-byte buffer.
            let n = unsafe {
                libc::read(
                    guard.get_inner().as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                )
            };
            if n != 8 {
                // Nothing expired since the last read: wait for the next expiry.
                guard.clear_ready();
            }
        }
        Ok(())
    }
}

/// One producer: sends messages 0..n, at `rate` messages per second (None: as fast
/// as it can), with up to `window` sends in flight (each waits for the server's
/// acknowledgement: Tailstream's insert reply, Redis's PUBLISH/XADD reply).
pub async fn produce(
    sys: System,
    uri: &str,
    n: u64,
    rate: Option<f64>,
    window: usize,
    consumers: usize,
) -> Result<ProducerResult> {
    let window = window.max(1);
    let sender = if sys.is_mongo() {
        let client = mongo_client(uri, "tailstream-bench-bus-producer", window as u32 + 1).await?;
        // Open the pool's connections before the clock starts.
        let warm: FuturesUnordered<_> = (0..window)
            .map(|_| {
                let c = client.clone();
                async move { c.database("admin").run_command(doc! {"ping": 1}).await }
            })
            .collect();
        for r in warm.collect::<Vec<_>>().await {
            r?;
        }
        let opts = match sys {
            System::TailstreamW1 => CollectionOptions::builder()
                .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build())
                .build(),
            _ => CollectionOptions::builder().build(),
        };
        Sender::Mongo(client.database(DB).collection_with_options(COLL, opts))
    } else if sys == System::RedisPubsub {
        Sender::PubSub(redis_conn(uri).await?, consumers as i64)
    } else if sys == System::RedisStreamsAlwaysConns {
        let mut conns = Vec::with_capacity(window);
        for _ in 0..window {
            conns.push(redis_conn(uri).await?);
        }
        Sender::StreamConns(std::sync::Mutex::new(conns))
    } else {
        Sender::Stream(redis_conn(uri).await?)
    };

    // Message i is due at start + i * interval (whole nanoseconds, as the timer's period).
    let interval_ns = rate.map(|r| (1e9 / r).round().max(1.0) as u64).unwrap_or(0);
    let start_ns = mono_ns();
    let due_at = |i: u64| start_ns + i * interval_ns;
    let timer = match rate {
        Some(_) => Some(PaceTimer::periodic(due_at(1), interval_ns)?),
        None => None,
    };

    let mut res = ProducerResult {
        first_send_ns: u64::MAX,
        ack_ns: vec![u64::MAX; n as usize],
        ..Default::default()
    };
    let mut inflight = FuturesUnordered::new();
    let mut next = 0u64;
    let mut failed: Option<anyhow::Error> = None;
    while (next < n || !inflight.is_empty()) && failed.is_none() {
        if ABORT.load(Ordering::Relaxed) {
            failed = Some(anyhow!("interrupted"));
            break;
        }
        let due = if timer.is_some() {
            // Messages due by now: i with i * interval <= elapsed.
            (mono_ns().saturating_sub(start_ns) / interval_ns + 1).min(n)
        } else {
            n
        };
        while next < due && inflight.len() < window {
            let seq = next;
            let sender = &sender;
            inflight.push(async move { (seq, sender.send(seq).await) });
            next += 1;
        }
        let can_wait_timer = timer.is_some() && next < n && inflight.len() < window;
        let next_due = due_at(next);
        tokio::select! {
            biased;
            Some((seq, (t, r))) = inflight.next(), if !inflight.is_empty() => {
                let now = mono_ns();
                res.first_send_ns = res.first_send_ns.min(t);
                res.last_send_ns = res.last_send_ns.max(t);
                res.last_ack_ns = res.last_ack_ns.max(now);
                res.ack_ns[seq as usize] = now.saturating_sub(t);
                if timer.is_some() {
                    let sched = due_at(seq);
                    let behind = t.saturating_sub(sched);
                    if behind > 1_000_000 {
                        res.behind_1ms += 1;
                    }
                    res.max_behind_ms = res.max_behind_ms.max(behind as f64 / 1e6);
                }
                match r {
                    Ok(short) => {
                        res.sent += 1;
                        if short {
                            res.short_publishes += 1;
                        }
                    }
                    Err(e) => {
                        res.errors += 1;
                        if res.first_errors.len() < 5 {
                            res.first_errors.push(format!("message {seq}: {e:#}"));
                        }
                        if res.errors >= 100 {
                            failed = Some(anyhow!("the producer stopped after 100 failed sends; first: {}",
                                res.first_errors.join("; ")));
                        }
                    }
                }
            }
            r = async { timer.as_ref().expect("paced").wait_until(next_due).await }, if can_wait_timer => {
                if let Err(e) = r {
                    failed = Some(e);
                }
            }
            else => {}
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if res.first_send_ns == u64::MAX {
        res.first_send_ns = 0;
    }
    Ok(res)
}

// ---------------------------------------------------------------------------
// Consumers

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConsumerResult {
    /// Latency of message `seq` in ns (its first receipt); u64::MAX = never received.
    pub latencies_ns: Vec<u64>,
    /// Distinct messages received.
    pub received: u64,
    /// Messages received again by the same cursor / subscription.
    pub duplicates: u64,
    /// Messages received after one with a higher sequence number.
    pub out_of_order: u64,
    /// Times the tailable cursor was found closed and a new one opened.
    pub reopens: u64,
    pub first_recv_ns: u64,
    pub last_recv_ns: u64,
    /// Stopped by the idle timeout with messages missing.
    pub gave_up: bool,
    pub errors: Vec<String>,
}

/// Shared between the producer side and the consumers of a row.
#[derive(Default)]
pub struct StopCtl {
    /// CLOCK_MONOTONIC ns when the producer had every send acknowledged (0: not yet).
    pub producer_done_ns: AtomicU64,
    /// The row failed elsewhere: stop now.
    pub abort: AtomicBool,
}

struct Recorder {
    n: u64,
    r: ConsumerResult,
    seen_gen: Vec<u32>,
    gen: u32,
    max_seq: i64,
    idle_ns: u64,
}

impl Recorder {
    fn new(n: u64, idle: Duration) -> Recorder {
        Recorder {
            n,
            r: ConsumerResult {
                latencies_ns: vec![u64::MAX; n as usize],
                first_recv_ns: u64::MAX,
                ..Default::default()
            },
            seen_gen: vec![0; n as usize],
            gen: 1,
            max_seq: -1,
            idle_ns: idle.as_nanos() as u64,
        }
    }

    fn record(&mut self, seq: i64, t: u64, now: u64) {
        if seq < 0 || seq as u64 >= self.n {
            if self.r.errors.len() < 20 {
                self.r.errors.push(format!("unexpected message seq {seq}"));
            }
            return;
        }
        let i = seq as usize;
        if self.r.latencies_ns[i] == u64::MAX {
            self.r.latencies_ns[i] = now.saturating_sub(t);
            self.r.received += 1;
            self.r.first_recv_ns = self.r.first_recv_ns.min(now);
            self.r.last_recv_ns = now;
        } else if self.seen_gen[i] == self.gen {
            self.r.duplicates += 1;
        }
        self.seen_gen[i] = self.gen;
        if seq < self.max_seq {
            self.r.out_of_order += 1;
        } else {
            self.max_seq = seq;
        }
    }

    fn complete(&self) -> bool {
        self.r.received >= self.n
    }

    /// Whether to stop waiting: interrupted, or the producer has been done for
    /// longer than the idle timeout and nothing arrived in that time.
    fn should_stop(&mut self, stop: &StopCtl) -> bool {
        if ABORT.load(Ordering::Relaxed) || stop.abort.load(Ordering::Relaxed) {
            self.r.gave_up = true;
            return true;
        }
        let done = stop.producer_done_ns.load(Ordering::Acquire);
        if done == 0 {
            return false;
        }
        let last = if self.r.last_recv_ns == 0 {
            done
        } else {
            done.max(self.r.last_recv_ns)
        };
        if mono_ns().saturating_sub(last) > self.idle_ns {
            self.r.gave_up = true;
            return true;
        }
        false
    }

    fn error(&mut self, e: String) {
        if self.r.errors.len() < 20 {
            self.r.errors.push(e);
        }
    }

    fn finish(mut self) -> ConsumerResult {
        if self.r.first_recv_ns == u64::MAX {
            self.r.first_recv_ns = 0;
        }
        self.r
    }
}

const POLL: Duration = Duration::from_millis(250);

/// One consumer: receives until it has all n messages or the producer has been
/// done for `idle` with nothing arriving. `ready` is called once it is
/// subscribed / its cursor is open (the producer starts when all consumers are ready).
pub async fn consume(
    sys: System,
    uri: &str,
    n: u64,
    idle: Duration,
    stop: Arc<StopCtl>,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<ConsumerResult> {
    let mut rec = Recorder::new(n, idle);
    match sys {
        System::Tailstream | System::TailstreamW1 => {
            consume_mongo(uri, &mut rec, &stop, ready).await?
        }
        System::RedisPubsub => consume_pubsub(uri, &mut rec, &stop, ready).await?,
        System::RedisStreams | System::RedisStreamsAlways | System::RedisStreamsAlwaysConns => {
            consume_stream(uri, &mut rec, &stop, ready).await?
        }
    }
    Ok(rec.finish())
}

async fn consume_mongo(
    uri: &str,
    rec: &mut Recorder,
    stop: &StopCtl,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<()> {
    let client = mongo_client(uri, "tailstream-bench-bus-consumer", 2).await?;
    let coll = client.database(DB).collection::<RawDocumentBuf>(COLL);
    let mut ready = Some(ready);
    loop {
        // A tailable + awaitData cursor in natural (insertion) order. After the
        // first, a reopened cursor reads the collection again from its start;
        // messages this consumer already has are not counted twice.
        let cursor = coll
            .find(doc! {})
            .cursor_type(CursorType::TailableAwait)
            .max_await_time(MAX_AWAIT)
            .await;
        let mut cursor = match cursor {
            Ok(c) => c,
            Err(e) => {
                rec.error(format!("find (tailable, awaitData) failed: {e}"));
                if ready.is_some() {
                    bail!("find (tailable, awaitData) failed: {e}");
                }
                if rec.should_stop(stop) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        loop {
            match tokio::time::timeout(POLL, cursor.next()).await {
                Err(_) => {
                    if rec.should_stop(stop) {
                        return Ok(());
                    }
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    rec.error(format!("getMore on the tailable cursor failed: {e}"));
                    break;
                }
                Ok(Some(Ok(d))) => {
                    let now = mono_ns();
                    let seq = d
                        .get_i64("seq")
                        .map_err(|e| anyhow!("message without seq: {e}"))?;
                    if seq < 0 {
                        if let Some(r) = ready.take() {
                            r();
                        }
                        continue;
                    }
                    let t = d
                        .get_i64("t")
                        .map_err(|e| anyhow!("message without t: {e}"))?
                        as u64;
                    rec.record(seq, t, now);
                    if rec.complete() {
                        return Ok(());
                    }
                }
            }
        }
        // The cursor is closed (cursor id 0) or failed: open a new one.
        rec.r.reopens += 1;
        rec.gen += 1;
        if rec.should_stop(stop) {
            return Ok(());
        }
        if rec.r.reopens > 1000 {
            bail!("the tailable cursor was closed more than 1000 times");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn consume_pubsub(
    uri: &str,
    rec: &mut Recorder,
    stop: &StopCtl,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<()> {
    let client = redis::Client::open(uri).context("invalid Redis URI")?;
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .context("cannot open a Pub/Sub connection")?;
    pubsub
        .subscribe(CHANNEL)
        .await
        .context("SUBSCRIBE failed")?;
    ready();
    let mut messages = pubsub.on_message();
    loop {
        match tokio::time::timeout(POLL, messages.next()).await {
            Err(_) => {
                if rec.should_stop(stop) {
                    return Ok(());
                }
            }
            Ok(None) => {
                rec.error("the Pub/Sub connection closed".into());
                return Ok(());
            }
            Ok(Some(msg)) => {
                let now = mono_ns();
                let payload = msg.get_payload_bytes();
                let (seq, t) = parse_pubsub(payload).ok_or_else(|| {
                    anyhow!("bad Pub/Sub payload {:?}", String::from_utf8_lossy(payload))
                })?;
                rec.record(seq, t, now);
                if rec.complete() {
                    return Ok(());
                }
            }
        }
    }
}

fn parse_pubsub(p: &[u8]) -> Option<(i64, u64)> {
    let s = std::str::from_utf8(p).ok()?;
    let mut it = s.split(' ');
    let seq = it.next()?.parse().ok()?;
    let t = it.next()?.parse().ok()?;
    Some((seq, t))
}

fn bulk(v: &redis::Value) -> Option<&[u8]> {
    match v {
        redis::Value::BulkString(b) => Some(b),
        _ => None,
    }
}

fn parse_num<T: std::str::FromStr>(v: &redis::Value) -> Option<T> {
    std::str::from_utf8(bulk(v)?).ok()?.parse().ok()
}

async fn consume_stream(
    uri: &str,
    rec: &mut Recorder,
    stop: &StopCtl,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<()> {
    let mut con = redis_conn(uri).await?;
    // The stream was deleted before the row: read it from its start.
    let mut last: Vec<u8> = b"0-0".to_vec();
    ready();
    loop {
        let reply: redis::Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1000)
            .arg("BLOCK")
            .arg(POLL.as_millis() as u64)
            .arg("STREAMS")
            .arg(STREAM)
            .arg(&last)
            .query_async(&mut con)
            .await
            .context("XREAD failed")?;
        // RESP2: nil on timeout, else [[key, [[id, [field, value, ...]], ...]]].
        let streams = match &reply {
            redis::Value::Nil => {
                if rec.should_stop(stop) {
                    return Ok(());
                }
                continue;
            }
            redis::Value::Array(a) => a,
            other => bail!("unexpected XREAD reply {other:?}"),
        };
        for s in streams {
            let redis::Value::Array(kv) = s else {
                bail!("unexpected XREAD reply {reply:?}")
            };
            let Some(redis::Value::Array(entries)) = kv.get(1) else {
                bail!("unexpected XREAD reply {reply:?}")
            };
            for e in entries {
                let now = mono_ns();
                let redis::Value::Array(pair) = e else {
                    bail!("unexpected stream entry {e:?}")
                };
                let (Some(id), Some(redis::Value::Array(fields))) =
                    (pair.first().and_then(bulk), pair.get(1))
                else {
                    bail!("unexpected stream entry {e:?}")
                };
                last = id.to_vec();
                let mut seq: Option<i64> = None;
                let mut t: Option<u64> = None;
                for f in fields.chunks(2) {
                    match f.first().and_then(bulk) {
                        Some(b"seq") => seq = f.get(1).and_then(parse_num),
                        Some(b"t") => t = f.get(1).and_then(parse_num),
                        _ => {}
                    }
                }
                let (Some(seq), Some(t)) = (seq, t) else {
                    bail!("stream entry without seq or t: {e:?}")
                };
                rec.record(seq, t, now);
            }
        }
        if rec.complete() {
            return Ok(());
        }
    }
}

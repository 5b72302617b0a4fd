//! serverStatus's sections that monitoring tools read (mongostat, agents), beyond the
//! engine's own figures: `network`, `opLatencies`, `asserts`, `metrics.document`,
//! `globalLock`, `mem` and `extra_info`, with mongod's field names and units.
//!
//! The counters are relaxed atomics, bumped a few times per message or command (bytes
//! and requests per message, one latency and one active-client count per command): on
//! the bus benchmark's path, a handful of uncontended additions per message, against
//! some 80,000 instructions of work.

use bson::{doc, Document};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// mongod's classes of operations in `opLatencies` and `globalLock.activeClients`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    Read,
    Write,
    Command,
    Transaction,
}

impl OpClass {
    /// The class mongod counts a command in.
    pub fn of(command: &str) -> OpClass {
        match command {
            "find" | "getMore" | "aggregate" | "count" | "distinct" | "mapReduce" => OpClass::Read,
            "insert" | "update" | "delete" | "findAndModify" | "findandmodify" => OpClass::Write,
            "commitTransaction" | "abortTransaction" => OpClass::Transaction,
            _ => OpClass::Command,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Default)]
struct Latency {
    total_micros: AtomicU64,
    ops: AtomicU64,
    /// Commands per [`LATENCY_BOUNDS_MICROS`] bucket (the last: slower than all), not
    /// cumulative: `/metrics` sums them into a histogram.
    buckets: [AtomicU64; LATENCY_BUCKETS],
}

/// Upper bounds of the latency histogram's buckets, in microseconds: 100 µs to 10 s in
/// steps of ×2.5 / ×2 (a bus message takes ~100 µs, a slow query seconds).
pub const LATENCY_BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];
const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_MICROS.len() + 1;

/// One class's latency histogram at a moment.
#[derive(Debug)]
pub struct LatencyHistogram {
    pub class: &'static str,
    pub sum_micros: u64,
    pub count: u64,
    /// (upper bound in seconds, commands in that bucket), ending at +Inf: per bucket,
    /// as prometheus-client's encoder takes them (it makes them cumulative).
    pub buckets: Vec<(f64, u64)>,
}

/// Whether a command's collection scan counts in `collectionScans` (see `examined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanKind {
    /// The command made its plan.
    Planned,
    /// A tailable find: counted in `total`, not in `nonTailable`.
    Tailable,
    /// A getMore: its cursor's scan was counted when it was planned.
    Continued,
}

#[derive(Default)]
pub struct Metrics {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    requests: AtomicU64,
    latencies: [Latency; 4],
    /// Commands that failed (mongod counts its user assertions: most command errors).
    user_asserts: AtomicU64,
    docs_returned: AtomicU64,
    pub docs_inserted: AtomicU64,
    pub docs_updated: AtomicU64,
    pub docs_deleted: AtomicU64,
    /// Commands running now, by class (`globalLock.activeClients`).
    active: [AtomicI64; 4],
    /// `metrics.queryExecutor` and `metrics.operation`, from what each command
    /// examined (`op_stats`).
    keys_scanned: AtomicU64,
    objects_scanned: AtomicU64,
    collection_scans: AtomicU64,
    collection_scans_non_tailable: AtomicU64,
    scan_and_order: AtomicU64,
}

/// A running command, counted in `globalLock.activeClients` until dropped.
pub struct Active<'a> {
    metrics: &'a Metrics,
    class: OpClass,
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let before = self.metrics.active[self.class.index()].fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "an active command counted out twice");
    }
}

impl Metrics {
    /// One message read from a client.
    pub fn message_in(&self, bytes: usize) {
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One reply written to a client.
    pub fn message_out(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A command starts: it counts as an active client until the guard goes.
    pub fn enter(&self, class: OpClass) -> Active<'_> {
        self.active[class.index()].fetch_add(1, Ordering::Relaxed);
        Active {
            metrics: self,
            class,
        }
    }

    /// An error reply (mongod counts its user assertions, which most command errors are).
    pub fn user_assert(&self) {
        self.user_asserts.fetch_add(1, Ordering::Relaxed);
    }

    /// A command ended after `elapsed`, having returned `returned` documents.
    pub fn command_done(&self, class: OpClass, elapsed: Duration, returned: usize) {
        let latency = &self.latencies[class.index()];
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        latency.total_micros.fetch_add(micros, Ordering::Relaxed);
        latency.ops.fetch_add(1, Ordering::Relaxed);
        let bucket = LATENCY_BOUNDS_MICROS.partition_point(|bound| *bound < micros);
        latency.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        if returned > 0 {
            self.docs_returned
                .fetch_add(returned as u64, Ordering::Relaxed);
        }
    }

    /// Adds what a finished command examined (its operation's figures).
    pub fn examined(&self, stats: &tailstream_engine::query::op_stats::OpStats, kind: ScanKind) {
        let (keys, docs) = stats.examined();
        if keys > 0 {
            self.keys_scanned.fetch_add(keys, Ordering::Relaxed);
        }
        if docs > 0 {
            self.objects_scanned.fetch_add(docs, Ordering::Relaxed);
        }
        if kind != ScanKind::Continued && stats.plan_is("COLLSCAN") {
            self.collection_scans.fetch_add(1, Ordering::Relaxed);
            if kind == ScanKind::Planned {
                self.collection_scans_non_tailable
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if stats.sorted_in_memory() {
            self.scan_and_order.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `metrics.queryExecutor`.
    pub fn query_executor(&self) -> Document {
        doc! {
            "scanned": load(&self.keys_scanned),
            "scannedObjects": load(&self.objects_scanned),
            "collectionScans": {
                "total": load(&self.collection_scans),
                "nonTailable": load(&self.collection_scans_non_tailable),
            },
        }
    }

    /// `metrics.operation` (no write conflicts here: a conflicting write waits for the
    /// document's lock instead of retrying).
    pub fn operation(&self) -> Document {
        doc! {
            "scanAndOrder": load(&self.scan_and_order),
            "writeConflicts": 0_i64,
        }
    }

    pub fn network(&self) -> Document {
        let bytes_in = load(&self.bytes_in);
        let bytes_out = load(&self.bytes_out);
        doc! {
            "bytesIn": bytes_in,
            "bytesOut": bytes_out,
            // No TLS or compression below the messages: the socket's bytes are these.
            "physicalBytesIn": bytes_in,
            "physicalBytesOut": bytes_out,
            "numSlowDNSOperations": 0_i64,
            "numSlowSSLOperations": 0_i64,
            "numRequests": load(&self.requests),
        }
    }

    /// Each class's latency histogram (`/metrics`).
    pub fn latency_histograms(&self) -> Vec<LatencyHistogram> {
        [
            (OpClass::Read, "reads"),
            (OpClass::Write, "writes"),
            (OpClass::Command, "commands"),
            (OpClass::Transaction, "transactions"),
        ]
        .into_iter()
        .map(|(c, class)| {
            let l = &self.latencies[c.index()];
            let buckets: Vec<(f64, u64)> = l
                .buckets
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let bound = LATENCY_BOUNDS_MICROS
                        .get(i)
                        .map_or(f64::INFINITY, |b| *b as f64 / 1e6);
                    (bound, n.load(Ordering::Relaxed))
                })
                .collect();
            LatencyHistogram {
                class,
                sum_micros: l.total_micros.load(Ordering::Relaxed),
                // The buckets' total, read with them (ops may have moved on since).
                count: buckets.iter().map(|(_, n)| n).sum(),
                buckets,
            }
        })
        .collect()
    }

    pub fn op_latencies(&self) -> Document {
        let class = |c: OpClass| {
            let l = &self.latencies[c.index()];
            doc! {"latency": load(&l.total_micros), "ops": load(&l.ops)}
        };
        doc! {
            "reads": class(OpClass::Read),
            "writes": class(OpClass::Write),
            "commands": class(OpClass::Command),
            "transactions": class(OpClass::Transaction),
        }
    }

    pub fn asserts(&self) -> Document {
        doc! {
            "regular": 0_i32,
            "warning": 0_i32,
            "msg": 0_i32,
            "user": load(&self.user_asserts),
            "tripwire": 0_i32,
            "rollovers": 0_i32,
        }
    }

    /// `metrics.document`.
    pub fn document(&self) -> Document {
        doc! {
            "deleted": load(&self.docs_deleted),
            "inserted": load(&self.docs_inserted),
            "returned": load(&self.docs_returned),
            "updated": load(&self.docs_updated),
        }
    }

    /// `globalLock`: no lock queues here (writers waiting behind `fsyncLock` aside, which
    /// mongod too shows as active), the running reads and writes as active clients
    /// (other commands hold no collection's lock in mongod either; an awaitable hello
    /// waiting for a topology change is not an active client).
    pub fn global_lock(&self, uptime: Duration) -> Document {
        let active = |c: OpClass| self.active[c.index()].load(Ordering::Relaxed).max(0);
        let readers = active(OpClass::Read);
        let writers = active(OpClass::Write) + active(OpClass::Transaction);
        let total = readers + writers;
        doc! {
            "totalTime": i64::try_from(uptime.as_micros()).unwrap_or(i64::MAX),
            "currentQueue": {"total": 0_i32, "readers": 0_i32, "writers": 0_i32},
            "activeClients": {"total": total, "readers": readers, "writers": writers},
        }
    }
}

fn load(counter: &AtomicU64) -> i64 {
    i64::try_from(counter.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// `mem`: the process's resident and virtual size in MB, from /proc.
pub fn mem() -> Document {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |field: &str| -> i64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let supported = !status.is_empty();
    doc! {
        "bits": (usize::BITS as i32),
        "resident": (kib("VmRSS:") / 1024) as i32,
        "virtual": (kib("VmSize:") / 1024) as i32,
        "supported": supported,
    }
}

/// `extra_info`: the process's resource usage (getrusage), as mongod has it on Linux.
pub fn extra_info() -> Document {
    // SAFETY: getrusage writes only the struct it is given, which is plain data.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return doc! {"note": "fields vary by platform"};
        }
        usage
    };
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    doc! {
        "note": "fields vary by platform",
        "user_time_us": micros(usage.ru_utime),
        "system_time_us": micros(usage.ru_stime),
        "maximum_resident_set_kb": usage.ru_maxrss,
        "input_blocks": usage.ru_inblock,
        "output_blocks": usage.ru_oublock,
        "page_reclaims": usage.ru_minflt,
        "page_faults": usage.ru_majflt,
        "voluntary_context_switches": usage.ru_nvcsw,
        "involuntary_context_switches": usage.ru_nivcsw,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn latencies_land_in_their_histogram_bucket() {
        let m = Metrics::default();
        for micros in [50, 100, 101, 30_000, 20_000_000] {
            m.command_done(OpClass::Read, Duration::from_micros(micros), 0);
        }
        let reads = &m.latency_histograms()[0];
        assert_eq!((reads.class, reads.count), ("reads", 5));
        let n = |bound: f64| reads.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(n(0.0001), 2, "50 µs and 100 µs: at or under the bound");
        assert_eq!(n(0.00025), 1);
        assert_eq!(n(0.05), 1);
        assert_eq!(n(f64::INFINITY), 1, "past 10 s");
        assert_eq!(reads.sum_micros, 50 + 100 + 101 + 30_000 + 20_000_000);
    }
    use super::*;

    #[test]
    fn commands_fall_in_mongods_classes() {
        assert_eq!(OpClass::of("find"), OpClass::Read);
        assert_eq!(OpClass::of("getMore"), OpClass::Read);
        assert_eq!(OpClass::of("insert"), OpClass::Write);
        assert_eq!(OpClass::of("commitTransaction"), OpClass::Transaction);
        assert_eq!(OpClass::of("hello"), OpClass::Command);
    }

    #[test]
    fn latencies_and_active_clients_add_up() {
        let m = Metrics::default();
        {
            let _read = m.enter(OpClass::Read);
            let _write = m.enter(OpClass::Write);
            let _hello = m.enter(OpClass::Command);
            let lock = m.global_lock(Duration::from_secs(2));
            assert_eq!(
                lock.get_document("activeClients").unwrap(),
                &doc! {"total": 2_i64, "readers": 1_i64, "writers": 1_i64}
            );
            assert_eq!(lock.get_i64("totalTime").unwrap(), 2_000_000);
        }
        let idle = m.global_lock(Duration::ZERO);
        assert_eq!(
            idle.get_document("activeClients")
                .unwrap()
                .get_i64("total")
                .unwrap(),
            0
        );
        m.command_done(OpClass::Read, Duration::from_micros(150), 3);
        m.command_done(OpClass::Read, Duration::from_micros(50), 0);
        m.user_assert();
        let reads = m.op_latencies().get_document("reads").unwrap().clone();
        assert_eq!(reads, doc! {"latency": 200_i64, "ops": 2_i64});
        assert_eq!(m.asserts().get_i64("user").unwrap(), 1);
        assert_eq!(m.document().get_i64("returned").unwrap(), 3);
        m.message_in(100);
        m.message_out(40);
        let net = m.network();
        assert_eq!(
            (
                net.get_i64("bytesIn").unwrap(),
                net.get_i64("bytesOut").unwrap(),
                net.get_i64("numRequests").unwrap()
            ),
            (100, 40, 1)
        );
    }

    #[test]
    fn memory_comes_from_the_process() {
        let mem = mem();
        assert!(mem.get_bool("supported").unwrap());
        assert!(mem.get_i32("resident").unwrap() > 0 || cfg!(not(target_os = "linux")));
        assert!(mem.get_i32("virtual").unwrap() >= mem.get_i32("resident").unwrap());
        let extra = extra_info();
        assert!(extra.get_i64("user_time_us").unwrap() >= 0);
    }
}

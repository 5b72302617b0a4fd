//! Group commit. Every committed batch gets a sequence number; a writer that needs
//! durability (`j: true`, `w: "majority"`) waits until the synced sequence reaches
//! its own. One thread performs the fsyncs: while one runs, new commits pile up and
//! the next fsync covers them all, so concurrent durable writers share syncs.
//! Without any request, the thread still syncs within `IDLE_SYNC_INTERVAL`.

use super::time::{AtomicClusterTime, ClusterTime};
use super::workers::{IoWorkers, IO_WORKERS};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailstream_storage::Store;
use tokio::sync::watch;

/// Plain (non-`j`) writes reach the disk at most this long after they commit.
pub const IDLE_SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// The longest an asked-for fsync waits for the I/O workers to run out of work (see
/// `workers`): under a load that keeps them busy without a pause, commits still reach
/// the disk this soon. About two of this disk's fsyncs (p50 0.19-0.28 ms): a bound
/// that rarely decides (on the bus benchmark's full-speed 1→1 row, 148 of 1,832
/// fsyncs, 2026-11-26) and adds at most that to a waiting writer. The gathering itself
/// took the commits per fsync from 8 to 16-23 and the server's CPU per message down by
/// 12-15% on that row (2 cores).
pub const GATHER_MAX: Duration = Duration::from_micros(500);

/// After an fsync failed for want of disk space, the next try waits this long unless a
/// writer asks for one sooner (each try is cheap: the store refuses at once while it
/// has not recovered).
const OUT_OF_SPACE_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Durations in 10 µs buckets below 10 ms, 1 ms buckets up to 1 s, then one bucket for
/// longer ones: the group-commit thread's fsyncs and the commits' waits for them.
/// Reported by serverStatus (`durability.syncMicros`, `durability.commitToDurableMicros`),
/// so a latency measurement can be set next to the disk's own behaviour under the same
/// load.
pub struct MicrosHistogram {
    buckets: Box<[AtomicU64]>,
    total_micros: AtomicU64,
    max_micros: AtomicU64,
}

const FINE_BUCKETS: usize = 1000; // 10 µs each, up to 10 ms
const COARSE_BUCKETS: usize = 990; // 1 ms each, from 10 ms up to 1 s

impl MicrosHistogram {
    fn new() -> MicrosHistogram {
        MicrosHistogram {
            buckets: (0..FINE_BUCKETS + COARSE_BUCKETS + 1)
                .map(|_| AtomicU64::new(0))
                .collect(),
            total_micros: AtomicU64::new(0),
            max_micros: AtomicU64::new(0),
        }
    }

    fn bucket(micros: u64) -> usize {
        if micros < 10_000 {
            (micros / 10) as usize
        } else if micros < 1_000_000 {
            FINE_BUCKETS + ((micros - 10_000) / 1_000) as usize
        } else {
            FINE_BUCKETS + COARSE_BUCKETS
        }
    }

    /// The exclusive upper bound of a bucket, in µs (u64::MAX for the last one).
    fn upper_bound(bucket: usize) -> u64 {
        if bucket < FINE_BUCKETS {
            (bucket as u64 + 1) * 10
        } else if bucket < FINE_BUCKETS + COARSE_BUCKETS {
            10_000 + (bucket - FINE_BUCKETS) as u64 * 1_000 + 1_000
        } else {
            u64::MAX
        }
    }

    pub fn record(&self, took: Duration) {
        let micros = took.as_micros().min(u64::MAX as u128) as u64;
        self.buckets[Self::bucket(micros)].fetch_add(1, Ordering::Relaxed);
        self.total_micros.fetch_add(micros, Ordering::Relaxed);
        self.max_micros.fetch_max(micros, Ordering::Relaxed);
    }

    /// (count, total µs, max µs, and the non-empty buckets as (upper bound µs, count)).
    pub fn snapshot(&self) -> (u64, u64, u64, Vec<(u64, u64)>) {
        let mut count = 0;
        let mut buckets = Vec::new();
        for (i, b) in self.buckets.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            if n > 0 {
                count += n;
                buckets.push((Self::upper_bound(i), n));
            }
        }
        (
            count,
            self.total_micros.load(Ordering::Relaxed),
            self.max_micros.load(Ordering::Relaxed),
            buckets,
        )
    }
}

/// How many recent commits remember when they committed, for `commit_waits`: a
/// commit older than this many sequence numbers when its fsync ends is not timed
/// (at 100,000 commits/s, 40 ms of them).
const COMMIT_TIMES: usize = 4096;

pub struct Durability {
    /// Durations of the fsyncs done so far.
    pub syncs: MicrosHistogram,
    /// Time from each commit to the end of the fsync that covered it: what a `j: true`
    /// writer waits (without its thread's wake-up) and how long a write's change event
    /// stays invisible. The fsync alone does not tell it: a commit landing while an
    /// fsync runs waits for that one to end and then for its own.
    pub commit_waits: MicrosHistogram,
    /// Asked-for fsyncs that started at `GATHER_MAX` with the I/O workers still busy
    /// (serverStatus `durability.gatherTimeouts`): how often the bound, not an idle
    /// moment, decided.
    pub gather_timeouts: AtomicU64,
    /// When recent commits happened, by `seq % COMMIT_TIMES`: (seq, ns since `epoch`).
    /// The seq is stored after the time, so a reader that finds its seq finds its time.
    commit_times: Box<[(AtomicU64, AtomicU64)]>,
    epoch: std::time::Instant,
    committed: AtomicU64,
    /// Newest oplog time committed, stored before `committed` advances, so an fsync
    /// that starts after reading it covers that entry.
    committed_ts: AtomicClusterTime,
    /// Newest oplog time known to be on disk: change streams show nothing newer.
    durable_ts_tx: watch::Sender<ClusterTime>,
    requested: Mutex<u64>,
    wake: Condvar,
    synced_tx: watch::Sender<Synced>,
    synced_rx: watch::Receiver<Synced>,
    last_failure: Mutex<String>,
    /// The last fsync failed (for want of space): the next success is logged.
    failing: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
    /// The I/O workers an asked-for fsync waits for (see `workers`), at most `gather_max`.
    workers: &'static IoWorkers,
    gather_max: Duration,
}

/// What the group commit has done, in one channel so that a waiting writer waits on
/// one future (with a channel each and a `select!` over both, a durable bus message's
/// wait took 2,400 instructions, 1,300 with this; callgrind 2026-11-28).
#[derive(Clone, Copy, Debug, Default)]
struct Synced {
    /// Every commit up to this sequence number is on disk.
    seq: u64,
    /// How many fsyncs failed for want of disk space; a waiter that sees it change
    /// gives up (the write is applied but not known durable) with `last_failure`.
    failures: u64,
}

impl Durability {
    /// `last_ts`: the newest oplog time already in the store (durable after recovery).
    pub fn new(last_ts: ClusterTime) -> Arc<Durability> {
        Durability::with_workers(last_ts, &IO_WORKERS, GATHER_MAX)
    }

    /// With the I/O workers an asked-for fsync waits for, and for how long at most.
    pub fn with_workers(
        last_ts: ClusterTime,
        workers: &'static IoWorkers,
        gather_max: Duration,
    ) -> Arc<Durability> {
        let (synced_tx, synced_rx) = watch::channel(Synced::default());
        Arc::new(Durability {
            syncs: MicrosHistogram::new(),
            commit_waits: MicrosHistogram::new(),
            gather_timeouts: AtomicU64::new(0),
            commit_times: (0..COMMIT_TIMES)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
            epoch: std::time::Instant::now(),
            committed: AtomicU64::new(0),
            committed_ts: AtomicClusterTime::new(last_ts),
            durable_ts_tx: watch::channel(last_ts).0,
            requested: Mutex::new(0),
            wake: Condvar::new(),
            synced_tx,
            synced_rx,
            last_failure: Mutex::new(String::new()),
            failing: std::sync::atomic::AtomicBool::new(false),
            stop: std::sync::atomic::AtomicBool::new(false),
            workers,
            gather_max,
        })
    }

    /// Called by the writer after each commit (with the commit's newest oplog time, if it
    /// wrote any); returns the commit's sequence number.
    pub fn committed(&self, last_ts: Option<ClusterTime>) -> u64 {
        if let Some(ts) = last_ts {
            // Commits come one at a time (under the writer lock), in oplog order.
            let before = self.committed_ts.fetch_max(ts, Ordering::SeqCst);
            assert!(
                before < ts,
                "commits' oplog times go backwards: {ts} committed after {before}"
            );
        }
        let seq = self.committed.fetch_add(1, Ordering::SeqCst) + 1;
        let (slot_seq, slot_ns) = &self.commit_times[seq as usize % COMMIT_TIMES];
        slot_ns.store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        slot_seq.store(seq, Ordering::Release);
        seq
    }

    /// Records, for every commit in `(from, to]` that still has its time, how long it
    /// waited for the fsync that ended `now`.
    fn record_commit_waits(&self, from: u64, to: u64, now: std::time::Instant) {
        let now_ns = now.duration_since(self.epoch).as_nanos() as u64;
        let from = from.max(to.saturating_sub(COMMIT_TIMES as u64));
        for seq in from + 1..=to {
            let (slot_seq, slot_ns) = &self.commit_times[seq as usize % COMMIT_TIMES];
            if slot_seq.load(Ordering::Acquire) == seq {
                let at = slot_ns.load(Ordering::Relaxed);
                self.commit_waits
                    .record(Duration::from_nanos(now_ns.saturating_sub(at)));
            }
        }
    }

    /// The newest oplog time that is on disk.
    pub fn durable_ts(&self) -> ClusterTime {
        *self.durable_ts_tx.borrow()
    }

    /// A receiver that sees the durable oplog time advance (change streams wait on it).
    pub fn subscribe_durable_ts(&self) -> watch::Receiver<ClusterTime> {
        self.durable_ts_tx.subscribe()
    }

    /// Asks for an fsync covering `seq` soon, without waiting for it.
    pub fn request(&self, seq: u64) {
        self.assert_committed(seq);
        if self.synced() >= seq {
            return;
        }
        let mut r = self.requested.lock();
        if *r < seq {
            *r = seq;
            self.wake.notify_one();
        }
    }

    pub fn last_committed(&self) -> u64 {
        self.committed.load(Ordering::SeqCst)
    }

    pub fn synced(&self) -> u64 {
        self.synced_rx.borrow().seq
    }

    /// Waits until everything up to `seq` is on disk. Fails with the store's message
    /// when an fsync tried after this call failed for want of disk space: the writes
    /// are applied and visible, and become durable only once the store has recovered.
    pub async fn wait_synced(&self, seq: u64) -> Result<(), String> {
        if self.synced() >= seq {
            return Ok(());
        }
        let mut rx = self.synced_rx.clone();
        let failures = rx.borrow_and_update().failures;
        self.ask(seq);
        loop {
            let now = *rx.borrow_and_update();
            if now.seq >= seq {
                return Ok(());
            }
            if now.failures != failures {
                return Err(self.last_failure.lock().clone());
            }
            // The sender lives as long as self; an error means shutdown, when waiting
            // is moot.
            if rx.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// Blocking variant for non-async callers (tests, shutdown, the fsync command).
    pub fn wait_synced_blocking(&self, seq: u64) -> Result<(), String> {
        let failures = self.synced_rx.borrow().failures;
        self.ask(seq);
        loop {
            let now = *self.synced_rx.borrow();
            if now.seq >= seq {
                return Ok(());
            }
            if now.failures != failures {
                return Err(self.last_failure.lock().clone());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// A wait or request for a commit that has not happened would never end (or wait
    /// for some later commit's fsync): sequence numbers come from commits.
    fn assert_committed(&self, seq: u64) {
        let committed = self.last_committed();
        assert!(
            seq <= committed,
            "a sync asked for commit {seq}, past the last commit {committed}"
        );
    }

    /// Makes the group-commit thread sync through `seq` now.
    fn ask(&self, seq: u64) {
        self.assert_committed(seq);
        let mut r = self.requested.lock();
        if *r < seq {
            *r = seq;
        }
        self.wake.notify_one();
    }

    /// Runs the sync loop on its own thread until `stop` is called.
    pub fn spawn_syncer(self: &Arc<Self>, store: Arc<Store>) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("group-commit".into())
            .spawn(move || {
                tailstream_storage::stop_perf_counters_on_this_thread();
                me.run(&store)
            })
            .expect("spawn group-commit thread")
    }

    fn run(&self, store: &Store) {
        loop {
            let asked = {
                let mut r = self.requested.lock();
                if *r <= self.synced() && !self.stop.load(Ordering::SeqCst) {
                    self.wake.wait_for(&mut r, IDLE_SYNC_INTERVAL);
                }
                *r > self.synced()
            };
            if asked {
                // A writer waits: let the I/O workers finish the requests in hand first,
                // so this fsync covers their commits too (see `workers`).
                let deadline = std::time::Instant::now() + self.gather_max;
                if !self.workers.wait_idle(None, deadline) {
                    self.gather_timeouts.fetch_add(1, Ordering::Relaxed);
                }
            }
            // The sequence first, then the oplog time. A commit stores its time before
            // its sequence (`committed`), so every commit counted in `target` has its
            // time covered by `ts`: an acknowledged write's event is visible at once.
            // (Read the other way round, a commit landing between the two loads was
            // acknowledged while its event stayed invisible until some later sync.)
            // `ts` may include commits past `target`; they too were written before
            // their time was stored, so before the fsync below starts, which covers them.
            let target = self.last_committed();
            let ts = self.committed_ts.load(Ordering::SeqCst);
            let was_synced = self.synced();
            // Only this thread moves `synced`, always to a sequence already committed.
            assert!(
                was_synced <= target,
                "synced sequence {was_synced} is past the committed {target}"
            );
            if target > was_synced {
                let started = std::time::Instant::now();
                let synced = store.sync();
                let ended = std::time::Instant::now();
                self.syncs.record(ended - started);
                match synced {
                    Ok(()) => {}
                    Err(e) if e.is_out_of_space() => {
                        // No crash: the store refuses writes from now on (they fail
                        // with OutOfDiskSpace), reads go on, and waiting writers are
                        // told their write is not known durable. Nothing acknowledged
                        // as durable is at risk. A failed write of the log buffer leaves
                        // RocksDB refusing writes until it is reopened (a restart
                        // replays the log up to the last fsync); a failure that did
                        // not touch the log (a flush's) heals by itself once space is
                        // freed, and the next fsync here goes through.
                        if !self.failing.load(Ordering::SeqCst) {
                            tracing::error!(
                                "fsync of the write-ahead log failed: {e}; writes are \
                                 refused: free disk space under the data directory and \
                                 restart the server"
                            );
                        }
                        *self.last_failure.lock() = e.to_string();
                        self.failing.store(true, Ordering::SeqCst);
                        self.synced_tx.send_modify(|s| s.failures += 1);
                        if self.stop.load(Ordering::SeqCst) {
                            tracing::error!(
                                "shutting down with commits not on disk (never acknowledged \
                                 as durable)"
                            );
                            return;
                        }
                        let mut r = self.requested.lock();
                        self.wake.wait_for(&mut r, OUT_OF_SPACE_RETRY_INTERVAL);
                        continue;
                    }
                    Err(e) => {
                        // A failed fsync leaves acknowledged data at risk: crash loudly
                        // rather than keep acknowledging writes (as mongod does on a
                        // journal error).
                        tracing::error!("fsync of the write-ahead log failed: {e}; aborting");
                        std::process::abort();
                    }
                }
                if self.failing.swap(false, Ordering::SeqCst) {
                    tracing::info!("the write-ahead log is written again (disk space freed)");
                }
                // Counted before anyone is woken, so a client acknowledged by this fsync
                // finds its commit's wait in serverStatus (the figure ends at `ended`).
                self.record_commit_waits(was_synced, target, ended);
                // The durable time before the sequence: a writer woken by the sequence
                // acknowledges, and its client may open a change stream at once; that
                // stream must already find the write's event durable.
                self.durable_ts_tx.send_if_modified(|d| {
                    // `ts` is the newest committed time, which only grows.
                    assert!(
                        ts >= *d,
                        "the durable oplog time would go backwards: {ts} after {}",
                        *d
                    );
                    let newer = ts > *d;
                    if newer {
                        *d = ts;
                    }
                    newer
                });
                self.synced_tx.send_modify(|s| s.seq = target);
            }
            if self.stop.load(Ordering::SeqCst) && self.synced() >= self.last_committed() {
                return;
            }
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cluster time whose sortable integer is `v`.
    fn t(v: u64) -> ClusterTime {
        ClusterTime::from_u64(v)
    }

    #[test]
    fn each_commit_is_timed_once_up_to_the_fsync_that_covered_it() {
        let d = Durability::new(ClusterTime::ZERO);
        for _ in 0..3 {
            d.committed(None);
        }
        std::thread::sleep(Duration::from_millis(2));
        d.record_commit_waits(0, 2, std::time::Instant::now());
        let (count, _, max, _) = d.commit_waits.snapshot();
        assert_eq!(count, 2);
        assert!(max >= 2_000, "waited at least the sleep: {max} µs");
        d.record_commit_waits(2, 3, std::time::Instant::now());
        assert_eq!(d.commit_waits.snapshot().0, 3);
        // Commits whose slot a newer commit took are not timed (nor mistimed).
        for _ in 0..COMMIT_TIMES + 10 {
            d.committed(None);
        }
        let last = d.last_committed();
        d.record_commit_waits(3, last, std::time::Instant::now());
        assert_eq!(d.commit_waits.snapshot().0, 3 + COMMIT_TIMES as u64);
    }

    #[test]
    fn commits_count_up_and_keep_the_newest_time() {
        let d = Durability::new(t(10));
        assert_eq!(d.committed(Some(t(11))), 1);
        assert_eq!(d.committed(None), 2, "a commit without oplog entries");
        assert_eq!(d.committed(Some(t(15))), 3);
        assert_eq!(d.last_committed(), 3);
        assert_eq!(d.committed_ts.load(Ordering::SeqCst), t(15));
        assert_eq!(d.durable_ts(), t(10), "nothing synced yet");
        d.request(3);
    }

    #[test]
    #[should_panic(expected = "oplog times go backwards")]
    fn a_commit_older_than_the_last_is_refused() {
        let d = Durability::new(ClusterTime::ZERO);
        d.committed(Some(t(7)));
        d.committed(Some(t(7)));
    }

    #[test]
    #[should_panic(expected = "past the last commit")]
    fn a_sync_for_a_commit_that_did_not_happen_is_refused() {
        let d = Durability::new(ClusterTime::ZERO);
        d.committed(None);
        d.request(2);
    }

    /// An fsync a writer asks for while an I/O worker is busy waits for that worker to
    /// run out of work: a commit the worker makes meanwhile is covered by the same fsync.
    #[test]
    fn an_asked_fsync_waits_for_the_busy_workers_and_covers_their_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::open(dir.path(), &tailstream_storage::StoreOptions::default()).unwrap(),
        );
        let workers: &'static IoWorkers = Box::leak(Box::new(IoWorkers::new()));
        // Long enough that only the worker's park can end the wait.
        let d = Durability::with_workers(t(1), workers, Duration::from_secs(600));
        let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
        let (commit_tx, commit_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                workers.unparked();
                busy_tx.send(()).unwrap();
                commit_rx.recv().unwrap();
                d.committed(Some(t(3)));
                done_rx.recv().unwrap();
                workers.parking();
            })
        };
        // The worker counts as busy before anyone asks for an fsync.
        busy_rx.recv().unwrap();
        let first = d.committed(Some(t(2)));
        let waiter = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || d.wait_synced_blocking(first))
        };
        // The group-commit thread starts once the fsync is asked for, so its first look
        // finds the request (never its idle timer's periodic sync, which does not wait).
        while *d.requested.lock() < first {
            std::thread::yield_now();
        }
        let syncer = d.spawn_syncer(Arc::clone(&store));
        // The worker is busy: the asked-for fsync has not started, whatever the delay.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(d.synced(), 0, "no fsync while the worker is busy");
        commit_tx.send(()).unwrap();
        while d.last_committed() < 2 {
            std::thread::yield_now();
        }
        done_tx.send(()).unwrap();
        waiter.join().unwrap().unwrap();
        assert_eq!(d.synced(), 2, "one fsync covered the worker's commit too");
        assert_eq!(d.syncs.snapshot().0, 1);
        assert_eq!(d.durable_ts(), t(3));
        assert_eq!(d.gather_timeouts.load(Ordering::Relaxed), 0);
        worker.join().unwrap();
        d.stop();
        syncer.join().unwrap();
    }

    /// The group-commit thread makes every commit durable, and the durable oplog time
    /// follows the newest commit's.
    #[test]
    fn the_syncer_covers_every_commit_and_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::open(dir.path(), &tailstream_storage::StoreOptions::default()).unwrap(),
        );
        let d = Durability::new(t(4));
        let syncer = d.spawn_syncer(Arc::clone(&store));
        let mut durable = Vec::new();
        for ts in [5, 9, 12] {
            let seq = d.committed(Some(t(ts)));
            d.wait_synced_blocking(seq).unwrap();
            assert!(d.synced() >= seq && d.synced() <= d.last_committed());
            durable.push(d.durable_ts());
        }
        assert_eq!(durable, [5, 9, 12].map(t));
        d.stop();
        syncer.join().unwrap();
    }

    #[test]
    fn sync_histogram_buckets_cover_every_duration_once() {
        for micros in [
            0u64,
            9,
            10,
            9_999,
            10_000,
            10_999,
            11_000,
            999_999,
            1_000_000,
            u64::MAX / 2,
        ] {
            let b = MicrosHistogram::bucket(micros);
            assert!(
                micros < MicrosHistogram::upper_bound(b),
                "{micros} below its bucket's bound"
            );
            if b > 0 {
                assert!(
                    micros >= MicrosHistogram::upper_bound(b - 1),
                    "{micros} above the previous bound"
                );
            }
        }
        let h = MicrosHistogram::new();
        h.record(Duration::from_micros(250));
        h.record(Duration::from_micros(255));
        h.record(Duration::from_millis(12));
        let (count, total, max, buckets) = h.snapshot();
        assert_eq!((count, total, max), (3, 12_505, 12_000));
        assert_eq!(buckets, vec![(260, 2), (13_000, 1)]);
    }
}

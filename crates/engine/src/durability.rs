//! Group commit. Every committed batch gets a sequence number; a writer that needs
//! durability (`j: true`, `w: "majority"`) waits until the synced sequence reaches
//! its own. One thread performs the fsyncs: while one runs, new commits pile up and
//! the next fsync covers them all, so concurrent durable writers share syncs.
//! Without any request, the thread still syncs within `IDLE_SYNC_INTERVAL`.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailstream_storage::Store;
use tokio::sync::watch;

/// Plain (non-`j`) writes reach the disk at most this long after they commit.
pub const IDLE_SYNC_INTERVAL: Duration = Duration::from_millis(100);

pub struct Durability {
    committed: AtomicU64,
    /// Newest oplog time committed (sortable u64), stored before `committed` advances,
    /// so an fsync that starts after reading it covers that entry.
    committed_ts: AtomicU64,
    /// Newest oplog time known to be on disk: change streams show nothing newer.
    durable_ts_tx: watch::Sender<u64>,
    requested: Mutex<u64>,
    wake: Condvar,
    synced_tx: watch::Sender<u64>,
    synced_rx: watch::Receiver<u64>,
    stop: std::sync::atomic::AtomicBool,
}

impl Durability {
    /// `last_ts`: the newest oplog time already in the store (durable after recovery).
    pub fn new(last_ts: u64) -> Arc<Durability> {
        let (synced_tx, synced_rx) = watch::channel(0u64);
        Arc::new(Durability {
            committed: AtomicU64::new(0),
            committed_ts: AtomicU64::new(last_ts),
            durable_ts_tx: watch::channel(last_ts).0,
            requested: Mutex::new(0),
            wake: Condvar::new(),
            synced_tx,
            synced_rx,
            stop: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Called by the writer after each commit (with the commit's newest oplog time, if it
    /// wrote any); returns the commit's sequence number.
    pub fn committed(&self, last_ts: Option<u64>) -> u64 {
        if let Some(ts) = last_ts {
            self.committed_ts.fetch_max(ts, Ordering::SeqCst);
        }
        self.committed.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The newest oplog time that is on disk.
    pub fn durable_ts(&self) -> u64 {
        *self.durable_ts_tx.borrow()
    }

    /// A receiver that sees the durable oplog time advance (change streams wait on it).
    pub fn subscribe_durable_ts(&self) -> watch::Receiver<u64> {
        self.durable_ts_tx.subscribe()
    }

    /// Asks for an fsync covering `seq` soon, without waiting for it.
    pub fn request(&self, seq: u64) {
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
        *self.synced_rx.borrow()
    }

    /// A receiver that sees the synced sequence number advance.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.synced_rx.clone()
    }

    /// Waits until everything up to `seq` is on disk.
    pub async fn wait_synced(&self, seq: u64) {
        if self.synced() >= seq {
            return;
        }
        {
            let mut r = self.requested.lock();
            if *r < seq {
                *r = seq;
            }
            self.wake.notify_one();
        }
        let mut rx = self.synced_rx.clone();
        // The sender lives as long as self; an error means shutdown, when waiting is moot.
        let _ = rx.wait_for(|s| *s >= seq).await;
    }

    /// Blocking variant for non-async callers (tests, shutdown).
    pub fn wait_synced_blocking(&self, seq: u64) {
        let mut rx = self.synced_rx.clone();
        {
            let mut r = self.requested.lock();
            if *r < seq {
                *r = seq;
            }
            self.wake.notify_one();
        }
        while *rx.borrow_and_update() < seq {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Runs the sync loop on its own thread until `stop` is called.
    pub fn spawn_syncer(self: &Arc<Self>, store: Arc<Store>) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("group-commit".into())
            .spawn(move || me.run(&store))
            .expect("spawn group-commit thread")
    }

    fn run(&self, store: &Store) {
        loop {
            {
                let mut r = self.requested.lock();
                if *r <= self.synced() && !self.stop.load(Ordering::SeqCst) {
                    self.wake.wait_for(&mut r, IDLE_SYNC_INTERVAL);
                }
            }
            // Read the oplog time before the sequence: both were stored before the fsync
            // below starts, so it covers them (the time may lag the sequence, never lead).
            let ts = self.committed_ts.load(Ordering::SeqCst);
            let target = self.last_committed();
            if target > self.synced() {
                if let Err(e) = store.sync() {
                    // A failed fsync leaves acknowledged data at risk: crash loudly rather
                    // than keep acknowledging writes (as mongod does on a journal error).
                    tracing::error!("fsync of the write-ahead log failed: {e}; aborting");
                    std::process::abort();
                }
                let _ = self.synced_tx.send(target);
                self.durable_ts_tx.send_if_modified(|d| {
                    let newer = ts > *d;
                    if newer {
                        *d = ts;
                    }
                    newer
                });
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

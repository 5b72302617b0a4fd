//! Which of the server's I/O worker threads are running tasks now, so the group commit
//! can start its fsync when they have run out of work instead of in the middle of it.
//!
//! Redis answers every command that arrived together with one pass of its event loop
//! and one fsync. A thread-per-fsync group commit that syncs as soon as one writer asks
//! covers only the commits made before that moment: the requests a worker is about to
//! run (already read, or readable on their sockets) commit microseconds later and wait
//! a whole further fsync. Measured on the bus benchmark (2 cores, 32 durable inserts in
//! flight): 8 commits per fsync, the fsyncs' kernel work a quarter of the server's CPU.
//! Waiting until no worker is busy makes one fsync cover what the workers had in hand.
//!
//! The runtime tells this module when a worker parks (no task left) and unparks
//! (`on_thread_park` / `on_thread_unpark`, see the server's `main`). Only those threads
//! count: a thread that never reported (the blocking pool, tests, tools) is not busy,
//! so without a runtime reporting, [`IoWorkers::wait_idle`] returns at once.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// The process's I/O workers (the tokio runtime's hooks are process-wide).
pub static IO_WORKERS: IoWorkers = IoWorkers::new();

thread_local! {
    /// Whether this thread is counted in `busy`: it unparked and has not parked since.
    static COUNTED_BUSY: Cell<bool> = const { Cell::new(false) };
}

pub struct IoWorkers {
    /// Worker threads between an unpark and their next park.
    busy: AtomicUsize,
    /// Parks of busy workers so far: a waiter can ask for one after a moment it knows.
    parks: AtomicU64,
    /// A waiter in [`IoWorkers::wait_idle`] wants to hear the count reach zero.
    waiting: AtomicBool,
    lock: Mutex<()>,
    idle: Condvar,
}

impl IoWorkers {
    pub const fn new() -> IoWorkers {
        IoWorkers {
            busy: AtomicUsize::new(0),
            parks: AtomicU64::new(0),
            waiting: AtomicBool::new(false),
            lock: parking_lot::const_mutex(()),
            idle: Condvar::new(),
        }
    }

    /// A thread of the runtime starts (tokio's `on_thread_start`: I/O workers and the
    /// blocking pool): it will read and write the store.
    pub fn thread_started(&self) {
        tailstream_storage::stop_perf_counters_on_this_thread();
    }

    /// The calling worker thread starts running tasks.
    pub fn unparked(&self) {
        COUNTED_BUSY.with(|counted| {
            if !counted.replace(true) {
                self.busy.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    /// The calling worker thread has no task left and goes to sleep.
    pub fn parking(&self) {
        COUNTED_BUSY.with(|counted| {
            if !counted.replace(false) {
                // Its first park (it ran from its start uncounted), or a repeat.
                return;
            }
            self.parks.fetch_add(1, Ordering::SeqCst);
            let before = self.busy.fetch_sub(1, Ordering::SeqCst);
            assert!(before > 0, "a worker parked while none was counted busy");
            if before == 1 && self.waiting.load(Ordering::SeqCst) {
                // Taken so the notification cannot fall between the waiter's check
                // of `busy` and its sleep.
                let _guard = self.lock.lock();
                self.idle.notify_all();
            }
        });
    }

    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// How many times a busy worker has parked so far (for [`IoWorkers::wait_idle`]).
    pub fn parks(&self) -> u64 {
        self.parks.load(Ordering::SeqCst)
    }

    /// No worker is running tasks, and one has parked since `parks_before` was read
    /// (the workers have been through the tasks woken after that moment).
    fn idle_since(&self, parks_before: u64) -> bool {
        self.busy() == 0 && self.parks() > parks_before
    }

    /// Waits until no worker is running tasks and one has parked since `parks_before`
    /// (a value of [`IoWorkers::parks`]; `None`: any idle moment will do), or until
    /// `deadline`. Returns whether that happened before the deadline.
    pub fn wait_idle(&self, parks_before: Option<u64>, deadline: Instant) -> bool {
        let parks_before = match parks_before {
            Some(p) => p,
            None if self.busy() == 0 => return true,
            None => self.parks(),
        };
        if self.idle_since(parks_before) {
            return true;
        }
        let mut guard = self.lock.lock();
        // Set before the check under the lock: a worker parking after the check sees
        // it and notifies once this thread sleeps (the lock orders the two).
        self.waiting.store(true, Ordering::SeqCst);
        let mut idle = true;
        while !self.idle_since(parks_before) {
            if self.idle.wait_until(&mut guard, deadline).timed_out() {
                idle = false;
                break;
            }
        }
        self.waiting.store(false, Ordering::SeqCst);
        idle
    }
}

impl Default for IoWorkers {
    fn default() -> Self {
        IoWorkers::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn only_threads_that_unparked_count_as_busy() {
        let w = IoWorkers::new();
        w.parking(); // a worker's first park: it was never counted
        assert_eq!(w.busy(), 0);
        w.unparked();
        w.unparked(); // counted once per thread
        assert_eq!(w.busy(), 1);
        w.parking();
        assert_eq!(w.busy(), 0);
        assert!(
            w.wait_idle(None, Instant::now()),
            "nobody busy: idle at once"
        );
        let parks = w.parks();
        assert!(!w.wait_idle(Some(parks), Instant::now()), "no park since");
        w.unparked();
        w.parking();
        assert!(w.wait_idle(Some(parks), Instant::now()), "parked since");
    }

    #[test]
    fn a_waiter_hears_the_last_busy_worker_park() {
        let w = Arc::new(IoWorkers::new());
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (park_tx, park_rx) = std::sync::mpsc::channel::<()>();
        let worker = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                w.unparked();
                started_tx.send(()).unwrap();
                park_rx.recv().unwrap();
                w.parking();
            })
        };
        started_rx.recv().unwrap();
        assert!(
            !w.wait_idle(None, Instant::now() + Duration::from_millis(5)),
            "still busy"
        );
        let waiter = {
            let w = Arc::clone(&w);
            std::thread::spawn(move || w.wait_idle(None, Instant::now() + Duration::from_secs(60)))
        };
        park_tx.send(()).unwrap();
        assert!(
            waiter.join().unwrap(),
            "woken by the park, not by the deadline"
        );
        worker.join().unwrap();
        assert_eq!(w.busy(), 0);
    }
}

//! `fsync` with `lock: true` (`db.fsyncLock()`): writes stop, everything is on disk
//! and the data files stay unchanged until `fsyncUnlock`, so they can be copied.
//!
//! Write commands pass a gate ([`FsyncLock::enter_write`]) before they run: while the
//! lock is held they wait there (asynchronously: the connection thread stays free for
//! the `fsyncUnlock` that ends it). Taking the lock closes the gate, then waits for the
//! writes already past it. The count and the writes in flight are both sequentially
//! consistent atomics, so a write and a lock racing see at least one another: either
//! the write sees the lock and waits, or the lock sees the write and waits for it.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use tailstream_query::error::Result;
use tokio::sync::watch;

pub struct FsyncLock {
    /// How many times the lock is held (mongod's `lockCount`; locks nest).
    count: AtomicU32,
    /// Write commands past the gate and not finished.
    in_flight: AtomicUsize,
    /// Serializes lock and unlock against each other.
    transition: Mutex<()>,
    /// Signalled when the last write in flight finishes while the lock is wanted.
    drained: Condvar,
    drained_lock: Mutex<()>,
    /// The count, for writers waiting at the gate to wake when it reaches zero.
    released: watch::Sender<u32>,
}

/// A write command's permission to run; the write counts as in flight until dropped.
pub struct WritePass {
    gate: Arc<FsyncLock>,
}

impl Drop for WritePass {
    fn drop(&mut self) {
        if self.gate.in_flight.fetch_sub(1, Ordering::SeqCst) == 1
            && self.gate.count.load(Ordering::SeqCst) > 0
        {
            let _guard = self.gate.drained_lock.lock();
            self.gate.drained.notify_all();
        }
    }
}

impl Default for FsyncLock {
    fn default() -> Self {
        FsyncLock {
            count: AtomicU32::new(0),
            in_flight: AtomicUsize::new(0),
            transition: Mutex::new(()),
            drained: Condvar::new(),
            drained_lock: Mutex::new(()),
            released: watch::channel(0).0,
        }
    }
}

impl FsyncLock {
    pub fn is_locked(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Waits while the lock is held, then lets one write command through.
    pub async fn enter_write(self: &Arc<Self>) -> WritePass {
        loop {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let pass = WritePass { gate: self.clone() };
            if self.count.load(Ordering::SeqCst) == 0 {
                return pass;
            }
            // Locked: step back out (waking a lock waiting for us) and wait. `wait_for`
            // looks at the current count first, so an unlock in between is not missed.
            let mut released = self.released.subscribe();
            drop(pass);
            let _ = released.wait_for(|c| *c == 0).await;
        }
    }

    /// A pass for a background write (TTL deletes, oplog trimming) that skips its
    /// round instead of waiting: None while the lock is held.
    pub fn try_enter_write(self: &Arc<Self>) -> Option<WritePass> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let pass = WritePass { gate: self.clone() };
        (self.count.load(Ordering::SeqCst) == 0).then_some(pass)
    }

    /// Takes the lock (once more, if held): new writes wait, and this returns once the
    /// writes already running have finished, with the new lock count. The first lock
    /// runs `on_first` then (a failure undoes the lock). Blocking.
    pub fn lock(&self, on_first: impl FnOnce() -> Result<()>) -> Result<u32> {
        let _t = self.transition.lock();
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        self.released.send_replace(n);
        {
            let mut guard = self.drained_lock.lock();
            while self.in_flight.load(Ordering::SeqCst) > 0 {
                // The timeout only guards against a missed wake-up; the drop notifies.
                self.drained
                    .wait_for(&mut guard, std::time::Duration::from_millis(10));
            }
        }
        if n == 1 {
            if let Err(e) = on_first() {
                self.count.store(0, Ordering::SeqCst);
                self.released.send_replace(0);
                return Err(e);
            }
        }
        Ok(n)
    }

    /// Releases the lock once: the new count, or None when it was not held. The last
    /// unlock runs `on_last` before writes resume.
    pub fn unlock(&self, on_last: impl FnOnce()) -> Option<u32> {
        let _t = self.transition.lock();
        let n = self.count.load(Ordering::SeqCst);
        if n == 0 {
            return None;
        }
        if n == 1 {
            on_last();
        }
        self.count.store(n - 1, Ordering::SeqCst);
        self.released.send_replace(n - 1);
        Some(n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_wait_while_locked_and_the_lock_waits_for_writes() {
        let gate = Arc::new(FsyncLock::default());
        let pass = gate.enter_write().await;
        // The lock waits for the write in flight.
        let g = gate.clone();
        let locker = std::thread::spawn(move || g.lock(|| Ok(())).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!locker.is_finished(), "lock taken with a write in flight");
        drop(pass);
        assert_eq!(locker.join().unwrap(), 1);
        // A new write waits until the unlock.
        let g = gate.clone();
        let waiting = tokio::spawn(async move {
            let _pass = g.enter_write().await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "write ran while locked");
        assert_eq!(
            gate.lock(|| panic!("not the first lock")).unwrap(),
            2,
            "locks nest"
        );
        assert_eq!(gate.unlock(|| panic!("not the last unlock")), Some(1));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "write ran while still locked once");
        let mut resumed = false;
        assert_eq!(gate.unlock(|| resumed = true), Some(0));
        assert!(resumed);
        waiting.await.unwrap();
        assert_eq!(gate.unlock(|| panic!("not locked")), None);
        // Background writers skip their round while locked.
        assert!(gate.try_enter_write().is_some());
        gate.lock(|| Ok(())).unwrap();
        assert!(gate.try_enter_write().is_none());
        gate.unlock(|| {});
    }
}

//! The writer lock (the sequencer every commit holds), and whether its holder said its
//! write is short.
//!
//! A connection thread runs a small write in place only when it will not wait long for
//! this lock: a large write on the blocking pool (an `updateMany`, a big insert) may
//! hold it for seconds, and a connection thread waiting behind it stalls every
//! connection it serves. So a small write that finds the lock held goes to the
//! blocking pool, which costs a hand-off to a pool thread and back (futex wake-ups and
//! context switches). With several connection threads (`--ioThreads`) the holder is
//! usually another connection thread's small write, done in microseconds: waiting for
//! it in place is cheaper than the hand-off. Measured on 2 cores, two connection
//! threads, the bus's durable 1→1 row: 1,185 of 4,828 futex calls were the blocking
//! pool's (bench/history/2026-11-29-bus-io-threads.md).
//!
//! A long write waiting for the lock counts as holding it long: the lock's waiters are
//! served about in turn, so a small write queued behind it would wait for it too.
//!
//! Ordering: the holder's word is stored right after the lock is taken, so a reader
//! can see a stale word for the moment between another holder's acquisition and its
//! store: [`WriterLock::held_long`] is a hint, as the lock's state itself is (it may be
//! taken the moment after the check either way).

use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

thread_local! {
    /// This thread runs a write it declared short (see [`short_writes`]).
    static SHORT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every writer lock it takes declared short: `f` is a small write on a
/// connection thread (bounded documents and bytes, no waits inside).
pub fn short_writes<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SHORT.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(SHORT.with(|s| s.replace(true)));
    f()
}

pub(crate) struct WriterLock<W> {
    lock: Mutex<W>,
    /// The holder declared its write short (stored by each holder after taking it).
    short: AtomicBool,
    /// Writes not declared short waiting to take the lock.
    long_waiting: AtomicUsize,
}

impl<W> WriterLock<W> {
    pub(crate) fn new(w: W) -> WriterLock<W> {
        WriterLock {
            lock: Mutex::new(w),
            short: AtomicBool::new(false),
            long_waiting: AtomicUsize::new(0),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, W> {
        let short = SHORT.with(Cell::get);
        if short {
            let guard = self.lock.lock();
            self.short.store(true, Ordering::Relaxed);
            return guard;
        }
        self.long_waiting.fetch_add(1, Ordering::Relaxed);
        let guard = self.lock.lock();
        self.short.store(false, Ordering::Relaxed);
        let before = self.long_waiting.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "a long writer left the lock's queue twice");
        guard
    }

    /// Held now by a write that did not declare itself short, or held with such a write
    /// waiting for it (a hint).
    pub(crate) fn held_long(&self) -> bool {
        self.lock.is_locked()
            && (!self.short.load(Ordering::Relaxed)
                || self.long_waiting.load(Ordering::Relaxed) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_long_unless_it_declared_its_write_short() {
        let w = WriterLock::new(());
        assert!(!w.held_long(), "free");
        {
            let _g = w.lock();
            assert!(w.held_long());
        }
        short_writes(|| {
            let _g = w.lock();
            assert!(!w.held_long(), "a short holder");
        });
        // The declaration ends with its scope, even nested.
        short_writes(|| short_writes(|| ()));
        let _g = w.lock();
        assert!(w.held_long());
    }

    #[test]
    fn a_short_holder_on_another_thread_is_seen() {
        let w = std::sync::Arc::new(WriterLock::new(()));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let w = w.clone();
            std::thread::spawn(move || {
                short_writes(|| {
                    let _g = w.lock();
                    held_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                })
            })
        };
        held_rx.recv().unwrap();
        assert!(!w.held_long());
        // A long write queueing behind the short one makes the lock long-held.
        let long = {
            let w = w.clone();
            std::thread::spawn(move || drop(w.lock()))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !w.held_long() {
            assert!(
                std::time::Instant::now() < deadline,
                "the long waiter never counted"
            );
            std::thread::yield_now();
        }
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        long.join().unwrap();
        assert!(!w.held_long(), "free again");
        assert_eq!(w.long_waiting.load(Ordering::Relaxed), 0);
    }
}

//! The connection threads (`--ioThreads`): each is a tokio runtime of its own with one
//! worker, and a connection is served on one of them for its whole life (the one with
//! the fewest connections when it arrives).
//!
//! Why not one runtime with several workers: its workers steal each other's tasks, a
//! woken task is often handed to a parked sibling (a futex wake and a context switch),
//! and tasks migrate between CPUs. Measured on the 16-core device, server on 4 cores,
//! durable bus row: one worker 3.64 s of server CPU per 100,000 messages, two workers
//! of one runtime 9.51 s, at equal throughput (bench/history/2026-11-27-device-iothreads.md).
//! Runtimes of one worker each share nothing but the server's state: a connection's
//! tasks, its waits and its wake-ups stay on its own thread, as with one thread, and
//! the threads meet only where the engine serialises (the writer lock) or wakes
//! another connection (a commit waking a tailing getMore elsewhere).
//!
//! The first thread is the main runtime's worker (the accept loops, timers and
//! background tasks run there too); each further one is a runtime built here, kept
//! for the process's life. Every worker reports its parks to the group commit
//! (`tailstream_engine::core::workers`), which waits for all of them to run out of
//! work before an fsync. Each runtime is multi-threaded (of one worker), not a
//! current-thread runtime: replication's state machine calls `block_in_place`, which
//! only a multi-threaded runtime allows.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::runtime::{Builder, Handle, Runtime};

/// The most connection threads `--ioThreads` may ask for (its parser's bound).
pub const MAX_IO_THREADS: usize = 1024;

/// Stack size of every runtime thread: deep BSON documents and pipelines recurse.
const THREAD_STACK_BYTES: usize = 8 << 20;

/// The connection threads of this process, once `start` has run.
static THREADS: OnceLock<IoThreads> = OnceLock::new();

struct IoThreads {
    shards: Vec<Shard>,
    /// The runtimes built here (all but the main one), kept alive.
    _runtimes: Vec<Runtime>,
}

struct Shard {
    handle: Handle,
    /// Connections served on this thread now.
    connections: Arc<AtomicUsize>,
}

/// A runtime builder with one worker and the hooks every connection thread needs.
pub fn runtime_builder(thread_name: &'static str) -> Builder {
    let mut b = Builder::new_multi_thread();
    b.worker_threads(1)
        .enable_all()
        .thread_name(thread_name)
        // The group commit starts an fsync once the workers have run out of work, so
        // it covers the requests they had in hand (engine `core::workers`).
        .on_thread_start(|| tailstream_engine::core::workers::IO_WORKERS.thread_started())
        .on_thread_park(|| tailstream_engine::core::workers::IO_WORKERS.parking())
        .on_thread_unpark(|| tailstream_engine::core::workers::IO_WORKERS.unparked())
        .thread_stack_size(THREAD_STACK_BYTES);
    b
}

/// Sets up `count` connection threads: the main runtime's (`main`) and `count - 1`
/// runtimes more. Called once, before the server accepts a connection.
pub fn start(main: Handle, count: usize) -> std::io::Result<()> {
    let threads = IoThreads::build(main, count)?;
    assert!(
        THREADS.set(threads).is_ok(),
        "connection threads started twice"
    );
    Ok(())
}

/// Serves a new connection (`serve`, its whole task) on the connection thread with the
/// fewest connections; without `start` (an embedded server, a test), on the calling
/// runtime.
pub fn spawn_connection<F>(serve: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    match THREADS.get() {
        Some(threads) => threads.spawn(serve),
        None => {
            tokio::spawn(serve);
        }
    }
}

impl IoThreads {
    fn build(main: Handle, count: usize) -> std::io::Result<IoThreads> {
        assert!(
            (1..=MAX_IO_THREADS).contains(&count),
            "ioThreads out of range: {count}"
        );
        let mut runtimes = Vec::with_capacity(count - 1);
        for _ in 1..count {
            runtimes.push(runtime_builder("tailstream-conn").build()?);
        }
        let shards = std::iter::once(main)
            .chain(runtimes.iter().map(|r| r.handle().clone()))
            .map(|handle| Shard {
                handle,
                connections: Arc::default(),
            })
            .collect();
        Ok(IoThreads {
            shards,
            _runtimes: runtimes,
        })
    }

    fn spawn<F>(&self, serve: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let shard = self
            .shards
            .iter()
            .min_by_key(|s| s.connections.load(Ordering::Relaxed))
            .expect("at least one connection thread");
        let count = Counted::new(shard.connections.clone());
        shard.handle.spawn(async move {
            let _count = count;
            serve.await
        });
    }

    #[cfg(test)]
    fn counts(&self) -> Vec<usize> {
        self.shards
            .iter()
            .map(|s| s.connections.load(Ordering::Relaxed))
            .collect()
    }
}

/// One connection counted on its thread until the task ends (or is dropped unrun).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(connections: Arc<AtomicUsize>) -> Counted {
        connections.fetch_add(1, Ordering::Relaxed);
        Counted(connections)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "a connection thread's count went below zero");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_follows_its_connection_task() {
        let n = Arc::new(AtomicUsize::new(0));
        let a = Counted::new(n.clone());
        let b = Counted::new(n.clone());
        assert_eq!(n.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!(n.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(n.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn connections_spread_over_the_threads_and_stay_on_one() {
        let main = runtime_builder("test-main").build().unwrap();
        let threads = IoThreads::build(main.handle().clone(), 3).unwrap();
        let (ran_tx, ran_rx) = std::sync::mpsc::channel();
        let mut releases = Vec::new();
        for _ in 0..6 {
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            releases.push(release_tx);
            let ran_tx = ran_tx.clone();
            threads.spawn(async move {
                let before = std::thread::current().id();
                let _ = release_rx.await;
                // Still on the thread it started on after a wait (one worker each).
                ran_tx.send((before, std::thread::current().id())).unwrap();
            });
        }
        assert_eq!(threads.counts(), vec![2, 2, 2], "the fewest first");
        drop(releases);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..6 {
            let (before, after) = ran_rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap();
            assert_eq!(before, after);
            seen.insert(after);
        }
        assert_eq!(seen.len(), 3, "each runtime ran two on its own thread");
        // A count is dropped with its task, after the task's last send.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while threads.counts() != vec![0, 0, 0] {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                threads.counts()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

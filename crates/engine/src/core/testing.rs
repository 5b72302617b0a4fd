//! Engines for unit tests: a real [`Engine`] on a temporary directory, shut down and
//! removed when dropped, so a test of any layer can write, read and stream as the
//! server does.

use crate::core::keys;
use crate::core::time::ClusterTime;
use crate::{Engine, EngineOptions};
use std::sync::Arc;
use tailstream_storage::Space;

/// The oplog cap of [`TestEngine::open`]: large enough that no test's writes are trimmed.
const UNTRIMMED_OPLOG_BYTES: u64 = 1 << 30;

pub(crate) struct TestEngine {
    pub(crate) engine: Arc<Engine>,
    // Dropped after the engine (fields drop in order): the store is closed first.
    // None only inside [`TestEngine::reopen`].
    dir: Option<tempfile::TempDir>,
}

impl TestEngine {
    pub(crate) fn open() -> TestEngine {
        TestEngine::with_oplog_cap(UNTRIMMED_OPLOG_BYTES)
    }

    /// An engine whose oplog is trimmed past `bytes`.
    pub(crate) fn with_oplog_cap(bytes: u64) -> TestEngine {
        let dir = tempfile::tempdir().expect("a temporary directory");
        TestEngine::open_in(dir, bytes)
    }

    fn open_in(dir: tempfile::TempDir, oplog_bytes: u64) -> TestEngine {
        let engine = Engine::open(EngineOptions {
            dbpath: dir.path().to_path_buf(),
            oplog_size_bytes: oplog_bytes,
        })
        .expect("open an engine on its directory");
        TestEngine {
            engine,
            dir: Some(dir),
        }
    }

    /// The same data directory after a clean shutdown, opened again (as a restart).
    pub(crate) fn reopen(mut self) -> TestEngine {
        let dir = self.dir.take().expect("a test engine has its directory");
        let cap = self.engine.opts.oplog_size_bytes;
        self.engine.shutdown();
        let engine = Arc::clone(&self.engine);
        drop(self);
        assert_eq!(
            Arc::strong_count(&engine),
            1,
            "nothing else holds the engine: its store closes"
        );
        drop(engine);
        TestEngine::open_in(dir, cap)
    }

    /// An engine whose oplog is over its cap past `bytes` but never trimmed unless the
    /// test trims it (`oplog::trim::trim_oplog_round`): the maintenance thread skips its
    /// rounds while the fsync lock is held, as it does for `db.fsyncLock()`.
    pub(crate) fn trimmed_by_hand(bytes: u64) -> TestEngine {
        let e = TestEngine::with_oplog_cap(bytes);
        e.fsync_lock.lock(|| Ok(())).expect("take the fsync lock");
        e
    }

    /// Waits until every commit so far is on disk: change streams show only what is.
    pub(crate) fn sync(&self) {
        let seq = self.engine.durability.last_committed();
        self.engine
            .durability
            .wait_synced_blocking(seq)
            .expect("the fsync of a test engine");
    }
}

impl std::ops::Deref for TestEngine {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for TestEngine {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

/// The oplog entries stored from `from` on, as the store holds them: (time, bytes).
pub(crate) fn stored_oplog(e: &Engine, from: ClusterTime) -> Vec<(ClusterTime, usize)> {
    e.store
        .scan(Space::Oplog, &keys::oplog_key(from), None, false)
        .map(|item| {
            let (k, v) = item.expect("an oplog entry");
            let time = k[..8].try_into().expect("an oplog key is a time");
            (ClusterTime::from_be_bytes(time), v.len())
        })
        .collect()
}

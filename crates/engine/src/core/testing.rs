//! Engines for unit tests: a real [`Engine`] on a temporary directory, shut down and
//! removed when dropped, so a test of any layer can write, read and stream as the
//! server does.

use crate::{Engine, EngineOptions};
use std::sync::Arc;

/// The oplog cap of [`TestEngine::open`]: large enough that no test's writes are trimmed.
const UNTRIMMED_OPLOG_BYTES: u64 = 1 << 30;

pub(crate) struct TestEngine {
    pub(crate) engine: Arc<Engine>,
    // Dropped after the engine (fields drop in order): the store is closed first.
    _dir: tempfile::TempDir,
}

impl TestEngine {
    pub(crate) fn open() -> TestEngine {
        TestEngine::with_oplog_cap(UNTRIMMED_OPLOG_BYTES)
    }

    /// An engine whose oplog is trimmed past `bytes`.
    pub(crate) fn with_oplog_cap(bytes: u64) -> TestEngine {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let engine = Engine::open(EngineOptions {
            dbpath: dir.path().to_path_buf(),
            oplog_size_bytes: bytes,
        })
        .expect("open an engine on an empty directory");
        TestEngine { engine, _dir: dir }
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

//! openraft's own storage test suite (`openraft::testing::Suite`) against the
//! project's log store and state machine, each test on a fresh engine in a temporary
//! directory (issue 27).

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use std::sync::Arc;
use tailstream_engine::{Engine, EngineOptions};
use tailstream_replication::{LogStore, StateMachine, TypeConfig};

/// The oplog cap of the engines under test (nothing the suite writes comes near it).
const OPLOG_BYTES: u64 = 64 << 20;

struct Builder;

/// Shuts the test's engine down, then removes its directory.
struct Guard {
    engine: Arc<Engine>,
    _dir: tempfile::TempDir,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let engine = Engine::open(EngineOptions {
            dbpath: dir.path().to_path_buf(),
            oplog_size_bytes: OPLOG_BYTES,
        })
        .expect("an engine on an empty directory");
        let guard = Guard {
            engine: engine.clone(),
            _dir: dir,
        };
        Ok((
            guard,
            LogStore::new(engine.clone()),
            StateMachine::new(engine),
        ))
    }
}

#[test]
fn openraft_storage_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(Builder)
}

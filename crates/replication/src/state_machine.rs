//! openraft's `RaftStateMachine` over the engine.
//!
//! Applying entries: the writes of every commit among them and the applied marker
//! (the last entry's id and the membership in force) go to the engine in one atomic
//! batch (`Engine::repl_apply`), so the marker always names exactly what the store
//! holds. A snapshot is a held read view of the engine's state-machine spaces
//! (`Engine::repl_snapshot_view`, a RocksDB snapshot: its marker and its data are one
//! read, taken at once however large the store), written to a file in the member's
//! `repl-snapshots` folder only when a member behind the log asks for it, and sent from
//! there in openraft's chunks; the receiver writes the chunks to a file of its own and
//! installs it in pieces (`tailstream_engine::repl::snapshot`): a store of any size
//! crosses in bounded memory.

use crate::member::{Claim, Pending};
use crate::snapshot_file::SnapshotFile;
use crate::types::{
    any, decode, encode, Entry, LogId, NodeId, SnapshotMeta, StorageResult, StoredMembership,
    TypeConfig,
};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, ErrorSubject, ErrorVerb, RaftLogId, StorageIOError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tailstream_engine::repl::snapshot::SnapshotView;
use tailstream_engine::repl::Ops;
use tailstream_engine::Engine;

/// The applied marker, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Applied {
    last: Option<LogId>,
    membership: StoredMembership,
}

/// A built or installed snapshot: its metadata, the state machine's view it names,
/// and the file the view was written to once a member asked for it.
#[derive(Clone)]
struct Current {
    meta: SnapshotMeta,
    view: Arc<SnapshotView>,
    file: Arc<Mutex<Option<PathBuf>>>,
}

impl Current {
    fn new(meta: SnapshotMeta, view: SnapshotView) -> Current {
        Current {
            meta,
            view: Arc::new(view),
            file: Default::default(),
        }
    }
}

/// Runs `f`, which waits for the engine's writer lock, without holding up the runtime's
/// other tasks: a proposal holds that lock while it waits for openraft, whose tasks
/// must go on meanwhile (with one worker thread, a blocked apply stopped the member
/// whole). On a multi-threaded runtime the worker hands its tasks to another thread
/// first (`block_in_place`); elsewhere (a test's current-thread runtime) it just runs.
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
    if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// How often a paused application looks whether it may go on.
const APPLY_PAUSE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// The state machine of one member (cheap to clone: every clone is the same one).
#[derive(Clone)]
pub struct StateMachine {
    engine: Arc<Engine>,
    /// This member's commits waiting for their entries (none: it proposes nothing).
    pending: Option<Arc<Pending>>,
    current: Arc<Mutex<Option<Current>>>,
    /// Numbers the snapshots this member builds (their ids must differ) and the files
    /// it receives.
    built: Arc<AtomicU64>,
    /// While set, entries wait before they are applied (mongod's `rsSyncApplyStop`
    /// fail point, a test command: the log still takes them, so commits go on).
    apply_paused: Arc<std::sync::atomic::AtomicBool>,
}

impl StateMachine {
    pub fn new(engine: Arc<Engine>) -> StateMachine {
        StateMachine {
            engine,
            pending: None,
            current: Arc::new(Mutex::new(None)),
            built: Arc::new(AtomicU64::new(0)),
            apply_paused: Default::default(),
        }
    }

    /// The switch that pauses application (see `apply_paused`).
    pub fn apply_pause_switch(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.apply_paused.clone()
    }

    /// The state machine of a member that proposes commits (see `member.rs`).
    pub fn proposing(engine: Arc<Engine>, pending: Arc<Pending>) -> StateMachine {
        StateMachine {
            pending: Some(pending),
            ..StateMachine::new(engine)
        }
    }

    fn applied(&self) -> StorageResult<Applied> {
        let bytes = self
            .engine
            .repl_applied()
            .map_err(|e| StorageIOError::read_state_machine(any(e)))?;
        match bytes {
            None => Ok(Applied::default()),
            Some(b) => decode(&b).map_err(|e| StorageIOError::read_state_machine(e).into()),
        }
    }

    /// Forgets this member's outstanding pipelined commits, in the proposer's waiting
    /// list and in the engine (`Engine::repl_pipeline_reset`).
    fn forget_pipelined(&self) -> tailstream_engine::query::error::Result<()> {
        match self.pending.as_ref() {
            Some(p) => {
                p.forget_pipelined();
                off_the_runtime(|| self.engine.repl_pipeline_reset())
            }
            None => Ok(()),
        }
    }

    fn current(&self) -> Option<Current> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Makes `current` the snapshot this member sends; the file of the one it
    /// replaces is deleted (a send still reading it keeps its open handle).
    fn set_current(&self, current: Current) {
        let old = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(current);
        if let Some(path) =
            old.and_then(|c| c.file.lock().unwrap_or_else(|e| e.into_inner()).take())
        {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The file `current` was written to, written now if it was not yet.
    fn current_file(&self, current: &Current) -> StorageResult<PathBuf> {
        let signature = Some(current.meta.signature());
        let mut file = current.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = file.as_ref().filter(|p| p.exists()) {
            return Ok(path.clone());
        }
        let id: String = current
            .meta
            .snapshot_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self
            .engine
            .repl_snapshot_dir()
            .map_err(|e| StorageIOError::read_snapshot(signature.clone(), any(e)))?
            .join(format!("sending-{id}.snap"));
        let bytes = off_the_runtime(|| current.view.write_file(&path))
            .map_err(|e| StorageIOError::read_snapshot(signature, any(e)))?;
        tracing::info!(file = %path.display(), bytes, "snapshot written for a member behind the log");
        *file = Some(path.clone());
        Ok(path)
    }
}

fn snapshot_io(verb: ErrorVerb, e: std::io::Error) -> openraft::StorageError<NodeId> {
    openraft::StorageError::from_io_error(ErrorSubject::Snapshot(None), verb, e)
}

fn state_error(e: AnyError) -> openraft::StorageError<NodeId> {
    StorageIOError::write_state_machine(e).into()
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    /// Takes the view (openraft 0.9 runs this beside the applies: the marker and the
    /// data are one read of the store, so they agree whatever applies meanwhile). The
    /// bytes returned are empty: openraft keeps only the metadata of what this returns
    /// (`sm::worker`), and asks `get_current_snapshot` for the bytes when a member
    /// needs them.
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let view = self.engine.repl_snapshot_view();
        let applied = applied_in(&view)?;
        let n = self.built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match &applied.last {
            Some(id) => format!("{}-{}-{n}", id.leader_id, id.index),
            None => format!("none-{n}"),
        };
        let meta = SnapshotMeta {
            last_log_id: applied.last,
            last_membership: applied.membership,
            snapshot_id,
        };
        self.set_current(Current::new(meta.clone(), view));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapshotFile::none()),
        })
    }
}

/// The applied marker as of `view`.
fn applied_in(view: &SnapshotView) -> StorageResult<Applied> {
    match view
        .applied()
        .map_err(|e| StorageIOError::read_state_machine(any(e)))?
    {
        None => Ok(Applied::default()),
        Some(b) => decode(&b).map_err(|e| StorageIOError::read_state_machine(e).into()),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId>, StoredMembership)> {
        let applied = self.applied()?;
        Ok((applied.last, applied.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<()>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        while self.apply_paused.load(std::sync::atomic::Ordering::Acquire) {
            tokio::time::sleep(APPLY_PAUSE_POLL).await;
        }
        let mut applied = self.applied()?;
        let mut replies = Vec::new();
        // One entry at a time, each with its marker: a member's own commit is stored
        // without the engine's memory (its proposer, waiting, brings that along).
        for entry in entries {
            let id = *entry.get_log_id();
            if let Some(p) = self.pending.as_ref() {
                // This member's pipelined commits of an older term not applied by now
                // never will be: forgotten before this term's first entry applies.
                if p.pipelined_before(id.leader_id.term) {
                    self.forget_pipelined()
                        .map_err(|e| StorageIOError::apply(id, any(e)))?;
                }
            }
            let (ops, claim) = match entry.payload {
                EntryPayload::Blank => (Ops::new(), Claim::Others),
                EntryPayload::Normal(commit) => {
                    let ops = Ops::decode(commit.ops)
                        .map_err(|e| StorageIOError::apply(id, AnyError::new(&e)))?;
                    let claim = match self.pending.as_ref() {
                        Some(p) => p.claim(commit.origin),
                        None => Claim::Others,
                    };
                    (ops, claim)
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(id), m);
                    (Ops::new(), Claim::Others)
                }
            };
            applied.last = Some(id);
            let marker = encode(&applied).map_err(state_error)?;
            let result = off_the_runtime(|| match claim {
                Claim::Held => self.engine.repl_apply_own(&ops, &marker),
                Claim::Others => self.engine.repl_apply(&ops, &marker),
                Claim::Pipelined(finish, done) => {
                    let applied = self.engine.repl_apply_pipelined(&ops, &marker, finish);
                    let _ = done.send(applied.clone());
                    applied.map(|_| ())
                }
            });
            result.map_err(|e| StorageIOError::apply(id, any(e)))?;
            replies.push(());
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// A new file in the snapshot folder; the files of receives left unfinished (a
    /// leader gone mid-send) are deleted first (openraft receives one at a time).
    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<SnapshotFile>> {
        let dir = self
            .engine
            .repl_snapshot_dir()
            .map_err(|e| StorageIOError::write_snapshot(None, any(e)))?;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(RECEIVING) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let n = self.built.fetch_add(1, Ordering::Relaxed) + 1;
        let path = dir.join(format!("{RECEIVING}{n}.snap"));
        let file = SnapshotFile::create(&path)
            .await
            .map_err(|e| snapshot_io(ErrorVerb::Write, e))?;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotFile>,
    ) -> StorageResult<()> {
        let signature = Some(meta.signature());
        let Some(path) = snapshot.path().map(PathBuf::from) else {
            return Err(StorageIOError::read_snapshot(
                signature,
                AnyError::error("a snapshot without a file"),
            )
            .into());
        };
        // This member's pipelined commits not applied by now never will be: the set's
        // state replaces its own.
        self.forget_pipelined()
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), any(e)))?;
        // The snapshot's own marker, from its metadata (what openraft reads back).
        let applied = Applied {
            last: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        let marker = encode(&applied).map_err(state_error)?;
        off_the_runtime(|| self.engine.repl_snapshot_install(&path, &marker))
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), any(e)))?;
        // Closed only now: the install moved the file away, so nothing is deleted (on
        // an error above, the received file goes with it).
        drop(snapshot);
        // The store now holds exactly the snapshot: a view of it is the current one.
        self.set_current(Current::new(meta.clone(), self.engine.repl_snapshot_view()));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let Some(current) = self.current() else {
            return Ok(None);
        };
        let path = self.current_file(&current)?;
        let file = SnapshotFile::open(&path)
            .await
            .map_err(|e| snapshot_io(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot {
            meta: current.meta,
            snapshot: Box::new(file),
        }))
    }
}

/// How the names of received snapshot files begin.
const RECEIVING: &str = "receiving-";

//! openraft's `RaftLogStorage` over the engine's replicated log.
//!
//! Every change is synced by the engine before the call returns, so `append` reports
//! its entries flushed at once (a member acknowledges only what is on disk).
//! The engine's calls are short synchronous RocksDB operations; they run on the
//! calling task.

use crate::types::{any, decode, encode, Entry, LogId, NodeId, StorageResult, TypeConfig, Vote};
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, RaftLogId, StorageIOError};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tailstream_engine::repl::log::Marker;
use tailstream_engine::Engine;

/// The Raft log of one member (cheap to clone: every clone is the same log).
#[derive(Clone)]
pub struct LogStore {
    engine: Arc<Engine>,
    /// Bytes of entries appended since the member started (see `log_window`).
    appended: Arc<AtomicU64>,
}

impl LogStore {
    pub fn new(engine: Arc<Engine>) -> LogStore {
        LogStore {
            engine,
            appended: Default::default(),
        }
    }

    /// The count of bytes appended (shared with every clone).
    pub fn appended_bytes(&self) -> Arc<AtomicU64> {
        self.appended.clone()
    }

    fn marker<T: serde::de::DeserializeOwned>(&self, marker: Marker) -> StorageResult<Option<T>> {
        let bytes = self
            .engine
            .repl_log_marker(marker)
            .map_err(|e| StorageIOError::read_logs(any(e)))?;
        bytes
            .map(|b| decode(&b))
            .transpose()
            .map_err(|e| StorageIOError::read_logs(e).into())
    }

    fn set_marker<T: serde::Serialize>(
        &self,
        marker: Marker,
        value: &T,
        error: fn(AnyError) -> StorageIOError<NodeId>,
    ) -> StorageResult<()> {
        let bytes = encode(value).map_err(error)?;
        self.engine
            .repl_log_set_marker(marker, &bytes)
            .map_err(|e| error(any(e)).into())
    }

    fn last_entry_id(&self) -> StorageResult<Option<LogId>> {
        let last = self
            .engine
            .repl_log_last()
            .map_err(|e| StorageIOError::read_logs(any(e)))?;
        let Some((_, bytes)) = last else {
            return Ok(None);
        };
        let entry: Entry = decode(&bytes).map_err(StorageIOError::read_logs)?;
        Ok(Some(*entry.get_log_id()))
    }
}

/// `[from, to)` of a range of indexes.
fn bounds<RB: RangeBounds<u64>>(range: &RB) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(i) => i.saturating_add(1),
        Bound::Excluded(i) => *i,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let (mut from, to) = bounds(&range);
        let mut out = Vec::new();
        // The engine returns a bounded piece per read; the whole range is asked for.
        loop {
            let piece = self
                .engine
                .repl_log_read(from, to)
                .map_err(|e| StorageIOError::read_logs(any(e)))?;
            let Some(&(last, _)) = piece.last() else {
                break;
            };
            for (_, bytes) in &piece {
                out.push(decode(bytes).map_err(StorageIOError::read_logs)?);
            }
            match last.checked_add(1) {
                Some(next) if next < to => from = next,
                _ => break,
            }
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId> = self.marker(Marker::Purged)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> StorageResult<()> {
        self.set_marker(Marker::Vote, vote, StorageIOError::write_vote)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote>> {
        self.marker(Marker::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> StorageResult<()> {
        self.set_marker(Marker::Committed, &committed, StorageIOError::write_logs)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
        Ok(self.marker::<Option<LogId>>(Marker::Committed)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        for entry in entries {
            let bytes = encode(&entry).map_err(StorageIOError::write_logs)?;
            encoded.push((entry.get_log_id().index, bytes));
        }
        let bytes: usize = encoded.iter().map(|(_, b)| b.len()).sum();
        let result = self.engine.repl_log_append(&encoded);
        if result.is_ok() {
            self.appended.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        // On disk (the engine synced) before the callback says so.
        callback.log_io_completed(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        result.map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> StorageResult<()> {
        self.engine
            .repl_log_truncate(log_id.index)
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }

    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        let marker = encode(&log_id).map_err(StorageIOError::write_logs)?;
        self.engine
            .repl_log_purge(log_id.index, &marker)
            .map_err(|e| StorageIOError::write_logs(any(e)).into())
    }
}

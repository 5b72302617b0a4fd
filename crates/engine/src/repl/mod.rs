//! The storage side of replication (issue 27, in progress): bytes only. The consensus
//! layer (`crates/replication`, on openraft) gives them their meaning; no openraft type
//! reaches the engine, as TiKV keeps its engine traits free of RocksDB.
//!
//! - `log`: the replicated log (entries by index, and the log's own markers: the vote,
//!   the commit point, the last purged entry), in the store's `ReplLog` space, every
//!   change synced before it returns (a member acknowledges only what is on disk).
//! - `apply`: a replicated commit (its writes as [`Ops`]) applied in one atomic batch
//!   together with the state machine's applied marker, the engine's memory following
//!   it.
//! - `snapshot`: the state machine's spaces (everything but the log) written to a
//!   file in pieces and installed from one behind a marker a restart finishes.
//! - The other side, where commits' writes come from: `Engine::set_commit_sink` (every
//!   local commit's writes, recorded by the store, in commit order).
//!
//! The top layer of the engine: it may use every layer below.

pub mod apply;
pub mod log;
pub mod snapshot;

pub use crate::core::CommitSink;
pub use tailstream_storage::{Ops, Space};

//! Replica sets on openraft (issue 27, in progress).
//!
//! This crate gives the engine's replicated-log storage (`tailstream_engine::repl`,
//! bytes only) its Raft meaning:
//!
//! - [`TypeConfig`]: a member is a `u64` id and its `host:port`; an entry's payload is
//!   one primary commit's writes ([`Commit`]).
//! - [`LogStore`] (openraft's `RaftLogStorage`): entries, the vote, the commit point
//!   and the purge point, each change on disk before it is acknowledged.
//! - [`StateMachine`] (openraft's `RaftStateMachine`): applying an entry writes its
//!   commit's documents, index entries and oplog entries with the applied marker in
//!   one atomic batch, the same on every member; snapshots are the engine's
//!   state-machine spaces.
//! - [`network::Network`] / [`rpc::handle`]: the members' network, openraft's RPCs as a
//!   `replSetRaft` command over an ordinary connection to a member's port.
//! - [`MemberProposer`] (the engine's `Proposer`): the write path, a commit proposed and
//!   stored only once the set committed it ([`member`]).
//! - [`Member`] ([`set`]): a member's Raft started over its engine, and the set's
//!   initiation; [`handover`]: stepping down and holding elections back; the server's
//!   side is `server/src/replset/`.
//!
//! The log store and state machine pass openraft's own storage test suite
//! (`tests/openraft_suite.rs`); three members over TCP elect a leader, replicate and
//! survive its loss (`tests/three_members.rs`); the engine's own writes go through the
//! set (`tests/write_path.rs`). Entries, votes and log ids are stored with postcard
//! (`types::encode`).

pub mod handover;
pub mod log_store;
pub mod log_window;
pub mod member;
pub mod member_auth;
pub mod network;
pub mod rpc;
pub mod set;
pub mod snapshot_file;
pub mod state_machine;
pub mod types;

pub use log_store::LogStore;
pub use member::{MemberProposer, Pending};
pub use openraft::BasicNode;
pub use set::Member;
pub use state_machine::StateMachine;
pub use types::{Commit, Origin, TypeConfig};

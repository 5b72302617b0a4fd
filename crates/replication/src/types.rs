//! The Raft types of a Tailstream replica set, and how they are stored.

use openraft::{AnyError, StorageError};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// One entry's payload: the writes of one commit of the primary (documents, index
/// entries, oplog entries, catalog and counters), in the storage's own encoding
/// (`tailstream_engine::repl::Ops`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    /// The member that proposed it and its number there: that member's waiting commit
    /// finishes it in memory (see `member.rs`). None: no one waits for it.
    pub origin: Option<Origin>,
    #[serde(with = "serde_bytes")]
    pub ops: Vec<u8>,
}

/// Who proposed a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub node: u64,
    pub seq: u64,
}

openraft::declare_raft_types!(
    /// A member is a `u64` id with its address (`BasicNode { addr: "host:port" }`).
    pub TypeConfig:
        D = Commit,
        R = (),
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::snapshot_file::SnapshotFile,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Entry = openraft::Entry<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
pub type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// A value as stored: postcard's compact encoding (a stable wire format, serde's whole
/// data model: openraft's memberships are maps keyed by node id, which BSON cannot
/// hold; a commit's writes stay one length-prefixed byte string).
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, AnyError> {
    postcard::to_allocvec(value).map_err(|e| AnyError::new(&e))
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AnyError> {
    postcard::from_bytes(bytes).map_err(|e| AnyError::new(&e))
}

/// An engine error as openraft carries it.
pub fn any(e: tailstream_engine::query::error::Error) -> AnyError {
    AnyError::new(&e)
}

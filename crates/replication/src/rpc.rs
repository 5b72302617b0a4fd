//! The receiving side of the members' network (see [`crate::network`]): the
//! `replSetRaft` command's body handed to this member's Raft, its whole result (answer
//! or Raft error) returned as postcard bytes.

use crate::types::{NodeId, TypeConfig};
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::Raft;
use serde::{de::DeserializeOwned, Serialize};

/// The command's name.
pub const COMMAND: &str = "replSetRaft";

/// The RPCs, as the command names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AppendEntries,
    Vote,
    InstallSnapshot,
    /// Not Raft's own: the leader stepping down asks the member it hands over to to
    /// stand for election now (see `set::Member::step_down`).
    Elect,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::AppendEntries => "appendEntries",
            Kind::Vote => "vote",
            Kind::InstallSnapshot => "installSnapshot",
            Kind::Elect => "elect",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        [
            Kind::AppendEntries,
            Kind::Vote,
            Kind::InstallSnapshot,
            Kind::Elect,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// Whether the command asks this member to stand for election (answered by
/// `Member::stand_for_election`, which knows whether the member is frozen).
pub fn is_elect(cmd: &Document) -> bool {
    cmd.get_str(COMMAND) == Ok(Kind::Elect.name())
}

fn decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, String> {
    postcard::from_bytes(data).map_err(|e| format!("a malformed {COMMAND} request: {e}"))
}

fn encode<T: Serialize>(result: &T) -> Result<Document, String> {
    let bytes = postcard::to_allocvec(result).map_err(|e| e.to_string())?;
    Ok(doc! {"data": Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes })})
}

/// Runs one `replSetRaft` command on `raft`; the reply's fields (without `ok`), or
/// why the command is refused (a malformed request: never a panic).
pub async fn handle(raft: &Raft<TypeConfig>, cmd: &Document) -> Result<Document, String> {
    let name = cmd
        .get_str(COMMAND)
        .map_err(|_| format!("{COMMAND} must name an RPC"))?;
    let kind = Kind::parse(name).ok_or_else(|| format!("{COMMAND}: unknown RPC {name}"))?;
    if kind == Kind::Elect {
        return Err(format!(
            "{COMMAND}: elect is the member's to answer (is_elect)"
        ));
    }
    let data = cmd
        .get_binary_generic("data")
        .map_err(|_| format!("{COMMAND}: data must be binary"))?;
    match kind {
        Kind::AppendEntries => {
            let res: Result<_, RaftError<NodeId>> = raft.append_entries(decode(data)?).await;
            encode(&res)
        }
        Kind::Vote => {
            let res: Result<_, RaftError<NodeId>> = raft.vote(decode(data)?).await;
            encode(&res)
        }
        Kind::InstallSnapshot => {
            let res: Result<_, RaftError<NodeId, InstallSnapshotError>> =
                raft.install_snapshot(decode(data)?).await;
            encode(&res)
        }
        Kind::Elect => unreachable!("answered above"),
    }
}

//! The receiving side of the members' network (see [`crate::network`]): the
//! `replSetRaft` command's body handed to this member's Raft, its whole result (answer
//! or Raft error) returned as postcard bytes.

use crate::types::{NodeId, TypeConfig};
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::Raft;
use serde::{de::DeserializeOwned, Serialize};
use std::borrow::Cow;

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

/// The most bytes one binary value of `data` holds: the bson crate encodes no binary
/// over 16 MiB, so a larger request or answer (an append of large commits) travels as
/// an array of pieces.
pub const DATA_PIECE_BYTES: usize = 8 << 20;

/// `bytes` as the command's `data`: one binary, or an array of pieces when larger than
/// [`DATA_PIECE_BYTES`].
pub fn data_value(bytes: Vec<u8>) -> Bson {
    let binary = |bytes: Vec<u8>| {
        Bson::Binary(Binary {
            subtype: BinarySubtype::Generic,
            bytes,
        })
    };
    if bytes.len() <= DATA_PIECE_BYTES {
        return binary(bytes);
    }
    Bson::Array(
        bytes
            .chunks(DATA_PIECE_BYTES)
            .map(|piece| binary(piece.to_vec()))
            .collect(),
    )
}

/// The bytes of a command's `data` (see [`data_value`]): borrowed from the command when
/// they came in one piece (every call but the largest), gathered otherwise.
pub fn data_bytes(doc: &Document) -> Result<Cow<'_, [u8]>, String> {
    match doc.get("data") {
        Some(Bson::Binary(b)) => Ok(Cow::Borrowed(&b.bytes)),
        Some(Bson::Array(pieces)) => {
            let mut bytes = Vec::new();
            for piece in pieces {
                match piece {
                    Bson::Binary(b) => bytes.extend_from_slice(&b.bytes),
                    _ => return Err(format!("{COMMAND}: data pieces must be binary")),
                }
            }
            Ok(Cow::Owned(bytes))
        }
        _ => Err(format!("{COMMAND}: data must be binary")),
    }
}

/// Whether the command is an append that carries entries (not a bare heartbeat).
pub fn carries_entries(cmd: &Document) -> bool {
    if cmd.get_str(COMMAND) != Ok(Kind::AppendEntries.name()) {
        return false;
    }
    let req: Result<openraft::raft::AppendEntriesRequest<TypeConfig>, _> =
        data_bytes(cmd).and_then(|d| decode(&d));
    req.is_ok_and(|r| !r.entries.is_empty())
}

fn decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, String> {
    postcard::from_bytes(data).map_err(|e| format!("a malformed {COMMAND} request: {e}"))
}

fn encode<T: Serialize>(result: &T) -> Result<Document, String> {
    let bytes = postcard::to_allocvec(result).map_err(|e| e.to_string())?;
    Ok(doc! {"data": data_value(bytes)})
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
    let data = data_bytes(cmd)?;
    let data = &*data;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `data` over the bson crate's 16 MiB binary limit travels in pieces and comes
    /// back whole; a small one stays one binary.
    #[test]
    fn data_over_a_piece_travels_in_pieces() {
        let small = vec![7u8; 100];
        assert!(matches!(data_value(small.clone()), Bson::Binary(_)));
        assert_eq!(
            data_bytes(&doc! {"data": data_value(small.clone())}).map(Cow::into_owned),
            Ok(small)
        );
        let large: Vec<u8> = (0..(2 * DATA_PIECE_BYTES + 5)).map(|i| i as u8).collect();
        let value = data_value(large.clone());
        assert!(matches!(&value, Bson::Array(pieces) if pieces.len() == 3));
        let body = doc! {COMMAND: "appendEntries", "data": value, "$db": "admin"};
        // The whole command encodes (a binary over 16 MiB would not).
        assert!(bson::to_vec(&body).is_ok());
        assert_eq!(data_bytes(&body).map(Cow::into_owned), Ok(large));
        assert!(data_bytes(&doc! {"data": [1]}).is_err());
        assert!(data_bytes(&doc! {}).is_err());
    }
}

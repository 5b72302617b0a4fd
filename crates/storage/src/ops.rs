//! Writes as bytes that can travel: [`Ops`], a list of puts, deletes and range deletes
//! naming their [`Space`], encoded in Tailstream's own format (never RocksDB's
//! `WriteBatch` representation, whose column-family numbers are one store's own).
//!
//! What replication ships (issue 27): a Raft entry carries the writes of one commit,
//! and every member applies them with [`Batch::apply_ops`] in one atomic batch, so
//! documents, index entries and oplog entries are byte for byte the same on each.
//! A snapshot (`OwnedSnapshot::export_pieces`, installed with [`Store::replace_begin`]
//! and [`Store::replace_piece`]) uses the same encoding, in pieces.
//!
//! Format, per operation: a tag byte ([`TAG_PUT`], [`TAG_DELETE`], [`TAG_DELETE_RANGE`]),
//! the space's byte ([`Space::code`]), then one or two length-prefixed byte strings
//! (u32 little-endian length): key and value, key, or from and to. Decoding checks every
//! length against what is left and every tag and space, and never panics.

use crate::{Batch, Result, Space, StorageError, Store};

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_DELETE_RANGE: u8 = 3;

/// The largest key or value one operation may carry: RocksDB's own limit on a value
/// is 4 GiB; the engine's documents stay under 16 MiB and its keys far below.
pub const MAX_PART_BYTES: usize = 64 << 20;

/// The largest encoded list [`Ops::decode`] takes (and [`Store::export`] makes) in one
/// piece; a snapshot of a larger store travels in pieces.
pub const MAX_ENCODED_BYTES: usize = 1 << 30;

/// One write, borrowed from an encoded list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    Put {
        space: Space,
        key: &'a [u8],
        value: &'a [u8],
    },
    Delete {
        space: Space,
        key: &'a [u8],
    },
    /// `[from, to)`.
    DeleteRange {
        space: Space,
        from: &'a [u8],
        to: &'a [u8],
    },
}

/// Writes in order, encoded; built with `put` / `delete` / `delete_range`, or checked
/// from bytes with [`Ops::decode`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ops {
    bytes: Vec<u8>,
    count: usize,
    /// Whether any operation is a range delete (which pending writes cannot hold).
    ranges: bool,
}

impl Space {
    /// The space's byte in [`Ops`]: its position in [`Space::ALL`] (a new space goes
    /// at the end, so codes never change).
    pub fn code(self) -> u8 {
        let i = Space::ALL
            .iter()
            .position(|s| *s == self)
            .expect("every space is in ALL");
        u8::try_from(i).expect("fewer than 256 spaces")
    }

    fn from_code(code: u8) -> Option<Space> {
        Space::ALL.get(usize::from(code)).copied()
    }
}

impl Ops {
    pub fn new() -> Ops {
        Ops::default()
    }

    pub fn put(&mut self, space: Space, key: &[u8], value: &[u8]) {
        self.head(TAG_PUT, space);
        self.part(key);
        self.part(value);
    }

    pub fn delete(&mut self, space: Space, key: &[u8]) {
        self.head(TAG_DELETE, space);
        self.part(key);
    }

    pub fn delete_range(&mut self, space: Space, from: &[u8], to: &[u8]) {
        self.ranges = true;
        self.head(TAG_DELETE_RANGE, space);
        self.part(from);
        self.part(to);
    }

    fn head(&mut self, tag: u8, space: Space) {
        self.bytes.push(tag);
        self.bytes.push(space.code());
        self.count += 1;
    }

    fn part(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= MAX_PART_BYTES,
            "an operation's part over 64 MiB"
        );
        let len = u32::try_from(bytes.len()).expect("checked above");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(bytes);
    }

    /// Appends every operation of `other`, after this list's own.
    pub fn extend(&mut self, other: &Ops) {
        self.bytes.extend_from_slice(&other.bytes);
        self.count += other.count;
        self.ranges |= other.ranges;
    }

    /// Whether any operation is a range delete.
    pub fn has_range_delete(&self) -> bool {
        self.ranges
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Checks `bytes` (every tag, space and length) and takes them as a list.
    pub fn decode(bytes: Vec<u8>) -> Result<Ops> {
        if bytes.len() > MAX_ENCODED_BYTES {
            return Err(corrupt("over the 1 GiB limit"));
        }
        let mut count = 0;
        let mut ranges = false;
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let (op, after) = next_op(rest)?;
            ranges |= matches!(op, Op::DeleteRange { .. });
            rest = after;
            count += 1;
        }
        Ok(Ops {
            bytes,
            count,
            ranges,
        })
    }

    /// The operations in order.
    pub fn iter(&self) -> impl Iterator<Item = Op<'_>> {
        let mut rest = self.bytes.as_slice();
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            // Checked by `decode` or built by the methods above.
            let (op, after) = next_op(rest).expect("an Ops list is valid");
            rest = after;
            Some(op)
        })
    }
}

fn corrupt(what: &str) -> StorageError {
    StorageError(format!("malformed write list: {what}"))
}

fn take_part(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(corrupt("a length cut short"));
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_PART_BYTES || len > rest.len() {
        return Err(corrupt("a length past the end"));
    }
    Ok(rest.split_at(len))
}

fn next_op(bytes: &[u8]) -> Result<(Op<'_>, &[u8])> {
    let [tag, space, rest @ ..] = bytes else {
        return Err(corrupt("an operation cut short"));
    };
    let space = Space::from_code(*space).ok_or_else(|| corrupt("an unknown space"))?;
    let (first, rest) = take_part(rest)?;
    match *tag {
        TAG_PUT => {
            let (value, rest) = take_part(rest)?;
            Ok((
                Op::Put {
                    space,
                    key: first,
                    value,
                },
                rest,
            ))
        }
        TAG_DELETE => Ok((Op::Delete { space, key: first }, rest)),
        TAG_DELETE_RANGE => {
            let (to, rest) = take_part(rest)?;
            Ok((
                Op::DeleteRange {
                    space,
                    from: first,
                    to,
                },
                rest,
            ))
        }
        _ => Err(corrupt("an unknown operation")),
    }
}

impl Batch<'_> {
    /// Adds every operation of `ops`, in order.
    pub fn apply_ops(&mut self, ops: &Ops) {
        for op in ops.iter() {
            match op {
                Op::Put { space, key, value } => self.put(space, key, value),
                Op::Delete { space, key } => self.delete(space, key),
                Op::DeleteRange { space, from, to } => self.delete_range(space, from, to),
            }
        }
    }
}

/// The puts of every key and value `scan` gives for each of `spaces`, at most
/// [`MAX_ENCODED_BYTES`].
fn export_with<'a>(
    spaces: &[Space],
    scan: impl Fn(Space) -> Box<dyn Iterator<Item = Result<crate::KeyValue>> + 'a>,
) -> Result<Ops> {
    let mut ops = Ops::new();
    for space in spaces {
        for kv in scan(*space) {
            let (k, v) = kv?;
            ops.put(*space, &k, &v);
            if ops.bytes.len() > MAX_ENCODED_BYTES {
                return Err(StorageError(
                    "the store is over the 1 GiB an in-memory export may hold".into(),
                ));
            }
        }
    }
    Ok(ops)
}

/// How many keys of an append-only space one batch of [`Store::replace_begin`]
/// deletes (a batch of 10,000 oplog keys is about 200 KB of tombstones).
const CLEAR_KEYS_PER_BATCH: usize = 10_000;

impl crate::OwnedSnapshot {
    fn iter_space(&self, space: Space) -> impl Iterator<Item = Result<crate::KeyValue>> + '_ {
        let mut ro = rocksdb::ReadOptions::default();
        // An export reads everything once: it should not push the working set out.
        ro.fill_cache(false);
        self.snap()
            .iterator_cf_opt(self.store.cf(space), ro, rocksdb::IteratorMode::Start)
            .map(|r| r.map_err(StorageError::from))
    }

    /// [`Store::export`] of this read view: the spaces as they were when it was taken.
    pub fn export(&self, spaces: &[Space]) -> Result<Ops> {
        export_with(spaces, |space| Box::new(self.iter_space(space)))
    }

    /// The same puts as [`OwnedSnapshot::export`], in order, handed to `each` in lists
    /// that end with the put reaching `piece_bytes` (the last one shorter): a store of
    /// any size passes through bounded memory.
    pub fn export_pieces(
        &self,
        spaces: &[Space],
        piece_bytes: usize,
        mut each: impl FnMut(Ops) -> std::io::Result<()>,
    ) -> Result<()> {
        assert!(piece_bytes > 0, "a piece holds something");
        let written = |e: std::io::Error| StorageError(format!("writing a snapshot: {e}"));
        let mut piece = Ops::new();
        for space in spaces {
            for kv in self.iter_space(*space) {
                let (k, v) = kv?;
                piece.put(*space, &k, &v);
                if piece.bytes.len() >= piece_bytes {
                    each(std::mem::take(&mut piece)).map_err(written)?;
                }
            }
        }
        if !piece.is_empty() {
            each(piece).map_err(written)?;
        }
        Ok(())
    }
}

/// Refuses a list with a write outside `spaces`.
fn check_within(spaces: &[Space], ops: &Ops) -> Result<()> {
    let outside = ops.iter().any(|op| {
        let space = match op {
            Op::Put { space, .. } | Op::Delete { space, .. } => space,
            Op::DeleteRange { space, .. } => space,
        };
        !spaces.contains(&space)
    });
    if outside {
        return Err(corrupt("a snapshot's write outside its spaces"));
    }
    Ok(())
}

impl Store {
    /// Every key and value of `spaces`, as puts (in one piece, at most
    /// [`MAX_ENCODED_BYTES`]: for tests and small stores; a snapshot streams with
    /// [`OwnedSnapshot::export_pieces`](crate::OwnedSnapshot::export_pieces)).
    pub fn export(&self, spaces: &[Space]) -> Result<Ops> {
        export_with(spaces, |space| Box::new(self.scan(space, &[], None, false)))
    }

    /// Starts replacing everything in `spaces` with a snapshot that arrives in pieces
    /// ([`Store::replace_piece`]): one batch range-deletes the spaces and applies
    /// `first` after that (the caller's marker that a replacement is under way), then
    /// the keys of append-only spaces, which take no range tombstone (see
    /// `append_only`), are deleted in batches. Nothing is synced: a crash before the
    /// caller syncs its last piece leaves either the state before this call or the
    /// marker, from which the caller starts over.
    pub fn replace_begin(&self, spaces: &[Space], first: &Ops) -> Result<()> {
        check_within(spaces, first)?;
        let mut batch = self.batch();
        for space in spaces.iter().filter(|s| !s.append_only()) {
            if let Some((first_key, _)) = self.scan(*space, &[], None, false).next().transpose()? {
                let (last, _) = self
                    .last(*space, &[], None)?
                    .expect("a space with a first key has a last");
                let mut past_last = last.to_vec();
                past_last.push(0);
                batch.delete_range(*space, &first_key, &past_last);
            }
        }
        batch.apply_ops(first);
        self.commit(batch)?;
        for space in spaces.iter().filter(|s| s.append_only()) {
            self.clear_append_only(*space)?;
        }
        Ok(())
    }

    /// Deletes every key of an append-only space, [`CLEAR_KEYS_PER_BATCH`] a batch.
    fn clear_append_only(&self, space: Space) -> Result<()> {
        let mut from: Vec<u8> = Vec::new();
        loop {
            let mut batch = self.batch();
            let mut n = 0;
            for kv in self
                .scan(space, &from, None, false)
                .take(CLEAR_KEYS_PER_BATCH)
            {
                let (k, _) = kv?;
                batch.delete(space, &k);
                from = k.to_vec();
                from.push(0);
                n += 1;
            }
            if n == 0 {
                return Ok(());
            }
            self.commit(batch)?;
        }
    }

    /// One piece of a replacement begun with [`Store::replace_begin`], in one batch,
    /// not synced (the caller syncs after its last: [`Store::sync`]). Every write must
    /// fall inside `spaces`.
    pub fn replace_piece(&self, spaces: &[Space], piece: &Ops) -> Result<()> {
        check_within(spaces, piece)?;
        let mut batch = self.batch();
        batch.apply_ops(piece);
        self.commit(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ops {
        let mut ops = Ops::new();
        ops.put(Space::Docs, b"k1", b"v1");
        ops.delete(Space::Index, b"k2");
        ops.delete_range(Space::OplogByNs, b"a", b"b");
        ops.put(Space::Meta, b"", b"");
        ops
    }

    #[test]
    fn a_list_round_trips_through_its_bytes() {
        let ops = sample();
        assert_eq!(ops.len(), 4);
        let back = Ops::decode(ops.as_bytes().to_vec()).unwrap();
        assert_eq!(back, ops);
        let listed: Vec<Op> = back.iter().collect();
        assert_eq!(
            listed,
            vec![
                Op::Put {
                    space: Space::Docs,
                    key: b"k1",
                    value: b"v1"
                },
                Op::Delete {
                    space: Space::Index,
                    key: b"k2"
                },
                Op::DeleteRange {
                    space: Space::OplogByNs,
                    from: b"a",
                    to: b"b"
                },
                Op::Put {
                    space: Space::Meta,
                    key: b"",
                    value: b""
                },
            ]
        );
    }

    #[test]
    fn every_cut_and_every_bad_byte_is_refused_without_a_panic() {
        let bytes = sample().into_bytes();
        for cut in 1..bytes.len() {
            // A cut at an operation's boundary is a shorter valid list.
            let _ = Ops::decode(bytes[..cut].to_vec());
        }
        assert!(Ops::decode(bytes[..bytes.len() - 1].to_vec()).is_err());
        let mut bad_tag = bytes.clone();
        bad_tag[0] = 9;
        assert!(Ops::decode(bad_tag).is_err());
        let mut bad_space = bytes.clone();
        bad_space[1] = 200;
        assert!(Ops::decode(bad_space).is_err());
        let mut huge_len = bytes;
        huge_len[2..6].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Ops::decode(huge_len).is_err());
    }

    #[test]
    fn space_codes_are_their_place_in_all() {
        for (i, s) in Space::ALL.iter().enumerate() {
            assert_eq!(usize::from(s.code()), i);
            assert_eq!(Space::from_code(s.code()), Some(*s));
        }
    }
}

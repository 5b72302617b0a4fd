//! The replicated log in the store's `ReplLog` space.
//!
//! Keys: `e` ++ index (8 bytes big-endian) for entries, so they sort by index; `m` ++
//! a marker's name for the log's markers ([`Marker`]). The log's markers live beside
//! its entries, not in `Meta`, so a snapshot of the state machine (every space but
//! this one) never carries them and installing one never overwrites them.
//!
//! Ordering rule: every call that changes the log syncs the store before it returns;
//! a change that removes entries and moves a marker does both in one batch.

use crate::{core::storage_err, Engine};
use tailstream_query::error::Result;
use tailstream_storage::Space;

const ENTRY: u8 = b'e';
const MARKER: u8 = b'm';

/// The most entries one read returns (a limit on everything: a follower far behind is
/// sent its entries in pieces).
pub const MAX_ENTRIES_PER_READ: usize = 10_000;

/// The log's markers, each one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// The vote this member gave (term and candidate), kept across restarts so it
    /// never votes twice in a term.
    Vote,
    /// The newest entry known committed.
    Committed,
    /// The newest entry removed from the front of the log (its id is still needed).
    Purged,
    /// This member's id in its set, kept so a restarted member rejoins as itself.
    Node,
}

impl Marker {
    fn key(self) -> Vec<u8> {
        let name: &[u8] = match self {
            Marker::Vote => b"vote",
            Marker::Committed => b"committed",
            Marker::Purged => b"purged",
            Marker::Node => b"node",
        };
        [&[MARKER][..], name].concat()
    }
}

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = ENTRY;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

fn index_of(key: &[u8]) -> u64 {
    let bytes: [u8; 8] = key[1..9].try_into().expect("an entry key is 9 bytes");
    u64::from_be_bytes(bytes)
}

impl Engine {
    /// Appends entries (index, bytes), indexes ascending; on disk when it returns.
    pub fn repl_log_append(&self, entries: &[(u64, Vec<u8>)]) -> Result<()> {
        assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "entries are appended in index order"
        );
        let mut batch = self.store.batch();
        for (index, bytes) in entries {
            batch.put(Space::ReplLog, &entry_key(*index), bytes);
        }
        self.store.commit(batch).map_err(storage_err)?;
        self.store.sync().map_err(storage_err)
    }

    /// Entries with `from <= index < to`, ascending, at most [`MAX_ENTRIES_PER_READ`].
    pub fn repl_log_read(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let (lower, upper) = (entry_key(from), entry_key(to));
        let mut out = Vec::new();
        for kv in self.store.scan(Space::ReplLog, &lower, Some(&upper), false) {
            let (k, v) = kv.map_err(storage_err)?;
            out.push((index_of(&k), v.into_vec()));
            if out.len() == MAX_ENTRIES_PER_READ {
                break;
            }
        }
        Ok(out)
    }

    /// The entry with the highest index, if the log holds any.
    pub fn repl_log_last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        let lower = [ENTRY];
        let upper = [ENTRY + 1];
        let last = self
            .store
            .last(Space::ReplLog, &lower, Some(&upper))
            .map_err(storage_err)?;
        Ok(last.map(|(k, v)| (index_of(&k), v.into_vec())))
    }

    /// Removes the entries with `index >= since` (a conflicting suffix).
    pub fn repl_log_truncate(&self, since: u64) -> Result<()> {
        let mut batch = self.store.batch();
        batch.delete_range(Space::ReplLog, &entry_key(since), &[ENTRY + 1]);
        self.store.commit(batch).map_err(storage_err)?;
        self.store.sync().map_err(storage_err)
    }

    /// Removes the entries with `index <= upto` and sets [`Marker::Purged`] to
    /// `purged` (the removed entry's id, as the consensus layer encodes it), at once.
    pub fn repl_log_purge(&self, upto: u64, purged: &[u8]) -> Result<()> {
        let mut batch = self.store.batch();
        let end = upto
            .checked_add(1)
            .map_or([ENTRY + 1].to_vec(), |i| entry_key(i).to_vec());
        batch.delete_range(Space::ReplLog, &entry_key(0), &end);
        batch.put(Space::ReplLog, &Marker::Purged.key(), purged);
        self.store.commit(batch).map_err(storage_err)?;
        self.store.sync().map_err(storage_err)
    }

    pub fn repl_log_marker(&self, marker: Marker) -> Result<Option<Vec<u8>>> {
        self.store
            .get(Space::ReplLog, &marker.key())
            .map_err(storage_err)
    }

    /// Sets a marker; on disk when it returns.
    pub fn repl_log_set_marker(&self, marker: Marker, value: &[u8]) -> Result<()> {
        let mut batch = self.store.batch();
        batch.put(Space::ReplLog, &marker.key(), value);
        self.store.commit(batch).map_err(storage_err)?;
        self.store.sync().map_err(storage_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;

    #[test]
    fn entries_append_read_truncate_and_purge() {
        let t = TestEngine::open();
        let e = &t.engine;
        assert_eq!(e.repl_log_last().unwrap(), None);
        let entries: Vec<(u64, Vec<u8>)> = (1..=10).map(|i| (i, vec![i as u8; 3])).collect();
        e.repl_log_append(&entries).unwrap();
        assert_eq!(e.repl_log_read(3, 6).unwrap(), entries[2..5].to_vec());
        assert_eq!(e.repl_log_last().unwrap(), Some((10, vec![10; 3])));
        e.repl_log_truncate(8).unwrap();
        assert_eq!(e.repl_log_last().unwrap(), Some((7, vec![7; 3])));
        e.repl_log_purge(4, b"id of 4").unwrap();
        assert_eq!(e.repl_log_read(0, 100).unwrap(), entries[4..7].to_vec());
        assert_eq!(
            e.repl_log_marker(Marker::Purged).unwrap(),
            Some(b"id of 4".to_vec())
        );
        e.repl_log_set_marker(Marker::Vote, b"term 3").unwrap();
        assert_eq!(
            e.repl_log_marker(Marker::Vote).unwrap(),
            Some(b"term 3".to_vec())
        );
        assert_eq!(e.repl_log_marker(Marker::Committed).unwrap(), None);
        // Purging everything leaves an empty log with its marker.
        e.repl_log_purge(u64::MAX, b"all").unwrap();
        assert_eq!(e.repl_log_last().unwrap(), None);
    }
}

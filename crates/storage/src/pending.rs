//! Writes on their way into the store: a replica set's pipelined commits (issue 27).
//!
//! A primary computes a commit under the engine's writer lock, proposes it to the set
//! and lets the next commit be computed while the set commits the first; only the
//! state machine, once the set has committed an entry, writes it into the store. The
//! next commit must still read what the ones before it wrote: their writes wait here,
//! per commit id, until the state machine has stored them ([`Store::pending_remove`]).
//!
//! Who sees them: only a thread that said so ([`see_pending`]: the engine's writer,
//! while it holds the writer lock). Every other reader (queries, change streams,
//! snapshots) sees the store alone, which holds only what the set committed.
//!
//! Ordering rules, so that a merged read is never torn:
//! - a commit's writes are added here before its entry is proposed, and removed only
//!   after the state machine's batch holding them is in the store;
//! - a merged scan copies its range from here before it opens the store's iterator:
//!   whatever was removed before the copy is in the store that iterator reads, and
//!   whatever is in the copy wins over the store;
//! - for one key the newest commit's value wins (ids grow in commit order).
//!
//! Range deletes are not held (a commit with one is not pipelined: the engine waits
//! for the commits before it and proposes it alone).

use crate::{KeyValue, Op, Ops, Result, Space, StorageError};
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

thread_local! {
    static SEES_PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread's reads see the pending writes (see the module's doc).
pub fn see_pending(on: bool) {
    SEES_PENDING.with(|s| s.set(on));
}

fn sees_pending() -> bool {
    SEES_PENDING.with(Cell::get)
}

/// A stored key or value.
type Bytes = Box<[u8]>;

/// A key's newest pending value: the commit that wrote it, and the value (None: deleted).
type Slot = (u64, Option<Bytes>);

/// A pending write as a scan merges it: the key, and its value (None: deleted).
type Write = (Bytes, Option<Bytes>);

#[derive(Default)]
struct Inner {
    spaces: Vec<BTreeMap<Bytes, Slot>>,
    /// The keys each commit wrote, by commit id.
    by_commit: BTreeMap<u64, Vec<(Space, Bytes)>>,
}

/// The pending writes of the commits not yet stored.
#[derive(Default)]
pub(crate) struct Pending {
    inner: RwLock<Inner>,
    /// Commits held: reads skip the lock while it is 0 (a single node, an idle set).
    commits: AtomicUsize,
}

impl Pending {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this thread must merge pending writes into its reads.
    pub(crate) fn active(&self) -> bool {
        sees_pending() && self.commits.load(Ordering::Acquire) > 0
    }

    pub(crate) fn add(&self, id: u64, ops: &Ops) -> Result<()> {
        let mut inner = self.write();
        if inner.spaces.is_empty() {
            inner.spaces = vec![BTreeMap::new(); Space::ALL.len()];
        }
        if inner
            .by_commit
            .last_key_value()
            .is_some_and(|(last, _)| *last >= id)
        {
            return Err(StorageError(format!(
                "pending commit {id} is not newer than the ones held"
            )));
        }
        if ops.has_range_delete() {
            return Err(StorageError(
                "a range delete cannot be held pending".to_string(),
            ));
        }
        let mut keys = Vec::with_capacity(ops.len());
        for op in ops.iter() {
            let (space, key, value) = match op {
                Op::Put { space, key, value } => (space, key, Some(Box::from(value))),
                Op::Delete { space, key } => (space, key, None),
                Op::DeleteRange { .. } => unreachable!("refused above"),
            };
            let key: Box<[u8]> = Box::from(key);
            inner.spaces[space.code() as usize].insert(key.clone(), (id, value));
            keys.push((space, key));
        }
        inner.by_commit.insert(id, keys);
        self.commits.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub(crate) fn remove(&self, id: u64) {
        let mut inner = self.write();
        let Some(keys) = inner.by_commit.remove(&id) else {
            return;
        };
        for (space, key) in keys {
            let map = &mut inner.spaces[space.code() as usize];
            if map.get(&key).is_some_and(|(owner, _)| *owner == id) {
                map.remove(&key);
            }
        }
        self.commits.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn clear(&self) {
        let mut inner = self.write();
        let n = inner.by_commit.len();
        inner.by_commit.clear();
        for map in &mut inner.spaces {
            map.clear();
        }
        self.commits.fetch_sub(n, Ordering::AcqRel);
    }

    /// The pending value of `key`: None when no commit held wrote it, `Some(None)`
    /// when the newest one deleted it.
    pub(crate) fn get(&self, space: Space, key: &[u8]) -> Option<Option<Box<[u8]>>> {
        let inner = self.read();
        let map = inner.spaces.get(space.code() as usize)?;
        map.get(key).map(|(_, v)| v.clone())
    }

    /// The pending writes in `[lower, upper)`, in the scan's order.
    fn range(
        &self,
        space: Space,
        lower: &[u8],
        upper: Option<&[u8]>,
        reverse: bool,
    ) -> VecDeque<Write> {
        use std::ops::Bound;
        let inner = self.read();
        let Some(map) = inner.spaces.get(space.code() as usize) else {
            return VecDeque::new();
        };
        let hi = upper.map_or(Bound::Unbounded, Bound::Excluded);
        let range = map.range::<[u8], _>((Bound::Included(lower), hi));
        if reverse {
            range.rev().map(|(k, s)| (k.clone(), s.1.clone())).collect()
        } else {
            range.map(|(k, s)| (k.clone(), s.1.clone())).collect()
        }
    }

    /// `stored` (a scan of the store over `[lower, upper)`) with the pending writes of
    /// that range merged in. The pending range is copied first (see the module's doc):
    /// the caller opens `stored` after this returns.
    pub(crate) fn merge<I>(
        &self,
        space: Space,
        lower: &[u8],
        upper: Option<&[u8]>,
        reverse: bool,
    ) -> impl FnOnce(I) -> Merged<I>
    where
        I: Iterator<Item = Result<KeyValue>>,
    {
        let pending = if self.active() {
            self.range(space, lower, upper, reverse)
        } else {
            VecDeque::new()
        };
        move |stored| Merged {
            stored: stored.peekable(),
            pending,
            reverse,
        }
    }
}

/// A store scan with pending writes merged in (see [`Pending::merge`]).
pub struct Merged<I: Iterator<Item = Result<KeyValue>>> {
    stored: std::iter::Peekable<I>,
    pending: VecDeque<Write>,
    reverse: bool,
}

impl<I: Iterator<Item = Result<KeyValue>>> Iterator for Merged<I> {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some((pk, _)) = self.pending.front() else {
                return self.stored.next();
            };
            let order = match self.stored.peek() {
                None => std::cmp::Ordering::Less,
                Some(Err(_)) => return self.stored.next(),
                Some(Ok((sk, _))) => {
                    let o = pk.as_ref().cmp(sk.as_ref());
                    if self.reverse {
                        o.reverse()
                    } else {
                        o
                    }
                }
            };
            match order {
                std::cmp::Ordering::Greater => return self.stored.next(),
                std::cmp::Ordering::Equal => {
                    self.stored.next(); // the pending write replaces it
                }
                std::cmp::Ordering::Less => {}
            }
            let (key, value) = self.pending.pop_front().expect("peeked above");
            if let Some(value) = value {
                return Some(Ok((key, value)));
            }
            // Deleted by a pending commit: skip it (and the stored key, taken above).
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> Result<KeyValue> {
        Ok((k.as_bytes().into(), v.as_bytes().into()))
    }

    fn merged(p: &Pending, stored: Vec<Result<KeyValue>>, reverse: bool) -> Vec<(String, String)> {
        let merge = p.merge(Space::Docs, b"", None, reverse);
        merge(stored.into_iter())
            .map(|r| {
                let (k, v) = r.unwrap();
                (
                    String::from_utf8(k.into()).unwrap(),
                    String::from_utf8(v.into()).unwrap(),
                )
            })
            .collect()
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_scan_sees_pending_puts_and_deletes_only_where_asked() {
        let p = Pending::default();
        let mut ops = Ops::new();
        ops.put(Space::Docs, b"b", b"new-b");
        ops.put(Space::Docs, b"d", b"d");
        ops.delete(Space::Docs, b"c");
        p.add(1, &ops).unwrap();
        let stored = || vec![kv("a", "a"), kv("b", "old-b"), kv("c", "c")];
        // Not this thread's: the store alone.
        see_pending(false);
        assert_eq!(
            merged(&p, stored(), false),
            pairs(&[("a", "a"), ("b", "old-b"), ("c", "c")])
        );
        see_pending(true);
        assert_eq!(
            merged(&p, stored(), false),
            pairs(&[("a", "a"), ("b", "new-b"), ("d", "d")])
        );
        let mut rev = stored();
        rev.reverse();
        assert_eq!(
            merged(&p, rev, true),
            pairs(&[("d", "d"), ("b", "new-b"), ("a", "a")])
        );
        assert_eq!(p.get(Space::Docs, b"c"), Some(None));
        assert_eq!(p.get(Space::Index, b"b"), None);
        see_pending(false);
    }

    #[test]
    fn the_newest_commit_wins_and_removing_an_older_one_keeps_it() {
        let p = Pending::default();
        let mut first = Ops::new();
        first.put(Space::Docs, b"k", b"1");
        first.put(Space::Docs, b"only-first", b"1");
        let mut second = Ops::new();
        second.put(Space::Docs, b"k", b"2");
        p.add(1, &first).unwrap();
        p.add(2, &second).unwrap();
        assert!(p.add(2, &second).is_err(), "ids grow");
        assert_eq!(p.get(Space::Docs, b"k"), Some(Some(Box::from(&b"2"[..]))));
        p.remove(1);
        assert_eq!(p.get(Space::Docs, b"k"), Some(Some(Box::from(&b"2"[..]))));
        assert_eq!(p.get(Space::Docs, b"only-first"), None);
        p.remove(2);
        assert_eq!(p.get(Space::Docs, b"k"), None);
        assert_eq!(p.commits.load(Ordering::Acquire), 0);
        let mut range = Ops::new();
        range.delete_range(Space::Docs, b"a", b"z");
        assert!(p.add(3, &range).is_err(), "range deletes are not held");
        p.add(4, &first).unwrap();
        p.clear();
        assert_eq!(p.get(Space::Docs, b"k"), None);
        assert_eq!(p.commits.load(Ordering::Acquire), 0);
    }
}

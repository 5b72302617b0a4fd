//! Retryable writes' records: what a retryable write (a write command with `lsid` and
//! `txnNumber`, outside a transaction) did, stored in the same commit as the writes
//! themselves, as mongod keeps `config.transactions` and the statement ids of its
//! oplog entries. On a replica set a record travels in its commit's Raft entry, so the
//! member that answers a driver's retry after a failover knows which statements ran
//! and what they returned; a single node knows it after a restart as well.
//!
//! Layout (`Space::Meta`, `keys::retry_record_key`): one record per commit, numbered
//! from 0 within the session, holding the command's statements that commit did and
//! their counts. The records of a session's newest `txnNumber` are what counts. A new
//! `txnNumber` numbers its records from 0 again, overwriting the older ones; an older
//! number's records left at higher positions are told apart by their number and
//! removed with the session (`reap_retry_records`). A retry of the same number goes
//! on after its newest record. Statements that failed or changed nothing leave no
//! record: a retry runs them again, as mongod does.
//!
//! Ordering: a record is put into its commit's batch just before the commit and only
//! when the batch holds writes, so a record exists exactly when what it describes was
//! committed.

use crate::core::raw_writer::RawWriter;
use crate::core::{keys, storage_err};
use crate::oplog::txn::Txn;
use crate::Engine;
use bson::{Bson, Document, RawDocument, RawDocumentBuf};
use tailstream_query::error::{Error, Result};
use tailstream_storage::Space;

/// The longest session key recorded (a driver's `lsid.id` is a 16-byte UUID, 18
/// bytes as a key); a longer one is run without a record, as before records existed.
pub const MAX_SESSION_KEY_BYTES: usize = 1024;

/// How long a session's records are kept after its last retryable write: mongod's
/// `localLogicalSessionTimeoutMinutes` (30), after which mongod's session reaper
/// removes the session's `config.transactions` entry.
pub const RETRY_RECORD_LIFETIME_MILLIS: i64 = 30 * 60 * 1000;

/// The most records one reaping pass removes (each pass is one commit).
pub const MAX_REAPED_PER_PASS: usize = 10_000;

/// A retryable write being run: its session, its `txnNumber`, and the command's
/// statement index of each statement handed to the engine (a retry runs only the
/// statements its records do not show).
#[derive(Debug, Clone)]
pub struct RetryWrite {
    session: Vec<u8>,
    txn_number: i64,
    stmt_ids: Vec<u32>,
    next_seq: u32,
}

/// What one commit (or, merged, a whole retryable write so far) did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Done {
    /// The command's statements done, by index in the command.
    pub stmts: Vec<u32>,
    pub n: u64,
    pub n_modified: u64,
    /// Upserted `_id`s by statement index.
    pub upserted: Vec<(u32, Bson)>,
    /// A findAndModify's outcome: `{n, e: updatedExisting, u: upserted _id, v: value}`.
    pub fam: Option<Document>,
}

/// What a session's newest retryable write did, from its records.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryRecord {
    pub txn_number: i64,
    /// The number the write's next record takes.
    pub next_seq: u32,
    pub done: Done,
}

impl RetryWrite {
    /// A write of `session`'s `txn_number`, running the command's statements
    /// `stmt_ids` (in order), its first record numbered `next_seq`.
    pub fn new(session: Vec<u8>, txn_number: i64, stmt_ids: Vec<u32>, next_seq: u32) -> Self {
        RetryWrite {
            session,
            txn_number,
            stmt_ids,
            next_seq,
        }
    }

    /// The statements run (indexes in the command), in the order handed to the engine.
    pub fn stmt_ids(&self) -> &[u32] {
        &self.stmt_ids
    }

    /// The command's index of the `i`-th statement handed to the engine.
    pub fn stmt(&self, i: usize) -> u32 {
        self.stmt_ids.get(i).copied().unwrap_or_else(|| {
            panic!(
                "statement {i} of a retryable write that runs {} statements",
                self.stmt_ids.len()
            )
        })
    }

    /// Checks that the engine is handed one statement per statement id.
    pub(crate) fn check_statements(&self, statements: usize) -> Result<()> {
        if self.stmt_ids.len() != statements {
            return Err(Error::internal(format!(
                "a retryable write names {} statements and runs {statements}",
                self.stmt_ids.len()
            )));
        }
        Ok(())
    }

    /// Adds the record of what `txn` did to its batch (nothing when it did nothing).
    pub(crate) fn record(&mut self, txn: &mut Txn<'_>, done: &Done) {
        if done.stmts.is_empty() || txn.batch().is_empty() {
            return;
        }
        if self.session.len() > MAX_SESSION_KEY_BYTES {
            return;
        }
        let key = keys::retry_record_key(&self.session, self.next_seq);
        self.next_seq = self
            .next_seq
            .checked_add(1)
            .expect("fewer than 2^32 commits in one write command");
        let value = encode(self.txn_number, done, bson::DateTime::now());
        txn.batch().put(Space::Meta, &key, value.as_bytes());
    }
}

/// A record's stored form: `{t: txnNumber, w: wall time, s: statement ranges (binary,
/// 8 bytes each: first, end, big-endian), n, m, u: [{i, _id}], f: findAndModify}`.
fn encode(txn_number: i64, done: &Done, wall: bson::DateTime) -> RawDocumentBuf {
    // Written raw (one per retryable write: the bus's every message has one).
    let mut d = RawWriter::with_capacity(64 + 8 * done.stmts.len());
    d.int64("t", txn_number);
    d.date_time("w", wall);
    d.binary(
        "s",
        bson::spec::BinarySubtype::Generic,
        &ranges(&done.stmts),
    );
    d.int64("n", i64::try_from(done.n).unwrap_or(i64::MAX));
    d.int64("m", i64::try_from(done.n_modified).unwrap_or(i64::MAX));
    let mut d = d.finish();
    if !done.upserted.is_empty() {
        let mut ups = bson::RawArrayBuf::new();
        for (i, id) in &done.upserted {
            let mut u = Document::new();
            u.insert("i", i64::from(*i));
            u.insert("_id", id.clone());
            if let Ok(raw) = RawDocumentBuf::from_document(&u) {
                ups.push(raw);
            }
        }
        d.append("u", ups);
    }
    if let Some(f) = done
        .fam
        .as_ref()
        .and_then(|f| RawDocumentBuf::from_document(f).ok())
    {
        d.append("f", f);
    }
    d
}

/// Sorted statement indexes as runs `[first, end)`, 8 bytes each.
fn ranges(stmts: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for &s in stmts {
        run = match run {
            Some((first, end)) if s == end => Some((first, end + 1)),
            Some((first, end)) => {
                out.extend_from_slice(&first.to_be_bytes());
                out.extend_from_slice(&end.to_be_bytes());
                Some((s, s + 1))
            }
            None => Some((s, s + 1)),
        };
    }
    if let Some((first, end)) = run {
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&end.to_be_bytes());
    }
    out
}

fn corrupt(what: &str) -> Error {
    Error::internal(format!("a retryable write's record is corrupt: {what}"))
}

/// A record back: its `txnNumber`, its wall time and what it did.
fn decode(bytes: &[u8]) -> Result<(i64, bson::DateTime, Done)> {
    let d = RawDocument::from_bytes(bytes).map_err(|e| corrupt(&e.to_string()))?;
    let get_i64 = |k: &str| d.get_i64(k).map_err(|_| corrupt(k));
    let txn_number = get_i64("t")?;
    let wall = d.get_datetime("w").map_err(|_| corrupt("w"))?;
    let runs = d.get_binary("s").map_err(|_| corrupt("s"))?.bytes;
    if runs.len() % 8 != 0 {
        return Err(corrupt("s"));
    }
    let mut done = Done {
        n: u64::try_from(get_i64("n")?).unwrap_or(0),
        n_modified: u64::try_from(get_i64("m")?).unwrap_or(0),
        ..Done::default()
    };
    for run in runs.chunks_exact(8) {
        let first = u32::from_be_bytes([run[0], run[1], run[2], run[3]]);
        let end = u32::from_be_bytes([run[4], run[5], run[6], run[7]]);
        if end < first {
            return Err(corrupt("s"));
        }
        done.stmts.extend(first..end);
    }
    if let Ok(ups) = d.get_array("u") {
        for u in ups {
            let u = u
                .ok()
                .and_then(|u| u.as_document())
                .and_then(|u| Document::try_from(u).ok())
                .ok_or_else(|| corrupt("u"))?;
            let i = u.get_i64("i").map_err(|_| corrupt("u.i"))?;
            let id = u.get("_id").cloned().ok_or_else(|| corrupt("u._id"))?;
            done.upserted
                .push((u32::try_from(i).map_err(|_| corrupt("u.i"))?, id));
        }
    }
    if let Ok(f) = d.get_document("f") {
        done.fam = Some(Document::try_from(f).map_err(|_| corrupt("f"))?);
    }
    Ok((txn_number, wall, done))
}

/// Adds `more` (a later record of the same write) to `into`.
fn merge(into: &mut Done, more: Done) {
    into.stmts.extend(more.stmts);
    into.n += more.n;
    into.n_modified += more.n_modified;
    into.upserted.extend(more.upserted);
    if more.fam.is_some() {
        into.fam = more.fam;
    }
}

/// The session a record key belongs to (its prefix), or None for another key.
fn session_prefix(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(keys::META_RETRY_PREFIX)?;
    let len = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
    let end = keys::META_RETRY_PREFIX.len() + 2 + len;
    (key.len() == end + 4).then(|| &key[..end])
}

impl Engine {
    /// What `session`'s newest retryable write did (None: no record).
    pub fn retry_record(&self, session: &[u8]) -> Result<Option<RetryRecord>> {
        if session.len() > MAX_SESSION_KEY_BYTES {
            return Ok(None);
        }
        let prefix = keys::retry_record_prefix(session);
        let mut newest: Option<RetryRecord> = None;
        for kv in self.store.scan_prefix(Space::Meta, &prefix, false) {
            let (key, value) = kv.map_err(storage_err)?;
            let seq_bytes: [u8; 4] = key[prefix.len()..].try_into().map_err(|_| corrupt("key"))?;
            let next_seq = u32::from_be_bytes(seq_bytes).saturating_add(1);
            let (txn_number, _, done) = decode(&value)?;
            match &mut newest {
                Some(r) if r.txn_number == txn_number => {
                    merge(&mut r.done, done);
                    r.next_seq = r.next_seq.max(next_seq);
                }
                Some(r) if r.txn_number > txn_number => {}
                _ => {
                    newest = Some(RetryRecord {
                        txn_number,
                        next_seq,
                        done,
                    })
                }
            }
        }
        if let Some(r) = &mut newest {
            r.done.stmts.sort_unstable();
            r.done.stmts.dedup();
            r.done.upserted.sort_by_key(|(i, _)| *i);
        }
        Ok(newest)
    }

    /// Removes the records of sessions that wrote nothing retryable since `cutoff`
    /// (at most [`MAX_REAPED_PER_PASS`] records); returns how many it removed. In a
    /// replica set only the member that may write reaps (a commit the others apply).
    pub fn reap_retry_records(&self, cutoff: bson::DateTime) -> Result<usize> {
        if self.proposer().is_some_and(|p| !p.writable()) {
            return Ok(0);
        }
        let expired = self.expired_sessions(cutoff)?;
        if expired.is_empty() {
            return Ok(0);
        }
        let mut txn = self.begin();
        let mut removed = 0;
        for prefix in expired {
            // Again under the writer lock: a session that wrote since the scan stays.
            let mut keys = Vec::new();
            let mut fresh = false;
            for kv in self.store.scan_prefix(Space::Meta, &prefix, false) {
                let (key, value) = kv.map_err(storage_err)?;
                let (_, wall, _) = decode(&value)?;
                fresh |= wall >= cutoff;
                keys.push(key);
            }
            if fresh || removed + keys.len() > MAX_REAPED_PER_PASS {
                continue;
            }
            removed += keys.len();
            for key in keys {
                txn.batch().delete(Space::Meta, &key);
            }
        }
        txn.commit()?;
        Ok(removed)
    }

    /// The key prefixes of sessions whose newest record is older than `cutoff`.
    fn expired_sessions(&self, cutoff: bson::DateTime) -> Result<Vec<Vec<u8>>> {
        let mut expired = Vec::new();
        let mut current: Option<(Vec<u8>, bool)> = None;
        let mut records = 0;
        for kv in self
            .store
            .scan_prefix(Space::Meta, keys::META_RETRY_PREFIX, false)
        {
            let (key, value) = kv.map_err(storage_err)?;
            let prefix = session_prefix(&key).ok_or_else(|| corrupt("key"))?;
            let (_, wall, _) = decode(&value)?;
            match &mut current {
                Some((p, fresh)) if p.as_slice() == prefix => *fresh |= wall >= cutoff,
                _ => {
                    if let Some((p, false)) = current.take() {
                        expired.push(p);
                    }
                    current = Some((prefix.to_vec(), wall >= cutoff));
                }
            }
            records += 1;
            if records >= MAX_REAPED_PER_PASS {
                break;
            }
        }
        if let Some((p, false)) = current {
            expired.push(p);
        }
        Ok(expired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;

    #[test]
    fn statement_runs_round_trip() {
        let done = Done {
            stmts: vec![0, 1, 2, 5, 7, 8],
            n: 6,
            n_modified: 2,
            upserted: vec![(5, Bson::Int32(9))],
            fam: Some(bson::doc! {"n": 1i64, "e": true}),
        };
        assert_eq!(ranges(&done.stmts).len(), 3 * 8);
        let (t, _, back) = decode(encode(4, &done, bson::DateTime::now()).as_bytes()).unwrap();
        assert_eq!(t, 4);
        assert_eq!(back, done);
    }

    #[test]
    fn the_newest_txn_numbers_records_count_and_older_ones_are_ignored() {
        let t = TestEngine::open();
        let e = &t.engine;
        let session = b"s1".to_vec();
        let put = |txn_number: i64, seq: u32, stmts: Vec<u32>| {
            let mut w = RetryWrite::new(session.clone(), txn_number, stmts.clone(), seq);
            let mut txn = e.begin();
            txn.batch().put(Space::Meta, b"zz-test", b"x");
            let n = stmts.len() as u64;
            w.record(
                &mut txn,
                &Done {
                    stmts,
                    n,
                    ..Done::default()
                },
            );
            txn.commit().unwrap();
        };
        assert_eq!(e.retry_record(&session).unwrap(), None);
        put(1, 0, vec![0]);
        put(1, 1, vec![1, 2]);
        put(1, 2, vec![3]);
        let r = e.retry_record(&session).unwrap().unwrap();
        assert_eq!((r.txn_number, r.next_seq, r.done.n), (1, 3, 4));
        assert_eq!(r.done.stmts, vec![0, 1, 2, 3]);
        // Number 2 overwrites record 0; records 1 and 2 of number 1 are ignored.
        put(2, 0, vec![0]);
        let r = e.retry_record(&session).unwrap().unwrap();
        assert_eq!(
            (r.txn_number, r.next_seq, r.done.stmts.clone()),
            (2, 1, vec![0])
        );
        // Another session is apart, even one whose key extends this one's.
        assert_eq!(e.retry_record(b"s").unwrap(), None);
        assert_eq!(e.retry_record(b"s12").unwrap(), None);
    }

    #[test]
    fn a_commit_that_wrote_nothing_leaves_no_record() {
        let t = TestEngine::open();
        let e = &t.engine;
        let mut w = RetryWrite::new(b"s".to_vec(), 1, vec![0], 0);
        let mut txn = e.begin();
        w.record(
            &mut txn,
            &Done {
                stmts: vec![0],
                ..Done::default()
            },
        );
        // The record alone would be a write: it is not put into an empty batch.
        assert!(txn.batch().is_empty());
    }

    #[test]
    fn sessions_idle_past_the_cutoff_are_reaped() {
        let t = TestEngine::open();
        let e = &t.engine;
        for (session, stmts) in [(b"old".to_vec(), vec![0, 1]), (b"new".to_vec(), vec![0])] {
            let mut w = RetryWrite::new(session, 1, stmts.clone(), 0);
            let mut txn = e.begin();
            txn.batch().put(Space::Meta, b"zz-test", b"x");
            w.record(
                &mut txn,
                &Done {
                    stmts,
                    ..Done::default()
                },
            );
            txn.commit().unwrap();
        }
        let now = bson::DateTime::now();
        let later = bson::DateTime::from_millis(now.timestamp_millis() + 60_000);
        assert_eq!(
            e.reap_retry_records(bson::DateTime::from_millis(0))
                .unwrap(),
            0
        );
        assert_eq!(e.reap_retry_records(later).unwrap(), 2);
        assert_eq!(e.retry_record(b"old").unwrap(), None);
        assert_eq!(e.retry_record(b"new").unwrap(), None);
    }

    #[test]
    fn each_write_records_the_statements_that_changed_something() {
        use crate::catalog::namespace::Namespace;
        use crate::write::{DeleteOp, FindAndModify, UpdateOp};
        use bson::doc;
        let t = TestEngine::open();
        let e = &t.engine;
        let ns = Namespace::new("db", "c");
        let raw = |d: Document| RawDocumentBuf::from_document(&d).unwrap();
        e.insert(&ns, vec![raw(doc! {"_id": 1})], true).unwrap();
        // Unordered insert: statement 1 (a duplicate `_id`) fails and is not recorded.
        let docs = vec![
            raw(doc! {"_id": 2}),
            raw(doc! {"_id": 1}),
            raw(doc! {"_id": 3}),
        ];
        let mut w = RetryWrite::new(b"a".to_vec(), 5, vec![0, 1, 2], 0);
        let out = e
            .insert_recorded(&ns, docs, false, false, Some(&mut w))
            .unwrap();
        assert_eq!((out.n, out.errors.len()), (2, 1));
        let r = e.retry_record(b"a").unwrap().unwrap();
        assert_eq!(
            (r.txn_number, r.done.stmts.clone(), r.done.n),
            (5, vec![0, 2], 2)
        );
        // A retry of statement 1 alone: its own index is the command's.
        let mut w = RetryWrite::new(b"a".to_vec(), 5, vec![1], r.next_seq);
        e.insert_recorded(&ns, vec![raw(doc! {"_id": 4})], false, false, Some(&mut w))
            .unwrap();
        let r = e.retry_record(b"a").unwrap().unwrap();
        assert_eq!((r.done.stmts.clone(), r.done.n), (vec![0, 1, 2], 3));
        // Updates: one matching nothing (no record), one upsert, one change.
        let set = |q: Document, upsert: bool| UpdateOp {
            q,
            u: Bson::Document(doc! {"$set": {"x": 1}}),
            upsert,
            ..UpdateOp::default()
        };
        let ops = vec![
            set(doc! {"_id": 99}, false),
            set(doc! {"_id": 50}, true),
            set(doc! {"_id": 2}, false),
        ];
        let mut w = RetryWrite::new(b"a".to_vec(), 6, vec![0, 1, 2], 0);
        e.update_recorded(&ns, ops, true, Some(&mut w)).unwrap();
        let r = e.retry_record(b"a").unwrap().unwrap();
        assert_eq!(r.txn_number, 6);
        assert_eq!(r.done.stmts, vec![1, 2]);
        assert_eq!((r.done.n, r.done.n_modified), (2, 1));
        assert_eq!(r.done.upserted, vec![(1, Bson::Int32(50))]);
        // A delete.
        let del = DeleteOp {
            q: doc! {"_id": 3},
            limit: 1,
            ..DeleteOp::default()
        };
        let mut w = RetryWrite::new(b"a".to_vec(), 7, vec![0], 0);
        e.delete_recorded(&ns, vec![del], true, Some(&mut w))
            .unwrap();
        let r = e.retry_record(b"a").unwrap().unwrap();
        assert_eq!(
            (r.txn_number, r.done.stmts.clone(), r.done.n),
            (7, vec![0], 1)
        );
        // findAndModify keeps its outcome, the upserted document's value included.
        let req = FindAndModify {
            query: doc! {"_id": 60},
            update: Some(Bson::Document(doc! {"$set": {"y": 2}})),
            upsert: true,
            new: true,
            ..FindAndModify::default()
        };
        let mut w = RetryWrite::new(b"a".to_vec(), 8, vec![0], 0);
        let out = e.find_and_modify_recorded(&ns, &req, Some(&mut w)).unwrap();
        assert_eq!(out.value, Some(doc! {"_id": 60, "y": 2}));
        let r = e.retry_record(b"a").unwrap().unwrap();
        let kept = crate::write::FamOutcome::from_record(r.done.fam.as_ref().unwrap()).unwrap();
        assert_eq!((kept.n, kept.updated_existing), (1, false));
        assert_eq!(kept.upserted, Some(Bson::Int32(60)));
        assert_eq!(kept.value, out.value);
    }
}

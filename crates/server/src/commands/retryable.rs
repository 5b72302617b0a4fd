//! Retryable writes: a write command carrying `lsid` + `txnNumber` runs at most once.
//!
//! Two sources answer a retry. The reply cache (`sessions.rs`) keeps the last reply of
//! each session on this server, valid only within the replica-set term it was made in
//! (a single node's term is 0). Otherwise the engine's retry records
//! (`tailstream_engine::write::retry`), written in the same commits as the writes and
//! replicated with them, tell which of the command's statements ran: the retry runs
//! only the others and adds what the records show to its reply, as mongod answers a
//! retry from `config.transactions` and its oplog. So a write whose first attempt
//! committed on a primary that then failed is not applied again on the next one, and a
//! command cut off halfway (its time ran out, its client went away, the server was
//! killed) goes on where it stopped.

use super::testing::CLOSE_CONNECTION;
use super::write::{await_write_concern, parse_write_concern};
use crate::sessions::Retry;
use crate::state::ServerState;
use bson::{Bson, Document};
use std::sync::Arc;
use tailstream_engine::query::error::{Error, Result};
use tailstream_engine::write::{Done, RetryWrite, WriteOutcome};
use tailstream_engine::Committed;

/// What a retryable write runs: the engine's record keeper (the statements to run and
/// its session's record numbers), and what earlier attempts did.
pub struct Resume {
    pub retry: RetryWrite,
    /// The earlier attempts' statements and counts (empty for a first attempt).
    pub prior: Done,
}

/// What a retry adds to the engine's outcome once the statements ran.
pub struct Prior {
    stmt_ids: Vec<u32>,
    done: Done,
}

impl Resume {
    /// Keeps the statements this attempt runs (those the records do not show done).
    pub fn select<T>(&self, statements: Vec<T>) -> Vec<T> {
        if self.prior.stmts.is_empty() {
            return statements; // a first attempt runs them all
        }
        let run = self.retry.stmt_ids();
        statements
            .into_iter()
            .enumerate()
            .filter(|(i, _)| run.binary_search(&(*i as u32)).is_ok())
            .map(|(_, s)| s)
            .collect()
    }

    /// The record keeper handed to the engine, and what the reply needs after the run
    /// (None for a write that is not retryable).
    pub fn parts(resume: Option<Resume>) -> (Option<RetryWrite>, Option<Prior>) {
        match resume.map(Resume::split) {
            Some((retry, prior)) => (Some(retry), prior),
            None => (None, None),
        }
    }

    /// Splits off what the reply needs after the run: nothing for a first attempt
    /// (its statements are the command's, in order, and nothing ran before).
    fn split(self) -> (RetryWrite, Option<Prior>) {
        if self.prior.stmts.is_empty() {
            return (self.retry, None);
        }
        let stmt_ids = self.retry.stmt_ids().to_vec();
        let prior = Prior {
            stmt_ids,
            done: self.prior,
        };
        (self.retry, Some(prior))
    }
}

impl Prior {
    /// The engine's outcome of the statements run, as the whole command's: indexes
    /// back to the command's, and the earlier attempts' counts and upserts added.
    pub fn merge(&self, out: &mut WriteOutcome) {
        let index = |i: usize| self.stmt_ids.get(i).map_or(i, |s| *s as usize);
        for e in &mut out.errors {
            e.index = index(e.index);
        }
        for (i, _) in &mut out.upserted {
            *i = index(*i);
        }
        out.n += self.done.n;
        out.n_modified += self.done.n_modified;
        out.upserted.extend(
            self.done
                .upserted
                .iter()
                .map(|(i, id)| (*i as usize, id.clone())),
        );
        out.upserted.sort_by_key(|(i, _)| *i);
    }

    /// The reply's `retriedStmtIds` (mongod's: statements an earlier attempt ran).
    pub fn annotate(&self, reply: &mut Document) {
        if !self.done.stmts.is_empty() {
            let ids: Vec<Bson> = self
                .done
                .stmts
                .iter()
                .map(|s| Bson::Int32(i32::try_from(*s).unwrap_or(i32::MAX)))
                .collect();
            reply.insert("retriedStmtIds", ids);
        }
    }

    /// What an earlier attempt of a findAndModify returned, if it ran.
    pub fn find_and_modify(&self) -> Option<&Document> {
        self.done.fam.as_ref()
    }
}

/// Runs a write command's `statements` as `resume` says (all of them for a write that
/// is not retryable): `run` gets the statements to run and the record keeper, and the
/// outcome comes back as the whole command's, with what the earlier attempts did.
pub async fn resumed<T, F, Fut>(
    resume: Option<Resume>,
    statements: Vec<T>,
    run: F,
) -> Result<(WriteOutcome, Option<Prior>)>
where
    F: FnOnce(Vec<T>, Option<RetryWrite>) -> Fut,
    Fut: std::future::Future<Output = Result<WriteOutcome>>,
{
    let statements = match &resume {
        Some(r) => r.select(statements),
        None => statements,
    };
    let (retry, prior) = Resume::parts(resume);
    let mut out = if statements.is_empty() && prior.is_some() {
        WriteOutcome::default() // every statement ran before
    } else {
        run(statements, retry).await?
    };
    if let Some(p) = &prior {
        p.merge(&mut out);
    }
    Ok((out, prior))
}

/// This server's replica-set term (0 on a single node): the reply cache's epoch.
fn epoch(state: &ServerState) -> u64 {
    state
        .repl
        .member()
        .map_or(0, |m| m.raft.metrics().borrow().current_term)
}

/// What a retryable write of `statements` statements runs, from the cache or the
/// records; `Err(reply)` when it already ran whole (the cached reply).
fn resume(
    state: &ServerState,
    session: &[u8],
    txn_number: i64,
    statements: usize,
) -> Result<std::result::Result<Resume, Document>> {
    let all = || (0..statements).map(|i| i as u32).collect::<Vec<u32>>();
    let fresh = || Resume {
        retry: RetryWrite::new(session.to_vec(), txn_number, all(), 0),
        prior: Done::default(),
    };
    match state.retry_cache.check(session, txn_number, epoch(state))? {
        Retry::Done(reply) => return Ok(Err(reply)),
        Retry::New => return Ok(Ok(fresh())),
        Retry::Unknown => {}
    }
    let record = state.engine.retry_record(session)?;
    Ok(Ok(match record {
        Some(r) if r.txn_number > txn_number => {
            return Err(crate::sessions::too_old(session, txn_number, r.txn_number))
        }
        Some(r) if r.txn_number == txn_number => {
            let run = all()
                .into_iter()
                .filter(|s| r.done.stmts.binary_search(s).is_err())
                .collect();
            Resume {
                retry: RetryWrite::new(session.to_vec(), txn_number, run, r.next_seq),
                prior: r.done,
            }
        }
        _ => fresh(),
    }))
}

/// Runs a write of `statements` statements with retryable-write deduplication and the
/// write concern; `run` gets what to run (None: not a retryable write).
pub async fn retryable<F, Fut>(
    state: &Arc<ServerState>,
    cmd: &Document,
    statements: usize,
    run: F,
) -> Result<Document>
where
    F: FnOnce(Option<Resume>) -> Fut,
    Fut: std::future::Future<Output = Result<(Document, Option<Committed>)>>,
{
    let wc = parse_write_concern(cmd)?;
    let key = super::retry_key(cmd).map(|(lsid, txn)| (crate::sessions::session_key(lsid), txn));
    let mut to_run = None;
    if let Some((session, txn)) = &key {
        match resume(state, session, *txn, statements)? {
            Ok(r) => to_run = Some(r),
            Err(reply) => return Ok(reply),
        }
    }
    // Test hook: fail before the write, or drop the connection after it (the driver
    // retries, and the retry must get this reply, not write twice).
    let hook = match &key {
        Some(_) if state.config.test_commands_enabled() => {
            state.fail_points.on_transactional_write(statements)
        }
        _ => None,
    };
    let close = hook
        .as_ref()
        .map(|d| d.get_bool("closeConnection").unwrap_or(true))
        .unwrap_or(false);
    if let Some(code) = hook
        .as_ref()
        .and_then(|d| d.get("failBeforeCommitExceptionCode"))
        .and_then(tailstream_engine::find::as_i64)
    {
        // mongod ends the session (unless closeConnection: false), then fails the write.
        let code = if close { CLOSE_CONNECTION } else { code as i32 };
        return Err(Error::new(
            code,
            "Failing write for test due to failpoint onPrimaryTransactionalWrite",
        ));
    }
    let ran = run(to_run).await;
    let (mut reply, committed) =
        match ran.and_then(|(reply, committed)| match state_change_error(&reply) {
            Some(e) => Err(e),
            None => Ok((reply, committed)),
        }) {
            Ok(r) => r,
            Err(e) => {
                // Some statements may have committed: the retry asks the records.
                if let Some((session, _)) = &key {
                    state.retry_cache.forget(session);
                }
                return Err(e);
            }
        };
    // A `wtimeout` that passed while the set committed it (the gate set it as the
    // operation's replication deadline) gives mongod's writeConcernError beside the
    // outcome as it will be (the write stays queued, as mongod's stays applied).
    let timed_out = super::OPERATION
        .try_with(|op| op.replication_timed_out())
        .unwrap_or(false);
    if let Some(wce) = await_write_concern(state, wc, committed).await {
        reply.insert("writeConcernError", wce);
    }
    if let Some((session, txn)) = key {
        if reply.contains_key("writeErrors") || timed_out {
            // A statement that failed or was interrupted did not run: a retry runs
            // it again (and only it, by the records), as mongod does, so this reply
            // is not kept.
            state.retry_cache.forget(&session);
        } else {
            state
                .retry_cache
                .put(&session, txn, reply.clone(), epoch(state));
        }
    }
    if close {
        return Err(Error::new(
            CLOSE_CONNECTION,
            "connection closed by onPrimaryTransactionalWrite",
        ));
    }
    Ok(reply)
}

/// The codes of a member that stopped being primary mid-write (nothing proposed:
/// 10107; proposed, fate unknown: 11602).
const STATE_CHANGE_CODES: [i32; 2] = [10107, 11602];

/// A statement's error that ends the whole command, as mongod's interrupted writes do
/// (a state change fails the batch, not one statement): the statements before it stay
/// done, and a driver retries the command on the new primary (a retryable write runs
/// only what its records do not show).
fn state_change_error(reply: &Document) -> Option<Error> {
    let errors = reply.get_array("writeErrors").ok()?;
    errors.iter().find_map(|e| {
        let e = e.as_document()?;
        let code = e.get_i32("code").ok()?;
        STATE_CHANGE_CODES.contains(&code).then(|| {
            Error::new(
                code,
                e.get_str("errmsg").unwrap_or("not primary").to_string(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use tailstream_engine::write::WriteError;

    /// A statement that failed because the member lost the lead fails the command (a
    /// driver retries it); any other statement error stays a write error.
    #[test]
    fn a_lost_lead_mid_batch_is_the_commands_error() {
        let dup = doc! {"n": 1, "writeErrors": [{"index": 1, "code": 11000, "errmsg": "dup"}]};
        assert!(state_change_error(&dup).is_none());
        assert!(state_change_error(&doc! {"n": 2}).is_none());
        let lost = doc! {"n": 1, "writeErrors": [
            {"index": 1, "code": 11000, "errmsg": "dup"},
            {"index": 2, "code": 11602, "errmsg": "interrupted"},
        ]};
        let e = state_change_error(&lost).expect("a command error");
        assert_eq!((e.code, e.message.as_str()), (11602, "interrupted"));
    }

    #[test]
    fn a_retry_reports_the_whole_commands_indexes_and_counts() {
        // Statements 0 and 2 ran before (one upsert at 2); 1 and 3 run now.
        let prior = Prior {
            stmt_ids: vec![1, 3],
            done: Done {
                stmts: vec![0, 2],
                n: 2,
                n_modified: 1,
                upserted: vec![(2, Bson::Int32(7))],
                fam: None,
            },
        };
        let mut out = WriteOutcome {
            n: 1,
            n_modified: 0,
            upserted: vec![(0, Bson::Int32(5))],
            errors: vec![WriteError {
                index: 1,
                error: Error::new(11000, "dup"),
            }],
            committed: None,
        };
        prior.merge(&mut out);
        assert_eq!((out.n, out.n_modified), (3, 1));
        assert_eq!(out.upserted, vec![(1, Bson::Int32(5)), (2, Bson::Int32(7))]);
        assert_eq!(out.errors[0].index, 3);
        let mut reply = Document::new();
        prior.annotate(&mut reply);
        assert_eq!(reply, doc! {"retriedStmtIds": [0, 2]});
    }

    #[test]
    fn only_statements_not_done_are_selected() {
        let resume = Resume {
            retry: RetryWrite::new(b"s".to_vec(), 1, vec![1, 3], 2),
            prior: Done {
                stmts: vec![0, 2],
                ..Done::default()
            },
        };
        assert_eq!(resume.select(vec!["a", "b", "c", "d"]), vec!["b", "d"]);
    }
}

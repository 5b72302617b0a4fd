//! insert, update, delete and findAndModify: argument parsing, write concern
//! (a `j: true` or majority write is acknowledged only once it is on disk), and
//! retryable writes (a retried `lsid` + `txnNumber` gets the first reply again).

use super::in_transaction;
use super::retryable::{resumed, retryable};
use super::{
    blocking, check_fields, collection_arg, opt_bool, opt_doc, opt_doc_array, small_or_blocking,
    type_name,
};
use super::{DELETE_FIELDS, FIND_AND_MODIFY_FIELDS, INSERT_FIELDS, UPDATE_FIELDS};
use crate::state::ServerState;
use bson::{doc, Bson, Document, RawDocumentBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tailstream_engine::query::error::{code_name, codes, Error, Result};
use tailstream_engine::write::{DeleteOp, FamOutcome, FindAndModify, UpdateOp, WriteOutcome};
use tailstream_engine::{Committed, MAX_WRITE_BATCH};

/// Inserts of at most this many documents and bytes run on the connection's task
/// (see [`small_or_blocking`]); bigger ones on the blocking pool. 64 rather than 16:
/// a paced producer of 20 documents per insert at 20,000/s used 20% more server CPU
/// on the pool hand-off (two thread wake-ups per insert) than inline (4.5-4.8 s vs
/// 5.8-6.0 s per 200,000 documents); 64 KiB bound the time on the worker either way.
const SMALL_WRITE_DOCS: usize = 64;
const SMALL_WRITE_BYTES: usize = 64 * 1024;

/// What a write concern asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteConcern {
    /// Wait for the write to be on disk (j: true, w: "majority", fsync: true).
    pub durable: bool,
    /// `w: N`: how many members must have applied the write (0 and 1: this one).
    pub members: u32,
    /// `wtimeout`: how long to wait for those members (None: no limit).
    pub wtimeout: Option<std::time::Duration>,
    /// `w: "majority"`, or no `w` (a replica set's default is majority).
    pub majority: bool,
}

impl WriteConcern {
    /// `w` greater than the set's data-bearing members (100 UnsatisfiableWriteConcern).
    pub fn unsatisfiable(&self, state: &ServerState) -> bool {
        self.members as usize > crate::replset::data_bearing_members(state)
    }

    /// On a replica set's member, when `wtimeout` bounds the wait for the set to commit
    /// the write (`w: "majority"` or `w` > 1, as on mongod; not a `w` it cannot meet,
    /// which gets its own error): from now until then, as `op`'s replication deadline.
    pub fn bound_replication(
        &self,
        state: &ServerState,
        op: &tailstream_engine::query::script::Operation,
    ) {
        let waits_for_the_set = self.majority || self.members > 1;
        if let Some(wtimeout) = self.wtimeout {
            if state.repl.member().is_some() && waits_for_the_set && !self.unsatisfiable(state) {
                op.set_replication_deadline(Some(std::time::Instant::now() + wtimeout));
            }
        }
    }
}

pub fn parse_write_concern(cmd: &Document) -> Result<WriteConcern> {
    let Some(wc) = cmd.get("writeConcern") else {
        // The default write concern of a replica set is majority: durable.
        return Ok(WriteConcern {
            durable: true,
            majority: true,
            ..Default::default()
        });
    };
    let wc = match wc {
        Bson::Document(d) => d,
        other => return Err(super::wrong_field_type("writeConcern", other, "object")),
    };
    let mut out = WriteConcern::default();
    match wc.get("w") {
        None => {
            out.durable = true;
            out.majority = true;
        }
        Some(Bson::String(s)) if s == "majority" => {
            out.durable = true;
            out.majority = true;
        }
        Some(Bson::String(s)) => {
            return Err(Error::new(
                79,
                format!("Write Concern mode '{s}' is not known"),
            ));
        }
        Some(v) => match tailstream_engine::find::as_i64(v) {
            Some(n) if n < 0 => {
                return Err(Error::failed_to_parse(
                    "w has to be a non-negative number and not greater than 50",
                ))
            }
            Some(n) => out.members = n.min(i64::from(u32::MAX)) as u32,
            None => return Err(Error::failed_to_parse("w has to be a number or a string")),
        },
    }
    match wc.get("j") {
        Some(Bson::Boolean(true)) => out.durable = true,
        Some(Bson::Boolean(false)) => {}
        Some(v)
            if tailstream_engine::find::as_i64(v)
                .map(|n| n != 0)
                .unwrap_or(false) =>
        {
            out.durable = true
        }
        _ => {}
    }
    if wc.get_bool("fsync").unwrap_or(false) {
        out.durable = true;
    }
    out.wtimeout = wc
        .get("wtimeout")
        .and_then(tailstream_engine::find::as_i64)
        .filter(|ms| *ms > 0)
        .map(|ms| std::time::Duration::from_millis(ms as u64));
    Ok(out)
}

/// Waits as the write concern asks; returns a `writeConcernError` to add to the reply, if any.
pub async fn await_write_concern(
    state: &Arc<ServerState>,
    wc: WriteConcern,
    committed: Option<Committed>,
) -> Option<Document> {
    // A wait for the set already ended at the write's `wtimeout` (a queued write).
    if super::OPERATION
        .try_with(|op| op.replication_timed_out())
        .unwrap_or(false)
    {
        return Some(wtimeout_error(&wc));
    }
    if wc.durable {
        // Even a no-op write waits for what it read to be durable (as majority would).
        let seq = committed
            .map(|c| c.seq)
            .unwrap_or_else(|| state.engine.durability.last_committed());
        if let Err(e) = state.engine.durability.wait_synced(seq).await {
            // Applied, but not known to be on disk: mongod's shape for a write concern
            // that could not be met.
            return Some(write_concern_error(
                codes::OUT_OF_DISK_SPACE,
                &format!("the write could not be made durable: {e}"),
            ));
        }
    }
    if wc.unsatisfiable(state) {
        return Some(unsatisfiable_write_concern_error());
    }
    if wc.members > 1 {
        let ts = committed
            .and_then(|c| c.last_ts)
            .map_or_else(|| state.engine.cluster_time(), Into::into);
        if !crate::replset::wait_for_members(state, wc.members, ts, wc.wtimeout).await {
            return Some(wtimeout_error(&wc));
        }
    }
    None
}

/// mongod's `writeConcernError` when `wtimeout` passed before `w` members applied the
/// write (it stays applied where it is).
pub fn wtimeout_error(wc: &WriteConcern) -> Document {
    let mut e = write_concern_error(64, "waiting for replication timed out");
    let ms = wc.wtimeout.map_or(0, |d| d.as_millis() as i64);
    let w = if wc.majority {
        Bson::from("majority")
    } else {
        Bson::Int64(i64::from(wc.members))
    };
    e.insert(
        "errInfo",
        doc! {"wtimeout": true, "writeConcern": {"w": w, "wtimeout": ms, "provenance": "clientSupplied"}},
    );
    e
}

/// The `writeConcernError` of a `w` larger than the one member there is.
pub fn unsatisfiable_write_concern_error() -> Document {
    write_concern_error(
        codes::UNSATISFIABLE_WRITE_CONCERN,
        "Not enough data-bearing nodes",
    )
}

/// A reply's `writeConcernError`: the write is applied, its write concern not met.
fn write_concern_error(code: i32, errmsg: &str) -> Document {
    doc! {"code": code, "codeName": code_name(code), "errmsg": errmsg}
}

/// Refuses fields an update or delete statement does not define (mongod 7.0 has no
/// `sort` there, for example), as its IDL parser does.
fn check_statement_fields(path: &str, statement: &Document, allowed: &[&str]) -> Result<()> {
    match statement.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(Error::new(
            codes::UNRECOGNIZED_COMMAND_FIELD,
            format!("BSON field '{path}.{k}' is an unknown field."),
        )),
        None => Ok(()),
    }
}

/// A statement's `collation` (`update.updates.collation`, `delete.deletes.collation`),
/// checked and filled in by the engine.
fn statement_collation(path: &str, statement: &Document) -> Result<Option<Document>> {
    match statement.get("collation") {
        None => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d.clone())),
        Some(v) => Err(super::wrong_field_type(
            &format!("{path}.collation"),
            v,
            "object",
        )),
    }
}

/// The command's `let` variables with a statement's `c` constants over them.
fn merge_let(command_let: &Option<Document>, constants: Option<Document>) -> Option<Document> {
    match (command_let, constants) {
        (None, None) => None,
        (l, c) => {
            let mut vars = l.clone().unwrap_or_default();
            vars.extend(c.unwrap_or_default());
            Some(vars)
        }
    }
}

fn check_batch(n: usize) -> Result<()> {
    if n == 0 || n > MAX_WRITE_BATCH {
        return Err(Error::new(
            16,
            format!(
                "Write batch sizes must be between 1 and {MAX_WRITE_BATCH}. Got {n} operations."
            ),
        ));
    }
    Ok(())
}

/// Documents above mongod's internal limit (16 MiB + 16 KiB of command overhead) are
/// refused when the message is parsed, failing the whole command with 10334.
fn check_document_sizes(docs: &[RawDocumentBuf]) -> Result<()> {
    const MAX_INTERNAL: usize = 16 * 1024 * 1024 + 16 * 1024;
    for d in docs {
        let len = d.as_bytes().len();
        if len > MAX_INTERNAL {
            let first = d
                .iter()
                .next()
                .and_then(|e| e.ok())
                .map(|(k, _)| k.to_string())
                .unwrap_or_default();
            return Err(Error::new(
                codes::BSON_OBJECT_TOO_LARGE,
                format!("BSONObj size: {len} (0x{len:X}) is invalid. Size must be between 0 and 16793600(16MB) First element: {first}"),
            ));
        }
    }
    Ok(())
}

fn write_errors(out: &WriteOutcome) -> Option<Vec<Bson>> {
    if out.errors.is_empty() {
        return None;
    }
    Some(
        out.errors
            .iter()
            .map(|e| {
                let mut d = doc! {"index": e.index as i32, "code": e.error.code, "errmsg": e.error.message.clone()};
                if let Some(info) = &e.error.info {
                    for (k, v) in info {
                        d.insert(k.clone(), v.clone());
                    }
                }
                Bson::Document(d)
            })
            .collect(),
    )
}

pub async fn insert(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
    payload: Option<Vec<RawDocumentBuf>>,
) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, INSERT_FIELDS)?;
    let docs = match payload {
        Some(docs) => docs,
        None => opt_doc_array(cmd, "documents")?
            .ok_or_else(|| Error::missing_field("insert.documents"))?
            .iter()
            .map(|d| RawDocumentBuf::from_document(d).map_err(|e| Error::bad_value(e.to_string())))
            .collect::<Result<Vec<_>>>()?,
    };
    check_batch(docs.len())?;
    check_document_sizes(&docs)?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    if let Some(target) = state.engine.buckets_target(&ns) {
        return insert_buckets(state, target, docs, ordered).await;
    }
    let bypass = opt_bool(cmd, "bypassDocumentValidation")?.unwrap_or(false);
    let count = docs.len() as u64;
    if let Some(t) = crate::transactions::current() {
        let out = in_transaction(state, t, move |e, t| {
            e.transaction_insert(t, &ns, docs, ordered, bypass)
        })
        .await?;
        state.opcounters.insert.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_inserted
            .fetch_add(out.n, Ordering::Relaxed);
        return transaction_reply(doc! {"n": reply_int(out.n)}, &out);
    }
    let small = docs.len() <= SMALL_WRITE_DOCS
        && docs.iter().map(|d| d.as_bytes().len()).sum::<usize>() <= SMALL_WRITE_BYTES;
    retryable(state, cmd, count as usize, |resume| async move {
        let (out, prior) = resumed(resume, docs, |docs, mut retry| {
            small_or_blocking(state, small, move |e| {
                e.insert_recorded(&ns, docs, ordered, bypass, retry.as_mut())
            })
        })
        .await?;
        state.opcounters.insert.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_inserted
            .fetch_add(out.n, Ordering::Relaxed);
        let mut reply = doc! {"n": reply_int(out.n)};
        if let Some(we) = write_errors(&out) {
            reply.insert("writeErrors", we);
        }
        if let Some(p) = &prior {
            p.annotate(&mut reply);
        }
        Ok((reply, out.committed))
    })
    .await
}

/// Inserts into `<db>.system.buckets.<name>` (mongorestore's): each bucket document
/// is unpacked into its measurements, inserted into the time-series collection; `n`
/// counts buckets, and a bucket that cannot be unpacked or inserted is a write error.
async fn insert_buckets(
    state: &Arc<ServerState>,
    (base, spec): (
        tailstream_engine::namespace::Namespace,
        tailstream_engine::catalog::buckets::Spec,
    ),
    docs: Vec<RawDocumentBuf>,
    ordered: bool,
) -> Result<Document> {
    let count = docs.len();
    let (n, errors) = blocking(state, move |e| {
        let mut n = 0i64;
        let mut errors = Vec::new();
        for (index, raw) in docs.iter().enumerate() {
            let inserted = raw
                .to_document()
                .map_err(|err| Error::bad_value(err.to_string()))
                .and_then(|b| tailstream_engine::catalog::buckets::unpack_bucket(&spec, &b))
                .and_then(|measurements| e.insert_documents(&base, measurements, true))
                .and_then(|out| match out.errors.into_iter().next() {
                    Some(w) => Err(w.error),
                    None => Ok(()),
                });
            match inserted {
                Ok(()) => n += 1,
                Err(err) => {
                    errors.push(Bson::Document(doc! {
                        "index": index as i32, "code": err.code,
                        "codeName": code_name(err.code), "errmsg": err.message,
                    }));
                    if ordered {
                        break;
                    }
                }
            }
        }
        Ok((n, errors))
    })
    .await?;
    state
        .opcounters
        .insert
        .fetch_add(count as u64, Ordering::Relaxed);
    let mut reply = doc! {"n": reply_int(u64::try_from(n).unwrap_or(0))};
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    Ok(reply)
}

pub async fn update(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, UPDATE_FIELDS)?;
    let raw =
        opt_doc_array(cmd, "updates")?.ok_or_else(|| Error::missing_field("update.updates"))?;
    check_batch(raw.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    let bypass = opt_bool(cmd, "bypassDocumentValidation")?.unwrap_or(false);
    let let_vars = opt_doc(cmd, "let")?;
    let mut ops = Vec::with_capacity(raw.len());
    for u in &raw {
        check_statement_fields(
            "update.updates",
            u,
            &[
                "q",
                "u",
                "c",
                "upsert",
                "multi",
                "arrayFilters",
                "hint",
                "collation",
            ],
        )?;
        let q = match u.get("q") {
            Some(Bson::Document(q)) => q.clone(),
            Some(v) => return Err(super::wrong_field_type("update.updates.q", v, "object")),
            None => return Err(Error::missing_field("update.updates.q")),
        };
        let upd = match u.get("u") {
            Some(Bson::Array(stages)) => {
                tailstream_engine::query::update::validate_update_pipeline(stages)?;
                Bson::Array(stages.clone())
            }
            Some(v @ Bson::Document(_)) => v.clone(),
            Some(v) => {
                return Err(Error::failed_to_parse(format!(
                    "Update argument must be either an object or an array, got {}",
                    type_name(v)
                )))
            }
            None => return Err(Error::missing_field("update.updates.u")),
        };
        ops.push(UpdateOp {
            q,
            u: upd,
            multi: opt_bool(u, "multi")?.unwrap_or(false),
            upsert: opt_bool(u, "upsert")?.unwrap_or(false),
            array_filters: opt_doc_array(u, "arrayFilters")?,
            hint: u
                .get("hint")
                .cloned()
                .filter(|h| !matches!(h, Bson::Document(d) if d.is_empty())),
            let_vars: merge_let(&let_vars, opt_doc(u, "c")?),
            bypass_document_validation: bypass,
            collation: statement_collation("update.updates", u)?,
        });
    }
    let count = ops.len() as u64;
    if let Some(t) = crate::transactions::current() {
        let out = in_transaction(state, t, move |e, t| {
            e.transaction_update(t, &ns, ops, ordered)
        })
        .await?;
        state.opcounters.update.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_updated
            .fetch_add(out.n_modified, Ordering::Relaxed);
        return transaction_reply(update_reply(&out), &out);
    }
    retryable(state, cmd, count as usize, |resume| async move {
        let (out, prior) = resumed(resume, ops, |ops, mut retry| {
            blocking(state, move |e| {
                e.update_recorded(&ns, ops, ordered, retry.as_mut())
            })
        })
        .await?;
        state.opcounters.update.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_updated
            .fetch_add(out.n_modified, Ordering::Relaxed);
        let mut reply = update_reply(&out);
        if let Some(we) = write_errors(&out) {
            reply.insert("writeErrors", we);
        }
        if let Some(p) = &prior {
            p.annotate(&mut reply);
        }
        Ok((reply, out.committed))
    })
    .await
}

pub async fn delete(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, DELETE_FIELDS)?;
    let raw =
        opt_doc_array(cmd, "deletes")?.ok_or_else(|| Error::missing_field("delete.deletes"))?;
    check_batch(raw.len())?;
    let ordered = opt_bool(cmd, "ordered")?.unwrap_or(true);
    let let_vars = opt_doc(cmd, "let")?;
    let mut ops = Vec::with_capacity(raw.len());
    for d in &raw {
        check_statement_fields("delete.deletes", d, &["q", "limit", "hint", "collation"])?;
        let q = match d.get("q") {
            Some(Bson::Document(q)) => q.clone(),
            Some(v) => return Err(super::wrong_field_type("delete.deletes.q", v, "object")),
            None => return Err(Error::missing_field("delete.deletes.q")),
        };
        let limit = match d.get("limit") {
            Some(v) => tailstream_engine::find::as_i64(v).ok_or_else(|| {
                Error::type_mismatch("BSON field 'delete.deletes.limit' must be a number")
            })?,
            None => return Err(Error::missing_field("delete.deletes.limit")),
        };
        ops.push(DeleteOp {
            q,
            limit,
            hint: d
                .get("hint")
                .cloned()
                .filter(|h| !matches!(h, Bson::Document(d) if d.is_empty())),
            let_vars: let_vars.clone(),
            collation: statement_collation("delete.deletes", d)?,
        });
    }
    let count = ops.len() as u64;
    if let Some(t) = crate::transactions::current() {
        let out = in_transaction(state, t, move |e, t| {
            e.transaction_delete(t, &ns, ops, ordered)
        })
        .await?;
        state.opcounters.delete.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_deleted
            .fetch_add(out.n, Ordering::Relaxed);
        return transaction_reply(doc! {"n": reply_int(out.n)}, &out);
    }
    retryable(state, cmd, count as usize, |resume| async move {
        let (out, prior) = resumed(resume, ops, |ops, mut retry| {
            blocking(state, move |e| {
                e.delete_recorded(&ns, ops, ordered, retry.as_mut())
            })
        })
        .await?;
        state.opcounters.delete.fetch_add(count, Ordering::Relaxed);
        state
            .metrics
            .docs_deleted
            .fetch_add(out.n, Ordering::Relaxed);
        let mut reply = doc! {"n": reply_int(out.n)};
        if let Some(we) = write_errors(&out) {
            reply.insert("writeErrors", we);
        }
        if let Some(p) = &prior {
            p.annotate(&mut reply);
        }
        Ok((reply, out.committed))
    })
    .await
}

pub async fn find_and_modify(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, FIND_AND_MODIFY_FIELDS)?;
    let update = match cmd.get("update") {
        None | Some(Bson::Null) => None,
        Some(v @ (Bson::Document(_) | Bson::Array(_))) => Some(v.clone()),
        Some(v) => {
            return Err(Error::failed_to_parse(format!(
                "Update argument must be either an object or an array, got {}",
                type_name(v)
            )))
        }
    };
    let req = FindAndModify {
        query: opt_doc(cmd, "query")?.unwrap_or_default(),
        sort: opt_doc(cmd, "sort")?,
        remove: opt_bool(cmd, "remove")?.unwrap_or(false),
        update,
        new: opt_bool(cmd, "new")?.unwrap_or(false),
        fields: opt_doc(cmd, "fields")?,
        upsert: opt_bool(cmd, "upsert")?.unwrap_or(false),
        array_filters: opt_doc_array(cmd, "arrayFilters")?,
        hint: cmd
            .get("hint")
            .cloned()
            .filter(|h| !matches!(h, Bson::Document(d) if d.is_empty())),
        let_vars: opt_doc(cmd, "let")?,
        bypass_document_validation: opt_bool(cmd, "bypassDocumentValidation")?.unwrap_or(false),
        collation: opt_doc(cmd, "collation")?,
    };
    let in_txn = crate::transactions::current();
    let in_transaction_now = in_txn.is_some();
    let run = |resume: Option<super::retryable::Resume>| async move {
        let remove = req.remove;
        let (mut retry, prior) = super::retryable::Resume::parts(resume);
        let earlier = prior
            .as_ref()
            .and_then(|p| p.find_and_modify())
            .and_then(FamOutcome::from_record);
        let out = match (in_txn, earlier) {
            (_, Some(out)) => out, // an earlier attempt ran it
            (Some(t), None) => {
                in_transaction(state, t, move |e, t| {
                    e.transaction_find_and_modify(t, &ns, &req)
                })
                .await?
            }
            (None, None) => {
                blocking(state, move |e| {
                    e.find_and_modify_recorded(&ns, &req, retry.as_mut())
                })
                .await?
            }
        };
        if remove {
            state.opcounters.delete.fetch_add(1, Ordering::Relaxed);
        } else {
            state.opcounters.update.fetch_add(1, Ordering::Relaxed);
        }
        let mut last = doc! {"n": reply_int(out.n)};
        if !remove {
            last.insert("updatedExisting", out.updated_existing);
        }
        if let Some(id) = &out.upserted {
            last.insert("upserted", id.clone());
        }
        let value = out.value.map(Bson::Document).unwrap_or(Bson::Null);
        let mut reply = doc! {"lastErrorObject": last, "value": value};
        if let Some(p) = &prior {
            p.annotate(&mut reply);
        }
        Ok((reply, out.committed))
    };
    if in_transaction_now {
        // Not a retryable write: every command of a transaction has its txnNumber.
        let (reply, _) = run(None).await?;
        return Ok(reply);
    }
    retryable(state, cmd, 1, run).await
}

/// A count in a write reply (`n`, `nModified`): a 32-bit int, as mongod's write
/// replies declare it (write_ops.idl `type: int`). Drivers that decode 64-bit ints as
/// BigInt or Long (the Node driver with `useBigInt64`, mongosh) otherwise show or sum
/// them as such.
fn reply_int(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The reply fields of an update: n, nModified, upserted.
fn update_reply(out: &WriteOutcome) -> Document {
    let mut reply = doc! {"n": reply_int(out.n), "nModified": reply_int(out.n_modified)};
    if !out.upserted.is_empty() {
        let ups: Vec<Bson> = out
            .upserted
            .iter()
            .map(|(i, id)| Bson::Document(doc! {"index": *i as i32, "_id": id.clone()}))
            .collect();
        reply.insert("upserted", ups);
    }
    reply
}

/// The reply of a write in a transaction. A write conflict fails the whole command
/// (with its TransientTransactionError label, so the driver may retry the
/// transaction), as in mongod; other errors are write errors.
fn transaction_reply(mut reply: Document, out: &WriteOutcome) -> Result<Document> {
    if let Some(e) = out
        .errors
        .iter()
        .find(|e| e.error.code == codes::WRITE_CONFLICT)
    {
        return Err(e.error.clone());
    }
    if let Some(we) = write_errors(out) {
        reply.insert("writeErrors", we);
    }
    Ok(reply)
}

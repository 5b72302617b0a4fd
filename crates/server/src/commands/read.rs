//! find, getMore, killCursors, count, distinct, aggregate and explain.

use super::{
    blocking, check_fields, collection_arg, opt_bool, opt_doc, opt_doc_array, opt_i64, type_name,
};
use super::{Output, RawCursor};
use super::{AGGREGATE_FIELDS, COUNT_FIELDS, DISTINCT_FIELDS, FIND_FIELDS, GET_MORE_FIELDS};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::find::{AggregateOptions, CursorBatch, FindRequest};
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::read::get_more::GetMoreRequest;

fn cursor_reply(batch: CursorBatch, first: bool) -> Document {
    let key = if first { "firstBatch" } else { "nextBatch" };
    let docs: Vec<Bson> = batch.docs.into_iter().map(Bson::Document).collect();
    doc! {"cursor": {key: docs, "id": batch.cursor_id, "ns": batch.ns}}
}

/// A getMore/aggregate reply: change-stream batches and raw tailable batches go out
/// as raw BSON.
fn cursor_output(batch: CursorBatch, first: bool) -> Output {
    assert!(
        batch.docs.is_empty() || batch.raw_docs.is_empty(),
        "a batch of both decoded and raw documents"
    );
    if batch.post_batch_resume_token.is_some() || !batch.raw_docs.is_empty() {
        Output::Cursor(RawCursor {
            first,
            docs: batch.raw_docs,
            post_batch_resume_token: batch.post_batch_resume_token,
            bucket_fields: batch.bucket_fields,
            id: batch.cursor_id,
            ns: batch.ns,
        })
    } else {
        Output::Doc(cursor_reply(batch, first))
    }
}

/// A non-negative integer option of find (mongod's IDL error 51024 otherwise).
fn non_negative(cmd: &Document, field: &str) -> Result<Option<i64>> {
    match opt_i64(cmd, field)? {
        Some(v) if v < 0 => Err(Error::new(
            51024,
            format!("BSON field '{field}' value must be >= 0, actual value '{v}'"),
        )),
        other => Ok(other),
    }
}

fn parse_find(cmd: &Document) -> Result<FindRequest> {
    let skip = non_negative(cmd, "skip")?.unwrap_or(0);
    let limit = non_negative(cmd, "limit")?;
    let batch_size = non_negative(cmd, "batchSize")?;
    Ok(FindRequest {
        filter: opt_doc(cmd, "filter")?.unwrap_or_default(),
        projection: opt_doc(cmd, "projection")?,
        sort: opt_doc(cmd, "sort")?,
        skip: skip as u64,
        limit,
        batch_size,
        single_batch: opt_bool(cmd, "singleBatch")?.unwrap_or(false),
        hint: cmd
            .get("hint")
            .cloned()
            .filter(|h| !matches!(h, Bson::Document(d) if d.is_empty())),
        no_cursor_timeout: opt_bool(cmd, "noCursorTimeout")?.unwrap_or(false),
        lsid: cmd.get("lsid").cloned(),
        let_vars: opt_doc(cmd, "let")?,
        tailable: opt_bool(cmd, "tailable")?.unwrap_or(false),
        await_data: opt_bool(cmd, "awaitData")?.unwrap_or(false),
        min: opt_doc(cmd, "min")?,
        max: opt_doc(cmd, "max")?,
        return_key: opt_bool(cmd, "returnKey")?.unwrap_or(false),
        collation: opt_doc(cmd, "collation")?,
        allow_disk_use: opt_bool(cmd, "allowDiskUse")?,
        max_sort_bytes: None,
    })
}

pub async fn find(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, FIND_FIELDS)?;
    let mut req = parse_find(cmd)?;
    req.max_sort_bytes = state.max_blocking_sort_bytes();
    state.opcounters.query.fetch_add(1, Ordering::Relaxed);
    if req.tailable && crate::transactions::current().is_some() {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            "It is illegal to open a tailable cursor in a transaction",
        ));
    }
    if let Some(view) = crate::transactions::read_view(state, cmd)? {
        let at = view.at_cluster_time();
        let batch = view
            .read(state, move |e, t| e.transaction_find(t, &ns, req))
            .await?;
        return Ok(with_cluster_time(cursor_reply(batch, true), at));
    }
    let batch = blocking(state, move |e| e.find(&ns, req)).await?;
    Ok(cursor_reply(batch, true))
}

pub async fn get_more(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Output> {
    let id = match cmd.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(v) => return Err(super::wrong_field_type("getMore.getMore", v, "long")),
        None => return Err(Error::failed_to_parse("getMore requires a cursor id")),
    };
    let coll = match cmd.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(v) => return Err(super::wrong_field_type("getMore.collection", v, "string")),
        None => return Err(Error::missing_field("getMore.collection")),
    };
    check_fields(cmd, GET_MORE_FIELDS)?;
    let batch_size = opt_i64(cmd, "batchSize")?;
    let max_await = match opt_i64(cmd, "maxTimeMS")? {
        Some(ms) if ms < 0 => {
            return Err(Error::bad_value(
                "maxTimeMS value for getMore must be non-negative",
            ))
        }
        Some(ms) => Duration::from_millis(ms as u64),
        None => tailstream_engine::read::get_more::DEFAULT_AWAIT,
    };
    let ns = format!("{db}.{coll}");
    state.opcounters.getmore.fetch_add(1, Ordering::Relaxed);
    if state.config.test_commands_enabled() && state.engine.cursors.get(id).is_some() {
        if let Some(e) = state.fail_points.fail_get_more() {
            let e = state.engine.label_get_more_error(id, e);
            // As in mongod, an error after the cursor was checked out kills the cursor.
            state.engine.cursors.remove(id);
            return Err(e);
        }
    }
    // The engine looks, waits and looks again; this getMore's operation ends the wait
    // when killed (killOp, the client gone).
    let op = super::OPERATION.with(Arc::clone);
    let req = GetMoreRequest {
        cursor_id: id,
        ns: ns.clone(),
        batch_size,
        max_await,
        op: Some(Arc::clone(&op)),
    };
    let read_on_pool = || {
        let ns = ns.clone();
        blocking(state, move |e| e.get_more(id, &ns, batch_size))
    };
    let batch = state
        .engine
        .get_more_awaiting(req, read_on_pool, state.current_ops.interrupted(&op))
        .await?;
    Ok(cursor_output(batch, false))
}

pub fn kill_cursors(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    collection_arg(cmd, db)?;
    let ids: Vec<i64> = match cmd.get("cursors") {
        Some(Bson::Array(a)) => a
            .iter()
            .map(|v| match v {
                Bson::Int64(i) => Ok(*i),
                other => Err(super::wrong_field_type(
                    "killCursors.cursors",
                    other,
                    "long",
                )),
            })
            .collect::<Result<_>>()?,
        _ => return Err(Error::missing_field("killCursors.cursors")),
    };
    let (killed, not_found) = state.engine.kill_cursors(&ids);
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": Vec::<i64>::new(),
        "cursorsUnknown": Vec::<i64>::new(),
    })
}

pub async fn count(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, COUNT_FIELDS)?;
    let query = opt_doc(cmd, "query")?.unwrap_or_default();
    let skip = opt_i64(cmd, "skip")?.unwrap_or(0);
    if skip < 0 {
        return Err(Error::bad_value(format!(
            "skip value is negative in count query: {skip}"
        )));
    }
    // A negative limit counts like its absolute value, as mongod does.
    let limit = opt_i64(cmd, "limit")?.unwrap_or(0).unsigned_abs();
    let hint = cmd
        .get("hint")
        .cloned()
        .filter(|h| !matches!(h, Bson::Document(d) if d.is_empty()));
    let collation = opt_doc(cmd, "collation")?;
    state.opcounters.command.fetch_add(0, Ordering::Relaxed);
    let n = blocking(state, move |e| {
        e.count(
            &ns,
            &query,
            skip as u64,
            limit,
            hint.as_ref(),
            collation.as_ref(),
        )
    })
    .await?;
    // As mongod (`appendNumber`): a 32-bit int when it fits.
    Ok(doc! {"n": tailstream_engine::ddl::stored_number(i64::try_from(n).unwrap_or(i64::MAX))})
}

pub async fn distinct(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, DISTINCT_FIELDS)?;
    let key = match cmd.get("key") {
        Some(Bson::String(k)) => k.clone(),
        Some(v) => return Err(super::wrong_field_type("distinct.key", v, "string")),
        None => return Err(Error::missing_field("distinct.key")),
    };
    let query = opt_doc(cmd, "query")?.unwrap_or_default();
    let collation = opt_doc(cmd, "collation")?;
    let Some(view) = crate::transactions::read_view(state, cmd)? else {
        let values = blocking(state, move |e| {
            e.distinct(&ns, &key, &query, collation.as_ref())
        })
        .await?;
        return Ok(doc! {"values": values});
    };
    let at = view.at_cluster_time();
    let values = view
        .read(state, move |e, t| {
            let docs = e.transaction_documents(t, &ns)?;
            e.distinct_in(&ns, &key, &query, Some(docs), collation.as_ref())
        })
        .await?;
    let mut reply = doc! {"values": values};
    if let Some(at) = at {
        reply.insert("atClusterTime", at);
    }
    Ok(reply)
}

pub async fn aggregate(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Output> {
    let coll = match cmd.get("aggregate") {
        Some(Bson::String(c)) => Some(c.clone()),
        Some(v) if tailstream_engine::find::as_i64(v) == Some(1) => None,
        Some(v) => {
            return Err(Error::new(
                codes::FAILED_TO_PARSE,
                format!(
                    "Invalid {} argument for aggregate: must be a string or 1",
                    type_name(v)
                ),
            ))
        }
        None => return Err(Error::failed_to_parse("aggregate requires a collection")),
    };
    check_fields(cmd, AGGREGATE_FIELDS)?;
    let pipeline = opt_doc_array(cmd, "pipeline")?
        .ok_or_else(|| Error::missing_field("aggregate.pipeline"))?;
    if opt_bool(cmd, "explain")?.unwrap_or(false) {
        return Ok(Output::Doc(
            doc! {"explainVersion": "1", "stages": pipeline.into_iter().map(Bson::Document).collect::<Vec<_>>()},
        ));
    }
    let cursor =
        match cmd.get("cursor") {
            Some(Bson::Document(c)) => c.clone(),
            Some(v) => return Err(super::wrong_field_type("aggregate.cursor", v, "object")),
            None => return Err(Error::failed_to_parse(
                "The 'cursor' option is required, except for aggregate with the explain argument",
            )),
        };
    let batch_size = opt_i64(&cursor, "batchSize")?;
    let lsid = cmd.get("lsid").cloned();
    if let Some(Ok(opts)) = pipeline.first().map(|s| s.get_document("$changeStream")) {
        if pipeline[0].len() != 1 {
            return Err(Error::new(
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            ));
        }
        if crate::transactions::current().is_some() {
            return Err(Error::new(
                codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                "Stage not supported inside of a multi-document transaction: $changeStream",
            ));
        }
        if let Some(level) =
            opt_doc(cmd, "readConcern")?.and_then(|rc| rc.get_str("level").ok().map(str::to_string))
        {
            if level != "majority" {
                return Err(Error::new(
                    codes::INVALID_OPTIONS,
                    format!("$changeStream requires read concern 'majority'; '{level}' is not supported"),
                ));
            }
        }
        let opts = opts.clone();
        let db = db.to_string();
        let collation = opt_doc(cmd, "collation")?;
        state.opcounters.command.fetch_add(0, Ordering::Relaxed);
        let batch = blocking(state, move |e| {
            e.open_change_stream(
                &db,
                coll.as_deref(),
                &opts,
                &pipeline[1..],
                batch_size,
                lsid,
                collation.as_ref(),
            )
        })
        .await?;
        return Ok(cursor_output(batch, true));
    }
    if let Some(s) = pipeline.first().and_then(|s| s.get("$changeStream")) {
        return Err(Error::type_mismatch(format!(
            "$changeStream stage expects a document as argument, got {}",
            type_name(s)
        )));
    }
    if pipeline
        .iter()
        .skip(1)
        .any(|s| s.contains_key("$changeStream"))
    {
        return Err(Error::new(
            40602,
            "$changeStream is only valid as the first stage in a pipeline",
        ));
    }
    let pipeline = list_local_sessions(state, coll.is_some(), pipeline)?;
    let pipeline = current_op_stage(state, db, coll.is_some(), pipeline)?;
    let pipeline = super::stages::replace_source_stage(state, db, coll.as_deref(), pipeline)?;
    let db = db.to_string();
    let writes = pipeline
        .last()
        .map(|s| s.contains_key("$out") || s.contains_key("$merge"))
        .unwrap_or(false);
    let let_vars = opt_doc(cmd, "let")?;
    let collation = opt_doc(cmd, "collation")?;
    let opts = AggregateOptions {
        hint: aggregate_hint(cmd)?,
        allow_disk_use: cmd.get_bool("allowDiskUse").ok(),
        max_sort_bytes: state.max_blocking_sort_bytes(),
        max_group_bytes: state.max_group_bytes(),
    };
    if writes && crate::transactions::current().is_some() {
        return Err(Error::new(
            codes::OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
            "$out and $merge cannot be used in a transaction",
        ));
    }
    if writes
        && cmd
            .get_document("readConcern")
            .ok()
            .and_then(|rc| rc.get_str("level").ok())
            == Some("linearizable")
    {
        return Err(Error::new(
            codes::INVALID_OPTIONS,
            "$out and $merge cannot be used with a 'linearizable' read concern level",
        ));
    }
    let view = crate::transactions::read_view(state, cmd)?;
    let at = view.as_ref().and_then(|v| v.at_cluster_time());
    let batch = match view {
        Some(view) => {
            view.read(state, move |e, t| {
                let docs = match coll.as_deref() {
                    Some(c) => Some(e.transaction_documents(
                        t,
                        &tailstream_engine::namespace::Namespace::new(&db, c),
                    )?),
                    None => None,
                };
                e.aggregate_in(
                    &db,
                    coll.as_deref(),
                    &pipeline,
                    batch_size,
                    lsid,
                    let_vars.as_ref(),
                    docs,
                    collation.as_ref(),
                    opts,
                )
            })
            .await?
        }
        None => {
            blocking(state, move |e| {
                e.aggregate(
                    &db,
                    coll.as_deref(),
                    &pipeline,
                    batch_size,
                    lsid,
                    let_vars.as_ref(),
                    collation.as_ref(),
                    opts,
                )
            })
            .await?
        }
    };
    let mut write_concern_error = None;
    if writes {
        let wc = super::write::parse_write_concern(cmd)?;
        write_concern_error = super::write::await_write_concern(state, wc, None).await;
    }
    match (cursor_output(batch, true), at) {
        (Output::Doc(d), Some(at)) => Ok(Output::Doc(with_cluster_time(d, Some(at)))),
        // $out / $merge report a write concern they could not satisfy, as writes do.
        (Output::Doc(mut d), None) if write_concern_error.is_some() => {
            d.insert("writeConcernError", write_concern_error.expect("checked"));
            Ok(Output::Doc(d))
        }
        (out, _) => Ok(out),
    }
}

/// `aggregate`'s `hint`: an index name or key pattern (an empty one: none), as mongod
/// checks it.
fn aggregate_hint(cmd: &Document) -> Result<Option<Bson>> {
    match cmd.get("hint") {
        None => Ok(None),
        Some(Bson::Document(d)) if d.is_empty() => Ok(None),
        Some(h @ (Bson::String(_) | Bson::Document(_))) => Ok(Some(h.clone())),
        Some(_) => Err(Error::failed_to_parse(
            "hint must be specified as a string representing an index name, or an object \
             representing an index's key pattern",
        )),
    }
}

/// A snapshot read's reply names the time it read at (`cursor.atClusterTime`), which
/// the driver's snapshot session sends back in its next reads.
fn with_cluster_time(mut reply: Document, at: Option<bson::Timestamp>) -> Document {
    if let (Some(at), Ok(cursor)) = (at, reply.get_document_mut("cursor")) {
        cursor.insert("atClusterTime", at);
    }
    reply
}

/// A pipeline starting with `$listLocalSessions`, with that stage replaced by the
/// `$documents` it yields (the sessions this server has seen).
fn list_local_sessions(
    state: &ServerState,
    on_collection: bool,
    mut pipeline: Vec<Document>,
) -> Result<Vec<Document>> {
    let Some(arg) = pipeline.first().and_then(|s| s.get("$listLocalSessions")) else {
        return Ok(pipeline);
    };
    if on_collection {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            "$listLocalSessions must be run against the database with {aggregate: 1}, not a collection",
        ));
    }
    let Bson::Document(spec) = arg else {
        return Err(Error::type_mismatch(format!(
            "$listLocalSessions options must be specified in an object, but found: {}",
            type_name(arg)
        )));
    };
    let sessions: Vec<Bson> = state
        .local_sessions
        .list(spec)
        .into_iter()
        .map(Bson::Document)
        .collect();
    pipeline[0] = doc! {"$documents": sessions};
    Ok(pipeline)
}

/// A pipeline starting with `$currentOp`, with that stage replaced by the `$documents`
/// of the report (see `crate::current_op`).
fn current_op_stage(
    state: &ServerState,
    db: &str,
    on_collection: bool,
    mut pipeline: Vec<Document>,
) -> Result<Vec<Document>> {
    if pipeline
        .iter()
        .skip(1)
        .any(|s| s.contains_key("$currentOp"))
    {
        return Err(Error::new(
            40602,
            "$currentOp is only valid as the first stage in a pipeline",
        ));
    }
    let Some(arg) = pipeline.first().and_then(|s| s.get("$currentOp")) else {
        return Ok(pipeline);
    };
    if db != "admin" || on_collection {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            "$currentOp must be run against the 'admin' database with {aggregate: 1}",
        ));
    }
    let opts = crate::current_op::stage_options(state, arg)?;
    let ops: Vec<Bson> = state
        .current_ops
        .report(state, &opts)
        .into_iter()
        .map(Bson::Document)
        .collect();
    // Literal: the commands in the report have `$`-prefixed fields ($db, $clusterTime),
    // which `$documents` would otherwise read as expressions.
    pipeline[0] = doc! {"$documents": {"$literal": ops}};
    Ok(pipeline)
}

pub async fn explain(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let inner = opt_doc(cmd, "explain")?
        .ok_or_else(|| Error::failed_to_parse("explain requires a command document"))?;
    let name = inner.keys().next().cloned().unwrap_or_default();
    let verbosity = cmd
        .get_str("verbosity")
        .unwrap_or("allPlansExecution")
        .to_string();
    let ns = match inner.get(&name) {
        Some(Bson::String(c)) => Namespace::new(db, c),
        _ => Namespace::new(db, "$cmd"),
    };
    let (filter, sort, hint) = match name.as_str() {
        "find" => (
            opt_doc(&inner, "filter")?.unwrap_or_default(),
            opt_doc(&inner, "sort")?,
            inner.get("hint").cloned(),
        ),
        "count" => (
            opt_doc(&inner, "query")?.unwrap_or_default(),
            None,
            inner.get("hint").cloned(),
        ),
        "distinct" => (opt_doc(&inner, "query")?.unwrap_or_default(), None, None),
        "aggregate" => {
            let pipeline = opt_doc_array(&inner, "pipeline")?.unwrap_or_default();
            let filter = pipeline
                .first()
                .and_then(|s| s.get_document("$match").ok().cloned())
                .unwrap_or_default();
            (filter, None, None)
        }
        "update" => {
            let ups = opt_doc_array(&inner, "updates")?.unwrap_or_default();
            (
                ups.first()
                    .and_then(|u| u.get_document("q").ok().cloned())
                    .unwrap_or_default(),
                None,
                None,
            )
        }
        "delete" => {
            let ds = opt_doc_array(&inner, "deletes")?.unwrap_or_default();
            (
                ds.first()
                    .and_then(|u| u.get_document("q").ok().cloned())
                    .unwrap_or_default(),
                None,
                None,
            )
        }
        "findAndModify" | "findandmodify" => (
            opt_doc(&inner, "query")?.unwrap_or_default(),
            opt_doc(&inner, "sort")?,
            None,
        ),
        other => {
            return Err(Error::new(
                codes::COMMAND_NOT_FOUND,
                format!("Explain failed due to unknown command: {other}"),
            ))
        }
    };
    let ns_c = ns.clone();
    let f = filter.clone();
    let hint = hint.filter(|h| !matches!(h, Bson::Document(d) if d.is_empty()));
    // The explained operation's collation: the command's, or its first statement's.
    let collation = match name.as_str() {
        "update" | "delete" => {
            let field = if name == "update" {
                "updates"
            } else {
                "deletes"
            };
            opt_doc_array(&inner, field)?
                .unwrap_or_default()
                .first()
                .and_then(|s| s.get_document("collation").ok().cloned())
        }
        _ => opt_doc(&inner, "collation")?,
    };
    let winning = blocking(state, move |e| {
        e.explain_find(&ns_c, &f, sort.as_ref(), hint.as_ref(), collation.as_ref())
    })
    .await?;
    let mut reply = doc! {
        "explainVersion": "1",
        "queryPlanner": {
            "namespace": ns.full(),
            "parsedQuery": filter,
            "winningPlan": winning.clone(),
            "rejectedPlans": [],
        },
        "command": inner.clone(),
        "serverInfo": {"host": state.config.advertised_host(), "port": state.config.port as i32, "version": super::handshake::VERSION},
    };
    if verbosity != "queryPlanner" {
        let stats = if name == "find" {
            find_execution_stats(state, ns, &inner, &winning).await?
        } else {
            doc! {"executionSuccess": true}
        };
        reply.insert("executionStats", stats);
    }
    Ok(reply)
}

/// explain's `executionStats` of a find: the query runs to its end (its documents
/// counted, not returned) and the figures are its operation's (`op_stats`), the plan's
/// stages annotated as mongod's are.
async fn find_execution_stats(
    state: &Arc<ServerState>,
    ns: Namespace,
    find: &Document,
    winning: &Document,
) -> Result<Document> {
    let mut req = parse_find(find)?;
    req.max_sort_bytes = state.max_blocking_sort_bytes();
    req.tailable = false;
    req.await_data = false;
    req.single_batch = false;
    let started = std::time::Instant::now();
    let returned = blocking(state, move |e| {
        let mut n = 0u64;
        e.for_each_batch(&ns, req, None, |docs| {
            n += docs.len() as u64;
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok(n)
    })
    .await?;
    let millis = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let examined = super::OPERATION.with(|op| op.stats().snapshot());
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut stages = winning.clone();
    annotate_stage(&mut stages, &examined, true);
    stages.insert("nReturned", as_i64(returned));
    stages.insert("executionTimeMillisEstimate", millis);
    Ok(doc! {
        "executionSuccess": true,
        "nReturned": as_i64(returned),
        "executionTimeMillis": millis,
        "totalKeysExamined": as_i64(examined.keys_examined),
        "totalDocsExamined": as_i64(examined.docs_examined),
        "executionStages": stages,
    })
}

/// Adds to a plan's stages what they examined, as mongod's executionStages show it:
/// an index scan its keys, the stage that loads documents (FETCH, COLLSCAN, IDHACK)
/// its documents.
fn annotate_stage(
    stage: &mut Document,
    examined: &tailstream_engine::query::op_stats::Snapshot,
    loads_documents: bool,
) {
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let name = stage.get_str("stage").unwrap_or_default().to_string();
    let mut loads_below = loads_documents;
    match name.as_str() {
        "IXSCAN" => {
            stage.insert("keysExamined", as_i64(examined.keys_examined));
        }
        "IDHACK" => {
            stage.insert("keysExamined", as_i64(examined.keys_examined));
            stage.insert("docsExamined", as_i64(examined.docs_examined));
        }
        "FETCH" | "COLLSCAN" if loads_documents => {
            stage.insert("docsExamined", as_i64(examined.docs_examined));
            loads_below = false;
        }
        _ => {}
    }
    if let Ok(input) = stage.get_document_mut("inputStage") {
        annotate_stage(input, examined, loads_below);
    }
}

//! `applyOps`: applies oplog-style operations (`i`nsert, `u`pdate, `d`elete, `c`ommand,
//! `n`oop) one by one, as mongod 7.0 does (`repl/apply_ops.cpp`, not atomically), after
//! its checks (`validateApplyOpsCommand`, `OplogApplicationChecks::checkOperation`) and
//! the `preCondition`s. Every operation goes through the engine's ordinary writes, so
//! each writes its own oplog entry and change streams see it. Reply: `applied` and one
//! `results` boolean per applied operation (`n` ops are skipped, as in mongod).

use super::args::{type_name, wrong_field_type};
use super::blocking;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::matcher::Matcher;
use tailstream_engine::write::{DeleteOp, UpdateOp};
use tailstream_engine::Engine;

/// How deep applyOps may nest in a `c` op (mongod's `maxApplyOpsDepth`).
const MAX_DEPTH: usize = 10;

/// mongod's error when an op's status (not an exception) was a failure.
const UNKNOWN_ERROR: i32 = 8;
/// An op whose namespace and `ui` name different collections.
const UUID_MISMATCH: i32 = 3318200;
/// An update that matched nothing and may not upsert.
const UPDATE_OPERATION_FAILED: i32 = 77;

pub async fn apply_ops(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    validate(cmd, 0)?;
    let ops = ops_of(cmd)?;
    for (i, op) in ops.iter().enumerate() {
        check_operation(i, op)?;
    }
    let pre_conditions = match cmd.get("preCondition") {
        None => Vec::new(),
        Some(Bson::Array(a)) => a.clone(),
        Some(v) => return Err(wrong_field_type("applyOps.preCondition", v, "array")),
    };
    let always_upsert = cmd.get("alwaysUpsert").map(truthy).unwrap_or(true);
    let wc = super::write::parse_write_concern(cmd)?;
    let db = db.to_string();
    let reply = blocking(state, move |e| {
        check_pre_conditions(e, &pre_conditions)?;
        apply(e, &db, &ops, always_upsert)
    })
    .await?;
    let mut reply = reply;
    if let Some(wce) = super::write::await_write_concern(state, wc, None).await {
        reply.insert("writeConcernError", wce);
    }
    Ok(reply)
}

/// The operations: `applyOps`' array (its elements checked to be documents).
fn ops_of(cmd: &Document) -> Result<Vec<Document>> {
    let Some(Bson::Array(ops)) = cmd.get("applyOps") else {
        return Err(type_error("applyOps", cmd.get("applyOps"), "array"));
    };
    ops.iter()
        .enumerate()
        .map(|(i, op)| match op {
            Bson::Document(d) => Ok(d.clone()),
            other => Err(type_error(&i.to_string(), Some(other), "object")),
        })
        .collect()
}

/// mongod's `checkBSONType`: NoSuchKey for a missing field, else TypeMismatch.
fn type_error(field: &str, found: Option<&Bson>, expected: &str) -> Error {
    let (code, found) = match found {
        None => (codes::NO_SUCH_KEY, "missing".to_string()),
        Some(v) => (codes::TYPE_MISMATCH, type_name(v).to_string()),
    };
    Error::new(
        code,
        format!("Wrong type for '{field}'. Expected a {expected}, got a {found}."),
    )
}

/// mongod's `validateApplyOpsCommand`: the op types and command documents, and
/// nested applyOps no deeper than [`MAX_DEPTH`].
fn validate(cmd: &Document, depth: usize) -> Result<()> {
    for op in ops_of(cmd)? {
        let kind = match op.get("op") {
            Some(Bson::String(s)) => s.as_str(),
            other => return Err(type_error("op", other, "string")),
        };
        if kind != "c" {
            continue;
        }
        let o = match op.get("o") {
            Some(Bson::Document(o)) => o,
            other => return Err(type_error("o", other, "object")),
        };
        if o.keys().next().map(String::as_str) == Some("applyOps") {
            if depth >= MAX_DEPTH {
                return Err(Error::failed_to_parse("Too many nested applyOps"));
            }
            validate(o, depth + 1)?;
        }
    }
    Ok(())
}

/// mongod's `OplogApplicationChecks::checkOperation` of op `i`.
fn check_operation(i: usize, op: &Document) -> Result<()> {
    let illegal = |m: String| Err(Error::new(codes::ILLEGAL_OPERATION, m));
    let kind = match op.get("op") {
        None => return illegal(format!("op does not contain required \"op\" field: {i}")),
        Some(Bson::String(s)) => s.as_str(),
        Some(_) => return illegal(format!("\"op\" field is not a string: {i}")),
    };
    if kind.is_empty() {
        return illegal(format!("\"op\" field value cannot be empty: {i}"));
    }
    let ns = match op.get("ns") {
        None => return illegal(format!("op does not contain required \"ns\" field: {i}")),
        Some(Bson::String(s)) => s.as_str(),
        Some(_) => return illegal(format!("\"ns\" field is not a string: {i}")),
    };
    if ns.contains('\0') {
        return illegal("namespaces cannot have embedded null characters".into());
    }
    if !kind.starts_with('n') && ns.is_empty() {
        return illegal(format!(
            "\"ns\" field value cannot be empty when op type is not 'n': {i}"
        ));
    }
    Ok(())
}

/// JavaScript-style truth of a BSON value (mongod's `trueValue`).
fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        v => tailstream_engine::query::compare::as_f64(v).is_none_or(|n| n != 0.0),
    }
}

/// Each `{ns, q, res}`: the first document `q` finds in `ns` (or `{}`) must match
/// `res`; else BadValue "preCondition failed" with `got` and `whatFailed`.
fn check_pre_conditions(e: &Engine, pre_conditions: &[Bson]) -> Result<()> {
    for (i, pre) in pre_conditions.iter().enumerate() {
        let Bson::Document(pre) = pre else {
            return Err(type_error(&i.to_string(), Some(pre), "object"));
        };
        let ns = match pre.get("ns") {
            Some(Bson::String(s)) => s,
            other => {
                return Err(Error::new(
                    codes::INVALID_NAMESPACE,
                    format!(
                        "ns in preCondition must be a string, but found type: {}",
                        other.map(type_name).unwrap_or("missing")
                    ),
                ))
            }
        };
        let ns = Namespace::parse(ns)
            .map_err(|_| Error::new(codes::INVALID_NAMESPACE, format!("invalid ns: {ns}")))?;
        let query = match pre.get("q") {
            Some(Bson::Document(q)) => legacy_filter(q),
            _ => Document::new(),
        };
        let res = match pre.get("res") {
            Some(Bson::Document(r)) => r.clone(),
            other => return Err(type_error("res", other, "object")),
        };
        if e.collection(&ns).is_none() {
            return Err(Error::new(
                codes::NAMESPACE_NOT_FOUND,
                format!("collection in ns does not exist: {}", ns.full()),
            ));
        }
        let found = first_match(e, &ns, query)?.unwrap_or_default();
        if !Matcher::new(&res)?.matches(&found) {
            return Err(Error::bad_value("preCondition failed")
                .with_info(doc! {"got": found, "whatFailed": pre.clone()}));
        }
    }
    Ok(())
}

/// A precondition's `q`: a filter, or the legacy `{query: filter, ...}` wrapping.
fn legacy_filter(q: &Document) -> Document {
    for key in ["query", "$query"] {
        if let Ok(f) = q.get_document(key) {
            return f.clone();
        }
    }
    q.clone()
}

/// Applies the ops in order; the reply's `applied` and `results`, or mongod's error
/// (with them) at the first op that throws, or UnknownError when some op failed.
fn apply(e: &Engine, db: &str, ops: &[Document], always_upsert: bool) -> Result<Document> {
    let mut results: Vec<Bson> = Vec::new();
    let mut failures = 0;
    for op in ops {
        let kind = op.get_str("op").unwrap_or_default();
        if kind == "n" {
            continue;
        }
        let ns_text = op.get_str("ns").unwrap_or_default();
        let ns = match kind {
            "c" => None,
            _ => Some(Namespace::parse(ns_text).map_err(|_| {
                Error::new(codes::INVALID_NAMESPACE, format!("invalid ns: {ns_text}"))
            })?),
        };
        match apply_one(e, db, kind, ns.as_ref(), op, always_upsert) {
            Ok(ok) => {
                failures += usize::from(!ok);
                results.push(Bson::Boolean(ok));
            }
            Err(err) => {
                results.push(Bson::Boolean(false));
                let info = doc! {"applied": results.len() as i32, "results": results};
                return Err(err.with_info(info));
            }
        }
    }
    let applied = results.len() as i32;
    if failures > 0 {
        return Err(Error::new(
            UNKNOWN_ERROR,
            "applyOps had one or more errors applying ops",
        )
        .with_info(doc! {"applied": applied, "results": results}));
    }
    Ok(doc! {"applied": applied, "results": results})
}

/// One op. Ok(false): it failed without stopping the others (mongod's status);
/// Err: it stops applyOps (mongod's exception).
fn apply_one(
    e: &Engine,
    db: &str,
    kind: &str,
    ns: Option<&Namespace>,
    op: &Document,
    always_upsert: bool,
) -> Result<bool> {
    let o = || match op.get("o") {
        Some(Bson::Document(o)) => Ok(o.clone()),
        other => Err(type_error("o", other, "object")),
    };
    let Some(ns) = ns else {
        return apply_command(e, db, op, &o()?, always_upsert);
    };
    if let Some(ui) = op.get("ui") {
        let same = match (ui, e.collection(ns)) {
            (Bson::Binary(b), Some(meta)) => b.bytes.as_slice() == meta.uuid.bytes().as_slice(),
            _ => false,
        };
        if !same {
            // mongod logs the op's error and goes on (the command fails at the end).
            tracing::info!(
                code = UUID_MISMATCH,
                "applyOps: namespace '{}' and UUID '{ui}' point to different collections",
                ns.full()
            );
            return Ok(false);
        }
    }
    if ns.coll == VIEWS_COLLECTION {
        return apply_view_op(e, &ns.db, kind, op, &o()?);
    }
    if e.collection(ns).is_none() {
        if kind == "d" {
            return Ok(true);
        }
        return Err(Error::new(
            codes::NAMESPACE_NOT_FOUND,
            format!(
                "cannot apply insert or update operation on a non-existent namespace {}: {op}",
                ns.full()
            ),
        ));
    }
    match kind {
        "i" => insert(e, ns, o()?),
        "u" => update(e, ns, op, o()?, always_upsert),
        "d" => e
            .delete(
                ns,
                vec![DeleteOp {
                    q: o()?,
                    limit: 1,
                    ..Default::default()
                }],
                true,
            )?
            .errors
            .first()
            .map_or(Ok(true), |w| Err(w.error.clone())),
        other => Err(Error::bad_value(format!(
            "Enumeration value '{other}' for field 'op' is not a valid value."
        ))),
    }
}

/// Where a database's views are defined; the oplog logs view changes as its writes
/// (as mongod does), which the server applies as the view commands they stand for.
const VIEWS_COLLECTION: &str = "system.views";

/// A write to `<db>.system.views` from an oplog: the view's create, collMod or drop
/// (a view already there is modified, as the replay of an oplog must be idempotent).
fn apply_view_op(e: &Engine, db: &str, kind: &str, op: &Document, o: &Document) -> Result<bool> {
    let id = match o
        .get("_id")
        .or_else(|| op.get_document("o2").ok()?.get("_id"))
    {
        Some(Bson::String(id)) => id.clone(),
        other => return Err(type_error("o._id", other, "string")),
    };
    let name = id
        .strip_prefix(&format!("{db}."))
        .ok_or_else(|| Error::bad_value(format!("view '{id}' is not in database '{db}'")))?;
    let view = Namespace::new(db, name);
    if kind == "d" {
        return match e.drop_collection(&view) {
            Err(err) if err.code != codes::NAMESPACE_NOT_FOUND => Err(err),
            _ => Ok(true),
        };
    }
    let mut definition: Document = o
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "viewOn" | "pipeline" | "collation"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !definition.contains_key("viewOn") {
        return Err(Error::bad_value(format!(
            "applyOps: view '{id}' without viewOn"
        )));
    }
    match e.create_collection(&view, definition.clone()) {
        Ok(_) => Ok(true),
        Err(err) if err.code == codes::NAMESPACE_EXISTS => {
            definition.remove("collation");
            let mut cmd = doc! {"collMod": name};
            cmd.extend(definition);
            e.coll_mod(&view, &cmd)?;
            Ok(true)
        }
        Err(err) => Err(err),
    }
}

/// An insert; a document whose `_id` is there already replaces it (oplog application
/// is idempotent).
fn insert(e: &Engine, ns: &Namespace, doc: Document) -> Result<bool> {
    let out = e.insert_documents(ns, vec![doc.clone()], true)?;
    match out.errors.first() {
        None => Ok(true),
        Some(w) if w.error.code == codes::DUPLICATE_KEY && doc.contains_key("_id") => {
            let id = doc.get("_id").cloned().expect("checked");
            let out = e.update(
                ns,
                vec![UpdateOp {
                    q: doc! {"_id": id},
                    u: Bson::Document(doc),
                    upsert: true,
                    ..Default::default()
                }],
                true,
            )?;
            out.errors
                .first()
                .map_or(Ok(true), |w| Err(w.error.clone()))
        }
        Some(w) => Err(w.error.clone()),
    }
}

/// An update of the document `o2` names, with `o` a replacement, update operators or
/// a `$v: 2` diff; it upserts with `b: true` or `alwaysUpsert`.
fn update(
    e: &Engine,
    ns: &Namespace,
    op: &Document,
    o: Document,
    always_upsert: bool,
) -> Result<bool> {
    let Some(Bson::Document(o2)) = op.get("o2") else {
        return Err(Error::new(
            codes::NO_SUCH_KEY,
            format!("Failed to apply update due to missing o2 field: {op}"),
        ));
    };
    let upsert = op.get("b").is_some_and(truthy) || always_upsert;
    let u = match o.get("$v") {
        Some(v) if tailstream_engine::query::compare::as_f64(v) == Some(2.0) => {
            let diff = o
                .get_document("diff")
                .map_err(|_| Error::new(40614, "$v: 2 update needs a 'diff' document"))?;
            let current = if has_truncation(diff) {
                first_match(e, ns, o2.clone())?
            } else {
                None
            };
            diff_to_update(diff, current.as_ref())?
        }
        _ => o,
    };
    let out = e.update(
        ns,
        vec![UpdateOp {
            q: o2.clone(),
            u: Bson::Document(u),
            upsert,
            ..Default::default()
        }],
        true,
    )?;
    if let Some(w) = out.errors.first() {
        return Err(w.error.clone());
    }
    if out.n == 0 && out.upserted.is_empty() {
        tracing::info!(
            code = UPDATE_OPERATION_FAILED,
            "applyOps: Failed to apply update"
        );
        return Ok(false);
    }
    Ok(true)
}

/// The first document `filter` finds in `ns`.
fn first_match(e: &Engine, ns: &Namespace, filter: Document) -> Result<Option<Document>> {
    Ok(e.aggregate(
        &ns.db,
        Some(&ns.coll),
        &[doc! {"$match": filter}, doc! {"$limit": 1}],
        None,
        None,
        None,
        None,
        Default::default(),
    )?
    .docs
    .into_iter()
    .next())
}

/// Whether a diff shortens an array somewhere (`l`), which no update operator mixes
/// with setting the array's elements: such an array is set whole, from `current`.
fn has_truncation(diff: &Document) -> bool {
    diff.iter().any(|(k, v)| match v {
        Bson::Document(sub) => k.starts_with('s') && has_truncation(sub),
        _ => k == "l",
    })
}

/// The update operators a `$v: 2` oplog diff stands for: `i`/`u` set fields, `d`
/// removes them, `s<field>` descends into a sub-document, or an array (`a: true`)
/// whose `u<index>` set elements and `s<index>` descend; an array cut short (`l`) is
/// set whole: its new value is the diff applied to it in `current`, the document.
pub fn diff_to_update(diff: &Document, current: Option<&Document>) -> Result<Document> {
    let mut set = Document::new();
    let mut unset = Document::new();
    add_diff(diff, "", current, &mut set, &mut unset)?;
    let mut update = Document::new();
    for (op, fields) in [("$set", set), ("$unset", unset)] {
        if !fields.is_empty() {
            update.insert(op, fields);
        }
    }
    if update.is_empty() {
        // An empty diff changes nothing (an update still needs an operator).
        update.insert("$set", Document::new());
    }
    Ok(update)
}

fn bad_diff(m: String) -> Error {
    Error::new(4772600, m)
}

fn add_diff(
    diff: &Document,
    prefix: &str,
    current: Option<&Document>,
    set: &mut Document,
    unset: &mut Document,
) -> Result<()> {
    let path = |field: &str| format!("{prefix}{field}");
    if diff.get("a") == Some(&Bson::Boolean(true)) {
        let array = prefix.trim_end_matches('.');
        if diff.contains_key("l") {
            let mut value = match current.and_then(|d| value_at(d, array)) {
                Some(Bson::Array(a)) => a.clone(),
                _ => Vec::new(),
            };
            apply_array_diff(&mut value, diff)?;
            set.insert(array, value);
            return Ok(());
        }
        for (key, value) in diff {
            match (key.as_str(), value) {
                ("a", _) => {}
                (k, v) if k.starts_with('u') => {
                    set.insert(path(&k[1..]), v.clone());
                }
                (k, Bson::Document(sub)) if k.starts_with('s') => {
                    add_diff(sub, &format!("{}.", path(&k[1..])), current, set, unset)?;
                }
                (k, _) => return Err(bad_diff(format!("unknown array diff field '{k}'"))),
            }
        }
        return Ok(());
    }
    for (key, value) in diff {
        match (key.as_str(), value) {
            ("i" | "u", Bson::Document(fields)) => {
                for (f, v) in fields {
                    set.insert(path(f), v.clone());
                }
            }
            ("d", Bson::Document(fields)) => {
                for (f, _) in fields {
                    unset.insert(path(f), "");
                }
            }
            (k, Bson::Document(sub)) if k.starts_with('s') && k.len() > 1 => {
                add_diff(sub, &format!("{}.", path(&k[1..])), current, set, unset)?;
            }
            (k, _) => return Err(bad_diff(format!("unknown diff field '{k}'"))),
        }
    }
    Ok(())
}

/// The value at a dotted path (array elements by index).
fn value_at<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let mut at = doc.get(parts.next()?)?;
    for part in parts {
        at = match at {
            Bson::Document(d) => d.get(part)?,
            Bson::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// Applies a document diff to `doc` (for the elements of an array set whole).
fn apply_doc_diff(doc: &mut Document, diff: &Document) -> Result<()> {
    for (key, value) in diff {
        match (key.as_str(), value) {
            ("i" | "u", Bson::Document(fields)) => {
                for (f, v) in fields {
                    doc.insert(f.clone(), v.clone());
                }
            }
            ("d", Bson::Document(fields)) => {
                for (f, _) in fields {
                    doc.remove(f);
                }
            }
            (k, Bson::Document(sub)) if k.starts_with('s') && k.len() > 1 => {
                let target = doc.get_mut(&k[1..]);
                apply_sub_diff(target, sub)?;
            }
            (k, _) => return Err(bad_diff(format!("unknown diff field '{k}'"))),
        }
    }
    Ok(())
}

/// Applies an array diff: `u<index>` sets an element (padding with nulls), `s<index>`
/// descends into it, `l` sets the length.
fn apply_array_diff(array: &mut Vec<Bson>, diff: &Document) -> Result<()> {
    let index = |k: &str| {
        k[1..]
            .parse::<usize>()
            .map_err(|_| bad_diff(format!("bad array diff index '{k}'")))
    };
    for (key, value) in diff {
        match (key.as_str(), value) {
            ("a" | "l", _) => {}
            (k, v) if k.starts_with('u') => {
                let i = index(k)?;
                if array.len() <= i {
                    array.resize(i + 1, Bson::Null);
                }
                array[i] = v.clone();
            }
            (k, Bson::Document(sub)) if k.starts_with('s') => {
                let i = index(k)?;
                apply_sub_diff(array.get_mut(i), sub)?;
            }
            (k, _) => return Err(bad_diff(format!("unknown array diff field '{k}'"))),
        }
    }
    if let Some(len) = diff.get("l") {
        let len = tailstream_engine::find::as_i64(len)
            .filter(|l| *l >= 0)
            .ok_or_else(|| bad_diff("array diff 'l' must be a length".into()))?;
        array.resize(len as usize, Bson::Null);
    }
    Ok(())
}

/// Applies `s<field>`'s diff to the value it names (a document, or an array).
fn apply_sub_diff(target: Option<&mut Bson>, sub: &Document) -> Result<()> {
    match target {
        Some(Bson::Array(a)) if sub.get("a") == Some(&Bson::Boolean(true)) => {
            apply_array_diff(a, sub)
        }
        Some(Bson::Document(d)) => apply_doc_diff(d, sub),
        _ => Err(bad_diff("a sub-diff names no document or array".into())),
    }
}

/// A `c` op: the DDL commands an oplog holds (`create`, `drop`, `dropDatabase`,
/// `renameCollection`, `createIndexes` of one index, `dropIndexes`, `collMod`) and a
/// nested `applyOps`.
fn apply_command(
    e: &Engine,
    db: &str,
    op: &Document,
    o: &Document,
    always_upsert: bool,
) -> Result<bool> {
    let ns = op.get_str("ns").unwrap_or_default();
    let cmd_db = ns.split_once('.').map_or(ns, |(d, _)| d);
    let cmd_db = if cmd_db.is_empty() { db } else { cmd_db };
    let name = o.keys().next().map(String::as_str).unwrap_or_default();
    let coll = |field: &str| match o.get(field) {
        Some(Bson::String(c)) => Ok(Namespace::new(cmd_db, c)),
        other => Err(type_error(field, other, "string")),
    };
    match name {
        // Made implicitly by the first view (see `apply_view_op`).
        "create" if o.get_str("create") == Ok(VIEWS_COLLECTION) => {}
        "create" => {
            let options: Document = o
                .iter()
                .skip(1)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            e.create_collection(&coll("create")?, options)?;
        }
        "drop" => {
            e.drop_collection(&coll("drop")?)?;
        }
        "dropDatabase" => {
            e.drop_database(cmd_db)?;
        }
        "renameCollection" => {
            let full = |field: &str| match o.get(field) {
                Some(Bson::String(s)) => Namespace::parse(s),
                other => Err(type_error(field, other, "string")),
            };
            let drop_target = o.get("dropTarget").is_some_and(truthy);
            e.rename_collection(&full("renameCollection")?, &full("to")?, drop_target)?;
        }
        "createIndexes" => {
            let spec: Document = o
                .iter()
                .skip(1)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            e.create_indexes(&coll("createIndexes")?, &[spec])?;
        }
        "dropIndexes" | "deleteIndexes" => {
            let which = o.get("index").cloned().unwrap_or(Bson::String("*".into()));
            e.drop_indexes(&coll(name)?, &which)?;
        }
        "collMod" => {
            e.coll_mod(&coll("collMod")?, o)?;
        }
        "applyOps" => {
            let ops = ops_of(o)?;
            for (i, op) in ops.iter().enumerate() {
                check_operation(i, op)?;
            }
            apply(e, cmd_db, &ops, always_upsert)?;
        }
        _ => {
            return Err(Error::failed_to_parse(format!(
                "Unrecognized command in op: {name}"
            )))
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_become_update_operators() {
        let diff = doc! {
            "u": {"a": 1}, "i": {"b": 2}, "d": {"c": false},
            "sd": {"u": {"x": 3}, "sy": {"d": {"z": false}}},
            "sarr": {"a": true, "u1": "v", "s0": {"i": {"k": 1}}},
        };
        assert!(!has_truncation(&diff));
        assert_eq!(
            diff_to_update(&diff, None).unwrap(),
            doc! {
                "$set": {"a": 1, "b": 2, "d.x": 3, "arr.1": "v", "arr.0.k": 1},
                "$unset": {"c": "", "d.y.z": ""},
            }
        );
        assert_eq!(diff_to_update(&doc! {}, None).unwrap(), doc! {"$set": {}});
        assert!(diff_to_update(&doc! {"x": 1}, None).is_err());
        // A shortened array is set whole, from the current document.
        let cut = doc! {"sd": {"sarr": {"a": true, "l": 2, "u1": "v", "s0": {"u": {"k": 2}}}}};
        assert!(has_truncation(&cut));
        let current = doc! {"d": {"arr": [{"k": 1, "j": 0}, 2, 3]}};
        assert_eq!(
            diff_to_update(&cut, Some(&current)).unwrap(),
            doc! {"$set": {"d.arr": [{"k": 2, "j": 0}, "v"]}}
        );
    }

    #[test]
    fn operations_are_checked_as_mongod_checks_them() {
        let check = |op: Document| check_operation(0, &op).map_err(|e| (e.code, e.message));
        assert!(check(doc! {"op": "i", "ns": "a.b", "o": {}}).is_ok());
        assert!(check(doc! {"op": "n", "ns": "", "o": {}}).is_ok());
        assert_eq!(
            check(doc! {"ns": "a.b"}).unwrap_err().0,
            codes::ILLEGAL_OPERATION
        );
        assert_eq!(
            check(doc! {"op": "i", "ns": ""}).unwrap_err().1,
            "\"ns\" field value cannot be empty when op type is not 'n': 0"
        );
        assert_eq!(
            validate(&doc! {"applyOps": [{"op": 1}]}, 0)
                .unwrap_err()
                .code,
            codes::TYPE_MISMATCH
        );
        assert_eq!(
            validate(&doc! {"applyOps": [{"ns": "a.b"}]}, 0)
                .unwrap_err()
                .code,
            codes::NO_SUCH_KEY
        );
        let mut nested = doc! {"applyOps": []};
        for _ in 0..=MAX_DEPTH {
            nested = doc! {"applyOps": [{"op": "c", "ns": "a.$cmd", "o": nested}]};
        }
        assert_eq!(
            validate(&nested, 0).unwrap_err().code,
            codes::FAILED_TO_PARSE
        );
    }
}

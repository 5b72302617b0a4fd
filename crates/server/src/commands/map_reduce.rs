//! `mapReduce` (deprecated in MongoDB 5.0, still served by 7.0): parsed with mongod's
//! checks and messages (its IDL `map_reduce.idl` and `MapReduceOutOptions`), run by the
//! engine (`read::map_reduce`), answered in mongod's shape: `{results: [...]}` inline,
//! `{result: "coll"}` or `{result: {db, collection}}` when written to a collection.

use super::args::{check_fields, collection_arg, opt_bool, opt_doc, opt_i64};
use super::blocking;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::read::map_reduce::{MapReduceOut, MapReduceRequest};

/// The command's own fields (everything else but generic arguments is refused).
const MAP_REDUCE_FIELDS: &[&str] = &[
    "map",
    "reduce",
    "out",
    "query",
    "sort",
    "collation",
    "limit",
    "finalize",
    "scope",
    "verbose",
    "bypassDocumentValidation",
    "jsMode",
];

/// The name mongod's IDL parser gives the command in its messages.
const IDL_NAME: &str = "mapReduce";

/// Databases mapReduce may not write to.
const INTERNAL_DBS: &[&str] = &["admin", "local", "config"];

pub async fn map_reduce(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let req = parse(db, cmd)?;
    let out = req.out.clone();
    let wc = match out {
        MapReduceOut::Inline => None,
        _ => Some(super::write::parse_write_concern(cmd)?),
    };
    let results = blocking(state, move |e| e.map_reduce(&req)).await?;
    let mut reply = match &out {
        MapReduceOut::Inline => {
            doc! {"results": results.into_iter().map(Bson::Document).collect::<Vec<_>>()}
        }
        MapReduceOut::Replace(t) | MapReduceOut::Merge(t) | MapReduceOut::Reduce(t) => {
            if explicit_out_db(cmd) {
                doc! {"result": {"db": &t.db, "collection": &t.coll}}
            } else {
                doc! {"result": &t.coll}
            }
        }
    };
    if let Some(wc) = wc {
        if let Some(wce) = super::write::await_write_concern(state, wc, None).await {
            reply.insert("writeConcernError", wce);
        }
    }
    Ok(reply)
}

/// Whether `out` names the output database (`{replace: ..., db: ...}`): the reply
/// then names it too.
fn explicit_out_db(cmd: &Document) -> bool {
    matches!(cmd.get("out"), Some(Bson::Document(o)) if o.contains_key("db"))
}

fn parse(db: &str, cmd: &Document) -> Result<MapReduceRequest> {
    let ns = collection_arg(cmd, db)?;
    check_fields(cmd, MAP_REDUCE_FIELDS)?;
    let mut scope = Document::new();
    let map = code(cmd, "map", &mut scope)?;
    let reduce = code(cmd, "reduce", &mut scope)?;
    let out = match cmd.get("out") {
        Some(o) => parse_out(db, o)?,
        None => return Err(Error::missing_field(&format!("{IDL_NAME}.out"))),
    };
    let finalize = match cmd.get("finalize") {
        None | Some(Bson::Null) => None,
        Some(_) => Some(code(cmd, "finalize", &mut scope)?),
    };
    match cmd.get("scope") {
        None | Some(Bson::Null) => {}
        Some(Bson::Document(vars)) => scope.extend(vars.clone()),
        Some(_) => return Err(Error::bad_value("'scope' must be an object")),
    }
    let sort = opt_doc(cmd, "sort")?;
    if sort.as_ref().is_some_and(|s| s.is_empty()) {
        return Err(Error::new(
            15976,
            "The mapReduce sort option must have at least one sort key",
        ));
    }
    let limit = opt_i64(cmd, "limit")?;
    if limit.is_some_and(|l| l <= 0) {
        return Err(Error::new(
            15958,
            "The limit specified to mapReduce must be positive",
        ));
    }
    for flag in ["verbose", "jsMode", "bypassDocumentValidation"] {
        opt_bool(cmd, flag)?;
    }
    Ok(MapReduceRequest {
        ns,
        map,
        reduce,
        finalize,
        scope,
        query: opt_doc(cmd, "query")?,
        sort,
        limit,
        collation: opt_doc(cmd, "collation")?,
        out,
    })
}

/// A JavaScript argument: a string, Code, or CodeWithScope (whose scope joins the
/// global variables), as mongod's `MapReduceJavascriptCode` accepts.
fn code(cmd: &Document, field: &str, scope: &mut Document) -> Result<String> {
    match cmd.get(field) {
        Some(Bson::String(s)) => Ok(s.clone()),
        Some(Bson::JavaScriptCode(s)) => Ok(s.clone()),
        Some(Bson::JavaScriptCodeWithScope(c)) => {
            scope.extend(c.scope.clone());
            Ok(c.code.clone())
        }
        // mongod's message names 'scope' whichever function it is about.
        Some(_) => Err(Error::bad_value(
            "'scope' must be a string, code or 'code with scope'",
        )),
        None => Err(Error::missing_field(&format!("{IDL_NAME}.{field}"))),
    }
}

/// `out`: a collection name, `{inline: 1}`, or `{replace|merge|reduce: name, db,
/// sharded, nonAtomic}`, with mongod's checks in its order.
fn parse_out(db: &str, out: &Bson) -> Result<MapReduceOut> {
    let o = match out {
        Bson::String(name) => return target(db, None, name).map(MapReduceOut::Replace),
        Bson::Document(o) => o,
        _ => {
            return Err(Error::bad_value(
                "'out' must be either a string or an object",
            ))
        }
    };
    if let Some(inline) = o.get("inline") {
        if o.len() != 1 {
            return Err(Error::new(
                codes::INVALID_OPTIONS,
                "'inline' must be specified alone",
            ));
        }
        if tailstream_engine::query::compare::as_f64(inline) != Some(1.0) {
            return Err(Error::bad_value("'inline' takes only numeric '1'"));
        }
        return Ok(MapReduceOut::Inline);
    }
    let mut allowed_fields = 4;
    match o.get("sharded") {
        Some(Bson::Boolean(true)) => {}
        Some(Bson::Boolean(false)) => {
            return Err(Error::bad_value("sharded field value must be true"))
        }
        Some(_) => return Err(Error::bad_value("sharded field value must be boolean")),
        None => allowed_fields -= 1,
    }
    let name = |mode: &str, v: &Bson| match v {
        Bson::String(s) => Ok(s.clone()),
        _ => Err(Error::bad_value(format!(
            "'{mode}' supports only string consisting of output collection name"
        ))),
    };
    let (mode, coll) = if let Some(v) = o.get("replace") {
        ("replace", name("replace", v)?)
    } else if let Some(v) = o.get("merge") {
        ("merge", name("merge", v)?)
    } else if let Some(v) = o.get("reduce") {
        ("reduce", name("reduce", v)?)
    } else {
        return Err(Error::bad_value(
            "'out' requires 'replace', 'merge' or 'reduce'",
        ));
    };
    let out_db = match o.get("db") {
        Some(Bson::String(d)) => {
            if INTERNAL_DBS.contains(&d.as_str()) {
                return Err(Error::new(
                    codes::COMMAND_NOT_SUPPORTED,
                    "cannot target internal database as output",
                ));
            }
            Some(d.as_str())
        }
        Some(_) => return Err(Error::bad_value("db field value must be string")),
        None => {
            allowed_fields -= 1;
            None
        }
    };
    match o.get("nonAtomic") {
        Some(Bson::Boolean(true)) => {}
        Some(Bson::Boolean(false)) => {
            return Err(Error::bad_value("nonAtomic field value must be true"))
        }
        Some(_) => return Err(Error::bad_value("nonAtomic field value must be boolean")),
        None => allowed_fields -= 1,
    }
    if o.len() != allowed_fields {
        return Err(Error::bad_value(
            "'out' supports only output type with collection name, optional 'sharded' and optional 'db'",
        ));
    }
    let target = target(db, out_db, &coll)?;
    Ok(match mode {
        "replace" => MapReduceOut::Replace(target),
        "merge" => MapReduceOut::Merge(target),
        _ => MapReduceOut::Reduce(target),
    })
}

/// The output collection, refused where mongod refuses it (its translation errors).
fn target(db: &str, out_db: Option<&str>, coll: &str) -> Result<Namespace> {
    let ns = Namespace::new(out_db.unwrap_or(db), coll);
    if coll.is_empty() || coll.contains('$') || coll.contains('\0') {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid output namespace {} for MapReduce", ns.full()),
        ));
    }
    if INTERNAL_DBS.contains(&ns.db.as_str()) {
        return Err(Error::new(
            31320,
            format!("Can't output mapReduce results to internal DB {}", ns.db),
        ));
    }
    if coll.starts_with("system.") {
        return Err(Error::new(
            31319,
            format!("Can't output mapReduce results to special collection {coll}"),
        ));
    }
    Ok(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_options_as_mongod_parses_them() {
        let out = |o: Bson| parse_out("db", &o);
        assert_eq!(
            out(Bson::String("c".into())).unwrap(),
            MapReduceOut::Replace(Namespace::new("db", "c"))
        );
        assert_eq!(
            out(bson::bson!({"inline": 1})).unwrap(),
            MapReduceOut::Inline
        );
        assert_eq!(
            out(bson::bson!({"reduce": "c", "db": "o"})).unwrap(),
            MapReduceOut::Reduce(Namespace::new("o", "c"))
        );
        assert_eq!(
            out(bson::bson!({"merge": "c", "nonAtomic": true})).unwrap(),
            MapReduceOut::Merge(Namespace::new("db", "c"))
        );
        let code = |o: Bson| out(o).unwrap_err().code;
        assert_eq!(
            code(bson::bson!({"inline": 1, "db": "x"})),
            codes::INVALID_OPTIONS
        );
        assert_eq!(code(bson::bson!({"inline": 2})), codes::BAD_VALUE);
        assert_eq!(code(bson::bson!({"db": "x"})), codes::BAD_VALUE);
        assert_eq!(code(bson::bson!({"replace": 1})), codes::BAD_VALUE);
        assert_eq!(
            code(bson::bson!({"replace": "c", "x": 1})),
            codes::BAD_VALUE
        );
        assert_eq!(
            code(bson::bson!({"replace": "c", "db": "admin"})),
            codes::COMMAND_NOT_SUPPORTED
        );
        assert_eq!(code(Bson::String("system.x".into())), 31319);
        assert_eq!(
            parse_out("local", &Bson::String("c".into()))
                .unwrap_err()
                .code,
            31320
        );
        assert_eq!(code(Bson::Int32(1)), codes::BAD_VALUE);
    }
}

//! Parsing a filter document into the matcher's tree: logical operators at the top,
//! then each field's value operators.

use super::regex::{compile_regex, regex_from_bson};
use super::type_op::parse_type_one;
use super::{bad, is_operator_doc, truthy, CmpOp, InItem, Node, ParseCtx, Pred};
use crate::compare::{as_f64, is_number};
use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::sync::Arc;

/// `$where: <string or Code>`, compiled now so a syntax error fails the command (as in
/// mongod, where the function is created when the filter is parsed).
fn parse_where(v: &Bson, ctx: ParseCtx) -> Result<Node> {
    if !ctx.javascript {
        return Err(bad("$where is not allowed in this context"));
    }
    if !ctx.top_level {
        return Err(bad("$where can only be applied to the top-level document"));
    }
    let code = match v {
        Bson::String(s) => s.as_str(),
        Bson::JavaScriptCode(s) => s.as_str(),
        Bson::JavaScriptCodeWithScope(_) => {
            return Err(Error::location(
                4649201,
                "$where no longer supports deprecated BSON type CodeWScope",
            ))
        }
        _ => return Err(bad("$where got bad type")),
    };
    if code.is_empty() {
        return Err(bad("code for $where cannot be empty"));
    }
    crate::script::compile(code)?;
    Ok(Node::Where(Arc::from(code)))
}

fn parse_logical(op: &str, v: &Bson, ctx: ParseCtx) -> Result<Vec<Node>> {
    let arr = match v {
        Bson::Array(a) if !a.is_empty() => a,
        _ => return Err(bad(format!("{op} must be a nonempty array"))),
    };
    let mut out = Vec::with_capacity(arr.len());
    for e in arr {
        match e {
            Bson::Document(d) => out.push(parse_doc(d, ctx)?),
            _ => return Err(bad("$or/$and/$nor entries need to be full objects")),
        }
    }
    Ok(out)
}

pub(super) fn parse_doc(filter: &Document, ctx: ParseCtx) -> Result<Node> {
    let mut nodes = Vec::new();
    for (k, v) in filter {
        if let Some(op) = k.strip_prefix('$') {
            let node = match op {
                "and" => Node::And(parse_logical(k, v, ctx)?),
                "or" => Node::Or(parse_logical(k, v, ctx)?),
                "nor" => Node::Nor(parse_logical(k, v, ctx)?),
                "expr" => Node::Expr(v.clone()),
                "comment" => continue,
                "alwaysTrue" => Node::Const(true),
                "alwaysFalse" => Node::Const(false),
                "where" => parse_where(v, ctx)?,
                "text" => Node::Text(Box::new(crate::text::TextPredicate::parse(v)?)),
                "jsonSchema" => Node::JsonSchema(Arc::new(super::JsonSchema::parse(v)?)),
                "sampleRate" => parse_sample_rate(v)?,
                _ => return Err(bad(format!("unknown top level operator: {k}"))),
            };
            nodes.push(node);
            continue;
        }
        let preds = parse_field_value(v, ctx)?;
        nodes.push(Node::Field {
            path: k.clone(),
            parts: k.split('.').map(String::from).collect(),
            preds,
        });
    }
    Ok(if nodes.len() == 1 {
        nodes.pop().unwrap()
    } else {
        Node::And(nodes)
    })
}

/// `$sampleRate: p`: each document matches with probability `p`, a number in [0, 1]
/// (mongod's rewrite: never at 0, always at 1, else `$expr: {$lt: [{$rand: {}}, p]}`).
fn parse_sample_rate(v: &Bson) -> Result<Node> {
    let rate = match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            crate::types::as_f64(v).unwrap_or(f64::NAN)
        }
        _ => return Err(bad("argument to $sampleRate must be a numeric type")),
    };
    if !(0.0..=1.0).contains(&rate) {
        return Err(bad("numeric argument to $sampleRate must be in [0, 1]"));
    }
    Ok(if rate == 0.0 {
        Node::Const(false)
    } else if rate == 1.0 {
        Node::Const(true)
    } else {
        Node::Expr(Bson::Document(bson::doc! {"$lt": [{"$rand": {}}, rate]}))
    })
}

/// The value side of `{field: value}`.
fn parse_field_value(v: &Bson, ctx: ParseCtx) -> Result<Vec<Pred>> {
    match v {
        Bson::Document(d) if is_operator_doc(d) => parse_operator_doc(d, ctx),
        Bson::RegularExpression(r) => Ok(vec![Pred::Regex(regex_from_bson(r)?)]),
        _ => Ok(vec![Pred::Eq(v.clone())]),
    }
}

fn parse_in_list(op: &str, v: &Bson) -> Result<Vec<InItem>> {
    let arr = match v {
        Bson::Array(a) => a,
        _ => return Err(bad(format!("{op} needs an array"))),
    };
    let mut out = Vec::with_capacity(arr.len());
    for e in arr {
        match e {
            Bson::RegularExpression(r) => out.push(InItem::Regex(regex_from_bson(r)?)),
            Bson::Document(d) if is_operator_doc(d) => {
                return Err(bad(format!("cannot nest $ under {op}")))
            }
            _ => out.push(InItem::Value(e.clone())),
        }
    }
    Ok(out)
}

fn parse_mod(v: &Bson) -> Result<Pred> {
    let arr = match v {
        Bson::Array(a) => a,
        _ => return Err(bad("malformed mod, needs to be an array")),
    };
    if arr.len() < 2 {
        return Err(bad("malformed mod, not enough elements"));
    }
    if arr.len() > 2 {
        return Err(bad("malformed mod, too many elements"));
    }
    let num = |x: &Bson, what: &str| -> Result<i64> {
        if !is_number(x) {
            return Err(bad(format!("malformed mod, {what} not a number")));
        }
        let f = as_f64(x).unwrap_or(f64::NAN);
        if !f.is_finite() {
            return Err(bad(format!(
                "malformed mod, {what} value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type"
            )));
        }
        Ok(match x {
            Bson::Int32(i) => *i as i64,
            Bson::Int64(i) => *i,
            _ => {
                let t = f.trunc();
                if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
                    return Err(bad(format!("malformed mod, {what} value is invalid :: caused by :: Out of bounds coercing to integral value")));
                }
                t as i64
            }
        })
    };
    let d = num(&arr[0], "divisor")?;
    let r = num(&arr[1], "remainder")?;
    if d == 0 {
        return Err(bad(
            "malformed mod, divisor value is invalid :: caused by :: divisor cannot be 0",
        ));
    }
    Ok(Pred::Mod(d, r))
}

fn parse_size(v: &Bson) -> Result<i64> {
    if !is_number(v) {
        return Err(bad(format!(
            "Failed to parse $size. Expected a number in: $size: {v}"
        )));
    }
    let f = as_f64(v).unwrap_or(f64::NAN);
    if f.is_nan() || f.fract() != 0.0 {
        return Err(bad("$size must be a whole number"));
    }
    if f < 0.0 {
        return Err(bad(format!(
            "Failed to parse $size. Expected a non-negative number in: $size: {v}"
        )));
    }
    Ok(match v {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        _ => f.min(i64::MAX as f64) as i64,
    })
}

/// Is `{...}` a document of value operators (`{$gt: 1}`) rather than a sub-query (`{b: 1}`)?
fn is_elem_match_value_form(d: &Document) -> bool {
    match d.keys().next() {
        Some(k) => {
            k.starts_with('$')
                && !matches!(
                    k.as_str(),
                    "$and"
                        | "$or"
                        | "$nor"
                        | "$expr"
                        | "$where"
                        | "$text"
                        | "$comment"
                        | "$alwaysTrue"
                        | "$alwaysFalse"
                )
        }
        None => false,
    }
}

fn parse_elem_match(v: &Bson, ctx: ParseCtx) -> Result<Pred> {
    let ctx = ParseCtx {
        top_level: false,
        ..ctx
    };
    let d = match v {
        Bson::Document(d) => d,
        _ => return Err(bad("$elemMatch needs an Object")),
    };
    if is_elem_match_value_form(d) {
        Ok(Pred::ElemMatchValue(parse_operator_doc(d, ctx)?))
    } else {
        Ok(Pred::ElemMatchDoc(Box::new(parse_doc(d, ctx)?)))
    }
}

fn parse_operator_doc(d: &Document, ctx: ParseCtx) -> Result<Vec<Pred>> {
    // `$near` takes its `$maxDistance`/`$minDistance` siblings with it.
    if d.contains_key("$near") || d.contains_key("$nearSphere") {
        return Ok(vec![Pred::Geo(Box::new(crate::geo::query::parse_near(d)?))]);
    }
    let mut preds = Vec::new();
    let regex_val = d.get("$regex");
    let options_val = d.get("$options");
    if options_val.is_some() && regex_val.is_none() {
        return Err(bad("$options needs a $regex"));
    }
    let mut regex_done = false;
    for (k, v) in d {
        let p = match k.as_str() {
            "$eq" => Pred::Eq(v.clone()),
            "$ne" => {
                if let Bson::RegularExpression(_) = v {
                    return Err(bad("Can't have regex as arg to $ne."));
                }
                Pred::Ne(v.clone())
            }
            "$gt" => Pred::Cmp(CmpOp::Gt, v.clone()),
            "$gte" => Pred::Cmp(CmpOp::Gte, v.clone()),
            "$lt" => Pred::Cmp(CmpOp::Lt, v.clone()),
            "$lte" => Pred::Cmp(CmpOp::Lte, v.clone()),
            "$in" => Pred::In(parse_in_list("$in", v)?),
            "$nin" => Pred::Nin(parse_in_list("$nin", v)?),
            "$exists" => Pred::Exists(truthy(v)),
            "$type" => {
                let codes = match v {
                    Bson::Array(a) => a.iter().map(parse_type_one).collect::<Result<Vec<_>>>()?,
                    _ => vec![parse_type_one(v)?],
                };
                Pred::Type(codes)
            }
            "$regex" | "$options" => {
                if regex_done {
                    continue;
                }
                regex_done = true;
                let opts = match options_val {
                    None => None,
                    Some(Bson::String(s)) => Some(s.as_str()),
                    Some(_) => return Err(bad("$options has to be a string")),
                };
                match regex_val {
                    Some(Bson::String(p)) => Pred::Regex(compile_regex(p, opts.unwrap_or(""))?),
                    Some(Bson::RegularExpression(r)) => {
                        if opts.is_some() && !r.options.is_empty() {
                            return Err(Error::location(
                                51075,
                                "options set in both $regex and $options",
                            ));
                        }
                        let o = if r.options.is_empty() {
                            opts.unwrap_or("")
                        } else {
                            r.options.as_str()
                        };
                        Pred::Regex(compile_regex(&r.pattern, o)?)
                    }
                    _ => return Err(bad("$regex has to be a string")),
                }
            }
            "$mod" => parse_mod(v)?,
            "$size" => Pred::Size(parse_size(v)?),
            "$all" => {
                let arr = match v {
                    Bson::Array(a) => a,
                    _ => return Err(bad("$all needs an array")),
                };
                let mut subs = Vec::with_capacity(arr.len());
                let is_em = |e: &Bson| matches!(e, Bson::Document(d) if d.keys().next().map(|k| k == "$elemMatch").unwrap_or(false));
                let first_em = arr.first().map(is_em).unwrap_or(false);
                for e in arr {
                    if is_em(e) != first_em {
                        return Err(bad("$all/$elemMatch has to be consistent"));
                    }
                    match e {
                        Bson::Document(ed) if first_em => {
                            subs.push(parse_elem_match(ed.get("$elemMatch").unwrap(), ctx)?)
                        }
                        Bson::Document(ed) if is_operator_doc(ed) => {
                            return Err(bad("no $ expressions in $all"))
                        }
                        Bson::RegularExpression(r) => subs.push(Pred::Regex(regex_from_bson(r)?)),
                        _ => subs.push(Pred::Eq(e.clone())),
                    }
                }
                Pred::All(subs)
            }
            "$elemMatch" => parse_elem_match(v, ctx)?,
            "$not" => match v {
                Bson::RegularExpression(r) => Pred::Not(vec![Pred::Regex(regex_from_bson(r)?)]),
                Bson::Document(nd) => {
                    if nd.is_empty() {
                        return Err(bad("$not cannot be empty"));
                    }
                    if !nd.keys().next().unwrap().starts_with('$') {
                        return Err(bad(format!(
                            "unknown operator: {}",
                            nd.keys().next().unwrap()
                        )));
                    }
                    Pred::Not(parse_operator_doc(nd, ctx)?)
                }
                _ => return Err(bad("$not needs a regex or a document")),
            },
            "$comment" => continue,
            "$geoWithin" | "$within" => Pred::Geo(Box::new(crate::geo::query::parse_within(v)?)),
            "$geoIntersects" => Pred::Geo(Box::new(crate::geo::query::parse_intersects(v)?)),
            "$maxDistance" | "$minDistance" => {
                return Err(bad(format!(
                    "{k} can only be used with $near or $nearSphere"
                )))
            }
            "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
                return Err(bad(format!("{k} is not supported")))
            }
            "$where" | "$text" => return Err(bad(format!("{k} is not allowed in this context"))),
            _ => return Err(bad(format!("unknown operator: {k}"))),
        };
        preds.push(p);
    }
    Ok(preds)
}

//! Query filters (`find`, `$match`, update/delete selectors) with MongoDB 7.0
//! semantics: implicit equality, comparison operators with type bracketing,
//! logical operators, element/array/evaluation operators and dotted paths with
//! array expansion.

use crate::collation::Collator;
use crate::compare::{as_f64, bson_eq_with, canonical_type, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use crate::path::parse_index;
use bson::{Bson, Document};
// PCRE-style features (lookaround, backreferences) that MongoDB's regexes allow and
// drivers use, e.g. `^(?!system\.)` in listCollections filters.
use fancy_regex::Regex;
use std::cmp::Ordering;
use std::sync::Arc;

/// Constraints on one field, for the engine's index selection.
#[derive(Debug, Clone, Default)]
pub struct FieldBounds {
    pub eq: Option<Bson>,
    pub in_values: Option<Vec<Bson>>,
    pub gt: Option<Bson>,
    pub gte: Option<Bson>,
    pub lt: Option<Bson>,
    pub lte: Option<Bson>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

#[derive(Debug, Clone)]
struct RegexPred {
    re: Regex,
    pattern: String,
    options: String,
}

#[derive(Debug, Clone)]
enum InItem {
    Value(Bson),
    Regex(RegexPred),
}

#[derive(Debug, Clone)]
enum Pred {
    Eq(Bson),
    Ne(Bson),
    Cmp(CmpOp, Bson),
    In(Vec<InItem>),
    Nin(Vec<InItem>),
    Exists(bool),
    Type(Vec<i32>),
    Regex(RegexPred),
    Mod(i64, i64),
    Size(i64),
    ElemMatchValue(Vec<Pred>),
    ElemMatchDoc(Box<Node>),
    /// `$all` (every sub-predicate must match; empty list matches nothing).
    All(Vec<Pred>),
    Not(Vec<Pred>),
    /// `$geoWithin`, `$geoIntersects`, `$near`, `$nearSphere`.
    Geo(Box<crate::geo::GeoPred>),
}

#[derive(Debug, Clone)]
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Field {
        path: String,
        parts: Vec<String>,
        preds: Vec<Pred>,
    },
    Expr(Bson),
    /// `$where`: JavaScript run with the document as `this`.
    Where(Arc<str>),
    Const(bool),
    /// `$text` (top level, or in a top-level `$and`).
    Text(Box<crate::text::TextPredicate>),
}

#[derive(Debug, Clone)]
pub struct Matcher {
    filter: Document,
    root: Node,
    /// The operation's collation (None: binary string comparison).
    collator: Option<Arc<Collator>>,
    /// The filter runs JavaScript (`$where`, `$function` in `$expr`).
    uses_script: bool,
}

/// What a filter may contain where it is parsed, and at which level.
#[derive(Debug, Clone, Copy)]
struct ParseCtx {
    /// `$where` is allowed (user queries: find, count, distinct, update/delete filters,
    /// findAndModify), as mongod's `kJavascript` feature.
    javascript: bool,
    /// Parsing the top-level document, not an `$elemMatch` sub-document.
    top_level: bool,
}

/// The collation a predicate is evaluated under.
type Coll<'a> = Option<&'a Arc<Collator>>;

// ---------------------------------------------------------------- parsing

fn bad(msg: impl Into<String>) -> Error {
    Error::bad_value(msg)
}

fn is_operator_doc(d: &Document) -> bool {
    match d.keys().next() {
        Some(k) => k.starts_with('$') && !matches!(k.as_str(), "$ref" | "$id" | "$db"),
        None => false,
    }
}

/// JS-like truthiness used by `$exists` and `$expr`.
fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        _ if is_number(v) => as_f64(v).map(|f| f != 0.0).unwrap_or(true),
        _ => true,
    }
}

fn compile_regex(pattern: &str, options: &str) -> Result<RegexPred> {
    let mut flags = String::new();
    for c in options.chars() {
        match c {
            'i' | 'm' | 's' | 'x' => {
                if !flags.contains(c) {
                    flags.push(c)
                }
            }
            'u' => {}
            _ => {
                return Err(Error::location(
                    51108,
                    format!("invalid flag in regex options: {c}"),
                ))
            }
        }
    }
    let full = if flags.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{flags}){pattern}")
    };
    let re = Regex::new(&full)
        .map_err(|e| Error::location(51091, format!("Regular expression is invalid: {e}")))?;
    Ok(RegexPred {
        re,
        pattern: pattern.to_string(),
        options: options.to_string(),
    })
}

fn regex_from_bson(r: &bson::Regex) -> Result<RegexPred> {
    compile_regex(&r.pattern, &r.options)
}

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

fn parse_doc(filter: &Document, ctx: ParseCtx) -> Result<Node> {
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
                "jsonSchema" => return Err(bad("$jsonSchema is not supported")),
                "sampleRate" => return Err(bad("$sampleRate is not supported")),
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

const TYPE_ALIASES: &[(&str, i32)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

/// Pseudo type code for the "number" alias.
const TYPE_NUMBER: i32 = 1000;

fn parse_type_one(v: &Bson) -> Result<i32> {
    match v {
        Bson::String(s) => {
            if s == "number" {
                return Ok(TYPE_NUMBER);
            }
            TYPE_ALIASES
                .iter()
                .find(|(n, _)| n == s)
                .map(|(_, c)| *c)
                .ok_or_else(|| bad(format!("Unknown type name alias: {s}")))
        }
        _ if is_number(v) => {
            let f = as_f64(v).unwrap_or(f64::NAN);
            if f.fract() != 0.0 || !f.is_finite() {
                return Err(bad(format!("Invalid numerical type code: {f}")));
            }
            let c = f as i64;
            if (1..=19).contains(&c) || c == -1 || c == 127 {
                Ok(c as i32)
            } else {
                Err(bad(format!("Invalid numerical type code: {c}")))
            }
        }
        _ => Err(bad("type must be represented as a number or a string")),
    }
}

fn type_code(v: &Bson) -> i32 {
    match v {
        Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Array(_) => 4,
        Bson::Binary(_) => 5,
        Bson::Undefined => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Null => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::Symbol(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::Int32(_) => 16,
        Bson::Timestamp(_) => 17,
        Bson::Int64(_) => 18,
        Bson::Decimal128(_) => 19,
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
    }
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
                if t >= 9.223_372_036_854_775_808e18 || t < -9.223_372_036_854_775_808e18 {
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

// ---------------------------------------------------------------- evaluation

/// Collects the values a dotted path reaches in `cur`, expanding arrays one level
/// per component (array elements that are documents are descended into; numeric
/// components also index into arrays). `None` means "missing here".
fn collect<'a>(cur: &'a Bson, parts: &[String], out: &mut Vec<Option<&'a Bson>>) {
    if parts.is_empty() {
        out.push(Some(cur));
        return;
    }
    match cur {
        Bson::Document(d) => match d.get(&parts[0]) {
            Some(v) => collect(v, &parts[1..], out),
            None => out.push(None),
        },
        Bson::Array(arr) => {
            if let Some(i) = parse_index(&parts[0]) {
                if let Some(e) = arr.get(i) {
                    collect(e, &parts[1..], out);
                }
            }
            for e in arr {
                if let Bson::Document(_) = e {
                    collect(e, parts, out);
                }
            }
        }
        _ => out.push(None),
    }
}

fn leaves<'a>(doc: &'a Document, parts: &[String]) -> Vec<Option<&'a Bson>> {
    let mut out = Vec::new();
    match doc.get(&parts[0]) {
        Some(v) => collect(v, &parts[1..], &mut out),
        None => out.push(None),
    }
    if out.is_empty() {
        out.push(None);
    }
    out
}

/// `x` or (when `expand` and `x` is an array) any element of `x` satisfies `f`.
fn any_expanded(x: &Bson, expand: bool, f: &dyn Fn(&Bson) -> bool) -> bool {
    if f(x) {
        return true;
    }
    if expand {
        if let Bson::Array(a) = x {
            return a.iter().any(f);
        }
    }
    false
}

fn cmp_single(x: &Bson, op: CmpOp, rhs: &Bson, coll: Coll) -> bool {
    if canonical_type(x) != canonical_type(rhs) {
        return match rhs {
            Bson::MaxKey => matches!(op, CmpOp::Lt | CmpOp::Lte),
            Bson::MinKey => matches!(op, CmpOp::Gt | CmpOp::Gte),
            _ => false,
        };
    }
    if is_number(x) && is_number(rhs) {
        let xn = as_f64(x).map(|f| f.is_nan()).unwrap_or(false);
        let rn = as_f64(rhs).map(|f| f.is_nan()).unwrap_or(false);
        if xn || rn {
            return xn && rn && matches!(op, CmpOp::Gte | CmpOp::Lte);
        }
    }
    let o = cmp_bson_with(x, rhs, coll.map(|c| &**c));
    match op {
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Gte => o != Ordering::Less,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Lte => o != Ordering::Greater,
    }
}

fn regex_single(x: &Bson, r: &RegexPred) -> bool {
    match x {
        // A match that exceeds the backtracking limit counts as no match.
        Bson::String(s) | Bson::Symbol(s) => r.re.is_match(s).unwrap_or(false),
        Bson::RegularExpression(v) => v.pattern == r.pattern && v.options == r.options,
        _ => false,
    }
}

fn eq_leaf(leaf: Option<&Bson>, v: &Bson, expand: bool, coll: Coll) -> bool {
    let coll = coll.map(|c| &**c);
    match leaf {
        None => matches!(v, Bson::Null),
        Some(x) => any_expanded(x, expand, &|e| bson_eq_with(e, v, coll)),
    }
}

fn in_leaf(leaf: Option<&Bson>, items: &[InItem], expand: bool, coll: Coll) -> bool {
    items.iter().any(|it| match it {
        InItem::Value(v) => eq_leaf(leaf, v, expand, coll),
        InItem::Regex(r) => leaf
            .map(|x| any_expanded(x, expand, &|e| regex_single(e, r)))
            .unwrap_or(false),
    })
}

fn mod_single(x: &Bson, d: i64, r: i64) -> bool {
    let n = match x {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        Bson::Double(_) | Bson::Decimal128(_) => {
            let f = as_f64(x).unwrap_or(f64::NAN);
            if !f.is_finite() {
                return false;
            }
            let t = f.trunc();
            if t >= 9.223_372_036_854_775_808e18 || t < -9.223_372_036_854_775_808e18 {
                return false;
            }
            t as i64
        }
        _ => return false,
    };
    n.wrapping_rem(d) == r
}

fn type_single(x: &Bson, codes: &[i32]) -> bool {
    let c = type_code(x);
    codes
        .iter()
        .any(|&t| t == c || (t == TYPE_NUMBER && is_number(x)))
}

fn array_as_doc(a: &[Bson]) -> Document {
    let mut d = Document::new();
    for (i, v) in a.iter().enumerate() {
        d.insert(i.to_string(), v.clone());
    }
    d
}

/// Does `pred` hold for the set of values a path reached? `expand` = leaf arrays are
/// also matched element-wise (false inside `$elemMatch` value form).
fn eval_pred(pred: &Pred, ls: &[Option<&Bson>], expand: bool, coll: Coll) -> Result<bool> {
    Ok(match pred {
        Pred::Eq(v) => ls.iter().any(|l| eq_leaf(*l, v, expand, coll)),
        Pred::Ne(v) => !ls.iter().any(|l| eq_leaf(*l, v, expand, coll)),
        Pred::Cmp(op, v) => ls.iter().any(|l| match l {
            None => matches!(v, Bson::Null) && matches!(op, CmpOp::Gte | CmpOp::Lte),
            Some(x) => any_expanded(x, expand, &|e| cmp_single(e, *op, v, coll)),
        }),
        Pred::In(items) => ls.iter().any(|l| in_leaf(*l, items, expand, coll)),
        Pred::Nin(items) => !ls.iter().any(|l| in_leaf(*l, items, expand, coll)),
        Pred::Exists(b) => ls.iter().any(|l| l.is_some()) == *b,
        Pred::Type(codes) => ls
            .iter()
            .flatten()
            .any(|x| any_expanded(x, expand, &|e| type_single(e, codes))),
        Pred::Regex(r) => ls
            .iter()
            .flatten()
            .any(|x| any_expanded(x, expand, &|e| regex_single(e, r))),
        Pred::Mod(d, r) => ls
            .iter()
            .flatten()
            .any(|x| any_expanded(x, expand, &|e| mod_single(e, *d, *r))),
        Pred::Size(n) => ls
            .iter()
            .flatten()
            .any(|x| matches!(x, Bson::Array(a) if a.len() as i64 == *n)),
        Pred::ElemMatchValue(preds) => {
            for x in ls.iter().flatten() {
                if let Bson::Array(a) = x {
                    for e in a {
                        let one = [Some(e)];
                        let mut all = true;
                        for p in preds {
                            if !eval_pred(p, &one, false, coll)? {
                                all = false;
                                break;
                            }
                        }
                        if all {
                            return Ok(true);
                        }
                    }
                }
            }
            false
        }
        Pred::ElemMatchDoc(node) => {
            for x in ls.iter().flatten() {
                if let Bson::Array(a) = x {
                    for e in a {
                        let ok = match e {
                            Bson::Document(d) => eval_node(node, d, coll)?,
                            Bson::Array(inner) => eval_node(node, &array_as_doc(inner), coll)?,
                            _ => false,
                        };
                        if ok {
                            return Ok(true);
                        }
                    }
                }
            }
            false
        }
        Pred::All(subs) => {
            if subs.is_empty() {
                return Ok(false);
            }
            for p in subs {
                if !eval_pred(p, ls, expand, coll)? {
                    return Ok(false);
                }
            }
            true
        }
        Pred::Not(subs) => {
            for p in subs {
                if !eval_pred(p, ls, expand, coll)? {
                    return Ok(true);
                }
            }
            false
        }
        Pred::Geo(g) => g.matches(ls),
    })
}

fn eval_node(node: &Node, doc: &Document, coll: Coll) -> Result<bool> {
    Ok(match node {
        Node::And(ns) => {
            for n in ns {
                if !eval_node(n, doc, coll)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Or(ns) => {
            for n in ns {
                if eval_node(n, doc, coll)? {
                    return Ok(true);
                }
            }
            false
        }
        Node::Nor(ns) => {
            for n in ns {
                if eval_node(n, doc, coll)? {
                    return Ok(false);
                }
            }
            true
        }
        Node::Const(b) => *b,
        Node::Where(code) => crate::script::run_where(code, doc)?,
        Node::Text(t) => t.evaluate(doc)?.is_some(),
        Node::Expr(e) => {
            let vars = crate::expr::Variables {
                collator: coll.cloned(),
                ..Default::default()
            };
            let v = crate::expr::evaluate(e, doc, &vars)?;
            truthy(&v)
        }
        Node::Field { parts, preds, .. } => {
            let ls = leaves(doc, parts);
            for p in preds {
                if !eval_pred(p, &ls, true, coll)? {
                    return Ok(false);
                }
            }
            true
        }
    })
}

// ---------------------------------------------------------------- public API

impl Matcher {
    /// A filter where `$where` is not allowed (validators, partial indexes, `$match`,
    /// `$pull` conditions, ...).
    pub fn new(filter: &Document) -> Result<Matcher> {
        Self::parse(filter, false, None)
    }

    /// A matcher comparing strings under `collator` (None: binary comparison).
    pub fn with_collation(filter: &Document, collator: Option<Arc<Collator>>) -> Result<Matcher> {
        Self::parse(filter, false, collator)
    }

    /// The filter of a user query (find, count, distinct, update, delete,
    /// findAndModify): `$where` is allowed at its top level.
    pub fn for_query(filter: &Document) -> Result<Matcher> {
        Self::parse(filter, true, None)
    }

    /// A user query's filter (`$where` allowed) comparing strings under `collator`.
    pub fn for_query_with_collation(
        filter: &Document,
        collator: Option<Arc<Collator>>,
    ) -> Result<Matcher> {
        Self::parse(filter, true, collator)
    }

    fn parse(
        filter: &Document,
        javascript: bool,
        collator: Option<Arc<Collator>>,
    ) -> Result<Matcher> {
        let ctx = ParseCtx {
            javascript,
            top_level: true,
        };
        let root = parse_doc(filter, ctx)?;
        check_text_placement(&root)?;
        Ok(Matcher {
            filter: filter.clone(),
            uses_script: node_uses_script(&root),
            root,
            collator,
        })
    }

    /// The collation the matcher compares strings under.
    pub fn collator(&self) -> Option<&Collator> {
        self.collator.as_deref()
    }

    pub fn collator_arc(&self) -> Option<&Arc<Collator>> {
        self.collator.as_ref()
    }

    /// Whether matching runs JavaScript (then it must run on the blocking pool).
    pub fn uses_script(&self) -> bool {
        self.uses_script
    }

    /// Errors while evaluating (e.g. in `$expr`) count as "no match".
    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_checked(doc).unwrap_or(false)
    }

    /// For scans: an error that ends the operation (a script that throws, maxTimeMS
    /// expired, a client gone) fails it; other evaluation errors count as "no match".
    pub fn matches_or_fail(&self, doc: &Document) -> Result<bool> {
        match self.matches_checked(doc) {
            Ok(b) => Ok(b),
            Err(e) if e.ends_operation() => Err(e),
            Err(_) => Ok(false),
        }
    }

    pub fn matches_checked(&self, doc: &Document) -> Result<bool> {
        eval_node(&self.root, doc, self.collator.as_ref())
    }

    pub fn filter(&self) -> &Document {
        &self.filter
    }

    /// The `$text` predicate, if the filter has one.
    pub fn text(&self) -> Option<&crate::text::TextPredicate> {
        match &self.root {
            Node::Text(t) => Some(t),
            Node::And(ns) => ns.iter().find_map(|n| match n {
                Node::Text(t) => Some(&**t),
                _ => None,
            }),
            _ => None,
        }
    }

    /// The `$near`/`$nearSphere` predicate and its path, if the filter has one.
    pub fn geo_near(&self) -> Option<(&str, &crate::geo::NearPred)> {
        fn find(n: &Node) -> Option<(&str, &crate::geo::NearPred)> {
            match n {
                Node::Field { path, preds, .. } => preds.iter().find_map(|p| match p {
                    Pred::Geo(g) => match &**g {
                        crate::geo::GeoPred::Near(near) => Some((path.as_str(), near)),
                        _ => None,
                    },
                    _ => None,
                }),
                Node::And(ns) => ns.iter().find_map(find),
                _ => None,
            }
        }
        find(&self.root)
    }

    /// The distance from the `$near` point to a document's nearest location within the
    /// bounds, with that location.
    pub fn geo_near_distance(&self, doc: &Document) -> Option<(f64, crate::geo::shape::Stored)> {
        let (path, near) = self.geo_near()?;
        let parts: Vec<String> = path.split('.').map(String::from).collect();
        let mut locs = Vec::new();
        for v in leaves(doc, &parts).into_iter().flatten() {
            crate::geo::shape::locations(v, &mut locs);
        }
        near.nearest(&locs).map(|(d, l)| (d, l.clone()))
    }

    /// The text score of a matching document (None without `$text` or on no match).
    pub fn text_score(&self, doc: &Document) -> Option<f64> {
        self.text()?.evaluate(doc).ok().flatten()
    }

    /// Top-level ANDed constraints per field, for index selection.
    pub fn index_predicates(&self) -> Vec<(String, FieldBounds)> {
        let mut out: Vec<(String, FieldBounds)> = Vec::new();
        collect_bounds(&self.root, &mut out);
        out.retain(|(_, b)| {
            b.eq.is_some()
                || b.in_values.is_some()
                || b.gt.is_some()
                || b.gte.is_some()
                || b.lt.is_some()
                || b.lte.is_some()
        });
        out
    }

    /// `{_id: v}` / `{_id: {$eq: v}}` at the top level.
    pub fn id_equality(&self) -> Option<Bson> {
        self.index_predicates()
            .into_iter()
            .find(|(p, _)| p == "_id")
            .and_then(|(_, b)| b.eq)
            .filter(|v| match v {
                Bson::RegularExpression(_) => false,
                Bson::Document(d) => !is_operator_doc(d),
                _ => true,
            })
    }
}

fn node_uses_script(node: &Node) -> bool {
    match node {
        Node::Where(_) => true,
        Node::Expr(e) => crate::expr::contains_operator(e, &["$function"]),
        Node::And(ns) | Node::Or(ns) | Node::Nor(ns) => ns.iter().any(node_uses_script),
        Node::Field { preds, .. } => preds.iter().any(pred_uses_script),
        Node::Const(_) | Node::Text(_) => false,
    }
}

fn pred_uses_script(p: &Pred) -> bool {
    match p {
        Pred::ElemMatchDoc(n) => node_uses_script(n),
        Pred::ElemMatchValue(ps) | Pred::All(ps) | Pred::Not(ps) => ps.iter().any(pred_uses_script),
        _ => false,
    }
}

/// `$text` and `$near` may each appear once, at the top level or in a top-level `$and`
/// (mongod also allows `$text` in an `$or` whose every branch is indexed; this server
/// does not).
fn check_text_placement(root: &Node) -> Result<()> {
    fn count(n: &Node, nested: bool, found: &mut (usize, usize)) -> Result<()> {
        match n {
            Node::Text(_) => {
                if nested {
                    return Err(bad(
                        "$text is only allowed at the top level of a query or in a top-level $and",
                    ));
                }
                found.0 += 1;
            }
            Node::And(ns) => {
                for c in ns {
                    count(c, nested, found)?;
                }
            }
            Node::Or(ns) | Node::Nor(ns) => {
                for c in ns {
                    count(c, true, found)?;
                }
            }
            Node::Field { preds, .. } => {
                for p in preds {
                    match p {
                        Pred::ElemMatchDoc(inner) => count(inner, true, found)?,
                        Pred::Geo(g) if matches!(**g, crate::geo::GeoPred::Near(_)) => {
                            if nested {
                                return Err(bad("geoNear must be top-level expr"));
                            }
                            found.1 += 1;
                        }
                        Pred::Not(inner) | Pred::ElemMatchValue(inner) | Pred::All(inner)
                            if inner.iter().any(|p| matches!(p, Pred::Geo(g) if matches!(**g, crate::geo::GeoPred::Near(_)))) =>
                        {
                            return Err(bad("geoNear must be top-level expr"));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
    let mut found = (0, 0);
    count(root, false, &mut found)?;
    if found.0 > 1 {
        return Err(bad("Too many text expressions"));
    }
    if found.1 > 1 {
        return Err(bad("Too many geoNear expressions"));
    }
    Ok(())
}

fn collect_bounds(node: &Node, out: &mut Vec<(String, FieldBounds)>) {
    match node {
        Node::And(ns) => ns.iter().for_each(|n| collect_bounds(n, out)),
        Node::Field { path, preds, .. } => {
            let idx = match out.iter().position(|(p, _)| p == path) {
                Some(i) => i,
                None => {
                    out.push((path.clone(), FieldBounds::default()));
                    out.len() - 1
                }
            };
            let b = &mut out[idx].1;
            for p in preds {
                match p {
                    Pred::Eq(v) if !matches!(v, Bson::Array(_) | Bson::RegularExpression(_)) => {
                        if b.eq.is_none() {
                            b.eq = Some(v.clone());
                        }
                    }
                    Pred::In(items) => {
                        let vals: Option<Vec<Bson>> = items
                            .iter()
                            .map(|i| match i {
                                InItem::Value(v) if !matches!(v, Bson::Array(_)) => Some(v.clone()),
                                _ => None,
                            })
                            .collect();
                        if let Some(vals) = vals {
                            if b.in_values.is_none() {
                                b.in_values = Some(vals);
                            }
                        }
                    }
                    Pred::Cmp(op, v) if !matches!(v, Bson::Array(_)) => {
                        let slot = match op {
                            CmpOp::Gt => &mut b.gt,
                            CmpOp::Gte => &mut b.gte,
                            CmpOp::Lt => &mut b.lt,
                            CmpOp::Lte => &mut b.lte,
                        };
                        if slot.is_none() {
                            *slot = Some(v.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn m(filter: Document) -> Matcher {
        Matcher::new(&filter).unwrap_or_else(|e| panic!("{filter}: {e}"))
    }
    fn yes(filter: Document, d: Document) {
        assert!(m(filter.clone()).matches(&d), "{filter} should match {d}");
    }
    fn no(filter: Document, d: Document) {
        assert!(
            !m(filter.clone()).matches(&d),
            "{filter} should not match {d}"
        );
    }
    fn err(filter: Document) -> Error {
        match Matcher::new(&filter) {
            Ok(_) => panic!("{filter} should fail to parse"),
            Err(e) => e,
        }
    }

    #[test]
    fn implicit_equality_and_arrays() {
        yes(doc! {"a": 1}, doc! {"a": 1});
        yes(doc! {"a": 1}, doc! {"a": 1.0});
        yes(doc! {"a": 1}, doc! {"a": 1i64});
        no(doc! {"a": 1}, doc! {"a": "1"});
        yes(doc! {"a": 1}, doc! {"a": [3, 1]});
        yes(doc! {"a": [1, 2]}, doc! {"a": [1, 2]});
        yes(doc! {"a": [1, 2]}, doc! {"a": [[1, 2], 3]});
        no(doc! {"a": [1, 2]}, doc! {"a": [2, 1]});
        no(doc! {"a": 1}, doc! {"a": [[1]]});
        yes(doc! {"a": {"b": 1, "c": 2}}, doc! {"a": {"b": 1, "c": 2}});
        no(doc! {"a": {"b": 1, "c": 2}}, doc! {"a": {"c": 2, "b": 1}});
        yes(doc! {}, doc! {"x": 1});
        yes(doc! {"a": 1, "b": 2}, doc! {"b": 2, "a": 1});
        no(doc! {"a": 1, "b": 2}, doc! {"a": 1});
    }

    #[test]
    fn null_and_missing() {
        yes(doc! {"a": Bson::Null}, doc! {});
        yes(doc! {"a": Bson::Null}, doc! {"a": Bson::Null});
        yes(doc! {"a": Bson::Null}, doc! {"a": [1, Bson::Null]});
        no(doc! {"a": Bson::Null}, doc! {"a": [1]});
        no(doc! {"a": Bson::Null}, doc! {"a": 0});
        no(doc! {"a": Bson::Null}, doc! {"a": Bson::Undefined});
        yes(doc! {"a.b": Bson::Null}, doc! {"a": [{"b": 1}, {"c": 1}]});
        no(doc! {"a.b": Bson::Null}, doc! {"a": [{"b": 1}]});
        yes(doc! {"a": {"$ne": Bson::Null}}, doc! {"a": 0});
        no(doc! {"a": {"$ne": Bson::Null}}, doc! {});
        yes(doc! {"a": {"$gte": Bson::Null}}, doc! {});
        yes(doc! {"a": {"$lte": Bson::Null}}, doc! {"a": Bson::Null});
        no(doc! {"a": {"$gt": Bson::Null}}, doc! {});
        no(doc! {"a": {"$gte": Bson::Null}}, doc! {"a": 1});
        yes(doc! {"a": {"$in": [Bson::Null, 5]}}, doc! {"b": 1});
    }

    #[test]
    fn comparison_with_type_bracketing() {
        yes(doc! {"a": {"$gt": 1}}, doc! {"a": 1.5});
        no(doc! {"a": {"$gt": 1}}, doc! {"a": "2"});
        no(doc! {"a": {"$lt": "z"}}, doc! {"a": 5});
        yes(doc! {"a": {"$lt": "z"}}, doc! {"a": "abc"});
        yes(doc! {"a": {"$gte": 2i64}}, doc! {"a": 2.0});
        yes(doc! {"a": {"$lte": 2.0}}, doc! {"a": 2});
        no(doc! {"a": {"$gt": 5}}, doc! {});
        yes(doc! {"a": {"$gt": 5}}, doc! {"a": [1, 10]});
        yes(doc! {"a": {"$gt": 1, "$lt": 3}}, doc! {"a": [0, 5]}); // different elements may satisfy each
        no(
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}},
            doc! {"a": [0, 5]},
        );
        yes(doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"});
        yes(doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": {"b": 1}});
        no(doc! {"a": {"$gt": Bson::MaxKey}}, doc! {"a": 1});
        yes(
            doc! {"a": {"$gt": bson::DateTime::from_millis(5)}},
            doc! {"a": bson::DateTime::from_millis(6)},
        );
        no(
            doc! {"a": {"$gt": bson::DateTime::from_millis(5)}},
            doc! {"a": 6},
        );
        no(doc! {"a": {"$lt": 5}}, doc! {"a": f64::NAN});
        yes(doc! {"a": {"$gte": f64::NAN}}, doc! {"a": f64::NAN});
        no(doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 1});
        yes(doc! {"a": {"$gt": [1]}}, doc! {"a": [2]}); // whole-array comparison
    }

    fn collated(filter: Document, spec: Document) -> Matcher {
        let c = crate::collation::Collator::parse(&spec).unwrap();
        Matcher::with_collation(&filter, c).unwrap()
    }

    #[test]
    fn collation_applies_to_string_comparisons() {
        let ci = doc! {"locale": "en", "strength": 2};
        let m = |f: Document| collated(f, ci.clone());
        assert!(m(doc! {"a": "PING"}).matches(&doc! {"a": "ping"}));
        assert!(m(doc! {"a": "PING"}).matches(&doc! {"a": ["x", "Ping"]}));
        assert!(!m(doc! {"a": {"$ne": "PING"}}).matches(&doc! {"a": "ping"}));
        assert!(m(doc! {"a": {"$in": [1, "PING"]}}).matches(&doc! {"a": "ping"}));
        assert!(!m(doc! {"a": {"$nin": ["PING"]}}).matches(&doc! {"a": "ping"}));
        assert!(m(doc! {"a": {"$gte": "B"}}).matches(&doc! {"a": "b"}));
        assert!(m(doc! {"a": {"$lt": "B"}}).matches(&doc! {"a": "a"}));
        assert!(m(doc! {"a": {"b": "X"}}).matches(&doc! {"a": {"b": "x"}}));
        assert!(m(doc! {"a": {"$elemMatch": {"b": "X"}}}).matches(&doc! {"a": [{"b": "x"}]}));
        assert!(m(doc! {"$expr": {"$eq": ["$a", "X"]}}).matches(&doc! {"a": "x"}));
        // Not for regexes, types or numbers.
        assert!(!m(doc! {"a": {"$regex": "^P"}}).matches(&doc! {"a": "ping"}));
        assert!(!m(doc! {"a": "1"}).matches(&doc! {"a": 1}));
        // Without a collation, strings compare by their bytes.
        assert!(!Matcher::new(&doc! {"a": "PING"})
            .unwrap()
            .matches(&doc! {"a": "ping"}));
        assert!(!Matcher::new(&doc! {"a": {"$gt": "B"}})
            .unwrap()
            .matches(&doc! {"a": "A"}));
    }

    #[test]
    fn eq_ne_in_nin() {
        yes(doc! {"a": {"$eq": 2}}, doc! {"a": [1, 2]});
        no(doc! {"a": {"$ne": 2}}, doc! {"a": [1, 2]});
        yes(doc! {"a": {"$ne": 2}}, doc! {});
        yes(doc! {"a": {"$in": [5, 2]}}, doc! {"a": 2.0});
        yes(doc! {"a": {"$in": [5, 2]}}, doc! {"a": [7, 5]});
        no(doc! {"a": {"$in": []}}, doc! {"a": 1});
        yes(doc! {"a": {"$nin": [5, 2]}}, doc! {"a": 3});
        yes(doc! {"a": {"$nin": [5, 2]}}, doc! {});
        no(doc! {"a": {"$nin": [5, 2]}}, doc! {"a": [1, 2]});
        yes(
            doc! {"a": {"$in": [Bson::RegularExpression(bson::Regex { pattern: "^ab".into(), options: "".into() })]}},
            doc! {"a": "abc"},
        );
        no(
            doc! {"a": {"$nin": [Bson::RegularExpression(bson::Regex { pattern: "^ab".into(), options: "".into() })]}},
            doc! {"a": ["x", "abc"]},
        );
        // $eq with a regex compares regex values, not patterns against strings
        let re = Bson::RegularExpression(bson::Regex {
            pattern: "a".into(),
            options: "".into(),
        });
        no(doc! {"a": {"$eq": re.clone()}}, doc! {"a": "a"});
        yes(doc! {"a": {"$eq": re.clone()}}, doc! {"a": re});
    }

    #[test]
    fn logical_operators() {
        let f = doc! {"$or": [{"a": 1}, {"b": {"$gt": 5}}]};
        yes(f.clone(), doc! {"a": 1});
        yes(f.clone(), doc! {"b": 6});
        no(f, doc! {"a": 2, "b": 5});
        yes(
            doc! {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 5}}]},
            doc! {"a": 3},
        );
        no(
            doc! {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 5}}]},
            doc! {"a": 7},
        );
        yes(doc! {"$nor": [{"a": 1}, {"b": 1}]}, doc! {"a": 2});
        no(doc! {"$nor": [{"a": 1}, {"b": 1}]}, doc! {"b": 1});
        yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3});
        yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {});
        yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": "zzz"});
        no(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": [1, 6]});
        let re = Bson::RegularExpression(bson::Regex {
            pattern: "^x".into(),
            options: "".into(),
        });
        no(doc! {"a": {"$not": re.clone()}}, doc! {"a": "xy"});
        yes(doc! {"a": {"$not": re}}, doc! {"a": "yx"});
        yes(doc! {"a": 1, "$comment": "hello"}, doc! {"a": 1});
        yes(doc! {"$alwaysTrue": 1}, doc! {});
        no(doc! {"$alwaysFalse": 1}, doc! {});
    }

    #[test]
    fn exists_and_type() {
        yes(doc! {"a": {"$exists": true}}, doc! {"a": Bson::Null});
        no(doc! {"a": {"$exists": true}}, doc! {"b": 1});
        yes(doc! {"a": {"$exists": 0}}, doc! {"b": 1});
        yes(doc! {"a": {"$exists": 1}}, doc! {"a": []});
        yes(
            doc! {"a.b": {"$exists": true}},
            doc! {"a": [{"c": 1}, {"b": 2}]},
        );
        no(doc! {"a.b": {"$exists": true}}, doc! {"a": [{"c": 1}, 3]});
        yes(doc! {"a.b": {"$exists": false}}, doc! {"a": [1, 2]});
        yes(doc! {"a": {"$type": "string"}}, doc! {"a": "x"});
        yes(doc! {"a": {"$type": 2}}, doc! {"a": "x"});
        yes(doc! {"a": {"$type": "number"}}, doc! {"a": 1i64});
        yes(doc! {"a": {"$type": "number"}}, doc! {"a": 1.5});
        no(doc! {"a": {"$type": "number"}}, doc! {"a": "1"});
        yes(doc! {"a": {"$type": "array"}}, doc! {"a": []});
        yes(doc! {"a": {"$type": "int"}}, doc! {"a": ["x", 1]});
        no(doc! {"a": {"$type": "long"}}, doc! {"a": 1});
        yes(
            doc! {"a": {"$type": ["long", "null"]}},
            doc! {"a": Bson::Null},
        );
        no(doc! {"a": {"$type": "null"}}, doc! {});
        yes(doc! {"a": {"$type": "double"}}, doc! {"a": 1.0});
        yes(doc! {"a": {"$type": "object"}}, doc! {"a": {}});
        yes(doc! {"a": {"$type": "minKey"}}, doc! {"a": Bson::MinKey});
    }

    #[test]
    fn regex_matching() {
        yes(doc! {"a": {"$regex": "^ab"}}, doc! {"a": "abc"});
        no(doc! {"a": {"$regex": "^ab"}}, doc! {"a": "ABC"});
        yes(
            doc! {"a": {"$regex": "^ab", "$options": "i"}},
            doc! {"a": "ABC"},
        );
        yes(
            doc! {"a": {"$regex": "^b", "$options": "m"}},
            doc! {"a": "a\nb"},
        );
        no(doc! {"a": {"$regex": "^b"}}, doc! {"a": "a\nb"});
        yes(
            doc! {"a": {"$regex": "a.b", "$options": "s"}},
            doc! {"a": "a\nb"},
        );
        yes(
            doc! {"a": {"$regex": "a b # comment", "$options": "x"}},
            doc! {"a": "ab"},
        );
        let re = Bson::RegularExpression(bson::Regex {
            pattern: "o+".into(),
            options: "i".into(),
        });
        yes(doc! {"a": re.clone()}, doc! {"a": "fOO"});
        yes(doc! {"a": re.clone()}, doc! {"a": ["x", "foo"]});
        no(doc! {"a": re.clone()}, doc! {"a": 100});
        yes(doc! {"a": re.clone()}, doc! {"a": re});
        yes(
            doc! {"a": {"$regex": bson::Regex { pattern: "^x".into(), options: "".into() }}},
            doc! {"a": "xy"},
        );
        assert_eq!(err(doc! {"a": {"$regex": "("}}).code, 51091);
        assert_eq!(
            err(doc! {"a": {"$options": "i"}}).message,
            "$options needs a $regex"
        );
        assert_eq!(
            err(doc! {"a": {"$regex": "a", "$options": "q"}}).code,
            51108
        );
    }

    #[test]
    fn mod_all_size() {
        yes(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5});
        yes(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.9});
        yes(doc! {"a": {"$mod": [4.5, 1]}}, doc! {"a": 9}); // divisor truncated to 4
        yes(doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5});
        no(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"});
        yes(doc! {"a": {"$mod": [4, 0]}}, doc! {"a": [3, 8]});
        yes(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]});
        no(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3]});
        yes(doc! {"a": {"$all": [1]}}, doc! {"a": 1});
        no(doc! {"a": {"$all": []}}, doc! {"a": [1]});
        yes(doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [1, 2]});
        let f = doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": {"$gt": 2}}}]}};
        yes(f.clone(), doc! {"a": [{"b": 1}, {"c": 3}]});
        no(f, doc! {"a": [{"b": 1}, {"c": 2}]});
        yes(doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]});
        no(doc! {"a": {"$size": 2}}, doc! {"a": [1]});
        yes(doc! {"a": {"$size": 0}}, doc! {"a": []});
        no(doc! {"a": {"$size": 0}}, doc! {});
        yes(doc! {"a": {"$size": 2.0}}, doc! {"a": [1, 2]});
        no(doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]});
        yes(
            doc! {"a.b": {"$size": 1}},
            doc! {"a": [{"b": [1]}, {"b": [1, 2, 3]}]},
        );
    }

    #[test]
    fn elem_match_forms() {
        yes(
            doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}},
            doc! {"a": [0, 3, 9]},
        );
        no(doc! {"a": {"$elemMatch": {"$gt": 1}}}, doc! {"a": 3});
        no(doc! {"a": {"$elemMatch": {"$eq": 1}}}, doc! {"a": [[1]]});
        let f = doc! {"a": {"$elemMatch": {"b": 1, "c": {"$gt": 2}}}};
        yes(f.clone(), doc! {"a": [{"b": 1, "c": 1}, {"b": 1, "c": 3}]});
        no(f.clone(), doc! {"a": [{"b": 1, "c": 1}, {"b": 2, "c": 3}]});
        no(f, doc! {"a": {"b": 1, "c": 3}});
        yes(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [1, {}]});
        no(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [1, 2]});
        yes(
            doc! {"a": {"$elemMatch": {"$or": [{"b": 1}, {"b": 2}]}}},
            doc! {"a": [{"b": 2}]},
        );
        yes(
            doc! {"a.b": {"$elemMatch": {"$gte": 2}}},
            doc! {"a": [{"b": [1]}, {"b": [2]}]},
        );
        yes(
            doc! {"a": {"$elemMatch": {"$not": {"$gt": 3}}}},
            doc! {"a": [5, 2]},
        );
    }

    #[test]
    fn dotted_paths_and_array_expansion() {
        yes(doc! {"a.b": 1}, doc! {"a": [{"b": 1}, {"b": 2}]});
        yes(doc! {"a.b": 2}, doc! {"a": {"b": [1, 2]}});
        no(doc! {"a.b": 1}, doc! {"a": [[{"b": 1}]]});
        yes(doc! {"a.0": 1}, doc! {"a": [1]});
        yes(doc! {"a.0": 1}, doc! {"a": {"0": 1}});
        yes(doc! {"a.0": 1}, doc! {"a": [{"0": 1}]});
        no(doc! {"a.1": 1}, doc! {"a": [1]});
        yes(doc! {"a.0.b": 5}, doc! {"a": [{"b": 5}]});
        yes(doc! {"a.b.c": 3}, doc! {"a": [{"b": [{"c": 1}, {"c": 3}]}]});
        no(doc! {"a.b": 1}, doc! {"a": 1});
        yes(doc! {"a.b": {"$gt": 1}}, doc! {"a": [{"b": 0}, {"b": 2}]});
        yes(doc! {"a.b": {"$ne": 1}}, doc! {"a": [{"c": 1}]});
        no(doc! {"a.b": {"$ne": 1}}, doc! {"a": [{"b": 2}, {"b": 1}]});
    }

    #[test]
    fn parse_errors() {
        let e = err(doc! {"$foo": 1});
        assert_eq!(
            (e.code, e.message.as_str()),
            (2, "unknown top level operator: $foo")
        );
        assert_eq!(
            err(doc! {"a": {"$foo": 1}}).message,
            "unknown operator: $foo"
        );
        assert_eq!(
            err(doc! {"a": {"$gt": 1, "b": 1}}).message,
            "unknown operator: b"
        );
        assert_eq!(
            err(doc! {"$and": []}).message,
            "$and must be a nonempty array"
        );
        assert_eq!(err(doc! {"$or": 1}).message, "$or must be a nonempty array");
        assert_eq!(
            err(doc! {"$nor": [1]}).message,
            "$or/$and/$nor entries need to be full objects"
        );
        assert_eq!(err(doc! {"a": {"$in": 1}}).message, "$in needs an array");
        assert_eq!(err(doc! {"a": {"$nin": {}}}).message, "$nin needs an array");
        assert_eq!(err(doc! {"a": {"$all": 1}}).message, "$all needs an array");
        assert_eq!(
            err(doc! {"a": {"$size": 1.5}}).message,
            "$size must be a whole number"
        );
        assert!(err(doc! {"a": {"$size": -1}})
            .message
            .starts_with("Failed to parse $size. Expected a non-negative number in:"));
        assert_eq!(err(doc! {"a": {"$size": "x"}}).code, 2);
        assert_eq!(
            err(doc! {"a": {"$mod": [1]}}).message,
            "malformed mod, not enough elements"
        );
        assert_eq!(
            err(doc! {"a": {"$mod": [1, 2, 3]}}).message,
            "malformed mod, too many elements"
        );
        assert_eq!(
            err(doc! {"a": {"$mod": [0, 1]}}).message,
            "malformed mod, divisor value is invalid :: caused by :: divisor cannot be 0"
        );
        assert_eq!(
            err(doc! {"a": {"$not": 5}}).message,
            "$not needs a regex or a document"
        );
        assert_eq!(
            err(doc! {"a": {"$not": {}}}).message,
            "$not cannot be empty"
        );
        assert_eq!(
            err(doc! {"a": {"$type": "foo"}}).message,
            "Unknown type name alias: foo"
        );
        assert_eq!(err(doc! {"a": {"$type": 99}}).code, 2);
        assert_eq!(
            err(doc! {"a": {"$elemMatch": 1}}).message,
            "$elemMatch needs an Object"
        );
        assert_eq!(
            err(doc! {"$where": "true"}).message,
            "$where is not allowed in this context"
        );
        assert_eq!(err(doc! {"$where": "true"}).code, 2);
        assert_eq!(err(doc! {"$text": "x"}).code, 2);
        assert_eq!(
            err(doc! {"$or": [{"$text": {"$search": "x"}}, {"a": 1}]}).code,
            2
        );
        assert_eq!(
            err(doc! {"$text": {"$search": "x"}, "$and": [{"$text": {"$search": "y"}}]}).code,
            2
        );
        // Unbound (no text index): matches nothing, and says why when checked.
        let t = m(doc! {"$text": {"$search": "x"}, "a": 1});
        assert!(t.text().is_some());
        assert_eq!(t.matches_checked(&doc! {"a": 1}).unwrap_err().code, 27);
        assert_eq!(err(doc! {"a": {"$near": "x"}}).code, 2);
        assert_eq!(err(doc! {"a": {"$geoWithin": {}}}).code, 2);
        assert_eq!(err(doc! {"a": {"$maxDistance": 1}}).code, 2);
        assert_eq!(
            err(doc! {"$or": [{"a": {"$near": [0, 0]}}, {"b": 1}]}).message,
            "geoNear must be top-level expr"
        );
        assert_eq!(
            err(doc! {"a": {"$near": [0, 0]}, "b": {"$nearSphere": [0, 0]}}).message,
            "Too many geoNear expressions"
        );
        // geo predicates in a filter
        let g = m(doc! {"loc": {"$geoWithin": {"$box": [[0, 0], [2, 2]]}}, "n": 1});
        assert!(g.matches(&doc! {"loc": [1, 1], "n": 1}));
        assert!(!g.matches(&doc! {"loc": [3, 1], "n": 1}));
        let near = m(doc! {"a.loc": {"$near": [0, 0], "$maxDistance": 2}});
        assert!(near.matches(&doc! {"a": [{"loc": [5, 5]}, {"loc": [1, 1]}]}));
        let (d, _) = near
            .geo_near_distance(&doc! {"a": [{"loc": [5, 5]}, {"loc": [1, 1]}]})
            .unwrap();
        assert!((d - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(
            err(doc! {"$and": [{"a": {"$bad": 1}}]}).message,
            "unknown operator: $bad"
        );
    }

    #[test]
    fn index_predicates_and_id_equality() {
        let mm = m(
            doc! {"a": 1, "b": {"$gt": 2, "$lte": 9}, "c": {"$in": [1, 2]}, "$or": [{"d": 1}, {"e": 2}]},
        );
        let preds = mm.index_predicates();
        assert_eq!(preds.len(), 3);
        assert_eq!(preds[0].0, "a");
        assert_eq!(preds[0].1.eq, Some(Bson::Int32(1)));
        assert_eq!(preds[1].1.gt, Some(Bson::Int32(2)));
        assert_eq!(preds[1].1.lte, Some(Bson::Int32(9)));
        assert_eq!(
            preds[2].1.in_values,
            Some(vec![Bson::Int32(1), Bson::Int32(2)])
        );
        let re = Bson::RegularExpression(bson::Regex {
            pattern: "a".into(),
            options: "".into(),
        });
        assert!(m(doc! {"a": {"$in": [1, re.clone()]}})
            .index_predicates()
            .is_empty());
        assert_eq!(
            m(doc! {"$and": [{"x": {"$eq": 3}}]}).index_predicates()[0]
                .1
                .eq,
            Some(Bson::Int32(3))
        );
        assert_eq!(m(doc! {"_id": 5}).id_equality(), Some(Bson::Int32(5)));
        assert_eq!(
            m(doc! {"_id": {"$eq": "k"}, "x": 1}).id_equality(),
            Some(bson!("k"))
        );
        assert_eq!(
            m(doc! {"_id": {"a": 1}}).id_equality(),
            Some(bson!({"a": 1}))
        );
        assert_eq!(m(doc! {"_id": re}).id_equality(), None);
        assert_eq!(m(doc! {"_id": {"$gt": 5}}).id_equality(), None);
        assert_eq!(m(doc! {"$or": [{"_id": 5}]}).id_equality(), None);
        assert_eq!(m(doc! {"a": 1}).filter(), &doc! {"a": 1});
    }

    #[test]
    fn matcher_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Matcher>();
    }

    #[test]
    fn expr_evaluates_aggregation_expressions() {
        let f = doc! {"$expr": {"$gt": ["$a", "$b"]}};
        yes(f.clone(), doc! {"a": 5, "b": 2});
        no(f, doc! {"a": 1, "b": 2});
        yes(doc! {"$expr": "$a"}, doc! {"a": 1});
        no(doc! {"$expr": "$a"}, doc! {"a": 0});
        no(doc! {"$expr": "$a"}, doc! {});
    }
}

#[cfg(test)]
mod pcre_tests {
    use super::*;
    use bson::doc;

    #[test]
    fn regexes_support_lookaround_as_pcre_does() {
        let m = Matcher::new(&doc! {"name": {"$regex": "^(?!system\\.)"}}).unwrap();
        assert!(m.matches(&doc! {"name": "users"}));
        assert!(!m.matches(&doc! {"name": "system.views"}));
        let back = Matcher::new(&doc! {"s": {"$regex": "^(a+)b\\1$"}}).unwrap();
        assert!(back.matches(&doc! {"s": "aabaa"}));
        assert!(!back.matches(&doc! {"s": "aaba"}));
    }

    /// A stand-in script engine: `$where` sources are "true", "false" or "fail".
    struct FakeEngine;
    struct FakeScope(Vec<String>);
    impl crate::script::ScriptEngine for FakeEngine {
        fn new_scope(&self) -> Result<Box<dyn crate::script::ScriptScope>> {
            Ok(Box::new(FakeScope(Vec::new())))
        }
    }
    impl crate::script::ScriptScope for FakeScope {
        fn compile(
            &mut self,
            source: &str,
            _op: &Arc<crate::script::Operation>,
        ) -> Result<crate::script::FunctionId> {
            if !matches!(source, "true" | "false" | "fail") {
                return Err(Error::new(139, "SyntaxError: unexpected token"));
            }
            self.0.push(source.to_string());
            Ok(crate::script::FunctionId(self.0.len() - 1))
        }
        fn call(
            &mut self,
            _f: crate::script::FunctionId,
            _this: Option<&Document>,
            _args: &[Bson],
            _op: &Arc<crate::script::Operation>,
        ) -> Result<Bson> {
            Ok(Bson::Null)
        }
        fn fold(
            &mut self,
            _f: crate::script::FunctionId,
            state: Bson,
            _calls: &[Bson],
            _op: &Arc<crate::script::Operation>,
        ) -> Result<Bson> {
            Ok(state)
        }
        fn call_predicate(
            &mut self,
            f: crate::script::FunctionId,
            _this: &Document,
            _op: &Arc<crate::script::Operation>,
        ) -> Result<bool> {
            match self.0[f.0].as_str() {
                "fail" => Err(Error::new(139, "Error: boom")),
                s => Ok(s == "true"),
            }
        }
    }

    #[test]
    fn where_parsing_and_evaluation() {
        crate::script::install(Box::new(FakeEngine));
        let q = |f: Document| Matcher::for_query(&f);
        let qerr = |f: Document| q(f).err().expect("should fail");
        assert!(q(doc! {"$where": "true"}).unwrap().uses_script());
        assert!(q(doc! {"$where": "true"}).unwrap().matches(&doc! {}));
        assert!(!q(doc! {"$where": "false"}).unwrap().matches(&doc! {}));
        assert!(q(doc! {"$or": [{"a": 1}, {"$where": "true"}]})
            .unwrap()
            .matches(&doc! {"a": 2}));
        assert_eq!(
            qerr(doc! {"a": {"$elemMatch": {"$where": "true"}}}).message,
            "$where can only be applied to the top-level document"
        );
        assert_eq!(qerr(doc! {"$where": 5}).message, "$where got bad type");
        assert_eq!(
            qerr(doc! {"$where": ""}).message,
            "code for $where cannot be empty"
        );
        assert_eq!(
            qerr(
                doc! {"$where": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                    code: "true".into(),
                    scope: doc! {},
                })}
            )
            .code,
            4649201
        );
        assert_eq!(qerr(doc! {"$where": "nonsense("}).code, 139);
        // A script failure fails a scan; other evaluation errors count as no match.
        let failing = q(doc! {"$where": "fail"}).unwrap();
        assert!(!failing.matches(&doc! {}));
        assert_eq!(failing.matches_or_fail(&doc! {}).unwrap_err().code, 139);
        let bad_expr = q(doc! {"$expr": {"$divide": [1, 0]}}).unwrap();
        assert!(!bad_expr.uses_script());
        assert!(!bad_expr.matches_or_fail(&doc! {}).unwrap());
        // An expired operation stops matching with MaxTimeMSExpired.
        let op = crate::script::Operation::new(Some(std::time::Instant::now()));
        let _g = op.enter();
        assert_eq!(
            q(doc! {"$where": "true"})
                .unwrap()
                .matches_or_fail(&doc! {})
                .unwrap_err()
                .code,
            50
        );
    }
}

//! Query filters (`find`, `$match`, update/delete selectors) with MongoDB 7.0
//! semantics: implicit equality, comparison operators with type bracketing,
//! logical operators, element/array/evaluation operators and dotted paths with
//! array expansion. The filter is parsed once into a tree of nodes and predicates
//! (`parse`), then evaluated per document (`eval`); `$regex` and `$type` have files
//! of their own.

mod eval;
mod json_schema;
mod parse;
mod regex;
#[cfg(test)]
mod tests;
mod type_op;

use crate::collation::Collator;
use crate::compare::{as_f64, is_number};
use crate::error::{Error, Result};
use bson::{Bson, Document};
use regex::RegexPred;
use std::sync::Arc;

pub use json_schema::JsonSchema;

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
    /// `$jsonSchema`.
    JsonSchema(Arc<JsonSchema>),
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
        let root = parse::parse_doc(filter, ctx)?;
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
    /// The filter is empty: every document matches.
    pub fn matches_everything(&self) -> bool {
        self.filter.is_empty()
    }

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
        eval::eval_node(&self.root, doc, self.collator.as_ref())
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
        for v in eval::leaves(doc, &parts).into_iter().flatten() {
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
        Node::Const(_) | Node::Text(_) | Node::JsonSchema(_) => false,
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
                    Pred::Eq(v)
                        if !matches!(v, Bson::Array(_) | Bson::RegularExpression(_))
                            && b.eq.is_none() =>
                    {
                        b.eq = Some(v.clone());
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

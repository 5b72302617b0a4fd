//! Evaluating the matcher's tree against one document: the values a dotted path
//! reaches (arrays expanded), then each predicate over them.

use super::regex::regex_single;
use super::type_op::type_single;
use super::{truthy, CmpOp, Coll, InItem, Node, Pred};
use crate::compare::{as_f64, bson_eq_with, canonical_type, cmp_bson_with, is_number};
use crate::error::Result;
use crate::path::parse_index;
use bson::{Bson, Document};
use std::cmp::Ordering;

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

pub(super) fn leaves<'a>(doc: &'a Document, parts: &[String]) -> Vec<Option<&'a Bson>> {
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
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
                return false;
            }
            t as i64
        }
        _ => return false,
    };
    n.wrapping_rem(d) == r
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

pub(super) fn eval_node(node: &Node, doc: &Document, coll: Coll) -> Result<bool> {
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
        Node::JsonSchema(s) => s.matches(doc),
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

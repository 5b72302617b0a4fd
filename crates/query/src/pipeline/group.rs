//! `$group` accumulators and group keys.

use crate::collation::Collator;
use crate::compare::{as_f64, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use crate::expr::num::Summer;
use crate::expr::{util, Expr, Variables};
use bson::{Bson, Document};
use std::cmp::Ordering;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccOp {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    Count,
}

#[derive(Debug, Clone)]
pub struct AccSpec {
    pub name: String,
    pub op: AccOp,
    pub arg: Expr,
}

impl AccSpec {
    /// Parses `field: {$op: <expr>}` of a `$group` (or `$bucket.output`).
    pub fn parse(field: &str, v: &Bson) -> Result<AccSpec> {
        if field.contains('.') {
            return Err(Error::location(
                40235,
                format!("The field name '{field}' cannot contain '.'"),
            ));
        }
        if field.starts_with('$') {
            return Err(Error::location(
                40236,
                format!("The field name '{field}' cannot be an operator name"),
            ));
        }
        let Bson::Document(d) = v else {
            return Err(Error::location(
                40234,
                format!("The field '{field}' must be an accumulator object"),
            ));
        };
        if d.len() != 1 {
            return Err(Error::location(
                40238,
                format!("The field '{field}' must specify one accumulator"),
            ));
        }
        let (op_name, arg) = d.iter().next().unwrap();
        let op = match op_name.as_str() {
            "$sum" => AccOp::Sum,
            "$avg" => AccOp::Avg,
            "$min" => AccOp::Min,
            "$max" => AccOp::Max,
            "$first" => AccOp::First,
            "$last" => AccOp::Last,
            "$push" => AccOp::Push,
            "$addToSet" => AccOp::AddToSet,
            "$mergeObjects" => AccOp::MergeObjects,
            "$stdDevPop" => AccOp::StdDevPop,
            "$stdDevSamp" => AccOp::StdDevSamp,
            "$count" => AccOp::Count,
            other => {
                return Err(Error::location(
                    15952,
                    format!("unknown group operator '{other}'"),
                ))
            }
        };
        if op == AccOp::Count {
            if !matches!(arg, Bson::Document(a) if a.is_empty()) {
                return Err(Error::location(
                    40160,
                    "$count takes no arguments, i.e. $count:{}",
                ));
            }
            return Ok(AccSpec {
                name: field.to_string(),
                op,
                arg: Expr::Const(Bson::Int32(1)),
            });
        }
        if matches!(arg, Bson::Array(_)) {
            return Err(Error::location(
                40237,
                format!("The {op_name} accumulator is a unary operator"),
            ));
        }
        Ok(AccSpec {
            name: field.to_string(),
            op,
            arg: Expr::parse(arg)?,
        })
    }
}

#[derive(Debug, Clone)]
pub enum AccState {
    Sum(Summer),
    Avg(Summer),
    MinMax(Option<Bson>),
    First(Option<Bson>, bool),
    Last(Option<Bson>),
    Push(Vec<Bson>),
    AddToSet(Vec<Bson>, HashMap<String, ()>),
    Merge(Document),
    StdDev(Vec<f64>),
}

impl AccState {
    pub fn new(op: AccOp) -> AccState {
        match op {
            AccOp::Sum | AccOp::Count => AccState::Sum(Summer::default()),
            AccOp::Avg => AccState::Avg(Summer::default()),
            AccOp::Min | AccOp::Max => AccState::MinMax(None),
            AccOp::First => AccState::First(None, false),
            AccOp::Last => AccState::Last(None),
            AccOp::Push => AccState::Push(Vec::new()),
            AccOp::AddToSet => AccState::AddToSet(Vec::new(), HashMap::new()),
            AccOp::MergeObjects => AccState::Merge(Document::new()),
            AccOp::StdDevPop | AccOp::StdDevSamp => AccState::StdDev(Vec::new()),
        }
    }

    /// Folds in one value; `coll` is the collation `$min`/`$max`/`$addToSet` compare
    /// strings under.
    pub fn add(&mut self, op: AccOp, v: Option<Bson>, coll: Option<&Collator>) -> Result<()> {
        match self {
            AccState::Sum(s) | AccState::Avg(s) => {
                if let Some(v) = &v {
                    s.add(v);
                }
            }
            AccState::MinMax(best) => {
                if let Some(v) = v {
                    if matches!(v, Bson::Null | Bson::Undefined) {
                        return Ok(());
                    }
                    let replace = match best {
                        None => true,
                        Some(b) => {
                            let o = cmp_bson_with(&v, b, coll);
                            (op == AccOp::Min && o == Ordering::Less)
                                || (op == AccOp::Max && o == Ordering::Greater)
                        }
                    };
                    if replace {
                        *best = Some(v);
                    }
                }
            }
            AccState::First(f, seen) => {
                if !*seen {
                    *f = v;
                    *seen = true;
                }
            }
            AccState::Last(l) => *l = v,
            AccState::Push(list) => {
                if let Some(v) = v {
                    list.push(v);
                }
            }
            AccState::AddToSet(list, seen) => {
                if let Some(v) = v {
                    let k = group_key(&v, coll);
                    if seen.insert(k, ()).is_none() {
                        list.push(v);
                    }
                }
            }
            AccState::Merge(d) => match v {
                None | Some(Bson::Null) | Some(Bson::Undefined) => {}
                Some(Bson::Document(x)) => {
                    for (k, val) in x {
                        d.insert(k, val);
                    }
                }
                Some(other) => {
                    return Err(Error::location(
                        40400,
                        format!(
                            "$mergeObjects requires object inputs, but input {} is of type {}",
                            util::show(&other),
                            util::type_name(&other)
                        ),
                    ))
                }
            },
            AccState::StdDev(xs) => {
                if let Some(v) = &v {
                    if is_number(v) {
                        xs.push(as_f64(v).unwrap());
                    }
                }
            }
        }
        Ok(())
    }

    pub fn result(self, op: AccOp) -> Bson {
        match self {
            AccState::Sum(s) => s.result(),
            AccState::Avg(s) => s.average(),
            AccState::MinMax(b) => b.unwrap_or(Bson::Null),
            AccState::First(f, _) => f.unwrap_or(Bson::Null),
            AccState::Last(l) => l.unwrap_or(Bson::Null),
            AccState::Push(l) => Bson::Array(l),
            AccState::AddToSet(l, _) => Bson::Array(l),
            AccState::Merge(d) => Bson::Document(d),
            AccState::StdDev(xs) => crate::expr::arith_std_dev(&xs, op == AccOp::StdDevSamp),
        }
    }
}

/// A string key such that two values get the same key iff they are BSON-equal
/// (numbers by value across widths; documents field-order sensitive), strings being
/// equal under `coll` when there is a collation.
pub fn group_key(v: &Bson, coll: Option<&Collator>) -> String {
    let mut s = String::new();
    write_key(v, &mut s, coll);
    s
}

fn write_key(v: &Bson, out: &mut String, coll: Option<&Collator>) {
    use std::fmt::Write;
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            if let Some(i) =
                crate::expr::num::as_exact_i64(v).filter(|_| !matches!(v, Bson::Decimal128(_)))
            {
                let _ = write!(out, "n{i};");
            } else {
                let f = as_f64(v).unwrap_or(f64::NAN);
                if f.is_nan() {
                    out.push_str("nNaN;");
                } else if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    let _ = write!(out, "n{};", f as i64);
                } else if let Bson::Decimal128(d) = v {
                    // Exact decimals that are not doubles keep their text.
                    let _ = write!(out, "n{:e}|{};", f, d);
                } else {
                    let _ = write!(out, "n{f:e};");
                }
            }
        }
        Bson::String(s) | Bson::Symbol(s) => match coll {
            None => {
                let _ = write!(out, "s{}:{s};", s.len());
            }
            Some(c) => {
                // Strings equal under the collation share their comparison key.
                out.push('c');
                for b in c.sort_key(s) {
                    let _ = write!(out, "{b:02x}");
                }
                out.push(';');
            }
        },
        Bson::Document(d) => {
            out.push('{');
            for (k, x) in d {
                let _ = write!(out, "{}:{k}=", k.len());
                write_key(x, out, coll);
            }
            out.push('}');
        }
        Bson::Array(a) => {
            out.push('[');
            for x in a {
                write_key(x, out, coll);
            }
            out.push(']');
        }
        Bson::Null => out.push_str("z;"),
        Bson::Undefined => out.push_str("u;"),
        other => {
            let _ = write!(
                out,
                "t{}:{:?};",
                crate::compare::canonical_type(other),
                other
            );
        }
    }
}

/// Groups documents by `id` and folds the accumulators.
pub fn run_group(
    id: &Expr,
    accs: &[AccSpec],
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let coll = vars.collator.as_deref();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut groups: Vec<(Bson, Vec<AccState>)> = Vec::new();
    for doc in &docs {
        let key = id.evaluate(doc, vars)?.unwrap_or(Bson::Null);
        let k = group_key(&key, coll);
        let gi = match index.get(&k) {
            Some(i) => *i,
            None => {
                groups.push((key, accs.iter().map(|a| AccState::new(a.op)).collect()));
                index.insert(k, groups.len() - 1);
                groups.len() - 1
            }
        };
        let states = &mut groups[gi].1;
        for (a, st) in accs.iter().zip(states.iter_mut()) {
            let v = a.arg.evaluate(doc, vars)?;
            st.add(a.op, v, coll)?;
        }
    }
    Ok(groups
        .into_iter()
        .map(|(key, states)| {
            let mut d = Document::new();
            d.insert("_id", key);
            for (a, st) in accs.iter().zip(states) {
                d.insert(a.name.clone(), st.result(a.op));
            }
            d
        })
        .collect())
}

//! Helpers: the `_id` and field rendering of update errors, exact ("binary") value
//! identity, and SafeNum-like arithmetic with mongod's overflow rules.

use bson::{Bson, Document};

use crate::error::{codes, Error};
use crate::Result;

pub use crate::compare::type_name;
pub use crate::render::{bson_to_string, doc_to_string, elem_to_string};

/// `_id: <value>` of a document, or `no id`.
pub(crate) fn id_string(doc: &Document) -> String {
    match doc.get("_id") {
        Some(v) => elem_to_string("_id", v),
        None => "no id".into(),
    }
}

pub(crate) fn dollar_prefixed_error(field: &str, full: &str) -> Error {
    Error::new(
        codes::DOLLAR_PREFIXED_FIELD_NAME,
        format!(
            "The dollar ($) prefixed field '{field}' in '{full}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
        ),
    )
}

pub(crate) fn check_id_value(v: &Bson) -> Result<()> {
    match v {
        Bson::RegularExpression(_) | Bson::Array(_) | Bson::Undefined => Err(Error::new(
            codes::INVALID_ID_FIELD,
            format!("The '_id' value cannot be of type {}", type_name(v)),
        )),
        _ => Ok(()),
    }
}

/// Exact identity: same types, same values, same field order (what a byte comparison of
/// the serialized values would say).
pub(crate) fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (Bson::Document(x), Bson::Document(y)) => identical_doc(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        (Bson::Decimal128(x), Bson::Decimal128(y)) => x.bytes() == y.bytes(),
        _ => std::mem::discriminant(a) == std::mem::discriminant(b) && a == b,
    }
}

pub(crate) fn identical_doc(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
}

// ---------------------------------------------------------------------------
// Arithmetic (mongod's SafeNum)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Mul,
}

fn to_decimal(f: f64) -> Bson {
    let s = if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{f:e}")
    };
    match s.parse::<bson::Decimal128>() {
        Ok(d) => Bson::Decimal128(d),
        Err(_) => Bson::Double(f),
    }
}

/// `a <op> b` with mongod's type promotion: int32 results that overflow widen to int64;
/// int64 overflow is an error (None); doubles stay doubles; any decimal makes a decimal
/// (computed through f64 here).
pub(crate) fn arith(a: &Bson, b: &Bson, op: Arith) -> Option<Bson> {
    use Bson::*;
    let f = |x: f64, y: f64| if op == Arith::Add { x + y } else { x * y };
    match (a, b) {
        (Decimal128(_), _) | (_, Decimal128(_)) => {
            let x = crate::compare::as_f64(a)?;
            let y = crate::compare::as_f64(b)?;
            Some(to_decimal(f(x, y)))
        }
        (Double(_), _) | (_, Double(_)) => Some(Double(f(
            crate::compare::as_f64(a)?,
            crate::compare::as_f64(b)?,
        ))),
        (Int32(x), Int32(y)) => {
            let r = if op == Arith::Add {
                *x as i64 + *y as i64
            } else {
                *x as i64 * *y as i64
            };
            Some(if let Ok(small) = i32::try_from(r) {
                Int32(small)
            } else {
                Int64(r)
            })
        }
        _ => {
            let x = as_i64(a)?;
            let y = as_i64(b)?;
            let r = if op == Arith::Add {
                x.checked_add(y)
            } else {
                x.checked_mul(y)
            };
            r.map(Int64)
        }
    }
}

fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

/// SafeNum::debugString: `(NumberInt)42`.
pub(crate) fn safe_num_debug(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => format!("(NumberInt){i}"),
        Bson::Int64(i) => format!("(NumberLong){i}"),
        Bson::Double(d) => format!("(NumberDouble){d}"),
        Bson::Decimal128(d) => format!("(NumberDecimal){d}"),
        other => format!("(EOO){}", bson_to_string(other)),
    }
}

/// Zero of the same numeric type (the value `$mul` creates for a missing field).
pub(crate) fn zero_like(v: &Bson) -> Bson {
    match v {
        Bson::Int64(_) => Bson::Int64(0),
        Bson::Double(_) => Bson::Double(0.0),
        Bson::Decimal128(_) => to_decimal(0.0),
        _ => Bson::Int32(0),
    }
}

pub(crate) fn bit_apply(cur: &Bson, ops: &[(super::BitOp, Bson)]) -> Bson {
    use super::BitOp;
    let mut acc = cur.clone();
    for (op, v) in ops {
        acc = match (&acc, v) {
            (Bson::Int32(x), Bson::Int32(y)) => Bson::Int32(match op {
                BitOp::And => x & y,
                BitOp::Or => x | y,
                BitOp::Xor => x ^ y,
            }),
            _ => {
                let x = as_i64(&acc).unwrap_or(0);
                let y = as_i64(v).unwrap_or(0);
                Bson::Int64(match op {
                    BitOp::And => x & y,
                    BitOp::Or => x | y,
                    BitOp::Xor => x ^ y,
                })
            }
        };
    }
    acc
}

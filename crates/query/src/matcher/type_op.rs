//! `$type`: mongod's type aliases and numeric codes, and the pseudo-type "number".

use super::bad;
use crate::compare::{as_f64, is_number};
use crate::error::Result;
use bson::Bson;

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

pub(super) fn parse_type_one(v: &Bson) -> Result<i32> {
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

pub(super) fn type_single(x: &Bson, codes: &[i32]) -> bool {
    let c = type_code(x);
    codes
        .iter()
        .any(|&t| t == c || (t == TYPE_NUMBER && is_number(x)))
}

//! Type inspection and `$convert` / `$toX` conversions.

use super::num;
use super::util::{coerce_to_string, format_date_iso, format_double, nullish, show, type_name};
use crate::compare::{as_f64, is_number};
use crate::error::{Error, Result};
use bson::{oid::ObjectId, Bson};

use super::util::R;

const CONVERSION_FAILURE: i32 = 241;

pub fn apply(name: &str, vals: &[Option<Bson>]) -> R {
    let to = match name {
        "$type" => {
            return Ok(Some(Some(Bson::String(match &vals[0] {
                Some(v) => type_name(v).to_string(),
                None => "missing".into(),
            }))))
        }
        "$isNumber" => {
            return Ok(Some(Some(Bson::Boolean(
                matches!(&vals[0], Some(v) if is_number(v)),
            ))))
        }
        "$binarySize" => {
            return match &vals[0] {
                v if nullish(v) => Ok(Some(Some(Bson::Null))),
                Some(Bson::String(s)) => Ok(Some(Some(Bson::Int32(s.len() as i32)))),
                Some(Bson::Binary(b)) => Ok(Some(Some(Bson::Int32(b.bytes.len() as i32)))),
                Some(other) => Err(Error::location(
                    51276,
                    format!(
                        "$binarySize requires a string or BinData argument, found: {}",
                        type_name(other)
                    ),
                )),
                None => unreachable!(),
            }
        }
        "$bsonSize" => {
            return match &vals[0] {
                v if nullish(v) => Ok(Some(Some(Bson::Null))),
                Some(Bson::Document(d)) => {
                    let mut buf = Vec::new();
                    d.to_writer(&mut buf)
                        .map_err(|e| Error::internal(e.to_string()))?;
                    Ok(Some(Some(Bson::Int32(buf.len() as i32))))
                }
                Some(other) => Err(Error::location(
                    31393,
                    format!(
                        "$bsonSize requires a document input, found: {}",
                        type_name(other)
                    ),
                )),
                None => unreachable!(),
            }
        }
        "$toString" => "string",
        "$toInt" => "int",
        "$toLong" => "long",
        "$toDouble" => "double",
        "$toDecimal" => "decimal",
        "$toBool" => "bool",
        "$toDate" => "date",
        "$toObjectId" => "objectId",
        _ => return Ok(None),
    };
    Ok(Some(convert(
        vals[0].clone(),
        Some(Bson::String(to.into())),
        None,
        None,
    )?))
}

fn target_name(to: &Bson) -> Result<&'static str> {
    const NAMES: &[(&str, i32)] = &[
        ("double", 1),
        ("string", 2),
        ("objectId", 7),
        ("bool", 8),
        ("date", 9),
        ("int", 16),
        ("long", 18),
        ("decimal", 19),
    ];
    match to {
        Bson::String(s) => NAMES
            .iter()
            .find(|(n, _)| n == s)
            .map(|(n, _)| *n)
            .ok_or_else(|| Error::bad_value(format!("Unknown type name: {s}"))),
        v if is_number(v) => {
            let code = num::as_exact_i64(v).unwrap_or(-1);
            NAMES
                .iter()
                .find(|(_, c)| *c as i64 == code)
                .map(|(n, _)| *n)
                .ok_or_else(|| {
                    Error::failed_to_parse(format!(
                    "In $convert, numeric value for 'to' does not correspond to a BSON type: {}",
                    show(v)
                ))
                })
        }
        other => Err(Error::failed_to_parse(format!(
            "$convert's 'to' argument must be a string or number, but is {}",
            type_name(other)
        ))),
    }
}

/// `$convert` with optional `onError` / `onNull` (outer `Some` = the argument was given).
pub fn convert(
    input: Option<Bson>,
    to: Option<Bson>,
    on_error: Option<Option<Bson>>,
    on_null: Option<Option<Bson>>,
) -> Result<Option<Bson>> {
    let to = match to {
        None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(t) => target_name(&t)?,
    };
    let input = match input {
        None | Some(Bson::Null) | Some(Bson::Undefined) => {
            return Ok(match on_null {
                Some(v) => v,
                None => Some(Bson::Null),
            })
        }
        Some(v) => v,
    };
    match convert_value(&input, to) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == CONVERSION_FAILURE => match on_error {
            Some(v) => Ok(v),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

fn fail(msg: String) -> Error {
    Error::new(
        CONVERSION_FAILURE,
        format!("{msg} in $convert with no onError value"),
    )
}

fn unsupported(v: &Bson, to: &str) -> Error {
    fail(format!(
        "Unsupported conversion from {} to {}",
        type_name(v),
        to
    ))
}

fn f64_to_int(f: f64, lo: f64, hi: f64) -> Result<i64> {
    if f.is_nan() {
        return Err(fail("Attempt to convert NaN value to integer type".into()));
    }
    if f.is_infinite() {
        return Err(fail(
            "Attempt to convert infinity value to integer type".into(),
        ));
    }
    let t = f.trunc();
    if t < lo || t > hi {
        return Err(fail(format!(
            "Conversion would overflow target type: {}",
            format_double(f)
        )));
    }
    Ok(t as i64)
}

fn parse_int_str(s: &str, to: &str) -> Result<i64> {
    let ok = !s.is_empty()
        && s.strip_prefix('-')
            .unwrap_or(s)
            .bytes()
            .all(|c| c.is_ascii_digit())
        && s != "-";
    if !ok {
        return Err(fail(format!("Failed to parse number '{s}'")));
    }
    s.parse::<i64>()
        .map_err(|_| fail(format!("Failed to parse number '{s}': Overflow")))
        .and_then(|v| {
            if to == "int" && i32::try_from(v).is_err() {
                Err(fail(format!("Failed to parse number '{s}': Overflow")))
            } else {
                Ok(v)
            }
        })
}

fn parse_f64_str(s: &str) -> Result<f64> {
    let l = s.to_ascii_lowercase();
    let t = l
        .strip_prefix('-')
        .or_else(|| l.strip_prefix('+'))
        .unwrap_or(&l);
    let neg = l.starts_with('-');
    match t {
        "inf" | "infinity" => {
            return Ok(if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            })
        }
        "nan" => return Ok(f64::NAN),
        _ => {}
    }
    if s.trim() != s || s.is_empty() {
        return Err(fail(format!("Failed to parse number '{s}'")));
    }
    s.parse::<f64>()
        .map_err(|_| fail(format!("Failed to parse number '{s}'")))
}

pub fn convert_value(v: &Bson, to: &str) -> Result<Bson> {
    Ok(match to {
        "double" => Bson::Double(match v {
            Bson::Double(d) => *d,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => as_f64(v).unwrap(),
            Bson::Boolean(b) => *b as i32 as f64,
            Bson::String(s) => parse_f64_str(s)?,
            Bson::DateTime(d) => d.timestamp_millis() as f64,
            _ => return Err(unsupported(v, to)),
        }),
        "int" => Bson::Int32(match v {
            Bson::Int32(i) => *i,
            Bson::Int64(l) => i32::try_from(*l)
                .map_err(|_| fail(format!("Conversion would overflow target type: {l}")))?,
            Bson::Double(_) | Bson::Decimal128(_) => {
                f64_to_int(as_f64(v).unwrap(), i32::MIN as f64, i32::MAX as f64)? as i32
            }
            Bson::Boolean(b) => *b as i32,
            Bson::String(s) => parse_int_str(s, "int")? as i32,
            _ => return Err(unsupported(v, to)),
        }),
        "long" => Bson::Int64(match v {
            Bson::Int32(i) => *i as i64,
            Bson::Int64(l) => *l,
            Bson::Double(_) | Bson::Decimal128(_) => f64_to_int(
                as_f64(v).unwrap(),
                -9.223_372_036_854_776e18,
                9.223_372_036_854_776e18,
            )?,
            Bson::Boolean(b) => *b as i64,
            Bson::String(s) => parse_int_str(s, "long")?,
            Bson::DateTime(d) => d.timestamp_millis(),
            _ => return Err(unsupported(v, to)),
        }),
        "decimal" => Bson::Decimal128(match v {
            Bson::Decimal128(d) => *d,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => num::to_decimal(v).unwrap(),
            Bson::Boolean(b) => (if *b { "1" } else { "0" }).parse().unwrap(),
            Bson::String(s) => {
                let ok = num::Dec::parse(s).is_some()
                    || matches!(
                        s.to_ascii_lowercase().trim_start_matches(['-', '+']),
                        "nan" | "inf" | "infinity"
                    );
                if !ok {
                    return Err(fail(format!("Failed to parse number '{s}'")));
                }
                s.parse()
                    .map_err(|_| fail(format!("Failed to parse number '{s}'")))?
            }
            Bson::DateTime(d) => num::to_decimal(&Bson::Int64(d.timestamp_millis())).unwrap(),
            _ => return Err(unsupported(v, to)),
        }),
        "bool" => Bson::Boolean(match v {
            Bson::Boolean(b) => *b,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                let f = as_f64(v).unwrap();
                f != 0.0
            }
            Bson::MinKey | Bson::MaxKey => return Err(unsupported(v, to)),
            _ => true,
        }),
        "string" => Bson::String(match v {
            Bson::Boolean(b) => b.to_string(),
            Bson::ObjectId(o) => o.to_hex(),
            Bson::DateTime(d) => format_date_iso(d.timestamp_millis()),
            Bson::String(_)
            | Bson::Int32(_)
            | Bson::Int64(_)
            | Bson::Double(_)
            | Bson::Decimal128(_) => coerce_to_string(&Some(v.clone()))?,
            _ => return Err(unsupported(v, to)),
        }),
        "objectId" => match v {
            Bson::ObjectId(o) => Bson::ObjectId(*o),
            Bson::String(s) => {
                if s.len() != 24 {
                    return Err(fail(format!(
                        "Failed to parse objectId '{s}': Invalid string length for parsing to OID, expected 24 but found {}",
                        s.len()
                    )));
                }
                Bson::ObjectId(ObjectId::parse_str(s).map_err(|_| {
                    fail(format!(
                        "Failed to parse objectId '{s}': Invalid character found in hex string"
                    ))
                })?)
            }
            _ => return Err(unsupported(v, to)),
        },
        "date" => Bson::DateTime(match v {
            Bson::DateTime(d) => *d,
            Bson::Int64(l) => bson::DateTime::from_millis(*l),
            Bson::Double(_) | Bson::Decimal128(_) => {
                let f = as_f64(v).unwrap();
                bson::DateTime::from_millis(f64_to_int(f, -9.2e18, 9.2e18)?)
            }
            Bson::ObjectId(o) => bson::DateTime::from_millis(o.timestamp().timestamp_millis()),
            Bson::Timestamp(t) => bson::DateTime::from_millis(t.time as i64 * 1000),
            Bson::String(s) => match super::date::parse_date_string(s, None) {
                Some(ms) => bson::DateTime::from_millis(ms),
                None => {
                    return Err(Error::new(
                        CONVERSION_FAILURE,
                        format!(
                            "Error parsing date string '{s}'; in $convert with no onError value"
                        ),
                    ))
                }
            },
            _ => return Err(unsupported(v, to)),
        }),
        _ => return Err(unsupported(v, to)),
    })
}

//! Value helpers shared by the expression operators.

use crate::error::{Error, Result};
use bson::Bson;

pub use crate::compare::type_name;

/// An operator's result: None when the operator is not one of the module's,
/// Some(None) for a missing value, Some(Some(v)) for a value.
pub type R = Result<Option<Option<Bson>>>;

pub fn done(v: Bson) -> R {
    Ok(Some(Some(v)))
}

pub fn null() -> R {
    Ok(Some(Some(Bson::Null)))
}

/// Type name of a possibly missing value.
pub fn type_name_opt(v: &Option<Bson>) -> &'static str {
    match v {
        Some(v) => type_name(v),
        None => "missing",
    }
}

/// Null, undefined or missing.
pub fn nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// Aggregation truthiness: false, null, undefined, missing and numeric zero are false.
pub fn truthy(v: &Option<Bson>) -> bool {
    match v {
        None | Some(Bson::Null) | Some(Bson::Undefined) => false,
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::Int32(i)) => *i != 0,
        Some(Bson::Int64(i)) => *i != 0,
        Some(Bson::Double(d)) => *d != 0.0,
        Some(v @ Bson::Decimal128(_)) => {
            crate::compare::as_f64(v).map(|f| f != 0.0).unwrap_or(true)
        }
        Some(_) => true,
    }
}

/// A double printed the way mongod prints it in strings (`1`, `1.5`, `1e+20`).
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let abs = d.abs();
    if (1e-5..1e21).contains(&abs) {
        let s = format!("{d}");
        return s;
    }
    // Exponent form like "1e+21", "1.5e-07".
    let s = format!("{d:e}");
    let (m, e) = s.split_once('e').unwrap();
    let e: i32 = e.parse().unwrap();
    let sign = if e < 0 { '-' } else { '+' };
    let ea = e.abs();
    if ea < 10 {
        format!("{m}e{sign}0{ea}")
    } else {
        format!("{m}e{sign}{ea}")
    }
}

/// ISO-8601 rendering used by `$toString` and string coercion of dates.
pub fn format_date_iso(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(dt) => dt.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("{ms}"),
    }
}

/// `coerceToString`: numbers, strings, dates, timestamps; null/undefined/missing -> "".
pub fn coerce_to_string(v: &Option<Bson>) -> Result<String> {
    Ok(match v {
        None | Some(Bson::Null) | Some(Bson::Undefined) => String::new(),
        Some(Bson::String(s)) | Some(Bson::Symbol(s)) => s.clone(),
        Some(Bson::Int32(i)) => i.to_string(),
        Some(Bson::Int64(i)) => i.to_string(),
        Some(Bson::Double(d)) => format_double(*d),
        Some(Bson::Decimal128(d)) => d.to_string(),
        Some(Bson::DateTime(d)) => format_date_iso(d.timestamp_millis()),
        Some(Bson::Timestamp(t)) => format!("Timestamp({}, {})", t.time, t.increment),
        Some(Bson::JavaScriptCode(c)) => c.clone(),
        Some(other) => {
            return Err(Error::location(
                16007,
                format!(
                    "can't convert from BSON type {} to String",
                    type_name(other)
                ),
            ))
        }
    })
}

/// A value rendered for error messages (close to mongod's `Value::toString`).
pub fn show(v: &Bson) -> String {
    match v {
        Bson::String(s) => format!("\"{s}\""),
        Bson::Double(d) => format_double(*d),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::DateTime(d) => format_date_iso(d.timestamp_millis()),
        Bson::Document(d) => {
            let parts: Vec<String> = d.iter().map(|(k, v)| format!("{k}: {}", show(v))).collect();
            if parts.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", parts.join(", "))
            }
        }
        Bson::Array(a) => {
            let parts: Vec<String> = a.iter().map(show).collect();
            format!("[{}]", parts.join(", "))
        }
        Bson::Null => "null".into(),
        Bson::Boolean(b) => b.to_string(),
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        other => format!("{other}"),
    }
}

pub fn show_opt(v: &Option<Bson>) -> String {
    match v {
        Some(v) => show(v),
        None => "missing".into(),
    }
}

/// Missing compares like undefined in expression comparisons.
pub fn or_undefined(v: &Option<Bson>) -> &Bson {
    static UNDEF: Bson = Bson::Undefined;
    v.as_ref().unwrap_or(&UNDEF)
}

//! Value helpers shared by the expression operators.

use crate::error::{Error, Result};
use bson::Bson;

pub use crate::compare::type_name;
pub use crate::render::{format_date_iso, format_double, show, show_opt};

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

/// Missing compares like undefined in expression comparisons.
pub fn or_undefined(v: &Option<Bson>) -> &Bson {
    static UNDEF: Bson = Bson::Undefined;
    v.as_ref().unwrap_or(&UNDEF)
}

//! Typed reads of command and option fields with the errors of mongod's IDL parser:
//! one place writes "BSON field '<path>' is the wrong type '<actual>', expected type
//! '<expected>'" (TypeMismatch, 14), whichever crate reads the field.
//!
//! A field's path is how mongod names it: the command, then the field
//! (`find.filter`, `create.timeseries.granularity`, `collation.strength`).

use bson::{Bson, Document, Timestamp};

use crate::error::{Error, Result};
use crate::types::{as_f64, type_name};

/// The types mongod's IDL accepts for its whole-number types (`safeInt`, `safeInt64`),
/// in the order its messages list them.
pub const NUMBER_TYPES: &[&str] = &["long", "int", "decimal", "double"];

/// mongod's TypeMismatch for the field at `path` holding `v` where one type is expected.
pub fn wrong_type(path: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{path}' is the wrong type '{}', expected type '{expected}'",
        type_name(v)
    ))
}

/// mongod's TypeMismatch where any of several types is expected
/// ("expected types '[long, int, decimal, double]'").
pub fn wrong_types(path: &str, v: &Bson, expected: &[&str]) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{path}' is the wrong type '{}', expected types '[{}]'",
        type_name(v),
        expected.join(", ")
    ))
}

/// A field that must be a boolean (numbers refused, as the IDL's `bool`).
pub fn bool_value(path: &str, v: &Bson) -> Result<bool> {
    match v {
        Bson::Boolean(b) => Ok(*b),
        other => Err(wrong_type(path, other, "bool")),
    }
}

/// A field that must be a string.
pub fn str_value<'a>(path: &str, v: &'a Bson) -> Result<&'a str> {
    match v {
        Bson::String(s) => Ok(s),
        other => Err(wrong_type(path, other, "string")),
    }
}

/// A field that must be a document (an `object`).
pub fn doc_value<'a>(path: &str, v: &'a Bson) -> Result<&'a Document> {
    match v {
        Bson::Document(d) => Ok(d),
        other => Err(wrong_type(path, other, "object")),
    }
}

/// A field that must be an array.
pub fn array_value<'a>(path: &str, v: &'a Bson) -> Result<&'a [Bson]> {
    match v {
        Bson::Array(a) => Ok(a),
        other => Err(wrong_type(path, other, "array")),
    }
}

/// A field that must be a 64-bit integer (`long`: cursor ids).
pub fn long_value(path: &str, v: &Bson) -> Result<i64> {
    match v {
        Bson::Int64(n) => Ok(*n),
        other => Err(wrong_type(path, other, "long")),
    }
}

/// A field that must be a timestamp.
pub fn timestamp_value(path: &str, v: &Bson) -> Result<Timestamp> {
    match v {
        Bson::Timestamp(t) => Ok(*t),
        other => Err(wrong_type(path, other, "timestamp")),
    }
}

/// A whole number as the IDL's `safeInt64` reads it: any number, doubles and decimals
/// truncated toward zero and saturated (NaN is 0); anything else TypeMismatch.
pub fn safe_int64(path: &str, v: &Bson) -> Result<i64> {
    match v {
        Bson::Int32(n) => Ok(*n as i64),
        Bson::Int64(n) => Ok(*n),
        Bson::Double(_) | Bson::Decimal128(_) => Ok(as_f64(v).map(|d| d as i64).unwrap_or(0)),
        other => Err(wrong_types(path, other, NUMBER_TYPES)),
    }
}

/// The optional fields of one document (a command, or an option document inside one),
/// each named `<prefix>.<field>` in errors. A field that is absent or null is None.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    doc: &'a Document,
    prefix: &'a str,
}

impl<'a> Fields<'a> {
    /// The fields of `doc`, named `<prefix>.<field>`.
    pub fn new(prefix: &'a str, doc: &'a Document) -> Self {
        Fields { doc, prefix }
    }

    /// The fields of a command, named after it (its first field: `find.filter`).
    pub fn command(cmd: &'a Document) -> Self {
        let name = cmd.keys().next().map(String::as_str).unwrap_or("");
        Fields::new(name, cmd)
    }

    /// `<prefix>.<field>`.
    pub fn path(&self, field: &str) -> String {
        format!("{}.{field}", self.prefix)
    }

    fn get(&self, field: &str) -> Option<&'a Bson> {
        match self.doc.get(field) {
            None | Some(Bson::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// `check` of the value `v` of `field`, with the field's path (a `format!`) built
    /// only when the check fails, for its error.
    fn checked<T>(
        &self,
        field: &str,
        v: &'a Bson,
        check: impl Fn(&str, &'a Bson) -> Result<T>,
    ) -> Result<T> {
        check("", v).or_else(|_| check(&self.path(field), v))
    }

    /// An optional sub-document.
    pub fn opt_doc(&self, field: &str) -> Result<Option<&'a Document>> {
        self.get(field)
            .map(|v| self.checked(field, v, doc_value))
            .transpose()
    }

    /// An optional array of documents; a wrong element is named by its index
    /// (`insert.documents.3`).
    pub fn opt_doc_array(&self, field: &str) -> Result<Option<Vec<&'a Document>>> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        let path = self.path(field);
        array_value(&path, v)?
            .iter()
            .enumerate()
            .map(|(i, item)| doc_value(&format!("{path}.{i}"), item))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// An optional boolean; numbers count as booleans (non-zero is true), as mongod
    /// accepts them for command flags.
    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(Bson::Int32(i)) => Ok(Some(*i != 0)),
            Some(Bson::Int64(i)) => Ok(Some(*i != 0)),
            Some(Bson::Double(d)) => Ok(Some(*d != 0.0)),
            Some(v) => self.checked(field, v, bool_value).map(Some),
        }
    }

    /// An optional integer: int, long, or a whole double (a fraction is BadValue).
    pub fn opt_i64(&self, field: &str) -> Result<Option<i64>> {
        match self.get(field) {
            None => Ok(None),
            Some(Bson::Int32(i)) => Ok(Some(*i as i64)),
            Some(Bson::Double(d)) if d.fract() == 0.0 && d.is_finite() => Ok(Some(*d as i64)),
            Some(Bson::Double(d)) => Err(Error::bad_value(format!(
                "BSON field '{}' value must be an integer, got {d}",
                self.path(field)
            ))),
            Some(v) => self.checked(field, v, long_value).map(Some),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, field: &str) -> Result<Option<&'a str>> {
        self.get(field)
            .map(|v| self.checked(field, v, str_value))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::codes;
    use bson::doc;

    fn message(r: Result<impl std::fmt::Debug>) -> (i32, String) {
        let e = r.unwrap_err();
        (e.code, e.message)
    }

    #[test]
    fn one_message_for_every_wrong_type() {
        assert_eq!(
            message(str_value("create.viewOn", &Bson::Int32(5))),
            (
                codes::TYPE_MISMATCH,
                "BSON field 'create.viewOn' is the wrong type 'int', expected type 'string'".into()
            )
        );
        assert_eq!(
            message(safe_int64("collation.strength", &Bson::String("x".into()))).1,
            "BSON field 'collation.strength' is the wrong type 'string', expected types '[long, int, decimal, double]'"
        );
        assert_eq!(
            message(bool_value("p", &Bson::Int32(1))).1,
            "BSON field 'p' is the wrong type 'int', expected type 'bool'"
        );
        assert_eq!(
            message(doc_value("p", &Bson::Null)).1,
            "BSON field 'p' is the wrong type 'null', expected type 'object'"
        );
        assert_eq!(
            message(array_value("p", &Bson::Document(doc! {}))).1,
            "BSON field 'p' is the wrong type 'object', expected type 'array'"
        );
        assert_eq!(
            message(long_value("getMore.getMore", &Bson::Int32(1))).1,
            "BSON field 'getMore.getMore' is the wrong type 'int', expected type 'long'"
        );
        assert_eq!(
            message(timestamp_value("p", &Bson::Int64(1))).1,
            "BSON field 'p' is the wrong type 'long', expected type 'timestamp'"
        );
    }

    #[test]
    fn values_of_the_right_type() {
        assert!(bool_value("p", &Bson::Boolean(true)).unwrap());
        assert_eq!(str_value("p", &Bson::String("s".into())).unwrap(), "s");
        assert_eq!(long_value("p", &Bson::Int64(-3)).unwrap(), -3);
        let t = Timestamp {
            time: 1,
            increment: 2,
        };
        assert_eq!(timestamp_value("p", &Bson::Timestamp(t)).unwrap(), t);
        assert_eq!(
            array_value("p", &Bson::Array(vec![Bson::Null]))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn safe_int64_truncates_and_saturates() {
        let cases = [
            (Bson::Int32(-4), -4),
            (Bson::Int64(1 << 40), 1 << 40),
            (Bson::Double(2.9), 2),
            (Bson::Double(-2.9), -2),
            (Bson::Double(f64::NAN), 0),
            (Bson::Double(1e300), i64::MAX),
            (Bson::Decimal128("7.5".parse().unwrap()), 7),
        ];
        for (v, want) in cases {
            assert_eq!(safe_int64("p", &v).unwrap(), want, "{v}");
        }
    }

    #[test]
    fn optional_fields_of_a_command() {
        let cmd = doc! {
            "find": "c", "filter": {"a": 1}, "skip": 2.0, "frac": 2.5, "flag": 1,
            "no": null, "name": "x", "docs": [{"a": 1}, 3], "bad": "s",
        };
        let f = Fields::command(&cmd);
        assert_eq!(f.opt_doc("filter").unwrap(), Some(&doc! {"a": 1}));
        assert_eq!(f.opt_doc("no").unwrap(), None);
        assert_eq!(f.opt_doc("absent").unwrap(), None);
        assert_eq!(f.opt_i64("skip").unwrap(), Some(2));
        assert_eq!(
            message(f.opt_i64("frac")),
            (
                codes::BAD_VALUE,
                "BSON field 'find.frac' value must be an integer, got 2.5".into()
            )
        );
        assert_eq!(
            message(f.opt_i64("bad")).1,
            "BSON field 'find.bad' is the wrong type 'string', expected type 'long'"
        );
        assert_eq!(f.opt_bool("flag").unwrap(), Some(true));
        assert_eq!(
            message(f.opt_bool("name")).1,
            "BSON field 'find.name' is the wrong type 'string', expected type 'bool'"
        );
        assert_eq!(f.opt_str("name").unwrap(), Some("x"));
        assert_eq!(
            message(f.opt_doc_array("docs")).1,
            "BSON field 'find.docs.1' is the wrong type 'int', expected type 'object'"
        );
        assert_eq!(
            message(f.opt_doc_array("name")).1,
            "BSON field 'find.name' is the wrong type 'string', expected type 'array'"
        );
        let nested = Fields::new("create.timeseries", &cmd);
        assert_eq!(nested.path("granularity"), "create.timeseries.granularity");
    }
}

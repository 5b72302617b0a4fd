//! Hashed index keys, as mongod computes them (`BSONElementHasher::hash64` with seed 0):
//! an MD5 digest over the value's canonical type and bytes, of which the first eight
//! bytes (little-endian) are the key. Numbers are hashed as their 64-bit integer value
//! (truncated toward zero), so `1`, `1.0` and `NumberLong(1)` share a key; embedded
//! documents hash their whole content, field names included.

use crate::compare::canonical_type;
use crate::error::{Error, Result};
use bson::{Bson, Document};
use md5::{Digest, Md5};

/// mongod's assertion for an array met along a hashed field's path.
pub const HASHED_ARRAY: i32 = 16766;

/// The hashed-index key of a value (mongod's `hash64(e, 0)`).
pub fn hash64(v: &Bson) -> i64 {
    let mut h = Md5::new();
    // The seed (an int, 0) comes first.
    h.update(0i32.to_le_bytes());
    hash_element(&mut h, None, v);
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    i64::from_le_bytes(first)
}

/// mongod's `recursiveHash`: canonical type, the field name (with its NUL) inside embedded
/// objects, then the value: numbers as int64, containers element by element followed by
/// the end-of-object marker (canonical type 0), anything else as its BSON value bytes.
fn hash_element(h: &mut Md5, name: Option<&str>, v: &Bson) {
    h.update(canonical_type(v).to_le_bytes());
    if let Some(name) = name {
        h.update(name.as_bytes());
        h.update([0u8]);
    }
    match v {
        Bson::Document(d) => hash_fields(h, d.iter().map(|(k, v)| (k.as_str(), v))),
        Bson::Array(a) => {
            let names: Vec<String> = (0..a.len()).map(|i| i.to_string()).collect();
            hash_fields(h, names.iter().map(String::as_str).zip(a.iter()))
        }
        Bson::JavaScriptCodeWithScope(c) => {
            // The code string (int32 length, bytes, NUL), then the scope's elements.
            h.update(((c.code.len() + 1) as i32).to_le_bytes());
            h.update(c.code.as_bytes());
            h.update([0u8]);
            hash_fields(h, c.scope.iter().map(|(k, v)| (k.as_str(), v)));
        }
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            h.update(number_for_hash(v).to_le_bytes());
        }
        other => h.update(value_bytes(other)),
    }
}

fn hash_fields<'a>(h: &mut Md5, fields: impl Iterator<Item = (&'a str, &'a Bson)>) {
    for (name, v) in fields {
        hash_element(h, Some(name), v);
    }
    // The end-of-object element: canonical type 0, no name, no value.
    h.update(0i32.to_le_bytes());
}

/// mongod's `safeNumberLongForHash`: integers as they are; doubles and decimals truncated
/// toward zero and clamped to the int64 range, NaN as 0.
fn number_for_hash(v: &Bson) -> i64 {
    match v {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        _ => {
            let f = crate::compare::as_f64(v).unwrap_or(f64::NAN);
            if f.is_nan() {
                0
            } else if f >= i64::MAX as f64 {
                i64::MAX
            } else if f <= i64::MIN as f64 {
                i64::MIN
            } else {
                f.trunc() as i64
            }
        }
    }
}

/// A scalar's value bytes as BSON stores them (after the type byte and field name).
fn value_bytes(v: &Bson) -> Vec<u8> {
    let mut d = Document::new();
    d.insert("", v.clone());
    let mut buf = Vec::new();
    if d.to_writer(&mut buf).is_err() || buf.len() < 7 {
        return Vec::new();
    }
    // int32 length, type byte, empty name's NUL ... value ... document's trailing NUL.
    buf[6..buf.len() - 1].to_vec()
}

/// The value a hashed index hashes for `path`: None when missing; an error when an array
/// is met anywhere along the path (mongod: 16766).
pub fn hashed_field_value<'a>(doc: &'a Document, path: &str) -> Result<Option<&'a Bson>> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur: Option<&Bson> = doc.get(parts[0]);
    let mut i = 1;
    loop {
        match cur {
            Some(Bson::Array(_)) => {
                return Err(Error::location(
                    HASHED_ARRAY,
                    format!(
                        "Error: hashed indexes do not currently support array values. Found array at path: {}",
                        parts[..i].join(".")
                    ),
                ))
            }
            None => return Ok(None),
            Some(v) if i == parts.len() => return Ok(Some(v)),
            Some(Bson::Document(d)) => cur = d.get(parts[i]),
            Some(_) => return Ok(None),
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    #[test]
    fn matches_mongod_reference_value() {
        // mongod's startup self-test: hash64({check: 42}.firstElement(), 0).
        assert_eq!(hash64(&bson!(42)), -944302157085130861);
    }

    #[test]
    fn equal_numbers_hash_equally() {
        let h = hash64(&bson!(1));
        assert_eq!(hash64(&bson!(1.0)), h);
        assert_eq!(hash64(&bson!(1i64)), h);
        assert_ne!(hash64(&bson!(2)), h);
        // Truncation toward zero, as mongod.
        assert_eq!(hash64(&bson!(1.5)), h);
        assert_ne!(hash64(&bson!("1")), h);
    }

    #[test]
    fn documents_hash_their_content() {
        let a = hash64(&bson!({"b": 2}));
        assert_eq!(hash64(&bson!({"b": 2.0})), a);
        assert_ne!(hash64(&bson!({"c": 2})), a);
        assert_ne!(hash64(&bson!({"b": 2, "c": 1})), a);
        assert_ne!(hash64(&Bson::Null), hash64(&Bson::Undefined));
    }

    #[test]
    fn arrays_along_the_path_are_refused() {
        let e = hashed_field_value(&doc! {"a": [1]}, "a").unwrap_err();
        assert_eq!(e.code, HASHED_ARRAY);
        let e = hashed_field_value(&doc! {"a": [{"b": 1}]}, "a.b").unwrap_err();
        assert!(
            e.message.ends_with("Found array at path: a"),
            "{}",
            e.message
        );
        assert_eq!(
            hashed_field_value(&doc! {"a": {"b": 3}}, "a.b").unwrap(),
            Some(&bson!(3))
        );
        assert_eq!(hashed_field_value(&doc! {"a": 3}, "a.b").unwrap(), None);
    }
}

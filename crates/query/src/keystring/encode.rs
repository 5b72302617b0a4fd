//! Encoding values: one ctype byte, then the value's bytes (numbers in `number`).

use super::number::{append_decimal, append_double, append_integer};
use super::{ctype, format_error, put, put_bytes, put_u64, DCM_EQUAL_TO_DOUBLE};
use crate::error::Result;
use bson::{Bson, Document};

/// The elements of `raw` as [`KeyStringBuilder::append_string_and_raw_document`] writes
/// them, through the `bson` crate's iterator: numbers, strings and ObjectIds straight
/// from the raw value, anything else through `Bson` (the same bytes, with an
/// allocation or more).
pub(super) fn append_raw_elements(buf: &mut Vec<u8>, raw: &bson::RawDocument) -> Result<()> {
    use bson::RawBsonRef as R;
    for item in raw {
        let (k, v) = item.map_err(|e| format_error(format!("invalid BSON: {e}")))?;
        if let R::Int32(_) | R::Int64(_) | R::Double(_) | R::String(_) | R::ObjectId(_) = v {
            append_simple_element(buf, k, v);
            continue;
        }
        let converted = Bson::try_from(v.to_raw_bson())
            .map_err(|e| format_error(format!("invalid BSON: {e}")))?;
        put(buf, generic_ctype(&converted), false);
        put_bytes(buf, k.as_bytes(), false);
        put(buf, 0, false);
        append_value(buf, &converted, false);
    }
    Ok(())
}

/// One element of a document key as [`KeyStringBuilder::append_string_and_raw_document`]
/// writes it: a numeric, string or ObjectId value (what [`simple_elements`] yields).
pub(super) fn append_simple_element(buf: &mut Vec<u8>, key: &str, v: bson::RawBsonRef<'_>) {
    use bson::RawBsonRef as R;
    let (ctype, value_type) = match v {
        R::Int32(_) | R::Int64(_) | R::Double(_) => (ctype::NUMERIC, None),
        R::String(_) => (ctype::STRING_LIKE, Some(ctype::STRING_LIKE)),
        R::ObjectId(_) => (ctype::OID, Some(ctype::OID)),
        _ => unreachable!("simple_elements yields no other type"),
    };
    put(buf, ctype, false);
    put_bytes(buf, key.as_bytes(), false);
    put(buf, 0, false);
    if let Some(t) = value_type {
        put(buf, t, false);
    }
    match v {
        R::Int32(i) => append_integer(buf, i as i64, false),
        R::Int64(i) => append_integer(buf, i, false),
        R::Double(d) => append_double(buf, d, DCM_EQUAL_TO_DOUBLE, false),
        R::String(s) => append_string_like(buf, s.as_bytes(), false),
        R::ObjectId(o) => put_bytes(buf, &o.bytes(), false),
        _ => unreachable!("simple_elements yields no other type"),
    }
}

/// Calls `each` with every element of the BSON document `b` when all of them are
/// int32, int64, double, string or ObjectId values under UTF-8 keys, and the
/// document is well formed; false (after calling `each` for some, maybe) otherwise.
pub(super) fn simple_elements(b: &[u8], mut each: impl FnMut(&str, bson::RawBsonRef<'_>)) -> bool {
    use bson::RawBsonRef as R;
    let mut walk = || -> Option<()> {
        let declared = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        if usize::try_from(declared).ok()? != b.len() || b.last() != Some(&0) {
            return None;
        }
        let end = b.len() - 1;
        let mut i = 4;
        while i < end {
            let element_type = b[i];
            i += 1;
            let key_len = b.get(i..end)?.iter().position(|&c| c == 0)?;
            let key = std::str::from_utf8(&b[i..i + key_len]).ok()?;
            i += key_len + 1;
            let fixed = |n: usize| -> Option<&[u8]> {
                let value_end = i.checked_add(n)?;
                if value_end > end {
                    return None;
                }
                b.get(i..value_end)
            };
            let (value, size) = match element_type {
                0x10 => (R::Int32(i32::from_le_bytes(fixed(4)?.try_into().ok()?)), 4),
                0x12 => (R::Int64(i64::from_le_bytes(fixed(8)?.try_into().ok()?)), 8),
                0x01 => (R::Double(f64::from_le_bytes(fixed(8)?.try_into().ok()?)), 8),
                0x07 => (
                    R::ObjectId(bson::oid::ObjectId::from_bytes(fixed(12)?.try_into().ok()?)),
                    12,
                ),
                0x02 => {
                    let len =
                        usize::try_from(i32::from_le_bytes(fixed(4)?.try_into().ok()?)).ok()?;
                    let bytes = b.get(i + 4..(i + 4).checked_add(len)?)?;
                    if len == 0 || i + 4 + len > end || bytes[len - 1] != 0 {
                        return None;
                    }
                    (
                        R::String(std::str::from_utf8(&bytes[..len - 1]).ok()?),
                        4 + len,
                    )
                }
                _ => return None,
            };
            i += size;
            each(key, value);
        }
        (i == end).then_some(())
    };
    walk().is_some()
}

/// The generic ctype of a value, as used before field names inside objects.
pub(super) fn generic_ctype(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => ctype::MIN_KEY,
        Bson::Undefined => ctype::UNDEFINED,
        Bson::Null => ctype::NULLISH,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => ctype::NUMERIC,
        Bson::String(_) | Bson::Symbol(_) => ctype::STRING_LIKE,
        Bson::Document(_) => ctype::OBJECT,
        Bson::Array(_) => ctype::ARRAY,
        Bson::Binary(_) => ctype::BIN_DATA,
        Bson::ObjectId(_) => ctype::OID,
        Bson::Boolean(_) => ctype::BOOL,
        Bson::DateTime(_) => ctype::DATE,
        Bson::Timestamp(_) => ctype::TIMESTAMP,
        Bson::RegularExpression(_) => ctype::REGEX,
        Bson::DbPointer(_) => ctype::DBREF,
        Bson::JavaScriptCode(_) => ctype::CODE,
        Bson::JavaScriptCodeWithScope(_) => ctype::CODE_WITH_SCOPE,
        Bson::MaxKey => ctype::MAX_KEY,
    }
}

pub(super) fn append_binary(buf: &mut Vec<u8>, subtype: u8, bytes: &[u8], inv: bool) {
    put(buf, ctype::BIN_DATA, inv);
    if bytes.len() < 0xff {
        put(buf, bytes.len() as u8, inv);
    } else {
        put(buf, 0xff, inv);
        put_bytes(buf, &(bytes.len() as u32).to_be_bytes(), inv);
    }
    put(buf, subtype, inv);
    put_bytes(buf, bytes, inv);
}

pub(super) fn append_value(buf: &mut Vec<u8>, v: &Bson, inv: bool) {
    match v {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {
            put(buf, generic_ctype(v), inv)
        }
        Bson::Double(d) => append_double(buf, *d, DCM_EQUAL_TO_DOUBLE, inv),
        Bson::Int32(i) => append_integer(buf, *i as i64, inv),
        Bson::Int64(i) => append_integer(buf, *i, inv),
        Bson::Decimal128(d) => append_decimal(buf, d, inv),
        Bson::String(s) | Bson::Symbol(s) => {
            put(buf, ctype::STRING_LIKE, inv);
            append_string_like(buf, s.as_bytes(), inv);
        }
        Bson::Document(d) => {
            put(buf, ctype::OBJECT, inv);
            append_doc_body(buf, d, inv);
        }
        Bson::Array(a) => {
            put(buf, ctype::ARRAY, inv);
            for e in a {
                append_value(buf, e, inv);
            }
            put(buf, 0, inv);
        }
        Bson::Binary(b) => append_binary(buf, u8::from(b.subtype), &b.bytes, inv),
        Bson::ObjectId(o) => {
            put(buf, ctype::OID, inv);
            put_bytes(buf, &o.bytes(), inv);
        }
        Bson::Boolean(b) => put(
            buf,
            if *b {
                ctype::BOOL_TRUE
            } else {
                ctype::BOOL_FALSE
            },
            inv,
        ),
        Bson::DateTime(d) => {
            put(buf, ctype::DATE, inv);
            put_u64(buf, (d.timestamp_millis() as u64) ^ (1u64 << 63), inv);
        }
        Bson::Timestamp(t) => {
            put(buf, ctype::TIMESTAMP, inv);
            put_u64(buf, ((t.time as u64) << 32) | t.increment as u64, inv);
        }
        Bson::RegularExpression(r) => {
            put(buf, ctype::REGEX, inv);
            // NUL is not allowed in BSON regex pattern or flags.
            put_bytes(buf, r.pattern.as_bytes(), inv);
            put(buf, 0, inv);
            put_bytes(buf, r.options.as_bytes(), inv);
            put(buf, 0, inv);
        }
        Bson::DbPointer(_) => {
            let (ns, oid) = db_pointer_parts(v);
            put(buf, ctype::DBREF, inv);
            put_bytes(buf, &(ns.len() as u32).to_be_bytes(), inv);
            put_bytes(buf, ns.as_bytes(), inv);
            put_bytes(buf, &oid, inv);
        }
        Bson::JavaScriptCode(c) => {
            put(buf, ctype::CODE, inv);
            append_string_like(buf, c.as_bytes(), inv);
        }
        Bson::JavaScriptCodeWithScope(c) => {
            put(buf, ctype::CODE_WITH_SCOPE, inv);
            append_string_like(buf, c.code.as_bytes(), inv);
            append_doc_body(buf, &c.scope, inv);
        }
    }
}

pub(super) fn append_value_collated(
    buf: &mut Vec<u8>,
    v: &Bson,
    inv: bool,
    coll: &crate::collation::Collator,
) {
    match v {
        Bson::String(s) | Bson::Symbol(s) => {
            put(buf, ctype::STRING_LIKE, inv);
            append_string_like(buf, &coll.sort_key(s), inv);
        }
        Bson::Document(d) => {
            put(buf, ctype::OBJECT, inv);
            for (k, x) in d {
                put(buf, generic_ctype(x), inv);
                put_bytes(buf, k.as_bytes(), inv);
                put(buf, 0, inv);
                append_value_collated(buf, x, inv, coll);
            }
            put(buf, 0, inv);
        }
        Bson::Array(a) => {
            put(buf, ctype::ARRAY, inv);
            for e in a {
                append_value_collated(buf, e, inv, coll);
            }
            put(buf, 0, inv);
        }
        other => append_value(buf, other, inv),
    }
}

pub(super) fn append_doc_body(buf: &mut Vec<u8>, d: &Document, inv: bool) {
    for (k, v) in d {
        put(buf, generic_ctype(v), inv);
        put_bytes(buf, k.as_bytes(), inv);
        put(buf, 0, inv);
        append_value(buf, v, inv);
    }
    put(buf, 0, inv);
}

pub(super) fn append_string_like(buf: &mut Vec<u8>, s: &[u8], inv: bool) {
    for &c in s {
        put(buf, c, inv);
        if c == 0 {
            put(buf, 0xff, inv);
        }
    }
    put(buf, 0, inv);
}

/// `bson::DbPointer` keeps its fields private; read them back from its BSON bytes.
pub(super) fn db_pointer_parts(v: &Bson) -> (String, [u8; 12]) {
    let mut d = Document::new();
    d.insert("x", v.clone());
    let bytes = bson::to_vec(&d).unwrap_or_default();
    // int32 doc len, 0x0C, "x\0", int32 strlen (incl. NUL), ns, \0, 12-byte oid, \0
    if bytes.len() > 4 + 1 + 2 + 4 + 1 + 12 {
        let sl = i32::from_le_bytes([bytes[7], bytes[8], bytes[9], bytes[10]]).max(1) as usize;
        let ns_start = 11;
        let ns_end = ns_start + sl - 1;
        if ns_end + 1 + 12 <= bytes.len() {
            let ns = String::from_utf8_lossy(&bytes[ns_start..ns_end]).into_owned();
            let mut oid = [0u8; 12];
            oid.copy_from_slice(&bytes[ns_end + 1..ns_end + 13]);
            return (ns, oid);
        }
    }
    (String::new(), [0; 12])
}

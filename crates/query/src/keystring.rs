//! MongoDB's KeyString (version V1): an order-preserving byte encoding of a
//! sequence of BSON values. For any two values `a`, `b`,
//! `cmp_bson(a, b) == encode_value(a).cmp(&encode_value(b))`, and a sequence of
//! components compares bytewise like the tuple of values lexicographically.
//!
//! The format follows mongod's `src/mongo/db/storage/key_string.cpp` (V1) so that
//! bytes produced here (notably change-stream resume tokens, `_data` = upper-case
//! hex of a KeyString) are the ones mongod would produce:
//!
//! * one "ctype" byte per value (MinKey 10, Undefined 15, Null 20, numbers 30..=51,
//!   strings 60, objects 70, arrays 80, BinData 90, ObjectId 100, false/true 110/111,
//!   Date 120, Timestamp 130, Regex 140, DBPointer 150, Code 160, CodeWScope 170,
//!   MaxKey 240), followed by the value bytes;
//! * strings are NUL-terminated with embedded NULs escaped as `00 FF`;
//! * objects are `(generic ctype, name\0, value)*` then `00`; arrays are `value*` then `00`;
//! * a descending component is written with every byte inverted (bitwise NOT);
//! * `kEnd` (4) closes a key (MongoDB writes it after all index key components).
//!
//! Numbers: int32 / int64 / double / decimal128 that are numerically equal encode to the
//! same bytes (mongod keeps the original type in separate "TypeBits", which are not
//! part of the ordering bytes and are not produced here). Integers, doubles and decimals
//! follow mongod byte-for-byte, with one exception: a Decimal128 that is not exactly a
//! double and whose round-toward-zero double is *subnormal* (|x| between 2^-1074 and
//! 2^-1022) uses an order-correct encoding of our own (tiny-double prefix with the
//! continuation bit set, followed by a 16-byte continuation) instead of mongod's.
//!
//! Self-delimitation: every value's encoding determines its own length, so
//! `prefix ++ enc(v1) ++ enc(v2)` orders by `(v1, v2)`. A *trailing* string is, however,
//! a byte prefix of the encoding of the same string followed by an escaped NUL
//! (`"a"` = `3C 61 00`, `"a\0"` = `3C 61 00 FF 00`), so an exact-value range scan must
//! use [`seek_bounds`] (mongod's kExclusiveBefore / kExclusiveAfter discriminators)
//! rather than a plain byte-prefix test.

use crate::error::{codes, Error, Result};
use bson::{oid::ObjectId, spec::BinarySubtype, Binary, Bson, Document};
use std::cmp::Ordering as CmpOrdering;

/// Canonical type bytes ("CType" in key_string.cpp).
pub mod ctype {
    pub const MIN_KEY: u8 = 10;
    pub const UNDEFINED: u8 = 15;
    pub const NULLISH: u8 = 20;
    pub const NUMERIC: u8 = 30;
    pub const STRING_LIKE: u8 = 60;
    pub const OBJECT: u8 = 70;
    pub const ARRAY: u8 = 80;
    pub const BIN_DATA: u8 = 90;
    pub const OID: u8 = 100;
    pub const BOOL: u8 = 110;
    pub const DATE: u8 = 120;
    pub const TIMESTAMP: u8 = 130;
    pub const REGEX: u8 = 140;
    pub const DBREF: u8 = 150;
    pub const CODE: u8 = 160;
    pub const CODE_WITH_SCOPE: u8 = 170;
    pub const MAX_KEY: u8 = 240;

    pub const NUMERIC_NAN: u8 = NUMERIC;
    pub const NUMERIC_NEGATIVE_LARGE_MAGNITUDE: u8 = NUMERIC + 1;
    pub const NUMERIC_NEGATIVE_8_BYTE_INT: u8 = NUMERIC + 2;
    pub const NUMERIC_NEGATIVE_1_BYTE_INT: u8 = NUMERIC + 9;
    pub const NUMERIC_NEGATIVE_SMALL_MAGNITUDE: u8 = NUMERIC + 10;
    pub const NUMERIC_ZERO: u8 = NUMERIC + 11;
    pub const NUMERIC_POSITIVE_SMALL_MAGNITUDE: u8 = NUMERIC + 12;
    pub const NUMERIC_POSITIVE_1_BYTE_INT: u8 = NUMERIC + 13;
    pub const NUMERIC_POSITIVE_8_BYTE_INT: u8 = NUMERIC + 20;
    pub const NUMERIC_POSITIVE_LARGE_MAGNITUDE: u8 = NUMERIC + 21;

    pub const BOOL_FALSE: u8 = BOOL;
    pub const BOOL_TRUE: u8 = BOOL + 1;
}

/// Closes a key (`kEnd`).
pub const END: u8 = 4;
/// Discriminator sorting before every continuation of a key prefix (`kLess`).
pub const LESS: u8 = 1;
/// Discriminator sorting after every continuation of a key prefix (`kGreater`).
pub const GREATER: u8 = 254;

// Decimal continuation markers.
const DCM_EQUAL_TO_DOUBLE: u64 = 0;
const DCM_CONT_LESS_THAN_15: u64 = 1;
const DCM_EQUAL_TO_15: u64 = 2;
const DCM_CONT_LARGER_THAN_15: u64 = 3;

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_POW_53: f64 = 9_007_199_254_740_992.0;

/// Per-field direction of an index key pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    Ascending,
    Descending,
}

/// mongod's Discriminator: where a key built from a prefix of values sorts relative
/// to the stored keys having that prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discriminator {
    Inclusive,
    ExclusiveBefore,
    ExclusiveAfter,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyStringBuilder {
    buf: Vec<u8>,
}

impl KeyStringBuilder {
    pub fn new() -> Self {
        KeyStringBuilder { buf: Vec::new() }
    }

    /// A builder whose buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> Self {
        KeyStringBuilder {
            buf: Vec::with_capacity(bytes),
        }
    }

    /// Appends one key component; a descending component is written bit-inverted.
    pub fn append(&mut self, v: &Bson, descending: bool) {
        append_value(&mut self.buf, v, descending);
    }

    /// Appends one key component of an index with a collation: strings (also inside
    /// objects and arrays) are encoded by their comparison keys, as mongod's collated
    /// index keys are, so equal-under-the-collation strings make equal keys. Other
    /// values encode as with `append`.
    pub fn append_collated(
        &mut self,
        v: &Bson,
        descending: bool,
        coll: Option<&crate::collation::Collator>,
    ) {
        match coll {
            None => append_value(&mut self.buf, v, descending),
            Some(c) => append_value_collated(&mut self.buf, v, descending, c),
        }
    }

    /// Appends a document component (the same bytes as `append(&Bson::Document(d))`,
    /// without building the `Bson`).
    pub fn append_document(&mut self, d: &Document, descending: bool) {
        put(&mut self.buf, ctype::OBJECT, descending);
        append_doc_body(&mut self.buf, d, descending);
    }

    /// Appends components encoded earlier (by another builder's `into_bytes`).
    pub fn append_encoded(&mut self, encoded: &[u8]) {
        self.buf.extend_from_slice(encoded);
    }

    /// Appends the object `{<name1>: <text>, <name2>: <raw>}` (the same bytes as
    /// `append_document` of that document), reading `raw` without building a
    /// `Document` (a change event's identifier, built for every event).
    pub fn append_string_and_raw_document(
        &mut self,
        name1: &str,
        text: &str,
        name2: &str,
        raw: &bson::RawDocument,
    ) -> Result<()> {
        let buf = &mut self.buf;
        put(buf, ctype::OBJECT, false);
        put(buf, ctype::STRING_LIKE, false);
        put_bytes(buf, name1.as_bytes(), false);
        put(buf, 0, false);
        put(buf, ctype::STRING_LIKE, false);
        append_string_like(buf, text.as_bytes(), false);
        put(buf, ctype::OBJECT, false);
        put_bytes(buf, name2.as_bytes(), false);
        put(buf, 0, false);
        put(buf, ctype::OBJECT, false);
        // The usual keys (one `_id` of a plain type) read from the bytes themselves: the
        // `bson` crate's iterator cost ~700 instructions per element, more than the
        // encoding. Anything else, and any doubt, goes through the iterator.
        let mark = buf.len();
        if !simple_elements(raw.as_bytes(), |k, v| append_simple_element(buf, k, v)) {
            buf.truncate(mark);
            append_raw_elements(buf, raw)?;
        }
        put(buf, 0, false);
        put(buf, 0, false);
        Ok(())
    }

    pub fn append_ordered(&mut self, v: &Bson, ord: Ordering) {
        self.append(v, ord == Ordering::Descending);
    }

    /// Appends binary data (the same bytes as `append(&Bson::Binary(..))`, without
    /// building the `Binary`).
    pub fn append_binary(&mut self, subtype: u8, bytes: &[u8], descending: bool) {
        append_binary(&mut self.buf, subtype, bytes, descending);
    }

    /// Appends `kEnd` (4), as mongod does after the last component of an index key
    /// and of a resume token.
    pub fn append_discriminator_end(&mut self) {
        self.buf.push(END);
    }

    /// mongod's `appendDiscriminator`: `kLess` / `kGreater` (if any) followed by `kEnd`.
    pub fn append_discriminator(&mut self, d: Discriminator) {
        match d {
            Discriminator::Inclusive => {}
            Discriminator::ExclusiveBefore => self.buf.push(LESS),
            Discriminator::ExclusiveAfter => self.buf.push(GREATER),
        }
        self.buf.push(END);
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// The encoding of a single ascending value (used for `_id` record keys).
pub fn encode_value(v: &Bson) -> Vec<u8> {
    let mut b = Vec::new();
    append_value(&mut b, v, false);
    b
}

/// The encoding of a sequence of values with per-component direction (no `kEnd`).
pub fn encode_values(values: &[Bson], descending: &[bool]) -> Vec<u8> {
    let mut b = Vec::new();
    for (i, v) in values.iter().enumerate() {
        append_value(&mut b, v, descending.get(i).copied().unwrap_or(false));
    }
    b
}

/// Byte range `[lower, upper)` containing exactly the keys that start with the complete
/// encoded components `encoded` and continue with further components (another value,
/// `kEnd`, a record id encoded as a KeyString value...). This is what mongod achieves
/// with the kExclusiveBefore / kExclusiveAfter discriminators; unlike a raw byte-prefix
/// test it excludes `"a\0..."` when looking for `"a"`.
pub fn seek_bounds(encoded: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut lo = encoded.to_vec();
    lo.push(LESS);
    let mut hi = encoded.to_vec();
    hi.push(GREATER);
    (lo, hi)
}

pub fn to_hex_upper(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    push_hex_upper(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// The elements of `raw` as [`KeyStringBuilder::append_string_and_raw_document`] writes
/// them, through the `bson` crate's iterator: numbers, strings and ObjectIds straight
/// from the raw value, anything else through `Bson` (the same bytes, with an
/// allocation or more).
fn append_raw_elements(buf: &mut Vec<u8>, raw: &bson::RawDocument) -> Result<()> {
    use bson::RawBsonRef as R;
    for item in raw {
        let (k, v) = item.map_err(|e| format_error(&format!("invalid BSON: {e}")))?;
        if let R::Int32(_) | R::Int64(_) | R::Double(_) | R::String(_) | R::ObjectId(_) = v {
            append_simple_element(buf, k, v);
            continue;
        }
        let converted = Bson::try_from(v.to_raw_bson())
            .map_err(|e| format_error(&format!("invalid BSON: {e}")))?;
        put(buf, generic_ctype(&converted), false);
        put_bytes(buf, k.as_bytes(), false);
        put(buf, 0, false);
        append_value(buf, &converted, false);
    }
    Ok(())
}

/// One element of a document key as [`KeyStringBuilder::append_string_and_raw_document`]
/// writes it: a numeric, string or ObjectId value (what [`simple_elements`] yields).
fn append_simple_element(buf: &mut Vec<u8>, key: &str, v: bson::RawBsonRef<'_>) {
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
fn simple_elements(b: &[u8], mut each: impl FnMut(&str, bson::RawBsonRef<'_>)) -> bool {
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

/// Appends the upper-case hex digits of `bytes` to `out`. Every change event's resume
/// token is written this way: bytes into a buffer, not chars pushed one by one (each
/// push re-checks capacity and encodes UTF-8).
pub fn push_hex_upper(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + bytes.len() * 2, 0);
    faster_hex::hex_encode_upper(bytes, &mut out[start..])
        .expect("the destination holds two digits per byte");
}

pub fn from_hex(s: &str) -> Result<Vec<u8>> {
    fn nib(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return Err(Error::failed_to_parse(format!(
            "odd-length hex string: {s:?}"
        )));
    }
    b.chunks(2)
        .map(|p| match (nib(p[0]), nib(p[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(Error::failed_to_parse(format!("invalid hex string: {s:?}"))),
        })
        .collect()
}

// ----------------------------------------------------------------------------
// Encoding
// ----------------------------------------------------------------------------

#[inline]
fn put(buf: &mut Vec<u8>, b: u8, invert: bool) {
    buf.push(if invert { !b } else { b });
}

#[inline]
fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8], invert: bool) {
    if invert {
        buf.extend(bytes.iter().map(|b| !b));
    } else {
        buf.extend_from_slice(bytes);
    }
}

#[inline]
fn put_u64(buf: &mut Vec<u8>, v: u64, invert: bool) {
    put_bytes(buf, &v.to_be_bytes(), invert);
}

/// The generic ctype of a value, as used before field names inside objects.
fn generic_ctype(v: &Bson) -> u8 {
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

fn append_binary(buf: &mut Vec<u8>, subtype: u8, bytes: &[u8], inv: bool) {
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

fn append_value(buf: &mut Vec<u8>, v: &Bson, inv: bool) {
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

fn append_value_collated(
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

fn append_doc_body(buf: &mut Vec<u8>, d: &Document, inv: bool) {
    for (k, v) in d {
        put(buf, generic_ctype(v), inv);
        put_bytes(buf, k.as_bytes(), inv);
        put(buf, 0, inv);
        append_value(buf, v, inv);
    }
    put(buf, 0, inv);
}

fn append_string_like(buf: &mut Vec<u8>, s: &[u8], inv: bool) {
    for &c in s {
        put(buf, c, inv);
        if c == 0 {
            put(buf, 0xff, inv);
        }
    }
    put(buf, 0, inv);
}

/// `bson::DbPointer` keeps its fields private; read them back from its BSON bytes.
fn db_pointer_parts(v: &Bson) -> (String, [u8; 12]) {
    let mut d = Document::new();
    d.insert("x", v.clone());
    let bytes = bson::to_vec(&d).unwrap_or_default();
    // int32 doc len, 0x0C, "x\0", int32 strlen (incl. NUL), ns, \0, 12-byte oid, \0
    if bytes.len() >= 4 + 1 + 2 + 4 + 1 + 12 + 1 {
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

fn make_db_pointer(ns: &str, oid: [u8; 12]) -> Result<Bson> {
    let mut body = Vec::new();
    body.push(0x0Cu8);
    body.extend_from_slice(b"x\0");
    body.extend_from_slice(&((ns.len() + 1) as i32).to_le_bytes());
    body.extend_from_slice(ns.as_bytes());
    body.push(0);
    body.extend_from_slice(&oid);
    body.push(0);
    let mut bytes = ((body.len() + 4) as i32).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let d = Document::from_reader(&mut bytes.as_slice()).map_err(|e| {
        Error::new(
            codes::INVALID_BSON,
            format!("bad DBPointer in KeyString: {e}"),
        )
    })?;
    d.get("x")
        .cloned()
        .ok_or_else(|| Error::internal("DBPointer decode"))
}

/// int32 / int64 (`_appendInteger`).
fn append_integer(buf: &mut Vec<u8>, n: i64, inv: bool) {
    if n == i64::MIN {
        // -2^63 is exactly a double but not a positive int64: encoded as a large double.
        append_large_double(buf, n as f64, DCM_EQUAL_TO_DOUBLE, inv);
        return;
    }
    if n == 0 {
        put(buf, ctype::NUMERIC_ZERO, inv);
        return;
    }
    let neg = n < 0;
    let mag = n.unsigned_abs();
    append_preshifted_integer(buf, mag << 1, neg, inv);
}

/// `_appendPreshiftedIntegerPortion`: ctype says how many bytes follow (big-endian,
/// inverted for negative values).
fn append_preshifted_integer(buf: &mut Vec<u8>, value: u64, neg: bool, inv: bool) {
    let bytes_needed = ((64 - value.leading_zeros() + 7) / 8) as usize;
    let be = value.to_be_bytes();
    let used = &be[8 - bytes_needed..];
    if neg {
        put(
            buf,
            ctype::NUMERIC_NEGATIVE_1_BYTE_INT - (bytes_needed as u8 - 1),
            inv,
        );
        put_bytes(buf, used, !inv);
    } else {
        put(
            buf,
            ctype::NUMERIC_POSITIVE_1_BYTE_INT + (bytes_needed as u8 - 1),
            inv,
        );
        put_bytes(buf, used, inv);
    }
}

/// `_appendDoubleWithoutTypeBits` (V1).
fn append_double(buf: &mut Vec<u8>, num: f64, dcm: u64, inv: bool) {
    let neg = num < 0.0;
    let mag = num.abs();
    if !(mag >= 1.0) {
        if mag > 0.0 {
            append_small_double(buf, num, dcm, inv);
        } else if num == 0.0 {
            put(buf, ctype::NUMERIC_ZERO, inv); // -0.0 and 0.0 collapse
        } else {
            put(buf, ctype::NUMERIC_NAN, inv);
        }
        return;
    }
    if mag < TWO_POW_63 {
        let integer_part = mag as u64;
        if integer_part as f64 == mag && dcm == DCM_EQUAL_TO_DOUBLE {
            append_preshifted_integer(buf, integer_part << 1, neg, inv);
            return;
        }
        let fractional_bytes = ((integer_part << 1).leading_zeros() / 8) as usize;
        let ct = if neg {
            ctype::NUMERIC_NEGATIVE_8_BYTE_INT + fractional_bytes as u8
        } else {
            ctype::NUMERIC_POSITIVE_8_BYTE_INT - fractional_bytes as u8
        };
        put(buf, ct, inv);
        // Multiplying by 256^k shifts the binary fraction left by k bytes (exact).
        let mut encoding = (mag * pow256(fractional_bytes as i32)) as u64;
        encoding = encoding.wrapping_add((integer_part + 1) << (fractional_bytes * 8));
        debug_assert_eq!(encoding & 3, 0);
        encoding |= dcm;
        put_u64(buf, encoding, if neg { !inv } else { inv });
    } else {
        append_large_double(buf, num, dcm, inv);
    }
}

fn pow256(k: i32) -> f64 {
    2f64.powi(8 * k)
}

/// `_appendSmallDouble`: 0 < |value| < 1.
fn append_small_double(buf: &mut Vec<u8>, value: f64, dcm: u64, inv: bool) {
    let neg = value < 0.0;
    let mut mag = value.abs();
    put(
        buf,
        if neg {
            ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE
        } else {
            ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE
        },
        inv,
    );
    let encoded = if mag >= ldexp(1.0, -255) {
        // [2^-255, 1): prefix 0b11
        (mag.to_bits() << 2) | dcm
    } else {
        // [denorm_min, 2^-255): scale by 2^256 to avoid subnormals; prefixes 0b01 / 0b10.
        mag *= ldexp(1.0, 256);
        let mut e = mag.to_bits() << 1;
        e |= (dcm != DCM_EQUAL_TO_DOUBLE) as u64;
        e + (1u64 << 62)
    };
    put_u64(buf, encoded, if neg { !inv } else { inv });
}

/// `_appendLargeDouble`: |value| >= 2^63, including infinities.
fn append_large_double(buf: &mut Vec<u8>, value: f64, dcm: u64, inv: bool) {
    let pos = value > 0.0;
    put(
        buf,
        if pos {
            ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
        } else {
            ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
        },
        inv,
    );
    let encoded = if value.is_finite() {
        let mut e = value.to_bits() << 1;
        e &= !(1u64 << 63);
        e | (dcm != DCM_EQUAL_TO_DOUBLE) as u64
    } else {
        !0u64
    };
    put_u64(buf, encoded, if pos { inv } else { !inv });
}

/// Exact `x * 2^e` for results that are representable (steps keep intermediates exact).
fn ldexp(mut x: f64, mut e: i32) -> f64 {
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e)
}

// ----------------------------------------------------------------------------
// Decimal128 support (exact arithmetic on decimal digit strings)
// ----------------------------------------------------------------------------

const DEC_EXP_BIAS: i32 = 6176;

enum DecKind {
    NaN,
    Inf(bool),
    Finite { neg: bool, coef: u128, exp: i32 },
}

fn parse_decimal(d: &bson::Decimal128) -> DecKind {
    let b = d.bytes();
    let lo = u64::from_le_bytes(b[0..8].try_into().unwrap());
    let hi = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let neg = hi >> 63 == 1;
    let comb = (hi >> 58) & 0x1f;
    if comb == 0x1f {
        return DecKind::NaN;
    }
    if comb == 0x1e {
        return DecKind::Inf(neg);
    }
    let (exp, coef) = if (hi >> 61) & 3 == 3 {
        // "11" form: coefficient >= 2^113 > 10^34 - 1: non-canonical, value is zero.
        (((hi >> 47) & 0x3fff) as i32, 0u128)
    } else {
        let c = (((hi & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
        (
            ((hi >> 49) & 0x3fff) as i32,
            if c >= 10u128.pow(34) { 0 } else { c },
        )
    };
    DecKind::Finite {
        neg,
        coef,
        exp: exp - DEC_EXP_BIAS,
    }
}

fn make_decimal(neg: bool, coef: u128, exp: i32) -> bson::Decimal128 {
    let biased = (exp + DEC_EXP_BIAS) as u64;
    let hi = ((neg as u64) << 63) | (biased << 49) | (coef >> 64) as u64;
    let lo = coef as u64;
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&lo.to_le_bytes());
    b[8..16].copy_from_slice(&hi.to_le_bytes());
    bson::Decimal128::from_bytes(b)
}

/// A positive decimal `digits × 10^exp` (no leading or trailing zeros), or zero (empty digits).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digits {
    d: Vec<u8>,
    exp: i32,
}

impl Digits {
    fn new(mut d: Vec<u8>, mut exp: i32) -> Digits {
        let lead = d.iter().take_while(|&&x| x == 0).count();
        d.drain(..lead);
        while d.last() == Some(&0) {
            d.pop();
            exp += 1;
        }
        if d.is_empty() {
            exp = 0;
        }
        Digits { d, exp }
    }

    fn from_u128(c: u128, exp: i32) -> Digits {
        Digits::new(c.to_string().bytes().map(|b| b - b'0').collect(), exp)
    }

    /// Exact decimal expansion of a positive finite double.
    fn from_f64(x: f64) -> Digits {
        let bits = x.to_bits();
        let e = ((bits >> 52) & 0x7ff) as i32;
        let f = bits & ((1u64 << 52) - 1);
        let (m, k) = if e == 0 {
            (f, -1074)
        } else {
            (f | (1u64 << 52), e - 1075)
        };
        let mut big = vec![m as u32, (m >> 32) as u32];
        if k >= 0 {
            big_shl(&mut big, k as u32);
            Digits::new(big_to_digits(&big), 0)
        } else {
            // m × 2^k = m × 5^-k × 10^k
            let mut n = -k;
            while n >= 13 {
                big_mul_small(&mut big, 1_220_703_125); // 5^13
                n -= 13;
            }
            big_mul_small(&mut big, 5u32.pow(n as u32));
            Digits::new(big_to_digits(&big), k)
        }
    }

    fn is_zero(&self) -> bool {
        self.d.is_empty()
    }

    /// Exponent of the leading digit.
    fn adjusted(&self) -> i32 {
        self.exp + self.d.len() as i32 - 1
    }

    fn cmp(&self, o: &Digits) -> CmpOrdering {
        match (self.is_zero(), o.is_zero()) {
            (true, true) => return CmpOrdering::Equal,
            (true, false) => return CmpOrdering::Less,
            (false, true) => return CmpOrdering::Greater,
            _ => {}
        }
        self.adjusted()
            .cmp(&o.adjusted())
            .then_with(|| self.d.cmp(&o.d))
    }

    /// Rounded away from zero to at most `n` significant digits.
    fn round_up(&self, n: usize) -> Digits {
        if self.d.len() <= n {
            return self.clone();
        }
        let mut head: Vec<u8> = self.d[..n].to_vec();
        let exp = self.exp + (self.d.len() - n) as i32;
        if self.d[n..].iter().any(|&x| x != 0) {
            let mut i = n;
            loop {
                if i == 0 {
                    head.insert(0, 1);
                    break;
                }
                i -= 1;
                if head[i] == 9 {
                    head[i] = 0;
                } else {
                    head[i] += 1;
                    break;
                }
            }
        }
        Digits::new(head, exp)
    }

    /// Normalized to exactly 34 digits (Decimal128::normalize): (coefficient, exponent).
    fn normalize34(&self) -> (u128, i32) {
        let mut c: u128 = 0;
        for &x in &self.d {
            c = c * 10 + x as u128;
        }
        let pad = 34 - self.d.len() as i32;
        (c * 10u128.pow(pad as u32), self.exp - pad)
    }

    /// The value as an integer multiple of 10^e (truncating if not exact).
    fn coef_at(&self, e: i32) -> u128 {
        let mut c: u128 = 0;
        let shift = self.exp - e;
        let keep = if shift >= 0 {
            self.d.len()
        } else {
            (self.d.len() as i32 + shift).max(0) as usize
        };
        for &x in &self.d[..keep] {
            c = c.saturating_mul(10).saturating_add(x as u128);
        }
        if shift > 0 {
            c = c.saturating_mul(10u128.saturating_pow(shift as u32));
        }
        c
    }
}

fn big_mul_small(a: &mut Vec<u32>, m: u32) {
    let mut carry = 0u64;
    for limb in a.iter_mut() {
        let v = *limb as u64 * m as u64 + carry;
        *limb = v as u32;
        carry = v >> 32;
    }
    if carry > 0 {
        a.push(carry as u32);
    }
}

fn big_shl(a: &mut Vec<u32>, k: u32) {
    let words = (k / 32) as usize;
    let bits = k % 32;
    if bits > 0 {
        let mut carry = 0u32;
        for limb in a.iter_mut() {
            let v = (*limb << bits) | carry;
            carry = *limb >> (32 - bits);
            *limb = v;
        }
        if carry > 0 {
            a.push(carry);
        }
    }
    for _ in 0..words {
        a.insert(0, 0);
    }
}

fn big_to_digits(a: &[u32]) -> Vec<u8> {
    let mut a: Vec<u32> = a.to_vec();
    let mut chunks: Vec<u32> = Vec::new();
    while a.iter().any(|&x| x != 0) {
        let mut rem = 0u64;
        for limb in a.iter_mut().rev() {
            let cur = (rem << 32) | *limb as u64;
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while a.last() == Some(&0) {
            a.pop();
        }
    }
    let mut s = String::new();
    for (i, c) in chunks.iter().rev().enumerate() {
        if i == 0 {
            s.push_str(&c.to_string());
        } else {
            s.push_str(&format!("{c:09}"));
        }
    }
    s.bytes().map(|b| b - b'0').collect()
}

/// The largest double not above the positive decimal `mag` (round toward zero), and
/// whether it is exactly equal.
fn decimal_to_double_toward_zero(mag: &Digits) -> (f64, bool) {
    let s: String = mag.d.iter().map(|&x| (x + b'0') as char).collect();
    let near: f64 = format!("{s}e{}", mag.exp).parse().unwrap_or(f64::INFINITY);
    if near.is_infinite() {
        return (f64::MAX, false);
    }
    if near == 0.0 {
        return (0.0, false);
    }
    match Digits::from_f64(near).cmp(mag) {
        CmpOrdering::Equal => (near, true),
        CmpOrdering::Less => (near, false),
        CmpOrdering::Greater => (f64::from_bits(near.to_bits() - 1), false),
    }
}

/// `_appendNumberDecimal` (V1).
fn append_decimal(buf: &mut Vec<u8>, dec: &bson::Decimal128, inv: bool) {
    let (neg, coef, exp) = match parse_decimal(dec) {
        DecKind::NaN => return put(buf, ctype::NUMERIC_NAN, inv),
        DecKind::Inf(neg) => {
            put(
                buf,
                if neg {
                    ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
                } else {
                    ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
                },
                inv,
            );
            return put_u64(buf, !0u64, if neg { !inv } else { inv });
        }
        DecKind::Finite { neg, coef, exp } => (neg, coef, exp),
    };
    if coef == 0 {
        return put(buf, ctype::NUMERIC_ZERO, inv);
    }
    let mag = Digits::from_u128(coef, exp);
    let vinv = if neg { !inv } else { inv }; // inversion for magnitude bytes
    let (bin, exact) = decimal_to_double_toward_zero(&mag);
    let signed = |x: f64| if neg { -x } else { x };
    if exact {
        return append_double(buf, signed(bin), DCM_EQUAL_TO_DOUBLE, inv);
    }
    if bin < f64::MIN_POSITIVE {
        if bin == 0.0 {
            // Smaller than the smallest subnormal: store the normalized decimal itself.
            put(
                buf,
                if neg {
                    ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE
                } else {
                    ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE
                },
                inv,
            );
            let (c, e) = mag.normalize34();
            let hi = (((e + DEC_EXP_BIAS) as u64) << 49) | (c >> 64) as u64;
            put_u64(buf, hi, vinv);
            put_u64(buf, c as u64, vinv);
            return;
        }
        // NOT mongod's bytes: mongod scales in the decimal domain here. Order-correct
        // substitute: tiny-double prefix with the continuation bit, then a 16-byte
        // continuation relative to the 34-digit round-up of `bin`.
        append_small_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
        let cont = mag.coef_at(e).saturating_sub(c);
        put_bytes(buf, &cont.to_be_bytes(), vinv);
        return;
    }
    if bin >= f64::MAX {
        // Huge: normalized decimal with the high bit forced, between DBL_MAX and Inf.
        put(
            buf,
            if neg {
                ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
            } else {
                ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
            },
            inv,
        );
        let (c, e) = mag.normalize34();
        let hi = (1u64 << 63) | (((e + DEC_EXP_BIAS) as u64) << 49) | (c >> 64) as u64;
        put_u64(buf, hi, vinv);
        put_u64(buf, c as u64, vinv);
        return;
    }
    let continuation_vs_34 = |buf: &mut Vec<u8>| {
        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
        let cont = mag.coef_at(e).saturating_sub(c);
        put_u64(buf, cont.min(u64::MAX as u128) as u64, vinv);
    };
    if bin >= TWO_POW_63 {
        append_large_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        continuation_vs_34(buf);
        return;
    }
    if bin < ldexp(1.0, -255) {
        append_small_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        continuation_vs_34(buf);
        return;
    }
    if bin >= TWO_POW_53 {
        // Integer part and fraction handled explicitly (bin lost integer precision).
        let integer_part = mag.coef_at(0) as u64; // truncation toward zero
        let has_fraction = Digits::from_u128(integer_part as u128, 0) != mag;
        append_preshifted_integer(buf, (integer_part << 1) | has_fraction as u64, neg, inv);
        if !has_fraction {
            return;
        }
        if integer_part < (1u64 << 55) {
            put(buf, DCM_CONT_LARGER_THAN_15 as u8, vinv);
        }
        let n = integer_part.to_string().len() as i32;
        let k = 34 - n;
        let total = mag.coef_at(-k);
        let cont = total - (integer_part as u128) * 10u128.pow(k as u32);
        put_u64(buf, cont as u64, vinv);
        return;
    }
    if coef < 1_000_000_000_000_000 {
        // At most 15 digits: the double rounded up to 15 digits gives it back.
        return append_double(buf, signed(bin), DCM_EQUAL_TO_15, inv);
    }
    let bin_digits = Digits::from_f64(bin);
    let from_bin = bin_digits.round_up(15);
    match mag.cmp(&from_bin) {
        CmpOrdering::Equal => append_double(buf, signed(bin), DCM_EQUAL_TO_15, inv),
        o => {
            let dcm = if o == CmpOrdering::Less {
                DCM_CONT_LESS_THAN_15
            } else {
                DCM_CONT_LARGER_THAN_15
            };
            append_double(buf, signed(bin), dcm, inv);
            continuation_vs_34(buf);
        }
    }
}

// ----------------------------------------------------------------------------
// Decoding
// ----------------------------------------------------------------------------

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

fn format_error(msg: impl Into<String>) -> Error {
    Error::new(
        codes::INVALID_BSON,
        format!("KeyString format error: {}", msg.into()),
    )
}

impl<'a> Reader<'a> {
    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    fn byte(&mut self, inv: bool) -> Result<u8> {
        let b = *self
            .b
            .get(self.pos)
            .ok_or_else(|| format_error("unexpected end of buffer"))?;
        self.pos += 1;
        Ok(if inv { !b } else { b })
    }
    fn peek(&self, inv: bool) -> Option<u8> {
        self.b.get(self.pos).map(|&b| if inv { !b } else { b })
    }
    fn bytes(&mut self, n: usize, inv: bool) -> Result<Vec<u8>> {
        if self.pos + n > self.b.len() {
            return Err(format_error("unexpected end of buffer"));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(if inv {
            s.iter().map(|b| !b).collect()
        } else {
            s.to_vec()
        })
    }
    fn u64(&mut self, inv: bool) -> Result<u64> {
        let v = self.bytes(8, inv)?;
        Ok(u64::from_be_bytes(v.try_into().unwrap()))
    }
    fn cstring(&mut self, inv: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let c = self.byte(inv)?;
            if c == 0 {
                return Ok(out);
            }
            out.push(c);
        }
    }
    /// A string with `00 FF` escapes.
    fn string_like(&mut self, inv: bool) -> Result<String> {
        let mut out = Vec::new();
        loop {
            let c = self.byte(inv)?;
            if c == 0 {
                if self.peek(inv) == Some(0xff) {
                    self.pos += 1;
                    out.push(0);
                    continue;
                }
                break;
            }
            out.push(c);
        }
        String::from_utf8(out).map_err(|_| format_error("invalid UTF-8 in string"))
    }
}

/// Decodes a sequence of ascending values written by [`KeyStringBuilder::append`],
/// stopping at the end of the buffer or at `kEnd` (a preceding kLess/kGreater
/// discriminator is skipped too).
///
/// The encoding does not carry mongod's TypeBits, so numbers come back in a canonical
/// type: integral values from the integer encodings become `Int32` when they fit, else
/// `Int64` (this includes `-2^63`); non-integral, infinite, NaN values and integral
/// values of magnitude >= 2^63 become `Double`; zero becomes `Int32(0)`; values whose
/// encoding carries a decimal continuation (i.e. that were Decimal128 not exactly
/// representable as a double) become `Decimal128` (numerically equal, exponent
/// normalized). Symbols come back as `String`.
pub fn decode_values(bytes: &[u8]) -> Result<Vec<Bson>> {
    decode_values_directed(bytes, &[])
}

/// Like [`decode_values`] with per-component direction (`descending[i]`, default ascending).
pub fn decode_values_directed(bytes: &[u8], descending: &[bool]) -> Result<Vec<Bson>> {
    let mut r = Reader { b: bytes, pos: 0 };
    let mut out = Vec::new();
    while !r.at_end() {
        let inv = descending.get(out.len()).copied().unwrap_or(false);
        let raw = r.b[r.pos];
        if raw == END || raw == LESS || raw == GREATER {
            break;
        }
        let ct = r.byte(inv)?;
        out.push(decode_value(&mut r, ct, inv, 0)?);
    }
    Ok(out)
}

fn decode_doc_body(r: &mut Reader, inv: bool, depth: u32) -> Result<Document> {
    let mut d = Document::new();
    loop {
        let generic = r.byte(inv)?;
        if generic == 0 {
            return Ok(d);
        }
        let name =
            String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("invalid field name"))?;
        let ct = r.byte(inv)?;
        let v = decode_value(r, ct, inv, depth + 1)?;
        d.insert(name, v);
    }
}

fn int_bson(neg: bool, mag: u64) -> Bson {
    let v: i128 = if neg { -(mag as i128) } else { mag as i128 };
    if let Ok(i) = i32::try_from(v) {
        Bson::Int32(i)
    } else if let Ok(i) = i64::try_from(v) {
        Bson::Int64(i)
    } else {
        Bson::Double(v as f64)
    }
}

fn dec_bson(neg: bool, d: &Digits) -> Bson {
    let (c, e) = if d.d.len() <= 34 {
        d.normalize34()
    } else {
        d.round_up(34).normalize34()
    };
    Bson::Decimal128(make_decimal(neg, c, e))
}

fn read_continuation_34(r: &mut Reader, vinv: bool, neg: bool, bin: f64) -> Result<Bson> {
    let cont = r.u64(vinv)?;
    let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
    Ok(dec_bson(neg, &Digits::from_u128(c + cont as u128, e)))
}

fn decode_value(r: &mut Reader, ct: u8, inv: bool, depth: u32) -> Result<Bson> {
    if depth > 200 {
        return Err(Error::new(
            codes::OVERFLOW,
            "KeyString encoding exceeded maximum nesting depth",
        ));
    }
    Ok(match ct {
        ctype::MIN_KEY => Bson::MinKey,
        ctype::MAX_KEY => Bson::MaxKey,
        ctype::NULLISH => Bson::Null,
        ctype::UNDEFINED => Bson::Undefined,
        ctype::BOOL_TRUE => Bson::Boolean(true),
        ctype::BOOL_FALSE => Bson::Boolean(false),
        ctype::DATE => Bson::DateTime(bson::DateTime::from_millis(
            (r.u64(inv)? ^ (1u64 << 63)) as i64,
        )),
        ctype::TIMESTAMP => {
            let v = r.u64(inv)?;
            Bson::Timestamp(bson::Timestamp {
                time: (v >> 32) as u32,
                increment: v as u32,
            })
        }
        ctype::OID => {
            let b: [u8; 12] = r.bytes(12, inv)?.try_into().unwrap();
            Bson::ObjectId(ObjectId::from_bytes(b))
        }
        ctype::STRING_LIKE => Bson::String(r.string_like(inv)?),
        ctype::CODE => Bson::JavaScriptCode(r.string_like(inv)?),
        ctype::CODE_WITH_SCOPE => {
            let code = r.string_like(inv)?;
            let scope = decode_doc_body(r, inv, depth + 2)?;
            Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
        }
        ctype::BIN_DATA => {
            let mut len = r.byte(inv)? as usize;
            if len == 0xff {
                len = u32::from_be_bytes(r.bytes(4, inv)?.try_into().unwrap()) as usize;
            }
            let subtype = BinarySubtype::from(r.byte(inv)?);
            Bson::Binary(Binary {
                subtype,
                bytes: r.bytes(len, inv)?,
            })
        }
        ctype::REGEX => {
            let pattern =
                String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("bad regex"))?;
            let options =
                String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("bad regex"))?;
            Bson::RegularExpression(bson::Regex { pattern, options })
        }
        ctype::DBREF => {
            let n = u32::from_be_bytes(r.bytes(4, inv)?.try_into().unwrap()) as usize;
            let ns =
                String::from_utf8(r.bytes(n, inv)?).map_err(|_| format_error("bad DBRef ns"))?;
            let oid: [u8; 12] = r.bytes(12, inv)?.try_into().unwrap();
            make_db_pointer(&ns, oid)?
        }
        ctype::OBJECT => Bson::Document(decode_doc_body(r, inv, depth + 1)?),
        ctype::ARRAY => {
            let mut a = Vec::new();
            loop {
                let c = r.byte(inv)?;
                if c == 0 {
                    break;
                }
                a.push(decode_value(r, c, inv, depth + 1)?);
            }
            Bson::Array(a)
        }
        ctype::NUMERIC_NAN => Bson::Double(f64::NAN),
        ctype::NUMERIC_ZERO => Bson::Int32(0),
        ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE | ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE => {
            let neg = ct == ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE;
            let vinv = inv ^ neg;
            let enc = r.u64(vinv)?;
            if enc == !0u64 {
                Bson::Double(if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                })
            } else if enc >> 63 == 1 {
                let lo = r.u64(vinv)?;
                let hi = enc & !(1u64 << 63);
                let c = (((hi & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
                let e = ((hi >> 49) & 0x3fff) as i32 - DEC_EXP_BIAS;
                Bson::Decimal128(make_decimal(neg, c, e))
            } else {
                let has_cont = enc & 1 == 1;
                let bin = f64::from_bits((enc >> 1) | (1u64 << 62));
                if has_cont {
                    read_continuation_34(r, vinv, neg, bin)?
                } else if neg && bin == TWO_POW_63 {
                    Bson::Int64(i64::MIN)
                } else {
                    Bson::Double(if neg { -bin } else { bin })
                }
            }
        }
        ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE | ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE => {
            let neg = ct == ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE;
            let vinv = inv ^ neg;
            let enc = r.u64(vinv)?;
            let sign = |x: f64| Bson::Double(if neg { -x } else { x });
            match enc >> 62 {
                0 => {
                    let lo = r.u64(vinv)?;
                    let c = (((enc & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
                    let e = ((enc >> 49) & 0x3fff) as i32 - DEC_EXP_BIAS;
                    Bson::Decimal128(make_decimal(neg, c, e))
                }
                1 | 2 => {
                    let has_cont = enc & 1 == 1;
                    let scaled = f64::from_bits((enc - (1u64 << 62)) >> 1);
                    let bin = ldexp(scaled, -256);
                    if !has_cont {
                        sign(bin)
                    } else if bin < f64::MIN_POSITIVE {
                        // our substitute encoding (16-byte continuation)
                        let cont = u128::from_be_bytes(r.bytes(16, vinv)?.try_into().unwrap());
                        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
                        dec_bson(neg, &Digits::from_u128(c + cont, e))
                    } else {
                        read_continuation_34(r, vinv, neg, bin)?
                    }
                }
                _ => {
                    let dcm = enc & 3;
                    let bin = f64::from_bits(enc >> 2);
                    decode_with_dcm(r, dcm, vinv, neg, bin)?
                }
            }
        }
        ctype::NUMERIC_NEGATIVE_8_BYTE_INT..=ctype::NUMERIC_NEGATIVE_1_BYTE_INT
        | ctype::NUMERIC_POSITIVE_1_BYTE_INT..=ctype::NUMERIC_POSITIVE_8_BYTE_INT => {
            let neg = ct <= ctype::NUMERIC_NEGATIVE_1_BYTE_INT;
            let vinv = inv ^ neg;
            let n = if neg {
                (ctype::NUMERIC_NEGATIVE_1_BYTE_INT - ct + 1) as usize
            } else {
                (ct - ctype::NUMERIC_POSITIVE_1_BYTE_INT + 1) as usize
            };
            let mut v = 0u64;
            for b in r.bytes(n, vinv)? {
                v = (v << 8) | b as u64;
            }
            let integer_part = v >> 1;
            if v & 1 == 0 {
                return Ok(int_bson(neg, integer_part));
            }
            if integer_part >= (1u64 << 53) {
                // Decimal with an explicit integer part and a fraction continuation.
                if integer_part < (1u64 << 55) {
                    r.byte(vinv)?; // DCM byte
                }
                let cont = r.u64(vinv)?;
                let k = 34 - integer_part.to_string().len() as i32;
                let c = integer_part as u128 * 10u128.pow(k as u32) + cont as u128;
                return Ok(dec_bson(neg, &Digits::from_u128(c, -k)));
            }
            // A double with a fraction: the remaining 8 - n bytes hold the fraction.
            let fb = 8 - n;
            let rest = r.bytes(fb, vinv)?;
            let mut enc = v;
            for b in rest {
                enc = (enc << 8) | b as u64;
            }
            let dcm = enc & 3;
            let scaled = (enc & !3u64) - ((integer_part + 1) << (fb * 8));
            let bin = scaled as f64 / pow256(fb as i32);
            decode_with_dcm(r, dcm, vinv, neg, bin)?
        }
        other => return Err(format_error(format!("unknown type byte {other}"))),
    })
}

fn decode_with_dcm(r: &mut Reader, dcm: u64, vinv: bool, neg: bool, bin: f64) -> Result<Bson> {
    Ok(match dcm {
        DCM_EQUAL_TO_DOUBLE => Bson::Double(if neg { -bin } else { bin }),
        DCM_EQUAL_TO_15 => dec_bson(neg, &Digits::from_f64(bin).round_up(15)),
        _ => read_continuation_34(r, vinv, neg, bin)?,
    })
}

#[cfg(test)]
mod raw_key_tests {
    use super::*;
    use bson::doc;

    /// The byte walk of the usual document keys writes what the iterator writes, and
    /// gives up (for the iterator to decide) on anything else, also on thousands of
    /// mutated documents.
    #[test]
    fn simple_walk_matches_the_iterator() {
        let docs = [
            doc! {"_id": bson::oid::ObjectId::new()},
            doc! {"_id": 7, "a": i64::MIN, "b": -0.0, "c": f64::NAN, "d": "a\u{0}é", "e": ""},
            doc! {"_id": 1.5, "sk": {"x": 1}},
            doc! {"_id": true},
        ];
        let mut fast_taken = 0;
        for d in &docs {
            let b = bson::to_vec(d).unwrap();
            for at in 0..b.len() {
                for delta in [0u8, 1, 0x7f, 0xff] {
                    if delta == 0 && at > 0 {
                        continue;
                    }
                    let mut m = b.clone();
                    m[at] = m[at].wrapping_add(delta);
                    let Ok(raw) = bson::RawDocument::from_bytes(&m) else {
                        continue;
                    };
                    let mut general = Vec::new();
                    let general_ok = append_raw_elements(&mut general, raw).is_ok();
                    let mut fast = Vec::new();
                    if simple_elements(raw.as_bytes(), |k, v| {
                        append_simple_element(&mut fast, k, v)
                    }) {
                        fast_taken += 1;
                        assert!(
                            general_ok,
                            "byte {at} + {delta}: the walk took what the iterator refuses"
                        );
                        assert_eq!(fast, general, "byte {at} + {delta}");
                    }
                }
            }
        }
        assert!(fast_taken > 50, "the walk took only {fast_taken} documents");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::cmp_bson;
    use bson::doc;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(s.parse().unwrap())
    }

    fn bin(sub: u8, bytes: Vec<u8>) -> Bson {
        Bson::Binary(Binary {
            subtype: BinarySubtype::from(sub),
            bytes,
        })
    }

    fn oid(h: &str) -> Bson {
        Bson::ObjectId(ObjectId::parse_str(h).unwrap())
    }

    fn sample_values() -> Vec<Bson> {
        let mut v = vec![
            Bson::MinKey,
            Bson::MaxKey,
            Bson::Null,
            Bson::Undefined,
            Bson::Double(f64::NAN),
            Bson::Double(f64::NEG_INFINITY),
            Bson::Double(f64::INFINITY),
            Bson::Double(-f64::MAX),
            Bson::Double(f64::MAX),
            Bson::Double(0.0),
            Bson::Double(-0.0),
            Bson::Double(f64::MIN_POSITIVE),
            Bson::Double(-f64::MIN_POSITIVE),
            Bson::Double(5e-324),
            Bson::Double(-5e-324),
            Bson::Double(1e-300),
            Bson::Double(ldexp(1.0, -255)),
            Bson::Double(ldexp(1.0, -256)),
            Bson::Double(0.1),
            Bson::Double(-0.1),
            Bson::Double(0.5),
            Bson::Double(0.9999999999999999),
            Bson::Double(1.0),
            Bson::Double(1.5),
            Bson::Double(-1.5),
            Bson::Double(2.0),
            Bson::Double(127.5),
            Bson::Double(128.0),
            Bson::Double(-128.25),
            Bson::Double(3.14159),
            Bson::Double(1e15 + 0.5),
            Bson::Double(4503599627370495.5),
            Bson::Double(TWO_POW_53),
            Bson::Double(-TWO_POW_53),
            Bson::Double(TWO_POW_63),
            Bson::Double(-TWO_POW_63),
            Bson::Double(1e19),
            Bson::Double(-1e19),
            Bson::Double(1e300),
            Bson::Int32(0),
            Bson::Int32(1),
            Bson::Int32(-1),
            Bson::Int32(127),
            Bson::Int32(128),
            Bson::Int32(255),
            Bson::Int32(256),
            Bson::Int32(i32::MAX),
            Bson::Int32(i32::MIN),
            Bson::Int64(0),
            Bson::Int64(1),
            Bson::Int64(i64::MAX),
            Bson::Int64(i64::MIN),
            Bson::Int64(i64::MIN + 1),
            Bson::Int64(9_007_199_254_740_993),
            Bson::Int64(-9_007_199_254_740_993),
            Bson::Int64(9_007_199_254_740_992),
            Bson::Int64(1 << 62),
            Bson::Int64((1 << 55) + 3),
            dec("0"),
            dec("-0"),
            dec("1"),
            dec("1.0"),
            dec("0.1"),
            dec("-0.1"),
            dec("2.5"),
            dec("3.14159"),
            dec("1.23456789012345678901234567890"),
            dec("-1.23456789012345678901234567890"),
            dec("1.2345678901234567"),
            dec("9007199254740993"),
            dec("9007199254740993.5"),
            dec("-9007199254740993.25"),
            dec("36028797018963969.125"),
            dec("9223372036854775807.5"),
            dec("9223372036854775809"),
            dec("-9223372036854775809"),
            dec("1E+400"),
            dec("-1E+400"),
            dec("1.797693134862315708145274237317044E+308"),
            dec("1E-400"),
            dec("-1E-400"),
            dec("1.000000000000000000000000000000001E-300"),
            dec("1.5E-310"),
            dec("-1.5E-310"),
            dec("1E-80"),
            dec("Infinity"),
            dec("-Infinity"),
            dec("NaN"),
            Bson::String(String::new()),
            Bson::String("a".into()),
            Bson::String("a\0".into()),
            Bson::String("a\0b".into()),
            Bson::String("ab".into()),
            Bson::String("b".into()),
            Bson::String("\u{ff}".into()),
            Bson::String("日本語".into()),
            Bson::String("\0".into()),
            Bson::Symbol("ab".into()),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"a": 1}),
            Bson::Document(doc! {"a": 1.0, "b": 2}),
            Bson::Document(doc! {"a": "x"}),
            Bson::Document(doc! {"b": 0}),
            Bson::Document(doc! {"a": {"b": [1, 2]}}),
            Bson::Document(doc! {"a": null}),
            Bson::Document(doc! {"ab": 1}),
            Bson::Array(vec![]),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]),
            Bson::Array(vec![Bson::Int32(2)]),
            Bson::Array(vec![Bson::String("a".into())]),
            Bson::Array(vec![Bson::String("a\0".into())]),
            Bson::Array(vec![Bson::Null]),
            Bson::Array(vec![Bson::Array(vec![])]),
            bin(0, vec![]),
            bin(0, vec![1]),
            bin(4, vec![1]),
            bin(0, vec![2]),
            bin(0, vec![0xff; 300]),
            bin(0, vec![0; 254]),
            bin(0, vec![0; 255]),
            oid("000000000000000000000000"),
            oid("63a81537c7c3f623fd5bc92e"),
            oid("ffffffffffffffffffffffff"),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
            Bson::DateTime(bson::DateTime::from_millis(-1)),
            Bson::DateTime(bson::DateTime::from_millis(0)),
            Bson::DateTime(bson::DateTime::from_millis(1_700_000_000_000)),
            Bson::Timestamp(bson::Timestamp {
                time: 0,
                increment: 0,
            }),
            Bson::Timestamp(bson::Timestamp {
                time: 1,
                increment: 0,
            }),
            Bson::Timestamp(bson::Timestamp {
                time: 0,
                increment: u32::MAX,
            }),
            Bson::Timestamp(bson::Timestamp {
                time: u32::MAX,
                increment: u32::MAX,
            }),
            Bson::RegularExpression(bson::Regex {
                pattern: "a".into(),
                options: "".into(),
            }),
            Bson::RegularExpression(bson::Regex {
                pattern: "a".into(),
                options: "i".into(),
            }),
            Bson::RegularExpression(bson::Regex {
                pattern: "ab".into(),
                options: "".into(),
            }),
            Bson::JavaScriptCode("x".into()),
            Bson::JavaScriptCode("y".into()),
            Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                code: "x".into(),
                scope: doc! {"a": 1},
            }),
        ];
        // a sweep of numbers of every width around interesting magnitudes
        for e in [-3i32, -1, 0, 1, 7, 8, 15, 16, 31, 52, 53, 54, 55, 56, 62] {
            let p = ldexp(1.0, e);
            v.push(Bson::Double(p));
            v.push(Bson::Double(-p * 1.25));
            if e >= 0 {
                v.push(Bson::Int64((1i64 << e) - 1));
                v.push(Bson::Int64(-(1i64 << e) + 1));
            }
        }
        v
    }

    fn sign(o: CmpOrdering) -> i32 {
        o as i32
    }

    /// Exact numeric view (compare.rs compares decimals through f64, which is lossy).
    fn exact_num(v: &Bson) -> Option<(i32, bool, Digits)> {
        // (class: 0 NaN, 1 -inf, 2 finite, 3 +inf), negative, magnitude
        let fin = |neg: bool, d: Digits| Some((2, neg && !d.is_zero(), d));
        match v {
            Bson::Int32(i) => fin(*i < 0, Digits::from_u128(i.unsigned_abs() as u128, 0)),
            Bson::Int64(i) => fin(*i < 0, Digits::from_u128(i.unsigned_abs() as u128, 0)),
            Bson::Double(d) if d.is_nan() => Some((0, false, Digits::new(vec![], 0))),
            Bson::Double(d) if d.is_infinite() => {
                Some((if *d > 0.0 { 3 } else { 1 }, false, Digits::new(vec![], 0)))
            }
            Bson::Double(d) if *d == 0.0 => fin(false, Digits::new(vec![], 0)),
            Bson::Double(d) => fin(*d < 0.0, Digits::from_f64(d.abs())),
            Bson::Decimal128(x) => match parse_decimal(x) {
                DecKind::NaN => Some((0, false, Digits::new(vec![], 0))),
                DecKind::Inf(n) => Some((if n { 1 } else { 3 }, false, Digits::new(vec![], 0))),
                DecKind::Finite { neg, coef, exp } => fin(neg, Digits::from_u128(coef, exp)),
            },
            _ => None,
        }
    }

    fn ref_cmp(a: &Bson, b: &Bson) -> CmpOrdering {
        match (exact_num(a), exact_num(b)) {
            (Some((ca, na, da)), Some((cb, nb, db))) => ca.cmp(&cb).then_with(|| {
                if ca != 2 {
                    return CmpOrdering::Equal;
                }
                match (na, nb) {
                    (false, true) => CmpOrdering::Greater,
                    (true, false) => CmpOrdering::Less,
                    (false, false) => da.cmp(&db),
                    (true, true) => db.cmp(&da),
                }
            }),
            _ => cmp_bson(a, b),
        }
    }

    fn key(v: &Bson, desc: bool) -> Vec<u8> {
        let mut b = KeyStringBuilder::new();
        b.append(v, desc);
        b.append_discriminator_end();
        b.into_bytes()
    }

    /// `ref_cmp` over all pairs, computed once (the exact decimal expansion is slow in debug builds).
    fn ref_matrix(vals: &[Bson]) -> Vec<Vec<CmpOrdering>> {
        vals.iter()
            .map(|a| vals.iter().map(|b| ref_cmp(a, b)).collect())
            .collect()
    }

    #[test]
    fn pairwise_order_matches_cmp_bson() {
        let vals = sample_values();
        let m = ref_matrix(&vals);
        let asc: Vec<Vec<u8>> = vals.iter().map(|v| key(v, false)).collect();
        let desc: Vec<Vec<u8>> = vals.iter().map(|v| key(v, true)).collect();
        let raw: Vec<Vec<u8>> = vals.iter().map(encode_value).collect();
        for (i, a) in vals.iter().enumerate() {
            for (j, b) in vals.iter().enumerate() {
                let want = m[i][j];
                // compare.rs agrees with the exact order except for decimals beyond f64 precision
                if !matches!(a, Bson::Decimal128(_)) && !matches!(b, Bson::Decimal128(_)) {
                    assert_eq!(cmp_bson(a, b), want, "{a:?} vs {b:?}");
                }
                assert_eq!(
                    sign(asc[i].cmp(&asc[j])),
                    sign(want),
                    "asc {a:?} vs {b:?}: {} vs {}",
                    to_hex_upper(&asc[i]),
                    to_hex_upper(&asc[j])
                );
                assert_eq!(
                    sign(desc[i].cmp(&desc[j])),
                    sign(want.reverse()),
                    "desc {a:?} vs {b:?}"
                );
                // Without kEnd, ascending order still holds (strings: "a" < "a\0..." by prefix).
                assert_eq!(sign(raw[i].cmp(&raw[j])), sign(want), "raw {a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn compound_tuples_order_lexicographically() {
        let vals: Vec<Bson> = sample_values().into_iter().step_by(3).collect();
        let m = ref_matrix(&vals);
        let n = vals.len();
        let tuples: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (0..n).step_by(2).map(move |b| (a, b)))
            .collect();
        for (d1, d2) in [(false, false), (false, true), (true, false), (true, true)] {
            let encs: Vec<Vec<u8>> = tuples
                .iter()
                .map(|&(a, b)| {
                    let mut k = KeyStringBuilder::new();
                    k.append(&vals[a], d1);
                    k.append(&vals[b], d2);
                    k.append_discriminator_end();
                    k.into_bytes()
                })
                .collect();
            for (i, x) in tuples.iter().enumerate() {
                for (j, y) in tuples.iter().enumerate() {
                    let c1 = if d1 {
                        m[x.0][y.0].reverse()
                    } else {
                        m[x.0][y.0]
                    };
                    let c2 = if d2 {
                        m[x.1][y.1].reverse()
                    } else {
                        m[x.1][y.1]
                    };
                    assert_eq!(
                        sign(encs[i].cmp(&encs[j])),
                        sign(c1.then(c2)),
                        "{:?} vs {:?} dirs {d1} {d2}",
                        (&vals[x.0], &vals[x.1]),
                        (&vals[y.0], &vals[y.1])
                    );
                }
            }
        }
    }

    #[test]
    fn numerically_equal_values_encode_equal() {
        let groups = vec![
            vec![
                Bson::Int32(1),
                Bson::Int64(1),
                Bson::Double(1.0),
                dec("1"),
                dec("1.000"),
            ],
            vec![
                Bson::Int32(0),
                Bson::Int64(0),
                Bson::Double(0.0),
                Bson::Double(-0.0),
                dec("0"),
                dec("-0E+5"),
            ],
            vec![
                Bson::Int32(-300),
                Bson::Int64(-300),
                Bson::Double(-300.0),
                dec("-3E2"),
            ],
            vec![Bson::Double(2.5), dec("2.5"), dec("2.50")],
            vec![
                Bson::Int64(i64::MIN),
                Bson::Double(-TWO_POW_63),
                dec("-9223372036854775808"),
            ],
            vec![Bson::Double(f64::NAN), dec("NaN")],
            vec![Bson::Double(f64::INFINITY), dec("Infinity")],
            vec![Bson::String("ab".into()), Bson::Symbol("ab".into())],
        ];
        for g in groups {
            let e0 = encode_value(&g[0]);
            for v in &g[1..] {
                assert_eq!(encode_value(v), e0, "{:?} vs {:?}", g[0], v);
            }
        }
    }

    #[test]
    fn known_mongod_bytes() {
        let hex = |v: Bson| to_hex_upper(&encode_value(&v));
        assert_eq!(hex(Bson::MinKey), "0A");
        assert_eq!(hex(Bson::MaxKey), "F0");
        assert_eq!(hex(Bson::Null), "14");
        assert_eq!(hex(Bson::Boolean(false)), "6E");
        assert_eq!(hex(Bson::Boolean(true)), "6F");
        assert_eq!(hex(Bson::Int32(0)), "29");
        assert_eq!(hex(Bson::Int32(1)), "2B02");
        assert_eq!(hex(Bson::Int32(2)), "2B04");
        assert_eq!(hex(Bson::Int32(128)), "2C0100");
        assert_eq!(hex(Bson::Int32(-1)), "27FD");
        assert_eq!(hex(Bson::String("ab".into())), "3C616200");
        assert_eq!(hex(Bson::String("a\0b".into())), "3C6100FF6200");
        assert_eq!(
            hex(Bson::Timestamp(bson::Timestamp {
                time: 1,
                increment: 2
            })),
            "820000000100000002"
        );
        assert_eq!(
            hex(Bson::DateTime(bson::DateTime::from_millis(0))),
            "788000000000000000"
        );
        assert_eq!(hex(bin(4, vec![0xAB])), "5A0104AB");
        assert_eq!(hex(Bson::Array(vec![Bson::Int32(1)])), "502B0200");
        assert_eq!(hex(Bson::Document(doc! {"a": 1})), "461E61002B0200");
        // descending = bitwise NOT
        let mut b = KeyStringBuilder::new();
        b.append(&Bson::Int32(1), true);
        assert_eq!(to_hex_upper(b.as_bytes()), "D4FD");
        // 1.5 as a double: 1-byte int ctype, integer part 2*1+1, one fraction bit
        assert_eq!(hex(Bson::Double(1.5)), "2B0380000000000000");
        // 0.5: small magnitude, (bits << 2)
        assert_eq!(
            hex(Bson::Double(0.5)),
            format!("2A{:016X}", 0.5f64.to_bits() << 2)
        );
    }

    /// Real resume tokens printed by mongod (MongoDB community forum and a public
    /// tutorial), together with the decoded event fields shown next to them.
    #[test]
    fn real_resume_tokens_roundtrip() {
        // insert event, Timestamp(1671959863, 1), version 1, _id ObjectId("63a81537c7c3f623fd5bc92e")
        let t1 = "8263A81537000000012B022C0100296E5A1004199BDC9429644781918CE46FDC2C0DFF46645F6964006463A81537C7C3F623FD5BC92E0004";
        let uuid1 = from_hex("199BDC9429644781918CE46FDC2C0DFF").unwrap();
        let vals1 = vec![
            Bson::Timestamp(bson::Timestamp {
                time: 1671959863,
                increment: 1,
            }),
            Bson::Int32(1),
            Bson::Int32(128),
            Bson::Int32(0),
            Bson::Boolean(false),
            bin(4, uuid1),
            Bson::Document(doc! {"_id": ObjectId::parse_str("63a81537c7c3f623fd5bc92e").unwrap()}),
        ];
        // insert event, Timestamp({t: 1741186978, i: 25}), version 2
        let t2 = "8267C867A2000000192B042C0100296E5A1004D3284E04D8914467A2160201812E4C4C463C6F7065726174696F6E54797065003C696E736572740046646F63756D656E744B65790046645F6964006467C867A2FB1CBCD579F4E4DE000004";
        let uuid2 = from_hex("D3284E04D8914467A2160201812E4C4C").unwrap();
        let vals2 = vec![
            Bson::Timestamp(bson::Timestamp {
                time: 1741186978,
                increment: 25,
            }),
            Bson::Int32(2),
            Bson::Int32(128),
            Bson::Int32(0),
            Bson::Boolean(false),
            bin(4, uuid2),
            Bson::Document(doc! {
                "operationType": "insert",
                "documentKey": {"_id": ObjectId::parse_str("67c867a2fb1cbcd579f4e4de").unwrap()},
            }),
        ];
        // high-water-mark token
        let t3 = "8267C867A3000000012B0429296E1404";
        let vals3 = vec![
            Bson::Timestamp(bson::Timestamp {
                time: 0x67C867A3,
                increment: 1,
            }),
            Bson::Int32(2),
            Bson::Int32(0),
            Bson::Int32(0),
            Bson::Boolean(false),
            Bson::Null,
        ];
        for (hex, vals) in [(t1, vals1), (t2, vals2), (t3, vals3)] {
            let mut b = KeyStringBuilder::new();
            for v in &vals {
                b.append(v, false);
            }
            b.append_discriminator_end();
            assert_eq!(to_hex_upper(b.as_bytes()), hex);
            assert!(hex.starts_with("82"));
            let decoded = decode_values(&from_hex(hex).unwrap()).unwrap();
            assert_eq!(decoded, vals);
        }
    }

    #[test]
    fn decode_roundtrip() {
        for v in sample_values() {
            for desc in [false, true] {
                let enc = key(&v, desc);
                let d = decode_values_directed(&enc, &[desc]).unwrap();
                assert_eq!(d.len(), 1, "{v:?}");
                assert_eq!(
                    ref_cmp(&d[0], &v),
                    CmpOrdering::Equal,
                    "{v:?} decoded as {:?}",
                    d[0]
                );
                assert_eq!(key(&d[0], desc), enc, "{v:?} re-encoded from {:?}", d[0]);
                // types that survive exactly
                match &v {
                    Bson::Int32(_)
                    | Bson::String(_)
                    | Bson::Binary(_)
                    | Bson::ObjectId(_)
                    | Bson::Timestamp(_)
                    | Bson::DateTime(_)
                    | Bson::Boolean(_)
                    | Bson::RegularExpression(_)
                    | Bson::JavaScriptCode(_)
                    | Bson::Null
                    | Bson::MinKey
                    | Bson::MaxKey => assert_eq!(d[0], v),
                    _ => {}
                }
            }
        }
        let d = decode_values(&encode_values(
            &[Bson::Int64(5), Bson::Double(2.5), Bson::Int64(1 << 40)],
            &[],
        ))
        .unwrap();
        assert_eq!(
            d,
            vec![Bson::Int32(5), Bson::Double(2.5), Bson::Int64(1 << 40)]
        );
        // decimals not representable as doubles come back as (normalized) decimals
        let d = decode_values(&encode_value(&dec("1.23456789012345678901234567890"))).unwrap();
        assert_eq!(
            cmp_bson(&d[0], &dec("1.23456789012345678901234567890")),
            CmpOrdering::Equal
        );
        assert!(matches!(d[0], Bson::Decimal128(_)));
    }

    #[test]
    fn seek_bounds_select_exact_values() {
        let strs = ["a", "a\0", "a\0b", "ab", ""];
        for desc in [false, true] {
            for s in strs {
                let enc = encode_values(&[Bson::String(s.into())], &[desc]);
                let (lo, hi) = seek_bounds(&enc);
                for t in strs {
                    for id in [
                        Bson::Int32(1),
                        Bson::MinKey,
                        Bson::MaxKey,
                        Bson::String("z".into()),
                    ] {
                        let mut k = encode_values(&[Bson::String(t.into())], &[desc]);
                        k.extend(encode_value(&id));
                        let inside = k >= lo && k < hi;
                        assert_eq!(inside, s == t, "{s:?} {t:?} desc={desc}");
                    }
                }
            }
        }
    }

    #[test]
    fn hex_roundtrip() {
        assert_eq!(to_hex_upper(&[0x82, 0x0a, 0xff]), "820AFF");
        assert_eq!(from_hex("820aFF").unwrap(), vec![0x82, 0x0a, 0xff]);
        assert!(from_hex("8").is_err());
        assert!(from_hex("zz").is_err());
    }

    #[test]
    fn collated_keys_order_and_equate_under_the_collation() {
        let c = crate::collation::Collator::parse(&bson::doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        let enc = |v: Bson| {
            let mut k = KeyStringBuilder::new();
            k.append_collated(&v, false, Some(&c));
            k.into_bytes()
        };
        assert_eq!(
            enc(Bson::String("PING".into())),
            enc(Bson::String("ping".into()))
        );
        assert!(enc(Bson::String("a".into())) < enc(Bson::String("B".into())));
        assert_eq!(
            enc(bson::bson!({"x": ["A", 1]})),
            enc(bson::bson!({"x": ["a", 1]}))
        );
        // Non-strings encode as without a collation; types keep their order.
        assert_eq!(enc(Bson::Int32(5)), encode_value(&Bson::Int32(5)));
        assert!(enc(Bson::Int32(5)) < enc(Bson::String(String::new())));
        assert!(enc(Bson::String("zzz".into())) < enc(bson::bson!({})));
    }
}

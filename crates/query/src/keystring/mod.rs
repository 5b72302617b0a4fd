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
//!
//! The files: the encoders of values (`encode`) and of numbers (`number`, with exact
//! Decimal128 arithmetic in `decimal`), and the decoder (`decode`).

mod decimal;
mod decode;
mod encode;
mod number;
#[cfg(test)]
mod tests;

use crate::error::{codes, Error, Result};
use bson::{Bson, Document};
use encode::{
    append_binary, append_doc_body, append_raw_elements, append_simple_element, append_string_like,
    append_value, append_value_collated, simple_elements,
};

pub use decode::{decode_values, decode_values_directed};

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
    // Room for the usual `_id` (an ObjectId: 13 bytes), a number or a short string:
    // grown from empty it was reallocated twice (200 instructions of a bus insert).
    const USUAL_BYTES: usize = 24;
    let mut b = Vec::with_capacity(USUAL_BYTES);
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
    if !b.len().is_multiple_of(2) {
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
// Writing bytes, inverted for descending components
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

fn format_error(msg: impl Into<String>) -> Error {
    Error::new(
        codes::INVALID_BSON,
        format!("KeyString format error: {}", msg.into()),
    )
}

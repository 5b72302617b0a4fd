//! Bounds-checked primitives shared by the message codecs.
//!
//! Every read goes through [`ByteReader`], which never indexes past its slice, so hostile
//! input can only ever produce a [`WireError::Malformed`], not a panic.

use bson::RawDocumentBuf;
use bson::{raw::RawBsonRef, Document, RawDocument};

use crate::error::{malformed, WireError};
use crate::reuse::BodyCache;

/// Deepest BSON nesting accepted in a message (top-level document = depth 1).
///
/// The `bson` crate converts documents recursively with no depth limit, so a small message
/// of deeply nested empty documents could overflow the stack and abort the whole server.
/// mongod's default `maxBSONDepth` is also 200.
pub const MAX_BSON_DEPTH: usize = 200;

/// A forward-only cursor over untrusted bytes.
pub(crate) struct ByteReader<'a> {
    buf: &'a [u8],
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Consumes exactly `n` bytes; `what` names the field for the error message.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return Err(malformed(format!(
                "truncated {what}: need {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn take_array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.take_array::<1>(what)?[0])
    }

    pub(crate) fn i32(&mut self, what: &str) -> Result<i32, WireError> {
        self.take_array(what).map(i32::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        self.take_array(what).map(u32::from_le_bytes)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Reads a NUL-terminated UTF-8 string (the terminator is consumed, not returned).
    pub(crate) fn cstring(&mut self, what: &str) -> Result<&'a str, WireError> {
        let bytes = self.cstring_bytes(what)?;
        std::str::from_utf8(bytes).map_err(|_| malformed(format!("{what}: invalid UTF-8")))
    }

    /// [`ByteReader::cstring`]'s bytes, not checked as UTF-8.
    pub(crate) fn cstring_bytes(&mut self, what: &str) -> Result<&'a [u8], WireError> {
        let nul = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| malformed(format!("{what}: missing NUL terminator")))?;
        let bytes = self.take(nul + 1, what)?;
        Ok(&bytes[..nul])
    }

    /// The bytes of the next BSON document, whose declared length must fit inside the
    /// remaining bytes.
    pub(crate) fn document_bytes(&mut self, what: &str) -> Result<&'a [u8], WireError> {
        let declared = match self.buf.get(..4) {
            Some(b) => i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            None => return Err(malformed(format!("truncated {what}: no BSON length"))),
        };
        if declared < 5 {
            return Err(malformed(format!(
                "{what}: BSON length {declared} is below the 5-byte minimum"
            )));
        }
        let len = declared as usize;
        if len > self.buf.len() {
            return Err(malformed(format!(
                "{what}: BSON length {len} exceeds the {} bytes left",
                self.buf.len()
            )));
        }
        self.take(len, what)
    }

    /// Reads one BSON document kept as raw bytes, validated (every element, UTF-8, depth)
    /// but never converted: bulk payloads go to storage without being re-encoded.
    pub(crate) fn raw_document(&mut self, what: &str) -> Result<RawDocumentBuf, WireError> {
        let bytes = self.document_bytes(what)?;
        // The common types checked by the body walk's own rules first; anything else,
        // and every error's wording, the crate's.
        if crate::to_document::walk_valid(bytes, MAX_BSON_DEPTH) {
            return RawDocumentBuf::from_bytes(bytes.to_vec())
                .map_err(|e| malformed(format!("{what}: invalid BSON: {e}")));
        }
        Ok(validate_raw(bytes, what)?.to_raw_document_buf())
    }

    /// Reads one BSON document, which must fit inside the remaining bytes.
    pub(crate) fn document(&mut self, what: &str) -> Result<Document, WireError> {
        let bytes = self.document_bytes(what)?;
        parse_document(bytes, what)
    }

    /// [`ByteReader::document`] for a command body whose element `kept` may stay raw.
    pub(crate) fn body_keeping(
        &mut self,
        what: &str,
        kept: &str,
        bodies: Option<&mut BodyCache>,
    ) -> Result<(Document, Option<crate::op_msg::KeptField>), WireError> {
        let bytes = self.document_bytes(what)?;
        parse_body(bytes, what, kept, bodies)
    }
}

/// Checks a slice holding exactly one BSON document: trailing NUL, every element, depth.
fn validate_raw<'b>(bytes: &'b [u8], what: &str) -> Result<&'b RawDocument, WireError> {
    if bytes.last() != Some(&0) {
        return Err(malformed(format!(
            "{what}: BSON document lacks trailing NUL"
        )));
    }
    // Bound the depth on the raw form before building any owned tree: conversion, drop and
    // every later consumer of the document recurse once per level.
    let raw = RawDocument::from_bytes(bytes)
        .map_err(|e| malformed(format!("{what}: invalid BSON: {e}")))?;
    check_depth(raw, 1).map_err(|e| malformed(format!("{what}: {e}")))?;
    Ok(raw)
}

/// The smallest document nested deeper than [`MAX_BSON_DEPTH`]: an empty document (5
/// bytes) inside `MAX_BSON_DEPTH` levels of the smallest wrapper, an element with an
/// empty key holding it (type byte + key's NUL + length + trailing NUL = 7 bytes).
/// Anything shorter cannot be too deep.
const SMALLEST_TOO_DEEP: usize = 5 + 7 * MAX_BSON_DEPTH;

/// Parses a slice that must hold exactly one BSON document.
fn parse_document(bytes: &[u8], what: &str) -> Result<Document, WireError> {
    convert(bounded_raw(bytes, what)?, what)
}

/// [`parse_document`] for a command body with its element `kept` left raw when the
/// body walk can (see `to_document::walk_body_keeping`).
fn parse_body(
    bytes: &[u8],
    what: &str,
    kept: &str,
    bodies: Option<&mut BodyCache>,
) -> Result<(Document, Option<crate::op_msg::KeptField>), WireError> {
    let raw = bounded_raw(bytes, what)?;
    let found = match bodies {
        Some(bodies) => bodies.body_keeping(raw.as_bytes(), kept),
        None => crate::to_document::walk_body_keeping(raw.as_bytes(), kept),
    };
    if let Some(found) = found {
        return Ok(found);
    }
    Ok((convert(raw, what)?, None))
}

/// The document `bytes` holds, its depth bounded before anything converts it.
fn bounded_raw<'b>(bytes: &'b [u8], what: &str) -> Result<&'b RawDocument, WireError> {
    if bytes.len() >= SMALLEST_TOO_DEEP {
        return validate_raw(bytes, what);
    }
    // Most command bodies: the conversion validates every element itself, and the
    // size alone bounds the depth, so the separate walk of `validate_raw` is skipped.
    if bytes.last() != Some(&0) {
        return Err(malformed(format!(
            "{what}: BSON document lacks trailing NUL"
        )));
    }
    RawDocument::from_bytes(bytes).map_err(|e| malformed(format!("{what}: invalid BSON: {e}")))
}

/// Converting from the raw form validates as fully as `Document::from_reader` (lengths,
/// UTF-8, element types) but uses several times less stack per level than its serde path,
/// which overflows a 2 MiB thread stack in debug builds well before MAX_BSON_DEPTH.
fn convert(raw: &RawDocument, what: &str) -> Result<Document, WireError> {
    crate::to_document::to_document(raw)
        .map_err(|e| malformed(format!("{what}: invalid BSON: {e}")))
}

fn check_depth(doc: &RawDocument, depth: usize) -> Result<(), String> {
    if depth > MAX_BSON_DEPTH {
        return Err(format!("BSON nested deeper than {MAX_BSON_DEPTH} levels"));
    }
    for elem in doc {
        let (_, value) = elem.map_err(|e| format!("invalid BSON: {e}"))?;
        check_value(value, depth)?;
    }
    Ok(())
}

fn check_value(value: RawBsonRef<'_>, depth: usize) -> Result<(), String> {
    match value {
        RawBsonRef::Document(d) => check_depth(d, depth + 1),
        RawBsonRef::JavaScriptCodeWithScope(c) => check_depth(c.scope, depth + 1),
        RawBsonRef::Array(a) => {
            if depth + 1 > MAX_BSON_DEPTH {
                return Err(format!("BSON nested deeper than {MAX_BSON_DEPTH} levels"));
            }
            for item in a {
                check_value(item.map_err(|e| format!("invalid BSON: {e}"))?, depth + 1)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Appends `doc` as BSON.
///
/// Serialization fails only for documents no client could have sent, e.g. a key containing
/// NUL built by server code from a user string. Panicking would take down every connection,
/// so an error reply (in the shape all command replies share) is sent in its place.
pub(crate) fn write_document(out: &mut Vec<u8>, doc: &Document) {
    // `to_writer` serializes fully before writing, so on failure nothing was appended.
    if let Err(e) = doc.to_writer(&mut *out) {
        let fallback = bson::doc! {
            "ok": 0.0,
            "errmsg": format!("reply could not be encoded as BSON: {e}"),
            "code": 1,
            "codeName": "InternalError",
        };
        if fallback.to_writer(&mut *out).is_err() {
            out.extend_from_slice(&[5, 0, 0, 0, 0]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn bytes(doc: &Document) -> Vec<u8> {
        let mut v = Vec::new();
        doc.to_writer(&mut v).unwrap();
        v
    }

    #[test]
    fn document_must_fit_exactly() {
        let b = bytes(&doc! { "a": 1 });
        assert_eq!(ByteReader::new(&b).document("d").unwrap(), doc! { "a": 1 });
        assert!(ByteReader::new(&b[..b.len() - 1]).document("d").is_err());

        let mut short = b.clone();
        short[0] = 4; // below the minimum
        assert!(ByteReader::new(&short).document("d").is_err());

        let mut no_nul = b.clone();
        *no_nul.last_mut().unwrap() = 1;
        assert!(ByteReader::new(&no_nul).document("d").is_err());
    }

    #[test]
    fn deep_nesting_is_rejected_not_overflowed() {
        // Build nested `{"": {"": ...}}` by hand: far deeper than any stack could recurse.
        let levels = 100_000usize;
        let mut v = Vec::with_capacity(levels * 7 + 5);
        for k in (1..=levels).rev() {
            v.extend_from_slice(&((5 + 7 * k) as i32).to_le_bytes());
            v.extend_from_slice(&[0x03, 0]);
        }
        v.extend_from_slice(&[5, 0, 0, 0, 0]);
        v.resize(v.len() + levels, 0);
        let err = ByteReader::new(&v).document("deep").unwrap_err();
        assert!(err.to_string().contains("nested deeper"), "{err}");

        // Arrays count towards depth as well.
        // Each wrapper adds two levels (document + array): 202 in total.
        let mut d = doc! {};
        for _ in 0..MAX_BSON_DEPTH / 2 + 1 {
            d = doc! { "a": [d] };
        }
        assert!(ByteReader::new(&bytes(&d)).document("arr").is_err());
    }

    #[test]
    fn smallest_too_deep_document_is_that_size_and_refused() {
        // Empty keys make the smallest wrapper per level; one level more than allowed.
        let mut d = doc! {};
        for _ in 0..MAX_BSON_DEPTH {
            d = doc! { "": d };
        }
        let b = bytes(&d);
        assert_eq!(b.len(), SMALLEST_TOO_DEEP);
        assert!(ByteReader::new(&b).document("deep").is_err());
        // One level less passes, and is smaller: the size shortcut never admits too deep.
        let mut d = doc! {};
        for _ in 0..MAX_BSON_DEPTH - 1 {
            d = doc! { "": d };
        }
        assert!(bytes(&d).len() < SMALLEST_TOO_DEEP);
        assert!(ByteReader::new(&bytes(&d)).document("ok").is_ok());
    }

    #[test]
    fn small_documents_are_still_fully_validated() {
        // Invalid UTF-8 in a string value, in a body small enough for the shortcut.
        let mut b = bytes(&doc! { "s": "ab" });
        let at = b.len() - 3;
        b[at] = 0xff;
        assert!(ByteReader::new(&b).document("utf8").is_err());
        // A nested length that overruns its parent.
        let mut b = bytes(&doc! { "d": { "x": 1 } });
        b[8] = 0x7f;
        assert!(ByteReader::new(&b).document("len").is_err());
    }

    #[test]
    fn depth_limit_allows_reasonable_nesting() {
        let mut d = doc! { "x": 1 };
        for _ in 0..(MAX_BSON_DEPTH - 1) {
            d = doc! { "a": d };
        }
        assert!(ByteReader::new(&bytes(&d)).document("ok").is_ok());
    }

    #[test]
    fn cstring_requires_terminator_and_utf8() {
        let mut r = ByteReader::new(b"ab\0cd");
        assert_eq!(r.cstring("s").unwrap(), "ab");
        assert_eq!(r.remaining(), 2);
        assert!(r.cstring("s").is_err());
        assert!(ByteReader::new(b"\xff\0").cstring("s").is_err());
    }

    #[test]
    fn unserializable_document_becomes_error_reply() {
        let mut out = Vec::new();
        write_document(&mut out, &doc! { "bad\0key": 1 });
        let d = ByteReader::new(&out).document("fallback").unwrap();
        assert_eq!(d.get_f64("ok").unwrap(), 0.0);
        assert_eq!(d.get_str("codeName").unwrap(), "InternalError");
    }
}

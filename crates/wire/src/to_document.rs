//! Raw BSON to an owned `Document`, for command bodies.
//!
//! The `bson` crate's own conversion (`Document::try_from(&RawDocument)`) goes through
//! an owned `RawBson` per value: every nested document is copied into a buffer of its
//! own before being converted, and every element's error is wrapped with its key. A
//! driver's command body nests three documents (`lsid`, `$clusterTime` and its
//! `signature`): converting it that way was 14,000 instructions of every request on the
//! message-bus benchmark, the largest part of decoding one. Three tiers, each falling
//! back to the next:
//! 1. [`walk_document`] reads the bytes itself, for the element types command bodies
//!    hold (numbers, strings, documents, arrays, binary of the common subtypes, ids,
//!    booleans, dates, null, timestamps, decimals); any other type or anything amiss
//!    sends the whole document to the next tier. The crate's element iterator checks
//!    and wraps every element (about 490 instructions each on a command body,
//!    callgrind 2026-11-28); this walk's bounds checks are a few comparisons. On the
//!    bus benchmark under callgrind: 14,600 → 11,500 instructions per insert's body
//!    (what stays is building the `Document`: its allocations and key hashes). It reads
//!    with the codec's `ByteReader`, as every other decoder here: offsets checked by
//!    hand instead saved another 900 (10,600), not worth a second set of bounds checks.
//! 2. [`convert_document`] walks the crate's raw elements and builds each value
//!    directly (2026-11-26: 2.22 → 1.75 µs per conversion against the crate's; the
//!    rare types through the crate's own conversion of that value).
//! 3. Any error is reported by the crate's conversion itself, so the result and the
//!    errors are exactly the crate's.
//!
//! The same walk without building values ([`walk_valid`]) checks an insert's raw
//! documents before they go to storage (the crate's element iterator for the rest).

use crate::codec::{ByteReader, MAX_BSON_DEPTH};
use crate::error::{malformed, WireError};
use crate::op_msg::KeptField;
use bson::raw::RawBsonRef;
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Document, RawArray, RawDocument};

/// The document `raw` holds, as `Document::try_from(raw)` would return it.
pub fn to_document(raw: &RawDocument) -> Result<Document, bson::raw::Error> {
    if let Some(doc) = walk_document(raw.as_bytes()) {
        return Ok(doc);
    }
    match convert_document(raw) {
        Ok(doc) => Ok(doc),
        // The crate's conversion words the error (with the key where it failed).
        Err(_) => Document::try_from(raw),
    }
}

/// `bytes`, exactly one document, as the crate would convert it; None for a type
/// this walk leaves to the crate or for anything the crate might read otherwise.
fn walk_document(bytes: &[u8]) -> Option<Document> {
    let mut doc = Document::new();
    walk_elements(bytes, |key, value| {
        doc.insert(key.to_owned(), value);
    })
    .ok()?;
    Some(doc)
}

/// As [`walk_document`] for a command body whose element `kept` (a document) stays
/// raw BSON, checked by [`walk_valid`]'s rules instead of converted (see
/// `OpMsg::cluster_time`); None sends the whole body to [`to_document`] (the field
/// another type, twice, or anything the walk leaves to the crate).
pub(crate) fn walk_body_keeping(bytes: &[u8], kept: &str) -> Option<(Document, Option<KeptField>)> {
    let mut r = elements(bytes).ok()?;
    let mut doc = Document::new();
    let mut field = None;
    while !r.is_empty() {
        let kind = r.u8(WHAT).ok()?;
        let key = r.cstring(WHAT).ok()?;
        if key != kept {
            let value = walk_value(kind, &mut r).ok()?;
            doc.insert(key.to_owned(), value);
            continue;
        }
        let kept_field = kept_field(kind, &mut r, doc.len())?;
        if field.replace(kept_field).is_some() {
            return None;
        }
    }
    Some((doc, field))
}

/// The kept field at the cursor (its type and key read), the body's `position`th
/// element otherwise: a document checked by [`walk_valid`]'s rules, or None.
pub(crate) fn kept_field(kind: u8, r: &mut ByteReader<'_>, position: usize) -> Option<KeptField> {
    let value = r.document_bytes(WHAT).ok()?;
    // The body is level 1: the field's document is level 2.
    if kind != 0x03 || !walk_valid(value, MAX_BSON_DEPTH - 1) {
        return None;
    }
    Some(KeptField {
        position,
        raw: bson::RawDocumentBuf::from_bytes(value.to_vec()).ok()?,
    })
}

/// What the walk reports for a value it leaves to the crate (only ever mapped to None).
fn not_walked() -> WireError {
    malformed("left to the bson crate")
}

/// Calls `each` with every element of the document `bytes` holds exactly, read with
/// the codec's bounds-checked cursor.
fn walk_elements(bytes: &[u8], mut each: impl FnMut(&str, Bson)) -> Result<(), WireError> {
    let mut r = elements(bytes)?;
    while !r.is_empty() {
        let kind = r.u8(WHAT)?;
        let key = r.cstring(WHAT)?;
        each(key, walk_value(kind, &mut r)?);
    }
    Ok(())
}

/// A cursor over the elements of the document `bytes` holds exactly (its length
/// and its final NUL checked).
pub(crate) fn elements(bytes: &[u8]) -> Result<ByteReader<'_>, WireError> {
    let mut whole = ByteReader::new(bytes);
    if whole.document_bytes(WHAT)?.len() != bytes.len() || bytes.last() != Some(&0) {
        return Err(not_walked());
    }
    Ok(ByteReader::new(&bytes[4..bytes.len() - 1]))
}

/// A binary value's length and subtype at the cursor (its bytes follow): the common
/// subtypes only (the old binary subtype's inner length and the newer subtypes are
/// left to the crate).
fn binary_head(r: &mut ByteReader<'_>) -> Result<(usize, u8), WireError> {
    let len = usize::try_from(r.i32(WHAT)?).map_err(|_| not_walked())?;
    let subtype = r.u8(WHAT)?;
    if !matches!(subtype, 0x00 | 0x03 | 0x04) {
        return Err(not_walked());
    }
    Ok((len, subtype))
}

/// What the cursor's errors name (never shown: an error sends the document on).
pub(crate) const WHAT: &str = "command body element";

/// The value of type `kind` at the cursor.
pub(crate) fn walk_value(kind: u8, r: &mut ByteReader<'_>) -> Result<Bson, WireError> {
    Ok(match kind {
        0x01 => Bson::Double(f64::from_le_bytes(r.take_array(WHAT)?)),
        0x02 => Bson::String(walk_string(r)?.to_owned()),
        0x03 => Bson::Document(walk_document(r.document_bytes(WHAT)?).ok_or_else(not_walked)?),
        0x04 => {
            let mut items = Vec::new();
            walk_elements(r.document_bytes(WHAT)?, |_, value| items.push(value))?;
            Bson::Array(items)
        }
        0x05 => {
            let (len, subtype) = binary_head(r)?;
            Bson::Binary(Binary {
                subtype: BinarySubtype::from(subtype),
                bytes: r.take(len, WHAT)?.to_vec(),
            })
        }
        0x07 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(r.take_array(WHAT)?)),
        0x08 => match r.u8(WHAT)? {
            0 => Bson::Boolean(false),
            1 => Bson::Boolean(true),
            _ => return Err(not_walked()),
        },
        0x09 => Bson::DateTime(bson::DateTime::from_millis(i64::from_le_bytes(
            r.take_array(WHAT)?,
        ))),
        0x0A => Bson::Null,
        0x10 => Bson::Int32(r.i32(WHAT)?),
        // Stored increment first, then time.
        0x11 => {
            let increment = r.u32(WHAT)?;
            let time = r.u32(WHAT)?;
            Bson::Timestamp(bson::Timestamp { time, increment })
        }
        0x12 => Bson::Int64(i64::from_le_bytes(r.take_array(WHAT)?)),
        0x13 => Bson::Decimal128(bson::Decimal128::from_bytes(r.take_array(WHAT)?)),
        _ => return Err(not_walked()),
    })
}

/// Whether `bytes`, exactly one document nested at most `levels_left` deep (a
/// document or an array a level), passes the checks [`walk_document`] makes, without
/// building its values: true only when the walk would convert it, so the crate
/// accepts it too (a test holds the two together); false leaves it to the crate.
/// The bulk payload's documents (an insert's) are checked this way: the crate's
/// element iterator took 1,900 instructions of every bus message's document.
pub(crate) fn walk_valid(bytes: &[u8], levels_left: usize) -> bool {
    levels_left > 0 && valid_elements(bytes, levels_left).is_ok()
}

fn valid_elements(bytes: &[u8], levels_left: usize) -> Result<(), WireError> {
    let mut r = elements(bytes)?;
    while !r.is_empty() {
        let kind = r.u8(WHAT)?;
        r.cstring(WHAT)?;
        match kind {
            0x01 | 0x09 | 0x11 | 0x12 => {
                r.take(8, WHAT)?;
            }
            0x02 => {
                walk_string(&mut r)?;
            }
            0x03 | 0x04 if levels_left > 1 => {
                valid_elements(r.document_bytes(WHAT)?, levels_left - 1)?
            }
            0x05 => {
                let (len, _) = binary_head(&mut r)?;
                r.take(len, WHAT)?;
            }
            0x07 => {
                r.take(12, WHAT)?;
            }
            0x08 => {
                if r.u8(WHAT)? > 1 {
                    return Err(not_walked());
                }
            }
            0x0A => {}
            0x10 => {
                r.take(4, WHAT)?;
            }
            0x13 => {
                r.take(16, WHAT)?;
            }
            _ => return Err(not_walked()),
        }
    }
    Ok(())
}

/// A BSON string at the cursor: its length, its UTF-8 bytes, a NUL.
fn walk_string<'a>(r: &mut ByteReader<'a>) -> Result<&'a str, WireError> {
    let len = usize::try_from(r.i32(WHAT)?).map_err(|_| not_walked())?;
    let Some((nul, text)) = r.take(len, WHAT)?.split_last() else {
        return Err(not_walked());
    };
    if *nul != 0 {
        return Err(not_walked());
    }
    std::str::from_utf8(text).map_err(|_| not_walked())
}

fn convert_document(raw: &RawDocument) -> Result<Document, bson::raw::Error> {
    let mut doc = Document::new();
    for element in raw {
        let (key, value) = element?;
        doc.insert(key.to_owned(), convert(value)?);
    }
    Ok(doc)
}

fn convert_array(raw: &RawArray) -> Result<Vec<Bson>, bson::raw::Error> {
    let mut out = Vec::new();
    for value in raw {
        out.push(convert(value?)?);
    }
    Ok(out)
}

fn convert(value: RawBsonRef<'_>) -> Result<Bson, bson::raw::Error> {
    Ok(match value {
        RawBsonRef::Double(d) => Bson::Double(d),
        RawBsonRef::String(s) => Bson::String(s.to_owned()),
        RawBsonRef::Document(d) => Bson::Document(convert_document(d)?),
        RawBsonRef::Array(a) => Bson::Array(convert_array(a)?),
        RawBsonRef::Binary(b) => Bson::Binary(Binary {
            subtype: b.subtype,
            bytes: b.bytes.to_vec(),
        }),
        RawBsonRef::ObjectId(o) => Bson::ObjectId(o),
        RawBsonRef::Boolean(b) => Bson::Boolean(b),
        RawBsonRef::DateTime(d) => Bson::DateTime(d),
        RawBsonRef::Null => Bson::Null,
        RawBsonRef::Int32(i) => Bson::Int32(i),
        RawBsonRef::Int64(i) => Bson::Int64(i),
        RawBsonRef::Timestamp(t) => Bson::Timestamp(t),
        RawBsonRef::Decimal128(d) => Bson::Decimal128(d),
        // Regular expressions (whose options the crate normalizes), code with scope,
        // symbols, DBPointers, undefined, min and max keys: the crate's own way.
        other => Bson::try_from(other.to_raw_bson())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, spec::BinarySubtype, RawDocumentBuf};

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    fn value(r: &mut Lcg, depth: u32) -> Bson {
        let kinds = if depth >= 4 { 17 } else { 19 };
        match r.next(kinds) {
            0 => Bson::Double(r.next(1000) as f64 / 7.0),
            1 => Bson::String(format!("s{}é", r.next(100))),
            2 => Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![r.next(256) as u8; r.next(20) as usize],
            }),
            3 => Bson::Binary(Binary {
                subtype: BinarySubtype::Uuid,
                bytes: vec![7; 16],
            }),
            4 => Bson::ObjectId(bson::oid::ObjectId::from_bytes([r.next(256) as u8; 12])),
            5 => Bson::Boolean(r.next(2) == 1),
            6 => Bson::DateTime(bson::DateTime::from_millis(r.next(1 << 40) as i64)),
            7 => Bson::Null,
            8 => Bson::Int32(r.next(1 << 31) as i32 - (1 << 30)),
            9 => Bson::Int64(r.next(1 << 62) as i64),
            10 => Bson::Timestamp(bson::Timestamp {
                time: r.next(1 << 31) as u32,
                increment: r.next(100) as u32,
            }),
            11 => Bson::Decimal128(bson::Decimal128::from_bytes([r.next(256) as u8; 16])),
            12 => Bson::RegularExpression(bson::Regex {
                pattern: "^a.c".into(),
                options: "imsx".into(),
            }),
            13 => Bson::JavaScriptCode("x + 1".into()),
            14 => Bson::Symbol("sym".into()),
            15 => Bson::MinKey,
            16 => Bson::MaxKey,
            17 => Bson::Document(document(r, depth + 1)),
            _ => Bson::Array((0..r.next(4)).map(|_| value(r, depth + 1)).collect()),
        }
    }

    fn document(r: &mut Lcg, depth: u32) -> Document {
        (0..r.next(6))
            .map(|i| (format!("k{i}"), value(r, depth)))
            .collect()
    }

    #[test]
    fn converts_as_the_bson_crate_does() {
        let mut r = Lcg(42);
        for _ in 0..2_000 {
            let doc = document(&mut r, 0);
            let raw = RawDocumentBuf::from_document(&doc).unwrap();
            let ours = to_document(&raw).unwrap();
            assert_eq!(ours, Document::try_from(raw.as_ref()).unwrap());
            assert_eq!(ours, doc);
        }
        // A command body as drivers send it.
        let body = doc! {
            "insert": "bus", "ordered": true, "lsid": {"id": bson::Uuid::new()},
            "$clusterTime": {"clusterTime": bson::Timestamp {time: 1, increment: 2},
                             "signature": {"hash": Binary {subtype: BinarySubtype::Generic, bytes: vec![0; 20]}, "keyId": 0i64}},
            "$db": "bench",
        };
        let raw = RawDocumentBuf::from_document(&body).unwrap();
        assert_eq!(to_document(&raw).unwrap(), body);
    }

    #[test]
    fn the_walk_takes_command_bodies_and_common_types() {
        let body = doc! {
            "insert": "bus", "ordered": true, "lsid": {"id": bson::Uuid::new()},
            "txnNumber": 7i64, "maxTimeMS": 5.0,
            "$clusterTime": {"clusterTime": bson::Timestamp {time: 1, increment: 2},
                             "signature": {"hash": Binary {subtype: BinarySubtype::Generic, bytes: vec![9; 20]}, "keyId": 0i64}},
            "a": [1, "x", {"b": null}, [], bson::DateTime::from_millis(-5)],
            "o": bson::oid::ObjectId::new(), "d": bson::Decimal128::from_bytes([3; 16]),
            "$db": "bench",
        };
        let raw = RawDocumentBuf::from_document(&body).unwrap();
        assert_eq!(walk_document(raw.as_bytes()), Some(body));
        // Left to the crate: a regular expression (whose options it sorts), the old
        // binary subtype (an inner length).
        let regex = doc! {"find": "c", "filter": {"a": bson::Regex {pattern: "x".into(), options: "mi".into()}}};
        let raw = RawDocumentBuf::from_document(&regex).unwrap();
        assert_eq!(walk_document(raw.as_bytes()), None);
        assert_eq!(
            to_document(&raw).unwrap(),
            Document::try_from(raw.as_ref()).unwrap()
        );
    }

    #[test]
    fn damaged_documents_convert_or_fail_as_the_bson_crate_does() {
        // Every document the crate takes as raw (its length and trailing NUL right),
        // with one byte inside changed: the walk either gives the crate's result or
        // leaves it to the crate, whose error is then the one reported.
        let mut r = Lcg(7);
        let mut walked = 0;
        for _ in 0..3_000 {
            let doc = document(&mut r, 0);
            let mut bytes = RawDocumentBuf::from_document(&doc).unwrap().into_bytes();
            if bytes.len() <= 5 {
                continue;
            }
            let at = 4 + r.next(bytes.len() as u64 - 5) as usize;
            bytes[at] = match r.next(4) {
                0 => 0,
                1 => bytes[at].wrapping_add(1),
                2 => 0xFF,
                _ => r.next(256) as u8,
            };
            let Ok(raw) = RawDocument::from_bytes(&bytes) else {
                continue;
            };
            walked += usize::from(walk_document(raw.as_bytes()).is_some());
            // Debug strings: a damaged double may be a NaN, unequal to itself.
            let ours = to_document(raw)
                .map(|d| format!("{d:?}"))
                .map_err(|e| e.to_string());
            let crate_s = Document::try_from(raw)
                .map(|d| format!("{d:?}"))
                .map_err(|e| e.to_string());
            assert_eq!(ours, crate_s, "bytes {bytes:?}");
        }
        assert!(walked > 500, "the walk took only {walked} documents");
    }

    /// The check without values takes exactly what the walk converts (and so only
    /// what the crate takes), damaged documents included.
    #[test]
    fn the_check_takes_what_the_walk_converts() {
        let mut r = Lcg(11);
        let mut taken = 0;
        for i in 0..20_000 {
            let doc = document(&mut r, 0);
            let mut bytes = RawDocumentBuf::from_document(&doc).unwrap().into_bytes();
            if i % 4 != 0 && bytes.len() > 5 {
                let at = 4 + r.next(bytes.len() as u64 - 5) as usize;
                bytes[at] = match r.next(3) {
                    0 => 0,
                    1 => bytes[at].wrapping_add(1),
                    _ => r.next(256) as u8,
                };
            }
            let walked = walk_document(&bytes).is_some();
            assert_eq!(walk_valid(&bytes, 200), walked, "bytes {bytes:?}");
            if walked {
                let raw = RawDocument::from_bytes(&bytes).unwrap();
                assert!(Document::try_from(raw).is_ok(), "bytes {bytes:?}");
            }
            taken += usize::from(walked);
        }
        assert!(taken > 7_000, "the check took only {taken} documents");
        // Nesting: a level per document or array.
        let nested = RawDocumentBuf::from_document(&doc! {"a": {"b": [1]}}).unwrap();
        assert!(walk_valid(nested.as_bytes(), 3));
        assert!(!walk_valid(nested.as_bytes(), 2));
    }

    #[test]
    fn reports_errors_as_the_bson_crate_does() {
        // A string element whose length runs past the document, and one whose bytes
        // are not UTF-8.
        let mut too_long = RawDocumentBuf::from_document(&doc! {"a": 1, "s": "abc"})
            .unwrap()
            .into_bytes();
        let at = too_long.len() - 9; // the string's length field
        too_long[at..at + 4].copy_from_slice(&100i32.to_le_bytes());
        let mut not_utf8 = RawDocumentBuf::from_document(&doc! {"s": "abc"})
            .unwrap()
            .into_bytes();
        let n = not_utf8.len();
        not_utf8[n - 3] = 0xFF;
        for bytes in [too_long, not_utf8] {
            let raw = RawDocument::from_bytes(&bytes).unwrap();
            let ours = to_document(raw).unwrap_err().to_string();
            assert_eq!(ours, Document::try_from(raw).unwrap_err().to_string());
        }
    }
}

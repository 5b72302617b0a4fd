//! Raw BSON to an owned `Document`, for command bodies.
//!
//! The `bson` crate's own conversion (`Document::try_from(&RawDocument)`) goes through
//! an owned `RawBson` per value: every nested document is copied into a buffer of its
//! own before being converted, and every element's error is wrapped with its key. A
//! driver's command body nests three documents (`lsid`, `$clusterTime` and its
//! `signature`): converting it that way was 14,000 instructions of every request on the
//! message-bus benchmark, the largest part of decoding one. This walks the raw elements
//! once and builds each value directly. Measured on such a body (2026-11-26, 2 vCPUs):
//! 2.22 → 1.75 µs per conversion in a loop against the crate's, and on the bus
//! benchmark under callgrind 17.3k → 16.6k instructions per decoded request (the
//! allocations, which both make, dominate). The rare types go through the crate's own
//! conversion, and any error is reported by the crate's conversion itself, so the
//! result and the errors are exactly the crate's.

use bson::raw::RawBsonRef;
use bson::{Binary, Bson, Document, RawArray, RawDocument};

/// The document `raw` holds, as `Document::try_from(raw)` would return it.
pub fn to_document(raw: &RawDocument) -> Result<Document, bson::raw::Error> {
    match convert_document(raw) {
        Ok(doc) => Ok(doc),
        // The crate's conversion words the error (with the key where it failed).
        Err(_) => Document::try_from(raw),
    }
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

//! Writes a BSON document element by element (type, name, value) into one buffer
//! sized up front, for the documents the write path and the change streams build on
//! every message: an insert's oplog entry, a change event, a retryable write's
//! record, the oplog's state. The `bson` crate's `RawDocumentBuf::append` checks
//! each name, goes through its generic value writer and grows its buffer field by
//! field: about 190 instructions a field, a sixth of building an insert event and
//! 1,900 of every inserted document's oplog entry (callgrind, bus benchmark); these
//! take a few dozen. Names are constants without NUL (checked in debug builds), and
//! the bytes are those the crate's appends write (a unit test compares them).

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

/// BSON element types written here by name.
const BINARY: u8 = 0x05;
pub(crate) const DOCUMENT: u8 = 0x03;
const STRING: u8 = 0x02;
const TIMESTAMP: u8 = 0x11;
const DATE_TIME: u8 = 0x09;
const INT64: u8 = 0x12;
const INT32: u8 = 0x10;
const OBJECT_ID: u8 = 0x07;

/// A document being written (see the module's doc).
pub(crate) struct RawWriter {
    buf: Vec<u8>,
}

/// A length as BSON writes it (a document, string or binary of the write path is
/// far under 2 GiB: the server refuses messages over 48 MB).
fn length(n: usize) -> [u8; 4] {
    i32::try_from(n)
        .expect("a BSON value under 2 GiB")
        .to_le_bytes()
}

impl RawWriter {
    /// A document whose bytes will be about `bytes` (a guess: the buffer grows if not).
    pub(crate) fn with_capacity(bytes: usize) -> RawWriter {
        let mut buf = Vec::with_capacity(bytes.max(5));
        buf.extend_from_slice(&[0; 4]);
        RawWriter { buf }
    }

    /// An element's type and name; its value follows (see [`Self::buf`]).
    pub(crate) fn name(&mut self, element_type: u8, name: &str) {
        debug_assert!(!name.as_bytes().contains(&0), "a BSON name without NUL");
        self.buf.push(element_type);
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
    }

    /// The buffer, for a value written in place after [`Self::name`].
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    pub(crate) fn doc(&mut self, name: &str, d: &RawDocument) {
        self.name(DOCUMENT, name);
        self.buf.extend_from_slice(d.as_bytes());
    }

    pub(crate) fn string(&mut self, name: &str, s: &str) {
        self.name(STRING, name);
        self.buf.extend_from_slice(&length(s.len() + 1));
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    pub(crate) fn timestamp(&mut self, name: &str, ts: bson::Timestamp) {
        self.name(TIMESTAMP, name);
        self.buf.extend_from_slice(&ts.increment.to_le_bytes());
        self.buf.extend_from_slice(&ts.time.to_le_bytes());
    }

    pub(crate) fn binary(&mut self, name: &str, subtype: bson::spec::BinarySubtype, bytes: &[u8]) {
        self.name(BINARY, name);
        self.buf.extend_from_slice(&length(bytes.len()));
        self.buf.push(u8::from(subtype));
        self.buf.extend_from_slice(bytes);
    }

    pub(crate) fn uuid(&mut self, name: &str, u: bson::Uuid) {
        self.binary(name, bson::spec::BinarySubtype::Uuid, &u.bytes());
    }

    pub(crate) fn int64(&mut self, name: &str, n: i64) {
        self.name(INT64, name);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn date_time(&mut self, name: &str, t: bson::DateTime) {
        self.name(DATE_TIME, name);
        self.buf
            .extend_from_slice(&t.timestamp_millis().to_le_bytes());
    }

    /// Any value: the common ones written here, the rest through the `bson` crate.
    pub(crate) fn value(&mut self, name: &str, v: RawBsonRef<'_>) {
        match v {
            RawBsonRef::DateTime(t) => self.date_time(name, t),
            RawBsonRef::Int64(n) => self.int64(name, n),
            RawBsonRef::Document(d) => self.doc(name, d),
            RawBsonRef::String(s) => self.string(name, s),
            RawBsonRef::Timestamp(ts) => self.timestamp(name, ts),
            RawBsonRef::ObjectId(oid) => {
                self.name(OBJECT_ID, name);
                self.buf.extend_from_slice(&oid.bytes());
            }
            RawBsonRef::Int32(n) => {
                self.name(INT32, name);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            RawBsonRef::Binary(b) => self.binary(name, b.subtype, b.bytes),
            other => {
                let mut one = RawDocumentBuf::new();
                one.append_ref(name, other);
                let bytes = one.as_bytes();
                self.buf.extend_from_slice(&bytes[4..bytes.len() - 1]);
            }
        }
    }

    /// The document's bytes, its length and final NUL written.
    pub(crate) fn into_bytes(mut self) -> Vec<u8> {
        self.buf.push(0);
        let total = length(self.buf.len());
        self.buf[..4].copy_from_slice(&total);
        self.buf
    }

    pub(crate) fn finish(self) -> RawDocumentBuf {
        RawDocumentBuf::from_bytes(self.into_bytes()).expect("a well-formed document")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer writes what the `bson` crate's appends write.
    #[test]
    fn the_writer_matches_the_bson_crate() {
        let inner = bson::rawdoc! {"a": 1, "b": "x"};
        let uuid = bson::Uuid::new();
        let ts = bson::Timestamp {
            time: 7,
            increment: 9,
        };
        let mut w = RawWriter::with_capacity(0);
        let mut expected = RawDocumentBuf::new();
        w.doc("d", &inner);
        expected.append("d", inner.clone());
        w.string("s", "héllo");
        expected.append("s", "héllo");
        w.string("empty", "");
        expected.append("empty", "");
        w.timestamp("t", ts);
        expected.append("t", ts);
        w.uuid("u", uuid);
        expected.append("u", bson::Binary::from_uuid(uuid));
        w.binary("b", bson::spec::BinarySubtype::Generic, &[1, 2, 3]);
        expected.append(
            "b",
            bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![1, 2, 3],
            },
        );
        w.int64("i", -5);
        expected.append("i", -5i64);
        w.date_time("w", bson::DateTime::from_millis(12));
        expected.append("w", bson::DateTime::from_millis(12));
        let values = [
            RawBsonRef::DateTime(bson::DateTime::from_millis(-3)),
            RawBsonRef::Int64(i64::MIN),
            RawBsonRef::Int32(5),
            RawBsonRef::Timestamp(ts),
            RawBsonRef::String("w"),
            RawBsonRef::Document(&inner),
            RawBsonRef::ObjectId(bson::oid::ObjectId::from_bytes([7; 12])),
            RawBsonRef::Binary(bson::RawBinaryRef {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: &uuid.bytes(),
            }),
            RawBsonRef::Null,
            RawBsonRef::Boolean(true),
        ];
        for (i, v) in values.into_iter().enumerate() {
            let name = format!("v{i}");
            w.value(&name, v);
            expected.append_ref(name, v);
        }
        assert_eq!(w.finish().as_bytes(), expected.as_bytes());
    }

    #[test]
    fn an_empty_document_is_five_bytes() {
        assert_eq!(
            RawWriter::with_capacity(0).into_bytes(),
            RawDocumentBuf::new().as_bytes()
        );
    }
}

//! Legacy OP_QUERY (2004) and OP_REPLY (1).
//!
//! Removed from mongod 5.1 except for one use that matters: drivers and shells still open
//! connections with a legacy `isMaster`/`hello` OP_QUERY on `admin.$cmd` before they know
//! the server speaks OP_MSG, and expect an OP_REPLY back.

use bson::Document;

use crate::codec::{write_document, ByteReader};
use crate::error::{malformed, WireError};
use crate::frame::{begin_message, finish_message};
use crate::opcode;

/// A decoded legacy OP_QUERY.
#[derive(Debug, Clone, PartialEq)]
pub struct OpQuery {
    /// Query flags (tailable, slaveOk, ...); sent as int32, kept as the raw bit pattern.
    pub flags: u32,
    /// `"<db>.<collection>"`; commands go to `"<db>.$cmd"`.
    pub full_collection_name: String,
    /// Documents to skip.
    pub number_to_skip: i32,
    /// Batch size hint; -1 for commands (a single reply document).
    pub number_to_return: i32,
    /// The query, or the command document for `$cmd` namespaces.
    pub query: Document,
    /// Optional projection.
    pub return_fields_selector: Option<Document>,
}

impl OpQuery {
    /// Decodes the bytes after the header.
    pub(crate) fn decode(body: &[u8]) -> Result<Self, WireError> {
        let mut r = ByteReader::new(body);
        let flags = r.u32("OP_QUERY flags")?;
        let full_collection_name = r.cstring("OP_QUERY fullCollectionName")?.to_owned();
        let number_to_skip = r.i32("OP_QUERY numberToSkip")?;
        let number_to_return = r.i32("OP_QUERY numberToReturn")?;
        let query = r.document("OP_QUERY query")?;
        let return_fields_selector = if r.is_empty() {
            None
        } else {
            Some(r.document("OP_QUERY returnFieldsSelector")?)
        };
        if !r.is_empty() {
            return Err(malformed(format!(
                "{} unexpected bytes after OP_QUERY",
                r.remaining()
            )));
        }
        Ok(Self {
            flags,
            full_collection_name,
            number_to_skip,
            number_to_return,
            query,
            return_fields_selector,
        })
    }
}

/// Encodes an OP_QUERY as a legacy client would send it (for tests and benchmark clients).
pub fn encode_query(request_id: i32, query: &OpQuery) -> Vec<u8> {
    let mut out = begin_message(request_id, 0, opcode::QUERY);
    out.extend_from_slice(&query.flags.to_le_bytes());
    out.extend_from_slice(query.full_collection_name.as_bytes());
    out.push(0);
    out.extend_from_slice(&query.number_to_skip.to_le_bytes());
    out.extend_from_slice(&query.number_to_return.to_le_bytes());
    write_document(&mut out, &query.query);
    if let Some(selector) = &query.return_fields_selector {
        write_document(&mut out, selector);
    }
    finish_message(&mut out);
    out
}

/// Encodes an OP_REPLY answering a legacy OP_QUERY.
///
/// `response_flags` is usually 8 (AwaitCapable), which every mongod since 1.6 sets and some
/// drivers check for.
pub fn encode_reply(
    request_id: i32,
    response_to: i32,
    response_flags: i32,
    cursor_id: i64,
    starting_from: i32,
    documents: &[Document],
) -> Vec<u8> {
    let mut out = begin_message(request_id, response_to, opcode::REPLY);
    out.extend_from_slice(&response_flags.to_le_bytes());
    out.extend_from_slice(&cursor_id.to_le_bytes());
    out.extend_from_slice(&starting_from.to_le_bytes());
    let returned = i32::try_from(documents.len()).unwrap_or(i32::MAX);
    out.extend_from_slice(&returned.to_le_bytes());
    for doc in documents {
        write_document(&mut out, doc);
    }
    finish_message(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, Header, Request, HEADER_LEN};
    use bson::doc;

    fn decode_query(bytes: &[u8]) -> Result<OpQuery, WireError> {
        let header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        match decode(&header, &bytes[HEADER_LEN..])? {
            (Request::Query(q), None) => Ok(q),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn decode_hand_built_is_master() {
        // Laid out byte by byte, independent of encode_query.
        let mut body = Vec::new();
        body.extend_from_slice(&4i32.to_le_bytes()); // slaveOk
        body.extend_from_slice(b"admin.$cmd\0");
        body.extend_from_slice(&0i32.to_le_bytes());
        body.extend_from_slice(&(-1i32).to_le_bytes());
        doc! { "isMaster": 1, "client": { "driver": { "name": "x" } } }
            .to_writer(&mut body)
            .unwrap();
        let header = Header {
            message_length: (HEADER_LEN + body.len()) as i32,
            request_id: 3,
            response_to: 0,
            op_code: opcode::QUERY,
        };
        let (req, compressor) = decode(&header, &body).unwrap();
        assert!(compressor.is_none());
        let Request::Query(q) = req else {
            panic!("not a query")
        };
        assert_eq!(q.flags, 4);
        assert_eq!(q.full_collection_name, "admin.$cmd");
        assert_eq!((q.number_to_skip, q.number_to_return), (0, -1));
        assert_eq!(q.query.get_i32("isMaster").unwrap(), 1);
        assert!(q.return_fields_selector.is_none());
    }

    #[test]
    fn roundtrip_with_selector() {
        let q = OpQuery {
            flags: 0,
            full_collection_name: "db.c".into(),
            number_to_skip: 5,
            number_to_return: 10,
            query: doc! { "a": { "$gt": 1 } },
            return_fields_selector: Some(doc! { "a": 1 }),
        };
        assert_eq!(decode_query(&encode_query(1, &q)).unwrap(), q);
    }

    #[test]
    fn trailing_bytes_and_truncation_rejected() {
        let q = OpQuery {
            flags: 0,
            full_collection_name: "db.c".into(),
            number_to_skip: 0,
            number_to_return: 1,
            query: doc! {},
            return_fields_selector: Some(doc! {}),
        };
        let mut bytes = encode_query(1, &q);
        bytes.extend_from_slice(&[5, 0, 0, 0, 0]);
        let len = bytes.len() as i32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        assert!(decode_query(&bytes).is_err());

        let good = encode_query(1, &q);
        for cut in HEADER_LEN..good.len() {
            let mut t = good[..cut].to_vec();
            t[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            // Cutting exactly before the optional selector is still a valid query.
            let ok = cut == good.len() - 5;
            assert_eq!(decode_query(&t).is_ok(), ok, "cut at {cut}");
        }
    }

    #[test]
    fn reply_layout() {
        let docs = [doc! { "ismaster": true }, doc! { "ok": 1.0 }];
        let bytes = encode_reply(11, 3, 8, 0x0102_0304_0506_0708, 2, &docs);

        let mut expected_docs = Vec::new();
        for d in &docs {
            d.to_writer(&mut expected_docs).unwrap();
        }
        let total = HEADER_LEN + 4 + 8 + 4 + 4 + expected_docs.len();
        assert_eq!(bytes.len(), total);
        assert_eq!(bytes[0..4], (total as i32).to_le_bytes());
        assert_eq!(bytes[4..8], [11, 0, 0, 0]);
        assert_eq!(bytes[8..12], [3, 0, 0, 0]);
        assert_eq!(bytes[12..16], [1, 0, 0, 0]); // OP_REPLY
        assert_eq!(bytes[16..20], [8, 0, 0, 0]); // AwaitCapable
        assert_eq!(bytes[20..28], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(bytes[28..32], [2, 0, 0, 0]); // startingFrom
        assert_eq!(bytes[32..36], [2, 0, 0, 0]); // numberReturned
        assert_eq!(bytes[36..], expected_docs[..]);
    }

    #[test]
    fn reply_is_not_a_request() {
        let bytes = encode_reply(1, 1, 8, 0, 0, &[]);
        let header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        assert!(matches!(
            decode(&header, &bytes[HEADER_LEN..]),
            Err(WireError::UnsupportedOpCode(1))
        ));
    }
}

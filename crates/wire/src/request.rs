//! Turning a framed message into a typed request.

use crate::compression::{decompress, Compressor};
use crate::error::{malformed, WireError};
use crate::frame::Header;
use crate::op_msg::{BodyDecoding, OpMsg};
use crate::op_query::OpQuery;
use crate::reuse::BodyCache;
use crate::{opcode, HEADER_LEN};

/// A client request, in one of the two formats a server must still accept.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// OP_MSG: every command from a modern driver.
    Msg(OpMsg),
    /// Legacy OP_QUERY: in practice only the initial handshake.
    Query(OpQuery),
}

/// Decodes a message body (the bytes after the header) into a [`Request`].
///
/// OP_COMPRESSED is unwrapped (noop = 0, snappy = 1, zlib = 2; others yield
/// [`WireError::UnsupportedCompressor`]) and the compressor is returned so the reply can
/// use the same one. Any other opcode, including server-to-client ones such as OP_REPLY,
/// is [`WireError::UnsupportedOpCode`]. Never panics, whatever the bytes.
pub fn decode(header: &Header, body: &[u8]) -> Result<(Request, Option<Compressor>), WireError> {
    decode_with(header, body, BodyDecoding::Whole)
}

/// [`decode`] for a server's requests: an OP_MSG body's `$clusterTime` is left raw, in
/// [`OpMsg::cluster_time`] (see [`crate::op_msg::KEPT_RAW_FIELD`]).
pub fn decode_request(
    header: &Header,
    body: &[u8],
) -> Result<(Request, Option<Compressor>), WireError> {
    decode_with(header, body, BodyDecoding::Keeping(None))
}

/// [`decode_request`] for a connection's next request: an OP_MSG body with the keys of
/// the previous one is decoded from the previous body's `Document`, when the command
/// gave it back to `bodies` (see `reuse.rs`). The request is the same either way.
pub fn decode_request_reusing(
    header: &Header,
    body: &[u8],
    bodies: &mut BodyCache,
) -> Result<(Request, Option<Compressor>), WireError> {
    decode_with(header, body, BodyDecoding::Keeping(Some(bodies)))
}

fn decode_with(
    header: &Header,
    body: &[u8],
    decoding: BodyDecoding<'_>,
) -> Result<(Request, Option<Compressor>), WireError> {
    // The OP_MSG checksum covers the header as re-serialized from these fields, so they must
    // describe this body.
    if usize::try_from(header.message_length).ok() != HEADER_LEN.checked_add(body.len()) {
        return Err(malformed(format!(
            "header length {} does not match a {}-byte body",
            header.message_length,
            body.len()
        )));
    }
    if header.op_code != opcode::COMPRESSED {
        return decode_plain(header, body, decoding).map(|req| (req, None));
    }

    let inner = decompress(body)?;
    if inner.original_opcode == opcode::COMPRESSED {
        return Err(malformed(
            "OP_COMPRESSED may not wrap another OP_COMPRESSED",
        ));
    }
    // Rebuild the header the sender compressed away: a checksummed OP_MSG inside the
    // wrapper is verified against it, as mongod does.
    let inner_header = Header {
        // decompress() bounds the size by MAX_MESSAGE_SIZE, far below i32::MAX.
        message_length: i32::try_from(HEADER_LEN + inner.body.len())
            .map_err(|_| malformed("decompressed message too large"))?,
        op_code: inner.original_opcode,
        ..*header
    };
    decode_plain(&inner_header, &inner.body, decoding).map(|req| (req, Some(inner.compressor)))
}

fn decode_plain(
    header: &Header,
    body: &[u8],
    decoding: BodyDecoding<'_>,
) -> Result<Request, WireError> {
    match header.op_code {
        opcode::MSG => OpMsg::decode(header, body, decoding).map(Request::Msg),
        opcode::QUERY => OpQuery::decode(body).map(Request::Query),
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compress, encode_msg, encode_op_msg, encode_query, msg_flags};
    use crate::{DocumentSequence, OpQuery};
    use bson::doc;

    /// xorshift64*: deterministic and dependency-free, which is all a smoke fuzzer needs.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn decode_whole(
        bytes: &[u8],
        op_code: i32,
        rng: &mut XorShift,
        bodies: &mut BodyCache,
    ) -> bool {
        // Mostly consistent headers, so decoding gets past the length check; sometimes not.
        let len = if rng.below(8) == 0 {
            rng.next() as i32
        } else {
            (HEADER_LEN + bytes.len()) as i32
        };
        let header = Header {
            message_length: len,
            request_id: 1,
            response_to: 0,
            op_code,
        };
        let plain = decode(&header, bytes);
        // The server's decoding, `$clusterTime` left raw, takes and refuses the same
        // messages, with the same errors, and gives the same command back.
        let keeping = decode_request(&header, bytes);
        // A connection's decoding, from the previous message's body where it can be,
        // answers the same (as bytes, key order included; a double may be NaN).
        match (&keeping, decode_request_reusing(&header, bytes, bodies)) {
            (Ok((Request::Msg(a), ca)), Ok((Request::Msg(mut b), cb))) => {
                assert_eq!(*ca, cb);
                assert_eq!(bson::to_vec(&a.body).ok(), bson::to_vec(&b.body).ok());
                assert_eq!(encode_op_msg(1, 0, a), encode_op_msg(1, 0, &b));
                // As the server does: `$clusterTime` taken, the body given back when
                // the command is the body as decoded.
                b.cluster_time.take();
                if b.command_is_body() {
                    bodies.give_back(b.body);
                }
            }
            (Ok(a), Ok(b)) => assert_eq!(*a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("decode_request {a:?} but decode_request_reusing {b:?}"),
        }
        match (&plain, keeping) {
            (Ok((Request::Msg(a), ca)), Ok((Request::Msg(b), cb))) => {
                assert_eq!(*ca, cb);
                assert_eq!(encode_op_msg(1, 0, a), encode_op_msg(1, 0, &b));
                // As bytes: a mutated double may be NaN, never equal to itself.
                let bytes =
                    |c: Result<bson::Document, WireError>| c.ok().map(|d| bson::to_vec(&d).ok());
                assert_eq!(bytes(a.clone().into_command()), bytes(b.into_command()));
            }
            (Ok(a), Ok(b)) => assert_eq!(*a, b),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("decode {a:?} but decode_request {b:?}"),
        }
        plain.is_ok()
    }

    fn corpus() -> Vec<Vec<u8>> {
        let msg = OpMsg {
            flags: msg_flags::CHECKSUM_PRESENT,
            cluster_time: None,
            body: doc! { "insert": "c", "$db": "d", "n": { "a": [1, "x", { "b": null }] } },
            sequences: vec![DocumentSequence {
                identifier: "documents".into(),
                documents: vec![
                    bson::RawDocumentBuf::from_document(&doc! { "_id": 1 }).unwrap(),
                    bson::RawDocumentBuf::from_document(&doc! { "_id": 2, "v": 2.5 }).unwrap(),
                ],
            }],
        };
        let plain = encode_op_msg(
            1,
            0,
            &OpMsg {
                flags: 0,
                ..msg.clone()
            },
        );
        let query = encode_query(
            2,
            &OpQuery {
                flags: 0,
                full_collection_name: "admin.$cmd".into(),
                number_to_skip: 0,
                number_to_return: -1,
                query: doc! { "isMaster": 1 },
                return_fields_selector: Some(doc! { "x": 1 }),
            },
        );
        let driver = encode_msg(4, 0, 0, &driver_insert_body());
        vec![
            plain.clone(),
            driver.clone(),
            compress(&driver, Compressor::Snappy),
            encode_op_msg(1, 0, &msg),
            encode_msg(3, 0, 0, &doc! { "ping": 1 }),
            query.clone(),
            compress(&plain, Compressor::Noop),
            compress(&plain, Compressor::Snappy),
            compress(&plain, Compressor::Zlib),
            compress(&query, Compressor::Snappy),
        ]
    }

    /// An insert's body as a driver sends it (its documents in a sequence).
    fn driver_insert_body() -> bson::Document {
        doc! {
            "insert": "bus", "ordered": true, "$db": "bench",
            "lsid": {"id": bson::Binary {
                subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![7; 16],
            }},
            "$clusterTime": {
                "clusterTime": bson::Timestamp { time: 1_795_844_765, increment: 1 },
                "signature": {"hash": bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0; 20],
                }, "keyId": 0i64},
            },
            "txnNumber": 1i64,
        }
    }

    #[test]
    fn a_servers_decoding_keeps_cluster_time_raw_and_puts_it_back() {
        let body = driver_insert_body();
        let bytes = encode_msg(9, 0, 0, &body);
        let header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        let Ok((Request::Msg(msg), None)) = decode_request(&header, &bytes[HEADER_LEN..]) else {
            panic!("a driver's insert decodes");
        };
        let kept = msg.cluster_time.clone().expect("$clusterTime kept raw");
        assert!(!msg.body.contains_key("$clusterTime"));
        assert_eq!(kept.position, 4, "after insert, ordered, $db and lsid");
        assert_eq!(
            bson::Document::try_from(kept.raw.as_ref()).unwrap(),
            *body.get_document("$clusterTime").unwrap()
        );
        assert_eq!(kept.restored(&msg.body), body, "in its place");
        assert_eq!(encode_op_msg(9, 0, &msg), bytes, "encoded as it came");
        assert_eq!(msg.into_command().unwrap(), body);
        // Where it is not a document, it stays in the body.
        let mut odd = body.clone();
        odd.insert("$clusterTime", 5);
        let bytes = encode_msg(9, 0, 0, &odd);
        let Ok((Request::Msg(msg), None)) =
            decode_request(&header_of(&bytes), &bytes[HEADER_LEN..])
        else {
            panic!("decodes");
        };
        assert_eq!((msg.cluster_time, msg.body), (None, odd));
        // The plain decoding leaves the body whole.
        let Ok((Request::Msg(msg), None)) =
            decode(&header, &encode_msg(9, 0, 0, &body)[HEADER_LEN..])
        else {
            panic!("decodes");
        };
        assert_eq!((msg.cluster_time, msg.body), (None, body));
    }

    fn header_of(bytes: &[u8]) -> Header {
        Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap())
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let opcodes = [
            opcode::MSG,
            opcode::QUERY,
            opcode::COMPRESSED,
            opcode::REPLY,
            0,
        ];
        let corpus = corpus();
        let mut bodies = BodyCache::default();

        // Pure noise of assorted lengths.
        for _ in 0..20_000 {
            let len = rng.below(96);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let op_code = opcodes[rng.below(opcodes.len())];
            let _ = decode_whole(&bytes, op_code, &mut rng, &mut bodies);
        }

        for message in &corpus {
            let op_code = Header::from_bytes(message[..HEADER_LEN].try_into().unwrap()).op_code;
            let body = &message[HEADER_LEN..];
            // Every truncation, with the header length kept consistent.
            for cut in 0..body.len() {
                let _ = decode_whole(&body[..cut], op_code, &mut rng, &mut bodies);
            }
            // Random mutations: flipped bytes, small-integer overwrites (likely lengths),
            // insertions and deletions.
            let mut accepted = 0;
            for _ in 0..3_000 {
                let mut b = body.to_vec();
                for _ in 0..1 + rng.below(4) {
                    if b.is_empty() {
                        break;
                    }
                    let at = rng.below(b.len());
                    match rng.below(4) {
                        0 => b[at] ^= 1 << rng.below(8),
                        1 => {
                            let v = [0i32, 1, 4, 5, -1, i32::MAX, i32::MIN, 0x7f][rng.below(8)];
                            let end = (at + 4).min(b.len());
                            b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                        }
                        2 => b.insert(at, rng.next() as u8),
                        _ => {
                            b.remove(at);
                        }
                    }
                }
                // Half the time after the message itself, so the mutation meets its
                // original's Document in the cache.
                if rng.below(2) == 0 {
                    let _ = decode_whole(body, op_code, &mut rng, &mut bodies);
                }
                accepted += usize::from(decode_whole(&b, op_code, &mut rng, &mut bodies));
            }
            // Some mutations (e.g. inside string values) must survive, or the fuzzer would
            // only ever be testing the first validation step.
            if op_code != opcode::COMPRESSED {
                assert!(accepted > 0, "no mutation of opcode {op_code} decoded");
            }
        }
        // Mutated bodies were decoded from their predecessors' Documents, not only
        // from scratch.
        assert!(bodies.reused() > 1_000, "{} bodies reused", bodies.reused());
    }

    #[test]
    fn header_length_must_match_body() {
        let bytes = encode_msg(1, 0, 0, &doc! { "ping": 1 });
        let mut header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        header.message_length += 1;
        assert!(matches!(
            decode(&header, &bytes[HEADER_LEN..]),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn unknown_opcodes_rejected() {
        for op in [opcode::REPLY, 2001, 2002, 2005, 2006, 2007, 9999] {
            let header = Header {
                message_length: 16,
                request_id: 1,
                response_to: 0,
                op_code: op,
            };
            assert!(
                matches!(decode(&header, &[]), Err(WireError::UnsupportedOpCode(o)) if o == op)
            );
        }
    }
}

//! OP_COMPRESSED (2012): a wrapper carrying another message compressed.

use std::io::{Read, Write};

use crate::codec::ByteReader;
use crate::error::{malformed, WireError};
use crate::frame::{begin_message, finish_message};
use crate::{opcode, HEADER_LEN, MAX_MESSAGE_SIZE};

/// Which compressor a request arrived with, so the reply can use the same one.
///
/// zstd goes through the `zstd` crate, which builds its bundled libzstd with `cc`, as
/// RocksDB is built: no system library is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compressor {
    /// Id 0: bytes stored as-is. Legal, and used by drivers' test suites.
    Noop,
    /// Id 1: Snappy raw (unframed) format.
    Snappy,
    /// Id 2: zlib (RFC 1950) stream.
    Zlib,
    /// Id 3: one Zstandard frame (RFC 8878).
    Zstd,
}

/// The zstd level replies are compressed at: libzstd's default, as mongod uses.
const ZSTD_LEVEL: i32 = zstd::DEFAULT_COMPRESSION_LEVEL;

impl Compressor {
    /// The `compressorId` byte on the wire.
    pub fn id(self) -> u8 {
        match self {
            Self::Noop => 0,
            Self::Snappy => 1,
            Self::Zlib => 2,
            Self::Zstd => 3,
        }
    }

    /// Maps a `compressorId` byte back to a compressor.
    pub fn from_id(id: u8) -> Result<Self, WireError> {
        match id {
            0 => Ok(Self::Noop),
            1 => Ok(Self::Snappy),
            2 => Ok(Self::Zlib),
            3 => Ok(Self::Zstd),
            other => Err(WireError::UnsupportedCompressor(other)),
        }
    }

    /// The name used in the `compression` array of `hello` during negotiation.
    pub fn name(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Snappy => "snappy",
            Self::Zlib => "zlib",
            Self::Zstd => "zstd",
        }
    }

    /// Parses a negotiation name; `None` for a compressor we do not know.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "noop" => Some(Self::Noop),
            "snappy" => Some(Self::Snappy),
            "zlib" => Some(Self::Zlib),
            "zstd" => Some(Self::Zstd),
            _ => None,
        }
    }
}

/// Wraps an already-encoded message (header included) in OP_COMPRESSED.
///
/// The wrapper keeps the original request id and response-to, as drivers match replies on
/// them. If compression itself fails (only possible for absurdly large inputs) the payload is
/// stored with the noop compressor rather than failing the reply.
///
/// # Panics
/// If `message` is shorter than a header; that is a bug in the caller, not bad input.
pub fn compress(message: &[u8], compressor: Compressor) -> Vec<u8> {
    assert!(
        message.len() >= HEADER_LEN,
        "compress() needs a whole encoded message"
    );
    let (header, payload) = message.split_at(HEADER_LEN);
    let field =
        |i: usize| i32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);

    let (compressor, compressed) = match compress_payload(payload, compressor) {
        Some(bytes) => (compressor, bytes),
        None => (Compressor::Noop, payload.to_vec()),
    };

    let mut out = begin_message(field(4), field(8), opcode::COMPRESSED);
    out.reserve(9 + compressed.len());
    out.extend_from_slice(&field(12).to_le_bytes());
    out.extend_from_slice(
        &i32::try_from(payload.len())
            .unwrap_or(i32::MAX)
            .to_le_bytes(),
    );
    out.push(compressor.id());
    out.extend_from_slice(&compressed);
    finish_message(&mut out);
    out
}

fn compress_payload(payload: &[u8], compressor: Compressor) -> Option<Vec<u8>> {
    match compressor {
        Compressor::Noop => Some(payload.to_vec()),
        Compressor::Snappy => snap::raw::Encoder::new().compress_vec(payload).ok(),
        Compressor::Zlib => {
            let mut enc = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(payload.len() / 2),
                flate2::Compression::default(),
            );
            enc.write_all(payload).ok()?;
            enc.finish().ok()
        }
        Compressor::Zstd => zstd::bulk::compress(payload, ZSTD_LEVEL).ok(),
    }
}

/// The inner message recovered from an OP_COMPRESSED body.
pub(crate) struct Decompressed {
    pub(crate) original_opcode: i32,
    pub(crate) compressor: Compressor,
    /// The original message minus its header.
    pub(crate) body: Vec<u8>,
}

/// Unwraps the bytes after an OP_COMPRESSED header.
///
/// The declared size is checked against the limit before anything is allocated, and the
/// output must match it exactly, so a small "zip bomb" cannot make us allocate beyond it.
pub(crate) fn decompress(body: &[u8]) -> Result<Decompressed, WireError> {
    let mut r = ByteReader::new(body);
    let original_opcode = r.i32("OP_COMPRESSED originalOpcode")?;
    let declared = r.i32("OP_COMPRESSED uncompressedSize")?;
    let compressor = Compressor::from_id(r.u8("OP_COMPRESSED compressorId")?)?;
    let data = r.take(r.remaining(), "OP_COMPRESSED payload")?;

    let size = usize::try_from(declared)
        .map_err(|_| malformed(format!("negative uncompressedSize {declared}")))?;
    if size > MAX_MESSAGE_SIZE - HEADER_LEN {
        return Err(WireError::TooLarge {
            size: size + HEADER_LEN,
            max: MAX_MESSAGE_SIZE,
        });
    }

    let body = match compressor {
        Compressor::Noop => data.to_vec(),
        Compressor::Snappy => {
            // Snappy states the output length up front, so check it before allocating.
            let len =
                snap::raw::decompress_len(data).map_err(|e| malformed(format!("snappy: {e}")))?;
            if len != size {
                return Err(size_mismatch(len, size));
            }
            let mut out = vec![0u8; len];
            let n = snap::raw::Decoder::new()
                .decompress(data, &mut out)
                .map_err(|e| malformed(format!("snappy: {e}")))?;
            out.truncate(n);
            out
        }
        Compressor::Zlib => {
            // Reading one byte past the declared size is enough to detect an overrun without
            // inflating an arbitrarily large stream.
            let mut out = Vec::with_capacity(size);
            flate2::read::ZlibDecoder::new(data)
                .take(size as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| malformed(format!("zlib: {e}")))?;
            out
        }
        // The declared size is the output buffer's capacity: a frame that inflates past it
        // fails instead of allocating more.
        Compressor::Zstd => {
            zstd::bulk::decompress(data, size).map_err(|e| malformed(format!("zstd: {e}")))?
        }
    };
    if body.len() != size {
        return Err(size_mismatch(body.len(), size));
    }
    Ok(Decompressed {
        original_opcode,
        compressor,
        body,
    })
}

fn size_mismatch(actual: usize, declared: usize) -> WireError {
    malformed(format!(
        "OP_COMPRESSED payload is {actual} bytes uncompressed, header declares {declared}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode_msg, encode_op_msg, encode_query, msg_flags};
    use crate::{DocumentSequence, Header, OpMsg, OpQuery, Request};
    use bson::doc;

    const ALL: [Compressor; 4] = [
        Compressor::Noop,
        Compressor::Snappy,
        Compressor::Zlib,
        Compressor::Zstd,
    ];

    fn split(bytes: &[u8]) -> (Header, &[u8]) {
        (
            Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap()),
            &bytes[HEADER_LEN..],
        )
    }

    #[test]
    fn roundtrip_op_msg_all_compressors() {
        let msg = OpMsg {
            flags: msg_flags::CHECKSUM_PRESENT,
            cluster_time: None,
            body: doc! { "insert": "c", "$db": "db" },
            sequences: vec![DocumentSequence {
                identifier: "documents".into(),
                documents: (0..50)
                    .map(|i| {
                        bson::RawDocumentBuf::from_document(
                            &doc! { "_id": i, "s": "repetitive text " },
                        )
                        .unwrap()
                    })
                    .collect(),
            }],
        };
        let plain = encode_op_msg(42, 0, &msg);
        for c in ALL {
            let wrapped = compress(&plain, c);
            let (header, body) = split(&wrapped);
            assert_eq!(header.op_code, opcode::COMPRESSED);
            assert_eq!(header.request_id, 42);
            assert_eq!(header.message_length as usize, wrapped.len());
            assert_eq!(body[8], c.id());
            if c != Compressor::Noop {
                assert!(wrapped.len() < plain.len(), "{c:?} did not shrink");
            }
            let (req, used) = decode(&header, body).unwrap();
            assert_eq!(used, Some(c));
            let Request::Msg(m) = req else {
                panic!("not OP_MSG")
            };
            assert_eq!(m, msg);
        }
    }

    #[test]
    fn roundtrip_reply_and_query() {
        let reply = encode_msg(1, 9, 0, &doc! { "ok": 1 });
        for c in ALL {
            let d = decompress(&compress(&reply, c)[HEADER_LEN..]).unwrap();
            assert_eq!(d.original_opcode, opcode::MSG);
            assert_eq!(d.body, reply[HEADER_LEN..]);
        }
        let q = OpQuery {
            flags: 0,
            full_collection_name: "admin.$cmd".into(),
            number_to_skip: 0,
            number_to_return: -1,
            query: doc! { "hello": 1 },
            return_fields_selector: None,
        };
        let wrapped = compress(&encode_query(5, &q), Compressor::Zlib);
        let (header, body) = split(&wrapped);
        let (Request::Query(got), Some(Compressor::Zlib)) = decode(&header, body).unwrap() else {
            panic!("wrong decode")
        };
        assert_eq!(got, q);
    }

    fn wrapper(original: i32, size: i32, id: u8, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&original.to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
        b.push(id);
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn bad_wrappers_rejected() {
        assert!(matches!(
            decompress(&wrapper(opcode::MSG, 5, 4, b"next")),
            Err(WireError::UnsupportedCompressor(4))
        ));
        assert!(matches!(
            decompress(&wrapper(opcode::MSG, -1, 0, b"")),
            Err(WireError::Malformed(_))
        ));
        assert!(matches!(
            decompress(&wrapper(opcode::MSG, i32::MAX, 1, b"")),
            Err(WireError::TooLarge { .. })
        ));
        // Declared size disagreeing with the real one, for each compressor.
        let payload = vec![7u8; 1000];
        for c in ALL {
            let data = compress_payload(&payload, c).unwrap();
            for size in [999, 1001] {
                assert!(
                    decompress(&wrapper(opcode::MSG, size, c.id(), &data)).is_err(),
                    "{c:?}"
                );
            }
            assert!(decompress(&wrapper(opcode::MSG, 1000, c.id(), &data)).is_ok());
        }
        // Garbage payloads.
        assert!(decompress(&wrapper(opcode::MSG, 10, 1, &[0xff; 10])).is_err());
        assert!(decompress(&wrapper(opcode::MSG, 10, 2, &[0xff; 10])).is_err());
        assert!(matches!(
            decompress(&wrapper(opcode::MSG, 10, 3, &[0xff; 10])),
            Err(WireError::Malformed(_))
        ));
        // A valid zstd frame cut short.
        let frame = compress_payload(&payload, Compressor::Zstd).unwrap();
        assert!(matches!(
            decompress(&wrapper(opcode::MSG, 1000, 3, &frame[..frame.len() - 3])),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn nested_compression_rejected() {
        let inner = compress(&encode_msg(1, 0, 0, &doc! { "ping": 1 }), Compressor::Noop);
        let outer = compress(&inner, Compressor::Noop);
        let (header, body) = split(&outer);
        assert!(matches!(
            decode(&header, body),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn names_and_ids() {
        for c in ALL {
            assert_eq!(Compressor::from_id(c.id()).unwrap(), c);
            assert_eq!(Compressor::from_name(c.name()), Some(c));
        }
        assert_eq!(Compressor::from_id(3).unwrap(), Compressor::Zstd);
        assert_eq!(Compressor::from_name("lz4"), None);
    }
}

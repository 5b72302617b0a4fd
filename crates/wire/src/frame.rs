//! The standard message header and reading whole messages off a byte stream.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::WireError;
use crate::HEADER_LEN;

/// The 16-byte `MsgHeader` that starts every wire protocol message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Total message length in bytes, including these 16 header bytes.
    pub message_length: i32,
    /// Sender-chosen id; a reply echoes it in `response_to`.
    pub request_id: i32,
    /// The `request_id` this message answers (0 for requests).
    pub response_to: i32,
    /// Message kind; see [`crate::opcode`].
    pub op_code: i32,
}

impl Header {
    /// Parses a header from its little-endian wire form. Any 16 bytes are a syntactically
    /// valid header; the fields are validated by [`read_message`] and [`crate::decode`].
    pub fn from_bytes(bytes: &[u8; HEADER_LEN]) -> Self {
        let field =
            |i: usize| i32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        Self {
            message_length: field(0),
            request_id: field(4),
            response_to: field(8),
            op_code: field(12),
        }
    }

    /// Serializes the header to its little-endian wire form.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        for (chunk, value) in out.chunks_exact_mut(4).zip([
            self.message_length,
            self.request_id,
            self.response_to,
            self.op_code,
        ]) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        out
    }
}

/// Reads one whole message: its header and the bytes after the header.
///
/// Returns `Ok(None)` on a clean EOF before any byte of a header, which is how a client
/// normally hangs up. EOF part-way through a message is an [`WireError::Io`] error.
///
/// A declared length below [`HEADER_LEN`] or above `max_size` is rejected before the body is
/// read or allocated, so a hostile length cannot make us allocate; the stream is then out of
/// sync and the caller should close the connection.
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    max_size: usize,
) -> Result<Option<(Header, Vec<u8>)>, WireError> {
    let mut raw = [0u8; HEADER_LEN];
    let mut filled = 0;
    // `read_exact` cannot tell "no message at all" from "truncated header", so fill by hand.
    while filled < HEADER_LEN {
        match r.read(&mut raw[filled..]).await {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }

    let header = Header::from_bytes(&raw);
    let length = usize::try_from(header.message_length)
        .ok()
        .filter(|&len| len >= HEADER_LEN)
        .ok_or(WireError::TooSmall(header.message_length))?;
    if length > max_size {
        return Err(WireError::TooLarge {
            size: length,
            max: max_size,
        });
    }

    let mut body = vec![0u8; length - HEADER_LEN];
    r.read_exact(&mut body).await?;
    Ok(Some((header, body)))
}

/// Starts a message in `out`, with a placeholder length patched by [`finish_message`].
pub(crate) fn begin_message(request_id: i32, response_to: i32, op_code: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(
        &Header {
            message_length: 0,
            request_id,
            response_to,
            op_code,
        }
        .to_bytes(),
    );
    out
}

/// Writes the final total length into the header started by [`begin_message`].
pub(crate) fn finish_message(out: &mut [u8]) {
    // Replies are bounded by BSON's 16 MiB document limit times the batch sizes we produce,
    // far below i32::MAX; saturating keeps this total without a panic path.
    let len = i32::try_from(out.len()).unwrap_or(i32::MAX);
    out[..4].copy_from_slice(&len.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_msg, MAX_MESSAGE_SIZE};
    use bson::doc;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn header_roundtrip() {
        let h = Header {
            message_length: 42,
            request_id: -7,
            response_to: 9,
            op_code: 2013,
        };
        let bytes = h.to_bytes();
        assert_eq!(&bytes[..4], &42i32.to_le_bytes());
        assert_eq!(&bytes[12..], &2013i32.to_le_bytes());
        assert_eq!(Header::from_bytes(&bytes), h);
    }

    #[tokio::test]
    async fn two_messages_back_to_back_then_eof() {
        let first = encode_msg(1, 0, 0, &doc! { "ping": 1 });
        let second = encode_msg(2, 0, 0, &doc! { "hello": 1, "pad": "x".repeat(1000) });
        let (mut client, mut server) = tokio::io::duplex(64);
        let (a, b) = (first.clone(), second.clone());
        let writer = tokio::spawn(async move {
            // Small duplex buffer + separate writes exercise reads split across chunks.
            client.write_all(&a).await.unwrap();
            client.write_all(&b).await.unwrap();
        });

        let (h1, b1) = read_message(&mut server, MAX_MESSAGE_SIZE)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(h1.request_id, 1);
        assert_eq!(h1.message_length as usize, first.len());
        assert_eq!(b1, first[HEADER_LEN..]);
        let (h2, b2) = read_message(&mut server, MAX_MESSAGE_SIZE)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(h2.request_id, 2);
        assert_eq!(b2, second[HEADER_LEN..]);

        writer.await.unwrap();
        assert!(read_message(&mut server, MAX_MESSAGE_SIZE)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn clean_eof_is_none() {
        let mut empty: &[u8] = &[];
        assert!(read_message(&mut empty, MAX_MESSAGE_SIZE)
            .await
            .unwrap()
            .is_none());
    }

    #[tokio::test]
    async fn eof_inside_header_or_body_is_an_error() {
        let msg = encode_msg(1, 0, 0, &doc! { "ping": 1 });
        let mut partial_header = &msg[..7];
        assert!(matches!(
            read_message(&mut partial_header, MAX_MESSAGE_SIZE).await,
            Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof
        ));
        let mut partial_body = &msg[..msg.len() - 1];
        assert!(matches!(
            read_message(&mut partial_body, MAX_MESSAGE_SIZE).await,
            Err(WireError::Io(_))
        ));
    }

    #[tokio::test]
    async fn oversize_length_rejected_without_reading_body() {
        let header = Header {
            message_length: 1_000_001,
            request_id: 1,
            response_to: 0,
            op_code: 2013,
        };
        let bytes = header.to_bytes();
        // Only the header exists: if the body were read we would see EOF instead.
        let mut input = &bytes[..];
        match read_message(&mut input, 1_000_000).await {
            Err(WireError::TooLarge { size, max }) => {
                assert_eq!((size, max), (1_000_001, 1_000_000));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        let mut input = &bytes[..];
        assert!(matches!(
            read_message(&mut input, MAX_MESSAGE_SIZE).await,
            Err(WireError::Io(_))
        ));
    }

    #[tokio::test]
    async fn length_below_header_rejected() {
        for len in [15, 0, -1, i32::MIN] {
            let bytes = Header {
                message_length: len,
                request_id: 1,
                response_to: 0,
                op_code: 2013,
            }
            .to_bytes();
            let mut input = &bytes[..];
            assert!(matches!(
                read_message(&mut input, MAX_MESSAGE_SIZE).await,
                Err(WireError::TooSmall(l)) if l == len
            ));
        }
        // Exactly a header is a (framing-wise) valid empty message.
        let bytes = Header {
            message_length: 16,
            request_id: 1,
            response_to: 0,
            op_code: 2013,
        }
        .to_bytes();
        let mut input = &bytes[..];
        let (_, body) = read_message(&mut input, MAX_MESSAGE_SIZE)
            .await
            .unwrap()
            .unwrap();
        assert!(body.is_empty());
    }
}

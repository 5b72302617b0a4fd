//! OP_MSG (opcode 2013): the message format for all modern commands and replies.

use std::borrow::Cow;
use std::collections::HashSet;

use bson::{Bson, Document, RawDocumentBuf};

use crate::codec::{write_document, ByteReader};
use crate::error::{malformed, WireError};
use crate::frame::{begin_message, finish_message, Header};
use crate::reuse::BodyCache;
use crate::{msg_flags, opcode};

/// Flag bits 0-15 are "required": a receiver must reject any it does not understand.
const REQUIRED_FLAGS_MASK: u32 = 0xFFFF;
/// The required flags this implementation understands.
const KNOWN_REQUIRED_FLAGS: u32 = msg_flags::CHECKSUM_PRESENT | msg_flags::MORE_TO_COME;

const SECTION_BODY: u8 = 0;
const SECTION_SEQUENCE: u8 = 1;
const CHECKSUM_LEN: usize = 4;

/// A kind-1 section: a named run of documents sent outside the body.
///
/// Drivers use these for bulk payloads (e.g. insert's `documents`) so the batch need not be
/// built into one BSON document subject to the 16 MiB limit.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentSequence {
    /// The command field the documents belong to, e.g. `"documents"` or `"updates"`.
    pub identifier: String,
    /// The documents, in order, as validated raw BSON (converted only when a command needs it).
    pub documents: Vec<RawDocumentBuf>,
}

/// The body field a server's decoding leaves as raw BSON ([`crate::decode_request`]):
/// a driver's gossiped `$clusterTime` (`{clusterTime, signature: {hash, keyId}}`),
/// which no command reads and only reports of the command (currentOp, the profiler,
/// the log) show. Converting its two documents, four keys and a binary was 46% of a
/// driver's insert body (callgrind 2026-11-28: 15,950 → 8,600 instructions to
/// convert and drop the body, the system allocator).
pub const KEPT_RAW_FIELD: &str = "$clusterTime";

/// A body field left raw by the decoding ([`KEPT_RAW_FIELD`]), checked as the rest of
/// the body is, with its place among the body's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptField {
    /// How many of the body's fields came before it.
    pub position: usize,
    /// Its value.
    pub raw: RawDocumentBuf,
}

impl KeptField {
    /// `body` as it was sent: with `kept` back in its place when the decoding left one
    /// out (the reports of a command, the encoders).
    pub fn as_sent<'a>(body: &'a Document, kept: Option<&KeptField>) -> Cow<'a, Document> {
        match kept {
            Some(kept) => Cow::Owned(kept.restored(body)),
            None => Cow::Borrowed(body),
        }
    }

    /// `body` with the field back in its place, as it was sent.
    pub fn restored(&self, body: &Document) -> Document {
        let Ok(value) = crate::to_document::to_document(&self.raw) else {
            // Checked when decoded: the conversion takes whatever the check passed.
            return body.clone();
        };
        let mut value = Some(Bson::Document(value));
        let mut out = Document::new();
        for (i, (k, v)) in body.iter().enumerate() {
            if i == self.position {
                out.insert(KEPT_RAW_FIELD, value.take().unwrap_or(Bson::Null));
            }
            out.insert(k.clone(), v.clone());
        }
        if let Some(value) = value {
            out.insert(KEPT_RAW_FIELD, value);
        }
        out
    }
}

/// How [`OpMsg::decode`] decodes a command body.
pub(crate) enum BodyDecoding<'c> {
    /// Whole, `$clusterTime` included ([`crate::decode`]).
    Whole,
    /// `$clusterTime` left raw ([`crate::decode_request`]), from the connection's
    /// previous body where it can be ([`crate::decode_request_reusing`]).
    Keeping(Option<&'c mut BodyCache>),
}

/// A decoded OP_MSG.
#[derive(Debug, Clone, PartialEq)]
pub struct OpMsg {
    /// `flagBits`; see [`msg_flags`]. CHECKSUM_PRESENT has already been verified by decoding.
    pub flags: u32,
    /// The kind-0 section: the command (or reply) document.
    pub body: Document,
    /// The kind-1 sections, in wire order.
    pub sequences: Vec<DocumentSequence>,
    /// The body's `$clusterTime`, when [`crate::decode_request`] left it raw (it is then
    /// not in `body`). [`OpMsg::into_command`] and the encoders put it back.
    pub cluster_time: Option<KeptField>,
}

impl OpMsg {
    /// An OP_MSG with just a body and no flags.
    pub fn new(body: Document) -> Self {
        Self {
            flags: 0,
            body,
            sequences: Vec::new(),
            cluster_time: None,
        }
    }

    /// Whether the sender set MORE_TO_COME: for a request, that no reply must be sent.
    pub fn more_to_come(&self) -> bool {
        self.flags & msg_flags::MORE_TO_COME != 0
    }

    /// Whether the client accepts an exhaust cursor stream in reply.
    pub fn exhaust_allowed(&self) -> bool {
        self.flags & msg_flags::EXHAUST_ALLOWED != 0
    }

    /// Flattens the message into a single command document.
    ///
    /// Each document sequence becomes an array field named by its identifier, so command
    /// handlers see the same shape whether the driver used kind-1 sections or not. Decoding
    /// rejects identifiers that clash with a body field; for hand-built messages a sequence
    /// replaces a body field of the same name.
    pub fn into_command(self) -> Result<Document, WireError> {
        let mut command = match &self.cluster_time {
            Some(kept) => kept.restored(&self.body),
            None => self.body,
        };
        for seq in self.sequences {
            let docs = seq
                .documents
                .iter()
                .map(|d| {
                    Document::try_from(d.as_ref())
                        .map(Bson::Document)
                        .map_err(|e| WireError::Malformed(format!("document sequence entry: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            command.insert(seq.identifier, Bson::Array(docs));
        }
        Ok(command)
    }

    /// Whether [`OpMsg::into_command`] returns the body as decoded: no document sequence
    /// to merge in, no `$clusterTime` to put back.
    pub fn command_is_body(&self) -> bool {
        self.sequences.is_empty() && self.cluster_time.is_none()
    }

    /// Removes and returns the document sequence with this identifier, if present.
    pub fn take_sequence(&mut self, identifier: &str) -> Option<DocumentSequence> {
        let i = self
            .sequences
            .iter()
            .position(|s| s.identifier == identifier)?;
        Some(self.sequences.remove(i))
    }

    /// Decodes the bytes after the header. `header` is needed to verify the checksum, which
    /// covers the header too.
    /// `decoding`: whether the body's `$clusterTime` goes to [`OpMsg::cluster_time`].
    pub(crate) fn decode(
        header: &Header,
        body: &[u8],
        mut decoding: BodyDecoding<'_>,
    ) -> Result<Self, WireError> {
        let mut r = ByteReader::new(body);
        let flags = r.u32("OP_MSG flagBits")?;
        let unknown = flags & REQUIRED_FLAGS_MASK & !KNOWN_REQUIRED_FLAGS;
        if unknown != 0 {
            return Err(malformed(format!(
                "OP_MSG has unknown required flag bits {unknown:#x}"
            )));
        }

        let sections = if flags & msg_flags::CHECKSUM_PRESENT != 0 {
            let split = body
                .len()
                .checked_sub(CHECKSUM_LEN)
                .filter(|&at| at >= 4)
                .ok_or_else(|| malformed("OP_MSG too short for its checksum"))?;
            let (covered, sum) = body.split_at(split);
            let expected = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
            let actual = crc32c::crc32c_append(crc32c::crc32c(&header.to_bytes()), covered);
            if actual != expected {
                return Err(WireError::ChecksumMismatch);
            }
            r.take(r.remaining() - CHECKSUM_LEN, "OP_MSG sections")?
        } else {
            r.take(r.remaining(), "OP_MSG sections")?
        };

        let mut r = ByteReader::new(sections);
        let mut msg_body = None;
        let mut sequences: Vec<DocumentSequence> = Vec::new();
        while !r.is_empty() {
            match r.u8("section kind")? {
                SECTION_BODY => {
                    let doc = match &mut decoding {
                        BodyDecoding::Keeping(bodies) => {
                            r.body_keeping("OP_MSG body", KEPT_RAW_FIELD, bodies.as_deref_mut())?
                        }
                        BodyDecoding::Whole => (r.document("OP_MSG body")?, None),
                    };
                    if msg_body.replace(doc).is_some() {
                        return Err(malformed("OP_MSG has more than one body section"));
                    }
                }
                SECTION_SEQUENCE => sequences.push(decode_sequence(&mut r)?),
                kind => return Err(malformed(format!("unknown OP_MSG section kind {kind}"))),
            }
        }
        let (body, cluster_time) =
            msg_body.ok_or_else(|| malformed("OP_MSG has no body section"))?;

        // into_command merges sequences into the body, so any name clash would silently
        // drop data; mongod rejects these messages too.
        // (One sequence, an insert's or an update's, cannot repeat itself: no set built.)
        let mut seen = HashSet::new();
        for seq in &sequences {
            if sequences.len() > 1 && !seen.insert(seq.identifier.as_str()) {
                return Err(malformed(format!(
                    "duplicate document sequence '{}'",
                    seq.identifier
                )));
            }
            if body.contains_key(&seq.identifier) {
                return Err(malformed(format!(
                    "document sequence '{}' duplicates a body field",
                    seq.identifier
                )));
            }
        }

        Ok(Self {
            flags,
            body,
            sequences,
            cluster_time,
        })
    }
}

fn decode_sequence(r: &mut ByteReader<'_>) -> Result<DocumentSequence, WireError> {
    let size = r.i32("document sequence size")?;
    // The size counts its own four bytes.
    let content_len = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_sub(4))
        .ok_or_else(|| malformed(format!("document sequence size {size} is invalid")))?;
    let mut s = ByteReader::new(r.take(content_len, "document sequence")?);
    let identifier = s.cstring("document sequence identifier")?.to_owned();
    let mut documents = Vec::new();
    while !s.is_empty() {
        documents.push(s.raw_document("document sequence entry")?);
    }
    Ok(DocumentSequence {
        identifier,
        documents,
    })
}

/// Encodes an OP_MSG with only a body section: the form of every server reply.
///
/// `flags` may include MORE_TO_COME for all but the last reply of an exhaust stream, and
/// CHECKSUM_PRESENT to append a CRC-32C.
pub fn encode_msg(request_id: i32, response_to: i32, flags: u32, body: &Document) -> Vec<u8> {
    let mut out = begin_message(request_id, response_to, opcode::MSG);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(SECTION_BODY);
    write_document(&mut out, body);
    finish_with_checksum(out, flags)
}

/// Where the body starts in an OP_MSG with one body section: header, flags, section kind.
pub const MSG_BODY_OFFSET: usize = 16 + 4 + 1;

/// Completes an OP_MSG whose body was written at [`MSG_BODY_OFFSET`] of `buf` (the bytes
/// before it are overwritten), so a large reply is built in one buffer, never copied.
pub fn finish_msg_in_place(
    mut buf: Vec<u8>,
    request_id: i32,
    response_to: i32,
    flags: u32,
) -> Vec<u8> {
    write_msg_head(&mut buf, request_id, response_to, flags);
    finish_with_checksum(buf, flags)
}

/// Writes an OP_MSG's header (its length left for the caller), flags and body section
/// kind over the first [`MSG_BODY_OFFSET`] bytes of `buf`, whose body follows them.
fn write_msg_head(buf: &mut [u8], request_id: i32, response_to: i32, flags: u32) {
    assert!(buf.len() > MSG_BODY_OFFSET, "an OP_MSG needs a body");
    let head = begin_message(request_id, response_to, opcode::MSG);
    buf[..16].copy_from_slice(&head);
    buf[16..20].copy_from_slice(&flags.to_le_bytes());
    buf[20] = SECTION_BODY;
}

/// An OP_MSG kept in pieces: the bytes the server writes itself (header, element
/// names, lengths, the reply's tail) and documents that go to the socket as they are,
/// in the order `framing[..cuts[0]]`, `docs[0]`, `framing[cuts[0]..cuts[1]]`,
/// `docs[1]`, ..., `framing[cuts[n-1]..]`. A batch of 10,000 change events (13 MB)
/// is then written with `writev` straight from the events' own buffers: copying it
/// into one message buffer first was a tenth of a catch-up's server CPU, most of it
/// page faults on the fresh 13 MB buffer.
#[derive(Debug, Default)]
pub struct PiecedMsg {
    framing: Vec<u8>,
    cuts: Vec<usize>,
    docs: Vec<std::sync::Arc<RawDocumentBuf>>,
    /// Bytes of `docs` together.
    docs_len: usize,
}

/// Most slices handed to one `writev` (Linux's IOV_MAX).
const MAX_SLICES_PER_WRITE: usize = 1024;

impl PiecedMsg {
    /// Starts a message whose body will begin at [`MSG_BODY_OFFSET`] of the framing.
    pub fn new() -> PiecedMsg {
        PiecedMsg::with_capacity(0, 0)
    }

    /// [`PiecedMsg::new`] with room for `docs` documents and `framing_bytes` of framing
    /// (a reply of many documents grew its lists and framing as it was written).
    pub fn with_capacity(docs: usize, framing_bytes: usize) -> PiecedMsg {
        let mut framing = Vec::with_capacity(framing_bytes.max(MSG_BODY_OFFSET));
        framing.resize(MSG_BODY_OFFSET, 0);
        PiecedMsg {
            framing,
            cuts: Vec::with_capacity(docs),
            docs: Vec::with_capacity(docs),
            docs_len: 0,
        }
    }

    /// The framing written so far (the caller appends to it).
    pub fn framing(&mut self) -> &mut Vec<u8> {
        &mut self.framing
    }

    /// Places a document (its whole encoding) at the current end of the framing.
    pub fn push_doc(&mut self, doc: std::sync::Arc<RawDocumentBuf>) {
        self.cuts.push(self.framing.len());
        self.docs_len += doc.as_bytes().len();
        self.docs.push(doc);
    }

    /// The message's length in bytes.
    pub fn len(&self) -> usize {
        self.framing.len() + self.docs_len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the header (the body must be complete). A checksum needs the whole
    /// message in one buffer: [`PiecedMsg::flatten`] then.
    pub fn finish(&mut self, request_id: i32, response_to: i32, flags: u32) {
        assert!(
            flags & msg_flags::CHECKSUM_PRESENT == 0,
            "a pieced message carries no checksum"
        );
        write_msg_head(&mut self.framing, request_id, response_to, flags);
        let len = i32::try_from(self.len()).unwrap_or(i32::MAX);
        self.framing[..4].copy_from_slice(&len.to_le_bytes());
    }

    /// The pieces in order, empty ones left out.
    pub fn slices(&self) -> Vec<std::io::IoSlice<'_>> {
        let mut out = Vec::with_capacity(2 * self.docs.len() + 1);
        let mut from = 0;
        for (&cut, doc) in self.cuts.iter().zip(&self.docs) {
            if cut > from {
                out.push(std::io::IoSlice::new(&self.framing[from..cut]));
            }
            out.push(std::io::IoSlice::new(doc.as_bytes()));
            from = cut;
        }
        if self.framing.len() > from {
            out.push(std::io::IoSlice::new(&self.framing[from..]));
        }
        out
    }

    /// The message in one buffer.
    pub fn flatten(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        let mut from = 0;
        for (&cut, doc) in self.cuts.iter().zip(&self.docs) {
            out.extend_from_slice(&self.framing[from..cut]);
            out.extend_from_slice(doc.as_bytes());
            from = cut;
        }
        out.extend_from_slice(&self.framing[from..]);
        out
    }

    /// Writes the whole message with vectored writes.
    pub async fn write_to<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        w: &mut W,
    ) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut slices = self.slices();
        let mut rest: &mut [std::io::IoSlice<'_>] = &mut slices;
        while !rest.is_empty() {
            let take = rest.len().min(MAX_SLICES_PER_WRITE);
            let n = w.write_vectored(&rest[..take]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            std::io::IoSlice::advance_slices(&mut rest, n);
        }
        Ok(())
    }
}

/// Encodes a full OP_MSG, body and document sequences, as a driver would send it.
///
/// Used by tests and benchmark clients; the server itself only needs [`encode_msg`].
pub fn encode_op_msg(request_id: i32, response_to: i32, msg: &OpMsg) -> Vec<u8> {
    let mut out = begin_message(request_id, response_to, opcode::MSG);
    out.extend_from_slice(&msg.flags.to_le_bytes());
    out.push(SECTION_BODY);
    write_document(
        &mut out,
        &KeptField::as_sent(&msg.body, msg.cluster_time.as_ref()),
    );
    for seq in &msg.sequences {
        out.push(SECTION_SEQUENCE);
        let size_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(seq.identifier.as_bytes());
        out.push(0);
        for doc in &seq.documents {
            out.extend_from_slice(doc.as_bytes());
        }
        let size = i32::try_from(out.len() - size_at).unwrap_or(i32::MAX);
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    finish_with_checksum(out, msg.flags)
}

fn finish_with_checksum(mut out: Vec<u8>, flags: u32) -> Vec<u8> {
    let checksum = flags & msg_flags::CHECKSUM_PRESENT != 0;
    if checksum {
        // Reserve the checksum first: the length it covers must include it.
        out.extend_from_slice(&[0; CHECKSUM_LEN]);
    }
    finish_message(&mut out);
    if checksum {
        let covered = out.len() - CHECKSUM_LEN;
        let crc = crc32c::crc32c(&out[..covered]);
        out[covered..].copy_from_slice(&crc.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, Request, HEADER_LEN};
    use bson::doc;

    fn decode_bytes(bytes: &[u8]) -> Result<OpMsg, WireError> {
        let header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        match decode(&header, &bytes[HEADER_LEN..])? {
            (Request::Msg(m), None) => Ok(m),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn insert_msg(flags: u32) -> OpMsg {
        OpMsg {
            cluster_time: None,
            flags,
            body: doc! { "insert": "coll", "$db": "test", "ordered": true },
            sequences: vec![
                DocumentSequence {
                    identifier: "documents".into(),
                    documents: vec![
                        bson::RawDocumentBuf::from_document(&doc! { "_id": 1, "x": "a" }).unwrap(),
                        bson::RawDocumentBuf::from_document(&doc! { "_id": 2, "y": [1, 2] })
                            .unwrap(),
                    ],
                },
                DocumentSequence {
                    identifier: "empty".into(),
                    documents: vec![],
                },
            ],
        }
    }

    #[test]
    fn roundtrip_body_and_sequences() {
        let msg = insert_msg(0);
        let bytes = encode_op_msg(7, 0, &msg);
        let header = Header::from_bytes(bytes[..HEADER_LEN].try_into().unwrap());
        assert_eq!(header.message_length as usize, bytes.len());
        assert_eq!(
            (header.request_id, header.response_to, header.op_code),
            (7, 0, opcode::MSG)
        );
        assert_eq!(decode_bytes(&bytes).unwrap(), msg);
    }

    #[test]
    fn a_pieced_msg_made_with_room_starts_as_a_new_one() {
        for framing_bytes in [0, 5, 4096] {
            let mut roomy = PiecedMsg::with_capacity(8, framing_bytes);
            assert_eq!(
                roomy.framing().as_slice(),
                PiecedMsg::new().framing().as_slice()
            );
            assert!(roomy.framing().capacity() >= framing_bytes);
            assert!(roomy.is_empty() || roomy.len() == MSG_BODY_OFFSET);
        }
    }

    /// A pieced message is byte for byte the message built in one buffer, and
    /// writes whole through a writer that takes a few bytes at a time.
    #[tokio::test]
    async fn pieced_msg_equals_the_flat_one() {
        let docs: Vec<RawDocumentBuf> = (0..3000)
            .map(|i| {
                RawDocumentBuf::from_document(&doc! {"n": i as i64, "pad": "x".repeat(i % 7)})
                    .unwrap()
            })
            .collect();
        let body = doc! {"batch": docs.iter().map(|d| Bson::Document(d.to_document().unwrap())).collect::<Vec<_>>(), "ok": 1.0};
        let flat = encode_msg(3, 4, 0, &body);

        let mut p = PiecedMsg::new();
        let f = p.framing();
        let body_at = f.len();
        f.extend_from_slice(&[0; 4]);
        f.push(0x04);
        f.extend_from_slice(b"batch\0");
        let array_at = f.len();
        f.extend_from_slice(&[0; 4]);
        for (i, d) in docs.iter().enumerate() {
            let f = p.framing();
            f.push(0x03);
            f.extend_from_slice(i.to_string().as_bytes());
            f.push(0);
            p.push_doc(std::sync::Arc::new(d.clone()));
        }
        let f = p.framing();
        f.push(0);
        f.push(0x01);
        f.extend_from_slice(b"ok\0");
        f.extend_from_slice(&1.0f64.to_le_bytes());
        f.push(0);
        for at in [body_at, array_at] {
            let own = p.framing.len() - at - if at == array_at { 1 + 3 + 8 + 1 } else { 0 };
            // Every document lies inside both the body and the array.
            let len = (own + p.docs_len) as i32;
            p.framing()[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
        p.finish(3, 4, 0);
        assert_eq!(p.len(), flat.len());
        assert_eq!(p.flatten(), flat);

        // A writer taking at most 7 bytes per call: partial vectored writes resume.
        struct Trickle(Vec<u8>);
        impl tokio::io::AsyncWrite for Trickle {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                let n = buf.len().min(7);
                self.0.extend_from_slice(&buf[..n]);
                std::task::Poll::Ready(Ok(n))
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
        }
        let mut w = Trickle(Vec::new());
        p.write_to(&mut w).await.unwrap();
        assert_eq!(w.0, flat);
        // And through a writer that takes vectors (a socket pair).
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut b, &mut got)
                .await
                .unwrap();
            got
        });
        p.write_to(&mut a).await.unwrap();
        drop(a);
        assert_eq!(reader.await.unwrap(), flat);
    }

    #[test]
    fn encode_msg_layout() {
        let body = doc! { "ok": 1.0 };
        let bytes = encode_msg(5, 9, msg_flags::MORE_TO_COME, &body);
        let mut body_bytes = Vec::new();
        body.to_writer(&mut body_bytes).unwrap();
        let mut expected = Vec::new();
        expected.extend_from_slice(&((HEADER_LEN + 4 + 1 + body_bytes.len()) as i32).to_le_bytes());
        expected.extend_from_slice(&5i32.to_le_bytes());
        expected.extend_from_slice(&9i32.to_le_bytes());
        expected.extend_from_slice(&2013i32.to_le_bytes());
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.push(0);
        expected.extend_from_slice(&body_bytes);
        assert_eq!(bytes, expected);
        let decoded = decode_bytes(&bytes).unwrap();
        assert!(decoded.more_to_come());
        assert_eq!(decoded.body, body);
    }

    #[test]
    fn into_command_merges_sequences() {
        let cmd = insert_msg(0).into_command();
        assert_eq!(
            cmd.unwrap(),
            doc! {
                "insert": "coll", "$db": "test", "ordered": true,
                "documents": [{ "_id": 1, "x": "a" }, { "_id": 2, "y": [1, 2] }],
                "empty": [],
            }
        );
    }

    #[test]
    fn checksum_valid_and_invalid() {
        let msg = insert_msg(msg_flags::CHECKSUM_PRESENT);
        let bytes = encode_op_msg(1, 0, &msg);
        let expected = crc32c::crc32c(&bytes[..bytes.len() - 4]);
        assert_eq!(bytes[bytes.len() - 4..], expected.to_le_bytes());
        assert_eq!(decode_bytes(&bytes).unwrap(), msg);

        // Corrupt a body byte, then the checksum itself, then the header (also covered).
        for at in [HEADER_LEN + 10, bytes.len() - 1, 4] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(
                matches!(decode_bytes(&bad), Err(WireError::ChecksumMismatch)),
                "byte {at}"
            );
        }

        let reply = encode_msg(2, 1, msg_flags::CHECKSUM_PRESENT, &doc! { "ok": 1 });
        assert_eq!(decode_bytes(&reply).unwrap().body, doc! { "ok": 1 });
    }

    #[test]
    fn known_crc32c_vector() {
        // Guards against accidentally using plain CRC-32 instead of Castagnoli.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    /// Builds raw OP_MSG bytes from a flag word and already-encoded sections.
    fn raw_msg(flags: u32, sections: &[u8]) -> Vec<u8> {
        let mut out = begin_message(1, 0, opcode::MSG);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(sections);
        finish_message(&mut out);
        out
    }

    fn body_section(doc: &Document) -> Vec<u8> {
        let mut out = vec![SECTION_BODY];
        doc.to_writer(&mut out).unwrap();
        out
    }

    #[test]
    fn section_count_and_kind_rules() {
        let one = body_section(&doc! { "ping": 1 });
        assert!(decode_bytes(&raw_msg(0, &one)).is_ok());
        assert!(matches!(
            decode_bytes(&raw_msg(0, &[])),
            Err(WireError::Malformed(_))
        ));
        let two = [one.clone(), one.clone()].concat();
        assert!(matches!(
            decode_bytes(&raw_msg(0, &two)),
            Err(WireError::Malformed(_))
        ));
        let unknown_kind = [one.clone(), vec![2, 0, 0, 0, 0]].concat();
        assert!(matches!(
            decode_bytes(&raw_msg(0, &unknown_kind)),
            Err(WireError::Malformed(_))
        ));
        // Trailing garbage after the body is not a valid section.
        let trailing = [one.clone(), vec![0]].concat();
        assert!(decode_bytes(&raw_msg(0, &trailing)).is_err());
    }

    #[test]
    fn flag_rules() {
        let one = body_section(&doc! { "ping": 1 });
        for bit in 2..16 {
            let err = decode_bytes(&raw_msg(1 << bit, &one)).unwrap_err();
            assert!(err.to_string().contains("unknown required flag"), "{err}");
        }
        // Optional bits (16-31) are ignored.
        let m = decode_bytes(&raw_msg(msg_flags::EXHAUST_ALLOWED | 1 << 20, &one)).unwrap();
        assert!(m.exhaust_allowed());
    }

    #[test]
    fn sequence_size_must_be_exact() {
        let body = body_section(&doc! { "insert": "c" });
        let mut doc_bytes = Vec::new();
        doc! { "a": 1 }.to_writer(&mut doc_bytes).unwrap();
        let seq = |size: i32, extra: &[u8]| {
            let mut s = vec![SECTION_SEQUENCE];
            s.extend_from_slice(&size.to_le_bytes());
            s.extend_from_slice(b"documents\0");
            s.extend_from_slice(&doc_bytes);
            s.extend_from_slice(extra);
            [body.clone(), s].concat()
        };
        let exact = (4 + 10 + doc_bytes.len()) as i32;
        assert!(decode_bytes(&raw_msg(0, &seq(exact, &[]))).is_ok());
        for bad in [exact - 1, exact + 1, 3, 0, -5, i32::MAX] {
            assert!(
                decode_bytes(&raw_msg(0, &seq(bad, &[]))).is_err(),
                "size {bad}"
            );
        }
        // A size covering stray bytes after the last document leaves a partial document.
        assert!(decode_bytes(&raw_msg(0, &seq(exact + 2, &[1, 2]))).is_err());
    }

    #[test]
    fn sequence_name_clashes_rejected() {
        let mut msg = insert_msg(0);
        msg.body.insert("documents", 1);
        assert!(decode_bytes(&encode_op_msg(1, 0, &msg)).is_err());

        let mut msg = insert_msg(0);
        msg.sequences[1].identifier = "documents".into();
        assert!(decode_bytes(&encode_op_msg(1, 0, &msg)).is_err());
    }
}

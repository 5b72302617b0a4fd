//! MongoDB wire protocol framing and codec.
//!
//! This crate knows how messages are laid out on the socket, not what commands mean:
//! [`read_message`] frames bytes off a stream, [`decode`] turns them into a [`Request`]
//! (unwrapping OP_COMPRESSED), and the `encode_*` functions plus [`compress`] build replies.
//! All decoding is bounds-checked, so malformed or hostile input yields a [`WireError`]
//! rather than a panic. A server decodes with [`decode_request_reusing`]: a connection's
//! command body like the previous one is decoded into that one's `Document` (`reuse.rs`).

mod codec;
mod compression;
mod error;
mod frame;
mod op_msg;
mod op_query;
mod request;
mod reuse;
mod to_document;

pub use codec::MAX_BSON_DEPTH;
pub use compression::{compress, Compressor};
pub use error::WireError;
pub use frame::{read_message, Header};
pub use op_msg::{
    encode_msg, encode_op_msg, finish_msg_in_place, DocumentSequence, KeptField, OpMsg, PiecedMsg,
    KEPT_RAW_FIELD, MSG_BODY_OFFSET,
};
pub use op_query::{encode_query, encode_reply, OpQuery};
pub use request::{decode, decode_request, decode_request_reusing, Request};
pub use reuse::BodyCache;

/// Largest message accepted, header included; mongod's `maxMessageSizeBytes`, which
/// servers advertise in `hello` so drivers split batches below it.
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;

/// Size of the standard message header (four little-endian int32s).
pub const HEADER_LEN: usize = 16;

/// The opcodes this crate reads or writes.
pub mod opcode {
    /// OP_REPLY: server reply to a legacy OP_QUERY.
    pub const REPLY: i32 = 1;
    /// OP_QUERY: legacy query, still used for the initial handshake.
    pub const QUERY: i32 = 2004;
    /// OP_COMPRESSED: wraps another message in compressed form.
    pub const COMPRESSED: i32 = 2012;
    /// OP_MSG: the modern request and reply format.
    pub const MSG: i32 = 2013;
}

/// OP_MSG `flagBits`. Bits 0-15 are required (unknown ones are an error), 16-31 optional.
pub mod msg_flags {
    /// The message ends with a CRC-32C of everything before it.
    pub const CHECKSUM_PRESENT: u32 = 1;
    /// Another message follows without waiting: the request wants no reply, or the reply is
    /// one of an exhaust stream.
    pub const MORE_TO_COME: u32 = 1 << 1;
    /// The client can accept multiple replies to this request (exhaust cursors).
    pub const EXHAUST_ALLOWED: u32 = 1 << 16;
}

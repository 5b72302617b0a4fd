//! The single error type returned by every fallible function in this crate.

/// Why a message could not be read or decoded.
///
/// Framing errors ([`WireError::Io`], [`WireError::TooLarge`], [`WireError::TooSmall`]) leave
/// the byte stream at an unknown position, so the caller should close the connection. The
/// others concern one message whose bytes were fully consumed, so the stream is still in sync.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The underlying transport failed, or the peer closed the connection mid-message.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// A message (or a decompressed message) is longer than the size limit.
    #[error("message of {size} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Declared total length in bytes, header included.
        size: usize,
        /// The limit that was exceeded.
        max: usize,
    },

    /// The header declares a total length shorter than the header itself.
    #[error("message length {0} is smaller than the {len}-byte header", len = crate::HEADER_LEN)]
    TooSmall(i32),

    /// The opcode is valid wire protocol but not one this server accepts as a request.
    #[error("unsupported opcode {0}")]
    UnsupportedOpCode(i32),

    /// The bytes do not form a valid message of the declared kind.
    #[error("malformed message: {0}")]
    Malformed(String),

    /// An OP_MSG carried a CRC-32C that does not match its contents.
    #[error("OP_MSG checksum mismatch")]
    ChecksumMismatch,

    /// OP_COMPRESSED named a compressor id we do not know (ids 0-3 are defined).
    #[error("unsupported compressor id {0}")]
    UnsupportedCompressor(u8),
}

/// Shorthand for building a [`WireError::Malformed`].
pub(crate) fn malformed(msg: impl Into<String>) -> WireError {
    WireError::Malformed(msg.into())
}

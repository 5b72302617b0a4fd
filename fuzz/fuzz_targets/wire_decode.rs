//! The wire decoder (OP_MSG, OP_QUERY, OP_COMPRESSED with each compressor) on any
//! bytes: an error, never a panic, a hang or an allocation the input did not pay for.
//! The input is a header (16 bytes) and a body; the header's length is set to the
//! body's, as the connection checks it before decoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailstream_wire::{decode, Header};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<16>() else {
        return;
    };
    let mut header = Header::from_bytes(head);
    header.message_length = i32::try_from(16 + body.len()).unwrap_or(i32::MAX);
    if let Ok((request, _)) = decode(&header, body) {
        // What a decoded request holds can be shown (the server logs it).
        let _ = format!("{request:?}");
    }
});

//! The wire decoder (OP_MSG, OP_QUERY, OP_COMPRESSED with each compressor) on any
//! bytes: an error, never a panic, a hang or an allocation the input did not pay for.
//! The input is a header (16 bytes) and a body; the header's length is set to the
//! body's, as the connection checks it before decoding.
//!
//! A connection decodes a body from the previous one's `Document` where it can: the
//! body is decoded that way after itself with one byte changed (which byte and how
//! taken from the header's request ids), and must come out as a fresh decoding's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailstream_wire::{decode, decode_request, decode_request_reusing, BodyCache, Header, Request};

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
    if body.is_empty() {
        return;
    }
    let mut bodies = BodyCache::default();
    if let Ok((Request::Msg(mut first), _)) = decode_request_reusing(&header, body, &mut bodies) {
        first.cluster_time.take();
        if first.command_is_body() {
            bodies.give_back(first.body);
        }
    }
    let mut changed = body.to_vec();
    let at = header.request_id.unsigned_abs() as usize % changed.len();
    changed[at] ^= (header.response_to as u8) | 1;
    let fresh = decode_request(&header, &changed);
    let reusing = decode_request_reusing(&header, &changed, &mut bodies);
    match (fresh, reusing) {
        (Ok((Request::Msg(a), ca)), Ok((Request::Msg(b), cb))) => {
            assert_eq!(ca, cb);
            // As bytes: key order counts, and a double may be NaN.
            assert_eq!(bson::to_vec(&a.body).ok(), bson::to_vec(&b.body).ok());
            assert_eq!(a.cluster_time, b.cluster_time);
            assert_eq!(a.sequences, b.sequences);
        }
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("decode_request {a:?} but decode_request_reusing {b:?}"),
    }
});

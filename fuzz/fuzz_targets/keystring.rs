//! KeyString, the order-preserving key encoding of indexes and resume tokens: for the
//! values of any BSON document, decoding an encoding gives a value equal to the
//! original in BSON's comparison order, and two values' encodings compare as the
//! values do (for values without a Decimal128: `cmp_bson` orders decimals beyond a
//! double's precision approximately).
#![no_main]

use bson::{Bson, Document};
use libfuzzer_sys::fuzz_target;
use std::cmp::Ordering;
use tailstream_query::compare::cmp_bson;
use tailstream_query::keystring::{decode_values, encode_value};

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = Document::from_reader(data) else {
        return;
    };
    let values: Vec<&Bson> = doc.values().take(2).collect();
    let encoded: Vec<Vec<u8>> = values.iter().map(|v| encode_value(v)).collect();
    for (v, e) in values.iter().zip(&encoded) {
        let back = decode_values(e).expect("an encoding decodes");
        assert_eq!(back.len(), 1, "one value");
        assert_eq!(
            cmp_bson(&back[0], v),
            Ordering::Equal,
            "{v:?} came back as {back:?}"
        );
    }
    // cmp_bson orders decimals beyond a double's precision approximately (the
    // keystring unit tests check those against an exact order): not compared here.
    if let [a, b] = values[..] {
        if has_decimal(a) || has_decimal(b) {
            return;
        }
        assert_eq!(
            cmp_bson(a, b),
            encoded[0].cmp(&encoded[1]),
            "{a:?} against {b:?}"
        );
    }
});

fn has_decimal(v: &Bson) -> bool {
    match v {
        Bson::Decimal128(_) => true,
        Bson::Array(a) => a.iter().any(has_decimal),
        Bson::Document(d) => d.values().any(has_decimal),
        _ => false,
    }
}

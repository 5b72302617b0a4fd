//! The size of a document or value encoded as BSON, computed without encoding it (what
//! a cursor's batch and an error's size limit count), and about what one takes in this
//! server's memory (what a blocking stage's memory limit counts: small documents take
//! several times their encoded size, each value in a 112-byte `Bson`).

use bson::{Bson, Document};

/// The size of `d` encoded as BSON, computed without encoding it (every document a
/// cursor returns was sized this way, by serializing it once more than the reply does).
pub fn encoded_len(d: &Document) -> usize {
    // length prefix + elements + trailing NUL
    4 + d
        .iter()
        .map(|(k, v)| element_len(k.len(), v))
        .sum::<usize>()
        + 1
}

/// Type byte + key (NUL-terminated) + value.
fn element_len(key_len: usize, v: &Bson) -> usize {
    1 + key_len + 1 + value_len(v)
}

/// The bytes of `v` itself inside a document (no type byte, no field name).
pub fn value_len(v: &Bson) -> usize {
    // A string value: int32 length, bytes, NUL.
    let string = |s: &str| 4 + s.len() + 1;
    match v {
        Bson::Double(_) | Bson::DateTime(_) | Bson::Timestamp(_) | Bson::Int64(_) => 8,
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => string(s),
        Bson::Document(d) => encoded_len(d),
        Bson::Array(a) => {
            let mut n = 4 + 1;
            for (i, item) in a.iter().enumerate() {
                n += element_len(decimal_digits(i), item);
            }
            n
        }
        Bson::Binary(b) => {
            // The old binary subtype nests a second length.
            let old = if b.subtype == bson::spec::BinarySubtype::BinaryOld {
                4
            } else {
                0
            };
            4 + 1 + old + b.bytes.len()
        }
        Bson::ObjectId(_) => 12,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MaxKey | Bson::MinKey => 0,
        Bson::RegularExpression(r) => r.pattern.len() + 1 + r.options.len() + 1,
        Bson::JavaScriptCodeWithScope(c) => 4 + string(&c.code) + encoded_len(&c.scope),
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::DbPointer(_) => {
            // Deprecated and opaque (no public fields): measure it by encoding it alone
            // in a document: prefix 4 + type 1 + empty key 1 + trailing NUL 1.
            let mut buf = Vec::new();
            let _ = bson::doc! {"": v.clone()}.to_writer(&mut buf);
            buf.len().saturating_sub(7)
        }
    }
}

fn decimal_digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// What a field of a [`Document`] takes besides its name's and value's own allocations:
/// its entry (hash, name, value) and its slot in the map's index (about 10 bytes at
/// the map's load factor).
pub const FIELD_ENTRY_BYTES: usize =
    std::mem::size_of::<u64>() + std::mem::size_of::<String>() + std::mem::size_of::<Bson>() + 10;

/// What a `Bson` takes where it is held (in an array, a map entry, a state).
pub const BSON_SLOT_BYTES: usize = std::mem::size_of::<Bson>();

/// About what `d` takes in memory, allocations included.
pub fn memory_len(d: &Document) -> usize {
    std::mem::size_of::<Document>()
        + d.iter()
            .map(|(k, v)| FIELD_ENTRY_BYTES + k.len() + heap_len(v))
            .sum::<usize>()
}

/// About what `v` owns outside its own `Bson` ([`BSON_SLOT_BYTES`]): string bytes,
/// nested documents and arrays, binary data.
pub fn heap_len(v: &Bson) -> usize {
    match v {
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => s.len(),
        Bson::Document(d) => memory_len(d),
        Bson::Array(a) => a.iter().map(|x| BSON_SLOT_BYTES + heap_len(x)).sum(),
        Bson::Binary(b) => b.bytes.len(),
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len(),
        Bson::JavaScriptCodeWithScope(c) => c.code.len() + memory_len(&c.scope),
        Bson::DbPointer(_) => value_len(v),
        _ => 0,
    }
}

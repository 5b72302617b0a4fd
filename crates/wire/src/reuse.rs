//! A connection's previous command body, reused for its next one.
//!
//! A driver sends the same command again and again on a connection: the message bus's
//! inserts differ from one another only in their `txnNumber` (and in the session they
//! borrowed, `lsid`, and in `$clusterTime`, which the decoding keeps raw anyway). Building
//! the body's `Document` (its keys, their hashes, the nested session document) was
//! 8,100 of the 10,300 instructions of decoding such an insert, and dropping it another
//! 1,200 (callgrind, bus benchmark, 2026-11-28). So the connection gives the `Document`
//! back after its command ([`BodyCache::give_back`]), and the next body is compared with
//! the previous one element by element: where both hold the same keys in the same order
//! with the same types, only the values whose bytes differ are converted, in place.
//! Anything else (another command, a key more or less, a type the walk leaves to the
//! `bson` crate, a body with a repeated key) is decoded from scratch as before. That
//! comparison still walks the body (6,300 instructions of decoding an insert left);
//! most bodies are laid out exactly as the previous one, though: the same length, and
//! the same bytes everywhere but in values that may hold any bytes (the transaction
//! number, the session id's data, the cluster time). Those are compared byte for byte
//! outside the listed free parts, with no walk at all (3,700 left, most of it checking
//! the inserted documents).
//!
//! What a body decodes to does not depend on the cache: every element either has the
//! exact bytes of an element of the previous body, which decoded to the value the
//! `Document` holds, or is converted by the same walk as a fresh decoding's. The
//! request fuzz test holds the two decodings to the same answers on mutated messages.

use crate::codec::ByteReader;
use crate::op_msg::KeptField;
use crate::to_document::{self, WHAT};
use bson::Document;
use std::ops::Range;

/// The body a connection decoded last, and its `Document` once the command gave it back.
#[derive(Default)]
pub struct BodyCache {
    /// The bytes of the body decoded last (empty when it cannot be reused).
    raw: Vec<u8>,
    /// Its elements other than the kept field, in order.
    elements: Vec<Element>,
    /// The elements of the body being decoded (kept to reuse the allocation).
    next: Vec<Element>,
    /// Where its kept field is, if it has one.
    kept_at: Option<KeptAt>,
    /// The parts of `raw` whose bytes may be anything (see [`BodyCache::same_layout`]),
    /// in order; None when not listed (more elements than [`MAX_LAID_OUT`]).
    free: Option<Vec<Free>>,
    /// That body's `Document`, while it is here (not out with its command).
    doc: Option<Document>,
    /// Bodies decoded from the previous one's `Document` (for tests), and how many of
    /// them were laid out as it was.
    reused: u64,
    laid_out_alike: u64,
}

/// An element of a body other than the kept field: its type, and where its key and
/// its value (length prefixes included) lie in the body's bytes.
struct Element {
    kind: u8,
    key: Range<usize>,
    value: Range<usize>,
}

/// Where a body holds the kept field: its type, its value's bytes, and how many other
/// elements come before it.
struct KeptAt {
    kind: u8,
    value: Range<usize>,
    position: usize,
}

/// A part of a body holding a value of any bit pattern (a number, a time, an id, a
/// binary's data), and the element it belongs to: its index among the body's elements,
/// or [`KEPT`].
struct Free {
    bytes: Range<usize>,
    element: usize,
}

/// [`Free::element`] of a part of the kept field.
const KEPT: usize = usize::MAX;

/// The most elements a body may have for its layout to be compared (the changed ones
/// are noted in a `u64`).
const MAX_LAID_OUT: usize = 64;

impl BodyCache {
    /// Takes back the `Document` of the body decoded last, unchanged (the command made
    /// from it had no document sequence merged in and no `$clusterTime` put back).
    pub fn give_back(&mut self, doc: Document) {
        // A Document with another key count is not the one decoded last, or that body
        // repeated a key (its Document holds the last value under the first one's place:
        // a change to the first would not show).
        if !self.raw.is_empty() && doc.len() == self.elements.len() {
            self.doc = Some(doc);
        }
    }

    /// How many bodies were decoded from the previous one's `Document`.
    pub fn reused(&self) -> u64 {
        self.reused
    }

    /// `to_document::walk_body_keeping`'s answer for `bytes` (a body already checked by
    /// the codec's `bounded_raw`), from the previous body's `Document` where it can be.
    pub(crate) fn body_keeping(
        &mut self,
        bytes: &[u8],
        kept: &str,
    ) -> Option<(Document, Option<KeptField>)> {
        let previous = match self.doc.take().map(|doc| self.same_layout(bytes, doc)) {
            Some(Ok(Some(found))) => {
                self.reused += 1;
                self.laid_out_alike += 1;
                self.raw.copy_from_slice(bytes);
                return Some(found);
            }
            Some(Err(doc)) => Some(doc),
            Some(Ok(None)) | None => None,
        };
        let mut next = std::mem::take(&mut self.next);
        next.clear();
        let kept_at = elements(bytes, kept, &mut next);
        let reused = match (previous, &kept_at) {
            (Some(doc), Some(kept_at)) => self.rewalk(bytes, &next, kept_at, doc),
            _ => None,
        };
        self.reused += u64::from(reused.is_some());
        let found = reused.or_else(|| to_document::walk_body_keeping(bytes, kept));
        self.raw.clear();
        self.free = None;
        if let (Some(kept_at), Some(_)) = (kept_at, &found) {
            self.raw.extend_from_slice(bytes);
            self.free = free_parts(bytes, &next, kept_at.as_ref());
            self.kept_at = kept_at;
        }
        self.next = std::mem::replace(&mut self.elements, next);
        found
    }

    /// `bytes` decoded from `doc`, the `Document` of the previous body, when the two
    /// are laid out alike: the same length and the same bytes outside the values that
    /// may hold any bytes ([`Free`]). Every length, type, key and terminator is then
    /// where it was, so the body is valid as the previous one was, and only the
    /// elements whose values changed are converted again. `Err(doc)`: laid out
    /// otherwise; `Ok(None)`: a changed value did not convert (the doc is dropped).
    fn same_layout(
        &self,
        bytes: &[u8],
        mut doc: Document,
    ) -> Result<Option<(Document, Option<KeptField>)>, Document> {
        let Some(free) = &self.free else {
            return Err(doc);
        };
        if self.raw.is_empty() || bytes.len() != self.raw.len() {
            return Err(doc);
        }
        let mut changed = 0u64;
        let mut from = 0;
        for part in free {
            let gap = from..part.bytes.start;
            if bytes[gap.clone()] != self.raw[gap] {
                return Err(doc);
            }
            let moved = bytes[part.bytes.clone()] != self.raw[part.bytes.clone()];
            if moved && part.element != KEPT {
                changed |= 1 << part.element;
            }
            from = part.bytes.end;
        }
        if bytes[from..] != self.raw[from..] {
            return Err(doc);
        }
        for (i, e) in self.elements.iter().enumerate() {
            if changed & (1 << i) != 0 && convert_into(&mut doc, bytes, e).is_none() {
                return Ok(None);
            }
        }
        let field = match &self.kept_at {
            Some(at) => match bson::RawDocumentBuf::from_bytes(bytes[at.value.clone()].to_vec()) {
                Ok(raw) => Some(KeptField {
                    position: at.position,
                    raw,
                }),
                Err(_) => return Ok(None),
            },
            None => None,
        };
        Ok(Some((doc, field)))
    }

    /// `bytes` (its elements `now`) decoded from `doc`, the `Document` of the previous
    /// body: None unless both bodies hold the same keys with the same types in the same
    /// order (the kept field aside, which may come and go) and every value whose bytes
    /// changed converts.
    fn rewalk(
        &self,
        bytes: &[u8],
        now: &[Element],
        kept_at: &Option<KeptAt>,
        mut doc: Document,
    ) -> Option<(Document, Option<KeptField>)> {
        if self.raw.is_empty() || now.len() != self.elements.len() {
            return None;
        }
        for (new, old) in now.iter().zip(&self.elements) {
            let key = &bytes[new.key.clone()];
            if new.kind != old.kind || key != &self.raw[old.key.clone()] {
                return None;
            }
            if bytes[new.value.clone()] != self.raw[old.value.clone()] {
                convert_into(&mut doc, bytes, new)?;
            }
        }
        let field = match kept_at {
            Some(at) => {
                let mut r = ByteReader::new(&bytes[at.value.clone()]);
                Some(to_document::kept_field(at.kind, &mut r, at.position)?)
            }
            None => None,
        };
        Some((doc, field))
    }
}

/// Converts the value of the element `e` of the body `bytes` into `doc`, in place of
/// the value under its key; None when it does not convert (or `doc` lacks the key).
fn convert_into(doc: &mut Document, bytes: &[u8], e: &Element) -> Option<()> {
    let key = std::str::from_utf8(&bytes[e.key.clone()]).ok()?;
    let mut r = ByteReader::new(&bytes[e.value.clone()]);
    let value = to_document::walk_value(e.kind, &mut r).ok()?;
    if !r.is_empty() {
        return None;
    }
    *doc.get_mut(key)? = value;
    Some(())
}

/// The parts of the body `bytes` (its `elements`, its kept field at `kept_at`) that may
/// hold any bytes, in order: the values of numbers, times, ids and decimals, and the
/// data of binaries of the subtypes the body walk takes, at any depth. None for a
/// body with more than [`MAX_LAID_OUT`] elements.
fn free_parts(bytes: &[u8], elements: &[Element], kept_at: Option<&KeptAt>) -> Option<Vec<Free>> {
    if elements.len() > MAX_LAID_OUT {
        return None;
    }
    let mut tops: Vec<(usize, u8, Range<usize>)> = elements
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.kind, e.value.clone()))
        .collect();
    if let Some(at) = kept_at {
        tops.push((KEPT, at.kind, at.value.clone()));
        tops.sort_by_key(|(_, _, value)| value.start);
    }
    let mut out = Vec::new();
    for (element, kind, value) in tops {
        free_in(bytes, kind, value, element, &mut out);
    }
    Some(out)
}

/// Adds to `out` the parts of the value of type `kind` at `value` in `bytes` that may
/// hold any bytes. A type it does not know leaves the rest of its document fixed (a
/// part left out is only compared, never wrongly taken as free).
fn free_in(bytes: &[u8], kind: u8, value: Range<usize>, element: usize, out: &mut Vec<Free>) {
    match kind {
        0x01 | 0x07 | 0x09 | 0x10 | 0x11 | 0x12 | 0x13 => out.push(Free {
            bytes: value,
            element,
        }),
        // Length, subtype, data: the data of the subtypes the walk converts.
        0x05 if value.len() > 5 && matches!(bytes[value.start + 4], 0x00 | 0x03 | 0x04) => out
            .push(Free {
                bytes: value.start + 5..value.end,
                element,
            }),
        0x03 | 0x04 => {
            let inner = &bytes[value.clone()];
            let Ok(mut r) = to_document::elements(inner) else {
                return;
            };
            let at = |r: &ByteReader<'_>| value.start + inner.len() - 1 - r.remaining();
            while !r.is_empty() {
                let (Ok(kind), Ok(_)) = (r.u8(WHAT), r.cstring_bytes(WHAT)) else {
                    return;
                };
                let start = at(&r);
                if value_bytes(kind, &mut r).is_none() {
                    return;
                }
                free_in(bytes, kind, start..at(&r), element, out);
            }
        }
        _ => {}
    }
}

/// Lists the elements of the body `bytes` other than the kept field into `out`, and
/// returns where the kept field is (`Some(None)`: nowhere); None for a body that is not
/// compared (a type the body walk leaves to the crate, the kept field twice, anything
/// amiss).
fn elements(bytes: &[u8], kept: &str, out: &mut Vec<Element>) -> Option<Option<KeptAt>> {
    let mut r = to_document::elements(bytes).ok()?;
    let at = |r: &ByteReader<'_>| bytes.len() - 1 - r.remaining();
    let mut kept_at = None;
    while !r.is_empty() {
        let kind = r.u8(WHAT).ok()?;
        let key_start = at(&r);
        let key = r.cstring_bytes(WHAT).ok()?;
        let key = key_start..key_start + key.len();
        let value_start = at(&r);
        value_bytes(kind, &mut r)?;
        let value = value_start..at(&r);
        if &bytes[key.clone()] != kept.as_bytes() {
            out.push(Element { kind, key, value });
            continue;
        }
        let found = KeptAt {
            kind,
            value,
            position: out.len(),
        };
        if kept_at.replace(found).is_some() {
            return None;
        }
    }
    Some(kept_at)
}

/// The bytes of the value of type `kind` at the cursor (length prefixes included),
/// for the types the body walk converts; None for the others.
fn value_bytes<'a>(kind: u8, r: &mut ByteReader<'a>) -> Option<&'a [u8]> {
    let start = r.rest();
    match kind {
        0x0A => {}
        0x08 => {
            r.take(1, WHAT).ok()?;
        }
        0x10 => {
            r.take(4, WHAT).ok()?;
        }
        0x01 | 0x09 | 0x11 | 0x12 => {
            r.take(8, WHAT).ok()?;
        }
        0x07 => {
            r.take(12, WHAT).ok()?;
        }
        0x13 => {
            r.take(16, WHAT).ok()?;
        }
        0x02 => {
            let len = usize::try_from(r.i32(WHAT).ok()?).ok()?;
            r.take(len, WHAT).ok()?;
        }
        0x03 | 0x04 => {
            r.document_bytes(WHAT).ok()?;
        }
        0x05 => {
            let len = usize::try_from(r.i32(WHAT).ok()?).ok()?;
            r.take(len.checked_add(1)?, WHAT).ok()?;
        }
        _ => return None,
    }
    Some(&start[..start.len() - r.remaining()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;
    use bson::{doc, Binary};

    /// A driver's insert: its transaction number, its session's id byte, and a
    /// `$clusterTime` or none.
    fn insert(txn: i64, session: u8, cluster_time: bool) -> Vec<u8> {
        let id = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![session; 16],
        };
        let mut d = doc! {"insert": "bus", "ordered": true, "lsid": {"id": id}, "txnNumber": txn};
        if cluster_time {
            let time = bson::Timestamp {
                time: 1,
                increment: txn as u32,
            };
            d.insert("$clusterTime", doc! {"clusterTime": time});
        }
        d.insert("$db", "bench");
        bson::to_vec(&d).unwrap()
    }

    /// The cache's answer for `bytes` and a fresh walk's, each as the bytes of the
    /// command as sent (key order included); the Document goes back to the cache.
    fn both(cache: &mut BodyCache, bytes: &[u8]) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let as_sent = |(d, k): &(Document, Option<KeptField>)| {
            bson::to_vec(&*KeptField::as_sent(d, k.as_ref())).unwrap()
        };
        let fresh = to_document::walk_body_keeping(bytes, "$clusterTime");
        let cached = cache.body_keeping(bytes, "$clusterTime");
        let answers = (cached.as_ref().map(as_sent), fresh.as_ref().map(as_sent));
        if let Some((doc, _)) = cached {
            cache.give_back(doc);
        }
        answers
    }

    #[test]
    fn a_body_that_differs_in_values_is_decoded_from_the_previous_document() {
        let mut cache = BodyCache::default();
        for b in [
            insert(1, 7, true),
            insert(2, 7, true),
            insert(3, 9, false),
            insert(4, 9, true),
        ] {
            let (cached, fresh) = both(&mut cache, &b);
            assert!(cached.is_some());
            assert_eq!(cached, fresh);
        }
        assert_eq!(cache.reused(), 3, "every body after the first");
    }

    #[test]
    fn a_body_laid_out_as_the_previous_one_is_not_walked() {
        let mut cache = BodyCache::default();
        // New transaction numbers, sessions and cluster times: values of any bytes.
        for b in [
            insert(1, 7, true),
            insert(2, 7, true),
            insert(3, 9, true),
            insert(1 << 40, 0, true),
        ] {
            let (cached, fresh) = both(&mut cache, &b);
            assert_eq!(cached, fresh);
        }
        assert_eq!((cache.reused(), cache.laid_out_alike), (3, 3));
        // A string of the same length, a boolean, a binary's subtype: compared, walked.
        let mut cache = BodyCache::default();
        let base = insert(1, 7, true);
        let find = |what: &[u8]| base.windows(what.len()).position(|w| w == what).unwrap();
        let string_at = find(b"bus\0");
        let bool_at = find(b"ordered\0") + 8;
        let subtype_at = find(&[16, 0, 0, 0, 4]) + 4;
        for (at, v) in [
            (string_at, b'x'),
            (bool_at, 0),
            (subtype_at, 3),
            (subtype_at, 2),
        ] {
            let mut b = base.clone();
            b[at] = v;
            assert_eq!(both(&mut cache, &base).0, both(&mut cache, &base).1);
            let (cached, fresh) = both(&mut cache, &b);
            assert_eq!(cached, fresh, "byte {at} set to {v}");
        }
        assert_eq!(cache.laid_out_alike, 4, "only the bases after themselves");
    }

    #[test]
    fn other_keys_types_or_repeated_keys_are_decoded_from_scratch() {
        let mut cache = BodyCache::default();
        let other_type = doc! {"insert": "bus", "ordered": 1, "lsid": {"id": 1}, "txnNumber": 5_i64, "$db": "bench"};
        let extra_key = doc! {"insert": "bus", "ordered": 1, "lsid": {"id": 1}, "txnNumber": 5_i64, "$db": "bench", "x": 1};
        // {a: 1, a: 2, b: 3}: one key fewer in the Document than in the body.
        let repeated = b"\x1a\x00\x00\x00\x10a\x00\x01\x00\x00\x00\x10a\x00\x02\x00\x00\x00\x10b\x00\x03\x00\x00\x00\x00";
        for b in [
            insert(1, 7, true),
            bson::to_vec(&other_type).unwrap(),
            bson::to_vec(&extra_key).unwrap(),
            repeated.to_vec(),
            repeated.to_vec(),
            // {a: 5, a: 2, b: 3}: the first `a` changed, and the Document holds the last.
            [&repeated[..7], &[5], &repeated[8..]].concat(),
            insert(1, 7, false),
        ] {
            let (cached, fresh) = both(&mut cache, &b);
            assert!(cached.is_some());
            assert_eq!(cached, fresh);
        }
        assert_eq!(cache.reused(), 0);
    }

    #[test]
    fn only_the_document_of_the_last_body_is_taken_back() {
        let mut cache = BodyCache::default();
        let (doc, _) = cache
            .body_keeping(&insert(1, 7, true), "$clusterTime")
            .unwrap();
        let mut changed = doc.clone();
        changed.insert("extra", 1);
        cache.give_back(changed);
        assert!(both(&mut cache, &insert(2, 7, true)).0.is_some());
        assert_eq!(
            cache.reused(),
            0,
            "a Document with another key count is dropped"
        );
        cache.give_back(doc);
        let (cached, fresh) = both(&mut cache, &insert(3, 7, true));
        assert_eq!(cached, fresh);
        assert_eq!(cache.reused(), 1);
    }
}

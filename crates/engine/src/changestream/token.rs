//! Change-stream resume tokens in MongoDB's format: `{_data: <hex>}` where the hex is
//! the upper-case KeyString (V1) of `clusterTime, version, tokenType, txnOpIndex,
//! fromInvalidate, uuid|null, eventIdentifier`. The first byte is 0x82 (the
//! Timestamp type) and the next eight are the big-endian cluster time, so tokens sort
//! as strings in stream order and tools that decode them (Debezium, the Kafka
//! connector) read them as they read mongod's.

use crate::core::time::ClusterTime;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::keystring::{self, KeyStringBuilder};

/// The token version written (mongod 7.0's default).
pub const TOKEN_VERSION: i32 = 2;
/// `tokenType` of a high-water-mark token (a position, not an event).
pub const HIGH_WATER_MARK: i32 = 0;
/// `tokenType` of an event's token.
pub const EVENT: i32 = 128;

#[derive(Debug, Clone, PartialEq)]
pub struct ResumeToken {
    /// Cluster time of the event (or position).
    pub ts: ClusterTime,
    pub version: i32,
    pub token_type: i32,
    pub txn_op_index: i64,
    pub from_invalidate: bool,
    pub uuid: Option<bson::Uuid>,
    /// The KeyString of the event identifier, `{operationType, documentKey}` or
    /// `{operationType, operationDescription?}` (shared: a token is cloned for every
    /// queued event; compared as bytes, which is comparing the values).
    pub event_key: Option<Arc<[u8]>>,
    /// Which fragment of an event split by `$changeStreamSplitLargeEvent` (0-based).
    pub fragment: Option<i32>,
}

/// The components of a token that only change between collections (version, type,
/// transaction index, invalidate flag, UUID), with their KeyString, of the last
/// token encoded on this thread.
type MiddleKey = (i32, i32, i64, bool, Option<bson::Uuid>);
thread_local! {
    static MIDDLE: std::cell::RefCell<Option<(MiddleKey, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

impl ResumeToken {
    /// The position "everything before cluster time `ts` has been seen".
    pub fn high_water_mark(ts: ClusterTime) -> ResumeToken {
        ResumeToken {
            ts,
            version: TOKEN_VERSION,
            token_type: HIGH_WATER_MARK,
            txn_op_index: 0,
            from_invalidate: false,
            uuid: None,
            event_key: None,
            fragment: None,
        }
    }

    /// The token of an event: its time, collection UUID and identifier.
    pub fn event(ts: ClusterTime, uuid: Option<bson::Uuid>, event_id: Document) -> ResumeToken {
        let mut b = KeyStringBuilder::new();
        b.append_document(&event_id, false);
        Self::event_with_key(ts, uuid, b.into_bytes())
    }

    /// Like [`Self::event`], with the identifier already KeyString-encoded.
    pub fn event_with_key(
        ts: ClusterTime,
        uuid: Option<bson::Uuid>,
        event_key: Vec<u8>,
    ) -> ResumeToken {
        ResumeToken {
            ts,
            version: TOKEN_VERSION,
            token_type: EVENT,
            txn_op_index: 0,
            from_invalidate: false,
            uuid,
            event_key: Some(Arc::from(event_key)),
            fragment: None,
        }
    }

    pub fn is_high_water_mark(&self) -> bool {
        self.token_type == HIGH_WATER_MARK
    }

    /// The KeyString bytes (what `_data` is the hex of).
    pub fn key_bytes(&self) -> Vec<u8> {
        // Sized for the usual event: a header of about 40 bytes and its identifier.
        let mut b =
            KeyStringBuilder::with_capacity(48 + self.event_key.as_ref().map_or(0, |k| k.len()));
        b.append(&Bson::from(self.ts), false);
        // The components between the time and the event's identifier are the same for
        // every event of a collection: encoded once per thread while they stay the
        // same (they were most of the work of encoding a catch-up's tokens).
        let middle = (
            self.version,
            self.token_type,
            self.txn_op_index,
            self.from_invalidate,
            self.uuid,
        );
        MIDDLE.with(|cached| {
            let mut cached = cached.borrow_mut();
            if cached.as_ref().map(|(k, _)| *k != middle).unwrap_or(true) {
                *cached = Some((middle, self.encode_middle()));
            }
            b.append_encoded(&cached.as_ref().expect("just filled").1);
        });
        if let Some(key) = &self.event_key {
            b.append_encoded(key);
        }
        if let Some(f) = self.fragment {
            b.append(&Bson::Int32(f), false);
        }
        b.append_discriminator_end();
        b.into_bytes()
    }

    /// The KeyString of the version, type, transaction index, invalidate flag and
    /// collection UUID.
    fn encode_middle(&self) -> Vec<u8> {
        let mut b = KeyStringBuilder::with_capacity(32);
        b.append(&Bson::Int32(self.version), false);
        if self.version >= 1 {
            b.append(&Bson::Int32(self.token_type), false);
        }
        b.append(&Bson::Int64(self.txn_op_index), false);
        if self.version >= 1 {
            b.append(&Bson::Boolean(self.from_invalidate), false);
        }
        match self.uuid {
            Some(u) => {
                b.append_binary(u8::from(bson::spec::BinarySubtype::Uuid), &u.bytes(), false)
            }
            None if self.version >= 2 => b.append(&Bson::Null, false),
            None => {}
        }
        b.into_bytes()
    }

    /// Which of two positions comes first: by cluster time, then (at the same time)
    /// by the full encoding.
    pub fn cmp_position(&self, other: &ResumeToken) -> std::cmp::Ordering {
        self.ts
            .cmp(&other.ts)
            .then_with(|| self.key_bytes().cmp(&other.key_bytes()))
    }

    pub fn to_document(&self) -> Document {
        doc! {"_data": keystring::to_hex_upper(&self.key_bytes())}
    }

    /// [`Self::to_document`] as raw BSON (what an event's `_id` is built from).
    /// Written as bytes into one buffer of the final size (built for every event).
    pub fn to_raw_document(&self) -> bson::RawDocumentBuf {
        let mut v = Vec::new();
        self.write_raw_document(&mut v);
        bson::RawDocumentBuf::from_bytes(v).expect("a well-formed token document")
    }

    /// Appends the encoded `{_data: ...}` to `out` (an event being written).
    pub fn write_raw_document(&self, out: &mut Vec<u8>) {
        let key = self.key_bytes();
        let hex_len = key.len() * 2;
        // length, string element "_data" (type, name, length, digits, NUL), final NUL
        let total = 4 + 1 + 6 + 4 + hex_len + 1 + 1;
        out.reserve(total);
        let start = out.len();
        out.extend_from_slice(&(total as i32).to_le_bytes());
        out.push(0x02);
        out.extend_from_slice(b"_data\0");
        out.extend_from_slice(&((hex_len + 1) as i32).to_le_bytes());
        keystring::push_hex_upper(out, &key);
        out.push(0);
        out.push(0);
        debug_assert_eq!(out.len() - start, total);
    }

    /// Parses a token given by a client (`resumeAfter`, `startAfter`).
    pub fn parse(v: &Bson) -> Result<ResumeToken> {
        let d = match v {
            Bson::Document(d) => d,
            _ => return Err(invalid("the resume token must be an object")),
        };
        let data = match d.get("_data") {
            Some(Bson::String(s)) => s,
            _ => {
                return Err(invalid(format!(
                    "Bad resume token: _data of missing or of wrong type. Expected string, got {}",
                    crate::core::format::doc_to_string(d)
                )))
            }
        };
        let bytes = keystring::from_hex(data)
            .map_err(|_| invalid("resume token string was not a valid hex string"))?;
        let values = keystring::decode_values(&bytes)
            .map_err(|e| invalid(format!("invalid resume token: {}", e.message)))?;
        let mut it = values.into_iter();
        let ts = match it.next() {
            Some(Bson::Timestamp(t)) => ClusterTime::from(t),
            Some(_) => {
                return Err(invalid(
                    "invalid resume token: clusterTime is not a Timestamp",
                ))
            }
            None => return Err(invalid("invalid empty resume token")),
        };
        let int = |v: Option<Bson>, what: &str| -> Result<i64> {
            match v {
                Some(Bson::Int32(i)) => Ok(i as i64),
                Some(Bson::Int64(i)) => Ok(i),
                _ => Err(invalid(format!(
                    "Resume Token does not contain a valid {what}"
                ))),
            }
        };
        let version = int(it.next(), "version")? as i32;
        if !(0..=2).contains(&version) {
            return Err(invalid(
                "Invalid Resume Token: only supports version 0, 1 and 2",
            ));
        }
        let token_type = if version >= 1 {
            int(it.next(), "tokenType")? as i32
        } else {
            EVENT
        };
        if token_type != EVENT && token_type != HIGH_WATER_MARK {
            return Err(invalid(format!("Token type {token_type} not recognized")));
        }
        let txn_op_index = int(it.next(), "txnOpIndex")?;
        let from_invalidate = if version >= 1 {
            match it.next() {
                Some(Bson::Boolean(b)) => b,
                _ => return Err(invalid("Resume Token fromInvalidate is not a boolean.")),
            }
        } else {
            false
        };
        let uuid = match it.next() {
            None | Some(Bson::Null) => None,
            Some(Bson::Binary(b)) if b.bytes.len() == 16 => Some(bson::Uuid::from_bytes(
                b.bytes.as_slice().try_into().expect("16 bytes"),
            )),
            Some(_) => return Err(invalid("invalid resume token: the UUID is not a UUID")),
        };
        let event_key = match it.next() {
            None => None,
            Some(Bson::Document(d)) => {
                let mut b = KeyStringBuilder::new();
                b.append_document(&d, false);
                Some(Arc::from(b.into_bytes()))
            }
            Some(_) => return Err(invalid("Resume Token eventIdentifier is not an object")),
        };
        let fragment = match it.next() {
            None => None,
            Some(Bson::Int32(f)) if f >= 0 && version >= 2 => Some(f),
            Some(_) => {
                return Err(invalid(
                    "Resume token 'fragmentNum' must be a non-negative integer.",
                ))
            }
        };
        if it.next().is_some() {
            return Err(invalid("invalid oversized resume token"));
        }
        Ok(ResumeToken {
            ts,
            version,
            token_type,
            txn_op_index,
            from_invalidate,
            uuid,
            event_key,
            fragment,
        })
    }

    /// Whether `self` identifies the same event as `other` (its invalidate or not).
    pub fn same_event(&self, other: &ResumeToken) -> bool {
        self.ts == other.ts
            && self.token_type == other.token_type
            && self.txn_op_index == other.txn_op_index
            && self.uuid == other.uuid
            && self.event_key == other.event_key
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(codes::INVALID_RESUME_TOKEN, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(increment: u32) -> ClusterTime {
        ClusterTime::new(1, increment)
    }

    /// The cluster time whose sortable integer is `v`.
    fn ct(v: u64) -> ClusterTime {
        ClusterTime::from_u64(v)
    }

    #[test]
    fn high_water_mark_matches_mongod() {
        // A high-water-mark token printed by mongod 7.0 (Timestamp(0x67C867A3, 1)).
        let t = ResumeToken::high_water_mark(ClusterTime::new(0x67C867A3, 1));
        assert_eq!(
            t.to_document().get_str("_data").unwrap(),
            "8267C867A3000000012B0429296E1404"
        );
        assert_eq!(t.to_raw_document().to_document().unwrap(), t.to_document());
    }

    #[test]
    fn event_token_matches_mongod_and_roundtrips() {
        let uuid = bson::Uuid::parse_str("d3284e04-d891-4467-a216-0201812e4c4c").unwrap();
        let oid = bson::oid::ObjectId::parse_str("67c867a2fb1cbcd579f4e4de").unwrap();
        let t = ResumeToken::event(
            ClusterTime::new(1741186978, 25),
            Some(uuid),
            doc! {"operationType": "insert", "documentKey": {"_id": oid}},
        );
        let d = t.to_document();
        assert_eq!(
            d.get_str("_data").unwrap(),
            "8267C867A2000000192B042C0100296E5A1004D3284E04D8914467A2160201812E4C4C463C6F7065726174696F6E54797065003C696E736572740046646F63756D656E744B65790046645F6964006467C867A2FB1CBCD579F4E4DE000004"
        );
        assert_eq!(t.to_raw_document().to_document().unwrap(), d);
        let back = ResumeToken::parse(&Bson::Document(d)).unwrap();
        assert!(back.same_event(&t));
        assert_eq!(back.to_document(), t.to_document());
    }

    #[test]
    fn identifier_from_raw_key_matches_the_document_encoding() {
        let oid = bson::oid::ObjectId::parse_str("67c867a2fb1cbcd579f4e4de").unwrap();
        for key in [
            doc! {"_id": oid},
            doc! {"_id": 7, "sk": {"a": [1, "x"]}},
            // Every type read straight from the raw value, with edge values.
            doc! {"_id": i32::MIN, "a": i64::MIN, "b": i64::MAX, "c": -0.0, "d": f64::NAN},
            doc! {"_id": 2.5, "e": f64::INFINITY, "f": 1e300, "g": 3i64, "h": 3.0},
            doc! {"_id": "", "s": "a\u{0}b", "t": "é", "u": bson::oid::ObjectId::new()},
            doc! {"_id": true, "n": Bson::Null, "dt": bson::DateTime::from_millis(-5)},
        ] {
            let raw = bson::RawDocumentBuf::from_document(&key).unwrap();
            let mut b = KeyStringBuilder::new();
            b.append_string_and_raw_document("operationType", "update", "documentKey", &raw)
                .unwrap();
            let from_raw = ResumeToken::event_with_key(at(5), None, b.into_bytes());
            let from_doc = ResumeToken::event(
                at(5),
                None,
                doc! {"operationType": "update", "documentKey": key.clone()},
            );
            assert_eq!(from_raw.to_document(), from_doc.to_document());
        }
    }

    /// The per-thread cache of a token's middle components never leaks one token's
    /// components into another's encoding.
    #[test]
    fn cached_middle_components_follow_each_token() {
        let u1 = bson::Uuid::new();
        let u2 = bson::Uuid::new();
        let mut tokens = vec![
            ResumeToken::event(at(5), Some(u1), doc! {"operationType": "drop"}),
            ResumeToken::event(at(5), Some(u2), doc! {"operationType": "drop"}),
            ResumeToken::event(at(6), None, doc! {"operationType": "dropDatabase"}),
            ResumeToken::high_water_mark(at(7)),
        ];
        let mut invalidate = tokens[0].clone();
        invalidate.from_invalidate = true;
        tokens.push(invalidate);
        let mut in_txn = tokens[1].clone();
        in_txn.txn_op_index = 3;
        tokens.push(in_txn);
        let fresh = |t: &ResumeToken| {
            MIDDLE.with(|c| *c.borrow_mut() = None);
            t.key_bytes()
        };
        let expected: Vec<Vec<u8>> = tokens.iter().map(fresh).collect();
        for round in 0..3 {
            // Each token encoded right after each other one, in several orders.
            for (at, t) in tokens
                .iter()
                .enumerate()
                .rev()
                .cycle()
                .skip(round)
                .take(2 * tokens.len())
            {
                assert_eq!(t.key_bytes(), expected[at], "token {at}, round {round}");
            }
        }
        // Different tokens encode differently (the cache did not flatten them).
        for i in 0..expected.len() {
            for j in i + 1..expected.len() {
                assert_ne!(expected[i], expected[j], "tokens {i} and {j}");
            }
        }
    }

    #[test]
    fn tokens_sort_in_stream_order() {
        let a = ResumeToken::event(at(10), None, doc! {"operationType": "drop"}).to_document();
        let hwm = ResumeToken::high_water_mark(at(11)).to_document();
        let b = ResumeToken::event(at(11), None, doc! {"operationType": "drop"}).to_document();
        assert!(a.get_str("_data").unwrap() < hwm.get_str("_data").unwrap());
        assert!(hwm.get_str("_data").unwrap() < b.get_str("_data").unwrap());
    }

    /// `{_data: <hex>}` of a token made of these components.
    fn token_of(values: &[Bson]) -> Bson {
        let mut b = KeyStringBuilder::new();
        for v in values {
            b.append(v, false);
        }
        b.append_discriminator_end();
        Bson::Document(doc! {"_data": keystring::to_hex_upper(&b.into_bytes())})
    }

    fn time(t: u32) -> Bson {
        Bson::Timestamp(bson::Timestamp {
            time: t,
            increment: 1,
        })
    }

    #[test]
    fn every_component_round_trips() {
        let uuid = bson::Uuid::new();
        let mut in_txn = ResumeToken::event(
            ClusterTime::new(9, 4),
            Some(uuid),
            doc! {"operationType": "update", "documentKey": {"_id": "k", "shard": 2}},
        );
        in_txn.txn_op_index = 3;
        let mut invalidate = ResumeToken::event(ct(20), Some(uuid), doc! {"operationType": "drop"});
        invalidate.from_invalidate = true;
        let mut fragment = in_txn.clone();
        fragment.fragment = Some(2);
        let no_uuid = ResumeToken::event(ct(30), None, doc! {"operationType": "dropDatabase"});
        for t in [
            ResumeToken::high_water_mark(ct(12)),
            in_txn,
            invalidate,
            fragment,
            no_uuid,
        ] {
            let back = ResumeToken::parse(&Bson::Document(t.to_document())).unwrap();
            assert_eq!(back, t);
        }
    }

    /// Tokens sort (as their hex strings, as mongod compares them) by cluster time,
    /// then a position before an event at the same time, then the transaction index,
    /// then an event before its invalidate.
    #[test]
    fn tokens_sort_by_time_type_transaction_index_and_invalidate() {
        let at = |ts: u64, index: i64, key: i32| {
            let mut t = ResumeToken::event(
                ct(ts),
                None,
                doc! {"operationType": "insert", "documentKey": {"_id": key}},
            );
            t.txn_op_index = index;
            t
        };
        let mut invalidate = at(10, 2, 1);
        invalidate.from_invalidate = true;
        let ordered = [
            ResumeToken::high_water_mark(ct(10)),
            at(10, 0, 9),
            at(10, 1, 1),
            at(10, 2, 1),
            invalidate,
            ResumeToken::high_water_mark(ct(11)),
            at(11, 0, 0),
        ];
        let data: Vec<String> = ordered
            .iter()
            .map(|t| t.to_document().get_str("_data").unwrap().to_string())
            .collect();
        for (i, pair) in data.windows(2).enumerate() {
            assert!(pair[0] < pair[1], "token {i} sorts before token {}", i + 1);
        }
    }

    #[test]
    fn older_token_versions_are_read() {
        let uuid = bson::Uuid::new();
        let uuid_key = Bson::Binary(bson::Binary::from_uuid(uuid));
        let id = Bson::Document(doc! {"operationType": "insert", "documentKey": {"_id": 1}});
        let v1 = token_of(&[
            time(5),
            Bson::Int32(1),
            Bson::Int32(EVENT),
            Bson::Int64(0),
            Bson::Boolean(true),
            uuid_key.clone(),
            id.clone(),
        ]);
        let t = ResumeToken::parse(&v1).unwrap();
        assert_eq!(
            (t.version, t.token_type, t.from_invalidate, t.uuid),
            (1, EVENT, true, Some(uuid))
        );
        // Version 0 has no type nor invalidate flag: an event's token.
        let v0 = token_of(&[time(5), Bson::Int32(0), Bson::Int64(2), uuid_key, id]);
        let t = ResumeToken::parse(&v0).unwrap();
        assert_eq!(
            (t.version, t.token_type, t.txn_op_index, t.from_invalidate),
            (0, EVENT, 2, false)
        );
        assert!(t.event_key.is_some());
    }

    #[test]
    fn malformed_components_are_refused_with_their_reason() {
        let v2 = |rest: &[Bson]| {
            let mut values = vec![time(5), Bson::Int32(2)];
            values.extend_from_slice(rest);
            token_of(&values)
        };
        let cases = [
            (
                token_of(&[Bson::Int32(5)]),
                "clusterTime is not a Timestamp",
            ),
            (
                token_of(&[time(5), Bson::Int32(3)]),
                "only supports version 0, 1 and 2",
            ),
            (
                token_of(&[time(5), Bson::String("2".into())]),
                "valid version",
            ),
            (v2(&[Bson::Int32(5)]), "Token type 5 not recognized"),
            (
                v2(&[Bson::Int32(EVENT), Bson::Int64(0), Bson::Int32(1)]),
                "fromInvalidate is not a boolean",
            ),
            (
                v2(&[
                    Bson::Int32(EVENT),
                    Bson::Int64(0),
                    Bson::Boolean(false),
                    Bson::String("uuid".into()),
                ]),
                "the UUID is not a UUID",
            ),
            (
                v2(&[
                    Bson::Int32(EVENT),
                    Bson::Int64(0),
                    Bson::Boolean(false),
                    Bson::Null,
                    Bson::Int32(1),
                ]),
                "eventIdentifier is not an object",
            ),
            (
                v2(&[
                    Bson::Int32(EVENT),
                    Bson::Int64(0),
                    Bson::Boolean(false),
                    Bson::Null,
                    Bson::Document(doc! {"operationType": "drop"}),
                    Bson::Int32(-1),
                ]),
                "'fragmentNum' must be a non-negative integer",
            ),
            (
                v2(&[
                    Bson::Int32(EVENT),
                    Bson::Int64(0),
                    Bson::Boolean(false),
                    Bson::Null,
                    Bson::Document(doc! {"operationType": "drop"}),
                    Bson::Int32(0),
                    Bson::Int32(0),
                ]),
                "oversized",
            ),
            (Bson::Document(doc! {"_data": ""}), "empty resume token"),
        ];
        for (token, reason) in cases {
            let e = ResumeToken::parse(&token).unwrap_err();
            assert_eq!(e.code, codes::INVALID_RESUME_TOKEN, "{token}");
            assert!(e.message.contains(reason), "{token}: {}", e.message);
        }
    }

    /// An event's token and its invalidate's, or its fragments', name the same event;
    /// another transaction index or time does not.
    #[test]
    fn the_same_event_whatever_its_invalidate_flag_or_fragment() {
        let t = ResumeToken::event(
            ct(8),
            None,
            doc! {"operationType": "insert", "documentKey": {"_id": 1}},
        );
        let mut invalidate = t.clone();
        invalidate.from_invalidate = true;
        let mut fragment = t.clone();
        fragment.fragment = Some(1);
        assert!(t.same_event(&invalidate) && t.same_event(&fragment));
        let mut other_index = t.clone();
        other_index.txn_op_index = 1;
        assert!(!t.same_event(&other_index));
        assert!(!t.same_event(&ResumeToken::high_water_mark(ct(8))));
        let other_doc = ResumeToken::event(
            ct(8),
            None,
            doc! {"operationType": "insert", "documentKey": {"_id": 2}},
        );
        assert!(!t.same_event(&other_doc));
    }

    #[test]
    fn a_token_is_written_in_place_after_what_a_buffer_holds() {
        let t = ResumeToken::event(
            ct(8),
            Some(bson::Uuid::new()),
            doc! {"operationType": "drop"},
        );
        let mut out = vec![1, 2, 3];
        t.write_raw_document(&mut out);
        assert_eq!(&out[..3], &[1, 2, 3]);
        assert_eq!(&out[3..], t.to_raw_document().as_bytes());
    }

    #[test]
    fn malformed_tokens_are_invalid_resume_token() {
        for bad in [
            Bson::Int32(1),
            Bson::Document(doc! {}),
            Bson::Document(doc! {"_data": 5}),
            Bson::Document(doc! {"_data": "zz"}),
            Bson::Document(doc! {"_data": "3C6100"}),
        ] {
            let e = ResumeToken::parse(&bad).unwrap_err();
            assert_eq!(e.code, codes::INVALID_RESUME_TOKEN, "{bad:?}");
        }
    }
}

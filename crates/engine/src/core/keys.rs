//! Byte layouts of keys in each storage space. All integers are big-endian so
//! that byte order is numeric order.

use super::time::ClusterTime;
use bson::Bson;
use tailstream_query::keystring;

/// `Docs` key prefix of a collection.
pub fn coll_prefix(coll_id: u32) -> [u8; 4] {
    coll_id.to_be_bytes()
}

/// KeyString of a document's `_id` (the record id within a collection).
pub fn id_key(id: &Bson) -> Vec<u8> {
    keystring::encode_value(id)
}

/// Record key of a time-series measurement (which has no unique `_id` to be keyed by):
/// the cluster time of its insert, big-endian so that key order is insertion order.
pub fn record_key(insert_ts: ClusterTime) -> [u8; 8] {
    insert_ts.to_be_bytes()
}

/// `Docs` key of one document.
pub fn doc_key(coll_id: u32, id_ks: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + id_ks.len());
    k.extend_from_slice(&coll_id.to_be_bytes());
    k.extend_from_slice(id_ks);
    k
}

/// `Index` key prefix of one index.
pub fn index_prefix(index_id: u32) -> [u8; 4] {
    index_id.to_be_bytes()
}

/// `Index` key of one entry: index id, encoded key values, then the record's `_id`
/// so that equal keys of different documents are distinct and ordered by `_id`.
pub fn index_entry_key(index_id: u32, values_ks: &[u8], id_ks: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + values_ks.len() + id_ks.len());
    k.extend_from_slice(&index_id.to_be_bytes());
    k.extend_from_slice(values_ks);
    k.extend_from_slice(id_ks);
    k
}

/// `Oplog` key of an entry.
#[inline]
pub fn oplog_key(ts: ClusterTime) -> [u8; 8] {
    ts.to_be_bytes()
}

/// The time of an `Oplog` key.
#[inline]
pub fn oplog_key_time(key: &[u8]) -> ClusterTime {
    ClusterTime::from_be_bytes(key[..8].try_into().expect("an 8-byte oplog key"))
}

/// `OplogByNs` key: the namespace, a 0 separator (namespaces contain no NUL), then the time.
pub fn oplog_ns_key(ns: &str, ts: ClusterTime) -> Vec<u8> {
    let mut k = Vec::with_capacity(ns.len() + 9);
    k.extend_from_slice(ns.as_bytes());
    k.push(0);
    k.extend_from_slice(&ts.to_be_bytes());
    k
}

/// The time of an `OplogByNs` key (its last eight bytes).
#[inline]
pub fn oplog_ns_key_time(key: &[u8]) -> ClusterTime {
    let time = key
        .len()
        .checked_sub(8)
        .expect("an oplog_by_ns key ends in a time");
    ClusterTime::from_be_bytes(key[time..].try_into().expect("8 bytes"))
}

/// `Catalog` key of a collection.
pub fn catalog_key(ns: &str) -> Vec<u8> {
    let mut k = b"coll:".to_vec();
    k.extend_from_slice(ns.as_bytes());
    k
}

/// A `Docs` value that points at the oplog entry holding the document (an insert not
/// rewritten since): four 0xFF bytes (an impossible BSON length) and the entry's time.
pub fn doc_pointer(ts: ClusterTime) -> [u8; 12] {
    let mut v = [0xFF; 12];
    v[4..].copy_from_slice(&ts.to_be_bytes());
    v
}

/// The oplog time a `Docs` value points at, if it is a pointer rather than a document.
pub fn parse_doc_pointer(v: &[u8]) -> Option<ClusterTime> {
    if v.len() == 12 && v[..4] == [0xFF; 4] {
        Some(ClusterTime::from_be_bytes(
            v[4..].try_into().expect("8 bytes"),
        ))
    } else {
        None
    }
}

/// `Natural` key of a capped collection's document: its collection, then the cluster
/// time of its insert (insertion order).
pub fn natural_key(coll_id: u32, ts: ClusterTime) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&coll_id.to_be_bytes());
    k[4..].copy_from_slice(&ts.to_be_bytes());
    k
}

/// The insert time in a [`natural_key`] (None: not a natural key).
pub fn natural_key_time(key: &[u8]) -> Option<ClusterTime> {
    let ts: [u8; 8] = key.get(4..12)?.try_into().ok()?;
    (key.len() == 12).then(|| ClusterTime::from_be_bytes(ts))
}

/// Which image of a changed document an `Images` entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// The document before the change (`fullDocumentBeforeChange`).
    Before = 1,
    /// The document after an update (`fullDocument: whenAvailable/required`).
    After = 2,
}

/// `Images` key: the cluster time of the write, then the kind (trimmed with the oplog).
pub fn image_key(ts: ClusterTime, kind: ImageKind) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..8].copy_from_slice(&ts.to_be_bytes());
    k[8] = kind as u8;
    k
}

/// The image of operation `index` of the transaction whose `applyOps` entry is at `ts`
/// (after the entry's own images in key order, so trimming by time removes both).
pub fn image_key_at(ts: ClusterTime, index: u32, kind: ImageKind) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[..9].copy_from_slice(&image_key(ts, kind));
    k[9..].copy_from_slice(&index.to_be_bytes());
    k
}

pub const META_COUNTERS: &[u8] = b"counters";
pub const META_OPLOG_TRIM: &[u8] = b"oplog_trim";
/// The replica set's id (`replSetGetConfig` `settings.replicaSetId`): 12 bytes, made once.
pub const META_REPLICA_SET_ID: &[u8] = b"replica_set_id";
/// Retryable writes' records (`write/retry.rs`): this prefix ++ the session's key length
/// (2 bytes) ++ the session's key ++ the record's number (4 bytes), big-endian.
pub const META_RETRY_PREFIX: &[u8] = b"retry:";

/// The common start of every retry record of `session` (at most `u16::MAX` bytes).
pub fn retry_record_prefix(session: &[u8]) -> Vec<u8> {
    let len = u16::try_from(session.len()).expect("a session key of at most 64 KiB");
    let mut k = Vec::with_capacity(META_RETRY_PREFIX.len() + 2 + session.len() + 4);
    k.extend_from_slice(META_RETRY_PREFIX);
    k.extend_from_slice(&len.to_be_bytes());
    k.extend_from_slice(session);
    k
}

/// A driver's session key (`lsid: {id: <UUID>}`: the binary type byte, its subtype and
/// 16 bytes; see the server's `sessions::session_key`).
pub const DRIVER_SESSION_KEY_BYTES: usize = 18;

/// The start of a driver session's retry records: the store keeps one memtable insert
/// position per such prefix (`StoreOptions::meta_insert_hint_prefix_bytes`), since every
/// retryable write of the session writes its record number 0 again. Without it each
/// record was inserted from the top of the memtable's skip list: 3,700 of a bus
/// message's 88,600 instructions (callgrind 2026-11-28, 32 sessions writing in turn),
/// 600 with it.
pub const RETRY_RECORD_HINT_PREFIX_BYTES: usize =
    META_RETRY_PREFIX.len() + 2 + DRIVER_SESSION_KEY_BYTES;

/// Retry record number `seq` of `session`.
pub fn retry_record_key(session: &[u8], seq: u32) -> Vec<u8> {
    let mut k = retry_record_prefix(session);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_images_sort_with_their_entry_time() {
        // The oplog trim deletes images in [image_key(0, Before), image_key(trim, Before)):
        // an image of a transaction's operation must fall in it exactly when its
        // entry's time is below the trim point.
        let trim = ClusterTime::new(1, 1_000);
        let low = image_key(ClusterTime::ZERO, ImageKind::Before);
        let high = image_key(trim, ImageKind::Before);
        for kind in [ImageKind::Before, ImageKind::After] {
            for index in [0, 1, u32::MAX] {
                let below = image_key_at(trim.prev(), index, kind);
                assert!(low[..] <= below[..] && below[..] < high[..]);
                let at = image_key_at(trim, index, kind);
                assert!(at[..] >= high[..]);
            }
            // Operations of one transaction, in their order.
            assert!(image_key_at(trim, 1, kind) < image_key_at(trim, 2, kind));
        }
    }

    #[test]
    fn doc_pointers_are_never_bson() {
        let t = ClusterTime::new(0x0102_0304, 0x0506_0708);
        let p = doc_pointer(t);
        assert_eq!(
            p[4..],
            [1, 2, 3, 4, 5, 6, 7, 8],
            "big-endian, seconds first"
        );
        assert_eq!(parse_doc_pointer(&p), Some(t));
        let mut bytes = Vec::new();
        bson::doc! {"a": 1}.to_writer(&mut bytes).unwrap();
        assert_eq!(parse_doc_pointer(&bytes), None);
    }

    #[test]
    fn a_driver_sessions_records_share_the_hinted_prefix() {
        let session = [&[0x05u8, 0x04][..], &[7u8; 16]].concat();
        assert_eq!(session.len(), DRIVER_SESSION_KEY_BYTES);
        let prefix = retry_record_prefix(&session);
        assert_eq!(prefix.len(), RETRY_RECORD_HINT_PREFIX_BYTES);
        for seq in [0, 1, u32::MAX] {
            assert!(retry_record_key(&session, seq).starts_with(&prefix));
        }
        let other = [&[0x05u8, 0x04][..], &[8u8; 16]].concat();
        assert_ne!(
            retry_record_key(&other, 0)[..RETRY_RECORD_HINT_PREFIX_BYTES],
            prefix[..],
            "another session, another position"
        );
    }

    #[test]
    fn oplog_keys_sort_by_time_and_give_it_back() {
        let a = ClusterTime::new(5, 9);
        let b = ClusterTime::new(6, 1);
        assert!(oplog_key(a) < oplog_key(b));
        assert_eq!(oplog_key_time(&oplog_key(a)), a);
        assert_eq!(oplog_ns_key_time(&oplog_ns_key("a.b", b)), b);
        assert!(
            oplog_ns_key("a.b", b) < oplog_ns_key("a.bc", a),
            "namespace first, separator sorts low"
        );
        assert!(natural_key(7, a) < natural_key(7, b));
        assert!(record_key(a) < record_key(b));
    }
}

//! Retryable writes: the reply to a write carrying `lsid` + `txnNumber` is kept,
//! so a driver's retry after a network error gets the same reply instead of the
//! write being applied twice.

use bson::{Bson, Document};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};

/// Replies kept at most (oldest dropped first).
pub const MAX_RETRY_ENTRIES: usize = 100_000;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    lsid: Vec<u8>,
    txn_number: i64,
}

pub struct RetryCache {
    inner: Mutex<(HashMap<Key, Document>, VecDeque<Key>)>,
}

impl RetryCache {
    pub fn new() -> RetryCache {
        RetryCache {
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    fn key(lsid: &Bson, txn_number: i64) -> Key {
        Key {
            lsid: session_key(lsid),
            txn_number,
        }
    }

    pub fn get(&self, lsid: &Bson, txn_number: i64) -> Option<Document> {
        self.inner
            .lock()
            .0
            .get(&Self::key(lsid, txn_number))
            .cloned()
    }

    pub fn put(&self, lsid: &Bson, txn_number: i64, reply: Document) {
        let key = Self::key(lsid, txn_number);
        let mut g = self.inner.lock();
        let (map, order) = &mut *g;
        if map.insert(key.clone(), reply).is_none() {
            order.push_back(key);
            while order.len() > MAX_RETRY_ENTRIES {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    /// Forgets the replies of ended sessions.
    pub fn end_sessions(&self, lsids: &[Bson]) {
        let mut g = self.inner.lock();
        let ids: Vec<Vec<u8>> = lsids.iter().map(|l| Self::key(l, 0).lsid).collect();
        let (map, order) = &mut *g;
        map.retain(|k, _| !ids.contains(&k.lsid));
        order.retain(|k| !ids.contains(&k.lsid));
    }
}

/// A session's identity: the bytes of its `lsid.id` (drivers may add other fields).
pub fn session_key(lsid: &Bson) -> Vec<u8> {
    let id = match lsid {
        Bson::Document(d) => d.get("id").cloned().unwrap_or(Bson::Null),
        other => other.clone(),
    };
    let mut bytes = Vec::new();
    let _ = bson::doc! {"id": id}.to_writer(&mut bytes);
    bytes
}

//! Retryable writes' reply cache: the reply to a write carrying `lsid` + `txnNumber`
//! is kept, so a driver's retry after a network error gets the same reply instead of
//! the write being applied twice. The cache answers only within the replica-set term
//! (`epoch`) its reply was made in; anything else is asked of the engine's records,
//! which are replicated with the writes (`commands/retryable.rs`).
//!
//! As on mongod, a session has one active retryable write, its highest `txnNumber`:
//! drivers retry only the write in progress, so only its reply is kept, and a write
//! with an older `txnNumber` is refused with TransactionTooOld. Keeping one entry per
//! session (updated in place) instead of one per write keeps the hot path to a hash
//! lookup and an overwrite: the bus benchmark's producer spent 8% of the server's CPU
//! here while the cache evicted an old write for every new one.

use ahash::AHashMap;
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use tailstream_engine::query::error::{codes, Error};

/// Sessions whose last reply is kept at most (the oldest session is forgotten first).
pub const MAX_RETRY_SESSIONS: usize = 100_000;

/// What the cache knows of a retryable write.
pub enum Retry {
    /// Not run yet on this session: run it.
    New,
    /// Already run: its reply, to be sent again.
    Done(Document),
    /// The cache cannot tell (no entry, or one of another term): ask the records.
    Unknown,
}

struct Entry {
    txn_number: i64,
    reply: Document,
    /// The replica-set term the reply was made in.
    epoch: u64,
}

#[derive(Default)]
struct Sessions {
    by_session: AHashMap<Vec<u8>, Entry>,
    /// Sessions in the order they first wrote, for eviction; may hold sessions that
    /// ended since (they are skipped when evicting).
    order: VecDeque<Vec<u8>>,
}

pub struct RetryCache {
    inner: Mutex<Sessions>,
}

impl Default for RetryCache {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryCache {
    pub fn new() -> RetryCache {
        RetryCache {
            inner: Mutex::new(Sessions::default()),
        }
    }

    /// Looks a write up before running it: `Done` with the kept reply for a retry,
    /// TransactionTooOld when the session has run a newer write, `Unknown` when no
    /// entry of term `epoch` says.
    pub fn check(&self, session: &[u8], txn_number: i64, epoch: u64) -> Result<Retry, Error> {
        let g = self.inner.lock();
        match g.by_session.get(session) {
            Some(e) if e.epoch != epoch => Ok(Retry::Unknown),
            Some(e) if e.txn_number == txn_number => Ok(Retry::Done(e.reply.clone())),
            Some(e) if e.txn_number > txn_number => Err(too_old(session, txn_number, e.txn_number)),
            Some(_) => Ok(Retry::New),
            None => Ok(Retry::Unknown),
        }
    }

    /// Forgets what the cache knows of `session` (a write of it stopped partway).
    pub fn forget(&self, session: &[u8]) {
        self.inner.lock().by_session.remove(session);
    }

    /// Keeps the reply of the session's write `txn_number` (replacing an older one).
    pub fn put(&self, session: &[u8], txn_number: i64, reply: Document, epoch: u64) {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let entry = Entry {
            txn_number,
            reply,
            epoch,
        };
        if let Some(e) = g.by_session.get_mut(session) {
            if e.epoch != epoch || e.txn_number <= txn_number {
                *e = entry;
            }
            return;
        }
        g.by_session.insert(session.to_vec(), entry);
        g.order.push_back(session.to_vec());
        while g.by_session.len() > MAX_RETRY_SESSIONS {
            match g.order.pop_front() {
                Some(old) => {
                    g.by_session.remove(&old);
                }
                None => break,
            }
        }
        // Ended sessions leave stale keys in `order`; drop them before it doubles.
        if g.order.len() > 2 * MAX_RETRY_SESSIONS {
            let live = &g.by_session;
            g.order.retain(|k| live.contains_key(k));
        }
    }

    /// Forgets the replies of ended sessions.
    pub fn end_sessions(&self, lsids: &[Bson]) {
        let ids: HashSet<Vec<u8>> = lsids.iter().map(session_key).collect();
        let mut g = self.inner.lock();
        let g = &mut *g;
        g.by_session.retain(|k, _| !ids.contains(k));
        let live = &g.by_session;
        g.order.retain(|k| live.contains_key(k));
    }

    /// Sessions with a kept reply.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().by_session.len()
    }
}

/// TransactionTooOld for a retryable write `txn_number` of `session`, which has run
/// `newer` (mongod's message).
pub fn too_old(session: &[u8], txn_number: i64, newer: i64) -> Error {
    Error::new(
        codes::TRANSACTION_TOO_OLD,
        format!(
            "Retryable write with txnNumber {txn_number} is prohibited on session {} because a newer retryable write with txnNumber {newer} has already started on this session.",
            hex(session),
        ),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// A session's identity: the bytes of its `lsid.id` (drivers may add other fields).
/// Drivers send a UUID (binary subtype 4), kept as its subtype and bytes without any
/// encoding; any other value is encoded as BSON, tagged apart so the two never collide.
pub fn session_key(lsid: &Bson) -> Vec<u8> {
    let id = match lsid {
        Bson::Document(d) => d.get("id").unwrap_or(&Bson::Null),
        other => other,
    };
    if let Bson::Binary(b) = id {
        let mut key = Vec::with_capacity(2 + b.bytes.len());
        key.push(0x05);
        key.push(u8::from(b.subtype));
        key.extend_from_slice(&b.bytes);
        return key;
    }
    let mut bytes = vec![0x00];
    let _ = bson::doc! {"id": id.clone()}.to_writer(&mut bytes);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Binary};

    fn lsid(n: u8) -> Bson {
        Bson::Document(doc! {"id": Binary::from_uuid(bson::Uuid::from_bytes([n; 16]))})
    }

    #[test]
    fn a_retry_gets_the_kept_reply_and_an_older_write_is_refused() {
        let cache = RetryCache::new();
        let s = session_key(&lsid(1));
        assert!(matches!(cache.check(&s, 1, 0), Ok(Retry::Unknown)));
        cache.put(&s, 1, doc! {"n": 1}, 0);
        match cache.check(&s, 1, 0) {
            Ok(Retry::Done(reply)) => assert_eq!(reply, doc! {"n": 1}),
            _ => panic!("the retry of write 1 must get its reply"),
        }
        assert!(matches!(cache.check(&s, 2, 0), Ok(Retry::New)));
        cache.put(&s, 2, doc! {"n": 2}, 0);
        let err = cache
            .check(&s, 1, 0)
            .err()
            .expect("write 1 is older than 2");
        assert_eq!(err.code, codes::TRANSACTION_TOO_OLD);
        // Another term's cache cannot tell; another session is independent.
        assert!(matches!(cache.check(&s, 2, 1), Ok(Retry::Unknown)));
        assert!(matches!(
            cache.check(&session_key(&lsid(2)), 1, 0),
            Ok(Retry::Unknown)
        ));
        assert_eq!(cache.len(), 1);
        cache.forget(&s);
        assert!(matches!(cache.check(&s, 2, 0), Ok(Retry::Unknown)));
    }

    #[test]
    fn ended_sessions_are_forgotten() {
        let cache = RetryCache::new();
        for n in 0..3 {
            cache.put(&session_key(&lsid(n)), 7, doc! {"n": 1}, 0);
        }
        cache.end_sessions(&[lsid(0), lsid(2)]);
        assert_eq!(cache.len(), 1);
        assert!(matches!(
            cache.check(&session_key(&lsid(0)), 7, 0),
            Ok(Retry::Unknown)
        ));
        assert!(matches!(
            cache.check(&session_key(&lsid(1)), 7, 0),
            Ok(Retry::Done(_))
        ));
    }

    #[test]
    fn session_keys_ignore_extra_lsid_fields_and_tell_types_apart() {
        let with_uid = Bson::Document(doc! {
            "id": Binary::from_uuid(bson::Uuid::from_bytes([3; 16])),
            "uid": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![9; 32] },
        });
        assert_eq!(session_key(&with_uid), session_key(&lsid(3)));
        assert_ne!(
            session_key(&Bson::Document(doc! {"id": "x"})),
            session_key(&Bson::Document(doc! {"id": "y"}))
        );
    }
}

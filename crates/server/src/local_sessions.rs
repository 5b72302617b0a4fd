//! The logical sessions this server has seen (mongod's local session cache), listed by
//! the `$listLocalSessions` aggregation stage. A session is recorded when a command
//! carries its `lsid` and forgotten by `endSessions` or after 30 idle minutes
//! (`logicalSessionTimeoutMinutes`).

use ahash::AHashMap;
use bson::{doc, Binary, Bson, Document};
use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// How long an unused session stays listed (hello's `logicalSessionTimeoutMinutes`).
const SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Past this many sessions, recording one first forgets the expired ones.
const PRUNE_ABOVE: usize = 10_000;

/// `uid` of a session: the SHA-256 of the owning user's name; with authentication off
/// every session belongs to the empty user, SHA-256("").
const UNAUTHENTICATED_UID: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

struct Session {
    id: Bson,
    last_use: Instant,
    last_use_date: bson::DateTime,
}

#[derive(Default)]
pub struct LocalSessions {
    sessions: Mutex<AHashMap<Vec<u8>, Session>>,
}

/// The bytes of an lsid's `id` (a UUID), the key of a session, and the `id` itself.
fn session_key(lsid: &Bson) -> Option<(&[u8], &Bson)> {
    let id = match lsid {
        Bson::Document(d) => d.get("id")?,
        _ => return None,
    };
    match id {
        Bson::Binary(b) => Some((&b.bytes, id)),
        _ => None,
    }
}

impl LocalSessions {
    /// Records a use of the session a command names in its `lsid`.
    pub fn touch(&self, lsid: &Bson) {
        let Some((key, id)) = session_key(lsid) else {
            return;
        };
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        // A known session (every command of a driver's session but its first) is
        // updated in place: no key or id copied.
        if let Some(s) = sessions.get_mut(key) {
            s.last_use = now;
            s.last_use_date = bson::DateTime::now();
            return;
        }
        if sessions.len() > PRUNE_ABOVE {
            sessions.retain(|_, s| now.duration_since(s.last_use) < SESSION_TIMEOUT);
        }
        sessions.insert(
            key.to_vec(),
            Session {
                id: id.clone(),
                last_use: now,
                last_use_date: bson::DateTime::now(),
            },
        );
    }

    pub fn end(&self, lsids: &[Bson]) {
        let mut sessions = self.sessions.lock();
        for lsid in lsids {
            if let Some((key, _)) = session_key(lsid) {
                sessions.remove(key);
            }
        }
    }

    /// The documents `$listLocalSessions` yields for its argument: `{}` or
    /// `{allUsers: true}` list every session, `{users: [...]}` those of the named users
    /// (none: with authentication off, sessions belong to no named user).
    pub fn list(&self, spec: &Document) -> Vec<Document> {
        if spec.contains_key("users") && !spec.get_bool("allUsers").unwrap_or(false) {
            return Vec::new();
        }
        let now = Instant::now();
        let sessions = self.sessions.lock();
        let mut listed: Vec<&Session> = sessions
            .values()
            .filter(|s| now.duration_since(s.last_use) < SESSION_TIMEOUT)
            .collect();
        listed.sort_by_key(|s| std::cmp::Reverse(s.last_use));
        listed
            .into_iter()
            .map(|s| {
                doc! {
                    "_id": {
                        "id": s.id.clone(),
                        "uid": Binary {
                            subtype: bson::spec::BinarySubtype::Generic,
                            bytes: UNAUTHENTICATED_UID.to_vec(),
                        },
                    },
                    "lastUse": s.last_use_date,
                }
            })
            .collect()
    }
}

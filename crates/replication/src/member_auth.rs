//! Members authenticate to one another with the set's shared key (`--keyFile`), as
//! mongod's members do: every connection a member opens to another authenticates with
//! SCRAM-SHA-256 as `__system` on `local`, the key being the password, before its
//! first command. The receiving member checks the proof as any user's (the server's
//! `auth::keyfile`), and its `__system` user alone may run `replSetRaft`.
//!
//! The client side of SCRAM (RFC 5802 / 7677) is here; the cryptography is the
//! RustCrypto crates' (`pbkdf2`, `hmac`, `sha2`). A member's salted password is
//! derived once per salt and iteration count it is sent (each member keeps one salt
//! for its life): PBKDF2 over 15,000 iterations is milliseconds, a connection's cost
//! otherwise.

use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The user members authenticate as (mongod's internal user).
pub const SYSTEM_USER: &str = "__system";
/// Its database.
pub const SYSTEM_DB: &str = "local";
/// The mechanism members use.
const MECHANISM: &str = "SCRAM-SHA-256";
/// The fewest PBKDF2 iterations accepted from a peer (RFC 7677's minimum).
const MIN_ITERATIONS: u32 = 4096;
/// Random bytes in the client's nonce.
const NONCE_BYTES: usize = 24;
/// Salted passwords kept (one per member the set has had, at most).
const MAX_SALTS: usize = 64;

/// The set's key, once the server read it; none: members do not authenticate.
static KEY: OnceLock<String> = OnceLock::new();
/// A salt and an iteration count.
type SaltId = (Vec<u8>, u32);
/// Salted passwords by salt and iteration count.
static SALTED: OnceLock<Mutex<HashMap<SaltId, Vec<u8>>>> = OnceLock::new();

/// Sets the key this member authenticates with (once, at startup).
pub fn set_key(key: String) {
    if KEY.set(key).is_err() {
        tracing::warn!("the members' key was set twice; the first is kept");
    }
}

/// The key, if the set has one.
pub fn key() -> Option<&'static str> {
    KEY.get().map(String::as_str)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn salted_password(key: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    let cache = SALTED.get_or_init(Default::default);
    let id = (salt.to_vec(), iterations);
    if let Some(s) = cache.lock().expect("salt cache").get(&id) {
        return s.clone();
    }
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(key.as_bytes(), salt, iterations, &mut out);
    let mut g = cache.lock().expect("salt cache");
    if g.len() >= MAX_SALTS {
        g.clear();
    }
    g.insert(id, out.to_vec());
    out.to_vec()
}

fn payload(reply: &Document) -> Result<String, String> {
    let bytes = match reply.get("payload") {
        Some(Bson::Binary(b)) => b.bytes.clone(),
        Some(Bson::String(s)) => s.clone().into_bytes(),
        _ => return Err("a SASL reply without a payload".into()),
    };
    String::from_utf8(bytes).map_err(|_| "a SASL payload that is not UTF-8".into())
}

fn binary(s: &str) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes: s.as_bytes().to_vec(),
    })
}

fn refused(step: &str, reply: &Document) -> Option<String> {
    let ok = match reply.get("ok") {
        Some(Bson::Double(d)) => *d == 1.0,
        Some(Bson::Int32(i)) => *i == 1,
        Some(Bson::Int64(i)) => *i == 1,
        _ => false,
    };
    (!ok).then(|| {
        format!(
            "{step} refused: {}",
            reply.get_str("errmsg").unwrap_or("no errmsg")
        )
    })
}

/// One SCRAM conversation, the client's side.
pub struct Conversation {
    key: &'static str,
    client_first_bare: String,
    nonce: String,
}

impl Conversation {
    /// Starts one with the set's key: None when the set has no key.
    pub fn start() -> Option<Conversation> {
        let key = key()?;
        let nonce_bytes: [u8; NONCE_BYTES] = rand::random();
        let nonce = BASE64.encode(nonce_bytes);
        Some(Conversation {
            key,
            client_first_bare: format!("n={SYSTEM_USER},r={nonce}"),
            nonce,
        })
    }

    /// The `saslStart` command.
    pub fn first(&self) -> Document {
        doc! {
            "saslStart": 1,
            "mechanism": MECHANISM,
            "payload": binary(&format!("n,,{}", self.client_first_bare)),
            "options": {"skipEmptyExchange": true},
            "$db": SYSTEM_DB,
        }
    }

    /// The `saslContinue` command answering the server's first reply, and the server
    /// signature its last reply must carry.
    pub fn proof(&self, reply: &Document) -> Result<(Document, Vec<u8>), String> {
        if let Some(e) = refused("saslStart", reply) {
            return Err(e);
        }
        let server_first = payload(reply)?;
        let field = |name: &str| {
            server_first
                .split(',')
                .find_map(|f| f.strip_prefix(name))
                .ok_or_else(|| format!("the server's first SCRAM message has no {name}"))
        };
        let combined = field("r=")?;
        if !combined.starts_with(&self.nonce) || combined.len() <= self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        let salt = BASE64
            .decode(field("s=")?)
            .map_err(|_| "the server's salt is not base64".to_string())?;
        let iterations: u32 = field("i=")?
            .parse()
            .map_err(|_| "the server's iteration count is not a number".to_string())?;
        if iterations < MIN_ITERATIONS {
            return Err(format!("the server asks for {iterations} iterations only"));
        }
        let salted = salted_password(self.key, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = Sha256::digest(&client_key);
        let without_proof = format!("c=biws,r={combined}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac_sha256(&salted, b"Server Key");
        let server_signature = hmac_sha256(&server_key, auth_message.as_bytes());
        let conversation = reply
            .get("conversationId")
            .cloned()
            .unwrap_or(Bson::Int32(1));
        let cmd = doc! {
            "saslContinue": 1,
            "conversationId": conversation,
            "payload": binary(&format!("{without_proof},p={}", BASE64.encode(proof))),
            "$db": SYSTEM_DB,
        };
        Ok((cmd, server_signature))
    }

    /// Checks the server's last reply: its signature proves it knows the key too.
    pub fn verify(reply: &Document, server_signature: &[u8]) -> Result<(), String> {
        if let Some(e) = refused("saslContinue", reply) {
            return Err(e);
        }
        let last = payload(reply)?;
        let v = last
            .strip_prefix("v=")
            .ok_or_else(|| format!("the server's last SCRAM message is not a signature: {last}"))?;
        let sent = BASE64
            .decode(v)
            .map_err(|_| "the server's signature is not base64".to_string())?;
        if sent != server_signature {
            return Err("the server's signature does not match: it has another key".into());
        }
        if reply.get_bool("done") != Ok(true) {
            return Err("the server did not end the SCRAM conversation".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proof_follows_rfc_7677() {
        // RFC 7677's example, with the client's nonce and key in place.
        let c = Conversation {
            key: "pencil",
            client_first_bare: "n=user,r=rOprNGfwEbeRWgbNEkqO".into(),
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
        };
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let reply =
            doc! {"ok": 1, "conversationId": 1, "done": false, "payload": binary(server_first)};
        let (cmd, server_signature) = c.proof(&reply).unwrap();
        let Some(Bson::Binary(p)) = cmd.get("payload") else {
            panic!("a payload")
        };
        assert_eq!(
            String::from_utf8(p.bytes.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            BASE64.encode(&server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let last = doc! {"ok": 1, "done": true, "payload": binary("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")};
        assert!(Conversation::verify(&last, &server_signature).is_ok());
        let forged = doc! {"ok": 1, "done": true, "payload": binary("v=AAAA")};
        assert!(Conversation::verify(&forged, &server_signature).is_err());
    }

    #[test]
    fn a_server_nonce_that_does_not_extend_ours_or_few_iterations_are_refused() {
        let c = Conversation {
            key: "k",
            client_first_bare: "n=__system,r=abc".into(),
            nonce: "abc".into(),
        };
        let first = |p: &str| doc! {"ok": 1, "payload": binary(p)};
        assert!(c.proof(&first("r=xyz1,s=AAAA,i=4096")).is_err());
        assert!(c.proof(&first("r=abc1,s=AAAA,i=100")).is_err());
        assert!(c.proof(&first("r=abc1,s=AAAA,i=4096")).is_ok());
        assert!(c
            .proof(&doc! {"ok": 0, "errmsg": "Authentication failed."})
            .unwrap_err()
            .contains("Authentication failed"));
    }
}

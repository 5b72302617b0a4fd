//! The server side of a SCRAM conversation (RFC 5802, RFC 7677) as mongod runs it over
//! `saslStart` / `saslContinue`: client-first → server-first (nonce, salt, iterations),
//! client-final (proof) → server-final (signature). Every failure is mongod's 18
//! AuthenticationFailed with one message, whatever went wrong, so a client learns
//! nothing about which part was wrong; the proof is compared in constant time.

use super::credentials::{Credential, Mechanism};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use subtle::ConstantTimeEq;
use tailstream_engine::query::error::{codes, Error, Result};

/// A client message longer than this is refused (a SCRAM message is a few hundred
/// bytes; this bounds what a client can make the server parse).
pub const MAX_PAYLOAD_BYTES: usize = 4096;
/// Random bytes in the server's part of the nonce.
const SERVER_NONCE_BYTES: usize = 24;
/// The GS2 header of a client without channel binding, base64 (`c=biws`).
const NO_CHANNEL_BINDING: &str = "biws";

/// mongod's answer to every failed authentication.
pub fn auth_failed() -> Error {
    Error::new(codes::AUTHENTICATION_FAILED, "Authentication failed.")
}

/// The user a client-first message names, and the rest of the conversation's input.
#[derive(Debug)]
pub struct ClientFirst {
    pub user: String,
    client_nonce: String,
    /// `n=...,r=...`: part of the signed message.
    bare: String,
}

/// Parses `n,,n=<user>,r=<nonce>` (no channel binding, no authorization identity).
pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst> {
    let text = message_text(payload)?;
    let bare = text.strip_prefix("n,,").ok_or_else(auth_failed)?;
    let mut parts = bare.split(',');
    let user = parts
        .next()
        .and_then(|p| p.strip_prefix("n="))
        .ok_or_else(auth_failed)?;
    let client_nonce = parts
        .next()
        .and_then(|p| p.strip_prefix("r="))
        .filter(|n| !n.is_empty())
        .ok_or_else(auth_failed)?;
    Ok(ClientFirst {
        user: decode_user(user)?,
        client_nonce: client_nonce.to_string(),
        bare: bare.to_string(),
    })
}

/// A conversation waiting for the client's proof.
#[derive(Debug)]
pub struct Conversation {
    pub mechanism: Mechanism,
    /// `user@db`'s name and database.
    pub user: String,
    pub db: String,
    credential: Credential,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

impl Conversation {
    /// Answers the client's first message: the nonce, the salt and the iterations.
    pub fn start(
        mechanism: Mechanism,
        first: ClientFirst,
        db: &str,
        credential: Credential,
    ) -> (Conversation, Vec<u8>) {
        let mut random = [0u8; SERVER_NONCE_BYTES];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
        let nonce = format!("{}{}", first.client_nonce, BASE64.encode(random));
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        let conversation = Conversation {
            mechanism,
            user: first.user,
            db: db.to_string(),
            credential,
            nonce,
            client_first_bare: first.bare,
            server_first,
        };
        (conversation, reply)
    }

    /// Checks the client's proof (`c=biws,r=<nonce>,p=<proof>`); Ok: the server-final
    /// message (`v=<signature>`) and the client is who it says.
    pub fn finish(&self, payload: &[u8]) -> Result<Vec<u8>> {
        let text = message_text(payload)?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(auth_failed)?;
        let mut parts = without_proof.split(',');
        if parts.next() != Some(&format!("c={NO_CHANNEL_BINDING}")) {
            return Err(auth_failed());
        }
        // The nonce is this conversation's: a replayed or foreign message fails.
        if parts.next().and_then(|p| p.strip_prefix("r=")) != Some(self.nonce.as_str()) {
            return Err(auth_failed());
        }
        let proof = BASE64.decode(proof).map_err(|_| auth_failed())?;
        let m = self.mechanism;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(auth_failed());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let matches: bool = m
            .hash(&client_key)
            .ct_eq(&self.credential.stored_key)
            .into();
        if !matches {
            return Err(auth_failed());
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// A message as text, bounded.
fn message_text(payload: &[u8]) -> Result<&str> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Err(auth_failed());
    }
    std::str::from_utf8(payload).map_err(|_| auth_failed())
}

/// A SCRAM user name: `=2C` is a comma, `=3D` an equals sign; any other `=` is an error.
fn decode_user(raw: &str) -> Result<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(auth_failed()),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(auth_failed());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side, as a driver computes it, to talk to the server's.
    fn client_final(
        m: Mechanism,
        user: &str,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> String {
        let fields: Vec<&str> = server_first.split(',').collect();
        let nonce = fields[0].strip_prefix("r=").unwrap();
        let salt = BASE64
            .decode(fields[1].strip_prefix("s=").unwrap())
            .unwrap();
        let iterations: u32 = fields[2].strip_prefix("i=").unwrap().parse().unwrap();
        let stored =
            super::super::credentials::tests_support::keys(m, user, password, &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = m.hmac(&stored.stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = stored
            .client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", BASE64.encode(proof))
    }

    #[test]
    fn a_conversation_with_the_right_password_succeeds_and_others_fail() {
        for m in [Mechanism::Sha1, Mechanism::Sha256] {
            let cred = Credential::new(m, "ann", "secret").unwrap();
            let first = parse_client_first(b"n,,n=ann,r=abcdef").unwrap();
            assert_eq!(first.user, "ann");
            let (conv, server_first) = Conversation::start(m, first, "admin", cred);
            let server_first = String::from_utf8(server_first).unwrap();
            assert!(server_first.starts_with("r=abcdef"));
            let good = client_final(m, "ann", "secret", "n=ann,r=abcdef", &server_first);
            let reply = conv.finish(good.as_bytes()).unwrap();
            assert!(reply.starts_with(b"v="));
            let bad = client_final(m, "ann", "wrong", "n=ann,r=abcdef", &server_first);
            assert_eq!(conv.finish(bad.as_bytes()).unwrap_err().code, 18);
            // Another conversation's nonce (a replay) fails too.
            let replay = good.replace("r=abcdef", "r=abcdeX");
            assert_eq!(conv.finish(replay.as_bytes()).unwrap_err().code, 18);
        }
    }

    #[test]
    fn malformed_messages_fail_cleanly() {
        for bad in [
            &b""[..],
            b"y,,n=a,r=b",
            b"n,a=x,n=a,r=b",
            b"n,,n=,r=b",
            b"n,,n=a=2,r=b",
            b"n,,n=a",
            b"n,,n=a,r=",
            &[0xff, 0xfe][..],
        ] {
            assert_eq!(parse_client_first(bad).unwrap_err().code, 18, "{bad:?}");
        }
        assert_eq!(
            parse_client_first(&vec![b'a'; MAX_PAYLOAD_BYTES + 1])
                .unwrap_err()
                .code,
            18
        );
        assert_eq!(
            parse_client_first(b"n,,n=a=2Cb=3Dc,r=x").unwrap().user,
            "a,b=c"
        );
        let cred = Credential::new(Mechanism::Sha256, "a", "b").unwrap();
        let (conv, _) = Conversation::start(
            Mechanism::Sha256,
            parse_client_first(b"n,,n=a,r=x").unwrap(),
            "admin",
            cred,
        );
        for bad in [
            &b"c=biws"[..],
            b"c=xx,r=x,p=AAAA",
            b"c=biws,r=x,p=!!!",
            b"p=",
        ] {
            assert_eq!(conv.finish(bad).unwrap_err().code, 18);
        }
    }
}

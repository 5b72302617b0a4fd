//! SCRAM credentials as mongod stores them in `admin.system.users` (`credentials.
//! SCRAM-SHA-1` / `SCRAM-SHA-256`: `iterationCount`, `salt`, `storedKey`, `serverKey`,
//! base64): never the password. The digests, HMAC and PBKDF2 are RustCrypto's.
//!
//! mongod's rules, kept here: SCRAM-SHA-1 salts the hex MD5 of `user:mongo:password`
//! (its old MONGODB-CR digest) with a 16-byte salt and 10,000 iterations; SCRAM-SHA-256
//! the SASLprep'd password with a 28-byte salt and 15,000 iterations (the defaults of
//! `scramIterationCount` / `scramSHA256IterationCount`; a salt is the digest's length
//! less 4 bytes).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bson::{doc, Bson, Document};
use hmac::{Hmac, KeyInit, Mac};
use md5::Digest as _;
use tailstream_engine::query::error::{codes, Error, Result};

/// The SCRAM mechanisms, by their SASL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha1,
    Sha256,
}

/// Both, in mongod's order (a user's default `mechanisms`).
pub const ALL_MECHANISMS: [Mechanism; 2] = [Mechanism::Sha1, Mechanism::Sha256];

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha1 => "SCRAM-SHA-1",
            Mechanism::Sha256 => "SCRAM-SHA-256",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        ALL_MECHANISMS.into_iter().find(|m| m.name() == name)
    }

    /// mongod's default iteration counts.
    fn iterations(self) -> u32 {
        match self {
            Mechanism::Sha1 => 10_000,
            Mechanism::Sha256 => 15_000,
        }
    }

    fn salt_len(self) -> usize {
        match self {
            Mechanism::Sha1 => 16,
            Mechanism::Sha256 => 28,
        }
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => sha1::Sha1::digest(data).to_vec(),
            Mechanism::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    /// HMAC(key, data).
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Mechanism::Sha1 => run::<Hmac<sha1::Sha1>>(key, data),
            Mechanism::Sha256 => run::<Hmac<sha2::Sha256>>(key, data),
        }
    }

    /// The password the mechanism salts: SCRAM-SHA-1 mongod's digest of it, SCRAM-SHA-256
    /// the password SASLprep'd (a password SASLprep refuses fails).
    fn prepared_password(self, user: &str, password: &str) -> Result<String> {
        match self {
            Mechanism::Sha1 => {
                let digest = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
                Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
            }
            Mechanism::Sha256 => stringprep::saslprep(password)
                .map(|p| p.into_owned())
                .map_err(|_| Error::bad_value("Failed to SASLPrep password")),
        }
    }

    fn salted_password(self, prepared: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha1 => {
                let mut out = [0u8; 20];
                pbkdf2::pbkdf2_hmac::<sha1::Sha1>(prepared.as_bytes(), salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(
                    prepared.as_bytes(),
                    salt,
                    iterations,
                    &mut out,
                );
                out.to_vec()
            }
        }
    }
}

/// One mechanism's stored credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// A new credential for `user`'s `password`, with a fresh random salt.
    pub fn new(mech: Mechanism, user: &str, password: &str) -> Result<Credential> {
        let mut salt = vec![0u8; mech.salt_len()];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut salt);
        Credential::with_salt(mech, user, password, salt, mech.iterations())
    }

    fn with_salt(
        mech: Mechanism,
        user: &str,
        password: &str,
        salt: Vec<u8>,
        iterations: u32,
    ) -> Result<Credential> {
        let prepared = mech.prepared_password(user, password)?;
        let salted = mech.salted_password(&prepared, &salt, iterations);
        let client_key = mech.hmac(&salted, b"Client Key");
        Ok(Credential {
            iterations,
            stored_key: mech.hash(&client_key),
            server_key: mech.hmac(&salted, b"Server Key"),
            salt,
        })
    }

    /// As mongod stores it.
    pub fn to_document(&self) -> Document {
        doc! {
            "iterationCount": i32::try_from(self.iterations).unwrap_or(i32::MAX),
            "salt": BASE64.encode(&self.salt),
            "storedKey": BASE64.encode(&self.stored_key),
            "serverKey": BASE64.encode(&self.server_key),
        }
    }

    pub fn from_document(d: &Document) -> Result<Credential> {
        let bytes = |field: &str| -> Result<Vec<u8>> {
            let text = d.get_str(field).map_err(|_| corrupt(field))?;
            BASE64.decode(text).map_err(|_| corrupt(field))
        };
        let iterations = match d.get("iterationCount") {
            Some(Bson::Int32(n)) if *n > 0 => *n as u32,
            Some(Bson::Int64(n)) if *n > 0 => {
                u32::try_from(*n).map_err(|_| corrupt("iterationCount"))?
            }
            _ => return Err(corrupt("iterationCount")),
        };
        Ok(Credential {
            iterations,
            salt: bytes("salt")?,
            stored_key: bytes("storedKey")?,
            server_key: bytes("serverKey")?,
        })
    }
}

fn corrupt(field: &str) -> Error {
    Error::new(
        codes::INTERNAL_ERROR,
        format!("a stored SCRAM credential has a bad '{field}'"),
    )
}

/// mongod's `credentials` document for the given mechanisms.
pub fn credentials_document(user: &str, password: &str, mechs: &[Mechanism]) -> Result<Document> {
    let mut out = Document::new();
    for m in mechs {
        out.insert(m.name(), Credential::new(*m, user, password)?.to_document());
    }
    Ok(out)
}

/// A client's keys, as a driver derives them (for tests that play the client).
#[cfg(test)]
pub mod tests_support {
    use super::Mechanism;

    pub struct Keys {
        pub client_key: Vec<u8>,
        pub stored_key: Vec<u8>,
    }

    pub fn keys(m: Mechanism, user: &str, password: &str, salt: &[u8], iterations: u32) -> Keys {
        let prepared = m.prepared_password(user, password).unwrap();
        let salted = m.salted_password(&prepared, salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        Keys {
            stored_key: m.hash(&client_key),
            client_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5802's example (SCRAM-SHA-1 over the password as given: the test derives
    /// from the salted password directly, mongod's MD5 step being mongod's own).
    #[test]
    fn keys_follow_rfc_5802() {
        let m = Mechanism::Sha1;
        let salt = BASE64.decode("QSXCR+Q6sek8bf92").unwrap();
        let salted = m.salted_password("pencil", &salt, 4096);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored = m.hash(&client_key);
        let auth_message = "n=user,r=fyko+d2lbbFgONRv9qkxdawL,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096,c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j";
        let signature = m.hmac(&stored, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        assert_eq!(BASE64.encode(proof), "v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=");
        let server_key = m.hmac(&salted, b"Server Key");
        let server_signature = m.hmac(&server_key, auth_message.as_bytes());
        assert_eq!(
            BASE64.encode(server_signature),
            "rmF9pqV8S7suAoZWja4dJRkFsKQ="
        );
    }

    /// RFC 7677's SCRAM-SHA-256 example.
    #[test]
    fn sha256_keys_follow_rfc_7677() {
        let m = Mechanism::Sha256;
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = Credential::with_salt(m, "user", "pencil", salt, 4096).unwrap();
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = m.hmac(&cred.server_key, auth_message.as_bytes());
        assert_eq!(
            BASE64.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn a_stored_credential_reads_back_and_salts_differ() {
        let a = Credential::new(Mechanism::Sha256, "u", "pw").unwrap();
        let b = Credential::new(Mechanism::Sha256, "u", "pw").unwrap();
        assert_ne!(a.salt, b.salt);
        assert_eq!(a.salt.len(), 28);
        assert_eq!(Credential::from_document(&a.to_document()).unwrap(), a);
        let sha1 = Credential::new(Mechanism::Sha1, "u", "pw").unwrap();
        assert_eq!((sha1.salt.len(), sha1.iterations), (16, 10_000));
        assert!(Credential::from_document(&doc! {"salt": "!"}).is_err());
    }
}

//! MONGODB-X509: a client connected over TLS proves who it is with the certificate it
//! presented in the handshake (verified there against `--tlsCAFile`); its user is the
//! certificate's subject, in RFC 2253 form, defined in the `$external` database.
//!
//! Reached by the `authenticate` command and by a `hello`'s
//! `speculativeAuthenticate: {authenticate: 1, mechanism: "MONGODB-X509"}`. As mongod,
//! every failure is answered 18 AuthenticationFailed ("Authentication failed.", the
//! reason only in the log) except two a client must be told: 11 UserNotFound (no such
//! user in `$external`) and 17 ProtocolError (a database other than `$external`).

use super::{store, users, Conn};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_engine::query::error::{codes, Error, Result};

/// The mechanism's name on the wire.
pub const MECHANISM: &str = "MONGODB-X509";
/// The only database X.509 users live in.
pub const EXTERNAL_DB: &str = "$external";

/// `authenticate` (or its speculative form in `hello`): the connection becomes the
/// user its certificate names. Replies `{dbname, user}` as mongod.
pub async fn authenticate(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    db: &str,
    cmd: &Document,
    speculative: bool,
) -> Result<Document> {
    let claimed = match cmd.get("user") {
        Some(Bson::String(u)) => Some(u.as_str()),
        _ => None,
    };
    let subject = conn.info.peer_subject.get().cloned();
    let outcome = match check_request(cmd, subject.as_deref(), claimed, db) {
        Ok(subject) => login(state, conn, subject, speculative).await,
        Err(e) => Err(e),
    };
    outcome.map_err(|e| {
        let principal = claimed.or(subject.as_deref()).unwrap_or("");
        log_failure(conn, principal, speculative, &e);
        mask(e)
    })
}

/// What mongod checks before it looks the user up, in its order; the subject to log in
/// as when they pass.
fn check_request<'s>(
    cmd: &Document,
    subject: Option<&'s str>,
    claimed: Option<&str>,
    db: &str,
) -> Result<&'s str> {
    let mechanism = cmd.get_str("mechanism").unwrap_or("");
    if mechanism.is_empty() {
        return Err(Error::bad_value("Auth mechanism not specified"));
    }
    if mechanism != MECHANISM {
        return Err(Error::bad_value(format!(
            "Unsupported mechanism: {mechanism}"
        )));
    }
    let Some(subject) = subject.filter(|s| !s.is_empty()) else {
        return Err(Error::new(
            codes::AUTHENTICATION_FAILED,
            "No verified subject name available from client",
        ));
    };
    if claimed.is_some_and(|c| !c.is_empty() && c != subject) {
        return Err(Error::new(
            codes::AUTHENTICATION_FAILED,
            "There is no x.509 client certificate matching the user.",
        ));
    }
    if db != EXTERNAL_DB {
        return Err(Error::new(
            codes::PROTOCOL_ERROR,
            "X.509 authentication must always use the $external database.",
        ));
    }
    Ok(subject)
}

/// The connection's session becomes the `$external` user named `subject`.
async fn login(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    subject: &str,
    speculative: bool,
) -> Result<Document> {
    let generation = store::generation();
    let Some(user) = users::find(state, subject, EXTERNAL_DB).await? else {
        return Err(Error::new(
            codes::USER_NOT_FOUND,
            format!("Could not find user \"{subject}\" for db \"{EXTERNAL_DB}\""),
        ));
    };
    conn.auth.conversation = None;
    super::log_in(state, conn, user, generation, MECHANISM, speculative).await?;
    Ok(doc! {"dbname": EXTERNAL_DB, "user": subject})
}

/// mongod tells a client only UserNotFound and ProtocolError; anything else is the
/// plain AuthenticationFailed, its reason kept for the log.
fn mask(e: Error) -> Error {
    if e.code == codes::USER_NOT_FOUND || e.code == codes::PROTOCOL_ERROR {
        e
    } else {
        super::scram::auth_failed()
    }
}

fn log_failure(conn: &Conn, principal: &str, speculative: bool, e: &Error) {
    crate::logging::emit(
        "I",
        "ACCESS",
        super::ID_AUTH_FAILURE,
        &format!("conn{}", conn.id),
        "Authentication failed",
        doc! {"mechanism": MECHANISM, "speculative": speculative, "principalName": principal,
        "authenticationDatabase": EXTERNAL_DB, "remote": conn.peer.clone(),
        "error": format!("{}: {}", e.code_name(), e.message)},
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBJECT: &str = "CN=client,OU=tests,O=Tailstream";

    fn cmd(mechanism: &str) -> Document {
        doc! {"authenticate": 1, "mechanism": mechanism}
    }

    #[test]
    fn a_verified_subject_in_external_passes() {
        let r = check_request(&cmd(MECHANISM), Some(SUBJECT), None, EXTERNAL_DB);
        assert_eq!(r.unwrap(), SUBJECT);
        let r = check_request(&cmd(MECHANISM), Some(SUBJECT), Some(SUBJECT), EXTERNAL_DB);
        assert_eq!(r.unwrap(), SUBJECT);
    }

    #[test]
    fn failures_are_told_as_mongod_tells_them() {
        let code = |r: Result<&str>| mask(r.unwrap_err()).code;
        let no_cert = check_request(&cmd(MECHANISM), None, None, EXTERNAL_DB);
        assert_eq!(code(no_cert), codes::AUTHENTICATION_FAILED);
        let other_user = check_request(&cmd(MECHANISM), Some(SUBJECT), Some("CN=x"), EXTERNAL_DB);
        assert_eq!(code(other_user), codes::AUTHENTICATION_FAILED);
        let other_db = check_request(&cmd(MECHANISM), Some(SUBJECT), None, "admin");
        assert_eq!(code(other_db), codes::PROTOCOL_ERROR);
        let scram = check_request(&cmd("SCRAM-SHA-256"), Some(SUBJECT), None, EXTERNAL_DB);
        assert_eq!(code(scram), codes::AUTHENTICATION_FAILED);
        let empty = check_request(&cmd(""), Some(SUBJECT), None, EXTERNAL_DB);
        assert_eq!(code(empty), codes::AUTHENTICATION_FAILED);
    }
}

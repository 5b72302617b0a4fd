//! `--keyFile`: the replica set's shared key, read and checked as mongod reads it, and
//! the internal user `__system@local` whose password it is. Members authenticate to one
//! another as that user (`tailstream_replication::member_auth`); its role, `__system`,
//! is the only one granting `internal`, which `replSetRaft` needs, so a member (or a
//! client) without the key can neither join the set nor read its log. As on mongod, a
//! key file turns authorization on.

use super::credentials::{credentials_document, ALL_MECHANISMS};
use bson::{doc, Document};
use std::path::Path;
use tailstream_engine::query::error::Result;
use tailstream_replication::member_auth::{SYSTEM_DB, SYSTEM_USER};

/// mongod's bounds on a key's length, in characters (whitespace left out).
const MIN_KEY_CHARS: usize = 6;
const MAX_KEY_CHARS: usize = 1024;

/// The key in `path`: its characters but whitespace, which must be base64's, 6 to 1,024
/// of them, in a file that neither its group nor others may read (mongod's checks and
/// messages).
pub fn read(path: &Path) -> std::result::Result<String, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("error getting file {shown}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!("permissions on {shown} are too open"));
        }
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("error reading file {shown}: {e}"))?;
    let key: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')))
    {
        return Err(format!("invalid char in key file {shown}: {c}"));
    }
    let chars = key.chars().count();
    if !(MIN_KEY_CHARS..=MAX_KEY_CHARS).contains(&chars) {
        return Err(format!(
            "security key in {shown} has length {chars}, must be between {MIN_KEY_CHARS} and {MAX_KEY_CHARS} chars"
        ));
    }
    Ok(key)
}

/// The user document of `__system@local` with `key` as its password (never stored:
/// made at each start, with new salts).
pub fn system_user(key: &str) -> Result<Document> {
    Ok(doc! {
        "_id": format!("{SYSTEM_DB}.{SYSTEM_USER}"),
        "user": SYSTEM_USER,
        "db": SYSTEM_DB,
        "credentials": credentials_document(SYSTEM_USER, key, &ALL_MECHANISMS)?,
        "roles": [{"role": "__system", "db": "admin"}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn key_file(text: &str, mode: u32) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    #[test]
    fn a_key_is_its_characters_without_whitespace() {
        let f = key_file("abc def\n+/=123\n", 0o600);
        assert_eq!(read(f.path()).unwrap(), "abcdef+/=123");
        let f = key_file("abcdef", 0o400);
        assert_eq!(read(f.path()).unwrap(), "abcdef");
    }

    #[test]
    fn mongods_checks_refuse_a_bad_key_file() {
        let open = key_file("abcdefgh", 0o644);
        assert!(read(open.path()).unwrap_err().ends_with("are too open"));
        let short = key_file("abc  de", 0o600);
        assert!(read(short.path())
            .unwrap_err()
            .contains("has length 5, must be between 6 and 1024 chars"));
        let long = key_file(&"a".repeat(1025), 0o600);
        assert!(read(long.path()).unwrap_err().contains("has length 1025"));
        let odd = key_file("abcdef!", 0o600);
        assert!(read(odd.path()).unwrap_err().ends_with(": !"));
        assert!(read(Path::new("/nonexistent/key"))
            .unwrap_err()
            .starts_with("error getting file"));
    }

    #[test]
    fn the_system_user_has_both_scram_credentials() {
        let user = system_user("abcdefgh").unwrap();
        let creds = user.get_document("credentials").unwrap();
        assert!(creds.contains_key("SCRAM-SHA-1") && creds.contains_key("SCRAM-SHA-256"));
        assert_eq!(user.get_str("_id").unwrap(), "local.__system");
    }
}

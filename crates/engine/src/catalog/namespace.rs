//! Database and collection names, validated with mongod's rules.

use tailstream_query::error::{codes, Error, Result};

/// Maximum length of a full namespace `db.collection` (mongod: 255 bytes).
pub const MAX_NAMESPACE_LEN: usize = 255;
/// Maximum length of a database name (mongod: 63 characters).
pub const MAX_DB_NAME_LEN: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Namespace {
        Namespace {
            db: db.to_string(),
            coll: coll.to_string(),
        }
    }

    /// `db.coll` as stored in the catalog and the oplog.
    pub fn full(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }

    /// The length of [`Self::full`], without building it.
    pub fn full_len(&self) -> usize {
        self.db.len() + 1 + self.coll.len()
    }

    /// Calls `f` with [`Self::full`] built on the stack when it fits a valid
    /// namespace's length (every insert looks its collection up by this name: a
    /// `format!` each was 700 instructions of a message on the bus benchmark,
    /// callgrind 2026-11-28), else in a `String`.
    pub fn with_full<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        let len = self.full_len();
        if len > MAX_NAMESPACE_LEN {
            return f(&self.full());
        }
        let mut buf = [0u8; MAX_NAMESPACE_LEN];
        buf[..self.db.len()].copy_from_slice(self.db.as_bytes());
        buf[self.db.len()] = b'.';
        buf[self.db.len() + 1..len].copy_from_slice(self.coll.as_bytes());
        // Two whole strings and an ASCII dot: valid UTF-8.
        f(std::str::from_utf8(&buf[..len]).expect("two strings joined by '.'"))
    }

    /// Parses `db.coll` (the collection part may contain dots).
    pub fn parse(full: &str) -> Result<Namespace> {
        match full.split_once('.') {
            Some((db, coll)) if !db.is_empty() && !coll.is_empty() => Ok(Namespace::new(db, coll)),
            _ => Err(Error::new(
                codes::INVALID_NAMESPACE,
                format!("Invalid namespace specified '{full}'"),
            )),
        }
    }

    /// The `<db>.$cmd` namespace that DDL oplog entries use.
    pub fn command_ns(db: &str) -> String {
        format!("{db}.$cmd")
    }

    /// Validates a namespace for a user write (creating a collection, inserting).
    pub fn validate_for_write(&self) -> Result<()> {
        validate_db_name(&self.db)?;
        validate_collection_name(&self.coll)?;
        if self.full_len() > MAX_NAMESPACE_LEN {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                format!(
                    "Fully qualified namespace is too long. Namespace: {} Max: {}",
                    self.full(),
                    MAX_NAMESPACE_LEN
                ),
            ));
        }
        if self.db == "local" && self.coll == "oplog.rs" {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                "cannot write to 'local.oplog.rs'",
            ));
        }
        // mongod's legal client system namespaces (`isLegalClientSystemNS`), those
        // this server writes: admin.system.version holds the feature compatibility
        // version, admin.system.users and admin.system.roles the users and roles.
        let admin_system = self.db == "admin"
            && matches!(
                self.coll.as_str(),
                "system.version" | "system.users" | "system.roles"
            );
        if self.coll.starts_with("system.")
            && !admin_system
            && !matches!(
                self.coll.as_str(),
                "system.js" | "system.views" | "system.profile"
            )
        {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                format!("Invalid system namespace: {}", self.full()),
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

pub fn validate_db_name(db: &str) -> Result<()> {
    if db.is_empty() {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            "Invalid empty database name",
        ));
    }
    if db.len() > MAX_DB_NAME_LEN {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("db name is too long: {db}"),
        ));
    }
    if let Some(c) = db
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '\0'))
    {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid database name: '{db}' (contains '{c}')"),
        ));
    }
    Ok(())
}

pub fn validate_collection_name(coll: &str) -> Result<()> {
    if coll.is_empty() {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            "Invalid empty namespace specified",
        ));
    }
    if coll.contains('\0') {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            "namespaces cannot have embedded null characters",
        ));
    }
    if coll.contains('$') {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid collection name: {coll}"),
        ));
    }
    if coll.starts_with('.') || coll.ends_with('.') {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid collection name: {coll}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let ns = Namespace::parse("test.a.b").unwrap();
        assert_eq!((ns.db.as_str(), ns.coll.as_str()), ("test", "a.b"));
        assert!(Namespace::parse("nodot").is_err());
        assert!(Namespace::new("te$t", "c").validate_for_write().is_err());
        assert!(Namespace::new("test", "a$b").validate_for_write().is_err());
        assert!(Namespace::new("local", "oplog.rs")
            .validate_for_write()
            .is_err());
        assert!(Namespace::new("test", "ok").validate_for_write().is_ok());
    }
}

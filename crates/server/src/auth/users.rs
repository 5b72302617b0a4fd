//! Users, as mongod keeps them: one document per user in `admin.system.users`
//! (`_id: "<db>.<user>"`, `userId`, `user`, `db`, `credentials` per SCRAM mechanism,
//! `roles`, `customData`), written through the engine like any collection (so they are
//! durable, logged and restored by the tools), and mongod's user commands over them:
//! `createUser`, `updateUser`, `dropUser`, `dropAllUsersFromDatabase`, `usersInfo`,
//! `grantRolesToUser`, `revokeRolesFromUser`.

use super::credentials::{credentials_document, Credential, Mechanism, ALL_MECHANISMS};
use super::roles::RoleName;
use super::store;
use crate::commands::args::{opt_bool, opt_doc};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};

/// mongod's collection of users.
pub fn users_ns() -> Namespace {
    Namespace::new("admin", "system.users")
}

/// A user as authentication and authorization need it.
#[derive(Debug, Clone)]
pub struct User {
    pub user: String,
    pub db: String,
    pub roles: Vec<RoleName>,
    doc: Document,
}

impl User {
    fn from_document(doc: Document) -> Result<User> {
        let user = doc.get_str("user").unwrap_or_default().to_string();
        let db = doc.get_str("db").unwrap_or_default().to_string();
        let roles = match doc.get("roles") {
            Some(Bson::Array(a)) => a
                .iter()
                .map(|r| RoleName::parse(r, &db))
                .collect::<Result<Vec<_>>>()?,
            _ => Vec::new(),
        };
        Ok(User {
            user,
            db,
            roles,
            doc,
        })
    }

    /// `user@db`, as mongod names a user in messages.
    pub fn full_name(&self) -> String {
        format!("{}@{}", self.user, self.db)
    }

    /// The stored credential of `mech`, if the user has one.
    pub fn credential(&self, mech: Mechanism) -> Option<Credential> {
        let d = self.doc.get_document("credentials").ok()?;
        Credential::from_document(d.get_document(mech.name()).ok()?).ok()
    }

    /// The SCRAM mechanisms it can authenticate with.
    pub fn mechanisms(&self) -> Vec<Mechanism> {
        ALL_MECHANISMS
            .into_iter()
            .filter(|m| self.credential(*m).is_some())
            .collect()
    }

    /// As usersInfo shows it (credentials only when asked).
    fn info(&self, show_credentials: bool) -> Document {
        let mut d = doc! {"_id": format!("{}.{}", self.db, self.user)};
        if let Some(id) = self.doc.get("userId") {
            d.insert("userId", id.clone());
        }
        d.insert("user", self.user.clone());
        d.insert("db", self.db.clone());
        if let Some(c) = self.doc.get("customData") {
            d.insert("customData", c.clone());
        }
        d.insert(
            "roles",
            self.roles
                .iter()
                .map(|r| Bson::Document(r.to_document()))
                .collect::<Vec<_>>(),
        );
        if show_credentials {
            if let Some(c) = self.doc.get("credentials") {
                d.insert("credentials", c.clone());
            }
        }
        d.insert(
            "mechanisms",
            self.mechanisms()
                .into_iter()
                .map(|m| Bson::String(m.name().into()))
                .collect::<Vec<_>>(),
        );
        d
    }
}

/// The users matching `filter` in `admin.system.users`.
async fn load(state: &Arc<ServerState>, filter: Document) -> Result<Vec<User>> {
    store::load(state, users_ns(), filter)
        .await?
        .into_iter()
        .map(User::from_document)
        .collect()
}

/// One user, if it exists.
pub async fn find(state: &Arc<ServerState>, user: &str, db: &str) -> Result<Option<User>> {
    use tailstream_replication::member_auth::{SYSTEM_DB, SYSTEM_USER};
    if user == SYSTEM_USER && db == SYSTEM_DB {
        // The members' user exists only with a key file, and only in memory.
        return state
            .system_user
            .clone()
            .map(User::from_document)
            .transpose();
    }
    Ok(load(state, doc! {"_id": format!("{db}.{user}")})
        .await?
        .pop())
}

/// Whether any user exists (the localhost exception ends with the first one).
pub async fn any_exist(state: &Arc<ServerState>) -> Result<bool> {
    Ok(!load(state, doc! {}).await?.is_empty())
}

fn user_arg(cmd: &Document, name: &str) -> Result<String> {
    match cmd.get(name) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Bson::String(_)) => Err(Error::bad_value(
            "User document needs 'user' field to be non-empty",
        )),
        Some(v) => Err(crate::commands::args::wrong_field_type(
            &format!("{name}.{name}"),
            v,
            "string",
        )),
        None => Err(Error::missing_field(&format!("{name}.{name}"))),
    }
}

async fn parse_roles(
    state: &Arc<ServerState>,
    cmd: &Document,
    field: &str,
    db: &str,
    required: bool,
) -> Result<Option<Vec<RoleName>>> {
    match cmd.get(field) {
        Some(Bson::Array(a)) => {
            let roles = a
                .iter()
                .map(|r| RoleName::parse(r, db))
                .collect::<Result<Vec<_>>>()?;
            for r in &roles {
                super::role_store::check_exists(state, r).await?;
            }
            Ok(Some(roles))
        }
        Some(v) => Err(crate::commands::args::wrong_field_type(field, v, "array")),
        None if required => Err(Error::missing_field(field)),
        None => Ok(None),
    }
}

/// `mechanisms`: a non-empty subset of the SCRAM ones (default: both).
fn parse_mechanisms(cmd: &Document) -> Result<Vec<Mechanism>> {
    let Some(v) = cmd.get("mechanisms") else {
        return Ok(ALL_MECHANISMS.to_vec());
    };
    let Bson::Array(a) = v else {
        return Err(crate::commands::args::wrong_field_type(
            "mechanisms",
            v,
            "array",
        ));
    };
    if a.is_empty() {
        return Err(Error::bad_value("mechanisms field must not be empty"));
    }
    a.iter()
        .map(|m| match m {
            Bson::String(name) => Mechanism::parse(name)
                .ok_or_else(|| Error::bad_value(format!("Unknown auth mechanism '{name}'"))),
            other => Err(crate::commands::args::wrong_field_type(
                "mechanisms",
                other,
                "string",
            )),
        })
        .collect()
}

/// The password, required except for `$external` users (which have no credentials).
fn password(cmd: &Document, db: &str, required: bool) -> Result<Option<String>> {
    match cmd.get("pwd") {
        Some(Bson::String(p)) if p.is_empty() => Err(Error::bad_value("Password cannot be empty")),
        Some(Bson::String(p)) if db == "$external" => {
            let _ = p;
            Err(Error::bad_value("Cannot set the password for users defined on the '$external' database"))
        }
        Some(Bson::String(p)) => Ok(Some(p.clone())),
        Some(v) => Err(crate::commands::args::wrong_field_type("pwd", v, "string")),
        None if required && db != "$external" => Err(Error::bad_value(
            "Must provide a 'pwd' field for all user documents, except those with '$external' as the user's source db",
        )),
        None => Ok(None),
    }
}

fn check_user_db(db: &str) -> Result<()> {
    if db == "local" {
        return Err(Error::bad_value(
            "Cannot create users in the local database",
        ));
    }
    Ok(())
}

fn roles_bson(roles: &[RoleName]) -> Bson {
    Bson::Array(
        roles
            .iter()
            .map(|r| Bson::Document(r.to_document()))
            .collect(),
    )
}

pub async fn create_user(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let user = user_arg(cmd, "createUser")?;
    check_user_db(db)?;
    let roles = parse_roles(state, cmd, "roles", db, true)
        .await?
        .unwrap_or_default();
    let mechanisms = parse_mechanisms(cmd)?;
    let mut stored = doc! {
        "_id": format!("{db}.{user}"),
        "userId": bson::Binary::from_uuid(bson::Uuid::new()),
        "user": user.clone(),
        "db": db,
    };
    if let Some(pwd) = password(cmd, db, true)? {
        let (u, m) = (user.clone(), mechanisms.clone());
        // PBKDF2's iterations are the point of it: tens of milliseconds, off the I/O threads.
        let creds = tokio::task::spawn_blocking(move || credentials_document(&u, &pwd, &m))
            .await
            .map_err(|e| Error::internal(format!("hashing failed: {e}")))??;
        stored.insert("credentials", creds);
    } else {
        stored.insert("credentials", doc! {"external": true});
    }
    stored.insert("roles", roles_bson(&roles));
    if let Some(c) = opt_doc(cmd, "customData")? {
        stored.insert("customData", c);
    }
    store::insert(state, users_ns(), stored, || {
        Error::new(
            codes::USER_ALREADY_EXISTS,
            format!("User \"{user}@{db}\" already exists"),
        )
    })
    .await?;
    Ok(Document::new())
}

/// Replaces the stored user document's fields in `set`.
async fn rewrite(state: &Arc<ServerState>, user: &str, db: &str, set: Document) -> Result<()> {
    let matched = store::update(
        state,
        users_ns(),
        format!("{db}.{user}"),
        doc! {"$set": set},
    )
    .await?;
    if matched == 0 {
        return Err(not_found(user, db));
    }
    Ok(())
}

fn not_found(user: &str, db: &str) -> Error {
    Error::new(codes::USER_NOT_FOUND, format!("User {user}@{db} not found"))
}

pub async fn update_user(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let user = user_arg(cmd, "updateUser")?;
    let existing = find(state, &user, db)
        .await?
        .ok_or_else(|| not_found(&user, db))?;
    let mut set = Document::new();
    if let Some(roles) = parse_roles(state, cmd, "roles", db, false).await? {
        set.insert("roles", roles_bson(&roles));
    }
    if let Some(c) = opt_doc(cmd, "customData")? {
        set.insert("customData", c);
    }
    let mechanisms = if cmd.contains_key("mechanisms") {
        parse_mechanisms(cmd)?
    } else {
        existing.mechanisms()
    };
    match password(cmd, db, false)? {
        Some(pwd) => {
            let u = user.clone();
            let creds =
                tokio::task::spawn_blocking(move || credentials_document(&u, &pwd, &mechanisms))
                    .await
                    .map_err(|e| Error::internal(format!("hashing failed: {e}")))??;
            set.insert("credentials", creds);
        }
        None if cmd.contains_key("mechanisms") => {
            // Without a new password, mechanisms may only be narrowed (mongod's rule).
            let mut creds = Document::new();
            for m in &mechanisms {
                let c = existing.credential(*m).ok_or_else(|| {
                    Error::bad_value(
                        "mechanisms field must be a subset of previously set mechanisms",
                    )
                })?;
                creds.insert(m.name(), c.to_document());
            }
            set.insert("credentials", creds);
        }
        None => {}
    }
    if set.is_empty() {
        return Err(Error::bad_value(
            "Must specify at least one field to update in updateUser",
        ));
    }
    rewrite(state, &user, db, set).await?;
    Ok(Document::new())
}

pub async fn drop_user(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let user = user_arg(cmd, "dropUser")?;
    let n = delete(state, doc! {"_id": format!("{db}.{user}")}).await?;
    if n == 0 {
        return Err(not_found(&user, db));
    }
    Ok(Document::new())
}

pub async fn drop_all_users(state: &Arc<ServerState>, db: &str) -> Result<Document> {
    Ok(store::count_reply(delete(state, doc! {"db": db}).await?))
}

async fn delete(state: &Arc<ServerState>, filter: Document) -> Result<u64> {
    store::delete(state, users_ns(), filter).await
}

/// grantRolesToUser / revokeRolesFromUser.
pub async fn change_roles(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
    grant: bool,
) -> Result<Document> {
    let name = if grant {
        "grantRolesToUser"
    } else {
        "revokeRolesFromUser"
    };
    let user = user_arg(cmd, name)?;
    let given = parse_roles(state, cmd, "roles", db, true)
        .await?
        .unwrap_or_default();
    let existing = find(state, &user, db)
        .await?
        .ok_or_else(|| not_found(&user, db))?;
    let mut roles = existing.roles.clone();
    if grant {
        for r in given {
            if !roles.contains(&r) {
                roles.push(r);
            }
        }
    } else {
        roles.retain(|r| !given.contains(r));
    }
    rewrite(state, &user, db, doc! {"roles": roles_bson(&roles)}).await?;
    Ok(Document::new())
}

/// usersInfo: `1` (the database's users), a name, `{user, db}`, a list of them, or
/// `{forAllDBs: true}`; `showCredentials`, `filter`.
pub async fn users_info(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let show_credentials = opt_bool(cmd, "showCredentials")?.unwrap_or(false);
    let mut filter = match cmd.get("usersInfo") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) => doc! {"db": db},
        Some(Bson::Double(f)) if *f == 1.0 => doc! {"db": db},
        Some(Bson::Document(d)) if d.get_bool("forAllDBs") == Ok(true) => doc! {},
        Some(Bson::Array(a)) => {
            let ids = a
                .iter()
                .map(|u| user_id(u, db))
                .collect::<Result<Vec<_>>>()?;
            doc! {"_id": {"$in": ids}}
        }
        Some(one @ (Bson::String(_) | Bson::Document(_))) => doc! {"_id": user_id(one, db)?},
        Some(v) => {
            return Err(Error::bad_value(format!(
                "User and role names must be either strings or objects, not {v}"
            )))
        }
        None => return Err(Error::missing_field("usersInfo.usersInfo")),
    };
    if let Some(f) = opt_doc(cmd, "filter")? {
        filter = doc! {"$and": [filter, f]};
    }
    let users = load(state, filter).await?;
    let list: Vec<Bson> = users
        .iter()
        .map(|u| Bson::Document(u.info(show_credentials)))
        .collect();
    Ok(doc! {"users": list})
}

/// A user name as usersInfo takes it: `"name"` (on the command's database) or
/// `{user, db}`, as the stored `_id`.
fn user_id(v: &Bson, db: &str) -> Result<String> {
    match v {
        Bson::String(u) => Ok(format!("{db}.{u}")),
        Bson::Document(d) => match (d.get_str("user"), d.get_str("db")) {
            (Ok(u), Ok(d)) => Ok(format!("{d}.{u}")),
            _ => Err(Error::bad_value(
                "User name must contain a 'user' and a 'db' field",
            )),
        },
        _ => Err(Error::bad_value(
            "User and role names must be either strings or objects",
        )),
    }
}

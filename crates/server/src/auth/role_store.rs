//! Custom roles, as mongod keeps them: one document per role in `admin.system.roles`
//! (`_id: "<db>.<role>"`, `role`, `db`, `privileges: [{resource, actions}]`, `roles`:
//! the roles it inherits), mongod's role commands over them, and the resolution of a
//! user's roles into what it may do ([`Grants`]): the built-in roles it holds directly
//! or through custom roles, and the custom roles' privileges.

use super::roles::{self, RoleName};
use super::store;
use crate::commands::args::{opt_bool, wrong_field_type};
use crate::commands::registry::{Action, Resource};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::collections::HashSet;
use std::sync::Arc;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};

/// Roles inherited through at most this many levels (mongod refuses cycles; this also
/// bounds a resolution's reads).
const MAX_ROLE_DEPTH: usize = 32;

pub fn roles_ns() -> Namespace {
    Namespace::new("admin", "system.roles")
}

/// Where a custom privilege applies (mongod's resource document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// `{db, collection}`; an empty string matches any database / any collection.
    Namespace {
        db: String,
        coll: String,
    },
    Cluster,
    AnyResource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privilege {
    pub resource: Pattern,
    pub actions: Vec<String>,
}

impl Privilege {
    fn parse(v: &Bson) -> Result<Privilege> {
        let Bson::Document(d) = v else {
            return Err(Error::new(
                codes::FAILED_TO_PARSE,
                "Privileges must be objects",
            ));
        };
        let resource = match d.get("resource") {
            Some(Bson::Document(r)) if r.get_bool("cluster") == Ok(true) => Pattern::Cluster,
            Some(Bson::Document(r)) if r.get_bool("anyResource") == Ok(true) => Pattern::AnyResource,
            Some(Bson::Document(r)) => match (r.get_str("db"), r.get_str("collection")) {
                (Ok(db), Ok(coll)) => Pattern::Namespace {
                    db: db.to_string(),
                    coll: coll.to_string(),
                },
                _ => {
                    return Err(Error::new(
                        codes::FAILED_TO_PARSE,
                        "resource pattern must contain 'db' and 'collection' strings, or 'cluster' or 'anyResource'",
                    ))
                }
            },
            _ => return Err(Error::missing_field("privilege.resource")),
        };
        let actions = match d.get("actions") {
            Some(Bson::Array(a)) => a
                .iter()
                .map(|x| match x {
                    Bson::String(s)
                        if Action::parse(s).is_some()
                            || KNOWN_OTHER_ACTIONS.contains(&s.as_str()) =>
                    {
                        Ok(s.clone())
                    }
                    Bson::String(s) => Err(Error::new(
                        codes::FAILED_TO_PARSE,
                        format!("Unrecognized action privilege string: {s}"),
                    )),
                    other => Err(wrong_field_type("privilege.actions", other, "string")),
                })
                .collect::<Result<Vec<_>>>()?,
            _ => return Err(Error::missing_field("privilege.actions")),
        };
        Ok(Privilege { resource, actions })
    }

    fn to_document(&self) -> Document {
        let resource = match &self.resource {
            Pattern::Namespace { db, coll } => doc! {"db": db.clone(), "collection": coll.clone()},
            Pattern::Cluster => doc! {"cluster": true},
            Pattern::AnyResource => doc! {"anyResource": true},
        };
        doc! {"resource": resource, "actions": self.actions.clone()}
    }

    /// Whether it grants `action` on the command's `resource` (its database `db`, and
    /// `coll` for a collection command).
    fn allows(&self, resource: Resource, db: &str, coll: Option<&str>, action: Action) -> bool {
        if !self
            .actions
            .iter()
            .any(|a| Action::parse(a) == Some(action))
        {
            return false;
        }
        match (&self.resource, resource) {
            (Pattern::AnyResource, _) => true,
            (Pattern::Cluster, Resource::Cluster) => true,
            (Pattern::Cluster, _) | (Pattern::Namespace { .. }, Resource::Cluster) => false,
            (
                Pattern::Namespace {
                    db: pdb,
                    coll: pcoll,
                },
                _,
            ) => {
                let db_ok = pdb.is_empty() || pdb == db;
                let coll_ok = pcoll.is_empty() || coll.is_some_and(|c| c == pcoll);
                db_ok && coll_ok
            }
        }
    }
}

/// mongod actions no command here checks, accepted in a role's privileges.
const KNOWN_OTHER_ACTIONS: &[&str] = &[
    "anyAction",
    "bypassDocumentValidation",
    "cleanupOrphaned",
    "connPoolStats",
    "dbCheck",
    "enableSharding",
    "flushRouterConfig",
    "impersonate",
    "internal",
    "listSessions",
    "netstat",
    "replSetHeartbeat",
    "replSetStateChange",
    "resync",
    "shardingState",
    "splitVector",
    "useUUID",
];

/// What a user may do.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Built-in roles, held directly or inherited through custom roles.
    pub built_in: Vec<RoleName>,
    /// The custom roles' privileges, inherited ones included.
    pub privileges: Vec<Privilege>,
}

impl Grants {
    pub fn allows(&self, resource: Resource, db: &str, coll: Option<&str>, action: Action) -> bool {
        roles::allows(&self.built_in, resource, db, action)
            || self
                .privileges
                .iter()
                .any(|p| p.allows(resource, db, coll, action))
    }
}

/// A stored custom role.
#[derive(Debug, Clone)]
struct Role {
    name: RoleName,
    privileges: Vec<Privilege>,
    roles: Vec<RoleName>,
}

impl Role {
    fn from_document(d: &Document) -> Result<Role> {
        let db = d.get_str("db").unwrap_or_default().to_string();
        let name = RoleName {
            role: d.get_str("role").unwrap_or_default().to_string(),
            db: db.clone(),
        };
        let privileges = match d.get("privileges") {
            Some(Bson::Array(a)) => a.iter().map(Privilege::parse).collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        let roles = match d.get("roles") {
            Some(Bson::Array(a)) => a
                .iter()
                .map(|r| RoleName::parse(r, &db))
                .collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        Ok(Role {
            name,
            privileges,
            roles,
        })
    }

    fn to_document(&self) -> Document {
        doc! {
            "_id": format!("{}.{}", self.name.db, self.name.role),
            "role": self.name.role.clone(),
            "db": self.name.db.clone(),
            "privileges": self.privileges.iter().map(|p| Bson::Document(p.to_document())).collect::<Vec<_>>(),
            "roles": roles_bson(&self.roles),
        }
    }
}

fn roles_bson(roles: &[RoleName]) -> Vec<Bson> {
    roles
        .iter()
        .map(|r| Bson::Document(r.to_document()))
        .collect()
}

async fn load(state: &Arc<ServerState>, filter: Document) -> Result<Vec<Role>> {
    store::load(state, roles_ns(), filter)
        .await?
        .iter()
        .map(Role::from_document)
        .collect()
}

async fn find(state: &Arc<ServerState>, name: &RoleName) -> Result<Option<Role>> {
    Ok(
        load(state, doc! {"_id": format!("{}.{}", name.db, name.role)})
            .await?
            .pop(),
    )
}

/// Ok if the role exists, built in or custom; else 31 RoleNotFound.
pub async fn check_exists(state: &Arc<ServerState>, name: &RoleName) -> Result<()> {
    if name.check_exists().is_ok() || find(state, name).await?.is_some() {
        return Ok(());
    }
    Err(not_found(name))
}

fn not_found(name: &RoleName) -> Error {
    Error::new(
        codes::ROLE_NOT_FOUND,
        format!("Could not find role: {}@{}", name.role, name.db),
    )
}

/// A user's roles resolved: built-in ones kept, custom ones replaced by their
/// privileges and the roles they inherit (a missing custom role grants nothing).
pub async fn resolve(state: &Arc<ServerState>, held: &[RoleName]) -> Result<Grants> {
    let mut grants = Grants::default();
    let mut seen: HashSet<RoleName> = HashSet::new();
    let mut level: Vec<RoleName> = held.to_vec();
    for _ in 0..MAX_ROLE_DEPTH {
        let mut next = Vec::new();
        for r in level {
            if !seen.insert(r.clone()) {
                continue;
            }
            if r.check_exists().is_ok() {
                grants.built_in.push(r);
            } else if let Some(role) = find(state, &r).await? {
                grants.privileges.extend(role.privileges);
                next.extend(role.roles);
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    Ok(grants)
}

fn role_arg(cmd: &Document, name: &str) -> Result<String> {
    match cmd.get(name) {
        Some(Bson::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Bson::String(_)) => Err(Error::bad_value("Role name must be non-empty")),
        Some(v) => Err(wrong_field_type(&format!("{name}.{name}"), v, "string")),
        None => Err(Error::missing_field(&format!("{name}.{name}"))),
    }
}

/// A role's privileges; a role off `admin` may only target its own database.
fn parse_privileges(
    cmd: &Document,
    field: &str,
    db: &str,
    required: bool,
) -> Result<Option<Vec<Privilege>>> {
    match cmd.get(field) {
        Some(Bson::Array(a)) => {
            let privileges = a.iter().map(Privilege::parse).collect::<Result<Vec<_>>>()?;
            let foreign = |p: &Privilege| match &p.resource {
                Pattern::Namespace { db: pdb, .. } => pdb != db,
                Pattern::Cluster | Pattern::AnyResource => true,
            };
            if db != "admin" && privileges.iter().any(foreign) {
                return Err(Error::new(
                    codes::INVALID_ROLE_MODIFICATION,
                    format!("Roles on the '{db}' database cannot be granted privileges that target other databases or the cluster"),
                ));
            }
            Ok(Some(privileges))
        }
        Some(v) => Err(wrong_field_type(field, v, "array")),
        None if required => Err(Error::missing_field(field)),
        None => Ok(None),
    }
}

async fn parse_roles(
    state: &Arc<ServerState>,
    cmd: &Document,
    field: &str,
    db: &str,
    required: bool,
) -> Result<Option<Vec<RoleName>>> {
    let roles = match cmd.get(field) {
        Some(Bson::Array(a)) => a
            .iter()
            .map(|r| RoleName::parse(r, db))
            .collect::<Result<Vec<_>>>()?,
        Some(v) => return Err(wrong_field_type(field, v, "array")),
        None if required => return Err(Error::missing_field(field)),
        None => return Ok(None),
    };
    for r in &roles {
        check_exists(state, r).await?;
    }
    Ok(Some(roles))
}

/// Stores a new role (`insert`) or replaces the stored one.
async fn write(state: &Arc<ServerState>, role: Role, insert: bool) -> Result<()> {
    let doc = role.to_document();
    let id = format!("{}.{}", role.name.db, role.name.role);
    if insert {
        let name = role.name;
        store::insert(state, roles_ns(), doc, || {
            Error::new(
                codes::ROLE_ALREADY_EXISTS,
                format!("Role \"{}@{}\" already exists", name.role, name.db),
            )
        })
        .await
    } else {
        store::update(state, roles_ns(), id, doc).await.map(|_| ())
    }
}

pub async fn create_role(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let name = RoleName {
        role: role_arg(cmd, "createRole")?,
        db: db.to_string(),
    };
    if roles::built_in(&name.role, "admin").is_some() || roles::built_in(&name.role, db).is_some() {
        return Err(Error::bad_value(
            "Cannot create roles with the same name as a built-in role",
        ));
    }
    let privileges = parse_privileges(cmd, "privileges", db, true)?.unwrap_or_default();
    let inherited = parse_roles(state, cmd, "roles", db, true)
        .await?
        .unwrap_or_default();
    write(
        state,
        Role {
            name,
            privileges,
            roles: inherited,
        },
        true,
    )
    .await?;
    Ok(Document::new())
}

async fn existing(
    state: &Arc<ServerState>,
    cmd: &Document,
    command: &str,
    db: &str,
) -> Result<Role> {
    let name = RoleName {
        role: role_arg(cmd, command)?,
        db: db.to_string(),
    };
    find(state, &name).await?.ok_or_else(|| not_found(&name))
}

pub async fn update_role(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let mut role = existing(state, cmd, "updateRole", db).await?;
    let privileges = parse_privileges(cmd, "privileges", db, false)?;
    let inherited = parse_roles(state, cmd, "roles", db, false).await?;
    if privileges.is_none() && inherited.is_none() {
        return Err(Error::bad_value(
            "Must specify at least one field to update in updateRole",
        ));
    }
    if let Some(p) = privileges {
        role.privileges = p;
    }
    if let Some(r) = inherited {
        role.roles = r;
    }
    write(state, role, false).await?;
    Ok(Document::new())
}

/// grantPrivilegesToRole / revokePrivilegesFromRole.
pub async fn change_privileges(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
    grant: bool,
) -> Result<Document> {
    let command = if grant {
        "grantPrivilegesToRole"
    } else {
        "revokePrivilegesFromRole"
    };
    let mut role = existing(state, cmd, command, db).await?;
    let given = parse_privileges(cmd, "privileges", db, true)?.unwrap_or_default();
    for p in given {
        match role
            .privileges
            .iter_mut()
            .find(|q| q.resource == p.resource)
        {
            Some(q) if grant => {
                for a in p.actions {
                    if !q.actions.contains(&a) {
                        q.actions.push(a);
                    }
                }
            }
            Some(q) => q.actions.retain(|a| !p.actions.contains(a)),
            None if grant => role.privileges.push(p),
            None => {}
        }
    }
    role.privileges.retain(|p| !p.actions.is_empty());
    write(state, role, false).await?;
    Ok(Document::new())
}

/// grantRolesToRole / revokeRolesFromRole.
pub async fn change_inherited(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
    grant: bool,
) -> Result<Document> {
    let command = if grant {
        "grantRolesToRole"
    } else {
        "revokeRolesFromRole"
    };
    let mut role = existing(state, cmd, command, db).await?;
    let given = parse_roles(state, cmd, "roles", db, true)
        .await?
        .unwrap_or_default();
    if grant {
        for r in given {
            if r == role.name {
                return Err(Error::new(
                    codes::INVALID_ROLE_MODIFICATION,
                    format!("Cannot grant role {}@{} to itself", r.role, r.db),
                ));
            }
            if !role.roles.contains(&r) {
                role.roles.push(r);
            }
        }
    } else {
        role.roles.retain(|r| !given.contains(r));
    }
    write(state, role, false).await?;
    Ok(Document::new())
}

pub async fn drop_role(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let role = existing(state, cmd, "dropRole", db).await?;
    delete(
        state,
        doc! {"_id": format!("{}.{}", role.name.db, role.name.role)},
    )
    .await?;
    Ok(Document::new())
}

pub async fn drop_all_roles(state: &Arc<ServerState>, db: &str) -> Result<Document> {
    Ok(store::count_reply(delete(state, doc! {"db": db}).await?))
}

async fn delete(state: &Arc<ServerState>, filter: Document) -> Result<u64> {
    store::delete(state, roles_ns(), filter).await
}

/// rolesInfo: `1` (the database's custom roles; `showBuiltinRoles` adds the built-in
/// ones), a name, `{role, db}` or a list; `showPrivileges`.
pub async fn roles_info(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let show_privileges = match cmd.get("showPrivileges") {
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::String(s)) if s == "asUserFragment" => true,
        _ => false,
    };
    let show_built_in = opt_bool(cmd, "showBuiltinRoles")?.unwrap_or(false);
    let names: Option<Vec<RoleName>> = match cmd.get("rolesInfo") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) => None,
        Some(Bson::Double(f)) if *f == 1.0 => None,
        Some(Bson::Array(a)) => Some(
            a.iter()
                .map(|r| RoleName::parse(r, db))
                .collect::<Result<_>>()?,
        ),
        Some(one @ (Bson::String(_) | Bson::Document(_))) => Some(vec![RoleName::parse(one, db)?]),
        Some(_) => {
            return Err(Error::bad_value(
                "Role names must be either strings or objects",
            ))
        }
        None => return Err(Error::missing_field("rolesInfo.rolesInfo")),
    };
    let mut out = Vec::new();
    match names {
        None => {
            if show_built_in {
                for name in BUILT_IN_NAMES {
                    let r = RoleName {
                        role: name.to_string(),
                        db: db.to_string(),
                    };
                    if r.check_exists().is_ok() {
                        out.push(Bson::Document(built_in_info(&r, show_privileges)));
                    }
                }
            }
            for role in load(state, doc! {"db": db}).await? {
                out.push(Bson::Document(
                    custom_info(state, &role, show_privileges).await?,
                ));
            }
        }
        Some(names) => {
            for r in names {
                if r.check_exists().is_ok() {
                    out.push(Bson::Document(built_in_info(&r, show_privileges)));
                } else if let Some(role) = find(state, &r).await? {
                    out.push(Bson::Document(
                        custom_info(state, &role, show_privileges).await?,
                    ));
                }
            }
        }
    }
    Ok(doc! {"roles": out})
}

/// The built-in roles, as rolesInfo lists them.
const BUILT_IN_NAMES: &[&str] = &[
    "__system",
    "backup",
    "clusterAdmin",
    "clusterManager",
    "clusterMonitor",
    "dbAdmin",
    "dbAdminAnyDatabase",
    "dbOwner",
    "hostManager",
    "read",
    "readAnyDatabase",
    "readWrite",
    "readWriteAnyDatabase",
    "restore",
    "root",
    "userAdmin",
    "userAdminAnyDatabase",
];

fn built_in_info(r: &RoleName, show_privileges: bool) -> Document {
    let mut d = doc! {
        "role": r.role.clone(),
        "db": r.db.clone(),
        "isBuiltin": true,
        "roles": [],
        "inheritedRoles": [],
    };
    if show_privileges {
        let privileges: Vec<Bson> = roles::built_in(&r.role, &r.db)
            .unwrap_or_default()
            .iter()
            .map(|g| Bson::Document(roles::grant_document(g, &r.db)))
            .collect();
        d.insert("privileges", privileges.clone());
        d.insert("inheritedPrivileges", privileges);
    }
    d
}

async fn custom_info(
    state: &Arc<ServerState>,
    role: &Role,
    show_privileges: bool,
) -> Result<Document> {
    let grants = resolve(state, &role.roles).await?;
    let mut d = doc! {
        "_id": format!("{}.{}", role.name.db, role.name.role),
        "role": role.name.role.clone(),
        "db": role.name.db.clone(),
        "isBuiltin": false,
        "roles": roles_bson(&role.roles),
        "inheritedRoles": roles_bson(&role.roles),
    };
    if show_privileges {
        let own: Vec<Bson> = role
            .privileges
            .iter()
            .map(|p| Bson::Document(p.to_document()))
            .collect();
        let mut inherited = own.clone();
        inherited.extend(
            grants
                .privileges
                .iter()
                .map(|p| Bson::Document(p.to_document())),
        );
        d.insert("privileges", own);
        d.insert("inheritedPrivileges", inherited);
    }
    Ok(d)
}

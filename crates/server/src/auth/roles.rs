//! mongod's built-in roles: which databases each exists on, and the privileges it
//! grants (resource and actions), so a user's roles say what a command may do.
//! Custom roles (`createRole`) are not here yet.

use crate::commands::registry::{Action, Resource};
use bson::{doc, Bson, Document};
use tailstream_engine::query::error::{codes, Error, Result};

/// A role granted to a user: its name and the database it is defined on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoleName {
    pub role: String,
    pub db: String,
}

impl RoleName {
    pub fn to_document(&self) -> Document {
        doc! {"role": self.role.clone(), "db": self.db.clone()}
    }

    /// A role as a command gives it: `"name"` (on the command's database) or
    /// `{role, db}`.
    pub fn parse(v: &Bson, default_db: &str) -> Result<RoleName> {
        match v {
            Bson::String(role) => Ok(RoleName {
                role: role.clone(),
                db: default_db.to_string(),
            }),
            Bson::Document(d) => {
                let role = d.get_str("role").map_err(|_| {
                    Error::bad_value(
                        "Role names must be either strings or objects with 'role' and 'db' fields",
                    )
                })?;
                let db = d.get_str("db").map_err(|_| {
                    Error::bad_value(
                        "Role names must be either strings or objects with 'role' and 'db' fields",
                    )
                })?;
                Ok(RoleName {
                    role: role.to_string(),
                    db: db.to_string(),
                })
            }
            _ => Err(Error::bad_value(
                "Role names must be either strings or objects with 'role' and 'db' fields",
            )),
        }
    }

    /// Ok if mongod has this built-in role on this database; else 31 RoleNotFound.
    pub fn check_exists(&self) -> Result<()> {
        if built_in(&self.role, &self.db).is_some() {
            Ok(())
        } else {
            Err(Error::new(
                codes::ROLE_NOT_FOUND,
                format!("Could not find role: {}@{}", self.role, self.db),
            ))
        }
    }
}

/// Where a privilege applies (mongod's `ResourcePattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every collection (but system ones) of the role's database.
    Database,
    /// Every collection of every database (but `local` and `config`'s internals).
    AnyDatabase,
    /// The server itself.
    Cluster,
    /// Everything (`root`'s `anyResource`, `__system`).
    Anything,
}

/// One privilege of a role: actions on a scope.
pub struct Grant {
    pub scope: Scope,
    pub actions: &'static [Action],
}

use Action::*;

const READ: &[Action] = &[
    ChangeStream,
    CollStats,
    DbHash,
    DbStats,
    Find,
    KillCursors,
    ListCollections,
    ListIndexes,
];
const READ_WRITE: &[Action] = &[
    ChangeStream,
    CollStats,
    ConvertToCapped,
    CreateCollection,
    CreateIndex,
    DbHash,
    DbStats,
    DropCollection,
    DropIndex,
    Find,
    Insert,
    KillCursors,
    ListCollections,
    ListIndexes,
    Remove,
    Update,
];
const DB_ADMIN: &[Action] = &[
    CollMod,
    CollStats,
    Compact,
    ConvertToCapped,
    CreateCollection,
    CreateIndex,
    DbHash,
    DbStats,
    DropCollection,
    DropDatabase,
    DropIndex,
    EnableProfiler,
    ListCollections,
    ListIndexes,
    PlanCacheIndexFilter,
    PlanCacheRead,
    PlanCacheWrite,
    ReIndex,
    Validate,
];
const USER_ADMIN: &[Action] = &[UserAdmin];
const CLUSTER_MONITOR: &[Action] = &[
    CheckFreeMonitoringStatus,
    GetCmdLineOpts,
    GetDefaultRWConcern,
    GetLog,
    GetParameter,
    HostInfo,
    Inprog,
    ListDatabases,
    ReplSetGetConfig,
    ReplSetGetStatus,
    ServerStatus,
    Top,
];
const CLUSTER_MANAGER: &[Action] = &[
    AppendOplogNote,
    ApplyOps,
    ReplSetConfigure,
    ReplSetStateChange,
    SetDefaultRWConcern,
    SetFeatureCompatibilityVersion,
];
const HOST_MANAGER: &[Action] = &[
    Fsync,
    KillAnySession,
    Killop,
    LogRotate,
    SetParameter,
    Shutdown,
    Unlock,
];

/// The privileges of a built-in role on `db`, or None when mongod has no such role
/// there (the `*AnyDatabase` and cluster roles exist on `admin` only).
pub fn built_in(role: &str, db: &str) -> Option<Vec<Grant>> {
    let on = |scope, actions| Grant { scope, actions };
    let db_role = |grants: Vec<Grant>| Some(grants);
    let admin_role = |grants: Vec<Grant>| (db == "admin").then_some(grants);
    use Scope::*;
    match role {
        "read" => db_role(vec![on(Database, READ)]),
        "readWrite" => db_role(vec![on(Database, READ_WRITE)]),
        "dbAdmin" => db_role(vec![on(Database, DB_ADMIN)]),
        "userAdmin" => db_role(vec![on(Database, USER_ADMIN)]),
        "dbOwner" => db_role(vec![
            on(Database, READ_WRITE),
            on(Database, DB_ADMIN),
            on(Database, USER_ADMIN),
        ]),
        "readAnyDatabase" => admin_role(vec![on(AnyDatabase, READ), on(Cluster, &[ListDatabases])]),
        "readWriteAnyDatabase" => admin_role(vec![
            on(AnyDatabase, READ_WRITE),
            on(Cluster, &[ListDatabases]),
        ]),
        "dbAdminAnyDatabase" => admin_role(vec![
            on(AnyDatabase, DB_ADMIN),
            on(Cluster, &[ListDatabases]),
        ]),
        "userAdminAnyDatabase" => admin_role(vec![
            on(AnyDatabase, USER_ADMIN),
            on(Cluster, &[ListDatabases]),
        ]),
        "clusterMonitor" => admin_role(vec![
            on(Cluster, CLUSTER_MONITOR),
            on(
                AnyDatabase,
                &[CollStats, DbStats, ListIndexes, ListCollections],
            ),
        ]),
        "clusterManager" => admin_role(vec![
            on(Cluster, CLUSTER_MANAGER),
            on(Cluster, CLUSTER_MONITOR),
        ]),
        "hostManager" => admin_role(vec![on(Cluster, HOST_MANAGER)]),
        "clusterAdmin" => admin_role(vec![
            on(Cluster, CLUSTER_MANAGER),
            on(Cluster, CLUSTER_MONITOR),
            on(Cluster, HOST_MANAGER),
            on(
                AnyDatabase,
                &[
                    CollStats,
                    DbStats,
                    DropDatabase,
                    ListIndexes,
                    ListCollections,
                ],
            ),
        ]),
        "backup" => admin_role(vec![
            on(AnyDatabase, READ),
            on(Cluster, &[ListDatabases, AppendOplogNote, ServerStatus]),
        ]),
        "restore" => admin_role(vec![
            on(AnyDatabase, READ_WRITE),
            on(AnyDatabase, &[CollMod, UserAdmin]),
            on(Cluster, &[ApplyOps, ListDatabases]),
        ]),
        "root" | "__system" => admin_role(vec![on(Anything, &[])]),
        _ => None,
    }
}

/// A built-in grant as rolesInfo shows a privilege (`resource`, `actions`) of a role on
/// `db`.
pub fn grant_document(g: &Grant, db: &str) -> Document {
    let resource = match g.scope {
        Scope::Database => doc! {"db": db, "collection": ""},
        Scope::AnyDatabase => doc! {"db": "", "collection": ""},
        Scope::Cluster => doc! {"cluster": true},
        Scope::Anything => doc! {"anyResource": true},
    };
    let actions: Vec<Bson> = if g.scope == Scope::Anything {
        vec![Bson::String("anyAction".into())]
    } else {
        g.actions
            .iter()
            .map(|a| Bson::String(a.name().into()))
            .collect()
    };
    doc! {"resource": resource, "actions": actions}
}

/// Whether the roles grant `action` on `resource` of the command's database `db`.
pub fn allows(roles: &[RoleName], resource: Resource, db: &str, action: Action) -> bool {
    roles.iter().any(|r| {
        built_in(&r.role, &r.db).is_some_and(|grants| {
            grants.iter().any(|g| {
                let covers = match (g.scope, resource) {
                    (Scope::Anything, _) => true,
                    (Scope::Cluster, Resource::Cluster) => true,
                    (Scope::Cluster, _) => false,
                    (Scope::AnyDatabase, Resource::Cluster) => false,
                    (Scope::AnyDatabase, _) => {
                        (db != "local" && db != "config") || r.role == "backup"
                    }
                    (Scope::Database, Resource::Cluster) => false,
                    (Scope::Database, _) => r.db == db,
                };
                // `internal` (the members' own calls) is `__system`'s alone: mongod's
                // root has every other action.
                let anything = g.scope == Scope::Anything
                    && (action != Action::Internal || r.role == "__system");
                covers && (anything || g.actions.contains(&action))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, db: &str) -> RoleName {
        RoleName {
            role: name.into(),
            db: db.into(),
        }
    }

    #[test]
    fn roles_exist_where_mongod_has_them() {
        assert!(role("readWrite", "shop").check_exists().is_ok());
        assert!(role("root", "admin").check_exists().is_ok());
        let e = role("readAnyDatabase", "shop").check_exists().unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (31, "Could not find role: readAnyDatabase@shop")
        );
        assert_eq!(role("nope", "admin").check_exists().unwrap_err().code, 31);
    }

    #[test]
    fn privileges_follow_the_roles() {
        let reader = [role("read", "shop")];
        assert!(allows(&reader, Resource::Collection, "shop", Find));
        assert!(!allows(&reader, Resource::Collection, "shop", Insert));
        assert!(!allows(&reader, Resource::Collection, "other", Find));
        assert!(!allows(&reader, Resource::Cluster, "admin", ServerStatus));
        let any = [role("readWriteAnyDatabase", "admin")];
        assert!(allows(&any, Resource::Collection, "other", Insert));
        assert!(!allows(&any, Resource::Collection, "local", Insert));
        let monitor = [role("clusterMonitor", "admin")];
        assert!(allows(&monitor, Resource::Cluster, "admin", ServerStatus));
        assert!(!allows(&monitor, Resource::Cluster, "admin", Shutdown));
        let root = [role("root", "admin")];
        assert!(allows(&root, Resource::Cluster, "admin", Shutdown));
        assert!(allows(&root, Resource::Collection, "x", Remove));
        // The members' calls: `__system` alone.
        assert!(!allows(&root, Resource::Cluster, "admin", Internal));
        let system = [role("__system", "admin")];
        assert!(allows(&system, Resource::Cluster, "admin", Internal));
        assert!(!allows(&[], Resource::Database, "x", DbStats));
    }
}

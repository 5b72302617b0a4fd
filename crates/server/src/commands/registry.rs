//! The command registry: one table, [`SPECS`], with everything the server knows about
//! each command. Dispatch, `listCommands` and every check `gates::run` makes before a
//! command runs read it, instead of lists of command names of their own.
//!
//! A [`Spec`] holds:
//! - `name`, and the `aliases` it also runs as (`findandmodify`): an alias is the same
//!   command, with all its flags, as in mongod;
//! - `handler`: the function that runs it (in the family's file, `commands/*.rs`);
//! - `admin_only`: runs only on the `admin` database (13 Unauthorized elsewhere);
//!   `listCommands` reports it;
//! - `writes`: whether it writes data, so it waits while `fsync` holds the lock, and
//!   whether it only removes data (so it still runs below the free-space floor);
//! - `write_concern`: takes a write concern and waits for it even when it fails (an
//!   unsatisfiable one adds a `writeConcernError` to the error reply);
//! - `api_v1`: in the Stable API, version 1 (`apiStrict: true` refuses the others);
//! - `in_transaction`: allowed in a multi-document transaction;
//! - `snapshot_read`: reads at `readConcern: {level: "snapshot"}` outside transactions;
//! - `test_only`: exists only with `enableTestCommands`;
//! - `privileges`: the actions mongod's authorization requires for it. Not enforced
//!   yet: this server has no users (authentication will check them).
//!
//! Adding a command: write its handler in the family's file, add one entry below (in
//! alphabetical order) with the flags mongod declares for it (its `Command` class:
//! `adminOnly`, `supportsWriteConcern`, `apiVersions`, `allowedInTransactions`, its
//! privileges), and nothing else: it is dispatched, listed and checked from here.

use super::{
    admin, apply_ops, ddl, handshake, maintenance, map_reduce, parallel_stream, read, testing,
    write, Call, Output,
};
use bson::{doc, Bson, Document};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use tailstream_engine::query::error::Result;

/// One command: see the module documentation for what each field means.
pub struct Spec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub handler: Handler,
    pub admin_only: bool,
    pub writes: Writes,
    pub write_concern: bool,
    pub api_v1: bool,
    pub in_transaction: bool,
    pub snapshot_read: bool,
    pub test_only: bool,
    /// Read by nothing yet: the authentication work will check it before a command runs.
    #[allow(dead_code)]
    pub privileges: Privileges,
}

/// A running command's future, boxed: a future is as large as its largest state, and
/// is copied whole each time it is moved, so every command's would be copied into
/// place through each level of `gates::run` (8 KB per command when all were inline,
/// 2.5% of a hundred change streams' CPU). getMore's too: inline, its 2 KB future
/// made every command's 8 KB again (callgrind, bus benchmark: 5,300 of an insert's
/// 103,000 instructions, more than the allocation boxing it costs).
pub type BoxedRun<'a> = Pin<Box<dyn Future<Output = Result<Output>> + Send + 'a>>;

/// How a command runs: its handler, returning its future boxed (see [`BoxedRun`]).
pub type Handler = for<'a> fn(Call<'a>) -> BoxedRun<'a>;

/// Whether a command writes data (see [`Spec::writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    No,
    /// Adds or changes data: waits at the fsync lock, refused below the free-space floor.
    Adds,
    /// Only removes data: waits at the fsync lock, runs below the free-space floor.
    Removes,
    /// Writes when its pipeline ends in `$out` or `$merge` (aggregate).
    PipelineOutput,
    /// Writes unless its `out` is `{inline: 1}` (mapReduce).
    OutOption,
    /// Writes when it names a consumer group (`parallelChangeStream` with `group`: the
    /// consumer's join writes the group's state).
    Group,
}

impl Writes {
    /// Whether this run of the command writes data.
    pub fn writes(self, cmd: &Document) -> bool {
        match self {
            Writes::No => false,
            Writes::Adds | Writes::Removes => true,
            Writes::PipelineOutput => matches!(
                cmd.get_array("pipeline").ok().and_then(|p| p.last()),
                Some(Bson::Document(last)) if last.contains_key("$out") || last.contains_key("$merge")
            ),
            Writes::OutOption => {
                !matches!(cmd.get("out"), Some(Bson::Document(o)) if o.contains_key("inline"))
            }
            Writes::Group => cmd.contains_key("group"),
        }
    }
}

/// What mongod's authorization requires before a command runs (its
/// `addRequiredPrivileges` / `checkAuthForOperation`). Not enforced yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privileges {
    /// Runs unauthenticated: the handshake, authentication itself, sessions, `ping`.
    None,
    /// These actions on this resource.
    Actions(Resource, &'static [Action]),
    /// Depends on the command's arguments (aggregate's stages, explain's command,
    /// renameCollection's two namespaces) or is not written down yet: the
    /// authentication work decides.
    Undecided,
}

/// The resource a privilege is on (mongod's `ResourcePattern`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// The collection the command names.
    Collection,
    /// The command's database.
    Database,
    /// The whole server (mongod's cluster resource).
    Cluster,
}

/// mongod's action types (`ActionType`), those the commands here need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    AppendOplogNote,
    ApplyOps,
    /// Opening a change stream (with `find` on what it watches).
    ChangeStream,
    CheckFreeMonitoringStatus,
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
    Find,
    Fsync,
    GetCmdLineOpts,
    GetDefaultRWConcern,
    GetLog,
    GetParameter,
    HostInfo,
    /// currentOp (mongod's `inprog`).
    Inprog,
    /// What only the members of a cluster do to one another (mongod's `internal`,
    /// granted to no built-in role: members will hold it through `--keyFile`).
    Internal,
    Insert,
    KillAnySession,
    KillCursors,
    /// killOp (mongod's `killop`).
    Killop,
    ListCollections,
    ListDatabases,
    LogRotate,
    PlanCacheIndexFilter,
    PlanCacheRead,
    PlanCacheWrite,
    ReIndex,
    ListIndexes,
    Remove,
    ReplSetConfigure,
    ReplSetGetConfig,
    ReplSetGetStatus,
    ReplSetStateChange,
    ServerStatus,
    SetDefaultRWConcern,
    SetFeatureCompatibilityVersion,
    SetParameter,
    Shutdown,
    Top,
    /// fsyncUnlock (mongod's `unlock`).
    Unlock,
    Update,
    /// The user and role commands (mongod's `createUser`, `dropUser`, ... actions,
    /// which its built-in roles always grant together).
    UserAdmin,
    Validate,
}

impl Action {
    /// mongod's name of the action (in roles' `privileges`); the user and role
    /// commands' many actions are one here ([`USER_ADMIN_ACTIONS`]).
    pub fn name(self) -> &'static str {
        match self {
            Action::AppendOplogNote => "appendOplogNote",
            Action::ApplyOps => "applyOps",
            Action::ChangeStream => "changeStream",
            Action::CheckFreeMonitoringStatus => "checkFreeMonitoringStatus",
            Action::CollMod => "collMod",
            Action::CollStats => "collStats",
            Action::Compact => "compact",
            Action::ConvertToCapped => "convertToCapped",
            Action::CreateCollection => "createCollection",
            Action::CreateIndex => "createIndex",
            Action::DbHash => "dbHash",
            Action::DbStats => "dbStats",
            Action::DropCollection => "dropCollection",
            Action::DropDatabase => "dropDatabase",
            Action::DropIndex => "dropIndex",
            Action::EnableProfiler => "enableProfiler",
            Action::Find => "find",
            Action::Fsync => "fsync",
            Action::GetCmdLineOpts => "getCmdLineOpts",
            Action::GetDefaultRWConcern => "getDefaultRWConcern",
            Action::GetLog => "getLog",
            Action::GetParameter => "getParameter",
            Action::HostInfo => "hostInfo",
            Action::Inprog => "inprog",
            Action::Internal => "internal",
            Action::Insert => "insert",
            Action::KillAnySession => "killAnySession",
            Action::KillCursors => "killCursors",
            Action::Killop => "killop",
            Action::ListCollections => "listCollections",
            Action::ListDatabases => "listDatabases",
            Action::LogRotate => "logRotate",
            Action::PlanCacheIndexFilter => "planCacheIndexFilter",
            Action::PlanCacheRead => "planCacheRead",
            Action::PlanCacheWrite => "planCacheWrite",
            Action::ReIndex => "reIndex",
            Action::ListIndexes => "listIndexes",
            Action::Remove => "remove",
            Action::ReplSetConfigure => "replSetConfigure",
            Action::ReplSetGetConfig => "replSetGetConfig",
            Action::ReplSetGetStatus => "replSetGetStatus",
            Action::ReplSetStateChange => "replSetStateChange",
            Action::ServerStatus => "serverStatus",
            Action::SetDefaultRWConcern => "setDefaultRWConcern",
            Action::SetFeatureCompatibilityVersion => "setFeatureCompatibilityVersion",
            Action::SetParameter => "setParameter",
            Action::Shutdown => "shutdown",
            Action::Top => "top",
            Action::Unlock => "unlock",
            Action::Update => "update",
            Action::Validate => "validate",
            Action::UserAdmin => "createUser",
        }
    }

    /// The action of one of mongod's action names; None for an action no command
    /// here needs (a role may still name it: it grants nothing yet).
    pub fn parse(name: &str) -> Option<Action> {
        Some(match name {
            "appendOplogNote" => Action::AppendOplogNote,
            "applyOps" => Action::ApplyOps,
            "changeStream" => Action::ChangeStream,
            "checkFreeMonitoringStatus" => Action::CheckFreeMonitoringStatus,
            "collMod" => Action::CollMod,
            "collStats" => Action::CollStats,
            "compact" => Action::Compact,
            "convertToCapped" => Action::ConvertToCapped,
            "createCollection" => Action::CreateCollection,
            "createIndex" => Action::CreateIndex,
            "dbHash" => Action::DbHash,
            "dbStats" => Action::DbStats,
            "dropCollection" => Action::DropCollection,
            "dropDatabase" => Action::DropDatabase,
            "dropIndex" => Action::DropIndex,
            "enableProfiler" => Action::EnableProfiler,
            "find" => Action::Find,
            "fsync" => Action::Fsync,
            "getCmdLineOpts" => Action::GetCmdLineOpts,
            "getDefaultRWConcern" => Action::GetDefaultRWConcern,
            "getLog" => Action::GetLog,
            "getParameter" => Action::GetParameter,
            "hostInfo" => Action::HostInfo,
            "inprog" => Action::Inprog,
            "insert" => Action::Insert,
            "killAnySession" => Action::KillAnySession,
            "killCursors" => Action::KillCursors,
            "killop" => Action::Killop,
            "listCollections" => Action::ListCollections,
            "listDatabases" => Action::ListDatabases,
            "logRotate" => Action::LogRotate,
            "planCacheIndexFilter" => Action::PlanCacheIndexFilter,
            "planCacheRead" => Action::PlanCacheRead,
            "planCacheWrite" => Action::PlanCacheWrite,
            "reIndex" => Action::ReIndex,
            "listIndexes" => Action::ListIndexes,
            "remove" => Action::Remove,
            "replSetConfigure" => Action::ReplSetConfigure,
            "replSetGetConfig" => Action::ReplSetGetConfig,
            "replSetGetStatus" => Action::ReplSetGetStatus,
            "replSetStateChange" => Action::ReplSetStateChange,
            "serverStatus" => Action::ServerStatus,
            "setDefaultRWConcern" => Action::SetDefaultRWConcern,
            "setFeatureCompatibilityVersion" => Action::SetFeatureCompatibilityVersion,
            "setParameter" => Action::SetParameter,
            "shutdown" => Action::Shutdown,
            "top" => Action::Top,
            "unlock" => Action::Unlock,
            "update" => Action::Update,
            "validate" => Action::Validate,
            n if USER_ADMIN_ACTIONS.contains(&n) => Action::UserAdmin,
            _ => return None,
        })
    }
}

/// mongod's actions of the user and role commands, all [`Action::UserAdmin`] here.
pub const USER_ADMIN_ACTIONS: &[&str] = &[
    "changeCustomData",
    "changePassword",
    "createRole",
    "createUser",
    "dropRole",
    "dropUser",
    "grantRole",
    "revokeRole",
    "setAuthenticationRestriction",
    "viewRole",
    "viewUser",
];

/// A spec with every flag off and its privileges undecided; the builder methods below
/// turn flags on.
const fn command(name: &'static str, handler: Handler) -> Spec {
    Spec {
        name,
        aliases: &[],
        handler,
        admin_only: false,
        writes: Writes::No,
        write_concern: false,
        api_v1: false,
        in_transaction: false,
        snapshot_read: false,
        test_only: false,
        privileges: Privileges::Undecided,
    }
}

impl Spec {
    const fn aliases(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
    const fn admin_only(mut self) -> Self {
        self.admin_only = true;
        self
    }
    const fn writes(mut self, writes: Writes) -> Self {
        self.writes = writes;
        self
    }
    const fn write_concern(mut self) -> Self {
        self.write_concern = true;
        self
    }
    const fn api_v1(mut self) -> Self {
        self.api_v1 = true;
        self
    }
    const fn in_transaction(mut self) -> Self {
        self.in_transaction = true;
        self
    }
    const fn snapshot_read(mut self) -> Self {
        self.snapshot_read = true;
        self
    }
    const fn test_only(mut self) -> Self {
        self.test_only = true;
        self
    }
    /// Needs no privilege.
    const fn open(mut self) -> Self {
        self.privileges = Privileges::None;
        self
    }
    const fn needs(mut self, on: Resource, actions: &'static [Action]) -> Self {
        self.privileges = Privileges::Actions(on, actions);
        self
    }
}

/// A handler whose reply is a document: `reply!(c => <Result<Document>>)`, with `c`
/// the [`Call`]; the expression may `.await`.
macro_rules! reply {
    ($c:ident => $body:expr) => {
        (|$c| Box::pin(async move { $body.map(Output::Doc) })) as Handler
    };
}

/// A handler that builds its own [`Output`] (a cursor of raw documents).
macro_rules! output {
    ($c:ident => $body:expr) => {
        (|$c| Box::pin(async move { $body })) as Handler
    };
}

use Action::*;
use Resource::{Cluster, Collection, Database};
use Writes::{Adds, Group, OutOption, PipelineOutput, Removes};

/// Every command, in alphabetical order.
pub static SPECS: &[Spec] = &[
    command(
        "abortTransaction",
        reply!(c => crate::transactions::commit_or_abort(c.state, c.spec, c.name, c.db, c.cmd).await),
    )
    .admin_only()
    .api_v1()
    .in_transaction()
    .open(),
    command(
        "aggregate",
        output!(c => read::aggregate(c.state, c.db, c.cmd).await),
    )
    .writes(PipelineOutput)
    .api_v1()
    .in_transaction()
    .snapshot_read(),
    command(
        "appendOplogNote",
        reply!(c => admin::append_oplog_note(c.state, c.cmd).await),
    )
    .admin_only()
    .writes(Adds)
    .needs(Cluster, &[AppendOplogNote]),
    command(
        "applyOps",
        reply!(c => apply_ops::apply_ops(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Cluster, &[ApplyOps]),
    command(
        "authenticate",
        reply!(c => crate::auth::x509::authenticate(c.state, c.conn, c.db, c.cmd, false).await),
    )
    .api_v1()
    .open(),
    command("buildInfo", reply!(_c => Ok(handshake::build_info())))
        .aliases(&["buildinfo"])
        .open(),
    command(
        "cloneCollectionAsCapped",
        reply!(c => ddl::clone_collection_as_capped(c.state, c.db, c.cmd).await),
    )
    .writes(Adds),
    command(
        "collMod",
        reply!(c => ddl::coll_mod(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .api_v1()
    .needs(Collection, &[CollMod]),
    command(
        "collStats",
        reply!(c => ddl::coll_stats(c.state, c.db, c.cmd).await),
    )
    .needs(Collection, &[CollStats]),
    command(
        "commitChangeStreamGroup",
        reply!(c => parallel_stream::commit(c.state, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .in_transaction()
    .needs(Cluster, &[ChangeStream, Find]),
    command(
        "commitTransaction",
        reply!(c => crate::transactions::commit_or_abort(c.state, c.spec, c.name, c.db, c.cmd).await),
    )
    .admin_only()
    .writes(Adds)
    .api_v1()
    .in_transaction()
    .open(),
    command(
        "compact",
        reply!(c => maintenance::compact(c.state, c.db, c.cmd).await),
    )
    .needs(Collection, &[Compact]),
    command(
        "configureFailPoint",
        reply!(c => testing::configure_fail_point(c.state, c.cmd)),
    )
    .admin_only()
    .test_only(),
    command(
        "connectionStatus",
        reply!(c => Ok(crate::auth::connection_status(c.conn, c.cmd))),
    )
    .open(),
    command(
        "convertToCapped",
        reply!(c => ddl::convert_to_capped(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .needs(Collection, &[ConvertToCapped]),
    command(
        "count",
        reply!(c => read::count(c.state, c.db, c.cmd).await),
    )
    .api_v1()
    .needs(Collection, &[Find]),
    command(
        "create",
        reply!(c => ddl::create(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[CreateCollection]),
    command(
        "createIndexes",
        reply!(c => ddl::create_indexes(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[CreateIndex]),
    command(
        "createRole",
        reply!(c => crate::auth::role_store::create_role(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "createUser",
        reply!(c => crate::auth::users::create_user(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    // inprog, or none with `$ownOps` (auth::argument_privileges).
    command(
        "currentOp",
        reply!(c => crate::current_op::command(c.state, c.cmd)),
    )
    .admin_only(),
    command(
        "dataSize",
        reply!(c => ddl::data_size(c.state, c.cmd).await),
    )
    .aliases(&["datasize"])
    .needs(Collection, &[Find]),
    command(
        "dbHash",
        reply!(c => maintenance::db_hash(c.state, c.db, c.cmd).await),
    )
    .aliases(&["dbhash"])
    .needs(Database, &[DbHash]),
    command(
        "dbStats",
        reply!(c => ddl::db_stats(c.state, c.db, c.cmd).await),
    )
    .aliases(&["dbstats"])
    .needs(Database, &[DbStats]),
    command(
        "delete",
        reply!(c => write::delete(c.state, c.db, c.cmd).await),
    )
    .writes(Removes)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[Remove]),
    command(
        "distinct",
        reply!(c => read::distinct(c.state, c.db, c.cmd).await),
    )
    .in_transaction()
    .snapshot_read()
    .needs(Collection, &[Find]),
    command("drop", reply!(c => ddl::drop(c.state, c.db, c.cmd).await))
        .writes(Removes)
        .write_concern()
        .api_v1()
        .needs(Collection, &[DropCollection]),
    command(
        "dropAllRolesFromDatabase",
        reply!(c => crate::auth::role_store::drop_all_roles(c.state, c.db).await),
    )
    .writes(Removes)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "dropAllUsersFromDatabase",
        reply!(c => crate::auth::users::drop_all_users(c.state, c.db).await),
    )
    .writes(Removes)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "dropDatabase",
        reply!(c => ddl::drop_database(c.state, c.db, c.cmd).await),
    )
    .writes(Removes)
    .write_concern()
    .api_v1()
    .needs(Database, &[DropDatabase]),
    command(
        "dropIndexes",
        reply!(c => ddl::drop_indexes(c.state, c.db, c.cmd).await),
    )
    .aliases(&["deleteIndexes"])
    .writes(Removes)
    .write_concern()
    .api_v1()
    .needs(Collection, &[DropIndex]),
    command(
        "dropRole",
        reply!(c => crate::auth::role_store::drop_role(c.state, c.db, c.cmd).await),
    )
    .writes(Removes)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "dropUser",
        reply!(c => crate::auth::users::drop_user(c.state, c.db, c.cmd).await),
    )
    .writes(Removes)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "endSessions",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .api_v1()
    .open(),
    command(
        "explain",
        reply!(c => read::explain(c.state, c.db, c.cmd).await),
    ),
    // mongod checks find on the bucket's chunks collection (`root`).
    command(
        "filemd5",
        reply!(c => maintenance::file_md5(c.state, c.db, c.cmd).await),
    )
    .needs(Collection, &[Find]),
    command("find", reply!(c => read::find(c.state, c.db, c.cmd).await))
        .api_v1()
        .in_transaction()
        .snapshot_read()
        .needs(Collection, &[Find]),
    // With upsert: true mongod requires insert too, and remove for remove: true.
    command(
        "findAndModify",
        reply!(c => write::find_and_modify(c.state, c.db, c.cmd).await),
    )
    .aliases(&["findandmodify"])
    .writes(Adds)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[Find, Update]),
    command("fsync", reply!(c => admin::fsync(c.state, c.cmd).await))
        .admin_only()
        .needs(Cluster, &[Fsync]),
    command(
        "fsyncUnlock",
        reply!(c => admin::fsync_unlock(c.state).await),
    )
    .admin_only()
    .needs(Cluster, &[Unlock]),
    command(
        "getCmdLineOpts",
        reply!(c => Ok(admin::get_cmd_line_opts(c.state))),
    )
    .admin_only()
    .needs(Cluster, &[GetCmdLineOpts]),
    command(
        "getDefaultRWConcern",
        reply!(c => admin::get_default_rw_concern(c.state, c.cmd)),
    )
    .admin_only()
    .needs(Cluster, &[GetDefaultRWConcern]),
    command(
        "getFreeMonitoringStatus",
        reply!(_c => Ok(doc! {"state": "disabled"})),
    )
    .admin_only()
    .needs(Cluster, &[CheckFreeMonitoringStatus]),
    command(
        "getLastError",
        reply!(_c => Ok(doc! {"err": Bson::Null, "n": 0})),
    )
    .open(),
    command("getLog", reply!(c => crate::logging::get_log(c.cmd)))
    .admin_only()
    .needs(Cluster, &[GetLog]),
    // mongod checks find on the cursor's namespace, and that the cursor is the session's.
    command("getMore", output!(c => read::get_more(c.state, c.db, c.cmd).await))
        .api_v1()
        .in_transaction()
        .snapshot_read()
        .needs(Collection, &[Find]),
    command(
        "getParameter",
        reply!(c => admin::get_parameter(c.state, c.cmd)),
    )
    .admin_only()
    .needs(Cluster, &[GetParameter]),
    command(
        "grantPrivilegesToRole",
        reply!(c => crate::auth::role_store::change_privileges(c.state, c.db, c.cmd, true).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "grantRolesToRole",
        reply!(c => crate::auth::role_store::change_inherited(c.state, c.db, c.cmd, true).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "grantRolesToUser",
        reply!(c => crate::auth::users::change_roles(c.state, c.db, c.cmd, true).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "hello",
        reply!(c => handshake::hello(c.state, c.conn, c.name, c.cmd).await),
    )
    .api_v1()
    .open(),
    // Not admin-only in mongod (listCommands said it was).
    command("hostInfo", reply!(_c => Ok(admin::host_info()))).needs(Cluster, &[HostInfo]),
    command(
        "insert",
        reply!(c => write::insert(c.state, c.db, c.cmd, c.payload).await),
    )
    .writes(Adds)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[Insert]),
    // mongod registers isMaster apart from hello (outside the Stable API).
    command(
        "isMaster",
        reply!(c => handshake::hello(c.state, c.conn, c.name, c.cmd).await),
    )
    .aliases(&["ismaster"])
    .open(),
    command(
        "killAllSessions",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .needs(Cluster, &[KillAnySession]),
    command(
        "killAllSessionsByPattern",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .needs(Cluster, &[KillAnySession]),
    // mongod checks that the cursors are the session's (or killAnyCursor).
    command(
        "killCursors",
        reply!(c => read::kill_cursors(c.state, c.db, c.cmd)),
    )
    .api_v1()
    .in_transaction()
    .needs(Collection, &[KillCursors]),
    // killop, or none for one's own operation (auth::check).
    command(
        "killOp",
        reply!(c => crate::current_op::kill_op(c.state, c.cmd)),
    )
    .admin_only(),
    // A session's own sessions need no privilege; others' need killAnySession.
    command(
        "killSessions",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .open(),
    command(
        "listCollections",
        reply!(c => ddl::list_collections(c.state, c.db, c.cmd).await),
    )
    .api_v1()
    .needs(Database, &[ListCollections]),
    command(
        "listCommands",
        reply!(c => Ok(list_commands(c.state.config.test_commands_enabled()))),
    )
    .open(),
    command(
        "listDatabases",
        reply!(c => ddl::list_databases(c.state, c.db, c.cmd).await),
    )
    .admin_only()
    .api_v1()
    .needs(Cluster, &[ListDatabases]),
    command(
        "listIndexes",
        reply!(c => ddl::list_indexes(c.state, c.db, c.cmd).await),
    )
    .api_v1()
    .needs(Collection, &[ListIndexes]),
    command("lockInfo", reply!(_c => Ok(admin::lock_info())))
        .admin_only()
        .needs(Cluster, &[ServerStatus]),
    command("logRotate", reply!(c => admin::log_rotate(c.cmd)))
        .admin_only()
        .needs(Cluster, &[LogRotate]),
    command("logout", reply!(c => Ok(crate::auth::logout(c.conn)))).open(),
    // mongod requires insert and remove (replace) or update (merge, reduce) on the
    // output collection too.
    command(
        "mapReduce",
        reply!(c => map_reduce::map_reduce(c.state, c.db, c.cmd).await),
    )
    .aliases(&["mapreduce"])
    .writes(OutOption)
    .needs(Collection, &[Find]),
    command(
        "parallelChangeStream",
        reply!(c => parallel_stream::run(c.state, c.cmd).await),
    )
    .writes(Group)
    .admin_only()
    .needs(Cluster, &[ChangeStream, Find]),
    command("ping", reply!(_c => Ok(Document::new())))
        .api_v1()
        .open(),
    command(
        "planCacheClear",
        reply!(c => admin::plan_cache(c.state, c.cmd, c.db)),
    )
    .needs(Collection, &[PlanCacheWrite]),
    command(
        "planCacheClearFilters",
        reply!(c => admin::plan_cache(c.state, c.cmd, c.db)),
    )
    .needs(Collection, &[PlanCacheIndexFilter]),
    command(
        "planCacheListFilters",
        reply!(c => admin::plan_cache(c.state, c.cmd, c.db)),
    )
    .needs(Collection, &[PlanCacheRead]),
    command(
        "planCacheSetFilter",
        reply!(c => admin::plan_cache(c.state, c.cmd, c.db)),
    )
    .needs(Collection, &[PlanCacheIndexFilter]),
    command(
        "profile",
        reply!(c => c.state.profiler.command(c.db, c.cmd)),
    )
    .needs(Database, &[EnableProfiler]),
    command(
        "reIndex",
        reply!(c => maintenance::re_index(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .needs(Collection, &[ReIndex]),
    command(
        "refreshSessions",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .api_v1()
    .open(),
    command(
        "renameCollection",
        reply!(c => ddl::rename_collection(c.state, c.cmd).await),
    )
    .admin_only()
    .writes(Adds)
    .write_concern(),
    command(
        "replSetFreeze",
        reply!(c => crate::replset::freeze(c.state, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetStateChange]),
    command(
        "replSetGetConfig",
        reply!(c => admin::repl_set_get_config(c.state, c.cmd)),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetGetConfig]),
    command(
        "replSetGetStatus",
        reply!(c => Ok(admin::repl_set_get_status(c.state))),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetGetStatus]),
    command(
        "replSetInitiate",
        reply!(c => crate::replset::initiate(c.state, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetConfigure]),
    // The members' Raft calls to one another (`replication::network`).
    command(
        "replSetRaft",
        reply!(c => crate::replset::raft_command(c.state, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[Internal]),
    command(
        "replSetReconfig",
        reply!(c => crate::replset::reconfig(c.state, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetConfigure]),
    command(
        "replSetStepDown",
        reply!(c => crate::replset::step_down(c.state, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[ReplSetStateChange]),
    command(
        "resetError",
        reply!(_c => Ok(doc! {"err": Bson::Null, "n": 0})),
    )
    .open(),
    command(
        "revokePrivilegesFromRole",
        reply!(c => crate::auth::role_store::change_privileges(c.state, c.db, c.cmd, false).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "revokeRolesFromRole",
        reply!(c => crate::auth::role_store::change_inherited(c.state, c.db, c.cmd, false).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "revokeRolesFromUser",
        reply!(c => crate::auth::users::change_roles(c.state, c.db, c.cmd, false).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "rolesInfo",
        reply!(c => crate::auth::role_store::roles_info(c.state, c.db, c.cmd).await),
    )
    .needs(Database, &[UserAdmin]),
    command(
        "saslContinue",
        reply!(c => crate::auth::sasl_continue(c.state, c.conn, c.cmd).await),
    )
    .api_v1()
    .open(),
    command(
        "saslStart",
        reply!(c => crate::auth::sasl_start(c.state, c.conn, c.db, c.cmd, false).await),
    )
    .api_v1()
    .open(),
    command(
        "serverStatus",
        reply!(c => Ok(admin::server_status(c.state))),
    )
    .needs(Cluster, &[ServerStatus]),
    command(
        "setDefaultRWConcern",
        reply!(c => admin::set_default_rw_concern(c.state, c.cmd).await),
    )
    .admin_only()
    .writes(Adds)
    .write_concern()
    .needs(Cluster, &[SetDefaultRWConcern]),
    command(
        "setFeatureCompatibilityVersion",
        reply!(c => admin::set_feature_compatibility_version(c.state, c.cmd).await),
    )
    .admin_only()
    .write_concern()
    .needs(Cluster, &[SetFeatureCompatibilityVersion]),
    command(
        "setParameter",
        reply!(c => admin::set_parameter(c.state, c.cmd)),
    )
    .admin_only()
    .needs(Cluster, &[SetParameter]),
    command(
        "shutdown",
        reply!(c => admin::shutdown(c.state, &c.conn.peer, c.cmd).await),
    )
    .admin_only()
    .needs(Cluster, &[Shutdown]),
    command(
        "startSession",
        reply!(c => admin::sessions(c.state, c.name, c.cmd)),
    )
    .open(),
    // mongod's test commands of the versioned API (its `testVersion1`/`testVersion2`,
    // with enableTestCommands): the first is in API version 1, the second is not, so
    // `apiStrict: true` refuses it with 323 APIStrictError (the drivers' versioned-API
    // spec tests run it).
    command("testVersion1", reply!(_c => Ok(Document::new())))
        .api_v1()
        .test_only()
        .open(),
    command("testVersion2", reply!(_c => Ok(Document::new())))
        .test_only()
        .open(),
    // With upsert: true mongod requires insert too.
    command("top", reply!(c => Ok(admin::top(c.state))))
        .admin_only()
        .needs(Cluster, &[Top]),
    command(
        "update",
        reply!(c => write::update(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .api_v1()
    .in_transaction()
    .needs(Collection, &[Update]),
    command(
        "updateRole",
        reply!(c => crate::auth::role_store::update_role(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    command(
        "updateUser",
        reply!(c => crate::auth::users::update_user(c.state, c.db, c.cmd).await),
    )
    .writes(Adds)
    .write_concern()
    .needs(Database, &[UserAdmin]),
    // A user may see itself without viewUser (auth::check), as in mongod.
    command(
        "usersInfo",
        reply!(c => crate::auth::users::users_info(c.state, c.db, c.cmd).await),
    )
    .needs(Database, &[UserAdmin]),
    command(
        "validate",
        reply!(c => ddl::validate(c.state, c.db, c.cmd).await),
    )
    .needs(Collection, &[Validate]),
    command(
        "whatsmyuri",
        reply!(c => Ok(doc! {"you": c.conn.peer.clone()})),
    )
    .open(),
];

/// FNV-1a over a command name: every command looks its name up here, and the
/// standard library's SipHash (keyed against hash flooding, which a fixed table of
/// names does not need) cost about 120 instructions per lookup under callgrind.
#[derive(Default)]
struct NameHasher(u64);

impl std::hash::Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type ByName = HashMap<&'static str, &'static Spec, std::hash::BuildHasherDefault<NameHasher>>;

/// Every name and alias, to its spec.
static BY_NAME: LazyLock<ByName> = LazyLock::new(|| {
    SPECS
        .iter()
        .flat_map(|s| {
            std::iter::once(s.name)
                .chain(s.aliases.iter().copied())
                .map(move |n| (n, s))
        })
        .collect()
});

/// The command run as `name` (its name or an alias; names are case-sensitive, as in
/// mongod). Test-only commands exist only when test commands are enabled.
pub fn find(name: &str, test_commands: bool) -> Option<&'static Spec> {
    BY_NAME
        .get(name)
        .copied()
        .filter(|s| test_commands || !s.test_only)
}

/// `listCommands`: every command by its name (not its aliases), in alphabetical order
/// as mongod lists them, with its help and whether it is admin-only.
pub fn list_commands(test_commands: bool) -> Document {
    let mut commands = Document::new();
    for s in SPECS.iter().filter(|s| test_commands || !s.test_only) {
        commands.insert(s.name, doc! {"help": "", "adminOnly": s.admin_only});
    }
    doc! {"commands": commands}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The facts about commands as the server listed them before the registry, copied
    /// verbatim from the lists the registry replaced, so that the tests below prove
    /// the move changed nothing but the differences they name.
    mod before {
        use bson::{Bson, Document};

        /// The names the dispatch `match` (and `run`, for getMore and aggregate) ran.
        pub const DISPATCHED: &[&str] = &[
            "configureFailPoint",
            "hello",
            "isMaster",
            "ismaster",
            "ping",
            "profile",
            "buildInfo",
            "buildinfo",
            "whatsmyuri",
            "connectionStatus",
            "getParameter",
            "setParameter",
            "getCmdLineOpts",
            "hostInfo",
            "serverStatus",
            "listCommands",
            "getLog",
            "getFreeMonitoringStatus",
            "currentOp",
            "killOp",
            "shutdown",
            "replSetGetStatus",
            "replSetGetConfig",
            "replSetInitiate",
            "replSetReconfig",
            "getDefaultRWConcern",
            "commitTransaction",
            "abortTransaction",
            "endSessions",
            "killSessions",
            "killAllSessions",
            "killAllSessionsByPattern",
            "refreshSessions",
            "startSession",
            "logout",
            "saslStart",
            "saslContinue",
            "authenticate",
            "listDatabases",
            "listCollections",
            "listIndexes",
            "create",
            "drop",
            "dropDatabase",
            "renameCollection",
            "collMod",
            "convertToCapped",
            "cloneCollectionAsCapped",
            "createIndexes",
            "dropIndexes",
            "deleteIndexes",
            "dbStats",
            "collStats",
            "dataSize",
            "datasize",
            "validate",
            "usersInfo",
            "insert",
            "update",
            "delete",
            "findAndModify",
            "findandmodify",
            "find",
            "killCursors",
            "count",
            "distinct",
            "explain",
            "getLastError",
            "resetError",
            "fsync",
            "fsyncUnlock",
            "appendOplogNote",
            "getMore",
            "aggregate",
        ];

        /// The commands whose handler (or dispatch arm) called `args::admin_only`.
        pub const ENFORCED_ADMIN_ONLY: &[&str] = &[
            "configureFailPoint",
            "shutdown",
            "replSetGetStatus",
            "replSetGetConfig",
            "replSetInitiate",
            "replSetReconfig",
            "commitTransaction",
            "abortTransaction",
            "fsync",
            "fsyncUnlock",
            "currentOp",
            "killOp",
            "renameCollection",
        ];

        /// `listCommands`' own list: (name, adminOnly).
        pub const LIST_COMMANDS: &[(&str, bool)] = &[
            ("abortTransaction", true),
            ("aggregate", false),
            ("appendOplogNote", true),
            ("buildInfo", false),
            ("cloneCollectionAsCapped", false),
            ("collMod", false),
            ("collStats", false),
            ("commitTransaction", true),
            ("connectionStatus", false),
            ("convertToCapped", false),
            ("count", false),
            ("create", false),
            ("createIndexes", false),
            ("dataSize", false),
            ("dbStats", false),
            ("delete", false),
            ("distinct", false),
            ("drop", false),
            ("dropDatabase", false),
            ("dropIndexes", false),
            ("endSessions", false),
            ("explain", false),
            ("find", false),
            ("findAndModify", false),
            ("fsync", true),
            ("fsyncUnlock", true),
            ("getCmdLineOpts", true),
            ("getDefaultRWConcern", true),
            ("getLastError", false),
            ("getLog", true),
            ("getMore", false),
            ("getParameter", true),
            ("hello", false),
            ("hostInfo", true),
            ("insert", false),
            ("isMaster", false),
            ("killAllSessions", false),
            ("killAllSessionsByPattern", false),
            ("killCursors", false),
            ("killSessions", false),
            ("listCollections", false),
            ("listCommands", false),
            ("listDatabases", true),
            ("listIndexes", false),
            ("ping", false),
            ("profile", false),
            ("refreshSessions", false),
            ("renameCollection", true),
            ("replSetGetConfig", true),
            ("replSetGetStatus", true),
            ("replSetInitiate", true),
            ("replSetReconfig", true),
            ("resetError", false),
            ("serverStatus", false),
            ("setParameter", true),
            ("shutdown", true),
            ("startSession", false),
            ("update", false),
            ("usersInfo", false),
            ("validate", false),
            ("whatsmyuri", false),
        ];

        /// `commands::writes_data`.
        pub fn writes_data(name: &str, cmd: &Document) -> bool {
            match name {
                "insert"
                | "update"
                | "delete"
                | "findAndModify"
                | "findandmodify"
                | "create"
                | "drop"
                | "dropDatabase"
                | "createIndexes"
                | "dropIndexes"
                | "deleteIndexes"
                | "renameCollection"
                | "collMod"
                | "convertToCapped"
                | "cloneCollectionAsCapped"
                | "commitTransaction"
                | "appendOplogNote" => true,
                "aggregate" => matches!(
                    cmd.get_array("pipeline").ok().and_then(|p| p.last()),
                    Some(Bson::Document(last)) if last.contains_key("$out") || last.contains_key("$merge")
                ),
                _ => false,
            }
        }

        /// `commands::removes_data`.
        pub fn removes_data(name: &str) -> bool {
            matches!(
                name,
                "delete" | "drop" | "dropDatabase" | "dropIndexes" | "deleteIndexes"
            )
        }

        /// `commands::WRITE_CONCERN_COMMANDS`.
        pub const WRITE_CONCERN_COMMANDS: &[&str] = &[
            "insert",
            "update",
            "delete",
            "findAndModify",
            "create",
            "drop",
            "dropDatabase",
            "renameCollection",
            "createIndexes",
            "dropIndexes",
            "collMod",
        ];

        /// `commands::API_V1_COMMANDS`.
        pub const API_V1_COMMANDS: &[&str] = &[
            "abortTransaction",
            "aggregate",
            "authenticate",
            "collMod",
            "commitTransaction",
            "count",
            "create",
            "createIndexes",
            "delete",
            "drop",
            "dropDatabase",
            "dropIndexes",
            "endSessions",
            "find",
            "findAndModify",
            "getMore",
            "hello",
            "insert",
            "killCursors",
            "listCollections",
            "listDatabases",
            "listIndexes",
            "ping",
            "refreshSessions",
            "saslContinue",
            "saslStart",
            "update",
        ];

        /// `transactions::ALLOWED`.
        pub const ALLOWED: &[&str] = &[
            "find",
            "getMore",
            "killCursors",
            "insert",
            "update",
            "delete",
            "findAndModify",
            "findandmodify",
            "aggregate",
            "distinct",
            "commitTransaction",
            "abortTransaction",
            "create",
            "createIndexes",
            "bulkWrite",
        ];

        /// `transactions::SNAPSHOT_READS`.
        pub const SNAPSHOT_READS: &[&str] = &["find", "aggregate", "distinct", "getMore"];
    }
    /// Every name and alias the registry runs.
    fn all_names() -> BTreeSet<&'static str> {
        SPECS
            .iter()
            .flat_map(|s| std::iter::once(s.name).chain(s.aliases.iter().copied()))
            .collect()
    }

    /// The names and aliases of the commands `flag` holds for.
    fn names_where(flag: impl Fn(&Spec) -> bool) -> BTreeSet<&'static str> {
        all_names()
            .into_iter()
            .filter(|n| flag(find(n, true).expect("registered")))
            .collect()
    }

    fn set(names: &[&'static str]) -> BTreeSet<&'static str> {
        names.iter().copied().collect()
    }

    /// The aliases of findAndModify and dropIndexes take their command's flags, as in
    /// mongod (flags belong to a command, not to the name it runs as); before the
    /// registry they lacked two: the write concern waited for on failure, and API v1.
    const ALIASES_GAINING_THEIR_COMMANDS_FLAGS: &[&str] = &["findandmodify", "deleteIndexes"];

    /// Commands registered since the lists above (issue 31), with their flags: admin-only,
    /// adds data, takes a write concern.
    const ADDED: &[(&str, bool, bool, bool)] = &[
        ("applyOps", false, true, true),
        ("compact", false, false, false),
        // Issue 29: the user and role commands.
        ("createRole", false, true, true),
        ("createUser", false, true, true),
        ("dropAllRolesFromDatabase", false, true, true),
        ("dropRole", false, true, true),
        ("grantPrivilegesToRole", false, true, true),
        ("grantRolesToRole", false, true, true),
        ("revokePrivilegesFromRole", false, true, true),
        ("revokeRolesFromRole", false, true, true),
        ("rolesInfo", false, false, false),
        ("updateRole", false, true, true),
        ("dropAllUsersFromDatabase", false, true, true),
        ("dropUser", false, true, true),
        ("grantRolesToUser", false, true, true),
        ("revokeRolesFromUser", false, true, true),
        ("updateUser", false, true, true),
        ("dbHash", false, false, false),
        ("dbhash", false, false, false),
        // mongod's alias of dbStats (pymongo's auth tests call it so).
        ("dbstats", false, false, false),
        ("filemd5", false, false, false),
        ("lockInfo", true, false, false),
        ("logRotate", true, false, false),
        // Writes unless `out` is inline (these commands have no `out`).
        ("mapReduce", false, true, false),
        ("mapreduce", false, true, false),
        // Issue 28: seed 004's parallel change streams.
        ("parallelChangeStream", true, false, false),
        ("commitChangeStreamGroup", false, true, true),
        ("planCacheClear", false, false, false),
        ("planCacheClearFilters", false, false, false),
        ("planCacheListFilters", false, false, false),
        ("planCacheSetFilter", false, false, false),
        ("reIndex", false, true, false),
        // Issue 27: the members' Raft calls to one another.
        ("replSetRaft", true, false, false),
        ("replSetStepDown", true, false, false),
        ("replSetFreeze", true, false, false),
        ("setDefaultRWConcern", true, true, true),
        ("setFeatureCompatibilityVersion", true, false, true),
        ("testVersion1", false, false, false),
        ("testVersion2", false, false, false),
        ("top", true, false, false),
    ];

    /// Of `ADDED`, those that only remove data (they run below the free-space floor).
    const ADDED_REMOVING: &[&str] = &[
        "dropAllRolesFromDatabase",
        "dropAllUsersFromDatabase",
        "dropRole",
        "dropUser",
    ];

    /// Of `ADDED`, those in API version 1.
    const ADDED_API_V1: &[&str] = &["testVersion1"];

    fn added_where(flag: impl Fn(&(&str, bool, bool, bool)) -> bool) -> Vec<&'static str> {
        ADDED.iter().filter(|a| flag(a)).map(|a| a.0).collect()
    }

    #[test]
    fn names_and_aliases_are_unique() {
        let count: usize = SPECS.iter().map(|s| 1 + s.aliases.len()).sum();
        assert_eq!(
            all_names().len(),
            count,
            "a name or alias is registered twice"
        );
        assert_eq!(BY_NAME.len(), count);
    }

    #[test]
    fn specs_are_in_alphabetical_order() {
        // listCommands lists them in this order, as mongod (a map by name).
        for pair in SPECS.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
    }

    #[test]
    fn every_listed_command_is_dispatchable() {
        for test_commands in [false, true] {
            let listed = list_commands(test_commands);
            let listed = listed.get_document("commands").unwrap();
            for name in listed.keys() {
                let spec = find(name, test_commands).unwrap_or_else(|| panic!("{name} listed"));
                assert_eq!(spec.name, name, "listCommands names commands, not aliases");
            }
            let registered = SPECS.iter().filter(|s| test_commands || !s.test_only);
            assert_eq!(listed.len(), registered.count());
        }
        assert!(find("configureFailPoint", false).is_none());
        assert!(find("configureFailPoint", true).is_some());
    }

    #[test]
    fn names_are_case_sensitive() {
        assert!(find("find", false).is_some());
        assert!(find("Find", false).is_none());
        assert!(find("FINDANDMODIFY", false).is_none());
    }

    #[test]
    fn the_same_names_are_dispatched_as_before() {
        let mut expected = set(before::DISPATCHED);
        expected.extend(added_where(|_| true));
        assert_eq!(all_names(), expected);
    }

    /// A parallel change stream writes only when a consumer joins a group.
    #[test]
    fn a_group_join_writes() {
        let spec = find("parallelChangeStream", false).unwrap();
        assert!(!spec
            .writes
            .writes(&doc! {"parallelChangeStream": 1, "nBuckets": 4}));
        assert!(spec
            .writes
            .writes(&doc! {"parallelChangeStream": 1, "group": "g", "consumer": "c"}));
    }

    #[test]
    fn writes_agree_with_the_lists_before() {
        let pipelines = [
            doc! {},
            doc! {"pipeline": [{"$match": {}}]},
            doc! {"pipeline": [{"$match": {}}, {"$out": "x"}]},
            doc! {"pipeline": [{"$merge": {"into": "x"}}]},
            doc! {"pipeline": [{"$out": "x"}, {"$match": {}}]},
        ];
        for name in all_names() {
            let spec = find(name, true).unwrap();
            for cmd in &pipelines {
                assert_eq!(
                    spec.writes.writes(cmd),
                    before::writes_data(name, cmd) || added_where(|a| a.2).contains(&name),
                    "{name} {cmd}"
                );
            }
            assert_eq!(
                spec.writes == Writes::Removes,
                before::removes_data(name) || ADDED_REMOVING.contains(&name),
                "{name}"
            );
        }
    }

    #[test]
    fn write_concern_agrees_with_the_list_before() {
        let mut expected = set(before::WRITE_CONCERN_COMMANDS);
        expected.extend(ALIASES_GAINING_THEIR_COMMANDS_FLAGS);
        expected.extend(added_where(|a| a.3));
        assert_eq!(names_where(|s| s.write_concern), expected);
    }

    #[test]
    fn api_v1_agrees_with_the_list_before() {
        let mut expected = set(before::API_V1_COMMANDS);
        expected.extend(ALIASES_GAINING_THEIR_COMMANDS_FLAGS);
        expected.extend(ADDED_API_V1);
        assert_eq!(names_where(|s| s.api_v1), expected);
    }

    #[test]
    fn transactions_agree_with_the_lists_before() {
        // bulkWrite is no command here: like any unknown name it now fails with
        // CommandNotFound before any check, as in mongod (it was let into a transaction,
        // then not found).
        let mut expected = set(before::ALLOWED);
        assert!(expected.remove("bulkWrite"));
        assert!(find("bulkWrite", true).is_none());
        // Issue 28: a consumer group's commit runs in the consumer's transaction.
        expected.insert("commitChangeStreamGroup");
        assert_eq!(names_where(|s| s.in_transaction), expected);
        assert_eq!(
            names_where(|s| s.snapshot_read),
            set(before::SNAPSHOT_READS)
        );
    }

    /// Commands mongod lists that listCommands left out: every registered command is
    /// listed now (configureFailPoint with test commands, as mongod registers it).
    const NEWLY_LISTED: &[&str] = &[
        "authenticate",
        "currentOp",
        "getFreeMonitoringStatus",
        "killOp",
        "logout",
        "saslContinue",
        "saslStart",
    ];

    #[test]
    fn list_commands_agrees_with_its_list_before() {
        let listed = list_commands(false);
        let listed = listed.get_document("commands").unwrap();
        let mut expected: BTreeSet<&str> = before::LIST_COMMANDS.iter().map(|(n, _)| *n).collect();
        expected.extend(NEWLY_LISTED);
        // Aliases (dbhash) are not listed, nor test commands without enableTestCommands.
        expected.extend(added_where(|a| {
            SPECS.iter().any(|s| s.name == a.0 && !s.test_only)
        }));
        assert_eq!(
            listed.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            expected
        );
        for (name, admin_only) in before::LIST_COMMANDS {
            let now = listed
                .get_document(name)
                .unwrap()
                .get_bool("adminOnly")
                .unwrap();
            // mongod's hostInfo is not admin-only (HostInfoCmd keeps the default).
            let expected = *admin_only && *name != "hostInfo";
            assert_eq!(now, expected, "{name}");
        }
    }

    #[test]
    fn admin_only_agrees_with_the_lists_before() {
        // Before, listCommands' flag and the checks the handlers made disagreed: the
        // registry's flag is both, as mongod's adminOnly. Now enforced too:
        // appendOplogNote, getCmdLineOpts, getDefaultRWConcern, getLog, getParameter,
        // listDatabases and setParameter (listed as admin-only, run anywhere) and
        // getFreeMonitoringStatus (adminOnly in mongod); hostInfo is not (mongod).
        let mut expected = set(before::ENFORCED_ADMIN_ONLY);
        expected.extend(
            before::LIST_COMMANDS
                .iter()
                .filter(|(_, a)| *a)
                .map(|(n, _)| *n),
        );
        expected.insert("getFreeMonitoringStatus");
        expected.extend(added_where(|a| a.1));
        assert!(expected.remove("hostInfo"));
        assert_eq!(names_where(|s| s.admin_only), expected);
    }

    #[test]
    fn privileges_name_actions_when_they_are_decided() {
        for s in SPECS {
            if let Privileges::Actions(_, actions) = s.privileges {
                assert!(
                    !actions.is_empty(),
                    "{}: no action is Privileges::None",
                    s.name
                );
            }
        }
    }
}

//! Authentication and authorization, as mongod offers them.
//!
//! - Users live in `admin.system.users` (`users`), with SCRAM credentials
//!   (`credentials`), never passwords.
//! - A connection proves who it is with SCRAM-SHA-1 or SCRAM-SHA-256 over `saslStart` /
//!   `saslContinue` (`scram`), with its TLS client certificate over `authenticate`
//!   (`x509`), or either inside its first `hello` (`speculativeAuthenticate`); what it
//!   proved is its [`Session`], owned by the connection's task.
//! - With `--auth` (`security.authorization: enabled`), every command checks the
//!   privileges the command registry declares for it against the session's roles
//!   (`roles`): 13 Unauthorized otherwise. Without a user yet, a client on the same
//!   host may create the first one (mongod's localhost exception).

pub mod credentials;
pub mod keyfile;
pub mod role_store;
pub mod roles;
pub mod scram;
pub mod store;
pub mod users;
pub mod x509;

use crate::commands::args::opt_doc;
use crate::commands::registry::{Privileges, Resource, Spec};
use crate::commands::Conn;
use crate::state::ServerState;
use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use credentials::Mechanism;
use std::sync::Arc;
use tailstream_engine::query::error::{codes, Error, Result};

/// mongod numbers a connection's SASL conversations from 1; one runs at a time.
const CONVERSATION_ID: i32 = 1;

/// What a connection has proven about itself.
#[derive(Default)]
pub struct Session {
    /// The user it authenticated as (mongod allows one per connection).
    pub user: Option<users::User>,
    /// What the user may do, and the users-and-roles generation it was resolved at.
    grants: Option<(u64, role_store::Grants)>,
    conversation: Option<Step>,
}

/// Where a SCRAM conversation stands.
enum Step {
    /// Waiting for the client's proof.
    Proof {
        conversation: Box<scram::Conversation>,
        /// The user, as read when the conversation started, and the users-and-roles
        /// generation before that read: its grants are resolved at that generation
        /// (a change since makes the next command resolve them again).
        user: Box<users::User>,
        generation: u64,
        skip_empty_exchange: bool,
        speculative: bool,
    },
    /// The proof was good; the client's empty last message ends it (no
    /// `skipEmptyExchange`).
    Closing,
}

fn payload_bytes(cmd: &Document) -> Result<Vec<u8>> {
    match cmd.get("payload") {
        Some(Bson::Binary(b)) => Ok(b.bytes.clone()),
        Some(Bson::String(s)) => Ok(s.clone().into_bytes()),
        Some(v) => Err(crate::commands::args::wrong_field_type(
            "payload", v, "binData",
        )),
        None => Err(Error::missing_field("saslStart.payload")),
    }
}

fn binary(bytes: Vec<u8>) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    })
}

/// `saslStart` (and a `hello`'s `speculativeAuthenticate`): the client's first message.
pub async fn sasl_start(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    db: &str,
    cmd: &Document,
    speculative: bool,
) -> Result<Document> {
    let mech_name = match cmd.get("mechanism") {
        Some(Bson::String(m)) => m.clone(),
        Some(v) => {
            return Err(crate::commands::args::wrong_field_type(
                "saslStart.mechanism",
                v,
                "string",
            ))
        }
        None => return Err(Error::missing_field("saslStart.mechanism")),
    };
    let Some(mechanism) = Mechanism::parse(&mech_name) else {
        return Err(Error::new(
            codes::MECHANISM_UNAVAILABLE,
            format!(
                "Received authentication for mechanism {mech_name} which is unknown or not enabled"
            ),
        ));
    };
    let payload = payload_bytes(cmd)?;
    let skip_empty_exchange = opt_doc(cmd, "options")?
        .and_then(|o| o.get_bool("skipEmptyExchange").ok())
        .unwrap_or(false);
    conn.auth.conversation = None;
    let first = scram::parse_client_first(&payload).inspect_err(|_| {
        log_failure(conn, mechanism, "", db, speculative);
    })?;
    let generation = store::generation();
    let user = users::find(state, &first.user, db).await?;
    let Some((user, credential)) = user.and_then(|u| u.credential(mechanism).map(|c| (u, c)))
    else {
        log_failure(conn, mechanism, &first.user, db, speculative);
        return Err(scram::auth_failed());
    };
    let (conversation, reply) = scram::Conversation::start(mechanism, first, db, credential);
    conn.auth.conversation = Some(Step::Proof {
        conversation: Box::new(conversation),
        user: Box::new(user),
        generation,
        skip_empty_exchange,
        speculative,
    });
    Ok(doc! {"conversationId": CONVERSATION_ID, "done": false, "payload": binary(reply)})
}

/// `saslContinue`: the client's proof, or the empty message that ends the exchange.
pub async fn sasl_continue(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    cmd: &Document,
) -> Result<Document> {
    let id = cmd
        .get("conversationId")
        .and_then(tailstream_engine::find::as_i64);
    let step = conn.auth.conversation.take();
    let Some(step) = step.filter(|_| id == Some(i64::from(CONVERSATION_ID))) else {
        return Err(Error::new(
            codes::PROTOCOL_ERROR,
            "No SASL session state found",
        ));
    };
    let payload = payload_bytes(cmd)?;
    match step {
        Step::Closing => Ok(
            doc! {"conversationId": CONVERSATION_ID, "done": true, "payload": binary(Vec::new())},
        ),
        Step::Proof {
            conversation,
            user: found,
            generation,
            skip_empty_exchange,
            speculative,
        } => {
            let (user, db, mech) = (
                conversation.user.clone(),
                conversation.db.clone(),
                conversation.mechanism,
            );
            let reply = match conversation.finish(&payload) {
                Ok(r) => r,
                Err(e) => {
                    log_failure(conn, mech, &user, &db, speculative);
                    return Err(e);
                }
            };
            log_in(state, conn, *found, generation, mech.name(), speculative).await?;
            if !skip_empty_exchange {
                conn.auth.conversation = Some(Step::Closing);
            }
            Ok(
                doc! {"conversationId": CONVERSATION_ID, "done": skip_empty_exchange, "payload": binary(reply)},
            )
        }
    }
}

/// The connection becomes `user` (its grants resolved at the users-and-roles
/// `generation` read before the user was), with mongod's log line; any mechanism.
async fn log_in(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    user: users::User,
    generation: u64,
    mechanism: &str,
    speculative: bool,
) -> Result<()> {
    let grants = role_store::resolve(state, &user.roles).await?;
    crate::logging::emit(
        "I",
        "ACCESS",
        ID_AUTH_SUCCESS,
        &format!("conn{}", conn.id),
        "Successfully authenticated",
        doc! {"client": conn.peer.clone(), "isSpeculative": speculative, "isClusterMember": false,
        "mechanism": mechanism, "user": user.user.clone(), "db": user.db.clone(), "result": 0},
    );
    *conn.info.user.lock() = Some(user.full_name());
    conn.auth.user = Some(user);
    conn.auth.grants = Some((generation, grants));
    Ok(())
}

/// mongod's log ids of an authentication's outcome.
const ID_AUTH_SUCCESS: i64 = 5286306;
const ID_AUTH_FAILURE: i64 = 5286307;

fn log_failure(conn: &Conn, mech: Mechanism, user: &str, db: &str, speculative: bool) {
    crate::logging::emit(
        "I",
        "ACCESS",
        ID_AUTH_FAILURE,
        &format!("conn{}", conn.id),
        "Authentication failed",
        doc! {"mechanism": mech.name(), "speculative": speculative, "principalName": user,
        "authenticationDatabase": db, "remote": conn.peer.clone(),
        "error": "AuthenticationFailed: SCRAM authentication failed"},
    );
}

/// The fields a `hello` adds for authentication: `saslSupportedMechs` for the user it
/// names, and the reply to a `speculativeAuthenticate` (none when it failed: the
/// driver then authenticates the usual way and sees the error there).
pub async fn hello_fields(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    cmd: &Document,
    reply: &mut Document,
) -> Result<()> {
    if let Some(Bson::String(name)) = cmd.get("saslSupportedMechs") {
        if let Some((db, user)) = name.split_once('.') {
            if let Some(u) = users::find(state, user, db).await? {
                let mechs: Vec<Bson> = u
                    .mechanisms()
                    .iter()
                    .map(|m| Bson::String(m.name().into()))
                    .collect();
                reply.insert("saslSupportedMechs", mechs);
            }
        }
    }
    if let Some(Bson::Document(spec)) = cmd.get("speculativeAuthenticate") {
        let db = spec.get_str("db").unwrap_or("admin").to_string();
        if spec.contains_key("saslStart") {
            if let Ok(r) = sasl_start(state, conn, &db, spec, true).await {
                reply.insert("speculativeAuthenticate", r);
            }
        } else if spec.contains_key("authenticate") {
            // mongod's default database for a speculative X.509 login is `$external`.
            let db = spec.get_str("db").unwrap_or(x509::EXTERNAL_DB).to_string();
            if let Ok(r) = x509::authenticate(state, conn, &db, spec, true).await {
                reply.insert("speculativeAuthenticate", r);
            }
        }
    }
    Ok(())
}

/// `logout`: the connection forgets its user (mongod 7 deprecates it but runs it).
pub fn logout(conn: &mut Conn) -> Document {
    conn.auth.user = None;
    *conn.info.user.lock() = None;
    conn.auth.grants = None;
    conn.auth.conversation = None;
    Document::new()
}

/// `connectionStatus`: who the connection is, with its roles (and, asked, privileges).
pub fn connection_status(conn: &Conn, cmd: &Document) -> Document {
    let (users, roles): (Vec<Bson>, Vec<Bson>) = match &conn.auth.user {
        Some(u) => (
            vec![Bson::Document(
                doc! {"user": u.user.clone(), "db": u.db.clone()},
            )],
            u.roles
                .iter()
                .map(|r| Bson::Document(r.to_document()))
                .collect(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let mut info = doc! {"authenticatedUsers": users, "authenticatedUserRoles": roles};
    if cmd.get_bool("showPrivileges").unwrap_or(false) {
        info.insert("authenticatedUserPrivileges", Bson::Array(Vec::new()));
    }
    doc! {"authInfo": info}
}

/// With `--auth`: Ok when the connection may run the command (its privileges, from
/// the registry, granted by its user's roles); 13 Unauthorized otherwise.
pub async fn check(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    spec: &Spec,
    db: &str,
    cmd: &Document,
) -> Result<()> {
    if !state.config.auth {
        return Ok(());
    }
    let needed = match spec.privileges {
        Privileges::None => return Ok(()),
        Privileges::Actions(resource, actions) => Some((resource, actions)),
        Privileges::Undecided => argument_privileges(spec.name, cmd),
    };
    // Boxed: every command awaits this check, and its future would otherwise be
    // copied into each command's own (see `commands::gates`).
    Box::pin(check_privileges(state, conn, spec, db, cmd, needed)).await
}

/// [`check`] once authentication is on and the command needs privileges: `needed`,
/// or None for a command whose privileges are not written down yet.
async fn check_privileges(
    state: &Arc<ServerState>,
    conn: &mut Conn,
    spec: &Spec,
    db: &str,
    cmd: &Document,
    needed: Option<(Resource, &[crate::commands::registry::Action])>,
) -> Result<()> {
    refresh_grants(state, conn).await?;
    let (Some(user), Some((_, grants))) = (&conn.auth.user, &conn.auth.grants) else {
        if localhost_exception(state, conn, spec).await? {
            return Ok(());
        }
        return Err(Error::new(
            codes::UNAUTHORIZED,
            format!("Command {} requires authentication", spec.name),
        ));
    };
    let coll = match cmd.get(spec.name) {
        Some(Bson::String(c)) => Some(c.as_str()),
        _ if spec.name == "getMore" => cmd.get_str("collection").ok(),
        _ => None,
    };
    let allowed = match needed {
        Some((resource, actions)) => actions
            .iter()
            .all(|a| grants.allows(resource, db, coll, *a)),
        // Not written down yet: only a user who may do anything.
        None => {
            grants.allows(
                Resource::Cluster,
                db,
                None,
                crate::commands::registry::Action::Shutdown,
            ) && grants.allows(
                Resource::Collection,
                db,
                coll,
                crate::commands::registry::Action::Remove,
            )
        }
    };
    if allowed
        || own_operation(state, user, spec.name, cmd)
        || own_user_info(user, spec.name, db, cmd)
    {
        check_cursor_owner(state, user, spec.name, cmd)
    } else {
        Err(Error::new(
            codes::UNAUTHORIZED,
            format!(
                "not authorized on {db} to execute command {{ {}: ... }}",
                spec.name
            ),
        ))
    }
}

/// Resolves the connection's grants again when users or roles changed since (a
/// dropped user is no longer authenticated), as mongod invalidates its user cache.
async fn refresh_grants(state: &Arc<ServerState>, conn: &mut Conn) -> Result<()> {
    let generation = store::generation();
    if conn
        .auth
        .grants
        .as_ref()
        .is_some_and(|(g, _)| *g == generation)
    {
        return Ok(());
    }
    let Some(user) = conn.auth.user.take() else {
        conn.auth.grants = None;
        return Ok(());
    };
    let Some(current) = users::find(state, &user.user, &user.db).await? else {
        conn.auth.grants = None;
        *conn.info.user.lock() = None;
        return Ok(());
    };
    let grants = role_store::resolve(state, &current.roles).await?;
    conn.auth.user = Some(current);
    conn.auth.grants = Some((generation, grants));
    Ok(())
}

/// killOp of one of the user's own operations needs no `killop` privilege (mongod).
fn own_operation(state: &ServerState, user: &users::User, name: &str, cmd: &Document) -> bool {
    if name != "killOp" {
        return false;
    }
    let Some(opid) = cmd.get("op").and_then(tailstream_engine::find::as_i64) else {
        return false;
    };
    state.current_ops.user_of_opid(opid) == Some(Some(user.full_name()))
}

/// usersInfo of the user itself needs no privilege (mongod lets a user view itself).
fn own_user_info(user: &users::User, name: &str, db: &str, cmd: &Document) -> bool {
    if name != "usersInfo" {
        return false;
    }
    match cmd.get("usersInfo") {
        Some(Bson::String(u)) => *u == user.user && db == user.db,
        Some(Bson::Document(d)) => {
            d.get_str("user") == Ok(user.user.as_str()) && d.get_str("db") == Ok(user.db.as_str())
        }
        _ => false,
    }
}

/// getMore and killCursors: only the user that opened a cursor may continue or kill
/// it (mongod's rule), whatever its privileges.
fn check_cursor_owner(
    state: &ServerState,
    user: &users::User,
    name: &str,
    cmd: &Document,
) -> Result<()> {
    let ids: Vec<i64> = match (name, cmd.get(name)) {
        ("getMore", Some(Bson::Int64(id))) => vec![*id],
        ("killCursors", _) => match cmd.get("cursors") {
            Some(Bson::Array(a)) => a.iter().filter_map(|v| v.as_i64()).collect(),
            _ => Vec::new(),
        },
        _ => return Ok(()),
    };
    let me = user.full_name();
    for id in ids {
        let owner = state.engine.cursors.origin(id).and_then(|o| o.user.clone());
        if owner.is_some_and(|owner| owner != me) {
            return Err(Error::new(
                codes::UNAUTHORIZED,
                format!("cursor id {id} was not created by the authenticated user"),
            ));
        }
    }
    Ok(())
}

/// The privileges of the commands whose needs depend on their arguments (None: not
/// written down, only a user who may do anything runs it). Roles here are per
/// database or wider, so an action on the command's database covers every
/// collection a pipeline reads there.
fn argument_privileges(
    name: &str,
    cmd: &Document,
) -> Option<(Resource, &'static [crate::commands::registry::Action])> {
    use crate::commands::registry::Action::*;
    match name {
        "aggregate" => {
            let stages = cmd.get_array("pipeline").ok();
            let first_stage = |n: &str| {
                stages
                    .and_then(|s| s.first())
                    .and_then(|s| s.as_document())
                    .is_some_and(|s| s.contains_key(n))
            };
            let last_writes = stages
                .and_then(|s| s.last())
                .and_then(|s| s.as_document())
                .is_some_and(|s| s.contains_key("$out") || s.contains_key("$merge"));
            let own_ops = stages
                .and_then(|s| s.first())
                .and_then(|s| s.as_document())
                .and_then(|s| s.get_document("$currentOp").ok())
                .is_some_and(|o| o.get_bool("ownOps") == Ok(true));
            if first_stage("$currentOp") && own_ops {
                Some((Resource::Cluster, &[]))
            } else if first_stage("$currentOp") {
                Some((Resource::Cluster, &[Inprog]))
            } else if first_stage("$changeStream") {
                Some((Resource::Database, &[Find, ChangeStream]))
            } else if last_writes {
                Some((Resource::Database, &[Find, Insert, Remove, Update]))
            } else {
                Some((Resource::Database, &[Find]))
            }
        }
        "explain" => Some((Resource::Database, &[Find])),
        // `$ownOps`: the user's own operations, which need no privilege.
        "currentOp" if cmd.get_bool("$ownOps") == Ok(true) => Some((Resource::Cluster, &[])),
        "currentOp" => Some((Resource::Cluster, &[Inprog])),
        "killOp" => Some((Resource::Cluster, &[Killop])),
        "cloneCollectionAsCapped" => Some((Resource::Database, &[Find, Insert, CreateCollection])),
        _ => None,
    }
}

/// mongod's localhost exception: with no user at all, a client connected from this
/// host may create the first user.
async fn localhost_exception(state: &Arc<ServerState>, conn: &Conn, spec: &Spec) -> Result<bool> {
    let local = conn.peer.starts_with("127.0.0.1:")
        || conn.peer.starts_with("[::1]:")
        || conn.peer.starts_with("anonymous unix socket");
    // The first user, or initiating a replica set (mongod: "You can also use it to
    // initiate a replica set").
    if !local || !matches!(spec.name, "createUser" | "replSetInitiate") {
        return Ok(false);
    }
    Ok(!users::any_exist(state).await?)
}

//! Typed access to command arguments, with mongod's error messages for wrong types
//! ("BSON field 'find.filter' is the wrong type 'int', expected type 'object'"): the
//! query crate's typed reads (`tailstream_query::args`), the field named after the command.

use bson::{Bson, Document};
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::args::Fields;
use tailstream_engine::query::error::{codes, Error, Result};

/// mongod's TypeMismatch for the field at `path` (e.g. "find.filter", or a generic
/// argument such as "apiVersion").
pub use tailstream_engine::query::args::wrong_type as wrong_field_type;
pub use tailstream_engine::query::compare::type_name;

/// mongod's refusal (13 Unauthorized) of an admin-only command run on another database.
pub fn admin_only(db: &str, command: &str) -> Result<()> {
    if db == "admin" {
        Ok(())
    } else {
        Err(Error::new(
            codes::UNAUTHORIZED,
            format!("{command} may only be run against the admin database."),
        ))
    }
}

fn cmd_name(cmd: &Document) -> &str {
    cmd.keys().next().map(|s| s.as_str()).unwrap_or("")
}

/// An optional sub-document argument.
pub fn opt_doc(cmd: &Document, field: &str) -> Result<Option<Document>> {
    Ok(Fields::command(cmd).opt_doc(field)?.cloned())
}

/// An optional array-of-documents argument.
pub fn opt_doc_array(cmd: &Document, field: &str) -> Result<Option<Vec<Document>>> {
    let docs = Fields::command(cmd).opt_doc_array(field)?;
    Ok(docs.map(|d| d.into_iter().cloned().collect()))
}

/// An optional boolean argument (numbers count as booleans, as mongod accepts).
pub fn opt_bool(cmd: &Document, field: &str) -> Result<Option<bool>> {
    Fields::command(cmd).opt_bool(field)
}

/// An optional integer argument (int, long, or an integral double).
pub fn opt_i64(cmd: &Document, field: &str) -> Result<Option<i64>> {
    Fields::command(cmd).opt_i64(field)
}

/// An optional string argument.
pub fn opt_str<'a>(cmd: &'a Document, field: &str) -> Result<Option<&'a str>> {
    Fields::command(cmd).opt_str(field)
}

/// The collection a command names in its first field (`{find: "coll", ...}`).
pub fn collection_arg(cmd: &Document, db: &str) -> Result<Namespace> {
    let name = cmd_name(cmd);
    match cmd.get(name) {
        Some(Bson::String(c)) if !c.is_empty() => Ok(Namespace::new(db, c)),
        Some(Bson::String(_)) => Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid namespace specified '{db}.'"),
        )),
        Some(v) => Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("collection name has invalid type {}", type_name(v)),
        )),
        None => Err(Error::failed_to_parse("missing collection name")),
    }
}

/// `lsid` and `txnNumber`, when a write is retryable.
pub fn retry_key(cmd: &Document) -> Option<(&Bson, i64)> {
    let lsid = cmd.get("lsid")?;
    let txn = match cmd.get("txnNumber")? {
        Bson::Int64(n) => *n,
        Bson::Int32(n) => *n as i64,
        _ => return None,
    };
    Some((lsid, txn))
}

/// Fields any command may carry (generic arguments drivers and mongos send).
pub const GENERIC_ARGS: &[&str] = &[
    "$db",
    "lsid",
    "$clusterTime",
    "$readPreference",
    "txnNumber",
    "readConcern",
    "writeConcern",
    "comment",
    "apiVersion",
    "apiStrict",
    "apiDeprecationErrors",
    "maxTimeMS",
    "autocommit",
    "startTransaction",
    "stmtId",
    "$audit",
    "$client",
    "mayBypassWriteBlocking",
    "$queryOptions",
    "$configServerState",
    "$gleStats",
    "help",
    "shardVersion",
    "databaseVersion",
    "clientOperationKey",
    "$traceCtx",
    "txnRetryCounter",
    "$topologyTime",
    "$oplogQueryData",
    "$replData",
    "versionContext",
];

/// Refuses fields a command does not define, as mongod's IDL parser does (40415).
pub fn check_fields(cmd: &Document, allowed: &[&str]) -> Result<()> {
    let name = cmd_name(cmd);
    for k in cmd.keys().skip(1) {
        if !allowed.contains(&k.as_str()) && !GENERIC_ARGS.contains(&k.as_str()) {
            return Err(Error::new(
                codes::UNRECOGNIZED_COMMAND_FIELD,
                format!("BSON field '{name}.{k}' is an unknown field."),
            ));
        }
    }
    Ok(())
}

pub const FIND_FIELDS: &[&str] = &[
    "filter",
    "projection",
    "sort",
    "hint",
    "skip",
    "limit",
    "batchSize",
    "singleBatch",
    "max",
    "min",
    "returnKey",
    "showRecordId",
    "tailable",
    "oplogReplay",
    "noCursorTimeout",
    "awaitData",
    "allowPartialResults",
    "collation",
    "allowDiskUse",
    "let",
    "term",
    "readOnce",
    "allowSpeculativeMajorityRead",
    "$_requestResumeToken",
    "$_resumeAfter",
    "includeQueryStatsMetrics",
];
pub const INSERT_FIELDS: &[&str] = &[
    "documents",
    "ordered",
    "bypassDocumentValidation",
    "stmtIds",
];
pub const UPDATE_FIELDS: &[&str] = &[
    "updates",
    "ordered",
    "bypassDocumentValidation",
    "let",
    "stmtIds",
];
pub const DELETE_FIELDS: &[&str] = &[
    "deletes",
    "ordered",
    "let",
    "stmtIds",
    "bypassDocumentValidation",
];
pub const AGGREGATE_FIELDS: &[&str] = &[
    "pipeline",
    "explain",
    "allowDiskUse",
    "cursor",
    "hint",
    "collation",
    "bypassDocumentValidation",
    "let",
    "fromMongos",
    "needsMerge",
    "isMapReduceCommand",
    "collectionUUID",
    "$_generateV2ResumeTokens",
    "includeQueryStatsMetrics",
    "exchange",
    "runtimeConstants",
];
pub const COUNT_FIELDS: &[&str] = &["query", "limit", "skip", "hint", "collation", "fields"];
pub const DISTINCT_FIELDS: &[&str] = &["key", "query", "collation", "hint"];
pub const FIND_AND_MODIFY_FIELDS: &[&str] = &[
    "query",
    "sort",
    "remove",
    "update",
    "new",
    "fields",
    "upsert",
    "bypassDocumentValidation",
    "arrayFilters",
    "hint",
    "collation",
    "let",
];
pub const GET_MORE_FIELDS: &[&str] = &[
    "collection",
    "batchSize",
    "term",
    "lastKnownCommittedOpTime",
    "includeQueryStatsMetrics",
];

//! Aggregation source stages that report server state rather than read documents:
//! `$indexStats`, `$listSessions` and `$planCacheStats`. Each is checked as mongod
//! checks it and replaced by the `$documents` it yields, so the rest of the pipeline
//! runs over them as over any input.

use super::type_name;
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};

/// The stages replaced here; each is valid only as the first stage.
const STAGES: &[&str] = &["$indexStats", "$listSessions", "$planCacheStats"];

/// mongod's code for a source stage that is not first.
const NOT_FIRST_STAGE: i32 = 40602;
/// mongod's code for an `$indexStats` argument other than `{}`.
const INDEX_STATS_SPEC: i32 = 28803;

/// Where mongod keeps the sessions `$listSessions` lists.
const SESSIONS_NS: &str = "config.system.sessions";

/// The pipeline with a leading `$indexStats`, `$listSessions` or `$planCacheStats`
/// replaced by the documents it yields (`coll`: the aggregated collection, None for
/// `{aggregate: 1}`).
pub fn replace_source_stage(
    state: &ServerState,
    db: &str,
    coll: Option<&str>,
    mut pipeline: Vec<Document>,
) -> Result<Vec<Document>> {
    for stage in pipeline.iter().skip(1) {
        if let Some(name) = STAGES.iter().find(|s| stage.contains_key(**s)) {
            return Err(Error::new(
                NOT_FIRST_STAGE,
                format!("{name} is only valid as the first stage in a pipeline"),
            ));
        }
    }
    let Some((name, arg)) = pipeline
        .first()
        .and_then(|s| s.iter().next())
        .filter(|(k, _)| STAGES.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
    else {
        return Ok(pipeline);
    };
    let docs = match name.as_str() {
        "$indexStats" => index_stats(state, &collection(db, coll, &name)?, &arg)?,
        "$listSessions" => list_sessions(state, db, coll, &arg)?,
        _ => plan_cache_stats(state, &collection(db, coll, &name)?, &arg)?,
    };
    let docs: Vec<Bson> = docs.into_iter().map(Bson::Document).collect();
    pipeline[0] = doc! {"$documents": {"$literal": docs}};
    Ok(pipeline)
}

/// The collection a collection-level stage runs on (73 for `{aggregate: 1}`).
fn collection(db: &str, coll: Option<&str>, stage: &str) -> Result<Namespace> {
    coll.map(|c| Namespace::new(db, c)).ok_or_else(|| {
        Error::new(
            codes::INVALID_NAMESPACE,
            format!("{{aggregate: 1}} is not valid for '{stage}'; a collection is required."),
        )
    })
}

/// `$indexStats: {}`: per index, its name, key, this host, its `accesses` (`ops`
/// since `since`) and specification. A missing collection has none; a view is refused.
fn index_stats(state: &ServerState, ns: &Namespace, arg: &Bson) -> Result<Vec<Document>> {
    if !matches!(arg, Bson::Document(d) if d.is_empty()) {
        return Err(Error::new(
            INDEX_STATS_SPEC,
            "The $indexStats stage specification must be an empty object",
        ));
    }
    if state.engine.view(ns).is_some() {
        return Err(tailstream_engine::views::not_a_collection(ns));
    }
    let Some(meta) = state.engine.collection(ns) else {
        return Ok(Vec::new());
    };
    let host = state.config.advertised_host();
    let entry = |name: &str, key: &Document, spec: Document, (ops, since)| {
        doc! {
            "name": name,
            "key": key.clone(),
            "host": host.clone(),
            "accesses": {"ops": ops as i64, "since": since},
            "spec": spec,
        }
    };
    let mut out = Vec::new();
    if !meta.is_timeseries() {
        let usage = tailstream_engine::catalog::usage::id_index(meta.uuid).snapshot();
        let spec = meta.id_index();
        let key = spec.get_document("key").cloned().unwrap_or_default();
        out.push(entry("_id_", &key, spec, usage));
    }
    for index in meta.secondary_indexes() {
        out.push(entry(
            &index.name,
            &index.key,
            index.spec.clone(),
            index.usage.snapshot(),
        ));
    }
    Ok(out)
}

/// `$listSessions: {}`, `{allUsers: true}` or `{users: [{user, db}]}`, on
/// `config.system.sessions`: the sessions this server knows of (its session registry).
fn list_sessions(
    state: &ServerState,
    db: &str,
    coll: Option<&str>,
    arg: &Bson,
) -> Result<Vec<Document>> {
    if coll.map(|c| format!("{db}.{c}")).as_deref() != Some(SESSIONS_NS) {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!("$listSessions may only be run against {SESSIONS_NS}"),
        ));
    }
    let Bson::Document(spec) = arg else {
        return Err(Error::type_mismatch(format!(
            "$listSessions options must be specified in an object, but found: {}",
            type_name(arg)
        )));
    };
    for (field, value) in spec {
        match (field.as_str(), value) {
            ("allUsers", Bson::Boolean(_)) | ("users", Bson::Array(_)) => {}
            ("allUsers", v) => {
                return Err(super::wrong_field_type(
                    "ListSessionsSpec.allUsers",
                    v,
                    "bool",
                ))
            }
            ("users", v) => {
                return Err(super::wrong_field_type(
                    "ListSessionsSpec.users",
                    v,
                    "array",
                ))
            }
            (other, _) => {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field 'ListSessionsSpec.{other}' is an unknown field."),
                ))
            }
        }
    }
    Ok(state.local_sessions.list(spec))
}

/// `$planCacheStats: {}` (or `{allHosts: bool}`): plans are chosen per query and never
/// cached here, so the stage yields nothing; a view is refused as by mongod.
fn plan_cache_stats(state: &ServerState, ns: &Namespace, arg: &Bson) -> Result<Vec<Document>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "$planCacheStats value must be an object. Found: {}",
            type_name(arg)
        )));
    };
    for (field, value) in spec {
        if field != "allHosts" {
            return Err(Error::failed_to_parse(format!(
                "$planCacheStats parameters object may contain only 'allHosts' field. Found: {field}"
            )));
        }
        if !matches!(value, Bson::Boolean(_)) {
            return Err(Error::failed_to_parse(
                "$planCacheStats parameter 'allHosts' must be a boolean",
            ));
        }
    }
    if state.engine.view(ns).is_some() {
        return Err(tailstream_engine::views::not_a_collection(ns));
    }
    Ok(Vec::new())
}

//! Catalog commands: listDatabases, listCollections, listIndexes, create, drop,
//! dropDatabase, renameCollection, collMod, createIndexes, dropIndexes, dbStats, collStats.

use super::write::{await_write_concern, parse_write_concern};
use super::{blocking, collection_arg, opt_bool, opt_doc, opt_str, type_name, GENERIC_ARGS};
use crate::state::ServerState;
use bson::{doc, Bson, Document};
use std::sync::Arc;
use tailstream_engine::catalog::{CollMeta, ViewMeta};
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::query::matcher::Matcher;
use tailstream_engine::views::not_a_collection;

fn filter_matches(filter: &Option<Matcher>, d: &Document) -> bool {
    filter.as_ref().map(|m| m.matches(d)).unwrap_or(true)
}

pub async fn list_databases(
    state: &Arc<ServerState>,
    _db: &str,
    cmd: &Document,
) -> Result<Document> {
    let name_only = opt_bool(cmd, "nameOnly")?.unwrap_or(false);
    let filter = opt_doc(cmd, "filter")?
        .map(|f| Matcher::new(&f))
        .transpose()?;
    let catalog = state.engine.catalog();
    let mut names = catalog.databases();
    // As on mongod, where admin (system.version) and local (the oplog) always exist.
    for always in ["admin", "local"] {
        if !names.iter().any(|n| n == always) {
            names.push(always.into());
        }
    }
    names.sort();
    let mut dbs = Vec::new();
    let mut total = 0i64;
    for name in names {
        let size: i64 = if name == "local" {
            1 << 20
        } else if name == "admin" {
            // admin holds system.version on mongod: counted as one more collection
            // until setFeatureCompatibilityVersion wrote it here.
            let colls = catalog.collections_in(&name);
            let version = colls.iter().any(|c| c.ns.coll == "system.version");
            (colls.len() as i64 + i64::from(!version)) * 4096
        } else {
            catalog.collections_in(&name).len() as i64 * 4096
        };
        let d = if name_only {
            doc! {"name": name.clone()}
        } else {
            doc! {"name": name.clone(), "sizeOnDisk": size, "empty": false}
        };
        if filter_matches(&filter, &d) {
            total += size;
            dbs.push(Bson::Document(d));
        }
    }
    if name_only {
        return Ok(doc! {"databases": dbs});
    }
    Ok(doc! {"databases": dbs, "totalSize": total, "totalSizeMb": total >> 20})
}

fn collection_info(meta: &CollMeta, name_only: bool) -> Document {
    if meta.is_timeseries() {
        // As mongod, where a time-series collection is a view over its buckets: no
        // uuid, no _id index.
        if name_only {
            return doc! {"name": meta.ns.coll.clone(), "type": "timeseries"};
        }
        return doc! {
            "name": meta.ns.coll.clone(),
            "type": "timeseries",
            "options": meta.options.clone(),
            "info": {"readOnly": false},
        };
    }
    if name_only {
        return doc! {"name": meta.ns.coll.clone(), "type": "collection"};
    }
    let mut info = doc! {
        "name": meta.ns.coll.clone(),
        "type": "collection",
        "options": meta.options.clone(),
        "info": {"readOnly": false, "uuid": bson::Binary::from_uuid(meta.uuid)},
    };
    // As mongod: a clustered collection has no separate _id index to describe.
    if !meta.is_clustered() {
        info.insert("idIndex", CollMeta::id_index_spec_of(&meta.options));
    }
    info
}

fn view_info(view: &ViewMeta, name_only: bool) -> Document {
    if name_only {
        return doc! {"name": view.ns.coll.clone(), "type": "view"};
    }
    doc! {
        "name": view.ns.coll.clone(),
        "type": "view",
        "options": view.options(),
        "info": {"readOnly": true},
    }
}

pub async fn list_collections(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let name_only = opt_bool(cmd, "nameOnly")?.unwrap_or(false);
    let filter = opt_doc(cmd, "filter")?
        .map(|f| Matcher::new(&f))
        .transpose()?;
    let catalog = state.engine.catalog();
    let mut out = Vec::new();
    for meta in catalog.collections_in(db) {
        let info = collection_info(&meta, name_only);
        if filter_matches(&filter, &info) {
            out.push(Bson::Document(info));
        }
    }
    for view in catalog.views_in(db) {
        let info = view_info(&view, name_only);
        if filter_matches(&filter, &info) {
            out.push(Bson::Document(info));
        }
    }
    if db == "local" {
        let size = state.config.oplog_size_mb() as i64 * 1024 * 1024;
        let info = if name_only {
            doc! {"name": "oplog.rs", "type": "collection"}
        } else {
            doc! {"name": "oplog.rs", "type": "collection", "options": {"capped": true, "size": size}, "info": {"readOnly": false}}
        };
        if filter_matches(&filter, &info) {
            out.push(Bson::Document(info));
        }
    }
    Ok(doc! {"cursor": {"id": 0i64, "ns": format!("{db}.$cmd.listCollections"), "firstBatch": out}})
}

pub async fn list_indexes(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    if state.engine.view(&ns).is_some() {
        return Err(not_a_collection(&ns));
    }
    let Some(meta) = state.engine.collection(&ns) else {
        return Err(Error::new(
            codes::NAMESPACE_NOT_FOUND,
            format!("ns does not exist: {}", ns.full()),
        ));
    };
    // A time-series collection has no _id index.
    let mut specs = Vec::new();
    if !meta.is_timeseries() {
        specs.push(Bson::Document(meta.id_index()));
    }
    specs.extend(
        meta.secondary_indexes()
            .map(|i| Bson::Document(i.spec.clone())),
    );
    Ok(
        doc! {"cursor": {"id": 0i64, "ns": format!("{}.$cmd.listIndexes.{}", db, ns.coll), "firstBatch": specs}},
    )
}

pub async fn create(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let wc = parse_write_concern(cmd)?;
    let options: Document = cmd
        .iter()
        .skip(1)
        .filter(|(k, _)| !GENERIC_ARGS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(t) = crate::transactions::current() {
        super::in_transaction(state, t, move |e, t| e.transaction_create(t, &ns, options)).await?;
        return Ok(Document::new());
    }
    let committed = blocking(state, move |e| e.create_collection(&ns, options)).await?;
    Ok(with_wce(
        Document::new(),
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

fn with_wce(mut reply: Document, wce: Option<Document>) -> Document {
    if let Some(w) = wce {
        reply.insert("writeConcernError", w);
    }
    reply
}

pub async fn drop(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let wc = parse_write_concern(cmd)?;
    // A time-series collection has no _id index.
    let before = state
        .engine
        .collection(&ns)
        .map(|m| m.index_count() as i32 - i32::from(m.is_timeseries()));
    let is_view = state.engine.view(&ns).is_some();
    let full = ns.full();
    let committed = blocking(state, move |e| e.drop_collection(&ns)).await?;
    let reply = match before {
        Some(n) => doc! {"nIndexesWas": n, "ns": full},
        // A dropped view has no indexes to count.
        None if is_view => doc! {"ns": full},
        None => Document::new(),
    };
    Ok(with_wce(
        reply,
        await_write_concern(state, wc, committed).await,
    ))
}

pub async fn drop_database(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let wc = parse_write_concern(cmd)?;
    let name = db.to_string();
    let committed = blocking(state, move |e| e.drop_database(&name)).await?;
    Ok(with_wce(
        doc! {"dropped": db},
        await_write_concern(state, wc, committed).await,
    ))
}

/// `renameCollection` (run on admin: the registry's admin-only gate checks it).
pub async fn rename_collection(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let from = match cmd.get("renameCollection") {
        Some(Bson::String(s)) => Namespace::parse(s)?,
        Some(v) => {
            return Err(super::wrong_field_type(
                "renameCollection.renameCollection",
                v,
                "string",
            ))
        }
        None => {
            return Err(Error::failed_to_parse(
                "renameCollection requires a source namespace",
            ))
        }
    };
    let to = match opt_str(cmd, "to")? {
        Some(s) => Namespace::parse(s)?,
        None => return Err(Error::missing_field("renameCollection.to")),
    };
    let drop_target = opt_bool(cmd, "dropTarget")?.unwrap_or(false);
    let wc = parse_write_concern(cmd)?;
    let committed = blocking(state, move |e| e.rename_collection(&from, &to, drop_target)).await?;
    Ok(with_wce(
        Document::new(),
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

pub async fn coll_mod(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let wc = parse_write_concern(cmd)?;
    let c = cmd.clone();
    let (reply, committed) = blocking(state, move |e| e.coll_mod(&ns, &c)).await?;
    Ok(with_wce(
        reply,
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

pub async fn convert_to_capped(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let size = cmd
        .get("size")
        .cloned()
        .ok_or_else(|| Error::missing_field("convertToCapped.size"))?;
    let wc = parse_write_concern(cmd)?;
    let committed = blocking(state, move |e| e.convert_to_capped(&ns, &size)).await?;
    Ok(with_wce(
        Document::new(),
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

/// `cloneCollectionAsCapped: <from>, toCollection: <to>, size: <bytes>` (same database).
pub async fn clone_collection_as_capped(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let from = collection_arg(cmd, db)?;
    let missing = |field: &str| Error::missing_field(&format!("cloneCollectionAsCapped.{field}"));
    let to = match cmd.get("toCollection") {
        Some(Bson::String(c)) => Namespace::new(db, c),
        Some(other) => {
            return Err(super::args::wrong_field_type(
                "cloneCollectionAsCapped.toCollection",
                other,
                "string",
            ))
        }
        None => return Err(missing("toCollection")),
    };
    to.validate_for_write()?;
    let size = cmd.get("size").cloned().ok_or_else(|| missing("size"))?;
    let wc = parse_write_concern(cmd)?;
    let committed = blocking(state, move |e| {
        e.clone_collection_as_capped(&from, &to, &size)
    })
    .await?;
    Ok(with_wce(
        Document::new(),
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

pub async fn create_indexes(
    state: &Arc<ServerState>,
    db: &str,
    cmd: &Document,
) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let specs: Vec<Document> = match cmd.get("indexes") {
        Some(Bson::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Bson::Document(d) => Ok(d.clone()),
                other => Err(super::wrong_field_type(
                    &format!("createIndexes.indexes.{i}"),
                    other,
                    "object",
                )),
            })
            .collect::<Result<_>>()?,
        Some(v) => return Err(super::wrong_field_type("createIndexes.indexes", v, "array")),
        None => return Err(Error::missing_field("createIndexes.indexes")),
    };
    if let Some(t) = crate::transactions::current() {
        let (before, after, created) = super::in_transaction(state, t, move |e, t| {
            e.transaction_create_indexes(t, &ns, specs)
        })
        .await?;
        return Ok(doc! {
            "numIndexesBefore": before as i32,
            "numIndexesAfter": after as i32,
            "createdCollectionAutomatically": created,
        });
    }
    let wc = parse_write_concern(cmd)?;
    let out = blocking(state, move |e| e.create_indexes(&ns, &specs)).await?;
    let mut reply = doc! {
        "numIndexesBefore": out.before as i32,
        "numIndexesAfter": out.after as i32,
        "createdCollectionAutomatically": out.created_collection,
    };
    if let Some(note) = out.note {
        reply.insert("note", note);
    }
    Ok(with_wce(
        reply,
        await_write_concern(state, wc, out.committed).await,
    ))
}

pub async fn drop_indexes(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let which = cmd
        .get("index")
        .cloned()
        .ok_or_else(|| Error::missing_field("dropIndexes.index"))?;
    let wc = parse_write_concern(cmd)?;
    let (before, committed) = blocking(state, move |e| e.drop_indexes(&ns, &which)).await?;
    Ok(with_wce(
        doc! {"nIndexesWas": before as i32},
        await_write_concern(state, wc, Some(committed)).await,
    ))
}

/// What dbStats adds up over a database's collections (unscaled).
#[derive(Default)]
struct DbTotals {
    collections: i64,
    views: i64,
    objects: i64,
    data_bytes: i64,
    indexes: i64,
    index_bytes: i64,
}

fn db_totals(engine: &tailstream_engine::Engine, db: &str) -> Result<DbTotals> {
    let catalog = engine.catalog();
    let metas = catalog.collections_in(db);
    let mut t = DbTotals {
        collections: metas.len() as i64,
        views: catalog.views_in(db).len() as i64,
        ..Default::default()
    };
    for m in &metas {
        let (count, size) = engine.collection_numbers(m);
        t.objects += count;
        t.data_bytes += size;
        let index_sizes = engine.index_sizes(m)?;
        t.indexes += index_sizes.len() as i64;
        t.index_bytes += index_sizes.iter().map(|(_, b)| b).sum::<i64>();
    }
    Ok(t)
}

/// The used and total bytes of the filesystem holding `path`, as mongod's dbStats
/// reports them (`fsUsedSize` is the capacity less the space available to the
/// server); -1 each when the filesystem cannot be queried, as mongod.
fn filesystem_sizes(path: &std::path::Path) -> (i64, i64) {
    match (fs2::total_space(path), fs2::available_space(path)) {
        (Ok(total), Ok(available)) => (total.saturating_sub(available) as i64, total as i64),
        _ => (-1, -1),
    }
}

pub async fn db_stats(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let scale = super::opt_i64(cmd, "scale")?.unwrap_or(1).max(1);
    let dbname = db.to_string();
    let t = blocking(state, move |e| db_totals(e, &dbname)).await?;
    let (fs_used, fs_total) = filesystem_sizes(&state.config.dbpath);
    // Sizes are doubles and counts 64-bit ints, as mongod 7.0 reports them.
    let scaled = |bytes: i64| (bytes / scale) as f64;
    Ok(doc! {
        "db": db,
        "collections": t.collections,
        "views": t.views,
        "objects": t.objects,
        "avgObjSize": if t.objects > 0 { t.data_bytes as f64 / t.objects as f64 } else { 0.0 },
        "dataSize": scaled(t.data_bytes),
        "storageSize": scaled(t.data_bytes),
        "indexes": t.indexes,
        "indexSize": scaled(t.index_bytes),
        "totalSize": scaled(t.data_bytes + t.index_bytes),
        "scaleFactor": scale,
        "fsUsedSize": if fs_used < 0 { -1.0 } else { scaled(fs_used) },
        "fsTotalSize": if fs_total < 0 { -1.0 } else { scaled(fs_total) },
    })
}

pub async fn coll_stats(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = collection_arg(cmd, db)?;
    let scale = super::opt_i64(cmd, "scale")?.unwrap_or(1).max(1);
    if state.engine.view(&ns).is_some() {
        return Err(not_a_collection(&ns));
    }
    let full = ns.full();
    let Some(stats) = blocking(state, move |e| e.storage_stats(&ns, scale)).await? else {
        return Err(Error::new(
            codes::NAMESPACE_NOT_FOUND,
            format!("Collection [{full}] not found."),
        ));
    };
    let mut reply = doc! {"ns": full};
    for (k, v) in stats {
        reply.insert(k, v);
    }
    Ok(reply)
}

/// `validate`: reads every document and index entry of a collection and checks that
/// they agree (mongod's reply shape; `full`/`scandata` do the same complete check).
pub async fn validate(state: &Arc<ServerState>, db: &str, cmd: &Document) -> Result<Document> {
    let ns = match cmd.get("validate") {
        Some(Bson::String(c)) => Namespace::new(db, c),
        Some(v) => {
            return Err(Error::new(
                codes::INVALID_NAMESPACE,
                format!("collection name has invalid type {}", type_name(v)),
            ))
        }
        None => {
            return Err(Error::failed_to_parse(
                "validate requires a collection name",
            ))
        }
    };
    let full = opt_bool(cmd, "full")?.unwrap_or(false);
    let background = opt_bool(cmd, "background")?.unwrap_or(false);
    if full && background {
        return Err(Error::invalid_options(
            "Running the validate command with both { background: true } and { full: true } is not supported.",
        ));
    }
    if opt_bool(cmd, "repair")?.unwrap_or(false) {
        return Err(Error::invalid_options(
            "Running the validate command with { repair: true } can only be performed in standalone mode.",
        ));
    }
    if state.engine.view(&ns).is_some() {
        return Err(Error::new(
            tailstream_engine::views::COMMAND_NOT_SUPPORTED_ON_VIEW,
            "Cannot validate a view",
        ));
    }
    let Some(meta) = state.engine.collection(&ns) else {
        return Err(Error::new(
            codes::NAMESPACE_NOT_FOUND,
            format!("Collection '{}' does not exist to validate.", ns.full()),
        ));
    };
    let m = meta.clone();
    let found = blocking(state, move |e| e.validate_collection(&m)).await?;
    let errors = found.errors();
    let mut keys_per_index = doc! {"_id_": found.records - found.corrupt_records};
    let mut index_details = doc! {"_id_": {"valid": true}};
    for (name, stored, expected) in &found.indexes {
        keys_per_index.insert(name.clone(), *stored);
        index_details.insert(name.clone(), doc! {"valid": stored == expected});
    }
    Ok(doc! {
        "ns": ns.full(),
        "uuid": bson::Binary::from_uuid(meta.uuid),
        "nInvalidDocuments": found.corrupt_records,
        "nNonCompliantDocuments": 0i64,
        "nrecords": found.records,
        "nIndexes": meta.index_count() as i32,
        "keysPerIndex": keys_per_index,
        "indexDetails": index_details,
        "valid": errors.is_empty(),
        "repaired": false,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": [],
        "missingIndexEntries": [],
        "corruptRecords": [],
    })
}

/// `dataSize`: the bytes and number of documents of a collection (`{dataSize: "<db>.<coll>"}`),
/// or of the documents whose keys in an index lie in `[min, max)`: `keyPattern` names
/// the index by a prefix of its key (inferred from `min`'s fields when not given, as
/// mongod does). `maxSize`/`maxObjects` stop the count early (`maxReached`). A missing
/// collection has size 0.
pub async fn data_size(state: &Arc<ServerState>, cmd: &Document) -> Result<Document> {
    let started = std::time::Instant::now();
    let full = match cmd.get("dataSize") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => return Err(super::args::wrong_field_type("dataSize", other, "string")),
        None => return Err(Error::bad_value("dataSize requires a namespace")),
    };
    let ns = Namespace::parse(&full).map_err(|_| {
        Error::new(
            codes::INVALID_NAMESPACE,
            format!("Invalid namespace specified '{full}'"),
        )
    })?;
    let mut key_pattern = opt_doc(cmd, "keyPattern")?.unwrap_or_default();
    let min = opt_doc(cmd, "min")?.unwrap_or_default();
    let max = opt_doc(cmd, "max")?.unwrap_or_default();
    let limit =
        |field: &str| -> Result<i64> { Ok(super::opt_i64(cmd, field)?.unwrap_or(0).max(0)) };
    let (max_size, max_objects) = (limit("maxSize")?, limit("maxObjects")?);
    if min.is_empty() != max.is_empty() {
        return Err(Error::bad_value("only one of min or max specified"));
    }
    let reply = |size: i64, objects: i64, reached: bool| {
        let mut d = doc! {"size": size, "numObjects": objects};
        if reached {
            d.insert("maxReached", true);
        }
        d.insert("millis", started.elapsed().as_millis() as i64);
        d
    };
    let Some(meta) = state.engine.collection(&ns) else {
        return Ok(reply(0, 0, false));
    };
    if min.is_empty() && max_size == 0 && max_objects == 0 {
        let (count, size) = blocking(state, move |e| Ok(e.collection_numbers(&meta))).await?;
        return Ok(reply(size, count, false));
    }
    let mut request = tailstream_engine::find::FindRequest::default();
    if !min.is_empty() {
        if key_pattern.is_empty() {
            key_pattern = min.keys().map(|k| (k.clone(), Bson::Int32(1))).collect();
        }
        // The index whose key starts with the pattern (same fields and directions).
        let is_prefix = |key: &Document| {
            key.len() >= key_pattern.len()
                && key_pattern
                    .iter()
                    .zip(key.iter())
                    .all(|((pk, pv), (k, v))| {
                        pk == k
                            && tailstream_engine::query::compare::cmp_bson(pv, v)
                                == std::cmp::Ordering::Equal
                    })
        };
        let id_key = doc! {"_id": 1};
        let index_key = std::iter::once(id_key)
            .chain(meta.secondary_indexes().map(|i| i.key.clone()))
            .find(|k| is_prefix(k))
            .ok_or_else(|| Error::bad_value("couldn't find valid index containing key pattern"))?;
        // Bounds name every field of the index: the pattern's from min/max, the rest MinKey.
        let bound = |b: &Document| -> Document {
            index_key
                .keys()
                .map(|k| (k.clone(), b.get(k).cloned().unwrap_or(Bson::MinKey)))
                .collect()
        };
        request.min = Some(bound(&min));
        request.max = Some(bound(&max));
        request.hint = Some(Bson::Document(index_key));
    }
    let (size, objects, reached) = blocking(state, move |e| {
        let (mut size, mut objects, mut reached) = (0i64, 0i64, false);
        e.for_each_batch(&ns, request, None, |docs| {
            for d in &docs {
                size += tailstream_engine::cursor::encoded_len(d) as i64;
                objects += 1;
                if (max_size > 0 && size > max_size) || (max_objects > 0 && objects > max_objects) {
                    reached = true;
                    return Ok(std::ops::ControlFlow::Break(()));
                }
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok((size, objects, reached))
    })
    .await?;
    Ok(reply(size, objects, reached))
}

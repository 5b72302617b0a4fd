//! From an oplog entry to a change event, as mongod's change-stream transformation
//! builds it (field names, order and resume token), for the streams whose scope the
//! entry falls in.

use super::token::ResumeToken;
use super::{FullDocument, BeforeChange, Scope, StreamSpec};
use crate::keys::{self, ImageKind};
use crate::namespace::Namespace;
use crate::Engine;
use bson::{doc, Bson, Document, RawDocument};
use tailstream_query::error::{codes, Error, Result};
use tailstream_storage::Space;

/// One event produced from an oplog entry, before the user's pipeline.
pub(crate) struct Event {
    pub doc: Document,
    pub token: ResumeToken,
    /// The stream ends after this event (an invalidate follows it).
    pub invalidates: bool,
}

/// The parts of an entry the event is built from.
struct Parsed {
    op_type: &'static str,
    /// The namespace the event reports (`ns`); `coll` empty for dropDatabase.
    nss: Namespace,
    /// Rename target.
    to: Option<Namespace>,
    full_document: Option<Document>,
    document_key: Option<Document>,
    update_description: Option<Document>,
    op_description: Option<Document>,
    state_before_change: Option<Document>,
    /// DDL events other than drop/rename/dropDatabase appear only with showExpandedEvents.
    expanded_only: bool,
}

/// Internal databases never reported by database or cluster streams.
fn internal_db(db: &str) -> bool {
    matches!(db, "admin" | "config" | "local")
}

fn system_coll(coll: &str) -> bool {
    coll.starts_with("system.")
}

/// Whether an event about `nss` (with rename target `to`) belongs to the stream.
fn in_scope(scope: &Scope, nss: &Namespace, to: Option<&Namespace>) -> bool {
    let visible = |n: &Namespace| n.coll.is_empty() || !system_coll(&n.coll);
    match scope {
        Scope::Collection(c) => nss == c || to == Some(c),
        Scope::Database(db) => {
            (&nss.db == db && visible(nss)) || to.map(|t| &t.db == db && visible(t)).unwrap_or(false)
        }
        Scope::Cluster => !internal_db(&nss.db) && visible(nss),
    }
}

fn raw_doc(entry: &RawDocument, field: &str) -> Result<Option<Document>> {
    match entry.get_document(field) {
        Ok(d) => Ok(Some(Document::try_from(d).map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?)),
        Err(_) => Ok(None),
    }
}

fn parse(entry: &RawDocument) -> Result<Option<Parsed>> {
    let corrupt = |what: &str| Error::internal(format!("corrupt oplog entry: {what}"));
    let op = entry.get_str("op").map_err(|_| corrupt("op"))?;
    let ns = entry.get_str("ns").unwrap_or("");
    let mut p = Parsed {
        op_type: "",
        nss: Namespace::new("", ""),
        to: None,
        full_document: None,
        document_key: None,
        update_description: None,
        op_description: None,
        state_before_change: None,
        expanded_only: false,
    };
    match op {
        "i" | "u" | "d" => {
            p.nss = Namespace::parse(ns).map_err(|_| corrupt("ns"))?;
            let o = raw_doc(entry, "o")?.ok_or_else(|| corrupt("o"))?;
            match op {
                "i" => {
                    p.op_type = "insert";
                    p.document_key = match raw_doc(entry, "o2")? {
                        Some(k) => Some(k),
                        None => Some(doc! {"_id": o.get("_id").cloned().unwrap_or(Bson::Null)}),
                    };
                    p.full_document = Some(o);
                }
                "u" => {
                    p.document_key = raw_doc(entry, "o2")?;
                    if o.contains_key("$v") {
                        p.op_type = "update";
                        let diff = o.get_document("diff").map_err(|_| corrupt("o.diff"))?;
                        p.update_description = Some(super::diff::update_description(diff));
                    } else {
                        p.op_type = "replace";
                        p.full_document = Some(o);
                    }
                }
                _ => {
                    p.op_type = "delete";
                    p.document_key = Some(o);
                }
            }
        }
        "c" => {
            let db = ns.strip_suffix(".$cmd").ok_or_else(|| corrupt("ns of a command"))?;
            let o = raw_doc(entry, "o")?.ok_or_else(|| corrupt("o"))?;
            let Some((name, value)) = o.iter().next() else { return Ok(None) };
            let coll = value.as_str().unwrap_or("").to_string();
            let except = |skip: &[&str]| -> Document {
                o.iter().filter(|(k, _)| !skip.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
            };
            match name.as_str() {
                "drop" => {
                    p.op_type = "drop";
                    p.nss = Namespace::new(db, &coll);
                }
                "renameCollection" => {
                    p.op_type = "rename";
                    p.nss = Namespace::parse(&coll).map_err(|_| corrupt("renameCollection"))?;
                    let to = Namespace::parse(o.get_str("to").map_err(|_| corrupt("to"))?).map_err(|_| corrupt("to"))?;
                    let mut desc = except(&["renameCollection", "stayTemp"]);
                    desc.insert("to", ns_doc(&to));
                    p.op_description = Some(desc);
                    p.to = Some(to);
                }
                "dropDatabase" => {
                    p.op_type = "dropDatabase";
                    p.nss = Namespace::new(db, "");
                }
                "create" => {
                    p.op_type = "create";
                    p.nss = Namespace::new(db, &coll);
                    p.op_description = Some(except(&["create"]));
                    p.expanded_only = true;
                }
                "createIndexes" => {
                    p.op_type = "createIndexes";
                    p.nss = Namespace::new(db, &coll);
                    p.op_description = Some(doc! {"indexes": [except(&["createIndexes"])]});
                    p.expanded_only = true;
                }
                "dropIndexes" => {
                    p.op_type = "dropIndexes";
                    p.nss = Namespace::new(db, &coll);
                    let spec = raw_doc(entry, "o2")?.unwrap_or_default();
                    p.op_description = Some(doc! {"indexes": [spec]});
                    p.expanded_only = true;
                }
                "collMod" => {
                    p.op_type = "modify";
                    p.nss = Namespace::new(db, &coll);
                    p.op_description = Some(except(&["collMod"]));
                    let o2 = raw_doc(entry, "o2")?.unwrap_or_default();
                    let mut before = Document::new();
                    for k in ["collectionOptions_old", "indexOptions_old"] {
                        if let Some(v) = o2.get(k) {
                            before.insert(k.trim_end_matches("_old"), v.clone());
                        }
                    }
                    p.state_before_change = Some(before);
                    p.expanded_only = true;
                }
                // convertToCapped and other commands have no change event.
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(p))
}

fn ns_doc(n: &Namespace) -> Document {
    if n.coll.is_empty() {
        doc! {"db": n.db.clone()}
    } else {
        doc! {"db": n.db.clone(), "coll": n.coll.clone()}
    }
}

/// The events an oplog entry produces for a stream (none when out of scope).
pub(crate) fn transform(engine: &Engine, spec: &StreamSpec, ts: u64, entry: &RawDocument) -> Result<Option<Event>> {
    let Some(p) = parse(entry)? else { return Ok(None) };
    if p.expanded_only && !spec.show_expanded {
        return Ok(None);
    }
    if p.op_type == "dropDatabase" {
        match &spec.scope {
            Scope::Database(db) if *db == p.nss.db => {}
            Scope::Cluster if !internal_db(&p.nss.db) => {}
            _ => return Ok(None),
        }
    } else if !in_scope(&spec.scope, &p.nss, p.to.as_ref()) {
        return Ok(None);
    }
    let uuid = match entry.get_binary("ui") {
        Ok(b) if b.bytes.len() == 16 => Some(bson::Uuid::from_bytes(b.bytes.try_into().expect("16 bytes"))),
        _ => None,
    };
    let uuid = if p.op_type == "dropDatabase" { None } else { uuid };
    let mut event_id = doc! {"operationType": p.op_type};
    if let Some(k) = &p.document_key {
        event_id.insert("documentKey", k.clone());
    } else if let Some(d) = &p.op_description {
        event_id.insert("operationDescription", d.clone());
    }
    let token = ResumeToken::event(ts, uuid, event_id);
    let invalidates = match &spec.scope {
        Scope::Collection(_) => matches!(p.op_type, "drop" | "rename"),
        Scope::Database(_) => p.op_type == "dropDatabase",
        Scope::Cluster => false,
    };

    let mut d = Document::new();
    if let Some(to) = &p.to {
        // mongod adds the rename target before everything else.
        d.insert("to", ns_doc(to));
    }
    d.insert("_id", token.to_document());
    d.insert("operationType", p.op_type);
    d.insert("clusterTime", Bson::Timestamp(keys::u64_to_ts(ts)));
    if spec.show_expanded {
        if let Some(u) = uuid {
            d.insert("collectionUUID", bson::Binary::from_uuid(u));
        }
    }
    if let Ok(wall) = entry.get_datetime("wall") {
        d.insert("wallTime", wall);
    }
    if let Some(full) = p.full_document {
        d.insert("fullDocument", full);
    }
    d.insert("ns", ns_doc(&p.nss));
    if let Some(k) = p.document_key {
        d.insert("documentKey", k);
    }
    if spec.show_expanded {
        if let Some(desc) = p.op_description {
            d.insert("operationDescription", desc);
        }
    }
    if let Some(mut ud) = p.update_description {
        if !spec.show_expanded {
            ud.remove("disambiguatedPaths");
        }
        d.insert("updateDescription", ud);
    }
    if let Some(s) = p.state_before_change {
        d.insert("stateBeforeChange", s);
    }
    add_images(engine, spec, ts, uuid, &mut d)?;
    Ok(Some(Event { doc: d, token, invalidates }))
}

/// The invalidate event that follows an invalidating event.
pub(crate) fn invalidate(cause: &Event) -> Event {
    let mut token = cause.token.clone();
    token.from_invalidate = true;
    let mut d = doc! {
        "_id": token.to_document(),
        "operationType": "invalidate",
    };
    if let Some(t) = cause.doc.get("clusterTime") {
        d.insert("clusterTime", t.clone());
    }
    if let Some(w) = cause.doc.get("wallTime") {
        d.insert("wallTime", w.clone());
    }
    Event { doc: d, token, invalidates: true }
}

/// fullDocument for updates (updateLookup or the stored post-image) and
/// fullDocumentBeforeChange (the stored pre-image).
fn add_images(engine: &Engine, spec: &StreamSpec, ts: u64, uuid: Option<bson::Uuid>, d: &mut Document) -> Result<()> {
    let op = d.get_str("operationType").unwrap_or("").to_string();
    if op == "update" {
        match spec.full_document {
            FullDocument::Default => {}
            FullDocument::UpdateLookup => {
                let found = lookup_current(engine, d, uuid)?;
                d.insert("fullDocument", found.map(Bson::Document).unwrap_or(Bson::Null));
            }
            FullDocument::WhenAvailable | FullDocument::Required => match image(engine, ts, ImageKind::After)? {
                Some(img) => {
                    d.insert("fullDocument", img);
                }
                None if spec.full_document == FullDocument::Required => {
                    return Err(Error::new(
                        codes::NO_MATCHING_DOCUMENT,
                        format!(
                            "Change stream was configured to require a post-image for all update events, but the post-image was not found for event: {}",
                            crate::format::doc_to_string(d)
                        ),
                    ));
                }
                None => {
                    d.insert("fullDocument", Bson::Null);
                }
            },
        }
    }
    if matches!(op.as_str(), "update" | "replace" | "delete") && spec.before_change != BeforeChange::Off {
        match image(engine, ts, ImageKind::Before)? {
            Some(img) => {
                d.insert("fullDocumentBeforeChange", img);
            }
            None if spec.before_change == BeforeChange::Required => {
                return Err(Error::new(
                    codes::NO_MATCHING_DOCUMENT,
                    format!(
                        "Change stream was configured to require a pre-image for all update, delete and replace events, but the pre-image was not found for event: {}",
                        crate::format::doc_to_string(d)
                    ),
                ));
            }
            None => {
                d.insert("fullDocumentBeforeChange", Bson::Null);
            }
        }
    }
    Ok(())
}

fn image(engine: &Engine, ts: u64, kind: ImageKind) -> Result<Option<Document>> {
    match engine.store.get(Space::Images, &keys::image_key(ts, kind)).map_err(crate::storage_err)? {
        Some(bytes) => Ok(Some(crate::read::decode(&bytes)?)),
        None => Ok(None),
    }
}

/// The document's current version (updateLookup): null when it is gone or its
/// collection was dropped or replaced since.
fn lookup_current(engine: &Engine, d: &Document, uuid: Option<bson::Uuid>) -> Result<Option<Document>> {
    let Ok(ns) = d.get_document("ns") else { return Ok(None) };
    let nss = Namespace::new(ns.get_str("db").unwrap_or(""), ns.get_str("coll").unwrap_or(""));
    let Some(meta) = engine.collection(&nss) else { return Ok(None) };
    if Some(meta.uuid) != uuid {
        return Ok(None);
    }
    let Some(id) = d.get_document("documentKey").ok().and_then(|k| k.get("_id")) else { return Ok(None) };
    crate::read::fetch(&engine.store, meta.id, &keys::id_key(id))
}

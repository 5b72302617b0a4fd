//! From an oplog entry to a change event, as mongod's change-stream transformation
//! builds it (field names, order and resume token), for the streams whose scope the
//! entry falls in.

use super::token::ResumeToken;
use super::{BeforeChange, FullDocument, Scope, StreamSpec};
use crate::catalog::namespace::Namespace;
use crate::core::keys::{self, ImageKind};
use crate::core::raw_writer::{self, RawWriter};
use crate::core::time::ClusterTime;
use crate::oplog::EntryFields;
use crate::Engine;
use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use std::borrow::Cow;
use tailstream_query::error::{codes, Error, Result};
use tailstream_storage::Space;

/// KeyString bytes of an event identifier besides its operation type and document
/// key: the field names `operationType` and `documentKey` and the type bytes.
const EVENT_KEY_OVERHEAD: usize = 48;

/// One event produced from an oplog entry, before the user's pipeline.
pub(crate) struct Event {
    pub doc: RawDocumentBuf,
    pub token: ResumeToken,
    /// The stream ends after this event (an invalidate follows it).
    pub invalidates: bool,
}

/// The parts of an entry the event is built from (borrowed from the entry where the
/// event repeats them verbatim, so documents are copied as bytes, never decoded).
struct Parsed<'a> {
    op_type: &'static str,
    /// The namespace the event reports (`ns`); `coll` empty for dropDatabase.
    /// Borrowed from a collection stream's scope for its own CRUD entries (no
    /// allocation per event; the event's `ns` is then the stream's encoded one).
    nss: Cow<'a, Namespace>,
    /// Rename target.
    to: Option<Namespace>,
    full_document: Option<&'a RawDocument>,
    document_key: Option<DocKey<'a>>,
    update_description: Option<UpdateDescription<'a>>,
    op_description: Option<Document>,
    state_before_change: Option<Document>,
    /// DDL events other than drop/rename/dropDatabase appear only with showExpandedEvents.
    expanded_only: bool,
    /// An event about a view (or a time-series collection, a view on mongod): mongod
    /// reports no collectionUUID for these.
    view_event: bool,
}

/// An update's description: parsed from the entry's diff, or (with
/// `showRawUpdateDescription`) the entry's `o` as it is, `{$v: 2, diff: ...}`.
enum UpdateDescription<'a> {
    Parsed(Document),
    Raw(&'a RawDocument),
}

enum DocKey<'a> {
    Raw(&'a RawDocument),
    Built(RawDocumentBuf),
}

impl DocKey<'_> {
    fn raw(&self) -> &RawDocument {
        match self {
            DocKey::Raw(r) => r,
            DocKey::Built(b) => b,
        }
    }
}

/// Internal databases never reported by database or cluster streams.
fn internal_db(db: &str) -> bool {
    matches!(db, "admin" | "config" | "local")
}

fn system_coll(coll: &str) -> bool {
    coll.starts_with("system.")
}

/// Whether `full` is `ns` written as `db.coll`.
fn is_full_name(full: &str, ns: &Namespace) -> bool {
    full.len() == ns.db.len() + 1 + ns.coll.len()
        && full.starts_with(ns.db.as_str())
        && full.as_bytes()[ns.db.len()] == b'.'
        && full.ends_with(ns.coll.as_str())
}

/// Whether an event about `nss` (with rename target `to`) belongs to the stream.
/// With `showSystemEvents` (mongod's internal option), the system collections whose
/// events mongod 7.0 then shows to database and cluster streams.
fn shown_system_coll(coll: &str) -> bool {
    coll == "system.js"
        || coll.starts_with("system.buckets.")
        || coll.starts_with("system.resharding.")
}

fn in_scope(spec: &StreamSpec, nss: &Namespace, to: Option<&Namespace>) -> bool {
    let scope = &spec.scope;
    let visible = |n: &Namespace| {
        n.coll.is_empty()
            || !system_coll(&n.coll)
            || (spec.show_system && shown_system_coll(&n.coll))
    };
    match scope {
        Scope::Collection(c) => nss == c || to == Some(c),
        Scope::Database(db) => {
            (&nss.db == db && visible(nss))
                || to.map(|t| &t.db == db && visible(t)).unwrap_or(false)
        }
        Scope::Cluster => !internal_db(&nss.db) && visible(nss),
    }
}

fn raw_doc(field: Option<&RawDocument>) -> Result<Option<Document>> {
    match field {
        Some(d) => {
            Ok(Some(Document::try_from(d).map_err(|e| {
                Error::internal(format!("corrupt oplog entry: {e}"))
            })?))
        }
        None => Ok(None),
    }
}

/// None for entries that make no event, and for CRUD entries outside `scope` (dropped
/// on the namespace alone, before any of the document is decoded).
fn parse<'a>(f: &EntryFields<'a>, spec: &'a StreamSpec) -> Result<Option<Parsed<'a>>> {
    let scope = &spec.scope;
    let corrupt = |what: &str| Error::internal(format!("corrupt oplog entry: {what}"));
    let op = f.op.ok_or_else(|| corrupt("op"))?;
    let ns = f.ns.unwrap_or("");
    let mut p = Parsed {
        op_type: "",
        nss: Cow::Owned(Namespace::new("", "")),
        to: None,
        full_document: None,
        document_key: None,
        update_description: None,
        op_description: None,
        state_before_change: None,
        expanded_only: false,
        view_event: false,
    };
    match op {
        "i" | "u" | "d" if crate::catalog::views::is_system_views(ns) => {
            // As mongod: writes to <db>.system.views are the DDL of views, shown to
            // database and cluster streams (with showExpandedEvents) as create, modify
            // and drop events of the view the document defines.
            if matches!(scope, Scope::Collection(_)) {
                return Ok(None);
            }
            let o = f.o.ok_or_else(|| corrupt("o"))?;
            let view = o.get_str("_id").map_err(|_| corrupt("o._id"))?;
            p.nss = Cow::Owned(Namespace::parse(view).map_err(|_| corrupt("o._id"))?);
            p.expanded_only = true;
            p.view_event = true;
            let definition = || -> Result<Document> {
                let mut d = Document::try_from(o).map_err(|e| corrupt(&e.to_string()))?;
                d.remove("_id");
                Ok(d)
            };
            // A bucket of a parallel stream names them as seed 004's streams do.
            let bucket = spec.bucket.is_some();
            match op {
                "i" => {
                    p.op_type = if bucket { "createView" } else { "create" };
                    p.op_description = Some(definition()?);
                }
                // Definitions are always replaced whole.
                "u" if o.get("$v").ok().flatten().is_none() => {
                    p.op_type = "modify";
                    p.op_description = Some(definition()?);
                }
                "u" => return Ok(None),
                _ => p.op_type = if bucket { "dropView" } else { "drop" },
            }
        }
        "i" | "u" | "d" => {
            p.nss = match scope {
                // Compared as text: most entries a collection stream reads are its own.
                Scope::Collection(c) if is_full_name(ns, c) => Cow::Borrowed(c),
                Scope::Collection(_) => return Ok(None),
                _ => {
                    let nss = Namespace::parse(ns).map_err(|_| corrupt("ns"))?;
                    if !in_scope(spec, &nss, None) {
                        return Ok(None);
                    }
                    Cow::Owned(nss)
                }
            };
            let o = f.o.ok_or_else(|| corrupt("o"))?;
            let o2 = f.o2;
            match op {
                "i" => {
                    p.op_type = "insert";
                    p.document_key = Some(match o2 {
                        Some(k) => DocKey::Raw(k),
                        None => {
                            let mut k = RawDocumentBuf::new();
                            if let Ok(Some(id)) = o.get("_id") {
                                k.append_ref("_id", id);
                            }
                            DocKey::Built(k)
                        }
                    });
                    p.full_document = Some(o);
                }
                "u" => {
                    p.document_key = o2.map(DocKey::Raw);
                    if o.get("$v").ok().flatten().is_some() {
                        p.op_type = "update";
                        let diff = o.get_document("diff").map_err(|_| corrupt("o.diff"))?;
                        p.update_description = Some(if spec.show_raw_update {
                            UpdateDescription::Raw(o)
                        } else {
                            let diff =
                                Document::try_from(diff).map_err(|e| corrupt(&e.to_string()))?;
                            UpdateDescription::Parsed(super::diff::update_description(&diff))
                        });
                    } else {
                        p.op_type = "replace";
                        p.full_document = Some(o);
                    }
                }
                _ => {
                    p.op_type = "delete";
                    p.document_key = Some(DocKey::Raw(o));
                }
            }
        }
        "c" => {
            let db = ns
                .strip_suffix(".$cmd")
                .ok_or_else(|| corrupt("ns of a command"))?;
            let o = raw_doc(f.o)?.ok_or_else(|| corrupt("o"))?;
            let Some((name, value)) = o.iter().next() else {
                return Ok(None);
            };
            let coll = value.as_str().unwrap_or("").to_string();
            let except = |skip: &[&str]| -> Document {
                o.iter()
                    .filter(|(k, _)| !skip.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            match name.as_str() {
                "drop" => {
                    p.op_type = "drop";
                    p.nss = Cow::Owned(Namespace::new(db, &coll));
                }
                "renameCollection" => {
                    p.op_type = "rename";
                    p.nss = Cow::Owned(
                        Namespace::parse(&coll).map_err(|_| corrupt("renameCollection"))?,
                    );
                    let to = Namespace::parse(o.get_str("to").map_err(|_| corrupt("to"))?)
                        .map_err(|_| corrupt("to"))?;
                    let mut desc = except(&["renameCollection", "stayTemp"]);
                    desc.insert("to", ns_doc(&to));
                    p.op_description = Some(desc);
                    p.to = Some(to);
                }
                "dropDatabase" => {
                    p.op_type = "dropDatabase";
                    p.nss = Cow::Owned(Namespace::new(db, ""));
                }
                "create" => {
                    p.op_type = "create";
                    p.nss = Cow::Owned(Namespace::new(db, &coll));
                    p.op_description = Some(if o.contains_key("timeseries") {
                        // mongod reports the view over the buckets collection it creates.
                        p.view_event = true;
                        crate::catalog::timeseries::view_description(&coll, &o)
                    } else {
                        except(&["create"])
                    });
                    p.expanded_only = true;
                }
                "createIndexes" => {
                    p.op_type = "createIndexes";
                    p.nss = Cow::Owned(Namespace::new(db, &coll));
                    p.op_description = Some(doc! {"indexes": [except(&["createIndexes"])]});
                    p.expanded_only = true;
                }
                "dropIndexes" => {
                    p.op_type = "dropIndexes";
                    p.nss = Cow::Owned(Namespace::new(db, &coll));
                    let spec = raw_doc(f.o2)?.unwrap_or_default();
                    p.op_description = Some(doc! {"indexes": [spec]});
                    p.expanded_only = true;
                }
                "collMod" => {
                    p.op_type = "modify";
                    p.nss = Cow::Owned(Namespace::new(db, &coll));
                    p.op_description = Some(except(&["collMod"]));
                    let o2 = raw_doc(f.o2)?.unwrap_or_default();
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

pub(crate) fn ns_raw(n: &Namespace) -> RawDocumentBuf {
    // Sized up front, as every event has one: an element is type, name, NUL, length,
    // text, NUL ("db": 9 bytes + text, "coll": 11 + text).
    let mut buf = Vec::with_capacity(5 + 9 + n.db.len() + 11 + n.coll.len());
    buf.extend_from_slice(&[5, 0, 0, 0, 0]);
    let mut r = RawDocumentBuf::from_bytes(buf).expect("the empty document");
    r.append("db", n.db.as_str());
    if !n.coll.is_empty() {
        r.append("coll", n.coll.as_str());
    }
    r
}

fn ns_doc(n: &Namespace) -> Document {
    if n.coll.is_empty() {
        doc! {"db": n.db.clone()}
    } else {
        doc! {"db": n.db.clone(), "coll": n.coll.clone()}
    }
}

/// The event of an oplog entry that is not a transaction's (none when out of scope).
pub(crate) fn transform(
    engine: &Engine,
    spec: &StreamSpec,
    ts: ClusterTime,
    entry: &RawDocument,
) -> Result<Option<Event>> {
    let f = EntryFields::read(entry)
        .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?;
    transform_fields(engine, spec, ts, &f, None)
}

/// The events of one entry: one at most, except for a transaction's (inline, so the
/// catch-up of a million ordinary entries allocates nothing more for them).
pub(crate) type Events = smallvec::SmallVec<[Event; 1]>;

/// The operations of a transaction's `applyOps` entry, if `f` is one.
fn apply_ops<'a>(f: &EntryFields<'a>) -> Option<&'a bson::RawArray> {
    if f.op != Some("c") {
        return None;
    }
    match f.o?.into_iter().next()? {
        Ok(("applyOps", bson::RawBsonRef::Array(ops))) => Some(ops),
        _ => None,
    }
}

/// The events an oplog entry produces for a stream: one at most, or, for a
/// transaction's `applyOps` entry, one per operation in scope, all at the entry's time
/// with their index in it as the token's `txnOpIndex` (as mongod unwinds them).
pub(crate) fn transform_all(
    engine: &Engine,
    spec: &StreamSpec,
    ts: ClusterTime,
    entry: &RawDocument,
) -> Result<Events> {
    let f = EntryFields::read(entry)
        .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?;
    let Some(ops) = apply_ops(&f) else {
        // The usual entry: one event at most, pushed (collecting an Option into the
        // SmallVec went through its generic `extend`, ~100 instructions per event).
        let mut out = Events::new();
        if let Some(ev) = transform_fields(engine, spec, ts, &f, None)? {
            out.push(ev);
        }
        return Ok(out);
    };
    let corrupt = |e: bson::raw::Error| Error::internal(format!("corrupt oplog entry: {e}"));
    let mut out = Events::new();
    for (index, op) in ops.into_iter().enumerate() {
        let op = op.map_err(corrupt)?;
        let Some(op) = op.as_document() else {
            return Err(Error::internal("corrupt oplog entry: applyOps"));
        };
        let inner = EntryFields::read(op).map_err(corrupt)?;
        let fields = EntryFields {
            wall: f.wall,
            lsid: f.lsid,
            txn_number: f.txn_number,
            ..inner
        };
        if let Some(ev) = transform_fields(engine, spec, ts, &fields, Some(index as u32))? {
            out.push(ev);
        }
    }
    Ok(out)
}

/// The event of one operation: a whole entry's, or (`op_index`) one of a transaction's.
fn transform_fields(
    engine: &Engine,
    spec: &StreamSpec,
    ts: ClusterTime,
    f: &EntryFields<'_>,
    op_index: Option<u32>,
) -> Result<Option<Event>> {
    let f = *f;
    let Some(p) = parse(&f, spec)? else {
        return Ok(None);
    };
    if p.expanded_only && !spec.show_expanded {
        return Ok(None);
    }
    if p.op_type == "dropDatabase" {
        match &spec.scope {
            Scope::Database(db) if *db == p.nss.db => {}
            Scope::Cluster if !internal_db(&p.nss.db) => {}
            _ => return Ok(None),
        }
    } else if !in_scope(spec, &p.nss, p.to.as_ref()) {
        return Ok(None);
    }
    let uuid = match f.ui {
        Some(b) if b.bytes.len() == 16 && p.op_type != "dropDatabase" => Some(
            bson::Uuid::from_bytes(b.bytes.try_into().expect("16 bytes")),
        ),
        _ => None,
    };
    let token = if let Some(k) = &p.document_key {
        // The common case, encoded straight from the raw document key. Sized up front:
        // growing from empty took four reallocations per event.
        let mut b = tailstream_query::keystring::KeyStringBuilder::with_capacity(
            EVENT_KEY_OVERHEAD + p.op_type.len() + 2 * k.raw().as_bytes().len(),
        );
        b.append_string_and_raw_document("operationType", p.op_type, "documentKey", k.raw())?;
        let mut t = ResumeToken::event_with_key(ts, uuid, b.into_bytes());
        t.txn_op_index = op_index.map(i64::from).unwrap_or(0);
        t
    } else {
        let mut event_id = doc! {"operationType": p.op_type};
        if let Some(d) = &p.op_description {
            event_id.insert("operationDescription", d.clone());
        }
        let mut t = ResumeToken::event(ts, uuid, event_id);
        t.txn_op_index = op_index.map(i64::from).unwrap_or(0);
        t
    };
    let invalidates = match &spec.scope {
        Scope::Collection(_) => matches!(p.op_type, "drop" | "rename"),
        Scope::Database(_) => p.op_type == "dropDatabase",
        Scope::Cluster => false,
    };

    let to_raw =
        |d: &Document| RawDocumentBuf::from_document(d).map_err(|e| Error::internal(e.to_string()));
    // Sized up front: growing the buffer field by field reallocated it several times
    // per event.
    let estimate = 512
        + p.full_document.map(|f| f.as_bytes().len()).unwrap_or(0)
        + p.document_key
            .as_ref()
            .map(|k| 2 * k.raw().as_bytes().len())
            .unwrap_or(0);
    let mut d = RawWriter::with_capacity(estimate);
    if let Some(to) = &p.to {
        // mongod adds the rename target before everything else.
        d.doc("to", &ns_raw(to));
    }
    // A transaction's events show its session, ahead of the token as mongod adds them
    // (its transform sets txnNumber and lsid before the resume token).
    if let (Some(lsid), Some(number), Some(_)) = (f.lsid, f.txn_number, op_index) {
        d.value("txnNumber", bson::RawBsonRef::Int64(number));
        d.doc("lsid", lsid);
    }
    d.name(raw_writer::DOCUMENT, "_id");
    token.write_raw_document(d.buf());
    d.string("operationType", p.op_type);
    d.timestamp("clusterTime", ts.into());
    if spec.show_expanded && !p.view_event {
        if let Some(u) = uuid {
            d.uuid("collectionUUID", u);
        }
    }
    if let Some(wall) = f.wall {
        d.value("wallTime", wall);
    }
    if let Some(full) = p.full_document {
        d.doc("fullDocument", full);
    }
    match (&p.nss, &spec.collection_ns) {
        (Cow::Borrowed(_), Some(own)) => d.doc("ns", own),
        _ => d.doc("ns", &ns_raw(&p.nss)),
    }
    if let Some(k) = &p.document_key {
        d.doc("documentKey", k.raw());
    }
    if spec.show_expanded {
        if let Some(desc) = &p.op_description {
            d.doc("operationDescription", &to_raw(desc)?);
        }
    }
    match p.update_description {
        Some(UpdateDescription::Parsed(mut ud)) => {
            if !spec.show_expanded {
                ud.remove("disambiguatedPaths");
            }
            d.doc("updateDescription", &to_raw(&ud)?);
        }
        // mongod puts the oplog's own description where the parsed one would be.
        Some(UpdateDescription::Raw(o)) => d.doc("rawUpdateDescription", o),
        None => {}
    }
    if let Some(s) = &p.state_before_change {
        d.doc("stateBeforeChange", &to_raw(s)?);
    }
    let mut d = d.finish();
    let wants_images = match p.op_type {
        "update" => {
            spec.full_document != FullDocument::Default || spec.before_change != BeforeChange::Off
        }
        "replace" | "delete" => spec.before_change != BeforeChange::Off,
        _ => false,
    };
    if wants_images {
        let mut full = d
            .to_document()
            .map_err(|e| Error::internal(e.to_string()))?;
        add_images(engine, spec, ts, op_index, uuid, &mut full)?;
        d = to_raw(&full)?;
    }
    Ok(Some(Event {
        doc: d,
        token,
        invalidates,
    }))
}

/// The invalidate event that follows an invalidating event.
pub(crate) fn invalidate(cause: &Event) -> Event {
    let mut token = cause.token.clone();
    token.from_invalidate = true;
    let mut d = RawDocumentBuf::new();
    d.append("_id", token.to_raw_document());
    d.append("operationType", "invalidate");
    for f in ["clusterTime", "wallTime"] {
        if let Ok(Some(v)) = cause.doc.get(f) {
            d.append_ref(f, v);
        }
    }
    Event {
        doc: d,
        token,
        invalidates: true,
    }
}

/// fullDocument for updates (updateLookup or the stored post-image) and
/// fullDocumentBeforeChange (the stored pre-image).
fn add_images(
    engine: &Engine,
    spec: &StreamSpec,
    ts: ClusterTime,
    op_index: Option<u32>,
    uuid: Option<bson::Uuid>,
    d: &mut Document,
) -> Result<()> {
    let op = d.get_str("operationType").unwrap_or("").to_string();
    if op == "update" {
        match spec.full_document {
            FullDocument::Default => {}
            FullDocument::UpdateLookup => {
                let found = lookup_current(engine, d, uuid)?;
                d.insert(
                    "fullDocument",
                    found.map(Bson::Document).unwrap_or(Bson::Null),
                );
            }
            FullDocument::WhenAvailable | FullDocument::Required => add_image(
                engine,
                (ts, op_index),
                ImageKind::After,
                spec.full_document == FullDocument::Required,
                "fullDocument",
                "a post-image for all update events, but the post-image",
                d,
            )?,
        }
    }
    if matches!(op.as_str(), "update" | "replace" | "delete")
        && spec.before_change != BeforeChange::Off
    {
        add_image(
            engine,
            (ts, op_index),
            ImageKind::Before,
            spec.before_change == BeforeChange::Required,
            "fullDocumentBeforeChange",
            "a pre-image for all update, delete and replace events, but the pre-image",
            d,
        )?;
    }
    Ok(())
}

/// Sets `field` to the stored image, or to null when there is none (an error when required).
fn add_image(
    engine: &Engine,
    at: (ClusterTime, Option<u32>),
    kind: ImageKind,
    required: bool,
    field: &str,
    what: &str,
    d: &mut Document,
) -> Result<()> {
    match image(engine, at, kind)? {
        Some(img) => {
            d.insert(field, img);
        }
        None if required => {
            return Err(Error::new(
                codes::NO_MATCHING_DOCUMENT,
                format!(
                    "Change stream was configured to require {what} was not found for event: {}",
                    crate::core::format::doc_to_string(d)
                ),
            ));
        }
        None => {
            d.insert(field, Bson::Null);
        }
    }
    Ok(())
}

/// The image stored for the entry at `ts` (or for operation `index` of the transaction
/// whose entry it is).
fn image(
    engine: &Engine,
    (ts, index): (ClusterTime, Option<u32>),
    kind: ImageKind,
) -> Result<Option<Document>> {
    let found = match index {
        Some(i) => engine
            .store
            .get(Space::Images, &keys::image_key_at(ts, i, kind)),
        None => engine.store.get(Space::Images, &keys::image_key(ts, kind)),
    };
    match found.map_err(crate::core::storage_err)? {
        Some(bytes) => Ok(Some(crate::read::decode(&bytes)?)),
        None => Ok(None),
    }
}

/// The document's current version (updateLookup): null when it is gone or its
/// collection was dropped or replaced since.
fn lookup_current(
    engine: &Engine,
    d: &Document,
    uuid: Option<bson::Uuid>,
) -> Result<Option<Document>> {
    let Ok(ns) = d.get_document("ns") else {
        return Ok(None);
    };
    let nss = Namespace::new(
        ns.get_str("db").unwrap_or(""),
        ns.get_str("coll").unwrap_or(""),
    );
    let Some(meta) = engine.collection(&nss) else {
        return Ok(None);
    };
    if Some(meta.uuid) != uuid {
        return Ok(None);
    }
    let Some(id) = d
        .get_document("documentKey")
        .ok()
        .and_then(|k| k.get("_id"))
    else {
        return Ok(None);
    };
    crate::read::fetch(&engine.store, meta.id, &keys::id_key(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use crate::write::{DeleteOp, UpdateOp};

    fn spec(db: &str, coll: Option<&str>, opts: Document) -> StreamSpec {
        super::super::parse_spec(db, coll, &opts, &[]).unwrap().0
    }

    fn on_c(opts: Document) -> StreamSpec {
        spec("db", Some("c"), opts)
    }

    fn ns_c() -> Namespace {
        Namespace::new("db", "c")
    }

    /// The entry a commit wrote last, and its time.
    fn entry_of(
        e: &Engine,
        committed: Option<crate::oplog::txn::Committed>,
    ) -> (ClusterTime, RawDocumentBuf) {
        let ts = committed.unwrap().last_ts.unwrap();
        let bytes = e
            .store
            .get(Space::Oplog, &keys::oplog_key(ts))
            .unwrap()
            .expect("the commit's entry");
        (ts, RawDocumentBuf::from_bytes(bytes).unwrap())
    }

    /// The events of the entry `committed` wrote last, decoded, with whether each
    /// invalidates the stream.
    fn events(
        e: &Engine,
        spec: &StreamSpec,
        committed: Option<crate::oplog::txn::Committed>,
    ) -> Result<Vec<(Document, ResumeToken, bool)>> {
        let (ts, entry) = entry_of(e, committed);
        Ok(transform_all(e, spec, ts, &entry)?
            .into_iter()
            .map(|ev| (ev.doc.to_document().unwrap(), ev.token, ev.invalidates))
            .collect())
    }

    fn one(
        e: &Engine,
        spec: &StreamSpec,
        committed: Option<crate::oplog::txn::Committed>,
    ) -> Document {
        let mut evs = events(e, spec, committed).unwrap();
        assert_eq!(evs.len(), 1, "{evs:?}");
        evs.remove(0).0
    }

    fn keys_of(d: &Document) -> Vec<&str> {
        d.keys().map(String::as_str).collect()
    }

    fn insert(e: &Engine, ns: &Namespace, doc: Document) -> Option<crate::oplog::txn::Committed> {
        let out = e.insert_documents(ns, vec![doc], true).unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        out.committed
    }

    fn update(e: &Engine, q: Document, u: Document) -> Option<crate::oplog::txn::Committed> {
        let op = UpdateOp {
            q,
            u: Bson::Document(u),
            ..Default::default()
        };
        let out = e.update(&ns_c(), vec![op], true).unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        out.committed
    }

    fn delete(e: &Engine, q: Document) -> Option<crate::oplog::txn::Committed> {
        let op = DeleteOp {
            q,
            limit: 1,
            ..Default::default()
        };
        e.delete(&ns_c(), vec![op], true).unwrap().committed
    }

    /// An insert's event has mongod's fields in mongod's order, its token the entry's
    /// time, the collection's UUID and `{operationType, documentKey}`.
    #[test]
    fn an_insert_event_is_mongods() {
        let e = TestEngine::open();
        let committed = insert(&e, &ns_c(), doc! {"_id": 1, "a": "x"});
        let ts = committed.unwrap().last_ts.unwrap();
        let uuid = e.collection(&ns_c()).unwrap().uuid;
        let ev = one(&e, &on_c(doc! {}), committed);
        assert_eq!(
            keys_of(&ev),
            vec![
                "_id",
                "operationType",
                "clusterTime",
                "wallTime",
                "fullDocument",
                "ns",
                "documentKey"
            ]
        );
        assert_eq!(ev.get_str("operationType").unwrap(), "insert");
        assert_eq!(
            ClusterTime::from(ev.get_timestamp("clusterTime").unwrap()),
            ts
        );
        assert!(ev.get_datetime("wallTime").is_ok());
        assert_eq!(
            ev.get_document("fullDocument").unwrap(),
            &doc! {"_id": 1, "a": "x"}
        );
        assert_eq!(
            ev.get_document("ns").unwrap(),
            &doc! {"db": "db", "coll": "c"}
        );
        assert_eq!(ev.get_document("documentKey").unwrap(), &doc! {"_id": 1});
        let token = ResumeToken::parse(ev.get("_id").unwrap()).unwrap();
        let expected = ResumeToken::event(
            ts,
            Some(uuid),
            doc! {"operationType": "insert", "documentKey": {"_id": 1}},
        );
        assert_eq!(token.to_document(), expected.to_document());
        // With showExpandedEvents, the collection's UUID after clusterTime.
        let ev = one(&e, &on_c(doc! {"showExpandedEvents": true}), committed);
        assert_eq!(keys_of(&ev)[3], "collectionUUID");
        assert_eq!(
            ev.get("collectionUUID").unwrap(),
            &Bson::Binary(bson::Binary::from_uuid(uuid))
        );
    }

    #[test]
    fn an_update_event_describes_the_change() {
        let e = TestEngine::open();
        insert(
            &e,
            &ns_c(),
            doc! {"_id": 1, "a": 1, "b": 1, "n": {"x": 0}, "arr": [1, 2, 3]},
        );
        let committed = update(
            &e,
            doc! {"_id": 1},
            doc! {"$set": {"a": 2, "n.x": 1}, "$unset": {"b": ""}, "$pop": {"arr": 1}},
        );
        let ev = one(&e, &on_c(doc! {}), committed);
        assert_eq!(
            keys_of(&ev),
            vec![
                "_id",
                "operationType",
                "clusterTime",
                "wallTime",
                "ns",
                "documentKey",
                "updateDescription"
            ]
        );
        assert_eq!(ev.get_str("operationType").unwrap(), "update");
        assert_eq!(ev.get_document("documentKey").unwrap(), &doc! {"_id": 1});
        assert_eq!(
            ev.get_document("updateDescription").unwrap(),
            &doc! {
                "updatedFields": {"a": 2, "n.x": 1},
                "removedFields": ["b"],
                "truncatedArrays": [{"field": "arr", "newSize": 2}],
            }
        );
        // disambiguatedPaths only with showExpandedEvents.
        let ev = one(&e, &on_c(doc! {"showExpandedEvents": true}), committed);
        let desc = ev.get_document("updateDescription").unwrap();
        assert_eq!(desc.get_document("disambiguatedPaths").unwrap(), &doc! {});
        // showRawUpdateDescription: the entry's own diff in its place.
        let ev = one(
            &e,
            &on_c(doc! {"showRawUpdateDescription": true}),
            committed,
        );
        assert!(ev.get("updateDescription").is_none());
        assert_eq!(
            ev.get_document("rawUpdateDescription")
                .unwrap()
                .get_i32("$v")
                .unwrap(),
            2
        );
    }

    #[test]
    fn a_replace_event_carries_the_new_document() {
        let e = TestEngine::open();
        insert(&e, &ns_c(), doc! {"_id": 1, "a": 1});
        let committed = update(&e, doc! {"_id": 1}, doc! {"b": 2});
        let ev = one(&e, &on_c(doc! {}), committed);
        assert_eq!(ev.get_str("operationType").unwrap(), "replace");
        assert_eq!(
            keys_of(&ev),
            vec![
                "_id",
                "operationType",
                "clusterTime",
                "wallTime",
                "fullDocument",
                "ns",
                "documentKey"
            ]
        );
        assert_eq!(
            ev.get_document("fullDocument").unwrap(),
            &doc! {"_id": 1, "b": 2}
        );
        assert_eq!(ev.get_document("documentKey").unwrap(), &doc! {"_id": 1});
    }

    /// A delete's event names the document only; its pre-image is there only when the
    /// collection keeps them (null, or an error when required, otherwise).
    #[test]
    fn a_delete_event_and_its_pre_image() {
        let e = TestEngine::open();
        insert(&e, &ns_c(), doc! {"_id": 1, "a": 1});
        let committed = delete(&e, doc! {"_id": 1});
        let ev = one(&e, &on_c(doc! {}), committed);
        assert_eq!(ev.get_str("operationType").unwrap(), "delete");
        assert_eq!(
            keys_of(&ev),
            vec![
                "_id",
                "operationType",
                "clusterTime",
                "wallTime",
                "ns",
                "documentKey"
            ]
        );
        let ev = one(
            &e,
            &on_c(doc! {"fullDocumentBeforeChange": "whenAvailable"}),
            committed,
        );
        assert_eq!(ev.get("fullDocumentBeforeChange"), Some(&Bson::Null));
        let err = events(
            &e,
            &on_c(doc! {"fullDocumentBeforeChange": "required"}),
            committed,
        )
        .expect_err("no pre-image");
        assert_eq!(err.code, codes::NO_MATCHING_DOCUMENT);
        assert!(err.message.starts_with(
            "Change stream was configured to require a pre-image for all update, delete and replace events, but the pre-image was not found for event: "
        ));

        let kept = Namespace::new("db", "kept");
        e.create_collection(
            &kept,
            doc! {"changeStreamPreAndPostImages": {"enabled": true}},
        )
        .unwrap();
        insert(&e, &kept, doc! {"_id": 1, "a": 1});
        let out = e
            .delete(
                &kept,
                vec![DeleteOp {
                    q: doc! {"_id": 1},
                    limit: 1,
                    ..Default::default()
                }],
                true,
            )
            .unwrap();
        let required = spec(
            "db",
            Some("kept"),
            doc! {"fullDocumentBeforeChange": "required"},
        );
        let ev = one(&e, &required, out.committed);
        assert_eq!(
            ev.get_document("fullDocumentBeforeChange").unwrap(),
            &doc! {"_id": 1, "a": 1}
        );
    }

    /// fullDocument of an update: the document now (updateLookup), or the post-image
    /// stored with the update (whenAvailable).
    #[test]
    fn an_update_event_looks_up_or_keeps_its_post_image() {
        let e = TestEngine::open();
        let kept = Namespace::new("db", "c");
        e.create_collection(
            &kept,
            doc! {"changeStreamPreAndPostImages": {"enabled": true}},
        )
        .unwrap();
        insert(&e, &kept, doc! {"_id": 1, "a": 1});
        let first = update(&e, doc! {"_id": 1}, doc! {"$set": {"a": 2}});
        update(&e, doc! {"_id": 1}, doc! {"$set": {"a": 3}});
        let lookup = one(&e, &on_c(doc! {"fullDocument": "updateLookup"}), first);
        assert_eq!(
            lookup.get_document("fullDocument").unwrap(),
            &doc! {"_id": 1, "a": 3}
        );
        let image = one(
            &e,
            &on_c(
                doc! {"fullDocument": "whenAvailable", "fullDocumentBeforeChange": "whenAvailable"},
            ),
            first,
        );
        assert_eq!(
            image.get_document("fullDocument").unwrap(),
            &doc! {"_id": 1, "a": 2}
        );
        assert_eq!(
            image.get_document("fullDocumentBeforeChange").unwrap(),
            &doc! {"_id": 1, "a": 1}
        );
        delete(&e, doc! {"_id": 1});
        let gone = one(&e, &on_c(doc! {"fullDocument": "updateLookup"}), first);
        assert_eq!(gone.get("fullDocument"), Some(&Bson::Null));
    }

    /// A drop invalidates a stream on the collection (the invalidate follows with the
    /// drop's times and an invalidate token), not one on its database.
    #[test]
    fn a_drop_invalidates_a_collection_stream_only() {
        let e = TestEngine::open();
        insert(&e, &ns_c(), doc! {"_id": 1});
        let uuid = e.collection(&ns_c()).unwrap().uuid;
        let committed = e.drop_collection(&ns_c()).unwrap();
        let (ts, entry) = entry_of(&e, committed);
        let evs = transform_all(&e, &on_c(doc! {}), ts, &entry).unwrap();
        assert_eq!(evs.len(), 1);
        let drop = &evs[0];
        assert!(drop.invalidates);
        let d = drop.doc.to_document().unwrap();
        assert_eq!(
            keys_of(&d),
            vec!["_id", "operationType", "clusterTime", "wallTime", "ns"]
        );
        assert_eq!(d.get_str("operationType").unwrap(), "drop");
        assert_eq!(drop.token.uuid, Some(uuid));
        let inv = invalidate(drop);
        let i = inv.doc.to_document().unwrap();
        assert_eq!(
            keys_of(&i),
            vec!["_id", "operationType", "clusterTime", "wallTime"]
        );
        assert_eq!(i.get_str("operationType").unwrap(), "invalidate");
        assert_eq!(i.get("clusterTime"), d.get("clusterTime"));
        assert!(inv.token.from_invalidate && inv.token.same_event(&drop.token));
        let db_events = events(&e, &spec("db", None, doc! {}), committed).unwrap();
        assert_eq!(db_events.len(), 1);
        assert!(!db_events[0].2, "a database stream goes on");
    }

    /// A rename is reported with its target first (mongod adds `to` before the rest)
    /// and ends streams on the source and on the target.
    #[test]
    fn a_rename_names_its_target_first_and_ends_both_collections_streams() {
        let e = TestEngine::open();
        insert(&e, &ns_c(), doc! {"_id": 1});
        let to = Namespace::new("db", "d");
        let committed = Some(e.rename_collection(&ns_c(), &to, false).unwrap());
        let ev = one(&e, &on_c(doc! {}), committed);
        assert_eq!(
            keys_of(&ev),
            vec![
                "to",
                "_id",
                "operationType",
                "clusterTime",
                "wallTime",
                "ns"
            ]
        );
        assert_eq!(ev.get_str("operationType").unwrap(), "rename");
        assert_eq!(
            ev.get_document("to").unwrap(),
            &doc! {"db": "db", "coll": "d"}
        );
        assert_eq!(
            ev.get_document("ns").unwrap(),
            &doc! {"db": "db", "coll": "c"}
        );
        for watched in ["c", "d"] {
            let evs = events(&e, &spec("db", Some(watched), doc! {}), committed).unwrap();
            assert!(evs.len() == 1 && evs[0].2, "a stream on {watched} ends");
        }
        assert!(events(&e, &spec("db", Some("x"), doc! {}), committed)
            .unwrap()
            .is_empty());
        let expanded = one(&e, &on_c(doc! {"showExpandedEvents": true}), committed);
        assert_eq!(
            expanded
                .get_document("operationDescription")
                .unwrap()
                .get_document("to")
                .unwrap(),
            &doc! {"db": "db", "coll": "d"}
        );
    }

    #[test]
    fn a_dropped_database_ends_its_database_streams() {
        let e = TestEngine::open();
        insert(&e, &Namespace::new("db", "a"), doc! {"_id": 1});
        let committed = e.drop_database("db").unwrap();
        let on_db = events(&e, &spec("db", None, doc! {}), committed).unwrap();
        assert_eq!(on_db.len(), 1);
        let (d, token, invalidates) = &on_db[0];
        assert!(invalidates);
        assert_eq!(d.get_str("operationType").unwrap(), "dropDatabase");
        assert_eq!(d.get_document("ns").unwrap(), &doc! {"db": "db"});
        assert_eq!(token.uuid, None, "a database has no UUID");
        let on_cluster = events(
            &e,
            &spec("admin", None, doc! {"allChangesForCluster": true}),
            committed,
        )
        .unwrap();
        assert!(on_cluster.len() == 1 && !on_cluster[0].2);
        assert!(events(&e, &spec("other", None, doc! {}), committed)
            .unwrap()
            .is_empty());
    }

    /// DDL other than drop and rename is shown only with showExpandedEvents.
    #[test]
    fn creations_are_expanded_events() {
        let e = TestEngine::open();
        let committed = Some(e.create_collection(&ns_c(), doc! {}).unwrap());
        assert!(events(&e, &on_c(doc! {}), committed).unwrap().is_empty());
        let ev = one(&e, &on_c(doc! {"showExpandedEvents": true}), committed);
        assert_eq!(ev.get_str("operationType").unwrap(), "create");
        assert!(ev.get("operationDescription").is_some());
        let out = e
            .create_indexes(&ns_c(), &[doc! {"key": {"a": 1}, "name": "a_1"}])
            .unwrap();
        let committed = out.committed;
        assert!(events(&e, &on_c(doc! {}), committed).unwrap().is_empty());
        let ev = one(&e, &on_c(doc! {"showExpandedEvents": true}), committed);
        assert_eq!(ev.get_str("operationType").unwrap(), "createIndexes");
        let indexes = ev
            .get_document("operationDescription")
            .unwrap()
            .get_array("indexes")
            .unwrap();
        assert_eq!(
            indexes[0].as_document().unwrap().get_str("name").unwrap(),
            "a_1"
        );
    }

    /// Writes to system collections are not events of database and cluster streams,
    /// except (with showSystemEvents) those mongod 7.0 shows.
    #[test]
    fn system_collections_are_hidden_unless_asked_for() {
        let e = TestEngine::open();
        let js = insert(&e, &Namespace::new("db", "system.js"), doc! {"_id": "f"});
        let on_db = spec("db", None, doc! {});
        assert!(events(&e, &on_db, js).unwrap().is_empty());
        let with_system = spec("db", None, doc! {"showSystemEvents": true});
        assert_eq!(
            one(&e, &with_system, js).get_str("operationType").unwrap(),
            "insert"
        );
    }

    /// A transaction's entry is one event per operation in scope, all at its time,
    /// each with its index in the entry and the session ahead of the token.
    #[test]
    fn a_transaction_unwinds_into_one_event_per_operation() {
        let e = TestEngine::open();
        let other = Namespace::new("db", "other");
        insert(&e, &ns_c(), doc! {"_id": 0});
        insert(&e, &other, doc! {"_id": 0});
        let mut t = e.begin_transaction();
        let raw = |d: Document| RawDocumentBuf::from_document(&d).unwrap();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 1})], true, false)
            .unwrap();
        e.transaction_insert(&mut t, &other, vec![raw(doc! {"_id": 1})], true, false)
            .unwrap();
        e.transaction_insert(&mut t, &ns_c(), vec![raw(doc! {"_id": 2})], true, false)
            .unwrap();
        let lsid = doc! {"id": bson::Uuid::new()};
        let committed = e.commit_transaction(t, Some((lsid.clone(), 4))).unwrap();
        let ts = committed.unwrap().last_ts.unwrap();
        let on_c = events(&e, &on_c(doc! {}), committed).unwrap();
        let indexes: Vec<i64> = on_c.iter().map(|(_, t, _)| t.txn_op_index).collect();
        assert_eq!(indexes, vec![0, 2], "each its index in the whole entry");
        for (d, _, _) in &on_c {
            assert_eq!(
                keys_of(d)[..4],
                ["txnNumber", "lsid", "_id", "operationType"]
            );
            assert_eq!(d.get_i64("txnNumber").unwrap(), 4);
            assert_eq!(d.get_document("lsid").unwrap(), &lsid);
            assert_eq!(
                ClusterTime::from(d.get_timestamp("clusterTime").unwrap()),
                ts
            );
        }
        let keys: Vec<&Bson> = on_c
            .iter()
            .map(|(d, _, _)| d.get_document("documentKey").unwrap().get("_id").unwrap())
            .collect();
        assert_eq!(keys, vec![&Bson::Int32(1), &Bson::Int32(2)]);
        let on_db = events(&e, &spec("db", None, doc! {}), committed).unwrap();
        assert_eq!(on_db.len(), 3);
        assert!(on_db
            .windows(2)
            .all(|w| w[0].1.key_bytes() < w[1].1.key_bytes()));
    }
}

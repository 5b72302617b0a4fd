//! The cluster-wide default read and write concerns (`setDefaultRWConcern`,
//! `getDefaultRWConcern`). As mongod, they are kept in `config.settings` under the `_id`
//! `ReadWriteConcernDefaults`, so they survive a restart, and cached here; a command that
//! sends no read or write concern runs with them ([`RwDefaults::apply`]).

use crate::commands::registry::Spec;
use bson::{doc, Bson, DateTime, Document, Timestamp};
use parking_lot::RwLock;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::{codes, Error, Result};
use tailstream_engine::Engine;

/// Where mongod persists the defaults: this collection, this `_id`.
const SETTINGS_DB: &str = "config";
const SETTINGS_COLL: &str = "settings";
const DOCUMENT_ID: &str = "ReadWriteConcernDefaults";

/// Read concern levels mongod refuses as a default (`kReadConcernLevelsDisallowedAsDefault`).
const LEVELS_NOT_DEFAULT: &[&str] = &["snapshot", "linearizable"];
/// Read concern fields that name a point in time, which no default may carry.
const TIME_FIELDS: &[&str] = &["afterOpTime", "afterClusterTime", "atClusterTime"];

/// The commands a default read concern applies to (mongod's commands that support a
/// read concern other than local and are not cursors' continuations).
const READ_COMMANDS: &[&str] = &["find", "aggregate", "count", "distinct"];

/// The defaults as set: the persisted document (`defaultReadConcern`,
/// `defaultWriteConcern`, `updateOpTime`, `updateWallClockTime`, each only when set) and
/// when this server last loaded or changed it.
#[derive(Default)]
pub struct RwDefaults {
    current: RwLock<Option<(Document, DateTime)>>,
}

impl RwDefaults {
    /// The defaults persisted in `config.settings`, if any were set.
    pub fn load(engine: &Engine) -> RwDefaults {
        let stored = find_stored(engine).ok().flatten();
        RwDefaults {
            current: RwLock::new(stored.map(|d| (d, DateTime::now()))),
        }
    }

    /// `getDefaultRWConcern`'s reply (and `setDefaultRWConcern`'s): the defaults in
    /// force, with where each comes from (`implicit` or `global`).
    pub fn reply(&self, in_memory: bool) -> Document {
        let current = self.current.read();
        let (stored, local_time) = match &*current {
            Some((d, t)) => (d.clone(), *t),
            None => (Document::new(), DateTime::now()),
        };
        let mut out = Document::new();
        let rc_source = match stored.get_document("defaultReadConcern") {
            Ok(rc) if !rc.is_empty() => {
                out.insert("defaultReadConcern", rc.clone());
                "global"
            }
            _ => {
                out.insert("defaultReadConcern", doc! {"level": "local"});
                "implicit"
            }
        };
        let wc_source = match stored.get_document("defaultWriteConcern") {
            Ok(wc) if !wc.is_empty() => {
                out.insert("defaultWriteConcern", wc.clone());
                "global"
            }
            _ => {
                out.insert("defaultWriteConcern", doc! {"w": "majority", "wtimeout": 0});
                "implicit"
            }
        };
        for field in ["updateOpTime", "updateWallClockTime"] {
            if let Some(v) = stored.get(field) {
                out.insert(field, v.clone());
            }
        }
        out.insert("defaultReadConcernSource", rc_source);
        out.insert("defaultWriteConcernSource", wc_source);
        out.insert("localUpdateWallClockTime", local_time);
        if in_memory {
            out.insert("inMemory", true);
        }
        out
    }

    /// Checks and persists new defaults (mongod's `generateNewCWRWCToBeSavedOnDisk`): a
    /// field left out keeps its current value, an empty read concern unsets it, and a
    /// write concern once set cannot be unset.
    pub fn set(&self, engine: &Engine, cmd: &Document) -> Result<()> {
        let rc = opt_object(cmd, "defaultReadConcern")?;
        let wc = opt_object(cmd, "defaultWriteConcern")?;
        if rc.is_none() && wc.is_none() {
            return Err(Error::bad_value(
                "At least one of the \"defaultReadConcern\" or \"defaultWriteConcern\" fields must be present",
            ));
        }
        if let Some(rc) = rc {
            check_read_concern(rc)?;
        }
        let wc = wc.map(normalize_write_concern).transpose()?;
        let current = self.current.read().as_ref().map(|(d, _)| d.clone());
        let current_wc = current
            .as_ref()
            .and_then(|d| d.get_document("defaultWriteConcern").ok().cloned());
        if matches!(&wc, Some(w) if w.is_empty()) && current_wc.is_some() {
            return Err(Error::new(
                codes::ILLEGAL_OPERATION,
                "The global default write concern cannot be unset once it is set.",
            ));
        }
        let rc = match rc {
            Some(rc) => Some(rc.clone()),
            None => current
                .as_ref()
                .and_then(|d| d.get_document("defaultReadConcern").ok().cloned()),
        };
        let wc = wc.or(current_wc);
        let mut stored = Document::new();
        if let Some(rc) = rc.filter(|rc| !rc.is_empty()) {
            stored.insert("defaultReadConcern", rc);
        }
        if let Some(wc) = wc.filter(|wc| !wc.is_empty()) {
            stored.insert("defaultWriteConcern", wc);
        }
        let op_time: Timestamp = engine.cluster_time();
        stored.insert("updateOpTime", op_time);
        stored.insert("updateWallClockTime", DateTime::now());
        persist(engine, &stored)?;
        *self.current.write() = Some((stored, DateTime::now()));
        Ok(())
    }

    /// The command with the defaults filled in where it sends no read or write concern
    /// (None: nothing to fill in). Not inside transactions, whose concerns are the
    /// transaction's.
    pub fn apply(&self, spec: &Spec, cmd: &Document, in_transaction: bool) -> Option<Document> {
        if in_transaction {
            return None;
        }
        let current = self.current.read();
        let (stored, _) = current.as_ref()?;
        let mut out: Option<Document> = None;
        let absent = |field: &str| match cmd.get(field) {
            None => true,
            Some(Bson::Document(d)) => d.is_empty(),
            Some(_) => false,
        };
        if spec.write_concern && absent("writeConcern") {
            if let Ok(wc) = stored.get_document("defaultWriteConcern") {
                out.get_or_insert_with(|| cmd.clone())
                    .insert("writeConcern", wc.clone());
            }
        }
        if READ_COMMANDS.contains(&spec.name) && absent("readConcern") {
            if let Ok(rc) = stored.get_document("defaultReadConcern") {
                out.get_or_insert_with(|| cmd.clone())
                    .insert("readConcern", rc.clone());
            }
        }
        out
    }
}

fn settings_namespace() -> Namespace {
    Namespace::new(SETTINGS_DB, SETTINGS_COLL)
}

fn find_stored(engine: &Engine) -> Result<Option<Document>> {
    let request = tailstream_engine::find::FindRequest {
        filter: doc! {"_id": DOCUMENT_ID},
        single_batch: true,
        limit: Some(1),
        ..Default::default()
    };
    let batch = engine.find(&settings_namespace(), request)?;
    Ok(batch.docs.into_iter().next().map(|mut d| {
        d.remove("_id");
        d
    }))
}

fn persist(engine: &Engine, stored: &Document) -> Result<()> {
    let mut replacement = doc! {"_id": DOCUMENT_ID};
    replacement.extend(stored.clone());
    let op = tailstream_engine::write::UpdateOp {
        q: doc! {"_id": DOCUMENT_ID},
        u: Bson::Document(replacement),
        upsert: true,
        ..Default::default()
    };
    let outcome = engine.update(&settings_namespace(), vec![op], true)?;
    match outcome.errors.into_iter().next() {
        Some(e) => Err(e.error),
        None => Ok(()),
    }
}

fn opt_object<'a>(cmd: &'a Document, field: &str) -> Result<Option<&'a Document>> {
    match cmd.get(field) {
        None => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(v) => Err(crate::commands::args::wrong_field_type(field, v, "object")),
    }
}

/// mongod's `checkSuitabilityAsDefault` for a read concern.
fn check_read_concern(rc: &Document) -> Result<()> {
    crate::commands::gates::read_concern_level(&doc! {"readConcern": rc.clone()})?;
    if let Ok(level) = rc.get_str("level") {
        if LEVELS_NOT_DEFAULT.contains(&level) {
            return Err(Error::bad_value(format!(
                "level: '{level}' is not suitable for the default read concern"
            )));
        }
    }
    if let Some(field) = TIME_FIELDS.iter().find(|f| rc.contains_key(**f)) {
        return Err(Error::bad_value(format!(
            "'{field}' is not suitable for the default read concern"
        )));
    }
    if rc.contains_key("provenance") {
        return Err(Error::bad_value(
            "'provenance' must be unset in default read concern",
        ));
    }
    Ok(())
}

/// Checks a default write concern as mongod does and writes it as mongod stores it
/// (`w`, `j`, `wtimeout`); an empty one stays empty (unset).
fn normalize_write_concern(wc: &Document) -> Result<Document> {
    if wc.is_empty() {
        return Ok(Document::new());
    }
    crate::commands::write::parse_write_concern(&doc! {"writeConcern": wc.clone()})?;
    if wc.contains_key("provenance") {
        return Err(Error::bad_value(
            "'provenance' must be unset in default write concern",
        ));
    }
    let w = wc.get("w").cloned();
    let unacknowledged = match &w {
        Some(Bson::String(_)) => false,
        Some(n) => tailstream_engine::find::as_i64(n).is_some_and(|n| n < 1),
        None => false,
    };
    if unacknowledged && !matches!(wc.get("j"), Some(Bson::Boolean(true))) {
        return Err(Error::bad_value(
            "Unacknowledged write concern is not suitable for the default write concern",
        ));
    }
    let Some(w) = w else {
        return Err(Error::bad_value(
            "Default write concern must have 'w' field.",
        ));
    };
    let mut out = doc! {"w": w};
    if let Some(Bson::Boolean(j)) = wc.get("j") {
        out.insert("j", *j);
    }
    let wtimeout = wc
        .get("wtimeout")
        .and_then(tailstream_engine::find::as_i64)
        .unwrap_or(0);
    out.insert("wtimeout", wtimeout as i32);
    Ok(out)
}

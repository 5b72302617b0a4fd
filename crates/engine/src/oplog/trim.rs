//! Oplog trimming and the oplog's maintenance thread.

use crate::catalog::Catalog;
use crate::core::time::ClusterTime;
use crate::core::{keys, storage_err};
use crate::oplog;
use crate::Engine;
use tailstream_query::error::{Error, Result};
use tailstream_storage::Space;

/// Most oplog bytes one trim round removes: bounds the entries it holds in memory
/// and the writer-lock time of its copies.
const TRIM_ROUND_BYTES: u64 = 16 << 20;

/// An insert whose document may still live only in a trimmed oplog entry.
struct TrimCopy {
    coll_uuid: bson::Uuid,
    doc_key: Vec<u8>,
    ts: ClusterTime,
    doc: bson::RawDocumentBuf,
}

/// One round of oplog trimming: removes the oldest entries (at most
/// [`TRIM_ROUND_BYTES`]) towards a little under the cap (the slack keeps trims
/// infrequent). Returns whether the oplog is still over its cap.
///
/// Starts from the stored trim point, never searching for the oldest key. The
/// entries are read without the writer lock (they are immutable and all below the
/// newest commit); the lock is taken only to copy into their collection the
/// documents still stored only in a trimmed insert entry (their collection key
/// still points at it: checked under the lock, where no write can change it) and
/// to move the trim point, all in one atomic batch. Entries below the trim point
/// are gone for every reader at once (readers start at the trim point); their
/// storage is reclaimed by whole files later, so the oplog is never rewritten by
/// compaction. The per-namespace ordering and pre-images go with range tombstones.
fn trim_oplog_round(engine: &Engine) -> Result<bool> {
    let cap = engine.opts.oplog_size_bytes;
    let (trim_ts, oplog_bytes, newest) = {
        let w = engine.writer.lock();
        (w.trim_ts, w.oplog_bytes, w.clock.last())
    };
    if oplog_bytes <= cap {
        return Ok(false);
    }
    let slack = (cap / 64).max(256 * 1024).min(cap / 2);
    let mut to_free = oplog_bytes
        .saturating_sub(cap - slack)
        .min(TRIM_ROUND_BYTES);
    let coll_ids = coll_ids_by_uuid(&engine.catalog());
    let mut namespaces = std::collections::BTreeSet::new();
    let mut copies = Vec::new();
    let mut new_trim = trim_ts;
    let mut freed = 0u64;
    for item in engine
        .store
        .scan(Space::Oplog, &keys::oplog_key(trim_ts), None, false)
    {
        let (k, v) = item.map_err(storage_err)?;
        let t = keys::oplog_key_time(&k);
        if to_free == 0 || t >= newest {
            break;
        }
        if let Ok(raw) = bson::RawDocument::from_bytes(&v) {
            namespaces.extend(oplog::indexed_namespaces(raw));
            if raw.get_str("op") == Ok("i") {
                copies.extend(trim_copy(&coll_ids, raw, t)?);
            }
        }
        let n = v.len() as u64;
        to_free = to_free.saturating_sub(n);
        freed += n;
        new_trim = t.next();
    }
    if new_trim <= trim_ts {
        return Ok(false);
    }
    let mut batch = engine.store.batch();
    for ns in &namespaces {
        batch.delete_range(
            Space::OplogByNs,
            &keys::oplog_ns_key(ns, ClusterTime::ZERO),
            &keys::oplog_ns_key(ns, new_trim),
        );
    }
    batch.delete_range(
        Space::Images,
        &keys::image_key(ClusterTime::ZERO, keys::ImageKind::Before),
        &keys::image_key(new_trim, keys::ImageKind::Before),
    );
    let mut w = engine.writer.lock();
    // Only this thread moves the trim point.
    assert_eq!(w.trim_ts, trim_ts, "oplog trim point moved during a trim");
    // Under the writer lock the catalog and the collection keys cannot change.
    let live = coll_ids_by_uuid(&engine.catalog());
    for c in &copies {
        if live.get(&c.coll_uuid) != coll_ids.get(&c.coll_uuid) {
            continue; // dropped, or renamed with its documents copied in
        }
        if let Some(v) = engine
            .store
            .get(Space::Docs, &c.doc_key)
            .map_err(storage_err)?
        {
            if keys::parse_doc_pointer(&v) == Some(c.ts) {
                batch.put(Space::Docs, &c.doc_key, c.doc.as_bytes());
            }
        }
    }
    w.trim_ts = new_trim;
    w.oplog_bytes = w.oplog_bytes.saturating_sub(freed);
    w.put_oplog_state(&mut batch);
    engine.store.commit(batch).map_err(storage_err)?;
    engine
        .trim_ts
        .store(new_trim, std::sync::atomic::Ordering::Release);
    let over = w.oplog_bytes > cap;
    drop(w);
    engine
        .store
        .retire_through(Space::Oplog, &keys::oplog_key(new_trim.prev()));
    tracing::debug!(freed, %new_trim, "oplog trimmed");
    Ok(over)
}

/// Collection ids by UUID (oplog entries name their collection by UUID).
fn coll_ids_by_uuid(catalog: &Catalog) -> std::collections::HashMap<bson::Uuid, u32> {
    catalog.colls.values().map(|c| (c.uuid, c.id)).collect()
}

/// The copy a trim may have to make for an insert entry: its collection (by UUID),
/// document key and document. None if the collection is gone.
fn trim_copy(
    coll_ids: &std::collections::HashMap<bson::Uuid, u32>,
    entry: &bson::RawDocument,
    ts: ClusterTime,
) -> Result<Option<TrimCopy>> {
    let Ok(bson::RawBsonRef::Binary(ui)) =
        entry.get("ui").map(|v| v.unwrap_or(bson::RawBsonRef::Null))
    else {
        return Ok(None);
    };
    let Ok(uuid) = <[u8; 16]>::try_from(ui.bytes).map(bson::Uuid::from_bytes) else {
        return Ok(None);
    };
    let Some(&coll_id) = coll_ids.get(&uuid) else {
        return Ok(None);
    };
    let doc = entry
        .get_document("o")
        .map_err(|e| Error::internal(format!("corrupt insert oplog entry: {e}")))?;
    let id = doc
        .get("_id")
        .ok()
        .flatten()
        .ok_or_else(|| Error::internal("insert oplog entry without _id"))?;
    let id = bson::Bson::try_from(id.to_raw_bson()).map_err(|e| Error::internal(e.to_string()))?;
    Ok(Some(TrimCopy {
        coll_uuid: uuid,
        doc_key: keys::doc_key(coll_id, &keys::id_key(&id)),
        ts,
        doc: doc.to_raw_document_buf(),
    }))
}

/// Starts the oplog's maintenance thread (mongod has one too): it trims the oplog
/// when a commit takes it over its cap (woken by the commit; trimming never runs on
/// a writer's path), and twice a second deletes the files of trimmed entries once no
/// snapshot can read them ([`Store::reclaim`]). Stops when the wake-up sender is
/// dropped or the engine is gone.
pub(crate) fn spawn_oplog_maintenance(
    engine: std::sync::Weak<Engine>,
    woken: std::sync::mpsc::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("oplog-maintain".into())
        .spawn(move || loop {
            let stop = matches!(
                woken.recv_timeout(std::time::Duration::from_millis(500)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
            );
            let Some(engine) = engine.upgrade() else {
                return;
            };
            // Trimming waits while `fsync` holds the files still (`db.fsyncLock()`).
            let Some(_pass) = engine.fsync_lock.try_enter_write() else {
                if stop {
                    return;
                }
                continue;
            };
            loop {
                match trim_oplog_round(&engine) {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        tracing::error!("oplog trim failed: {e}");
                        break;
                    }
                }
            }
            if let Err(e) = engine.store.reclaim() {
                tracing::warn!("reclaiming trimmed oplog files failed: {e}");
            }
            if stop {
                return;
            }
        })
        .expect("spawn the oplog maintenance thread")
}

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
pub(crate) fn trim_oplog_round(engine: &Engine) -> Result<bool> {
    let cap = engine.opts.oplog_size_bytes;
    // The newest committed entry, not the clock's newest time: a write that failed or
    // a transaction that conflicted at its commit took times no entry has.
    let (trim_ts, oplog_bytes, newest) = {
        let w = engine.writer.lock();
        (w.trim_ts, w.oplog_bytes, w.committed_ts)
    };
    if oplog_bytes <= cap {
        return Ok(false);
    }
    // In a replica set only the member that may write trims: its trim is a commit the
    // others apply, so every member's oplog keeps the same entries.
    let proposer = engine.proposer();
    if proposer.as_ref().is_some_and(|p| !p.writable()) {
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
    let mut batch = engine.write_batch();
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
    // A replica set's pipelined commits go first: the documents checked below must be
    // as the store will hold them when this trim is applied after them.
    if let Some(p) = &proposer {
        p.drain()?;
    }
    // Only this thread moves the trim point.
    assert_eq!(w.trim_ts, trim_ts, "oplog trim point moved during a trim");
    // The newest entry stays: the clock restarts after it, and a stream opened without
    // a start point starts after it, so never below the trim point.
    assert!(
        new_trim <= w.committed_ts,
        "the oplog trim would remove the newest committed entry (trim point {new_trim}, newest {})",
        w.committed_ts
    );
    assert!(
        freed <= w.oplog_bytes,
        "the oplog trim frees {freed} bytes of the {} counted",
        w.oplog_bytes
    );
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
    // The state the batch stores; memory takes it only once the batch is in (a commit
    // refused for want of disk space leaves both as they were).
    let before = (w.trim_ts, w.oplog_bytes, w.state_bytes);
    w.trim_ts = new_trim;
    w.oplog_bytes -= freed;
    w.state_bytes = w.oplog_bytes;
    let through = w.committed_ts;
    w.put_oplog_state(&mut batch, through);
    let mut recorded = batch.take_recorded();
    let stored = match &proposer {
        Some(p) => {
            drop(batch);
            p.propose(
                recorded
                    .take()
                    .expect("a replica set's batch records its writes"),
            )
        }
        None => engine.store.commit(batch).map_err(storage_err),
    };
    if let Err(e) = stored {
        (w.trim_ts, w.oplog_bytes, w.state_bytes) = before;
        return Err(e);
    }
    engine.ship(recorded);
    // Readers compare their position with this point (change streams fail with
    // ChangeStreamHistoryLost below it, oplog scans with CappedPositionLost): it only
    // moves forward, or a reader that checked it could be below it unawares.
    let before = engine
        .trim_ts
        .swap(new_trim, std::sync::atomic::Ordering::AcqRel);
    assert!(
        before < new_trim,
        "the oplog trim point moves backwards: {new_trim} after {before}"
    );
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
/// A meter for a trim of more than one round (the oplog made smaller, or grown far
/// past its cap while trimming was held): its progress lines say how much is left.
fn large_trim_progress(engine: &Engine) -> Option<crate::core::progress::ProgressMeter> {
    let excess = engine
        .writer
        .lock()
        .oplog_bytes
        .saturating_sub(engine.opts.oplog_size_bytes);
    (excess > TRIM_ROUND_BYTES)
        .then(|| crate::core::progress::ProgressMeter::new("Oplog truncation", "bytes", excess))
}

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
            let mut progress = large_trim_progress(&engine);
            loop {
                let before = engine.writer.lock().oplog_bytes;
                match trim_oplog_round(&engine) {
                    Ok(true) => {
                        if let Some(p) = progress.as_mut() {
                            p.hit(before.saturating_sub(engine.writer.lock().oplog_bytes));
                        }
                    }
                    Ok(false) => break,
                    Err(e) => {
                        tracing::error!("oplog trim failed: {e}");
                        break;
                    }
                }
            }
            drop(progress);
            if let Err(e) = engine.store.reclaim() {
                tracing::warn!("reclaiming trimmed oplog files failed: {e}");
            }
            if stop {
                return;
            }
        })
        .expect("spawn the oplog maintenance thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::namespace::Namespace;
    use crate::core::testing::TestEngine;
    use crate::oplog::OplogChange;
    use bson::doc;

    /// A small cap: a few documents of [`DOC_BYTES`] go over it.
    const CAP: u64 = 64 * 1024;
    const DOC_BYTES: usize = 4 * 1024;

    fn engine_trimmed_by_hand() -> TestEngine {
        TestEngine::trimmed_by_hand(CAP)
    }

    /// The entries stored from the trim point on: (time, bytes).
    fn retained(e: &Engine) -> Vec<(ClusterTime, usize)> {
        crate::core::testing::stored_oplog(e, e.oplog_trim_ts())
    }

    fn insert(e: &Engine, ns: &Namespace, id: i32, bytes: usize) -> ClusterTime {
        let out = e
            .insert_documents(ns, vec![doc! {"_id": id, "pad": "x".repeat(bytes)}], true)
            .expect("insert");
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        out.committed.unwrap().last_ts.unwrap()
    }

    #[test]
    fn trims_the_oldest_entries_under_the_cap_and_keeps_every_document() {
        let e = engine_trimmed_by_hand();
        let ns = Namespace::new("db", "c");
        let times: Vec<ClusterTime> = (0..40).map(|i| insert(&e, &ns, i, DOC_BYTES)).collect();
        assert!(e.writer.lock().oplog_bytes > CAP);
        let mut trim_points = vec![e.oplog_trim_ts()];
        while trim_oplog_round(&e).unwrap() {
            trim_points.push(e.oplog_trim_ts());
        }
        trim_points.push(e.oplog_trim_ts());
        assert!(
            trim_points.windows(2).all(|w| w[0] <= w[1]),
            "the trim point only moves forward: {trim_points:?}"
        );
        let trim = e.oplog_trim_ts();
        assert!(trim > times[0], "the oldest inserts were trimmed");
        assert!(trim <= times[39], "the newest insert was kept");
        let left = retained(&e);
        let counted = e.writer.lock().oplog_bytes;
        assert!(counted <= CAP, "{counted} bytes left, cap {CAP}");
        assert_eq!(
            left.iter().map(|(_, n)| *n as u64).sum::<u64>(),
            counted,
            "the byte count is the retained entries' bytes"
        );
        assert_eq!(
            left.first().map(|(t, _)| *t),
            times.iter().copied().find(|t| *t >= trim)
        );
        // Documents stored only in their insert entry were copied out before it went.
        let found = e.find(&ns, Default::default()).unwrap();
        let ids: Vec<i32> = found
            .docs
            .iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
        assert!(found
            .docs
            .iter()
            .all(|d| d.get_str("pad").unwrap().len() == DOC_BYTES));
        // What was trimmed stays trimmed after a restart.
        let state = e
            .store
            .get(Space::Meta, keys::META_OPLOG_TRIM)
            .unwrap()
            .unwrap();
        let state = bson::Document::from_reader(&mut state.as_slice()).unwrap();
        assert_eq!(
            ClusterTime::from_u64(state.get_i64("trim").unwrap() as u64),
            trim
        );
        assert_eq!(state.get_i64("bytes").unwrap() as u64, counted);
    }

    /// A write that fails (or a transaction that conflicts at its commit) has taken a
    /// time from the clock that no entry has: the trim still stops below the newest
    /// entry that is committed, not below the clock's newest time.
    #[test]
    fn the_newest_committed_entry_stays_when_the_clock_ran_ahead_of_it() {
        let e = engine_trimmed_by_hand();
        let ns = Namespace::new("db", "c");
        let first = insert(&e, &ns, 0, 16);
        // Alone over the cap: everything else is trimmed before it.
        let newest = insert(&e, &ns, 1, 2 * CAP as usize);
        {
            let mut abandoned = e.begin();
            abandoned.log(OplogChange {
                op: "n",
                ns: String::new(),
                ui: None,
                o: doc! {"msg": "never committed"},
                o2: None,
            });
        }
        assert!(e.writer.lock().clock.last() > newest);
        while trim_oplog_round(&e).unwrap() {}
        let trim = e.oplog_trim_ts();
        assert!(trim > first, "the entries before the newest were trimmed");
        assert_eq!(
            retained(&e).iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![newest]
        );
        // The next commit comes after it, and is not trimmed either.
        let next = e.write_noop("after").unwrap().last_ts.unwrap();
        assert!(next > newest);
        assert!(e.oplog_trim_ts() <= newest);
    }

    #[test]
    fn nothing_is_trimmed_under_the_cap() {
        let e = engine_trimmed_by_hand();
        let ns = Namespace::new("db", "c");
        let first = insert(&e, &ns, 0, 16);
        let before = retained(&e);
        assert!(!trim_oplog_round(&e).unwrap());
        assert_eq!(e.oplog_trim_ts(), ClusterTime::ZERO);
        // The collection's create entry and the insert's.
        assert_eq!(before.len(), 2);
        assert_eq!(before[1].0, first);
        assert_eq!(retained(&e), before);
        assert_eq!(
            e.writer.lock().oplog_bytes,
            before.iter().map(|(_, n)| *n as u64).sum::<u64>()
        );
    }
}

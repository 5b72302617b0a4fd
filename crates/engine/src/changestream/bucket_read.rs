//! What a bucket of a parallel stream reads from storage: only the `oplog_by_ns`
//! index of the namespaces it may have events of, merged in time order, instead of the
//! whole oplog; and by document key, only the entries whose digest's key hash is its
//! own (the others are skipped on their digest, never read).
//!
//! Every entry that can make an event of a namespace is listed in `oplog_by_ns` under
//! that namespace (a write under its collection; a command under each collection it is
//! about, a transaction under each it writes: see `oplog::command_targets`). A bucket
//! by namespace reads the namespaces that hash to it, one by document key every
//! namespace `nsRegex` matches. Besides those, a bucket reads the index of every
//! `<db>.$cmd` (a dropDatabase is listed only there, its event goes by the database's
//! name) and `<db>.system.views` (a view's DDL is an event of the view's namespace),
//! and decides on their events one by one as before. An entry listed under several of
//! these namespaces is read once.
//!
//! The namespaces come from the index itself (one seek per namespace), so a collection
//! dropped since is still read up to its drop. With more than
//! [`MAX_BUCKET_NAMESPACES`] namespaces in the index, the bucket reads the whole
//! oplog instead (as many seeks per read would cost more than they save).

use super::bucket::Bucket;
use crate::core::keys;
use crate::core::time::ClusterTime;
use crate::Engine;
use tailstream_query::error::Result;
use tailstream_storage::Space;

/// The most namespaces the oplog's index may list for a bucket to read by them.
pub const MAX_BUCKET_NAMESPACES: usize = 256;

/// The namespaces bucket `b` reads (see the module documentation), or None when the
/// index lists more than [`MAX_BUCKET_NAMESPACES`].
pub(super) fn bucket_namespaces(engine: &Engine, b: &Bucket) -> Result<Option<Vec<String>>> {
    let mut out = Vec::new();
    let mut lower: Vec<u8> = Vec::new();
    for _ in 0..=MAX_BUCKET_NAMESPACES {
        let first = engine
            .store
            .scan(Space::OplogByNs, &lower, None, false)
            .next();
        let key = match first {
            None => return Ok(Some(out)),
            Some(item) => item.map_err(crate::core::storage_err)?.0,
        };
        // `ns`, a 0, then 8 bytes of time.
        let Some(ns_len) = key.len().checked_sub(9) else {
            return Ok(None);
        };
        let ns = String::from_utf8_lossy(&key[..ns_len]).into_owned();
        // Past every key of this namespace: `ns` then 1 sorts after `ns`, 0, any time.
        lower = key[..ns_len].to_vec();
        lower.push(1);
        let commands = ns.ends_with(".$cmd") || crate::catalog::views::is_system_views(&ns);
        if commands || b.reads_namespace(&ns) {
            out.push(ns);
        }
    }
    Ok(None)
}

/// The times and digests of the entries listed under `namespaces` from `from` up to
/// `to` (inclusive), in time order, each entry once; at most `limit` of each
/// namespace's, cut at the earliest point where a namespace had more (so nothing
/// before the last one returned is left out).
pub(super) fn merged_index(
    engine: &Engine,
    namespaces: &[String],
    from: ClusterTime,
    to: ClusterTime,
    limit: usize,
) -> Result<Vec<(ClusterTime, Vec<u8>)>> {
    assert!(limit > 0, "a read of at least one entry");
    let mut all = Vec::new();
    let mut cut: Option<ClusterTime> = None;
    for ns in namespaces {
        let lower = keys::oplog_ns_key(ns, from);
        let upper = keys::oplog_ns_key(ns, to.next());
        let mut n = 0;
        for item in engine
            .store
            .scan(Space::OplogByNs, &lower, Some(&upper), false)
        {
            let (k, digest) = item.map_err(crate::core::storage_err)?;
            let ts = keys::oplog_ns_key_time(&k);
            all.push((ts, digest.to_vec()));
            n += 1;
            if n == limit {
                cut = Some(cut.map_or(ts, |c| c.min(ts)));
                break;
            }
        }
    }
    if let Some(c) = cut {
        all.retain(|(ts, _)| *ts <= c);
    }
    all.sort_by_key(|(ts, _)| *ts);
    all.dedup_by_key(|(ts, _)| *ts);
    Ok(all)
}

//! The state machine's side: a replicated commit applied (snapshots: `snapshot.rs`).
//!
//! A commit's writes arrive as [`Ops`] (documents, index entries, oplog entries,
//! catalog and counters, as the primary's commit wrote them) and are applied in one
//! atomic batch with the applied marker, so after a crash the marker names exactly
//! the last commit whose writes are in the store. The marker need not be synced: the
//! log is, and what was applied after the last sync is applied again from it.
//!
//! The engine's memory then follows, as `Txn::commit` brings it along for a local
//! commit (under the writer lock, in the same order): the catalog when the commit
//! changed it, the writer's newest oplog time and clock, the oplog's size and trim
//! point, the recent oplog, a capped collection's totals (forgotten: they load again),
//! and the commit notice that wakes tailable cursors and change streams. A member
//! that applies commits thus serves reads and streams of them as the primary does.

use crate::core::bus::namespace_bit;
use crate::core::clock::ClusterClock;
use crate::core::time::ClusterTime;
use crate::core::{keys, storage_err};
use crate::oplog::recent::RecentEntry;
use crate::oplog::txn::Writer;
use crate::oplog::EntryHead;
use crate::Engine;
use std::collections::BTreeSet;
use tailstream_query::error::{Error, Result};
use tailstream_storage::{Op, Ops, Space};

/// The applied marker's key in `Meta`: the id of the last entry applied, as the
/// consensus layer encodes it (with the membership in force).
pub(super) const APPLIED_KEY: &[u8] = b"repl_applied";

/// What a commit's writes change in the engine's memory, read off them before they
/// are applied.
#[derive(Default)]
struct Touched {
    catalog: bool,
    oplog_state: bool,
    /// Collections whose documents or insertion order changed (by id).
    collections: BTreeSet<u32>,
    /// The oplog entries written, in time order: (time, entry).
    entries: Vec<(ClusterTime, Vec<u8>)>,
}

impl Touched {
    fn is_empty(&self) -> bool {
        !self.catalog && !self.oplog_state && self.collections.is_empty() && self.entries.is_empty()
    }

    fn of(ops: &Ops) -> Result<Touched> {
        let mut t = Touched::default();
        for op in ops.iter() {
            let (space, key) = match op {
                Op::Put { space, key, .. } | Op::Delete { space, key } => (space, key),
                Op::DeleteRange { space, from, .. } => (space, from),
            };
            match space {
                Space::ReplLog => {
                    return Err(Error::internal(
                        "a replicated commit writes into the replicated log's space",
                    ))
                }
                Space::Catalog => t.catalog = true,
                Space::Meta if key == keys::META_COUNTERS => t.catalog = true,
                Space::Meta if key == keys::META_OPLOG_TRIM => t.oplog_state = true,
                Space::Docs | Space::Natural => {
                    if let Some(id) = key.first_chunk::<4>() {
                        t.collections.insert(u32::from_be_bytes(*id));
                    }
                }
                Space::Oplog => {
                    if let Op::Put { key, value, .. } = op {
                        if key.len() != 8 || bson::RawDocument::from_bytes(value).is_err() {
                            return Err(Error::internal(
                                "a replicated commit's oplog entry is not a document",
                            ));
                        }
                        t.entries.push((keys::oplog_key_time(key), value.to_vec()));
                    }
                }
                _ => {}
            }
        }
        assert!(
            t.entries.windows(2).all(|w| w[0].0 < w[1].0),
            "a commit's oplog entries are in time order"
        );
        Ok(t)
    }
}

impl Engine {
    /// Applies one replicated commit's writes and moves the applied marker to
    /// `applied`, in one atomic batch, then brings the engine's memory along (see the
    /// module's doc). A write into the log's own space is refused: a commit never
    /// carries one, so such an entry is corrupt.
    pub fn repl_apply(&self, ops: &Ops, applied: &[u8]) -> Result<()> {
        let touched = Touched::of(ops)?;
        if touched.is_empty() {
            // A marker alone (a blank or membership entry): nothing in memory changes,
            // and the writer lock is not taken (a primary's commit may hold it, waiting
            // for its own entry behind this one).
            return self.repl_apply_own(ops, applied);
        }
        let mut w = self.writer.lock();
        // Natural keys may leave with this commit: before they do, tailable reads
        // stop trusting the eviction marks (`core::evicted`).
        for id in &touched.collections {
            self.evicted.forget(*id);
        }
        self.store_applied(ops, applied)?;
        self.follow(&mut w, touched)
    }

    /// Applies this member's own proposed commit: its writes and the marker into the
    /// store only. The proposing commit holds the writer lock while it waits for this
    /// and brings memory along itself once its proposal returns (`Txn::commit`).
    pub fn repl_apply_own(&self, ops: &Ops, applied: &[u8]) -> Result<()> {
        Touched::of(ops)?;
        self.store_applied(ops, applied)
    }

    /// Applies this member's own pipelined commit (see `Proposer`): its writes and the
    /// marker into the store, its pending writes dropped (after: pending.rs's ordering
    /// rule), and the engine's memory brought along as `Txn::commit` does for a local
    /// commit. Called in log order, without the writer lock (a commit computed
    /// meanwhile may hold it). Returns the commit's durability sequence number.
    pub fn repl_apply_pipelined(
        &self,
        ops: &Ops,
        applied: &[u8],
        finish: crate::oplog::pipeline::Finish,
    ) -> Result<u64> {
        self.store_applied(ops, applied)?;
        self.store.pending_remove(finish.pending_id);
        self.pipeline.applied(finish.pending_id);
        if !finish.recent.is_empty() {
            self.recent.push(finish.recent);
        }
        Ok(self.announce(finish.last_ts, finish.ns_mask))
    }

    /// Forgets pipelined commits that will never be applied (their term ended before
    /// the set committed them): their pending writes go, and the writer's newest time
    /// and oplog size are read again from the store, as after an open. Called before
    /// the first entry of a newer term is applied.
    pub fn repl_pipeline_reset(&self) -> Result<()> {
        let mut w = self.writer.lock();
        self.store.pending_clear();
        self.pipeline.forgotten(w.pending_id);
        w.committed_ts = Writer::load_newest_time(&self.store)?;
        // Pipelined commits never move the trim point: only the size is theirs.
        let (_, oplog_bytes) = Writer::load_oplog_state(&self.store)?;
        (w.oplog_bytes, w.state_bytes) = (oplog_bytes, oplog_bytes);
        Ok(())
    }

    fn store_applied(&self, ops: &Ops, applied: &[u8]) -> Result<()> {
        let mut batch = self.store.batch();
        batch.apply_ops(ops);
        batch.put(Space::Meta, APPLIED_KEY, applied);
        self.store.commit(batch).map_err(storage_err)
    }

    /// The in-memory side of [`Engine::repl_apply`], under the writer lock.
    fn follow(&self, w: &mut Writer, touched: Touched) -> Result<()> {
        if touched.catalog {
            self.reload_catalog()?;
        }
        for id in &touched.collections {
            self.capped_forget(*id);
        }
        if touched.oplog_state {
            let (trim_ts, bytes) = Writer::load_oplog_state(&self.store)?;
            (w.oplog_bytes, w.state_bytes) = (bytes, bytes);
            if trim_ts > w.trim_ts {
                w.trim_ts = trim_ts;
                self.trim_ts
                    .store(trim_ts, std::sync::atomic::Ordering::Release);
                self.store
                    .retire_through(Space::Oplog, &keys::oplog_key(trim_ts.prev()));
            }
        }
        let last_ts = touched.entries.last().map(|(ts, _)| *ts);
        let mut ns_mask = 0;
        let mut recent = Vec::new();
        for (ts, bytes) in &touched.entries {
            assert!(
                *ts > w.committed_ts,
                "a replicated entry at {ts} not after {}",
                w.committed_ts
            );
            let raw = bson::RawDocument::from_bytes(bytes).expect("checked by Touched::of");
            let head = EntryHead::of(raw);
            let namespaces = head.namespaces();
            for ns in namespaces.iter().filter(|n| !n.is_empty()) {
                ns_mask |= namespace_bit(ns);
            }
            if !touched.oplog_state {
                w.oplog_bytes += bytes.len() as u64;
            }
            if self.recent.enabled() {
                let watched = self.recent.watched();
                recent.push(RecentEntry::new(
                    *ts,
                    raw,
                    head.digest(),
                    namespaces,
                    watched,
                ));
            }
        }
        if let Some(ts) = last_ts {
            w.committed_ts = ts;
            if w.clock.last() < ts {
                w.clock = ClusterClock::after(ts);
            }
        }
        if !recent.is_empty() {
            self.recent.push(recent);
        }
        self.announce(last_ts, ns_mask);
        Ok(())
    }

    /// The applied marker: what the last [`Engine::repl_apply`] (or installed
    /// snapshot) set; none on a member that applied nothing yet.
    pub fn repl_applied(&self) -> Result<Option<Vec<u8>>> {
        self.store
            .get(Space::Meta, APPLIED_KEY)
            .map_err(storage_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::TestEngine;
    use crate::oplog::pipeline::{Finish, Submitted};
    use crate::repl::snapshot::snapshot_spaces;
    use crate::repl::snapshot::tests::send_snapshot;
    use tailstream_storage::Op;

    /// A snapshot's view is one moment: its marker and its data stay as they were
    /// while later commits apply (openraft builds beside the applies).
    #[test]
    fn a_snapshot_view_keeps_its_moment() {
        let t = TestEngine::open();
        let e = &t.engine;
        let docs = |ops: &Ops| -> Vec<Vec<u8>> {
            ops.iter()
                .filter_map(|op| match op {
                    Op::Put {
                        space: Space::Docs,
                        key,
                        ..
                    } => Some(key.to_vec()),
                    _ => None,
                })
                .collect()
        };
        let mut first = Ops::new();
        first.put(Space::Docs, b"\x00\x00\x00\x63a", b"1");
        e.repl_apply(&first, b"marker-1").unwrap();
        let view = e.repl_snapshot_view();
        let mut second = Ops::new();
        second.put(Space::Docs, b"\x00\x00\x00\x63b", b"2");
        e.repl_apply(&second, b"marker-2").unwrap();
        assert_eq!(view.applied().unwrap().as_deref(), Some(&b"marker-1"[..]));
        assert_eq!(
            docs(&view.export().unwrap()),
            vec![b"\x00\x00\x00\x63a".to_vec()]
        );
        assert_eq!(e.repl_applied().unwrap().as_deref(), Some(&b"marker-2"[..]));
        assert_eq!(docs(&e.repl_snapshot_export().unwrap()).len(), 2);
    }

    #[test]
    fn a_commit_applies_with_its_marker_and_a_snapshot_carries_both() {
        let leader = TestEngine::open();
        let mut ops = Ops::new();
        ops.put(Space::Docs, b"\x00\x00\x00\x63k", b"doc");
        let entry = bson::rawdoc! {"op": "n", "ns": "", "o": {"msg": "m"}};
        ops.put(
            Space::Oplog,
            b"\x00\x00\x00\x01\x00\x00\x00\x01",
            entry.as_bytes(),
        );
        leader.engine.repl_apply(&ops, b"applied 1").unwrap();
        assert_eq!(
            leader.engine.repl_applied().unwrap(),
            Some(b"applied 1".to_vec())
        );
        let snapshot = leader.engine.repl_snapshot_export().unwrap();

        let follower = TestEngine::open();
        follower
            .engine
            .repl_log_append(&[(1, b"log".to_vec())])
            .unwrap();
        send_snapshot(&leader.engine, &follower.engine, 1 << 20).unwrap();
        let e = &follower.engine;
        assert_eq!(e.repl_applied().unwrap(), Some(b"applied 1".to_vec()));
        assert_eq!(
            e.store.get(Space::Docs, b"\x00\x00\x00\x63k").unwrap(),
            Some(b"doc".to_vec())
        );
        // The log is not the state machine's: it stays.
        assert_eq!(e.repl_log_last().unwrap(), Some((1, b"log".to_vec())));
        // Both hold the same state machine now.
        assert_eq!(e.repl_snapshot_export().unwrap(), snapshot);
    }

    use crate::catalog::namespace::Namespace;
    use crate::write::{DeleteOp, UpdateOp};
    use bson::doc;
    use std::sync::{Arc, Mutex};

    /// Every key of every space but `repl_log`, without the member's own `meta` keys
    /// (its replica set id, its applied marker).
    fn state(e: &Engine) -> Vec<(Space, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for space in snapshot_spaces() {
            for kv in e.store.scan(space, &[], None, false) {
                let (k, v) = kv.unwrap();
                let own = space == Space::Meta
                    && (&*k == keys::META_REPLICA_SET_ID || &*k == APPLIED_KEY);
                if !own {
                    out.push((space, k.to_vec(), v.to_vec()));
                }
            }
        }
        out
    }

    /// Keeps every commit's writes of `primary` as a leader would ship them.
    fn shipping(primary: &Engine) -> Arc<Mutex<Vec<Ops>>> {
        let shipped: Arc<Mutex<Vec<Ops>>> = Arc::default();
        let sink = shipped.clone();
        primary.set_commit_sink(Some(Arc::new(move |ops: &Ops| {
            sink.lock().unwrap().push(ops.clone())
        })));
        shipped
    }

    /// A primary's commits, shipped as their writes and applied on a second engine:
    /// the same stored bytes in every space, and the second engine's memory follows
    /// (catalog, newest oplog time, the commit notice streams wait on).
    #[test]
    fn a_followers_store_and_memory_follow_the_primarys_commits() {
        let primary = TestEngine::open();
        let follower = TestEngine::open();
        let shipped = shipping(&primary.engine);
        let p = &primary.engine;
        let ns = Namespace::new("db", "c");
        let docs = (0..20).map(|i| doc! {"_id": i, "n": i, "s": "x"}).collect();
        p.insert_documents(&ns, docs, true).unwrap();
        p.create_indexes(&ns, &[doc! {"key": {"n": 1}, "name": "n_1"}])
            .unwrap();
        let update = UpdateOp {
            q: doc! {"n": {"$lt": 5}},
            u: doc! {"$inc": {"n": 100}}.into(),
            multi: true,
            ..Default::default()
        };
        p.update(&ns, vec![update], true).unwrap();
        let delete = DeleteOp {
            q: doc! {"n": {"$gte": 15}},
            ..Default::default()
        };
        p.delete(&ns, vec![delete], true).unwrap();
        let capped = Namespace::new("db", "bus");
        p.create_collection(&capped, doc! {"capped": true, "size": 4096, "max": 3})
            .unwrap();
        for i in 0..5 {
            p.insert_documents(&capped, vec![doc! {"_id": i}], true)
                .unwrap();
        }
        p.rename_collection(&ns, &Namespace::new("db", "renamed"), false)
            .unwrap();
        p.create_collection(&Namespace::new("db", "gone"), doc! {})
            .unwrap();
        p.drop_collection(&Namespace::new("db", "gone")).unwrap();
        p.set_commit_sink(None);

        let f = &follower.engine;
        let before = f.bus.last().seq;
        let commits = std::mem::take(&mut *shipped.lock().unwrap());
        assert!(commits.len() >= 10, "{} commits shipped", commits.len());
        for (i, ops) in commits.iter().enumerate() {
            f.repl_apply(ops, format!("applied {i}").as_bytes())
                .unwrap();
        }
        assert_eq!(state(f), state(p));
        let names = |e: &Engine| e.catalog().colls.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(f), names(p));
        assert_eq!(
            names(f),
            vec!["db.bus".to_string(), "db.renamed".to_string()]
        );
        assert_eq!(f.writer.lock().committed_ts, p.writer.lock().committed_ts);
        assert_eq!(f.writer.lock().oplog_bytes, p.writer.lock().oplog_bytes);
        let notice = f.bus.last();
        assert_eq!(notice.last_ts, p.writer.lock().committed_ts);
        assert!(notice.seq > before);
        // The follower's own next write comes after everything it applied.
        let own = f.write_noop("after the primary's").unwrap();
        assert!(own.last_ts.unwrap() > p.writer.lock().committed_ts);
    }

    /// A member whose proposal failed (it lost the lead) took a time from its clock that
    /// no entry has; the next leader's entries, applied there, may come before that
    /// time, and a change stream opened meanwhile still gets them (its recent oplog
    /// starts after the newest committed entry, not after the clock's newest time: it
    /// asserted, and the member's state machine died, in the fault harness's runs).
    #[test]
    fn entries_before_a_failed_proposals_time_are_applied_and_streamed() {
        let primary = TestEngine::open();
        let follower = TestEngine::open();
        let shipped = shipping(&primary.engine);
        let p = &primary.engine;
        let ns = Namespace::new("db", "c");
        p.insert_documents(&ns, vec![doc! {"_id": 1}], true)
            .unwrap();
        let f = &follower.engine;
        // The follower, as a leader that lost the lead, fails a commit after the
        // primary's: its clock passes the primary's entry.
        let entry_ts = p.writer.lock().committed_ts;
        f.set_proposer(Some(Arc::new(LostTheLead)));
        for _ in 0..10 {
            assert!(f.write_noop("never committed").is_err());
        }
        f.set_proposer(None);
        assert!(f.writer.lock().clock.last() >= entry_ts);
        f.enable_recent_oplog();
        for ops in std::mem::take(&mut *shipped.lock().unwrap()) {
            f.repl_apply(&ops, b"applied").unwrap();
        }
        assert_eq!(f.writer.lock().committed_ts, entry_ts);
        assert_eq!(f.bus.last().last_ts, entry_ts);
    }

    /// A proposer that fails as a member that lost the lead while its entry waited.
    struct LostTheLead;

    fn not_primary() -> Error {
        Error::new(
            tailstream_query::error::codes::NOT_WRITABLE_PRIMARY,
            "not primary",
        )
    }

    impl crate::oplog::pipeline::Proposer for LostTheLead {
        fn writable(&self) -> bool {
            true
        }
        fn propose(&self, _: Ops) -> Result<()> {
            Err(not_primary())
        }
        fn submit(&self, _: Ops, _: Finish) -> Result<Box<dyn Submitted>> {
            Err(not_primary())
        }
        fn drain(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A member that may not write: it proposes nothing it could not, and stores
    /// nothing of a commit the set did not take.
    #[derive(Default)]
    struct NeverWritable {
        proposals: std::sync::atomic::AtomicUsize,
    }

    impl crate::oplog::pipeline::Proposer for NeverWritable {
        fn writable(&self) -> bool {
            false
        }
        fn propose(&self, _: Ops) -> Result<()> {
            self.proposals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(not_primary())
        }
        fn submit(&self, ops: Ops, _: Finish) -> Result<Box<dyn Submitted>> {
            self.propose(ops).map(|_| unreachable!("refused"))
        }
        fn drain(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A set that commits later: pipelined commits queue up, answered at once, until
    /// the test applies them as the state machine would.
    #[derive(Default)]
    struct CommitsLater {
        queue: Mutex<Vec<(Ops, Finish)>>,
    }

    struct Answered;

    impl Submitted for Answered {
        fn wait(self: Box<Self>) -> Result<Option<u64>> {
            Ok(Some(0))
        }
    }

    impl crate::oplog::pipeline::Proposer for CommitsLater {
        fn writable(&self) -> bool {
            true
        }
        fn propose(&self, _: Ops) -> Result<()> {
            panic!("only pipelined commits in this test")
        }
        fn submit(&self, ops: Ops, finish: Finish) -> Result<Box<dyn Submitted>> {
            self.queue.lock().unwrap().push((ops, finish));
            Ok(Box::new(Answered))
        }
        fn drain(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A commit computed while the ones before it are still pending reads their writes
    /// (a duplicate key, an update of a pending document); no other reader sees them
    /// until the state machine stores them; then the store holds exactly what
    /// committing each at once would have.
    #[test]
    fn a_pipelined_commit_reads_the_pending_ones_before_it() {
        let run = |pipelined: bool| {
            let t = TestEngine::open();
            let e = &t.engine;
            let ns = Namespace::new("db", "c");
            e.insert_documents(&ns, vec![doc! {"_id": 0}], true)
                .unwrap();
            let before = state(e);
            let later = Arc::new(CommitsLater::default());
            if pipelined {
                e.set_proposer(Some(later.clone()));
            }
            e.insert_documents(&ns, vec![doc! {"_id": 1, "v": 1}], true)
                .unwrap();
            if pipelined {
                assert_eq!(state(e), before, "a reader sees the store alone");
            }
            let dup = e
                .insert_documents(&ns, vec![doc! {"_id": 1}], true)
                .unwrap();
            assert_eq!(dup.errors.len(), 1, "the pending insert is a duplicate key");
            assert_eq!(dup.errors[0].error.code, 11000);
            let update = UpdateOp {
                q: doc! {"_id": 1},
                u: doc! {"$inc": {"v": 1}}.into(),
                ..Default::default()
            };
            let out = e.update(&ns, vec![update], true).unwrap();
            assert_eq!((out.n, out.n_modified), (1, 1));
            let delete = DeleteOp {
                q: doc! {"_id": 0},
                ..Default::default()
            };
            assert_eq!(e.delete(&ns, vec![delete], true).unwrap().n, 1);
            let queued = std::mem::take(&mut *later.queue.lock().unwrap());
            assert_eq!(queued.len(), if pipelined { 3 } else { 0 });
            let mut last = None;
            for (ops, finish) in queued {
                let ts = finish.last_ts;
                e.repl_apply_pipelined(&ops, b"applied", finish).unwrap();
                assert_eq!(e.bus.last().last_ts, ts.unwrap(), "its notice went out");
                last = ts;
            }
            if pipelined {
                assert_eq!(e.writer.lock().committed_ts, last.unwrap());
            }
            e.set_proposer(None);
            state(e)
                .into_iter()
                .filter(|(space, _, _)| *space == Space::Docs || *space == Space::Index)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(true), run(false));
    }

    /// A member that may not write neither writes, nor trims its oplog, nor expires
    /// documents: those are commits of the member that leads.
    #[test]
    fn a_member_that_may_not_write_neither_writes_nor_trims_nor_expires() {
        let t = TestEngine::trimmed_by_hand(64 * 1024);
        let e = &t.engine;
        let ns = Namespace::new("db", "c");
        let past = bson::DateTime::from_millis(0);
        let docs = (0..400)
            .map(|i| doc! {"_id": i, "at": past, "pad": "x".repeat(400)})
            .collect();
        e.insert_documents(&ns, docs, true).unwrap();
        e.create_indexes(
            &ns,
            &[doc! {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 0}],
        )
        .unwrap();
        let before = state(e);
        let bytes = e.writer.lock().oplog_bytes;
        assert!(bytes > 64 * 1024, "the oplog is over its cap");

        let proposer = Arc::new(NeverWritable::default());
        e.set_proposer(Some(proposer.clone()));
        let out = e.insert_documents(&ns, vec![doc! {"_id": "new"}], true);
        let code = match out {
            Err(err) => err.code,
            Ok(o) => o.errors.first().expect("the insert fails").error.code,
        };
        assert_eq!(code, tailstream_query::error::codes::NOT_WRITABLE_PRIMARY);
        assert!(!crate::oplog::trim::trim_oplog_round(e).unwrap());
        assert_eq!(e.ttl_pass(), 0);
        assert_eq!(e.writer.lock().oplog_bytes, bytes);
        assert_eq!(state(e), before);
        // Only the insert was proposed (and refused): no trim, no TTL delete.
        let proposals = proposer
            .proposals
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(proposals, 1);

        // The same member, free to write again, trims and expires.
        e.set_proposer(None);
        assert!(e.ttl_pass() > 0);
        while crate::oplog::trim::trim_oplog_round(e).unwrap() {}
        assert!(e.writer.lock().oplog_bytes < bytes);
    }

    /// A new set's snapshot with an empty oplog (its first member had written nothing)
    /// installs on an empty member; a member whose own oplog is newer refuses it and
    /// keeps what it has.
    #[test]
    fn a_snapshot_older_than_the_members_own_oplog_is_refused() {
        let empty = TestEngine::open();
        let fresh = TestEngine::open();
        send_snapshot(&empty.engine, &fresh.engine, 1 << 20).unwrap();
        assert!(fresh.engine.write_noop("after the snapshot").is_ok());

        let member = TestEngine::open();
        let m = &member.engine;
        m.insert_documents(&Namespace::new("db", "mine"), vec![doc! {"_id": 1}], true)
            .unwrap();
        let before = state(m);
        let refused = send_snapshot(&empty.engine, m, 1 << 20).unwrap_err();
        assert!(
            refused.message.contains("empty --dbpath"),
            "{}",
            refused.message
        );
        assert_eq!(state(m), before);
        assert!(m.catalog().colls.contains_key("db.mine"));
    }

    #[test]
    fn a_corrupt_commit_is_refused_whole() {
        let t = TestEngine::open();
        let mut ops = Ops::new();
        ops.put(Space::ReplLog, b"e", b"x");
        assert!(t.engine.repl_apply(&ops, b"m").is_err());
        assert_eq!(t.engine.repl_applied().unwrap(), None);
        // Nor one whose oplog entry is not a document: nothing of it is applied.
        let mut ops = Ops::new();
        ops.put(Space::Docs, b"\x00\x00\x00\x63k", b"doc");
        ops.put(Space::Oplog, &[0, 0, 0, 1, 0, 0, 0, 1], b"not bson");
        assert!(t.engine.repl_apply(&ops, b"m").is_err());
        assert_eq!(t.engine.repl_applied().unwrap(), None);
        assert_eq!(
            t.engine
                .store
                .get(Space::Docs, b"\x00\x00\x00\x63k")
                .unwrap(),
            None
        );
    }
}

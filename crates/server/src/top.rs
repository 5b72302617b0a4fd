//! Time and count of the commands run on each collection, as mongod's `Top` keeps them
//! for the `top` command: in total, under a read or a write lock, and by kind (queries,
//! getmore, insert, update, remove, commands). Every command on a collection passes
//! here once it finished, so recording is a read-locked map lookup by `&str` (no
//! allocation) and four relaxed atomic adds; a collection's counters are created on its
//! first command. In memory only, as mongod's (they restart with the server).

use ahash::AHashMap;
use bson::{doc, Document};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The kinds of operation mongod's `Top` tells apart (its `LogicalOp` groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Queries,
    GetMore,
    Insert,
    Update,
    Remove,
    Commands,
}

impl Kind {
    /// The kind of command `name` (mongod counts find as a query, getMore, the three
    /// write commands by their op, and every other command as a command).
    pub fn of(name: &str) -> Kind {
        match name {
            "find" => Kind::Queries,
            "getMore" => Kind::GetMore,
            "insert" => Kind::Insert,
            "update" => Kind::Update,
            "delete" => Kind::Remove,
            _ => Kind::Commands,
        }
    }

    const ALL: [Kind; 6] = [
        Kind::Queries,
        Kind::GetMore,
        Kind::Insert,
        Kind::Update,
        Kind::Remove,
        Kind::Commands,
    ];

    /// Its field in the `top` reply.
    fn field(self) -> &'static str {
        match self {
            Kind::Queries => "queries",
            Kind::GetMore => "getmore",
            Kind::Insert => "insert",
            Kind::Update => "update",
            Kind::Remove => "remove",
            Kind::Commands => "commands",
        }
    }
}

/// Time (microseconds) and count of one group of operations.
#[derive(Default)]
struct Counter {
    micros: AtomicU64,
    count: AtomicU64,
}

impl Counter {
    fn add(&self, micros: u64) {
        self.micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn report(&self) -> Document {
        doc! {
            "time": self.micros.load(Ordering::Relaxed) as i64,
            "count": self.count.load(Ordering::Relaxed) as i64,
        }
    }
}

/// One collection's counters. `total` is the sum of the lock groups, so it is not
/// stored: one add fewer on every command.
#[derive(Default)]
struct Usage {
    read_lock: Counter,
    write_lock: Counter,
    by_kind: [Counter; Kind::ALL.len()],
}

impl Usage {
    fn add(&self, kind: Kind, writes: bool, micros: u64) {
        let lock = if writes {
            &self.write_lock
        } else {
            &self.read_lock
        };
        lock.add(micros);
        self.by_kind[kind as usize].add(micros);
    }

    fn report(&self) -> Document {
        let (r, w) = (self.read_lock.report(), self.write_lock.report());
        let sum = |f: &str| r.get_i64(f).unwrap_or(0) + w.get_i64(f).unwrap_or(0);
        let mut out = doc! {
            "total": {"time": sum("time"), "count": sum("count")},
            "readLock": r,
            "writeLock": w,
        };
        for kind in Kind::ALL {
            out.insert(kind.field(), self.by_kind[kind as usize].report());
        }
        out
    }
}

/// Every collection's counters, by database then collection (so a lookup borrows the
/// command's names instead of building "db.coll").
#[derive(Default)]
pub struct Top {
    by_db: RwLock<AHashMap<String, AHashMap<String, Arc<Usage>>>>,
}

impl Top {
    /// Counts one command on `db.coll` that took `elapsed`.
    pub fn record(&self, db: &str, coll: &str, kind: Kind, writes: bool, elapsed: Duration) {
        let micros = elapsed.as_micros().min(u64::MAX as u128) as u64;
        if let Some(usage) = self.by_db.read().get(db).and_then(|c| c.get(coll)) {
            usage.add(kind, writes, micros);
            return;
        }
        self.usage(db, coll).add(kind, writes, micros);
    }

    fn usage(&self, db: &str, coll: &str) -> Arc<Usage> {
        self.by_db
            .write()
            .entry(db.to_string())
            .or_default()
            .entry(coll.to_string())
            .or_default()
            .clone()
    }

    /// Forgets a dropped collection (None: the whole database), as mongod does.
    pub fn dropped(&self, db: &str, coll: Option<&str>) {
        let mut by_db = self.by_db.write();
        match coll {
            None => {
                by_db.remove(db);
            }
            Some(c) => {
                if let Some(colls) = by_db.get_mut(db) {
                    colls.remove(c);
                }
            }
        }
    }

    /// The `top` command's `totals`.
    pub fn report(&self) -> Document {
        let mut rows: Vec<(String, Document)> = Vec::new();
        for (db, colls) in self.by_db.read().iter() {
            for (coll, usage) in colls {
                rows.push((format!("{db}.{coll}"), usage.report()));
            }
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let mut totals = doc! {"note": "all times in microseconds"};
        for (ns, usage) in rows {
            totals.insert(ns, usage);
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_lock_and_kind() {
        let top = Top::default();
        top.record("d", "c", Kind::Insert, true, Duration::from_micros(5));
        top.record("d", "c", Kind::Queries, false, Duration::from_micros(7));
        top.record("d", "c", Kind::Queries, false, Duration::from_micros(1));
        top.record("e", "x", Kind::Commands, false, Duration::from_micros(2));
        let totals = top.report();
        assert_eq!(totals.get_str("note").unwrap(), "all times in microseconds");
        let c = totals.get_document("d.c").unwrap();
        assert_eq!(
            c.get_document("total").unwrap(),
            &doc! {"time": 13i64, "count": 3i64}
        );
        assert_eq!(
            c.get_document("readLock").unwrap(),
            &doc! {"time": 8i64, "count": 2i64}
        );
        assert_eq!(
            c.get_document("writeLock").unwrap(),
            &doc! {"time": 5i64, "count": 1i64}
        );
        assert_eq!(
            c.get_document("queries").unwrap(),
            &doc! {"time": 8i64, "count": 2i64}
        );
        assert_eq!(
            c.get_document("insert").unwrap(),
            &doc! {"time": 5i64, "count": 1i64}
        );
        assert_eq!(
            c.get_document("remove").unwrap(),
            &doc! {"time": 0i64, "count": 0i64}
        );
        top.dropped("d", Some("c"));
        assert!(!top.report().contains_key("d.c"));
        top.dropped("e", None);
        assert_eq!(top.report().len(), 1);
    }

    /// What recording costs (run with --ignored; prints, asserts nothing on time).
    #[test]
    #[ignore]
    fn record_cost() {
        let top = Top::default();
        let n = 10_000_000u32;
        let started = std::time::Instant::now();
        for i in 0..n {
            top.record(
                "db",
                "coll",
                Kind::Queries,
                i % 2 == 0,
                Duration::from_micros(3),
            );
        }
        let per = started.elapsed() / n;
        println!("Top::record: {per:?} per command");
        assert_eq!(
            top.report()
                .get_document("db.coll")
                .unwrap()
                .get_document("total")
                .unwrap()
                .get_i64("count")
                .unwrap(),
            n as i64
        );
    }
}

//! The write path of a three-member set (issue 27): the engine's own writes on the
//! leader (inserts, an index, updates, deletes) are proposed, committed by the set and
//! only then stored, on every member alike; a member that does not lead refuses writes
//! with 10107; after the leader stops, the new leader takes writes and no member lost
//! or diverged from another.

mod common;

use bson::doc;
use common::{all_applied, leader_of, stop, three, Member, WAIT};
use std::sync::Arc;
use std::time::Duration;
use tailstream_engine::namespace::Namespace;
use tailstream_engine::query::error::codes;
use tailstream_engine::repl::Space;
use tailstream_engine::write::{DeleteOp, UpdateOp};
use tailstream_engine::Engine;

fn ns() -> Namespace {
    Namespace::new("db", "c")
}

/// Runs an engine write off the runtime's workers (it blocks until the set commits).
async fn blocking<T: Send + 'static>(
    engine: &Arc<Engine>,
    f: impl FnOnce(&Engine) -> T + Send + 'static,
) -> T {
    let e = engine.clone();
    tokio::task::spawn_blocking(move || f(&e)).await.unwrap()
}

/// Inserts `ids` through whichever member may write, retried while the lead moves.
async fn insert(members: &[Member], ids: std::ops::Range<i32>, not: Option<u64>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leader = leader_of(members, not).await;
        let m = members
            .iter()
            .find(|m| m.id == leader)
            .expect("a member leads");
        let docs: Vec<_> = ids.clone().map(|i| doc! {"_id": i, "n": i}).collect();
        let outcome = blocking(&m.engine, move |e| e.insert_documents(&ns(), docs, true)).await;
        match outcome {
            Ok(out) if out.errors.is_empty() => return,
            // Not writable yet (a new leader drains first) or the lead moved.
            _ if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => panic!("no member took the insert: {other:?}"),
        }
    }
}

fn count(m: &Member, query: bson::Document) -> u64 {
    m.engine.count(&ns(), &query, 0, 0, None, None).unwrap()
}

/// Every space but the member's own `meta` keys and the log: the state machine.
fn state(m: &Member) -> Vec<(Space, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for space in Space::ALL.into_iter().filter(|s| *s != Space::ReplLog) {
        for kv in m.engine.store.scan(space, &[], None, false) {
            let (k, v) = kv.unwrap();
            if space == Space::Meta && (&*k == b"replica_set_id" || &*k == b"repl_applied") {
                continue;
            }
            out.push((space, k.to_vec(), v.to_vec()));
        }
    }
    out
}

async fn settle(members: &[Member]) {
    let leader = leader_of(members, None).await;
    let m = members.iter().find(|m| m.id == leader).unwrap();
    let last = m.raft.metrics().borrow().last_log_index.unwrap_or(0);
    all_applied(members, last).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leaders_writes_reach_every_member_only_through_the_set() {
    let mut members = three(true).await;
    insert(&members, 0..10, None).await;
    let leader = leader_of(&members, None).await;
    let l = members.iter().position(|m| m.id == leader).unwrap();
    let e = members[l].engine.clone();
    blocking(&e, |e| {
        e.create_indexes(&ns(), &[doc! {"key": {"n": 1}, "name": "n_1"}])
            .unwrap();
        let update = UpdateOp {
            q: doc! {"n": {"$lt": 3}},
            u: doc! {"$set": {"low": true}}.into(),
            multi: true,
            ..Default::default()
        };
        e.update(&ns(), vec![update], true).unwrap();
        let delete = DeleteOp {
            q: doc! {"n": 9},
            ..Default::default()
        };
        e.delete(&ns(), vec![delete], true).unwrap();
    })
    .await;
    settle(&members).await;
    for m in &members {
        assert_eq!(count(m, doc! {}), 9, "member {}", m.id);
        assert_eq!(count(m, doc! {"low": true}), 3, "member {}", m.id);
        assert!(m.engine.catalog().colls.contains_key("db.c"));
    }
    assert_eq!(state(&members[0]), state(&members[1]));
    assert_eq!(state(&members[0]), state(&members[2]));

    // A member that does not lead refuses the write before storing anything.
    let follower = members.iter().find(|m| m.id != leader).unwrap();
    let refused = blocking(&follower.engine, |e| {
        e.insert_documents(&ns(), vec![doc! {"_id": 100}], true)
    })
    .await;
    let code = match refused {
        Err(e) => e.code,
        Ok(out) => out.errors.first().expect("the insert fails").error.code,
    };
    assert_eq!(code, codes::NOT_WRITABLE_PRIMARY);
    assert_eq!(count(follower, doc! {"_id": 100}), 0);

    // The leader stops; the new one takes writes once it has applied everything.
    let gone = members.remove(l);
    stop(gone).await;
    insert(&members, 10..20, Some(leader)).await;
    settle(&members).await;
    for m in &members {
        assert_eq!(count(m, doc! {}), 19, "member {}", m.id);
    }
    assert_eq!(state(&members[0]), state(&members[1]));
    for m in members {
        stop(m).await;
    }
}

"""Multi-document transactions (startTransaction / commitTransaction / abortTransaction)."""

import threading
import time

import bson
import pytest
from pymongo import ReturnDocument
from pymongo.errors import OperationFailure, PyMongoError

from conftest import next_event


def test_commit_makes_every_write_visible_at_once(client, db):
    coll = db.t
    coll.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 2}, {"_id": 3, "n": 3}])
    with client.start_session() as s:
        with s.start_transaction():
            coll.insert_one({"_id": 4, "n": 4}, session=s)
            coll.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=s)
            coll.delete_one({"_id": 2}, session=s)
            # Inside: its own writes; outside: nothing yet.
            assert sorted(d["_id"] for d in coll.find({}, session=s)) == [1, 3, 4]
            assert coll.find_one({"_id": 1}, session=s)["n"] == 11
            assert sorted(d["_id"] for d in coll.find()) == [1, 2, 3]
            assert coll.find_one({"_id": 1})["n"] == 1
    assert sorted((d["_id"], d["n"]) for d in coll.find()) == [(1, 11), (3, 3), (4, 4)]


def test_abort_discards_every_write(client, db):
    coll = db.t
    coll.insert_one({"_id": 1})
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": 2}, session=s)
        coll.delete_one({"_id": 1}, session=s)
        s.abort_transaction()
    assert [d["_id"] for d in coll.find()] == [1]


def test_reads_see_the_snapshot_taken_at_the_start(client, db):
    coll = db.t
    coll.insert_one({"_id": 1})
    with client.start_session() as s:
        with s.start_transaction():
            assert [d["_id"] for d in coll.find({}, session=s)] == [1]
            coll.insert_one({"_id": 2})  # committed outside, after the snapshot
            assert [d["_id"] for d in coll.find({}, session=s)] == [1]
            assert coll.count_documents({}, session=s) == 1
            assert coll.distinct("_id", session=s) == [1]


def test_two_transactions_writing_one_document_conflict(client, db):
    coll = db.t
    with client.start_session() as s0, client.start_session() as s1:
        s0.start_transaction()
        coll.insert_one({"_id": 1, "by": 0}, session=s0)
        s1.start_transaction()
        with pytest.raises(OperationFailure) as exc:
            coll.insert_one({"_id": 1, "by": 1}, session=s1)
        assert exc.value.code == 112
        assert exc.value.has_error_label("TransientTransactionError")
        s0.commit_transaction()
        # The failed write ended s1's transaction.
        with pytest.raises(OperationFailure) as exc:
            s1.commit_transaction()
        assert exc.value.code == 251
    assert list(coll.find()) == [{"_id": 1, "by": 0}]


def test_a_document_changed_after_the_snapshot_conflicts(client, db):
    coll = db.t
    coll.insert_one({"_id": 1, "n": 0})
    with client.start_session() as s:
        s.start_transaction()
        coll.find_one({"_id": 1}, session=s)
        coll.update_one({"_id": 1}, {"$set": {"n": 1}})
        with pytest.raises(OperationFailure) as exc:
            coll.update_one({"_id": 1}, {"$set": {"n": 2}}, session=s)
        assert exc.value.code == 112
        s.abort_transaction()
    assert coll.find_one({"_id": 1})["n"] == 1


def test_a_write_error_aborts_the_transaction(client, db):
    coll = db.t
    coll.insert_one({"_id": 1})
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": 2}, session=s)
        with pytest.raises(OperationFailure) as exc:
            coll.insert_one({"_id": 1}, session=s)
        assert "E11000" in str(exc.value)
        with pytest.raises(OperationFailure) as exc:
            coll.insert_one({"_id": 3}, session=s)
        assert exc.value.code == 251
        assert exc.value.has_error_label("TransientTransactionError")
        s.abort_transaction()
    assert [d["_id"] for d in coll.find()] == [1]


def test_find_and_modify_upsert_and_aggregate_in_a_transaction(client, db):
    coll = db.t
    coll.insert_one({"_id": 1, "n": 1})
    with client.start_session() as s:
        with s.start_transaction():
            doc = coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER, session=s)
            assert doc == {"_id": 1, "n": 2}
            coll.update_one({"_id": 5}, {"$set": {"n": 5}}, upsert=True, session=s)
            total = list(coll.aggregate([{"$group": {"_id": None, "sum": {"$sum": "$n"}}}], session=s))
            assert total[0]["sum"] == 7
    assert sorted((d["_id"], d["n"]) for d in coll.find()) == [(1, 2), (5, 5)]


def test_commit_of_a_new_collection_creates_it(client, db):
    with client.start_session() as s:
        with s.start_transaction():
            db.fresh.insert_one({"_id": 1}, session=s)
            assert "fresh" not in db.list_collection_names()
    assert list(db.fresh.find()) == [{"_id": 1}]


def test_commit_again_succeeds_and_abort_after_commit_fails(client, db):
    lsid = client.start_session().session_id
    db.command("insert", "t", documents=[{"_id": 1}], lsid=lsid, txnNumber=1, startTransaction=True, autocommit=False)
    client.admin.command("commitTransaction", lsid=lsid, txnNumber=1, autocommit=False)
    client.admin.command("commitTransaction", lsid=lsid, txnNumber=1, autocommit=False)
    with pytest.raises(OperationFailure) as exc:
        client.admin.command("abortTransaction", lsid=lsid, txnNumber=1, autocommit=False)
    assert exc.value.code == 256
    assert list(db.t.find()) == [{"_id": 1}]


def test_commands_a_transaction_refuses(client, db):
    lsid = client.start_session().session_id
    with pytest.raises(OperationFailure) as exc:
        db.command("count", "t", lsid=lsid, txnNumber=1, startTransaction=True, autocommit=False)
    assert exc.value.code == 263
    db.command("find", "t", lsid=lsid, txnNumber=2, startTransaction=True, autocommit=False)
    with pytest.raises(OperationFailure) as exc:
        db.command("find", "t", lsid=lsid, txnNumber=2, autocommit=False, readConcern={"level": "snapshot"})
    assert exc.value.code == 72
    with pytest.raises(OperationFailure) as exc:
        db.command("insert", "t", documents=[{}], lsid=lsid, txnNumber=2, autocommit=False, writeConcern={"w": 1})
    assert exc.value.code == 72
    with pytest.raises(OperationFailure) as exc:
        db.command("find", "t", lsid=lsid, txnNumber=7, autocommit=False)
    assert exc.value.code == 251


def test_committed_transaction_reaches_the_oplog_and_change_streams_together(client, db):
    coll = db.t
    with coll.watch() as stream:
        with client.start_session() as s:
            with s.start_transaction():
                coll.insert_one({"_id": 1}, session=s)
                coll.insert_one({"_id": 2}, session=s)
                assert stream.try_next() is None
        events = [next_event(stream) for _ in range(2)]
    assert [e["documentKey"]["_id"] for e in events] == [1, 2]
    # As mongod: one applyOps entry holds the transaction, and its events share its time.
    entries = list(client.local["oplog.rs"].find({"o.applyOps.ns": coll.full_name}))
    assert len(entries) == 1, entries
    entry = entries[0]
    assert (entry["op"], entry["ns"]) == ("c", "admin.$cmd")
    assert list(entry)[:4] == ["lsid", "txnNumber", "op", "ns"]
    assert entry["prevOpTime"] == {"ts": bson.Timestamp(0, 0), "t": -1}
    # The collection is created by the transaction's first insert, inside it.
    create, *inserts = entry["o"]["applyOps"]
    assert (create["op"], create["ns"], create["o"]["create"]) == ("c", f"{db.name}.$cmd", "t")
    assert [(o["op"], o["ns"], o["o"]["_id"]) for o in inserts] == [
        ("i", coll.full_name, 1), ("i", coll.full_name, 2)]
    assert all(e["clusterTime"] == entry["ts"] for e in events)


def test_snapshot_session_reads_stay_at_their_first_time(client, db):
    coll = db.t
    coll.insert_one({"_id": 1, "x": 1})
    with client.start_session(snapshot=True) as s:
        assert coll.find_one({"_id": 1}, session=s) == {"_id": 1, "x": 1}
        coll.update_one({"_id": 1}, {"$set": {"x": 2}})
        coll.insert_one({"_id": 2, "x": 2})
        assert list(coll.find({}, session=s)) == [{"_id": 1, "x": 1}]
        assert coll.distinct("x", session=s) == [1]
        assert [d["n"] for d in coll.aggregate([{"$count": "n"}], session=s)] == [1]
    assert coll.count_documents({}) == 2


def test_snapshot_read_concern_is_refused_by_writes_and_old_times(client, db):
    reply = db.command("find", "t", readConcern={"level": "snapshot"})
    at = reply["cursor"]["atClusterTime"]
    with pytest.raises(OperationFailure) as exc:
        db.command("insert", "t", documents=[{}], readConcern={"level": "snapshot"})
    assert exc.value.code == 72
    db.t.insert_one({"_id": "later"})
    # The time returned is readable again; a time never handed out and now passed is not.
    assert db.command("find", "t", readConcern={"level": "snapshot", "atClusterTime": at})["cursor"]["firstBatch"] == []
    older = bson.Timestamp(at.time - 1, 1)
    with pytest.raises(OperationFailure) as exc:
        db.command("find", "t", readConcern={"level": "snapshot", "atClusterTime": older})
    assert exc.value.code == 239


def test_collection_and_index_created_in_a_transaction_appear_at_the_commit(client, db):
    with db.watch(show_expanded_events=True) as stream:
        with client.start_session() as s:
            with s.start_transaction():
                db.create_collection("made", session=s)
                db.made.insert_one({"_id": 1, "k": "a"}, session=s)
                db.indexed.create_index("k", session=s)
                assert "made" not in db.list_collection_names()
                assert "indexed" not in db.list_collection_names()
        events = [next_event(stream) for _ in range(4)]
    assert list(db.made.find()) == [{"_id": 1, "k": "a"}]
    assert "k_1" in db.indexed.index_information()
    # As mongod: the DDL is inside the transaction's applyOps entry, before its writes,
    # and its events share the commit's time.
    assert [(e["operationType"], e["ns"]["coll"]) for e in events] == [
        ("create", "made"), ("create", "indexed"), ("createIndexes", "indexed"),
        ("insert", "made")]
    assert len({e["clusterTime"] for e in events}) == 1
    entry = client.local["oplog.rs"].find_one({"o.applyOps.ns": f"{db.name}.made"})
    assert [o["op"] for o in entry["o"]["applyOps"]] == ["c", "c", "c", "i"]


def test_create_index_on_an_existing_collection_is_refused_in_a_transaction(client, db):
    db.t.insert_one({})
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as exc:
            db.t.create_index("k", session=s)
        assert exc.value.code == 263
        s.abort_transaction()
    assert list(db.t.index_information()) == ["_id_"]


def test_validator_applies_to_writes_in_a_transaction(client, db):
    db.create_collection("v", validator={"n": {"$type": "int"}})
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as exc:
            db.v.insert_one({"n": "text"}, session=s)
        assert exc.value.code == 121
        s.abort_transaction()
    with client.start_session() as s:
        with s.start_transaction():
            db.v.insert_one({"_id": 1, "n": 1}, session=s)
            db.v.insert_one({"_id": 2, "n": "text"}, session=s, bypass_document_validation=True)
    assert [d["_id"] for d in db.v.find()] == [1, 2]


def test_an_abandoned_transaction_expires_and_releases_its_documents(client, db):
    client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    try:
        with client.start_session() as s0, client.start_session() as s1:
            s0.start_transaction()
            db.t.insert_one({"_id": 1, "by": 0}, session=s0)
            # Expiry is checked when transaction commands arrive, at most once a second.
            deadline = time.monotonic() + 30
            while True:
                s1.start_transaction()
                try:
                    db.t.insert_one({"_id": 1, "by": 1}, session=s1)
                    s1.commit_transaction()
                    break
                except OperationFailure as e:
                    assert e.code == 112
                    s1.abort_transaction()
                    assert time.monotonic() < deadline, "the abandoned transaction never expired"
                    time.sleep(0.2)
            with pytest.raises(OperationFailure) as exc:
                s0.commit_transaction()
            assert exc.value.code == 251
        assert list(db.t.find()) == [{"_id": 1, "by": 1}]
    finally:
        client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)


def test_change_events_of_a_transaction_carry_its_session(client, db):
    coll = db.t
    with coll.watch() as stream:
        coll.insert_one({"_id": 0})
        with client.start_session() as s:
            with s.start_transaction():
                coll.insert_one({"_id": 1}, session=s)
                coll.update_one({"_id": 0}, {"$set": {"x": 1}}, session=s)
            lsid = s.session_id
        plain, inserted, updated = stream.next(), stream.next(), stream.next()
    assert "lsid" not in plain and "txnNumber" not in plain
    for event in (inserted, updated):
        assert event["lsid"] == lsid
        assert isinstance(event["txnNumber"], int)
    assert inserted["txnNumber"] == updated["txnNumber"]
    # Where mongod puts them: ahead of the resume token.
    assert list(inserted)[:3] == ["txnNumber", "lsid", "_id"]
    assert [inserted["operationType"], updated["operationType"]] == ["insert", "update"]


def test_each_write_of_a_transaction_is_its_own_event_in_order(client, db):
    """As mongod's applyOps: one event per operation, in the order they ran, also for
    several writes to one document (not one event per document for its last state)."""
    coll = db.t
    coll.insert_many([{"_id": "a", "n": 0}, {"_id": "b", "n": 0}])
    inserts_only = coll.watch([{"$match": {"operationType": "insert"}}])
    with coll.watch() as stream:
        with client.start_session() as s:
            with s.start_transaction():
                coll.insert_one({"_id": 1, "v": "first"}, session=s)
                coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, session=s)
                coll.update_one({"_id": 1}, {"$set": {"v": "second"}}, session=s)
                coll.update_one({"_id": "b"}, {"$inc": {"n": 1}}, session=s)
                coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, session=s)
                coll.replace_one({"_id": "b"}, {"replaced": True}, session=s)
                coll.delete_one({"_id": 1}, session=s)
                coll.insert_one({"_id": 2}, session=s)
                coll.delete_one({"_id": 2}, session=s)
        events = [next_event(stream) for _ in range(9)]
        coll.insert_one({"_id": "after"})
        assert next_event(stream)["documentKey"]["_id"] == "after"
    # A stream that filters on the kind of change finds the transaction's inserts too.
    with inserts_only:
        assert [next_event(inserts_only)["documentKey"]["_id"] for _ in range(3)] == [1, 2, "after"]
    assert [(e["operationType"], e["documentKey"]["_id"]) for e in events] == [
        ("insert", 1), ("update", "a"), ("update", 1), ("update", "b"), ("update", "a"),
        ("replace", "b"), ("delete", 1), ("insert", 2), ("delete", 2)]
    # Each event shows its own operation: the insert its document as inserted, each
    # update its own change.
    assert events[0]["fullDocument"] == {"_id": 1, "v": "first"}
    assert events[1]["updateDescription"]["updatedFields"] == {"n": 1}
    assert events[2]["updateDescription"]["updatedFields"] == {"v": "second"}
    assert events[4]["updateDescription"]["updatedFields"] == {"n": 2}
    assert events[5]["fullDocument"] == {"_id": "b", "replaced": True}
    assert len({e["txnNumber"] for e in events}) == 1
    # One commit time for all of them (mongod's events of a transaction share it).
    assert len({e["clusterTime"] for e in events}) == 1
    # The transaction's applyOps entry lists the same operations, and the data holds
    # the last state.
    entry = client.local["oplog.rs"].find_one({"o.applyOps.ns": coll.full_name})
    assert [o["op"] for o in entry["o"]["applyOps"]] == ["i", "u", "u", "u", "u", "u", "d", "i", "d"]
    assert entry["ts"] == events[0]["clusterTime"]
    assert sorted(coll.find(), key=lambda d: str(d["_id"])) == [
        {"_id": "a", "n": 2}, {"_id": "after"}, {"_id": "b", "replaced": True}]


def test_transaction_writes_that_undo_each_other_commit(client, db):
    """The commit replays the writes in order, so none of them trips over an earlier
    one of the same transaction: the same _id in two collections, a document deleted
    and inserted again, a unique value freed by an update and taken by an insert."""
    db.u.create_index("email", unique=True)
    db.u.insert_one({"_id": 1, "email": "x@example.com"})
    with client.start_session() as s:
        with s.start_transaction():
            db.a.insert_one({"_id": 7}, session=s)
            db.b.insert_one({"_id": 7}, session=s)
            db.u.delete_one({"_id": 1}, session=s)
            db.u.insert_one({"_id": 1, "email": "y@example.com"}, session=s)
            db.u.insert_one({"_id": 2, "email": "z@example.com"}, session=s)
            db.u.update_one({"_id": 2}, {"$set": {"email": "w@example.com"}}, session=s)
            db.u.insert_one({"_id": 3, "email": "z@example.com"}, session=s)
            db.u.insert_one({"_id": 4, "email": "x@example.com"}, session=s)
    assert db.a.find_one() == {"_id": 7} and db.b.find_one() == {"_id": 7}
    assert sorted((d["_id"], d["email"]) for d in db.u.find()) == [
        (1, "y@example.com"), (2, "w@example.com"), (3, "z@example.com"), (4, "x@example.com")]
    # The unique index holds exactly these.
    with pytest.raises(OperationFailure) as e:
        db.u.insert_one({"_id": 5, "email": "z@example.com"})
    assert e.value.code == 11000
    db.u.insert_one({"_id": 6, "email": "q@example.com"})


def test_writes_a_transaction_may_not_make(client, db):
    """As mongod: no writes to capped or system collections in a transaction, and no
    command at all on the local and config databases or on system.profile (263)."""
    db.create_collection("cap", capped=True, size=4096)
    db.cap.insert_one({"_id": 1})
    cases = [
        ("capped insert", lambda s: db.cap.insert_one({"x": 1}, session=s)),
        ("capped update", lambda s: db.cap.update_one({"_id": 1}, {"$set": {"x": 1}}, session=s)),
        ("capped findAndModify", lambda s: db.cap.find_one_and_update(
            {"_id": 1}, {"$set": {"x": 1}}, session=s)),
        ("system.js insert", lambda s: db.system.js.insert_one(
            {"_id": "f", "value": "function() {}"}, session=s)),
        ("config write", lambda s: client.config.t.insert_one({"x": 1}, session=s)),
        ("config read", lambda s: client.config.t.find_one({}, session=s)),
        ("local read", lambda s: client.local["oplog.rs"].find_one({}, session=s)),
        ("system.profile read", lambda s: db.system.profile.find_one({}, session=s)),
        ("change stream", lambda s: db.command(
            "aggregate", "cap", pipeline=[{"$changeStream": {}}], cursor={}, session=s)),
        ("killCursors first", lambda s: db.command("killCursors", "cap", cursors=[], session=s)),
    ]
    for what, op in cases:
        with client.start_session() as s:
            s.start_transaction()
            with pytest.raises(OperationFailure) as e:
                op(s)
            assert e.value.code == 263, (what, e.value.details)
            s.abort_transaction()
    # A tailable cursor: InvalidOptions, as mongod.
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as e:
            db.command("find", "cap", tailable=True, awaitData=True, session=s)
        assert e.value.code == 72, e.value.details
        s.abort_transaction()
    # Reads of a capped collection are allowed, and nothing was written.
    with client.start_session() as s:
        with s.start_transaction():
            assert db.cap.find_one({}, session=s) == {"_id": 1}
    assert list(db.cap.find()) == [{"_id": 1}]
    assert db.system.js.count_documents({}) == 0


def test_images_of_each_write_in_a_transaction(client, db):
    """With pre- and post-images on, each event of a transaction carries the document
    as it was just before and just after its own operation, also for several writes to
    one document."""
    db.create_collection("img", changeStreamPreAndPostImages={"enabled": True})
    db.img.insert_one({"_id": 1, "n": 0})
    with db.img.watch(full_document="required",
                      full_document_before_change="required") as stream:
        with client.start_session() as s:
            with s.start_transaction():
                db.img.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s)
                db.img.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=s)
                db.img.replace_one({"_id": 1}, {"r": True}, session=s)
                db.img.delete_one({"_id": 1}, session=s)
        events = [next_event(stream) for _ in range(4)]
    assert [e["operationType"] for e in events] == ["update", "update", "replace", "delete"]
    assert [e["fullDocumentBeforeChange"] for e in events] == [
        {"_id": 1, "n": 0}, {"_id": 1, "n": 1}, {"_id": 1, "n": 11}, {"_id": 1, "r": True}]
    assert [e["fullDocument"] for e in events[:3]] == [
        {"_id": 1, "n": 1}, {"_id": 1, "n": 11}, {"_id": 1, "r": True}]
    # Resuming after the second event gives the last two again, images included.
    with db.img.watch(full_document="required", full_document_before_change="required",
                      resume_after=events[1]["_id"]) as again:
        rest = [next_event(again) for _ in range(2)]
    assert rest == events[2:]


def test_concurrent_transactions_reach_streams_whole_and_once(client, db):
    """Several threads commit (and abort) transactions of several writes while streams
    watch: every committed transaction's operations arrive exactly once, together, in
    order, at one clusterTime; no aborted write ever arrives."""
    coll = db.t
    coll.insert_one({"_id": "seed"})
    committed, lock = [], threading.Lock()

    def writer(w):
        for n in range(15):
            ops = [f"w{w}-{n}-{k}" for k in range(3)]
            with client.start_session() as s:
                try:
                    with s.start_transaction():
                        for k in ops:
                            coll.insert_one({"_id": k}, session=s)
                        coll.update_one({"_id": ops[0]}, {"$set": {"u": 1}}, session=s)
                        if n % 5 == 4:
                            raise RuntimeError("abort this one")
                except RuntimeError:
                    continue
                except PyMongoError:
                    continue  # a write conflict aborts it: nothing of it may appear
            with lock:
                committed.append(ops)

    with coll.watch() as stream, db.watch() as db_stream:
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        coll.insert_one({"_id": "end"})
        for s in (stream, db_stream):
            events = []
            while True:
                e = next_event(s)
                if e["documentKey"]["_id"] == "end":
                    break
                events.append(e)
            assert len(events) == 4 * len(committed)
            # Group by transaction: consecutive, one clusterTime, insert x3 then update.
            groups = [events[i:i + 4] for i in range(0, len(events), 4)]
            seen = []
            for g in groups:
                assert len({e["clusterTime"] for e in g}) == 1, g
                assert len({(e["lsid"]["id"], e["txnNumber"]) for e in g}) == 1, g
                ids = [e["documentKey"]["_id"] for e in g]
                assert [e["operationType"] for e in g] == ["insert"] * 3 + ["update"]
                assert ids[3] == ids[0]
                seen.append(ids[:3])
            assert sorted(seen) == sorted(committed)
            times = [g[0]["clusterTime"] for g in groups]
            assert times == sorted(times) and len(set(times)) == len(times)
    assert len(committed) == 3 * 12

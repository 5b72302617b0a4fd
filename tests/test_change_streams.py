"""Change streams: aggregate with $changeStream and getMore, through pymongo's watch().

Covers every event type, the options, the errors, resuming (also after a restart
and after kill -9) and concurrent writers and streams.
"""

import datetime
import threading
import time

import pytest
from bson import Timestamp
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from conftest import eventually, next_event


def events(stream, n, timeout=10.0):
    return [next_event(stream, timeout) for _ in range(n)]


def no_event(stream, tries=3):
    """Asserts the stream has nothing (each try waits for the server's await time)."""
    for _ in range(tries):
        ev = stream.try_next()
        assert ev is None, f"unexpected event {ev}"


def raw_aggregate(db, coll, stage=None, pipeline=(), **cmd):
    return db.command(
        "aggregate", coll if coll is not None else 1,
        pipeline=[{"$changeStream": stage or {}}, *pipeline],
        cursor=cmd.pop("cursor", {}), **cmd,
    )


# ---- events ---------------------------------------------------------------

class TestEvents:
    def test_crud_events(self, coll):
        coll.insert_one({"_id": 0})
        with coll.watch() as s:
            coll.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3]})
            coll.update_one({"_id": 1}, {"$set": {"b": 2}, "$unset": {"a": 1}})
            coll.update_one({"_id": 1}, {"$push": {"arr": 4}})
            coll.update_one({"_id": 1}, {"$pop": {"arr": 1}})
            coll.replace_one({"_id": 1}, {"x": 1})
            coll.delete_one({"_id": 1})
            ins, upd, push, pop, rep, dele = events(s, 6)

        assert ins["operationType"] == "insert"
        assert list(ins)[:4] == ["_id", "operationType", "clusterTime", "wallTime"]
        assert ins["fullDocument"] == {"_id": 1, "a": 1, "arr": [1, 2, 3]}
        assert ins["ns"] == {"db": coll.database.name, "coll": coll.name}
        assert ins["documentKey"] == {"_id": 1}
        assert isinstance(ins["clusterTime"], Timestamp)

        assert upd["operationType"] == "update"
        assert "fullDocument" not in upd
        assert upd["updateDescription"] == {"updatedFields": {"b": 2}, "removedFields": ["a"], "truncatedArrays": []}
        assert push["updateDescription"]["updatedFields"] == {"arr.3": 4}
        assert pop["updateDescription"]["truncatedArrays"] == [{"field": "arr", "newSize": 3}]

        assert rep["operationType"] == "replace"
        assert rep["fullDocument"] == {"_id": 1, "x": 1}
        assert dele["operationType"] == "delete"
        assert dele["documentKey"] == {"_id": 1}
        assert "fullDocument" not in dele

        times = [e["clusterTime"] for e in (ins, upd, push, pop, rep, dele)]
        assert times == sorted(times) and len(set(times)) == 6
        tokens = [e["_id"]["_data"] for e in (ins, upd, push, pop, rep, dele)]
        assert tokens == sorted(tokens)
        assert all(t.startswith("82") for t in tokens)

    def test_pipeline_update_reports_truncation(self, coll):
        coll.insert_one({"_id": 1, "array": ["foo", {"a": "bar"}, 1, 2, 3]})
        with coll.watch() as s:
            coll.update_one({"_id": 1}, [{"$set": {"array": ["foo", {"a": "bar"}]}}])
            ev = next_event(s)
        assert ev["updateDescription"] == {
            "updatedFields": {}, "removedFields": [],
            "truncatedArrays": [{"field": "array", "newSize": 2}],
        }

    def test_collection_stream_sees_only_its_collection(self, db):
        with db.a.watch() as s:
            db.b.insert_one({"x": 1})
            db.a.insert_one({"x": 2})
            ev = next_event(s)
            assert ev["fullDocument"]["x"] == 2
            no_event(s, tries=1)

    def test_database_stream(self, client, db):
        other = client[db.name + "_other"]
        try:
            with db.watch() as s:
                other.c.insert_one({"x": 0})
                db.a.insert_one({"x": 1})
                db.b.insert_one({"x": 2})
                evs = events(s, 2)
                assert [e["ns"]["coll"] for e in evs] == ["a", "b"]
                no_event(s, tries=1)
        finally:
            client.drop_database(other.name)

    def test_cluster_stream(self, client, db):
        other = client[db.name + "_other"]
        try:
            with client.watch() as s:
                db.a.insert_one({"x": 1})
                other.c.insert_one({"x": 2})
                client.admin.command("ping")
                evs = events(s, 2)
                assert [e["ns"]["db"] for e in evs] == [db.name, other.name]
        finally:
            client.drop_database(other.name)

    def test_drop_invalidates_collection_stream(self, coll):
        coll.insert_one({})
        with coll.watch() as s:
            coll.drop()
            drop, inv = events(s, 2)
            assert drop["operationType"] == "drop"
            assert drop["ns"] == {"db": coll.database.name, "coll": coll.name}
            assert inv["operationType"] == "invalidate"
            assert inv["clusterTime"] == drop["clusterTime"]
            assert s.try_next() is None
            assert not s.alive
        # startAfter the invalidate: the stream continues after it.
        with coll.watch(start_after=inv["_id"]) as s2:
            coll.insert_one({"after": True})
            assert next_event(s2)["fullDocument"]["after"] is True
        # resumeAfter an invalidate is refused.
        with pytest.raises(OperationFailure) as e:
            coll.watch(resume_after=inv["_id"])
        assert e.value.code == 260

    def test_rename_invalidates_and_reports_target(self, db):
        db.src.insert_one({})
        with db.src.watch() as s, db.watch() as dbs:
            db.src.rename("dst")
            ren, inv = events(s, 2)
            assert ren["operationType"] == "rename"
            assert ren["ns"]["coll"] == "src"
            assert ren["to"] == {"db": db.name, "coll": "dst"}
            assert inv["operationType"] == "invalidate"
            dren = next_event(dbs)
            assert dren["operationType"] == "rename"

    def test_drop_database(self, client, db):
        db.a.insert_one({})
        db.b.insert_one({})
        with db.watch() as s, db.a.watch() as cs:
            client.drop_database(db.name)
            evs = events(s, 4)
            assert [e["operationType"] for e in evs] == ["drop", "drop", "dropDatabase", "invalidate"]
            assert evs[2]["ns"] == {"db": db.name}
            assert [e["operationType"] for e in events(cs, 2)] == ["drop", "invalidate"]

    def test_expanded_events(self, db):
        with db.watch(show_expanded_events=True) as s:
            db.create_collection("c")
            db.c.create_index("a")
            db.command("collMod", "c", changeStreamPreAndPostImages={"enabled": True})
            db.c.drop_index("a_1")
            create, cidx, mod, didx = events(s, 4)
        assert create["operationType"] == "create"
        assert "collectionUUID" in create and "operationDescription" in create
        assert cidx["operationType"] == "createIndexes"
        assert cidx["operationDescription"]["indexes"][0]["key"] == {"a": 1}
        assert mod["operationType"] == "modify"
        assert mod["operationDescription"] == {"changeStreamPreAndPostImages": {"enabled": True}}
        assert didx["operationType"] == "dropIndexes"
        assert didx["operationDescription"]["indexes"][0]["name"] == "a_1"

    def test_raw_update_description(self, coll):
        """showRawUpdateDescription (mongod's internal option): an update's event carries
        the oplog entry's own description, and only updates change."""
        db = coll.database
        coll.insert_one({"_id": 1, "a": 1, "b": 1, "arr": [1, 2, 3]})
        # pymongo's watch() has no such option: the raw commands.
        cursor = raw_aggregate(db, coll.name, {"showRawUpdateDescription": True},
                               cursor={"batchSize": 0})["cursor"]
        with coll.watch() as parsed:
            coll.update_one({"_id": 1}, {"$set": {"a": 2, "c": 3}, "$unset": {"b": 1}})
            coll.replace_one({"_id": 1}, {"z": 1})
            coll.delete_one({"_id": 1})
            p_upd, p_rep, p_del = events(parsed, 3)
        got = []
        for _ in range(10):
            more = db.command("getMore", cursor["id"], collection=coll.name, maxTimeMS=1000)
            got += more["cursor"]["nextBatch"]
            if len(got) >= 3:
                break
        db.command("killCursors", coll.name, cursors=[cursor["id"]])
        upd, rep, dele = got
        assert upd["operationType"] == "update"
        assert "updateDescription" not in upd
        assert upd["rawUpdateDescription"] == {
            "$v": 2, "diff": {"u": {"a": 2}, "i": {"c": 3}, "d": {"b": False}}}
        # The same event otherwise, also its resume token.
        assert p_upd["updateDescription"]["updatedFields"] == {"a": 2, "c": 3}
        assert "rawUpdateDescription" not in p_upd
        assert upd["_id"] == p_upd["_id"]
        assert {k: v for k, v in upd.items() if k != "rawUpdateDescription"} == {
            k: v for k, v in p_upd.items() if k != "updateDescription"}
        # In the place of updateDescription, as mongod adds it.
        assert list(upd).index("rawUpdateDescription") == list(p_upd).index("updateDescription")
        assert rep == p_rep and dele == p_del

    def test_system_events(self, db):
        """showSystemEvents (mongod's internal option): a database stream also shows the
        writes to system.js and to a time-series collection's system.buckets."""
        db.create_collection("ts", timeseries={"timeField": "t"})
        shown = raw_aggregate(db, None, {"showSystemEvents": True},
                              cursor={"batchSize": 0})["cursor"]
        hidden = raw_aggregate(db, None, {}, cursor={"batchSize": 0})["cursor"]
        db.system.js.insert_one({"_id": "f", "value": "function() { return 1; }"})
        db.ts.insert_one({"t": datetime.datetime(2026, 1, 1), "v": 1})
        db.plain.insert_one({"_id": "last"})

        def collect(cursor):
            got = []
            for _ in range(10):
                more = db.command("getMore", cursor["id"], collection="$cmd.aggregate",
                                  maxTimeMS=500)
                got += more["cursor"]["nextBatch"]
                if got and got[-1]["ns"].get("coll") == "plain":
                    break
            db.command("killCursors", "$cmd.aggregate", cursors=[cursor["id"]])
            return [(e["operationType"], e["ns"]["coll"]) for e in got]

        assert collect(shown) == [
            ("insert", "system.js"), ("insert", "system.buckets.ts"), ("insert", "plain")]
        assert collect(hidden) == [("insert", "plain")]

    def test_ddl_hidden_without_expanded_events(self, db):
        with db.watch() as s:
            db.create_collection("c")
            db.c.create_index("a")
            db.c.insert_one({"x": 1})
            assert next_event(s)["operationType"] == "insert"


# ---- options --------------------------------------------------------------

class TestOptions:
    def test_resume_after_gives_the_rest_exactly_once(self, coll):
        with coll.watch() as s:
            coll.insert_many([{"i": i} for i in range(5)])
            first = events(s, 2)
        with coll.watch(resume_after=first[1]["_id"]) as s2:
            rest = events(s2, 3)
            assert [e["fullDocument"]["i"] for e in rest] == [2, 3, 4]
            no_event(s2, tries=1)

    def test_start_at_operation_time(self, coll):
        coll.insert_one({"i": 0})
        t = coll.database.client.admin.command("ping")["operationTime"]
        coll.insert_one({"i": 1})
        with coll.watch(start_at_operation_time=Timestamp(t.time, t.inc + 1)) as s:
            assert next_event(s)["fullDocument"]["i"] == 1

    def test_mutually_exclusive_start_options(self, coll):
        with coll.watch() as s:
            coll.insert_one({})
            tok = next_event(s)["_id"]
        with pytest.raises(OperationFailure) as e:
            raw_aggregate(coll.database, coll.name, {"resumeAfter": tok, "startAfter": tok})
        assert e.value.code == 50865
        with pytest.raises(OperationFailure) as e:
            raw_aggregate(coll.database, coll.name, {"resumeAfter": tok, "startAtOperationTime": Timestamp(1, 1)})
        assert e.value.code == 40674

    def test_update_lookup(self, coll):
        coll.insert_one({"_id": 1, "a": 1})
        with coll.watch(full_document="updateLookup") as s:
            coll.update_one({"_id": 1}, {"$set": {"a": 2}})
            ev = next_event(s)
        assert ev["fullDocument"] == {"_id": 1, "a": 2}

    def test_pre_and_post_images(self, db):
        db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
        db.c.insert_one({"_id": 1, "a": 1})
        with db.c.watch(full_document="required", full_document_before_change="required") as s:
            db.c.update_one({"_id": 1}, {"$set": {"a": 2}})
            db.c.update_one({"_id": 1}, {"$set": {"a": 3}})
            db.c.delete_one({"_id": 1})
            u1, u2, d = events(s, 3)
        assert u1["fullDocumentBeforeChange"] == {"_id": 1, "a": 1}
        assert u1["fullDocument"] == {"_id": 1, "a": 2}
        # Point-in-time images, not the current document.
        assert u2["fullDocumentBeforeChange"] == {"_id": 1, "a": 2}
        assert d["fullDocumentBeforeChange"] == {"_id": 1, "a": 3}

    def test_images_when_available_and_required_without_images(self, coll):
        coll.insert_one({"_id": 1})
        with coll.watch(full_document_before_change="whenAvailable", full_document="whenAvailable") as s:
            coll.update_one({"_id": 1}, {"$set": {"a": 1}})
            ev = next_event(s)
            assert ev["fullDocumentBeforeChange"] is None
            assert ev["fullDocument"] is None
        with coll.watch(full_document_before_change="required") as s:
            coll.delete_one({"_id": 1})
            with pytest.raises(OperationFailure) as e:
                next_event(s)
            assert e.value.code == 47

    def test_match_and_project(self, coll):
        with coll.watch([{"$match": {"operationType": "insert", "fullDocument.keep": True}},
                         {"$project": {"fullDocument.big": 0}}]) as s:
            coll.insert_one({"keep": False})
            coll.insert_one({"keep": True, "big": "x" * 100})
            coll.delete_many({})
            ev = next_event(s)
            assert ev["fullDocument"]["keep"] is True and "big" not in ev["fullDocument"]
            no_event(s, tries=1)

    def test_post_batch_resume_token_advances_past_filtered_events(self, coll):
        db = coll.database
        reply = raw_aggregate(db, coll.name, pipeline=[{"$match": {"operationType": "delete"}}])
        cur = reply["cursor"]
        assert cur["firstBatch"] == []
        assert cur["ns"] == coll.full_name
        first_token = cur["postBatchResumeToken"]["_data"]
        coll.insert_many([{"i": i} for i in range(10)])
        token = first_token
        deadline = time.monotonic() + 10
        while token == first_token and time.monotonic() < deadline:
            more = db.command("getMore", cur["id"], collection=coll.name, maxTimeMS=200)["cursor"]
            assert more["nextBatch"] == []
            token = more["postBatchResumeToken"]["_data"]
        assert token > first_token
        db.command("killCursors", coll.name, cursors=[cur["id"]])

    def test_batch_size_zero_and_database_cursor_namespace(self, db):
        reply = raw_aggregate(db, None, cursor={"batchSize": 0})
        cur = reply["cursor"]
        assert cur["firstBatch"] == [] and cur["id"] != 0
        assert cur["ns"] == f"{db.name}.$cmd.aggregate"
        assert "postBatchResumeToken" in cur
        db.a.insert_one({"x": 1})
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            more = db.command("getMore", cur["id"], collection="$cmd.aggregate", maxTimeMS=500)["cursor"]
            got = more["nextBatch"]
        assert got and got[0]["fullDocument"]["x"] == 1
        assert more["postBatchResumeToken"] == got[-1]["_id"]

    @pytest.mark.parametrize("compressors", [None, "zlib"])
    def test_large_batches_arrive_whole(self, server, coll, compressors):
        # Batches of megabytes go to the socket in pieces (each event from its own
        # buffer), or in one compressed buffer: the driver must read the same events.
        start = coll.database.command("ping")["operationTime"]
        docs = [{"_id": i, "pad": chr(65 + i % 26) * (1000 + i % 7)} for i in range(3000)]
        coll.insert_many(docs)
        kwargs = {"compressors": compressors} if compressors else {}
        with server.client(**kwargs) as c:
            reply = c[coll.database.name].command(
                "aggregate", coll.name, cursor={"batchSize": 2500},
                pipeline=[{"$changeStream": {"startAtOperationTime": start}}])
            first = reply["cursor"]["firstBatch"]
            more = c[coll.database.name].command(
                "getMore", reply["cursor"]["id"], collection=coll.name, batchSize=2500)["cursor"]
            got = first + more["nextBatch"]
        assert [e["fullDocument"] for e in got] == docs
        assert len(first) == 2500
        assert reply["cursor"]["postBatchResumeToken"] == first[-1]["_id"]
        assert more["postBatchResumeToken"] == got[-1]["_id"]

    def test_stream_behind_gets_a_full_batch(self, coll):
        # 3,000 durable events wait in the server's recent oplog: one getMore returns
        # as many as asked for, in order, whether read on the connection or in the pool.
        db = coll.database
        cur = raw_aggregate(db, coll.name)["cursor"]
        durable = coll.with_options(write_concern=WriteConcern(w=1, j=True))
        durable.insert_many([{"_id": i} for i in range(3000)])
        more = db.command("getMore", cur["id"], collection=coll.name, batchSize=3000)["cursor"]
        assert [e["documentKey"]["_id"] for e in more["nextBatch"]] == list(range(3000))
        assert more["postBatchResumeToken"] == more["nextBatch"][-1]["_id"]
        db.command("killCursors", coll.name, cursors=[cur["id"]])

    def test_event_behind_many_filtered_entries_comes_without_waiting(self, coll):
        # The one matching event follows 3,000 entries the filter passes over: the
        # first getMore must find it, not wait out its await time with an empty batch.
        db = coll.database
        cur = raw_aggregate(db, coll.name, pipeline=[{"$match": {"fullDocument.k": 1}}])["cursor"]
        durable = coll.with_options(write_concern=WriteConcern(w=1, j=True))
        durable.insert_many([{"_id": i} for i in range(3000)])
        durable.insert_one({"_id": "last", "k": 1})
        more = db.command("getMore", cur["id"], collection=coll.name, maxTimeMS=60000)["cursor"]
        assert [e["documentKey"]["_id"] for e in more["nextBatch"]] == ["last"]
        db.command("killCursors", coll.name, cursors=[cur["id"]])

    def test_await_returns_empty_batch_and_keeps_cursor(self, coll):
        reply = raw_aggregate(coll.database, coll.name)
        cid = reply["cursor"]["id"]
        more = coll.database.command("getMore", cid, collection=coll.name, maxTimeMS=100)["cursor"]
        assert more["nextBatch"] == [] and more["id"] == cid

    def test_split_large_event(self, db):
        db.create_collection("big", changeStreamPreAndPostImages={"enabled": True})
        db.big.insert_one({"_id": 1, "v": "q" * (10 << 20)})
        with db.big.watch([{"$changeStreamSplitLargeEvent": {}}], full_document_before_change="required") as s:
            db.big.update_one({"_id": 1}, {"$set": {"v": "z" * (10 << 20)}})
            f1, f2 = events(s, 2)
        assert f1["splitEvent"] == {"fragment": 1, "of": 2}
        assert f2["splitEvent"] == {"fragment": 2, "of": 2}
        assert f1["_id"] != f2["_id"]
        # Smallest fields first (mongod's greedy split): the pre-image is a little
        # smaller than the update description, so it fills the first fragment.
        assert f1["fullDocumentBeforeChange"]["v"][0] == "q"
        assert f2["updateDescription"]["updatedFields"]["v"][0] == "z"


# ---- errors ---------------------------------------------------------------

class TestErrors:
    def test_stage_not_allowed(self, coll):
        with pytest.raises(OperationFailure) as e:
            coll.watch([{"$group": {"_id": 1}}])
        assert e.value.code == 20
        with pytest.raises(OperationFailure) as e:
            coll.watch([{"$unsupported": 1}])
        assert e.value.code == 40324

    def test_change_stream_must_be_first(self, coll):
        with pytest.raises(OperationFailure) as e:
            coll.aggregate([{"$match": {}}, {"$changeStream": {}}])
        assert e.value.code == 40602

    def test_removing_id_is_fatal(self, coll):
        with coll.watch([{"$project": {"_id": 0}}]) as s:
            coll.insert_one({})
            with pytest.raises(OperationFailure) as e:
                next_event(s)
        assert e.value.code == 280
        assert e.value.has_error_label("NonResumableChangeStreamError")

    def test_bad_options(self, db):
        for stage, code in [
            ({"bogus": 1}, 40415),
            ({"fullDocument": "sometimes"}, 2),
            ({"fullDocumentBeforeChange": 3}, 14),
            ({"resumeAfter": {"_data": "zz"}}, 260),
            ({"resumeAfter": 5}, 260),
            ({"allChangesForCluster": True}, 72),
        ]:
            with pytest.raises(OperationFailure) as e:
                raw_aggregate(db, "c", stage)
            assert e.value.code == code, stage
        with pytest.raises(OperationFailure) as e:
            db.client.admin.watch()
        assert e.value.code == 73
        with pytest.raises(OperationFailure) as e:
            raw_aggregate(db, "c", readConcern={"level": "local"})
        assert e.value.code == 72

    def test_token_from_another_collection(self, db):
        with db.a.watch() as s:
            db.a.insert_one({})
            tok = next_event(s)["_id"]
        with pytest.raises(OperationFailure) as e:
            with db.b.watch(resume_after=tok) as s2:
                db.b.insert_one({})
                next_event(s2)
        assert e.value.code == 280

    def test_history_lost(self, fresh_server):
        srv = fresh_server(oplog_size_mb=1)
        c = srv.client()
        coll = c.t.c
        with coll.watch() as s:
            coll.insert_one({"first": True})
            tok = next_event(s)["_id"]
        # Push the first insert out of a 1 MB oplog.
        for _ in range(8):
            coll.insert_many([{"pad": "x" * 10_000} for _ in range(40)])

        def resume_fails():
            # The oplog is trimmed in the background, soon after the writes.
            try:
                coll.watch(resume_after=tok).close()
                return None
            except OperationFailure as e:
                return e

        e = eventually(resume_fails)
        assert e is not None and e.code == 286, e
        c.close()


# ---- durability and concurrency ------------------------------------------

class TestResume:
    def test_resume_after_restart(self, fresh_server):
        srv = fresh_server()
        c = srv.client()
        coll = c.t.c
        with coll.watch() as s:
            coll.insert_many([{"i": i} for i in range(3)])
            tok = events(s, 2)[-1]["_id"]
        c.close()
        srv.restart()
        c = srv.client()
        coll = c.t.c
        with coll.watch(resume_after=tok) as s:
            coll.insert_one({"i": 3})
            assert [e["fullDocument"]["i"] for e in events(s, 2)] == [2, 3]
            no_event(s, tries=1)
        c.close()

    def test_backlog_read_from_storage_in_chunks(self, fresh_server):
        # After a restart nothing is in the server's recent oplog: a stream from before
        # the writes reads them from storage a chunk at a time (at most 4,096 entries or
        # 4 MiB). Every event comes once, in order, whole, however the chunks fall.
        srv = fresh_server()
        c = srv.client()
        db = c.t
        start = db.command("ping")["operationTime"]
        durable = db.get_collection("c", write_concern=WriteConcern(j=True))
        durable.insert_many([{"_id": i} for i in range(5000)])
        big = "x" * (600 << 10)
        durable.insert_many([{"_id": 5000 + i, "v": big} for i in range(12)])
        c.close()
        srv.restart()
        c = srv.client()
        db = c.t
        want = list(range(5012))

        def read_all(pipeline, batch_size):
            cur = db.command(
                "aggregate", "c",
                pipeline=[{"$changeStream": {"startAtOperationTime": start}}] + pipeline,
                cursor={"batchSize": 0},
            )["cursor"]
            got, sizes = [], []
            while len(got) < len(want):
                more = db.command("getMore", cur["id"], collection="c", batchSize=batch_size,
                                  maxTimeMS=5000)["cursor"]
                assert more["nextBatch"], f"an empty batch after {len(got)} events"
                sizes.append(len(more["nextBatch"]))
                for e in more["nextBatch"]:
                    assert e["operationType"] == "insert"
                    k = e["documentKey"]["_id"]
                    assert e["fullDocument"] == ({"_id": k} if k < 5000 else {"_id": k, "v": big})
                    got.append(k)
                assert more["postBatchResumeToken"] == more["nextBatch"][-1]["_id"]
            db.command("killCursors", "c", cursors=[cur["id"]])
            return got, sizes

        got, sizes = read_all([], 6000)
        assert got == want
        # More than one 4,096-entry chunk goes into one batch.
        assert sizes[0] > 4096, sizes
        got, _ = read_all([{"$match": {"operationType": "insert"}}], 1000)
        assert got == want
        c.close()

    def test_resume_after_kill9_no_gap_no_duplicate(self, fresh_server):
        srv = fresh_server()
        c = srv.client()
        coll = c.t.get_collection("c", write_concern=WriteConcern(j=True))
        with coll.watch() as s:
            coll.insert_one({"i": -1})
            tok = next_event(s)["_id"]
        for i in range(50):
            coll.insert_one({"i": i})
        c.close()
        srv.kill9()
        srv.start()
        c = srv.client()
        with c.t.c.watch(resume_after=tok) as s:
            got = [e["fullDocument"]["i"] for e in events(s, 50)]
            no_event(s, tries=1)
        assert got == list(range(50))
        c.close()

    def test_concurrent_writers_and_streams(self, client, db):
        n_writers, per_writer, n_streams = 4, 100, 4
        streams = [db.c.watch() for _ in range(n_streams)]
        try:
            def write(w):
                wc = MongoClient(client.address[0], client.address[1], directConnection=True)
                try:
                    for i in range(per_writer):
                        wc[db.name].c.insert_one({"w": w, "i": i})
                finally:
                    wc.close()

            threads = [threading.Thread(target=write, args=(w,)) for w in range(n_writers)]
            for t in threads:
                t.start()
            results = [None] * n_streams
            errors = []

            def read(k):
                try:
                    results[k] = events(streams[k], n_writers * per_writer, timeout=60)
                except BaseException as e:  # noqa: BLE001 - reported below, a thread cannot raise
                    errors.append(repr(e))

            readers = [threading.Thread(target=read, args=(k,)) for k in range(n_streams)]
            for t in readers:
                t.start()
            for t in threads + readers:
                t.join()
            assert not errors, errors
            expected = {(w, i) for w in range(n_writers) for i in range(per_writer)}
            for evs in results:
                assert evs is not None
                seen = [(e["fullDocument"]["w"], e["fullDocument"]["i"]) for e in evs]
                assert len(seen) == len(expected) and set(seen) == expected
                times = [e["clusterTime"] for e in evs]
                assert times == sorted(times)
                # Each writer's own inserts arrive in the order it made them.
                for w in range(n_writers):
                    assert [i for (ww, i) in seen if ww == w] == list(range(per_writer))
            # Every stream saw the same order.
            orders = [[e["_id"]["_data"] for e in evs] for evs in results]
            assert all(o == orders[0] for o in orders)
        finally:
            for s in streams:
                s.close()


def test_acknowledged_durable_write_is_in_the_next_streams_first_batch(client, db):
    """A {w: majority} insert, once acknowledged, is in the first batch of a stream
    opened right after (drivers rely on it: pymongo's prose test 14). Other writers
    keep the group-commit thread busy, so commits land between its steps."""
    stop = threading.Event()

    def background():
        other = client[db.name]["other"]
        while not stop.is_set():
            other.insert_many([{} for _ in range(20)])

    writers = [threading.Thread(target=background) for _ in range(2)]
    for w in writers:
        w.start()
    coll = db.get_collection("c", write_concern=WriteConcern("majority"))
    try:
        for i in range(2000):
            start = db.command("ping")["operationTime"]
            coll.insert_one({"_id": i})
            first = raw_aggregate(db, "c", {"startAtOperationTime": start})["cursor"]["firstBatch"]
            assert i in [e["documentKey"]["_id"] for e in first], f"insert {i} missing"
    finally:
        stop.set()
        for w in writers:
            w.join()

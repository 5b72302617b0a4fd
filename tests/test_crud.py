"""Basic create/read/update/delete through pymongo."""

import time
import uuid

import pytest
from bson import Binary, Int64, ObjectId
from pymongo import (DeleteMany, DeleteOne, InsertOne, MongoClient, ReplaceOne,
                     ReturnDocument, UpdateMany, UpdateOne, WriteConcern)
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteConcernError, WriteError

import wire


class TestInsert:
    def test_insert_one_and_find(self, coll):
        res = coll.insert_one({"a": 1})
        assert isinstance(res.inserted_id, ObjectId)
        assert coll.find_one({"_id": res.inserted_id}) == {"_id": res.inserted_id, "a": 1}

    def test_server_generates_objectid_first(self, db):
        # pymongo adds _id client-side; a raw insert command lets the server do it.
        reply = db.command("insert", "c", documents=[{"a": 1, "b": 2}])
        assert reply["n"] == 1
        doc = db.c.find_one()
        assert list(doc.keys()) == ["_id", "a", "b"], "server-generated _id must come first"
        assert isinstance(doc["_id"], ObjectId)

    def test_custom_id_moved_first(self, db):
        db.command("insert", "c", documents=[{"a": 1, "_id": "mine", "b": 2}])
        doc = db.c.find_one()
        assert list(doc.keys()) == ["_id", "a", "b"]
        assert doc["_id"] == "mine"

    def test_insert_many(self, coll):
        res = coll.insert_many([{"i": i} for i in range(10)])
        assert len(res.inserted_ids) == 10
        assert coll.count_documents({}) == 10
        assert [d["i"] for d in coll.find().sort("i", 1)] == list(range(10))

    def test_duplicate_id(self, coll):
        coll.insert_one({"_id": 7})
        with pytest.raises(DuplicateKeyError) as exc:
            coll.insert_one({"_id": 7})
        assert exc.value.code == 11000

    def test_custom_id_types(self, coll):
        ids = [1, "s", {"x": 1}, 2.5]
        coll.insert_many([{"_id": i} for i in ids])
        for i in ids:
            assert coll.find_one({"_id": i}) == {"_id": i}


class TestFind:
    @pytest.fixture
    def people(self, coll):
        coll.insert_many([
            {"_id": i, "name": n, "age": a, "city": c}
            for i, (n, a, c) in enumerate([
                ("ann", 31, "oslo"), ("bob", 25, "rome"), ("cid", 40, "oslo"),
                ("dan", 25, "lima"), ("eve", 35, "rome"), ("fay", 28, "oslo"),
            ])
        ])
        return coll

    def test_filter(self, people):
        assert {d["name"] for d in people.find({"city": "oslo"})} == {"ann", "cid", "fay"}

    def test_projection_include(self, people):
        doc = people.find_one({"_id": 0}, {"name": 1})
        assert doc == {"_id": 0, "name": "ann"}

    def test_projection_exclude_id(self, people):
        doc = people.find_one({"_id": 0}, {"name": 1, "_id": 0})
        assert doc == {"name": "ann"}

    def test_projection_exclude(self, people):
        doc = people.find_one({"_id": 0}, {"age": 0, "city": 0})
        assert doc == {"_id": 0, "name": "ann"}

    def test_sort_skip_limit(self, people):
        names = [d["name"] for d in people.find().sort([("age", 1), ("name", -1)]).skip(1).limit(3)]
        assert names == ["bob", "fay", "ann"]

    def test_sort_desc(self, people):
        assert [d["age"] for d in people.find().sort("age", -1)] == [40, 35, 31, 28, 25, 25]

    def test_find_missing_collection(self, db):
        assert list(db.nope.find()) == []


class TestUpdate:
    def test_update_one_counts(self, coll):
        coll.insert_many([{"a": 1}, {"a": 1}])
        res = coll.update_one({"a": 1}, {"$set": {"b": 2}})
        assert (res.matched_count, res.modified_count) == (1, 1)
        assert coll.count_documents({"b": 2}) == 1

    def test_update_many_counts(self, coll):
        coll.insert_many([{"a": 1, "b": 2}, {"a": 1}, {"a": 2}])
        res = coll.update_many({"a": 1}, {"$set": {"b": 2}})
        assert res.matched_count == 2
        assert res.modified_count == 1, "the doc already having b=2 is matched but not modified"

    def test_update_no_match(self, coll):
        res = coll.update_one({"a": 99}, {"$set": {"b": 1}})
        assert (res.matched_count, res.modified_count, res.upserted_id) == (0, 0, None)

    def test_replace_one(self, coll):
        coll.insert_one({"_id": 1, "a": 1, "b": 2})
        res = coll.replace_one({"_id": 1}, {"c": 3})
        assert res.modified_count == 1
        assert coll.find_one({"_id": 1}) == {"_id": 1, "c": 3}

    def test_upsert(self, coll):
        res = coll.update_one({"k": "x"}, {"$set": {"v": 1}}, upsert=True)
        assert res.matched_count == 0
        assert isinstance(res.upserted_id, ObjectId)
        assert coll.find_one({"_id": res.upserted_id}) == {"_id": res.upserted_id, "k": "x", "v": 1}

    def test_upsert_seeds_from_equality_fields(self, coll):
        res = coll.update_one(
            {"a": 1, "b.c": "deep", "n": {"$gt": 5}, "$and": [{"d": 4}]},
            {"$set": {"z": True}}, upsert=True)
        doc = coll.find_one({"_id": res.upserted_id}, {"_id": 0})
        assert doc == {"a": 1, "b": {"c": "deep"}, "d": 4, "z": True}, \
            "equality fields seed the new doc, $gt does not"

    def test_upsert_with_id_in_query(self, coll):
        res = coll.update_one({"_id": "given"}, {"$inc": {"n": 1}}, upsert=True)
        assert res.upserted_id == "given"
        coll.update_one({"_id": "given"}, {"$inc": {"n": 1}}, upsert=True)
        assert coll.find_one() == {"_id": "given", "n": 2}

    def test_replace_upsert(self, coll):
        res = coll.replace_one({"name": "q"}, {"name": "q", "v": 2}, upsert=True)
        assert res.upserted_id is not None
        assert coll.find_one({}, {"_id": 0}) == {"name": "q", "v": 2}


class TestDelete:
    def test_delete_one(self, coll):
        coll.insert_many([{"a": 1}, {"a": 1}, {"a": 2}])
        assert coll.delete_one({"a": 1}).deleted_count == 1
        assert coll.count_documents({}) == 2

    def test_delete_many(self, coll):
        coll.insert_many([{"a": 1}, {"a": 1}, {"a": 2}])
        assert coll.delete_many({"a": 1}).deleted_count == 2
        assert [d["a"] for d in coll.find()] == [2]

    def test_delete_all(self, coll):
        coll.insert_many([{"a": i} for i in range(5)])
        assert coll.delete_many({}).deleted_count == 5
        assert coll.count_documents({}) == 0


class TestFindAndModify:
    @pytest.fixture
    def seeded(self, coll):
        coll.insert_many([{"_id": 1, "n": 5, "g": "x"}, {"_id": 2, "n": 1, "g": "x"}])
        return coll

    def test_update_return_before(self, seeded):
        doc = seeded.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}})
        assert doc["n"] == 5
        assert seeded.find_one({"_id": 1})["n"] == 6

    def test_update_return_after(self, seeded):
        doc = seeded.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}},
                                         return_document=ReturnDocument.AFTER)
        assert doc == {"_id": 1, "n": 6, "g": "x"}

    def test_update_sort_and_projection(self, seeded):
        doc = seeded.find_one_and_update({"g": "x"}, {"$set": {"picked": True}},
                                         sort=[("n", 1)], projection={"n": 1, "_id": 0},
                                         return_document=ReturnDocument.AFTER)
        assert doc == {"n": 1}
        assert seeded.find_one({"_id": 2})["picked"] is True
        assert "picked" not in seeded.find_one({"_id": 1})

    def test_update_upsert(self, seeded):
        doc = seeded.find_one_and_update({"_id": 3}, {"$set": {"n": 9}}, upsert=True,
                                         return_document=ReturnDocument.AFTER)
        assert doc == {"_id": 3, "n": 9}

    def test_update_upsert_before_returns_none(self, seeded):
        assert seeded.find_one_and_update({"_id": 4}, {"$set": {"n": 9}}, upsert=True) is None
        assert seeded.find_one({"_id": 4}) == {"_id": 4, "n": 9}

    def test_no_match_returns_none(self, seeded):
        assert seeded.find_one_and_update({"_id": 99}, {"$set": {"n": 0}}) is None

    def test_replace(self, seeded):
        doc = seeded.find_one_and_replace({"_id": 1}, {"r": 1},
                                          return_document=ReturnDocument.AFTER)
        assert doc == {"_id": 1, "r": 1}

    def test_delete(self, seeded):
        doc = seeded.find_one_and_delete({"g": "x"}, sort=[("n", -1)])
        assert doc["_id"] == 1
        assert [d["_id"] for d in seeded.find()] == [2]

    def test_raw_find_and_modify_last_error_object(self, seeded, db):
        reply = db.command("findAndModify", seeded.name, query={"_id": 50},
                           update={"$set": {"a": 1}}, upsert=True, new=True)
        assert reply["value"] == {"_id": 50, "a": 1}
        assert reply["lastErrorObject"]["updatedExisting"] is False
        assert reply["lastErrorObject"]["upserted"] == 50
        assert reply["lastErrorObject"]["n"] == 1


class TestCounting:
    def test_count_documents(self, coll):
        coll.insert_many([{"a": i % 3} for i in range(30)])
        assert coll.count_documents({}) == 30
        assert coll.count_documents({"a": 0}) == 10
        assert coll.count_documents({}, skip=25) == 5
        assert coll.count_documents({}, limit=7) == 7

    def test_estimated_document_count(self, coll):
        assert coll.estimated_document_count() == 0
        coll.insert_many([{"a": i} for i in range(12)])
        assert coll.estimated_document_count() == 12

    def test_count_command(self, coll, db):
        coll.insert_many([{"a": i} for i in range(4)])
        assert db.command("count", coll.name, query={"a": {"$gte": 2}})["n"] == 2

    def test_count_without_query_follows_writes(self, coll, db):
        """A count with no query counts stored documents without reading them: it
        must still see deletes, upserts and replaced documents exactly once."""
        coll.insert_many([{"_id": i} for i in range(20)])
        coll.delete_many({"_id": {"$lt": 5}})
        coll.update_one({"_id": 7}, {"$set": {"big": "x" * 1000}})
        coll.update_one({"_id": 100}, {"$set": {"a": 1}}, upsert=True)
        coll.replace_one({"_id": 8}, {"r": 1})
        assert db.command("count", coll.name)["n"] == 16
        assert db.command("count", coll.name, query={})["n"] == 16
        assert db.command("count", coll.name, skip=10)["n"] == 6
        assert db.command("count", coll.name, limit=3)["n"] == 3
        assert db.command("count", coll.name, skip=15, limit=3)["n"] == 1
        assert coll.estimated_document_count() == 16
        assert db.command("count", "no_such_collection")["n"] == 0

    def test_count_without_query_on_capped_collection(self, db):
        db.drop_collection("count_capped")
        capped = db.create_collection("count_capped", capped=True, size=4096, max=5)
        capped.insert_many([{"i": i} for i in range(9)])
        assert db.command("count", "count_capped")["n"] == 5
        assert [d["i"] for d in capped.find()] == [4, 5, 6, 7, 8]
        assert capped.estimated_document_count() == 5

    def test_distinct(self, coll):
        coll.insert_many([{"a": 1, "k": "x"}, {"a": 2, "k": "y"}, {"a": 1, "k": "y"}, {"k": "z"}])
        assert sorted(coll.distinct("a")) == [1, 2]
        assert sorted(coll.distinct("k", {"a": 1})) == ["x", "y"]

    def test_distinct_expands_arrays(self, coll):
        coll.insert_many([{"tags": ["a", "b"]}, {"tags": ["b", "c"]}, {"tags": "d"}])
        assert sorted(coll.distinct("tags")) == ["a", "b", "c", "d"]

    def test_distinct_dotted(self, coll):
        coll.insert_many([{"x": {"y": 1}}, {"x": [{"y": 2}, {"y": 1}]}])
        assert sorted(coll.distinct("x.y")) == [1, 2]

    def test_distinct_over_many_values_keeps_each_once_across_numeric_types(self, coll):
        # Equal numbers of different types are one value (the first met), as are equal
        # documents; 30,000 distinct values come back once each, in order.
        coll.insert_many([{"v": i} for i in range(30_000)])
        coll.insert_many([{"v": float(i)} for i in range(0, 30_000, 7)])
        coll.insert_many([{"v": Int64(i)} for i in range(0, 30_000, 11)])
        coll.insert_many([{"v": {"a": 1}}, {"v": {"a": 1.0}}, {"v": None}, {"v": "s"}, {"v": "s"}])
        got = coll.distinct("v")
        assert got[:1] == [None] and got[1:30_001] == list(range(30_000))
        assert all(type(x) is int for x in got[1:30_001])
        assert got[30_001:] == ["s", {"a": 1}]


class TestBulkWrite:
    OPS = [InsertOne({"_id": 1}), InsertOne({"_id": 2}), InsertOne({"_id": 1}), InsertOne({"_id": 3})]

    def test_ordered_stops_at_duplicate(self, coll):
        with pytest.raises(BulkWriteError) as exc:
            coll.bulk_write(self.OPS, ordered=True)
        details = exc.value.details
        assert details["nInserted"] == 2
        assert len(details["writeErrors"]) == 1
        assert details["writeErrors"][0]["index"] == 2
        assert details["writeErrors"][0]["code"] == 11000
        assert sorted(d["_id"] for d in coll.find()) == [1, 2]

    def test_unordered_continues(self, coll):
        with pytest.raises(BulkWriteError) as exc:
            coll.bulk_write(self.OPS, ordered=False)
        details = exc.value.details
        assert details["nInserted"] == 3
        assert [e["index"] for e in details["writeErrors"]] == [2]
        assert sorted(d["_id"] for d in coll.find()) == [1, 2, 3]

    def test_mixed_ops(self, coll):
        coll.insert_many([{"_id": i, "v": 0} for i in range(5)])
        res = coll.bulk_write([
            InsertOne({"_id": 10, "v": 1}),
            UpdateOne({"_id": 0}, {"$set": {"v": 5}}),
            UpdateMany({"_id": {"$in": [1, 2]}}, {"$inc": {"v": 1}}),
            ReplaceOne({"_id": 3}, {"v": 9}),
            DeleteOne({"_id": 4}),
            UpdateOne({"_id": 20}, {"$set": {"v": 7}}, upsert=True),
            DeleteMany({"v": 1}),
        ])
        assert res.inserted_count == 1
        assert res.matched_count == 4
        assert res.modified_count == 4
        assert res.deleted_count == 1 + 3
        assert res.upserted_ids == {5: 20}
        assert {d["_id"]: d["v"] for d in coll.find()} == {0: 5, 3: 9, 20: 7}

    def test_ordered_update_error_midway(self, coll):
        coll.insert_one({"_id": 1, "s": "text"})
        with pytest.raises(BulkWriteError) as exc:
            coll.bulk_write([
                UpdateOne({"_id": 1}, {"$set": {"t": 1}}),
                UpdateOne({"_id": 1}, {"$inc": {"s": 1}}),
                UpdateOne({"_id": 1}, {"$set": {"u": 1}}),
            ])
        d = exc.value.details
        assert d["nModified"] == 1
        assert d["writeErrors"][0]["index"] == 1
        assert d["writeErrors"][0]["code"] == 14
        assert "u" not in coll.find_one()


class TestWriteConcerns:
    def test_retryable_writes(self, server, request):
        name = "t_retryable"
        with MongoClient(server.uri(directConnection="true"), retryWrites=True) as c:
            coll = c[name].c
            coll.insert_one({"_id": 1, "n": 0})
            coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
            doc = coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}},
                                           return_document=ReturnDocument.AFTER)
            assert doc["n"] == 2
            coll.delete_one({"_id": 1})
            assert coll.count_documents({}) == 0
            c.drop_database(name)

    def test_retryable_write_with_txn_number_is_not_reapplied(self, db, server):
        # Same lsid + txnNumber twice: the second is a retry and must not re-apply.
        # (Raw socket: pymongo would replace our lsid with its own.)
        sock = wire.connect(server.port)
        try:
            lsid = {"id": uuid.uuid4()}
            lsid_bin = {"id": Binary.from_uuid(lsid["id"])}
            cmd = {"update": "c", "$db": db.name, "lsid": lsid_bin, "txnNumber": Int64(1),
                   "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}, "upsert": True}]}
            r1 = wire.command(sock, dict(cmd))
            r2 = wire.command(sock, dict(cmd))
            assert r1["ok"] == 1 and r2["ok"] == 1, (r1, r2)
            assert r2["n"] == r1["n"] == 1
        finally:
            sock.close()
        assert db.c.find_one({"_id": 1})["n"] == 1, "retry with the same txnNumber was re-applied"

    def test_multi_document_writes_are_not_retryable(self, db, server):
        # As mongod: an update with multi=true or a delete with limit=0 sent with a
        # txnNumber (outside a transaction) fails as its statement's write error, and
        # the statements before it are applied.
        db.c.insert_many([{"_id": i, "n": 0} for i in range(3)])
        sock = wire.connect(server.port)
        try:
            lsid = {"id": Binary.from_uuid(uuid.uuid4())}
            up = wire.command(sock, {
                "update": "c", "$db": db.name, "lsid": lsid, "txnNumber": Int64(1),
                "updates": [{"q": {"_id": 0}, "u": {"$inc": {"n": 1}}},
                            {"q": {}, "u": {"$inc": {"n": 1}}, "multi": True}]})
            assert up["ok"] == 1 and up["n"] == 1, up
            [err] = up["writeErrors"]
            assert (err["index"], err["code"]) == (1, 72), err
            assert err["errmsg"] == "Cannot use (or request) retryable writes with multi=true"
            rm = wire.command(sock, {
                "delete": "c", "$db": db.name, "lsid": lsid, "txnNumber": Int64(2),
                "deletes": [{"q": {}, "limit": 0}]})
            assert rm["ok"] == 1 and rm["n"] == 0, rm
            [err] = rm["writeErrors"]
            assert (err["index"], err["code"]) == (0, 72), err
            assert err["errmsg"] == "Cannot use (or request) retryable writes with limit=0"
        finally:
            sock.close()
        assert sorted((d["_id"], d["n"]) for d in db.c.find()) == [(0, 1), (1, 0), (2, 0)]

    def test_retryable_write_older_than_the_sessions_last_is_refused(self, db, server):
        # As mongod: a session's retryable writes go forward; once txnNumber 2 ran, a
        # (late) retry of txnNumber 1 fails with TransactionTooOld instead of re-applying.
        sock = wire.connect(server.port)
        try:
            lsid = {"id": Binary.from_uuid(uuid.uuid4())}

            def inc(n):
                return wire.command(sock, {
                    "update": "c", "$db": db.name, "lsid": lsid, "txnNumber": Int64(n),
                    "updates": [{"q": {"_id": "old"}, "u": {"$inc": {"n": 1}}, "upsert": True}]})

            assert inc(1)["ok"] == 1
            assert inc(2)["ok"] == 1
            again = inc(2)
            assert again["ok"] == 1 and again["n"] == 1, again
            late = inc(1)
            assert late["ok"] == 0 and late["code"] == 225, late
            assert late["codeName"] == "TransactionTooOld", late
        finally:
            sock.close()
        assert db.c.find_one({"_id": "old"})["n"] == 2

    def test_a_retry_runs_only_the_statements_that_did_not_run(self, db, server):
        # As mongod: a retry skips the statements its first attempt ran (listed in
        # retriedStmtIds) and runs the others again, so a statement that failed the
        # first time may succeed, and none is applied twice.
        db.c.insert_many([{"_id": "a", "n": 0}, {"_id": "dup"}])
        sock = wire.connect(server.port)
        try:
            lsid = {"id": Binary.from_uuid(uuid.uuid4())}
            insert = {"insert": "c", "$db": db.name, "lsid": lsid, "txnNumber": Int64(1),
                      "documents": [{"_id": "x"}, {"_id": "dup"}, {"_id": "y"}]}
            first = wire.command(sock, dict(insert))
            assert first["n"] == 1 and first["writeErrors"][0]["index"] == 1, first
            db.c.delete_one({"_id": "dup"})
            retried = wire.command(sock, dict(insert))
            assert retried["ok"] == 1 and retried["n"] == 3, retried
            assert "writeErrors" not in retried and retried["retriedStmtIds"] == [0], retried

            # An update whose second statement fails: the retry does not apply the
            # first again, and the second fails again at its own index.
            update = {"update": "c", "$db": db.name, "lsid": lsid, "txnNumber": Int64(2),
                      "updates": [{"q": {"_id": "a"}, "u": {"$inc": {"n": 1}}},
                                  {"q": {"_id": "x"}, "u": {"$set": {"_id": "z"}}},
                                  {"q": {"_id": "y"}, "u": {"$inc": {"n": 1}}}]}
            first = wire.command(sock, dict(update))
            again = wire.command(sock, dict(update))
            for reply in (first, again):
                assert reply["n"] == 1 and reply["nModified"] == 1, reply
                assert [e["index"] for e in reply["writeErrors"]] == [1], reply
                assert reply["writeErrors"][0]["code"] == 66, reply
            assert again["retriedStmtIds"] == [0], again
        finally:
            sock.close()
        assert db.c.find_one({"_id": "a"})["n"] == 1, "the retry applied statement 0 twice"
        assert sorted(d["_id"] for d in db.c.find()) == ["a", "dup", "x", "y"]

    def test_unacknowledged_insert(self, coll):
        unack = coll.with_options(write_concern=WriteConcern(w=0))
        res = unack.insert_one({"_id": "w0"})
        assert res.acknowledged is False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if coll.find_one({"_id": "w0"}):
                break
            time.sleep(0.05)
        assert coll.find_one({"_id": "w0"}) == {"_id": "w0"}

    def test_journaled_write(self, coll):
        res = coll.with_options(write_concern=WriteConcern(j=True)).insert_one({"a": 1})
        assert res.acknowledged
        assert coll.count_documents({}) == 1

    def test_majority_write(self, coll):
        coll.with_options(write_concern=WriteConcern(w="majority")).insert_one({"a": 1})
        assert coll.count_documents({}) == 1

    def test_w2_is_unsatisfiable(self, coll):
        with pytest.raises(WriteConcernError) as exc:
            coll.with_options(write_concern=WriteConcern(w=2, wtimeout=1000)).insert_one({"a": 1})
        assert exc.value.code == 100, exc.value.details


def test_find_and_modify_and_distinct_over_many_documents_read_as_they_go(coll):
    """findAndModify with a sort no index serves takes the first match in sort order
    (reading the matches one batch at a time), and distinct takes each document's
    values as it reads them: the answers are those of a full sort and a full read."""
    coll.insert_many([{"_id": i, "x": (i * 7919) % 37, "tags": [i % 5, f"t{i % 3}"]}
                      for i in range(1000)])
    order = sorted(range(1000), key=lambda i: (-((i * 7919) % 37), i))
    for expected in order[:5]:
        got = coll.find_one_and_update({"x": {"$gte": 0}}, {"$set": {"x": -1}},
                                       sort=[("x", -1), ("_id", 1)])
        assert got["_id"] == expected
    assert sorted(coll.distinct("tags"), key=str) == sorted([0, 1, 2, 3, 4, "t0", "t1", "t2"], key=str)
    assert sorted(coll.distinct("x")) == sorted({-1} | {(i * 7919) % 37 for i in order[5:]})


def test_update_many_and_delete_many_past_one_commit_write_each_match_once(coll):
    """An updateMany or deleteMany writing more than one commit's bytes (8 MiB) goes
    on in further commits: every match is written once, also when the update moves
    each document's entry ahead in the index the write walks, and a change stream
    sees one event per document."""
    pad = "p" * 4096
    count = 2600
    coll.insert_many([{"_id": i, "x": i, "pad": pad} for i in range(count)])
    coll.create_index("x")
    with coll.watch() as stream:
        res = coll.update_many({"x": {"$gte": 0, "$lt": 6000}}, {"$inc": {"x": 5000, "n": 1}}, hint="x_1")
        assert (res.matched_count, res.modified_count) == (count, count)
        ids = []
        give_up = time.monotonic() + 120  # a guard against hanging, not a speed check
        while len(ids) < count and time.monotonic() < give_up:
            change = stream.try_next()
            if change is not None:
                assert change["operationType"] == "update"
                assert change["updateDescription"]["updatedFields"] == {"x": change["documentKey"]["_id"] + 5000, "n": 1}
                ids.append(change["documentKey"]["_id"])
        assert sorted(ids) == list(range(count))
    assert {d["_id"]: (d["x"], d["n"]) for d in coll.find({}, {"pad": 0})} == {
        i: (i + 5000, 1) for i in range(count)}
    assert coll.delete_many({"x": {"$gte": 5001}}).deleted_count == count - 1
    assert [d["_id"] for d in coll.find({}, {"_id": 1})] == [0]


def test_update_many_keeps_the_documents_it_changed_before_one_failed_validation(db):
    """As mongod, which writes each document of an updateMany on its own: a document
    failing the validator ends the update with DocumentValidationFailed, the ones
    changed before it stay changed, the ones after it are not touched."""
    db.drop_collection("validated_many")
    coll = db.create_collection("validated_many", validator={"x": {"$lte": 5}})
    coll.insert_many([{"_id": i, "x": x} for i, x in enumerate([0, 1, 4, 0, 1])])
    with pytest.raises(WriteError) as exc:
        coll.update_many({}, {"$inc": {"x": 2}})
    assert exc.value.code == 121, exc.value.details
    assert [d["x"] for d in coll.find().sort("_id", 1)] == [2, 3, 4, 0, 1]

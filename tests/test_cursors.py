"""Cursor behaviour: batching, getMore, killCursors, limits, large results."""

import random

import bson
import pytest
from bson import Int64
from pymongo import MongoClient, monitoring
from pymongo.errors import OperationFailure


class Recorder(monitoring.CommandListener):
    def __init__(self):
        self.commands = []

    def started(self, event):
        self.commands.append(event.command_name)

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


@pytest.fixture
def recorded(server, db):
    rec = Recorder()
    c = MongoClient(server.uri(directConnection="true"), event_listeners=[rec])
    yield c[db.name], rec
    c.close()


class TestBatching:
    def test_batch_size_many_docs(self, coll, recorded):
        coll.insert_many([{"_id": i} for i in range(1050)])
        rdb, rec = recorded
        got = [d["_id"] for d in rdb[coll.name].find().sort("_id", 1).batch_size(100)]
        assert got == list(range(1050))
        assert rec.commands.count("find") == 1
        assert rec.commands.count("getMore") >= 10, rec.commands

    def test_first_batch_default_101(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(150)])
        reply = db.command("find", coll.name)
        assert len(reply["cursor"]["firstBatch"]) == 101
        assert reply["cursor"]["id"] != 0
        more = db.command("getMore", reply["cursor"]["id"], collection=coll.name)
        assert len(more["cursor"]["nextBatch"]) == 49
        assert more["cursor"]["id"] == 0, "exhausted cursor reports id 0"

    def test_exhausted_in_first_batch_has_id_zero(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(5)])
        reply = db.command("find", coll.name, batchSize=10)
        assert reply["cursor"]["id"] == 0
        assert reply["cursor"]["ns"] == f"{db.name}.{coll.name}"

    def test_batch_size_zero(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(3)])
        reply = db.command("find", coll.name, batchSize=0)
        assert reply["cursor"]["firstBatch"] == []
        assert reply["cursor"]["id"] != 0
        more = db.command("getMore", reply["cursor"]["id"], collection=coll.name)
        assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [0, 1, 2]


class TestLimitSkip:
    @pytest.fixture
    def hundred(self, coll):
        coll.insert_many([{"_id": i} for i in range(100)])
        return coll

    @pytest.mark.parametrize("skip,limit,batch,expected", [
        (0, 5, 0, list(range(5))),
        (10, 5, 2, list(range(10, 15))),
        (95, 10, 3, list(range(95, 100))),
        (100, 5, 0, []),
        (0, 0, 7, list(range(100))),
        (30, 40, 16, list(range(30, 70))),
    ])
    def test_combos(self, hundred, skip, limit, batch, expected):
        cur = hundred.find().sort("_id", 1).skip(skip).limit(limit)
        if batch:
            cur = cur.batch_size(batch)
        assert [d["_id"] for d in cur] == expected

    def test_negative_limit_single_batch(self, hundred, db):
        reply = db.command("find", hundred.name, sort={"_id": 1}, limit=3, singleBatch=True)
        assert [d["_id"] for d in reply["cursor"]["firstBatch"]] == [0, 1, 2]
        assert reply["cursor"]["id"] == 0

    def test_limit_with_batch_size_closes_cursor(self, hundred, db):
        reply = db.command("find", hundred.name, sort={"_id": 1}, limit=4, batchSize=2)
        cid = reply["cursor"]["id"]
        more = db.command("getMore", cid, collection=hundred.name, batchSize=10)
        assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3]
        assert more["cursor"]["id"] == 0


class TestCursorLifecycle:
    def test_close_kills_cursor(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(50)])
        cursor = coll.find().batch_size(5)
        next(cursor)
        cid = cursor.cursor_id
        assert cid, "cursor should be open on the server"
        cursor.close()
        with pytest.raises(OperationFailure) as exc:
            db.command("getMore", Int64(cid), collection=coll.name)
        assert exc.value.code == 43
        assert exc.value.details["codeName"] == "CursorNotFound"

    def test_kill_cursors_command(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(10)])
        cid = db.command("find", coll.name, batchSize=2)["cursor"]["id"]
        reply = db.command("killCursors", coll.name, cursors=[cid, Int64(123456789)])
        assert reply["cursorsKilled"] == [cid]
        assert reply["cursorsNotFound"] == [123456789]
        with pytest.raises(OperationFailure) as exc:
            db.command("getMore", cid, collection=coll.name)
        assert exc.value.code == 43

    def test_getmore_unknown_id(self, coll, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("getMore", Int64(987654321), collection=coll.name)
        assert exc.value.code == 43

    def test_getmore_wrong_namespace(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(10)])
        cid = db.command("find", coll.name, batchSize=2)["cursor"]["id"]
        with pytest.raises(OperationFailure) as exc:
            db.command("getMore", cid, collection="someother")
        assert exc.value.code == 13

    def test_find_missing_collection(self, db):
        reply = db.command("find", "missing_coll")
        assert reply["cursor"]["firstBatch"] == [] and reply["cursor"]["id"] == 0

    def test_cursor_sees_consistent_results_after_concurrent_delete(self, coll):
        coll.insert_many([{"_id": i} for i in range(300)])
        cur = coll.find().sort("_id", 1).batch_size(50)
        first = [next(cur)["_id"] for _ in range(50)]
        coll.delete_many({"_id": {"$gte": 250}})
        rest = [d["_id"] for d in cur]
        assert first == list(range(50))
        assert rest[:200] == list(range(50, 250)), "documents not deleted must still be returned"
        assert len(rest) == len(set(rest)), "no duplicates"


class TestLargeResults:
    def test_result_above_16mib_split_across_batches(self, coll, db):
        blob = "x" * (1024 * 1024)
        for i in range(24):
            coll.insert_one({"_id": i, "blob": blob})
        reply = db.command("find", coll.name)
        first = reply["cursor"]["firstBatch"]
        assert 0 < len(first) < 24
        assert len(bson.encode(reply)) <= 16 * 1024 * 1024 + 16 * 1024
        assert reply["cursor"]["id"] != 0
        got = [d["_id"] for d in first]
        cid = reply["cursor"]["id"]
        while cid:
            more = db.command("getMore", cid, collection=coll.name)
            assert len(bson.encode(more)) <= 16 * 1024 * 1024 + 16 * 1024
            got += [d["_id"] for d in more["cursor"]["nextBatch"]]
            cid = more["cursor"]["id"]
        assert got == list(range(24))

    def test_pymongo_iterates_large_docs(self, coll):
        blob = "y" * (1024 * 1024)
        coll.insert_many([{"_id": i, "blob": blob} for i in range(20)])
        assert [d["_id"] for d in coll.find({}, {"blob": 0})] == list(range(20))
        assert sum(len(d["blob"]) for d in coll.find()) == 20 * len(blob)

    def test_sort_without_index_5000_docs(self, coll):
        rnd = random.Random(42)
        values = [rnd.randint(0, 10**6) for _ in range(5000)]
        coll.insert_many([{"v": v, "pad": "p" * 50} for v in values])
        got = [d["v"] for d in coll.find({}, {"v": 1, "_id": 0}).sort("v", -1)]
        assert got == sorted(values, reverse=True)


# ---- min / max ------------------------------------------------------------

def test_min_max_bound_the_hinted_index(coll):
    coll.create_index("j")
    coll.create_index([("j", 1), ("k", -1)])
    coll.insert_many([{"j": j, "k": j} for j in range(10)])
    def js(cursor):
        return [d["j"] for d in cursor]
    assert js(coll.find().max([("j", 3)]).hint("j_1")) == [0, 1, 2]
    assert js(coll.find().min([("j", 7)]).hint("j_1")) == [7, 8, 9]
    assert js(coll.find({"j": {"$ne": 4}}).min([("j", 3)]).max([("j", 6)]).hint("j_1")) == [3, 5]
    # Compound index with a descending field: bounds are in index order.
    assert js(coll.find().min([("j", 2), ("k", 100)]).max([("j", 4), ("k", 0)]).hint("j_1_k_-1")) == [2, 3, 4]
    assert js(coll.find().min([("j", 5)]).max([("j", 5)]).hint("j_1")) == []
    # The legacy $min modifier inside a $query filter.
    assert js(coll.find({"$query": {}, "$min": {"j": 8}}, hint="j_1")) == [8, 9]


def test_min_max_bad_input(coll):
    from pymongo.errors import OperationFailure
    coll.create_index([("j", 1), ("k", 1)])
    coll.insert_one({"j": 1, "k": 1})
    cases = [
        (coll.find().max([("k", 3), ("j", 3)]).hint("j_1_k_1"), 51174),         # wrong order
        (coll.find().max([("j", 3)]).hint("j_1_k_1"), 51174),                 # not every key field
    ]
    for cursor, code in cases:
        with pytest.raises(OperationFailure) as exc:
            cursor.to_list()
        assert exc.value.code == code
    with pytest.raises(OperationFailure) as exc:   # no hint (pymongo refuses it itself)
        coll.database.command("find", coll.name, max={"j": 3, "k": 3})
    assert exc.value.code == 51173
    with pytest.raises(OperationFailure) as exc:
        coll.database.command("find", coll.name, min=5, hint="j_1_k_1")
    assert exc.value.code == 14


def test_scan_batch_filled_by_the_last_document_leaves_the_cursor_open(db):
    """As mongod: an unsorted find notices the end of its scan only when asked for one
    more document, so a batch ending exactly at the last one keeps the cursor open and
    the next getMore returns an empty, final batch."""
    db.ex.insert_many([{"_id": i} for i in range(3)])
    first = db.command("find", "ex", batchSize=1)["cursor"]
    assert [d["_id"] for d in first["firstBatch"]] == [0] and first["id"] != 0
    ids = []
    cursor_id = first["id"]
    while True:
        more = db.command("getMore", cursor_id, collection="ex", batchSize=1)["cursor"]
        ids.append([d["_id"] for d in more["nextBatch"]])
        if more["id"] == 0:
            break
    assert ids == [[1], [2], []]
    # A batch the scan cannot fill ends the cursor right away, and so does a limit.
    assert db.command("find", "ex", batchSize=5)["cursor"]["id"] == 0
    assert db.command("find", "ex", batchSize=2, limit=2)["cursor"]["id"] == 0

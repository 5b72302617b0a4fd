"""The BSON number types of the reply fields drivers read, as mongod sends them.

Drivers that decode 64-bit ints as BigInt or Long (the Node driver with
`useBigInt64: true`, mongosh's `Long('1')`) break or show them differently, so a
32-bit int where mongod sends one matters. PyMongo decodes a BSON int64 as
`bson.int64.Int64` and an int32 as a plain `int`, so the decoded types tell them apart
(checked first, against values stored with each type)."""

import os

import pytest
from bson.int64 import Int64
from pymongo.errors import OperationFailure

INT32 = "int"
INT64 = "long"
DOUBLE = "double"


def bson_type(v):
    """The BSON number type a value was decoded from."""
    if isinstance(v, bool):
        return "bool"
    if type(v) is Int64:
        return INT64
    if type(v) is int:
        return INT32
    if type(v) is float:
        return DOUBLE
    return type(v).__name__


def types_of(doc, *fields):
    return {f: bson_type(doc[f]) for f in fields}


def test_decoded_types_tell_int32_from_int64(db):
    db.t.insert_one({"_id": 1, "i": 1, "l": Int64(1), "d": 1.0})
    assert types_of(db.t.find_one(), "i", "l", "d") == {"i": INT32, "l": INT64, "d": DOUBLE}


def test_insert_update_delete_counts_are_int32(db):
    reply = db.command("insert", "c", documents=[{"_id": 1, "a": 1}, {"_id": 2, "a": 1}])
    assert reply["n"] == 2 and bson_type(reply["n"]) == INT32
    reply = db.command("update", "c", updates=[
        {"q": {"a": 1}, "u": {"$set": {"b": 1}}, "multi": True},
        {"q": {"_id": 9}, "u": {"$set": {"b": 2}}, "upsert": True},
    ])
    assert types_of(reply, "n", "nModified") == {"n": INT32, "nModified": INT32}
    assert (reply["n"], reply["nModified"]) == (3, 2)
    assert [bson_type(u["index"]) for u in reply["upserted"]] == [INT32]
    reply = db.command("delete", "c", deletes=[{"q": {"a": 1}, "limit": 0}])
    assert reply["n"] == 2 and bson_type(reply["n"]) == INT32


def test_write_errors_and_find_and_modify_counts_are_int32(db):
    reply = db.command("insert", "c", documents=[{"_id": 1}, {"_id": 1}], ordered=False)
    assert bson_type(reply["n"]) == INT32
    (error,) = reply["writeErrors"]
    assert types_of(error, "index", "code") == {"index": INT32, "code": INT32}
    reply = db.command("findAndModify", "c", query={"_id": 1}, update={"$set": {"x": 1}})
    assert bson_type(reply["lastErrorObject"]["n"]) == INT32


def test_transaction_write_counts_are_int32(client, db):
    db.create_collection("c")
    with client.start_session() as s, s.start_transaction():
        reply = db.command("insert", "c", documents=[{"_id": 1}], session=s)
        assert bson_type(reply["n"]) == INT32
        reply = db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"a": 1}}}], session=s)
        assert types_of(reply, "n", "nModified") == {"n": INT32, "nModified": INT32}


def test_count_and_index_commands_use_int32(db):
    db.c.insert_many([{"a": i} for i in range(3)])
    reply = db.command("count", "c")
    assert reply["n"] == 3 and bson_type(reply["n"]) == INT32
    reply = db.command("createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1"}])
    assert types_of(reply, "numIndexesBefore", "numIndexesAfter") == {
        "numIndexesBefore": INT32, "numIndexesAfter": INT32}
    specs = db.command("listIndexes", "c")["cursor"]
    assert bson_type(specs["id"]) == INT64
    assert {bson_type(s["v"]) for s in specs["firstBatch"]} == {INT32}
    assert bson_type(db.command("dropIndexes", "c", index="a_1")["nIndexesWas"]) == INT32
    assert bson_type(db.command("drop", "c")["nIndexesWas"]) == INT32


def test_cursor_ids_stay_int64(db):
    db.c.insert_many([{} for _ in range(5)])
    reply = db.command("find", "c", batchSize=1)
    cursor_id = reply["cursor"]["id"]
    assert bson_type(cursor_id) == INT64
    reply = db.command("killCursors", "c", cursors=[cursor_id])
    assert [bson_type(i) for i in reply["cursorsKilled"]] == [INT64]


def test_hello_connection_id_is_int32(client):
    assert bson_type(client.admin.command("hello")["connectionId"]) == INT32


def test_coll_stats_numbers_are_mongods_types(db):
    db.create_collection("cap", capped=True, size=1 << 20, max=100)
    db.cap.insert_many([{"x": "y" * 50} for _ in range(4)])
    db.cap.create_index("x")
    stats = db.command("collStats", "cap")
    int32_fields = ("size", "count", "avgObjSize", "storageSize", "freeStorageSize",
                    "nindexes", "totalIndexSize", "totalSize", "scaleFactor", "max", "maxSize")
    assert types_of(stats, *int32_fields) == {f: INT32 for f in int32_fields}
    assert {bson_type(v) for v in stats["indexSizes"].values()} == {INT32}
    (agg,) = db.cap.aggregate([{"$collStats": {"storageStats": {}, "count": {}}}])
    assert types_of(agg["storageStats"], *int32_fields) == {f: INT32 for f in int32_fields}
    assert bson_type(agg["count"]) == INT32


def test_db_stats_numbers_are_mongods_types(db):
    db.c.insert_one({"a": 1})
    stats = db.command("dbStats")
    assert types_of(stats, "collections", "views", "objects", "indexes", "scaleFactor") == {
        f: INT64 for f in ("collections", "views", "objects", "indexes", "scaleFactor")}
    sizes = ("avgObjSize", "dataSize", "storageSize", "indexSize", "totalSize",
             "fsUsedSize", "fsTotalSize")
    assert types_of(stats, *sizes) == {f: DOUBLE for f in sizes}


def test_stats_report_index_sizes(db):
    db.a.insert_many([{"x": "v" * 20, "n": i} for i in range(50)])
    db.a.create_index("x")
    db.b.insert_one({"y": 1})
    a = db.command("collStats", "a")
    b = db.command("collStats", "b")
    assert set(a["indexSizes"]) == {"_id_", "x_1"}
    # Every index entry holds at least its 20-byte key.
    assert a["indexSizes"]["x_1"] > 50 * 20
    assert a["indexSizes"]["_id_"] > 0
    assert a["totalIndexSize"] == sum(a["indexSizes"].values())
    assert a["totalSize"] == a["storageSize"] + a["totalIndexSize"]
    halved = db.command("collStats", "a", scale=2)
    assert halved["indexSizes"]["x_1"] == a["indexSizes"]["x_1"] // 2
    stats = db.command("dbStats")
    assert stats["indexSize"] == a["totalIndexSize"] + b["totalIndexSize"]
    assert stats["totalSize"] == stats["dataSize"] + stats["indexSize"]
    db.a.drop_index("x_1")
    assert db.command("dbStats")["indexSize"] < stats["indexSize"]


def test_db_stats_report_the_data_directory_filesystem(db, server):
    db.c.insert_one({})
    before = os.statvfs(server.dbpath)
    stats = db.command("dbStats")
    after = os.statvfs(server.dbpath)
    total = before.f_blocks * before.f_frsize
    assert stats["fsTotalSize"] == total
    used = sorted((s.f_blocks - s.f_bavail) * s.f_frsize for s in (before, after))
    # Other processes may write meanwhile: between the two readings, give or take 64 MiB.
    slack = 64 << 20
    assert used[0] - slack <= stats["fsUsedSize"] <= used[1] + slack
    scaled = db.command("dbStats", scale=1024)
    assert scaled["fsTotalSize"] == total // 1024


def test_coll_stats_of_a_missing_collection_fail(db):
    with pytest.raises(OperationFailure) as exc:
        db.command("collStats", "nope")
    assert exc.value.code == 26

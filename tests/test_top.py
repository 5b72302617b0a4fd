"""The top command: mongod's reply shape, admin only, and per-collection counts and
times that move with the operations run on each collection."""

import pytest
from pymongo.errors import OperationFailure

GROUPS = ["total", "readLock", "writeLock", "queries", "getmore", "insert", "update",
          "remove", "commands"]


def totals(client):
    return client.admin.command("top")["totals"]


def test_shape_and_admin_only(client, db, coll):
    coll.insert_one({"x": 1})
    reply = client.admin.command("top")
    assert reply["ok"] == 1
    assert reply["totals"]["note"] == "all times in microseconds"
    usage = reply["totals"][coll.full_name]
    assert list(usage) == GROUPS
    for group in GROUPS:
        assert set(usage[group]) == {"time", "count"}
        assert isinstance(usage[group]["count"], int) and usage[group]["count"] >= 0
        assert isinstance(usage[group]["time"], int) and usage[group]["time"] >= 0
    with pytest.raises(OperationFailure) as e:
        db.command("top")
    assert e.value.code == 13


def test_counts_move_with_operations(client, coll):
    coll.insert_many([{"_id": i} for i in range(10)])
    before = totals(client)[coll.full_name]
    coll.insert_one({"_id": 100})
    coll.update_one({"_id": 1}, {"$set": {"y": 1}})
    coll.update_one({"_id": 2}, {"$set": {"y": 1}})
    coll.delete_one({"_id": 3})
    list(coll.find().batch_size(2))  # a find and getMores
    coll.count_documents({})
    after = totals(client)[coll.full_name]

    def moved(group):
        return after[group]["count"] - before[group]["count"]

    assert moved("insert") == 1
    assert moved("update") == 2
    assert moved("remove") == 1
    assert moved("queries") == 1
    assert moved("getmore") >= 4
    assert moved("commands") >= 1  # the count's aggregate
    assert moved("writeLock") == 4
    assert moved("total") == moved("readLock") + moved("writeLock")
    assert moved("total") == sum(moved(g) for g in GROUPS[3:])
    assert after["total"]["time"] >= before["total"]["time"]
    assert after["total"]["time"] == after["readLock"]["time"] + after["writeLock"]["time"]


def test_collections_are_counted_apart_and_dropped_ones_leave(client, db):
    db.a.insert_one({})
    db.b.find_one()
    db.b.find_one()
    t = totals(client)
    assert t[db.a.full_name]["insert"]["count"] == 1
    assert t[db.a.full_name]["queries"]["count"] == 0
    assert t[db.b.full_name]["queries"]["count"] == 2
    db.a.drop()
    assert db.a.full_name not in totals(client)
    assert db.b.full_name in totals(client)
    db.client.drop_database(db.name)
    assert not [ns for ns in totals(client) if ns.startswith(db.name + ".")]

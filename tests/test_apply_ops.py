"""applyOps: oplog-style operations applied one by one through the ordinary writes
(so they are in the oplog and change streams see them), preCondition, alwaysUpsert,
DDL ops, and mongod's errors for bad operations."""

import pytest
from bson import SON, Binary
from pymongo.errors import OperationFailure

from conftest import next_event


def apply_ops(db, ops, **opts):
    return db.command(SON([("applyOps", ops)] + list(opts.items())))


def failure(db, ops, **opts):
    with pytest.raises(OperationFailure) as e:
        apply_ops(db, ops, **opts)
    return e.value


def test_insert_update_delete_and_noop(db, coll):
    coll.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}])
    ns = coll.full_name
    reply = apply_ops(db, [
        {"op": "i", "ns": ns, "o": {"_id": 3, "x": 3}},
        {"op": "n", "ns": "", "o": {"msg": "a note"}},
        {"op": "u", "ns": ns, "o": {"$set": {"x": 10}}, "o2": {"_id": 1}},
        {"op": "u", "ns": ns, "o": {"_id": 2, "y": "replaced"}, "o2": {"_id": 2}},
        {"op": "d", "ns": ns, "o": {"_id": 3}},
    ])
    # The no-op is skipped, as mongod does.
    assert reply["applied"] == 4
    assert reply["results"] == [True, True, True, True]
    assert list(coll.find().sort("_id")) == [{"_id": 1, "x": 10}, {"_id": 2, "y": "replaced"}]


def test_runs_on_any_database_and_writes_the_oplog(client, db, coll):
    coll.insert_one({"_id": 0})
    reply = client.admin.command("applyOps", [{"op": "i", "ns": coll.full_name, "o": {"_id": 7}}])
    assert reply["results"] == [True]
    entry = client.local.oplog.rs.find_one({"ns": coll.full_name, "op": "i", "o._id": 7})
    assert entry is not None and entry["o"] == {"_id": 7}


def test_diff_updates_as_the_oplog_writes_them(db, coll):
    coll.insert_one({"_id": 1, "a": 1, "gone": True, "sub": {"k": 1}, "arr": [1, 2, 3, 4]})
    apply_ops(db, [{"op": "u", "ns": coll.full_name, "o2": {"_id": 1}, "o": {
        "$v": 2, "diff": {"u": {"a": 2}, "i": {"new": 1}, "d": {"gone": False},
                          "ssub": {"u": {"k": 2}}, "sarr": {"a": True, "l": 3, "u1": 20}}}}])
    assert coll.find_one() == {"_id": 1, "a": 2, "sub": {"k": 2}, "arr": [1, 20, 3], "new": 1}


def test_applies_its_own_oplog_entries(client, db, coll):
    coll.insert_one({"_id": 1, "a": 1, "arr": [1, 2]})
    coll.update_one({"_id": 1}, {"$set": {"a": 5, "arr.1": 9}, "$unset": {"missing": ""}})
    entries = list(client.local.oplog.rs.find({"ns": coll.full_name}).sort("$natural", 1))
    expected = coll.find_one()
    coll.delete_many({})
    ops = [{k: e[k] for k in ("op", "ns", "o", "o2") if k in e} for e in entries]
    reply = apply_ops(db, ops)
    assert reply["results"] == [True] * len(ops)
    assert coll.find_one() == expected


def test_always_upsert(db, coll):
    coll.insert_one({"_id": 0})
    ns = coll.full_name
    reply = apply_ops(db, [{"op": "u", "ns": ns, "o": {"$set": {"x": 1}}, "o2": {"_id": 5}}])
    assert reply["results"] == [True]
    assert coll.find_one({"_id": 5}) == {"_id": 5, "x": 1}
    e = failure(db, [{"op": "u", "ns": ns, "o": {"$set": {"x": 1}}, "o2": {"_id": 6}},
                     {"op": "i", "ns": ns, "o": {"_id": 8}}],
                alwaysUpsert=False)
    assert e.code == 8
    assert e.details["errmsg"] == "applyOps had one or more errors applying ops"
    # The failed op does not stop the others.
    assert e.details["applied"] == 2 and e.details["results"] == [False, True]
    assert coll.find_one({"_id": 6}) is None and coll.find_one({"_id": 8}) is not None
    # b: true upserts whatever alwaysUpsert says.
    apply_ops(db, [{"op": "u", "ns": ns, "b": True, "o": {"$set": {"x": 1}}, "o2": {"_id": 6}}],
              alwaysUpsert=False)
    assert coll.find_one({"_id": 6}) == {"_id": 6, "x": 1}


def test_insert_of_an_existing_id_replaces_it(db, coll):
    coll.insert_one({"_id": 1, "old": True})
    apply_ops(db, [{"op": "i", "ns": coll.full_name, "o": {"_id": 1, "new": True}}])
    assert coll.find_one() == {"_id": 1, "new": True}


def test_pre_condition(db, coll):
    coll.insert_one({"_id": 1, "state": "ready"})
    ns = coll.full_name
    op = {"op": "u", "ns": ns, "o": {"$set": {"state": "done"}}, "o2": {"_id": 1}}
    e = failure(db, [op], preCondition=[{"ns": ns, "q": {"_id": 1}, "res": {"state": "other"}}])
    assert e.code == 2 and e.details["errmsg"] == "preCondition failed"
    assert e.details["got"] == {"_id": 1, "state": "ready"}
    assert e.details["whatFailed"]["res"] == {"state": "other"}
    assert coll.find_one()["state"] == "ready"
    reply = apply_ops(db, [op], preCondition=[{"ns": ns, "q": {"_id": 1}, "res": {"state": "ready"}}])
    assert reply["results"] == [True]
    assert coll.find_one()["state"] == "done"
    e = failure(db, [op], preCondition=[{"ns": ns + "_none", "q": {}, "res": {}}])
    assert e.code == 26


def test_change_streams_see_the_ops(db, coll):
    coll.insert_one({"_id": 1})
    ns = coll.full_name
    with coll.watch() as stream:
        apply_ops(db, [
            {"op": "i", "ns": ns, "o": {"_id": 2, "v": 1}},
            {"op": "u", "ns": ns, "o": {"$set": {"v": 2}}, "o2": {"_id": 2}},
            {"op": "d", "ns": ns, "o": {"_id": 1}},
        ])
        events = [next_event(stream) for _ in range(3)]
    assert [e["operationType"] for e in events] == ["insert", "update", "delete"]
    assert events[0]["fullDocument"] == {"_id": 2, "v": 1}
    assert events[1]["updateDescription"]["updatedFields"] == {"v": 2}
    assert events[2]["documentKey"] == {"_id": 1}


def test_command_ops(db):
    cmd_ns = db.name + ".$cmd"
    apply_ops(db, [{"op": "c", "ns": cmd_ns, "o": {"create": "made", "capped": True, "size": 4096}}])
    assert db.made.options()["capped"] is True
    apply_ops(db, [{"op": "c", "ns": cmd_ns,
                    "o": {"createIndexes": "made", "v": 2, "key": {"x": 1}, "name": "x_1"}}])
    assert "x_1" in db.made.index_information()
    apply_ops(db, [{"op": "c", "ns": cmd_ns, "o": {"dropIndexes": "made", "index": "x_1"}}])
    assert "x_1" not in db.made.index_information()
    apply_ops(db, [{"op": "c", "ns": cmd_ns, "o": {"applyOps": [
        {"op": "i", "ns": db.made.full_name, "o": {"_id": 1}}]}}])
    assert db.made.count_documents({}) == 1
    apply_ops(db, [{"op": "c", "ns": cmd_ns, "o": {"drop": "made"}}])
    assert "made" not in db.list_collection_names()


def test_ui_must_name_the_same_collection(db, coll):
    coll.insert_one({"_id": 1})
    uuid = db.command("listCollections", filter={"name": coll.name})["cursor"]["firstBatch"][0]["info"]["uuid"]
    reply = apply_ops(db, [{"op": "i", "ns": coll.full_name, "ui": uuid, "o": {"_id": 2}}])
    assert reply["results"] == [True]
    other = Binary(bytes(16), 4)
    e = failure(db, [{"op": "i", "ns": coll.full_name, "ui": other, "o": {"_id": 3}}])
    assert e.code == 8 and e.details["results"] == [False]


def test_errors(db, coll):
    coll.insert_one({"_id": 0})
    ns = coll.full_name
    assert failure(db, 5).code == 14
    assert failure(db, [5]).code == 14
    assert failure(db, [{"ns": ns, "o": {}}]).code == 4
    assert failure(db, [{"op": 1, "ns": ns, "o": {}}]).code == 14
    e = failure(db, [{"op": "i", "o": {}}])
    assert (e.code, e.details["errmsg"]) == (20, 'op does not contain required "ns" field: 0')
    assert failure(db, [{"op": "i", "ns": "", "o": {}}]).code == 20
    assert failure(db, [{"op": "", "ns": ns, "o": {}}]).code == 20
    assert failure(db, [{"op": "c", "ns": ns, "o": 5}]).code == 14
    assert failure(db, [{"op": "i", "ns": "nodot", "o": {}}]).code == 73
    assert failure(db, [], preCondition=5).code == 14
    e = failure(db, [{"op": "i", "ns": ns, "o": {"_id": 1}},
                     {"op": "i", "ns": db.name + ".nothing", "o": {"_id": 1}}])
    assert e.code == 26
    assert e.details["applied"] == 2 and e.details["results"] == [True, False]
    e = failure(db, [{"op": "x", "ns": ns, "o": {}}])
    assert e.code == 2
    e = failure(db, [{"op": "u", "ns": ns, "o": {"$set": {"a": 1}}}])
    assert e.code == 4
    assert apply_ops(db, [])["applied"] == 0


def test_view_changes_replay_from_the_oplog(client, db, coll):
    """Views are logged as writes to system.views (as mongod logs them); replaying those
    entries creates, modifies and drops the view, and replaying them twice is harmless
    (mongorestore --oplogReplay does this)."""
    coll.insert_many([{"_id": i, "a": i} for i in range(5)])
    db.command("create", "big", viewOn=coll.name, pipeline=[{"$match": {"a": {"$gte": 3}}}])
    db.command("collMod", "big", viewOn=coll.name, pipeline=[{"$match": {"a": {"$gte": 4}}}])
    entries = list(client.local.oplog.rs.find({"ns": f"{db.name}.system.views"}).sort("$natural", 1))
    assert [e["op"] for e in entries] == ["i", "u"]
    ops = [{k: e[k] for k in ("op", "ns", "o", "o2") if k in e} for e in entries]
    db.drop_collection("big")
    assert apply_ops(db, ops)["results"] == [True, True]
    assert [d["_id"] for d in db.big.find()] == [4]
    assert apply_ops(db, ops)["results"] == [True, True], "a second replay is idempotent"
    assert [d["_id"] for d in db.big.find()] == [4]
    drop = {"op": "d", "ns": f"{db.name}.system.views", "o": {"_id": f"{db.name}.big"}}
    assert apply_ops(db, [drop])["results"] == [True]
    assert "big" not in db.list_collection_names()

"""Driver-visible details found by running pymongo's own suite."""

import pytest
from pymongo.errors import OperationFailure


def test_regex_lookahead_in_list_collections_filter(db):
    db.users.insert_one({})
    db.create_collection("system.js")
    names = db.list_collection_names(filter={"name": {"$regex": r"^(?!system\.)"}})
    assert names == ["users"]


def test_regex_backreference_in_find(coll):
    coll.insert_many([{"s": "abab"}, {"s": "abba"}])
    assert [d["s"] for d in coll.find({"s": {"$regex": r"^(ab)\1$"}}, {"_id": 0})] == ["abab"]


def test_update_statement_with_unknown_field_is_refused(db):
    db.c.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as exc:
        db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"a": 2}}, "sort": {"a": 1}}])
    assert exc.value.code == 40415
    assert "update.updates.sort" in str(exc.value)
    assert db.c.find_one()["a"] == 1


def test_delete_statement_with_unknown_field_is_refused(db):
    with pytest.raises(OperationFailure) as exc:
        db.command("delete", "c", deletes=[{"q": {}, "limit": 0, "bogus": 1}])
    assert exc.value.code == 40415


def test_pipeline_update_that_drops_id_keeps_it(coll):
    coll.insert_one({"_id": 7, "a": 1, "b": 2})
    coll.update_one({"_id": 7}, [{"$replaceWith": {"c": {"$add": ["$a", "$b"]}}}])
    assert coll.find_one({"_id": 7}) == {"_id": 7, "c": 3}


def test_index_background_option_is_reported(coll):
    coll.create_index("a", background=True)
    assert coll.index_information()["a_1"]["background"] is True


def test_list_local_sessions_stage(client):
    assert list(client.admin.aggregate([{"$listLocalSessions": {}}])) == []


def test_let_variables_in_find_update_delete_and_aggregate(db):
    c = db.letc
    c.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}, {"_id": 3, "x": 3}])
    found = db.command("find", "letc", filter={"$expr": {"$eq": ["$x", "$$target"]}}, let={"target": 2})
    assert [d["_id"] for d in found["cursor"]["firstBatch"]] == [2]
    c.update_many({"$expr": {"$gte": ["$x", "$$min"]}}, [{"$set": {"tag": "$$label"}}], let={"min": 2, "label": "big"})
    assert [d.get("tag") for d in c.find().sort("_id", 1)] == [None, "big", "big"]
    assert c.delete_many({"$expr": {"$lt": ["$x", "$$max"]}}, let={"max": 2}).deleted_count == 1
    out = list(c.aggregate([{"$project": {"y": {"$multiply": ["$x", "$$k"]}}}], let={"k": 10}))
    assert sorted(d["y"] for d in out) == [20, 30]
    doc = c.find_one_and_update({"$expr": {"$eq": ["$_id", "$$id"]}}, {"$set": {"z": 1}}, let={"id": 3}, return_document=True)
    assert doc["z"] == 1

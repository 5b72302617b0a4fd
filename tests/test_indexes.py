"""Secondary indexes: creation, listing, uniqueness, planning, dropping, TTL."""

import datetime
import time

import pytest
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError, OperationFailure


def plan_stages(explain):
    """All 'stage' names anywhere in queryPlanner.winningPlan."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "stage" in node:
                found.append(node["stage"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(explain["queryPlanner"]["winningPlan"])
    return found


class TestCreateAndList:
    def test_single_and_compound(self, coll):
        assert coll.create_index("a") == "a_1"
        assert coll.create_index([("b", ASCENDING), ("c", DESCENDING)]) == "b_1_c_-1"
        specs = list(coll.list_indexes())
        assert specs[0]["name"] == "_id_" and dict(specs[0]["key"]) == {"_id": 1}
        by_name = {s["name"]: s for s in specs}
        assert set(by_name) == {"_id_", "a_1", "b_1_c_-1"}
        assert list(by_name["b_1_c_-1"]["key"].items()) == [("b", 1), ("c", -1)]
        assert by_name["a_1"]["v"] == 2

    def test_options_in_specs(self, coll):
        coll.create_index("u", unique=True)
        coll.create_index("s", sparse=True, name="sparse_s")
        coll.create_index("p", partialFilterExpression={"p": {"$gt": 5}})
        coll.create_index("t", expireAfterSeconds=3600)
        by_name = {s["name"]: s for s in coll.list_indexes()}
        assert by_name["u_1"]["unique"] is True
        assert by_name["sparse_s"]["sparse"] is True
        assert by_name["p_1"]["partialFilterExpression"] == {"p": {"$gt": 5}}
        assert by_name["t_1"]["expireAfterSeconds"] == 3600
        assert "unique" not in by_name["sparse_s"]

    def test_index_information(self, coll):
        coll.create_index([("x", 1), ("y", -1)], unique=True)
        info = coll.index_information()
        assert info["_id_"]["key"] == [("_id", 1)]
        assert info["x_1_y_-1"]["key"] == [("x", 1), ("y", -1)]
        assert info["x_1_y_-1"]["unique"] is True

    def test_create_same_index_twice_is_noop(self, coll, db):
        coll.create_index("a")
        reply = db.command("createIndexes", coll.name, indexes=[{"key": {"a": 1}, "name": "a_1"}])
        assert reply["ok"] == 1
        assert reply["numIndexesBefore"] == reply["numIndexesAfter"] == 2

    def test_create_index_creates_collection(self, db):
        reply = db.command("createIndexes", "brandnew", indexes=[{"key": {"z": 1}, "name": "z_1"}])
        assert reply["createdCollectionAutomatically"] is True
        assert reply["numIndexesBefore"] == 1 and reply["numIndexesAfter"] == 2
        assert "brandnew" in db.list_collection_names()

    def test_same_name_different_key(self, coll):
        coll.create_index("a", name="idx")
        with pytest.raises(OperationFailure) as exc:
            coll.create_index("b", name="idx")
        assert exc.value.code == 86

    def test_same_key_different_name(self, coll):
        coll.create_index("a", name="first")
        with pytest.raises(OperationFailure) as exc:
            coll.create_index("a", name="second")
        assert exc.value.code == 85

    def test_list_indexes_missing_collection(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("listIndexes", "nothere")  # pymongo's list_indexes() hides code 26
        assert exc.value.code == 26


class TestUnique:
    def test_duplicate_key_error_shape(self, coll, db):
        coll.create_index("a", unique=True)
        coll.insert_one({"a": 1})
        with pytest.raises(DuplicateKeyError) as exc:
            coll.insert_one({"a": 1})
        err = exc.value
        assert err.code == 11000
        expected = f"E11000 duplicate key error collection: {db.name}.{coll.name} index: a_1 dup key: {{ a: 1 }}"
        assert err.details["errmsg"].startswith(expected), err.details["errmsg"]
        assert err.details["keyPattern"] == {"a": 1}
        assert err.details["keyValue"] == {"a": 1}
        assert coll.count_documents({}) == 1

    def test_duplicate_on_update(self, coll):
        coll.create_index("a", unique=True)
        coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}])
        with pytest.raises(DuplicateKeyError):
            coll.update_one({"_id": 2}, {"$set": {"a": 1}})
        assert coll.find_one({"_id": 2})["a"] == 2

    def test_compound_unique(self, coll):
        coll.create_index([("a", 1), ("b", 1)], unique=True)
        coll.insert_many([{"a": 1, "b": 1}, {"a": 1, "b": 2}])
        with pytest.raises(DuplicateKeyError) as exc:
            coll.insert_one({"a": 1, "b": 2})
        assert exc.value.details["keyValue"] == {"a": 1, "b": 2}

    def test_missing_fields_collide_as_null(self, coll):
        coll.create_index("a", unique=True)
        coll.insert_one({"x": 1})
        with pytest.raises(DuplicateKeyError) as exc:
            coll.insert_one({"x": 2})
        assert "dup key: { a: null }" in exc.value.details["errmsg"]

    def test_sparse_unique_allows_missing(self, coll):
        coll.create_index("a", unique=True, sparse=True)
        coll.insert_many([{"x": 1}, {"x": 2}, {"a": 1}])
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"a": 1})

    def test_partial_unique(self, coll):
        coll.create_index("a", unique=True, partialFilterExpression={"b": {"$gt": 5}})
        coll.insert_many([{"a": 1, "b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 6}])
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"a": 1, "b": 7})

    def test_unique_over_existing_duplicates_fails(self, coll):
        coll.insert_many([{"a": 1}, {"a": 1}])
        with pytest.raises(OperationFailure) as exc:
            coll.create_index("a", unique=True)
        assert exc.value.code == 11000
        assert [i["name"] for i in coll.list_indexes()] == ["_id_"], "failed build must not leave an index"

    def test_numeric_types_collide(self, coll):
        coll.create_index("a", unique=True)
        coll.insert_one({"a": 1})
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"a": 1.0})


class TestQueryingWithIndexes:
    def test_multikey(self, coll):
        coll.create_index("tags")
        coll.insert_many([{"_id": 1, "tags": ["a", "b"]}, {"_id": 2, "tags": ["b", "c"]},
                          {"_id": 3, "tags": "b"}, {"_id": 4, "tags": []}, {"_id": 5}])
        assert sorted(d["_id"] for d in coll.find({"tags": "b"})) == [1, 2, 3]
        assert sorted(d["_id"] for d in coll.find({"tags": {"$in": ["a", "c"]}})) == [1, 2]
        assert sorted(d["_id"] for d in coll.find({"tags": {"$gte": "c"}})) == [2]
        assert [d["_id"] for d in coll.find({"tags": {"$all": ["a", "b"]}})] == [1]
        assert sorted(d["_id"] for d in coll.find({"tags": None})) == [5]

    def test_indexed_range_and_sort(self, coll):
        coll.create_index("n")
        coll.insert_many([{"n": i % 50, "i": i} for i in range(200)])
        got = [d["n"] for d in coll.find({"n": {"$gte": 10, "$lt": 13}}).sort("n", -1)]
        assert got == [12] * 4 + [11] * 4 + [10] * 4

    def test_index_finds_mixed_numeric_types(self, coll):
        coll.create_index("n")
        coll.insert_many([{"n": 1}, {"n": 1.0}, {"n": 2.5}])
        assert coll.count_documents({"n": 1}) == 2

    def test_explain_ixscan_vs_collscan(self, coll):
        coll.create_index("a")
        coll.insert_many([{"a": i, "b": i} for i in range(20)])
        assert "IXSCAN" in plan_stages(coll.find({"a": 5}).explain())
        stages = plan_stages(coll.find({"b": 5}).explain())
        assert "COLLSCAN" in stages and "IXSCAN" not in stages

    def test_explain_execution_stats_count_what_the_plan_examined(self, coll):
        """explain("executionStats") runs the query: mongod's nReturned and
        totalKeysExamined / totalDocsExamined, the index scan's keys and the fetch's
        documents in executionStages."""
        coll.create_index("a")
        coll.insert_many([{"a": i % 10, "b": i} for i in range(50)])
        ex = coll.database.command(
            "explain", {"find": coll.name, "filter": {"a": {"$in": [2, 3]}, "b": {"$lt": 30}}},
            verbosity="executionStats")
        stats = ex["executionStats"]
        assert stats["executionSuccess"] is True
        assert stats["nReturned"] == 6  # a in {2, 3}: 10 documents, 6 of them b < 30
        assert (stats["totalKeysExamined"], stats["totalDocsExamined"]) == (10, 10), stats
        fetch = stats["executionStages"]
        assert fetch["stage"] == "FETCH" and fetch["nReturned"] == 6
        assert fetch["docsExamined"] == 10
        assert fetch["inputStage"]["stage"] == "IXSCAN"
        assert fetch["inputStage"]["keysExamined"] == 10
        scan = coll.find({"b": {"$gte": 45}}).explain()["executionStats"]
        assert (scan["nReturned"], scan["totalKeysExamined"], scan["totalDocsExamined"]) == (5, 0, 50)
        assert scan["executionStages"]["stage"] == "COLLSCAN"
        # Only a query plan: nothing runs.
        planner = coll.database.command("explain", {"find": coll.name}, verbosity="queryPlanner")
        assert "executionStats" not in planner

    def test_hint_by_name(self, coll):
        coll.create_index("a", name="by_a")
        coll.insert_many([{"a": i, "b": i} for i in range(10)])
        docs = list(coll.find({"b": {"$lt": 3}}).hint("by_a"))
        assert sorted(d["b"] for d in docs) == [0, 1, 2]
        assert "IXSCAN" in plan_stages(coll.find({"b": 1}).hint("by_a").explain())

    def test_hint_missing_index(self, coll):
        coll.insert_one({"a": 1})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find().hint("nope"))
        assert exc.value.code == 2


class TestDrop:
    def test_drop_index_and_indexes(self, coll):
        coll.create_index("a")
        coll.create_index("b")
        coll.drop_index("a_1")
        assert [i["name"] for i in coll.list_indexes()] == ["_id_", "b_1"]
        coll.create_index("c")
        coll.drop_indexes()
        assert [i["name"] for i in coll.list_indexes()] == ["_id_"]

    def test_drop_index_by_key(self, coll):
        coll.create_index([("a", 1), ("b", -1)])
        coll.drop_index([("a", 1), ("b", -1)])
        assert [i["name"] for i in coll.list_indexes()] == ["_id_"]

    def test_drop_id_index_fails(self, coll):
        coll.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            coll.drop_index("_id_")
        assert exc.value.code == 72

    def test_drop_missing_index_fails(self, coll):
        coll.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            coll.drop_index("nope_1")
        assert exc.value.code == 27

    def test_dropped_unique_no_longer_enforced(self, coll):
        coll.create_index("a", unique=True)
        coll.drop_index("a_1")
        coll.insert_many([{"a": 1}, {"a": 1}])
        assert coll.count_documents({"a": 1}) == 2


class TestTTL:
    def test_expired_doc_removed_future_doc_kept(self, coll):
        coll.create_index("at", expireAfterSeconds=0)
        now = datetime.datetime.now(datetime.timezone.utc)
        coll.insert_many([
            {"_id": "old", "at": now - datetime.timedelta(minutes=1)},
            {"_id": "future", "at": now + datetime.timedelta(hours=1)},
            {"_id": "notadate", "at": "yesterday"},
            {"_id": "oldarray", "at": [now + datetime.timedelta(hours=1), now - datetime.timedelta(hours=1)]},
        ])
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and coll.count_documents({"_id": {"$in": ["old", "oldarray"]}}):
            time.sleep(0.2)
        remaining = sorted(d["_id"] for d in coll.find())
        assert remaining == ["future", "notadate"], \
            "TTL monitor (every 1s) should remove docs whose earliest date is past"

    def test_expire_after_seconds_window(self, coll):
        coll.create_index("at", expireAfterSeconds=3600)
        now = datetime.datetime.now(datetime.timezone.utc)
        coll.insert_many([{"_id": "recent", "at": now - datetime.timedelta(minutes=5)},
                          {"_id": "ancient", "at": now - datetime.timedelta(hours=2)}])
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and coll.count_documents({"_id": "ancient"}):
            time.sleep(0.2)
        assert sorted(d["_id"] for d in coll.find()) == ["recent"]


def test_partial_index_is_used_only_when_the_query_implies_its_filter(coll):
    coll.create_index("x", partialFilterExpression={"a": {"$lte": 1.5}})
    coll.insert_many([{"x": 6, "a": 2}, {"x": 6, "a": 1}, {"x": 7, "a": "1"}])

    def winning(q):
        plan = coll.find(q).explain()["queryPlanner"]["winningPlan"]
        return plan.get("inputStage", plan)

    for q in ({"x": 6, "a": 1}, {"x": {"$gt": 1}, "a": 1}, {"x": 6, "a": {"$lte": 1}}):
        stage = winning(q)
        assert stage["stage"] == "IXSCAN" and stage["indexName"] == "x_1" and stage["isPartial"] is True
        assert [d["a"] for d in coll.find(q, {"_id": 0})] == [1]
    # Documents outside the index must still be found: these scan the collection.
    for q, n in (({"x": 6, "a": {"$lte": 1.6}}, 1), ({"x": 6}, 2), ({"x": 7, "a": "1"}, 1)):
        assert winning(q)["stage"] == "COLLSCAN"
        assert coll.count_documents(q) == n


def test_partial_index_on_existing_fields_answers_equality(coll):
    coll.create_index("email", unique=True, partialFilterExpression={"email": {"$exists": True}})
    coll.insert_many([{"email": "a@x"}, {"name": "no email"}, {"name": "none either"}])
    plan = coll.find({"email": "a@x"}).explain()["queryPlanner"]["winningPlan"]
    assert plan["inputStage"]["indexName"] == "email_1"
    assert coll.count_documents({"email": "a@x"}) == 1
    assert coll.find({"email": None}).explain()["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"
    assert coll.count_documents({"email": None}) == 2

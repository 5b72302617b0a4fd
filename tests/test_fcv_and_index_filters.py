"""setFeatureCompatibilityVersion kept in admin.system.version as mongod keeps it (so
it survives a restart), and index filters: planCacheSetFilter, planCacheListFilters,
planCacheClearFilters with mongod's reply shapes and errors."""

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure


def _client(srv):
    return MongoClient(srv.uri(), serverSelectionTimeoutMS=10000)


def _fcv(c):
    return c.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})[
        "featureCompatibilityVersion"]


def test_fcv_survives_a_restart(fresh_server):
    srv = fresh_server()
    with _client(srv) as c:
        assert _fcv(c) == {"version": "7.0"}
        c.admin.command({"setFeatureCompatibilityVersion": "6.0", "confirm": True})
        assert c.admin["system.version"].find_one({"_id": "featureCompatibilityVersion"}) == {
            "_id": "featureCompatibilityVersion", "version": "6.0"}
    srv.restart()
    with _client(srv) as c:
        assert _fcv(c) == {"version": "6.0"}
        # Still a change of version: confirm is required to go back.
        with pytest.raises(OperationFailure) as e:
            c.admin.command({"setFeatureCompatibilityVersion": "7.0"})
        assert e.value.code == 7369100
        c.admin.command({"setFeatureCompatibilityVersion": "7.0", "confirm": True})
    srv.restart()
    with _client(srv) as c:
        assert _fcv(c) == {"version": "7.0"}


def test_index_filters(db):
    db.f.create_index("a")
    db.f.create_index("b")
    reply = db.command("planCacheSetFilter", "f", query={"a": 1}, indexes=[{"a": 1}])
    assert reply["ok"] == 1
    db.command("planCacheSetFilter", "f", query={"a": 1, "b": 1}, sort={"b": 1},
               projection={"_id": 0}, indexes=["b_1", {"a": 1}])
    filters = db.command("planCacheListFilters", "f")["filters"]
    assert filters == [
        {"query": {"a": 1}, "sort": {}, "projection": {}, "indexes": [{"a": 1}]},
        {"query": {"a": 1, "b": 1}, "sort": {"b": 1}, "projection": {"_id": 0},
         "indexes": ["b_1", {"a": 1}]},
    ]
    # The same shape (other values) replaces its filter.
    db.command("planCacheSetFilter", "f", query={"a": 7}, indexes=[{"b": 1}])
    filters = db.command("planCacheListFilters", "f")["filters"]
    assert len(filters) == 2
    assert filters[0] == {"query": {"a": 7}, "sort": {}, "projection": {}, "indexes": [{"b": 1}]}
    # Clearing one shape leaves the others.
    db.command("planCacheClearFilters", "f", query={"a": 123})
    filters = db.command("planCacheListFilters", "f")["filters"]
    assert [f["query"] for f in filters] == [{"a": 1, "b": 1}]
    db.command("planCacheSetFilter", "f", query={"c": {"$gt": 1}}, collation={"locale": "fr"},
               indexes=[{"a": 1}])
    assert db.command("planCacheListFilters", "f")["filters"][-1]["collation"] == {"locale": "fr"}
    db.command("planCacheClearFilters", "f")
    assert db.command("planCacheListFilters", "f")["filters"] == []
    # A dropped collection's filters go with it.
    db.command("planCacheSetFilter", "f", query={"a": 1}, indexes=[{"a": 1}])
    db.f.drop()
    db.f.insert_one({})
    assert db.command("planCacheListFilters", "f")["filters"] == []
    assert db.command("planCacheListFilters", "nothing")["filters"] == []


def test_index_filter_errors(db):
    db.g.insert_one({})

    def code(**args):
        with pytest.raises(OperationFailure) as e:
            db.command("planCacheSetFilter", "g", **args)
        return e.value.code, e.value.details["errmsg"]

    assert code(query={"a": 1}) == (2, "required field indexes missing")
    assert code(query={"a": 1}, indexes=5) == (2, "required field indexes must be an array")
    assert code(query={"a": 1}, indexes=[])[0] == 2
    assert code(query={"a": 1}, indexes=[5])[0] == 2
    assert code(query={"a": 1}, indexes=[{}]) == (2, "index specification cannot be empty")
    assert code(indexes=[{"a": 1}]) == (2, "required field query missing")
    with pytest.raises(OperationFailure) as e:
        db.command("planCacheSetFilter", "nothing", query={"a": 1}, indexes=[{"a": 1}])
    assert e.value.code == 2
    with pytest.raises(OperationFailure) as e:
        db.command("planCacheClearFilters", "g", sort={"a": 1})
    assert (e.value.code, e.value.details["errmsg"]) == (
        2, "sort or projection provided without query")

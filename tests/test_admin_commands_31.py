"""Issue 31: administrative commands mongod 7.0 has (default read/write concerns,
feature compatibility version, lockInfo, logRotate, the plan cache commands, dbHash,
filemd5, reIndex, compact), with mongod's reply shapes, types and error codes.

Tests that change server-wide settings run on a server of their own (`fresh_server`):
a default write concern, once set, cannot be unset."""

import datetime

import pytest
from bson import Timestamp
from pymongo import MongoClient
from pymongo.errors import OperationFailure


def _client(srv):
    return MongoClient(srv.uri(directConnection="true"), serverSelectionTimeoutMS=5000)


def _code(exc_info):
    return exc_info.value.code, exc_info.value.details["codeName"]


# ---- setDefaultRWConcern / getDefaultRWConcern ----------------------------------


def test_default_rw_concern_implicit_shape(client):
    reply = client.admin.command("getDefaultRWConcern")
    assert reply["defaultReadConcern"] == {"level": "local"}
    assert reply["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}
    assert reply["defaultReadConcernSource"] == "implicit"
    assert reply["defaultWriteConcernSource"] == "implicit"
    assert isinstance(reply["localUpdateWallClockTime"], datetime.datetime)
    assert "updateOpTime" not in reply and "inMemory" not in reply
    assert client.admin.command("getDefaultRWConcern", inMemory=True)["inMemory"] is True


def test_set_default_rw_concern_reply_and_persistence(fresh_server):
    srv = fresh_server()
    with _client(srv) as c:
        reply = c.admin.command({"setDefaultRWConcern": 1,
                                 "defaultReadConcern": {"level": "majority"},
                                 "defaultWriteConcern": {"w": 1}})
        assert reply["defaultReadConcern"] == {"level": "majority"}
        assert reply["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        assert reply["defaultReadConcernSource"] == "global"
        assert reply["defaultWriteConcernSource"] == "global"
        assert isinstance(reply["updateOpTime"], Timestamp)
        assert isinstance(reply["updateWallClockTime"], datetime.datetime)
        assert isinstance(reply["localUpdateWallClockTime"], datetime.datetime)
        # As mongod: kept in config.settings.
        stored = c.config.settings.find_one({"_id": "ReadWriteConcernDefaults"})
        assert stored["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        # A field left out keeps its value; an empty read concern unsets it.
        reply = c.admin.command({"setDefaultRWConcern": 1, "defaultReadConcern": {}})
        assert reply["defaultReadConcern"] == {"level": "local"}
        assert reply["defaultReadConcernSource"] == "implicit"
        assert reply["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        c.admin.command({"setDefaultRWConcern": 1,
                         "defaultReadConcern": {"level": "available"}})
    srv.restart()
    with _client(srv) as c:
        reply = c.admin.command("getDefaultRWConcern")
        assert reply["defaultReadConcern"] == {"level": "available"}
        assert reply["defaultWriteConcern"] == {"w": 1, "wtimeout": 0}
        assert reply["defaultWriteConcernSource"] == "global"
        # Reads sending no read concern run under the default one.
        c.t.rw.insert_many([{"a": 1}, {"a": 2}])
        assert c.t.rw.count_documents({}) == 2
        assert sorted(c.t.rw.distinct("a")) == [1, 2]
        assert len(list(c.t.rw.find().batch_size(1))) == 2
        assert len(list(c.t.rw.aggregate([{"$match": {}}]))) == 2


def test_default_write_concern_applies_to_writes_without_one(fresh_server):
    srv = fresh_server()
    with _client(srv) as c:
        coll = c.t.rw
        assert "writeConcernError" not in c.t.command("insert", "rw", documents=[{"a": 1}])
        # w: 2 cannot be met by this one-member set: writes sending no write concern
        # now report it, as mongod's do under such a default.
        c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 2}})
        reply = c.t.command("insert", "rw", documents=[{"a": 2}])
        assert reply["writeConcernError"]["code"] == 100
        # An explicit write concern wins over the default.
        reply = c.t.command("insert", "rw", documents=[{"a": 3}], writeConcern={"w": 1})
        assert "writeConcernError" not in reply
        assert coll.count_documents({}) == 3


def test_set_default_rw_concern_errors(fresh_server):
    srv = fresh_server()
    with _client(srv) as c:
        bad = [
            ({}, 2),
            ({"defaultReadConcern": {"level": "snapshot"}}, 2),
            ({"defaultReadConcern": {"level": "linearizable"}}, 2),
            ({"defaultReadConcern": {"level": "nope"}}, 2),
            ({"defaultReadConcern": {"afterClusterTime": Timestamp(1, 1)}}, 2),
            ({"defaultWriteConcern": {"w": 0}}, 2),
            ({"defaultWriteConcern": {"w": "nosuchmode"}}, 79),
            ({"defaultReadConcern": "local"}, 14),
        ]
        for fields, code in bad:
            with pytest.raises(OperationFailure) as exc:
                c.admin.command({"setDefaultRWConcern": 1, **fields})
            assert exc.value.code == code, fields
        with pytest.raises(OperationFailure) as exc:
            c.t.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 1}})
        assert _code(exc) == (13, "Unauthorized")
        c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {"w": 1}})
        with pytest.raises(OperationFailure) as exc:
            c.admin.command({"setDefaultRWConcern": 1, "defaultWriteConcern": {}})
        assert _code(exc) == (20, "IllegalOperation")
        with pytest.raises(OperationFailure) as exc:
            c.admin.command("getDefaultRWConcern", inMemory="yes")
        assert exc.value.code == 14


# ---- setFeatureCompatibilityVersion --------------------------------------------


def test_set_feature_compatibility_version(fresh_server):
    srv = fresh_server()
    with _client(srv) as c:
        fcv = c.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
        assert fcv["featureCompatibilityVersion"] == {"version": "7.0"}
        assert c.admin.command({"setFeatureCompatibilityVersion": "7.0",
                                "confirm": True})["ok"] == 1
        # A change of version needs confirm: true in 7.0.
        with pytest.raises(OperationFailure) as exc:
            c.admin.command({"setFeatureCompatibilityVersion": "6.0"})
        assert exc.value.code == 7369100
        c.admin.command({"setFeatureCompatibilityVersion": "6.0", "confirm": True})
        fcv = c.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
        assert fcv["featureCompatibilityVersion"] == {"version": "6.0"}
        with pytest.raises(OperationFailure) as exc:
            c.admin.command({"setFeatureCompatibilityVersion": "5.0", "confirm": True})
        assert _code(exc) == (2, "BadValue")
        with pytest.raises(OperationFailure) as exc:
            c.admin.command({"setFeatureCompatibilityVersion": 7, "confirm": True})
        assert _code(exc) == (14, "TypeMismatch")
        with pytest.raises(OperationFailure) as exc:
            c.t.command({"setFeatureCompatibilityVersion": "7.0", "confirm": True})
        assert exc.value.code == 13


# ---- lockInfo, logRotate, plan cache -------------------------------------------


def test_lock_info_and_log_rotate(client):
    reply = client.admin.command("lockInfo")
    assert reply["lockInfo"] == [] and reply["ok"] == 1
    assert client.admin.command("logRotate")["ok"] == 1
    assert client.admin.command("logRotate", "server")["ok"] == 1
    with pytest.raises(OperationFailure) as exc:
        client.admin.command("logRotate", "nosuchlog")
    assert exc.value.code == 2
    with pytest.raises(OperationFailure) as exc:
        client.test.command("lockInfo")
    assert exc.value.code == 13


def test_plan_cache_commands(db):
    db.pc.insert_one({"a": 1})
    assert db.command("planCacheClear", "pc")["ok"] == 1
    assert db.command("planCacheClear", "pc", query={"a": 1})["ok"] == 1
    assert db.command("planCacheClearFilters", "pc")["ok"] == 1
    assert db.command("planCacheListFilters", "pc")["filters"] == []
    with pytest.raises(OperationFailure) as exc:
        db.command("planCacheClear", "pc", query=5)
    assert exc.value.code == 14
    with pytest.raises(OperationFailure) as exc:
        db.command({"planCacheClear": 5})
    assert exc.value.code == 73

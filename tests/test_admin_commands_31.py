"""Issue 31: administrative commands mongod 7.0 has (default read/write concerns,
feature compatibility version, lockInfo, logRotate, the plan cache commands, dbHash,
filemd5, reIndex, compact), with mongod's reply shapes, types and error codes.

Tests that change server-wide settings run on a server of their own (`fresh_server`):
a default write concern, once set, cannot be unset."""

import datetime
import hashlib

import gridfs
import pytest
from bson import Binary, CodecOptions, Int64, Timestamp
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient
from pymongo.errors import DuplicateKeyError, OperationFailure


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
        assert _code(exc) == (4926900, "Location4926900")
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
    for log in ("nosuchlog", "audit"):
        with pytest.raises(OperationFailure) as exc:
            client.admin.command("logRotate", log)
        assert _code(exc) == (4, "NoSuchKey")
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


# ---- dbHash ---------------------------------------------------------------------


def _expected_collection_md5(coll):
    """mongod's per-collection digest: the MD5 of the documents' BSON bytes in _id order."""
    raw = coll.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
    h = hashlib.md5()
    for d in raw.find().sort("_id", 1):
        h.update(d.raw)
    return h.hexdigest()


def test_db_hash_reply_and_digests(db):
    db.b.insert_many([{"_id": 3, "x": "c"}, {"_id": 1, "x": "a"}, {"_id": 2, "x": [1, 2.5]}])
    db.a.insert_one({"_id": "k", "sub": {"y": None}})
    db.create_collection("capped", capped=True, size=4096)
    reply = db.command("dbHash")
    assert list(reply)[:6] == ["host", "collections", "capped", "uuids", "md5", "timeMillis"]
    assert isinstance(reply["host"], str) and ":" in reply["host"]
    assert isinstance(reply["timeMillis"], int)
    assert sorted(reply["collections"]) == ["a", "b", "capped"]
    assert reply["capped"] == ["capped"]
    assert set(reply["uuids"]) == {"a", "b", "capped"}
    for name in ("a", "b", "capped"):
        assert reply["collections"][name] == _expected_collection_md5(db[name]), name
    overall = hashlib.md5("".join(reply["collections"][n] for n in ("a", "b", "capped")).encode())
    assert reply["md5"] == overall.hexdigest()
    assert reply["collections"]["capped"] == hashlib.md5(b"").hexdigest()
    # The alias, and the collections filter.
    only_b = db.command({"dbhash": 1, "collections": ["b"]})
    assert list(only_b["collections"]) == ["b"]
    assert only_b["collections"]["b"] == reply["collections"]["b"]


def test_db_hash_changes_with_content_and_is_equal_for_equal_content(client, db):
    db.c.insert_many([{"_id": i, "v": i * 2} for i in range(50)])
    before = db.command("dbHash")
    db.c.update_one({"_id": 7}, {"$set": {"v": -1}})
    after = db.command("dbHash")
    assert after["collections"]["c"] != before["collections"]["c"]
    assert after["md5"] != before["md5"]
    db.c.update_one({"_id": 7}, {"$set": {"v": 14}})
    assert db.command("dbHash")["collections"]["c"] == before["collections"]["c"]
    # The same documents inserted in another order: the same digest (_id order).
    other = client["t_dbhash_copy"]
    try:
        other.c.insert_many([{"_id": i, "v": i * 2} for i in reversed(range(50))])
        assert other.command("dbHash")["md5"] == before["md5"]
    finally:
        client.drop_database(other.name)


def test_db_hash_bad_collections_entry(db):
    db.c.insert_one({})
    with pytest.raises(OperationFailure) as exc:
        db.command({"dbHash": 1, "collections": ["c", 5]})
    assert _code(exc) == (2, "BadValue")


# ---- filemd5 --------------------------------------------------------------------


def test_filemd5_matches_the_files_bytes(db):
    data = bytes(range(256)) * 40 + b"tail"
    fs = gridfs.GridFS(db)
    file_id = fs.put(data, chunkSize=1000)
    reply = db.command("filemd5", file_id)
    assert reply["md5"] == hashlib.md5(data).hexdigest()
    assert reply["numChunks"] == 11 and isinstance(reply["numChunks"], int)
    bucket = gridfs.GridFSBucket(db, bucket_name="photos")
    other = bucket.upload_from_stream("p", b"other bytes")
    reply = db.command("filemd5", other, root="photos")
    assert reply["md5"] == hashlib.md5(b"other bytes").hexdigest()
    assert reply["numChunks"] == 1
    # No such file: no chunks, the digest of nothing.
    reply = db.command("filemd5", "missing")
    assert (reply["numChunks"], reply["md5"]) == (0, hashlib.md5(b"").hexdigest())


def test_filemd5_errors(db):
    db["fs.chunks"].create_index([("files_id", 1), ("n", 1)], unique=True)
    db["fs.chunks"].insert_many([{"files_id": 1, "n": 0, "data": Binary(b"a")},
                                 {"files_id": 1, "n": 2, "data": Binary(b"b")},
                                 {"files_id": 2, "n": 0, "data": "not binary"}])
    with pytest.raises(OperationFailure) as exc:
        db.command("filemd5", 1)
    assert exc.value.code == 10040
    with pytest.raises(OperationFailure) as exc:
        db.command("filemd5", 2)
    assert exc.value.code == 50849
    with pytest.raises(OperationFailure) as exc:
        db.command("filemd5", 1, root=5)
    assert _code(exc) == (73, "InvalidNamespace")
    # mongod plans filemd5 without a collection scan: no index on files_id, no plan.
    db["nx.chunks"].insert_one({"files_id": 1, "n": 0, "data": Binary(b"a")})
    with pytest.raises(OperationFailure) as exc:
        db.command("filemd5", 1, root="nx")
    assert _code(exc) == (291, "NoQueryExecutionPlans")


# ---- reIndex, compact -----------------------------------------------------------


def test_reindex_rebuilds_the_indexes(db):
    db.r.insert_many([{"_id": i, "a": i % 5, "b": str(i)} for i in range(100)])
    db.r.create_index("a")
    db.r.create_index([("b", 1)], unique=True)
    reply = db.command("reIndex", "r")
    assert reply["nIndexesWas"] == 3 and reply["nIndexes"] == 3
    assert [i["name"] for i in reply["indexes"]] == ["_id_", "a_1", "b_1"]
    assert reply["indexes"][2]["unique"] is True
    # The rebuilt indexes answer queries, and the unique one still refuses duplicates.
    assert db.r.count_documents({"a": 3}, hint="a_1") == 20
    assert db.r.find_one({"b": "42"}, hint="b_1")["_id"] == 42
    with pytest.raises(DuplicateKeyError):
        db.r.insert_one({"b": "42"})
    with pytest.raises(OperationFailure) as exc:
        db.command("reIndex", "nosuch")
    assert _code(exc) == (26, "NamespaceNotFound")
    db.command("create", "v", viewOn="r", pipeline=[])
    with pytest.raises(OperationFailure) as exc:
        db.command("reIndex", "v")
    assert _code(exc) == (166, "CommandNotSupportedOnView")


def test_compact(db):
    db.k.insert_many([{"_id": i, "pad": "x" * 200} for i in range(200)])
    db.k.create_index("pad")
    db.k.delete_many({"_id": {"$lt": 150}})
    reply = db.command("compact", "k")
    assert isinstance(reply["bytesFreed"], int) and reply["bytesFreed"] >= 0
    assert db.k.count_documents({}) == 50
    assert db.k.count_documents({"pad": "x" * 200}, hint="pad_1") == 50
    with pytest.raises(OperationFailure) as exc:
        db.command("compact", "nosuch")
    assert _code(exc) == (26, "NamespaceNotFound")
    with pytest.raises(OperationFailure) as exc:
        db.command("compact", "k", force="yes")
    assert exc.value.code == 14


# ---- $indexStats, $listSessions, $planCacheStats, $sampleRate -------------------


def test_index_stats(db):
    db.s.insert_many([{"_id": i, "a": i} for i in range(10)])
    db.s.create_index("a")
    db.s.find_one({"_id": 3})
    for _ in range(3):
        list(db.s.find({"a": {"$gt": 5}}))
    stats = {s["name"]: s for s in db.s.aggregate([{"$indexStats": {}}])}
    assert sorted(stats) == ["_id_", "a_1"]
    a = stats["a_1"]
    assert list(a)[:5] == ["name", "key", "host", "accesses", "spec"]
    assert a["key"] == {"a": 1}
    assert a["spec"]["name"] == "a_1" and a["spec"]["key"] == {"a": 1}
    assert isinstance(a["accesses"]["ops"], Int64) and a["accesses"]["ops"] == 3
    assert isinstance(a["accesses"]["since"], datetime.datetime)
    assert stats["_id_"]["accesses"]["ops"] >= 1
    assert ":" in a["host"]
    # The rest of the pipeline runs over the stage's documents.
    names = [d["name"] for d in db.s.aggregate([{"$indexStats": {}}, {"$sort": {"name": -1}},
                                                {"$project": {"name": 1}}])]
    assert names == ["a_1", "_id_"]
    assert list(db.nosuch.aggregate([{"$indexStats": {}}])) == []


def test_index_stats_errors(db):
    db.s.insert_one({})
    cases = [
        (lambda: db.s.aggregate([{"$indexStats": {"x": 1}}]), 28803),
        (lambda: db.s.aggregate([{"$match": {}}, {"$indexStats": {}}]), 40602),
        (lambda: db.aggregate([{"$indexStats": {}}]), 73),
    ]
    db.command("create", "v", viewOn="s", pipeline=[])
    cases.append((lambda: db.v.aggregate([{"$indexStats": {}}]), 166))
    for run, code in cases:
        with pytest.raises(OperationFailure) as exc:
            run()
        assert exc.value.code == code


def test_list_sessions(client):
    with client.start_session() as s:
        client.test.c.find_one({}, session=s)
        sessions = client.config["system.sessions"]
        listed = list(sessions.aggregate([{"$listSessions": {"allUsers": True}}]))
        ids = [d["_id"]["id"] for d in listed]
        assert s.session_id["id"] in ids
        assert all(isinstance(d["lastUse"], datetime.datetime) for d in listed)
        assert list(sessions.aggregate([{"$listSessions": {}}, {"$count": "n"}]))[0]["n"] >= 1
    with pytest.raises(OperationFailure) as exc:
        list(client.test.c.aggregate([{"$listSessions": {}}]))
    assert exc.value.code == 73
    with pytest.raises(OperationFailure) as exc:
        list(sessions.aggregate([{"$listSessions": {"allUsers": "yes"}}]))
    assert exc.value.code == 14
    with pytest.raises(OperationFailure) as exc:
        list(sessions.aggregate([{"$listSessions": {"bogus": 1}}]))
    assert exc.value.code == 40415


def test_plan_cache_stats(db):
    db.p.insert_one({"a": 1})
    db.p.find_one({"a": 1})
    assert list(db.p.aggregate([{"$planCacheStats": {}}])) == []
    for spec, code in [(5, 9), ({"x": 1}, 9), ({"allHosts": 1}, 9)]:
        with pytest.raises(OperationFailure) as exc:
            list(db.p.aggregate([{"$planCacheStats": spec}]))
        assert exc.value.code == code, spec
    with pytest.raises(OperationFailure) as exc:
        list(db.p.aggregate([{"$match": {}}, {"$planCacheStats": {}}]))
    assert exc.value.code == 40602


def test_sample_rate(db):
    db.r.insert_many([{"i": i} for i in range(400)])
    assert db.r.count_documents({"$sampleRate": 0}) == 0
    assert db.r.count_documents({"$sampleRate": 1}) == 400
    sampled = db.r.count_documents({"$sampleRate": 0.5})
    assert 0 < sampled < 400
    assert db.r.count_documents({"$and": [{"$sampleRate": 1.0}, {"i": {"$lt": 10}}]}) == 10
    for bad in (1.01, -1, "0.5", None):
        with pytest.raises(OperationFailure) as exc:
            db.r.count_documents({"$sampleRate": bad})
        assert exc.value.code == 2, bad

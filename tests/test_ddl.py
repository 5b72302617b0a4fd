"""Collection and database DDL: create, list, drop, rename, collMod, stats."""

import bson
import pytest
from pymongo.errors import OperationFailure


class TestCreate:
    def test_create_collection(self, db):
        db.create_collection("c1")
        assert "c1" in db.list_collection_names()
        assert db.c1.count_documents({}) == 0
        assert [i["name"] for i in db.c1.list_indexes()] == ["_id_"]

    def test_create_again_same_options_ok(self, db):
        db.command("create", "c1")
        assert db.command("create", "c1")["ok"] == 1

    def test_create_again_different_options_fails(self, db):
        db.command("create", "c1")
        with pytest.raises(OperationFailure) as exc:
            db.command("create", "c1", capped=True, size=4096)
        assert exc.value.code == 48

    def test_capped_options(self, db):
        coll = db.create_collection("capped", capped=True, size=1000, max=10)
        opts = coll.options()
        assert opts["capped"] is True
        assert opts["size"] == 1024, "size is rounded up to a multiple of 256"
        assert opts["max"] == 10

    def test_implicit_create_on_insert(self, db):
        db.auto.insert_one({"a": 1})
        assert "auto" in db.list_collection_names()

    def test_invalid_collection_name(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("create", "bad$name")
        assert exc.value.code == 73

    def test_invalid_name_on_insert(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("insert", "bad$name", documents=[{"a": 1}])
        assert exc.value.code == 73

    def test_empty_collection_name(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("create", "")
        assert exc.value.code == 73


class TestList:
    @pytest.fixture
    def three(self, db):
        for name in ("alpha", "beta", "gamma"):
            db.create_collection(name)
        return db

    def test_list_names(self, three):
        assert sorted(three.list_collection_names()) == ["alpha", "beta", "gamma"]

    def test_list_with_filter(self, three):
        assert three.list_collection_names(filter={"name": {"$in": ["beta", "nope"]}}) == ["beta"]
        assert sorted(c["name"] for c in three.list_collections(filter={"name": {"$regex": "^[ab]"}})) \
            == ["alpha", "beta"]

    def test_list_collections_shape(self, three):
        entry = next(three.list_collections(filter={"name": "alpha"}))
        assert entry["type"] == "collection"
        assert entry["options"] == {}
        assert "uuid" in entry["info"]
        assert entry["info"]["readOnly"] is False
        assert entry["idIndex"]["name"] == "_id_"

    def test_name_only(self, three):
        reply = three.command("listCollections", nameOnly=True)
        batch = reply["cursor"]["firstBatch"]
        assert sorted(c["name"] for c in batch) == ["alpha", "beta", "gamma"]
        assert all(set(c) == {"name", "type"} for c in batch), batch

    def test_list_database_names(self, client, db):
        db.x.insert_one({})
        names = client.list_database_names()
        assert db.name in names
        assert "local" in names
        # admin exists on mongod from the start (system.version): filters find it.
        assert [d["name"] for d in client.list_databases(filter={"name": "admin"})] == ["admin"]

    def test_oplog_listed_in_local(self, client):
        assert "oplog.rs" in client.local.list_collection_names()


class TestDrop:
    def test_drop(self, db):
        db.c.insert_one({})
        db.c.create_index("a")
        db.c.drop()
        assert "c" not in db.list_collection_names()
        assert db.c.count_documents({}) == 0

    def test_drop_missing_does_not_raise(self, db):
        db.never_existed.drop()
        db.drop_collection("never_existed")

    def test_recreate_after_drop_has_only_id_index(self, db):
        db.c.create_index("a", unique=True)
        db.c.drop()
        db.c.insert_many([{"a": 1}, {"a": 1}])
        assert [i["name"] for i in db.c.list_indexes()] == ["_id_"]

    def test_drop_database(self, client, db):
        db.c.insert_one({})
        client.drop_database(db.name)
        assert db.name not in client.list_database_names()
        assert db.list_collection_names() == []


class TestRename:
    def test_rename(self, db):
        db.src.insert_many([{"_id": 1}, {"_id": 2}])
        db.src.create_index("a")
        db.src.rename("dst")
        names = db.list_collection_names()
        assert "src" not in names and "dst" in names
        assert db.dst.count_documents({}) == 2
        assert sorted(i["name"] for i in db.dst.list_indexes()) == ["_id_", "a_1"]

    def test_rename_onto_existing_fails(self, db):
        db.src.insert_one({"_id": 1})
        db.dst.insert_one({"_id": 2})
        with pytest.raises(OperationFailure) as exc:
            db.src.rename("dst")
        assert exc.value.code == 48
        assert db.dst.find_one() == {"_id": 2}

    def test_rename_drop_target(self, db):
        db.src.insert_one({"_id": 1})
        db.dst.insert_one({"_id": 2})
        db.src.rename("dst", dropTarget=True)
        assert list(db.dst.find()) == [{"_id": 1}]
        assert "src" not in db.list_collection_names()

    def test_rename_missing_source(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.nosuch.rename("dst")
        assert exc.value.code == 26

    def test_rename_across_databases(self, client, db):
        other = db.name[:50] + "_other"
        try:
            db.src.insert_one({"_id": 1})
            client.admin.command("renameCollection", f"{db.name}.src", to=f"{other}.moved")
            assert list(client[other].moved.find()) == [{"_id": 1}]
            assert "src" not in db.list_collection_names()
        finally:
            client.drop_database(other)


class TestCollMod:
    def test_change_ttl(self, db):
        db.c.create_index("at", expireAfterSeconds=3600)
        reply = db.command("collMod", "c", index={"keyPattern": {"at": 1}, "expireAfterSeconds": 100})
        assert reply["expireAfterSeconds_old"] == 3600
        assert reply["expireAfterSeconds_new"] == 100
        spec = {i["name"]: i for i in db.c.list_indexes()}["at_1"]
        assert spec["expireAfterSeconds"] == 100

    def test_change_ttl_by_name(self, db):
        db.c.create_index("at", expireAfterSeconds=10, name="ttl")
        db.command("collMod", "c", index={"name": "ttl", "expireAfterSeconds": 20})
        assert {i["name"]: i for i in db.c.list_indexes()}["ttl"]["expireAfterSeconds"] == 20

    def test_coll_mod_missing_collection(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("collMod", "nope")
        assert exc.value.code == 26


class TestStats:
    def test_db_stats(self, db):
        db.a.insert_many([{"x": "y" * 100} for _ in range(10)])
        db.b.insert_one({})
        db.a.create_index("x")
        stats = db.command("dbStats")
        assert stats["db"] == db.name
        assert stats["collections"] == 2
        assert stats["objects"] == 11
        assert stats["dataSize"] > 1000
        assert stats["indexes"] == 3

    def test_coll_stats(self, db):
        db.c.insert_many([{"x": "y" * 100} for _ in range(10)])
        db.c.create_index("x")
        stats = db.command("collStats", "c")
        assert stats["ns"] == f"{db.name}.c"
        assert stats["count"] == 10
        assert stats["size"] > 1000
        assert stats["nindexes"] == 2
        assert stats["avgObjSize"] > 100

    def test_coll_stats_via_aggregate(self, db):
        db.c.insert_many([{} for _ in range(3)])
        out = list(db.c.aggregate([{"$collStats": {"count": {}}}]))
        assert out[0]["count"] == 3

    def test_coll_stats_storage_stats_of_a_capped_collection(self, db):
        db.create_collection("cap", capped=True, size=4096, max=10)
        out = list(db.cap.aggregate([{"$collStats": {"storageStats": {}}},
                                     {"$project": {"capped": "$storageStats.capped",
                                                   "maxSize": "$storageStats.maxSize",
                                                   "max": "$storageStats.max"}}]))
        assert out == [{"capped": True, "maxSize": 4096, "max": 10}]


class TestClusteredIndex:
    """Collections are stored by _id already; clusteredIndex names and lists that index."""

    def test_clustered_collection_lists_its_index(self, db):
        db.create_collection("cl", clusteredIndex={"key": {"_id": 1}, "unique": True, "name": "by id"})
        info = next(db.list_collections(filter={"name": "cl"}))
        assert info["options"]["clusteredIndex"] == {"v": 2, "key": {"_id": 1}, "name": "by id", "unique": True}
        assert "idIndex" not in info
        assert list(db.cl.list_indexes()) == [
            {"v": 2, "key": {"_id": 1}, "name": "by id", "unique": True, "clustered": True}]
        db.cl.insert_many([{"_id": 2}, {"_id": 1}])
        assert [d["_id"] for d in db.cl.find()] == [1, 2]
        # Same options again: not an error.
        db.create_collection("cl", clusteredIndex={"key": {"_id": 1}, "unique": True, "name": "by id"},
                             check_exists=False)

    def test_default_name(self, db):
        db.create_collection("cl", clusteredIndex={"key": {"_id": 1}, "unique": True})
        assert next(db.cl.list_indexes())["name"] == "_id_"

    def test_bad_clustered_index(self, db):
        for spec, code in [
            ({"key": {"_id": 1}}, 5979700),
            ({"key": {"a": 1}, "unique": True}, 197),
            ({"key": {"_id": 1}, "unique": True, "bogus": 1}, 40415),
            ({"key": {"_id": 1}, "unique": True, "name": 3}, 14),
        ]:
            with pytest.raises(OperationFailure) as exc:
                db.create_collection("bad", clusteredIndex=spec)
            assert exc.value.code == code, spec
        with pytest.raises(OperationFailure) as exc:
            db.command("create", "bad", clusteredIndex=1)
        assert exc.value.code == 14
        assert "bad" not in db.list_collection_names()


class TestProfiler:
    def test_profile_level_two_records_commands_with_their_comment(self, db):
        assert db.command("profile", -1)["was"] == 0
        assert db.command("profile", 2)["was"] == 0
        try:
            db.c.insert_one({"type": "a"})
            list(db.c.find().comment("foo"))
            db.c.find().comment("foo").distinct("type")
            assert db.system.profile.count_documents(
                {"ns": f"{db.name}.c", "op": "query", "command.comment": "foo"}) == 1
            entry = db.system.profile.find_one({"op": "command", "command.distinct": "c"})
            assert entry["command"]["comment"] == "foo"
            assert entry["millis"] >= 0 and "ts" in entry and "client" in entry
            assert db.system.profile.count_documents({"op": "insert", "ns": f"{db.name}.c"}) == 1
            assert db.system.profile.options() == {"capped": True, "size": 1024 * 1024}
        finally:
            assert db.command("profile", 0)["was"] == 2
        n = db.system.profile.count_documents({})
        list(db.c.find())
        assert db.system.profile.count_documents({}) == n, "level 0 records nothing"

    def test_level_one_records_only_slow_or_filtered_operations(self, db):
        db.command("profile", 1, slowms=100000)
        try:
            list(db.c.find())
            assert "system.profile" not in db.list_collection_names()
            db.command("profile", 1, filter={"op": "query"})
            db.c.insert_one({})
            list(db.c.find())
            assert [e["op"] for e in db.system.profile.find()] == ["query"]
        finally:
            db.command("profile", 0, slowms=100, filter="unset")

    def test_bad_level(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("profile", 3)
        assert exc.value.code == 2


class TestDataSize:
    def fill(self, db):
        docs = [{"_id": i, "a": i % 10, "s": "x" * i} for i in range(100)]
        db.c.insert_many(docs)
        db.c.create_index([("a", 1), ("b", 1)])
        return docs

    def test_whole_collection(self, db):
        docs = self.fill(db)
        r = db.command("dataSize", "%s.c" % db.name)
        assert r["numObjects"] == 100
        assert r["size"] == sum(len(bson.encode(d)) for d in docs)

    def test_index_range_is_min_inclusive_max_exclusive(self, db):
        docs = self.fill(db)
        want = [d for d in docs if 10 <= d["_id"] < 20]
        for extra in ({"keyPattern": {"_id": 1}}, {}):  # the pattern is inferred from min
            r = db.command("dataSize", "%s.c" % db.name, min={"_id": 10}, max={"_id": 20}, **extra)
            assert r["numObjects"] == len(want)
            assert r["size"] == sum(len(bson.encode(d)) for d in want)
        # A prefix of a compound index.
        r = db.command("dataSize", "%s.c" % db.name, keyPattern={"a": 1}, min={"a": 3}, max={"a": 5})
        assert r["numObjects"] == len([d for d in docs if 3 <= d["a"] < 5])

    def test_max_objects_stops_early(self, db):
        self.fill(db)
        r = db.command("dataSize", "%s.c" % db.name, maxObjects=5)
        assert r["maxReached"] is True and r["numObjects"] == 6

    def test_missing_collection_is_empty(self, db):
        r = db.command("dataSize", "%s.nothing" % db.name)
        assert (r["size"], r["numObjects"]) == (0, 0)

    def test_bad_arguments(self, db):
        self.fill(db)
        with pytest.raises(OperationFailure) as exc:
            db.command("dataSize", "%s.c" % db.name, min={"_id": 1})
        assert exc.value.code == 2 and "only one of min or max" in str(exc.value)
        with pytest.raises(OperationFailure) as exc:
            db.command("dataSize", "%s.c" % db.name, keyPattern={"zz": 1}, min={"zz": 1}, max={"zz": 2})
        assert exc.value.code == 2 and "index" in str(exc.value)
        with pytest.raises(OperationFailure) as exc:
            db.command("dataSize", 5)
        assert exc.value.code == 14

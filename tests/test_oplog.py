"""The oplog at local.oplog.rs: entry shapes, ordering, querying, trimming."""

import datetime
import time
import uuid

import pytest
from bson import Binary, Timestamp
from pymongo import CursorType
from pymongo.errors import DuplicateKeyError, OperationFailure

from conftest import eventually


def oplog(client):
    return client.local["oplog.rs"]


def entries(client, ns, **extra):
    return list(oplog(client).find(dict({"ns": ns}, **extra)))


def latest_ts(client):
    return oplog(client).find({}, {"ts": 1}).sort("$natural", -1).limit(1).next()["ts"]


def is_uuid(v):
    return isinstance(v, uuid.UUID) or (isinstance(v, Binary) and v.subtype == 4 and len(v) == 16)


def coll_uuid(db, name):
    info = next(db.list_collections(filter={"name": name}))["info"]
    return info["uuid"]


class TestEntryShapes:
    def test_insert_update_delete(self, client, coll, db):
        ns = f"{db.name}.{coll.name}"
        coll.insert_one({"_id": 1, "a": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 2}})
        coll.delete_one({"_id": 1})
        ops = entries(client, ns)
        assert [e["op"] for e in ops] == ["i", "u", "d"], ops
        ins, upd, dele = ops
        for e in ops:
            assert isinstance(e["ts"], Timestamp)
            assert isinstance(e["t"], int)
            assert e["v"] == 2
            assert isinstance(e["wall"], datetime.datetime)
            assert is_uuid(e["ui"]), e["ui"]
        assert ins["o"] == {"_id": 1, "a": 1}
        assert upd["o2"] == {"_id": 1}
        assert dele["o"] == {"_id": 1}
        assert ins["ui"] == upd["ui"] == dele["ui"]

    def test_ui_matches_collection_uuid(self, client, coll, db):
        coll.insert_one({"_id": 1})
        entry = entries(client, f"{db.name}.{coll.name}")[0]
        assert entry["ui"] == coll_uuid(db, coll.name)

    def test_update_entry_describes_change(self, client, coll, db):
        coll.insert_one({"_id": 1, "a": 1, "b": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 5}, "$unset": {"b": ""}})
        upd = entries(client, f"{db.name}.{coll.name}", op="u")[0]
        o = upd["o"]
        # MongoDB 7.0 writes a $v:2 delta ({diff: {u: {a: 5}, d: {b: false}}}); accept a
        # replacement document too, but it must reflect the new state.
        if "diff" in o:
            assert o["$v"] == 2
            assert o["diff"]["u"] == {"a": 5}
            assert set(o["diff"]["d"]) == {"b"}
        else:
            assert o in ({"_id": 1, "a": 5}, {"$set": {"a": 5}, "$unset": {"b": True}}), o

    def test_replace_entry(self, client, coll, db):
        coll.insert_one({"_id": 1, "a": 1})
        coll.replace_one({"_id": 1}, {"z": 9})
        upd = entries(client, f"{db.name}.{coll.name}", op="u")[0]
        assert upd["o"] == {"_id": 1, "z": 9}
        assert upd["o2"] == {"_id": 1}

    def test_no_entry_for_noop_update(self, client, coll, db):
        coll.insert_one({"_id": 1, "a": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 1}})
        assert [e["op"] for e in entries(client, f"{db.name}.{coll.name}")] == ["i"]

    def test_failed_write_leaves_no_entry(self, client, coll, db):
        coll.insert_one({"_id": 1})
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"_id": 1})
        assert len(entries(client, f"{db.name}.{coll.name}")) == 1

    def test_upsert_logged_as_insert(self, client, coll, db):
        coll.update_one({"_id": 7}, {"$set": {"a": 1}}, upsert=True)
        ops = entries(client, f"{db.name}.{coll.name}")
        assert [e["op"] for e in ops] == ["i"]
        assert ops[0]["o"] == {"_id": 7, "a": 1}

    def test_insert_many_one_entry_each(self, client, coll, db):
        coll.insert_many([{"_id": i} for i in range(50)])
        ops = entries(client, f"{db.name}.{coll.name}")
        assert [e["op"] for e in ops] == ["i"] * 50
        assert [e["o"]["_id"] for e in ops] == list(range(50))

    def test_delete_many_one_entry_each(self, client, coll, db):
        coll.insert_many([{"_id": i} for i in range(5)])
        coll.delete_many({})
        deletes = entries(client, f"{db.name}.{coll.name}", op="d")
        assert sorted(e["o"]["_id"] for e in deletes) == list(range(5))


class TestDDLEntries:
    def test_create_index_drop(self, client, db):
        cmd_ns = f"{db.name}.$cmd"
        db.create_collection("ddl")
        db.ddl.create_index("a")
        db.ddl.drop()
        ops = entries(client, cmd_ns)
        assert all(e["op"] == "c" for e in ops)
        kinds = [next(iter(e["o"])) for e in ops]
        assert kinds == ["create", "createIndexes", "drop"], ops
        create, cidx, drop = ops
        assert create["o"]["create"] == "ddl"
        assert is_uuid(create["ui"])
        assert cidx["o"]["createIndexes"] == "ddl"
        assert cidx["o"]["key"] == {"a": 1} and cidx["o"]["name"] == "a_1"
        assert drop["o"]["drop"] == "ddl"

    def test_implicit_create_logged_before_insert(self, client, db):
        db.implicit.insert_one({"_id": 1})
        create = entries(client, f"{db.name}.$cmd", **{"o.create": "implicit"})
        ins = entries(client, f"{db.name}.implicit")
        assert len(create) == 1 and len(ins) == 1
        assert create[0]["ts"] < ins[0]["ts"]
        assert create[0]["ui"] == ins[0]["ui"]

    def test_drop_database_entry(self, client, db):
        db.x.insert_one({})
        name = db.name
        client.drop_database(name)
        ops = entries(client, f"{name}.$cmd", **{"o.dropDatabase": 1})
        assert len(ops) == 1


class TestOrderingAndQueries:
    def test_timestamps_strictly_increasing(self, client, coll):
        coll.insert_many([{"_id": i} for i in range(20)])
        for i in range(10):
            coll.update_one({"_id": i}, {"$inc": {"n": 1}})
        all_ts = [e["ts"] for e in oplog(client).find({}, {"ts": 1, "_id": 0})]
        assert len(all_ts) >= 30
        bad = [(a, b) for a, b in zip(all_ts, all_ts[1:]) if not a < b]
        assert not bad, f"natural order must have strictly increasing ts; first violations: {bad[:3]}"

    def test_ts_gt_starts_after_point(self, client, coll, db):
        coll.insert_one({"_id": "before"})
        mark = latest_ts(client)
        coll.insert_one({"_id": "after1"})
        coll.insert_one({"_id": "after2"})
        got = list(oplog(client).find({"ts": {"$gt": mark}}))
        assert all(e["ts"] > mark for e in got)
        mine = [e["o"]["_id"] for e in got if e["ns"] == f"{db.name}.{coll.name}"]
        assert mine == ["after1", "after2"]

    def test_count_and_aggregate_read_the_oplog(self, client, coll, db):
        """count, countDocuments, estimatedDocumentCount and aggregate see the same
        entries as find (they used to see an empty collection)."""
        ns = f"{db.name}.{coll.name}"
        coll.insert_many([{"_id": i} for i in range(7)])
        coll.delete_one({"_id": 0})
        local = client.local
        assert local.command("count", "oplog.rs", query={"ns": ns})["n"] == 8
        assert local.command("count", "oplog.rs", query={"ns": ns, "op": "i"}, skip=2)["n"] == 5
        assert oplog(client).count_documents({"ns": ns, "op": "d"}) == 1
        total = len(list(oplog(client).find({}, {"_id": 1})))
        assert total >= 8
        # Other tests may write meanwhile: the count is at least what find saw.
        assert oplog(client).estimated_document_count() >= total
        got = list(oplog(client).aggregate([
            {"$match": {"ns": ns}},
            {"$group": {"_id": "$op", "n": {"$sum": 1}}},
            {"$sort": {"_id": 1}},
        ]))
        assert got == [{"_id": "d", "n": 1}, {"_id": "i", "n": 7}]

    def test_natural_descending_is_newest_first(self, client, coll):
        coll.insert_one({"_id": "older"})
        coll.insert_one({"_id": "newest"})
        newest = oplog(client).find().sort("$natural", -1).limit(2)
        first, second = list(newest)
        assert first["o"] == {"_id": "newest"}
        assert second["o"] == {"_id": "older"}
        assert first["ts"] > second["ts"]

    def test_write_reply_operation_time_matches_entry(self, client, coll, db):
        reply = db.command("insert", coll.name, documents=[{"_id": "x"}])
        entry = entries(client, f"{db.name}.{coll.name}")[0]
        assert reply["operationTime"] == entry["ts"]

    def test_hello_last_write_matches_latest_entry(self, client, coll):
        coll.insert_one({})
        assert client.admin.command("hello")["lastWrite"]["opTime"]["ts"] == latest_ts(client)

    def test_oplog_is_capped(self, client):
        opts = oplog(client).options()
        assert opts.get("capped") is True
        assert opts.get("size") == 64 * 1024 * 1024

    def test_oplog_not_writable_by_users(self, client):
        with pytest.raises(OperationFailure) as exc:
            oplog(client).insert_one({"op": "n", "ns": "", "o": {}})
        assert exc.value.code == 73, "mongod: 'cannot write to local.oplog.rs' (InvalidNamespace)"

    def test_tailable_on_non_capped_collection_fails(self, coll):
        coll.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find(cursor_type=CursorType.TAILABLE))
        assert exc.value.code == 2


class TestTrimming:
    def test_small_oplog_trims_but_keeps_data(self, fresh_server):
        srv = fresh_server(oplog_size_mb=1)
        with srv.client() as c:
            ol = c.local["oplog.rs"]
            coll = c.trimdb.data
            coll.insert_one({"_id": -1})
            first_ts = ol.find().sort("$natural", 1).limit(1).next()["ts"]
            pad = "z" * 10_000
            for chunk in range(30):  # 300 docs x 10 KB = ~3 MB
                coll.insert_many([{"_id": chunk * 10 + i, "pad": pad} for i in range(10)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                oldest = ol.find().sort("$natural", 1).limit(1).next()
                count = ol.count_documents({"ns": "trimdb.data"})
                if oldest["ts"] > first_ts and count < 200:
                    break
                time.sleep(0.2)
            assert oldest["ts"] > first_ts, "oldest entry should advance once the 1 MB oplog is full"
            assert count < 200, f"{count} insert entries kept; a 1 MB oplog holds ~100 10 KB entries"
            assert ol.count_documents({"ns": "trimdb.data", "o._id": -1}) == 0
            assert coll.count_documents({}) == 301, "trimming the oplog must not touch data"
            # the newest entries are kept
            newest = ol.find().sort("$natural", -1).limit(1).next()
            assert newest["o"]["_id"] == 299

    def test_updates_racing_the_trim_are_kept(self, fresh_server):
        """The trim reads the entries it removes without the writer lock and copies
        the documents still stored only there under it: an update or delete that
        lands in between must win over the trim's copy of the inserted version."""
        srv = fresh_server(oplog_size_mb=1)
        pad = "p" * 4000
        with srv.client() as c:
            coll = c.trimdb.race
            n = 600  # ~2.4 MB of inserts: the 1 MB oplog trims them while we update
            coll.insert_many([{"_id": i, "pad": pad} for i in range(n)])
            for i in range(n):
                if i % 3 == 0:
                    coll.delete_one({"_id": i})
                else:
                    coll.update_one({"_id": i}, {"$set": {"v": i}})
                if i % 50 == 0:
                    c.trimdb.other.insert_many([{"q": "q" * 4000} for _ in range(25)])
            assert eventually(
                lambda: c.local["oplog.rs"].count_documents({"ns": "trimdb.race", "op": "i"}) == 0
            )
            expected = [{"_id": i, "pad": pad, "v": i} for i in range(n) if i % 3 != 0]
            assert list(coll.find().sort("_id", 1)) == expected
        srv.restart()
        with srv.client() as c:
            assert list(c.trimdb.race.find().sort("_id", 1)) == expected

    def test_documents_of_trimmed_inserts_stay_intact(self, fresh_server):
        """An inserted document is stored once, in its oplog entry, until the entry is
        trimmed: trimming must move it into the collection, not lose it."""
        srv = fresh_server(oplog_size_mb=1)
        docs = [{"_id": i, "k": i % 7, "pad": chr(65 + i % 26) * 5000} for i in range(400)]  # ~2 MB
        with srv.client() as c:
            coll = c.trimdb.keep
            coll.create_index("k")
            coll.insert_many(docs)
            # Writes elsewhere push every one of those inserts out of the 1 MB oplog.
            for _ in range(4):
                c.trimdb.other.insert_many([{"pad": "q" * 5000} for _ in range(100)])
            # The oplog is trimmed in the background (as mongod's), soon after the writes.
            assert eventually(
                lambda: c.local["oplog.rs"].count_documents({"ns": "trimdb.keep", "op": "i"}) == 0
            )
            assert list(coll.find().sort("_id", 1)) == docs
            assert [d["_id"] for d in coll.find({"k": 3}).sort("_id", 1)] == [i for i in range(400) if i % 7 == 3]
            assert coll.update_one({"_id": 5}, {"$set": {"x": 1}}).modified_count == 1
            assert coll.delete_one({"_id": 6}).deleted_count == 1
        srv.restart()
        with srv.client() as c:
            coll = c.trimdb.keep
            assert coll.count_documents({}) == 399
            assert coll.find_one({"_id": 5}) == {**docs[5], "x": 1}
            assert coll.find_one({"_id": 399}) == docs[399]


class TestStats:
    """The oplog reports itself as mongod's capped collection does: mongosh's
    rs.printReplicationInfo() and db.getReplicationInfo() read its maxSize and size
    ($collStats storageStats), then its first and last entries in natural order."""

    def test_coll_stats_of_the_oplog(self, client, coll):
        coll.insert_many([{"x": i} for i in range(5)])
        stats = client.local.command("collStats", "oplog.rs")
        assert stats["ns"] == "local.oplog.rs"
        assert stats["capped"] is True
        assert stats["max"] == 0
        assert stats["maxSize"] == 64 * 1024 * 1024
        assert stats["nindexes"] == 0 and stats["indexSizes"] == {}
        assert stats["count"] >= 5 and stats["size"] > 0
        assert stats["avgObjSize"] == stats["size"] // stats["count"]
        assert client.local.command("collStats", "oplog.rs", scale=1024)["maxSize"] == 64 * 1024

    def test_coll_stats_count_is_the_number_of_entries(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.test.c.insert_many([{"i": i} for i in range(7)])
            stats = c.local.command("collStats", "oplog.rs")
            assert stats["count"] == oplog(c).count_documents({})

    def test_replication_info_as_mongosh_reads_it(self, client, coll):
        coll.insert_one({})
        assert "oplog.rs" in client.local.list_collection_names()
        (stats,) = oplog(client).aggregate([{"$collStats": {"storageStats": {"scale": 1}}}])
        storage = stats["storageStats"]
        assert storage["capped"] is True and storage["maxSize"] == 64 * 1024 * 1024
        log_size_mb = max(storage["maxSize"], storage["size"]) / (1024 * 1024)
        assert log_size_mb == 64
        first = oplog(client).find().sort("$natural", 1).limit(1).next()
        last = oplog(client).find().sort("$natural", -1).limit(1).next()
        assert first["ts"] == min(e["ts"] for e in oplog(client).find({}, {"ts": 1}))
        assert last["ts"] == client.admin.command("hello")["lastWrite"]["opTime"]["ts"]
        assert first["ts"] <= last["ts"]

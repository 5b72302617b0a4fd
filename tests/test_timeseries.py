"""Time-series collections: create options (checked and completed as mongod does),
listCollections, measurements (a date in the timeField, no unique _id), reads, writes,
indexes, TTL by expireAfterSeconds, restart, change streams and transactions."""

import datetime
import time

import pytest
from bson import ObjectId
from pymongo.errors import BulkWriteError, OperationFailure, WriteError


def when(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).replace(tzinfo=None)


def info(db, name):
    return {c["name"]: c for c in db.list_collections()}[name]


class TestCreate:
    def test_all_options_are_reported_with_defaults_filled_in(self, db):
        db.create_collection("ts", timeseries={"timeField": "time", "metaField": "meta",
                                               "granularity": "minutes"},
                             expireAfterSeconds=604800)
        i = info(db, "ts")
        assert i["type"] == "timeseries"
        assert i["options"] == {
            "timeseries": {"timeField": "time", "metaField": "meta", "granularity": "minutes",
                           "bucketMaxSpanSeconds": 86400},
            "expireAfterSeconds": 604800,
        }
        assert i["info"] == {"readOnly": False}
        assert "idIndex" not in i
        assert [c["name"] for c in db.list_collections(filter={"type": "timeseries"})] == ["ts"]

        db.create_collection("plain", timeseries={"timeField": "t"})
        assert info(db, "plain")["options"]["timeseries"] == {
            "timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}
        db.create_collection("custom", timeseries={"timeField": "t", "bucketMaxSpanSeconds": 3600,
                                                   "bucketRoundingSeconds": 3600})
        assert info(db, "custom")["options"]["timeseries"] == {
            "timeField": "t", "bucketRoundingSeconds": 3600, "bucketMaxSpanSeconds": 3600}

    def test_create_again(self, db):
        db.command("create", "ts", timeseries={"timeField": "t"})
        # The same options, spelled with the defaults or not: fine.
        db.command("create", "ts", timeseries={"timeField": "t", "granularity": "seconds"})
        with pytest.raises(OperationFailure) as e:
            db.command("create", "ts", timeseries={"timeField": "u"})
        assert (e.value.code, e.value.details["errmsg"]) == (
            48, f"A timeseries collection already exists. NS: {db.name}.ts")

    @pytest.mark.parametrize("options,code", [
        ({"timeseries": {"metaField": "m"}}, 40414),
        ({"timeseries": {"timeField": "t", "metaField": "_id"}}, 72),
        ({"timeseries": {"timeField": "t", "metaField": "t"}}, 72),
        ({"timeseries": {"timeField": "a.b"}}, 72),
        ({"timeseries": {"timeField": "t", "granularity": "days"}}, 2),
        ({"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 60}}, 72),
        ({"timeseries": {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 60}}, 72),
        ({"timeseries": {"timeField": "t", "unknown": 1}}, 40415),
        ({"timeseries": {"timeField": "t"}, "capped": True, "size": 4096}, 72),
        ({"timeseries": {"timeField": "t"}, "validator": {"a": 1}}, 72),
        ({"timeseries": {"timeField": "t"}, "expireAfterSeconds": -5}, 72),
        ({"timeseries": "t"}, 14),
        ({"expireAfterSeconds": 10}, 72),
    ])
    def test_bad_options(self, db, options, code):
        with pytest.raises(OperationFailure) as e:
            db.command("create", "bad", **options)
        assert e.value.code == code
        assert "bad" not in db.list_collection_names()


@pytest.fixture
def ts(db):
    return db.create_collection("ts", timeseries={"timeField": "time", "metaField": "meta"})


class TestMeasurements:
    def test_duplicate_ids_are_kept_and_read_back_as_inserted(self, ts):
        docs = [{"_id": 1, "time": when(1552949630482)}, {"_id": 1, "time": when(1552949630483)}]
        assert ts.insert_many(docs).inserted_ids == [1, 1]
        assert list(ts.find({}, sort=[("time", 1)])) == docs
        assert list(ts.find({"_id": 1}, sort=[("time", -1)])) == docs[::-1]
        assert ts.count_documents({"_id": 1}) == 2
        assert ts.estimated_document_count() == 2
        assert ts.distinct("_id") == [1]

    def test_time_field_must_be_a_date(self, ts):
        with pytest.raises(BulkWriteError) as e:
            ts.insert_many([{"time": datetime.datetime(2024, 1, 1)}, {"time": 5}, {"meta": 1}],
                           ordered=False)
        errors = e.value.details["writeErrors"]
        assert [(x["index"], x["code"]) for x in errors] == [(1, 2), (2, 2)]
        assert errors[0]["errmsg"] == "'time' must be present and contain a valid BSON UTC datetime value"
        assert ts.count_documents({}) == 1
        # An update may not take the date away either.
        with pytest.raises(WriteError) as e:
            ts.update_one({}, {"$set": {"time": "now"}})
        assert e.value.code == 2

    def test_generated_ids_updates_and_deletes(self, ts):
        t0 = datetime.datetime(2024, 5, 1)
        ts.insert_many([{"time": t0 + datetime.timedelta(minutes=i), "meta": i % 2, "v": i}
                        for i in range(6)])
        assert all(isinstance(d["_id"], ObjectId) for d in ts.find())
        assert ts.update_many({"meta": 1}, {"$inc": {"v": 100}}).modified_count == 3
        assert sorted(d["v"] for d in ts.find({"meta": 1})) == [101, 103, 105]
        assert ts.delete_many({"v": {"$lt": 3}}).deleted_count == 2
        assert [d["v"] for d in ts.find(sort=[("time", 1)])] == [101, 103, 4, 105]
        got = list(ts.aggregate([{"$group": {"_id": "$meta", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
        assert got == [{"_id": 0, "n": 1}, {"_id": 1, "n": 3}]

    def test_indexes(self, ts):
        assert list(ts.list_indexes()) == []
        ts.insert_many([{"time": datetime.datetime(2024, 1, 1, 0, i), "meta": i % 3} for i in range(9)])
        ts.create_index([("meta", 1), ("time", 1)])
        assert [i["name"] for i in ts.list_indexes()] == ["meta_1_time_1"]
        assert ts.count_documents({"meta": 2}) == 3
        assert len(list(ts.find({"meta": 1}).hint("meta_1_time_1"))) == 3
        with pytest.raises(OperationFailure) as e:
            ts.create_index("meta", unique=True)
        assert e.value.code == 72
        with pytest.raises(OperationFailure):
            list(ts.find().hint("_id_"))

    def test_ttl_removes_old_measurements(self, db):
        ts = db.create_collection("ttl", timeseries={"timeField": "t"}, expireAfterSeconds=60)
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        ts.insert_many([{"t": now - datetime.timedelta(hours=1), "old": True}, {"t": now}])
        deadline = time.monotonic() + 30
        while ts.count_documents({}) == 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [d.get("old") for d in ts.find()] == [None]

    def test_refused_in_transactions_and_change_streams(self, client, ts):
        with client.start_session() as s:
            with pytest.raises(OperationFailure) as e:
                with s.start_transaction():
                    ts.insert_one({"time": datetime.datetime(2024, 1, 1)}, session=s)
            assert e.value.code == 263
        with pytest.raises(OperationFailure) as e:
            ts.watch()
        assert e.value.code == 166
        with pytest.raises(OperationFailure) as e:
            ts.database.client.admin.command("renameCollection", f"{ts.full_name}", to=f"{ts.database.name}.x")
        assert e.value.code == 166


class TestDurableAndEvents:
    def test_survives_restart(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.t.create_collection("ts", timeseries={"timeField": "time"})
            c.t.ts.insert_many([{"_id": 1, "time": when(1000)}, {"_id": 1, "time": when(2000)}])
        srv.restart()
        with srv.client() as c:
            assert info(c.t, "ts")["type"] == "timeseries"
            assert [d["time"] for d in c.t.ts.find({"_id": 1}).sort("time", 1)] == [when(1000), when(2000)]
            c.t.ts.insert_one({"_id": 1, "time": when(3000)})
            assert c.t.ts.count_documents({}) == 3

    def test_create_event_and_no_measurement_events(self, db):
        with db.watch(show_expanded_events=True) as s:
            db.create_collection("ts", timeseries={"timeField": "time", "metaField": "m"})
            db.ts.insert_one({"time": datetime.datetime(2024, 1, 1)})
            db.marker.insert_one({"_id": "end"})
            evs = []
            deadline = time.monotonic() + 10
            while len(evs) < 3 and time.monotonic() < deadline:
                ev = s.try_next()
                if ev is not None:
                    evs.append(ev)
        kinds = [(e["operationType"], e["ns"].get("coll")) for e in evs]
        assert kinds == [("create", "ts"), ("create", "marker"), ("insert", "marker")]
        assert evs[0]["operationDescription"] == {
            "viewOn": "system.buckets.ts",
            "pipeline": [{"$_internalUnpackBucket": {"timeField": "time", "metaField": "m",
                                                     "bucketMaxSpanSeconds": 3600}}],
        }
        assert "collectionUUID" not in evs[0]

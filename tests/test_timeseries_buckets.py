"""A time-series collection seen as mongod's buckets (`<db>.system.buckets.<name>`),
what mongodump reads and mongorestore writes (issue 30): version-1 bucket documents
grouped by meta value and time window, stable between reads; inserting buckets into
another collection's buckets unpacks them into the same measurements; dbHash hashes the
buckets, as mongod's."""

import datetime

import pytest
from pymongo.errors import BulkWriteError, OperationFailure

START = datetime.datetime(2026, 11, 1)


def fill(db, name, n=300):
    db.create_collection(name, timeseries={"timeField": "ts", "metaField": "host",
                                           "granularity": "seconds"})
    db[name].insert_many([{"ts": START + datetime.timedelta(seconds=20 * i),
                           "host": f"h{i % 3}", "cpu": i % 100} for i in range(n)])


def buckets(db, name):
    return list(db[f"system.buckets.{name}"].find().hint([("$natural", 1)]))


def test_buckets_group_measurements_by_meta_and_window(db):
    fill(db, "metrics")
    got = buckets(db, "metrics")
    # 300 measurements 20 s apart over 3 hosts: each host one per minute for 100
    # minutes, hour-long buckets starting at a minute boundary → 2 buckets per host.
    assert len(got) == 6, [b["_id"] for b in got]
    assert got == buckets(db, "metrics"), "the same buckets on every read"
    assert [b["_id"] for b in got] == sorted(b["_id"] for b in got)
    for b in got:
        assert b["control"]["version"] == 1
        assert b["meta"] in ("h0", "h1", "h2")
        assert set(b["data"]) == {"ts", "cpu", "_id"}
        n = len(b["data"]["ts"])
        assert list(b["data"]["ts"]) == [str(i) for i in range(n)]
        times = list(b["data"]["ts"].values())
        assert times == sorted(times)
        assert b["control"]["min"]["ts"] <= times[0] and b["control"]["max"]["ts"] == times[-1]
        assert b["control"]["min"]["ts"].second == 0, "the start is rounded to the minute"
        assert times[-1] - b["control"]["min"]["ts"] < datetime.timedelta(hours=1)
    assert sum(len(b["data"]["ts"]) for b in got) == 300
    assert db["system.buckets.metrics"].count_documents({}) == 6
    assert db["system.buckets.metrics"].count_documents({"meta": "h1"}) == 2
    assert db.command("count", "system.buckets.metrics")["n"] == 6


def test_inserted_buckets_become_the_same_measurements(db):
    fill(db, "source")
    db.create_collection("copy", timeseries={"timeField": "ts", "metaField": "host",
                                             "granularity": "seconds"})
    result = db["system.buckets.copy"].insert_many(buckets(db, "source"))
    assert len(result.inserted_ids) == 6
    key = lambda d: (d["ts"], d["host"])
    source = sorted(db.source.find({}, {"_id": 0}), key=key)
    copy = sorted(db.copy.find({}, {"_id": 0}), key=key)
    assert [dict(sorted(d.items())) for d in source] == [dict(sorted(d.items())) for d in copy]
    assert db.copy.count_documents({}) == 300
    # dbHash hashes the buckets, under mongod's name: equal for the two collections.
    hashes = db.command("dbHash")["collections"]
    assert hashes["system.buckets.source"] == hashes["system.buckets.copy"]
    assert "source" not in hashes


@pytest.mark.parametrize("bucket, code", [
    ({"data": {}}, 121),
    ({"control": {"version": 2}, "data": {}}, 2),
    ({"control": {"version": 1}, "data": {"cpu": {"0": 1}}}, 121),
    ({"control": {"version": 1}, "data": {"ts": {"0": 5}}}, 121),
])
def test_bad_buckets_get_clean_errors(db, bucket, code):
    db.create_collection("m", timeseries={"timeField": "ts"})
    with pytest.raises(BulkWriteError) as e:
        db["system.buckets.m"].insert_many([bucket, {"control": {"version": 1},
                                                     "data": {"ts": {"0": START}}}])
    errors = e.value.details["writeErrors"]
    assert [(w["index"], w["code"]) for w in errors] == [(0, code)], errors
    assert db.m.count_documents({}) == 0, "ordered: nothing after the failed bucket"

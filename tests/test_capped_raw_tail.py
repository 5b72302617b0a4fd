"""The getMores of an unfiltered tailable cursor on a capped collection send the stored
BSON as it is (no decoding and re-encoding on the server): what a client receives must
be byte for byte what a plain find of the same documents returns, the current version
of each document, in insertion order, within mongod's batch limits."""

import datetime
import re

import bson
import pytest
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import OperationFailure

RAW = CodecOptions(document_class=RawBSONDocument)

# Every BSON type a stored document can hold.
VARIED = [
    {"_id": 1, "s": "text", "i": 7, "l": bson.Int64(1 << 40), "d": 1.5,
     "dec": bson.Decimal128("1.10"), "b": True, "n": None,
     "dt": datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)},
    {"_id": 2, "oid": bson.ObjectId(), "bin": bson.Binary(b"\x00\x01", 0),
     "uuid": bson.Binary(b"0123456789abcdef", 4), "re": bson.Regex("^a.c$", "im"),
     "ts": bson.Timestamp(5, 6), "code": bson.Code("x + 1"), "min": bson.MinKey(),
     "max": bson.MaxKey()},
    {"_id": 3, "nested": {"a": [1, {"b": [2, 3]}, []], "e": {}}, "arr": [[], [[1]]]},
]


def raw_batch(reply, key):
    return [d.raw for d in reply["cursor"][key]]


def tail(db, name, **kw):
    """A tailable cursor that has read nothing yet (an empty first batch)."""
    first = db.command("find", name, tailable=True, awaitData=True, batchSize=0, **kw)
    assert first["cursor"]["firstBatch"] == []
    return first["cursor"]["id"]


def get_more(db, name, cursor_id, **kw):
    return db.command("getMore", cursor_id, collection=name, maxTimeMS=50,
                      codec_options=RAW, **kw)


def test_batches_are_byte_for_byte_the_stored_documents(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_many(VARIED)
    got = raw_batch(get_more(db, "bus", cursor_id), "nextBatch")
    expected = [d.raw for d in db.get_collection("bus", codec_options=RAW).find()]
    assert got == expected
    assert [bson.decode(b)["_id"] for b in got] == [1, 2, 3]
    # Nothing new: an empty batch, the cursor stays open.
    again = get_more(db, "bus", cursor_id)
    assert raw_batch(again, "nextBatch") == [] and again["cursor"]["id"] == cursor_id


def test_a_document_updated_before_it_is_read_comes_in_its_current_version(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_many([{"_id": i, "v": "before"} for i in range(3)])
    coll.update_one({"_id": 1}, {"$set": {"v": "after!"}})
    got = [bson.decode(b) for b in raw_batch(get_more(db, "bus", cursor_id), "nextBatch")]
    assert got == [{"_id": 0, "v": "before"}, {"_id": 1, "v": "after!"},
                   {"_id": 2, "v": "before"}]


def test_batch_size_and_the_reply_size_limit_split_batches(db):
    coll = db.create_collection("bus", capped=True, size=64 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_many([{"_id": i} for i in range(5)])
    sizes = [len(raw_batch(get_more(db, "bus", cursor_id, batchSize=2), "nextBatch"))
             for _ in range(3)]
    assert sizes == [2, 2, 1]
    # 6 MB documents: two fit in a 16 MiB reply, a third starts the next one.
    big = "x" * (6 << 20)
    for i in range(3):
        coll.insert_one({"_id": 10 + i, "pad": big})
    batches = [raw_batch(get_more(db, "bus", cursor_id), "nextBatch") for _ in range(2)]
    assert [len(b) for b in batches] == [2, 1]
    assert all(sum(len(d) for d in b) <= 16 * 1024 * 1024 for b in batches)
    assert [bson.decode(d)["_id"] for b in batches for d in b] == [10, 11, 12]


def test_a_filtered_cursor_still_filters(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus", filter={"keep": True})
    coll.insert_many([{"_id": i, "keep": i % 2 == 0} for i in range(6)])
    got = [bson.decode(b)["_id"] for b in raw_batch(get_more(db, "bus", cursor_id), "nextBatch")]
    assert got == [0, 2, 4]


def test_deleted_documents_are_skipped(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_many([{"_id": i} for i in range(4)])
    coll.delete_one({"_id": 2})
    got = [bson.decode(b)["_id"] for b in raw_batch(get_more(db, "bus", cursor_id), "nextBatch")]
    assert got == [0, 1, 3]


def test_a_converted_collection_tails_its_current_documents(db):
    coll = db.plain
    coll.insert_many([{"_id": i, "v": "old"} for i in range(3)])
    coll.update_one({"_id": 2}, {"$set": {"v": "new"}})
    db.command("convertToCapped", "plain", size=1 << 20)
    cursor_id = tail(db, "plain")
    got = [bson.decode(b) for b in raw_batch(get_more(db, "plain", cursor_id), "nextBatch")]
    assert got == [{"_id": 0, "v": "old"}, {"_id": 1, "v": "old"}, {"_id": 2, "v": "new"}]
    coll.insert_one({"_id": 3, "v": "later"})
    coll.update_one({"_id": 3}, {"$set": {"v": "LATER"}})
    got = [bson.decode(b) for b in raw_batch(get_more(db, "plain", cursor_id), "nextBatch")]
    assert got == [{"_id": 3, "v": "LATER"}]


def test_a_recreated_collection_serves_its_own_documents(db):
    first = db.create_collection("bus", capped=True, size=1 << 20)
    first.insert_many([{"_id": i, "gen": 1} for i in range(3)])
    first.update_one({"_id": 0}, {"$set": {"gen": -1}})
    db.drop_collection("bus")
    again = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    again.insert_many([{"_id": i, "gen": 2} for i in range(3)])
    got = [bson.decode(b) for b in raw_batch(get_more(db, "bus", cursor_id), "nextBatch")]
    assert got == [{"_id": i, "gen": 2} for i in range(3)]


def read_ids(db, name, cursor_id, **kw):
    return [bson.decode(b)["_id"] for b in raw_batch(get_more(db, name, cursor_id, **kw),
                                                        "nextBatch")]


def test_documents_inserted_after_the_position_come_as_stored(db):
    # A cursor that has read something continues after it (the server may take these
    # from its recent oplog rather than from the collection: the bytes must not differ).
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    other = db.create_collection("other", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    other_id = tail(db, "other")
    coll.insert_one(VARIED[0])
    assert read_ids(db, "bus", cursor_id) == [1]
    for d in VARIED[1:]:
        other.insert_one({"_id": d["_id"], "in": "other"})
        coll.insert_one(d)
    got = raw_batch(get_more(db, "bus", cursor_id), "nextBatch")
    stored = db.get_collection("bus", codec_options=RAW).find(sort=[("$natural", 1)])
    assert got == [d.raw for d in stored][1:]
    assert read_ids(db, "other", other_id) == [2, 3]


def test_after_the_position_updates_and_deletes_show(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_one({"_id": 0, "v": "x"})
    assert read_ids(db, "bus", cursor_id) == [0]
    coll.insert_many([{"_id": i, "v": "x"} for i in range(1, 5)])
    coll.update_one({"_id": 2}, {"$set": {"v": "y"}})
    coll.delete_one({"_id": 3})
    got = [bson.decode(b) for b in raw_batch(get_more(db, "bus", cursor_id), "nextBatch")]
    assert got == [{"_id": 1, "v": "x"}, {"_id": 2, "v": "y"}, {"_id": 4, "v": "x"}]
    coll.insert_one({"_id": 5, "v": "x"})
    assert read_ids(db, "bus", cursor_id) == [5]


def test_eviction_behind_the_position_is_not_seen_and_of_it_is_lost(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20, max=3)
    cursor_id = tail(db, "bus")
    coll.insert_many([{"_id": i} for i in range(3)])
    assert read_ids(db, "bus", cursor_id) == [0, 1, 2]
    coll.insert_one({"_id": 3})  # evicts 0, behind the position
    assert read_ids(db, "bus", cursor_id) == [3]
    coll.insert_many([{"_id": i} for i in range(4, 7)])  # evicts 1, 2 and 3, the position
    with pytest.raises(OperationFailure) as exc:
        get_more(db, "bus", cursor_id)
    assert exc.value.code == 136 and exc.value.details["codeName"] == "CappedPositionLost"


def test_inserts_evicted_by_their_own_batch_are_never_read(db):
    coll = db.create_collection("bus", capped=True, size=1 << 20, max=3)
    cursor_id = tail(db, "bus")
    coll.insert_one({"_id": 0})
    assert read_ids(db, "bus", cursor_id) == [0]
    # Evicts 0 (the position), then 1 and 2 of the same batch: none of 1..2 ever shows.
    coll.insert_many([{"_id": i} for i in range(1, 6)])
    with pytest.raises(OperationFailure) as exc:
        get_more(db, "bus", cursor_id)
    assert exc.value.code == 136
    assert [read_ids(db, "bus", tail(db, "bus"))] == [[3, 4, 5]]


def test_the_reply_size_limit_splits_documents_after_the_position(db):
    coll = db.create_collection("bus", capped=True, size=64 << 20)
    cursor_id = tail(db, "bus")
    coll.insert_one({"_id": -1})
    assert read_ids(db, "bus", cursor_id) == [-1]
    pad = "x" * (60 << 10)  # small enough to be kept in the recent oplog
    coll.insert_many([{"_id": i, "pad": pad} for i in range(300)])
    batches = []
    while sum(len(b) for b in batches) < 300:
        batch = raw_batch(get_more(db, "bus", cursor_id), "nextBatch")
        assert batch and sum(len(d) for d in batch) <= 16 * 1024 * 1024
        batches.append(batch)
    assert len(batches) == 2
    assert [bson.decode(d)["_id"] for b in batches for d in b] == list(range(300))

"""`$changeStreamSplitLargeEvent` (MongoDB 7.0): an event over 16 MiB comes in
fragments of whole top-level fields, smallest first, each with `splitEvent: {fragment,
of}` and its own resume token; a stream resumes from any fragment's token; the stage must
be the last of a change stream's pipeline, with an empty spec (mongod's codes 7182802,
7182800, 20 outside a change stream, 280 for a split resume without it)."""

import bson
import pytest
from pymongo.errors import OperationFailure

from conftest import next_event

MAX_EVENT_BYTES = 16 * 1024 * 1024
BIG = 10 << 20
SPLIT = [{"$changeStreamSplitLargeEvent": {}}]
IMAGES = {"full_document_before_change": "required", "full_document": "updateLookup"}


def events(stream, n):
    return [next_event(stream) for _ in range(n)]


@pytest.fixture
def big(db):
    db.create_collection("big", changeStreamPreAndPostImages={"enabled": True})
    db.big.insert_one({"_id": 1, "v": "q" * BIG})
    return db.big


def update_event_fragments(big, **opts):
    """Watches with the split stage, makes one update event of about 30 MiB (pre-image,
    post-image, updated field: 10 MiB each) and a small one after it."""
    with big.watch(SPLIT, **IMAGES, **opts) as s:
        big.update_one({"_id": 1}, {"$set": {"v": "z" * BIG}})
        big.insert_one({"_id": 2})
        return events(s, 4)


def test_large_event_comes_in_fragments_with_every_field(big):
    f1, f2, f3, after = update_event_fragments(big)
    fragments = [f1, f2, f3]
    for i, f in enumerate(fragments, start=1):
        assert f["splitEvent"] == {"fragment": i, "of": 3}
        assert len(bson.encode(f)) <= MAX_EVENT_BYTES
    assert len({bson.encode(f["_id"]) for f in fragments}) == 3
    fields = [set(f) - {"_id", "splitEvent"} for f in fragments]
    # Smallest fields first: the event's context is in the first fragment.
    assert {"operationType", "ns", "documentKey", "clusterTime"} <= fields[0]
    assert f1["operationType"] == "update" and f1["documentKey"] == {"_id": 1}
    big_fields = {"updateDescription", "fullDocument", "fullDocumentBeforeChange"}
    assert set().union(*fields) >= big_fields
    assert sum(len(f & big_fields) for f in fields) == 3
    merged = {k: v for f in fragments for k, v in f.items()}
    assert merged["fullDocumentBeforeChange"]["v"][0] == "q"
    assert merged["fullDocument"]["v"][0] == "z"
    assert merged["updateDescription"]["updatedFields"]["v"][0] == "z"
    # A small event is not split.
    assert "splitEvent" not in after and after["operationType"] == "insert"


def test_resume_from_each_fragment(big):
    fragments = update_event_fragments(big)
    for i, f in enumerate(fragments[:3]):
        with big.watch(SPLIT, **IMAGES, resume_after=f["_id"]) as s:
            rest = events(s, 3 - i)
        assert [e["_id"] for e in rest] == [g["_id"] for g in fragments[i + 1 :]]
        assert rest[-1]["documentKey"] == {"_id": 2}


def test_resume_from_a_fragment_needs_the_stage(big):
    f1 = update_event_fragments(big)[0]
    with pytest.raises(OperationFailure) as exc:
        with big.watch([], **IMAGES, resume_after=f1["_id"]) as s:
            s.try_next()
    assert exc.value.code == 280
    assert "must include a $changeStreamSplitLargeEvent stage" in str(exc.value)


def test_large_event_without_the_stage_fails(big):
    with big.watch([], **IMAGES) as s:
        big.update_one({"_id": 1}, {"$set": {"v": "z" * BIG}})
        with pytest.raises(OperationFailure) as exc:
            next_event(s)
    assert exc.value.code == 10334


def test_stage_errors(coll):
    with pytest.raises(OperationFailure) as exc:
        coll.watch(SPLIT + [{"$match": {}}])
    assert exc.value.code == 7182802
    with pytest.raises(OperationFailure) as exc:
        coll.watch([{"$changeStreamSplitLargeEvent": {"x": 1}}])
    assert exc.value.code == 7182800
    with pytest.raises(OperationFailure) as exc:
        list(coll.aggregate(SPLIT))
    assert exc.value.code == 20
    assert "can only be used in a $changeStream pipeline" in str(exc.value)

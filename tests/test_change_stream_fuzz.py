"""Change streams fed with random and malformed options: every reply is a MongoDB reply.

Seeded random cases (the same ones on every run) of `$changeStream` stages, the stages
after it, damaged resume tokens and getMore fields. Whatever the server makes of a case,
it must answer it as mongod would shape an answer: `ok: 1` with a cursor, or `ok: 0` with
an integer `code`, its `codeName` and an `errmsg`, on the same connection, and then keep
serving: no crash, no closed connection, no cursor left behind, and a stream opened at
the end still sees a new write.
"""

import random

import pytest
from bson import Binary, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from pymongo.errors import OperationFailure

from conftest import next_event

SEEDS = range(6)
CASES_PER_SEED = 60

OPTION_NAMES = [
    "resumeAfter", "startAfter", "startAtOperationTime", "fullDocument",
    "fullDocumentBeforeChange", "showExpandedEvents", "allChangesForCluster",
    "allowToRunOnConfigDB", "allowToRunOnSystemNS", "showSystemEvents",
    "showMigrationEvents", "showRawUpdateDescription", "bogus",
]
STAGE_NAMES = [
    "$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot",
    "$replaceWith", "$redact", "$changeStreamSplitLargeEvent", "$group", "$sort",
    "$limit", "$skip", "$lookup", "$out", "$merge", "$changeStream", "$facet",
    "$count", "$sample", "$unwind", "$bogus",
]


def scalar(rng):
    return rng.choice([
        None, True, False, 0, -1, 1, 2**31 - 1, -(2**31), Int64(2**62), 1.5,
        float("nan"), float("inf"), "", "x", "updateLookup", "whenAvailable",
        "required", "off", "default", "$x", "a.b", "\u00e9" * 3, "z" * 2000,
        Timestamp(0, 0), Timestamp(1, 1), Timestamp(2**32 - 1, 2**32 - 1),
        ObjectId(b"\x00" * 12), Binary(b"\x01\x02"), Regex("^a"), MinKey(), MaxKey(),
    ])


def value(rng, depth=0):
    kind = rng.randrange(10 if depth < 3 else 6)
    if kind < 6:
        return scalar(rng)
    if kind < 8:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["_data", "_typeBits", "a", "$eq", "$exists", "operationType", "_id",
            "fullDocument", "$literal", "$$ROOT", "ts", "t"]
    return {rng.choice(keys): value(rng, depth + 1) for _ in range(rng.randrange(4))}


def damaged_token(rng, good):
    """A resume token made from a real one: truncated, flipped, padded or retyped."""
    data = good["_data"]
    how = rng.randrange(7)
    if how == 0:
        data = data[: rng.randrange(len(data))]
    elif how == 1:
        i = rng.randrange(len(data))
        data = data[:i] + rng.choice("0123456789ABCDEFxz") + data[i + 1:]
    elif how == 2:
        data = data + "".join(rng.choice("0123456789ABCDEF") for _ in range(rng.randrange(1, 40)))
    elif how == 3:
        data = data.lower()
    elif how == 4:
        return {"_data": data, "_typeBits": value(rng)}
    elif how == 5:
        return {"_data": value(rng)}
    else:
        return {"_data": data, rng.choice(["extra", "_id", "$x"]): value(rng)}
    return {"_data": data}


def plausible_option(rng, name, good_token):
    """A value of the type the option takes (often a valid one)."""
    if name in ("resumeAfter", "startAfter"):
        return damaged_token(rng, good_token) if rng.random() < 0.7 else good_token
    if name == "startAtOperationTime":
        return rng.choice([Timestamp(0, 0), Timestamp(1, 1), Timestamp(2**31, 0),
                           Timestamp(2**32 - 1, 2**32 - 1), good_token["_data"]])
    if name == "fullDocument":
        return rng.choice(["default", "updateLookup", "whenAvailable", "required", "x", ""])
    if name == "fullDocumentBeforeChange":
        return rng.choice(["off", "whenAvailable", "required", "default", ""])
    return rng.choice([True, False])


def change_stream_stage(rng, good_token):
    spec = {}
    for _ in range(rng.randrange(4)):
        name = rng.choice(OPTION_NAMES)
        if rng.random() < 0.75:
            spec[name] = plausible_option(rng, name, good_token)
        else:
            spec[name] = value(rng)
    return spec


def following_stages(rng):
    stages = []
    for _ in range(rng.randrange(3)):
        name = rng.choice(STAGE_NAMES)
        field = rng.choice(["operationType", "fullDocument.a", "ns.coll", "_id",
                            "documentKey._id", "updateDescription", "clusterTime", "x.$y"])
        if name == "$match" and rng.random() < 0.7:
            arg = {field: value(rng)}
        elif name in ("$project", "$addFields", "$set") and rng.random() < 0.7:
            arg = {field: rng.choice([0, 1, True, "$operationType", "$_id", {"$literal": 1}])}
        elif name == "$unset" and rng.random() < 0.7:
            arg = field
        elif name in ("$replaceRoot", "$replaceWith") and rng.random() < 0.7:
            root = rng.choice(["$fullDocument", "$$ROOT", {"_id": "$_id"}, "$missing"])
            arg = {"newRoot": root} if name == "$replaceRoot" else root
        elif name == "$changeStreamSplitLargeEvent" and rng.random() < 0.7:
            arg = {}
        else:
            arg = value(rng)
        stages.append({name: arg})
    return stages


def assert_error_shape(exc, case):
    details = exc.details or {}
    assert details.get("ok") == 0, (case, details)
    assert isinstance(details.get("code"), int) and details["code"] > 0, (case, details)
    assert isinstance(details.get("codeName"), str) and details["codeName"], (case, details)
    assert isinstance(details.get("errmsg"), str) and details["errmsg"], (case, details)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_change_stream_requests_get_mongodb_replies(client, db, seed):
    rng = random.Random(seed)
    coll = db.fuzz
    with coll.watch() as s:
        coll.insert_one({"a": 1})
        good_token = next_event(s)["_id"]
    open_before = client.admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
    outcomes = {"ok": 0, "error": 0}
    for i in range(CASES_PER_SEED):
        target = rng.choice(["fuzz", "fuzz", 1])
        pipeline = [{"$changeStream": change_stream_stage(rng, good_token)}, *following_stages(rng)]
        cursor_opt = {"batchSize": rng.choice([0, 1, 2, 101, -1, "x", None])}
        if cursor_opt["batchSize"] is None:
            cursor_opt = {}
        case = (seed, i, target, pipeline, cursor_opt)
        try:
            reply = db.command("aggregate", target, pipeline=pipeline, cursor=cursor_opt)
        except OperationFailure as e:
            assert_error_shape(e, case)
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        cursor = reply["cursor"]
        assert "postBatchResumeToken" in cursor, case
        cid = cursor["id"]
        coll.insert_one({"a": i, "msg": "m"})
        if cid:
            get_more = {
                "collection": "fuzz" if target == "fuzz" else "$cmd.aggregate",
                "batchSize": rng.choice([1, 2, 1000, -5, 0, "x"]),
                "maxTimeMS": rng.choice([0, 1, 20, -1, "x", 1.5]),
            }
            try:
                more = db.command("getMore", Int64(cid), **get_more)
                assert "postBatchResumeToken" in more["cursor"], case
                cid = more["cursor"]["id"]
            except OperationFailure as e:
                assert_error_shape(e, (case, get_more))
            if cid:
                db.command("killCursors", "fuzz" if target == "fuzz" else "$cmd.aggregate",
                           cursors=[Int64(cid)])
    # Both kinds of outcome occurred, so the cases reached past option parsing.
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes
    open_after = client.admin.command("serverStatus")["metrics"]["cursor"]["open"]["total"]
    assert open_after == open_before, (open_before, open_after)
    # The server still serves change streams on this connection.
    assert client.admin.command("ping")["ok"] == 1
    with coll.watch() as s:
        coll.insert_one({"after": seed})
        assert next_event(s)["fullDocument"]["after"] == seed

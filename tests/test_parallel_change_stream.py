"""Parallel change streams (issue 28, seed 004): `parallelChangeStream` splits the
deployment's change stream into buckets, each a cursor read with ordinary getMores.

Every test restricts its stream to its own database with `nsRegex` (the server is
shared with other tests)."""

import re

import pytest
from bson import Timestamp
from bson.regex import Regex
from pymongo.errors import OperationFailure

from conftest import eventually


def open_parallel(client, session, db, **opts):
    reply = client.admin.command(
        "parallelChangeStream", 1, nsRegex=Regex("^" + re.escape(db.name) + r"(\.|$)"),
        session=session, **opts)
    assert reply["ns"] == "admin.$cmd.aggregate"
    return reply["cursors"]


def drain(client, session, ids, want, timeout=15.0):
    """getMores on every bucket until `want` events in all: {cursor id: events}."""
    got = {i: [] for i in ids}

    def enough():
        for i in ids:
            r = client.admin.command("getMore", i, collection="$cmd.aggregate",
                                     maxTimeMS=50, session=session)
            # Every reply carries the bucket's resume point, with events or without.
            assert "postBatchResumeToken" in r["cursor"]
            got[i].extend(r["cursor"]["nextBatch"])
        return sum(len(v) for v in got.values()) >= want
    assert eventually(enough, timeout=timeout), {i: len(v) for i, v in got.items()}
    return got


def close(client, session, ids):
    client.admin.command("killCursors", "$cmd.aggregate", cursors=ids, session=session)


def test_buckets_by_namespace_split_the_stream_and_keep_each_collections_order(client, db):
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=4)
        assert len(ids) == 4 and len(set(ids)) == 4
        for c in range(8):
            for i in range(20):
                db[f"c{c}"].insert_one({"_id": i})
        got = drain(client, s, ids, 160)
        close(client, s, ids)
    assert sum(len(v) for v in got.values()) == 160
    bucket_of = {}
    for cursor, events in got.items():
        by_coll = {}
        for ev in events:
            assert ev["operationType"] == "insert"
            coll = ev["ns"]["coll"]
            # A collection's events are all in one bucket ...
            assert bucket_of.setdefault(coll, cursor) == cursor
            by_coll.setdefault(coll, []).append(ev["documentKey"]["_id"])
        # ... in the order they were written.
        for ids_in_order in by_coll.values():
            assert ids_in_order == list(range(20))
    assert sorted(bucket_of) == [f"c{c}" for c in range(8)]
    # Eight collections over four buckets: more than one bucket has work.
    assert len(set(bucket_of.values())) > 1


def test_buckets_by_document_key_spread_one_collection_and_keep_each_documents_order(
        client, db):
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=4, by="documentKey")
        db.one.insert_many([{"_id": i, "n": 0} for i in range(100)])
        for i in range(100):
            db.one.update_one({"_id": i}, {"$inc": {"n": 1}})
        got = drain(client, s, ids, 200)
        close(client, s, ids)
    assert all(got[i] for i in ids), "one collection spread over every bucket"
    home = {}
    for cursor, events in got.items():
        seen = {}
        for ev in events:
            key = ev["documentKey"]["_id"]
            assert home.setdefault(key, cursor) == cursor
            seen.setdefault(key, []).append(ev["operationType"])
        for ops in seen.values():
            assert ops == ["insert", "update"]
    assert len(home) == 100


def test_a_drop_and_a_rename_are_events_and_the_bucket_goes_on(client, db):
    with client.start_session() as s:
        [cursor] = open_parallel(client, s, db, nBuckets=1)
        db.a.insert_one({"_id": 1})
        db.a.rename("b")
        db.b.drop()
        db.a.insert_one({"_id": 2})
        got = drain(client, s, [cursor], 4)[cursor]
        close(client, s, [cursor])
    assert [e["operationType"] for e in got] == ["insert", "rename", "drop", "insert"]
    assert got[-1]["documentKey"] == {"_id": 2}


def test_start_at_operation_time_replays_what_was_written_before(client, db):
    db.early.insert_one({"_id": "before"})
    at = db.command("insert", "early", documents=[{"_id": "at or after"}])["operationTime"]
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=2, startAtOperationTime=at)
        got = drain(client, s, ids, 1)
        close(client, s, ids)
    keys = [e["documentKey"]["_id"] for v in got.values() for e in v]
    assert keys == ["at or after"]


def test_the_pipeline_and_options_apply_in_every_bucket(client, db):
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=2, by="documentKey",
                            pipeline=[{"$match": {"operationType": "update"}},
                                      {"$project": {"documentKey": 1, "fullDocument": 1}}],
                            fullDocument="updateLookup")
        db.p.insert_many([{"_id": i, "n": 0} for i in range(10)])
        db.p.update_many({}, {"$set": {"n": 1}})
        got = drain(client, s, ids, 10)
        close(client, s, ids)
    events = [e for v in got.values() for e in v]
    assert sorted(e["documentKey"]["_id"] for e in events) == list(range(10))
    assert all(e["fullDocument"]["n"] == 1 and "operationType" not in e for e in events)


@pytest.mark.parametrize("opts,code", [
    ({}, 40414),
    ({"nBuckets": 0}, 2),
    ({"nBuckets": 1025}, 2),
    ({"nBuckets": "four"}, 14),
    ({"nBuckets": 2, "nsRegex": Regex("(")}, 51091),
    ({"nBuckets": 2, "nsRegex": 5}, 14),
    ({"nBuckets": 2, "by": "shard"}, 2),
    ({"nBuckets": 2, "pipeline": [{"$group": {"_id": 1}}]}, 20),
    ({"nBuckets": 2, "pipeline": {"$match": {}}}, 14),
    ({"nBuckets": 2, "startAtOperationTime": "yesterday"}, 14),
    ({"nBuckets": 2, "startAtOperationTime": Timestamp(1, 1),
      "resumeAfter": {"_data": "82"}}, 40674),
])
def test_bad_input_gets_mongods_errors(client, opts, code):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("parallelChangeStream", 1, **opts)
    assert e.value.code == code, e.value.details


def test_it_runs_on_admin_only(client, db):
    with pytest.raises(OperationFailure) as e:
        db.command("parallelChangeStream", 1, nBuckets=2)
    assert e.value.code == 13


def test_resuming_every_bucket_after_one_token_delivers_what_follows_it(client, db):
    """The seed's rule: a stream resumes from one point (the smallest of its buckets'),
    every bucket after it; a bucket may see again what it had (at least once)."""
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=3, by="documentKey")
        for i in range(12):
            db.r.insert_one({"_id": i})
        got = drain(client, s, ids, 12)
        close(client, s, ids)
    events = sorted((e for v in got.values() for e in v), key=lambda e: e["clusterTime"])
    assert [e["documentKey"]["_id"] for e in events] == list(range(12))
    token = events[4]["_id"]
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=3, by="documentKey", resumeAfter=token)
        again = drain(client, s, ids, 7)
        close(client, s, ids)
    keys = sorted(e["documentKey"]["_id"] for v in again.values() for e in v)
    assert keys == list(range(5, 12))


def test_resuming_each_bucket_after_its_own_token_repeats_nothing(client, db):
    """A token per bucket (each bucket's last postBatchResumeToken, in the order of
    `cursors`): every bucket resumes after its own, exactly once."""
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=3, by="documentKey")
        db.x.insert_many([{"_id": i} for i in range(12)])
        first = {i: [] for i in ids}
        tokens = {}

        def drained():
            for i in ids:
                r = client.admin.command("getMore", i, collection="$cmd.aggregate",
                                         maxTimeMS=50, session=s)["cursor"]
                first[i].extend(r["nextBatch"])
                tokens[i] = r["postBatchResumeToken"]
            return sum(len(v) for v in first.values()) == 12
        assert eventually(drained, timeout=15)
        close(client, s, ids)
        db.x.insert_many([{"_id": i} for i in range(12, 18)])
        resumed = open_parallel(client, s, db, nBuckets=3, by="documentKey",
                                resumeAfter=[tokens[i] for i in ids])
        again = drain(client, s, resumed, 6)
        close(client, s, resumed)
    # Nothing of the first twelve again, in any bucket.
    keys = sorted(e["documentKey"]["_id"] for v in again.values() for e in v)
    assert keys == list(range(12, 18))


def test_a_token_list_of_the_wrong_length_is_refused(client, db):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("parallelChangeStream", 1, nBuckets=3,
                             resumeAfter=[{"_data": "82"}, {"_data": "82"}])
    assert e.value.code == 2


def test_every_getmore_says_the_combined_resume_point_the_smallest_over_buckets(client, db):
    """Each bucket's reply carries its own postBatchResumeToken and the stream's
    combinedResumeToken: the smallest of the buckets' positions, so resuming every
    bucket after it (the seed's rule) loses nothing."""
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=2)
        # Two collections in different buckets (by namespace).
        names = [f"c{i}" for i in range(16)]
        from_bucket = {}
        for name in names:
            db[name].insert_one({"_id": 0})
        got = drain(client, s, ids, 16)
        for i, events in got.items():
            for e in events:
                from_bucket.setdefault(i, e["ns"]["coll"])
        busy, quiet = (db[from_bucket[ids[0]]], ids[0]), (db[from_bucket[ids[1]]], ids[1])
        busy[0].insert_one({"_id": "later"})
        # Only the busy bucket's consumer reads: its position passes the quiet one's.
        reply = client.admin.command("getMore", busy[1], collection="$cmd.aggregate",
                                     maxTimeMS=500, session=s)["cursor"]
        assert [e["documentKey"]["_id"] for e in reply["nextBatch"]] == ["later"]
        combined = reply["combinedResumeToken"]
        assert combined != reply["postBatchResumeToken"]
        quiet_reply = client.admin.command("getMore", quiet[1], collection="$cmd.aggregate",
                                           maxTimeMS=500, session=s)["cursor"]
        assert quiet_reply["nextBatch"] == []
        # Resuming every bucket after the combined point loses nothing: the later
        # insert comes again (at least once).
        resumed = open_parallel(client, s, db, nBuckets=2, resumeAfter=combined)
        again = drain(client, s, resumed, 1)
        close(client, s, ids + resumed)
    keys = [e["documentKey"]["_id"] for v in again.values() for e in v]
    assert "later" in keys


def bucket_stage(n, b, by="documentKey"):
    return [{"$changeStreamBucket": {"nBuckets": n, "bucket": b, "by": by}}]


def test_a_bucket_is_an_ordinary_watch_stream_and_the_driver_resumes_it(client, db):
    """`watch([{$changeStreamBucket: ...}])` with an unchanged pymongo: each stream gets
    its bucket's share; after its cursor dies, pymongo's automatic resume continues the
    bucket after its last event, repeating nothing."""
    streams = [db.w.watch(bucket_stage(2, b), max_await_time_ms=100) for b in (0, 1)]
    try:
        for s in streams:
            assert s.try_next() is None
        db.w.insert_many([{"_id": i} for i in range(20)])
        seen = [[], []]

        def read(upto):
            for b, s in enumerate(streams):
                ev = s.try_next()
                if ev is not None:
                    seen[b].append(ev["documentKey"]["_id"])
            return sum(map(len, seen)) >= upto
        assert eventually(lambda: read(20), timeout=10)
        assert seen[0] and seen[1]
        assert sorted(seen[0] + seen[1]) == list(range(20))
        # The server forgets bucket 0's cursor: the next getMore fails with
        # CursorNotFound, which the driver resumes from (its last token).
        db.command("killCursors", "w", cursors=[streams[0]._cursor.cursor_id])
        db.w.insert_many([{"_id": i} for i in range(20, 30)])
        assert eventually(lambda: read(30), timeout=10)
        assert sorted(seen[0] + seen[1]) == list(range(30))
    finally:
        for s in streams:
            s.close()


@pytest.mark.parametrize("pipeline,code", [
    ([{"$match": {}}, {"$changeStreamBucket": {"nBuckets": 2, "bucket": 0}}], 40602),
    ([{"$changeStreamBucket": {"nBuckets": 2, "bucket": 2}}], 2),
    ([{"$changeStreamBucket": {"nBuckets": 0, "bucket": 0}}], 2),
    ([{"$changeStreamBucket": {"bucket": 0}}], 40414),
    ([{"$changeStreamBucket": {"nBuckets": 2, "bucket": 0, "by": "shard"}}], 2),
    ([{"$changeStreamBucket": {"nBuckets": 2, "bucket": 0, "extra": 1}}], 40415),
    ([{"$changeStreamBucket": 3}], 14),
])
def test_a_bad_bucket_stage_gets_mongods_errors(db, pipeline, code):
    with pytest.raises(OperationFailure) as e:
        db.w.watch(pipeline).close()
    assert e.value.code == code, e.value.details


def test_a_parallel_streams_pipeline_may_not_name_a_bucket(client):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("parallelChangeStream", 1, nBuckets=2,
                             pipeline=bucket_stage(2, 0))
    assert e.value.code == 2


def test_a_bucket_of_one_collection_by_document_key_reads_only_its_share(fresh_server):
    """By document key, a bucket reads the oplog's index of the namespaces nsRegex
    matches and fetches only the entries whose key hash is its own: 4 buckets read
    about one oplog's worth between them, not four, whether nsRegex names the one
    collection literally or not. (A fresh server: no stream opened before the writes,
    so the entries are read from storage, not from the recent oplog in memory.)"""
    client = fresh_server().client()
    db = client.t_share
    start = client.admin.command("ping")["operationTime"]
    db.src.insert_many([{"_id": i, "pad": "x" * 2000} for i in range(200)])
    db.other.insert_many([{"_id": i, "pad": "y" * 2000} for i in range(50)])
    client.admin.command("profile", 2)
    try:
        with client.start_session() as s:
            whole = client.admin.command("aggregate", 1, pipeline=[{"$changeStream": {
                "allChangesForCluster": True, "startAtOperationTime": start}}],
                cursor={"batchSize": 0}, session=s)["cursor"]["id"]
            drain(client, s, [whole], 250)
            spread = dict(nBuckets=4, by="documentKey", startAtOperationTime=start)
            literal = client.admin.command(
                "parallelChangeStream", 1, nsRegex=Regex(f"^{db.name}\\.src$"), session=s,
                **spread)["cursors"]
            general = client.admin.command(
                "parallelChangeStream", 1, nsRegex=Regex(f"^{db.name}\\.(src)$"), session=s,
                **spread)["cursors"]
            got_literal = drain(client, s, literal, 200)
            got_general = drain(client, s, general, 200)
            close(client, s, literal + general + [whole])
    finally:
        client.admin.command("profile", 0)
    for a, b in zip(literal, general):
        assert [e["_id"] for e in got_literal[a]] == [e["_id"] for e in got_general[b]]
    read = {}
    for p in client.admin["system.profile"].find({"op": "getmore"}):
        cursor = p["command"]["getMore"]
        read[cursor] = read.get(cursor, 0) + p.get("oplogBytesRead", 0)
    whole_bytes = read.get(whole, 0)
    assert whole_bytes > 250 * 2000, "the ordinary stream read every entry"
    for ids in (literal, general):
        share = sum(read.get(c, 0) for c in ids)
        assert 200 * 2000 < share < whole_bytes, (share, whole_bytes)
    client.close()


def test_a_token_resumes_only_its_own_bucket_or_its_own_split(client, db):
    """A bucket's postBatchResumeToken says whose it is (`_bucket`), the combined one
    its split (`_split`): resuming a bucket from another bucket's token, or a stream
    split otherwise from its combined token, would start where that bucket never was
    (its events in between lost): InvalidResumeToken. A plain token is any bucket's
    start (at least once)."""
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=4, by="documentKey")
        db.c.insert_many([{"_id": i} for i in range(40)])
        drain(client, s, ids, 40)
        replies = [client.admin.command("getMore", i, collection="$cmd.aggregate",
                                        maxTimeMS=50, session=s)["cursor"] for i in ids]
        close(client, s, ids)
        tokens = [r["postBatchResumeToken"] for r in replies]
        combined = replies[0]["combinedResumeToken"]
        assert [t["_bucket"]["bucket"] for t in tokens] == [0, 1, 2, 3]
        assert tokens[0]["_bucket"]["nBuckets"] == 4 and combined["_split"]["nBuckets"] == 4

        def refused(**kw):
            with pytest.raises(OperationFailure) as e:
                open_parallel(client, s, db, **kw)
            assert e.value.code == 260, e.value.details
            assert "another parallel stream or bucket" in str(e.value)
        refused(nBuckets=4, by="documentKey", resumeAfter=tokens[::-1])
        refused(nBuckets=4, by="documentKey", resumeAfter=tokens[0])
        refused(nBuckets=8, by="documentKey", resumeAfter=combined)
        refused(nBuckets=4, by="ns", resumeAfter=combined)
        refused(nBuckets=4, by="documentKey", startAfter=tokens[:3] + [tokens[0]])
        for ok in (dict(resumeAfter=tokens), dict(resumeAfter=combined)):
            close(client, s, open_parallel(client, s, db, nBuckets=4, by="documentKey", **ok))
        # A plain token (an ordinary stream's) starts any split.
        with db.c.watch() as plain:
            db.c.insert_one({"_id": 100})
            plain.try_next()
            close(client, s, open_parallel(client, s, db, nBuckets=8,
                                           resumeAfter=plain.resume_token))
        # The stage form refuses another bucket's token the same way.
        with pytest.raises(OperationFailure) as e:
            db.c.watch([{"$changeStreamBucket": {"nBuckets": 4, "bucket": 1,
                                                 "by": "documentKey"}}],
                       resume_after=tokens[2])
        assert e.value.code == 260


def test_ddl_events_are_in_their_namespaces_bucket_and_views_are_named_as_the_seeds(client, db):
    """With showExpandedEvents, a bucket shows the DDL of its namespaces (create,
    createIndexes, dropIndexes, collMod, drop) and names a view's as seed 004 does:
    createView and dropView. The buckets go on after a drop (never invalidated)."""
    with client.start_session() as s:
        ids = open_parallel(client, s, db, nBuckets=2, showExpandedEvents=True)
        db.create_collection("c")
        db.c.create_index("x")
        db.command("collMod", "c", validator={"x": {"$exists": True}})
        db.c.drop_index("x_1")
        db.create_collection("v", viewOn="c", pipeline=[])
        db.v.drop()
        db.c.drop()
        db.d.insert_one({"_id": 1})
        got = drain(client, s, ids, 9)
        close(client, s, ids)
    kinds = {}
    for events in got.values():
        for e in events:
            kinds.setdefault(e["ns"].get("coll"), []).append(e["operationType"])
    assert kinds["c"] == ["create", "createIndexes", "modify", "dropIndexes", "drop"], kinds
    assert kinds["v"] == ["createView", "dropView"], kinds
    assert kinds["d"] == ["create", "insert"], "the buckets go on after a drop"


@pytest.mark.parametrize("by", ["ns", "documentKey"])
def test_buckets_read_only_their_share_and_miss_nothing(fresh_server, by):
    """A bucket reads the oplog's index of the namespaces it may have events of (and of
    the databases' commands), not the whole oplog, and by document key reads only the
    entries whose key hash is its own: together the buckets return exactly the events
    one change stream on the deployment returns (transactions, renames, drops and
    dropDatabase included), by namespace each namespace's in one bucket, for about one
    reading of the oplog in all instead of one per bucket. (A fresh server: the entries
    are read from storage.)"""
    client = fresh_server().client()
    start = client.admin.command("ping")["operationTime"]
    a, b = client.t_nsa, client.t_nsb
    for i in range(8):
        a[f"c{i}"].insert_many([{"_id": j, "pad": "x" * 1000} for j in range(40)])
    with client.start_session() as t:
        with t.start_transaction():
            a.c0.insert_one({"_id": "t1"}, session=t)
            a.c5.insert_one({"_id": "t2"}, session=t)
    a.c1.rename("renamed")
    a.c2.drop()
    b.x.insert_one({"_id": 1})
    client.drop_database("t_nsb")
    regex = Regex(r"^t_ns(a|b)(\.|$)")
    client.admin.command("profile", 2)
    try:
        with client.start_session() as s:
            whole = client.admin.command("aggregate", 1, pipeline=[{"$changeStream": {
                "allChangesForCluster": True, "startAtOperationTime": start}},
                {"$match": {"ns.db": {"$in": ["t_nsa", "t_nsb"]}}}],
                cursor={"batchSize": 0}, session=s)["cursor"]
            expected = whole["firstBatch"]
            while True:
                more = client.admin.command("getMore", whole["id"], collection="$cmd.aggregate",
                                            maxTimeMS=200, session=s)["cursor"]["nextBatch"]
                if not more:
                    break
                expected += more
            ids = client.admin.command("parallelChangeStream", 1, nBuckets=4, nsRegex=regex,
                                       by=by, startAtOperationTime=start,
                                       session=s)["cursors"]
            got = drain(client, s, ids, len(expected))
            close(client, s, ids + [whole["id"]])
    finally:
        client.admin.command("profile", 0)
    # inserts, the transaction's two, rename, drop, b's insert, its drop and dropDatabase
    assert len(expected) == 8 * 40 + 2 + 1 + 1 + 1 + 2, len(expected)

    def ns(e):
        return (e["ns"]["db"], e["ns"].get("coll"))
    # Resume tokens order events as the oplog does (within a transaction too).
    merged = sorted((e for events in got.values() for e in events),
                    key=lambda e: e["_id"]["_data"])
    assert [(e["_id"], e["operationType"]) for e in merged] == \
        [(e["_id"], e["operationType"]) for e in expected]
    owner = {}
    for cursor, events in got.items():
        for e in events:
            key = ns(e)
            if by == "documentKey" and "documentKey" in e:
                key = (key, e["documentKey"]["_id"])
            assert owner.setdefault(key, cursor) == cursor, f"{key} in one bucket"
    read = {}
    for p in client.admin["system.profile"].find({"op": "getmore"}):
        read[p["command"]["getMore"]] = read.get(p["command"]["getMore"], 0) + \
            p.get("oplogBytesRead", 0)
    whole_bytes = read.get(whole["id"], 0)
    buckets_bytes = sum(read.get(c, 0) for c in ids)
    assert whole_bytes > 8 * 40 * 1000
    assert buckets_bytes < 2 * whole_bytes, (buckets_bytes, whole_bytes)
    client.close()

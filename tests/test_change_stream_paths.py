"""The same change events whichever way the server reaches them.

A stream that keeps up reads new entries from memory (one event built per collection
and shared by the plain streams on it; a stream with options or stages of its own
builds its own); a stream that is behind, or opened after a restart, reads the oplog
from disk. These are different code paths over the same entries, and a user must not
be able to tell them apart: this test writes a varied workload (every CRUD kind,
updates of nested fields and arrays, a transaction, DDL), collects the events live,
restarts the server, reads them again from the oplog on disk, and compares the
events byte for byte (field order included).
"""

from bson import Timestamp
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

from conftest import next_event

RAW = CodecOptions(document_class=RawBSONDocument)

# (description, stream options, extra pipeline): each is read live and from disk.
STREAMS = [
    ("plain collection stream", {}, []),
    ("collection stream with a stage of its own", {}, [{"$match": {"_id": {"$exists": True}}}]),
    ("expanded events", {"show_expanded_events": True}, []),
    ("pre-images when available", {"full_document_before_change": "whenAvailable"}, []),
]


def workload(db):
    c = db.c
    c.insert_one({"_id": 1, "a": {"b": [1, 2, 3], "c": "x"}, "n": 1})
    c.insert_many([{"_id": i, "v": "y" * i} for i in range(2, 6)])
    c.update_one({"_id": 1}, {"$set": {"a.b.1": 20, "a.d": {"e": 1}}, "$inc": {"n": 1}})
    c.update_one({"_id": 1}, {"$unset": {"a.c": 1}, "$push": {"a.b": 4}})
    c.update_one({"_id": 1}, [{"$set": {"a.b": {"$slice": ["$a.b", 2]}}}])
    c.update_many({"_id": {"$gte": 2}}, {"$set": {"w": True}})
    c.replace_one({"_id": 2}, {"replaced": True})
    c.delete_one({"_id": 3})
    c.find_one_and_update({"_id": 4}, {"$set": {"f": 1}})
    with db.client.start_session() as s:
        with s.start_transaction():
            c.insert_one({"_id": 100, "t": 1}, session=s)
            c.update_one({"_id": 100}, {"$set": {"t": 2}}, session=s)
            c.delete_one({"_id": 5}, session=s)
    c.create_index("v")
    db.command("collMod", "c", changeStreamPreAndPostImages={"enabled": True})
    c.update_one({"_id": 4}, {"$set": {"f": 2}})
    c.delete_one({"_id": 4})
    c.drop_index("v_1")
    c.insert_one({"_id": "last"})


def read_until_last(stream):
    out = []
    while True:
        ev = next_event(stream)
        out.append(ev.raw)
        if ev["operationType"] == "insert" and ev["documentKey"]["_id"] == "last":
            return out


def fresh_paths_db(fresh_server):
    """A new server, its client, the test's database (raw events) with collection c,
    and the time just after that collection was made."""
    srv = fresh_server()
    client = srv.client()
    db = client.get_database("paths", codec_options=RAW)
    db.create_collection("c")
    start = client.admin.command("ping")["operationTime"]
    return srv, client, db, Timestamp(start.time, start.inc + 1)


def test_events_from_memory_and_from_disk_are_identical(fresh_server):
    srv, client, db, start = fresh_paths_db(fresh_server)
    streams = [
        db.c.watch(pipeline, start_at_operation_time=start, **opts)
        for _, opts, pipeline in STREAMS
    ]
    database_stream = db.watch(start_at_operation_time=start)
    # Opened before the writes, so these streams keep up and read from memory.
    for s in streams + [database_stream]:
        assert s.try_next() is None
    workload(client.get_database("paths"))
    live = [read_until_last(s) for s in streams]
    live_db = read_until_last(database_stream)
    for s in streams + [database_stream]:
        s.close()
    client.close()

    # Every event kind of the workload is there.
    kinds = {RawBSONDocument(e)["operationType"] for e in live[2]}
    assert kinds == {"insert", "update", "replace", "delete", "createIndexes", "modify",
                     "dropIndexes"}, kinds
    assert len(live[0]) == 21, [(RawBSONDocument(e)["operationType"], RawBSONDocument(e)["documentKey"]["_id"]) for e in live[0]]

    srv.restart()
    client = srv.client()
    db = client.get_database("paths", codec_options=RAW)
    for (what, opts, pipeline), seen in zip(STREAMS, live):
        with db.c.watch(pipeline, start_at_operation_time=start, **opts) as s:
            again = read_until_last(s)
        assert len(again) == len(seen), what
        for i, (a, b) in enumerate(zip(seen, again)):
            assert a == b, (what, i, RawBSONDocument(a), RawBSONDocument(b))
    with db.watch(start_at_operation_time=start) as s:
        again = read_until_last(s)
    assert again == live_db
    # A database stream shows a collection's CRUD events exactly as its collection
    # stream does.
    assert live_db == live[0]
    client.close()


def test_resuming_after_any_event_gives_exactly_the_rest(fresh_server):
    """resumeAfter the token of event i returns events i+1, i+2, ... byte for byte, for
    every i: CRUD events, a transaction's, and DDL events (whose tokens name the
    operation instead of a document key)."""
    _, client, db, start = fresh_paths_db(fresh_server)
    workload(client.get_database("paths"))
    for opts in ({}, {"show_expanded_events": True}):
        with db.c.watch(start_at_operation_time=start, **opts) as s:
            everything = read_until_last(s)
        for i, ev in enumerate(everything[:-1]):
            token = RawBSONDocument(ev)["_id"]
            with db.c.watch(resume_after=token, **opts) as s:
                rest = read_until_last(s)
            assert rest == everything[i + 1:], (opts, i)
    client.close()

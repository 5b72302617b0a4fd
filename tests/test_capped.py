"""Capped collections and tailable / awaitData cursors."""

import threading
import time

import bson
import pytest
from pymongo import CursorType
from pymongo.errors import OperationFailure


def ids(cursor):
    return [d["_id"] for d in cursor]


def try_next(cursor):
    """The next document of a tailable cursor, or None after an (awaited) empty batch."""
    try:
        return next(cursor)
    except StopIteration:
        return None


class TestCappedLimits:
    def test_max_keeps_the_newest(self, db):
        coll = db.create_collection("capped", capped=True, size=4096, max=3)
        coll.insert_many([{"_id": i} for i in range(5)])
        assert ids(coll.find()) == [2, 3, 4]

    def test_max_across_separate_inserts(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20, max=2)
        for i in range(5):
            coll.insert_one({"_id": i})
        assert ids(coll.find()) == [3, 4]
        assert coll.count_documents({}) == 2

    def test_size_keeps_the_newest_bytes(self, db):
        coll = db.create_collection("capped", capped=True, size=10_000)
        for i in range(30):
            coll.insert_one({"_id": i, "pad": "x" * 1000})
        kept = ids(coll.find())
        assert kept == list(range(30 - len(kept), 30)), "only the oldest are dropped"
        assert 5 <= len(kept) <= 10

    def test_natural_order_is_insertion_order(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20)
        for i in [5, 1, 9, 3]:
            coll.insert_one({"_id": i})
        assert ids(coll.find()) == [5, 1, 9, 3]
        assert ids(coll.find().sort("$natural", -1)) == [3, 9, 1, 5]
        assert ids(coll.find().sort("_id", 1)) == [1, 3, 5, 9]

    def test_secondary_index_entries_leave_with_evicted_documents(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20, max=2)
        coll.create_index("k")
        coll.insert_many([{"_id": i, "k": i % 2} for i in range(6)])
        assert ids(coll.find({"k": 0}).hint("k_1")) == [4]
        assert ids(coll.find({"k": 1}).hint("k_1")) == [5]

    def test_limits_survive_restart(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            coll = c.cdb.create_collection("capped", capped=True, size=1 << 20, max=3)
            coll.insert_many([{"_id": i} for i in range(3)])
        srv.restart()
        with srv.client() as c:
            c.cdb.capped.insert_one({"_id": 3})
            assert ids(c.cdb.capped.find()) == [1, 2, 3]

    def test_updates_and_deletes(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20, max=3)
        coll.insert_many([{"_id": i, "v": 0} for i in range(3)])
        coll.update_one({"_id": 1}, {"$set": {"v": "grown" * 10}})
        coll.delete_one({"_id": 0})
        coll.insert_many([{"_id": 3}, {"_id": 4}])
        assert ids(coll.find()) == [2, 3, 4]

    def test_stats_report_capped(self, db):
        db.create_collection("capped", capped=True, size=1000, max=7)
        stats = db.command("collStats", "capped")
        assert stats["capped"] is True and stats["max"] == 7 and stats["maxSize"] == 1024


class TestCappedResize:
    """collMod cappedSize / cappedMax as mongod 7.0 applies them (its capped_resize.js):
    a new limit holds from the next insert on."""

    KB10 = "a" * 10 * 1024

    def insert_five(self, coll):
        for _ in range(5):
            coll.insert_one({"key": self.KB10})

    def stats(self, db):
        return db.command("collStats", "capped")

    def test_size_limit_grows_and_shrinks(self, db):
        coll = db.create_collection("capped", capped=True, size=25 * 1024)
        self.insert_five(coll)
        assert coll.count_documents({}) == 2
        db.command("collMod", "capped", cappedSize=50 * 1024)
        assert self.stats(db)["maxSize"] == 50 * 1024
        self.insert_five(coll)
        assert coll.count_documents({}) == 4
        assert db.command("dataSize", "%s.capped" % db.name)["size"] <= 50 * 1024
        db.command("collMod", "capped", cappedSize=25 * 1024)
        # Nothing is removed until the next insert.
        assert coll.count_documents({}) == 4
        self.insert_five(coll)
        assert coll.count_documents({}) == 2
        assert db.command("dataSize", "%s.capped" % db.name)["size"] <= 25 * 1024

    def test_document_larger_than_the_cap_stays_until_the_next_insert(self, db):
        coll = db.create_collection("capped", capped=True, size=25 * 1024)
        self.insert_five(coll)
        db.command("collMod", "capped", cappedSize=256)
        coll.insert_one({"_id": "big", "key": self.KB10})
        # mongod's capped deletion stops at the record just inserted.
        assert ids(coll.find()) == ["big"]
        coll.insert_one({"_id": "next", "key": self.KB10})
        assert ids(coll.find()) == ["next"]

    def test_document_limit_and_no_limit(self, db):
        coll = db.create_collection("capped", capped=True, size=50 * 1024, max=2)
        self.insert_five(coll)
        assert coll.count_documents({}) == 2
        db.command("collMod", "capped", cappedMax=4)
        assert self.stats(db)["max"] == 4
        self.insert_five(coll)
        assert coll.count_documents({}) == 4
        db.command("collMod", "capped", cappedMax=2)
        self.insert_five(coll)
        assert coll.count_documents({}) == 2
        for unlimited in (-2, 0):
            db.command("collMod", "capped", cappedMax=unlimited)
            # mongod stores "no document limit" as 2^31 - 1.
            assert self.stats(db)["max"] == 2**31 - 1
            self.insert_five(coll)
            assert coll.count_documents({}) == 4  # the 50 KB size is the limit now

    def test_both_limits_the_lower_one_wins(self, db):
        coll = db.create_collection("capped", capped=True, size=25 * 1024, max=2)
        self.insert_five(coll)
        db.command("collMod", "capped", cappedSize=50 * 1024, cappedMax=2)
        self.insert_five(coll)
        assert coll.count_documents({}) == 2
        db.command("collMod", "capped", cappedSize=25 * 1024, cappedMax=4)
        self.insert_five(coll)
        assert coll.count_documents({}) == 2

    @pytest.mark.parametrize(
        "field, value, code",
        [
            ("cappedSize", 2**50 + 1, 2),
            ("cappedSize", 0, 2),
            ("cappedSize", -25 * 1024, 2),
            ("cappedSize", "x", 14),
            ("cappedMax", 2**31, 2),
            ("cappedMax", "x", 14),
        ],
    )
    def test_bad_limits_are_refused(self, db, field, value, code):
        db.create_collection("capped", capped=True, size=4096, max=3)
        with pytest.raises(OperationFailure) as exc:
            db.command("collMod", "capped", **{field: value})
        assert exc.value.code == code
        assert self.stats(db)["maxSize"] == 4096 and self.stats(db)["max"] == 3

    def test_limits_of_a_non_capped_collection_are_refused(self, db):
        db.plain.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            db.command("collMod", "plain", cappedSize=4096)
        assert exc.value.code == 72


class TestCappedCreateLimits:
    @pytest.mark.parametrize(
        "options, code",
        [
            ({"size": 2**50 + 1}, 51024),
            ({"size": 0}, 51024),
            ({"size": 4096, "max": 2**31}, 51024),
            ({"size": 4096, "max": "x"}, 14),
            ({"size": "x"}, 14),
        ],
    )
    def test_out_of_range_limits_are_refused(self, db, options, code):
        with pytest.raises(OperationFailure) as exc:
            # The command itself: pymongo's create_collection turns size into a float.
            db.command("create", "capped", capped=True, **options)
        assert exc.value.code == code
        assert "capped" not in db.list_collection_names()

    @pytest.mark.parametrize("max_docs", [0, -5])
    def test_max_of_zero_or_below_means_no_document_limit(self, db, max_docs):
        coll = db.create_collection("capped", capped=True, size=4096, max=max_docs)
        assert coll.options()["max"] == 2**31 - 1
        coll.insert_many([{"_id": i} for i in range(10)])
        assert coll.count_documents({}) == 10

    def test_limits_are_stored_as_32_bit_ints_when_they_fit(self, db):
        # As mongod's catalog (appendNumber): shells show 4096, not Long("4096").
        coll = db.create_collection("capped", capped=True, size=4000, max=5)
        options = coll.options()
        assert (options["size"], options["max"]) == (4096, 5)
        assert type(options["size"]) is int and type(options["max"]) is int
        big = db.create_collection("big", capped=True, size=2**40)
        assert type(big.options()["size"]) is bson.int64.Int64

    def test_stats_report_max_zero_without_a_document_limit(self, db):
        db.create_collection("capped", capped=True, size=4096)
        stats = db.command("collStats", "capped")
        assert stats["max"] == 0 and stats["maxSize"] == 4096
        assert db.command("collStats", "capped", scale=1024)["maxSize"] == 4


class TestCloneCollectionAsCapped:
    def test_copies_the_newest_documents_that_fit(self, db):
        db.src.insert_many([{"_id": i, "pad": "x" * 1000} for i in range(20)])
        db.src.create_index("pad")
        db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=4096)
        kept = ids(db.dst.find())
        assert 0 < len(kept) < 20 and kept == list(range(20 - len(kept), 20))
        assert sum(len(bson.encode(d)) for d in db.dst.find()) <= 4096
        stats = db.command("collStats", "dst")
        assert stats["capped"] is True and stats["maxSize"] == 4096
        # Only the _id index; the source is untouched.
        assert [i["name"] for i in db.dst.list_indexes()] == ["_id_"]
        assert db.src.count_documents({}) == 20 and not db.src.options().get("capped")

    def test_a_capped_source_keeps_its_insertion_order(self, db):
        src = db.create_collection("src", capped=True, size=1 << 20)
        src.insert_many([{"_id": i} for i in (5, 3, 9, 1)])
        db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=1 << 20)
        assert ids(db.dst.find()) == [5, 3, 9, 1]
        # The clone is a capped collection like any other: tailable, and it evicts.
        db.dst.insert_one({"_id": 10})
        assert ids(db.dst.find().sort("$natural", -1).limit(1)) == [10]

    def test_errors(self, db):
        db.src.insert_one({"_id": 1})
        db.taken.insert_one({})
        db.command("create", "v", viewOn="src", pipeline=[])
        cases = [
            ({"cloneCollectionAsCapped": "nothing", "toCollection": "d", "size": 4096}, 26),
            ({"cloneCollectionAsCapped": "src", "toCollection": "taken", "size": 4096}, 48),
            ({"cloneCollectionAsCapped": "v", "toCollection": "d", "size": 4096}, 166),
            ({"cloneCollectionAsCapped": "src", "size": 4096}, 40414),
            ({"cloneCollectionAsCapped": "src", "toCollection": "d"}, 40414),
            ({"cloneCollectionAsCapped": "src", "toCollection": "d", "size": 0}, 2),
        ]
        for cmd, code in cases:
            with pytest.raises(OperationFailure) as exc:
                db.command(cmd)
            assert exc.value.code == code, cmd
        assert "d" not in db.list_collection_names()

    def test_change_streams_see_the_copied_documents(self, db):
        db.src.insert_many([{"_id": i} for i in range(3)])
        with db.watch([{"$match": {"ns.coll": "dst"}}]) as stream:
            db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=4096)
            got = [stream.next() for _ in range(3)]
        assert [(e["operationType"], e["documentKey"]["_id"]) for e in got] == [
            ("insert", 0),
            ("insert", 1),
            ("insert", 2),
        ]


class TestTailable:
    def test_tailable_on_a_non_capped_collection_fails(self, db):
        db.plain.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            db.command("find", "plain", tailable=True)
        assert exc.value.code == 2

    def test_empty_capped_collection_keeps_the_cursor_open(self, db):
        """Deliberate improvement over MongoDB (SERVER-13955): no dead cursor."""
        coll = db.create_collection("capped", capped=True, size=1 << 20)
        cursor = coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100)
        assert try_next(cursor) is None
        assert cursor.alive
        coll.insert_one({"_id": "first"})
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = try_next(cursor)
        assert got == {"_id": "first"}
        cursor.close()

    def test_a_document_larger_than_the_cap_reaches_a_tailing_consumer(self, db):
        # The insert keeps the document it wrote (as mongod), so a consumer sees it.
        coll = db.create_collection("capped", capped=True, size=4096)
        cursor = coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100)
        assert try_next(cursor) is None
        coll.insert_one({"_id": "big", "pad": "x" * 10_000})
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = try_next(cursor)
        assert got is not None and got["_id"] == "big"
        cursor.close()

    def test_filter_that_matches_nothing_yet_keeps_the_cursor_open(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20)
        coll.insert_one({"kind": "noise"})
        cursor = coll.find({"kind": "wanted"}, cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100)
        assert try_next(cursor) is None and cursor.alive
        coll.insert_one({"kind": "wanted", "_id": 1})
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = try_next(cursor)
        assert got == {"kind": "wanted", "_id": 1}

    def test_await_data_get_more_is_woken_by_an_insert(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20)
        coll.insert_one({"_id": 0})
        first = db.command("find", "capped", tailable=True, awaitData=True)
        cursor_id = first["cursor"]["id"]
        assert [d["_id"] for d in first["cursor"]["firstBatch"]] == [0]
        timer = threading.Timer(0.3, lambda: coll.insert_one({"_id": 1}))
        timer.start()
        # A 30 s await: only the insert's wake-up can end this getMore with a document.
        reply = db.command("getMore", cursor_id, collection="capped", maxTimeMS=30_000)
        timer.join()
        assert [d["_id"] for d in reply["cursor"]["nextBatch"]] == [1]
        assert reply["cursor"]["id"] == cursor_id

    def test_woken_get_more_after_a_large_commit_loses_nothing(self, db):
        """A woken getMore reads on the connection's task at most 1,000 documents: the
        rest of a bigger commit comes in the following getMores, in order, once each."""
        coll = db.create_collection("capped", capped=True, size=16 << 20)
        first = db.command("find", "capped", tailable=True, awaitData=True)
        cursor_id = first["cursor"]["id"]
        timer = threading.Timer(0.3, lambda: coll.insert_many([{"_id": i} for i in range(2500)]))
        timer.start()
        reply = db.command("getMore", cursor_id, collection="capped", maxTimeMS=30_000)
        timer.join()
        got = [d["_id"] for d in reply["cursor"]["nextBatch"]]
        assert got, "the insert's wake-up ends the getMore with documents"
        while len(got) < 2500:
            reply = db.command("getMore", cursor_id, collection="capped", maxTimeMS=1000)
            batch = [d["_id"] for d in reply["cursor"]["nextBatch"]]
            assert batch, f"stalled after {len(got)} documents"
            got += batch
        assert got == list(range(2500))
        assert reply["cursor"]["id"] == cursor_id

    def test_await_times_out_with_an_empty_batch_and_stays_open(self, db):
        db.create_collection("capped", capped=True, size=1 << 20)
        first = db.command("find", "capped", tailable=True, awaitData=True)
        reply = db.command("getMore", first["cursor"]["id"], collection="capped", maxTimeMS=50)
        assert reply["cursor"]["nextBatch"] == []
        assert reply["cursor"]["id"] == first["cursor"]["id"]

    def test_many_cursors_all_receive_each_document(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20)
        cursors = [coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100) for _ in range(10)]
        for c in cursors:
            assert try_next(c) is None
        coll.insert_many([{"_id": i} for i in range(3)])
        for c in cursors:
            seen = []
            deadline = time.monotonic() + 5
            while len(seen) < 3 and time.monotonic() < deadline:
                d = try_next(c)
                if d is not None:
                    seen.append(d["_id"])
            assert seen == [0, 1, 2]
            c.close()

    def test_overwritten_position_fails_with_capped_position_lost(self, db):
        coll = db.create_collection("capped", capped=True, size=1 << 20, max=3)
        coll.insert_many([{"_id": i} for i in range(3)])
        first = db.command("find", "capped", tailable=True, batchSize=1)
        assert [d["_id"] for d in first["cursor"]["firstBatch"]] == [0]
        coll.insert_many([{"_id": i} for i in range(3, 9)])
        with pytest.raises(OperationFailure) as exc:
            db.command("getMore", first["cursor"]["id"], collection="capped")
        assert exc.value.code == 136

    def test_oplog_is_tailable_from_a_timestamp(self, client, db):
        coll = db.tailme
        coll.insert_one({"_id": "before"})
        start = client.local["oplog.rs"].find().sort("$natural", -1).limit(1).next()["ts"]
        cursor = client.local["oplog.rs"].find({"ts": {"$gt": start}, "ns": f"{db.name}.tailme"},
                                                cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(200)
        assert try_next(cursor) is None and cursor.alive
        coll.insert_one({"_id": "tailed"})
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = try_next(cursor)
        assert got["op"] == "i" and got["o"] == {"_id": "tailed"}
        cursor.close()


class TestExhaust:
    def test_exhaust_get_more_streams_batches_without_requests(self, server, db):
        import wire
        db.ex.insert_many([{"_id": i} for i in range(7)])
        sock = wire.connect(server.port)
        try:
            first = wire.command(sock, {"find": "ex", "batchSize": 2, "$db": db.name})
            cursor_id = first["cursor"]["id"]
            seen = [d["_id"] for d in first["cursor"]["firstBatch"]]
            rid, msg = wire.op_msg({"getMore": cursor_id, "collection": "ex", "batchSize": 2, "$db": db.name},
                                   flags=1 << 16)  # exhaustAllowed
            sock.sendall(msg)
            response_to, replies = rid, 0
            while True:
                reply_id, resp_to, opcode, body = wire.read_message(sock)
                flags, doc = wire.parse_op_msg(body)
                assert resp_to == response_to, "each streamed reply answers the previous one"
                seen += [d["_id"] for d in doc["cursor"]["nextBatch"]]
                replies += 1
                more = bool(flags & 2)
                assert more == (doc["cursor"]["id"] != 0)
                if not more:
                    break
                response_to = reply_id
            assert seen == list(range(7))
            assert replies == 3
        finally:
            sock.close()

    def test_pymongo_exhaust_cursor(self, db):
        from pymongo import CursorType
        db.ex2.insert_many([{"_id": i} for i in range(250)])
        assert ids(db.ex2.find(cursor_type=CursorType.EXHAUST).batch_size(20)) == list(range(250))


def test_convert_to_capped(db):
    db.conv.insert_many([{"_id": i, "pad": "p" * 200} for i in range(50)])
    db.command("convertToCapped", "conv", size=2048)
    opts = db.conv.options()
    assert opts["capped"] is True and opts["size"] == 2048
    kept = ids(db.conv.find())
    assert 0 < len(kept) < 50 and kept == list(range(50 - len(kept), 50)), "the newest documents remain, in order"
    db.conv.insert_one({"_id": 50})
    assert ids(db.conv.find())[-1] == 50
    with pytest.raises(OperationFailure) as exc:
        db.command("convertToCapped", "missing", size=4096)
    assert exc.value.code == 26


class TestBusScenarios:
    def test_killing_a_cursor_ends_its_waiting_get_more(self, server, db):
        from pymongo import MongoClient
        db.create_collection("capped", capped=True, size=1 << 20)
        first = db.command("find", "capped", tailable=True, awaitData=True)
        cursor_id = first["cursor"]["id"]
        outcome = {}

        def wait():
            with MongoClient(server.uri(directConnection="true")) as c:
                try:
                    outcome["reply"] = c[db.name].command("getMore", cursor_id, collection="capped", maxTimeMS=30_000)
                except OperationFailure as e:
                    outcome["code"] = e.code

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        db.command("killCursors", "capped", cursors=[cursor_id])
        waiter.join(timeout=60)
        # Only the kill's wake-up yields CursorNotFound; a timed-out wait returns an empty batch.
        assert outcome.get("code") == 43, outcome

    def test_producer_in_another_process(self, server, db):
        import subprocess
        import sys
        coll = db.create_collection("bus", capped=True, size=1 << 20)
        cursor = coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(500)
        assert try_next(cursor) is None
        producer = subprocess.Popen([sys.executable, "-c", f"""
import time, pymongo
c = pymongo.MongoClient({server.uri(directConnection='true')!r})
for i in range(200):
    c[{db.name!r}].bus.insert_one({{'seq': i, 'time': time.time()}})
    if i % 20 == 0:
        time.sleep(0.01)
"""])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            d = try_next(cursor)
            if d is not None:
                got.append(d["seq"])
        assert producer.wait(timeout=30) == 0
        assert got == list(range(200)), "every message exactly once, in order"

    def test_server_restart_while_a_cursor_waits(self, fresh_server):
        from pymongo.errors import AutoReconnect
        srv = fresh_server()
        with srv.client() as c:
            coll = c.busdb.create_collection("bus", capped=True, size=1 << 20)
            coll.insert_one({"_id": 0})
            cursor = coll.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(10_000)
            assert next(cursor) == {"_id": 0}
            errors = []

            def consume():
                try:
                    next(cursor)
                except (AutoReconnect, OperationFailure, StopIteration) as e:
                    errors.append(e)

            waiter = threading.Thread(target=consume)
            waiter.start()
            time.sleep(0.3)
            srv.restart()
            waiter.join(timeout=60)
            assert not waiter.is_alive() and errors, "the waiting getMore ends when the server goes away"
        with srv.client() as c:
            coll = c.busdb.bus
            cursor = coll.find({"_id": {"$gt": 0}}, cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(200)
            assert try_next(cursor) is None and cursor.alive
            coll.insert_one({"_id": 1})
            got = None
            deadline = time.monotonic() + 5
            while got is None and time.monotonic() < deadline:
                got = try_next(cursor)
            assert got == {"_id": 1}
            assert [d["_id"] for d in coll.find()] == [0, 1], "messages survive the restart"

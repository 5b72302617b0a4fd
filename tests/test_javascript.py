"""Server-side JavaScript: $where in query filters, $function and $accumulator in
aggregation, and how scripts obey maxTimeMS and a client that goes away."""

import socket
import threading
import time

import pytest
from bson import Code, Int64, ObjectId, SON
from bson.codec_options import CodecOptions
from pymongo.errors import ExecutionTimeout, OperationFailure


def delay(sec):
    return "function() { sleep(%f * 1000); return true; }" % sec


@pytest.fixture
def xs(coll):
    coll.insert_many([{"_id": i, "x": i} for i in range(10)])
    return coll


def xs_of(cursor):
    return sorted(d["x"] for d in cursor)


def count(coll, flt):
    # The count command: count_documents() aggregates with $match, where mongod (and
    # this server) refuse $where.
    return coll.database.command("count", coll.name, query=flt)["n"]


class TestWhere:
    def test_forms(self, xs):
        assert xs_of(xs.find({"$where": "this.x < 3"})) == [0, 1, 2]
        assert xs_of(xs.find({"$where": Code("obj.x < 3")})) == [0, 1, 2]
        assert xs_of(xs.find({"$where": "function() { return this.x > 7 }"})) == [8, 9]
        assert xs_of(xs.find({"$where": "return this.x == 4"})) == [4]
        assert xs_of(xs.find({"$where": "var lim = 2; this.x < lim;"})) == [0, 1]
        assert xs_of(xs.find({"x": {"$gt": 4}, "$where": "this.x % 2 == 0"})) == [6, 8]
        assert xs_of(xs.find({"$or": [{"x": 0}, {"$where": "this.x == 9"}]})) == [0, 9]

    def test_bson_types_in_this(self, coll):
        oid = ObjectId()
        coll.insert_one({"_id": oid, "n": Int64(5), "d": {"a": [1, 2]}, "t": None})
        assert count(coll, {"$where": "this._id.str == '%s'" % oid}) == 1
        assert count(coll, {"$where": "this._id.equals(ObjectId('%s'))" % oid}) == 1
        assert count(
            coll, {"$where": "this.n == 5 && this.d.a.length == 2 && this.t === null"}
        ) == 1

    def test_count_distinct_update_delete_find_and_modify(self, xs):
        assert count(xs, {"$where": "this.x >= 5"}) == 5
        assert sorted(xs.distinct("x", {"$where": "this.x < 2"})) == [0, 1]
        r = xs.update_many({"$where": "this.x < 3"}, {"$set": {"low": True}})
        assert r.modified_count == 3
        doc = xs.find_one_and_update(
            {"$where": "this.x == 7"}, {"$set": {"seven": 1}}, return_document=True
        )
        assert doc["seven"] == 1
        assert xs.delete_many({"$where": "this.x >= 8"}).deleted_count == 2
        assert xs.count_documents({}) == 8

    def test_where_in_a_transaction(self, client, xs):
        with client.start_session() as s:
            with s.start_transaction():
                assert len(list(xs.find({"$where": "this.x < 4"}, session=s))) == 4

    def test_errors(self, xs):
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": "this.x.nosuch.y"})
        assert e.value.code == 139
        assert e.value.details["codeName"] == "JSInterpreterFailure"
        assert e.value.details["errmsg"].startswith("TypeError: ")
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": "function( {"})
        assert e.value.code == 139
        assert "SyntaxError" in e.value.details["errmsg"]
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": "throw new Error('boom')"})
        assert e.value.details["errmsg"].startswith("Error: boom :\n")
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": Code("this.x < i", {"i": 3})})
        assert e.value.code == 4649201
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": 5})
        assert (e.value.code, e.value.details["errmsg"]) == (2, "$where got bad type")
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"$where": ""})
        assert e.value.details["errmsg"] == "code for $where cannot be empty"

    def test_where_is_refused_where_mongod_refuses_it(self, db, xs):
        with pytest.raises(OperationFailure) as e:
            xs.find_one({"a": {"$elemMatch": {"$where": "true"}}})
        assert e.value.details["errmsg"] == "$where can only be applied to the top-level document"
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$match": {"$where": "true"}}]))
        assert e.value.details["errmsg"] == "$where is not allowed in this context"
        with pytest.raises(OperationFailure) as e:
            db.create_collection("js_validated", validator={"$where": "true"})
        assert e.value.code == 2
        with pytest.raises(OperationFailure) as e:
            xs.create_index("x", partialFilterExpression={"$where": "true"})

    def test_max_time_ms_stops_a_sleeping_script(self, xs):
        start = time.monotonic()
        with pytest.raises(ExecutionTimeout) as e:
            xs.find_one({"$where": delay(30)}, max_time_ms=200)
        assert e.value.code == 50
        # Stopped at the deadline, far before the sleep would have ended.
        assert time.monotonic() - start < 20

    def test_max_time_ms_stops_an_endless_loop(self, xs):
        with pytest.raises(ExecutionTimeout):
            xs.find_one({"$where": "while (true) {}"}, max_time_ms=100)
        # The server is still fine.
        assert xs.count_documents({}) == 10

    def test_scripts_run_concurrently(self, xs):
        # Five 1-second sleeps on five connections end together if they run in parallel.
        errors = []

        def run():
            try:
                xs.find_one({"x": 0, "$where": delay(1)})
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=run) for _ in range(5)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert time.monotonic() - start < 4.5

    def test_a_client_that_goes_away_kills_its_script(self, server, xs):
        # A raw OP_MSG find whose $where sleeps for 60 s; the socket closes at once.
        import bson

        body = bson.encode(SON([
            ("find", xs.name),
            ("filter", {"x": 0, "$where": delay(60)}),
            ("$db", xs.database.name),
        ]))
        payload = (0).to_bytes(4, "little") + b"\x00" + body
        header = (16 + len(payload)).to_bytes(4, "little") + (1).to_bytes(4, "little") \
            + (0).to_bytes(4, "little") + (2013).to_bytes(4, "little")
        before = xs.database.command("serverStatus")["connections"]["current"]
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(header + payload)
        time.sleep(0.3)
        s.close()
        # The connection's task ends once its command was killed, well before 60 s.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if xs.database.command("serverStatus")["connections"]["current"] <= before:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the disconnected client's operation kept running")


class TestFunction:
    def test_function(self, xs):
        out = list(xs.aggregate([
            {"$match": {"x": {"$lt": 3}}},
            {"$project": {"_id": 0, "y": {"$function": {
                "body": "function(x, s) { return s + (x * 2) }",
                "args": ["$x", "v"],
                "lang": "js",
            }}}},
            {"$sort": {"y": 1}},
        ]))
        assert out == [{"y": "v0"}, {"y": "v2"}, {"y": "v4"}]

    def test_function_returns_bson_types(self, xs):
        out = xs.aggregate([
            {"$match": {"x": 1}},
            {"$project": {"_id": 0, "r": {"$function": {
                "body": Code("function(id) { return {n: 2, id: id, l: NumberLong(7), d: new Date(0)} }"),
                "args": ["$_id"],
                "lang": "js",
            }}}},
        ]).next()
        r = out["r"]
        assert r["n"] == 2.0 and isinstance(r["n"], float)
        assert r["id"] == 1.0
        assert r["l"] == 7 and isinstance(r["l"], int)
        assert r["d"].year == 1970

    def test_function_in_expr_of_find(self, xs):
        flt = {"$expr": {"$function": {
            "body": "function(x) { return x > 6 }", "args": ["$x"], "lang": "js"}}}
        assert xs_of(xs.find(flt)) == [7, 8, 9]

    @pytest.mark.parametrize("spec,code", [
        ("notadoc", 31260),
        ({"args": [], "lang": "js"}, 31261),
        ({"body": 5, "args": [], "lang": "js"}, 31262),
        ({"body": "$x", "args": [], "lang": "js"}, 31432),
        ({"body": "function(){}", "lang": "js"}, 31263),
        ({"body": "function(){}", "args": []}, 31418),
        ({"body": "function(){}", "args": [], "lang": "py"}, 31419),
        ({"body": "function(){}", "args": "$x", "lang": "js"}, 31266),
    ])
    def test_function_validation(self, xs, spec, code):
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$project": {"y": {"$function": spec}}}]))
        assert e.value.code == code

    def test_function_errors(self, db, xs):
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$project": {"y": {"$function": {
                "body": "function() { throw new TypeError('bad') }", "args": [], "lang": "js"}}}}]))
        assert e.value.code == 139
        assert e.value.details["errmsg"].startswith("TypeError: bad :\n")
        with pytest.raises(OperationFailure) as e:
            db.create_collection("js_fn_validated", validator={"$expr": {"$function": {
                "body": "function() { return true }", "args": [], "lang": "js"}}})
        assert e.value.code == 4660800


class TestAccumulator:
    def test_accumulator(self, xs):
        out = list(xs.aggregate([
            {"$group": {"_id": {"$mod": ["$x", 2]}, "acc": {"$accumulator": {
                "init": "function(start) { return {sum: start, n: 0} }",
                "initArgs": [100],
                "accumulate": "function(state, x) { state.sum += x; state.n += 1; return state }",
                "accumulateArgs": ["$x"],
                "merge": "function(a, b) { return {sum: a.sum + b.sum, n: a.n + b.n} }",
                "finalize": "function(state) { return state.sum / state.n }",
                "lang": "js",
            }}}},
            {"$sort": {"_id": 1}},
        ]))
        # evens: (100 + 0+2+4+6+8) / 5, odds: (100 + 1+3+5+7+9) / 5
        assert out == [{"_id": 0, "acc": 24.0}, {"_id": 1, "acc": 25.0}]

    def test_accumulator_without_finalize_over_many_documents(self, coll):
        coll.insert_many([{"g": i % 3, "v": 1} for i in range(3000)])
        out = list(coll.aggregate([
            {"$group": {"_id": "$g", "c": {"$accumulator": {
                "init": "function() { return 0 }",
                "accumulate": "function(s, v) { return s + v }",
                "accumulateArgs": ["$v"],
                "merge": "function(a, b) { return a + b }",
                "lang": "js",
            }}}},
            {"$sort": {"_id": 1}},
        ]))
        assert [d["c"] for d in out] == [1000.0, 1000.0, 1000.0]

    @pytest.mark.parametrize("spec,code", [
        ("x", 4544703),
        ({"init": 1}, 4544702),
        ({"init": "$x"}, 4544701),
        ({"lang": 1}, 4544704),
        ({"lang": "py"}, 4544705),
        ({"other": 1}, 4544706),
        ({"accumulate": "f", "merge": "f", "accumulateArgs": [], "lang": "js"}, 4544707),
        ({"init": "f", "merge": "f", "accumulateArgs": [], "lang": "js"}, 4544708),
        ({"init": "f", "accumulate": "f", "accumulateArgs": [], "lang": "js"}, 4544709),
        ({"init": "f", "accumulate": "f", "merge": "f", "lang": "js"}, 4544710),
    ])
    def test_accumulator_validation(self, xs, spec, code):
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$group": {"_id": None, "a": {"$accumulator": spec}}}]))
        assert e.value.code == code

    def test_accumulator_argument_errors(self, xs):
        base = {"init": "function() { return 0 }", "accumulate": "function(s) { return s }",
                "merge": "function(a) { return a }", "lang": "js"}
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$group": {"_id": None, "a": {"$accumulator": {
                **base, "accumulateArgs": "$x"}}}}]))
        assert e.value.code == 4544712
        with pytest.raises(OperationFailure) as e:
            list(xs.aggregate([{"$group": {"_id": None, "a": {"$accumulator": {
                **base, "accumulateArgs": [], "initArgs": "$x"}}}}]))
        assert e.value.code == 4544711

"""The server's log as mongod writes it (issue 30): one JSON document per line with
`t`, `s`, `c`, `id`, `ctx`, `msg` and `attr`; mongod's "Slow query" lines above
`slowms`; `getLog` with the newest lines and the startup warnings; `--logFormat plain`
for text lines."""

import json
import re
import time

import pytest
from pymongo.errors import OperationFailure

from conftest import TailstreamServer, eventually

REQUIRED_FIELDS = ["t", "s", "c", "id", "ctx", "msg"]


def json_lines(text):
    """Every line of the log, parsed (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


class VerboseServer(TailstreamServer):
    """Without the suite's `--quiet` (which keeps connection lines out, as mongod's)."""

    def argv(self):
        return [a for a in super().argv() if a != "--quiet"]


@pytest.fixture
def logged(tmp_path):
    srv = VerboseServer(tmp_path / "db", extra_args=["--slowms", "50"])
    srv.start()
    yield srv
    srv.stop()


def test_every_line_is_mongods_json(logged):
    with logged.client() as c:
        c.test.items.insert_one({"a": 1})
    lines = eventually(lambda: [l for l in json_lines(logged.log_text())
                                if l["msg"] == "Connection accepted"])
    assert lines, logged.log_tail()
    for line in json_lines(logged.log_text()):
        assert list(line)[:6] == REQUIRED_FIELDS, line
        assert line["s"] in ("F", "E", "W", "I", "D1", "D2"), line
        assert isinstance(line["id"], int) and 0 <= line["id"] < 10_000_000, line
        # mongod's timestamps: extended JSON dates.
        assert set(line["t"]) == {"$date"}, line
    waiting = [l for l in json_lines(logged.log_text()) if l["msg"] == "Waiting for connections"]
    assert len(waiting) == 1
    assert (waiting[0]["s"], waiting[0]["c"], waiting[0]["id"]) == ("I", "NETWORK", 23016)
    accepted = lines[0]
    assert (accepted["c"], accepted["id"]) == ("NETWORK", 22943)
    assert accepted["ctx"] == f"conn{accepted['attr']['connectionId']}"
    assert accepted["attr"]["remote"].startswith("127.0.0.1:")
    ended = eventually(lambda: [l for l in json_lines(logged.log_text())
                                if l["msg"] == "Connection ended"])
    assert ended and ended[0]["id"] == 22944


def test_a_slow_operation_is_logged_with_mongods_attributes(logged):
    with logged.client(appname="slow-app") as c:
        c.test.items.insert_many([{"i": i} for i in range(10)])
        # $where runs JavaScript per document: 10 × 20 ms is slow under slowms 50.
        found = list(c.test.items.find({"$where": "sleep(20) || true"}))
        assert len(found) == 10
        c.test.items.find_one({"i": 1})  # fast: not logged
    slow = eventually(lambda: [l for l in json_lines(logged.log_text()) if l["msg"] == "Slow query"])
    assert len(slow) == 1, slow
    line = slow[0]
    assert (line["s"], line["c"], line["id"]) == ("I", "COMMAND", 51803)
    attr = line["attr"]
    assert attr["type"] == "command"
    assert attr["ns"] == "test.items"
    assert attr["appName"] == "slow-app"
    assert attr["command"]["find"] == "items"
    assert attr["command"]["filter"] == {"$where": "sleep(20) || true"}
    assert attr["nreturned"] == 10
    assert attr["durationMillis"] >= 50
    assert attr["protocol"] == "op_msg"
    assert line["ctx"].startswith("conn")


def test_a_failed_slow_operation_carries_its_error(logged):
    with logged.client() as c:
        c.test.items.insert_one({"i": 1})
        with pytest.raises(OperationFailure):
            c.test.items.find_one({"$where": "sleep(80); throw new Error('boom')"})
    slow = eventually(lambda: [l for l in json_lines(logged.log_text()) if l["msg"] == "Slow query"])
    assert len(slow) == 1, slow
    attr = slow[0]["attr"]
    assert attr["ok"] == 0 and attr["errCode"] != 0 and "boom" in attr["errMsg"], attr


def test_an_idle_change_stream_getmore_is_not_slow(logged):
    """A getMore waits for new data up to its maxTimeMS (maxAwaitTimeMS): that wait is
    not slowness, or every idle change stream would fill the log."""
    with logged.client() as c:
        c.test.create_collection("idle")
        with c.test.idle.watch(max_await_time_ms=300) as stream:
            for _ in range(3):
                assert stream.try_next() is None
        getmores = [l for l in json_lines(logged.log_text())
                    if l["msg"] == "Slow query" and "getMore" in l["attr"]["command"]]
        assert getmores == []
        # With slowms 0 every operation is slow, the getMore too: the threshold is live,
        # and the wait is what was left out.
        c.admin.command("profile", 0, slowms=0)
        with c.test.idle.watch(max_await_time_ms=300) as stream:
            assert stream.try_next() is None
        c.admin.command("profile", 0, slowms=50)
    logged_getmores = eventually(lambda: [
        l for l in json_lines(logged.log_text())
        if l["msg"] == "Slow query" and "getMore" in l["attr"]["command"]])
    assert logged_getmores, "a getMore is logged under slowms 0"
    assert all(l["attr"]["durationMillis"] >= 250 for l in logged_getmores), logged_getmores


def test_get_log_returns_the_newest_lines_as_json(logged):
    with logged.client() as c:
        c.test.items.insert_one({"a": 1})
        names = c.admin.command("getLog", "*")
        assert names["names"] == ["global", "startupWarnings"]
        log = c.admin.command("getLog", "global")
        assert log["totalLinesWritten"] >= len(log["log"]) > 0
        parsed = [json.loads(line) for line in log["log"]]
        assert any(l["msg"] == "Waiting for connections" for l in parsed)
        # What getLog returns are the log file's own lines.
        assert eventually(lambda: set(log["log"]) <= set(logged.log_text().splitlines()))
        warnings = c.admin.command("getLog", "startupWarnings")
        parsed = [json.loads(line) for line in warnings["log"]]
        assert [w["id"] for w in parsed] == [22120], parsed
        assert parsed[0]["s"] == "W" and parsed[0]["tags"] == ["startupWarnings"]
        assert warnings["totalLinesWritten"] == 1


@pytest.mark.parametrize(
    "arg, code",
    [("nonExistentName", 96), (None, 40414), (1.5, 14), ([], 14)],
)
def test_get_log_errors_are_mongods(server, arg, code):
    with server.client() as c:
        with pytest.raises(OperationFailure) as e:
            c.admin.command("getLog", arg)
    assert e.value.code == code, e.value.details
    if code == 96:
        assert e.value.details["errmsg"] == "No log named 'nonExistentName'"


def test_get_log_is_admin_only(server):
    with server.client() as c:
        with pytest.raises(OperationFailure) as e:
            c.test.command("getLog", "global")
    assert e.value.code == 13


def test_plain_format_writes_text_lines(tmp_path):
    srv = TailstreamServer(tmp_path / "db", extra_args=["--logFormat", "plain"])
    srv.start()
    try:
        with srv.client() as c:
            c.test.items.insert_one({"a": 1})
            # getLog keeps mongod's JSON whatever the output format.
            log = c.admin.command("getLog", "global")["log"]
            assert all(json.loads(line)["msg"] for line in log)
    finally:
        srv.stop()
    text = srv.log_text()
    assert "Waiting for connections" in text
    assert not any(line.startswith("{") for line in text.splitlines()), text[:500]


def test_log_rotate_renames_the_file_and_goes_on_in_a_new_one(tmp_path):
    """logRotate (and SIGUSR1) as mongod's default `--logRotate rename`: the log file
    becomes `<path>.<UTC time>` and the server writes on in a new file of the old name."""
    import signal
    logpath = tmp_path / "ts.log"
    srv = VerboseServer(tmp_path / "db", extra_args=["--logpath", str(logpath)])
    srv.start()
    try:
        with srv.client() as c:
            c.admin.command("ping")
            before = logpath.read_text()
            assert "Waiting for connections" in before
            assert c.admin.command("logRotate", 1)["ok"] == 1
            rotated = [p for p in tmp_path.iterdir() if p.name.startswith("ts.log.")]
            assert len(rotated) == 1, list(tmp_path.iterdir())
            assert re.fullmatch(r"ts\.log\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d", rotated[0].name)
            assert rotated[0].read_text().startswith(before)
            new = json_lines(logpath.read_text())
            assert [l["msg"] for l in new][:1] == ["Log rotation initiated"], new
            assert "Waiting for connections" not in logpath.read_text()
            time.sleep(1.1)  # a second rotation gets another name
            srv.proc.send_signal(signal.SIGUSR1)
            assert eventually(lambda: len([p for p in tmp_path.iterdir()
                                           if p.name.startswith("ts.log.")]) == 2)
            c.admin.command("ping")
    finally:
        srv.stop()


def test_log_rotate_without_a_file_and_with_a_bad_argument(server):
    with server.client() as c:
        assert c.admin.command("logRotate", 1)["ok"] == 1
        with pytest.raises(OperationFailure) as e:
            c.admin.command("logRotate", "audit")
        assert e.value.code == 4  # NoSuchKey


def slow_lines(srv, name, coll=None):
    """The slow-operation lines of the `name` commands (on `coll` when given)."""
    return [l for l in json_lines(srv.log_text())
            if l["msg"] == "Slow query" and name in l["attr"]["command"]
            and (coll is None or l["attr"]["command"][name] == coll)]


def test_slow_lines_carry_the_plan_and_what_it_examined(logged):
    """mongod's planSummary, keysExamined and docsExamined: an index scan examines the
    keys in its range and fetches their documents; a collection scan examines every
    document and no key; an _id lookup is IDHACK."""
    with logged.client() as c:
        items = c.test.items
        items.insert_many([{"_id": i, "i": i, "even": i % 2 == 0} for i in range(20)])
        items.create_index([("i", 1), ("even", -1)])
        c.admin.command("profile", 0, slowms=0)
        assert len(list(items.find({"i": {"$gte": 5, "$lt": 9}}))) == 4
        assert len(list(items.find({"even": True}))) == 10
        assert items.find_one({"_id": 3})["i"] == 3
        # No index gives this order: sorted in memory.
        assert [d["i"] for d in items.find({"even": False}).sort([("even", 1), ("i", -1)])
                .limit(2)] == [19, 17]
        c.admin.command("profile", 0, slowms=50)
    finds = eventually(lambda: slow_lines(logged, "find", "items")
                       if len(slow_lines(logged, "find", "items")) == 4 else None)
    assert finds, slow_lines(logged, "find", "items")
    by_filter = {json.dumps(l["attr"]["command"]["filter"], sort_keys=True): l["attr"]
                 for l in finds}
    ixscan = by_filter[json.dumps({"i": {"$gte": 5, "$lt": 9}}, sort_keys=True)]
    assert ixscan["planSummary"] == "IXSCAN { i: 1, even: -1 }", ixscan
    assert (ixscan["keysExamined"], ixscan["docsExamined"], ixscan["nreturned"]) == (4, 4, 4)
    collscan = by_filter[json.dumps({"even": True})]
    assert collscan["planSummary"] == "COLLSCAN"
    assert (collscan["keysExamined"], collscan["docsExamined"]) == (0, 20), collscan
    idhack = by_filter[json.dumps({"_id": 3})]
    assert idhack["planSummary"] == "IDHACK"
    assert (idhack["keysExamined"], idhack["docsExamined"]) == (1, 1), idhack
    assert "hasSortStage" not in idhack
    sorted_in_memory = by_filter[json.dumps({"even": False})]
    assert sorted_in_memory["hasSortStage"] is True, sorted_in_memory
    # The order of mongod's line: the plan and the figures after the command.
    keys = list(ixscan)
    assert keys.index("command") < keys.index("planSummary") < keys.index("keysExamined") \
        < keys.index("docsExamined") < keys.index("nreturned") < keys.index("durationMillis")


def test_an_operation_that_spilled_to_disk_says_used_disk(logged):
    """mongod's usedDisk: a sort or a $group past its memory limit wrote temporary
    files; the slow line and the profile entry say so, and nothing else does."""
    with logged.client() as c:
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=100_000)
        items = c.test.items
        items.insert_many([{"_id": i, "k": i % 500, "pad": "p" * 200} for i in range(2000)])
        c.test.command("profile", 2)
        c.admin.command("profile", 2, slowms=0)
        assert len(list(items.find({}, batch_size=5000).sort("k", -1))) == 2000
        assert len(list(items.find({"_id": {"$lt": 10}}).sort("k", -1))) == 10
        c.admin.command("setParameter", 1, internalDocumentSourceGroupMaxMemoryBytes=10_000)
        assert len(list(items.aggregate([{"$group": {"_id": "$k", "n": {"$sum": 1}}}]))) == 500
        c.test.command("profile", 0)
        c.admin.command("profile", 0, slowms=50)
        profiled = {json.dumps(p["command"].get("filter", p["command"].get("pipeline"))): p
                    for p in c.test["system.profile"].find({"ns": "test.items", "op": {"$in": ["query", "command"]}})}
    spilled = profiled[json.dumps({})]
    assert spilled["hasSortStage"] is True and spilled["usedDisk"] is True, spilled
    in_memory = profiled[json.dumps({"_id": {"$lt": 10}})]
    assert in_memory["hasSortStage"] is True and "usedDisk" not in in_memory, in_memory
    grouped = profiled[json.dumps([{"$group": {"_id": "$k", "n": {"$sum": 1}}}])]
    assert grouped["usedDisk"] is True, grouped
    lines = eventually(lambda: slow_lines(logged, "find", "items")
                       if len(slow_lines(logged, "find", "items")) >= 2 else None)
    by_filter = {json.dumps(l["attr"]["command"]["filter"]): l["attr"] for l in lines}
    assert by_filter[json.dumps({})]["usedDisk"] is True
    assert "usedDisk" not in by_filter[json.dumps({"_id": {"$lt": 10}})]
    keys = list(by_filter[json.dumps({})])
    assert keys.index("hasSortStage") < keys.index("usedDisk") < keys.index("nreturned")


def test_slow_writes_carry_their_counts_and_profile_entries_the_same_figures(logged):
    with logged.client() as c:
        items = c.test.items
        items.insert_many([{"_id": i, "k": i % 4} for i in range(12)])
        items.create_index("k")
        c.test.command("profile", 2, slowms=0)
        r = items.update_many({"k": 1}, {"$set": {"seen": True}})
        assert (r.matched_count, r.modified_count) == (3, 3)
        assert items.delete_many({"k": {"$in": [2, 3]}}).deleted_count == 6
        c.test.command("profile", 0, slowms=50)
        update = c.test.system.profile.find_one({"op": "update"})
        remove = c.test.system.profile.find_one({"op": "remove"})
    assert update["planSummary"] == "IXSCAN { k: 1 }", update
    assert (update["keysExamined"], update["docsExamined"]) == (3, 3), update
    assert (update["nMatched"], update["nModified"], update["nUpserted"]) == (3, 3, 0), update
    assert remove["ndeleted"] == 6 and remove["docsExamined"] == 6, remove
    line = eventually(lambda: slow_lines(logged, "update", "items"))
    assert line and line[0]["attr"]["nModified"] == 3, line
    assert line[0]["attr"]["keysExamined"] == 3


def test_change_stream_getmores_log_the_oplog_they_read(logged):
    """Seed 000's figure: the oplog entries and bytes a change stream's getMores read.
    A collection's stream reads its own collection's entries only, however many the
    other collections write; each of its getMores says how many it read."""
    watched_writes, other_writes = 30, 300
    with logged.client() as c:
        c.test.create_collection("watched")
        c.test.create_collection("other")
        with c.test.watched.watch(max_await_time_ms=100) as stream:
            c.admin.command("profile", 0, slowms=0)
            c.test.other.insert_many([{"n": i} for i in range(other_writes)])
            for i in range(watched_writes):
                c.test.watched.insert_one({"n": i})
            seen = 0
            while seen < watched_writes:
                if stream.try_next() is not None:
                    seen += 1
            c.admin.command("profile", 0, slowms=50)

    def getmores():
        return [l["attr"] for l in slow_lines(logged, "getMore", None)
                if l["attr"]["ns"] == "test.watched"]

    lines = eventually(lambda: getmores() if sum(a.get("oplogEntriesRead", 0)
                                                 for a in getmores()) >= watched_writes
                       else None)
    assert lines, getmores()
    entries = sum(a.get("oplogEntriesRead", 0) for a in lines)
    assert watched_writes <= entries < other_writes, lines
    reading = [a for a in lines if a.get("oplogEntriesRead")]
    for a in reading:
        assert a["docsExamined"] >= a["oplogEntriesRead"] > 0, a
        # An insert's entry is at least its ns, op, document and times.
        assert a["oplogBytesRead"] >= 50 * a["oplogEntriesRead"], a


def test_a_start_after_a_crash_says_how_much_log_it_replays(tmp_path):
    """RocksDB replays its write-ahead log inside its open, with no progress of its own:
    the server says beforehand how many bytes there are, and after, how long it took."""
    srv = VerboseServer(tmp_path / "db")
    srv.start()
    with srv.client() as c:
        c.test.items.insert_many([{"i": i, "pad": "x" * 100} for i in range(2000)])
    srv.kill9()
    srv.remove_socket_file()
    srv.start()
    try:
        lines = json_lines(srv.log_text())
    finally:
        srv.stop()
    replay = [l for l in lines if l["msg"].startswith("replaying the write-ahead log")]
    assert replay, [l["msg"] for l in lines]
    # At least the inserted documents' bytes, written to the log before the kill.
    assert replay[-1]["attr"]["wal_bytes"] > 2000 * 100, replay[-1]
    opened = [l for l in lines if l["msg"] == "storage opened"]
    assert opened and opened[-1]["attr"]["wal_bytes"] == replay[-1]["attr"]["wal_bytes"]
    assert opened[-1]["attr"]["duration_millis"] >= 0

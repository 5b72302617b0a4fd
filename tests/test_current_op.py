"""currentOp, the $currentOp stage and killOp, as mongod (mongosh's db.currentOp()
and db.killOp() use them)."""

import threading
import time

import pytest
from bson import Int64
from pymongo import CursorType, MongoClient, monitoring
from pymongo.errors import ExecutionTimeout, OperationFailure
from conftest import eventually


def wait_for_op(admin, match, timeout=10.0):
    """The first currentOp entry matching `match` (a filter), waiting for it to start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ops = admin.command({"currentOp": 1, **match})["inprog"]
        if ops:
            return ops[0]
        time.sleep(0.02)
    pytest.fail(f"no operation matching {match} within {timeout}s")


def run_in_thread(fn):
    out = {}

    def target():
        try:
            out["result"] = fn()
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e

    t = threading.Thread(target=target)
    t.start()
    return t, out


@pytest.fixture
def other(server):
    """A second client with an application name, to be seen in reports."""
    c = MongoClient(server.uri(directConnection="true"), appname="reported-app")
    yield c
    c.close()


def test_running_command_is_reported_and_killed(client, other, db):
    db.c.insert_many([{"i": i} for i in range(3)])
    coll = other[db.name].c
    t, out = run_in_thread(
        lambda: list(coll.find({"$where": "sleep(200); return true"}).comment("slow find"))
    )
    op = wait_for_op(client.admin, {"command.comment": "slow find"})
    assert op["type"] == "op" and op["active"] is True
    assert op["op"] == "query"
    assert op["ns"] == f"{db.name}.c"
    assert op["command"]["find"] == "c"
    assert isinstance(op["opid"], int) and op["opid"] > 0
    assert isinstance(op["secs_running"], Int64)
    assert op["desc"] == f"conn{op['connectionId']}"
    assert op["client"].startswith("127.0.0.1:")
    assert op["clientMetadata"]["application"]["name"] == "reported-app"
    assert "lsid" in op

    reply = client.admin.command("killOp", op=op["opid"])
    assert reply["info"] == "attempting to kill op"
    t.join(10)
    assert not t.is_alive()
    err = out.get("error")
    assert isinstance(err, OperationFailure), out
    assert err.code == 11601 and err.details["codeName"] == "Interrupted"
    assert client.admin.command({"currentOp": 1, "command.comment": "slow find"})["inprog"] == []


class SentCommands(monitoring.CommandListener):
    """The commands a client sent, as its driver built them."""

    def __init__(self):
        self.sent = []

    def started(self, event):
        self.sent.append(event.command)

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


def test_reports_show_the_command_as_sent_cluster_time_included(server, client, db):
    """The server reads a command's `$clusterTime` from its bytes only when a report
    shows the command: currentOp, the profiler and the slow-query log show it in its
    place, as the driver sent it."""
    listener = SentCommands()
    watched = MongoClient(server.uri(directConnection="true"), event_listeners=[listener])
    try:
        coll = watched[db.name].c
        coll.insert_one({"i": 1})
        t, out = run_in_thread(
            lambda: list(coll.find({"$where": "sleep(200); return true"}).comment("shown"))
        )
        op = wait_for_op(client.admin, {"command.comment": "shown"})
        t.join(10)
        assert "result" in out, out
        sent = next(c for c in listener.sent if c.get("comment") == "shown")
        assert "$clusterTime" in sent and "lsid" in sent, sent
        assert list(op["command"].items()) == list(sent.items())

        assert db.command("profile", 2)["was"] == 0
        try:
            list(coll.find({"i": 1}).comment("profiled"))
        finally:
            db.command("profile", 0)
        sent = next(c for c in listener.sent if c.get("comment") == "profiled")
        entry = db.system.profile.find_one({"command.comment": "profiled"})
        assert "$clusterTime" in sent
        assert list(entry["command"].items()) == list(sent.items())
    finally:
        watched.close()


def test_filter_and_all(client, other):
    # The report includes the currentOp command itself, as mongod's does.
    mine = client.admin.command({"currentOp": 1, "command.currentOp": 1})["inprog"]
    assert len(mine) == 1 and mine[0]["op"] == "command" and mine[0]["ns"] == "admin.$cmd"
    assert client.admin.command({"currentOp": 1, "op": "no-such-op"})["inprog"] == []
    other.admin.command("ping")  # connected, now idle
    everything = client.admin.command({"currentOp": 1, "$all": True, "op": "no-such-op"})["inprog"]
    idle = [o for o in everything if o.get("clientMetadata", {}).get("application", {}).get("name") == "reported-app"]
    assert idle and all(o["active"] is False for o in idle if "opid" not in o)


def test_current_op_stage(client, other):
    other.admin.command("ping")
    ops = list(client.admin.aggregate([{"$currentOp": {}}]))
    assert any(o.get("command", {}).get("aggregate") == 1 for o in ops)
    assert all(o["active"] for o in ops)
    with_idle = list(
        client.admin.aggregate(
            [
                {"$currentOp": {"idleConnections": True, "allUsers": True}},
                {"$match": {"active": False}},
                {"$project": {"desc": 1, "app": "$clientMetadata.application.name"}},
            ]
        )
    )
    assert any(o.get("app") == "reported-app" for o in with_idle)


def test_idle_cursors(client, db):
    db.c.insert_many([{"i": i} for i in range(10)])
    cursor = db.c.find(batch_size=2)
    next(cursor)
    ops = list(
        client.admin.aggregate(
            [{"$currentOp": {"idleCursors": True}}, {"$match": {"type": "idleCursor", "ns": f"{db.name}.c"}}]
        )
    )
    assert [o["cursor"]["cursorId"] for o in ops] == [cursor.cursor_id]
    assert ops[0]["cursor"]["tailable"] is False
    cursor.close()
    assert not list(
        client.admin.aggregate(
            [{"$currentOp": {"idleCursors": True}}, {"$match": {"type": "idleCursor", "ns": f"{db.name}.c"}}]
        )
    )


def idle_cursor(client, ns):
    """The one cursor open on `ns`, once idle (a cursor the server is reading ahead for,
    after a batch went out, is in use meanwhile and not listed)."""
    def listed():
        return list(client.admin.aggregate(
            [{"$currentOp": {"idleCursors": True}}, {"$match": {"type": "idleCursor", "ns": ns}}]))
    ops = eventually(lambda: len(listed()) == 1 and listed())
    assert ops and len(ops) == 1, ops
    return ops[0]["cursor"]


def test_idle_cursors_count_what_they_returned(client, db):
    """mongod's createdDate, nDocsReturned and nBatchesReturned of an idle cursor."""
    db.c.insert_many([{"i": i} for i in range(10)])
    cursor = db.c.find(batch_size=3)
    for _ in range(4):  # the first batch (3) and one getMore (3)
        next(cursor)
    c = idle_cursor(client, f"{db.name}.c")
    assert (c["nDocsReturned"], c["nBatchesReturned"]) == (6, 2)
    assert c["createdDate"] <= c["lastAccessDate"]
    # mongod's originatingCommand: the find that opened it.
    assert c["originatingCommand"]["find"] == "c", c
    assert c["originatingCommand"]["batchSize"] == 3
    cursor.close()
    # A change stream counts its events and batches the same way.
    with db.c.watch(batch_size=100, max_await_time_ms=50) as stream:
        assert stream.try_next() is None
        db.c.insert_many([{"j": j} for j in range(5)])
        got = 0
        while got < 5:
            if stream.try_next() is not None:
                got += 1
        c = idle_cursor(client, f"{db.name}.c")
        assert c["nDocsReturned"] == 5 and c["nBatchesReturned"] >= 2 and c["tailable"]


def test_stage_errors(client, db):
    with pytest.raises(OperationFailure) as e:
        list(db.aggregate([{"$currentOp": {}}]))
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        list(client.admin.c.aggregate([{"$currentOp": {}}]))
    assert e.value.code == 73
    with pytest.raises(OperationFailure) as e:
        list(client.admin.aggregate([{"$match": {}}, {"$currentOp": {}}]))
    assert e.value.code == 40602
    with pytest.raises(OperationFailure) as e:
        list(client.admin.aggregate([{"$currentOp": {"idleConnections": 1}}]))
    assert e.value.code == 9
    with pytest.raises(OperationFailure) as e:
        list(client.admin.aggregate([{"$currentOp": {"noSuchOption": True}}]))
    assert e.value.code == 9


def test_command_errors(client, db):
    for name in ["currentOp", "killOp"]:
        with pytest.raises(OperationFailure) as e:
            db.command({name: 1, "op": 1})
        assert e.value.code == 13, name
    with pytest.raises(OperationFailure) as e:
        client.admin.command("killOp")
    assert e.value.code == 4 and e.value.details["errmsg"] == 'Missing expected field "op"'
    with pytest.raises(OperationFailure) as e:
        client.admin.command("killOp", op="12")
    assert e.value.code == 14
    # An id no operation has: acknowledged, nothing happens.
    assert client.admin.command("killOp", op=2**31 - 1)["ok"] == 1


def test_killing_an_awaiting_tailable_getmore(client, other, db):
    db.create_collection("cap", capped=True, size=4096)
    cursor = other[db.name].cap.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(60_000)

    def tail():
        for _ in cursor:
            pass
        return cursor.next()

    t, out = run_in_thread(tail)
    op = wait_for_op(client.admin, {"op": "getmore", "ns": f"{db.name}.cap"})
    client.admin.command("killOp", op=op["opid"])
    t.join(10)
    assert not t.is_alive(), "the getMore should end at the kill, not at its 60 s await"
    assert getattr(out.get("error"), "code", None) == 11601, out
    # Its cursor went with it.
    with pytest.raises(OperationFailure) as e:
        db.command("getMore", cursor.cursor_id, collection="cap")
    assert e.value.code == 43


def test_killing_an_awaiting_change_stream_getmore(client, db):
    reply = db.command("aggregate", "cs", pipeline=[{"$changeStream": {}}], cursor={})
    cid = reply["cursor"]["id"]
    t, out = run_in_thread(
        lambda: db.command("getMore", cid, collection="cs", maxTimeMS=60_000)
    )
    op = wait_for_op(client.admin, {"op": "getmore", "command.getMore": cid})
    client.admin.command("killOp", op=op["opid"])
    t.join(10)
    assert not t.is_alive()
    err = out.get("error")
    assert getattr(err, "code", None) == 11601, out
    assert "ResumableChangeStreamError" not in (err.details.get("errorLabels") or [])


def test_max_time_ms_stops_a_long_scan(db):
    db.big.insert_many([{"i": i, "pad": "x" * 100} for i in range(100_000)])
    with pytest.raises(ExecutionTimeout) as e:
        list(db.big.find({"never": True}).max_time_ms(1))
    assert e.value.code == 50
    # Without a limit it runs to the end.
    assert list(db.big.find({"never": True})) == []

"""serverStatus's sections that mongostat and monitoring agents read (issue 30), with
mongod's names and units: asserts, extra_info, globalLock, mem, network, opLatencies,
metrics.document / queryExecutor / operation, transactions, and the storage engine's
own figures (`rocksdb`)."""

import threading
import time

import pymongo
import pytest
from pymongo.errors import OperationFailure

from conftest import eventually


def status(client):
    return client.admin.command("serverStatus")


def test_sections_have_mongods_fields(server):
    with server.client() as c:
        s = status(c)
    assert set(s["asserts"]) == {"regular", "warning", "msg", "user", "tripwire", "rollovers"}
    assert s["mem"]["bits"] == 64 and s["mem"]["supported"] is True
    assert 0 < s["mem"]["resident"] <= s["mem"]["virtual"], s["mem"]
    assert {"bytesIn", "bytesOut", "physicalBytesIn", "physicalBytesOut", "numRequests"} <= set(s["network"])
    assert set(s["opLatencies"]) == {"reads", "writes", "commands", "transactions"}
    assert set(s["opLatencies"]["reads"]) == {"latency", "ops"}
    assert set(s["globalLock"]) == {"totalTime", "currentQueue", "activeClients"}
    assert set(s["globalLock"]["activeClients"]) == {"total", "readers", "writers"}
    assert set(s["metrics"]["document"]) == {"deleted", "inserted", "returned", "updated"}
    extra = s["extra_info"]
    assert extra["note"] == "fields vary by platform"
    assert extra["user_time_us"] > 0 and extra["maximum_resident_set_kb"] > 0
    assert s["repl"]["secondary"] is False and s["repl"]["hosts"] == [s["repl"]["me"]]


def test_network_counts_the_bytes_of_each_message(server):
    with server.client() as c:
        c.admin.command("ping")
        before = status(c)["network"]
        payload = "x" * 100_000
        c.test.net.insert_one({"payload": payload})
        c.test.net.find_one({"payload": payload})
        after = status(c)["network"]
    # The serverStatus request itself and the two commands: at least the payload twice in
    # (insert, the find's filter), once out (the found document).
    assert after["bytesIn"] - before["bytesIn"] >= 2 * 100_000
    assert after["bytesOut"] - before["bytesOut"] >= 100_000
    assert after["numRequests"] - before["numRequests"] >= 3
    assert after["physicalBytesIn"] == after["bytesIn"]


def test_latencies_documents_and_asserts_move_with_operations(server):
    with server.client() as c:
        c.test.moves.drop()
        before = status(c)
        c.test.moves.insert_many([{"i": i} for i in range(5)])
        c.test.moves.update_many({"i": {"$lt": 3}}, {"$set": {"u": 1}})
        c.test.moves.delete_one({"i": 4})
        assert len(list(c.test.moves.find())) == 4
        with pytest.raises(OperationFailure):
            c.test.command("noSuchCommand")
        after = status(c)
    d0, d1 = before["metrics"]["document"], after["metrics"]["document"]
    assert d1["inserted"] - d0["inserted"] == 5
    assert d1["updated"] - d0["updated"] == 3
    assert d1["deleted"] - d0["deleted"] == 1
    assert d1["returned"] - d0["returned"] >= 4
    l0, l1 = before["opLatencies"], after["opLatencies"]
    assert l1["writes"]["ops"] - l0["writes"]["ops"] == 3
    assert l1["reads"]["ops"] - l0["reads"]["ops"] >= 1
    assert l1["writes"]["latency"] > l0["writes"]["latency"]
    assert l1["commands"]["ops"] > l0["commands"]["ops"]
    assert after["asserts"]["user"] - before["asserts"]["user"] >= 1


def test_a_running_read_is_an_active_client(server):
    with server.client() as c:
        c.test.active.drop()
        c.test.active.insert_one({"a": 1})
        reader = threading.Thread(
            target=lambda: list(c.test.active.find({"$where": "sleep(1500) || true"})))
        reader.start()
        try:
            seen = eventually(lambda: status(c)["globalLock"]["activeClients"]["readers"] >= 1)
        finally:
            reader.join()
        assert seen
        # Only serverStatus runs now (and the drivers' monitors' hellos): no reader.
        active = status(c)["globalLock"]["activeClients"]
        assert (active["readers"], active["writers"], active["total"]) == (0, 0, 0)


def test_query_executor_and_operation_count_what_queries_examined(server):
    """metrics.queryExecutor (keys and documents examined, collection scans, a tailable
    find's apart) and metrics.operation.scanAndOrder (sorts done in memory)."""
    with server.client() as c:
        c.test.qe.drop()
        c.test.qe.insert_many([{"_id": i, "k": i % 5, "v": 10 - i} for i in range(10)])
        c.test.qe.create_index("k")
        c.test.create_collection("qe_capped", capped=True, size=1 << 16)
        c.test.qe_capped.insert_one({"x": 1})
        before = status(c)["metrics"]
        assert len(list(c.test.qe.find({"k": 2}))) == 2           # IXSCAN: 2 keys, 2 docs
        assert len(list(c.test.qe.find({"v": {"$gt": 0}}))) == 10  # COLLSCAN: 10 docs
        assert [d["v"] for d in c.test.qe.find({"k": 1}).sort("v", 1)] == [4, 9]  # in memory
        tail = c.test.qe_capped.find(cursor_type=pymongo.CursorType.TAILABLE)
        assert next(tail)["x"] == 1                                # a tailable COLLSCAN
        tail.close()
        after = status(c)["metrics"]
    q0, q1 = before["queryExecutor"], after["queryExecutor"]
    assert q1["scanned"] - q0["scanned"] == 2 + 2
    assert q1["scannedObjects"] - q0["scannedObjects"] == 2 + 10 + 2 + 1
    scans0, scans1 = q0["collectionScans"], q1["collectionScans"]
    assert (scans1["total"] - scans0["total"], scans1["nonTailable"] - scans0["nonTailable"]) \
        == (2, 1)
    assert after["operation"]["scanAndOrder"] - before["operation"]["scanAndOrder"] == 1
    assert after["operation"]["writeConflicts"] == 0


def test_transactions_and_the_storage_engine_have_their_sections(server):
    with server.client() as c:
        c.test.txn.insert_one({"_id": 0})
        before = status(c)["transactions"]
        with c.start_session() as s:
            with s.start_transaction():
                c.test.txn.insert_one({"_id": 1}, session=s)
            s.start_transaction()
            c.test.txn.insert_one({"_id": 2}, session=s)
            assert status(c)["transactions"]["currentOpen"] == before["currentOpen"] + 1
            s.abort_transaction()
        after = status(c)
    t = after["transactions"]
    assert t["totalStarted"] - before["totalStarted"] == 2
    assert t["totalCommitted"] - before["totalCommitted"] == 1
    assert t["totalAborted"] - before["totalAborted"] == 1
    assert t["currentOpen"] == before["currentOpen"] and t["currentPrepared"] == 0
    rocks = after["rocksdb"]
    assert rocks["memtablesSize"] > 0 and rocks["walBytes"] > 0, rocks
    assert rocks["estimateNumKeys"] > 0 and rocks["blockCacheUsage"] >= 0, rocks
    assert all(isinstance(v, int) for v in rocks.values()), rocks

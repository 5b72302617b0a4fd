"""Handshake, topology and server-introspection commands."""

import subprocess
from pathlib import Path
import threading
import time

import pytest
from bson import ObjectId, Timestamp
from pymongo import CursorType, MongoClient, WriteConcern
from pymongo.errors import OperationFailure

import wire


@pytest.fixture(scope="module")
def hello(client):
    return client.admin.command("hello")


class TestHello:
    def test_primary_of_rs0(self, hello, server):
        me = f"127.0.0.1:{server.port}"
        assert hello["ok"] == 1
        assert hello["isWritablePrimary"] is True
        assert hello.get("secondary") is False
        assert hello["setName"] == "rs0"
        assert isinstance(hello["setVersion"], int) and hello["setVersion"] >= 1
        assert isinstance(hello["electionId"], ObjectId)
        assert hello["me"] == me
        assert hello["primary"] == me
        assert hello["hosts"] == [me]

    def test_topology_version(self, hello):
        tv = hello["topologyVersion"]
        assert isinstance(tv["processId"], ObjectId)
        assert isinstance(tv["counter"], int) and tv["counter"] >= 0

    def test_last_write(self, hello):
        op_time = hello["lastWrite"]["opTime"]
        assert isinstance(op_time["ts"], Timestamp)
        assert "t" in op_time
        assert "lastWriteDate" in hello["lastWrite"]

    def test_limits(self, hello):
        assert hello["maxBsonObjectSize"] == 16 * 1024 * 1024
        assert hello["maxMessageSizeBytes"] == 48_000_000
        assert hello["maxWriteBatchSize"] == 100_000
        assert hello["maxWireVersion"] >= 21
        assert hello["minWireVersion"] == 0
        assert hello["logicalSessionTimeoutMinutes"] == 30
        assert hello["readOnly"] is False
        assert "localTime" in hello
        assert isinstance(hello["connectionId"], int)

    def test_legacy_ismaster(self, client):
        reply = client.admin.command("isMaster")
        assert reply["ismaster"] is True
        assert reply["setName"] == "rs0"
        assert "isWritablePrimary" not in reply, "legacy isMaster answers with 'ismaster'"

    def test_last_write_advances_after_write(self, client, coll):
        before = client.admin.command("hello")["lastWrite"]["opTime"]["ts"]
        coll.insert_one({"x": 1})
        after = client.admin.command("hello")["lastWrite"]["opTime"]["ts"]
        assert after > before


class TestClusterTime:
    def test_replies_carry_cluster_time(self, client, db):
        reply = db.command("ping")
        assert isinstance(reply["operationTime"], Timestamp)
        ct = reply["$clusterTime"]
        assert isinstance(ct["clusterTime"], Timestamp)
        assert "signature" in ct
        assert ct["clusterTime"] >= reply["operationTime"]

    def test_write_operation_time_advances(self, db):
        r1 = db.command("insert", "c", documents=[{"a": 1}])
        r2 = db.command("insert", "c", documents=[{"a": 2}])
        assert r2["operationTime"] > r1["operationTime"]


class TestConnectionStrings:
    @pytest.mark.parametrize("opts", [{}, {"replicaSet": "rs0"}, {"directConnection": "true"}],
                             ids=["plain", "replicaSet", "directConnection"])
    def test_insert_and_find(self, server, opts, request):
        name = "t_conn_" + request.node.callspec.id
        with MongoClient(server.uri(**opts), serverSelectionTimeoutMS=5000) as c:
            coll = c[name].things
            coll.insert_one({"_id": 1, "via": request.node.callspec.id})
            assert coll.find_one({"_id": 1}) == {"_id": 1, "via": request.node.callspec.id}
            if opts.get("replicaSet"):
                assert c.primary == ("127.0.0.1", server.port)
            c.drop_database(name)


class TestIntrospection:
    def test_build_info(self, client):
        info = client.admin.command("buildInfo")
        assert info["version"].startswith("7.0."), info["version"]
        assert list(info["versionArray"][:2]) == [7, 0]
        assert len(info["versionArray"]) == 4
        assert info["maxBsonObjectSize"] == 16 * 1024 * 1024

    def test_ping(self, client):
        assert client.admin.command("ping")["ok"] == 1

    def test_server_status(self, client, coll):
        before = client.admin.command("serverStatus")
        assert before["storageEngine"]["name"]
        assert before["connections"]["current"] >= 1
        assert "available" in before["connections"]
        coll.insert_one({"a": 1})
        coll.insert_one({"a": 2})
        after = client.admin.command("serverStatus")
        assert after["opcounters"]["insert"] >= before["opcounters"]["insert"] + 2
        assert after["opcounters"]["command"] > before["opcounters"]["command"]
        assert after["uptime"] >= 0
        assert isinstance(after["pid"], int)

    def test_server_status_reports_the_group_commit_fsyncs(self, client, coll):
        before = client.admin.command("serverStatus")["durability"]
        coll.with_options(write_concern=WriteConcern(j=True)).insert_one({"durable": 1})
        after = client.admin.command("serverStatus")["durability"]
        assert after["synced"] > before["synced"]
        assert after["syncs"] > before["syncs"], (before, after)
        micros = after["syncMicros"]
        assert sum(n for _, n in micros["buckets"]) == after["syncs"]
        assert micros["max"] <= micros["total"]
        bounds = [upper for upper, _ in micros["buckets"] if upper != -1]
        assert bounds == sorted(bounds) and all(b > 0 for b in bounds)
        # Every commit counted once, when the fsync covering it ended; the durable
        # insert's commit is among them, and waited at least as long as nothing.
        waits = after["commitToDurableMicros"]
        assert waits["count"] > before["commitToDurableMicros"]["count"], (before, after)
        assert waits["count"] <= after["synced"]
        assert sum(n for _, n in waits["buckets"]) == waits["count"]
        assert waits["max"] <= waits["total"]

    def test_host_info(self, client):
        info = client.admin.command("hostInfo")
        assert "system" in info and "os" in info
        assert info["system"]["numCores"] >= 1
        assert "hostname" in info["system"]

    def test_get_parameter_star(self, client):
        params = client.admin.command("getParameter", "*")
        assert params["ok"] == 1
        assert params.get("ttlMonitorSleepSecs") == 1, "set via --setParameter ttlMonitorSleepSecs=1"
        assert len(params) > 3

    def test_get_parameter_single(self, client):
        reply = client.admin.command({"getParameter": 1, "ttlMonitorSleepSecs": 1})
        assert reply["ttlMonitorSleepSecs"] == 1

    def test_get_cmd_line_opts(self, client, server):
        opts = client.admin.command("getCmdLineOpts")
        argv = opts["argv"]
        assert "--port" in argv and str(server.port) in argv
        parsed = opts["parsed"]
        assert parsed["net"]["port"] == server.port
        assert parsed["replication"]["replSet"] == "rs0"
        assert parsed["storage"]["dbPath"].rstrip("/") == str(server.dbpath).rstrip("/")

    def test_whatsmyuri(self, client):
        you = client.admin.command("whatsmyuri")["you"]
        host, port = you.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0

    def test_connection_status(self, client):
        status = client.admin.command("connectionStatus")
        assert status["authInfo"]["authenticatedUsers"] == []

    def test_unknown_command(self, client):
        with pytest.raises(OperationFailure) as exc:
            client.admin.command("definitelyNotACommand")
        assert exc.value.code == 59
        assert exc.value.details["codeName"] == "CommandNotFound"
        assert "definitelyNotACommand" in exc.value.details["errmsg"]


class TestLegacyOpQuery:
    def test_op_query_ismaster_gets_op_reply(self, server):
        sock = wire.connect(server.port)
        try:
            rid, msg = wire.op_query("admin.$cmd", {"isMaster": 1})
            sock.sendall(msg)
            _, resp_to, opcode, body = wire.read_message(sock)
            assert opcode == wire.OP_REPLY
            assert resp_to == rid
            flags, cursor_id, docs = wire.parse_op_reply(body)
            assert cursor_id == 0
            assert len(docs) == 1
            assert docs[0]["ismaster"] is True
            assert docs[0]["ok"] == 1
            assert docs[0]["maxWireVersion"] >= 21
            # the connection stays usable for OP_MSG afterwards
            assert wire.command(sock, {"ping": 1, "$db": "admin"})["ok"] == 1
        finally:
            sock.close()

    def test_op_query_hello(self, server):
        sock = wire.connect(server.port)
        try:
            rid, msg = wire.op_query("admin.$cmd", {"hello": 1})
            sock.sendall(msg)
            _, _, opcode, body = wire.read_message(sock)
            assert opcode == wire.OP_REPLY
            doc = wire.parse_op_reply(body)[2][0]
            assert doc["isWritablePrimary"] is True
        finally:
            sock.close()


def test_get_default_rw_concern(client):
    reply = client.admin.command("getDefaultRWConcern")
    assert reply["defaultWriteConcern"]["w"] == "majority"
    assert reply["defaultReadConcern"] == {"level": "local"}
    assert reply["defaultWriteConcernSource"] == "implicit"


def test_connection_establishment_rate_limiter(fresh_server):
    """With the ingress rate limiter on, connections beyond the burst and the queue are
    closed before their first reply; admitted ones work; turning it off admits all."""
    srv = fresh_server()
    admin = wire.connect(srv.port)
    assert wire.command(admin, {"setParameter": 1,
                                "ingressConnectionEstablishmentRatePerSec": 1,
                                "ingressConnectionEstablishmentBurstCapacitySecs": 2,
                                "ingressConnectionEstablishmentMaxQueueDepth": 0,
                                "$db": "admin"})["ok"] == 1
    assert wire.command(admin, {"setParameter": 1, "ingressConnectionEstablishmentRateLimiterEnabled": True,
                                "$db": "admin"})["ok"] == 1
    socks = [wire.connect(srv.port) for _ in range(6)]
    admitted = 0
    for s in socks:
        try:
            if wire.command(s, {"hello": 1, "$db": "admin"})["ok"] == 1:
                admitted += 1
        except (ConnectionError, OSError):
            pass
    # A burst of two: the rest are refused (at most one more token refills meanwhile).
    assert 2 <= admitted <= 3
    status = wire.command(admin, {"serverStatus": 1, "$db": "admin"})
    assert status["connections"]["establishmentRateLimit"]["rejected"] == 6 - admitted
    assert wire.command(admin, {"setParameter": 1, "ingressConnectionEstablishmentRateLimiterEnabled": False,
                                "$db": "admin"})["ok"] == 1
    for _ in range(5):
        s = wire.connect(srv.port)
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
        s.close()
    for s in socks:
        s.close()
    admin.close()


class TestIoThreads:
    """`--ioThreads N`: how many threads run the connections (default: one)."""

    def test_one_connection_thread_by_default(self, fresh_server, monkeypatch):
        monkeypatch.setenv("TAILSTREAM_LOG", "info")
        srv = fresh_server()
        with srv.client() as c:
            assert c.admin.command("ping")["ok"] == 1
        assert '"ioThreads":1' in srv.log_text()
        with_three = fresh_server(extra_args=["--ioThreads", "3"])
        assert '"ioThreads":3' in with_three.log_text()

    def test_connections_are_spread_over_the_threads(self, fresh_server):
        # Three connections open at once go to three threads (the fewest connections
        # first): each of the two threads added to the main one ("tailstream-conn")
        # spends CPU time on the pings of its own connection.
        srv = fresh_server(extra_args=["--ioThreads", "3"])
        pid = srv.proc.pid
        socks = [wire.connect(srv.port) for _ in range(3)]

        def conn_threads():
            # The CPU time each thread ran, in nanoseconds (schedstat's first field: not
            # sampled by clock ticks, which a thread of short runs can miss altogether).
            run_ns = {}
            for task in Path(f"/proc/{pid}/task").iterdir():
                if (task / "comm").read_text().strip() == "tailstream-conn":
                    run_ns[task.name] = int((task / "schedstat").read_text().split()[0])
            return run_ns

        before = conn_threads()
        assert len(before) == 2, before
        for s in socks:
            for _ in range(3000):
                assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
        after = conn_threads()
        assert after.keys() == before.keys()
        assert all(after[t] > before[t] for t in before), (before, after)
        for s in socks:
            s.close()

    def test_zero_is_refused_at_startup(self, fresh_server):
        srv = fresh_server(start=False, extra_args=["--ioThreads", "0"])
        proc = subprocess.run(srv.argv(), capture_output=True, text=True, timeout=15)
        assert proc.returncode != 0
        assert "invalid value '0' for '--ioThreads" in proc.stdout + proc.stderr

    @pytest.mark.parametrize("threads", ["1", "3"])
    def test_writers_and_a_tailing_reader_all_served(self, fresh_server, threads):
        # One connection thread must serve many connections at once: four writers
        # (small inserts run on that thread), one large insert_many (the blocking
        # pool, holding the writer lock meanwhile), and a tailable reader waiting
        # for all of them.
        srv = fresh_server(extra_args=["--ioThreads", threads])
        with srv.client() as c:
            assert "--ioThreads" in c.admin.command("getCmdLineOpts")["argv"]
            c.t.create_collection("bus", capped=True, size=1 << 24)
            c.t.bus.insert_one({"w": -1, "i": -1})
            cursor = c.t.bus.find({}, cursor_type=CursorType.TAILABLE_AWAIT)
            assert next(cursor)["w"] == -1

            def writer(w):
                with srv.client() as wc:
                    if w == 4:
                        wc.t.bus.insert_many([{"w": w, "i": i, "pad": "x" * 200} for i in range(2000)])
                    else:
                        for i in range(300):
                            wc.t.bus.insert_one({"w": w, "i": i})

            threads_ = [threading.Thread(target=writer, args=(w,)) for w in range(5)]
            for t in threads_:
                t.start()
            seen = {}
            expected = 4 * 300 + 2000
            give_up = time.monotonic() + 120  # a guard against hanging, not a speed check
            while (sum(len(v) for v in seen.values()) < expected and cursor.alive
                   and time.monotonic() < give_up):
                for d in cursor:
                    seen.setdefault(d["w"], []).append(d["i"])
                    if sum(len(v) for v in seen.values()) == expected:
                        break
            for t in threads_:
                t.join()
            assert {w: len(v) for w, v in seen.items()} == {0: 300, 1: 300, 2: 300, 3: 300, 4: 2000}
            # Each writer's messages arrive in its own order.
            assert all(v == sorted(v) for v in seen.values())


class TestReplicaSetCommands:
    """rs.conf(), rs.initiate() and rs.status() as mongosh and setup scripts call them
    on the one-member replica set the server presents."""

    def test_repl_set_get_config(self, client, server):
        reply = client.admin.command("replSetGetConfig")
        config = reply["config"]
        assert config["_id"] == "rs0"
        assert config["protocolVersion"] == 1
        assert config["writeConcernMajorityJournalDefault"] is True
        [member] = config["members"]
        assert member["host"] == f"127.0.0.1:{server.port}"
        assert member["host"] == client.admin.command("hello")["me"]
        assert (member["_id"], member["votes"], member["priority"]) == (0, 1, 1.0)
        assert member["arbiterOnly"] is False and member["hidden"] is False
        assert isinstance(config["settings"]["replicaSetId"], ObjectId)
        assert "commitmentStatus" not in reply
        assert client.admin.command("replSetGetConfig", commitmentStatus=True)["commitmentStatus"] is True
        with pytest.raises(OperationFailure) as e:
            client.admin.command("replSetGetConfig", commitmentStatus="yes")
        assert e.value.code == 14

    def test_replica_set_id_is_kept_across_restarts(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            first = c.admin.command("replSetGetConfig")["config"]["settings"]["replicaSetId"]
        srv.kill9()
        srv.start()
        with srv.client() as c:
            again = c.admin.command("replSetGetConfig")["config"]["settings"]["replicaSetId"]
        assert again == first
        other = fresh_server()
        with other.client() as c:
            assert c.admin.command("replSetGetConfig")["config"]["settings"]["replicaSetId"] != first

    def test_repl_set_initiate_on_the_initiated_set(self, client):
        with pytest.raises(OperationFailure) as e:
            client.admin.command("replSetInitiate", {"_id": "rs0", "members": [{"_id": 0, "host": "x:1"}]})
        assert e.value.code == 23
        assert e.value.details["codeName"] == "AlreadyInitialized"
        assert e.value.details["errmsg"] == "already initialized"

    @pytest.mark.parametrize("name", ["replSetGetConfig", "replSetGetStatus", "replSetInitiate"])
    def test_admin_database_only(self, client, name):
        with pytest.raises(OperationFailure) as e:
            client.test.command(name)
        assert e.value.code == 13
        assert e.value.details["errmsg"] == f"{name} may only be run against the admin database."

    def test_list_commands_names_them(self, client):
        commands = client.admin.command("listCommands")["commands"]
        for name in ["replSetGetConfig", "replSetGetStatus", "find", "getMore", "aggregate"]:
            assert name in commands, name
        assert commands["replSetGetConfig"]["adminOnly"] is True
        assert commands["find"]["adminOnly"] is False


def test_an_awaitable_hello_with_exhaust_streams_its_replies(server):
    """The streaming protocol of server monitoring, as mongod: an awaitable hello that
    allows exhaust gets a reply flagged moreToCome each time its maxAwaitTimeMS passes,
    without being asked again, each answering the one before."""
    import wire
    sock = wire.connect(server.port)
    try:
        first = wire.command(sock, {"hello": 1, "$db": "admin"})
        cmd = {"hello": 1, "$db": "admin", "topologyVersion": first["topologyVersion"],
               "maxAwaitTimeMS": 100}
        rid, msg = wire.op_msg(cmd, flags=1 << 16)  # exhaustAllowed
        sock.sendall(msg)
        response_to = rid
        for _ in range(3):
            reply_id, resp_to, opcode, body = wire.read_message(sock)
            flags, doc = wire.parse_op_msg(body)
            assert opcode == wire.OP_MSG and resp_to == response_to
            assert flags & 2, "moreToCome"
            assert doc["ok"] == 1 and doc["isWritablePrimary"] is True
            response_to = reply_id
    finally:
        sock.close()



def test_a_monitor_that_closes_during_its_awaitable_hello_ends_its_connection(server, client):
    """A driver's monitor waits in an awaitable hello (maxAwaitTimeMS, 10 s by default);
    when the client closes meanwhile (MongoClient.close()), the server ends the
    connection then, not when its next reply fails: a client opened and closed in a loop
    used to hold a connection for the whole wait each. The server caps the wait at 10 s;
    the connections must be gone well before (followed by their addresses in
    $currentOp, so that other tests' connections do not count)."""
    from conftest import eventually

    def open_addresses():
        ops = client.admin.aggregate([{"$currentOp": {"allUsers": True,
                                                      "idleConnections": True}}])
        return {op.get("client") for op in ops}

    socks = []
    for _ in range(5):
        sock = wire.connect(server.port)
        first = wire.command(sock, {"hello": 1, "$db": "admin"})
        cmd = {"hello": 1, "$db": "admin", "topologyVersion": first["topologyVersion"],
               "maxAwaitTimeMS": 60_000}
        _, msg = wire.op_msg(cmd, flags=1 << 16)  # exhaustAllowed
        sock.sendall(msg)
        socks.append(sock)
    mine = {"127.0.0.1:%d" % s.getsockname()[1] for s in socks}
    assert eventually(lambda: mine <= open_addresses()), (mine, open_addresses())
    for sock in socks:
        sock.close()
    # Half the capped wait: closed at once, or (before the fix) only when the wait ends.
    assert eventually(lambda: not (mine & open_addresses()), timeout=5), mine & open_addresses()

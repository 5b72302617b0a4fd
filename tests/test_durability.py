"""Crash safety, restarts, and the dbpath lock (each test runs its own server)."""

import subprocess
import time
import uuid

import pytest
from bson import Binary, Int64
from pymongo import WriteConcern
from pymongo.errors import ConnectionFailure, DuplicateKeyError, OperationFailure

import wire
from conftest import TailstreamServer


class TestCrash:
    def test_journaled_writes_survive_kill9(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            coll = c.dur.data.with_options(write_concern=WriteConcern(w=1, j=True))
            for i in range(500):
                coll.insert_one({"_id": i, "v": f"value-{i}"})
            before_ts = c.local["oplog.rs"].find().sort("$natural", -1).limit(1).next()["ts"]
        srv.kill9()
        srv.start()
        with srv.client() as c:
            data = c.dur.data
            assert data.count_documents({}) == 500
            assert sorted(d["_id"] for d in data.find({}, {"_id": 1})) == list(range(500))
            assert data.find_one({"_id": 499}) == {"_id": 499, "v": "value-499"}
            inserts = list(c.local["oplog.rs"].find({"ns": "dur.data", "op": "i"}, {"o._id": 1}))
            assert sorted(e["o"]["_id"] for e in inserts) == list(range(500)), \
                "oplog must hold exactly one insert entry per surviving document"
            # new writes continue the timeline after recovery
            data.insert_one({"_id": "after"})
            after = c.local["oplog.rs"].find({"ns": "dur.data", "o._id": "after"}).next()
            assert after["ts"] > before_ts

    def test_kill9_during_batch_keeps_data_and_oplog_consistent(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            coll = c.dur.data
            for b in range(20):
                coll.insert_many([{"_id": b * 50 + i} for i in range(50)])
            coll.with_options(write_concern=WriteConcern(j=True)).insert_one({"_id": "last"})
        srv.kill9()
        srv.start()
        with srv.client() as c:
            ids = {d["_id"] for d in c.dur.data.find({}, {"_id": 1})}
            logged = {e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "dur.data", "op": "i"})}
            assert "last" in ids
            assert ids == logged, "after a crash, data and oplog must describe the same writes"

    def test_unjournaled_writes_reach_disk_within_the_sync_interval(self, fresh_server):
        # `{w: 1}` writes are acknowledged from memory (RocksDB's WAL buffer); the
        # group-commit thread writes and fsyncs that buffer at most 100 ms after a
        # commit, as mongod's journal commit interval. A second is far beyond it.
        srv = fresh_server()
        with srv.client() as c:
            coll = c.dur.plain.with_options(write_concern=WriteConcern(w=1, j=False))
            for i in range(200):
                coll.insert_one({"_id": i})
            coll.update_one({"_id": 0}, {"$set": {"x": 1}})
            coll.delete_one({"_id": 1})
        time.sleep(1.0)
        srv.kill9()
        srv.start()
        with srv.client() as c:
            ids = sorted(d["_id"] for d in c.dur.plain.find({}, {"_id": 1}))
            assert ids == [0] + list(range(2, 200))
            assert c.dur.plain.find_one({"_id": 0}) == {"_id": 0, "x": 1}


class TestRestart:
    def test_clean_restart_keeps_collections_and_indexes(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.keep.users.create_index("email", unique=True)
            c.keep.users.create_index("at", expireAfterSeconds=3600)
            c.keep.users.insert_one({"email": "a@x"})
            c.keep.create_collection("capped", capped=True, size=4096, max=5)
        assert srv.stop() == 0, "SIGTERM should be a clean shutdown with exit code 0"
        srv.start()
        with srv.client() as c:
            assert sorted(c.keep.list_collection_names()) == ["capped", "users"]
            specs = {i["name"]: i for i in c.keep.users.list_indexes()}
            assert set(specs) == {"_id_", "email_1", "at_1"}
            assert specs["email_1"]["unique"] is True
            assert specs["at_1"]["expireAfterSeconds"] == 3600
            with pytest.raises(DuplicateKeyError):
                c.keep.users.insert_one({"email": "a@x"})
            opts = c.keep.capped.options()
            assert opts["capped"] is True and opts["max"] == 5
            assert "keep" in c.list_database_names()

    def test_collection_uuid_stable_across_restart(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.u.c.insert_one({})
            before = next(c.u.list_collections())["info"]["uuid"]
        srv.restart()
        with srv.client() as c:
            assert next(c.u.list_collections())["info"]["uuid"] == before

    def test_dropped_collection_stays_dropped(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.g.gone.insert_one({})
            c.g.kept.insert_one({})
            c.g.gone.drop()
        srv.kill9()
        srv.start()
        with srv.client() as c:
            assert c.g.list_collection_names() == ["kept"]


class TestLock:
    def test_second_server_on_same_dbpath_refuses(self, fresh_server):
        srv = fresh_server()
        other = TailstreamServer(srv.dbpath)
        proc = subprocess.run(other.argv(), capture_output=True, text=True, timeout=15)
        output = proc.stdout + proc.stderr + other.log_text()
        assert proc.returncode != 0, "second server on a locked dbpath must exit non-zero"
        assert "lock" in output.lower(), f"message should mention the lock file: {output[-2000:]}"
        # the first server is unaffected
        with srv.client() as c:
            assert c.admin.command("ping")["ok"] == 1

    def test_lock_released_after_clean_shutdown(self, fresh_server):
        srv = fresh_server()
        srv.stop()
        again = fresh_server(start=False, dbpath=srv.dbpath)
        again.start()
        with again.client() as c:
            assert c.admin.command("ping")["ok"] == 1

    def test_a_retried_write_after_a_crash_is_not_applied_again(self, fresh_server):
        # What a retryable write did is stored with it (mongod's config.transactions):
        # a driver that retries after the server was killed and restarted gets the
        # first attempt's outcome, not a second application.
        srv = fresh_server()
        lsid = {"id": Binary.from_uuid(uuid.uuid4())}
        inc = {"update": "c", "$db": "dur", "lsid": lsid, "txnNumber": Int64(7),
               "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}, "upsert": True}],
               "writeConcern": {"j": True}}
        fam = {"findAndModify": "c", "$db": "dur", "lsid": lsid, "txnNumber": Int64(8),
               "query": {"_id": 1}, "update": {"$inc": {"n": 10}}, "new": True,
               "writeConcern": {"j": True}}
        with wire.connect(srv.port) as sock:
            first = wire.command(sock, dict(inc))
            assert first["n"] == 1 and first["upserted"][0]["_id"] == 1, first
            first_fam = wire.command(sock, dict(fam))
            assert first_fam["value"] == {"_id": 1, "n": 11}, first_fam
        srv.kill9()
        srv.start()
        with wire.connect(srv.port) as sock:
            late = wire.command(sock, dict(inc))
            assert late["ok"] == 0 and late["codeName"] == "TransactionTooOld", late
            again = wire.command(sock, dict(fam))
            assert again["ok"] == 1 and again["value"] == first_fam["value"], again
            assert again["lastErrorObject"] == first_fam["lastErrorObject"], again
            assert again["retriedStmtIds"] == [0], again
        with srv.client() as c:
            assert c.dur.c.find_one({"_id": 1}) == {"_id": 1, "n": 11}

    def test_shutdown_command_stops_the_server_cleanly(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            # {w: 1}: acknowledged before the fsync; the shutdown must sync them.
            c.dur.kept.with_options(write_concern=WriteConcern(w=1)).insert_many(
                [{"_id": i} for i in range(100)])
            with pytest.raises(OperationFailure) as e:
                c.dur.command("shutdown")
            assert e.value.code == 13 and "admin database" in e.value.details["errmsg"]
            with pytest.raises(OperationFailure) as e:
                c.admin.command("shutdown", 1, force="yes")
            assert e.value.code == 14
            assert c.admin.command("ping")["ok"] == 1
            # As mongod: no reply, the connection closes as the process exits.
            with pytest.raises(ConnectionFailure):
                c.admin.command("shutdown", 1, timeoutSecs=5)
        assert srv.proc.wait(20) == 0, srv.log_tail()
        # A clean stop: the lock is free and every write is there.
        srv.start()
        with srv.client() as c:
            assert c.dur.kept.count_documents({}) == 100

    def test_waiting_for_connections_logged(self, fresh_server):
        srv = fresh_server()
        assert "Waiting for connections" in srv.log_text()


class TestTornWalTail:
    def test_a_torn_write_at_the_wals_end_is_dropped_and_reported(self, fresh_server):
        """Issue 32: after a kill -9, the newest WAL file is cut by a few bytes (the
        last record written in part, as a disk that took a write in part leaves it).
        The server starts, says in its log how many bytes recovery dropped and why, and
        keeps the writes before that record whole: documents and oplog describe the
        same writes, `validate` passes, and the documents that remain are the first
        ones inserted."""
        srv = fresh_server()
        n = 50
        with srv.client() as c:
            coll = c.dur.get_collection("torn", write_concern=WriteConcern(w=1, j=True))
            for i in range(n):
                coll.insert_one({"_id": i, "pad": "y" * 200})
        srv.kill9()
        store = srv.dbpath / "store"
        wals = sorted(store.glob("*.log"), key=lambda p: int(p.stem))
        assert wals, list(store.iterdir())
        newest = wals[-1]
        size = newest.stat().st_size
        assert size > 5, "the journaled inserts are in the newest WAL file"
        with open(newest, "r+b") as f:
            f.truncate(size - 5)
        srv.start()
        log = srv.log_text()
        reported = [line for line in log.splitlines() if "recovery drops its last" in line]
        assert reported, srv.log_tail()
        assert '"droppedBytes"' in reported[-1] and newest.name in reported[-1], reported[-1]
        with srv.client() as c:
            ids = sorted(d["_id"] for d in c.dur.torn.find({}, {"_id": 1}))
            # The cut record was the last journaled write (or a later one of the
            # server's own): every insert before it is there, none torn.
            assert ids == list(range(len(ids))) and len(ids) >= n - 1, ids
            logged = sorted(e["o"]["_id"] for e in c.local["oplog.rs"].find(
                {"ns": "dur.torn", "op": "i"}))
            assert logged == ids, "documents and oplog describe the same writes"
            assert c.dur.command("validate", "torn")["valid"] is True
            c.dur.torn.insert_one({"_id": "after"})
            assert c.dur.torn.count_documents({}) == len(ids) + 1

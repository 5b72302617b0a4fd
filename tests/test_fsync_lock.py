"""db.fsyncLock() / db.fsyncUnlock(): `fsync` with `lock: true` stops writes until
`fsyncUnlock` and keeps the data files unchanged meanwhile, so a copy of the data
directory is a consistent backup."""

import os
import shutil
import threading
import time

import pytest
from pymongo.errors import OperationFailure

from conftest import TailstreamServer


def start_write(coll, doc):
    done = threading.Event()
    out = {}

    def run():
        try:
            out["result"] = coll.insert_one(doc)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, out


def store_files(dbpath):
    """Size and modification time of every data file of the store (RocksDB's own
    diagnostic log, LOG, is text for people and may grow meanwhile)."""
    store = os.path.join(dbpath, "store")
    return {
        name: (st.st_size, st.st_mtime_ns)
        for name in os.listdir(store)
        if not name.startswith("LOG")
        for st in [os.stat(os.path.join(store, name))]
    }


def test_lock_blocks_writes_not_reads_until_unlock(fresh_server):
    srv = fresh_server()
    with srv.client() as c, srv.client() as writer:
        c.t.c.insert_one({"_id": 0})
        reply = c.admin.command("fsync", lock=True)
        assert reply["lockCount"] == 1
        assert reply["info"] == "now locked against writes, use db.fsyncUnlock() to unlock"
        done, out = start_write(writer.t.c, {"_id": 1})
        # Reads go on while the write waits.
        assert c.t.c.find_one({"_id": 0}) == {"_id": 0}
        assert not done.wait(0.5), "a write ran while fsync held the lock"
        report = c.admin.command({"currentOp": 1, "op": "insert", "ns": "t.c"})
        assert report["fsyncLock"] is True
        [waiting] = report["inprog"]
        assert waiting["waitingForLock"] is True and waiting["command"]["insert"] == "c"
        reply = c.admin.command("fsyncUnlock")
        assert reply["lockCount"] == 0 and reply["info"] == "fsyncUnlock completed"
        assert done.wait(10), "the write did not resume after fsyncUnlock"
        assert "error" not in out, out
        assert c.t.c.count_documents({}) == 2
        assert "fsyncLock" not in c.admin.command("currentOp")


def test_locks_nest(fresh_server):
    srv = fresh_server()
    with srv.client() as c:
        assert c.admin.command("fsync", lock=True)["lockCount"] == 1
        assert c.admin.command("fsync", lock=True)["lockCount"] == 2
        assert c.admin.command("fsyncUnlock")["lockCount"] == 1
        done, _ = start_write(c.t.c, {"x": 1})
        assert not done.wait(0.3), "a write ran while still locked once"
        assert c.admin.command("fsyncUnlock")["lockCount"] == 0
        assert done.wait(10)


def test_unlock_when_not_locked_and_admin_only(client, db):
    with pytest.raises(OperationFailure) as e:
        client.admin.command("fsyncUnlock")
    assert e.value.code == 20
    assert e.value.details["errmsg"] == "fsyncUnlock called when not locked"
    for cmd in [{"fsync": 1, "lock": True}, {"fsyncUnlock": 1}]:
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        assert e.value.code == 13
    # A plain fsync still just flushes.
    assert client.admin.command("fsync")["ok"] == 1


def test_copy_of_the_locked_data_directory_is_a_consistent_backup(fresh_server, tmp_path):
    srv = fresh_server()
    with srv.client() as c:
        c.t.c.create_index("v")
        # Each lock writes the memtables out as new level-0 files; at the fourth, RocksDB
        # wants a compaction, which must wait for the unlock instead of rewriting files
        # while they are being copied.
        for round in range(4):
            c.t.c.insert_many([{"_id": f"{round}-{i}", "v": "x" * 1000} for i in range(1250)])
            c.admin.command("fsync", lock=True)
            if round < 3:
                c.admin.command("fsyncUnlock")
        before = store_files(srv.dbpath)
        # Background work (TTL monitor, oplog trimming, RocksDB flushes and compactions)
        # would run within this time; the files must not change.
        time.sleep(1.5)
        assert store_files(srv.dbpath) == before
        backup = tmp_path / "backup"
        shutil.copytree(srv.dbpath, backup, ignore=shutil.ignore_patterns("mongod.lock", "*.lock"))
        c.admin.command("fsyncUnlock")
        c.t.c.insert_one({"_id": "after"})
    copy = TailstreamServer(backup)
    copy.start()
    try:
        with copy.client() as c:
            assert c.t.c.count_documents({}) == 5000
            assert c.t.c.find_one({"_id": "after"}) is None
            assert "v_1" in c.t.c.index_information()
            assert c.t.c.find_one({"v": "x" * 1000}, hint="v_1")["_id"] is not None
    finally:
        copy.stop()
        copy.remove_socket_file()


def test_shutdown_while_locked(fresh_server):
    srv = fresh_server()
    with srv.client() as c:
        c.t.c.insert_one({"_id": 1})
        c.admin.command("fsync", lock=True)
    assert srv.stop(timeout=20) == 0
    srv.start()
    with srv.client() as c:
        assert c.t.c.find_one({"_id": 1}) == {"_id": 1}
        # The lock does not outlive the process.
        c.t.c.insert_one({"_id": 2})


def test_waiting_write_ends_on_kill_op_or_max_time_ms(fresh_server):
    srv = fresh_server()
    with srv.client() as c, srv.client() as writer:
        c.admin.command("fsync", lock=True)
        try:
            done, out = start_write(writer.t.c, {"_id": "killed"})
            deadline = time.monotonic() + 10
            waiting = []
            while not waiting and time.monotonic() < deadline:
                waiting = c.admin.command({"currentOp": 1, "op": "insert", "waitingForLock": True})["inprog"]
            assert waiting, "the insert never showed as waiting"
            c.admin.command("killOp", op=waiting[0]["opid"])
            assert done.wait(10), "killOp did not end the wait"
            assert getattr(out.get("error"), "code", None) == 11601, out
            # maxTimeMS bounds the wait as well.
            with pytest.raises(OperationFailure) as e:
                writer.t.command("insert", "c", documents=[{"_id": "timed"}], maxTimeMS=200)
            assert e.value.code == 50
        finally:
            c.admin.command("fsyncUnlock")
        assert c.t.c.count_documents({}) == 0

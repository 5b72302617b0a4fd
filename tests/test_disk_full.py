"""Running out of disk space. Below the free-space floor (`minFreeDiskSpaceMB`),
commands that add data fail with mongod's OutOfDiskSpace (14031) while reads, deletes
and drops go on, and writes resume by themselves once space is freed. Without the
floor, a disk that fills up makes the store refuse writes (14031 again): the server
stays up, answers reads, loses nothing acknowledged as durable, and writes again once
space is freed and it is restarted.

The data directory is a small tmpfs of its own, filled up by a file beside the data.
"""

import os
import subprocess
import time

import pytest
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.write_concern import WriteConcern

import crash_campaign

OUT_OF_DISK_SPACE = 14031


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "db"
    mount_point.mkdir()
    # 256 MiB: RocksDB needs one memtable's worth (64 MiB) free to flush after a restart.
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_up(directory, leave_bytes):
    """A file in `directory` that leaves about `leave_bytes` free on its filesystem."""
    path = directory / "filler"
    crash_campaign.fill_up(path, leave_bytes)
    return path


def refused_within(write, seconds=5.0):
    """The OperationFailure `write` raises once the server notices (it asks the
    filesystem for its free space at most every 100 ms), or None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            write()
        except OperationFailure as e:
            return e
        time.sleep(0.05)
    return None


def test_writes_stop_at_the_floor_and_resume_when_space_is_freed(fresh_server, small_disk):
    srv = fresh_server(oplog_size_mb=1, dbpath=small_disk,
                       extra_args=["--setParameter", "minFreeDiskSpaceMB=64"])
    with srv.client() as c:
        coll = c.dbfloor.c
        coll.insert_many([{"_id": i, "v": i} for i in range(10)])
        filler = fill_up(small_disk, leave_bytes=32 << 20)

        # Inserts into another collection until the server notices.
        refused = refused_within(lambda: c.dbfloor.probe.insert_one({"v": "new"}))
        assert refused is not None, "an insert went through with 32 MB free under a 64 MB floor"
        assert refused.code == OUT_OF_DISK_SPACE
        assert refused.details["codeName"] == "OutOfDiskSpace"
        assert "minFreeDiskSpaceMB" in refused.details["errmsg"]
        # Every command that adds data is refused; reads, deletes and drops run.
        for add in (
            lambda: coll.update_one({"_id": 1}, {"$set": {"v": "x" * 100}}),
            lambda: coll.create_index("v"),
            lambda: c.dbfloor.create_collection("other"),
        ):
            with pytest.raises(OperationFailure) as e:
                add()
            assert e.value.code == OUT_OF_DISK_SPACE
        assert coll.count_documents({}) == 10
        assert coll.delete_one({"_id": 9}).deleted_count == 1
        c.dbfloor.drop_collection("gone")

        # Space freed: writes resume, no restart.
        os.remove(filler)
        deadline = time.monotonic() + 5
        while True:
            try:
                coll.insert_one({"_id": "after"})
                break
            except OperationFailure:
                assert time.monotonic() < deadline, "writes did not resume"
                time.sleep(0.05)
        assert coll.count_documents({}) == 10

        # The floor is a run-time parameter; 0 turns it off.
        assert c.admin.command("getParameter", 1, minFreeDiskSpaceMB=1)["minFreeDiskSpaceMB"] == 64
        c.admin.command("setParameter", 1, minFreeDiskSpaceMB=1 << 30)
        assert refused_within(lambda: c.dbfloor.probe.insert_one({})).code == OUT_OF_DISK_SPACE
        c.admin.command("setParameter", 1, minFreeDiskSpaceMB=0)
        coll.insert_one({"_id": "floor off"})
    assert "No space left" not in srv.log_text(), "the store itself ran out of space"


def test_full_disk_refuses_writes_and_keeps_what_was_durable(fresh_server, small_disk):
    # Without the floor, the disk really fills up under the store.
    srv = fresh_server(oplog_size_mb=1, dbpath=small_disk,
                       extra_args=["--setParameter", "minFreeDiskSpaceMB=0"])
    with srv.client() as c:
        durable = c.dbfull.c.with_options(write_concern=WriteConcern(w=1, j=True))
        durable.insert_many([{"_id": i, "small": True} for i in range(100)])
        filler = fill_up(small_disk, leave_bytes=4 << 20)

        # Journaled inserts of 100 KB until the disk is full: every one before the
        # failing one was acknowledged as durable.
        failure = None
        acknowledged = []
        for i in range(100, 1100):
            try:
                durable.insert_one({"_id": i, "pad": "x" * 100_000})
            except (OperationFailure, WriteConcernError) as e:
                failure = e
                break
            acknowledged.append(i)
        assert failure is not None, "4 MiB of free space took 100 MB of inserts"
        assert failure.code == OUT_OF_DISK_SPACE, failure.details
        assert failure.details["codeName"] == "OutOfDiskSpace"

        # The server is still up: it answers reads, and refuses further writes with
        # the same error (a clear one, not InternalError).
        assert c.admin.command("ping")["ok"] == 1
        assert c.dbfull.c.count_documents({"small": True}) == 100
        with pytest.raises(OperationFailure) as refused:
            c.dbfull.c.insert_one({"_id": "refused"})
        assert refused.value.code == OUT_OF_DISK_SPACE
        assert "free disk space" in refused.value.details["errmsg"]
        assert srv.proc.poll() is None, "the server died"

    os.remove(filler)
    assert srv.stop() == 0, srv.log_tail()
    srv.start()
    with srv.client() as c:
        ids = {d["_id"] for d in c.dbfull.c.find({}, {"_id": 1})}
        assert set(range(100)) | set(acknowledged) <= ids, "a durable write was lost"
        assert "refused" not in ids
        # The oplog (1 MB, so trimmed to the newest inserts) agrees with the data: each
        # insert and its entry were one atomic batch.
        logged = {e["o"]["_id"] for e in c.local["oplog.rs"].find({"ns": "dbfull.c", "op": "i"})}
        assert logged <= ids
        assert acknowledged[-1] in logged
        # Writes go on.
        c.dbfull.c.with_options(write_concern=WriteConcern(w=1, j=True)).insert_one({"_id": "after"})
        assert c.dbfull.c.find_one({"_id": "after"}) == {"_id": "after"}

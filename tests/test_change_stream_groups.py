"""Consumer groups of parallel change streams (issue 28): `parallelChangeStream` with
`group` and `consumer` hands a consumer its share of the buckets under a lease renewed
by its getMores; `commitChangeStreamGroup` stores a bucket's position durably (in the
consumer's transaction when it runs one); a consumer whose bucket moved on is fenced.

Every group here reads only its test's database (`nsRegex`); the server is shared."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bson import Timestamp
from bson.regex import Regex
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from conftest import eventually

FENCED = 28400
HERE = Path(__file__).parent


def join(client, session, db, group, consumer, **opts):
    opts.setdefault("nBuckets", 4)
    opts.setdefault("by", "documentKey")
    opts.setdefault("nsRegex", Regex("^" + re.escape(db.name) + r"\."))
    return client.admin.command("parallelChangeStream", 1, group=group, consumer=consumer,
                                session=session, **opts)


def get_more(client, session, cursor):
    return client.admin.command("getMore", cursor, collection="$cmd.aggregate",
                                maxTimeMS=50, session=session)["cursor"]


def drain(client, session, reply, want, timeout=15.0):
    """Reads the joined buckets until `want` events in all: {bucket: (events, token)}."""
    got = {b: ([], None) for b in reply["buckets"]}

    def enough():
        for b, c in zip(reply["buckets"], reply["cursors"]):
            r = get_more(client, session, c)
            got[b] = (got[b][0] + r["nextBatch"], r["postBatchResumeToken"])
        return sum(len(e) for e, _ in got.values()) >= want
    assert eventually(enough, timeout=timeout), {b: len(e) for b, (e, _) in got.items()}
    return got


def commit(client, group, consumer, bucket, token, session=None, db=None):
    target = db if db is not None else client.admin
    return target.command("commitChangeStreamGroup", group, consumer=consumer,
                          bucket=bucket, resumeToken=token, session=session)


def start_time(client):
    return client.admin.command("ping")["operationTime"]


def test_the_first_consumer_gets_every_bucket_and_commits_positions(client, db):
    with client.start_session() as s:
        r = join(client, s, db, "g1", "a", startAtOperationTime=start_time(client))
        assert r["buckets"] == [0, 1, 2, 3] and len(set(r["cursors"])) == 4
        assert (r["group"], r["consumer"], r["nBuckets"]) == ("g1", "a", 4)
        assert r["leaseMS"] == 10_000 and r["ns"] == "admin.$cmd.aggregate"
        db.src.insert_many([{"_id": i} for i in range(40)])
        got = drain(client, s, r, 40)
        ids = sorted(e["documentKey"]["_id"] for es, _ in got.values() for e in es)
        assert ids == list(range(40))
        for b, (events, token) in got.items():
            assert commit(client, "g1", "a", b, token)["ok"] == 1
        state = {d["_id"]["bucket"]: d for d in
                 client.config.changeStreamGroups.find({"_id.group": "g1"})}
        assert sorted(state) == [0, 1, 2, 3]
        assert all(d["epoch"] == 1 and d["consumer"] == "a" for d in state.values())
        assert all(d["resumeToken"] == got[b][1] for b, d in state.items())
        definition = client.config.changeStreamGroups.find_one({"_id": "g1"})
        assert definition["nBuckets"] == 4 and definition["by"] == "documentKey"
        # The group's own writes are not events of anyone's stream (config is not streamed).
        assert all(get_more(client, s, c)["nextBatch"] == [] for c in r["cursors"])


def test_a_second_consumer_takes_half_and_the_first_is_fenced_on_those(client, db):
    a, b = client.start_session(), client.start_session()
    ra = join(client, a, db, "g2", "a")
    assert ra["buckets"] == [0, 1, 2, 3]
    rb = join(client, b, db, "g2", "b")
    assert len(rb["buckets"]) == 2
    lost = set(rb["buckets"])
    rejoin = False
    for bucket, cursor in zip(ra["buckets"], ra["cursors"]):
        if bucket in lost:
            with pytest.raises(OperationFailure) as e:
                get_more(client, a, cursor)
            assert e.value.code == FENCED
            assert e.value.details["codeName"] == "ChangeStreamConsumerFenced"
            assert "join the group again" in str(e.value)
        else:
            rejoin |= get_more(client, a, cursor)["rejoin"]
    assert rejoin, "a's remaining buckets tell it the group changed"
    again = join(client, a, db, "g2", "a")
    kept = {bk: c for bk, c in zip(ra["buckets"], ra["cursors"]) if bk not in lost}
    assert dict(zip(again["buckets"], again["cursors"])) == kept, "a keeps its cursors"
    assert all(not get_more(client, a, c)["rejoin"] for c in again["cursors"])
    # A fenced commit fails the same way; the holder's succeeds.
    token = get_more(client, b, rb["cursors"][0])["postBatchResumeToken"]
    with pytest.raises(OperationFailure) as e:
        commit(client, "g2", "a", rb["buckets"][0], token)
    assert e.value.code == FENCED
    commit(client, "g2", "b", rb["buckets"][0], token)
    a.end_session()
    b.end_session()


def test_a_dead_consumers_buckets_pass_on_from_its_committed_positions(client, db):
    a, b = client.start_session(), client.start_session()
    t0 = start_time(client)
    ra = join(client, a, db, "g3", "a", leaseMS=400, startAtOperationTime=t0)
    db.src.insert_many([{"_id": i} for i in range(20)])
    got = drain(client, a, ra, 20)
    for bucket, (_, token) in got.items():
        commit(client, "g3", "a", bucket, token)
    rb = join(client, b, db, "g3", "b", leaseMS=400, startAtOperationTime=t0)
    assert rb["buckets"] == [2, 3]
    db.src.insert_many([{"_id": i} for i in range(20, 40)])
    # a reads its two buckets' new events and dies before committing them.
    mine = [c for bk, c in zip(ra["buckets"], ra["cursors"]) if bk in (0, 1)]
    taken = sum(len(get_more(client, a, c)["nextBatch"]) for c in mine)
    # b's getMores keep its own lease and soon tell it to join again.
    seen = []

    def told():
        replies = [get_more(client, b, c) for c in rb["cursors"]]
        seen.extend(e["documentKey"]["_id"] for r in replies for e in r["nextBatch"])
        return any(r["rejoin"] for r in replies)
    assert eventually(told, timeout=5)
    rb2 = join(client, b, db, "g3", "b", leaseMS=400, startAtOperationTime=t0)
    assert rb2["buckets"] == [0, 1, 2, 3]
    assert dict(zip(rb2["buckets"], rb2["cursors"]))[2] == rb["cursors"][0], "kept"
    # a's buckets resume after what a committed: what it took uncommitted comes again.
    got = drain(client, b, rb2, 20 - len(seen))
    seen += [e["documentKey"]["_id"] for es, _ in got.values() for e in es]
    assert sorted(seen) == list(range(20, 40)), "each event after the commits, once"
    assert taken > 0
    states = client.config.changeStreamGroups.find({"_id.group": "g3", "epoch": 2})
    assert len(list(states)) == 4, "every bucket handed over twice"
    a.end_session()
    b.end_session()


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_a_transactional_commit_of_a_fenced_consumer_writes_nothing(client, db):
    """Exactly once: the consumer's output and its commit in one transaction; the
    bucket handed on inside the transaction makes its commit fail whole."""
    a, b, t = client.start_session(), client.start_session(), client.start_session()
    # By namespace over 2 buckets, a collection in bucket 1 (the one a second consumer takes).
    name = next(f"src{i}" for i in range(100)
                if fnv1a(f"{db.name}.src{i}".encode()) % 2 == 1)
    ra = join(client, a, db, "g4", "a", nBuckets=2, by="ns",
              startAtOperationTime=start_time(client))
    assert ra["buckets"] == [0, 1]
    cursor = ra["cursors"][1]
    db[name].insert_many([{"_id": i} for i in range(5)])
    got = drain(client, a, ra, 5)
    events, token = got[1]
    with t.start_transaction():
        db.out.insert_many([{"src": e["documentKey"]["_id"]} for e in events], session=t)
        commit(client, "g4", "a", 1, token, session=t, db=db)
    assert db.out.count_documents({}) == 5
    db[name].insert_many([{"_id": i} for i in range(5, 8)])
    r = get_more(client, a, cursor)
    assert len(r["nextBatch"]) == 3
    t.start_transaction()
    db.out.insert_many([{"src": e["documentKey"]["_id"]} for e in r["nextBatch"]], session=t)
    commit(client, "g4", "a", 1, r["postBatchResumeToken"], session=t, db=db)
    # Meanwhile a second consumer joins and takes bucket 1.
    rb = join(client, b, db, "g4", "b", nBuckets=2, by="ns")
    assert rb["buckets"] == [1]
    with pytest.raises(OperationFailure) as e:
        t.commit_transaction()
    assert e.value.code == 112, e.value.details  # WriteConflict: the bucket moved on
    assert db.out.count_documents({}) == 5, "none of the fenced transaction's writes"
    # b starts after what a committed: the three newer events, once.
    r = get_more(client, b, rb["cursors"][0])
    assert [e["documentKey"]["_id"] for e in r["nextBatch"]] == [5, 6, 7]
    with pytest.raises(OperationFailure) as e:
        get_more(client, a, cursor)
    assert e.value.code == FENCED
    for s in (a, b, t):
        s.end_session()


def test_bad_requests_get_clear_errors(client, db):
    with client.start_session() as s:
        def code(**kw):
            with pytest.raises(OperationFailure) as e:
                client.admin.command("parallelChangeStream", 1, session=s, **kw)
            return e.value.code
        assert code(group="g5", consumer="a") == 40414  # nBuckets, to create it
        assert code(group="g5") == 40414  # consumer
        assert code(group="g5", consumer="a", nBuckets=4, leaseMS=5) == 2
        assert code(group="", consumer="a", nBuckets=4) == 2
        assert code(group="g5", consumer="a", nBuckets=4, resumeAfter={"_data": "00"}) == 72
        join(client, s, db, "g5", "a", nBuckets=4)
        assert code(group="g5", consumer="b", nBuckets=8) == 72
        assert code(group="g5", consumer="b", by="ns") == 72
        with pytest.raises(OperationFailure) as e:
            commit(client, "g5", "a", 9, {"_data": "8200000001000000012B0229296E04"})
        assert e.value.code == 2
        with pytest.raises(OperationFailure) as e:
            commit(client, "nosuch", "a", 0, {"_data": "8200000001000000012B0229296E04"})
        assert e.value.code == FENCED
        with pytest.raises(OperationFailure) as e:
            commit(client, "g5", "a", 0, {"nope": 1})
        assert e.value.code == 260  # InvalidResumeToken
        with pytest.raises(OperationFailure) as e:
            client.admin.command("commitChangeStreamGroup", "g5", consumer="a")
        assert e.value.code == 40414


def start_consumer(server, db, name, mode, t0, lease_ms=1000):
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"{db.name}-{name}.log", "w")
    return subprocess.Popen(
        [sys.executable, str(HERE / "group_consumer.py"), server.uri(), f"grp-{mode}", name,
         db.name, mode, str(lease_ms), str(t0.time), str(t0.inc)],
        stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("mode", ["plain", "txn"])
def test_four_consumers_two_killed_lose_nothing(server, client, db, mode):
    """4 consumer processes share 4 buckets; 2 are killed -9 while events flow; the
    other 2 take their buckets over from the committed positions. Nothing is lost;
    with transactional commits every event's effect is there exactly once."""
    total = 3000
    db.create_collection("out")
    t0 = start_time(client)
    procs = [start_consumer(server, db, f"c{i}", mode, t0) for i in range(4)]
    group = client.config.changeStreamGroups
    try:
        # Every consumer holds a bucket (each was handed one) before events flow.
        assert eventually(
            lambda: len(group.distinct("consumer", {"_id.group": f"grp-{mode}"})) == 4,
            timeout=30), list(group.find({"_id.group": f"grp-{mode}"}))
        for i in range(0, total, 100):
            db.src.insert_many([{"_id": j} for j in range(i, i + 100)])
            if i == 1000:
                assert eventually(lambda: db.out.count_documents({}) > 500, timeout=30)
                for p in procs[:2]:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
        assert eventually(lambda: len(db.out.distinct("src")) == total, timeout=60), \
            len(db.out.distinct("src"))
        time.sleep(0.5)  # anything still in flight lands
        assert all(p.poll() is None for p in procs[2:]), "the survivors keep running"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    seen = {}
    for d in db.out.find({}, {"src": 1, "consumer": 1}):
        seen.setdefault(d["src"], []).append(d["consumer"])
    assert sorted(seen) == list(range(total)), "no event lost"
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    if mode == "txn":
        assert twice == {}, f"{len(twice)} events applied twice: {list(twice.items())[:5]}"
    # At least once (plain): the batches a consumer handled but could not commit (it
    # was killed, or its bucket moved on) come again to the next holder.
    survivors = {c for d in db.out.find({"src": {"$gte": total - 200}}) for c in [d["consumer"]]}
    assert survivors <= {"c2", "c3"}, survivors
    buckets = list(group.find({"_id.group": f"grp-{mode}"}))
    assert len(buckets) == 4
    assert {d["consumer"] for d in buckets} <= {"c2", "c3"}, "the survivors hold them all"
    assert client.config.changeStreamGroups.find_one({"_id": f"grp-{mode}"})["nBuckets"] == 4


def test_committed_positions_survive_kill_9_and_consumers_join_again(fresh_server):
    """The group's definition and committed positions are durable: after kill -9 and a
    restart (the leases are gone), a consumer joins again and each bucket resumes after
    its committed position: nothing committed is delivered again, nothing after it lost."""
    srv = fresh_server()
    client = srv.client()
    db = client.t_groups_restart
    s = client.start_session()
    r = join(client, s, db, "gr", "a", startAtOperationTime=start_time(client))
    db.src.insert_many([{"_id": i} for i in range(30)])
    got = drain(client, s, r, 30)
    for b, (_, token) in got.items():
        client.admin.command("commitChangeStreamGroup", "gr", consumer="a", bucket=b,
                             resumeToken=token, writeConcern={"j": True})
    journaled = db.src.with_options(write_concern=WriteConcern(j=True))
    journaled.insert_many([{"_id": i} for i in range(30, 50)])
    client.close()
    srv.kill9()
    srv.remove_socket_file()
    srv.start()
    client = srv.client()
    db = client.t_groups_restart
    s = client.start_session()
    # The same consumer name after the restart: a new member of the group.
    r = join(client, s, db, "gr", "a")
    assert r["buckets"] == [0, 1, 2, 3]
    got = drain(client, s, r, 20)
    ids = sorted(e["documentKey"]["_id"] for es, _ in got.values() for e in es)
    assert ids == list(range(30, 50))
    epochs = [d["epoch"] for d in client.config.changeStreamGroups.find({"_id.group": "gr"})]
    assert epochs == [2, 2, 2, 2], "handed out again after the restart"
    client.close()


def test_a_join_is_a_write_a_plain_split_is_not(fresh_server):
    """Joining a group writes the group's state, so it passes the gates every write
    passes: below the free-space floor it is refused with OutOfDiskSpace (14031), as an
    insert is, while a parallel change stream without a group (a read) still opens."""
    srv = fresh_server()
    with srv.client() as c:
        db = c.floor_groups
        db.c.insert_one({"_id": 1})
        c.admin.command("setParameter", 1, minFreeDiskSpaceMB=1 << 30)
        with pytest.raises(OperationFailure) as refused:
            join(c, None, db, "g", "c1")
        assert refused.value.code == 14031, refused.value.details
        with pytest.raises(OperationFailure) as insert_refused:
            db.c.insert_one({"_id": 2})
        assert insert_refused.value.code == 14031
        split = c.admin.command("parallelChangeStream", 1, nBuckets=2, by="documentKey",
                                nsRegex=Regex("^floor_groups\\."))
        assert len(split["cursors"]) == 2, split
        c.admin.command("setParameter", 1, minFreeDiskSpaceMB=256)
        joined = join(c, None, db, "g", "c1")
        assert sorted(joined["buckets"]) == [0, 1, 2, 3], joined

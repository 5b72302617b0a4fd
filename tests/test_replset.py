"""Replica sets of several members (issue 27): three server processes started with
`--replSet rs0`, initiated with `replSetInitiate` as mongod's are, an unchanged pymongo
pointed at the set: it finds the primary, writes go through the set to every member,
a member that is not primary refuses writes with 10107, after `kill -9` of the
primary the driver writes to the new one and nothing acknowledged is lost, and the
killed member restarts, rejoins and catches up."""

import base64
import contextlib
import os
import signal
import time
import uuid

import pytest
from bson import Binary, Int64, Timestamp
from pymongo import CursorType, MongoClient, WriteConcern
from pymongo.errors import AutoReconnect, DuplicateKeyError, NotPrimaryError, OperationFailure

import stopped
import wire
from conftest import eventually

# Elections within about a second (mongod's settings.electionTimeoutMillis, 10 s by
# default): a failing run is bounded, nothing is timed.
ELECTION_MS = 1000
SET_WAIT_S = 60


@pytest.fixture
def three(fresh_server):
    members = [
        fresh_server(extra_args=["--setParameter", f"replElectionTimeoutMillis={ELECTION_MS}"])
        for _ in range(3)
    ]
    return members


def host(m):
    return f"127.0.0.1:{m.port}"


def hello(m):
    with m.client(directConnection=True, serverSelectionTimeoutMS=2000) as c:
        return c.admin.command("hello")


def primary_of(members):
    for m in members:
        if m.is_running():
            try:
                if hello(m).get("isWritablePrimary"):
                    return m
            except Exception:  # noqa: BLE001 (a member being killed)
                pass
    return None


def initiate(members):
    config = {"_id": "rs0", "members": [{"_id": i, "host": host(m)} for i, m in enumerate(members)]}
    with members[0].client(directConnection=True) as c:
        assert c.admin.command("replSetInitiate", config)["ok"] == 1
    assert eventually(lambda: primary_of(members) is not None, timeout=SET_WAIT_S)


def count_on(m, **query):
    """The member's count; None while it installs a snapshot (it answers reads with
    13436 NotPrimaryOrSecondary then, as mongod's member in initial sync)."""
    with m.client(directConnection=True, serverSelectionTimeoutMS=5000) as c:
        try:
            return c.rs.items.count_documents(query)
        except NotPrimaryError as e:
            # NotPrimaryError has no `code`: the reply's is in its details.
            if (e.details or {}).get("code") != 13436:
                raise
            return None


def test_three_members_elect_replicate_and_fail_over(three):
    members = three
    # What the initiating member held before reaches the others (its snapshot).
    with members[0].client(directConnection=True) as c:
        c.rs.items.insert_many([{"_id": f"before{i}", "n": -1} for i in range(5)])
    initiate(members)

    primary = primary_of(members)
    h = hello(primary)
    assert h["setName"] == "rs0" and h["isWritablePrimary"] is True
    assert sorted(h["hosts"]) == sorted(host(m) for m in members)
    assert h["primary"] == host(primary) and h["me"] == host(primary)
    assert h["electionId"].binary[:4] == b"\x7f\xff\xff\xff"
    for m in members:
        if m is not primary:
            # A member learns that it votes, and who leads, once it has applied the
            # set's last configuration (a majority had when replSetInitiate returned).
            def secondary_of_primary(m=m):
                s = hello(m)
                return (s.get("secondary") is True and s["isWritablePrimary"] is False
                        and s.get("primary") == host(primary) and s["me"] == host(m))
            assert eventually(secondary_of_primary, timeout=SET_WAIT_S), f"member {m.port}"

    # rs.status() and rs.conf() describe the set.
    with primary.client(directConnection=True) as c:
        status = c.admin.command("replSetGetStatus")
        assert status["set"] == "rs0" and status["myState"] == 1
        states = sorted((m["name"], m["stateStr"]) for m in status["members"])
        assert states == sorted((host(m), "PRIMARY" if m is primary else "SECONDARY")
                                for m in members)
        assert [m["name"] for m in status["members"] if m.get("self")] == [host(primary)]
        config = c.admin.command("replSetGetConfig")["config"]
        assert config["_id"] == "rs0"
        assert sorted(m["host"] for m in config["members"]) == sorted(host(m) for m in members)
        assert all(m["votes"] == 1 for m in config["members"])
        assert config["settings"]["electionTimeoutMillis"] == ELECTION_MS
    secondary = next(m for m in members if m is not primary)
    with secondary.client(directConnection=True) as c:
        assert c.admin.command("replSetGetStatus")["myState"] == 2

    uri = "mongodb://" + ",".join(host(m) for m in members) + "/?replicaSet=rs0"
    with MongoClient(uri, serverSelectionTimeoutMS=30_000) as client:
        items = client.rs.items
        items.insert_many([{"_id": i, "n": i} for i in range(100)])
        items.update_many({"n": {"$lt": 10}}, {"$set": {"low": True}})
        items.create_index("n")
        for m in members:
            assert eventually(lambda m=m: count_on(m) == 105, timeout=SET_WAIT_S), f"member {m.port}"
            assert count_on(m, low=True) == 15  # the 5 from before have n: -1

        # A secondary answers a read only with a secondary read preference (13435
        # NotPrimaryNoSecondaryOk otherwise); pymongo's direct connections send
        # primaryPreferred, so only a raw command shows it.
        secondary = next(m for m in members if m is not primary)
        with wire.connect(secondary.port) as sock:
            refused = wire.command(sock, {"count": "items", "$db": "rs"})
            assert refused["ok"] == 0 and refused["code"] == 13435
            assert refused["codeName"] == "NotPrimaryNoSecondaryOk"
            allowed = wire.command(sock, {"count": "items", "$db": "rs",
                                          "$readPreference": {"mode": "secondaryPreferred"}})
            assert allowed["ok"] == 1 and allowed["n"] == 105
            assert wire.command(sock, {"ping": 1, "$db": "admin"})["ok"] == 1
        with wire.connect(primary.port) as sock:
            assert wire.command(sock, {"count": "items", "$db": "rs"})["n"] == 105

        # A member that is not primary refuses writes, as mongod's secondaries do.
        with secondary.client(directConnection=True) as direct:
            # pymongo raises its NotPrimaryError for mongod's 10107 (and marks the
            # server unknown, as it must).
            with pytest.raises(NotPrimaryError) as refused:
                direct.rs.items.insert_one({"_id": "nope"})
            assert refused.value.details["code"] == 10107
            assert refused.value.details["codeName"] == "NotWritablePrimary"
        assert all(count_on(m, _id="nope") == 0 for m in members)

        # kill -9 of the primary: the driver finds the new one and writes there.
        primary.kill9()
        survivors = [m for m in members if m is not primary]
        for i in range(100, 120):
            items.insert_one({"_id": i, "n": i})
        new_primary = primary_of(survivors)
        assert new_primary is not None
        assert hello(new_primary)["electionId"] != h["electionId"]
        for m in survivors:
            assert eventually(lambda m=m: count_on(m) == 125, timeout=SET_WAIT_S), f"member {m.port}"

        # The killed member restarts, rejoins as a secondary and catches up.
        primary.remove_socket_file()
        primary.restart()
        assert eventually(lambda: count_on(primary) == 125, timeout=SET_WAIT_S)
        assert eventually(lambda: hello(primary).get("secondary") is True, timeout=SET_WAIT_S)
        assert hello(primary)["primary"] == host(new_primary)
        items.insert_one({"_id": "after the restart"})
        assert eventually(lambda: count_on(primary, _id="after the restart") == 1,
                          timeout=SET_WAIT_S)


def test_a_write_retried_on_the_new_primary_is_not_applied_twice(three):
    # A driver whose write committed on a primary that died before answering retries
    # it on the next primary. What the write did travels with it (mongod's
    # config.transactions), so the new primary answers the retry without applying it
    # again, and a findAndModify's retry gets the first attempt's document.
    members = three
    initiate(members)
    primary = primary_of(members)
    lsid = {"id": Binary.from_uuid(uuid.uuid4())}
    other = {"id": Binary.from_uuid(uuid.uuid4())}
    majority = {"w": "majority"}
    commands = [
        {"update": "items", "$db": "rs", "lsid": lsid, "txnNumber": Int64(1),
         "updates": [{"q": {"_id": "counter"}, "u": {"$inc": {"n": 1}}, "upsert": True}],
         "writeConcern": majority},
        {"insert": "items", "$db": "rs", "lsid": other, "txnNumber": Int64(2),
         "documents": [{"_id": "a"}, {"_id": "b"}], "writeConcern": majority},
        {"findAndModify": "items", "$db": "rs", "lsid": lsid, "txnNumber": Int64(3),
         "query": {"_id": "counter"}, "update": {"$inc": {"n": 10}}, "new": True,
         "writeConcern": majority},
    ]
    with wire.connect(primary.port) as sock:
        firsts = [wire.command(sock, dict(c)) for c in commands]
    assert [r["ok"] for r in firsts] == [1, 1, 1], firsts
    assert firsts[2]["value"] == {"_id": "counter", "n": 11}, firsts
    primary.kill9()
    survivors = [m for m in members if m is not primary]
    assert eventually(lambda: primary_of(survivors) is not None, timeout=SET_WAIT_S)
    new = primary_of(survivors)
    with wire.connect(new.port) as sock:
        late = wire.command(sock, dict(commands[0]))
        assert late["ok"] == 0 and late["codeName"] == "TransactionTooOld", late
        # The newest write of the session, retried (drivers retry only that one).
        again = wire.command(sock, dict(commands[2]))
        assert again["ok"] == 1 and again["value"] == firsts[2]["value"], again
        assert again["retriedStmtIds"] == [0], again
        # Another session's insert: both documents ran, neither is a duplicate now.
        retried = wire.command(sock, dict(commands[1]))
        assert retried["ok"] == 1 and retried["n"] == 2, retried
        assert "writeErrors" not in retried and retried["retriedStmtIds"] == [0, 1], retried
        # The session goes on with its next write on the new primary.
        nxt = wire.command(sock, dict(commands[0], txnNumber=Int64(4)))
        assert nxt["ok"] == 1 and nxt["n"] == 1, nxt
    with new.client(directConnection=True) as c:
        assert c.rs.items.find_one({"_id": "counter"}) == {"_id": "counter", "n": 12}
        assert c.rs.items.count_documents({}) == 3


def test_a_write_no_majority_can_commit_ends_at_its_max_time(three):
    # With both secondaries stopped nothing commits. A write no longer waits forever
    # (holding every other write back): it ends at its maxTimeMS (50), its fate unknown
    # as on mongod; the primary takes no write until that entry is applied, then goes
    # on, and the entry is on every member or on none.
    members = three
    initiate(members)
    primary = primary_of(members)
    with secondaries_stopped(members, primary), wire.connect(primary.port) as sock:
        expired = wire.command(sock, {
            "insert": "items", "documents": [{"_id": "late"}], "$db": "rs",
            "writeConcern": {"w": "majority"}, "maxTimeMS": 500})
        assert expired["ok"] == 0 and expired["code"] == 50, expired
        held = wire.command(sock, {"insert": "items", "documents": [{"_id": "held"}],
                                   "$db": "rs", "maxTimeMS": 500})
        assert held["ok"] == 0 and held["code"] == 10107, held
        assert hello(primary)["isWritablePrimary"] is False
    # A primary takes writes again; the first write's entry committed or was dropped
    # (a resumed secondary may win an election without it), the same on every member.
    with writes_resumed(members) as items:
        late = items.count_documents({"_id": "late"})
    for m in members:
        assert eventually(lambda m=m: count_on(m) == 1 + late, timeout=SET_WAIT_S), m.port
        assert count_on(m, _id="late") == late


@contextlib.contextmanager
def secondaries_stopped(members, primary):
    """Every member but `primary` stopped (SIGSTOP, every thread of it stopped before the
    block starts) for the block, resumed after it."""
    secondaries = [m for m in members if m is not primary]
    for m in secondaries:
        stopped.stop(m.proc)
    try:
        yield
    finally:
        for m in secondaries:
            m.proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def writes_resumed(members):
    """The set's `rs.items` through a client, once a write {_id: "after"} went through
    (resumed members may hold an election first; the driver retries only once)."""
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client:
        items = client.rs.items
        assert eventually(lambda: insert_through_elections(items, {"_id": "after"}),
                          timeout=SET_WAIT_S)
        yield items


def insert_through_elections(coll, doc):
    """Inserts `doc`: True once it is stored, False while the set is between primaries
    (a duplicate key: an earlier attempt stored it)."""
    try:
        coll.insert_one(doc)
    except DuplicateKeyError:
        pass
    except (NotPrimaryError, AutoReconnect):
        return False
    return True


def test_a_write_past_its_wtimeout_gets_a_write_concern_error_and_stays_queued(three):
    # mongod's wtimeout: the write is done where it was taken, the reply says its
    # write concern was not met in time (64 WriteConcernFailed, errInfo.wtimeout) and
    # carries the write's outcome. Here the write is queued to the set (a pipelined
    # commit) and the writes after it are computed on top of it; when the set commits
    # them they are on every member, or (the term lost) on none.
    members = three
    initiate(members)
    primary = primary_of(members)
    with primary.client(directConnection=True) as c:
        c.rs.items.insert_one({"_id": "first"})
    with secondaries_stopped(members, primary), wire.connect(primary.port) as sock:
        for _id in ("late", "later"):
            reply = wire.command(sock, {
                "insert": "items", "documents": [{"_id": _id}], "$db": "rs",
                "writeConcern": {"w": "majority", "wtimeout": 300}})
            assert reply["ok"] == 1 and reply["n"] == 1, reply
            wce = reply["writeConcernError"]
            assert wce["code"] == 64 and wce["codeName"] == "WriteConcernFailed", reply
            assert wce["errInfo"]["wtimeout"] is True, reply
            assert wce["errInfo"]["writeConcern"]["w"] == "majority", reply
            assert wce["errInfo"]["writeConcern"]["wtimeout"] == 300, reply
        # The second insert of the same _id reads the queued one: a duplicate key,
        # answered only once that one is committed, so here at its wtimeout too.
        dup = wire.command(sock, {
            "insert": "items", "documents": [{"_id": "late"}], "$db": "rs",
            "writeConcern": {"w": "majority", "wtimeout": 300}})
        assert dup["ok"] == 1 and dup["writeErrors"][0]["code"] == 11000, dup
        assert dup["writeConcernError"]["code"] == 64, dup
        # A catalog change waits for the writes queued before it; at its wtimeout it
        # fails whole, having done nothing (WriteConcernFailed).
        ddl = wire.command(sock, {
            "createIndexes": "items", "indexes": [{"key": {"a": 1}, "name": "a_1"}],
            "$db": "rs", "writeConcern": {"w": "majority", "wtimeout": 200}})
        assert ddl["ok"] == 0 and ddl["code"] == 64, ddl
        # w: 1 is not bounded by wtimeout (mongod ignores it there): the write
        # waits for the set, and its maxTimeMS ends it.
        w1 = wire.command(sock, {
            "insert": "items", "documents": [{"_id": "w1"}], "$db": "rs",
            "writeConcern": {"w": 1, "wtimeout": 100}, "maxTimeMS": 600})
        assert w1["ok"] == 0 and w1["code"] == 50, w1
    with writes_resumed(members) as items:
        found = [items.count_documents({"_id": i}) for i in ("late", "later", "w1")]
    # One term's entries, in order: what committed is a prefix of them.
    assert found in ([0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1]), found
    queued = sum(found)
    for m in members:
        assert eventually(lambda m=m: count_on(m) == 2 + queued, timeout=SET_WAIT_S), m.port


def test_members_authenticate_with_the_key_file(fresh_server, tmp_path):
    # As mongod's --keyFile: members prove the shared key to one another (SCRAM as
    # __system@local), the key turns authorization on, the localhost exception
    # initiates the set and creates the first user, and no one without the key may
    # make the members' calls.
    key = tmp_path / "key"
    key.write_text(base64.b64encode(os.urandom(48)).decode() + "\n")
    key.chmod(0o600)
    members = [
        fresh_server(extra_args=["--setParameter", f"replElectionTimeoutMillis={ELECTION_MS}",
                                 "--keyFile", str(key)])
        for _ in range(3)
    ]
    initiate(members)
    primary = primary_of(members)
    with primary.client() as c:
        c.admin.command("createUser", "root", pwd="pw", roles=["root"])
    auth = {"username": "root", "password": "pw"}

    def count_as_root(m):
        with m.client(**auth) as c:
            return c.rs.items.count_documents({})

    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000, **auth) as client:
        client.rs.items.insert_many([{"_id": i} for i in range(10)])
        for m in members:
            assert eventually(lambda m=m: count_as_root(m) == 10, timeout=SET_WAIT_S), m.port
        # Without credentials nothing but hello.
        with wire.connect(primary.port) as sock:
            refused = wire.command(sock, {"insert": "items", "documents": [{}], "$db": "rs"})
            assert refused["code"] == 13, refused
            raft = wire.command(sock, {"replSetRaft": "vote", "data": Binary(b""), "$db": "admin"})
            assert raft["ok"] == 0 and raft["code"] == 13, raft
        # A user without the internal action may not either, root included.
        with primary.client(**auth) as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("replSetRaft", "vote", data=Binary(b""))
            assert e.value.code == 13
        # The members' user takes the key alone.
        system = {"username": "__system", "authSource": "local",
                  "authMechanism": "SCRAM-SHA-256"}
        with primary.client(password="another key", **system) as c:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("ping")
            assert e.value.code == 18
        with primary.client(password=key.read_text().strip(), **system) as c:
            assert c.admin.command("replSetGetStatus")["myState"] == 1

        # Elections and replication after a kill -9 run over authenticated calls too.
        primary.kill9()
        survivors = [m for m in members if m is not primary]
        client.rs.items.insert_one({"_id": "after"})
        for m in survivors:
            assert eventually(lambda m=m: count_as_root(m) == 11, timeout=SET_WAIT_S), m.port


def test_a_bad_configuration_gets_mongods_errors(three):
    m = three[0]
    with m.client(directConnection=True) as c:
        two = [{"_id": 0, "host": host(m)}, {"_id": 1, "host": host(three[1])}]
        for config, code in [
            ({"_id": "other", "members": two}, 93),
            # Not naming this member.
            ({"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:1"},
                                        {"_id": 1, "host": "127.0.0.1:2"}]}, 93),
            ({"_id": "rs0", "members": [two[0], {"_id": 0, "host": host(three[1])}]}, 93),
            ({"_id": "rs0", "members": [two[0], {"_id": 1, "host": host(m)}]}, 93),
            ({"_id": "rs0", "members": [two[0], {"_id": -1, "host": host(three[1])}]}, 93),
            # A member that does not answer: nothing is initiated (mongod's quorum check).
            ({"_id": "rs0", "members": [two[0], {"_id": 1, "host": "127.0.0.1:1"}]}, 74),
            # One member or none: the one-member set it already is.
            ({"_id": "rs0", "members": [{"_id": 0, "host": host(m)}]}, 23),
            ({"_id": "rs0", "members": []}, 23),
        ]:
            with pytest.raises(OperationFailure) as e:
                c.admin.command("replSetInitiate", config)
            assert e.value.code == code, config
        # Still a one-member set that writes.
        c.rs.items.insert_one({"_id": 1})
        assert c.admin.command("hello")["isWritablePrimary"] is True


def set_uri(members):
    return "mongodb://" + ",".join(host(m) for m in members) + "/?replicaSet=rs0"


def test_step_down_hands_over_and_a_retried_write_lands_on_the_new_primary(three):
    members = three
    initiate(members)
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client:
        items = client.rs.items
        items.insert_one({"_id": "before"})
        old = primary_of(members)
        old_hello = hello(old)
        with old.client(directConnection=True) as direct:
            # mongod's argument checks first.
            with pytest.raises(OperationFailure) as e:
                direct.admin.command("replSetStepDown", 5, secondaryCatchUpPeriodSecs=10)
            assert e.value.code == 2
            with pytest.raises(OperationFailure) as e:
                direct.admin.command("replSetFreeze", 10)
            assert e.value.code == 95 and e.value.details["codeName"] == "NotSecondary"
            assert direct.admin.command("replSetStepDown", 30)["ok"] == 1
        # The old primary is a secondary at once; it stands for no election for 30 s.
        h = hello(old)
        assert h["isWritablePrimary"] is False
        assert h["topologyVersion"]["counter"] > old_hello["topologyVersion"]["counter"]
        # A retryable write sent to it fails with mongod's labels and topologyVersion
        # (so a driver drops any older hello), and the driver's retry lands on the new
        # primary.
        with wire.connect(old.port) as sock:
            refused = wire.command(sock, {
                "insert": "items", "documents": [{"_id": "raw"}], "$db": "rs",
                "lsid": {"id": Binary.from_uuid(uuid.uuid4())}, "txnNumber": Int64(1),
            })
            assert refused["code"] == 10107 and refused["errorLabels"] == ["RetryableWriteError"]
            assert refused["topologyVersion"]["counter"] >= h["topologyVersion"]["counter"]
        items.insert_one({"_id": "after"})
        new = primary_of(members)
        assert new is not None and new is not old
        assert hello(new)["electionId"] > old_hello["electionId"]
        for m in members:
            assert eventually(lambda m=m: count_on(m) == 2, timeout=SET_WAIT_S), m.port
        # A secondary cannot step down.
        with old.client(directConnection=True) as direct:
            with pytest.raises(NotPrimaryError) as e:
                direct.admin.command("replSetStepDown", 10)
            assert e.value.details["code"] == 10107

        # A frozen secondary does not take office: with the third member frozen and the
        # old primary still in its 30 s, no one may; unfrozen, the third takes over.
        third = next(m for m in members if m is not old and m is not new)
        with third.client(directConnection=True) as direct:
            assert direct.admin.command("replSetFreeze", 60)["ok"] == 1
        with new.client(directConnection=True) as direct:
            # Every other voter is held back (one frozen, one stepped down): no one
            # takes office, and the primary stays primary.
            with pytest.raises(OperationFailure) as e:
                direct.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=1)
            assert e.value.code == 262
        assert eventually(lambda: primary_of(members) is new, timeout=SET_WAIT_S)
        with third.client(directConnection=True) as direct:
            assert direct.admin.command("replSetFreeze", 0)["info"] == "unfreezing"
        with new.client(directConnection=True) as direct:
            assert direct.admin.command("replSetStepDown", 10)["ok"] == 1
        assert eventually(lambda: primary_of(members) is third, timeout=SET_WAIT_S)
        items.insert_one({"_id": "on the third"})
        assert count_on(third, _id="on the third") == 1


def test_reconfig_adds_a_learner_makes_it_vote_and_removes_it(three, fresh_server):
    members = three
    initiate(members)
    fourth = fresh_server(extra_args=["--setParameter", f"replElectionTimeoutMillis={ELECTION_MS}"])
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client:
        client.rs.items.insert_many([{"_id": i} for i in range(50)])
        config = client.admin.command("replSetGetConfig")["config"]
        version = config["version"]

        def reconfig(change):
            nonlocal config
            new = dict(config, version=config["version"] + 1)
            change(new)
            assert client.admin.command("replSetReconfig", new)["ok"] == 1
            config = client.admin.command("replSetGetConfig")["config"]
            assert config["version"] > new["version"] - 1

        # Bad configurations first: mongod's codes.
        for bad, code in [
            (dict(config, version=version), 103),
            (dict(config, _id="other", version=version + 1), 103),
            (dict(config, version=version + 1,
                  members=config["members"] + [{"_id": 9, "host": host(fourth), "priority": 0}]), 93),
            (dict(config, version=version + 1,
                  members=config["members"] + [{"_id": 9, "host": host(fourth), "votes": 0}]), 93),
        ]:
            with pytest.raises(OperationFailure) as e:
                client.admin.command("replSetReconfig", bad)
            assert e.value.code == code, bad

        # A non-voting member (a learner) catches up, is a passive secondary.
        reconfig(lambda c: c["members"].append(
            {"_id": 3, "host": host(fourth), "votes": 0, "priority": 0}))
        assert [m["votes"] for m in config["members"] if m["_id"] == 3] == [0]
        assert eventually(lambda: count_on(fourth) == 50, timeout=SET_WAIT_S)
        h = hello(fourth)
        assert h["secondary"] is True and h.get("passive") is True
        assert host(fourth) not in h["hosts"] and h["passives"] == [host(fourth)]

        # It votes.
        def voting(c):
            for m in c["members"]:
                if m["_id"] == 3:
                    m.update(votes=1, priority=1)
        reconfig(voting)
        assert eventually(lambda: host(fourth) in hello(primary_of(members))["hosts"],
                          timeout=SET_WAIT_S)
        client.rs.items.insert_one({"_id": "with four"})
        assert eventually(lambda: count_on(fourth, _id="with four") == 1, timeout=SET_WAIT_S)

        # It is removed: it gets no more writes.
        reconfig(lambda c: c.update(members=[m for m in c["members"] if m["_id"] != 3]))
        assert sorted(m["host"] for m in config["members"]) == sorted(host(m) for m in members)
        client.rs.items.insert_one({"_id": "without it"})
        assert all(eventually(lambda m=m: count_on(m, _id="without it") == 1, timeout=SET_WAIT_S)
                   for m in members)
        assert count_on(fourth, _id="without it") == 0


def test_causal_reads_on_a_secondary_and_the_new_primary_entry(three):
    members = three
    initiate(members)
    primary = primary_of(members)
    # The new primary's entry, on every member (mongod's "new primary" no-op).
    for m in members:
        def noted(m=m):
            with m.client(directConnection=True) as c:
                return c.local.oplog.rs.count_documents({"op": "n", "o.msg": "new primary"}) >= 1
        assert eventually(noted, timeout=SET_WAIT_S), m.port
    secondary = next(m for m in members if m is not primary)
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client, \
            secondary.client(directConnection=True, readPreference="secondaryPreferred") as sec:
        written = client.rs.items.insert_one({"_id": "causal"})
        assert written.acknowledged
        at = client.admin.command("ping")["$clusterTime"]["clusterTime"]
        # afterClusterTime: the secondary answers once it has applied that time.
        found = sec.rs.command("find", "items", filter={"_id": "causal"},
                               readConcern={"level": "majority", "afterClusterTime": at})
        assert [d["_id"] for d in found["cursor"]["firstBatch"]] == ["causal"]
        # A time no member has reached yet: maxTimeMS ends the wait with mongod's 50.
        with pytest.raises(OperationFailure) as e:
            sec.rs.command("find", "items", filter={},
                           readConcern={"afterClusterTime": Timestamp(at.time + 3600, 0)},
                           maxTimeMS=200)
        assert e.value.code == 50


def test_a_large_insert_replicates_and_a_member_catches_up_over_it(three):
    """An insert of 40 MB is committed in parts (each one entry, one message between
    members); a member that was down catches up over them, several entries per call
    only while they fit in one message."""
    members = three
    initiate(members)
    primary = primary_of(members)
    down = next(m for m in members if m is not primary)
    down.kill9()
    big = "x" * (1 << 20)
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client:
        client.rs.big.insert_many([{"_id": i, "big": big} for i in range(40)])
        client.rs.big.insert_one({"_id": "last"})
    down.remove_socket_file()
    down.restart()

    def caught_up(m):
        with m.client(directConnection=True, readPreference="secondaryPreferred") as c:
            return c.rs.big.count_documents({}) == 41
    for m in members:
        assert eventually(lambda m=m: caught_up(m), timeout=SET_WAIT_S), m.port


def test_change_streams_on_every_member_give_the_same_events_and_tokens(three):
    """Seed 001's move: change streams on secondaries. Every member's stream gives the
    primary's events byte for byte with the same resume tokens, a token taken on the
    primary resumes on a secondary, and `local.oplog.rs` is the same everywhere."""
    members = three
    initiate(members)
    primary = primary_of(members)
    clients = [m.client(directConnection=True, readPreference="secondaryPreferred")
               for m in members]
    try:
        streams = [c.rs.feed.watch(max_await_time_ms=200) for c in clients]
        with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client:
            for i in range(5):
                client.rs.feed.insert_one({"_id": i})
            client.rs.feed.update_one({"_id": 1}, {"$set": {"u": True}})
            client.rs.feed.delete_one({"_id": 2})

        def events(stream, n=7):
            got = []
            deadline = time.monotonic() + SET_WAIT_S
            while len(got) < n and time.monotonic() < deadline:
                e = stream.try_next()
                if e is not None:
                    got.append(e)
            return got
        seen = [events(s) for s in streams]
        for s in streams:
            s.close()
        assert [len(s) for s in seen] == [7, 7, 7]
        assert seen[0] == seen[1] == seen[2]
        on_primary = seen[members.index(primary)]
        secondary = next(i for i, m in enumerate(members) if m is not primary)
        with clients[secondary].rs.feed.watch(resume_after=on_primary[4]["_id"],
                                               max_await_time_ms=200) as resumed:
            rest = events(resumed, 2)
        assert [e["operationType"] for e in rest] == ["update", "delete"]
        assert rest == on_primary[5:]
        def same_oplogs():
            oplogs = [list(c.local.oplog.rs.find({}).sort("$natural", 1)) for c in clients]
            return oplogs[0] == oplogs[1] == oplogs[2] and len(oplogs[0]) > 7
        # Eventually: a no-op the primary writes meanwhile reaches the others after it.
        assert eventually(same_oplogs, timeout=SET_WAIT_S)
    finally:
        for c in clients:
            c.close()


def test_a_tailable_cursor_on_a_secondary_follows_a_capped_collection(three):
    """Seed 001's move for the bus: a consumer tails a capped collection on a secondary.
    It sees what the primary inserts as the secondary applies it, and when the
    primary's evictions (replicated) take the document it stopped at, its getMore fails
    with 136 CappedPositionLost, as on the primary."""
    members = three
    initiate(members)
    primary = primary_of(members)
    secondary = next(m for m in members if m is not primary)
    with MongoClient(set_uri(members), serverSelectionTimeoutMS=30_000) as client, \
            secondary.client(directConnection=True, readPreference="secondaryPreferred") as sec:
        bus = client.get_database("rs", write_concern=WriteConcern(w=3)).get_collection("bus")
        client.rs.create_collection("bus", capped=True, size=4096, max=3)
        bus.insert_many([{"_id": i} for i in range(3)])
        assert eventually(lambda: sec.rs.bus.count_documents({}) == 3, timeout=SET_WAIT_S)
        cursor = sec.rs.bus.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(200)

        def next_ids(n):
            got = []
            deadline = time.monotonic() + SET_WAIT_S
            while len(got) < n and cursor.alive and time.monotonic() < deadline:
                doc = next(cursor, None)
                if doc is not None:
                    got.append(doc["_id"])
            return got
        assert next_ids(3) == [0, 1, 2]
        # One more evicts _id 0: the position (_id 2) stays, the cursor goes on.
        bus.insert_one({"_id": 3})
        assert next_ids(1) == [3]
        # Three more evict 1, 2 and 3, the position among them. The getMore is sent as
        # a command: pymongo's cursor ends quietly on 136 (its "capped roll over").
        bus.insert_many([{"_id": i} for i in range(4, 7)])
        assert eventually(lambda: sec.rs.bus.find_one({"_id": 3}) is None, timeout=SET_WAIT_S)
        with pytest.raises(OperationFailure) as e:
            sec.rs.command("getMore", cursor.cursor_id, collection="bus", maxTimeMS=200)
        assert e.value.code == 136
        assert [d["_id"] for d in sec.rs.bus.find()] == [4, 5, 6]

"""Replica sets of several members (issue 27): three server processes started with
`--replSet rs0`, initiated with `replSetInitiate` as mongod's are, an unchanged pymongo
pointed at the set: it finds the primary, writes go through the set to every member,
a member that is not primary refuses writes with 10107, after `kill -9` of the
primary the driver writes to the new one and nothing acknowledged is lost, and the
killed member restarts, rejoins and catches up."""

import time

import pytest
from pymongo import MongoClient
from pymongo.errors import NotPrimaryError, OperationFailure

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
    with m.client(directConnection=True, serverSelectionTimeoutMS=5000) as c:
        return c.rs.items.count_documents(query)


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

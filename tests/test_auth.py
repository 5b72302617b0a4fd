"""Authentication and authorization as mongod offers them (issue 29): users in
admin.system.users with SCRAM credentials (never the password), the user commands,
SCRAM-SHA-1 / SCRAM-SHA-256 through unchanged pymongo (saslStart / saslContinue and the
handshake's speculativeAuthenticate), and with `--auth` every command checked against the
user's roles (13 Unauthorized), the localhost exception for the first user."""

import base64

import pytest
from bson import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from conftest import TailstreamServer, eventually


def client(srv, **kw):
    kw.setdefault("serverSelectionTimeoutMS", 5000)
    return MongoClient(f"mongodb://127.0.0.1:{srv.port}/?directConnection=true", **kw)


@pytest.fixture
def auth_server(tmp_path):
    """A server with --auth and a root user created through the localhost exception."""
    srv = TailstreamServer(tmp_path / "db", extra_args=["--auth"])
    srv.start()
    with client(srv) as c:
        c.admin.command("createUser", "root", pwd="rootpw", roles=["root"])
    yield srv
    srv.stop()


def error(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value


def test_users_are_stored_as_mongod_stores_them(server):
    with server.client() as c:
        c.test.command("createUser", "ann", pwd="secret", roles=["readWrite"],
                       customData={"team": "ops"})
        stored = c.admin["system.users"].find_one({"_id": "test.ann"})
        info = c.test.command("usersInfo", "ann")["users"]
        c.test.command("dropUser", "ann")
    assert (stored["user"], stored["db"]) == ("ann", "test")
    assert stored["roles"] == [{"role": "readWrite", "db": "test"}]
    assert "secret" not in repr(stored), "never the password"
    for mech, salt_len in [("SCRAM-SHA-1", 16), ("SCRAM-SHA-256", 28)]:
        cred = stored["credentials"][mech]
        assert cred["iterationCount"] == {"SCRAM-SHA-1": 10000, "SCRAM-SHA-256": 15000}[mech]
        assert len(base64.b64decode(cred["salt"])) == salt_len
        assert set(cred) == {"iterationCount", "salt", "storedKey", "serverKey"}
    assert isinstance(stored["userId"], Binary) and stored["userId"].subtype == 4
    assert len(info) == 1
    u = info[0]
    assert (u["_id"], u["user"], u["db"]) == ("test.ann", "ann", "test")
    assert u["mechanisms"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert u["customData"] == {"team": "ops"} and "credentials" not in u


def test_user_commands_change_and_report_users(server):
    with server.client() as c:
        db = c.shop
        db.command("createUser", "bob", pwd="pw", roles=[], mechanisms=["SCRAM-SHA-256"])
        db.command("grantRolesToUser", "bob", roles=["read", {"role": "dbAdmin", "db": "shop"}])
        db.command("revokeRolesFromUser", "bob", roles=["read"])
        db.command("updateUser", "bob", customData={"n": 1})
        db.command("createUser", "carol", pwd="pw", roles=["read"])
        bob = db.command("usersInfo", {"user": "bob", "db": "shop"}, showCredentials=True)["users"][0]
        everyone = db.command("usersInfo", 1)["users"]
        all_dbs = c.admin.command("usersInfo", {"forAllDBs": True})["users"]
        assert db.command("dropAllUsersFromDatabase")["n"] == 2
        assert db.command("usersInfo", 1)["users"] == []
    assert bob["roles"] == [{"role": "dbAdmin", "db": "shop"}]
    assert bob["mechanisms"] == ["SCRAM-SHA-256"] and list(bob["credentials"]) == ["SCRAM-SHA-256"]
    assert bob["customData"] == {"n": 1}
    assert [u["user"] for u in everyone] == ["bob", "carol"]
    assert {u["_id"] for u in all_dbs} >= {"shop.bob", "shop.carol"}


@pytest.mark.parametrize("call, code", [
    (lambda db: db.command("createUser", "dup", pwd="x", roles=[]), 51003),
    (lambda db: db.command("createUser", "r", pwd="x", roles=["readAnyDatabase"]), 31),
    (lambda db: db.command("createUser", "r", pwd="x", roles=["noSuchRole"]), 31),
    (lambda db: db.command("createUser", "r", roles=[]), 2),
    (lambda db: db.command("createUser", "r", pwd="x"), 40414),
    (lambda db: db.command("createUser", "", pwd="x", roles=[]), 2),
    (lambda db: db.command("createUser", "r", pwd="x", roles=[], mechanisms=["PLAIN"]), 2),
    (lambda db: db.command("createUser", "r", pwd="x", roles=[], mechanisms=[]), 2),
    (lambda db: db.client.local.command("createUser", "r", pwd="x", roles=[]), 2),
    (lambda db: db.command("dropUser", "nobody"), 11),
    (lambda db: db.command("updateUser", "nobody", pwd="x"), 11),
    (lambda db: db.command("grantRolesToUser", "nobody", roles=["read"]), 11),
    (lambda db: db.command("updateUser", "dup"), 2),
])
def test_bad_user_commands_get_mongods_errors(server, call, code):
    with server.client() as c:
        c.test.command("createUser", "dup", pwd="x", roles=[])
        try:
            assert error(lambda: call(c.test)).code == code
        finally:
            c.test.command("dropAllUsersFromDatabase")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256", None])
def test_drivers_authenticate_with_each_mechanism(auth_server, mechanism):
    kw = {"authMechanism": mechanism} if mechanism else {}
    with client(auth_server, username="root", password="rootpw", **kw) as c:
        c.test.items.insert_one({"a": 1})
        status = c.admin.command("connectionStatus")["authInfo"]
    assert status["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
    assert status["authenticatedUserRoles"] == [{"role": "root", "db": "admin"}]
    log = auth_server.log_text()
    assert '"msg":"Successfully authenticated"' in log


def test_wrong_credentials_fail_with_18_and_others_are_served(auth_server):
    for user, pw in [("root", "wrong"), ("nobody", "x"), ("root", "")]:
        with client(auth_server, username=user, password=pw or "x" * 3) as bad:
            e = error(lambda: bad.test.items.find_one())
            assert e.code == 18 and e.details["errmsg"] == "Authentication failed.", e.details
    with client(auth_server, username="root", password="rootpw") as good:
        assert good.admin.command("ping")["ok"] == 1
    assert '"msg":"Authentication failed"' in auth_server.log_text()


def test_malformed_sasl_messages_get_clean_errors(auth_server):
    with client(auth_server) as c:
        db = c.admin
        assert error(lambda: db.command("saslStart", 1, mechanism="PLAIN",
                                        payload=Binary(b"x"))).code == 334
        for payload in [b"", b"n,,n=root", b"garbage\xff", b"n,,n=root,r=" + b"a" * 5000]:
            e = error(lambda: db.command("saslStart", 1, mechanism="SCRAM-SHA-256",
                                         payload=Binary(payload)))
            assert e.code == 18, (payload, e.details)
        # A proof with no conversation, or another conversation's id.
        assert error(lambda: db.command("saslContinue", 1, conversationId=1,
                                        payload=Binary(b"c=biws,r=x,p=AAAA"))).code == 17
        start = db.command("saslStart", 1, mechanism="SCRAM-SHA-256",
                           payload=Binary(b"n,,n=root,r=clientnonce"))
        assert start["done"] is False and start["conversationId"] == 1
        server_first = bytes(start["payload"]).decode()
        assert server_first.startswith("r=clientnonce") and ",s=" in server_first
        assert error(lambda: db.command("saslContinue", 1, conversationId=7,
                                        payload=Binary(b"c=biws"))).code == 17
        start = db.command("saslStart", 1, mechanism="SCRAM-SHA-256",
                           payload=Binary(b"n,,n=root,r=clientnonce"))
        nonce = bytes(start["payload"]).decode().split(",")[0][2:]
        bad_proof = f"c=biws,r={nonce},p={base64.b64encode(b'0' * 32).decode()}".encode()
        assert error(lambda: db.command("saslContinue", 1, conversationId=1,
                                        payload=Binary(bad_proof))).code == 18
        # Still serving, and still unauthenticated.
        assert error(lambda: c.test.items.find_one()).code == 13


def test_without_a_user_only_the_first_user_may_be_created_from_localhost(tmp_path):
    srv = TailstreamServer(tmp_path / "db", extra_args=["--auth"])
    srv.start()
    try:
        with client(srv) as c:
            e = error(lambda: c.test.items.insert_one({"a": 1}))
            assert (e.code, e.details["errmsg"]) == (13, "Command insert requires authentication")
            assert c.admin.command("ping")["ok"] == 1  # needs no privilege
            c.admin.command("createUser", "first", pwd="pw", roles=["root"])
            assert error(lambda: c.admin.command("createUser", "second", pwd="pw",
                                                 roles=["root"])).code == 13
    finally:
        srv.stop()


ROLE_MATRIX = [
    # role on `shop` / admin, then what it may do: find, insert, createIndex, dropDatabase,
    # serverStatus, createUser in shop.
    ({"role": "read", "db": "shop"}, [True, False, False, False, False, False]),
    ({"role": "readWrite", "db": "shop"}, [True, True, True, False, False, False]),
    ({"role": "dbAdmin", "db": "shop"}, [False, False, True, True, False, False]),
    ({"role": "userAdmin", "db": "shop"}, [False, False, False, False, False, True]),
    ({"role": "dbOwner", "db": "shop"}, [True, True, True, True, False, True]),
    ({"role": "readAnyDatabase", "db": "admin"}, [True, False, False, False, False, False]),
    ({"role": "clusterMonitor", "db": "admin"}, [False, False, False, False, True, False]),
    ({"role": "root", "db": "admin"}, [True, True, True, True, True, True]),
]


@pytest.mark.parametrize("role, allowed", ROLE_MATRIX, ids=[r[0]["role"] for r in ROLE_MATRIX])
def test_each_role_allows_what_mongods_does(auth_server, role, allowed):
    with client(auth_server, username="root", password="rootpw") as root:
        root.shop.items.insert_one({"a": 1})
        root.admin.command("createUser", "u", pwd="pw", roles=[role])
    actions = [
        lambda c: c.shop.items.find_one(),
        lambda c: c.shop.items.insert_one({"b": 1}),
        lambda c: c.shop.items.create_index("b"),
        lambda c: c.shop.command("dropDatabase"),
        lambda c: c.admin.command("serverStatus"),
        lambda c: c.shop.command("createUser", "made", pwd="pw", roles=[]),
    ]
    got = []
    with client(auth_server, username="u", password="pw") as c:
        for act in actions:
            try:
                act(c)
                got.append(True)
            except OperationFailure as e:
                assert e.code == 13, e.details
                got.append(False)
    assert got == allowed


def test_a_change_stream_needs_read_access(auth_server):
    with client(auth_server, username="root", password="rootpw") as root:
        root.shop.create_collection("orders")
        root.admin.command("createUser", "reader", pwd="pw", roles=[{"role": "read", "db": "shop"}])
        root.admin.command("createUser", "other", pwd="pw", roles=[{"role": "read", "db": "hr"}])
    with client(auth_server, username="reader", password="pw") as c:
        with c.shop.orders.watch(max_await_time_ms=50) as stream:
            assert stream.try_next() is None
    with client(auth_server, username="other", password="pw") as c:
        assert error(lambda: c.shop.orders.watch()).code == 13


def test_only_the_user_that_opened_a_cursor_may_continue_or_kill_it(auth_server):
    with client(auth_server, username="root", password="rootpw") as root:
        root.shop.items.insert_many([{"i": i} for i in range(5)])
        for name in ("ann", "bob"):
            root.admin.command("createUser", name, pwd="pw", roles=[{"role": "read", "db": "shop"}])
    with client(auth_server, username="ann", password="pw") as ann, \
            client(auth_server, username="bob", password="pw") as bob:
        reply = ann.shop.command("find", "items", batchSize=1)
        cursor_id = reply["cursor"]["id"]
        assert cursor_id != 0
        e = error(lambda: bob.shop.command("getMore", cursor_id, collection="items"))
        assert e.code == 13 and "not created by the authenticated user" in e.details["errmsg"]
        assert error(lambda: bob.shop.command("killCursors", "items", cursors=[cursor_id])).code == 13
        more = ann.shop.command("getMore", cursor_id, collection="items", batchSize=10)
        assert len(more["cursor"]["nextBatch"]) == 4


def test_custom_roles_grant_their_privileges_and_inherit_others(auth_server):
    with client(auth_server, username="root", password="rootpw") as root:
        root.shop.orders.insert_one({"o": 1})
        root.shop.stock.insert_one({"s": 1})
        root.shop.command("createRole", "orderTaker", roles=[],
                          privileges=[{"resource": {"db": "shop", "collection": "orders"},
                                       "actions": ["find", "insert"]}])
        root.shop.command("createRole", "clerk", privileges=[],
                          roles=["orderTaker", {"role": "read", "db": "hr"}])
        root.shop.command("createUser", "tom", pwd="pw", roles=["clerk"])
        info = root.shop.command("rolesInfo", "clerk", showPrivileges=True)["roles"][0]
        with client(auth_server, username="tom", password="pw", authSource="shop") as tom:
            tom.shop.orders.insert_one({"o": 2})
            assert tom.shop.orders.count_documents({}) == 2
            assert error(lambda: tom.shop.stock.find_one()).code == 13      # another collection
            assert error(lambda: tom.shop.orders.delete_many({})).code == 13  # another action
            root.hr.people.insert_one({"p": 1})
            assert tom.hr.people.find_one()["p"] == 1                        # inherited built-in
            # A change applies to connections already authenticated, as mongod's.
            root.shop.command("grantPrivilegesToRole", "orderTaker",
                              privileges=[{"resource": {"db": "shop", "collection": "orders"},
                                           "actions": ["remove"]}])
            assert tom.shop.orders.delete_many({}).deleted_count == 2
            root.shop.command("revokeRolesFromRole", "clerk", roles=["orderTaker"])
            assert error(lambda: tom.shop.orders.find_one()).code == 13
            root.shop.command("dropUser", "tom")
            assert error(lambda: tom.hr.people.find_one()).code == 13
    assert (info["role"], info["db"], info["isBuiltin"]) == ("clerk", "shop", False)
    assert info["roles"] == [{"role": "orderTaker", "db": "shop"}, {"role": "read", "db": "hr"}]
    assert {"resource": {"db": "shop", "collection": "orders"},
            "actions": ["find", "insert"]} in info["inheritedPrivileges"]


def test_roles_info_lists_built_in_roles_too(server):
    with server.client() as c:
        roles = c.test.command("rolesInfo", 1, showBuiltinRoles=True)["roles"]
        read = c.test.command("rolesInfo", "read", showPrivileges=True)["roles"][0]
    names = {r["role"] for r in roles}
    assert {"read", "readWrite", "dbAdmin", "dbOwner", "userAdmin"} <= names
    assert "root" not in names, "root exists on admin only"
    assert read["isBuiltin"] is True
    assert "find" in read["privileges"][0]["actions"]
    assert read["privileges"][0]["resource"] == {"db": "test", "collection": ""}


@pytest.mark.parametrize("call, code", [
    (lambda db: db.command("createRole", "r1", privileges=[], roles=[]), 51002),
    (lambda db: db.command("createRole", "read", privileges=[], roles=[]), 2),
    (lambda db: db.command("createRole", "r", roles=[],
                           privileges=[{"resource": {"db": "test", "collection": ""},
                                        "actions": ["fly"]}]), 9),
    (lambda db: db.command("createRole", "r", roles=[],
                           privileges=[{"resource": {"db": "other", "collection": ""},
                                        "actions": ["find"]}]), 49),
    (lambda db: db.command("createRole", "r", roles=[],
                           privileges=[{"resource": {"cluster": True}, "actions": ["find"]}]), 49),
    (lambda db: db.command("createRole", "r", roles=["nope"], privileges=[]), 31),
    (lambda db: db.command("createRole", "r", roles=[]), 40414),
    (lambda db: db.command("dropRole", "nope"), 31),
    (lambda db: db.command("grantRolesToRole", "r1", roles=["r1"]), 49),
    (lambda db: db.command("createUser", "u", pwd="x", roles=["nope"]), 31),
])
def test_bad_role_commands_get_mongods_errors(server, call, code):
    with server.client() as c:
        c.test.command("createRole", "r1", privileges=[], roles=[])
        try:
            assert error(lambda: call(c.test)).code == code
        finally:
            c.test.command("dropAllRolesFromDatabase")
            c.test.command("dropAllUsersFromDatabase")


def test_own_operations_need_no_inprog_or_killop(auth_server):
    """currentOp with `$ownOps` (and `$currentOp: {ownOps: true}`) shows a user its own
    operations, which it may also kill, without inprog / killop."""
    import threading
    with client(auth_server, username="root", password="rootpw") as root:
        root.shop.items.insert_one({"a": 1})
        root.admin.command("createUser", "ann", pwd="pw", roles=[{"role": "read", "db": "shop"}])
    with client(auth_server, username="ann", password="pw", appname="ann-app") as ann:
        assert error(lambda: ann.admin.command("currentOp")).code == 13
        failures = []

        def slow_read():
            try:
                ann.shop.items.find_one({"$where": "sleep(5000) || true"})
            except OperationFailure as e:
                failures.append(e.code)

        reader = threading.Thread(target=slow_read)
        reader.start()
        try:
            def mine():
                ops = ann.admin.command({"currentOp": 1, "$ownOps": True})["inprog"]
                return [o for o in ops if o.get("command", {}).get("find") == "items"]
            ops = eventually(mine)
            assert ops and ops[0]["effectiveUsers"] == [{"user": "ann", "db": "admin"}], ops
            staged = list(ann.admin.aggregate([{"$currentOp": {"ownOps": True}}]))
            assert any(o.get("opid") == ops[0]["opid"] for o in staged)
            with client(auth_server, username="root", password="rootpw") as root:
                root.admin.command("createUser", "bob", pwd="pw", roles=[{"role": "read", "db": "shop"}])
            with client(auth_server, username="bob", password="pw") as bob:
                theirs = bob.admin.command({"currentOp": 1, "$ownOps": True})["inprog"]
                assert all(o.get("command", {}).get("find") != "items" for o in theirs)
                assert error(lambda: bob.admin.command("killOp", op=ops[0]["opid"])).code == 13
            assert ann.admin.command("killOp", op=ops[0]["opid"])["ok"] == 1
        finally:
            reader.join()
    assert failures == [11601], failures


def test_a_user_may_view_itself_only(auth_server):
    with client(auth_server, username="root", password="rootpw") as root:
        root.admin.command("createUser", "ann", pwd="pw", roles=[{"role": "read", "db": "shop"}])
        root.admin.command("createUser", "bob", pwd="pw", roles=[])
    with client(auth_server, username="ann", password="pw") as ann:
        me = ann.admin.command("usersInfo", "ann")["users"]
        assert [u["user"] for u in me] == ["ann"]
        assert ann.admin.command("usersInfo", {"user": "ann", "db": "admin"})["users"][0]["db"] == "admin"
        assert error(lambda: ann.admin.command("usersInfo", "bob")).code == 13
        assert error(lambda: ann.admin.command("usersInfo", 1)).code == 13

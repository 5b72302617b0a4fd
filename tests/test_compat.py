"""Driver-visible details found by running pymongo's own suite."""

import pytest
from pymongo.errors import OperationFailure
from pymongo.server_api import ServerApi


def test_regex_lookahead_in_list_collections_filter(db):
    db.users.insert_one({})
    db.create_collection("system.js")
    names = db.list_collection_names(filter={"name": {"$regex": r"^(?!system\.)"}})
    assert names == ["users"]


def test_regex_backreference_in_find(coll):
    coll.insert_many([{"s": "abab"}, {"s": "abba"}])
    assert [d["s"] for d in coll.find({"s": {"$regex": r"^(ab)\1$"}}, {"_id": 0})] == ["abab"]


def test_update_statement_with_unknown_field_is_refused(db):
    db.c.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as exc:
        db.command("update", "c", updates=[{"q": {}, "u": {"$set": {"a": 2}}, "sort": {"a": 1}}])
    assert exc.value.code == 40415
    assert "update.updates.sort" in str(exc.value)
    assert db.c.find_one()["a"] == 1


def test_delete_statement_with_unknown_field_is_refused(db):
    with pytest.raises(OperationFailure) as exc:
        db.command("delete", "c", deletes=[{"q": {}, "limit": 0, "bogus": 1}])
    assert exc.value.code == 40415


def test_pipeline_update_that_drops_id_keeps_it(coll):
    coll.insert_one({"_id": 7, "a": 1, "b": 2})
    coll.update_one({"_id": 7}, [{"$replaceWith": {"c": {"$add": ["$a", "$b"]}}}])
    assert coll.find_one({"_id": 7}) == {"_id": 7, "c": 3}


def test_index_background_option_is_reported(coll):
    coll.create_index("a", background=True)
    assert coll.index_information()["a_1"]["background"] is True


def test_list_local_sessions_lists_sessions_seen_and_forgets_ended_ones(server, client):
    with client.start_session() as s:
        client.admin.command("ping", session=s)
        listed = list(client.admin.aggregate([{"$listLocalSessions": {}}]))
        ids = [d["_id"]["id"] for d in listed]
        assert s.session_id["id"] in ids
        mine = listed[ids.index(s.session_id["id"])]
        assert len(mine["_id"]["uid"]) == 32 and "lastUse" in mine
        # The stage composes with later stages (pymongo's database aggregation test).
        out = list(client.admin.aggregate([
            {"$listLocalSessions": {"allUsers": True}}, {"$limit": 1},
            {"$project": {"_id": 0, "dummy": "x"}}]))
        assert out == [{"dummy": "x"}]
        sid = s.session_id
    # pymongo pools server sessions and would reuse this one: end it and list the
    # sessions over a raw connection that sends no lsid.
    import wire
    sock = wire.connect(server.port)
    try:
        assert wire.command(sock, {"endSessions": [sid], "$db": "admin"})["ok"] == 1
        reply = wire.command(sock, {"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}],
                                    "cursor": {}, "$db": "admin"})
        ids = [d["_id"]["id"] for d in reply["cursor"]["firstBatch"]]
        assert sid["id"] not in ids
    finally:
        sock.close()


def test_list_local_sessions_bad_input(client, db):
    with pytest.raises(OperationFailure) as exc:
        list(client.admin.aggregate([{"$listLocalSessions": 1}]))
    assert exc.value.code == 14
    with pytest.raises(OperationFailure) as exc:
        list(db.c.aggregate([{"$listLocalSessions": {}}]))
    assert exc.value.code == 73


def test_users_info_lists_no_users(db):
    reply = db.command("usersInfo", "someone")
    assert reply["users"] == [] and reply["ok"] == 1


def test_validate_reports_a_consistent_collection(db):
    db.v.insert_many([{"a": [1, 2, 3]}, {"a": 4}, {"b": 1}])
    db.v.create_index("a")
    db.v.create_index("b", sparse=True)
    db.v.update_one({"b": 1}, {"$set": {"a": [5, 6]}})
    for opts in ({}, {"full": True}, {"scandata": True}, {"background": True}):
        r = db.command("validate", "v", **opts)
        assert r["valid"] is True and r["errors"] == [], r
        assert r["nrecords"] == 3 and r["nIndexes"] == 3
        assert r["keysPerIndex"] == {"_id_": 3, "a_1": 6, "b_1": 1}
        assert r["ns"] == f"{db.name}.v"


def test_validate_bad_input(db):
    db.v.insert_one({})
    with pytest.raises(OperationFailure) as exc:
        db.command("validate", "nope")
    assert exc.value.code == 26 and exc.value.details["codeName"] == "NamespaceNotFound"
    with pytest.raises(OperationFailure) as exc:
        db.command("validate", "v", full=True, background=True)
    assert exc.value.code == 72
    with pytest.raises(OperationFailure) as exc:
        db.command("validate", 5)
    assert exc.value.code == 73


def test_let_variables_in_find_update_delete_and_aggregate(db):
    c = db.letc
    c.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}, {"_id": 3, "x": 3}])
    found = db.command("find", "letc", filter={"$expr": {"$eq": ["$x", "$$target"]}}, let={"target": 2})
    assert [d["_id"] for d in found["cursor"]["firstBatch"]] == [2]
    c.update_many({"$expr": {"$gte": ["$x", "$$min"]}}, [{"$set": {"tag": "$$label"}}], let={"min": 2, "label": "big"})
    assert [d.get("tag") for d in c.find().sort("_id", 1)] == [None, "big", "big"]
    assert c.delete_many({"$expr": {"$lt": ["$x", "$$max"]}}, let={"max": 2}).deleted_count == 1
    out = list(c.aggregate([{"$project": {"y": {"$multiply": ["$x", "$$k"]}}}], let={"k": 10}))
    assert sorted(d["y"] for d in out) == [20, 30]
    doc = c.find_one_and_update({"$expr": {"$eq": ["$_id", "$$id"]}}, {"$set": {"z": 1}}, let={"id": 3}, return_document=True)
    assert doc["z"] == 1


def test_api_strict_refuses_commands_and_stages_outside_version_1(db):
    with pytest.raises(OperationFailure) as exc:
        db.command("distinct", "t", key="a", apiVersion="1", apiStrict=True)
    assert exc.value.code == 323
    assert "distinct is not in API Version 1" in str(exc.value)
    with pytest.raises(OperationFailure) as exc:
        db.command("aggregate", 1, pipeline=[{"$listLocalSessions": {}}], cursor={}, apiVersion="1", apiStrict=True)
    assert exc.value.code == 323
    # Commands of version 1 run; without apiStrict anything does.
    db.command("find", "t", apiVersion="1", apiStrict=True)
    db.command("distinct", "t", key="a", apiVersion="1")


@pytest.mark.parametrize("fields, code, codename", [
    ({"apiStrict": True}, 4886600, "Location4886600"),
    ({"apiDeprecationErrors": False}, 4886600, "Location4886600"),
    ({"apiVersion": 1}, 14, "TypeMismatch"),
    ({"apiVersion": "2"}, 322, "APIVersionError"),
    ({"apiVersion": "3"}, 322, "APIVersionError"),
    ({"apiVersion": "1", "apiStrict": "true"}, 14, "TypeMismatch"),
    ({"apiVersion": "1", "apiDeprecationErrors": 0}, 14, "TypeMismatch"),
])
def test_api_parameters_are_checked_as_mongod_does(db, fields, code, codename):
    with pytest.raises(OperationFailure) as exc:
        db.command({"ping": 1, **fields})
    assert (exc.value.code, exc.value.details["codeName"]) == (code, codename)
    db.command({"ping": 1, "apiVersion": "1", "apiStrict": True, "apiDeprecationErrors": True})
    db.command({"ping": 1, "apiVersion": "1", "apiStrict": False, "apiDeprecationErrors": False})


def test_require_api_version_refuses_commands_without_one(fresh_server):
    # Its own server: while the parameter is on, every client's monitoring hello
    # without an apiVersion fails too, and marks the server unknown to that client.
    # So the parameter is switched by a client that declares its API version (its
    # hellos carry it), and the one without checks before its monitor looks again.
    server = fresh_server()
    with server.client(server_api=ServerApi("1")) as versioned, server.client(
        heartbeatFrequencyMS=3_600_000
    ) as client:
        admin = client.admin
        assert admin.command("getParameter", 1, requireApiVersion=1)["requireApiVersion"] is False
        versioned.admin.command("setParameter", 1, requireApiVersion=True)
        with pytest.raises(OperationFailure) as exc:
            admin.command("ping")
        assert exc.value.code == 498870
        admin.command("ping", apiVersion="1")
        versioned.admin.command("setParameter", 1, requireApiVersion=False)
        admin.command("ping")


def test_rand_takes_an_empty_document(coll):
    coll.insert_one({"_id": 1})
    [doc] = coll.aggregate([{"$project": {"r": {"$rand": {}}}}])
    assert 0 <= doc["r"] < 1
    with pytest.raises(OperationFailure):
        list(coll.aggregate([{"$project": {"r": {"$rand": [1]}}}]))


def test_out_is_refused_in_a_transaction_and_with_linearizable_reads(client, db):
    db.src.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as exc:
        db.command("aggregate", "src", pipeline=[{"$out": "dst"}], cursor={}, readConcern={"level": "linearizable"})
    assert exc.value.code == 72
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as exc:
            list(db.src.aggregate([{"$out": "dst"}], session=s))
        assert exc.value.code == 263
        s.abort_transaction()
    assert "dst" not in db.list_collection_names()


def test_failed_command_reports_an_unsatisfiable_write_concern(db):
    """mongod waits for the write concern even when the command fails, so a w it
    cannot satisfy comes back as a writeConcernError next to the error."""
    db.create_collection("a")
    db.create_collection("b")
    reply = db.client.admin.command(
        "renameCollection", f"{db.name}.a", to=f"{db.name}.b",
        writeConcern={"w": 2, "wtimeout": 1}, check=False)
    assert reply["ok"] == 0 and reply["code"] == 48
    assert reply["writeConcernError"]["code"] == 100
    plain = db.client.admin.command("renameCollection", f"{db.name}.a", to=f"{db.name}.b", check=False)
    assert "writeConcernError" not in plain


def test_update_pipeline_stages_are_checked_before_any_document(coll):
    coll.insert_one({"x": 11})
    with pytest.raises(OperationFailure) as exc:
        coll.update_one({"x": 1}, [{"$invalidOperator": True}])
    assert exc.value.code == 40324
    with pytest.raises(OperationFailure) as exc:
        coll.update_one({"x": 1}, [{"$group": {"_id": None}}])
    assert exc.value.code == 72
    assert "not allowed to be used within an update" in str(exc.value)
    coll.update_one({"x": 11}, [{"$set": {"y": 1}}])
    assert coll.find_one({}, {"_id": 0}) == {"x": 11, "y": 1}


def test_min_max_on_the_id_index(coll):
    coll.insert_many([{"_id": i, "x": i * 11} for i in range(1, 6)])
    got = list(coll.find({"_id": {"$gt": 1}}, {"_id": 0, "x": 1}, hint=[("_id", 1)],
                         min={"_id": 0}, max={"_id": 5}).sort("x", -1))
    assert got == [{"x": 44}, {"x": 33}, {"x": 22}]
    assert [d["_id"] for d in coll.find(hint="_id_", max={"_id": 3})] == [1, 2]
    with pytest.raises(OperationFailure) as exc:
        list(coll.find(hint=[("_id", 1)], min={"x": 0}))
    assert exc.value.code == 51174


def test_return_key_returns_the_index_keys(coll):
    coll.create_index("x")
    coll.insert_many([{"_id": i, "x": i * 11, "y": 0} for i in range(1, 4)])
    assert list(coll.find({}, return_key=True, show_record_id=True).sort("_id", 1)) == [
        {"_id": 1}, {"_id": 2}, {"_id": 3}]
    assert list(coll.find({"x": {"$gte": 22}}, return_key=True).hint("x_1")) == [{"x": 22}, {"x": 33}]
    # A collection scan uses no index: empty keys, as mongod returns.
    assert list(coll.find({"y": 0}, return_key=True)) == [{}, {}, {}]


"""configureFailPoint (enableTestCommands=1): the failCommand and
failGetMoreAfterCursorCheckout fail points drivers' test suites rely on."""

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure, WriteConcernError


def set_fail_point(client, mode, data, name="failCommand"):
    return client.admin.command("configureFailPoint", name, mode=mode, data=data)


@pytest.fixture
def fp_client(server):
    c = MongoClient(server.uri(directConnection="true", appname="fp-tests"), retryWrites=False)
    yield c
    set_fail_point(c, "off", {})
    set_fail_point(c, "off", {}, name="failGetMoreAfterCursorCheckout")
    c.close()


def test_error_code_fires_the_given_number_of_times(fp_client, db):
    coll = fp_client[db.name].c
    set_fail_point(fp_client, {"times": 1}, {"failCommands": ["insert"], "errorCode": 2, "appName": "fp-tests"})
    with pytest.raises(OperationFailure) as exc:
        coll.insert_one({"_id": 1})
    assert exc.value.code == 2
    assert "failCommand" in exc.value.details["errmsg"]
    coll.insert_one({"_id": 1})
    assert coll.count_documents({}) == 1


def test_only_listed_commands_fail(fp_client, db):
    coll = fp_client[db.name].c
    set_fail_point(fp_client, "alwaysOn", {"failCommands": ["delete"], "errorCode": 8, "appName": "fp-tests"})
    coll.insert_one({"a": 1})
    with pytest.raises(OperationFailure) as exc:
        coll.delete_one({"a": 1})
    assert exc.value.code == 8
    assert coll.count_documents({}) == 1


def test_error_labels_are_returned(fp_client, db):
    set_fail_point(fp_client, {"times": 1}, {"failCommands": ["find"], "errorCode": 2,
                                             "errorLabels": ["Custom"], "appName": "fp-tests"})
    with pytest.raises(OperationFailure) as exc:
        fp_client[db.name].c.find_one()
    assert exc.value.has_error_label("Custom")


def test_retryable_write_retries_after_a_retryable_error(server, db):
    # A ShutdownInProgress error marks the server unknown until the monitor's next hello:
    # a short heartbeat keeps that wait short.
    c = MongoClient(server.uri(directConnection="true", appname="fp-retry"), retryWrites=True,
                    heartbeatFrequencyMS=500)
    try:
        set_fail_point(c, {"times": 1}, {"failCommands": ["insert"], "errorCode": 91, "appName": "fp-retry"})
        c[db.name].r.insert_one({"_id": "once"})
        assert c[db.name].r.count_documents({}) == 1
    finally:
        set_fail_point(c, "off", {})
        c.close()


def test_close_connection_is_survived_by_a_retried_write(server, db):
    c = MongoClient(server.uri(directConnection="true", appname="fp-close"), retryWrites=True)
    try:
        set_fail_point(c, {"times": 1}, {"failCommands": ["insert"], "closeConnection": True, "appName": "fp-close"})
        c[db.name].r.insert_one({"_id": "after-close"})
        assert c[db.name].r.find_one({"_id": "after-close"}) is not None
    finally:
        set_fail_point(c, "off", {})
        c.close()


def test_write_concern_error_is_attached(fp_client, db):
    set_fail_point(fp_client, {"times": 1}, {"failCommands": ["insert"], "appName": "fp-tests",
                                             "writeConcernError": {"code": 64, "errmsg": "waiting for replication timed out"}})
    with pytest.raises(WriteConcernError) as exc:
        fp_client[db.name].w.insert_one({"x": 1})
    assert exc.value.code == 64
    assert fp_client[db.name].w.count_documents({}) == 1, "the write itself was applied"


def test_reply_counts_previous_activations(fp_client, db):
    set_fail_point(fp_client, "alwaysOn", {"failCommands": ["count"], "errorCode": 2, "appName": "fp-tests"})
    for _ in range(2):
        with pytest.raises(OperationFailure):
            fp_client[db.name].command("count", "c")
    assert set_fail_point(fp_client, "off", {})["count"] == 2


def test_fail_get_more_after_checkout_kills_the_cursor(fp_client, db):
    coll = fp_client[db.name].g
    coll.insert_many([{"i": i} for i in range(10)])
    first = fp_client[db.name].command("find", "g", batchSize=2)
    cursor_id = first["cursor"]["id"]
    assert cursor_id != 0
    set_fail_point(fp_client, {"times": 1}, {"errorCode": 280}, name="failGetMoreAfterCursorCheckout")
    with pytest.raises(OperationFailure) as exc:
        fp_client[db.name].command("getMore", cursor_id, collection="g")
    assert exc.value.code == 280
    with pytest.raises(OperationFailure) as exc:
        fp_client[db.name].command("getMore", cursor_id, collection="g")
    assert exc.value.code == 43


def test_unknown_fail_point_is_refused(fp_client):
    with pytest.raises(OperationFailure):
        set_fail_point(fp_client, "alwaysOn", {}, name="noSuchFailPoint")


def test_configure_fail_point_needs_test_commands(fresh_server):
    srv = fresh_server(extra_args=["--setParameter", "enableTestCommands=0"])
    c = MongoClient(srv.uri(directConnection="true"))
    try:
        with pytest.raises(OperationFailure) as exc:
            set_fail_point(c, "alwaysOn", {"failCommands": ["ping"], "errorCode": 2})
        assert exc.value.code == 59
    finally:
        c.close()


def test_retried_write_after_a_dropped_connection_is_applied_once(server, db):
    """onPrimaryTransactionalWrite drops the connection after each retryable write is
    applied; the driver retries, and the server must answer from its retry cache."""
    c = MongoClient(server.uri(directConnection="true"), retryWrites=True, heartbeatFrequencyMS=500)
    try:
        set_fail_point(c, {"times": 2}, {}, name="onPrimaryTransactionalWrite")
        coll = c[db.name].once
        coll.insert_one({"_id": 1, "n": 0})
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}})
        assert coll.find_one({"_id": 1}) == {"_id": 1, "n": 1}, "the $inc was applied exactly once"
    finally:
        set_fail_point(c, "off", {}, name="onPrimaryTransactionalWrite")
        c.close()


def test_max_time_always_times_out(fp_client, db):
    set_fail_point(fp_client, {"times": 1}, {}, name="maxTimeAlwaysTimeOut")
    with pytest.raises(OperationFailure) as exc:
        fp_client[db.name].c.find_one({}, max_time_ms=5000)
    assert exc.value.code == 50
    fp_client[db.name].c.find_one({}, max_time_ms=5000)


def test_injected_write_concern_error_gets_the_retryable_label(server, db):
    c = MongoClient(server.uri(directConnection="true", appname="fp-wce"), retryWrites=True, heartbeatFrequencyMS=500)
    try:
        set_fail_point(c, {"times": 1}, {"failCommands": ["insert"], "appName": "fp-wce",
                                         "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}})
        c[db.name].wce.insert_one({"_id": "retried"})
        assert c[db.name].wce.count_documents({}) == 1
    finally:
        set_fail_point(c, "off", {})
        c.close()


# ---- failCommand on the handshake (hello / isMaster) ------------------------

def _legacy_is_master(sock, client_meta=None):
    """Sends drivers' first handshake: OP_QUERY {ismaster: 1} on admin.$cmd."""
    from wire import op_query, parse_op_reply, read_message, OP_REPLY
    q = {"ismaster": 1, "helloOk": True}
    if client_meta is not None:
        q["client"] = client_meta
    rid, msg = op_query("admin.$cmd", q)
    sock.sendall(msg)
    _, resp_to, opcode, body = read_message(sock)
    assert opcode == OP_REPLY and resp_to == rid
    return parse_op_reply(body)[2][0]


def test_hello_fail_point_matches_the_first_handshake_by_app_name(server, fp_client):
    """The appName filter applies to the very first hello of a connection: the client
    metadata is taken from that hello before the fail point is evaluated."""
    import wire
    set_fail_point(fp_client, "alwaysOn", {"failCommands": ["hello"], "errorCode": 1234,
                                           "appName": "hello-fails"})
    s = wire.connect(server.port)
    try:
        reply = _legacy_is_master(s, {"application": {"name": "hello-fails"},
                                      "driver": {"name": "t", "version": "0"}})
        # failCommands ["hello"] also names the legacy isMaster/ismaster spellings.
        assert reply["ok"] == 0 and reply["code"] == 1234, reply
    finally:
        s.close()
    other = wire.connect(server.port)
    try:
        reply = _legacy_is_master(other, {"application": {"name": "someone-else"},
                                          "driver": {"name": "t", "version": "0"}})
        assert reply["ok"] == 1 and reply["ismaster"] is True
        # Once the handshake is done, the same connection keeps its app name.
        assert wire.command(other, {"hello": 1, "$db": "admin"})["ok"] == 1
    finally:
        other.close()


def test_hello_fail_point_closes_a_legacy_handshake_connection(server, fp_client):
    import wire
    set_fail_point(fp_client, {"times": 1}, {"failCommands": ["isMaster"], "closeConnection": True,
                                             "appName": "hello-closes"})
    s = wire.connect(server.port)
    try:
        from wire import op_query
        _, msg = op_query("admin.$cmd", {"isMaster": 1, "client": {"application": {"name": "hello-closes"}}})
        s.sendall(msg)
        assert wire.is_closed(s), "the connection was closed without a reply"
    finally:
        s.close()


def test_hello_fail_point_fails_the_op_msg_hello(server, fp_client):
    import wire
    set_fail_point(fp_client, {"times": 1}, {"failCommands": ["isMaster"], "errorCode": 91,
                                             "appName": "hello-msg"})
    s = wire.connect(server.port)
    try:
        first = wire.command(s, {"hello": 1, "$db": "admin",
                                 "client": {"application": {"name": "hello-msg"}}})
        assert first["ok"] == 0 and first["code"] == 91 and first["codeName"] == "ShutdownInProgress"
        # {times: 1}: the next hello (e.g. the streaming one) works again.
        assert wire.command(s, {"hello": 1, "$db": "admin"})["isWritablePrimary"] is True
    finally:
        s.close()


def test_fail_all_commands(server, fp_client):
    import wire
    s = wire.connect(server.port)
    try:
        wire.command(s, {"hello": 1, "$db": "admin", "client": {"application": {"name": "fail-all"}}})
        set_fail_point(fp_client, {"times": 1}, {"failAllCommands": True, "errorCode": 2,
                                                 "appName": "fail-all"})
        reply = wire.command(s, {"ping": 1, "$db": "admin"})
        assert reply["ok"] == 0 and reply["code"] == 2 and reply["codeName"] == "BadValue"
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
    finally:
        s.close()


def test_max_time_always_times_out_on_get_more_of_a_time_limited_cursor(fp_client, db):
    """A find with maxTimeMS passes its time limit on to its getMores (which drivers send
    without maxTimeMS): the fail point fires there too, and the cursor is gone after."""
    coll = fp_client[db.name].mt
    coll.insert_many([{"i": i} for i in range(10)])
    limited = coll.find(batch_size=2).max_time_ms(5000)
    unlimited = coll.find(batch_size=2)
    next(limited)
    next(unlimited)
    set_fail_point(fp_client, "alwaysOn", {}, name="maxTimeAlwaysTimeOut")
    try:
        assert len(unlimited.to_list()) == 9, "a cursor without maxTimeMS is not affected"
        with pytest.raises(OperationFailure) as exc:
            limited.to_list()
        assert exc.value.code == 50
        assert exc.value.details["codeName"] == "MaxTimeMSExpired"
    finally:
        set_fail_point(fp_client, "off", {}, name="maxTimeAlwaysTimeOut")
    cursor_id = limited.cursor_id
    with pytest.raises(OperationFailure) as exc:
        fp_client[db.name].command("getMore", cursor_id, collection="mt")
    assert exc.value.code == 43


def test_on_primary_transactional_write_skip_counts_documents(server, db):
    """mongod evaluates onPrimaryTransactionalWrite once per statement: {skip: 3} lets a
    first insert of three documents through and fails the next one."""
    c = MongoClient(server.uri(directConnection="true"), retryWrites=True)
    try:
        set_fail_point(c, {"skip": 3}, {"failBeforeCommitExceptionCode": 1, "closeConnection": False},
                       name="onPrimaryTransactionalWrite")
        coll = c[db.name].skipped
        coll.insert_many([{"_id": i} for i in range(3)])
        with pytest.raises(OperationFailure) as exc:
            coll.insert_one({"_id": 3})
        assert exc.value.code == 1
        assert sorted(d["_id"] for d in coll.find()) == [0, 1, 2]
    finally:
        set_fail_point(c, "off", {}, name="onPrimaryTransactionalWrite")
        c.close()

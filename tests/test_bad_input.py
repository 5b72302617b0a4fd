"""Malformed and hostile input: the server must reject it without dying."""

import socket
import struct

import bson
import pytest
from pymongo.errors import OperationFailure, WriteError

import wire


@pytest.fixture(autouse=True)
def server_survives(server, client):
    yield
    assert server.is_running(), "server process died:\n" + server.log_tail()
    assert client.admin.command("ping")["ok"] == 1


def closed_or_error_reply(sock, timeout=5.0):
    """After a bad message: 'closed' if the peer hung up, else the decoded reply doc."""
    sock.settimeout(timeout)
    try:
        _, _, opcode, body = wire.read_message(sock)
    except (ConnectionError, OSError):
        return "closed"
    assert opcode == wire.OP_MSG, f"unexpected reply opcode {opcode}"
    return wire.parse_op_msg(body)[1]


class TestFraming:
    def test_garbage_bytes_close_connection(self, server):
        s = wire.connect(server.port)
        s.sendall(b"\xff" * 64)
        assert wire.is_closed(s), "server should drop a connection sending garbage"
        s.close()

    def test_http_request_on_wire_port(self, server):
        s = wire.connect(server.port)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert wire.is_closed(s)
        s.close()

    def test_oversized_length_header(self, server):
        s = wire.connect(server.port)
        s.sendall(struct.pack("<iiii", 100 * 1024 * 1024, 1, 0, wire.OP_MSG) + b"\x00" * 64)
        assert wire.is_closed(s), "a 100 MB message exceeds maxMessageSizeBytes"
        s.close()

    def test_length_smaller_than_header(self, server):
        s = wire.connect(server.port)
        s.sendall(struct.pack("<iiii", 8, 1, 0, wire.OP_MSG))
        assert wire.is_closed(s)
        s.close()

    def test_truncated_message(self, server):
        _, msg = wire.op_msg({"ping": 1, "$db": "admin"})
        s = wire.connect(server.port)
        s.sendall(msg[: len(msg) - 5])
        s.shutdown(socket.SHUT_WR)
        assert wire.is_closed(s), "a message cut short by EOF must just close the connection"
        s.close()

    def test_other_connections_unaffected(self, server):
        good = wire.connect(server.port)
        bad = wire.connect(server.port)
        bad.sendall(b"\x00\x01\x02\x03" * 10)
        assert wire.is_closed(bad)
        assert wire.command(good, {"ping": 1, "$db": "admin"})["ok"] == 1
        good.close()
        bad.close()

    def test_unknown_opcode(self, server):
        s = wire.connect(server.port)
        body = b"\x00" * 20
        s.sendall(wire.header(16 + len(body), 77, 0, 4242) + body)
        result = closed_or_error_reply(s, timeout=3)
        assert result == "closed" or result.get("ok") == 0, result
        s.close()


class TestCorruptOpMsg:
    def test_corrupt_bson_body(self, server):
        raw = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
        raw[4] = 0x77  # invalid BSON element type
        _, msg = wire.op_msg(raw_body=bytes(raw))
        s = wire.connect(server.port)
        s.sendall(msg)
        result = closed_or_error_reply(s)
        # mongod replies with an error for some parse failures and closes for others
        assert result == "closed" or result.get("ok") == 0, result
        s.close()

    def test_bson_length_overruns_message(self, server):
        raw = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
        raw[0:4] = struct.pack("<i", len(raw) + 1000)
        _, msg = wire.op_msg(raw_body=bytes(raw))
        s = wire.connect(server.port)
        s.sendall(msg)
        result = closed_or_error_reply(s)
        assert result == "closed" or result.get("ok") == 0, result
        s.close()

    def test_missing_db(self, server):
        s = wire.connect(server.port)
        reply = wire.command(s, {"ping": 1})
        assert reply["ok"] == 0
        assert reply["code"] == 40571, reply
        # the connection remains usable
        assert wire.command(s, {"ping": 1, "$db": "admin"})["ok"] == 1
        s.close()

    def test_unknown_command_raw(self, server):
        s = wire.connect(server.port)
        reply = wire.command(s, {"frobnicate": 1, "$db": "admin"})
        assert reply["ok"] == 0 and reply["code"] == 59
        assert reply["codeName"] == "CommandNotFound"
        s.close()

    def test_unknown_command_via_client(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("frobnicate")
        assert exc.value.code == 59


class TestArgumentTypes:
    def test_find_filter_not_document(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("find", "c", filter=5)
        assert exc.value.code == 14
        assert exc.value.details["codeName"] == "TypeMismatch"

    def test_insert_documents_not_array(self, server, db):
        # raw: pymongo would try to turn `documents` into a document sequence
        s = wire.connect(server.port)
        reply = wire.command(s, {"insert": "c", "documents": "x", "$db": db.name})
        s.close()
        assert reply["ok"] == 0 and reply["code"] == 14, reply

    def test_find_limit_negative(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("find", "c", limit=-1)
        assert exc.value.code == 51024

    def test_unknown_field_in_command(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("find", "c", notAnOption=1)
        assert exc.value.code == 40415

    def test_sort_not_document(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("find", "c", sort="x")
        assert exc.value.code == 14


    @pytest.mark.parametrize(
        "cmd, path",
        [
            ({"insert": "c"}, "insert.documents"),
            ({"update": "c"}, "update.updates"),
            ({"update": "c", "updates": [{"u": {"$set": {"a": 1}}}]}, "update.updates.q"),
            ({"update": "c", "updates": [{"q": {}}]}, "update.updates.u"),
            ({"delete": "c"}, "delete.deletes"),
            ({"delete": "c", "deletes": [{"limit": 0}]}, "delete.deletes.q"),
            ({"delete": "c", "deletes": [{"q": {}}]}, "delete.deletes.limit"),
            ({"getMore": bson.Int64(1)}, "getMore.collection"),
            ({"killCursors": "c"}, "killCursors.cursors"),
            ({"distinct": "c"}, "distinct.key"),
            ({"aggregate": "c", "cursor": {}}, "aggregate.pipeline"),
            ({"createIndexes": "c"}, "createIndexes.indexes"),
            ({"dropIndexes": "c"}, "dropIndexes.index"),
            ({"convertToCapped": "c"}, "convertToCapped.size"),
        ],
    )
    def test_missing_required_field_is_idl_failed_to_parse(self, server, db, cmd, path):
        # mongod's command parser: 40414 and this wording for every required field.
        db.c.insert_one({})
        s = wire.connect(server.port)
        reply = wire.command(s, {**cmd, "$db": db.name})
        s.close()
        assert reply["ok"] == 0 and reply["code"] == 40414, reply
        assert reply["errmsg"] == f"BSON field '{path}' is missing but a required field"


class TestLimits:
    def test_document_just_over_16mib(self, server, db):
        doc = {"_id": 1, "s": "x" * (16 * 1024 * 1024)}  # > 16 MiB, < 16 MiB + 16 KiB
        s = wire.connect(server.port, timeout=30)
        reply = wire.command(s, {"insert": "big", "$db": db.name}, sequences=[("documents", [doc])])
        s.close()
        assert reply["ok"] == 1 and reply["n"] == 0, reply
        err = reply["writeErrors"][0]
        assert "object to insert too large" in err["errmsg"]
        assert err["code"] == 2, "mongod (insert.cpp fixDocumentForInsert) uses BadValue here"
        assert db.big.count_documents({}) == 0

    def test_17mb_document(self, server, db):
        doc = bson.encode({"_id": 1, "s": "x" * 17_000_000})
        s = wire.connect(server.port, timeout=30)
        rid, msg = wire.op_msg({"insert": "big", "$db": db.name}, sequences=[("documents", [doc])])
        s.sendall(msg)
        result = closed_or_error_reply(s, timeout=30)
        s.close()
        assert result != "closed", "mongod replies BSONObjectTooLarge rather than hanging up"
        assert result["ok"] == 0 and result["code"] == 10334, result
        assert db.big.count_documents({}) == 0

    def test_nesting_depth(self, coll):
        def nested(levels):
            d = {"data": 1}
            for _ in range(levels - 1):
                d = {"sub": d}
            return d

        coll.insert_one(nested(100))  # at the limit: accepted
        with pytest.raises(WriteError) as exc:
            coll.insert_one(nested(101))
        assert exc.value.code == 15, exc.value.details
        assert coll.count_documents({}) == 1

    def test_too_many_documents_in_one_insert(self, server, db):
        docs = [bson.encode({"_id": i}) for i in range(100_001)]
        s = wire.connect(server.port, timeout=60)
        reply = wire.command(s, {"insert": "many", "$db": db.name}, sequences=[("documents", docs)])
        s.close()
        assert reply["ok"] == 0 and reply["code"] == 16, {k: reply[k] for k in reply if k != "writeErrors"}
        assert db.many.count_documents({}) == 0

"""OP_COMPRESSED with zstd (compressor id 3): negotiation in `hello`, pymongo round trips
with `compressors=zstd`, and a bad zstd frame closing only its own connection."""

import struct
import sys

import bson
import pytest
from pymongo import MongoClient

import wire

# The module pymongo itself compresses zstd with (tests/requirements.txt installs it).
if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

OP_COMPRESSED = 2012
ZSTD_ID = 3


@pytest.fixture
def zstd_client(server):
    c = MongoClient(
        server.uri(directConnection="true"), compressors="zstd", serverSelectionTimeoutMS=5000
    )
    yield c
    c.close()


def compressed(opcode, payload, compressor_id, data):
    """An OP_COMPRESSED wrapping `payload` (a message minus its header) as `data`."""
    rid = wire.next_request_id()
    body = struct.pack("<iiB", opcode, len(payload), compressor_id) + data
    return rid, wire.header(16 + len(body), rid, 0, OP_COMPRESSED) + body


def test_hello_offers_zstd_when_asked(server):
    s = wire.connect(server.port)
    reply = wire.command(s, {"hello": 1, "compression": ["zstd", "zlib"], "$db": "admin"})
    assert reply["compression"] == ["zstd", "zlib"]
    s.close()


def test_pymongo_round_trips_with_zstd(zstd_client, request):
    coll = zstd_client["zstd_" + request.node.name[:20]]["c"]
    coll.drop()
    docs = [{"_id": i, "text": "compressible " * 50} for i in range(200)]
    coll.insert_many(docs)
    assert list(coll.find().sort("_id", 1)) == docs
    assert coll.count_documents({"_id": {"$gte": 100}}) == 100
    # The connection really negotiated zstd.
    pool = next(iter(zstd_client._topology._servers.values())).pool
    with pool.checkout() as conn:
        assert conn.compression_context is not None
        assert conn.compression_context.compressor_id == ZSTD_ID


def test_raw_zstd_request_gets_zstd_reply(server):
    _, msg = wire.op_msg({"ping": 1, "$db": "admin"})
    payload = msg[16:]
    _, req = compressed(wire.OP_MSG, payload, ZSTD_ID, zstd.compress(payload))
    s = wire.connect(server.port)
    s.sendall(req)
    _, _, opcode, body = wire.read_message(s)
    assert opcode == OP_COMPRESSED
    original, size, compressor_id = struct.unpack("<iiB", body[:9])
    assert (original, compressor_id) == (wire.OP_MSG, ZSTD_ID)
    inner = zstd.decompress(body[9:])
    assert len(inner) == size
    assert bson.decode(inner[5:])["ok"] == 1
    s.close()


@pytest.mark.parametrize("frame", [b"\xff" * 32, "truncated"])
def test_bad_zstd_frame_closes_only_that_connection(server, client, frame):
    _, msg = wire.op_msg({"ping": 1, "$db": "admin"})
    payload = msg[16:]
    if frame == "truncated":
        frame = zstd.compress(payload)[:-4]
    good = wire.connect(server.port)
    bad = wire.connect(server.port)
    bad.sendall(compressed(wire.OP_MSG, payload, ZSTD_ID, frame)[1])
    assert wire.is_closed(bad), "a bad zstd frame must close the connection"
    assert wire.command(good, {"ping": 1, "$db": "admin"})["ok"] == 1
    assert client.admin.command("ping")["ok"] == 1
    assert server.is_running()
    good.close()
    bad.close()

"""Raw MongoDB wire-protocol helpers for tests that bypass pymongo."""

import socket
import struct

import bson

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013

_request_id = 1000


def next_request_id():
    global _request_id
    _request_id += 1
    return _request_id


def header(length, request_id, response_to, opcode):
    return struct.pack("<iiii", length, request_id, response_to, opcode)


def op_query(collection, query, flags=0, skip=0, n=-1):
    rid = next_request_id()
    body = (
        struct.pack("<i", flags)
        + collection.encode() + b"\x00"
        + struct.pack("<ii", skip, n)
        + bson.encode(query)
    )
    return rid, header(16 + len(body), rid, 0, OP_QUERY) + body


def op_msg(body_doc=None, sequences=(), flags=0, raw_body=None):
    """Build an OP_MSG. `sequences` is a list of (identifier, [docs or raw bytes])."""
    rid = next_request_id()
    payload = struct.pack("<I", flags)
    payload += b"\x00" + (raw_body if raw_body is not None else bson.encode(body_doc))
    for ident, docs in sequences:
        encoded = b"".join(d if isinstance(d, (bytes, bytearray)) else bson.encode(d) for d in docs)
        section = ident.encode() + b"\x00" + encoded
        payload += b"\x01" + struct.pack("<i", 4 + len(section)) + section
    return rid, header(16 + len(payload), rid, 0, OP_MSG) + payload


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_message(sock):
    """Return (request_id, response_to, opcode, body_bytes)."""
    hdr = recv_exact(sock, 16)
    length, rid, resp_to, opcode = struct.unpack("<iiii", hdr)
    return rid, resp_to, opcode, recv_exact(sock, length - 16)


def parse_op_reply(body):
    flags, cursor_id, starting_from, n = struct.unpack("<iqii", body[:20])
    docs = bson.decode_all(body[20:])
    assert len(docs) == n
    return flags, cursor_id, docs


def parse_op_msg(body):
    (flags,) = struct.unpack("<I", body[:4])
    assert body[4] == 0, "expected a kind-0 section first"
    (doc_len,) = struct.unpack("<i", body[5:9])
    return flags, bson.decode(body[5:5 + doc_len])


def command(sock, doc, sequences=()):
    """Send an OP_MSG command and return the reply document."""
    rid, msg = op_msg(doc, sequences)
    sock.sendall(msg)
    _, resp_to, opcode, body = read_message(sock)
    assert opcode == OP_MSG, f"expected OP_MSG reply, got opcode {opcode}"
    assert resp_to == rid
    return parse_op_msg(body)[1]


def is_closed(sock, timeout=5.0):
    """True once the peer closes the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False

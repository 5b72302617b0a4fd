"""Writes the fuzz targets' seed inputs into fuzz/seeds/<target>/ (committed; run again
after changing it): wire messages of every kind the decoder takes, and BSON documents
whose first two values span BSON's types. `python fuzz/seeds.py` (needs pymongo's bson)."""

import struct
import zlib
from pathlib import Path

import bson
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

HERE = Path(__file__).parent


def header(length, op):
    return struct.pack("<iiii", length, 1, 0, op)


def op_msg(doc, flags=0, sequence=None):
    body = struct.pack("<I", flags) + b"\x00" + bson.encode(doc)
    if sequence:
        ident, docs = sequence
        payload = b"".join(bson.encode(d) for d in docs)
        section = ident.encode() + b"\x00" + payload
        body += b"\x01" + struct.pack("<i", 4 + len(section)) + section
    return header(16 + len(body), 2013) + body


def op_query(doc):
    body = struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + bson.encode(doc)
    return header(16 + len(body), 2004) + body


def compressed(message, compressor):
    inner = message[16:]
    data = {0: inner, 2: zlib.compress(inner)}[compressor]
    body = struct.pack("<iiB", 2013, len(inner), compressor) + data
    return header(16 + len(body), 2012) + body


def wire():
    hello = op_msg({"hello": 1, "$db": "admin"})
    return {
        "op_msg_hello": hello,
        "op_msg_insert_sequence": op_msg({"insert": "c", "$db": "t"},
                                         sequence=("documents", [{"_id": 1}, {"_id": 2}])),
        "op_msg_checksum_flag": op_msg({"ping": 1, "$db": "admin"}, flags=1) + b"\0\0\0\0",
        "op_query_ismaster": op_query({"isMaster": 1}),
        "op_compressed_noop": compressed(hello, 0),
        "op_compressed_zlib": compressed(hello, 2),
    }


def keystring():
    pairs = [
        (1, 2.5), (Int64(-3), Decimal128("1.10")), (float("nan"), float("-inf")),
        ("abc", "ab\x00c"), ({"a": 1}, {"a": [1, 2]}), ([1, [2]], []),
        (Binary(b"\x00\x01", 0), Binary(b"", 4)), (ObjectId("5f" * 12), True),
        (bson.datetime_ms.DatetimeMS(0), Timestamp(5, 1)), (Regex("^a", "i"), Code("x")),
        (MinKey(), MaxKey()), (None, False), (-0.0, 0), (Decimal128("NaN"), 2**53 + 1),
    ]
    return {f"pair_{i}": bson.encode({"a": a, "b": b}) for i, (a, b) in enumerate(pairs)}


for target, seeds in (("wire_decode", wire()), ("keystring", keystring())):
    folder = HERE / "seeds" / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)
    print(f"{target}: {len(seeds)} seeds in {folder}")

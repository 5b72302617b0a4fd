"""Writes the fuzz targets' seed inputs into fuzz/seeds/<target>/ (committed; run again
after changing it): wire messages of every kind the decoder takes, BSON documents whose
first two values span BSON's types, and for `query` the filters, projections, updates
and pipelines of pymongo's CRUD spec tests (test/crud/unified/*.json of pymongo's source
distribution, which the conformance run keeps in ~/.cache/tailstream/conformance/) with
their collections' documents. `python fuzz/seeds.py [PYMONGO_SOURCE_DIR]` (needs
pymongo's bson)."""

import glob
import json
import os
import struct
import sys
import zlib
from pathlib import Path

from bson import json_util

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


QUERY_SEEDS_MAX = 400


def query(source_dir):
    """One seed per spec-test operation that has a filter, an update, a projection or a
    pipeline, with its test file's initial documents (as the target reads them)."""
    seeds = {
        "handwritten_0": bson.encode({
            "filter": {"a": {"$gt": 1}, "b": {"$in": [1, "x"]}},
            "projection": {"a": 1, "c": {"$slice": 2}},
            "update": {"$set": {"a.$[e]": 5}, "$inc": {"n": 1}},
            "arrayFilters": [{"e": {"$gte": 2}}],
            "pipeline": [{"$group": {"_id": "$b", "n": {"$sum": 1}}}, {"$sort": {"n": -1}}],
            "docs": [{"_id": 1, "a": [1, 2, 3], "b": 1, "c": [4, 5, 6]}, {"_id": 2, "b": "x"}],
        }),
    }
    files = sorted(glob.glob(os.path.join(source_dir, "test", "crud", "unified", "*.json")))
    for path in files:
        with open(path) as f:
            spec = json_util.loads(f.read())
        docs = [d for coll in spec.get("initialData", []) for d in coll.get("documents", [])]
        for t, test in enumerate(spec.get("tests", [])):
            for o, op in enumerate(test.get("operations", [])):
                args = op.get("arguments", {})
                seed = {k: args[k] for k in ("filter", "projection", "update", "pipeline",
                                             "arrayFilters", "upsert") if k in args}
                if "replacement" in args:
                    seed["update"] = args["replacement"]
                if not seed:
                    continue
                seed["docs"] = docs[:16]
                name = f"{Path(path).stem}_{t}_{o}"
                try:
                    seeds[name] = bson.encode(seed)
                except Exception:  # noqa: BLE001 - a value bson cannot encode: skipped
                    continue
                if len(seeds) >= QUERY_SEEDS_MAX:
                    return seeds
    return seeds


def pymongo_source():
    if len(sys.argv) > 1:
        return sys.argv[1]
    found = sorted(p for p in glob.glob(os.path.expanduser("~/.cache/tailstream/conformance/pymongo-*"))
                   if os.path.isdir(p))
    if not found:
        sys.exit("no pymongo source: run the conformance suite once, or give its folder")
    return found[-1]


for target, seeds in (("wire_decode", wire()), ("keystring", keystring()),
                      ("query", query(pymongo_source()))):
    folder = HERE / "seeds" / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)
    print(f"{target}: {len(seeds)} seeds in {folder}")

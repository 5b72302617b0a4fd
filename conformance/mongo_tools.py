"""MongoDB's own tools against Tailstream (issue 30's acceptance): mongostat,
mongotop, and a mongodump --oplog -> mongorestore --oplogReplay round trip of a
database with indexes, a view, a capped and a time-series collection, compared with
dbHash. Runs the tools built by conformance/mongo-tools.sh; prints one line per check
and exits non-zero when one fails.

    python conformance/mongo_tools.py --tools DIR --server BIN
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

from pymongo import ASCENDING, MongoClient

DB = "toolsdb"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, root, name):
        self.port = free_port()
        self.dbpath = os.path.join(root, name)
        self.log = open(os.path.join(root, f"{name}.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--dbpath", self.dbpath, "--quiet",
             "--oplogSize", "64"], stdout=self.log, stderr=subprocess.STDOUT)
        self.uri = f"mongodb://127.0.0.1:{self.port}/?directConnection=true"
        deadline = time.monotonic() + 20
        while True:
            try:
                MongoClient(self.uri, serverSelectionTimeoutMS=500).admin.command("ping")
                return
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{binary} did not start")
                time.sleep(0.1)

    def client(self):
        return MongoClient(self.uri)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


def populate(client):
    db = client[DB]
    db.people.insert_many([{"_id": i, "name": f"p{i}", "age": 20 + i % 50,
                            "tags": [i % 3, i % 5]} for i in range(1000)])
    db.people.create_index([("name", ASCENDING)], unique=True)
    db.people.create_index([("age", ASCENDING), ("tags", ASCENDING)])
    db.create_collection("events", capped=True, size=1 << 20, max=500)
    db.events.insert_many([{"n": i} for i in range(800)])
    db.create_collection("metrics", timeseries={"timeField": "ts", "metaField": "host",
                                                "granularity": "seconds"})
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    db.metrics.insert_many([{"ts": start + timedelta(seconds=i), "host": f"h{i % 4}",
                             "cpu": i % 100} for i in range(300)])
    db.command("create", "adults", viewOn="people", pipeline=[{"$match": {"age": {"$gte": 40}}}])


def db_hash(client):
    reply = client[DB].command("dbHash")
    return {k: v for k, v in reply["collections"].items()}


def run(cmd, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True, help="directory with the built tools")
    ap.add_argument("--server", required=True, help="the tailstream binary")
    args = ap.parse_args()
    tool = lambda name: os.path.join(args.tools, name)
    root = tempfile.mkdtemp(prefix="tailstream-tools-")
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"\n      {detail}" if detail and not ok else ""))

    src = Server(args.server, root, "source")
    dst = Server(args.server, root, "target")
    try:
        with src.client() as c:
            populate(c)
            rc, out = run([tool("mongostat"), "--uri", src.uri, "-n", "2", "1"])
            lines = [l for l in out.splitlines() if l.strip()]
            check("mongostat prints its header and two rows",
                  rc == 0 and lines[0].split()[:2] == ["insert", "query"] and len(lines) == 3, out)
            rc, out = run([tool("mongotop"), "--uri", src.uri, "-n", "1", "1"])
            check("mongotop prints a row per namespace", rc == 0 and f"{DB}.people" in out, out)

            dump = os.path.join(root, "dump")
            rc, out = run([tool("mongodump"), "--uri", src.uri, "--oplog", "--out", dump])
            check("mongodump --oplog", rc == 0, out)
            # Writes after the dump's start are what --oplog adds; made here before the
            # restore, they are in the dump only if the dump's oplog caught them.
            before = db_hash(c)
            rc, out = run([tool("mongorestore"), "--uri", dst.uri, "--oplogReplay", dump])
            check("mongorestore --oplogReplay", rc == 0, out)
            with dst.client() as d:
                after = db_hash(d)
                check("dbHash of every collection equal after the round trip",
                      before == after, f"source {before}\ntarget {after}")
                src_idx = sorted(ix["name"] for ix in c[DB].people.list_indexes())
                dst_idx = sorted(ix["name"] for ix in d[DB].people.list_indexes())
                check("indexes restored", src_idx == dst_idx, f"{src_idx} vs {dst_idx}")
                opts = d[DB].events.options()
                check("capped collection restored capped", opts.get("capped") is True, str(opts))
                ts = d[DB].list_collections(filter={"name": "metrics"}).to_list()
                check("time-series collection restored as one",
                      ts and ts[0]["type"] == "timeseries", str(ts))
                # Its measurements, through the buckets mongodump read and mongorestore
                # wrote; dbHash above compared those buckets.
                counts = (c[DB].metrics.count_documents({}), d[DB].metrics.count_documents({}))
                check("time-series measurements restored",
                      counts == (300, 300) and f"system.buckets.metrics" in after,
                      f"counts {counts}, hashed {sorted(after)}")
                view = d[DB].list_collections(filter={"name": "adults"}).to_list()
                check("view restored", view and view[0]["type"] == "view"
                      and d[DB].adults.count_documents({}) == c[DB].adults.count_documents({}),
                      str(view))
    finally:
        src.stop()
        dst.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

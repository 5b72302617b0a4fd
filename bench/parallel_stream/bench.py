"""Parallel change streams (issue 28): seed 004's experiment on this machine.

1 KB documents (YCSB-like) are loaded into 1, 2 or 4 collections of a fresh server
whose oplog holds them all; then the changes are replayed from the time before the
load, timed from the open to the last event: one ordinary change stream on the
deployment against `parallelChangeStream` with 1, 2, 4 and 8 buckets, by namespace
and by document key (with one collection, also by document key with `nsRegex` naming
it: each bucket reads only its share), each stream or bucket read by its own consumer process
(`getMore`s of 10,000 events, kept as raw BSON). Prints the seed's table (events, ms,
events/s) with the server's CPU seconds.

    python bench/parallel_stream/bench.py --server BIN [--docs N] [--collections 1,2,4]
        [--buckets 1,2,4,8] [--server-cpus 0-3 --client-cpus 4-15]
"""

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient
from pymongo.errors import PyMongoError

RAW = CodecOptions(document_class=RawBSONDocument)
GETMORE_BATCH = 10_000
PAD = "x" * 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def consume(uri, cursor_id, total, counted, cpus):
    """One consumer: getMores on one cursor until the events of every consumer add up
    to `total`."""
    if cpus:
        os.sched_setaffinity(0, parse_cpus(cpus))
    with MongoClient(uri) as c:
        admin = c.get_database("admin", codec_options=RAW)
        while counted.value < total:
            # codec_options on the call itself: command() does not take the
            # database's, and decoding every event into dicts cost 8 us an event.
            r = admin.command("getMore", cursor_id, collection="$cmd.aggregate",
                              batchSize=GETMORE_BATCH, maxTimeMS=100, codec_options=RAW)
            n = len(r["cursor"]["nextBatch"])
            if n:
                with counted.get_lock():
                    counted.value += n


def parse_cpus(spec):
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def replay(uri, pid, cursors, total, client_cpus):
    counted = mp.Value("q", 0)
    procs = [mp.Process(target=consume, args=(uri, cid, total, counted, client_cpus))
             for cid in cursors]
    children0 = consumers_cpu_seconds()
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.monotonic() - t0
    return (counted.value, wall, cpu_seconds(pid) - cpu0,
            consumers_cpu_seconds() - children0)


def consumers_cpu_seconds():
    """CPU seconds of the consumer processes joined so far (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


LOADERS_PER_COLLECTION = 4


def load(client, docs, collections):
    """Inserts `docs` documents, split evenly over the collections, each collection
    filled by LOADERS_PER_COLLECTION threads of batches of 1,000 (ids interleaved by
    batch)."""
    db = client.bench
    per = docs // collections

    def fill(ci, part):
        coll = db[f"c{ci}"]
        for lo in range(part * 1000, per, 1000 * LOADERS_PER_COLLECTION):
            coll.insert_many([{"_id": i, "pad": PAD} for i in range(lo, min(lo + 1000, per))],
                             ordered=False)
    threads = [threading.Thread(target=fill, args=(ci, part)) for ci in range(collections)
               for part in range(LOADERS_PER_COLLECTION)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per * collections


def run_collections(args, collections):
    root = tempfile.mkdtemp(prefix="tailstream-bench-parallel.")
    port = free_port()
    oplog_mb = max(1024, args.docs * 2 // 1000)
    cmd = [args.server, "--port", str(port), "--dbpath", root, "--bind_ip", "127.0.0.1",
           "--quiet", "--oplogSize", str(oplog_mb)]
    if args.server_cpus:
        cmd = ["taskset", "-c", args.server_cpus] + cmd
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with MongoClient(uri, serverSelectionTimeoutMS=300) as c:
                    c.admin.command("ping")
                break
            except PyMongoError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        pid = server.pid
        with MongoClient(uri) as c:
            start = c.admin.command("ping")["operationTime"]
            total = load(c, args.docs, collections)
            rows = []
            # The ordinary stream: one cursor on the deployment.
            r = c.admin.command("aggregate", 1, pipeline=[
                {"$changeStream": {"allChangesForCluster": True, "startAtOperationTime": start}}],
                cursor={"batchSize": 0})
            rows.append(("change stream", "-", 1,
                         replay(uri, pid, [r["cursor"]["id"]], total, args.client_cpus)))
            for by in args.by:
                for n in args.buckets:
                    r = c.admin.command("parallelChangeStream", 1, nBuckets=n, by=by,
                                        startAtOperationTime=start)
                    rows.append(("parallelChangeStream", by, n,
                                 replay(uri, pid, r["cursors"], total, args.client_cpus)))
            if collections == 1 and "documentKey" in args.by:
                # nsRegex naming the one collection: each bucket reads that collection's
                # index of the oplog and fetches only its own entries (their key hash).
                for n in args.buckets:
                    r = c.admin.command("parallelChangeStream", 1, nBuckets=n,
                                        by="documentKey", nsRegex="^bench\\.c0$",
                                        startAtOperationTime=start)
                    rows.append(("parallelChangeStream, nsRegex ^bench\\.c0$", "documentKey",
                                 n, replay(uri, pid, r["cursors"], total, args.client_cpus)))
        return total, rows
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--docs", type=int, default=400_000)
    ap.add_argument("--collections", default="1,2,4")
    ap.add_argument("--buckets", default="1,2,4,8")
    ap.add_argument("--server-cpus", default="")
    ap.add_argument("--client-cpus", default="")
    ap.add_argument("--by", default="ns,documentKey",
                    help="the splits to run, comma-separated: ns, documentKey")
    args = ap.parse_args()
    args.buckets = [int(b) for b in args.buckets.split(",")]
    args.by = args.by.split(",")
    if not set(args.by) <= {"ns", "documentKey"}:
        ap.error("--by takes ns and documentKey")
    print(f"### Parallel change streams: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, {args.docs:,} documents of 1 KB"
          f"{', server on CPUs ' + args.server_cpus if args.server_cpus else ''}"
          f"{', consumers on CPUs ' + args.client_cpus if args.client_cpus else ''}\n")
    print("| collections | stream | by | buckets (consumers) | events | ms | events/s "
          "| server CPU s | consumers' CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for collections in [int(c) for c in args.collections.split(",")]:
        total, rows = run_collections(args, collections)
        for stream, by, n, (events, wall, cpu, consumers_cpu) in rows:
            if events < total:
                print(f"short: {events} of {total}", file=sys.stderr)
            print(f"| {collections} | {stream} | {by} | {n} | {events:,} | {wall * 1000:,.0f} "
                  f"| {events / wall:,.0f} | {cpu:.2f} | {consumers_cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()

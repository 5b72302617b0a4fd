"""Replica-set benchmarks (issue 27): replication lag and failover time of a
three-member Tailstream set on this machine, each member its own process.

    lag       primary acknowledgement to the event on a secondary's change stream,
              p50/p99/max, at paced write rates (--rates, writes/s; each write one
              insert_one, or insert_many of --batch documents to reach higher rates).
    failover  kill -9 of the primary to the first write acknowledged by the new
              primary (--failovers times, at each --election-ms), with a writer
              inserting continuously (w: majority, retryable writes).
    watchers  seed 001 on a secondary: the secondary's server CPU while the primary
              takes --watch-rate writes/s into --watch-collections collections, with
              0, 1 and 100 change streams open on the secondary on a written
              collection, and 100 on a collection never written (--seconds each).
    join      a fourth member added to a set holding --join-mb of documents after the
              log was purged (a snapshot taken past 5,000 entries): seconds until it
              holds them all, and the peak memory (VmHWM) of the new member and of the
              primary (before and after the join), which read and write the snapshot
              in pieces.

Prints a Markdown section for BENCHMARKS.md. Members may be pinned to CPUs with
--member-cpus "0-3,4-7,8-11" (taskset) and the client with --client-cpus.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from pymongo import MongoClient
from pymongo.errors import DuplicateKeyError, PyMongoError

SET_WAIT_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Member:
    def __init__(self, binary, root, index, election_ms, cpus):
        self.binary = binary
        self.port = free_port()
        self.dbpath = os.path.join(root, f"m{index}")
        self.log = os.path.join(root, f"m{index}.log")
        self.election_ms = election_ms
        self.cpus = cpus
        self.proc = None
        os.makedirs(self.dbpath, exist_ok=True)

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        cmd = [self.binary, "--replSet", "rs0", "--port", str(self.port), "--dbpath",
               self.dbpath, "--bind_ip", "127.0.0.1", "--quiet",
               "--setParameter", f"replElectionTimeoutMillis={self.election_ms}"]
        if self.cpus:
            cmd = ["taskset", "-c", self.cpus] + cmd
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with MongoClient(self.host, directConnection=True,
                                 serverSelectionTimeoutMS=300) as c:
                    c.admin.command("ping")
                return
            except PyMongoError:
                time.sleep(0.05)
        raise RuntimeError(f"member {self.host} did not start; see {self.log}")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        sock = f"/tmp/mongodb-{self.port}.sock"
        if os.path.exists(sock):
            os.unlink(sock)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()


class ReplicaSet:
    def __init__(self, binary, election_ms, member_cpus):
        self.root = tempfile.mkdtemp(prefix="tailstream-bench-replset.")
        cpus = (member_cpus.split(",") if member_cpus else [None] * 3)
        self.members = [Member(binary, self.root, i, election_ms, cpus[i]) for i in range(3)]

    def __enter__(self):
        for m in self.members:
            m.start()
        config = {"_id": "rs0", "members": [{"_id": i, "host": m.host}
                                            for i, m in enumerate(self.members)]}
        with MongoClient(self.members[0].host, directConnection=True) as c:
            c.admin.command("replSetInitiate", config)
        with self.client() as c:
            deadline = time.monotonic() + SET_WAIT_S
            while len(c.secondaries) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the set did not settle")
                c.admin.command("ping")
                time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        for m in self.members:
            m.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def uri(self):
        return "mongodb://" + ",".join(m.host for m in self.members) + "/?replicaSet=rs0"

    def client(self, **kw):
        return MongoClient(self.uri(), serverSelectionTimeoutMS=SET_WAIT_S * 1000, **kw)

    def primary(self):
        for m in self.members:
            if m.proc.poll() is not None:
                continue
            try:
                with MongoClient(m.host, directConnection=True, serverSelectionTimeoutMS=500) as c:
                    if c.admin.command("hello").get("isWritablePrimary"):
                        return m
            except PyMongoError:
                pass
        return None


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def lag_row(rs, rate, seconds, batch, writers=1):
    """Paced writes at `rate` documents/s for `seconds` (from `writers` threads, each
    taking every writers-th write of one schedule); the lag of each document from its
    write's acknowledgement to its event on a secondary's stream."""
    primary = rs.primary()
    secondary = next(m for m in rs.members if m is not primary)
    acked = {}
    seen = {}
    total = int(rate * seconds)
    ready = threading.Event()

    def read():
        with MongoClient(secondary.host, directConnection=True,
                         readPreference="secondaryPreferred") as c:
            with c.bench.lag.watch(max_await_time_ms=100) as stream:
                ready.set()
                while len(seen) < total:
                    event = stream.try_next()
                    now = time.perf_counter()
                    if event is not None and event["operationType"] == "insert":
                        seen[event["documentKey"]["_id"]] = now

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(30)
    with rs.client(maxPoolSize=max(100, writers)) as c:
        coll = c.bench.lag
        interval = batch / rate
        start = time.perf_counter()

        def write(k):
            for first in range(k * batch, total, batch * writers):
                due = start + (first // batch) * interval
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                ids = list(range(first, min(first + batch, total)))
                if batch == 1:
                    coll.insert_one({"_id": ids[0], "x": 1})
                else:
                    coll.insert_many([{"_id": i, "x": 1} for i in ids])
                now = time.perf_counter()
                for i in ids:
                    acked[i] = now

        threads = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        achieved = total / (time.perf_counter() - start)
    reader.join(30)
    lags = [(seen[i] - acked[i]) * 1000 for i in acked if i in seen]
    missing = total - len(lags)
    with rs.client() as c:
        c.bench.lag.drop()
    return {
        "rate": rate, "achieved": achieved, "batch": batch, "events": len(lags),
        "missing": missing, "p50": percentile(lags, 50), "p99": percentile(lags, 99),
        "max": max(lags),
    }


def failover_once(rs, writer_state):
    """Kills the primary; returns seconds from the kill to the first write the new
    primary acknowledged, then restarts the killed member and waits for it."""
    old = rs.primary()
    writer_state["acks"].clear()
    time.sleep(0.3)
    killed_at = time.perf_counter()
    old.kill9()
    deadline = killed_at + SET_WAIT_S
    while time.perf_counter() < deadline:
        after = [t for t, host in list(writer_state["acks"]) if t > killed_at and host != old.host]
        if after:
            took = min(after) - killed_at
            break
        time.sleep(0.01)
    else:
        raise RuntimeError("no write was acknowledged after the failover")
    old.start()
    # The restarted member catches up before the next round.
    with MongoClient(old.host, directConnection=True, readPreference="secondaryPreferred") as c:
        target = writer_state["count"]
        while c.bench.failover.estimated_document_count() < target - 1:
            time.sleep(0.05)
    return took


def failover_rows(binary, election_ms, failovers, member_cpus):
    with ReplicaSet(binary, election_ms, member_cpus) as rs:
        state = {"acks": [], "count": 0, "stop": False}

        def write():
            with rs.client(retryWrites=True, w="majority") as c:
                coll = c.bench.failover
                n = 0
                while not state["stop"]:
                    try:
                        coll.insert_one({"_id": n})
                    except DuplicateKeyError:
                        # An earlier attempt whose answer was lost went through.
                        pass
                    except PyMongoError:
                        time.sleep(0.01)
                        continue
                    addr = c.primary
                    state["acks"].append((time.perf_counter(), f"{addr[0]}:{addr[1]}"
                                          if addr else ""))
                    n += 1
                    state["count"] = n
                    time.sleep(0.005)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        times = []
        for i in range(failovers):
            took = failover_once(rs, state)
            times.append(took)
            print(f"  failover {i + 1}/{failovers} at {election_ms} ms: {took:.3f} s",
                  file=sys.stderr)
        state["stop"] = True
        writer.join(10)
    return times


def cpu_seconds(pid):
    """User plus system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def namespace_bit(ns):
    """The engine's commit-bus bit of a namespace (`core/bus.rs` `namespace_bit`: FNV-1a
    modulo 64): a collection stream waits on its bit and wakes for every commit of a
    namespace sharing it."""
    h = 0xCBF29CE484222325
    for b in ns.encode():
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h % 64


def idle_collections(collections):
    """An idle collection name sharing a written collection's bit, and one on a bit of
    its own."""
    written = {namespace_bit(f"bench.c{i}") for i in range(collections)}
    names = (f"idle{i}" for i in range(10_000))
    sharing = next(n for n in names if namespace_bit(f"bench.{n}") in written)
    apart = next(n for n in names if namespace_bit(f"bench.{n}") not in written)
    return sharing, apart


def watchers_row(rs, streams, watched, rate, seconds, collections):
    """The secondary's CPU over `seconds` of paced writes (`rate` documents/s, spread
    over `collections` collections, 10 per insert) with `streams` change streams open
    on it, on collection `watched`; and the events the streams received."""
    primary = rs.primary()
    secondary = next(m for m in rs.members if m is not primary)
    received = [0] * streams
    stop = threading.Event()
    opened = threading.Barrier(streams + 1) if streams else None
    client = MongoClient(secondary.host, directConnection=True,
                         readPreference="secondaryPreferred", maxPoolSize=streams + 10)

    def read(i):
        # The driver's default wait (the server's 1 s): an idle stream's getMore
        # comes back empty once a second.
        with client.bench[watched].watch() as stream:
            opened.wait(60)
            while not stop.is_set():
                if stream.try_next() is not None:
                    received[i] += 1

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(streams)]
    for t in readers:
        t.start()
    if opened:
        opened.wait(60)
    time.sleep(1)  # the streams' first getMores are waiting
    batch = 10
    with rs.client() as c:
        colls = [c.bench[f"c{i}"] for i in range(collections)]
        before = cpu_seconds(secondary.proc.pid)
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            due = start + n / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            colls[(n // batch) % collections].insert_many(
                [{"n": n + i, "pad": "x" * 100} for i in range(batch)])
            n += batch
        elapsed = time.perf_counter() - start
        time.sleep(0.5)  # the last writes reach the secondary
        cpu = cpu_seconds(secondary.proc.pid) - before
    stop.set()
    for t in readers:
        t.join(5)
    client.close()
    return {"streams": streams, "watched": watched, "achieved": n / elapsed,
            "cpu_s": cpu, "cpu_pct": 100 * cpu / elapsed, "events": sum(received)}


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# openraft builds a snapshot every 5,000 entries (its default policy) and the log
# before it is purged at once: a member added after that many gets the snapshot.
ENTRIES_PAST_A_SNAPSHOT = 5_200


def join_row(rs, binary, data_mb):
    """Loads `data_mb` of 1 MB documents, writes enough small entries for a snapshot,
    then adds a fourth member (no vote) and times its catch-up."""
    big = "x" * ((1 << 20) - 100)
    with rs.client() as c:
        coll = c.bench.join
        for start in range(0, data_mb, 16):
            coll.insert_many([{"_id": i, "big": big} for i in range(start, min(start + 16, data_mb))])

        def small(t):
            with rs.client() as cw:
                for i in range(ENTRIES_PAST_A_SNAPSHOT // 8):
                    cw.bench.small.insert_one({"_id": f"{t}-{i}"})
        threads = [threading.Thread(target=small, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        want = coll.count_documents({})
        fourth = Member(binary, rs.root, 3, rs.members[0].election_ms, None)
        fourth.start()
        rs.members.append(fourth)
        config = c.admin.command("replSetGetConfig")["config"]
        config["version"] += 1
        config["members"].append({"_id": 3, "host": fourth.host, "votes": 0, "priority": 0})
        primary_before_mb = peak_rss_mb(rs.primary().proc.pid)
        began = time.monotonic()
        c.admin.command("replSetReconfig", config)
    with MongoClient(fourth.host, directConnection=True, readPreference="secondaryPreferred",
                     serverSelectionTimeoutMS=5000) as f:
        deadline = began + SET_WAIT_S * 5
        while True:
            # The collection's count as stored (no scan: a scan's own memory would
            # count in the peak); the documents are checked after the peak is read.
            try:
                if f.bench.command("count", "join")["n"] == want:
                    break
            except PyMongoError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the fourth member did not catch up")
            time.sleep(0.05)
        seconds = time.monotonic() - began
        primary = rs.primary()
        peaks = {"new_peak_mb": peak_rss_mb(fourth.proc.pid),
                 "primary_peak_mb": peak_rss_mb(primary.proc.pid)}
        held = sum(1 for _ in f.bench.join.find({}, {"_id": 1}))
        if held != want:
            raise RuntimeError(f"the fourth member holds {held} of {want} documents")
    return {"seconds": seconds, "docs": want, "primary_before_mb": primary_before_mb, **peaks}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--scenarios", default="lag,failover")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--writers", type=int, default=1,
                    help="writer threads sharing the paced schedule (lag)")
    ap.add_argument("--batch", type=int, default=0,
                    help="documents per write (0: 1 up to 1,000/s, else rate/1,000)")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--election-ms", default="10000,1000")
    ap.add_argument("--member-cpus", default="")
    ap.add_argument("--watch-rate", type=float, default=1000)
    ap.add_argument("--watch-collections", type=int, default=4)
    ap.add_argument("--join-mb", type=int, default=512)
    args = ap.parse_args()
    scenarios = args.scenarios.split(",")
    print(f"### Replica set (3 members, one machine): {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs\n")
    if "lag" in scenarios:
        print("Replication lag: primary acknowledgement to the event on a secondary's change stream "
              f"({args.writers} writer thread{'s' if args.writers > 1 else ''}).\n")
        print("| writes/s asked | achieved | docs per write | events | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|---|")
        with ReplicaSet(args.server, 10000, args.member_cpus) as rs:
            for rate in [float(r) for r in args.rates.split(",")]:
                batch = args.batch or max(1, int(rate // 1000))
                r = lag_row(rs, rate, args.seconds, batch, args.writers)
                print(f"| {rate:,.0f} | {r['achieved']:,.0f} | {batch} | {r['events']:,} "
                      f"| {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} |", flush=True)
        print()
    if "watchers" in scenarios:
        print(f"Watchers on a secondary: its server CPU while the primary takes "
              f"{args.watch_rate:,.0f} writes/s into {args.watch_collections} collections "
              f"(10 documents per insert), {args.seconds:g} s per row.\n")
        print("| change streams on the secondary | on | writes/s achieved | secondary CPU s "
              "| CPU % of one core | events received |")
        print("|---|---|---|---|---|---|")
        with ReplicaSet(args.server, 10000, args.member_cpus) as rs:
            sharing, apart = idle_collections(args.watch_collections)
            rows = [(0, "c0"), (1, "c0"), (100, "c0"), (1, apart), (100, apart),
                    (100, sharing), (0, "c0")]
            names = {"c0": "a written collection",
                     apart: "an idle collection (its own bus bit)",
                     sharing: "an idle collection (a written one's bus bit)"}
            for streams, watched in rows:
                r = watchers_row(rs, streams, watched, args.watch_rate, args.seconds,
                                 args.watch_collections)
                what = names[watched]
                print(f"| {streams} | {what} | {r['achieved']:,.0f} | {r['cpu_s']:.2f} "
                      f"| {r['cpu_pct']:.1f} | {r['events']:,} |", flush=True)
        print()
    if "join" in scenarios:
        print(f"A fourth member joining a set that holds {args.join_mb:,} MB of documents, "
              "from a snapshot.\n")
        print("| documents | seconds to hold them all | MB/s | new member peak RSS MB "
              "| primary peak RSS MB before the join | after |")
        print("|---|---|---|---|---|---|")
        with ReplicaSet(args.server, 10000, args.member_cpus) as rs:
            r = join_row(rs, args.server, args.join_mb)
            print(f"| {r['docs']:,} | {r['seconds']:.1f} | {args.join_mb / r['seconds']:.0f} "
                  f"| {r['new_peak_mb']:,.0f} | {r['primary_before_mb']:,.0f} "
                  f"| {r['primary_peak_mb']:,.0f} |", flush=True)
        print()
    if "failover" in scenarios:
        print("Failover: kill -9 of the primary to the first write acknowledged by the new primary.\n")
        print("| electionTimeoutMillis | failovers | p50 s | p99 s | max s |")
        print("|---|---|---|---|---|")
        for election_ms in [int(e) for e in args.election_ms.split(",")]:
            times = failover_rows(args.server, election_ms, args.failovers, args.member_cpus)
            print(f"| {election_ms:,} | {len(times)} | {statistics.median(times):.2f} "
                  f"| {percentile(times, 99):.2f} | {max(times):.2f} |", flush=True)


if __name__ == "__main__":
    main()

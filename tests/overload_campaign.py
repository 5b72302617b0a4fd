"""Overload campaign (issue 32): many connections and cursors, slow consumers that never
read, connection churn and oversized input, against one server process.

Phases, each reporting its figures:
1. baseline: a paced producer (`insert_one`, w: 1) into `collections` collections and
   `fast` consumers, each a database change stream read with `watch()` in a thread:
   the producer's acknowledgement latency and the events' latency (insert to receipt,
   one clock);
2. load: `connections` raw connections open `streams` cursors (change streams on the
   collections and tailable awaitData cursors on a capped collection, alternately, or
   as `tailable_share` says: 0 for change streams only, all on one collection with
   `collections=1`);
   `readers` of the change streams are read by one thread with short getMores, the
   others never; the same producer and consumers run again: their latency against the
   baseline, the server's RSS (current and peak);
3. slow bus consumers: a producer inserts into a small capped collection (the bus)
   at the same rate while a fast tailable reader keeps up and `slow` tailable readers
   read one document every 200 ms, falling a whole collection behind: the slow ones
   get CappedPositionLost (136), as mongod's, the producer and the fast reader their
   usual latency, every document delivered to the fast one;
4. idle timeout: everything stops reading; the server closes the idle cursors after
   `cursorTimeoutMillis` (the campaign starts the server with `timeout_ms`), counted
   with serverStatus `metrics.cursor`;
5. churn: `churn` connections opened, greeted and closed in a loop while another
   client pings: the ping's latency, `connections.current` afterwards;
6. oversized input: a 48 MB message (three 15.9 MB documents in one insert), a message
   past 48 MB, a batch of 100,000 inserts and one of 100,001, a document nested 1,000
   deep, a 17 MB document: each answer (or the connection closed), and a ping from
   another client after each.

`run(**sizes)` returns the figures as a dict; `main()` prints them as Markdown.
"""

import argparse
import collections
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import bson
from pymongo import CursorType, MongoClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire  # noqa: E402
from conftest import TailstreamServer  # noqa: E402

DB = "load"
CAPPED = "capped"
BUS = "bus"
SLOW_READ_INTERVAL_S = 0.2
CAPPED_POSITION_LOST = 136
MAX_MESSAGE_BYTES = 48_000_000
CURSOR_CHECK_PERIOD_S = 4  # the server's idle-cursor check period (mongod's default)


def memory_kib(pid):
    """(current RSS, peak RSS) of the process, KiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def traffic(uri, seconds, rate, collections, fast):
    """A paced producer and `fast` database change streams; returns (acks ms, events ms,
    inserted, received)."""
    stop = threading.Event()
    latencies = [[] for _ in range(fast)]
    ready = threading.Barrier(fast + 1)

    def consume(i):
        with MongoClient(uri) as c:
            with c[DB].watch(max_await_time_ms=100) as stream:
                ready.wait()
                while not stop.is_set() or stream.alive:
                    ev = stream.try_next()
                    if ev is None:
                        if stop.is_set():
                            break
                        continue
                    doc = ev.get("fullDocument") or {}
                    if "t" in doc:
                        latencies[i].append((time.monotonic_ns() - doc["t"]) / 1e6)

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(fast)]
    for t in threads:
        t.start()
    ready.wait()
    acks = []
    inserted = 0
    with MongoClient(uri) as c:
        colls = [c[DB][f"c{i}"] for i in range(collections)]
        start = time.monotonic()
        n = int(seconds * rate)
        for i in range(n):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t0 = time.monotonic_ns()
            colls[i % collections].insert_one({"t": t0, "pad": "x" * 100})
            acks.append((time.monotonic_ns() - t0) / 1e6)
            inserted += 1
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    events = [x for per in latencies for x in per]
    return acks, events, inserted, sum(len(per) for per in latencies)


def open_cursors(port, connections, streams, collections, tailable_share=0.5):
    """Raw connections each holding its share of `streams` cursors, `tailable_share`
    of them tailable, spread evenly; returns (sockets, [(socket, cursor id, namespace
    collection)] of the change streams, tailable count)."""
    socks = []
    change_streams = []
    tailable = 0
    for i in range(connections):
        s = wire.connect(port, timeout=30)
        wire.command(s, {"hello": 1, "$db": "admin"})
        socks.append(s)
    for j in range(streams):
        s = socks[j % connections]
        if int((j + 1) * tailable_share) == int(j * tailable_share):
            coll = f"c{len(change_streams) % collections}"
            r = wire.command(s, {"aggregate": coll, "pipeline": [{"$changeStream": {}}],
                                 "cursor": {"batchSize": 0}, "$db": DB})
            assert r.get("ok") == 1, r
            change_streams.append((s, r["cursor"]["id"], coll))
        else:
            r = wire.command(s, {"find": CAPPED, "tailable": True, "awaitData": True,
                                 "batchSize": 0, "$db": DB})
            assert r.get("ok") == 1 and r["cursor"]["id"] != 0, r
            tailable += 1
    return socks, change_streams, tailable


def read_some(cursors, stop, counted):
    """Short getMores on these change streams, round robin, until `stop`."""
    while not stop.is_set():
        for s, cid, coll in cursors:
            if stop.is_set():
                break
            r = wire.command(s, {"getMore": cid, "collection": coll, "maxTimeMS": 1,
                                 "$db": DB})
            assert r.get("ok") == 1, r
            counted[0] += len(r["cursor"]["nextBatch"])


def slow_bus(uri, port, seconds, rate, slow, bus_kib):
    """Phase 3: returns (producer acks ms, fast reader latencies ms, inserted, the fast
    reader's count, the slow readers' outcomes: a Counter of 'lost' / 'read on' /
    other errors, documents the slow readers read)."""
    outcomes = collections.Counter()
    slow_read = [0]
    stop = threading.Event()
    with MongoClient(uri) as c:
        c[DB].create_collection(BUS, capped=True, size=bus_kib << 10)
        c[DB][BUS].insert_one({"seed": 1})
    socks = []
    for _ in range(slow):
        s = wire.connect(port, timeout=30)
        r = wire.command(s, {"find": BUS, "tailable": True, "awaitData": True,
                             "batchSize": 1, "$db": DB})
        assert r.get("ok") == 1 and r["cursor"]["id"] != 0, r
        socks.append((s, r["cursor"]["id"]))

    def slow_reader():
        live = list(socks)
        while live and not stop.is_set():
            for item in list(live):
                s, cid = item
                r = wire.command(s, {"getMore": cid, "collection": BUS, "batchSize": 1,
                                     "maxTimeMS": 1, "$db": DB})
                if r.get("ok") == 1:
                    slow_read[0] += len(r["cursor"]["nextBatch"])
                else:
                    code = r.get("code")
                    outcomes["lost" if code == CAPPED_POSITION_LOST else f"error {code}"] += 1
                    live.remove(item)
            stop.wait(SLOW_READ_INTERVAL_S)
        outcomes["read on"] += len(live)

    fast = []
    ready = threading.Event()

    def fast_reader():
        with MongoClient(uri) as c:
            cur = c[DB][BUS].find({"t": {"$exists": True}},
                                  cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(100)
            # Opened (its first batch read: nothing yet) before the producer starts.
            doc = next(cur, None)
            ready.set()
            while cur.alive:
                if doc is not None:
                    fast.append((time.monotonic_ns() - doc["t"]) / 1e6)
                doc = next(cur, None)
                if doc is None and stop.is_set():
                    break

    threads = [threading.Thread(target=slow_reader, daemon=True),
               threading.Thread(target=fast_reader, daemon=True)]
    for t in threads:
        t.start()
    ready.wait(10)
    acks = []
    with MongoClient(uri) as c:
        bus = c[DB][BUS]
        start = time.monotonic()
        n = int(seconds * rate)
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t0 = time.monotonic_ns()
            bus.insert_one({"t": t0, "pad": "x" * 100})
            acks.append((time.monotonic_ns() - t0) / 1e6)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(30)
    for s, _ in socks:
        s.close()
    return acks, fast, n, len(fast), outcomes, slow_read[0]


def cursor_metrics(client):
    m = client.admin.command("serverStatus")["metrics"]["cursor"]
    return m["open"]["total"], m.get("timedOut", 0)


def churn(port, uri, count):
    """Opens, greets and closes `count` connections while another client pings;
    returns the ping latencies (ms)."""
    stop = threading.Event()
    pings = []

    def ping():
        with MongoClient(uri) as c:
            while not stop.is_set():
                t0 = time.monotonic_ns()
                c.admin.command("ping")
                pings.append((time.monotonic_ns() - t0) / 1e6)
                time.sleep(0.01)

    t = threading.Thread(target=ping, daemon=True)
    t.start()
    for _ in range(count):
        s = wire.connect(port)
        wire.command(s, {"hello": 1, "$db": "admin"})
        s.close()
    stop.set()
    t.join(10)
    return pings


def send_raw(port, message):
    """Sends one message on a fresh connection: its reply document, or None when the
    server closed the connection."""
    s = wire.connect(port, timeout=120)
    try:
        s.sendall(message)
        _, _, _, body = wire.read_message(s)
        return wire.parse_op_msg(body)[1]
    except (ConnectionError, OSError):
        return None
    finally:
        s.close()


def nested_bson(depth):
    """The bytes of {a: {a: ... {v: 1}}}, `depth` documents deep (built by hand: the
    driver's encoder recurses and refuses such depths)."""
    doc = bson.encode({"v": 1})
    for _ in range(depth):
        body = b"\x03a\x00" + doc + b"\x00"
        doc = struct.pack("<i", 4 + len(body)) + body
    return doc


def bad_inputs(port, client):
    """Each oversized input's answer (ok / code / closed) and whether the server then
    still answered another client."""
    results = []

    def record(what, reply):
        if reply is None:
            answer = "connection closed"
        elif reply.get("ok") == 1 and not reply.get("writeErrors"):
            answer = f"ok, n = {reply.get('n')}"
        elif reply.get("writeErrors"):
            e = reply["writeErrors"][0]
            answer = f"write error {e.get('code')} ({len(reply['writeErrors'])} errors)"
        else:
            answer = f"error {reply.get('code')} {reply.get('codeName')}"
        alive = client.admin.command("ping")["ok"] == 1
        results.append((what, answer, alive, reply))

    big = "x" * 15_900_000
    docs = [{"_id": f"big{i}", "s": big} for i in range(3)]
    _, msg = wire.op_msg({"insert": "big", "$db": DB}, [("documents", docs)])
    assert len(msg) <= MAX_MESSAGE_BYTES
    record(f"one insert message of {len(msg) / 1e6:.1f} MB (three 15.9 MB documents)",
           send_raw(port, msg))
    docs = [{"_id": f"over{i}", "s": big} for i in range(3)] + [{"_id": "over3", "s": "x" * 400_000}]
    _, msg = wire.op_msg({"insert": "big", "$db": DB}, [("documents", docs)])
    record(f"a message of {len(msg) / 1e6:.1f} MB (past 48 MB)", send_raw(port, msg))
    for n in (100_000, 100_001):
        docs = [bson.encode({"_id": i}) for i in range(n)]
        _, msg = wire.op_msg({"insert": f"batch{n}", "$db": DB}, [("documents", docs)])
        record(f"a batch of {n:,} inserts", send_raw(port, msg))
    _, msg = wire.op_msg({"insert": "nested", "$db": DB},
                         [("documents", [nested_bson(1000)])])
    record("a document nested 1,000 deep", send_raw(port, msg))
    _, msg = wire.op_msg({"insert": "big", "$db": DB},
                         [("documents", [{"_id": "17mb", "s": "x" * 17_000_000}])])
    record("a 17 MB document", send_raw(port, msg))
    return results


def run(binary, connections=1000, streams=10000, readers=100, collections=100, fast=4,
        rate=1000, seconds=10.0, timeout_ms=10_000, churn_count=3000, oversized=True,
        tailable_share=0.5, slow=100, bus_kib=256, log=print):
    figures = {}
    os.environ["TAILSTREAM_BIN"] = binary
    root = tempfile.mkdtemp(prefix="tailstream-overload.")
    server = TailstreamServer(
        Path(root) / "db", extra_args=["--setParameter", f"cursorTimeoutMillis={timeout_ms}"])
    server.start(timeout=30)
    port, uri = server.port, server.uri()
    try:
        with MongoClient(uri) as client:
            client[DB].create_collection(CAPPED, capped=True, size=1 << 20)
            client[DB][CAPPED].insert_one({"seed": 1})
            for i in range(collections):
                client[DB][f"c{i}"].insert_one({"seed": 1})
            base_open, _ = cursor_metrics(client)
            figures["rss_start_kib"], _ = memory_kib(server.proc.pid)

            log(f"baseline: {seconds} s at {rate}/s, {fast} consumers")
            acks, events, inserted, received = traffic(uri, seconds, rate, collections, fast)
            figures["baseline"] = (acks, events, inserted, received)
            figures["connections_base"] = (
                client.admin.command("serverStatus")["connections"]["current"])

            log(f"opening {streams} cursors on {connections} connections")
            t0 = time.monotonic()
            socks, change_streams, tailable = open_cursors(port, connections, streams,
                                                           collections, tailable_share)
            figures["open_s"] = time.monotonic() - t0
            figures["tailable"] = tailable
            figures["change_streams"] = len(change_streams)
            figures["rss_open_kib"], _ = memory_kib(server.proc.pid)
            figures["open_total"], _ = cursor_metrics(client)
            figures["connections"] = client.admin.command("serverStatus")["connections"]["current"]

            log(f"load: {seconds} s at {rate}/s with {readers} reading and the rest idle")
            stop = threading.Event()
            counted = [0]
            reader = threading.Thread(target=read_some,
                                      args=(change_streams[:readers], stop, counted),
                                      daemon=True)
            reader.start()
            acks, events, inserted, received = traffic(uri, seconds, rate, collections, fast)
            stop.set()
            reader.join(30)
            figures["load"] = (acks, events, inserted, received)
            figures["readers_events"] = counted[0]
            figures["rss_load_kib"], figures["rss_peak_kib"] = memory_kib(server.proc.pid)

            log(f"slow bus consumers: {slow} tailable readers falling behind a "
                f"{bus_kib} KiB capped collection, {seconds} s at {rate}/s")
            figures["bus"] = slow_bus(uri, port, seconds, rate, slow, bus_kib)

            wait_s = timeout_ms / 1000 + 2 * CURSOR_CHECK_PERIOD_S + 1
            log(f"idle: waiting {wait_s:.0f} s for the idle cursors to time out")
            time.sleep(wait_s)
            figures["open_after_timeout"], figures["timed_out"] = cursor_metrics(client)
            figures["open_base"] = base_open
            for s in socks:
                s.close()
            time.sleep(1)
            figures["connections_after_close"] = (
                client.admin.command("serverStatus")["connections"]["current"])
            figures["rss_idle_kib"], _ = memory_kib(server.proc.pid)

            log(f"churn: {churn_count} connections opened and closed")
            t0 = time.monotonic()
            pings = churn(port, uri, churn_count)
            figures["churn_s"] = time.monotonic() - t0
            figures["churn_pings"] = pings
            time.sleep(1)
            figures["connections_after_churn"] = (
                client.admin.command("serverStatus")["connections"]["current"])

            if oversized:
                log("oversized input")
                figures["bad_inputs"] = bad_inputs(port, client)
            figures["rss_end_kib"], figures["rss_peak_end_kib"] = memory_kib(server.proc.pid)
            figures["server_alive"] = server.is_running()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return figures


def report(f, sizes):
    def lat(xs):
        return f"{percentile(xs, 0.5):.2f} / {percentile(xs, 0.99):.2f} / {max(xs):.2f}" if xs else "–"

    lines = [
        f"### Overload campaign: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} CPUs",
        "",
        f"{sizes['connections']:,} connections, {sizes['streams']:,} cursors "
        f"({f['change_streams']:,} change streams, {f['tailable']:,} tailable awaitData), "
        f"{sizes['readers']} of them read, {sizes['fast']} fast consumers (`watch()`), "
        f"change streams on {sizes['collections']} collection(s), "
        f"a producer at {sizes['rate']:,} inserts/s for {sizes['seconds']} s per phase, "
        f"cursorTimeoutMillis {sizes['timeout_ms']:,}.",
        "",
        "| figure | baseline | with the cursors open |",
        "|---|--:|--:|",
    ]
    b, l = f["baseline"], f["load"]
    lines.append(f"| inserts acknowledged p50 / p99 / max ms | {lat(b[0])} | {lat(l[0])} |")
    lines.append(f"| events p50 / p99 / max ms | {lat(b[1])} | {lat(l[1])} |")
    lines.append(f"| inserts / events received | {b[2]:,} / {b[3]:,} | {l[2]:,} / {l[3]:,} |")
    acks, fast, n, got, outcomes, slow_read = f["bus"]
    lines += [
        "",
        f"Slow bus consumers: {sizes['slow']} tailable readers reading one document every "
        f"{SLOW_READ_INTERVAL_S * 1000:.0f} ms from a {sizes['bus_kib']} KiB capped collection "
        f"the producer writes {sizes['rate']:,}/s into for {sizes['seconds']} s, and one "
        f"fast tailable reader.",
        "",
        "| figure | value |",
        "|---|--:|",
        f"| producer acknowledged p50 / p99 / max ms | {lat(acks)} |",
        f"| fast reader: documents p50 / p99 / max ms | {lat(fast)} |",
        f"| inserted / received by the fast reader | {n:,} / {got:,} |",
        f"| slow readers: CappedPositionLost / still reading / other errors | "
        f"{outcomes['lost']} / {outcomes['read on']} / "
        f"{sum(v for k, v in outcomes.items() if k.startswith('error'))} |",
        f"| documents the slow readers read before that | {slow_read:,} |",
    ]
    lines += [
        "",
        "| figure | value |",
        "|---|--:|",
        f"| opening the cursors (s) | {f['open_s']:.1f} |",
        f"| open cursors after opening (serverStatus) | {f['open_total']:,} |",
        f"| connections (serverStatus) | {f['connections']:,} |",
        f"| events read by the {sizes['readers']} readers | {f['readers_events']:,} |",
        f"| server RSS: start / cursors open / after the load / peak (MiB) | "
        f"{f['rss_start_kib'] / 1024:.0f} / {f['rss_open_kib'] / 1024:.0f} / "
        f"{f['rss_load_kib'] / 1024:.0f} / {f['rss_peak_kib'] / 1024:.0f} |",
        f"| open cursors {sizes['timeout_ms'] / 1000:.0f} s + 2 checks after the last use "
        f"(before the campaign: {f['open_base']}) | {f['open_after_timeout']:,} |",
        f"| cursors timed out (serverStatus metrics.cursor.timedOut) | {f['timed_out']:,} |",
        f"| connections after closing them | {f['connections_after_close']:,} |",
        f"| churn: {sizes['churn_count']:,} connections in (s) | {f['churn_s']:.1f} |",
        f"| churn: another client's ping p50 / p99 / max ms | {lat(f['churn_pings'])} |",
        f"| connections after the churn | {f['connections_after_churn']:,} |",
        f"| server RSS at the end / peak (MiB) | {f['rss_end_kib'] / 1024:.0f} / "
        f"{f['rss_peak_end_kib'] / 1024:.0f} |",
        f"| server alive at the end | {'yes' if f['server_alive'] else '**no**'} |",
    ]
    if "bad_inputs" in f:
        lines += ["", "| input | answer | another client served after |", "|---|---|:-:|"]
        for what, answer, alive, _ in f["bad_inputs"]:
            lines.append(f"| {what} | {answer} | {'yes' if alive else '**no**'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--readers", type=int, default=100)
    ap.add_argument("--collections", type=int, default=100)
    ap.add_argument("--fast", type=int, default=4)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--timeout-ms", type=int, default=10_000)
    ap.add_argument("--churn", type=int, default=3000)
    ap.add_argument("--tailable-share", type=float, default=0.5)
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--bus-kib", type=int, default=256)
    args = ap.parse_args()
    sizes = dict(connections=args.connections, streams=args.streams, readers=args.readers,
                 collections=args.collections, fast=args.fast, rate=args.rate,
                 seconds=args.seconds, timeout_ms=args.timeout_ms, churn_count=args.churn,
                 tailable_share=args.tailable_share, slow=args.slow, bus_kib=args.bus_kib)
    figures = run(args.server, log=lambda m: print(m, file=sys.stderr, flush=True), **sizes)
    print(report(figures, sizes))


if __name__ == "__main__":
    main()

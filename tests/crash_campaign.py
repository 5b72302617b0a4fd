"""Crash cycles (issue 32): a mixed workload against a real server, `kill -9` at a random
moment, a restart, and an audit of what survived. Used by tests/test_crash_cycles.py (a
few cycles, in CI) and bench/crash_cycles.sh (the campaign: 100 cycles or more).

The workload, each part on its own connection, all in database `camp`:
- journaled: inserts, `$inc` updates and deletes on `camp.acked`, one at a time, each
  with `{j: true}`; it remembers what was acknowledged and the one write in flight;
- loose: batches of inserts with `{w: 1}` into `camp.loose` (no promise they survive);
- transactions: each inserts the same `_id` into `camp.txa` and `camp.txb` and
  increments `camp.txcount`, committed with `{j: true}`;
- DDL: index builds on `camp.acked`, `camp.scratch` dropped and created again;
- a change stream on `camp`, resumed across crashes from the last token it received;
- in one cycle of three, the disk "fills up" mid-workload: the free-space floor raised
  past the free space (every write that adds data refused until the crash), or, on a
  small filesystem of the campaign's own (`small_disk`), a file written beside the data
  until the filesystem is full (the store's writes fail for want of space; the file
  is removed before the restart);
- in one cycle of three, the WAL's end is torn: the durable writers and the stream
  pause (their last write acknowledged, their last event received), the newest WAL's
  end is read (`wal_tail`, the storage crate's example: the reader the server itself
  runs before recovery), the loose writes go on for a moment, and after the kill the
  WAL is cut at a random byte among the records written since (as a disk that took a
  write in part leaves it; never inside a record an acknowledged durable write or a
  received event may be in).

The audit after each restart (every check is a count of violations, 0 expected):
- lost: an acknowledged insert missing, an acknowledged delete present, a counter
  below its acknowledged value;
- torn: a transaction's documents in one collection and not the other, or the
  counter not equal to their number; a `camp.loose` document not whole;
- oplog: a document of `camp` that differs from what replaying the whole oplog from
  empty gives (the campaign's oplog is never trimmed);
- invalid: `validate` finds a collection's indexes disagree with its documents;
- stream: the stream resumed from its last token returns an event not after that
  token, twice, or misses an oplog entry of `camp` after it;
- report: after a tear that cut a record, the server's log does not say that recovery
  dropped exactly the bytes `wal_tail` finds after the last whole record.
"""

import collections
import os
import random
import re
import subprocess
import threading
import time
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.write_concern import WriteConcern

DB = "camp"
PAD = "p" * 200
AUDITED = ["acked", "loose", "txa", "txb", "txcount", "scratch"]
# How long the loose writes run alone before the kill in a torn cycle.
QUIET_S = 0.3
# The longest a torn cycle waits for the durable writers and the stream to pause.
PAUSE_TIMEOUT_S = 10
# The file that fills a small filesystem up, beside the data directory.
FILLER = "filler"


class State:
    """What the workload was told, kept by the campaign across the server's crashes."""

    def __init__(self):
        self.next_id = 0
        self.inserted = set()  # acknowledged inserts
        self.deleted = set()  # acknowledged deletes
        self.counters = {}  # _id -> the highest acknowledged value
        self.in_flight = None  # (kind, _id) of a write sent and not acknowledged
        self.tx_acked = set()
        self.tx_next = 0
        self.loose_batch = 0
        self.token = None  # the change stream's last resume token
        self.token_ts = None
        self.seen_tokens = set()
        self.stream_checked = 0  # events the streams returned and were compared
        self.disk_full_cycles = 0  # cycles whose disk "filled up" before the crash
        self.cycle_start_ts = None  # where this cycle's stream started
        self.cycle_events = collections.Counter()  # (ts, coll, op) it returned
        self.quiet = threading.Event()  # a torn cycle: durable writers and stream pause
        self.paused = 0  # of the PAUSING workers, those paused or ended this cycle
        self.lock = threading.Lock()
        self.torn_cycles = 0  # cycles whose WAL was cut inside a record
        self.small_disk = None  # a filesystem of the campaign's own holding the data


def paused(state, stop):
    """In a torn cycle, a durable writer or the stream stops here once told to (its
    last write acknowledged, its last event received) and waits for the kill."""
    if not state.quiet.is_set():
        return False
    threading.current_thread().paused = True
    with state.lock:
        state.paused += 1
    stop.wait()
    return True


def journaled(client, state, stop, rnd):
    coll = client[DB].acked.with_options(write_concern=WriteConcern(j=True))
    while not stop.is_set() and not paused(state, stop):
        live = sorted(state.inserted - state.deleted)
        choice = rnd.random()
        if choice < 0.6 or not live:
            i = state.next_id
            state.next_id += 1
            state.in_flight = ("insert", i)
            coll.insert_one({"_id": i, "v": 0, "pad": PAD})
            state.inserted.add(i)
            state.counters[i] = 0
        elif choice < 0.9:
            i = rnd.choice(live)
            state.in_flight = ("update", i)
            coll.update_one({"_id": i}, {"$inc": {"v": 1}})
            state.counters[i] += 1
        else:
            i = rnd.choice(live)
            state.in_flight = ("delete", i)
            coll.delete_one({"_id": i})
            state.deleted.add(i)
        state.in_flight = None


def loose(client, state, stop, rnd):
    coll = client[DB].loose
    while not stop.is_set():
        b = state.loose_batch
        state.loose_batch += 1
        coll.insert_many([{"_id": f"{b}-{i}", "batch": b, "i": i, "pad": PAD}
                          for i in range(50)])
        time.sleep(0.01)  # the oplog stays far below its cap over a campaign


def transactions(client, state, stop, rnd):
    db = client[DB]
    while not stop.is_set() and not paused(state, stop):
        k = state.tx_next
        state.tx_next += 1
        with client.start_session() as s:
            with s.start_transaction(write_concern=WriteConcern(j=True)):
                db.txa.insert_one({"_id": k}, session=s)
                db.txb.insert_one({"_id": k}, session=s)
                db.txcount.update_one({"_id": 1}, {"$inc": {"n": 1}}, upsert=True, session=s)
        state.tx_acked.add(k)


def ddl(client, state, stop, rnd):
    db = client[DB]
    while not stop.is_set() and not paused(state, stop):
        if rnd.random() < 0.5:
            keys = rnd.choice([[("v", 1)], [("v", -1), ("_id", 1)], [("pad", 1)]])
            if rnd.random() < 0.3:
                db.acked.drop_indexes()
            else:
                db.acked.create_index(keys)
        else:
            db.scratch.drop()
            db.scratch.insert_many([{"_id": i, "x": rnd.random()} for i in range(20)])
            db.scratch.create_index("x")
        time.sleep(0.05)


CRUD = {"insert": "i", "update": "u", "replace": "u", "delete": "d"}


def stream(client, state, stop, rnd):
    opts = {"resume_after": state.token} if state.token else {}
    state.cycle_start_ts = state.token_ts
    state.cycle_events = collections.Counter()
    with client[DB].watch(max_await_time_ms=100, **opts) as cs:
        while not stop.is_set() and not paused(state, stop):
            ev = cs.try_next()
            if ev is None:
                continue
            remember(state, ev)
            if ev["operationType"] in CRUD:
                key = (ev["clusterTime"], ev["ns"]["coll"], CRUD[ev["operationType"]])
                state.cycle_events[key] += 1


def remember(state, ev):
    data = ev["_id"]["_data"]
    state.seen_tokens.add(data)
    state.token = ev["_id"]
    state.token_ts = ev["clusterTime"]


def disk(client, state, stop, rnd):
    """In one cycle of three, the disk "fills up" at a random moment: the free-space
    floor (`minFreeDiskSpaceMB`, a run-time parameter, back to its default after the
    restart) is raised past the free space, so every write that adds data is refused
    (OutOfDiskSpace) from then until the crash; on a small filesystem of the
    campaign's own, a file beside the data takes all its free space instead, then an
    `fsync` (a checkpoint: the memtables flushed to table files, which gives back the
    space RocksDB had allocated ahead for the WAL), then the file takes that too but
    0-256 KiB: the store's writes fail for want of space from then on (a write concern
    error, or OutOfDiskSpace once the store has stopped)."""
    if rnd.random() >= 1 / 3 or stop.wait(rnd.uniform(0.1, 0.6)):
        return
    if state.small_disk is None:
        client.admin.command("setParameter", 1, minFreeDiskSpaceMB=1 << 30)
    else:
        fill_up(state.small_disk / FILLER, 0)
        try:
            client.admin.command("fsync")
        except OperationFailure:
            pass  # out of space already
        fill_up(state.small_disk / FILLER, rnd.randint(0, 256 << 10))
    state.disk_full_cycles += 1
    state.disk_full_now = True


def fill_up(path, leave_bytes):
    """Grows `path` until its filesystem has about `leave_bytes` free (or none): at
    once with fallocate where the filesystem has it (tmpfs does), else by writing."""
    st = os.statvfs(path.parent)
    room = st.f_bavail * st.f_frsize - leave_bytes
    if room > 0:
        with open(path, "ab") as f:
            try:
                os.posix_fallocate(f.fileno(), f.tell(), room)
                return
            except OSError:
                pass  # not supported here, or the space went meanwhile: write
    chunk = b"\0" * (1 << 20)
    with open(path, "ab") as f:
        while True:
            st = os.statvfs(path.parent)
            room = st.f_bavail * st.f_frsize - leave_bytes
            if room <= 0:
                break
            try:
                f.write(chunk[:min(len(chunk), room)])
                f.flush()
            except OSError:  # full
                break


WORKERS = [journaled, loose, transactions, ddl, stream, disk]
# The workers a torn cycle pauses before it reads the WAL's end.
PAUSING = {journaled, transactions, ddl, stream}


def wal_tail_tool():
    """The storage crate's `wal_tail` example, built beside the server binary (by
    `cargo test`, or `cargo build --release -p tailstream-storage --example wal_tail`)."""
    from conftest import binary_path
    return binary_path().parent / "examples" / "wal_tail"


def wal_tail(store):
    """(file bytes, whole records end, dropped bytes, file) of the newest WAL in `store`,
    or None when there is none."""
    out = subprocess.run([str(wal_tail_tool()), str(store)], capture_output=True,
                         text=True, check=True).stdout.split(maxsplit=3)
    if not out:
        return None
    return int(out[0]), int(out[1]), int(out[2]), Path(out[3].rstrip("\n"))


def tear(store, before, rnd):
    """Cuts the newest WAL at a random byte among the whole records written after
    `before` (the tail read while the durable writers and the stream were paused);
    returns (file name, the bytes recovery must drop) or None when nothing was written
    since (or only a record too short to cut inside)."""
    after = wal_tail(store)
    if after is None:
        return None
    _, end, _, path = after
    start = before[1] if before is not None and before[3] == path else 0
    if end - start < 2:
        return None
    with open(path, "r+b") as f:
        f.truncate(rnd.randint(start + 1, end - 1))
    cut = wal_tail(store)
    return path.name, cut[2]


def reported_drops(log_text, wal_name):
    """The `droppedBytes` of each "recovery drops its last" line about `wal_name`."""
    return [int(m.group(1)) for line in log_text.splitlines()
            if "recovery drops its last" in line and wal_name in line
            for m in [re.search(r'"droppedBytes":\s*(\d+)', line)] if m]


def run_until_killed(server, state, rnd, seconds, torn):
    """Runs the workload, kills the server with SIGKILL after `seconds`, waits for the
    workers (each ends on its connection's error) and returns how many writes failed.
    With `torn`, the durable writers and the stream pause `QUIET_S` before the kill,
    and the WAL is cut afterwards among the records written since (see `tear`); what
    recovery must drop is left in `state.expect_tear`."""
    stop = threading.Event()
    errors = []
    state.quiet.clear()
    state.paused = 0
    state.expect_tear = None
    state.disk_full_now = False
    failures = []

    def worker(fn, seed):
        client = server.client(retryWrites=False, serverSelectionTimeoutMS=2000)
        try:
            fn(client, state, stop, random.Random(seed))
        except PyMongoError as e:
            code = getattr(e, "code", None)
            errors.append(f"{fn.__name__}: {type(e).__name__}" + (f" {code}" if code else ""))
        except Exception as e:  # noqa: BLE001 - the harness's own bug: reported below
            failures.append(e)
        finally:
            client.close()
            if fn in PAUSING and not getattr(threading.current_thread(), "paused", False):
                with state.lock:
                    state.paused += 1  # ended (its connection's error): writes no more
    threads = [threading.Thread(target=worker, args=(fn, rnd.random()), daemon=True)
               for fn in WORKERS]
    for t in threads:
        t.start()
    store = server.dbpath / "store"
    before, all_paused = None, False
    if torn:
        time.sleep(max(0.0, seconds - QUIET_S))
        state.quiet.set()
        deadline = time.monotonic() + PAUSE_TIMEOUT_S
        while state.paused < len(PAUSING) and time.monotonic() < deadline:
            time.sleep(0.005)
        all_paused = state.paused == len(PAUSING)
        if all_paused:
            before = wal_tail(store)
        time.sleep(QUIET_S)
    else:
        time.sleep(seconds)
    server.kill9()
    stop.set()
    for t in threads:
        t.join(30)
    if failures:
        raise failures[0]
    if all_paused:
        state.expect_tear = tear(store, before, rnd)
        if state.expect_tear is not None:
            state.torn_cycles += 1
    return errors


def settle_in_flight(client, state):
    """The write sent but not acknowledged when the server died happened or not: from
    now on it is known by what is there."""
    if state.in_flight is None:
        return
    kind, i = state.in_flight
    doc = client[DB].acked.find_one({"_id": i})
    if kind == "insert" and doc is not None:
        state.inserted.add(i)
        state.counters[i] = doc["v"]
    elif kind == "update" and doc is not None:
        state.counters[i] = doc["v"]
    elif kind == "delete" and doc is None:
        state.deleted.add(i)
    state.in_flight = None


def audit(client, state):
    """The violations of each kind (see the module documentation)."""
    db = client[DB]
    out = {"lost": 0, "torn": 0, "oplog": 0, "invalid": 0, "stream": 0}
    flight = state.in_flight
    docs = {d["_id"]: d for d in db.acked.find()}
    for i in state.inserted - state.deleted:
        if i not in docs and flight != ("delete", i):
            out["lost"] += 1
        elif i in docs and docs[i]["v"] < state.counters[i]:
            out["lost"] += 1
    out["lost"] += sum(1 for i in state.deleted if i in docs)
    txa = {d["_id"] for d in db.txa.find()}
    txb = {d["_id"] for d in db.txb.find()}
    count = (db.txcount.find_one({"_id": 1}) or {}).get("n", 0)
    out["lost"] += len(state.tx_acked - txa)
    out["torn"] += len(txa ^ txb) + (count != len(txa))
    for d in db.loose.find():
        b, i = d["_id"].split("-")
        if (d.get("batch"), d.get("i"), d.get("pad")) != (int(b), int(i), PAD):
            out["torn"] += 1
    replayed = replay_oplog(client)
    for name in AUDITED:
        actual = {d["_id"]: d for d in db[name].find()}
        mine = replayed.get(name, {})
        out["oplog"] += sum(1 for k in actual.keys() | mine.keys() if actual.get(k) != mine.get(k))
    for name in db.list_collection_names():
        if name in AUDITED and not db.command("validate", name).get("valid", False):
            out["invalid"] += 1
    try:
        out["stream"] += audit_stream(client, state)
    except PyMongoError:
        out["stream"] += 1  # the stream could not resume from a token it was given
    return out


def replay_oplog(client):
    """`camp`'s collections as replaying the whole oplog from empty makes them (the
    campaign's oplog is sized never to be trimmed): {collection: {_id: document}}."""
    colls = {}

    def apply(op):
        kind, o = op["op"], op.get("o", {})
        if kind == "c" and "applyOps" in o:  # a transaction (on admin.$cmd)
            for inner in o["applyOps"]:
                apply(inner)
            return
        db, _, coll = op.get("ns", "").partition(".")
        if db != DB:
            return
        if kind == "c":
            if "drop" in o:
                colls.pop(o["drop"], None)
            return
        docs = colls.setdefault(coll, {})
        if kind == "i":
            docs[o["_id"]] = dict(o)
        elif kind == "d":
            docs.pop(o["_id"], None)
        elif kind == "u":
            key = op["o2"]["_id"]
            if "$v" not in o:
                docs[key] = dict(o)
                return
            doc = docs.setdefault(key, {"_id": key})
            diff = o["diff"]
            for name, value in {**diff.get("u", {}), **diff.get("i", {})}.items():
                doc[name] = value
            for name in diff.get("d", {}):
                doc.pop(name, None)
    for e in client.local["oplog.rs"].find().sort("$natural", 1):
        apply(e)
    return colls


def camp_entries(client, after, before=None):
    """(ts, collection, op) of every CRUD oplog entry of `camp` in (after, before)."""
    out = collections.Counter()
    ts = {"$gt": after} if after is not None else {"$exists": True}
    if before is not None:
        ts["$lt"] = before
    for e in client.local["oplog.rs"].find({"ts": ts}).sort("$natural", 1):
        ops = e["o"].get("applyOps", []) if e["op"] == "c" else [e]
        for op in ops:
            db, _, coll = op.get("ns", "").partition(".")
            if db == DB and op.get("op") in ("i", "u", "d") and not coll.startswith("system."):
                out[(e["ts"], coll, op["op"])] += 1
    return out


def audit_stream(client, state):
    """What the stream returned while the server ran must be what the oplog holds
    after the restart over the same times (it showed nothing the crash lost, skipped
    nothing); then, resumed after its last token, every event after it once, and every
    oplog entry of `camp` after it as an event (by time, namespace and kind)."""
    if state.token is None:
        return 0
    bad = 0
    if state.cycle_start_ts is not None:
        seen = collections.Counter({k: n for k, n in state.cycle_events.items()
                                    if state.cycle_start_ts < k[0] < state.token_ts})
        logged = camp_entries(client, state.cycle_start_ts, state.token_ts)
        bad += sum(((seen - logged) + (logged - seen)).values())
        state.stream_checked += sum(seen.values())
    events = []
    with client[DB].watch(resume_after=state.token, max_await_time_ms=200) as cs:
        while True:
            ev = cs.try_next()
            if ev is None:
                break
            if ev["_id"]["_data"] in state.seen_tokens or ev["clusterTime"] < state.token_ts:
                bad += 1
            events.append(ev)
    # Compared after the token's time (a transaction's events share their entry's time).
    from_events = collections.Counter(
        (e["clusterTime"], e["ns"]["coll"], CRUD[e["operationType"]])
        for e in events if e["operationType"] in CRUD and e["clusterTime"] > state.token_ts)
    entries = camp_entries(client, state.token_ts)
    bad += sum(((entries - from_events) + (from_events - entries)).values())
    state.stream_checked += len(events)
    for ev in events:
        remember(state, ev)
    return bad


def run_campaign(server, cycles, seed, report=print, small_disk=None, torn_share=1 / 3):
    """`cycles` crash cycles against `server` (a conftest.TailstreamServer, started);
    returns the totals: cycles, acknowledged writes checked, violations by kind. With
    `small_disk` (a filesystem of the campaign's own holding the server's dbpath, the
    server started with `minFreeDiskSpaceMB=0`), the disk fills up for real.
    `torn_share`: the share of cycles whose WAL end is torn."""
    rnd = random.Random(seed)
    state = State()
    state.small_disk = small_disk
    totals = {"cycles": 0, "acked_writes": 0, "stream_events": 0, "disk_full_cycles": 0,
              "torn_cycles": 0, "lost": 0, "torn": 0, "oplog": 0, "invalid": 0,
              "stream": 0, "report": 0}
    for n in range(cycles):
        seconds = rnd.uniform(0.3, 1.2)
        errors = run_until_killed(server, state, rnd, seconds, torn=rnd.random() < torn_share)
        server.remove_socket_file()
        if small_disk is not None:
            (small_disk / FILLER).unlink(missing_ok=True)
        reports_before = None
        if state.expect_tear is not None:
            reports_before = len(reported_drops(server.log_text(), state.expect_tear[0]))
        server.start()
        with server.client() as client:
            settle_in_flight(client, state)
            found = audit(client, state)
        found["report"] = 0
        if state.expect_tear is not None:
            name, dropped = state.expect_tear
            new = reported_drops(server.log_text(), name)[reports_before:]
            found["report"] = int(new != ([dropped] if dropped else []))
        totals["cycles"] += 1
        totals["acked_writes"] = len(state.inserted) + len(state.deleted) + len(state.tx_acked)
        for k, v in found.items():
            totals[k] += v
        totals["stream_events"] = state.stream_checked
        totals["disk_full_cycles"] = state.disk_full_cycles
        totals["torn_cycles"] = state.torn_cycles
        report(f"cycle {n + 1}: {found} (acknowledged so far {totals['acked_writes']}, "
               f"stream events checked {state.stream_checked}, "
               f"interrupted: {sorted(set(errors))}"
               + (f", WAL cut: {state.expect_tear}" if state.expect_tear else "")
               + (", disk full" if state.disk_full_now else "") + ")")
    return totals

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
- in one cycle of three, the disk "fills up" mid-workload (the free-space floor raised
  past the free space: every write that adds data refused until the crash).

The audit after each restart (every check is a count of violations, 0 expected):
- lost: an acknowledged insert missing, an acknowledged delete present, a counter
  below its acknowledged value;
- torn: a transaction's documents in one collection and not the other, or the
  counter not equal to their number; a `camp.loose` document not whole;
- oplog: a document of `camp` that differs from what replaying the whole oplog from
  empty gives (the campaign's oplog is never trimmed);
- invalid: `validate` finds a collection's indexes disagree with its documents;
- stream: the stream resumed from its last token returns an event not after that
  token, twice, or misses an oplog entry of `camp` after it.
"""

import collections
import random
import threading
import time

from pymongo import MongoClient
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

DB = "camp"
PAD = "p" * 200
AUDITED = ["acked", "loose", "txa", "txb", "txcount", "scratch"]


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


def journaled(client, state, stop, rnd):
    coll = client[DB].acked.with_options(write_concern=WriteConcern(j=True))
    while not stop.is_set():
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
    while not stop.is_set():
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
    while not stop.is_set():
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
        while not stop.is_set():
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
    (OutOfDiskSpace) from then until the crash."""
    if rnd.random() >= 1 / 3 or stop.wait(rnd.uniform(0.1, 0.6)):
        return
    client.admin.command("setParameter", 1, minFreeDiskSpaceMB=1 << 30)
    state.disk_full_cycles += 1


WORKERS = [journaled, loose, transactions, ddl, stream, disk]


def run_until_killed(server, state, rnd, seconds):
    """Runs the workload, kills the server with SIGKILL after `seconds`, waits for the
    workers (each ends on its connection's error) and returns how many writes failed."""
    stop = threading.Event()
    errors = []

    failures = []

    def worker(fn, seed):
        client = server.client(retryWrites=False, serverSelectionTimeoutMS=2000)
        try:
            fn(client, state, stop, random.Random(seed))
        except PyMongoError as e:
            errors.append(f"{fn.__name__}: {type(e).__name__}")
        except Exception as e:  # noqa: BLE001 - the harness's own bug: reported below
            failures.append(e)
        finally:
            client.close()
    threads = [threading.Thread(target=worker, args=(fn, rnd.random()), daemon=True)
               for fn in WORKERS]
    for t in threads:
        t.start()
    time.sleep(seconds)
    server.kill9()
    stop.set()
    for t in threads:
        t.join(30)
    if failures:
        raise failures[0]
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


def run_campaign(server, cycles, seed, report=print):
    """`cycles` crash cycles against `server` (a conftest.TailstreamServer, started);
    returns the totals: cycles, acknowledged writes checked, violations by kind."""
    rnd = random.Random(seed)
    state = State()
    totals = {"cycles": 0, "acked_writes": 0, "stream_events": 0, "disk_full_cycles": 0,
              "lost": 0, "torn": 0, "oplog": 0, "invalid": 0, "stream": 0}
    for n in range(cycles):
        errors = run_until_killed(server, state, rnd, rnd.uniform(0.3, 1.2))
        server.remove_socket_file()
        server.start()
        with server.client() as client:
            settle_in_flight(client, state)
            found = audit(client, state)
        totals["cycles"] += 1
        totals["acked_writes"] = len(state.inserted) + len(state.deleted) + len(state.tx_acked)
        for k, v in found.items():
            totals[k] += v
        totals["stream_events"] = state.stream_checked
        totals["disk_full_cycles"] = state.disk_full_cycles
        report(f"cycle {n + 1}: {found} (acknowledged so far {totals['acked_writes']}, "
               f"stream events checked {state.stream_checked}, "
               f"interrupted: {sorted(set(errors))})")
    return totals

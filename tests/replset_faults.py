"""A fault harness with a history checker for a three-member replica set (issue 27).

Three `tailstream --replSet rs0` processes, each behind a TCP proxy this module owns:
member i listens on its real port R_i, its proxy on P_i forwards to R_i, and the set is
initiated with the hosts 127.0.0.1:P_i, so every member-to-member and client connection
goes through a proxy. The proxy knows which member each connection comes from (the
connecting socket's inode, asked of the kernel, held open by one of the members'
pids), so it can cut single links (a -> b) and thereby partition the set.

While faults are induced (kill -9 and restart, SIGSTOP/SIGCONT, partitions) a
workload writes through a replica-set client (unique majority inserts, $inc
counters), a change stream follows every member, and everything is recorded in a
history (JSON lines). After the faults are healed and the set has settled, the
checker compares the history with every member's documents, oplog and stream.

Used by tests/test_replset_faults.py (a short seeded run, and the checker's functions
on synthetic histories) and bench/replset_faults.py (the campaign).
"""

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bson.timestamp import Timestamp
from pymongo import MongoClient, ReadPreference, monitoring
from pymongo.errors import DuplicateKeyError, PyMongoError

import stopped
import wire
from ports import free_port, free_ports

SET_NAME = "rs0"
DB = "faults"
ITEMS = "items"
COUNTERS = "counters"
N_COUNTERS = 4


def binary_path():
    """The server binary: $TAILSTREAM_BIN, else the default release build."""
    env = os.environ.get("TAILSTREAM_BIN")
    if env:
        return Path(env)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/tailstream/target")
    return Path(target) / "release" / "tailstream"


def raw_command(addr, doc, timeout=1.0):
    """One command to addr (ip, port) over a fresh plain socket (cheap enough to poll
    with, and it never waits longer than `timeout`, even on a SIGSTOPped member)."""
    with socket.create_connection(addr, timeout=timeout) as sock:
        sock.settimeout(timeout)
        return wire.command(sock, doc)


# ---- members ------------------------------------------------------------------

class StartTimeout(RuntimeError):
    """A (re)started member that does not answer a ping."""


class Member:
    """One tailstream process: its real port, its proxy's port, its dbpath. It logs to
    <dbpath>/server.log (appended to across restarts). The set's configuration names
    it by `host`, its proxy's address (the server recognizes itself there by asking
    hello through it)."""

    def __init__(self, index, root, election_ms):
        self.index = index
        self.port, self.proxy_port = free_ports(2)
        self.dbpath = Path(root) / f"member{index}"
        self.dbpath.mkdir(parents=True, exist_ok=True)
        self.logfile = self.dbpath / "server.log"
        self.election_ms = election_ms
        self.proc = None
        self.paused = False

    @property
    def host(self):
        return f"127.0.0.1:{self.proxy_port}"

    @property
    def addr(self):
        """The real address: the harness's own view of the member, never cut."""
        return ("127.0.0.1", self.port)

    @property
    def pid(self):
        return self.proc.pid if self.is_running() else None

    def argv(self):
        return [
            str(binary_path()), "--port", str(self.port), "--bind_ip", "127.0.0.1",
            "--dbpath", str(self.dbpath), "--replSet", SET_NAME, "--quiet",
            "--oplogSize", "256",
            "--setParameter", f"replElectionTimeoutMillis={self.election_ms}",
            "--setParameter", "enableTestCommands=1",
        ]

    def start(self, timeout=30.0):
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        self.paused = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"member {self.index} exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            try:
                raw_command(self.addr, {"ping": 1, "$db": "admin"}, timeout=1.0)
                return
            except OSError:
                time.sleep(0.1)
        # Left running: a hung member is kept for diagnose() to look at.
        raise StartTimeout(f"member {self.index} did not answer within {timeout}s")

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.is_running():
            self.proc.kill()
            self.proc.wait()
        self.paused = False
        # A killed server leaves its Unix socket file behind (as mongod).
        try:
            os.unlink(f"/tmp/mongodb-{self.port}.sock")
        except FileNotFoundError:
            pass

    def pause(self):
        if self.is_running():
            stopped.stop(self.proc)
            self.paused = True

    def resume(self):
        if self.is_running():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        if not self.is_running():
            return
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill9()

    def client(self, **kwargs):
        """A direct connection to the member's REAL port (the harness's own view, never
        partitioned), reading from whatever state the member is in."""
        kwargs.setdefault("serverSelectionTimeoutMS", 5000)
        return MongoClient(*self.addr, directConnection=True,
                           read_preference=ReadPreference.SECONDARY_PREFERRED, **kwargs)

    def log_tail(self, n=30):
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n:])


# ---- which process a connection comes from -------------------------------------

NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLMSG_ERROR = 4, 20, 2


def socket_inode(local, remote):
    """The inode of the TCP socket whose local address is `local` and remote `remote`
    (both (ip, port), IPv4), or None. Asked of the kernel by the exact four-tuple with
    one sock_diag netlink request: reading /proc/net/tcp instead costs milliseconds per
    connection once TIME_WAIT sockets pile up, and the members give up on an RPC after
    100 ms, reconnect, and so pile up more."""
    sockid = struct.pack("!HH16s16sI", local[1], remote[1],
                         socket.inet_aton(local[0]).ljust(16, b"\0"),
                         socket.inet_aton(remote[0]).ljust(16, b"\0"), 0)
    # inet_diag_req_v2: family, protocol, extensions, pad, states; the socket id, the
    # interface (0: any) and the cookie (~0: none, an exact lookup by addresses).
    req = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) \
        + sockid[:-4] + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    msg = struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as nl:
        nl.sendto(msg, (0, 0))
        reply = nl.recv(65536)
    _length, kind = struct.unpack_from("=IH", reply)
    if kind == NLMSG_ERROR:
        return None  # no such socket (any more)
    # nlmsghdr (16) + inet_diag_msg: family, state, timer, retrans (4), the socket id
    # (48), expires, rqueue, wqueue, uid (16), then the inode.
    inode = struct.unpack_from("=I", reply, 16 + 4 + 48 + 16)[0]
    return inode or None


def pid_holding(inode, pids):
    """Which of `pids` has the socket `inode` open, or None."""
    target = f"socket:[{inode}]"
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(f"{fd_dir}/{fd}") == target:
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None


# ---- the proxies ----------------------------------------------------------------

class _Conn:
    """One proxied connection: src is the connecting member's index (None: a client),
    dst the member behind the proxy; forwarding, or black-holed."""

    def __init__(self, src, dst, writers, forwarding=True):
        self.src, self.dst, self.writers = src, dst, writers
        self.forwarding = forwarding

    def abort(self):
        for w in self.writers:
            w.transport.abort()


def _quiet_cancellations(loop, context):
    """The loop's exception handler: connections cancelled by close() are no news."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


class Network:
    """The three proxies, on one asyncio loop in a thread of their own, and the table of
    cut links. A cut link (a, b) stops connections from member a to member b; (None, b)
    stops clients' connections to b. mode "reset": a cut connection is closed at once;
    "blackhole": it is accepted and its bytes are read and dropped, nothing forwarded
    (until the link heals, when it is closed)."""

    def __init__(self, members):
        self.members = members
        self.cut = set()
        self.mode = "reset"
        self.conns = set()
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_cancellations)
        self.servers = {}
        self.unidentified = 0  # connections whose source could not be looked up
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxies", daemon=True)
        self.thread.start()
        for m in members:
            self._call(self._listen(m))

    def _call(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _listen(self, member):
        server = await asyncio.start_server(
            lambda r, w: self._accept(member.index, r, w), "127.0.0.1", member.proxy_port)
        self.servers[member.index] = server

    def source_of(self, peer, proxy_port):
        """The index of the member that opened a connection from `peer` to our proxy on
        `proxy_port`, or None (a client: this harness, a driver)."""
        inode = socket_inode(peer, ("127.0.0.1", proxy_port))
        if inode is None:
            self.unidentified += 1
            return None
        pids = {m.pid: m.index for m in self.members if m.pid}
        return pids.get(pid_holding(inode, list(pids)))

    async def _accept(self, dst, reader, writer):
        peer = writer.get_extra_info("peername")[:2]
        # Looked up inline: a netlink request and three short /proc/<pid>/fd listings,
        # well under a millisecond (the members' RPCs time out within a fifth of the
        # election timeout, and a slow proxy would be a fault of its own).
        src = self.source_of(peer, self.members[dst].proxy_port)
        if (src, dst) in self.cut:
            await self._refuse(_Conn(src, dst, [writer], forwarding=False), reader)
            return
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection(*self.members[dst].addr), 5)
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()  # the member is down (or its backlog full)
            return
        if (src, dst) in self.cut:  # cut while we connected
            up_w.transport.abort()
            await self._refuse(_Conn(src, dst, [writer], forwarding=False), reader)
            return
        conn = _Conn(src, dst, [writer, up_w])
        self.conns.add(conn)
        try:
            await asyncio.gather(self._pump(reader, up_w), self._pump(up_r, writer))
        finally:
            self.conns.discard(conn)
            conn.abort()

    async def _refuse(self, conn, reader):
        """A connection on a cut link: closed at once, or black-holed until it heals."""
        if self.mode == "reset":
            conn.abort()
            return
        self.conns.add(conn)
        try:
            while await reader.read(65536):
                pass
        except OSError:
            pass
        finally:
            self.conns.discard(conn)
            conn.abort()

    @staticmethod
    async def _pump(reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()

    # -- control (from any thread) --

    def set_cut(self, links, mode="reset"):
        """Cuts exactly `links` (a set of (src, dst)); every other link heals. Open
        connections on a link that is cut now, and black-holed ones on a link that
        heals, are closed."""
        async def apply():
            self.cut = set(links)
            self.mode = mode
            for conn in list(self.conns):
                if ((conn.src, conn.dst) in self.cut) == conn.forwarding:
                    conn.abort()
        self._call(apply())

    def heal(self):
        self.set_cut(set())

    def isolate(self, m, clients_cut, mode="reset"):
        """Member m alone: its links to and from the others cut; clients' connections to
        it too when clients_cut."""
        others = [i for i in range(len(self.members)) if i != m]
        links = {(m, o) for o in others} | {(o, m) for o in others}
        if clients_cut:
            links.add((None, m))
        self.set_cut(links, mode)

    def split(self, groups, mode="reset"):
        """Split-brain style {0} | {1, 2}: links between groups cut, clients reach all."""
        links = set()
        for g in groups:
            for h in groups:
                if g is not h:
                    links |= {(a, b) for a in g for b in h}
        self.set_cut(links, mode)

    def close(self):
        async def shutdown():
            for s in self.servers.values():
                s.close()
            for conn in list(self.conns):
                conn.abort()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        try:
            self._call(shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


# ---- the set ----------------------------------------------------------------------

def hello(member, timeout=1.0):
    """The member's hello over its real address, or None if it does not answer."""
    try:
        return raw_command(member.addr, {"hello": 1, "$db": "admin"}, timeout=timeout)
    except (OSError, ValueError, AssertionError, struct.error):
        return None


def leader(members):
    """(member index, term) of the primary with the highest term among those that answer
    and say they are primary, or None. A stale primary (paused, partitioned away) may
    still say so for a while; the highest term is the set's."""
    best = None
    for m in members:
        h = hello(m) if m.is_running() and not m.paused else None
        if h and h.get("isWritablePrimary"):
            term = int.from_bytes(h["electionId"].binary[4:], "big")
            if best is None or term > best[1]:
                best = (m.index, term)
    return best


def wait_for(check, timeout, interval=0.1):
    """check()'s first true value within timeout, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    return None


def initiate(members):
    """replSetInitiate with every member named by its proxy, then a primary. (A binary
    that cannot recognize itself behind a proxy answers code 93.)"""
    config = {"_id": SET_NAME, "members": [{"_id": m.index, "host": m.host} for m in members]}
    reply = raw_command(members[0].addr, {"replSetInitiate": config, "$db": "admin"}, timeout=60)
    if reply.get("ok") != 1:
        raise RuntimeError(f"replSetInitiate failed: {reply}")
    if not wait_for(lambda: leader(members), 60):
        raise RuntimeError("no primary within 60 s of replSetInitiate")


# ---- the history ------------------------------------------------------------------

class History:
    """Every operation, fault and observation, in memory and as JSON lines in `path`.
    A record: t (seconds since the start), op (insert, inc, fault, primary, resume,
    ...), type (invoke, ok, fail, unknown, start, end, ...), and the op's fields."""

    def __init__(self, path):
        self.t0 = time.monotonic()
        self.records = []
        self.lock = threading.Lock()
        self.file = open(path, "w")

    def record(self, op, type, **fields):
        rec = {"t": round(time.monotonic() - self.t0, 4), "op": op, "type": type, **fields}
        with self.lock:
            if not self.file.closed:  # else a thread left behind by a failed run
                self.records.append(rec)
                self.file.write(json.dumps(rec, default=str) + "\n")
        return rec

    def close(self):
        with self.lock:
            self.file.close()


class _Sent(monitoring.CommandListener):
    """Which member each write command went to and how it ended, per thread: the
    workload asks after each operation (pymongo may have sent it twice, retrying)."""

    def __init__(self, member_of_port):
        self.member_of_port = member_of_port
        self.local = threading.local()

    def begin(self):
        self.local.sent = []

    def sent(self):
        return getattr(self.local, "sent", [])

    def _note(self, event, outcome):
        if event.command_name in ("insert", "update") and hasattr(self.local, "sent"):
            self.local.sent.append((self.member_of_port.get(event.connection_id[1]), outcome))

    def started(self, event):
        pass

    def succeeded(self, event):
        self._note(event, "ok")

    def failed(self, event):
        # 10107 NotWritablePrimary comes before anything is computed into the store
        # (ARCHITECTURE.md, Replication): that attempt wrote nothing.
        code = (event.failure or {}).get("code")
        self._note(event, "refused" if code == 10107 else "error")


def outcome_of_failure(sent):
    """After an operation failed: "fail" when no attempt can have written (none was
    sent, or every one was refused before it started), else "unknown"."""
    return "fail" if all(o == "refused" for _, o in sent) else "unknown"


# ---- the workload -----------------------------------------------------------------

class Workload:
    """Writers in threads through one replica-set client (w: majority, pymongo's
    retryable writes): `inserters` threads inserting {_id: "w-<n>"} (n from one shared
    sequence), each retried with the same _id until acknowledged (a duplicate key
    error on a retry means an earlier attempt was applied), and one thread $inc-ing
    one of N_COUNTERS counters at a time, never retried by us, each increment also
    $push-ing its own id (so the checker sees which ones were applied, and how often)."""

    INSERT_RETRY_S = 30  # an insert not acknowledged after this long is "unknown"

    def __init__(self, members, history, inserters=2, pause_s=0.01):
        self.members = members
        self.history = history
        self.pause_s = pause_s
        self.stopping = threading.Event()
        self.next_n = iter(range(10**9))
        self.lock = threading.Lock()
        self.listener = _Sent({m.proxy_port: m.index for m in members})
        hosts = ",".join(m.host for m in members)
        self.client = MongoClient(
            f"mongodb://{hosts}/?replicaSet={SET_NAME}", w="majority", retryWrites=True,
            serverSelectionTimeoutMS=3000, connectTimeoutMS=2000, socketTimeoutMS=5000,
            event_listeners=[self.listener])
        self.db = self.client[DB]
        self.threads = [threading.Thread(target=self._inserter, name=f"inserter{i}", daemon=True)
                        for i in range(inserters)]
        self.threads.append(threading.Thread(target=self._incrementer, name="incrementer",
                                             daemon=True))

    def create_counters(self):
        """The counters' documents, before the workload starts (retried as inserts)."""
        for k in range(N_COUNTERS):
            self._insert(COUNTERS, {"_id": f"c{k}", "n": 0, "ops": []})

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self, timeout=INSERT_RETRY_S + 15):
        """Stops the writers after their current operation; returns the names of those
        that did not stop (a hang)."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        hung = [t.name for t in self.threads if t.is_alive()]
        if not hung:
            self.client.close()
        return hung

    def _member(self):
        sent = self.listener.sent()
        return sent[-1][0] if sent else None

    def _insert(self, coll, doc):
        """Inserts doc until acknowledged or INSERT_RETRY_S pass; records the outcome."""
        h = self.history
        h.record("insert", "invoke", coll=coll, id=doc["_id"])
        deadline = time.monotonic() + self.INSERT_RETRY_S
        attempts, sent, errors = 0, [], Counter()
        while True:
            attempts += 1
            self.listener.begin()
            try:
                self.db[coll].insert_one(doc)
                h.record("insert", "ok", coll=coll, id=doc["_id"], member=self._member(),
                         attempts=attempts, sent=sent + self.listener.sent())
                return
            except DuplicateKeyError:
                # Only this insert uses this _id: an earlier attempt (ours, or pymongo's
                # own retry) was applied.
                h.record("insert", "ok", coll=coll, id=doc["_id"], member=self._member(),
                         attempts=attempts, duplicate=True, sent=sent + self.listener.sent())
                return
            except PyMongoError as e:
                sent += self.listener.sent()
                errors[type(e).__name__] += 1
            if time.monotonic() > deadline:
                h.record("insert", outcome_of_failure(sent), coll=coll, id=doc["_id"],
                         attempts=attempts, errors=dict(errors), sent=sent)
                return
            time.sleep(0.05)

    def _inserter(self):
        while not self.stopping.is_set():
            with self.lock:
                n = next(self.next_n)
            self._insert(ITEMS, {"_id": f"w-{n}", "n": n})
            time.sleep(self.pause_s)

    def _incrementer(self):
        h = self.history
        rng = random.Random(0)
        m = 0
        while not self.stopping.is_set():
            k, op_id = rng.randrange(N_COUNTERS), f"inc-{m}"
            m += 1
            h.record("inc", "invoke", counter=f"c{k}", id=op_id)
            self.listener.begin()
            # sent: each command pymongo sent for it (its own retry included), as
            # [member, "ok" | "refused" | "error"].
            try:
                r = self.db[COUNTERS].update_one(
                    {"_id": f"c{k}"}, {"$inc": {"n": 1}, "$push": {"ops": op_id}})
                h.record("inc", "ok" if r.matched_count == 1 else "fail", counter=f"c{k}",
                         id=op_id, member=self._member(), matched=r.matched_count,
                         sent=self.listener.sent())
            except PyMongoError as e:
                h.record("inc", outcome_of_failure(self.listener.sent()), counter=f"c{k}",
                         id=op_id, error=type(e).__name__, code=getattr(e, "code", None),
                         sent=self.listener.sent())
            time.sleep(self.pause_s)


# ---- change streams -----------------------------------------------------------------

OP_OF_EVENT = {"insert": "i", "update": "u", "replace": "u", "delete": "d"}


def ts_pair(ts):
    return [ts.time, ts.inc] if isinstance(ts, Timestamp) else ts


class StreamFollower:
    """A change stream on database DB of one member, through its proxy (a direct
    connection, secondaryPreferred), with raw aggregate/getMore commands so that every
    resume is ours and counted. Records each event as [token, op, ns, _id, clusterTime];
    on any error resumes after its last event's token (before the first event: after
    the opening's postBatchResumeToken), waiting for the member as long as it takes."""

    def __init__(self, member, history):
        self.member = member
        self.history = history
        self.events = []
        self.resumes = 0
        self.errors = Counter()
        self.token = None
        self.opened = threading.Event()
        self.stopping = threading.Event()
        self.client = MongoClient(
            "127.0.0.1", member.proxy_port, directConnection=True,
            read_preference=ReadPreference.SECONDARY_PREFERRED,
            serverSelectionTimeoutMS=2000, connectTimeoutMS=2000, socketTimeoutMS=10000)
        self.db = self.client.get_database(DB, read_preference=ReadPreference.SECONDARY_PREFERRED)
        self.thread = threading.Thread(target=self._run, name=f"stream{member.index}", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(30)
        self.client.close()
        return not self.thread.is_alive()

    def _open(self):
        spec = {} if self.token is None else {"resumeAfter": self.token}
        reply = self.db.command("aggregate", 1, pipeline=[{"$changeStream": spec}], cursor={})
        return reply["cursor"]

    def _take(self, cursor, batch_key):
        for ev in cursor.get(batch_key, []):
            ns = ev.get("ns", {})
            self.events.append([ev["_id"]["_data"], OP_OF_EVENT.get(ev["operationType"], ev["operationType"]),
                                f"{ns.get('db')}.{ns.get('coll')}", ev.get("documentKey", {}).get("_id"),
                                ts_pair(ev.get("clusterTime"))])
            self.token = ev["_id"]
        if self.token is None or not self.events:
            # No event yet: the opening's position is where to resume from.
            self.token = cursor.get("postBatchResumeToken", self.token)

    def _follow(self):
        cursor = self._open()
        self._take(cursor, "firstBatch")
        self.opened.set()
        while not self.stopping.is_set():
            cursor = self.db.command("getMore", cursor["id"], collection="$cmd.aggregate",
                                     maxTimeMS=500)["cursor"]
            self._take(cursor, "nextBatch")

    def _run(self):
        first = True
        while not self.stopping.is_set():
            if not first:
                self.resumes += 1
                self.history.record("resume", "start", member=self.member.index,
                                    token=self.token and self.token["_data"])
            first = False
            try:
                self._follow()
            except PyMongoError as e:
                self.errors[type(e).__name__] += 1
                self.history.record("stream", "error", member=self.member.index,
                                    error=f"{type(e).__name__}: {str(e)[:200]}")
                time.sleep(0.2)


# ---- who is primary -----------------------------------------------------------------

class PrimaryMonitor:
    """Polls the members' hello (on their real ports) and records each new leadership:
    an election is a new (member, term) seen as the highest-term primary, a failover an
    election whose member differs from the previous primary's."""

    def __init__(self, members, history, interval=0.2):
        self.members, self.history, self.interval = members, history, interval
        self.current = None
        self.elections = 0
        self.failovers = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(10)

    def poll(self):
        with self.lock:
            return self._poll()

    def _poll(self):
        seen = leader(self.members)
        if seen is None or seen == self.current:
            return seen
        if self.current is not None and seen[1] <= self.current[1]:
            return seen  # a stale primary answering again: not a new leadership
        if self.current is not None:
            self.elections += 1
            if seen[0] != self.current[0]:
                self.failovers += 1
        self.history.record("primary", "new", member=seen[0], term=seen[1])
        self.current = seen
        return seen

    def _run(self):
        while not self.stopping.is_set():
            self.poll()
            time.sleep(self.interval)


# ---- faults -------------------------------------------------------------------------

FAULT_KINDS = ("kill", "pause", "isolate", "split")


class Faults:
    """Induces faults, one at a time, from a seeded random schedule:
      kill    - kill -9, down for the hold time, restarted on the same port and dbpath
      pause   - SIGSTOP for the hold time, then SIGCONT
      isolate - every link of the member cut both ways, clients cut from it too
      split   - split-brain {m} | {the other two}: member links cut, clients reach all
    A partition's cut connections are reset or black-holed (chosen at random). The
    target is the current primary with probability `primary_p`, else any member. The
    fault lasts 3 to 6 election timeouts, then 1 to 2 pass after the set has a primary
    again before the next one."""

    def __init__(self, members, network, history, monitor, seed, election_ms, primary_p=0.8,
                 draw_from=FAULT_KINDS):
        self.members, self.network, self.history = members, network, history
        self.draw_from = tuple(draw_from)
        self.monitor = monitor
        self.rng = random.Random(seed)
        self.election_s = election_ms / 1000
        self.primary_p = primary_p
        self.induced = Counter()

    def pick_target(self):
        primary = wait_for(lambda: leader(self.members), 10)
        if primary is not None and self.rng.random() < self.primary_p:
            return primary[0], True
        return self.rng.randrange(len(self.members)), False

    def one(self, kind=None):
        """Induces one fault (of `kind`, else a random one), holds it, heals it."""
        kind = kind or self.rng.choice(self.draw_from)
        target, on_primary = self.pick_target()
        mode = self.rng.choice(("reset", "blackhole"))
        # An election takes one to two election timeouts after the last heartbeat, and
        # a follower refuses its vote while it heard from the leader lately: hold the
        # fault long enough for the others to elect one (usually).
        hold = self.rng.uniform(3, 6) * self.election_s
        m = self.members[target]
        self.history.record("fault", "start", kind=kind, member=target, primary=on_primary,
                            mode=mode if kind in ("isolate", "split") else None,
                            hold=round(hold, 2))
        if kind == "kill":
            m.kill9()
        elif kind == "pause":
            m.pause()
        elif kind == "isolate":
            self.network.isolate(target, clients_cut=True, mode=mode)
        elif kind == "split":
            others = [i for i in range(len(self.members)) if i != target]
            self.network.split([[target], others], mode=mode)
        self._hold(hold)
        self.heal_all()
        self.induced[kind] += 1
        self.history.record("fault", "end", kind=kind, member=target)

    def _hold(self, seconds):
        """Sleeps while polling the monitor (so short leaderships are seen)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.monitor.poll()
            time.sleep(0.1)

    def heal_all(self):
        """Every link healed, every member running and not paused."""
        self.network.heal()
        for m in self.members:
            if m.paused:
                m.resume()
            if not m.is_running():
                try:
                    m.start()
                except StartTimeout as e:
                    # gap() finds it not answering and ends the faults.
                    self.history.record("liveness", "restart", member=m.index, error=str(e))

    def gap(self):
        """The quiet time between two faults: the set elects a primary and every member
        answers (if within a minute: else False), then it runs a little."""
        def recovered():
            return self.monitor.poll() and all(hello(m) for m in self.members)
        if not wait_for(recovered, 60):
            self.history.record("liveness", "no primary or a member not answering", seconds=60)
            return False
        self._hold(self.rng.uniform(1, 2) * self.election_s)
        return True


# ---- the end state ------------------------------------------------------------------

def oplog_key(entry):
    """The document an oplog entry is about: o2._id for an update, o._id otherwise."""
    for field in ("o2", "o"):
        doc = entry.get(field)
        if isinstance(doc, dict) and "_id" in doc:
            return doc["_id"]
    return None


def member_state(m):
    """What one member holds, read on its real port: the items' _ids, the counters,
    its whole oplog as [ts, op, ns, _id] entries."""
    with m.client() as c:
        items = [d["_id"] for d in c[DB][ITEMS].find({}, {"_id": 1})]
        counters = {d["_id"]: {"n": d["n"], "ops": d["ops"]} for d in c[DB][COUNTERS].find()}
        oplog = [[ts_pair(e["ts"]), e["op"], e["ns"], oplog_key(e)]
                 for e in c.local["oplog.rs"].find({}).sort("$natural", 1)]
    return {"items": items, "counters": counters, "oplog": oplog}


def summary(m):
    """(items count, last oplog ts) of a member, or None if it does not answer."""
    try:
        with m.client(serverSelectionTimeoutMS=2000, socketTimeoutMS=5000) as c:
            last = c.local["oplog.rs"].find_one({}, sort=[("$natural", -1)])
            return c[DB][ITEMS].count_documents({}), last and ts_pair(last["ts"])
    except PyMongoError:
        return None


def settled(members):
    """True when exactly one member is primary, the others secondaries, and all hold
    the same number of items and the same last oplog entry."""
    hellos = [hello(m) for m in members]
    if any(h is None for h in hellos):
        return False
    if sum(bool(h.get("isWritablePrimary")) for h in hellos) != 1:
        return False
    if not all(h.get("isWritablePrimary") or h.get("secondary") for h in hellos):
        return False
    sums = [summary(m) for m in members]
    return sums[0] is not None and all(s == sums[0] for s in sums)


# ---- the checker ----------------------------------------------------------------------
# Pure functions of the history (its records), the members' end states (member index ->
# member_state()) and the streams (member index -> {"events": [[token, op, ns, _id,
# clusterTime], ...], "resumes": n}). Each check returns a list of violations (strings).

def outcomes(history, op, coll=None):
    """id -> final outcome ("ok", "fail", "unknown"; "invoked" if none was recorded)
    of every operation `op` (on `coll`) the history invoked."""
    result = {}
    for r in history:
        if r["op"] != op or (coll and r.get("coll") != coll):
            continue
        if r["type"] == "invoke":
            result.setdefault(r["id"], "invoked")
        else:
            result[r["id"]] = r["type"]
    return result


def _ids(outcome_map, *wanted):
    return {i for i, o in outcome_map.items() if o in wanted}


def check_inserts(history, states):
    """Every acknowledged insert on every member; nothing stored that was never
    invoked or whose every attempt was refused; no _id twice."""
    inserts = outcomes(history, "insert", ITEMS)
    acked, failed = _ids(inserts, "ok"), _ids(inserts, "fail")
    violations = []
    for m, st in sorted(states.items()):
        have = set(st["items"])
        if len(have) != len(st["items"]):
            dups = [i for i, c in Counter(st["items"]).items() if c > 1]
            violations.append(f"member {m}: _ids stored twice: {sorted(dups)[:5]}")
        for what, ids in (("acknowledged inserts missing (lost writes)", acked - have),
                          ("documents never inserted by the workload", have - set(inserts)),
                          ("inserts whose every attempt was refused are stored", have & failed)):
            if ids:
                violations.append(f"member {m}: {len(ids)} {what}: {sorted(ids, key=str)[:5]}")
    return violations


def check_counters(history, states):
    """Each counter within [acknowledged, acknowledged + unknown] increments, and (from
    the ids each increment pushed) no acknowledged one missing, none applied twice,
    none applied that was never sent or was refused."""
    incs = outcomes(history, "inc")
    counter_of = {r["id"]: r["counter"] for r in history if r["op"] == "inc" and r["type"] == "invoke"}
    violations = []
    for m, st in sorted(states.items()):
        for cid in sorted(set(counter_of.values()) | set(st["counters"])):
            doc = st["counters"].get(cid)
            if doc is None:
                violations.append(f"member {m}: counter {cid} missing")
                continue
            mine = {i: o for i, o in incs.items() if counter_of[i] == cid}
            acked, unknown = len(_ids(mine, "ok")), len(_ids(mine, "unknown", "invoked"))
            if not acked <= doc["n"] <= acked + unknown:
                violations.append(f"member {m}: counter {cid} = {doc['n']}, outside "
                                  f"[{acked}, {acked + unknown}] (acknowledged, + unknown)")
            violations += _counter_ops(m, cid, doc, mine)
    return violations


def _counter_ops(m, cid, doc, mine):
    applied = Counter(doc["ops"])
    problems = [
        ("increments applied twice", {i for i, c in applied.items() if c > 1}),
        ("acknowledged increments missing", _ids(mine, "ok") - set(applied)),
        ("increments never sent to it applied", set(applied) - set(mine)),
        ("increments refused on every attempt applied", _ids(mine, "fail") & set(applied)),
    ]
    out = [f"member {m}: counter {cid}: {len(ids)} {what}: {sorted(ids)[:5]}"
           for what, ids in problems if ids]
    if doc["n"] != len(doc["ops"]):
        out.append(f"member {m}: counter {cid}: n = {doc['n']} but {len(doc['ops'])} ids pushed")
    return out


def data_entries(oplog):
    """The oplog's inserts, updates and deletes in database DB, as (ts, op, ns, _id)."""
    return [tuple(map(_hashable, e)) for e in oplog
            if e[1] in ("i", "u", "d") and e[2].startswith(DB + ".")]


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


def stream_entries(events):
    """A stream's data events in database DB, as (clusterTime, op, ns, _id)."""
    return [(_hashable(e[4]), e[1], e[2], e[3]) for e in events
            if e[1] in ("i", "u", "d") and e[2].startswith(DB + ".")]


def check_stream(m, events, state):
    """One member's stream, across its resumes: every event once (no token twice), in
    the order of the member's oplog, none missing (a gap) or extra; every document
    present at the end delivered as exactly one insert event."""
    violations = []
    tokens = Counter(e[0] for e in events)
    dup_tokens = [t for t, c in tokens.items() if c > 1]
    if dup_tokens:
        violations.append(f"member {m}: stream delivered {len(dup_tokens)} events twice "
                          f"(tokens {dup_tokens[:3]})")
    got, want = stream_entries(events), data_entries(state["oplog"])
    if got != want:
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        violations.append(f"member {m}: stream differs from its oplog at event {i} of "
                          f"{len(got)} (oplog {len(want)}): got {got[i:i + 2]}, oplog {want[i:i + 2]}")
    inserted = Counter(e[3] for e in got if e[1] == "i" and e[2] == f"{DB}.{ITEMS}")
    gaps = [i for i in state["items"] if inserted[i] == 0]
    dups = [i for i in state["items"] if inserted[i] > 1]
    for what, ids in (("committed inserts never delivered (gap)", gaps),
                      ("committed inserts delivered more than once", dups)):
        if ids:
            violations.append(f"member {m}: stream: {len(ids)} {what}: {sorted(ids)[:5]}")
    return violations


def check_streams(streams, states):
    violations = []
    streams = {m: s for m, s in streams.items() if m in states}  # members that answered
    for m in sorted(streams):
        violations += check_stream(m, streams[m]["events"], states[m])
    tokens = {m: [e[0] for e in s["events"]] for m, s in streams.items()}
    if not tokens:
        return violations
    first = min(tokens)
    for m in sorted(tokens):
        if tokens[m] != tokens[first]:
            violations.append(f"member {m}: stream's tokens differ from member {first}'s")
    return violations


def check_oplogs(states):
    """local.oplog.rs identical (ts, op, ns, _id) on every member."""
    if not states:
        return []
    first = min(states)
    ref = states[first]["oplog"]
    violations = []
    for m in sorted(states):
        log = states[m]["oplog"]
        if log != ref:
            i = next((k for k, (a, b) in enumerate(zip(log, ref)) if a != b), min(len(log), len(ref)))
            violations.append(f"member {m}: oplog differs from member {first}'s at entry {i} "
                              f"({len(log)} vs {len(ref)} entries): {log[i:i + 1]} vs {ref[i:i + 1]}")
    return violations


def check(history, states, streams):
    """Every violation the end state and the history show (none: the run was correct)."""
    return (check_inserts(history, states) + check_counters(history, states)
            + check_streams(streams, states) + check_oplogs(states))


def figures(history, streams):
    """The run's figures, from the history and the streams."""
    faults = Counter(r["kind"] for r in history if r["op"] == "fault" and r["type"] == "end")
    leaders = [r["member"] for r in history if r["op"] == "primary"]
    writes = {}
    for op, coll in (("insert", ITEMS), ("inc", None)):
        o = Counter(outcomes(history, op, coll).values())
        writes[op] = {k: o[k] for k in ("ok", "unknown", "fail", "invoked")}
    return {
        "faults": dict(sorted(faults.items())),
        "elections": max(0, len(leaders) - 1),
        "failovers": sum(1 for a, b in zip(leaders, leaders[1:]) if a != b),
        "writes": writes,
        "events": {m: len(s["events"]) for m, s in sorted(streams.items())},
        "resumes": {m: s["resumes"] for m, s in sorted(streams.items())},
        "liveness_problems": sum(1 for r in history if r["op"] == "liveness"),
    }


# ---- a run ------------------------------------------------------------------------------

def run(seed, kinds=None, failovers=None, max_faults=None, election_ms=1000, workdir=None,
        inserters=2, primary_p=0.8, draw_from=FAULT_KINDS, keep=False, log=print):
    """A whole run: a fresh set behind the proxies, the streams and the workload, then
    faults (the `kinds` given, in order; else random ones of `draw_from` until
    `failovers` failovers were seen or `max_faults` were induced), healing, settling,
    the checks. Returns the report (a dict, also written to <workdir>/report.json).
    The data directories, member logs and history.jsonl are deleted after a clean run
    unless `keep`; kept after a violation or an error."""
    root = Path(workdir or tempfile.mkdtemp(prefix="tailstream-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"seed {seed}; data, logs and history in {root}")
    started = time.monotonic()
    members = [Member(i, root, election_ms) for i in range(3)]
    network = history = None
    clean = False
    try:
        for m in members:
            m.start()
        network = Network(members)
        initiate(members)
        history = History(root / "history.jsonl")
        faults = Faults(members, network, history, None, seed, election_ms, primary_p, draw_from)
        report = _exercise(members, history, faults, kinds, failovers, max_faults, inserters, log)
        report.update(seed=seed, seconds=round(time.monotonic() - started, 1),
                      workdir=str(root), unidentified_connections=network.unidentified)
        (root / "report.json").write_text(json.dumps(report, indent=1, default=str))
        clean = not report["violations"]
        return report
    finally:
        for m in members:
            m.stop()
        if network:
            network.close()
        if history:
            history.close()
        if clean and not keep:
            shutil.rmtree(root, ignore_errors=True)


def _exercise(members, history, faults, kinds, failovers, max_faults, inserters, log):
    monitor = faults.monitor = PrimaryMonitor(members, history)
    streams = {m.index: StreamFollower(m, history) for m in members}
    workload = Workload(members, history, inserters=inserters)
    try:
        monitor.start()
        _open_streams(streams)
        workload.create_counters()
        workload.start()
        faults.gap()
        problems = _induce(faults, monitor, kinds, failovers, max_faults, log)
        problems += _wind_down(members, faults, workload, monitor, log)
        states, unreadable = collect_states(members)
        problems += unreadable + _drain_streams(streams, states)
    finally:
        # After a failure too: no thread of this run goes on writing to its history.
        workload.stopping.set()
        monitor.stopping.set()
        for s in streams.values():
            s.stopping.set()
    stream_data = {i: {"events": s.events, "resumes": s.resumes, "errors": dict(s.errors)}
                   for i, s in streams.items()}
    violations = problems + check(history.records, states, stream_data)
    return {"figures": figures(history.records, stream_data), "violations": violations}


def _open_streams(streams):
    for s in streams.values():
        s.start()
    for s in streams.values():
        if not s.opened.wait(60):
            raise RuntimeError(f"the change stream on member {s.member.index} did not open")


def _induce(faults, monitor, kinds, failovers, max_faults, log):
    problems, n = [], 0
    while True:
        if kinds is not None:
            if n == len(kinds):
                break
            kind = kinds[n]
        elif monitor.failovers >= (failovers or 0) or (max_faults and n >= max_faults):
            break
        else:
            kind = None
        faults.one(kind)
        n += 1
        start = next(r for r in reversed(faults.history.records)
                     if r["op"] == "fault" and r["type"] == "start")
        log(f"fault {n}: {start['kind']} of member {start['member']}"
            f"{' (primary)' if start['primary'] else ''}{', ' + start['mode'] if start['mode'] else ''}"
            f", {start['hold']} s; elections {monitor.elections}, failovers {monitor.failovers}")
        if not faults.gap():
            # A set that stays without a primary this long does not come back by itself
            # (so far: a member deadlocked); more faults would only blur the picture.
            problems.append(f"liveness: no primary, or a member not answering, 60 s after "
                            f"fault {n}; no further faults induced")
            break
    return problems


def _wind_down(members, faults, workload, monitor, log):
    """Heals everything, stops the workload, waits for the set to settle."""
    problems = []
    faults.heal_all()
    hung = workload.stop()
    if hung:
        problems.append(f"liveness: workload threads did not stop: {hung}")
    log("faults healed, workload stopped; waiting for the set to settle")
    if not wait_for(lambda: settled(members), 120, interval=0.5):
        problems.append("liveness: the set did not settle (one primary, same items and oplog "
                        "end everywhere) within 120 s: " + str([summary(m) for m in members]))
        problems += [f"liveness: {p}" for p in diagnose(members)]
    monitor.stop()
    return problems


def diagnose(members):
    """For each member that answers no hello: a note, with its threads' stacks written
    next to its log (gdb, when there is one)."""
    notes = []
    for m in members:
        if wait_for(lambda m=m: hello(m, timeout=2), 6):
            continue
        where = m.dbpath / f"stacks-{int(time.time())}.txt"
        try:
            # /proc/<pid>/exe: the binary it runs, even if a newer build replaced the file.
            out = subprocess.run(["gdb", "-batch", "-ex", "thread apply all bt",
                                  f"/proc/{m.pid}/exe", str(m.pid)],
                                 capture_output=True, text=True, timeout=180).stdout
            where.write_text(out)
        except (OSError, subprocess.SubprocessError) as e:
            where = f"no stacks ({e})"
        notes.append(f"member {m.index} (pid {m.pid}) answers no hello; its stacks: {where}")
    return notes


def collect_states(members, timeout=30):
    """member_state() of every member that answers, and a problem for each that does
    not. Read again (for up to `timeout` seconds) until the oplogs end alike: the
    primary writes a no-op entry when it has been idle for 10 s, which a read may find
    on one member and not yet on another."""
    deadline = time.monotonic() + timeout
    while True:
        states, problems = {}, []
        for m in members:
            try:
                states[m.index] = member_state(m)
            except PyMongoError as e:
                problems.append(f"liveness: member {m.index}'s end state unreadable: "
                                f"{type(e).__name__}")
        ends = {len(st["oplog"]) and tuple(map(_hashable, st["oplog"][-1])) for st in states.values()}
        if len(ends) <= 1 or time.monotonic() > deadline:
            return states, problems
        time.sleep(0.5)


def _drain_streams(streams, states, timeout=60):
    """Lets every stream catch up with its member's oplog (or the timeout pass), then
    stops them."""
    def caught_up():
        return all(len(stream_entries(s.events)) >= len(data_entries(states[i]["oplog"]))
                   for i, s in streams.items() if i in states)
    wait_for(caught_up, timeout, interval=0.2)
    return [f"liveness: the stream on member {i} did not stop" for i, s in streams.items()
            if not s.stop()]


def format_report(report):
    """The figures as a small Markdown table, then the violations."""
    f = report["figures"]
    w = f["writes"]
    rows = [
        ("seed", report["seed"]),
        ("faults induced", ", ".join(f"{k} {v}" for k, v in f["faults"].items()) or "none"),
        ("elections observed", f["elections"]),
        ("failovers observed (primary changed)", f["failovers"]),
        ("inserts acknowledged / unknown / failed",
         f"{w['insert']['ok']} / {w['insert']['unknown'] + w['insert']['invoked']} / {w['insert']['fail']}"),
        ("increments acknowledged / unknown / failed",
         f"{w['inc']['ok']} / {w['inc']['unknown'] + w['inc']['invoked']} / {w['inc']['fail']}"),
        ("stream events per member", " / ".join(str(v) for v in f["events"].values())),
        ("stream resumes per member", " / ".join(str(v) for v in f["resumes"].values())),
        ("liveness problems (no primary for 60 s, a member not answering)",
         f["liveness_problems"]),
        ("violations", len(report["violations"])),
        ("duration (s)", report["seconds"]),
        ("proxied connections of unknown source (closed before looked up)",
         report["unidentified_connections"]),
    ]
    lines = ["| figure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    lines += [f"- VIOLATION: {v}" for v in report["violations"]]
    return "\n".join(lines)

"""The fault harness (tests/replset_faults.py) on a three-member set, and its checker.

The checker's functions run first on small synthetic histories: a clean one passes, and
a lost acknowledged write, a stream that delivers an event twice, skips one or reorders
them, a counter outside its bounds, a document nobody inserted and diverging oplogs are
each caught. The proxies' link cuts are tested without a server. Then one short seeded
run of real faults (kill -9, SIGSTOP and two partitions, all of the primary) must end
with no violation, having seen a failover and acknowledged writes.

Reproduce a failing run with its seed: TAILSTREAM_FAULTS_SEED=<seed>; the campaign is
bench/replset_faults.py.
"""

import copy
import os
import socket
import threading
import time

import pytest

import replset_faults as rf

ITEMS_NS = f"{rf.DB}.{rf.ITEMS}"
COUNTERS_NS = f"{rf.DB}.{rf.COUNTERS}"


# ---- synthetic histories --------------------------------------------------------

def synthetic():
    """A small clean run: three inserts (w-0 and w-1 acknowledged, w-2 of unknown
    outcome and not applied), one counter with two acknowledged increments and one of
    unknown outcome that was applied; every member holds the same, and each stream
    delivered the oplog's data entries in its order."""
    history = [
        {"op": "insert", "type": "invoke", "coll": rf.COUNTERS, "id": "c0"},
        {"op": "insert", "type": "ok", "coll": rf.COUNTERS, "id": "c0"},
        {"op": "primary", "type": "new", "member": 0, "term": 1},
    ]
    for i, outcome in enumerate(["ok", "ok", "unknown"]):
        history += [{"op": "insert", "type": "invoke", "coll": rf.ITEMS, "id": f"w-{i}"},
                    {"op": "insert", "type": outcome, "coll": rf.ITEMS, "id": f"w-{i}"}]
    for i, outcome in enumerate(["ok", "ok", "unknown"]):
        history += [{"op": "inc", "type": "invoke", "counter": "c0", "id": f"inc-{i}"},
                    {"op": "inc", "type": outcome, "counter": "c0", "id": f"inc-{i}"}]
    history += [{"op": "primary", "type": "new", "member": 1, "term": 2},
                {"op": "fault", "type": "end", "kind": "kill", "member": 0}]
    oplog = [[[1, 1], "n", "", None], [[2, 1], "i", COUNTERS_NS, "c0"],
             [[3, 1], "i", ITEMS_NS, "w-0"], [[3, 2], "u", COUNTERS_NS, "c0"],
             [[4, 1], "i", ITEMS_NS, "w-1"], [[4, 2], "u", COUNTERS_NS, "c0"],
             [[5, 1], "u", COUNTERS_NS, "c0"]]
    state = {"items": ["w-0", "w-1"], "oplog": oplog,
             "counters": {"c0": {"n": 3, "ops": ["inc-0", "inc-1", "inc-2"]}}}
    events = [[f"tok{e[0][0]}.{e[0][1]}", e[1], e[2], e[3], e[0]] for e in oplog if e[1] != "n"]
    states = {m: copy.deepcopy(state) for m in range(3)}
    streams = {m: {"events": copy.deepcopy(events), "resumes": 0} for m in range(3)}
    return history, states, streams


def violations_of(history, states, streams):
    return rf.check(history, states, streams)


def test_checker_passes_a_clean_history():
    assert violations_of(*synthetic()) == []
    f = rf.figures(*synthetic()[::2])
    assert f["failovers"] == 1 and f["faults"] == {"kill": 1}
    assert f["writes"]["insert"] == {"ok": 2, "unknown": 1, "fail": 0, "invoked": 0}
    assert f["writes"]["inc"] == {"ok": 2, "unknown": 1, "fail": 0, "invoked": 0}


def test_checker_catches_a_lost_acknowledged_write():
    history, states, streams = synthetic()
    states[2]["items"].remove("w-1")
    found = violations_of(history, states, streams)
    assert any("member 2" in v and "lost writes" in v and "w-1" in v for v in found), found


def test_checker_catches_a_document_never_inserted():
    history, states, streams = synthetic()
    for s in states.values():
        s["items"].append("w-99")
    found = rf.check_inserts(history, states)
    assert len(found) == 3 and all("never inserted" in v and "w-99" in v for v in found)


def test_checker_catches_a_duplicate_event():
    history, states, streams = synthetic()
    events = streams[1]["events"]
    events.insert(2, list(events[1]))  # w-0's insert delivered twice, across a resume
    found = violations_of(history, states, streams)
    assert any("member 1" in v and "twice" in v for v in found), found
    assert any("member 1" in v and "more than once" in v and "w-0" in v for v in found), found


def test_checker_catches_a_gap_in_a_stream():
    history, states, streams = synthetic()
    del streams[0]["events"][3]  # w-1's insert never delivered
    found = violations_of(history, states, streams)
    assert any("member 0" in v and "gap" in v and "w-1" in v for v in found), found
    assert any("member 0" in v and "differs from its oplog" in v for v in found), found


def test_checker_catches_events_out_of_oplog_order():
    history, states, streams = synthetic()
    events = streams[2]["events"]
    events[1], events[3] = events[3], events[1]
    found = violations_of(history, states, streams)
    assert any("member 2" in v and "differs from its oplog" in v for v in found), found


def test_checker_bounds_counters():
    history, states, streams = synthetic()
    # One more than acknowledged + unknown: an increment applied twice.
    states[0]["counters"]["c0"] = {"n": 4, "ops": ["inc-0", "inc-1", "inc-2", "inc-1"]}
    # One less than acknowledged: an acknowledged increment lost.
    states[1]["counters"]["c0"] = {"n": 1, "ops": ["inc-0"]}
    found = rf.check_counters(history, states)
    assert any("member 0" in v and "outside [2, 3]" in v for v in found), found
    assert any("member 0" in v and "applied twice" in v and "inc-1" in v for v in found), found
    assert any("member 1" in v and "outside [2, 3]" in v for v in found), found
    assert any("member 1" in v and "acknowledged increments missing" in v for v in found), found
    assert not any("member 2" in v for v in found)


def test_checker_catches_diverging_oplogs():
    history, states, streams = synthetic()
    states[1]["oplog"][4][0] = [4, 9]
    found = rf.check_oplogs(states)
    assert len(found) == 1 and "member 1" in found[0] and "entry 4" in found[0]


def test_checker_treats_failed_and_unknown_outcomes_apart():
    history, states, streams = synthetic()
    # w-2 (unknown outcome) applied after all: allowed.
    for s in states.values():
        s["items"].append("w-2")
    assert rf.check_inserts(history, states) == []
    # A write whose every attempt was refused (10107) must not be there.
    history = [dict(r, type="fail") if r.get("id") == "w-2" and r["type"] == "unknown" else r
               for r in history]
    found = rf.check_inserts(history, states)
    assert len(found) == 3 and all("refused" in v for v in found)


# ---- the proxies, without a server ---------------------------------------------

class FakeMember:
    """Stands in for a member: an echo server on its real port."""

    def __init__(self, index, pid=None):
        self.index, self.pid = index, pid
        self.proxy_port = rf.free_port()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = self.listener.getsockname()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


def echoes(port, timeout=1.0):
    """True if a fresh connection through the proxy on `port` echoes; False if it is
    closed or stays silent."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"ping")
            return s.recv(4) == b"ping"
    except OSError:
        return False


def test_proxies_cut_links_by_source():
    # Member 0 "is" this process (its connections come from our pid), member 1 is not
    # running (no pid): our connections to member 1's proxy are member 0's, and those
    # to member 0's proxy member 0's own.
    members = [FakeMember(0, pid=os.getpid()), FakeMember(1)]
    net = rf.Network(members)
    try:
        assert echoes(members[1].proxy_port)
        held = socket.create_connection(("127.0.0.1", members[1].proxy_port), timeout=1)
        held.sendall(b"ping")
        assert held.recv(4) == b"ping"
        assert {(c.src, c.dst) for c in net.conns} == {(0, 1)}

        net.set_cut({(0, 1)})  # reset: the open connection closes, new ones too
        assert held.recv(4) == b""
        assert not echoes(members[1].proxy_port)
        assert echoes(members[0].proxy_port)  # other links unaffected

        net.set_cut({(0, 1)}, mode="blackhole")  # accepted, never answered
        assert not echoes(members[1].proxy_port, timeout=0.5)
        net.heal()
        assert echoes(members[1].proxy_port)

        net.set_cut({(None, 1)})  # clients only: we are member 0, not a client
        assert echoes(members[1].proxy_port)
        members[0].pid = None  # now we are a client
        assert not echoes(members[1].proxy_port)
        assert net.unidentified == 0
    finally:
        net.close()


# ---- a short run of real faults -------------------------------------------------

@pytest.mark.timeout(900)
def test_faults_on_the_primary_lose_nothing(tmp_path):
    seed = int(os.environ.get("TAILSTREAM_FAULTS_SEED", "7"))
    report = rf.run(seed, kinds=["kill", "pause", "isolate", "split"], primary_p=1.0,
                    workdir=tmp_path / "faults", keep=True)
    print(rf.format_report(report))
    assert report["violations"] == [], (
        f"seed {seed}: data, logs and history in {report['workdir']}\n"
        + rf.format_report(report))
    f = report["figures"]
    assert sum(f["faults"].values()) == 4
    # Not vacuous: the set changed primary and writes were acknowledged through it.
    assert f["failovers"] >= 1, rf.format_report(report)
    assert f["writes"]["insert"]["ok"] > 0 and f["writes"]["inc"]["ok"] > 0
    assert all(n > 0 for n in f["events"].values())

"""The HTTP listener (issue 30): `--httpPort` serves Prometheus/OpenMetrics text at
`/metrics` and `/health` for load balancers; off by default, loopback by default."""

import re
import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from pymongo import CursorType

from conftest import TailstreamServer, binary_path, eventually, free_port

SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


@pytest.fixture
def http_server(tmp_path):
    srv = TailstreamServer(tmp_path / "db", http=True)
    srv.start()
    yield srv
    srv.stop()


def get(srv, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def scrape(srv):
    """{(name, labels): value} of every series (labels as the text between braces)."""
    _, ctype, text = get(srv, "/metrics")
    assert ctype.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    series = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = SERIES.match(line)
        assert m, f"not an OpenMetrics sample: {line!r}"
        series[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return series


def test_health_and_unknown_paths(http_server):
    assert get(http_server, "/health")[::2] == (200, "ok\n")
    with pytest.raises(urllib.error.HTTPError) as e:
        get(http_server, "/nothing")
    assert e.value.code == 404
    req = urllib.request.Request(f"http://127.0.0.1:{http_server.http_port}/metrics",
                                 data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405


def test_metrics_follow_the_servers_work(http_server):
    before = scrape(http_server)
    assert before[("tailstream_up", "")] == 1
    with http_server.client() as c:
        c.test.m.insert_many([{"i": i} for i in range(20)])
        assert c.test.m.count_documents({}) == 20
        after = scrape(http_server)
        status = c.admin.command("serverStatus")
    ins = ("tailstream_operations_total", '{type="insert"}')
    assert after[ins] - before.get(ins, 0) == 20
    assert after[("tailstream_connections", "")] >= 1
    assert after[("tailstream_network_requests_total", "")] > before[("tailstream_network_requests_total", "")]
    # The same figures serverStatus reports (scraped just before it: at most equal).
    assert after[("tailstream_commits_total", "")] <= status["durability"]["committed"]
    assert after[("tailstream_fsyncs_total", "")] >= 1
    assert after[("tailstream_oplog_newest_seconds", "")] > 1_700_000_000


def test_each_consumer_has_its_series(http_server):
    with http_server.client() as c:
        c.test.create_collection("bus", capped=True, size=1 << 20)
        c.test.bus.insert_many([{"n": i} for i in range(7)])
        tail = c.test.bus.find(cursor_type=CursorType.TAILABLE_AWAIT, batch_size=3)
        assert len([next(tail) for _ in range(7)]) == 7
        with c.test.events.watch(max_await_time_ms=50) as stream:
            assert stream.try_next() is None
            c.test.events.insert_many([{"e": i} for i in range(4)])
            got = 0
            while got < 4:
                got += stream.try_next() is not None

            def consumers():
                s = scrape(http_server)
                return {labels: v for (name, labels), v in s.items()
                        if name == "tailstream_cursor_returned_documents_total"}

            found = eventually(lambda: len(consumers()) == 2 and consumers())
            read = {name: v for (name, labels), v in scrape(http_server).items()
                    if name.startswith("tailstream_cursor_oplog_read")}
        tail.close()
    # The stream read its collection's oplog entries: the create and the four inserts.
    assert read["tailstream_cursor_oplog_read_entries_total"] == 5, read
    assert read["tailstream_cursor_oplog_read_bytes_total"] > 5 * 50, read
    assert found, "both consumers listed"
    by_kind = {("change_stream" if 'kind="change_stream"' in k else "tailable"): v
               for k, v in found.items()}
    assert by_kind == {"tailable": 7, "change_stream": 4}
    assert all('ns="test.' in k for k in found)


def test_a_taken_http_port_stops_the_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = subprocess.run([str(binary_path()), "--port", str(free_port()), "--dbpath",
                            str(tmp_path / "db"), "--httpPort", str(port), "--nounixsocket"],
                           capture_output=True, text=True, timeout=30)
    assert p.returncode == 48 and f"127.0.0.1:{port}" in p.stderr


def test_a_change_stream_behind_shows_its_lag(http_server):
    import time
    with http_server.client() as c:
        first = c.test.lag.insert_one({"n": 0})
        start = c.test.lag.database.client.admin.command("ping")["operationTime"]
        time.sleep(2.2)
        c.test.lag.insert_one({"n": 1})
        name = "tailstream_cursor_lag_seconds"

        def lags():
            return [v for (n, labels), v in scrape(http_server).items()
                    if n == name and 'ns="test.lag"' in labels]

        def entries():
            return [v for (n, labels), v in scrape(http_server).items()
                    if n == "tailstream_cursor_lag_entries" and 'ns="test.lag"' in labels]

        with c.test.lag.watch(start_at_operation_time=start, batch_size=0,
                              max_await_time_ms=50) as stream:
            behind = eventually(lambda: lags())
            assert behind and behind[0] >= 2, behind
            # The two inserts from the start point on, not read yet (of this collection:
            # nothing else was written).
            assert eventually(lambda: entries()) == [2.0], entries()
            # From the first insert's time on: both inserts.
            assert [stream.try_next()["fullDocument"]["n"] for _ in range(2)] == [0, 1]
            assert eventually(lambda: lags() == [0]), lags()
            assert eventually(lambda: entries() == [0.0]), entries()
        assert first.acknowledged


def test_operation_latencies_are_histograms(http_server):
    """Command latency per class as OpenMetrics histograms: cumulative buckets from
    100 µs to 10 s and +Inf, their count and sum agreeing with serverStatus's
    opLatencies (the same commands timed)."""
    with http_server.client() as c:
        c.test.lat.insert_many([{"i": i} for i in range(10)])
        for _ in range(20):
            c.test.lat.find_one({"i": 3})
        c.test.lat.find_one({"$where": "sleep(30) || true"})  # one read over 25 ms
        series = scrape(http_server)
        reads_status = c.admin.command("serverStatus")["opLatencies"]["reads"]
    name = "tailstream_operation_latency_seconds"
    reads = {labels: v for (n, labels), v in series.items()
             if n == f"{name}_bucket" and 'class="reads"' in labels}
    bounds = sorted((float(l.split('le="')[1].split('"')[0]), v) for l, v in reads.items())
    assert bounds[-1][0] == float("inf") and len(bounds) == 17, bounds
    counts = [v for _, v in bounds]
    assert counts == sorted(counts), "cumulative"
    total = series[(f"{name}_count", '{class="reads"}')]
    assert counts[-1] == total >= 21
    # The $where read took more than 25 ms: it is above that bucket.
    assert dict(bounds)[0.025] < total
    assert series[(f"{name}_sum", '{class="reads"}')] >= 0.03
    # serverStatus counted every read of the histogram, and perhaps the serverStatus
    # command's own neighbours since.
    assert reads_status["ops"] >= total

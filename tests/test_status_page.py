"""The live status page (issue 30), opened in a real browser: headless Chromium loads
`/` from the HTTP listener while change streams and a tailable cursor read, and the
page's table must show each consumer with its namespace, kind and what it read.
scripts/test.sh installs Chromium (Debian's `chromium`) when it is missing."""

import json
import re
import shutil
import subprocess
import urllib.request

import pytest
from pymongo import CursorType

from conftest import TailstreamServer


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no Chromium here: scripts/test.sh installs Debian's chromium package",
                pytrace=False)


def render(url, extra=()):
    """The page's DOM after its scripts ran for a few (virtual) seconds."""
    p = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=4000", *extra, "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def cells(dom, row_id):
    row = re.search(rf'<tr id="{row_id}"[^>]*>(.*?)</tr>', dom)
    assert row, f"no row {row_id} in the page"
    return {cls: re.sub(r"<[^>]+>", "", text) for cls, text in
            re.findall(r'<td class="(?:num )?([a-z]+)[^"]*"[^>]*>(.*?)</td>', row.group(1))}


@pytest.fixture
def http_server(tmp_path):
    srv = TailstreamServer(tmp_path / "db", http=True)
    srv.start()
    yield srv
    srv.stop()


def test_the_page_lists_every_consumer(http_server):
    with http_server.client(appname="status-test") as c:
        c.test.create_collection("bus", capped=True, size=1 << 20)
        c.test.bus.insert_many([{"n": i} for i in range(9)])
        tail = c.test.bus.find({"n": {"$gte": 0}}, cursor_type=CursorType.TAILABLE_AWAIT,
                               batch_size=4)
        assert len([next(tail) for _ in range(9)]) == 9
        with c.test.orders.watch(max_await_time_ms=50) as stream:
            assert stream.try_next() is None
            c.test.orders.insert_many([{"o": i} for i in range(3)])
            got = 0
            while got < 3:
                got += stream.try_next() is not None
            with urllib.request.urlopen(http_server.http_url + "/status.json") as r:
                status = json.loads(r.read())
            ids = {c["ns"]: c["id"] for c in status["cursors"]}
            assert set(ids) == {"test.bus", "test.orders"}, status
            dom = render(http_server.http_url + "/")
        tail.close()
    assert re.search(r'id="consumer-count">2<', dom), "the summary counts two consumers"
    bus = cells(dom, f"cursor-{ids['test.bus']}")
    assert (bus["ns"], bus["kind"], bus["docs"]) == ("test.bus", "tailable cursor", "9")
    # Who reads and what: the client's appName, the find's filter.
    assert (bus["client"], bus["filter"]) == ("status-test", '{"n":{"$gte":0}}'), bus
    assert bus["oplog"] == "–", bus
    orders = cells(dom, f"cursor-{ids['test.orders']}")
    assert (orders["ns"], orders["kind"], orders["docs"]) == ("test.orders", "change stream", "3")
    assert orders["lag"] == "0", orders
    assert orders["behind"] == "0", orders
    assert orders["client"] == "status-test"
    assert orders["filter"].startswith('[{"$changeStream":'), orders
    # The oplog entries it read: its own collection's, the create the first insert made
    # and the three inserts (no other collection's).
    assert re.fullmatch(r"4 / 0\.\d\d MB", orders["oplog"]), orders
    assert 'class="lag-plot"' in dom and 'id="writes"' in dom
    assert '<div id="error"></div>' in dom, "no error shown"


def test_the_page_says_when_the_server_is_gone(http_server, tmp_path):
    url = http_server.http_url + "/"
    page = urllib.request.urlopen(url).read().decode()
    saved = tmp_path / "status.html"
    saved.write_text(page)
    http_server.stop()
    # The same page, its server stopped: it reports that instead of going blank.
    dom = render(f"file://{saved}")
    assert re.search(r'<div id="error">the server does not answer', dom)
    http_server.start()

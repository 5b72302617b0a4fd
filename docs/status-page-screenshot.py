"""Remakes docs/status-page.png: a server with a few consumers (a tailable cursor and
change streams keeping up, one change stream behind) while writes go on, and the
status page in headless Chromium.

    TAILSTREAM_BIN=... python docs/status-page-screenshot.py   (with pymongo installed)
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone

from bson import Timestamp
from pymongo import CursorType, MongoClient

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("TAILSTREAM_BIN",
                     os.path.expanduser("~/.cache/tailstream/target/release/tailstream"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    port, http = free_port(), free_port()
    dbpath = tempfile.mkdtemp(prefix="ts-shot-")
    server = subprocess.Popen([BIN, "--port", str(port), "--dbpath", dbpath, "--quiet",
                               "--nounixsocket", "--httpPort", str(http)])
    try:
        c = MongoClient(port=port, directConnection=True, appname="orders-service")
        c.admin.command("ping")
        start = Timestamp(int(time.time()) - 1, 0)
        c.shop.create_collection("bus", capped=True, size=1 << 20)
        c.shop.orders.insert_many([{"n": i} for i in range(200)])
        time.sleep(2)
        c.shop.bus.insert_one({"msg": "first"})
        tail = c.shop.bus.find({}, cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(200)
        fast = c.shop.orders.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=200)
        billing = MongoClient(port=port, directConnection=True, appname="billing")
        behind = billing.shop.orders.watch(start_at_operation_time=start, batch_size=50)
        stop = time.time() + 12

        def produce():
            i = 0
            while time.time() < stop:
                c.shop.orders.insert_one({"n": i})
                c.shop.bus.insert_one({"msg": i})
                i += 1
                time.sleep(0.02)

        def read_stream():
            while time.time() < stop:
                fast.try_next()

        def read_tail():
            while time.time() < stop and tail.alive:
                try:
                    tail.next()
                except StopIteration:
                    pass

        threads = [threading.Thread(target=f) for f in (produce, read_stream, read_tail)]
        for t in threads:
            t.start()
        behind.try_next()  # it read one batch, then stopped
        time.sleep(4)
        out = os.path.join(HERE, "status-page.png")
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1900,520", "--virtual-time-budget=6000",
                        f"--screenshot={out}", f"http://127.0.0.1:{http}/"],
                       check=True, capture_output=True, timeout=120)
        for t in threads:
            t.join()
        print(f"wrote {out}")
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(dbpath, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

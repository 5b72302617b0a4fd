"""Initiates the conformance run's replica set (run.sh --replset): members on the ports
given (the first initiates and is the primary the suite starts from), then waits until
the first is primary and every other member a secondary."""

import sys
import time

from pymongo import MongoClient

SETTLE_S = 60


def wait_for(port, deadline):
    while True:
        try:
            with MongoClient("127.0.0.1", port, directConnection=True,
                             serverSelectionTimeoutMS=500) as c:
                c.admin.command("ping")
            return
        except Exception:  # noqa: BLE001 - still starting
            if time.monotonic() > deadline:
                sys.exit(f"member on port {port} did not answer")
            time.sleep(0.2)


def main(ports):
    hosts = [f"127.0.0.1:{p}" for p in ports]
    deadline = time.monotonic() + SETTLE_S
    for p in ports[1:]:
        wait_for(p, deadline)
    with MongoClient("127.0.0.1", ports[0], directConnection=True) as c:
        c.admin.command("replSetInitiate", {"_id": "rs0", "members": [
            {"_id": i, "host": h} for i, h in enumerate(hosts)]})
    uri = "mongodb://" + ",".join(hosts) + "/?replicaSet=rs0"
    with MongoClient(uri, serverSelectionTimeoutMS=SETTLE_S * 1000) as c:
        c.admin.command("ping")
        while time.monotonic() < deadline + SETTLE_S:
            if c.primary == ("127.0.0.1", ports[0]) and len(c.secondaries) == len(hosts) - 1:
                return
            time.sleep(0.2)
        sys.exit(f"the set did not settle: primary {c.primary}, secondaries {c.secondaries}")


if __name__ == "__main__":
    main([int(p) for p in sys.argv[1:]])

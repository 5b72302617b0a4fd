"""Issue 32's crash-cycle campaign: `cycles` rounds of a mixed workload against a fresh
server, kill -9 at a random moment, restart, audit (tests/crash_campaign.py says what
runs and what is counted). Prints each cycle's audit and a Markdown summary.

    python bench/crash_cycles/campaign.py [--cycles 100] [--seed 32] [--oplog-mb 2048]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path.insert(0, str(TESTS))

from conftest import TailstreamServer  # noqa: E402
from crash_campaign import run_campaign  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--oplog-mb", type=int, default=2048)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tailstream-bench-crash.") as root:
        server = TailstreamServer(Path(root) / "db", oplog_size_mb=args.oplog_mb)
        server.start()
        started = time.monotonic()
        try:
            totals = run_campaign(server, args.cycles, args.seed,
                                  report=lambda line: print(line, flush=True))
        finally:
            server.stop()
        minutes = (time.monotonic() - started) / 60
    print(f"\n### Crash cycles: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, seed {args.seed}\n")
    print("| cycles | disk full in | minutes | acknowledged writes checked | stream events "
          "checked | lost | torn | oplog ≠ data | invalid indexes | stream errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {totals['cycles']} | {totals['disk_full_cycles']} | {minutes:.1f} | "
          f"{totals['acked_writes']:,} | {totals['stream_events']:,} | "
          f"{totals['lost']} | {totals['torn']} | {totals['oplog']} | {totals['invalid']} | "
          f"{totals['stream']} |")
    bad = sum(totals[k] for k in ("lost", "torn", "oplog", "invalid", "stream"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

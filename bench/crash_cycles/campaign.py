"""Issue 32's crash-cycle campaign: `cycles` rounds of a mixed workload against a fresh
server, kill -9 at a random moment, restart, audit (tests/crash_campaign.py says what
runs and what is counted). Prints each cycle's audit and a Markdown summary.

    python bench/crash_cycles/campaign.py [--cycles 100] [--seed 32] [--oplog-mb 2048]
        [--small-disk-mb N]

With `--small-disk-mb`, the data directory is on a tmpfs of that size mounted for the
campaign (root only), the server runs without its free-space floor
(`minFreeDiskSpaceMB=0`), and the disk-full cycles fill that filesystem for real.
"""

import argparse
import os
import subprocess
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
    ap.add_argument("--small-disk-mb", type=int, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tailstream-bench-crash.") as root:
        small_disk, extra = None, []
        if args.small_disk_mb:
            small_disk = Path(root) / "disk"
            small_disk.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.small_disk_mb}m",
                            "tmpfs", str(small_disk)], check=True)
            extra = ["--setParameter", "minFreeDiskSpaceMB=0"]
        data = (small_disk or Path(root)) / "db"
        server = TailstreamServer(data, oplog_size_mb=args.oplog_mb, extra_args=extra)
        server.start()
        started = time.monotonic()
        try:
            totals = run_campaign(server, args.cycles, args.seed,
                                  report=lambda line: print(line, flush=True),
                                  small_disk=small_disk)
        finally:
            server.stop()
            if small_disk is not None:
                subprocess.run(["umount", "-l", str(small_disk)], check=False)
        minutes = (time.monotonic() - started) / 60
    disk = f"a {args.small_disk_mb} MiB tmpfs filled up" if small_disk else "the free-space floor"
    print(f"\n### Crash cycles: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, seed {args.seed}, disk full: {disk}\n")
    print("| cycles | disk full in | WAL torn in | minutes | acknowledged writes checked | "
          "stream events checked | lost | torn | oplog ≠ data | invalid indexes | "
          "stream errors | tear not reported |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {totals['cycles']} | {totals['disk_full_cycles']} | {totals['torn_cycles']} | "
          f"{minutes:.1f} | {totals['acked_writes']:,} | {totals['stream_events']:,} | "
          f"{totals['lost']} | {totals['torn']} | {totals['oplog']} | {totals['invalid']} | "
          f"{totals['stream']} | {totals['report']} |")
    bad = sum(totals[k] for k in ("lost", "torn", "oplog", "invalid", "stream", "report"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

"""The fault campaign on a three-member replica set (issue 27): faults from a seeded
random schedule (kill -9 and restart, SIGSTOP/SIGCONT, isolation and split-brain
partitions through the harness's proxies, mostly of the primary) until N failovers
were observed, under a majority insert and $inc workload with a change stream on every
member; then the set is healed and settled and the history checked
(tests/replset_faults.py). Prints the figures as Markdown on stdout, progress on
stderr; exits 1 if the checker found any violation.

    python bench/replset_faults.py [--failovers 100] [--seed S] [--election-ms 1000]

The server binary is $TAILSTREAM_BIN (else ~/.cache/tailstream/target/release/tailstream).
A run's data directories, member logs and history.jsonl are kept when it found a
violation (or with --keep), under --workdir or a fresh /tmp/tailstream-faults-*.
"""

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import replset_faults as rf  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--failovers", type=int, default=100,
                   help="induce faults until this many failovers were observed (default 100)")
    p.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random)")
    p.add_argument("--election-ms", type=int, default=1000,
                   help="replElectionTimeoutMillis of every member (default 1000)")
    p.add_argument("--max-faults", type=int, default=None,
                   help="stop after this many faults even short of --failovers (default 4 x failovers)")
    p.add_argument("--kinds", default=",".join(rf.FAULT_KINDS),
                   help=f"fault kinds to draw from (default {','.join(rf.FAULT_KINDS)})")
    p.add_argument("--primary-p", type=float, default=0.8,
                   help="probability that a fault targets the primary (default 0.8)")
    p.add_argument("--workdir", default=None, help="data directories, logs and history here")
    p.add_argument("--keep", action="store_true", help="keep the data directories of a clean run")
    p.add_argument("--json", default=None, help="also write the report as JSON to this file")
    return p.parse_args()


def main():
    args = parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(rf.FAULT_KINDS)
    if unknown:
        sys.exit(f"unknown fault kinds: {sorted(unknown)}")
    report = rf.run(seed, failovers=args.failovers,
                    max_faults=args.max_faults or 4 * args.failovers,
                    election_ms=args.election_ms, workdir=args.workdir,
                    primary_p=args.primary_p, draw_from=kinds, keep=args.keep,
                    log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(f"## Replica-set fault campaign, seed {seed}\n")
    print(f"{args.failovers} failovers asked, election timeout {args.election_ms} ms, "
          f"fault kinds {', '.join(kinds)}, primary targeted with p = {args.primary_p}\n")
    print(rf.format_report(report))
    if report["violations"]:
        print(f"\ndata, logs and history kept in {report['workdir']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())

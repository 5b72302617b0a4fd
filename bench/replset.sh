#!/usr/bin/env bash
# Replica-set benchmarks (issue 27): replication lag (primary acknowledgement to the
# event on a secondary's change stream) and failover time (kill -9 of the primary to the
# first write the new primary acknowledged) and watchers on a secondary (its CPU with
# 0, 1 and 100 change streams), three members on this machine. Builds the
# server if needed and runs bench/replset/bench.py with the tests' Python environment.
# Arguments go to bench.py (--scenarios lag,failover,watchers --rates --seconds --writers
# --failovers --election-ms --member-cpus --watch-rate --watch-collections).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
exec "$(tests_python)" "$ROOT/bench/replset/bench.py" --server "$TAILSTREAM_BIN" "$@"

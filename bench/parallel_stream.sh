#!/usr/bin/env bash
# Parallel change streams (issue 28): seed 004's replay experiment, one consumer
# process per bucket. Builds the server if needed and runs bench/parallel_stream/bench.py
# with the tests' Python environment. Arguments go to bench.py (--docs --collections
# --buckets --server-cpus --client-cpus).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
exec "$(tests_python)" "$ROOT/bench/parallel_stream/bench.py" --server "$TAILSTREAM_BIN" "$@"

#!/usr/bin/env bash
# Issue 32: the crash-cycle campaign (kill -9 at random moments of a mixed workload,
# restart, audit). Builds the server if needed and runs bench/crash_cycles/campaign.py
# with the tests' Python environment; arguments go to it (--cycles --seed --oplog-mb).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
exec "$(tests_python)" "$ROOT/bench/crash_cycles/campaign.py" "$@"

#!/usr/bin/env bash
# Issue 32: the overload campaign (tests/overload_campaign.py): 1,000 connections holding
# 10,000 change streams and tailable cursors that never read, a producer and fast
# consumers measured against a baseline, idle cursors timing out, connection churn and
# oversized input. Builds the server if needed and runs it with the tests' Python
# environment; arguments go to it (--connections --streams --readers --rate --seconds
# --timeout-ms --churn).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
exec "$(tests_python)" "$ROOT/tests/overload_campaign.py" --server "$TAILSTREAM_BIN" "$@"

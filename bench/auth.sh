#!/usr/bin/env bash
# Connection set-up with SCRAM-SHA-256 against without authentication (issue 29):
# builds the server if needed and runs bench/auth/connect.py with the tests' Python
# environment (pymongo's bson). Arguments go to connect.py (--seconds, --clients).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
exec "$(tests_python)" "$ROOT/bench/auth/connect.py" --server "$TAILSTREAM_BIN" "$@"

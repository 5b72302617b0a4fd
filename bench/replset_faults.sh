#!/usr/bin/env bash
# The replica-set fault campaign (bench/replset_faults.py) with the tests' Python
# environment (pymongo). Uses $TAILSTREAM_BIN when it is set, else builds the server.
# Every argument goes to the campaign:
#   bash bench/replset_faults.sh                          # 100 failovers, a random seed
#   bash bench/replset_faults.sh --failovers 20 --seed 7 --election-ms 1000
# The figures (Markdown) go to stdout, progress to stderr; exit status 1 on a violation.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${TAILSTREAM_BIN:-}" ] || [ ! -x "$TAILSTREAM_BIN" ]; then
    source "$ROOT/scripts/common.sh"
    build_release
fi
export TAILSTREAM_BIN
VENV="$HOME/.cache/tailstream/venv-$(sha256sum "$ROOT/tests/requirements.txt" | cut -c1-12)"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/tests/requirements.txt"
fi
exec "$VENV/bin/python" "$ROOT/bench/replset_faults.py" "$@"

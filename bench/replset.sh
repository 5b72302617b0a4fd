#!/usr/bin/env bash
# Replica-set benchmarks (issue 27): replication lag (primary acknowledgement to the
# event on a secondary's change stream) and failover time (kill -9 of the primary to the
# first write the new primary acknowledged), three members on this machine. Builds the
# server if needed and runs bench/replset/bench.py with the tests' Python environment.
# Arguments go to bench.py (--scenarios lag,failover --rates --seconds --failovers
# --election-ms --member-cpus).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
VENV="$HOME/.cache/tailstream/venv-$(sha256sum "$ROOT/tests/requirements.txt" | cut -c1-12)"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/tests/requirements.txt"
fi
exec "$VENV/bin/python" "$ROOT/bench/replset/bench.py" --server "$TAILSTREAM_BIN" "$@"

#!/usr/bin/env bash
# Seed 001's question, what each extra watcher costs: the realtime-chat example
# (examples/realtime-chat) with 1, 8 and 32 workers, each its own change stream, at a
# fixed message rate; prints Tailstream's CPU per 1,000 messages and per watcher.
# Arguments go to examples/realtime-chat/bench.js (--workers, --rate, --seconds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/common.sh"
build_release
cd "$ROOT/examples/realtime-chat"
npm ci --silent --no-audit --no-fund
exec node bench.js --server "$TAILSTREAM_BIN" "$@"

#!/usr/bin/env bash
# MongoDB's own tools (mongostat, mongotop, mongodump, mongorestore) against
# Tailstream: builds them from their public Go source (mongodb/mongo-tools, vendored
# dependencies, so no module downloads) and runs conformance/mongo_tools.py.
#
#   bash conformance/mongo-tools.sh [MONGO_TOOLS_SOURCE_DIR]
#
# Without a directory it clones mongo-tools at MONGO_TOOLS_REF into the cache (this
# needs github.com; CI has no such network, so this check runs outside CI). Needs Go.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TAILSTREAM_CACHE:-$HOME/.cache/tailstream}"
REF="${MONGO_TOOLS_REF:-8fa3cfc82}"
SRC="${1:-$CACHE/mongo-tools-src}"
if [ ! -d "$SRC/mongostat" ]; then
    git clone -q https://github.com/mongodb/mongo-tools "$SRC"
    git -C "$SRC" checkout -q "$REF"
fi
BIN="$CACHE/mongo-tools-bin"
mkdir -p "$BIN"
for t in mongostat mongotop mongodump mongorestore; do
    (cd "$SRC" && GOFLAGS=-mod=vendor CGO_ENABLED=0 go build -o "$BIN/$t" "./$t/main")
done
SERVER="${TAILSTREAM_BIN:-${CARGO_TARGET_DIR:-$CACHE/target}/release/tailstream}"
VENV="$CACHE/venv-$(sha256sum "$ROOT/tests/requirements.txt" | cut -c1-12)"
PY="$VENV/bin/python"
[ -x "$PY" ] || PY=python3
exec "$PY" "$ROOT/conformance/mongo_tools.py" --tools "$BIN" --server "$SERVER"

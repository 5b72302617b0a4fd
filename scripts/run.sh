#!/usr/bin/env bash
# Builds Tailstream and starts it on 127.0.0.1:27017 with its data in ./data/db.
# Extra arguments go to the server (e.g. --port 27018 --dbpath /tmp/db).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_release
cd "$ROOT"
exec "$TAILSTREAM_BIN" --bind_ip 127.0.0.1 --port 27017 --dbpath ./data/db "$@"

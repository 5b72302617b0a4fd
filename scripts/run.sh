#!/usr/bin/env bash
# Builds Tailstream and starts it: by default on 127.0.0.1:27017 (the server's own
# defaults) with its data in the clone's data/db. Arguments go to the server and win
# over those defaults (e.g. --port 27018 --dbpath /tmp/db).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_release

# Whether the arguments after the first name option $1 (`--name value` or `--name=value`).
# The server refuses an option given twice, so a default is added only when absent.
names_option() {
    local name=$1 arg
    shift
    for arg in "$@"; do
        if [ "$arg" = "$name" ] || [ "${arg#"$name="}" != "$arg" ]; then
            return 0
        fi
    done
    return 1
}

args=("$@")
if ! names_option --dbpath "$@"; then
    args=(--dbpath "$ROOT/data/db" "${args[@]}")
fi
exec "$TAILSTREAM_BIN" "${args[@]}"

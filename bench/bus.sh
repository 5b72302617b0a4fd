#!/usr/bin/env bash
# Build and run the message-bus benchmark (bench/bus). Every argument goes to it:
#   bash bench/bus.sh --quick                                  # 10,000 messages per row (about a minute)
#   bash bench/bus.sh                                          # 100,000 messages per row (the issue's run)
#   bash bench/bus.sh --server-bin /tmp/tailstream --json bench/bus/results/bus.json
#   bash bench/bus.sh --systems tailstream,redis-streams-always --scenarios paced-4k
# It installs redis-server from Debian's packages when it is missing (the Redis rows
# need it). The benchmark has its own target directory ($BENCH_TARGET_DIR, by
# default ~/.cache/tailstream/bench-target, shared with bench/ingest), apart from
# the server's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v redis-server >/dev/null 2>&1; then
    echo "redis-server is missing: installing it (apt-get install -y redis-server)" >&2
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >&2
fi
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$HOME/.cache/tailstream/bench-target}"
cargo build --release --locked --manifest-path "$here/bus/Cargo.toml" >&2
exec "$CARGO_TARGET_DIR/release/bench-bus" "$@"

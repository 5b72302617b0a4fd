#!/usr/bin/env bash
# Build and run the ingestion benchmark (bench/ingest). Every argument goes to it:
#   bash bench/ingest.sh --quick                       # 0.1 GiB per row, all four tables
#   bash bench/ingest.sh --tables size,batch --json bench/results/ingest.json
#   bash bench/ingest.sh --uri mongodb://127.0.0.1:27017 --server-pid "$(pgrep -x mongod)"
# The benchmark has its own target directory ($BENCH_TARGET_DIR, by default
# ~/.cache/tailstream/bench-target), apart from the server's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$HOME/.cache/tailstream/bench-target}"
cargo build --release --locked --manifest-path "$here/ingest/Cargo.toml" >&2
exec "$CARGO_TARGET_DIR/release/bench-ingest" "$@"

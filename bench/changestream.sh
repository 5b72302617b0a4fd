#!/usr/bin/env bash
# Build and run the change-stream benchmark (bench/changestream). Every argument goes to it:
#   bash bench/changestream.sh --quick                      # everything scaled down (about a minute)
#   bash bench/changestream.sh                              # the issue's run (1M catch-up events, 1,000 streams, 300 × 6 MB)
#   bash bench/changestream.sh --scenarios fanout,latency --json bench/results/changestream.json
#   bash bench/changestream.sh --server-bin /tmp/tailstream --resume-docs 60
# The Markdown section for BENCHMARKS.md goes to stdout, progress to stderr. The
# resume scenario drops the page cache (root only; it says whether it could)
# and needs about 2 × 1.8 GB of free disk under --data-dir (default /tmp).
# BENCH_TRACE=1 prints every aggregate/getMore reply (duration, events, resume token).
# BENCH_CATCHUP_FLUSH=1 flushes the catch-up backlog to table files and waits 3 s before
# the stream opens (to profile a small backlog, e.g. the server under valgrind --tool=callgrind
# with --server-bin pointing at a wrapper script; BENCHMARKS.md, change streams run 13).
# BENCH_TLS_CERTS=DIR (certificates from `python3 tests/tls_certs.py DIR`) starts the
# server with --tlsMode requireTLS and connects over TLS: the cost of TLS (issue 29).
# The benchmark has its own target directory ($BENCH_TARGET_DIR, by default
# ~/.cache/tailstream/bench-target, shared with bench/ingest and bench/bus),
# apart from the server's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$HOME/.cache/tailstream/bench-target}"
cargo build --release --locked --manifest-path "$here/changestream/Cargo.toml" >&2
exec "$CARGO_TARGET_DIR/release/bench-changestream" "$@"

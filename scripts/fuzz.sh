#!/usr/bin/env bash
# Issue 32: runs the cargo-fuzz targets in fuzz/ (libFuzzer; nightly Rust, as cargo-fuzz
# needs; built in a target directory of their own outside the clone).
#   bash scripts/fuzz.sh [--seconds N] [TARGET ...]
#       each target (default: all) for N seconds (default 60), its corpus kept in
#       ~/.cache/tailstream/fuzz-corpus/<target>; a crash stops the run and is saved
#       in fuzz/artifacts/<target>/ (make it a regression test, then fix it)
#   bash scripts/fuzz.sh --ci
#       CI's short version: the seed inputs, then a fixed number of runs of every target
#       (100,000; `command`'s 3,000: each of its inputs runs commands against a store)
#       from a fixed seed and an empty corpus (the same inputs every time)
#   bash scripts/fuzz.sh --build-only
#       installs nightly and cargo-fuzz if missing and builds the targets, runs none
#       (scripts/test.sh starts it in the background while the tests run)
# Figures go to RELIABILITY.md.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SECONDS_EACH=60
CI_RUNS=100000
COMMAND_CI_RUNS=3000
MODE=time
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_EACH="$2"; shift 2 ;;
        --ci) MODE=ci; shift ;;
        --build-only) MODE=build; shift ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done

if ! rustup toolchain list | grep -q '^nightly'; then
    log "installing the nightly toolchain (cargo-fuzz builds with it)"
    rustup toolchain install nightly --profile minimal >&2
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    log "installing cargo-fuzz (crates.io)"
    cargo install cargo-fuzz --locked --version 0.13.2 >&2
fi
FUZZ_TARGET_DIR="$HOME/.cache/tailstream/fuzz-target"
# The `command` target links the engine and with it RocksDB: the main build's library
# (built by scripts/build.sh in $CARGO_TARGET_DIR from the same librocksdb-sys, as both
# Cargo.lock files pin it) is linked as it is instead of compiling RocksDB's C++ a second
# time (15-25 minutes on 2 cores). It is not instrumented: the fuzzing covers the
# server's code, and RocksDB is called as the server calls it.
rocksdb_sys_version() {
    grep -A1 '^name = "librocksdb-sys"$' "$1" | sed -n 's/^version = "\(.*\)"$/\1/p'
}
if [ "$(rocksdb_sys_version "$ROOT/Cargo.lock")" != "$(rocksdb_sys_version "$ROOT/fuzz/Cargo.lock")" ]; then
    log "librocksdb-sys differs between Cargo.lock and fuzz/Cargo.lock: pin fuzz/'s to the workspace's"
    exit 1
fi
rocksdb_lib="$(ls -t "$CARGO_TARGET_DIR"/release/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -1)"
if [ -n "$rocksdb_lib" ]; then
    export ROCKSDB_LIB_DIR="$(dirname "$rocksdb_lib")" ROCKSDB_STATIC=1
else
    log "no RocksDB library in $CARGO_TARGET_DIR (run scripts/build.sh first): the fuzz build compiles its own"
fi
cd "$ROOT"
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo fuzz list)
fi
log "building the fuzz targets (${TARGETS[*]})"
# cargo fuzz has no --locked: a fuzz/Cargo.lock the build had to change was stale (it
# was, from e258d83 to ce19fe9, silently rewritten on every build): CI fails on it.
LOCK_BEFORE="$(mktemp)"
cp fuzz/Cargo.lock "$LOCK_BEFORE"
cargo +nightly fuzz build --target-dir "$FUZZ_TARGET_DIR" >&2
lock_stale=false
cmp -s fuzz/Cargo.lock "$LOCK_BEFORE" || lock_stale=true
if $lock_stale; then diff "$LOCK_BEFORE" fuzz/Cargo.lock | head -20 >&2 || true; fi
rm -f "$LOCK_BEFORE"
if $lock_stale; then
    log "fuzz/Cargo.lock was stale: the build updated it (above); commit the new one"
    if [ "${CI:-}" = true ]; then exit 1; fi
fi
if [ "$MODE" = build ]; then exit 0; fi
for t in "${TARGETS[@]}"; do
    if [ "$MODE" = ci ]; then
        corpus="$(mktemp -d)"
        runs="$CI_RUNS"
        if [ "$t" = command ]; then runs="$COMMAND_CI_RUNS"; fi
        args=(-runs="$runs" -seed=1)
    else
        corpus="$HOME/.cache/tailstream/fuzz-corpus/$t"
        mkdir -p "$corpus"
        args=(-max_total_time="$SECONDS_EACH")
    fi
    if [ "$t" = command ]; then
        # The server's store lives through the whole run: LeakSanitizer's check after
        # each new input scans its heap (0.5-1 GB), 50 inputs/s instead of 440; its RSS
        # (RocksDB's memtables and caches) reached 1.3 GB in 10 minutes, near libFuzzer's
        # default limit of 2 GB.
        args+=(-detect_leaks=0 -rss_limit_mb=4096)
    fi
    log "fuzz target $t: ${args[*]}"
    start=$(date +%s)
    out="$(mktemp)"
    status=0
    cargo +nightly fuzz run --target-dir "$FUZZ_TARGET_DIR" "$t" "$corpus" "fuzz/seeds/$t" \
        -- "${args[@]}" -print_final_stats=1 >"$out" 2>&1 || status=$?
    # libFuzzer's closing figures, or the crash and where its input was saved.
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done |==[0-9]+==|thread |SUMMARY|artifact_prefix|Test unit)' "$out" || tail -20 "$out"
    rm -f "$out"
    log "fuzz target $t: exit $status after $(( $(date +%s) - start )) s"
    if [ "$MODE" = ci ]; then rm -rf "$corpus"; fi
    if [ "$status" != 0 ]; then
        log "fuzz target $t found a crash: see fuzz/artifacts/$t/"
        exit 1
    fi
done

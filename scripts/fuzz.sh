#!/usr/bin/env bash
# Issue 32: runs the cargo-fuzz targets in fuzz/ (libFuzzer; nightly Rust, as cargo-fuzz
# needs; built in a target directory of their own outside the clone).
#   bash scripts/fuzz.sh [--seconds N] [TARGET ...]
#       each target (default: all) for N seconds (default 60), its corpus kept in
#       ~/.cache/tailstream/fuzz-corpus/<target>; a crash stops the run and is saved
#       in fuzz/artifacts/<target>/ (make it a regression test, then fix it)
#   bash scripts/fuzz.sh --ci
#       CI's short version: the seed inputs, then 100,000 runs of every target from a
#       fixed seed and an empty corpus (the same inputs every time)
# Figures go to RELIABILITY.md.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SECONDS_EACH=60
CI_RUNS=100000
MODE=time
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_EACH="$2"; shift 2 ;;
        --ci) MODE=ci; shift ;;
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
cd "$ROOT"
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo fuzz list)
fi
log "building the fuzz targets (${TARGETS[*]})"
cargo +nightly fuzz build --target-dir "$FUZZ_TARGET_DIR" >&2
for t in "${TARGETS[@]}"; do
    if [ "$MODE" = ci ]; then
        corpus="$(mktemp -d)"
        args=(-runs="$CI_RUNS" -seed=1)
    else
        corpus="$HOME/.cache/tailstream/fuzz-corpus/$t"
        mkdir -p "$corpus"
        args=(-max_total_time="$SECONDS_EACH")
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

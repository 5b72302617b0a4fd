#!/usr/bin/env bash
# Installs what the tests need and runs every test: Rust unit tests, the Python
# integration suite (pytest + pymongo against the real binary) and the Node test.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_release

# The fuzz targets' build (nightly, sanitizers: the whole server a second time, 8 minutes
# of both cores from cold, plus nightly's and cargo-fuzz's installs on a new machine)
# runs in the background at the lowest priority from here on: it takes the cores the
# tests leave idle (they wait on sockets, fsyncs and timers much of the time) and is
# waited for before the fuzz runs at the end. It links the RocksDB library just built.
FUZZ_BUILD_LOG="$(mktemp)"
FUZZ_BUILD_START=$(date +%s)
# (A process group of its own, so that an early exit stops cargo and rustc with it.)
set -m
nice -n 19 bash "$ROOT/scripts/fuzz.sh" --build-only >"$FUZZ_BUILD_LOG" 2>&1 &
FUZZ_BUILD_PID=$!
set +m

# Every suite's output is also kept, to print one closing total at the end.
SUMMARY="$(mktemp)"
# A failed test ends the script: the background build goes with it.
trap 'kill -- -"$FUZZ_BUILD_PID" 2>/dev/null || true; rm -f "$SUMMARY" "$FUZZ_BUILD_LOG"' EXIT

# Style: formatting and clippy with warnings denied (allowed lints are listed, with their
# reasons, in the workspace Cargo.toml or at the line they concern).
ensure_rust_component() {
    cargo "$1" --version >/dev/null 2>&1 || rustup component add "$2" >/dev/null 2>&1 || true
    cargo "$1" --version >/dev/null 2>&1
}
if ensure_rust_component fmt rustfmt; then
    log "cargo fmt --check"
    (cd "$ROOT" && cargo fmt --all --check)
else
    log "WARNING: rustfmt is not installed and could not be added: formatting NOT checked"
fi
if ensure_rust_component clippy clippy; then
    log "cargo clippy (warnings denied)"
    (cd "$ROOT" && cargo clippy --release --locked --workspace --all-targets -- -D warnings)
else
    log "WARNING: clippy is not installed and could not be added: lints NOT checked"
fi

log "Rust unit tests"
(cd "$ROOT" && cargo test --release --locked --workspace) 2>&1 | tee -a "$SUMMARY"

# Python: a private virtual environment, keyed by the pinned requirements.
REQ="$ROOT/tests/requirements.txt"
VENV="$HOME/.cache/tailstream/venv-$(sha256sum "$REQ" | cut -c1-12)"
if [ ! -x "$VENV/bin/pytest" ]; then
    log "creating Python environment $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
fi
# The test servers refuse writes below their free-space floor (minFreeDiskSpaceMB,
# 256 MB by default): on a nearly full disk every write test would fail with
# OutOfDiskSpace, so say so once here instead.
TEST_TMP="${TMPDIR:-/tmp}"
FREE_MB=$(df -Pm "$TEST_TMP" | awk 'NR == 2 { print $4 }')
if [ -n "$FREE_MB" ] && [ "$FREE_MB" -lt 2048 ]; then
    log "ERROR: only ${FREE_MB} MB free under $TEST_TMP; the integration tests need 2 GB"
    log "(their servers refuse writes below 256 MB free). Free some space and rerun."
    exit 1
fi
# The status page's test opens it in a real browser (headless Chromium).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    log "installing chromium (tests/test_status_page.py opens the status page in it)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
fi
log "Python integration tests"
(cd "$ROOT" && "$VENV/bin/pytest" tests -q -p no:cacheprovider) 2>&1 | tee -a "$SUMMARY"

if [ -f "$ROOT/tests/node/package.json" ]; then
    log "Node driver test"
    (cd "$ROOT/tests/node" && npm ci --silent --no-audit --no-fund && node --test) 2>&1 | tee -a "$SUMMARY"
fi
# Seed 001's application (examples/realtime-chat): two hosts of a socket.io cluster
# and two browser pages; it needs Chromium, installed above for the status page.
log "realtime-chat example (socket.io + @socket.io/mongo-adapter, headless Chromium)"
(cd "$ROOT/examples/realtime-chat" && npm ci --silent --no-audit --no-fund && node --test) 2>&1 \
    | grep -v -e dbus -e 'Fontconfig' | tee -a "$SUMMARY"
log "pymongo conformance: the CI selection of pymongo's own suite, guarded by conformance/ratchet.txt"
# Its failures are the expected ones listed in conformance/expected_failures.txt; it
# fails on an unexpected failure or when fewer tests pass than the ratchet.
bash "$ROOT/conformance/run.sh" --ci
log "pymongo conformance against a three-member replica set: the modules that need secondaries, guarded by conformance/ratchet-replset.txt"
bash "$ROOT/conformance/run.sh" --ci --replset
log "pymongo's authentication tests against a server with --auth (test_auth.py, test_auth_spec.py)"
bash "$ROOT/conformance/run.sh" --auth --module-filter test/test_auth.py,test/test_auth_spec.py \
    --sync-only --no-report --strict -m auth
log "pymongo's TLS tests (test_ssl.py) against a requireTLS server, without and with --auth (MONGODB-X509)"
bash "$ROOT/conformance/run.sh" --tls --module-filter test/test_ssl.py --sync-only --no-report --strict
bash "$ROOT/conformance/run.sh" --tls --auth --module-filter test/test_ssl.py --sync-only --no-report --strict

log "fuzz targets (fuzz/, issue 32): waiting for their build (started in the background after the server's)"
fuzz_build_status=0
wait "$FUZZ_BUILD_PID" || fuzz_build_status=$?
grep -E '^\[tailstream\]|Finished|^error' "$FUZZ_BUILD_LOG" >&2 || true
if [ "$fuzz_build_status" != 0 ]; then
    tail -40 "$FUZZ_BUILD_LOG" >&2
    log "the fuzz targets' build failed (exit $fuzz_build_status)"
    exit 1
fi
log "fuzz build done $(( $(date +%s) - FUZZ_BUILD_START )) s after it started"
log "fuzz targets (fuzz/, issue 32): their seeds, then a fixed number of runs of each from a fixed seed"
bash "$ROOT/scripts/fuzz.sh" --ci

# One closing line for the project's own tests (Rust, pytest, Node), all passed here.
python3 - "$SUMMARY" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
rust = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", text))
py = sum(int(n) for n in re.findall(r"^=*\s*(\d+) passed", text, re.M))
node = sum(int(n) for n in re.findall(r"^# pass (\d+)", text, re.M))
print(f"tailstream: {rust} Rust, {py} Python and {node} Node tests passed")
print(f"{rust + py + node} passed, 0 failed")
PY

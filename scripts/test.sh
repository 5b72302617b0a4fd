#!/usr/bin/env bash
# Installs what the tests need and runs every test: Rust unit tests, the Python
# integration suite (pytest + pymongo against the real binary) and the Node test.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_release

# Every suite's output is also kept, to print one closing total at the end.
SUMMARY="$(mktemp)"
trap 'rm -f "$SUMMARY"' EXIT

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
log "Python integration tests"
(cd "$ROOT" && "$VENV/bin/pytest" tests -q -p no:cacheprovider) 2>&1 | tee -a "$SUMMARY"

if [ -f "$ROOT/tests/node/package.json" ]; then
    log "Node driver test"
    (cd "$ROOT/tests/node" && npm ci --silent --no-audit --no-fund && node --test) 2>&1 | tee -a "$SUMMARY"
fi
log "pymongo conformance: the CI selection of pymongo's own suite, guarded by conformance/ratchet.txt"
# Its failures are the expected ones listed in conformance/expected_failures.txt; it
# fails on an unexpected failure or when fewer tests pass than the ratchet.
bash "$ROOT/conformance/run.sh" --ci

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

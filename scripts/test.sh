#!/usr/bin/env bash
# Installs what the tests need and runs every test: Rust unit tests, the Python
# integration suite (pytest + pymongo against the real binary) and the Node test.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
build_release

log "Rust unit tests"
(cd "$ROOT" && cargo test --release --locked --workspace)

# Python: a private virtual environment, keyed by the pinned requirements.
REQ="$ROOT/tests/requirements.txt"
VENV="$HOME/.cache/tailstream/venv-$(sha256sum "$REQ" | cut -c1-12)"
if [ ! -x "$VENV/bin/pytest" ]; then
    log "creating Python environment $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
fi
log "Python integration tests"
(cd "$ROOT" && "$VENV/bin/pytest" tests -q -p no:cacheprovider)

if [ -f "$ROOT/tests/node/package.json" ]; then
    log "Node driver test"
    (cd "$ROOT/tests/node" && npm ci --silent --no-audit --no-fund && node --test)
fi
log "pymongo conformance: the CI selection of pymongo's own suite, guarded by conformance/ratchet.txt"
bash "$ROOT/conformance/run.sh" --ci

log "all tests passed"

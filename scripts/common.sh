# Shared by the run and test scripts: installs the build prerequisites and
# builds the release binary into a target directory outside the clone, so that
# RocksDB's long C++ build is reused by later builds and CI runs on this machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tailstream/target}"
TAILSTREAM_BIN="$CARGO_TARGET_DIR/release/tailstream"
export TAILSTREAM_BIN

log() { printf '[tailstream] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# librocksdb-sys generates its bindings with bindgen, which needs libclang.
ensure_build_deps() {
    if ! command -v cargo >/dev/null 2>&1; then
        log "cargo not found: install Rust (https://rustup.rs) first"
        exit 1
    fi
    # bindgen loads the C API library, libclang.so or libclang-<version>.so; a
    # machine with LLVM may have only libclang-cpp.so, which bindgen cannot use.
    if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1 &&
        ! ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so'; then
        log "installing libclang-dev and clang (needed to build RocksDB bindings)"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq libclang-dev clang >/dev/null
    fi
}

build_release() {
    ensure_build_deps
    mkdir -p "$CARGO_TARGET_DIR"
    log "building (target dir: $CARGO_TARGET_DIR; the first build compiles RocksDB and takes 15-25 minutes on 2 cores)"
    (cd "$ROOT" && cargo build --release --locked -p tailstream-server)
    # The WAL tail reader the crash campaign tears WALs with (tests/crash_campaign.py).
    (cd "$ROOT" && cargo build --release --locked -p tailstream-storage --example wal_tail)
}

# The tests' Python environment (tests/requirements.txt), made on first use; prints its
# interpreter. For scripts that run Python with pymongo outside pytest (bench/auth.sh,
# bench/replset.sh).
tests_python() {
    local venv
    venv="$HOME/.cache/tailstream/venv-$(sha256sum "$ROOT/tests/requirements.txt" | cut -c1-12)"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$ROOT/tests/requirements.txt" >&2
    fi
    echo "$venv/bin/python"
}

#!/usr/bin/env bash
# Runs pymongo's own test suite (from the pinned pymongo source distribution)
# against a Tailstream server and reports pass/fail per test module.
#
#   bash conformance/run.sh                 # whole suite, sync then async; writes CONFORMANCE.md
#   bash conformance/run.sh --ci            # the CI selection (ci-modules.txt); checks ratchet.txt
#   bash conformance/run.sh --module-filter cursor -k test_max   # some modules, extra pytest args
#
# Options (anything else is passed to pytest):
#   --ci                  run only the modules in conformance/ci-modules.txt and fail when
#                         fewer tests pass than conformance/ratchet.txt says
#   --module-filter S     run only the test files whose path contains S (repeatable,
#                         comma-separated allowed); applies within the --ci list too
#   --sync-only           full mode: skip the async half of the suite (test/asynchronous)
#   --auth                start the server with --auth: pymongo's suite creates its root user
#                         through the localhost exception and runs every test authenticated
#   --tls                 start the server with --tlsMode requireTLS and the certificates pymongo's
#                         source ships (test/certificates: server.pem, ca.pem), connections
#                         without a certificate allowed, as drivers' TLS CI runs mongod; the
#                         suite finds TLS on and connects with its client.pem
#   --replset             run against a replica set of three members (--replSet rs0 on three
#                         ports, initiated with replSetInitiate; the suite finds the set through
#                         the first, its primary), so the tests that need secondaries run too;
#                         with --ci: the modules of ci-modules-replset.txt, ratchet-replset.txt;
#                         known failures in expected_failures_replset.txt
#   --update-ratchet      raise ratchet.txt to the measured CI-selection pass count (never lowers it)
#   --test-timeout N      per-test limit in seconds (default 60; env CONFORMANCE_TEST_TIMEOUT)
#   --total-timeout N     limit for the whole pytest part in seconds (defaults: 1200 with --ci,
#                         5400 otherwise; env CONFORMANCE_TOTAL_TIMEOUT). In full mode the sync
#                         half runs first; the async half gets what is left (skipped if < 5 min).
#   --output FILE         where to write the report (default: CONFORMANCE.md at the repo root for
#                         an unfiltered full run, else the results directory)
#   --no-report           run the tests, skip report.py
#   --strict              with --no-report: exit 1 when a test failed (a selection in CI)
#   -h, --help
#
# Environment: TAILSTREAM_BIN (server binary), CARGO_TARGET_DIR, TAILSTREAM_CACHE (cache root,
# default ~/.cache/tailstream), CONFORMANCE_RESULTS (results dir, default conformance/.cache/results),
# TAILSTREAM_COMMIT (the commit the binary was built from, for the report; default: HEAD),
# CONFORMANCE_PYTHON (interpreter for the venv; default: CPython 3.13 or 3.12 if found, else python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PYMONGO_VERSION=4.17.0
CACHE="${TAILSTREAM_CACHE:-$HOME/.cache/tailstream}/conformance"
RESULTS_ROOT="${CONFORMANCE_RESULTS:-$HERE/.cache/results}"

log() { printf '[conformance] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

MODE=full
FILTERS=()
PYTEST_EXTRA=()
SYNC_ONLY=0
AUTH=0
TLS=0
REPLSET=0
STRICT=0
ANY_FAILED=0
UPDATE_RATCHET=0
DO_REPORT=1
OUTPUT=""
TEST_TIMEOUT="${CONFORMANCE_TEST_TIMEOUT:-60}"
TOTAL_TIMEOUT="${CONFORMANCE_TOTAL_TIMEOUT:-}"

while [ $# -gt 0 ]; do
    case "$1" in
        --ci) MODE=ci ;;
        --module-filter) [ $# -ge 2 ] || die "--module-filter needs a value"; FILTERS+=("$2"); shift ;;
        --module-filter=*) FILTERS+=("${1#*=}") ;;
        --sync-only) SYNC_ONLY=1 ;;
        --auth) AUTH=1 ;;
        --tls) TLS=1 ;;
        --replset) REPLSET=1 ;;
        --update-ratchet) UPDATE_RATCHET=1 ;;
        --test-timeout) [ $# -ge 2 ] || die "--test-timeout needs a value"; TEST_TIMEOUT="$2"; shift ;;
        --test-timeout=*) TEST_TIMEOUT="${1#*=}" ;;
        --total-timeout) [ $# -ge 2 ] || die "--total-timeout needs a value"; TOTAL_TIMEOUT="$2"; shift ;;
        --total-timeout=*) TOTAL_TIMEOUT="${1#*=}" ;;
        --output) [ $# -ge 2 ] || die "--output needs a value"; OUTPUT="$2"; shift ;;
        --output=*) OUTPUT="${1#*=}" ;;
        --no-report) DO_REPORT=0 ;;
        --strict) STRICT=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --) shift; PYTEST_EXTRA+=("$@"); break ;;
        *) PYTEST_EXTRA+=("$1") ;;
    esac
    shift
done
if [ -z "$TOTAL_TIMEOUT" ]; then
    if [ "$MODE" = ci ]; then TOTAL_TIMEOUT=1200; else TOTAL_TIMEOUT=5400; fi
fi

# Split comma-separated filters.
if [ ${#FILTERS[@]} -gt 0 ]; then
    IFS=',' read -r -a FILTERS <<<"$(IFS=','; echo "${FILTERS[*]}")"
fi

# ---- pymongo source distribution (cached) -----------------------------------
mkdir -p "$CACHE"
SDIST="$CACHE/pymongo-$PYMONGO_VERSION.tar.gz"
SRC="$CACHE/pymongo-$PYMONGO_VERSION"
if [ ! -f "$SDIST" ]; then
    log "downloading the pymongo $PYMONGO_VERSION source distribution"
    tmpd="$(mktemp -d "$CACHE/download.XXXXXX")"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "pymongo==$PYMONGO_VERSION" -d "$tmpd"
    mv "$tmpd/pymongo-$PYMONGO_VERSION.tar.gz" "$SDIST"
    rm -rf "$tmpd"
fi
if [ ! -f "$SRC/.unpacked" ]; then
    log "unpacking $SDIST"
    rm -rf "$SRC"
    tar -xzf "$SDIST" -C "$CACHE"
    [ -f "$SRC/test/__init__.py" ] || die "the sdist has no test/ directory"
    touch "$SRC/.unpacked"
fi

# ---- private virtual environment, keyed by the pins --------------------------
# CPython 3.12 or newer is preferred: pytest under CPython 3.11.7 dies with an
# INTERNALERROR ("SystemError: AST constructor recursion depth mismatch") while
# formatting a failure in test_retryable_writes, which ends the whole session.
find_python() {
    if [ -n "${CONFORMANCE_PYTHON:-}" ]; then echo "$CONFORMANCE_PYTHON"; return; fi
    local pyroot c d v
    pyroot="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
    for v in 3.13 3.12; do
        c="$(command -v "python$v" 2>/dev/null || true)"
        if [ -n "$c" ] && "$c" -c 'import venv' >/dev/null 2>&1; then echo "$c"; return; fi
        for d in $(ls -d "$pyroot"/versions/"$v".* 2>/dev/null | sort -V -r); do
            if [ -x "$d/bin/python3" ] && "$d/bin/python3" -c 'import venv' >/dev/null 2>&1; then
                echo "$d/bin/python3"; return
            fi
        done
    done
    echo python3
}
BASE_PY="$(find_python)"
REQ="$HERE/requirements.txt"
grep -q "^pymongo==$PYMONGO_VERSION\$" "$REQ" || die "requirements.txt must pin pymongo==$PYMONGO_VERSION"
PYVER="$("$BASE_PY" -c 'import sys; print(sys.version.split()[0])')" || die "cannot run $BASE_PY"
KEY="$( { cat "$REQ"; echo "python $PYVER"; } | sha256sum | cut -c1-12)"
VENV="$CACHE/venv-$KEY"
if [ ! -f "$VENV/.complete" ]; then
    log "creating Python environment $VENV (Python $PYVER)"
    rm -rf "$VENV"
    "$BASE_PY" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
    touch "$VENV/.complete"
fi
PY="$VENV/bin/python"

# ---- the server binary ---------------------------------------------------------
if [ -n "${TAILSTREAM_BIN:-}" ]; then
    BIN="$TAILSTREAM_BIN"
    [ -x "$BIN" ] || die "TAILSTREAM_BIN=$BIN is not an executable file"
else
    BIN="${CARGO_TARGET_DIR:-$HOME/.cache/tailstream/target}/release/tailstream"
    if [ ! -x "$BIN" ]; then
        log "no server binary at $BIN: building it"
        # shellcheck source=../scripts/common.sh
        (source "$ROOT/scripts/common.sh" && build_release)
    fi
    [ -x "$BIN" ] || die "no server binary at $BIN"
fi

# ---- test selection -------------------------------------------------------------
matches_filter() {
    local path="$1" f
    [ ${#FILTERS[@]} -eq 0 ] && return 0
    for f in "${FILTERS[@]}"; do
        [ -n "$f" ] && [[ "$path" == *"$f"* ]] && return 0
    done
    return 1
}

SYNC_ARGS=()
ASYNC_ARGS=()
CI_MODULES="$HERE/ci-modules.txt"
[ "$REPLSET" = 1 ] && CI_MODULES="$HERE/ci-modules-replset.txt"
if [ "$MODE" = ci ]; then
    while IFS= read -r line; do
        line="${line%%#*}"; line="$(echo "$line" | xargs)"
        [ -z "$line" ] && continue
        [ -f "$SRC/$line" ] || die "ci-modules.txt names $line, which is not in the sdist"
        matches_filter "$line" && SYNC_ARGS+=("$line")
    done <"$CI_MODULES"
    [ ${#SYNC_ARGS[@]} -gt 0 ] || die "no CI module matches the filter"
elif [ ${#FILTERS[@]} -eq 0 ]; then
    SYNC_ARGS=(test --ignore=test/asynchronous)
    [ "$SYNC_ONLY" = 1 ] || ASYNC_ARGS=(test/asynchronous)
else
    while IFS= read -r path; do
        matches_filter "$path" || continue
        if [[ "$path" == test/asynchronous/* ]]; then
            [ "$SYNC_ONLY" = 1 ] || ASYNC_ARGS+=("$path")
        else
            SYNC_ARGS+=("$path")
        fi
    done < <(cd "$SRC" && find test -name 'test_*.py' | sort)
    [ $(( ${#SYNC_ARGS[@]} + ${#ASYNC_ARGS[@]} )) -gt 0 ] || die "no test file matches the filter"
fi

if [ "$MODE" = ci ]; then RUN_NAME=ci; elif [ ${#FILTERS[@]} -eq 0 ]; then RUN_NAME=full; else RUN_NAME=filtered; fi
SERVER_EXTRA=()
if [ "$AUTH" = 1 ]; then RUN_NAME="$RUN_NAME-auth"; SERVER_EXTRA+=(--auth); fi
CERTS="$SRC/test/certificates"
if [ "$TLS" = 1 ]; then
    RUN_NAME="$RUN_NAME-tls"
    SERVER_EXTRA+=(--tlsMode requireTLS --tlsCertificateKeyFile "$CERTS/server.pem"
                   --tlsCAFile "$CERTS/ca.pem" --tlsAllowConnectionsWithoutCertificates)
fi
if [ "$REPLSET" = 1 ]; then RUN_NAME="$RUN_NAME-replset"; fi
RESULTS="$RESULTS_ROOT/$RUN_NAME"
# Two runs of the same kind must not share (and wipe) one results directory.
mkdir -p "$RESULTS_ROOT"
exec 9>"$RESULTS_ROOT/$RUN_NAME.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    die "another '$RUN_NAME' conformance run is using $RESULTS; wait for it, or set CONFORMANCE_RESULTS to another directory"
fi
rm -rf "$RESULTS"
mkdir -p "$RESULTS"

# ---- start the server -------------------------------------------------------------
DBPATH="$(mktemp -d "${TMPDIR:-/tmp}/tailstream-conformance.XXXXXX")"
SERVER_PID=""
# With --replset: the other two members' processes.
MEMBER_PIDS=()
stop_pid() {
    local pid="$1"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}
stop_server() {
    stop_pid "$SERVER_PID"
    SERVER_PID=""
    for pid in ${MEMBER_PIDS[@]+"${MEMBER_PIDS[@]}"}; do stop_pid "$pid"; done
    MEMBER_PIDS=()
}
cleanup() { stop_server; rm -rf "$DBPATH"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mongod's default port when it is free: a few of pymongo's tests build a client with
# no host (MongoClient(**client_context.default_client_options)), which dials
# localhost:27017 whatever DB_PORT says, as pymongo's own CI (mongod on 27017) expects.
# Otherwise any free port (another server, or another conformance run, holds 27017).
PORT="$("$PY" -c '
import socket
def free(port):
    s = socket.socket()
    # As the server binds (SO_REUSEADDR): a port left in TIME_WAIT by an earlier run is
    # free, one a process listens on is not.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()
print(free(27017) or free(0))
')"
SERVER_LOG="$RESULTS/server.log"
MEMBER_PORTS=()
if [ "$REPLSET" = 1 ]; then
    # mongod's default election timeout (10 s): heartbeats every 2 s, and each append
    # call (a commit of up to 48 MB) may take that long on a busy machine.
    SERVER_EXTRA+=(--replSet rs0)
    read -r -a MEMBER_PORTS <<<"$("$PY" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
')"
fi
start_member() { # port dbpath log
    "$BIN" --port "$1" --bind_ip 127.0.0.1 --dbpath "$2" --oplogSize 256 --quiet \
        --setParameter enableTestCommands=1 ${SERVER_EXTRA[@]+"${SERVER_EXTRA[@]}"} >"$3" 2>&1 </dev/null 9>&- &
}
log "starting $BIN on 127.0.0.1:$PORT (dbpath $DBPATH)"
mkdir -p "$DBPATH/member0"
start_member "$PORT" "$DBPATH/member0" "$SERVER_LOG"
SERVER_PID=$!
for i in ${!MEMBER_PORTS[@]}; do
    log "starting member $((i + 1)) on 127.0.0.1:${MEMBER_PORTS[$i]}"
    mkdir -p "$DBPATH/member$((i + 1))"
    start_member "${MEMBER_PORTS[$i]}" "$DBPATH/member$((i + 1))" "$RESULTS/server-member$((i + 1)).log"
    MEMBER_PIDS+=($!)
done
if ! "$PY" - "$PORT" "$SERVER_PID" "$TLS" "$CERTS" <<'EOF'
import os, sys, time
from pymongo import MongoClient
port, pid = int(sys.argv[1]), int(sys.argv[2])
tls = {"tls": True, "tlsCAFile": f"{sys.argv[4]}/ca.pem"} if sys.argv[3] == "1" else {}
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited during startup")
    try:
        with MongoClient("127.0.0.1", port, directConnection=True, serverSelectionTimeoutMS=500, **tls) as c:
            c.admin.command("ping")
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit("the server did not answer within 60 s")
EOF
then
    tail -n 30 "$SERVER_LOG" >&2 || true
    die "could not start the server"
fi
if [ "$REPLSET" = 1 ]; then
    log "initiating replica set rs0 on ports $PORT ${MEMBER_PORTS[*]}"
    if ! "$PY" "$HERE/replset_initiate.py" "$PORT" "${MEMBER_PORTS[@]}"; then
        tail -n 30 "$SERVER_LOG" >&2 || true
        die "could not initiate the replica set"
    fi
fi

# ---- run pytest --------------------------------------------------------------------
NOTES=()
START_ALL=$SECONDS
JUNITS=()

# run_phase NAME BUDGET ARGS...
# Runs pytest once; if pytest itself dies part-way (INTERNALERROR, crash) it is
# started again on the tests that did not run yet (up to 3 times), the test that
# was running when it died being reported as an error.
run_phase() {
    local name="$1" budget="$2"; shift 2
    local pdir="$RESULTS/progress-$name" t0=$SECONDS attempt=1 rc took left xml out died cur nrem
    local args=("$@")
    mkdir -p "$pdir"
    : >"$pdir/done.txt"
    : >"$RESULTS/crashed-$name.txt"
    while :; do
        xml="$RESULTS/junit-$name-$attempt.xml"
        out="$RESULTS/pytest-$name-$attempt.log"
        left=$((budget - (SECONDS - t0)))
        rm -f "$pdir/current.txt"
        log "pytest ($name, attempt $attempt): $(echo "${args[*]}" | cut -c1-200) (per-test timeout ${TEST_TIMEOUT}s, limit ${left}s; output in $out)"
        rc=0
        (
            cd "$SRC"
            env -u COMPRESSORS -u MONGODB_API_VERSION -u TEST_LOAD_BALANCER -u SINGLE_MONGOS_LB_URI \
                -u MULTI_MONGOS_LB_URI -u CLIENT_PEM -u CA_PEM -u DB_USER -u DB_PASSWORD -u ENABLE_FLAKY \
                DB_IP=127.0.0.1 DB_PORT="$PORT" DISABLE_FLAKY=1 PYTHONDONTWRITEBYTECODE=1 \
                PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" CONFORMANCE_PROGRESS_DIR="$pdir" \
                timeout --signal=INT --kill-after=120 "$left" \
                "$PY" -m pytest -p no:cacheprovider -p conformance_progress --junitxml="$xml" \
                --timeout="$TEST_TIMEOUT" --tb=short -q "${args[@]}" ${PYTEST_EXTRA[@]+"${PYTEST_EXTRA[@]}"}
        ) >"$out" 2>&1 9>&- || rc=$?
        took=$((SECONDS - t0))
        [ "$rc" = 1 ] && ANY_FAILED=1
        log "pytest ($name, attempt $attempt) exited $rc after ${took}s: $(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran' "$out" | tail -n 1 | tr -d '=' | xargs || true)"
        if [ -s "$xml" ]; then JUNITS+=("$xml"); else log "pytest ($name, attempt $attempt) wrote no junit XML"; fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            NOTES+=("The server exited during the $name phase; the tests after that point could not reach it. Server log tail: $(tail -n 5 "$SERVER_LOG" | tr '\n' ' ' | cut -c1-500)")
            log "the server is no longer running (see $SERVER_LOG)"
            break
        fi
        case "$rc" in
            124) NOTES+=("The $name phase was cut off by the time limit (${budget}s) after ${took}s: the tests after that point did not run."); break ;;
            137) NOTES+=("The $name phase was killed after not stopping at the time limit (${budget}s)."); break ;;
            5) [ "$attempt" = 1 ] && NOTES+=("The $name phase collected no tests."); break ;;
        esac
        # Did pytest itself die part-way?
        died=0
        if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then died=1; fi
        if grep -q '^INTERNALERROR>' "$out"; then died=1; fi
        [ "$died" = 1 ] || break
        if [ ! -f "$pdir/planned.txt" ]; then
            NOTES+=("pytest ($name) exited with status $rc before it had collected the tests; see $out.")
            break
        fi
        cur=""
        [ -f "$pdir/current.txt" ] && cur="$(cat "$pdir/current.txt")"
        if [ -n "$cur" ] && ! grep -qxF -- "$cur" "$pdir/done.txt"; then
            echo "$cur" >>"$RESULTS/crashed-$name.txt"
        fi
        "$PY" -c '
import sys
planned, done, crashed, remaining = sys.argv[1:5]
gone = set(open(done).read().splitlines()) | set(open(crashed).read().splitlines())
with open(remaining, "w") as f:
    for line in open(planned).read().splitlines():
        if line and line not in gone:
            f.write(line + "\n")
' "$pdir/planned.txt" "$pdir/done.txt" "$RESULTS/crashed-$name.txt" "$pdir/remaining.txt"
        nrem=$(wc -l <"$pdir/remaining.txt")
        if [ "$nrem" -eq 0 ]; then
            NOTES+=("pytest ($name) died (exit status $rc) after its last test (${cur:-?}).")
            break
        fi
        if [ "$attempt" -ge 4 ] || [ $((budget - (SECONDS - t0))) -lt 60 ]; then
            NOTES+=("pytest ($name) died (exit status $rc) while running \`${cur:-?}\`; $nrem tests did not run.")
            break
        fi
        NOTES+=("pytest ($name) died (exit status $rc) while running \`${cur:-?}\`, which is reported as an error; a new pytest process ran the $nrem tests left.")
        log "pytest ($name) died while running ${cur:-?}; resuming with the $nrem tests left"
        attempt=$((attempt + 1))
        args=("@$pdir/remaining.txt")
    done
    echo "$name $((SECONDS - t0))" >>"$RESULTS/durations.txt"
}

if [ ${#SYNC_ARGS[@]} -gt 0 ]; then
    run_phase sync "$TOTAL_TIMEOUT" "${SYNC_ARGS[@]}"
fi
if [ ${#ASYNC_ARGS[@]} -gt 0 ]; then
    remaining=$((TOTAL_TIMEOUT - (SECONDS - START_ALL)))
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        NOTES+=("The async half of the suite (test/asynchronous) was not run: the server had exited.")
    elif [ "$remaining" -lt 300 ]; then
        NOTES+=("The async half of the suite (test/asynchronous) was not run: only ${remaining}s of the ${TOTAL_TIMEOUT}s limit were left after the sync half.")
        log "skipping the async half: only ${remaining}s left"
    else
        run_phase async "$remaining" "${ASYNC_ARGS[@]}"
    fi
fi
WALL=$((SECONDS - START_ALL))
stop_server

[ ${#JUNITS[@]} -gt 0 ] || die "no junit XML was produced; see the logs in $RESULTS"

# ---- report ---------------------------------------------------------------------------
if [ "$DO_REPORT" = 0 ]; then
    log "results in $RESULTS (report skipped)"
    if [ "$STRICT" = 1 ] && [ "$ANY_FAILED" = 1 ]; then
        log "tests failed (see $RESULTS)"
        exit 1
    fi
    exit 0
fi
if [ -z "$OUTPUT" ]; then
    if [ "$RUN_NAME" = full ] && [ ${#PYTEST_EXTRA[@]} -eq 0 ]; then
        OUTPUT="$ROOT/CONFORMANCE.md"
    else
        OUTPUT="$RESULTS/CONFORMANCE.md"
    fi
fi
REPORT_ARGS=(--suite-dir "$SRC" --pymongo-version "$PYMONGO_VERSION" --run "$RUN_NAME" --server-binary "$BIN"
             --output "$OUTPUT" --wall-seconds "$WALL" --test-timeout "$TEST_TIMEOUT")
[ "$MODE" = ci ] && REPORT_ARGS+=(--ci)
[ "$REPLSET" = 1 ] && REPORT_ARGS+=(--ratchet "$HERE/ratchet-replset.txt" --ci-modules "$CI_MODULES"
                                     --expected "$HERE/expected_failures_replset.txt")
[ "$UPDATE_RATCHET" = 1 ] && REPORT_ARGS+=(--update-ratchet)
[ ${#PYTEST_EXTRA[@]} -gt 0 ] && REPORT_ARGS+=(--note "Extra pytest arguments: ${PYTEST_EXTRA[*]}")
[ ${#FILTERS[@]} -gt 0 ] && REPORT_ARGS+=(--note "Module filter: ${FILTERS[*]}")
for n in ${NOTES[@]+"${NOTES[@]}"}; do REPORT_ARGS+=(--note "$n"); done
for j in "${JUNITS[@]}"; do REPORT_ARGS+=(--junit "$j"); done
for f in "$RESULTS"/progress-*/planned.txt; do [ -f "$f" ] && REPORT_ARGS+=(--planned "$f"); done
for f in "$RESULTS"/crashed-*.txt; do [ -s "$f" ] && REPORT_ARGS+=(--crashed "$f"); done
"$PY" "$HERE/report.py" "${REPORT_ARGS[@]}"

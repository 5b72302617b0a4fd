#!/bin/bash
# The 16-core targets of issues 27, 28 and 26 on the device machine, in one run:
#   replset   issue 27, benchmark 1: the ingestion key table with w: "majority" on three
#             members, each pinned to its own 4 cores (0-3, 4-7, 8-11), the client on
#             12-15; then one node (the default, no Raft) on cores 0-3, same options
#             (REPLSET_GB, default 0.5 GiB per row; REPLSET_CLIENTS, default 8)
#   parallel  issue 28: seed 004's replay of one collection (bench/parallel_stream/bench.py),
#             one stream against 1, 4 and 8 buckets by document key, the server on cores
#             0-7, one Python consumer process per bucket on 8-15
#   bus, cs   issue 26: the bus rows against Redis Streams (AOF always) and the change-stream
#             latency rows, the server and Redis on cores 0-3, the clients on 4-15
#
#   bash bench/device-targets.sh prepare      # here: binaries, Redis, shared libraries and
#                                             # pymongo wheels for the device's Python 3.12
#                                             # into .devbin/ (git-ignored)
#   then the device tool with carry [".devbin"] and the command
#   bash bench/device-targets.sh run parallel,replset,bus,cs   # there; figures in $OUT
#
# `prepare` uses ../shared/tools/device-bench.sh (stripped binaries started through the
# copied glibc loader, so the device's own libc does not matter; the device has no network).
set -u
mode=${1:-}
PYMONGO=pymongo==4.17.0
DNSPYTHON=dnspython==2.9.2
case "$mode" in
prepare)
  root=$(git rev-parse --show-toplevel) || exit 1
  cd "$root" || exit 1
  bash "$root/../shared/tools/device-bench.sh" prepare >/dev/null || exit 1
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .devbin/whl "$PYMONGO" "$DNSPYTHON" || exit 1
  du -sh .devbin
  ;;
run)
  what=",${2:-parallel,replset,bus,cs},"
  root=$(cd "$(dirname "$0")/.." && pwd)
  D="$root/.devbin"
  OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
  exec > >(tee "$OUT/log.txt") 2>&1
  echo "== machine"; uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
  df -h /tmp | tail -1; date -u
  cd "$D" || exit 1
  for f in *.xz lib/*.xz; do [ -f "$f" ] && xz -d -f "$f"; done
  chmod +x tailstream redis-server bench-* 2>/dev/null
  L="$D/lib/ld-linux-x86-64.so.2 --library-path $D/lib"
  # PIN=0 runs it all unpinned (a trial run on a machine with fewer cores).
  PIN=${PIN:-1}
  if [ "$PIN" = 1 ]; then
    command -v taskset >/dev/null || { echo "no taskset: cannot pin"; exit 1; }
    on() { local cpus=$1; shift; taskset -c "$cpus" "$@"; }
    pin() { echo "taskset -c $1"; } # a prefix: a member's $! is then its own pid
    T="taskset -c 0-3"; server_cpus=0-7; client_cpus=8-15
  else
    on() { shift; "$@"; }
    pin() { :; }
    T=""; server_cpus=""; client_cpus=""
  fi
  # The server through the loader, unpinned (callers pin it) and pinned to cores 0-3.
  printf '#!/bin/bash\nexec %s %s/tailstream "$@"\n' "$L" "$D" > ts-any.sh
  printf '#!/bin/bash\nexec %s %s %s/tailstream "$@"\n' "$T" "$L" "$D" > ts.sh
  printf '#!/bin/bash\nexec %s %s %s/redis-server "$@"\n' "$T" "$L" "$D" > redis.sh
  chmod +x ts-any.sh ts.sh redis.sh
  data=/tmp/device-targets; rm -rf "$data"; mkdir -p "$data"

  case $what in *,parallel,*)
    echo "== parallel $(date -u +%T)"
    PY=${PY:-python3}
    "$PY" -c "import pymongo" 2>/dev/null || { "$PY" -m pip install -q --no-index --no-deps \
      --no-compile --no-cache-dir --upgrade --target /tmp/site whl/*.whl &&
      export PYTHONPATH=/tmp/site; }
    PYTHONUNBUFFERED=1 timeout 240 "$PY" "$root/bench/parallel_stream/bench.py" \
      --server "$D/ts-any.sh" --docs "${PARALLEL_DOCS:-2000000}" --collections 1 \
      --buckets 1,4,8 --by documentKey --server-cpus "$server_cpus" --client-cpus "$client_cpus" \
      | tee "$OUT/parallel.md"
    echo "parallel exit ${PIPESTATUS[0]}";; esac

  case $what in *,replset,*)
    echo "== replset $(date -u +%T)"
    pids=(); hosts=()
    for i in 0 1 2; do
      mkdir -p "$data/rs0-$i"
      $(pin $((4 * i))-$((4 * i + 3))) $L ./tailstream --replSet rs0 --port $((27217 + i)) \
        --dbpath "$data/rs0-$i" --bind_ip 127.0.0.1 --quiet > "$data/rs0-$i.log" 2>&1 &
      pids+=($!); hosts+=("127.0.0.1:$((27217 + i))")
    done
    sleep 2
    set_hosts=$(IFS=,; echo "${hosts[*]}")
    on 12-15 timeout 150 $L ./bench-ingest --uri "mongodb://$set_hosts/?replicaSet=rs0" \
      --initiate "$set_hosts" --server-pid "${pids[0]}" --tables key --write-concern majority \
      --gb "${REPLSET_GB:-0.5}" --clients "${REPLSET_CLIENTS:-8}" --no-targets --settle-seconds 5 \
      --json "$OUT/replset.json" > "$OUT/replset.md"
    echo "replset exit $?"; cat "$OUT/replset.md"
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    tail -n 3 "$data"/rs0-*.log
    rm -rf "$data"/rs0-*
    on 12-15 timeout 90 $L ./bench-ingest --server-bin "$D/ts.sh" --data-dir "$data" \
      --tables key --write-concern majority --gb "${REPLSET_GB:-0.5}" --clients "${REPLSET_CLIENTS:-8}" --no-targets \
      --settle-seconds 5 --json "$OUT/single.json" > "$OUT/single.md"
    echo "single exit $?"; cat "$OUT/single.md";; esac

  case $what in *,bus,*)
    echo "== bus $(date -u +%T)"
    on 4-15 timeout 150 $L ./bench-bus --server-bin "$D/ts.sh" --redis-bin "$D/redis.sh" \
      --data-dir "$data" --systems tailstream,tailstream-w1,redis-streams-always \
      --scenarios paced-20k,full,fanout8-full --no-plots --json "$OUT/bus.json" > "$OUT/bus.md"
    echo "bus exit $?"; cat "$OUT/bus.md";; esac

  case $what in *,cs,*)
    echo "== cs $(date -u +%T)"
    on 4-15 timeout 90 $L ./bench-changestream --server-bin "$D/ts.sh" --data-dir "$data" \
      --scenarios latency --latency-secs 8 --latency-warmup-mb 256 \
      --json "$OUT/cs.json" > "$OUT/cs.md"
    echo "cs exit $?"; cat "$OUT/cs.md";; esac
  rm -rf "$data"
  date -u
  ;;
*) sed -n 2,18p "$0"; exit 2;;
esac

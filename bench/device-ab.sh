#!/bin/bash
# Two builds side by side on the 16-core device machine, with Redis, in one run: the bus
# rows of the issue (paced 20k, full speed 1→1 and 1→8, durable and {w: 1}) and the
# change-stream latency rows, the servers pinned to cores 0-3, the clients to 4-15.
#
#   bash bench/device-ab.sh prepare /path/to/tailstream-before   # here: packs .devbin/
#   then the device tool with carry [".devbin"] and the command
#   bash .devbin/device-ab.sh run [bus,cs,threads]                # there; figures in $OUT
# (threads: the bus rows of the current build with 1, 2 and 4 I/O threads)
#
# `prepare` uses ../shared/tools/device-bench.sh (the binaries, Redis and their shared
# libraries, started through the copied glibc loader) and adds the build to compare with.
set -u
mode=${1:-}
case "$mode" in
prepare)
  before=${2:?the binary of the build to compare with}
  root=$(git rev-parse --show-toplevel) || exit 1
  cd "$root" || exit 1
  bash "$root/../shared/tools/device-bench.sh" prepare >/dev/null || exit 1
  strip -o .devbin/tailstream-before "$before" || exit 1
  ldd .devbin/tailstream-before | awk '/=>/ {print $3}' | while read -r lib; do
    [ -e ".devbin/lib/$(basename "$lib").xz" ] || cp -L "$lib" .devbin/lib/
  done
  (cd .devbin && xz -T0 -f tailstream-before && for f in lib/*; do
    case $f in *.xz) ;; *) xz -T0 -f "$f";; esac; done)
  cp "$0" .devbin/device-ab.sh
  du -sh .devbin
  ;;
run)
  what=",${2:-bus,cs},"
  D=$(cd "$(dirname "$0")" && pwd)
  OUT=${OUT:-/tmp/devout}; mkdir -p "$OUT"
  exec > >(tee "$OUT/log.txt") 2>&1
  echo "== machine"; uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; date -u
  cd "$D" || exit 1
  for f in *.xz lib/*.xz; do [ -f "$f" ] && xz -d -f "$f"; done
  chmod +x tailstream tailstream-before redis-server bench-* 2>/dev/null
  L="$D/lib/ld-linux-x86-64.so.2 --library-path $D/lib"
  S=${PIN_SERVER:-taskset -c 0-3}; C=${PIN_CLIENT:-taskset -c 4-15}
  for b in tailstream tailstream-before redis-server; do
    printf '#!/bin/bash\nexec %s %s %s/%s "$@"\n' "$S" "$L" "$D" "$b" > "$b.sh"
    chmod +x "$b.sh"
  done
  bus() { # label, server script, systems
    timeout 150 $C $L ./bench-bus --server-bin "$D/$2" --redis-bin "$D/redis-server.sh" \
      --data-dir /tmp --systems "$3" --scenarios paced-20k,full,fanout8-full --no-plots \
      --json "$OUT/bus-$1.json" > "$OUT/bus-$1.md"
    echo "bus $1 exit $?"
  }
  cs() { # label, server script
    timeout 150 $C $L ./bench-changestream --server-bin "$D/$2" --data-dir /tmp \
      --scenarios latency --latency-secs 8 --latency-warmup-mb 256 \
      --json "$OUT/cs-$1.json" > "$OUT/cs-$1.md"
    echo "cs $1 exit $?"
  }
  case $what in *,threads,*) # the after build with 1, 2 and 4 I/O threads (default: half the cores)
    for n in 1 2 4; do
      printf '#!/bin/bash\nexec %s/tailstream.sh --ioThreads %s "$@"\n' "$D" "$n" > "io$n.sh"
      chmod +x "io$n.sh"
      bus "io$n" "io$n.sh" tailstream,tailstream-w1
    done;; esac
  case $what in *,bus,*)
    bus after tailstream.sh tailstream,tailstream-w1
    bus before tailstream-before.sh tailstream,tailstream-w1
    bus redis tailstream.sh redis-streams-always;; esac
  case $what in *,cs,*)
    cs after tailstream.sh
    cs before tailstream-before.sh;; esac
  date -u
  ;;
*) sed -n 2,10p "$0"; exit 2;;
esac

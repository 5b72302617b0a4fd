#!/usr/bin/env bash
# Builds Tailstream and starts a three-member replica set on this machine: members on
# 127.0.0.1:27017, 27018 and 27019 with their data in the clone's data/rs0-0, -1, -2,
# each logging to (the end of) its data directory's server.log, initiated with replSetInitiate as
# mongod's members are (issue 27). Connect with
#   mongodb://127.0.0.1:27017,127.0.0.1:27018,127.0.0.1:27019/?replicaSet=rs0
# Stop them with `bash scripts/replset.sh stop`. Arguments (after an optional `start`)
# go to every member, e.g. --setParameter replElectionTimeoutMillis=1000.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PORTS=(27017 27018 27019)
pidfile() { echo "$ROOT/data/rs0-$1/tailstream.pid"; }

stop_members() {
    local i pid
    for i in 0 1 2; do
        pid=$(cat "$(pidfile "$i")" 2>/dev/null) || continue
        kill "$pid" 2>/dev/null && echo "stopped member $i (pid $pid)"
        rm -f "$(pidfile "$i")"
    done
}

case "${1:-start}" in
stop) stop_members; exit 0 ;;
start) [ $# -gt 0 ] && shift ;;
esac

build_release
for i in 0 1 2; do
    dir="$ROOT/data/rs0-$i"
    mkdir -p "$dir"
    pid=$(cat "$(pidfile "$i")" 2>/dev/null) || pid=""
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "member $i already running (pid $pid)"
        continue
    fi
    "$TAILSTREAM_BIN" --replSet rs0 --port "${PORTS[$i]}" --dbpath "$dir" "$@" \
        >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$(pidfile "$i")"
done
# Wait for every member to answer, then initiate (once: a set already initiated
# answers AlreadyInitialized, code 23, and keeps its members).
python3 - "${PORTS[@]}" <<'PY'
import json, socket, struct, sys, time

def command(port, cmd):
    """One OP_MSG command over a plain socket (no driver needed)."""
    def bson(doc):
        body = b""
        for k, v in doc.items():
            key = k.encode() + b"\0"
            if isinstance(v, str):
                s = v.encode() + b"\0"
                body += b"\x02" + key + struct.pack("<i", len(s)) + s
            elif isinstance(v, int):
                body += b"\x10" + key + struct.pack("<i", v)
            elif isinstance(v, dict):
                body += b"\x03" + key + bson(v)
            elif isinstance(v, list):
                body += b"\x04" + key + bson({str(i): x for i, x in enumerate(v)})
        return struct.pack("<i", len(body) + 5) + body + b"\0"
    payload = struct.pack("<I", 0) + b"\0" + bson(cmd)
    msg = struct.pack("<iiii", 16 + len(payload), 1, 0, 2013) + payload
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(msg)
        head = s.recv(16, socket.MSG_WAITALL)
        length = struct.unpack("<i", head[:4])[0]
        rest = b""
        while len(rest) < length - 16:
            rest += s.recv(length - 16 - len(rest))
    return rest

ports = [int(p) for p in sys.argv[1:]]
deadline = time.time() + 60
for port in ports:
    while True:
        try:
            command(port, {"ping": 1, "$db": "admin"})
            break
        except OSError:
            if time.time() > deadline:
                sys.exit(f"member on port {port} did not start; see data/rs0-*/server.log")
            time.sleep(0.2)
config = {"_id": "rs0", "members": [{"_id": i, "host": f"127.0.0.1:{p}"} for i, p in enumerate(ports)]}
reply = command(ports[0], {"replSetInitiate": config, "$db": "admin"})
ok = b"already initialized" in reply or b"\x01ok\x00\x00\x00\x00\x00\x00\x00\xf0?" in reply
print("replica set rs0:", "initiated" if ok else reply)
sys.exit(0 if ok else 1)
PY
echo "mongodb://127.0.0.1:27017,127.0.0.1:27018,127.0.0.1:27019/?replicaSet=rs0"

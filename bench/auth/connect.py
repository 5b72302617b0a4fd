"""Connection set-up per second with SCRAM-SHA-256 against without authentication
(issue 29's benchmark), on one server each, side by side.

Each connection, as a driver makes it: TCP connect, `hello` (with
`speculativeAuthenticate` carrying SCRAM's first message when authenticating),
`saslContinue` with the proof, one `ping`, close. The client is raw sockets and
caches the salted password (as drivers do), so what it measures is the server's
side: the hello, the SCRAM exchange (HMACs and the user's lookup) and the
connection's own set-up. Prints a table: connections/s, server CPU per 1,000
connections, for both servers.

    python bench/auth/connect.py --server target/release/tailstream [--seconds 10] [--clients 4]
"""

import argparse
import base64
import hashlib
import hmac
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import bson

USER, PASSWORD = "bench", "bench-password"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def op_msg(doc, request_id):
    body = struct.pack("<I", 0) + b"\x00" + bson.encode(doc)
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2013) + body


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def command(sock, doc, request_id):
    sock.sendall(op_msg(doc, request_id))
    length = struct.unpack("<i", recv_exact(sock, 4))[0]
    rest = recv_exact(sock, length - 4)
    reply = bson.decode(rest[12 + 5:])
    if reply.get("ok") != 1:
        raise RuntimeError(f"{doc} failed: {reply}")
    return reply


class Scram:
    """SCRAM-SHA-256's client side with the salted password cached per salt."""

    def __init__(self):
        self.salted = {}

    def keys(self, salt, iterations):
        key = (salt, iterations)
        if key not in self.salted:
            self.salted[key] = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt, iterations)
        return self.salted[key]

    def connect(self, port):
        nonce = base64.b64encode(os.urandom(24)).decode()
        first_bare = f"n={USER},r={nonce}"
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = command(s, {"hello": 1, "$db": "admin", "speculativeAuthenticate": {
                "saslStart": 1, "mechanism": "SCRAM-SHA-256", "db": "admin",
                "payload": bson.Binary(f"n,,{first_bare}".encode()),
                "options": {"skipEmptyExchange": True}}}, 1)
            server_first = bytes(hello["speculativeAuthenticate"]["payload"]).decode()
            fields = dict(f.split("=", 1) for f in server_first.split(","))
            salted = self.keys(base64.b64decode(fields["s"]), int(fields["i"]))
            client_key = hmac.digest(salted, b"Client Key", "sha256")
            stored_key = hashlib.sha256(client_key).digest()
            without_proof = f"c=biws,r={fields['r']}"
            message = f"{first_bare},{server_first},{without_proof}".encode()
            signature = hmac.digest(stored_key, message, "sha256")
            proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
            done = command(s, {"saslContinue": 1, "conversationId": 1, "$db": "admin",
                               "payload": bson.Binary(f"{without_proof},p={proof}".encode())}, 2)
            assert done["done"] is True
            command(s, {"ping": 1, "$db": "admin"}, 3)


def plain_connect(port):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        command(s, {"hello": 1, "$db": "admin"}, 1)
        command(s, {"ping": 1, "$db": "admin"}, 2)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start(server, auth):
    port, dbpath = free_port(), tempfile.mkdtemp(prefix="ts-bench-auth-")
    args = [server, "--port", str(port), "--dbpath", dbpath, "--quiet", "--nounixsocket"]
    proc = subprocess.Popen(args + (["--auth"] if auth else []),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            plain_connect(port)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    if auth:
        with socket.create_connection(("127.0.0.1", port)) as s:
            command(s, {"createUser": USER, "pwd": PASSWORD, "roles": ["root"],
                        "mechanisms": ["SCRAM-SHA-256"], "$db": "admin"}, 1)
    return proc, port, dbpath


def run(server, auth, seconds, clients):
    proc, port, dbpath = start(server, auth)
    try:
        connect = Scram().connect if auth else plain_connect
        connect(port)  # warm the client's cache and the server
        counts = [0] * clients
        stop = time.monotonic() + seconds

        def worker(i):
            scram = Scram() if auth else None
            while time.monotonic() < stop:
                (scram.connect if auth else plain_connect)(port)
                counts[i] += 1

        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed, cpu = time.monotonic() - t0, cpu_seconds(proc.pid) - cpu0
        n = sum(counts)
        # CPU seconds → milliseconds, per 1,000 connections.
        return n / elapsed, 1_000_000 * cpu / max(n, 1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(dbpath, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    rows = [("no authentication", *run(a.server, False, a.seconds, a.clients)),
            ("SCRAM-SHA-256", *run(a.server, True, a.seconds, a.clients))]
    print(f"connection set-up: {a.clients} client threads, {a.seconds:g} s each, "
          "hello + (SCRAM) + ping + close per connection")
    print("| | connections/s | server CPU ms per 1,000 connections |")
    print("|---|---:|---:|")
    for name, rate, cpu in rows:
        print(f"| {name} | {rate:,.0f} | {cpu:,.0f} |")
    print(f"SCRAM-SHA-256 costs {rows[1][2] / max(rows[0][2], 1e-9):.2f}x the server CPU per connection")


if __name__ == "__main__":
    sys.exit(main())

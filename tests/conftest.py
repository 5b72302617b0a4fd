"""Shared fixtures for the Tailstream integration suite.

Every test talks to the real server binary over TCP with pymongo (or raw
sockets for wire-level tests).  The binary is found via $TAILSTREAM_BIN, else
${CARGO_TARGET_DIR:-$HOME/.cache/tailstream/target}/release/tailstream.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from ports import free_port, free_ports  # noqa: F401 - tests import free_port from here


def binary_path() -> Path:
    env = os.environ.get("TAILSTREAM_BIN")
    if env:
        return Path(env)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tailstream", "target"
    )
    return Path(target) / "release" / "tailstream"


def next_event(stream, timeout=10.0):
    """The next event, failing (not hanging) if none comes within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = stream.try_next()
        if ev is not None:
            return ev
    pytest.fail(f"no change event within {timeout}s")


def eventually(check, timeout=10.0, interval=0.05):
    """Calls `check` until it returns a true value (returned) or `timeout` passes
    (then its last value is returned, for the caller to assert on). For effects the
    server applies in the background, such as oplog trimming."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


class PortTaken(RuntimeError):
    """The server could not listen: another socket took its port first."""


class TailstreamServer:
    """One tailstream process on its own dbpath and port."""

    # Startups retried with newly chosen ports when a port was taken in between.
    PORT_RETRIES = 3

    def __init__(self, dbpath, port=None, extra_args=(), oplog_size_mb=64, http=False):
        self.binary = binary_path()
        if not self.binary.exists():
            pytest.fail(
                f"tailstream binary not found at {self.binary} "
                "(build it with `cargo build --release` or set TAILSTREAM_BIN)",
                pytrace=False,
            )
        self.dbpath = Path(dbpath)
        self.dbpath.mkdir(parents=True, exist_ok=True)
        # Ports this object chose may be chosen again if taken before the first start.
        self._ports_chosen_here = port is None
        self._started_once = False
        self.http = http
        self.port = port
        self.http_port = None
        self._choose_ports()
        self.extra_args = list(extra_args)
        self.oplog_size_mb = oplog_size_mb
        self.proc = None
        self.logfile = self.dbpath.parent / f"{self.dbpath.name}-server.log"
        self._log_handle = None

    def _choose_ports(self):
        """(Re)choose the ports this object picks itself: the client port unless one was
        given, and the HTTP port when asked for."""
        mongo, http = free_ports(2)
        if self._ports_chosen_here:
            self.port = mongo
        if self.http:
            self.http_port = http if http != self.port else mongo

    @property
    def http_url(self):
        assert self.http_port is not None, "server made without http=True"
        return f"http://127.0.0.1:{self.http_port}"

    # ---- process control -------------------------------------------------
    def argv(self):
        args = [
            str(self.binary),
            "--port", str(self.port),
            "--bind_ip", "127.0.0.1",
            "--dbpath", str(self.dbpath),
            "--replSet", "rs0",
            "--quiet",
        ]
        if not any(a == "--oplogSize" for a in self.extra_args):
            args += ["--oplogSize", str(self.oplog_size_mb)]
        if not any("ttlMonitorSleepSecs" in a for a in self.extra_args):
            args += ["--setParameter", "ttlMonitorSleepSecs=1"]
        args += ["--setParameter", "enableTestCommands=1"]
        if self.http:
            args += ["--httpPort", str(self.http_port)]
        return args + self.extra_args

    def start(self, timeout=20.0):
        """Starts the server and waits for its ping. A first start whose port another
        socket took after it was chosen is retried on newly chosen ports."""
        for attempt in range(self.PORT_RETRIES):
            try:
                self._start_once(timeout)
                self._started_once = True
                return self
            except PortTaken:
                may_choose_again = not self._started_once and (
                    self._ports_chosen_here or self.http)
                if not may_choose_again or attempt + 1 == self.PORT_RETRIES:
                    raise
                self._close_log()
                self._choose_ports()

    def _start_once(self, timeout):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_handle = open(self.logfile, "ab")
        this_start_at = self._log_handle.tell()
        self.proc = subprocess.Popen(
            self.argv(), stdout=self._log_handle, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        last_err = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.logfile, "rb") as f:
                    f.seek(this_start_at)
                    said = f.read().decode(errors="replace")
                failure = PortTaken if "Address already in use" in said else RuntimeError
                raise failure(
                    f"tailstream exited with {self.proc.returncode} during startup:\n"
                    + self.log_tail()
                )
            try:
                # Polling monitoring: no RTT-monitor thread that could still be
                # opening a connection after close() returns, which a test counting
                # the server's connections (the ingress limiter's) would see.
                with MongoClient(
                    self.uri(directConnection="true"),
                    serverSelectionTimeoutMS=500, connectTimeoutMS=500,
                    serverMonitoringMode="poll",
                ) as c:
                    c.admin.command("ping")
                return self
            except Exception as e:  # noqa: BLE001 - keep polling
                last_err = e
                time.sleep(0.1)
        self.kill9()
        raise RuntimeError(
            f"tailstream did not answer ping within {timeout}s ({last_err!r}):\n"
            + self.log_tail()
        )

    def stop(self, timeout=20.0):
        if self.proc is None or self.proc.poll() is not None:
            self._close_log()
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._close_log()
            raise RuntimeError("tailstream did not exit within %ss of SIGTERM" % timeout)
        self._close_log()
        return self.proc.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def remove_socket_file(self):
        """Removes the Unix socket file a killed server left in /tmp (as mongod, it
        removes it itself only on a clean shutdown)."""
        if not self.is_running():
            try:
                os.unlink(f"/tmp/mongodb-{self.port}.sock")
            except FileNotFoundError:
                pass

    def restart(self):
        self.stop()
        return self.start()

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def _close_log(self):
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    # ---- helpers --------------------------------------------------------
    def uri(self, **opts):
        base = f"mongodb://127.0.0.1:{self.port}/"
        if opts:
            base += "?" + "&".join(f"{k}={v}" for k, v in opts.items())
        return base

    def client(self, **kwargs):
        kwargs.setdefault("directConnection", True)
        kwargs.setdefault("serverSelectionTimeoutMS", 5000)
        return MongoClient(f"mongodb://127.0.0.1:{self.port}/", **kwargs)

    def log_text(self):
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])


# ---- fixtures --------------------------------------------------------------

@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = TailstreamServer(tmp_path_factory.mktemp("main") / "db", oplog_size_mb=64)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server):
    c = MongoClient(server.uri(directConnection="true"), serverSelectionTimeoutMS=5000)
    yield c
    c.close()


def _db_name_for(request):
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)
    return ("t_" + name)[:60]


@pytest.fixture
def db(client, request):
    name = _db_name_for(request)
    client.drop_database(name)
    database = client[name]
    yield database
    try:
        client.drop_database(name)
    except Exception:  # noqa: BLE001 - the server may be gone after a crash test
        pass


@pytest.fixture
def coll(db):
    return db.test_coll


@pytest.fixture
def fresh_server(tmp_path):
    """Factory: fresh_server(oplog_size_mb=64, extra_args=()) -> started server
    on its own dbpath under this test's tmp dir; all are stopped afterwards."""
    servers = []

    def make(oplog_size_mb=64, extra_args=(), start=True, dbpath=None):
        path = Path(dbpath) if dbpath else tmp_path / f"db{len(servers)}"
        srv = TailstreamServer(path, extra_args=extra_args, oplog_size_mb=oplog_size_mb)
        servers.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    for srv in servers:
        try:
            srv.stop(timeout=10)
        except Exception:  # noqa: BLE001
            srv.kill9()
        srv.remove_socket_file()

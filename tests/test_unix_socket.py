"""The Unix domain socket, as mongod's: `/tmp/mongodb-<port>.sock` by default,
`--nounixsocket`, `--unixSocketPrefix`, `--filePermissions`, socket paths in
`--bind_ip`; drivers connect with `mongodb://%2Ftmp%2Fmongodb-<port>.sock`."""

import os
import socket
import stat
import subprocess
import shutil
import tempfile
import threading
import urllib.parse
from pathlib import Path

import pytest
from pymongo import CursorType, MongoClient
from pymongo.errors import ConnectionFailure

from conftest import free_port


def socket_client(path, **kwargs):
    kwargs.setdefault("serverSelectionTimeoutMS", 5000)
    return MongoClient(
        "mongodb://" + urllib.parse.quote(str(path), safe=""),
        directConnection=True,
        **kwargs,
    )


@pytest.fixture
def short_dir():
    """A directory with a short path of its own: socket paths are limited to 107 bytes,
    which pytest's tmp_path can exceed."""
    path = Path(tempfile.mkdtemp(prefix="ts-uds-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def default_socket(srv):
    return Path(f"/tmp/mongodb-{srv.port}.sock")


def test_default_socket_serves_commands_with_mode_0700(fresh_server):
    srv = fresh_server()
    path = default_socket(srv)
    st = path.stat()
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    with socket_client(path) as c:
        c.t.c.insert_one({"_id": 1, "via": "unix"})
        assert c.t.c.find_one({"_id": 1}) == {"_id": 1, "via": "unix"}
        assert c.admin.command("whatsmyuri")["you"] == "anonymous unix socket:27017"
    # The same data over TCP: one server behind both sockets.
    with srv.client() as tcp:
        assert tcp.t.c.find_one({"_id": 1})["via"] == "unix"
        assert tcp.admin.command("whatsmyuri")["you"].startswith("127.0.0.1:")


def test_clean_shutdown_removes_the_socket_file(fresh_server):
    srv = fresh_server()
    path = default_socket(srv)
    assert path.exists()
    assert srv.stop() == 0
    assert not path.exists()


def test_stale_socket_file_is_replaced_at_startup(fresh_server):
    srv = fresh_server()
    path = default_socket(srv)
    srv.kill9()
    # kill -9 leaves the file behind, as it does mongod's; nothing listens on it.
    assert path.exists()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        with pytest.raises(ConnectionRefusedError):
            s.connect(str(path))
    srv.start()
    with socket_client(path) as c:
        assert c.admin.command("ping")["ok"] == 1


def test_second_server_on_the_port_keeps_the_first_ones_socket(fresh_server, tmp_path):
    srv = fresh_server()
    path = default_socket(srv)
    other = fresh_server(start=False, dbpath=tmp_path / "other")
    other.port = srv.port
    # Not other.start(): its ping would reach the first server.
    proc = subprocess.run(other.argv(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 48, proc.stderr
    assert f"127.0.0.1:{srv.port}" in proc.stderr
    with socket_client(path) as c:
        assert c.admin.command("ping")["ok"] == 1


def test_nounixsocket(fresh_server):
    srv = fresh_server(extra_args=["--nounixsocket"])
    assert not default_socket(srv).exists()
    with srv.client() as c:
        opts = c.admin.command("getCmdLineOpts")["parsed"]["net"]["unixDomainSocket"]
        assert opts["enabled"] is False


def test_prefix_and_file_permissions(fresh_server, short_dir):
    prefix = short_dir
    port = free_port()
    srv = fresh_server(
        start=False,
        extra_args=["--unixSocketPrefix", str(prefix), "--filePermissions", "0777"],
    )
    srv.port = port
    srv.start()
    path = prefix / f"mongodb-{port}.sock"
    assert stat.S_IMODE(path.stat().st_mode) == 0o777
    assert not Path(f"/tmp/mongodb-{port}.sock").exists()
    with socket_client(path) as c:
        assert c.admin.command("getCmdLineOpts")["parsed"]["net"]["unixDomainSocket"] == {
            "enabled": True,
            "pathPrefix": str(prefix),
            "filePermissions": 0o777,
        }
    srv.stop()
    assert not path.exists()


def test_socket_path_in_bind_ip(fresh_server, short_dir):
    extra = short_dir / "extra.sock"
    srv = fresh_server(start=False)
    base_argv = srv.argv

    def argv():
        args = base_argv()
        args[args.index("--bind_ip") + 1] = f"127.0.0.1,{extra}"
        return args

    srv.argv = argv
    srv.start()
    with socket_client(extra) as c:
        assert c.admin.command("ping")["ok"] == 1
        # hello still names the TCP address, not the path.
        assert c.admin.command("hello")["me"] == f"127.0.0.1:{srv.port}"
    assert default_socket(srv).exists()
    srv.stop()
    assert not extra.exists()


@pytest.mark.parametrize("bad", ["0800", "rwx", "17777"])
def test_bad_file_permissions_refused(fresh_server, bad):
    srv = fresh_server(start=False, extra_args=["--filePermissions", bad])
    with pytest.raises(RuntimeError, match="exited with"):
        srv.start(timeout=10)
    assert "filePermissions" in srv.log_text()


def test_unwritable_prefix_fails_startup(fresh_server):
    srv = fresh_server(
        start=False, extra_args=["--unixSocketPrefix", "/nonexistent-ts-dir"]
    )
    with pytest.raises(RuntimeError, match="exited with 48"):
        srv.start(timeout=10)
    assert "/nonexistent-ts-dir/mongodb-" in srv.log_text()
    # It gave the TCP port back.
    with socket.socket() as s:
        s.bind(("127.0.0.1", srv.port))


def test_tailable_bus_and_change_stream_over_the_socket(fresh_server):
    """A producer on TCP, consumers on the socket: a capped collection's tailable
    cursor and a change stream both wake on the producer's inserts."""
    srv = fresh_server()
    path = default_socket(srv)
    with srv.client() as producer, socket_client(path) as consumer:
        producer.bus.create_collection("q", capped=True, size=1 << 20)
        stream = consumer.bus.q.watch(max_await_time_ms=5000)
        cursor = consumer.bus.q.find(
            cursor_type=CursorType.TAILABLE_AWAIT
        ).max_await_time_ms(5000)
        got = []

        def tail():
            while len(got) < 100 and cursor.alive:
                for d in cursor:
                    got.append(d["n"])

        t = threading.Thread(target=tail)
        t.start()
        for n in range(100):
            producer.bus.q.insert_one({"n": n})
        events = [stream.next()["fullDocument"]["n"] for _ in range(100)]
        t.join(20)
        assert not t.is_alive()
        assert got == list(range(100))
        assert events == list(range(100))
        stream.close()
        cursor.close()


def test_client_fails_cleanly_on_a_missing_socket():
    with pytest.raises(ConnectionFailure):
        with socket_client(
            f"/tmp/ts-no-such-{os.getpid()}.sock", serverSelectionTimeoutMS=200
        ) as c:
            c.admin.command("ping")

"""`--config` / `-f`: mongod's YAML configuration file (issue 30). Its settings start
the server as the options they stand for; the command line overrides them; a setting
mongod does not have stops the start with mongod's message and exit code 2."""

import subprocess

from pymongo import MongoClient

from conftest import binary_path, free_port, TailstreamServer


def test_a_mongod_config_file_starts_the_server(tmp_path):
    port = free_port()
    dbpath = tmp_path / "fromfile"
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        "storage:\n"
        f"  dbPath: {dbpath}\n"
        "  engine: wiredTiger\n"
        "net:\n"
        f"  port: {port}\n"
        "  bindIp: 127.0.0.1\n"
        "  unixDomainSocket:\n"
        "    enabled: false\n"
        "operationProfiling:\n"
        "  slowOpThresholdMs: 250\n"
        "setParameter:\n"
        "  cursorTimeoutMillis: 123000\n"
    )
    proc = subprocess.Popen([str(binary_path()), "-f", str(conf), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        client = MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true",
                             serverSelectionTimeoutMS=10_000)
        assert client.admin.command("ping")["ok"] == 1
        params = client.admin.command("getParameter", 1, cursorTimeoutMillis=1)
        assert params["cursorTimeoutMillis"] == 123000
        assert client.admin.command("profile", -1)["slowms"] == 250
        parsed = client.admin.command("getCmdLineOpts")["parsed"]
        # As mongod's: the file's options under its own names, and the file's path.
        assert parsed["config"] == str(conf)
        assert parsed["operationProfiling"] == {"slowOpThresholdMs": 250}
        assert parsed["net"]["port"] == port and parsed["storage"]["dbPath"] == str(dbpath)
        assert parsed["net"]["unixDomainSocket"]["enabled"] is False
        assert parsed["systemLog"] == {"quiet": True}
        assert parsed["setParameter"]["cursorTimeoutMillis"] == "123000"
        client.close()
        assert (dbpath / "store").exists(), "the file's dbPath holds the data"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert b"ignoring storage.engine" in out


def test_the_command_line_overrides_the_file(tmp_path):
    conf = tmp_path / "mongod.conf"
    conf.write_text("operationProfiling:\n  slowOpThresholdMs: 250\n")
    srv = TailstreamServer(tmp_path / "db", extra_args=["--config", str(conf), "--slowms", "40"])
    srv.start()
    try:
        with srv.client() as c:
            assert c.admin.command("profile", -1)["slowms"] == 40
    finally:
        srv.stop()


def test_an_unknown_setting_stops_the_start(tmp_path):
    conf = tmp_path / "mongod.conf"
    conf.write_text("net:\n  prot: 27017\n")
    p = subprocess.run([str(binary_path()), "--config", str(conf), "--dbpath", str(tmp_path / "db")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "Unrecognized option: net.prot" in p.stderr
    missing = subprocess.run([str(binary_path()), "--config", str(tmp_path / "nope.conf")],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "nope.conf" in missing.stderr

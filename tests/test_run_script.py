"""scripts/run.sh as the README shows it: the user's arguments replace the script's
defaults (the server refuses an option given twice, as mongod does).

The script builds before it serves; the build is up to date when the suite runs
(scripts/test.sh builds first), so it only checks. The script is pointed at the target
directory of the binary under test."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pymongo import MongoClient

from conftest import binary_path, free_port

ROOT = Path(__file__).resolve().parent.parent
RUN_SCRIPT = ROOT / "scripts" / "run.sh"


def ping_or_exit(proc, port, timeout=90.0):
    """Waits until the server answers on `port`, failing if the script exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"run.sh exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            with MongoClient(
                f"mongodb://127.0.0.1:{port}/?directConnection=true",
                serverSelectionTimeoutMS=500,
            ) as c:
                return c.admin.command("getCmdLineOpts")
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.2)
    pytest.fail(f"run.sh did not start a server on port {port} within {timeout}s")


@pytest.mark.parametrize("spelling", ["separate", "equals"])
def test_user_arguments_replace_the_script_defaults(tmp_path, spelling):
    if shutil.which("cargo") is None:
        pytest.skip("run.sh builds with cargo, which is not on PATH")
    port = free_port()
    dbpath = tmp_path / "db"
    if spelling == "separate":
        args = ["--port", str(port), "--dbpath", str(dbpath)]
    else:
        args = [f"--port={port}", f"--dbpath={dbpath}"]
    env = dict(os.environ, CARGO_TARGET_DIR=str(binary_path().parent.parent))
    proc = subprocess.Popen(
        ["bash", str(RUN_SCRIPT), *args, "--quiet"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        opts = ping_or_exit(proc, port)
        assert opts["parsed"]["net"]["port"] == port
        assert opts["parsed"]["storage"]["dbPath"] == str(dbpath)
        assert dbpath.is_dir()
        # The script added no --dbpath or --port of its own.
        argv = opts["argv"]
        assert sum(a == "--dbpath" or a.startswith("--dbpath=") for a in argv) == 1
        assert sum(a == "--port" or a.startswith("--port=") for a in argv) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stdout.close()

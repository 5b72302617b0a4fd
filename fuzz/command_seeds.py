"""The `command` fuzz target's seeds (fuzz/seeds/command/), from the commands the
project's own Python tests send: a pytest plugin that records, through pymongo's command
monitoring, each test's commands of the target's list (their session and cluster-time
fields left out: the target runs them on one connection against its own database), and
writes them in inputs of up to 8 consecutive commands, as the target reads them (BSON
documents one after another). The same plugin records pymongo's own suite run against
the server (its CRUD spec tests, change streams, collation). Committed; run again when
the tests change:

    rm -rf fuzz/seeds/command && cd tests && PYTHONPATH=../fuzz \\
        TAILSTREAM_BIN=... python -m pytest -q -p command_seeds test_query.py ...
    PYTHONPATH=$PWD/fuzz bash conformance/run.sh --sync-only --no-report -p command_seeds \\
        --module-filter test/test_crud_unified.py,test/test_change_stream.py,test/test_collation.py

(The 2026-11-27 seeds: 982 inputs from 25 of tests/' files, 479 from pymongo 4.17.0.)
"""

import hashlib
import re
from pathlib import Path

import bson
from pymongo import monitoring

OUT = Path(__file__).parent / "seeds" / "command"
# The target's COMMANDS (fuzz_targets/command.rs).
COMMANDS = {
    "insert", "find", "update", "delete", "findAndModify", "aggregate", "count",
    "distinct", "createIndexes", "dropIndexes", "listIndexes", "create", "collMod",
    "drop", "listCollections", "validate", "explain", "getMore", "killCursors",
    "mapReduce", "dbStats", "collStats",
}
LEFT_OUT = {
    "lsid", "$clusterTime", "$db", "$readPreference", "txnNumber", "autocommit",
    "startTransaction", "readConcern", "writeConcern",
}
COMMANDS_PER_INPUT = 8
MAX_INPUT_BYTES = 4096
INPUTS_PER_TEST = 2


class Recorder(monitoring.CommandListener):
    def __init__(self):
        self.commands = []

    def started(self, event):
        name = next(iter(event.command), None)
        if name in COMMANDS:
            cmd = {k: v for k, v in event.command.items() if k not in LEFT_OUT}
            encoded = bson.encode(cmd)
            if len(encoded) <= MAX_INPUT_BYTES:
                self.commands.append(encoded)

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass

    def flush(self, test_name):
        inputs, current = [], []
        for cmd in self.commands:
            if current and (len(current) == COMMANDS_PER_INPUT
                            or sum(map(len, current)) + len(cmd) > MAX_INPUT_BYTES):
                inputs.append(b"".join(current))
                current = []
            current.append(cmd)
        if current:
            inputs.append(b"".join(current))
        self.commands = []
        OUT.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_]", "_", test_name)[:60]
        for n, data in enumerate(inputs[:INPUTS_PER_TEST]):
            digest = hashlib.sha1(data).hexdigest()[:10]
            (OUT / f"{slug}_{n}_{digest}").write_bytes(data)


RECORDER = Recorder()
monitoring.register(RECORDER)


def pytest_runtest_setup(item):
    RECORDER.commands = []


def pytest_runtest_teardown(item):
    RECORDER.flush(item.name)

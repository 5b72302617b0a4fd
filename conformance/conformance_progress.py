"""pytest plugin used by conformance/run.sh (loaded with `-p conformance_progress`).

It only observes: it records which tests pytest selected, which one is running
and which have finished, into $CONFORMANCE_PROGRESS_DIR, so that run.sh can tell
when pytest itself died part-way (an INTERNALERROR, a crash) and resume with the
tests that did not run, and so that the report can count tests that never ran.
"""

from __future__ import annotations

import os

_DIR = os.environ.get("CONFORMANCE_PROGRESS_DIR")


def _path(name: str) -> str:
    return os.path.join(_DIR, name)  # type: ignore[arg-type]


def pytest_collection_finish(session):
    if not _DIR:
        return
    # The first attempt's selection is the plan; a resumed attempt selects a subset.
    planned = _path("planned.txt")
    if not os.path.exists(planned):
        with open(planned, "w") as f:
            for item in session.items:
                f.write(item.nodeid + "\n")


def pytest_runtest_logstart(nodeid, location):
    if _DIR:
        with open(_path("current.txt"), "w") as f:
            f.write(nodeid + "\n")


def pytest_runtest_logfinish(nodeid, location):
    if _DIR:
        with open(_path("done.txt"), "a") as f:
            f.write(nodeid + "\n")

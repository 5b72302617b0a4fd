"""Crash cycles, the CI version of issue 32's campaign (`bench/crash_cycles.sh` runs 100
or more): a mixed workload, kill -9 at a random moment, restart, audit. See
tests/crash_campaign.py for the workload and what the audit counts."""

import os

from crash_campaign import run_campaign

CYCLES = int(os.environ.get("TAILSTREAM_CRASH_CYCLES", "3"))


def test_kill_9_cycles_lose_nothing_acknowledged_and_tear_nothing(fresh_server):
    server = fresh_server(oplog_size_mb=1024)
    lines = []
    totals = run_campaign(server, CYCLES, seed=32, report=lines.append)
    assert totals["cycles"] == CYCLES
    assert totals["acked_writes"] > 0, "the workload ran"
    assert totals["stream_events"] > 0, "the stream resumed and was compared"
    violations = {k: totals[k] for k in ("lost", "torn", "oplog", "invalid", "stream", "report")}
    assert violations == dict.fromkeys(violations, 0), "\n".join(lines)


def test_a_wal_torn_after_the_kill_loses_nothing_acknowledged_and_is_reported(fresh_server):
    """Every cycle tears the WAL's end among the records written after the last
    durable acknowledgement and the last event received: nothing acknowledged as
    durable is lost, nothing is half-applied, and the server's log says what recovery
    dropped (the bytes the storage crate's own reader finds after the last whole record)."""
    server = fresh_server(oplog_size_mb=1024)
    lines = []
    totals = run_campaign(server, 3, seed=33, report=lines.append, torn_share=1.0)
    assert totals["torn_cycles"] >= 2, "\n".join(lines)
    violations = {k: totals[k] for k in ("lost", "torn", "oplog", "invalid", "stream", "report")}
    assert violations == dict.fromkeys(violations, 0), "\n".join(lines)

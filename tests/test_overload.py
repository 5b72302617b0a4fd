"""Overload, the CI version of issue 32's campaign (`bench/overload.sh` runs 1,000
connections and 10,000 cursors): cursors that are never read hold nobody up, idle
cursors time out at `cursorTimeoutMillis`, connections opened in a loop leave nothing
behind, and oversized input gets a clean answer while the server serves everyone else.
See tests/overload_campaign.py."""

from conftest import binary_path
from overload_campaign import run

SIZES = dict(connections=100, streams=1000, readers=20, collections=10, fast=2, rate=200,
             seconds=2.0, timeout_ms=2000, churn_count=300, slow=20, bus_kib=16)


def test_overload_leaves_producers_consumers_and_the_server_unharmed():
    f = run(str(binary_path()), log=lambda m: None, **SIZES)
    assert f["server_alive"]
    for phase in ("baseline", "load"):
        acks, events, inserted, received = f[phase]
        assert inserted == SIZES["rate"] * SIZES["seconds"], phase
        # Every fast consumer saw every insert, with the idle cursors open or not.
        assert received == inserted * SIZES["fast"], phase
    assert f["open_total"] >= f["open_base"] + SIZES["streams"]
    assert f["readers_events"] > 0, "the readers' streams delivered"
    # The bus: the fast tailable reader got every document; every slow one fell a whole
    # collection behind and was told so (CappedPositionLost), nothing else.
    acks, fast, inserted, got, outcomes, slow_read = f["bus"]
    assert got == inserted == SIZES["rate"] * SIZES["seconds"], (got, inserted)
    assert outcomes == {"lost": SIZES["slow"], "read on": 0}, outcomes
    assert slow_read > 0, "the slow readers read before falling behind"
    # Idle past cursorTimeoutMillis: every cursor the campaign left was closed.
    assert f["open_after_timeout"] <= f["open_base"]
    assert f["timed_out"] >= SIZES["streams"]
    # The raw connections, and the churn's, are gone (the client's own pool may have
    # grown by a connection or two).
    assert f["connections_after_close"] <= f["connections_base"] + 2
    assert f["connections_after_churn"] <= f["connections_base"] + 2
    answers = {what: (answer, alive, reply) for what, answer, alive, reply in f["bad_inputs"]}
    assert all(alive for _, alive, _ in answers.values()), answers
    by_start = {what.split(" (")[0]: (answer, reply) for what, (answer, _, reply) in answers.items()}
    big = next(v for k, v in by_start.items() if k.startswith("one insert message"))
    assert big[0] == "ok, n = 3", big
    assert by_start["a batch of 100,000 inserts"][0] == "ok, n = 100000"
    for refused in ("a batch of 100,001 inserts", "a 17 MB document"):
        answer, reply = by_start[refused]
        assert reply is not None, (refused, "answered, the connection kept")
        assert reply.get("ok") == 0 or reply.get("writeErrors"), (refused, reply)
    # Not BSON mongod accepts (nested past 200, a message past maxMessageSizeBytes):
    # the connection is closed, as mongod closes it ("bad object in message").
    assert by_start["a document nested 1,000 deep"][1] is None
    past = next(v for k, v in by_start.items() if k.startswith("a message of"))
    assert past[1] is None, past

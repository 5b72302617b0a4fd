"""What the command registry (crates/server/src/commands/registry.rs) decides where
the lists it replaced disagreed: every fact about a command belongs to the command,
as in mongod."""

import pytest
from pymongo.errors import OperationFailure


@pytest.mark.parametrize("fields", [
    {"apiVersion": "1", "apiStrict": True},  # was 323 APIStrictError
    {"apiVersion": "2"},  # was 322 APIVersionError
    {"readConcern": {"level": "snapshot"}},  # was 72 InvalidOptions
    {"readConcern": {"level": "nonsense"}},  # was 2 BadValue
])
def test_an_unknown_command_is_not_found_before_any_other_check(db, fields):
    """mongod looks the command up before it parses anything else."""
    with pytest.raises(OperationFailure) as exc:
        db.command({"frobnicate": 1, **fields})
    assert exc.value.code == 59
    assert exc.value.details["errmsg"] == "no such command: 'frobnicate'"


@pytest.mark.parametrize("name", ["frobnicate", "bulkWrite"])
def test_an_unknown_command_in_a_transaction_is_not_found(client, db, name):
    # Before, frobnicate was refused as not allowed in a transaction (263), and
    # bulkWrite, on that list but not a command here, started the transaction.
    with client.start_session() as s:
        s.start_transaction()
        with pytest.raises(OperationFailure) as exc:
            db.command({name: 1}, session=s)
        assert exc.value.code == 59
        s.abort_transaction()


@pytest.mark.parametrize("alias, name, fields", [
    ("findandmodify", "findAndModify", {"query": {}, "update": {"$set": {"a": 1}}}),
    ("deleteIndexes", "dropIndexes", {"index": "*"}),
])
def test_aliases_are_in_api_version_1_as_their_commands(db, alias, name, fields):
    db.c.insert_one({"_id": 1})
    for spelling in (name, alias):
        reply = db.command({spelling: "c", **fields, "apiVersion": "1", "apiStrict": True})
        assert reply["ok"] == 1, spelling


@pytest.mark.parametrize("alias, name, fields", [
    ("findandmodify", "findAndModify", {"query": {}, "update": {"$nonsense": {"a": 1}}}),
    ("deleteIndexes", "dropIndexes", {"index": "no_such_index"}),
])
def test_a_failed_alias_reports_an_unsatisfiable_write_concern(db, alias, name, fields):
    """mongod waits for the write concern of a failed command, whichever name it ran
    as: a w it cannot satisfy comes back next to the error."""
    db.c.insert_one({"_id": 1})
    replies = [
        db.command({spelling: "c", **fields, "writeConcern": {"w": 2, "wtimeout": 1}}, check=False)
        for spelling in (name, alias)
    ]
    for reply in replies:
        assert reply["ok"] == 0
        assert reply["writeConcernError"]["code"] == 100
    assert replies[0]["code"] == replies[1]["code"]


# listCommands said these were admin-only, and mongod's adminOnly says so too, but
# they ran on any database; getFreeMonitoringStatus is admin-only in mongod.
NOW_ADMIN_ONLY = [
    "appendOplogNote",
    "getCmdLineOpts",
    "getDefaultRWConcern",
    "getFreeMonitoringStatus",
    "getLog",
    "getParameter",
    "listDatabases",
    "setParameter",
]


@pytest.mark.parametrize("name", NOW_ADMIN_ONLY)
def test_admin_only_commands_run_only_on_admin(client, name):
    with pytest.raises(OperationFailure) as exc:
        client.test.command(name)
    assert exc.value.code == 13
    assert exc.value.details["codeName"] == "Unauthorized"
    assert exc.value.details["errmsg"] == f"{name} may only be run against the admin database."


def test_admin_only_commands_still_run_on_admin(client):
    admin = client.admin
    assert admin.command("getCmdLineOpts")["ok"] == 1
    assert admin.command("getDefaultRWConcern")["ok"] == 1
    assert admin.command("getFreeMonitoringStatus")["state"] == "disabled"
    assert admin.command("getLog", "global")["ok"] == 1
    assert admin.command("getParameter", "*")["ok"] == 1
    assert admin.command("listDatabases")["ok"] == 1
    assert admin.command("appendOplogNote", data={"note": "registry test"})["ok"] == 1


def test_list_commands_lists_every_command_with_mongods_admin_only(client):
    commands = client.admin.command("listCommands")["commands"]
    for name in NOW_ADMIN_ONLY + ["currentOp", "killOp"]:
        assert commands[name]["adminOnly"] is True, name
    for name in ["logout", "saslStart", "saslContinue", "authenticate"]:
        assert commands[name]["adminOnly"] is False, name
    # hostInfo is not admin-only in mongod, and runs anywhere.
    assert commands["hostInfo"]["adminOnly"] is False
    assert client.test.command("hostInfo")["ok"] == 1
    # Aliases are not listed, their commands are.
    assert "findAndModify" in commands and "findandmodify" not in commands
    assert list(commands) == sorted(commands)


def test_list_commands_lists_test_commands_only_when_enabled(client, fresh_server):
    assert "configureFailPoint" in client.admin.command("listCommands")["commands"]
    srv = fresh_server(extra_args=["--setParameter", "enableTestCommands=0"])
    with srv.client() as c:
        assert "configureFailPoint" not in c.admin.command("listCommands")["commands"]

"""Views: create/collMod/drop, listCollections, reads through views (find, aggregate,
count, distinct, $lookup), the commands a view refuses, durability, the oplog and
change-stream events of view DDL."""


import pytest
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from conftest import next_event


def names_and_types(db, **kwargs):
    return {c["name"]: c["type"] for c in db.list_collections(**kwargs)}


@pytest.fixture
def src(db):
    db.src.insert_many([{"_id": i, "g": i % 3, "v": i * 10} for i in range(10)])
    db.create_collection("v1", viewOn="src", pipeline=[{"$match": {"g": 1}}])
    db.create_collection("v2", viewOn="v1", pipeline=[{"$project": {"v": 1}}])
    return db


def ids(docs):
    return [d["_id"] for d in docs]


class TestCreateAndList:
    def test_list_collections_reports_views(self, src):
        infos = {c["name"]: c for c in src.list_collections()}
        v1 = infos["v1"]
        assert v1 == {
            "name": "v1",
            "type": "view",
            "options": {"viewOn": "src", "pipeline": [{"$match": {"g": 1}}]},
            "info": {"readOnly": True},
        }
        assert "idIndex" not in v1
        # mongod keeps view definitions in system.views.
        assert infos["system.views"]["type"] == "collection"
        assert names_and_types(src, filter={"type": "view"}) == {"v1": "view", "v2": "view"}
        assert {c["name"]: c["type"] for c in src.list_collections(nameOnly=True)}["v2"] == "view"
        definitions = sorted(src["system.views"].find(), key=lambda d: d["_id"])
        assert definitions[0] == {
            "_id": f"{src.name}.v1",
            "viewOn": "src",
            "pipeline": [{"$match": {"g": 1}}],
        }

    def test_create_view_helper_and_view_on_missing_collection(self, db):
        db.command("create", "later", viewOn="nosuch", pipeline=[])
        assert list(db.later.find()) == []
        assert db.later.count_documents({}) == 0
        db.nosuch.insert_one({"_id": 1})
        assert ids(db.later.find()) == [1]

    def test_same_definition_again_is_fine_other_is_namespace_exists(self, src):
        assert src.command("create", "v1", viewOn="src", pipeline=[{"$match": {"g": 1}}])["ok"] == 1
        with pytest.raises(OperationFailure) as e:
            src.command("create", "v1", viewOn="src", pipeline=[])
        assert (e.value.code, e.value.details["errmsg"]) == (
            48, f"A view already exists. NS: {src.name}.v1")
        with pytest.raises(OperationFailure) as e:
            src.command("create", "src", viewOn="v1")
        assert (e.value.code, e.value.details["errmsg"]) == (
            48, f"Collection {src.name}.src already exists.")
        with pytest.raises(OperationFailure) as e:
            src.command("create", "v1")
        assert e.value.code == 48

    @pytest.mark.parametrize("options,code,message", [
        ({"pipeline": []}, 72, "'pipeline' requires 'viewOn' to also be specified"),
        ({"viewOn": ""}, 2, "'viewOn' cannot be empty"),
        ({"viewOn": 5}, 14, "BSON field 'create.viewOn' is the wrong type 'int', expected type 'string'"),
        ({"viewOn": "src", "pipeline": {"$match": {}}}, 14,
         "BSON field 'create.pipeline' is the wrong type 'object', expected type 'array'"),
        ({"viewOn": "src", "pipeline": [{"$nope": 1}]}, 40324, "Unrecognized pipeline stage name: '$nope'"),
        ({"viewOn": "src", "pipeline": [{"$out": "x"}]}, 167,
         "Invalid pipeline for view {db}.bad :: caused by :: The aggregation stage $out in location 0 "
         "of the pipeline cannot be used in the view definition of {db}.bad because it writes to disk"),
        ({"viewOn": "src", "pipeline": [{"$changeStream": {}}]}, 167,
         "Invalid pipeline for view {db}.bad :: caused by :: $changeStream cannot be used in a view definition"),
        ({"viewOn": "bad"}, 5, "View cycle detected: {db}.bad => {db}.bad => {db}.bad"),
        ({"viewOn": "src", "capped": True, "size": 100}, 72, "option not supported on a view: capped"),
    ])
    def test_bad_definitions(self, db, options, code, message):
        with pytest.raises(OperationFailure) as e:
            db.command("create", "bad", **options)
        assert e.value.code == code
        assert e.value.details["errmsg"] == message.format(db=db.name)
        assert "bad" not in db.list_collection_names()

    def test_cycles_and_depth(self, src):
        with pytest.raises(OperationFailure) as e:
            src.command("collMod", "v1", viewOn="v2", pipeline=[])
        assert e.value.code == 5
        assert e.value.details["errmsg"].startswith("View cycle detected: ")
        # A chain of 20 views is the longest mongod stores; it reads 19 deep.
        src.create_collection("c0", viewOn="src")
        for i in range(1, 20):
            src.create_collection(f"c{i}", viewOn=f"c{i - 1}")
        with pytest.raises(OperationFailure) as e:
            src.create_collection("c20", viewOn="c19")
        assert e.value.code == 165
        assert src.c18.count_documents({}) == 10
        with pytest.raises(OperationFailure) as e:
            src.c19.count_documents({})
        assert e.value.code == 165


class TestReads:
    def test_find_applies_filter_sort_skip_limit_projection_after_the_view(self, src):
        assert ids(src.v1.find()) == [1, 4, 7]
        got = list(src.v1.find({"v": {"$gt": 10}}, {"v": 1, "_id": 0}).sort("v", -1).skip(1).limit(5))
        assert got == [{"v": 40}]
        assert src.v2.find_one({"_id": 4}) == {"_id": 4, "v": 40}
        assert ids(src.v1.find(sort=[("$natural", -1)])) == [7, 4, 1]

    def test_cursor_and_get_more_on_a_view(self, db):
        db.big.insert_many([{"_id": i} for i in range(250)])
        db.create_collection("bigv", viewOn="big", pipeline=[{"$match": {"_id": {"$gte": 50}}}])
        reply = db.command("find", "bigv", batchSize=10)
        assert reply["cursor"]["ns"] == f"{db.name}.bigv"
        assert len(reply["cursor"]["firstBatch"]) == 10 and reply["cursor"]["id"] != 0
        assert ids(db.bigv.find(batch_size=7)) == list(range(50, 250))
        assert len(list(db.bigv.aggregate([{"$sort": {"_id": -1}}], batchSize=3))) == 200

    def test_aggregate_count_distinct_and_estimated_count(self, src):
        got = list(src.v2.aggregate([{"$group": {"_id": None, "s": {"$sum": "$v"}}}]))
        assert got == [{"_id": None, "s": 120}]
        assert src.v1.count_documents({"v": {"$gte": 40}}) == 2
        assert src.command("count", "v1", skip=1, limit=1)["n"] == 1
        assert src.v1.estimated_document_count() == 3
        assert sorted(src.v1.distinct("v")) == [10, 40, 70]
        assert src.v2.distinct("g") == []

    def test_views_in_lookup_and_union_with(self, src):
        src.other.insert_many([{"_id": i, "g": i} for i in range(3)])
        got = list(src.other.aggregate([
            {"$lookup": {"from": "v1", "localField": "g", "foreignField": "g", "as": "m"}},
            {"$project": {"n": {"$size": "$m"}}}, {"$sort": {"_id": 1}},
        ]))
        assert [d["n"] for d in got] == [0, 3, 0]
        assert list(src.other.aggregate([{"$unionWith": "v2"}, {"$count": "n"}])) == [{"n": 6}]

    def test_view_read_in_a_transaction(self, client, src):
        with client.start_session() as s, s.start_transaction():
            src.src.insert_one({"_id": 100, "g": 1, "v": 1000}, session=s)
            assert ids(src.v1.find({}, session=s)) == [1, 4, 7, 100]
            assert sorted(src.v1.distinct("v", session=s)) == [10, 40, 70, 1000]
        assert ids(src.v1.find()) == [1, 4, 7, 100]

    def test_find_options_aggregation_cannot_run(self, src):
        for kwargs, code in [({"tailable": True}, 168), ({"min": {"_id": 1}}, 168),
                             ({"noCursorTimeout": True}, 168), ({"singleBatch": True}, 168)]:
            with pytest.raises(OperationFailure) as e:
                src.command("find", "v1", **kwargs)
            assert e.value.code == code, kwargs


class TestRefused:
    def test_writes_are_write_errors_166(self, src):
        refused = f"Namespace {src.name}.v1 is a view, not a collection"
        with pytest.raises(BulkWriteError) as e:
            src.v1.insert_many([{"_id": 100}, {"_id": 101}], ordered=False)
        errors = e.value.details["writeErrors"]
        assert [(x["index"], x["code"], x["errmsg"]) for x in errors] == [
            (0, 166, refused), (1, 166, refused)]
        for op in (lambda: src.v1.update_one({}, {"$set": {"a": 1}}),
                   lambda: src.v1.delete_many({}),
                   lambda: src.v1.replace_one({}, {"a": 1}, upsert=True)):
            with pytest.raises(WriteError) as e:
                op()
            assert e.value.code == 166
        with pytest.raises(OperationFailure) as e:
            src.v1.find_one_and_delete({})
        assert (e.value.code, e.value.details["errmsg"]) == (166, refused)
        assert src.src.count_documents({}) == 10

    def test_collection_commands_are_166(self, src):
        for cmd in [
            {"createIndexes": "v1", "indexes": [{"key": {"v": 1}, "name": "v_1"}]},
            {"listIndexes": "v1"},
            {"dropIndexes": "v1", "index": "*"},
            {"collStats": "v1"},
            {"validate": "v1"},
            {"renameCollection": f"{src.name}.v1", "to": f"{src.name}.v9"},
            {"convertToCapped": "v1", "size": 4096},
            {"aggregate": "v1", "pipeline": [{"$collStats": {"count": {}}}], "cursor": {}},
            {"aggregate": "src", "pipeline": [{"$out": "v1"}], "cursor": {}},
        ]:
            target = src.client.admin if "renameCollection" in cmd else src
            with pytest.raises(OperationFailure) as e:
                target.command(cmd)
            assert e.value.code == 166, cmd
        with pytest.raises(OperationFailure) as e:
            src.client.admin.command("renameCollection", f"{src.name}.src", to=f"{src.name}.v1",
                                     dropTarget=True)
        assert (e.value.code, e.value.details["errmsg"]) == (
            48, f"a view already exists with that name: {src.name}.v1")
        with pytest.raises(OperationFailure) as e:
            src.v1.watch()
        assert e.value.code == 166
        # Definitions change through create/collMod/drop only.
        with pytest.raises(WriteError):
            src["system.views"].insert_one({"_id": f"{src.name}.x", "viewOn": "src", "pipeline": []})
        assert ids(src.v1.find()) == [1, 4, 7]


class TestChange:
    def test_coll_mod_redefines_a_view(self, src):
        src.command("collMod", "v1", pipeline=[{"$match": {"g": 2}}])
        assert ids(src.v1.find()) == [2, 5, 8]
        assert ids(src.v2.find()) == [2, 5, 8]
        src.other.insert_one({"_id": "o"})
        src.command("collMod", "v1", viewOn="other")
        assert ids(src.v1.find()) == []
        opts = {c["name"]: c for c in src.list_collections()}["v1"]["options"]
        assert opts == {"viewOn": "other", "pipeline": [{"$match": {"g": 2}}]}
        for cmd, message in [
            ({"collMod": "v1", "validator": {"a": 1}}, "option not supported on a view: validator"),
            ({"collMod": "src", "viewOn": "other"}, "option only supported on a view: viewOn"),
            ({"collMod": "src", "viewOn": "other", "pipeline": []}, "option only supported on a view: pipeline"),
        ]:
            with pytest.raises(OperationFailure) as e:
                src.command(cmd)
            assert (e.value.code, e.value.details["errmsg"]) == (72, message)

    def test_drop_view_and_drop_database(self, client, src):
        reply = src.command("drop", "v2")
        assert reply["ns"] == f"{src.name}.v2" and "nIndexesWas" not in reply
        assert "v2" not in src.list_collection_names()
        assert src.command("dbStats")["views"] == 1
        client.drop_database(src.name)
        assert src.list_collection_names() == []
        src.create_collection("v1", viewOn="src")
        assert list(src.v1.find()) == []


class TestDurableAndLogged:
    def test_views_survive_restart(self, fresh_server):
        srv = fresh_server()
        with srv.client() as c:
            c.t.src.insert_many([{"_id": i, "g": i % 2} for i in range(6)])
            c.t.create_collection("odd", viewOn="src", pipeline=[{"$match": {"g": 1}}])
            c.t.create_collection("oddish", viewOn="odd")
            c.t.command("collMod", "oddish", pipeline=[{"$match": {"_id": {"$gt": 1}}}])
        srv.restart()
        with srv.client() as c:
            assert names_and_types(c.t, filter={"type": "view"}) == {"odd": "view", "oddish": "view"}
            assert ids(c.t.oddish.find()) == [3, 5]
            with pytest.raises(OperationFailure) as e:
                c.t.odd.insert_one({})
            assert e.value.code == 166

    def test_oplog_shows_system_views_writes(self, client, db):
        db.create_collection("v", viewOn="base", pipeline=[{"$match": {"a": 1}}])
        db.command("collMod", "v", pipeline=[])
        db.drop_collection("v")
        entries = list(client.local["oplog.rs"].find(
            {"$or": [{"ns": f"{db.name}.system.views"}, {"ns": f"{db.name}.$cmd"}]}).sort("$natural", 1))
        kinds = [(e["op"], e["ns"].split(".", 1)[1]) for e in entries]
        assert kinds == [("c", "$cmd"), ("i", "system.views"), ("u", "system.views"), ("d", "system.views")]
        assert entries[0]["o"]["create"] == "system.views"
        assert entries[1]["o"] == {"_id": f"{db.name}.v", "viewOn": "base", "pipeline": [{"$match": {"a": 1}}]}
        assert entries[2]["o"] == {"_id": f"{db.name}.v", "viewOn": "base", "pipeline": []}
        assert entries[3]["o"] == {"_id": f"{db.name}.v"}


class TestChangeStreams:
    def test_view_ddl_events_with_expanded_events(self, db):
        pipeline = [{"$match": {"a": 2}}, {"$project": {"a": 1}}]
        with db.watch(show_expanded_events=True) as s:
            db.create_collection("base")
            db.create_collection("v", viewOn="base", pipeline=pipeline)
            db.command("collMod", "v", pipeline=[{"$match": {"a": 1}}])
            db.drop_collection("v")
            db.base.insert_one({"_id": 1})
            evs = [next_event(s) for _ in range(5)]
        assert [e["operationType"] for e in evs] == ["create", "create", "modify", "drop", "insert"]
        create, modify, drop = evs[1], evs[2], evs[3]
        assert create["ns"] == {"db": db.name, "coll": "v"}
        assert create["operationDescription"] == {"viewOn": "base", "pipeline": pipeline}
        assert "collectionUUID" not in create and "collectionUUID" in evs[0]
        assert modify["operationDescription"] == {"viewOn": "base", "pipeline": [{"$match": {"a": 1}}]}
        assert drop["ns"] == {"db": db.name, "coll": "v"} and "operationDescription" not in drop
        # Resuming after the view's create event gives the events after it.
        with db.watch(show_expanded_events=True, resume_after=create["_id"]) as s:
            assert next_event(s)["operationType"] == "modify"

    def test_view_events_need_expanded_events_and_a_database_stream(self, db):
        db.create_collection("base")
        with db.watch() as s, db.base.watch(show_expanded_events=True) as cs, \
                db.watch([{"$match": {"operationType": "create"}}], show_expanded_events=True) as fs:
            db.create_collection("v", viewOn="base")
            db.base.insert_one({"_id": 1})
            assert next_event(s)["operationType"] == "insert"
            assert next_event(cs)["operationType"] == "insert"
            assert next_event(fs)["ns"]["coll"] == "v"

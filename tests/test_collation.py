"""Collations: locale-aware string comparison in queries, sorts, aggregation, writes
and indexes, with mongod's validation errors and filled-in specifications."""

import pytest
from pymongo import ASCENDING, DeleteMany, DeleteOne, IndexModel, UpdateMany, UpdateOne
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

CI = {"locale": "en_US", "strength": 2}  # case-insensitive
FR_FILLED = {
    "locale": "fr",
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 3,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}


@pytest.fixture
def pings(coll):
    coll.insert_many(
        [{"_id": 1, "x": 11}, {"_id": 2, "x": "ping"}, {"_id": 3, "x": "pINg"}, {"_id": 4, "x": "pong"}]
    )
    return coll


def ids(cursor):
    return [d["_id"] for d in cursor]


class TestQueries:
    def test_equality_under_collation(self, pings):
        assert ids(pings.find({"x": "PING"}, collation=CI)) == [2, 3]
        assert ids(pings.find({"x": "PING"})) == []
        assert ids(pings.find({"x": {"$ne": "PING"}}, collation=CI)) == [1, 4]
        assert ids(pings.find({"x": {"$in": ["PONG", 5]}}, collation=CI)) == [4]
        assert ids(pings.find({"x": {"$nin": ["PONG", "PING"]}}, collation=CI)) == [1]

    def test_ranges_and_regex(self, coll):
        coll.insert_many([{"_id": i, "s": s} for i, s in enumerate(["a", "B", "c", "D"])])
        # Binary order puts upper case first; the collation interleaves.
        assert ids(coll.find({"s": {"$gt": "b"}})) == [2]
        assert ids(coll.find({"s": {"$gt": "b"}}, collation={"locale": "en"})) == [1, 2, 3]
        assert ids(coll.find({"s": {"$lte": "b"}}, collation=CI)) == [0, 1]
        # $regex is never collation-aware.
        assert ids(coll.find({"s": {"$regex": "^b"}}, collation=CI)) == []

    def test_arrays_and_embedded_documents(self, coll):
        coll.insert_many(
            [
                {"_id": 1, "tags": ["Red", "blue"], "d": {"k": "VALUE", "n": 1}},
                {"_id": 2, "tags": ["green"], "d": {"k": "other", "n": 1}},
            ]
        )
        assert ids(coll.find({"tags": "RED"}, collation=CI)) == [1]
        assert ids(coll.find({"tags": ["red", "BLUE"]}, collation=CI)) == [1]
        assert ids(coll.find({"d": {"k": "value", "n": 1}}, collation=CI)) == [1]
        # Field names are compared exactly.
        assert ids(coll.find({"d": {"K": "value", "n": 1}}, collation=CI)) == []
        assert ids(coll.find({"tags": {"$elemMatch": {"$eq": "GREEN"}}}, collation=CI)) == [2]
        assert ids(coll.find({"$expr": {"$eq": ["$d.k", "value"]}}, collation=CI)) == [1]

    def test_sort(self, coll):
        coll.insert_many([{"_id": i, "s": s} for i, s in enumerate(["b", "A", "a", "B", "c"])])
        binary = [d["s"] for d in coll.find().sort("s", 1)]
        assert binary == ["A", "B", "a", "b", "c"]
        coll_order = [d["s"] for d in coll.find(collation={"locale": "en"}).sort("s", 1)]
        assert coll_order == ["a", "A", "b", "B", "c"]
        upper_first = {"locale": "en", "caseFirst": "upper"}
        assert [d["s"] for d in coll.find(collation=upper_first).sort("s", 1)] == ["A", "a", "B", "b", "c"]
        numeric = {"locale": "en", "numericOrdering": True}
        coll.delete_many({})
        coll.insert_many([{"_id": i, "s": s} for i, s in enumerate(["10", "9", "100"])])
        assert [d["s"] for d in coll.find(collation=numeric).sort("s", 1)] == ["9", "10", "100"]

    def test_count_and_distinct(self, coll):
        coll.insert_many([{"_id": 1, "s": "PING"}, {"_id": 2, "s": "ping"}, {"_id": 3, "s": "pong"}])
        assert coll.count_documents({"s": "ping"}, collation=CI) == 2
        assert coll.count_documents({"s": "ping"}) == 1
        assert coll.distinct("s", collation=CI) == ["PING", "pong"]
        assert sorted(coll.distinct("s")) == ["PING", "ping", "pong"]


class TestAggregation:
    def test_match_group_sort_by_count(self, coll):
        coll.insert_many(
            [{"_id": 1, "s": "PING", "n": 1}, {"_id": 2, "s": "ping", "n": 2}, {"_id": 3, "s": "pong", "n": 4}]
        )
        out = list(coll.aggregate([{"$match": {"s": "PING"}}], collation=CI))
        assert [d["_id"] for d in out] == [1, 2]
        groups = list(
            coll.aggregate(
                [{"$group": {"_id": "$s", "total": {"$sum": "$n"}}}, {"$sort": {"total": 1}}],
                collation=CI,
            )
        )
        assert groups == [{"_id": "PING", "total": 3}, {"_id": "pong", "total": 4}]
        counts = list(coll.aggregate([{"$sortByCount": "$s"}], collation=CI))
        assert counts[0] == {"_id": "PING", "count": 2}
        assert len(list(coll.aggregate([{"$group": {"_id": "$s"}}]))) == 3

    def test_expressions_compare_under_collation(self, coll):
        coll.insert_one({"_id": 1, "a": "x", "arr": ["A", "b"]})
        out = coll.aggregate(
            [
                {
                    "$project": {
                        "eq": {"$eq": ["$a", "X"]},
                        "in": {"$in": ["B", "$arr"]},
                        "set": {"$setUnion": ["$arr", ["a"]]},
                    }
                }
            ],
            collation=CI,
        ).next()
        assert out == {"_id": 1, "eq": True, "in": True, "set": ["A", "b"]}
        plain = coll.aggregate([{"$project": {"eq": {"$eq": ["$a", "X"]}}}]).next()
        assert plain["eq"] is False

    def test_sort_stage(self, coll):
        coll.insert_many([{"_id": i, "s": s} for i, s in enumerate(["b", "A", "a"])])
        out = [d["s"] for d in coll.aggregate([{"$sort": {"s": 1, "_id": 1}}], collation={"locale": "en"})]
        assert out == ["a", "A", "b"]


class TestWrites:
    def test_update_and_delete_statements(self, pings):
        res = pings.update_many({"x": "PING"}, {"$set": {"y": 1}}, collation=CI)
        assert (res.matched_count, res.modified_count) == (2, 2)
        assert pings.update_one({"x": "PONG"}, {"$set": {"y": 2}}).matched_count == 0
        assert pings.delete_one({"x": "PONG"}, collation=CI).deleted_count == 1
        assert pings.delete_many({"x": "PING"}, collation=CI).deleted_count == 2
        assert ids(pings.find()) == [1]

    def test_bulk_write_collation_per_statement(self, pings):
        res = pings.bulk_write(
            [
                UpdateOne({"x": "PING"}, {"$set": {"y": 1}}, collation=CI),
                UpdateMany({"x": "PING"}, {"$set": {"z": 1}}),
                DeleteOne({"x": "PONG"}, collation=CI),
                DeleteMany({"x": "PONG"}),
            ]
        )
        assert (res.matched_count, res.deleted_count) == (1, 1)

    def test_find_and_modify(self, pings):
        before = pings.find_one_and_update(
            {"x": "PING"}, {"$set": {"x": "pong"}}, sort=[("_id", -1)], collation=CI
        )
        assert before["_id"] == 3
        gone = pings.find_one_and_delete({"x": "PONG"}, sort=[("_id", 1)], collation=CI)
        assert gone["_id"] == 3

    def test_update_operators_use_collation(self, coll):
        coll.insert_one({"_id": 1, "tags": ["Red"], "s": "b"})
        coll.update_one({"_id": 1}, {"$addToSet": {"tags": "RED"}}, collation=CI)
        assert coll.find_one()["tags"] == ["Red"]
        coll.update_one({"_id": 1}, {"$pull": {"tags": "red"}}, collation=CI)
        assert coll.find_one()["tags"] == []
        coll.update_one({"_id": 1}, {"$max": {"s": "B"}}, collation={"locale": "en"})
        assert coll.find_one()["s"] == "B"  # "B" sorts after "b" at strength 3

    def test_array_filters_use_collation(self, coll):
        coll.insert_one({"_id": 1, "a": ["x", "X", "y"]})
        coll.update_one(
            {"_id": 1}, {"$set": {"a.$[e]": "z"}}, array_filters=[{"e": "x"}], collation=CI
        )
        assert coll.find_one()["a"] == ["z", "z", "y"]


class TestIndexes:
    def test_listed_with_filled_in_collation(self, coll):
        coll.create_index("s", collation={"locale": "fr"})
        spec = {s["name"]: s for s in coll.list_indexes()}["s_1"]
        assert spec["collation"] == FR_FILLED

    def test_same_keys_different_collations(self, coll):
        coll.create_indexes(
            [
                IndexModel("f", collation=Collation("en_US")),
                IndexModel("f", name="ja", collation=Collation("ja")),
                IndexModel("f", name="plain"),
            ]
        )
        info = coll.index_information()
        assert info["f_1"]["collation"]["locale"] == "en_US"
        assert info["ja"]["collation"]["locale"] == "ja"
        assert "collation" not in info["plain"]
        with pytest.raises(OperationFailure) as e:
            coll.database.command("dropIndexes", coll.name, index={"f": 1})
        assert e.value.code == 181  # AmbiguousIndexKeyPattern
        with pytest.raises(OperationFailure) as e:
            list(coll.find({"f": 1}).hint([("f", 1)]))
        assert e.value.code == 2
        coll.drop_index("f_1")
        assert set(coll.index_information()) == {"_id_", "ja", "plain"}
        # The same key and collation under another name is the same index.
        with pytest.raises(OperationFailure) as e:
            coll.create_index("f", name="ja2", collation={"locale": "ja"})
        assert e.value.code == 85

    def test_unique_under_collation(self, coll):
        coll.create_index("s", unique=True, collation=CI)
        coll.insert_one({"s": "Hello"})
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"s": "HELLO"})
        coll.insert_one({"s": "Hellö"})  # an accent is a secondary difference

    def test_unique_build_fails_on_collation_duplicates(self, coll):
        coll.insert_many([{"s": "a"}, {"s": "A"}])
        with pytest.raises(OperationFailure) as e:
            coll.create_index("s", unique=True, collation=CI)
        assert e.value.code == 11000
        coll.create_index("s", unique=True)

    def test_index_used_only_with_matching_collation(self, coll):
        coll.create_index("s", collation=CI)
        coll.insert_many([{"_id": i, "s": s} for i, s in enumerate(["a", "A", "b", "B"])])
        # Matching collation: the index answers, also for ranges and sorts.
        assert ids(coll.find({"s": "A"}, collation=CI)) == [0, 1]
        assert sorted(ids(coll.find({"s": {"$gte": "B"}}, collation=CI))) == [2, 3]
        assert [d["s"].lower() for d in coll.find(collation=CI).sort("s", 1)] == ["a", "a", "b", "b"]
        ex = coll.find({"s": "A"}, collation=CI).explain()
        assert "IXSCAN" in str(ex["queryPlanner"]["winningPlan"])
        # Another collation (or none) cannot use its string keys: still correct.
        assert ids(coll.find({"s": "A"})) == [1]
        ex = coll.find({"s": "A"}).explain()
        assert "IXSCAN" not in str(ex["queryPlanner"]["winningPlan"])
        assert ids(coll.find({"s": "a"}, collation={"locale": "en"})) == [0]
        # Hinted anyway: the whole index is scanned, the filter still decides.
        assert ids(coll.find({"s": "A"}).hint("s_1")) == [1]
        # Non-string bounds do not depend on the collation.
        coll.insert_one({"_id": 9, "s": 5})
        ex = coll.find({"s": 5}).explain()
        assert "IXSCAN" in str(ex["queryPlanner"]["winningPlan"])
        assert ids(coll.find({"s": 5})) == [9]

    def test_update_keeps_collated_index_consistent(self, coll):
        coll.create_index("s", collation=CI)
        coll.insert_one({"_id": 1, "s": ["a", "A"]})
        coll.update_one({"_id": 1}, {"$set": {"s": "b"}})
        assert ids(coll.find({"s": "B"}, collation=CI)) == [1]
        assert ids(coll.find({"s": "a"}, collation=CI)) == []
        result = coll.database.command("validate", coll.name)
        assert result["valid"], result


class TestCollectionDefault:
    def test_default_collation_applies(self, db):
        coll = db.create_collection("c", collation=CI)
        opts = next(db.list_collections(filter={"name": "c"}))
        assert opts["options"]["collation"]["strength"] == 2
        assert opts["options"]["collation"]["locale"] == "en_US"
        assert opts["idIndex"]["collation"] == opts["options"]["collation"]
        coll.insert_many([{"_id": 1, "s": "ping"}, {"_id": 2, "s": "PING"}])
        assert ids(coll.find({"s": "Ping"})) == [1, 2]
        # The operation's own collation wins; "simple" is the binary comparison.
        assert ids(coll.find({"s": "Ping"}, collation={"locale": "simple"})) == []
        assert coll.count_documents({"s": "PING"}) == 2
        assert coll.update_many({"s": "PING"}, {"$set": {"u": 1}}).modified_count == 2

    def test_id_is_unique_and_found_under_the_default(self, db):
        coll = db.create_collection("c", collation=CI)
        coll.insert_one({"_id": "Key", "n": 1})
        with pytest.raises(DuplicateKeyError) as e:
            coll.insert_one({"_id": "KEY", "n": 2})
        assert e.value.details["keyPattern"] == {"_id": 1}
        assert coll.find_one({"_id": "key"})["n"] == 1
        ex = coll.find({"_id": "key"}).explain()
        assert "IXSCAN" in str(ex["queryPlanner"]["winningPlan"])
        assert coll.find_one({"_id": "key"}, collation={"locale": "simple"}) is None
        coll.insert_many([{"_id": "b"}, {"_id": "A"}, {"_id": 3}])
        assert [d["_id"] for d in coll.find().sort("_id", 1)] == [3, "A", "b", "Key"]
        # The `_id` index is listed once, with the collation; it cannot be dropped.
        assert [i["name"] for i in coll.list_indexes()] == ["_id_"]
        coll.create_index("n")
        coll.drop_indexes()
        assert [i["name"] for i in coll.list_indexes()] == ["_id_"]
        assert coll.delete_one({"_id": "KEY"}).deleted_count == 1
        coll.insert_one({"_id": "kEy"})
        assert db.command("validate", "c")["valid"]
        assert db.command("collStats", "c")["nindexes"] == 1

    def test_new_indexes_inherit(self, db):
        coll = db.create_collection("c", collation={"locale": "fr"})
        coll.create_index("a")
        coll.create_index("b", collation={"locale": "simple"})
        info = coll.index_information()
        assert info["a_1"]["collation"] == FR_FILLED
        assert "collation" not in info["b_1"]
        assert info["_id_"]["collation"] == FR_FILLED

    def test_simple_default_is_no_collation(self, db):
        db.create_collection("c", collation={"locale": "simple"})
        opts = next(db.list_collections(filter={"name": "c"}))
        assert "collation" not in opts["options"]


class TestValidation:
    @pytest.mark.parametrize(
        "spec,code",
        [
            ({"strength": 2}, 40414),
            ({"locale": "en", "bogus": 1}, 40415),
            ({"locale": "xx"}, 2),
            ({"locale": ""}, 2),
            ({"locale": 5}, 14),
            ({"locale": "en", "strength": 9}, 51024),
            ({"locale": "en", "strength": 0}, 2),
            ({"locale": "en", "caseLevel": "yes"}, 14),
            ({"locale": "en", "caseFirst": "sideways"}, 2),
            ({"locale": "en", "alternate": "x"}, 2),
            ({"locale": "en", "maxVariable": "x"}, 2),
            ({"locale": "en", "version": "1.0"}, 161),
            ({"locale": "en", "strength": 1, "backwards": True}, 2),
            ({"locale": "en", "strength": 1, "caseFirst": "upper"}, 2),
        ],
    )
    def test_bad_collations(self, coll, spec, code):
        coll.insert_one({"a": 1})
        for run in (
            lambda: list(coll.find({}, collation=spec)),
            lambda: coll.count_documents({}, collation=spec),
            lambda: list(coll.aggregate([], collation=spec)),
            lambda: coll.update_one({}, {"$set": {"b": 1}}, collation=spec),
            lambda: coll.delete_one({"a": 2}, collation=spec),
            lambda: coll.create_index("x", collation=spec),
        ):
            with pytest.raises(OperationFailure) as e:
                run()
            assert e.value.code == code, (spec, e.value.details)

    def test_messages(self, coll):
        with pytest.raises(OperationFailure) as e:
            list(coll.find({}, collation={"locale": "en_us"}))
        assert e.value.details["errmsg"] == (
            "Field 'locale' is invalid in: { locale: \"en_us\" }. Did you mean 'en_US'?"
        )
        assert e.value.details["codeName"] == "BadValue"
        with pytest.raises(OperationFailure) as e:
            list(coll.find({}, collation={"strength": 1}))
        assert e.value.details["errmsg"] == "BSON field 'collation.locale' is missing but a required field"

    def test_empty_collation(self, db, coll):
        # An operation's empty collation is none given; an index or collection refuses it.
        coll.insert_one({"s": "A"})
        assert coll.count_documents({"s": "A"}, collation={}) == 1
        assert coll.delete_many({"s": "a"}, {}).deleted_count == 0
        with pytest.raises(OperationFailure) as e:
            coll.create_index("s", collation={})
        assert e.value.code == 2
        with pytest.raises(OperationFailure) as e:
            db.create_collection("other", collation={})
        assert e.value.code == 2

    def test_bad_collation_type(self, db, coll):
        with pytest.raises(OperationFailure) as e:
            db.command("find", coll.name, collation="en")
        assert e.value.code == 14
        with pytest.raises(OperationFailure) as e:
            db.command("create", "other", collation={"locale": "nope"})
        assert e.value.code == 2

"""Query operators and BSON comparison semantics, through find()."""

import datetime
import re

import pytest
from bson import Decimal128, Int64, ObjectId, Regex
from pymongo.errors import OperationFailure


def ids(coll, flt, **kw):
    return sorted(d["_id"] for d in coll.find(flt, **kw))


@pytest.fixture
def nums(coll):
    coll.insert_many([
        {"_id": 1, "a": 1},
        {"_id": 2, "a": 2},
        {"_id": 3, "a": 3},
        {"_id": 4, "a": "zzz"},
        {"_id": 5},
        {"_id": 6, "a": None},
        {"_id": 7, "a": [1, 5]},
    ])
    return coll


class TestComparison:
    def test_eq(self, nums):
        assert ids(nums, {"a": 2}) == [2]
        assert ids(nums, {"a": {"$eq": 2}}) == [2]

    def test_eq_matches_array_element(self, nums):
        assert ids(nums, {"a": 5}) == [7]
        assert ids(nums, {"a": 1}) == [1, 7]

    def test_ne_includes_missing_and_null(self, nums):
        assert ids(nums, {"a": {"$ne": 1}}) == [2, 3, 4, 5, 6], "$ne excludes arrays containing 1"

    def test_gt_type_bracketing(self, nums):
        assert ids(nums, {"a": {"$gt": 1}}) == [2, 3, 7], "strings/null must not match a numeric $gt"

    def test_gte_lt_lte(self, nums):
        assert ids(nums, {"a": {"$gte": 2}}) == [2, 3, 7]
        assert ids(nums, {"a": {"$lt": 2}}) == [1, 7]
        assert ids(nums, {"a": {"$lte": 2}}) == [1, 2, 7]
        assert ids(nums, {"a": {"$gt": 1, "$lt": 3}}) == [2, 7], \
            "array [1,5]: 5>1 and 1<3 by different elements still matches"

    def test_string_range(self, nums):
        assert ids(nums, {"a": {"$gt": "a"}}) == [4]

    def test_in_nin(self, nums):
        assert ids(nums, {"a": {"$in": [2, 3, "zzz"]}}) == [2, 3, 4]
        assert ids(nums, {"a": {"$in": [None]}}) == [5, 6]
        assert ids(nums, {"a": {"$nin": [1, 2, 3]}}) == [4, 5, 6]

    def test_in_with_regex(self, coll):
        coll.insert_many([{"_id": 1, "s": "abc"}, {"_id": 2, "s": "xyz"}, {"_id": 3, "s": "ABD"},
                          {"_id": 4, "s": "q"}])
        assert ids(coll, {"s": {"$in": [re.compile("^ab", re.I), "q"]}}) == [1, 3, 4]
        assert ids(coll, {"s": {"$nin": [Regex("^a")]}}) == [2, 3, 4]

    def test_null_matches_missing(self, nums):
        assert ids(nums, {"a": None}) == [5, 6]
        assert ids(nums, {"a": {"$ne": None}}) == [1, 2, 3, 4, 7]

    def test_mixed_numeric_types_equal(self, coll):
        coll.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 1.0}, {"_id": 3, "n": Int64(1)},
                          {"_id": 4, "n": Decimal128("1")}, {"_id": 5, "n": 1.5}, {"_id": 6, "n": "1"}])
        assert ids(coll, {"n": 1}) == [1, 2, 3, 4]
        assert ids(coll, {"n": 1.0}) == [1, 2, 3, 4]
        assert ids(coll, {"n": Int64(1)}) == [1, 2, 3, 4]
        assert ids(coll, {"n": {"$gt": Int64(1)}}) == [5]
        assert ids(coll, {"n": {"$in": [1.0]}}) == [1, 2, 3, 4]

    def test_large_int64_vs_double(self, coll):
        big = 2 ** 53 + 1
        coll.insert_many([{"_id": 1, "n": Int64(big)}, {"_id": 2, "n": float(2 ** 53)}])
        assert ids(coll, {"n": Int64(big)}) == [1], "int64 2^53+1 must not equal double 2^53"
        assert ids(coll, {"n": {"$gt": float(2 ** 53)}}) == [1]


class TestLogical:
    def test_and_or_nor(self, nums):
        assert ids(nums, {"$and": [{"a": {"$gte": 2}}, {"a": {"$lte": 3}}]}) == [2, 3, 7]
        assert ids(nums, {"$or": [{"a": 1}, {"a": "zzz"}]}) == [1, 4, 7]
        assert ids(nums, {"$nor": [{"a": 1}, {"a": "zzz"}]}) == [2, 3, 5, 6]

    def test_not(self, nums):
        assert ids(nums, {"a": {"$not": {"$gt": 2}}}) == [1, 2, 4, 5, 6]
        assert ids(nums, {"a": {"$not": re.compile("^z")}}) == [1, 2, 3, 5, 6, 7]

    def test_implicit_and(self, nums):
        assert ids(nums, {"_id": {"$lt": 3}, "a": {"$gte": 2}}) == [2]


class TestElementOps:
    def test_exists(self, nums):
        assert ids(nums, {"a": {"$exists": True}}) == [1, 2, 3, 4, 6, 7]
        assert ids(nums, {"a": {"$exists": False}}) == [5]

    def test_type(self, coll):
        coll.insert_many([
            {"_id": 1, "v": 1}, {"_id": 2, "v": 1.5}, {"_id": 3, "v": Int64(2)},
            {"_id": 4, "v": "s"}, {"_id": 5, "v": [1, "x"]}, {"_id": 6, "v": {"o": 1}},
            {"_id": 7, "v": None}, {"_id": 8, "v": True}, {"_id": 9, "v": []},
        ])
        assert ids(coll, {"v": {"$type": "string"}}) == [4, 5], "array elements count"
        assert ids(coll, {"v": {"$type": 2}}) == [4, 5]
        assert ids(coll, {"v": {"$type": "int"}}) == [1, 5]
        assert ids(coll, {"v": {"$type": "long"}}) == [3]
        assert ids(coll, {"v": {"$type": "double"}}) == [2]
        assert ids(coll, {"v": {"$type": "number"}}) == [1, 2, 3, 5]
        assert ids(coll, {"v": {"$type": "array"}}) == [5, 9]
        assert ids(coll, {"v": {"$type": "object"}}) == [6]
        assert ids(coll, {"v": {"$type": "null"}}) == [7]
        assert ids(coll, {"v": {"$type": "bool"}}) == [8]
        assert ids(coll, {"v": {"$type": ["bool", "null"]}}) == [7, 8]


class TestEvaluation:
    @pytest.fixture
    def strings(self, coll):
        coll.insert_many([{"_id": 1, "s": "Apple"}, {"_id": 2, "s": "apricot"},
                          {"_id": 3, "s": "banana"}, {"_id": 4, "s": "line1\nAPEX"}, {"_id": 5, "s": 7}])
        return coll

    def test_regex(self, strings):
        assert ids(strings, {"s": {"$regex": "^ap"}}) == [2]
        assert ids(strings, {"s": {"$regex": "^ap", "$options": "i"}}) == [1, 2]
        assert ids(strings, {"s": {"$regex": "^ap", "$options": "im"}}) == [1, 2, 4]
        assert ids(strings, {"s": re.compile("an")}) == [3]
        assert ids(strings, {"s": Regex("^APE", "m")}) == [4]

    def test_regex_extended_and_dotall(self, strings):
        assert ids(strings, {"s": {"$regex": "b a n", "$options": "x"}}) == [3]
        assert ids(strings, {"s": {"$regex": "line1.APEX", "$options": "s"}}) == [4]

    def test_mod(self, coll):
        coll.insert_many([{"_id": i, "n": i} for i in range(10)])
        assert ids(coll, {"n": {"$mod": [3, 1]}}) == [1, 4, 7]

    def test_expr(self, coll):
        coll.insert_many([{"_id": 1, "a": 5, "b": 3}, {"_id": 2, "a": 1, "b": 3}, {"_id": 3, "a": 3, "b": 3}])
        assert ids(coll, {"$expr": {"$gt": ["$a", "$b"]}}) == [1]
        assert ids(coll, {"$expr": {"$eq": [{"$add": ["$a", "$b"]}, 4]}}) == [2]


class TestArrays:
    @pytest.fixture
    def arrs(self, coll):
        coll.insert_many([
            {"_id": 1, "tags": ["a", "b", "c"], "scores": [70, 82, 95]},
            {"_id": 2, "tags": ["a", "c"], "scores": [81, 99]},
            {"_id": 3, "tags": ["b"], "scores": [60]},
            {"_id": 4, "tags": [["a", "b"], "z"], "scores": []},
        ])
        return coll

    def test_all(self, arrs):
        assert ids(arrs, {"tags": {"$all": ["a", "c"]}}) == [1, 2]
        assert ids(arrs, {"tags": {"$all": [["a", "b"]]}}) == [4]

    def test_size(self, arrs):
        assert ids(arrs, {"tags": {"$size": 2}}) == [2, 4]
        assert ids(arrs, {"scores": {"$size": 0}}) == [4]

    def test_elem_match_value(self, arrs):
        assert ids(arrs, {"scores": {"$elemMatch": {"$gt": 80, "$lt": 85}}}) == [1, 2]
        # without $elemMatch the two conditions may be met by different elements
        assert ids(arrs, {"scores": {"$gt": 90, "$lt": 75}}) == [1]

    def test_elem_match_documents(self, coll):
        coll.insert_many([
            {"_id": 1, "items": [{"n": "x", "q": 1}, {"n": "y", "q": 10}]},
            {"_id": 2, "items": [{"n": "x", "q": 10}]},
        ])
        assert ids(coll, {"items": {"$elemMatch": {"n": "x", "q": {"$gt": 5}}}}) == [2]
        assert ids(coll, {"items.n": "x", "items.q": {"$gt": 5}}) == [1, 2]

    def test_whole_array_equality(self, arrs):
        assert ids(arrs, {"tags": ["a", "c"]}) == [2]
        assert ids(arrs, {"tags": ["c", "a"]}) == [], "array equality is order-sensitive"
        assert ids(arrs, {"tags": ["a", "b"]}) == [4], "matches a nested array element"

    def test_dotted_path_through_array_of_subdocs(self, coll):
        coll.insert_many([
            {"_id": 1, "items": [{"name": "x", "sub": {"k": 1}}, {"name": "y", "sub": {"k": 2}}]},
            {"_id": 2, "items": [{"name": "z"}]},
            {"_id": 3, "items": {"name": "x"}},
        ])
        assert ids(coll, {"items.name": "x"}) == [1, 3]
        assert ids(coll, {"items.sub.k": 2}) == [1]
        assert ids(coll, {"items.sub.k": None}) == [2, 3], "null matches when some branch lacks the path"

    def test_numeric_path_component(self, coll):
        coll.insert_many([
            {"_id": 1, "arr": [5, 6], "items": [{"name": "a"}, {"name": "b"}]},
            {"_id": 2, "arr": [6, 5], "items": [{"name": "b"}]},
            {"_id": 3, "arr": {"0": 5}},
        ])
        assert ids(coll, {"arr.0": 5}) == [1, 3]
        assert ids(coll, {"arr.1": 5}) == [2]
        assert ids(coll, {"items.1.name": "b"}) == [1]
        assert ids(coll, {"items.0.name": "b"}) == [2]


class TestSortOrder:
    def test_mixed_type_sort(self, coll):
        oid = ObjectId()
        when = datetime.datetime(2020, 1, 1)
        values = [when, True, "b", 5, {"x": 1}, None, oid, 2.5, "abc", False, Int64(3)]
        coll.insert_many([{"_id": i, "v": v} for i, v in enumerate(values)])
        got = [d["v"] for d in coll.find({}, {"_id": 0}).sort("v", 1)]
        assert got == [None, 2.5, 3, 5, "abc", "b", {"x": 1}, oid, False, True, when]
        got_desc = [d["v"] for d in coll.find({}, {"_id": 0}).sort("v", -1)]
        assert got_desc == list(reversed(got))

    def test_missing_sorts_with_null_before_numbers(self, coll):
        coll.insert_many([{"_id": 1, "v": 1}, {"_id": 2}, {"_id": 3, "v": -5}])
        assert [d["_id"] for d in coll.find().sort("v", 1)] == [2, 3, 1]

    def test_sort_by_array_field(self, coll):
        coll.insert_many([{"_id": 1, "a": [3, 9]}, {"_id": 2, "a": [5]}, {"_id": 3, "a": [1, 10]},
                          {"_id": 4, "a": 4}])
        assert [d["_id"] for d in coll.find().sort("a", 1)] == [3, 1, 4, 2], "ascending uses min element"
        assert [d["_id"] for d in coll.find().sort("a", -1)] == [3, 1, 2, 4], "descending uses max element"

    def test_sort_compound_and_stable_on_id(self, coll):
        coll.insert_many([{"_id": i, "g": i % 2, "n": -i} for i in range(6)])
        got = [d["_id"] for d in coll.find().sort([("g", 1), ("n", 1)])]
        assert got == [4, 2, 0, 5, 3, 1]


class TestErrors:
    def test_unknown_operator(self, coll):
        coll.insert_one({"a": 1})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"a": {"$foo": 1}}))
        assert exc.value.code == 2
        assert "unknown operator: $foo" in str(exc.value)

    def test_unknown_top_level_operator(self, coll):
        coll.insert_one({"a": 1})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"$bar": 1}))
        assert exc.value.code == 2
        assert "unknown top level operator: $bar" in str(exc.value)

    def test_bad_regex(self, coll):
        coll.insert_one({"s": "x"})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"s": {"$regex": "(unclosed"}}))
        assert exc.value.code == 51091

    def test_size_requires_number(self, coll):
        coll.insert_one({"a": [1]})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"a": {"$size": {"$gt": 1}}}))
        assert exc.value.code == 2

    def test_errors_on_empty_collection_too(self, db):
        # query parsing happens even when the collection does not exist
        with pytest.raises(OperationFailure) as exc:
            list(db.no_such_coll.find({"a": {"$foo": 1}}))
        assert exc.value.code == 2


def test_sort_with_a_limit_over_many_documents_is_the_full_sorts_start(coll):
    """A sort no index serves, with a limit (and a skip), keeps only limit + skip
    documents while it reads (a top-k sort), across many of its compactions; what it
    returns is what sorting everything would return, in find and in aggregate."""
    coll.insert_many([{"_id": i, "x": (i * 7919) % 37} for i in range(1000)])
    # Ties broken by _id in the expected order and in the query, so the order is total.
    full = sorted(range(1000), key=lambda i: (-((i * 7919) % 37), i))
    for limit, skip in [(1, 0), (5, 0), (64, 0), (65, 3), (300, 100), (1000, 0), (2000, 10)]:
        found = [d["_id"] for d in coll.find({}).sort([("x", -1), ("_id", 1)]).skip(skip).limit(limit)]
        assert found == full[skip:skip + limit], (limit, skip)
        for pipeline in ([{"$sort": {"x": -1, "_id": 1}}, {"$skip": skip}, {"$limit": limit}],
                         [{"$sort": {"x": -1, "_id": 1}}, {"$limit": skip + limit}, {"$skip": skip}]):
            piped = [d["_id"] for d in coll.aggregate(pipeline)]
            assert piped == full[skip:skip + limit], (limit, skip, pipeline)


def test_a_sort_past_its_memory_limit_spills_to_disk_or_fails_without_disk_use(fresh_server):
    """A sort no index serves and no limit bounds holds at most
    internalQueryMaxBlockingSortMemoryUsageBytes in memory: past it the sorted runs go to
    the data directory's _tmp folder and are merged as the cursor is read (the result is
    the stable sort), or, with allowDiskUse: false, the find fails as mongod's does."""
    srv = fresh_server()
    with srv.client() as c:
        assert c.admin.command("getParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=1)[
            "internalQueryMaxBlockingSortMemoryUsageBytes"] == 100 * 1024 * 1024
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200_000)
        coll = c.t.spill
        pad = "p" * 1000
        coll.insert_many([{"_id": i, "x": (i * 7919) % 37, "pad": pad} for i in range(3000)])
        expected = sorted(range(3000), key=lambda i: -((i * 7919) % 37))  # stable: _id order on ties
        cursor = coll.find({}, {"pad": 0}).sort("x", -1).batch_size(500)
        assert [d["_id"] for d in cursor] == expected
        tmp = srv.dbpath / "_tmp"
        assert tmp.is_dir(), "the runs went to the data directory's _tmp folder"
        assert list(tmp.iterdir()) == [], "the runs' files are unnamed"
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({}).sort("x", -1).allow_disk_use(False))
        assert exc.value.code == 292, exc.value.details
        assert exc.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
        assert "Sort exceeded memory limit of 200000 bytes" in exc.value.details["errmsg"]
        # Under the limit, or bounded by a limit, nothing needs the disk.
        assert len(list(coll.find({"_id": {"$lt": 50}}).sort("x", -1).allow_disk_use(False))) == 50
        assert len(list(coll.find({}).sort("x", -1).limit(10).allow_disk_use(False))) == 10


def test_an_aggregations_sort_past_its_memory_limit_spills_to_disk_or_fails_without_disk_use(fresh_server):
    """mongod's `$sort` stage, as a find's sort: past
    internalQueryMaxBlockingSortMemoryUsageBytes the stages before it run into sorted
    runs on disk, and the stages after it as the cursor is read; with allowDiskUse: false
    the aggregate fails with 292."""
    srv = fresh_server()
    with srv.client() as c:
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200_000)
        coll = c.t.spill
        c.t.other.insert_many([{"_id": k, "name": f"n{k}"} for k in range(37)])
        pad = "p" * 1000
        coll.insert_many([{"_id": i, "x": (i * 7919) % 37, "pad": pad} for i in range(3000)])
        expected = sorted(range(1, 3000), key=lambda i: -((i * 7919) % 37))  # stable: _id order on ties
        pipeline = [{"$match": {"_id": {"$gte": 1}}}, {"$set": {"y": "$x"}}, {"$sort": {"x": -1}},
                    {"$lookup": {"from": "other", "localField": "x", "foreignField": "_id", "as": "o"}},
                    {"$project": {"name": {"$first": "$o.name"}, "x": 1, "y": 1}}]
        got = list(coll.aggregate(pipeline, batchSize=500))
        assert [d["_id"] for d in got] == expected
        assert all(d["name"] == f"n{d['x']}" and d["y"] == d["x"] for d in got)
        assert (srv.dbpath / "_tmp").is_dir(), "the runs went to the data directory's _tmp folder"
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate([{"$sort": {"x": -1}}], allowDiskUse=False))
        assert exc.value.code == 292, exc.value.details
        assert "Sort exceeded memory limit of 200000 bytes" in exc.value.details["errmsg"]
        # Under the limit, nothing needs the disk.
        small = [{"$match": {"_id": {"$lt": 50}}}, {"$sort": {"x": -1}}, {"$project": {"_id": 1}}]
        assert len(list(coll.aggregate(small, allowDiskUse=False))) == 50


def test_a_union_with_gives_its_input_then_its_collection_each_side_spilling(fresh_server):
    """mongod's `$unionWith`: the documents its input gives, then the other collection's
    through its pipeline. Neither side is held whole: a `$sort` before it and one in its
    pipeline each spill past internalQueryMaxBlockingSortMemoryUsageBytes (the profile
    says usedDisk) and fail with 292 under allowDiskUse: false."""
    srv = fresh_server()
    with srv.client() as c:
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200_000)
        pad = "p" * 1000
        c.t.main.insert_many([{"_id": i, "x": (i * 7919) % 37, "pad": pad} for i in range(1500)])
        c.t.side.insert_many([{"_id": 10_000 + i, "x": (i * 104729) % 41, "pad": pad}
                              for i in range(1500)])
        main_order = sorted(range(1500), key=lambda i: -((i * 7919) % 37))  # stable on ties
        side_order = [10_000 + i for i in sorted(range(1500), key=lambda i: (i * 104729) % 41)]
        side_sorted = {"coll": "side", "pipeline": [{"$sort": {"x": 1}}, {"$project": {"pad": 0}}]}
        c.t.command("profile", 2)
        only_side = [{"$match": {"_id": -1}}, {"$unionWith": side_sorted}]
        got = list(c.t.main.aggregate(only_side, comment="only-side", batchSize=200))
        assert [d["_id"] for d in got] == side_order
        both = [{"$sort": {"x": -1}}, {"$unionWith": side_sorted}, {"$project": {"x": 1}}]
        got = list(c.t.main.aggregate(both, batchSize=200))
        assert [d["_id"] for d in got] == main_order + side_order
        assert all(set(d) == {"_id", "x"} for d in got)
        c.t.command("profile", 0)
        entry = c.t["system.profile"].find_one({"command.comment": "only-side"})
        assert entry is not None and entry.get("usedDisk") is True, entry
        for pipeline in (only_side, [{"$sort": {"x": -1}}, {"$unionWith": "side"}]):
            with pytest.raises(OperationFailure) as exc:
                list(c.t.main.aggregate(pipeline, allowDiskUse=False))
            assert exc.value.code == 292, (pipeline, exc.value.details)
            assert "Sort exceeded memory limit of 200000 bytes" in exc.value.details["errmsg"]
        # A $limit after the union: the first side's documents, then the second's, up to it.
        got = list(c.t.main.aggregate([{"$match": {"_id": {"$gte": 1495}}},
                                       {"$unionWith": "side"}, {"$limit": 8}, {"$project": {"_id": 1}}]))
        assert [d["_id"] for d in got] == [1495, 1496, 1497, 1498, 1499, 10_000, 10_001, 10_002]
        # A view or a missing collection on the second side, and a union of a union.
        c.t.create_collection("side_view", viewOn="side", pipeline=[{"$match": {"x": 0}}])
        nested = {"coll": "side_view", "pipeline": [{"$unionWith": "missing"},
                                                    {"$unionWith": {"coll": "main", "pipeline": [
                                                        {"$match": {"_id": 0}}]}}]}
        got = list(c.t.main.aggregate([{"$match": {"_id": 7}}, {"$unionWith": nested},
                                       {"$project": {"_id": 1}}]))
        on_view = [10_000 + i for i in range(1500) if (i * 104729) % 41 == 0]
        assert [d["_id"] for d in got] == [7] + on_view + [0]

def test_a_bucket_auto_sorts_its_input_on_disk_past_its_memory_limit(fresh_server):
    """mongod's `$bucketAuto` sorts its input by `groupBy` through its sorter: past the
    sort memory limit the sorted runs go to disk (the profile says usedDisk) and the
    buckets are the same as sorted in memory; with allowDiskUse: false it fails with 292."""
    srv = fresh_server()
    with srv.client() as c:
        coll = c.t.auto
        pad = "p" * 1000
        coll.insert_many([{"_id": i, "x": (i * 7919) % 997, "pad": pad} for i in range(3000)])
        pipelines = {
            "plain": [{"$bucketAuto": {"groupBy": "$x", "buckets": 7, "output": {
                "n": {"$sum": 1}, "ids": {"$push": "$_id"}, "top": {"$max": "$x"}}}}],
            "granular": [{"$match": {"x": {"$gt": 0}}},
                         {"$bucketAuto": {"groupBy": "$x", "buckets": 5, "granularity": "E12"}},
                         {"$project": {"_id": 1, "count": 1}}],
        }
        in_memory = {name: list(coll.aggregate(p)) for name, p in pipelines.items()}
        assert sum(b["n"] for b in in_memory["plain"]) == 3000 and len(in_memory["plain"]) == 7
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200_000)
        c.t.command("profile", 2)
        for name, p in pipelines.items():
            assert list(coll.aggregate(p, comment=name)) == in_memory[name], name
        c.t.command("profile", 0)
        for name in pipelines:
            entry = c.t["system.profile"].find_one({"command.comment": name})
            assert entry is not None and entry.get("usedDisk") is True, (name, entry)
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate(pipelines["plain"], allowDiskUse=False))
        assert exc.value.code == 292, exc.value.details
        assert "Sort exceeded memory limit of 200000 bytes" in exc.value.details["errmsg"]

def test_a_partitioned_set_window_fields_sorts_on_disk_past_its_memory_limit(fresh_server):
    """mongod puts a `$sort` by partition and `sortBy` in front of `$setWindowFields` and
    holds one partition at a time: past the sort memory limit the sorted runs go to disk
    (the profile says usedDisk) and the outputs are those computed in memory; with
    allowDiskUse: false the sort fails with 292."""
    srv = fresh_server()
    with srv.client() as c:
        coll = c.t.win
        pad = "p" * 1000
        coll.insert_many([{"_id": i, "g": (i * 7919) % 13, "t": (i * 104729) % 1000, "pad": pad}
                          for i in range(3000)])
        pipeline = [{"$setWindowFields": {"partitionBy": "$g", "sortBy": {"t": 1}, "output": {
            "rank": {"$rank": {}},
            "run": {"$sum": "$t", "window": {"documents": ["unbounded", "current"]}},
            "near": {"$avg": "$t", "window": {"range": [-5, 5]}}}}},
            {"$project": {"pad": 0}}]
        in_memory = list(coll.aggregate(pipeline))
        assert len(in_memory) == 3000
        # Partitions in order, each in sortBy order.
        assert [(d["g"], d["t"]) for d in in_memory] == sorted((d["g"], d["t"]) for d in in_memory)
        first = [d for d in in_memory if d["g"] == 0]
        assert first[0]["rank"] == 1 and first[-1]["run"] == sum(d["t"] for d in first)
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=200_000)
        c.t.command("profile", 2)
        assert list(coll.aggregate(pipeline, comment="window", batchSize=100)) == in_memory
        c.t.command("profile", 0)
        entry = c.t["system.profile"].find_one({"command.comment": "window"})
        assert entry is not None and entry.get("usedDisk") is True, entry
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate(pipeline, allowDiskUse=False))
        assert exc.value.code == 292, exc.value.details
        assert "Sort exceeded memory limit of 200000 bytes" in exc.value.details["errmsg"]

def test_an_aggregations_group_past_its_memory_limit_spills_to_disk_or_fails_without_disk_use(fresh_server):
    """mongod's `$group` holds about internalDocumentSourceGroupMaxMemoryBytes of groups:
    past it the documents of groups it does not hold are sorted on disk by group and
    folded one group at a time as the cursor is read (the same groups, in another
    order); with allowDiskUse: false the aggregate fails with 292."""
    srv = fresh_server()
    with srv.client() as c:
        assert c.admin.command("getParameter", 1, internalDocumentSourceGroupMaxMemoryBytes=1)[
            "internalDocumentSourceGroupMaxMemoryBytes"] == 100 * 1024 * 1024
        coll = c.t.groups
        n_docs, n_groups = 6000, 1500
        order = [(i * 7919) % n_docs for i in range(n_docs)]  # the groups' documents interleaved
        coll.insert_many([{"_id": i, "k": i % n_groups, "v": i, "s": f"s{i % 5}"} for i in order])
        accumulate = {"$accumulator": {
            "init": "function(k) { return {k: k, n: 0}; }", "initArgs": ["$k"],
            "accumulate": "function(st, v) { st.n += v; return st; }", "accumulateArgs": ["$v"],
            "merge": "function(a, b) { a.n += b.n; return a; }",
            "finalize": "function(st) { return st.k * 1000000 + st.n; }", "lang": "js"}}
        pipeline = [{"$match": {"v": {"$gte": 0}}},
                    {"$group": {"_id": "$k", "n": {"$sum": 1}, "first": {"$first": "$v"},
                                "last": {"$last": "$v"}, "all": {"$push": "$v"},
                                "set": {"$addToSet": "$s"}, "js": accumulate}},
                    {"$set": {"set": {"$sortArray": {"input": "$set", "sortBy": 1}}}}]
        in_memory = list(coll.aggregate(pipeline))
        c.admin.command("setParameter", 1, internalDocumentSourceGroupMaxMemoryBytes=100_000)
        c.admin.command("setParameter", 1, internalQueryMaxBlockingSortMemoryUsageBytes=50_000)
        reply = c.t.command("aggregate", "groups", pipeline=pipeline, cursor={"batchSize": 100})
        assert len(reply["cursor"]["firstBatch"]) == 100 and reply["cursor"]["id"] != 0
        c.t.command("killCursors", "groups", cursors=[reply["cursor"]["id"]])
        spilled = list(coll.aggregate(pipeline, batchSize=250))
        by_key = lambda docs: sorted(docs, key=lambda d: d["_id"])
        assert len(spilled) == n_groups and by_key(spilled) == by_key(in_memory)
        expected = {k: [i for i in sorted(order) if i % n_groups == k] for k in range(n_groups)}
        for d in spilled:
            vs = expected[d["_id"]]
            assert (d["n"], d["first"], d["last"], d["all"]) == (len(vs), vs[0], vs[-1], vs), d
            assert d["js"] == d["_id"] * 1000000 + sum(vs)
        # The groups held came first, in the order their first documents came; the rest
        # came sorted by group, so the output's order tells that some spilled.
        assert [d["_id"] for d in spilled] != [d["_id"] for d in in_memory]
        assert [d["_id"] for d in spilled[:10]] == [d["_id"] for d in in_memory[:10]]
        assert (srv.dbpath / "_tmp").is_dir(), "the sorted runs went to the data directory's _tmp folder"
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate(pipeline, allowDiskUse=False))
        assert exc.value.code == 292, exc.value.details
        assert exc.value.details["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed"
        assert "Exceeded memory limit for $group" in exc.value.details["errmsg"]
        # A $group under the limit needs no disk.
        small = [{"$group": {"_id": {"$mod": ["$k", 3]}, "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
        assert list(coll.aggregate(small, allowDiskUse=False)) == [
            {"_id": 0, "n": 2000}, {"_id": 1, "n": 2000}, {"_id": 2, "n": 2000}]

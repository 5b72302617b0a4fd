"""Aggregation pipeline stages and expression operators."""

import datetime

import pytest
from pymongo.errors import OperationFailure


def agg(coll, pipeline, **kw):
    return list(coll.aggregate(pipeline, **kw))


@pytest.fixture
def sales(coll):
    coll.insert_many([
        {"_id": 1, "item": "a", "qty": 2, "price": 10, "tags": ["x", "y"], "day": datetime.datetime(2024, 3, 1, 12, 30)},
        {"_id": 2, "item": "b", "qty": 1, "price": 20, "tags": ["y"], "day": datetime.datetime(2024, 3, 2)},
        {"_id": 3, "item": "a", "qty": 5, "price": 10, "tags": [], "day": datetime.datetime(2024, 3, 2)},
        {"_id": 4, "item": "c", "qty": 3, "price": 5, "day": datetime.datetime(2024, 3, 3)},
        {"_id": 5, "item": "b", "qty": 4, "price": 20, "tags": None, "day": datetime.datetime(2024, 3, 4)},
    ])
    return coll


class TestStages:
    def test_match_sort_skip_limit(self, sales):
        out = agg(sales, [{"$match": {"price": {"$gte": 10}}}, {"$sort": {"qty": -1}},
                          {"$skip": 1}, {"$limit": 2}, {"$project": {"_id": 1}}])
        assert out == [{"_id": 5}, {"_id": 1}]

    def test_project_include_exclude_and_computed(self, sales):
        out = agg(sales, [{"$match": {"_id": 1}},
                          {"$project": {"_id": 0, "item": 1, "total": {"$multiply": ["$qty", "$price"]}}}])
        assert out == [{"item": "a", "total": 20}]
        out = agg(sales, [{"$match": {"_id": 4}}, {"$project": {"day": 0, "price": 0}}])
        assert out == [{"_id": 4, "item": "c", "qty": 3}]

    def test_add_fields_set_unset(self, sales):
        out = agg(sales, [{"$match": {"_id": 2}}, {"$addFields": {"double": {"$multiply": ["$qty", 2]}}},
                          {"$set": {"item": "renamed"}}, {"$unset": ["tags", "day", "price"]}])
        assert out == [{"_id": 2, "item": "renamed", "qty": 1, "double": 2}]

    def test_group_accumulators(self, sales):
        out = agg(sales, [
            {"$sort": {"_id": 1}},
            {"$group": {
                "_id": "$item",
                "sum": {"$sum": "$qty"}, "avg": {"$avg": "$qty"},
                "min": {"$min": "$qty"}, "max": {"$max": "$qty"},
                "first": {"$first": "$_id"}, "last": {"$last": "$_id"},
                "all": {"$push": "$qty"}, "prices": {"$addToSet": "$price"},
                "n": {"$count": {}}, "ones": {"$sum": 1},
            }},
            {"$sort": {"_id": 1}},
        ])
        assert [g["_id"] for g in out] == ["a", "b", "c"]
        a = out[0]
        assert (a["sum"], a["avg"], a["min"], a["max"]) == (7, 3.5, 2, 5)
        assert (a["first"], a["last"], a["all"], a["prices"]) == (1, 3, [2, 5], [10])
        assert (a["n"], a["ones"]) == (2, 2)
        assert out[1]["sum"] == 5 and out[2]["n"] == 1

    def test_group_null_id(self, sales):
        assert agg(sales, [{"$group": {"_id": None, "total": {"$sum": {"$multiply": ["$qty", "$price"]}}}}]) == \
            [{"_id": None, "total": 20 + 20 + 50 + 15 + 80}]

    def test_group_compound_id(self, sales):
        out = agg(sales, [{"$group": {"_id": {"i": "$item", "p": "$price"}, "c": {"$sum": 1}}},
                          {"$sort": {"_id.i": 1}}])
        assert [o["_id"] for o in out] == [{"i": "a", "p": 10}, {"i": "b", "p": 20}, {"i": "c", "p": 5}]

    def test_count(self, sales):
        assert agg(sales, [{"$match": {"item": "a"}}, {"$count": "howmany"}]) == [{"howmany": 2}]
        assert agg(sales, [{"$match": {"item": "zzz"}}, {"$count": "howmany"}]) == []

    def test_unwind(self, sales):
        out = agg(sales, [{"$unwind": "$tags"}, {"$project": {"tags": 1}}])
        assert out == [{"_id": 1, "tags": "x"}, {"_id": 1, "tags": "y"}, {"_id": 2, "tags": "y"}]

    def test_unwind_index_and_preserve(self, sales):
        out = agg(sales, [{"$unwind": {"path": "$tags", "includeArrayIndex": "i",
                                       "preserveNullAndEmptyArrays": True}},
                          {"$project": {"tags": 1, "i": 1}}])
        assert out == [
            {"_id": 1, "tags": "x", "i": 0}, {"_id": 1, "tags": "y", "i": 1},
            {"_id": 2, "tags": "y", "i": 0},
            {"_id": 3, "i": None},
            {"_id": 4, "i": None},
            {"_id": 5, "tags": None, "i": None},
        ]

    def test_replace_root_and_with(self, coll):
        coll.insert_many([{"_id": 1, "inner": {"a": 1}}, {"_id": 2, "inner": {"a": 2}}])
        assert agg(coll, [{"$replaceRoot": {"newRoot": "$inner"}}]) == [{"a": 1}, {"a": 2}]
        assert agg(coll, [{"$replaceWith": {"x": "$_id"}}]) == [{"x": 1}, {"x": 2}]

    def test_replace_root_non_document_fails(self, coll):
        coll.insert_one({"_id": 1, "inner": 5})
        with pytest.raises(OperationFailure) as exc:
            agg(coll, [{"$replaceRoot": {"newRoot": "$inner"}}])
        assert exc.value.code == 40228

    def test_sort_by_count(self, sales):
        out = agg(sales, [{"$sortByCount": "$item"}])
        assert out[0]["count"] == 2 and out[-1] == {"_id": "c", "count": 1}
        assert {o["_id"] for o in out[:2]} == {"a", "b"}

    def test_facet(self, sales):
        out = agg(sales, [{"$facet": {
            "cheap": [{"$match": {"price": {"$lt": 10}}}, {"$project": {"_id": 1}}],
            "total": [{"$count": "n"}],
        }}])
        assert out == [{"cheap": [{"_id": 4}], "total": [{"n": 5}]}]


class TestStreamedPipelines:
    """A pipeline whose stages all stream runs as its cursor is read, as mongod's: the
    first batch comes before the rest of the collection is read, so an error in a later
    document is the getMore's, and the collection is never held whole."""

    def test_a_later_documents_error_comes_with_the_getmore(self, db):
        coll = db.streamed
        coll.insert_many([{"_id": i, "d": 1} for i in range(300)] + [{"_id": 300, "d": 0}])
        reply = db.command("aggregate", coll.name, pipeline=[
            {"$match": {"_id": {"$gte": 0}}}, {"$project": {"q": {"$divide": [1, "$d"]}}}],
            cursor={"batchSize": 10})
        first = reply["cursor"]["firstBatch"]
        assert [d["_id"] for d in first] == list(range(10))
        assert reply["cursor"]["id"] != 0
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", reply["cursor"]["id"], collection=coll.name, batchSize=1000)
        assert e.value.code == 2 and "divide by zero" in str(e.value)
        # The same pipeline run in full before its first batch (a blocking stage) fails
        # at once.
        with pytest.raises(OperationFailure) as e:
            db.command("aggregate", coll.name, pipeline=[
                {"$project": {"q": {"$divide": [1, "$d"]}}}, {"$sort": {"_id": 1}}],
                cursor={"batchSize": 10})
        assert e.value.code == 2

    def test_batches_a_limit_lookup_and_unwind(self, db):
        db.other.insert_many([{"_id": k, "v": k * 10} for k in range(5)])
        db.streamed.insert_many([{"_id": i, "k": i % 5, "a": [i, i]} for i in range(500)])
        pipeline = [{"$match": {"_id": {"$gte": 100}}},
                    {"$lookup": {"from": "other", "localField": "k", "foreignField": "_id", "as": "o"}},
                    {"$unwind": "$a"}, {"$skip": 3}, {"$limit": 701},
                    {"$project": {"a": 1, "v": {"$first": "$o.v"}}}]
        got = list(db.streamed.aggregate(pipeline, batchSize=7))
        expected = [{"_id": i, "a": i, "v": i % 5 * 10} for i in range(100, 500) for _ in range(2)][3:704]
        assert got == expected

    def test_a_batch_filled_by_the_last_document_leaves_the_cursor_open(self, db):
        db.streamed.insert_many([{"_id": i} for i in range(4)])
        reply = db.command("aggregate", "streamed", pipeline=[{"$match": {}}], cursor={"batchSize": 4})
        assert len(reply["cursor"]["firstBatch"]) == 4 and reply["cursor"]["id"] != 0
        more = db.command("getMore", reply["cursor"]["id"], collection="streamed")
        assert more["cursor"]["nextBatch"] == [] and more["cursor"]["id"] == 0
        reply = db.command("aggregate", "streamed", pipeline=[{"$match": {}}], cursor={"batchSize": 5})
        assert len(reply["cursor"]["firstBatch"]) == 4 and reply["cursor"]["id"] == 0


    def test_a_leading_sort_an_index_gives_streams_in_its_order(self, db):
        coll = db.streamed
        coll.create_index([("a", 1), ("b", -1)])
        docs = [{"_id": i, "a": (i * 7) % 11, "b": i % 3, "s": "x" if i % 2 else "X", "d": 1}
                for i in range(200)]
        docs[150]["d"] = 0
        coll.insert_many(docs)

        def accesses():
            return {s["name"]: s["accesses"]["ops"] for s in coll.aggregate([{"$indexStats": {}}])}

        before = accesses()["a_1_b_-1"]
        pipeline = [{"$match": {"a": {"$gte": 2}}}, {"$sort": {"a": 1, "b": -1}},
                    {"$project": {"q": {"$divide": [1, "$d"]}}}]
        reply = db.command("aggregate", coll.name, pipeline=pipeline, cursor={"batchSize": 5})
        assert accesses()["a_1_b_-1"] == before + 1
        expected = sorted((d for d in docs if d["a"] >= 2), key=lambda d: (d["a"], -d["b"]))
        # (The order of equal keys is unspecified, as mongod's.)
        key = {d["_id"]: (d["a"], d["b"]) for d in docs}
        assert [key[d["_id"]] for d in reply["cursor"]["firstBatch"]] == [key[d["_id"]] for d in expected[:5]]
        # Document 150 comes later in the index's order: its error is a getMore's.
        assert [d["_id"] for d in expected].index(150) > 5
        with pytest.raises(OperationFailure) as e:
            db.command("getMore", reply["cursor"]["id"], collection=coll.name, batchSize=1000)
        assert e.value.code == 2
        # Reversed, with a limit: the same index read backwards.
        got = list(coll.aggregate([{"$sort": {"a": -1, "b": 1}}, {"$limit": 30}, {"$project": {"_id": 1}}]))
        back = sorted(docs, key=lambda d: (-d["a"], d["b"]))
        assert [key[d["_id"]] for d in got] == [key[d["_id"]] for d in back[:30]]
        assert accesses()["a_1_b_-1"] == before + 2
        # An order no index gives, and a collation the index was not built with, are
        # sorted as before (in full), and right.
        got = list(coll.aggregate([{"$sort": {"b": 1, "_id": -1}}, {"$project": {"_id": 1}}]))
        assert [d["_id"] for d in got] == [d["_id"] for d in sorted(docs, key=lambda d: (d["b"], -d["_id"]))]
        coll.create_index([("s", 1), ("_id", 1)])
        got = list(coll.aggregate([{"$sort": {"s": 1, "_id": 1}}, {"$limit": 4}],
                                  collation={"locale": "en", "strength": 2}))
        assert [d["_id"] for d in got] == [0, 1, 2, 3]
        got = list(coll.aggregate([{"$sort": {"s": 1, "_id": 1}}, {"$limit": 2}]))
        assert [d["_id"] for d in got] == [0, 2]


class TestLookup:
    @pytest.fixture
    def orders(self, db):
        db.orders.insert_many([{"_id": 1, "sku": "p1", "n": 2}, {"_id": 2, "sku": "p2", "n": 1},
                               {"_id": 3, "sku": "zz", "n": 7}])
        db.products.insert_many([{"_id": "p1", "name": "pen", "stock": 10},
                                 {"_id": "p2", "name": "ink", "stock": 0}])
        return db

    def test_local_foreign(self, orders):
        out = agg(orders.orders, [{"$lookup": {"from": "products", "localField": "sku",
                                               "foreignField": "_id", "as": "p"}},
                                  {"$project": {"names": "$p.name"}}])
        assert out == [{"_id": 1, "names": ["pen"]}, {"_id": 2, "names": ["ink"]}, {"_id": 3, "names": []}]

    def test_pipeline_form(self, orders):
        out = agg(orders.orders, [
            {"$lookup": {"from": "products", "let": {"want": "$n"},
                         "pipeline": [{"$match": {"$expr": {"$gte": ["$stock", "$$want"]}}},
                                      {"$project": {"_id": 0, "name": 1}}],
                         "as": "avail"}},
            {"$project": {"avail": 1}},
        ])
        assert out == [{"_id": 1, "avail": [{"name": "pen"}]}, {"_id": 2, "avail": [{"name": "pen"}]},
                       {"_id": 3, "avail": [{"name": "pen"}]}]

    def test_lookup_missing_collection(self, orders):
        out = agg(orders.orders, [{"$lookup": {"from": "nothere", "localField": "sku",
                                               "foreignField": "_id", "as": "p"}}, {"$limit": 1}])
        assert out[0]["p"] == []


    def test_an_index_on_the_foreign_field_finds_the_matches_and_without_one_the_same(self, db):
        """With an index on foreignField each local document's matches are read through it
        (mongod's indexed join: $indexStats counts one access a lookup); without one, the
        foreign collection is read once and joined by hash. Both give the linear search's
        matches in the foreign collection's order."""
        foreign = [{"_id": i, "k": v} for i, v in enumerate(
            [1, 1.0, "a", "A", [1, 2], {"x": 1}, None, 2, [], [[1]], "b", 3])] + [{"_id": 99}]
        db.f_indexed.insert_many(foreign)
        db.f_indexed.create_index("k")
        db.f_plain.insert_many(foreign)
        local = [{"_id": i, "l": v} for i, v in enumerate([1, "a", [2, "b"], {"x": 1}, None, 7, [1], []])]
        db.local.insert_many(local)
        ops = lambda: next(s["accesses"]["ops"] for s in db.f_indexed.aggregate([{"$indexStats": {}}])
                           if s["name"] == "k_1")
        before = ops()
        results = {}
        for name in ("f_indexed", "f_plain"):
            out = agg(db.local, [{"$lookup": {"from": name, "localField": "l", "foreignField": "k", "as": "m"}},
                                 {"$project": {"m": "$m._id"}}])
            results[name] = {d["_id"]: d["m"] for d in out}
        expected = {0: [0, 1, 4], 1: [2], 2: [4, 7, 10], 3: [5], 4: [6, 99], 5: [], 6: [0, 1, 4], 7: []}
        assert results["f_plain"] == expected
        assert results["f_indexed"] == expected
        # One index lookup per local document but the null one, the document (its `$`
        # keys would be operators in a query) and the empty array's.
        assert ops() - before == 5
        out = agg(db.local, [{"$lookup": {"from": "f_indexed", "localField": "l", "foreignField": "k",
                                          "as": "m"}}, {"$project": {"m": "$m._id"}}],
                  collation={"locale": "en", "strength": 2})
        assert {d["_id"]: d["m"] for d in out}[1] == [2, 3]

    def test_a_pipelines_expr_equality_on_a_variable_reads_by_index_or_hash(self, db):
        """A `$lookup` pipeline starting with `$match: {$expr: {$eq: ["$field", "$$var"]}}`
        reads each local document's candidates through an index on the field (one
        $indexStats access a lookup, as mongod's), else by hash over one read of the
        foreign collection, instead of running over the whole collection per local
        document; it gives what the pipeline over the whole collection gives (here, a
        leading $skip: 0 keeps that path)."""
        foreign = [{"_id": i, "k": v} for i, v in enumerate(
            [1, 1.0, "a", "A", [1, 2], {"x": 1}, None, 2, [], [[1]], "b", 3])] + [{"_id": 99}]
        db.f_indexed.insert_many(foreign)
        db.f_indexed.create_index("k")
        db.f_plain.insert_many(foreign)
        db.local.insert_many([{"_id": i, "l": v} for i, v in enumerate(
            [1, "a", [2, "b"], {"x": 1}, None, 7, [1], []])])
        ops = lambda: next(s["accesses"]["ops"] for s in db.f_indexed.aggregate([{"$indexStats": {}}])
                           if s["name"] == "k_1")

        def joined(name, lead=(), **kwargs):
            sub = [*lead, {"$match": {"$expr": {"$eq": ["$k", "$$l"]}}}, {"$project": {"_id": 1}}]
            out = agg(db.local, [{"$lookup": {"from": name, "let": {"l": "$l"}, "pipeline": sub, "as": "m"}},
                                 {"$project": {"m": "$m._id"}}], **kwargs)
            return {d["_id"]: d["m"] for d in out}

        whole = joined("f_plain", lead=[{"$skip": 0}])
        assert whole[0] == [0, 1] and whole[1] == [2] and whole[2] == [] and whole[3] == [5]
        before = ops()
        assert joined("f_indexed") == whole
        # The three plain values (1, "a", 7) went through the index; null, the document
        # and the arrays did not.
        assert ops() - before == 3
        assert joined("f_plain") == whole
        strength_2 = {"locale": "en", "strength": 2}
        assert joined("f_indexed", collation=strength_2)[1] == [2, 3]
        assert joined("f_plain", collation=strength_2)[1] == [2, 3]

class TestExpressions:
    def one(self, coll, expr, doc=None):
        coll.insert_one(doc or {"_id": 1})
        return agg(coll, [{"$project": {"_id": 0, "r": expr}}])[0].get("r", "<missing>")

    def test_add(self, coll):
        assert self.one(coll, {"$add": ["$a", 2, 0.5]}, {"a": 1}) == 3.5

    def test_add_date(self, coll):
        d = datetime.datetime(2024, 1, 1)
        assert self.one(coll, {"$add": ["$d", 1000]}, {"d": d}) == d + datetime.timedelta(seconds=1)

    def test_concat(self, coll):
        assert self.one(coll, {"$concat": ["$a", "-", "$b"]}, {"a": "x", "b": "y"}) == "x-y"

    def test_concat_null(self, coll):
        assert self.one(coll, {"$concat": ["$a", "$missing"]}, {"a": "x"}) is None

    def test_cond(self, coll):
        coll.insert_many([{"_id": 1, "n": 5}, {"_id": 2, "n": 50}])
        out = agg(coll, [{"$project": {"size": {"$cond": [{"$gt": ["$n", 10]}, "big", "small"]},
                                       "s2": {"$cond": {"if": {"$lt": ["$n", 10]}, "then": 1, "else": 0}}}}])
        assert out == [{"_id": 1, "size": "small", "s2": 1}, {"_id": 2, "size": "big", "s2": 0}]

    def test_if_null(self, coll):
        assert self.one(coll, {"$ifNull": ["$missing", "$alsoMissing", "dflt"]}) == "dflt"

    def test_size(self, coll):
        assert self.one(coll, {"$size": "$arr"}, {"arr": [1, 2, 3]}) == 3

    def test_size_of_non_array_fails(self, coll):
        coll.insert_one({"arr": 5})
        with pytest.raises(OperationFailure) as exc:
            agg(coll, [{"$project": {"r": {"$size": "$arr"}}}])
        assert exc.value.code == 17124

    def test_to_upper(self, coll):
        assert self.one(coll, {"$toUpper": "$s"}, {"s": "abC"}) == "ABC"

    def test_date_to_string(self, coll):
        d = datetime.datetime(2024, 3, 1, 12, 30, 5)
        assert self.one(coll, {"$dateToString": {"format": "%Y-%m-%d %H:%M:%S", "date": "$d"}}, {"d": d}) \
            == "2024-03-01 12:30:05"

    def test_array_elem_at(self, coll):
        coll.insert_one({"_id": 1, "a": [10, 20, 30]})
        out = agg(coll, [{"$project": {"_id": 0, "first": {"$arrayElemAt": ["$a", 0]},
                                       "last": {"$arrayElemAt": ["$a", -1]},
                                       "out": {"$arrayElemAt": ["$a", 5]}}}])
        assert out == [{"first": 10, "last": 30}], "out-of-range index yields a missing field"

    def test_filter(self, coll):
        assert self.one(coll, {"$filter": {"input": "$a", "as": "x", "cond": {"$gt": ["$$x", 2]}}},
                        {"a": [1, 5, 2, 7]}) == [5, 7]

    def test_map(self, coll):
        assert self.one(coll, {"$map": {"input": "$a", "in": {"$multiply": ["$$this", 10]}}},
                        {"a": [1, 2]}) == [10, 20]

    def test_literal_and_field_paths(self, coll):
        assert self.one(coll, {"$literal": "$a"}, {"a": 1}) == "$a"
        assert agg(coll, [{"$project": {"_id": 0, "r": "$nested.x"}}]) == [{}]


class TestErrorsAndOutput:
    def test_unknown_stage(self, sales):
        with pytest.raises(OperationFailure) as exc:
            agg(sales, [{"$bogus": {}}])
        assert exc.value.code == 40324
        assert "$bogus" in str(exc.value)

    def test_unknown_expression(self, sales):
        with pytest.raises(OperationFailure) as exc:
            agg(sales, [{"$project": {"r": {"$noSuchOp": 1}}}])
        assert exc.value.code == 168

    def test_group_without_id(self, sales):
        with pytest.raises(OperationFailure) as exc:
            agg(sales, [{"$group": {"n": {"$sum": 1}}}])
        assert exc.value.code == 15955

    def test_out(self, sales, db):
        res = agg(sales, [{"$match": {"item": "a"}}, {"$project": {"qty": 1}}, {"$out": "outcoll"}])
        assert res == []
        assert list(db.outcoll.find().sort("_id", 1)) == [{"_id": 1, "qty": 2}, {"_id": 3, "qty": 5}]
        # $out replaces the target's contents
        agg(sales, [{"$match": {"item": "c"}}, {"$out": "outcoll"}])
        assert [d["_id"] for d in db.outcoll.find()] == [4]
        assert "outcoll" in db.list_collection_names()

    def test_out_reports_an_unsatisfiable_write_concern(self, sales, db):
        reply = db.command(
            "aggregate", sales.name, pipeline=[{"$out": "outcoll"}], cursor={}, writeConcern={"w": 2}
        )
        assert reply["writeConcernError"]["code"] == 100
        assert db.outcoll.count_documents({}) == sales.count_documents({})

    def test_unknown_read_concern_level_is_refused(self, db):
        with pytest.raises(OperationFailure) as exc:
            db.command("aggregate", "any", pipeline=[], cursor={}, readConcern={"level": "unknown"})
        assert exc.value.code == 2

    def test_batch_size_iterates_everything(self, coll):
        coll.insert_many([{"_id": i} for i in range(1050)])
        cursor = coll.aggregate([{"$sort": {"_id": 1}}], batchSize=100)
        assert [d["_id"] for d in cursor] == list(range(1050))

    def test_raw_aggregate_first_batch(self, coll, db):
        coll.insert_many([{"_id": i} for i in range(10)])
        reply = db.command("aggregate", coll.name, pipeline=[], cursor={"batchSize": 3})
        assert len(reply["cursor"]["firstBatch"]) == 3
        assert reply["cursor"]["id"] != 0
        assert reply["cursor"]["ns"] == f"{db.name}.{coll.name}"
        more = db.command("getMore", reply["cursor"]["id"], collection=coll.name, batchSize=100)
        assert len(more["cursor"]["nextBatch"]) == 7
        assert more["cursor"]["id"] == 0

    def test_aggregate_requires_cursor_option(self, coll, db):
        coll.insert_one({})
        with pytest.raises(OperationFailure) as exc:
            db.command("aggregate", coll.name, pipeline=[])
        assert exc.value.code == 9

    def test_collectionless_aggregate_documents(self, db):
        out = list(db.aggregate([{"$documents": [{"a": 1}, {"a": 2}]}, {"$match": {"a": 2}}]))
        assert out == [{"a": 2}]


def test_leading_match_binds_let_variables(coll, db):
    coll.insert_many([{"_id": 1}, {"_id": 2}])
    pipeline = [{"$match": {"$expr": {"$eq": ["$_id", "$$id"]}}}]
    assert list(coll.aggregate(pipeline, let={"id": 2})) == [{"_id": 2}]
    list(coll.aggregate(pipeline + [{"$out": "copied"}], let={"id": 1}))
    assert list(db.copied.find()) == [{"_id": 1}]


class TestMerge:
    def setup_target(self, db):
        db.target.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 1}])

    def merge(self, db, docs, **spec):
        return list(db.aggregate([{"$documents": docs}, {"$merge": {"into": "target", **spec}}]))

    def test_when_matched_fail_is_a_duplicate_key_error(self, db):
        self.setup_target(db)
        with pytest.raises(OperationFailure) as exc:
            self.merge(db, [{"_id": 3}, {"_id": 2, "x": 9}], whenMatched="fail")
        assert exc.value.code == 11000
        assert exc.value.details["keyPattern"] == {"_id": 1}
        assert exc.value.details["keyValue"] == {"_id": 2}
        assert db.target.find_one({"_id": 2}) == {"_id": 2, "x": 1}
        assert db.target.find_one({"_id": 3}) == {"_id": 3}, "results before the error stay written"

    def test_when_not_matched_discard_fail_and_keep_existing(self, db):
        self.setup_target(db)
        self.merge(db, [{"_id": 1, "x": 5}, {"_id": 7}], whenMatched="keepExisting", whenNotMatched="discard")
        assert list(db.target.find()) == [{"_id": 1, "x": 1}, {"_id": 2, "x": 1}]
        with pytest.raises(OperationFailure) as exc:
            self.merge(db, [{"_id": 8}], whenNotMatched="fail")
        assert exc.value.code == 13113

    def test_replace_merge_and_pipeline(self, db):
        self.setup_target(db)
        self.merge(db, [{"_id": 1, "y": 2}], whenMatched="replace")
        self.merge(db, [{"_id": 2, "y": 2}])
        self.merge(db, [{"_id": 2, "y": 40}], whenMatched=[{"$set": {"z": {"$add": ["$$new.y", "$x"]}}}])
        assert list(db.target.find()) == [{"_id": 1, "y": 2}, {"_id": 2, "x": 1, "y": 2, "z": 41}]

    def test_on_fields_need_a_unique_index(self, db):
        with pytest.raises(OperationFailure) as exc:
            self.merge(db, [{"k": 1}], on="k")
        assert exc.value.code == 51183
        db.target.create_index("k", unique=True)
        self.merge(db, [{"k": 1, "v": 1}], on="k")
        self.merge(db, [{"k": 1, "v": 2}], on="k")
        assert [d["v"] for d in db.target.find({"k": 1})] == [2]

    def test_results_without_id_get_one(self, db):
        self.merge(db, [{"a": 1}, {"a": 2}])
        docs = list(db.target.find())
        assert [d["a"] for d in docs] == [1, 2] and all("_id" in d for d in docs)

    def test_bad_specs(self, db):
        for spec, code in [({"whenMatched": "bogus"}, 2), ({"bogus": 1}, 40415)]:
            with pytest.raises(OperationFailure) as exc:
                self.merge(db, [{"_id": 1}], **spec)
            assert exc.value.code == code


class TestAggregateHint:
    """`aggregate`'s `hint` names the index its collection is read through, as a find's:
    $indexStats counts the access, a hinted index that gives a leading `$sort`'s order
    serves it, and a hint naming no index fails as mongod's."""

    def test_the_hinted_index_is_read(self, coll):
        coll.insert_many([{"_id": i, "a": i % 5, "b": -i} for i in range(50)])
        coll.create_index("a")
        coll.create_index("b")

        def ops():
            return {s["name"]: s["accesses"]["ops"] for s in coll.aggregate([{"$indexStats": {}}])}

        before = ops()
        got = list(coll.aggregate([{"$match": {"a": {"$gte": 3}}}, {"$project": {"_id": 1}}], hint="b_1"))
        assert sorted(d["_id"] for d in got) == [i for i in range(50) if i % 5 >= 3]
        after = ops()
        assert (after["b_1"] - before["b_1"], after["a_1"] - before["a_1"]) == (1, 0)
        # By the hinted index's order: `b` descends as `_id` ascends.
        got = list(coll.aggregate([{"$sort": {"b": 1}}, {"$limit": 3}], hint={"b": 1}))
        assert [d["_id"] for d in got] == [49, 48, 47]
        with pytest.raises(OperationFailure) as e:
            list(coll.aggregate([{"$match": {}}], hint="nope_1"))
        assert e.value.code == 2
        with pytest.raises(OperationFailure) as e:
            coll.database.command("aggregate", coll.name, pipeline=[], cursor={}, hint=5)
        assert e.value.code == 9

"""Hashed, text and geospatial (2d, 2dsphere) indexes and the queries they answer."""

import pytest
from pymongo import GEO2D, GEOSPHERE, HASHED, TEXT
from pymongo.errors import OperationFailure, WriteError


def winning_plan(cursor):
    return cursor.explain()["queryPlanner"]["winningPlan"]


def index_names_used(cursor):
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("stage") == "IXSCAN":
                found.append(node["indexName"])
            for v in node.values():
                walk(v)

    walk(winning_plan(cursor))
    return found


class TestHashed:
    def test_create_and_list(self, coll):
        assert coll.create_index([("a", HASHED)]) == "a_hashed"
        info = coll.index_information()["a_hashed"]
        assert info["key"] == [("a", "hashed")]
        assert coll.create_index([("b", HASHED), ("c", 1)]) == "b_hashed_c_1"

    def test_equality_and_in_use_the_index(self, coll):
        coll.create_index([("a", HASHED)])
        coll.insert_many([{"_id": i, "a": i % 5} for i in range(50)] + [{"_id": 100, "a": {"x": 1}}])
        # numbers that compare equal hash equally
        assert sorted(d["_id"] for d in coll.find({"a": 3.0})) == list(range(3, 50, 5))
        assert coll.count_documents({"a": {"$in": [1, 2]}}) == 20
        assert [d["_id"] for d in coll.find({"a": {"x": 1}})] == [100]
        assert index_names_used(coll.find({"a": 3})) == ["a_hashed"]
        assert index_names_used(coll.find({"a": {"$in": [1, 2]}})) == ["a_hashed"]
        # ranges and sorts cannot use a hash
        assert index_names_used(coll.find({"a": {"$gt": 3}})) == []
        assert coll.count_documents({"a": {"$gt": 3}}) == 10
        assert [d["a"] for d in coll.find({"a": {"$lt": 2}}).sort("a", -1)][:1] == [1]

    def test_updates_and_deletes_keep_the_index(self, coll):
        coll.create_index([("a", HASHED)])
        coll.insert_many([{"_id": 1, "a": "x"}, {"_id": 2, "a": "y"}])
        coll.update_one({"_id": 1}, {"$set": {"a": "z"}})
        assert coll.count_documents({"a": "x"}) == 0
        assert [d["_id"] for d in coll.find({"a": "z"})] == [1]
        coll.delete_one({"a": "y"})
        assert coll.count_documents({"a": "y"}) == 0
        assert coll.database.command("validate", coll.name)["valid"]

    def test_arrays_are_refused(self, coll):
        coll.create_index([("a", HASHED)])
        with pytest.raises(WriteError) as exc:
            coll.insert_one({"a": [1, 2]})
        assert exc.value.code == 16766
        assert "hashed indexes do not currently support array values" in str(exc.value)
        coll.insert_one({"_id": 1, "a": 1})
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, {"$set": {"a": [3]}})
        assert exc.value.code == 16766

    def test_index_build_over_arrays_fails(self, coll):
        coll.insert_one({"a": {"b": [1]}})
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a.b", HASHED)])
        assert exc.value.code == 16766

    def test_spec_errors(self, coll):
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a", HASHED)], unique=True)
        assert exc.value.code == 16764
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a", HASHED), ("b", HASHED)])
        assert exc.value.code == 31303
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a", HASHED), ("b", TEXT)])
        assert exc.value.code == 67


class TestText:
    def docs(self, coll):
        coll.insert_many([
            {"_id": 1, "t": "spam eggs and spam"},
            {"_id": 2, "t": "spam"},
            {"_id": 3, "t": "egg sausage and bacon"},
            {"_id": 4, "t": "The quick brown fox jumps over the lazy dog"},
            {"_id": 5, "t": "Café au lait", "n": 1},
            {"_id": 6, "other": "spam"},
        ])

    def test_spec_defaults(self, coll):
        assert coll.create_index([("t", TEXT)]) == "t_text"
        spec = [i for i in coll.list_indexes() if i["name"] == "t_text"][0]
        assert spec["key"] == {"_fts": "text", "_ftsx": 1}
        assert spec["weights"] == {"t": 1}
        assert spec["default_language"] == "english"
        assert spec["language_override"] == "language"
        assert spec["textIndexVersion"] == 3

    def test_one_text_index_per_collection(self, coll):
        coll.create_index([("t", TEXT)])
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a", 1), ("u", TEXT)])
        assert exc.value.code == 67
        assert "only one text index per collection allowed" in str(exc.value)

    def test_search_terms_phrases_negations(self, coll):
        coll.create_index([("t", TEXT)])
        self.docs(coll)
        ids = lambda q, **kw: sorted(d["_id"] for d in coll.find({"$text": dict({"$search": q}, **kw)}))
        assert ids("spam") == [1, 2]
        assert ids("eggs") == [1, 3]  # stemmed
        assert ids("bacon fox") == [3, 4]  # terms are ORed
        assert ids("spam -eggs") == [2]
        assert ids('"quick brown" dog') == [4]
        assert ids('"brown quick"') == []
        assert ids("the and") == []  # stop words only
        assert ids("cafe") == [5]  # diacritics folded
        assert ids("CAFÉ", **{"$caseSensitive": True}) == []
        assert ids("Café", **{"$caseSensitive": True, "$diacriticSensitive": True}) == [5]

    def test_scores_projection_and_sort(self, coll):
        coll.create_index([("t", TEXT)])
        self.docs(coll)
        cursor = coll.find({"$text": {"$search": "spam"}}, {"score": {"$meta": "textScore"}})
        cursor.sort([("score", {"$meta": "textScore"})])
        results = cursor.to_list()
        assert [r["_id"] for r in results] == [1, 2]
        # mongod's formula: twice among three terms ("and" is a stop word): weight 1 *
        # freq (1 + 1/2) * (0.5 * 2/3 + 0.5); alone in its field: 1 * 1.1
        assert results[0]["score"] == pytest.approx(1.5 * (0.5 * 2 / 3 + 0.5))
        assert results[1]["score"] == pytest.approx(1.1)
        assert "$__textScore" not in results[0]
        # an exclusion projection with the score
        doc = coll.find_one({"$text": {"$search": "fox"}}, {"score": {"$meta": "textScore"}, "t": 0})
        assert set(doc) == {"_id", "score"}

    def test_weights_wildcard_and_languages(self, coll):
        coll.create_index([("$**", TEXT)], weights={"title": 10}, default_language="spanish")
        coll.insert_many([
            {"_id": 1, "title": "corriendo", "body": "nada"},
            {"_id": 2, "title": "nada", "body": {"deep": "corriendo"}},
            {"_id": 3, "body": "running dogs", "language": "english"},
        ])
        found = list(coll.find({"$text": {"$search": "corriendo"}}, {"s": {"$meta": "textScore"}})
                     .sort([("s", {"$meta": "textScore"})]))
        assert [d["_id"] for d in found] == [1, 2]
        assert found[0]["s"] > 5 * found[1]["s"]
        assert [d["_id"] for d in coll.find({"$text": {"$search": "run", "$language": "en"}})] == [3]

    def test_compound_text_index_needs_prefix_equality(self, coll):
        coll.create_index([("cat", 1), ("t", TEXT)])
        coll.insert_many([{"cat": "a", "t": "red apple"}, {"cat": "b", "t": "red brick"}])
        assert [d["t"] for d in coll.find({"cat": "b", "$text": {"$search": "red"}})] == ["red brick"]
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"$text": {"$search": "red"}}))
        assert exc.value.code == 2

    def test_text_requires_index(self, coll):
        coll.insert_one({"t": "spam"})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"$text": {"$search": "spam"}}))
        assert exc.value.code == 27
        assert "text index required for $text query" in str(exc.value)
        with pytest.raises(OperationFailure) as exc:
            coll.find_one({}, {"score": {"$meta": "textScore"}})
        assert exc.value.code == 40218

    def test_aggregation_text_score(self, coll):
        coll.create_index([("t", TEXT)])
        self.docs(coll)
        out = list(coll.aggregate([
            {"$match": {"$text": {"$search": "spam eggs"}}},
            {"$project": {"_id": 1}},
            {"$addFields": {"score": {"$meta": "textScore"}}},
            {"$sort": {"score": {"$meta": "textScore"}}},
        ]))
        assert [d["_id"] for d in out] == [1, 2, 3]
        assert out[0]["score"] > out[1]["score"]
        assert set(out[0]) == {"_id", "score"}
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate([{"$match": {}}, {"$match": {"$text": {"$search": "x"}}}]))
        assert exc.value.code == 17313

    def test_text_in_updates_deletes_and_count(self, coll):
        coll.create_index([("t", TEXT)])
        self.docs(coll)
        assert coll.count_documents({"$text": {"$search": "spam"}}) == 2
        coll.update_many({"$text": {"$search": "spam"}}, {"$set": {"hit": True}})
        assert sorted(d["_id"] for d in coll.find({"hit": True})) == [1, 2]
        assert "$__textScore" not in coll.find_one({"_id": 1})
        coll.delete_many({"$text": {"$search": "bacon"}})
        assert coll.count_documents({}) == 5
        coll.update_one({"_id": 2}, {"$set": {"t": "ham"}})
        assert [d["_id"] for d in coll.find({"$text": {"$search": "spam"}})] == [1]
        assert coll.database.command("validate", coll.name)["valid"]

    def test_spec_errors(self, coll):
        for kwargs, code in [
            ({"weights": {"t": 0}}, 16674),
            ({"default_language": "klingon"}, 2),
            ({"language_override": "$x"}, 17136),
        ]:
            with pytest.raises(OperationFailure) as exc:
                coll.create_index([("t", TEXT)], **kwargs)
            assert exc.value.code == code, kwargs
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("t", TEXT), ("x", 1), ("u", TEXT)])
        assert exc.value.code == 17389


POLY = {"type": "Polygon", "coordinates": [[[40, 5], [40, 6], [41, 6], [41, 5], [40, 5]]]}


class TestGeoSphere:
    def places(self, coll):
        coll.insert_many([
            {"_id": 1, "geo": {"type": "Point", "coordinates": [40.5, 5.5]}},
            {"_id": 2, "geo": {"type": "Point", "coordinates": [42, 5.5]}},
            {"_id": 3, "geo": [40.2, 5.1]},  # legacy pair
            {"_id": 4, "geo": {"type": "LineString", "coordinates": [[39, 5.5], [42, 5.5]]}},
            {"_id": 5, "geo": {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]]}},
            {"_id": 6, "name": "nowhere"},
        ])

    def test_create_and_list(self, coll):
        assert coll.create_index([("geo", GEOSPHERE)]) == "geo_2dsphere"
        spec = [i for i in coll.list_indexes() if i["name"] == "geo_2dsphere"][0]
        assert spec["key"] == {"geo": "2dsphere"}
        assert spec["2dsphereIndexVersion"] == 3

    def test_invalid_geometry_is_refused(self, coll):
        coll.create_index([("geo", GEOSPHERE)])
        for bad in ["here", {"type": "Point", "coordinates": [200, 0]},
                    {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]}]:
            with pytest.raises(WriteError) as exc:
                coll.insert_one({"geo": bad})
            assert exc.value.code == 16755
            assert "Can't extract geo keys" in str(exc.value)
        coll.insert_one({"geo": None})  # no location: not indexed, fine
        coll.insert_one({"other": 1})

    def test_geo_within_and_intersects(self, coll):
        coll.create_index([("geo", GEOSPHERE)])
        self.places(coll)
        ids = lambda q: sorted(d["_id"] for d in coll.find(q))
        assert ids({"geo": {"$geoWithin": {"$geometry": POLY}}}) == [1, 3]
        assert ids({"geo": {"$within": {"$geometry": POLY}}}) == [1, 3]
        assert ids({"geo": {"$geoIntersects": {"$geometry": POLY}}}) == [1, 3, 4]
        assert ids({"geo": {"$geoWithin": {"$centerSphere": [[0.5, 0.5], 0.05]}}}) == [5]
        assert ids({"geo": {"$geoWithin": {"$box": [[40, 5], [41, 6]]}}}) == [1, 3]

    def test_near_orders_by_distance(self, coll):
        coll.create_index([("geo", GEOSPHERE)])
        self.places(coll)
        near = {"$geometry": {"type": "Point", "coordinates": [40, 5]}}
        got = [d["_id"] for d in coll.find({"geo": {"$near": near}})]
        assert got[:3] == [3, 4, 1] and set(got) == {1, 2, 3, 4, 5}
        bounded = dict(near, **{"$maxDistance": 100_000})
        assert [d["_id"] for d in coll.find({"geo": {"$near": bounded}})] == [3, 4, 1]
        ring = dict(near, **{"$minDistance": 60_000, "$maxDistance": 300_000})
        assert [d["_id"] for d in coll.find({"geo": {"$nearSphere": ring}})] == [1, 2]
        # legacy $nearSphere: radians
        got = [d["_id"] for d in coll.find({"geo": {"$nearSphere": [40, 5], "$maxDistance": 0.01}})]
        assert got == [3, 4]

    def test_near_requires_index(self, coll):
        coll.insert_one({"geo": [0, 0]})
        with pytest.raises(OperationFailure) as exc:
            list(coll.find({"geo": {"$near": {"$geometry": {"type": "Point", "coordinates": [0, 0]}}}}))
        assert exc.value.code == 2
        assert "unable to find index for $geoNear query" in str(exc.value)
        # $geoWithin needs no index
        assert coll.count_documents({"geo": {"$geoWithin": {"$center": [[0, 0], 1]}}}) == 1

    def test_geo_near_stage(self, coll):
        coll.create_index([("geo", GEOSPHERE)])
        self.places(coll)
        out = list(coll.aggregate([
            {"$geoNear": {"near": {"type": "Point", "coordinates": [40, 5]}, "distanceField": "dist",
                          "maxDistance": 300_000, "includeLocs": "loc", "query": {"_id": {"$ne": 4}}}},
            {"$project": {"dist": 1, "loc": 1}},
        ]))
        assert [d["_id"] for d in out] == [3, 1, 2]
        assert out[0]["loc"] == [40.2, 5.1]
        assert 20_000 < out[0]["dist"] < 30_000
        assert out[0]["dist"] < out[1]["dist"] < out[2]["dist"]
        # spherical legacy point: radians, multiplied
        out = list(coll.aggregate([{"$geoNear": {"near": [40, 5], "distanceField": "d", "spherical": True,
                                                 "distanceMultiplier": 6378.1, "key": "geo"}}]))
        assert out[0]["_id"] == 3 and 20 < out[0]["d"] < 30
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate([{"$match": {}}, {"$geoNear": {"near": [0, 0], "distanceField": "d"}}]))
        assert exc.value.code == 40602

    def test_geo_near_needs_an_index(self, coll):
        coll.insert_one({"geo": [0, 0]})
        with pytest.raises(OperationFailure) as exc:
            list(coll.aggregate([{"$geoNear": {"near": [0, 0], "distanceField": "d"}}]))
        assert exc.value.code == 27


class TestGeo2d:
    def test_create_and_options(self, coll):
        assert coll.create_index([("loc", GEO2D)]) == "loc_2d"
        assert coll.index_information()["loc_2d"]["key"] == [("loc", "2d")]
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("a", 1), ("p", GEO2D)])
        assert exc.value.code == 16801
        with pytest.raises(OperationFailure) as exc:
            coll.create_index([("p", GEO2D)], bits=40)
        assert exc.value.code == 13028

    def test_flat_queries(self, coll):
        coll.create_index([("loc", GEO2D)], min=0, max=100)
        coll.insert_many([{"_id": i, "loc": [i * 10, i * 10]} for i in range(5)])
        with pytest.raises(WriteError) as exc:
            coll.insert_one({"loc": [150, 0]})
        assert exc.value.code == 13027
        ids = lambda q: [d["_id"] for d in coll.find(q)]
        assert ids({"loc": {"$near": [22, 22]}}) == [2, 3, 1, 4, 0]
        assert ids({"loc": {"$near": [22, 22], "$maxDistance": 17}}) == [2, 3, 1]
        assert sorted(ids({"loc": {"$geoWithin": {"$box": [[5, 5], [25, 25]]}}})) == [1, 2]
        assert sorted(ids({"loc": {"$geoWithin": {"$polygon": [[0, 0], [40, 0], [0, 40]]}}})) == [0, 1, 2]
        assert sorted(ids({"loc": {"$within": {"$center": [[0, 0], 15]}}})) == [0, 1]
        out = list(coll.aggregate([{"$geoNear": {"near": [0, 0], "distanceField": "d", "maxDistance": 20}}]))
        assert [(d["_id"], round(d["d"], 3)) for d in out] == [(0, 0.0), (1, 14.142)]

"""Update operators, positional updates, pipeline updates and update errors."""

import datetime

import pytest
from bson import Int64, Timestamp
from pymongo.errors import WriteError


def apply(coll, doc, update, **kw):
    """Insert `doc` (with _id 1), apply `update` to it, return the result without _id."""
    coll.insert_one(dict(doc, _id=1))
    coll.update_one({"_id": 1}, update, **kw)
    out = coll.find_one({"_id": 1})
    out.pop("_id")
    return out


class TestFieldOperators:
    def test_set(self, coll):
        assert apply(coll, {"a": 1}, {"$set": {"a": 2, "b": "x"}}) == {"a": 2, "b": "x"}

    def test_set_nested_creation(self, coll):
        assert apply(coll, {}, {"$set": {"a.b.c": 1}}) == {"a": {"b": {"c": 1}}}

    def test_set_into_existing_subdoc(self, coll):
        assert apply(coll, {"a": {"x": 1}}, {"$set": {"a.y": 2}}) == {"a": {"x": 1, "y": 2}}

    def test_set_keeps_field_order_and_appends_new(self, coll):
        out = apply(coll, {"a": 1, "b": 2, "c": 3}, {"$set": {"b": 20, "d": 4}})
        assert list(out.items()) == [("a", 1), ("b", 20), ("c", 3), ("d", 4)]

    def test_unset(self, coll):
        assert apply(coll, {"a": 1, "b": {"c": 1, "d": 2}}, {"$unset": {"a": "", "b.c": 1, "zz": 1}}) == {"b": {"d": 2}}

    def test_inc(self, coll):
        assert apply(coll, {"n": 5}, {"$inc": {"n": 2, "m": 3, "f": 0.5}}) == {"n": 7, "m": 3, "f": 0.5}

    def test_inc_int32_overflow_becomes_int64(self, coll):
        out = apply(coll, {"n": 2147483647}, {"$inc": {"n": 1}})
        assert out["n"] == 2147483648
        assert isinstance(out["n"], Int64), f"expected int64 after overflow, got {type(out['n'])}"

    def test_inc_int_by_double_becomes_double(self, coll):
        out = apply(coll, {"n": 1}, {"$inc": {"n": 1.5}})
        assert out["n"] == 2.5 and isinstance(out["n"], float)

    def test_mul(self, coll):
        out = apply(coll, {"n": 5, "f": 1.5}, {"$mul": {"n": 3, "f": 2, "missing": 4}})
        assert out == {"n": 15, "f": 3.0, "missing": 0}

    def test_min_max(self, coll):
        out = apply(coll, {"lo": 5, "hi": 5}, {"$min": {"lo": 3, "new": 1}, "$max": {"hi": 9}})
        assert out == {"lo": 3, "hi": 9, "new": 1}
        coll.update_one({"_id": 1}, {"$min": {"lo": 10}, "$max": {"hi": 1}})
        assert coll.find_one({"_id": 1}, {"_id": 0, "lo": 1, "hi": 1}) == {"lo": 3, "hi": 9}

    def test_rename(self, coll):
        out = apply(coll, {"a": 1, "s": {"x": 2}}, {"$rename": {"a": "b", "s.x": "t"}})
        assert out == {"s": {}, "b": 1, "t": 2}

    def test_current_date(self, coll):
        before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(seconds=5)
        out = apply(coll, {}, {"$currentDate": {"d": True, "ts": {"$type": "timestamp"},
                                                 "d2": {"$type": "date"}}})
        assert isinstance(out["d"], datetime.datetime) and out["d"] >= before
        assert isinstance(out["d2"], datetime.datetime)
        assert isinstance(out["ts"], Timestamp) and out["ts"].time > 0

    def test_set_on_insert(self, coll):
        coll.update_one({"_id": 1}, {"$set": {"a": 1}, "$setOnInsert": {"created": True}}, upsert=True)
        assert coll.find_one({"_id": 1}) == {"_id": 1, "a": 1, "created": True}
        coll.update_one({"_id": 1}, {"$set": {"a": 2}, "$setOnInsert": {"created": False, "x": 1}}, upsert=True)
        assert coll.find_one({"_id": 1}) == {"_id": 1, "a": 2, "created": True}

    def test_no_op_update_not_modified(self, coll):
        coll.insert_one({"_id": 1, "a": 1})
        res = coll.update_one({"_id": 1}, {"$set": {"a": 1}})
        assert (res.matched_count, res.modified_count) == (1, 0)


class TestArrayOperators:
    def test_push(self, coll):
        assert apply(coll, {"a": [1]}, {"$push": {"a": 2, "b": "x"}}) == {"a": [1, 2], "b": ["x"]}

    def test_push_each_slice_sort_position(self, coll):
        out = apply(coll, {"a": [5, 1]}, {"$push": {"a": {"$each": [4, 2, 3], "$sort": 1, "$slice": 3}}})
        assert out["a"] == [1, 2, 3]
        coll.update_one({"_id": 1}, {"$push": {"a": {"$each": [9, 8], "$position": 1}}})
        assert coll.find_one({"_id": 1})["a"] == [1, 9, 8, 2, 3]
        coll.update_one({"_id": 1}, {"$push": {"a": {"$each": [], "$slice": -2}}})
        assert coll.find_one({"_id": 1})["a"] == [2, 3]

    def test_push_sort_by_field(self, coll):
        out = apply(coll, {"q": [{"s": 3}, {"s": 1}]},
                    {"$push": {"q": {"$each": [{"s": 2}], "$sort": {"s": -1}}}})
        assert out["q"] == [{"s": 3}, {"s": 2}, {"s": 1}]

    def test_push_onto_non_array_fails(self, coll):
        coll.insert_one({"_id": 1, "a": 5})
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, {"$push": {"a": 1}})
        assert exc.value.code == 2

    def test_pull_value_and_condition(self, coll):
        out = apply(coll, {"a": [1, 2, 3, 2, 6, 7]}, {"$pull": {"a": 2}})
        assert out["a"] == [1, 3, 6, 7]
        coll.update_one({"_id": 1}, {"$pull": {"a": {"$gte": 6}}})
        assert coll.find_one({"_id": 1})["a"] == [1, 3]

    def test_pull_documents(self, coll):
        out = apply(coll, {"items": [{"n": "a", "q": 1}, {"n": "b", "q": 5}, {"n": "c", "q": 0}]},
                    {"$pull": {"items": {"q": {"$lt": 2}}}})
        assert out["items"] == [{"n": "b", "q": 5}]

    def test_pull_all(self, coll):
        assert apply(coll, {"a": [1, 2, 3, 1, 4]}, {"$pullAll": {"a": [1, 4]}}) == {"a": [2, 3]}

    def test_add_to_set(self, coll):
        out = apply(coll, {"a": [1, 2]}, {"$addToSet": {"a": 2}})
        assert out["a"] == [1, 2]
        coll.update_one({"_id": 1}, {"$addToSet": {"a": {"$each": [2, 3, 3, 4]}}})
        assert coll.find_one({"_id": 1})["a"] == [1, 2, 3, 4]

    def test_add_to_set_array_value_is_one_element(self, coll):
        assert apply(coll, {"a": [1]}, {"$addToSet": {"a": [2, 3]}}) == {"a": [1, [2, 3]]}

    def test_pop(self, coll):
        assert apply(coll, {"a": [1, 2, 3]}, {"$pop": {"a": 1}}) == {"a": [1, 2]}
        coll.update_one({"_id": 1}, {"$pop": {"a": -1}})
        assert coll.find_one({"_id": 1})["a"] == [2]


class TestPositional:
    def test_positional_dollar(self, coll):
        coll.insert_one({"_id": 1, "arr": [1, 2, 3]})
        coll.update_one({"arr": 2}, {"$set": {"arr.$": 20}})
        assert coll.find_one()["arr"] == [1, 20, 3]

    def test_positional_dollar_in_subdocs(self, coll):
        coll.insert_one({"_id": 1, "items": [{"n": "a", "q": 1}, {"n": "b", "q": 1}]})
        coll.update_one({"items.n": "b"}, {"$inc": {"items.$.q": 5}})
        assert coll.find_one()["items"] == [{"n": "a", "q": 1}, {"n": "b", "q": 6}]

    def test_positional_without_array_in_query_fails(self, coll):
        coll.insert_one({"_id": 1, "arr": [1, 2]})
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, {"$set": {"arr.$": 9}})
        assert exc.value.code == 2

    def test_all_positional(self, coll):
        coll.insert_one({"_id": 1, "arr": [1, 2, 3], "d": [{"v": 1}, {"v": 2}]})
        coll.update_one({"_id": 1}, {"$inc": {"arr.$[]": 10, "d.$[].v": 1}})
        doc = coll.find_one()
        assert doc["arr"] == [11, 12, 13]
        assert doc["d"] == [{"v": 2}, {"v": 3}]

    def test_filtered_positional(self, coll):
        coll.insert_one({"_id": 1, "grades": [{"s": 90}, {"s": 70}, {"s": 85}]})
        coll.update_one({"_id": 1}, {"$set": {"grades.$[g].ok": True}}, array_filters=[{"g.s": {"$gte": 80}}])
        assert coll.find_one()["grades"] == [{"s": 90, "ok": True}, {"s": 70}, {"s": 85, "ok": True}]

    def test_filtered_positional_scalars(self, coll):
        coll.insert_one({"_id": 1, "a": [1, 5, 2, 8]})
        coll.update_many({}, {"$set": {"a.$[x]": 0}}, array_filters=[{"x": {"$gt": 4}}])
        assert coll.find_one()["a"] == [1, 0, 2, 0]

    def test_unused_array_filter_fails(self, coll):
        coll.insert_one({"_id": 1, "a": [1]})
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, {"$set": {"a.$[x]": 0}},
                            array_filters=[{"x": 1}, {"y": 2}])
        assert exc.value.code == 9

    def test_update_numeric_index_path(self, coll):
        assert apply(coll, {"a": [1, 2, 3]}, {"$set": {"a.1": 9}}) == {"a": [1, 9, 3]}

    def test_set_index_past_end_pads_with_null(self, coll):
        assert apply(coll, {"a": [1]}, {"$set": {"a.3": 4}}) == {"a": [1, None, None, 4]}


class TestPipelineUpdate:
    def test_pipeline_set(self, coll):
        coll.insert_many([{"_id": 1, "a": 1, "b": 2}, {"_id": 2, "a": 10, "b": 20}])
        res = coll.update_many({}, [{"$set": {"c": {"$add": ["$a", "$b"]}}}, {"$unset": "b"}])
        assert res.modified_count == 2
        assert list(coll.find().sort("_id", 1)) == [{"_id": 1, "a": 1, "c": 3}, {"_id": 2, "a": 10, "c": 30}]

    def test_pipeline_upsert(self, coll):
        coll.update_one({"_id": 5}, [{"$set": {"x": {"$literal": "$notafield"}}}], upsert=True)
        assert coll.find_one({"_id": 5}) == {"_id": 5, "x": "$notafield"}


class TestUpdateErrors:
    def expect(self, coll, update, code, doc=None):
        coll.insert_one(doc or {"_id": 1, "s": "text", "a": 1})
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, update)
        assert exc.value.code == code, exc.value.details
        return exc.value

    def test_inc_on_string(self, coll):
        self.expect(coll, {"$inc": {"s": 1}}, 14)
        assert coll.find_one()["s"] == "text", "failed update must leave the doc untouched"

    def test_inc_non_numeric_argument(self, coll):
        self.expect(coll, {"$inc": {"a": "x"}}, 14)

    def test_conflicting_paths(self, coll):
        self.expect(coll, {"$set": {"a": 1}, "$inc": {"a": 1}}, 40)

    def test_conflicting_parent_child_paths(self, coll):
        self.expect(coll, {"$set": {"x.y": 1, "x": 2}}, 40)

    def test_unknown_modifier(self, coll):
        err = self.expect(coll, {"$foo": {"a": 1}}, 9)
        assert "Unknown modifier: $foo" in str(err)

    def test_change_id(self, coll):
        self.expect(coll, {"$set": {"_id": 2}}, 66)

    def test_replace_changing_id(self, coll):
        coll.insert_one({"_id": 1, "a": 1})
        with pytest.raises(WriteError) as exc:
            coll.replace_one({"_id": 1}, {"_id": 2, "a": 1})
        assert exc.value.code == 66

    def test_set_field_of_scalar(self, coll):
        # a.b where a is a number cannot be created
        self.expect(coll, {"$set": {"a.b": 1}}, 28)


def test_empty_set_is_noop(coll):
    coll.insert_one({"_id": 1})
    reply = coll.database.command("update", coll.name, updates=[{"q": {"_id": 1}, "u": {"$set": {}}}])
    # MongoDB 5.0+ accepts an empty $set as a no-op.
    assert reply.get("writeErrors") is None
    assert reply["n"] == 1 and reply["nModified"] == 0

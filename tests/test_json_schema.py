"""$jsonSchema in queries and collection validators: the MongoDB documentation's
examples with their documented results and errInfo, the keywords' JSON Schema meaning
as mongod implements it, and mongod's errors for schemas it refuses."""

import pytest
from bson.int64 import Int64
from pymongo.errors import OperationFailure, WriteError

# The $jsonSchema reference page's schema and inventory.
MYSCHEMA = {
    "required": ["item", "qty", "instock"],
    "properties": {
        "item": {"bsonType": "string"},
        "qty": {"bsonType": "int"},
        "size": {
            "bsonType": "object",
            "required": ["uom"],
            "properties": {
                "uom": {"bsonType": "string"},
                "h": {"bsonType": "double"},
                "w": {"bsonType": "double"},
            },
        },
        "instock": {"bsonType": "bool"},
    },
}

# Numbers typed in the shell are doubles: 14.0 here.
INVENTORY = [
    {"item": "journal", "qty": 25, "size": {"h": 14.0, "w": 21.0, "uom": "cm"}, "instock": True},
    {"item": "notebook", "qty": 50, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": True},
    {"item": "paper", "qty": 100, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": 1},
    {"item": "planner", "qty": 75, "size": {"h": 22.85, "w": 30.0, "uom": "cm"}, "instock": 1},
    {"item": "postcard", "qty": 45, "size": {"h": 10.0, "w": 15.25, "uom": "cm"}, "instock": True},
    {"item": "apple", "qty": 45, "status": "A", "instock": True},
    {"item": "pears", "qty": 50, "status": "A", "instock": True},
]

# The schema validation page's students validator.
STUDENTS = {
    "$jsonSchema": {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["address", "major", "name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "'name' must be a string and is required"},
            "year": {
                "bsonType": "int", "minimum": 2017, "maximum": 3017,
                "description": "'year' must be an integer in [ 2017, 3017 ] and is required",
            },
            "gpa": {"bsonType": ["double"], "description": "'gpa' must be a double if the field exists"},
        },
    }
}


def items(cursor):
    return [d["item"] for d in cursor]


class TestQueries:
    @pytest.fixture
    def inventory(self, coll):
        coll.insert_many([dict(d) for d in INVENTORY])
        return coll

    def test_documented_find_match_and_nor(self, inventory):
        want = ["journal", "notebook", "postcard", "apple", "pears"]
        assert items(inventory.find({"$jsonSchema": MYSCHEMA})) == want
        assert items(inventory.aggregate([{"$match": {"$jsonSchema": MYSCHEMA}}])) == want
        assert items(inventory.find({"$nor": [{"$jsonSchema": MYSCHEMA}]})) == ["paper", "planner"]
        assert inventory.count_documents({"$jsonSchema": MYSCHEMA}) == 5

    def test_combines_with_other_operators(self, inventory):
        assert items(inventory.find({"$jsonSchema": MYSCHEMA, "qty": {"$gt": 45}})) == ["notebook", "pears"]


def matching(coll, docs, schema):
    """The _ids of `docs` that satisfy `schema`."""
    coll.delete_many({})
    coll.insert_many([dict(d, _id=i) for i, d in enumerate(docs)])
    return [d["_id"] for d in coll.find({"$jsonSchema": schema}).sort("_id", 1)]


class TestKeywords:
    def test_restrictions_apply_only_to_their_type(self, coll):
        docs = [{"a": 5}, {"a": 50}, {"a": "x" * 20}, {"a": "xy"}, {"a": [1]}, {}]
        schema = {"properties": {"a": {"minimum": 10, "maxLength": 3}}}
        assert matching(coll, docs, schema) == [1, 3, 4, 5]

    def test_type_and_bson_type(self, coll):
        docs = [{"a": 1}, {"a": 1.5}, {"a": Int64(2)}, {"a": "s"}, {"a": None}, {"a": [1]}, {"a": {}}, {}]
        assert matching(coll, docs, {"properties": {"a": {"type": "number"}}}) == [0, 1, 2, 7]
        assert matching(coll, docs, {"properties": {"a": {"type": ["string", "null"]}}}) == [3, 4, 7]
        assert matching(coll, docs, {"properties": {"a": {"bsonType": "long"}}}) == [2, 7]
        assert matching(coll, docs, {"properties": {"a": {"type": "array"}}}) == [5, 7]
        assert matching(coll, docs, {"properties": {"a": {"bsonType": "object"}}}) == [6, 7]
        # The top-level schema describes documents: any other type matches nothing.
        assert matching(coll, docs, {"type": "object"}) == list(range(8))
        assert matching(coll, docs, {"bsonType": "array"}) == []

    def test_exclusive_bounds_and_multiple_of(self, coll):
        docs = [{"a": 0}, {"a": 5}, {"a": 10}, {"a": 7.5}, {"a": 2.5}]
        schema = {"properties": {"a": {"minimum": 0, "exclusiveMinimum": True,
                                       "maximum": 10, "exclusiveMaximum": False, "multipleOf": 2.5}}}
        assert matching(coll, docs, schema) == [1, 2, 3, 4]

    def test_no_implicit_array_traversal(self, coll):
        docs = [{"a": [{"b": 1}]}, {"a": {"b": 1}}, {"a": {"b": "x"}}]
        assert matching(coll, docs, {"properties": {"a": {"properties": {"b": {"type": "string"}}}}}) == [0, 2]

    def test_strings(self, coll):
        docs = [{"s": "abc"}, {"s": "ab"}, {"s": "xbc"}, {"s": "ééé"}]
        assert matching(coll, docs, {"properties": {"s": {"pattern": "^a", "minLength": 3}}}) == [0]
        assert matching(coll, docs, {"properties": {"s": {"maxLength": 3, "minLength": 3}}}) == [0, 2, 3]

    def test_arrays(self, coll):
        docs = [{"a": [1, 2]}, {"a": [1, 1]}, {"a": [1, "x"]}, {"a": []}, {"a": [1, 2, 3, 4]},
                {"a": [{"x": 1, "y": 2}, {"y": 2, "x": 1}]}]
        assert matching(coll, docs, {"properties": {"a": {"uniqueItems": True}}}) == [0, 2, 3, 4]
        assert matching(coll, docs, {"properties": {"a": {"items": {"type": "number"}}}}) == [0, 1, 3, 4]
        assert matching(coll, docs, {"properties": {"a": {"minItems": 1, "maxItems": 2}}}) == [0, 1, 2, 5]
        tuple_schema = {"items": [{"type": "number"}, {"type": "number"}], "additionalItems": False}
        assert matching(coll, docs, {"properties": {"a": tuple_schema}}) == [0, 1, 3]
        tuple_schema["additionalItems"] = {"minimum": 3}
        assert matching(coll, docs, {"properties": {"a": tuple_schema}}) == [0, 1, 3, 4]

    def test_objects(self, coll):
        docs = [{"a": 1}, {"a": 1, "b": 2}, {"a": 1, "x1": "s"}, {"a": 1, "x1": 5}, {"b": 1}]
        closed = {"properties": {"_id": {}, "a": {}}, "patternProperties": {"^x": {"type": "string"}},
                  "additionalProperties": False}
        assert matching(coll, docs, closed) == [0, 2]
        assert matching(coll, docs, {"minProperties": 3}) == [1, 2, 3]
        assert matching(coll, docs, {"maxProperties": 2}) == [0, 4]
        assert matching(coll, docs, {"required": ["a"], "additionalProperties": {"type": "number"}}) == [0, 1, 3]
        assert matching(coll, docs, {"dependencies": {"b": ["a"]}}) == [0, 1, 2, 3]
        assert matching(coll, docs, {"dependencies": {"a": {"required": ["x1"]}}}) == [2, 3, 4]

    def test_logical_and_enum(self, coll):
        docs = [{"a": 1}, {"a": 5}, {"a": 12}, {"a": "s"}]
        small, odd = {"properties": {"a": {"maximum": 6}}}, {"properties": {"a": {"enum": [1, 5, "s"]}}}
        assert matching(coll, docs, {"allOf": [small, odd]}) == [0, 1, 3]
        assert matching(coll, docs, {"anyOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"a": {"minimum": 10}}}]}) == [2, 3]
        assert matching(coll, docs, {"oneOf": [small, {"properties": {"a": {"minimum": 4}}}]}) == [0, 2]
        assert matching(coll, docs, {"not": odd}) == [2]
        assert matching(coll, docs, {"title": "t", "description": "d", "enum": [{"_id": 1, "a": 5}, 3]}) == [1]
        assert matching(coll, docs, {"enum": [1, 2]}) == []


class TestRefusedSchemas:
    @pytest.mark.parametrize("schema,code", [
        ({"$ref": "#/definitions/a"}, 9),
        ({"format": "email"}, 9),
        ({"nosuch": 1}, 9),
        ({"type": "object", "bsonType": "object"}, 9),
        ({"type": "integer"}, 9),
        ({"type": "date"}, 2),
        ({"bsonType": "nosuch"}, 2),
        ({"type": 1}, 14),
        ({"properties": 1}, 14),
        ({"properties": {"a": 1}}, 14),
        ({"required": []}, 9),
        ({"required": ["a", "a"]}, 9),
        ({"required": [1]}, 14),
        ({"minimum": "1"}, 14),
        ({"exclusiveMinimum": True}, 9),
        ({"maximum": 1, "exclusiveMaximum": 1}, 14),
        ({"multipleOf": 0}, 9),
        ({"minLength": -1}, 9),
        ({"maxItems": 1.5}, 9),
        ({"enum": []}, 9),
        ({"enum": [1, 1]}, 9),
        ({"anyOf": []}, 2),
        ({"allOf": [1]}, 14),
        ({"not": []}, 14),
        ({"items": 1}, 14),
        ({"additionalProperties": 1}, 14),
        ({"dependencies": {"a": []}}, 9),
        ({"dependencies": {"a": 1}}, 14),
        ({"title": 1}, 14),
        ({"uniqueItems": 1}, 14),
    ])
    def test_bad_schema(self, coll, schema, code):
        with pytest.raises(OperationFailure) as e:
            list(coll.find({"$jsonSchema": schema}))
        assert e.value.code == code

    def test_not_an_object(self, coll):
        with pytest.raises(OperationFailure) as e:
            list(coll.find({"$jsonSchema": [1]}))
        assert (e.value.code, e.value.details["errmsg"]) == (14, "$jsonSchema must be an object")

    def test_messages(self, coll):
        def message(schema):
            with pytest.raises(OperationFailure) as e:
                list(coll.find({"$jsonSchema": schema}))
            return e.value.details["errmsg"]
        assert message({"$ref": "x"}) == "$jsonSchema keyword '$ref' is not currently supported"
        assert message({"foo": 1}) == "Unknown $jsonSchema keyword: foo"
        assert message({"type": "integer"}) == "$jsonSchema type 'integer' is not currently supported."


class TestValidators:
    def test_documented_students_error(self, db):
        db.create_collection("students", validator=STUDENTS)
        doc = {"name": "Alice", "year": 2019, "major": "History", "gpa": 3,
               "address": {"city": "NYC", "street": "33rd Street"}}
        with pytest.raises(WriteError) as e:
            db.students.insert_one(doc)
        assert e.value.code == 121
        info = e.value.details["errInfo"]
        assert info["failingDocumentId"] == doc["_id"]
        assert info["details"] == {
            "operatorName": "$jsonSchema",
            "title": "Student Object Validation",
            "schemaRulesNotSatisfied": [{
                "operatorName": "properties",
                "propertiesNotSatisfied": [{
                    "propertyName": "gpa",
                    "description": "'gpa' must be a double if the field exists",
                    "details": [{
                        "operatorName": "bsonType",
                        "specifiedAs": {"bsonType": ["double"]},
                        "reason": "type did not match",
                        "consideredValue": 3,
                        "consideredType": "int",
                    }],
                }],
            }],
        }
        doc["gpa"] = 3.0
        del doc["_id"]
        db.students.insert_one(doc)
        assert db.students.count_documents({}) == 1

    def test_required_minimum_and_additional_properties(self, db):
        schema = {"required": ["a", "b"], "properties": {"_id": {}, "a": {"minimum": 5}, "b": {}},
                  "additionalProperties": False}
        db.create_collection("v", validator={"$jsonSchema": schema})
        with pytest.raises(WriteError) as e:
            db.v.insert_one({"_id": 1, "a": 3, "c": 1})
        assert e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"] == [
            {"operatorName": "properties", "propertiesNotSatisfied": [{
                "propertyName": "a",
                "details": [{"operatorName": "minimum", "specifiedAs": {"minimum": 5},
                             "reason": "comparison failed", "consideredValue": 3}]}]},
            {"operatorName": "additionalProperties", "specifiedAs": {"additionalProperties": False},
             "additionalProperties": ["c"]},
            {"operatorName": "required", "specifiedAs": {"required": ["a", "b"]}, "missingProperties": ["b"]},
        ]

    def test_enum_logical_and_collmod(self, db):
        db.create_collection("w")
        db.command("collMod", "w", validator={"$jsonSchema": {"properties": {
            "s": {"enum": ["A", "B"]}, "n": {"not": {"type": "string"}}}}})
        db.w.insert_one({"s": "A", "n": 1})
        with pytest.raises(WriteError) as e:
            db.w.insert_one({"_id": 2, "s": "C", "n": "x"})
        failed = e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"][0]["propertiesNotSatisfied"]
        assert failed == [
            {"propertyName": "s", "details": [{"operatorName": "enum", "specifiedAs": {"enum": ["A", "B"]},
                                               "reason": "value was not found in enum", "consideredValue": "C"}]},
            {"propertyName": "n", "details": [{"operatorName": "not", "reason": "child expression matched"}]},
        ]

    def test_bad_schema_refuses_the_validator(self, db):
        with pytest.raises(OperationFailure) as e:
            db.create_collection("x", validator={"$jsonSchema": {"bsonType": "object", "$ref": "y"}})
        assert e.value.code == 9

    def test_exclusive_bound_sorted_missing_and_pattern_properties(self, db):
        schema = {
            "required": ["z", "y", "a"],
            "properties": {"a": {"minimum": 0, "exclusiveMinimum": True}},
            "patternProperties": {"^n": {"type": "number"}},
        }
        db.create_collection("p", validator={"$jsonSchema": schema})
        with pytest.raises(WriteError) as e:
            db.p.insert_one({"_id": 1, "a": 0, "n1": "x", "n2": "y"})
        assert e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"] == [
            {"operatorName": "properties", "propertiesNotSatisfied": [{
                "propertyName": "a",
                "details": [{"operatorName": "minimum",
                             "specifiedAs": {"minimum": 0, "exclusiveMinimum": True},
                             "reason": "comparison failed", "consideredValue": 0}]}]},
            {"operatorName": "patternProperties", "details": [{
                "propertyName": "n1", "regexMatched": "^n",
                "details": [{"operatorName": "type", "specifiedAs": {"type": "number"},
                             "reason": "type did not match", "consideredValue": "x",
                             "consideredType": "string"}]}]},
            {"operatorName": "required", "specifiedAs": {"required": ["z", "y", "a"]},
             "missingProperties": ["y", "z"]},
        ]

    def test_items_and_logical_details(self, db):
        schema = {"properties": {"tags": {"items": {"type": "string"}, "maxItems": 2}},
                  "anyOf": [{"required": ["x"]}, {"required": ["y"]}]}
        db.create_collection("q", validator={"$jsonSchema": schema})
        with pytest.raises(WriteError) as e:
            db.q.insert_one({"_id": 1, "tags": ["a", 1, 2]})
        rules = e.value.details["errInfo"]["details"]["schemaRulesNotSatisfied"]
        assert rules[0] == {"operatorName": "properties", "propertiesNotSatisfied": [{
            "propertyName": "tags",
            "details": [
                {"operatorName": "maxItems", "specifiedAs": {"maxItems": 2},
                 "reason": "array did not match specified length", "consideredValue": ["a", 1, 2],
                 "numberOfItems": 3},
                {"operatorName": "items", "reason": "At least one item did not match the sub-schema",
                 "itemIndex": 1,
                 "details": [{"operatorName": "type", "specifiedAs": {"type": "string"},
                              "reason": "type did not match", "consideredValue": 1, "consideredType": "int"}]},
            ]}]}
        assert rules[1] == {"operatorName": "anyOf", "schemasNotSatisfied": [
            {"index": 0, "details": [{"operatorName": "required", "specifiedAs": {"required": ["x"]},
                                      "missingProperties": ["x"]}]},
            {"index": 1, "details": [{"operatorName": "required", "specifiedAs": {"required": ["y"]},
                                      "missingProperties": ["y"]}]},
        ]}

"""Collection validators: validator / validationLevel / validationAction set by create
and collMod, enforced on insert, update, replace, upsert and findAndModify, skipped
with bypassDocumentValidation; failures are 121 DocumentValidationFailure."""

import pytest
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, WriteError


def test_insert_is_validated_unless_bypassed(db):
    db.create_collection("v", validator={"a": {"$exists": True}})
    with pytest.raises(WriteError) as exc:
        db.v.insert_one({"_id": 1, "x": 1})
    assert exc.value.code == 121
    assert exc.value.details["errmsg"] == "Document failed validation"
    assert exc.value.details["errInfo"]["failingDocumentId"] == 1
    db.v.insert_one({"_id": 1, "x": 1}, bypass_document_validation=True)
    db.v.insert_one({"_id": 2, "a": 0})
    assert sorted(d["_id"] for d in db.v.find()) == [1, 2]


def test_ordered_and_unordered_inserts_report_the_failing_documents(db):
    db.create_collection("v", validator={"a": {"$gte": 0}})
    with pytest.raises(BulkWriteError) as exc:
        db.v.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": -1}, {"_id": 3, "a": 3}])
    assert [(e["index"], e["code"]) for e in exc.value.details["writeErrors"]] == [(1, 121)]
    assert [d["_id"] for d in db.v.find()] == [1]
    with pytest.raises(BulkWriteError) as exc:
        db.v.insert_many([{"_id": 4, "a": -1}, {"_id": 5, "a": 5}, {"_id": 6, "a": -6}], ordered=False)
    assert [e["index"] for e in exc.value.details["writeErrors"]] == [0, 2]
    assert sorted(d["_id"] for d in db.v.find()) == [1, 5]


def test_updates_replacements_and_upserts_are_validated(db):
    db.create_collection("v", validator={"z": {"$gte": 0}})
    db.v.insert_one({"_id": 1, "z": 5})
    with pytest.raises(WriteError) as exc:
        db.v.update_one({"_id": 1}, {"$inc": {"z": -10}})
    assert exc.value.code == 121
    with pytest.raises(WriteError):
        db.v.replace_one({"_id": 1}, {"z": -1})
    with pytest.raises(WriteError):
        db.v.update_one({"_id": 9}, {"$set": {"z": -1}}, upsert=True)
    with pytest.raises(OperationFailure) as exc:
        db.v.find_one_and_update({"_id": 1}, {"$set": {"z": -3}})
    assert exc.value.code == 121 and exc.value.details["codeName"] == "DocumentValidationFailure"
    assert db.v.find_one({"_id": 1}) == {"_id": 1, "z": 5}
    db.v.update_one({"_id": 1}, {"$inc": {"z": -10}}, bypass_document_validation=True)
    db.command("findAndModify", "v", query={"_id": 1}, update={"$set": {"z": -6}},
               bypassDocumentValidation=True)
    assert db.v.find_one({"_id": 1}) == {"_id": 1, "z": -6}
    with pytest.raises(BulkWriteError):
        db.v.bulk_write([InsertOne({"z": 1}), UpdateOne({"z": 1}, {"$set": {"z": -1}})])
    db.v.bulk_write([UpdateOne({"z": 1}, {"$set": {"z": -1}})], bypass_document_validation=True)


def test_moderate_level_skips_documents_that_were_already_invalid(db):
    db.create_collection("v")
    db.v.insert_many([{"_id": 1, "z": -1}, {"_id": 2, "z": 1}])
    db.command("collMod", "v", validator={"z": {"$gte": 0}}, validationLevel="moderate")
    db.v.update_one({"_id": 1}, {"$set": {"z": -2}})      # was invalid: not checked
    with pytest.raises(WriteError):
        db.v.update_one({"_id": 2}, {"$set": {"z": -2}})  # was valid: checked
    db.command("collMod", "v", validationLevel="off")
    db.v.update_one({"_id": 2}, {"$set": {"z": -2}})
    db.command("collMod", "v", validationLevel="strict", validationAction="warn")
    db.v.insert_one({"_id": 3, "z": -3})                 # warn: logged, written
    assert db.v.count_documents({}) == 3


def test_bad_validation_options_are_refused(db):
    with pytest.raises(OperationFailure) as exc:
        db.create_collection("v", validator={"a": {"$bogus": 1}})
    assert exc.value.code == 2
    with pytest.raises(OperationFailure) as exc:
        db.create_collection("v", validationLevel="sometimes")
    assert exc.value.code == 2
    with pytest.raises(OperationFailure) as exc:
        db.create_collection("v", validationAction=1)
    assert exc.value.code == 14
    db.create_collection("v")
    with pytest.raises(OperationFailure) as exc:
        db.command("collMod", "v", validator=5)
    assert exc.value.code == 14
    assert "v" in db.list_collection_names()


# errInfo.details, as mongod 5.0+ explains a failure (its jstests/core/doc_validation/
# doc_validation_error.js and doc_validation_error_test.cpp).

def failure_details(write):
    with pytest.raises((WriteError, OperationFailure)) as exc:
        write()
    assert exc.value.code == 121
    return exc.value.details["errInfo"]


def test_details_of_a_failed_insert_name_the_clauses_not_satisfied(db):
    import re
    validator = {"$or": [
        {"phone": {"$type": "string"}},
        {"email": {"$regex": re.compile(r"@mongodb\.com$")}},
        {"status": {"$in": ["Unknown", "Incomplete"]}},
    ]}
    db.create_collection("contacts", validator=validator)
    info = failure_details(lambda: db.contacts.insert_one({"_id": 7, "email": "info@mongodb.co"}))
    assert info["failingDocumentId"] == 7
    details = info["details"]
    assert details["operatorName"] == "$or"
    clauses = details["clausesNotSatisfied"]
    assert [c["index"] for c in clauses] == [0, 1, 2]
    assert clauses[0]["details"] == {
        "operatorName": "$type", "specifiedAs": {"phone": {"$type": "string"}},
        "reason": "field was missing"}
    assert clauses[1]["details"]["operatorName"] == "$regex"
    assert clauses[1]["details"]["reason"] == "regular expression did not match"
    assert clauses[1]["details"]["consideredValue"] == "info@mongodb.co"
    assert clauses[2]["details"] == {
        "operatorName": "$in", "specifiedAs": {"status": {"$in": ["Unknown", "Incomplete"]}},
        "reason": "field was missing"}


def test_details_of_an_implicit_and_list_only_the_failing_operators(db):
    db.create_collection("v", validator={"a": {"$gt": 0, "$lt": 10}, "b": {"$exists": True}})
    details = failure_details(lambda: db.v.insert_one({"a": 11, "b": 1}))["details"]
    assert details == {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
        "operatorName": "$lt", "specifiedAs": {"a": {"$lt": 10}},
        "reason": "comparison failed", "consideredValue": 11}}]}


def test_details_of_negations_report_what_matched(db):
    db.create_collection("v", validator={"$nor": [{"a": {"$gt": 10}}, {"b": {"$ne": 1}}]})
    details = failure_details(lambda: db.v.insert_one({"a": 9, "b": 2}))["details"]
    assert details == {"operatorName": "$nor", "clausesSatisfied": [{"index": 1, "details": {
        "operatorName": "$ne", "specifiedAs": {"b": {"$ne": 1}},
        "reason": "comparison failed", "consideredValue": 2}}]}


def test_details_of_expr_carry_its_result(db):
    # "Duplicate check in an array" of mongod's doc_validation_error.js.
    validator = {"$expr": {"$eq": [{"$size": "$a.b"}, {"$size": {"$setUnion": "$a.b"}}]}}
    db.create_collection("v", validator=validator)
    details = failure_details(lambda: db.v.insert_one({"a": [{"b": 1}, {"b": 1}]}))["details"]
    assert details == {"operatorName": "$expr", "specifiedAs": validator,
                       "reason": "expression did not match", "expressionResult": False}


def test_details_of_failed_updates_and_find_and_modify(db):
    db.create_collection("v", validator={"z": {"$gte": 0}})
    db.v.insert_one({"_id": 1, "z": 5})
    expected = {"operatorName": "$gte", "specifiedAs": {"z": {"$gte": 0}},
                "reason": "comparison failed", "consideredValue": -5}
    info = failure_details(lambda: db.v.update_one({"_id": 1}, {"$inc": {"z": -10}}))
    assert info == {"failingDocumentId": 1, "details": expected}
    info = failure_details(lambda: db.v.find_one_and_update({"_id": 1}, {"$set": {"z": -5}}))
    assert info == {"failingDocumentId": 1, "details": expected}
    with pytest.raises(BulkWriteError) as exc:
        db.v.insert_many([{"_id": 2, "z": 1}, {"_id": 3, "z": [-1, -2]}])
    (error,) = exc.value.details["writeErrors"]
    assert error["errInfo"]["details"] == {
        "operatorName": "$gte", "specifiedAs": {"z": {"$gte": 0}},
        "reason": "comparison failed", "consideredValues": [-1, -2]}


def test_details_too_large_to_send_are_truncated(db):
    # mongod's limit is 12 MB: the quoted value goes, the explanation stays.
    db.create_collection("v", validator={"a": {"$type": "int"}})
    info = failure_details(lambda: db.v.insert_one({"_id": 1, "a": "x" * (13 << 20)}))
    assert info == {"failingDocumentId": 1, "truncated": True, "details": {
        "operatorName": "$type", "reason": "type did not match", "consideredType": "string"}}

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

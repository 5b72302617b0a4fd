#!/usr/bin/env python3
"""Probes a running server for every aggregation stage, expression, accumulator,
window function, query and update operator, and command of MongoDB 7.0's reference,
and writes the status table of QUERY-LANGUAGE.md (issue 31).

An item counts as missing when the server answers with the error mongod gives for a
name it does not know (unrecognized stage 40324, unrecognized expression 168, unknown
group operator 15952, unknown window function, unknown query or update operator,
no such command 59); any other answer, an error about the arguments included, means
the server knows the name. The table is generated, not written by hand, so it cannot
claim more than the server does.

    python3 conformance/language_status.py --uri mongodb://127.0.0.1:27017 > /tmp/status.md

Needs pymongo (the test virtual environment has it).
"""

from __future__ import annotations

import argparse
import sys

import pymongo
from pymongo.errors import OperationFailure

# MongoDB 7.0's reference (https://www.mongodb.com/docs/v7.0/reference/operator/ and
# /reference/command/), by kind. Atlas-only stages ($search, $searchMeta,
# $vectorSearch, $listSearchIndexes) and sharding-only ones are listed with their reason.
STAGES = [
    "$addFields", "$bucket", "$bucketAuto", "$changeStream", "$changeStreamSplitLargeEvent",
    "$collStats", "$count", "$currentOp", "$densify", "$documents", "$facet", "$fill",
    "$geoNear", "$graphLookup", "$group", "$indexStats", "$limit", "$listLocalSessions",
    "$listSampledQueries", "$listSessions", "$lookup", "$match", "$merge", "$out",
    "$planCacheStats", "$project", "$redact", "$replaceRoot", "$replaceWith", "$sample",
    "$set", "$setWindowFields", "$skip", "$sort", "$sortByCount", "$unionWith", "$unset",
    "$unwind",
]
NOT_PROBED_STAGES = {
    "$search": "Atlas Search only",
    "$searchMeta": "Atlas Search only",
    "$vectorSearch": "Atlas only",
    "$listSearchIndexes": "Atlas Search only",
    "$shardedDataDistribution": "sharded clusters only (the router issue)",
}
# Stages that run on the admin database, at the start of a database-level aggregate.
ADMIN_STAGES = {"$currentOp", "$listLocalSessions", "$listSessions", "$listSampledQueries",
                "$documents"}

EXPRESSIONS = [
    "$abs", "$acos", "$acosh", "$add", "$allElementsTrue", "$and", "$anyElementTrue",
    "$arrayElemAt", "$arrayToObject", "$asin", "$asinh", "$atan", "$atan2", "$atanh",
    "$avg", "$binarySize", "$bitAnd", "$bitNot", "$bitOr", "$bitXor", "$bsonSize", "$ceil",
    "$cmp", "$concat", "$concatArrays", "$cond", "$convert", "$cos", "$cosh", "$dateAdd",
    "$dateDiff", "$dateFromParts", "$dateFromString", "$dateSubtract", "$dateToParts",
    "$dateToString", "$dateTrunc", "$dayOfMonth", "$dayOfWeek", "$dayOfYear",
    "$degreesToRadians", "$divide", "$eq", "$exp", "$filter", "$first", "$firstN", "$floor",
    "$function", "$getField", "$gt", "$gte", "$hour", "$ifNull", "$in", "$indexOfArray",
    "$indexOfBytes", "$indexOfCP", "$isArray", "$isNumber", "$isoDayOfWeek", "$isoWeek",
    "$isoWeekYear", "$last", "$lastN", "$let", "$literal", "$ln", "$log", "$log10", "$lt",
    "$lte", "$ltrim", "$map", "$max", "$maxN", "$median", "$mergeObjects", "$meta", "$min",
    "$minN", "$millisecond", "$minute", "$mod", "$month", "$multiply", "$ne", "$not",
    "$objectToArray", "$or", "$percentile", "$pow", "$radiansToDegrees", "$rand", "$range",
    "$reduce", "$regexFind", "$regexFindAll", "$regexMatch", "$replaceAll", "$replaceOne",
    "$reverseArray", "$round", "$rtrim", "$second", "$setDifference", "$setEquals",
    "$setField", "$setIntersection", "$setIsSubset", "$setUnion", "$size", "$sin", "$sinh",
    "$slice", "$sortArray", "$split", "$sqrt", "$stdDevPop", "$stdDevSamp", "$strcasecmp",
    "$strLenBytes", "$strLenCP", "$substr", "$substrBytes", "$substrCP", "$subtract", "$sum",
    "$switch", "$tan", "$tanh", "$toBool", "$toDate", "$toDecimal", "$toDouble", "$toInt",
    "$toLong", "$toLower", "$toObjectId", "$toString", "$toUpper", "$trim", "$trunc",
    "$tsIncrement", "$tsSecond", "$type", "$unsetField", "$week", "$year", "$zip",
]
ACCUMULATORS = [
    "$accumulator", "$addToSet", "$avg", "$bottom", "$bottomN", "$count", "$first",
    "$firstN", "$last", "$lastN", "$max", "$maxN", "$median", "$mergeObjects", "$min",
    "$minN", "$percentile", "$push", "$stdDevPop", "$stdDevSamp", "$sum", "$top", "$topN",
]
WINDOW_ONLY = [
    "$covariancePop", "$covarianceSamp", "$denseRank", "$derivative", "$documentNumber",
    "$expMovingAvg", "$integral", "$linearFill", "$locf", "$rank", "$shift",
]
FIELD_QUERY_OPERATORS = [
    "$eq", "$gt", "$gte", "$in", "$lt", "$lte", "$ne", "$nin", "$not", "$exists", "$type",
    "$mod", "$regex", "$geoIntersects", "$geoWithin", "$near", "$nearSphere", "$all",
    "$elemMatch", "$size", "$bitsAllClear", "$bitsAllSet", "$bitsAnyClear", "$bitsAnySet",
]
TOP_QUERY_OPERATORS = ["$and", "$or", "$nor", "$expr", "$jsonSchema", "$text", "$where",
                       "$comment", "$sampleRate"]
UPDATE_OPERATORS = ["$currentDate", "$inc", "$min", "$max", "$mul", "$rename", "$set",
                    "$setOnInsert", "$unset", "$addToSet", "$pop", "$pull", "$push",
                    "$pullAll", "$bit"]
COMMANDS = [
    "aggregate", "count", "distinct", "mapReduce", "delete", "find", "findAndModify",
    "getMore", "insert", "update", "abortTransaction", "commitTransaction", "endSessions",
    "killAllSessions", "killAllSessionsByPattern", "killSessions", "refreshSessions",
    "startSession", "create", "createIndexes", "drop", "dropDatabase", "dropIndexes",
    "listCollections", "listDatabases", "listIndexes", "renameCollection", "collMod",
    "compact", "convertToCapped", "cloneCollectionAsCapped", "currentOp", "killOp",
    "killCursors", "fsync", "fsyncUnlock", "getParameter", "setParameter", "logRotate",
    "getLog", "serverStatus", "dbStats", "collStats", "dataSize", "dbHash", "buildInfo",
    "hostInfo", "hello", "isMaster", "ping", "whatsmyuri", "connectionStatus",
    "getCmdLineOpts", "listCommands", "lockInfo", "top", "validate", "explain", "profile",
    "setDefaultRWConcern", "getDefaultRWConcern", "setFeatureCompatibilityVersion",
    "filemd5", "reIndex", "planCacheClear", "planCacheClearFilters",
    "planCacheListFilters", "planCacheSetFilter", "applyOps",
]
NOT_PROBED_COMMANDS = {
    "shutdown": "not probed (it would stop the server); implemented",
    "replSetInitiate": "replica sets: issue 27", "replSetGetStatus": "replica sets: issue 27",
    "replSetGetConfig": "replica sets: issue 27", "replSetReconfig": "replica sets: issue 27",
    "replSetStepDown": "replica sets: issue 27", "replSetFreeze": "replica sets: issue 27",
    "createUser": "authentication: issue 29", "updateUser": "authentication: issue 29",
    "dropUser": "authentication: issue 29", "usersInfo": "authentication: issue 29",
    "createRole": "authentication: issue 29", "rolesInfo": "authentication: issue 29",
    "grantRolesToUser": "authentication: issue 29", "saslStart": "authentication: issue 29",
    "setIndexCommitQuorum": "replica sets: issue 27",
    "cleanupOrphaned": "sharded clusters only (the router issue)",
    "analyzeShardKey": "sharded clusters only (the router issue)",
}
# Accumulators mongod 7.0 does not take as window functions either.
NOT_WINDOW = {"$accumulator", "$mergeObjects"}

DB = "language_status_probe"


def failure(fn) -> OperationFailure | None:
    try:
        fn()
        return None
    except OperationFailure as e:
        return e


def unknown(e: OperationFailure | None, codes: set[int], words: tuple[str, ...] = ()) -> bool:
    if e is None:
        return False
    if e.code in codes:
        return True
    msg = str(e.details.get("errmsg", "")) if e.details else str(e)
    return any(w in msg for w in words)


def probe_stage(db, admin, name: str) -> bool:
    # One aggregate command, its cursor never iterated ($changeStream's never ends).
    if name in ADMIN_STAGES:
        e = failure(lambda: admin.command("aggregate", 1, pipeline=[{name: {}}], cursor={}))
    else:
        e = failure(lambda: db.command("aggregate", "probe", pipeline=[{name: {}}], cursor={}))
    return not unknown(e, {40324}, ("Unrecognized pipeline stage",))


def probe_expression(db, name: str) -> bool:
    e = failure(lambda: list(db.probe.aggregate([{"$project": {"x": {name: []}}}])))
    return not unknown(e, {168}, ("Unrecognized expression",))


def probe_accumulator(db, name: str) -> bool:
    e = failure(lambda: list(db.probe.aggregate([{"$group": {"_id": None, "x": {name: "$a"}}}])))
    return not unknown(e, {15952}, ("unknown group operator",))


def probe_window(db, name: str) -> bool:
    stage = {"$setWindowFields": {"sortBy": {"a": 1}, "output": {"x": {name: {}}}}}
    e = failure(lambda: list(db.probe.aggregate([stage])))
    return not unknown(e, {40324}, ("Unrecognized window function",))


def probe_field_query(db, name: str) -> bool:
    e = failure(lambda: list(db.probe.find({"a": {name: 1}})))
    return not unknown(e, set(), ("unknown operator",))


def probe_top_query(db, name: str) -> bool:
    e = failure(lambda: list(db.probe.find({name: 1})))
    return not unknown(e, set(), ("unknown top level operator",))


def probe_update(db, name: str) -> bool:
    e = failure(lambda: db.probe.update_one({"_id": 0}, {name: {"z": 1}}))
    return not unknown(e, set(), ("Unknown modifier",))


def probe_command(db, name: str) -> bool:
    e = failure(lambda: db.command({name: 1}))
    return not unknown(e, {59}, ("no such command",))


def rows(kind: str, names, probe, not_probed=None) -> list[str]:
    out = []
    for n in names:
        out.append(f"| {kind} | `{n}` | {'yes' if probe(n) else '**no**'} |")
    for n, why in (not_probed or {}).items():
        out.append(f"| {kind} | `{n}` | {why} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uri", default="mongodb://127.0.0.1:27017")
    args = ap.parse_args()
    client = pymongo.MongoClient(args.uri)
    db = client[DB]
    db.probe.drop()
    db.probe.insert_one({"_id": 0, "a": 1})
    admin = client.admin
    # Each probe must tell a name the server does not know: a made-up one, per kind.
    bogus = "$noSuchOperatorAnywhere"
    checks = {
        "stage": lambda: probe_stage(db, admin, bogus),
        "expression": lambda: probe_expression(db, bogus),
        "accumulator": lambda: probe_accumulator(db, bogus),
        "window function": lambda: probe_window(db, bogus),
        "query operator": lambda: probe_field_query(db, bogus),
        "query operator (top level)": lambda: probe_top_query(db, bogus),
        "update operator": lambda: probe_update(db, bogus),
        "command": lambda: probe_command(db, "noSuchCommandAnywhere"),
    }
    blind = [kind for kind, check in checks.items() if check()]
    if blind:
        print(f"the probes cannot tell an unknown name for: {', '.join(blind)}", file=sys.stderr)
        return 1
    table = ["| kind | name | here |", "|---|---|:-:|"]
    table += rows("stage", STAGES, lambda n: probe_stage(db, admin, n), NOT_PROBED_STAGES)
    table += rows("expression", EXPRESSIONS, lambda n: probe_expression(db, n))
    table += rows("accumulator ($group)", ACCUMULATORS, lambda n: probe_accumulator(db, n))
    windows = WINDOW_ONLY + [a for a in ACCUMULATORS if a not in NOT_WINDOW]
    table += rows("window function", windows, lambda n: probe_window(db, n),
                  {a: "not a window function in 7.0 either (refused as mongod does)"
                   for a in sorted(NOT_WINDOW)})
    table += rows("query operator", FIELD_QUERY_OPERATORS, lambda n: probe_field_query(db, n))
    table += rows("query operator (top level)", TOP_QUERY_OPERATORS,
                  lambda n: probe_top_query(db, n))
    table += rows("update operator", UPDATE_OPERATORS, lambda n: probe_update(db, n))
    table += rows("command", COMMANDS, lambda n: probe_command(db, n), NOT_PROBED_COMMANDS)
    client.drop_database(DB)
    missing = sum(1 for r in table[2:] if "**no**" in r)
    probed = sum(1 for r in table[2:] if r.endswith("| yes |") or "**no**" in r)
    print(f"{probed - missing} of {probed} probed names known; missing: {missing}.\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())

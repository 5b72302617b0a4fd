"""An update event's description, applied to the document before, gives the document after.

Seeded random updates (operators on nested fields and arrays, replacement-free pipeline
updates) on a few documents; after each one the stream's update event is applied to a
copy of the previous version, as a consumer that keeps a replica would do, and the copy
must equal the stored document. This checks `updatedFields` (dotted paths, array
indexes), `removedFields` and `truncatedArrays` against what the server really wrote.
"""

import copy
import random

import pytest
from pymongo.errors import WriteError

from conftest import next_event

SEEDS = range(6)
UPDATES_PER_SEED = 80
FIELDS = ["a", "b", "c", "d"]
# PathNotViable (a path through a scalar), TypeMismatch ($push/$pop/$pull on a path
# that is no array any more), ConflictingUpdateOperators (two paths of one update
# that overlap).
REFUSED = {28, 14, 40}


def random_value(rng, depth=0):
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.randrange(-5, 100)
    if kind == 1:
        return rng.choice(["x", "yy", "", "zzz"])
    if kind == 2:
        return rng.choice([None, True, 1.5])
    if kind == 3:
        return rng.randrange(3)
    if kind in (4, 5):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(FIELDS): random_value(rng, depth + 1) for _ in range(rng.randrange(1, 4))}


def existing_paths(doc, prefix=""):
    """Dotted paths into `doc` (object fields and array indexes), without `_id`."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for k, v in items:
        if prefix == "" and k == "_id":
            continue
        path = f"{prefix}{k}"
        out.append(path)
        if isinstance(v, (dict, list)):
            out += existing_paths(v, path + ".")
    return out


def random_update(rng, doc):
    paths = existing_paths(doc)
    arrays = [p for p in paths if isinstance(get_path(doc, p), list)]
    numbers = [p for p in paths if type(get_path(doc, p)) is int]
    new_field = rng.choice(FIELDS) + (f".{rng.choice(FIELDS)}" if rng.random() < 0.3 else "")
    choice = rng.randrange(9)
    if choice == 0 or not paths:
        return {"$set": {new_field: random_value(rng)}}
    if choice == 1:
        return {"$set": {rng.choice(paths): random_value(rng)}}
    if choice == 2:
        return {"$unset": {rng.choice(paths): ""}}
    if choice == 3 and numbers:
        return {"$inc": {rng.choice(numbers): rng.randrange(1, 5)}}
    if choice == 4 and arrays:
        return {"$push": {rng.choice(arrays): {"$each": [random_value(rng)] * rng.randrange(1, 3)}}}
    if choice == 5 and arrays:
        return {"$pop": {rng.choice(arrays): rng.choice([1, -1])}}
    if choice == 6 and arrays:
        return {"$pull": {rng.choice(arrays): {"$in": [0, 1, 2, "x", None]}}}
    if choice == 7 and arrays:
        # A pipeline update that shortens an array (mongod reports truncatedArrays).
        p = rng.choice(arrays)
        return [{"$set": {p: {"$slice": [f"${p}", rng.randrange(3)]}}}]
    return {"$set": {new_field: random_value(rng), rng.choice(FIELDS): random_value(rng)}}


def get_path(doc, path):
    cur = doc
    for part in path.split("."):
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


def set_path(doc, path, value):
    parts = path.split(".")
    cur = doc
    for part in parts[:-1]:
        cur = cur[int(part)] if isinstance(cur, list) else cur.setdefault(part, {})
    last = parts[-1]
    if isinstance(cur, list):
        i = int(last)
        while len(cur) <= i:
            cur.append(None)
        cur[i] = value
    else:
        cur[last] = value


def unset_path(doc, path):
    parts = path.split(".")
    cur = doc
    for part in parts[:-1]:
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    if isinstance(cur, list):
        cur[int(parts[-1])] = None
    else:
        del cur[parts[-1]]


def apply_description(doc, desc):
    """What a replica does with an update event (the change-events documentation's
    reading of the fields)."""
    new = copy.deepcopy(doc)
    for t in desc.get("truncatedArrays", []):
        arr = get_path(new, t["field"])
        del arr[t["newSize"]:]
    for path in desc.get("removedFields", []):
        unset_path(new, path)
    for path, value in desc.get("updatedFields", {}).items():
        set_path(new, path, value)
    return new


@pytest.mark.parametrize("seed", SEEDS)
def test_update_descriptions_rebuild_the_documents(db, seed):
    rng = random.Random(seed)
    coll = db.docs
    model = {}
    for i in range(4):
        doc = {"_id": i, **{f: random_value(rng) for f in rng.sample(FIELDS, 3)}}
        coll.insert_one(doc)
        model[i] = doc
    applied = refused = 0
    with coll.watch() as stream:
        for n in range(UPDATES_PER_SEED):
            i = rng.randrange(4)
            update = random_update(rng, model[i])
            try:
                result = coll.update_one({"_id": i}, update)
            except WriteError as e:
                # E.g. a path through a scalar ("a.b" where a is 1): refused, nothing written.
                assert e.code in REFUSED, (seed, n, update, e.details)
                refused += 1
                assert coll.find_one({"_id": i}) == model[i]
                continue
            stored = coll.find_one({"_id": i})
            if result.modified_count == 0:
                assert stored == model[i], (seed, n, update)
                continue
            event = next_event(stream)
            assert event["documentKey"] == {"_id": i}, (seed, n, update, event)
            assert event["operationType"] == "update", (seed, n, update, event)
            rebuilt = apply_description(model[i], event["updateDescription"])
            assert rebuilt == stored, (seed, n, update, event["updateDescription"], model[i])
            model[i] = stored
            applied += 1
    # Most updates changed something, so the comparison ran many times.
    assert applied > UPDATES_PER_SEED // 2, (applied, refused)

"""The mapReduce command (deprecated in MongoDB 5.0, still in 7.0; pymongo 4 has no
helper for it, so it runs through db.command as mongoengine's map_reduce does): the
documentation's examples with their answers, the output modes, the reduce called
again on reduced values, and mongod's errors."""

import datetime

import pytest
from bson import Code, SON
from pymongo.errors import OperationFailure

from conftest import next_event

# The orders collection of the manual's "Map-Reduce Examples".
ORDERS = [
    (1, "Ant O. Knee", "2020-03-01", 25, [("oranges", 5, 2.5), ("apples", 5, 2.5)]),
    (2, "Ant O. Knee", "2020-03-08", 70, [("oranges", 8, 2.5), ("chocolates", 5, 10)]),
    (3, "Busby Bee", "2020-03-08", 50, [("oranges", 10, 2.5), ("pears", 10, 2.5)]),
    (4, "Busby Bee", "2020-03-18", 25, [("oranges", 10, 2.5)]),
    (5, "Busby Bee", "2020-03-19", 50, [("chocolates", 5, 10)]),
    (6, "Cam Elot", "2020-03-19", 35, [("carrots", 10, 1.0), ("apples", 10, 2.5)]),
    (7, "Cam Elot", "2020-03-20", 25, [("oranges", 10, 2.5)]),
    (8, "Don Quis", "2020-03-20", 75, [("chocolates", 5, 10), ("apples", 10, 2.5)]),
    (9, "Don Quis", "2020-03-20", 55,
     [("carrots", 5, 1.0), ("apples", 10, 2.5), ("oranges", 10, 2.5)]),
    (10, "Don Quis", "2020-03-23", 25, [("oranges", 10, 2.5)]),
]

MAP_PRICE = "function() { emit(this.cust_id, this.price); }"
REDUCE_SUM = "function(keyCustId, valuesPrices) { return Array.sum(valuesPrices); }"

MAP_ITEMS = """function() {
    for (var idx = 0; idx < this.items.length; idx++) {
        var key = this.items[idx].sku;
        var value = { count: 1, qty: this.items[idx].qty };
        emit(key, value);
    }
}"""
REDUCE_ITEMS = """function(keySKU, countObjVals) {
    var reducedVal = { count: 0, qty: 0 };
    for (var idx = 0; idx < countObjVals.length; idx++) {
        reducedVal.count += countObjVals[idx].count;
        reducedVal.qty += countObjVals[idx].qty;
    }
    return reducedVal;
}"""
FINALIZE_AVG = """function(key, reducedVal) {
    reducedVal.avg = reducedVal.qty / reducedVal.count;
    return reducedVal;
}"""

PRICE_TOTALS = {"Ant O. Knee": 95, "Busby Bee": 125, "Cam Elot": 60, "Don Quis": 155}
ITEM_AVERAGES = {
    "apples": {"count": 4, "qty": 35, "avg": 8.75},
    "carrots": {"count": 2, "qty": 15, "avg": 7.5},
    "chocolates": {"count": 3, "qty": 15, "avg": 5},
    "oranges": {"count": 7, "qty": 63, "avg": 9},
    "pears": {"count": 1, "qty": 10, "avg": 10},
}


@pytest.fixture
def orders(db):
    db.orders.insert_many([
        {
            "_id": i, "cust_id": cust,
            "ord_date": datetime.datetime.fromisoformat(date),
            "price": price, "status": "A",
            "items": [{"sku": s, "qty": q, "price": p} for s, q, p in items],
        }
        for i, cust, date, price, items in ORDERS
    ])
    return db.orders


def map_reduce(db, coll, map_fn, reduce_fn, out, **opts):
    cmd = SON([("mapReduce", coll), ("map", map_fn), ("reduce", reduce_fn), ("out", out)])
    cmd.update(opts)
    return db.command(cmd)


def by_id(docs):
    return {d["_id"]: d["value"] for d in docs}


def test_total_price_per_customer_inline(db, orders):
    reply = map_reduce(db, "orders", Code(MAP_PRICE), Code(REDUCE_SUM), {"inline": 1})
    assert reply["ok"] == 1
    assert "result" not in reply
    assert by_id(reply["results"]) == PRICE_TOTALS
    assert all(set(d) == {"_id", "value"} for d in reply["results"])


def test_total_price_per_customer_to_a_collection(db, orders):
    reply = map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, "map_reduce_example")
    assert reply["result"] == "map_reduce_example"
    assert by_id(db.map_reduce_example.find()) == PRICE_TOTALS
    # A collection name replaces what was there.
    db.map_reduce_example.insert_one({"_id": "stale", "value": 1})
    map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, {"replace": "map_reduce_example"})
    assert by_id(db.map_reduce_example.find()) == PRICE_TOTALS


def test_average_quantity_per_item_with_query_and_finalize(db, orders):
    reply = map_reduce(
        db, "orders", Code(MAP_ITEMS), Code(REDUCE_ITEMS), {"merge": "map_reduce_example2"},
        query={"ord_date": {"$gte": datetime.datetime(2020, 3, 1)}},
        finalize=Code(FINALIZE_AVG),
    )
    assert reply["result"] == "map_reduce_example2"
    assert by_id(db.map_reduce_example2.find()) == ITEM_AVERAGES
    # The query filters what map sees.
    later = map_reduce(
        db, "orders", MAP_ITEMS, REDUCE_ITEMS, {"inline": 1},
        query={"ord_date": {"$gte": datetime.datetime(2020, 3, 20)}},
        finalize=FINALIZE_AVG,
    )
    assert by_id(later["results"])["oranges"] == {"count": 3, "qty": 30, "avg": 10}
    assert "pears" not in by_id(later["results"])


def test_merge_keeps_other_keys_and_replaces_matching_ones(db, orders):
    db.totals.insert_many([{"_id": "Ant O. Knee", "value": -1}, {"_id": "Other", "value": 7}])
    map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, {"merge": "totals"})
    assert by_id(db.totals.find()) == {**PRICE_TOTALS, "Other": 7}


def test_reduce_output_reduces_with_what_is_stored(db, orders):
    out = {"reduce": "running_totals"}
    map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, out)
    db.running_totals.insert_one({"_id": "Other", "value": 7})
    map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, out, query={"_id": {"$lte": 2}})
    expected = dict(PRICE_TOTALS, Other=7)
    expected["Ant O. Knee"] += 95
    assert by_id(db.running_totals.find()) == expected


def test_reduce_output_finalizes_the_re_reduced_value(db, orders):
    out = {"reduce": "averages"}
    map_reduce(db, "orders", MAP_ITEMS, REDUCE_ITEMS, out, finalize=FINALIZE_AVG)
    map_reduce(db, "orders", MAP_ITEMS, REDUCE_ITEMS, out, finalize=FINALIZE_AVG,
               query={"_id": 3})
    values = by_id(db.averages.find())
    assert values["pears"] == {"count": 2, "qty": 20, "avg": 10}
    assert values["oranges"] == {"count": 8, "qty": 73, "avg": 73 / 8}
    assert values["apples"] == ITEM_AVERAGES["apples"]


def test_output_to_another_database_names_it_in_the_reply(client, db, orders):
    other = client[db.name + "_out"]
    try:
        reply = map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM,
                           SON([("replace", "totals"), ("db", other.name)]))
        assert reply["result"] == {"db": other.name, "collection": "totals"}
        assert by_id(other.totals.find()) == PRICE_TOTALS
    finally:
        client.drop_database(other.name)


def test_reduce_runs_for_single_values_as_mongod_7(db, coll):
    # Since 4.4 mongod calls reduce even for a key emitted once.
    coll.insert_many([{"k": "once"}, {"k": "twice"}, {"k": "twice"}])
    reply = map_reduce(db, coll.name, "function() { emit(this.k, 1); }",
                       "function(k, vs) { return 'reduced ' + vs.length; }", {"inline": 1})
    assert by_id(reply["results"]) == {"once": "reduced 1", "twice": "reduced 2"}


def test_scope_sort_limit_and_code_with_scope(db, orders):
    reply = map_reduce(
        db, "orders", "function() { emit(this.cust_id, this.price * factor); }", REDUCE_SUM,
        {"inline": 1}, scope={"factor": 2}, sort={"_id": -1}, limit=2,
    )
    # Orders 10 and 9, both Don Quis's.
    assert by_id(reply["results"]) == {"Don Quis": 160}
    reply = map_reduce(
        db, "orders", Code("function() { emit(this.status, this.price + bonus); }", {"bonus": 1}),
        REDUCE_SUM, {"inline": 1}, jsMode=True, verbose=True,
    )
    assert by_id(reply["results"]) == {"A": sum(PRICE_TOTALS.values()) + 10}


def test_documents_and_keys_keep_their_types(db, coll):
    coll.insert_many([{"a": {"x": 1, "y": [1, 2]}}, {"a": {"x": 1, "y": [1, 2]}}, {"a": None}])
    reply = map_reduce(db, coll.name, "function() { emit(this.a, {n: 1}); }",
                       "function(k, vs) { var n = 0; vs.forEach(function(v) { n += v.n; }); "
                       "return {n: n}; }", {"inline": 1})
    results = sorted(reply["results"], key=lambda d: d["_id"] is not None)
    assert results == [{"_id": None, "value": {"n": 1}},
                       {"_id": {"x": 1, "y": [1, 2]}, "value": {"n": 2}}]


def test_missing_collection_gives_no_results(db):
    reply = map_reduce(db, "nothing_here", MAP_PRICE, REDUCE_SUM, {"inline": 1})
    assert reply["results"] == []
    reply = map_reduce(db, "nothing_here", MAP_PRICE, REDUCE_SUM, "empty_out")
    assert reply["result"] == "empty_out"
    assert "empty_out" in db.list_collection_names()


def test_change_streams_see_the_output(db, orders):
    with db.watch([{"$match": {"ns.coll": "watched_totals"}}]) as stream:
        map_reduce(db, "orders", MAP_PRICE, REDUCE_SUM, {"merge": "watched_totals"})
        seen = {next_event(stream)["documentKey"]["_id"] for _ in PRICE_TOTALS}
    assert seen == set(PRICE_TOTALS)


def code_of(db, *args, **opts):
    with pytest.raises(OperationFailure) as e:
        map_reduce(db, *args, **opts)
    return e.value.code, str(e.value)


def test_errors(db, orders):
    def missing(field):
        cmd = SON([("mapReduce", "orders"), ("map", MAP_PRICE), ("reduce", REDUCE_SUM),
                   ("out", {"inline": 1})])
        del cmd[field]
        with pytest.raises(OperationFailure) as e:
            db.command(cmd)
        return e.value.code, e.value.details["errmsg"]

    assert missing("map") == (40414, "BSON field 'mapReduce.map' is missing but a required field")
    assert missing("reduce")[0] == 40414
    assert missing("out") == (40414, "BSON field 'mapReduce.out' is missing but a required field")

    inline = {"inline": 1}
    assert code_of(db, "orders", 5, REDUCE_SUM, inline)[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, 5)[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, {"inline": 1, "db": "x"})[0] == 72
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, {"inline": 0})[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, {"db": "x"})[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, {"merge": 1})[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, {"merge": "x", "extra": 1})[0] == 2
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM,
                   SON([("replace", "x"), ("db", "admin")]))[0] == 115
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, "system.x")[0] == 31319
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, inline, bogus=1)[0] == 40415
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, inline, limit=0)[0] == 15958
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, inline, sort={})[0] == 15976
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, inline, query=5)[0] == 14
    assert code_of(db, "orders", MAP_PRICE, REDUCE_SUM, inline, scope=5)[0] == 2

    code, message = code_of(db, "orders", "function() { throw new Error('boom'); }",
                            REDUCE_SUM, inline)
    assert code == 139
    assert "MapReduce internal error" in message and "boom" in message
    assert code_of(db, "orders", "function() { emit(1); }", REDUCE_SUM, inline)[0] == 139

    db.create_collection("orders_view", viewOn="orders", pipeline=[])
    assert code_of(db, "orders_view", MAP_PRICE, REDUCE_SUM, inline)[0] == 166


def test_output_on_an_internal_database_is_refused(client):
    admin = client.admin
    with pytest.raises(OperationFailure) as e:
        admin.command(SON([("mapReduce", "x"), ("map", MAP_PRICE), ("reduce", REDUCE_SUM),
                           ("out", "out")]))
    assert e.value.code == 31320

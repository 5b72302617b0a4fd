"""$setWindowFields: the MongoDB manual's own examples (its data sets and the outputs it
documents for each window operator), and mongod's error codes for bad specifications
(jstests/aggregation/sources/setWindowFields/parse.js and the operator/window matrix)."""

import datetime
import math

import pytest
from pymongo.errors import OperationFailure


def utc(*args):
    return datetime.datetime(*args)


CAKE_SALES = [
    {"_id": 0, "type": "chocolate", "orderDate": utc(2020, 5, 18, 14, 10, 30), "state": "CA", "price": 13, "quantity": 120},
    {"_id": 1, "type": "chocolate", "orderDate": utc(2021, 3, 20, 11, 30, 5), "state": "WA", "price": 14, "quantity": 140},
    {"_id": 2, "type": "vanilla", "orderDate": utc(2021, 1, 11, 6, 31, 15), "state": "CA", "price": 12, "quantity": 145},
    {"_id": 3, "type": "vanilla", "orderDate": utc(2020, 2, 8, 13, 13, 23), "state": "WA", "price": 13, "quantity": 104},
    {"_id": 4, "type": "strawberry", "orderDate": utc(2019, 5, 18, 16, 9, 1), "state": "CA", "price": 41, "quantity": 162},
    {"_id": 5, "type": "strawberry", "orderDate": utc(2019, 1, 8, 6, 12, 3), "state": "WA", "price": 43, "quantity": 134},
]


@pytest.fixture
def cakes(coll):
    coll.insert_many(CAKE_SALES)
    return coll


def run(coll, stage, field, key="_id", extra=()):
    """The stage's documents in output order, as (key, field) pairs."""
    out = list(coll.aggregate([{"$setWindowFields": stage}, *extra]))
    return [(d[key], d.get(field, "<missing>")) for d in out]


def code_of(coll, pipeline):
    with pytest.raises(OperationFailure) as e:
        list(coll.aggregate(pipeline))
    return e.value.code


class TestManualExamples:
    def test_cumulative_quantity_for_each_state(self, cakes):
        out = run(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "cumulativeQuantityForState": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}}}},
            "cumulativeQuantityForState")
        assert out == [(4, 162), (0, 282), (2, 427), (5, 134), (3, 238), (1, 378)]
        # The documents keep their fields; the output is added after them.
        doc = list(cakes.aggregate([{"$setWindowFields": {"partitionBy": "$state", "sortBy": {"orderDate": 1},
                                                          "output": {"c": {"$count": {}}}}}]))[0]
        assert list(doc) == ["_id", "type", "orderDate", "state", "price", "quantity", "c"]

    def test_cumulative_quantity_for_each_year(self, cakes):
        out = run(cakes, {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1}, "output": {
            "cumulativeQuantityForYear": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}}}},
            "cumulativeQuantityForYear")
        assert out == [(5, 134), (4, 296), (3, 104), (0, 224), (2, 145), (1, 285)]

    def test_moving_average_for_each_year(self, cakes):
        out = run(cakes, {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1}, "output": {
            "averageQuantity": {"$avg": "$quantity", "window": {"documents": [-1, 0]}}}}, "averageQuantity")
        assert out == [(5, 134), (4, 148), (3, 104), (0, 112), (2, 145), (1, 142.5)]

    def test_cumulative_and_maximum_for_each_year(self, cakes):
        out = list(cakes.aggregate([{"$setWindowFields": {
            "partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1}, "output": {
                "cumulativeQuantityForYear": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}},
                "maximumQuantityForYear": {"$max": "$quantity", "window": {"documents": ["unbounded", "unbounded"]}}}}}]))
        assert [(d["_id"], d["cumulativeQuantityForYear"], d["maximumQuantityForYear"]) for d in out] == [
            (5, 134, 162), (4, 296, 162), (3, 104, 120), (0, 224, 120), (2, 145, 145), (1, 285, 145)]

    def test_range_window(self, cakes):
        out = run(cakes, {"partitionBy": "$state", "sortBy": {"price": 1}, "output": {
            "quantityFromSimilarOrders": {"$sum": "$quantity", "window": {"range": [-10, 10]}}}},
            "quantityFromSimilarOrders")
        assert out == [(2, 265), (0, 265), (4, 162), (3, 244), (1, 244), (5, 134)]

    def test_time_range_window_positive_upper(self, cakes):
        out = run(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "recentOrders": {"$push": "$orderDate", "window": {"range": ["unbounded", 10], "unit": "month"}}}},
            "recentOrders")
        d = {c["_id"]: c["orderDate"] for c in CAKE_SALES}
        assert out == [(4, [d[4]]), (0, [d[4], d[0], d[2]]), (2, [d[4], d[0], d[2]]),
                       (5, [d[5]]), (3, [d[5], d[3]]), (1, [d[5], d[3], d[1]])]

    def test_time_range_window_negative_upper(self, cakes):
        out = run(cakes, {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "recentOrders": {"$push": "$orderDate", "window": {"range": ["unbounded", -10], "unit": "month"}}}},
            "recentOrders")
        d = {c["_id"]: c["orderDate"] for c in CAKE_SALES}
        assert out == [(4, []), (0, [d[4]]), (2, [d[4]]), (5, []), (3, [d[5]]), (1, [d[5], d[3]])]

    def test_rank_dense_rank_document_number(self, cakes):
        stage = {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
            "r": {"$rank": {}}, "dr": {"$denseRank": {}}, "n": {"$documentNumber": {}}}}
        out = list(cakes.aggregate([{"$setWindowFields": stage}]))
        assert [(d["_id"], d["r"], d["dr"], d["n"]) for d in out] == [
            (4, 1, 1, 1), (2, 2, 2, 2), (0, 3, 3, 3), (1, 1, 1, 1), (5, 2, 2, 2), (3, 3, 3, 3)]
        assert all(type(d["r"]) is int for d in out)

    def test_ranks_of_ties(self, coll):
        # The manual's cakeSalesWithDuplicates shape: equal quantities share a rank.
        coll.insert_many([{"_id": i, "q": q} for i, q in enumerate([162, 120, 145, 120, 140, 145, 120])])
        out = list(coll.aggregate([{"$setWindowFields": {"sortBy": {"q": -1}, "output": {
            "r": {"$rank": {}}, "dr": {"$denseRank": {}}, "n": {"$documentNumber": {}}}}}]))
        assert [(d["q"], d["r"], d["dr"], d["n"]) for d in out] == [
            (162, 1, 1, 1), (145, 2, 2, 2), (145, 2, 2, 3), (140, 4, 3, 4),
            (120, 5, 4, 5), (120, 5, 4, 6), (120, 5, 4, 7)]

    def test_shift(self, cakes):
        for by, expected in [
            (1, [(4, 145), (2, 120), (0, "Not available"), (1, 134), (5, 104), (3, "Not available")]),
            (-1, [(4, "Not available"), (2, 162), (0, 145), (1, "Not available"), (5, 140), (3, 134)]),
        ]:
            out = run(cakes, {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {
                "shiftQuantityForState": {"$shift": {"output": "$quantity", "by": by, "default": "Not available"}}}},
                "shiftQuantityForState")
            assert out == expected
        # Without a default, null.
        out = run(cakes, {"sortBy": {"_id": 1}, "output": {"s": {"$shift": {"output": "$_id", "by": 10}}}}, "s")
        assert {v for _, v in out} == {None}

    def test_covariance(self, cakes):
        stage = {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "pop": {"$covariancePop": [{"$year": "$orderDate"}, "$quantity"],
                    "window": {"documents": ["unbounded", "current"]}},
            "samp": {"$covarianceSamp": [{"$year": "$orderDate"}, "$quantity"],
                     "window": {"documents": ["unbounded", "current"]}}}}
        out = list(cakes.aggregate([{"$setWindowFields": stage}]))
        assert [d["_id"] for d in out] == [4, 0, 2, 5, 3, 1]
        # mongod's online co-moment in doubles rounds the third CA value in its last
        # digits (-5.666666666666671); the covariances themselves are -17/3 and -8.5.
        assert [d["pop"] for d in out] == pytest.approx([0, -10.5, -17 / 3, 0, -7.5, 2], rel=1e-14)
        assert [d["samp"] for d in out] == [None, -21, pytest.approx(-8.5, rel=1e-14), None, -15, 3]
        assert all(type(d["pop"]) is float for d in out)

    def test_covariance_of_infinities_and_nan(self, coll):
        inf, nan = float("inf"), float("nan")
        pairs = [(inf, 1), (1, 1), (2, 3), (-inf, 1), (nan, 2)]
        coll.insert_many([{"_id": i, "x": x, "y": y} for i, (x, y) in enumerate(pairs)])
        out = run(coll, {"sortBy": {"_id": 1}, "output": {"c": {"$covariancePop": ["$x", "$y"],
                                                                "window": {"documents": ["unbounded", "current"]}}}}, "c")
        values = [v for _, v in out]
        # No finite pair yet: null; one finite pair: 0 whatever the infinities; then the
        # infinity decides; infinities of both signs, or a NaN, make NaN.
        assert values[:3] == [None, 0.0, inf]
        assert math.isnan(values[3]) and math.isnan(values[4])

    def test_first_last_push_add_to_set_min_std_dev(self, cakes):
        stage = {"partitionBy": "$state", "sortBy": {"orderDate": 1}, "output": {
            "first": {"$first": "$type", "window": {"documents": [-1, 0]}},
            "last": {"$last": "$type", "window": {"documents": ["current", "unbounded"]}},
            "types": {"$addToSet": "$type"},
            "prices": {"$push": "$price", "window": {"documents": [0, 1]}},
            "min": {"$min": "$quantity", "window": {"documents": ["unbounded", "current"]}},
            "sd": {"$stdDevPop": "$price", "window": {"documents": [-1, 0]}}}}
        out = list(cakes.aggregate([{"$setWindowFields": stage}]))
        assert [(d["_id"], d["first"], d["last"], sorted(d["types"]), d["prices"], d["min"], d["sd"]) for d in out] == [
            (4, "strawberry", "vanilla", ["chocolate", "strawberry", "vanilla"], [41, 13], 162, 0.0),
            (0, "strawberry", "vanilla", ["chocolate", "strawberry", "vanilla"], [13, 12], 120, 14.0),
            (2, "chocolate", "vanilla", ["chocolate", "strawberry", "vanilla"], [12], 120, 0.5),
            (5, "strawberry", "chocolate", ["chocolate", "strawberry", "vanilla"], [43, 13], 134, 0.0),
            (3, "strawberry", "chocolate", ["chocolate", "strawberry", "vanilla"], [13, 14], 104, 15.0),
            (1, "vanilla", "chocolate", ["chocolate", "strawberry", "vanilla"], [14], 104, 0.5)]

    def test_exp_moving_avg(self, coll):
        def day(n):
            return utc(2020, 5, 18 + n, 20)
        coll.insert_many([{"stock": "ABC", "date": day(i), "price": p} for i, p in enumerate([13, 15.4, 12, 11.7])]
                         + [{"stock": "DEF", "date": day(i), "price": p} for i, p in enumerate([82, 94, 112, 97.3])])
        for spec, expected in [
            ({"N": 2}, [13, 14.6, 12.866666666666667, 12.088888888888889, 82, 90, 104.66666666666667, 99.75555555555556]),
            ({"alpha": 0.75}, [13, 14.8, 12.7, 11.95, 82, 91, 106.75, 99.6625]),
        ]:
            out = run(coll, {"partitionBy": "$stock", "sortBy": {"date": 1}, "output": {
                "avg": {"$expMovingAvg": {"input": "$price", **spec}}}}, "avg", key="price")
            assert [v for _, v in out] == expected

    def test_exp_moving_avg_of_decimals_and_non_numbers(self, coll):
        from bson.decimal128 import Decimal128
        coll.insert_many([{"_id": 1, "x": Decimal128("1")}, {"_id": 2, "x": "skip"}, {"_id": 3, "x": 2}])
        out = run(coll, {"sortBy": {"_id": 1}, "output": {"avg": {"$expMovingAvg": {"input": "$x", "alpha": 0.5}}}},
                  "avg")
        assert out == [(1, Decimal128("1")), (2, Decimal128("1")), (3, Decimal128("1.5"))]
        out = run(coll, {"sortBy": {"_id": 1}, "output": {"avg": {"$expMovingAvg": {"input": "$nothing", "N": 3}}}},
                  "avg")
        assert out == [(1, None), (2, None), (3, None)]

    def test_derivative(self, coll):
        def at(sec):
            return utc(2020, 5, 18, 14, 10, 30) + datetime.timedelta(seconds=sec)
        miles = {"1": [1295.1, 1295.63, 1296.09, 1296.63], "2": [10234.4, 10234.92, 10235.5, 10236.1]}
        coll.insert_many([{"truckID": t, "timeStamp": at(30 * i), "miles": m}
                          for t, ms in miles.items() for i, m in enumerate(ms)])
        out = list(coll.aggregate([
            {"$setWindowFields": {"partitionBy": "$truckID", "sortBy": {"timeStamp": 1}, "output": {
                "truckAverageSpeed": {"$derivative": {"input": "$miles", "unit": "hour"},
                                      "window": {"range": [-30, 0], "unit": "second"}}}}},
            {"$match": {"truckAverageSpeed": {"$gt": 50}}}]))
        # Rise over run in doubles, in mongod's order: (miles - miles) / ms * ms-per-hour.
        expected = [(t, (ms[i] - ms[i - 1]) / 30000 * 3600000) for t, ms in miles.items() for i in range(1, 4)]
        assert [(d["truckID"], d["truckAverageSpeed"]) for d in out] == [e for e in expected if e[1] > 50]
        assert expected[0] == ("1", 63.60000000002401)

    def test_integral(self, coll):
        def at(sec):
            return utc(2020, 5, 18, 14, 10, 30) + datetime.timedelta(seconds=sec)
        kw = {"1": [2.95, 2.7, 2.6, 2.98], "2": [2.5, 2.25, 2.75, 2.82]}
        coll.insert_many([{"powerMeterID": m, "timeStamp": at(30 * i), "kilowatts": k}
                          for m, ks in kw.items() for i, k in enumerate(ks)])
        out = run(coll, {"partitionBy": "$powerMeterID", "sortBy": {"timeStamp": 1}, "output": {
            "powerMeterKilowattHours": {"$integral": {"input": "$kilowatts", "unit": "hour"},
                                        "window": {"range": ["unbounded", "current"], "unit": "minute"}}}},
            "powerMeterKilowattHours", key="powerMeterID")
        # The trapezoids (y0 + y1) * ms / 2, summed, over milliseconds per hour.
        expected = []
        for ks in kw.values():
            areas = [(ks[i] + ks[i - 1]) * 30000 / 2.0 for i in range(1, 4)]
            expected += [math.fsum(areas[:i]) / 3600000 for i in range(4)]
        assert [v for _, v in out] == expected
        assert expected[:2] == [0, 0.023541666666666666]

    def test_locf_and_linear_fill(self, coll):
        prices = [500, None, 515, None, None, 485]
        coll.insert_many([{"time": utc(2021, 3, 8, 9 + i), **({"price": p} if p is not None else {})}
                          for i, p in enumerate(prices)])
        out = run(coll, {"sortBy": {"time": 1}, "output": {"price": {"$locf": "$price"}}}, "price", key="time")
        assert [v for _, v in out] == [500, 500, 515, 515, 515, 485]
        out = run(coll, {"sortBy": {"time": 1}, "output": {"price": {"$linearFill": "$price"}}}, "price", key="time")
        assert [v for _, v in out] == [500, 507.5, 515, 505, 495, 485]

    def test_dotted_output_and_missing_values(self, coll):
        coll.insert_many([{"_id": 1, "a": {"x": 1}}, {"_id": 2}])
        out = list(coll.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
            "a.y": {"$sum": "$_id"},
            "next": {"$shift": {"output": "$a.x", "by": -1}},
            "f": {"$first": "$missing"}}}}]))
        # A function's missing value leaves its field out, as $addFields does.
        assert out == [{"_id": 1, "a": {"x": 1, "y": 3}, "next": None},
                       {"_id": 2, "a": {"y": 3}, "next": 1}]

    def test_array_arguments_are_array_expressions(self, coll):
        # $group refuses {$push: [...]} (40237); in a window it is an array expression.
        coll.insert_many([{"_id": 1}, {"_id": 2}])
        out = run(coll, {"sortBy": {"_id": 1}, "output": {
            "pairs": {"$push": ["$_id", 0], "window": {"documents": ["unbounded", "current"]}}}}, "pairs")
        assert out == [(1, [[1, 0]]), (2, [[1, 0], [2, 0]])]
        out = run(coll, {"output": {"s": {"$sum": ["$_id"]}}}, "s")
        assert out == [(1, 0), (2, 0)]

    def test_no_sort_no_partition_keeps_order(self, coll):
        coll.insert_many([{"_id": i, "k": k} for i, k in [(3, "b"), (1, "c"), (2, "a")]])
        scan = [d["_id"] for d in coll.find()]
        out = run(coll, {"output": {"all": {"$push": "$_id"}}}, "all")
        assert out == [(i, scan) for i in scan]
        # Partitioned without sortBy: partitions in key order, each in input order.
        out = run(coll, {"partitionBy": {"$gt": ["$k", "a"]}, "output": {"all": {"$push": "$_id"}}}, "all")
        rest = [i for i in scan if i != 2]
        assert out == [(2, [2])] + [(i, rest) for i in rest]

    def test_inside_facet_and_lookup(self, cakes):
        stage = {"$setWindowFields": {"sortBy": {"_id": 1}, "output": {"n": {"$documentNumber": {}}}}}
        out = list(cakes.aggregate([{"$facet": {"numbered": [stage, {"$project": {"n": 1}}]}}]))
        assert out[0]["numbered"] == [{"_id": i, "n": i + 1} for i in range(6)]
        out = list(cakes.aggregate([{"$match": {"_id": 0}}, {"$lookup": {
            "from": cakes.name, "pipeline": [stage, {"$match": {"n": 2}}], "as": "second"}}]))
        assert [d["_id"] for d in out[0]["second"]] == [1]

    def test_missing_and_null_partition_together(self, coll):
        coll.insert_many([{"_id": 1, "p": None}, {"_id": 2}, {"_id": 3, "p": 1}])
        out = run(coll, {"partitionBy": "$p", "sortBy": {"_id": 1}, "output": {"n": {"$count": {}}}}, "n")
        assert out == [(1, 2), (2, 2), (3, 1)]


BAD_SPECS = [
    ({"$setWindowFields": "invalid"}, 9),
    ({"$setWindowFields": {"sortBy": "invalid", "output": {}}}, 14),
    ({"$setWindowFields": {"output": "invalid"}}, 14),
    ({"$setWindowFields": {"partitionBy": {"$notAnOperator": 1}, "output": {}}}, 168),
    ({"$setWindowFields": {"what_is_this": 1}}, 40415),
    ({"$setWindowFields": {"partitionBy": "$a"}}, 40414),
    ({"$setWindowFields": {"partitionBy": {"$const": []}, "output": {}}}, 14),
    ({"$setWindowFields": {"output": {"a": {"b": {"$sum": "$a"}}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {}}}}, 9),
    ({"$setWindowFields": {"output": {"v": 1}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$summ": "$x"}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$mergeObjects": "$a"}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$accumulator": "$a"}}}}, 9),
    ({"$setWindowFields": {"output": {"a": {"$sum": 1}, "a.b": {"$sum": 1}}}}, 6307900),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "abcde": 1}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [1, -1]}}}}}, 5339900),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": ["current", -1]}}}}}, 5339900),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": [1, "current"], "unit": "day"}}}}}, 5339900),
    ({"$setWindowFields": {"output": {"v": {"$sum": 1, "window": {"documents": ["unbounded", "current"]}}}}}, 5339901),
    ({"$setWindowFields": {"output": {"v": {"$sum": 1, "window": {"range": ["unbounded", "unbounded"]}}}}}, 5339902),
    ({"$setWindowFields": {"sortBy": {"a": 1, "b": 1}, "output": {"v": {"$sum": 1, "window": {"range": [0, 1]}}}}}, 5339902),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [{"$const": "current"}, 3]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0.5, 3]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": ["$a", 3]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0, 1], "range": [0, 1]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"documents": [0, 1], "unit": "day"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": [0, 1], "unit": "eon"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": [0.5, 1], "unit": "day"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": {"range": ["x", 1]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$sum": 1, "window": "all"}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$rank": {}, "window": {"documents": [0, 1]}}}}}, 5371601),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$rank": 1}}}}, 5371603),
    ({"$setWindowFields": {"output": {"v": {"$denseRank": {}}}}}, 5371602),
    ({"$setWindowFields": {"sortBy": {"a": 1, "b": 1}, "output": {"v": {"$documentNumber": {}}}}}, 5371602),
    ({"$setWindowFields": {"output": {"v": {"$shift": {"output": "$a", "by": 1}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1}, "window": {}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1.5}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"by": 1}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$shift": {"output": "$a", "by": 1, "default": "$b"}}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$expMovingAvg": {"input": "$a", "N": 2}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$expMovingAvg": {"input": "$a", "N": 2}, "window": {}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$expMovingAvg": {"input": "$a", "N": 0}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$expMovingAvg": {"input": "$a", "N": 1.5}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$expMovingAvg": {"input": "$a", "alpha": 1}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$expMovingAvg": {"input": "$a"}}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$derivative": {"input": "$a"}, "window": {"documents": [-1, 0]}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$derivative": {"input": "$a"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1, "b": 1}, "output": {"v": {"$integral": {"input": "$a"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$integral": {"input": "$a", "unit": "month"}}}}}, 5490710),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$integral": {"unit": "hour"}}}}}, 9),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$locf": "$a", "window": {}}}}}, 9),
    ({"$setWindowFields": {"output": {"v": {"$linearFill": "$a"}}}}, 605001),
    ({"$setWindowFields": {"sortBy": {"a": 1}, "output": {"v": {"$count": 1}}}}, 9),
]


class TestErrors:
    @pytest.mark.parametrize("stage,code", BAD_SPECS, ids=[str(i) for i in range(len(BAD_SPECS))])
    def test_bad_spec(self, coll, stage, code):
        coll.insert_one({"_id": 1, "a": 1})
        assert code_of(coll, [stage]) == code

    def test_good_specs_from_the_parse_tests(self, coll):
        coll.insert_one({"_id": 1, "ts": 1, "a": 1})
        for spec in [
            {"$sum": "$a"},
            {"$sum": "$a", "window": {"documents": ["unbounded", "unbounded"]}},
            {"$sum": "$a", "window": {"documents": [-2, 4]}},
            {"$max": "$a", "window": {"documents": [-3, "unbounded"]}},
            {"$sum": "$a", "window": {"range": [-2, 4]}},
            {"$sum": "$a", "window": {"range": [{"$add": [2, 2]}, {"$add": [2, 2]}]}},
            {"$sum": "$a", "window": {"documents": [{"$add": [2, 2]}, {"$add": [2, 2]}]}},
            {"$max": {"mergeObjects": {}}},
        ]:
            list(coll.aggregate([{"$setWindowFields": {"sortBy": {"ts": 1}, "output": {"v": spec}}}]))

    def test_runtime_errors(self, coll):
        coll.insert_many([{"_id": 1, "p": [1], "t": 1, "d": utc(2020, 1, 1), "s": "x"}])
        stage = {"$setWindowFields": {"partitionBy": "$p", "output": {"v": {"$sum": 1}}}}
        assert code_of(coll, [stage]) == 14
        ranged = {"$sum": 1, "window": {"range": [0, 1]}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"s": 1}, "output": {"v": ranged}}}]) == 5429414
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"d": 1}, "output": {"v": ranged}}}]) == 5429413
        timed = {"$sum": 1, "window": {"range": [0, 1], "unit": "day"}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"t": 1}, "output": {"v": timed}}}]) == 5429513
        deriv = {"$derivative": {"input": "$t", "unit": "hour"}, "window": {"documents": [-1, 0]}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"t": 1}, "output": {"v": deriv}}}]) == 5624900
        deriv = {"$derivative": {"input": "$t"}, "window": {"documents": [-1, 0]}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"d": 1}, "output": {"v": deriv}}}]) == 5624901
        integ = {"$integral": {"input": "$t", "unit": "hour"}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"t": 1}, "output": {"v": integ}}}]) == 5423901
        integ = {"$integral": {"input": "$t"}}
        assert code_of(coll, [{"$setWindowFields": {"sortBy": {"d": 1}, "output": {"v": integ}}}]) == 5423902

    def test_linear_fill_errors(self, coll):
        coll.insert_many([{"_id": 1, "t": 1, "v": 1}, {"_id": 2, "t": 1}, {"_id": 3, "t": 2, "v": "x"}])
        fill = {"$setWindowFields": {"sortBy": {"t": 1}, "output": {"v": {"$linearFill": "$v"}}}}
        assert code_of(coll, [{"$match": {"_id": {"$lt": 3}}}, fill]) == 6050106
        assert code_of(coll, [{"$match": {"_id": {"$ne": 2}}}, fill]) == 14


class TestFill:
    """$fill: the manual's examples (constant values, linear interpolation, last
    observation carried forward per partition) and mongod's errors."""

    def test_fill_with_constant_values(self, coll):
        coll.insert_many([
            {"_id": 1, "date": utc(2022, 2, 2), "bootsSold": 10, "sandalsSold": 20, "sneakersSold": 12},
            {"_id": 2, "date": utc(2022, 2, 3), "bootsSold": 7, "sneakersSold": 18},
            {"_id": 3, "date": utc(2022, 2, 4), "sneakersSold": 5},
        ])
        out = list(coll.aggregate([{"$fill": {"output": {
            "bootsSold": {"value": 0}, "sandalsSold": {"value": 0}, "sneakersSold": {"value": 0}}}}]))
        assert [(d["bootsSold"], d["sandalsSold"], d["sneakersSold"]) for d in out] == [
            (10, 20, 12), (7, 0, 18), (0, 0, 5)]

    def test_fill_linear_and_locf(self, coll):
        prices = [500, None, 515, None, None, 485]
        coll.insert_many([{"time": utc(2021, 3, 8, 9 + i), **({"price": p} if p is not None else {})}
                          for i, p in enumerate(prices)])
        out = list(coll.aggregate([{"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}}]))
        assert [d["price"] for d in out] == [500, 507.5, 515, 505, 495, 485]
        out = list(coll.aggregate([{"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "locf"}}}}]))
        assert [d["price"] for d in out] == [500, 500, 515, 515, 515, 485]

    def test_fill_per_partition(self, coll):
        scores = [("Joe's Pizza", 1, 90), ("Joe's Pizza", 2, None), ("Sally's Deli", 1, 75),
                  ("Sally's Deli", 2, None), ("Joe's Pizza", 3, 81), ("Sally's Deli", 3, None)]
        coll.insert_many([{"restaurant": r, "day": d, **({"score": s} if s is not None else {})}
                          for r, d, s in scores])
        for partition in [{"partitionByFields": ["restaurant"]}, {"partitionBy": "$restaurant"},
                          {"partitionBy": {"r": "$restaurant"}}]:
            out = list(coll.aggregate([{"$fill": {"sortBy": {"day": 1}, **partition,
                                                   "output": {"score": {"method": "locf"}}}}]))
            assert [(d["restaurant"], d["day"], d["score"]) for d in out] == [
                ("Joe's Pizza", 1, 90), ("Joe's Pizza", 2, 90), ("Joe's Pizza", 3, 81),
                ("Sally's Deli", 1, 75), ("Sally's Deli", 2, 75), ("Sally's Deli", 3, 75)]

    def test_fill_method_and_value_together(self, coll):
        coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2}, {"_id": 3, "b": 5}])
        out = list(coll.aggregate([{"$fill": {"sortBy": {"_id": 1}, "output": {
            "a": {"method": "locf"}, "b": {"value": {"$multiply": ["$_id", 10]}}}}}]))
        assert [(d["a"], d["b"]) for d in out] == [(1, 10), (1, 20), (1, 5)]

    @pytest.mark.parametrize("spec,code", [
        ("x", 9),
        ({"output": {}}, 6050203),
        ({"sortBy": {"a": 1}}, 40414),
        ({"output": {"a": 1}}, 6050200),
        ({"output": {"a": {"method": "locf", "value": 1}}}, 6050201),
        ({"output": {"a": {"method": "spline"}}}, 6050202),
        ({"output": {"a": {"method": 1}}}, 14),
        ({"output": {"a": {"methd": "locf"}}}, 40415),
        ({"partitionBy": "$a", "partitionByFields": ["a"], "output": {"a": {"method": "locf"}}}, 6050204),
        ({"partitionBy": 1, "output": {"a": {"method": "locf"}}}, 14),
        ({"partitionByFields": "a", "output": {"a": {"method": "locf"}}}, 14),
        ({"output": {"a": {"method": "linear"}}}, 605001),
        ({"bogus": 1, "output": {"a": {"value": 1}}}, 40415),
    ])
    def test_fill_errors(self, coll, spec, code):
        coll.insert_one({"a": 1})
        assert code_of(coll, [{"$fill": spec}]) == code


class TestBucketAuto:
    """$bucketAuto: the manual's artwork examples, granularities, mongod's errors."""

    @pytest.fixture
    def artwork(self, coll):
        from bson.decimal128 import Decimal128
        rows = [(1, 1926, "199.99"), (2, 1902, "280.00"), (3, 1925, "76.04"), (4, None, "167.30"),
                (5, 1931, "483.00"), (6, 1913, "385.00"), (7, None, "159.00"), (8, 1918, "118.42")]
        coll.insert_many([{"_id": i, **({"year": y} if y else {}), "price": Decimal128(p)} for i, y, p in rows])
        return coll

    def test_price_buckets(self, artwork):
        from bson.decimal128 import Decimal128
        out = list(artwork.aggregate([{"$bucketAuto": {"groupBy": "$price", "buckets": 4}}]))
        bounds = ["76.04", "159.00", "199.99", "385.00", "483.00"]
        assert out == [{"_id": {"min": Decimal128(lo), "max": Decimal128(hi)}, "count": 2}
                       for lo, hi in zip(bounds, bounds[1:])]

    def test_year_buckets_with_output(self, artwork):
        out = list(artwork.aggregate([{"$bucketAuto": {"groupBy": "$year", "buckets": 3, "output": {
            "count": {"$sum": 1}, "years": {"$push": "$year"}}}}]))
        assert out == [
            {"_id": {"min": None, "max": 1913}, "count": 3, "years": [1902]},
            {"_id": {"min": 1913, "max": 1926}, "count": 3, "years": [1913, 1918, 1925]},
            {"_id": {"min": 1926, "max": 1931}, "count": 2, "years": [1926, 1931]},
        ]

    def test_more_buckets_than_documents_and_equal_values(self, coll):
        coll.insert_many([{"x": x} for x in [5, 1, 1, 1, 2]])
        out = list(coll.aggregate([{"$bucketAuto": {"groupBy": "$x", "buckets": 10}}]))
        # Equal values never split: the three 1s share a bucket.
        assert out == [{"_id": {"min": 1, "max": 2}, "count": 3}, {"_id": {"min": 2, "max": 5}, "count": 1},
                       {"_id": {"min": 5, "max": 5}, "count": 1}]
        assert list(coll.aggregate([{"$match": {"none": 1}}, {"$bucketAuto": {"groupBy": "$x", "buckets": 2}}])) == []

    def test_granularity(self, coll):
        coll.insert_many([{"x": x} for x in [1, 2, 3, 4, 5, 6]])
        out = list(coll.aggregate([{"$bucketAuto": {"groupBy": "$x", "buckets": 2, "granularity": "POWERSOF2"}}]))
        # 1 rounds down to 2^-1; 3 up to 4, which is the next bucket's min; 6 up to 8.
        assert out == [{"_id": {"min": 0.5, "max": 4}, "count": 3}, {"_id": {"min": 4, "max": 8}, "count": 3}]
        out = list(coll.aggregate([{"$bucketAuto": {"groupBy": "$x", "buckets": 2, "granularity": "E6"}}]))
        # E6: ... 0.68, 1.0, 1.5, 2.2, 3.3, 4.7, 6.8 ...; 3 rounds up to 3.3, absorbing nothing.
        # mongod scales the series in doubles: 3.3 is 33 * 0.1 (3.3000000000000003).
        assert out == [{"_id": {"min": 0.68, "max": 33 * 0.1}, "count": 3},
                       {"_id": {"min": 33 * 0.1, "max": 68 * 0.1}, "count": 3}]
        out = list(coll.aggregate([{"$bucketAuto": {"groupBy": "$x", "buckets": 3, "granularity": "1-2-5"}}]))
        assert out == [{"_id": {"min": 0.5, "max": 5.0}, "count": 4}, {"_id": {"min": 5.0, "max": 10.0}, "count": 2}]

    @pytest.mark.parametrize("spec,code", [
        ("x", 40240),
        ({"groupBy": "x", "buckets": 2}, 40239),
        ({"groupBy": "$x", "buckets": "2"}, 40241),
        ({"groupBy": "$x", "buckets": 2.5}, 40242),
        ({"groupBy": "$x", "buckets": 0}, 40243),
        ({"groupBy": "$x", "buckets": 2, "output": 1}, 40244),
        ({"groupBy": "$x", "buckets": 2, "bogus": 1}, 40245),
        ({"groupBy": "$x"}, 40246),
        ({"groupBy": "$x", "buckets": 2, "granularity": 1}, 40261),
        ({"groupBy": "$x", "buckets": 2, "granularity": "R7"}, 40257),
        ({"groupBy": "$s", "buckets": 2, "granularity": "R5"}, 40258),
        ({"groupBy": "$n", "buckets": 2, "granularity": "R5"}, 40260),
        ({"groupBy": "$x", "buckets": 2, "output": {"a": {"$nope": 1}}}, 15952),
    ])
    def test_errors(self, coll, spec, code):
        coll.insert_one({"x": 1, "s": "a", "n": -1})
        assert code_of(coll, [{"$bucketAuto": spec}]) == code


class TestDensify:
    """$densify: the manual's weather (explicit date range) and coffee (full and
    partition bounds) examples, numeric ranges, and mongod's errors."""

    def test_a_long_generation_stops_at_max_time_ms(self, coll):
        """Found by the `command` fuzz target: a step that generates hundreds of
        thousands of documents ran past its maxTimeMS (under the sanitizer, 10 s
        against 2 s) until the generated-documents limit. The stage checks its
        operation as it generates: maxTimeMS stops it, as mongod's."""
        coll.insert_many([{"x": 1}, {"x": 2}])
        with pytest.raises(OperationFailure) as e:
            coll.database.command("aggregate", coll.name, cursor={}, maxTimeMS=1, pipeline=[
                {"$densify": {"field": "x", "range": {"step": 1e-9, "bounds": "full"}}}])
        assert e.value.code == 50, e.value.details

    def test_explicit_date_range(self, coll):
        meta = {"sensorId": 5578, "type": "temperature"}
        coll.insert_many([{"metadata": meta, "timestamp": utc(2021, 5, 18, h), "temp": t}
                          for h, t in [(0, 12), (4, 11), (8, 11), (12, 12)]])
        out = list(coll.aggregate([{"$densify": {"field": "timestamp", "range": {
            "step": 1, "unit": "hour", "bounds": [utc(2021, 5, 18), utc(2021, 5, 18, 8)]}}},
            {"$project": {"_id": 0}}]))
        existing = {0: 12, 4: 11, 8: 11, 12: 12}
        assert out == [({"metadata": meta, "timestamp": utc(2021, 5, 18, h), "temp": existing[h]} if h in existing
                        else {"timestamp": utc(2021, 5, 18, h)}) for h in [0, 1, 2, 3, 4, 5, 6, 7, 8, 12]]

    @pytest.fixture
    def coffee(self, coll):
        coll.insert_many([
            {"altitude": 600, "variety": "Arabica Typica", "score": 68.3},
            {"altitude": 750, "variety": "Arabica Typica", "score": 69.5},
            {"altitude": 950, "variety": "Arabica Typica", "score": 70.5},
            {"altitude": 1250, "variety": "Gesha", "score": 88.15},
            {"altitude": 1700, "variety": "Gesha", "score": 95.5, "price": 1029},
        ])
        return coll

    def test_full_bounds_per_partition(self, coffee):
        out = list(coffee.aggregate([{"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                                                   "range": {"bounds": "full", "step": 200}}},
                                     {"$project": {"_id": 0}}]))
        got = sorted((d["variety"], d["altitude"], "score" in d) for d in out)
        arabica = [(600, True), (750, True), (800, False), (950, True), (1000, False), (1200, False),
                   (1400, False), (1600, False)]
        gesha = [(600, False), (800, False), (1000, False), (1200, False), (1250, True), (1400, False),
                 (1600, False), (1700, True)]
        assert got == [("Arabica Typica", a, s) for a, s in arabica] + [("Gesha", a, s) for a, s in gesha]
        # Generated documents hold the partition fields and the field only.
        assert {"altitude": 800, "variety": "Gesha"} in out

    def test_partition_bounds(self, coffee):
        out = list(coffee.aggregate([{"$densify": {"field": "altitude", "partitionByFields": ["variety"],
                                                   "range": {"bounds": "partition", "step": 200}}},
                                     {"$project": {"_id": 0}}]))
        assert [(d["variety"], d["altitude"], "score" in d) for d in out] == [
            ("Arabica Typica", 600, True), ("Arabica Typica", 750, True), ("Arabica Typica", 800, False),
            ("Arabica Typica", 950, True), ("Gesha", 1250, True), ("Gesha", 1450, False),
            ("Gesha", 1650, False), ("Gesha", 1700, True)]

    def test_numeric_ranges(self, coll):
        coll.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 5}, {"_id": 3}, {"_id": 4, "x": 2.5}])
        out = list(coll.aggregate([{"$densify": {"field": "x", "range": {"step": 1, "bounds": [0, 7]}}}]))
        # Missing values pass through; 2.5 is off the step and changes nothing.
        assert [d.get("x", "-") for d in out] == ["-", 0, 1, 2, 2.5, 3, 4, 5, 6]
        out = list(coll.aggregate([{"$densify": {"field": "x", "range": {"step": 2, "bounds": "full"}}}]))
        assert [d.get("x", "-") for d in out] == ["-", 1, 2.5, 3, 5]
        # An empty input still fills an explicit range.
        out = list(coll.aggregate([{"$match": {"none": 1}},
                                   {"$densify": {"field": "x", "range": {"step": 3, "bounds": [0, 7]}}}]))
        assert out == [{"x": 0}, {"x": 3}, {"x": 6}]

    def test_month_steps_and_nested_field(self, coll):
        coll.insert_many([{"m": {"d": utc(2021, 1, 31)}}, {"m": {"d": utc(2021, 5, 31)}}])
        out = list(coll.aggregate([{"$densify": {"field": "m.d", "range": {
            "step": 1, "unit": "month", "bounds": "full"}}}, {"$project": {"_id": 0}}]))
        assert [d["m"]["d"] for d in out] == [utc(2021, 1, 31), utc(2021, 2, 28), utc(2021, 3, 28),
                                              utc(2021, 4, 28), utc(2021, 5, 28), utc(2021, 5, 31)]

    @pytest.mark.parametrize("spec,code", [
        ("x", 9),
        ({"range": {"step": 1, "bounds": "full"}}, 40414),
        ({"field": "x"}, 40414),
        ({"field": "x", "range": {"bounds": "full"}}, 40414),
        ({"field": "x", "range": {"step": 1, "bounds": "full"}, "bogus": 1}, 40415),
        ({"field": 1, "range": {"step": 1, "bounds": "full"}}, 14),
        ({"field": "x", "range": {"step": 0, "bounds": "full"}}, 5733401),
        ({"field": "x", "range": {"step": "1", "bounds": "full"}}, 5733401),
        ({"field": "x", "range": {"step": 1.5, "unit": "day", "bounds": "full"}}, 6586400),
        ({"field": "x", "range": {"step": 1, "unit": "eon", "bounds": "full"}}, 9),
        ({"field": "x", "range": {"step": 1, "bounds": "all"}}, 5946802),
        ({"field": "x", "range": {"step": 1, "bounds": 1}}, 5733404),
        ({"field": "x", "range": {"step": 1, "bounds": [1]}}, 5733403),
        ({"field": "x", "range": {"step": 1, "bounds": [2, 1]}}, 5733402),
        ({"field": "x", "range": {"step": 1, "unit": "day", "bounds": [1, 2]}}, 5733409),
        ({"field": "x", "range": {"step": 1, "bounds": [1, 2.5]}}, 5876900),
        ({"field": "x", "range": {"step": 1, "bounds": [utc(2021, 1, 1), utc(2021, 1, 2)]}}, 5733410),
        ({"field": "x", "range": {"step": 1, "bounds": ["a", "b"]}}, 5946800),
        ({"field": "x", "range": {"step": 1, "bounds": "partition"}}, 5733408),
        ({"field": "s", "range": {"step": 1, "bounds": "full"}}, 5733201),
        ({"field": "x", "range": {"step": 1, "unit": "day", "bounds": "full"}}, 6053600),
        ({"field": "x", "range": {"step": 1e-9, "bounds": "full"}}, 5897900),
    ])
    def test_errors(self, coll, spec, code):
        coll.insert_many([{"x": 1, "s": "a"}, {"x": 2, "s": "b"}])
        assert code_of(coll, [{"$densify": spec}]) == code


class TestFunctionWindowMatrix:
    """Every window function with every kind of window, sortBy and partitionBy, and the
    outcome mongod's own matrix test expects of each combination (an error code or
    success): which functions take windows, which need a sort, which errors come at
    parse time and which at run time."""

    FUNCTIONS = {
        "sum": {"$sum": "$a"}, "avg": {"$avg": "$a"}, "stdDevSamp": {"$stdDevSamp": "$a"},
        "stdDevPop": {"$stdDevPop": "$a"}, "min": {"$min": "$a"}, "max": {"$max": "$a"},
        "count": {"$count": {}},
        "derivative": {"$derivative": {"input": "$a"}},
        "derivative_date": {"$derivative": {"input": "$date", "unit": "millisecond"}},
        "integral": {"$integral": {"input": "$a"}},
        "integral_date": {"$integral": {"input": "$a", "unit": "millisecond"}},
        "covariancePop": {"$covariancePop": ["$a", "$date"]},
        "covarianceSamp": {"$covarianceSamp": ["$a", "$date"]},
        "expMovingAvgN": {"$expMovingAvg": {"input": "$a", "N": 3}},
        "expMovingAvgAlpha": {"$expMovingAvg": {"input": "$a", "alpha": 0.1}},
        "push": {"$push": "$a"}, "addToSet": {"$addToSet": "$a"}, "first": {"$first": "$a"},
        "last": {"$last": "$a"}, "shift": {"$shift": {"output": "$a", "by": 1, "default": 0}},
        "documentNumber": {"$documentNumber": {}}, "rank": {"$rank": {}}, "denseRank": {"$denseRank": {}},
    }
    WINDOWS = {
        "none": None,
        "left_unbounded_doc": {"documents": ["unbounded", "current"]},
        "right_unbounded_doc": {"documents": ["current", "unbounded"]},
        "past_doc": {"documents": [-1, "current"]},
        "future_doc": {"documents": ["current", 1]},
        "centered_doc": {"documents": [-1, 1]},
        "full_unbounded_range": {"range": ["unbounded", "unbounded"]},
        "left_unbounded_range": {"range": ["unbounded", "current"]},
        "right_unbounded_range": {"range": ["current", "unbounded"]},
        "past_range": {"range": [-2, "current"]},
        "future_range": {"range": ["current", 2]},
        "centered_range": {"range": [-2, 2]},
    }
    SORTS = {
        "none": None, "asc": {"partitionSeq": 1}, "desc": {"partitionSeq": -1},
        "asc_date": {"date": 1}, "desc_date": {"date": -1}, "multi": {"partitionSeq": 1, "partition": 1},
    }
    PARTITIONS = {"none": None, "field": "$partition", "dynamic_array": "$array", "static_array": {"$const": []}}

    @staticmethod
    def expected(fn, window, sort, partition):
        """mongod's outcome: 0 for success, None to skip, else the error code."""
        failed_to_parse, type_mismatch = 9, 14
        if window.endswith("range") and (sort.endswith("date") or sort.startswith("desc")):
            return None
        if fn.startswith("derivative"):
            if sort == "none" or window == "none" or sort == "multi":
                return failed_to_parse
        elif fn.startswith("integral"):
            if sort in ("none", "multi"):
                return failed_to_parse
        elif fn.startswith("expMovingAvg"):
            if window != "none" or sort == "none":
                return failed_to_parse
        elif fn in ("documentNumber", "rank", "denseRank"):
            if window != "none":
                return 5371601
            if sort in ("none", "multi"):
                return 5371602
        elif fn == "shift":
            if sort == "none" or window != "none":
                return failed_to_parse
        if window.endswith("doc") and sort == "none":
            return 5339901
        if window.endswith("range") and sort in ("none", "multi"):
            return 5339902
        if partition.endswith("array"):
            return type_mismatch
        if fn.startswith("derivative"):
            if fn == "derivative_date" and not sort.endswith("date"):
                return 5624900
            if sort.endswith("date") and fn != "derivative_date":
                return 5624901
        elif fn.startswith("integral"):
            if fn == "integral_date" and not sort.endswith("date"):
                return 5423901
            if sort.endswith("date") and fn != "integral_date":
                return 5423902
        return 0

    def test_matrix(self, coll):
        start = utc(2021, 1, 1)
        coll.insert_many([{"a": i, "date": start + datetime.timedelta(days=i), "array": [],
                           "partition": i % 2, "partitionSeq": i // 2} for i in range(10)])
        mismatches = []
        for fn, spec in self.FUNCTIONS.items():
            for window, bounds in self.WINDOWS.items():
                for sort, sort_by in self.SORTS.items():
                    for partition, partition_by in self.PARTITIONS.items():
                        want = self.expected(fn, window, sort, partition)
                        if want is None:
                            continue
                        stage = {"output": {"x": dict(spec, **({"window": bounds} if bounds else {}))}}
                        if sort_by:
                            stage["sortBy"] = sort_by
                        if partition_by:
                            stage["partitionBy"] = partition_by
                        try:
                            list(coll.aggregate([{"$setWindowFields": stage}]))
                            got = 0
                        except OperationFailure as e:
                            got = e.code
                        if got != want:
                            mismatches.append((fn, window, sort, partition, want, got))
        assert mismatches == []


def test_the_n_accumulators_and_median_are_window_functions(db):
    """$topN, $maxN and $median (added to $group beside the windows) work over windows."""
    db.s.insert_many([{"_id": i, "g": i % 2, "v": i * 3 % 7} for i in range(8)])
    out = list(db.s.aggregate([
        {"$setWindowFields": {"partitionBy": "$g", "sortBy": {"_id": 1}, "output": {
            "top2": {"$topN": {"n": 2, "sortBy": {"v": -1}, "output": "$v"},
                     "window": {"documents": ["unbounded", "current"]}},
            "med": {"$median": {"input": "$v", "method": "approximate"},
                    "window": {"documents": [-1, 1]}},
            "mx": {"$maxN": {"n": 2, "input": "$v"},
                   "window": {"documents": ["unbounded", "unbounded"]}},
        }}},
        {"$sort": {"_id": 1}},
        {"$project": {"_id": 0, "top2": 1, "med": 1, "mx": 1}},
    ]))
    # Partition g=0 holds v 0, 6, 5, 4 (ids 0, 2, 4, 6); g=1 holds 3, 2, 1, 0.
    assert out == [
        {"top2": [0], "med": 0.0, "mx": [6, 5]},
        {"top2": [3], "med": 2.0, "mx": [3, 2]},
        {"top2": [6, 0], "med": 5.0, "mx": [6, 5]},
        {"top2": [3, 2], "med": 2.0, "mx": [3, 2]},
        {"top2": [6, 5], "med": 5.0, "mx": [6, 5]},
        {"top2": [3, 2], "med": 1.0, "mx": [3, 2]},
        {"top2": [6, 5], "med": 4.0, "mx": [6, 5]},
        {"top2": [3, 2], "med": 0.0, "mx": [3, 2]},
    ]


class TestMemoryLimit:
    """mongod holds a partition in memory up to 100 MB (internalDocumentSourceSet-
    WindowFieldsMaxMemoryBytes) and spills past it; with allowDiskUse: false it fails
    with 5643011 instead. One 1 MiB document unwound 110 times makes a 110 MiB partition
    (no sortBy or partitionBy: no $sort in front, whose own limit would come first)."""

    PIPELINE = [
        {"$set": {"r": {"$range": [0, 110]}}},
        {"$unwind": "$r"},
        {"$setWindowFields": {"output": {"total": {"$sum": "$r"}}}},
        {"$project": {"_id": 0, "r": 1, "total": 1}},
    ]

    @pytest.fixture
    def big(self, coll):
        coll.insert_one({"s": "x" * (1 << 20)})
        return coll

    def test_allow_disk_use_false_fails_past_the_limit(self, big):
        with pytest.raises(OperationFailure) as exc:
            list(big.aggregate(self.PIPELINE, allowDiskUse=False))
        assert exc.value.code == 5643011
        assert "Exceeded max memory. Set 'allowDiskUse: true' to spill to disk" in str(exc.value)

    @pytest.mark.parametrize("options", [{}, {"allowDiskUse": True}])
    def test_otherwise_the_partition_is_computed(self, big, options):
        out = list(big.aggregate(self.PIPELINE, **options))
        assert out == [{"r": r, "total": sum(range(110))} for r in range(110)]

    def test_a_small_partition_passes_with_allow_disk_use_false(self, coll):
        coll.insert_many([{"_id": i, "v": i} for i in range(5)])
        out = list(coll.aggregate([{"$setWindowFields": {"sortBy": {"_id": 1}, "output": {
            "m": {"$max": "$v", "window": {"documents": [-1, 0]}}}}}], allowDiskUse=False))
        assert [d["m"] for d in out] == [0, 1, 2, 3, 4]

"""Expressions $sin $cos $tan $asin $acos $atan $atan2 and the hyperbolic ones,
$degreesToRadians $radiansToDegrees, $bitAnd $bitOr $bitXor $bitNot, $tsSecond
$tsIncrement: the MongoDB documentation's examples and documented outputs, mongod's
null/NaN rules and domain errors, and its codes for bad arguments."""

import math

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure

# The documentation's triangle: Decimal128 sides and angle.
ANGLE_A = Decimal128("53.13010235415597870314438744090659")


def project(coll, expr, doc=None):
    """Evaluates `expr` against `doc` (one document) and returns the result."""
    coll.delete_many({})
    coll.insert_one(dict(doc or {}, _id=1))
    out = list(coll.aggregate([{"$project": {"_id": 0, "r": expr}}]))
    return out[0].get("r", "missing")


def error(coll, expr, doc=None):
    with pytest.raises(OperationFailure) as e:
        project(coll, expr, doc)
    return e.value.code, e.value.details.get("errmsg")


def close_decimal(value, expected):
    """A Decimal128 result, equal to the documented 34-digit value to double precision
    (this server computes trigonometry on Decimal128 through a double)."""
    assert isinstance(value, Decimal128), value
    assert math.isclose(float(value.to_decimal()), float(expected), rel_tol=1e-13, abs_tol=1e-13)


class TestTrigonometry:
    def test_documented_triangle(self, coll):
        doc = {"angle_a": ANGLE_A, "hypotenuse": Decimal128("5")}
        side_b = project(coll, {"$multiply": [{"$sin": {"$degreesToRadians": "$angle_a"}}, "$hypotenuse"]}, doc)
        close_decimal(side_b, "4.000000000000000000000000000000000")
        side_a = project(coll, {"$multiply": [{"$cos": {"$degreesToRadians": "$angle_a"}}, "$hypotenuse"]}, doc)
        close_decimal(side_a, "2.999999999999999999999999999999999")
        sides = {"side_a": Decimal128("3"), "side_b": Decimal128("4"), "hypotenuse": Decimal128("5")}
        angle = project(coll, {"$radiansToDegrees": {"$asin": {"$divide": ["$side_a", "$hypotenuse"]}}}, sides)
        close_decimal(angle, "36.86989764584402129685561255909341")
        angle = project(coll, {"$radiansToDegrees": {"$acos": {"$divide": ["$side_b", "$hypotenuse"]}}}, sides)
        close_decimal(angle, "36.86989764584402129685561255909341")
        angle = project(coll, {"$radiansToDegrees": {"$atan": {"$divide": ["$side_b", "$side_a"]}}}, sides)
        close_decimal(angle, "53.13010235415597870314438744090660")
        angle = project(coll, {"$radiansToDegrees": {"$atan2": ["$side_b", "$side_a"]}}, sides)
        close_decimal(angle, "53.13010235415597870314438744090660")
        side_a = project(coll, {"$multiply": [{"$tan": {"$degreesToRadians": "$angle_a"}}, "$side_b"]},
                         {"angle_a": Decimal128("36.86989764584402129685561255909341"), "side_b": Decimal128("4")})
        close_decimal(side_a, "3.000000000000000000000000000000000")

    @pytest.mark.parametrize("op,fn", [
        ("$sin", math.sin), ("$cos", math.cos), ("$tan", math.tan), ("$asin", math.asin),
        ("$acos", math.acos), ("$atan", math.atan), ("$sinh", math.sinh), ("$cosh", math.cosh),
        ("$tanh", math.tanh), ("$asinh", math.asinh), ("$atanh", math.atanh),
        ("$degreesToRadians", math.radians), ("$radiansToDegrees", math.degrees),
    ])
    def test_doubles_and_ints_give_doubles(self, coll, op, fn):
        for x in (0.5, -0.25, 0):
            got = project(coll, {op: "$x"}, {"x": x})
            assert isinstance(got, float)
            assert got == pytest.approx(fn(x), rel=1e-15, abs=1e-15)
        assert project(coll, {op: Int64(0)}) == fn(0)

    def test_acosh_and_atan2(self, coll):
        assert project(coll, {"$acosh": 2}) == pytest.approx(math.acosh(2), rel=1e-15)
        assert project(coll, {"$acosh": 1}) == 0.0
        assert project(coll, {"$atan2": [1, -1]}) == pytest.approx(math.atan2(1, -1), rel=1e-15)
        assert isinstance(project(coll, {"$atan2": [1, Decimal128("2")]}), Decimal128)

    def test_null_missing_and_nan(self, coll):
        for op in ("$sin", "$acos", "$atanh", "$sinh", "$degreesToRadians"):
            assert project(coll, {op: None}) is None
            assert project(coll, {op: "$missing"}) is None
            assert math.isnan(project(coll, {op: float("nan")}))
            assert project(coll, {op: Decimal128("NaN")}).to_decimal().is_nan()
        assert project(coll, {"$atan2": [None, 1]}) is None
        assert project(coll, {"$atan2": [1, "$missing"]}) is None
        assert project(coll, {"$atan2": [None, "x"]}) is None

    @pytest.mark.parametrize("expr,message", [
        ({"$cos": float("inf")}, "cannot apply $cos to inf, value must in (-inf,inf)"),
        ({"$sin": float("-inf")}, "cannot apply $sin to -inf, value must in (-inf,inf)"),
        ({"$acos": 2}, "cannot apply $acos to 2, value must in [-1,1]"),
        ({"$asin": -1.5}, "cannot apply $asin to -1.5, value must in [-1,1]"),
        ({"$atanh": Decimal128("1.5")}, "cannot apply $atanh to 1.5, value must in [-1,1]"),
        ({"$acosh": 0.5}, "cannot apply $acosh to 0.5, value must in [1,inf]"),
    ])
    def test_domain_errors(self, coll, expr, message):
        code, msg = error(coll, {"$add": [expr]}, {})
        assert code == 50989
        assert message in msg

    def test_bad_arguments(self, coll):
        assert error(coll, {"$sin": "x"})[0] == 28765
        assert error(coll, {"$atan2": ["x", 1]})[0] == 51044
        assert error(coll, {"$atan2": [1, "x"]})[0] == 51045
        assert error(coll, {"$sin": [1, 2]})[0] == 16020
        assert error(coll, {"$atan2": [1]})[0] == 16020


@pytest.fixture
def switchboard(coll):
    coll.insert_many([
        {"_id": 0, "a": 0, "b": 127},
        {"_id": 1, "a": 2, "b": 3},
        {"_id": 2, "a": 3, "b": 5},
    ])
    return coll


def results(coll, expr):
    return [d["result"] for d in coll.aggregate([{"$sort": {"_id": 1}}, {"$project": {"result": expr}}])]


class TestBitwise:
    def test_documented_examples(self, switchboard):
        assert results(switchboard, {"$bitAnd": ["$a", "$b"]}) == [0, 2, 1]
        assert results(switchboard, {"$bitOr": ["$a", "$b"]}) == [127, 3, 7]
        assert results(switchboard, {"$bitXor": ["$a", "$b"]}) == [127, 1, 6]
        assert results(switchboard, {"$bitNot": "$a"}) == [-1, -3, -4]
        assert all(type(r) is int for r in results(switchboard, {"$bitAnd": ["$a", "$b"]}))

    def test_a_long_operand_gives_longs(self, switchboard):
        longs = results(switchboard, {"$bitAnd": ["$a", Int64(63)]})
        assert longs == [0, 2, 3] and all(isinstance(r, Int64) for r in longs)
        assert results(switchboard, {"$bitOr": ["$a", Int64(63)]}) == [63, 63, 63]
        assert results(switchboard, {"$bitXor": ["$a", Int64(63)]}) == [63, 61, 60]
        assert isinstance(results(switchboard, {"$bitNot": Int64(5)})[0], Int64)

    def test_identities_and_nulls(self, coll):
        assert project(coll, {"$bitAnd": []}) == -1
        assert project(coll, {"$bitOr": []}) == 0
        assert project(coll, {"$bitXor": 6}) == 6
        assert project(coll, {"$bitAnd": [1, None]}) is None
        assert project(coll, {"$bitOr": [1, "$missing"]}) is None
        assert project(coll, {"$bitNot": None}) is None

    def test_bad_operands(self, coll):
        assert error(coll, {"$bitAnd": [1, 1.5]}) == (14, "$bitAnd only supports int and long operands.")
        assert error(coll, {"$bitOr": "abc"}) == (14, "$bitOr only supports int and long operands.")
        assert error(coll, {"$bitNot": 1.5}) == (14, "$bitNot only supports int and long, not: double.")
        assert error(coll, {"$bitNot": "abc"}) == (28765, "$bitNot only supports numeric types, not string")


class TestTimestampParts:
    @pytest.fixture
    def sales(self, coll):
        coll.insert_many([
            {"_id": 0, "symbol": "MDB", "saleTimestamp": Timestamp(1622731060, 1)},
            {"_id": 1, "symbol": "MDB", "saleTimestamp": Timestamp(1622731060, 2)},
            {"_id": 2, "symbol": "MSFT", "saleTimestamp": Timestamp(1714124193, 1)},
            {"_id": 3, "symbol": "MSFT", "saleTimestamp": Timestamp(1714124193, 2)},
            {"_id": 4, "symbol": "MSFT", "saleTimestamp": Timestamp(1714124193, 3)},
        ])
        return coll

    def test_documented_examples(self, sales):
        seconds = results(sales, {"$tsSecond": "$saleTimestamp"})
        assert seconds == [1622731060, 1622731060, 1714124193, 1714124193, 1714124193]
        assert all(isinstance(s, Int64) for s in seconds)
        increments = results(sales, {"$tsIncrement": "$saleTimestamp"})
        assert increments == [1, 2, 1, 2, 3] and all(isinstance(i, Int64) for i in increments)
        even = sales.find({"$expr": {"$eq": [{"$mod": [{"$tsIncrement": "$saleTimestamp"}, 2]}, 0]}}, {"_id": 1})
        assert [d["_id"] for d in even] == [1, 3]

    def test_null_and_bad_arguments(self, coll):
        assert project(coll, {"$tsSecond": None}) is None
        assert project(coll, {"$tsIncrement": "$missing"}) is None
        assert error(coll, {"$tsSecond": 1.5}) == (5687301, " Argument to $tsSecond must be a timestamp, but is double")
        assert error(coll, {"$tsIncrement": "x"}) == (5687302, " Argument to $tsIncrement must be a timestamp, but is string")

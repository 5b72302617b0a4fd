"""Decimal128 arithmetic in decimal: $divide, $sqrt, $ln, $log, $log10, $exp, $pow and the
sums and products past an exact coefficient give mongod's 34-digit results, checked
against Python's decimal module in a decimal128 context (another implementation of the
same General Decimal Arithmetic)."""

from decimal import ROUND_HALF_EVEN, Context, Decimal

import pytest
from bson.decimal128 import Decimal128
from pymongo.errors import OperationFailure

D128 = Context(prec=34, rounding=ROUND_HALF_EVEN, Emax=6144, Emin=-6143)


def project(coll, expr):
    coll.delete_many({})
    coll.insert_one({"_id": 1})
    return list(coll.aggregate([{"$project": {"_id": 0, "r": expr}}]))[0]["r"]


def nd(s):
    return Decimal128(s)


CASES = [
    ({"$divide": [nd("1"), nd("3")]}, D128.divide(Decimal(1), Decimal(3))),
    ({"$divide": [nd("22"), nd("7")]}, D128.divide(Decimal(22), Decimal(7))),
    ({"$sqrt": nd("2")}, D128.sqrt(Decimal(2))),
    ({"$sqrt": nd("0.0001")}, D128.sqrt(Decimal("0.0001"))),
    ({"$ln": nd("10")}, D128.ln(Decimal(10))),
    ({"$log10": nd("3")}, D128.log10(Decimal(3))),
    ({"$log10": nd("1000")}, D128.log10(Decimal(1000))),
    ({"$exp": nd("2.5")}, D128.exp(Decimal("2.5"))),
    ({"$pow": [nd("1.1"), nd("20")]}, D128.power(Decimal("1.1"), Decimal(20))),
    ({"$pow": [nd("3"), nd("0.5")]}, D128.power(Decimal(3), Decimal("0.5"))),
    ({"$add": [nd("1E+20"), nd("1.00000000000000000001")]},
     D128.add(Decimal("1E+20"), Decimal("1.00000000000000000001"))),
    ({"$multiply": [nd("3.333333333333333333333"), nd("3.333333333333333333333")]},
     D128.multiply(Decimal("3.333333333333333333333"), Decimal("3.333333333333333333333"))),
]


@pytest.mark.parametrize("expr,expected", CASES, ids=[str(c[0]) for c in CASES])
def test_decimal_results_match_decimal128_arithmetic(coll, expr, expected):
    got = project(coll, expr)
    assert isinstance(got, Decimal128), got
    assert str(got) == str(expected)


def test_manual_one_third(coll):
    got = project(coll, {"$divide": [nd("1"), nd("3")]})
    assert got == Decimal128("0.3333333333333333333333333333333333")


def test_log_of_exact_powers_of_ten(coll):
    assert project(coll, {"$log": [nd("100"), nd("10")]}) == Decimal128("2")


@pytest.mark.parametrize(
    "expr,code",
    [
        ({"$sqrt": nd("-1")}, 28714),
        ({"$ln": nd("0")}, 28766),
        ({"$log10": nd("-5")}, 28761),
        ({"$log": [nd("-1"), nd("10")]}, 28758),
        ({"$log": [nd("5"), nd("1")]}, 28759),
    ],
)
def test_domain_errors(coll, expr, code):
    with pytest.raises(OperationFailure) as e:
        project(coll, expr)
    assert e.value.code == code


def test_divide_by_decimal_zero(coll):
    with pytest.raises(OperationFailure) as e:
        project(coll, {"$divide": [nd("1"), nd("0.00")]})
    assert "can't $divide by zero" in e.value.details["errmsg"]

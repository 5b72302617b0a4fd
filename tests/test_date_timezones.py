"""IANA time-zone names in date expressions: the MongoDB manual's examples, and dates on
either side of a daylight-saving change in America/New_York and Europe/Berlin, where a
fixed offset would be an hour off."""

from datetime import datetime, timezone

import pytest
from pymongo.errors import OperationFailure


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc).replace(tzinfo=None)


def project(coll, expr, doc):
    coll.delete_many({})
    coll.insert_one(dict(doc, _id=1))
    return list(coll.aggregate([{"$project": {"_id": 0, "r": expr}}]))[0]["r"]


def test_manual_date_to_string_example(coll):
    doc = {"date": utc(2014, 1, 1, 8, 15, 39, 736000)}
    spec = {"format": "%H:%M:%S:%L%z", "date": "$date", "timezone": "America/New_York"}
    assert project(coll, {"$dateToString": spec}, doc) == "03:15:39:736-0500"
    minutes = {"format": "%Z", "date": "$date", "timezone": "America/New_York"}
    assert project(coll, {"$dateToString": minutes}, doc) == "-300"
    fixed = dict(spec, timezone="+04:30")
    assert project(coll, {"$dateToString": fixed}, doc) == "12:45:39:736+0430"


@pytest.mark.parametrize(
    "zone,winter,summer",
    [("America/New_York", 7, 8), ("Europe/Berlin", 13, 14), ("UTC", 12, 12), ("GMT", 12, 12)],
)
def test_hour_in_winter_and_summer(coll, zone, winter, summer):
    expr = {"$hour": {"date": "$d", "timezone": zone}}
    assert project(coll, expr, {"d": utc(2021, 1, 15, 12)}) == winter
    assert project(coll, expr, {"d": utc(2021, 7, 15, 12)}) == summer


def test_manual_date_to_parts_and_from_string(coll):
    parts = project(
        coll,
        {"$dateToParts": {"date": "$d", "timezone": "America/New_York"}},
        {"d": utc(2017, 1, 1, 1, 29, 9, 123000)},
    )
    assert parts == {
        "year": 2016, "month": 12, "day": 31, "hour": 20,
        "minute": 29, "second": 9, "millisecond": 123,
    }
    parsed = project(
        coll,
        {"$dateFromString": {"dateString": "$s", "timezone": "America/New_York"}},
        {"s": "2017-02-08T12:10:40.787"},
    )
    assert parsed == utc(2017, 2, 8, 17, 10, 40, 787000)


def test_date_trunc_by_day_across_dst_change(coll):
    expr = {"$dateTrunc": {"date": "$d", "unit": "day", "timezone": "America/New_York"}}
    # Clocks went forward at 02:00 on 2021-03-14: that midnight was still EST (-5).
    assert project(coll, expr, {"d": utc(2021, 3, 14, 12)}) == utc(2021, 3, 14, 5)
    # And back at 02:00 on 2021-11-07: that midnight was still EDT (-4).
    assert project(coll, expr, {"d": utc(2021, 11, 7, 12)}) == utc(2021, 11, 7, 4)


def test_date_add_day_versus_24_hours(coll):
    doc = {"d": utc(2021, 3, 13, 17)}  # noon EST, the day before the change

    def add(unit, amount):
        spec = {"startDate": "$d", "unit": unit, "amount": amount,
                "timezone": "America/New_York"}
        return project(coll, {"$dateAdd": spec}, doc)

    assert add("day", 1) == utc(2021, 3, 14, 16)  # noon EDT
    assert add("hour", 24) == utc(2021, 3, 14, 17)  # 13:00 EDT


def test_unknown_zone_name_is_40485(coll):
    with pytest.raises(OperationFailure) as e:
        project(coll, {"$year": {"date": "$d", "timezone": "Mars/Olympus"}}, {"d": utc(2021, 1, 1)})
    assert e.value.code == 40485
    assert 'unrecognized time zone identifier: "Mars/Olympus"' in e.value.details["errmsg"]

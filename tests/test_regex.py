"""One regular-expression engine for `$regex` queries and the `$regexMatch`,
`$regexFind` and `$regexFindAll` expressions: each pattern (lookaround, backreferences,
each option, BSON regex values) gives the same answer in a find and in `$regexMatch`,
the answer PCRE (mongod) gives; and mongod's codes for bad patterns in each place."""

import pytest
from bson.regex import Regex
from pymongo.errors import OperationFailure

TEXTS = [
    "users",
    "system.views",
    "cost $42",
    "cost 42",
    "aabaa",
    "aaba",
    "ABC",
    "abc",
    "a\nb\nc",
    "a\nc",
    "Foo line1\nFoo line2",
    "cafétéria",
]

# (pattern, options, the texts above that PCRE matches)
CASES = [
    # Negative lookahead (drivers' listCollections filter).
    (r"^(?!system\.)", "", {t for t in TEXTS if not t.startswith("system.")}),
    # Positive lookahead.
    (r"a(?=b)", "", {"aabaa", "aaba", "abc"}),
    # Lookbehind, positive and negative.
    (r"(?<=\$)\d+", "", {"cost $42"}),
    (r"(?<!\$)\b\d+", "", {"cost 42"}),
    # Backreferences.
    (r"^(a+)b\1$", "", {"aabaa"}),
    (r"(a)\1", "", {"aabaa", "aaba"}),
    # Each option letter.
    (r"^abc$", "i", {"ABC", "abc"}),
    (r"^abc$", "", {"abc"}),
    (r"^b$", "m", {"a\nb\nc"}),
    (r"^b$", "", set()),
    (r"^a.c$", "s", {"a\nc", "abc"}),
    (r"^a.c$", "", {"abc"}),
    (r"F o o # a comment", "x", {"Foo line1\nFoo line2"}),
    (r"F o o # a comment", "", set()),
    (r"^caf.t.ria$", "u", {"cafétéria"}),
]


@pytest.fixture
def texts(coll):
    coll.insert_many([{"_id": i, "t": t} for i, t in enumerate(TEXTS)])
    return coll


def found(coll, flt):
    return {d["t"] for d in coll.find(flt)}


def matched_by_expression(coll, regex, options=None):
    spec = {"input": "$t", "regex": regex}
    if options is not None:
        spec["options"] = options
    return {
        d["t"]
        for d in coll.aggregate(
            [{"$match": {"$expr": {"$regexMatch": spec}}}, {"$project": {"t": 1}}]
        )
    }


@pytest.mark.parametrize("pattern,options,expected", CASES)
def test_find_and_regex_match_agree_with_pcre(texts, pattern, options, expected):
    assert found(texts, {"t": {"$regex": pattern, "$options": options}}) == expected
    assert found(texts, {"t": Regex(pattern, options)}) == expected
    assert found(texts, {"t": {"$in": [Regex(pattern, options)]}}) == expected
    assert matched_by_expression(texts, pattern, options) == expected
    assert matched_by_expression(texts, Regex(pattern, options)) == expected


def test_regex_find_all_walks_matches_as_mongod(coll):
    coll.insert_one({"_id": 0, "text": "Simple Example ", "b": "bbbb", "c": "cafétéria"})

    def run(spec):
        return list(coll.aggregate([{"$project": {"_id": 0, "r": spec}}]))[0]["r"]

    assert run({"$regexFindAll": {"input": "$text", "regex": "(m(p))"}}) == [
        {"match": "mp", "idx": 2, "captures": ["mp", "p"]},
        {"match": "mp", "idx": 10, "captures": ["mp", "p"]},
    ]
    # Empty matches: one per character, none past the end.
    assert [m["idx"] for m in run({"$regexFindAll": {"input": "$b", "regex": "()"}})] == [
        0,
        1,
        2,
        3,
    ]
    assert run({"$regexFindAll": {"input": "", "regex": ""}}) == [
        {"match": "", "idx": 0, "captures": []}
    ]
    # idx counts code points; a lookbehind sees text before the search position.
    assert run({"$regexFindAll": {"input": "$c", "regex": "(?<=é)[a-z]"}}) == [
        {"match": "t", "idx": 4, "captures": []},
        {"match": "r", "idx": 6, "captures": []},
    ]
    # An unmatched group is null.
    assert run({"$regexFind": {"input": "$text", "regex": "(x)|(S)"}}) == {
        "match": "S",
        "idx": 0,
        "captures": [None, "S"],
    }


def code_of(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code


def test_invalid_patterns_fail_with_mongods_codes(coll):
    coll.insert_one({"_id": 1, "t": "x"})
    assert code_of(lambda: list(coll.find({"t": {"$regex": "[)"}}))) == 51091
    assert code_of(lambda: list(coll.find({"t": {"$regex": "ab\0c"}}))) == 2
    assert code_of(lambda: list(coll.find({"t": {"$regex": "a", "$options": "z"}}))) == 51108

    def agg(spec):
        return lambda: list(coll.aggregate([{"$project": {"r": {"$regexFind": spec}}}]))

    assert code_of(agg({"input": "$t", "regex": "[0-9"})) == 51111
    # A constant pattern is compiled even where no input is given.
    assert code_of(agg({"input": None, "regex": "[a-c"})) == 51111
    assert code_of(agg({"input": "$t", "regex": "a", "options": "z"})) == 51108
    assert code_of(agg({"input": "$t", "regex": "a\0b"})) == 51109
    assert code_of(agg({"input": "$t", "regex": "a", "options": "\0"})) == 51110
    assert code_of(agg({"input": "$t", "regex": Regex("a", "i"), "options": ""})) == 51107
    # A pattern read from the document is checked when it is evaluated.
    coll.update_one({"_id": 1}, {"$set": {"p": "(unclosed"}})
    assert code_of(agg({"input": "$t", "regex": "$p"})) == 51111

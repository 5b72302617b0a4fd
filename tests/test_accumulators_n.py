"""$group accumulators $top $topN $bottom $bottomN $firstN $lastN $maxN $minN $median
$percentile, and the array-expression forms of $firstN $lastN $maxN $minN $median
$percentile, on the MongoDB 7.0 documentation's own examples and its documented outputs,
plus mongod's error codes for bad arguments."""

import pytest
from bson.int64 import Int64
from pymongo.errors import OperationFailure

GAMESCORES = [
    {"playerId": "PlayerA", "gameId": "G1", "score": 31},
    {"playerId": "PlayerB", "gameId": "G1", "score": 33},
    {"playerId": "PlayerC", "gameId": "G1", "score": 99},
    {"playerId": "PlayerD", "gameId": "G1", "score": 1},
    {"playerId": "PlayerA", "gameId": "G2", "score": 10},
    {"playerId": "PlayerB", "gameId": "G2", "score": 14},
    {"playerId": "PlayerC", "gameId": "G2", "score": 66},
    {"playerId": "PlayerD", "gameId": "G2", "score": 80},
]

# The documentation's "null and missing values" documents: PlayerD has no score.
WITH_NULLS = [
    {"playerId": "PlayerA", "gameId": "G1", "score": 1},
    {"playerId": "PlayerB", "gameId": "G1", "score": 2},
    {"playerId": "PlayerC", "gameId": "G1", "score": 3},
    {"playerId": "PlayerD", "gameId": "G1"},
    {"playerId": "PlayerE", "gameId": "G1", "score": None},
]

TEST_SCORES = [
    {"studentId": "2345", "test01": 62, "test02": 81, "test03": 80},
    {"studentId": "2356", "test01": 60, "test02": 83, "test03": 79},
    {"studentId": "2358", "test01": 67, "test02": 82, "test03": 78},
    {"studentId": "2367", "test01": 64, "test02": 72, "test03": 77},
    {"studentId": "2369", "test01": 60, "test02": 53, "test03": 72},
]

SCORE_ARRAYS = [
    {"playerId": 1, "score": [1, 2, 3]},
    {"playerId": 2, "score": [12, 90, 7, 89, 8]},
    {"playerId": 3, "score": [None]},
    {"playerId": 4, "score": []},
    {"playerId": 5, "score": [1293, None, 3489, 9]},
    {"playerId": 6, "score": ["12.1", 2, Int64(2090845886852), 23]},
]


@pytest.fixture
def games(coll):
    coll.insert_many([dict(d) for d in GAMESCORES])
    return coll


def by_game(coll, acc):
    out = list(coll.aggregate([{"$group": {"_id": "$gameId", "r": acc}}, {"$sort": {"_id": 1}}]))
    return {d["_id"]: d["r"] for d in out}


def documents(db, docs, *stages):
    return list(db.aggregate([{"$documents": docs}, *stages]))


def error_code(fn):
    with pytest.raises(OperationFailure) as e:
        fn()
    return e.value.code


class TestTopBottom:
    def test_top_and_top_n(self, games):
        top = by_game(games, {"$top": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}})
        assert top == {"G1": ["PlayerC", 99], "G2": ["PlayerD", 80]}
        top3 = by_game(games, {"$topN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": 3}})
        assert top3 == {
            "G1": [["PlayerC", 99], ["PlayerB", 33], ["PlayerA", 31]],
            "G2": [["PlayerD", 80], ["PlayerC", 66], ["PlayerB", 14]],
        }

    def test_bottom_and_bottom_n(self, games):
        bottom = by_game(games, {"$bottom": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}}})
        assert bottom == {"G1": ["PlayerD", 1], "G2": ["PlayerA", 10]}
        bottom3 = by_game(games, {"$bottomN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": 3}})
        assert bottom3 == {
            "G1": [["PlayerB", 33], ["PlayerA", 31], ["PlayerD", 1]],
            "G2": [["PlayerC", 66], ["PlayerB", 14], ["PlayerA", 10]],
        }

    def test_bottom_n_keeps_null_and_missing(self, db):
        out = documents(db, WITH_NULLS, {"$group": {"_id": "$gameId", "playerId": {
            "$bottomN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": 3}}}})
        assert out == [{"_id": "G1", "playerId": [["PlayerA", 1], ["PlayerD", None], ["PlayerE", None]]}]

    def test_ties_keep_the_first_document_seen(self, db):
        docs = [{"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 0, "v": "c"}, {"k": 1, "v": "d"}]
        out = documents(db, docs, {"$group": {
            "_id": None,
            "top": {"$topN": {"output": "$v", "sortBy": {"k": -1}, "n": 2}},
            "bottom": {"$bottom": {"output": "$v", "sortBy": {"k": -1}}},
            "bottom2": {"$bottomN": {"output": "$v", "sortBy": {"k": 1}, "n": 2}},
        }})
        assert out == [{"_id": None, "top": ["a", "b"], "bottom": "c", "bottom2": ["a", "b"]}]

    def test_compound_sort_and_n_from_the_group_key(self, games):
        # n reads the group key: {_id: {gameId}} makes "$gameId" the key's field.
        out = list(games.aggregate([
            {"$group": {"_id": {"gameId": "$gameId"}, "r": {"$topN": {
                "output": "$playerId", "sortBy": {"playerId": -1, "score": 1},
                "n": {"$cond": {"if": {"$eq": ["$gameId", "G2"]}, "then": 1, "else": 3}}}}}},
            {"$sort": {"_id.gameId": 1}},
        ]))
        assert out == [
            {"_id": {"gameId": "G1"}, "r": ["PlayerD", "PlayerC", "PlayerB"]},
            {"_id": {"gameId": "G2"}, "r": ["PlayerD"]},
        ]

    @pytest.mark.parametrize("acc,code", [
        ({"$top": 1}, 5788001),
        ({"$top": {"output": "$a", "sortBy": {"a": 1}, "n": 2}}, 5788002),
        ({"$topN": {"output": "$a", "sortBy": {"a": 1}, "x": 2}}, 5788002),
        ({"$topN": {"output": "$a", "sortBy": {"a": 1}}}, 5788003),
        ({"$bottom": {"sortBy": {"a": 1}}}, 5788004),
        ({"$bottomN": {"output": "$a", "n": 1}}, 5788005),
        ({"$top": {"output": "$a", "sortBy": 1}}, 10065),
        ({"$top": {"output": "$a", "sortBy": {"a": 2}}}, 15975),
        ({"$top": {"output": "$a", "sortBy": {"a": "up"}}}, 15974),
        ({"$topN": {"output": "$a", "sortBy": {"a": 1}, "n": 0}}, 5787908),
        ({"$topN": {"output": "$a", "sortBy": {"a": 1}, "n": 1.5}}, 5787903),
        ({"$topN": {"output": "$a", "sortBy": {"a": 1}, "n": "2"}}, 5787902),
    ])
    def test_bad_arguments(self, games, acc, code):
        assert error_code(lambda: list(games.aggregate([{"$group": {"_id": None, "r": acc}}]))) == code


class TestFirstLastMinMaxN:
    def test_first_n_and_last_n(self, games):
        first = by_game(games, {"$firstN": {"input": ["$playerId", "$score"], "n": 3}})
        assert first["G1"] == [["PlayerA", 31], ["PlayerB", 33], ["PlayerC", 99]]
        last = by_game(games, {"$lastN": {"input": ["$playerId", "$score"], "n": 3}})
        assert last["G1"] == [["PlayerB", 33], ["PlayerC", 99], ["PlayerD", 1]]

    def test_max_n_and_min_n(self, games):
        mx = by_game(games, {"$maxN": {"input": ["$score", "$playerId"], "n": 3}})
        assert mx["G1"] == [[99, "PlayerC"], [33, "PlayerB"], [31, "PlayerA"]]
        mn = by_game(games, {"$minN": {"input": ["$score", "$playerId"], "n": 3}})
        assert mn["G1"] == [[1, "PlayerD"], [31, "PlayerA"], [33, "PlayerB"]]

    def test_null_and_missing(self, db):
        out = documents(db, WITH_NULLS, {"$group": {
            "_id": "$gameId",
            "firstFiveScores": {"$firstN": {"input": "$score", "n": 5}},
            "lastThreeScores": {"$lastN": {"input": "$score", "n": 3}},
            "maximumThreeScores": {"$maxN": {"input": "$score", "n": 4}},
            "minScores": {"$minN": {"input": "$score", "n": 4}},
        }})
        assert out == [{
            "_id": "G1",
            "firstFiveScores": [1, 2, 3, None, None],
            "lastThreeScores": [3, None, None],
            "maximumThreeScores": [3, 2, 1],
            "minScores": [1, 2, 3],
        }]

    def test_n_depends_on_the_group_key(self, games):
        out = list(games.aggregate([
            {"$group": {"_id": {"gameId": "$gameId"}, "gamescores": {"$firstN": {
                "input": "$score",
                "n": {"$cond": {"if": {"$eq": ["$gameId", "G2"]}, "then": 1, "else": 3}}}}}},
            {"$sort": {"_id.gameId": 1}},
        ]))
        assert out == [
            {"_id": {"gameId": "G1"}, "gamescores": [31, 33, 99]},
            {"_id": {"gameId": "G2"}, "gamescores": [10]},
        ]

    def test_array_expressions(self, coll):
        coll.insert_many([dict(d) for d in SCORE_ARRAYS])
        out = list(coll.aggregate([{"$sort": {"playerId": 1}}, {"$project": {
            "_id": 0, "playerId": 1,
            "first": {"$firstN": {"n": 3, "input": "$score"}},
            "last": {"$lastN": {"n": 3, "input": "$score"}},
            "max": {"$maxN": {"n": 2, "input": "$score"}},
            "min": {"$minN": {"n": 2, "input": "$score"}},
        }}]))
        assert [d["first"] for d in out] == [
            [1, 2, 3], [12, 90, 7], [None], [], [1293, None, 3489], ["12.1", 2, 2090845886852]]
        assert [d["last"] for d in out] == [
            [1, 2, 3], [7, 89, 8], [None], [], [None, 3489, 9], [2, 2090845886852, 23]]
        assert [d["max"] for d in out] == [[3, 2], [90, 89], [], [], [3489, 1293], ["12.1", 2090845886852]]
        assert [d["min"] for d in out] == [[1, 2], [7, 8], [], [], [9, 1293], [2, 23]]
        assert isinstance(out[5]["max"][1], Int64)

    @pytest.mark.parametrize("acc,code", [
        ({"$firstN": 3}, 5787801),
        ({"$maxN": [1]}, 5787900),
        ({"$lastN": {"input": "$a", "n": 2, "sortBy": {"a": 1}}}, 5787901),
        ({"$minN": {"input": "$a"}}, 5787906),
        ({"$firstN": {"n": 2}}, 5787907),
        ({"$maxN": {"input": "$a", "n": -1}}, 5787908),
        ({"$lastN": {"input": "$a", "n": None}}, 5787902),
    ])
    def test_bad_arguments(self, games, acc, code):
        assert error_code(lambda: list(games.aggregate([{"$group": {"_id": None, "r": acc}}]))) == code

    def test_expression_input_must_be_an_array(self, games):
        code = error_code(lambda: list(games.aggregate([{"$project": {"r": {"$firstN": {"n": 1, "input": "$score"}}}}])))
        assert code == 5788200


class TestQuantiles:
    @pytest.fixture
    def scores(self, coll):
        coll.insert_many([dict(d) for d in TEST_SCORES])
        return coll

    def test_percentile_accumulator(self, scores):
        one = list(scores.aggregate([{"$group": {"_id": None, "test01_percentiles": {
            "$percentile": {"input": "$test01", "p": [0.95], "method": "approximate"}}}}]))
        assert one == [{"_id": None, "test01_percentiles": [67.0]}]
        out = list(scores.aggregate([{"$group": {
            "_id": None,
            "test01_percentiles": {"$percentile": {"input": "$test01", "p": [0.5, 0.75, 0.9, 0.95], "method": "approximate"}},
            "test02_percentiles": {"$percentile": {"input": "$test02", "p": [0.5, 0.75, 0.9, 0.95], "method": "approximate"}},
            "test03_percentiles": {"$percentile": {"input": "$test03", "p": [0.5, 0.75, 0.9, 0.95], "method": "approximate"}},
            "test03_percentile_99": {"$percentile": {"input": "$test03", "p": [0.99], "method": "approximate"}},
        }}]))
        assert out == [{
            "_id": None,
            "test01_percentiles": [62, 64, 67, 67],
            "test02_percentiles": [81, 82, 83, 83],
            "test03_percentiles": [78, 79, 80, 80],
            "test03_percentile_99": [80],
        }]
        assert all(isinstance(x, float) for x in out[0]["test01_percentiles"])

    def test_median_accumulator(self, scores):
        out = list(scores.aggregate([{"$group": {"_id": None, "test01_median": {
            "$median": {"input": "$test01", "method": "approximate"}}}}]))
        assert out == [{"_id": None, "test01_median": 62.0}]

    def test_expressions(self, scores):
        out = list(scores.aggregate([{"$sort": {"studentId": 1}}, {"$project": {
            "_id": 0, "studentId": 1,
            "testMedians": {"$median": {"input": ["$test01", "$test02", "$test03"], "method": "approximate"}},
            "testPercentiles": {"$percentile": {
                "input": ["$test01", "$test02", "$test03"], "p": [0.5, 0.95], "method": "approximate"}},
        }}]))
        assert out == [
            {"studentId": "2345", "testMedians": 80, "testPercentiles": [80, 81]},
            {"studentId": "2356", "testMedians": 79, "testPercentiles": [79, 83]},
            {"studentId": "2358", "testMedians": 78, "testPercentiles": [78, 82]},
            {"studentId": "2367", "testMedians": 72, "testPercentiles": [72, 77]},
            {"studentId": "2369", "testMedians": 60, "testPercentiles": [60, 72]},
        ]

    def test_no_numbers_give_null(self, db):
        out = documents(db, [{"a": "x"}, {"b": 1}], {"$group": {
            "_id": None,
            "m": {"$median": {"input": "$a", "method": "approximate"}},
            "p": {"$percentile": {"input": "$a", "p": [0.1, 0.9], "method": "approximate"}},
        }})
        assert out == [{"_id": None, "m": None, "p": [None, None]}]
        out = documents(db, [{"a": 7}], {"$project": {"_id": 0,
            "scalar": {"$percentile": {"input": "$a", "p": [0.1, 0.9], "method": "approximate"}},
            "none": {"$median": {"input": "$missing", "method": "approximate"}}}})
        assert out == [{"scalar": [7.0, 7.0], "none": None}]

    @pytest.mark.parametrize("acc,code", [
        ({"$percentile": 1}, 7429703),
        ({"$median": "x"}, 7436100),
        ({"$percentile": {"input": "$a", "p": [0.5]}}, 40414),
        ({"$percentile": {"input": "$a", "method": "approximate"}}, 40414),
        ({"$median": {"input": "$a", "p": [0.5], "method": "approximate"}}, 40415),
        ({"$median": {"input": "$a", "method": 1}}, 14),
        ({"$median": {"input": "$a", "method": "discrete"}}, 2),
        ({"$percentile": {"input": "$a", "p": "$b", "method": "approximate"}}, 7750300),
        ({"$percentile": {"input": "$a", "p": [], "method": "approximate"}}, 7750301),
        ({"$percentile": {"input": "$a", "p": ["x"], "method": "approximate"}}, 7750302),
        ({"$percentile": {"input": "$a", "p": [1.5], "method": "approximate"}}, 7750303),
    ])
    def test_bad_arguments(self, scores, acc, code):
        assert error_code(lambda: list(scores.aggregate([{"$group": {"_id": None, "r": acc}}]))) == code

    def test_expression_bad_arguments(self, scores):
        def project(e):
            return lambda: list(scores.aggregate([{"$project": {"r": e}}]))
        assert error_code(project({"$percentile": 1})) == 7436200
        assert error_code(project({"$median": 1})) == 7436201

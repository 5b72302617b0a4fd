use super::*;
use bson::{bson, doc, Bson, Document};

fn ev(expr: Bson, d: &Document) -> Bson {
    evaluate(&expr, d, &Variables::default()).unwrap_or_else(|e| panic!("{expr:?} failed: {e}"))
}

fn evo(expr: Bson, d: &Document) -> Option<Bson> {
    evaluate_opt(&expr, d, &Variables::default()).unwrap()
}

fn e0(expr: Bson) -> Bson {
    ev(expr, &doc! {})
}

fn code(expr: Bson, d: &Document) -> i32 {
    match evaluate(&expr, d, &Variables::default()) {
        Ok(v) => panic!("expected error for {expr:?}, got {v:?}"),
        Err(e) => e.code,
    }
}

fn msg(expr: Bson) -> String {
    evaluate(&expr, &doc! {}, &Variables::default())
        .unwrap_err()
        .message
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

fn date(ms: i64) -> Bson {
    Bson::DateTime(bson::DateTime::from_millis(ms))
}

#[test]
fn field_paths_and_variables() {
    let d = doc! {"a": {"b": 5}, "arr": [{"b": 1}, {"b": 2}, 3, {"c": 1}, [{"b": 9}]], "x": [1, 2]};
    assert_eq!(ev(bson!("$a.b"), &d), bson!(5));
    assert_eq!(ev(bson!("$arr.b"), &d), bson!([1, 2]));
    assert_eq!(evo(bson!("$nope"), &d), None);
    assert_eq!(evo(bson!("$a.b.c"), &d), None);
    assert_eq!(ev(bson!("$nope"), &d), Bson::Null);
    assert_eq!(ev(bson!("$$ROOT.a"), &d), bson!({"b": 5}));
    assert_eq!(ev(bson!("$$CURRENT.a.b"), &d), bson!(5));
    assert_eq!(evo(bson!("$$REMOVE"), &d), None);
    assert!(matches!(e0(bson!("$$NOW")), Bson::DateTime(_)));
    let mut vars = Variables::default();
    vars.set("v", bson!({"y": [1, 2]}));
    assert_eq!(evaluate(&bson!("$$v.y"), &d, &vars).unwrap(), bson!([1, 2]));
    assert_eq!(
        evaluate(&bson!("$$undefinedVar"), &d, &Variables::default())
            .unwrap_err()
            .code,
        17276
    );
    // Literal, nested document and array expressions.
    assert_eq!(ev(bson!({"$literal": "$a"}), &d), bson!("$a"));
    assert_eq!(
        ev(bson!({"k": "$a.b", "m": ["$a.b", "$nope", 1]}), &d),
        bson!({"k": 5, "m": [5, null, 1]})
    );
    assert_eq!(ev(bson!({"k": "$nope"}), &d), bson!({}));
    assert_eq!(ev(bson!({"$const": 3}), &d), bson!(3));
}

#[test]
fn parse_errors() {
    assert_eq!(code(bson!({"$foo": 1}), &doc! {}), 168);
    assert_eq!(msg(bson!({"$foo": 1})), "Unrecognized expression '$foo'");
    assert_eq!(code(bson!({"$subtract": [1]}), &doc! {}), 16020);
    assert_eq!(
        msg(bson!({"$subtract": [1, 2, 3]})),
        "Expression $subtract takes exactly 2 arguments. 3 were passed in."
    );
    assert_eq!(code(bson!({"$slice": [[1]]}), &doc! {}), 28667);
    assert_eq!(code(bson!({"$add": 1, "$sub": 2}), &doc! {}), 15983);
    assert_eq!(code(bson!("$"), &doc! {}), 16872);
    assert_eq!(code(bson!({"a": 1, "$b": 2}), &doc! {}), 16410);
    assert_eq!(
        code(bson!({"$cond": {"if": true, "then": 1}}), &doc! {}),
        17082
    );
    assert_eq!(
        code(bson!({"$let": {"vars": {"Bad": 1}, "in": 1}}), &doc! {}),
        16867
    );
}

#[test]
fn arithmetic_promotion() {
    assert_eq!(e0(bson!({"$add": [1, 2]})), Bson::Int32(3));
    assert_eq!(
        e0(bson!({"$add": [i32::MAX, 1]})),
        Bson::Int64(i32::MAX as i64 + 1)
    );
    assert_eq!(e0(bson!({"$add": [1i64, 2]})), Bson::Int64(3));
    assert_eq!(
        e0(bson!({"$add": [i64::MAX, 1i64]})),
        Bson::Double(i64::MAX as f64 + 1.0)
    );
    assert_eq!(e0(bson!({"$add": [1, 2.5]})), Bson::Double(3.5));
    assert_eq!(e0(bson!({"$add": [dec("0.1"), dec("0.2")]})), dec("0.3"));
    assert_eq!(e0(bson!({"$add": [dec("1.5"), 1]})), dec("2.5"));
    assert_eq!(e0(bson!({"$add": []})), Bson::Int32(0));
    assert_eq!(e0(bson!({"$add": [date(1000), 500]})), date(1500));
    assert_eq!(code(bson!({"$add": [date(1), date(2)]}), &doc! {}), 16612);
    assert_eq!(code(bson!({"$add": [1, "x"]}), &doc! {}), 14);
    assert_eq!(
        msg(bson!({"$add": [1, "x"]})),
        "$add only supports numeric or date types, not string"
    );
    assert_eq!(e0(bson!({"$add": [1, null]})), Bson::Null);
    assert_eq!(ev(bson!({"$add": [1, "$missing"]}), &doc! {}), Bson::Null);
    assert_eq!(e0(bson!({"$subtract": [5, 7]})), Bson::Int32(-2));
    assert_eq!(
        e0(bson!({"$subtract": [i32::MIN, 1]})),
        Bson::Int64(i32::MIN as i64 - 1)
    );
    assert_eq!(
        e0(bson!({"$subtract": [date(5000), date(2000)]})),
        Bson::Int64(3000)
    );
    assert_eq!(e0(bson!({"$subtract": [date(5000), 1000]})), date(4000));
    assert_eq!(code(bson!({"$subtract": [1, date(0)]}), &doc! {}), 14);
    assert_eq!(e0(bson!({"$multiply": [3, 4]})), Bson::Int32(12));
    assert_eq!(
        e0(bson!({"$multiply": [100000, 100000]})),
        Bson::Int64(10_000_000_000)
    );
    assert_eq!(e0(bson!({"$multiply": [2, 1.5]})), Bson::Double(3.0));
    assert_eq!(e0(bson!({"$multiply": [dec("1.1"), 3]})), dec("3.3"));
    assert_eq!(e0(bson!({"$divide": [7, 2]})), Bson::Double(3.5));
    assert_eq!(code(bson!({"$divide": [7, 0]}), &doc! {}), 2);
    assert_eq!(msg(bson!({"$divide": [7, 0]})), "can't $divide by zero");
    assert_eq!(e0(bson!({"$divide": [null, 0]})), Bson::Null);
    assert_eq!(e0(bson!({"$mod": [7, 3]})), Bson::Int32(1));
    assert_eq!(e0(bson!({"$mod": [-7, 3]})), Bson::Int32(-1));
    assert_eq!(e0(bson!({"$mod": [7.5, 2]})), Bson::Double(1.5));
    assert_eq!(code(bson!({"$mod": [7, 0]}), &doc! {}), 2);
}

#[test]
fn math_functions() {
    assert_eq!(e0(bson!({"$abs": -5})), Bson::Int32(5));
    assert_eq!(e0(bson!({"$abs": i32::MIN})), Bson::Int64(2147483648));
    assert_eq!(e0(bson!({"$abs": null})), Bson::Null);
    assert_eq!(code(bson!({"$abs": "x"}), &doc! {}), 28765);
    assert_eq!(e0(bson!({"$ceil": 1.2})), Bson::Double(2.0));
    assert_eq!(e0(bson!({"$floor": -1.2})), Bson::Double(-2.0));
    assert_eq!(e0(bson!({"$floor": 3})), Bson::Int32(3));
    assert_eq!(e0(bson!({"$round": [2.5]})), Bson::Double(2.0));
    assert_eq!(e0(bson!({"$round": [3.5]})), Bson::Double(4.0));
    assert_eq!(e0(bson!({"$round": [1.2345, 2]})), Bson::Double(1.23));
    assert_eq!(e0(bson!({"$round": [1234, -2]})), Bson::Int32(1200));
    assert_eq!(e0(bson!({"$round": [1250, -2]})), Bson::Int32(1200));
    assert_eq!(e0(bson!({"$trunc": [1.789, 1]})), Bson::Double(1.7));
    assert_eq!(e0(bson!({"$trunc": -2.7})), Bson::Double(-2.0));
    assert_eq!(e0(bson!({"$round": [dec("2.675"), 2]})), dec("2.68"));
    assert_eq!(e0(bson!({"$sqrt": 16})), Bson::Double(4.0));
    assert_eq!(code(bson!({"$sqrt": -1}), &doc! {}), 28714);
    assert_eq!(e0(bson!({"$pow": [2, 10]})), Bson::Int32(1024));
    assert_eq!(e0(bson!({"$pow": [2, 40]})), Bson::Int64(1 << 40));
    assert_eq!(e0(bson!({"$pow": [2, -1]})), Bson::Double(0.5));
    assert_eq!(code(bson!({"$pow": [0, -1]}), &doc! {}), 28764);
    assert_eq!(e0(bson!({"$exp": 0})), Bson::Double(1.0));
    assert_eq!(e0(bson!({"$ln": 1})), Bson::Double(0.0));
    assert_eq!(e0(bson!({"$log10": 1000})), Bson::Double(3.0));
    assert_eq!(e0(bson!({"$log": [8, 2]})), Bson::Double(3.0));
    assert_eq!(code(bson!({"$ln": 0}), &doc! {}), 28766);
    assert_eq!(code(bson!({"$log": [8, 1]}), &doc! {}), 28759);
}

#[test]
fn comparison_and_boolean() {
    let d = doc! {"a": 1, "n": null};
    assert_eq!(ev(bson!({"$eq": ["$a", 1.0]}), &d), Bson::Boolean(true));
    assert_eq!(
        ev(bson!({"$eq": ["$missing", null]}), &d),
        Bson::Boolean(false)
    );
    assert_eq!(ev(bson!({"$eq": ["$n", null]}), &d), Bson::Boolean(true));
    assert_eq!(
        ev(bson!({"$lt": ["$missing", null]}), &d),
        Bson::Boolean(true)
    );
    assert_eq!(ev(bson!({"$gt": ["a", 5]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$ne": [1, 2]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$gte": [2, 2]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$lte": [3, 2]}), &d), Bson::Boolean(false));
    assert_eq!(ev(bson!({"$cmp": [1, 2]}), &d), Bson::Int32(-1));
    assert_eq!(ev(bson!({"$cmp": ["b", "a"]}), &d), Bson::Int32(1));
    assert_eq!(ev(bson!({"$and": [1, "x", []]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$and": [1, 0]}), &d), Bson::Boolean(false));
    assert_eq!(ev(bson!({"$and": []}), &d), Bson::Boolean(true));
    assert_eq!(
        ev(bson!({"$or": [null, "$missing", false]}), &d),
        Bson::Boolean(false)
    );
    assert_eq!(
        ev(bson!({"$or": [0, {"$gt": ["$a", 0]}]}), &d),
        Bson::Boolean(true)
    );
    assert_eq!(ev(bson!({"$not": [0]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$not": "$a"}), &d), Bson::Boolean(false));
    // $and short-circuits: the failing divide is never evaluated.
    assert_eq!(
        ev(bson!({"$and": [false, {"$divide": [1, 0]}]}), &d),
        Bson::Boolean(false)
    );
}

#[test]
fn conditionals() {
    let d = doc! {"a": 5, "n": null};
    assert_eq!(
        ev(bson!({"$cond": [{"$gt": ["$a", 3]}, "big", "small"]}), &d),
        bson!("big")
    );
    assert_eq!(
        ev(bson!({"$cond": {"if": "$n", "then": 1, "else": 2}}), &d),
        bson!(2)
    );
    assert_eq!(
        ev(bson!({"$ifNull": ["$n", "$missing", "d"]}), &d),
        bson!("d")
    );
    assert_eq!(ev(bson!({"$ifNull": ["$a", "d"]}), &d), bson!(5));
    assert_eq!(evo(bson!({"$ifNull": ["$n", "$missing"]}), &d), None);
    assert_eq!(code(bson!({"$ifNull": ["$n"]}), &d), 1257300);
    let sw = bson!({"$switch": {"branches": [{"case": {"$lt": ["$a", 0]}, "then": "neg"}, {"case": {"$gt": ["$a", 0]}, "then": "pos"}], "default": "zero"}});
    assert_eq!(ev(sw, &d), bson!("pos"));
    let sw2 = bson!({"$switch": {"branches": [{"case": false, "then": 1}]}});
    assert_eq!(code(sw2, &d), 40066);
    assert_eq!(code(bson!({"$switch": {"branches": []}}), &d), 40068);
}

#[test]
fn string_operators() {
    let d = doc! {"s": "Hello World", "n": null};
    assert_eq!(ev(bson!({"$concat": ["a", "b", "c"]}), &d), bson!("abc"));
    assert_eq!(ev(bson!({"$concat": ["a", "$n"]}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$concat": ["a", "$missing"]}), &d), Bson::Null);
    assert_eq!(code(bson!({"$concat": ["a", 1]}), &d), 16702);
    assert_eq!(ev(bson!({"$toLower": "$s"}), &d), bson!("hello world"));
    assert_eq!(ev(bson!({"$toUpper": "$s"}), &d), bson!("HELLO WORLD"));
    assert_eq!(ev(bson!({"$toUpper": "$n"}), &d), bson!(""));
    assert_eq!(ev(bson!({"$toLower": 12}), &d), bson!("12"));
    assert_eq!(ev(bson!({"$substr": ["$s", 0, 5]}), &d), bson!("Hello"));
    assert_eq!(
        ev(bson!({"$substrBytes": ["$s", 6, -1]}), &d),
        bson!("World")
    );
    assert_eq!(ev(bson!({"$substrCP": ["héllo", 1, 3]}), &d), bson!("éll"));
    assert_eq!(code(bson!({"$substrBytes": ["héllo", 2, 1]}), &d), 28656);
    assert_eq!(ev(bson!({"$strLenBytes": "héllo"}), &d), bson!(6));
    assert_eq!(ev(bson!({"$strLenCP": "héllo"}), &d), bson!(5));
    assert_eq!(code(bson!({"$strLenCP": 5}), &d), 34471);
    assert_eq!(
        ev(bson!({"$split": ["a,b,,c", ","]}), &d),
        bson!(["a", "b", "", "c"])
    );
    assert_eq!(ev(bson!({"$split": ["$n", ","]}), &d), Bson::Null);
    assert_eq!(code(bson!({"$split": ["abc", ""]}), &d), 40087);
    assert_eq!(
        ev(bson!({"$trim": {"input": "  x y \n"}}), &d),
        bson!("x y")
    );
    assert_eq!(
        ev(bson!({"$ltrim": {"input": "xxaxx", "chars": "x"}}), &d),
        bson!("axx")
    );
    assert_eq!(
        ev(bson!({"$rtrim": {"input": "xxaxx", "chars": "x"}}), &d),
        bson!("xxa")
    );
    assert_eq!(ev(bson!({"$trim": {"input": "$n"}}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$indexOfBytes": ["abcabc", "c"]}), &d), bson!(2));
    assert_eq!(
        ev(bson!({"$indexOfBytes": ["abcabc", "c", 3]}), &d),
        bson!(5)
    );
    assert_eq!(ev(bson!({"$indexOfCP": ["héllo", "l"]}), &d), bson!(2));
    assert_eq!(ev(bson!({"$indexOfCP": ["abc", "z"]}), &d), bson!(-1));
    assert_eq!(ev(bson!({"$indexOfCP": ["$n", "z"]}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$strcasecmp": ["ABC", "abc"]}), &d), bson!(0));
    assert_eq!(ev(bson!({"$strcasecmp": ["a", "B"]}), &d), bson!(-1));
    assert_eq!(
        ev(
            bson!({"$regexMatch": {"input": "$s", "regex": "world", "options": "i"}}),
            &d
        ),
        Bson::Boolean(true)
    );
    assert_eq!(
        ev(
            bson!({"$regexFind": {"input": "xaby", "regex": "a(b)(z)?"}}),
            &d
        ),
        bson!({"match": "ab", "idx": 1, "captures": ["b", null]})
    );
    assert_eq!(
        ev(
            bson!({"$regexFindAll": {"input": "a1b22", "regex": "[0-9]+"}}),
            &d
        )
        .as_array()
        .unwrap()
        .len(),
        2
    );
    assert_eq!(
        ev(bson!({"$regexMatch": {"input": "$n", "regex": "a"}}), &d),
        Bson::Boolean(false)
    );
    assert_eq!(
        code(bson!({"$regexMatch": {"input": 5, "regex": "a"}}), &d),
        51104
    );
    assert_eq!(
        ev(
            bson!({"$replaceOne": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
            &d
        ),
        bson!("a-bXc")
    );
    assert_eq!(
        ev(
            bson!({"$replaceAll": {"input": "aXbXc", "find": "X", "replacement": "-"}}),
            &d
        ),
        bson!("a-b-c")
    );
    assert_eq!(
        ev(
            bson!({"$replaceAll": {"input": "$n", "find": "X", "replacement": "-"}}),
            &d
        ),
        Bson::Null
    );
}

#[test]
fn array_operators() {
    let d = doc! {"a": [1, 2, 3, 4], "n": null, "s": "x"};
    assert_eq!(ev(bson!({"$size": "$a"}), &d), bson!(4));
    assert_eq!(code(bson!({"$size": "$s"}), &d), 17124);
    assert_eq!(
        msg(bson!({"$size": 1})),
        "The argument to $size must be an array. Type of the argument was: int"
    );
    assert_eq!(code(bson!({"$size": "$missing"}), &d), 17124);
    assert_eq!(ev(bson!({"$arrayElemAt": ["$a", 1]}), &d), bson!(2));
    assert_eq!(ev(bson!({"$arrayElemAt": ["$a", -1]}), &d), bson!(4));
    assert_eq!(evo(bson!({"$arrayElemAt": ["$a", 10]}), &d), None);
    assert_eq!(ev(bson!({"$arrayElemAt": ["$n", 0]}), &d), Bson::Null);
    assert_eq!(code(bson!({"$arrayElemAt": ["$s", 0]}), &d), 28689);
    assert_eq!(ev(bson!({"$first": "$a"}), &d), bson!(1));
    assert_eq!(ev(bson!({"$last": "$a"}), &d), bson!(4));
    assert_eq!(evo(bson!({"$first": [[]]}), &d), None);
    assert_eq!(ev(bson!({"$slice": ["$a", 2]}), &d), bson!([1, 2]));
    assert_eq!(ev(bson!({"$slice": ["$a", -2]}), &d), bson!([3, 4]));
    assert_eq!(ev(bson!({"$slice": ["$a", 1, 2]}), &d), bson!([2, 3]));
    assert_eq!(ev(bson!({"$slice": ["$a", -3, 2]}), &d), bson!([2, 3]));
    assert_eq!(code(bson!({"$slice": ["$a", 1, 0]}), &d), 28729);
    assert_eq!(
        ev(bson!({"$concatArrays": ["$a", [5], []]}), &d),
        bson!([1, 2, 3, 4, 5])
    );
    assert_eq!(ev(bson!({"$concatArrays": ["$a", "$n"]}), &d), Bson::Null);
    assert_eq!(code(bson!({"$concatArrays": ["$a", "$s"]}), &d), 28664);
    assert_eq!(ev(bson!({"$in": [2.0, "$a"]}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$in": [9, "$a"]}), &d), Bson::Boolean(false));
    assert_eq!(code(bson!({"$in": [1, "$s"]}), &d), 40081);
    assert_eq!(ev(bson!({"$indexOfArray": ["$a", 3]}), &d), bson!(2));
    assert_eq!(ev(bson!({"$indexOfArray": ["$a", 9]}), &d), bson!(-1));
    assert_eq!(ev(bson!({"$indexOfArray": ["$n", 9]}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$isArray": "$a"}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$isArray": ["$s"]}), &d), Bson::Boolean(false));
    assert_eq!(ev(bson!({"$range": [0, 10, 3]}), &d), bson!([0, 3, 6, 9]));
    assert_eq!(ev(bson!({"$range": [5, 0, -2]}), &d), bson!([5, 3, 1]));
    assert_eq!(code(bson!({"$range": [0, 5, 0]}), &d), 34449);
    assert_eq!(ev(bson!({"$reverseArray": "$a"}), &d), bson!([4, 3, 2, 1]));
    assert_eq!(
        ev(bson!({"$zip": {"inputs": [[1, 2], ["a", "b", "c"]]}}), &d),
        bson!([[1, "a"], [2, "b"]])
    );
    assert_eq!(
        ev(
            bson!({"$zip": {"inputs": [[1], ["a", "b"]], "useLongestLength": true, "defaults": [0, "z"]}}),
            &d
        ),
        bson!([[1, "a"], [0, "b"]])
    );
    assert_eq!(
        ev(
            bson!({"$sortArray": {"input": [{"v": 3}, {"v": 1}], "sortBy": {"v": 1}}}),
            &d
        ),
        bson!([{"v": 1}, {"v": 3}])
    );
    assert_eq!(
        ev(
            bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}),
            &d
        ),
        bson!([3, 2, 1])
    );
}

#[test]
fn higher_order_operators() {
    let d = doc! {"a": [1, 2, 3, 4], "k": 10};
    assert_eq!(
        ev(
            bson!({"$map": {"input": "$a", "as": "x", "in": {"$multiply": ["$$x", 2]}}}),
            &d
        ),
        bson!([2, 4, 6, 8])
    );
    assert_eq!(
        ev(
            bson!({"$map": {"input": "$a", "in": {"$add": ["$$this", "$k"]}}}),
            &d
        ),
        bson!([11, 12, 13, 14])
    );
    assert_eq!(
        ev(bson!({"$map": {"input": "$missing", "in": 1}}), &d),
        Bson::Null
    );
    assert_eq!(code(bson!({"$map": {"input": "$k", "in": 1}}), &d), 16883);
    assert_eq!(
        ev(
            bson!({"$filter": {"input": "$a", "as": "x", "cond": {"$gt": ["$$x", 2]}}}),
            &d
        ),
        bson!([3, 4])
    );
    assert_eq!(
        ev(
            bson!({"$filter": {"input": "$a", "cond": {"$gt": ["$$this", 1]}, "limit": 2}}),
            &d
        ),
        bson!([2, 3])
    );
    assert_eq!(
        code(bson!({"$filter": {"input": "$k", "cond": true}}), &d),
        28651
    );
    assert_eq!(
        ev(
            bson!({"$reduce": {"input": "$a", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}}),
            &d
        ),
        bson!(10)
    );
    assert_eq!(
        ev(
            bson!({"$reduce": {"input": [[1], [2, 3]], "initialValue": [], "in": {"$concatArrays": ["$$value", "$$this"]}}}),
            &d
        ),
        bson!([1, 2, 3])
    );
    assert_eq!(
        ev(
            bson!({"$let": {"vars": {"x": 2, "y": "$k"}, "in": {"$multiply": ["$$x", "$$y"]}}}),
            &d
        ),
        bson!(20)
    );
    // Nested scopes shadow outer ones.
    assert_eq!(
        ev(
            bson!({"$let": {"vars": {"x": 1}, "in": {"$let": {"vars": {"x": 2}, "in": "$$x"}}}}),
            &d
        ),
        bson!(2)
    );
}

#[test]
fn set_operators() {
    let d = doc! {};
    assert_eq!(
        e0(bson!({"$setUnion": [[1, 2], [2, 3, 1.0]]})),
        bson!([1, 2, 3])
    );
    assert_eq!(
        e0(bson!({"$setIntersection": [[1, 2, 3], [2, 3, 4]]})),
        bson!([2, 3])
    );
    assert_eq!(
        e0(bson!({"$setDifference": [[1, 2, 3], [2]]})),
        bson!([1, 3])
    );
    assert_eq!(
        e0(bson!({"$setEquals": [[1, 2], [2, 1, 1]]})),
        Bson::Boolean(true)
    );
    assert_eq!(
        e0(bson!({"$setIsSubset": [[1], [1, 2]]})),
        Bson::Boolean(true)
    );
    assert_eq!(
        e0(bson!({"$anyElementTrue": [[0, false, 1]]})),
        Bson::Boolean(true)
    );
    assert_eq!(
        e0(bson!({"$allElementsTrue": [[1, []]]})),
        Bson::Boolean(true)
    );
    assert_eq!(
        e0(bson!({"$allElementsTrue": [[1, null]]})),
        Bson::Boolean(false)
    );
    assert_eq!(e0(bson!({"$setUnion": [[1], null]})), Bson::Null);
    assert_eq!(code(bson!({"$setUnion": [[1], 1]}), &d), 17043);
    assert_eq!(code(bson!({"$setIsSubset": [1, [1]]}), &d), 17046);
}

#[test]
fn object_operators() {
    let d = doc! {"o": {"a": 1, "b": 2}};
    assert_eq!(
        ev(bson!({"$objectToArray": "$o"}), &d),
        bson!([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    );
    assert_eq!(
        ev(bson!({"$arrayToObject": [[["a", 1], ["b", 2]]]}), &d),
        bson!({"a": 1, "b": 2})
    );
    assert_eq!(
        ev(
            bson!({"$arrayToObject": [[{"k": "x", "v": 1}, {"k": "x", "v": 2}]]}),
            &d
        ),
        bson!({"x": 2})
    );
    assert_eq!(code(bson!({"$arrayToObject": [[["a", 1, 2]]]}), &d), 40397);
    assert_eq!(
        ev(bson!({"$mergeObjects": ["$o", {"b": 3, "c": 4}, null]}), &d),
        bson!({"a": 1, "b": 3, "c": 4})
    );
    assert_eq!(code(bson!({"$mergeObjects": ["$o", 1]}), &d), 40400);
    assert_eq!(
        ev(bson!({"$mergeObjects": [[{"a": 1}, null, {"b": 2}]]}), &d),
        bson!({"a": 1, "b": 2})
    );
    assert_eq!(ev(bson!({"$mergeObjects": [null, null]}), &d), bson!({}));
    assert_eq!(
        ev(bson!({"$getField": {"field": "a", "input": "$o"}}), &d),
        bson!(1)
    );
    assert_eq!(ev(bson!({"$getField": "o"}), &d), bson!({"a": 1, "b": 2}));
    assert_eq!(
        ev(
            bson!({"$setField": {"field": "z", "input": "$o", "value": 9}}),
            &d
        ),
        bson!({"a": 1, "b": 2, "z": 9})
    );
    assert_eq!(
        ev(
            bson!({"$setField": {"field": "a", "input": "$o", "value": "$$REMOVE"}}),
            &d
        ),
        bson!({"b": 2})
    );
}

#[test]
fn accumulator_expressions() {
    let d = doc! {"a": [1, 2, "x", null, 3.5], "e": []};
    assert_eq!(ev(bson!({"$sum": "$a"}), &d), Bson::Double(6.5));
    assert_eq!(ev(bson!({"$sum": [1, 2]}), &d), Bson::Int32(3));
    assert_eq!(ev(bson!({"$sum": "$missing"}), &d), Bson::Int32(0));
    assert_eq!(ev(bson!({"$sum": "$e"}), &d), Bson::Int32(0));
    assert_eq!(ev(bson!({"$avg": [1, 2]}), &d), Bson::Double(1.5));
    assert_eq!(ev(bson!({"$avg": "$e"}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$max": "$a"}), &d), bson!("x"));
    assert_eq!(ev(bson!({"$min": "$a"}), &d), bson!(1));
    assert_eq!(ev(bson!({"$min": [5, null, 2]}), &d), bson!(2));
    assert_eq!(ev(bson!({"$max": "$e"}), &d), Bson::Null);
    assert_eq!(
        ev(bson!({"$stdDevPop": [[2, 4, 4, 4, 5, 5, 7, 9]]}), &d),
        Bson::Double(2.0)
    );
}

#[test]
fn type_operators() {
    let d = doc! {"i": 5, "s": "12", "n": null};
    assert_eq!(ev(bson!({"$type": "$i"}), &d), bson!("int"));
    assert_eq!(ev(bson!({"$type": "$missing"}), &d), bson!("missing"));
    assert_eq!(ev(bson!({"$type": [[1]]}), &d), bson!("array"));
    assert_eq!(ev(bson!({"$isNumber": "$i"}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$isNumber": "$s"}), &d), Bson::Boolean(false));
    assert_eq!(ev(bson!({"$toInt": "$s"}), &d), Bson::Int32(12));
    assert_eq!(ev(bson!({"$toInt": 2.9}), &d), Bson::Int32(2));
    assert_eq!(ev(bson!({"$toLong": "$i"}), &d), Bson::Int64(5));
    assert_eq!(ev(bson!({"$toDouble": "1.5"}), &d), Bson::Double(1.5));
    assert_eq!(ev(bson!({"$toDouble": true}), &d), Bson::Double(1.0));
    assert_eq!(ev(bson!({"$toDecimal": 1.5}), &d), dec("1.5"));
    assert_eq!(ev(bson!({"$toString": 1.5}), &d), bson!("1.5"));
    assert_eq!(ev(bson!({"$toString": 3.0}), &d), bson!("3"));
    assert_eq!(
        ev(bson!({"$toString": date(0)}), &d),
        bson!("1970-01-01T00:00:00.000Z")
    );
    assert_eq!(ev(bson!({"$toBool": 0}), &d), Bson::Boolean(false));
    assert_eq!(ev(bson!({"$toBool": ""}), &d), Bson::Boolean(true));
    assert_eq!(ev(bson!({"$toInt": "$n"}), &d), Bson::Null);
    assert_eq!(ev(bson!({"$toDate": 86400000i64}), &d), date(86_400_000));
    assert_eq!(
        ev(bson!({"$toDate": "2021-03-04T05:06:07.089Z"}), &d),
        date(1_614_834_367_089)
    );
    let oid = bson::oid::ObjectId::parse_str("5ab9cbfa31c2ab715d42129e").unwrap();
    assert_eq!(
        ev(bson!({"$toObjectId": "5ab9cbfa31c2ab715d42129e"}), &d),
        Bson::ObjectId(oid)
    );
    assert_eq!(code(bson!({"$toInt": "abc"}), &d), 241);
    assert_eq!(code(bson!({"$toInt": 3e10}), &d), 241);
    assert_eq!(
        ev(
            bson!({"$convert": {"input": "abc", "to": "int", "onError": -1}}),
            &d
        ),
        bson!(-1)
    );
    assert_eq!(
        ev(
            bson!({"$convert": {"input": "$n", "to": "int", "onNull": 0}}),
            &d
        ),
        bson!(0)
    );
    assert_eq!(
        ev(bson!({"$convert": {"input": "7", "to": 18}}), &d),
        Bson::Int64(7)
    );
    assert_eq!(code(bson!({"$convert": {"input": 1, "to": "nope"}}), &d), 2);
    assert!(msg(bson!({"$toInt": [[1]]})).starts_with("Unsupported conversion from array to int"));
}

#[test]
fn date_operators() {
    // 2021-03-04T05:06:07.089Z, a Thursday.
    let d = doc! {"d": date(1_614_834_367_089), "n": null};
    assert_eq!(ev(bson!({"$year": "$d"}), &d), bson!(2021));
    assert_eq!(ev(bson!({"$month": "$d"}), &d), bson!(3));
    assert_eq!(ev(bson!({"$dayOfMonth": "$d"}), &d), bson!(4));
    assert_eq!(ev(bson!({"$hour": "$d"}), &d), bson!(5));
    assert_eq!(ev(bson!({"$minute": "$d"}), &d), bson!(6));
    assert_eq!(ev(bson!({"$second": "$d"}), &d), bson!(7));
    assert_eq!(ev(bson!({"$millisecond": "$d"}), &d), bson!(89));
    assert_eq!(ev(bson!({"$dayOfWeek": "$d"}), &d), bson!(5));
    assert_eq!(ev(bson!({"$dayOfYear": "$d"}), &d), bson!(63));
    assert_eq!(ev(bson!({"$week": "$d"}), &d), bson!(9));
    assert_eq!(ev(bson!({"$isoWeek": "$d"}), &d), bson!(9));
    assert_eq!(
        ev(bson!({"$hour": {"date": "$d", "timezone": "+05:30"}}), &d),
        bson!(10)
    );
    assert_eq!(ev(bson!({"$year": "$n"}), &d), Bson::Null);
    assert_eq!(code(bson!({"$year": "x"}), &d), 16006);
    assert_eq!(
        code(
            bson!({"$year": {"date": "$d", "timezone": "Mars/Base"}}),
            &d
        ),
        40485
    );
    assert_eq!(
        ev(bson!({"$dateToString": {"date": "$d"}}), &d),
        bson!("2021-03-04T05:06:07.089Z")
    );
    assert_eq!(
        ev(
            bson!({"$dateToString": {"date": "$d", "format": "%Y/%m/%d %H:%M:%S.%L %j %w %u %U %V %G %%"}}),
            &d
        ),
        bson!("2021/03/04 05:06:07.089 063 5 4 09 09 2021 %")
    );
    assert_eq!(
        ev(
            bson!({"$dateToString": {"date": "$d", "format": "%H:%M %z", "timezone": "-0800"}}),
            &d
        ),
        bson!("21:06 -0800")
    );
    assert_eq!(
        ev(
            bson!({"$dateToString": {"date": "$n", "onNull": "none"}}),
            &d
        ),
        bson!("none")
    );
    assert_eq!(
        code(bson!({"$dateToString": {"date": "$d", "format": "%Q"}}), &d),
        18536
    );
    assert_eq!(
        ev(bson!({"$dateFromString": {"dateString": "2021-03-04"}}), &d),
        date(1_614_816_000_000)
    );
    assert_eq!(
        ev(
            bson!({"$dateFromString": {"dateString": "04/03/2021", "format": "%d/%m/%Y"}}),
            &d
        ),
        date(1_614_816_000_000)
    );
    assert_eq!(
        ev(
            bson!({"$dateFromString": {"dateString": "garbage", "onError": "bad"}}),
            &d
        ),
        bson!("bad")
    );
    assert_eq!(
        ev(
            bson!({"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 1}}),
            &d
        ),
        date(1_614_834_367_089 + 86_400_000)
    );
    assert_eq!(
        ev(
            bson!({"$dateDiff": {"startDate": date(0), "endDate": "$d", "unit": "year"}}),
            &d
        ),
        Bson::Int64(51)
    );
    assert_eq!(
        ev(bson!({"$dateTrunc": {"date": "$d", "unit": "day"}}), &d),
        date(1_614_816_000_000)
    );
    assert_eq!(
        ev(
            bson!({"$dateFromParts": {"year": 2021, "month": 3, "day": 4}}),
            &d
        ),
        date(1_614_816_000_000)
    );
    assert_eq!(
        ev(bson!({"$dateToParts": {"date": "$d"}}), &d)
            .as_document()
            .unwrap()
            .get_i32("day")
            .unwrap(),
        4
    );
}

/// Trigonometry on doubles against Rust's own functions, over a sweep of each
/// operator's domain; ints give the same doubles.
#[test]
fn trigonometry_matches_the_standard_functions() {
    type Func = fn(f64) -> f64;
    let ops: [(&str, Func, f64, f64); 14] = [
        ("$sin", f64::sin, -10.0, 10.0),
        ("$cos", f64::cos, -10.0, 10.0),
        ("$tan", f64::tan, -1.5, 1.5),
        ("$asin", f64::asin, -1.0, 1.0),
        ("$acos", f64::acos, -1.0, 1.0),
        ("$atan", f64::atan, -10.0, 10.0),
        ("$sinh", f64::sinh, -5.0, 5.0),
        ("$cosh", f64::cosh, -5.0, 5.0),
        ("$tanh", f64::tanh, -5.0, 5.0),
        ("$asinh", f64::asinh, -5.0, 5.0),
        ("$acosh", f64::acosh, 1.0, 10.0),
        ("$atanh", f64::atanh, -0.99, 0.99),
        ("$degreesToRadians", f64::to_radians, -720.0, 720.0),
        ("$radiansToDegrees", f64::to_degrees, -7.0, 7.0),
    ];
    const STEPS: i32 = 40;
    for (op, f, lo, hi) in ops {
        for i in 0..=STEPS {
            let x = lo + (hi - lo) * f64::from(i) / f64::from(STEPS);
            assert_eq!(e0(bson!({ op: x })), Bson::Double(f(x)), "{op}({x})");
        }
        let whole = lo.ceil() as i32;
        assert_eq!(e0(bson!({ op: whole })), Bson::Double(f(f64::from(whole))));
    }
    assert_eq!(
        e0(bson!({"$atan2": [1, -2]})),
        Bson::Double(1f64.atan2(-2.0))
    );
}

#[test]
fn trigonometry_domains_nulls_and_decimals() {
    assert_eq!(code(bson!({"$acos": 1.000001}), &doc! {}), 50989);
    assert_eq!(
        msg(bson!({"$acosh": 0.5})),
        "cannot apply $acosh to 0.5, value must in [1,inf]"
    );
    assert_eq!(
        msg(bson!({"$tan": f64::INFINITY})),
        "cannot apply $tan to inf, value must in (-inf,inf)"
    );
    assert_eq!(e0(bson!({"$atanh": 1})), Bson::Double(f64::INFINITY));
    assert_eq!(e0(bson!({"$sin": Bson::Null})), Bson::Null);
    assert_eq!(evo(bson!({"$cos": "$nope"}), &doc! {}), Some(Bson::Null));
    assert!(matches!(e0(bson!({"$cos": dec("0")})), Bson::Decimal128(d) if d.to_string() == "1"));
    assert!(matches!(
        e0(bson!({"$atan2": [dec("1"), 1]})),
        Bson::Decimal128(_)
    ));
    assert_eq!(code(bson!({"$sinh": true}), &doc! {}), 28765);
}

/// The bitwise folds against Rust's operators on ints and longs.
#[test]
fn bitwise_operators_match_rust() {
    let ints = [0, 1, -1, 5, 127, -128, i32::MAX, i32::MIN, 0x5555];
    for a in ints {
        assert_eq!(e0(bson!({"$bitNot": a})), Bson::Int32(!a));
        for b in ints {
            assert_eq!(e0(bson!({"$bitAnd": [a, b]})), Bson::Int32(a & b));
            assert_eq!(e0(bson!({"$bitOr": [a, b]})), Bson::Int32(a | b));
            assert_eq!(e0(bson!({"$bitXor": [a, b, 3]})), Bson::Int32(a ^ b ^ 3));
            let long = i64::from(b) << 20;
            assert_eq!(
                e0(bson!({"$bitAnd": [a, long]})),
                Bson::Int64(i64::from(a) & long)
            );
        }
    }
    assert_eq!(e0(bson!({"$bitAnd": [1, Bson::Null, 1.5]})), Bson::Null);
    assert_eq!(code(bson!({"$bitOr": [1.5, Bson::Null]}), &doc! {}), 14);
}

#[test]
fn timestamp_parts() {
    let ts = Bson::Timestamp(bson::Timestamp {
        time: 4_000_000_000,
        increment: 7,
    });
    assert_eq!(
        e0(bson!({"$tsSecond": ts.clone()})),
        Bson::Int64(4_000_000_000)
    );
    assert_eq!(e0(bson!({"$tsIncrement": ts})), Bson::Int64(7));
    assert_eq!(code(bson!({"$tsSecond": 1}), &doc! {}), 5687301);
}

fn iso(s: &str) -> Bson {
    date(
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis(),
    )
}

#[test]
fn iana_time_zones_follow_daylight_saving() {
    // The manual's $dateToString example.
    let d = doc! {"d": iso("2014-01-01T08:15:39.736Z")};
    let fmt = |tz: &str, f: &str| {
        ev(
            bson!({"$dateToString": {"date": "$d", "format": f, "timezone": tz}}),
            &d,
        )
    };
    assert_eq!(
        fmt("America/New_York", "%H:%M:%S:%L%z"),
        bson!("03:15:39:736-0500")
    );
    assert_eq!(fmt("America/New_York", "%Z"), bson!("-300"));
    assert_eq!(fmt("+04:30", "%H:%M:%S:%L%z"), bson!("12:45:39:736+0430"));
    // Winter and summer in New York and Berlin.
    let hour = |at: &str, tz: &str| {
        ev(
            bson!({"$hour": {"date": "$d", "timezone": tz}}),
            &doc! {"d": iso(at)},
        )
    };
    assert_eq!(hour("2021-01-15T12:00:00Z", "America/New_York"), bson!(7));
    assert_eq!(hour("2021-07-15T12:00:00Z", "America/New_York"), bson!(8));
    assert_eq!(hour("2021-01-15T12:00:00Z", "Europe/Berlin"), bson!(13));
    assert_eq!(hour("2021-07-15T12:00:00Z", "Europe/Berlin"), bson!(14));
    assert_eq!(hour("2021-07-15T12:00:00Z", "UTC"), bson!(12));
    assert_eq!(hour("2021-07-15T12:00:00Z", "GMT"), bson!(12));
    assert_eq!(hour("2021-07-15T12:00:00Z", "-0800"), bson!(4));
    // The manual's $dateToParts example: the previous year in New York.
    assert_eq!(
        ev(
            bson!({"$dateToParts": {"date": "$d", "timezone": "America/New_York"}}),
            &doc! {"d": iso("2017-01-01T01:29:09.123Z")}
        ),
        bson!({"year": 2016, "month": 12, "day": 31, "hour": 20, "minute": 29, "second": 9, "millisecond": 123})
    );
    // The manual's $dateFromString example, and $dateFromParts in summer and winter.
    assert_eq!(
        e0(
            bson!({"$dateFromString": {"dateString": "2017-02-08T12:10:40.787", "timezone": "America/New_York"}})
        ),
        iso("2017-02-08T17:10:40.787Z")
    );
    let parts = |month: i32| {
        e0(
            bson!({"$dateFromParts": {"year": 2021, "month": month, "day": 1, "hour": 12, "timezone": "Europe/Berlin"}}),
        )
    };
    assert_eq!(parts(1), iso("2021-01-01T11:00:00Z"));
    assert_eq!(parts(7), iso("2021-07-01T10:00:00Z"));
    // An unknown name keeps mongod's error.
    assert_eq!(
        code(
            bson!({"$hour": {"date": "$d", "timezone": "Mars/Olympus"}}),
            &d
        ),
        40485
    );
}

#[test]
fn calendar_units_cross_daylight_saving_changes() {
    let ny = "America/New_York";
    // New York springs forward on 2021-03-14 and falls back on 2021-11-07: that day's
    // local midnight has the offset of the day before.
    let trunc = |at: &str, unit: &str| {
        ev(
            bson!({"$dateTrunc": {"date": "$d", "unit": unit, "timezone": ny}}),
            &doc! {"d": iso(at)},
        )
    };
    assert_eq!(
        trunc("2021-03-14T12:00:00Z", "day"),
        iso("2021-03-14T05:00:00Z")
    );
    assert_eq!(
        trunc("2021-11-07T12:00:00Z", "day"),
        iso("2021-11-07T04:00:00Z")
    );
    assert_eq!(
        trunc("2021-03-20T12:00:00Z", "month"),
        iso("2021-03-01T05:00:00Z")
    );
    assert_eq!(
        trunc("2021-03-14T12:34:00Z", "hour"),
        iso("2021-03-14T12:00:00Z")
    );
    // A day is 23 hours across the spring change; 24 hours is a different instant.
    let d = doc! {"d": iso("2021-03-13T17:00:00Z")};
    let add = |unit: &str, n: i32| {
        ev(
            bson!({"$dateAdd": {"startDate": "$d", "unit": unit, "amount": n, "timezone": ny}}),
            &d,
        )
    };
    assert_eq!(add("day", 1), iso("2021-03-14T16:00:00Z"));
    assert_eq!(add("hour", 24), iso("2021-03-14T17:00:00Z"));
    assert_eq!(add("month", 4), iso("2021-07-13T16:00:00Z"));
    // 23:30 on the 13th to 00:30 on the 15th: two local days.
    assert_eq!(
        ev(
            bson!({"$dateDiff": {"startDate": "$a", "endDate": "$b", "unit": "day", "timezone": ny}}),
            &doc! {"a": iso("2021-03-14T04:30:00Z"), "b": iso("2021-03-15T04:30:00Z")}
        ),
        Bson::Int64(2)
    );
    // Local 02:30 does not exist on 2021-03-14: it lands after the gap, at 03:30 EDT.
    assert_eq!(
        e0(
            bson!({"$dateFromParts": {"year": 2021, "month": 3, "day": 14, "hour": 2, "minute": 30, "timezone": ny}})
        ),
        iso("2021-03-14T07:30:00Z")
    );
}

/// The string of a Decimal128 result (failing on any other type).
fn dec_str(v: Bson) -> String {
    match v {
        Bson::Decimal128(d) => d.to_string(),
        other => panic!("not a Decimal128: {other:?}"),
    }
}

#[test]
fn decimal128_arithmetic_keeps_34_digits() {
    let one_third = e0(bson!({"$divide": [dec("1"), dec("3")]}));
    assert_eq!(dec_str(one_third), "0.3333333333333333333333333333333333");
    assert_eq!(
        dec_str(e0(bson!({"$divide": [dec("2"), dec("3")]}))),
        "0.6666666666666666666666666666666667"
    );
    assert_eq!(dec_str(e0(bson!({"$divide": [dec("10"), 4]}))), "2.5");
    assert_eq!(
        msg(bson!({"$divide": [dec("1"), dec("0")]})),
        "can't $divide by zero"
    );
    // Known constants to 34 significant digits, rounded half to even (the values Python's
    // decimal module, another implementation of the same arithmetic, gives in a decimal128
    // context).
    assert_eq!(
        dec_str(e0(bson!({"$sqrt": dec("2")}))),
        "1.414213562373095048801688724209698"
    );
    assert_eq!(dec_str(e0(bson!({"$sqrt": dec("16")}))), "4");
    assert_eq!(
        dec_str(e0(bson!({"$ln": dec("2")}))),
        "0.6931471805599453094172321214581766"
    );
    assert_eq!(
        dec_str(e0(bson!({"$exp": dec("1")}))),
        "2.718281828459045235360287471352662"
    );
    assert_eq!(
        dec_str(e0(bson!({"$log10": dec("2")}))),
        "0.3010299956639811952137388947244930"
    );
    assert_eq!(dec_str(e0(bson!({"$log10": dec("1000")}))), "3");
    assert_eq!(dec_str(e0(bson!({"$log": [dec("100"), dec("10")]}))), "2");
    // log10(8) / log10(2), each rounded to 34 digits: 3 to the last digit.
    let log2_8 = dec_str(e0(bson!({"$log": [dec("8"), 2]})));
    assert!(
        log2_8.starts_with("3.00000000000000000000000000000000"),
        "{log2_8}"
    );
    assert_eq!(dec_str(e0(bson!({"$pow": [dec("2"), 10]}))), "1024");
    assert_eq!(
        dec_str(e0(bson!({"$pow": [dec("2"), dec("0.5")]}))),
        "1.414213562373095048801688724209698"
    );
    // Domain errors keep mongod's codes; a value too small for a double is still > 0.
    assert_eq!(code(bson!({"$sqrt": dec("-1")}), &doc! {}), 28714);
    assert_eq!(code(bson!({"$ln": dec("0")}), &doc! {}), 28766);
    assert_eq!(code(bson!({"$log10": dec("-2")}), &doc! {}), 28761);
    assert_eq!(code(bson!({"$log": [dec("2"), dec("1")]}), &doc! {}), 28759);
    assert_eq!(
        dec_str(e0(bson!({"$ln": dec("1E-400")}))),
        "-921.0340371976182736071965818737457"
    );
    assert_eq!(dec_str(e0(bson!({"$sqrt": dec("NaN")}))), "NaN");
    // Sums and products past the exact 38-digit coefficient round once, in decimal.
    assert_eq!(
        dec_str(e0(bson!({"$add": [dec("1E+30"), dec("1E-30")]}))),
        "1000000000000000000000000000000.000"
    );
    // Each step after that rounds, as mongod adds Decimal128s one by one.
    assert_eq!(
        dec_str(e0(bson!({"$sum": [dec("1E+30"), dec("1E-30"), dec("1")]}))),
        "1000000000000000000000000000001.000"
    );
    // A double sum is unchanged by the decimal side.
    assert_eq!(
        e0(bson!({"$sum": [1e300, 1e-300, 1.0]})),
        Bson::Double(1e300)
    );
    assert_eq!(
        dec_str(e0(
            bson!({"$multiply": [dec("1.000000000000000000001"), dec("1.000000000000000000001")]})
        )),
        "1.000000000000000000002000000000000"
    );
    assert_eq!(
        dec_str(e0(bson!({"$avg": [dec("1"), dec("2"), dec("2")]}))),
        "1.666666666666666666666666666666667"
    );
}

use super::util::identical_doc;
use super::*;
use crate::compare::{bson_eq, canonical_type, cmp_bson};
use crate::path::get_path;
use bson::{doc, Bson, DateTime, Document};
use std::cmp::Ordering;

/// Test-only matcher: equality, $eq/$ne/$gt/$gte/$lt/$lte/$in on values, field conditions on documents.
struct TestMatcher;

fn ops_match(cond: &Document, v: Option<&Bson>) -> bool {
    cond.iter().all(|(op, arg)| {
        let Some(v) = v else { return op == "$ne" };
        let cmp = || (canonical_type(v) == canonical_type(arg)).then(|| cmp_bson(v, arg));
        match op.as_str() {
            "$eq" => bson_eq(v, arg),
            "$ne" => !bson_eq(v, arg),
            "$gt" => cmp() == Some(Ordering::Greater),
            "$gte" => matches!(cmp(), Some(Ordering::Greater | Ordering::Equal)),
            "$lt" => cmp() == Some(Ordering::Less),
            "$lte" => matches!(cmp(), Some(Ordering::Less | Ordering::Equal)),
            "$in" => arg
                .as_array()
                .is_some_and(|a| a.iter().any(|x| bson_eq(v, x))),
            "$regex" => match (v, arg) {
                (Bson::String(s), Bson::String(p)) => regex::Regex::new(p).unwrap().is_match(s),
                _ => false,
            },
            "$options" => true,
            _ => panic!("unsupported test operator {op}"),
        }
    })
}

fn is_op_doc(c: &Bson) -> Option<&Document> {
    match c {
        Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')) => Some(d),
        _ => None,
    }
}

impl ConditionMatcher for TestMatcher {
    fn matches_value(&self, condition: &Document, value: &Bson) -> crate::Result<bool> {
        if condition.keys().next().is_some_and(|k| k.starts_with('$')) {
            return Ok(ops_match(condition, Some(value)));
        }
        let Bson::Document(d) = value else {
            return Ok(false);
        };
        Ok(condition.iter().all(|(k, c)| {
            let v = get_path(d, k);
            match is_op_doc(c) {
                Some(ops) => ops_match(ops, v),
                None => v.is_some_and(|v| bson_eq(v, c)),
            }
        }))
    }
}

fn now() -> DateTime {
    DateTime::from_millis(1_700_000_000_123)
}

fn run_full(
    mut d: Document,
    update: Bson,
    filters: Option<Vec<Document>>,
    positional: Option<usize>,
    is_insert: bool,
) -> crate::Result<(Document, UpdateOutcome)> {
    let spec = UpdateSpec::parse(&update, filters.as_deref())?;
    let ctx = ApplyContext {
        is_insert,
        positional,
        now: now(),
        matcher: &TestMatcher,
        collator: None,
    };
    let before = d.clone();
    match spec.apply(&mut d, &ctx) {
        Ok(o) => Ok((d, o)),
        Err(e) => {
            assert!(
                identical_doc(&before, &d),
                "document must be untouched on error"
            );
            Err(e)
        }
    }
}

fn run(d: Document, u: Document) -> crate::Result<(Document, UpdateOutcome)> {
    run_full(d, Bson::Document(u), None, None, false)
}

fn ok(d: Document, u: Document) -> Document {
    run(d, u).unwrap().0
}

fn err(d: Document, u: Document) -> crate::Error {
    run(d, u).unwrap_err()
}

#[track_caller]
fn same(actual: &Document, expected: &Document) {
    assert!(
        identical_doc(actual, expected),
        "\n  actual:   {actual:?}\n  expected: {expected:?}"
    );
}

// ---------------------------------------------------------------- parsing

#[test]
fn kinds() {
    let p = UpdateSpec::parse(&Bson::Document(doc! {"$set": {"a": 1}}), None).unwrap();
    assert_eq!(p.kind(), UpdateKind::Operators);
    let r = UpdateSpec::parse(&Bson::Document(doc! {"a": 1}), None).unwrap();
    assert_eq!(r.kind(), UpdateKind::Replacement);
    let pl = UpdateSpec::parse(&bson::bson!([{"$set": {"a": 1}}]), None).unwrap();
    assert_eq!(pl.kind(), UpdateKind::Pipeline);
    assert_eq!(pl.pipeline().unwrap().len(), 1);
    assert!(UpdateSpec::parse(&bson::bson!([1]), None).is_err());
    let e =
        UpdateSpec::parse(&bson::bson!([{"$set": {"a": 1}}]), Some(&[doc! {"x": 1}])).unwrap_err();
    assert_eq!(e.code, 9);
}

#[test]
fn unknown_operator_and_bad_shapes() {
    let e = err(doc! {}, doc! {"$foo": {"a": 1}});
    assert_eq!(e.code, 9);
    assert_eq!(
        e.message,
        "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array"
    );
    // Mixing operators and plain fields.
    assert_eq!(err(doc! {}, doc! {"$set": {"a": 1}, "b": 2}).code, 9);
    assert_eq!(err(doc! {}, doc! {"b": 2, "$set": {"a": 1}}).code, 52);
    let e = err(doc! {}, doc! {"$set": 1});
    assert_eq!(e.code, 9);
    assert!(
        e.message
            .starts_with("Modifiers operate on fields but we found type int instead"),
        "{}",
        e.message
    );
    assert_eq!(err(doc! {}, doc! {"$set": {"": 1}}).code, 56);
    assert_eq!(err(doc! {}, doc! {"$set": {"a..b": 1}}).code, 56);
}

#[test]
fn empty_operator_is_noop() {
    let (d, o) = run(doc! {"_id": 1, "a": 1}, doc! {"$set": {}}).unwrap();
    same(&d, &doc! {"_id": 1, "a": 1});
    assert!(!o.modified);
}

#[test]
fn conflicting_paths() {
    let e = err(doc! {}, doc! {"$set": {"a": 1}, "$inc": {"a": 1}});
    assert_eq!(e.code, 40);
    assert_eq!(
        e.message,
        "Updating the path 'a' would create a conflict at 'a'"
    );
    let e = err(doc! {}, doc! {"$set": {"a": 1, "a.b": 1}});
    assert_eq!(e.code, 40);
    assert_eq!(
        e.message,
        "Updating the path 'a.b' would create a conflict at 'a'"
    );
    let e = err(doc! {}, doc! {"$set": {"a.b": 1}, "$unset": {"a": 1}});
    assert_eq!(
        e.message,
        "Updating the path 'a' would create a conflict at 'a'"
    );
    assert_eq!(
        err(doc! {}, doc! {"$rename": {"a": "b"}, "$set": {"a": 1}}).code,
        40
    );
    // Siblings are fine.
    same(
        &ok(doc! {}, doc! {"$set": {"a.b": 1, "a.c": 2}}),
        &doc! {"a": {"b": 1, "c": 2}},
    );
}

// ---------------------------------------------------------------- $set / $unset

#[test]
fn set_creates_paths_in_lexicographic_order() {
    same(
        &ok(doc! {"_id": 1}, doc! {"$set": {"b": 1, "a": 2}}),
        &doc! {"_id": 1, "a": 2, "b": 1},
    );
    same(
        &ok(doc! {"_id": 1}, doc! {"$set": {"x.y.z": 1}}),
        &doc! {"_id": 1, "x": {"y": {"z": 1}}},
    );
    // Existing fields keep their position.
    same(
        &ok(doc! {"b": 1, "a": 1}, doc! {"$set": {"a": 5, "c": 0}}),
        &doc! {"b": 1, "a": 5, "c": 0},
    );
    // "10" sorts before "9".
    same(
        &ok(doc! {}, doc! {"$set": {"9": 1, "10": 2}}),
        &doc! {"10": 2, "9": 1},
    );
}

#[test]
fn set_into_arrays_and_padding() {
    same(
        &ok(doc! {"a": [1, 2]}, doc! {"$set": {"a.1": 5}}),
        &doc! {"a": [1, 5]},
    );
    same(
        &ok(doc! {"a": [1, 2]}, doc! {"$set": {"a.4": 5}}),
        &doc! {"a": [1, 2, Bson::Null, Bson::Null, 5]},
    );
    same(
        &ok(doc! {"a": [{"b": 1}]}, doc! {"$set": {"a.0.c": 2}}),
        &doc! {"a": [{"b": 1, "c": 2}]},
    );
    // Numeric components below a missing field create documents.
    same(
        &ok(doc! {}, doc! {"$set": {"a.0.b": 1}}),
        &doc! {"a": {"0": {"b": 1}}},
    );
}

#[test]
fn set_path_not_viable() {
    let e = err(doc! {"_id": 1, "a": 1}, doc! {"$set": {"a.b": 2}});
    assert_eq!(e.code, 28);
    assert_eq!(e.message, "Cannot create field 'b' in element {a: 1}");
    let e = err(doc! {"a": [1, 2]}, doc! {"$set": {"a.b": 2}});
    assert_eq!(e.code, 28);
    assert_eq!(
        e.message,
        "Cannot create field 'b' in element {a: [ 1, 2 ]}"
    );
}

#[test]
fn set_noop_detection_is_type_sensitive() {
    let (_, o) = run(doc! {"a": 1}, doc! {"$set": {"a": 1}}).unwrap();
    assert!(!o.modified);
    let (d, o) = run(doc! {"a": 1}, doc! {"$set": {"a": 1.0}}).unwrap();
    assert!(o.modified);
    same(&d, &doc! {"a": 1.0});
    // Field order inside documents matters.
    let (_, o) = run(
        doc! {"a": {"x": 1, "y": 2}},
        doc! {"$set": {"a": {"y": 2, "x": 1}}},
    )
    .unwrap();
    assert!(o.modified);
}

#[test]
fn dollar_prefixed_fields() {
    // Nested $-prefixed names in values are allowed (5.0+).
    same(
        &ok(doc! {}, doc! {"$set": {"a": {"$b": 1}}}),
        &doc! {"a": {"$b": 1}},
    );
    same(
        &ok(doc! {"a": {}}, doc! {"$set": {"a.$b": 1}}),
        &doc! {"a": {"$b": 1}},
    );
    // A top-level $-prefixed field is not.
    assert_eq!(err(doc! {}, doc! {"$set": {"$b": 1}}).code, 52);
    // ... except when inserting (upsert).
    let (d, _) = run_full(
        doc! {},
        Bson::Document(doc! {"$set": {"$b": 1}}),
        None,
        None,
        true,
    )
    .unwrap();
    same(&d, &doc! {"$b": 1});
}

#[test]
fn unset() {
    let (d, o) = run(
        doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}},
        doc! {"$unset": {"a": "", "b.c": 1, "zz": 1}},
    )
    .unwrap();
    same(&d, &doc! {"_id": 1, "b": {"d": 2}});
    assert_eq!(o.removed_fields, vec!["a".to_string(), "b.c".to_string()]);
    // Array elements become null.
    let (d, o) = run(doc! {"a": [1, 2, 3]}, doc! {"$unset": {"a.1": 1}}).unwrap();
    same(&d, &doc! {"a": [1, Bson::Null, 3]});
    same(&o.updated_fields, &doc! {"a.1": Bson::Null});
    // Non-viable paths and missing fields are no-ops.
    let (_, o) = run(doc! {"a": 1}, doc! {"$unset": {"a.b": 1}}).unwrap();
    assert!(!o.modified);
}

// ---------------------------------------------------------------- arithmetic

#[test]
fn inc_and_mul() {
    same(
        &ok(doc! {"a": 1}, doc! {"$inc": {"a": 2, "b": 5}}),
        &doc! {"a": 3, "b": 5},
    );
    same(
        &ok(doc! {"a": 1}, doc! {"$inc": {"a": 0.5}}),
        &doc! {"a": 1.5},
    );
    same(
        &ok(doc! {"a": 1i64}, doc! {"$inc": {"a": 1}}),
        &doc! {"a": 2i64},
    );
    same(&ok(doc! {"a": 3}, doc! {"$mul": {"a": 4}}), &doc! {"a": 12});
    // $mul on a missing field creates a zero of the argument's type.
    same(
        &ok(doc! {}, doc! {"$mul": {"a": 4i64, "b": 2.5, "c": 3}}),
        &doc! {"a": 0i64, "b": 0.0, "c": 0},
    );
    let (_, o) = run(doc! {"a": 5}, doc! {"$inc": {"a": 0}}).unwrap();
    assert!(!o.modified);
    let (d, o) = run(doc! {"a": 5}, doc! {"$inc": {"a": 0i64}}).unwrap();
    assert!(o.modified, "type change int -> long is a modification");
    same(&d, &doc! {"a": 5i64});
}

#[test]
fn int_overflow_promotion() {
    same(
        &ok(doc! {"a": i32::MAX}, doc! {"$inc": {"a": 1}}),
        &doc! {"a": i32::MAX as i64 + 1},
    );
    same(
        &ok(doc! {"a": i32::MIN}, doc! {"$inc": {"a": -1}}),
        &doc! {"a": i32::MIN as i64 - 1},
    );
    same(
        &ok(doc! {"a": 65536}, doc! {"$mul": {"a": 65536}}),
        &doc! {"a": 4294967296i64},
    );
    let e = err(doc! {"_id": 1, "a": i64::MAX}, doc! {"$inc": {"a": 1}});
    assert_eq!(e.code, 2);
    assert_eq!(
        e.message,
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}"
    );
    let e = err(doc! {"_id": 1, "a": 42}, doc! {"$inc": {"a": i64::MAX}});
    assert!(e.message.contains("((NumberInt)42)"), "{}", e.message);
    assert_eq!(err(doc! {"a": i64::MAX}, doc! {"$mul": {"a": 2}}).code, 2);
}

#[test]
fn arithmetic_type_errors() {
    let e = err(doc! {"_id": 1, "a": "x"}, doc! {"$inc": {"a": 1}});
    assert_eq!(e.code, 14);
    assert_eq!(e.message, "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 'a' of non-numeric type string");
    let e = err(
        doc! {"_id": "k", "a": {"b": [1]}},
        doc! {"$mul": {"a.b": 1}},
    );
    assert_eq!(e.message, "Cannot apply $mul to a value of non-numeric type. {_id: \"k\"} has the field 'b' of non-numeric type array");
    let e = err(doc! {}, doc! {"$inc": {"a": "1"}});
    assert_eq!(e.code, 14);
    assert_eq!(
        e.message,
        "Cannot increment with non-numeric argument: {a: \"1\"}"
    );
}

#[test]
fn min_max() {
    same(
        &ok(doc! {"a": 5, "b": 5}, doc! {"$min": {"a": 3, "b": 7}}),
        &doc! {"a": 3, "b": 5},
    );
    same(
        &ok(doc! {"a": 5, "b": 5}, doc! {"$max": {"a": 3, "b": 7}}),
        &doc! {"a": 5, "b": 7},
    );
    same(&ok(doc! {}, doc! {"$min": {"a": 1}}), &doc! {"a": 1});
    // Cross-type comparison uses the BSON order: strings sort above numbers.
    same(
        &ok(doc! {"a": 5}, doc! {"$max": {"a": "x"}}),
        &doc! {"a": "x"},
    );
    let (_, o) = run(doc! {"a": 5}, doc! {"$min": {"a": 5.0}}).unwrap();
    assert!(!o.modified);
}

#[test]
fn bit() {
    same(
        &ok(
            doc! {"a": 13, "b": 13, "c": 13},
            doc! {"$bit": {"a": {"and": 10}, "b": {"or": 10}, "c": {"xor": 10}}},
        ),
        &doc! {"a": 8, "b": 15, "c": 7},
    );
    same(
        &ok(doc! {"a": 1}, doc! {"$bit": {"a": {"or": 4i64}}}),
        &doc! {"a": 5i64},
    );
    same(
        &ok(doc! {}, doc! {"$bit": {"a": {"or": 6}}}),
        &doc! {"a": 6},
    );
    assert_eq!(
        err(doc! {"a": 1.5}, doc! {"$bit": {"a": {"and": 1}}}).code,
        2
    );
    assert_eq!(err(doc! {}, doc! {"$bit": {"a": {"nand": 1}}}).code, 2);
    assert_eq!(err(doc! {}, doc! {"$bit": {"a": {"and": 1.0}}}).code, 2);
    assert_eq!(err(doc! {}, doc! {"$bit": {"a": 1}}).code, 2);
}

#[test]
fn current_date() {
    let d = ok(
        doc! {"a": 1},
        doc! {"$currentDate": {"a": true, "b": {"$type": "timestamp"}, "c": {"$type": "date"}}},
    );
    assert_eq!(d.get("a"), Some(&Bson::DateTime(now())));
    assert_eq!(
        d.get("b"),
        Some(&Bson::Timestamp(bson::Timestamp {
            time: 1_700_000_000,
            increment: 1
        }))
    );
    assert_eq!(d.get("c"), Some(&Bson::DateTime(now())));
    assert_eq!(
        err(doc! {}, doc! {"$currentDate": {"a": {"$type": "x"}}}).code,
        2
    );
    assert_eq!(err(doc! {}, doc! {"$currentDate": {"a": 1}}).code, 2);
}

#[test]
fn set_on_insert() {
    let (d, o) = run(
        doc! {"_id": 1},
        doc! {"$setOnInsert": {"a": 1}, "$set": {"b": 2}},
    )
    .unwrap();
    same(&d, &doc! {"_id": 1, "b": 2});
    assert!(o.modified);
    let (d, _) = run_full(
        doc! {"_id": 1},
        Bson::Document(doc! {"$setOnInsert": {"a": 1}, "$set": {"b": 2}}),
        None,
        None,
        true,
    )
    .unwrap();
    same(&d, &doc! {"_id": 1, "a": 1, "b": 2});
}

// ---------------------------------------------------------------- arrays

#[test]
fn push_basic_and_errors() {
    same(
        &ok(doc! {"a": [1]}, doc! {"$push": {"a": 2}}),
        &doc! {"a": [1, 2]},
    );
    same(
        &ok(doc! {}, doc! {"$push": {"a": [1, 2]}}),
        &doc! {"a": [[1, 2]]},
    );
    let e = err(doc! {"_id": 1, "a": 1}, doc! {"$push": {"a": 2}});
    assert_eq!(e.code, 2);
    assert_eq!(
        e.message,
        "The field 'a' must be an array but is of type int in document {_id: 1}"
    );
    assert_eq!(err(doc! {}, doc! {"$push": {"a": {"$each": 1}}}).code, 2);
    assert_eq!(
        err(doc! {}, doc! {"$push": {"a": {"$each": [1], "$foo": 1}}}).message,
        "Unrecognized clause in $push: $foo"
    );
    assert_eq!(
        err(doc! {}, doc! {"$push": {"a": {"$each": [1], "$sort": 2}}}).code,
        2
    );
    assert_eq!(
        err(
            doc! {},
            doc! {"$push": {"a": {"$each": [1], "$slice": "x"}}}
        )
        .code,
        2
    );
}

#[test]
fn push_modifiers() {
    same(
        &ok(doc! {"a": [1]}, doc! {"$push": {"a": {"$each": [2, 3]}}}),
        &doc! {"a": [1, 2, 3]},
    );
    same(
        &ok(
            doc! {"a": [1, 2]},
            doc! {"$push": {"a": {"$each": [9], "$position": 0}}},
        ),
        &doc! {"a": [9, 1, 2]},
    );
    same(
        &ok(
            doc! {"a": [1, 2, 3]},
            doc! {"$push": {"a": {"$each": [9], "$position": -1}}},
        ),
        &doc! {"a": [1, 2, 9, 3]},
    );
    same(
        &ok(
            doc! {"a": [1, 2]},
            doc! {"$push": {"a": {"$each": [9], "$position": 10}}},
        ),
        &doc! {"a": [1, 2, 9]},
    );
    same(
        &ok(
            doc! {"a": [3, 1]},
            doc! {"$push": {"a": {"$each": [2], "$sort": 1}}},
        ),
        &doc! {"a": [1, 2, 3]},
    );
    same(
        &ok(
            doc! {"a": [3, 1]},
            doc! {"$push": {"a": {"$each": [2], "$sort": -1, "$slice": 2}}},
        ),
        &doc! {"a": [3, 2]},
    );
    same(
        &ok(
            doc! {"a": [1, 2, 3]},
            doc! {"$push": {"a": {"$each": [4], "$slice": -2}}},
        ),
        &doc! {"a": [3, 4]},
    );
    same(
        &ok(
            doc! {"a": [1, 2, 3]},
            doc! {"$push": {"a": {"$each": [], "$slice": 0}}},
        ),
        &doc! {"a": []},
    );
    same(
        &ok(
            doc! {"a": [{"s": 3}, {"s": 1}]},
            doc! {"$push": {"a": {"$each": [{"s": 2}], "$sort": {"s": 1}}}},
        ),
        &doc! {"a": [{"s": 1}, {"s": 2}, {"s": 3}]},
    );
    same(
        &ok(
            doc! {},
            doc! {"$push": {"a": {"$each": [3, 1, 2], "$sort": 1, "$slice": 2}}},
        ),
        &doc! {"a": [1, 2]},
    );
    let (_, o) = run(doc! {"a": [1]}, doc! {"$push": {"a": {"$each": []}}}).unwrap();
    assert!(!o.modified);
}

#[test]
fn add_to_set() {
    same(
        &ok(doc! {"a": [1, 2]}, doc! {"$addToSet": {"a": 2}}),
        &doc! {"a": [1, 2]},
    );
    same(
        &ok(
            doc! {"a": [1, 2]},
            doc! {"$addToSet": {"a": {"$each": [2, 3, 3, 4]}}},
        ),
        &doc! {"a": [1, 2, 3, 4]},
    );
    same(
        &ok(doc! {"a": [1]}, doc! {"$addToSet": {"a": 1.0}}),
        &doc! {"a": [1]},
    );
    same(
        &ok(doc! {}, doc! {"$addToSet": {"a": {"$each": [1, 1]}}}),
        &doc! {"a": [1]},
    );
    let (_, o) = run(doc! {"a": [1]}, doc! {"$addToSet": {"a": 1}}).unwrap();
    assert!(!o.modified);
    let e = err(doc! {"a": 1}, doc! {"$addToSet": {"a": 1}});
    assert_eq!(
        e.message,
        "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int"
    );
}

#[test]
fn pull() {
    same(
        &ok(doc! {"a": [1, 2, 1, 3]}, doc! {"$pull": {"a": 1}}),
        &doc! {"a": [2, 3]},
    );
    same(
        &ok(doc! {"a": [1, 6, 7, 2]}, doc! {"$pull": {"a": {"$gte": 6}}}),
        &doc! {"a": [1, 2]},
    );
    same(
        &ok(
            doc! {"a": [1, 6, 7]},
            doc! {"$pull": {"a": {"$in": [1, 7]}}},
        ),
        &doc! {"a": [6]},
    );
    same(
        &ok(
            doc! {"a": [{"x": 1, "y": 1}, {"x": 2}, 5]},
            doc! {"$pull": {"a": {"x": 1}}},
        ),
        &doc! {"a": [{"x": 2}, 5]},
    );
    same(
        &ok(doc! {"a": [[1, 2], [3]]}, doc! {"$pull": {"a": [1, 2]}}),
        &doc! {"a": [[3]]},
    );
    same(
        &ok(
            doc! {"a": ["apple", "kiwi"]},
            doc! {"$pull": {"a": bson::Regex { pattern: "^a".into(), options: "".into() }}},
        ),
        &doc! {"a": ["kiwi"]},
    );
    let (_, o) = run(doc! {"a": [1]}, doc! {"$pull": {"a": 2, "b": 1}}).unwrap();
    assert!(!o.modified);
    assert_eq!(
        err(doc! {"a": 1}, doc! {"$pull": {"a": 1}}).message,
        "Cannot apply $pull to a non-array value"
    );
}

#[test]
fn pull_all_and_pop() {
    same(
        &ok(doc! {"a": [1, 2, 3, 1]}, doc! {"$pullAll": {"a": [1, 3]}}),
        &doc! {"a": [2]},
    );
    assert_eq!(
        err(doc! {}, doc! {"$pullAll": {"a": 1}}).message,
        "$pullAll requires an array argument but was given a int"
    );
    same(
        &ok(
            doc! {"a": [1, 2, 3], "b": [1, 2, 3]},
            doc! {"$pop": {"a": 1, "b": -1}},
        ),
        &doc! {"a": [1, 2], "b": [2, 3]},
    );
    let (_, o) = run(doc! {"a": []}, doc! {"$pop": {"a": 1, "z": 1}}).unwrap();
    assert!(!o.modified);
    let e = err(doc! {}, doc! {"$pop": {"a": 2}});
    assert_eq!(
        (e.code, e.message.as_str()),
        (9, "$pop expects 1 or -1, found: 2")
    );
    assert_eq!(err(doc! {}, doc! {"$pop": {"a": "x"}}).code, 9);
    let e = err(doc! {"a": {"b": 1}}, doc! {"$pop": {"a.b": 1}});
    assert_eq!(
        (e.code, e.message.as_str()),
        (14, "Path 'a.b' contains an element of non-array type 'int'")
    );
}

// ---------------------------------------------------------------- $rename

#[test]
fn rename() {
    let (d, o) = run(
        doc! {"_id": 1, "a": 1, "b": 2},
        doc! {"$rename": {"a": "c"}},
    )
    .unwrap();
    same(&d, &doc! {"_id": 1, "b": 2, "c": 1});
    same(&o.updated_fields, &doc! {"c": 1});
    assert_eq!(o.removed_fields, vec!["a".to_string()]);
    same(
        &ok(doc! {"a": {"b": 1}, "c": 5}, doc! {"$rename": {"a.b": "c"}}),
        &doc! {"a": {}, "c": 1},
    );
    same(
        &ok(doc! {"a": 1}, doc! {"$rename": {"a": "x.y"}}),
        &doc! {"x": {"y": 1}},
    );
    let (_, o) = run(doc! {"a": 1}, doc! {"$rename": {"zz": "y"}}).unwrap();
    assert!(!o.modified);
}

#[test]
fn rename_errors() {
    assert_eq!(
        err(doc! {}, doc! {"$rename": {"a": 1}}).message,
        "The 'to' field for $rename must be a string: a: 1"
    );
    assert_eq!(
        err(doc! {}, doc! {"$rename": {"a": "a"}}).message,
        "The source and target field for $rename must differ: a: \"a\""
    );
    assert_eq!(
        err(doc! {}, doc! {"$rename": {"a": "a.b"}}).message,
        "The source and target field for $rename must not be on the same path: a: \"a.b\""
    );
    assert_eq!(
        err(doc! {}, doc! {"$rename": {"a.$": "b"}}).message,
        "The source field for $rename may not be dynamic: a.$"
    );
    assert_eq!(err(doc! {}, doc! {"$rename": {"a": "b.$[]"}}).code, 2);
    let e = err(
        doc! {"_id": 1, "a": [{"b": 1}]},
        doc! {"$rename": {"a.0.b": "c"}},
    );
    assert_eq!(e.message, "The source field cannot be an array element, 'a.0.b' in doc with _id: 1 has an array field called 'a'");
    let e = err(
        doc! {"_id": 1, "a": 1, "b": [{}]},
        doc! {"$rename": {"a": "b.0.c"}},
    );
    assert_eq!(e.code, 2);
    assert_eq!(
        err(doc! {"_id": 1}, doc! {"$rename": {"_id": "x"}}).code,
        66
    );
}

// ---------------------------------------------------------------- _id

#[test]
fn id_is_immutable() {
    assert_eq!(err(doc! {"_id": 1}, doc! {"$set": {"_id": 2}}).code, 66);
    assert_eq!(err(doc! {"_id": 1}, doc! {"$unset": {"_id": 1}}).code, 66);
    assert_eq!(err(doc! {"_id": 1}, doc! {"$inc": {"_id": 1}}).code, 66);
    assert_eq!(
        err(doc! {"_id": {"a": 1}}, doc! {"$set": {"_id.b": 1}}).code,
        66
    );
    // Setting the same value is a no-op, not an error.
    let (_, o) = run(doc! {"_id": 1}, doc! {"$set": {"_id": 1}}).unwrap();
    assert!(!o.modified);
    // During an insert _id may be created.
    let (d, _) = run_full(
        doc! {},
        Bson::Document(doc! {"$set": {"_id": 5}}),
        None,
        None,
        true,
    )
    .unwrap();
    same(&d, &doc! {"_id": 5});
}

#[test]
fn replacement() {
    let (d, o) = run(doc! {"_id": 1, "a": 1, "b": 2}, doc! {"b": 3, "c": 4}).unwrap();
    same(&d, &doc! {"_id": 1, "b": 3, "c": 4});
    assert!(o.modified);
    same(&o.updated_fields, &doc! {"b": 3, "c": 4});
    assert_eq!(o.removed_fields, vec!["a".to_string()]);
    let e = err(doc! {"_id": 1, "a": 1}, doc! {"_id": 2});
    assert_eq!(e.code, 66);
    assert_eq!(e.message, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2");
    let (_, o) = run(doc! {"_id": 1, "a": 1}, doc! {"_id": 1, "a": 1}).unwrap();
    assert!(!o.modified);
    let (d, _) = run(doc! {"_id": 1, "a": 1}, doc! {}).unwrap();
    same(&d, &doc! {"_id": 1});
    assert_eq!(
        err(doc! {"_id": 1}, doc! {"a": {"$x": 1}, "$y": 2}).code,
        52
    );
}

// ---------------------------------------------------------------- positional

#[test]
fn positional_operator() {
    let u = Bson::Document(doc! {"$set": {"a.$": 9}});
    let (d, o) = run_full(doc! {"a": [1, 2, 3]}, u.clone(), None, Some(1), false).unwrap();
    same(&d, &doc! {"a": [1, 9, 3]});
    same(&o.updated_fields, &doc! {"a.1": 9});
    let e = run_full(doc! {"a": [1]}, u, None, None, false).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            2,
            "The positional operator did not find the match needed from the query."
        )
    );
    let (d, _) = run_full(
        doc! {"a": [{"b": 1}, {"b": 2}]},
        Bson::Document(doc! {"$inc": {"a.$.b": 10}}),
        None,
        Some(1),
        false,
    )
    .unwrap();
    same(&d, &doc! {"a": [{"b": 1}, {"b": 12}]});
    assert_eq!(err(doc! {}, doc! {"$set": {"$.a": 1}}).code, 2);
    assert_eq!(err(doc! {}, doc! {"$set": {"a.$.$": 1}}).code, 2);
    // Merged with a child naming the same element.
    let e = run_full(
        doc! {"a": [1, 2]},
        Bson::Document(doc! {"$set": {"a.$": 1, "a.0": 2}}),
        None,
        Some(0),
        false,
    )
    .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (40, "Update created a conflict at 'a.0'")
    );
    let (d, _) = run_full(
        doc! {"a": [{"x": 1}, {}]},
        Bson::Document(doc! {"$set": {"a.$.y": 1, "a.0.z": 2}}),
        None,
        Some(0),
        false,
    )
    .unwrap();
    same(&d, &doc! {"a": [{"x": 1, "y": 1, "z": 2}, {}]});
}

#[test]
fn all_positional() {
    let (d, o) = run(doc! {"a": [1, 2, 3]}, doc! {"$inc": {"a.$[]": 10}}).unwrap();
    same(&d, &doc! {"a": [11, 12, 13]});
    same(&o.updated_fields, &doc! {"a": [11, 12, 13]});
    same(
        &ok(
            doc! {"a": [{"b": [1, 2]}, {"b": [3]}]},
            doc! {"$set": {"a.$[].b.$[]": 0}},
        ),
        &doc! {"a": [{"b": [0, 0]}, {"b": [0]}]},
    );
    let e = err(doc! {"a": 1}, doc! {"$set": {"a.$[]": 0}});
    assert_eq!(
        e.message,
        "Cannot apply array updates to non-array element a: 1"
    );
    let e = err(doc! {}, doc! {"$set": {"a.b.$[]": 0}});
    assert_eq!(
        e.message,
        "The path 'a.b' must exist in the document in order to apply array updates."
    );
    // Single modified element is reported by its own path.
    let (_, o) = run(doc! {"a": [1, 2]}, doc! {"$max": {"a.$[]": 2}}).unwrap();
    same(&o.updated_fields, &doc! {"a.0": 2});
}

#[test]
fn array_filters() {
    let run_af = |d: Document, u: Document, f: Vec<Document>| {
        run_full(d, Bson::Document(u), Some(f), None, false)
    };
    let (d, _) = run_af(
        doc! {"a": [1, 5, 8]},
        doc! {"$set": {"a.$[x]": 0}},
        vec![doc! {"x": {"$gte": 5}}],
    )
    .unwrap();
    same(&d, &doc! {"a": [1, 0, 0]});
    let (d, _) = run_af(
        doc! {"a": [{"v": 1, "n": 0}, {"v": 3, "n": 0}]},
        doc! {"$inc": {"a.$[e].n": 1}},
        vec![doc! {"e.v": {"$gt": 1}}],
    )
    .unwrap();
    same(&d, &doc! {"a": [{"v": 1, "n": 0}, {"v": 3, "n": 1}]});
    // Two identifiers on one array, merged per element.
    let (d, _) = run_af(
        doc! {"a": [{"v": 1}, {"v": 2}]},
        doc! {"$set": {"a.$[x].p": 1, "a.$[y].q": 2}},
        vec![doc! {"x.v": 1}, doc! {"y.v": {"$in": [1, 2]}}],
    )
    .unwrap();
    same(
        &d,
        &doc! {"a": [{"v": 1, "p": 1, "q": 2}, {"v": 2, "q": 2}]},
    );
    let e = run_af(doc! {}, doc! {"$set": {"a.$[y]": 1}}, vec![]).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            2,
            "No array filter found for identifier 'y' in path 'a.$[y]'"
        )
    );
    let e = run_af(doc! {}, doc! {"$set": {"a.b": 20}}, vec![doc! {"x": 1}]).unwrap_err();
    assert_eq!(e.code, 9);
    assert_eq!(
        e.message,
        "The array filter for identifier 'x' was not used in the update { $set: { a.b: 20 } }"
    );
    let e = run_af(
        doc! {},
        doc! {"$set": {"a.$[x]": 1}},
        vec![doc! {"x": 1}, doc! {"x": 2}],
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "Found multiple array filters with the same top-level field name x"
    );
    let e = run_af(
        doc! {},
        doc! {"$set": {"a.$[x]": 1}},
        vec![doc! {"x": 1, "y": 1}],
    )
    .unwrap_err();
    assert_eq!(e.code, 9);
    let e = run_af(doc! {}, doc! {"$set": {"a.$[X]": 1}}, vec![doc! {"X": 1}]).unwrap_err();
    assert_eq!(e.code, 2);
    let e = run_af(doc! {}, doc! {"$set": {"$[x]": 1}}, vec![doc! {"x": 1}]).unwrap_err();
    assert_eq!(e.message, "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in path '$[x]'");
    assert_eq!(
        run_af(doc! {}, doc! {"$set": {"a": 1}}, vec![doc! {}])
            .unwrap_err()
            .code,
        9
    );
    // Conflict between a filtered element update and an all-elements update of the same leaf.
    let e = run_af(
        doc! {"a": [1]},
        doc! {"$set": {"a.$[]": 1, "a.$[x]": 2}},
        vec![doc! {"x": 1}],
    )
    .unwrap_err();
    assert_eq!(e.code, 40);
}

// ---------------------------------------------------------------- outcome

#[test]
fn update_description() {
    let (_, o) = run(
        doc! {"_id": 1, "a": {"b": 1}, "arr": [1, 2], "gone": 1},
        doc! {"$set": {"a.b": 5, "n.m": 1}, "$push": {"arr": 3}, "$unset": {"gone": 1}},
    )
    .unwrap();
    assert!(o.modified);
    same(
        &o.updated_fields,
        &doc! {"a.b": 5, "arr": [1, 2, 3], "n": {"m": 1}},
    );
    assert_eq!(o.removed_fields, vec!["gone".to_string()]);
    assert!(o.truncated_arrays.is_empty());
    // Fields created by sibling operators are reported once, as the created parent.
    let (_, o) = run(doc! {}, doc! {"$set": {"x.a": 1, "x.b": 2}}).unwrap();
    same(&o.updated_fields, &doc! {"x": {"a": 1, "b": 2}});
    // Padding an array reports the array.
    let (_, o) = run(doc! {"a": [1]}, doc! {"$set": {"a.2": 3}}).unwrap();
    same(&o.updated_fields, &doc! {"a": [1, Bson::Null, 3]});
    // No-op updates report nothing.
    let (_, o) = run(doc! {"a": 1}, doc! {"$set": {"a": 1}, "$unset": {"b": 1}}).unwrap();
    assert_eq!(o, UpdateOutcome::default());
}

#[test]
fn spec_is_reusable() {
    let spec = UpdateSpec::parse(&Bson::Document(doc! {"$inc": {"n": 1}}), None).unwrap();
    let ctx = ApplyContext {
        is_insert: false,
        positional: None,
        now: now(),
        matcher: &TestMatcher,
        collator: None,
    };
    let mut a = doc! {"n": 1};
    let mut b = doc! {};
    spec.apply(&mut a, &ctx).unwrap();
    spec.apply(&mut b, &ctx).unwrap();
    same(&a, &doc! {"n": 2});
    same(&b, &doc! {"n": 1});
    assert!(!spec.uses_positional());
}

#[test]
fn value_rendering() {
    assert_eq!(
        bson_to_string(&Bson::Document(doc! {"a": [1, "x", {"b": 2.0}], "e": {}})),
        "{ a: [ 1, \"x\", { b: 2.0 } ], e: {} }"
    );
    assert_eq!(type_name(&Bson::Int64(1)), "long");
}

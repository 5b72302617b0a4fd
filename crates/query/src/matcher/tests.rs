use super::*;
use bson::{bson, doc};

fn m(filter: Document) -> Matcher {
    Matcher::new(&filter).unwrap_or_else(|e| panic!("{filter}: {e}"))
}
fn yes(filter: Document, d: Document) {
    assert!(m(filter.clone()).matches(&d), "{filter} should match {d}");
}
fn no(filter: Document, d: Document) {
    assert!(
        !m(filter.clone()).matches(&d),
        "{filter} should not match {d}"
    );
}
fn err(filter: Document) -> Error {
    match Matcher::new(&filter) {
        Ok(_) => panic!("{filter} should fail to parse"),
        Err(e) => e,
    }
}

#[test]
fn implicit_equality_and_arrays() {
    yes(doc! {"a": 1}, doc! {"a": 1});
    yes(doc! {"a": 1}, doc! {"a": 1.0});
    yes(doc! {"a": 1}, doc! {"a": 1i64});
    no(doc! {"a": 1}, doc! {"a": "1"});
    yes(doc! {"a": 1}, doc! {"a": [3, 1]});
    yes(doc! {"a": [1, 2]}, doc! {"a": [1, 2]});
    yes(doc! {"a": [1, 2]}, doc! {"a": [[1, 2], 3]});
    no(doc! {"a": [1, 2]}, doc! {"a": [2, 1]});
    no(doc! {"a": 1}, doc! {"a": [[1]]});
    yes(doc! {"a": {"b": 1, "c": 2}}, doc! {"a": {"b": 1, "c": 2}});
    no(doc! {"a": {"b": 1, "c": 2}}, doc! {"a": {"c": 2, "b": 1}});
    yes(doc! {}, doc! {"x": 1});
    yes(doc! {"a": 1, "b": 2}, doc! {"b": 2, "a": 1});
    no(doc! {"a": 1, "b": 2}, doc! {"a": 1});
}

#[test]
fn null_and_missing() {
    yes(doc! {"a": Bson::Null}, doc! {});
    yes(doc! {"a": Bson::Null}, doc! {"a": Bson::Null});
    yes(doc! {"a": Bson::Null}, doc! {"a": [1, Bson::Null]});
    no(doc! {"a": Bson::Null}, doc! {"a": [1]});
    no(doc! {"a": Bson::Null}, doc! {"a": 0});
    no(doc! {"a": Bson::Null}, doc! {"a": Bson::Undefined});
    yes(doc! {"a.b": Bson::Null}, doc! {"a": [{"b": 1}, {"c": 1}]});
    no(doc! {"a.b": Bson::Null}, doc! {"a": [{"b": 1}]});
    yes(doc! {"a": {"$ne": Bson::Null}}, doc! {"a": 0});
    no(doc! {"a": {"$ne": Bson::Null}}, doc! {});
    yes(doc! {"a": {"$gte": Bson::Null}}, doc! {});
    yes(doc! {"a": {"$lte": Bson::Null}}, doc! {"a": Bson::Null});
    no(doc! {"a": {"$gt": Bson::Null}}, doc! {});
    no(doc! {"a": {"$gte": Bson::Null}}, doc! {"a": 1});
    yes(doc! {"a": {"$in": [Bson::Null, 5]}}, doc! {"b": 1});
}

#[test]
fn comparison_with_type_bracketing() {
    yes(doc! {"a": {"$gt": 1}}, doc! {"a": 1.5});
    no(doc! {"a": {"$gt": 1}}, doc! {"a": "2"});
    no(doc! {"a": {"$lt": "z"}}, doc! {"a": 5});
    yes(doc! {"a": {"$lt": "z"}}, doc! {"a": "abc"});
    yes(doc! {"a": {"$gte": 2i64}}, doc! {"a": 2.0});
    yes(doc! {"a": {"$lte": 2.0}}, doc! {"a": 2});
    no(doc! {"a": {"$gt": 5}}, doc! {});
    yes(doc! {"a": {"$gt": 5}}, doc! {"a": [1, 10]});
    yes(doc! {"a": {"$gt": 1, "$lt": 3}}, doc! {"a": [0, 5]}); // different elements may satisfy each
    no(
        doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 3}}},
        doc! {"a": [0, 5]},
    );
    yes(doc! {"a": {"$gt": Bson::MinKey}}, doc! {"a": "x"});
    yes(doc! {"a": {"$lt": Bson::MaxKey}}, doc! {"a": {"b": 1}});
    no(doc! {"a": {"$gt": Bson::MaxKey}}, doc! {"a": 1});
    yes(
        doc! {"a": {"$gt": bson::DateTime::from_millis(5)}},
        doc! {"a": bson::DateTime::from_millis(6)},
    );
    no(
        doc! {"a": {"$gt": bson::DateTime::from_millis(5)}},
        doc! {"a": 6},
    );
    no(doc! {"a": {"$lt": 5}}, doc! {"a": f64::NAN});
    yes(doc! {"a": {"$gte": f64::NAN}}, doc! {"a": f64::NAN});
    no(doc! {"a": {"$gt": f64::NAN}}, doc! {"a": 1});
    yes(doc! {"a": {"$gt": [1]}}, doc! {"a": [2]}); // whole-array comparison
}

fn collated(filter: Document, spec: Document) -> Matcher {
    let c = crate::collation::Collator::parse(&spec).unwrap();
    Matcher::with_collation(&filter, c).unwrap()
}

#[test]
fn collation_applies_to_string_comparisons() {
    let ci = doc! {"locale": "en", "strength": 2};
    let m = |f: Document| collated(f, ci.clone());
    assert!(m(doc! {"a": "PING"}).matches(&doc! {"a": "ping"}));
    assert!(m(doc! {"a": "PING"}).matches(&doc! {"a": ["x", "Ping"]}));
    assert!(!m(doc! {"a": {"$ne": "PING"}}).matches(&doc! {"a": "ping"}));
    assert!(m(doc! {"a": {"$in": [1, "PING"]}}).matches(&doc! {"a": "ping"}));
    assert!(!m(doc! {"a": {"$nin": ["PING"]}}).matches(&doc! {"a": "ping"}));
    assert!(m(doc! {"a": {"$gte": "B"}}).matches(&doc! {"a": "b"}));
    assert!(m(doc! {"a": {"$lt": "B"}}).matches(&doc! {"a": "a"}));
    assert!(m(doc! {"a": {"b": "X"}}).matches(&doc! {"a": {"b": "x"}}));
    assert!(m(doc! {"a": {"$elemMatch": {"b": "X"}}}).matches(&doc! {"a": [{"b": "x"}]}));
    assert!(m(doc! {"$expr": {"$eq": ["$a", "X"]}}).matches(&doc! {"a": "x"}));
    // Not for regexes, types or numbers.
    assert!(!m(doc! {"a": {"$regex": "^P"}}).matches(&doc! {"a": "ping"}));
    assert!(!m(doc! {"a": "1"}).matches(&doc! {"a": 1}));
    // Without a collation, strings compare by their bytes.
    assert!(!Matcher::new(&doc! {"a": "PING"})
        .unwrap()
        .matches(&doc! {"a": "ping"}));
    assert!(!Matcher::new(&doc! {"a": {"$gt": "B"}})
        .unwrap()
        .matches(&doc! {"a": "A"}));
}

#[test]
fn eq_ne_in_nin() {
    yes(doc! {"a": {"$eq": 2}}, doc! {"a": [1, 2]});
    no(doc! {"a": {"$ne": 2}}, doc! {"a": [1, 2]});
    yes(doc! {"a": {"$ne": 2}}, doc! {});
    yes(doc! {"a": {"$in": [5, 2]}}, doc! {"a": 2.0});
    yes(doc! {"a": {"$in": [5, 2]}}, doc! {"a": [7, 5]});
    no(doc! {"a": {"$in": []}}, doc! {"a": 1});
    yes(doc! {"a": {"$nin": [5, 2]}}, doc! {"a": 3});
    yes(doc! {"a": {"$nin": [5, 2]}}, doc! {});
    no(doc! {"a": {"$nin": [5, 2]}}, doc! {"a": [1, 2]});
    yes(
        doc! {"a": {"$in": [Bson::RegularExpression(bson::Regex { pattern: "^ab".into(), options: "".into() })]}},
        doc! {"a": "abc"},
    );
    no(
        doc! {"a": {"$nin": [Bson::RegularExpression(bson::Regex { pattern: "^ab".into(), options: "".into() })]}},
        doc! {"a": ["x", "abc"]},
    );
    // $eq with a regex compares regex values, not patterns against strings
    let re = Bson::RegularExpression(bson::Regex {
        pattern: "a".into(),
        options: "".into(),
    });
    no(doc! {"a": {"$eq": re.clone()}}, doc! {"a": "a"});
    yes(doc! {"a": {"$eq": re.clone()}}, doc! {"a": re});
}

#[test]
fn logical_operators() {
    let f = doc! {"$or": [{"a": 1}, {"b": {"$gt": 5}}]};
    yes(f.clone(), doc! {"a": 1});
    yes(f.clone(), doc! {"b": 6});
    no(f, doc! {"a": 2, "b": 5});
    yes(
        doc! {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 5}}]},
        doc! {"a": 3},
    );
    no(
        doc! {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 5}}]},
        doc! {"a": 7},
    );
    yes(doc! {"$nor": [{"a": 1}, {"b": 1}]}, doc! {"a": 2});
    no(doc! {"$nor": [{"a": 1}, {"b": 1}]}, doc! {"b": 1});
    yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": 3});
    yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {});
    yes(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": "zzz"});
    no(doc! {"a": {"$not": {"$gt": 5}}}, doc! {"a": [1, 6]});
    let re = Bson::RegularExpression(bson::Regex {
        pattern: "^x".into(),
        options: "".into(),
    });
    no(doc! {"a": {"$not": re.clone()}}, doc! {"a": "xy"});
    yes(doc! {"a": {"$not": re}}, doc! {"a": "yx"});
    yes(doc! {"a": 1, "$comment": "hello"}, doc! {"a": 1});
    yes(doc! {"$alwaysTrue": 1}, doc! {});
    no(doc! {"$alwaysFalse": 1}, doc! {});
}

#[test]
fn exists_and_type() {
    yes(doc! {"a": {"$exists": true}}, doc! {"a": Bson::Null});
    no(doc! {"a": {"$exists": true}}, doc! {"b": 1});
    yes(doc! {"a": {"$exists": 0}}, doc! {"b": 1});
    yes(doc! {"a": {"$exists": 1}}, doc! {"a": []});
    yes(
        doc! {"a.b": {"$exists": true}},
        doc! {"a": [{"c": 1}, {"b": 2}]},
    );
    no(doc! {"a.b": {"$exists": true}}, doc! {"a": [{"c": 1}, 3]});
    yes(doc! {"a.b": {"$exists": false}}, doc! {"a": [1, 2]});
    yes(doc! {"a": {"$type": "string"}}, doc! {"a": "x"});
    yes(doc! {"a": {"$type": 2}}, doc! {"a": "x"});
    yes(doc! {"a": {"$type": "number"}}, doc! {"a": 1i64});
    yes(doc! {"a": {"$type": "number"}}, doc! {"a": 1.5});
    no(doc! {"a": {"$type": "number"}}, doc! {"a": "1"});
    yes(doc! {"a": {"$type": "array"}}, doc! {"a": []});
    yes(doc! {"a": {"$type": "int"}}, doc! {"a": ["x", 1]});
    no(doc! {"a": {"$type": "long"}}, doc! {"a": 1});
    yes(
        doc! {"a": {"$type": ["long", "null"]}},
        doc! {"a": Bson::Null},
    );
    no(doc! {"a": {"$type": "null"}}, doc! {});
    yes(doc! {"a": {"$type": "double"}}, doc! {"a": 1.0});
    yes(doc! {"a": {"$type": "object"}}, doc! {"a": {}});
    yes(doc! {"a": {"$type": "minKey"}}, doc! {"a": Bson::MinKey});
}

#[test]
fn regex_matching() {
    yes(doc! {"a": {"$regex": "^ab"}}, doc! {"a": "abc"});
    no(doc! {"a": {"$regex": "^ab"}}, doc! {"a": "ABC"});
    yes(
        doc! {"a": {"$regex": "^ab", "$options": "i"}},
        doc! {"a": "ABC"},
    );
    yes(
        doc! {"a": {"$regex": "^b", "$options": "m"}},
        doc! {"a": "a\nb"},
    );
    no(doc! {"a": {"$regex": "^b"}}, doc! {"a": "a\nb"});
    yes(
        doc! {"a": {"$regex": "a.b", "$options": "s"}},
        doc! {"a": "a\nb"},
    );
    yes(
        doc! {"a": {"$regex": "a b # comment", "$options": "x"}},
        doc! {"a": "ab"},
    );
    let re = Bson::RegularExpression(bson::Regex {
        pattern: "o+".into(),
        options: "i".into(),
    });
    yes(doc! {"a": re.clone()}, doc! {"a": "fOO"});
    yes(doc! {"a": re.clone()}, doc! {"a": ["x", "foo"]});
    no(doc! {"a": re.clone()}, doc! {"a": 100});
    yes(doc! {"a": re.clone()}, doc! {"a": re});
    yes(
        doc! {"a": {"$regex": bson::Regex { pattern: "^x".into(), options: "".into() }}},
        doc! {"a": "xy"},
    );
    assert_eq!(err(doc! {"a": {"$regex": "("}}).code, 51091);
    assert_eq!(
        err(doc! {"a": {"$options": "i"}}).message,
        "$options needs a $regex"
    );
    assert_eq!(
        err(doc! {"a": {"$regex": "a", "$options": "q"}}).code,
        51108
    );
}

#[test]
fn mod_all_size() {
    yes(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5});
    yes(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": 5.9});
    yes(doc! {"a": {"$mod": [4.5, 1]}}, doc! {"a": 9}); // divisor truncated to 4
    yes(doc! {"a": {"$mod": [4, -1]}}, doc! {"a": -5});
    no(doc! {"a": {"$mod": [4, 1]}}, doc! {"a": "5"});
    yes(doc! {"a": {"$mod": [4, 0]}}, doc! {"a": [3, 8]});
    yes(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3, 1]});
    no(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [2, 3]});
    yes(doc! {"a": {"$all": [1]}}, doc! {"a": 1});
    no(doc! {"a": {"$all": []}}, doc! {"a": [1]});
    yes(doc! {"a": {"$all": [[1, 2]]}}, doc! {"a": [1, 2]});
    let f = doc! {"a": {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": {"$gt": 2}}}]}};
    yes(f.clone(), doc! {"a": [{"b": 1}, {"c": 3}]});
    no(f, doc! {"a": [{"b": 1}, {"c": 2}]});
    yes(doc! {"a": {"$size": 2}}, doc! {"a": [1, [2, 3]]});
    no(doc! {"a": {"$size": 2}}, doc! {"a": [1]});
    yes(doc! {"a": {"$size": 0}}, doc! {"a": []});
    no(doc! {"a": {"$size": 0}}, doc! {});
    yes(doc! {"a": {"$size": 2.0}}, doc! {"a": [1, 2]});
    no(doc! {"a": {"$size": 2}}, doc! {"a": [[1, 2]]});
    yes(
        doc! {"a.b": {"$size": 1}},
        doc! {"a": [{"b": [1]}, {"b": [1, 2, 3]}]},
    );
}

#[test]
fn elem_match_forms() {
    yes(
        doc! {"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}},
        doc! {"a": [0, 3, 9]},
    );
    no(doc! {"a": {"$elemMatch": {"$gt": 1}}}, doc! {"a": 3});
    no(doc! {"a": {"$elemMatch": {"$eq": 1}}}, doc! {"a": [[1]]});
    let f = doc! {"a": {"$elemMatch": {"b": 1, "c": {"$gt": 2}}}};
    yes(f.clone(), doc! {"a": [{"b": 1, "c": 1}, {"b": 1, "c": 3}]});
    no(f.clone(), doc! {"a": [{"b": 1, "c": 1}, {"b": 2, "c": 3}]});
    no(f, doc! {"a": {"b": 1, "c": 3}});
    yes(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [1, {}]});
    no(doc! {"a": {"$elemMatch": {}}}, doc! {"a": [1, 2]});
    yes(
        doc! {"a": {"$elemMatch": {"$or": [{"b": 1}, {"b": 2}]}}},
        doc! {"a": [{"b": 2}]},
    );
    yes(
        doc! {"a.b": {"$elemMatch": {"$gte": 2}}},
        doc! {"a": [{"b": [1]}, {"b": [2]}]},
    );
    yes(
        doc! {"a": {"$elemMatch": {"$not": {"$gt": 3}}}},
        doc! {"a": [5, 2]},
    );
}

#[test]
fn dotted_paths_and_array_expansion() {
    yes(doc! {"a.b": 1}, doc! {"a": [{"b": 1}, {"b": 2}]});
    yes(doc! {"a.b": 2}, doc! {"a": {"b": [1, 2]}});
    no(doc! {"a.b": 1}, doc! {"a": [[{"b": 1}]]});
    yes(doc! {"a.0": 1}, doc! {"a": [1]});
    yes(doc! {"a.0": 1}, doc! {"a": {"0": 1}});
    yes(doc! {"a.0": 1}, doc! {"a": [{"0": 1}]});
    no(doc! {"a.1": 1}, doc! {"a": [1]});
    yes(doc! {"a.0.b": 5}, doc! {"a": [{"b": 5}]});
    yes(doc! {"a.b.c": 3}, doc! {"a": [{"b": [{"c": 1}, {"c": 3}]}]});
    no(doc! {"a.b": 1}, doc! {"a": 1});
    yes(doc! {"a.b": {"$gt": 1}}, doc! {"a": [{"b": 0}, {"b": 2}]});
    yes(doc! {"a.b": {"$ne": 1}}, doc! {"a": [{"c": 1}]});
    no(doc! {"a.b": {"$ne": 1}}, doc! {"a": [{"b": 2}, {"b": 1}]});
}

#[test]
fn parse_errors() {
    let e = err(doc! {"$foo": 1});
    assert_eq!(
        (e.code, e.message.as_str()),
        (2, "unknown top level operator: $foo")
    );
    assert_eq!(
        err(doc! {"a": {"$foo": 1}}).message,
        "unknown operator: $foo"
    );
    assert_eq!(
        err(doc! {"a": {"$gt": 1, "b": 1}}).message,
        "unknown operator: b"
    );
    assert_eq!(
        err(doc! {"$and": []}).message,
        "$and must be a nonempty array"
    );
    assert_eq!(err(doc! {"$or": 1}).message, "$or must be a nonempty array");
    assert_eq!(
        err(doc! {"$nor": [1]}).message,
        "$or/$and/$nor entries need to be full objects"
    );
    assert_eq!(err(doc! {"a": {"$in": 1}}).message, "$in needs an array");
    assert_eq!(err(doc! {"a": {"$nin": {}}}).message, "$nin needs an array");
    assert_eq!(err(doc! {"a": {"$all": 1}}).message, "$all needs an array");
    assert_eq!(
        err(doc! {"a": {"$size": 1.5}}).message,
        "$size must be a whole number"
    );
    assert!(err(doc! {"a": {"$size": -1}})
        .message
        .starts_with("Failed to parse $size. Expected a non-negative number in:"));
    assert_eq!(err(doc! {"a": {"$size": "x"}}).code, 2);
    assert_eq!(
        err(doc! {"a": {"$mod": [1]}}).message,
        "malformed mod, not enough elements"
    );
    assert_eq!(
        err(doc! {"a": {"$mod": [1, 2, 3]}}).message,
        "malformed mod, too many elements"
    );
    assert_eq!(
        err(doc! {"a": {"$mod": [0, 1]}}).message,
        "malformed mod, divisor value is invalid :: caused by :: divisor cannot be 0"
    );
    assert_eq!(
        err(doc! {"a": {"$not": 5}}).message,
        "$not needs a regex or a document"
    );
    assert_eq!(
        err(doc! {"a": {"$not": {}}}).message,
        "$not cannot be empty"
    );
    assert_eq!(
        err(doc! {"a": {"$type": "foo"}}).message,
        "Unknown type name alias: foo"
    );
    assert_eq!(err(doc! {"a": {"$type": 99}}).code, 2);
    assert_eq!(
        err(doc! {"a": {"$elemMatch": 1}}).message,
        "$elemMatch needs an Object"
    );
    assert_eq!(
        err(doc! {"$where": "true"}).message,
        "$where is not allowed in this context"
    );
    assert_eq!(err(doc! {"$where": "true"}).code, 2);
    assert_eq!(err(doc! {"$text": "x"}).code, 2);
    assert_eq!(
        err(doc! {"$or": [{"$text": {"$search": "x"}}, {"a": 1}]}).code,
        2
    );
    assert_eq!(
        err(doc! {"$text": {"$search": "x"}, "$and": [{"$text": {"$search": "y"}}]}).code,
        2
    );
    // Unbound (no text index): matches nothing, and says why when checked.
    let t = m(doc! {"$text": {"$search": "x"}, "a": 1});
    assert!(t.text().is_some());
    assert_eq!(t.matches_checked(&doc! {"a": 1}).unwrap_err().code, 27);
    assert_eq!(err(doc! {"a": {"$near": "x"}}).code, 2);
    assert_eq!(err(doc! {"a": {"$geoWithin": {}}}).code, 2);
    assert_eq!(err(doc! {"a": {"$maxDistance": 1}}).code, 2);
    assert_eq!(
        err(doc! {"$or": [{"a": {"$near": [0, 0]}}, {"b": 1}]}).message,
        "geoNear must be top-level expr"
    );
    assert_eq!(
        err(doc! {"a": {"$near": [0, 0]}, "b": {"$nearSphere": [0, 0]}}).message,
        "Too many geoNear expressions"
    );
    // geo predicates in a filter
    let g = m(doc! {"loc": {"$geoWithin": {"$box": [[0, 0], [2, 2]]}}, "n": 1});
    assert!(g.matches(&doc! {"loc": [1, 1], "n": 1}));
    assert!(!g.matches(&doc! {"loc": [3, 1], "n": 1}));
    let near = m(doc! {"a.loc": {"$near": [0, 0], "$maxDistance": 2}});
    assert!(near.matches(&doc! {"a": [{"loc": [5, 5]}, {"loc": [1, 1]}]}));
    let (d, _) = near
        .geo_near_distance(&doc! {"a": [{"loc": [5, 5]}, {"loc": [1, 1]}]})
        .unwrap();
    assert!((d - 2f64.sqrt()).abs() < 1e-12);
    assert_eq!(
        err(doc! {"$and": [{"a": {"$bad": 1}}]}).message,
        "unknown operator: $bad"
    );
}

#[test]
fn index_predicates_and_id_equality() {
    let mm = m(
        doc! {"a": 1, "b": {"$gt": 2, "$lte": 9}, "c": {"$in": [1, 2]}, "$or": [{"d": 1}, {"e": 2}]},
    );
    let preds = mm.index_predicates();
    assert_eq!(preds.len(), 3);
    assert_eq!(preds[0].0, "a");
    assert_eq!(preds[0].1.eq, Some(Bson::Int32(1)));
    assert_eq!(preds[1].1.gt, Some(Bson::Int32(2)));
    assert_eq!(preds[1].1.lte, Some(Bson::Int32(9)));
    assert_eq!(
        preds[2].1.in_values,
        Some(vec![Bson::Int32(1), Bson::Int32(2)])
    );
    let re = Bson::RegularExpression(bson::Regex {
        pattern: "a".into(),
        options: "".into(),
    });
    assert!(m(doc! {"a": {"$in": [1, re.clone()]}})
        .index_predicates()
        .is_empty());
    assert_eq!(
        m(doc! {"$and": [{"x": {"$eq": 3}}]}).index_predicates()[0]
            .1
            .eq,
        Some(Bson::Int32(3))
    );
    assert_eq!(m(doc! {"_id": 5}).id_equality(), Some(Bson::Int32(5)));
    assert_eq!(
        m(doc! {"_id": {"$eq": "k"}, "x": 1}).id_equality(),
        Some(bson!("k"))
    );
    assert_eq!(
        m(doc! {"_id": {"a": 1}}).id_equality(),
        Some(bson!({"a": 1}))
    );
    assert_eq!(m(doc! {"_id": re}).id_equality(), None);
    assert_eq!(m(doc! {"_id": {"$gt": 5}}).id_equality(), None);
    assert_eq!(m(doc! {"$or": [{"_id": 5}]}).id_equality(), None);
    assert_eq!(m(doc! {"a": 1}).filter(), &doc! {"a": 1});
}

#[test]
fn matcher_is_send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Matcher>();
}

#[test]
fn expr_evaluates_aggregation_expressions() {
    let f = doc! {"$expr": {"$gt": ["$a", "$b"]}};
    yes(f.clone(), doc! {"a": 5, "b": 2});
    no(f, doc! {"a": 1, "b": 2});
    yes(doc! {"$expr": "$a"}, doc! {"a": 1});
    no(doc! {"$expr": "$a"}, doc! {"a": 0});
    no(doc! {"$expr": "$a"}, doc! {});
}

/// Regexes as PCRE reads them, and `$where` through a stand-in script engine.
mod pcre {
    use super::*;
    use bson::doc;

    #[test]
    fn regexes_support_lookaround_as_pcre_does() {
        let m = Matcher::new(&doc! {"name": {"$regex": "^(?!system\\.)"}}).unwrap();
        assert!(m.matches(&doc! {"name": "users"}));
        assert!(!m.matches(&doc! {"name": "system.views"}));
        let back = Matcher::new(&doc! {"s": {"$regex": "^(a+)b\\1$"}}).unwrap();
        assert!(back.matches(&doc! {"s": "aabaa"}));
        assert!(!back.matches(&doc! {"s": "aaba"}));
    }

    /// A stand-in script engine: `$where` sources are "true", "false" or "fail".
    struct FakeEngine;
    struct FakeScope(Vec<String>);
    impl crate::script::ScriptEngine for FakeEngine {
        fn new_scope(&self) -> Result<Box<dyn crate::script::ScriptScope>> {
            Ok(Box::new(FakeScope(Vec::new())))
        }
    }
    impl crate::script::ScriptScope for FakeScope {
        fn compile(
            &mut self,
            source: &str,
            _op: &Arc<crate::script::Operation>,
        ) -> Result<crate::script::FunctionId> {
            if !matches!(source, "true" | "false" | "fail") {
                return Err(Error::new(139, "SyntaxError: unexpected token"));
            }
            self.0.push(source.to_string());
            Ok(crate::script::FunctionId(self.0.len() - 1))
        }
        fn call(
            &mut self,
            _f: crate::script::FunctionId,
            _this: Option<&Document>,
            _args: &[Bson],
            _op: &Arc<crate::script::Operation>,
        ) -> Result<Bson> {
            Ok(Bson::Null)
        }
        fn fold(
            &mut self,
            _f: crate::script::FunctionId,
            state: Bson,
            _calls: &[Bson],
            _op: &Arc<crate::script::Operation>,
        ) -> Result<Bson> {
            Ok(state)
        }
        fn call_predicate(
            &mut self,
            f: crate::script::FunctionId,
            _this: &Document,
            _op: &Arc<crate::script::Operation>,
        ) -> Result<bool> {
            match self.0[f.0].as_str() {
                "fail" => Err(Error::new(139, "Error: boom")),
                s => Ok(s == "true"),
            }
        }
    }

    #[test]
    fn where_parsing_and_evaluation() {
        crate::script::install(Box::new(FakeEngine));
        let q = |f: Document| Matcher::for_query(&f);
        let qerr = |f: Document| q(f).expect_err("should fail");
        assert!(q(doc! {"$where": "true"}).unwrap().uses_script());
        assert!(q(doc! {"$where": "true"}).unwrap().matches(&doc! {}));
        assert!(!q(doc! {"$where": "false"}).unwrap().matches(&doc! {}));
        assert!(q(doc! {"$or": [{"a": 1}, {"$where": "true"}]})
            .unwrap()
            .matches(&doc! {"a": 2}));
        assert_eq!(
            qerr(doc! {"a": {"$elemMatch": {"$where": "true"}}}).message,
            "$where can only be applied to the top-level document"
        );
        assert_eq!(qerr(doc! {"$where": 5}).message, "$where got bad type");
        assert_eq!(
            qerr(doc! {"$where": ""}).message,
            "code for $where cannot be empty"
        );
        assert_eq!(
            qerr(
                doc! {"$where": Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
                    code: "true".into(),
                    scope: doc! {},
                })}
            )
            .code,
            4649201
        );
        assert_eq!(qerr(doc! {"$where": "nonsense("}).code, 139);
        // A script failure fails a scan; other evaluation errors count as no match.
        let failing = q(doc! {"$where": "fail"}).unwrap();
        assert!(!failing.matches(&doc! {}));
        assert_eq!(failing.matches_or_fail(&doc! {}).unwrap_err().code, 139);
        let bad_expr = q(doc! {"$expr": {"$divide": [1, 0]}}).unwrap();
        assert!(!bad_expr.uses_script());
        assert!(!bad_expr.matches_or_fail(&doc! {}).unwrap());
        // An expired operation stops matching with MaxTimeMSExpired.
        let op = crate::script::Operation::new(Some(std::time::Instant::now()));
        let _g = op.enter();
        assert_eq!(
            q(doc! {"$where": "true"})
                .unwrap()
                .matches_or_fail(&doc! {})
                .unwrap_err()
                .code,
            50
        );
    }
}

#[test]
fn sample_rate_bounds_and_validation() {
    no(doc! {"$sampleRate": 0}, doc! {});
    yes(doc! {"$sampleRate": 1.0}, doc! {});
    // Half the documents, roughly: neither none nor all of 1000.
    let m = Matcher::new(&doc! {"$sampleRate": 0.5}).unwrap();
    let matched = (0..1000).filter(|_| m.matches(&doc! {})).count();
    assert!(matched > 0 && matched < 1000, "{matched}");
    for bad in [
        bson::Bson::from(1.5),
        (-0.1).into(),
        "0.5".into(),
        f64::NAN.into(),
    ] {
        let err = Matcher::new(&doc! {"$sampleRate": bad.clone()}).unwrap_err();
        assert_eq!(err.code, 2, "{bad}");
    }
}

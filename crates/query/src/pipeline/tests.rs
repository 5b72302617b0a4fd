use super::*;
use bson::{bson, doc, Bson, Document};

struct Colls(HashMap<String, Vec<Document>>);

impl CollectionSource for Colls {
    fn scan(&self, db: &str, coll: &str) -> Result<Vec<Document>> {
        Ok(self
            .0
            .get(&format!("{db}.{coll}"))
            .cloned()
            .unwrap_or_default())
    }
}

fn run_with(
    stages: Vec<Document>,
    input: Vec<Document>,
    src: &dyn CollectionSource,
) -> Result<Vec<Document>> {
    let p = Pipeline::parse(&stages, "test")?;
    p.run(
        Box::new(input.into_iter().map(Ok)),
        src,
        &Variables::default(),
    )
}

fn run(stages: Vec<Document>, input: Vec<Document>) -> Vec<Document> {
    run_with(stages, input, &NoCollections).unwrap()
}

fn err(stages: Vec<Document>, input: Vec<Document>) -> Error {
    run_with(stages, input, &NoCollections).unwrap_err()
}

fn parse_code(stages: Vec<Document>) -> i32 {
    Pipeline::parse(&stages, "test").unwrap_err().code
}

fn people() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "ann", "age": 30, "city": "x", "tags": ["a", "b"]},
        doc! {"_id": 2, "name": "bob", "age": 25, "city": "y", "tags": []},
        doc! {"_id": 3, "name": "cy", "age": 35, "city": "x"},
        doc! {"_id": 4, "name": "di", "age": 25.0, "city": null, "tags": "solo"},
    ]
}

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter()
        .map(|d| d.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

#[test]
fn parse_errors() {
    assert_eq!(parse_code(vec![doc! {"$foo": 1}]), 40324);
    assert_eq!(
        Pipeline::parse(&[doc! {"$foo": 1}], "t")
            .unwrap_err()
            .message,
        "Unrecognized pipeline stage name: '$foo'"
    );
    assert_eq!(parse_code(vec![doc! {"$match": {}, "$limit": 1}]), 40323);
    assert_eq!(parse_code(vec![doc! {}]), 40323);
    assert_eq!(
        parse_code(vec![doc! {"$out": "c"}, doc! {"$match": {}}]),
        40601
    );
    assert_eq!(
        parse_code(vec![doc! {"$merge": {"into": "c"}}, doc! {"$match": {}}]),
        40601
    );
    assert_eq!(parse_code(vec![doc! {"$limit": 0}]), 15958);
    assert_eq!(
        Pipeline::parse(&[doc! {"$limit": -1}], "t")
            .unwrap_err()
            .message,
        "the limit must be positive"
    );
    assert_eq!(parse_code(vec![doc! {"$limit": "x"}]), 15957);
    assert_eq!(parse_code(vec![doc! {"$skip": -1}]), 15956);
    assert_eq!(parse_code(vec![doc! {"$skip": "a"}]), 15972);
    assert_eq!(parse_code(vec![doc! {"$match": 1}]), 15959);
    assert_eq!(parse_code(vec![doc! {"$sort": {}}]), 15976);
    assert_eq!(parse_code(vec![doc! {"$group": {"n": {"$sum": 1}}}]), 15955);
    assert_eq!(
        parse_code(vec![doc! {"$group": {"_id": null, "n": {"$bogus": 1}}}]),
        15952
    );
    assert_eq!(
        parse_code(vec![doc! {"$group": {"_id": null, "n": 1}}]),
        40234
    );
    assert_eq!(parse_code(vec![doc! {"$project": {"a": 1, "b": 0}}]), 31254);
    assert_eq!(parse_code(vec![doc! {"$project": {"b": 0, "a": 1}}]), 31253);
    assert_eq!(parse_code(vec![doc! {"$project": {}}]), 51272);
    assert_eq!(
        parse_code(vec![doc! {"$project": {"a": {"$nope": 1}}}]),
        168
    );
    assert_eq!(parse_code(vec![doc! {"$unwind": "a"}]), 28818);
    assert_eq!(parse_code(vec![doc! {"$count": "$x"}]), 40158);
    assert_eq!(parse_code(vec![doc! {"$count": ""}]), 40157);
    assert_eq!(
        parse_code(vec![doc! {"$facet": {"f": [{"$out": "x"}]}}]),
        40600
    );
    assert_eq!(parse_code(vec![doc! {"$sample": {"size": -1}}]), 28747);
    assert_eq!(
        parse_code(vec![
            doc! {"$lookup": {"from": "c", "as": "x", "localField": "a"}}
        ]),
        9
    );
    // Errors are reported at parse time, before any data is read.
    assert_eq!(
        parse_code(vec![
            doc! {"$match": {}},
            doc! {"$project": {"a": {"$add": [1]}, "b": {"$subtract": [1]}}}
        ]),
        16020
    );
}

#[test]
fn leading_match_and_output_stage() {
    let p = Pipeline::parse(
        &[
            doc! {"$match": {"a": 1}},
            doc! {"$sort": {"b": 1}},
            doc! {"$limit": 3},
            doc! {"$out": "dest"},
        ],
        "t",
    )
    .unwrap();
    assert_eq!(p.leading_match(), Some(&doc! {"a": 1}));
    assert_eq!(p.output_stage(), Some(&doc! {"$out": "dest"}));
    assert_eq!(p.leading_sort(), Some((&doc! {"b": 1}, Some(3))));
    let p = Pipeline::parse(&[doc! {"$limit": 1}], "t").unwrap();
    assert_eq!(p.leading_match(), None);
    assert_eq!(p.output_stage(), None);
    // $out passes documents through for the engine to write.
    let out = run(
        vec![doc! {"$match": {"city": "x"}}, doc! {"$out": "dest"}],
        people(),
    );
    assert_eq!(ids(&out), vec![bson!(1), bson!(3)]);
}

#[test]
fn match_limit_skip() {
    let out = run(vec![doc! {"$match": {"city": "x"}}], people());
    assert_eq!(ids(&out), vec![bson!(1), bson!(3)]);
    let out = run(
        vec![doc! {"$match": {"$expr": {"$gt": ["$age", 26]}}}],
        people(),
    );
    assert_eq!(ids(&out), vec![bson!(1), bson!(3)]);
    let out = run(vec![doc! {"$skip": 1}, doc! {"$limit": 2}], people());
    assert_eq!(ids(&out), vec![bson!(2), bson!(3)]);
    let out = run(vec![doc! {"$skip": 10}], people());
    assert!(out.is_empty());
    // $limit stops reading the input early.
    let pulled = std::cell::Cell::new(0);
    let p = Pipeline::parse(&[doc! {"$limit": 2}], "t").unwrap();
    let it = (0..1000).map(|i| {
        pulled.set(pulled.get() + 1);
        Ok(doc! {"_id": i})
    });
    let out = p
        .run(Box::new(it), &NoCollections, &Variables::default())
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(pulled.get(), 2);
    // Input errors propagate.
    let p = Pipeline::parse(&[doc! {"$match": {}}], "t").unwrap();
    let it = vec![Ok(doc! {}), Err(Error::internal("disk"))].into_iter();
    assert_eq!(
        p.run(Box::new(it), &NoCollections, &Variables::default())
            .unwrap_err()
            .code,
        1
    );
}

#[test]
fn project_inclusion_exclusion() {
    let d =
        vec![doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 1, "x": 0}, 5, {"x": 1}]}];
    assert_eq!(
        run(vec![doc! {"$project": {"a": 1}}], d.clone()),
        vec![doc! {"_id": 1, "a": 1}]
    );
    assert_eq!(
        run(vec![doc! {"$project": {"a": 1, "_id": 0}}], d.clone()),
        vec![doc! {"a": 1}]
    );
    assert_eq!(
        run(vec![doc! {"$project": {"b.c": 1}}], d.clone()),
        vec![doc! {"_id": 1, "b": {"c": 2}}]
    );
    assert_eq!(
        run(vec![doc! {"$project": {"b": {"d": true}}}], d.clone()),
        vec![doc! {"_id": 1, "b": {"d": 3}}]
    );
    assert_eq!(
        run(vec![doc! {"$project": {"e.c": 1, "_id": 0}}], d.clone()),
        vec![doc! {"e": [{"c": 1}, {}]}]
    );
    assert_eq!(
        run(vec![doc! {"$project": {"b": 0, "e": 0}}], d.clone()),
        vec![doc! {"_id": 1, "a": 1}]
    );
    assert_eq!(
        run(
            vec![doc! {"$project": {"b.c": 0, "e.x": 0, "_id": 0}}],
            d.clone()
        ),
        vec![doc! {"a": 1, "b": {"d": 3}, "e": [{"c": 1}, 5, {}]}]
    );
    assert!(!run(vec![doc! {"$project": {"_id": 0}}], d.clone())[0].contains_key("_id"));
    // Computed fields, $$REMOVE and literals.
    let out = run(
        vec![
            doc! {"$project": {"s": {"$add": ["$a", "$b.c"]}, "r": "$$REMOVE", "m": "$missing", "lit": {"$literal": 1}, "x.y": "$a"}},
        ],
        d.clone(),
    );
    assert_eq!(out, vec![doc! {"_id": 1, "s": 3, "lit": 1, "x": {"y": 1}}]);
    let out = run(
        vec![doc! {"$project": {"_id": 0, "b": {"c": 1, "z": {"$multiply": ["$a", 10]}}}}],
        d.clone(),
    );
    assert_eq!(out, vec![doc! {"b": {"c": 2, "z": 10}}]);
    // Included fields keep their input order; the mixing error message matches mongod.
    let out = run(vec![doc! {"$project": {"b": 1, "a": 1}}], d.clone());
    assert_eq!(out[0].keys().collect::<Vec<_>>(), vec!["_id", "a", "b"]);
    let e = Pipeline::parse(&[doc! {"$project": {"a": 1, "b": 0}}], "t").unwrap_err();
    assert_eq!(
        e.message,
        "Invalid $project :: caused by :: Cannot do exclusion on field b in inclusion projection"
    );
}

#[test]
fn add_fields_set_unset() {
    let d = vec![doc! {"_id": 1, "a": 1, "o": {"p": 1}, "arr": [{"q": 1}, {"q": 2}]}];
    let out = run(
        vec![doc! {"$addFields": {"b": {"$add": ["$a", 1]}, "a": 5}}],
        d.clone(),
    );
    assert_eq!(
        out,
        vec![doc! {"_id": 1, "a": 5, "o": {"p": 1}, "arr": [{"q": 1}, {"q": 2}], "b": 2}]
    );
    let out = run(vec![doc! {"$set": {"o.n": 2, "arr.r": 0}}], d.clone());
    assert_eq!(out[0].get("o"), Some(&bson!({"p": 1, "n": 2})));
    assert_eq!(
        out[0].get("arr"),
        Some(&bson!([{"q": 1, "r": 0}, {"q": 2, "r": 0}]))
    );
    let out = run(vec![doc! {"$set": {"o": {"n": 2}}}], d.clone());
    assert_eq!(out[0].get("o"), Some(&bson!({"p": 1, "n": 2})));
    let out = run(vec![doc! {"$addFields": {"a": "$$REMOVE"}}], d.clone());
    assert!(!out[0].contains_key("a"));
    let out = run(vec![doc! {"$unset": ["a", "o.p"]}], d.clone());
    assert_eq!(
        out,
        vec![doc! {"_id": 1, "o": {}, "arr": [{"q": 1}, {"q": 2}]}]
    );
    let out = run(vec![doc! {"$unset": "arr.q"}], d.clone());
    assert_eq!(out[0].get("arr"), Some(&bson!([{}, {}])));
    assert_eq!(parse_code(vec![doc! {"$unset": 1}]), 31002);
}

#[test]
fn sort_and_top_k() {
    let out = run(vec![doc! {"$sort": {"age": -1, "_id": 1}}], people());
    assert_eq!(ids(&out), vec![bson!(3), bson!(1), bson!(2), bson!(4)]);
    let many: Vec<Document> = (0..100)
        .map(|i| doc! {"_id": i, "k": (i * 37) % 100})
        .collect();
    let out = run(
        vec![doc! {"$sort": {"k": 1}}, doc! {"$limit": 3}],
        many.clone(),
    );
    assert_eq!(
        out.iter()
            .map(|d| d.get_i32("k").unwrap())
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    // Ties keep input order (stable).
    let ties: Vec<Document> = (0..50).map(|i| doc! {"_id": i, "k": i % 2}).collect();
    let out = run(vec![doc! {"$sort": {"k": 1}}, doc! {"$limit": 3}], ties);
    assert_eq!(ids(&out), vec![bson!(0), bson!(2), bson!(4)]);
}

#[test]
fn group_stage() {
    let out = run(
        vec![
            doc! {"$group": {"_id": "$age", "n": {"$sum": 1}, "names": {"$push": "$name"}, "avg": {"$avg": "$age"}, "first": {"$first": "$name"}, "last": {"$last": "$name"}, "tags": {"$addToSet": "$city"}, "c": {"$count": {}}}},
            doc! {"$sort": {"_id": 1}},
        ],
        people(),
    );
    assert_eq!(out.len(), 3);
    // 25 and 25.0 group together.
    assert_eq!(
        out[0],
        doc! {"_id": 25, "n": 2, "names": ["bob", "di"], "avg": 25.0, "first": "bob", "last": "di", "tags": ["y", null], "c": 2}
    );
    let out = run(
        vec![
            doc! {"$group": {"_id": null, "total": {"$sum": "$age"}, "mx": {"$max": "$age"}, "mn": {"$min": "$name"}}},
        ],
        people(),
    );
    assert_eq!(
        out,
        vec![doc! {"_id": null, "total": 115.0, "mx": 35, "mn": "ann"}]
    );
    // Document keys, missing keys group as null, $push skips missing.
    let out = run(
        vec![
            doc! {"$group": {"_id": {"c": "$city"}, "t": {"$push": "$tags"}}},
            doc! {"$sort": {"_id.c": 1}},
        ],
        people(),
    );
    assert_eq!(out.len(), 3);
    assert_eq!(out[0], doc! {"_id": {"c": null}, "t": ["solo"]});
    assert_eq!(out[2], doc! {"_id": {"c": "y"}, "t": [[]]});
    let out = run(
        vec![doc! {"$group": {"_id": "$nope", "n": {"$sum": 1}}}],
        people(),
    );
    assert_eq!(out, vec![doc! {"_id": null, "n": 4}]);
    let out = run(
        vec![
            doc! {"$group": {"_id": null, "m": {"$mergeObjects": "$o"}, "sd": {"$stdDevPop": "$v"}}},
        ],
        vec![doc! {"o": {"a": 1}, "v": 1}, doc! {"o": {"b": 2}, "v": 3}],
    );
    assert_eq!(
        out,
        vec![doc! {"_id": null, "m": {"a": 1, "b": 2}, "sd": 1.0}]
    );
    // Int overflow in $sum widens to long.
    let out = run(
        vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}],
        vec![doc! {"v": i32::MAX}, doc! {"v": 1}],
    );
    assert_eq!(out[0].get("s"), Some(&Bson::Int64(i32::MAX as i64 + 1)));
    assert!(run(
        vec![doc! {"$group": {"_id": null, "n": {"$sum": 1}}}],
        vec![]
    )
    .is_empty());
}

#[test]
fn count_and_sort_by_count() {
    assert_eq!(
        run(vec![doc! {"$count": "n"}], people()),
        vec![doc! {"n": 4}]
    );
    assert!(run(
        vec![doc! {"$match": {"city": "zz"}}, doc! {"$count": "n"}],
        people()
    )
    .is_empty());
    let out = run(vec![doc! {"$sortByCount": "$city"}], people());
    assert_eq!(out[0], doc! {"_id": "x", "count": 2});
    assert_eq!(out.len(), 3);
}

#[test]
fn unwind_stage() {
    let out = run(vec![doc! {"$unwind": "$tags"}], people());
    assert_eq!(out.len(), 3);
    assert_eq!(
        out[0],
        doc! {"_id": 1, "name": "ann", "age": 30, "city": "x", "tags": "a"}
    );
    assert_eq!(out[2].get("tags"), Some(&bson!("solo")));
    let out = run(
        vec![
            doc! {"$unwind": {"path": "$tags", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}},
        ],
        people(),
    );
    assert_eq!(out.len(), 5);
    assert_eq!(out[1].get("i"), Some(&Bson::Int64(1)));
    assert_eq!(
        out[2],
        doc! {"_id": 2, "name": "bob", "age": 25, "city": "y", "i": null}
    );
    assert_eq!(out[3].get("i"), Some(&Bson::Null));
    assert!(!out[3].contains_key("tags"));
    let out = run(
        vec![doc! {"$unwind": "$a.b"}],
        vec![doc! {"a": {"b": [1, 2]}}],
    );
    assert_eq!(out, vec![doc! {"a": {"b": 1}}, doc! {"a": {"b": 2}}]);
    assert_eq!(
        parse_code(vec![doc! {"$unwind": {"path": "$a", "bogus": 1}}]),
        28811
    );
    assert_eq!(parse_code(vec![doc! {"$unwind": 5}]), 15981);
}

#[test]
fn replace_root() {
    let d = vec![doc! {"_id": 1, "sub": {"x": 1}, "n": 5}];
    assert_eq!(
        run(vec![doc! {"$replaceRoot": {"newRoot": "$sub"}}], d.clone()),
        vec![doc! {"x": 1}]
    );
    assert_eq!(
        run(vec![doc! {"$replaceWith": {"a": "$n"}}], d.clone()),
        vec![doc! {"a": 5}]
    );
    let e = err(vec![doc! {"$replaceRoot": {"newRoot": "$n"}}], d.clone());
    assert_eq!(e.code, 40228);
    assert!(e.message.starts_with("'newRoot' expression must evaluate to an object, but resulting value was: 5. Type of resulting value: 'int'."));
    assert_eq!(err(vec![doc! {"$replaceWith": "$missing"}], d).code, 40228);
    assert_eq!(parse_code(vec![doc! {"$replaceRoot": {"x": 1}}]), 40415);
}

fn shop() -> Colls {
    let mut m = HashMap::new();
    m.insert(
        "test.items".to_string(),
        vec![
            doc! {"_id": "i1", "sku": "a", "qty": 1},
            doc! {"_id": "i2", "sku": "b", "qty": 5},
            doc! {"_id": "i3", "sku": ["a", "c"], "qty": 7},
            doc! {"_id": "i4", "qty": 9},
        ],
    );
    m.insert("other.things".to_string(), vec![doc! {"_id": 1}]);
    m.insert(
        "test.emp".to_string(),
        vec![
            doc! {"_id": 1, "name": "boss", "reportsTo": null},
            doc! {"_id": 2, "name": "mid", "reportsTo": "boss"},
            doc! {"_id": 3, "name": "low", "reportsTo": "mid"},
        ],
    );
    Colls(m)
}

#[test]
fn lookup_stage() {
    let src = shop();
    let orders = vec![
        doc! {"_id": 1, "item": "a"},
        doc! {"_id": 2, "item": ["b", "c"]},
        doc! {"_id": 3},
    ];
    let out = run_with(vec![doc! {"$lookup": {"from": "items", "localField": "item", "foreignField": "sku", "as": "m"}}], orders.clone(), &src).unwrap();
    let m_ids = |d: &Document| -> Vec<Bson> {
        d.get_array("m")
            .unwrap()
            .iter()
            .map(|x| x.as_document().unwrap().get("_id").unwrap().clone())
            .collect()
    };
    assert_eq!(m_ids(&out[0]), vec![bson!("i1"), bson!("i3")]);
    assert_eq!(m_ids(&out[1]), vec![bson!("i2"), bson!("i3")]);
    // Missing local field matches foreign documents without the field.
    assert_eq!(m_ids(&out[2]), vec![bson!("i4")]);
    // let + pipeline form.
    let out = run_with(
        vec![doc! {"$lookup": {"from": "items", "let": {"minq": "$q"}, "pipeline": [{"$match": {"$expr": {"$gte": ["$qty", "$$minq"]}}}, {"$project": {"_id": 1}}], "as": "big"}}],
        vec![doc! {"_id": 1, "q": 6}],
        &src,
    )
    .unwrap();
    assert_eq!(
        out[0].get("big"),
        Some(&bson!([{"_id": "i3"}, {"_id": "i4"}]))
    );
    // Combined (5.0) form: equality first, then the pipeline.
    let out = run_with(
        vec![doc! {"$lookup": {"from": "items", "localField": "item", "foreignField": "sku", "let": {"x": 2}, "pipeline": [{"$match": {"$expr": {"$gt": ["$qty", "$$x"]}}}], "as": "m"}}],
        orders.clone(),
        &src,
    )
    .unwrap();
    assert_eq!(m_ids(&out[0]), vec![bson!("i3")]);
    // Nested variables inside a matcher-level $expr are substituted.
    let out = run_with(
        vec![doc! {"$lookup": {"from": "items", "let": {"s": "b"}, "pipeline": [{"$match": {"$and": [{"$expr": {"$eq": ["$sku", "$$s"]}}]}}], "as": "m"}}],
        vec![doc! {"_id": 1}],
        &src,
    )
    .unwrap();
    assert_eq!(m_ids(&out[0]), vec![bson!("i2")]);
    // from {db, coll}
    let out = run_with(vec![doc! {"$lookup": {"from": {"db": "other", "coll": "things"}, "pipeline": [], "as": "t"}}], vec![doc! {}], &src).unwrap();
    assert_eq!(out[0].get("t"), Some(&bson!([{"_id": 1}])));
}

#[test]
fn graph_lookup_stage() {
    let src = shop();
    let out = run_with(
        vec![doc! {"$graphLookup": {"from": "emp", "startWith": "$reportsTo", "connectFromField": "reportsTo", "connectToField": "name", "as": "chain", "depthField": "d"}}],
        vec![doc! {"name": "low", "reportsTo": "mid"}],
        &src,
    )
    .unwrap();
    let chain = out[0].get_array("chain").unwrap();
    assert_eq!(chain.len(), 2);
    assert_eq!(
        chain[0].as_document().unwrap().get("d"),
        Some(&Bson::Int64(0))
    );
}

#[test]
fn facet_union_bucket_sample() {
    let src = shop();
    let out = run_with(
        vec![doc! {"$facet": {"n": [{"$count": "n"}], "top": [{"$sort": {"age": -1}}, {"$limit": 1}, {"$project": {"name": 1, "_id": 0}}]}}],
        people(),
        &src,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"n": [{"n": 4}], "top": [{"name": "cy"}]}]);
    let out = run_with(vec![doc! {"$project": {"_id": 1}}, doc! {"$unionWith": {"coll": "items", "pipeline": [{"$match": {"qty": {"$gt": 6}}}, {"$project": {"_id": 1}}]}}], people(), &src).unwrap();
    assert_eq!(
        ids(&out),
        vec![
            bson!(1),
            bson!(2),
            bson!(3),
            bson!(4),
            bson!("i3"),
            bson!("i4")
        ]
    );
    let out = run_with(vec![doc! {"$unionWith": "items"}], vec![], &src).unwrap();
    assert_eq!(out.len(), 4);
    let out = run(
        vec![
            doc! {"$bucket": {"groupBy": "$age", "boundaries": [20, 30, 40], "default": "other", "output": {"n": {"$sum": 1}, "names": {"$push": "$name"}}}},
        ],
        people()
            .into_iter()
            .chain([doc! {"_id": 9, "name": "old", "age": 99}])
            .collect(),
    );
    assert_eq!(
        out,
        vec![
            doc! {"_id": 20, "n": 2, "names": ["bob", "di"]},
            doc! {"_id": 30, "n": 2, "names": ["ann", "cy"]},
            doc! {"_id": "other", "n": 1, "names": ["old"]}
        ]
    );
    let out = run(
        vec![doc! {"$bucket": {"groupBy": "$age", "boundaries": [0, 100]}}],
        people(),
    );
    assert_eq!(out, vec![doc! {"_id": 0, "count": 4}]);
    assert_eq!(
        err(
            vec![doc! {"$bucket": {"groupBy": "$age", "boundaries": [0, 26]}}],
            people()
        )
        .code,
        40066
    );
    assert_eq!(
        parse_code(vec![
            doc! {"$bucket": {"groupBy": "$age", "boundaries": [5, 1]}}
        ]),
        40194
    );
    let out = run(vec![doc! {"$sample": {"size": 2}}], people());
    assert_eq!(out.len(), 2);
    assert_ne!(out[0].get("_id"), out[1].get("_id"));
    assert_eq!(run(vec![doc! {"$sample": {"size": 10}}], people()).len(), 4);
}

#[test]
fn redact_and_documents() {
    let d = vec![
        doc! {"level": 1, "sub": {"level": 5, "x": 1}, "arr": [{"level": 1, "y": 2}, {"level": 9}]},
    ];
    let out = run(
        vec![
            doc! {"$redact": {"$cond": {"if": {"$lte": ["$level", 3]}, "then": "$$DESCEND", "else": "$$PRUNE"}}},
        ],
        d,
    );
    assert_eq!(out, vec![doc! {"level": 1, "arr": [{"level": 1, "y": 2}]}]);
    let out = run(
        vec![
            doc! {"$documents": [{"a": 1}, {"a": 2}]},
            doc! {"$match": {"a": 2}},
        ],
        vec![],
    );
    assert_eq!(out, vec![doc! {"a": 2}]);
    assert_eq!(
        parse_code(vec![doc! {"$match": {}}, doc! {"$documents": []}]),
        40602
    );
}

#[test]
fn variables_and_now() {
    let mut vars = Variables::default();
    vars.set("target", bson!(30));
    let p = Pipeline::parse(
        &[
            doc! {"$match": {"$expr": {"$eq": ["$age", "$$target"]}}},
            doc! {"$project": {"t": "$$NOW", "name": 1}},
        ],
        "t",
    )
    .unwrap();
    let out = p
        .run(
            Box::new(people().into_iter().map(Ok)),
            &NoCollections,
            &vars,
        )
        .unwrap();
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0].get("t"), Some(Bson::DateTime(_))));
}

#[test]
fn stages_compare_under_the_operations_collation() {
    let vars = Variables {
        collator: crate::collation::Collator::parse(&doc! {"locale": "en", "strength": 2}).unwrap(),
        ..Default::default()
    };
    let input = vec![
        doc! {"_id": 1, "s": "PING", "n": 1},
        doc! {"_id": 2, "s": "ping", "n": 2},
        doc! {"_id": 3, "s": "pong", "n": 4},
    ];
    let go = |stages: Vec<Document>| {
        Pipeline::parse(&stages, "test")
            .unwrap()
            .run(
                Box::new(input.clone().into_iter().map(Ok)),
                &NoCollections,
                &vars,
            )
            .unwrap()
    };
    let matched = go(vec![doc! {"$match": {"s": "Ping"}}]);
    assert_eq!(matched.len(), 2);
    let groups = go(vec![
        doc! {"$group": {"_id": "$s", "n": {"$sum": "$n"}, "set": {"$addToSet": "$s"}}},
    ]);
    assert_eq!(
        groups,
        vec![
            doc! {"_id": "PING", "n": 3, "set": ["PING"]},
            doc! {"_id": "pong", "n": 4, "set": ["pong"]}
        ]
    );
    let sorted = go(vec![doc! {"$sort": {"s": -1, "_id": 1}}]);
    let ids: Vec<i32> = sorted.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    assert_eq!(ids, vec![3, 1, 2]);
    // The same pipeline without a collation: three groups.
    assert_eq!(
        run(vec![doc! {"$group": {"_id": "$s"}}], input.clone()).len(),
        3
    );
}

/// A `$group` after the streaming stages folds each document as it arrives: a
/// document its `_id` expression fails on stops the run before the next document is
/// read (a `$group` that collected its input first would read past it).
#[test]
fn group_folds_its_input_as_it_comes() {
    let p = Pipeline::parse(
        &[
            doc! {"$match": {"x": {"$exists": true}}},
            doc! {"$group": {"_id": {"$divide": [1, "$x"]}, "n": {"$sum": 1}}},
        ],
        "test",
    )
    .unwrap();
    let input = std::iter::once(Ok(doc! {"x": 0})).chain(std::iter::from_fn(|| {
        panic!("read past the failing document")
    }));
    let e = p
        .run(Box::new(input), &NoCollections, &Variables::default())
        .unwrap_err();
    assert_eq!(e.code, 2, "{e:?}");
    let counted = p
        .run(
            Box::new((1..=5).map(|i| Ok(doc! {"x": if i % 2 == 0 { 1 } else { 2 }}))),
            &NoCollections,
            &Variables::default(),
        )
        .unwrap();
    assert_eq!(
        counted,
        vec![doc! {"_id": 0.5, "n": 3}, doc! {"_id": 1.0, "n": 2}]
    );
}

/// `$sortByCount` and `$bucket` after the streaming stages fold each document as it
/// arrives too: the failing document stops the run before the next is read.
#[test]
fn sort_by_count_and_bucket_fold_their_input_as_it_comes() {
    for stage in [
        doc! {"$sortByCount": {"$divide": [1, "$x"]}},
        doc! {"$bucket": {"groupBy": {"$divide": [1, "$x"]}, "boundaries": [0, 1, 10]}},
    ] {
        let p = Pipeline::parse(
            &[doc! {"$match": {"x": {"$exists": true}}}, stage.clone()],
            "t",
        )
        .unwrap();
        let input = std::iter::once(Ok(doc! {"x": 0})).chain(std::iter::from_fn(|| {
            panic!("{stage:?} read past the failing document")
        }));
        let e = p
            .run(Box::new(input), &NoCollections, &Variables::default())
            .unwrap_err();
        assert_eq!(e.code, 2, "{e:?}");
        let input = (1..=5).map(|i| Ok(doc! {"x": if i % 2 == 0 { 1 } else { 2 }}));
        let out = p
            .run(Box::new(input), &NoCollections, &Variables::default())
            .unwrap();
        let expected = if stage.contains_key("$bucket") {
            vec![doc! {"_id": 0, "count": 3}, doc! {"_id": 1, "count": 2}]
        } else {
            vec![doc! {"_id": 0.5, "count": 3}, doc! {"_id": 1.0, "count": 2}]
        };
        assert_eq!(out, expected, "{stage:?}");
    }
}

/// A `$sort` with a `$limit` after it takes its input as it comes and keeps the
/// stable sort's first documents across many compactions (ties in input order).
#[test]
fn a_limited_sort_keeps_the_stable_sorts_first_documents() {
    let input: Vec<Document> = (0..1000i64)
        .map(|i| doc! {"a": (i * 7919) % 37, "i": i})
        .collect();
    let mut expected = input.clone();
    expected.sort_by_key(|d| std::cmp::Reverse(d.get_i64("a").unwrap()));
    for k in [1i64, 5, 64, 65, 300, 1000, 2000] {
        let out = run(
            vec![doc! {"$sort": {"a": -1}}, doc! {"$limit": k}],
            input.clone(),
        );
        let n = (k as usize).min(expected.len());
        assert_eq!(out, expected[..n].to_vec(), "limit {k}");
    }
}

/// A streamed pipeline gives what the whole run gives, whatever the chunks its input
/// comes in, and a reached `$limit` ends it without taking more input.
#[test]
fn a_streamed_pipeline_gives_the_runs_documents() {
    let mut colls = HashMap::new();
    colls.insert(
        "test.cities".to_string(),
        vec![doc! {"_id": "x", "n": 1}, doc! {"_id": "y", "n": 2}],
    );
    let src = Colls(colls);
    let pipelines = vec![
        vec![
            doc! {"$match": {"age": {"$gte": 25}}},
            doc! {"$project": {"name": 1}},
        ],
        vec![
            doc! {"$unwind": "$tags"},
            doc! {"$skip": 1},
            doc! {"$limit": 2},
        ],
        vec![
            doc! {"$skip": 1},
            doc! {"$limit": 2},
            doc! {"$match": {"city": "x"}},
        ],
        vec![
            doc! {"$lookup": {"from": "cities", "localField": "city", "foreignField": "_id", "as": "c"}},
            doc! {"$replaceRoot": {"newRoot": {"name": "$name", "c": "$c"}}},
        ],
        vec![doc! {"$limit": 1}],
        vec![],
    ];
    for stages in pipelines {
        let whole = run_with(stages.clone(), people(), &src).unwrap();
        for chunk in [1, 3] {
            let p = Pipeline::parse(&stages, "test").unwrap();
            let Ok(mut s) = p.streamed(&Variables::default()).unwrap() else {
                panic!("{stages:?} streams");
            };
            let mut out = std::collections::VecDeque::new();
            let mut taken = 0;
            for part in people().chunks(chunk) {
                if s.ended() {
                    break;
                }
                taken += part.len();
                s.push(part.to_vec(), &src, &mut out).unwrap();
            }
            assert_eq!(Vec::from(out), whole, "{stages:?} in chunks of {chunk}");
            if stages == vec![doc! {"$limit": 1}] {
                assert_eq!(taken, chunk, "the limit ended the input at its first chunk");
            }
        }
    }
}

#[test]
fn a_pipeline_with_a_blocking_or_output_stage_is_not_streamed() {
    for stages in [
        vec![doc! {"$match": {}}, doc! {"$sort": {"a": 1}}],
        vec![doc! {"$group": {"_id": "$a"}}],
        vec![doc! {"$match": {}}, doc! {"$out": "o"}],
        vec![doc! {"$count": "n"}],
    ] {
        let p = Pipeline::parse(&stages, "test").unwrap();
        assert!(
            p.streamed(&Variables::default()).unwrap().is_err(),
            "{stages:?}"
        );
    }
}

/// Runs `stages` over `input` as the engine runs a pipeline cut at its blocking
/// stages (`Pipeline::segments`), each blocking stage in memory here: a `$group`'s
/// spill records sorted (stably) by group as the engine's external sort sorts them.
fn run_segments(stages: &[Document], input: Vec<Document>, vars: &Variables) -> Vec<Document> {
    run_segments_with(stages, input, vars, &NoCollections)
}

/// [`run_segments`] with other collections (a `$unionWith`'s second side, read whole
/// here).
fn run_segments_with(
    stages: &[Document],
    input: Vec<Document>,
    vars: &Variables,
    src: &dyn CollectionSource,
) -> Vec<Document> {
    let p = Pipeline::parse(stages, "test").unwrap();
    let Ok(segments) = p.segments(vars).unwrap() else {
        panic!("{stages:?} is cut at its blocking stages");
    };
    let mut out = std::collections::VecDeque::new();
    let mut first = segments.first;
    first.push(input, src, &mut out).unwrap();
    for (blocking, mut after) in segments.rest {
        let given: Vec<Document> = out.drain(..).collect();
        let fed = match blocking {
            Blocking::Sort { spec, limit } => {
                let mut sorted = given;
                sorted.sort_by(|a, b| spec.compare(a, b));
                sorted.truncate(limit.unwrap_or(usize::MAX));
                sorted
            }
            Blocking::Count(field) => Blocking::counted(&field, given.len()),
            Blocking::Group(stage) => {
                let mut grouper = stage.grouper();
                let mut records = Vec::new();
                for d in &given {
                    records.extend(grouper.add_or_spill(d).unwrap());
                }
                let mut groups = grouper.finish().unwrap();
                records.sort_by(|a, b| {
                    let k = |d: &Document| d.get_str(SPILL_ORDER_FIELD).unwrap().to_string();
                    k(a).cmp(&k(b))
                });
                let mut spilled = stage.spilled();
                for r in records {
                    groups.extend(spilled.push(r).unwrap());
                }
                groups.extend(spilled.finish().unwrap());
                groups
            }
            Blocking::BucketAuto(stage) => {
                let order = stage.record_order();
                let mut records: Vec<Document> = given
                    .iter()
                    .map(|d| bucket_auto_record(stage.keyed(d).unwrap()))
                    .collect();
                records.sort_by(|a, b| order.compare(a, b));
                let mut cutter = stage.cutter(records.len());
                for r in records {
                    cutter.push_record(r).unwrap();
                }
                cutter.finish().unwrap()
            }
            Blocking::Window(stage) => {
                let order = stage.order();
                let mut records: Vec<Document> = given
                    .into_iter()
                    .map(|d| stage.record(d).unwrap())
                    .collect();
                records.sort_by(|a, b| order.compare(a, b));
                let (mut done, mut part, mut current) = (Vec::new(), Vec::new(), None);
                for r in records {
                    let (p, d) = stage.unpack(r).unwrap();
                    if current
                        .as_ref()
                        .is_some_and(|c| !stage.same_partition(c, &p))
                    {
                        done.extend(stage.partition(std::mem::take(&mut part)).unwrap());
                    }
                    current = Some(p);
                    part.push(d);
                }
                if !part.is_empty() {
                    done.extend(stage.partition(part).unwrap());
                }
                done
            }
            Blocking::Union(stage) => {
                let (db, coll) = stage.collection();
                let mut docs = given;
                docs.extend(stage.run_over(src.scan(db, coll).unwrap(), src).unwrap());
                docs
            }
        };
        after.push(fed, src, &mut out).unwrap();
    }
    out.into()
}

/// A `$facet` feeds each document to each of its pipelines as it comes: what they
/// give is what each gives over the whole input, and once every pipeline met a
/// `$limit` no more input is read.
#[test]
fn a_facet_feeds_its_pipelines_as_the_documents_come() {
    /// The run's output over 1,000 documents, and how many it read.
    fn run_counting(stages: &[Document]) -> (Vec<Document>, usize) {
        let pulled = std::cell::Cell::new(0);
        let input = (0..1000).map(|i: i32| {
            pulled.set(pulled.get() + 1);
            Ok(doc! {"_id": i, "k": i % 7})
        });
        let p = Pipeline::parse(stages, "t").unwrap();
        let out = p
            .run(Box::new(input), &NoCollections, &Variables::default())
            .unwrap();
        (out, pulled.get())
    }
    let facets = doc! {"$facet": {
        "total": [{"$count": "n"}],
        "page": [{"$match": {"k": 3}}, {"$skip": 2}, {"$limit": 3}, {"$project": {"_id": 1}}],
        "groups": [{"$group": {"_id": "$k", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}, {"$limit": 2}],
        "top": [{"$sort": {"k": -1, "_id": 1}}, {"$limit": 2}],
    }};
    let project = doc! {"$project": {"total": 1, "page": 1, "groups": 1, "top._id": 1}};
    let (out, pulled) = run_counting(&[facets, project]);
    assert_eq!(pulled, 1000);
    assert_eq!(
        out,
        vec![doc! {
            "total": [{"n": 1000}],
            "page": [{"_id": 17}, {"_id": 24}, {"_id": 31}],
            "groups": [{"_id": 0, "n": 143}, {"_id": 1, "n": 143}],
            "top": [{"_id": 6}, {"_id": 13}],
        }]
    );
    let limited =
        doc! {"$facet": {"a": [{"$limit": 2}], "b": [{"$match": {"k": 1}}, {"$limit": 3}]}};
    let (out, pulled) = run_counting(&[doc! {"$match": {"k": {"$gte": 0}}}, limited]);
    assert_eq!(
        out,
        vec![doc! {"a": [{"_id": 0, "k": 0}, {"_id": 1, "k": 1}],
        "b": [{"_id": 1, "k": 1}, {"_id": 8, "k": 1}, {"_id": 15, "k": 1}]}]
    );
    assert_eq!(pulled, 16, "read until both facets met their $limit");
}

/// Documents in `_id` order (a `$group`'s output order is not promised).
fn by_id(mut docs: Vec<Document>) -> Vec<Document> {
    docs.sort_by(|a, b| {
        crate::compare::cmp_bson(
            a.get("_id").unwrap_or(&Bson::Null),
            b.get("_id").unwrap_or(&Bson::Null),
        )
    });
    docs
}

/// A pipeline whose blocking stages are `$sort`s, `$group`s and `$count`s is cut at
/// each of them, and run part by part gives what the whole run gives (`$group`'s
/// output in another order); a pipeline with another blocking stage or an output
/// stage is not cut.
#[test]
fn a_pipeline_is_cut_at_its_blocking_stages() {
    let cases = vec![
        vec![
            doc! {"$match": {"age": {"$gte": 25}}},
            doc! {"$set": {"n": {"$strLenCP": "$name"}}},
            doc! {"$sort": {"age": -1, "_id": 1}},
            doc! {"$project": {"name": 1, "n": 1}},
            doc! {"$limit": 2},
        ],
        vec![doc! {"$sort": {"a": 1}}, doc! {"$limit": 3}],
        vec![
            doc! {"$group": {"_id": "$city", "n": {"$sum": 1}, "names": {"$push": "$name"}}},
            doc! {"$sort": {"n": -1, "_id": 1}},
            doc! {"$limit": 2},
        ],
        vec![
            doc! {"$sort": {"name": -1}},
            doc! {"$group": {"_id": "$age", "first": {"$first": "$name"}}},
            doc! {"$match": {"first": {"$ne": "cy"}}},
        ],
        vec![doc! {"$group": {"_id": "$age"}}, doc! {"$count": "ages"}],
        vec![doc! {"$match": {}}, doc! {"$project": {"age": 1}}],
        vec![
            doc! {"$bucketAuto": {"groupBy": "$age", "buckets": 2, "output": {"names": {"$push": "$name"}}}},
            doc! {"$project": {"_id": 0, "names": 1, "min": "$_id.min"}},
            doc! {"$set": {"_id": "$min"}},
        ],
        vec![
            doc! {"$match": {"age": {"$gt": 0}}},
            doc! {"$bucketAuto": {"groupBy": "$age", "buckets": 3, "granularity": "R5"}},
            doc! {"$set": {"_id": "$_id.min"}},
        ],
        vec![
            doc! {"$setWindowFields": {"partitionBy": "$city", "sortBy": {"age": -1}, "output": {
            "rank": {"$rank": {}},
            "names": {"$push": "$name", "window": {"documents": ["unbounded", "current"]}},
            "total": {"$sum": "$age"}}}},
            doc! {"$project": {"tags": 0}},
        ],
        vec![
            doc! {"$setWindowFields": {"partitionBy": {"$gt": ["$age", 26]}, "output": {
            "n": {"$count": {}}}}},
            doc! {"$sort": {"n": 1, "_id": 1}},
        ],
    ];
    for stages in cases {
        let whole = by_id(run(stages.clone(), people()));
        for max in [None, Some(0), Some(200)] {
            let vars = Variables {
                max_group_bytes: max,
                ..Default::default()
            };
            let cut = by_id(run_segments(&stages, people(), &vars));
            assert_eq!(cut, whole, "{stages:?}, $group memory {max:?}");
        }
    }
    let src = Colls(HashMap::from([(
        "test.items".to_string(),
        vec![doc! {"_id": "i1", "age": 7}, doc! {"_id": "i2", "age": 40}],
    )]));
    let union = vec![
        doc! {"$match": {"age": {"$gte": 30}}},
        doc! {"$unionWith": {"coll": "items", "pipeline": [{"$sort": {"age": -1}}]}},
        doc! {"$project": {"age": 1}},
        doc! {"$limit": 3},
    ];
    let whole = run_with(union.clone(), people(), &src).unwrap();
    assert_eq!(ids(&whole), vec![bson!(1), bson!(3), bson!("i2")]);
    let cut = run_segments_with(&union, people(), &Variables::default(), &src);
    assert_eq!(cut, whole);
    for stages in [
        vec![doc! {"$match": {}}, doc! {"$out": "o"}],
        vec![doc! {"$facet": {"a": [{"$match": {}}]}}],
        vec![doc! {"$setWindowFields": {"output": {"n": {"$count": {}}}}}],
        vec![doc! {"$sample": {"size": 2}}],
    ] {
        let p = Pipeline::parse(&stages, "test").unwrap();
        assert!(
            p.segments(&Variables::default()).unwrap().is_err(),
            "{stages:?}"
        );
    }
}

/// Documents for the spill tests: 40 groups of uneven sizes, values of several types,
/// documents in no group order.
fn spill_input() -> Vec<Document> {
    (0..400)
        .map(|i: i32| {
            let k = (i * 7919) % 40;
            let v = match i % 5 {
                0 => Bson::Int32(i),
                1 => Bson::Double(f64::from(i) / 2.0),
                2 => Bson::String(format!("s{}", i % 13)),
                3 => Bson::Null,
                _ => Bson::Int64(i64::from(i) * 3),
            };
            let mut d = doc! {"_id": i, "k": k, "v": v, "n": i % 17, "o": {"a": i % 3}};
            if i % 11 == 0 {
                d.remove("v");
            }
            d
        })
        .collect()
}

/// A `$group` whose memory fills gives, from the groups it held and the groups it
/// spilled, what it gives holding them all: every accumulator, every limit from
/// spilling every group to spilling none.
#[test]
fn a_spilling_group_gives_what_the_group_in_memory_gives() {
    let group = doc! {"$group": {
        "_id": {"$mod": ["$k", 40]},
        "sum": {"$sum": "$n"}, "avg": {"$avg": "$n"}, "count": {"$count": {}},
        "min": {"$min": "$v"}, "max": {"$max": "$v"},
        "first": {"$first": "$v"}, "last": {"$last": "$v"},
        "push": {"$push": "$v"}, "set": {"$addToSet": "$n"},
        "merged": {"$mergeObjects": "$o"}, "sd": {"$stdDevPop": "$n"},
        "firstN": {"$firstN": {"input": "$v", "n": 3}},
        "lastN": {"$lastN": {"input": "$v", "n": 2}},
        "top": {"$topN": {"n": 2, "sortBy": {"n": -1}, "output": "$_id"}},
        "maxN": {"$maxN": {"input": "$n", "n": 2}},
        "median": {"$median": {"input": "$n", "method": "approximate"}},
    }};
    let stages = vec![group.clone()];
    let whole = by_id(run(stages.clone(), spill_input()));
    assert_eq!(whole.len(), 40);
    let mut spilled_some = false;
    for max in [0, 1, 500, 5_000, 50_000, usize::MAX] {
        let vars = Variables {
            max_group_bytes: Some(max),
            ..Default::default()
        };
        let cut = run_segments(&stages, spill_input(), &vars);
        let held = cut
            .iter()
            .take_while(|d| d.get_i32("_id").is_ok_and(|k| k < 40))
            .count();
        spilled_some |= cut != whole;
        assert_eq!(by_id(cut), whole, "$group memory {max}");
        assert!(held <= 40);
    }
    assert!(spilled_some, "some limit spills groups");
}

/// With `allowDiskUse: false` a `$group` past its memory fails with mongod's 292; one
/// group's `$push` past 100 MiB fails with 146 whatever the operation allows.
#[test]
fn a_group_past_its_memory_fails_when_it_may_not_spill() {
    let stages = vec![doc! {"$group": {"_id": "$k", "all": {"$push": "$$ROOT"}}}];
    let p = Pipeline::parse(&stages, "test").unwrap();
    let run_under = |vars: &Variables| {
        p.run(
            Box::new(spill_input().into_iter().map(Ok)),
            &NoCollections,
            vars,
        )
    };
    let forbid = |max| Variables {
        forbid_disk_use: true,
        max_group_bytes: Some(max),
        ..Default::default()
    };
    let e = run_under(&forbid(2_000)).unwrap_err();
    assert_eq!(
        (e.code, e.code_name().as_str()),
        (292, "QueryExceededMemoryLimitNoDiskUseAllowed")
    );
    assert!(
        e.message.contains("Exceeded memory limit for $group"),
        "{}",
        e.message
    );
    assert_eq!(run_under(&forbid(1 << 30)).unwrap().len(), 40);
    // Allowed to spill, a run that cannot (this one, in memory) holds them all.
    let allowed = Variables {
        max_group_bytes: Some(2_000),
        ..Default::default()
    };
    assert_eq!(run_under(&allowed).unwrap().len(), 40);

    let big = "x".repeat(1 << 20);
    let input = (0..101).map(|i| doc! {"_id": i, "s": big.clone()});
    let p = Pipeline::parse(
        &[doc! {"$group": {"_id": null, "a": {"$push": "$s"}}}],
        "test",
    )
    .unwrap();
    let e = p
        .run(
            Box::new(input.map(Ok)),
            &NoCollections,
            &Variables::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, 146);
    assert_eq!(
        e.message,
        "$push used too much memory and cannot spill to disk. Memory limit: 104857600 bytes"
    );
}

/// A source whose `find_equal` finds, as an index would, the documents with a value
/// equal to one of the values at the field (a query's equality: through arrays), and
/// counts the reads it served so.
struct IndexedColls(Colls, std::cell::Cell<usize>);

impl CollectionSource for IndexedColls {
    fn scan(&self, db: &str, coll: &str) -> Result<Vec<Document>> {
        self.0.scan(db, coll)
    }

    fn find_equal(
        &self,
        db: &str,
        coll: &str,
        field: &str,
        values: &[Bson],
        _collator: Option<&Arc<crate::collation::Collator>>,
    ) -> Result<Option<Vec<Document>>> {
        let docs = self.0.scan(db, coll)?;
        self.1.set(self.1.get() + 1);
        Ok(Some(
            docs.into_iter()
                .filter(|d| {
                    let at = matcher_values(d, field);
                    values
                        .iter()
                        .any(|v| at.iter().any(|x| crate::compare::bson_eq_with(x, v, None)))
                })
                .collect(),
        ))
    }
}

/// A `$lookup` pipeline starting with a `$match` reads only what the `$match` keeps,
/// through the index (else by hash) when it is an `$expr` equality of a field and a
/// variable, and
/// gives what the pipeline over the whole foreign collection gives: numbers across
/// types, arrays at the field, nested paths, null and missing, array and document
/// variables (which the index does not serve).
#[test]
fn a_lookup_pipelines_leading_match_reads_only_what_it_keeps() {
    let foreign = vec![
        doc! {"_id": 0, "k": 1, "o": {"k": "a"}},
        doc! {"_id": 1, "k": 1.0},
        doc! {"_id": 2, "k": "a"},
        doc! {"_id": 3, "k": ["a", "b"], "o": [{"k": "a"}, {"k": 1}]},
        doc! {"_id": 4, "k": {"x": 1}},
        doc! {"_id": 5, "k": null},
        doc! {"_id": 6},
        doc! {"_id": 7, "k": [["a", "b"]], "o": {"k": ["a", "b"]}},
        doc! {"_id": 8, "k": "b"},
    ];
    let locals = vec![
        doc! {"_id": 0, "v": 1},
        doc! {"_id": 1, "v": 1.0},
        doc! {"_id": 2, "v": "a"},
        doc! {"_id": 3, "v": "b"},
        doc! {"_id": 4, "v": null},
        doc! {"_id": 5},
        doc! {"_id": 6, "v": ["a", "b"]},
        doc! {"_id": 7, "v": {"x": 1}},
        doc! {"_id": 8, "v": 2},
    ];
    let pipelines = vec![
        bson!([{"$match": {"$expr": {"$eq": ["$k", "$$v"]}}}]),
        bson!([{"$match": {"$expr": {"$and": [{"$eq": ["$$v", "$k"]}, {"$ne": ["$_id", 3]}]}}},
               {"$project": {"_id": 1}}]),
        bson!([{"$match": {"$expr": {"$eq": ["$o.k", "$$v"]}}}]),
        bson!([{"$match": {"k": {"$exists": true}, "$expr": {"$eq": ["$k", "$$v"]}}}, {"$limit": 1}]),
        bson!([{"$match": {"k": {"$type": "string"}}}, {"$match": {"$expr": {"$eq": ["$k", "$$v"]}}}]),
        bson!([{"$project": {"k": 1}}, {"$match": {"$expr": {"$eq": ["$k", "$$v"]}}}]),
    ];
    let mut colls = HashMap::new();
    colls.insert("test.f".to_string(), foreign.clone());
    for sub in pipelines {
        let Bson::Array(sub_stages) = &sub else {
            unreachable!()
        };
        let sub_stages: Vec<Document> = sub_stages
            .iter()
            .map(|s| s.as_document().unwrap().clone())
            .collect();
        let lookup = vec![
            doc! {"$lookup": {"from": "f", "let": {"v": "$v"}, "pipeline": sub.clone(), "as": "m"}},
        ];
        let plain = run_with(lookup.clone(), locals.clone(), &Colls(colls.clone())).unwrap();
        let indexed_source = IndexedColls(Colls(colls.clone()), std::cell::Cell::new(0));
        let indexed = run_with(lookup, locals.clone(), &indexed_source).unwrap();
        for (i, local) in locals.iter().enumerate() {
            // The oracle: the pipeline over the whole collection, `v` bound.
            let mut vars = Variables::default();
            vars.set("v", local.get("v").cloned().unwrap_or(Bson::Null));
            let p = Pipeline::parse(&sub_stages, "test").unwrap();
            let whole = p
                .run(
                    Box::new(foreign.clone().into_iter().map(Ok)),
                    &NoCollections,
                    &vars,
                )
                .unwrap();
            let expected = Bson::Array(whole.into_iter().map(Bson::Document).collect());
            assert_eq!(plain[i].get("m"), Some(&expected), "{sub:?} for {local:?}");
            assert_eq!(
                indexed[i].get("m"),
                Some(&expected),
                "{sub:?} for {local:?}, indexed"
            );
        }
        // The index served the five locals with a plain value (not null, missing, the
        // array or the document) when the pipeline starts with the equality.
        let by_index = sub_stages[0]
            .get_document("$match")
            .is_ok_and(|m| m.contains_key("$expr"));
        let expected_reads = if by_index { 5 } else { 0 };
        assert_eq!(indexed_source.1.get(), expected_reads, "{sub:?}");
    }
}

/// A `$lookup`'s index of the foreign documents finds what comparing each foreign
/// document finds (the linear search it replaced), in the collection's order: numbers
/// across types, arrays, nested paths, null, missing and undefined, documents,
/// strings under a collation.
#[test]
fn a_lookups_foreign_index_matches_the_linear_search() {
    use crate::collation::Collator;
    use stages::ForeignIndex;
    let foreign = vec![
        doc! {"_id": 0, "k": 1},
        doc! {"_id": 1, "k": 1.0},
        doc! {"_id": 2, "k": bson::Decimal128::from_bytes([0; 16])},
        doc! {"_id": 3, "k": [1, 2, [3]]},
        doc! {"_id": 4},
        doc! {"_id": 5, "k": null},
        doc! {"_id": 6, "k": Bson::Undefined},
        doc! {"_id": 7, "k": {"a": 1}},
        doc! {"_id": 8, "k": "ABC"},
        doc! {"_id": 9, "k": "abc"},
        doc! {"_id": 10, "k": [{"a": 1}, "x"]},
        doc! {"_id": 11, "k": 0},
        doc! {"_id": 12, "k": -0.0},
        doc! {"_id": 13, "k": f64::NAN},
        doc! {"_id": 14, "k": [null]},
        doc! {"_id": 15, "k": []},
    ];
    let linear = |locals: &[Bson], collator: Option<&Collator>| -> Vec<usize> {
        foreign
            .iter()
            .enumerate()
            .filter(|(_, fd)| {
                let fvals = matcher_values(fd, "k");
                locals.iter().any(|lv| {
                    (matches!(lv, Bson::Null)
                        && (fvals.is_empty()
                            || fvals
                                .iter()
                                .any(|f| matches!(f, Bson::Null | Bson::Undefined))))
                        || fvals
                            .iter()
                            .any(|f| crate::compare::bson_eq_with(f, lv, collator))
                })
            })
            .map(|(i, _)| i)
            .collect()
    };
    let strength2 = Collator::parse(&doc! {"locale": "en", "strength": 2})
        .unwrap()
        .expect("a collation");
    for collator in [None, Some(strength2.as_ref())] {
        let index = ForeignIndex::new(&foreign, "k", collator);
        let locals: Vec<Vec<Bson>> = vec![
            vec![Bson::Int64(1)],
            vec![Bson::Null],
            vec![Bson::Undefined],
            vec![Bson::Double(3.0)],
            vec![bson!([3])],
            vec![bson!({"a": 1})],
            vec![Bson::String("abc".into())],
            vec![Bson::String("x".into()), Bson::Int32(2)],
            vec![Bson::Double(0.0)],
            vec![Bson::Double(f64::NAN)],
            vec![bson!([])],
            vec![Bson::Int32(42)],
        ];
        // `$graphLookup`'s level: an equal value, or the field missing for a null.
        let graph = |frontier: &[Bson]| -> Vec<usize> {
            foreign
                .iter()
                .enumerate()
                .filter(|(_, fd)| {
                    let tvals = matcher_values(fd, "k");
                    frontier.iter().any(|f| {
                        tvals
                            .iter()
                            .any(|t| crate::compare::bson_eq_with(t, f, collator))
                            || (matches!(f, Bson::Null) && tvals.is_empty())
                    })
                })
                .map(|(i, _)| i)
                .collect()
        };
        for l in &locals {
            let found = index.matches(l, collator);
            assert_eq!(found, linear(l, collator), "{l:?} under {collator:?}");
            assert_eq!(
                index.reached(l, collator),
                graph(l),
                "{l:?} under {collator:?}"
            );
        }
    }
}

//! Property tests: every accumulator over random `documents` and `range` windows of
//! random partitions, against a straightforward evaluation over the sorted partition
//! (the window's documents cut out by their positions or sort values, then folded by
//! a `$group` of their own).

use crate::expr::Variables;
use crate::pipeline::{NoCollections, Pipeline};
use bson::{doc, Bson, Document};

/// Accumulators tried over windows.
const ACCUMULATORS: &[&str] = &[
    "$sum",
    "$avg",
    "$min",
    "$max",
    "$push",
    "$addToSet",
    "$stdDevPop",
    "$stdDevSamp",
    "$count",
    "$first",
    "$last",
];
const CASES: usize = 400;
const MAX_DOCS: u64 = 24;

/// xorshift64*: a fixed seed, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn offset(&mut self) -> i64 {
        self.below(9) as i64 - 4
    }
}

/// A value to accumulate: numbers of each width, strings, null, arrays, or missing.
fn random_value(rng: &mut Rng) -> Option<Bson> {
    Some(match rng.below(9) {
        0 => Bson::Int32(rng.below(100) as i32 - 50),
        1 => Bson::Int64(rng.below(1000) as i64),
        2 => Bson::Double((rng.below(1000) as f64) / 8.0),
        3 => Bson::String(format!("s{}", rng.below(4))),
        4 => Bson::Null,
        5 => Bson::Array(vec![Bson::Int32(rng.below(3) as i32)]),
        6 => return None,
        _ => Bson::Int32(rng.below(5) as i32),
    })
}

/// Integers only (Int32 near its limits, so sums turn Int64, and Int64), with values the
/// accumulators pass over: the partitions the sliding integer sum takes.
fn random_integer(rng: &mut Rng) -> Option<Bson> {
    Some(match rng.below(6) {
        0 => Bson::Int32(i32::MAX - rng.below(3) as i32),
        1 => Bson::Int64(rng.below(1 << 40) as i64 - (1 << 39)),
        2 => Bson::Null,
        3 => return None,
        4 => Bson::String(format!("s{}", rng.below(4))),
        _ => Bson::Int32(rng.below(200) as i32 - 100),
    })
}

/// How values are drawn, and the most documents a case has.
type Values = (fn(&mut Rng) -> Option<Bson>, u64);

/// Documents with a partition key (sometimes missing), a sort value with ties, a value.
fn random_docs(rng: &mut Rng, (value, max_docs): Values) -> Vec<Document> {
    (0..rng.below(max_docs + 1))
        .map(|i| {
            let mut d = doc! {"_id": i as i32, "s": rng.below(12) as i32};
            match rng.below(4) {
                0 => {}
                1 => {
                    d.insert("p", Bson::Null);
                }
                k => {
                    d.insert("p", k as i32);
                }
            }
            if let Some(v) = value(rng) {
                d.insert("v", v);
            }
            d
        })
        .collect()
}

/// A bound: "unbounded", "current" or an offset.
fn random_bound(rng: &mut Rng) -> Bson {
    match rng.below(4) {
        0 => Bson::String("unbounded".into()),
        1 => Bson::String("current".into()),
        _ => Bson::Int32(rng.offset() as i32),
    }
}

/// A lower and an upper bound in order ("current" counting as 0).
fn random_bounds(rng: &mut Rng) -> (Bson, Bson) {
    loop {
        let (lo, hi) = (random_bound(rng), random_bound(rng));
        let at = |b: &Bson| match b {
            Bson::Int32(i) => Some(*i as i64),
            Bson::String(s) if s == "current" => Some(0),
            _ => None,
        };
        let ordered = match (at(&lo), at(&hi)) {
            (Some(a), Some(b)) => a <= b,
            _ => true,
        };
        if ordered {
            return (lo, hi);
        }
    }
}

fn run(stages: Vec<Document>, docs: Vec<Document>) -> Vec<Document> {
    Pipeline::parse(&stages, "test")
        .unwrap()
        .run(
            Box::new(docs.into_iter().map(Ok)),
            &NoCollections,
            &Variables::default(),
        )
        .unwrap()
}

/// The input's partitions (missing and null together), each stably sorted by `s`.
fn sorted_partitions(docs: &[Document]) -> Vec<Vec<Document>> {
    let key = |d: &Document| d.get("p").cloned().unwrap_or(Bson::Null);
    let mut docs = docs.to_vec();
    docs.sort_by(|a, b| {
        crate::compare::cmp_bson(&key(a), &key(b))
            .then_with(|| crate::compare::cmp_bson(a.get("s").unwrap(), b.get("s").unwrap()))
    });
    let mut parts: Vec<Vec<Document>> = Vec::new();
    for d in docs {
        match parts.last_mut() {
            Some(p) if key(&p[0]) == key(&d) => p.push(d),
            _ => parts.push(vec![d]),
        }
    }
    parts
}

/// What the accumulator gives over an empty window.
fn empty_window(acc: &str) -> Bson {
    match acc {
        "$sum" | "$count" => Bson::Int32(0),
        "$push" | "$addToSet" => Bson::Array(Vec::new()),
        _ => Bson::Null,
    }
}

/// The accumulator over `window` by itself: `$first`/`$last` read the end document (a
/// missing value stays missing), the rest are a `$group` of the window's documents.
fn fold(acc: &str, window: &[Document]) -> Option<Bson> {
    if window.is_empty() {
        return Some(empty_window(acc));
    }
    match acc {
        "$first" => return window[0].get("v").cloned(),
        "$last" => return window[window.len() - 1].get("v").cloned(),
        _ => {}
    }
    let arg = if acc == "$count" {
        Bson::Document(Document::new())
    } else {
        Bson::String("$v".into())
    };
    let group = doc! {"$group": {"_id": Bson::Null, "w": {acc: arg}}};
    run(vec![group], window.to_vec())[0].get("w").cloned()
}

/// The positions of a `documents` window around `i` in a partition of `n`, by definition.
fn documents_window(lo: &Bson, hi: &Bson, i: usize, n: usize) -> std::ops::Range<usize> {
    let at = |b: &Bson, unbounded: i64| match b {
        Bson::Int32(k) => i as i64 + *k as i64,
        Bson::String(s) if s == "current" => i as i64,
        _ => unbounded,
    };
    let start = at(lo, 0).max(0);
    let end = (at(hi, n as i64 - 1) + 1).min(n as i64);
    if start >= end {
        0..0
    } else {
        start as usize..end as usize
    }
}

/// The positions of a `range` window around `i`: sort values within `[s+lo, s+hi]`,
/// "current" meaning the current document's own position.
fn range_window(lo: &Bson, hi: &Bson, i: usize, part: &[Document]) -> std::ops::Range<usize> {
    let s = |j: usize| part[j].get_i32("s").unwrap() as i64;
    let start = match lo {
        Bson::Int32(k) => (0..part.len())
            .find(|&j| s(j) >= s(i) + *k as i64)
            .unwrap_or(part.len()),
        Bson::String(c) if c == "current" => i,
        _ => 0,
    };
    let end = match hi {
        Bson::Int32(k) => (0..part.len())
            .rev()
            .find(|&j| s(j) <= s(i) + *k as i64)
            .map_or(0, |j| j + 1),
        Bson::String(c) if c == "current" => i + 1,
        _ => part.len(),
    };
    if start >= end {
        0..0
    } else {
        start..end
    }
}

/// Runs one random case of `kind` ("documents" or "range") and checks every output.
fn check_case(rng: &mut Rng, case: usize, kind: &str, values: Values) {
    let docs = random_docs(rng, values);
    let acc = ACCUMULATORS[rng.below(ACCUMULATORS.len() as u64) as usize];
    let (lo, hi) = random_bounds(rng);
    let arg = if acc == "$count" {
        Bson::Document(Document::new())
    } else {
        Bson::String("$v".into())
    };
    let spec = doc! {acc: arg, "window": {kind: [lo.clone(), hi.clone()]}};
    let stage = doc! {"$setWindowFields": {
    "partitionBy": "$p", "sortBy": {"s": 1}, "output": {"w": spec.clone()}}};
    let out = run(vec![stage], docs.clone());
    let mut expected = Vec::new();
    for part in sorted_partitions(&docs) {
        for i in 0..part.len() {
            let window = match kind {
                "documents" => documents_window(&lo, &hi, i, part.len()),
                _ => range_window(&lo, &hi, i, &part),
            };
            let mut d = part[i].clone();
            if let Some(v) = fold(acc, &part[window]) {
                d.insert("w", v);
            }
            expected.push(d);
        }
    }
    assert_eq!(out, expected, "case {case}: {spec:?} over {docs:?}");
}

#[test]
fn accumulators_over_random_document_windows_match_the_oracle() {
    let mut rng = Rng(0x5EED_0001);
    for case in 0..CASES {
        check_case(&mut rng, case, "documents", (random_value, MAX_DOCS));
    }
}

#[test]
fn accumulators_over_random_range_windows_match_the_oracle() {
    let mut rng = Rng(0x5EED_0002);
    for case in 0..CASES {
        check_case(&mut rng, case, "range", (random_value, MAX_DOCS));
    }
}

/// Longer partitions of integers: the sliding windows of `$sum`, `$count`, `$avg`,
/// `$min` and `$max` (removed as they leave) against the fold.
#[test]
fn sliding_accumulators_over_long_integer_partitions_match_the_oracle() {
    let mut rng = Rng(0x5EED_0003);
    for case in 0..CASES / 4 {
        let kind = if case % 2 == 0 { "documents" } else { "range" };
        check_case(&mut rng, case, kind, (random_integer, 4 * MAX_DOCS));
    }
}

#[test]
fn every_group_accumulator_is_a_window_function_or_refused_by_name() {
    // $mergeObjects and $accumulator are $group's but not window functions in 7.0.
    for name in ["$mergeObjects", "$accumulator", "$nope"] {
        let stage = doc! {"$setWindowFields": {"output": {"w": {name: "$v"}}}};
        let e = Pipeline::parse(&[stage], "test").unwrap_err();
        assert_eq!(e.code, 9, "{name}");
        assert_eq!(e.message, format!("Unrecognized window function, {name}"));
    }
}

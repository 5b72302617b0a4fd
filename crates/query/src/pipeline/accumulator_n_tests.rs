//! `$group`'s N-accumulators and quantiles (pipeline/accumulator_n.rs) against their
//! definitions on random inputs, and mongod's tie rules.

use super::group::{run_group, AccSpec};
use crate::expr::{Expr, Variables};
use bson::{bson, doc, Bson, Document};

/// A small deterministic generator (xorshift64*) for the randomized comparisons.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// A number in `lo..hi`.
    fn below(&mut self, lo: i64, hi: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33;
        lo + (r % (hi - lo) as u64) as i64
    }
}

/// Runs one accumulator over `docs` in a single group and returns its value.
fn group_value(acc: Document, docs: &[Document]) -> Bson {
    let spec = AccSpec::parse("r", &Bson::Document(acc)).unwrap();
    let out = run_group(
        &Expr::Const(Bson::Null),
        &[spec],
        docs.to_vec(),
        &Variables::default(),
    )
    .unwrap();
    out[0].get("r").cloned().unwrap()
}

/// Documents `{i, k}` with small random keys (many ties).
fn random_docs(rng: &mut Rng) -> Vec<Document> {
    let len = rng.below(1, 30) as i32;
    (0..len)
        .map(|i| doc! {"i": i, "k": rng.below(0, 6) as i32})
        .collect()
}

fn ints(v: &Bson) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i32().unwrap())
        .collect()
}

/// `$topN` against its definition: a stable sort by the key, the first n outputs.
#[test]
fn top_n_is_the_head_of_a_stable_sort() {
    let mut rng = Rng::new(31);
    for _ in 0..300 {
        let docs = random_docs(&mut rng);
        let n = rng.below(1, 8) as i32;
        let desc = rng.below(0, 2) == 1;
        let dir = if desc { -1 } else { 1 };
        let got = group_value(
            doc! {"$topN": {"output": "$i", "sortBy": {"k": dir}, "n": n}},
            &docs,
        );
        let mut sorted = docs.clone();
        sorted.sort_by_key(|d| {
            let k = d.get_i32("k").unwrap();
            if desc {
                -k
            } else {
                k
            }
        });
        let want: Vec<i32> = sorted
            .iter()
            .take(n as usize)
            .map(|d| d.get_i32("i").unwrap())
            .collect();
        assert_eq!(ints(&got), want, "docs {docs:?} n {n} dir {dir}");
    }
}

/// `$minN`/`$maxN` against sorting every non-null value.
#[test]
fn min_max_n_are_the_ends_of_the_sorted_values() {
    let mut rng = Rng::new(7);
    for _ in 0..300 {
        let docs = random_docs(&mut rng);
        let n = rng.below(1, 8) as usize;
        let mut keys: Vec<i32> = docs.iter().map(|d| d.get_i32("k").unwrap()).collect();
        keys.sort();
        let min = group_value(doc! {"$minN": {"input": "$k", "n": n as i32}}, &docs);
        assert_eq!(ints(&min), keys.iter().take(n).copied().collect::<Vec<_>>());
        let max = group_value(doc! {"$maxN": {"input": "$k", "n": n as i32}}, &docs);
        assert_eq!(
            ints(&max),
            keys.iter().rev().take(n).copied().collect::<Vec<_>>()
        );
    }
}

/// `$percentile` against the definition of a discrete percentile: the smallest
/// sample with at least `p * count` samples at or below it.
#[test]
fn percentiles_match_their_definition() {
    let mut rng = Rng::new(5);
    for _ in 0..300 {
        let len = rng.below(1, 40);
        let xs: Vec<f64> = (0..len).map(|_| rng.below(-50, 50) as f64).collect();
        let ps: Vec<f64> = (0..4).map(|_| rng.below(0, 101) as f64 / 100.0).collect();
        let docs: Vec<Document> = xs.iter().map(|x| doc! {"x": x}).collect();
        let got = group_value(
            doc! {"$percentile": {"input": "$x", "p": ps.clone(), "method": "approximate"}},
            &docs,
        );
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        let want: Vec<Bson> = ps
            .iter()
            .map(|p| {
                let at_or_below = |v: f64| sorted.iter().filter(|x| **x <= v).count() as f64;
                let v = *sorted
                    .iter()
                    .find(|v| at_or_below(**v) >= p * len as f64)
                    .unwrap();
                Bson::Double(v)
            })
            .collect();
        assert_eq!(got, Bson::Array(want), "xs {xs:?} ps {ps:?}");
    }
}

#[test]
fn bottom_keeps_the_first_of_equal_keys_and_evicts_the_first_of_the_least() {
    let docs = |keys: &[i32]| -> Vec<Document> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| doc! {"i": i as i32, "k": k})
            .collect()
    };
    let bottom = |keys: &[i32], n: i32| {
        ints(&group_value(
            doc! {"$bottomN": {"output": "$i", "sortBy": {"k": 1}, "n": n}},
            &docs(keys),
        ))
    };
    // An equal key does not displace the one kept.
    assert_eq!(bottom(&[5, 5], 1), vec![0]);
    // A greater key evicts the earliest of the least keys.
    assert_eq!(bottom(&[5, 5, 6], 2), vec![1, 2]);
    assert_eq!(bottom(&[3, 5, 5, 4], 2), vec![1, 2]);
}

#[test]
fn infinities_and_nan_in_percentiles() {
    let docs: Vec<Document> = [f64::NEG_INFINITY, 1.0, f64::NAN, 2.0, f64::INFINITY]
        .iter()
        .map(|x| doc! {"x": x})
        .collect();
    let got = group_value(
        doc! {"$percentile": {"input": "$x", "p": [0.0, 0.5, 1.0], "method": "approximate"}},
        &docs,
    );
    assert_eq!(got, bson!([f64::NEG_INFINITY, 1.0, f64::INFINITY]));
}

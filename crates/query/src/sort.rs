//! Sort specifications (`{a: 1, b: -1}`) and MongoDB's sort order over documents:
//! an array sorts by its smallest element ascending and its largest descending,
//! an empty array sorts below null, a missing field sorts as null, and dotted
//! paths expand arrays of documents.

use crate::collation::Collator;
use crate::compare::{as_f64, cmp_bson_with};
use crate::error::{Error, Result};
use crate::path::parse_index;
use bson::{Bson, Document};
use std::cmp::Ordering;
use std::sync::Arc;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortSpec {
    /// (path, descending)
    pub fields: Vec<(String, bool)>,
    /// The collation strings sort under (None: by their bytes).
    pub collator: Option<Arc<Collator>>,
}

fn bad_order() -> Error {
    Error::location(
        15975,
        "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
    )
}

impl SortSpec {
    pub fn parse(spec: &Document) -> Result<SortSpec> {
        let mut fields = Vec::with_capacity(spec.len());
        for (k, v) in spec {
            if k.is_empty() {
                return Err(Error::location(
                    40352,
                    "FieldPath cannot be constructed with empty string",
                ));
            }
            let desc = match v {
                Bson::Document(d) => {
                    if d.len() == 1 && d.get_str("$meta") == Ok("textScore") {
                        // Highest score first, read from the score the scan attached.
                        fields.push((crate::text::TEXT_SCORE_FIELD.to_string(), true));
                        continue;
                    }
                    if d.contains_key("$meta") {
                        return Err(Error::bad_value(format!(
                            "$meta sort ({}) is not supported",
                            d.get("$meta").map(|m| m.to_string()).unwrap_or_default()
                        )));
                    }
                    return Err(Error::location(
                        17312,
                        "$meta is the only expression supported by $sort right now",
                    ));
                }
                _ => match as_f64(v) {
                    Some(n) if n > 0.0 => false,
                    Some(n) if n < 0.0 => true,
                    _ => return Err(bad_order()),
                },
            };
            fields.push((k.clone(), desc));
        }
        Ok(SortSpec {
            fields,
            collator: None,
        })
    }

    /// The same sort under a collation.
    pub fn with_collator(mut self, collator: Option<Arc<Collator>>) -> SortSpec {
        self.collator = collator;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        let coll = self.collator.as_deref();
        for (path, desc) in &self.fields {
            let ka = sort_key_value_with(a, path, *desc, coll);
            let kb = sort_key_value_with(b, path, *desc, coll);
            let o = cmp_bson_with(&ka, &kb, coll);
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    pub fn key(&self, doc: &Document) -> Vec<Bson> {
        let coll = self.collator.as_deref();
        self.fields
            .iter()
            .map(|(p, desc)| sort_key_value_with(doc, p, *desc, coll))
            .collect()
    }

    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        let coll = self.collator.as_deref();
        for (i, (_, desc)) in self.fields.iter().enumerate() {
            let o = match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) => cmp_bson_with(x, y, coll),
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            };
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

/// Collects the values a dotted path reaches, expanding arrays of documents one
/// level per component (numeric components also index arrays). `None` = missing.
fn collect<'a>(cur: &'a Bson, parts: &[&str], out: &mut Vec<Option<&'a Bson>>) {
    if parts.is_empty() {
        out.push(Some(cur));
        return;
    }
    match cur {
        Bson::Document(d) => match d.get(parts[0]) {
            Some(v) => collect(v, &parts[1..], out),
            None => out.push(None),
        },
        Bson::Array(arr) => {
            if let Some(i) = parse_index(parts[0]) {
                if let Some(e) = arr.get(i) {
                    collect(e, &parts[1..], out);
                }
            }
            for e in arr {
                if let Bson::Document(_) = e {
                    collect(e, parts, out);
                }
            }
        }
        _ => out.push(None),
    }
}

/// The single value a document sorts by for `path`: the minimum (ascending) or
/// maximum (descending) of all candidate values.
pub fn sort_key_value(doc: &Document, path: &str, desc: bool) -> Bson {
    sort_key_value_with(doc, path, desc, None)
}

/// `sort_key_value` with strings compared under a collation.
pub fn sort_key_value_with(
    doc: &Document,
    path: &str,
    desc: bool,
    coll: Option<&Collator>,
) -> Bson {
    let parts: Vec<&str> = path.split('.').collect();
    let mut leaves = Vec::new();
    match doc.get(parts[0]) {
        Some(v) => collect(v, &parts[1..], &mut leaves),
        None => leaves.push(None),
    }
    let mut cands: Vec<Bson> = Vec::new();
    for l in leaves {
        match l {
            None => cands.push(Bson::Null),
            Some(Bson::Array(a)) if a.is_empty() => cands.push(Bson::Undefined),
            Some(Bson::Array(a)) => cands.extend(a.iter().cloned()),
            Some(v) => cands.push(v.clone()),
        }
    }
    let best = if desc {
        cands.into_iter().max_by(|x, y| cmp_bson_with(x, y, coll))
    } else {
        cands.into_iter().min_by(|x, y| cmp_bson_with(x, y, coll))
    };
    best.unwrap_or(Bson::Null)
}

/// Documents kept in sort order, ties in the order they came (a stable sort), or with
/// a bound only the first `k`, holding at most `2k` at a time: mongod's top-k sort, for
/// a `$sort` followed by a `$limit` and a find's in-memory sort with a limit.
/// `sort({x: -1}).limit(10)` over a million documents holds twenty, not a million.
pub struct TopK {
    spec: SortSpec,
    /// How many documents the result keeps; None: all.
    keep: Option<usize>,
    keyed: Vec<(Vec<Bson>, Document)>,
}

/// The fewest documents a bounded [`TopK`] holds before it compacts (a small `k` does
/// not sort every few documents).
const TOP_K_MIN_HELD: usize = 64;

impl TopK {
    pub fn new(spec: SortSpec, keep: Option<usize>) -> TopK {
        TopK {
            spec,
            keep,
            keyed: Vec::new(),
        }
    }

    pub fn push(&mut self, doc: Document) {
        self.keyed.push((self.spec.key(&doc), doc));
        if let Some(k) = self.keep {
            if self.keyed.len() >= k.saturating_mul(2).max(TOP_K_MIN_HELD) {
                // A document past the first k now is past them for good: every later
                // one that sorts before it only pushes it further back.
                self.sort_and_keep(k);
            }
        }
    }

    fn sort_and_keep(&mut self, k: usize) {
        let spec = &self.spec;
        self.keyed.sort_by(|a, b| spec.compare_keys(&a.0, &b.0));
        self.keyed.truncate(k);
    }

    pub fn finish(mut self) -> Vec<Document> {
        self.sort_and_keep(self.keep.unwrap_or(usize::MAX));
        self.keyed.into_iter().map(|(_, d)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sorted(spec: Document, docs: Vec<Document>) -> Vec<i32> {
        let s = SortSpec::parse(&spec).unwrap();
        let mut docs = docs;
        docs.sort_by(|a, b| s.compare(a, b));
        docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
    }

    #[test]
    fn collation_orders_strings_and_array_candidates() {
        let c = crate::collation::Collator::parse(&doc! {"locale": "en"}).unwrap();
        let s = SortSpec::parse(&doc! {"s": 1}).unwrap().with_collator(c);
        let mut docs = vec![
            doc! {"_id": 1, "s": "b"},
            doc! {"_id": 2, "s": "A"},
            doc! {"_id": 3, "s": "a"},
            doc! {"_id": 4, "s": ["B", "c"]},
        ];
        docs.sort_by(|a, b| s.compare(a, b));
        let order: Vec<i32> = docs.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        assert_eq!(order, vec![3, 2, 1, 4]);
        assert_eq!(sorted(doc! {"s": 1}, docs), vec![2, 4, 3, 1]);
    }

    #[test]
    fn parse_accepts_numbers_and_rejects_others() {
        let s =
            SortSpec::parse(&doc! {"a": 1, "b": -1, "c": 2.5, "d": -0.5_f64, "e": 1i64}).unwrap();
        assert_eq!(
            s.fields,
            vec![
                ("a".to_string(), false),
                ("b".to_string(), true),
                ("c".to_string(), false),
                ("d".to_string(), true),
                ("e".to_string(), false)
            ]
        );
        assert_eq!(SortSpec::parse(&doc! {"a": 0}).unwrap_err().code, 15975);
        assert_eq!(SortSpec::parse(&doc! {"a": "x"}).unwrap_err().code, 15975);
        assert_eq!(SortSpec::parse(&doc! {"a": true}).unwrap_err().code, 15975);
        assert_eq!(
            SortSpec::parse(&doc! {"a": {"$meta": "searchScore"}})
                .unwrap_err()
                .code,
            2
        );
        assert!(SortSpec::parse(&doc! {}).unwrap().fields.is_empty());
        assert_eq!(
            SortSpec::parse(&doc! {"$natural": 1}).unwrap().fields[0].0,
            "$natural"
        );
    }

    #[test]
    fn sorts_scalars_across_types_and_numeric_widths() {
        let docs = vec![
            doc! {"_id": 1, "a": "str"},
            doc! {"_id": 2, "a": 2.5},
            doc! {"_id": 3, "a": 1i64},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": Bson::Null},
            doc! {"_id": 6, "a": 3},
            doc! {"_id": 7, "a": true},
        ];
        let asc = sorted(doc! {"a": 1}, docs.clone());
        assert_eq!(&asc[2..], &[3, 2, 6, 1, 7]);
        assert!(asc[..2].contains(&4) && asc[..2].contains(&5));
        let desc = sorted(doc! {"a": -1}, docs);
        assert_eq!(&desc[..5], &[7, 1, 6, 2, 3]);
    }

    #[test]
    fn arrays_sort_by_min_ascending_and_max_descending() {
        let docs = vec![
            doc! {"_id": 1, "a": [1, 10]},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3, "a": [3, 4]},
            doc! {"_id": 4, "a": []},
            doc! {"_id": 5},
        ];
        assert_eq!(sorted(doc! {"a": 1}, docs.clone()), vec![4, 5, 1, 3, 2]);
        assert_eq!(sorted(doc! {"a": -1}, docs), vec![1, 2, 3, 5, 4]);
    }

    #[test]
    fn dotted_paths_expand_arrays_of_documents() {
        let docs = vec![
            doc! {"_id": 1, "a": [{"b": 7}, {"b": 2}]},
            doc! {"_id": 2, "a": {"b": 5}},
            doc! {"_id": 3, "a": [{"b": 3}, {"c": 1}]},
        ];
        // doc 3 has a missing b in one element -> null candidate
        assert_eq!(sorted(doc! {"a.b": 1}, docs.clone()), vec![3, 1, 2]);
        assert_eq!(sorted(doc! {"a.b": -1}, docs), vec![1, 2, 3]);
        let d = doc! {"a": [[1, 2], 0]};
        assert_eq!(sort_key_value(&d, "a", false), Bson::Int32(0));
        assert_eq!(sort_key_value(&d, "a", true), bson::bson!([1, 2]));
        assert_eq!(
            sort_key_value(&doc! {"a": [4, 9]}, "a.1", false),
            Bson::Int32(9)
        );
    }

    #[test]
    fn multi_field_sort_and_keys() {
        let s = SortSpec::parse(&doc! {"a": 1, "b": -1}).unwrap();
        let x = doc! {"a": 1, "b": 1};
        let y = doc! {"a": 1, "b": 2};
        let z = doc! {"a": 0, "b": 0};
        assert_eq!(s.compare(&x, &y), Ordering::Greater);
        assert_eq!(s.compare(&z, &x), Ordering::Less);
        assert_eq!(s.compare(&x, &x), Ordering::Equal);
        let (kx, ky) = (s.key(&x), s.key(&y));
        assert_eq!(kx, vec![Bson::Int32(1), Bson::Int32(1)]);
        assert_eq!(s.compare_keys(&kx, &ky), Ordering::Greater);
        assert_eq!(
            s.compare_keys(&s.key(&doc! {"a": 1.0, "b": 1i64}), &kx),
            Ordering::Equal
        );
    }

    /// Bounded or not, a TopK gives the full stable sort's first `k`: ties keep the
    /// order they came in, across many compactions.
    #[test]
    fn a_bounded_sort_keeps_what_a_full_sort_would() {
        let sort = SortSpec::parse(&doc! {"a": -1}).unwrap();
        // 1,000 documents, keys 0..37 in a scrambled order, many ties.
        let docs: Vec<Document> = (0..1000i64)
            .map(|i| doc! {"a": (i * 7919) % 37, "i": i})
            .collect();
        let mut full = docs.clone();
        full.sort_by(|a, b| sort.compare(a, b));
        for k in [1usize, 5, 63, 64, 65, 200, 999, 1000, 5000] {
            let mut top = TopK::new(sort.clone(), Some(k));
            docs.iter().cloned().for_each(|d| top.push(d));
            assert_eq!(top.finish(), full[..k.min(full.len())].to_vec(), "k = {k}");
        }
        let mut all = TopK::new(sort, None);
        docs.iter().cloned().for_each(|d| all.push(d));
        assert_eq!(all.finish(), full);
    }

    /// A bounded TopK never holds more than twice what it keeps (or its minimum).
    #[test]
    fn a_bounded_sort_holds_at_most_twice_what_it_keeps() {
        let sort = SortSpec::parse(&doc! {"a": 1}).unwrap();
        let mut top = TopK::new(sort, Some(100));
        for i in 0..10_000i64 {
            top.push(doc! {"a": -i});
            assert!(top.keyed.len() < 200, "{} held after {i}", top.keyed.len());
        }
        let got = top.finish();
        assert_eq!(got.len(), 100);
        assert_eq!(got[0], doc! {"a": -9999i64});
    }
}

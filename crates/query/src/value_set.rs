//! A set of BSON values as a query's equality sees them (`compare::bson_eq_with` under a
//! collation): `distinct`'s values, each kept once, the first one met.
//!
//! Values are bucketed by a hash of what their equality compares (canonical type, then
//! a number as its `f64`, a string as its collation key, an ObjectId, date or binary as
//! its bytes), and compared with the equality itself within a bucket only. Two equal
//! values always hash alike (numbers equal across types are the same `f64`; NaNs and
//! zeros are made one), so the set is the one a linear search gives. Documents and
//! arrays hash by their type alone (their equality walks them whole), so a bucket of
//! them is searched linearly. Before, every value was compared with every value kept:
//! `distinct` over a field of 100,000 distinct values made 5 · 10⁹ comparisons.

use crate::collation::Collator;
use crate::compare::bson_eq_with;
use crate::types::{as_f64, canonical_type};
use bson::Bson;
use std::collections::hash_map::{DefaultHasher, HashMap};
use std::hash::{Hash, Hasher};

pub struct ValueSet<'c> {
    collator: Option<&'c Collator>,
    /// Positions in `values` by bucket hash.
    buckets: HashMap<u64, Vec<usize>>,
    values: Vec<Bson>,
}

impl<'c> ValueSet<'c> {
    pub fn new(collator: Option<&'c Collator>) -> ValueSet<'c> {
        ValueSet {
            collator,
            buckets: HashMap::new(),
            values: Vec::new(),
        }
    }

    /// Adds `v` unless an equal value is in the set; whether it was added.
    pub fn insert(&mut self, v: Bson) -> bool {
        let bucket = self
            .buckets
            .entry(bucket_hash(&v, self.collator))
            .or_default();
        if bucket
            .iter()
            .any(|&i| bson_eq_with(&self.values[i], &v, self.collator))
        {
            return false;
        }
        bucket.push(self.values.len());
        self.values.push(v);
        true
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values, in the order they were first added.
    pub fn into_values(self) -> Vec<Bson> {
        self.values
    }
}

/// A hash two values equal under `collator` (`bson_eq_with`) always share.
pub(crate) fn bucket_hash(v: &Bson, collator: Option<&Collator>) -> u64 {
    let mut h = DefaultHasher::new();
    canonical_type(v).hash(&mut h);
    match v {
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => {
            let f = as_f64(v).unwrap_or(f64::NAN);
            let f = if f.is_nan() {
                f64::NAN
            } else if f == 0.0 {
                0.0
            } else {
                f
            };
            f.to_bits().hash(&mut h);
        }
        Bson::String(s) | Bson::Symbol(s) => match collator {
            Some(c) => c.sort_key(s).hash(&mut h),
            None => s.hash(&mut h),
        },
        Bson::Binary(b) => {
            u8::from(b.subtype).hash(&mut h);
            b.bytes.hash(&mut h);
        }
        Bson::ObjectId(o) => o.bytes().hash(&mut h),
        Bson::Boolean(b) => b.hash(&mut h),
        Bson::DateTime(d) => d.timestamp_millis().hash(&mut h),
        Bson::Timestamp(t) => (t.time, t.increment).hash(&mut h),
        Bson::RegularExpression(r) => (&r.pattern, &r.options).hash(&mut h),
        Bson::JavaScriptCode(c) => c.hash(&mut h),
        // Documents, arrays, code with scope, DBPointers: by type alone.
        _ => {}
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Decimal128};
    use std::str::FromStr;

    /// The set a linear search under the same equality keeps.
    fn linear(values: &[Bson], collator: Option<&Collator>) -> Vec<Bson> {
        let mut kept: Vec<Bson> = Vec::new();
        for v in values {
            if !kept.iter().any(|k| bson_eq_with(k, v, collator)) {
                kept.push(v.clone());
            }
        }
        kept
    }

    fn values() -> Vec<Bson> {
        let oid = ObjectId::new();
        vec![
            Bson::Int32(1),
            Bson::Int64(1),
            Bson::Double(1.0),
            Bson::Decimal128(Decimal128::from_str("1.0").unwrap()),
            Bson::Double(-0.0),
            Bson::Int32(0),
            Bson::Double(f64::NAN),
            Bson::Decimal128(Decimal128::from_str("NaN").unwrap()),
            Bson::Int64(i64::MAX),
            Bson::Double(9.223372036854776e18),
            Bson::String("a".into()),
            Bson::Symbol("a".into()),
            Bson::String("A".into()),
            Bson::Null,
            Bson::Undefined,
            Bson::ObjectId(oid),
            Bson::ObjectId(oid),
            Bson::Boolean(true),
            Bson::Boolean(false),
            Bson::Document(doc! {"a": 1}),
            Bson::Document(doc! {"a": 1.0}),
            Bson::Document(doc! {"a": 2}),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::Array(vec![Bson::Int64(1)]),
            Bson::DateTime(bson::DateTime::from_millis(5)),
            Bson::DateTime(bson::DateTime::from_millis(5)),
            Bson::MinKey,
            Bson::MaxKey,
        ]
    }

    #[test]
    fn keeps_what_a_linear_search_keeps() {
        let case_insensitive = Collator::parse(&doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        let values = values();
        for collator in [None, Some(case_insensitive.as_ref())] {
            let mut set = ValueSet::new(collator);
            for v in &values {
                set.insert(v.clone());
            }
            // Compared as printed: NaN is not equal to itself as a `Bson`.
            assert_eq!(
                format!("{:?}", set.into_values()),
                format!("{:?}", linear(&values, collator))
            );
        }
    }

    #[test]
    fn many_distinct_numbers_and_strings() {
        let mut set = ValueSet::new(None);
        for i in 0..50_000 {
            assert!(set.insert(Bson::Int32(i)));
            assert!(set.insert(Bson::String(format!("s{i}"))));
        }
        for i in 0..50_000 {
            assert!(!set.insert(Bson::Double(f64::from(i))), "{i} as a double");
        }
        assert_eq!(set.len(), 100_000);
    }
}

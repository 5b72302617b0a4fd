//! When a partial index may answer a query: the index holds only the documents its
//! `partialFilterExpression` matches, so the planner may use it only when every
//! document the query matches also matches that filter. As mongod, we prove that from
//! the filters' shapes: each condition of the partial filter must follow from a
//! condition the query puts on the same field (`{a: 1}` or `{a: {$lte: 1}}` imply
//! `{a: {$lte: 1.5}}`; `{a: {$lte: 1.6}}` does not; a comparison with a non-null value
//! implies `{$exists: true}`). Anything else is not proven, and a
//! collection scan (or another index) answers instead.

use bson::{Bson, Document};
use std::cmp::Ordering;
use tailstream_query::compare::{canonical_type, cmp_bson};
use tailstream_query::matcher::{FieldBounds, Matcher};

/// True when the query's top-level conditions imply every condition of `partial`.
pub fn query_implies(partial_filter: &Document, query: &Matcher) -> bool {
    if !simple_conjunction(partial_filter) {
        return false;
    }
    let Ok(partial) = Matcher::new(partial_filter) else {
        return false;
    };
    let query_bounds = query.index_predicates();
    let mut must_exist = Vec::new();
    exists_fields(partial_filter, &mut must_exist);
    // A comparison with a non-null value only matches documents that have the field.
    let exists_ok = must_exist.iter().all(|field| {
        query_bounds
            .iter()
            .filter(|(f, _)| f == field)
            .any(|(_, b)| {
                let non_null =
                    |v: &Option<Bson>| v.as_ref().is_some_and(|v| !matches!(v, Bson::Null));
                non_null(&b.eq)
                    || b.in_values
                        .as_ref()
                        .is_some_and(|vs| vs.iter().all(|v| !matches!(v, Bson::Null)))
                    || non_null(&b.gt)
                    || non_null(&b.gte)
                    || non_null(&b.lt)
                    || non_null(&b.lte)
            })
    });
    exists_ok
        && partial.index_predicates().iter().all(|(field, needed)| {
            query_bounds
                .iter()
                .filter(|(f, _)| f == field)
                .any(|(_, have)| bounds_imply(have, needed))
        })
}

/// The fields a partial filter requires with `{$exists: true}`.
fn exists_fields(filter: &Document, out: &mut Vec<String>) {
    for (k, v) in filter {
        match v {
            Bson::Array(items) if k == "$and" => {
                for i in items {
                    if let Bson::Document(d) = i {
                        exists_fields(d, out);
                    }
                }
            }
            Bson::Document(ops) if ops.get("$exists").is_some() => out.push(k.clone()),
            _ => {}
        }
    }
}

/// A partial filter made only of comparisons on fields (ANDed), which
/// `index_predicates` captures completely.
fn simple_conjunction(filter: &Document) -> bool {
    filter.iter().all(|(k, v)| match (k.as_str(), v) {
        ("$and", Bson::Array(items)) => items
            .iter()
            .all(|i| matches!(i, Bson::Document(d) if simple_conjunction(d))),
        (k, _) if k.starts_with('$') => false,
        (_, Bson::Document(ops)) if ops.keys().next().is_some_and(|o| o.starts_with('$')) => {
            ops.iter().all(|(op, arg)| match op.as_str() {
                "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => {
                    !matches!(arg, Bson::Array(_) | Bson::RegularExpression(_))
                }
                // Only `{$exists: true}` (the usual "index the documents that have it").
                "$exists" => matches!(arg, Bson::Boolean(true) | Bson::Int32(1)),
                _ => false,
            })
        }
        (_, Bson::Array(_) | Bson::RegularExpression(_)) => false,
        _ => true,
    })
}

/// The values a field may take under `have` all satisfy `needed`.
fn bounds_imply(have: &FieldBounds, needed: &FieldBounds) -> bool {
    // The query's possible values: one, a list, or a range.
    let points: Option<Vec<&Bson>> = match (&have.eq, &have.in_values) {
        (Some(v), _) => Some(vec![v]),
        (None, Some(vs)) => Some(vs.iter().collect()),
        _ => None,
    };
    let check =
        |slot: &Option<Bson>, ok: fn(Ordering) -> bool, from_range: &dyn Fn(&Bson) -> bool| {
            let Some(bound) = slot else { return true };
            match &points {
                Some(ps) => ps
                    .iter()
                    .all(|p| comparable(p, bound) && ok(cmp_bson(p, bound))),
                None => from_range(bound),
            }
        };
    let eq_ok = match &needed.eq {
        None => true,
        Some(v) => points.as_ref().is_some_and(|ps| {
            ps.iter()
                .all(|p| comparable(p, v) && cmp_bson(p, v).is_eq())
        }),
    };
    // A range of the query implies `> bound` when its lower limit is at or above it (and
    // `< bound` when its upper limit is at or below it): `side` is the side of `bound` the
    // limit must lie on, `strict` whether `bound` itself is excluded.
    let within =
        |limit: &Option<Bson>, strict_limit: bool, bound: &Bson, strict: bool, side: Ordering| {
            limit.as_ref().is_some_and(|l| {
                comparable(l, bound) && {
                    let o = cmp_bson(l, bound);
                    o == side || (o.is_eq() && (!strict || strict_limit))
                }
            })
        };
    let lower = |bound: &Bson, strict: bool| {
        within(&have.gt, true, bound, strict, Ordering::Greater)
            || within(&have.gte, false, bound, strict, Ordering::Greater)
    };
    let upper = |bound: &Bson, strict: bool| {
        within(&have.lt, true, bound, strict, Ordering::Less)
            || within(&have.lte, false, bound, strict, Ordering::Less)
    };
    // A range's other end is unbounded within its type, so it cannot prove an in_values.
    eq_ok
        && needed.in_values.is_none()
        && check(&needed.gt, |o| o.is_gt(), &|b| lower(b, true))
        && check(&needed.gte, |o| o.is_ge(), &|b| lower(b, false))
        && check(&needed.lt, |o| o.is_lt(), &|b| upper(b, true))
        && check(&needed.lte, |o| o.is_le(), &|b| upper(b, false))
}

/// Comparisons match only within one type (numbers with numbers): type bracketing.
fn comparable(a: &Bson, b: &Bson) -> bool {
    canonical_type(a) == canonical_type(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn implies(partial: Document, query: Document) -> bool {
        query_implies(&partial, &Matcher::new(&query).unwrap())
    }

    #[test]
    fn ranges_and_points() {
        let p = doc! {"a": {"$lte": 1.5}};
        assert!(implies(p.clone(), doc! {"x": 6, "a": 1}));
        assert!(implies(p.clone(), doc! {"x": 6, "a": {"$lte": 1}}));
        assert!(implies(p.clone(), doc! {"a": {"$lt": 1.5}}));
        assert!(implies(p.clone(), doc! {"a": {"$in": [0, 1]}}));
        assert!(!implies(p.clone(), doc! {"x": 6, "a": {"$lte": 1.6}}));
        assert!(!implies(p.clone(), doc! {"x": 6}));
        assert!(
            !implies(p.clone(), doc! {"a": "1"}),
            "a string is not below a number"
        );
        assert!(!implies(p, doc! {"a": {"$in": [1, 2]}}));
        assert!(implies(doc! {"a": {"$gt": 5}}, doc! {"a": {"$gte": 6}}));
        assert!(!implies(doc! {"a": {"$gt": 5}}, doc! {"a": {"$gte": 5}}));
        assert!(implies(doc! {"a": {"$gte": 5}}, doc! {"a": {"$gt": 5}}));
    }

    #[test]
    fn equality_and_shapes() {
        assert!(implies(doc! {"s": "on"}, doc! {"s": "on", "x": 1}));
        assert!(!implies(doc! {"s": "on"}, doc! {"s": "off"}));
        assert!(implies(
            doc! {"$and": [{"a": 1}, {"b": {"$gt": 0}}]},
            doc! {"a": 1, "b": 3}
        ));
        assert!(implies(doc! {"a": {"$exists": true}}, doc! {"a": 1}));
        assert!(implies(
            doc! {"a": {"$exists": true}},
            doc! {"a": {"$gt": 0}}
        ));
        assert!(!implies(doc! {"a": {"$exists": true}}, doc! {"a": null}));
        assert!(!implies(doc! {"a": {"$exists": true}}, doc! {"b": 1}));
        assert!(!implies(doc! {"a": {"$exists": false}}, doc! {"a": 1}));
        assert!(implies(
            doc! {"a": {"$exists": true}, "b": {"$gt": 1}},
            doc! {"a": "x", "b": 2}
        ));
        assert!(
            !implies(doc! {"a": {"$type": "string"}}, doc! {"a": "x"}),
            "not a comparison"
        );
        assert!(!implies(doc! {"$or": [{"a": 1}]}, doc! {"a": 1}));
    }
}

//! MongoDB's total order over BSON values (the order of sorts, range queries and
//! index keys): first by canonical type, then by value within the type.
//! Numbers of every width compare by numeric value, so `1 == 1i64 == 1.0`.

use crate::collation::Collator;
use bson::{Bson, Document};
use std::cmp::Ordering;

pub use crate::types::{as_f64, canonical_type, decimal_to_f64, is_number, type_name};

/// Numeric comparison across types. NaN sorts below every other number and equals NaN.
/// int64 vs double is exact (no rounding of large int64 values).
pub fn cmp_numbers(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => x.cmp(y),
        (Bson::Int64(x), Bson::Int64(y)) => x.cmp(y),
        (Bson::Int32(x), Bson::Int64(y)) => (*x as i64).cmp(y),
        (Bson::Int64(x), Bson::Int32(y)) => x.cmp(&(*y as i64)),
        (Bson::Int64(x), Bson::Double(y)) => cmp_i64_f64(*x, *y),
        (Bson::Double(x), Bson::Int64(y)) => cmp_i64_f64(*y, *x).reverse(),
        _ => cmp_f64(as_f64(a).unwrap_or(f64::NAN), as_f64(b).unwrap_or(f64::NAN)),
    }
}

fn cmp_f64(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

fn cmp_i64_f64(x: i64, y: f64) -> Ordering {
    if y.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 as f64 is exact; anything at or beyond it is larger than every i64.
    if y >= 9.223_372_036_854_776e18 {
        return Ordering::Less;
    }
    if y < -9.223_372_036_854_776e18 {
        return Ordering::Greater;
    }
    let t = y.trunc();
    let ti = t as i64; // exact: |t| < 2^63
    match x.cmp(&ti) {
        Ordering::Equal => {
            let frac = y - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// Total order over BSON values (no collation: strings compare by UTF-8 bytes).
pub fn cmp_bson(a: &Bson, b: &Bson) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        _ if ta == 10 => cmp_numbers(a, b),
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Document(x), Bson::Document(y)) => cmp_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => cmp_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .cmp(&y.pattern)
            .then_with(|| x.options.cmp(&y.options)),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .cmp(&y.code)
            .then_with(|| cmp_documents(&x.scope, &y.scope)),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => Ordering::Equal,
        _ => Ordering::Equal, // MinKey, MaxKey, Null, Undefined: one value each
    }
}

/// Objects compare element by element: canonical type of the value, then field name, then value.
pub fn cmp_documents(a: &Document, b: &Document) -> Ordering {
    cmp_documents_by(a, b, cmp_bson)
}

/// [`cmp_documents`] with `values` comparing the values (binary or under a collation).
fn cmp_documents_by(
    a: &Document,
    b: &Document,
    values: impl Fn(&Bson, &Bson) -> Ordering,
) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = canonical_type(va)
                    .cmp(&canonical_type(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| values(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// Arrays compare like objects whose keys are "0", "1", ...
pub fn cmp_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (va, vb) in a.iter().zip(b.iter()) {
        let o = canonical_type(va)
            .cmp(&canonical_type(vb))
            .then_with(|| cmp_bson(va, vb));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// Equality in MongoDB's sense (numeric across widths, documents field-order sensitive).
pub fn bson_eq(a: &Bson, b: &Bson) -> bool {
    cmp_bson(a, b) == Ordering::Equal
}

/// `cmp_bson` under an optional collation: strings (and symbols) compare through the
/// collator, also inside documents and arrays; field names and every other type
/// compare as without one. `None` is exactly `cmp_bson`.
#[inline]
pub fn cmp_bson_with(a: &Bson, b: &Bson, coll: Option<&Collator>) -> Ordering {
    match coll {
        None => cmp_bson(a, b),
        Some(c) => cmp_collated(a, b, c),
    }
}

/// Equality under an optional collation.
#[inline]
pub fn bson_eq_with(a: &Bson, b: &Bson, coll: Option<&Collator>) -> bool {
    cmp_bson_with(a, b, coll) == Ordering::Equal
}

fn cmp_collated(a: &Bson, b: &Bson, c: &Collator) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => c.compare(x, y),
        (Bson::Document(x), Bson::Document(y)) => cmp_documents_collated(x, y, c),
        (Bson::Array(x), Bson::Array(y)) => {
            for (va, vb) in x.iter().zip(y.iter()) {
                let o = canonical_type(va)
                    .cmp(&canonical_type(vb))
                    .then_with(|| cmp_collated(va, vb, c));
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => cmp_bson(a, b),
    }
}

fn cmp_documents_collated(a: &Document, b: &Document, c: &Collator) -> Ordering {
    cmp_documents_by(a, b, |x, y| cmp_collated(x, y, c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId};

    #[test]
    fn type_order_follows_mongodb() {
        let ordered = vec![
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(5),
            Bson::String("a".into()),
            Bson::Document(doc! {}),
            Bson::Array(vec![]),
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![],
            }),
            Bson::ObjectId(ObjectId::new()),
            Bson::Boolean(false),
            Bson::DateTime(bson::DateTime::from_millis(0)),
            Bson::Timestamp(bson::Timestamp {
                time: 0,
                increment: 0,
            }),
            Bson::RegularExpression(bson::Regex {
                pattern: "a".into(),
                options: "".into(),
            }),
            Bson::MaxKey,
        ];
        for w in ordered.windows(2) {
            assert_eq!(
                cmp_bson(&w[0], &w[1]),
                Ordering::Less,
                "{:?} < {:?}",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn numbers_compare_across_widths() {
        assert_eq!(
            cmp_bson(&Bson::Int32(1), &Bson::Double(1.0)),
            Ordering::Equal
        );
        assert_eq!(
            cmp_bson(&Bson::Int64(2), &Bson::Double(1.5)),
            Ordering::Greater
        );
        assert_eq!(
            cmp_bson(&Bson::Double(f64::NAN), &Bson::Int32(i32::MIN)),
            Ordering::Less
        );
        assert_eq!(
            cmp_bson(&Bson::Int64(i64::MAX), &Bson::Double(9.3e18)),
            Ordering::Less
        );
        assert_eq!(
            cmp_bson(
                &Bson::Int64(9_007_199_254_740_993),
                &Bson::Double(9_007_199_254_740_992.0)
            ),
            Ordering::Greater
        );
        let dec: bson::Decimal128 = "2.5".parse().unwrap();
        assert_eq!(
            cmp_bson(&Bson::Decimal128(dec), &Bson::Int32(2)),
            Ordering::Greater
        );
    }

    #[test]
    fn documents_compare_by_type_then_name_then_value() {
        assert_eq!(
            cmp_documents(&doc! {"a": 1}, &doc! {"a": 2}),
            Ordering::Less
        );
        assert_eq!(
            cmp_documents(&doc! {"a": 1}, &doc! {"b": 0}),
            Ordering::Less
        );
        assert_eq!(
            cmp_documents(&doc! {"b": 1}, &doc! {"a": "x"}),
            Ordering::Less
        );
        assert_eq!(
            cmp_documents(&doc! {"a": 1}, &doc! {"a": 1, "b": 1}),
            Ordering::Less
        );
        assert_eq!(
            cmp_arrays(&[Bson::Int32(1)], &[Bson::Int32(1), Bson::Int32(0)]),
            Ordering::Less
        );
    }

    #[test]
    fn collation_applies_to_strings_at_any_depth() {
        let c = crate::collation::Collator::parse(&doc! {"locale": "en", "strength": 2})
            .unwrap()
            .unwrap();
        let c = Some(&*c);
        assert!(bson_eq_with(
            &Bson::String("a".into()),
            &Bson::String("A".into()),
            c
        ));
        assert!(!bson_eq(
            &Bson::String("a".into()),
            &Bson::String("A".into())
        ));
        assert!(bson_eq_with(
            &bson::bson!({"x": ["PING", {"y": "Pong"}]}),
            &bson::bson!({"x": ["ping", {"y": "pong"}]}),
            c
        ));
        // Field names are not collated.
        assert!(!bson_eq_with(
            &bson::bson!({"X": 1}),
            &bson::bson!({"x": 1}),
            c
        ));
        assert_eq!(
            cmp_bson_with(&Bson::String("b".into()), &Bson::String("A".into()), c),
            Ordering::Greater
        );
        assert_eq!(
            cmp_bson_with(&Bson::Int32(1), &Bson::String("A".into()), c),
            Ordering::Less
        );
    }
}

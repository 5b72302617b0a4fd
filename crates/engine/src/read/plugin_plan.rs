//! How the planner may use indexes of the special types (`tailstream_query::index_plugin`):
//! a hashed index answers equality and `$in` on its hashed field (never ranges or sorts,
//! since hashing destroys order); its other fields behave as in a btree index. A `$text`
//! query must use the collection's text index: its scan reads the keys of the query's
//! terms (after equalities on the index's prefix fields), and the matcher, bound to the
//! index, checks phrases and negations and scores each document. `$near` needs a geo
//! index on its field and reads all of it (see `tailstream_query::geo::index`).

use crate::catalog::{CollMeta, IndexMeta};
use crate::core::keys;
use crate::read::{Access, Plan};
use bson::Bson;
use std::sync::Arc;
use tailstream_query::error::{Error, Result};
use tailstream_query::geo::NearKind;
use tailstream_query::hashed::hash64;
use tailstream_query::index_plugin::IndexPlugin;
use tailstream_query::keystring::KeyStringBuilder;
use tailstream_query::matcher::{FieldBounds, Matcher};
use tailstream_query::text::text_index_required;
use tailstream_storage::prefix_successor;

type Ranges = Vec<(Vec<u8>, Vec<u8>)>;

/// Ranges of a special index answering the bounds on its leading field, with a rank
/// (0 equality, 1 `$in`, 2 range; lower is preferred). `btree` computes ordinary ranges
/// for a leading field that is not special.
pub(crate) fn lead_ranges(
    index: &IndexMeta,
    plugin: &IndexPlugin,
    b: &FieldBounds,
    btree: impl Fn(&FieldBounds) -> Option<(u8, Ranges)>,
) -> Option<(u8, Ranges)> {
    match plugin.hashed_field() {
        Some(0) => hashed_points(index.id, b),
        Some(_) => btree(b),
        None => None,
    }
}

/// Whether scanning the index in order yields documents sorted by its first `n` fields.
pub(crate) fn sorts_by(index: &IndexMeta, n: usize) -> bool {
    match &index.plugin {
        None => true,
        Some(p) => p.hashed_field().is_some_and(|f| n <= f),
    }
}

/// Equality or `$in` on a hashed leading field: one point per value, at its hash.
fn hashed_points(index_id: u32, b: &FieldBounds) -> Option<(u8, Ranges)> {
    let point = |v: &Bson| -> Option<(Vec<u8>, Vec<u8>)> {
        // Arrays are never indexed (refused) and regexes match by pattern: a hash cannot
        // find what they match.
        if matches!(v, Bson::Array(_) | Bson::RegularExpression(_)) {
            return None;
        }
        let mut k = KeyStringBuilder::new();
        k.append(&Bson::Int64(hash64(v)), false);
        let mut lo = keys::index_prefix(index_id).to_vec();
        lo.extend_from_slice(k.as_bytes());
        let hi = prefix_successor(&lo)?;
        Some((lo, hi))
    };
    if let Some(v) = &b.eq {
        return Some((0, vec![point(v)?]));
    }
    let values = b.in_values.as_ref()?;
    let mut ranges = values.iter().map(point).collect::<Option<Vec<_>>>()?;
    ranges.sort();
    ranges.dedup();
    Some((1, ranges))
}

/// The geo index (2dsphere, or 2d for flat and radian distances) on `path`.
pub(crate) fn geo_index_on(meta: &CollMeta, path: &str, meters: bool) -> Option<Arc<IndexMeta>> {
    meta.indexes
        .iter()
        .find(|i| {
            let Some((fields, is_2d)) = i.plugin.as_ref().and_then(|p| p.geo_fields()) else {
                return false;
            };
            // A 2d index holds legacy pairs on a plane: no distances in meters.
            !(is_2d && meters) && fields.iter().any(|f| i.pattern.fields[*f].0 == path)
        })
        .cloned()
}

/// The plan of a query that needs a special index (`$text`, `$near`), None for others.
pub(crate) fn special_plan(meta: &CollMeta, matcher: &Matcher) -> Result<Option<Plan>> {
    if let Some((path, near)) = matcher.geo_near() {
        // Every document with a location is in the index: read it all, then the matcher
        // checks the distance bounds and the reader orders by distance.
        let index = geo_index_on(meta, path, near.kind == NearKind::Meters)
            .ok_or_else(|| Error::bad_value("unable to find index for $geoNear query"))?;
        let lo = keys::index_prefix(index.id).to_vec();
        let hi = prefix_successor(&lo).expect("index prefix");
        return Ok(Some(Plan {
            access: Access::IndexScan {
                index,
                ranges: vec![(lo, hi)],
                reverse: false,
            },
            sorted: false,
        }));
    }
    let Some(text) = matcher.text() else {
        return Ok(None);
    };
    let (index, spec) = meta
        .indexes
        .iter()
        .find_map(|i| {
            let spec = i.plugin.as_ref()?.text_spec()?;
            Some((i.clone(), spec.clone()))
        })
        .ok_or_else(text_index_required)?;
    text.bind(spec.clone());
    // A compound text index is searched within one value of its prefix fields.
    let preds = matcher.index_predicates();
    let mut prefix = KeyStringBuilder::new();
    for (path, desc) in &spec.prefix {
        let v = preds
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, b)| b.eq.clone())
            .ok_or_else(|| {
                Error::bad_value(format!(
                    "error processing query: planner returned error :: caused by :: failed to use text index to satisfy $text query (if text index is compound, are equality predicates given for all prefix fields?) (need an equality on {path})"
                ))
            })?;
        prefix.append(&v, *desc);
    }
    let mut ranges = Vec::new();
    for term in text.terms_for_bounds().into_iter().flatten() {
        let mut k = KeyStringBuilder::new();
        k.append(&Bson::String(term.clone()), false);
        let mut lo = keys::index_prefix(index.id).to_vec();
        lo.extend_from_slice(prefix.as_bytes());
        lo.extend_from_slice(k.as_bytes());
        if let Some(hi) = prefix_successor(&lo) {
            ranges.push((lo, hi));
        }
    }
    ranges.sort();
    ranges.dedup();
    Ok(Some(Plan {
        access: Access::IndexScan {
            index,
            ranges,
            reverse: false,
        },
        sorted: false,
    }))
}

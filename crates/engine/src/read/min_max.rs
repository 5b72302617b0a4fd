//! find's `min` and `max` options: an inclusive lower and exclusive upper bound on the
//! keys of the hinted index, in index order (so on a descending field `min` is the
//! larger value). They replace the index ranges the filter would give; the filter
//! still applies to every document the bounded scan reaches.

use crate::core::keys;
use crate::read::{Access, Plan};
use bson::{Bson, Document};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::keystring::KeyStringBuilder;

/// Narrows a plan made for a hinted index to the index keys in `[min, max)`.
pub fn bound_plan(
    plan: &mut Plan,
    hint: Option<&Bson>,
    min: Option<&Document>,
    max: Option<&Document>,
    coll: Option<&tailstream_query::collation::Collator>,
) -> Result<()> {
    let min = min.filter(|d| !d.is_empty());
    let max = max.filter(|d| !d.is_empty());
    if min.is_none() && max.is_none() {
        return Ok(());
    }
    let Some(hint) = hint else {
        return Err(Error::new(
            51173,
            "When using min()/max() a hint of which index to use must be provided",
        ));
    };
    let natural = matches!(hint, Bson::Document(d) if d.contains_key("$natural"));
    if natural {
        return Err(Error::new(
            codes::BAD_VALUE,
            "min and max are incompatible with $natural",
        ));
    }
    let Access::IndexScan { index, ranges, .. } = &mut plan.access else {
        // The hint named the _id index: documents are stored by _id, so the bounds
        // narrow the collection's own key range.
        return bound_id_range(plan, min, max);
    };
    let fields = &index.pattern.fields;
    // mongod's indexCompatibleMaxMin: the bound names every key field, in order.
    // A bound holding strings is in the operation's collation: only an index with that
    // collation orders its keys the same way.
    let same_collation = tailstream_query::collation::same_collation(index.collator(), coll);
    let compatible = |bound: &Document| {
        bound.len() == fields.len()
            && bound.keys().zip(fields).all(|(k, (f, _))| k == f)
            && (same_collation
                || !bound
                    .values()
                    .any(tailstream_query::collation::contains_strings))
    };
    if !min.map(compatible).unwrap_or(true) || !max.map(compatible).unwrap_or(true) {
        return Err(Error::new(
            51174,
            "The index chosen is not compatible with min/max",
        ));
    }
    let prefix = keys::index_prefix(index.id);
    // An entry is prefix ++ KeyString(values) ++ KeyString(_id): an entry whose values
    // equal a bound sorts after the bound's own encoding, so the encoded `min` is an
    // inclusive and the encoded `max` an exclusive limit.
    let encode = |bound: &Document| {
        let mut k = KeyStringBuilder::new();
        for ((_, value), (_, descending)) in bound.iter().zip(fields) {
            k.append_collated(value, *descending, index.collator());
        }
        let mut key = prefix.to_vec();
        key.extend_from_slice(k.as_bytes());
        key
    };
    let whole = (
        prefix.to_vec(),
        tailstream_storage::prefix_successor(&prefix).expect("index prefix is never all 0xFF"),
    );
    let lower = min.map(encode).unwrap_or(whole.0);
    let upper = max.map(encode).unwrap_or(whole.1);
    *ranges = if lower < upper {
        vec![(lower, upper)]
    } else {
        Vec::new()
    };
    Ok(())
}

/// `min`/`max` on the `_id` index: a range of the collection's documents by `_id`.
fn bound_id_range(plan: &mut Plan, min: Option<&Document>, max: Option<&Document>) -> Result<()> {
    let compatible = |bound: &Document| bound.len() == 1 && bound.contains_key("_id");
    if !min.map(compatible).unwrap_or(true) || !max.map(compatible).unwrap_or(true) {
        return Err(Error::new(
            51174,
            "The index chosen is not compatible with min/max",
        ));
    }
    let reverse = matches!(plan.access, Access::CollScan { reverse: true });
    // The _id KeyString of a document equal to a bound is the bound's own encoding:
    // `min` is inclusive, `max` exclusive, as for any index.
    let lower = min
        .and_then(|d| d.get("_id"))
        .map(keys::id_key)
        .unwrap_or_default();
    let upper = match max.and_then(|d| d.get("_id")) {
        Some(v) => keys::id_key(v),
        // Above every KeyString (their first byte is a type byte, never 0xFF).
        None => vec![0xFF; 2],
    };
    plan.access = if lower < upper {
        Access::IdRange {
            lower,
            upper,
            reverse,
        }
    } else {
        Access::IdPoints(Vec::new())
    };
    Ok(())
}

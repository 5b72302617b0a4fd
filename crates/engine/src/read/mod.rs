//! Query planning and execution: choose how to reach the documents (a point
//! lookup by `_id`, an index range scan, a collection scan, or the oplog), then
//! scan in resumable steps so a cursor can continue where its last batch ended
//! without holding a storage iterator between getMores.

pub(crate) mod bucket_auto;
pub mod buckets;
pub mod cursor;
pub mod find;
pub(crate) mod geo_near;
pub mod get_more;
pub mod hash;
pub mod map_reduce;
pub mod min_max;
pub(crate) mod plugin_plan;
pub(crate) mod spill_group;
pub mod spill_sort;
mod storage_stats;
pub(crate) mod union;
pub(crate) mod window;

use crate::catalog::{CollMeta, IndexMeta};
use crate::core::evicted::EvictionMarks;
use crate::core::keys;
use crate::core::storage_err;
use crate::core::time::{AtomicClusterTime, ClusterTime};
use crate::oplog::recent::RecentOplog;
use bson::{Bson, Document};
use std::collections::HashSet;
use std::sync::Arc;
use tailstream_query::collation::{contains_strings, same_collation, Collator};
use tailstream_query::compare::canonical_type;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::keystring::KeyStringBuilder;
use tailstream_query::matcher::Matcher;
use tailstream_query::sort::SortSpec;
use tailstream_storage::{prefix_successor, Space, Store};

/// A range of index keys: its lower and upper bound.
type KeyRange = (Vec<u8>, Vec<u8>);

/// How documents are reached.
#[derive(Debug, Clone)]
pub enum Access {
    /// Specific `_id`s (encoded), in key order.
    IdPoints(Vec<Vec<u8>>),
    /// Every document of the collection in `_id` order.
    CollScan { reverse: bool },
    /// The documents whose `_id` KeyString is in `[lower, upper)`, in `_id` order: the
    /// `_id` index bounded by find's `min`/`max` (documents are stored by `_id`, so the
    /// collection itself is that index).
    IdRange {
        lower: Vec<u8>,
        upper: Vec<u8>,
        reverse: bool,
    },
    /// Ranges `[lower, upper)` of one index, in order.
    IndexScan {
        index: Arc<IndexMeta>,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
        reverse: bool,
    },
    /// The oplog from a cluster time on (`local.oplog.rs`). `floor` is the engine's
    /// trim point: entries below it may still be stored but are gone.
    OplogScan {
        from: ClusterTime,
        reverse: bool,
        floor: Arc<AtomicClusterTime>,
    },
    /// A capped collection in insertion order (its `Natural` entries).
    NaturalScan { reverse: bool },
}

impl Access {
    /// Whether it walks an index (its keys count as `keysExamined`); a collection scan
    /// examines documents only, as in mongod.
    fn reads_keys(&self) -> bool {
        !matches!(
            self,
            Access::CollScan { .. } | Access::OplogScan { .. } | Access::NaturalScan { .. }
        )
    }
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub access: Access,
    /// True when the access path already returns documents in the requested sort order.
    pub sorted: bool,
}

impl Plan {
    /// mongod's `planSummary` of the plan (`COLLSCAN`, `IDHACK`, `IXSCAN { a: 1, b: -1 }`),
    /// for the slow-operation line and `system.profile`.
    pub fn summary(&self) -> String {
        match &self.access {
            Access::IdPoints(_) => "IDHACK".to_string(),
            Access::CollScan { .. } | Access::OplogScan { .. } | Access::NaturalScan { .. } => {
                "COLLSCAN".to_string()
            }
            Access::IndexScan { index, .. } => format!("IXSCAN {}", key_pattern_text(&index.key)),
            Access::IdRange { .. } => "IXSCAN { _id: 1 }".to_string(),
        }
    }

    /// The `winningPlan` of explain output.
    pub fn explain(&self) -> Document {
        match &self.access {
            Access::IdPoints(ids) => bson::doc! {"stage": "IDHACK", "keys": ids.len() as i64},
            Access::CollScan { reverse } => {
                bson::doc! {"stage": "COLLSCAN", "direction": if *reverse { "backward" } else { "forward" }}
            }
            Access::IndexScan {
                index,
                ranges,
                reverse,
            } => bson::doc! {
                "stage": "FETCH",
                "inputStage": {
                    "stage": "IXSCAN",
                    "keyPattern": index.key.clone(),
                    "indexName": index.name.clone(),
                    "isUnique": index.unique,
                    "isSparse": index.sparse,
                    "isPartial": index.partial_filter.is_some(),
                    "direction": if *reverse { "backward" } else { "forward" },
                    "intervals": ranges.len() as i64,
                }
            },
            Access::OplogScan { reverse, .. } | Access::NaturalScan { reverse } => {
                bson::doc! {"stage": "COLLSCAN", "direction": if *reverse { "backward" } else { "forward" }}
            }
            Access::IdRange { reverse, .. } => bson::doc! {
                "stage": "FETCH",
                "inputStage": {
                    "stage": "IXSCAN",
                    "keyPattern": {"_id": 1},
                    "indexName": "_id_",
                    "isUnique": true,
                    "direction": if *reverse { "backward" } else { "forward" },
                    "intervals": 1i64,
                }
            },
        }
    }
}

/// A key pattern as mongod's plan summaries print it: `{ a: 1, b: -1 }`,
/// `{ _fts: "text", _ftsx: 1 }`.
fn key_pattern_text(key: &Document) -> String {
    let fields: Vec<String> = key
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Bson::String(s) => format!("{s:?}"),
                Bson::Double(d) if d.fract() == 0.0 && d.abs() < 1e15 => format!("{}", *d as i64),
                other => other.to_string(),
            };
            format!("{k}: {value}")
        })
        .collect();
    if fields.is_empty() {
        "{}".to_string()
    } else {
        format!("{{ {} }}", fields.join(", "))
    }
}

/// Chooses the access path for a query on a collection, and counts a use of the index
/// it picks (`$indexStats`).
pub fn plan(
    meta: &CollMeta,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    hint: Option<&Bson>,
) -> Result<Plan> {
    let p = choose_plan(meta, matcher, sort, hint)?;
    tailstream_query::script::Operation::count_current(|s| s.note_plan(|| p.summary()));
    match &p.access {
        Access::IndexScan { index, .. } => index.usage.record(),
        Access::IdPoints(_) | Access::IdRange { .. } => {
            crate::catalog::usage::record_id_index(meta.uuid)
        }
        _ => {}
    }
    Ok(p)
}

/// Whether the plan [`plan`] would choose returns the documents in `sort`'s order (it
/// records nothing: the plan itself is made afterwards).
pub(crate) fn serves_sort(
    meta: &CollMeta,
    matcher: &Matcher,
    sort: &SortSpec,
    hint: Option<&Bson>,
) -> Result<bool> {
    Ok(choose_plan(meta, matcher, Some(sort), hint)?.sorted)
}

/// The access path for a query on a collection. A capped collection's collection scans
/// follow insertion order, as mongod's do.
fn choose_plan(
    meta: &CollMeta,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    hint: Option<&Bson>,
) -> Result<Plan> {
    // `$text` (and, later, geo operators) decide the index themselves.
    if let Some(p) = crate::read::plugin_plan::special_plan(meta, matcher)? {
        return Ok(p);
    }
    let mut p = plan_access(meta, matcher, sort, hint)?;
    if meta.is_capped() {
        if let Access::CollScan { reverse } = p.access {
            let by_id = sort
                .map(|s| s.fields.len() == 1 && s.fields[0].0 == "_id")
                .unwrap_or(false);
            if !by_id {
                p.access = Access::NaturalScan { reverse };
            }
        }
    }
    Ok(p)
}

fn plan_access(
    meta: &CollMeta,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    hint: Option<&Bson>,
) -> Result<Plan> {
    let sort_fields: &[(String, bool)] = sort.map(|s| s.fields.as_slice()).unwrap_or(&[]);
    let natural = sort_fields.len() == 1 && sort_fields[0].0 == "$natural";
    if let Some(h) = hint {
        return plan_with_hint(meta, matcher, sort_fields, h);
    }
    if natural {
        return Ok(Plan {
            access: Access::CollScan {
                reverse: sort_fields[0].1,
            },
            sorted: true,
        });
    }
    let coll = matcher.collator();
    // A time-series collection's records are keyed by insertion, not by `_id`.
    let keyed_by_id = !meta.is_timeseries();
    if let Some(ids) = id_points(matcher).filter(|_| keyed_by_id) {
        let sorted = sort_fields.is_empty()
            || (sort_fields.len() == 1 && sort_fields[0] == ("_id".to_string(), false));
        return Ok(Plan {
            access: Access::IdPoints(ids),
            sorted,
        });
    }
    // Prefer an index whose leading field the filter constrains, equality over ranges.
    let preds = matcher.index_predicates();
    let mut best: Option<(u8, Plan)> = None;
    for index in &meta.indexes {
        // Such an index lacks some documents: usable only when the query provably
        // excludes them (a partial filter the query implies), or when hinted.
        let usable = match &index.partial_filter {
            _ if index.sparse => false,
            Some(pf) => crate::catalog::partial::query_implies(pf, matcher),
            None => true,
        };
        if !usable {
            continue;
        }
        if let Some((rank, ranges)) = lead_ranges(index, &preds, coll) {
            let order = index_order(sort_fields, index, coll);
            let reverse = order == Some(true);
            let sorted = sort_fields.is_empty() || order.is_some();
            if best.as_ref().map(|(r, _)| rank < *r).unwrap_or(true) {
                best = Some((
                    rank,
                    Plan {
                        access: Access::IndexScan {
                            index: index.clone(),
                            ranges,
                            reverse,
                        },
                        sorted,
                    },
                ));
            }
        }
    }
    if let Some((_, p)) = best {
        return Ok(p);
    }
    if !sort_fields.is_empty() {
        // Documents are in binary `_id` order: that is the sort order only without a
        // collation (and not in a time-series collection, keyed by insertion).
        if keyed_by_id && sort_fields.len() == 1 && sort_fields[0].0 == "_id" && coll.is_none() {
            return Ok(Plan {
                access: Access::CollScan {
                    reverse: sort_fields[0].1,
                },
                sorted: true,
            });
        }
        for index in &meta.indexes {
            if index.partial_filter.is_some() || index.sparse || index.plugin.is_some() {
                continue;
            }
            if let Some(reverse) = index_order(sort_fields, index, coll) {
                return Ok(Plan {
                    access: Access::IndexScan {
                        index: index.clone(),
                        ranges: vec![full_range(index.id)],
                        reverse,
                    },
                    sorted: true,
                });
            }
        }
    }
    Ok(Plan {
        access: Access::CollScan { reverse: false },
        sorted: sort_fields.is_empty(),
    })
}

fn plan_with_hint(
    meta: &CollMeta,
    matcher: &Matcher,
    sort_fields: &[(String, bool)],
    hint: &Bson,
) -> Result<Plan> {
    let index = match hint {
        // A time-series collection has no `_id` index.
        Bson::String(name) if name == "_id_" && meta.is_timeseries() => return Err(bad_hint()),
        Bson::Document(d)
            if meta.is_timeseries()
                && (d == &bson::doc! {"_id": 1} || d == &bson::doc! {"_id": -1}) =>
        {
            return Err(bad_hint())
        }
        Bson::String(name) if name == "_id_" => None,
        Bson::String(name) => Some(meta.index_by_name(name).cloned().ok_or_else(bad_hint)?),
        Bson::Document(d) if d.contains_key("$natural") => {
            let reverse = matches!(d.get("$natural"), Some(v) if tailstream_query::compare::as_f64(v).unwrap_or(1.0) < 0.0);
            return Ok(Plan {
                access: Access::CollScan { reverse },
                sorted: sort_fields.is_empty(),
            });
        }
        Bson::Document(d) if d == &bson::doc! {"_id": 1} || d == &bson::doc! {"_id": -1} => None,
        Bson::Document(d) => {
            let mut found = meta
                .indexes
                .iter()
                .filter(|i| tailstream_query::compare::cmp_documents(&i.key, d).is_eq());
            let index = found.next().cloned().ok_or_else(bad_hint)?;
            // Indexes may share a key pattern (with different collations): mongod then
            // wants the index named.
            if found.next().is_some() {
                return Err(Error::bad_value(
                    "Hint matched multiple indexes, must hint by index name",
                ));
            }
            Some(index)
        }
        _ => return Err(Error::bad_value("hint must be a string or a document")),
    };
    match index {
        None => {
            if let Some(ids) = id_points(matcher) {
                return Ok(Plan {
                    access: Access::IdPoints(ids),
                    sorted: sort_fields.is_empty(),
                });
            }
            let by_id =
                sort_fields.len() == 1 && sort_fields[0].0 == "_id" && matcher.collator().is_none();
            let reverse = by_id && sort_fields[0].1;
            let sorted = sort_fields.is_empty() || by_id;
            Ok(Plan {
                access: Access::CollScan { reverse },
                sorted,
            })
        }
        Some(index) => {
            let preds = matcher.index_predicates();
            let ranges = lead_ranges(&index, &preds, matcher.collator())
                .map(|(_, r)| r)
                .unwrap_or_else(|| vec![full_range(index.id)]);
            let m = index_order(sort_fields, &index, matcher.collator());
            Ok(Plan {
                access: Access::IndexScan {
                    index: index.clone(),
                    ranges,
                    reverse: m == Some(true),
                },
                sorted: sort_fields.is_empty() || m.is_some(),
            })
        }
    }
}

fn bad_hint() -> Error {
    Error::bad_value("hint provided does not correspond to an existing index")
}

/// Some(reverse) if scanning the index yields the sort order: the fields match and the
/// index orders strings as the operation's collation does.
fn index_order(
    sort_fields: &[(String, bool)],
    index: &IndexMeta,
    coll: Option<&Collator>,
) -> Option<bool> {
    if !same_collation(index.collator(), coll) {
        return None;
    }
    sort_matches_index(sort_fields, index)
}

/// Whether the index can bound a predicate: its keys order strings as the operation's
/// collation does, or the bounds hold no strings (other values encode alike).
fn bounds_usable(
    index: &IndexMeta,
    b: &tailstream_query::matcher::FieldBounds,
    coll: Option<&Collator>,
) -> bool {
    if same_collation(index.collator(), coll) {
        return true;
    }
    let values = [&b.eq, &b.gt, &b.gte, &b.lt, &b.lte];
    !values
        .iter()
        .any(|v| v.as_ref().is_some_and(contains_strings))
        && !b
            .in_values
            .as_ref()
            .is_some_and(|vs| vs.iter().any(contains_strings))
}

/// Index ranges answering the predicates on the index's leading field, with their rank
/// (see [`bounds_to_ranges`]); special index types decide for themselves.
fn lead_ranges(
    index: &IndexMeta,
    preds: &[(String, tailstream_query::matcher::FieldBounds)],
    coll: Option<&Collator>,
) -> Option<(u8, Vec<KeyRange>)> {
    let (lead, desc) = &index.pattern.fields[0];
    let (_, b) = preds.iter().find(|(p, _)| p == lead)?;
    if !bounds_usable(index, b, coll) {
        return None;
    }
    match &index.plugin {
        None => bounds_to_ranges(index.id, b, *desc, index.collator()),
        Some(plugin) => crate::read::plugin_plan::lead_ranges(index, plugin, b, |b| {
            bounds_to_ranges(index.id, b, *desc, index.collator())
        }),
    }
}

/// Some(reverse) if scanning the index (forwards or backwards) yields the sort order.
fn sort_matches_index(sort_fields: &[(String, bool)], index: &IndexMeta) -> Option<bool> {
    if sort_fields.is_empty() || sort_fields.len() > index.pattern.fields.len() {
        return None;
    }
    if !crate::read::plugin_plan::sorts_by(index, sort_fields.len()) {
        return None;
    }
    let fwd = sort_fields
        .iter()
        .zip(&index.pattern.fields)
        .all(|(s, i)| s.0 == i.0 && s.1 == i.1);
    let bwd = sort_fields
        .iter()
        .zip(&index.pattern.fields)
        .all(|(s, i)| s.0 == i.0 && s.1 != i.1);
    if fwd {
        Some(false)
    } else if bwd {
        Some(true)
    } else {
        None
    }
}

fn full_range(index_id: u32) -> (Vec<u8>, Vec<u8>) {
    let p = keys::index_prefix(index_id);
    (
        p.to_vec(),
        prefix_successor(&p).unwrap_or_else(|| vec![0xFF; 5]),
    )
}

/// The `_id`s pinned by the filter (`{_id: v}` or `{_id: {$in: [...]}}`), encoded and sorted.
pub(crate) fn id_points(matcher: &Matcher) -> Option<Vec<Vec<u8>>> {
    // Documents are found by their binary `_id`: a string `_id` under a collation may
    // match others, which only a scan finds.
    let collated = matcher.collator().is_some();
    let usable_point = |v: &Bson| usable_point(v) && !(collated && contains_strings(v));
    if let Some(v) = matcher.id_equality() {
        if usable_point(&v) {
            return Some(vec![keys::id_key(&v)]);
        }
    }
    let preds = matcher.index_predicates();
    let (_, b) = preds.iter().find(|(p, _)| p == "_id")?;
    let values = b.in_values.as_ref()?;
    if !values.iter().all(usable_point) {
        return None;
    }
    let mut ks: Vec<Vec<u8>> = values.iter().map(keys::id_key).collect();
    ks.sort();
    ks.dedup();
    Some(ks)
}

/// Equality values an index lookup answers exactly: not arrays (they match elements too),
/// not regexes (they match by pattern), not null (it also matches missing fields).
fn usable_point(v: &Bson) -> bool {
    !matches!(
        v,
        Bson::Array(_) | Bson::RegularExpression(_) | Bson::Null | Bson::Undefined
    )
}

/// Index key ranges for predicates on the index's leading field, with a rank
/// (0 equality, 1 $in, 2 range) to prefer the most selective. `coll` is the index's
/// collation (its string keys are comparison keys).
fn bounds_to_ranges(
    index_id: u32,
    b: &tailstream_query::matcher::FieldBounds,
    desc: bool,
    coll: Option<&Collator>,
) -> Option<(u8, Vec<KeyRange>)> {
    let prefix = keys::index_prefix(index_id);
    let point = |v: &Bson| -> (Vec<u8>, Vec<u8>) {
        let mut k = KeyStringBuilder::new();
        k.append_collated(v, desc, coll);
        let mut lo = prefix.to_vec();
        lo.extend_from_slice(k.as_bytes());
        let hi = prefix_successor(&lo).expect("prefix is never all 0xFF");
        (lo, hi)
    };
    if let Some(v) = &b.eq {
        if !usable_point(v) {
            return None;
        }
        return Some((0, vec![point(v)]));
    }
    if let Some(vs) = &b.in_values {
        if vs.is_empty() || !vs.iter().all(usable_point) {
            return None;
        }
        let mut ranges: Vec<_> = vs.iter().map(point).collect();
        ranges.sort();
        ranges.dedup();
        return Some((1, ranges));
    }
    // A range: bounds of the same type bracket as the operand (type bracketing).
    let lower =
        b.gt.as_ref()
            .map(|v| (v, false))
            .or(b.gte.as_ref().map(|v| (v, true)));
    let upper =
        b.lt.as_ref()
            .map(|v| (v, false))
            .or(b.lte.as_ref().map(|v| (v, true)));
    if lower.is_none() && upper.is_none() {
        return None;
    }
    for (v, _) in lower.iter().chain(upper.iter()) {
        if !range_operand_ok(v) {
            return None;
        }
    }
    let enc = |v: &Bson| -> Vec<u8> {
        let mut k = KeyStringBuilder::new();
        k.append_collated(v, desc, coll);
        let mut key = prefix.to_vec();
        key.extend_from_slice(k.as_bytes());
        key
    };
    let operand = lower.or(upper).unwrap().0;
    let (type_lo, type_hi) = type_bracket(operand);
    // In value order: [lo, hi) with inclusivity handled by prefix successors.
    let lo_key = match lower {
        Some((v, true)) => enc(v),
        Some((v, false)) => prefix_successor(&enc(v))?,
        None => enc(&type_lo),
    };
    let hi_key = match upper {
        Some((v, true)) => prefix_successor(&enc(v))?,
        Some((v, false)) => enc(v),
        None => enc(&type_hi),
    };
    if desc {
        // Descending fields store inverted bytes: value order is reversed in key order.
        let lo = match upper {
            Some((v, true)) => enc(v),
            Some((v, false)) => prefix_successor(&enc(v))?,
            None => prefix_successor(&enc(&type_hi))?,
        };
        let hi = match lower {
            Some((v, true)) => prefix_successor(&enc(v))?,
            Some((v, false)) => enc(v),
            None => prefix_successor(&enc(&type_lo))?,
        };
        if lo >= hi {
            return Some((2, vec![]));
        }
        return Some((2, vec![(lo, hi)]));
    }
    if lo_key >= hi_key {
        return Some((2, vec![]));
    }
    Some((2, vec![(lo_key, hi_key)]))
}

/// Range operands whose type bracket we can bound in the index.
fn range_operand_ok(v: &Bson) -> bool {
    matches!(canonical_type(v), 10 | 15 | 35 | 45 | 47)
}

/// The smallest value of the operand's type bracket, and the smallest value of the next bracket.
fn type_bracket(v: &Bson) -> (Bson, Bson) {
    match canonical_type(v) {
        10 => (Bson::Double(f64::NAN), Bson::String(String::new())),
        15 => (Bson::String(String::new()), Bson::Document(Document::new())),
        35 => (
            Bson::ObjectId(bson::oid::ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
        ),
        45 => (
            Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
            Bson::Timestamp(bson::Timestamp {
                time: 0,
                increment: 0,
            }),
        ),
        _ => (
            Bson::Timestamp(bson::Timestamp {
                time: 0,
                increment: 0,
            }),
            Bson::RegularExpression(bson::Regex {
                pattern: String::new(),
                options: String::new(),
            }),
        ),
    }
}

/// A resumable scan: each call to `next` continues after the last key it returned.
#[derive(Debug, Clone)]
pub struct Scan {
    pub access: Access,
    range_idx: usize,
    /// Last storage key returned in the current range; the next read starts after it.
    position: Option<Vec<u8>>,
    /// Multikey index scans can reach one document through several keys.
    seen: HashSet<Vec<u8>>,
    pub done: bool,
    pub keys_examined: u64,
    pub docs_examined: u64,
    /// Attach each match's `$text` score (`text::TEXT_SCORE_FIELD`), for reads whose
    /// projection or sort may ask for `{$meta: "textScore"}`; never set for writes.
    pub annotate_text_score: bool,
}

/// Upper limit of keys one `next_batch` call reads, so one call never monopolises a thread.
const MAX_KEYS_PER_STEP: usize = 10_000;

impl Scan {
    pub fn new(access: Access) -> Scan {
        Scan {
            access,
            range_idx: 0,
            position: None,
            seen: HashSet::new(),
            done: false,
            keys_examined: 0,
            docs_examined: 0,
            annotate_text_score: false,
        }
    }

    /// The document if the filter matches it (with its text score attached when asked).
    /// Errors that end the operation (a failing script, maxTimeMS, a client gone) fail
    /// the scan; other evaluation errors count as "no match".
    fn accept(&self, matcher: &Matcher, mut doc: Document) -> Result<Option<Document>> {
        if !matcher.matches_or_fail(&doc)? {
            return Ok(None);
        }
        if self.annotate_text_score {
            if let Some(score) = matcher.text_score(&doc) {
                doc.insert(tailstream_query::text::TEXT_SCORE_FIELD, score);
            }
        }
        Ok(Some(doc))
    }

    /// Appends matching documents (with their record keys) to `out` until `want` are
    /// found, the scan ends, or a step limit is hit (then call again).
    /// What each step examined is added to the operation's figures (`op_stats`).
    pub fn next_batch(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
        want: usize,
        out: &mut Vec<(Vec<u8>, Document)>,
    ) -> Result<()> {
        let before = (self.keys_examined, self.docs_examined);
        let r = self.next_batch_steps(store, coll_id, matcher, want, out);
        self.count_examined(before);
        r
    }

    /// Adds what was examined since `before` (keys, documents) to the operation's
    /// figures.
    fn count_examined(&self, (keys_before, docs_before): (u64, u64)) {
        let keys = if self.access.reads_keys() {
            self.keys_examined - keys_before
        } else {
            0
        };
        let docs = self.docs_examined - docs_before;
        if keys > 0 || docs > 0 {
            tailstream_query::script::Operation::count_current(|s| s.add_examined(keys, docs));
        }
    }

    fn next_batch_steps(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
        want: usize,
        out: &mut Vec<(Vec<u8>, Document)>,
    ) -> Result<()> {
        tailstream_query::script::Operation::check_current()?;
        let mut steps = 0usize;
        let start_len = out.len();
        while !self.done && out.len() - start_len < want && steps < MAX_KEYS_PER_STEP {
            match &self.access {
                Access::IdPoints(ids) => {
                    if self.range_idx >= ids.len() {
                        self.done = true;
                        break;
                    }
                    let id_ks = ids[self.range_idx].clone();
                    self.range_idx += 1;
                    steps += 1;
                    self.keys_examined += 1;
                    if let Some(doc) = fetch(store, coll_id, &id_ks)? {
                        self.docs_examined += 1;
                        if let Some(doc) = self.accept(matcher, doc)? {
                            out.push((id_ks, doc));
                        }
                    }
                }
                Access::CollScan { reverse } => {
                    let reverse = *reverse;
                    let prefix = keys::coll_prefix(coll_id);
                    let upper = prefix_successor(&prefix).expect("collection prefix");
                    self.scan_range(
                        store,
                        Space::Docs,
                        (&prefix, &upper, reverse),
                        matcher,
                        (want, start_len),
                        &mut steps,
                        out,
                        |k, v| Ok(Some((k[4..].to_vec(), load_stored(store, k, v)?))),
                    )?;
                }
                Access::IdRange {
                    lower,
                    upper,
                    reverse,
                } => {
                    let reverse = *reverse;
                    let prefix = keys::coll_prefix(coll_id);
                    let (lo, hi) = (keys::doc_key(coll_id, lower), keys::doc_key(coll_id, upper));
                    self.scan_range(
                        store,
                        Space::Docs,
                        (&lo, &hi, reverse),
                        matcher,
                        (want, start_len),
                        &mut steps,
                        out,
                        |k, v| {
                            Ok(Some((
                                k[prefix.len()..].to_vec(),
                                load_stored(store, k, v)?,
                            )))
                        },
                    )?;
                }
                Access::IndexScan {
                    ranges, reverse, ..
                } => {
                    let reverse = *reverse;
                    let n = ranges.len();
                    if self.range_idx >= n {
                        self.done = true;
                        break;
                    }
                    let ri = if reverse {
                        n - 1 - self.range_idx
                    } else {
                        self.range_idx
                    };
                    let (lo0, hi0) = ranges[ri].clone();
                    let (lo, hi) = resume_bounds(&lo0, &hi0, self.position.as_deref(), reverse);
                    let mut last = None;
                    let mut range_done = true;
                    for item in store.scan(Space::Index, &lo, Some(&hi), reverse) {
                        let (k, id_ks) = item.map_err(storage_err)?;
                        steps += 1;
                        self.keys_examined += 1;
                        last = Some(k.to_vec());
                        if self.seen.insert(id_ks.to_vec()) {
                            if let Some(doc) = fetch(store, coll_id, &id_ks)? {
                                self.docs_examined += 1;
                                if let Some(doc) = self.accept(matcher, doc)? {
                                    out.push((id_ks.to_vec(), doc));
                                }
                            }
                        }
                        if out.len() - start_len >= want || steps >= MAX_KEYS_PER_STEP {
                            range_done = false;
                            break;
                        }
                    }
                    if range_done {
                        self.range_idx += 1;
                        self.position = None;
                    } else if let Some(l) = last {
                        self.position = Some(l);
                    }
                }
                Access::NaturalScan { reverse } => {
                    let reverse = *reverse;
                    self.check_position(store, Space::Natural)?;
                    let prefix = coll_id.to_be_bytes();
                    let upper = prefix_successor(&prefix).expect("collection prefix");
                    self.scan_range(
                        store,
                        Space::Natural,
                        (&prefix, &upper, reverse),
                        matcher,
                        (want, start_len),
                        &mut steps,
                        out,
                        |_, id_ks| {
                            // A dangling entry (its document deleted) is skipped.
                            Ok(fetch(store, coll_id, id_ks)?.map(|doc| (id_ks.to_vec(), doc)))
                        },
                    )?;
                }
                Access::OplogScan {
                    from,
                    reverse,
                    floor,
                } => {
                    let reverse = *reverse;
                    let floor = keys::oplog_key(floor.load(std::sync::atomic::Ordering::Acquire));
                    if self
                        .position
                        .as_deref()
                        .is_some_and(|p| p < floor.as_slice())
                    {
                        return Err(position_lost());
                    }
                    let lower = keys::oplog_key(*from).max(floor);
                    self.scan_range(
                        store,
                        Space::Oplog,
                        (&lower, &[0xFF; 9], reverse),
                        matcher,
                        (want, start_len),
                        &mut steps,
                        out,
                        |k, v| Ok(Some((k.to_vec(), decode(v)?))),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// One step over a single key range `[lo, hi)` of `space`, continuing after the saved
    /// position: `load` turns an entry into its (record key, document), or None to skip it.
    /// Stops at `want` new matches or the step limit, and marks the scan done at the end.
    #[allow(clippy::too_many_arguments)]
    fn scan_range(
        &mut self,
        store: &Store,
        space: Space,
        (lo, hi, reverse): (&[u8], &[u8], bool),
        matcher: &Matcher,
        (want, start_len): (usize, usize),
        steps: &mut usize,
        out: &mut Vec<(Vec<u8>, Document)>,
        mut load: impl FnMut(&[u8], &[u8]) -> Result<Option<(Vec<u8>, Document)>>,
    ) -> Result<()> {
        let (lo, hi) = resume_bounds(lo, hi, self.position.as_deref(), reverse);
        let mut last = None;
        let mut exhausted = true;
        for item in store.scan(space, &lo, Some(&hi), reverse) {
            let (k, v) = item.map_err(storage_err)?;
            *steps += 1;
            self.keys_examined += 1;
            last = Some(k.to_vec());
            if let Some((record, doc)) = load(&k, &v)? {
                self.docs_examined += 1;
                if let Some(doc) = self.accept(matcher, doc)? {
                    out.push((record, doc));
                }
            }
            if out.len() - start_len >= want || *steps >= MAX_KEYS_PER_STEP {
                exhausted = false;
                break;
            }
        }
        if let Some(l) = last {
            self.position = Some(l);
        }
        if exhausted {
            self.done = true;
        }
        Ok(())
    }

    /// A capped collection's documents in insertion order, as stored BSON (never
    /// decoded): the tailable getMore of an unfiltered cursor (see
    /// `Cursor::next_raw_batch`). Appends up to `want` documents and at most
    /// `max_bytes` of them (the first document of an empty `out` always), continuing
    /// after the saved position; a
    /// document that does not fit is left for the next call. Like `next_batch`, marks
    /// the scan done when it reaches the end.
    ///
    /// What `memory` offers is used in place of storage (see [`FromMemory`]).
    pub fn next_raw_natural(
        &mut self,
        store: &Store,
        memory: FromMemory<'_>,
        meta: &CollMeta,
        limits: (usize, usize),
        out: &mut Vec<Arc<bson::RawDocumentBuf>>,
    ) -> Result<()> {
        let before = (self.keys_examined, self.docs_examined);
        let r = self.next_raw_natural_steps(store, memory, meta, limits, out);
        self.count_examined(before);
        r
    }

    fn next_raw_natural_steps(
        &mut self,
        store: &Store,
        memory: FromMemory<'_>,
        meta: &CollMeta,
        (want, max_bytes): (usize, usize),
        out: &mut Vec<Arc<bson::RawDocumentBuf>>,
    ) -> Result<()> {
        let FromMemory {
            recent,
            unmodified_after,
            evicted,
        } = memory;
        let coll_id = meta.id;
        assert!(
            matches!(self.access, Access::NaturalScan { reverse: false }),
            "a raw scan runs over a capped collection in insertion order"
        );
        tailstream_query::script::Operation::check_current()?;
        let limit = want.min(MAX_KEYS_PER_STEP);
        if let Some(found) = self.recent_inserts(recent, unmodified_after, meta, limit) {
            // Checked after the read: the position still there, nothing after it was
            // evicted (eviction goes oldest first), so every document read is live.
            // Above the eviction mark it is known to be there without reading it.
            let kept = self.position.as_deref().and_then(keys::natural_key_time);
            if !kept.is_some_and(|ts| evicted.keeps(coll_id, ts)) {
                self.check_position(store, Space::Natural)?;
            }
            self.take_recent_inserts(coll_id, found, (limit, max_bytes), out);
            return Ok(());
        }
        self.check_position(store, Space::Natural)?;
        let prefix = coll_id.to_be_bytes();
        let upper = prefix_successor(&prefix).expect("collection prefix");
        let (lo, hi) = resume_bounds(&prefix, &upper, self.position.as_deref(), false);
        let (start_len, mut bytes) = (out.len(), 0usize);
        let mut exhausted = true;
        for (steps, item) in store
            .scan(Space::Natural, &lo, Some(&hi), false)
            .enumerate()
        {
            let (k, id_ks) = item.map_err(storage_err)?;
            if out.len() - start_len >= want || steps >= MAX_KEYS_PER_STEP {
                exhausted = false;
                break;
            }
            self.keys_examined += 1;
            let unmodified = keys::natural_key_time(&k)
                .filter(|ts| unmodified_after.is_some_and(|after| *ts > after))
                .and_then(|ts| Some((recent?, ts)))
                .and_then(|(recent, ts)| unmodified_insert(recent, ts, meta));
            let raw = match unmodified {
                Some(raw) => Some(raw),
                // A dangling entry (its document deleted) is skipped.
                None => fetch_raw(store, recent, coll_id, &id_ks)?,
            };
            if let Some(raw) = raw {
                let size = raw.as_bytes().len();
                if !out.is_empty() && bytes + size > max_bytes {
                    exhausted = false;
                    break;
                }
                self.docs_examined += 1;
                bytes += size;
                out.push(raw);
            }
            self.position = Some(k.to_vec());
        }
        if exhausted {
            self.done = true;
        }
        Ok(())
    }

    /// The documents inserted into `meta`'s collection after the saved position, in
    /// insertion order (at most `limit`), from the recent
    /// oplog's insert entries: no iterator, no key read (a tailable getMore of the bus
    /// opened a RocksDB iterator and stepped it; 11,800 of the 102,700 instructions of
    /// a message read by 8 consumers, callgrind 2026-11-28).
    ///
    /// None (read storage) unless the ring holds every entry after the position and
    /// every document inserted since is as inserted (`unmodified_after`, see
    /// `Engine::capped_modified`): then the collection's documents after the position
    /// are exactly these inserts (a natural key's time is its insert's), less what
    /// eviction took, which the caller rules out by finding the position still there.
    /// Any other entry naming the collection (an update, a delete, a command) or an
    /// insert kept without its bytes sends the read to storage too.
    fn recent_inserts(
        &self,
        recent: Option<&RecentOplog>,
        unmodified_after: Option<ClusterTime>,
        meta: &CollMeta,
        limit: usize,
    ) -> Option<Vec<(ClusterTime, Arc<bson::RawDocumentBuf>)>> {
        let after = keys::natural_key_time(self.position.as_deref()?)?;
        if unmodified_after.is_none_or(|u| u > after) {
            return None;
        }
        let entries = meta.ns.with_full(|ns| {
            recent?.read(after.next(), ClusterTime::MAX, limit, |e| {
                e.namespaces.iter().any(|n| n == ns)
            })
        })?;
        let uuid = meta.uuid.bytes();
        entries
            .iter()
            .map(|e| {
                let inserted = e.inserted()?;
                (inserted.ui == uuid).then(|| (e.ts, Arc::clone(&inserted.doc)))
            })
            .collect()
    }

    /// Appends what [`Scan::recent_inserts`] found, up to `max_bytes` (the first
    /// document of an empty `out` always), moving the position to the last taken; the
    /// scan is done when all were taken and fewer than `limit` (what was asked) were found.
    fn take_recent_inserts(
        &mut self,
        coll_id: u32,
        found: Vec<(ClusterTime, Arc<bson::RawDocumentBuf>)>,
        (limit, max_bytes): (usize, usize),
        out: &mut Vec<Arc<bson::RawDocumentBuf>>,
    ) {
        let (count, mut bytes) = (found.len(), 0usize);
        out.reserve(count);
        let mut taken = 0;
        for (ts, raw) in found {
            let size = raw.as_bytes().len();
            if !out.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            out.push(raw);
            self.position = Some(keys::natural_key(coll_id, ts).to_vec());
            taken += 1;
        }
        self.keys_examined += taken as u64;
        self.docs_examined += taken as u64;
        self.done = taken == count && count < limit;
    }

    /// A capped scan (natural order, the oplog) whose position was evicted or trimmed
    /// fails, as mongod's does, rather than silently skipping what was lost after it.
    fn check_position(&self, store: &Store, space: Space) -> Result<()> {
        if let Some(pos) = &self.position {
            if store.get(space, pos).map_err(storage_err)?.is_none() {
                return Err(position_lost());
            }
        }
        Ok(())
    }

    /// Every matching document.
    pub fn collect_all(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
    ) -> Result<Vec<(Vec<u8>, Document)>> {
        let mut out = Vec::new();
        self.for_each_match(store, coll_id, matcher, |m| out.push(m))?;
        Ok(out)
    }

    /// Hands every matching document (its `_id` key and the document) to `take`, one
    /// step's batch held at a time: for readers that keep less than every match (an
    /// in-memory sort with a limit, `distinct`, `findAndModify`'s first in sort order).
    pub fn for_each_match(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
        mut take: impl FnMut((Vec<u8>, Document)),
    ) -> Result<()> {
        self.try_for_each_match(store, coll_id, matcher, |m| {
            take(m);
            Ok(())
        })
    }

    /// [`Scan::for_each_match`] with a `take` that may fail: the scan stops at its
    /// first error (a sort past its memory limit that may not spill).
    pub fn try_for_each_match(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
        mut take: impl FnMut((Vec<u8>, Document)) -> Result<()>,
    ) -> Result<()> {
        let mut batch = Vec::new();
        while !self.done {
            self.next_batch(store, coll_id, matcher, usize::MAX, &mut batch)?;
            for m in batch.drain(..) {
                take(m)?;
            }
        }
        Ok(())
    }
}

fn position_lost() -> Error {
    Error::new(
        codes::CAPPED_POSITION_LOST,
        "CollectionScan died due to position in capped collection being deleted",
    )
}

/// What a raw tailable read ([`Scan::next_raw_natural`]) may take from memory instead
/// of storage.
#[derive(Clone, Copy)]
pub struct FromMemory<'a> {
    /// The newest oplog entries: the documents inserted after the position.
    pub recent: Option<&'a RecentOplog>,
    /// A document inserted after this time whose insert entry `recent` holds is taken
    /// from there without reading the collection (see `Engine::capped_modified`).
    pub unmodified_after: Option<ClusterTime>,
    /// A position above its collection's mark is still stored (see `core::evicted`).
    pub evicted: &'a EvictionMarks,
}

/// Bounds of the rest of a range after `position` (exclusive).
fn resume_bounds(
    lo: &[u8],
    hi: &[u8],
    position: Option<&[u8]>,
    reverse: bool,
) -> (Vec<u8>, Vec<u8>) {
    match position {
        None => (lo.to_vec(), hi.to_vec()),
        Some(p) if !reverse => {
            let mut next = p.to_vec();
            next.push(0); // the smallest key after p
            (next, hi.to_vec())
        }
        Some(p) => (lo.to_vec(), p.to_vec()),
    }
}

pub fn fetch(store: &Store, coll_id: u32, id_ks: &[u8]) -> Result<Option<Document>> {
    let key = keys::doc_key(coll_id, id_ks);
    match store.get(Space::Docs, &key).map_err(storage_err)? {
        Some(v) => Ok(Some(load_stored(store, &key, &v)?)),
        None => Ok(None),
    }
}

/// The document inserted at `ts` into `meta`'s collection, from the insert's entry in
/// `recent` (None when the ring does not hold it, or the entry at `ts` is not that
/// insert). Only for a document known unmodified since (see `Engine::capped_modified`).
fn unmodified_insert(
    recent: &RecentOplog,
    ts: ClusterTime,
    meta: &CollMeta,
) -> Option<Arc<bson::RawDocumentBuf>> {
    let entry = recent.get(ts)?;
    // Split off the entry once for every reader (see `RecentEntry::inserted`).
    let inserted = entry.inserted()?;
    (inserted.ui == meta.uuid.bytes()).then(|| Arc::clone(&inserted.doc))
}

/// A stored document's BSON by `_id`, never decoded into a `Document` (see
/// [`load_stored`] for where it may be).
/// An inserted document's oplog entry comes from `recent` when it holds it (no storage
/// read).
pub fn fetch_raw(
    store: &Store,
    recent: Option<&RecentOplog>,
    coll_id: u32,
    id_ks: &[u8],
) -> Result<Option<Arc<bson::RawDocumentBuf>>> {
    let key = keys::doc_key(coll_id, id_ks);
    let Some(v) = store.get(Space::Docs, &key).map_err(storage_err)? else {
        return Ok(None);
    };
    let corrupt = |e: bson::raw::Error| Error::internal(format!("corrupt stored document: {e}"));
    let owned = |raw: &bson::RawDocument| Ok(Some(Arc::new(raw.to_owned())));
    if let Some(entry) = keys::parse_doc_pointer(&v).and_then(|ts| recent?.get(ts)) {
        // The document of the insert the value points at, shared by every reader.
        if let Some(inserted) = entry.inserted() {
            return Ok(Some(Arc::clone(&inserted.doc)));
        }
        if let Some(bytes) = &entry.bytes {
            return owned(inserted_document(bytes)?);
        }
    }
    match stored_bytes(store, &v) {
        Ok(StoredDoc::Inline) => bson::RawDocumentBuf::from_bytes(v.to_vec())
            .map(|d| Some(Arc::new(d)))
            .map_err(corrupt),
        Ok(StoredDoc::InOplog(entry)) => owned(inserted_document(&entry)?),
        // Trimmed meanwhile: the trim copied the document into the collection first.
        Err(e) => match store.get(Space::Docs, &key).map_err(storage_err)? {
            Some(v) if keys::parse_doc_pointer(&v).is_none() => {
                bson::RawDocumentBuf::from_bytes(v.to_vec())
                    .map(|d| Some(Arc::new(d)))
                    .map_err(corrupt)
            }
            _ => Err(e),
        },
    }
}

/// A document from its `Docs` key and value: the BSON itself, or the `o` of the oplog
/// entry the value points at. If a trim removed that entry meanwhile, it copied the
/// document into the collection first, so the key is read again.
pub fn load_stored(store: &Store, key: &[u8], value: &[u8]) -> Result<Document> {
    match stored_bytes(store, value) {
        Ok(StoredDoc::Inline) => decode(value),
        Ok(StoredDoc::InOplog(entry)) => {
            let raw = inserted_document(&entry)?;
            Document::try_from(raw)
                .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))
        }
        Err(e) => match store.get(Space::Docs, key).map_err(storage_err)? {
            Some(v) if keys::parse_doc_pointer(&v).is_none() => decode(&v),
            _ => Err(e),
        },
    }
}

/// Where a stored document's bytes are.
pub enum StoredDoc {
    Inline,
    /// The oplog entry (its `o` field is the document).
    InOplog(Vec<u8>),
}

pub fn stored_bytes(store: &Store, value: &[u8]) -> Result<StoredDoc> {
    let Some(ts) = keys::parse_doc_pointer(value) else {
        return Ok(StoredDoc::Inline);
    };
    match store
        .get(Space::Oplog, &keys::oplog_key(ts))
        .map_err(storage_err)?
    {
        Some(entry) => Ok(StoredDoc::InOplog(entry)),
        None => Err(Error::internal(format!(
            "document points at oplog entry {ts} which is gone"
        ))),
    }
}

/// The `o` field (the inserted document) of an insert oplog entry.
pub fn inserted_document(entry: &[u8]) -> Result<&bson::RawDocument> {
    let raw = bson::RawDocument::from_bytes(entry)
        .map_err(|e| Error::internal(format!("corrupt oplog entry: {e}")))?;
    raw.get_document("o")
        .map_err(|e| Error::internal(format!("oplog entry without a document: {e}")))
}

pub fn decode(bytes: &[u8]) -> Result<Document> {
    // Through the raw form: about 15% faster than `from_reader`'s serde path.
    bson::RawDocument::from_bytes(bytes)
        .and_then(Document::try_from)
        .map_err(|e| {
            Error::new(
                codes::INTERNAL_ERROR,
                format!("corrupt stored document: {e}"),
            )
        })
}
/// A filter with the `let` variables bound into its `$expr` parts, and the variables.
pub(crate) fn bind_let(
    filter: &Document,
    let_vars: Option<&Document>,
) -> Result<(Document, tailstream_query::expr::Variables)> {
    match let_vars {
        Some(l) if !l.is_empty() => {
            let vars = tailstream_query::expr::let_variables(l)?;
            Ok((
                tailstream_query::pipeline::substitute_vars(filter, &vars),
                vars,
            ))
        }
        _ => Ok((filter.clone(), tailstream_query::expr::Variables::default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::namespace::Namespace;
    use crate::core::testing::TestEngine;
    use bson::doc;

    /// A collection `db.c` with these secondary indexes (ids from 10).
    fn meta_with(specs: &[Document]) -> CollMeta {
        meta_with_options(specs, doc! {})
    }

    fn meta_with_options(specs: &[Document], options: Document) -> CollMeta {
        CollMeta {
            ns: Namespace::new("db", "c"),
            id: 1,
            uuid: bson::Uuid::new(),
            options,
            indexes: specs
                .iter()
                .enumerate()
                .map(|(i, s)| Arc::new(IndexMeta::from_spec(10 + i as u32, s).unwrap()))
                .collect(),
        }
    }

    fn index(key: Document, name: &str) -> Document {
        doc! {"v": 2, "key": key, "name": name}
    }

    fn plan_for(
        meta: &CollMeta,
        filter: Document,
        sort: Option<Document>,
        hint: Option<Bson>,
    ) -> Result<Plan> {
        let matcher = Matcher::for_query(&filter)?;
        let sort = sort.map(|s| SortSpec::parse(&s)).transpose()?;
        plan(meta, &matcher, sort.as_ref(), hint.as_ref())
    }

    fn planned(meta: &CollMeta, filter: Document) -> Plan {
        plan_for(meta, filter, None, None).unwrap()
    }

    /// The index a plan scans, its ranges and direction.
    fn index_scan(p: &Plan) -> (&str, &[KeyRange], bool) {
        match &p.access {
            Access::IndexScan {
                index,
                ranges,
                reverse,
            } => (index.name.as_str(), ranges.as_slice(), *reverse),
            other => panic!("not an index scan: {other:?}"),
        }
    }

    /// The index entry key of `value` (for the document with `_id` 1).
    fn entry(index_id: u32, value: Bson, descending: bool) -> Vec<u8> {
        let mut k = KeyStringBuilder::new();
        k.append(&value, descending);
        keys::index_entry_key(index_id, k.as_bytes(), &keys::id_key(&Bson::Int32(1)))
    }

    fn within(ranges: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> bool {
        ranges
            .iter()
            .any(|(lo, hi)| lo.as_slice() <= key && key < hi.as_slice())
    }

    #[test]
    fn an_id_equality_or_in_is_a_point_lookup() {
        let m = meta_with(&[]);
        let p = planned(&m, doc! {"_id": 5});
        assert!(
            matches!(&p.access, Access::IdPoints(ids) if *ids == vec![keys::id_key(&Bson::Int32(5))])
        );
        assert!(p.sorted);
        assert_eq!(p.explain(), doc! {"stage": "IDHACK", "keys": 1i64});
        // $in: sorted, without duplicates.
        let p = planned(&m, doc! {"_id": {"$in": [3, 1, 3]}});
        let expected = vec![keys::id_key(&Bson::Int32(1)), keys::id_key(&Bson::Int32(3))];
        assert!(matches!(&p.access, Access::IdPoints(ids) if *ids == expected));
        // A descending _id sort is not the points' order.
        let p = plan_for(&m, doc! {"_id": 5}, Some(doc! {"_id": -1}), None).unwrap();
        assert!(matches!(p.access, Access::IdPoints(_)) && !p.sorted);
    }

    /// Values an exact lookup cannot answer: arrays and null (they match more than
    /// themselves), regexes, ranges, and strings under a collation.
    #[test]
    fn other_id_conditions_scan() {
        let m = meta_with(&[]);
        for filter in [
            doc! {"_id": null},
            doc! {"_id": [1]},
            doc! {"_id": {"$regex": "^a"}},
            doc! {"_id": {"$gt": 1}},
            doc! {"_id": {"$in": [1, null]}},
        ] {
            let p = planned(&m, filter.clone());
            assert!(
                matches!(p.access, Access::CollScan { reverse: false }),
                "{filter}"
            );
        }
        let collator =
            tailstream_query::collation::Collator::parse(&doc! {"locale": "en", "strength": 2})
                .unwrap();
        let collated = |filter: Document| {
            let matcher = Matcher::for_query_with_collation(&filter, collator.clone()).unwrap();
            plan(&m, &matcher, None, None).unwrap().access
        };
        assert!(matches!(
            collated(doc! {"_id": "a"}),
            Access::CollScan { .. }
        ));
        assert!(matches!(collated(doc! {"_id": 5}), Access::IdPoints(_)));
    }

    #[test]
    fn an_equality_is_preferred_to_an_in_and_an_in_to_a_range() {
        let m = meta_with(&[index(doc! {"a": 1}, "a_1"), index(doc! {"b": 1}, "b_1")]);
        let p = planned(&m, doc! {"a": {"$gt": 1}, "b": 5});
        assert_eq!(index_scan(&p).0, "b_1");
        let p = planned(&m, doc! {"a": {"$in": [1, 2]}, "b": {"$gt": 1}});
        let (name, ranges, _) = index_scan(&p);
        assert_eq!((name, ranges.len()), ("a_1", 2));
        let p = planned(&m, doc! {"a": {"$lt": 0}, "c": 1});
        assert_eq!(index_scan(&p).0, "a_1");
        // No index on the field: a collection scan.
        assert!(matches!(
            planned(&m, doc! {"c": 1}).access,
            Access::CollScan { .. }
        ));
    }

    /// A range's bounds: its ends as the operators say, and only its operand's type.
    #[test]
    fn a_range_is_bounded_by_its_operators_and_its_type() {
        let m = meta_with(&[index(doc! {"a": 1}, "a_1")]);
        let p = planned(&m, doc! {"a": {"$gt": 5, "$lte": 10}});
        let (_, ranges, reverse) = index_scan(&p);
        assert!(!reverse);
        assert_eq!(ranges.len(), 1);
        let inside = |v: Bson| within(ranges, &entry(10, v, false));
        assert!(!inside(Bson::Int32(5)));
        assert!(inside(Bson::Double(5.5)));
        assert!(inside(Bson::Int64(10)));
        assert!(!inside(Bson::Double(10.5)));

        let p = planned(&m, doc! {"a": {"$gt": 5}});
        let (_, ranges, _) = index_scan(&p);
        let inside = |v: Bson| within(ranges, &entry(10, v, false));
        assert!(inside(Bson::Double(f64::INFINITY)));
        assert!(
            !inside(Bson::String("6".into())),
            "strings are another type"
        );
        let p = planned(&m, doc! {"a": {"$lt": "m"}});
        let (_, ranges, _) = index_scan(&p);
        let inside = |v: Bson| within(ranges, &entry(10, v, false));
        assert!(inside(Bson::String(String::new())));
        assert!(inside(Bson::String("l".into())));
        assert!(!inside(Bson::String("m".into())));
        assert!(!inside(Bson::Int32(1)), "numbers are another type");
        // Bounds that cross: nothing to scan.
        let p = planned(&m, doc! {"a": {"$gt": 10, "$lt": 5}});
        assert!(index_scan(&p).1.is_empty());
    }

    #[test]
    fn a_descending_index_inverts_its_bounds() {
        let m = meta_with(&[index(doc! {"a": -1}, "a_-1")]);
        let p = planned(&m, doc! {"a": {"$gte": 2, "$lt": 4}});
        let (_, ranges, _) = index_scan(&p);
        let inside = |v: i32| within(ranges, &entry(10, Bson::Int32(v), true));
        assert_eq!(
            (1..=5).map(inside).collect::<Vec<_>>(),
            vec![false, true, true, false, false]
        );
    }

    #[test]
    fn a_sort_uses_an_index_in_either_direction() {
        let m = meta_with(&[index(doc! {"a": 1, "b": -1}, "a_1_b_-1")]);
        let sorted_by = |sort: Document| plan_for(&m, doc! {}, Some(sort), None).unwrap();
        let p = sorted_by(doc! {"a": 1});
        assert!(p.sorted);
        assert!(!index_scan(&p).2, "forwards");
        let p = sorted_by(doc! {"a": -1, "b": 1});
        assert!(p.sorted);
        assert!(index_scan(&p).2, "backwards");
        // Not the index's order: every document, sorted in memory.
        let p = sorted_by(doc! {"a": 1, "b": 1});
        assert!(matches!(p.access, Access::CollScan { .. }) && !p.sorted);
        // Documents are stored by _id: that sort needs no index.
        let p = sorted_by(doc! {"_id": -1});
        assert!(matches!(p.access, Access::CollScan { reverse: true }) && p.sorted);
        let p = sorted_by(doc! {"$natural": -1});
        assert!(matches!(p.access, Access::CollScan { reverse: true }) && p.sorted);
    }

    /// A sparse or partial index lacks documents: used only when the query cannot
    /// match those, or when hinted.
    #[test]
    fn sparse_and_partial_indexes_only_when_they_hold_every_match() {
        let m = meta_with(&[
            doc! {"v": 2, "key": {"s": 1}, "name": "s_1", "sparse": true},
            doc! {"v": 2, "key": {"p": 1}, "name": "p_1", "partialFilterExpression": {"p": {"$gt": 0}}},
        ]);
        assert!(matches!(
            planned(&m, doc! {"s": 5}).access,
            Access::CollScan { .. }
        ));
        assert_eq!(index_scan(&planned(&m, doc! {"p": 5})).0, "p_1");
        assert!(matches!(
            planned(&m, doc! {"p": -1}).access,
            Access::CollScan { .. }
        ));
        let hinted = plan_for(&m, doc! {"s": 5}, None, Some(Bson::String("s_1".into()))).unwrap();
        assert_eq!(index_scan(&hinted).0, "s_1");
    }

    #[test]
    fn a_hint_picks_the_access_path() {
        let m = meta_with(&[index(doc! {"a": 1}, "a_1"), index(doc! {"b": 1}, "b_1")]);
        let hinted = |filter: Document, hint: Bson| plan_for(&m, filter, None, Some(hint));
        // By name or key pattern, even without a condition on its field: all of it.
        let p = hinted(doc! {"b": 5}, Bson::String("a_1".into())).unwrap();
        let (name, ranges, _) = index_scan(&p);
        assert_eq!(name, "a_1");
        assert_eq!(ranges, &[full_range(10)]);
        let p = hinted(doc! {"a": 5}, Bson::Document(doc! {"a": 1})).unwrap();
        assert_eq!(index_scan(&p).1.len(), 1);
        assert_ne!(index_scan(&p).1, &[full_range(10)], "bounded by the filter");
        let p = hinted(doc! {"a": 5}, Bson::Document(doc! {"$natural": -1})).unwrap();
        assert!(matches!(p.access, Access::CollScan { reverse: true }));
        let p = hinted(doc! {"_id": 5}, Bson::String("_id_".into())).unwrap();
        assert!(matches!(p.access, Access::IdPoints(_)));
        for bad in [Bson::String("zz_1".into()), Bson::Document(doc! {"zz": 1})] {
            let e = hinted(doc! {}, bad).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (
                    codes::BAD_VALUE,
                    "hint provided does not correspond to an existing index"
                )
            );
        }
        assert_eq!(
            hinted(doc! {}, Bson::Int32(1)).unwrap_err().code,
            codes::BAD_VALUE
        );
        // Two indexes on one pattern (other collations): named, not by pattern.
        let twins = meta_with(&[
            index(doc! {"a": 1}, "a_1"),
            doc! {"v": 2, "key": {"a": 1}, "name": "a_fr", "collation": {"locale": "fr"}},
        ]);
        let e = plan_for(&twins, doc! {}, None, Some(Bson::Document(doc! {"a": 1}))).unwrap_err();
        assert_eq!(
            e.message,
            "Hint matched multiple indexes, must hint by index name"
        );
        let p = plan_for(&twins, doc! {}, None, Some(Bson::String("a_fr".into()))).unwrap();
        assert_eq!(index_scan(&p).0, "a_fr");
    }

    /// A capped collection's scans follow insertion order, unless sorted by _id.
    #[test]
    fn a_capped_collection_is_scanned_in_insertion_order() {
        let m = meta_with_options(&[], doc! {"capped": true, "size": 4096});
        assert!(matches!(
            planned(&m, doc! {"x": 1}).access,
            Access::NaturalScan { reverse: false }
        ));
        let p = plan_for(&m, doc! {}, Some(doc! {"$natural": -1}), None).unwrap();
        assert!(matches!(p.access, Access::NaturalScan { reverse: true }));
        let p = plan_for(&m, doc! {}, Some(doc! {"_id": 1}), None).unwrap();
        assert!(matches!(p.access, Access::CollScan { reverse: false }));
    }

    #[test]
    fn explain_summarises_the_plan() {
        let m = meta_with(&[doc! {"v": 2, "key": {"a": -1}, "name": "a_-1", "unique": true}]);
        let p = plan_for(
            &m,
            doc! {"a": {"$in": [1, 2, 3]}},
            Some(doc! {"a": 1}),
            None,
        )
        .unwrap();
        assert_eq!(
            p.explain(),
            doc! {"stage": "FETCH", "inputStage": {
                "stage": "IXSCAN", "keyPattern": {"a": -1}, "indexName": "a_-1",
                "isUnique": true, "isSparse": false, "isPartial": false,
                "direction": "backward", "intervals": 3i64,
            }}
        );
        assert_eq!(
            planned(&m, doc! {"b": 1}).explain(),
            doc! {"stage": "COLLSCAN", "direction": "forward"}
        );
    }

    /// explain's winning plan: a sort the access path does not give is a SORT stage
    /// over it; a collection that does not exist is EOF.
    #[test]
    fn explain_adds_the_sort_the_plan_does_not_give() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        assert_eq!(
            e.explain_find(&ns, &doc! {}, None, None, None).unwrap(),
            doc! {"stage": "EOF"}
        );
        e.insert_documents(&ns, vec![doc! {"_id": 1}], true)
            .unwrap();
        e.create_indexes(&ns, &[index(doc! {"a": 1}, "a_1")])
            .unwrap();
        let explained = |sort: Document| {
            e.explain_find(&ns, &doc! {"a": 1}, Some(&sort), None, None)
                .unwrap()
        };
        assert_eq!(explained(doc! {"a": -1}).get_str("stage").unwrap(), "FETCH");
        let sorted = explained(doc! {"b": 1});
        assert_eq!(sorted.get_str("stage").unwrap(), "SORT");
        let input = sorted.get_document("inputStage").unwrap();
        assert_eq!(
            input
                .get_document("inputStage")
                .unwrap()
                .get_str("indexName")
                .unwrap(),
            "a_1"
        );
    }

    /// An index scan read in small steps returns each match once, in index order,
    /// whatever the step (a document with several keys included).
    #[test]
    fn an_index_scan_resumes_where_its_last_step_ended() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        let docs = vec![
            doc! {"_id": 1, "a": 3},
            doc! {"_id": 2, "a": [1, 5]},
            doc! {"_id": 3, "a": 2},
            doc! {"_id": 4, "a": 9},
            doc! {"_id": 5, "a": "s"},
            doc! {"_id": 6, "a": 4},
        ];
        e.insert_documents(&ns, docs, true).unwrap();
        e.create_indexes(&ns, &[index(doc! {"a": 1}, "a_1")])
            .unwrap();
        let meta = e.collection(&ns).unwrap();
        let matcher = Matcher::for_query(&doc! {"a": {"$gte": 1, "$lt": 6}}).unwrap();
        let p = plan(&meta, &matcher, None, None).unwrap();
        assert_eq!(index_scan(&p).0, "a_1");
        for step in [1, 2, 100] {
            let mut scan = Scan::new(p.access.clone());
            let mut out = Vec::new();
            while !scan.done {
                scan.next_batch(&e.store, meta.id, &matcher, step, &mut out)
                    .unwrap();
            }
            let ids: Vec<i32> = out.iter().map(|(_, d)| d.get_i32("_id").unwrap()).collect();
            // Keys 1 (doc 2), 2, 3, 4, 5 (doc 2 again): doc 2 once, at its first key.
            assert_eq!(ids, vec![2, 3, 1, 6], "steps of {step}");
            assert_eq!(scan.keys_examined, 5, "steps of {step}");
        }
    }

    /// The oplog is read from a time on and never below the trim point (its floor),
    /// and a scan whose position the trim passed fails instead of skipping.
    #[test]
    fn an_oplog_scan_starts_at_its_time_and_stops_at_the_floor() {
        let e = TestEngine::open();
        let ns = Namespace::new("db", "c");
        let times: Vec<ClusterTime> = (0..5)
            .map(|i| {
                let out = e
                    .insert_documents(&ns, vec![doc! {"_id": i}], true)
                    .unwrap();
                out.committed.unwrap().last_ts.unwrap()
            })
            .collect();
        let inserts = Matcher::for_query(&doc! {"op": "i"}).unwrap();
        let floor = Arc::new(AtomicClusterTime::new(ClusterTime::ZERO));
        let read = |from: ClusterTime, reverse: bool| {
            let mut scan = Scan::new(Access::OplogScan {
                from,
                reverse,
                floor: Arc::clone(&floor),
            });
            scan.collect_all(&e.store, 0, &inserts).unwrap()
        };
        let ids = |found: Vec<(Vec<u8>, Document)>| -> Vec<i32> {
            found
                .iter()
                .map(|(_, d)| d.get_document("o").unwrap().get_i32("_id").unwrap())
                .collect()
        };
        assert_eq!(ids(read(times[2], false)), vec![2, 3, 4]);
        assert_eq!(ids(read(ClusterTime::ZERO, true)), vec![4, 3, 2, 1, 0]);
        floor.store(times[3], std::sync::atomic::Ordering::Release);
        assert_eq!(
            ids(read(ClusterTime::ZERO, false)),
            vec![3, 4],
            "nothing below the floor"
        );
        // A scan positioned below the floor when the trim passes it.
        floor.store(ClusterTime::ZERO, std::sync::atomic::Ordering::Release);
        let mut scan = Scan::new(Access::OplogScan {
            from: ClusterTime::ZERO,
            reverse: false,
            floor: Arc::clone(&floor),
        });
        let mut out = Vec::new();
        scan.next_batch(&e.store, 0, &inserts, 1, &mut out).unwrap();
        assert_eq!(ids(out), vec![0]);
        floor.store(times[2], std::sync::atomic::Ordering::Release);
        let err = scan
            .next_batch(&e.store, 0, &inserts, 1, &mut Vec::new())
            .unwrap_err();
        assert_eq!(err.code, codes::CAPPED_POSITION_LOST);
    }

    /// A capped scan with a position takes what was inserted after it from the recent
    /// oplog only while the ring holds every entry after it and nothing changed those
    /// documents; otherwise (no position, entries the ring no longer holds) it reads
    /// storage, with the same documents (deletes and evictions: test_capped_raw_tail.py).
    #[test]
    fn a_tail_reads_the_inserts_after_its_position_from_the_recent_oplog() {
        let t = TestEngine::open();
        let e = &t.engine;
        let ns = Namespace::new("db", "bus");
        e.create_collection(&ns, doc! {"capped": true, "size": 1 << 20})
            .unwrap();
        e.enable_recent_oplog();
        let _watch = e.recent.watch(crate::core::bus::namespace_bit("db.bus"));
        let insert = |id: i32| {
            e.insert_documents(&ns, vec![doc! {"_id": id}], true)
                .unwrap();
        };
        insert(0);
        let meta = e.collection(&ns).unwrap();
        let unmodified = || e.capped_modified.lock().get(&meta.id).copied();
        let mut scan = Scan::new(Access::NaturalScan { reverse: false });
        let ids = |docs: &[Arc<bson::RawDocumentBuf>]| -> Vec<i32> {
            docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
        };
        assert!(
            scan.recent_inserts(Some(&e.recent), unmodified(), &meta, 10)
                .is_none(),
            "no position yet: storage"
        );
        let mut out = Vec::new();
        let read = |scan: &mut Scan, out: &mut Vec<_>| {
            let memory = FromMemory {
                recent: Some(&e.recent),
                unmodified_after: unmodified(),
                evicted: &e.evicted,
            };
            scan.next_raw_natural(&e.store, memory, &meta, (10, usize::MAX), out)
                .unwrap()
        };
        read(&mut scan, &mut out);
        assert_eq!(ids(&out), [0]);
        insert(1);
        insert(2);
        let found = scan
            .recent_inserts(Some(&e.recent), unmodified(), &meta, 10)
            .expect("the ring holds both inserts");
        assert_eq!(
            found
                .iter()
                .map(|(_, d)| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(scan
            .recent_inserts(Some(&e.recent), None, &meta, 10)
            .is_none());
        assert!(scan.recent_inserts(None, unmodified(), &meta, 10).is_none());
        let one = scan
            .recent_inserts(Some(&e.recent), unmodified(), &meta, 1)
            .unwrap();
        assert_eq!(one.len(), 1, "at most as many as asked");
        read(&mut scan, &mut out);
        assert_eq!(ids(&out), [0, 1, 2]);
        assert!(scan.done);
        insert(3);
        // The ring forgets what it held (as when a snapshot is installed).
        e.recent.restart(e.last_commit_time().next());
        assert!(
            scan.recent_inserts(Some(&e.recent), unmodified(), &meta, 10)
                .is_none(),
            "the ring no longer holds what follows the position: storage"
        );
        read(&mut scan, &mut out);
        assert_eq!(ids(&out), [0, 1, 2, 3]);
    }
}

//! Query planning and execution: choose how to reach the documents (a point
//! lookup by `_id`, an index range scan, a collection scan, or the oplog), then
//! scan in resumable steps so a cursor can continue where its last batch ended
//! without holding a storage iterator between getMores.

use crate::catalog::{CollMeta, IndexMeta};
use crate::keys;
use crate::storage_err;
use bson::{Bson, Document};
use std::collections::HashSet;
use std::sync::Arc;
use tailstream_query::compare::canonical_type;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::keystring::KeyStringBuilder;
use tailstream_query::matcher::Matcher;
use tailstream_query::sort::SortSpec;
use tailstream_storage::{prefix_successor, Space, Store};

/// How documents are reached.
#[derive(Debug, Clone)]
pub enum Access {
    /// Specific `_id`s (encoded), in key order.
    IdPoints(Vec<Vec<u8>>),
    /// Every document of the collection in `_id` order.
    CollScan { reverse: bool },
    /// Ranges `[lower, upper)` of one index, in order.
    IndexScan {
        index: Arc<IndexMeta>,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
        reverse: bool,
    },
    /// The oplog from a cluster time on (`local.oplog.rs`).
    OplogScan { from: u64, reverse: bool },
    /// A capped collection in insertion order (its `Natural` entries).
    NaturalScan { reverse: bool },
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub access: Access,
    /// True when the access path already returns documents in the requested sort order.
    pub sorted: bool,
}

impl Plan {
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
                    "direction": if *reverse { "backward" } else { "forward" },
                    "intervals": ranges.len() as i64,
                }
            },
            Access::OplogScan { reverse, .. } | Access::NaturalScan { reverse } => {
                bson::doc! {"stage": "COLLSCAN", "direction": if *reverse { "backward" } else { "forward" }}
            }
        }
    }
}

/// Chooses the access path for a query on a collection. A capped collection's
/// collection scans follow insertion order, as mongod's do.
pub fn plan(
    meta: &CollMeta,
    matcher: &Matcher,
    sort: Option<&SortSpec>,
    hint: Option<&Bson>,
) -> Result<Plan> {
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
        if index.partial_filter.is_some() || index.sparse {
            // Such an index lacks some documents; only a hint makes us trust it.
            continue;
        }
        let (lead, desc) = &index.pattern.fields[0];
        if let Some((_, b)) = preds.iter().find(|(p, _)| p == lead) {
            if let Some((rank, ranges)) = bounds_to_ranges(index.id, b, *desc) {
                let reverse = sort_matches_index(sort_fields, index) == Some(true);
                let sorted =
                    sort_fields.is_empty() || sort_matches_index(sort_fields, index).is_some();
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
    }
    if let Some((_, p)) = best {
        return Ok(p);
    }
    if !sort_fields.is_empty() {
        if keyed_by_id && sort_fields.len() == 1 && sort_fields[0].0 == "_id" {
            return Ok(Plan {
                access: Access::CollScan {
                    reverse: sort_fields[0].1,
                },
                sorted: true,
            });
        }
        for index in &meta.indexes {
            if index.partial_filter.is_some() || index.sparse {
                continue;
            }
            if let Some(reverse) = sort_matches_index(sort_fields, index) {
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
        Bson::Document(d) => Some(
            meta.indexes
                .iter()
                .find(|i| tailstream_query::compare::cmp_documents(&i.key, d).is_eq())
                .cloned()
                .ok_or_else(bad_hint)?,
        ),
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
            let reverse = sort_fields.len() == 1 && sort_fields[0].0 == "_id" && sort_fields[0].1;
            let sorted =
                sort_fields.is_empty() || (sort_fields.len() == 1 && sort_fields[0].0 == "_id");
            Ok(Plan {
                access: Access::CollScan { reverse },
                sorted,
            })
        }
        Some(index) => {
            let preds = matcher.index_predicates();
            let (lead, desc) = &index.pattern.fields[0];
            let ranges = preds
                .iter()
                .find(|(p, _)| p == lead)
                .and_then(|(_, b)| bounds_to_ranges(index.id, b, *desc))
                .map(|(_, r)| r)
                .unwrap_or_else(|| vec![full_range(index.id)]);
            let m = sort_matches_index(sort_fields, &index);
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

/// Some(reverse) if scanning the index (forwards or backwards) yields the sort order.
fn sort_matches_index(sort_fields: &[(String, bool)], index: &IndexMeta) -> Option<bool> {
    if sort_fields.is_empty() || sort_fields.len() > index.pattern.fields.len() {
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
/// (0 equality, 1 $in, 2 range) to prefer the most selective.
fn bounds_to_ranges(
    index_id: u32,
    b: &tailstream_query::matcher::FieldBounds,
    desc: bool,
) -> Option<(u8, Vec<(Vec<u8>, Vec<u8>)>)> {
    let prefix = keys::index_prefix(index_id);
    let point = |v: &Bson| -> (Vec<u8>, Vec<u8>) {
        let mut k = KeyStringBuilder::new();
        k.append(v, desc);
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
        k.append(v, desc);
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
        }
    }

    /// Appends matching documents (with their record keys) to `out` until `want` are
    /// found, the scan ends, or a step limit is hit (then call again).
    pub fn next_batch(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
        want: usize,
        out: &mut Vec<(Vec<u8>, Document)>,
    ) -> Result<()> {
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
                        if matcher.matches(&doc) {
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
                                if matcher.matches(&doc) {
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
                Access::OplogScan { from, reverse } => {
                    let (from, reverse) = (*from, *reverse);
                    self.check_position(store, Space::Oplog)?;
                    let lower = keys::oplog_key(from);
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
                if matcher.matches(&doc) {
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

    /// A capped scan (natural order, the oplog) whose position was evicted or trimmed
    /// fails, as mongod's does, rather than silently skipping what was lost after it.
    fn check_position(&self, store: &Store, space: Space) -> Result<()> {
        if let Some(pos) = &self.position {
            if store.get(space, pos).map_err(storage_err)?.is_none() {
                return Err(Error::new(
                    codes::CAPPED_POSITION_LOST,
                    "CollectionScan died due to position in capped collection being deleted",
                ));
            }
        }
        Ok(())
    }

    /// Every matching document (for writes and in-memory sorts).
    pub fn collect_all(
        &mut self,
        store: &Store,
        coll_id: u32,
        matcher: &Matcher,
    ) -> Result<Vec<(Vec<u8>, Document)>> {
        let mut out = Vec::new();
        while !self.done {
            self.next_batch(store, coll_id, matcher, usize::MAX, &mut out)?;
        }
        Ok(out)
    }
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
    Document::from_reader(&mut &bytes[..]).map_err(|e| {
        Error::new(
            codes::INTERNAL_ERROR,
            format!("corrupt stored document: {e}"),
        )
    })
}

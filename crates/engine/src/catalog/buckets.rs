//! A time-series collection seen as mongod's buckets, `<db>.system.buckets.<name>`:
//! what mongodump reads and mongorestore writes.
//!
//! This server keeps measurements as inserted (see `timeseries`), so buckets are made
//! when read: the measurements grouped by meta value, in time order, a bucket opening
//! at a measurement's time rounded down to `bucketRoundingSeconds` and taking the
//! measurements of the next `bucketMaxSpanSeconds`, at most [`BUCKET_MAX_COUNT`] of
//! them. Each is mongod's uncompressed bucket (`control: {version: 1, min, max}`,
//! `meta`, `data: {<field>: {"0": v, "1": v, ...}}`) with an `_id` made from its start
//! time and meta value, so the same measurements give the same buckets on every read
//! (and on the server a dump was restored into: dbHash compares them). Inserting
//! buckets unpacks them into measurements. Compressed buckets (`control.version: 2`,
//! what mongod 7 writes) are refused.
//!
//! The buckets are built in memory: a collection whose measurements pass
//! [`MAX_BUCKETED_BYTES`] is refused with the aggregation's memory error.

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use std::collections::BTreeMap;
use tailstream_query::compare::cmp_bson;
use tailstream_query::error::{codes, Error, Result};

use crate::catalog::namespace::Namespace;

/// The prefix of a time-series collection's buckets namespace.
pub const BUCKETS_PREFIX: &str = "system.buckets.";
/// mongod's `timeseriesBucketMaxCount` default.
pub const BUCKET_MAX_COUNT: usize = 1000;
/// Measurements bucketed in memory at most (the aggregation stages' 100 MB limit).
pub const MAX_BUCKETED_BYTES: usize = 100 * 1024 * 1024;
/// mongod's code for a bucket document its buckets' schema refuses.
const DOCUMENT_VALIDATION_FAILURE: i32 = 121;

/// The time-series collection a `<db>.system.buckets.<name>` namespace stands for.
pub fn base_namespace(ns: &Namespace) -> Option<Namespace> {
    ns.coll
        .strip_prefix(BUCKETS_PREFIX)
        .filter(|name| !name.is_empty())
        .map(|name| Namespace::new(&ns.db, name))
}

/// A time-series collection's bucketing parameters (its `timeseries` options).
#[derive(Debug, Clone)]
pub struct Spec {
    pub time_field: String,
    pub meta_field: Option<String>,
    max_span_secs: i64,
    rounding_secs: i64,
}

impl Spec {
    pub fn from_options(ts: &Document) -> Spec {
        let int = |k: &str, default: i64| {
            ts.get(k)
                .and_then(|v| match v {
                    Bson::Int32(n) => Some(i64::from(*n)),
                    Bson::Int64(n) => Some(*n),
                    _ => None,
                })
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let max_span_secs = int("bucketMaxSpanSeconds", 3600);
        let rounding = match ts.get_str("granularity") {
            Ok("minutes") => 3600,
            Ok("hours") => 86_400,
            Ok(_) => 60,
            Err(_) => max_span_secs,
        };
        Spec {
            time_field: ts.get_str("timeField").unwrap_or_default().to_string(),
            meta_field: ts.get_str("metaField").ok().map(str::to_string),
            max_span_secs,
            rounding_secs: int("bucketRoundingSeconds", rounding),
        }
    }
}

/// One measurement on its way into a bucket.
struct Measurement {
    millis: i64,
    seq: usize,
    doc: Document,
}

/// Groups measurements (in the order they were stored) into buckets, in `_id` order.
pub fn make_buckets(spec: &Spec, measurements: Vec<Document>) -> Result<Vec<Document>> {
    // By meta value, keyed by its BSON bytes (equal values, equal bytes).
    let mut groups: BTreeMap<Vec<u8>, (Option<Bson>, Vec<Measurement>)> = BTreeMap::new();
    for (seq, mut doc) in measurements.into_iter().enumerate() {
        let meta = spec.meta_field.as_ref().and_then(|f| doc.remove(f));
        let millis = match doc.get(&spec.time_field) {
            Some(Bson::DateTime(t)) => t.timestamp_millis(),
            _ => continue,
        };
        let key = bson::to_vec(&doc! {"m": meta.clone().unwrap_or(Bson::Undefined)})
            .map_err(|e| Error::internal(e.to_string()))?;
        groups
            .entry(key)
            .or_insert_with(|| (meta, Vec::new()))
            .1
            .push(Measurement { millis, seq, doc });
    }
    let mut buckets = Vec::new();
    for (key, (meta, mut group)) in groups {
        group.sort_by_key(|m| (m.millis, m.seq));
        let mut start = 0;
        while start < group.len() {
            let min_secs = group[start]
                .millis
                .div_euclid(1000)
                .div_euclid(spec.rounding_secs)
                * spec.rounding_secs;
            let end_millis = (min_secs + spec.max_span_secs) * 1000;
            let mut end = start;
            while end < group.len()
                && end - start < BUCKET_MAX_COUNT
                && group[end].millis < end_millis
            {
                end += 1;
            }
            let id = bucket_id(min_secs, &key, buckets.len());
            buckets.push(bucket(
                spec,
                id,
                min_secs,
                meta.as_ref(),
                &group[start..end],
            ));
            start = end;
        }
    }
    buckets.sort_by_key(|b| b.get_object_id("_id").map(|o| o.bytes()).unwrap_or([0; 12]));
    Ok(buckets)
}

/// A bucket's `_id`: its start time (seconds, as mongod's: an ObjectId's time part),
/// then 8 bytes of the MD5 of its meta value and its place among the buckets.
fn bucket_id(min_secs: i64, meta_key: &[u8], n: usize) -> ObjectId {
    use md5::Digest as _;
    let mut hasher = md5::Md5::new();
    hasher.update(meta_key);
    hasher.update(min_secs.to_be_bytes());
    hasher.update((n as u64).to_be_bytes());
    let digest = hasher.finalize();
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&(min_secs.clamp(0, i64::from(u32::MAX)) as u32).to_be_bytes());
    bytes[4..].copy_from_slice(&digest[..8]);
    ObjectId::from_bytes(bytes)
}

/// One bucket document of `measurements` (time-ordered, meta removed).
fn bucket(
    spec: &Spec,
    id: ObjectId,
    min_secs: i64,
    meta: Option<&Bson>,
    measurements: &[Measurement],
) -> Document {
    let mut data = Document::new();
    let (mut min, mut max) = (Document::new(), Document::new());
    for (i, m) in measurements.iter().enumerate() {
        for (field, value) in &m.doc {
            let column = match data.get_mut(field) {
                Some(Bson::Document(c)) => c,
                _ => {
                    data.insert(field.clone(), Document::new());
                    match data.get_mut(field) {
                        Some(Bson::Document(c)) => c,
                        _ => unreachable!("just inserted"),
                    }
                }
            };
            column.insert(i.to_string(), value.clone());
            keep_extreme(&mut min, field, value, std::cmp::Ordering::Less);
            keep_extreme(&mut max, field, value, std::cmp::Ordering::Greater);
        }
    }
    // As mongod: the time's minimum is the bucket's rounded start.
    min.insert(
        spec.time_field.clone(),
        bson::DateTime::from_millis(min_secs * 1000),
    );
    let mut out = doc! {
        "_id": id,
        "control": {"version": 1, "min": min, "max": max},
    };
    if let Some(m) = meta {
        out.insert("meta", m.clone());
    }
    out.insert("data", data);
    out
}

fn keep_extreme(into: &mut Document, field: &str, value: &Bson, keep: std::cmp::Ordering) {
    let replace = into
        .get(field)
        .is_none_or(|cur| cmp_bson(value, cur) == keep);
    if replace {
        into.insert(field.to_string(), value.clone());
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(
        DOCUMENT_VALIDATION_FAILURE,
        format!("Document failed validation: {}", msg.into()),
    )
}

/// The measurements a bucket document holds (mongorestore's inserts into
/// `system.buckets.<name>`), with the bucket's meta value under the meta field.
pub fn unpack_bucket(spec: &Spec, bucket: &Document) -> Result<Vec<Document>> {
    let control = bucket
        .get_document("control")
        .map_err(|_| invalid("a bucket needs a 'control' object"))?;
    match control.get("version") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) => {}
        Some(Bson::Int32(2)) | Some(Bson::Int64(2)) => {
            return Err(Error::new(
                codes::BAD_VALUE,
                "compressed time-series buckets (control.version 2) are not supported: \
                 dump the collection from this server, whose buckets are uncompressed",
            ))
        }
        _ => return Err(invalid("control.version must be 1")),
    }
    let data = bucket
        .get_document("data")
        .map_err(|_| invalid("a bucket needs a 'data' object"))?;
    let times = data.get_document(&spec.time_field).map_err(|_| {
        invalid(format!(
            "a bucket needs the time field '{}'",
            spec.time_field
        ))
    })?;
    let count = times.len();
    if count > BUCKET_MAX_COUNT * 10 {
        return Err(invalid("too many measurements in one bucket"));
    }
    let meta = bucket.get("meta");
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let key = i.to_string();
        let mut m = Document::new();
        for (field, column) in data {
            let Bson::Document(column) = column else {
                return Err(invalid(format!("data.{field} must be an object")));
            };
            if let Some(v) = column.get(&key) {
                m.insert(field.clone(), v.clone());
            }
        }
        if !matches!(m.get(&spec.time_field), Some(Bson::DateTime(_))) {
            return Err(invalid(format!(
                "measurement {i} has no date in '{}'",
                spec.time_field
            )));
        }
        if let (Some(f), Some(v)) = (&spec.meta_field, meta) {
            m.insert(f.clone(), v.clone());
        }
        out.push(m);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec::from_options(
            &doc! {"timeField": "t", "metaField": "m", "granularity": "seconds", "bucketMaxSpanSeconds": 3600},
        )
    }

    fn at(secs: i64) -> Bson {
        Bson::DateTime(bson::DateTime::from_millis(secs * 1000))
    }

    #[test]
    fn measurements_group_by_meta_and_window_and_come_back_the_same() {
        let base = 1_790_000_000i64; // a minute boundary: rounding is to 60 s
        let base = base - base % 60;
        let mut docs = Vec::new();
        for i in 0..10i64 {
            docs.push(doc! {"t": at(base + i * 1000), "m": format!("h{}", i % 2), "v": i});
        }
        let buckets = make_buckets(&spec(), docs.clone()).unwrap();
        // Per host, 1,000 s apart within 3,600 s windows: h0 at 0, 2000, 4000 → two
        // buckets (0-3600, 4000-...), and so on.
        assert!(buckets.len() >= 4, "{buckets:?}");
        let again = make_buckets(&spec(), docs.clone()).unwrap();
        assert_eq!(buckets, again, "the same measurements, the same buckets");
        let first = &buckets[0];
        assert_eq!(
            first
                .get_document("control")
                .unwrap()
                .get_i32("version")
                .unwrap(),
            1
        );
        let mut unpacked: Vec<Document> = buckets
            .iter()
            .flat_map(|b| unpack_bucket(&spec(), b).unwrap())
            .collect();
        unpacked.sort_by_key(|d| d.get_i64("v").unwrap());
        for (d, orig) in unpacked.iter().zip(&docs) {
            assert_eq!(d.get("t"), orig.get("t"));
            assert_eq!(d.get("m"), orig.get("m"));
            assert_eq!(d.get("v"), orig.get("v"));
        }
        assert_eq!(unpacked.len(), 10);
        // Bucketing the unpacked measurements gives the same buckets (dbHash after a
        // dump and restore).
        assert_eq!(make_buckets(&spec(), unpacked).unwrap(), buckets);
    }

    #[test]
    fn a_bucket_holds_at_most_bucket_max_count_and_min_max_are_kept() {
        let docs: Vec<Document> = (0..1500i64)
            .map(|i| doc! {"t": at(1_790_000_040 + i % 30), "v": i})
            .collect();
        let spec = Spec::from_options(
            &doc! {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600},
        );
        let buckets = make_buckets(&spec, docs).unwrap();
        assert_eq!(buckets.len(), 2);
        let control = buckets[0].get_document("control").unwrap();
        assert!(control.get_document("min").unwrap().get_i64("v").is_ok());
        assert!(!buckets[0].contains_key("meta"));
    }

    #[test]
    fn bad_buckets_are_refused() {
        let s = spec();
        assert_eq!(unpack_bucket(&s, &doc! {}).unwrap_err().code, 121);
        assert_eq!(
            unpack_bucket(&s, &doc! {"control": {"version": 2}, "data": {}})
                .unwrap_err()
                .code,
            2
        );
        assert_eq!(
            unpack_bucket(
                &s,
                &doc! {"control": {"version": 1}, "data": {"x": {"0": 1}}}
            )
            .unwrap_err()
            .code,
            121
        );
        assert_eq!(
            unpack_bucket(
                &s,
                &doc! {"control": {"version": 1}, "data": {"t": {"0": 1}}}
            )
            .unwrap_err()
            .code,
            121
        );
        assert_eq!(
            base_namespace(&Namespace::new("d", "system.buckets.m")),
            Some(Namespace::new("d", "m"))
        );
        assert_eq!(
            base_namespace(&Namespace::new("d", "system.buckets.")),
            None
        );
    }
}

//! `$bucketAuto`: documents sorted by their `groupBy` value and cut into `buckets`
//! buckets of about the same size (equal values never split), each bucket's `_id` its
//! `{min, max}`, optionally on a granularity's preferred numbers
//! (document_source_bucket_auto.cpp, granularity_rounder_*.cpp).

use super::super::group::{AccSpec, AccState};
use super::type_name;
use super::Stage;
use crate::compare::{as_f64, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use bson::{doc, Bson, Document};
use std::cmp::Ordering;

pub(crate) struct BucketAutoStage {
    group_by: Expr,
    buckets: usize,
    output: Vec<AccSpec>,
    granularity: Option<Granularity>,
}

/// `$bucketAuto: {groupBy, buckets, output, granularity}`.
pub(crate) fn parse_bucket_auto(arg: &Bson) -> Result<Stage> {
    let Bson::Document(d) = arg else {
        return Err(Error::location(
            40240,
            format!(
                "The argument to $bucketAuto must be an object, but found type: {}",
                type_name(arg)
            ),
        ));
    };
    let (mut group_by, mut buckets, mut granularity) = (None, None, None);
    let mut output = Vec::new();
    for (k, v) in d {
        match k.as_str() {
            "groupBy" => group_by = Some(parse_group_by(v)?),
            "buckets" => buckets = Some(parse_buckets(v)?),
            "output" => {
                let Bson::Document(o) = v else {
                    return Err(Error::location(
                        40244,
                        format!(
                            "The $bucketAuto 'output' field must be an object, but found type: {}",
                            type_name(v)
                        ),
                    ));
                };
                for (name, spec) in o {
                    output.push(AccSpec::parse(name, spec)?);
                }
            }
            "granularity" => {
                let Bson::String(g) = v else {
                    return Err(Error::location(
                        40261,
                        format!(
                            "The $bucketAuto 'granularity' field must be a string, but found type: {}",
                            type_name(v)
                        ),
                    ));
                };
                granularity = Some(Granularity::parse(g)?);
            }
            _ => {
                return Err(Error::location(
                    40245,
                    format!("Unrecognized option to $bucketAuto: {k}"),
                ))
            }
        }
    }
    let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
        return Err(Error::location(
            40246,
            "$bucketAuto requires 'groupBy' and 'buckets' to be specified",
        ));
    };
    if buckets <= 0 {
        return Err(Error::location(
            40243,
            format!("The $bucketAuto 'buckets' field must be greater than 0, but found: {buckets}"),
        ));
    }
    if output.is_empty() {
        output.push(AccSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?);
    }
    Ok(Stage::BucketAuto(Box::new(BucketAutoStage {
        group_by,
        buckets: buckets as usize,
        output,
        granularity,
    })))
}

/// `groupBy`: a `$`-path or an expression object.
fn parse_group_by(v: &Bson) -> Result<Expr> {
    let ok = match v {
        Bson::String(s) => s.len() > 1 && s.starts_with('$'),
        Bson::Document(d) => d.keys().next().is_some_and(|k| k.starts_with('$')),
        _ => false,
    };
    if !ok {
        return Err(Error::location(
            40239,
            format!(
                "The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or an expression object, but found: {}",
                crate::render::bson_to_string(v)
            ),
        ));
    }
    Expr::parse(v)
}

/// `buckets`: a number representable as a 32-bit integer.
fn parse_buckets(v: &Bson) -> Result<i64> {
    if !is_number(v) {
        return Err(Error::location(
            40241,
            format!(
                "The $bucketAuto 'buckets' field must be a numeric value, but found type: {}",
                type_name(v)
            ),
        ));
    }
    crate::expr::num::as_exact_i32(v)
        .map(i64::from)
        .ok_or_else(|| {
            Error::location(
                40242,
                format!(
                    "The $bucketAuto 'buckets' field must be representable as a 32-bit integer, but found {}",
                    crate::render::double_nice(as_f64(v).unwrap_or(f64::NAN))
                ),
            )
        })
}

/// A bucket being filled: its bounds and its accumulators.
struct Bucket {
    min: Bson,
    max: Bson,
    states: Vec<AccState>,
    /// Documents in it.
    taken: usize,
    /// With a granularity, once it holds its share: the preferred number above its
    /// largest value then, under which further documents still join it.
    boundary: Option<Bson>,
}

/// What a bucket needs of a document: its `groupBy` value and each output
/// accumulator's argument (None: missing).
pub type Keyed = (Bson, Vec<Option<Bson>>);

/// The memory a [`Keyed`] takes (as `bson_size::memory_len` counts a document's).
pub fn keyed_memory_len((key, args): &Keyed) -> usize {
    use crate::bson_size::{heap_len, BSON_SLOT_BYTES};
    let args_len: usize = args
        .iter()
        .map(|a| BSON_SLOT_BYTES + a.as_ref().map_or(0, heap_len))
        .sum();
    BSON_SLOT_BYTES + heap_len(key) + args_len
}

/// The field of a sort record ([`record`]) that orders it: `{v:
/// <groupBy value>}`, wrapped so that an array value is ordered as a whole, as this
/// stage orders values, not by its least element as a sort orders an array field.
const BUCKET_AUTO_ORDER_FIELD: &str = "k";
/// The field of a sort record holding the arguments, each in a one-element array (an
/// empty one when missing).
const RECORD_ARGS_FIELD: &str = "a";

impl BucketAutoStage {
    /// A document's `groupBy` value, checked against the granularity, and its
    /// accumulators' arguments.
    pub(crate) fn keyed(&self, doc: &Document, vars: &Variables) -> Result<Keyed> {
        let key = self.group_by.evaluate_value(doc, vars)?;
        if self.granularity.is_some() {
            check_granularity_key(&key)?;
        }
        let args = self
            .output
            .iter()
            .map(|a| a.arg.evaluate(doc, vars))
            .collect::<Result<_>>()?;
        Ok((key, args))
    }
}

/// A [`Keyed`] as a document, for a sort on disk by [`BUCKET_AUTO_ORDER_FIELD`].
pub fn record((key, args): Keyed) -> Document {
    let args: Vec<Bson> = args
        .into_iter()
        .map(|a| Bson::Array(a.into_iter().collect()))
        .collect();
    doc! {BUCKET_AUTO_ORDER_FIELD: {"v": key}, RECORD_ARGS_FIELD: args}
}

/// A sort record's value and arguments (see [`record`]).
pub(crate) fn unpack(mut record: Document) -> Result<Keyed> {
    let malformed = || Error::internal("a $bucketAuto sort record is malformed");
    let key = match record.remove(BUCKET_AUTO_ORDER_FIELD) {
        Some(Bson::Document(mut k)) => k.remove("v").ok_or_else(malformed)?,
        _ => return Err(malformed()),
    };
    let Some(Bson::Array(args)) = record.remove(RECORD_ARGS_FIELD) else {
        return Err(malformed());
    };
    let args = args
        .into_iter()
        .map(|a| match a {
            Bson::Array(mut one) if one.len() <= 1 => Ok(one.pop()),
            _ => Err(malformed()),
        })
        .collect::<Result<_>>()?;
    Ok((key, args))
}

/// `$bucketAuto` over documents given in `groupBy` order ([`Self::push`], or
/// [`Self::push_record`] after a sort on disk), `total` of them: each bucket takes its share (`total / buckets`, rounded; the last takes the
/// rest), then every document whose value equals its largest (or, with a granularity,
/// is below the preferred number above it), and is given once the next document
/// starts another. Holds one bucket and the buckets given.
pub struct BucketCutter<'a> {
    stage: &'a BucketAutoStage,
    vars: &'a Variables,
    /// Documents a bucket takes before it closes on a new value.
    share: usize,
    /// Buckets started so far.
    started: usize,
    open: Option<Bucket>,
    previous_max: Option<Bson>,
    out: Vec<Document>,
}

impl<'a> BucketCutter<'a> {
    pub(crate) fn new(stage: &'a BucketAutoStage, total: usize, vars: &'a Variables) -> Self {
        BucketCutter {
            stage,
            vars,
            share: ((total as f64 / stage.buckets as f64).round() as usize).max(1),
            started: 0,
            open: None,
            previous_max: None,
            out: Vec::new(),
        }
    }

    /// The next document in `groupBy` order: its value and arguments.
    pub fn push(&mut self, (key, args): Keyed) -> Result<()> {
        let Some(mut bucket) = self.open.take() else {
            return self.start(key, args);
        };
        if self.joins(&mut bucket, &key)? {
            self.add(&mut bucket, key, args)?;
            self.open = Some(bucket);
            return Ok(());
        }
        self.close(bucket, Some(&key))?;
        self.start(key, args)
    }

    /// The next sort record ([`record`]) in order.
    pub fn push_record(&mut self, record: Document) -> Result<()> {
        self.push(unpack(record)?)
    }

    /// The buckets, once every document was pushed.
    pub fn finish(mut self) -> Result<Vec<Document>> {
        if let Some(bucket) = self.open.take() {
            self.close(bucket, None)?;
        }
        Ok(self.out)
    }

    fn start(&mut self, key: Bson, args: Vec<Option<Bson>>) -> Result<()> {
        self.started += 1;
        assert!(
            self.started <= self.stage.buckets,
            "the last bucket takes the rest"
        );
        let min = match (&self.stage.granularity, &self.previous_max) {
            (Some(_), Some(p)) => p.clone(),
            (Some(g), None) => g.round_down(&key)?,
            (None, _) => key.clone(),
        };
        let empty = Document::new();
        let states = self
            .stage
            .output
            .iter()
            .map(|a| AccState::start(a, &Bson::Null, &empty, self.vars))
            .collect::<Result<_>>()?;
        let mut bucket = Bucket {
            min,
            max: key.clone(),
            states,
            taken: 0,
            boundary: None,
        };
        self.add(&mut bucket, key, args)?;
        self.open = Some(bucket);
        Ok(())
    }

    /// Whether a document of value `key` goes in the open bucket: it has not taken
    /// its share yet, or is the last one, or the value stays with it.
    fn joins(&self, bucket: &mut Bucket, key: &Bson) -> Result<bool> {
        if bucket.taken < self.share || self.started == self.stage.buckets {
            return Ok(true);
        }
        let coll = self.vars.collator.as_deref();
        let same = cmp_bson_with(key, &bucket.max, coll) == Ordering::Equal;
        let Some(g) = &self.stage.granularity else {
            return Ok(same);
        };
        if bucket.boundary.is_none() {
            bucket.boundary = Some(g.round_up(&bucket.max)?);
        }
        let boundary = bucket.boundary.as_ref().expect("set above");
        Ok(same || cmp_bson_with(boundary, key, coll) == Ordering::Greater)
    }

    fn add(&self, bucket: &mut Bucket, key: Bson, args: Vec<Option<Bson>>) -> Result<()> {
        assert_eq!(
            args.len(),
            self.stage.output.len(),
            "an argument per accumulator"
        );
        bucket.max = key;
        bucket.taken += 1;
        let coll = self.vars.collator.as_deref();
        for ((a, st), arg) in self
            .stage
            .output
            .iter()
            .zip(bucket.states.iter_mut())
            .zip(args)
        {
            st.add(a.op, arg, coll)?;
        }
        Ok(())
    }

    /// Gives the bucket; `next`: the value of the document that starts the next one.
    fn close(&mut self, mut bucket: Bucket, next: Option<&Bson>) -> Result<()> {
        // The max is the next bucket's min (exclusive).
        bucket.max = match (&self.stage.granularity, next) {
            (None, Some(next)) => next.clone(),
            (None, None) => bucket.max,
            (Some(g), next) => {
                let boundary = match bucket.boundary.take() {
                    Some(b) => b,
                    None => g.round_up(&bucket.max)?,
                };
                match next {
                    Some(next) if as_f64(&boundary) == Some(0.0) => g.round_down(next)?,
                    _ => boundary,
                }
            }
        };
        self.previous_max = Some(bucket.max.clone());
        let mut d = doc! {"_id": {"min": bucket.min, "max": bucket.max}};
        for (a, st) in self.stage.output.iter().zip(bucket.states) {
            d.insert(a.name.clone(), st.finish(a.op)?);
        }
        self.out.push(d);
        Ok(())
    }
}

/// `$bucketAuto` over all the documents (in memory; the engine sorts a large input
/// on disk and gives it to a [`BucketCutter`] itself).
pub(crate) fn bucket_auto(
    b: &BucketAutoStage,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut keyed = Vec::with_capacity(docs.len());
    for d in docs {
        keyed.push(b.keyed(&d, vars)?);
    }
    bucket_held(b, keyed, vars)
}

/// `$bucketAuto` over every document's value and arguments, held in memory: sorted
/// (stably: equal values keep the order they came in) and cut.
pub(crate) fn bucket_held(
    b: &BucketAutoStage,
    mut keyed: Vec<Keyed>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let coll = vars.collator.as_deref();
    keyed.sort_by(|x, y| cmp_bson_with(&x.0, &y.0, coll));
    let mut cutter = BucketCutter::new(b, keyed.len(), vars);
    for k in keyed {
        cutter.push(k)?;
    }
    cutter.finish()
}

/// The order of sort records ([`record`]): by value, under the collation.
pub(crate) fn record_order(vars: &Variables) -> crate::sort::SortSpec {
    crate::sort::SortSpec {
        fields: vec![(BUCKET_AUTO_ORDER_FIELD.to_string(), false)],
        collator: vars.collator.clone(),
    }
}

/// With a granularity, every `groupBy` value must be a non-negative number.
fn check_granularity_key(key: &Bson) -> Result<()> {
    if !is_number(key) {
        return Err(Error::location(
            40258,
            format!(
                "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found a value with type: {}",
                util::type_name(key)
            ),
        ));
    }
    let x = as_f64(key).unwrap_or(f64::NAN);
    if x.is_nan() {
        return Err(Error::location(
            40259,
            "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found a NaN",
        ));
    }
    if x < 0.0 {
        return Err(Error::location(
            40260,
            "$bucketAuto can specify a 'granularity' with non-negative numbers only, but found a negative number",
        ));
    }
    Ok(())
}

/// A granularity: powers of two, or a series of preferred numbers (one decade of it,
/// scaled by powers of ten).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Granularity {
    PowersOfTwo,
    Series(&'static [f64]),
}

const R5: &[f64] = &[10.0, 16.0, 25.0, 40.0, 63.0];
const R10: &[f64] = &[
    100.0, 125.0, 160.0, 200.0, 250.0, 315.0, 400.0, 500.0, 630.0, 800.0,
];
const R20: &[f64] = &[
    100.0, 112.0, 125.0, 140.0, 160.0, 180.0, 200.0, 224.0, 250.0, 280.0, 315.0, 355.0, 400.0,
    450.0, 500.0, 560.0, 630.0, 710.0, 800.0, 900.0,
];
const R40: &[f64] = &[
    100.0, 106.0, 112.0, 118.0, 125.0, 132.0, 140.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0,
    212.0, 224.0, 236.0, 250.0, 265.0, 280.0, 300.0, 315.0, 355.0, 375.0, 400.0, 425.0, 450.0,
    475.0, 500.0, 530.0, 560.0, 600.0, 630.0, 670.0, 710.0, 750.0, 800.0, 850.0, 900.0, 950.0,
];
const R80: &[f64] = &[
    103.0, 109.0, 115.0, 122.0, 128.0, 136.0, 145.0, 155.0, 165.0, 175.0, 185.0, 195.0, 206.0,
    218.0, 230.0, 243.0, 258.0, 272.0, 290.0, 307.0, 325.0, 345.0, 365.0, 387.0, 412.0, 437.0,
    462.0, 487.0, 515.0, 545.0, 575.0, 615.0, 650.0, 690.0, 730.0, 775.0, 825.0, 875.0, 925.0,
    975.0,
];
const SERIES_1_2_5: &[f64] = &[10.0, 20.0, 50.0];
const E6: &[f64] = &[10.0, 15.0, 22.0, 33.0, 47.0, 68.0];
const E12: &[f64] = &[
    10.0, 12.0, 15.0, 18.0, 22.0, 27.0, 33.0, 39.0, 47.0, 56.0, 68.0, 82.0,
];
const E24: &[f64] = &[
    10.0, 11.0, 12.0, 13.0, 15.0, 16.0, 18.0, 20.0, 22.0, 24.0, 27.0, 30.0, 33.0, 36.0, 39.0, 43.0,
    47.0, 51.0, 56.0, 62.0, 68.0, 75.0, 82.0, 91.0,
];
const E48: &[f64] = &[
    100.0, 105.0, 110.0, 115.0, 121.0, 127.0, 133.0, 140.0, 147.0, 154.0, 162.0, 169.0, 178.0,
    187.0, 196.0, 205.0, 215.0, 226.0, 237.0, 249.0, 261.0, 274.0, 287.0, 301.0, 316.0, 332.0,
    348.0, 365.0, 383.0, 402.0, 422.0, 442.0, 464.0, 487.0, 511.0, 536.0, 562.0, 590.0, 619.0,
    649.0, 681.0, 715.0, 750.0, 787.0, 825.0, 866.0, 909.0, 953.0,
];
const E96: &[f64] = &[
    100.0, 102.0, 105.0, 107.0, 110.0, 113.0, 115.0, 118.0, 121.0, 124.0, 127.0, 130.0, 133.0,
    137.0, 140.0, 143.0, 147.0, 150.0, 154.0, 158.0, 162.0, 165.0, 169.0, 174.0, 178.0, 182.0,
    187.0, 191.0, 196.0, 200.0, 205.0, 210.0, 215.0, 221.0, 226.0, 232.0, 237.0, 243.0, 249.0,
    255.0, 261.0, 267.0, 274.0, 280.0, 287.0, 294.0, 301.0, 309.0, 316.0, 324.0, 332.0, 340.0,
    348.0, 357.0, 365.0, 374.0, 383.0, 392.0, 402.0, 412.0, 422.0, 432.0, 442.0, 453.0, 464.0,
    475.0, 487.0, 499.0, 511.0, 523.0, 536.0, 549.0, 562.0, 576.0, 590.0, 604.0, 619.0, 634.0,
    649.0, 665.0, 681.0, 698.0, 715.0, 732.0, 750.0, 768.0, 787.0, 806.0, 825.0, 845.0, 866.0,
    887.0, 909.0, 931.0, 953.0, 976.0,
];
const E192: &[f64] = &[
    100.0, 101.0, 102.0, 104.0, 105.0, 106.0, 107.0, 109.0, 110.0, 111.0, 113.0, 114.0, 115.0,
    117.0, 118.0, 120.0, 121.0, 123.0, 124.0, 126.0, 127.0, 129.0, 130.0, 132.0, 133.0, 135.0,
    137.0, 138.0, 140.0, 142.0, 143.0, 145.0, 147.0, 149.0, 150.0, 152.0, 154.0, 156.0, 158.0,
    160.0, 162.0, 164.0, 165.0, 167.0, 169.0, 172.0, 174.0, 176.0, 178.0, 180.0, 182.0, 184.0,
    187.0, 189.0, 191.0, 193.0, 196.0, 198.0, 200.0, 203.0, 205.0, 208.0, 210.0, 213.0, 215.0,
    218.0, 221.0, 223.0, 226.0, 229.0, 232.0, 234.0, 237.0, 240.0, 243.0, 246.0, 249.0, 252.0,
    255.0, 258.0, 261.0, 264.0, 267.0, 271.0, 274.0, 277.0, 280.0, 284.0, 287.0, 291.0, 294.0,
    298.0, 301.0, 305.0, 309.0, 312.0, 316.0, 320.0, 324.0, 328.0, 332.0, 336.0, 340.0, 344.0,
    348.0, 352.0, 357.0, 361.0, 365.0, 370.0, 374.0, 379.0, 383.0, 388.0, 392.0, 397.0, 402.0,
    407.0, 412.0, 417.0, 422.0, 427.0, 432.0, 437.0, 442.0, 448.0, 453.0, 459.0, 464.0, 470.0,
    475.0, 481.0, 487.0, 493.0, 499.0, 505.0, 511.0, 517.0, 523.0, 530.0, 536.0, 542.0, 549.0,
    556.0, 562.0, 569.0, 576.0, 583.0, 590.0, 597.0, 604.0, 612.0, 619.0, 626.0, 634.0, 642.0,
    649.0, 657.0, 665.0, 673.0, 681.0, 690.0, 698.0, 706.0, 715.0, 723.0, 732.0, 741.0, 750.0,
    759.0, 768.0, 777.0, 787.0, 796.0, 806.0, 816.0, 825.0, 835.0, 845.0, 856.0, 866.0, 876.0,
    887.0, 898.0, 909.0, 920.0, 931.0, 942.0, 953.0, 965.0, 976.0, 988.0,
];

impl Granularity {
    fn parse(name: &str) -> Result<Granularity> {
        Ok(match name {
            "POWERSOF2" => Granularity::PowersOfTwo,
            "R5" => Granularity::Series(R5),
            "R10" => Granularity::Series(R10),
            "R20" => Granularity::Series(R20),
            "R40" => Granularity::Series(R40),
            "R80" => Granularity::Series(R80),
            "1-2-5" => Granularity::Series(SERIES_1_2_5),
            "E6" => Granularity::Series(E6),
            "E12" => Granularity::Series(E12),
            "E24" => Granularity::Series(E24),
            "E48" => Granularity::Series(E48),
            "E96" => Granularity::Series(E96),
            "E192" => Granularity::Series(E192),
            _ => {
                return Err(Error::location(
                    40257,
                    format!("Unknown rounding granularity '{name}'"),
                ))
            }
        })
    }

    /// The smallest granularity number above `v` (0 stays 0).
    fn round_up(self, v: &Bson) -> Result<Bson> {
        self.round(v, true)
    }

    /// The largest granularity number below `v` (0 stays 0).
    fn round_down(self, v: &Bson) -> Result<Bson> {
        self.round(v, false)
    }

    fn round(self, v: &Bson, up: bool) -> Result<Bson> {
        let x = as_f64(v).unwrap_or(f64::NAN);
        if x == 0.0 {
            return Ok(v.clone());
        }
        match self {
            Granularity::PowersOfTwo => Ok(power_of_two(v, x, up)),
            Granularity::Series(series) => {
                let r = if up {
                    series_round_up(series, x)
                } else {
                    series_round_down(series, x)
                };
                Ok(match v {
                    Bson::Decimal128(_) => crate::expr::num::dec_bson(r),
                    _ => Bson::Double(r),
                })
            }
        }
    }
}

/// The next (or previous) power of two, as `$pow: [2, exp]` types it (an integer for
/// integers and doubles, a decimal for decimals).
fn power_of_two(v: &Bson, x: f64, up: bool) -> Bson {
    let exp = match v {
        Bson::Int32(_) | Bson::Int64(_) => {
            let n = crate::expr::num::as_exact_i64(v).unwrap_or(0) as u64;
            let log = 63 - n.leading_zeros() as i64;
            if up {
                log + 1
            } else if n.is_power_of_two() {
                log - 1
            } else {
                log
            }
        }
        _ => {
            if up {
                (x.log2().floor() + 1.0) as i64
            } else {
                (x.log2().ceil() - 1.0) as i64
            }
        }
    };
    let exp = match v {
        Bson::Decimal128(_) => crate::expr::num::dec_bson(exp as f64),
        _ => Bson::Int64(exp),
    };
    let pow = Expr::Op(
        "$pow".to_string(),
        vec![Expr::Const(Bson::Int32(2)), Expr::Const(exp)],
    );
    let r = pow
        .evaluate_value(&Document::new(), &Variables::new())
        .unwrap_or(Bson::Null);
    // An int exponent gives an int where it fits, as mongod's Value(int) does.
    match r {
        Bson::Int64(n) => i32::try_from(n).map(Bson::Int32).unwrap_or(Bson::Int64(n)),
        other => other,
    }
}

/// mongod's preferred-number round up, in its order of double operations.
fn series_round_up(series: &[f64], x: f64) -> f64 {
    let (first, last) = (series[0], series[series.len() - 1]);
    let mut m = 1.0;
    while x >= last * m {
        m *= 10.0;
    }
    while x < first * m {
        let previous_min = first * m;
        m /= 10.0;
        if x >= last * m {
            return previous_min;
        }
    }
    let i = series.partition_point(|s| s * m <= x);
    series[i] * m
}

/// mongod's preferred-number round down, in its order of double operations.
fn series_round_down(series: &[f64], x: f64) -> f64 {
    let (first, last) = (series[0], series[series.len() - 1]);
    let mut m = 1.0;
    while x <= first * m {
        m /= 10.0;
    }
    while x > last * m {
        let previous_max = last * m;
        m *= 10.0;
        if x <= first * m {
            return previous_max;
        }
    }
    let i = series.partition_point(|s| s * m < x);
    series[i - 1] * m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_numbers_round_across_decades() {
        // mongod's own examples: 0.8 in E6 rounds up to the next decade's 1.0 and down
        // to the previous decade's 0.68.
        assert_eq!(series_round_up(E6, 0.8), 1.0);
        assert_eq!(series_round_down(E6, 0.8), 0.68);
        // A series number rounds to its neighbours, never to itself.
        assert_eq!(series_round_up(R5, 16.0), 25.0);
        assert_eq!(series_round_down(R5, 16.0), 10.0);
        assert_eq!(series_round_up(SERIES_1_2_5, 50.0), 100.0);
        assert_eq!(series_round_down(SERIES_1_2_5, 100.0), 50.0);
    }

    #[test]
    fn powers_of_two_round_strictly() {
        let up = |v: Bson| Granularity::PowersOfTwo.round_up(&v).unwrap();
        let down = |v: Bson| Granularity::PowersOfTwo.round_down(&v).unwrap();
        assert_eq!(up(Bson::Int32(4)), Bson::Int32(8));
        assert_eq!(down(Bson::Int32(4)), Bson::Int32(2));
        assert_eq!(down(Bson::Int32(5)), Bson::Int32(4));
        assert_eq!(up(Bson::Double(3.5)), Bson::Int32(4));
        assert_eq!(down(Bson::Double(0.75)), Bson::Double(0.5));
        assert_eq!(up(Bson::Int32(0)), Bson::Int32(0));
    }
}

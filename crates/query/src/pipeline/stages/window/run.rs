//! Running `$setWindowFields`: the documents are sorted by partition and `sortBy` (as
//! mongod puts a `$sort` in front of the stage), cut into partitions, and each output's
//! function is evaluated for every document of a partition against the input documents;
//! then the outputs are set (a missing value removes the field, as `$addFields` does).

use super::super::super::group::{AccSpec, AccState};
use super::bounds::{documents_span, RangeKeys, Span};
use super::exp_moving_avg;
use super::{Output, RankKind, Window, WindowFieldsStage, WindowFunc};
use crate::compare::{as_f64, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use crate::expr::num::{dec_bson, Dec, Summer};
use crate::expr::{Expr, Variables};
use crate::sort::SortSpec;
use bson::{Bson, Document};
use std::cmp::Ordering;

/// One partition: its documents in order, and the values its functions need of them.
struct Partition<'a> {
    docs: &'a [Document],
    /// The sort field's value of each document (a one-field `sortBy`), for range
    /// windows, `$derivative`, `$integral` and `$linearFill`.
    sort_values: Option<Vec<Bson>>,
    /// Each document's key under `sortBy` (ranks compare these).
    sort_keys: Vec<Vec<Bson>>,
    vars: &'a Variables,
}

/// `$setWindowFields` over all the documents.
pub(crate) fn set_window_fields(
    stage: &WindowFieldsStage,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let coll = vars.collator.as_deref();
    let sort = collated_sort(stage, vars);
    let mut keyed = Vec::with_capacity(docs.len());
    for d in docs {
        let part = match &stage.partition_by {
            Some(e) => partition_key(e, &d, vars)?,
            None => Bson::Null,
        };
        let key = sort.as_ref().map(|s| s.key(&d)).unwrap_or_default();
        keyed.push((part, key, d));
    }
    if stage.partition_by.is_some() || sort.is_some() {
        keyed.sort_by(|a, b| {
            cmp_bson_with(&a.0, &b.0, coll).then_with(|| match &sort {
                Some(s) => s.compare_keys(&a.1, &b.1),
                None => Ordering::Equal,
            })
        });
    }
    let mut out = Vec::with_capacity(keyed.len());
    let mut rest = keyed.into_iter().peekable();
    while let Some((part, key, doc)) = rest.next() {
        let (mut keys, mut docs) = (vec![key], vec![doc]);
        while let Some((_, key, doc)) =
            rest.next_if(|next| cmp_bson_with(&next.0, &part, coll) == Ordering::Equal)
        {
            keys.push(key);
            docs.push(doc);
        }
        out.extend(checked_partition(stage, sort.as_ref(), keys, docs, vars)?);
    }
    Ok(out)
}

/// The field of a sort record ([`partition_record`]) holding the document's partition
/// (never an array: [`partition_key`] refuses them, so a sort orders it as a whole).
const WINDOW_PARTITION_FIELD: &str = "p";
/// The field of a sort record holding the document.
const RECORD_DOC_FIELD: &str = "d";

/// A document as a sort record for a sort on disk by [`partition_order`]: its
/// partition and the document.
pub(crate) fn partition_record(
    stage: &WindowFieldsStage,
    doc: Document,
    vars: &Variables,
) -> Result<Document> {
    let part = match &stage.partition_by {
        Some(e) => partition_key(e, &doc, vars)?,
        None => Bson::Null,
    };
    Ok(bson::doc! {WINDOW_PARTITION_FIELD: part, RECORD_DOC_FIELD: doc})
}

/// The order [`set_window_fields`] sorts documents in, over sort records: by
/// partition, then by `sortBy` within the document (stable, as that sort).
pub(crate) fn partition_order(stage: &WindowFieldsStage, vars: &Variables) -> SortSpec {
    let mut fields = vec![(WINDOW_PARTITION_FIELD.to_string(), false)];
    if let Some(s) = &stage.sort_by {
        for (path, descending) in &s.fields {
            fields.push((format!("{RECORD_DOC_FIELD}.{path}"), *descending));
        }
    }
    SortSpec {
        fields,
        collator: vars.collator.clone(),
    }
}

/// A sort record's partition and document.
pub(crate) fn unpack_partition_record(mut record: Document) -> Result<(Bson, Document)> {
    let malformed = || Error::internal("a $setWindowFields sort record is malformed");
    let part = record
        .remove(WINDOW_PARTITION_FIELD)
        .ok_or_else(malformed)?;
    let Some(Bson::Document(doc)) = record.remove(RECORD_DOC_FIELD) else {
        return Err(malformed());
    };
    Ok((part, doc))
}

/// One partition's documents, in `sortBy` order, with their outputs set.
pub(crate) fn window_partition(
    stage: &WindowFieldsStage,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let sort = collated_sort(stage, vars);
    let keys = docs
        .iter()
        .map(|d| sort.as_ref().map(|s| s.key(d)).unwrap_or_default())
        .collect();
    checked_partition(stage, sort.as_ref(), keys, docs, vars)
}

/// `sortBy` under the operation's collation.
fn collated_sort(stage: &WindowFieldsStage, vars: &Variables) -> Option<SortSpec> {
    stage
        .sort_by
        .clone()
        .map(|s| s.with_collator(vars.collator.clone()))
}

/// [`run_partition`], refused past the memory limit under `allowDiskUse: false`.
fn checked_partition(
    stage: &WindowFieldsStage,
    sort: Option<&SortSpec>,
    sort_keys: Vec<Vec<Bson>>,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    if vars.forbid_disk_use {
        check_partition_memory(&docs)?;
    }
    run_partition(stage, sort, sort_keys, docs, vars)
}

/// mongod's `internalDocumentSourceSetWindowFieldsMaxMemoryBytes`.
const MAX_MEMORY_BYTES: usize = 100 * 1024 * 1024;

/// A partition is held whole while its windows are computed; mongod spills it to disk
/// past the limit, unless the operation said `allowDiskUse: false` (5643011). Here it
/// stays in memory either way: only the refusal is mongod's.
fn check_partition_memory(docs: &[Document]) -> Result<()> {
    let mut bytes = 0usize;
    for d in docs {
        bytes += bson::to_vec(d).map(|b| b.len()).unwrap_or(0);
        if bytes >= MAX_MEMORY_BYTES {
            return Err(Error::location(
                5643011,
                "Exceeded max memory. Set 'allowDiskUse: true' to spill to disk",
            ));
        }
    }
    Ok(())
}

/// The partition a document belongs to: missing counts as null, an array is refused.
fn partition_key(e: &Expr, d: &Document, vars: &Variables) -> Result<Bson> {
    let key = e.evaluate_value(d, vars)?;
    if let Bson::Array(_) = key {
        return Err(Error::type_mismatch(
            "Cannot 'partitionBy' an expression of type array",
        ));
    }
    Ok(key)
}

fn run_partition(
    stage: &WindowFieldsStage,
    sort: Option<&SortSpec>,
    sort_keys: Vec<Vec<Bson>>,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let sort_values = match sort {
        Some(s) if s.fields.len() == 1 => {
            let field = Expr::Field(crate::expr::split_path(&s.fields[0].0));
            Some(
                docs.iter()
                    .map(|d| field.evaluate_value(d, vars))
                    .collect::<Result<Vec<_>>>()?,
            )
        }
        _ => None,
    };
    let part = Partition {
        docs: &docs,
        sort_values,
        sort_keys,
        vars,
    };
    let results = stage
        .outputs
        .iter()
        .map(|o| evaluate(o, &part))
        .collect::<Result<Vec<_>>>()?;
    let mut out = docs.clone();
    for (o, values) in stage.outputs.iter().zip(results) {
        for (d, v) in out.iter_mut().zip(values) {
            match v {
                Some(v) => crate::path::set_path(d, &o.path, v),
                None => remove_path(d, &o.path),
            }
        }
    }
    Ok(out)
}

/// Removes the field at a dotted path (a window function's missing value).
fn remove_path(doc: &mut Document, path: &str) {
    match path.split_once('.') {
        None => {
            doc.remove(path);
        }
        Some((first, rest)) => {
            if let Some(Bson::Document(sub)) = doc.get_mut(first) {
                remove_path(sub, rest);
            }
        }
    }
}

/// One output's value for each document of the partition (None: missing).
fn evaluate(o: &Output, p: &Partition) -> Result<Vec<Option<Bson>>> {
    let spans = || spans(o.func.window(), p);
    match &o.func {
        WindowFunc::Accumulator { spec, .. } => accumulate(spec, &spans()?, p),
        WindowFunc::Endpoint { input, last, .. } => spans()?
            .iter()
            .map(|s| match s {
                None => Ok(Some(Bson::Null)),
                Some((lo, hi)) => input.evaluate(&p.docs[if *last { *hi } else { *lo }], p.vars),
            })
            .collect(),
        WindowFunc::Rank(kind) => Ok(ranks(*kind, p)),
        WindowFunc::Shift {
            output,
            by,
            default,
        } => shift(output, *by, default, p),
        WindowFunc::Derivative { input, unit_ms, .. } => derivative(input, *unit_ms, &spans()?, p),
        WindowFunc::Integral { input, unit_ms, .. } => integral(input, *unit_ms, &spans()?, p),
        WindowFunc::ExpMovingAvg { input, alpha } => exp_moving_avg(input, *alpha, p),
        WindowFunc::Covariance { input, sample, .. } => covariance(input, *sample, &spans()?, p),
        WindowFunc::Locf(input) => locf(input, p),
        WindowFunc::LinearFill(input) => linear_fill(input, p),
    }
}

/// The span of `window` for each document of the partition.
fn spans(window: &Window, p: &Partition) -> Result<Vec<Span>> {
    let n = p.docs.len();
    match window {
        Window::Documents { lower, upper } => {
            Ok((0..n).map(|i| documents_span(lower, upper, i, n)).collect())
        }
        Window::Range { lower, upper, unit } => {
            let keys = RangeKeys {
                keys: p
                    .sort_values
                    .as_deref()
                    .expect("range windows have one sort field"),
                unit: *unit,
            };
            (0..n).map(|i| keys.span(lower, upper, i)).collect()
        }
    }
}

/// A `$group` accumulator over each span. The removable ones slide one state along the
/// partition ([`sliding`]); otherwise, while spans keep their start and only grow
/// (windows that begin at the partition's start) one state is extended, and each other
/// span is folded afresh.
fn accumulate(spec: &AccSpec, spans: &[Span], p: &Partition) -> Result<Vec<Option<Bson>>> {
    let coll = p.vars.collator.as_deref();
    let args = p
        .docs
        .iter()
        .map(|d| spec.arg.evaluate(d, p.vars))
        .collect::<Result<Vec<_>>>()?;
    if let Some(out) = super::sliding::accumulate(spec, spans, &args, coll) {
        return Ok(out);
    }
    let mut out = Vec::with_capacity(spans.len());
    // The state and the span it has folded.
    let mut folded: Option<(AccState, usize, usize)> = None;
    let mut previous: Option<(Span, Bson)> = None;
    for (i, span) in spans.iter().enumerate() {
        if let Some((s, v)) = &previous {
            if s == span {
                out.push(Some(v.clone()));
                continue;
            }
        }
        let value = match *span {
            None => AccState::start(spec, &Bson::Null, &p.docs[i], p.vars)?.finish(spec.op)?,
            Some((lo, hi)) => {
                let (mut state, from) = match folded.take() {
                    Some((st, flo, fhi)) if flo == lo && fhi <= hi => (st, fhi + 1),
                    _ => (AccState::start(spec, &Bson::Null, &p.docs[lo], p.vars)?, lo),
                };
                for a in &args[from..=hi] {
                    state.add(spec.op, a.clone(), coll)?;
                }
                let value = state.clone().finish(spec.op)?;
                folded = Some((state, lo, hi));
                value
            }
        };
        previous = Some((*span, value.clone()));
        out.push(Some(value));
    }
    Ok(out)
}

/// `$rank`, `$denseRank`, `$documentNumber`: positions by the sort key, ties sharing a
/// rank (as Int32 while they fit).
fn ranks(kind: RankKind, p: &Partition) -> Vec<Option<Bson>> {
    let coll = p.vars.collator.as_deref();
    let same = |a: &[Bson], b: &[Bson]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| cmp_bson_with(x, y, coll) == Ordering::Equal)
    };
    let mut out = Vec::with_capacity(p.docs.len());
    let (mut rank, mut dense) = (0i64, 0i64);
    for i in 0..p.docs.len() {
        let tie = i > 0 && same(&p.sort_keys[i - 1], &p.sort_keys[i]);
        if !tie {
            rank = i as i64 + 1;
            dense += 1;
        }
        let v = match kind {
            RankKind::Rank => rank,
            RankKind::DenseRank => dense,
            RankKind::DocumentNumber => i as i64 + 1,
        };
        out.push(Some(int_or_long(v)));
    }
    out
}

fn int_or_long(v: i64) -> Bson {
    i32::try_from(v).map(Bson::Int32).unwrap_or(Bson::Int64(v))
}

/// `$shift`: the output at `by` documents away, or the default outside the partition.
fn shift(output: &Expr, by: i64, default: &Bson, p: &Partition) -> Result<Vec<Option<Bson>>> {
    let n = p.docs.len() as i64;
    (0..n)
        .map(|i| {
            let j = i + by;
            if (0..n).contains(&j) {
                output.evaluate(&p.docs[j as usize], p.vars)
            } else {
                Ok(Some(default.clone()))
            }
        })
        .collect()
}

/// `a <op> b` as the expression operator computes it (numbers widen as mongod's do;
/// two dates subtract to milliseconds).
fn arith(op: &str, a: &Bson, b: &Bson) -> Result<Bson> {
    Expr::Op(
        op.to_string(),
        vec![Expr::Const(a.clone()), Expr::Const(b.clone())],
    )
    .evaluate_value(&Document::new(), &Variables::new())
}

fn is_zero(v: &Bson) -> bool {
    is_number(v) && as_f64(v) == Some(0.0)
}

/// The sort field's values (checked present by the parser for these functions).
fn sort_values<'a>(p: &'a Partition) -> &'a [Bson] {
    p.sort_values
        .as_deref()
        .expect("a one-field sortBy was required at parse time")
}

/// `$derivative`: rise over run between the window's first and last documents.
fn derivative(
    input: &Expr,
    unit_ms: Option<i64>,
    spans: &[Span],
    p: &Partition,
) -> Result<Vec<Option<Bson>>> {
    let times = sort_values(p);
    spans
        .iter()
        .map(|span| {
            let Some((lo, hi)) = *span else {
                return Ok(Some(Bson::Null));
            };
            let (t0, t1) = (&times[lo], &times[hi]);
            let dates = matches!(t0, Bson::DateTime(_)) && matches!(t1, Bson::DateTime(_));
            if unit_ms.is_some() && !dates {
                return Err(Error::location(
                    5624900,
                    "$derivative with 'unit' expects the sortBy field to be a Date",
                ));
            }
            if unit_ms.is_none() {
                if matches!(t0, Bson::DateTime(_)) || matches!(t1, Bson::DateTime(_)) {
                    return Err(Error::location(
                        5624901,
                        "$derivative where the sortBy is a Date requires an 'unit'",
                    ));
                }
                if !is_number(t0) || !is_number(t1) {
                    return Err(Error::location(
                        5624902,
                        "$derivative (with no 'unit') expects the sortBy field to be numeric",
                    ));
                }
            }
            let run = arith("$subtract", t1, t0)?;
            let y1 = input.evaluate_value(&p.docs[hi], p.vars)?;
            let y0 = input.evaluate_value(&p.docs[lo], p.vars)?;
            let rise = arith("$subtract", &y1, &y0)?;
            if matches!(rise, Bson::Null | Bson::Undefined) {
                return Err(Error::location(
                    5624903,
                    "$derivative input must not be null or missing",
                ));
            }
            if is_zero(&run) {
                return Ok(Some(Bson::Null));
            }
            let mut result = arith("$divide", &rise, &run)?;
            if let Some(ms) = unit_ms {
                result = arith("$multiply", &result, &Bson::Int64(ms))?;
            }
            Ok(Some(result))
        })
        .collect()
}

/// `$integral`: the trapezoidal rule over the window's points (sort value, input).
fn integral(
    input: &Expr,
    unit_ms: Option<i64>,
    spans: &[Span],
    p: &Partition,
) -> Result<Vec<Option<Bson>>> {
    let xs = sort_values(p);
    let ys = p
        .docs
        .iter()
        .map(|d| input.evaluate_value(d, p.vars))
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        let Some((lo, hi)) = *span else {
            out.push(Some(Bson::Null));
            continue;
        };
        for k in lo..=hi {
            check_integral_point(&xs[k], &ys[k], unit_ms.is_some())?;
        }
        let nan = (lo..=hi).any(|k| is_nan(&xs[k]) || is_nan(&ys[k]));
        if nan {
            out.push(Some(Bson::Double(f64::NAN)));
            continue;
        }
        let mut sum = Summer::default();
        for k in lo..hi {
            let dx = arith("$subtract", &xs[k + 1], &xs[k])?;
            let sy = arith("$add", &ys[k + 1], &ys[k])?;
            let area = arith(
                "$divide",
                &arith("$multiply", &sy, &dx)?,
                &Bson::Double(2.0),
            )?;
            sum.add(&area);
        }
        let mut total = sum.result();
        if let Some(ms) = unit_ms {
            total = arith("$divide", &total, &Bson::Int64(ms))?;
        }
        out.push(Some(total));
    }
    Ok(out)
}

fn is_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(d) => d.is_nan(),
        Bson::Decimal128(_) => as_f64(v).is_some_and(f64::is_nan),
        _ => false,
    }
}

/// A point of `$integral` must be (number or date, number), its first a date exactly
/// when there is a unit.
fn check_integral_point(x: &Bson, y: &Bson, unit: bool) -> Result<()> {
    let date = matches!(x, Bson::DateTime(_));
    if !is_number(y) || !(is_number(x) || date) {
        return Err(Error::location(
            5423900,
            "The input value of $integral window function must be a vector of 2 value, the first value must be numeric or date type and the second must be numeric.",
        ));
    }
    if unit && !date {
        return Err(Error::location(
            5423901,
            "$integral with 'unit' expects the sortBy field to be a Date",
        ));
    }
    if !unit && !is_number(x) {
        return Err(Error::location(
            5423902,
            "$integral (with no 'unit') expects the sortBy field to be numeric",
        ));
    }
    Ok(())
}

/// `$expMovingAvg`: each number weighs `alpha`, the average so far `1 - alpha`;
/// non-numbers are skipped. In decimal as mongod computes it ([`exp_moving_avg`]'s
/// module), in doubles once a value has no exact decimal (NaN, infinities); a double
/// unless a decimal was seen.
fn exp_moving_avg(input: &Expr, alpha: Dec, p: &Partition) -> Result<Vec<Option<Bson>>> {
    let alpha_f = alpha.to_f64();
    let mut exact: Option<Dec> = None;
    let mut approx: Option<f64> = None;
    let mut lost = false;
    let mut decimal = false;
    let mut out = Vec::with_capacity(p.docs.len());
    for d in p.docs {
        if let Some(v) = input.evaluate(d, p.vars)?.filter(is_number) {
            decimal |= matches!(v, Bson::Decimal128(_));
            let x = as_f64(&v).unwrap_or(f64::NAN);
            approx = Some(approx.map_or(x, |a| x * alpha_f + a * (1.0 - alpha_f)));
            if !lost {
                exact = match (exact, exp_moving_avg::to_dec(&v)) {
                    (_, None) => None,
                    (None, Some(x)) => Some(x),
                    (Some(a), Some(x)) => exp_moving_avg::step(a, x, alpha),
                };
                lost = exact.is_none();
            }
        }
        let value = match (exact, approx) {
            (_, None) => None,
            (Some(e), _) if !lost => Some(e.to_f64()),
            (_, Some(a)) => Some(a),
        };
        out.push(Some(match (value, exact) {
            (None, _) => Bson::Null,
            (Some(_), Some(e)) if decimal && !lost => Bson::Decimal128(e.to_decimal128()),
            (Some(a), _) if decimal => dec_bson(a),
            (Some(a), _) => Bson::Double(a),
        }));
    }
    Ok(out)
}

/// `$covariancePop` / `$covarianceSamp` of `[x, y]` pairs over each span: the online
/// co-moment (pairs that are not two numbers are skipped; infinities and NaN decide
/// the result outright).
fn covariance(
    input: &Expr,
    sample: bool,
    spans: &[Span],
    p: &Partition,
) -> Result<Vec<Option<Bson>>> {
    let pairs = p
        .docs
        .iter()
        .map(|d| input.evaluate(d, p.vars).map(|v| number_pair(v.as_ref())))
        .collect::<Result<Vec<_>>>()?;
    Ok(spans
        .iter()
        .map(|span| {
            let pts = match *span {
                Some((lo, hi)) => &pairs[lo..=hi],
                None => &pairs[..0],
            };
            Some(covariance_of(pts.iter().flatten(), sample))
        })
        .collect())
}

/// `[x, y]` when both are numbers: (x, y, either is a decimal).
fn number_pair(v: Option<&Bson>) -> Option<(f64, f64, bool)> {
    match v {
        Some(Bson::Array(a)) if a.len() == 2 && is_number(&a[0]) && is_number(&a[1]) => {
            let dec = matches!(a[0], Bson::Decimal128(_)) || matches!(a[1], Bson::Decimal128(_));
            Some((as_f64(&a[0])?, as_f64(&a[1])?, dec))
        }
        _ => None,
    }
}

fn covariance_of<'a>(pts: impl Iterator<Item = &'a (f64, f64, bool)>, sample: bool) -> Bson {
    let (mut count, mut sum_x, mut sum_y) = (0.0f64, 0.0f64, 0.0f64);
    let mut c_xy = Summer::default();
    let mut non_finite: Option<f64> = None;
    let mut decimal = false;
    for &(x, y, dec) in pts {
        decimal |= dec;
        if !x.is_finite() || !y.is_finite() {
            // mongod adds the pair's infinity (or NaN) to the co-moment sum directly.
            let v = if x.is_nan()
                || y.is_nan()
                || (x.is_infinite() && y.is_infinite() && x.signum() != y.signum())
            {
                f64::NAN
            } else if x.is_infinite() {
                x
            } else {
                y
            };
            non_finite = Some(non_finite.map_or(v, |s| s + v));
            continue;
        }
        let mean_x_before = if count == 0.0 { 0.0 } else { sum_x / count };
        count += 1.0;
        sum_x += x;
        sum_y += y;
        let delta_x = x - mean_x_before;
        let delta_y = y - sum_y / count;
        c_xy.add(&Bson::Double(delta_x * delta_y));
    }
    let result = |v: f64| {
        if decimal {
            dec_bson(v)
        } else {
            Bson::Double(v)
        }
    };
    // mongod answers 0 for one finite pair before it looks at the infinities.
    if count == 1.0 && !sample {
        return Bson::Double(0.0);
    }
    let adjusted = if sample { count - 1.0 } else { count };
    if adjusted <= 0.0 {
        return Bson::Null;
    }
    let total = c_xy.total_f64() + non_finite.unwrap_or(0.0);
    result(total / adjusted)
}

/// `$locf`: the last non-null value so far (null before the first).
fn locf(input: &Expr, p: &Partition) -> Result<Vec<Option<Bson>>> {
    let mut last = Bson::Null;
    let mut out = Vec::with_capacity(p.docs.len());
    for d in p.docs {
        match input.evaluate(d, p.vars)? {
            None | Some(Bson::Null) | Some(Bson::Undefined) => {}
            Some(v) => last = v,
        }
        out.push(Some(last.clone()));
    }
    Ok(out)
}

/// `$linearFill`: a null or missing value becomes the straight line between the nearest
/// non-null values before and after it (by the sort value); null where one is lacking.
fn linear_fill(input: &Expr, p: &Partition) -> Result<Vec<Option<Bson>>> {
    let xs = sort_values(p);
    let ys = p
        .docs
        .iter()
        .map(|d| input.evaluate(d, p.vars))
        .collect::<Result<Vec<_>>>()?;
    let nullish = |v: &Option<Bson>| matches!(v, None | Some(Bson::Null) | Some(Bson::Undefined));
    let mut previous: Option<&Bson> = None;
    for (x, y) in xs.iter().zip(&ys) {
        check_linear_fill_point(x, y, previous)?;
        previous = Some(x);
    }
    let mut out = Vec::with_capacity(ys.len());
    let mut left: Option<usize> = None;
    for i in 0..ys.len() {
        if !nullish(&ys[i]) {
            left = Some(i);
            out.push(ys[i].clone());
            continue;
        }
        let right = (i + 1..ys.len()).find(|&j| !nullish(&ys[j]));
        let value = match (left, right) {
            (Some(l), Some(r)) => {
                let (x1, y1) = (&xs[l], ys[l].as_ref().unwrap());
                let (x2, y2) = (&xs[r], ys[r].as_ref().unwrap());
                let slope = arith(
                    "$divide",
                    &arith("$subtract", y2, y1)?,
                    &arith("$subtract", x2, x1)?,
                )?;
                arith(
                    "$add",
                    y1,
                    &arith("$multiply", &arith("$subtract", &xs[i], x1)?, &slope)?,
                )?
            }
            _ => Bson::Null,
        };
        out.push(Some(value));
    }
    Ok(out)
}

/// `$linearFill`'s checks of one point: a numeric or nullish value, a numeric or date
/// sort value of the same kind as the previous one, never repeated.
fn check_linear_fill_point(x: &Bson, y: &Option<Bson>, previous: Option<&Bson>) -> Result<()> {
    if let Some(v) = y
        .as_ref()
        .filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
    {
        if !is_number(v) {
            return Err(Error::type_mismatch(format!(
                "Value to be filled must be numeric or nullish, but found {}",
                crate::expr::util::type_name(v)
            )));
        }
    }
    let date = matches!(x, Bson::DateTime(_) | Bson::Timestamp(_));
    if !is_number(x) && !date {
        return Err(Error::type_mismatch(format!(
            "Value of the sortBy field must be numeric or a date, but found {}",
            crate::expr::util::type_name(x)
        )));
    }
    if let Some(prev) = previous {
        if crate::compare::cmp_bson(prev, x) == Ordering::Equal {
            return Err(Error::location(
                6050106,
                "There can be no repeated values in the sort field",
            ));
        }
        let prev_date = matches!(prev, Bson::DateTime(_) | Bson::Timestamp(_));
        if prev_date != date {
            return Err(Error::type_mismatch(format!(
                "Conflicting sort value types, previously received type {}, but found {}",
                crate::expr::util::type_name(prev),
                crate::expr::util::type_name(x)
            )));
        }
    }
    Ok(())
}

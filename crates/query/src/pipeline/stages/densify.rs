//! `$densify`: documents added where a sequence of numbers or dates has gaps, as mongod
//! makes them (document_source_densify.cpp): the input sorted by the partition fields
//! (not for `full` bounds) and the field, then walked keeping each partition's last value
//! on the step, generating the values missing before each document and, at the end, up
//! to the range's end. A generated document holds the partition fields and the field.

use super::window::TimeUnit;
use crate::compare::{as_f64, cmp_bson, is_number};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use crate::sort::SortSpec;
use bson::{Bson, Document};
use std::cmp::Ordering;

use super::Stage;

const STAGE: &str = "$densify";
/// mongod's internalQueryMaxAllowedDensifyDocs default: the most documents one
/// `$densify` may generate.
const MAX_GENERATED: usize = 500_000;
/// How many generated documents pass between checks of the running operation, so that
/// `killOp` and `maxTimeMS` stop a long generation as they stop mongod's (a few ms of
/// generating each: 500,000 documents took 0.45 s on the 2-core machine).
const INTERRUPT_CHECK_DOCS: usize = 4096;

/// The range's bounds.
#[derive(Debug, Clone, PartialEq)]
enum Bounds {
    /// From the smallest to the largest value of all the documents, in every partition.
    Full,
    /// From each partition's smallest to its largest value.
    Partition,
    /// `[lower, upper)`.
    Explicit(Box<(Bson, Bson)>),
}

pub(crate) struct DensifyStage {
    field: String,
    partitions: Vec<String>,
    step: Bson,
    unit: Option<TimeUnit>,
    bounds: Bounds,
}

/// `{$densify: {field, partitionByFields, range: {step, unit, bounds}}}`.
pub(crate) fn parse_densify(arg: &Bson) -> Result<Stage> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "The {STAGE} stage specification must be an object, found {}",
            util::type_name(arg)
        )));
    };
    let (mut field, mut partitions, mut range) = (None, Vec::new(), None);
    for (k, v) in spec {
        let path = format!("{STAGE}.{k}");
        match k.as_str() {
            "field" => field = Some(field_path(crate::args::str_value(&path, v)?)?),
            "partitionByFields" => {
                for (i, f) in crate::args::array_value(&path, v)?.iter().enumerate() {
                    partitions.push(field_path(crate::args::str_value(
                        &format!("{path}.{i}"),
                        f,
                    )?)?);
                }
            }
            "range" => range = Some(crate::args::doc_value(&path, v)?),
            other => return Err(unknown_field(other)),
        }
    }
    let field = field.ok_or_else(|| Error::missing_field(&format!("{STAGE}.field")))?;
    let range = range.ok_or_else(|| Error::missing_field(&format!("{STAGE}.range")))?;
    let (step, unit, bounds) = parse_range(range)?;
    if bounds == Bounds::Partition && partitions.is_empty() {
        return Err(Error::location(
            5733408,
            "One cannot specify the bounds as 'partition' without specifying a non-empty array of partitionByFields. You may have meant to specify 'full' bounds.",
        ));
    }
    Ok(Stage::Densify(Box::new(DensifyStage {
        field,
        partitions,
        step,
        unit,
        bounds,
    })))
}

fn unknown_field(name: &str) -> Error {
    Error::location(
        40415,
        format!("BSON field '{STAGE}.{name}' is an unknown field."),
    )
}

/// A field path as mongod's FieldPath accepts it.
fn field_path(s: &str) -> Result<String> {
    if s.is_empty() || s.split('.').any(str::is_empty) {
        return Err(Error::location(
            40352,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if s.starts_with('$') {
        return Err(Error::location(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        ));
    }
    Ok(s.to_string())
}

/// `range: {step, unit, bounds}` (mongod's RangeStatement::parse).
fn parse_range(range: &Document) -> Result<(Bson, Option<TimeUnit>, Bounds)> {
    let (mut step, mut unit, mut bounds) = (None, None, None);
    for (k, v) in range {
        match k.as_str() {
            "step" => step = Some(v.clone()),
            "unit" => unit = Some(crate::args::str_value(&format!("{STAGE}.range.unit"), v)?),
            "bounds" => bounds = Some(v),
            other => return Err(unknown_field(&format!("range.{other}"))),
        }
    }
    let step = step.ok_or_else(|| Error::missing_field(&format!("{STAGE}.range.step")))?;
    let bounds = bounds.ok_or_else(|| Error::missing_field(&format!("{STAGE}.range.bounds")))?;
    if !is_number(&step) || !(as_f64(&step).unwrap_or(f64::NAN) > 0.0) {
        return Err(Error::location(
            5733401,
            "The step parameter in a range statement must be a strictly positive numeric value",
        ));
    }
    let unit = match unit {
        Some(u) => {
            if crate::expr::num::as_exact_i64(&step).is_none() {
                return Err(Error::location(
                    6586400,
                    "The step parameter in a range statement must be a whole number when densifying a date range",
                ));
            }
            Some(TimeUnit::parse(u)?)
        }
        None => None,
    };
    let bounds = match bounds {
        Bson::String(s) if s == "full" => Bounds::Full,
        Bson::String(s) if s == "partition" => Bounds::Partition,
        Bson::String(_) => {
            return Err(Error::location(
                5946802,
                "Bounds string must either be 'full' or 'partition'",
            ))
        }
        Bson::Array(a) => explicit_bounds(a, &step, unit)?,
        _ => {
            return Err(Error::location(
                5733404,
                "The bounds in a range statement must be the string 'full', 'partition', or an ascending array of two numbers or two dates",
            ))
        }
    };
    Ok((step, unit, bounds))
}

fn explicit_bounds(a: &[Bson], step: &Bson, unit: Option<TimeUnit>) -> Result<Bounds> {
    if a.len() != 2 {
        return Err(Error::location(
            5733403,
            "A bounding array in a range statement must have exactly two elements",
        ));
    }
    let (lo, hi) = (&a[0], &a[1]);
    if cmp_bson(lo, hi) == Ordering::Greater {
        return Err(Error::location(
            5733402,
            "A bounding array must be an ascending array of either two dates or two numbers",
        ));
    }
    let both = "A bounding array must contain either both dates or both numeric types";
    if is_number(lo) {
        if unit.is_some() {
            return Err(Error::location(
                5733409,
                "Numeric bounds may not have unit parameter",
            ));
        }
        if !is_number(hi) {
            return Err(Error::location(5733406, both));
        }
        let same = std::mem::discriminant(lo) == std::mem::discriminant(hi)
            && std::mem::discriminant(lo) == std::mem::discriminant(step);
        if !same {
            return Err(Error::location(
                5876900,
                "Upper bound, lower bound, and step must all have the same type",
            ));
        }
    } else if let Bson::DateTime(_) = lo {
        if !matches!(hi, Bson::DateTime(_)) {
            return Err(Error::location(5733405, both));
        }
        if unit.is_none() {
            return Err(Error::location(
                5733410,
                "A bounding array of dates must specify a unit",
            ));
        }
    } else {
        return Err(Error::location(
            5946800,
            "Explicit bounds must be numeric or dates",
        ));
    }
    Ok(Bounds::Explicit(Box::new((lo.clone(), hi.clone()))))
}

/// One partition's state: its key and its last value on the step (None: none yet).
struct PartitionState {
    key: Document,
    current: Option<Bson>,
}

/// The walk over the sorted documents.
struct Walk<'a> {
    stage: &'a DensifyStage,
    out: Vec<Document>,
    generated: usize,
}

impl DensifyStage {
    fn lt(a: &Bson, b: &Bson) -> bool {
        cmp_bson(a, b) == Ordering::Less
    }

    /// `v` moved one step forward, or back.
    fn shift(&self, v: &Bson, back: bool) -> Result<Bson> {
        let expr = match self.unit {
            Some(unit) => {
                let amount = crate::expr::num::as_exact_i64(&self.step).unwrap_or(0);
                Expr::parse(&bson::bson!({"$dateAdd": {
                    "startDate": {"$literal": v.clone()},
                    "unit": unit.name(),
                    "amount": if back { -amount } else { amount },
                }}))?
            }
            None => Expr::Op(
                if back { "$subtract" } else { "$add" }.to_string(),
                vec![Expr::Const(v.clone()), Expr::Const(self.step.clone())],
            ),
        };
        expr.evaluate_value(&Document::new(), &Variables::new())
    }

    /// Whether `v` is a whole number of steps above `base`.
    fn on_step(&self, v: &Bson, base: &Bson) -> Result<bool> {
        match (self.unit, v, base) {
            (Some(_), Bson::DateTime(_), Bson::DateTime(_)) => {
                let mut at = base.clone();
                while Self::lt(&at, v) {
                    at = self.shift(&at, false)?;
                }
                Ok(cmp_bson(&at, v) == Ordering::Equal)
            }
            _ => {
                let diff = as_f64(v).unwrap_or(f64::NAN) - as_f64(base).unwrap_or(f64::NAN);
                Ok((diff % as_f64(&self.step).unwrap_or(f64::NAN)) == 0.0)
            }
        }
    }

    /// The document's value of the field: nullish ones pass through (None); others
    /// must be of the range's kind.
    fn value(&self, d: &Document) -> Result<Option<Bson>> {
        let v = crate::path::get_path(d, &self.field).cloned();
        let v = match v {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(None),
            Some(v) => v,
        };
        let date = matches!(v, Bson::DateTime(_));
        if !date && !is_number(&v) {
            return Err(Error::location(
                5733201,
                "Densify field type must be numeric or a date",
            ));
        }
        match (self.unit.is_some(), date) {
            (true, false) => Err(Error::location(
                6053600,
                "Encountered numeric densify value in collection when step has a date unit.",
            )),
            (false, true) => Err(Error::location(
                6053600,
                "Encountered date densify value in collection when step does not have a date unit.",
            )),
            _ => Ok(Some(v)),
        }
    }

    /// The partition fields of a document, as a generated document holds them.
    fn partition_key(&self, d: &Document) -> Document {
        let mut key = Document::new();
        for p in &self.partitions {
            if let Some(v) = crate::path::get_path(d, p) {
                crate::path::set_path(&mut key, p, v.clone());
            }
        }
        key
    }
}

impl Walk<'_> {
    /// Generates the step values from after `current` while below `end`; returns the
    /// new last value on the step.
    fn generate(&mut self, key: &Document, current: Bson, end: &Bson) -> Result<Bson> {
        let mut at = current;
        loop {
            let next = self.stage.shift(&at, false)?;
            if !DensifyStage::lt(&next, end) {
                return Ok(at);
            }
            self.generated += 1;
            if self.generated.is_multiple_of(INTERRUPT_CHECK_DOCS) {
                crate::script::Operation::check_current()?;
            }
            if self.generated > MAX_GENERATED {
                return Err(Error::location(
                    5897900,
                    format!(
                        "Generated {} documents in $densify, which is over the limit of {MAX_GENERATED}. Increase the 'internalQueryMaxAllowedDensifyDocs' parameter to allow more generated documents",
                        self.generated
                    ),
                ));
            }
            let mut d = key.clone();
            crate::path::set_path(&mut d, &self.stage.field, next.clone());
            self.out.push(d);
            at = next;
        }
    }
}

/// `$densify` over all the documents.
pub(crate) fn densify(
    s: &DensifyStage,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut fields: Vec<(String, bool)> = Vec::new();
    if s.bounds != Bounds::Full {
        fields.extend(s.partitions.iter().map(|p| (p.clone(), false)));
    }
    fields.push((s.field.clone(), false));
    let sort = SortSpec {
        fields,
        collator: vars.collator.clone(),
    };
    let mut docs = docs;
    docs.sort_by(|a, b| sort.compare(a, b));
    let mut walk = Walk {
        stage: s,
        out: Vec::with_capacity(docs.len()),
        generated: 0,
    };
    let mut table: Vec<PartitionState> = Vec::new();
    let (mut global_min, mut global_max): (Option<Bson>, Option<Bson>) = (None, None);
    let mut seen_any = false;
    for d in docs {
        let Some(v) = s.value(&d)? else {
            walk.out.push(d);
            continue;
        };
        seen_any = true;
        let key = s.partition_key(&d);
        let slot = match table.iter().position(|p| p.key == key) {
            Some(i) => i,
            None => {
                table.push(PartitionState { key, current: None });
                table.len() - 1
            }
        };
        let key = table[slot].key.clone();
        let current = table[slot].current.clone();
        let new_current = match &s.bounds {
            Bounds::Full => {
                let min = global_min.get_or_insert_with(|| v.clone()).clone();
                global_max = Some(v.clone());
                let from = match current {
                    Some(c) => c,
                    None => s.shift(&min, true)?,
                };
                step_to(&mut walk, &key, from, &v, &v)?
            }
            Bounds::Partition => match current {
                None => Some(v.clone()),
                Some(c) => step_to(&mut walk, &key, c, &v, &v)?,
            },
            Bounds::Explicit(range) => {
                let (lo, hi) = (&range.0, &range.1);
                if DensifyStage::lt(&v, lo) {
                    current
                } else {
                    let from = match current {
                        Some(c) => c,
                        None => s.shift(lo, true)?,
                    };
                    let end = if DensifyStage::lt(&v, hi) { &v } else { hi };
                    step_to(&mut walk, &key, from, &v, end)?
                }
            }
        };
        table[slot].current = new_current;
        walk.out.push(d);
    }
    finish(&mut walk, &table, global_max.as_ref(), seen_any)?;
    Ok(walk.out)
}

/// Generates from after `from` up to (not including) `end`, before a document of value
/// `v`; returns the partition's new last value on the step.
fn step_to(
    walk: &mut Walk,
    key: &Document,
    from: Bson,
    v: &Bson,
    end: &Bson,
) -> Result<Option<Bson>> {
    let s = walk.stage;
    let next = s.shift(&from, false)?;
    if cmp_bson(v, &next) == Ordering::Equal {
        return Ok(Some(v.clone()));
    }
    if !DensifyStage::lt(&next, v) {
        return Ok(Some(from));
    }
    let last = walk.generate(key, from, end)?;
    // The document is the partition's last value on the step when it is the next step.
    let after = s.shift(&last, false)?;
    Ok(Some(if cmp_bson(v, &after) == Ordering::Equal {
        v.clone()
    } else {
        last
    }))
}

/// After the last document: `full` bounds fill every partition up to the largest value,
/// explicit bounds up to their end.
fn finish(
    walk: &mut Walk,
    table: &[PartitionState],
    global_max: Option<&Bson>,
    seen_any: bool,
) -> Result<()> {
    let s = walk.stage;
    match &s.bounds {
        Bounds::Partition => Ok(()),
        Bounds::Full => {
            if s.partitions.is_empty() {
                return Ok(());
            }
            let Some(max) = global_max else { return Ok(()) };
            for p in table {
                let Some(current) = p.current.clone() else {
                    continue;
                };
                let end = if s.on_step(max, &current)? {
                    s.shift(max, false)?
                } else {
                    max.clone()
                };
                walk.generate(&p.key, current, &end)?;
            }
            Ok(())
        }
        Bounds::Explicit(range) => {
            let (lo, hi) = (&range.0, &range.1);
            if s.partitions.is_empty() {
                let from = match table.first().and_then(|p| p.current.clone()) {
                    Some(c) if seen_any => c,
                    _ => s.shift(lo, true)?,
                };
                walk.generate(&Document::new(), from, hi)?;
                return Ok(());
            }
            for p in table {
                let from = match &p.current {
                    Some(c) if !DensifyStage::lt(c, lo) => c.clone(),
                    _ => s.shift(lo, true)?,
                };
                walk.generate(&p.key, from, hi)?;
            }
            Ok(())
        }
    }
}

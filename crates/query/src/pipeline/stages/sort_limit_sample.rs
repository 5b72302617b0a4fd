//! `$sort`, `$limit`, `$skip` and `$sample`.

use super::Stage;
use crate::error::{Error, Result};
use crate::expr::{util, Variables};
use crate::random::next_u64;
use crate::sort::{SortSpec, TopK};
use bson::{Bson, Document};

fn parse_count_value(v: &Bson, stage: &str) -> Result<i64> {
    let ok = crate::compare::is_number(v);
    let n = crate::expr::num::as_exact_i64(v);
    match (stage, ok, n) {
        ("$limit", false, _) => Err(Error::location(15957, "the limit must be specified as a number")),
        ("$limit", true, None) => Err(Error::location(15957, format!("invalid argument to $limit stage: Cannot represent as a 64-bit integer: $limit: {}", util::show(v)))),
        ("$skip", false, _) => Err(Error::location(15972, "Argument to $skip must be a number")),
        ("$skip", true, None) => Err(Error::location(15972, format!("invalid argument to $skip stage: Cannot represent as a 64-bit integer: $skip: {}", util::show(v)))),
        (_, _, Some(n)) => Ok(n),
        _ => unreachable!(),
    }
}

/// `$sort`: a non-empty sort specification.
pub(crate) fn parse_sort(arg: &Bson) -> Result<Stage> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            15973,
            "the $sort key specification must be an object",
        ));
    };
    if spec.is_empty() {
        return Err(Error::location(
            15976,
            "$sort stage must have at least one sort key",
        ));
    }
    Ok(Stage::Sort {
        spec: SortSpec::parse(spec)?,
        limit: None,
    })
}

/// `$limit`: a positive whole number.
pub(crate) fn parse_limit(arg: &Bson) -> Result<Stage> {
    let n = parse_count_value(arg, "$limit")?;
    if n <= 0 {
        return Err(Error::location(15958, "the limit must be positive"));
    }
    Ok(Stage::Limit(n as usize))
}

/// `$skip`: a non-negative whole number.
pub(crate) fn parse_skip(arg: &Bson) -> Result<Stage> {
    let n = parse_count_value(arg, "$skip")?;
    if n < 0 {
        return Err(Error::location(
            15956,
            "Argument to $skip cannot be negative",
        ));
    }
    Ok(Stage::Skip(n as usize))
}

/// `$sample: {size: <non-negative number>}`.
pub(crate) fn parse_sample(arg: &Bson) -> Result<Stage> {
    let Bson::Document(d) = arg else {
        return Err(Error::location(
            28745,
            "the $sample stage specification must be an object",
        ));
    };
    let mut size = None;
    for (k, v) in d {
        if k == "size" {
            if !crate::compare::is_number(v) {
                return Err(Error::location(
                    28746,
                    "size argument to $sample must be a number",
                ));
            }
            let n = crate::compare::as_f64(v).unwrap();
            if n < 0.0 {
                return Err(Error::location(
                    28747,
                    "size argument to $sample must not be negative",
                ));
            }
            size = Some(n as usize);
        } else {
            return Err(Error::location(
                28748,
                format!("unrecognized option to $sample: {k}"),
            ));
        }
    }
    Ok(Stage::Sample(size.ok_or_else(|| {
        Error::location(28749, "$sample stage must specify a size")
    })?))
}

/// `$skip` over a batch: `counter` is how many documents are still to be skipped.
pub(crate) fn skip(docs: Vec<Document>, counter: &mut usize) -> Vec<Document> {
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        if *counter > 0 {
            *counter -= 1;
        } else {
            out.push(d);
        }
    }
    out
}

/// `$limit` over a batch: `counter` is how many documents may still pass.
pub(crate) fn limit(docs: Vec<Document>, counter: &mut usize) -> Vec<Document> {
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        if *counter == 0 {
            break;
        }
        *counter -= 1;
        out.push(d);
    }
    out
}

/// `$sort` (with the `$limit` folded into it, if any), under the run's collation.
pub(crate) fn sort(
    spec: &SortSpec,
    limit: Option<usize>,
    docs: Vec<Document>,
    vars: &Variables,
) -> Vec<Document> {
    let mut top = top_sort(spec, limit, vars);
    docs.into_iter().for_each(|d| top.push(d));
    top.finish()
}

/// A `$sort` (with the `$limit` folded into it, if any) taking its input one document
/// at a time (see [`TopK`]), under the run's collation.
pub(crate) fn top_sort(spec: &SortSpec, limit: Option<usize>, vars: &Variables) -> TopK {
    TopK::new(sorted_under(spec.clone(), vars), limit)
}

/// A `$sort`'s order under the run's collation.
pub(crate) fn sorted_under(spec: SortSpec, vars: &Variables) -> SortSpec {
    match &vars.collator {
        None => spec,
        Some(c) => spec.with_collator(Some(c.clone())),
    }
}

/// `$sample`: `n` documents drawn without replacement (a partial Fisher-Yates shuffle).
pub(crate) fn sample(n: usize, docs: Vec<Document>) -> Vec<Document> {
    let mut docs = docs;
    let n = (n).min(docs.len());
    for i in 0..n {
        let j = i + (next_u64() % (docs.len() - i) as u64) as usize;
        docs.swap(i, j);
    }
    docs.truncate(n);
    docs
}

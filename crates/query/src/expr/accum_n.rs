//! The operators that are both `$group` accumulators and array expressions, parsed and
//! computed here for both uses: `$firstN` `$lastN` `$minN` `$maxN` (`{n, input}`) and the
//! quantiles `$median` (`{input, method}`) and `$percentile` (`{input, p, method}`).
//!
//! Quantiles are mongod's discrete percentiles: the sample at 0-based rank
//! `ceil(p * count) - 1` of the sorted numeric inputs. mongod 7.0 documents its
//! `'approximate'` method as a t-digest; on the small inputs of its own examples the
//! digest holds every sample and answers exactly these values.

use super::util::{self, show, type_name};
use super::Expr;
use crate::collation::Collator;
use crate::compare::cmp_bson_with;
use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::cmp::Ordering;

/// The only `method` MongoDB 7.0 accepts for `$median` and `$percentile`.
pub const APPROXIMATE: &str = "approximate";

/// The `n` of an N-accumulator, as mongod validates it when a group (or an expression)
/// starts: a positive number with an integral value.
pub fn validate_n(v: &Option<Bson>) -> Result<u64> {
    let shown = || util::show_opt(v);
    let Some(x) = v.as_ref().filter(|x| crate::compare::is_number(x)) else {
        return Err(Error::location(
            5787902,
            format!(
                "Value for 'n' must be of integral type, but found {}",
                shown()
            ),
        ));
    };
    let f = crate::compare::as_f64(x).unwrap_or(f64::NAN);
    let n = super::num::as_exact_i64(x);
    let Some(n) = n.filter(|n| *n as f64 == f) else {
        return Err(Error::location(
            5787903,
            format!(
                "Value for 'n' must be of integral type, but found {}",
                shown()
            ),
        ));
    };
    if n <= 0 {
        return Err(Error::location(
            5787908,
            format!("'n' must be greater than 0, found {n}"),
        ));
    }
    Ok(n as u64)
}

/// `{n: <expr>, input: <expr>}` of `$firstN`/`$lastN`/`$minN`/`$maxN`: (n, input).
pub fn parse_n_args(name: &str, arg: &Bson) -> Result<(Expr, Expr)> {
    let Bson::Document(d) = arg else {
        let code = if matches!(name, "$minN" | "$maxN") {
            5787900
        } else {
            5787801
        };
        return Err(Error::location(
            code,
            format!(
                "specification must be an object; found {}",
                element(name, arg)
            ),
        ));
    };
    let (mut n, mut input) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "input" => input = Some(Expr::parse(v)?),
            "n" => n = Some(Expr::parse(v)?),
            other => {
                return Err(Error::location(
                    5787901,
                    format!("Unknown argument for 'n' operator: {other}"),
                ))
            }
        }
    }
    let n = n.ok_or_else(|| Error::location(5787906, "Missing value for 'n'"))?;
    let input = input.ok_or_else(|| Error::location(5787907, "Missing value for 'input'"))?;
    Ok((n, input))
}

/// A BSON element as mongod's `str::stream() << elem` shows it in these messages
/// (`$firstN: 5`).
fn element(name: &str, v: &Bson) -> String {
    crate::render::elem_to_string(name, v)
}

/// The parsed `{input, p, method}` of `$percentile` (or `{input, method}` of `$median`).
pub struct QuantileArgs {
    pub input: Expr,
    /// The percentiles asked for, each in [0, 1]; `[0.5]` for `$median`.
    pub ps: Vec<f64>,
}

/// Parses `$median`/`$percentile` as mongod's IDL does (unknown, missing and mistyped
/// fields under the operator's name), then `p` and `method`. `not_object_code` is the
/// assertion the accumulator and the expression each use for a non-object argument.
pub fn parse_quantile(name: &str, arg: &Bson, not_object_code: i32) -> Result<QuantileArgs> {
    let Bson::Document(d) = arg else {
        return Err(Error::location(
            not_object_code,
            format!(
                "specification must be an object; found {}",
                element(name, arg)
            ),
        ));
    };
    let median = name == "$median";
    let (mut input, mut p, mut method) = (None, None, None);
    for (k, v) in d {
        match k.as_str() {
            "input" => input = Some(v),
            "p" if !median => p = Some(v),
            "method" => match v {
                Bson::String(s) => method = Some(s.as_str()),
                other => {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '{name}.method' is the wrong type '{}', expected type 'string'",
                        type_name(other)
                    )))
                }
            },
            other => {
                return Err(Error::new(
                    40415,
                    format!("BSON field '{name}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let input = input.ok_or_else(|| Error::missing_field(&format!("{name}.input")))?;
    if !median && p.is_none() {
        return Err(Error::missing_field(&format!("{name}.p")));
    }
    let method = method.ok_or_else(|| Error::missing_field(&format!("{name}.method")))?;
    if method != APPROXIMATE {
        return Err(Error::bad_value(
            "Currently only 'approximate' can be used as percentile 'method'.",
        ));
    }
    let ps = match p {
        Some(p) => parse_p(p)?,
        None => vec![0.5],
    };
    Ok(QuantileArgs {
        input: Expr::parse(input)?,
        ps,
    })
}

/// `p`: a constant expression giving a non-empty array of numbers in [0, 1].
fn parse_p(p: &Bson) -> Result<Vec<f64>> {
    let expr = Expr::parse(p)?;
    if !expr.is_constant() {
        return Err(Error::location(
            7750300,
            format!(
                "The $percentile 'p' field must be an array of constant values, but found value: {}.",
                crate::render::bson_to_string(p)
            ),
        ));
    }
    let value = expr.evaluate_value(&Document::new(), &super::Variables::default())?;
    const MSG: &str =
        "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: ";
    let items = match &value {
        Bson::Array(a) if !a.is_empty() => a,
        other => return Err(Error::location(7750301, format!("{MSG}{}", show(other)))),
    };
    let mut ps = Vec::with_capacity(items.len());
    for item in items {
        let Some(x) = crate::compare::is_number(item)
            .then(|| crate::compare::as_f64(item))
            .flatten()
        else {
            return Err(Error::location(7750302, format!("{MSG}{}", show(item))));
        };
        if !(0.0..=1.0).contains(&x) {
            return Err(Error::location(
                7750303,
                format!("{MSG}{}", util::format_double(x)),
            ));
        }
        ps.push(x);
    }
    Ok(ps)
}

/// The numeric samples a quantile has seen: finite ones kept for sorting, infinities
/// counted (they sort to the ends), NaN and non-numbers ignored, as mongod does.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    finite: Vec<f64>,
    neg_inf: usize,
    pos_inf: usize,
}

impl Samples {
    pub fn add(&mut self, v: &Bson) {
        if !crate::compare::is_number(v) {
            return;
        }
        let Some(x) = crate::compare::as_f64(v) else {
            return;
        };
        if x.is_nan() {
        } else if x == f64::INFINITY {
            self.pos_inf += 1;
        } else if x == f64::NEG_INFINITY {
            self.neg_inf += 1;
        } else {
            self.finite.push(x);
        }
    }

    fn count(&self) -> usize {
        self.finite.len() + self.neg_inf + self.pos_inf
    }

    /// The discrete percentile of each `p` (None when there are no samples).
    pub fn percentiles(mut self, ps: &[f64]) -> Option<Vec<f64>> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        self.finite.sort_by(f64::total_cmp);
        Some(
            ps.iter()
                .map(|&p| {
                    let rank = discrete_rank(total, p);
                    if rank < self.neg_inf {
                        f64::NEG_INFINITY
                    } else if rank >= self.neg_inf + self.finite.len() {
                        f64::INFINITY
                    } else {
                        self.finite[rank - self.neg_inf]
                    }
                })
                .collect(),
        )
    }
}

/// The 0-based rank of percentile `p` among `n` sorted samples: the smallest sample with
/// at least `ceil(p * n)` samples at or below it (p = 0 is the minimum, p = 1 the maximum).
fn discrete_rank(n: usize, p: f64) -> usize {
    if p >= 1.0 {
        return n - 1;
    }
    ((n as f64 * p).ceil() as usize).saturating_sub(1)
}

/// The result of `$median` (a double or null) or `$percentile` (one double or null per p).
pub fn quantile_result(name: &str, ps: &[f64], values: Option<Vec<f64>>) -> Bson {
    match (name == "$median", values) {
        (true, Some(v)) => Bson::Double(v[0]),
        (true, None) => Bson::Null,
        (false, Some(v)) => Bson::Array(v.into_iter().map(Bson::Double).collect()),
        (false, None) => Bson::Array(vec![Bson::Null; ps.len()]),
    }
}

/// `$median`/`$percentile` as expressions: a number is every percentile of itself; an
/// array's numeric elements are the samples; anything else has none.
pub fn eval_quantile(name: &str, input: Option<Bson>, p: Option<Bson>) -> Result<Option<Bson>> {
    let ps: Vec<f64> = match p {
        Some(Bson::Array(a)) => a.iter().filter_map(crate::compare::as_f64).collect(),
        _ => vec![0.5],
    };
    let mut samples = Samples::default();
    match &input {
        Some(Bson::Array(items)) => items.iter().for_each(|x| samples.add(x)),
        Some(x) if crate::compare::is_number(x) => {
            let x = crate::compare::as_f64(x).unwrap_or(f64::NAN);
            return Ok(Some(quantile_result(name, &ps, Some(vec![x; ps.len()]))));
        }
        _ => {}
    }
    Ok(Some(quantile_result(name, &ps, samples.percentiles(&ps))))
}

/// `$firstN`/`$lastN`/`$minN`/`$maxN` as expressions over an array.
pub fn eval_n(
    name: &str,
    n: Option<Bson>,
    input: Option<Bson>,
    coll: Option<&Collator>,
) -> Result<Option<Bson>> {
    let n = usize::try_from(validate_n(&n)?).unwrap_or(usize::MAX);
    let Some(Bson::Array(items)) = input else {
        return Err(Error::location(5788200, "Input must be an array"));
    };
    let out = match name {
        "$firstN" => items.into_iter().take(n).collect(),
        "$lastN" => {
            let skip = items.len().saturating_sub(n);
            items.into_iter().skip(skip).collect()
        }
        _ => {
            let mut kept = MinMaxN::new(name == "$maxN", n);
            for item in items {
                kept.add(item, coll);
            }
            kept.into_values()
        }
    };
    Ok(Some(Bson::Array(out)))
}

/// The `n` smallest (`$minN`) or largest (`$maxN`) non-null values seen, in that order.
#[derive(Debug, Clone)]
pub struct MinMaxN {
    max: bool,
    n: usize,
    /// Best first: ascending for `$minN`, descending for `$maxN`.
    kept: Vec<Bson>,
}

impl MinMaxN {
    pub fn new(max: bool, n: usize) -> MinMaxN {
        MinMaxN {
            max,
            n,
            kept: Vec::new(),
        }
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether no value is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// `a` before `b` in the result order.
    fn better(&self, a: &Bson, b: &Bson, coll: Option<&Collator>) -> Ordering {
        let o = cmp_bson_with(a, b, coll);
        if self.max {
            o.reverse()
        } else {
            o
        }
    }

    pub fn add(&mut self, v: Bson, coll: Option<&Collator>) {
        if matches!(v, Bson::Null | Bson::Undefined) {
            return;
        }
        if self.kept.len() == self.n {
            // Full: the new value must beat the worst one kept.
            let worst = self.kept.last().expect("n is at least 1");
            if self.better(&v, worst, coll) != Ordering::Less {
                return;
            }
            self.kept.pop();
        }
        // After the values it ties with: the earlier ones stay ahead.
        let at = self
            .kept
            .partition_point(|k| self.better(k, &v, coll) != Ordering::Greater);
        self.kept.insert(at, v);
    }

    pub fn into_values(self) -> Vec<Bson> {
        self.kept
    }
}

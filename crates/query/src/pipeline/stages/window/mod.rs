//! `$setWindowFields`: window functions over the sorted documents of each partition.
//!
//! The stage is parsed here (its spec, each output's window function and its window
//! bounds, with mongod's errors: window_function_expression.cpp, window_bounds.cpp,
//! window_function_shift.cpp); `bounds` turns a window into the positions it covers for
//! one document, and `run` evaluates the functions. Accumulators (`$sum`, `$push`, ...)
//! are `$group`'s own ([`AccSpec`], [`AccState`]): a window feeds its accumulator the
//! documents it covers, so whatever `$group` accumulates, a window does too.
//!
//! [`AccState`]: super::super::group::AccState

mod bounds;
mod exp_moving_avg;
mod run;
mod sliding;
#[cfg(test)]
mod tests;

use super::super::group::AccSpec;
use super::Stage;
use crate::error::{Error, Result};
use crate::expr::{util, Expr};
use crate::sort::SortSpec;
use bson::{Bson, Document};

pub(crate) use run::{
    partition_order, partition_record, set_window_fields, unpack_partition_record, window_partition,
};

const STAGE: &str = "$setWindowFields";
/// The field of a window function's spec that holds its bounds.
const WINDOW_ARG: &str = "window";

/// A parsed `$setWindowFields`.
pub(crate) struct WindowFieldsStage {
    pub(crate) partition_by: Option<Expr>,
    pub(crate) sort_by: Option<SortSpec>,
    pub(crate) outputs: Vec<Output>,
}

/// One field of `output`: its (possibly dotted) path and the function that fills it.
pub(crate) struct Output {
    pub(crate) path: String,
    pub(crate) func: WindowFunc,
}

/// One bound of a window: `"unbounded"`, `"current"` or a constant number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Unbounded,
    Current,
    /// A document offset (`documents`) or a distance on the sort value (`range`).
    At(Bson),
}

/// A time unit of a range window or of `$derivative`/`$integral`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Millisecond,
}

impl TimeUnit {
    pub(crate) fn parse(s: &str) -> Result<TimeUnit> {
        Ok(match s {
            "year" => TimeUnit::Year,
            "quarter" => TimeUnit::Quarter,
            "month" => TimeUnit::Month,
            "week" => TimeUnit::Week,
            "day" => TimeUnit::Day,
            "hour" => TimeUnit::Hour,
            "minute" => TimeUnit::Minute,
            "second" => TimeUnit::Second,
            "millisecond" => TimeUnit::Millisecond,
            other => {
                return Err(Error::failed_to_parse(format!(
                    "unknown time unit value: {other}"
                )))
            }
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            TimeUnit::Year => "year",
            TimeUnit::Quarter => "quarter",
            TimeUnit::Month => "month",
            TimeUnit::Week => "week",
            TimeUnit::Day => "day",
            TimeUnit::Hour => "hour",
            TimeUnit::Minute => "minute",
            TimeUnit::Second => "second",
            TimeUnit::Millisecond => "millisecond",
        }
    }

    /// Milliseconds in one unit, for the units of fixed length (week and shorter).
    fn fixed_millis(self) -> Option<i64> {
        const SECOND: i64 = 1000;
        Some(match self {
            TimeUnit::Week => 7 * 24 * 3600 * SECOND,
            TimeUnit::Day => 24 * 3600 * SECOND,
            TimeUnit::Hour => 3600 * SECOND,
            TimeUnit::Minute => 60 * SECOND,
            TimeUnit::Second => SECOND,
            TimeUnit::Millisecond => 1,
            TimeUnit::Year | TimeUnit::Quarter | TimeUnit::Month => return None,
        })
    }
}

/// The documents a window function sees for one document of its partition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Window {
    /// Positions relative to the current document.
    Documents { lower: Bound, upper: Bound },
    /// Values of the (single, ascending) sort field relative to the current one's;
    /// with a unit, the sort values are dates and the bounds whole units of time.
    Range {
        lower: Bound,
        upper: Bound,
        unit: Option<TimeUnit>,
    },
}

impl Window {
    /// `[unbounded, unbounded]`: the whole partition.
    pub(crate) const WHOLE: Window = Window::Documents {
        lower: Bound::Unbounded,
        upper: Bound::Unbounded,
    };
    /// `[unbounded, current]`: the partition up to the current document.
    const TO_CURRENT: Window = Window::Documents {
        lower: Bound::Unbounded,
        upper: Bound::Current,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RankKind {
    Rank,
    DenseRank,
    DocumentNumber,
}

/// A parsed window function.
pub(crate) enum WindowFunc {
    /// A `$group` accumulator over the window's documents.
    Accumulator {
        spec: AccSpec,
        window: Window,
    },
    /// `$first` / `$last`: the input at the window's first or last document (missing
    /// stays missing; an empty window gives null).
    Endpoint {
        input: Expr,
        last: bool,
        window: Window,
    },
    Rank(RankKind),
    Shift {
        output: Expr,
        by: i64,
        default: Bson,
    },
    Derivative {
        input: Expr,
        unit_ms: Option<i64>,
        window: Window,
    },
    Integral {
        input: Expr,
        unit_ms: Option<i64>,
        window: Window,
    },
    ExpMovingAvg {
        input: Expr,
        alpha: crate::expr::num::Dec,
    },
    Covariance {
        input: Expr,
        sample: bool,
        window: Window,
    },
    Locf(Expr),
    LinearFill(Expr),
}

/// The window functions that are not `$group` accumulators, and the accumulators that
/// are not window functions in 7.0.
const OWN_FUNCTIONS: &[&str] = &[
    "$rank",
    "$denseRank",
    "$documentNumber",
    "$shift",
    "$derivative",
    "$integral",
    "$expMovingAvg",
    "$covariancePop",
    "$covarianceSamp",
    "$locf",
    "$linearFill",
    "$count",
    "$first",
    "$last",
];
const NOT_WINDOW_FUNCTIONS: &[&str] = &["$mergeObjects", "$accumulator"];
/// mongod's code for an unknown `$group` operator, which here means "not a window
/// function" either.
const UNKNOWN_GROUP_OPERATOR: i32 = 15952;

/// `{$setWindowFields: {partitionBy, sortBy, output}}`.
pub(crate) fn parse_set_window_fields(arg: &Bson) -> Result<Stage> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "the {STAGE} stage specification must be an object, found {}",
            util::type_name(arg)
        )));
    };
    // As mongod: the spec's fields and their types first (IDL), then partitionBy,
    // sortBy and each output parsed, and last the check of a constant partitionBy.
    let (mut partition_by, mut sort_by, mut output) = (None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "partitionBy" => partition_by = Some(v),
            "sortBy" => sort_by = Some(crate::args::doc_value(&format!("{STAGE}.sortBy"), v)?),
            "output" => output = Some(crate::args::doc_value(&format!("{STAGE}.output"), v)?),
            other => {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{STAGE}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let output = output.ok_or_else(|| Error::missing_field(&format!("{STAGE}.output")))?;
    let partition_by = partition_by.map(Expr::parse).transpose()?;
    let sort_by = sort_by.map(SortSpec::parse).transpose()?;
    let mut outputs: Vec<Output> = Vec::with_capacity(output.len());
    for (path, v) in output {
        if outputs.iter().any(|o| paths_conflict(&o.path, path)) {
            return Err(Error::location(
                6307900,
                format!("{STAGE} 'output' specification contains two conflicting paths"),
            ));
        }
        let Bson::Document(f) = v else {
            return Err(Error::failed_to_parse(format!(
                "The field '{path}' must be an object"
            )));
        };
        outputs.push(Output {
            path: path.clone(),
            func: parse_function(f, sort_by.as_ref())?,
        });
    }
    if let Some(Bson::Array(_)) = partition_by.as_ref().and_then(Expr::as_const) {
        return Err(Error::type_mismatch(
            "An expression used to partition cannot evaluate to value of type array",
        ));
    }
    Ok(Stage::SetWindowFields(Box::new(WindowFieldsStage {
        partition_by,
        sort_by,
        outputs,
    })))
}

/// Whether one output path equals the other or is a prefix of it.
fn paths_conflict(a: &str, b: &str) -> bool {
    let prefix =
        |x: &str, y: &str| y.len() > x.len() && y.starts_with(x) && y[x.len()..].starts_with('.');
    a == b || prefix(a, b) || prefix(b, a)
}

/// One output's spec: `{$fn: <args>, window: {...}}`, named by its first `$` field.
fn parse_function(f: &Document, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    let Some((name, arg)) = f.iter().find(|(k, _)| k.starts_with('$')) else {
        let first = f
            .keys()
            .next()
            .map(|k| format!(", {k}"))
            .unwrap_or_default();
        return Err(Error::failed_to_parse(format!(
            "Expected a $-prefixed window function{first}"
        )));
    };
    let unrecognized = || Error::failed_to_parse(format!("Unrecognized window function, {name}"));
    if NOT_WINDOW_FUNCTIONS.contains(&name.as_str()) {
        return Err(unrecognized());
    }
    let name = name.as_str();
    match name {
        "$rank" | "$denseRank" | "$documentNumber" => parse_rank(f, name, sort_by),
        "$shift" => parse_shift(f, sort_by),
        "$expMovingAvg" => parse_exp_moving_avg(f, sort_by),
        "$derivative" | "$integral" => parse_with_unit(f, name, sort_by),
        "$locf" | "$linearFill" => parse_fill(f, name, sort_by),
        _ => {
            if !OWN_FUNCTIONS.contains(&name) && accumulator(name, arg)?.is_none() {
                return Err(unrecognized());
            }
            parse_windowed(f, name, sort_by)
        }
    }
}

/// The accumulators of one expression argument, which a window gives any expression
/// (an array is the value of an array expression here, where `$group` refuses it).
const UNARY_ACCUMULATORS: &[&str] = &[
    "$sum",
    "$avg",
    "$min",
    "$max",
    "$push",
    "$addToSet",
    "$stdDevPop",
    "$stdDevSamp",
];

/// The `$group` accumulator `{name: arg}` (built by `$group`'s own parser, whatever
/// it holds), None when `$group` has no such operator.
fn accumulator(name: &str, arg: &Bson) -> Result<Option<AccSpec>> {
    let unary = UNARY_ACCUMULATORS.contains(&name);
    let mut d = Document::new();
    d.insert(name, if unary { Bson::Null } else { arg.clone() });
    match AccSpec::parse(WINDOW_ARG, &Bson::Document(d)) {
        Err(e) if e.code == UNKNOWN_GROUP_OPERATOR => Ok(None),
        Err(e) => Err(e),
        Ok(mut spec) => {
            if unary {
                spec.arg = Expr::parse(arg)?;
            }
            Ok(Some(spec))
        }
    }
}

/// A function that takes a `window`: the accumulators, `$count`, `$first`, `$last` and
/// the covariances.
fn parse_windowed(f: &Document, name: &str, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    let mut window = None;
    let mut arg = None;
    for (k, v) in f {
        if k == WINDOW_ARG {
            window = Some(bounds::parse_window(v, sort_by)?);
        } else if k == name {
            arg = Some(v);
        } else if k.starts_with('$') {
            return Err(Error::failed_to_parse(
                "Cannot specify two functions in window function spec",
            ));
        } else {
            return Err(Error::failed_to_parse(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    let arg = arg.expect("the function's own field");
    let window = window.unwrap_or(Window::WHOLE);
    Ok(match name {
        "$count" => {
            if !matches!(arg, Bson::Document(d) if d.is_empty()) {
                return Err(Error::failed_to_parse(
                    "$count only accepts an empty object as input",
                ));
            }
            WindowFunc::Accumulator {
                spec: accumulator("$sum", &Bson::Int32(1))?.expect("$group's $sum"),
                window,
            }
        }
        "$first" | "$last" => WindowFunc::Endpoint {
            input: Expr::parse(arg)?,
            last: name == "$last",
            window,
        },
        "$covariancePop" | "$covarianceSamp" => WindowFunc::Covariance {
            input: Expr::parse(arg)?,
            sample: name == "$covarianceSamp",
            window,
        },
        _ => WindowFunc::Accumulator {
            spec: accumulator(name, arg)?.expect("checked by parse_function"),
            window,
        },
    })
}

/// A sort of exactly one field (rank-style functions and `$linearFill` need it).
fn single_sort(sort_by: Option<&SortSpec>) -> bool {
    sort_by.is_some_and(|s| s.fields.len() == 1)
}

/// `$rank`, `$denseRank`, `$documentNumber`: `{}` and nothing else, over a one-field sort.
fn parse_rank(f: &Document, name: &str, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    if f.len() != 1 {
        return Err(Error::location(
            5371601,
            "Rank style window functions take no other arguments",
        ));
    }
    if !matches!(f.get(name), Some(Bson::Document(d)) if d.is_empty()) {
        return Err(Error::location(
            5371603,
            format!("{name} must be specified with '{{}}' as the value"),
        ));
    }
    if !single_sort(sort_by) {
        return Err(Error::location(
            5371602,
            format!(
                "{name} must be specified with a top level sortBy expression with exactly one element"
            ),
        ));
    }
    Ok(WindowFunc::Rank(match name {
        "$rank" => RankKind::Rank,
        "$denseRank" => RankKind::DenseRank,
        _ => RankKind::DocumentNumber,
    }))
}

/// `$shift: {output, by, default}`: no window, a sort required.
fn parse_shift(f: &Document, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    let mut parsed = None;
    for (k, v) in f {
        if k == WINDOW_ARG {
            return Err(Error::failed_to_parse(
                "$shift does not accept a 'window' field",
            ));
        } else if k == "$shift" {
            let Bson::Document(args) = v else {
                return Err(Error::failed_to_parse(
                    "Argument to $shift must be an object",
                ));
            };
            parsed = Some(parse_shift_args(args)?);
        } else if k.starts_with('$') {
            return Err(Error::failed_to_parse(
                "Cannot specify multiple functions in window function spec",
            ));
        } else {
            return Err(Error::failed_to_parse(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    if sort_by.is_none() {
        return Err(Error::failed_to_parse("'$shift' requires a sortBy"));
    }
    Ok(parsed.expect("the function's own field"))
}

fn parse_shift_args(args: &Document) -> Result<WindowFunc> {
    let (mut output, mut by, mut default) = (None, None, Bson::Null);
    for (k, v) in args {
        match k.as_str() {
            "output" => output = Some(Expr::parse(v)?),
            "default" => {
                default = constant(v).ok_or_else(|| {
                    Error::failed_to_parse(
                        "'$shift:default' expression must yield a constant value.",
                    )
                })?;
            }
            "by" => {
                let n = crate::expr::num::as_exact_i32(v)
                    .filter(|_| crate::compare::is_number(v))
                    .ok_or_else(|| {
                        Error::failed_to_parse(format!(
                            "'$shift:by' field must be an integer, but found  {}",
                            crate::render::elem_to_string("by", v)
                        ))
                    })?;
                by = Some(n as i64);
            }
            _ => return Err(Error::failed_to_parse("Unknown argument in $shift")),
        }
    }
    let output =
        output.ok_or_else(|| Error::failed_to_parse("$shift requires an 'output' expression."))?;
    let by =
        by.ok_or_else(|| Error::failed_to_parse("$shift requires 'by' as an integer value."))?;
    Ok(WindowFunc::Shift {
        output,
        by,
        default,
    })
}

/// The value of a constant expression (a literal, or operators over literals), None
/// when it reads a field or a variable.
pub(crate) fn constant(v: &Bson) -> Option<Bson> {
    let e = Expr::parse(v).ok()?;
    if !is_constant(&e) {
        return None;
    }
    e.evaluate_value(&Document::new(), &crate::expr::Variables::new())
        .ok()
}

/// Whether an expression reads neither the document nor a variable (so folds to one value).
fn is_constant(e: &Expr) -> bool {
    /// Operators whose value differs from call to call.
    const VOLATILE: &[&str] = &["$rand", "$function"];
    match e {
        Expr::Const(_) => true,
        Expr::Doc(fields) => fields.iter().all(|(_, x)| is_constant(x)),
        Expr::Arr(items) => items.iter().all(is_constant),
        Expr::Op(name, args) => !VOLATILE.contains(&name.as_str()) && args.iter().all(is_constant),
        Expr::Named(_, args) => args.iter().all(|(_, x)| is_constant(x)),
        _ => false,
    }
}

/// `$expMovingAvg: {input, N | alpha}`: no window, a sort required.
fn parse_exp_moving_avg(f: &Document, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    let Some(Bson::Document(sub)) = f.get("$expMovingAvg").filter(|_| f.len() == 1) else {
        return Err(Error::failed_to_parse(
            "$expMovingAvg must have exactly one argument that is an object",
        ));
    };
    let shape = "$expMovingAvg sub object must have exactly two fields: An 'input' field, and either an 'N' field or an 'alpha' field";
    if sub.len() != 2 || !sub.contains_key("input") {
        return Err(Error::failed_to_parse(shape));
    }
    if sort_by.is_none() {
        return Err(Error::failed_to_parse(
            "$expMovingAvg requires an explicit 'sortBy'",
        ));
    }
    let input = Expr::parse(sub.get("input").unwrap())?;
    let alpha = if let Some(n) = sub.get("N") {
        exp_moving_avg_n(n)?
    } else if let Some(a) = sub.get("alpha") {
        let x = crate::compare::as_f64(a)
            .filter(|_| crate::compare::is_number(a))
            .ok_or_else(|| Error::failed_to_parse("'alpha' must be a number"))?;
        if !(x > 0.0 && x < 1.0) {
            return Err(Error::failed_to_parse(format!(
                "'alpha' must be between 0 and 1 (exclusive), found {}",
                crate::render::elem_to_string("alpha", a)
            )));
        }
        exp_moving_avg::to_dec(a)
            .ok_or_else(|| Error::failed_to_parse("'alpha' must be a number"))?
    } else {
        return Err(Error::failed_to_parse(format!(
            "Got unrecognized field in $expMovingAvg{shape}"
        )));
    };
    Ok(WindowFunc::ExpMovingAvg { input, alpha })
}

/// `N` of `$expMovingAvg`: a positive whole number, as alpha = 2 / (N + 1).
fn exp_moving_avg_n(n: &Bson) -> Result<crate::expr::num::Dec> {
    if !crate::compare::is_number(n) {
        return Err(Error::failed_to_parse(format!(
            "'N' field must be an integer, but found type {}",
            util::type_name(n)
        )));
    }
    let x = crate::compare::as_f64(n).unwrap_or(f64::NAN);
    if x != x.floor() {
        return Err(Error::failed_to_parse(format!(
            "'N' field must be an integer, but found  {}. To use a non-integer, use the 'alpha' argument instead",
            crate::render::elem_to_string("N", n)
        )));
    }
    if x <= 0.0 {
        return Err(Error::failed_to_parse(format!(
            "'N' must be greater than zero. Got {}",
            x as i64
        )));
    }
    Ok(exp_moving_avg::alpha_from_n(x as i64))
}

/// `$derivative` / `$integral: {input, unit}` with a window, over a one-field sort.
fn parse_with_unit(f: &Document, name: &str, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    match sort_by {
        None => return Err(Error::failed_to_parse(format!("{name} requires a sortBy"))),
        Some(s) if s.fields.len() != 1 => {
            return Err(Error::failed_to_parse(format!(
                "{name} requires a non-compound sortBy"
            )))
        }
        _ => {}
    }
    let mut window = None;
    let mut args = None;
    for (k, v) in f {
        if k == WINDOW_ARG {
            if window.is_some() {
                return Err(Error::failed_to_parse(format!(
                    "There can be only one 'window' field for {name}"
                )));
            }
            window = Some(bounds::parse_window(v, sort_by)?);
        } else if k == name {
            args = Some(v);
        } else {
            return Err(Error::failed_to_parse(format!(
                "{name} got unexpected argument: {k}"
            )));
        }
    }
    let args = args.expect("the function's own field");
    let Bson::Document(args) = args else {
        return Err(Error::failed_to_parse(format!(
            "{name} expects an object, but got a {}: {}",
            util::type_name(args),
            crate::render::elem_to_string(name, args)
        )));
    };
    let (mut input, mut unit_ms) = (None, None);
    for (k, v) in args {
        match k.as_str() {
            "input" => input = Some(Expr::parse(v)?),
            "unit" => unit_ms = Some(function_unit(v)?),
            _ => {
                return Err(Error::failed_to_parse(format!(
                    "{name} got unexpected argument: {k}"
                )))
            }
        }
    }
    let input = input
        .ok_or_else(|| Error::failed_to_parse(format!("{name} requires an 'input' expression")))?;
    if name == "$derivative" {
        let window = window
            .ok_or_else(|| Error::failed_to_parse("$derivative requires explicit window bounds"))?;
        return Ok(WindowFunc::Derivative {
            input,
            unit_ms,
            window,
        });
    }
    Ok(WindowFunc::Integral {
        input,
        unit_ms,
        window: window.unwrap_or(Window::WHOLE),
    })
}

/// The `unit` of `$derivative`/`$integral`: a unit of fixed length, in milliseconds.
fn function_unit(v: &Bson) -> Result<i64> {
    let Bson::String(s) = v else {
        return Err(Error::failed_to_parse(format!(
            "unit' must be a string, but got {}",
            util::type_name(v)
        )));
    };
    TimeUnit::parse(s)?
        .fixed_millis()
        .ok_or_else(|| Error::location(5490710, "unit must be 'week' or smaller"))
}

/// `$locf` / `$linearFill: <expr>`: no window (`$linearFill` also needs a one-field sort).
fn parse_fill(f: &Document, name: &str, sort_by: Option<&SortSpec>) -> Result<WindowFunc> {
    let mut has_window = false;
    let mut input = None;
    for (k, v) in f {
        if k == WINDOW_ARG {
            has_window = true;
        } else if k == name {
            input = Some(Expr::parse(v)?);
        } else if k.starts_with('$') {
            return Err(Error::failed_to_parse(
                "Cannot specify two functions in window function spec",
            ));
        } else {
            return Err(Error::failed_to_parse(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    if has_window {
        return Err(Error::failed_to_parse(format!(
            "'window' field is not allowed in {name}"
        )));
    }
    let input = input.expect("the function's own field");
    if name == "$locf" {
        return Ok(WindowFunc::Locf(input));
    }
    if !single_sort(sort_by) {
        return Err(Error::location(
            605001,
            "$linearFill must be specified with a top level sortBy expression with exactly one element",
        ));
    }
    Ok(WindowFunc::LinearFill(input))
}

impl WindowFunc {
    /// The window the function reads for each document (rank-style functions, `$shift`,
    /// `$locf`, `$linearFill` and `$expMovingAvg` read the partition their own way).
    pub(crate) fn window(&self) -> &Window {
        match self {
            WindowFunc::Accumulator { window, .. }
            | WindowFunc::Endpoint { window, .. }
            | WindowFunc::Derivative { window, .. }
            | WindowFunc::Integral { window, .. }
            | WindowFunc::Covariance { window, .. } => window,
            _ => &Window::TO_CURRENT,
        }
    }
}

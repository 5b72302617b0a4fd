//! The `$group` accumulators that keep several values, a sort or a sample:
//! `$firstN` `$lastN` `$minN` `$maxN` (`{n, input}`), `$top` `$bottom` (`{output, sortBy}`),
//! `$topN` `$bottomN` (`{n, output, sortBy}`) and the quantiles `$median` `$percentile`.
//!
//! As in mongod, `$top`/`$bottom`'s argument is one object expression,
//! `{output: <output>, sortFields0: "$<first sort path>", ...}`, so each document's
//! sort key travels with its output through the accumulator's one argument.

use crate::bson_size::{heap_len, memory_len, BSON_SLOT_BYTES};
use crate::collation::Collator;
use crate::compare::cmp_bson_with;
use crate::error::{Error, Result};
use crate::expr::accum_n::{self, MinMaxN, Samples};
use crate::expr::{Expr, Variables};
use crate::sort::{sort_key_value_with, SortSpec};
use bson::{Bson, Document};
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

/// The field of a `$top`/`$bottom` argument holding the output.
const OUTPUT_FIELD: &str = "output";
/// The prefix of the fields of a `$top`/`$bottom` argument holding the sort values.
const SORT_FIELD_PREFIX: &str = "sortFields";

/// What these accumulators take besides their per-document argument.
#[derive(Debug)]
pub struct AccParams {
    /// `n`, evaluated when a group starts, against the group key (mongod lets it depend
    /// on the key); `None` for the quantiles.
    pub n: Option<Expr>,
    /// The directions of `sortBy` (true: descending), one per `sortFields<i>`.
    pub sort_desc: Vec<bool>,
    /// The percentiles asked for (`[0.5]` for `$median`).
    pub ps: Vec<f64>,
}

/// This module's accumulators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FirstN,
    LastN,
    MinN,
    MaxN,
    Top,
    TopN,
    Bottom,
    BottomN,
    Median,
    Percentile,
}

impl Kind {
    /// `$top`/`$bottom`: one output rather than an array of n.
    fn single(self) -> bool {
        matches!(self, Kind::Top | Kind::Bottom)
    }
}

/// The accumulator `name` names, if it is one of this module's.
pub fn kind_for(name: &str) -> Option<Kind> {
    Some(match name {
        "$firstN" => Kind::FirstN,
        "$lastN" => Kind::LastN,
        "$minN" => Kind::MinN,
        "$maxN" => Kind::MaxN,
        "$top" => Kind::Top,
        "$topN" => Kind::TopN,
        "$bottom" => Kind::Bottom,
        "$bottomN" => Kind::BottomN,
        "$median" => Kind::Median,
        "$percentile" => Kind::Percentile,
        _ => return None,
    })
}

/// Parses the argument of `op_name` (of kind `kind`): the per-document argument
/// expression and the parameters.
pub fn parse(kind: Kind, op_name: &str, arg: &Bson) -> Result<(Expr, AccParams)> {
    Ok(match kind {
        Kind::FirstN | Kind::LastN | Kind::MinN | Kind::MaxN => {
            let (n, input) = accum_n::parse_n_args(op_name, arg)?;
            let params = AccParams {
                n: Some(n),
                sort_desc: Vec::new(),
                ps: Vec::new(),
            };
            (input, params)
        }
        Kind::Top | Kind::TopN | Kind::Bottom | Kind::BottomN => {
            parse_top_bottom(op_name, kind.single(), arg)?
        }
        Kind::Median | Kind::Percentile => {
            let code = if kind == Kind::Median {
                7436100
            } else {
                7429703
            };
            let q = accum_n::parse_quantile(op_name, arg, code)?;
            let params = AccParams {
                n: None,
                sort_desc: Vec::new(),
                ps: q.ps,
            };
            (q.input, params)
        }
    })
}

/// `{n, output, sortBy}` (no `n` for the `single` forms, whose n is 1), checked as mongod's
/// `accumulatorNParseArgs` checks it.
fn parse_top_bottom(name: &str, single: bool, arg: &Bson) -> Result<(Expr, AccParams)> {
    let Bson::Document(d) = arg else {
        return Err(Error::location(
            5788001,
            format!(
                "specification must be an object; found {}",
                crate::render::elem_to_string(name, arg)
            ),
        ));
    };
    let (mut n, mut output, mut sort_by) = (None, None, None);
    for (k, v) in d {
        match k.as_str() {
            "n" if !single => n = Some(Expr::parse(v)?),
            "output" => output = Some(v),
            "sortBy" => match v {
                Bson::Document(s) => sort_by = Some(s),
                _ => {
                    return Err(Error::location(
                        10065,
                        "invalid parameter: expected an object (sortBy)",
                    ))
                }
            },
            other => {
                return Err(Error::location(
                    5788002,
                    format!("Unknown argument to {name} '{other}'"),
                ))
            }
        }
    }
    let n = match n {
        Some(n) => n,
        None if single => Expr::Const(Bson::Int32(1)),
        None => return Err(Error::location(5788003, "Missing value for 'n'")),
    };
    let output = output.ok_or_else(|| Error::location(5788004, "Missing value for 'output'"))?;
    let sort_by = sort_by.ok_or_else(|| Error::location(5788005, "Missing value for 'sortBy'"))?;
    let sort = parse_sort_by(sort_by)?;
    let mut fields = vec![(OUTPUT_FIELD.to_string(), Expr::parse(output)?)];
    for (i, (path, _)) in sort.fields.iter().enumerate() {
        let path = path.split('.').map(str::to_string).collect();
        fields.push((format!("{SORT_FIELD_PREFIX}{i}"), Expr::Field(path)));
    }
    let params = AccParams {
        n: Some(n),
        sort_desc: sort.fields.iter().map(|(_, desc)| *desc).collect(),
        ps: Vec::new(),
    };
    Ok((Expr::Doc(fields), params))
}

/// `sortBy`, checked as mongod's `SortPattern` checks it: a direction is the number 1 or
/// -1 (or a `$meta` object).
fn parse_sort_by(sort_by: &Document) -> Result<SortSpec> {
    for (k, v) in sort_by {
        if matches!(v, Bson::Document(_)) {
            continue;
        }
        if !crate::compare::is_number(v) {
            return Err(Error::location(
                15974,
                format!(
                    "Illegal key in $sort specification: {}",
                    crate::render::elem_to_string(k, v)
                ),
            ));
        }
        if !matches!(crate::compare::as_f64(v), Some(d) if d == 1.0 || d == -1.0) {
            return Err(Error::location(
                15975,
                "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
            ));
        }
    }
    SortSpec::parse(sort_by)
}

/// The state of one group of one of this module's accumulators.
#[derive(Debug, Clone)]
pub enum MultiState {
    FirstN {
        n: usize,
        items: Vec<Bson>,
    },
    LastN {
        n: usize,
        items: VecDeque<Bson>,
    },
    MinMaxN(MinMaxN),
    TopBottom(TopBottom),
    Quantile {
        median: bool,
        params: Arc<AccParams>,
        samples: Samples,
    },
}

impl MultiState {
    /// A new group's state; `key` is the group's `_id`, which `n` may read.
    pub fn start(
        kind: Kind,
        params: &Arc<AccParams>,
        key: &Bson,
        vars: &Variables,
    ) -> Result<MultiState> {
        let Some(n_expr) = &params.n else {
            return Ok(MultiState::Quantile {
                median: kind == Kind::Median,
                params: params.clone(),
                samples: Samples::default(),
            });
        };
        // mongod evaluates `n` with the group key as the document (`n: "$k"` reads
        // `_id.k` of `_id: {k: ...}`); a key that is no document gives an empty one.
        let root = match key {
            Bson::Document(d) => d.clone(),
            _ => Document::new(),
        };
        let n = n_expr.evaluate(&root, vars)?;
        let n = usize::try_from(accum_n::validate_n(&n)?).unwrap_or(usize::MAX);
        Ok(match kind {
            Kind::FirstN => MultiState::FirstN {
                n,
                items: Vec::new(),
            },
            Kind::LastN => MultiState::LastN {
                n,
                items: VecDeque::new(),
            },
            Kind::MinN | Kind::MaxN => MultiState::MinMaxN(MinMaxN::new(kind == Kind::MaxN, n)),
            _ => MultiState::TopBottom(TopBottom {
                bottom: matches!(kind, Kind::Bottom | Kind::BottomN),
                single: kind.single(),
                n,
                params: params.clone(),
                items: Vec::new(),
            }),
        })
    }

    /// Folds in one document's argument value; about how many bytes the state grew by.
    pub fn add(&mut self, v: Option<Bson>, coll: Option<&Collator>) -> usize {
        let size = |v: &Option<Bson>| BSON_SLOT_BYTES + v.as_ref().map_or(0, heap_len);
        match self {
            MultiState::FirstN { n, items } => {
                if items.len() >= *n {
                    return 0;
                }
                let grown = size(&v);
                items.push(v.unwrap_or(Bson::Null));
                grown
            }
            MultiState::LastN { n, items } => {
                let grown = size(&v);
                let freed = if items.len() == *n {
                    items
                        .pop_front()
                        .map_or(0, |old| BSON_SLOT_BYTES + heap_len(&old))
                } else {
                    0
                };
                items.push_back(v.unwrap_or(Bson::Null));
                grown.saturating_sub(freed)
            }
            MultiState::MinMaxN(kept) => match v {
                Some(v) => {
                    let (before, grown) = (kept.len(), BSON_SLOT_BYTES + heap_len(&v));
                    kept.add(v, coll);
                    if kept.len() > before {
                        grown
                    } else {
                        0
                    }
                }
                None => 0,
            },
            MultiState::TopBottom(tb) => match v {
                Some(Bson::Document(d)) => {
                    let (before, grown) = (tb.items.len(), memory_len(&d));
                    tb.add(d, coll);
                    if tb.items.len() > before {
                        grown
                    } else {
                        0
                    }
                }
                _ => 0,
            },
            MultiState::Quantile { samples, .. } => match &v {
                Some(v) => {
                    samples.add(v);
                    std::mem::size_of::<f64>()
                }
                None => 0,
            },
        }
    }

    /// The group's value.
    pub fn result(self) -> Bson {
        match self {
            MultiState::FirstN { items, .. } => Bson::Array(items),
            MultiState::LastN { items, .. } => Bson::Array(items.into()),
            MultiState::MinMaxN(kept) => Bson::Array(kept.into_values()),
            MultiState::TopBottom(tb) => {
                let mut outputs = tb.items.into_iter().map(|(_, out)| out);
                if tb.single {
                    outputs.next().unwrap_or(Bson::Null)
                } else {
                    Bson::Array(outputs.collect())
                }
            }
            MultiState::Quantile {
                median,
                params,
                samples,
            } => {
                let name = if median { "$median" } else { "$percentile" };
                accum_n::quantile_result(name, &params.ps, samples.percentiles(&params.ps))
            }
        }
    }
}

/// `$top(N)`/`$bottom(N)`: the first or last `n` outputs in `sortBy` order; on equal
/// sort keys the output seen first is kept.
#[derive(Debug, Clone)]
pub struct TopBottom {
    bottom: bool,
    single: bool,
    n: usize,
    params: Arc<AccParams>,
    /// (sort key, output), in sort order.
    items: Vec<(Vec<Bson>, Bson)>,
}

impl TopBottom {
    fn add(&mut self, arg: Document, coll: Option<&Collator>) {
        let key: Vec<Bson> = (self.params.sort_desc.iter().enumerate())
            .map(|(i, desc)| {
                sort_key_value_with(&arg, &format!("{SORT_FIELD_PREFIX}{i}"), *desc, coll)
            })
            .collect();
        let output = arg.get(OUTPUT_FIELD).cloned().unwrap_or(Bson::Null);
        if self.items.len() == self.n {
            // Full: $top admits a key below its greatest, $bottom one above its least.
            let replaced = if self.bottom {
                self.cmp(&key, &self.items[0].0, coll) == Ordering::Greater
            } else {
                let last = &self.items[self.items.len() - 1].0;
                self.cmp(last, &key, coll) == Ordering::Greater
            };
            if !replaced {
                return;
            }
            if self.bottom {
                self.items.remove(0);
            } else {
                self.items.pop();
            }
        }
        let at = self
            .items
            .partition_point(|(k, _)| self.cmp(k, &key, coll) != Ordering::Greater);
        self.items.insert(at, (key, output));
    }

    /// Sort-key order under `sortBy`'s directions.
    fn cmp(&self, a: &[Bson], b: &[Bson], coll: Option<&Collator>) -> Ordering {
        for ((x, y), desc) in a.iter().zip(b).zip(&self.params.sort_desc) {
            let o = cmp_bson_with(x, y, coll);
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

//! Removable accumulators: a window that slides along a partition (both ends moving
//! forward, as `documents` and `range` windows do over sorted documents) adds the
//! documents that enter it and removes those that leave, instead of folding every window
//! afresh, as mongod's removable window functions do. Each gives exactly what the fold
//! gives:
//!
//! - `$min`/`$max`: a monotonic deque of positions (earliest of equal values first, as the
//!   fold keeps the first it meets), any values.
//! - `$sum`/`$count`/`$avg`: an exact integer total, when the partition's numbers are all
//!   Int32/Int64 and their absolute values sum within Int64 (so no partial sum the fold
//!   takes can overflow). Doubles and decimals are left to the fold: a double total that
//!   subtracts what leaves drifts from the fold's compensated sum.
//!
//! Other accumulators, and windows that do not slide, are folded ([`accumulate`] is None).

use super::super::super::group::{AccOp, AccSpec};
use super::bounds::Span;
use crate::collation::Collator;
use crate::compare::cmp_bson_with;
use crate::expr::num::{int_result, NumKind};
use bson::Bson;
use std::cmp::Ordering;
use std::collections::VecDeque;

/// Each span's value, when the accumulator is removable and the spans slide forward.
pub(super) fn accumulate(
    spec: &AccSpec,
    spans: &[Span],
    args: &[Option<Bson>],
    coll: Option<&Collator>,
) -> Option<Vec<Option<Bson>>> {
    if !slides_forward(spans) {
        return None;
    }
    let mut state = Removable::new(spec.op, args, coll)?;
    let (mut lo_in, mut hi_out) = (0usize, 0usize);
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        let Some((lo, hi)) = *span else {
            out.push(Some(state.empty_result()));
            continue;
        };
        if lo >= hi_out {
            // Nothing of the window before is in this one.
            for j in lo_in..hi_out {
                state.remove(j);
            }
            (lo_in, hi_out) = (lo, lo);
        }
        for j in hi_out..=hi {
            state.add(j);
        }
        hi_out = hi + 1;
        for j in lo_in..lo {
            state.remove(j);
        }
        lo_in = lo;
        out.push(Some(state.result()));
    }
    Some(out)
}

/// Whether every span starts and ends at or after the one before.
fn slides_forward(spans: &[Span]) -> bool {
    let mut last = (0, 0);
    spans.iter().flatten().all(|&(lo, hi)| {
        let ok = lo >= last.0 && hi >= last.1;
        last = (lo, hi);
        ok
    })
}

/// The state of a removable accumulator over the window's positions.
enum Removable<'a> {
    MinMax {
        min: bool,
        args: &'a [Option<Bson>],
        coll: Option<&'a Collator>,
        /// Positions whose values may still be the extreme, best first.
        deque: VecDeque<usize>,
    },
    IntSum {
        op: AccOp,
        ints: Vec<Option<i64>>,
        longs: Vec<bool>,
        total: i128,
        count: u64,
        long_count: u64,
    },
}

impl<'a> Removable<'a> {
    fn new(op: AccOp, args: &'a [Option<Bson>], coll: Option<&'a Collator>) -> Option<Self> {
        match op {
            AccOp::Min | AccOp::Max => Some(Removable::MinMax {
                min: op == AccOp::Min,
                args,
                coll,
                deque: VecDeque::new(),
            }),
            AccOp::Sum | AccOp::Count | AccOp::Avg => Self::int_sum(op, args),
            _ => None,
        }
    }

    /// An integer sum, when every number is an Int32 or Int64 and no partial sum can
    /// leave Int64.
    fn int_sum(op: AccOp, args: &[Option<Bson>]) -> Option<Self> {
        let mut ints = Vec::with_capacity(args.len());
        let mut longs = Vec::with_capacity(args.len());
        let mut magnitude: u128 = 0;
        for a in args {
            let (v, long) = match a {
                Some(Bson::Int32(i)) => (Some(*i as i64), false),
                Some(Bson::Int64(i)) => (Some(*i), true),
                Some(Bson::Double(_) | Bson::Decimal128(_)) => return None,
                _ => (None, false),
            };
            magnitude += v.map_or(0, |i| i.unsigned_abs() as u128);
            ints.push(v);
            longs.push(long);
        }
        if magnitude > i64::MAX as u128 {
            return None;
        }
        Some(Removable::IntSum {
            op,
            ints,
            longs,
            total: 0,
            count: 0,
            long_count: 0,
        })
    }

    fn add(&mut self, j: usize) {
        match self {
            Removable::MinMax {
                min,
                args,
                coll,
                deque,
            } => {
                let Some(v) = counted(&args[j]) else { return };
                let worse = if *min {
                    Ordering::Greater
                } else {
                    Ordering::Less
                };
                while let Some(&back) = deque.back() {
                    let b = counted(&args[back]).expect("only values are queued");
                    if cmp_bson_with(b, v, *coll) != worse {
                        break;
                    }
                    deque.pop_back();
                }
                deque.push_back(j);
            }
            Removable::IntSum {
                ints,
                longs,
                total,
                count,
                long_count,
                ..
            } => {
                if let Some(i) = ints[j] {
                    *total += i as i128;
                    *count += 1;
                    *long_count += longs[j] as u64;
                }
            }
        }
    }

    fn remove(&mut self, j: usize) {
        match self {
            Removable::MinMax { deque, .. } => {
                if deque.front() == Some(&j) {
                    deque.pop_front();
                }
            }
            Removable::IntSum {
                ints,
                longs,
                total,
                count,
                long_count,
                ..
            } => {
                if let Some(i) = ints[j] {
                    *total -= i as i128;
                    *count -= 1;
                    *long_count -= longs[j] as u64;
                }
            }
        }
    }

    fn result(&self) -> Bson {
        match self {
            Removable::MinMax { args, deque, .. } => deque
                .front()
                .and_then(|&j| counted(&args[j]).cloned())
                .unwrap_or(Bson::Null),
            Removable::IntSum {
                op,
                total,
                count,
                long_count,
                ..
            } => match op {
                AccOp::Avg if *count == 0 => Bson::Null,
                AccOp::Avg => Bson::Double(*total as f64 / *count as f64),
                _ => {
                    let kind = if *long_count > 0 {
                        NumKind::Long
                    } else {
                        NumKind::Int
                    };
                    int_result(*total, kind)
                }
            },
        }
    }

    /// The value over no documents (a window outside the partition).
    fn empty_result(&self) -> Bson {
        match self {
            Removable::IntSum {
                op: AccOp::Sum | AccOp::Count,
                ..
            } => Bson::Int32(0),
            _ => Bson::Null,
        }
    }
}

/// The value `$min`/`$max` consider: missing, null and undefined are passed over.
fn counted(v: &Option<Bson>) -> Option<&Bson> {
    v.as_ref()
        .filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Expr;

    fn spec(op: AccOp) -> AccSpec {
        AccSpec {
            name: String::new(),
            op,
            arg: Expr::Const(Bson::Null),
            js: None,
            params: None,
        }
    }

    fn ints(vals: &[i32]) -> Vec<Option<Bson>> {
        vals.iter().map(|&v| Some(Bson::Int32(v))).collect()
    }

    /// A window of three sliding over five values: each value enters once and leaves
    /// once, and the answers are the windows' own.
    #[test]
    fn a_sliding_window_adds_and_removes() {
        let args = ints(&[5, 1, 4, 2, 3]);
        let spans: Vec<Span> = vec![
            Some((0, 1)),
            Some((0, 2)),
            Some((1, 3)),
            Some((2, 4)),
            Some((3, 4)),
        ];
        let run = |op| accumulate(&spec(op), &spans, &args, None).expect("removable");
        let values = |v: Vec<Option<Bson>>| v.into_iter().map(Option::unwrap).collect::<Vec<_>>();
        assert_eq!(
            values(run(AccOp::Sum)),
            [6, 10, 7, 9, 5].map(Bson::Int32).to_vec()
        );
        assert_eq!(
            values(run(AccOp::Min)),
            [1, 1, 1, 2, 2].map(Bson::Int32).to_vec()
        );
        assert_eq!(
            values(run(AccOp::Max)),
            [5, 5, 4, 4, 3].map(Bson::Int32).to_vec()
        );
    }

    /// Equal values of different types: the earliest in the window is the answer, as
    /// the fold keeps the first it meets.
    #[test]
    fn ties_keep_the_earliest_value() {
        let args = vec![
            Some(Bson::Int32(1)),
            Some(Bson::Double(1.0)),
            Some(Bson::Int64(1)),
        ];
        let spans: Vec<Span> = vec![Some((0, 1)), Some((1, 2)), Some((2, 2))];
        let out = accumulate(&spec(AccOp::Min), &spans, &args, None).unwrap();
        assert_eq!(
            out,
            vec![
                Some(Bson::Int32(1)),
                Some(Bson::Double(1.0)),
                Some(Bson::Int64(1))
            ]
        );
    }

    /// Doubles, overflowing integers, other accumulators and spans that go back are
    /// left to the fold.
    #[test]
    fn what_is_not_removable_is_folded() {
        let spans: Vec<Span> = vec![Some((0, 1)), Some((1, 1))];
        let doubles = vec![Some(Bson::Double(0.1)), Some(Bson::Double(0.2))];
        assert!(accumulate(&spec(AccOp::Sum), &spans, &doubles, None).is_none());
        let huge = vec![Some(Bson::Int64(i64::MAX)), Some(Bson::Int64(1))];
        assert!(accumulate(&spec(AccOp::Sum), &spans, &huge, None).is_none());
        assert!(accumulate(&spec(AccOp::Push), &spans, &ints(&[1, 2]), None).is_none());
        let back: Vec<Span> = vec![Some((1, 1)), Some((0, 1))];
        assert!(accumulate(&spec(AccOp::Min), &back, &ints(&[1, 2]), None).is_none());
    }
}

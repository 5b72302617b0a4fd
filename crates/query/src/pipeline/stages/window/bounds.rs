//! Window bounds: parsing `window: {documents: [lo, hi]}` and `window: {range: [lo, hi],
//! unit}` (mongod's window_bounds.cpp), and the positions a window covers for each
//! document of a sorted partition (partition_iterator.cpp's endpoints).

use super::{constant, Bound, TimeUnit, Window};
use crate::compare::{cmp_bson, is_number};
use crate::error::{Error, Result};
use crate::expr::{Expr, Variables};
use crate::render::elem_to_string;
use crate::sort::SortSpec;
use bson::{Bson, Document};
use std::cmp::Ordering;

const UNBOUNDED: &str = "unbounded";
const CURRENT: &str = "current";

/// Parses the `window` field of a window function.
pub(crate) fn parse_window(v: &Bson, sort_by: Option<&SortSpec>) -> Result<Window> {
    let Bson::Document(w) = v else {
        return Err(Error::failed_to_parse("'window' field must be an object"));
    };
    let (documents, range, unit) = (w.get("documents"), w.get("range"), w.get("unit"));
    if documents.is_some() && range.is_some() {
        return Err(Error::failed_to_parse(
            "Window bounds can specify either 'documents' or 'unit', not both.",
        ));
    }
    if range.is_none() && unit.is_some() {
        return Err(Error::failed_to_parse(
            "Window bounds can only specify 'unit' with range-based bounds.",
        ));
    }
    if let Some(docs) = documents {
        if w.len() != 1 {
            return Err(Error::failed_to_parse(
                "'window' field that specifies documents cannot have other fields",
            ));
        }
        return parse_documents(docs, sort_by);
    }
    let Some(range) = range else {
        if !w.is_empty() {
            return Err(Error::failed_to_parse(
                "'window' field can only contain 'documents' as the only argument or 'range' with an optional 'unit' field",
            ));
        }
        return Ok(Window::WHOLE);
    };
    let window = parse_range(w, range, unit)?;
    check_range_sort(sort_by)?;
    Ok(window)
}

fn parse_documents(docs: &Bson, sort_by: Option<&SortSpec>) -> Result<Window> {
    let (lo, hi) = unpack("documents", docs)?;
    let int = |v: Bson| -> Result<Bson> {
        match crate::expr::num::as_exact_i32(&v).filter(|_| is_number(&v)) {
            Some(i) => Ok(Bson::Int64(i as i64)),
            None => Err(Error::failed_to_parse(
                "Numeric document-based bounds must be an integer",
            )),
        }
    };
    let lower = parse_bound(lo, int)?;
    let upper = parse_bound(hi, int)?;
    check_forward(&lower, &upper)?;
    let whole = lower == Bound::Unbounded && upper == Bound::Unbounded;
    if !whole && sort_by.is_none() {
        return Err(Error::location(
            5339901,
            "Document-based bounds require a sortBy",
        ));
    }
    Ok(Window::Documents { lower, upper })
}

fn parse_range(w: &Document, range: &Bson, unit: Option<&Bson>) -> Result<Window> {
    let (lo, hi) = unpack("range", range)?;
    let unit = match unit {
        Some(u) => {
            if w.len() != 2 {
                return Err(Error::failed_to_parse(
                    "'window' field that specifies unit cannot have other fields besides 'range'",
                ));
            }
            let Bson::String(u) = u else {
                return Err(Error::failed_to_parse("'unit' must be a string"));
            };
            Some(u.as_str())
        }
        None => {
            if w.len() != 1 {
                return Err(Error::failed_to_parse(
                    "'window' field that specifies range cannot have other fields besides 'unit'",
                ));
            }
            None
        }
    };
    let number = |v: Bson| -> Result<Bson> {
        let ok = match unit {
            Some(_) => crate::expr::num::as_exact_i32(&v).is_some() && is_number(&v),
            None => is_number(&v),
        };
        if ok {
            Ok(v)
        } else if unit.is_some() {
            Err(Error::failed_to_parse(
                "With 'unit', range-based bounds must be an integer",
            ))
        } else {
            Err(Error::failed_to_parse(
                "Range-based bounds expression must be a number",
            ))
        }
    };
    let lower = parse_bound(lo, number)?;
    let upper = parse_bound(hi, number)?;
    check_forward(&lower, &upper)?;
    let unit = unit.map(TimeUnit::parse).transpose()?;
    Ok(Window::Range { lower, upper, unit })
}

/// A range window needs a sort of one ascending field.
fn check_range_sort(sort_by: Option<&SortSpec>) -> Result<()> {
    match sort_by {
        Some(s) if s.fields.len() == 1 => {
            if s.fields[0].1 {
                // mongod 7.0 accepts the spec and then fails an internal assertion on the
                // first document; later versions refuse it here with this code.
                return Err(Error::location(
                    8947401,
                    "Range-based bounds require an ascending sortBy",
                ));
            }
            Ok(())
        }
        _ => Err(Error::location(
            5339902,
            "Range-based bounds require sortBy a single field",
        )),
    }
}

/// `[lo, hi]`: an array of exactly two bounds.
fn unpack<'a>(name: &str, v: &'a Bson) -> Result<(&'a Bson, &'a Bson)> {
    match v {
        Bson::Array(a) if a.len() == 2 => Ok((&a[0], &a[1])),
        _ => Err(Error::failed_to_parse(format!(
            "Window bounds must be a 2-element array: {}",
            elem_to_string(name, v)
        ))),
    }
}

/// `"unbounded"`, `"current"` or a constant expression `check` accepts.
fn parse_bound(v: &Bson, check: impl Fn(Bson) -> Result<Bson>) -> Result<Bound> {
    if let Bson::String(s) = v {
        return match s.as_str() {
            UNBOUNDED => Ok(Bound::Unbounded),
            CURRENT => Ok(Bound::Current),
            _ => Err(Error::failed_to_parse(
                "Window bounds must be 'unbounded', 'current', or a number.",
            )),
        };
    }
    let value = constant(v)
        .ok_or_else(|| Error::failed_to_parse("Window bounds expression must be a constant."))?;
    Ok(Bound::At(check(value)?))
}

/// Lower must not exceed upper ('current' counting as 0).
fn check_forward(lower: &Bound, upper: &Bound) -> Result<()> {
    let zero = Bson::Int32(0);
    let value = |b: &Bound| match b {
        Bound::Current => Some(zero.clone()),
        Bound::At(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    if let (Some(lo), Some(hi)) = (value(lower), value(upper)) {
        if cmp_bson(&lo, &hi) == Ordering::Greater {
            return Err(Error::location(
                5339900,
                format!(
                    "Lower bound must not exceed upper bound: [{}, {}]",
                    crate::render::bson_to_string(&lo),
                    crate::render::bson_to_string(&hi)
                ),
            ));
        }
    }
    Ok(())
}

/// Positions `lo..=hi` of a partition of `n` documents: None for an empty window.
pub(crate) type Span = Option<(usize, usize)>;

/// The span of a documents window around position `i`.
pub(crate) fn documents_span(lower: &Bound, upper: &Bound, i: usize, n: usize) -> Span {
    let offset = |b: &Bound| match b {
        Bound::Unbounded => None,
        Bound::Current => Some(0),
        Bound::At(v) => crate::expr::num::as_exact_i64(v),
    };
    let last = n as i64 - 1;
    let lo = offset(lower).map_or(0, |o| i as i64 + o);
    let hi = offset(upper).map_or(last, |o| i as i64 + o);
    if lo > last || hi < 0 || lo > hi {
        return None;
    }
    Some((lo.max(0) as usize, hi.min(last) as usize))
}

/// The sort values a range window measures, one per document of the partition.
pub(crate) struct RangeKeys<'a> {
    pub(crate) keys: &'a [Bson],
    pub(crate) unit: Option<TimeUnit>,
}

impl RangeKeys<'_> {
    /// Whether a sort value is of the window's type (a date with a unit, else a number).
    fn expected(&self, v: &Bson) -> bool {
        match self.unit {
            Some(_) => matches!(v, Bson::DateTime(_)),
            None => is_number(v),
        }
    }

    /// The current document's sort value, checked as mongod checks it.
    fn base(&self, i: usize) -> Result<&Bson> {
        let base = &self.keys[i];
        match self.unit {
            Some(_) if !matches!(base, Bson::DateTime(_)) => Err(Error::location(
                5429513,
                format!(
                    "Invalid range: Expected the sortBy field to be a Date, but it was {}",
                    crate::expr::util::type_name(base)
                ),
            )),
            None if matches!(base, Bson::DateTime(_)) => Err(Error::location(
                5429413,
                "Invalid range: For windows that involve date or time ranges, a unit must be provided.",
            )),
            None if !is_number(base) => Err(Error::location(
                5429414,
                format!(
                    "Invalid range: Expected the sortBy field to be a number, but it was {}",
                    crate::expr::util::type_name(base)
                ),
            )),
            _ => Ok(base),
        }
    }

    /// `base + delta`: a sum of numbers, or a date moved by whole units.
    fn threshold(&self, base: &Bson, delta: &Bson) -> Result<Bson> {
        let expr = match self.unit {
            Some(unit) => Expr::parse(&bson::bson!({"$dateAdd": {
                "startDate": {"$literal": base.clone()},
                "unit": unit.name(),
                "amount": {"$literal": delta.clone()},
            }}))?,
            None => Expr::Op(
                "$add".to_string(),
                vec![Expr::Const(base.clone()), Expr::Const(delta.clone())],
            ),
        };
        expr.evaluate_value(&Document::new(), &Variables::new())
    }

    /// The span of a range window around position `i`.
    pub(crate) fn span(&self, lower: &Bound, upper: &Bound, i: usize) -> Result<Span> {
        let base = self.base(i)?;
        let n = self.keys.len();
        let lo = match lower {
            Bound::Current => i,
            Bound::Unbounded => match (0..n).find(|&j| self.expected(&self.keys[j])) {
                Some(j) => j,
                None => return Ok(None),
            },
            Bound::At(delta) => {
                let t = self.threshold(base, delta)?;
                match (0..n).find(|&j| cmp_bson(&self.keys[j], &t) != Ordering::Less) {
                    Some(j) if self.expected(&self.keys[j]) => j,
                    _ => return Ok(None),
                }
            }
        };
        let hi = match upper {
            Bound::Current => i,
            Bound::Unbounded => {
                let start = lo.max(i);
                (start..n)
                    .find(|&j| !self.expected(&self.keys[j]))
                    .map_or(n - 1, |j| j - 1)
            }
            Bound::At(delta) => {
                let t = self.threshold(base, delta)?;
                match (lo..n).find(|&j| cmp_bson(&t, &self.keys[j]) == Ordering::Less) {
                    Some(j) if j == lo => return Ok(None),
                    Some(j) => j - 1,
                    None => n - 1,
                }
            }
        };
        Ok(if lo <= hi { Some((lo, hi)) } else { None })
    }
}

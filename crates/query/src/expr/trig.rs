//! Trigonometric and angle operators: `$sin` `$cos` `$tan` `$asin` `$acos` `$atan`
//! `$atan2`, the hyperbolic ones, `$degreesToRadians` and `$radiansToDegrees`.
//!
//! As in mongod: null or missing gives null, NaN gives NaN, a value outside an
//! operator's domain is error 50989, and a Decimal128 argument gives a Decimal128
//! (computed here through a double, so to about 15 significant digits).

use super::num;
use super::util::{done, null, nullish, type_name, R};
use crate::compare::{as_f64, is_number};
use crate::error::Error;
use bson::Bson;

/// Whether a domain's ends belong to it.
#[derive(Clone, Copy)]
enum Ends {
    Inclusive,
    Exclusive,
}

/// The domain of a bounded operator: [lo, hi] or (lo, hi).
struct Domain {
    lo: f64,
    hi: f64,
    ends: Ends,
}

impl Domain {
    fn contains(&self, x: f64) -> bool {
        match self.ends {
            Ends::Inclusive => self.lo <= x && x <= self.hi,
            Ends::Exclusive => self.lo < x && x < self.hi,
        }
    }

    /// `[-1,1]` or `(-inf,inf)`, as mongod writes the bounds.
    fn show(&self) -> String {
        let (open, close) = match self.ends {
            Ends::Inclusive => ('[', ']'),
            Ends::Exclusive => ('(', ')'),
        };
        let bound = crate::render::stream_double;
        format!("{open}{},{}{close}", bound(self.lo), bound(self.hi))
    }
}

/// A function of a double.
type Func = fn(f64) -> f64;

/// The operator's function and, for the bounded ones, its domain.
fn function(name: &str) -> Option<(Func, Option<Domain>)> {
    let closed = |lo, hi| {
        Some(Domain {
            lo,
            hi,
            ends: Ends::Inclusive,
        })
    };
    let finite = Some(Domain {
        lo: f64::NEG_INFINITY,
        hi: f64::INFINITY,
        ends: Ends::Exclusive,
    });
    Some(match name {
        "$sin" => (f64::sin, finite),
        "$cos" => (f64::cos, finite),
        "$tan" => (f64::tan, finite),
        "$asin" => (f64::asin, closed(-1.0, 1.0)),
        "$acos" => (f64::acos, closed(-1.0, 1.0)),
        "$atan" => (f64::atan, None),
        "$sinh" => (f64::sinh, None),
        "$cosh" => (f64::cosh, None),
        "$tanh" => (f64::tanh, None),
        "$asinh" => (f64::asinh, None),
        "$acosh" => (f64::acosh, closed(1.0, f64::INFINITY)),
        "$atanh" => (f64::atanh, closed(-1.0, 1.0)),
        "$degreesToRadians" => (f64::to_radians, None),
        "$radiansToDegrees" => (f64::to_degrees, None),
        _ => return None,
    })
}

pub fn apply(name: &str, vals: &[Option<Bson>]) -> R {
    if name == "$atan2" {
        return atan2(&vals[0], &vals[1]);
    }
    let Some((f, domain)) = function(name) else {
        return Ok(None);
    };
    if nullish(&vals[0]) {
        return null();
    }
    let x = vals[0].as_ref().unwrap();
    let v = numeric_arg(name, x, 28765)?;
    if v.is_nan() {
        return done(x.clone());
    }
    if let Some(domain) = domain.filter(|d| !d.contains(v)) {
        return Err(Error::location(
            50989,
            format!(
                "cannot apply {name} to {}, value must in {}",
                show_arg(x, v),
                domain.show()
            ),
        ));
    }
    done(result(f(v), matches!(x, Bson::Decimal128(_))))
}

/// `$atan2: [y, x]`: null when y is nullish (then x), a Decimal128 when either is one.
fn atan2(y: &Option<Bson>, x: &Option<Bson>) -> R {
    if nullish(y) {
        return null();
    }
    let yv = numeric_arg("$atan2", y.as_ref().unwrap(), 51044)?;
    if nullish(x) {
        return null();
    }
    let xv = numeric_arg("$atan2", x.as_ref().unwrap(), 51045)?;
    let decimal = [y, x]
        .iter()
        .any(|v| matches!(v, Some(Bson::Decimal128(_))));
    done(result(yv.atan2(xv), decimal))
}

/// A numeric argument as a double; anything else is error `code`.
fn numeric_arg(name: &str, x: &Bson, code: i32) -> Result<f64, Error> {
    if !is_number(x) {
        return Err(Error::location(
            code,
            format!("{name} only supports numeric types, not {}", type_name(x)),
        ));
    }
    Ok(as_f64(x).unwrap_or(f64::NAN))
}

fn result(r: f64, decimal: bool) -> Bson {
    if decimal {
        num::dec_bson(r)
    } else {
        Bson::Double(r)
    }
}

/// The argument in a domain error: a decimal as written, a number as a C++ stream
/// writes a double.
fn show_arg(x: &Bson, v: f64) -> String {
    match x {
        Bson::Decimal128(d) => d.to_string(),
        _ => crate::render::stream_double(v),
    }
}

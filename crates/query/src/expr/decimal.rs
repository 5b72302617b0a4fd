//! Decimal128 arithmetic in decimal, through libdecNumber (the `dec` crate): 34 significant
//! digits, rounding half to even, the exponent range of IEEE 754 decimal128, as mongod's
//! Decimal128 computes `$divide`, `$sqrt`, `$ln`, `$log`, `$log10`, `$exp` and `$pow`,
//! and the sums and products whose exact coefficient outgrows [`super::num::Dec`].
//!
//! Values cross over as strings: BSON stores Decimal128 in the BID encoding and
//! libdecNumber in DPD, and both print and parse the same decimal strings. A leaf module:
//! `super::num` converts the other numeric types and calls in here.

use bson::Bson;
use dec::{Context, Decimal, Rounding};

/// Units of three digits: 36 digits, room for the 34 that decimal128 keeps.
const UNITS: usize = 12;

/// A decimal number with room for a decimal128 coefficient.
pub type Wide = Decimal<UNITS>;

/// Significant digits of IEEE 754 decimal128.
const PRECISION: usize = 34;
/// Largest and smallest adjusted exponents of IEEE 754 decimal128.
const EMAX: isize = 6144;
const EMIN: isize = -6143;

/// A context with decimal128's precision, rounding and exponent range.
fn context() -> Context<Wide> {
    let mut cx = Context::<Wide>::default();
    cx.set_precision(PRECISION).expect("34 digits fit in 36");
    cx.set_rounding(Rounding::HalfEven);
    cx.set_max_exponent(EMAX).expect("decimal128 emax");
    cx.set_min_exponent(EMIN).expect("decimal128 emin");
    cx.set_clamp(true);
    cx
}

/// A BSON Decimal128's value.
pub fn from_decimal128(d: &bson::Decimal128) -> Wide {
    parse(&d.to_string())
}

/// The value of `(-1)^neg * coeff * 10^exp`.
pub fn from_parts(neg: bool, coeff: u128, exp: i32) -> Wide {
    parse(&format!("{}{coeff}E{exp}", if neg { "-" } else { "" }))
}

/// A decimal string's value; NaN for what is not one.
fn parse(s: &str) -> Wide {
    context().parse(s).unwrap_or_else(|_| Wide::nan())
}

/// The Decimal128 of a result (already rounded to 34 digits by [`context`]).
pub fn to_bson(d: &Wide) -> Bson {
    let d128 = Context::<dec::Decimal128>::default().from_decimal(d);
    let nan = || "NaN".parse().expect("NaN is a Decimal128");
    Bson::Decimal128(d128.to_string().parse().unwrap_or_else(|_| nan()))
}

pub fn add(mut a: Wide, b: &Wide) -> Wide {
    context().add(&mut a, b);
    a
}

pub fn mul(mut a: Wide, b: &Wide) -> Wide {
    context().mul(&mut a, b);
    a
}

pub fn div(mut a: Wide, b: &Wide) -> Wide {
    context().div(&mut a, b);
    a
}

pub fn sqrt(mut a: Wide) -> Wide {
    context().sqrt(&mut a);
    a
}

pub fn ln(mut a: Wide) -> Wide {
    context().ln(&mut a);
    a
}

pub fn log10(mut a: Wide) -> Wide {
    context().log10(&mut a);
    a
}

pub fn exp(mut a: Wide) -> Wide {
    context().exp(&mut a);
    a
}

pub fn pow(mut a: Wide, b: &Wide) -> Wide {
    context().pow(&mut a, b);
    a
}

/// `log_base(x)` as mongod's Decimal128::logarithm: the ratio of the two logarithms,
/// here base 10, so that exact powers of ten give exact results.
pub fn log(x: Wide, base: Wide) -> Wide {
    div(log10(x), &log10(base))
}

//! `$expMovingAvg` in decimal, as mongod computes it (accumulator_exp_moving_avg.cpp):
//! each input converted to a decimal (a double by its 15 significant digits), folded as
//! `x * alpha + avg * (1 - alpha)`, and the result turned back into a double unless a
//! decimal was seen. Doubles would differ from mongod in the last digit
//! (104.66666666666666 for its 104.66666666666667).
//!
//! mongod rounds each step to Decimal128's 34 digits; here each product's operands are
//! rounded to [`DIGITS`] so that the product fits the exact decimal's 128-bit
//! coefficient. The error that leaves is far below a double's last digit.

use crate::expr::num::{f64_to_decimal, Dec};
use bson::Bson;

/// Significant digits kept of each operand of a product (two of them fit in u128).
const DIGITS: u32 = 19;

/// `alpha` for `N`: 2 / (N + 1), to [`DIGITS`] digits.
pub(crate) fn alpha_from_n(n: i64) -> Dec {
    let divisor = n as u128 + 1;
    // 2 * 10^k / divisor with enough digits, rounded half to even.
    let k = DIGITS + divisor.ilog10() + 1;
    let numerator = 2 * 10u128.pow(k);
    let (q, r) = (numerator / divisor, numerator % divisor);
    let q = if 2 * r > divisor || (2 * r == divisor && q % 2 == 1) {
        q + 1
    } else {
        q
    };
    round(Dec {
        neg: false,
        coeff: q,
        exp: -(k as i32),
    })
}

/// A number as a decimal the way mongod converts it (doubles by 15 digits).
pub(crate) fn to_dec(v: &Bson) -> Option<Dec> {
    match v {
        Bson::Double(d) => Dec::from_bson(&Bson::Decimal128(f64_to_decimal(*d))),
        other => Dec::from_bson(other),
    }
}

/// Rounds to [`DIGITS`] significant digits, half to even.
fn round(mut d: Dec) -> Dec {
    let limit = 10u128.pow(DIGITS);
    while d.coeff >= limit {
        let rem = d.coeff % 10;
        d.coeff /= 10;
        d.exp += 1;
        if rem > 5 || (rem == 5 && d.coeff % 2 == 1) {
            d.coeff += 1;
        }
    }
    d
}

/// One digit less: the coefficient over ten, rounded half to even.
fn drop_digit(d: Dec) -> Dec {
    let rem = d.coeff % 10;
    let mut coeff = d.coeff / 10;
    if rem > 5 || (rem == 5 && coeff % 2 == 1) {
        coeff += 1;
    }
    Dec {
        coeff,
        exp: d.exp + 1,
        ..d
    }
}

/// `a + b` to [`DIGITS`] digits: where aligning the exponents would overflow, the
/// operand with the finer exponent gives up its last digits first.
fn add(a: Dec, b: Dec) -> Option<Dec> {
    let (mut a, mut b) = (round(a), round(b));
    loop {
        if let Some(sum) = a.add(b) {
            return Some(round(sum));
        }
        if a.exp < b.exp {
            a = drop_digit(a);
        } else if b.exp < a.exp {
            b = drop_digit(b);
        } else {
            return None;
        }
    }
}

/// One step: `x * alpha + avg * (1 - alpha)`; None on overflow.
pub(crate) fn step(avg: Dec, x: Dec, alpha: Dec) -> Option<Dec> {
    let one = Dec {
        neg: false,
        coeff: 1,
        exp: 0,
    };
    let one_minus = add(one, alpha.neg())?;
    let a = round(x).mul(round(alpha))?;
    let b = round(avg).mul(round(one_minus))?;
    add(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Dec {
        Dec::parse(s).unwrap()
    }

    #[test]
    fn steps_of_far_apart_magnitudes_stay_decimal() {
        // 1e30 * 0.5 + 1e-10 * 0.5: exact alignment needs 40 digits; rounding keeps it.
        let r = step(dec("1e-10"), dec("1e30"), dec("0.5")).unwrap();
        assert_eq!(r.to_f64(), 5e29);
        let r = step(dec("1e30"), dec("1e-10"), dec("0.5")).unwrap();
        assert_eq!(r.to_f64(), 5e29);
    }

    #[test]
    fn alpha_of_n_is_two_over_n_plus_one() {
        assert_eq!(alpha_from_n(1).to_f64(), 1.0);
        assert_eq!(alpha_from_n(2).to_f64(), 2.0 / 3.0);
        assert_eq!(alpha_from_n(3).to_f64(), 0.5);
        // The average of 12 after 13 with N = 2 is mongod's 12.333333333333334.
        let r = step(dec("13"), dec("12"), alpha_from_n(2)).unwrap();
        assert_eq!(r.to_f64(), 12.333333333333334);
    }
}

//! Numeric helpers: MongoDB's widening rules (int -> long -> double -> decimal) and a small
//! exact decimal used for Decimal128 addition and multiplication.
//!
//! Decimal128 arithmetic is exact for `+`, `-` and `*` while the coefficients fit in 38
//! digits; past that, and for division and the transcendental functions, it goes through
//! libdecNumber at decimal128's 34 digits (`super::decimal`).

use super::decimal::{self, Wide};
use bson::{Bson, Decimal128};

/// Widest numeric type seen so far, ordered as MongoDB widens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NumKind {
    Int,
    Long,
    Double,
    Decimal,
}

pub fn kind_of(v: &Bson) -> Option<NumKind> {
    match v {
        Bson::Int32(_) => Some(NumKind::Int),
        Bson::Int64(_) => Some(NumKind::Long),
        Bson::Double(_) => Some(NumKind::Double),
        Bson::Decimal128(_) => Some(NumKind::Decimal),
        _ => None,
    }
}

/// An exact finite decimal: (-1)^neg * coeff * 10^exp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dec {
    pub neg: bool,
    pub coeff: u128,
    pub exp: i32,
}

impl Dec {
    pub fn zero() -> Dec {
        Dec {
            neg: false,
            coeff: 0,
            exp: 0,
        }
    }

    pub fn parse(s: &str) -> Option<Dec> {
        let (neg, rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (mant, e) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = match mant.split_once('.') {
            Some((a, b)) => (a, b),
            None => (mant, ""),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        if !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
            return None;
        }
        let digits = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        let coeff: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        Some(Dec {
            neg,
            coeff,
            exp: e - frac.len() as i32,
        })
    }

    pub fn from_bson(v: &Bson) -> Option<Dec> {
        match v {
            Bson::Int32(i) => Some(Dec {
                neg: *i < 0,
                coeff: (*i as i128).unsigned_abs(),
                exp: 0,
            }),
            Bson::Int64(i) => Some(Dec {
                neg: *i < 0,
                coeff: (*i as i128).unsigned_abs(),
                exp: 0,
            }),
            Bson::Double(d) => {
                if !d.is_finite() {
                    return None;
                }
                Dec::parse(&format!("{d:e}"))
            }
            Bson::Decimal128(d) => Dec::parse(&d.to_string()),
            _ => None,
        }
    }

    fn scale_to(self, exp: i32) -> Option<Dec> {
        // exp <= self.exp
        let diff = (self.exp - exp) as u32;
        let m = 10u128.checked_pow(diff)?;
        Some(Dec {
            neg: self.neg,
            coeff: self.coeff.checked_mul(m)?,
            exp,
        })
    }

    // Checked decimal arithmetic (None on overflow), not the operator trait.
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, o: Dec) -> Option<Dec> {
        let e = self.exp.min(o.exp);
        let a = if self.coeff == 0 {
            Dec { exp: e, ..self }
        } else {
            self.scale_to(e)?
        };
        let b = if o.coeff == 0 {
            Dec { exp: e, ..o }
        } else {
            o.scale_to(e)?
        };
        let r = if a.neg == b.neg {
            Dec {
                neg: a.neg,
                coeff: a.coeff.checked_add(b.coeff)?,
                exp: e,
            }
        } else if a.coeff >= b.coeff {
            Dec {
                neg: a.neg,
                coeff: a.coeff - b.coeff,
                exp: e,
            }
        } else {
            Dec {
                neg: b.neg,
                coeff: b.coeff - a.coeff,
                exp: e,
            }
        };
        Some(if r.coeff == 0 {
            Dec { neg: false, ..r }
        } else {
            r
        })
    }

    // Checked decimal arithmetic (None on overflow), not the operator trait.
    #[allow(clippy::should_implement_trait)]
    pub fn neg(self) -> Dec {
        Dec {
            neg: !self.neg && self.coeff != 0,
            ..self
        }
    }

    // Checked decimal arithmetic (None on overflow), not the operator trait.
    #[allow(clippy::should_implement_trait)]
    pub fn mul(self, o: Dec) -> Option<Dec> {
        let coeff = self.coeff.checked_mul(o.coeff)?;
        Some(Dec {
            neg: (self.neg != o.neg) && coeff != 0,
            coeff,
            exp: self.exp + o.exp,
        })
    }

    pub fn to_f64(self) -> f64 {
        let s = format!(
            "{}{}e{}",
            if self.neg { "-" } else { "" },
            self.coeff,
            self.exp
        );
        s.parse().unwrap_or(f64::NAN)
    }

    pub fn to_decimal128(self) -> Decimal128 {
        let mut coeff = self.coeff;
        let mut exp = self.exp;
        // Round to 34 significant digits (half to even).
        let mut digits = if coeff == 0 { 1 } else { coeff.ilog10() + 1 };
        while digits > 34 {
            let rem = coeff % 10;
            coeff /= 10;
            exp += 1;
            if rem > 5 || (rem == 5 && coeff % 2 == 1) {
                coeff += 1;
            }
            digits = if coeff == 0 { 1 } else { coeff.ilog10() + 1 };
        }
        let s = format!("{}{}E{}", if self.neg { "-" } else { "" }, coeff, exp);
        s.parse().unwrap_or_else(|_| f64_to_decimal(self.to_f64()))
    }
}

pub fn f64_to_decimal(f: f64) -> Decimal128 {
    if f.is_nan() {
        return "NaN".parse().unwrap();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".parse().unwrap()
        } else {
            "-Infinity".parse().unwrap()
        };
    }
    // MongoDB converts doubles to decimals with 15 significant digits.
    let s = format!("{:.14e}", f);
    match Dec::parse(&s) {
        Some(d) => normalize_trailing(d).to_decimal128(),
        None => "NaN".parse().unwrap(),
    }
}

fn normalize_trailing(mut d: Dec) -> Dec {
    while d.coeff != 0 && d.coeff.is_multiple_of(10) && d.exp < 0 {
        d.coeff /= 10;
        d.exp += 1;
    }
    if d.coeff == 0 {
        // Zero converts to 0 with exponent 0 (the sign is kept), whatever the
        // exponent of its scientific form.
        d.exp = 0;
    }
    d
}

pub fn to_decimal(v: &Bson) -> Option<Decimal128> {
    match v {
        Bson::Decimal128(d) => Some(*d),
        Bson::Int32(_) | Bson::Int64(_) => Dec::from_bson(v).map(|d| d.to_decimal128()),
        Bson::Double(d) => Some(f64_to_decimal(*d)),
        _ => None,
    }
}

/// A number as a libdecNumber decimal: Decimal128 exactly, int and long exactly, a double
/// rounded to 15 significant digits as mongod converts one.
pub fn wide_of(v: &Bson) -> Option<Wide> {
    to_decimal(v).map(|d| decimal::from_decimal128(&d))
}

impl Dec {
    /// The same value as a libdecNumber decimal.
    fn wide(self) -> Wide {
        decimal::from_parts(self.neg, self.coeff, self.exp)
    }
}

pub fn dec_bson(f: f64) -> Bson {
    Bson::Decimal128(f64_to_decimal(f))
}

/// An integral value that fits in i64 (ints, longs, and doubles/decimals with no fraction).
pub fn as_exact_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) => {
            if d.fract() == 0.0 && *d >= -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18
            {
                Some(*d as i64)
            } else {
                None
            }
        }
        Bson::Decimal128(_) => {
            let f = crate::compare::as_f64(v)?;
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                Some(f as i64)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// An integral value representable as i32.
pub fn as_exact_i32(v: &Bson) -> Option<i32> {
    as_exact_i64(v).and_then(|i| i32::try_from(i).ok())
}

/// Narrowest of int/long for an integer result, double if it does not fit in i64.
pub fn int_result(v: i128, at_least: NumKind) -> Bson {
    if at_least == NumKind::Int {
        if let Ok(i) = i32::try_from(v) {
            return Bson::Int32(i);
        }
    }
    match i64::try_from(v) {
        Ok(l) => Bson::Int64(l),
        Err(_) => Bson::Double(v as f64),
    }
}

/// Accumulates a sum with MongoDB's widening: int32 overflow -> int64, int64 overflow ->
/// double; any double -> double; any decimal -> decimal.
#[derive(Debug, Clone)]
pub struct Summer {
    pub kind: NumKind,
    int_total: Option<i64>,
    double_total: f64,
    comp: f64,
    dec_total: Option<Dec>,
    /// The decimal total once `dec_total` outgrew its coefficient (or met NaN or an
    /// infinity): rounded to 34 digits at each step, as mongod adds Decimal128s.
    dec_wide: Option<Wide>,
    pub count: u64,
}

impl Default for Summer {
    fn default() -> Self {
        Summer {
            kind: NumKind::Int,
            int_total: Some(0),
            double_total: 0.0,
            comp: 0.0,
            dec_total: Some(Dec::zero()),
            dec_wide: None,
            count: 0,
        }
    }
}

impl Summer {
    /// Adds a number; returns false (and ignores the value) for a non-number.
    pub fn add(&mut self, v: &Bson) -> bool {
        let Some(k) = kind_of(v) else { return false };
        self.count += 1;
        if k > self.kind {
            self.kind = k;
        }
        if let (Some(t), Some(i)) = (self.int_total, as_int(v)) {
            self.int_total = t.checked_add(i);
        } else if matches!(v, Bson::Double(_) | Bson::Decimal128(_)) {
            // int total only tracks integer inputs; doubles promote anyway
        } else {
            self.int_total = None;
        }
        let f = crate::compare::as_f64(v).unwrap_or(f64::NAN);
        let before = self.double_total;
        // Kahan summation for doubles.
        let y = f - self.comp;
        let t = self.double_total + y;
        self.comp = if t.is_finite() {
            (t - self.double_total) - y
        } else {
            0.0
        };
        self.double_total = t;
        self.add_decimal(v, before);
        true
    }

    /// The decimal side of [`Summer::add`]: exact while the coefficient fits; past that,
    /// and only once the sum is a decimal one (a double-only sum pays nothing), rounded to
    /// decimal128 at each step. A sum that outgrew the exact type on doubles before its
    /// first decimal carries on from the double total, as mongod adds its non-decimal
    /// total to the decimal one.
    fn add_decimal(&mut self, v: &Bson, double_before: f64) {
        let wide_v = || wide_of(v).unwrap_or_else(Wide::nan);
        match self.dec_total {
            Some(d) => {
                self.dec_total = Dec::from_bson(v).and_then(|x| d.add(x));
                if self.dec_total.is_none() && self.kind == NumKind::Decimal {
                    self.dec_wide = Some(decimal::add(d.wide(), &wide_v()));
                }
            }
            None if self.kind == NumKind::Decimal => {
                let base = self.dec_wide.unwrap_or_else(|| {
                    wide_of(&Bson::Double(double_before)).unwrap_or_else(Wide::nan)
                });
                self.dec_wide = Some(decimal::add(base, &wide_v()));
            }
            None => {}
        }
    }

    pub fn result(&self) -> Bson {
        match self.kind {
            NumKind::Int | NumKind::Long => match self.int_total {
                Some(t) => int_result(t as i128, self.kind),
                None => Bson::Double(self.double_total),
            },
            NumKind::Double => Bson::Double(self.double_total),
            NumKind::Decimal => match self.dec_total {
                Some(d) => Bson::Decimal128(d.to_decimal128()),
                None => decimal::to_bson(&self.decimal_total()),
            },
        }
    }

    /// The total in decimal, exact while it fits.
    fn decimal_total(&self) -> Wide {
        match (self.dec_total, self.dec_wide) {
            (Some(d), _) => d.wide(),
            (None, Some(w)) => w,
            (None, None) => Wide::nan(),
        }
    }

    pub fn total_f64(&self) -> f64 {
        self.double_total
    }

    /// Average of the values added (null when none), as double (or decimal if any decimal).
    pub fn average(&self) -> Bson {
        if self.count == 0 {
            return Bson::Null;
        }
        if self.kind == NumKind::Decimal {
            let count = Wide::from(i64::try_from(self.count).unwrap_or(i64::MAX));
            return decimal::to_bson(&decimal::div(self.decimal_total(), &count));
        }
        match (self.kind, self.int_total) {
            (NumKind::Int | NumKind::Long, Some(t)) => Bson::Double(t as f64 / self.count as f64),
            _ => Bson::Double(self.double_total / self.count as f64),
        }
    }
}

fn as_int(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

/// Product with the same widening rules as `Summer`.
pub fn multiply(vals: &[Bson]) -> Bson {
    let mut kind = NumKind::Int;
    let mut int_prod: Option<i64> = Some(1);
    let mut dprod = 1.0f64;
    let mut dec: Option<Dec> = Some(Dec {
        neg: false,
        coeff: 1,
        exp: 0,
    });
    for v in vals {
        let k = kind_of(v).unwrap_or(NumKind::Double);
        kind = kind.max(k);
        int_prod = match (int_prod, as_int(v)) {
            (Some(p), Some(i)) => p.checked_mul(i),
            _ => None,
        };
        dprod *= crate::compare::as_f64(v).unwrap_or(f64::NAN);
        dec = dec.and_then(|d| Dec::from_bson(v).and_then(|x| d.mul(x)));
    }
    match kind {
        NumKind::Int | NumKind::Long => match int_prod {
            Some(p) => int_result(p as i128, kind),
            None => Bson::Double(dprod),
        },
        NumKind::Double => Bson::Double(dprod),
        NumKind::Decimal => match dec {
            Some(d) => Bson::Decimal128(d.to_decimal128()),
            // Past the exact coefficient: a product in decimal128.
            None => decimal::to_bson(&vals.iter().fold(Wide::from(1i32), |p, v| {
                decimal::mul(p, &wide_of(v).unwrap_or_else(Wide::nan))
            })),
        },
    }
}

/// Rounds half to even at `place` decimal digits (negative = left of the point).
pub fn round_f64(x: f64, place: i32, trunc: bool) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if place >= 0 {
        // Go through a decimal string to avoid binary noise (2.675 -> "2.675").
        if let Some(d) = Dec::parse(&format!("{x:e}")) {
            if let Some(r) = round_dec(d, place, trunc) {
                return r.to_f64();
            }
        }
        let m = 10f64.powi(place);
        let y = x * m;
        (if trunc {
            y.trunc()
        } else {
            y.round_ties_even_compat()
        }) / m
    } else {
        let m = 10f64.powi(-place);
        let y = x / m;
        (if trunc {
            y.trunc()
        } else {
            y.round_ties_even_compat()
        }) * m
    }
}

trait RoundEven {
    fn round_ties_even_compat(self) -> f64;
}
impl RoundEven for f64 {
    fn round_ties_even_compat(self) -> f64 {
        let r = self.round();
        if (self - self.trunc()).abs() == 0.5 {
            2.0 * (self / 2.0).round()
        } else {
            r
        }
    }
}

/// Rounds an exact decimal to `place` digits after the point (negative: before it).
pub fn round_dec(d: Dec, place: i32, trunc: bool) -> Option<Dec> {
    let target_exp = -place;
    if d.exp >= target_exp {
        return Some(d);
    }
    let drop = (target_exp - d.exp) as u32;
    if drop > 38 {
        return Some(Dec {
            neg: false,
            coeff: 0,
            exp: target_exp,
        });
    }
    let m = 10u128.checked_pow(drop)?;
    let q = d.coeff / m;
    let r = d.coeff % m;
    let half = m / 2;
    let q = if trunc || r < half || (r == half && q.is_multiple_of(2)) {
        q
    } else {
        q + 1
    };
    Some(Dec {
        neg: d.neg && q != 0,
        coeff: q,
        exp: target_exp,
    })
}

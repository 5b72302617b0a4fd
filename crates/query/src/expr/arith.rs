//! Arithmetic, comparison, boolean and accumulator-style operators.

use super::decimal;
use super::num::{self, kind_of, Dec, NumKind, Summer};
use super::util::{nullish, or_undefined, show, truthy, type_name, type_name_opt};
use crate::collation::Collator;
use crate::compare::{as_f64, cmp_bson_with, is_number};
use crate::error::{codes, Error};
use bson::Bson;
use std::cmp::Ordering;

use super::util::{done, null, R};

pub fn apply(name: &str, vals: &[Option<Bson>], coll: Option<&Collator>) -> R {
    match name {
        "$add" => add(vals),
        "$subtract" => subtract(&vals[0], &vals[1]),
        "$multiply" => {
            let mut nums = Vec::with_capacity(vals.len());
            for v in vals {
                match v {
                    Some(x) if is_number(x) => nums.push(x.clone()),
                    v if nullish(v) => return null(),
                    Some(x) => {
                        return Err(Error::new(
                            codes::TYPE_MISMATCH,
                            format!(
                                "$multiply only supports numeric types, not {}",
                                type_name(x)
                            ),
                        ))
                    }
                    None => unreachable!(),
                }
            }
            done(num::multiply(&nums))
        }
        "$divide" => divide(&vals[0], &vals[1]),
        "$mod" => modulo(&vals[0], &vals[1]),
        "$abs" | "$ceil" | "$floor" | "$sqrt" | "$exp" | "$ln" | "$log10" => unary(name, &vals[0]),
        "$round" | "$trunc" => round(name, &vals[0], vals.get(1)),
        "$pow" => pow(&vals[0], &vals[1]),
        "$log" => log(&vals[0], &vals[1]),
        "$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$cmp" => {
            let o = cmp_bson_with(or_undefined(&vals[0]), or_undefined(&vals[1]), coll);
            done(match name {
                "$eq" => Bson::Boolean(o == Ordering::Equal),
                "$ne" => Bson::Boolean(o != Ordering::Equal),
                "$gt" => Bson::Boolean(o == Ordering::Greater),
                "$gte" => Bson::Boolean(o != Ordering::Less),
                "$lt" => Bson::Boolean(o == Ordering::Less),
                "$lte" => Bson::Boolean(o != Ordering::Greater),
                _ => Bson::Int32(match o {
                    Ordering::Less => -1,
                    Ordering::Equal => 0,
                    Ordering::Greater => 1,
                }),
            })
        }
        "$not" => done(Bson::Boolean(!truthy(&vals[0]))),
        "$sum" | "$avg" | "$min" | "$max" | "$stdDevPop" | "$stdDevSamp" => {
            let items: Vec<&Bson> = if vals.len() == 1 {
                match &vals[0] {
                    Some(Bson::Array(a)) => a.iter().collect(),
                    Some(v) => vec![v],
                    None => vec![],
                }
            } else {
                vals.iter().flatten().collect()
            };
            done(accumulate(name, &items, coll))
        }
        "$rand" => done(Bson::Double(crate::random::random_f64())),
        _ => Ok(None),
    }
}

/// `$sum`/`$avg`/`$min`/`$max`/`$stdDev*` over a list of values (as the expression forms).
pub fn accumulate(name: &str, items: &[&Bson], coll: Option<&Collator>) -> Bson {
    match name {
        "$sum" => {
            let mut s = Summer::default();
            for v in items {
                s.add(v);
            }
            s.result()
        }
        "$avg" => {
            let mut s = Summer::default();
            for v in items {
                s.add(v);
            }
            s.average()
        }
        "$min" | "$max" => {
            let mut best: Option<&Bson> = None;
            for v in items {
                if matches!(v, Bson::Null | Bson::Undefined) {
                    continue;
                }
                best = match best {
                    None => Some(v),
                    Some(b) => {
                        let o = cmp_bson_with(v, b, coll);
                        if (name == "$min" && o == Ordering::Less)
                            || (name == "$max" && o == Ordering::Greater)
                        {
                            Some(v)
                        } else {
                            Some(b)
                        }
                    }
                };
            }
            best.cloned().unwrap_or(Bson::Null)
        }
        _ => {
            let xs: Vec<f64> = items
                .iter()
                .filter(|v| is_number(v))
                .filter_map(|v| as_f64(v))
                .collect();
            std_dev(&xs, name == "$stdDevSamp")
        }
    }
}

pub fn std_dev(xs: &[f64], sample: bool) -> Bson {
    let n = xs.len();
    if n == 0 || (sample && n < 2) {
        return Bson::Null;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
    Bson::Double((ss / if sample { (n - 1) as f64 } else { n as f64 }).sqrt())
}

fn add(vals: &[Option<Bson>]) -> R {
    let mut s = Summer::default();
    let mut date: Option<i64> = None;
    for v in vals {
        match v {
            Some(Bson::DateTime(d)) => {
                if date.is_some() {
                    return Err(Error::location(
                        16612,
                        "only one date allowed in an $add expression",
                    ));
                }
                date = Some(d.timestamp_millis());
            }
            Some(x) if is_number(x) => {
                s.add(x);
            }
            v if nullish(v) => return null(),
            Some(x) => {
                return Err(Error::new(
                    codes::TYPE_MISMATCH,
                    format!(
                        "$add only supports numeric or date types, not {}",
                        type_name(x)
                    ),
                ))
            }
            None => unreachable!(),
        }
    }
    if let Some(ms) = date {
        let add = match s.result() {
            Bson::Int32(i) => i as i64,
            Bson::Int64(l) => l,
            other => {
                let f = as_f64(&other).unwrap_or(f64::NAN);
                if !f.is_finite() || f.abs() >= 9.2e18 {
                    return Err(Error::new(codes::OVERFLOW, "date overflow in $add"));
                }
                f.round() as i64
            }
        };
        let total = ms
            .checked_add(add)
            .ok_or_else(|| Error::new(codes::OVERFLOW, "date overflow in $add"))?;
        return done(Bson::DateTime(bson::DateTime::from_millis(total)));
    }
    done(s.result())
}

fn subtract(a: &Option<Bson>, b: &Option<Bson>) -> R {
    if nullish(a) || nullish(b) {
        return null();
    }
    let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
    match (a, b) {
        (Bson::DateTime(x), Bson::DateTime(y)) => done(Bson::Int64(
            x.timestamp_millis().wrapping_sub(y.timestamp_millis()),
        )),
        (Bson::DateTime(x), y) if is_number(y) => {
            let sub = match y {
                Bson::Int32(i) => *i as i64,
                Bson::Int64(l) => *l,
                other => as_f64(other).unwrap_or(0.0).round() as i64,
            };
            done(Bson::DateTime(bson::DateTime::from_millis(
                x.timestamp_millis().wrapping_sub(sub),
            )))
        }
        (x, y) if is_number(x) && is_number(y) => {
            let mut s = Summer::default();
            s.add(x);
            let neg = negate(y);
            match neg {
                Some(n) => {
                    s.add(&n);
                    done(s.result())
                }
                None => {
                    // i64::MIN cannot be negated: compute wide.
                    let (xi, yi) = (
                        num::as_exact_i64(x).unwrap_or(0) as i128,
                        num::as_exact_i64(y).unwrap_or(0) as i128,
                    );
                    done(num::int_result(xi - yi, NumKind::Long))
                }
            }
        }
        _ => Err(Error::new(
            codes::TYPE_MISMATCH,
            format!("can't $subtract {} from {}", type_name(b), type_name(a)),
        )),
    }
}

fn negate(v: &Bson) -> Option<Bson> {
    Some(match v {
        Bson::Int32(i) => match i.checked_neg() {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(-(*i as i64)),
        },
        Bson::Int64(l) => Bson::Int64(l.checked_neg()?),
        Bson::Double(d) => Bson::Double(-d),
        Bson::Decimal128(_) => match Dec::from_bson(v) {
            Some(d) => Bson::Decimal128(d.neg().to_decimal128()),
            None => num::dec_bson(-as_f64(v).unwrap_or(f64::NAN)),
        },
        _ => return None,
    })
}

fn divide(a: &Option<Bson>, b: &Option<Bson>) -> R {
    match (a, b) {
        (Some(x), Some(y)) if is_number(x) && is_number(y) => {
            if matches!(x, Bson::Decimal128(_)) || matches!(y, Bson::Decimal128(_)) {
                let (dx, dy) = (num::wide_of(x), num::wide_of(y));
                let (Some(dx), Some(dy)) = (dx, dy) else {
                    return done(num::dec_bson(f64::NAN));
                };
                if dy.is_zero() {
                    return Err(Error::bad_value("can't $divide by zero"));
                }
                return done(decimal::to_bson(&decimal::div(dx, &dy)));
            }
            let (fx, fy) = (as_f64(x).unwrap(), as_f64(y).unwrap());
            if fy == 0.0 {
                return Err(Error::bad_value("can't $divide by zero"));
            }
            done(Bson::Double(fx / fy))
        }
        _ if nullish(a) || nullish(b) => null(),
        _ => Err(Error::new(
            codes::TYPE_MISMATCH,
            format!(
                "$divide only supports numeric types, not {} and {}",
                type_name_opt(a),
                type_name_opt(b)
            ),
        )),
    }
}

fn modulo(a: &Option<Bson>, b: &Option<Bson>) -> R {
    match (a, b) {
        (Some(x), Some(y)) if is_number(x) && is_number(y) => {
            let kind = kind_of(x).unwrap().max(kind_of(y).unwrap());
            match kind {
                NumKind::Int | NumKind::Long => {
                    let (xi, yi) = (num::as_exact_i64(x).unwrap(), num::as_exact_i64(y).unwrap());
                    if yi == 0 {
                        return Err(Error::bad_value("can't $mod by zero"));
                    }
                    done(num::int_result((xi as i128) % (yi as i128), kind))
                }
                _ => {
                    let (fx, fy) = (as_f64(x).unwrap(), as_f64(y).unwrap());
                    if fy == 0.0 {
                        return Err(Error::bad_value("can't $mod by zero"));
                    }
                    let r = fx % fy;
                    done(if kind == NumKind::Decimal {
                        num::dec_bson(r)
                    } else {
                        Bson::Double(r)
                    })
                }
            }
        }
        _ if nullish(a) || nullish(b) => null(),
        _ => Err(Error::new(
            codes::TYPE_MISMATCH,
            format!(
                "$mod only supports numeric types, not {} and {}",
                type_name_opt(a),
                type_name_opt(b)
            ),
        )),
    }
}

fn unary(name: &str, v: &Option<Bson>) -> R {
    if nullish(v) {
        return null();
    }
    let x = v.as_ref().unwrap();
    if !is_number(x) {
        return Err(Error::location(
            28765,
            format!("{name} only supports numeric types, not {}", type_name(x)),
        ));
    }
    let f = as_f64(x).unwrap();
    if let Some(d) = decimal_arg(x) {
        if matches!(name, "$sqrt" | "$exp" | "$ln" | "$log10") {
            return unary_decimal(name, x, d);
        }
    }
    let wrap = Bson::Double;
    match name {
        "$abs" => done(match x {
            Bson::Int32(i) => match i.checked_abs() {
                Some(a) => Bson::Int32(a),
                None => Bson::Int64((*i as i64).abs()),
            },
            Bson::Int64(l) => match l.checked_abs() {
                Some(a) => Bson::Int64(a),
                None => return Err(Error::location(28680, "can't take $abs of long long min")),
            },
            Bson::Decimal128(d) => {
                let s = d.to_string();
                Bson::Decimal128(s.trim_start_matches('-').parse().unwrap_or(*d))
            }
            _ => Bson::Double(f.abs()),
        }),
        "$ceil" | "$floor" => done(match x {
            Bson::Int32(_) | Bson::Int64(_) => x.clone(),
            Bson::Decimal128(_) => match Dec::from_bson(x) {
                Some(d) => {
                    let t = num::round_dec(d, 0, true).unwrap_or(d);
                    let adjust = if name == "$ceil" {
                        !d.neg && t != d
                    } else {
                        d.neg && t != d
                    };
                    let r = if adjust {
                        t.add(Dec {
                            neg: name == "$floor",
                            coeff: 1,
                            exp: 0,
                        })
                        .unwrap_or(t)
                    } else {
                        t
                    };
                    Bson::Decimal128(r.to_decimal128())
                }
                None => x.clone(),
            },
            _ => Bson::Double(if name == "$ceil" { f.ceil() } else { f.floor() }),
        }),
        "$sqrt" => {
            if f < 0.0 {
                return Err(Error::location(
                    28714,
                    "$sqrt's argument must be greater than or equal to 0",
                ));
            }
            done(wrap(f.sqrt()))
        }
        "$exp" => done(wrap(f.exp())),
        "$ln" | "$log10" => {
            if !(f > 0.0) && !f.is_nan() {
                let code = if name == "$ln" { 28766 } else { 28761 };
                return Err(Error::location(
                    code,
                    format!(
                        "{name}'s argument must be a positive number, but is {}",
                        show(x)
                    ),
                ));
            }
            done(wrap(if name == "$ln" { f.ln() } else { f.log10() }))
        }
        _ => Ok(None),
    }
}

/// The decimal value of a Decimal128 argument; `None` for the other numeric types.
fn decimal_arg(x: &Bson) -> Option<decimal::Wide> {
    match x {
        Bson::Decimal128(_) => num::wide_of(x),
        _ => None,
    }
}

/// Greater than zero, or NaN: the arguments `$ln`, `$log10` and `$log` accept.
fn positive_or_nan(d: &decimal::Wide) -> bool {
    d.is_nan() || !(d.is_zero() || d.is_negative())
}

/// `$sqrt`, `$exp`, `$ln`, `$log10` of a Decimal128, in decimal.
fn unary_decimal(name: &str, x: &Bson, d: decimal::Wide) -> R {
    let r = match name {
        "$sqrt" => {
            if d.is_negative() && !d.is_zero() && !d.is_nan() {
                return Err(Error::location(
                    28714,
                    "$sqrt's argument must be greater than or equal to 0",
                ));
            }
            decimal::sqrt(d)
        }
        "$exp" => decimal::exp(d),
        _ => {
            if !positive_or_nan(&d) {
                let code = if name == "$ln" { 28766 } else { 28761 };
                return Err(Error::location(
                    code,
                    format!(
                        "{name}'s argument must be a positive number, but is {}",
                        show(x)
                    ),
                ));
            }
            if name == "$ln" {
                decimal::ln(d)
            } else {
                decimal::log10(d)
            }
        }
    };
    done(decimal::to_bson(&r))
}

fn round(name: &str, v: &Option<Bson>, place: Option<&Option<Bson>>) -> R {
    if nullish(v) {
        return null();
    }
    let place = match place {
        None => 0,
        Some(p) if nullish(p) => return null(),
        Some(Some(p)) => match num::as_exact_i64(p) {
            Some(n) if (-20..=100).contains(&n) => n as i32,
            Some(n) => {
                return Err(Error::location(
                    51155,
                    format!(
                        "cannot apply {name} with precision value {n} value must be in [-20, 100]"
                    ),
                ))
            }
            None => {
                return Err(Error::location(
                    51081,
                    format!(
                        "precision argument to {name} must be a integral value, found {}",
                        show(p)
                    ),
                ))
            }
        },
        Some(None) => unreachable!(),
    };
    let x = v.as_ref().unwrap();
    let trunc = name == "$trunc";
    match x {
        Bson::Int32(_) | Bson::Int64(_) => {
            if place >= 0 {
                return done(x.clone());
            }
            let i = num::as_exact_i64(x).unwrap() as i128;
            let m = 10i128.pow((-place) as u32);
            let q = i / m;
            let r = i % m;
            let half = m / 2;
            let q = if trunc || r.abs() < half || (r.abs() == half && q % 2 == 0) {
                q
            } else if i < 0 {
                q - 1
            } else {
                q + 1
            };
            let kind = kind_of(x).unwrap();
            let res = q * m;
            done(match num::int_result(res, kind) {
                Bson::Double(_) => {
                    return Err(Error::location(
                        51080,
                        format!("invalid conversion from long to int in {name}"),
                    ));
                }
                other => other,
            })
        }
        Bson::Double(d) => done(Bson::Double(num::round_f64(*d, place, trunc))),
        Bson::Decimal128(_) => match Dec::from_bson(x) {
            Some(d) => done(Bson::Decimal128(
                num::round_dec(d, place, trunc).unwrap_or(d).to_decimal128(),
            )),
            None => done(x.clone()),
        },
        other => Err(Error::location(
            51081,
            format!(
                "{name} only supports numeric types, not {}",
                type_name(other)
            ),
        )),
    }
}

fn pow(base: &Option<Bson>, exp: &Option<Bson>) -> R {
    if nullish(base) || nullish(exp) {
        return null();
    }
    let (b, e) = (base.as_ref().unwrap(), exp.as_ref().unwrap());
    if !is_number(b) {
        return Err(Error::location(
            28762,
            format!("$pow's base must be numeric, not {}", type_name(b)),
        ));
    }
    if !is_number(e) {
        return Err(Error::location(
            28763,
            format!("$pow's exponent must be numeric, not {}", type_name(e)),
        ));
    }
    let (fb, fe) = (as_f64(b).unwrap(), as_f64(e).unwrap());
    if fb == 0.0 && fe < 0.0 {
        return Err(Error::location(
            28764,
            "$pow cannot take a base of 0 and a negative exponent",
        ));
    }
    let kind = kind_of(b).unwrap().max(kind_of(e).unwrap());
    match kind {
        NumKind::Int | NumKind::Long => {
            let (ib, ie) = (num::as_exact_i64(b).unwrap(), num::as_exact_i64(e).unwrap());
            if ie < 0 {
                // Only 1 and -1 stay integral.
                return done(match ib {
                    1 => num::int_result(1, kind),
                    -1 => num::int_result(if ie % 2 == 0 { 1 } else { -1 }, kind),
                    _ => Bson::Double(fb.powf(fe)),
                });
            }
            let mut acc: Option<i128> = Some(1);
            let ie_u = ie as u64;
            if ie_u <= 128 {
                for _ in 0..ie_u {
                    acc = acc
                        .and_then(|a| a.checked_mul(ib as i128))
                        .filter(|a| i64::try_from(*a).is_ok());
                    if acc.is_none() {
                        break;
                    }
                }
            } else if ib.abs() > 1 {
                acc = None;
            } else {
                acc = Some(if ib == -1 && ie % 2 == 1 {
                    -1
                } else {
                    ib.abs() as i128
                });
            }
            match acc {
                Some(r) => done(num::int_result(r, kind)),
                None => done(Bson::Double(fb.powf(fe))),
            }
        }
        NumKind::Double => done(Bson::Double(fb.powf(fe))),
        NumKind::Decimal => match (num::wide_of(b), num::wide_of(e)) {
            (Some(db), Some(de)) => done(decimal::to_bson(&decimal::pow(db, &de))),
            _ => done(num::dec_bson(f64::NAN)),
        },
    }
}

fn log(n: &Option<Bson>, base: &Option<Bson>) -> R {
    if nullish(n) || nullish(base) {
        return null();
    }
    let (x, b) = (n.as_ref().unwrap(), base.as_ref().unwrap());
    if !is_number(x) {
        return Err(Error::location(
            28756,
            format!("$log's argument must be numeric, not {}", type_name(x)),
        ));
    }
    if !is_number(b) {
        return Err(Error::location(
            28757,
            format!("$log's base must be numeric, not {}", type_name(b)),
        ));
    }
    if matches!(x, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
        return log_decimal(x, b);
    }
    let (fx, fb) = (as_f64(x).unwrap(), as_f64(b).unwrap());
    if !(fx > 0.0) {
        return Err(Error::location(
            28758,
            format!(
                "$log's argument must be a positive number, but is {}",
                show(x)
            ),
        ));
    }
    if !(fb > 0.0) || fb == 1.0 {
        return Err(Error::location(
            28759,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                show(b)
            ),
        ));
    }
    let r = fx.ln() / fb.ln();
    if matches!(x, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
        done(num::dec_bson(r))
    } else {
        done(Bson::Double(r))
    }
}

/// `$log` when either argument is a Decimal128: in decimal, with the double path's checks.
fn log_decimal(x: &Bson, b: &Bson) -> R {
    let (Some(dx), Some(db)) = (num::wide_of(x), num::wide_of(b)) else {
        return done(num::dec_bson(f64::NAN));
    };
    if dx.is_nan() || db.is_nan() {
        return done(num::dec_bson(f64::NAN));
    }
    if !positive_or_nan(&dx) {
        return Err(Error::location(
            28758,
            format!(
                "$log's argument must be a positive number, but is {}",
                show(x)
            ),
        ));
    }
    let is_one = decimal::add(db, &decimal::Wide::from(-1i32)).is_zero();
    if !positive_or_nan(&db) || is_one {
        return Err(Error::location(
            28759,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                show(b)
            ),
        ));
    }
    done(decimal::to_bson(&decimal::log(dx, db)))
}

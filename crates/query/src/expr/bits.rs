//! Bitwise operators (`$bitAnd` `$bitOr` `$bitXor` `$bitNot`, on ints and longs) and the
//! timestamp parts (`$tsSecond`, `$tsIncrement`).

use super::util::{done, null, nullish, type_name, R};
use crate::compare::is_number;
use crate::error::{codes, Error};
use bson::Bson;

pub fn apply(name: &str, vals: &[Option<Bson>]) -> R {
    match name {
        "$bitAnd" => fold(name, vals, -1, |a, b| a & b),
        "$bitOr" => fold(name, vals, 0, |a, b| a | b),
        "$bitXor" => fold(name, vals, 0, |a, b| a ^ b),
        "$bitNot" => bit_not(&vals[0]),
        "$tsSecond" | "$tsIncrement" => timestamp_part(name, &vals[0]),
        _ => Ok(None),
    }
}

/// Folds the operands from `identity` (an int): null as soon as one is nullish, an int
/// while every operand is an int, a long once one is a long.
fn fold(name: &str, vals: &[Option<Bson>], identity: i64, op: fn(i64, i64) -> i64) -> R {
    let mut acc = identity;
    let mut long = false;
    for v in vals {
        match v {
            v if nullish(v) => return null(),
            Some(Bson::Int32(i)) => acc = op(acc, *i as i64),
            Some(Bson::Int64(l)) => {
                long = true;
                acc = op(acc, *l);
            }
            _ => {
                return Err(Error::new(
                    codes::TYPE_MISMATCH,
                    format!("{name} only supports int and long operands."),
                ))
            }
        }
    }
    done(if long {
        Bson::Int64(acc)
    } else {
        Bson::Int32(acc as i32)
    })
}

fn bit_not(v: &Option<Bson>) -> R {
    match v {
        v if nullish(v) => null(),
        Some(Bson::Int32(i)) => done(Bson::Int32(!i)),
        Some(Bson::Int64(l)) => done(Bson::Int64(!l)),
        Some(x) if is_number(x) => Err(Error::new(
            codes::TYPE_MISMATCH,
            format!("$bitNot only supports int and long, not: {}.", type_name(x)),
        )),
        Some(x) => Err(Error::location(
            28765,
            format!("$bitNot only supports numeric types, not {}", type_name(x)),
        )),
        None => null(),
    }
}

/// The seconds or the increment of a timestamp, as a long.
fn timestamp_part(name: &str, v: &Option<Bson>) -> R {
    match v {
        v if nullish(v) => null(),
        Some(Bson::Timestamp(t)) => done(Bson::Int64(if name == "$tsSecond" {
            t.time as i64
        } else {
            t.increment as i64
        })),
        Some(x) => {
            let code = if name == "$tsSecond" {
                5687301
            } else {
                5687302
            };
            Err(Error::location(
                code,
                format!(
                    " Argument to {name} must be a timestamp, but is {}",
                    type_name(x)
                ),
            ))
        }
        None => null(),
    }
}

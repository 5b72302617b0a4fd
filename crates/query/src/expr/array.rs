//! Array, set and object operators.

use super::num;
use super::util::{nullish, or_undefined, show, truthy, type_name, type_name_opt};
use crate::collation::Collator;
use crate::compare::{bson_eq_with, cmp_bson_with, is_number};
use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::cmp::Ordering;

use super::util::{done, null, R};

/// Deduplicates with BSON equality, keeping first occurrences in order.
pub fn dedup(items: impl IntoIterator<Item = Bson>, coll: Option<&Collator>) -> Vec<Bson> {
    let mut out: Vec<Bson> = Vec::new();
    for v in items {
        if !out.iter().any(|o| bson_eq_with(o, &v, coll)) {
            out.push(v);
        }
    }
    out
}

fn contains(arr: &[Bson], v: &Bson, coll: Option<&Collator>) -> bool {
    arr.iter().any(|x| bson_eq_with(x, v, coll))
}

pub fn apply(name: &str, vals: &[Option<Bson>], coll: Option<&Collator>) -> R {
    match name {
        "$size" => match &vals[0] {
            Some(Bson::Array(a)) => done(Bson::Int32(a.len() as i32)),
            other => Err(Error::location(
                17124,
                format!(
                    "The argument to $size must be an array. Type of the argument was: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$isArray" => done(Bson::Boolean(matches!(vals[0], Some(Bson::Array(_))))),
        "$arrayElemAt" => {
            if nullish(&vals[0]) || nullish(&vals[1]) {
                return null();
            }
            let Some(Bson::Array(a)) = &vals[0] else {
                return Err(Error::location(
                    28689,
                    format!(
                        "$arrayElemAt's first argument must be an array, but is {}",
                        type_name_opt(&vals[0])
                    ),
                ));
            };
            let idx = vals[1].as_ref().unwrap();
            if !is_number(idx) {
                return Err(Error::location(
                    28690,
                    format!(
                        "$arrayElemAt's second argument must be a numeric value, but is {}",
                        type_name(idx)
                    ),
                ));
            }
            let Some(i) = num::as_exact_i32(idx) else {
                return Err(Error::location(28691, format!("$arrayElemAt's second argument must be representable as a 32-bit integer: {}", show(idx))));
            };
            Ok(Some(elem_at(a, i as i64).cloned()))
        }
        "$first" | "$last" => match &vals[0] {
            v if nullish(v) => null(),
            Some(Bson::Array(a)) => Ok(Some(if name == "$first" {
                a.first().cloned()
            } else {
                a.last().cloned()
            })),
            other => Err(Error::location(
                28689,
                format!(
                    "{name}'s argument must be an array, but is {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$slice" => slice(vals),
        "$concatArrays" => {
            let mut out = Vec::new();
            for v in vals {
                match v {
                    Some(Bson::Array(a)) => out.extend(a.iter().cloned()),
                    v if nullish(v) => return null(),
                    other => {
                        return Err(Error::location(
                            28664,
                            format!(
                                "$concatArrays only supports arrays, not {}",
                                type_name_opt(other)
                            ),
                        ))
                    }
                }
            }
            done(Bson::Array(out))
        }
        "$in" => match &vals[1] {
            Some(Bson::Array(a)) => done(Bson::Boolean(contains(a, or_undefined(&vals[0]), coll))),
            other => Err(Error::location(
                40081,
                format!(
                    "$in requires an array as a second argument, found: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$indexOfArray" => {
            let a = match &vals[0] {
                v if nullish(v) => return null(),
                Some(Bson::Array(a)) => a,
                other => {
                    return Err(Error::location(
                        40090,
                        format!(
                            "$indexOfArray requires an array as a first argument, found: {}",
                            type_name_opt(other)
                        ),
                    ))
                }
            };
            let idx = |i: usize| -> Result<Option<usize>> {
                match vals.get(i) {
                    None => Ok(None),
                    Some(Some(v)) if is_number(v) && num::as_exact_i64(v).is_some() => {
                        let n = num::as_exact_i64(v).unwrap();
                        if n < 0 {
                            Err(Error::location(40097, format!("$indexOfArray requires a nonnegative index, found: {n}")))
                        } else {
                            Ok(Some(n as usize))
                        }
                    }
                    Some(v) => Err(Error::location(
                        40096,
                        format!("$indexOfArray requires an integral starting index, found a value of type: {}, with value: {}", type_name_opt(v), super::util::show_opt(v)),
                    )),
                }
            };
            let start = idx(2)?.unwrap_or(0);
            let end = idx(3)?.unwrap_or(a.len()).min(a.len());
            let needle = or_undefined(&vals[1]);
            for (i, item) in a.iter().enumerate().take(end).skip(start) {
                if bson_eq_with(item, needle, coll) {
                    return done(Bson::Int32(i as i32));
                }
            }
            done(Bson::Int32(-1))
        }
        "$range" => range(vals),
        "$reverseArray" => match &vals[0] {
            v if nullish(v) => null(),
            Some(Bson::Array(a)) => done(Bson::Array(a.iter().rev().cloned().collect())),
            other => Err(Error::location(
                34435,
                format!(
                    "The argument to $reverseArray must be an array, but was of type: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$setUnion" => {
            let mut all = Vec::new();
            for v in vals {
                match v {
                    Some(Bson::Array(a)) => all.extend(a.iter().cloned()),
                    v if nullish(v) => return null(),
                    other => {
                        return Err(Error::location(
                            17043,
                            format!(
                            "All operands of $setUnion must be arrays. One argument is of type: {}",
                            type_name_opt(other)
                        ),
                        ))
                    }
                }
            }
            done(Bson::Array(dedup(all, coll)))
        }
        "$setIntersection" => {
            let mut acc: Option<Vec<Bson>> = None;
            for v in vals {
                match v {
                    Some(Bson::Array(a)) => {
                        acc = Some(match acc {
                            None => dedup(a.iter().cloned(), coll),
                            Some(cur) => cur.into_iter().filter(|x| contains(a, x, coll)).collect(),
                        })
                    }
                    v if nullish(v) => return null(),
                    other => {
                        return Err(Error::location(17047, format!("All operands of $setIntersection must be arrays. One argument is of type: {}", type_name_opt(other))))
                    }
                }
            }
            done(Bson::Array(acc.unwrap_or_default()))
        }
        "$setDifference" => {
            if nullish(&vals[0]) || nullish(&vals[1]) {
                return null();
            }
            let Some(Bson::Array(a)) = &vals[0] else {
                return Err(Error::location(17048, format!("both operands of $setDifference must be arrays. First argument is of type: {}", type_name_opt(&vals[0]))));
            };
            let Some(Bson::Array(b)) = &vals[1] else {
                return Err(Error::location(17049, format!("both operands of $setDifference must be arrays. Second argument is of type: {}", type_name_opt(&vals[1]))));
            };
            done(Bson::Array(dedup(
                a.iter().filter(|x| !contains(b, x, coll)).cloned(),
                coll,
            )))
        }
        "$setEquals" => {
            let mut sets: Vec<&Vec<Bson>> = Vec::new();
            for v in vals {
                match v {
                    Some(Bson::Array(a)) => sets.push(a),
                    other => return Err(Error::location(17044, format!("All operands of $setEquals must be arrays. One argument is of type: {}", type_name_opt(other)))),
                }
            }
            let first = sets[0];
            let eq = sets[1..].iter().all(|s| {
                s.iter().all(|x| contains(first, x, coll))
                    && first.iter().all(|x| contains(s, x, coll))
            });
            done(Bson::Boolean(eq))
        }
        "$setIsSubset" => {
            let Some(Bson::Array(a)) = &vals[0] else {
                return Err(Error::location(17046, format!("both operands of $setIsSubset must be arrays. First argument is of type: {}", type_name_opt(&vals[0]))));
            };
            let Some(Bson::Array(b)) = &vals[1] else {
                return Err(Error::location(17042, format!("both operands of $setIsSubset must be arrays. Second argument is of type: {}", type_name_opt(&vals[1]))));
            };
            done(Bson::Boolean(a.iter().all(|x| contains(b, x, coll))))
        }
        "$anyElementTrue" | "$allElementsTrue" => {
            let Some(Bson::Array(a)) = &vals[0] else {
                let code = if name == "$anyElementTrue" {
                    17041
                } else {
                    17040
                };
                return Err(Error::location(
                    code,
                    format!(
                        "{name}'s argument must be an array, but is {}",
                        type_name_opt(&vals[0])
                    ),
                ));
            };
            let mut it = a.iter().map(|v| truthy(&Some(v.clone())));
            done(Bson::Boolean(if name == "$anyElementTrue" {
                it.any(|b| b)
            } else {
                it.all(|b| b)
            }))
        }
        "$objectToArray" => match &vals[0] {
            v if nullish(v) => null(),
            Some(Bson::Document(d)) => done(Bson::Array(
                d.iter()
                    .map(|(k, v)| Bson::Document(bson::doc! {"k": k.clone(), "v": v.clone()}))
                    .collect(),
            )),
            other => Err(Error::location(
                40390,
                format!(
                    "$objectToArray requires a document input, found: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$arrayToObject" => array_to_object(&vals[0]),
        "$mergeObjects" => {
            let mut out = Document::new();
            // A single operand that is an array merges its elements.
            let spread: Vec<Option<Bson>>;
            let vals: &[Option<Bson>] = match vals {
                [Some(Bson::Array(a))] => {
                    spread = a.iter().cloned().map(Some).collect();
                    &spread
                }
                _ => vals,
            };
            for v in vals {
                match v {
                    Some(Bson::Document(d)) => {
                        for (k, x) in d {
                            out.insert(k.clone(), x.clone());
                        }
                    }
                    v if nullish(v) => {}
                    other => {
                        return Err(Error::location(
                            40400,
                            format!(
                                "$mergeObjects requires object inputs, but input {} is of type {}",
                                super::util::show_opt(other),
                                type_name_opt(other)
                            ),
                        ))
                    }
                }
            }
            done(Bson::Document(out))
        }
        _ => Ok(None),
    }
}

fn elem_at(a: &[Bson], i: i64) -> Option<&Bson> {
    if i < 0 {
        let back = (-i) as usize;
        if back > a.len() {
            None
        } else {
            a.get(a.len() - back)
        }
    } else {
        a.get(i as usize)
    }
}

fn slice(vals: &[Option<Bson>]) -> R {
    if vals.iter().any(nullish) {
        return null();
    }
    let Some(Bson::Array(a)) = &vals[0] else {
        return Err(Error::location(
            28724,
            format!(
                "First argument to $slice must be an array, but is of type: {}",
                type_name_opt(&vals[0])
            ),
        ));
    };
    let second = vals[1].as_ref().unwrap();
    if !is_number(second) {
        return Err(Error::location(
            28725,
            format!(
                "Second argument to $slice must be a numeric value, but is of type: {}",
                type_name(second)
            ),
        ));
    }
    let Some(n1) = num::as_exact_i32(second) else {
        return Err(Error::location(
            28726,
            format!(
                "Second argument to $slice can't be represented as a 32-bit integer: {}",
                show(second)
            ),
        ));
    };
    let len = a.len() as i64;
    let (start, count) = if vals.len() == 2 {
        let n = n1 as i64;
        if n >= 0 {
            (0, n)
        } else {
            ((len + n).max(0), -n)
        }
    } else {
        let third = vals[2].as_ref().unwrap();
        if !is_number(third) {
            return Err(Error::location(
                28727,
                format!(
                    "Third argument to $slice must be numeric, but is of type: {}",
                    type_name(third)
                ),
            ));
        }
        let Some(n2) = num::as_exact_i32(third) else {
            return Err(Error::location(
                28728,
                format!(
                    "Third argument to $slice can't be represented as a 32-bit integer: {}",
                    show(third)
                ),
            ));
        };
        if n2 <= 0 {
            return Err(Error::location(
                28729,
                format!("Third argument to $slice must be positive: {}", show(third)),
            ));
        }
        let pos = n1 as i64;
        let start = if pos >= 0 {
            pos.min(len)
        } else {
            (len + pos).max(0)
        };
        (start, n2 as i64)
    };
    let end = (start + count).min(len);
    done(Bson::Array(a[start as usize..end as usize].to_vec()))
}

fn range(vals: &[Option<Bson>]) -> R {
    let get = |i: usize, what: &str, c1: i32, c2: i32| -> Result<i64> {
        let v = &vals[i];
        match v {
            Some(x) if is_number(x) => num::as_exact_i32(x).map(|n| n as i64).ok_or_else(|| {
                Error::location(c2, format!("$range requires a {what} value that can be represented as a 32-bit integer, found value: {}", show(x)))
            }),
            other => Err(Error::location(c1, format!("$range requires a numeric {what} value, found value of type: {}", type_name_opt(other)))),
        }
    };
    let start = get(0, "starting", 34443, 34444)?;
    let end = get(1, "ending", 34445, 34446)?;
    let step = if vals.len() > 2 {
        get(2, "step", 34447, 34448)?
    } else {
        1
    };
    if step == 0 {
        return Err(Error::location(
            34449,
            "$range requires a non-zero step value",
        ));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        out.push(Bson::Int32(i as i32));
        i += step;
    }
    done(Bson::Array(out))
}

fn array_to_object(v: &Option<Bson>) -> R {
    let a = match v {
        v if nullish(v) => return null(),
        Some(Bson::Array(a)) => a,
        other => {
            return Err(Error::location(
                40386,
                format!(
                    "$arrayToObject requires an array input, found: {}",
                    type_name_opt(other)
                ),
            ))
        }
    };
    let mut out = Document::new();
    let mut pairs_form: Option<bool> = None;
    for item in a {
        match item {
            Bson::Array(kv) => {
                if pairs_form == Some(false) {
                    return Err(Error::location(40391, "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Object was detected, array is not a valid option."));
                }
                pairs_form = Some(true);
                if kv.len() != 2 {
                    return Err(Error::location(40397, format!("$arrayToObject requires an array of size 2 arrays,found array of size: {}", kv.len())));
                }
                let Bson::String(k) = &kv[0] else {
                    return Err(Error::location(40395, format!("$arrayToObject requires an array of key-value pairs, where the key must be of type string. Found key type: {}", type_name(&kv[0]))));
                };
                check_key(k)?;
                out.insert(k.clone(), kv[1].clone());
            }
            Bson::Document(d) => {
                if pairs_form == Some(true) {
                    return Err(Error::location(40396, "$arrayToObject requires a consistent input format. Elements must all be arrays or all be objects. Array was detected, object is not a valid option."));
                }
                pairs_form = Some(false);
                if d.len() != 2 {
                    return Err(Error::location(40392, format!("$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of keys:{}", d.len())));
                }
                let (Some(k), Some(val)) = (d.get("k"), d.get("v")) else {
                    return Err(Error::location(40393, format!("$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both keys from: {}", show(item))));
                };
                let Bson::String(k) = k else {
                    return Err(Error::location(40394, format!("$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' is of type string. Found type: {}", type_name(k))));
                };
                check_key(k)?;
                out.insert(k.clone(), val.clone());
            }
            other => {
                return Err(Error::location(
                    40398,
                    format!(
                        "Unrecognised input type format for $arrayToObject: {}",
                        type_name(other)
                    ),
                ));
            }
        }
    }
    done(Bson::Document(out))
}

fn check_key(k: &str) -> Result<()> {
    if k.contains('\0') {
        return Err(Error::location(
            4940400,
            "Key field cannot contain an embedded null byte",
        ));
    }
    Ok(())
}

pub fn zip(
    inputs: Option<Bson>,
    longest: Option<Bson>,
    defaults: Option<Bson>,
    has_defaults: bool,
) -> Result<Option<Bson>> {
    let inputs = match inputs {
        Some(Bson::Array(a)) => a,
        other => {
            return Err(Error::location(
                34461,
                format!(
                    "inputs must be an array of expressions, found {}",
                    type_name_opt(&other)
                ),
            ))
        }
    };
    let longest = match &longest {
        None => false,
        Some(Bson::Boolean(b)) => *b,
        Some(other) => {
            return Err(Error::location(
                34463,
                format!(
                    "useLongestLength must be a bool, found {}",
                    type_name(other)
                ),
            ))
        }
    };
    if has_defaults && !longest {
        return Err(Error::location(
            34466,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    let mut arrays = Vec::with_capacity(inputs.len());
    for v in inputs {
        match v {
            Bson::Null | Bson::Undefined => return Ok(Some(Bson::Null)),
            Bson::Array(a) => arrays.push(a),
            other => {
                return Err(Error::location(
                    34468,
                    format!(
                        "$zip found a non-array expression in input: {}",
                        show(&other)
                    ),
                ))
            }
        }
    }
    let defaults = match defaults {
        None => vec![Bson::Null; arrays.len()],
        Some(Bson::Array(d)) => {
            if d.len() != arrays.len() {
                return Err(Error::location(
                    34467,
                    "defaults and inputs must have the same length",
                ));
            }
            d
        }
        Some(other) => {
            return Err(Error::location(
                34462,
                format!(
                    "defaults must be an array of expressions, found {}",
                    type_name(&other)
                ),
            ))
        }
    };
    if arrays.is_empty() {
        return Ok(Some(Bson::Array(vec![])));
    }
    let n = if longest {
        arrays.iter().map(|a| a.len()).max().unwrap_or(0)
    } else {
        arrays.iter().map(|a| a.len()).min().unwrap_or(0)
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(Bson::Array(
            arrays
                .iter()
                .enumerate()
                .map(|(j, a)| a.get(i).cloned().unwrap_or_else(|| defaults[j].clone()))
                .collect(),
        ));
    }
    Ok(Some(Bson::Array(out)))
}

/// `$sortArray`: by whole values (`sortBy: 1/-1`) or by document fields.
pub fn sort_array(a: &mut [Bson], sort_by: &Bson, coll: Option<&Collator>) {
    match sort_by {
        Bson::Document(spec) => {
            let keys: Vec<(Vec<String>, bool)> = spec
                .iter()
                .map(|(k, v)| {
                    (
                        super::split_path(k),
                        crate::compare::as_f64(v).unwrap_or(1.0) < 0.0,
                    )
                })
                .collect();
            a.sort_by(|x, y| {
                for (path, desc) in &keys {
                    let kx = super::path_value(x, path).unwrap_or(Bson::Null);
                    let ky = super::path_value(y, path).unwrap_or(Bson::Null);
                    let kx = if matches!(x, Bson::Document(_)) {
                        kx
                    } else {
                        Bson::Null
                    };
                    let ky = if matches!(y, Bson::Document(_)) {
                        ky
                    } else {
                        Bson::Null
                    };
                    let o = cmp_bson_with(&kx, &ky, coll);
                    let o = if *desc { o.reverse() } else { o };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            });
        }
        other => {
            let desc = crate::compare::as_f64(other).unwrap_or(1.0) < 0.0;
            a.sort_by(|x, y| {
                let o = cmp_bson_with(x, y, coll);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            });
        }
    }
}

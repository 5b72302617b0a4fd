//! String operators.

use super::num;
use super::util::{coerce_to_string, nullish, show, type_name, type_name_opt};
use crate::compare::is_number;
use crate::error::{Error, Result};
use crate::regex_engine::{self, Match, Pattern, PatternError};
use bson::{doc, Bson};
use std::sync::Arc;

use super::util::{done, null, R};

pub fn apply(name: &str, vals: &[Option<Bson>]) -> R {
    match name {
        "$concat" => {
            let mut out = String::new();
            for v in vals {
                match v {
                    Some(Bson::String(s)) => out.push_str(s),
                    v if nullish(v) => return null(),
                    other => {
                        return Err(Error::location(
                            16702,
                            format!(
                                "$concat only supports strings, not {}",
                                type_name_opt(other)
                            ),
                        ))
                    }
                }
            }
            done(Bson::String(out))
        }
        "$substr" | "$substrBytes" => substr_bytes(&vals[0], &vals[1], &vals[2]),
        "$substrCP" => substr_cp(&vals[0], &vals[1], &vals[2]),
        "$toLower" => done(Bson::String(
            coerce_to_string(&vals[0])?.to_ascii_lowercase(),
        )),
        "$toUpper" => done(Bson::String(
            coerce_to_string(&vals[0])?.to_ascii_uppercase(),
        )),
        "$strLenBytes" => match &vals[0] {
            Some(Bson::String(s)) => done(len_bson(s.len())),
            other => Err(Error::location(
                34473,
                format!(
                    "$strLenBytes requires a string argument, found: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$strLenCP" => match &vals[0] {
            Some(Bson::String(s)) => done(len_bson(s.chars().count())),
            other => Err(Error::location(
                34471,
                format!(
                    "$strLenCP requires a string argument, found: {}",
                    type_name_opt(other)
                ),
            )),
        },
        "$strcasecmp" => {
            let a = coerce_to_string(&vals[0])?.to_ascii_lowercase();
            let b = coerce_to_string(&vals[1])?.to_ascii_lowercase();
            done(Bson::Int32(match a.cmp(&b) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            }))
        }
        "$split" => {
            if nullish(&vals[0]) {
                return null();
            }
            let Some(Bson::String(s)) = &vals[0] else {
                return Err(Error::location(
                    40085,
                    format!("$split requires an expression that evaluates to a string as a first argument, found: {}", type_name_opt(&vals[0])),
                ));
            };
            let sep = match &vals[1] {
                Some(Bson::String(sep)) => sep,
                v if nullish(v) => return null(),
                other => {
                    return Err(Error::location(
                        40086,
                        format!("$split requires an expression that evaluates to a string as a second argument, found: {}", type_name_opt(other)),
                    ))
                }
            };
            if sep.is_empty() {
                return Err(Error::location(
                    40087,
                    "$split requires a non-empty separator",
                ));
            }
            done(Bson::Array(
                s.split(sep.as_str())
                    .map(|p| Bson::String(p.to_string()))
                    .collect(),
            ))
        }
        "$indexOfBytes" | "$indexOfCP" => index_of(name, vals),
        _ => Ok(None),
    }
}

fn len_bson(n: usize) -> Bson {
    Bson::Int32(n as i32)
}

fn substr_bytes(s: &Option<Bson>, start: &Option<Bson>, len: &Option<Bson>) -> R {
    let s = coerce_to_string(s)?;
    let start = match start {
        Some(v) if is_number(v) => crate::compare::as_f64(v).unwrap(),
        other => {
            return Err(Error::location(
                16034,
                format!(
                    "$substrBytes: starting index must be a numeric type (is BSON type {})",
                    type_name_opt(other)
                ),
            ))
        }
    };
    let len = match len {
        Some(v) if is_number(v) => crate::compare::as_f64(v).unwrap(),
        other => {
            return Err(Error::location(
                16035,
                format!(
                    "$substrBytes: length must be a numeric type (is BSON type {})",
                    type_name_opt(other)
                ),
            ))
        }
    };
    if start < 0.0 {
        return done(Bson::String(String::new()));
    }
    let bytes = s.as_bytes();
    let lo = (start as usize).min(bytes.len());
    let hi = if len < 0.0 {
        bytes.len()
    } else {
        lo.saturating_add(len as usize).min(bytes.len())
    };
    if !s.is_char_boundary(lo) {
        return Err(Error::location(
            28656,
            "$substrBytes:  Invalid range, starting index is a UTF-8 continuation byte.",
        ));
    }
    if !s.is_char_boundary(hi) {
        return Err(Error::location(
            28657,
            "$substrBytes:  Invalid range, ending index is in the middle of a UTF-8 character.",
        ));
    }
    done(Bson::String(s[lo..hi].to_string()))
}

fn substr_cp(s: &Option<Bson>, start: &Option<Bson>, len: &Option<Bson>) -> R {
    let s = coerce_to_string(s)?;
    let start = match start {
        Some(v) if is_number(v) => match num::as_exact_i32(v) {
            Some(i) => i,
            None => {
                return Err(Error::location(
                    34451,
                    format!("$substrCP: starting index cannot be represented as a 32-bit integral value: {}", show(v)),
                ))
            }
        },
        other => {
            return Err(Error::location(
                34450,
                format!("$substrCP: starting index must be a numeric type (is BSON type {})", type_name_opt(other)),
            ))
        }
    };
    let len = match len {
        Some(v) if is_number(v) => match num::as_exact_i32(v) {
            Some(i) => i,
            None => {
                return Err(Error::location(
                    34453,
                    format!(
                        "$substrCP: length cannot be represented as a 32-bit integral value: {}",
                        show(v)
                    ),
                ))
            }
        },
        other => {
            return Err(Error::location(
                34452,
                format!(
                    "$substrCP: length must be a numeric type (is BSON type {})",
                    type_name_opt(other)
                ),
            ))
        }
    };
    if start < 0 {
        return Err(Error::location(
            34455,
            "$substrCP: the starting index must be nonnegative integer.",
        ));
    }
    if len < 0 {
        return Err(Error::location(
            34454,
            "$substrCP: length must be a nonnegative integer.",
        ));
    }
    done(Bson::String(
        s.chars().skip(start as usize).take(len as usize).collect(),
    ))
}

fn index_of(name: &str, vals: &[Option<Bson>]) -> R {
    let cp = name == "$indexOfCP";
    let (c1, c2) = if cp { (40093, 40094) } else { (40091, 40092) };
    let hay = match &vals[0] {
        Some(Bson::String(s)) => s,
        v if nullish(v) => return null(),
        other => {
            return Err(Error::location(
                c1,
                format!(
                    "{name} requires a string as the first argument, found: {}",
                    type_name_opt(other)
                ),
            ))
        }
    };
    let needle = match &vals[1] {
        Some(Bson::String(s)) => s,
        other => {
            return Err(Error::location(
                c2,
                format!(
                    "{name} requires a string as the second argument, found: {}",
                    type_name_opt(other)
                ),
            ))
        }
    };
    let idx_arg = |i: usize| -> Result<Option<usize>> {
        match vals.get(i) {
            None => Ok(None),
            Some(Some(v)) if num::as_exact_i64(v).is_some() && is_number(v) => {
                let n = num::as_exact_i64(v).unwrap();
                if n < 0 {
                    Err(Error::location(40097, format!("{name} requires a nonnegative start index, found: {n}")))
                } else {
                    Ok(Some(n as usize))
                }
            }
            Some(v) => Err(Error::location(
                40096,
                format!("{name} requires an integral starting index, found a value of type: {}, with value: {}", type_name_opt(v), super::util::show_opt(v)),
            )),
        }
    };
    let start = idx_arg(2)?.unwrap_or(0);
    let end = idx_arg(3)?;
    if cp {
        let chars: Vec<char> = hay.chars().collect();
        let nd: Vec<char> = needle.chars().collect();
        let end = end.unwrap_or(chars.len()).min(chars.len());
        if start > end {
            return done(Bson::Int32(-1));
        }
        let mut i = start;
        while i + nd.len() <= end {
            if chars[i..i + nd.len()] == nd[..] {
                return done(Bson::Int32(i as i32));
            }
            i += 1;
        }
        done(Bson::Int32(-1))
    } else {
        let b = hay.as_bytes();
        let nd = needle.as_bytes();
        let end = end.unwrap_or(b.len()).min(b.len());
        if start > end {
            return done(Bson::Int32(-1));
        }
        let mut i = start;
        while i + nd.len() <= end {
            if &b[i..i + nd.len()] == nd {
                return done(Bson::Int32(i as i32));
            }
            i += 1;
        }
        done(Bson::Int32(-1))
    }
}

/// The pattern and options of a `$regexMatch`/`$regexFind`/`$regexFindAll` (mongod's
/// `extractRegexAndOptions`): None when the regex is null or missing.
fn regex_and_options(
    name: &str,
    regex: &Option<Bson>,
    options: &Option<Bson>,
) -> Result<Option<(String, String)>> {
    let (pattern, flags) = match regex {
        Some(Bson::String(s)) => (Some(s.as_str()), ""),
        Some(Bson::RegularExpression(r)) => (Some(r.pattern.as_str()), r.options.as_str()),
        v if nullish(v) => (None, ""),
        _ => {
            return Err(Error::location(
                51105,
                format!("{name} needs 'regex' to be of type string or regex"),
            ))
        }
    };
    let options = match options {
        Some(Bson::String(o)) => Some(o.as_str()),
        v if nullish(v) => None,
        _ => {
            return Err(Error::location(
                51106,
                format!("{name} needs 'options' to be of type string"),
            ))
        }
    };
    if !flags.is_empty() && options.is_some() {
        return Err(Error::location(
            51107,
            format!("{name}: found regex option(s) specified in both 'regex' and 'option' fields"),
        ));
    }
    let options = options.unwrap_or(flags);
    if pattern.is_some_and(|p| p.contains('\0')) {
        return Err(Error::location(
            51109,
            format!("{name}: regular expression cannot contain an embedded null byte"),
        ));
    }
    if options.contains('\0') {
        return Err(Error::location(
            51110,
            format!("{name}: regular expression options cannot contain an embedded null byte"),
        ));
    }
    Ok(pattern.map(|p| (p.to_string(), options.to_string())))
}

/// Compiles a `$regex*` expression's pattern with the engine `$regex` queries use, with
/// mongod's errors for the expressions (51108, 51111). A per-thread cache keeps a pattern
/// read from documents from being compiled again for each document.
fn compile_for(name: &str, pattern: &str, options: &str) -> Result<Arc<Pattern>> {
    regex_engine::compile_cached(pattern, options).map_err(|e| match e {
        PatternError::BadOption(c) => {
            Error::location(51108, format!("{name} invalid flag in regex options: {c}"))
        }
        PatternError::NulInPattern | PatternError::NulInOptions => Error::location(
            51109,
            format!("{name}: regular expression cannot contain an embedded null byte"),
        ),
        PatternError::Invalid(why) => {
            Error::location(51111, format!("Invalid Regex in {name}: {why}"))
        }
    })
}

/// Checks a constant `regex`/`options` pair when the expression is parsed, as mongod
/// precompiles it: a bad pattern fails even when no document reaches the expression.
pub fn check_constant_regex(name: &str, regex: Option<Bson>, options: Option<Bson>) -> Result<()> {
    if let Some((pattern, opts)) = regex_and_options(name, &regex, &options)? {
        compile_for(name, &pattern, &opts)?;
    }
    Ok(())
}

pub fn regex_op(
    name: &str,
    input: Option<Bson>,
    regex: Option<Bson>,
    options: Option<Bson>,
) -> Result<Option<Bson>> {
    let compiled = match regex_and_options(name, &regex, &options)? {
        Some((pattern, opts)) => Some(compile_for(name, &pattern, &opts)?),
        None => None,
    };
    let input = match input {
        Some(Bson::String(s)) => Some(s),
        v if nullish(&v) => None,
        _ => {
            return Err(Error::location(
                51104,
                format!("{name} needs 'input' to be of type string"),
            ))
        }
    };
    let (Some(input), Some(re)) = (input, compiled) else {
        return Ok(Some(match name {
            "$regexMatch" => Bson::Boolean(false),
            "$regexFind" => Bson::Null,
            _ => Bson::Array(vec![]),
        }));
    };
    let exec_err = |why: String| {
        Error::location(
            51156,
            format!(
                "Error occurred while executing the regular expression in {name}. Result code: {why}"
            ),
        )
    };
    Ok(Some(match name {
        "$regexMatch" => Bson::Boolean(re.is_match(&input).map_err(exec_err)?),
        "$regexFind" => re
            .find_at(&input, 0)
            .map_err(exec_err)?
            .map(|m| match_doc(&input, &m))
            .unwrap_or(Bson::Null),
        _ => Bson::Array(find_all(&re, &input).map_err(exec_err)?),
    }))
}

/// `$regexFindAll`'s matches as mongod walks them: no overlaps, and after an empty match
/// the search goes on one character later.
fn find_all(re: &Pattern, input: &str) -> std::result::Result<Vec<Bson>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    // At least one search, so that an empty input can match an empty pattern.
    while let Some(m) = re.find_at(input, pos)? {
        out.push(match_doc(input, &m));
        pos = match (m.text.is_empty(), input[m.start..].chars().next()) {
            (false, _) => m.start + m.text.len(),
            (true, Some(c)) => m.start + c.len_utf8(),
            (true, None) => break,
        };
        if pos >= input.len() {
            break;
        }
    }
    Ok(out)
}

/// `{match, idx, captures}`, with `idx` in code points as mongod counts it.
fn match_doc(input: &str, m: &Match) -> Bson {
    let idx = input[..m.start].chars().count() as i32;
    let captures: Vec<Bson> = m
        .groups
        .iter()
        .map(|g| g.map(|s| Bson::String(s.to_string())).unwrap_or(Bson::Null))
        .collect();
    Bson::Document(doc! {"match": m.text, "idx": idx, "captures": captures})
}

pub fn replace_op(
    name: &str,
    input: Option<Bson>,
    find: Option<Bson>,
    repl: Option<Bson>,
) -> Result<Option<Bson>> {
    let check = |v: &Option<Bson>, what: &str, code: i32| -> Result<()> {
        match v {
            Some(Bson::String(_)) => Ok(()),
            v if nullish(v) => Ok(()),
            other => Err(Error::location(
                code,
                format!(
                    "{name} requires that '{what}' be a string, found: {}",
                    show_or_type(other)
                ),
            )),
        }
    };
    check(&input, "input", 51746)?;
    check(&find, "find", 51745)?;
    check(&repl, "replacement", 51744)?;
    match (input, find, repl) {
        (Some(Bson::String(i)), Some(Bson::String(f)), Some(Bson::String(r))) => {
            Ok(Some(Bson::String(if name == "$replaceOne" {
                i.replacen(&f, &r, 1)
            } else if f.is_empty() {
                // Empty find: matches between every character, as mongod does.
                let mut out = String::from(&r);
                for c in i.chars() {
                    out.push(c);
                    out.push_str(&r);
                }
                out
            } else {
                i.replace(&f, &r)
            })))
        }
        _ => Ok(Some(Bson::Null)),
    }
}

fn show_or_type(v: &Option<Bson>) -> String {
    match v {
        Some(b) => show(b),
        None => "missing".into(),
    }
}

fn is_default_ws(c: char) -> bool {
    matches!(
        c,
        '\0' | ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

pub fn trim_op(name: &str, input: Option<Bson>, chars: Option<Bson>) -> Result<Option<Bson>> {
    let s = match &input {
        Some(Bson::String(s)) => s.clone(),
        v if nullish(v) => return Ok(Some(Bson::Null)),
        Some(other) => {
            return Err(Error::location(
                50699,
                format!(
                    "{name} requires its input to be a string, got {} (of type {}) instead.",
                    show(other),
                    type_name(other)
                ),
            ))
        }
        None => unreachable!(),
    };
    let set: Option<Vec<char>> = match &chars {
        None => None,
        Some(Bson::String(c)) => Some(c.chars().collect()),
        Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(other) => {
            return Err(Error::location(
                50700,
                format!(
                    "{name} requires 'chars' to be a string, got {} (of type {}) instead.",
                    show(other),
                    type_name(other)
                ),
            ))
        }
    };
    let pred = |c: char| match &set {
        Some(cs) => cs.contains(&c),
        None => is_default_ws(c),
    };
    let out = match name {
        "$ltrim" => s.trim_start_matches(pred),
        "$rtrim" => s.trim_end_matches(pred),
        _ => s.trim_matches(pred),
    };
    Ok(Some(Bson::String(out.to_string())))
}

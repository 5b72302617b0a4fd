//! `$regex` (and regexes inside `$in`, `$nin`, `$all`, `$not`): PCRE-style patterns
//! with mongod's option letters.

use crate::error::{Error, Result};
use bson::Bson;
// PCRE-style features (lookaround, backreferences) that MongoDB's regexes allow and
// drivers use, e.g. `^(?!system\.)` in listCollections filters.
use fancy_regex::Regex;

#[derive(Debug, Clone)]
pub(super) struct RegexPred {
    re: Regex,
    pattern: String,
    options: String,
}

pub(super) fn compile_regex(pattern: &str, options: &str) -> Result<RegexPred> {
    let mut flags = String::new();
    for c in options.chars() {
        match c {
            'i' | 'm' | 's' | 'x' => {
                if !flags.contains(c) {
                    flags.push(c)
                }
            }
            'u' => {}
            _ => {
                return Err(Error::location(
                    51108,
                    format!("invalid flag in regex options: {c}"),
                ))
            }
        }
    }
    let full = if flags.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{flags}){pattern}")
    };
    let re = Regex::new(&full)
        .map_err(|e| Error::location(51091, format!("Regular expression is invalid: {e}")))?;
    Ok(RegexPred {
        re,
        pattern: pattern.to_string(),
        options: options.to_string(),
    })
}

pub(super) fn regex_from_bson(r: &bson::Regex) -> Result<RegexPred> {
    compile_regex(&r.pattern, &r.options)
}

pub(super) fn regex_single(x: &Bson, r: &RegexPred) -> bool {
    match x {
        // A match that exceeds the backtracking limit counts as no match.
        Bson::String(s) | Bson::Symbol(s) => r.re.is_match(s).unwrap_or(false),
        Bson::RegularExpression(v) => v.pattern == r.pattern && v.options == r.options,
        _ => false,
    }
}

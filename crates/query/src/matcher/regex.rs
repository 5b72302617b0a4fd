//! `$regex` (and regexes inside `$in`, `$nin`, `$all`, `$not`): PCRE-style patterns
//! with mongod's option letters, compiled once when the filter is parsed.

use crate::error::{Error, Result};
use crate::regex_engine::{self, Pattern, PatternError, MAX_PATTERN_SIZE};
use bson::Bson;

#[derive(Debug, Clone)]
pub(super) struct RegexPred {
    re: Pattern,
}

/// mongod's errors for a query regex (`RegexMatchExpression`): the size and NUL checks
/// are BadValue, an option letter 51108, a pattern PCRE rejects 51091.
pub(super) fn compile_regex(pattern: &str, options: &str) -> Result<RegexPred> {
    if pattern.len() > MAX_PATTERN_SIZE {
        return Err(Error::bad_value("Regular expression is too long"));
    }
    let re = regex_engine::compile(pattern, options).map_err(|e| match e {
        PatternError::NulInPattern => {
            Error::bad_value("Regular expression cannot contain an embedded null byte")
        }
        PatternError::NulInOptions => Error::bad_value(
            "Regular expression options string cannot contain an embedded null byte",
        ),
        PatternError::BadOption(c) => {
            Error::location(51108, format!("invalid flag in regex options: {c}"))
        }
        PatternError::Invalid(why) => {
            Error::location(51091, format!("Regular expression is invalid: {why}"))
        }
    })?;
    Ok(RegexPred { re })
}

pub(super) fn regex_from_bson(r: &bson::Regex) -> Result<RegexPred> {
    compile_regex(&r.pattern, &r.options)
}

pub(super) fn regex_single(x: &Bson, r: &RegexPred) -> bool {
    match x {
        // A match that exceeds the backtracking limit counts as no match.
        Bson::String(s) | Bson::Symbol(s) => r.re.is_match(s).unwrap_or(false),
        Bson::RegularExpression(v) => v.pattern == r.re.source() && v.options == r.re.options(),
        _ => false,
    }
}

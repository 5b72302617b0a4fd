//! The one regular-expression engine behind `$regex` (queries, `$in`/`$nin`/`$all`/`$not`,
//! `$jsonSchema` patterns) and the `$regexMatch`, `$regexFind` and `$regexFindAll`
//! expressions, so that a pattern gives the same answer wherever it is used.
//!
//! mongod compiles both with PCRE (PCRE2 since 6.1). The engine here is `fancy-regex`:
//! a maintained pure-Rust crate that adds what PCRE has and the `regex` crate lacks
//! (lookahead, lookbehind, backreferences, atomic groups, possessive quantifiers) with a
//! backtracking VM, and hands every pattern that uses none of those to the `regex` crate
//! whole, so a plain pattern keeps the `regex` crate's linear-time matching and costs what
//! it did before. PCRE2 bindings (the `pcre2` crate) would follow mongod to the letter but
//! bring a C library into the build; the differences left are listed below.
//!
//! Known differences from PCRE2 without `(*UCP)`: `\w`, `\d`, `\s` and `\b` are
//! Unicode-aware here (ASCII-only in mongod), and `$` without `m` matches only at the very
//! end (PCRE also matches before a final newline).

use std::cell::RefCell;
use std::sync::Arc;

use fancy_regex::{Regex, RegexBuilder};

/// mongod's longest query `$regex` pattern (`RegexMatchExpression::kMaxPatternSize`).
pub const MAX_PATTERN_SIZE: usize = 32761;

/// How many backtracking steps a fancy pattern may take on one input before the match
/// gives up (PCRE2's default match limit is ten million; fancy-regex's one million
/// keeps a pathological pattern from holding a worker as long).
const BACKTRACK_LIMIT: usize = 1_000_000;

/// How many compiled patterns each thread keeps for expressions whose pattern comes from
/// documents (a constant pattern is compiled once when the expression is parsed).
const CACHE_SIZE: usize = 32;

/// PCRE start-of-pattern options that only say what this engine always does (UTF-8
/// subjects, Unicode properties), so they are dropped before compiling.
const NOOP_START_OPTIONS: &[&str] = &["(*UTF8)", "(*UTF)", "(*UCP)"];

/// Why a pattern could not be compiled; each caller turns it into its own mongod error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// An option letter other than i, m, s, x, u.
    BadOption(char),
    /// A NUL byte in the pattern.
    NulInPattern,
    /// A NUL byte in the options.
    NulInOptions,
    /// The engine rejected the pattern; the text says why.
    Invalid(String),
}

/// A compiled pattern with the source and options it came from.
#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
    source: String,
    options: String,
}

/// One match: the matched text, its byte offset, and each capture group (None when the
/// group took no part in the match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'t> {
    pub text: &'t str,
    pub start: usize,
    pub groups: Vec<Option<&'t str>>,
}

/// Compiles `pattern` with mongod's option letters.
pub fn compile(pattern: &str, options: &str) -> Result<Pattern, PatternError> {
    if options.contains('\0') {
        return Err(PatternError::NulInOptions);
    }
    if pattern.contains('\0') {
        return Err(PatternError::NulInPattern);
    }
    let mut builder = RegexBuilder::new(strip_noop_start_options(pattern));
    builder.backtrack_limit(BACKTRACK_LIMIT);
    for c in options.chars() {
        match c {
            'i' => builder.case_insensitive(true),
            'm' => builder.multi_line(true),
            's' => builder.dot_matches_new_line(true),
            'x' => builder.verbose_mode(true),
            'u' => &mut builder,
            other => return Err(PatternError::BadOption(other)),
        };
    }
    let re = builder
        .build()
        .map_err(|e| PatternError::Invalid(e.to_string()))?;
    Ok(Pattern {
        re,
        source: pattern.to_string(),
        options: options.to_string(),
    })
}

/// [`compile`] through a small per-thread cache, for patterns that change per document.
pub fn compile_cached(pattern: &str, options: &str) -> Result<Arc<Pattern>, PatternError> {
    thread_local! {
        static CACHE: RefCell<Vec<Arc<Pattern>>> = const { RefCell::new(Vec::new()) };
    }
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(i) = cache
            .iter()
            .position(|p| p.source == pattern && p.options == options)
        {
            let hit = cache.remove(i);
            cache.push(hit.clone());
            return Ok(hit);
        }
        let compiled = Arc::new(compile(pattern, options)?);
        if cache.len() == CACHE_SIZE {
            cache.remove(0);
        }
        cache.push(compiled.clone());
        Ok(compiled)
    })
}

fn strip_noop_start_options(mut pattern: &str) -> &str {
    while let Some(rest) = NOOP_START_OPTIONS
        .iter()
        .find_map(|o| pattern.strip_prefix(o))
    {
        pattern = rest;
    }
    pattern
}

impl Pattern {
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn options(&self) -> &str {
        &self.options
    }

    /// Whether the pattern matches somewhere in `text`; Err when the match ran past the
    /// backtracking limit.
    pub fn is_match(&self, text: &str) -> Result<bool, String> {
        self.re.is_match(text).map_err(|e| e.to_string())
    }

    /// The first match at or after byte `from`, if any.
    pub fn find_at<'t>(&self, text: &'t str, from: usize) -> Result<Option<Match<'t>>, String> {
        let caps = self
            .re
            .captures_from_pos(text, from)
            .map_err(|e| e.to_string())?;
        Ok(caps.map(|c| {
            let whole = c.get(0).expect("group 0 is the match");
            Match {
                text: whole.as_str(),
                start: whole.start(),
                groups: (1..c.len()).map(|i| c.get(i).map(|g| g.as_str())).collect(),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(p: &str, o: &str, s: &str) -> bool {
        compile(p, o).unwrap().is_match(s).unwrap()
    }

    #[test]
    fn pcre_features_and_options() {
        assert!(matches("^(?!system\\.)", "", "users"));
        assert!(!matches("^(?!system\\.)", "", "system.views"));
        assert!(matches("(?<=\\$)\\d+", "", "cost $42"));
        assert!(!matches("(?<=\\$)\\d+", "", "cost 42"));
        assert!(matches("(a+)b\\1", "", "aabaa"));
        assert!(!matches("^(a+)b\\1$", "", "aaba"));
        assert!(matches("^abc$", "i", "ABC"));
        assert!(matches("^b$", "m", "a\nb\nc"));
        assert!(!matches("^b$", "", "a\nb\nc"));
        assert!(matches("a.c", "s", "a\nc"));
        assert!(!matches("a.c", "", "a\nc"));
        assert!(matches("a b c # comment", "x", "abc"));
        assert!(matches("(*UCP)^\\w+$", "u", "cafétéria"));
    }

    #[test]
    fn bad_patterns_and_options_say_why() {
        assert_eq!(compile("a", "z").unwrap_err(), PatternError::BadOption('z'));
        assert_eq!(compile("a\0b", "").unwrap_err(), PatternError::NulInPattern);
        assert_eq!(compile("a", "\0i").unwrap_err(), PatternError::NulInOptions);
        assert!(matches!(
            compile("[0-9", "").unwrap_err(),
            PatternError::Invalid(_)
        ));
    }

    #[test]
    fn find_at_gives_groups_and_offsets() {
        let p = compile("(m(p))|(z)", "").unwrap();
        let m = p.find_at("Simple Example", 3).unwrap().unwrap();
        assert_eq!(m.text, "mp");
        assert_eq!(m.start, 10);
        assert_eq!(m.groups, vec![Some("mp"), Some("p"), None]);
    }

    #[test]
    fn the_cache_gives_the_same_compiled_pattern() {
        let a = compile_cached("x+", "i").unwrap();
        let b = compile_cached("x+", "i").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = compile_cached("x+", "").unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
    }

    /// A plain pattern goes to the `regex` crate whole: its match costs what the `regex`
    /// crate's does. Prints both timings (not asserted: wall-clock thresholds flake);
    /// `cargo test --release -p tailstream-query plain_pattern_cost -- --nocapture`.
    #[test]
    fn plain_pattern_cost() {
        const ROUNDS: usize = 20_000;
        let text = "the quick brown fox jumps over the lazy dog ".repeat(20) + "needle42";
        let pattern = "needle[0-9]+$";
        let ours = compile(pattern, "i").unwrap();
        let plain = regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .unwrap();
        let t = std::time::Instant::now();
        let hits_ours = (0..ROUNDS)
            .filter(|_| ours.is_match(&text).unwrap())
            .count();
        let ours_time = t.elapsed();
        let t = std::time::Instant::now();
        let hits_plain = (0..ROUNDS).filter(|_| plain.is_match(&text)).count();
        let plain_time = t.elapsed();
        assert_eq!(hits_ours, hits_plain);
        println!(
            "plain pattern, {ROUNDS} matches: fancy-regex {ours_time:?}, regex {plain_time:?}"
        );
    }
}

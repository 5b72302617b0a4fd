//! The `$text` query operator: `{$search, $language, $caseSensitive,
//! $diacriticSensitive}` and mongod's parse of the search string: words are ORed,
//! "quoted phrases" must all appear, `-word` and `-"phrase"` exclude.

use super::tokenize::{tokenize, Language, TokenOptions};
use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::collections::BTreeSet;

/// A parsed `$text` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct TextQuery {
    pub search: String,
    /// `$language`, when given (otherwise the index's default language applies).
    pub language: Option<Language>,
    pub case_sensitive: bool,
    pub diacritic_sensitive: bool,
}

/// The terms and phrases of a search string, in one language.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchTerms {
    /// Terms (case- and diacritic-folded) that find candidates in the index and score them.
    pub terms_for_bounds: BTreeSet<String>,
    /// Terms as matched (folded only as the query asks).
    pub positive: BTreeSet<String>,
    pub negated: BTreeSet<String>,
    pub positive_phrases: Vec<String>,
    pub negated_phrases: Vec<String>,
}

impl TextQuery {
    /// Parses the value of `$text`.
    pub fn parse(v: &Bson) -> Result<TextQuery> {
        let d: &Document = match v {
            Bson::Document(d) => d,
            _ => return Err(Error::bad_value("$text expects an object")),
        };
        let mut q = TextQuery {
            search: String::new(),
            language: None,
            case_sensitive: false,
            diacritic_sensitive: false,
        };
        let mut have_search = false;
        for (k, v) in d {
            match (k.as_str(), v) {
                ("$search", Bson::String(s)) => {
                    q.search = s.clone();
                    have_search = true;
                }
                ("$search", _) => {
                    return Err(Error::type_mismatch("$search requires a string value"))
                }
                ("$language", Bson::String(s)) => q.language = Some(Language::parse_or_error(s)?),
                ("$language", _) => {
                    return Err(Error::type_mismatch("$language requires a string value"))
                }
                ("$caseSensitive", Bson::Boolean(b)) => q.case_sensitive = *b,
                ("$caseSensitive", _) => {
                    return Err(Error::type_mismatch(
                        "$caseSensitive requires a boolean value",
                    ))
                }
                ("$diacriticSensitive", Bson::Boolean(b)) => q.diacritic_sensitive = *b,
                ("$diacriticSensitive", _) => {
                    return Err(Error::type_mismatch(
                        "$diacriticSensitive requires a boolean value",
                    ))
                }
                (other, _) => {
                    return Err(Error::failed_to_parse(format!(
                        "Unexpected field '{other}' in $text expression"
                    )))
                }
            }
        }
        if !have_search {
            return Err(Error::failed_to_parse("$text requires a $search field"));
        }
        Ok(q)
    }

    pub fn options(&self) -> TokenOptions {
        TokenOptions {
            case_sensitive: self.case_sensitive,
            diacritic_sensitive: self.diacritic_sensitive,
        }
    }

    /// The terms and phrases of the search string, tokenized in `lang`.
    pub fn terms(&self, lang: Language) -> SearchTerms {
        let (positive_sentence, negative_sentence, positive_phrases, negated_phrases) =
            split_search(&self.search);
        let folded = TokenOptions::default();
        let mut t = SearchTerms {
            positive_phrases,
            negated_phrases,
            ..Default::default()
        };
        for w in tokenize(&positive_sentence, lang, folded) {
            t.terms_for_bounds.insert(w);
        }
        let opts = self.options();
        t.positive = tokenize(&positive_sentence, lang, opts)
            .into_iter()
            .collect();
        t.negated = tokenize(&negative_sentence, lang, opts)
            .into_iter()
            .collect();
        t
    }
}

/// mongod's `FTSQueryImpl::parse`: splits the search string into the words to find, the
/// words to exclude, and the phrases to require or exclude. Words inside a phrase are
/// also searched for; a `-` negates up to the next white space.
fn split_search(s: &str) -> (String, String, Vec<String>, Vec<String>) {
    let mut positive = String::new();
    let mut negative = String::new();
    let mut phrases = Vec::new();
    let mut negated_phrases = Vec::new();
    let mut in_negation = false;
    let mut in_phrase = false;
    let mut quote_offset = 0usize;
    for tok in QueryTokens::new(s) {
        match tok.kind {
            TokKind::Text => {
                if in_phrase && in_negation {
                    continue;
                }
                if in_negation && tok.after_space {
                    in_negation = false;
                }
                let target = if in_negation {
                    &mut negative
                } else {
                    &mut positive
                };
                target.push_str(tok.text);
                target.push(' ');
            }
            TokKind::Delimiter if tok.text == "-" => {
                if !in_phrase && tok.after_space {
                    in_negation = true;
                }
            }
            TokKind::Delimiter => {
                if in_phrase {
                    let phrase = s[quote_offset + 1..tok.offset].to_string();
                    if in_negation {
                        negated_phrases.push(phrase);
                    } else {
                        phrases.push(phrase);
                    }
                    in_phrase = false;
                } else {
                    in_phrase = true;
                    if in_negation && tok.after_space {
                        in_negation = false;
                    }
                    quote_offset = tok.offset;
                }
            }
        }
    }
    (positive, negative, phrases, negated_phrases)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum TokKind {
    Text,
    Delimiter,
}

struct Tok<'a> {
    kind: TokKind,
    text: &'a str,
    offset: usize,
    /// White space (or the start of the string) came right before this token.
    after_space: bool,
}

/// mongod's `FTSQueryParser`: space, LF, VT, FF and CR separate; `-` and `"` are
/// one-character delimiter tokens; anything else runs together as text.
struct QueryTokens<'a> {
    s: &'a str,
    pos: usize,
    after_space: bool,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl<'a> QueryTokens<'a> {
    fn new(s: &'a str) -> QueryTokens<'a> {
        let mut t = QueryTokens {
            s,
            pos: 0,
            after_space: true,
        };
        t.skip_space();
        t.after_space = true;
        t
    }

    fn skip_space(&mut self) -> bool {
        let start = self.pos;
        let b = self.s.as_bytes();
        while self.pos < b.len() && is_space(b[self.pos]) {
            self.pos += 1;
        }
        self.pos > start
    }
}

impl<'a> Iterator for QueryTokens<'a> {
    type Item = Tok<'a>;

    fn next(&mut self) -> Option<Tok<'a>> {
        let b = self.s.as_bytes();
        if self.pos >= b.len() {
            return None;
        }
        let start = self.pos;
        let kind = if matches!(b[start], b'-' | b'"') {
            self.pos += 1;
            TokKind::Delimiter
        } else {
            while self.pos < b.len()
                && !is_space(b[self.pos])
                && !matches!(b[self.pos], b'-' | b'"')
            {
                self.pos += 1;
            }
            TokKind::Text
        };
        let text = &self.s[start..self.pos];
        let after_space = self.after_space;
        self.after_space = self.skip_space();
        Some(Tok {
            kind,
            text,
            offset: start,
            after_space,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::bson;

    fn terms(search: &str) -> SearchTerms {
        TextQuery::parse(&bson!({"$search": search}))
            .unwrap()
            .terms(Language::english())
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn words_phrases_and_negations() {
        let t = terms("coffee -shop \"cup of tea\" -\"green tea\" baking");
        assert_eq!(t.terms_for_bounds, set(&["coffe", "cup", "tea", "bake"]));
        assert_eq!(t.negated, set(&["shop"]));
        assert_eq!(t.positive_phrases, vec!["cup of tea"]);
        assert_eq!(t.negated_phrases, vec!["green tea"]);
        // "- foo" does not negate, "-foo-bar" negates both
        let t = terms("- foo -bar-baz");
        assert_eq!(t.terms_for_bounds, set(&["foo"]));
        assert_eq!(t.negated, set(&["bar", "baz"]));
        // a dash inside a word splits it without negating
        let t = terms("new-york");
        assert_eq!(t.terms_for_bounds, set(&["new", "york"]));
        assert!(t.negated.is_empty());
    }

    #[test]
    fn parse_errors() {
        for bad in [
            bson!("x"),
            bson!({}),
            bson!({"$search": 1}),
            bson!({"$search": "a", "$language": "klingon"}),
            bson!({"$search": "a", "$caseSensitive": 1}),
            bson!({"$search": "a", "$foo": 1}),
        ] {
            assert!(TextQuery::parse(&bad).is_err(), "{bad}");
        }
        let q =
            TextQuery::parse(&bson!({"$search": "a", "$language": "es", "$caseSensitive": true}))
                .unwrap();
        assert_eq!(q.language.unwrap().name(), "spanish");
        assert!(q.case_sensitive);
    }
}

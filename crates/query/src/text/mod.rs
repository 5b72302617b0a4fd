//! Text indexes and the `$text` operator, as mongod (text index version 3) has them.
//!
//! A text index stores one key per distinct term of a document: `[prefix fields...,
//! term, score, suffix fields...]` under the key pattern `{..., _fts: "text", _ftsx: 1,
//! ...}`. A term's score is mongod's: for each indexed string, `weight * freq * coeff *
//! adjustment`, where `freq` sums 1, 1/2, 1/4... over the term's occurrences, `coeff =
//! 0.5 * count / tokens + 0.5` favours short fields, and `adjustment` is 1.1 when the
//! whole string is that one term; a document's scores are summed over its fields. A
//! `$text` query's score for a document is the sum of its scores for the query terms.

pub mod query;
pub mod tokenize;

use crate::error::{codes, Error, Result};
use bson::{Bson, Document};
pub use query::{SearchTerms, TextQuery};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
pub use tokenize::{Language, TokenOptions};

/// The hidden top-level field that carries a document's text score from the scan to
/// `{$meta: "textScore"}` (projections, sorts, expressions); removed before replies.
pub const TEXT_SCORE_FIELD: &str = "$__textScore";

/// mongod's bound on a field weight.
const MAX_WORD_WEIGHT: f64 = 100_000.0;

/// A text index's parameters (from its normalized specification).
#[derive(Debug, Clone, PartialEq)]
pub struct TextIndexSpec {
    /// Field weights by dotted path (`$**` is the wildcard, see `wildcard`).
    weights: BTreeMap<String, f64>,
    wildcard: bool,
    pub default_language: Language,
    pub language_override: String,
    /// Ordinary key fields before and after the text fields.
    pub prefix: Vec<(String, bool)>,
    pub suffix: Vec<(String, bool)>,
}

/// A string to index: its text, weight and language.
struct Indexed<'a> {
    text: &'a str,
    weight: f64,
    lang: Language,
}

fn is_text_field(v: &Bson) -> bool {
    matches!(v, Bson::String(s) if s == "text")
}

fn weight_value(w: f64) -> Bson {
    if w.fract() == 0.0 && w.abs() < i32::MAX as f64 {
        Bson::Int32(w as i32)
    } else {
        Bson::Double(w)
    }
}

/// mongod's `FTSSpec::fixSpec`: the stored form of a new text index specification
/// (`{_fts: "text", _ftsx: 1}` in place of the text fields, weights for each text field,
/// `default_language`, `language_override`, `textIndexVersion`), after checking it.
pub fn normalize_spec(spec: Document) -> Result<Document> {
    let key = spec.get_document("key").cloned().unwrap_or_default();
    let mut weights: BTreeMap<String, f64> = BTreeMap::new();
    let mut new_key = Document::new();
    let mut added_fts = false;
    // Layout: ordinary fields, then the adjacent text fields, then ordinary fields.
    let mut seen_text = false;
    let mut after_text = false;
    for (k, v) in &key {
        if k == "_fts" {
            if !is_text_field(v) {
                return Err(Error::location(17271, "expecting _fts:\"text\""));
            }
            added_fts = true;
            seen_text = true;
            new_key.insert(k.clone(), v.clone());
            continue;
        }
        if k == "_ftsx" {
            if crate::compare::as_f64(v) != Some(1.0) {
                return Err(Error::location(17272, "expecting _ftsx:1"));
            }
            new_key.insert(k.clone(), v.clone());
            continue;
        }
        if is_text_field(v) {
            if after_text {
                return Err(Error::location(
                    17389,
                    "'text' fields in index must all be adjacent",
                ));
            }
            seen_text = true;
            if !added_fts {
                new_key.insert("_fts", "text");
                new_key.insert("_ftsx", 1);
                added_fts = true;
            }
            weights.insert(k.clone(), 1.0);
            continue;
        }
        let n = crate::compare::as_f64(v).unwrap_or(0.0);
        if n != 1.0 && n != -1.0 {
            return Err(Error::location(
                17273,
                "expected value 1 or -1 for non-text key in compound index",
            ));
        }
        if seen_text {
            after_text = true;
        }
        new_key.insert(k.clone(), v.clone());
    }
    match spec.get("weights") {
        None => {}
        Some(Bson::Document(w)) => {
            for (field, v) in w {
                if !crate::compare::is_number(v) {
                    return Err(Error::location(
                        17283,
                        "weight for text index needs numeric type",
                    ));
                }
                weights.insert(field.clone(), crate::compare::as_f64(v).unwrap_or(0.0));
            }
        }
        Some(Bson::String(s)) if s == "$**" => {
            weights.insert("$**".to_string(), 1.0);
        }
        Some(_) => {
            return Err(Error::location(
                17284,
                "text index option 'weights' must be an object",
            ))
        }
    }
    if weights.is_empty() {
        return Err(Error::new(
            codes::CANNOT_CREATE_INDEX,
            "text index option 'weights' must name at least one field",
        ));
    }
    let mut weights_doc = Document::new();
    for (field, w) in &weights {
        if !(*w > 0.0 && *w < MAX_WORD_WEIGHT) {
            return Err(Error::location(16674, "score for word too high"));
        }
        if field != "$**" {
            if field.split('.').any(|p| p.is_empty()) {
                return Err(Error::location(
                    17291,
                    "weight cannot have empty path component",
                ));
            }
            if field.split('.').any(|p| p.starts_with('$')) {
                return Err(Error::location(
                    17292,
                    "weight cannot have path component with $ prefix",
                ));
            }
        }
        weights_doc.insert(field.clone(), weight_value(*w));
    }
    let default_language = match spec.get("default_language") {
        None => "english".to_string(),
        Some(Bson::String(s)) => {
            Language::parse_or_error(s)?;
            s.clone()
        }
        Some(_) => {
            return Err(Error::location(
                17263,
                "default_language needs a string type",
            ))
        }
    };
    let language_override = match spec.get("language_override") {
        None => "language".to_string(),
        Some(Bson::String(s)) if !s.is_empty() && !s.starts_with('$') && !s.contains('.') => {
            s.clone()
        }
        Some(_) => return Err(Error::location(17136, "language_override is not valid")),
    };
    let version = match spec.get("textIndexVersion") {
        None => 3,
        Some(v) if crate::compare::is_number(v) => {
            let n = crate::compare::as_f64(v).unwrap_or(0.0);
            if n != 3.0 && n != 2.0 {
                return Err(Error::location(
                    17364,
                    format!(
                        "attempt to use unsupported textIndexVersion {n}; versions supported: 3, 2"
                    ),
                ));
            }
            n as i32
        }
        Some(_) => {
            return Err(Error::location(
                17293,
                "text index option 'textIndexVersion' must be a number",
            ))
        }
    };
    let mut out = Document::new();
    for (k, v) in &spec {
        match k.as_str() {
            "key" => {
                out.insert("key", new_key.clone());
            }
            "weights" | "default_language" | "language_override" | "textIndexVersion" => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("weights", weights_doc);
    out.insert("default_language", default_language);
    out.insert("language_override", language_override);
    out.insert("textIndexVersion", version);
    Ok(out)
}

impl TextIndexSpec {
    /// From a normalized (stored) specification.
    pub fn from_spec(spec: &Document) -> Result<TextIndexSpec> {
        let bad = || Error::bad_value("found invalid spec for text index");
        let key = spec.get_document("key").map_err(|_| bad())?;
        let mut weights = BTreeMap::new();
        let mut wildcard = false;
        for (k, v) in spec.get_document("weights").map_err(|_| bad())? {
            if k == "$**" {
                wildcard = true;
            } else {
                weights.insert(k.clone(), crate::compare::as_f64(v).ok_or_else(bad)?);
            }
        }
        let default_language =
            Language::parse(spec.get_str("default_language").unwrap_or("english"))
                .ok_or_else(bad)?;
        let language_override = spec
            .get_str("language_override")
            .unwrap_or("language")
            .to_string();
        let (mut prefix, mut suffix) = (Vec::new(), Vec::new());
        let mut passed = false;
        for (k, v) in key {
            if k == "_fts" || k == "_ftsx" {
                passed = true;
                continue;
            }
            let desc = crate::compare::as_f64(v).unwrap_or(1.0) < 0.0;
            if passed {
                suffix.push((k.clone(), desc));
            } else {
                prefix.push((k.clone(), desc));
            }
        }
        Ok(TextIndexSpec {
            weights,
            wildcard,
            default_language,
            language_override,
            prefix,
            suffix,
        })
    }

    /// The weight of a string at `path`, if the index covers it.
    fn weight(&self, path: &str) -> Option<f64> {
        match self.weights.get(path) {
            Some(w) => Some(*w),
            None if self.wildcard => Some(1.0),
            None => None,
        }
    }

    /// Whether anything below `path` may be indexed.
    fn descends(&self, path: &str) -> bool {
        self.wildcard
            || self.weights.keys().any(|k| {
                k.len() > path.len() && k.starts_with(path) && k.as_bytes()[path.len()] == b'.'
            })
    }

    /// The language of a (sub)document: its `language_override` field, else `inherited`.
    fn language_of(&self, d: &Document, inherited: Language) -> Result<Language> {
        match d.get(&self.language_override) {
            None => Ok(inherited),
            Some(Bson::String(s)) => Language::parse(s).ok_or_else(|| {
                Error::location(17262, format!("language override unsupported: {s}"))
            }),
            Some(_) => Err(Error::location(
                17261,
                "found language override field in document with non-string type",
            )),
        }
    }

    /// mongod's `FTSElementIterator`: the indexed strings of a document.
    fn indexed<'a>(&self, doc: &'a Document) -> Result<Vec<Indexed<'a>>> {
        let mut out = Vec::new();
        let lang = self.language_of(doc, self.default_language)?;
        self.walk_doc(doc, "", lang, &mut out)?;
        Ok(out)
    }

    fn walk_doc<'a>(
        &self,
        d: &'a Document,
        prefix: &str,
        lang: Language,
        out: &mut Vec<Indexed<'a>>,
    ) -> Result<()> {
        for (k, v) in d {
            if k == &self.language_override {
                continue;
            }
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            self.walk_value(v, &path, lang, out)?;
        }
        Ok(())
    }

    fn walk_value<'a>(
        &self,
        v: &'a Bson,
        path: &str,
        lang: Language,
        out: &mut Vec<Indexed<'a>>,
    ) -> Result<()> {
        match v {
            Bson::String(s) => {
                if let Some(weight) = self.weight(path) {
                    out.push(Indexed {
                        text: s,
                        weight,
                        lang,
                    });
                }
            }
            Bson::Document(sub) if self.descends(path) => {
                let lang = self.language_of(sub, lang)?;
                self.walk_doc(sub, path, lang, out)?;
            }
            Bson::Array(a) => {
                for e in a {
                    self.walk_value(e, path, lang, out)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// mongod's `scoreDocument`: each distinct term of the document with its score.
    pub fn term_scores(&self, doc: &Document) -> Result<BTreeMap<String, f64>> {
        let mut scores: BTreeMap<String, f64> = BTreeMap::new();
        for item in self.indexed(doc)? {
            let tokens = tokenize::tokenize(item.text, item.lang, TokenOptions::default());
            if tokens.is_empty() {
                continue;
            }
            // term -> (occurrences, freq), freq = 1 + 1/2 + 1/4 + ...
            let mut terms: BTreeMap<&str, (u32, f64)> = BTreeMap::new();
            for t in &tokens {
                let e = terms.entry(t.as_str()).or_insert((0, 0.0));
                e.1 += 1.0 / f64::powi(2.0, e.0 as i32);
                e.0 += 1;
            }
            let n = tokens.len() as f64;
            for (term, (count, freq)) in terms {
                let coeff = 0.5 * count as f64 / n + 0.5;
                let adjustment =
                    if item.text.len() == term.len() && item.text.eq_ignore_ascii_case(term) {
                        1.1
                    } else {
                        1.0
                    };
                *scores.entry(term.to_string()).or_insert(0.0) +=
                    item.weight * freq * coeff * adjustment;
            }
        }
        Ok(scores)
    }

    /// The index keys of a document: `[prefix..., term, score, suffix...]` per term.
    pub fn keys(&self, doc: &Document) -> Result<Vec<Vec<Bson>>> {
        let scores = self.term_scores(doc)?;
        if scores.is_empty() {
            return Ok(Vec::new());
        }
        let extra = |fields: &[(String, bool)], before: bool| -> Result<Vec<Bson>> {
            fields
                .iter()
                .map(|(path, _)| match crate::path::get_path(doc, path) {
                    Some(Bson::Array(_)) => Err(if before {
                        Error::location(
                            16675,
                            "cannot have a multi-key as a prefix to a text index",
                        )
                    } else {
                        Error::location(
                            16676,
                            "cannot have a multi-key as a suffix to a text index",
                        )
                    }),
                    Some(v) => Ok(v.clone()),
                    None => Ok(Bson::Null),
                })
                .collect()
        };
        let prefix = extra(&self.prefix, true)?;
        let suffix = extra(&self.suffix, false)?;
        Ok(scores
            .into_iter()
            .map(|(term, score)| {
                let mut k = prefix.clone();
                k.push(Bson::String(term));
                k.push(Bson::Double(score));
                k.extend(suffix.iter().cloned());
                k
            })
            .collect())
    }

    /// The query's terms in the language it searches in.
    pub fn search_terms(&self, q: &TextQuery) -> SearchTerms {
        q.terms(q.language.unwrap_or(self.default_language))
    }

    /// mongod's `FTSMatcher` plus the index lookup: does the document match, and with
    /// what score? None when it does not match.
    pub fn evaluate(
        &self,
        q: &TextQuery,
        terms: &SearchTerms,
        doc: &Document,
    ) -> Result<Option<f64>> {
        let scores = self.term_scores(doc)?;
        let hits: Vec<f64> = terms
            .terms_for_bounds
            .iter()
            .filter_map(|t| scores.get(t).copied())
            .collect();
        if hits.is_empty() {
            return Ok(None);
        }
        let opts = q.options();
        let sensitive = q.case_sensitive || q.diacritic_sensitive;
        if sensitive || !terms.negated.is_empty() {
            let items = self.indexed(doc)?;
            let mut positive = !sensitive;
            for item in &items {
                for t in tokenize::tokenize(item.text, item.lang, opts) {
                    if terms.negated.contains(&t) {
                        return Ok(None);
                    }
                    if terms.positive.contains(&t) {
                        positive = true;
                    }
                }
            }
            if !positive {
                return Ok(None);
            }
        }
        if !terms.positive_phrases.is_empty() || !terms.negated_phrases.is_empty() {
            let items = self.indexed(doc)?;
            let folded: Vec<String> = items.iter().map(|i| tokenize::fold(i.text, opts)).collect();
            let found = |phrase: &str| {
                let p = tokenize::fold(phrase, opts);
                folded.iter().any(|f| f.contains(&p))
            };
            if !terms.positive_phrases.iter().all(|p| found(p)) {
                return Ok(None);
            }
            if terms.negated_phrases.iter().any(|p| found(p)) {
                return Ok(None);
            }
        }
        Ok(Some(hits.iter().sum()))
    }
}

/// A `$text` predicate in a query filter. It is evaluated against the collection's text
/// index, which the planner binds before any document is read; unbound, it fails as
/// mongod does without a text index.
#[derive(Debug, Clone)]
pub struct TextPredicate {
    pub query: TextQuery,
    bound: OnceLock<Arc<BoundText>>,
}

#[derive(Debug)]
struct BoundText {
    spec: Arc<TextIndexSpec>,
    terms: SearchTerms,
}

/// mongod's error for `$text` on a collection without a text index.
pub fn text_index_required() -> Error {
    Error::new(
        codes::INDEX_NOT_FOUND,
        "text index required for $text query",
    )
}

impl TextPredicate {
    pub fn parse(v: &Bson) -> Result<TextPredicate> {
        Ok(TextPredicate {
            query: TextQuery::parse(v)?,
            bound: OnceLock::new(),
        })
    }

    /// Binds the collection's text index (the first binding wins).
    pub fn bind(&self, spec: Arc<TextIndexSpec>) {
        let terms = spec.search_terms(&self.query);
        let _ = self.bound.set(Arc::new(BoundText { spec, terms }));
    }

    /// The terms the index is searched for (once bound).
    pub fn terms_for_bounds(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.bound.get().map(|b| &b.terms.terms_for_bounds)
    }

    /// The document's score if it matches, None if not.
    pub fn evaluate(&self, doc: &Document) -> Result<Option<f64>> {
        match self.bound.get() {
            Some(b) => b.spec.evaluate(&self.query, &b.terms, doc),
            None => Err(text_index_required()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn spec(user: Document) -> TextIndexSpec {
        let mut s = doc! {"v": 2, "name": "t"};
        s.extend(user);
        TextIndexSpec::from_spec(&normalize_spec(s).unwrap()).unwrap()
    }

    #[test]
    fn normalized_spec_has_mongod_defaults() {
        let n = normalize_spec(doc! {"v": 2, "key": {"t": "text"}, "name": "t_text"}).unwrap();
        assert_eq!(
            n,
            doc! {"v": 2, "key": {"_fts": "text", "_ftsx": 1}, "name": "t_text",
            "weights": {"t": 1}, "default_language": "english",
            "language_override": "language", "textIndexVersion": 3}
        );
        let n = normalize_spec(
            doc! {"key": {"a": 1, "t": "text", "u": "text", "b": -1}, "name": "x", "weights": {"u": 5}},
        )
        .unwrap();
        assert_eq!(
            n.get_document("key").unwrap(),
            &doc! {"a": 1, "_fts": "text", "_ftsx": 1, "b": -1}
        );
        assert_eq!(n.get_document("weights").unwrap(), &doc! {"t": 1, "u": 5});
        // normalizing twice changes nothing
        assert_eq!(normalize_spec(n.clone()).unwrap(), n);
    }

    #[test]
    fn spec_errors() {
        let e = |d: Document| normalize_spec(d).unwrap_err().code;
        assert_eq!(e(doc! {"key": {"a": "text", "b": 1, "c": "text"}}), 17389);
        assert_eq!(e(doc! {"key": {"a": "text"}, "weights": 3}), 17284);
        assert_eq!(e(doc! {"key": {"a": "text"}, "weights": {"a": "x"}}), 17283);
        assert_eq!(e(doc! {"key": {"a": "text"}, "weights": {"a": 0}}), 16674);
        assert_eq!(e(doc! {"key": {"a": "text"}, "default_language": "xx"}), 2);
        assert_eq!(
            e(doc! {"key": {"a": "text"}, "language_override": "$x"}),
            17136
        );
        assert_eq!(e(doc! {"key": {"a": "text"}, "textIndexVersion": 7}), 17364);
    }

    #[test]
    fn keys_and_scores_match_mongod() {
        // From mongod's $_internalIndexKey tests.
        let s = spec(
            doc! {"key": {"places": "text", "food": "text"}, "weights": {"places": 2, "food": 1}},
        );
        let k = s
            .keys(&doc! {"places": "Dublin London", "food": "Salad, Soups"})
            .unwrap();
        assert_eq!(
            k,
            vec![
                vec![bson!("dublin"), bson!(1.5)],
                vec![bson!("london"), bson!(1.5)],
                vec![bson!("salad"), bson!(0.75)],
                vec![bson!("soup"), bson!(0.75)],
            ]
        );
        let k = s
            .keys(&doc! {"places": "Dublin New-York Toronto", "food": "Salad, Soups, Cakes"})
            .unwrap();
        assert_eq!(k[0], vec![bson!("cake"), bson!(0.6666666666666666)]);
        assert_eq!(k[1], vec![bson!("dublin"), bson!(1.25)]);
        // repeated terms: freq 1 + 1/2, and a lone term equal to the field gets 1.1
        let s = spec(doc! {"key": {"t": "text"}});
        let sc = s.term_scores(&doc! {"t": "spam eggs and spam"}).unwrap();
        assert_eq!(sc["spam"], 1.5 * (0.5 * 2.0 / 3.0 + 0.5));
        let sc = s.term_scores(&doc! {"t": "spam"}).unwrap();
        assert_eq!(sc["spam"], 1.1);
        // no text: no keys
        assert!(s.keys(&doc! {"t": 5}).unwrap().is_empty());
    }

    #[test]
    fn compound_keys_carry_prefix_and_suffix() {
        let s = spec(doc! {"key": {"a": 1, "t": "text", "b": 1}});
        let k = s.keys(&doc! {"a": 1, "t": "hello", "b": "x"}).unwrap();
        assert_eq!(
            k,
            vec![vec![bson!(1), bson!("hello"), bson!(1.1), bson!("x")]]
        );
        assert_eq!(s.keys(&doc! {"a": [1], "t": "hi"}).unwrap_err().code, 16675);
    }

    #[test]
    fn wildcard_nested_and_languages() {
        let s = spec(doc! {"key": {"$**": "text"}});
        let sc = s
            .term_scores(
                &doc! {"a": {"b": ["running", 3]}, "c": {"language": "spanish", "d": "corriendo"}},
            )
            .unwrap();
        assert!(sc.contains_key("run"), "{sc:?}");
        assert!(sc.contains_key("corr"), "{sc:?}");
        let e = s
            .term_scores(&doc! {"language": "klingon", "a": "x"})
            .unwrap_err();
        assert_eq!(e.code, 17262);
        let s = spec(doc! {"key": {"a.b": "text"}});
        let sc = s
            .term_scores(&doc! {"a": [{"b": "first"}, {"b": "second"}], "c": "third"})
            .unwrap();
        assert_eq!(sc.keys().collect::<Vec<_>>(), vec!["first", "second"]);
    }

    #[test]
    fn query_evaluation() {
        let s = spec(doc! {"key": {"t": "text"}});
        let eval = |search: Bson, d: Document| {
            let q = TextQuery::parse(&search).unwrap();
            let terms = s.search_terms(&q);
            s.evaluate(&q, &terms, &d).unwrap()
        };
        let d = doc! {"t": "The quick brown fox jumps"};
        assert!(eval(bson!({"$search": "fox cat"}), d.clone()).is_some());
        assert!(eval(bson!({"$search": "cat"}), d.clone()).is_none());
        assert!(eval(bson!({"$search": "fox -quick"}), d.clone()).is_none());
        assert!(eval(bson!({"$search": "\"quick brown\""}), d.clone()).is_some());
        assert!(eval(bson!({"$search": "\"brown quick\""}), d.clone()).is_none());
        assert!(eval(bson!({"$search": "fox -\"quick brown\""}), d.clone()).is_none());
        assert!(eval(bson!({"$search": "-fox"}), d.clone()).is_none());
        assert!(eval(bson!({"$search": "FOX", "$caseSensitive": true}), d.clone()).is_none());
        assert!(eval(
            bson!({"$search": "The", "$caseSensitive": true}),
            doc! {"t": "The Fox"}
        )
        .is_none());
        assert!(eval(
            bson!({"$search": "Fox", "$caseSensitive": true}),
            doc! {"t": "The Fox"}
        )
        .is_some());
        assert!(eval(bson!({"$search": "café"}), doc! {"t": "cafe"}).is_some());
        assert!(eval(
            bson!({"$search": "café", "$diacriticSensitive": true}),
            doc! {"t": "cafe"}
        )
        .is_none());
        // the score is the sum of the document's scores for the query terms
        let both = eval(bson!({"$search": "quick fox"}), d.clone()).unwrap();
        let one = eval(bson!({"$search": "fox"}), d).unwrap();
        assert!(both > one);
    }
}

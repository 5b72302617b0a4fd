//! Text search tokenization as mongod's text index version 3 does it
//! (`UnicodeFTSTokenizer`): words are runs of non-delimiter characters; each is
//! lower-cased, dropped if it is a stop word of the language, stemmed with the
//! language's Snowball stemmer, and (unless diacritic-sensitive) stripped of diacritics.

use crate::error::{Error, Result};
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::HashSet;
use std::sync::OnceLock;

/// A text search language: its Snowball stemmer and stop words (`None`: neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Language {
    name: &'static str,
    algorithm: Option<Algorithm>,
    /// The `stop-words` crate's code for the language's list.
    stop_words: Option<&'static str>,
}

/// mongod's text search languages (version 3): name, ISO 639 code, stemmer, and the code
/// of the `stop-words` crate's list (English has mongod's own list below; "none" none).
const LANGUAGES: &[(&str, &str, Option<Algorithm>, Option<&str>)] = &[
    ("danish", "da", Some(Algorithm::Danish), Some("da")),
    ("dutch", "nl", Some(Algorithm::Dutch), Some("nl")),
    ("english", "en", Some(Algorithm::English), None),
    ("finnish", "fi", Some(Algorithm::Finnish), Some("fi")),
    ("french", "fr", Some(Algorithm::French), Some("fr")),
    ("german", "de", Some(Algorithm::German), Some("de")),
    ("hungarian", "hu", Some(Algorithm::Hungarian), Some("hu")),
    ("italian", "it", Some(Algorithm::Italian), Some("it")),
    ("norwegian", "nb", Some(Algorithm::Norwegian), Some("no")),
    ("portuguese", "pt", Some(Algorithm::Portuguese), Some("pt")),
    ("romanian", "ro", Some(Algorithm::Romanian), Some("ro")),
    ("russian", "ru", Some(Algorithm::Russian), Some("ru")),
    ("spanish", "es", Some(Algorithm::Spanish), Some("es")),
    ("swedish", "sv", Some(Algorithm::Swedish), Some("sv")),
    ("turkish", "tr", Some(Algorithm::Turkish), Some("tr")),
    ("none", "none", None, None),
];

/// A language's stop words, lower-cased, each also without its diacritics (a word is
/// checked before its diacritics are folded away, and a diacritic-insensitive search
/// string may have lost them already).
fn stop_word_set(list_code: &'static str) -> &'static HashSet<String> {
    static SETS: OnceLock<Vec<(&'static str, HashSet<String>)>> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        LANGUAGES
            .iter()
            .filter_map(|(_, _, _, code)| *code)
            .map(|code| {
                let words = stop_words::lookup(code).unwrap_or_default();
                let set = words
                    .iter()
                    .flat_map(|w| {
                        let lower = w.to_lowercase();
                        [strip_diacritics(&lower), lower]
                    })
                    .collect();
                (code, set)
            })
            .collect()
    });
    &sets
        .iter()
        .find(|(code, _)| *code == list_code)
        .expect("every list code is loaded")
        .1
}

impl Language {
    /// A language by name or ISO code (case-insensitive), as mongod accepts them.
    pub fn parse(name: &str) -> Option<Language> {
        let lower = name.to_lowercase();
        LANGUAGES
            .iter()
            .find(|(n, code, _, _)| *n == lower || *code == lower)
            .map(|(n, _, a, stop)| Language {
                name: n,
                algorithm: *a,
                stop_words: *stop,
            })
    }

    /// Like [`Language::parse`], with mongod's error for an unknown language.
    pub fn parse_or_error(name: &str) -> Result<Language> {
        Language::parse(name).ok_or_else(|| {
            Error::bad_value(format!(
                "unsupported language: \"{name}\" for text index version 3"
            ))
        })
    }

    pub fn english() -> Language {
        Language::parse("english").expect("english is a language")
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    fn is_stop_word(&self, lower: &str) -> bool {
        match self.stop_words {
            Some(code) => {
                let set = stop_word_set(code);
                set.contains(lower) || (!lower.is_ascii() && set.contains(&strip_diacritics(lower)))
            }
            None => self.name == "english" && ENGLISH_STOP_WORDS.binary_search(&lower).is_ok(),
        }
    }

    fn stem<'a>(&self, word: &'a str) -> std::borrow::Cow<'a, str> {
        match self.algorithm {
            Some(a) => Stemmer::create(a).stem(word),
            None => std::borrow::Cow::Borrowed(word),
        }
    }

    /// Whether the apostrophe separates words (everywhere but in English, whose stop
    /// words include contractions such as "don't").
    fn apostrophe_delimits(&self) -> bool {
        self.name != "english"
    }
}

/// What a tokenizer keeps of each word.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenOptions {
    pub case_sensitive: bool,
    pub diacritic_sensitive: bool,
}

/// The search terms of `text` in `lang`, stop words removed (duplicates kept, in order).
pub fn tokenize(text: &str, lang: Language, opts: TokenOptions) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c| is_delimiter(c, lang)) {
        if word.is_empty() {
            continue;
        }
        let lower = word.to_lowercase();
        if lang.is_stop_word(&lower) {
            continue;
        }
        // The stemmer is diacritic-sensitive: stem before folding diacritics away.
        let stemmed = if opts.case_sensitive {
            lang.stem(word).into_owned()
        } else {
            lang.stem(&lower).into_owned()
        };
        out.push(if opts.diacritic_sensitive {
            stemmed
        } else {
            strip_diacritics(&stemmed)
        });
    }
    out
}

/// Folds a string for phrase matching: lower-cased unless case-sensitive, diacritics
/// removed unless diacritic-sensitive.
pub fn fold(text: &str, opts: TokenOptions) -> String {
    let s = if opts.case_sensitive {
        text.to_string()
    } else {
        text.to_lowercase()
    };
    if opts.diacritic_sensitive {
        s
    } else {
        strip_diacritics(&s)
    }
}

/// Removes diacritics: combining marks are dropped and accented letters of the Latin,
/// Greek and Cyrillic alphabets become their base letter (what canonical decomposition
/// followed by dropping the marks gives for them).
pub fn strip_diacritics(s: &str) -> String {
    if s.is_ascii() {
        return s.to_string();
    }
    s.chars()
        .filter(|c| !is_combining_mark(*c))
        .map(base_letter)
        .collect()
}

fn is_combining_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// U+00C0..=U+017F: the base letter, or '.' for letters without a decomposition.
const LATIN_BASES: &str = concat!(
    "AAAAAA.CEEEEIIII",
    ".NOOOOO..UUUUY..",
    "aaaaaa.ceeeeiiii",
    ".nooooo..uuuuy.y",
    "AaAaAaCcCcCcCcDd",
    "..EeEeEeEeEeGgGg",
    "GgGgHh..IiIiIiIi",
    "I...JjKk.LlLlLl.",
    "...NnNnNn...OoOo",
    "Oo..RrRrRrSsSsSs",
    "SsTtTt..UuUuUuUu",
    "UuUuWwYyYZzZzZz.",
);

fn base_letter(c: char) -> char {
    let u = c as u32;
    if (0xC0..=0x17F).contains(&u) {
        let b = LATIN_BASES.as_bytes()[(u - 0xC0) as usize];
        return if b == b'.' { c } else { b as char };
    }
    match c {
        // Romanian's comma-below letters (U+0218..=U+021B) decompose like their
        // cedilla twins in U+015E..=U+0163.
        'Ș' => 'S',
        'ș' => 's',
        'Ț' => 'T',
        'ț' => 't',
        'ά' => 'α',
        'Ά' => 'Α',
        'έ' => 'ε',
        'Έ' => 'Ε',
        'ή' => 'η',
        'Ή' => 'Η',
        'ί' | 'ϊ' | 'ΐ' => 'ι',
        'Ί' => 'Ι',
        'ό' => 'ο',
        'Ό' => 'Ο',
        'ύ' | 'ϋ' | 'ΰ' => 'υ',
        'Ύ' => 'Υ',
        'ώ' => 'ω',
        'Ώ' => 'Ω',
        'ё' => 'е',
        'Ё' => 'Е',
        'й' => 'и',
        'Й' => 'И',
        _ => c,
    }
}

/// mongod's delimiters: white space, dashes, quotation marks and punctuation (Unicode's
/// White_Space, Dash, Quotation_Mark, Terminal_Punctuation and Pattern_Syntax); the
/// underscore joins words.
fn is_delimiter(c: char, lang: Language) -> bool {
    if c.is_whitespace() {
        return true;
    }
    if c == '\'' {
        return lang.apostrophe_delimits();
    }
    if c.is_ascii() {
        return c.is_ascii_punctuation() && c != '_';
    }
    matches!(c as u32,
        0x00A1 | 0x00A7 | 0x00AB | 0x00B6 | 0x00B7 | 0x00BB | 0x00BF | 0x00D7 | 0x00F7
        | 0x037E | 0x0387 | 0x055C..=0x055F | 0x0589 | 0x05BE | 0x060C | 0x061B | 0x061F
        | 0x06D4 | 0x2010..=0x2027 | 0x2030..=0x205E | 0x2190..=0x245F | 0x2500..=0x2775
        | 0x2794..=0x2BFF | 0x2E00..=0x2E7F | 0x3001..=0x3003 | 0x3008..=0x3020 | 0x3030
        | 0xFE50..=0xFE6B | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40
        | 0xFF5B..=0xFF65)
}

/// mongod's English stop words (sorted, for binary search).
const ENGLISH_STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren't",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can't",
    "cannot",
    "could",
    "couldn't",
    "did",
    "didn't",
    "do",
    "does",
    "doesn't",
    "doing",
    "don't",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn't",
    "has",
    "hasn't",
    "have",
    "haven't",
    "having",
    "he",
    "he'd",
    "he'll",
    "he's",
    "her",
    "here",
    "here's",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "how's",
    "i",
    "i'd",
    "i'll",
    "i'm",
    "i've",
    "if",
    "in",
    "into",
    "is",
    "isn't",
    "it",
    "it's",
    "its",
    "itself",
    "let's",
    "me",
    "more",
    "most",
    "mustn't",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shan't",
    "she",
    "she'd",
    "she'll",
    "she's",
    "should",
    "shouldn't",
    "so",
    "some",
    "such",
    "than",
    "that",
    "that's",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "there's",
    "these",
    "they",
    "they'd",
    "they'll",
    "they're",
    "they've",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "wasn't",
    "we",
    "we'd",
    "we'll",
    "we're",
    "we've",
    "were",
    "weren't",
    "what",
    "what's",
    "when",
    "when's",
    "where",
    "where's",
    "which",
    "while",
    "who",
    "who's",
    "whom",
    "why",
    "why's",
    "with",
    "won't",
    "would",
    "wouldn't",
    "you",
    "you'd",
    "you'll",
    "you're",
    "you've",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn en(s: &str) -> Vec<String> {
        tokenize(s, Language::english(), TokenOptions::default())
    }

    #[test]
    fn stop_words_are_sorted() {
        let mut sorted = ENGLISH_STOP_WORDS.to_vec();
        sorted.sort();
        assert_eq!(sorted, ENGLISH_STOP_WORDS);
        assert_eq!(ENGLISH_STOP_WORDS.len(), 174);
    }

    #[test]
    fn english_words_are_stemmed_and_filtered() {
        assert_eq!(en("spam eggs and spam"), vec!["spam", "egg", "spam"]);
        assert_eq!(
            en("Dublin New-York Toronto"),
            vec!["dublin", "new", "york", "toronto"]
        );
        assert_eq!(en("Salad, Soups, Cakes"), vec!["salad", "soup", "cake"]);
        assert_eq!(en("Baseball"), vec!["basebal"]);
        assert_eq!(en("I don't know"), vec!["know"]);
        assert_eq!(en("snake_case"), vec!["snake_cas"]);
        assert!(en("  ...  ").is_empty());
    }

    #[test]
    fn diacritics_and_case() {
        assert_eq!(en("Café"), vec!["cafe"]);
        let sensitive = TokenOptions {
            case_sensitive: true,
            diacritic_sensitive: true,
        };
        assert_eq!(
            tokenize("Café", Language::english(), sensitive),
            vec!["Café"]
        );
        assert_eq!(
            fold("Crème BRÛLÉE", TokenOptions::default()),
            "creme brulee"
        );
        assert_eq!(strip_diacritics("Ñandú Łódź e\u{301}"), "Nandu Łodz e");
        assert_eq!(LATIN_BASES.len(), 0x180 - 0xC0);
    }

    #[test]
    fn languages() {
        assert_eq!(Language::parse("ES").unwrap().name(), "spanish");
        assert!(Language::parse("klingon").is_none());
        let none = Language::parse("none").unwrap();
        assert_eq!(
            tokenize("the running dogs", none, TokenOptions::default()),
            vec!["the", "running", "dogs"]
        );
        // The apostrophe splits "l'école"; "l" is a French stop word (and so is "été").
        let fr = Language::parse("french").unwrap();
        assert_eq!(
            tokenize("l'école", fr, TokenOptions::default()),
            vec!["ecol"]
        );
        assert!(tokenize("l'été", fr, TokenOptions::default()).is_empty());
    }

    /// Per language: a sentence, its terms (stop words gone, the rest stemmed), and
    /// another form of one of its words that stems to the same term.
    const SENTENCES: &[(&str, &str, &[&str], &str)] = &[
        (
            "danish",
            "Hundene løber i parken og de leger med børnene",
            &["hund", "løb", "park", "leg", "børn"],
            "hunden",
        ),
        (
            "dutch",
            "De kinderen lopen naar het huis van hun grootouders",
            &["kinder", "lop", "huis", "grootouder"],
            "grootouder",
        ),
        (
            "english",
            "The children were running in the parks",
            &["children", "run", "park"],
            "runs",
        ),
        (
            "finnish",
            "Kissat juoksevat talossa ja ne ovat iloisia",
            &["kis", "juoksev", "talo", "ilois"],
            "kissa",
        ),
        (
            "french",
            "Les enfants mangeaient des pommes dans l'école",
            &["enfant", "mang", "pomm", "ecol"],
            "mange",
        ),
        (
            "german",
            "Die Kinder spielten mit den Hunden und sie lachten",
            &["kind", "spielt", "hund", "lacht"],
            "Hund",
        ),
        (
            "hungarian",
            "A gyerekek a házakban játszanak és nem az utcán",
            &["gyerek", "haz", "jatsz", "utc"],
            "házak",
        ),
        (
            "italian",
            "I bambini mangiavano le mele nella scuola",
            &["bambin", "mang", "mel", "scuol"],
            "bambino",
        ),
        (
            "norwegian",
            "Hundene løper i parken og de leker med barna",
            &["hund", "løp", "park", "lek", "barn"],
            "barnet",
        ),
        (
            "portuguese",
            "As crianças comiam as maçãs na escola",
            &["crianc", "com", "macas", "escol"],
            "escolas",
        ),
        (
            "romanian",
            "Copiii mâncau merele în grădina școlii și noi",
            &["copii", "manc", "mer", "gradin", "scol"],
            "grădini",
        ),
        (
            "russian",
            "Дети играли с собаками в парке и они смеялись",
            &["дет", "игра", "собак", "парк", "смея"],
            "собака",
        ),
        (
            "spanish",
            "Los niños comían las manzanas en la escuela",
            &["nin", "com", "manzan", "escuel"],
            "manzana",
        ),
        (
            "swedish",
            "Hundarna springer i parken och de leker med barnen",
            &["hund", "spring", "park", "lek", "barn"],
            "springa",
        ),
        (
            "turkish",
            "Çocuklar bahçede oynuyorlar ve bu çok güzel",
            &["cocuk", "bahce", "oynuyor", "guzel"],
            "bahçe",
        ),
    ];

    #[test]
    fn every_language_stems_and_drops_its_stop_words() {
        for (name, sentence, terms, other_form) in SENTENCES {
            let lang = Language::parse(name).unwrap();
            let got = tokenize(sentence, lang, TokenOptions::default());
            assert_eq!(&got, terms, "{name}");
            let other = tokenize(other_form, lang, TokenOptions::default());
            assert_eq!(other.len(), 1, "{name}");
            assert!(terms.contains(&other[0].as_str()), "{name}: {other:?}");
            // Without the language's stop words and stemmer, the sentence keeps every word.
            let none = Language::parse("none").unwrap();
            let all = tokenize(sentence, none, TokenOptions::default());
            assert!(all.len() > terms.len(), "{name}");
        }
    }
}

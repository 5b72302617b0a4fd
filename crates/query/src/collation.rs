//! Collations: locale-aware string comparison, as mongod's `collation` option gives it.
//!
//! A collation document (`{locale: "en_US", strength: 2, ...}`) is parsed and checked
//! the way mongod's IDL parser and ICU collator factory check it (same codes and
//! messages), then turned into an ICU4X collator. `{locale: "simple"}` is the binary
//! comparison, represented by no collator at all (`None`), so the common case keeps the
//! plain byte comparison. Only string (and symbol) values are compared through the
//! collator; field names, and everything else, compare as without a collation.
//!
//! Collators are cached by their specification: an operation that names a collation
//! (or a collection or index that has one) does not rebuild it.

use crate::args;
use crate::error::{codes, Error, Result};
use crate::render::doc_to_string;
use bson::{Bson, Document};
use icu_collator::options::{AlternateHandling, CaseLevel, CollatorOptions, MaxVariable, Strength};
use icu_collator::preferences::{CollationCaseFirst, CollationNumericOrdering};
use icu_collator::provider::{
    Baked, CollationDiacriticsV1, CollationJamoV1, CollationMetadata, CollationMetadataV1,
    CollationReorderingV1, CollationRootV1, CollationSpecialPrimariesV1, CollationTailoringV1,
};
use icu_collator::CollatorPreferences;
use icu_normalizer::provider::{NormalizerNfdDataV1, NormalizerNfdTablesV1};
use icu_provider::prelude::*;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The ICU version mongod 8.0 reports in a collation's `version` (and accepts back).
pub const ICU_VERSION: &str = "57.1";

pub use crate::error::codes::INCOMPATIBLE_COLLATION_VERSION;

/// The locales mongod accepts (its ICU locale IDs), with the BCP 47 tag ICU4X reads.
/// `None`: a collation variant ICU4X ships no data for; it is refused rather than
/// silently replaced by the locale's standard collation.
const LOCALES: &[(&str, Option<&str>)] = &[
    ("af", Some("af")),
    ("am", Some("am")),
    ("ar", Some("ar")),
    ("ar@collation=compat", Some("ar-u-co-compat")),
    ("as", Some("as")),
    ("az", Some("az")),
    ("az@collation=search", None),
    ("be", Some("be")),
    ("bg", Some("bg")),
    ("bn", Some("bn")),
    ("bn@collation=traditional", Some("bn-u-co-trad")),
    ("bo", Some("bo")),
    ("bs", Some("bs")),
    ("bs@collation=search", None),
    ("bs_Cyrl", Some("bs-Cyrl")),
    ("ca", Some("ca")),
    ("ca@collation=search", None),
    ("chr", Some("chr")),
    ("cs", Some("cs")),
    ("cs@collation=search", None),
    ("cy", Some("cy")),
    ("da", Some("da")),
    ("da@collation=search", None),
    ("de", Some("de")),
    ("de@collation=phonebook", Some("de-u-co-phonebk")),
    ("de@collation=search", None),
    ("de_AT", Some("de-AT")),
    ("de_AT@collation=phonebook", Some("de-AT-u-co-phonebk")),
    ("dsb", Some("dsb")),
    ("dz", Some("dz")),
    ("ee", Some("ee")),
    ("el", Some("el")),
    ("en", Some("en")),
    ("en_US", Some("en-US")),
    ("en_US_POSIX", Some("en-US-posix")),
    ("eo", Some("eo")),
    ("es", Some("es")),
    ("es@collation=search", None),
    ("es@collation=traditional", Some("es-u-co-trad")),
    ("et", Some("et")),
    ("fa", Some("fa")),
    ("fa_AF", Some("fa-AF")),
    ("fi", Some("fi")),
    ("fi@collation=traditional", Some("fi-u-co-trad")),
    ("fi_FI", Some("fi-FI")),
    ("fi_FI@collation=search", None),
    ("fi_FI@collation=traditional", Some("fi-FI-u-co-trad")),
    ("fil", Some("fil")),
    ("fo", Some("fo")),
    ("fr", Some("fr")),
    ("fr_CA", Some("fr-CA")),
    ("ga", Some("ga")),
    ("gl", Some("gl")),
    ("gl@collation=search", None),
    ("gu", Some("gu")),
    ("ha", Some("ha")),
    ("haw", Some("haw")),
    ("he", Some("he")),
    ("he@collation=search", None),
    ("hi", Some("hi")),
    ("hr", Some("hr")),
    ("hr@collation=search", None),
    ("hsb", Some("hsb")),
    ("hu", Some("hu")),
    ("hy", Some("hy")),
    ("id", Some("id")),
    ("ig", Some("ig")),
    ("is", Some("is")),
    ("is@collation=search", None),
    ("it", Some("it")),
    ("ja", Some("ja")),
    ("ja@collation=unihan", Some("ja-u-co-unihan")),
    ("ka", Some("ka")),
    ("kk", Some("kk")),
    ("kl", Some("kl")),
    ("kl@collation=search", None),
    ("km", Some("km")),
    ("kn", Some("kn")),
    ("kn@collation=traditional", Some("kn-u-co-trad")),
    ("ko", Some("ko")),
    ("ko@collation=search", None),
    ("ko@collation=searchjl", None),
    ("ko@collation=unihan", Some("ko-u-co-unihan")),
    ("kok", Some("kok")),
    ("ky", Some("ky")),
    ("lb", Some("lb")),
    ("lkt", Some("lkt")),
    ("ln", Some("ln")),
    ("ln@collation=phonetic", None),
    ("lo", Some("lo")),
    ("lt", Some("lt")),
    ("lv", Some("lv")),
    ("lv@collation=search", None),
    ("mk", Some("mk")),
    ("ml", Some("ml")),
    ("mn", Some("mn")),
    ("mr", Some("mr")),
    ("ms", Some("ms")),
    ("mt", Some("mt")),
    ("my", Some("my")),
    ("nb", Some("nb")),
    ("nb@collation=search", None),
    ("ne", Some("ne")),
    ("nl", Some("nl")),
    ("nn", Some("nn")),
    ("nn@collation=search", None),
    ("om", Some("om")),
    ("or", Some("or")),
    ("pa", Some("pa")),
    ("pl", Some("pl")),
    ("pl@collation=search", None),
    ("ps", Some("ps")),
    ("pt", Some("pt")),
    ("ro", Some("ro")),
    ("ro@collation=search", None),
    ("ru", Some("ru")),
    ("se", Some("se")),
    ("se@collation=search", None),
    ("si", Some("si")),
    ("si@collation=dictionary", Some("si-u-co-dict")),
    ("sk", Some("sk")),
    ("sk@collation=search", None),
    ("sl", Some("sl")),
    ("smn", Some("smn")),
    ("smn@collation=search", None),
    ("sq", Some("sq")),
    ("sr", Some("sr")),
    ("sr@collation=search", None),
    ("sr_Latn", Some("sr-Latn")),
    ("sr_Latn@collation=search", None),
    ("sv", Some("sv")),
    ("sv@collation=search", None),
    ("sw", Some("sw")),
    ("ta", Some("ta")),
    ("te", Some("te")),
    ("th", Some("th")),
    ("to", Some("to")),
    ("tr", Some("tr")),
    ("tr@collation=search", None),
    ("ug", Some("ug")),
    ("uk", Some("uk")),
    ("ur", Some("ur")),
    ("vi", Some("vi")),
    ("vi@collation=traditional", Some("vi-u-co-trad")),
    ("wae", Some("wae")),
    ("yi", Some("yi")),
    ("yi@collation=search", None),
    ("yo", Some("yo")),
    ("zh", Some("zh")),
    ("zh@collation=big5han", None),
    ("zh@collation=gb2312han", None),
    ("zh@collation=unihan", Some("zh-u-co-unihan")),
    ("zh@collation=zhuyin", Some("zh-u-co-zhuyin")),
    ("zh_Hant", Some("zh-Hant")),
    ("zh_Hant@collation=stroke", Some("zh-Hant-u-co-stroke")),
    ("zu", Some("zu")),
];

/// Locales whose ICU tailoring turns normalization on (`[normalization on]`), so mongod
/// reports `normalization: true` for them by default. ICU4X always normalizes, so this
/// only decides what the filled-in specification says.
const NORMALIZING_LOCALES: &[&str] = &[
    "as",
    "bn",
    "bn@collation=traditional",
    "gu",
    "hi",
    "km",
    "my",
    "or",
    "si",
    "si@collation=dictionary",
    "ta",
    "te",
    "th",
    "vi",
    "vi@collation=traditional",
];

/// Canadian French sorts secondary differences (accents) from the end of the string.
fn backwards_by_default(locale: &str) -> bool {
    locale == "fr_CA"
}

/// A checked collation: the ICU4X collator and the specification with every option
/// filled in (as `listIndexes` and `listCollections` report it).
pub struct Collator {
    spec: Document,
    icu: icu_collator::Collator,
}

impl std::fmt::Debug for Collator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Collator({})", self.spec)
    }
}

/// Two collators are the same collation when their filled-in specifications are equal.
impl PartialEq for Collator {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl Collator {
    /// Parses a collation document: `None` for `{locale: "simple"}` (binary comparison).
    pub fn parse(spec: &Document) -> Result<Option<Arc<Collator>>> {
        let key = bson::to_vec(spec).unwrap_or_default();
        if let Some(c) = cache().lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let built = build(spec)?.map(Arc::new);
        if let Ok(mut m) = cache().lock() {
            if m.len() >= CACHE_LIMIT {
                m.clear();
            }
            m.insert(key, built.clone());
        }
        Ok(built)
    }

    /// The specification with every option filled in.
    pub fn spec(&self) -> &Document {
        &self.spec
    }

    pub fn locale(&self) -> &str {
        self.spec.get_str("locale").unwrap_or_default()
    }

    pub fn compare(&self, a: &str, b: &str) -> Ordering {
        self.icu.as_borrowed().compare(a, b)
    }

    /// The comparison key of a string: two keys compare bytewise as their strings compare
    /// under this collation (index entries and group keys are made of them).
    pub fn sort_key(&self, s: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(s.len() * 2 + 4);
        let Ok(()) = self.icu.as_borrowed().write_sort_key_to(s, &mut key);
        key
    }
}

/// Whether two (optional) collators are the same collation; `None` is the simple one.
pub fn same_collation(a: Option<&Collator>, b: Option<&Collator>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => std::ptr::eq(x, y) || x == y,
        _ => false,
    }
}

/// Whether a value is or holds a string (the values a collation can change the
/// comparison of).
pub fn contains_strings(v: &Bson) -> bool {
    match v {
        Bson::String(_) | Bson::Symbol(_) => true,
        Bson::Document(d) => d.values().any(contains_strings),
        Bson::Array(a) => a.iter().any(contains_strings),
        _ => false,
    }
}

const CACHE_LIMIT: usize = 256;

type Cache = Mutex<HashMap<Vec<u8>, Option<Arc<Collator>>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

// ---------------------------------------------------------------- parsing

#[derive(Debug, Clone, Copy, PartialEq)]
enum CaseFirst {
    Upper,
    Lower,
    Off,
}

/// The options as given (None: the locale's default).
#[derive(Debug, Default)]
struct Requested {
    locale: Option<String>,
    case_level: Option<bool>,
    case_first: Option<CaseFirst>,
    strength: Option<i32>,
    numeric_ordering: Option<bool>,
    alternate: Option<AlternateHandling>,
    max_variable: Option<MaxVariable>,
    normalization: Option<bool>,
    backwards: Option<bool>,
    version: Option<String>,
}

fn bad_enum(field: &str, value: &str) -> Error {
    Error::bad_value(format!(
        "Enumeration value '{value}' for field 'collation.{field}' is not a valid value."
    ))
}

fn bool_field(field: &str, v: &Bson) -> Result<bool> {
    args::bool_value(&format!("collation.{field}"), v)
}

fn string_field<'a>(field: &str, v: &'a Bson) -> Result<&'a str> {
    args::str_value(&format!("collation.{field}"), v)
}

/// mongod's IDL parse of the `Collation` struct: types, enum values, strength bounds,
/// unknown fields, and the required `locale`.
fn parse_fields(spec: &Document) -> Result<Requested> {
    let mut r = Requested::default();
    for (k, v) in spec {
        match k.as_str() {
            "locale" => r.locale = Some(string_field(k, v)?.to_string()),
            "caseLevel" => r.case_level = Some(bool_field(k, v)?),
            "caseFirst" => {
                r.case_first = Some(match string_field(k, v)? {
                    "upper" => CaseFirst::Upper,
                    "lower" => CaseFirst::Lower,
                    "off" => CaseFirst::Off,
                    other => return Err(bad_enum(k, other)),
                })
            }
            "strength" => {
                let n = args::safe_int64("collation.strength", v)?;
                // safeNumberInt saturates, then the IDL validator bounds the value.
                let n = n.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                if n < 0 {
                    return Err(Error::new(
                        51024,
                        format!("BSON field 'strength' value must be >= 0, actual value '{n}'"),
                    ));
                }
                if n > 5 {
                    return Err(Error::new(
                        51024,
                        format!("BSON field 'strength' value must be <= 5, actual value '{n}'"),
                    ));
                }
                if n == 0 {
                    return Err(bad_enum("strength", "0"));
                }
                r.strength = Some(n);
            }
            "numericOrdering" => r.numeric_ordering = Some(bool_field(k, v)?),
            "alternate" => {
                r.alternate = Some(match string_field(k, v)? {
                    "non-ignorable" => AlternateHandling::NonIgnorable,
                    "shifted" => AlternateHandling::Shifted,
                    other => return Err(bad_enum(k, other)),
                })
            }
            "maxVariable" => {
                r.max_variable = Some(match string_field(k, v)? {
                    "punct" => MaxVariable::Punctuation,
                    "space" => MaxVariable::Space,
                    other => return Err(bad_enum(k, other)),
                })
            }
            "normalization" => r.normalization = Some(bool_field(k, v)?),
            "backwards" => {
                r.backwards = match v {
                    Bson::Null => None,
                    other => Some(bool_field(k, other)?),
                }
            }
            "version" => r.version = Some(string_field(k, v)?.to_string()),
            _ => {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field 'collation.{k}' is an unknown field."),
                ))
            }
        }
    }
    if r.locale.is_none() {
        return Err(Error::missing_field("collation.locale"));
    }
    Ok(r)
}

/// The BCP 47 tag of a supported locale, or mongod's error for an unknown one.
fn locale_tag(locale: &str, spec: &Document) -> Result<&'static str> {
    if let Some((_, tag)) = LOCALES.iter().find(|(id, _)| *id == locale) {
        return tag.ok_or_else(|| {
            Error::bad_value(format!(
                "Field 'locale' is invalid in: {}. The '{}' collation variant is not available on this server",
                doc_to_string(spec),
                locale.split_once('@').map(|(_, v)| v).unwrap_or(locale)
            ))
        });
    }
    let mut msg = format!("Field 'locale' is invalid in: {}", doc_to_string(spec));
    // As ICU's canonical name in mongod's message: a spelling that differs only in case
    // or separators names the locale the application probably meant.
    let folded = locale.replace('-', "_").to_ascii_lowercase();
    if let Some((id, _)) = LOCALES
        .iter()
        .find(|(id, _)| id.to_ascii_lowercase() == folded)
    {
        msg.push_str(&format!(". Did you mean '{id}'?"));
    }
    Err(Error::bad_value(msg))
}

fn build(spec: &Document) -> Result<Option<Collator>> {
    let r = parse_fields(spec)?;
    let locale = r.locale.clone().unwrap_or_default();
    if locale.contains('\0') {
        return Err(Error::bad_value(format!(
            "Field 'locale' cannot contain null byte. Collation spec: {}",
            doc_to_string(spec)
        )));
    }
    if locale == "simple" {
        return Ok(None);
    }
    if locale.is_empty() {
        return Err(Error::bad_value(format!(
            "Field 'locale' cannot be the empty string in: {}",
            doc_to_string(spec)
        )));
    }
    let tag = locale_tag(&locale, spec)?;
    let parsed: icu_locale_core::Locale = tag
        .parse()
        .map_err(|e| Error::internal(format!("bad locale tag {tag}: {e}")))?;
    let mut prefs = CollatorPreferences::from(&parsed);
    if let Some(cf) = r.case_first {
        prefs.case_first = Some(match cf {
            CaseFirst::Upper => CollationCaseFirst::Upper,
            CaseFirst::Lower => CollationCaseFirst::Lower,
            CaseFirst::Off => CollationCaseFirst::False,
        });
    }
    if let Some(n) = r.numeric_ordering {
        prefs.numeric_ordering = Some(if n {
            CollationNumericOrdering::True
        } else {
            CollationNumericOrdering::False
        });
    }
    let mut options = CollatorOptions::default();
    options.strength = r.strength.map(|s| match s {
        1 => Strength::Primary,
        2 => Strength::Secondary,
        3 => Strength::Tertiary,
        4 => Strength::Quaternary,
        _ => Strength::Identical,
    });
    options.alternate_handling = r.alternate;
    options.max_variable = r.max_variable;
    options.case_level = r
        .case_level
        .map(|b| if b { CaseLevel::On } else { CaseLevel::Off });
    let backwards = r.backwards.unwrap_or_else(|| backwards_by_default(&locale));
    let icu = if backwards == backwards_by_default(&locale) {
        icu_collator::Collator::try_new(prefs, options).map(|c| c.static_to_owned())
    } else {
        icu_collator::Collator::try_new_unstable(&SecondLevel { backwards }, prefs, options)
    }
    .map_err(|e| {
        Error::new(
            codes::OPERATION_FAILED,
            format!(
                "Failed to create collator: {e}. Collation spec: {}",
                doc_to_string(spec)
            ),
        )
    })?;
    let resolved = icu.as_borrowed().resolved_options();
    let strength = match resolved.strength {
        Strength::Primary => 1,
        Strength::Secondary => 2,
        Strength::Tertiary => 3,
        Strength::Quaternary => 4,
        _ => 5,
    };
    let case_first = match resolved.case_first {
        CollationCaseFirst::Upper => CaseFirst::Upper,
        CollationCaseFirst::Lower => CaseFirst::Lower,
        _ => CaseFirst::Off,
    };
    let case_level = resolved.case_level == CaseLevel::On;
    let alternate = match resolved.alternate_handling {
        AlternateHandling::Shifted => "shifted",
        _ => "non-ignorable",
    };
    let max_variable = match resolved.max_variable {
        MaxVariable::Space => "space",
        _ => "punct",
    };
    if let Some(v) = &r.version {
        if v != ICU_VERSION {
            return Err(Error::new(
                INCOMPATIBLE_COLLATION_VERSION,
                format!(
                    "Requested collation version {v} but the only available collator version was {ICU_VERSION}. Requested collation spec: {}",
                    doc_to_string(spec)
                ),
            ));
        }
    }
    // mongod's validateCollationSpec: option combinations that have no effect.
    if backwards && strength == 1 {
        return Err(Error::bad_value(format!(
            "'backwards' is invalid with 'strength' of 1 in: {}",
            doc_to_string(spec)
        )));
    }
    if case_first != CaseFirst::Off && !case_level && strength <= 2 {
        return Err(Error::bad_value(format!(
            "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 in: {}",
            doc_to_string(spec)
        )));
    }
    let normalization = r
        .normalization
        .unwrap_or_else(|| NORMALIZING_LOCALES.contains(&locale.as_str()));
    let filled = bson::doc! {
        "locale": locale,
        "caseLevel": case_level,
        "caseFirst": match case_first {
            CaseFirst::Upper => "upper",
            CaseFirst::Lower => "lower",
            CaseFirst::Off => "off",
        },
        "strength": strength,
        "numericOrdering": resolved.numeric == CollationNumericOrdering::True,
        "alternate": alternate,
        "maxVariable": max_variable,
        "normalization": normalization,
        "backwards": backwards,
        "version": ICU_VERSION,
    };
    Ok(Some(Collator { spec: filled, icu }))
}

/// The compiled CLDR data with the locale's "backwards secondary level" setting
/// overridden: ICU4X takes that setting from the locale's metadata only (it is on for
/// Canadian French), so mongod's `backwards` option is applied there.
struct SecondLevel {
    backwards: bool,
}

/// Bit of `CollationMetadata::bits` that turns the backwards secondary level on
/// (ICU4X 2.4's layout; the dependency is pinned to 2.4.x for this).
const METADATA_BACKWARD_SECOND_LEVEL: u32 = 1 << 7;

impl DataProvider<CollationMetadataV1> for SecondLevel {
    fn load(
        &self,
        req: DataRequest,
    ) -> std::result::Result<DataResponse<CollationMetadataV1>, DataError> {
        let mut response = DataProvider::<CollationMetadataV1>::load(&Baked, req)?;
        let mut bits = response.payload.get().bits;
        if self.backwards {
            bits |= METADATA_BACKWARD_SECOND_LEVEL;
        } else {
            bits &= !METADATA_BACKWARD_SECOND_LEVEL;
        }
        response.payload = DataPayload::from_owned(CollationMetadata { bits });
        Ok(response)
    }
}

macro_rules! delegate_to_baked {
    ($($marker:ty => $provider:expr),* $(,)?) => {
        $(
            impl DataProvider<$marker> for SecondLevel {
                fn load(&self, req: DataRequest) -> std::result::Result<DataResponse<$marker>, DataError> {
                    DataProvider::<$marker>::load(&$provider, req)
                }
            }
        )*
    };
}

delegate_to_baked!(
    CollationSpecialPrimariesV1 => Baked,
    CollationRootV1 => Baked,
    CollationTailoringV1 => Baked,
    CollationDiacriticsV1 => Baked,
    CollationJamoV1 => Baked,
    CollationReorderingV1 => Baked,
    NormalizerNfdDataV1 => icu_normalizer::provider::Baked,
    NormalizerNfdTablesV1 => icu_normalizer::provider::Baked,
);

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn coll(spec: Document) -> Arc<Collator> {
        Collator::parse(&spec)
            .unwrap_or_else(|e| panic!("{spec}: {e}"))
            .expect("not simple")
    }

    fn err(spec: Document) -> Error {
        match Collator::parse(&spec) {
            Ok(c) => panic!("{spec} should fail, got {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn simple_is_no_collator() {
        assert!(Collator::parse(&doc! {"locale": "simple"})
            .unwrap()
            .is_none());
    }

    #[test]
    fn fills_in_defaults_as_mongod_reports_them() {
        assert_eq!(
            coll(doc! {"locale": "fr"}).spec(),
            &doc! {"locale": "fr", "caseLevel": false, "caseFirst": "off", "strength": 3,
            "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
            "normalization": false, "backwards": false, "version": "57.1"}
        );
        let da = coll(doc! {"locale": "da"});
        assert_eq!(da.spec().get_str("caseFirst").unwrap(), "upper");
        let th = coll(doc! {"locale": "th"});
        assert_eq!(th.spec().get_str("alternate").unwrap(), "shifted");
        assert!(th.spec().get_bool("normalization").unwrap());
        assert!(coll(doc! {"locale": "fr_CA"})
            .spec()
            .get_bool("backwards")
            .unwrap());
        let given = coll(
            doc! {"locale": "en_US", "strength": 2, "numericOrdering": true,
            "alternate": "shifted", "maxVariable": "space", "caseLevel": true},
        );
        assert_eq!(given.spec().get_i32("strength").unwrap(), 2);
        assert!(given.spec().get_bool("numericOrdering").unwrap());
        assert_eq!(given.spec().get_str("alternate").unwrap(), "shifted");
        assert_eq!(given.spec().get_str("maxVariable").unwrap(), "space");
        assert!(given.spec().get_bool("caseLevel").unwrap());
    }

    #[test]
    fn strength_decides_what_differences_count() {
        let s1 = coll(doc! {"locale": "en", "strength": 1});
        let s2 = coll(doc! {"locale": "en", "strength": 2});
        let s3 = coll(doc! {"locale": "en"});
        assert_eq!(s1.compare("resume", "Résumé"), Ordering::Equal);
        assert_eq!(s2.compare("ping", "PING"), Ordering::Equal);
        assert_ne!(s2.compare("resume", "résumé"), Ordering::Equal);
        assert_ne!(s3.compare("ping", "PING"), Ordering::Equal);
        assert_eq!(s3.compare("a", "B"), Ordering::Less);
        assert_eq!(s3.compare("B", "a"), Ordering::Greater);
    }

    #[test]
    fn numeric_ordering_and_alternate() {
        let n = coll(doc! {"locale": "en", "numericOrdering": true});
        assert_eq!(n.compare("a10", "a9"), Ordering::Greater);
        assert_eq!(
            coll(doc! {"locale": "en"}).compare("a10", "a9"),
            Ordering::Less
        );
        let shifted = coll(doc! {"locale": "en", "alternate": "shifted", "strength": 1});
        assert_eq!(shifted.compare("a-b", "ab"), Ordering::Equal);
    }

    #[test]
    fn case_first_and_backwards() {
        let upper = coll(doc! {"locale": "en", "caseFirst": "upper"});
        assert_eq!(upper.compare("A", "a"), Ordering::Less);
        let lower = coll(doc! {"locale": "en", "caseFirst": "lower"});
        assert_eq!(lower.compare("a", "A"), Ordering::Less);
        // French accent ordering: backwards compares the last accent difference first.
        let fwd = coll(doc! {"locale": "fr"});
        let bwd = coll(doc! {"locale": "fr", "backwards": true});
        assert_eq!(fwd.compare("coté", "côte"), Ordering::Less);
        assert_eq!(bwd.compare("coté", "côte"), Ordering::Greater);
        assert!(bwd.spec().get_bool("backwards").unwrap());
        let ca_off = coll(doc! {"locale": "fr_CA", "backwards": false});
        assert_eq!(ca_off.compare("coté", "côte"), Ordering::Less);
    }

    #[test]
    fn sort_keys_order_as_comparisons() {
        let c = coll(doc! {"locale": "en", "strength": 2});
        assert_eq!(c.sort_key("PING"), c.sort_key("ping"));
        let words = ["b", "A", "a", "ä", "C", "aa", ""];
        for x in words {
            for y in words {
                assert_eq!(
                    c.sort_key(x).cmp(&c.sort_key(y)),
                    c.compare(x, y),
                    "{x} {y}"
                );
            }
        }
    }

    #[test]
    fn errors_match_mongod() {
        assert_eq!(err(doc! {"strength": 2}).code, 40414);
        assert_eq!(err(doc! {"locale": "en", "foo": 1}).code, 40415);
        let e = err(doc! {"locale": "xx"});
        assert_eq!(e.code, codes::BAD_VALUE);
        assert_eq!(
            e.message,
            "Field 'locale' is invalid in: { locale: \"xx\" }"
        );
        assert!(err(doc! {"locale": "en_us"})
            .message
            .ends_with("Did you mean 'en_US'?"));
        assert_eq!(err(doc! {"locale": ""}).code, codes::BAD_VALUE);
        assert_eq!(err(doc! {"locale": 1}).code, codes::TYPE_MISMATCH);
        assert_eq!(err(doc! {"locale": "en", "strength": 6}).code, 51024);
        assert_eq!(err(doc! {"locale": "en", "strength": -1}).code, 51024);
        assert_eq!(
            err(doc! {"locale": "en", "strength": 0}).code,
            codes::BAD_VALUE
        );
        assert_eq!(
            err(doc! {"locale": "en", "strength": "1"}).code,
            codes::TYPE_MISMATCH
        );
        assert_eq!(
            err(doc! {"locale": "en", "caseLevel": 1}).code,
            codes::TYPE_MISMATCH
        );
        assert_eq!(
            err(doc! {"locale": "en", "caseFirst": "x"}).code,
            codes::BAD_VALUE
        );
        assert_eq!(
            err(doc! {"locale": "en", "alternate": "x"}).code,
            codes::BAD_VALUE
        );
        assert_eq!(
            err(doc! {"locale": "en", "maxVariable": "x"}).code,
            codes::BAD_VALUE
        );
        assert_eq!(
            err(doc! {"locale": "en", "version": "1.0"}).code,
            INCOMPATIBLE_COLLATION_VERSION
        );
        assert!(Collator::parse(&doc! {"locale": "en", "version": "57.1"}).is_ok());
        assert_eq!(
            err(doc! {"locale": "en", "strength": 1, "backwards": true}).code,
            codes::BAD_VALUE
        );
        assert_eq!(
            err(doc! {"locale": "en", "strength": 2, "caseFirst": "upper"}).code,
            codes::BAD_VALUE
        );
        assert!(Collator::parse(
            &doc! {"locale": "en", "strength": 2, "caseFirst": "upper", "caseLevel": true}
        )
        .is_ok());
        assert_eq!(
            err(doc! {"locale": "de@collation=search"}).code,
            codes::BAD_VALUE
        );
    }

    #[test]
    fn every_listed_locale_builds() {
        for (id, tag) in LOCALES {
            if tag.is_some() {
                coll(doc! {"locale": *id});
            }
        }
    }

    #[test]
    fn same_collation_compares_specifications() {
        let a = coll(doc! {"locale": "en", "strength": 2});
        let b = coll(doc! {"locale": "en", "strength": 2, "caseLevel": false});
        let c = coll(doc! {"locale": "en"});
        assert!(same_collation(Some(&a), Some(&b)));
        assert!(!same_collation(Some(&a), Some(&c)));
        assert!(!same_collation(Some(&a), None));
        assert!(same_collation(None, None));
    }

    #[test]
    fn finds_strings_inside_values() {
        assert!(contains_strings(&Bson::String("a".into())));
        assert!(contains_strings(&bson::bson!({"a": [1, {"b": "x"}]})));
        assert!(!contains_strings(&bson::bson!({"a": [1, {"b": 2}]})));
    }
}

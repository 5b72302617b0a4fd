//! `$jsonSchema` (in queries and collection validators) as mongod implements it: JSON
//! Schema draft 4 with `bsonType`, no `$ref`, and mongod's reading of each keyword.
//!
//! mongod translates a schema into match expressions; this module keeps the schema as a
//! tree and evaluates it directly, with the same meaning:
//! - a restriction keyword (`minimum`, `pattern`, `items`, `properties`, ...) applies only
//!   to values of its type and lets every other value pass;
//! - paths do not traverse arrays (a property is the field itself, never the fields of
//!   the documents of an array);
//! - the top-level schema describes the document itself: its scalar and array keywords
//!   always pass, a `type` without `object` matches nothing, and `enum` compares the
//!   whole document with the enum's objects.
//!
//! [`JsonSchema::explain`] builds the `details` mongod reports when a document fails a
//! `$jsonSchema` validator (`schemaRulesNotSatisfied`).

use super::regex::{compile_regex, regex_single, RegexPred};
use super::type_op::{parse_type_one, type_single};
use crate::compare::{as_f64, cmp_bson, is_number, type_name};
use crate::error::{codes, Error, Result};
use crate::expr::num::Dec;
use bson::{doc, Bson, Document};
use std::cmp::Ordering;

/// Keywords mongod rejects as not supported (rather than unknown).
const UNSUPPORTED: &[&str] = &["$ref", "$schema", "default", "definitions", "format", "id"];

/// Every keyword mongod's parser knows.
const KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "bsonType",
    "dependencies",
    "description",
    "encrypt",
    "encryptMetadata",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
];

/// JSON Schema's own type names, as BSON type aliases (`type`; `bsonType` takes any
/// BSON alias). "integer" is not supported by mongod.
const JSON_TYPES: &[(&str, &str)] = &[
    ("array", "array"),
    ("boolean", "bool"),
    ("null", "null"),
    ("number", "number"),
    ("object", "object"),
    ("string", "string"),
];

/// The BSON type code of documents (`$type` numbering).
const OBJECT_TYPE: i32 = 3;

fn type_mismatch(msg: impl Into<String>) -> Error {
    Error::new(codes::TYPE_MISMATCH, msg)
}

fn failed_to_parse(msg: impl Into<String>) -> Error {
    Error::failed_to_parse(msg)
}

fn keyword_msg(keyword: &str, rest: &str) -> String {
    format!("$jsonSchema keyword '{keyword}' {rest}")
}

/// A parsed `$jsonSchema`.
#[derive(Debug, Clone)]
pub struct JsonSchema {
    root: Schema,
}

/// `type` or `bsonType`.
#[derive(Debug, Clone)]
struct TypeKw {
    keyword: &'static str,
    spec: Bson,
    codes: Vec<i32>,
}

#[derive(Debug, Clone)]
enum Items {
    /// `items: {schema}`: every element.
    All(Box<Schema>),
    /// `items: [schemas]`: the element at each position.
    Tuple(Vec<Schema>),
}

#[derive(Debug, Clone)]
enum Additional {
    Allowed(bool),
    Schema(Box<Schema>),
}

#[derive(Debug, Clone)]
enum Dependency {
    Properties(Vec<String>),
    Schema(Box<Schema>),
}

/// A bound (`minimum`/`maximum`) and whether it is exclusive.
#[derive(Debug, Clone)]
struct Bound {
    value: Bson,
    exclusive: Option<bool>,
}

#[derive(Debug, Clone, Default)]
struct Schema {
    title: Option<String>,
    description: Option<String>,
    types: Option<TypeKw>,
    minimum: Option<Bound>,
    maximum: Option<Bound>,
    multiple_of: Option<Bson>,
    pattern: Option<(String, RegexPred)>,
    min_length: Option<(Bson, i64)>,
    max_length: Option<(Bson, i64)>,
    min_items: Option<(Bson, i64)>,
    max_items: Option<(Bson, i64)>,
    unique_items: bool,
    items: Option<Items>,
    additional_items: Option<Additional>,
    required: Vec<String>,
    properties: Vec<(String, Schema)>,
    pattern_properties: Vec<(String, RegexPred, Schema)>,
    additional_properties: Option<Additional>,
    /// The `additionalProperties` argument as given.
    additional_properties_spec: Option<Bson>,
    min_properties: Option<(Bson, i64)>,
    max_properties: Option<(Bson, i64)>,
    dependencies: Vec<(String, Dependency)>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
    enum_values: Option<Vec<Bson>>,
}

impl JsonSchema {
    /// Parses the argument of `$jsonSchema`.
    pub fn parse(spec: &Bson) -> Result<JsonSchema> {
        let Bson::Document(d) = spec else {
            return Err(type_mismatch("$jsonSchema must be an object"));
        };
        Ok(JsonSchema {
            root: Schema::parse(d)?,
        })
    }

    /// Whether `doc` satisfies the schema.
    pub fn matches(&self, doc: &Document) -> bool {
        self.root.matches_root(doc)
    }

    /// mongod's `details` for a document that failed the schema:
    /// `{operatorName: "$jsonSchema", schemaRulesNotSatisfied: [...]}`.
    pub fn explain(&self, doc: &Document) -> Document {
        let mut out = doc! {"operatorName": "$jsonSchema"};
        self.root.annotate(&mut out);
        let rules = self.root.failures(&Bson::Document(doc.clone()), true);
        out.insert("schemaRulesNotSatisfied", rules);
        out
    }
}

// ------------------------------------------------------------------------- parsing

/// A non-negative integral count (`minItems`, `maxLength`, ...), checked as mongod's
/// `parseIntegerElementToNonNegativeLong` checks it.
fn parse_count(keyword: &str, v: &Bson) -> Result<(Bson, i64)> {
    let shown = crate::render::elem_to_string(keyword, v);
    if !is_number(v) {
        return Err(failed_to_parse(format!("Expected a number in: {shown}")));
    }
    let Some(n) = crate::expr::num::as_exact_i64(v) else {
        return Err(failed_to_parse(format!("Expected an integer: {shown}")));
    };
    if n < 0 {
        return Err(failed_to_parse(format!(
            "Expected a positive number in: {shown}"
        )));
    }
    Ok((v.clone(), n))
}

fn parse_types(keyword: &'static str, v: &Bson) -> Result<TypeKw> {
    let names: Vec<&str> = match v {
        Bson::String(s) => vec![s.as_str()],
        Bson::Array(items) => {
            let mut names = Vec::new();
            for item in items {
                let Bson::String(s) = item else {
                    return Err(type_mismatch(keyword_msg(
                        keyword,
                        "array elements must be strings",
                    )));
                };
                if names.contains(&s.as_str()) && s != "integer" {
                    return Err(failed_to_parse(keyword_msg(
                        keyword,
                        &format!("has duplicate value: {s}"),
                    )));
                }
                names.push(s.as_str());
            }
            names
        }
        _ => {
            return Err(type_mismatch(keyword_msg(
                keyword,
                "must be either a string or an array of strings",
            )))
        }
    };
    let mut codes = Vec::new();
    for name in names {
        if name == "integer" {
            return Err(failed_to_parse(
                "$jsonSchema type 'integer' is not currently supported.",
            ));
        }
        let alias = if keyword == "type" {
            JSON_TYPES
                .iter()
                .find(|(json, _)| *json == name)
                .map(|(_, bson)| *bson)
                .ok_or_else(|| Error::bad_value(format!("Unknown type name alias: {name}")))?
        } else {
            name
        };
        codes.push(parse_type_one(&Bson::String(alias.to_string()))?);
    }
    if codes.is_empty() {
        return Err(failed_to_parse(keyword_msg(
            keyword,
            "must name at least one type",
        )));
    }
    Ok(TypeKw {
        keyword,
        spec: v.clone(),
        codes,
    })
}

fn nested(keyword: &str, v: &Bson) -> Result<Schema> {
    match v {
        Bson::Document(d) => Schema::parse(d),
        other => Err(type_mismatch(keyword_msg(
            keyword,
            &format!(
                "must be an object, but found an element of type {}",
                type_name(other)
            ),
        ))),
    }
}

fn schema_list(keyword: &str, v: &Bson) -> Result<Vec<Schema>> {
    let Bson::Array(items) = v else {
        return Err(type_mismatch(keyword_msg(keyword, "must be an array")));
    };
    if items.is_empty() {
        return Err(Error::bad_value(keyword_msg(
            keyword,
            "must be a non-empty array",
        )));
    }
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => Schema::parse(d),
            other => Err(type_mismatch(keyword_msg(
                keyword,
                &format!(
                    "must be an array of objects, but found an element of type {}",
                    type_name(other)
                ),
            ))),
        })
        .collect()
}

fn parse_additional(keyword: &str, v: &Bson, what: &str) -> Result<Additional> {
    match v {
        Bson::Boolean(b) => Ok(Additional::Allowed(*b)),
        Bson::Document(d) => Ok(Additional::Schema(Box::new(Schema::parse(d)?))),
        other => Err(type_mismatch(keyword_msg(
            keyword,
            &what.replace("{type}", type_name(other)),
        ))),
    }
}

fn parse_bound(keyword: &str, v: &Bson, exclusive: Option<&Bson>, ex_kw: &str) -> Result<Bound> {
    let exclusive = match exclusive {
        None => None,
        Some(Bson::Boolean(b)) => Some(*b),
        Some(_) => return Err(type_mismatch(keyword_msg(ex_kw, "must be a boolean"))),
    };
    if !is_number(v) {
        return Err(type_mismatch(keyword_msg(keyword, "must be a number")));
    }
    Ok(Bound {
        value: v.clone(),
        exclusive,
    })
}

fn parse_enum(v: &Bson) -> Result<Vec<Bson>> {
    let Bson::Array(items) = v else {
        return Err(type_mismatch(keyword_msg(
            "enum",
            &format!(
                "must be an array, but found an element of type {}",
                type_name(v)
            ),
        )));
    };
    if items.is_empty() {
        return Err(failed_to_parse(keyword_msg(
            "enum",
            "cannot be an empty array",
        )));
    }
    for (i, a) in items.iter().enumerate() {
        if items[..i].iter().any(|b| unordered_eq(a, b)) {
            return Err(failed_to_parse(keyword_msg(
                "enum",
                "array cannot contain duplicate values.",
            )));
        }
    }
    Ok(items.clone())
}

fn parse_required(v: &Bson) -> Result<Vec<String>> {
    let Bson::Array(items) = v else {
        return Err(type_mismatch(keyword_msg(
            "required",
            &format!(
                "must be an array, but found an element of type {}",
                type_name(v)
            ),
        )));
    };
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let Bson::String(s) = item else {
            return Err(type_mismatch(keyword_msg(
                "required",
                &format!(
                    "must be an array of strings, but found an element of type: {}",
                    type_name(item)
                ),
            )));
        };
        names.push(s.clone());
    }
    if names.is_empty() {
        return Err(failed_to_parse(keyword_msg(
            "required",
            "cannot be an empty array",
        )));
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != names.len() {
        return Err(failed_to_parse(keyword_msg(
            "required",
            "array cannot contain duplicate values",
        )));
    }
    Ok(names)
}

fn parse_properties(v: &Bson) -> Result<Vec<(String, Schema)>> {
    let Bson::Document(d) = v else {
        return Err(type_mismatch(keyword_msg(
            "properties",
            "must be an object",
        )));
    };
    d.iter()
        .map(|(name, sub)| match sub {
            Bson::Document(s) => Ok((name.clone(), Schema::parse(s)?)),
            _ => Err(type_mismatch(format!(
                "Nested schema for $jsonSchema property '{name}' must be an object"
            ))),
        })
        .collect()
}

fn parse_pattern_properties(v: &Bson) -> Result<Vec<(String, RegexPred, Schema)>> {
    let Bson::Document(d) = v else {
        return Err(type_mismatch(keyword_msg(
            "patternProperties",
            "must be an object",
        )));
    };
    d.iter()
        .map(|(pattern, sub)| match sub {
            Bson::Document(s) => Ok((
                pattern.clone(),
                compile_regex(pattern, "")?,
                Schema::parse(s)?,
            )),
            _ => Err(type_mismatch(keyword_msg(
                "patternProperties",
                &format!("has property '{pattern}' which is not an object"),
            ))),
        })
        .collect()
}

fn parse_dependencies(v: &Bson) -> Result<Vec<(String, Dependency)>> {
    let Bson::Document(d) = v else {
        return Err(type_mismatch(keyword_msg(
            "dependencies",
            "must be an object",
        )));
    };
    let mut out = Vec::new();
    for (name, dep) in d {
        let in_kw = "in $jsonSchema keyword 'dependencies'";
        let parsed = match dep {
            Bson::Document(s) => Dependency::Schema(Box::new(Schema::parse(s)?)),
            Bson::Array(items) => {
                if items.is_empty() {
                    return Err(failed_to_parse(format!(
                        "property '{name}' {in_kw} cannot be an empty array"
                    )));
                }
                let mut names: Vec<String> = Vec::new();
                for item in items {
                    let Bson::String(s) = item else {
                        return Err(type_mismatch(format!(
                            "array '{name}' {in_kw} can only contain strings, but found element of type: {}",
                            type_name(item)
                        )));
                    };
                    if names.contains(s) {
                        return Err(failed_to_parse(format!(
                            "array '{name}' {in_kw} contains duplicate element: {s}"
                        )));
                    }
                    names.push(s.clone());
                }
                Dependency::Properties(names)
            }
            _ => {
                return Err(type_mismatch(format!(
                    "property '{name}' {in_kw} must be either an object or an array"
                )))
            }
        };
        out.push((name.clone(), parsed));
    }
    Ok(out)
}

fn parse_string(keyword: &str, v: &Bson) -> Result<String> {
    match v {
        Bson::String(s) => Ok(s.clone()),
        _ => Err(type_mismatch(keyword_msg(
            keyword,
            "must be of type string",
        ))),
    }
}

impl Schema {
    fn parse(d: &Document) -> Result<Schema> {
        for (k, _) in d {
            if KEYWORDS.contains(&k.as_str()) {
                continue;
            }
            if UNSUPPORTED.contains(&k.as_str()) {
                return Err(failed_to_parse(keyword_msg(
                    k,
                    "is not currently supported",
                )));
            }
            return Err(failed_to_parse(format!("Unknown $jsonSchema keyword: {k}")));
        }
        if d.contains_key("encrypt") || d.contains_key("encryptMetadata") {
            return Err(failed_to_parse(
                "$jsonSchema keywords 'encrypt' and 'encryptMetadata' are not supported",
            ));
        }
        let mut s = Schema::default();
        if let Some(v) = d.get("description") {
            s.description = Some(parse_string("description", v)?);
        }
        if let Some(v) = d.get("title") {
            s.title = Some(parse_string("title", v)?);
        }
        match (d.get("type"), d.get("bsonType")) {
            (Some(_), Some(_)) => {
                return Err(failed_to_parse(
                    "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'",
                ))
            }
            (Some(t), None) => s.types = Some(parse_types("type", t)?),
            (None, Some(t)) => s.types = Some(parse_types("bsonType", t)?),
            (None, None) => {}
        }
        s.parse_scalar_keywords(d)?;
        s.parse_array_keywords(d)?;
        s.parse_object_keywords(d)?;
        s.parse_logical_keywords(d)?;
        Ok(s)
    }

    fn parse_scalar_keywords(&mut self, d: &Document) -> Result<()> {
        if let Some(v) = d.get("pattern") {
            let Bson::String(p) = v else {
                return Err(type_mismatch(keyword_msg("pattern", "must be a string")));
            };
            self.pattern = Some((p.clone(), compile_regex(p, "")?));
        }
        if let Some(v) = d.get("maxLength") {
            self.max_length = Some(parse_count("maxLength", v)?);
        }
        if let Some(v) = d.get("minLength") {
            self.min_length = Some(parse_count("minLength", v)?);
        }
        if let Some(v) = d.get("multipleOf") {
            if !is_number(v) {
                return Err(type_mismatch(keyword_msg("multipleOf", "must be a number")));
            }
            if !matches!(as_f64(v), Some(x) if x > 0.0) {
                return Err(failed_to_parse(keyword_msg(
                    "multipleOf",
                    "must have a positive value",
                )));
            }
            self.multiple_of = Some(v.clone());
        }
        for (kw, ex_kw, slot) in [
            ("maximum", "exclusiveMaximum", &mut self.maximum),
            ("minimum", "exclusiveMinimum", &mut self.minimum),
        ] {
            match d.get(kw) {
                Some(v) => *slot = Some(parse_bound(kw, v, d.get(ex_kw), ex_kw)?),
                None if d.contains_key(ex_kw) => {
                    return Err(failed_to_parse(keyword_msg(
                        kw,
                        &format!("must be a present if {ex_kw} is present"),
                    )))
                }
                None => {}
            }
        }
        Ok(())
    }

    fn parse_array_keywords(&mut self, d: &Document) -> Result<()> {
        if let Some(v) = d.get("minItems") {
            self.min_items = Some(parse_count("minItems", v)?);
        }
        if let Some(v) = d.get("maxItems") {
            self.max_items = Some(parse_count("maxItems", v)?);
        }
        if let Some(v) = d.get("uniqueItems") {
            let Bson::Boolean(b) = v else {
                return Err(type_mismatch(keyword_msg(
                    "uniqueItems",
                    "must be a boolean",
                )));
            };
            self.unique_items = *b;
        }
        if let Some(v) = d.get("items") {
            self.items = Some(match v {
                Bson::Document(sub) => Items::All(Box::new(Schema::parse(sub)?)),
                Bson::Array(subs) => Items::Tuple(
                    subs.iter()
                        .map(|sub| match sub {
                            Bson::Document(s) => Schema::parse(s),
                            other => Err(type_mismatch(keyword_msg(
                                "items",
                                &format!(
                                    "requires that each element of the array is an object, but found a {}",
                                    type_name(other)
                                ),
                            ))),
                        })
                        .collect::<Result<_>>()?,
                ),
                other => {
                    return Err(type_mismatch(keyword_msg(
                        "items",
                        &format!("must be an array or an object, not {}", type_name(other)),
                    )))
                }
            });
        }
        if let Some(v) = d.get("additionalItems") {
            self.additional_items = Some(parse_additional(
                "additionalItems",
                v,
                "must be either an object or a boolean, but got a {type}",
            )?);
        }
        Ok(())
    }

    fn parse_object_keywords(&mut self, d: &Document) -> Result<()> {
        if let Some(v) = d.get("required") {
            self.required = parse_required(v)?;
        }
        if let Some(v) = d.get("properties") {
            self.properties = parse_properties(v)?;
        }
        if let Some(v) = d.get("patternProperties") {
            self.pattern_properties = parse_pattern_properties(v)?;
        }
        if let Some(v) = d.get("additionalProperties") {
            self.additional_properties = Some(parse_additional(
                "additionalProperties",
                v,
                "must be an object or a boolean",
            )?);
            self.additional_properties_spec = Some(v.clone());
        }
        if let Some(v) = d.get("minProperties") {
            self.min_properties = Some(parse_count("minProperties", v)?);
        }
        if let Some(v) = d.get("maxProperties") {
            self.max_properties = Some(parse_count("maxProperties", v)?);
        }
        if let Some(v) = d.get("dependencies") {
            self.dependencies = parse_dependencies(v)?;
        }
        Ok(())
    }

    fn parse_logical_keywords(&mut self, d: &Document) -> Result<()> {
        if let Some(v) = d.get("allOf") {
            self.all_of = schema_list("allOf", v)?;
        }
        if let Some(v) = d.get("anyOf") {
            self.any_of = schema_list("anyOf", v)?;
        }
        if let Some(v) = d.get("oneOf") {
            self.one_of = schema_list("oneOf", v)?;
        }
        if let Some(v) = d.get("not") {
            self.not = Some(Box::new(nested("not", v)?));
        }
        if let Some(v) = d.get("enum") {
            self.enum_values = Some(parse_enum(v)?);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------- evaluation

/// BSON equality with documents compared regardless of field order (mongod's
/// `UnorderedFieldsBSONElementComparator`, used by `enum` and `uniqueItems`).
fn unordered_eq(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| unordered_eq(v, w)))
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| unordered_eq(v, w))
        }
        _ => cmp_bson(a, b) == Ordering::Equal,
    }
}

/// Whether `x` is a whole multiple of `m` (exactly, in decimal, when both fit).
fn is_multiple(x: &Bson, m: &Bson) -> bool {
    if let (Some(a), Some(b)) = (Dec::from_bson(x), Dec::from_bson(m)) {
        let exp = a.exp.min(b.exp);
        let scale = |d: Dec| {
            10u128
                .checked_pow((d.exp - exp) as u32)
                .and_then(|p| d.coeff.checked_mul(p))
        };
        if let (Some(ca), Some(cb)) = (scale(a), scale(b)) {
            return cb != 0 && ca % cb == 0;
        }
    }
    match (as_f64(x), as_f64(m)) {
        (Some(a), Some(b)) => (a % b) == 0.0,
        _ => false,
    }
}

fn code_points(s: &str) -> i64 {
    s.chars().count() as i64
}

fn first_duplicate(items: &[Bson]) -> Option<&Bson> {
    items
        .iter()
        .enumerate()
        .find(|(i, a)| items[..*i].iter().any(|b| unordered_eq(a, b)))
        .map(|(_, a)| a)
}

impl Schema {
    fn matches_root(&self, doc: &Document) -> bool {
        self.matches(&Bson::Document(doc.clone()), true)
    }

    fn type_ok(&self, v: &Bson, top: bool) -> bool {
        match &self.types {
            None => true,
            Some(t) if top => t.codes.contains(&OBJECT_TYPE),
            Some(t) => type_single(v, &t.codes),
        }
    }

    /// Whether `v` satisfies the schema; `top` for the document itself.
    fn matches(&self, v: &Bson, top: bool) -> bool {
        self.type_ok(v, top)
            && (top || self.scalar_ok(v))
            && (top || self.array_ok(v))
            && self.object_ok(v)
            && self.logical_ok(v, top)
    }

    fn scalar_ok(&self, v: &Bson) -> bool {
        if is_number(v) {
            let number_ok = |b: &Option<Bound>, fails: fn(Ordering, bool) -> bool| {
                b.as_ref()
                    .is_none_or(|b| !fails(cmp_bson(v, &b.value), b.exclusive.unwrap_or(false)))
            };
            return number_ok(&self.minimum, |o, ex| {
                o == Ordering::Less || (ex && o == Ordering::Equal)
            }) && number_ok(&self.maximum, |o, ex| {
                o == Ordering::Greater || (ex && o == Ordering::Equal)
            }) && self.multiple_of.as_ref().is_none_or(|m| is_multiple(v, m));
        }
        if let Bson::String(s) = v {
            let len = code_points(s);
            return self.min_length.as_ref().is_none_or(|(_, n)| len >= *n)
                && self.max_length.as_ref().is_none_or(|(_, n)| len <= *n)
                && self
                    .pattern
                    .as_ref()
                    .is_none_or(|(_, re)| regex_single(v, re));
        }
        true
    }

    fn array_ok(&self, v: &Bson) -> bool {
        let Bson::Array(items) = v else {
            return true;
        };
        let len = items.len() as i64;
        self.min_items.as_ref().is_none_or(|(_, n)| len >= *n)
            && self.max_items.as_ref().is_none_or(|(_, n)| len <= *n)
            && (!self.unique_items || first_duplicate(items).is_none())
            && self.item_failure(items).is_none()
            && self.additional_item_failure(items).is_none()
    }

    /// The first element `items` rejects.
    fn item_failure(&self, items: &[Bson]) -> Option<usize> {
        match &self.items {
            None => None,
            Some(Items::All(s)) => items.iter().position(|x| !s.matches(x, false)),
            Some(Items::Tuple(schemas)) => items
                .iter()
                .zip(schemas)
                .position(|(x, s)| !s.matches(x, false)),
        }
    }

    /// The first element past a tuple `items` that `additionalItems` rejects.
    fn additional_item_failure(&self, items: &[Bson]) -> Option<usize> {
        let (Some(Items::Tuple(schemas)), Some(extra)) = (&self.items, &self.additional_items)
        else {
            return None;
        };
        (schemas.len()..items.len()).find(|&i| match extra {
            Additional::Allowed(b) => !b,
            Additional::Schema(s) => !s.matches(&items[i], false),
        })
    }

    fn object_ok(&self, v: &Bson) -> bool {
        let Bson::Document(d) = v else {
            return true;
        };
        let count = d.len() as i64;
        self.required.iter().all(|name| d.contains_key(name))
            && self
                .properties
                .iter()
                .all(|(name, s)| d.get(name).is_none_or(|x| s.matches(x, false)))
            && self.allowed_properties_failures(d).is_empty()
            && self
                .min_properties
                .as_ref()
                .is_none_or(|(_, n)| count >= *n)
            && self
                .max_properties
                .as_ref()
                .is_none_or(|(_, n)| count <= *n)
            && self
                .dependencies
                .iter()
                .all(|(name, dep)| !d.contains_key(name) || dependency_ok(dep, d))
    }

    fn logical_ok(&self, v: &Bson, top: bool) -> bool {
        self.all_of.iter().all(|s| s.matches(v, top))
            && (self.any_of.is_empty() || self.any_of.iter().any(|s| s.matches(v, top)))
            && (self.one_of.is_empty()
                || self.one_of.iter().filter(|s| s.matches(v, top)).count() == 1)
            && self.not.as_ref().is_none_or(|s| !s.matches(v, top))
            && self.enum_ok(v, top)
    }

    fn enum_ok(&self, v: &Bson, top: bool) -> bool {
        match &self.enum_values {
            None => true,
            // At the top, only the enum's objects can equal the document.
            Some(values) if top => values
                .iter()
                .any(|e| matches!(e, Bson::Document(_)) && unordered_eq(e, v)),
            Some(values) => values.iter().any(|e| unordered_eq(e, v)),
        }
    }

    /// The fields `patternProperties`/`additionalProperties` reject: (name, the pattern
    /// whose schema rejected it, or None for `additionalProperties`).
    fn allowed_properties_failures<'a>(
        &'a self,
        d: &'a Document,
    ) -> Vec<(&'a str, Option<&'a str>)> {
        if self.pattern_properties.is_empty() && self.additional_properties.is_none() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (name, value) in d {
            let mut matched_pattern = false;
            for (pattern, re, s) in &self.pattern_properties {
                if regex_single(&Bson::String(name.clone()), re) {
                    matched_pattern = true;
                    if !s.matches(value, false) {
                        out.push((name.as_str(), Some(pattern.as_str())));
                    }
                }
            }
            let declared = self.properties.iter().any(|(p, _)| p == name);
            if declared || matched_pattern {
                continue;
            }
            let ok = match &self.additional_properties {
                None | Some(Additional::Allowed(true)) => true,
                Some(Additional::Allowed(false)) => false,
                Some(Additional::Schema(s)) => s.matches(value, false),
            };
            if !ok {
                out.push((name.as_str(), None));
            }
        }
        out
    }
}

fn dependency_ok(dep: &Dependency, d: &Document) -> bool {
    match dep {
        Dependency::Properties(names) => names.iter().all(|n| d.contains_key(n)),
        // A schema dependency applies to the same object (as its parent schema did).
        Dependency::Schema(s) => s.matches(&Bson::Document(d.clone()), false),
    }
}

// ------------------------------------------------------------------- error details

/// `{operatorName, specifiedAs: {keyword: spec}}`.
fn rule(keyword: &str, spec: Bson) -> Document {
    doc! {"operatorName": keyword, "specifiedAs": {keyword: spec}}
}

/// A failing leaf keyword: its rule, reason and the value considered.
fn leaf(keyword: &str, spec: Bson, reason: &str, v: &Bson) -> Document {
    let mut out = rule(keyword, spec);
    out.insert("reason", reason);
    out.insert("consideredValue", v.clone());
    out
}

impl Schema {
    /// The schema's `title` and `description`, which mongod repeats in its errors.
    fn annotate(&self, out: &mut Document) {
        if let Some(t) = &self.title {
            out.insert("title", t.clone());
        }
        if let Some(d) = &self.description {
            out.insert("description", d.clone());
        }
    }

    /// The rules of the schema that `v` fails, as mongod lists them.
    fn failures(&self, v: &Bson, top: bool) -> Vec<Bson> {
        let mut out = Vec::new();
        if !self.type_ok(v, top) {
            let t = self.types.as_ref().expect("a type failed");
            let mut e = leaf(t.keyword, t.spec.clone(), "type did not match", v);
            e.insert("consideredType", type_name(v));
            out.push(e);
            return out.into_iter().map(Bson::Document).collect();
        }
        if !top {
            self.scalar_failures(v, &mut out);
            self.array_failures(v, &mut out);
        }
        if let Bson::Document(d) = v {
            self.object_failures(d, &mut out);
        }
        self.logical_failures(v, top, &mut out);
        out.into_iter().map(Bson::Document).collect()
    }

    fn scalar_failures(&self, v: &Bson, out: &mut Vec<Document>) {
        if is_number(v) {
            for (kw, ex_kw, bound, fails) in [
                ("minimum", "exclusiveMinimum", &self.minimum, Ordering::Less),
                (
                    "maximum",
                    "exclusiveMaximum",
                    &self.maximum,
                    Ordering::Greater,
                ),
            ] {
                let Some(b) = bound else { continue };
                let o = cmp_bson(v, &b.value);
                let exclusive = b.exclusive.unwrap_or(false);
                if o == fails || (exclusive && o == Ordering::Equal) {
                    // mongod names the exclusive flag only when it is set.
                    let mut specified = doc! {kw: b.value.clone()};
                    if exclusive {
                        specified.insert(ex_kw, true);
                    }
                    let mut e = doc! {"operatorName": kw, "specifiedAs": specified};
                    e.insert("reason", "comparison failed");
                    e.insert("consideredValue", v.clone());
                    out.push(e);
                }
            }
            if let Some(m) = &self.multiple_of {
                if !is_multiple(v, m) {
                    out.push(leaf(
                        "multipleOf",
                        m.clone(),
                        "considered value is not a multiple of the specified value",
                        v,
                    ));
                }
            }
        }
        if let Bson::String(s) = v {
            let len = code_points(s);
            let length_reason = "specified string length was not satisfied";
            if let Some((spec, n)) = &self.min_length {
                if len < *n {
                    out.push(leaf("minLength", spec.clone(), length_reason, v));
                }
            }
            if let Some((spec, n)) = &self.max_length {
                if len > *n {
                    out.push(leaf("maxLength", spec.clone(), length_reason, v));
                }
            }
            if let Some((p, re)) = &self.pattern {
                if !regex_single(v, re) {
                    out.push(leaf(
                        "pattern",
                        Bson::String(p.clone()),
                        "regular expression did not match",
                        v,
                    ));
                }
            }
        }
    }

    fn array_failures(&self, v: &Bson, out: &mut Vec<Document>) {
        let Bson::Array(items) = v else { return };
        let len = items.len() as i64;
        let length_reason = "array did not match specified length";
        for (kw, bound, fails) in [
            ("minItems", &self.min_items, Ordering::Less),
            ("maxItems", &self.max_items, Ordering::Greater),
        ] {
            if let Some((spec, n)) = bound {
                if len.cmp(n) == fails {
                    let mut e = leaf(kw, spec.clone(), length_reason, v);
                    e.insert("numberOfItems", len);
                    out.push(e);
                }
            }
        }
        if self.unique_items {
            if let Some(dup) = first_duplicate(items) {
                let mut e = leaf(
                    "uniqueItems",
                    Bson::Boolean(true),
                    "found a duplicate item",
                    v,
                );
                e.insert("duplicatedValue", dup.clone());
                out.push(e);
            }
        }
        if let Some(i) = self.item_failure(items) {
            let mut e = doc! {"operatorName": "items"};
            match &self.items {
                Some(Items::All(s)) => {
                    s.annotate(&mut e);
                    e.insert("reason", "At least one item did not match the sub-schema");
                    e.insert("itemIndex", i as i32);
                    e.insert("details", s.failures(&items[i], false));
                }
                // Every position whose schema fails is listed.
                Some(Items::Tuple(schemas)) => {
                    let failing: Vec<Bson> = (items.iter().zip(schemas).enumerate())
                        .filter(|(_, (x, s))| !s.matches(x, false))
                        .map(|(i, (x, s))| {
                            let mut f = doc! {"itemIndex": i as i32};
                            s.annotate(&mut f);
                            f.insert("details", s.failures(x, false));
                            Bson::Document(f)
                        })
                        .collect();
                    e.insert("details", failing);
                }
                None => {}
            }
            out.push(e);
        }
        if let Some(i) = self.additional_item_failure(items) {
            let mut e = doc! {"operatorName": "additionalItems"};
            match &self.additional_items {
                Some(Additional::Schema(s)) => {
                    s.annotate(&mut e);
                    e.insert(
                        "reason",
                        "At least one additional item did not match the sub-schema",
                    );
                    e.insert("itemIndex", i as i32);
                    e.insert("details", s.failures(&items[i], false));
                }
                _ => {
                    e.insert("specifiedAs", doc! {"additionalItems": false});
                    e.insert("reason", "found additional items");
                    e.insert("additionalItems", items[i..].to_vec());
                }
            }
            out.push(e);
        }
    }

    fn object_failures(&self, d: &Document, out: &mut Vec<Document>) {
        let failing: Vec<Bson> = self
            .properties
            .iter()
            .filter_map(|(name, s)| {
                let value = d.get(name)?;
                if s.matches(value, false) {
                    return None;
                }
                let mut e = doc! {"propertyName": name.clone()};
                s.annotate(&mut e);
                e.insert("details", s.failures(value, false));
                Some(Bson::Document(e))
            })
            .collect();
        if !failing.is_empty() {
            out.push(doc! {"operatorName": "properties", "propertiesNotSatisfied": failing});
        }
        self.allowed_properties_errors(d, out);
        // mongod lists the missing properties in sorted order.
        let mut missing: Vec<&String> = self
            .required
            .iter()
            .filter(|n| !d.contains_key(n.as_str()))
            .collect();
        missing.sort();
        if !missing.is_empty() {
            let mut e = rule("required", Bson::from(self.required.clone()));
            e.insert(
                "missingProperties",
                missing.into_iter().cloned().collect::<Vec<_>>(),
            );
            out.push(e);
        }
        let count = d.len() as i64;
        let reason = "specified number of properties was not satisfied";
        for (kw, bound, fails) in [
            ("minProperties", &self.min_properties, Ordering::Less),
            ("maxProperties", &self.max_properties, Ordering::Greater),
        ] {
            if let Some((spec, n)) = bound {
                if count.cmp(n) == fails {
                    let mut e = rule(kw, spec.clone());
                    e.insert("reason", reason);
                    e.insert("numberOfProperties", count);
                    out.push(e);
                }
            }
        }
        let failing: Vec<Bson> = self
            .dependencies
            .iter()
            .filter(|(name, dep)| d.contains_key(name) && !dependency_ok(dep, d))
            .map(|(name, dep)| {
                let mut e = doc! {"conditionalProperty": name.clone()};
                match dep {
                    Dependency::Properties(names) => {
                        let missing: Vec<String> = names
                            .iter()
                            .filter(|n| !d.contains_key(n.as_str()))
                            .cloned()
                            .collect();
                        e.insert("missingProperties", missing);
                    }
                    Dependency::Schema(s) => {
                        e.insert("details", s.failures(&Bson::Document(d.clone()), false));
                    }
                }
                Bson::Document(e)
            })
            .collect();
        if !failing.is_empty() {
            out.push(doc! {"operatorName": "dependencies", "failingDependencies": failing});
        }
    }

    fn allowed_properties_errors(&self, d: &Document, out: &mut Vec<Document>) {
        let failures = self.allowed_properties_failures(d);
        let additional: Vec<&str> = failures
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(n, _)| *n)
            .collect();
        match (&self.additional_properties, additional.first()) {
            (Some(Additional::Allowed(false)), Some(_)) => {
                let mut e = rule(
                    "additionalProperties",
                    self.additional_properties_spec
                        .clone()
                        .unwrap_or(Bson::Boolean(false)),
                );
                e.insert(
                    "additionalProperties",
                    additional.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                );
                out.push(e);
            }
            (Some(Additional::Schema(s)), Some(name)) => {
                let value = d.get(*name).expect("a field of the document");
                let mut e = doc! {"operatorName": "additionalProperties"};
                s.annotate(&mut e);
                e.insert(
                    "reason",
                    "at least one additional property did not match the subschema",
                );
                e.insert("failingProperty", name.to_string());
                e.insert("details", s.failures(value, false));
                out.push(e);
            }
            _ => {}
        }
        // Per pattern, the first property it rejects.
        let patterns: Vec<Bson> = self
            .pattern_properties
            .iter()
            .filter_map(|(pattern, _, s)| {
                let (name, _) = failures
                    .iter()
                    .find(|(_, p)| *p == Some(pattern.as_str()))?;
                let value = d.get(*name)?;
                let mut e = doc! {"propertyName": name.to_string()};
                s.annotate(&mut e);
                e.insert("regexMatched", pattern);
                e.insert("details", s.failures(value, false));
                Some(Bson::Document(e))
            })
            .collect();
        if !patterns.is_empty() {
            out.push(doc! {"operatorName": "patternProperties", "details": patterns});
        }
    }

    fn logical_failures(&self, v: &Bson, top: bool, out: &mut Vec<Document>) {
        let not_satisfied = |schemas: &[Schema]| -> Vec<Bson> {
            schemas
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.matches(v, top))
                .map(|(i, s)| {
                    let mut e = doc! {"index": i as i32};
                    s.annotate(&mut e);
                    e.insert("details", s.failures(v, top));
                    Bson::Document(e)
                })
                .collect()
        };
        if self.all_of.iter().any(|s| !s.matches(v, top)) {
            out.push(
                doc! {"operatorName": "allOf", "schemasNotSatisfied": not_satisfied(&self.all_of)},
            );
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|s| s.matches(v, top)) {
            out.push(
                doc! {"operatorName": "anyOf", "schemasNotSatisfied": not_satisfied(&self.any_of)},
            );
        }
        if !self.one_of.is_empty() {
            let matching: Vec<i32> = (self.one_of.iter().enumerate())
                .filter(|(_, s)| s.matches(v, top))
                .map(|(i, _)| i as i32)
                .collect();
            if matching.is_empty() {
                out.push(doc! {"operatorName": "oneOf", "schemasNotSatisfied": not_satisfied(&self.one_of)});
            } else if matching.len() > 1 {
                out.push(doc! {
                    "operatorName": "oneOf",
                    "reason": "more than one subschema matched",
                    "matchingSchemaIndexes": matching,
                });
            }
        }
        if self.not.as_ref().is_some_and(|s| s.matches(v, top)) {
            out.push(doc! {"operatorName": "not", "reason": "child expression matched"});
        }
        if !self.enum_ok(v, top) {
            let values = self.enum_values.clone().unwrap_or_default();
            out.push(leaf(
                "enum",
                Bson::Array(values),
                "value was not found in enum",
                v,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JsonSchema;
    use bson::{bson, doc, Bson, Document};

    /// A small deterministic generator (xorshift64*) for random documents.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
        }

        fn value(&mut self, depth: u32) -> Bson {
            match self.below(if depth == 0 { 6 } else { 8 }) {
                0 => Bson::Int32(self.below(10) as i32 - 3),
                1 => Bson::Double(self.below(20) as f64 / 2.0),
                2 => Bson::String("abcdef"[..self.below(6) as usize].to_string()),
                3 => Bson::Null,
                4 => Bson::Boolean(self.below(2) == 1),
                5 => Bson::Int64(self.below(5) as i64),
                6 => Bson::Array((0..self.below(4)).map(|_| self.value(depth - 1)).collect()),
                _ => Bson::Document(self.document(depth - 1)),
            }
        }

        fn document(&mut self, depth: u32) -> Document {
            let mut d = Document::new();
            for name in ["a", "b", "c"] {
                if self.below(3) != 0 {
                    d.insert(name, self.value(depth));
                }
            }
            d
        }
    }

    fn number(v: &Bson) -> Option<f64> {
        crate::compare::is_number(v)
            .then(|| crate::compare::as_f64(v))
            .flatten()
    }

    /// Each schema against a hand-written validator of what JSON Schema means by it.
    #[test]
    fn schemas_agree_with_hand_written_validators() {
        type Check = fn(&Document) -> bool;
        let cases: Vec<(Document, Check)> = vec![
            (
                doc! {"properties": {"a": {"minimum": 2, "maximum": 6}}},
                |d| {
                    d.get("a")
                        .and_then(number)
                        .is_none_or(|x| (2.0..=6.0).contains(&x))
                },
            ),
            (doc! {"required": ["a", "b"]}, |d| {
                d.contains_key("a") && d.contains_key("b")
            }),
            (
                doc! {"properties": {"a": {"bsonType": ["string", "null"]}}},
                |d| matches!(d.get("a"), None | Some(Bson::String(_)) | Some(Bson::Null)),
            ),
            (
                doc! {"properties": {"a": {"type": "array", "items": {"type": "number"}, "maxItems": 2}}},
                |d| match d.get("a") {
                    None => true,
                    Some(Bson::Array(items)) => {
                        items.len() <= 2 && items.iter().all(|x| number(x).is_some())
                    }
                    Some(_) => false,
                },
            ),
            (
                doc! {"properties": {"a": {"minLength": 2, "pattern": "^ab"}}},
                |d| match d.get("a") {
                    Some(Bson::String(s)) => s.len() >= 2 && s.starts_with("ab"),
                    _ => true,
                },
            ),
            (
                doc! {"properties": {"a": {"properties": {"b": {"type": "boolean"}}, "required": ["c"]}}},
                |d| match d.get("a") {
                    Some(Bson::Document(inner)) => {
                        inner.contains_key("c")
                            && inner.get("b").is_none_or(|b| matches!(b, Bson::Boolean(_)))
                    }
                    _ => true,
                },
            ),
            (
                doc! {"anyOf": [{"required": ["a"]}, {"required": ["b"]}], "not": {"required": ["c"]}},
                |d| (d.contains_key("a") || d.contains_key("b")) && !d.contains_key("c"),
            ),
            (
                doc! {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
                |d| d.contains_key("a") != d.contains_key("b"),
            ),
            (
                doc! {"properties": {"a": {"enum": [1, "ab", null]}}},
                |d| match d.get("a") {
                    None => true,
                    Some(v) => [bson!(1), bson!("ab"), Bson::Null]
                        .iter()
                        .any(|e| crate::compare::cmp_bson(e, v).is_eq()),
                },
            ),
            (
                doc! {"properties": {"a": {}}, "additionalProperties": false},
                |d| d.keys().all(|k| k == "a"),
            ),
            (doc! {"properties": {"a": {"multipleOf": 1.5}}}, |d| {
                d.get("a").and_then(number).is_none_or(|x| x % 1.5 == 0.0)
            }),
            (
                doc! {"dependencies": {"a": ["b"]}, "maxProperties": 2},
                |d| (!d.contains_key("a") || d.contains_key("b")) && d.len() <= 2,
            ),
            (
                doc! {"properties": {"a": {"uniqueItems": true}}},
                |d| match d.get("a") {
                    Some(Bson::Array(items)) => (0..items.len()).all(|i| {
                        items[..i]
                            .iter()
                            .all(|x| !super::unordered_eq(x, &items[i]))
                    }),
                    _ => true,
                },
            ),
        ];
        let mut rng = Rng(0x5EED_0031);
        for (schema, check) in &cases {
            let parsed = JsonSchema::parse(&Bson::Document(schema.clone())).unwrap();
            for _ in 0..400 {
                let d = rng.document(2);
                assert_eq!(parsed.matches(&d), check(&d), "schema {schema} on {d}");
                if !parsed.matches(&d) {
                    let details = parsed.explain(&d);
                    assert!(
                        !details
                            .get_array("schemaRulesNotSatisfied")
                            .unwrap()
                            .is_empty(),
                        "no failing rule for {d} under {schema}"
                    );
                }
            }
        }
    }

    #[test]
    fn top_level_keywords_describe_the_document() {
        let m = |schema: Document, d: Document| {
            JsonSchema::parse(&Bson::Document(schema))
                .unwrap()
                .matches(&d)
        };
        assert!(m(
            doc! {"minimum": 5, "items": {"type": "string"}},
            doc! {"a": 1}
        ));
        assert!(!m(doc! {"type": "string"}, doc! {}));
        assert!(m(doc! {"type": ["string", "object"]}, doc! {}));
        assert!(m(
            doc! {"enum": [{"b": 2, "a": 1}, 3]},
            doc! {"a": 1, "b": 2}
        ));
        assert!(!m(doc! {"enum": [3]}, doc! {"a": 1}));
        assert!(m(doc! {"minProperties": 1}, doc! {"a": 1}));
    }
}

//! Why a document failed a collection's validator, as mongod 5.0+ explains it in a
//! DocumentValidationFailure's `errInfo.details` (mongod's doc_validation_error.cpp):
//! `operatorName`, `specifiedAs`, `reason`, `consideredValue(s)`/`consideredType(s)` for
//! a failing leaf, and `clausesNotSatisfied`/`clausesSatisfied` (`{index, details}`) or
//! `details` for the logical operators, down to the clauses that made it fail.
//!
//! The validator is read here as mongod's parser builds its tree: a document's clauses
//! form an implicit `$and` (flattened: every operator of every field is one clause; a
//! document of one clause is that clause), `$ne`, `$nin` and `$exists: false` are their
//! positive operator reported in the negated sense, and `$not` and `$nor` report their
//! clauses in the negated sense ("comparison succeeded"). Whether a clause contributes
//! is decided by evaluating it with the ordinary [`Matcher`].

use crate::bson_size::encoded_len;
use crate::collation::Collator;
use crate::compare::{as_f64, is_number, type_name};
use crate::error::Error;
use crate::expr::Variables;
use crate::matcher::{JsonSchema, Matcher};
use crate::path::parse_index;
use bson::{doc, Bson, Document};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Most values listed in `consideredValues` (mongod's
/// internalQueryMaxDocValidationErrorConsideredValues).
const MAX_CONSIDERED_VALUES: usize = 10;

/// Largest `errInfo` mongod sends (kDefaultMaxDocValidationErrorSize): a larger one is
/// sent again without `specifiedAs` and the considered values, then as a note only.
const MAX_ERR_INFO_BYTES: usize = 12 * 1024 * 1024;

/// Deepest `errInfo` mongod sends: its maxBSONDepth (200) less a margin of 10 for the
/// reply around it.
const MAX_ERR_INFO_DEPTH: usize = 190;

/// The fields a truncated error leaves out: those as large as the validator or the
/// document.
const TRUNCATED_FIELDS: [&str; 4] = [
    "specifiedAs",
    "consideredValue",
    "consideredValues",
    "consideredValuesTruncated",
];

/// The `errInfo` of mongod's DocumentValidationFailure for `doc`, which failed
/// `validator` (compared under `collator`): `failingDocumentId` and `details`, within
/// mongod's size and depth limits.
pub fn err_info(validator: &Document, doc: &Document, collator: Option<Arc<Collator>>) -> Document {
    err_info_within(validator, doc, collator, MAX_ERR_INFO_BYTES)
}

fn err_info_within(
    validator: &Document,
    doc: &Document,
    collator: Option<Arc<Collator>>,
    max_bytes: usize,
) -> Document {
    let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
    let Some(mut full) = details(validator, doc, collator) else {
        return doc! {"failingDocumentId": id};
    };
    let info = within_depth(doc! {"failingDocumentId": id.clone(), "details": full.clone()});
    if encoded_len(&info) <= max_bytes {
        return info;
    }
    strip_large_fields(&mut full);
    let info =
        within_depth(doc! {"failingDocumentId": id.clone(), "truncated": true, "details": full});
    if encoded_len(&info) <= max_bytes {
        return info;
    }
    doc! {"failingDocumentId": id, "note": "detailed error was too large"}
}

/// `info`, or mongod's note in its place when it is nested too deeply to send.
fn within_depth(info: Document) -> Document {
    if crate::path::nesting_depth(&info) > MAX_ERR_INFO_DEPTH {
        return doc! {"reason": "generated error was too deeply nested", "truncated": true};
    }
    info
}

/// Removes [`TRUNCATED_FIELDS`] from an error and the errors nested in it (not from
/// the values it quotes).
fn strip_large_fields(error: &mut Document) {
    for field in TRUNCATED_FIELDS {
        error.remove(field);
    }
    if let Ok(nested) = error.get_document_mut("details") {
        strip_large_fields(nested);
    }
    for list in ["clausesNotSatisfied", "clausesSatisfied"] {
        if let Ok(clauses) = error.get_array_mut(list) {
            for clause in clauses {
                if let Some(nested) = clause
                    .as_document_mut()
                    .and_then(|c| c.get_document_mut("details").ok())
                {
                    strip_large_fields(nested);
                }
            }
        }
    }
}

/// The `details` of mongod's DocumentValidationFailure for `doc`, which failed
/// `validator` (compared under `collator`). None when the validator holds something
/// this explanation cannot read (the error then carries no details).
fn details(
    validator: &Document,
    doc: &Document,
    collator: Option<Arc<Collator>>,
) -> Option<Document> {
    let parser = Parser { collator };
    let root = parser.document(validator).ok()?;
    Some(root.explain(doc, Sense::Normal))
}

/// Whether an error describes a failure (normal) or, under `$not`/`$nor`, a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sense {
    Normal,
    Inverted,
}

impl Sense {
    fn flip(self) -> Sense {
        match self {
            Sense::Normal => Sense::Inverted,
            Sense::Inverted => Sense::Normal,
        }
    }

    fn pick<'a>(self, normal: &'a str, inverted: &'a str) -> &'a str {
        match self {
            Sense::Normal => normal,
            Sense::Inverted => inverted,
        }
    }
}

/// One node of the validator's tree.
enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Nor(Vec<Node>),
    Not(Box<Node>),
    Leaf(Box<Leaf>),
    Expr {
        spec: Bson,
        matcher: Matcher,
    },
    Always(bool),
    /// `$jsonSchema`, explained by the schema's failing rules.
    JsonSchema(Box<JsonSchema>),
    /// A top-level operator explained by its name and specification only.
    Opaque {
        op: String,
        specified_as: Document,
        matcher: Matcher,
    },
}

/// A predicate on one path.
struct Leaf {
    op: String,
    specified_as: Document,
    path: String,
    kind: LeafKind,
    /// Evaluates the positive predicate (`$eq` for `$ne`, `$in` for `$nin`).
    matcher: Matcher,
    /// `$ne`, `$nin`, `$exists: false`: the positive predicate, reported negated.
    negated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeafKind {
    Compare,
    In,
    Regex,
    Exists,
    Type,
    Mod,
    Bits,
    Size,
    ElemMatch,
    All,
    GeoWithin,
    GeoIntersects,
    Other,
}

/// How the values at a leaf's path are listed (mongod's LeafArrayBehavior).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeafArrays {
    /// An array at the end of the path is listed by its elements.
    Elements,
    /// An array at the end of the path is one value.
    Whole,
}

/// mongod's type names of every numeric type, sorted.
const NUMBER_TYPES: &[&str] = &["decimal", "double", "int", "long"];

impl LeafKind {
    fn reasons(self) -> (&'static str, &'static str) {
        match self {
            LeafKind::Compare => ("comparison failed", "comparison succeeded"),
            LeafKind::In => (
                "no matching value found in array",
                "matching value found in array",
            ),
            LeafKind::Regex => (
                "regular expression did not match",
                "regular expression did match",
            ),
            LeafKind::Exists => ("path does not exist", "path does exist"),
            LeafKind::Type => ("type did not match", "type did match"),
            LeafKind::Mod => (
                "$mod did not evaluate to expected remainder",
                "$mod did evaluate to expected remainder",
            ),
            LeafKind::Bits => (
                "bitwise operator failed to match",
                "bitwise operator matched successfully",
            ),
            LeafKind::Size => (
                "array length was not equal to given size",
                "array length was equal to given size",
            ),
            LeafKind::ElemMatch => (
                "array did not satisfy the child predicate",
                "array did satisfy the child predicate",
            ),
            LeafKind::All => (
                "array did not contain all specified values",
                "array did contain all specified values",
            ),
            LeafKind::GeoWithin => (
                "none of the considered geometries were contained within the expression\u{2019}s geometry",
                "at least one of considered geometries was contained within the expression\u{2019}s geometry",
            ),
            LeafKind::GeoIntersects => (
                "none of the considered geometries intersected the expression\u{2019}s geometry",
                "at least one of considered geometries intersected the expression\u{2019}s geometry",
            ),
            LeafKind::Other => ("", ""),
        }
    }

    /// The types the operator can match at all (a value of none of them is reported as
    /// "type did not match"), sorted as mongod lists them.
    fn expected_types(self) -> Option<Vec<&'static str>> {
        match self {
            LeafKind::Regex => Some(vec!["regex", "string", "symbol"]),
            LeafKind::Mod => Some(NUMBER_TYPES.to_vec()),
            LeafKind::Bits => {
                let mut types = vec!["binData"];
                types.extend_from_slice(NUMBER_TYPES);
                Some(types)
            }
            LeafKind::Size | LeafKind::ElemMatch => Some(vec!["array"]),
            _ => None,
        }
    }

    fn leaf_arrays(self) -> LeafArrays {
        match self {
            LeafKind::Size | LeafKind::ElemMatch | LeafKind::All => LeafArrays::Whole,
            _ => LeafArrays::Elements,
        }
    }
}

/// Builds the tree of a validator; every predicate gets a [`Matcher`] of its own.
struct Parser {
    collator: Option<Arc<Collator>>,
}

type Parsed<T> = std::result::Result<T, Error>;

impl Parser {
    fn matcher(&self, filter: Document) -> Parsed<Matcher> {
        Matcher::with_collation(&filter, self.collator.clone())
    }

    /// A filter document: its clauses, as one node.
    fn document(&self, d: &Document) -> Parsed<Node> {
        let mut clauses = self.clauses(d)?;
        Ok(if clauses.len() == 1 {
            clauses.remove(0)
        } else {
            Node::And(clauses)
        })
    }

    fn clauses(&self, d: &Document) -> Parsed<Vec<Node>> {
        let mut out = Vec::new();
        for (key, value) in d {
            match key.as_str() {
                "$and" => out.push(Node::And(self.list(value)?)),
                "$or" => out.push(Node::Or(self.list(value)?)),
                "$nor" => out.push(Node::Nor(self.list(value)?)),
                "$comment" => {}
                "$expr" => out.push(Node::Expr {
                    spec: value.clone(),
                    matcher: self.matcher(doc! {"$expr": value.clone()})?,
                }),
                "$alwaysTrue" => out.push(Node::Always(true)),
                "$alwaysFalse" => out.push(Node::Always(false)),
                "$jsonSchema" => out.push(Node::JsonSchema(Box::new(JsonSchema::parse(value)?))),
                op if op.starts_with('$') => out.push(Node::Opaque {
                    op: op.to_string(),
                    specified_as: doc! {op: value.clone()},
                    matcher: self.matcher(doc! {op: value.clone()})?,
                }),
                path => self.field(path, value, &mut out)?,
            }
        }
        Ok(out)
    }

    fn list(&self, value: &Bson) -> Parsed<Vec<Node>> {
        match value {
            Bson::Array(items) => items
                .iter()
                .map(|item| match item {
                    Bson::Document(d) => self.document(d),
                    _ => Err(Error::bad_value(
                        "$or/$and/$nor entries need to be full objects",
                    )),
                })
                .collect(),
            _ => Err(Error::bad_value("$and/$or/$nor must be a nonempty array")),
        }
    }

    /// The clauses of `path: value`: one per operator, or an equality.
    fn field(&self, path: &str, value: &Bson, out: &mut Vec<Node>) -> Parsed<()> {
        match value {
            Bson::Document(ops) if is_operator_document(ops) => {
                for (op, arg) in ops {
                    if let Some(node) = self.operator(path, op, arg, ops)? {
                        out.push(node);
                    }
                }
            }
            Bson::RegularExpression(_) => out.push(self.regex_literal(path, value)?),
            _ => out.push(self.leaf(
                "$eq",
                doc! {path: value.clone()},
                path,
                LeafKind::Compare,
                doc! {path: {"$eq": value.clone()}},
                false,
            )?),
        }
        Ok(())
    }

    fn regex_literal(&self, path: &str, value: &Bson) -> Parsed<Node> {
        let filter = doc! {path: value.clone()};
        self.leaf(
            "$regex",
            filter.clone(),
            path,
            LeafKind::Regex,
            filter,
            false,
        )
    }

    /// The node of one operator of `path` (None for `$options`, which belongs to its
    /// `$regex`); `ops` is the whole operator document.
    fn operator(&self, path: &str, op: &str, arg: &Bson, ops: &Document) -> Parsed<Option<Node>> {
        let spec = doc! {path: {op: arg.clone()}};
        let same = |kind| self.leaf(op, spec.clone(), path, kind, spec.clone(), false);
        let node = match op {
            "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => same(LeafKind::Compare)?,
            "$in" => same(LeafKind::In)?,
            "$type" => same(LeafKind::Type)?,
            "$mod" => same(LeafKind::Mod)?,
            "$bitsAllSet" | "$bitsAllClear" | "$bitsAnySet" | "$bitsAnyClear" => {
                same(LeafKind::Bits)?
            }
            "$size" => same(LeafKind::Size)?,
            "$elemMatch" => same(LeafKind::ElemMatch)?,
            "$all" => same(LeafKind::All)?,
            "$geoWithin" => same(LeafKind::GeoWithin)?,
            "$geoIntersects" => same(LeafKind::GeoIntersects)?,
            "$ne" => self.negated(op, spec, path, LeafKind::Compare, "$eq", arg)?,
            "$nin" => self.negated(op, spec, path, LeafKind::In, "$in", arg)?,
            "$exists" if exists_argument(arg) => same(LeafKind::Exists)?,
            "$exists" => self.negated(
                op,
                spec,
                path,
                LeafKind::Exists,
                "$exists",
                &Bson::Boolean(true),
            )?,
            "$regex" => {
                let mut regex = Document::new();
                for key in ["$regex", "$options"] {
                    if let Some(v) = ops.get(key) {
                        regex.insert(key, v.clone());
                    }
                }
                self.leaf(
                    "$regex",
                    doc! {path: ops.clone()},
                    path,
                    LeafKind::Regex,
                    doc! {path: regex},
                    false,
                )?
            }
            "$options" => return Ok(None),
            "$not" => Node::Not(Box::new(self.not_argument(path, arg)?)),
            _ => same(LeafKind::Other)?,
        };
        Ok(Some(node))
    }

    /// `$ne`, `$nin`, `$exists: false`: the positive operator `positive` with `arg`.
    fn negated(
        &self,
        op: &str,
        spec: Document,
        path: &str,
        kind: LeafKind,
        positive: &str,
        arg: &Bson,
    ) -> Parsed<Node> {
        let filter = doc! {path: {positive: arg.clone()}};
        self.leaf(op, spec, path, kind, filter, true)
    }

    /// What `$not` negates: a regular expression, or operators of the same path (one
    /// operator is that operator, several an implicit `$and`).
    fn not_argument(&self, path: &str, arg: &Bson) -> Parsed<Node> {
        match arg {
            Bson::RegularExpression(_) => self.regex_literal(path, arg),
            Bson::Document(ops) => {
                let mut clauses = Vec::new();
                for (op, v) in ops {
                    if let Some(node) = self.operator(path, op, v, ops)? {
                        clauses.push(node);
                    }
                }
                Ok(if clauses.len() == 1 {
                    clauses.remove(0)
                } else {
                    Node::And(clauses)
                })
            }
            _ => Err(Error::bad_value("$not needs a regex or a document")),
        }
    }

    fn leaf(
        &self,
        op: &str,
        specified_as: Document,
        path: &str,
        kind: LeafKind,
        filter: Document,
        negated: bool,
    ) -> Parsed<Node> {
        Ok(Node::Leaf(Box::new(Leaf {
            op: op.to_string(),
            specified_as,
            path: path.to_string(),
            kind,
            matcher: self.matcher(filter)?,
            negated,
        })))
    }
}

/// `{$gt: 1}` and the like, not an embedded document (DBRefs are documents).
fn is_operator_document(d: &Document) -> bool {
    d.keys()
        .next()
        .is_some_and(|k| k.starts_with('$') && !matches!(k.as_str(), "$ref" | "$id" | "$db"))
}

/// Whether `$exists: arg` asks for the path to exist (mongod's `trueValue`).
fn exists_argument(arg: &Bson) -> bool {
    match arg {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        _ if is_number(arg) => as_f64(arg) != Some(0.0),
        _ => true,
    }
}

impl Node {
    /// Whether the node matches `doc` (an evaluation error propagates).
    fn matches(&self, doc: &Document) -> Parsed<bool> {
        Ok(match self {
            Node::And(clauses) => {
                for c in clauses {
                    if !c.matches(doc)? {
                        return Ok(false);
                    }
                }
                true
            }
            Node::Or(clauses) => any_matches(clauses, doc)?,
            Node::Nor(clauses) => !any_matches(clauses, doc)?,
            Node::Not(child) => !child.matches(doc)?,
            Node::Leaf(leaf) => leaf.matcher.matches_checked(doc)? != leaf.negated,
            Node::Expr { matcher, .. } | Node::Opaque { matcher, .. } => {
                matcher.matches_checked(doc)?
            }
            Node::Always(b) => *b,
            Node::JsonSchema(schema) => schema.matches(doc),
        })
    }

    /// Whether a clause explains its parent's outcome in `sense`: it failed (normal) or
    /// matched (inverted); a clause whose evaluation fails always does, as in mongod.
    fn contributes(&self, doc: &Document, sense: Sense) -> bool {
        match self.matches(doc) {
            Ok(matched) => matched == (sense == Sense::Inverted),
            Err(_) => true,
        }
    }

    /// The error of this node, which failed (normal) or matched (inverted) `doc`.
    fn explain(&self, doc: &Document, sense: Sense) -> Document {
        match self {
            // A normal $and lists its failing clauses; an inverted one matched, so all.
            Node::And(clauses) => logical(
                "$and",
                clauses,
                doc,
                sense,
                sense == Sense::Normal,
                sense.pick("clausesNotSatisfied", "clausesSatisfied"),
            ),
            // A normal $or failed in every clause; an inverted one lists its matches.
            Node::Or(clauses) => logical(
                "$or",
                clauses,
                doc,
                sense,
                sense == Sense::Inverted,
                sense.pick("clausesNotSatisfied", "clausesSatisfied"),
            ),
            // $nor is an $or of its clauses, negated.
            Node::Nor(clauses) => logical(
                "$nor",
                clauses,
                doc,
                sense.flip(),
                sense == Sense::Normal,
                sense.flip().pick("clausesNotSatisfied", "clausesSatisfied"),
            ),
            Node::Not(child) => doc! {
                "operatorName": "$not",
                "details": child.explain(doc, sense.flip()),
            },
            Node::Leaf(leaf) => {
                let sense = if leaf.negated { sense.flip() } else { sense };
                leaf.explain(doc, sense)
            }
            Node::Expr { spec, matcher } => explain_expr(spec, matcher, doc, sense),
            Node::Always(b) => {
                let name = if *b { "$alwaysTrue" } else { "$alwaysFalse" };
                doc! {
                    "operatorName": name,
                    "specifiedAs": {name: 1},
                    "reason": sense.pick(
                        "expression always evaluates to false",
                        "expression always evaluates to true",
                    ),
                }
            }
            // mongod details a schema's failure only; a schema that matched under $not or
            // $nor says so.
            Node::JsonSchema(schema) => match sense {
                Sense::Normal => schema.explain(doc),
                Sense::Inverted => doc! {"operatorName": "$jsonSchema", "reason": "schema matched"},
            },
            Node::Opaque {
                op, specified_as, ..
            } => doc! {"operatorName": op.clone(), "specifiedAs": specified_as.clone()},
        }
    }
}

fn any_matches(clauses: &[Node], doc: &Document) -> Parsed<bool> {
    for c in clauses {
        if c.matches(doc)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The error of a logical operator: its clauses (all of them, or when `only_contributing`
/// those that explain the outcome), each explained in `child_sense`, under `key`.
fn logical(
    name: &str,
    clauses: &[Node],
    doc: &Document,
    child_sense: Sense,
    only_contributing: bool,
    key: &str,
) -> Document {
    let entries: Vec<Bson> = clauses
        .iter()
        .enumerate()
        .filter(|(_, c)| !only_contributing || c.contributes(doc, child_sense))
        .map(|(i, c)| {
            Bson::Document(doc! {
                "index": i32::try_from(i).unwrap_or(i32::MAX),
                "details": c.explain(doc, child_sense),
            })
        })
        .collect();
    doc! {"operatorName": name, key: entries}
}

fn explain_expr(spec: &Bson, matcher: &Matcher, doc: &Document, sense: Sense) -> Document {
    let mut out = doc! {"operatorName": "$expr", "specifiedAs": {"$expr": spec.clone()}};
    let vars = Variables {
        collator: matcher.collator_arc().cloned(),
        ..Default::default()
    }
    .with_now();
    match crate::expr::evaluate_opt(spec, doc, &vars) {
        Ok(result) => {
            out.insert(
                "reason",
                sense.pick("expression did not match", "expression did match"),
            );
            if let Some(v) = result {
                out.insert("expressionResult", v);
            }
        }
        Err(e) => {
            out.insert("reason", "failed to evaluate aggregation expression");
            out.insert(
                "details",
                doc! {"code": e.code, "codeName": e.code_name(), "errmsg": e.message},
            );
        }
    }
    out
}

impl Leaf {
    fn explain(&self, doc: &Document, sense: Sense) -> Document {
        let mut out =
            doc! {"operatorName": self.op.clone(), "specifiedAs": self.specified_as.clone()};
        let (normal, inverted) = self.kind.reasons();
        if self.kind == LeafKind::Exists {
            out.insert("reason", sense.pick(normal, inverted));
            return out;
        }
        if self.kind == LeafKind::Other {
            return out;
        }
        let parts: Vec<&str> = self.path.split('.').collect();
        let Some(values) = values_at(doc, &parts, self.kind.leaf_arrays()) else {
            out.insert("reason", "field was missing");
            return out;
        };
        if let Some(expected) = self.kind.expected_types() {
            let none_expected = !values
                .items
                .iter()
                .any(|v| expected.contains(&type_name(v)));
            if none_expected {
                out.insert("reason", "type did not match");
                insert_considered_types(&mut out, &values.items);
                insert_names(&mut out, "expectedType", "expectedTypes", &expected);
            }
        }
        if !out.contains_key("reason") {
            out.insert("reason", sense.pick(normal, inverted));
        }
        insert_considered_values(&mut out, &values);
        if self.kind == LeafKind::Type {
            insert_considered_types(&mut out, &values.items);
        }
        out
    }
}

/// The values a path reaches, at most [`MAX_CONSIDERED_VALUES`] of them.
struct Values {
    items: Vec<Bson>,
    truncated: bool,
}

/// The values at `parts` in `doc` (arrays along the path are traversed, as the matcher
/// does), or None when the path does not exist.
fn values_at(doc: &Document, parts: &[&str], leaf_arrays: LeafArrays) -> Option<Values> {
    let mut all = Vec::new();
    let mut reached = false;
    if let Some(first) = doc.get(parts[0]) {
        collect_values(first, &parts[1..], leaf_arrays, &mut all, &mut reached);
    }
    if !reached {
        return None;
    }
    let truncated = all.len() > MAX_CONSIDERED_VALUES;
    all.truncate(MAX_CONSIDERED_VALUES);
    Some(Values {
        items: all,
        truncated,
    })
}

fn collect_values(
    v: &Bson,
    rest: &[&str],
    leaf_arrays: LeafArrays,
    out: &mut Vec<Bson>,
    reached: &mut bool,
) {
    if rest.is_empty() {
        *reached = true;
        match (v, leaf_arrays) {
            (Bson::Array(items), LeafArrays::Elements) => out.extend(items.iter().cloned()),
            _ => out.push(v.clone()),
        }
        return;
    }
    match v {
        Bson::Document(d) => {
            if let Some(next) = d.get(rest[0]) {
                collect_values(next, &rest[1..], leaf_arrays, out, reached);
            }
        }
        Bson::Array(items) => {
            if let Some(next) = parse_index(rest[0]).and_then(|i| items.get(i)) {
                collect_values(next, &rest[1..], leaf_arrays, out, reached);
            }
            for item in items {
                if let Bson::Document(_) = item {
                    collect_values(item, rest, leaf_arrays, out, reached);
                }
            }
        }
        _ => {}
    }
}

/// `consideredValue` for one value, else `consideredValues` (an empty array included).
fn insert_considered_values(out: &mut Document, values: &Values) {
    if values.items.len() == 1 {
        out.insert("consideredValue", values.items[0].clone());
    } else {
        out.insert("consideredValues", values.items.clone());
    }
    if values.truncated {
        out.insert("consideredValuesTruncated", true);
    }
}

/// `consideredType` or `consideredTypes` (sorted names); nothing for no value.
fn insert_considered_types(out: &mut Document, values: &[Bson]) {
    let types: BTreeSet<&str> = values.iter().map(type_name).collect();
    let types: Vec<&str> = types.into_iter().collect();
    if !types.is_empty() {
        insert_names(out, "consideredType", "consideredTypes", &types);
    }
}

fn insert_names(out: &mut Document, one: &str, many: &str, names: &[&str]) {
    match names {
        [name] => {
            out.insert(one, *name);
        }
        _ => {
            out.insert(
                many,
                names
                    .iter()
                    .map(|n| Bson::String(n.to_string()))
                    .collect::<Vec<_>>(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! Cases from mongod's doc_validation_error_test.cpp and doc_validation_error.js.
    use super::*;

    fn explain(validator: Document, document: Document) -> Document {
        let m = Matcher::new(&validator).unwrap();
        assert!(
            !m.matches(&document),
            "the document must fail the validator"
        );
        details(&validator, &document, None).unwrap()
    }

    fn re(pattern: &str) -> Bson {
        Bson::RegularExpression(bson::Regex {
            pattern: pattern.into(),
            options: String::new(),
        })
    }

    #[test]
    fn comparison_leaf() {
        assert_eq!(
            explain(doc! {"a": {"$eq": 2}}, doc! {"a": 1}),
            doc! {"operatorName": "$eq", "specifiedAs": {"a": {"$eq": 2}}, "reason": "comparison failed", "consideredValue": 1}
        );
        assert_eq!(
            explain(doc! {"a": 2}, doc! {"a": 1}),
            doc! {"operatorName": "$eq", "specifiedAs": {"a": 2}, "reason": "comparison failed", "consideredValue": 1}
        );
        assert_eq!(
            explain(doc! {"a": {"$lt": 0}}, doc! {"b": 1}),
            doc! {"operatorName": "$lt", "specifiedAs": {"a": {"$lt": 0}}, "reason": "field was missing"}
        );
    }

    #[test]
    fn arrays_along_the_path_are_considered_value_by_value() {
        assert_eq!(
            explain(doc! {"a": {"$eq": 2}}, doc! {"a": [3, 4, 5]}),
            doc! {"operatorName": "$eq", "specifiedAs": {"a": {"$eq": 2}}, "reason": "comparison failed", "consideredValues": [3, 4, 5]}
        );
        assert_eq!(
            explain(doc! {"a.b": {"$eq": 2}}, doc! {"a": [{"b": 3}]}),
            doc! {"operatorName": "$eq", "specifiedAs": {"a.b": {"$eq": 2}}, "reason": "comparison failed", "consideredValue": 3}
        );
        assert_eq!(
            explain(
                doc! {"a.b": {"$eq": 0}},
                doc! {"a": [{"b": [1, 2]}, {"b": [3, 4]}]}
            ),
            doc! {"operatorName": "$eq", "specifiedAs": {"a.b": {"$eq": 0}}, "reason": "comparison failed", "consideredValues": [1, 2, 3, 4]}
        );
        assert_eq!(
            explain(doc! {"a": {"$gte": 3}}, doc! {"a": []}),
            doc! {"operatorName": "$gte", "specifiedAs": {"a": {"$gte": 3}}, "reason": "comparison failed", "consideredValues": []}
        );
    }

    #[test]
    fn considered_values_stop_at_ten() {
        let values: Vec<i32> = (0..12).collect();
        let out = explain(doc! {"a": {"$lt": 0}}, doc! {"a": values});
        let expected: Vec<Bson> = (0..10).map(Bson::Int32).collect();
        assert_eq!(out.get_array("consideredValues").unwrap(), &expected);
        assert_eq!(out.get_bool("consideredValuesTruncated"), Ok(true));
    }

    #[test]
    fn negated_operators_report_success() {
        assert_eq!(
            explain(doc! {"a": {"$ne": 2}}, doc! {"a": 2}),
            doc! {"operatorName": "$ne", "specifiedAs": {"a": {"$ne": 2}}, "reason": "comparison succeeded", "consideredValue": 2}
        );
        assert_eq!(
            explain(doc! {"a": {"$nin": [1, 2, 3]}}, doc! {"a": 3}),
            doc! {"operatorName": "$nin", "specifiedAs": {"a": {"$nin": [1, 2, 3]}}, "reason": "matching value found in array", "consideredValue": 3}
        );
        assert_eq!(
            explain(doc! {"a": {"$exists": false}}, doc! {"a": 1}),
            doc! {"operatorName": "$exists", "specifiedAs": {"a": {"$exists": false}}, "reason": "path does exist"}
        );
    }

    #[test]
    fn in_exists_and_type() {
        assert_eq!(
            explain(doc! {"a": {"$in": [1, 2, 3]}}, doc! {"a": 4}),
            doc! {"operatorName": "$in", "specifiedAs": {"a": {"$in": [1, 2, 3]}}, "reason": "no matching value found in array", "consideredValue": 4}
        );
        assert_eq!(
            explain(doc! {"a": {"$exists": true}}, doc! {"b": 1}),
            doc! {"operatorName": "$exists", "specifiedAs": {"a": {"$exists": true}}, "reason": "path does not exist"}
        );
        assert_eq!(
            explain(doc! {"a": {"$type": "int"}}, doc! {"a": "one"}),
            doc! {"operatorName": "$type", "specifiedAs": {"a": {"$type": "int"}}, "reason": "type did not match", "consideredValue": "one", "consideredType": "string"}
        );
        assert_eq!(
            explain(doc! {"a": {"$type": "double"}}, doc! {"a": ["x", 1]}),
            doc! {"operatorName": "$type", "specifiedAs": {"a": {"$type": "double"}}, "reason": "type did not match", "consideredValues": ["x", 1], "consideredTypes": ["int", "string"]}
        );
    }

    #[test]
    fn regex_of_a_wrong_type_says_so() {
        assert_eq!(
            explain(doc! {"a": {"$regex": "^x", "$options": "i"}}, doc! {"a": 5}),
            doc! {
                "operatorName": "$regex",
                "specifiedAs": {"a": {"$regex": "^x", "$options": "i"}},
                "reason": "type did not match",
                "consideredType": "int",
                "expectedTypes": ["regex", "string", "symbol"],
                "consideredValue": 5,
            }
        );
    }

    #[test]
    fn and_lists_its_failing_clauses() {
        assert_eq!(
            explain(
                doc! {"$and": [{"b": {"$gt": 0}}, {"a": {"$lt": 10}}]},
                doc! {"a": 11, "b": 2}
            ),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$lt", "specifiedAs": {"a": {"$lt": 10}}, "reason": "comparison failed", "consideredValue": 11}}]}
        );
        // Every operator of a field is a clause of the implicit $and.
        assert_eq!(
            explain(doc! {"a": {"$gt": 0, "$lt": 10}}, doc! {"a": 11}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$lt", "specifiedAs": {"a": {"$lt": 10}}, "reason": "comparison failed", "consideredValue": 11}}]}
        );
        assert_eq!(
            explain(
                doc! {"$and": [{"$and": [{"a": 1}]}, {"$and": [{"b": 1}]}]},
                doc! {"a": 1, "b": 2}
            ),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$and", "clausesNotSatisfied": [{"index": 0, "details": {
                "operatorName": "$eq", "specifiedAs": {"b": 1}, "reason": "comparison failed", "consideredValue": 2}}]}}]}
        );
    }

    #[test]
    fn or_lists_every_clause_and_nor_its_matching_ones() {
        let contacts = doc! {"$or": [
            {"phone": {"$type": "string"}},
            {"email": {"$regex": re("@mongodb\\.com$")}},
            {"status": {"$in": ["Unknown", "Incomplete"]}},
        ]};
        assert_eq!(
            explain(contacts, doc! {"email": "info@mongodb.co"}),
            doc! {"operatorName": "$or", "clausesNotSatisfied": [
                {"index": 0, "details": {"operatorName": "$type", "specifiedAs": {"phone": {"$type": "string"}}, "reason": "field was missing"}},
                {"index": 1, "details": {"operatorName": "$regex", "specifiedAs": {"email": {"$regex": re("@mongodb\\.com$")}}, "reason": "regular expression did not match", "consideredValue": "info@mongodb.co"}},
                {"index": 2, "details": {"operatorName": "$in", "specifiedAs": {"status": {"$in": ["Unknown", "Incomplete"]}}, "reason": "field was missing"}},
            ]}
        );
        assert_eq!(
            explain(
                doc! {"$nor": [{"a": {"$gt": 10}}, {"b": {"$lt": 10}}]},
                doc! {"a": 9, "b": 9}
            ),
            doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 1, "details": {
            "operatorName": "$lt", "specifiedAs": {"b": {"$lt": 10}}, "reason": "comparison succeeded", "consideredValue": 9}}]}
        );
    }

    #[test]
    fn not_explains_its_operand_inverted() {
        assert_eq!(
            explain(doc! {"a": {"$not": {"$lt": 10}}}, doc! {"a": 9}),
            doc! {"operatorName": "$not", "details": {
            "operatorName": "$lt", "specifiedAs": {"a": {"$lt": 10}}, "reason": "comparison succeeded", "consideredValue": 9}}
        );
        assert_eq!(
            explain(doc! {"a": {"$not": {"$lt": 20, "$gt": 5}}}, doc! {"a": 10}),
            doc! {"operatorName": "$not", "details": {"operatorName": "$and", "clausesSatisfied": [
                {"index": 0, "details": {"operatorName": "$lt", "specifiedAs": {"a": {"$lt": 20}}, "reason": "comparison succeeded", "consideredValue": 10}},
                {"index": 1, "details": {"operatorName": "$gt", "specifiedAs": {"a": {"$gt": 5}}, "reason": "comparison succeeded", "consideredValue": 10}},
            ]}}
        );
        assert_eq!(
            explain(doc! {"a": {"$not": {"$not": {"$lt": 10}}}}, doc! {"a": 11}),
            doc! {"operatorName": "$not", "details": {"operatorName": "$not", "details": {
            "operatorName": "$lt", "specifiedAs": {"a": {"$lt": 10}}, "reason": "comparison failed", "consideredValue": 11}}}
        );
    }

    #[test]
    fn nested_logical_operators() {
        let validator = doc! {"$and": [
            {"$or": [{"price": {"$lt": 20}}]},
            {"$nor": [{"qty": {"$gt": 30}}, {"qty": {"$not": {"$lt": 20}}}]},
        ]};
        assert_eq!(
            explain(validator, doc! {"price": 10, "qty": 25}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$nor", "clausesSatisfied": [{"index": 1, "details": {
                "operatorName": "$not", "details": {
                    "operatorName": "$lt", "specifiedAs": {"qty": {"$lt": 20}}, "reason": "comparison failed", "consideredValue": 25}}}]}}]}
        );
    }

    #[test]
    fn expr_reports_its_result_or_its_error() {
        assert_eq!(
            explain(doc! {"$expr": {"$eq": ["$a", "$b"]}}, doc! {"a": 1, "b": 2}),
            doc! {"operatorName": "$expr", "specifiedAs": {"$expr": {"$eq": ["$a", "$b"]}}, "reason": "expression did not match", "expressionResult": false}
        );
        assert_eq!(
            explain(
                doc! {"$nor": [{"$expr": {"$eq": ["$a", "$b"]}}]},
                doc! {"a": 1, "b": 1}
            ),
            doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 0, "details": {
            "operatorName": "$expr", "specifiedAs": {"$expr": {"$eq": ["$a", "$b"]}}, "reason": "expression did match", "expressionResult": true}}]}
        );
        let divide = doc! {"$divide": [10, 0]};
        let e = crate::expr::evaluate(&Bson::Document(divide.clone()), &doc! {}, &Variables::new())
            .unwrap_err();
        assert_eq!(
            details(&doc! {"$expr": divide.clone()}, &doc! {}, None).unwrap(),
            doc! {
                "operatorName": "$expr",
                "specifiedAs": {"$expr": divide},
                "reason": "failed to evaluate aggregation expression",
                "details": {"code": e.code, "codeName": e.code_name(), "errmsg": e.message},
            }
        );
    }

    #[test]
    fn an_error_too_large_is_truncated_then_replaced_by_a_note() {
        let validator = doc! {"$or": [{"a": {"$type": "int"}}, {"b": {"$in": ["x".repeat(100)]}}]};
        let document = doc! {"_id": 1, "a": "y".repeat(1000), "b": "z"};
        let full = err_info_within(&validator, &document, None, 4096);
        assert_eq!(
            full.get_document("details"),
            Ok(&explain(validator.clone(), document.clone()))
        );
        assert_eq!(
            err_info_within(&validator, &document, None, 1000),
            doc! {"failingDocumentId": 1, "truncated": true, "details": {"operatorName": "$or", "clausesNotSatisfied": [
                {"index": 0, "details": {"operatorName": "$type", "reason": "type did not match", "consideredType": "string"}},
                {"index": 1, "details": {"operatorName": "$in", "reason": "no matching value found in array"}},
            ]}}
        );
        assert_eq!(
            err_info_within(&validator, &document, None, 100),
            doc! {"failingDocumentId": 1, "note": "detailed error was too large"}
        );
    }

    #[test]
    fn an_error_nested_too_deeply_says_so() {
        let mut validator = doc! {"a": 1};
        for _ in 0..70 {
            validator = doc! {"$and": [validator]};
        }
        assert_eq!(
            err_info(&validator, &doc! {"_id": 1, "a": 2}, None),
            doc! {"reason": "generated error was too deeply nested", "truncated": true}
        );
        let shallow = doc! {"$and": [{"$and": [{"a": 1}]}]};
        let info = err_info(&shallow, &doc! {"_id": 1, "a": 2}, None);
        assert_eq!(info.get_i32("failingDocumentId"), Ok(1));
    }

    #[test]
    fn comments_are_not_clauses() {
        assert_eq!(
            explain(
                doc! {"$comment": "c", "a": {"$gt": 1}, "b": 1},
                doc! {"a": 0, "b": 1}
            ),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 0, "details": {
            "operatorName": "$gt", "specifiedAs": {"a": {"$gt": 1}}, "reason": "comparison failed", "consideredValue": 0}}]}
        );
    }

    #[test]
    fn array_operators_consider_the_whole_array() {
        assert_eq!(
            explain(doc! {"a": {"$size": 2}}, doc! {"a": [1]}),
            doc! {"operatorName": "$size", "specifiedAs": {"a": {"$size": 2}}, "reason": "array length was not equal to given size", "consideredValue": [1]}
        );
        assert_eq!(
            explain(doc! {"a": {"$size": 2}}, doc! {"a": 1}),
            doc! {"operatorName": "$size", "specifiedAs": {"a": {"$size": 2}}, "reason": "type did not match", "consideredType": "int", "expectedType": "array", "consideredValue": 1}
        );
        assert_eq!(
            explain(doc! {"a": {"$all": [1, 2]}}, doc! {"a": [1]}),
            doc! {"operatorName": "$all", "specifiedAs": {"a": {"$all": [1, 2]}}, "reason": "array did not contain all specified values", "consideredValue": [1]}
        );
    }
}

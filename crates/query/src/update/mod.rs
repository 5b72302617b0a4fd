//! Update operators: parsing an update specification once (`UpdateSpec::parse`) and
//! applying it to documents (`UpdateSpec::apply`) with MongoDB 7.0 semantics.
//!
//! Operator updates are parsed into a tree shaped like mongod's `UpdateNode` tree: one
//! internal node per path component (children kept in lexicographic order, which is the
//! order mongod applies them and therefore the order newly created fields appear in),
//! array nodes for `$[]` / `$[<identifier>]`, a separate positional (`$`) child, and one
//! leaf per operator target. Conflicting paths are detected while building the tree.

use bson::{Bson, Document};
use std::collections::{BTreeMap, BTreeSet};

use crate::error::{codes, Error};
use crate::Result;

mod apply;
#[cfg(test)]
mod tests;
pub(crate) mod util;

pub use util::{bson_to_string, type_name};

/// What the update engine needs from the query layer: match a value/document against a condition.
///
/// Contract (as mongod's `$pull`): if the condition's first field is a value operator
/// (`$eq`, `$gt`, `$in`, `$regex`, `$elemMatch`, `$exists`, `$not`, ...) the condition applies
/// to `value` itself (as `{"": condition}` would match `{"": value}`); otherwise (plain field
/// names, `$and`/`$or`/`$nor`/`$expr`) it is a query matched against `value`, which the engine
/// only passes when it is a document. Array filters are passed as the filter document
/// (e.g. `{"x.a": {$gt: 1}}`) together with the document `{x: <array element>}`.
pub trait ConditionMatcher {
    fn matches_value(&self, condition: &Document, value: &Bson) -> Result<bool>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    Operators,
    Replacement,
    Pipeline,
}

pub struct ApplyContext<'a> {
    /// True during an upsert's insert: enables `$setOnInsert`, lifts the `_id` immutability
    /// and top-level `$`-prefixed field checks.
    pub is_insert: bool,
    /// For the positional `$` operator: the index of the first array element the query matched.
    pub positional: Option<usize>,
    /// The time used by `$currentDate`.
    pub now: bson::DateTime,
    pub matcher: &'a dyn ConditionMatcher,
    /// The operation's collation: `$addToSet`, `$pull`, `$pullAll`, `$min`, `$max` and
    /// `$push`'s `$sort` compare strings under it.
    pub collator: Option<&'a crate::collation::Collator>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateOutcome {
    /// False when the document is identical (same bytes) afterwards.
    pub modified: bool,
    /// Dotted paths that were set, with their new values (updateDescription.updatedFields).
    pub updated_fields: Document,
    /// Dotted paths that were removed (updateDescription.removedFields).
    pub removed_fields: Vec<String>,
    /// updateDescription.truncatedArrays. This engine reports shrunk arrays as whole-array
    /// updates instead, so it is currently always empty.
    pub truncated_arrays: Vec<(String, u32)>,
}

#[derive(Debug, Clone)]
pub struct UpdateSpec {
    body: Body,
    /// identifier -> the filter document as given (e.g. `{"x.a": {$gt: 1}}`).
    array_filters: BTreeMap<String, Document>,
    positional: bool,
}

#[derive(Debug, Clone)]
enum Body {
    Operators(ObjectNode),
    Replacement(Document),
    Pipeline(Vec<Document>),
}

// ---------------------------------------------------------------------------
// The update tree
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Object(ObjectNode),
    Array(ArrayNode),
    Leaf(Op),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ObjectNode {
    pub(crate) children: BTreeMap<String, Node>,
    pub(crate) positional: Option<Box<Node>>,
}

/// Children keyed by array-filter identifier; "" stands for `$[]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ArrayNode {
    pub(crate) children: BTreeMap<String, Node>,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    CurrentDate {
        timestamp: bool,
    },
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    Pull(PullCond),
    PullAll(Vec<Bson>),
    Pop {
        first: bool,
    },
    Bit(Vec<(BitOp, Bson)>),
    /// Lives at the destination path; `from` is the (static) source path.
    Rename {
        from: Vec<String>,
    },
    /// Occupies the source path of a `$rename` so that conflicts are detected.
    Placeholder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BitOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone)]
pub(crate) struct PushSpec {
    pub(crate) each: Vec<Bson>,
    pub(crate) slice: Option<i64>,
    pub(crate) sort: Option<SortSpec>,
    pub(crate) position: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) enum SortSpec {
    /// `$sort: 1` / `$sort: -1`: compare whole elements; true = ascending.
    Whole(bool),
    /// `$sort: {field: 1, ...}`.
    Fields(Vec<(String, bool)>),
}

#[derive(Debug, Clone)]
pub(crate) enum PullCond {
    /// Remove elements equal to this value.
    Equal(Bson),
    /// A query over document elements (`{$pull: {arr: {a: 1}}}`).
    Query(Document),
    /// A condition on the element value itself (`{$pull: {arr: {$gte: 6}}}` or a regex).
    Wrapped(Document),
}

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

/// The stages a pipeline-style update may use.
const UPDATE_PIPELINE_STAGES: &[&str] = &[
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

/// Checks a pipeline-style update as mongod does when it parses the command, before any
/// document is read: every stage is known and allowed in an update, and parses.
pub fn validate_update_pipeline(stages: &[Bson]) -> Result<()> {
    for s in stages {
        let Bson::Document(d) = s else {
            return Err(Error::type_mismatch(
                "Each element of the 'pipeline' array must be an object",
            ));
        };
        // The aggregation parser's errors first (an unknown stage is 40324 there).
        crate::pipeline::Pipeline::parse(std::slice::from_ref(d), "")?;
        if let Some(name) = d.keys().next() {
            if !UPDATE_PIPELINE_STAGES.contains(&name.as_str()) {
                return Err(Error::new(
                    crate::error::codes::INVALID_OPTIONS,
                    format!("{name} is not allowed to be used within an update"),
                ));
            }
        }
    }
    Ok(())
}

impl UpdateSpec {
    /// Parses an update: a document of operators, a replacement document, or a pipeline (array).
    pub fn parse(update: &Bson, array_filters: Option<&[Document]>) -> Result<UpdateSpec> {
        let filters = parse_array_filters(array_filters.unwrap_or(&[]))?;
        match update {
            Bson::Array(stages) => {
                if !filters.is_empty() {
                    return Err(Error::failed_to_parse(
                        "arrayFilters may not be specified for pipeline-syle updates",
                    ));
                }
                let mut out = Vec::with_capacity(stages.len());
                for s in stages {
                    match s {
                        Bson::Document(d) => out.push(d.clone()),
                        _ => {
                            return Err(Error::type_mismatch(
                                "Each element of the 'pipeline' array must be an object",
                            ))
                        }
                    }
                }
                Ok(UpdateSpec {
                    body: Body::Pipeline(out),
                    array_filters: filters,
                    positional: false,
                })
            }
            Bson::Document(d) => {
                let is_ops = d.keys().next().is_some_and(|k| k.starts_with('$'));
                if !is_ops {
                    validate_replacement(d)?;
                    return Ok(UpdateSpec {
                        body: Body::Replacement(d.clone()),
                        array_filters: filters,
                        positional: false,
                    });
                }
                let mut root = Node::Object(ObjectNode::default());
                let mut found = BTreeSet::new();
                let mut positional = false;
                for (op_name, spec) in d {
                    let kind = OpKind::from_name(op_name).ok_or_else(|| {
                        Error::failed_to_parse(format!(
                            "Unknown modifier: {op_name}. Expected a valid update modifier or pipeline-style update specified as an array"
                        ))
                    })?;
                    let fields = match spec {
                        Bson::Document(f) => f,
                        other => {
                            return Err(Error::failed_to_parse(format!(
                                "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{}}}",
                                type_name(other),
                                util::elem_to_string(op_name, other)
                            )))
                        }
                    };
                    for (path, arg) in fields {
                        positional |=
                            parse_and_merge(&mut root, kind, path, arg, &filters, &mut found)?;
                    }
                }
                for id in filters.keys() {
                    if !found.contains(id) {
                        return Err(Error::failed_to_parse(format!(
                            "The array filter for identifier '{id}' was not used in the update {}",
                            util::doc_to_string(d)
                        )));
                    }
                }
                let root = match root {
                    Node::Object(o) => o,
                    _ => unreachable!(),
                };
                Ok(UpdateSpec {
                    body: Body::Operators(root),
                    array_filters: filters,
                    positional,
                })
            }
            _ => Err(Error::failed_to_parse(
                "Update argument must be either an object or an array",
            )),
        }
    }

    pub fn kind(&self) -> UpdateKind {
        match self.body {
            Body::Operators(_) => UpdateKind::Operators,
            Body::Replacement(_) => UpdateKind::Replacement,
            Body::Pipeline(_) => UpdateKind::Pipeline,
        }
    }

    /// The stages of a pipeline-style update (run by the engine through `crate::pipeline`).
    pub fn pipeline(&self) -> Option<&[Document]> {
        match &self.body {
            Body::Pipeline(p) => Some(p),
            _ => None,
        }
    }

    /// The replacement document of a replacement-style update.
    pub fn replacement(&self) -> Option<&Document> {
        match &self.body {
            Body::Replacement(d) => Some(d),
            _ => None,
        }
    }

    /// True when some path uses the positional `$` operator (the caller must then supply
    /// `ApplyContext::positional`).
    pub fn uses_positional(&self) -> bool {
        self.positional
    }

    /// Applies the update to `doc` in place. On error `doc` is left unchanged.
    pub fn apply(&self, doc: &mut Document, ctx: &ApplyContext) -> Result<UpdateOutcome> {
        match &self.body {
            Body::Operators(root) => apply::apply_operators(root, &self.array_filters, doc, ctx),
            Body::Replacement(r) => apply::apply_replacement(r, doc),
            Body::Pipeline(_) => Err(Error::internal(
                "pipeline-style updates are run by the engine through crate::pipeline",
            )),
        }
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Set,
    SetOnInsert,
    Unset,
    Inc,
    Mul,
    Min,
    Max,
    CurrentDate,
    Push,
    AddToSet,
    Pull,
    PullAll,
    Pop,
    Bit,
    Rename,
    Placeholder,
}

impl OpKind {
    fn from_name(name: &str) -> Option<OpKind> {
        Some(match name {
            "$set" => OpKind::Set,
            "$setOnInsert" => OpKind::SetOnInsert,
            "$unset" => OpKind::Unset,
            "$inc" => OpKind::Inc,
            "$mul" => OpKind::Mul,
            "$min" => OpKind::Min,
            "$max" => OpKind::Max,
            "$currentDate" => OpKind::CurrentDate,
            "$push" => OpKind::Push,
            "$addToSet" => OpKind::AddToSet,
            "$pull" => OpKind::Pull,
            "$pullAll" => OpKind::PullAll,
            "$pop" => OpKind::Pop,
            "$bit" => OpKind::Bit,
            "$rename" => OpKind::Rename,
            _ => return None,
        })
    }
}

fn is_array_filter_identifier(part: &str) -> bool {
    part.len() >= 3 && part.starts_with("$[") && part.ends_with(']')
}

fn is_dynamic(parts: &[&str]) -> bool {
    parts
        .iter()
        .any(|p| *p == "$" || is_array_filter_identifier(p))
}

/// fieldchecker::isUpdatable: no empty path, no empty component.
fn check_updatable(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::new(56, "An empty update path is not valid."));
    }
    if path.split('.').any(|p| p.is_empty()) {
        return Err(Error::new(
            56,
            format!("The update path '{path}' contains an empty field name, which is not allowed."),
        ));
    }
    Ok(())
}

fn check_positional(path: &str, parts: &[&str]) -> Result<bool> {
    let count = parts.iter().filter(|p| **p == "$").count();
    if count == 0 {
        return Ok(false);
    }
    if count > 1 {
        return Err(Error::bad_value(format!(
            "Too many positional (i.e. '$') elements found in path '{path}'"
        )));
    }
    if parts[0] == "$" {
        return Err(Error::bad_value(format!(
            "Cannot have positional (i.e. '$') element in the first position in path '{path}'"
        )));
    }
    Ok(true)
}

fn parse_identifier(
    part: &str,
    position: usize,
    path: &str,
    filters: &BTreeMap<String, Document>,
    found: &mut BTreeSet<String>,
) -> Result<String> {
    if position == 0 {
        return Err(Error::bad_value(format!(
            "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position in path '{path}'"
        )));
    }
    let id = &part[2..part.len() - 1];
    if !id.is_empty() {
        if !filters.contains_key(id) {
            return Err(Error::bad_value(format!(
                "No array filter found for identifier '{id}' in path '{path}'"
            )));
        }
        found.insert(id.to_string());
    }
    Ok(id.to_string())
}

/// Adds one operator target to the tree (mongod's UpdateObjectNode::parseAndMerge).
/// Returns whether the path uses the positional operator.
fn parse_and_merge(
    root: &mut Node,
    kind: OpKind,
    field: &str,
    arg: &Bson,
    filters: &BTreeMap<String, Document>,
    found: &mut BTreeSet<String>,
) -> Result<bool> {
    let path: String = if kind == OpKind::Rename {
        parse_and_merge(root, OpKind::Placeholder, field, arg, filters, found)?;
        match arg {
            Bson::String(s) => s.clone(),
            _ => {
                return Err(Error::bad_value(format!(
                    "The 'to' field for $rename must be a string: {}",
                    util::elem_to_string(field, arg)
                )))
            }
        }
    } else {
        field.to_string()
    };
    check_updatable(&path)?;
    let parts: Vec<&str> = path.split('.').collect();
    let positional = check_positional(&path, &parts)?;

    let leaf = make_leaf(kind, field, &path, arg)?;

    // Walk/create internal nodes.
    let mut current: &mut Node = root;
    for i in 0..parts.len() - 1 {
        let name = if is_array_filter_identifier(parts[i]) {
            parse_identifier(parts[i], i, &path, filters, found)?
        } else {
            parts[i].to_string()
        };
        let should_be_array = is_array_filter_identifier(parts[i + 1]);
        let conflict = || {
            Error::new(
                codes::CONFLICTING_UPDATE_OPERATORS,
                format!(
                    "Updating the path '{path}' would create a conflict at '{}'",
                    parts[..=i].join(".")
                ),
            )
        };
        let existing_kind = child_slot(current, &name).map(|n| match n {
            Node::Array(_) => 1,
            Node::Object(_) => 2,
            Node::Leaf(_) => 3,
        });
        match existing_kind {
            Some(kind) => {
                if kind != if should_be_array { 1 } else { 2 } {
                    return Err(conflict());
                }
                current = child_slot(current, &name).expect("child exists");
            }
            None => {
                let new = if should_be_array {
                    Node::Array(ArrayNode::default())
                } else {
                    Node::Object(ObjectNode::default())
                };
                current = insert_child(current, name, new);
            }
        }
    }
    let last = parts.len() - 1;
    let name = if is_array_filter_identifier(parts[last]) {
        parse_identifier(parts[last], last, &path, filters, found)?
    } else {
        parts[last].to_string()
    };
    if child_slot(current, &name).is_some() {
        return Err(Error::new(
            codes::CONFLICTING_UPDATE_OPERATORS,
            format!("Updating the path '{path}' would create a conflict at '{path}'"),
        ));
    }
    insert_child(current, name, Node::Leaf(leaf));
    Ok(positional)
}

fn child_slot<'a>(node: &'a mut Node, name: &str) -> Option<&'a mut Node> {
    match node {
        Node::Object(o) => {
            if name == "$" {
                o.positional.as_deref_mut()
            } else {
                o.children.get_mut(name)
            }
        }
        Node::Array(a) => a.children.get_mut(name),
        Node::Leaf(_) => None,
    }
}

fn insert_child(node: &mut Node, name: String, child: Node) -> &mut Node {
    match node {
        Node::Object(o) => {
            if name == "$" {
                o.positional = Some(Box::new(child));
                o.positional.as_deref_mut().unwrap()
            } else {
                o.children.entry(name).or_insert(child)
            }
        }
        Node::Array(a) => a.children.entry(name).or_insert(child),
        Node::Leaf(_) => unreachable!("leaves have no children"),
    }
}

fn num_to_string(v: &Bson) -> String {
    match v {
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        other => {
            let f = crate::compare::as_f64(other).unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{}", f as i64)
            } else {
                format!("{f}")
            }
        }
    }
}

/// An integral value (int, long, or a double with no fractional part) as i64.
fn integral(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(*i as i64),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => Some(*d as i64),
        Bson::Decimal128(_) => {
            let f = crate::compare::as_f64(v)?;
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                Some(f as i64)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Query keywords that make a `$pull` condition a query over the element document rather
/// than a condition on the element value.
fn is_query_level_operator(name: &str) -> bool {
    matches!(
        name,
        "$and"
            | "$or"
            | "$nor"
            | "$expr"
            | "$where"
            | "$text"
            | "$comment"
            | "$jsonSchema"
            | "$alwaysTrue"
            | "$alwaysFalse"
    )
}

fn make_leaf(kind: OpKind, field: &str, path: &str, arg: &Bson) -> Result<Op> {
    Ok(match kind {
        OpKind::Set => Op::Set(arg.clone()),
        OpKind::SetOnInsert => Op::SetOnInsert(arg.clone()),
        OpKind::Unset => Op::Unset,
        OpKind::Placeholder => Op::Placeholder,
        OpKind::Inc | OpKind::Mul => {
            if !crate::compare::is_number(arg) {
                return Err(Error::type_mismatch(format!(
                    "Cannot {} with non-numeric argument: {{{}}}",
                    if kind == OpKind::Inc {
                        "increment"
                    } else {
                        "multiply"
                    },
                    util::elem_to_string(field, arg)
                )));
            }
            if kind == OpKind::Inc {
                Op::Inc(arg.clone())
            } else {
                Op::Mul(arg.clone())
            }
        }
        OpKind::Min => Op::Min(arg.clone()),
        OpKind::Max => Op::Max(arg.clone()),
        OpKind::CurrentDate => parse_current_date(arg)?,
        OpKind::Push => Op::Push(parse_push(arg)?),
        OpKind::AddToSet => {
            if let Bson::Document(d) = arg {
                if let Some((first, each)) = d.iter().next() {
                    if first == "$each" {
                        let Bson::Array(items) = each else {
                            return Err(Error::bad_value(format!(
                                "The argument to $each in $addToSet must be an array but it was of type {}",
                                type_name(each)
                            )));
                        };
                        if d.len() > 1 {
                            return Err(Error::bad_value(format!(
                                "Found unexpected fields after $each in $addToSet: {}",
                                util::doc_to_string(d)
                            )));
                        }
                        return Ok(Op::AddToSet(items.clone()));
                    }
                }
            }
            Op::AddToSet(vec![arg.clone()])
        }
        OpKind::Pull => Op::Pull(match arg {
            Bson::Document(d) => match d.keys().next() {
                Some(k) if k.starts_with('$') && !is_query_level_operator(k) => {
                    PullCond::Wrapped(d.clone())
                }
                _ => PullCond::Query(d.clone()),
            },
            Bson::RegularExpression(re) => {
                let mut c = Document::new();
                c.insert("$regex", re.pattern.clone());
                c.insert("$options", re.options.clone());
                PullCond::Wrapped(c)
            }
            other => PullCond::Equal(other.clone()),
        }),
        OpKind::PullAll => match arg {
            Bson::Array(a) => Op::PullAll(a.clone()),
            other => {
                return Err(Error::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        OpKind::Pop => {
            if !crate::compare::is_number(arg) {
                return Err(Error::failed_to_parse(format!(
                    "Expected a number in: {}",
                    util::elem_to_string(field, arg)
                )));
            }
            let n = crate::compare::as_f64(arg).unwrap_or(f64::NAN);
            if n != 1.0 && n != -1.0 {
                return Err(Error::failed_to_parse(format!(
                    "$pop expects 1 or -1, found: {}",
                    num_to_string(arg)
                )));
            }
            Op::Pop { first: n == -1.0 }
        }
        OpKind::Bit => Op::Bit(parse_bit(arg)?),
        OpKind::Rename => {
            let from: Vec<&str> = field.split('.').collect();
            let to: Vec<&str> = path.split('.').collect();
            if from == to {
                return Err(Error::bad_value(format!(
                    "The source and target field for $rename must differ: {}",
                    util::elem_to_string(field, arg)
                )));
            }
            let n = from.len().min(to.len());
            if from[..n] == to[..n] {
                return Err(Error::bad_value(format!(
                    "The source and target field for $rename must not be on the same path: {}",
                    util::elem_to_string(field, arg)
                )));
            }
            if is_dynamic(&from) {
                return Err(Error::bad_value(format!(
                    "The source field for $rename may not be dynamic: {field}"
                )));
            }
            if is_dynamic(&to) {
                return Err(Error::bad_value(format!(
                    "The destination field for $rename may not be dynamic: {path}"
                )));
            }
            Op::Rename {
                from: from.iter().map(|s| s.to_string()).collect(),
            }
        }
    })
}

fn parse_current_date(arg: &Bson) -> Result<Op> {
    match arg {
        Bson::Boolean(_) => Ok(Op::CurrentDate { timestamp: false }),
        Bson::Document(d) => {
            let mut found = None;
            for (k, v) in d {
                if k == "$type" {
                    if let Bson::String(s) = v {
                        match s.as_str() {
                            "timestamp" => found = Some(true),
                            "date" => found = Some(false),
                            _ => {}
                        }
                    }
                } else {
                    return Err(Error::bad_value(format!("Unrecognized $currentDate option: {k}")));
                }
            }
            match found {
                Some(timestamp) => Ok(Op::CurrentDate { timestamp }),
                None => Err(Error::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )),
            }
        }
        other => Err(Error::bad_value(format!(
            "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
            type_name(other)
        ))),
    }
}

fn parse_push(arg: &Bson) -> Result<PushSpec> {
    let d = match arg {
        Bson::Document(d) if d.contains_key("$each") => d,
        other => {
            return Ok(PushSpec {
                each: vec![other.clone()],
                slice: None,
                sort: None,
                position: None,
            })
        }
    };
    let mut spec = PushSpec {
        each: Vec::new(),
        slice: None,
        sort: None,
        position: None,
    };
    for (k, _) in d {
        if !matches!(k.as_str(), "$each" | "$slice" | "$sort" | "$position") {
            return Err(Error::bad_value(format!(
                "Unrecognized clause in $push: {k}"
            )));
        }
    }
    match d.get("$each") {
        Some(Bson::Array(a)) => spec.each = a.clone(),
        Some(other) => {
            return Err(Error::bad_value(format!(
                "The argument to $each in $push must be an array but it was of type: {}",
                type_name(other)
            )))
        }
        None => unreachable!(),
    }
    if let Some(s) = d.get("$slice") {
        spec.slice = Some(integral(s).ok_or_else(|| {
            Error::bad_value(format!(
                "The value for $slice must be an integer value but was given type: {}",
                type_name(s)
            ))
        })?);
    }
    if let Some(p) = d.get("$position") {
        spec.position = Some(integral(p).ok_or_else(|| {
            Error::bad_value(format!(
                "The value for $position must be an integer value, not of type: {}",
                type_name(p)
            ))
        })?);
    }
    if let Some(s) = d.get("$sort") {
        let dir = |v: &Bson| -> Result<bool> {
            match integral(v) {
                Some(1) => Ok(true),
                Some(-1) => Ok(false),
                _ => Err(Error::bad_value(
                    "The $sort element value must be either 1 or -1",
                )),
            }
        };
        spec.sort = Some(match s {
            Bson::Document(p) => {
                if p.is_empty() {
                    return Err(Error::bad_value("The $sort pattern is empty when it should be a set of fields."));
                }
                let mut fields = Vec::new();
                for (k, v) in p {
                    if k.is_empty() || k.split('.').any(|c| c.is_empty()) {
                        return Err(Error::bad_value("The $sort field cannot be empty"));
                    }
                    fields.push((k.clone(), dir(v)?));
                }
                SortSpec::Fields(fields)
            }
            v if crate::compare::is_number(v) => SortSpec::Whole(dir(v)?),
            _ => {
                return Err(Error::bad_value(
                    "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
                ))
            }
        });
    }
    Ok(spec)
}

fn parse_bit(arg: &Bson) -> Result<Vec<(BitOp, Bson)>> {
    let Bson::Document(d) = arg else {
        return Err(Error::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(arg)
        )));
    };
    let mut ops = Vec::new();
    for (k, v) in d {
        let op = match k.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            _ => {
                return Err(Error::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{k}' which is an unknown operator: {{{}}}",
                    util::elem_to_string(k, v)
                )))
            }
        };
        if !matches!(v, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(Error::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{}}}",
                type_name(v),
                util::elem_to_string(k, v)
            )));
        }
        ops.push((op, v.clone()));
    }
    if ops.is_empty() {
        return Err(Error::bad_value(
            "You must pass in at least one bitwise operation. The format is: {$bit: {field: {and/or/xor: #}}",
        ));
    }
    Ok(ops)
}

/// Parses the `arrayFilters` option into identifier -> filter.
fn parse_array_filters(filters: &[Document]) -> Result<BTreeMap<String, Document>> {
    fn collect(d: &Document, id: &mut Option<String>) -> Result<()> {
        for (k, v) in d {
            if k.starts_with('$') {
                if let Bson::Array(items) = v {
                    for item in items {
                        if let Bson::Document(sub) = item {
                            collect(sub, id)?;
                        }
                    }
                }
                continue;
            }
            let top = k.split('.').next().unwrap_or("");
            match id {
                Some(existing) if existing != top => {
                    return Err(Error::failed_to_parse(format!(
                        "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{existing}' and '{top}'"
                    )))
                }
                Some(_) => {}
                None => *id = Some(top.to_string()),
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    for f in filters {
        let mut id = None;
        collect(f, &mut id)?;
        let Some(id) = id else {
            return Err(Error::failed_to_parse(
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        let valid = id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && id.chars().all(|c| c.is_ascii_alphanumeric());
        if !valid {
            return Err(Error::bad_value(format!(
                "Error parsing array filter :: caused by :: The top-level field name must be an alphanumeric string beginning with a lowercase letter, found '{id}'"
            )));
        }
        if out.contains_key(&id) {
            return Err(Error::failed_to_parse(format!(
                "Found multiple array filters with the same top-level field name {id}"
            )));
        }
        out.insert(id, f.clone());
    }
    Ok(out)
}

fn validate_replacement(d: &Document) -> Result<()> {
    for (k, _) in d {
        if k.starts_with('$') {
            return Err(util::dollar_prefixed_error(k, k));
        }
    }
    if let Some(id) = d.get("_id") {
        util::check_id_value(id)?;
    }
    Ok(())
}

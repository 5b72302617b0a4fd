//! In-memory aggregation pipelines: parsing/validation of stages and their execution over
//! documents. Cross-collection stages (`$lookup`, `$graphLookup`, `$unionWith`) read other
//! collections through [`CollectionSource`]; `$out`/`$merge` are reported by
//! [`Pipeline::output_stage`] and executed by the engine.

mod group;
mod project;

use crate::compare::{bson_eq_with, cmp_bson, cmp_bson_with};
use crate::error::{codes, Error, Result};
use crate::expr::{util, Expr, Variables};
use crate::matcher::Matcher;
use crate::sort::SortSpec;
use bson::{doc, Bson, Document};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub use crate::path::set_path;
pub use group::{group_key, AccOp, AccSpec};
pub use project::Tree as ProjectionTree;

/// Access to other collections for $lookup / $unionWith / $graphLookup, supplied by the engine.
pub trait CollectionSource {
    fn scan(&self, db: &str, coll: &str) -> crate::Result<Vec<bson::Document>>;
}

/// A source with no collections (every scan is empty).
pub struct NoCollections;

impl CollectionSource for NoCollections {
    fn scan(&self, _db: &str, _coll: &str) -> Result<Vec<Document>> {
        Ok(Vec::new())
    }
}

// ---------------------------------------------------------------------------------------

struct MatchStage {
    filter: Document,
    /// Top-level `$expr`, evaluated here (with the pipeline's variables).
    expr: Option<Expr>,
    /// The rest of the filter, for the matcher.
    rest: Document,
    matcher: Option<Matcher>,
    /// The rest refers to user variables (`$$x` inside a nested `$expr`): the matcher is
    /// rebuilt per run with the variables substituted.
    uses_vars: bool,
}

struct LookupStage {
    from_db: String,
    from: Option<String>,
    as_path: String,
    local_field: Option<String>,
    foreign_field: Option<String>,
    let_vars: Vec<(String, Expr)>,
    pipeline: Option<Pipeline>,
}

struct GraphLookupStage {
    from_db: String,
    from: String,
    start_with: Expr,
    connect_from: String,
    connect_to: String,
    as_field: String,
    max_depth: Option<i64>,
    depth_field: Option<String>,
    restrict: Option<Matcher>,
}

struct BucketStage {
    group_by: Expr,
    boundaries: Vec<Bson>,
    default: Option<Bson>,
    output: Vec<AccSpec>,
}

enum Stage {
    Match(Box<MatchStage>),
    Project(project::Tree),
    Sort {
        spec: SortSpec,
        limit: Option<usize>,
    },
    Limit(usize),
    Skip(usize),
    Group {
        id: Expr,
        accs: Vec<AccSpec>,
    },
    Count(String),
    Unwind {
        path: Vec<String>,
        index: Option<String>,
        preserve: bool,
    },
    ReplaceRoot(Expr),
    Lookup(Box<LookupStage>),
    GraphLookup(Box<GraphLookupStage>),
    Facet(Vec<(String, Pipeline)>),
    SortByCount(Expr),
    Sample(usize),
    Bucket(Box<BucketStage>),
    UnionWith {
        db: String,
        coll: String,
        pipeline: Option<Pipeline>,
    },
    Redact(Expr),
    Documents(Expr),
    /// `$out` / `$merge`: documents pass through; the engine writes them.
    Output,
}

impl Stage {
    fn is_streaming(&self) -> bool {
        matches!(
            self,
            Stage::Match(_)
                | Stage::Project(_)
                | Stage::Limit(_)
                | Stage::Skip(_)
                | Stage::Unwind { .. }
                | Stage::ReplaceRoot(_)
                | Stage::Lookup(_)
                | Stage::GraphLookup(_)
                | Stage::Redact(_)
                | Stage::Output
        )
    }
}

/// A parsed aggregation pipeline.
pub struct Pipeline {
    stages: Vec<Stage>,
    specs: Vec<Document>,
    db: String,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("db", &self.db)
            .field("stages", &self.specs)
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Top,
    Facet,
    Lookup,
    UnionWith,
}

fn stage_name(spec: &Document) -> Result<(&str, &Bson)> {
    if spec.len() != 1 {
        return Err(Error::location(
            40323,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    let (k, v) = spec.iter().next().unwrap();
    Ok((k.as_str(), v))
}

fn type_name(v: &Bson) -> &'static str {
    util::type_name(v)
}

fn parse_count_value(v: &Bson, stage: &str) -> Result<i64> {
    let ok = crate::compare::is_number(v);
    let n = crate::expr::num::as_exact_i64(v);
    match (stage, ok, n) {
        ("$limit", false, _) => Err(Error::location(15957, "the limit must be specified as a number")),
        ("$limit", true, None) => Err(Error::location(15957, format!("invalid argument to $limit stage: Cannot represent as a 64-bit integer: $limit: {}", util::show(v)))),
        ("$skip", false, _) => Err(Error::location(15972, "Argument to $skip must be a number")),
        ("$skip", true, None) => Err(Error::location(15972, format!("invalid argument to $skip stage: Cannot represent as a 64-bit integer: $skip: {}", util::show(v)))),
        (_, _, Some(n)) => Ok(n),
        _ => unreachable!(),
    }
}

fn strings_with_vars(v: &Bson) -> bool {
    match v {
        Bson::String(s) => {
            s.starts_with("$$")
                && s[2..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_ascii_uppercase())
        }
        Bson::Document(d) => d.values().any(strings_with_vars),
        Bson::Array(a) => a.iter().any(strings_with_vars),
        _ => false,
    }
}

/// Replaces `$$var.path` references inside `$expr` values with `{$literal: value}`
/// (how `let` variables reach a query filter).
pub fn substitute_vars(filter: &Document, vars: &Variables) -> Document {
    fn in_expr(v: &Bson, vars: &Variables) -> Bson {
        match v {
            Bson::String(s) if s.starts_with("$$") => {
                let body = &s[2..];
                let (name, path) = match body.split_once('.') {
                    Some((n, p)) => (n, Some(p)),
                    None => (body, None),
                };
                match vars.vars.get(name) {
                    Some(val) => {
                        let val = match path {
                            Some(p) => crate::expr::path_value(val, &crate::expr::split_path(p)),
                            None => Some(val.clone()),
                        };
                        match val {
                            Some(x) => Bson::Document(doc! {"$literal": x}),
                            None => Bson::String("$$REMOVE".into()),
                        }
                    }
                    None => v.clone(),
                }
            }
            Bson::Document(d) => Bson::Document(
                d.iter()
                    .map(|(k, x)| (k.clone(), in_expr(x, vars)))
                    .collect(),
            ),
            Bson::Array(a) => Bson::Array(a.iter().map(|x| in_expr(x, vars)).collect()),
            other => other.clone(),
        }
    }
    fn walk(v: &Bson, vars: &Variables) -> Bson {
        match v {
            Bson::Document(d) => Bson::Document(
                d.iter()
                    .map(|(k, x)| {
                        (
                            k.clone(),
                            if k == "$expr" {
                                in_expr(x, vars)
                            } else {
                                walk(x, vars)
                            },
                        )
                    })
                    .collect(),
            ),
            Bson::Array(a) => Bson::Array(a.iter().map(|x| walk(x, vars)).collect()),
            other => other.clone(),
        }
    }
    match walk(&Bson::Document(filter.clone()), vars) {
        Bson::Document(d) => d,
        _ => unreachable!(),
    }
}

fn string_arg<'a>(stage: &str, name: &str, v: &'a Bson) -> Result<&'a str> {
    match v {
        Bson::String(s) => Ok(s),
        other => Err(Error::failed_to_parse(format!(
            "{stage} argument '{name}' must be a string, found {}: {}",
            type_name(other),
            util::show(other)
        ))),
    }
}

fn parse_from(stage: &str, v: &Bson, db: &str) -> Result<(String, String)> {
    match v {
        Bson::String(s) => Ok((db.to_string(), s.clone())),
        Bson::Document(d) => {
            let dbn = d.get_str("db").map_err(|_| {
                Error::failed_to_parse(format!("{stage} 'from' must have a string 'db' field"))
            })?;
            let coll = d.get_str("coll").map_err(|_| {
                Error::failed_to_parse(format!("{stage} 'from' must have a string 'coll' field"))
            })?;
            Ok((dbn.to_string(), coll.to_string()))
        }
        other => Err(Error::failed_to_parse(format!(
            "{stage} 'from' field must be a string or an object, but found {}",
            type_name(other)
        ))),
    }
}

fn parse_sub_pipeline(v: &Bson, db: &str, ctx: Context, stage: &str) -> Result<Pipeline> {
    let Bson::Array(a) = v else {
        return Err(Error::failed_to_parse(format!(
            "{stage} 'pipeline' must be an array, found {}",
            type_name(v)
        )));
    };
    let mut stages = Vec::with_capacity(a.len());
    for s in a {
        match s {
            Bson::Document(d) => stages.push(d.clone()),
            other => {
                return Err(Error::type_mismatch(format!(
                    "Each element of the 'pipeline' array must be an object, found {}",
                    type_name(other)
                )))
            }
        }
    }
    Pipeline::parse_in(&stages, db, ctx)
}

fn parse_field_name_option(stage: &str, opt: &str, v: &Bson) -> Result<String> {
    match v {
        Bson::String(s) if !s.is_empty() => {
            if s.starts_with('$') {
                return Err(Error::location(
                    16410,
                    format!("{stage}: '{opt}' field names may not start with '$': {s}"),
                ));
            }
            Ok(s.clone())
        }
        other => Err(Error::failed_to_parse(format!(
            "{stage} '{opt}' must be a non-empty string, found {}",
            type_name(other)
        ))),
    }
}

impl Pipeline {
    /// Parses and validates all stages up front (errors before any data is read).
    pub fn parse(stages: &[bson::Document], db: &str) -> crate::Result<Pipeline> {
        Self::parse_in(stages, db, Context::Top)
    }

    fn parse_in(stages: &[Document], db: &str, ctx: Context) -> Result<Pipeline> {
        let mut parsed = Vec::with_capacity(stages.len());
        let n = stages.len();
        for (i, spec) in stages.iter().enumerate() {
            let (name, arg) = stage_name(spec)?;
            if (name == "$out" || name == "$merge") && ctx != Context::Top {
                return Err(match ctx {
                    Context::Facet => Error::location(
                        40600,
                        format!("{name} is not allowed to be used within a $facet stage"),
                    ),
                    Context::Lookup => Error::location(
                        51047,
                        format!("{name} is not allowed within a $lookup's sub-pipeline"),
                    ),
                    _ => Error::location(
                        31441,
                        format!("{name} is not allowed within a $unionWith's sub-pipeline"),
                    ),
                });
            }
            if (name == "$out" || name == "$merge") && i + 1 != n {
                return Err(Error::location(
                    40601,
                    format!("{name} can only be the final stage in the pipeline"),
                ));
            }
            if ctx == Context::Facet
                && matches!(
                    name,
                    "$facet" | "$collStats" | "$indexStats" | "$geoNear" | "$changeStream"
                )
            {
                return Err(Error::location(
                    40600,
                    format!("{name} is not allowed to be used within a $facet stage"),
                ));
            }
            if name == "$documents" && i != 0 {
                return Err(Error::location(
                    40602,
                    "$documents is only valid as the first stage in a pipeline",
                ));
            }
            let stage = Self::parse_stage(name, arg, db, ctx)?;
            // `$text` needs the collection's text index: only the first stage reads it.
            if let Stage::Match(m) = &stage {
                if m.matcher.as_ref().is_some_and(|m| m.text().is_some())
                    && (i != 0 || ctx != Context::Top)
                {
                    return Err(Error::location(
                        17313,
                        "$match with $text is only allowed as the first pipeline stage",
                    ));
                }
            }
            parsed.push(stage);
        }
        // $sort immediately followed by $limit: keep only the top k while sorting.
        for i in 0..parsed.len().saturating_sub(1) {
            if let Stage::Limit(k) = parsed[i + 1] {
                if let Stage::Sort { limit, .. } = &mut parsed[i] {
                    *limit = Some(k);
                }
            }
        }
        Ok(Pipeline {
            stages: parsed,
            specs: stages.to_vec(),
            db: db.to_string(),
        })
    }

    fn parse_stage(name: &str, arg: &Bson, db: &str, _ctx: Context) -> Result<Stage> {
        Ok(match name {
            // The engine runs a leading $geoNear itself (it needs the geo index).
            "$geoNear" => {
                return Err(Error::location(
                    40602,
                    "$geoNear is only valid as the first stage in a pipeline",
                ))
            }
            "$match" => {
                let Bson::Document(filter) = arg else {
                    return Err(Error::location(
                        15959,
                        "the match filter must be an expression in an object",
                    ));
                };
                let mut rest = Document::new();
                let mut expr = None;
                for (k, v) in filter {
                    if k == "$expr" {
                        expr = Some(Expr::parse(v)?);
                    } else {
                        rest.insert(k.clone(), v.clone());
                    }
                }
                let uses_vars = strings_with_vars(&Bson::Document(rest.clone()));
                let matcher = if rest.is_empty() {
                    None
                } else {
                    Some(Matcher::new(&rest)?)
                };
                Stage::Match(Box::new(MatchStage {
                    filter: filter.clone(),
                    expr,
                    rest,
                    matcher,
                    uses_vars,
                }))
            }
            "$project" => {
                let Bson::Document(spec) = arg else {
                    return Err(Error::location(
                        15969,
                        "$project specification must be an object",
                    ));
                };
                Stage::Project(project::Tree::parse_project(spec)?)
            }
            "$addFields" | "$set" => {
                let Bson::Document(spec) = arg else {
                    return Err(Error::location(
                        40272,
                        format!(
                            "{name} specification stage must be an object, got {}",
                            type_name(arg)
                        ),
                    ));
                };
                if spec.is_empty() {
                    return Err(Error::location(40177, format!("Invalid {name} :: caused by :: specification must have at least one field")));
                }
                Stage::Project(project::Tree::parse_add_fields(name, spec)?)
            }
            "$unset" => Stage::Project(project::Tree::parse_unset(arg)?),
            "$sort" => {
                let Bson::Document(spec) = arg else {
                    return Err(Error::location(
                        15973,
                        "the $sort key specification must be an object",
                    ));
                };
                if spec.is_empty() {
                    return Err(Error::location(
                        15976,
                        "$sort stage must have at least one sort key",
                    ));
                }
                Stage::Sort {
                    spec: SortSpec::parse(spec)?,
                    limit: None,
                }
            }
            "$limit" => {
                let n = parse_count_value(arg, "$limit")?;
                if n <= 0 {
                    return Err(Error::location(15958, "the limit must be positive"));
                }
                Stage::Limit(n as usize)
            }
            "$skip" => {
                let n = parse_count_value(arg, "$skip")?;
                if n < 0 {
                    return Err(Error::location(
                        15956,
                        "Argument to $skip cannot be negative",
                    ));
                }
                Stage::Skip(n as usize)
            }
            "$group" => {
                let Bson::Document(spec) = arg else {
                    return Err(Error::location(
                        15947,
                        "a group's fields must be specified in an object",
                    ));
                };
                let mut id = None;
                let mut accs = Vec::new();
                for (k, v) in spec {
                    if k == "_id" {
                        id = Some(Expr::parse(v)?);
                    } else {
                        if accs.iter().any(|a: &AccSpec| &a.name == k) {
                            return Err(Error::location(
                                16406,
                                format!("duplicate field name specified in object literal: {k}"),
                            ));
                        }
                        accs.push(AccSpec::parse(k, v)?);
                    }
                }
                let id = id.ok_or_else(|| {
                    Error::location(15955, "a group specification must include an _id")
                })?;
                Stage::Group { id, accs }
            }
            "$count" => {
                let Bson::String(f) = arg else {
                    return Err(Error::location(
                        40156,
                        "the count field must be a non-empty string",
                    ));
                };
                if f.is_empty() {
                    return Err(Error::location(
                        40157,
                        "the count field must be a non-empty string",
                    ));
                }
                if f.starts_with('$') {
                    return Err(Error::location(
                        40158,
                        "the count field cannot be a $-prefixed path",
                    ));
                }
                if f.contains('.') {
                    return Err(Error::location(40160, "the count field cannot contain '.'"));
                }
                Stage::Count(f.clone())
            }
            "$unwind" => Self::parse_unwind(arg)?,
            "$replaceRoot" => {
                let Bson::Document(d) = arg else {
                    return Err(Error::location(
                        40229,
                        format!(
                            "expected an object as specification for $replaceRoot stage, got {}",
                            type_name(arg)
                        ),
                    ));
                };
                let mut new_root = None;
                for (k, v) in d {
                    if k == "newRoot" {
                        new_root = Some(Expr::parse(v)?);
                    } else {
                        return Err(Error::location(
                            40415,
                            format!("BSON field '$replaceRoot.{k}' is an unknown field."),
                        ));
                    }
                }
                Stage::ReplaceRoot(new_root.ok_or_else(|| {
                    Error::location(
                        40414,
                        "BSON field '$replaceRoot.newRoot' is missing but a required field",
                    )
                })?)
            }
            "$replaceWith" => Stage::ReplaceRoot(Expr::parse(arg)?),
            "$lookup" => Self::parse_lookup(arg, db)?,
            "$graphLookup" => Self::parse_graph_lookup(arg, db)?,
            "$facet" => {
                let Bson::Document(d) = arg else {
                    return Err(Error::location(
                        15955,
                        format!(
                            "the $facet specification must be a non-empty object, but found: {}",
                            util::show(arg)
                        ),
                    ));
                };
                if d.is_empty() {
                    return Err(Error::location(
                        40169,
                        "the $facet specification must be a non-empty object",
                    ));
                }
                let mut facets = Vec::new();
                for (k, v) in d {
                    if k.is_empty() || k.starts_with('$') || k.contains('.') {
                        return Err(Error::location(40353, format!("$facet output field names may not start with '$' or contain '.': {k}")));
                    }
                    if !matches!(v, Bson::Array(_)) {
                        return Err(Error::location(
                            40170,
                            format!(
                                "arguments to $facet must be arrays, {k} is type {}",
                                type_name(v)
                            ),
                        ));
                    }
                    facets.push((
                        k.clone(),
                        parse_sub_pipeline(v, db, Context::Facet, "$facet")?,
                    ));
                }
                Stage::Facet(facets)
            }
            "$sortByCount" => {
                let ok = match arg {
                    Bson::String(s) => s.starts_with('$'),
                    Bson::Document(d) => {
                        d.len() == 1 && d.keys().next().is_some_and(|k| k.starts_with('$'))
                    }
                    _ => false,
                };
                if !ok {
                    return Err(Error::location(40148, "the sortByCount field must be defined as a $-prefixed path or an expression"));
                }
                Stage::SortByCount(Expr::parse(arg)?)
            }
            "$sample" => {
                let Bson::Document(d) = arg else {
                    return Err(Error::location(
                        28745,
                        "the $sample stage specification must be an object",
                    ));
                };
                let mut size = None;
                for (k, v) in d {
                    if k == "size" {
                        if !crate::compare::is_number(v) {
                            return Err(Error::location(
                                28746,
                                "size argument to $sample must be a number",
                            ));
                        }
                        let n = crate::compare::as_f64(v).unwrap();
                        if n < 0.0 {
                            return Err(Error::location(
                                28747,
                                "size argument to $sample must not be negative",
                            ));
                        }
                        size = Some(n as usize);
                    } else {
                        return Err(Error::location(
                            28748,
                            format!("unrecognized option to $sample: {k}"),
                        ));
                    }
                }
                Stage::Sample(
                    size.ok_or_else(|| {
                        Error::location(28749, "$sample stage must specify a size")
                    })?,
                )
            }
            "$bucket" => Self::parse_bucket(arg)?,
            "$unionWith" => {
                let (coll, pipeline) = match arg {
                    Bson::String(s) => (s.clone(), None),
                    Bson::Document(d) => {
                        let mut coll = None;
                        let mut pipeline = None;
                        for (k, v) in d {
                            match k.as_str() {
                                "coll" => coll = Some(string_arg("$unionWith", "coll", v)?.to_string()),
                                "pipeline" => pipeline = Some(parse_sub_pipeline(v, db, Context::UnionWith, "$unionWith")?),
                                _ => return Err(Error::location(40415, format!("BSON field '$unionWith.{k}' is an unknown field."))),
                            }
                        }
                        let coll = coll.ok_or_else(|| Error::location(40414, "BSON field '$unionWith.coll' is missing but a required field"))?;
                        (coll, pipeline)
                    }
                    other => {
                        return Err(Error::failed_to_parse(format!(
                            "the $unionWith stage specification must be an object or string, but found {}",
                            type_name(other)
                        )))
                    }
                };
                Stage::UnionWith {
                    db: db.to_string(),
                    coll,
                    pipeline,
                }
            }
            "$redact" => Stage::Redact(Expr::parse(arg)?),
            "$documents" => Stage::Documents(Expr::parse(arg)?),
            "$out" | "$merge" => {
                match (name, arg) {
                    ("$out", Bson::String(_)) | ("$out", Bson::Document(_)) => {}
                    ("$merge", Bson::String(_)) | ("$merge", Bson::Document(_)) => {}
                    _ => {
                        return Err(Error::failed_to_parse(format!(
                            "{name} stage argument must be a string or an object, but found {}",
                            type_name(arg)
                        )))
                    }
                }
                Stage::Output
            }
            _ => {
                return Err(Error::location(
                    40324,
                    format!("Unrecognized pipeline stage name: '{name}'"),
                ));
            }
        })
    }

    fn parse_unwind(arg: &Bson) -> Result<Stage> {
        let (path, index, preserve) = match arg {
            Bson::String(s) => (s.clone(), None, false),
            Bson::Document(d) => {
                let mut path = None;
                let mut index = None;
                let mut preserve = false;
                for (k, v) in d {
                    match k.as_str() {
                        "path" => match v {
                            Bson::String(s) => path = Some(s.clone()),
                            other => {
                                return Err(Error::location(28808, format!("expected a string as the path for $unwind stage, got {}", type_name(other))))
                            }
                        },
                        "includeArrayIndex" => match v {
                            Bson::String(s) if !s.is_empty() => {
                                if s.starts_with('$') {
                                    return Err(Error::location(28822, format!("includeArrayIndex option to $unwind stage should not be prefixed with a '$': {s}")));
                                }
                                index = Some(s.clone());
                            }
                            other => {
                                return Err(Error::location(28810, format!("expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}", type_name(other))))
                            }
                        },
                        "preserveNullAndEmptyArrays" => match v {
                            Bson::Boolean(b) => preserve = *b,
                            other => {
                                return Err(Error::location(28809, format!("expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}", type_name(other))))
                            }
                        },
                        _ => return Err(Error::location(28811, format!("unrecognized option to $unwind stage: {k}"))),
                    }
                }
                (path.ok_or_else(|| Error::location(28812, "no path specified to $unwind stage"))?, index, preserve)
            }
            other => {
                return Err(Error::location(15981, format!("expected either a string or an object as specification for $unwind stage, got {}", type_name(other))))
            }
        };
        let Some(p) = path.strip_prefix('$') else {
            return Err(Error::location(
                28818,
                format!("path option to $unwind stage should be prefixed with a '$': {path}"),
            ));
        };
        if p.is_empty() || p.starts_with('$') || p.split('.').any(|x| x.is_empty()) {
            return Err(Error::location(
                28818,
                format!("path option to $unwind stage should be prefixed with a '$': {path}"),
            ));
        }
        Ok(Stage::Unwind {
            path: crate::expr::split_path(p),
            index,
            preserve,
        })
    }

    fn parse_lookup(arg: &Bson, db: &str) -> Result<Stage> {
        let Bson::Document(d) = arg else {
            return Err(Error::failed_to_parse(format!(
                "the $lookup specification must be an Object, but found {}",
                type_name(arg)
            )));
        };
        let mut from = None;
        let mut as_path = None;
        let mut local = None;
        let mut foreign = None;
        let mut let_vars = Vec::new();
        let mut pipeline_spec = None;
        for (k, v) in d {
            match k.as_str() {
                "from" => from = Some(parse_from("$lookup", v, db)?),
                "as" => as_path = Some(string_arg("$lookup", "as", v)?.to_string()),
                "localField" => local = Some(string_arg("$lookup", "localField", v)?.to_string()),
                "foreignField" => {
                    foreign = Some(string_arg("$lookup", "foreignField", v)?.to_string())
                }
                "let" => {
                    let Bson::Document(l) = v else {
                        return Err(Error::failed_to_parse(format!(
                            "$lookup argument 'let' must be an object, found {}",
                            type_name(v)
                        )));
                    };
                    for (n, e) in l {
                        crate::expr::validate_variable_name(n)?;
                        let_vars.push((n.clone(), Expr::parse(e)?));
                    }
                }
                "pipeline" => pipeline_spec = Some(v.clone()),
                _ => {
                    return Err(Error::failed_to_parse(format!(
                        "unknown argument to $lookup: {k}"
                    )))
                }
            }
        }
        let as_path = as_path
            .ok_or_else(|| Error::failed_to_parse("must specify 'as' field for a $lookup"))?;
        if local.is_some() != foreign.is_some() || (local.is_none() && pipeline_spec.is_none()) {
            return Err(Error::failed_to_parse(
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
            ));
        }
        let pipeline = match &pipeline_spec {
            Some(p) => Some(parse_sub_pipeline(p, db, Context::Lookup, "$lookup")?),
            None => None,
        };
        let starts_with_documents = pipeline
            .as_ref()
            .is_some_and(|p| matches!(p.stages.first(), Some(Stage::Documents(_))));
        if from.is_none() && !starts_with_documents {
            return Err(Error::failed_to_parse(
                "must specify 'from' field for a $lookup",
            ));
        }
        let (from_db, from) = match from {
            Some((d, c)) => (d, Some(c)),
            None => (db.to_string(), None),
        };
        Ok(Stage::Lookup(Box::new(LookupStage {
            from_db,
            from,
            as_path,
            local_field: local,
            foreign_field: foreign,
            let_vars,
            pipeline,
        })))
    }

    fn parse_graph_lookup(arg: &Bson, db: &str) -> Result<Stage> {
        let Bson::Document(d) = arg else {
            return Err(Error::failed_to_parse(
                "the $graphLookup stage specification must be an object",
            ));
        };
        let mut from = None;
        let mut start_with = None;
        let mut connect_from = None;
        let mut connect_to = None;
        let mut as_field = None;
        let mut max_depth = None;
        let mut depth_field = None;
        let mut restrict = None;
        for (k, v) in d {
            match k.as_str() {
                "from" => from = Some(parse_from("$graphLookup", v, db)?),
                "startWith" => start_with = Some(Expr::parse(v)?),
                "connectFromField" => {
                    connect_from = Some(parse_field_name_option("$graphLookup", k, v)?)
                }
                "connectToField" => {
                    connect_to = Some(parse_field_name_option("$graphLookup", k, v)?)
                }
                "as" => as_field = Some(parse_field_name_option("$graphLookup", k, v)?),
                "depthField" => depth_field = Some(parse_field_name_option("$graphLookup", k, v)?),
                "maxDepth" => {
                    let n =
                        crate::expr::num::as_exact_i64(v).filter(|_| crate::compare::is_number(v));
                    match n {
                        Some(n) if n >= 0 => max_depth = Some(n),
                        _ => {
                            return Err(Error::location(
                                40101,
                                format!(
                                    "maxDepth requires a nonnegative argument, found: {}",
                                    util::show(v)
                                ),
                            ))
                        }
                    }
                }
                "restrictSearchWithMatch" => {
                    let Bson::Document(m) = v else {
                        return Err(Error::location(
                            40185,
                            format!(
                                "restrictSearchWithMatch must be an object, found {}",
                                type_name(v)
                            ),
                        ));
                    };
                    restrict = Some(Matcher::new(m)?);
                }
                _ => {
                    return Err(Error::location(
                        40104,
                        format!("Unknown argument to $graphLookup: {k}"),
                    ))
                }
            }
        }
        let missing = |n: &str| {
            Error::location(
                40105,
                format!("$graphLookup requires '{n}' to be specified"),
            )
        };
        let (from_db, from) = from.ok_or_else(|| missing("from"))?;
        Ok(Stage::GraphLookup(Box::new(GraphLookupStage {
            from_db,
            from,
            start_with: start_with.ok_or_else(|| missing("startWith"))?,
            connect_from: connect_from.ok_or_else(|| missing("connectFromField"))?,
            connect_to: connect_to.ok_or_else(|| missing("connectToField"))?,
            as_field: as_field.ok_or_else(|| missing("as"))?,
            max_depth,
            depth_field,
            restrict,
        })))
    }

    fn parse_bucket(arg: &Bson) -> Result<Stage> {
        let Bson::Document(d) = arg else {
            return Err(Error::location(
                40201,
                format!(
                    "Argument to $bucket stage must be an object, but found type: {}.",
                    type_name(arg)
                ),
            ));
        };
        let mut group_by = None;
        let mut boundaries = None;
        let mut default = None;
        let mut output = Vec::new();
        for (k, v) in d {
            match k.as_str() {
                "groupBy" => {
                    let ok = match v {
                        Bson::String(s) => s.starts_with('$'),
                        Bson::Document(_) => true,
                        _ => false,
                    };
                    if !ok {
                        return Err(Error::location(40202, format!("The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression, but found: {}.", util::show(v))));
                    }
                    group_by = Some(Expr::parse(v)?);
                }
                "boundaries" => {
                    let Bson::Array(a) = v else {
                        return Err(Error::location(40200, format!("The $bucket 'boundaries' field must be an array, but found type: {}.", type_name(v))));
                    };
                    if a.len() < 2 {
                        return Err(Error::location(40192, format!("The $bucket 'boundaries' field must have at least 2 values, but found {} value(s).", a.len())));
                    }
                    for w in a.windows(2) {
                        if crate::compare::canonical_type(&w[0])
                            != crate::compare::canonical_type(&w[1])
                        {
                            return Err(Error::location(40193, format!("All values in the the 'boundaries' option to $bucket must have the same type. Found conflicting types {} and {}.", type_name(&w[0]), type_name(&w[1]))));
                        }
                        if cmp_bson(&w[0], &w[1]) != std::cmp::Ordering::Less {
                            return Err(Error::location(40194, format!("The 'boundaries' option to $bucket must be sorted, but elements {} and {} are not in ascending order ({} is not less than {}).", 0, 1, util::show(&w[0]), util::show(&w[1]))));
                        }
                    }
                    boundaries = Some(a.clone());
                }
                "default" => default = Some(v.clone()),
                "output" => {
                    let Bson::Document(o) = v else {
                        return Err(Error::location(
                            40196,
                            format!(
                                "The $bucket 'output' field must be an object, but found type: {}.",
                                type_name(v)
                            ),
                        ));
                    };
                    for (n, spec) in o {
                        output.push(AccSpec::parse(n, spec)?);
                    }
                }
                _ => {
                    return Err(Error::location(
                        40197,
                        format!("Unrecognized option to $bucket: {k}."),
                    ))
                }
            }
        }
        let (Some(group_by), Some(boundaries)) = (group_by, boundaries) else {
            return Err(Error::location(
                40198,
                "$bucket requires 'groupBy' and 'boundaries' to be specified.",
            ));
        };
        if let Some(def) = &default {
            let lo = &boundaries[0];
            let hi = boundaries.last().unwrap();
            if crate::compare::canonical_type(def) == crate::compare::canonical_type(lo)
                && cmp_bson(def, lo) != std::cmp::Ordering::Less
                && cmp_bson(def, hi) == std::cmp::Ordering::Less
            {
                return Err(Error::location(40199, "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary."));
            }
        }
        if output.is_empty() {
            output.push(AccSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?);
        }
        Ok(Stage::Bucket(Box::new(BucketStage {
            group_by,
            boundaries,
            default,
            output,
        })))
    }

    /// The leading `$match`'s matcher, for the engine to bind the indexes its special
    /// predicates (`$text`) need.
    pub fn leading_matcher(&self) -> Option<&Matcher> {
        match self.stages.first() {
            Some(Stage::Match(m)) => m.matcher.as_ref(),
            _ => None,
        }
    }

    /// The leading `$match` filter (if the first stage is `$match`), so the engine can use an index.
    pub fn leading_match(&self) -> Option<&bson::Document> {
        match self.stages.first() {
            Some(Stage::Match(m)) => Some(&m.filter),
            _ => None,
        }
    }

    /// The `$sort` specification that directly follows the leading `$match` (or is first),
    /// and the `$limit` right after it, as hints for the engine.
    pub fn leading_sort(&self) -> Option<(&bson::Document, Option<usize>)> {
        let i = if matches!(self.stages.first(), Some(Stage::Match(_))) {
            1
        } else {
            0
        };
        match self.stages.get(i) {
            Some(Stage::Sort { limit, .. }) => self.specs[i]
                .get_document("$sort")
                .ok()
                .map(|d| (d, *limit)),
            _ => None,
        }
    }

    /// The output stage (`{$out: ...}` or `{$merge: ...}`) if present, for the engine to execute.
    pub fn output_stage(&self) -> Option<&bson::Document> {
        match self.stages.last() {
            Some(Stage::Output) => self.specs.last(),
            _ => None,
        }
    }

    /// The raw stage specifications.
    pub fn stage_specs(&self) -> &[Document] {
        &self.specs
    }

    /// True if the pipeline starts with `$documents` (it reads no collection).
    pub fn starts_with_documents(&self) -> bool {
        matches!(self.stages.first(), Some(Stage::Documents(_)))
    }

    /// Runs over an input iterator, producing the output documents.
    pub fn run(
        &self,
        input: Box<dyn Iterator<Item = crate::Result<bson::Document>> + '_>,
        source: &dyn CollectionSource,
        vars: &crate::expr::Variables,
    ) -> crate::Result<Vec<bson::Document>> {
        let vars = vars.with_now();
        let ctx = RunCtx {
            source,
            cache: RefCell::new(HashMap::new()),
        };
        self.run_in(input, &ctx, &vars)
    }

    fn run_in<'i>(
        &self,
        input: Box<dyn Iterator<Item = Result<Document>> + 'i>,
        ctx: &RunCtx,
        vars: &Variables,
    ) -> Result<Vec<Document>> {
        // Per-run matchers for $match stages that refer to variables, or that compare
        // under the operation's collation.
        let mut matchers: HashMap<usize, Matcher> = HashMap::new();
        for (i, st) in self.stages.iter().enumerate() {
            if let Stage::Match(m) = st {
                let substitute = m.uses_vars && !vars.vars.is_empty();
                if m.rest.is_empty() || !(substitute || vars.collator.is_some()) {
                    continue;
                }
                let filter = if substitute {
                    substitute_vars(&m.rest, vars)
                } else {
                    m.rest.clone()
                };
                matchers.insert(i, Matcher::with_collation(&filter, vars.collator.clone())?);
            }
        }
        let prefix = self
            .stages
            .iter()
            .position(|s| !s.is_streaming())
            .unwrap_or(self.stages.len());
        let mut counters: Vec<usize> = self
            .stages
            .iter()
            .map(|s| match s {
                Stage::Skip(n) | Stage::Limit(n) => *n,
                _ => 0,
            })
            .collect();
        let mut docs = Vec::new();
        let limit_exhausted = |counters: &Vec<usize>| {
            self.stages[..prefix]
                .iter()
                .enumerate()
                .any(|(i, s)| matches!(s, Stage::Limit(_)) && counters[i] == 0)
        };
        if !limit_exhausted(&counters) {
            for item in input {
                let doc = item?;
                let mut batch = vec![doc];
                for i in 0..prefix {
                    batch =
                        self.apply_streaming(i, batch, ctx, vars, &matchers, &mut counters[i])?;
                    if batch.is_empty() {
                        break;
                    }
                }
                docs.extend(batch);
                if limit_exhausted(&counters) {
                    break;
                }
            }
        }
        for i in prefix..self.stages.len() {
            let st = &self.stages[i];
            if st.is_streaming() {
                let mut counter = counters[i];
                docs = self.apply_streaming(i, docs, ctx, vars, &matchers, &mut counter)?;
            } else {
                docs = self.apply_blocking(st, docs, ctx, vars)?;
            }
        }
        Ok(docs)
    }

    fn apply_streaming(
        &self,
        i: usize,
        docs: Vec<Document>,
        ctx: &RunCtx,
        vars: &Variables,
        matchers: &HashMap<usize, Matcher>,
        counter: &mut usize,
    ) -> Result<Vec<Document>> {
        let st = &self.stages[i];
        let mut out = Vec::with_capacity(docs.len());
        match st {
            Stage::Match(m) => {
                let matcher = matchers.get(&i).or(m.matcher.as_ref());
                for d in docs {
                    if let Some(e) = &m.expr {
                        if !crate::expr::truthy(&e.evaluate(&d, vars)?) {
                            continue;
                        }
                    }
                    let keep = match matcher {
                        Some(mm) => mm.matches_or_fail(&d)?,
                        None => true,
                    };
                    if keep {
                        out.push(d);
                    }
                }
            }
            Stage::Project(tree) => {
                for d in docs {
                    out.push(tree.apply(&d, vars)?);
                }
            }
            Stage::Skip(_) => {
                for d in docs {
                    if *counter > 0 {
                        *counter -= 1;
                    } else {
                        out.push(d);
                    }
                }
            }
            Stage::Limit(_) => {
                for d in docs {
                    if *counter == 0 {
                        break;
                    }
                    *counter -= 1;
                    out.push(d);
                }
            }
            Stage::Unwind {
                path,
                index,
                preserve,
            } => {
                for d in docs {
                    unwind(d, path, index.as_deref(), *preserve, &mut out);
                }
            }
            Stage::ReplaceRoot(e) => {
                for d in docs {
                    match e.evaluate(&d, vars)? {
                        Some(Bson::Document(nd)) => out.push(nd),
                        other => {
                            let (shown, tn) = match &other {
                                Some(v) => (util::show(v), type_name(v)),
                                None => ("MISSING".to_string(), "missing"),
                            };
                            return Err(Error::location(
                                40228,
                                format!(
                                    "'newRoot' expression must evaluate to an object, but resulting value was: {shown}. Type of resulting value: '{tn}'. Input document: {}",
                                    util::show(&Bson::Document(d))
                                ),
                            ));
                        }
                    }
                }
            }
            Stage::Lookup(l) => {
                for d in docs {
                    out.push(self.lookup(l, d, ctx, vars)?);
                }
            }
            Stage::GraphLookup(g) => {
                for d in docs {
                    out.push(graph_lookup(g, d, ctx, vars)?);
                }
            }
            Stage::Redact(e) => {
                let mut rv = vars.clone();
                rv.vars
                    .insert("DESCEND".into(), Bson::String("descend".into()));
                rv.vars.insert("PRUNE".into(), Bson::String("prune".into()));
                rv.vars.insert("KEEP".into(), Bson::String("keep".into()));
                for d in docs {
                    if let Some(r) = redact(e, &d, &d, &mut rv)? {
                        out.push(r);
                    }
                }
            }
            Stage::Output => out = docs,
            _ => unreachable!("not a streaming stage"),
        }
        Ok(out)
    }

    fn apply_blocking(
        &self,
        st: &Stage,
        docs: Vec<Document>,
        ctx: &RunCtx,
        vars: &Variables,
    ) -> Result<Vec<Document>> {
        Ok(match st {
            Stage::Sort { spec, limit } => match &vars.collator {
                None => sort_docs(spec, docs, *limit),
                Some(c) => sort_docs(&spec.clone().with_collator(Some(c.clone())), docs, *limit),
            },
            Stage::Group { id, accs } => group::run_group(id, accs, docs, vars)?,
            Stage::Count(f) => {
                if docs.is_empty() {
                    Vec::new()
                } else {
                    let n = docs.len() as i64;
                    let v = i32::try_from(n).map(Bson::Int32).unwrap_or(Bson::Int64(n));
                    let mut d = Document::new();
                    d.insert(f.clone(), v);
                    vec![d]
                }
            }
            Stage::Facet(facets) => {
                let mut out = Document::new();
                for (name, p) in facets {
                    let input: Box<dyn Iterator<Item = Result<Document>>> =
                        Box::new(docs.clone().into_iter().map(Ok));
                    let res = p.run_in(input, ctx, vars)?;
                    out.insert(
                        name.clone(),
                        Bson::Array(res.into_iter().map(Bson::Document).collect()),
                    );
                }
                vec![out]
            }
            Stage::SortByCount(e) => {
                let accs = vec![AccSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?];
                let mut groups = group::run_group(e, &accs, docs, vars)?;
                // Descending count; ties keep first-seen order.
                groups.sort_by(|a, b| cmp_bson(b.get("count").unwrap(), a.get("count").unwrap()));
                groups
            }
            Stage::Sample(n) => {
                let mut docs = docs;
                let n = (*n).min(docs.len());
                for i in 0..n {
                    let j = i + (crate::random::next_u64() % (docs.len() - i) as u64) as usize;
                    docs.swap(i, j);
                }
                docs.truncate(n);
                docs
            }
            Stage::Bucket(b) => bucket(b, docs, vars)?,
            Stage::UnionWith { db, coll, pipeline } => {
                let mut docs = docs;
                let other = ctx.scan(db, coll)?;
                let extra = match pipeline {
                    Some(p) => {
                        let input: Box<dyn Iterator<Item = Result<Document>>> =
                            Box::new(other.iter().cloned().map(Ok));
                        p.run_in(input, ctx, vars)?
                    }
                    None => other.as_ref().clone(),
                };
                docs.extend(extra);
                docs
            }
            Stage::Documents(e) => {
                let empty = Document::new();
                match e.evaluate(&empty, vars)? {
                    Some(Bson::Array(a)) => {
                        let mut out = Vec::with_capacity(a.len());
                        for v in a {
                            match v {
                                Bson::Document(d) => out.push(d),
                                other => {
                                    return Err(Error::type_mismatch(format!(
                                        "$documents elements must be objects, found {}",
                                        type_name(&other)
                                    )))
                                }
                            }
                        }
                        out
                    }
                    _ => {
                        return Err(Error::location(
                            5858203,
                            "error during aggregation :: caused by :: an array is expected",
                        ))
                    }
                }
            }
            _ => unreachable!("streaming stage in blocking path"),
        })
    }

    fn lookup(
        &self,
        l: &LookupStage,
        mut doc: Document,
        ctx: &RunCtx,
        vars: &Variables,
    ) -> Result<Document> {
        let foreign: Rc<Vec<Document>> = match &l.from {
            Some(c) => ctx.scan(&l.from_db, c)?,
            None => Rc::new(Vec::new()),
        };
        let mut candidates: Vec<Document> = match (&l.local_field, &l.foreign_field) {
            (Some(lf), Some(ff)) => {
                let locals = local_values(&doc, lf);
                foreign
                    .iter()
                    .filter(|fd| {
                        let fvals = matcher_values(fd, ff);
                        locals.iter().any(|lv| {
                            if matches!(lv, Bson::Null)
                                && (fvals.is_empty()
                                    || fvals
                                        .iter()
                                        .any(|f| matches!(f, Bson::Null | Bson::Undefined)))
                            {
                                return true;
                            }
                            fvals
                                .iter()
                                .any(|f| bson_eq_with(f, lv, vars.collator.as_deref()))
                        })
                    })
                    .cloned()
                    .collect()
            }
            _ => foreign.as_ref().clone(),
        };
        if let Some(p) = &l.pipeline {
            let mut sub_vars = vars.clone();
            for (n, e) in &l.let_vars {
                let v = e.evaluate(&doc, vars)?.unwrap_or(Bson::Null);
                sub_vars.vars.insert(n.clone(), v);
            }
            let input: Box<dyn Iterator<Item = Result<Document>>> =
                Box::new(std::mem::take(&mut candidates).into_iter().map(Ok));
            candidates = p.run_in(input, ctx, &sub_vars)?;
        }
        set_path(
            &mut doc,
            &l.as_path,
            Bson::Array(candidates.into_iter().map(Bson::Document).collect()),
        );
        Ok(doc)
    }
}

struct RunCtx<'a> {
    source: &'a dyn CollectionSource,
    cache: RefCell<HashMap<(String, String), Rc<Vec<Document>>>>,
}

impl RunCtx<'_> {
    fn scan(&self, db: &str, coll: &str) -> Result<Rc<Vec<Document>>> {
        let key = (db.to_string(), coll.to_string());
        if let Some(v) = self.cache.borrow().get(&key) {
            return Ok(v.clone());
        }
        let docs = Rc::new(self.source.scan(db, coll)?);
        self.cache.borrow_mut().insert(key, docs.clone());
        Ok(docs)
    }
}

fn sort_docs(spec: &SortSpec, docs: Vec<Document>, limit: Option<usize>) -> Vec<Document> {
    let mut keyed: Vec<(Vec<Bson>, Document)> = Vec::with_capacity(
        docs.len()
            .min(limit.map(|l| l * 2 + 1).unwrap_or(usize::MAX)),
    );
    let cmp = |a: &(Vec<Bson>, Document), b: &(Vec<Bson>, Document)| spec.compare_keys(&a.0, &b.0);
    match limit {
        Some(k) if k.saturating_mul(4) < docs.len() => {
            // Top-k: keep a buffer of at most 2k, compacting with a stable sort.
            for d in docs {
                keyed.push((spec.key(&d), d));
                if keyed.len() >= 2 * k {
                    keyed.sort_by(cmp);
                    keyed.truncate(k);
                }
            }
            keyed.sort_by(cmp);
            keyed.truncate(k);
        }
        _ => {
            keyed.extend(docs.into_iter().map(|d| (spec.key(&d), d)));
            keyed.sort_by(cmp);
            if let Some(k) = limit {
                keyed.truncate(k);
            }
        }
    }
    keyed.into_iter().map(|(_, d)| d).collect()
}

/// The value at a dotted path without array traversal (as `$unwind` reads it).
fn get_plain<'a>(doc: &'a Document, path: &[String]) -> Option<&'a Bson> {
    let (first, rest) = path.split_first()?;
    let mut cur = doc.get(first)?;
    for p in rest {
        cur = match cur {
            Bson::Document(d) => d.get(p)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn remove_parts(doc: &mut Document, parts: &[String]) {
    let (first, rest) = parts.split_first().unwrap();
    if rest.is_empty() {
        doc.remove(first);
        return;
    }
    if let Some(Bson::Document(d)) = doc.get_mut(first) {
        remove_parts(d, rest);
    }
}

fn unwind(
    doc: Document,
    path: &[String],
    index: Option<&str>,
    preserve: bool,
    out: &mut Vec<Document>,
) {
    let joined = path.join(".");
    match get_plain(&doc, path) {
        Some(Bson::Array(a)) if !a.is_empty() => {
            let a = a.clone();
            for (i, item) in a.into_iter().enumerate() {
                let mut d = doc.clone();
                set_path(&mut d, &joined, item);
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Int64(i as i64));
                }
                out.push(d);
            }
        }
        Some(Bson::Array(_)) => {
            if preserve {
                let mut d = doc;
                remove_parts(&mut d, path);
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Null);
                }
                out.push(d);
            }
        }
        None | Some(Bson::Null) | Some(Bson::Undefined) => {
            if preserve {
                let mut d = doc;
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Null);
                }
                out.push(d);
            }
        }
        Some(_) => {
            // A non-array value is treated as a one-element array.
            let mut d = doc;
            if let Some(ix) = index {
                set_path(&mut d, ix, Bson::Null);
            }
            out.push(d);
        }
    }
}

/// Values a query predicate sees at `path`: traversing arrays of documents, and at the end
/// both an array and its elements.
pub fn matcher_values(doc: &Document, path: &str) -> Vec<Bson> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    collect_matcher(&Bson::Document(doc.clone()), &parts, &mut out);
    out
}

fn collect_matcher(v: &Bson, parts: &[&str], out: &mut Vec<Bson>) {
    let Some((first, rest)) = parts.split_first() else {
        if let Bson::Array(a) = v {
            out.extend(a.iter().cloned());
        }
        out.push(v.clone());
        return;
    };
    match v {
        Bson::Document(d) => {
            if let Some(x) = d.get(*first) {
                collect_matcher(x, rest, out);
            }
        }
        Bson::Array(a) => {
            if let Some(i) = crate::path::parse_index(first) {
                if let Some(x) = a.get(i) {
                    collect_matcher(x, rest, out);
                }
            }
            for item in a {
                if let Bson::Document(_) = item {
                    collect_matcher(item, parts, out);
                }
            }
        }
        _ => {}
    }
}

/// `$lookup` local values: the values along `path` (arrays flattened); null if none.
fn local_values(doc: &Document, path: &str) -> Vec<Bson> {
    let parts = crate::expr::split_path(path);
    let mut out = Vec::new();
    match crate::expr::path_doc(doc, &parts) {
        None => out.push(Bson::Null),
        Some(Bson::Array(a)) => {
            fn flat(a: Vec<Bson>, out: &mut Vec<Bson>) {
                for x in a {
                    match x {
                        Bson::Array(inner) => flat(inner, out),
                        other => out.push(other),
                    }
                }
            }
            flat(a, &mut out);
        }
        Some(v) => out.push(v),
    }
    out
}

fn graph_lookup(
    g: &GraphLookupStage,
    mut doc: Document,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Document> {
    let foreign = ctx.scan(&g.from_db, &g.from)?;
    let coll = vars.collator.as_deref();
    let start = g.start_with.evaluate(&doc, vars)?.unwrap_or(Bson::Null);
    let mut frontier: Vec<Bson> = match start {
        Bson::Array(a) => a,
        other => vec![other],
    };
    let mut visited: HashMap<String, ()> = HashMap::new();
    let mut results: Vec<Document> = Vec::new();
    let mut depth = 0i64;
    while !frontier.is_empty() && g.max_depth.is_none_or(|m| depth <= m) {
        let mut next = Vec::new();
        for (i, fd) in foreign.iter().enumerate() {
            if let Some(r) = &g.restrict {
                if !r.matches(fd) {
                    continue;
                }
            }
            let tvals = matcher_values(fd, &g.connect_to);
            let hit = frontier.iter().any(|f| {
                tvals.iter().any(|t| bson_eq_with(t, f, coll))
                    || (matches!(f, Bson::Null) && tvals.is_empty())
            });
            if !hit {
                continue;
            }
            let key = match fd.get("_id") {
                Some(id) => group_key(id, coll),
                None => format!("#{i}"),
            };
            if visited.insert(key, ()).is_some() {
                continue;
            }
            let mut r = fd.clone();
            if let Some(df) = &g.depth_field {
                set_path(&mut r, df, Bson::Int64(depth));
            }
            for v in local_values(fd, &g.connect_from) {
                if !matches!(v, Bson::Null) || crate::path::get_path(fd, &g.connect_from).is_some()
                {
                    next.push(v);
                }
            }
            results.push(r);
        }
        frontier = next;
        depth += 1;
    }
    set_path(
        &mut doc,
        &g.as_field,
        Bson::Array(results.into_iter().map(Bson::Document).collect()),
    );
    Ok(doc)
}

fn bucket(b: &BucketStage, docs: Vec<Document>, vars: &Variables) -> Result<Vec<Document>> {
    let coll = vars.collator.as_deref();
    let n = b.boundaries.len();
    // Buckets 0..n-1 are boundary ranges; index n-1 is the default bucket.
    let mut states: Vec<Option<Vec<group::AccState>>> = (0..n).map(|_| None).collect();
    for d in &docs {
        let v = b.group_by.evaluate(d, vars)?.unwrap_or(Bson::Null);
        let mut idx = None;
        for i in 0..n - 1 {
            let lo = &b.boundaries[i];
            let hi = &b.boundaries[i + 1];
            if crate::compare::canonical_type(&v) == crate::compare::canonical_type(lo)
                && cmp_bson_with(&v, lo, coll) != std::cmp::Ordering::Less
                && cmp_bson_with(&v, hi, coll) == std::cmp::Ordering::Less
            {
                idx = Some(i);
                break;
            }
        }
        let idx = match idx {
            Some(i) => i,
            None => {
                if b.default.is_none() {
                    return Err(Error::location(
                        40066,
                        "$switch could not find a matching branch for an input, and no default was specified.",
                    ));
                }
                n - 1
            }
        };
        if states[idx].is_none() {
            states[idx] = Some(
                b.output
                    .iter()
                    .map(|a| group::AccState::start(a, d, vars))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        let st = states[idx].as_mut().unwrap();
        for (a, s) in b.output.iter().zip(st.iter_mut()) {
            s.add(a.op, a.arg.evaluate(d, vars)?, coll)?;
        }
    }
    let mut out: Vec<Document> = Vec::new();
    for (i, st) in states.into_iter().enumerate() {
        let Some(st) = st else { continue };
        let id = if i == n - 1 {
            b.default.clone().unwrap()
        } else {
            b.boundaries[i].clone()
        };
        let mut d = doc! {"_id": id};
        for (a, s) in b.output.iter().zip(st) {
            d.insert(a.name.clone(), s.finish(a.op)?);
        }
        out.push(d);
    }
    out.sort_by(|a, b| cmp_bson_with(a.get("_id").unwrap(), b.get("_id").unwrap(), coll));
    Ok(out)
}

fn redact(
    e: &Expr,
    root: &Document,
    cur: &Document,
    vars: &mut Variables,
) -> Result<Option<Document>> {
    vars.vars
        .insert("CURRENT".into(), Bson::Document(cur.clone()));
    let r = e.evaluate(root, vars)?;
    match r.as_ref().and_then(|v| v.as_str()) {
        Some("prune") => Ok(None),
        Some("keep") => Ok(Some(cur.clone())),
        Some("descend") => {
            let mut out = Document::new();
            for (k, v) in cur {
                match v {
                    Bson::Document(sub) => {
                        if let Some(r) = redact(e, root, sub, vars)? {
                            out.insert(k.clone(), Bson::Document(r));
                        }
                    }
                    Bson::Array(a) => {
                        let mut arr = Vec::new();
                        for item in a {
                            match item {
                                Bson::Document(sub) => {
                                    if let Some(r) = redact(e, root, sub, vars)? {
                                        arr.push(Bson::Document(r));
                                    }
                                }
                                other => arr.push(other.clone()),
                            }
                        }
                        out.insert(k.clone(), Bson::Array(arr));
                    }
                    other => {
                        out.insert(k.clone(), other.clone());
                    }
                }
            }
            Ok(Some(out))
        }
        _ => Err(Error::location(
            17053,
            format!(
                "$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned {}",
                util::show_opt(&r)
            ),
        )),
    }
}

#[allow(dead_code)]
const _CODES: i32 = codes::BAD_VALUE;

#[cfg(test)]
mod tests;

//! `$match`, `$project` / `$addFields` / `$set` / `$unset`, `$replaceRoot` /
//! `$replaceWith` and `$redact`: the stages that filter or reshape one document at a time.

use super::super::project;
use super::{type_name, Stage};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use crate::matcher::Matcher;
use bson::{doc, Bson, Document};

pub(crate) struct MatchStage {
    pub(crate) filter: Document,
    /// Top-level `$expr`, evaluated here (with the pipeline's variables).
    pub(crate) expr: Option<Expr>,
    /// The rest of the filter, for the matcher.
    pub(crate) rest: Document,
    pub(crate) matcher: Option<Matcher>,
    /// The rest refers to user variables (`$$x` inside a nested `$expr`): the matcher is
    /// rebuilt per run with the variables substituted.
    pub(crate) uses_vars: bool,
}

/// `$match`: the filter, its top-level `$expr` apart (evaluated with the variables).
pub(crate) fn parse_match(arg: &Bson) -> Result<Stage> {
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
    Ok(Stage::Match(Box::new(MatchStage {
        filter: filter.clone(),
        expr,
        rest,
        matcher,
        uses_vars,
    })))
}

/// `$project`.
pub(crate) fn parse_project(arg: &Bson) -> Result<Stage> {
    let Bson::Document(spec) = arg else {
        return Err(Error::location(
            15969,
            "$project specification must be an object",
        ));
    };
    Ok(Stage::Project(project::Tree::parse_project(spec)?))
}

/// `$addFields` and its alias `$set`.
pub(crate) fn parse_add_fields(name: &str, arg: &Bson) -> Result<Stage> {
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
        return Err(Error::location(
            40177,
            format!("Invalid {name} :: caused by :: specification must have at least one field"),
        ));
    }
    Ok(Stage::Project(project::Tree::parse_add_fields(name, spec)?))
}

/// `$replaceRoot: {newRoot: <expression>}`.
pub(crate) fn parse_replace_root(arg: &Bson) -> Result<Stage> {
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
    Ok(Stage::ReplaceRoot(new_root.ok_or_else(|| {
        Error::location(
            40414,
            "BSON field '$replaceRoot.newRoot' is missing but a required field",
        )
    })?))
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

/// `$match` over a batch: the `$expr` part with the pipeline's variables, the rest with
/// `matcher` (the stage's own, or one built for this run).
pub(crate) fn run_match(
    m: &MatchStage,
    matcher: Option<&Matcher>,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        if keeps(m, matcher, &d, vars)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// Whether `$match` `m` (its filter's part through `matcher`) keeps `d`.
pub(crate) fn keeps(
    m: &MatchStage,
    matcher: Option<&Matcher>,
    d: &Document,
    vars: &Variables,
) -> Result<bool> {
    if let Some(e) = &m.expr {
        if !crate::expr::truthy(&e.evaluate(d, vars)?) {
            return Ok(false);
        }
    }
    match matcher {
        Some(mm) => mm.matches_or_fail(d),
        None => Ok(true),
    }
}

/// `$replaceRoot` / `$replaceWith` over a batch.
pub(crate) fn replace_root(
    e: &Expr,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut out = Vec::with_capacity(docs.len());
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
    Ok(out)
}

/// `$redact` over a batch, with `$$DESCEND`, `$$PRUNE` and `$$KEEP` defined.
pub(crate) fn run_redact(e: &Expr, docs: Vec<Document>, vars: &Variables) -> Result<Vec<Document>> {
    let mut out = Vec::with_capacity(docs.len());
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

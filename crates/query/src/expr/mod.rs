//! Aggregation expressions (`$add`, `$cond`, field paths `"$a.b"`, `$$ROOT`, ...).
//!
//! An expression is parsed once into an [`Expr`] tree (validating operator names and
//! argument counts, as mongod does when it parses a pipeline) and then evaluated per
//! document. `evaluate`/`evaluate_opt` parse and evaluate in one go.
//!
//! Missing values are `None` throughout evaluation; most operators turn a null or missing
//! argument into a null result.

pub mod accum_n;
mod arith;
mod array;
mod bits;
mod convert;
mod date;
mod decimal;
pub mod num;
mod parse;
mod string;
mod trig;
pub mod util;

use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::collections::HashMap;

pub use parse::validate_variable_name;
pub use util::{truthy, type_name};

/// Population/sample standard deviation of numbers (null when undefined).
pub fn arith_std_dev(xs: &[f64], sample: bool) -> Bson {
    arith::std_dev(xs, sample)
}

/// User and system variables visible to an expression (`$$ROOT` is the document evaluated,
/// `$$CURRENT` defaults to it; `$let`, `$map`, `$filter` and `$lookup.let` add more).
#[derive(Debug, Clone, Default)]
pub struct Variables {
    pub vars: HashMap<String, Bson>,
    /// `$$NOW` and `$$CLUSTER_TIME` for this operation.
    pub now: Option<bson::DateTime>,
    /// The operation's collation: comparisons (`$eq`, `$in`, `$setUnion`, ...) compare
    /// strings under it.
    pub collator: Option<std::sync::Arc<crate::collation::Collator>>,
    /// The operation said `allowDiskUse: false`: a blocking stage past its memory limit
    /// fails instead of spilling (mongod's allowDiskUseByDefault makes spilling the default).
    pub forbid_disk_use: bool,
    /// What a `$group`'s groups may hold before they spill (None: mongod's 100 MiB,
    /// `pipeline::DEFAULT_MAX_GROUP_BYTES`; the server passes its
    /// `internalDocumentSourceGroupMaxMemoryBytes`).
    pub max_group_bytes: Option<usize>,
}

impl Variables {
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy with `$$NOW` fixed (to the current time if it was unset), so that every
    /// document of one operation sees the same `$$NOW`.
    pub fn with_now(&self) -> Variables {
        let mut v = self.clone();
        if v.now.is_none() {
            v.now = Some(bson::DateTime::now());
        }
        v
    }
    pub fn set(&mut self, name: impl Into<String>, value: Bson) {
        self.vars.insert(name.into(), value);
    }
}

/// The variables of a command's `let` option: each value is an expression evaluated
/// once, against no document.
pub fn let_variables(let_doc: &Document) -> Result<Variables> {
    let mut vars = Variables {
        now: Some(bson::DateTime::now()),
        ..Default::default()
    };
    let empty = Document::new();
    for (name, e) in let_doc {
        let value = evaluate(e, &empty, &vars)?;
        vars.vars.insert(name.clone(), value);
    }
    Ok(vars)
}

/// Evaluates `expr` against `root`. A missing field evaluates to `Bson::Undefined`
/// internally is NOT used: missing is represented as `None` by `evaluate_opt`.
pub fn evaluate(expr: &Bson, root: &Document, vars: &Variables) -> Result<Bson> {
    Ok(evaluate_opt(expr, root, vars)?.unwrap_or(Bson::Null))
}

/// Like `evaluate`, but `None` means "missing" (e.g. `"$nosuchfield"`), which `$project`
/// and `$addFields` treat differently from null.
pub fn evaluate_opt(expr: &Bson, root: &Document, vars: &Variables) -> Result<Option<Bson>> {
    Expr::parse(expr)?.evaluate(root, vars)
}

/// Whether the expression (or filter, or stage) `v` names one of the operators `names`
/// anywhere inside it (e.g. `$function` where JavaScript is not allowed).
pub fn contains_operator(v: &Bson, names: &[&str]) -> bool {
    match v {
        Bson::Document(d) => d
            .iter()
            .any(|(k, x)| names.contains(&k.as_str()) || contains_operator(x, names)),
        Bson::Array(a) => a.iter().any(|x| contains_operator(x, names)),
        _ => false,
    }
}

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub enum Expr {
    Const(Bson),
    /// `"$a.b"`: a path into `$$CURRENT`.
    Field(Vec<String>),
    /// `"$$name.a.b"`.
    Var(String, Vec<String>),
    /// `{a: <expr>, b: <expr>}`.
    Doc(Vec<(String, Expr)>),
    Arr(Vec<Expr>),
    /// An operator with positional arguments.
    Op(String, Vec<Expr>),
    /// An operator with named arguments (`$dateToString`, `$regexMatch`, ...).
    Named(String, Vec<(String, Expr)>),
    Let(Vec<(String, Expr)>, Box<Expr>),
    Map {
        input: Box<Expr>,
        var: String,
        body: Box<Expr>,
    },
    Filter {
        input: Box<Expr>,
        var: String,
        cond: Box<Expr>,
        limit: Option<Box<Expr>>,
    },
    Reduce {
        input: Box<Expr>,
        initial: Box<Expr>,
        body: Box<Expr>,
    },
    Switch {
        branches: Vec<(Expr, Expr)>,
        default: Option<Box<Expr>>,
    },
    SortArray {
        input: Box<Expr>,
        sort_by: Bson,
    },
    /// `$function`: JavaScript `body` called with the evaluated `args` (an array).
    Function {
        body: std::sync::Arc<str>,
        args: Box<Expr>,
    },
}

/// A frame of `$let`/`$map`/`$filter`/`$reduce` bindings.
pub(crate) struct Frame<'a> {
    vars: Vec<(&'a str, Bson)>,
    next: Option<&'a Frame<'a>>,
}

#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub root: &'a Document,
    pub vars: &'a Variables,
    frame: Option<&'a Frame<'a>>,
}

impl<'a> Env<'a> {
    fn lookup(&self, name: &str) -> Option<&'a Bson> {
        let mut f = self.frame;
        while let Some(fr) = f {
            if let Some((_, v)) = fr.vars.iter().rev().find(|(n, _)| *n == name) {
                return Some(v);
            }
            f = fr.next;
        }
        self.vars.vars.get(name)
    }
}

impl Expr {
    /// Evaluates against `root` (also `$$CURRENT` unless `vars` rebinds it).
    pub fn evaluate(&self, root: &Document, vars: &Variables) -> Result<Option<Bson>> {
        let env = Env {
            root,
            vars,
            frame: None,
        };
        self.eval(&env)
    }

    /// Evaluates, turning missing into null.
    pub fn evaluate_value(&self, root: &Document, vars: &Variables) -> Result<Bson> {
        Ok(self.evaluate(root, vars)?.unwrap_or(Bson::Null))
    }

    /// Whether the expression's value is the same for every document and every run: it
    /// reads no field, no variable and no random number. (mongod decides this by
    /// folding the expression; `$percentile`'s `p` must be such an expression.)
    pub fn is_constant(&self) -> bool {
        match self {
            Expr::Const(_) => true,
            Expr::Doc(fields) => fields.iter().all(|(_, e)| e.is_constant()),
            // `$getField` without `input` reads `$$CURRENT`.
            Expr::Named(name, args) => {
                name != "$getField" && args.iter().all(|(_, e)| e.is_constant())
            }
            Expr::Arr(items) => items.iter().all(Expr::is_constant),
            Expr::Op(name, args) => name != "$rand" && args.iter().all(Expr::is_constant),
            _ => false,
        }
    }

    /// True for a constant expression (`$literal` or a plain value).
    pub fn as_const(&self) -> Option<&Bson> {
        match self {
            Expr::Const(c) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn eval(&self, env: &Env) -> Result<Option<Bson>> {
        match self {
            Expr::Const(c) => Ok(Some(c.clone())),
            Expr::Field(path) => Ok(match env.lookup("CURRENT") {
                Some(cur) => path_value(cur, path),
                None => path_doc(env.root, path),
            }),
            Expr::Var(name, path) => {
                let base: Bson = match env.lookup(name) {
                    Some(v) => {
                        if path.is_empty() {
                            return Ok(Some(v.clone()));
                        }
                        return Ok(path_value(v, path));
                    }
                    None => match name.as_str() {
                        "ROOT" | "CURRENT" => {
                            if path.is_empty() {
                                return Ok(Some(Bson::Document(env.root.clone())));
                            }
                            return Ok(path_doc(env.root, path));
                        }
                        "REMOVE" => return Ok(None),
                        "NOW" => Bson::DateTime(env.vars.now.unwrap_or_else(bson::DateTime::now)),
                        "CLUSTER_TIME" => {
                            let now = env.vars.now.unwrap_or_else(bson::DateTime::now);
                            Bson::Timestamp(bson::Timestamp {
                                time: (now.timestamp_millis() / 1000) as u32,
                                increment: 1,
                            })
                        }
                        _ => {
                            return Err(Error::location(
                                17276,
                                format!("Use of undefined variable: {name}"),
                            ))
                        }
                    },
                };
                Ok(if path.is_empty() {
                    Some(base)
                } else {
                    path_value(&base, path)
                })
            }
            Expr::Doc(fields) => {
                let mut out = Document::new();
                for (k, e) in fields {
                    if let Some(v) = e.eval(env)? {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Some(Bson::Document(out)))
            }
            Expr::Arr(items) => {
                let mut out = Vec::with_capacity(items.len());
                for e in items {
                    // Missing values inside an array literal become null.
                    out.push(e.eval(env)?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Expr::Op(name, args) => self.eval_op(name, args, env),
            Expr::Named(name, args) => {
                let mut vals: Vec<(&str, Option<Bson>)> = Vec::with_capacity(args.len());
                for (k, e) in args {
                    vals.push((k.as_str(), e.eval(env)?));
                }
                let get = |k: &str| -> Option<Bson> {
                    vals.iter()
                        .find(|(n, _)| *n == k)
                        .and_then(|(_, v)| v.clone())
                };
                let has = |k: &str| vals.iter().any(|(n, _)| *n == k);
                eval_named(name, &get, &has, env)
            }
            Expr::Let(vars, body) => {
                let mut bound = Vec::with_capacity(vars.len());
                for (n, e) in vars {
                    bound.push((n.as_str(), e.eval(env)?.unwrap_or(Bson::Null)));
                }
                let frame = Frame {
                    vars: bound,
                    next: env.frame,
                };
                let env2 = Env {
                    frame: Some(&frame),
                    ..*env
                };
                body.eval(&env2)
            }
            Expr::Map { input, var, body } => {
                let inp = input.eval(env)?;
                let arr = match inp {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(a)) => a,
                    Some(other) => {
                        return Err(Error::location(
                            16883,
                            format!("input to $map must be an array not {}", type_name(&other)),
                        ))
                    }
                };
                let mut out = Vec::with_capacity(arr.len());
                for item in arr {
                    let frame = Frame {
                        vars: vec![(var.as_str(), item)],
                        next: env.frame,
                    };
                    let env2 = Env {
                        frame: Some(&frame),
                        ..*env
                    };
                    out.push(body.eval(&env2)?.unwrap_or(Bson::Null));
                }
                Ok(Some(Bson::Array(out)))
            }
            Expr::Filter {
                input,
                var,
                cond,
                limit,
            } => {
                let inp = input.eval(env)?;
                let arr = match inp {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(a)) => a,
                    Some(other) => {
                        return Err(Error::location(
                            28651,
                            format!(
                                "input to $filter must be an array not {}",
                                type_name(&other)
                            ),
                        ))
                    }
                };
                let limit = match limit {
                    None => None,
                    Some(l) => match l.eval(env)? {
                        None | Some(Bson::Null) => None,
                        Some(v) => match num::as_exact_i32(&v) {
                            Some(n) if n > 0 => Some(n as usize),
                            Some(_) => {
                                return Err(Error::location(327391, format!("$filter: limit must be greater than 0: {}", util::show(&v))))
                            }
                            None => {
                                return Err(Error::location(327391, format!("$filter: limit must be represented as a 32-bit integral value: {}", util::show(&v))))
                            }
                        },
                    },
                };
                let mut out = Vec::new();
                for item in arr {
                    if limit.is_some_and(|l| out.len() >= l) {
                        break;
                    }
                    let frame = Frame {
                        vars: vec![(var.as_str(), item)],
                        next: env.frame,
                    };
                    let env2 = Env {
                        frame: Some(&frame),
                        ..*env
                    };
                    let keep = truthy(&cond.eval(&env2)?);
                    if keep {
                        out.push(frame.vars.into_iter().next().unwrap().1);
                    }
                }
                Ok(Some(Bson::Array(out)))
            }
            Expr::Reduce {
                input,
                initial,
                body,
            } => {
                let inp = input.eval(env)?;
                let arr = match inp {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                    Some(Bson::Array(a)) => a,
                    Some(other) => {
                        return Err(Error::location(
                            40080,
                            format!(
                                "$reduce requires that 'input' be an array, found: {}",
                                util::show(&other)
                            ),
                        ))
                    }
                };
                let mut acc = initial.eval(env)?.unwrap_or(Bson::Null);
                for item in arr {
                    let frame = Frame {
                        vars: vec![("value", acc), ("this", item)],
                        next: env.frame,
                    };
                    let env2 = Env {
                        frame: Some(&frame),
                        ..*env
                    };
                    acc = body.eval(&env2)?.unwrap_or(Bson::Null);
                }
                Ok(Some(acc))
            }
            Expr::Switch { branches, default } => {
                for (case, then) in branches {
                    if truthy(&case.eval(env)?) {
                        return then.eval(env);
                    }
                }
                match default {
                    Some(d) => d.eval(env),
                    None => Err(Error::location(
                        40066,
                        "$switch could not find a matching branch for an input, and no default was specified.",
                    )),
                }
            }
            Expr::Function { body, args } => {
                let args = match args.eval(env)? {
                    Some(Bson::Array(a)) => a,
                    _ => {
                        return Err(Error::location(
                            31266,
                            "The args field must be of type array",
                        ))
                    }
                };
                crate::script::call_function(body, &args).map(Some)
            }
            Expr::SortArray { input, sort_by } => {
                let inp = input.eval(env)?;
                match inp {
                    None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(Some(Bson::Null)),
                    Some(Bson::Array(mut a)) => {
                        array::sort_array(&mut a, sort_by, env.vars.collator.as_deref());
                        Ok(Some(Bson::Array(a)))
                    }
                    Some(other) => Err(Error::location(
                        2942504,
                        format!("The input argument to $sortArray must be an array, but was of type: {}", type_name(&other)),
                    )),
                }
            }
        }
    }

    fn eval_op(&self, name: &str, args: &[Expr], env: &Env) -> Result<Option<Bson>> {
        // Short-circuiting operators first.
        match name {
            "$and" => {
                for a in args {
                    if !truthy(&a.eval(env)?) {
                        return Ok(Some(Bson::Boolean(false)));
                    }
                }
                return Ok(Some(Bson::Boolean(true)));
            }
            "$or" => {
                for a in args {
                    if truthy(&a.eval(env)?) {
                        return Ok(Some(Bson::Boolean(true)));
                    }
                }
                return Ok(Some(Bson::Boolean(false)));
            }
            "$cond" => {
                return if truthy(&args[0].eval(env)?) {
                    args[1].eval(env)
                } else {
                    args[2].eval(env)
                };
            }
            "$ifNull" => {
                let (last, rest) = args.split_last().unwrap();
                for a in rest {
                    let v = a.eval(env)?;
                    if !util::nullish(&v) {
                        return Ok(v);
                    }
                }
                return last.eval(env);
            }
            _ => {}
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(a.eval(env)?);
        }
        apply_op(name, vals, env.vars.collator.as_deref())
    }
}

/// `"$a.b"` evaluated on a document: arrays along the way map over their document elements.
pub fn path_doc(doc: &Document, path: &[String]) -> Option<Bson> {
    let (first, rest) = path.split_first()?;
    let v = doc.get(first)?;
    if rest.is_empty() {
        return Some(v.clone());
    }
    match v {
        Bson::Document(d) => path_doc(d, rest),
        Bson::Array(a) => Some(path_array(a, rest)),
        _ => None,
    }
}

fn path_array(a: &[Bson], rest: &[String]) -> Bson {
    let mut out = Vec::new();
    for item in a {
        if let Bson::Document(d) = item {
            if let Some(v) = path_doc(d, rest) {
                out.push(v);
            }
        }
    }
    Bson::Array(out)
}

/// A path applied to a value (for `$$var.a.b`).
pub fn path_value(v: &Bson, path: &[String]) -> Option<Bson> {
    if path.is_empty() {
        return Some(v.clone());
    }
    match v {
        Bson::Document(d) => path_doc(d, path),
        Bson::Array(a) => Some(path_array(a, path)),
        _ => None,
    }
}

/// Parses a dotted field path string (without the `$`) for agg path evaluation.
pub fn split_path(s: &str) -> Vec<String> {
    s.split('.').map(|p| p.to_string()).collect()
}

fn apply_op(
    name: &str,
    vals: Vec<Option<Bson>>,
    coll: Option<&crate::collation::Collator>,
) -> Result<Option<Bson>> {
    if let Some(r) = arith::apply(name, &vals, coll)? {
        return Ok(r);
    }
    if let Some(r) = string::apply(name, &vals)? {
        return Ok(r);
    }
    if let Some(r) = array::apply(name, &vals, coll)? {
        return Ok(r);
    }
    if let Some(r) = convert::apply(name, &vals)? {
        return Ok(r);
    }
    if let Some(r) = trig::apply(name, &vals)? {
        return Ok(r);
    }
    if let Some(r) = bits::apply(name, &vals)? {
        return Ok(r);
    }
    Err(Error::new(
        crate::error::codes::INVALID_PIPELINE_OPERATOR,
        format!("Unrecognized expression '{name}'"),
    ))
}

fn eval_named(
    name: &str,
    get: &dyn Fn(&str) -> Option<Bson>,
    has: &dyn Fn(&str) -> bool,
    env: &Env,
) -> Result<Option<Bson>> {
    if parse::DATE_PARTS.contains(&name) {
        return date::date_part(name, get("date"), get("timezone"), has("timezone"));
    }
    match name {
        "$dateToString" => date::date_to_string(get, has),
        "$dateFromString" => date::date_from_string(get, has),
        "$dateToParts" => date::date_to_parts(get),
        "$dateFromParts" => date::date_from_parts(get, has),
        "$dateAdd" | "$dateSubtract" => date::date_add(name, get),
        "$dateDiff" => date::date_diff(get),
        "$dateTrunc" => date::date_trunc(get),
        "$regexMatch" | "$regexFind" | "$regexFindAll" => {
            string::regex_op(name, get("input"), get("regex"), get("options"))
        }
        "$replaceOne" | "$replaceAll" => {
            string::replace_op(name, get("input"), get("find"), get("replacement"))
        }
        "$trim" | "$ltrim" | "$rtrim" => string::trim_op(name, get("input"), get("chars")),
        "$firstN" | "$lastN" | "$minN" | "$maxN" => {
            accum_n::eval_n(name, get("n"), get("input"), env.vars.collator.as_deref())
        }
        "$median" | "$percentile" => accum_n::eval_quantile(name, get("input"), get("p")),
        "$zip" => array::zip(
            get("inputs"),
            get("useLongestLength"),
            get("defaults"),
            has("defaults"),
        ),
        "$convert" => convert::convert(
            get("input"),
            get("to"),
            has("onError").then(|| get("onError")),
            has("onNull").then(|| get("onNull")),
        ),
        "$getField" => {
            let field = field_name_arg(name, get("field"))?;
            let input = if has("input") {
                get("input")
            } else {
                match env.lookup("CURRENT") {
                    Some(c) => Some(c.clone()),
                    None => Some(Bson::Document(env.root.clone())),
                }
            };
            Ok(match input {
                None => None,
                Some(Bson::Null) | Some(Bson::Undefined) => Some(Bson::Null),
                Some(Bson::Document(d)) => d.get(&field).cloned(),
                Some(_) => None,
            })
        }
        "$setField" | "$unsetField" => {
            let field = field_name_arg(name, get("field"))?;
            let input = get("input");
            let mut d = match input {
                None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(Some(Bson::Null)),
                Some(Bson::Document(d)) => d,
                Some(other) => {
                    return Err(Error::location(
                        4161105,
                        format!(
                            "{name} requires 'input' to evaluate to type Object, but got {}",
                            type_name(&other)
                        ),
                    ))
                }
            };
            let value = if name == "$unsetField" {
                None
            } else {
                get("value")
            };
            match value {
                Some(v) => {
                    d.insert(field, v);
                }
                None => {
                    d.remove(&field);
                }
            }
            Ok(Some(Bson::Document(d)))
        }
        _ => Err(Error::new(
            crate::error::codes::INVALID_PIPELINE_OPERATOR,
            format!("Unrecognized expression '{name}'"),
        )),
    }
}

fn field_name_arg(op: &str, v: Option<Bson>) -> Result<String> {
    match v {
        Some(Bson::String(s)) => Ok(s),
        other => Err(Error::location(
            3041704,
            format!(
                "{op} requires 'field' to evaluate to type String, but got {}",
                util::type_name_opt(&other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests;

//! Aggregation expressions (`$add`, `$cond`, field paths `"$a.b"`, `$$ROOT`, ...).
//! Interface fixed here; the implementation fills it in.

use crate::error::{Error, Result};
use bson::{Bson, Document};
use std::collections::HashMap;

/// User and system variables visible to an expression (`$$ROOT` is the document evaluated,
/// `$$CURRENT` defaults to it; `$let`, `$map`, `$filter` and `$lookup.let` add more).
#[derive(Debug, Clone, Default)]
pub struct Variables {
    pub vars: HashMap<String, Bson>,
    /// `$$NOW` and `$$CLUSTER_TIME` for this operation.
    pub now: Option<bson::DateTime>,
}

/// Evaluates `expr` against `root`. A missing field evaluates to `Bson::Undefined`
/// internally is NOT used: missing is represented as `None` by `evaluate_opt`.
pub fn evaluate(expr: &Bson, root: &Document, vars: &Variables) -> Result<Bson> {
    Ok(evaluate_opt(expr, root, vars)?.unwrap_or(Bson::Null))
}

/// Like `evaluate`, but `None` means "missing" (e.g. `"$nosuchfield"`), which `$project`
/// and `$addFields` treat differently from null.
pub fn evaluate_opt(expr: &Bson, root: &Document, vars: &Variables) -> Result<Option<Bson>> {
    let _ = (expr, root, vars);
    Err(Error::internal("expressions not implemented yet"))
}

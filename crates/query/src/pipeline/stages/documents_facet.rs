//! `$documents` and `$facet`.

use super::super::{Context, Pipeline, RunCtx};
use super::Stage;
use super::{parse_sub_pipeline, type_name};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use bson::{Bson, Document};

/// `$facet`: named sub-pipelines, none of them with a stage `$facet` refuses.
pub(crate) fn parse_facet(arg: &Bson, db: &str) -> Result<Stage> {
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
            return Err(Error::location(
                40353,
                format!("$facet output field names may not start with '$' or contain '.': {k}"),
            ));
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
    Ok(Stage::Facet(facets))
}

/// `$facet`: each sub-pipeline over all the documents, as one document of arrays.
pub(crate) fn facet(
    facets: &[(String, Pipeline)],
    docs: Vec<Document>,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Vec<Document>> {
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
    Ok(vec![out])
}

/// `$documents`: the documents its expression evaluates to.
pub(crate) fn documents(e: &Expr, vars: &Variables) -> Result<Vec<Document>> {
    let empty = Document::new();
    Ok(match e.evaluate(&empty, vars)? {
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
    })
}

//! `$documents` and `$facet`.

use super::super::{Context, Pipeline, Run, RunCtx};
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
    let mut run = FacetRun::new(facets, ctx, vars)?;
    for d in docs {
        run.push(d)?;
    }
    run.finish()
}

/// A `$facet` taking its input one document at a time: each document goes to each
/// sub-pipeline's run, which holds only what its stages need (a `$count`'s number, a
/// `$group`'s groups, a `$limit`'s documents: the pagination facets `[{$count}]` and
/// `[{$skip}, {$limit}]` hold a page, not the input). Before, the input was held whole
/// and copied into each sub-pipeline.
pub(crate) struct FacetRun<'a> {
    runs: Vec<(&'a str, Run<'a>)>,
}

impl<'a> FacetRun<'a> {
    pub(crate) fn new(
        facets: &'a [(String, Pipeline)],
        ctx: &'a RunCtx<'a>,
        vars: &'a Variables,
    ) -> Result<FacetRun<'a>> {
        let runs = facets
            .iter()
            .map(|(name, p)| Ok((name.as_str(), Run::new(p, ctx, vars)?)))
            .collect::<Result<_>>()?;
        Ok(FacetRun { runs })
    }

    /// Whether one of the sub-pipelines takes more input.
    pub(crate) fn wants_more(&self) -> bool {
        self.runs.iter().any(|(_, r)| r.wants_more())
    }

    pub(crate) fn push(&mut self, doc: Document) -> Result<()> {
        let wanting = self.runs.iter().filter(|(_, r)| r.wants_more()).count();
        let mut given = 0;
        let mut doc = Some(doc);
        for (_, run) in self.runs.iter_mut().filter(|(_, r)| r.wants_more()) {
            given += 1;
            // The last run that wants it takes the document itself.
            let d = if given == wanting {
                doc.take().expect("the document, for the last run")
            } else {
                doc.clone().expect("the document, for each run")
            };
            run.push(d)?;
        }
        Ok(())
    }

    /// The one output document: each sub-pipeline's output under its name.
    pub(crate) fn finish(self) -> Result<Vec<Document>> {
        let mut out = Document::new();
        for (name, run) in self.runs {
            let res = run.finish()?;
            out.insert(
                name,
                Bson::Array(res.into_iter().map(Bson::Document).collect()),
            );
        }
        Ok(vec![out])
    }
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

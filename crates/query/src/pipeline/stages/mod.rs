//! The aggregation stages: what each one parses to ([`Stage`]) and how each one runs,
//! the stages themselves in files by family. The pipeline ([`super::Pipeline`]) checks
//! where a stage may stand and drives the documents through them.

pub(super) mod bucket_auto;
mod densify;
mod documents_facet;
mod fill;
pub(super) mod group_bucket;
mod lookup_union;
mod match_project;
mod output;
pub(super) mod sort_limit_sample;
mod unwind;
pub(super) mod window;

use super::group::{self, AccSpec};
use super::project;
use super::{Context, Pipeline, RunCtx};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use crate::matcher::Matcher;
use crate::sort::SortSpec;
use bson::{Bson, Document};

use group_bucket::BucketStage;
use lookup_union::{GraphLookupStage, LookupStage};
pub(crate) use match_project::MatchStage;

pub(crate) use documents_facet::FacetRun;
pub use lookup_union::matcher_values;
pub(crate) use lookup_union::ForeignIndex;
pub use match_project::substitute_vars;

/// One parsed stage.
pub(crate) enum Stage {
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
    /// `$sortByCount`: a `$group` by the expression counting (`accs`), by count.
    SortByCount {
        id: Expr,
        accs: Vec<AccSpec>,
    },
    Sample(usize),
    Bucket(Box<BucketStage>),
    UnionWith {
        db: String,
        coll: String,
        pipeline: Option<Pipeline>,
    },
    Redact(Expr),
    Documents(Expr),
    SetWindowFields(Box<window::WindowFieldsStage>),
    Fill(Box<fill::FillStage>),
    BucketAuto(Box<bucket_auto::BucketAutoStage>),
    Densify(Box<densify::DensifyStage>),
    /// `$out` / `$merge`: documents pass through; the engine writes them.
    Output,
}

impl Stage {
    /// The stage named `name` with its argument, checked as mongod checks it.
    pub(crate) fn parse(name: &str, arg: &Bson, db: &str) -> Result<Stage> {
        match name {
            // The engine runs a leading $geoNear itself (it needs the geo index).
            "$geoNear" => Err(Error::location(
                40602,
                "$geoNear is only valid as the first stage in a pipeline",
            )),
            "$match" => match_project::parse_match(arg),
            "$project" => match_project::parse_project(arg),
            "$addFields" | "$set" => match_project::parse_add_fields(name, arg),
            "$unset" => Ok(Stage::Project(project::Tree::parse_unset(arg)?)),
            "$replaceRoot" => match_project::parse_replace_root(arg),
            "$replaceWith" => Ok(Stage::ReplaceRoot(Expr::parse(arg)?)),
            "$redact" => Ok(Stage::Redact(Expr::parse(arg)?)),
            "$unwind" => unwind::parse_unwind(arg),
            "$sort" => sort_limit_sample::parse_sort(arg),
            "$limit" => sort_limit_sample::parse_limit(arg),
            "$skip" => sort_limit_sample::parse_skip(arg),
            "$sample" => sort_limit_sample::parse_sample(arg),
            "$group" => group_bucket::parse_group(arg),
            "$count" => group_bucket::parse_count(arg),
            "$sortByCount" => group_bucket::parse_sort_by_count(arg),
            "$bucket" => group_bucket::parse_bucket(arg),
            "$setWindowFields" => window::parse_set_window_fields(arg),
            "$fill" => fill::parse_fill(arg),
            "$bucketAuto" => bucket_auto::parse_bucket_auto(arg),
            "$densify" => densify::parse_densify(arg),
            "$lookup" => lookup_union::parse_lookup(arg, db),
            "$graphLookup" => lookup_union::parse_graph_lookup(arg, db),
            "$unionWith" => lookup_union::parse_union_with(arg, db),
            "$facet" => documents_facet::parse_facet(arg, db),
            "$documents" => Ok(Stage::Documents(Expr::parse(arg)?)),
            "$out" | "$merge" => output::parse_output(name, arg),
            // A change stream takes this stage off before its stages are parsed: here it
            // is outside one.
            "$changeStreamSplitLargeEvent" => Err(Error::new(
                crate::error::codes::ILLEGAL_OPERATION,
                format!("{name} can only be used in a $changeStream pipeline"),
            )),
            _ => Err(Error::location(
                40324,
                format!("Unrecognized pipeline stage name: '{name}'"),
            )),
        }
    }

    /// Whether documents go through one at a time (else the stage needs all of them).
    pub(crate) fn is_streaming(&self) -> bool {
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

    /// The `$match` stage's matcher, when this is one.
    pub(crate) fn matcher(&self) -> Option<&Matcher> {
        match self {
            Stage::Match(m) => m.matcher.as_ref(),
            _ => None,
        }
    }

    /// A streaming stage over a batch. `matcher` replaces a `$match`'s own (one built
    /// for this run's variables or collation); `counter` is a `$skip`'s or `$limit`'s
    /// count still to go.
    pub(crate) fn apply_streaming(
        &self,
        docs: Vec<Document>,
        ctx: &RunCtx,
        vars: &Variables,
        matcher: Option<&Matcher>,
        counter: &mut usize,
    ) -> Result<Vec<Document>> {
        Ok(match self {
            Stage::Match(m) => {
                match_project::run_match(m, matcher.or(m.matcher.as_ref()), docs, vars)?
            }
            Stage::Project(tree) => docs
                .iter()
                .map(|d| tree.apply(d, vars))
                .collect::<Result<_>>()?,
            Stage::Skip(_) => sort_limit_sample::skip(docs, counter),
            Stage::Limit(_) => sort_limit_sample::limit(docs, counter),
            Stage::Unwind {
                path,
                index,
                preserve,
            } => {
                let mut out = Vec::with_capacity(docs.len());
                for d in docs {
                    unwind::unwind(d, path, index.as_deref(), *preserve, &mut out);
                }
                out
            }
            Stage::ReplaceRoot(e) => match_project::replace_root(e, docs, vars)?,
            Stage::Lookup(l) => docs
                .into_iter()
                .map(|d| lookup_union::lookup(l, d, ctx, vars))
                .collect::<Result<_>>()?,
            Stage::GraphLookup(g) => docs
                .into_iter()
                .map(|d| lookup_union::graph_lookup(g, d, ctx, vars))
                .collect::<Result<_>>()?,
            Stage::Redact(e) => match_project::run_redact(e, docs, vars)?,
            Stage::Output => docs,
            _ => unreachable!("not a streaming stage"),
        })
    }

    /// A blocking stage over all the documents.
    pub(crate) fn apply_blocking(
        &self,
        docs: Vec<Document>,
        ctx: &RunCtx,
        vars: &Variables,
    ) -> Result<Vec<Document>> {
        Ok(match self {
            Stage::Sort { spec, limit } => sort_limit_sample::sort(spec, *limit, docs, vars),
            Stage::Group { id, accs } => group::run_group(id, accs, docs, vars)?,
            Stage::Count(f) => group_bucket::count(f, docs),
            Stage::Facet(facets) => documents_facet::facet(facets, docs, ctx, vars)?,
            Stage::SortByCount { id, accs } => group_bucket::sort_by_count(id, accs, docs, vars)?,
            Stage::Sample(n) => sort_limit_sample::sample(*n, docs),
            Stage::Bucket(b) => group_bucket::bucket(b, docs, vars)?,
            Stage::UnionWith { db, coll, pipeline } => {
                lookup_union::union_with(db, coll, pipeline.as_ref(), docs, ctx, vars)?
            }
            Stage::Documents(e) => documents_facet::documents(e, vars)?,
            Stage::SetWindowFields(w) => window::set_window_fields(w, docs, vars)?,
            Stage::Fill(f) => fill::fill(f, docs, vars)?,
            Stage::BucketAuto(b) => bucket_auto::bucket_auto(b, docs, vars)?,
            Stage::Densify(d) => densify::densify(d, docs, vars)?,
            _ => unreachable!("streaming stage in blocking path"),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Argument checks several stages share.

pub(crate) fn type_name(v: &Bson) -> &'static str {
    util::type_name(v)
}

pub(crate) fn string_arg<'a>(stage: &str, name: &str, v: &'a Bson) -> Result<&'a str> {
    match v {
        Bson::String(s) => Ok(s),
        other => Err(Error::failed_to_parse(format!(
            "{stage} argument '{name}' must be a string, found {}: {}",
            type_name(other),
            util::show(other)
        ))),
    }
}

pub(crate) fn parse_from(stage: &str, v: &Bson, db: &str) -> Result<(String, String)> {
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

pub(crate) fn parse_sub_pipeline(
    v: &Bson,
    db: &str,
    ctx: Context,
    stage: &str,
) -> Result<Pipeline> {
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

pub(crate) fn parse_field_name_option(stage: &str, opt: &str, v: &Bson) -> Result<String> {
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

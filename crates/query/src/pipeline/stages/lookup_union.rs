//! `$lookup`, `$graphLookup` and `$unionWith`: the stages that read other collections
//! (through the run's [`RunCtx`]).

use super::super::group::group_key;
use super::super::{Context, Pipeline, RunCtx};
use super::Stage;
use super::{parse_field_name_option, parse_from, parse_sub_pipeline, string_arg, type_name};
use crate::compare::bson_eq_with;
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use crate::matcher::Matcher;
use crate::path::set_path;
use bson::{Bson, Document};
use std::collections::HashMap;

pub(crate) struct LookupStage {
    from_db: String,
    from: Option<String>,
    as_path: String,
    local_field: Option<String>,
    foreign_field: Option<String>,
    let_vars: Vec<(String, Expr)>,
    pipeline: Option<Pipeline>,
}

pub(crate) struct GraphLookupStage {
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

/// `$lookup`: equality on `localField`/`foreignField`, or a `pipeline` with `let`.
pub(crate) fn parse_lookup(arg: &Bson, db: &str) -> Result<Stage> {
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
            "foreignField" => foreign = Some(string_arg("$lookup", "foreignField", v)?.to_string()),
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
    let as_path =
        as_path.ok_or_else(|| Error::failed_to_parse("must specify 'as' field for a $lookup"))?;
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

/// `$graphLookup`: a recursive search from `startWith` along `connectFromField`.
pub(crate) fn parse_graph_lookup(arg: &Bson, db: &str) -> Result<Stage> {
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
            "connectToField" => connect_to = Some(parse_field_name_option("$graphLookup", k, v)?),
            "as" => as_field = Some(parse_field_name_option("$graphLookup", k, v)?),
            "depthField" => depth_field = Some(parse_field_name_option("$graphLookup", k, v)?),
            "maxDepth" => {
                let n = crate::expr::num::as_exact_i64(v).filter(|_| crate::compare::is_number(v));
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

/// `$unionWith`: a collection name, or `{coll, pipeline}`.
pub(crate) fn parse_union_with(arg: &Bson, db: &str) -> Result<Stage> {
    let (coll, pipeline) = match arg {
        Bson::String(s) => (s.clone(), None),
        Bson::Document(d) => {
            let mut coll = None;
            let mut pipeline = None;
            for (k, v) in d {
                match k.as_str() {
                    "coll" => coll = Some(string_arg("$unionWith", "coll", v)?.to_string()),
                    "pipeline" => {
                        pipeline =
                            Some(parse_sub_pipeline(v, db, Context::UnionWith, "$unionWith")?)
                    }
                    _ => {
                        return Err(Error::location(
                            40415,
                            format!("BSON field '$unionWith.{k}' is an unknown field."),
                        ))
                    }
                }
            }
            let coll = coll.ok_or_else(|| {
                Error::location(
                    40414,
                    "BSON field '$unionWith.coll' is missing but a required field",
                )
            })?;
            (coll, pipeline)
        }
        other => {
            return Err(Error::failed_to_parse(format!(
                "the $unionWith stage specification must be an object or string, but found {}",
                type_name(other)
            )))
        }
    };
    Ok(Stage::UnionWith {
        db: db.to_string(),
        coll,
        pipeline,
    })
}

/// `$lookup` for one document: the matching documents under `as`.
pub(crate) fn lookup(
    l: &LookupStage,
    mut doc: Document,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Document> {
    let sub_vars = match &l.pipeline {
        Some(_) if !l.let_vars.is_empty() => {
            let mut sub_vars = vars.clone();
            for (n, e) in &l.let_vars {
                let v = e.evaluate(&doc, vars)?.unwrap_or(Bson::Null);
                sub_vars.vars.insert(n.clone(), v);
            }
            std::borrow::Cow::Owned(sub_vars)
        }
        _ => std::borrow::Cow::Borrowed(vars),
    };
    let mut candidates: Vec<Document> = match (&l.from, &l.local_field, &l.foreign_field) {
        (None, _, _) => Vec::new(),
        (Some(c), Some(lf), Some(ff)) => {
            let locals = local_values(&doc, lf);
            match ctx.find_equal(&l.from_db, c, ff, &locals, vars)? {
                // The index narrows; `$lookup`'s own equality decides.
                Some(found) => found
                    .into_iter()
                    .filter(|fd| {
                        let fvals = matcher_values(fd, ff);
                        locals.iter().any(|lv| {
                            fvals
                                .iter()
                                .any(|f| bson_eq_with(f, lv, vars.collator.as_deref()))
                        })
                    })
                    .collect(),
                None => {
                    let (foreign, index) = ctx.foreign_index(&l.from_db, c, ff, vars)?;
                    index
                        .matches(&locals, vars.collator.as_deref())
                        .into_iter()
                        .map(|i| foreign[i].clone())
                        .collect()
                }
            }
        }
        (Some(c), _, _) => match &l.pipeline {
            Some(p) => sub_pipeline_input(p, &l.from_db, c, ctx, &sub_vars)?,
            None => ctx.scan(&l.from_db, c)?.as_ref().clone(),
        },
    };
    if let Some(p) = &l.pipeline {
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

/// The foreign documents a `$lookup`'s `pipeline` reads for one local document: when
/// the pipeline starts with a `$match` that has an `$expr` equality of a field and a
/// `let` variable, those with an equal value at the field, found through an index on
/// it (mongod uses an index there too) or else by hash (the `localField` join's
/// [`ForeignIndex`]); for another leading `$match`, those it keeps (applied to the
/// collection's documents before any is copied); the `$match` then runs again, on
/// these, in the pipeline. The whole collection otherwise. Before, every local document copied the whole foreign
/// collection into its pipeline.
fn sub_pipeline_input(
    p: &Pipeline,
    db: &str,
    coll: &str,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let Some(Stage::Match(m)) = p.stages.first() else {
        return Ok(ctx.scan(db, coll)?.as_ref().clone());
    };
    if let Some((field, value)) = expr_equality(&m.filter, vars) {
        // An index's equality, and the hash join's, are a query's, a superset of the
        // `$expr`'s: the `$match` decides, in the pipeline.
        let values = std::slice::from_ref(&value);
        if let Some(found) = ctx.find_equal(db, coll, &field, values, vars)? {
            return Ok(found);
        }
        let (foreign, index) = ctx.foreign_index(db, coll, &field, vars)?;
        let positions = index.matches(values, vars.collator.as_deref());
        return Ok(positions.into_iter().map(|i| foreign[i].clone()).collect());
    }
    let run_matcher = super::super::run_matcher(m, vars)?;
    let matcher = run_matcher.as_ref().or(m.matcher.as_ref());
    let mut kept = Vec::new();
    for d in ctx.scan(db, coll)?.iter() {
        if super::match_project::keeps(m, matcher, d, vars)? {
            kept.push(d.clone());
        }
    }
    Ok(kept)
}

/// The field and value of an `{$eq: ["$field", "$$variable"]}` (either way round) at
/// the top of `filter`'s `$expr` or among its `$and`'s terms, when the variable's
/// value is one whose documents a query's equality on the field finds among others
/// (not an array, whose `$expr` equality a query does not see through arrays of
/// documents; null, undefined, documents and regular expressions `find_equal` leaves
/// alone).
fn expr_equality(filter: &Document, vars: &Variables) -> Option<(String, Bson)> {
    let expr = filter.get_document("$expr").ok()?;
    let terms: Vec<&Bson> = match (expr.get("$eq"), expr.get_array("$and")) {
        (Some(eq), _) if expr.len() == 1 => vec![eq],
        (_, Ok(and)) if expr.len() == 1 => and
            .iter()
            .filter_map(|t| match t {
                Bson::Document(d) if d.len() == 1 => d.get("$eq"),
                _ => None,
            })
            .collect(),
        _ => return None,
    };
    terms.into_iter().find_map(|eq| {
        let Bson::Array(sides) = eq else { return None };
        let [Bson::String(a), Bson::String(b)] = sides.as_slice() else {
            return None;
        };
        let field_and_var = |f: &str, v: &str| {
            let field = f.strip_prefix('$').filter(|f| !f.starts_with('$'))?;
            let value = vars.vars.get(v.strip_prefix("$$")?)?;
            (!matches!(value, Bson::Array(_))).then(|| (field.to_string(), value.clone()))
        };
        field_and_var(a, b).or_else(|| field_and_var(b, a))
    })
}

/// A `$lookup`'s foreign documents by the values at its `foreignField` (as a query's
/// equality sees them: `matcher_values`), built once per run: each local document
/// finds its matches by hash instead of comparing every foreign document (mongod's
/// hash join); `$graphLookup` finds each level's by its `connectToField` the same way.
/// Before, every local document (every level) walked the whole foreign collection and
/// copied each of its documents to read the field.
pub(crate) struct ForeignIndex {
    /// (position, value) of each foreign value, by `value_set::bucket_hash`.
    by_value: HashMap<u64, Vec<(usize, Bson)>>,
    /// Positions of the documents without a value at the field.
    missing: Vec<usize>,
    /// Positions of the documents with an undefined value at the field.
    undefined: Vec<usize>,
}

impl ForeignIndex {
    pub(crate) fn new(
        foreign: &[Document],
        field: &str,
        collator: Option<&crate::collation::Collator>,
    ) -> ForeignIndex {
        let mut by_value: HashMap<u64, Vec<(usize, Bson)>> = HashMap::new();
        let (mut missing, mut undefined) = (Vec::new(), Vec::new());
        for (i, d) in foreign.iter().enumerate() {
            let values = matcher_values(d, field);
            if values.is_empty() {
                missing.push(i);
            }
            if values.iter().any(|v| matches!(v, Bson::Undefined)) {
                undefined.push(i);
            }
            for v in values {
                let h = crate::value_set::bucket_hash(&v, collator);
                by_value.entry(h).or_default().push((i, v));
            }
        }
        ForeignIndex {
            by_value,
            missing,
            undefined,
        }
    }

    /// The positions, in the collection's order, of the foreign documents a local
    /// document with these values at `localField` matches: an equal value, or for a
    /// local null the field missing, null or undefined.
    pub(crate) fn matches(
        &self,
        locals: &[Bson],
        collator: Option<&crate::collation::Collator>,
    ) -> Vec<usize> {
        self.positions(locals, collator, &[&self.missing, &self.undefined])
    }

    /// The positions, in the collection's order, of the documents a `$graphLookup`
    /// level with these values reaches: an equal value, or for a null the field
    /// missing.
    pub(crate) fn reached(
        &self,
        frontier: &[Bson],
        collator: Option<&crate::collation::Collator>,
    ) -> Vec<usize> {
        self.positions(frontier, collator, &[&self.missing])
    }

    /// The positions, in order and once each, of the documents with a value equal to
    /// one of `values`, and of those in `for_null` when a value is null.
    fn positions(
        &self,
        values: &[Bson],
        collator: Option<&crate::collation::Collator>,
        for_null: &[&[usize]],
    ) -> Vec<usize> {
        let mut hits = Vec::new();
        for v in values {
            if matches!(v, Bson::Null) {
                for_null.iter().for_each(|p| hits.extend_from_slice(p));
            }
            let h = crate::value_set::bucket_hash(v, collator);
            for (i, fv) in self.by_value.get(&h).into_iter().flatten() {
                if bson_eq_with(fv, v, collator) {
                    hits.push(*i);
                }
            }
        }
        hits.sort_unstable();
        hits.dedup();
        hits
    }
}

/// `$unionWith`: the documents, then those of the other collection (through its
/// pipeline, if any).
pub(crate) fn union_with(
    db: &str,
    coll: &str,
    pipeline: Option<&Pipeline>,
    docs: Vec<Document>,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Vec<Document>> {
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
    Ok(docs)
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

/// `$graphLookup` for one document: every document reached, under `as`.
pub(crate) fn graph_lookup(
    g: &GraphLookupStage,
    mut doc: Document,
    ctx: &RunCtx,
    vars: &Variables,
) -> Result<Document> {
    let (foreign, index) = ctx.foreign_index(&g.from_db, &g.from, &g.connect_to, vars)?;
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
        for i in index.reached(&frontier, coll) {
            let fd = &foreign[i];
            if let Some(r) = &g.restrict {
                if !r.matches(fd) {
                    continue;
                }
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

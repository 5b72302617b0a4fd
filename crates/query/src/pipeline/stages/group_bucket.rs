//! `$group`, `$bucket`, `$sortByCount` and `$count`: the stages that fold documents
//! into groups.

use super::super::group::{self, AccSpec};
use super::type_name;
use super::Stage;
use crate::compare::{cmp_bson, cmp_bson_with};
use crate::error::{Error, Result};
use crate::expr::{util, Expr, Variables};
use bson::{doc, Bson, Document};

pub(crate) struct BucketStage {
    group_by: Expr,
    boundaries: Vec<Bson>,
    default: Option<Bson>,
    output: Vec<AccSpec>,
}

/// `$group`: an `_id` expression and named accumulators.
pub(crate) fn parse_group(arg: &Bson) -> Result<Stage> {
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
    let id =
        id.ok_or_else(|| Error::location(15955, "a group specification must include an _id"))?;
    Ok(Stage::Group { id, accs })
}

/// `$count`: the name of the field that holds the count.
pub(crate) fn parse_count(arg: &Bson) -> Result<Stage> {
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
    Ok(Stage::Count(f.clone()))
}

/// `$sortByCount`: a `$`-path or an expression to group by.
pub(crate) fn parse_sort_by_count(arg: &Bson) -> Result<Stage> {
    let ok = match arg {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(d) => d.len() == 1 && d.keys().next().is_some_and(|k| k.starts_with('$')),
        _ => false,
    };
    if !ok {
        return Err(Error::location(
            40148,
            "the sortByCount field must be defined as a $-prefixed path or an expression",
        ));
    }
    Ok(Stage::SortByCount {
        id: Expr::parse(arg)?,
        accs: vec![AccSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?],
    })
}

/// `$bucket`: `groupBy`, ascending `boundaries` of one type, `default` and `output`.
pub(crate) fn parse_bucket(arg: &Bson) -> Result<Stage> {
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
                    return Err(Error::location(
                        40200,
                        format!(
                            "The $bucket 'boundaries' field must be an array, but found type: {}.",
                            type_name(v)
                        ),
                    ));
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

/// `$count`: one document holding the number of documents, or none for no input.
pub(crate) fn count(field: &str, docs: Vec<Document>) -> Vec<Document> {
    count_of(field, docs.len())
}

/// `$count` of `n` documents.
pub(crate) fn count_of(field: &str, n: usize) -> Vec<Document> {
    if n == 0 {
        Vec::new()
    } else {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let v = i32::try_from(n).map(Bson::Int32).unwrap_or(Bson::Int64(n));
        let mut d = Document::new();
        d.insert(field.to_string(), v);
        vec![d]
    }
}

/// `$sortByCount`: a `$group` counting each value, most frequent first.
pub(crate) fn sort_by_count(
    id: &Expr,
    accs: &[AccSpec],
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let groups = group::run_group(id, accs, docs, vars)?;
    Ok(by_count(groups))
}

/// `$sortByCount`'s groups by descending count; ties keep first-seen order.
pub(crate) fn by_count(mut groups: Vec<Document>) -> Vec<Document> {
    groups.sort_by(|a, b| cmp_bson(b.get("count").unwrap(), a.get("count").unwrap()));
    groups
}

/// The `_id` of bucket `i` (the last index is the default bucket).
fn bucket_id(b: &BucketStage, i: usize) -> Bson {
    if i == b.boundaries.len() - 1 {
        b.default.clone().unwrap_or(Bson::Null)
    } else {
        b.boundaries[i].clone()
    }
}

/// `$bucket` over all the documents: one document per non-empty bucket, in order.
pub(crate) fn bucket(
    b: &BucketStage,
    docs: Vec<Document>,
    vars: &Variables,
) -> Result<Vec<Document>> {
    let mut fold = BucketFold::new(b, vars);
    for d in &docs {
        fold.add(d)?;
    }
    fold.finish()
}

/// `$bucket` taking its input one document at a time: it holds a state per bucket,
/// not the documents.
pub(crate) struct BucketFold<'a> {
    b: &'a BucketStage,
    vars: &'a Variables,
    /// Buckets 0..n-1 are boundary ranges; index n-1 is the default bucket.
    states: Vec<Option<Vec<group::AccState>>>,
}

impl<'a> BucketFold<'a> {
    pub(crate) fn new(b: &'a BucketStage, vars: &'a Variables) -> BucketFold<'a> {
        BucketFold {
            b,
            vars,
            states: (0..b.boundaries.len()).map(|_| None).collect(),
        }
    }

    pub(crate) fn add(&mut self, d: &Document) -> Result<()> {
        let (b, vars) = (self.b, self.vars);
        let coll = vars.collator.as_deref();
        let n = b.boundaries.len();
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
        if self.states[idx].is_none() {
            let key = bucket_id(b, idx);
            self.states[idx] = Some(
                b.output
                    .iter()
                    .map(|a| group::AccState::start(a, &key, d, vars))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        let st = self.states[idx]
            .as_mut()
            .expect("the bucket's states, made above");
        for (a, s) in b.output.iter().zip(st.iter_mut()) {
            s.add(a.op, a.arg.evaluate(d, vars)?, coll)?;
        }
        Ok(())
    }

    /// One document per non-empty bucket, in order.
    pub(crate) fn finish(self) -> Result<Vec<Document>> {
        let (b, coll) = (self.b, self.vars.collator.as_deref());
        let mut out: Vec<Document> = Vec::new();
        for (i, st) in self.states.into_iter().enumerate() {
            let Some(st) = st else { continue };
            let id = bucket_id(b, i);
            let mut d = doc! {"_id": id};
            for (a, s) in b.output.iter().zip(st) {
                d.insert(a.name.clone(), s.finish(a.op)?);
            }
            out.push(d);
        }
        out.sort_by(|a, b| cmp_bson_with(a.get("_id").unwrap(), b.get("_id").unwrap(), coll));
        Ok(out)
    }
}

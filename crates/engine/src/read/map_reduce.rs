//! The `mapReduce` command's execution, as mongod 7.0 runs it since it became an
//! aggregation (`map_reduce_agg.cpp`): the input is the collection through `$match`
//! (`query`), `$sort` and `$limit`; `map` runs on each document and its `emit`s are
//! grouped by key; `reduce` folds each key's values (called even for a single value,
//! and again on its own results when the values exceed the document size limit);
//! `finalize` maps each key's result. The results go back inline or to a collection
//! through the same `$out` / `$merge` writes an aggregation makes, so the output is
//! written (and logged in the oplog, seen by change streams) as any write is.

use crate::catalog::namespace::Namespace;
use crate::core::MAX_DOCUMENT_SIZE;
use crate::read::cursor::value_len;
use crate::read::find::{operation_collator, PipelineInput};
use crate::Engine;
use bson::{doc, Bson, Document};
use tailstream_query::collation::Collator;
use tailstream_query::compare::cmp_bson_with;
use tailstream_query::error::{Error, Result};
use tailstream_query::script;

/// Where the results go (mongod's `out` option).
#[derive(Debug, Clone, PartialEq)]
pub enum MapReduceOut {
    /// `{inline: 1}`: in the reply.
    Inline,
    /// A collection name or `{replace: ...}`: the collection is replaced.
    Replace(Namespace),
    /// `{merge: ...}`: a result replaces the document with its key, others stay.
    Merge(Namespace),
    /// `{reduce: ...}`: a result whose key is already there is reduced with it.
    Reduce(Namespace),
}

/// A parsed `mapReduce` command.
#[derive(Debug, Clone)]
pub struct MapReduceRequest {
    pub ns: Namespace,
    pub map: String,
    pub reduce: String,
    pub finalize: Option<String>,
    /// Global variables: `scope`, and the scopes of code-with-scope functions.
    pub scope: Document,
    pub query: Option<Document>,
    pub sort: Option<Document>,
    pub limit: Option<i64>,
    pub collation: Option<Document>,
    pub out: MapReduceOut,
}

/// One key's emitted values, in emission order.
struct Group {
    key: Bson,
    values: Vec<Bson>,
}

impl Engine {
    /// Runs `req`; returns the results (`{_id: key, value}`) when they go inline, or
    /// nothing once they are written to the output collection.
    pub fn map_reduce(&self, req: &MapReduceRequest) -> Result<Vec<Document>> {
        if self.view(&req.ns).is_some() {
            return Err(Error::new(
                crate::catalog::views::COMMAND_NOT_SUPPORTED_ON_VIEW,
                "mapReduce on a view is not supported",
            ));
        }
        let collator =
            operation_collator(self.collection(&req.ns).as_deref(), req.collation.as_ref())?;
        let input = self.map_reduce_input(req, collator.clone())?;
        let results = run_map_reduce(req, &input, collator.as_ref()).map_err(|e| {
            Error::new(
                e.code,
                format!("MapReduce internal error :: caused by :: {}", e.message),
            )
        })?;
        let stage = match &req.out {
            MapReduceOut::Inline => return Ok(results),
            MapReduceOut::Replace(target) => {
                doc! {"$out": {"db": &target.db, "coll": &target.coll}}
            }
            MapReduceOut::Merge(target) => merge_stage(target, Bson::String("replace".into())),
            MapReduceOut::Reduce(target) => merge_stage(target, reduce_pipeline(req)),
        };
        self.write_output_stage(&req.ns.db, &req.ns.full(), &stage, results)?;
        Ok(Vec::new())
    }

    /// The documents `map` runs on: the collection through `query`, `sort`, `limit`.
    fn map_reduce_input(
        &self,
        req: &MapReduceRequest,
        collator: Option<std::sync::Arc<Collator>>,
    ) -> Result<Vec<Document>> {
        let mut stages = Vec::new();
        if let Some(q) = &req.query {
            stages.push(doc! {"$match": q.clone()});
        }
        if let Some(s) = &req.sort {
            stages.push(doc! {"$sort": s.clone()});
        }
        if let Some(l) = req.limit {
            stages.push(doc! {"$limit": l});
        }
        let vars = tailstream_query::expr::Variables {
            now: Some(bson::DateTime::now()),
            collator,
            ..Default::default()
        };
        let (docs, _) = self.run_stages(
            &req.ns.db,
            Some(&req.ns.coll),
            &stages,
            &vars,
            PipelineInput::default(),
            0,
        )?;
        Ok(docs)
    }
}

/// Maps, groups, reduces and finalizes `input`: the results, by key.
fn run_map_reduce(
    req: &MapReduceRequest,
    input: &[Document],
    collator: Option<&std::sync::Arc<Collator>>,
) -> Result<Vec<Document>> {
    if !req.scope.is_empty() {
        script::set_globals(&req.scope)?;
    }
    let mut groups: Vec<Group> = Vec::new();
    for doc in input {
        for (key, value) in script::map_emits(&req.map, doc)? {
            let at = groups
                .binary_search_by(|g| cmp_bson_with(&g.key, &key, collator.map(|c| c.as_ref())));
            match at {
                Ok(i) => groups[i].values.push(value),
                Err(i) => groups.insert(
                    i,
                    Group {
                        key,
                        values: vec![value],
                    },
                ),
            }
        }
    }
    let mut results = Vec::with_capacity(groups.len());
    for group in groups {
        let mut value = reduce_group(&req.reduce, &group.key, group.values)?;
        if let Some(finalize) = &req.finalize {
            value = script::call_function(finalize, &[group.key.clone(), value])?;
        }
        results.push(doc! {"_id": group.key, "value": value});
    }
    Ok(results)
}

/// Reduces one key's values as mongod's `$_internalJsReduce` does: `reduce(key,
/// values)` with the values last-emitted first, in calls whose values fit in a
/// document; each call's result joins the values left, until one call took them all.
fn reduce_group(reduce: &str, key: &Bson, mut values: Vec<Bson>) -> Result<Bson> {
    let key_len = value_len(key);
    loop {
        let mut batch = Vec::new();
        let mut batch_len = 0;
        while let Some(v) = values.last() {
            let len = value_len(v);
            if key_len + batch_len + len > MAX_DOCUMENT_SIZE {
                if batch.len() < 2 {
                    return Err(Error::new(31392, "Value too large to reduce"));
                }
                break;
            }
            batch_len += len;
            batch.push(values.pop().expect("checked"));
        }
        let reduced = script::call_function(reduce, &[key.clone(), Bson::Array(batch)])?;
        if values.is_empty() {
            return Ok(reduced);
        }
        values.push(reduced);
    }
}

/// `$merge` into `target` by `_id`, inserting new keys.
fn merge_stage(target: &Namespace, when_matched: Bson) -> Document {
    doc! {"$merge": {
        "into": {"db": &target.db, "coll": &target.coll},
        "on": "_id",
        "whenMatched": when_matched,
        "whenNotMatched": "insert",
    }}
}

/// The `whenMatched` pipeline of `out: {reduce: ...}`, as mongod builds it: the
/// stored value and the new one reduced together, then finalized again.
fn reduce_pipeline(req: &MapReduceRequest) -> Bson {
    let function = |body: &str, args: Bson| {
        doc! {"$project": {"value": {"$function": {"args": args, "body": body, "lang": "js"}}}}
    };
    let mut stages = vec![function(
        &req.reduce,
        Bson::Array(vec![
            "$_id".into(),
            Bson::Array(vec!["$value".into(), "$$new.value".into()]),
        ]),
    )];
    if let Some(finalize) = &req.finalize {
        stages.push(function(
            finalize,
            Bson::Array(vec!["$_id".into(), "$value".into()]),
        ));
    }
    Bson::Array(stages.into_iter().map(Bson::Document).collect())
}

//! The `$merge` output stage: writes an aggregation's results into a collection,
//! matching each result to a target document by the `on` fields (`_id` by default)
//! and doing what `whenMatched` / `whenNotMatched` say, as mongod does.

use crate::catalog::namespace::Namespace;
use crate::write::{UpdateOp, WriteOutcome};
use crate::Engine;
use bson::{doc, Bson, Document};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::expr::{evaluate, Variables};
use tailstream_query::path::get_path;

/// What to do with a result that matches a target document.
#[derive(Debug, Clone, PartialEq)]
enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    /// An update pipeline; `$$new` (or the `let` variables) hold the result.
    Pipeline(Vec<Bson>),
}

/// What to do with a result that matches no target document.
#[derive(Debug, Clone, Copy, PartialEq)]
enum WhenNotMatched {
    Insert,
    Discard,
    Fail,
}

#[derive(Debug, Clone)]
pub struct MergeSpec {
    pub into: Namespace,
    on: Vec<String>,
    when_matched: WhenMatched,
    when_not_matched: WhenNotMatched,
    /// Variables for a pipeline `whenMatched`, evaluated against each result.
    let_vars: Option<Document>,
}

fn enum_error(field: &str, value: &str) -> Error {
    Error::bad_value(format!(
        "Enumeration value '{value}' for field '$merge.{field}' is not a valid value."
    ))
}

impl MergeSpec {
    /// Parses `{$merge: "coll"}` or `{$merge: {into, on, let, whenMatched, whenNotMatched}}`.
    pub fn parse(db: &str, spec: &Bson) -> Result<MergeSpec> {
        let target = |v: &Bson| -> Result<Namespace> {
            match v {
                Bson::String(c) => Ok(Namespace::new(db, c)),
                Bson::Document(d) => Ok(Namespace::new(
                    d.get_str("db").unwrap_or(db),
                    d.get_str("coll").map_err(|_| {
                        Error::new(
                            codes::FAILED_TO_PARSE,
                            "BSON field '$merge.into.coll' is missing but a required field",
                        )
                    })?,
                )),
                _ => Err(Error::type_mismatch(
                    "$merge 'into' field must be either a string or an object",
                )),
            }
        };
        let d = match spec {
            Bson::Document(d) => d,
            other => {
                return Ok(MergeSpec {
                    into: target(other)?,
                    on: vec!["_id".into()],
                    when_matched: WhenMatched::Merge,
                    when_not_matched: WhenNotMatched::Insert,
                    let_vars: None,
                })
            }
        };
        for k in d.keys() {
            if !matches!(
                k.as_str(),
                "into"
                    | "on"
                    | "let"
                    | "whenMatched"
                    | "whenNotMatched"
                    | "targetCollectionVersion"
            ) {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field '$merge.{k}' is an unknown field."),
                ));
            }
        }
        let into = target(
            d.get("into")
                .ok_or_else(|| Error::missing_field("$merge.into"))?,
        )?;
        let on = match d.get("on") {
            None => vec!["_id".to_string()],
            Some(Bson::String(f)) => vec![f.clone()],
            Some(Bson::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|f| match f {
                    Bson::String(s) => Ok(s.clone()),
                    _ => Err(Error::new(51134, "Fields in $merge 'on' must be strings")),
                })
                .collect::<Result<_>>()?,
            Some(_) => {
                return Err(Error::new(
                    51186,
                    "$merge 'on' field must be either a string or an array of strings",
                ))
            }
        };
        let when_matched = match d.get("whenMatched") {
            None => WhenMatched::Merge,
            Some(Bson::String(s)) => match s.as_str() {
                "replace" => WhenMatched::Replace,
                "keepExisting" => WhenMatched::KeepExisting,
                "merge" => WhenMatched::Merge,
                "fail" => WhenMatched::Fail,
                other => return Err(enum_error("whenMatched", other)),
            },
            Some(Bson::Array(stages)) => {
                crate::query::update::validate_update_pipeline(stages)?;
                WhenMatched::Pipeline(stages.clone())
            }
            Some(_) => {
                return Err(Error::type_mismatch(
                    "$merge 'whenMatched' must be a string or an array",
                ))
            }
        };
        let when_not_matched = match d.get("whenNotMatched") {
            None => WhenNotMatched::Insert,
            Some(Bson::String(s)) => match s.as_str() {
                "insert" => WhenNotMatched::Insert,
                "discard" => WhenNotMatched::Discard,
                "fail" => WhenNotMatched::Fail,
                other => return Err(enum_error("whenNotMatched", other)),
            },
            Some(_) => {
                return Err(Error::type_mismatch(
                    "$merge 'whenNotMatched' must be a string",
                ))
            }
        };
        let let_vars = match d.get("let") {
            None => None,
            Some(Bson::Document(l)) => {
                if !matches!(when_matched, WhenMatched::Pipeline(_)) {
                    return Err(Error::new(
                        51199,
                        "Cannot use 'let' variables with 'whenMatched: fail' mode; 'let' is only valid with a pipeline 'whenMatched'",
                    ));
                }
                Some(l.clone())
            }
            Some(_) => return Err(Error::type_mismatch("$merge 'let' must be an object")),
        };
        Ok(MergeSpec {
            into,
            on,
            when_matched,
            when_not_matched,
            let_vars,
        })
    }

    /// The target query that finds a result's match: its `on` fields' values.
    fn match_query(&self, d: &Document) -> Result<Document> {
        let mut q = Document::new();
        for f in &self.on {
            match get_path(d, f) {
                None | Some(Bson::Null) | Some(Bson::Undefined) | Some(Bson::Array(_)) => {
                    return Err(Error::new(
                        51132,
                        format!("$merge write error: 'on' field '{f}' cannot be missing, null, undefined or an array"),
                    ))
                }
                Some(v) => {
                    q.insert(f.clone(), v.clone());
                }
            }
        }
        Ok(q)
    }

    /// The `let` variables of a pipeline `whenMatched` for one result (`new` is the
    /// result by default), as literal constants for the update.
    fn pipeline_vars(&self, d: &Document) -> Result<Document> {
        let default = doc! {"new": "$$ROOT"};
        let spec = self.let_vars.as_ref().unwrap_or(&default);
        let vars = Variables {
            now: Some(bson::DateTime::now()),
            ..Default::default()
        };
        let mut out = Document::new();
        for (name, e) in spec {
            out.insert(name.clone(), doc! {"$literal": evaluate(e, d, &vars)?});
        }
        Ok(out)
    }
}

impl Engine {
    /// Writes `docs` into the `$merge` target, one result at a time in order (mongod
    /// stops at the first error; what was written before it stays).
    pub(crate) fn write_merge(
        &self,
        spec: &MergeSpec,
        docs: Vec<Document>,
    ) -> Result<WriteOutcome> {
        if spec.on != ["_id"] {
            let unique = self.collection(&spec.into).is_some_and(|m| {
                m.indexes.iter().any(|i| {
                    i.unique
                        && i.partial_filter.is_none()
                        && i.pattern.fields.len() == spec.on.len()
                        && i.pattern.fields.iter().all(|(f, _)| spec.on.contains(f))
                })
            });
            if !unique {
                return Err(Error::new(
                    51183,
                    "Cannot find index to verify that join fields will be unique",
                ));
            }
        }
        let mut total = WriteOutcome::default();
        for d in docs {
            // As mongod: a result without `_id`, merged on `_id`, gets a new ObjectId.
            let d = if spec.on == ["_id"] && !d.contains_key("_id") {
                let mut with_id = doc! {"_id": bson::oid::ObjectId::new()};
                with_id.extend(d);
                with_id
            } else {
                d
            };
            let q = spec.match_query(&d)?;
            let out = match (&spec.when_matched, spec.when_not_matched) {
                // Insert-only: a match is a duplicate key, reported as mongod does.
                (WhenMatched::Fail, WhenNotMatched::Insert) if spec.on == ["_id"] => {
                    self.insert_documents(&spec.into, vec![d], true)?
                }
                (when_matched, when_not_matched) => {
                    let exists = self.count(&spec.into, &q, 0, 1, None, None)? > 0;
                    match (exists, when_matched, when_not_matched) {
                        (true, WhenMatched::Fail, _) => {
                            return Err(crate::write::duplicate_key_error(
                                &spec.into,
                                &spec.on.join("_1_"),
                                &spec.on.iter().map(|f| (f.clone(), Bson::Int32(1))).collect(),
                                &q,
                            ))
                        }
                        (false, _, WhenNotMatched::Fail) => {
                            return Err(Error::new(
                                13113,
                                "$merge could not find a matching document in the target collection for at least one document in the source collection",
                            ))
                        }
                        (false, _, WhenNotMatched::Discard) => continue,
                        (false, _, WhenNotMatched::Insert) => {
                            self.insert_documents(&spec.into, vec![d], true)?
                        }
                        (true, WhenMatched::KeepExisting, _) => continue,
                        (true, m, _) => {
                            let (u, let_vars) = match m {
                                WhenMatched::Replace => (Bson::Document(d), None),
                                WhenMatched::Merge => (Bson::Document(doc! {"$set": d}), None),
                                WhenMatched::Pipeline(p) => {
                                    (Bson::Array(p.clone()), Some(spec.pipeline_vars(&d)?))
                                }
                                WhenMatched::KeepExisting | WhenMatched::Fail => {
                                    unreachable!("handled above")
                                }
                            };
                            let op = UpdateOp {
                                q,
                                u,
                                let_vars,
                                ..Default::default()
                            };
                            self.update(&spec.into, vec![op], true)?
                        }
                    }
                }
            };
            if let Some(e) = out.errors.first() {
                return Err(e.error.clone());
            }
            total.n += out.n;
            total.n_modified += out.n_modified;
            total.committed = out.committed.or(total.committed);
        }
        Ok(total)
    }
}

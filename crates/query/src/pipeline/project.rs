//! `$project`, `$addFields`/`$set` and `$unset`: a tree of field nodes applied to documents.

use crate::error::{Error, Result};
use crate::expr::{Expr, Variables};
use bson::{Bson, Document};

#[derive(Debug, Clone)]
pub enum Node {
    Include,
    Exclude,
    Computed(Expr),
    Sub(Vec<(String, Node)>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Inclusion,
    Exclusion,
    /// `$addFields`: every leaf is computed and merged into the document.
    AddFields,
}

#[derive(Debug, Clone)]
pub struct Tree {
    pub mode: Mode,
    pub fields: Vec<(String, Node)>,
}

fn find<'a>(fields: &'a [(String, Node)], k: &str) -> Option<&'a Node> {
    fields.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

fn check_field_name(stage: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::location(
            40352,
            format!(
                "Invalid {stage} :: caused by :: FieldPath cannot be constructed with empty string"
            ),
        ));
    }
    if name.starts_with('$') {
        return Err(Error::location(
            16410,
            format!("Invalid {stage} :: caused by :: FieldPath field names may not start with '$'. Consider using $getField or $setField."),
        ));
    }
    Ok(())
}

fn insert_path(
    stage: &str,
    fields: &mut Vec<(String, Node)>,
    parts: &[&str],
    node: Node,
    full: &str,
) -> Result<()> {
    let (first, rest) = parts.split_first().unwrap();
    check_field_name(stage, first)?;
    let pos = fields.iter().position(|(n, _)| n == first);
    if rest.is_empty() {
        if pos.is_some() {
            return Err(Error::location(
                31250,
                format!("Invalid {stage} :: caused by :: Path collision at {full}"),
            ));
        }
        fields.push((first.to_string(), node));
        return Ok(());
    }
    match pos {
        None => {
            let mut sub = Vec::new();
            insert_path(stage, &mut sub, rest, node, full)?;
            fields.push((first.to_string(), Node::Sub(sub)));
            Ok(())
        }
        Some(i) => match &mut fields[i].1 {
            Node::Sub(sub) => insert_path(stage, sub, rest, node, full),
            _ => Err(Error::location(
                31249,
                format!(
                    "Invalid {stage} :: caused by :: Path collision at {full} remaining portion {}",
                    rest.join(".")
                ),
            )),
        },
    }
}

fn is_operator_doc(v: &Bson) -> bool {
    matches!(v, Bson::Document(d) if d.keys().next().is_some_and(|k| k.starts_with('$')))
}

fn is_flag(v: &Bson) -> bool {
    matches!(
        v,
        Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}

impl Tree {
    /// Parses a `$project` specification.
    pub fn parse_project(spec: &Document) -> Result<Tree> {
        let stage = "$project";
        if spec.is_empty() {
            return Err(Error::location(51272, "Invalid $project :: caused by :: projection specification must have at least one field"));
        }
        let mut fields = Vec::new();
        let mut mode: Option<Mode> = None;
        let mut id_excluded = false;
        let mut id_mentioned = false;
        Self::parse_project_level(
            spec,
            "",
            &mut fields,
            &mut mode,
            &mut id_excluded,
            &mut id_mentioned,
        )?;
        let mode = match mode {
            Some(m) => m,
            // Only `_id` was given: `{_id: 0}` is an exclusion, `{_id: 1}` an inclusion.
            None => {
                if id_excluded {
                    Mode::Exclusion
                } else {
                    Mode::Inclusion
                }
            }
        };
        let _ = stage;
        if mode == Mode::Inclusion && !id_mentioned {
            fields.insert(0, ("_id".to_string(), Node::Include));
        }
        Ok(Tree { mode, fields })
    }

    fn parse_project_level(
        spec: &Document,
        prefix: &str,
        fields: &mut Vec<(String, Node)>,
        mode: &mut Option<Mode>,
        id_excluded: &mut bool,
        id_mentioned: &mut bool,
    ) -> Result<()> {
        for (k, v) in spec {
            let full = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            let parts: Vec<&str> = k.split('.').collect();
            let is_id = full == "_id";
            if is_id {
                *id_mentioned = true;
            }
            if is_flag(v) {
                let include = crate::expr::truthy(&Some(v.clone()));
                if is_id {
                    *id_excluded = !include;
                } else if include {
                    if *mode == Some(Mode::Exclusion) {
                        return Err(Error::location(31253, format!("Invalid $project :: caused by :: Cannot do inclusion on field {full} in exclusion projection")));
                    }
                    *mode = Some(Mode::Inclusion);
                } else {
                    if *mode == Some(Mode::Inclusion) {
                        return Err(Error::location(31254, format!("Invalid $project :: caused by :: Cannot do exclusion on field {full} in inclusion projection")));
                    }
                    *mode = Some(Mode::Exclusion);
                }
                let node = if include {
                    Node::Include
                } else {
                    Node::Exclude
                };
                insert_path("$project", fields, &parts, node, &full)?;
            } else if let Bson::Document(d) = v {
                if is_operator_doc(v) {
                    if d.len() == 1 && d.contains_key("$meta") {
                        // $meta projections ("textScore", "searchScore") have no data here.
                        if *mode == Some(Mode::Exclusion) {
                            continue;
                        }
                    }
                    if *mode == Some(Mode::Exclusion) {
                        return Err(Error::location(31252, "Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection".to_string()));
                    }
                    *mode = Some(Mode::Inclusion);
                    let e = Expr::parse(v).map_err(|e| prefix_err(e, "$project"))?;
                    insert_path("$project", fields, &parts, Node::Computed(e), &full)?;
                } else if d.is_empty() {
                    return Err(Error::location(51270, format!("Invalid $project :: caused by :: An empty sub-projection is not a valid value. Found empty object at path {full}")));
                } else {
                    // Nested specification: make sure the node exists, then recurse into it.
                    let mut sub = Vec::new();
                    Self::parse_project_level(d, &full, &mut sub, mode, id_excluded, id_mentioned)?;
                    insert_path("$project", fields, &parts, Node::Sub(sub), &full)?;
                }
            } else {
                if *mode == Some(Mode::Exclusion) {
                    return Err(Error::location(31252, "Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection".to_string()));
                }
                *mode = Some(Mode::Inclusion);
                let e = Expr::parse(v).map_err(|e| prefix_err(e, "$project"))?;
                insert_path("$project", fields, &parts, Node::Computed(e), &full)?;
            }
        }
        Ok(())
    }

    /// Parses an `$addFields`/`$set` specification.
    pub fn parse_add_fields(stage: &str, spec: &Document) -> Result<Tree> {
        let mut fields = Vec::new();
        Self::parse_add_level(stage, spec, "", &mut fields)?;
        Ok(Tree {
            mode: Mode::AddFields,
            fields,
        })
    }

    fn parse_add_level(
        stage: &str,
        spec: &Document,
        prefix: &str,
        fields: &mut Vec<(String, Node)>,
    ) -> Result<()> {
        for (k, v) in spec {
            let full = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            let parts: Vec<&str> = k.split('.').collect();
            match v {
                Bson::Document(d) if !d.is_empty() && !is_operator_doc(v) => {
                    let mut sub = Vec::new();
                    Self::parse_add_level(stage, d, &full, &mut sub)?;
                    insert_path(stage, fields, &parts, Node::Sub(sub), &full)?;
                }
                _ => {
                    let e = Expr::parse(v).map_err(|e| prefix_err(e, stage))?;
                    insert_path(stage, fields, &parts, Node::Computed(e), &full)?;
                }
            }
        }
        Ok(())
    }

    /// Parses a `$unset` specification (a string or an array of strings).
    pub fn parse_unset(spec: &Bson) -> Result<Tree> {
        let paths: Vec<&str> = match spec {
            Bson::String(s) => vec![s.as_str()],
            Bson::Array(a) => {
                if a.is_empty() {
                    return Err(Error::location(
                        31119,
                        "$unset specification must be a string or an array with at least one field",
                    ));
                }
                let mut out = Vec::new();
                for v in a {
                    match v {
                        Bson::String(s) => out.push(s.as_str()),
                        _ => return Err(Error::location(31120, "$unset specification must be a string or an array containing only string values")),
                    }
                }
                out
            }
            _ => {
                return Err(Error::location(
                    31002,
                    "$unset specification must be a string or an array",
                ))
            }
        };
        let mut fields = Vec::new();
        for p in paths {
            let parts: Vec<&str> = p.split('.').collect();
            insert_path("$unset", &mut fields, &parts, Node::Exclude, p)?;
        }
        Ok(Tree {
            mode: Mode::Exclusion,
            fields,
        })
    }

    pub fn apply(&self, doc: &Document, vars: &Variables) -> Result<Document> {
        match self.mode {
            Mode::Exclusion => Ok(exclude(&self.fields, doc)),
            Mode::Inclusion => {
                let mut out = include(&self.fields, doc);
                computed(&self.fields, &mut out, doc, vars)?;
                // Metadata (the text score) survives projections, as in mongod.
                if let Some(score) = doc.get(crate::text::TEXT_SCORE_FIELD) {
                    out.insert(crate::text::TEXT_SCORE_FIELD, score.clone());
                }
                Ok(out)
            }
            Mode::AddFields => {
                let mut out = doc.clone();
                computed(&self.fields, &mut out, doc, vars)?;
                Ok(out)
            }
        }
    }
}

fn prefix_err(mut e: Error, stage: &str) -> Error {
    if !e.message.starts_with("Invalid ")
        && e.code != crate::error::codes::INVALID_PIPELINE_OPERATOR
    {
        e.message = format!("Invalid {stage} :: caused by :: {}", e.message);
    }
    e
}

fn has_includes(fields: &[(String, Node)]) -> bool {
    fields.iter().any(|(_, n)| match n {
        Node::Include => true,
        Node::Sub(s) => has_includes(s),
        _ => false,
    })
}

fn has_computed(fields: &[(String, Node)]) -> bool {
    fields.iter().any(|(_, n)| match n {
        Node::Computed(_) => true,
        Node::Sub(s) => has_computed(s),
        _ => false,
    })
}

/// Pass 1 of an inclusion projection: copies included fields in input order.
fn include(fields: &[(String, Node)], doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match find(fields, k) {
            Some(Node::Include) => {
                out.insert(k.clone(), v.clone());
            }
            Some(Node::Sub(sub)) if has_includes(sub) => match v {
                Bson::Document(d) => {
                    out.insert(k.clone(), Bson::Document(include(sub, d)));
                }
                Bson::Array(a) => {
                    out.insert(k.clone(), Bson::Array(include_array(sub, a)));
                }
                _ => {}
            },
            _ => {}
        }
    }
    out
}

fn include_array(sub: &[(String, Node)], a: &[Bson]) -> Vec<Bson> {
    a.iter()
        .filter_map(|item| match item {
            Bson::Document(d) => Some(Bson::Document(include(sub, d))),
            Bson::Array(inner) => Some(Bson::Array(include_array(sub, inner))),
            _ => None,
        })
        .collect()
}

/// Pass 2: computed fields (and nested computed fields), in specification order.
fn computed(
    fields: &[(String, Node)],
    out: &mut Document,
    root: &Document,
    vars: &Variables,
) -> Result<()> {
    for (k, node) in fields {
        match node {
            Node::Computed(e) => match e.evaluate(root, vars)? {
                Some(v) => {
                    out.insert(k.clone(), v);
                }
                None => {
                    out.remove(k);
                }
            },
            Node::Sub(sub) if has_computed(sub) => {
                let cur = out.get(k).cloned();
                let new = match cur {
                    Some(Bson::Document(mut d)) => {
                        computed(sub, &mut d, root, vars)?;
                        Bson::Document(d)
                    }
                    Some(Bson::Array(a)) => Bson::Array(computed_array(sub, a, root, vars)?),
                    _ => {
                        let mut d = Document::new();
                        computed(sub, &mut d, root, vars)?;
                        Bson::Document(d)
                    }
                };
                out.insert(k.clone(), new);
            }
            _ => {}
        }
    }
    Ok(())
}

fn computed_array(
    sub: &[(String, Node)],
    a: Vec<Bson>,
    root: &Document,
    vars: &Variables,
) -> Result<Vec<Bson>> {
    a.into_iter()
        .map(|item| {
            Ok(match item {
                Bson::Document(mut d) => {
                    computed(sub, &mut d, root, vars)?;
                    Bson::Document(d)
                }
                Bson::Array(inner) => Bson::Array(computed_array(sub, inner, root, vars)?),
                _ => {
                    let mut d = Document::new();
                    computed(sub, &mut d, root, vars)?;
                    Bson::Document(d)
                }
            })
        })
        .collect()
}

fn exclude(fields: &[(String, Node)], doc: &Document) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match find(fields, k) {
            Some(Node::Exclude) => {}
            Some(Node::Sub(sub)) => match v {
                Bson::Document(d) => {
                    out.insert(k.clone(), Bson::Document(exclude(sub, d)));
                }
                Bson::Array(a) => {
                    out.insert(k.clone(), Bson::Array(exclude_array(sub, a)));
                }
                other => {
                    out.insert(k.clone(), other.clone());
                }
            },
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn exclude_array(sub: &[(String, Node)], a: &[Bson]) -> Vec<Bson> {
    a.iter()
        .map(|item| match item {
            Bson::Document(d) => Bson::Document(exclude(sub, d)),
            Bson::Array(inner) => Bson::Array(exclude_array(sub, inner)),
            other => other.clone(),
        })
        .collect()
}

//! `$fill`: what mongod makes of it (document_source_fill.cpp), a `$setWindowFields` of
//! `$locf`/`$linearFill` for the outputs with a `method`, then an `$addFields` of
//! `$ifNull` for the outputs with a `value`.

use super::super::project;
use super::window::{self, WindowFieldsStage};
use super::Stage;
use crate::error::{Error, Result};
use crate::expr::{util, Variables};
use bson::{doc, Bson, Document};

const STAGE: &str = "$fill";
const LOCF: &str = "locf";
const LINEAR: &str = "linear";

/// A parsed `$fill`: the window stage for the methods, the projection for the values.
pub(crate) struct FillStage {
    window: Option<Box<WindowFieldsStage>>,
    values: Option<project::Tree>,
}

/// `{$fill: {partitionBy | partitionByFields, sortBy, output}}`.
pub(crate) fn parse_fill(arg: &Bson) -> Result<Stage> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "The {STAGE} stage specification must be an object, found {}",
            util::type_name(arg)
        )));
    };
    let (mut partition_by, mut partition_by_fields, mut sort_by, mut output) =
        (None, None, None, None);
    for (k, v) in spec {
        let path = format!("{STAGE}.{k}");
        match k.as_str() {
            "partitionBy" => match v {
                Bson::String(_) | Bson::Document(_) => partition_by = Some(v.clone()),
                other => {
                    return Err(crate::args::wrong_types(
                        &path,
                        other,
                        &["string", "object"],
                    ))
                }
            },
            "partitionByFields" => partition_by_fields = Some(field_names(&path, v)?),
            "sortBy" => sort_by = Some(crate::args::doc_value(&path, v)?.clone()),
            "output" => output = Some(crate::args::doc_value(&path, v)?),
            other => {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{STAGE}.{other}' is an unknown field."),
                ))
            }
        }
    }
    let output = output.ok_or_else(|| Error::missing_field(&format!("{STAGE}.output")))?;
    if output.is_empty() {
        return Err(Error::location(
            6050203,
            "The output field in '$fill' must contain an object with at least one element",
        ));
    }
    let mut methods = Document::new();
    let mut values = Document::new();
    for (field, v) in output {
        let Bson::Document(f) = v else {
            return Err(Error::location(
                6050200,
                "Each fill output specification must be an object with exactly one field",
            ));
        };
        let (method, value) = output_spec(f)?;
        if let Some(method) = method {
            if value.is_some() {
                return Err(Error::location(
                    6050201,
                    "Each fill output specification must have exactly one of 'method' or 'value' fields, not both",
                ));
            }
            let function = match method {
                LOCF => "$locf",
                LINEAR => "$linearFill",
                _ => {
                    return Err(Error::location(
                        6050202,
                        format!("Method must be either {LOCF} or {LINEAR}"),
                    ))
                }
            };
            methods.insert(field.clone(), doc! {function: format!("${field}")});
        }
        if let Some(value) = value {
            values.insert(
                field.clone(),
                doc! {"$ifNull": [format!("${field}"), value.clone()]},
            );
        }
    }
    let mut window_spec = doc! {"output": methods.clone()};
    if let Some(s) = sort_by {
        window_spec.insert("sortBy", s);
    }
    if let Some(p) = partition_by {
        if partition_by_fields.is_some() {
            return Err(Error::location(
                6050204,
                "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'",
            ));
        }
        window_spec.insert("partitionBy", p);
    }
    if let Some(fields) = partition_by_fields {
        let by: Document = fields
            .into_iter()
            .map(|f| {
                let path = Bson::String(format!("${f}"));
                (f, path)
            })
            .collect();
        window_spec.insert("partitionBy", by);
    }
    let window = if methods.is_empty() {
        None
    } else {
        match window::parse_set_window_fields(&Bson::Document(window_spec))? {
            Stage::SetWindowFields(w) => Some(w),
            _ => unreachable!("the window stage parses to itself"),
        }
    };
    let values = if values.is_empty() {
        None
    } else {
        Some(project::Tree::parse_add_fields("$addFields", &values)?)
    };
    Ok(Stage::Fill(Box::new(FillStage { window, values })))
}

/// An output's `{method: <string>}` or `{value: <expression>}` (mongod's FillOutputSpec).
fn output_spec(f: &Document) -> Result<(Option<&str>, Option<&Bson>)> {
    let (mut method, mut value) = (None, None);
    for (k, v) in f {
        match k.as_str() {
            "method" => method = Some(crate::args::str_value(&format!("{STAGE}.method"), v)?),
            "value" => value = Some(v),
            other => {
                return Err(Error::location(
                    40415,
                    format!("BSON field '{STAGE}.{other}' is an unknown field."),
                ))
            }
        }
    }
    Ok((method, value))
}

/// `partitionByFields`: an array of field names.
fn field_names(path: &str, v: &Bson) -> Result<Vec<String>> {
    crate::args::array_value(path, v)?
        .iter()
        .enumerate()
        .map(|(i, f)| crate::args::str_value(&format!("{path}.{i}"), f).map(str::to_string))
        .collect()
}

/// `$fill` over all the documents.
pub(crate) fn fill(f: &FillStage, docs: Vec<Document>, vars: &Variables) -> Result<Vec<Document>> {
    let docs = match &f.window {
        Some(w) => window::set_window_fields(w, docs, vars)?,
        None => docs,
    };
    match &f.values {
        Some(tree) => docs.iter().map(|d| tree.apply(d, vars)).collect(),
        None => Ok(docs),
    }
}

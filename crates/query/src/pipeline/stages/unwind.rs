//! `$unwind`: one document per element of an array.

use super::type_name;
use super::Stage;
use crate::error::{Error, Result};
use crate::path::set_path;
use bson::{Bson, Document};

/// `$unwind`: a `$`-path, or `{path, includeArrayIndex, preserveNullAndEmptyArrays}`.
pub(crate) fn parse_unwind(arg: &Bson) -> Result<Stage> {
    let (path, index, preserve) = match arg {
        Bson::String(s) => (s.clone(), None, false),
        Bson::Document(d) => {
            let mut path = None;
            let mut index = None;
            let mut preserve = false;
            for (k, v) in d {
                match k.as_str() {
                    "path" => match v {
                        Bson::String(s) => path = Some(s.clone()),
                        other => {
                            return Err(Error::location(28808, format!("expected a string as the path for $unwind stage, got {}", type_name(other))))
                        }
                    },
                    "includeArrayIndex" => match v {
                        Bson::String(s) if !s.is_empty() => {
                            if s.starts_with('$') {
                                return Err(Error::location(28822, format!("includeArrayIndex option to $unwind stage should not be prefixed with a '$': {s}")));
                            }
                            index = Some(s.clone());
                        }
                        other => {
                            return Err(Error::location(28810, format!("expected a non-empty string for the includeArrayIndex  option to $unwind stage, got {}", type_name(other))))
                        }
                    },
                    "preserveNullAndEmptyArrays" => match v {
                        Bson::Boolean(b) => preserve = *b,
                        other => {
                            return Err(Error::location(28809, format!("expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage, got {}", type_name(other))))
                        }
                    },
                    _ => return Err(Error::location(28811, format!("unrecognized option to $unwind stage: {k}"))),
                }
            }
            (
                path.ok_or_else(|| Error::location(28812, "no path specified to $unwind stage"))?,
                index,
                preserve,
            )
        }
        other => {
            return Err(Error::location(
                15981,
                format!(
                "expected either a string or an object as specification for $unwind stage, got {}",
                type_name(other)
            ),
            ))
        }
    };
    let Some(p) = path.strip_prefix('$') else {
        return Err(Error::location(
            28818,
            format!("path option to $unwind stage should be prefixed with a '$': {path}"),
        ));
    };
    if p.is_empty() || p.starts_with('$') || p.split('.').any(|x| x.is_empty()) {
        return Err(Error::location(
            28818,
            format!("path option to $unwind stage should be prefixed with a '$': {path}"),
        ));
    }
    Ok(Stage::Unwind {
        path: crate::expr::split_path(p),
        index,
        preserve,
    })
}

/// The value at a dotted path without array traversal (as `$unwind` reads it).
fn get_plain<'a>(doc: &'a Document, path: &[String]) -> Option<&'a Bson> {
    let (first, rest) = path.split_first()?;
    let mut cur = doc.get(first)?;
    for p in rest {
        cur = match cur {
            Bson::Document(d) => d.get(p)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn remove_parts(doc: &mut Document, parts: &[String]) {
    let (first, rest) = parts.split_first().unwrap();
    if rest.is_empty() {
        doc.remove(first);
        return;
    }
    if let Some(Bson::Document(d)) = doc.get_mut(first) {
        remove_parts(d, rest);
    }
}

/// One document per element of the array at `path` (see `parse_unwind` for the options).
pub(crate) fn unwind(
    doc: Document,
    path: &[String],
    index: Option<&str>,
    preserve: bool,
    out: &mut Vec<Document>,
) {
    let joined = path.join(".");
    match get_plain(&doc, path) {
        Some(Bson::Array(a)) if !a.is_empty() => {
            let a = a.clone();
            for (i, item) in a.into_iter().enumerate() {
                let mut d = doc.clone();
                set_path(&mut d, &joined, item);
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Int64(i as i64));
                }
                out.push(d);
            }
        }
        Some(Bson::Array(_)) => {
            if preserve {
                let mut d = doc;
                remove_parts(&mut d, path);
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Null);
                }
                out.push(d);
            }
        }
        None | Some(Bson::Null) | Some(Bson::Undefined) => {
            if preserve {
                let mut d = doc;
                if let Some(ix) = index {
                    set_path(&mut d, ix, Bson::Null);
                }
                out.push(d);
            }
        }
        Some(_) => {
            // A non-array value is treated as a one-element array.
            let mut d = doc;
            if let Some(ix) = index {
                set_path(&mut d, ix, Bson::Null);
            }
            out.push(d);
        }
    }
}

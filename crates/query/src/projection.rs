//! `find()` projections: inclusion, exclusion, `$slice`, `$elemMatch`, the
//! positional `.$` operator and (in inclusion mode) computed fields evaluated with
//! `crate::expr`.

use crate::compare::{as_f64, is_number};
use crate::error::{Error, Result};
use crate::matcher::Matcher;
use crate::path::get_path;
use bson::{Bson, Document};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Slice {
    Count(i64),
    Range(i64, i64),
}

#[derive(Debug, Clone)]
enum PNode {
    Include,
    Exclude,
    Expr(Bson),
    Slice(Slice),
    /// Matcher over `{field: {$elemMatch: spec}}`, applied to `{field: [element]}`.
    ElemMatch(Box<Matcher>),
    Positional,
    Children(Vec<(String, PNode)>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Unset,
    Inclusion,
    Exclusion,
}

#[derive(Debug, Clone)]
struct Positional {
    path: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
pub struct Projection {
    inclusion: bool,
    root: Vec<(String, PNode)>,
    positional: Option<Positional>,
    empty: bool,
    /// The operation's collation, for computed fields' comparisons.
    collator: Option<std::sync::Arc<crate::collation::Collator>>,
    /// `{field: {$meta: "textScore"}}`: fields set from the document's metadata; they
    /// decide neither inclusion nor exclusion.
    metas: Vec<String>,
}

enum Leaf {
    Include,
    Exclude,
    Expr(Bson),
    Slice(Slice),
    ElemMatch(Document),
    Positional,
    TextScore,
}

fn is_true_flag(v: &Bson) -> Option<bool> {
    match v {
        Bson::Boolean(b) => Some(*b),
        _ if is_number(v) => Some(as_f64(v).map(|f| f != 0.0).unwrap_or(true)),
        _ => None,
    }
}

fn slice_int(v: &Bson) -> Result<i64> {
    if !is_number(v) {
        return Err(Error::location(
            28667,
            "$slice only supports numbers and [skip, limit] arrays",
        ));
    }
    Ok(match v {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        _ => {
            let f = as_f64(v).unwrap_or(0.0);
            if f.is_nan() {
                0
            } else {
                f.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64
            }
        }
    })
}

fn parse_slice(v: &Bson) -> Result<Slice> {
    match v {
        Bson::Array(a) => {
            if a.len() != 2 {
                return Err(Error::location(
                    28667,
                    "$slice array argument must be of the form [skip, limit]",
                ));
            }
            let skip = slice_int(&a[0])?;
            let limit = slice_int(&a[1])?;
            if limit <= 0 {
                return Err(Error::location(
                    28724,
                    format!("$slice limit must be positive, got {limit}"),
                ));
            }
            Ok(Slice::Range(skip, limit))
        }
        _ => Ok(Slice::Count(slice_int(v)?)),
    }
}

fn apply_slice(a: &[Bson], s: Slice) -> Vec<Bson> {
    let len = a.len() as i64;
    let (start, end) = match s {
        Slice::Count(n) if n >= 0 => (0, n.min(len)),
        Slice::Count(n) => ((len + n).max(0), len),
        Slice::Range(skip, limit) => {
            let start = if skip < 0 {
                (len + skip).max(0)
            } else {
                skip.min(len)
            };
            (start, start.saturating_add(limit).min(len))
        }
    };
    a[start as usize..end as usize].to_vec()
}

fn slice_value(v: &Bson, s: Slice) -> Bson {
    match v {
        Bson::Array(a) => Bson::Array(apply_slice(a, s)),
        _ => v.clone(),
    }
}

fn insert_path(root: &mut Vec<(String, PNode)>, path: &str, leaf: PNode) -> Result<()> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let pos = cur.iter().position(|(k, _)| k == part);
        match pos {
            Some(p) => {
                if last {
                    return Err(Error::location(31250, format!("Path collision at {path}")));
                }
                match &mut cur[p].1 {
                    PNode::Children(_) => {}
                    _ => {
                        return Err(Error::location(
                            31249,
                            format!(
                                "Path collision at {path} remaining portion {}",
                                parts[i + 1..].join(".")
                            ),
                        ))
                    }
                }
                cur = match &mut cur[p].1 {
                    PNode::Children(c) => c,
                    _ => unreachable!(),
                };
            }
            None => {
                if last {
                    cur.push((part.to_string(), leaf));
                    return Ok(());
                }
                cur.push((part.to_string(), PNode::Children(Vec::new())));
                let n = cur.len() - 1;
                cur = match &mut cur[n].1 {
                    PNode::Children(c) => c,
                    _ => unreachable!(),
                };
            }
        }
    }
    Ok(())
}

/// Flattens nested specs (`{a: {b: 1}}` -> `a.b`) into (path, leaf) pairs.
fn flatten(prefix: &str, spec: &Document, out: &mut Vec<(String, Leaf)>) -> Result<()> {
    for (k, v) in spec {
        if k.is_empty() {
            return Err(Error::location(
                40352,
                "FieldPath cannot be constructed with empty string",
            ));
        }
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let Some(base) = path.strip_suffix(".$") {
            if is_true_flag(v) != Some(true) {
                return Err(Error::location(
                    31395,
                    "positional projection cannot be used with exclusion or a non-true value",
                ));
            }
            out.push((base.to_string(), Leaf::Positional));
            continue;
        }
        if path.split('.').any(|p| p.starts_with('$') || p.is_empty()) {
            return Err(Error::location(
                16410,
                format!(
                    "FieldPath field names may not start with '$'. Consider using $getField or $setField. (in {path})"
                ),
            ));
        }
        let leaf = match v {
            Bson::Document(d) => match d.keys().next().map(|s| s.as_str()) {
                None => {
                    return Err(Error::location(
                        51270,
                        format!("An empty sub-projection is not a valid value. Found empty object at path {path}"),
                    ))
                }
                Some("$slice") if d.len() == 1 => Leaf::Slice(parse_slice(d.get("$slice").unwrap())?),
                Some("$elemMatch") if d.len() == 1 => match d.get("$elemMatch").unwrap() {
                    Bson::Document(em) => {
                        if path.contains('.') {
                            return Err(Error::location(31275, "Cannot use $elemMatch projection on a nested field."));
                        }
                        Leaf::ElemMatch(em.clone())
                    }
                    _ => return Err(Error::bad_value("$elemMatch needs an Object")),
                },
                Some("$meta") if d.len() == 1 && d.get_str("$meta") == Ok("textScore") => {
                    Leaf::TextScore
                }
                Some("$meta") => {
                    return Err(Error::bad_value(format!(
                        "$meta projection ({}) is not supported",
                        d.get("$meta").unwrap()
                    )))
                }
                Some(op) if op.starts_with('$') => Leaf::Expr(v.clone()),
                Some(_) => {
                    flatten(&path, d, out)?;
                    continue;
                }
            },
            _ => match is_true_flag(v) {
                Some(true) => Leaf::Include,
                Some(false) => Leaf::Exclude,
                None => Leaf::Expr(v.clone()),
            },
        };
        out.push((path, leaf));
    }
    Ok(())
}

/// The filter conditions on `path` (or below it), ANDed at the top level of `filter`.
fn conditions_on(filter: &Document, path: &str, out: &mut Vec<Bson>) {
    for (k, v) in filter {
        if k == "$and" {
            if let Bson::Array(a) = v {
                for e in a {
                    if let Bson::Document(d) = e {
                        conditions_on(d, path, out);
                    }
                }
            }
        } else if k == path || k.starts_with(&format!("{path}.")) {
            let mut d = Document::new();
            d.insert(k.clone(), v.clone());
            out.push(Bson::Document(d));
        }
    }
}

/// Replaces the value at a dotted path that goes through documents only.
fn replace_path(doc: &mut Document, parts: &[&str], val: Bson) -> bool {
    if parts.len() == 1 {
        doc.insert(parts[0], val);
        return true;
    }
    match doc.get_mut(parts[0]) {
        Some(Bson::Document(d)) => replace_path(d, &parts[1..], val),
        _ => false,
    }
}

fn has_computed(children: &[(String, PNode)]) -> bool {
    children.iter().any(|(_, n)| match n {
        PNode::Expr(_) => true,
        PNode::Children(c) => has_computed(c),
        _ => false,
    })
}

impl Projection {
    pub fn new(spec: &Document, filter: Option<&Document>) -> Result<Projection> {
        Self::with_collation(spec, filter, None)
    }

    /// A projection whose `$elemMatch` and positional `$` compare strings under `collator`.
    pub fn with_collation(
        spec: &Document,
        filter: Option<&Document>,
        collator: Option<std::sync::Arc<crate::collation::Collator>>,
    ) -> Result<Projection> {
        let mut leaves = Vec::new();
        flatten("", spec, &mut leaves)?;
        let mut mode = Mode::Unset;
        let mut root: Vec<(String, PNode)> = Vec::new();
        let mut positional = None;
        let mut metas = Vec::new();
        for (path, leaf) in leaves {
            let is_id = path == "_id";
            let node = match leaf {
                Leaf::TextScore => {
                    metas.push(path);
                    continue;
                }
                Leaf::Include => {
                    if !is_id {
                        if mode == Mode::Exclusion {
                            return Err(Error::location(
                                31253,
                                format!(
                                    "Cannot do inclusion on field {path} in exclusion projection"
                                ),
                            ));
                        }
                        mode = Mode::Inclusion;
                    }
                    PNode::Include
                }
                Leaf::Exclude => {
                    if !is_id {
                        if mode == Mode::Inclusion {
                            return Err(Error::location(
                                31254,
                                format!(
                                    "Cannot do exclusion on field {path} in inclusion projection"
                                ),
                            ));
                        }
                        mode = Mode::Exclusion;
                    }
                    PNode::Exclude
                }
                Leaf::Expr(e) => {
                    if mode == Mode::Exclusion {
                        return Err(Error::location(
                            31252,
                            format!("Cannot use expression other than $meta in exclusion projection (field {path})"),
                        ));
                    }
                    mode = Mode::Inclusion;
                    PNode::Expr(e)
                }
                Leaf::Slice(s) => PNode::Slice(s),
                Leaf::ElemMatch(em) => {
                    if mode == Mode::Exclusion {
                        return Err(Error::location(
                            31253,
                            format!("Cannot do inclusion on field {path} in exclusion projection"),
                        ));
                    }
                    mode = Mode::Inclusion;
                    let mut f = Document::new();
                    f.insert(path.clone(), bson::doc! {"$elemMatch": em});
                    PNode::ElemMatch(Box::new(Matcher::with_collation(&f, collator.clone())?))
                }
                Leaf::Positional => {
                    if mode == Mode::Exclusion {
                        return Err(Error::location(
                            31253,
                            format!(
                                "Cannot do inclusion on field {path}.$ in exclusion projection"
                            ),
                        ));
                    }
                    if positional.is_some() {
                        return Err(Error::location(
                            31276,
                            "Cannot specify more than one positional projection per query.",
                        ));
                    }
                    mode = Mode::Inclusion;
                    let mut conds = Vec::new();
                    if let Some(f) = filter {
                        conditions_on(f, &path, &mut conds);
                    }
                    if conds.is_empty() {
                        return Err(Error::bad_value(
                            "Executor error during find command :: caused by :: positional operator '.$' requires corresponding field in query specifier",
                        ));
                    }
                    let matcher =
                        Matcher::with_collation(&bson::doc! {"$and": conds}, collator.clone())?;
                    positional = Some(Positional {
                        path: path.clone(),
                        matcher,
                    });
                    PNode::Positional
                }
            };
            insert_path(&mut root, &path, node)?;
        }
        let inclusion = mode == Mode::Inclusion
            || (mode == Mode::Unset
                && matches!(
                    root.iter().find(|(k, _)| k == "_id"),
                    Some((_, PNode::Include))
                )
                && root.len() == 1);
        if inclusion && !root.iter().any(|(k, _)| k == "_id") {
            root.insert(0, ("_id".to_string(), PNode::Include));
        }
        Ok(Projection {
            inclusion,
            root,
            positional,
            empty: spec.is_empty(),
            collator,
            metas,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// Whether the projection asks for `{$meta: "textScore"}`.
    pub fn uses_text_score(&self) -> bool {
        !self.metas.is_empty()
    }

    pub fn apply(&self, doc: &Document) -> Result<Document> {
        if self.empty {
            return Ok(doc.clone());
        }
        let mut out = if self.inclusion {
            let pos = self.positional_index(doc)?;
            self.incl_doc(doc, &self.root, doc, true, pos)?
        } else {
            excl_doc(doc, &self.root)
        };
        if let Some(score) = doc.get(crate::text::TEXT_SCORE_FIELD) {
            for path in &self.metas {
                crate::path::set_path(&mut out, path, score.clone());
            }
        }
        Ok(out)
    }

    fn positional_index(&self, root: &Document) -> Result<Option<usize>> {
        let Some(p) = &self.positional else {
            return Ok(None);
        };
        let parts: Vec<&str> = p.path.split('.').collect();
        let arr = match get_path(root, &p.path) {
            Some(Bson::Array(a)) => a,
            _ => return Ok(None),
        };
        for (i, e) in arr.iter().enumerate() {
            let mut d = root.clone();
            if !replace_path(&mut d, &parts, Bson::Array(vec![e.clone()])) {
                return Ok(None);
            }
            if p.matcher.matches_checked(&d)? {
                return Ok(Some(i));
            }
        }
        Err(Error::bad_value(
            "Executor error during find command :: caused by :: positional operator '.$' element mismatch",
        ))
    }

    fn incl_doc(
        &self,
        doc: &Document,
        children: &[(String, PNode)],
        root: &Document,
        top: bool,
        pos: Option<usize>,
    ) -> Result<Document> {
        let mut out = Document::new();
        let find = |k: &str| children.iter().find(|(c, _)| c == k).map(|(_, n)| n);
        if top {
            if let (Some(PNode::Include), Some(v)) = (find("_id"), doc.get("_id")) {
                out.insert("_id", v.clone());
            }
        }
        for (k, v) in doc {
            if top && k == "_id" && out.contains_key("_id") {
                continue;
            }
            let Some(child) = find(k) else { continue };
            match child {
                PNode::Include => {
                    out.insert(k.clone(), v.clone());
                }
                PNode::Slice(s) => {
                    out.insert(k.clone(), slice_value(v, *s));
                }
                PNode::Positional => match (v, pos) {
                    (Bson::Array(a), Some(i)) => {
                        if let Some(e) = a.get(i) {
                            out.insert(k.clone(), Bson::Array(vec![e.clone()]));
                        }
                    }
                    (Bson::Array(_), None) => {}
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                },
                PNode::Children(c) => match v {
                    Bson::Document(d) => {
                        out.insert(k.clone(), self.incl_doc(d, c, root, false, pos)?);
                    }
                    Bson::Array(a) => {
                        out.insert(k.clone(), self.incl_array(a, c, root, pos)?);
                    }
                    _ => {}
                },
                PNode::Exclude | PNode::Expr(_) | PNode::ElemMatch(_) => {}
            }
        }
        // Computed fields and $elemMatch come after the included fields, in spec order.
        for (k, child) in children {
            match child {
                PNode::Expr(e) => {
                    let vars = crate::expr::Variables {
                        collator: self.collator.clone(),
                        ..Default::default()
                    };
                    if let Some(v) = crate::expr::evaluate_opt(e, root, &vars)? {
                        out.insert(k.clone(), v);
                    }
                }
                PNode::ElemMatch(m) => {
                    if let Some(Bson::Array(a)) = doc.get(k) {
                        for e in a {
                            let mut probe = Document::new();
                            probe.insert(k.clone(), Bson::Array(vec![e.clone()]));
                            if m.matches_checked(&probe)? {
                                out.insert(k.clone(), Bson::Array(vec![e.clone()]));
                                break;
                            }
                        }
                    }
                }
                PNode::Children(c)
                    if has_computed(c)
                        && !matches!(
                            doc.get(k),
                            Some(Bson::Document(_)) | Some(Bson::Array(_))
                        ) =>
                {
                    let sub = self.incl_doc(&Document::new(), c, root, false, pos)?;
                    if !sub.is_empty() {
                        out.insert(k.clone(), sub);
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn incl_array(
        &self,
        a: &[Bson],
        children: &[(String, PNode)],
        root: &Document,
        pos: Option<usize>,
    ) -> Result<Bson> {
        let mut out = Vec::new();
        for e in a {
            match e {
                Bson::Document(d) => out.push(Bson::Document(
                    self.incl_doc(d, children, root, false, pos)?,
                )),
                Bson::Array(inner) => out.push(self.incl_array(inner, children, root, pos)?),
                _ => {}
            }
        }
        Ok(Bson::Array(out))
    }
}

fn excl_doc(doc: &Document, children: &[(String, PNode)]) -> Document {
    let mut out = Document::new();
    for (k, v) in doc {
        match children.iter().find(|(c, _)| c == k).map(|(_, n)| n) {
            Some(PNode::Exclude) => {}
            Some(PNode::Slice(s)) => {
                out.insert(k.clone(), slice_value(v, *s));
            }
            Some(PNode::Children(c)) => {
                let nv = match v {
                    Bson::Document(d) => Bson::Document(excl_doc(d, c)),
                    Bson::Array(a) => excl_array(a, c),
                    _ => v.clone(),
                };
                out.insert(k.clone(), nv);
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn excl_array(a: &[Bson], children: &[(String, PNode)]) -> Bson {
    Bson::Array(
        a.iter()
            .map(|e| match e {
                Bson::Document(d) => Bson::Document(excl_doc(d, children)),
                Bson::Array(inner) => excl_array(inner, children),
                _ => e.clone(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn p(spec: Document) -> Projection {
        Projection::new(&spec, None).unwrap_or_else(|e| panic!("{spec}: {e}"))
    }
    fn ap(spec: Document, d: Document) -> Document {
        p(spec).apply(&d).unwrap()
    }
    fn perr(spec: Document, filter: Option<Document>) -> Error {
        match Projection::new(&spec, filter.as_ref()) {
            Ok(_) => panic!("{spec} should fail"),
            Err(e) => e,
        }
    }

    #[test]
    fn inclusion_keeps_document_order_and_id() {
        let d = doc! {"_id": 1, "c": 3, "a": 1, "b": 2};
        assert_eq!(
            ap(doc! {"b": 1, "a": 1}, d.clone()),
            doc! {"_id": 1, "a": 1, "b": 2}
        );
        assert_eq!(ap(doc! {"b": true, "_id": 0}, d.clone()), doc! {"b": 2});
        assert_eq!(ap(doc! {"b": 2.5}, d.clone()), doc! {"_id": 1, "b": 2});
        assert_eq!(ap(doc! {"zz": 1}, d.clone()), doc! {"_id": 1});
        assert_eq!(ap(doc! {"_id": 1}, d.clone()), doc! {"_id": 1});
        assert_eq!(
            ap(doc! {"a": 1}, doc! {"a": 1, "_id": 7}),
            doc! {"_id": 7, "a": 1}
        );
        assert!(p(doc! {}).is_empty());
        assert_eq!(ap(doc! {}, d.clone()), d);
    }

    #[test]
    fn exclusion_mode() {
        let d = doc! {"_id": 1, "a": 1, "b": {"c": 1, "d": 2}};
        assert_eq!(
            ap(doc! {"a": 0}, d.clone()),
            doc! {"_id": 1, "b": {"c": 1, "d": 2}}
        );
        assert_eq!(
            ap(doc! {"_id": 0}, d.clone()),
            doc! {"a": 1, "b": {"c": 1, "d": 2}}
        );
        assert_eq!(
            ap(doc! {"b.c": false, "_id": 0}, d.clone()),
            doc! {"a": 1, "b": {"d": 2}}
        );
        assert_eq!(
            ap(doc! {"b": {"d": 0}}, d),
            doc! {"_id": 1, "a": 1, "b": {"c": 1}}
        );
        assert_eq!(
            ap(
                doc! {"a.b": 0},
                doc! {"a": [{"b": 1, "c": 2}, 3, [{"b": 4}]]}
            ),
            doc! {"a": [{"c": 2}, 3, [{}]]}
        );
        assert_eq!(ap(doc! {"a.b": 0}, doc! {"a": 5}), doc! {"a": 5});
    }

    #[test]
    fn dotted_inclusion_through_documents_and_arrays() {
        assert_eq!(
            ap(
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": {"b": 1, "c": 2}, "x": 1}
            ),
            doc! {"a": {"b": 1}}
        );
        assert_eq!(
            ap(doc! {"a.b": 1, "_id": 0}, doc! {"a": [{"b": 1, "c": 2}, 3]}),
            doc! {"a": [{"b": 1}]}
        );
        assert_eq!(
            ap(
                doc! {"a.b": 1, "_id": 0},
                doc! {"a": [{"c": 2}, [{"b": 5}]]}
            ),
            doc! {"a": [{}, [{"b": 5}]]}
        );
        assert_eq!(ap(doc! {"a.b": 1, "_id": 0}, doc! {"a": 5}), doc! {});
        assert_eq!(
            ap(doc! {"a": {"b": 1}, "_id": 0}, doc! {"a": {"b": 1, "c": 2}}),
            doc! {"a": {"b": 1}}
        );
        assert_eq!(
            ap(
                doc! {"a.b.c": 1, "_id": 0},
                doc! {"a": {"b": {"c": 1, "d": 1}}}
            ),
            doc! {"a": {"b": {"c": 1}}}
        );
    }

    #[test]
    fn mixing_and_collision_errors() {
        let e = perr(doc! {"a": 1, "b": 0}, None);
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                31254,
                "Cannot do exclusion on field b in inclusion projection"
            )
        );
        let e = perr(doc! {"a": 0, "b": 1}, None);
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                31253,
                "Cannot do inclusion on field b in exclusion projection"
            )
        );
        let e = perr(doc! {"a": 1, "a.b": 1}, None);
        assert_eq!(
            (e.code, e.message.as_str()),
            (31249, "Path collision at a.b remaining portion b")
        );
        assert_eq!(perr(doc! {"a.b": 1, "a": 1}, None).code, 31250);
        assert_eq!(perr(doc! {"a": {"$meta": "searchScore"}}, None).code, 2);
        assert_eq!(perr(doc! {"a": {}}, None).code, 51270);
        // _id may be excluded in inclusion mode and included in exclusion mode
        assert!(Projection::new(&doc! {"a": 1, "_id": 0}, None).is_ok());
        assert!(Projection::new(&doc! {"a": 0, "_id": 1}, None).is_ok());
        assert_eq!(perr(doc! {"a": 0, "b": {"$literal": 1}}, None).code, 31252);
    }

    #[test]
    fn slice_projection() {
        let d = doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": 1};
        assert_eq!(
            ap(doc! {"a": {"$slice": 2}}, d.clone()),
            doc! {"_id": 1, "a": [1, 2], "b": 1}
        );
        assert_eq!(
            ap(doc! {"a": {"$slice": -2}}, d.clone()),
            doc! {"_id": 1, "a": [4, 5], "b": 1}
        );
        assert_eq!(
            ap(doc! {"a": {"$slice": [1, 2]}}, d.clone()),
            doc! {"_id": 1, "a": [2, 3], "b": 1}
        );
        assert_eq!(
            ap(doc! {"a": {"$slice": [-2, 5]}}, d.clone()),
            doc! {"_id": 1, "a": [4, 5], "b": 1}
        );
        assert_eq!(
            ap(doc! {"a": {"$slice": [10, 2]}}, d.clone()),
            doc! {"_id": 1, "a": [], "b": 1}
        );
        assert_eq!(ap(doc! {"a": {"$slice": 10}}, d.clone()), d.clone());
        assert_eq!(
            ap(doc! {"a": {"$slice": 1}, "b": 0}, d.clone()),
            doc! {"_id": 1, "a": [1]}
        );
        assert_eq!(
            ap(doc! {"a": {"$slice": 1}, "_id": 0, "c": 1}, d.clone()),
            doc! {"a": [1]}
        );
        assert_eq!(ap(doc! {"b": {"$slice": 1}}, d.clone()), d);
        assert_eq!(
            ap(
                doc! {"x.y": {"$slice": 1}},
                doc! {"x": [{"y": [1, 2]}, {"y": [3, 4]}]}
            ),
            doc! {"x": [{"y": [1]}, {"y": [3]}]}
        );
        assert_eq!(perr(doc! {"a": {"$slice": [1, 0]}}, None).code, 28724);
        assert_eq!(perr(doc! {"a": {"$slice": "x"}}, None).code, 28667);
    }

    #[test]
    fn elem_match_projection() {
        let d =
            doc! {"_id": 1, "a": [{"x": 1, "y": 1}, {"x": 2, "y": 2}, {"x": 2, "y": 3}], "b": 5};
        assert_eq!(
            ap(doc! {"a": {"$elemMatch": {"x": 2}}}, d.clone()),
            doc! {"_id": 1, "a": [{"x": 2, "y": 2}]}
        );
        assert_eq!(
            ap(doc! {"a": {"$elemMatch": {"x": 9}}}, d.clone()),
            doc! {"_id": 1}
        );
        assert_eq!(
            ap(
                doc! {"a": {"$elemMatch": {"y": {"$gt": 2}}}, "b": 1},
                d.clone()
            ),
            doc! {"_id": 1, "b": 5, "a": [{"x": 2, "y": 3}]}
        );
        assert_eq!(
            ap(
                doc! {"s": {"$elemMatch": {"$gt": 3}}},
                doc! {"_id": 1, "s": [1, 5, 7]}
            ),
            doc! {"_id": 1, "s": [5]}
        );
        assert_eq!(ap(doc! {"b": {"$elemMatch": {"x": 1}}}, d), doc! {"_id": 1});
        assert_eq!(
            perr(doc! {"a.b": {"$elemMatch": {"x": 1}}}, None).code,
            31275
        );
        assert_eq!(
            perr(doc! {"a": 0, "b": {"$elemMatch": {"x": 1}}}, None).code,
            31253
        );
    }

    #[test]
    fn positional_projection() {
        let f = doc! {"grades": {"$gte": 85}};
        let pr = Projection::new(&doc! {"grades.$": 1}, Some(&f)).unwrap();
        let d = doc! {"_id": 1, "grades": [80, 85, 90], "name": "x"};
        assert_eq!(pr.apply(&d).unwrap(), doc! {"_id": 1, "grades": [85]});
        let f = doc! {"a.b": 2, "z": 1};
        let pr = Projection::new(&doc! {"a.$": 1, "z": 1}, Some(&f)).unwrap();
        let d = doc! {"_id": 1, "z": 1, "a": [{"b": 1}, {"b": 2, "c": 1}]};
        assert_eq!(
            pr.apply(&d).unwrap(),
            doc! {"_id": 1, "z": 1, "a": [{"b": 2, "c": 1}]}
        );
        let f = doc! {"$and": [{"a": {"$elemMatch": {"$gt": 1}}}]};
        let pr = Projection::new(&doc! {"a.$": 1}, Some(&f)).unwrap();
        assert_eq!(pr.apply(&doc! {"a": [0, 3, 5]}).unwrap(), doc! {"a": [3]});
        let e = perr(doc! {"a.$": 1}, Some(doc! {"b": 1}));
        assert_eq!(e.code, 2);
        assert!(e
            .message
            .contains("positional operator '.$' requires corresponding field in query specifier"));
        assert_eq!(perr(doc! {"a.$": 1}, None).code, 2);
    }

    #[test]
    fn projection_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Projection>();
    }

    #[test]
    fn expr_computed_fields() {
        let d = doc! {"_id": 1, "a": 2, "b": 3};
        assert_eq!(ap(doc! {"x": "$a"}, d.clone()), doc! {"_id": 1, "x": 2});
        assert_eq!(
            ap(doc! {"x": {"$literal": 5}, "_id": 0}, d.clone()),
            doc! {"x": 5}
        );
        assert_eq!(
            ap(doc! {"b": 1, "s": {"$add": ["$a", "$b"]}}, d.clone()),
            doc! {"_id": 1, "b": 3, "s": 5}
        );
        assert_eq!(ap(doc! {"x": "$missing", "_id": 0}, d), doc! {});
    }
}

//! Applying a parsed update to a document.

use bson::{Bson, Document};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::util::{
    arith, bit_apply, elem_to_string, id_string, identical, identical_doc, safe_num_debug,
    type_name, zero_like, Arith,
};
use super::{
    ApplyContext, ArrayNode, Node, ObjectNode, Op, PullCond, PushSpec, SortSpec, UpdateOutcome,
};
use crate::collation::Collator;
use crate::compare::{bson_eq, bson_eq_with, cmp_bson_with, is_number};
use crate::error::{codes, Error};
use crate::path::{get_path, parse_index, step};
use crate::Result;

/// mongod refuses to pad an array by more than this many elements.
const MAX_PADDING: usize = 1_500_000;

enum LogEntry {
    Updated(Vec<String>),
    Removed(Vec<String>),
}

struct Applier<'a, 'c> {
    doc: Document,
    original_id: String,
    ctx: &'a ApplyContext<'c>,
    filters: &'a BTreeMap<String, Document>,
    log: Vec<LogEntry>,
    changes: usize,
}

pub(super) fn apply_operators(
    root: &ObjectNode,
    filters: &BTreeMap<String, Document>,
    doc: &mut Document,
    ctx: &ApplyContext,
) -> Result<UpdateOutcome> {
    let mut a = Applier {
        doc: doc.clone(),
        original_id: id_string(doc),
        ctx,
        filters,
        log: Vec::new(),
        changes: 0,
    };
    let mut path = Vec::new();
    a.apply_object(root, &mut path)?;
    if identical_doc(doc, &a.doc) {
        return Ok(UpdateOutcome::default());
    }
    let outcome = a.build_outcome();
    *doc = a.doc;
    Ok(outcome)
}

pub(super) fn apply_replacement(
    replacement: &Document,
    doc: &mut Document,
) -> Result<UpdateOutcome> {
    let mut new = replacement.clone();
    if let Some(old_id) = doc.get("_id") {
        match new.get("_id") {
            Some(nid) => {
                if !bson_eq(nid, old_id) {
                    return Err(Error::new(
                        codes::IMMUTABLE_FIELD,
                        format!(
                            "After applying the update, the (immutable) field '_id' was found to have been altered to {}",
                            elem_to_string("_id", nid)
                        ),
                    ));
                }
            }
            None => {
                let mut d = Document::new();
                d.insert("_id", old_id.clone());
                for (k, v) in new {
                    d.insert(k, v);
                }
                new = d;
            }
        }
    }
    if identical_doc(doc, &new) {
        return Ok(UpdateOutcome::default());
    }
    let mut out = UpdateOutcome {
        modified: true,
        ..Default::default()
    };
    for (k, v) in &new {
        if doc.get(k).is_none_or(|old| !identical(old, v)) {
            out.updated_fields.insert(k.clone(), v.clone());
        }
    }
    for k in doc.keys() {
        if !new.contains_key(k) {
            out.removed_fields.push(k.clone());
        }
    }
    *doc = new;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Path helpers (no array expansion; numeric components index arrays)
// ---------------------------------------------------------------------------

fn get_at<'d>(doc: &'d Document, path: &[String]) -> Option<&'d Bson> {
    let mut cur = doc.get(path.first()?)?;
    for p in &path[1..] {
        cur = step(cur, p)?;
    }
    Some(cur)
}

fn get_mut_at<'d>(doc: &'d mut Document, path: &[String]) -> Option<&'d mut Bson> {
    let mut cur = doc.get_mut(path.first()?)?;
    for p in &path[1..] {
        cur = match cur {
            Bson::Document(d) => d.get_mut(p)?,
            Bson::Array(a) => a.get_mut(parse_index(p)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// How many leading components of `path` exist in `doc`.
fn resolve(doc: &Document, path: &[String]) -> usize {
    let Some(mut cur) = path.first().and_then(|p| doc.get(p)) else {
        return 0;
    };
    let mut n = 1;
    for p in &path[1..] {
        match step(cur, p) {
            Some(v) => {
                cur = v;
                n += 1;
            }
            None => break,
        }
    }
    n
}

fn is_prefix(prefix: &[String], path: &[String]) -> bool {
    prefix.len() <= path.len() && path[..prefix.len()] == *prefix
}

/// Merges two update nodes that target the same array element / field
/// (mongod's UpdateNode::createUpdateNodeByMerging).
fn merge(a: &Node, b: &Node, path: &mut Vec<String>) -> Result<Node> {
    let conflict = |path: &Vec<String>| {
        Error::new(
            codes::CONFLICTING_UPDATE_OPERATORS,
            format!("Update created a conflict at '{}'", path.join(".")),
        )
    };
    match (a, b) {
        (Node::Object(x), Node::Object(y)) => {
            let mut out = ObjectNode {
                children: x.children.clone(),
                positional: None,
            };
            for (k, v) in &y.children {
                let merged = match x.children.get(k) {
                    Some(existing) => {
                        path.push(k.clone());
                        let m = merge(existing, v, path);
                        path.pop();
                        m?
                    }
                    None => v.clone(),
                };
                out.children.insert(k.clone(), merged);
            }
            out.positional = match (&x.positional, &y.positional) {
                (Some(p), Some(q)) => {
                    path.push("$".into());
                    let m = merge(p, q, path);
                    path.pop();
                    Some(Box::new(m?))
                }
                (Some(p), None) | (None, Some(p)) => Some(p.clone()),
                (None, None) => None,
            };
            Ok(Node::Object(out))
        }
        (Node::Array(x), Node::Array(y)) => {
            let mut out = ArrayNode {
                children: x.children.clone(),
            };
            for (k, v) in &y.children {
                let merged = match x.children.get(k) {
                    Some(existing) => {
                        path.push(format!("$[{k}]"));
                        let m = merge(existing, v, path);
                        path.pop();
                        m?
                    }
                    None => v.clone(),
                };
                out.children.insert(k.clone(), merged);
            }
            Ok(Node::Array(out))
        }
        _ => Err(conflict(path)),
    }
}

impl<'a, 'c> Applier<'a, 'c> {
    fn build_outcome(&self) -> UpdateOutcome {
        let mut updated: Vec<Vec<String>> = Vec::new();
        let mut removed: Vec<Vec<String>> = Vec::new();
        for e in &self.log {
            match e {
                LogEntry::Updated(p) => {
                    if updated.iter().any(|u| is_prefix(u, p)) {
                        continue;
                    }
                    updated.retain(|u| !is_prefix(p, u));
                    removed.retain(|r| !is_prefix(p, r));
                    updated.push(p.clone());
                }
                LogEntry::Removed(p) => {
                    if updated.iter().any(|u| is_prefix(u, p))
                        || removed.iter().any(|r| is_prefix(r, p))
                    {
                        continue;
                    }
                    updated.retain(|u| !is_prefix(p, u));
                    removed.push(p.clone());
                }
            }
        }
        let mut out = UpdateOutcome {
            modified: true,
            ..Default::default()
        };
        for p in updated {
            if let Some(v) = get_at(&self.doc, &p) {
                out.updated_fields.insert(p.join("."), v.clone());
            }
        }
        out.removed_fields = removed.into_iter().map(|p| p.join(".")).collect();
        out
    }

    fn apply_node(&mut self, node: &Node, path: &mut Vec<String>) -> Result<()> {
        match node {
            Node::Object(o) => self.apply_object(o, path),
            Node::Array(a) => self.apply_array(a, path),
            Node::Leaf(op) => self.apply_leaf(op, path),
        }
    }

    fn apply_child(&mut self, node: &Node, field: &str, path: &mut Vec<String>) -> Result<()> {
        path.push(field.to_string());
        let r = self.apply_node(node, path);
        path.pop();
        r
    }

    fn apply_object(&mut self, node: &ObjectNode, path: &mut Vec<String>) -> Result<()> {
        let mut pending = match node.positional {
            Some(_) => Some(
                self.ctx
                    .positional
                    .ok_or_else(|| {
                        Error::bad_value(
                            "The positional operator did not find the match needed from the query.",
                        )
                    })?
                    .to_string(),
            ),
            None => None,
        };
        for (name, child) in &node.children {
            if let (Some(m), Some(pos)) = (pending.clone(), node.positional.as_deref()) {
                if &m == name {
                    path.push(m);
                    let merged = merge(pos, child, path);
                    let r = merged.and_then(|merged| self.apply_node(&merged, path));
                    path.pop();
                    r?;
                    pending = None;
                    continue;
                }
                if m.as_str() < name.as_str() {
                    self.apply_child(pos, &m, path)?;
                    pending = None;
                }
            }
            self.apply_child(child, name, path)?;
        }
        if let (Some(m), Some(pos)) = (pending, node.positional.as_deref()) {
            self.apply_child(pos, &m, path)?;
        }
        Ok(())
    }

    fn filter_matches(&self, id: &str, item: &Bson) -> Result<bool> {
        let Some(filter) = self.filters.get(id) else {
            return Ok(false);
        };
        let mut wrapped = Document::new();
        wrapped.insert(id, item.clone());
        self.ctx
            .matcher
            .matches_value(filter, &Bson::Document(wrapped))
    }

    fn apply_array(&mut self, node: &ArrayNode, path: &mut Vec<String>) -> Result<()> {
        if resolve(&self.doc, path) < path.len() {
            return Err(Error::bad_value(format!(
                "The path '{}' must exist in the document in order to apply array updates.",
                path.join(".")
            )));
        }
        let elem = get_at(&self.doc, path).cloned().unwrap_or(Bson::Null);
        let Bson::Array(items) = &elem else {
            return Err(Error::bad_value(format!(
                "Cannot apply array updates to non-array element {}",
                elem_to_string(path.last().map(String::as_str).unwrap_or(""), &elem)
            )));
        };
        let log_start = self.log.len();
        let mut n_modified = 0;
        for (i, item) in items.iter().enumerate() {
            let mut matching: Vec<&Node> = Vec::new();
            for (id, child) in &node.children {
                if id.is_empty() || self.filter_matches(id, item)? {
                    matching.push(child);
                }
            }
            if matching.is_empty() {
                continue;
            }
            path.push(i.to_string());
            let mut merged: Cow<Node> = Cow::Borrowed(matching[0]);
            let mut result = Ok(());
            for next in &matching[1..] {
                match merge(&merged, next, path) {
                    Ok(m) => merged = Cow::Owned(m),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let before = self.changes;
            if result.is_ok() {
                result = self.apply_node(&merged, path);
            }
            path.pop();
            result?;
            if self.changes > before {
                n_modified += 1;
            }
        }
        if n_modified > 1 {
            // Several elements changed: report the whole array, as mongod logs it.
            self.log.truncate(log_start);
            self.log.push(LogEntry::Updated(path.clone()));
        }
        Ok(())
    }

    fn apply_leaf(&mut self, op: &Op, path: &[String]) -> Result<()> {
        match op {
            Op::Placeholder => return Ok(()),
            Op::SetOnInsert(_) if !self.ctx.is_insert => return Ok(()),
            Op::Rename { from } => return self.apply_rename(from, path),
            _ => {}
        }
        let k = resolve(&self.doc, path);
        if k == path.len() {
            if let Op::Unset = op {
                return self.remove_at(path);
            }
            let cur = get_at(&self.doc, path).cloned().unwrap_or(Bson::Null);
            if let Some(v) = self.modify_existing(op, &cur, path)? {
                self.replace_at(path, v)?;
            }
            Ok(())
        } else {
            match self.create_value(op) {
                Some(v) => self.create_at(path, k, v),
                None => Ok(()),
            }
        }
    }

    fn immutable_error(path: &[String]) -> Error {
        Error::new(
            codes::IMMUTABLE_FIELD,
            format!(
                "Performing an update on the path '{}' would modify the immutable field '_id'",
                path.join(".")
            ),
        )
    }

    /// Replaces the existing value at `path`.
    fn replace_at(&mut self, path: &[String], v: Bson) -> Result<()> {
        if !self.ctx.is_insert {
            if path[0] == "_id" {
                return Err(Self::immutable_error(path));
            }
            if path.len() == 1 && path[0].starts_with('$') {
                return Err(super::util::dollar_prefixed_error(&path[0], &path[0]));
            }
        }
        if let Some(slot) = get_mut_at(&mut self.doc, path) {
            *slot = v;
        }
        self.log.push(LogEntry::Updated(path.to_vec()));
        self.changes += 1;
        Ok(())
    }

    /// Removes the existing value at `path` (array elements become null, as `$unset` does).
    fn remove_at(&mut self, path: &[String]) -> Result<()> {
        if !self.ctx.is_insert && path[0] == "_id" {
            return Err(Self::immutable_error(path));
        }
        let (last, parent_path) = path.split_last().expect("non-empty path");
        if parent_path.is_empty() {
            self.doc.remove(last);
            self.log.push(LogEntry::Removed(path.to_vec()));
        } else {
            match get_mut_at(&mut self.doc, parent_path) {
                Some(Bson::Array(a)) => {
                    if let Some(slot) = parse_index(last).and_then(|i| a.get_mut(i)) {
                        *slot = Bson::Null;
                    }
                    self.log.push(LogEntry::Updated(path.to_vec()));
                }
                Some(Bson::Document(d)) => {
                    d.remove(last);
                    self.log.push(LogEntry::Removed(path.to_vec()));
                }
                _ => return Ok(()),
            }
        }
        self.changes += 1;
        Ok(())
    }

    /// Creates `path[k..]` below the existing element `path[..k]`, ending in `value`.
    fn create_at(&mut self, path: &[String], k: usize, value: Bson) -> Result<()> {
        let rest = &path[k..];
        let mut built = value;
        for p in rest[1..].iter().rev() {
            let mut d = Document::new();
            d.insert(p.clone(), built);
            built = Bson::Document(d);
        }
        let is_insert = self.ctx.is_insert;
        if k == 0 {
            if !is_insert && rest[0].starts_with('$') {
                return Err(super::util::dollar_prefixed_error(&rest[0], &rest[0]));
            }
            self.doc.insert(rest[0].clone(), built);
            self.log.push(LogEntry::Updated(path[..1].to_vec()));
        } else {
            let parent_name = &path[k - 1];
            let not_viable = |parent: &Bson| {
                Error::new(
                    codes::PATH_NOT_VIABLE,
                    format!(
                        "Cannot create field '{}' in element {{{}}}",
                        rest[0],
                        elem_to_string(parent_name, parent)
                    ),
                )
            };
            let parent = get_mut_at(&mut self.doc, &path[..k]).expect("existing prefix");
            match parent {
                Bson::Document(d) => {
                    d.insert(rest[0].clone(), built);
                    self.log.push(LogEntry::Updated(path[..k + 1].to_vec()));
                }
                Bson::Array(a) => match parse_index(&rest[0]) {
                    Some(idx) => {
                        if idx - a.len() > MAX_PADDING {
                            return Err(Error::new(
                                codes::PATH_NOT_VIABLE,
                                format!("can't backfill more than {MAX_PADDING} elements"),
                            ));
                        }
                        while a.len() < idx {
                            a.push(Bson::Null);
                        }
                        a.push(built);
                        self.log.push(LogEntry::Updated(path[..k].to_vec()));
                    }
                    None => return Err(not_viable(parent)),
                },
                other => return Err(not_viable(other)),
            }
            if !is_insert && path[0] == "_id" {
                let taken = path[..k].join(".");
                let elem = get_at(&self.doc, &path[..k]).cloned().unwrap_or(Bson::Null);
                return Err(Error::new(
                    codes::IMMUTABLE_FIELD,
                    format!(
                        "Updating the path '{taken}' to {} would modify the immutable field '_id'",
                        elem_to_string(parent_name, &elem)
                    ),
                ));
            }
        }
        self.changes += 1;
        Ok(())
    }

    fn now_value(&self, timestamp: bool) -> Bson {
        if timestamp {
            let secs = self.ctx.now.timestamp_millis().div_euclid(1000);
            Bson::Timestamp(bson::Timestamp {
                time: secs.clamp(0, u32::MAX as i64) as u32,
                increment: 1,
            })
        } else {
            Bson::DateTime(self.ctx.now)
        }
    }

    /// The value a creating operator stores at a missing path (None: the operator does not create).
    fn create_value(&self, op: &Op) -> Option<Bson> {
        Some(match op {
            Op::Set(v) | Op::SetOnInsert(v) | Op::Inc(v) | Op::Min(v) | Op::Max(v) => v.clone(),
            Op::Mul(v) => zero_like(v),
            Op::CurrentDate { timestamp } => self.now_value(*timestamp),
            Op::Push(spec) => Bson::Array(push_values(Vec::new(), spec, self.ctx.collator)),
            Op::AddToSet(vals) => {
                let mut out: Vec<Bson> = Vec::new();
                for v in vals {
                    if !out.iter().any(|e| bson_eq_with(e, v, self.ctx.collator)) {
                        out.push(v.clone());
                    }
                }
                Bson::Array(out)
            }
            Op::Bit(ops) => bit_apply(&Bson::Int32(0), ops),
            Op::Unset
            | Op::Pull(_)
            | Op::PullAll(_)
            | Op::Pop { .. }
            | Op::Placeholder
            | Op::Rename { .. } => return None,
        })
    }

    /// The new value for an existing element, or None for a no-op.
    fn modify_existing(&self, op: &Op, cur: &Bson, path: &[String]) -> Result<Option<Bson>> {
        let field = path.last().map(String::as_str).unwrap_or("");
        let changed = |v: Bson| if identical(&v, cur) { None } else { Some(v) };
        Ok(match op {
            Op::Set(v) | Op::SetOnInsert(v) => changed(v.clone()),
            Op::Inc(v) | Op::Mul(v) => {
                let (name, kind) = if matches!(op, Op::Inc(_)) {
                    ("$inc", Arith::Add)
                } else {
                    ("$mul", Arith::Mul)
                };
                if !is_number(cur) {
                    return Err(Error::type_mismatch(format!(
                        "Cannot apply {name} to a value of non-numeric type. {{{}}} has the field '{field}' of non-numeric type {}",
                        self.original_id,
                        type_name(cur)
                    )));
                }
                let r = arith(v, cur, kind).ok_or_else(|| {
                    Error::bad_value(format!(
                        "Failed to apply {name} operations to current value ({}) for document {{{}}}",
                        safe_num_debug(cur),
                        self.original_id
                    ))
                })?;
                changed(r)
            }
            Op::Min(v) => {
                (cmp_bson_with(v, cur, self.ctx.collator) == Ordering::Less).then(|| v.clone())
            }
            Op::Max(v) => {
                (cmp_bson_with(v, cur, self.ctx.collator) == Ordering::Greater).then(|| v.clone())
            }
            Op::CurrentDate { timestamp } => changed(self.now_value(*timestamp)),
            Op::Push(spec) => {
                let Bson::Array(arr) = cur else {
                    return Err(Error::bad_value(format!(
                        "The field '{field}' must be an array but is of type {} in document {{{}}}",
                        type_name(cur),
                        self.original_id
                    )));
                };
                changed(Bson::Array(push_values(
                    arr.clone(),
                    spec,
                    self.ctx.collator,
                )))
            }
            Op::AddToSet(vals) => {
                let Bson::Array(arr) = cur else {
                    return Err(Error::bad_value(format!(
                        "Cannot apply $addToSet to non-array field. Field named '{field}' has non-array type {}",
                        type_name(cur)
                    )));
                };
                let mut out = arr.clone();
                for v in vals {
                    if !out.iter().any(|e| bson_eq_with(e, v, self.ctx.collator)) {
                        out.push(v.clone());
                    }
                }
                changed(Bson::Array(out))
            }
            Op::Pull(cond) => {
                let Bson::Array(arr) = cur else {
                    return Err(Error::bad_value("Cannot apply $pull to a non-array value"));
                };
                let mut out = Vec::with_capacity(arr.len());
                for e in arr {
                    let remove = match cond {
                        PullCond::Equal(v) => bson_eq_with(e, v, self.ctx.collator),
                        PullCond::Query(q) => {
                            matches!(e, Bson::Document(_))
                                && self.ctx.matcher.matches_value(q, e)?
                        }
                        PullCond::Wrapped(c) => self.ctx.matcher.matches_value(c, e)?,
                    };
                    if !remove {
                        out.push(e.clone());
                    }
                }
                (out.len() != arr.len()).then_some(Bson::Array(out))
            }
            Op::PullAll(vals) => {
                let Bson::Array(arr) = cur else {
                    return Err(Error::bad_value("Cannot apply $pull to a non-array value"));
                };
                let out: Vec<Bson> = arr
                    .iter()
                    .filter(|e| !vals.iter().any(|v| bson_eq_with(e, v, self.ctx.collator)))
                    .cloned()
                    .collect();
                (out.len() != arr.len()).then_some(Bson::Array(out))
            }
            Op::Pop { first } => {
                let Bson::Array(arr) = cur else {
                    return Err(Error::type_mismatch(format!(
                        "Path '{}' contains an element of non-array type '{}'",
                        path.join("."),
                        type_name(cur)
                    )));
                };
                if arr.is_empty() {
                    None
                } else {
                    let mut out = arr.clone();
                    if *first {
                        out.remove(0);
                    } else {
                        out.pop();
                    }
                    Some(Bson::Array(out))
                }
            }
            Op::Bit(ops) => {
                if !matches!(cur, Bson::Int32(_) | Bson::Int64(_)) {
                    return Err(Error::bad_value(format!(
                        "Cannot apply $bit to a value of non-integral type.{} has the field {field} of non-integer type {}",
                        self.original_id,
                        type_name(cur)
                    )));
                }
                changed(bit_apply(cur, ops))
            }
            Op::Unset | Op::Placeholder | Op::Rename { .. } => None,
        })
    }

    fn apply_rename(&mut self, from: &[String], to: &[String]) -> Result<()> {
        if resolve(&self.doc, from) < from.len() {
            return Ok(());
        }
        for i in 1..from.len() {
            if let Some(Bson::Array(_)) = get_at(&self.doc, &from[..i]) {
                return Err(Error::bad_value(format!(
                    "The source field cannot be an array element, '{}' in doc with {} has an array field called '{}'",
                    from.join("."),
                    self.original_id,
                    from[i - 1]
                )));
            }
        }
        let kt = resolve(&self.doc, to);
        for i in 1..=kt.min(to.len() - 1) {
            if let Some(Bson::Array(_)) = get_at(&self.doc, &to[..i]) {
                return Err(Error::bad_value(format!(
                    "The destination field cannot be an array element, '{}' in doc with {} has an array field called '{}'",
                    to.join("."),
                    self.original_id,
                    to[i - 1]
                )));
            }
        }
        if !self.ctx.is_insert && from[0] == "_id" {
            return Err(Self::immutable_error(from));
        }
        let value = get_at(&self.doc, from).cloned().unwrap_or(Bson::Null);
        if kt == to.len() {
            let same = get_at(&self.doc, to).is_some_and(|cur| identical(cur, &value));
            if !same {
                self.replace_at(to, value)?;
            }
        } else {
            self.create_at(to, kt, value)?;
        }
        self.remove_at(from)
    }
}

/// `$push` with its modifiers: insert at `$position`, then `$sort`, then `$slice`.
fn push_values(mut arr: Vec<Bson>, spec: &PushSpec, coll: Option<&Collator>) -> Vec<Bson> {
    let len = arr.len();
    let pos = match spec.position {
        None => len,
        Some(p) if p >= 0 => (p as u64).min(len as u64) as usize,
        Some(p) => (len as i64 + p).max(0) as usize,
    };
    arr.splice(pos..pos, spec.each.iter().cloned());
    if let Some(sort) = &spec.sort {
        match sort {
            SortSpec::Whole(asc) => arr.sort_by(|a, b| {
                let o = cmp_bson_with(a, b, coll);
                if *asc {
                    o
                } else {
                    o.reverse()
                }
            }),
            SortSpec::Fields(fields) => arr.sort_by(|a, b| {
                for (f, asc) in fields {
                    let va = sort_field(a, f);
                    let vb = sort_field(b, f);
                    let o = cmp_bson_with(&va, &vb, coll);
                    let o = if *asc { o } else { o.reverse() };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            }),
        }
    }
    if let Some(slice) = spec.slice {
        if slice >= 0 {
            arr.truncate(slice.min(arr.len() as i64) as usize);
        } else {
            let keep = (slice.unsigned_abs() as usize).min(arr.len());
            let drop = arr.len() - keep;
            arr.drain(..drop);
        }
    }
    arr
}

fn sort_field(v: &Bson, field: &str) -> Bson {
    match v {
        Bson::Document(d) => get_path(d, field).cloned().unwrap_or(Bson::Null),
        _ => Bson::Null,
    }
}

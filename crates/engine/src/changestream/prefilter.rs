//! Deciding a change stream's leading `$match` on an entry's `oplog_by_ns` digest
//! (see `oplog::ns_digest`), without reading the entry: the conditions the filter
//! cannot do without (an operationType, a top-level `fullDocument` field that must
//! exist) are checked against the kind of change and, for large documents, their
//! field names. Anything the analysis does not understand is no condition at all, so
//! the prefilter only ever skips entries the full filter would drop too.
//!
//! This is what makes resuming behind gigabytes of unrelated large documents cheap
//! (seed 000): `{$match: {"fullDocument.msg": {$exists: true}}}` skips every 6 MB
//! document whose fields are known from its digest.

use super::FullDocument;
use bson::{Bson, Document};

#[derive(Debug, Default, Clone)]
pub struct Prefilter {
    /// The event must have one of these operationTypes (None: any).
    ops: Option<Vec<String>>,
    /// Top-level fields `fullDocument` must have.
    full_document_fields: Vec<String>,
}

impl Prefilter {
    /// From the stages after `$changeStream` (only a leading `$match` is used).
    pub fn from_stages(stages: &[Document]) -> Prefilter {
        let mut p = Prefilter::default();
        if let Some(Ok(filter)) = stages.first().map(|s| s.get_document("$match")) {
            p.add(filter);
        }
        p
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_none() && self.full_document_fields.is_empty()
    }

    fn add(&mut self, filter: &Document) {
        for (k, v) in filter {
            match k.as_str() {
                "$and" => {
                    if let Bson::Array(items) = v {
                        for item in items {
                            if let Bson::Document(d) = item {
                                self.add(d);
                            }
                        }
                    }
                }
                "operationType" => {
                    if let Some(allowed) = string_set(v) {
                        self.ops = Some(match self.ops.take() {
                            None => allowed,
                            Some(prev) => {
                                prev.into_iter().filter(|o| allowed.contains(o)).collect()
                            }
                        });
                    }
                }
                path => {
                    if let Some(rest) = path.strip_prefix("fullDocument.") {
                        let field = rest.split('.').next().unwrap_or("");
                        if !field.is_empty() && requires_existence(v) {
                            self.full_document_fields.push(field.to_string());
                        }
                    }
                }
            }
        }
    }

    /// False only when the entry with this digest cannot produce an event the filter
    /// keeps.
    pub fn may_match(&self, digest: &[u8], full_document: FullDocument) -> bool {
        let Some(&kind) = digest.first() else {
            return true;
        };
        let op = match kind {
            b'i' => "insert",
            b'u' => "update",
            b'r' => "replace",
            b'd' => "delete",
            // DDL entries become several kinds of event (and invalidates): always read.
            _ => return true,
        };
        if let Some(ops) = &self.ops {
            if !ops.iter().any(|o| o == op) {
                return false;
            }
        }
        if self.full_document_fields.is_empty() {
            return true;
        }
        match op {
            "delete" => false,
            "update" => full_document != FullDocument::Default,
            _ => match crate::oplog::Digest::parse(digest).field_names {
                Some(field_names) => {
                    let names: Vec<&[u8]> = field_names.split(|b| *b == 0).collect();
                    self.full_document_fields
                        .iter()
                        .all(|f| names.contains(&f.as_bytes()))
                }
                _ => true,
            },
        }
    }
}

/// The strings an `operationType` condition allows (`"insert"`, `{$eq: ..}`, `{$in: [..]}`).
fn string_set(v: &Bson) -> Option<Vec<String>> {
    match v {
        Bson::String(s) => Some(vec![s.clone()]),
        Bson::Document(d) if d.len() == 1 => match d.iter().next() {
            Some((op, Bson::String(s))) if op == "$eq" => Some(vec![s.clone()]),
            Some((op, Bson::Array(a))) if op == "$in" => a
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a field condition can only hold when the field exists.
fn requires_existence(v: &Bson) -> bool {
    match v {
        Bson::Null | Bson::Undefined => false,
        Bson::Document(d) if d.keys().any(|k| k.starts_with('$')) => {
            d.iter().any(|(op, arg)| match op.as_str() {
                "$exists" => {
                    matches!(arg, Bson::Boolean(true))
                        || matches!(arg, Bson::Int32(1) | Bson::Int64(1))
                }
                "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => !matches!(
                    arg,
                    Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey
                ),
                "$regex" | "$size" | "$all" | "$elemMatch" => true,
                _ => false,
            })
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn digest(kind: u8, names: Option<&[&str]>) -> Vec<u8> {
        let mut v = vec![kind];
        if let Some(names) = names {
            v.push(1);
            for n in names {
                v.extend_from_slice(n.as_bytes());
                v.push(0);
            }
        }
        v
    }

    #[test]
    fn field_existence_on_large_documents() {
        let p = Prefilter::from_stages(&[doc! {"$match": {"fullDocument.msg": {"$exists": true}}}]);
        assert!(!p.may_match(
            &digest(b'i', Some(&["_id", "i", "s"])),
            FullDocument::Default
        ));
        assert!(p.may_match(&digest(b'i', Some(&["_id", "msg"])), FullDocument::Default));
        // Small documents list no names: read them.
        assert!(p.may_match(&digest(b'i', None), FullDocument::Default));
        assert!(!p.may_match(&digest(b'd', None), FullDocument::Default));
        assert!(!p.may_match(&digest(b'u', None), FullDocument::Default));
        assert!(p.may_match(&digest(b'u', None), FullDocument::UpdateLookup));
        assert!(p.may_match(&digest(b'c', None), FullDocument::Default));
        assert!(p.may_match(&[], FullDocument::Default));
    }

    #[test]
    fn operation_types() {
        let p = Prefilter::from_stages(&[
            doc! {"$match": {"$and": [{"operationType": {"$in": ["insert", "delete"]}}]}},
        ]);
        assert!(p.may_match(b"i", FullDocument::Default));
        assert!(p.may_match(b"d", FullDocument::Default));
        assert!(!p.may_match(b"u", FullDocument::Default));
        assert!(!p.may_match(b"r", FullDocument::Default));
    }

    #[test]
    fn operation_type_conditions_intersect() {
        let p = Prefilter::from_stages(&[doc! {"$match": {"$and": [
            {"operationType": {"$in": ["insert", "update"]}},
            {"operationType": {"$eq": "update"}},
        ]}}]);
        assert!(p.may_match(b"u", FullDocument::Default));
        assert!(!p.may_match(b"i", FullDocument::Default));
        // Nothing left: no CRUD entry can match, a command's entry is still read.
        let none = Prefilter::from_stages(&[doc! {"$match": {"$and": [
            {"operationType": "insert"},
            {"operationType": "delete"},
        ]}}]);
        for kind in [b"i", b"u", b"r", b"d"] {
            assert!(!none.may_match(kind, FullDocument::Default));
        }
        assert!(none.may_match(b"c", FullDocument::Default));
        // Non-string members are no condition at all.
        let mixed =
            Prefilter::from_stages(&[doc! {"$match": {"operationType": {"$in": ["insert", 1]}}}]);
        assert!(mixed.is_empty());
    }

    /// Only the first stage's `$match` is read: a later one may see fields an earlier
    /// stage changed.
    #[test]
    fn only_a_leading_match_counts() {
        let later = Prefilter::from_stages(&[
            doc! {"$set": {"operationType": "insert"}},
            doc! {"$match": {"operationType": "delete"}},
        ]);
        assert!(later.is_empty());
        assert!(later.may_match(b"i", FullDocument::Default));
    }

    #[test]
    fn every_required_field_must_be_listed() {
        let p = Prefilter::from_stages(&[doc! {"$match": {
            "fullDocument.a.b": {"$gt": 5},
            "fullDocument.c": {"$exists": 1},
            "fullDocument.d": {"$gt": null},
        }}]);
        // a (from a.b) and c are required; `$gt: null` does not require d.
        assert!(p.may_match(
            &digest(b'i', Some(&["_id", "a", "c"])),
            FullDocument::Default
        ));
        assert!(p.may_match(&digest(b'r', Some(&["c", "a"])), FullDocument::Default));
        assert!(!p.may_match(&digest(b'i', Some(&["_id", "a"])), FullDocument::Default));
        assert!(!p.may_match(
            &digest(b'r', Some(&["_id", "c", "d"])),
            FullDocument::Default
        ));
        // A name that only starts like a required one is another field.
        assert!(!p.may_match(&digest(b'i', Some(&["ab", "c"])), FullDocument::Default));
    }

    /// The promise that makes the prefilter safe, checked against the real filter on
    /// real events: an entry it rules out never gives an event the `$match` keeps.
    #[test]
    fn it_never_rules_out_an_event_the_filter_keeps() {
        use crate::catalog::namespace::Namespace;
        use crate::core::keys;
        use crate::core::time::ClusterTime;
        use crate::write::{DeleteOp, UpdateOp};
        use tailstream_query::pipeline::{NoCollections, Pipeline};
        use tailstream_storage::Space;

        let e = crate::core::testing::TestEngine::open();
        let ns = Namespace::new("db", "c");
        // Large documents list their field names in the digest; small ones do not.
        let big = "x".repeat(crate::oplog::DIGEST_FIELDS_MIN_BYTES);
        let docs = vec![
            doc! {"_id": 1, "msg": {"x": 1}, "big": &big},
            doc! {"_id": 2, "other": 1, "big": &big},
            doc! {"_id": 3, "msg": "hi"},
        ];
        e.insert_documents(&ns, docs, true).unwrap();
        let update = |q: bson::Document, u: bson::Document| UpdateOp {
            q,
            u: Bson::Document(u),
            ..Default::default()
        };
        e.update(
            &ns,
            vec![
                update(doc! {"_id": 1}, doc! {"$set": {"msg.x": 2}}),
                update(doc! {"_id": 2}, doc! {"_id": 2, "msg": 5, "big": &big}),
                update(doc! {"_id": 3}, doc! {"_id": 3, "other": true, "big": &big}),
            ],
            true,
        )
        .unwrap();
        e.delete(
            &ns,
            vec![DeleteOp {
                q: doc! {"_id": 3},
                limit: 1,
                ..Default::default()
            }],
            true,
        )
        .unwrap();
        let filters = [
            doc! {"fullDocument.msg": {"$exists": true}},
            doc! {"fullDocument.msg.x": {"$gte": 1}},
            doc! {"fullDocument.msg": "hi"},
            doc! {"fullDocument.other": {"$exists": 1}, "operationType": "replace"},
            doc! {"operationType": "insert"},
            doc! {"operationType": {"$in": ["update", "delete"]}},
            doc! {"$and": [{"operationType": "replace"}, {"fullDocument.big": {"$regex": "^x"}}]},
        ];
        let lower = keys::oplog_ns_key("db.c", ClusterTime::ZERO);
        let upper = keys::oplog_ns_key("db.c", ClusterTime::MAX);
        let entries: Vec<(ClusterTime, Vec<u8>)> = e
            .store
            .scan(Space::OplogByNs, &lower, Some(&upper), false)
            .map(|item| {
                let (k, digest) = item.unwrap();
                let ts = ClusterTime::from_be_bytes(k[k.len() - 8..].try_into().unwrap());
                (ts, digest.to_vec())
            })
            .collect();
        assert_eq!(entries.len(), 8, "create, 3 inserts, 3 updates, a delete");
        let mut ruled_out = 0;
        for full_document in ["default", "updateLookup"] {
            let spec = super::super::parse_spec(
                "db",
                Some("c"),
                &doc! {"fullDocument": full_document},
                &[],
            )
            .unwrap()
            .0;
            for filter in &filters {
                let stages = [doc! {"$match": filter.clone()}];
                let prefilter = Prefilter::from_stages(&stages);
                let pipeline = Pipeline::parse(&stages, "db").unwrap();
                for (ts, digest) in &entries {
                    if prefilter.may_match(digest, spec.full_document) {
                        continue;
                    }
                    ruled_out += 1;
                    let bytes = e
                        .store
                        .get(Space::Oplog, &keys::oplog_key(*ts))
                        .unwrap()
                        .unwrap();
                    let entry = bson::RawDocument::from_bytes(&bytes).unwrap();
                    for ev in super::super::event::transform_all(&e, &spec, *ts, entry).unwrap() {
                        let ev = ev.doc.to_document().unwrap();
                        let vars = tailstream_query::expr::Variables::default();
                        let kept = pipeline
                            .run(
                                Box::new(std::iter::once(Ok(ev.clone()))),
                                &NoCollections,
                                &vars,
                            )
                            .unwrap()
                            .len();
                        assert_eq!(
                            kept,
                            0,
                            "{filter} keeps the {} of {} ({full_document}), which was ruled out",
                            ev.get_str("operationType").unwrap(),
                            ev.get_document("documentKey").unwrap()
                        );
                    }
                }
            }
        }
        assert!(
            ruled_out > 20,
            "the prefilter ruled out only {ruled_out} entries"
        );
    }

    #[test]
    fn conditions_it_does_not_understand_skip_nothing() {
        for m in [
            doc! {"$or": [{"operationType": "insert"}, {"operationType": "delete"}]},
            doc! {"fullDocument.msg": null},
            doc! {"fullDocument.msg": {"$exists": false}},
            doc! {"fullDocument.msg": {"$ne": 1}},
            doc! {"operationType": {"$ne": "insert"}},
        ] {
            let p = Prefilter::from_stages(&[doc! {"$match": m.clone()}]);
            assert!(
                p.may_match(&digest(b'i', Some(&["_id"])), FullDocument::Default),
                "{m}"
            );
            assert!(p.may_match(b"d", FullDocument::Default), "{m}");
        }
        assert!(Prefilter::from_stages(&[doc! {"$project": {"a": 1}}]).is_empty());
    }
}

//! Oplog entries in MongoDB's format (`local.oplog.rs`: `ts t v op ns ui o o2 wall`),
//! the v2 update diffs they carry, and the size accounting that trims the oplog.

use bson::{doc, Bson, Document};

/// The namespace under which the oplog is readable with `find`.
pub const OPLOG_DB: &str = "local";
pub const OPLOG_COLL: &str = "oplog.rs";

/// One change, before it gets its time.
#[derive(Debug, Clone)]
pub struct OplogChange {
    /// "i", "u", "d", "c" or "n".
    pub op: &'static str,
    pub ns: String,
    pub ui: Option<bson::Uuid>,
    pub o: Document,
    pub o2: Option<Document>,
}

impl OplogChange {
    /// The stored entry, with mongod's field order.
    pub fn to_entry(&self, ts: bson::Timestamp, wall: bson::DateTime) -> Document {
        let mut d = Document::new();
        d.insert("op", self.op);
        d.insert("ns", self.ns.clone());
        if let Some(ui) = self.ui {
            d.insert("ui", bson::Binary::from_uuid(ui));
        }
        d.insert("o", self.o.clone());
        if let Some(o2) = &self.o2 {
            d.insert("o2", o2.clone());
        }
        d.insert("ts", ts);
        d.insert("t", 1i64);
        d.insert("v", 2i64);
        d.insert("wall", wall);
        d
    }

    pub fn insert(ns: String, ui: bson::Uuid, document: Document, id: Bson) -> OplogChange {
        OplogChange { op: "i", ns, ui: Some(ui), o: document, o2: Some(doc! {"_id": id}) }
    }

    pub fn delete(ns: String, ui: bson::Uuid, id: Bson) -> OplogChange {
        OplogChange { op: "d", ns, ui: Some(ui), o: doc! {"_id": id}, o2: None }
    }

    /// An update as a `$v: 2` diff, or a whole replacement document.
    pub fn update(ns: String, ui: bson::Uuid, id: Bson, o: Document) -> OplogChange {
        OplogChange { op: "u", ns, ui: Some(ui), o, o2: Some(doc! {"_id": id}) }
    }

    /// A DDL command entry on `<db>.$cmd`.
    pub fn command(db: &str, ui: Option<bson::Uuid>, o: Document) -> OplogChange {
        OplogChange { op: "c", ns: format!("{db}.$cmd"), ui, o, o2: None }
    }
}

/// Builds the `$v: 2` diff mongod writes for an update, from the dotted paths an
/// update set and removed and the document after the update. Paths that run
/// through arrays are recorded as a replacement of the whole top-level array
/// ("u" of the array field), which is valid diff syntax and replays exactly.
pub fn update_diff(post: &Document, updated: &Document, removed: &[String]) -> Document {
    let mut root = Node::default();
    for (path, value) in updated {
        root.set(post, &path.split('.').collect::<Vec<_>>(), Some(value.clone()));
    }
    for path in removed {
        root.set(post, &path.split('.').collect::<Vec<_>>(), None);
    }
    doc! {"$v": 2, "diff": root.to_document()}
}

#[derive(Default)]
struct Node {
    updated: Document,
    deleted: Document,
    children: Vec<(String, Node)>,
}

impl Node {
    /// Records `parts` (relative to `here`, the post-image at this level) as updated
    /// to `value`, or deleted when `value` is None.
    fn set(&mut self, here: &Document, parts: &[&str], value: Option<Bson>) {
        let field = parts[0];
        if parts.len() == 1 {
            match value {
                Some(v) => {
                    self.deleted.remove(field);
                    self.updated.insert(field, v);
                }
                None => {
                    self.updated.remove(field);
                    self.deleted.insert(field, false);
                }
            }
            return;
        }
        match here.get(field) {
            Some(Bson::Document(sub)) if !self.updated.contains_key(field) => {
                let idx = match self.children.iter().position(|(n, _)| n == field) {
                    Some(i) => i,
                    None => {
                        self.children.push((field.to_string(), Node::default()));
                        self.children.len() - 1
                    }
                };
                self.children[idx].1.set(sub, &parts[1..], value);
            }
            Some(whole) => {
                // Through an array (or a field already replaced whole): replace the field.
                self.children.retain(|(n, _)| n != field);
                self.updated.insert(field, whole.clone());
            }
            None => {
                // The parent is gone after the update (e.g. removed): nothing to record below it.
            }
        }
    }

    fn to_document(&self) -> Document {
        let mut d = Document::new();
        if !self.deleted.is_empty() {
            d.insert("d", self.deleted.clone());
        }
        if !self.updated.is_empty() {
            d.insert("u", self.updated.clone());
        }
        for (name, child) in &self.children {
            d.insert(format!("s{name}"), child.to_document());
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_nests_documents_and_replaces_arrays_whole() {
        let post = doc! {"_id": 1, "a": {"b": 2, "c": {"d": 3}}, "arr": [1, {"x": 5}], "z": 1};
        let updated = doc! {"a.b": 2, "a.c.d": 3, "arr.1.x": 5, "z": 1};
        let d = update_diff(&post, &updated, &["a.gone".to_string(), "top".to_string()]);
        assert_eq!(
            d,
            doc! {"$v": 2, "diff": {
                "d": {"top": false},
                "u": {"arr": [1, {"x": 5}], "z": 1},
                "sa": {"d": {"gone": false}, "u": {"b": 2}, "sc": {"u": {"d": 3}}},
            }}
        );
    }

    #[test]
    fn entry_has_mongod_field_order() {
        let c = OplogChange::delete("db.c".into(), bson::Uuid::new(), Bson::Int32(1));
        let e = c.to_entry(bson::Timestamp { time: 1, increment: 2 }, bson::DateTime::from_millis(5));
        let keys: Vec<&str> = e.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, vec!["op", "ns", "ui", "o", "ts", "t", "v", "wall"]);
    }
}

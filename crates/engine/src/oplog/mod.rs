//! Oplog entries in MongoDB's format (`local.oplog.rs`: `ts t v op ns ui o o2 wall`),
//! the v2 update diffs they carry, and the size accounting that trims the oplog.

pub mod pipeline;
pub mod recent;
pub mod trim;
pub mod txn;

use bson::{doc, Bson, Document};

/// The namespace under which the oplog is readable with `find`.
pub const OPLOG_DB: &str = "local";
pub const OPLOG_COLL: &str = "oplog.rs";

/// The fields of a stored oplog entry that readers use, found in one walk over it.
/// (Each `RawDocument::get` walks the entry from its first field, and a missing field
/// walks all of it: reading these one by one cost a change stream several walks per
/// event.) A field of another type than expected counts as missing.
#[derive(Debug, Default, Clone, Copy)]
pub struct EntryFields<'a> {
    pub op: Option<&'a str>,
    pub ns: Option<&'a str>,
    pub ui: Option<bson::RawBinaryRef<'a>>,
    pub o: Option<&'a bson::RawDocument>,
    pub o2: Option<&'a bson::RawDocument>,
    pub wall: Option<bson::RawBsonRef<'a>>,
    pub lsid: Option<&'a bson::RawDocument>,
    pub txn_number: Option<i64>,
}

impl<'a> EntryFields<'a> {
    /// Reads the fields; fails on an entry whose BSON is malformed. Of a repeated
    /// field, the first counts (as `RawDocument::get` finds it).
    pub fn read(entry: &'a bson::RawDocument) -> Result<Self, bson::raw::Error> {
        match Self::read_fast(entry.as_bytes()) {
            Some(f) => Ok(f),
            None => Self::read_general(entry),
        }
    }

    /// The same walk over the bytes, for the entries Tailstream writes: a change
    /// stream catching up spent 13% of the server's CPU in the `bson` crate's element
    /// iterator (UTF-8 checks of every key, a value built for every element, errors
    /// wrapped with the key), which this skips for the fields nobody asks for. None
    /// when it meets anything it does not size or read exactly as the general walk
    /// would (an unusual type, an old-style binary, a malformed length): the general
    /// walk then decides, errors included.
    fn read_fast(b: &'a [u8]) -> Option<Self> {
        use bson::RawBsonRef as R;
        let mut f = EntryFields::default();
        let mut seen = 0u8;
        // The document's own length, then elements up to the final NUL.
        let declared = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        if usize::try_from(declared).ok()? != b.len() || b.last() != Some(&0) {
            return None;
        }
        let end = b.len() - 1;
        let length_at = |at: usize| -> Option<usize> {
            let v = i32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?);
            usize::try_from(v).ok()
        };
        let mut i = 4;
        while i < end {
            let element_type = b[i];
            i += 1;
            let key_len = b[i..end].iter().position(|&c| c == 0)?;
            let key = &b[i..i + key_len];
            // Keys are ASCII here; any other is checked by the general walk.
            if !key.is_ascii() {
                return None;
            }
            i += key_len + 1;
            let size = match element_type {
                // double, datetime, timestamp, int64
                0x01 | 0x09 | 0x11 | 0x12 => 8,
                // string, code, symbol: length, bytes and NUL
                0x02 | 0x0D | 0x0E => 4usize.checked_add(length_at(i)?)?,
                // document, array, code with scope: their length includes itself
                0x03 | 0x04 | 0x0F => length_at(i)?,
                // binary: length, subtype, bytes
                0x05 => 5usize.checked_add(length_at(i)?)?,
                // undefined, null, min key, max key
                0x06 | 0x0A | 0x7F | 0xFF => 0,
                0x07 => 12,
                0x08 => 1,
                0x10 => 4,
                0x13 => 16,
                _ => return None,
            };
            let value_end = i.checked_add(size)?;
            if value_end > end {
                return None;
            }
            let value = &b[i..value_end];
            i = value_end;
            // What the general walk checks of every value it passes, skipped or not.
            let well_formed = match element_type {
                0x02 | 0x0D | 0x0E => {
                    value.len() > 4
                        && value[value.len() - 1] == 0
                        && std::str::from_utf8(&value[4..value.len() - 1]).is_ok()
                }
                0x03 | 0x04 => value.len() >= 5 && value[value.len() - 1] == 0,
                // Code with scope and the old binary subtype nest lengths of their own.
                0x0F => false,
                0x05 => value[4] != 0x02,
                0x08 => value[0] <= 1,
                _ => true,
            };
            if !well_formed {
                return None;
            }
            let bit = match key {
                b"op" => 1,
                b"ns" => 2,
                b"ui" => 4,
                b"o" => 8,
                b"o2" => 16,
                b"wall" => 32,
                b"lsid" => 64,
                b"txnNumber" => 128,
                _ => continue,
            };
            if seen & bit != 0 {
                continue;
            }
            seen |= bit;
            // Checked above: a NUL-terminated UTF-8 string after its length.
            let string = || std::str::from_utf8(&value[4..value.len() - 1]).ok();
            let document = || bson::RawDocument::from_bytes(value).ok();
            match (bit, element_type) {
                (1, 0x02) => f.op = Some(string()?),
                (2, 0x02) => f.ns = Some(string()?),
                (4, 0x05) => {
                    f.ui = Some(bson::RawBinaryRef {
                        subtype: value[4].into(),
                        bytes: &value[5..],
                    })
                }
                (8, 0x03) => f.o = Some(document()?),
                (16, 0x03) => f.o2 = Some(document()?),
                (32, 0x09) => {
                    f.wall = Some(R::DateTime(bson::DateTime::from_millis(
                        i64::from_le_bytes(value.try_into().ok()?),
                    )))
                }
                // Any other type of wall is reported as it is: the general walk.
                (32, _) => return None,
                (64, 0x03) => f.lsid = Some(document()?),
                (128, 0x12) => f.txn_number = Some(i64::from_le_bytes(value.try_into().ok()?)),
                _ => {}
            }
        }
        (i == end).then_some(f)
    }

    fn read_general(entry: &'a bson::RawDocument) -> Result<Self, bson::raw::Error> {
        use bson::RawBsonRef as R;
        let mut f = EntryFields::default();
        let mut seen = 0u8;
        for element in entry {
            let (key, value) = element?;
            let bit = match key {
                "op" => 1,
                "ns" => 2,
                "ui" => 4,
                "o" => 8,
                "o2" => 16,
                "wall" => 32,
                "lsid" => 64,
                "txnNumber" => 128,
                _ => continue,
            };
            if seen & bit != 0 {
                continue;
            }
            seen |= bit;
            match (key, value) {
                ("op", R::String(s)) => f.op = Some(s),
                ("ns", R::String(s)) => f.ns = Some(s),
                ("ui", R::Binary(b)) => f.ui = Some(b),
                ("o", R::Document(d)) => f.o = Some(d),
                ("o2", R::Document(d)) => f.o2 = Some(d),
                ("wall", v) => f.wall = Some(v),
                ("lsid", R::Document(d)) => f.lsid = Some(d),
                ("txnNumber", R::Int64(n)) => f.txn_number = Some(n),
                _ => {}
            }
        }
        Ok(f)
    }
}

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
    /// The operation as an element of a transaction's `applyOps` (op, ns, ui, o, o2).
    pub fn to_apply_op(&self) -> Document {
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
        d
    }

    /// The stored entry, with mongod's field order.
    pub fn to_entry(&self, ts: bson::Timestamp, wall: bson::DateTime) -> Document {
        let mut d = self.to_apply_op();
        d.insert("ts", ts);
        d.insert("t", 1i64);
        d.insert("v", 2i64);
        d.insert("wall", wall);
        d
    }

    pub fn insert(ns: String, ui: bson::Uuid, document: Document, id: Bson) -> OplogChange {
        OplogChange {
            op: "i",
            ns,
            ui: Some(ui),
            o: document,
            o2: Some(doc! {"_id": id}),
        }
    }

    pub fn delete(ns: String, ui: bson::Uuid, id: Bson) -> OplogChange {
        OplogChange {
            op: "d",
            ns,
            ui: Some(ui),
            o: doc! {"_id": id},
            o2: None,
        }
    }

    /// An update as a `$v: 2` diff, or a whole replacement document.
    pub fn update(ns: String, ui: bson::Uuid, id: Bson, o: Document) -> OplogChange {
        OplogChange {
            op: "u",
            ns,
            ui: Some(ui),
            o,
            o2: Some(doc! {"_id": id}),
        }
    }

    /// A DDL command entry on `<db>.$cmd`.
    pub fn command(db: &str, ui: Option<bson::Uuid>, o: Document) -> OplogChange {
        OplogChange {
            op: "c",
            ns: format!("{db}.$cmd"),
            ui,
            o,
            o2: None,
        }
    }
}

/// The collections a command entry (`op: "c"` on `<db>.$cmd`) is about: its entry is
/// listed under each of them in `oplog_by_ns`, so a change stream on one collection
/// finds the drop, rename, create and index events of that collection there.
pub fn command_targets(db: &str, o: &bson::RawDocument) -> Vec<String> {
    let Some(Ok((name, value))) = o.into_iter().next() else {
        return Vec::new();
    };
    match (name, value) {
        // A transaction: every namespace its operations write (in order, once each).
        ("applyOps", bson::RawBsonRef::Array(ops)) => {
            let mut v: Vec<String> = Vec::new();
            for op in ops.into_iter().flatten() {
                let Some(op) = op.as_document() else { continue };
                let Ok(ns) = op.get_str("ns") else { continue };
                let targets = match (
                    op.get_str("op"),
                    ns.strip_suffix(".$cmd"),
                    op.get_document("o"),
                ) {
                    (Ok("c"), Some(db), Ok(o)) => command_targets(db, o),
                    _ => vec![ns.to_string()],
                };
                for t in targets {
                    if !v.contains(&t) {
                        v.push(t);
                    }
                }
            }
            v
        }
        ("renameCollection", bson::RawBsonRef::String(from)) => {
            let mut v = vec![from.to_string()];
            if let Ok(to) = o.get_str("to") {
                v.push(to.to_string());
            }
            v
        }
        (
            "drop" | "create" | "createIndexes" | "dropIndexes" | "collMod" | "convertToCapped",
            bson::RawBsonRef::String(coll),
        ) => vec![format!("{db}.{coll}")],
        _ => Vec::new(),
    }
}

/// An entry's `op`, `ns` and `o`: what its `oplog_by_ns` keys and digest are made of.
/// A writer that builds the entry knows them; [`EntryHead::of`] reads them back.
#[derive(Clone, Copy)]
pub struct EntryHead<'a> {
    pub op: &'a str,
    pub ns: &'a str,
    pub o: Option<&'a bson::RawDocument>,
    /// An update's `o2` (its document's `_id`); None for other entries.
    pub o2: Option<&'a bson::RawDocument>,
}

impl<'a> EntryHead<'a> {
    /// Reads them in one walk over the entry ([`EntryFields`]; three `RawDocument::get`
    /// were a tenth of a small insert's instructions). A field that is missing or of
    /// another type, or a malformed entry, reads as `""` / `None`, as those lookups did.
    pub fn of(entry: &'a bson::RawDocument) -> EntryHead<'a> {
        let f = EntryFields::read(entry).unwrap_or_default();
        let op = f.op.unwrap_or("");
        EntryHead {
            op,
            ns: f.ns.unwrap_or(""),
            o: f.o,
            o2: f.o2.filter(|_| op == "u"),
        }
    }

    /// Every `oplog_by_ns` namespace the entry is listed under.
    pub fn namespaces(&self) -> Vec<String> {
        if self.ns.is_empty() {
            return Vec::new();
        }
        let mut v = vec![self.ns.to_string()];
        if self.op == "c" {
            if let (Some(db), Some(o)) = (self.ns.strip_suffix(".$cmd"), self.o) {
                v.extend(command_targets(db, o));
            }
        }
        v
    }

    /// The entry's `oplog_by_ns` value: see [`ns_digest`].
    pub fn digest(&self) -> Vec<u8> {
        let EntryHead { op, ns, o, o2 } = *self;
        // A write of a view definition is the DDL of a view (create, modify or drop event).
        if matches!(op, "i" | "u" | "d") && crate::catalog::views::is_system_views(ns) {
            return vec![b'c'];
        }
        let kind = match op {
            "u" if o
                .map(|o| o.get("$v").ok().flatten().is_none())
                .unwrap_or(false) =>
            {
                b'r'
            }
            "i" | "u" | "d" | "c" | "n" => op.as_bytes()[0],
            _ => return Vec::new(),
        };
        // The kind and a key hash (1 + 1 + 8 bytes) without growing.
        let mut v = Vec::with_capacity(10);
        v.push(kind);
        let key_holder = if op == "u" { o2 } else { o };
        if let (b'i' | b'u' | b'r' | b'd', Some(holder)) = (kind, key_holder) {
            if let Ok(Some(id)) = holder.get("_id") {
                v.push(DIGEST_KEY_HASH);
                v.extend_from_slice(&document_key_hash(id).to_le_bytes());
            }
        }
        if let (b'i' | b'r', Some(o)) = (kind, o) {
            if o.as_bytes().len() >= DIGEST_FIELDS_MIN_BYTES {
                v.push(DIGEST_FIELD_NAMES);
                for (name, _) in o.into_iter().flatten() {
                    v.extend_from_slice(name.as_bytes());
                    v.push(0);
                }
            }
        }
        v
    }
}

/// Every `oplog_by_ns` namespace an entry is listed under.
pub fn indexed_namespaces(entry: &bson::RawDocument) -> Vec<String> {
    EntryHead::of(entry).namespaces()
}

/// Documents at least this large have their top-level field names listed in their
/// entry's `oplog_by_ns` digest (smaller ones are cheap to read in full).
pub const DIGEST_FIELDS_MIN_BYTES: usize = 64 * 1024;

/// The `oplog_by_ns` value of an entry: what a change stream's filter can be decided
/// on without reading the entry (which may hold a document of megabytes):
/// the kind of change (`i`nsert, `u`pdate, `r`eplace, `d`elete, `c`ommand, `n`oop);
/// then, for an insert, update, replacement or delete, 0x02 and the hash of its
/// document's key ([`document_key_hash`], 8 bytes little-endian: the bucket of a
/// parallel stream by document key, decided unread); then, for a large inserted or
/// replacing document, 0x01 and its top-level field names, each followed by a NUL.
/// Digests written before the key hash existed have no 0x02 part.
pub fn ns_digest(entry: &bson::RawDocument) -> Vec<u8> {
    EntryHead::of(entry).digest()
}

/// The marker of a digest's document-key hash.
const DIGEST_KEY_HASH: u8 = 2;
/// The marker of a digest's field names.
const DIGEST_FIELD_NAMES: u8 = 1;

/// A digest's parts (see [`ns_digest`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Digest<'a> {
    /// The kind of change; None for an empty digest.
    pub kind: Option<u8>,
    pub key_hash: Option<u64>,
    /// The field names, each followed by a NUL.
    pub field_names: Option<&'a [u8]>,
}

impl<'a> Digest<'a> {
    pub fn parse(bytes: &'a [u8]) -> Digest<'a> {
        let mut d = Digest {
            kind: bytes.first().copied(),
            ..Digest::default()
        };
        let mut rest = bytes.get(1..).unwrap_or_default();
        if rest.first() == Some(&DIGEST_KEY_HASH) && rest.len() >= 9 {
            d.key_hash = Some(u64::from_le_bytes(rest[1..9].try_into().expect("8 bytes")));
            rest = &rest[9..];
        }
        if rest.first() == Some(&DIGEST_FIELD_NAMES) {
            d.field_names = Some(&rest[1..]);
        }
        d
    }
}

/// The hash of a document's `_id`: FNV-1a of the BSON document `{_id: id}`, the same
/// bytes whether the `_id` comes from an event's `documentKey` or an oplog entry.
pub fn document_key_hash(id: bson::RawBsonRef<'_>) -> u64 {
    let mut key = crate::core::raw_writer::RawWriter::with_capacity(32);
    key.value("_id", id);
    crate::core::bus::fnv1a(&[&key.into_bytes()])
}

/// Builds the `$v: 2` diff mongod writes for an update, from the dotted paths an
/// update set and removed and the document after the update. Paths that run
/// through arrays are recorded as a replacement of the whole top-level array
/// ("u" of the array field), which is valid diff syntax and replays exactly.
pub fn update_diff(post: &Document, updated: &Document, removed: &[String]) -> Document {
    let mut root = Node::default();
    for (path, value) in updated {
        root.set(
            post,
            &path.split('.').collect::<Vec<_>>(),
            Some(value.clone()),
        );
    }
    for path in removed {
        root.set(post, &path.split('.').collect::<Vec<_>>(), None);
    }
    doc! {"$v": 2, "diff": root.to_document()}
}

/// The `$v: 2` diff that turns `old` into `new`, computed from the two documents as
/// mongod does for pipeline updates: changed sub-documents and arrays become nested
/// diffs (`s<field>`, arrays with `a: true`, `u<index>` and `l` for a truncation), new
/// fields are inserted (`i`), changed ones updated (`u`), missing ones deleted (`d`).
/// None when the field order changed in a way a diff cannot express.
pub fn doc_diff(old: &Document, new: &Document) -> Option<Document> {
    let mut deleted = Document::new();
    let mut updated = Document::new();
    let mut inserted = Document::new();
    let mut subs: Vec<(String, Document)> = Vec::new();
    for k in old.keys() {
        if !new.contains_key(k) {
            deleted.insert(k.clone(), false);
        }
    }
    // Kept fields must keep their relative order, and new fields can only follow them
    // (an insert appends at the end).
    let kept_old: Vec<&String> = old.keys().filter(|k| new.contains_key(*k)).collect();
    let kept_new: Vec<&String> = new.keys().filter(|k| old.contains_key(*k)).collect();
    if kept_old != kept_new {
        return None;
    }
    let mut seen_insert = false;
    for (k, nv) in new {
        match old.get(k) {
            None => {
                seen_insert = true;
                inserted.insert(k.clone(), nv.clone());
            }
            Some(_) if seen_insert => return None,
            Some(ov) if ov == nv => {}
            Some(Bson::Document(od)) => match nv {
                Bson::Document(nd) => match doc_diff(od, nd) {
                    Some(d) => subs.push((k.clone(), d)),
                    None => {
                        updated.insert(k.clone(), nv.clone());
                    }
                },
                _ => {
                    updated.insert(k.clone(), nv.clone());
                }
            },
            Some(Bson::Array(oa)) => match nv {
                Bson::Array(na) => match array_diff(oa, na) {
                    Some(d) => subs.push((k.clone(), d)),
                    None => {
                        updated.insert(k.clone(), nv.clone());
                    }
                },
                _ => {
                    updated.insert(k.clone(), nv.clone());
                }
            },
            Some(_) => {
                updated.insert(k.clone(), nv.clone());
            }
        }
    }
    let mut d = Document::new();
    if !deleted.is_empty() {
        d.insert("d", deleted);
    }
    if !updated.is_empty() {
        d.insert("u", updated);
    }
    if !inserted.is_empty() {
        d.insert("i", inserted);
    }
    for (k, sub) in subs {
        d.insert(format!("s{k}"), sub);
    }
    Some(d)
}

fn array_diff(old: &[Bson], new: &[Bson]) -> Option<Document> {
    let mut d = doc! {"a": true};
    if new.len() < old.len() {
        d.insert("l", new.len() as i32);
    }
    for (i, nv) in new.iter().enumerate() {
        match old.get(i) {
            Some(ov) if ov == nv => {}
            Some(Bson::Document(od)) if matches!(nv, Bson::Document(_)) => {
                let Bson::Document(nd) = nv else {
                    unreachable!()
                };
                match doc_diff(od, nd) {
                    Some(sub) => d.insert(format!("s{i}"), sub),
                    None => d.insert(format!("u{i}"), nv.clone()),
                };
            }
            Some(Bson::Array(oa)) if matches!(nv, Bson::Array(_)) => {
                let Bson::Array(na) = nv else { unreachable!() };
                match array_diff(oa, na) {
                    Some(sub) => d.insert(format!("s{i}"), sub),
                    None => d.insert(format!("u{i}"), nv.clone()),
                };
            }
            _ => {
                d.insert(format!("u{i}"), nv.clone());
            }
        }
    }
    Some(d)
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
    fn a_transaction_entry_targets_every_namespace_it_writes_once() {
        let o = bson::rawdoc! {"applyOps": [
            {"op": "c", "ns": "a.$cmd", "o": {"create": "new"}},
            {"op": "i", "ns": "a.new", "o": {"_id": 1}},
            {"op": "u", "ns": "b.c", "o": {"$v": 2, "diff": {}}, "o2": {"_id": 1}},
            {"op": "i", "ns": "a.new", "o": {"_id": 2}},
            {"op": "d", "ns": "a.old", "o": {"_id": 3}},
        ]};
        assert_eq!(command_targets("admin", &o), vec!["a.new", "b.c", "a.old"]);
        let head = EntryHead {
            op: "c",
            ns: "admin.$cmd",
            o: Some(&o),
            o2: None,
        };
        assert_eq!(
            head.namespaces(),
            vec!["admin.$cmd", "a.new", "b.c", "a.old"]
        );
        // Never ruled out on its digest: a command's.
        assert_eq!(head.digest(), vec![b'c']);
    }

    /// What a writer passes for an insert it logs is what is read back from the entry.
    #[test]
    fn an_inserts_digest_and_namespaces_from_what_it_knows_match_its_entry() {
        let ui = bson::Uuid::new();
        let ts = bson::Timestamp {
            time: 5,
            increment: 1,
        };
        let big = "x".repeat(DIGEST_FIELDS_MIN_BYTES);
        for (ns, doc) in [
            ("db.c", doc! {"_id": 7, "x": 1}),
            ("db.c", doc! {"_id": 8, "big": &big, "y": 2}),
            (
                "db.system.views",
                doc! {"_id": "db.v", "viewOn": "c", "pipeline": []},
            ),
        ] {
            let raw_doc = bson::RawDocumentBuf::from_document(&doc).unwrap();
            let change =
                OplogChange::insert(ns.into(), ui, doc.clone(), doc.get("_id").unwrap().clone());
            let entry = change.to_entry(ts, bson::DateTime::from_millis(9));
            let entry = bson::RawDocumentBuf::from_document(&entry).unwrap();
            let known = EntryHead {
                op: "i",
                ns,
                o: Some(&raw_doc),
                o2: None,
            };
            let read = EntryHead::of(&entry);
            assert_eq!(known.digest(), read.digest(), "{ns}");
            assert_eq!(known.digest(), ns_digest(&entry), "{ns}");
            assert_eq!(known.namespaces(), indexed_namespaces(&entry), "{ns}");
        }
        assert_eq!(
            EntryHead::of(bson::RawDocument::from_bytes(&[5, 0, 0, 0, 0]).unwrap()).digest(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn entry_fields_are_read_in_one_walk_as_get_finds_them() {
        let ui = bson::Uuid::new();
        let change =
            OplogChange::insert("db.c".into(), ui, doc! {"_id": 7, "x": 1}, Bson::Int32(7));
        let ts = bson::Timestamp {
            time: 5,
            increment: 1,
        };
        let mut entry = change.to_entry(ts, bson::DateTime::from_millis(9));
        entry.insert("lsid", doc! {"id": 1});
        entry.insert("txnNumber", 3i64);
        let raw = bson::RawDocumentBuf::from_document(&entry).unwrap();
        let f = EntryFields::read(&raw).unwrap();
        assert_eq!(f.op, Some("i"));
        assert_eq!(f.ns, Some("db.c"));
        assert_eq!(f.ui.map(|b| b.bytes.to_vec()), Some(ui.bytes().to_vec()));
        assert_eq!(
            f.o.map(|o| Document::try_from(o).unwrap()),
            Some(doc! {"_id": 7, "x": 1})
        );
        assert_eq!(
            f.o2.map(|o| Document::try_from(o).unwrap()),
            Some(doc! {"_id": 7})
        );
        assert_eq!(f.wall, raw.get("wall").unwrap());
        assert_eq!(
            f.lsid.map(|o| Document::try_from(o).unwrap()),
            Some(doc! {"id": 1})
        );
        assert_eq!(f.txn_number, Some(3));

        // Of a repeated field the first counts; a field of another type is missing.
        let mut dup = bson::RawDocumentBuf::new();
        dup.append("op", "u");
        dup.append("op", "i");
        dup.append("ns", 5);
        dup.append("txnNumber", 4i32);
        let f = EntryFields::read(&dup).unwrap();
        assert_eq!(f.op, Some("u"));
        assert_eq!(f.ns, None);
        assert_eq!(f.txn_number, None);
        assert!(f.o.is_none() && f.o2.is_none() && f.wall.is_none());
    }

    /// The fast walk reads exactly what the general one does, and leaves to it what
    /// it does not read itself.
    #[test]
    fn fast_entry_walk_agrees_with_the_general_one() {
        let ui = bson::Uuid::new();
        let ts = bson::Timestamp {
            time: 5,
            increment: 1,
        };
        let every_type = doc! {
            "d": 1.5, "s": "x", "doc": {"a": 1}, "arr": [1, "b"],
            "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] },
            "undef": Bson::Undefined, "oid": bson::oid::ObjectId::new(), "b": true,
            "date": bson::DateTime::from_millis(3), "null": Bson::Null,
            "re": bson::Regex { pattern: "a".into(), options: "i".into() },
            "code": Bson::JavaScriptCode("f()".into()), "sym": Bson::Symbol("y".into()),
            "i32": 1, "ts": ts, "i64": 2i64, "dec": bson::Decimal128::from_bytes([0; 16]),
            "min": Bson::MinKey, "max": Bson::MaxKey,
        };
        let mut entries = Vec::new();
        let mut full = OplogChange::insert("db.c".into(), ui, every_type.clone(), Bson::Int32(7))
            .to_entry(ts, bson::DateTime::from_millis(9));
        full.insert("lsid", doc! {"id": ui});
        full.insert("txnNumber", 3i64);
        entries.push(full.clone());
        // Fields of other types than expected, repeated fields, odd wall types.
        entries.push(doc! {"op": 1, "ns": "a.b", "o": [1], "o2": "x", "wall": 5, "txnNumber": 1});
        entries.push(doc! {"ui": bson::Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![1] }});
        entries.push(doc! {"extra": every_type.clone(), "op": "n", "op": "i", "wall": ts});
        entries.push(doc! {});
        for entry in &entries {
            let raw = bson::RawDocumentBuf::from_document(entry).unwrap();
            let general = EntryFields::read_general(&raw).unwrap();
            let read = EntryFields::read(&raw).unwrap();
            assert_eq!(format!("{read:?}"), format!("{general:?}"), "{entry}");
        }
        // The full entry is the kind the fast walk must take itself.
        let raw = bson::RawDocumentBuf::from_document(&full).unwrap();
        assert!(EntryFields::read_fast(raw.as_bytes()).is_some());
        // Malformed bytes: never a panic, the general walk's error.
        let bytes = raw.as_bytes();
        let mutations: [fn(u8) -> u8; 4] = [
            |b| b.wrapping_add(0x41),
            |b| b ^ 0x80,
            |b| b.wrapping_sub(1),
            |_| 0,
        ];
        for (at, mutate) in (0..bytes.len()).flat_map(|at| mutations.iter().map(move |m| (at, m))) {
            let mut broken = bytes.to_vec();
            broken[at] = mutate(broken[at]);
            if let Ok(doc) = bson::RawDocument::from_bytes(&broken) {
                let fast = EntryFields::read_fast(doc.as_bytes());
                let general = EntryFields::read_general(doc);
                match (fast, general) {
                    (Some(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}")),
                    (Some(a), Err(e)) => {
                        panic!("fast walk read {a:?} where the general one failed: {e}")
                    }
                    (None, _) => {}
                }
            }
        }
    }

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
        let e = c.to_entry(
            bson::Timestamp {
                time: 1,
                increment: 2,
            },
            bson::DateTime::from_millis(5),
        );
        let keys: Vec<&str> = e.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, vec!["op", "ns", "ui", "o", "ts", "t", "v", "wall"]);
    }

    /// A document key's hash is stored in `oplog_by_ns` digests and names a change
    /// stream bucket: it is the FNV-1a of the `{_id}` document as the `bson` crate
    /// writes it, whatever writes it here.
    #[test]
    fn a_document_key_hash_is_that_of_the_crates_id_document() {
        let ids = [
            bson::Bson::ObjectId(bson::oid::ObjectId::from_bytes([3; 12])),
            bson::Bson::Int32(-7),
            bson::Bson::Int64(1 << 40),
            bson::Bson::String("key".into()),
            bson::Bson::Binary(bson::Binary::from_uuid(bson::Uuid::from_bytes([9; 16]))),
            bson::Bson::Document(doc! {"a": 1, "b": [1, 2]}),
            bson::Bson::Double(0.5),
            bson::Bson::Null,
        ];
        for id in ids {
            let expected = bson::to_vec(&doc! {"_id": id.clone()}).unwrap();
            let raw = bson::RawBson::try_from(id.clone()).unwrap();
            assert_eq!(
                document_key_hash(raw.as_raw_bson_ref()),
                crate::core::bus::fnv1a(&[&expected]),
                "{id:?}"
            );
        }
    }
}

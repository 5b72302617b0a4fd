//! Dotted-path access without array expansion: `a.b.0` walks documents and
//! indexes into arrays by position. The matcher and index key generation do
//! their own array expansion on top of this.

use bson::{Bson, Document};

/// The value at `path`, descending through documents and (by numeric component) arrays.
pub fn get_path<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let first = parts.next()?;
    let mut cur = doc.get(first)?;
    for p in parts {
        cur = step(cur, p)?;
    }
    Some(cur)
}

/// One path step from a value: a field of a document or a position in an array.
pub fn step<'a>(v: &'a Bson, part: &str) -> Option<&'a Bson> {
    match v {
        Bson::Document(d) => d.get(part),
        Bson::Array(a) => parse_index(part).and_then(|i| a.get(i)),
        _ => None,
    }
}

/// A path component that names an array position ("0", "12"; not "01" or "-1").
pub fn parse_index(part: &str) -> Option<usize> {
    if part.is_empty()
        || !part.bytes().all(|c| c.is_ascii_digit())
        || (part.len() > 1 && part.starts_with('0'))
    {
        return None;
    }
    part.parse().ok()
}

/// Depth of nesting of documents and arrays (a flat document has depth 1).
pub fn nesting_depth(doc: &Document) -> usize {
    fn val(v: &Bson) -> usize {
        match v {
            Bson::Document(d) => nesting_depth(d),
            Bson::Array(a) => 1 + a.iter().map(val).max().unwrap_or(0),
            _ => 0,
        }
    }
    1 + doc.values().map(val).max().unwrap_or(0)
}

/// Sets a dotted path, creating (or replacing non-document) intermediate values.
pub fn set_path(doc: &mut Document, path: &str, value: Bson) {
    let parts: Vec<&str> = path.split('.').collect();
    set_parts(doc, &parts, value);
}

fn set_parts(doc: &mut Document, parts: &[&str], value: Bson) {
    let (first, rest) = parts.split_first().unwrap();
    if rest.is_empty() {
        doc.insert(first.to_string(), value);
        return;
    }
    match doc.get_mut(*first) {
        Some(Bson::Document(d)) => set_parts(d, rest, value),
        _ => {
            let mut d = Document::new();
            set_parts(&mut d, rest, value);
            doc.insert(first.to_string(), Bson::Document(d));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn walks_documents_and_array_positions() {
        let d = doc! {"a": {"b": [10, {"c": 5}]}};
        assert_eq!(get_path(&d, "a.b.0"), Some(&Bson::Int32(10)));
        assert_eq!(get_path(&d, "a.b.1.c"), Some(&Bson::Int32(5)));
        assert_eq!(get_path(&d, "a.b.c"), None);
        assert_eq!(get_path(&d, "x"), None);
        assert_eq!(parse_index("01"), None);
        assert_eq!(nesting_depth(&doc! {"a": {"b": [1]}}), 3);
    }
}

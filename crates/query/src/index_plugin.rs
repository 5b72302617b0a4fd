//! Special index types ("index plugins" in mongod): `hashed`, `text`, `2d` and `2dsphere`, and the key generation and
//! spec validation they need beyond the btree generator of [`crate::index_keys`]. A key
//! pattern names at most one plugin (`{a: "hashed", b: 1}`); its other fields are
//! ordinary ascending/descending fields.

use crate::error::{codes, Error, Result};
use crate::geo::index::{SphereIndex, TwoDIndex};
use crate::hashed::{hash64, hashed_field_value};
use crate::index_keys::KeyPattern;
use crate::text::TextIndexSpec;
use bson::{Bson, Document};
use std::sync::Arc;

pub use crate::index_keys::is_supported_plugin;

/// An index's special type, built from its (validated) specification.
#[derive(Debug, Clone)]
pub enum IndexPlugin {
    /// `{a: "hashed"}`, possibly compound; `field` is the hashed field's position.
    Hashed { field: usize },
    /// A text index (`{_fts: "text", _ftsx: 1}` with weights and languages).
    Text(Arc<TextIndexSpec>),
    /// `{loc: "2d", ...}`: legacy pairs on a flat plane.
    TwoD(TwoDIndex),
    /// `{geo: "2dsphere", ...}`: GeoJSON and legacy pairs on the sphere.
    Sphere(SphereIndex),
}

/// The plugin a key pattern names, if any, refusing patterns that name several.
pub fn plugin_name(key: &Document) -> Result<Option<&str>> {
    let mut found: Option<&str> = None;
    for v in key.values() {
        if let Bson::String(s) = v {
            match found {
                Some(f) if f != s => {
                    return Err(Error::new(
                        codes::CANNOT_CREATE_INDEX,
                        "Can't use more than one index plugin for a single index.",
                    ))
                }
                _ => found = Some(s.as_str()),
            }
        }
    }
    Ok(found)
}

/// Checks a new index specification against its plugin's rules and fills in the
/// defaults mongod stores (as `listIndexes` reports them). `spec` has a valid key pattern.
pub fn normalize_spec(spec: Document) -> Result<Document> {
    let key = spec.get_document("key").cloned().unwrap_or_default();
    match plugin_name(&key)? {
        None => Ok(spec),
        Some("hashed") => {
            let n = key
                .values()
                .filter(|v| matches!(v, Bson::String(_)))
                .count();
            if n > 1 {
                return Err(Error::location(
                    31303,
                    format!(
                        "A maximum of one index field is allowed to be hashed but found {n} for 'key' {}",
                        crate::render::show(&Bson::Document(key.clone()))
                    ),
                ));
            }
            if spec.get_bool("unique").unwrap_or(false) {
                return Err(Error::location(
                    16764,
                    "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
                ));
            }
            Ok(spec)
        }
        Some("text") => crate::text::normalize_spec(spec),
        Some("2d") => crate::geo::index::normalize_2d(spec),
        Some("2dsphere") => crate::geo::index::normalize_2dsphere(spec),
        Some(other) => Err(Error::new(
            codes::CANNOT_CREATE_INDEX,
            format!("Unknown index plugin '{other}'"),
        )),
    }
}

impl IndexPlugin {
    /// The plugin of a stored or normalized specification (None for a btree index).
    pub fn from_spec(spec: &Document) -> Result<Option<IndexPlugin>> {
        let key = spec
            .get_document("key")
            .map_err(|_| Error::bad_value("index spec without key"))?;
        Ok(match plugin_name(key)? {
            None => None,
            Some("hashed") => Some(IndexPlugin::Hashed {
                field: key
                    .values()
                    .position(|v| matches!(v, Bson::String(_)))
                    .unwrap_or(0),
            }),
            Some("text") => Some(IndexPlugin::Text(Arc::new(TextIndexSpec::from_spec(spec)?))),
            Some("2d") => Some(IndexPlugin::TwoD(TwoDIndex::from_spec(spec)?)),
            Some("2dsphere") => Some(IndexPlugin::Sphere(SphereIndex::from_key(key))),
            Some(other) => {
                return Err(Error::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!("Unknown index plugin '{other}'"),
                ))
            }
        })
    }

    /// The index keys of `doc` (values in pattern order), and whether the document makes
    /// the index multikey.
    pub fn keys(&self, doc: &Document, pattern: &KeyPattern) -> Result<(Vec<Vec<Bson>>, bool)> {
        match self {
            IndexPlugin::Hashed { field } => {
                // mongod's getHashKeys: one key per document; an array on any field's path
                // is refused (so a compound hashed index is never multikey).
                let mut values = Vec::with_capacity(pattern.fields.len());
                for (i, (path, _)) in pattern.fields.iter().enumerate() {
                    let v = hashed_field_value(doc, path)?
                        .cloned()
                        .unwrap_or(Bson::Null);
                    values.push(if i == *field {
                        Bson::Int64(hash64(&v))
                    } else {
                        v
                    });
                }
                Ok((vec![values], false))
            }
            IndexPlugin::Text(spec) => {
                let keys = spec.keys(doc)?;
                let multikey = keys.len() > 1;
                Ok((keys, multikey))
            }
            IndexPlugin::TwoD(idx) => {
                let keys = idx.keys(doc, pattern)?;
                let multikey = keys.len() > 1;
                Ok((keys, multikey))
            }
            IndexPlugin::Sphere(idx) => {
                let keys = idx.keys(doc, pattern)?;
                let multikey = keys.len() > 1;
                Ok((keys, multikey))
            }
        }
    }

    /// The text index parameters of a text index.
    pub fn text_spec(&self) -> Option<&Arc<TextIndexSpec>> {
        match self {
            IndexPlugin::Text(spec) => Some(spec),
            _ => None,
        }
    }

    /// The geo field of a 2d or 2dsphere index (positions), and whether it is 2d.
    pub fn geo_fields(&self) -> Option<(Vec<usize>, bool)> {
        match self {
            IndexPlugin::TwoD(_) => Some((vec![0], true)),
            IndexPlugin::Sphere(s) => Some((s.geo_fields.clone(), false)),
            _ => None,
        }
    }

    /// The position of the hashed field of a hashed index.
    pub fn hashed_field(&self) -> Option<usize> {
        match self {
            IndexPlugin::Hashed { field } => Some(*field),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn plugin(spec: Document) -> IndexPlugin {
        IndexPlugin::from_spec(&spec).unwrap().unwrap()
    }

    #[test]
    fn hashed_keys() {
        let p = plugin(doc! {"key": {"a": "hashed", "b": 1}, "name": "x"});
        let pat = KeyPattern::parse(&doc! {"a": "hashed", "b": 1}).unwrap();
        let (k, multikey) = p.keys(&doc! {"a": 2, "b": {"c": 100}}, &pat).unwrap();
        assert_eq!(
            k,
            vec![vec![Bson::Int64(hash64(&bson!(2))), bson!({"c": 100})]]
        );
        assert!(!multikey);
        let (k, _) = p.keys(&doc! {}, &pat).unwrap();
        assert_eq!(k, vec![vec![Bson::Int64(hash64(&Bson::Null)), Bson::Null]]);
        // arrays anywhere in a compound hashed index are refused
        assert_eq!(
            p.keys(&doc! {"a": 1, "b": [1, 2]}, &pat).unwrap_err().code,
            16766
        );
    }

    #[test]
    fn spec_rules() {
        let e =
            normalize_spec(doc! {"key": {"a": "hashed", "b": "hashed"}, "name": "x"}).unwrap_err();
        assert_eq!(e.code, 31303);
        let e =
            normalize_spec(doc! {"key": {"a": "hashed"}, "name": "x", "unique": true}).unwrap_err();
        assert_eq!(e.code, 16764);
        let e = plugin_name(&doc! {"a": "hashed", "b": "2d"}).unwrap_err();
        assert_eq!(e.code, codes::CANNOT_CREATE_INDEX);
        assert!(normalize_spec(doc! {"key": {"a": 1}, "name": "x"}).is_ok());
    }
}

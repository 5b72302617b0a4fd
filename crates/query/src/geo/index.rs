//! Geospatial index keys.
//!
//! * `2d`: mongod's format: each legacy location hashed to a geohash of `bits` bits per
//!   coordinate over `[min, max)` (BinData subtype 128, 8 bytes), then the other fields.
//! * `2dsphere`: one coarse cell per stored geometry: the smallest cell of a longitude /
//!   latitude quadtree (30 levels, Z-order) that holds its bounding box, as a 64-bit
//!   integer whose descendants form a contiguous range (S2's cell-id layout, on a flat
//!   grid instead of S2's cube). Queries read every entry of the index and check the exact
//!   predicate on each document; the cells are there for range lookups to come.

use super::shape::{self, legacy_point, Pt};
use crate::compare::{as_f64, is_number};
use crate::error::{codes, Error, Result};
use crate::index_keys::KeyPattern;
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Document};

/// Most keys one document may produce in a geo index (compound fields multiply).
const MAX_KEYS_PER_DOCUMENT: usize = 10_000;
/// Quadtree depth of 2dsphere cells.
const CELL_LEVELS: u32 = 30;

/// The values a path reaches, arrays along the path expanded (a trailing array only when
/// `expand_last`).
fn values_along<'a>(v: &'a Bson, parts: &[&str], expand_last: bool, out: &mut Vec<&'a Bson>) {
    if parts.is_empty() {
        match v {
            Bson::Array(a) if expand_last => out.extend(a.iter()),
            _ => out.push(v),
        }
        return;
    }
    match v {
        Bson::Document(d) => {
            if let Some(c) = d.get(parts[0]) {
                values_along(c, &parts[1..], expand_last, out);
            }
        }
        Bson::Array(a) => {
            if let Some(i) = crate::path::parse_index(parts[0]) {
                if let Some(e) = a.get(i) {
                    values_along(e, &parts[1..], expand_last, out);
                    return;
                }
            }
            for e in a {
                if let Bson::Document(_) = e {
                    values_along(e, parts, expand_last, out);
                }
            }
        }
        _ => {}
    }
}

fn values_at<'a>(doc: &'a Document, path: &str, expand_last: bool) -> Vec<&'a Bson> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = Vec::new();
    if let Some(v) = doc.get(parts[0]) {
        values_along(v, &parts[1..], expand_last, &mut out);
    }
    out
}

fn show_doc(d: &Document) -> String {
    crate::render::show(&Bson::Document(d.clone()))
}

/// Cartesian product of per-field key values, bounded.
fn product(fields: Vec<Vec<Bson>>) -> Result<Vec<Vec<Bson>>> {
    let mut keys: Vec<Vec<Bson>> = vec![Vec::new()];
    for values in fields {
        if keys.len().saturating_mul(values.len()) > MAX_KEYS_PER_DOCUMENT {
            return Err(Error::location(
                16756,
                "Unable to generate keys: too many index keys for one document",
            ));
        }
        let mut next = Vec::with_capacity(keys.len() * values.len());
        for k in &keys {
            for v in &values {
                let mut k2 = k.clone();
                k2.push(v.clone());
                next.push(k2);
            }
        }
        keys = next;
    }
    Ok(keys)
}

/// The values of an ordinary field in a geo index: arrays expanded, missing as null,
/// an empty array as undefined.
fn literal_values(doc: &Document, path: &str) -> Vec<Bson> {
    let vals = values_at(doc, path, false);
    if vals.is_empty() {
        return vec![Bson::Null];
    }
    let mut out = Vec::new();
    for v in vals {
        match v {
            Bson::Array(a) if a.is_empty() => out.push(Bson::Undefined),
            Bson::Array(a) => out.extend(a.iter().cloned()),
            other => out.push(other.clone()),
        }
    }
    out
}

// ------------------------------------------------------------------------ 2dsphere

/// mongod's `S2AccessMethod::fixSpec` and checks: `2dsphereIndexVersion` defaults to 3.
pub fn normalize_2dsphere(mut spec: Document) -> Result<Document> {
    match spec.get("2dsphereIndexVersion") {
        None => {
            spec.insert("2dsphereIndexVersion", 3);
        }
        Some(v) if is_number(v) && matches!(as_f64(v), Some(x) if x == 1.0 || x == 2.0 || x == 3.0) => {}
        Some(v) => {
            return Err(Error::new(
                codes::CANNOT_CREATE_INDEX,
                format!(
                    "unsupported geo index version {{ 2dsphereIndexVersion : {} }}, only support versions: [1,2,3]",
                    crate::render::show(v)
                ),
            ))
        }
    }
    Ok(spec)
}

/// A 2dsphere index: which key fields are geo fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SphereIndex {
    pub geo_fields: Vec<usize>,
}

impl SphereIndex {
    pub fn from_key(key: &Document) -> SphereIndex {
        SphereIndex {
            geo_fields: key
                .values()
                .enumerate()
                .filter(|(_, v)| v.as_str() == Some("2dsphere"))
                .map(|(i, _)| i)
                .collect(),
        }
    }

    /// The index keys of a document; none when it has no geo field at all.
    pub fn keys(&self, doc: &Document, pattern: &KeyPattern) -> Result<Vec<Vec<Bson>>> {
        let mut fields = Vec::with_capacity(pattern.fields.len());
        let mut have_geo = false;
        for (i, (path, _)) in pattern.fields.iter().enumerate() {
            if !self.geo_fields.contains(&i) {
                fields.push(literal_values(doc, path));
                continue;
            }
            let mut elements = values_at(doc, path, false);
            // null, undefined and [] stand for no geo field.
            if elements.len() == 1 && matches!(elements[0], Bson::Null | Bson::Undefined)
                || elements.len() == 1 && matches!(elements[0], Bson::Array(a) if a.is_empty())
            {
                elements.clear();
            }
            if elements.is_empty() {
                fields.push(vec![Bson::Null]);
                continue;
            }
            have_geo = true;
            let mut cells = Vec::with_capacity(elements.len());
            for e in elements {
                let stored = shape::parse_stored(e).map_err(|reason| {
                    Error::location(
                        16755,
                        format!("Can't extract geo keys: {}  {reason}", show_doc(doc)),
                    )
                })?;
                let c = Bson::Int64(cell_id(&stored.geom.points()));
                if !cells.contains(&c) {
                    cells.push(c);
                }
            }
            fields.push(cells);
        }
        if !have_geo {
            return Ok(Vec::new());
        }
        product(fields)
    }
}

fn quantize(v: f64, lo: f64, hi: f64) -> u64 {
    let cells = (1u64 << CELL_LEVELS) as f64;
    (((v - lo) / (hi - lo) * cells).floor()).clamp(0.0, cells - 1.0) as u64
}

fn interleave(x: u64, y: u64) -> u64 {
    let mut z = 0u64;
    for i in (0..CELL_LEVELS).rev() {
        z = (z << 2) | (((x >> i) & 1) << 1) | ((y >> i) & 1);
    }
    z
}

/// The smallest quadtree cell holding the bounding box of `points`, as an id whose
/// lowest set bit marks its level.
pub fn cell_id(points: &[Pt]) -> i64 {
    let (mut lo, mut hi) = (
        Pt {
            x: f64::MAX,
            y: f64::MAX,
        },
        Pt {
            x: f64::MIN,
            y: f64::MIN,
        },
    );
    for p in points {
        lo = Pt {
            x: lo.x.min(p.x),
            y: lo.y.min(p.y),
        };
        hi = Pt {
            x: hi.x.max(p.x),
            y: hi.y.max(p.y),
        };
    }
    let a = interleave(quantize(lo.x, -180.0, 180.0), quantize(lo.y, -90.0, 90.0));
    let b = interleave(quantize(hi.x, -180.0, 180.0), quantize(hi.y, -90.0, 90.0));
    // Shared leading 2-bit groups = the cell level.
    let diff = a ^ b;
    let level = if diff == 0 {
        CELL_LEVELS
    } else {
        let top = 63 - diff.leading_zeros(); // highest differing bit, < 60
        (2 * CELL_LEVELS - 1 - top) / 2
    };
    let shift = 2 * (CELL_LEVELS - level);
    let prefix = if shift >= 64 { 0 } else { a >> shift };
    (((prefix << 1) | 1) << shift) as i64
}

// ------------------------------------------------------------------------------ 2d

/// A 2d index: the geo field (first) and the geohash parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct TwoDIndex {
    pub bits: u32,
    pub min: f64,
    pub max: f64,
}

fn number_option(spec: &Document, name: &str, default: f64) -> Result<f64> {
    match spec.get(name) {
        None => Ok(default),
        Some(v) if is_number(v) => Ok(as_f64(v).unwrap_or(default)),
        Some(_) => Err(Error::type_mismatch(format!(
            "2d index option '{name}' must be a number"
        ))),
    }
}

/// Checks a 2d index specification (the 2d field first and alone, `bits`, `min`, `max`).
pub fn normalize_2d(spec: Document) -> Result<Document> {
    let key = spec.get_document("key").cloned().unwrap_or_default();
    let geo: Vec<usize> = key
        .values()
        .enumerate()
        .filter(|(_, v)| v.as_str() == Some("2d"))
        .map(|(i, _)| i)
        .collect();
    if geo.len() > 1 {
        return Err(Error::location(16800, "can't have 2 geo fields"));
    }
    if geo.first() != Some(&0) {
        return Err(Error::location(16801, "2d has to be first in index"));
    }
    TwoDIndex::from_spec(&spec)?;
    Ok(spec)
}

impl TwoDIndex {
    pub fn from_spec(spec: &Document) -> Result<TwoDIndex> {
        let bits = number_option(spec, "bits", 26.0)?;
        if !(1.0..=32.0).contains(&bits) {
            return Err(Error::location(
                13028,
                "bits in geo index must be between 1 and 32",
            ));
        }
        let (min, max) = (
            number_option(spec, "min", -180.0)?,
            number_option(spec, "max", 180.0)?,
        );
        if !(max > min) || !min.is_finite() || !max.is_finite() {
            return Err(Error::new(
                codes::CANNOT_CREATE_INDEX,
                "region for hash must be valid and have positive area",
            ));
        }
        Ok(TwoDIndex {
            bits: bits as u32,
            min,
            max,
        })
    }

    fn hash_coord(&self, v: f64) -> u32 {
        let scaling = 4_294_967_296.0 / (self.max - self.min);
        ((v - self.min) * scaling) as u32
    }

    /// mongod's geohash of a location: `bits` interleaved bits of x and y.
    pub fn geohash(&self, p: Pt) -> Bson {
        let (x, y) = (self.hash_coord(p.x), self.hash_coord(p.y));
        let mut h = 0u64;
        for i in 0..self.bits {
            let bit = 31 - i;
            h |= (((x >> bit) & 1) as u64) << (63 - 2 * i);
            h |= (((y >> bit) & 1) as u64) << (62 - 2 * i);
        }
        Bson::Binary(Binary {
            subtype: BinarySubtype::UserDefined(0x80),
            bytes: h.to_be_bytes().to_vec(),
        })
    }

    fn location(&self, loc: &Bson, doc: &Document) -> Result<Pt> {
        let vals: Vec<&Bson> = match loc {
            Bson::Array(a) => a.iter().collect(),
            Bson::Document(d) => d.values().collect(),
            _ => Vec::new(),
        };
        if vals.len() < 2 {
            return Err(Error::location(13068, "geo field only has 1 element"));
        }
        if !is_number(vals[0]) || !is_number(vals[1]) {
            return Err(Error::location(
                13026,
                format!(
                    "geo values must be 'legacy coordinate pairs' for 2d indexes: {}",
                    show_doc(doc)
                ),
            ));
        }
        let p = legacy_point(loc).expect("two numbers");
        for c in [p.x, p.y] {
            if !(c >= self.min && c < self.max) {
                return Err(Error::location(
                    13027,
                    format!(
                        "point not in interval of [ {}, {} ) :: caused by :: {{ : {}, : {} }}",
                        self.min, self.max, p.x, p.y
                    ),
                ));
            }
        }
        Ok(p)
    }

    /// mongod's `get2DKeys`: one key per location (none without a location).
    pub fn keys(&self, doc: &Document, pattern: &KeyPattern) -> Result<Vec<Vec<Bson>>> {
        let (geo_path, _) = &pattern.fields[0];
        let mut hashes = Vec::new();
        for geo in values_at(doc, geo_path, false) {
            let embed: Vec<&Bson> = match geo {
                Bson::Array(a) => a.iter().collect(),
                Bson::Document(d) => d.values().collect(),
                _ => continue,
            };
            let Some(first) = embed.first() else { continue };
            if is_number(first) {
                hashes.push(self.geohash(self.location(geo, doc)?));
                continue;
            }
            for loc in embed {
                match loc {
                    Bson::Array(a) if a.is_empty() => {}
                    Bson::Document(d) if d.is_empty() => {}
                    Bson::Array(_) | Bson::Document(_) => {
                        hashes.push(self.geohash(self.location(loc, doc)?))
                    }
                    _ => {
                        return Err(Error::location(
                            16804,
                            "location object expected, location array not in correct format",
                        ))
                    }
                }
            }
        }
        if hashes.len() > MAX_KEYS_PER_DOCUMENT {
            return Err(Error::location(
                16756,
                "Unable to generate keys: too many locations",
            ));
        }
        let others: Vec<Bson> = pattern.fields[1..]
            .iter()
            .map(|(path, _)| {
                let vals = values_at(doc, path, true);
                match vals.len() {
                    0 => Bson::Null,
                    1 => vals[0].clone(),
                    _ => Bson::Array(vals.into_iter().cloned().collect()),
                }
            })
            .collect();
        let mut keys: Vec<Vec<Bson>> = Vec::new();
        for h in hashes {
            let mut k = vec![h];
            k.extend(others.iter().cloned());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn pat(d: Document) -> KeyPattern {
        KeyPattern::parse(&d).unwrap()
    }

    #[test]
    fn two_d_keys_match_mongod() {
        let idx = TwoDIndex::from_spec(&doc! {}).unwrap();
        let h = idx.geohash(Pt { x: 0.0, y: 0.0 });
        assert_eq!(
            h,
            Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x80),
                bytes: vec![0xC0, 0, 0, 0, 0, 0, 0, 0],
            })
        );
        let k = idx
            .keys(
                &doc! {"a": [0, 0], "b": [5, 6]},
                &pat(doc! {"a": "2d", "b": 1}),
            )
            .unwrap();
        assert_eq!(k, vec![vec![h.clone(), bson::bson!([5, 6])]]);
        // arrays of locations, missing and non-location values
        let p = pat(doc! {"a": "2d"});
        assert_eq!(
            idx.keys(&doc! {"a": [[0, 0], [1, 1]]}, &p).unwrap().len(),
            2
        );
        assert!(idx.keys(&doc! {"b": 1}, &p).unwrap().is_empty());
        assert!(idx.keys(&doc! {"a": "x"}, &p).unwrap().is_empty());
        assert_eq!(idx.keys(&doc! {"a": [0]}, &p).unwrap_err().code, 13068);
        assert_eq!(idx.keys(&doc! {"a": [200, 0]}, &p).unwrap_err().code, 13027);
        assert_eq!(
            idx.keys(&doc! {"a": [[0, 0], 5]}, &p).unwrap_err().code,
            16804
        );
    }

    #[test]
    fn two_d_spec_rules() {
        let e = |k: Document, extra: Document| {
            let mut s = doc! {"key": k, "name": "x"};
            s.extend(extra);
            normalize_2d(s).unwrap_err().code
        };
        assert_eq!(e(doc! {"a": "2d", "b": "2d"}, doc! {}), 16800);
        assert_eq!(e(doc! {"b": 1, "a": "2d"}, doc! {}), 16801);
        assert_eq!(e(doc! {"a": "2d"}, doc! {"bits": 40}), 13028);
        assert_eq!(e(doc! {"a": "2d"}, doc! {"min": 5, "max": 5}), 67);
    }

    #[test]
    fn sphere_keys() {
        let idx = SphereIndex::from_key(&doc! {"g": "2dsphere", "n": 1});
        let p = pat(doc! {"g": "2dsphere", "n": 1});
        let k = idx
            .keys(
                &doc! {"g": {"type": "Point", "coordinates": [0, 0]}, "n": [1, 2]},
                &p,
            )
            .unwrap();
        assert_eq!(k.len(), 2);
        assert!(idx.keys(&doc! {"n": 1}, &p).unwrap().is_empty());
        assert!(idx.keys(&doc! {"g": null}, &p).unwrap().is_empty());
        assert_eq!(
            idx.keys(&doc! {"g": "nowhere"}, &p).unwrap_err().code,
            16755
        );
        assert_eq!(
            idx.keys(&doc! {"g": {"type": "Point", "coordinates": [500, 0]}}, &p)
                .unwrap_err()
                .code,
            16755
        );
        // a point's cell is a leaf; a wide polygon's is coarser (larger lowest bit)
        let leaf = cell_id(&[Pt { x: 1.0, y: 1.0 }]);
        assert_eq!(leaf & 1, 1);
        let coarse = cell_id(&[Pt { x: -50.0, y: -10.0 }, Pt { x: 50.0, y: 10.0 }]);
        assert!(coarse.trailing_zeros() > 20);
        assert_eq!(
            normalize_2dsphere(doc! {"key": {"g": "2dsphere"}})
                .unwrap()
                .get_i32("2dsphereIndexVersion")
                .unwrap(),
            3
        );
        assert!(normalize_2dsphere(doc! {"2dsphereIndexVersion": 9}).is_err());
    }
}

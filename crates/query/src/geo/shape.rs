//! Geometries as documents store them and queries name them: GeoJSON objects
//! (`{type, coordinates}`, coordinates in [longitude, latitude] order) and legacy
//! coordinate pairs (`[x, y]` or `{x: .., y: ..}`: the first two numeric values).

use crate::compare::{as_f64, is_number};
use bson::{Bson, Document};

/// A position: x is the longitude (or the first legacy coordinate), y the latitude.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pt {
    pub x: f64,
    pub y: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Geometry {
    Point(Pt),
    LineString(Vec<Pt>),
    /// Rings: the first is the shell, the others holes; each ring is closed.
    Polygon(Vec<Vec<Pt>>),
    MultiPoint(Vec<Pt>),
    MultiLineString(Vec<Vec<Pt>>),
    MultiPolygon(Vec<Vec<Vec<Pt>>>),
    Collection(Vec<Geometry>),
}

/// A stored location: its geometry, whether it was a legacy pair (flat-plane queries
/// and 2d indexes see only points), and the value it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub geom: Geometry,
    pub legacy: bool,
    pub source: Bson,
}

impl Geometry {
    /// Every vertex.
    pub fn points(&self) -> Vec<Pt> {
        let mut out = Vec::new();
        self.each_point(&mut |p| out.push(p));
        out
    }

    fn each_point(&self, f: &mut dyn FnMut(Pt)) {
        match self {
            Geometry::Point(p) => f(*p),
            Geometry::LineString(l) | Geometry::MultiPoint(l) => l.iter().for_each(|p| f(*p)),
            Geometry::Polygon(rings) | Geometry::MultiLineString(rings) => {
                rings.iter().flatten().for_each(|p| f(*p))
            }
            Geometry::MultiPolygon(polys) => polys.iter().flatten().flatten().for_each(|p| f(*p)),
            Geometry::Collection(gs) => gs.iter().for_each(|g| g.each_point(f)),
        }
    }

    /// The points of a geometry made only of points (None for lines and polygons).
    pub fn only_points(&self) -> Option<Vec<Pt>> {
        match self {
            Geometry::Point(p) => Some(vec![*p]),
            Geometry::MultiPoint(ps) => Some(ps.clone()),
            Geometry::Collection(gs) => {
                let mut out = Vec::new();
                for g in gs {
                    out.extend(g.only_points()?);
                }
                Some(out)
            }
            _ => None,
        }
    }
}

/// A legacy coordinate pair: an array or document whose first two values are numbers.
pub fn legacy_point(v: &Bson) -> Option<Pt> {
    let mut it: Box<dyn Iterator<Item = &Bson>> = match v {
        Bson::Array(a) => Box::new(a.iter()),
        Bson::Document(d) => Box::new(d.values()),
        _ => return None,
    };
    let x = it.next().filter(|v| is_number(v)).and_then(as_f64)?;
    let y = it.next().filter(|v| is_number(v)).and_then(as_f64)?;
    Some(Pt { x, y })
}

fn num_pair(v: &Bson) -> Result<Pt, String> {
    let a = match v {
        Bson::Array(a) => a,
        _ => {
            return Err(format!(
                "Point must be an array or object, instead got type {}",
                crate::compare::type_name(v)
            ))
        }
    };
    if a.len() < 2 || !a.iter().take(2).all(is_number) {
        return Err("Point must only contain numeric elements".to_string());
    }
    if a.len() > 3 {
        return Err("Point must only contain two or three elements".to_string());
    }
    Ok(Pt {
        x: as_f64(&a[0]).unwrap_or(0.0),
        y: as_f64(&a[1]).unwrap_or(0.0),
    })
}

/// A longitude/latitude position within bounds.
fn position(v: &Bson) -> Result<Pt, String> {
    let p = num_pair(v)?;
    check_bounds(p)?;
    Ok(p)
}

pub fn check_bounds(p: Pt) -> Result<(), String> {
    if !(-180.0..=180.0).contains(&p.x) || !(-90.0..=90.0).contains(&p.y) {
        return Err(format!(
            "longitude/latitude is out of bounds, lng: {} lat: {}",
            p.x, p.y
        ));
    }
    Ok(())
}

fn positions(v: &Bson, what: &str) -> Result<Vec<Pt>, String> {
    match v {
        Bson::Array(a) => a.iter().map(position).collect(),
        _ => Err(format!("{what} coordinates must be an array")),
    }
}

fn line(v: &Bson) -> Result<Vec<Pt>, String> {
    let pts = positions(v, "LineString")?;
    if pts.len() < 2 {
        return Err(format!(
            "GeoJSON LineString must have at least 2 vertices: {}",
            crate::render::show(v)
        ));
    }
    Ok(pts)
}

fn ring(v: &Bson) -> Result<Vec<Pt>, String> {
    let pts = positions(v, "Polygon")?;
    if pts.len() < 4 {
        return Err(format!(
            "Loop must have at least 3 different vertices: {}",
            crate::render::show(v)
        ));
    }
    if pts.first() != pts.last() {
        return Err(format!(
            "Loop is not closed, first vertex does not equal last vertex: {}",
            crate::render::show(v)
        ));
    }
    let mut distinct: Vec<Pt> = Vec::new();
    for p in &pts[..pts.len() - 1] {
        if !distinct.contains(p) {
            distinct.push(*p);
        }
    }
    if distinct.len() < 3 {
        return Err(format!(
            "Loop must have at least 3 different vertices: {}",
            crate::render::show(v)
        ));
    }
    Ok(pts)
}

fn polygon(v: &Bson) -> Result<Vec<Vec<Pt>>, String> {
    match v {
        Bson::Array(a) if !a.is_empty() => a.iter().map(ring).collect(),
        Bson::Array(_) => Err("Polygon has no loops.".to_string()),
        _ => Err("Polygon coordinates must be an array".to_string()),
    }
}

fn list<T>(v: &Bson, what: &str, f: fn(&Bson) -> Result<T, String>) -> Result<Vec<T>, String> {
    match v {
        Bson::Array(a) => a.iter().map(f).collect(),
        _ => Err(format!("{what} coordinates must be an array")),
    }
}

/// Parses a GeoJSON object (`{type, coordinates}` or a `GeometryCollection`).
pub fn geojson(d: &Document) -> Result<Geometry, String> {
    let ty = match d.get("type") {
        Some(Bson::String(t)) => t.as_str(),
        _ => {
            return Err(format!(
                "unknown GeoJSON type: {}",
                crate::render::show(&Bson::Document(d.clone()))
            ))
        }
    };
    if ty == "GeometryCollection" {
        return match d.get("geometries") {
            Some(Bson::Array(a)) => {
                let mut gs = Vec::with_capacity(a.len());
                for g in a {
                    match g {
                        Bson::Document(gd) => gs.push(geojson(gd)?),
                        _ => return Err("Element in 'geometries' must be an object".to_string()),
                    }
                }
                Ok(Geometry::Collection(gs))
            }
            _ => Err("GeometryCollection geometries must be an array".to_string()),
        };
    }
    let coords = d
        .get("coordinates")
        .ok_or_else(|| format!("coordinates missing in GeoJSON {ty}"))?;
    if let Some(crs) = d.get("crs") {
        if !matches!(crs, Bson::Document(_)) {
            return Err("GeoJSON coordinate reference system must be an object".to_string());
        }
    }
    Ok(match ty {
        "Point" => Geometry::Point(position(coords)?),
        "LineString" => Geometry::LineString(line(coords)?),
        "Polygon" => Geometry::Polygon(polygon(coords)?),
        "MultiPoint" => {
            let pts = positions(coords, "MultiPoint")?;
            if pts.is_empty() {
                return Err("MultiPoint coordinates must have at least 1 element".to_string());
            }
            Geometry::MultiPoint(pts)
        }
        "MultiLineString" => Geometry::MultiLineString(list(coords, "MultiLineString", line)?),
        "MultiPolygon" => Geometry::MultiPolygon(list(coords, "MultiPolygon", polygon)?),
        _ => {
            return Err(format!(
                "unknown GeoJSON type: {}",
                crate::render::show(&Bson::Document(d.clone()))
            ))
        }
    })
}

/// A stored value as a 2dsphere index reads it: GeoJSON, or a legacy pair within
/// longitude/latitude bounds.
pub fn parse_stored(v: &Bson) -> Result<Stored, String> {
    match v {
        Bson::Document(d) if d.contains_key("type") => Ok(Stored {
            geom: geojson(d)?,
            legacy: false,
            source: v.clone(),
        }),
        Bson::Document(_) | Bson::Array(_) => {
            let p = legacy_point(v).ok_or_else(|| {
                format!(
                    "Point must only contain numeric elements: {}",
                    crate::render::show(v)
                )
            })?;
            check_bounds(p)?;
            Ok(Stored {
                geom: Geometry::Point(p),
                legacy: true,
                source: v.clone(),
            })
        }
        _ => Err(format!(
            "geo element must be an array or object: {}",
            crate::render::show(v)
        )),
    }
}

/// The locations of a value a query looks at, leniently (what is not a location is
/// ignored): GeoJSON, a legacy pair, or an array of either.
pub fn locations(v: &Bson, out: &mut Vec<Stored>) {
    match v {
        Bson::Document(d) if d.contains_key("type") => {
            if let Ok(g) = geojson(d) {
                out.push(Stored {
                    geom: g,
                    legacy: false,
                    source: v.clone(),
                });
            }
        }
        Bson::Array(a) if a.first().is_some_and(|e| !is_number(e)) => {
            for e in a {
                if matches!(e, Bson::Array(_) | Bson::Document(_)) {
                    locations(e, out);
                }
            }
        }
        _ => {
            if let Some(p) = legacy_point(v) {
                out.push(Stored {
                    geom: Geometry::Point(p),
                    legacy: true,
                    source: v.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    #[test]
    fn geojson_shapes_parse_and_validate() {
        let p = geojson(&doc! {"type": "Point", "coordinates": [1, 2.5]}).unwrap();
        assert_eq!(p, Geometry::Point(Pt { x: 1.0, y: 2.5 }));
        let poly = doc! {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0]]]};
        assert!(matches!(geojson(&poly).unwrap(), Geometry::Polygon(_)));
        for bad in [
            doc! {"type": "Point", "coordinates": [200, 0]},
            doc! {"type": "Point", "coordinates": ["a", 0]},
            doc! {"type": "Point"},
            doc! {"type": "Blob", "coordinates": [0, 0]},
            doc! {"coordinates": [0, 0]},
            doc! {"type": "LineString", "coordinates": [[0, 0]]},
            doc! {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]},
            doc! {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [0, 0], [0, 0]]]},
        ] {
            assert!(geojson(&bad).is_err(), "{bad}");
        }
        let gc = doc! {"type": "GeometryCollection", "geometries": [
        {"type": "Point", "coordinates": [0, 0]},
        {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}]};
        assert!(matches!(geojson(&gc).unwrap(), Geometry::Collection(g) if g.len() == 2));
    }

    #[test]
    fn stored_and_legacy_locations() {
        assert_eq!(
            parse_stored(&bson!([1, 2])).unwrap().geom,
            Geometry::Point(Pt { x: 1.0, y: 2.0 })
        );
        assert!(parse_stored(&bson!({"lng": 1, "lat": 2})).unwrap().legacy);
        assert!(parse_stored(&bson!("x")).is_err());
        assert!(parse_stored(&bson!([1000, 2])).is_err());
        let mut out = Vec::new();
        locations(&bson!([[1, 2], [3, 4], "x"]), &mut out);
        assert_eq!(out.len(), 2);
    }
}

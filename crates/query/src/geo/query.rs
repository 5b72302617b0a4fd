//! The geospatial query operators: `$geoWithin` (old name `$within`) with `$geometry`,
//! `$box`, `$polygon`, `$center` or `$centerSphere`; `$geoIntersects`; `$near` and
//! `$nearSphere` with `$maxDistance`/`$minDistance`.

use super::shape::{self, legacy_point, Geometry, Pt, Stored};
use super::sphere;
use crate::compare::{as_f64, is_number};
use crate::error::{Error, Result};
use bson::{Bson, Document};

/// A region for `$geoWithin`.
#[derive(Debug, Clone, PartialEq)]
pub enum Region {
    /// GeoJSON (multi)polygons, on the sphere.
    Polygons(Vec<Vec<Vec<Pt>>>),
    /// `$centerSphere`: a spherical cap (radius in radians).
    Cap { center: Pt, radius: f64 },
    /// `$box` (flat): lower-left and upper-right corners.
    Box { lo: Pt, hi: Pt },
    /// `$polygon` (flat).
    FlatPolygon(Vec<Pt>),
    /// `$center` (flat).
    Circle { center: Pt, radius: f64 },
}

/// How `$near` measures distance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NearKind {
    /// A GeoJSON point: meters on the sphere.
    Meters,
    /// `$nearSphere` with a legacy point: radians on the sphere.
    Radians,
    /// `$near` with a legacy point: distance on the flat plane (2d index units).
    Flat,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NearPred {
    pub point: Pt,
    pub kind: NearKind,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum GeoPred {
    Within(Region),
    Intersects(Geometry),
    Near(NearPred),
}

fn bad(msg: impl Into<String>) -> Error {
    Error::bad_value(msg)
}

fn show(v: &Bson) -> String {
    crate::render::show(v)
}

fn flat_point(v: &Bson, what: &str) -> Result<Pt> {
    legacy_point(v).ok_or_else(|| {
        bad(format!(
            "{what}: point must be a pair of numbers, got {}",
            show(v)
        ))
    })
}

fn non_negative(v: &Bson, what: &str) -> Result<f64> {
    match as_f64(v) {
        Some(r) if is_number(v) && r >= 0.0 && !r.is_nan() => Ok(r),
        _ => Err(bad(format!("{what} must be a non-negative number"))),
    }
}

fn center_and_radius(v: &Bson, op: &str) -> Result<(Pt, f64)> {
    match v {
        Bson::Array(a) if a.len() == 2 => {
            let c = flat_point(&a[0], op)?;
            let r = non_negative(&a[1], "radius")?;
            Ok((c, r))
        }
        _ => Err(bad(format!(
            "{op} requires [center, radius], got {}",
            show(v)
        ))),
    }
}

fn geometry_arg(v: &Bson) -> Result<Geometry> {
    match v {
        Bson::Document(d) => shape::geojson(d).map_err(bad),
        _ => Err(bad(format!("$geometry must be an object, got {}", show(v)))),
    }
}

/// `$geoWithin`/`$within`'s argument.
pub fn parse_within(v: &Bson) -> Result<GeoPred> {
    let d = match v {
        Bson::Document(d) if d.len() == 1 => d,
        _ => {
            return Err(bad(format!(
                "$geoWithin requires one shape, got {}",
                show(v)
            )))
        }
    };
    let (k, arg) = d.iter().next().expect("one field");
    let region = match k.as_str() {
        "$geometry" => match geometry_arg(arg)? {
            Geometry::Polygon(rings) => Region::Polygons(vec![rings]),
            Geometry::MultiPolygon(polys) => Region::Polygons(polys),
            _ => {
                return Err(bad(format!(
                    "$geoWithin not supported with provided geometry: {}",
                    show(v)
                )))
            }
        },
        "$box" => match arg {
            Bson::Array(a) if a.len() == 2 => {
                let (p, q) = (flat_point(&a[0], "$box")?, flat_point(&a[1], "$box")?);
                Region::Box {
                    lo: Pt {
                        x: p.x.min(q.x),
                        y: p.y.min(q.y),
                    },
                    hi: Pt {
                        x: p.x.max(q.x),
                        y: p.y.max(q.y),
                    },
                }
            }
            _ => return Err(bad(format!("$box requires two corners, got {}", show(arg)))),
        },
        "$polygon" => match arg {
            Bson::Array(a) if a.len() >= 3 => Region::FlatPolygon(
                a.iter()
                    .map(|p| flat_point(p, "$polygon"))
                    .collect::<Result<_>>()?,
            ),
            _ => return Err(bad("Polygon must have at least 3 points")),
        },
        "$center" => {
            let (center, radius) = center_and_radius(arg, "$center")?;
            Region::Circle { center, radius }
        }
        "$centerSphere" => {
            let (center, radius) = center_and_radius(arg, "$centerSphere")?;
            shape::check_bounds(center).map_err(bad)?;
            Region::Cap { center, radius }
        }
        other => return Err(bad(format!("unknown geo specifier: {other}"))),
    };
    Ok(GeoPred::Within(region))
}

/// `$geoIntersects`'s argument.
pub fn parse_intersects(v: &Bson) -> Result<GeoPred> {
    match v {
        Bson::Document(d) if d.len() == 1 && d.contains_key("$geometry") => Ok(
            GeoPred::Intersects(geometry_arg(d.get("$geometry").unwrap())?),
        ),
        _ => Err(bad(format!(
            "$geoIntersects not supported with provided geometry: {}",
            show(v)
        ))),
    }
}

/// An operator document holding `$near` or `$nearSphere` (with `$maxDistance` and
/// `$minDistance` beside it or inside its `$geometry` form).
pub fn parse_near(d: &Document) -> Result<GeoPred> {
    let mut near: Option<(&str, &Bson)> = None;
    let (mut min, mut max) = (None, None);
    for (k, v) in d {
        match k.as_str() {
            "$near" | "$nearSphere" => {
                if near.is_some() {
                    return Err(bad("Too many geoNear expressions"));
                }
                near = Some((k.as_str(), v));
            }
            "$maxDistance" => max = Some(non_negative(v, "$maxDistance")?),
            "$minDistance" => min = Some(non_negative(v, "$minDistance")?),
            other => {
                return Err(bad(format!(
                    "geo near accepts just one argument when querying for a GeoJSON point. Extra field found: {other}"
                )))
            }
        }
    }
    let (op, v) =
        near.ok_or_else(|| bad("$maxDistance and $minDistance need $near or $nearSphere"))?;
    let sphere = op == "$nearSphere";
    let (point, kind) = match v {
        Bson::Document(nd) if nd.contains_key("$geometry") => {
            for (k, x) in nd {
                match k.as_str() {
                    "$geometry" => {}
                    "$maxDistance" => max = Some(non_negative(x, "$maxDistance")?),
                    "$minDistance" => min = Some(non_negative(x, "$minDistance")?),
                    other => {
                        return Err(bad(format!("invalid argument in geo near query: {other}")))
                    }
                }
            }
            match geometry_arg(nd.get("$geometry").unwrap())? {
                Geometry::Point(p) => (p, NearKind::Meters),
                _ => return Err(bad(format!("{op} requires a point, given {}", show(v)))),
            }
        }
        _ => {
            let p = legacy_point(v).ok_or_else(|| {
                bad(format!(
                    "{op} must be a point or {{$geometry: ...}}, got {}",
                    show(v)
                ))
            })?;
            (
                p,
                if sphere {
                    NearKind::Radians
                } else {
                    NearKind::Flat
                },
            )
        }
    };
    if kind == NearKind::Radians {
        if let Some(m) = max {
            if m > std::f64::consts::PI {
                return Err(bad(
                    "$maxDistance too large for $nearSphere (more than pi radians)",
                ));
            }
        }
    }
    Ok(GeoPred::Near(NearPred {
        point,
        kind,
        min,
        max,
    }))
}

impl Region {
    fn contains(&self, loc: &Stored) -> bool {
        match self {
            Region::Polygons(polys) => sphere::within_polygons(&loc.geom, polys),
            Region::Cap { center, radius } => sphere::within_cap(&loc.geom, *center, *radius),
            // Flat shapes hold points only.
            _ => match loc.geom.only_points() {
                Some(pts) => pts.iter().all(|p| self.flat_contains(*p)),
                None => false,
            },
        }
    }

    fn flat_contains(&self, p: Pt) -> bool {
        match self {
            Region::Box { lo, hi } => p.x >= lo.x && p.x <= hi.x && p.y >= lo.y && p.y <= hi.y,
            Region::FlatPolygon(poly) => sphere::flat_in_polygon(p, poly),
            Region::Circle { center, radius } => sphere::flat_distance(p, *center) <= *radius,
            _ => false,
        }
    }
}

impl NearPred {
    /// The distance from the query point to a location (None when it cannot be
    /// measured: a line or polygon on the flat plane).
    fn distance_to(&self, loc: &Stored) -> Option<f64> {
        match self.kind {
            NearKind::Meters => {
                Some(sphere::distance(self.point, &loc.geom) * sphere::EARTH_RADIUS_M)
            }
            NearKind::Radians => Some(sphere::distance(self.point, &loc.geom)),
            NearKind::Flat => loc
                .geom
                .only_points()?
                .iter()
                .map(|p| sphere::flat_distance(*p, self.point))
                .reduce(f64::min),
        }
    }

    fn in_range(&self, d: f64) -> bool {
        self.max.is_none_or(|m| d <= m) && self.min.is_none_or(|m| d >= m)
    }

    /// The smallest distance to any location within the bounds, with that location.
    pub fn nearest<'a>(&self, locs: &'a [Stored]) -> Option<(f64, &'a Stored)> {
        locs.iter()
            .filter_map(|l| self.distance_to(l).map(|d| (d, l)))
            .filter(|(d, _)| self.in_range(*d))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }
}

impl GeoPred {
    /// Whether any of the values a path reached satisfies the predicate.
    pub fn matches(&self, values: &[Option<&Bson>]) -> bool {
        let mut locs = Vec::new();
        for v in values.iter().flatten() {
            shape::locations(v, &mut locs);
        }
        match self {
            GeoPred::Within(r) => locs.iter().any(|l| r.contains(l)),
            GeoPred::Intersects(g) => locs.iter().any(|l| sphere::intersects(&l.geom, g)),
            GeoPred::Near(n) => n.nearest(&locs).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn within(spec: Bson, v: Bson) -> bool {
        parse_within(&spec).unwrap().matches(&[Some(&v)])
    }

    #[test]
    fn within_shapes() {
        let poly = bson!({"$geometry": {"type": "Polygon", "coordinates": [[[40, 5], [40, 6], [41, 6], [41, 5], [40, 5]]]}});
        assert!(within(
            poly.clone(),
            bson!({"type": "Point", "coordinates": [40.5, 5.5]})
        ));
        assert!(within(poly.clone(), bson!([40.5, 5.5])));
        assert!(!within(poly, bson!([42, 5.5])));
        assert!(within(bson!({"$box": [[0, 0], [10, 10]]}), bson!([10, 0])));
        assert!(!within(bson!({"$box": [[0, 0], [10, 10]]}), bson!([11, 0])));
        assert!(within(
            bson!({"$center": [[0, 0], 5]}),
            bson!({"x": 3, "y": 4})
        ));
        assert!(within(
            bson!({"$polygon": [[0, 0], [4, 0], [0, 4]]}),
            bson!([1, 1])
        ));
        assert!(within(
            bson!({"$centerSphere": [[0, 0], 0.1]}),
            bson!({"type": "LineString", "coordinates": [[0, 0], [1, 1]]})
        ));
        // 2d arrays of locations: any one within
        assert!(within(
            bson!({"$box": [[0, 0], [1, 1]]}),
            bson!([[5, 5], [0.5, 0.5]])
        ));
        for bad in [
            bson!({"$geometry": {"type": "Point", "coordinates": [0, 0]}}),
            bson!({"$box": [[0, 0]]}),
            bson!({"$polygon": [[0, 0], [1, 1]]}),
            bson!({"$center": [[0, 0], -1]}),
            bson!({"$foo": 1}),
            bson!(5),
        ] {
            assert!(parse_within(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn near_forms() {
        let n = parse_near(&doc! {"$near": {"$geometry": {"type": "Point", "coordinates": [0, 0]}, "$maxDistance": 200000}}).unwrap();
        let GeoPred::Near(n) = n else { panic!() };
        assert_eq!(n.kind, NearKind::Meters);
        assert!(GeoPred::Near(n.clone()).matches(&[Some(&bson!([1, 0]))]));
        assert!(!GeoPred::Near(n).matches(&[Some(&bson!([2, 0]))]));
        let GeoPred::Near(n) = parse_near(&doc! {"$near": [0, 0], "$maxDistance": 5}).unwrap()
        else {
            panic!()
        };
        assert_eq!(n.kind, NearKind::Flat);
        assert_eq!(n.max, Some(5.0));
        let GeoPred::Near(n) =
            parse_near(&doc! {"$nearSphere": [0, 0], "$minDistance": 0.1}).unwrap()
        else {
            panic!()
        };
        assert_eq!(n.kind, NearKind::Radians);
        assert!(parse_near(&doc! {"$near": [0, 0], "$maxDistance": -1}).is_err());
        assert!(parse_near(
            &doc! {"$near": {"$geometry": {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}}}
        )
        .is_err());
        assert!(parse_near(&doc! {"$near": [0, 0], "$gt": 1}).is_err());
    }

    #[test]
    fn intersects() {
        let q = parse_intersects(
            &bson!({"$geometry": {"type": "LineString", "coordinates": [[-1, 0.5], [2, 0.5]]}}),
        )
        .unwrap();
        assert!(q.matches(&[Some(
            &bson!({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]]})
        )]));
        assert!(!q.matches(&[Some(&bson!({"type": "Point", "coordinates": [5, 5]}))]));
        assert!(parse_intersects(&bson!({"$box": [[0, 0], [1, 1]]})).is_err());
    }
}

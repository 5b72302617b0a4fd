//! Exact predicates on the sphere (GeoJSON semantics: edges are great-circle arcs, a
//! polygon is the smaller region its rings bound) and on the flat plane (legacy shapes).
//!
//! Points become unit vectors. A point is tested against a ring in the gnomonic
//! projection centred on the ring, which maps great-circle arcs to straight segments, so
//! the planar crossing test is exact there; arcs are intersected in 3-D.

use super::shape::{Geometry, Pt};

/// mongod's Earth radius for distances in meters (`kRadiusOfEarthInMeters`).
pub const EARTH_RADIUS_M: f64 = 6_378_100.0;

const EPS: f64 = 1e-12;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct V3(f64, f64, f64);

impl V3 {
    fn dot(self, o: V3) -> f64 {
        self.0 * o.0 + self.1 * o.1 + self.2 * o.2
    }
    fn cross(self, o: V3) -> V3 {
        V3(
            self.1 * o.2 - self.2 * o.1,
            self.2 * o.0 - self.0 * o.2,
            self.0 * o.1 - self.1 * o.0,
        )
    }
    fn norm(self) -> f64 {
        self.dot(self).sqrt()
    }
    fn scale(self, k: f64) -> V3 {
        V3(self.0 * k, self.1 * k, self.2 * k)
    }
    fn add(self, o: V3) -> V3 {
        V3(self.0 + o.0, self.1 + o.1, self.2 + o.2)
    }
    fn unit(self) -> V3 {
        let n = self.norm();
        if n == 0.0 {
            self
        } else {
            self.scale(1.0 / n)
        }
    }
}

pub fn to_v3(p: Pt) -> V3 {
    let (lng, lat) = (p.x.to_radians(), p.y.to_radians());
    V3(lat.cos() * lng.cos(), lat.cos() * lng.sin(), lat.sin())
}

/// The angle between two points, in radians.
pub fn angle(a: Pt, b: Pt) -> f64 {
    angle_v(to_v3(a), to_v3(b))
}

fn angle_v(a: V3, b: V3) -> f64 {
    a.cross(b).norm().atan2(a.dot(b))
}

/// Distance from `p` to the arc `a`-`b`, in radians.
fn dist_to_arc(p: V3, a: V3, b: V3) -> f64 {
    let n = a.cross(b);
    if n.norm() < EPS {
        return angle_v(p, a).min(angle_v(p, b));
    }
    let n = n.unit();
    // The closest point of the great circle; is it on the arc?
    let proj = p.add(n.scale(-p.dot(n)));
    if proj.norm() > EPS {
        let c = proj.unit();
        if a.cross(c).dot(n) >= 0.0 && c.cross(b).dot(n) >= 0.0 {
            return p.dot(n).abs().min(1.0).asin();
        }
    }
    angle_v(p, a).min(angle_v(p, b))
}

fn on_arc(p: V3, a: V3, b: V3) -> bool {
    dist_to_arc(p, a, b) < 1e-9
}

/// Whether arcs `a`-`b` and `c`-`d` share a point.
fn arcs_intersect(a: V3, b: V3, c: V3, d: V3) -> bool {
    if on_arc(a, c, d) || on_arc(b, c, d) || on_arc(c, a, b) || on_arc(d, a, b) {
        return true;
    }
    let n1 = a.cross(b);
    let n2 = c.cross(d);
    let x = n1.cross(n2);
    if x.norm() < EPS {
        return false; // same great circle, and no endpoint on the other: disjoint
    }
    let x = x.unit();
    for cand in [x, x.scale(-1.0)] {
        let on1 = a.cross(cand).dot(n1) > 0.0 && cand.cross(b).dot(n1) > 0.0;
        let on2 = c.cross(cand).dot(n2) > 0.0 && cand.cross(d).dot(n2) > 0.0;
        if on1 && on2 {
            return true;
        }
    }
    false
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Inside,
    Boundary,
    Outside,
}

/// Planar point-in-ring with the boundary detected.
fn flat_side(p: (f64, f64), ring: &[(f64, f64)]) -> Side {
    let mut inside = false;
    for w in ring.windows(2) {
        let (a, b) = (w[0], w[1]);
        let cross = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
        let scale = (b.0 - a.0).abs() + (b.1 - a.1).abs() + 1.0;
        if cross.abs() <= 1e-12 * scale
            && p.0 >= a.0.min(b.0) - 1e-12
            && p.0 <= a.0.max(b.0) + 1e-12
            && p.1 >= a.1.min(b.1) - 1e-12
            && p.1 <= a.1.max(b.1) + 1e-12
        {
            return Side::Boundary;
        }
        if (a.1 > p.1) != (b.1 > p.1) {
            let x = a.0 + (p.1 - a.1) * (b.0 - a.0) / (b.1 - a.1);
            if p.0 < x {
                inside = !inside;
            }
        }
    }
    if inside {
        Side::Inside
    } else {
        Side::Outside
    }
}

/// A ring prepared for spherical point tests: its vertices, and the gnomonic
/// projection about its centre (None when it spans a hemisphere or more).
/// A ring's gnomonic projection: its centre and plane axes, and the projected vertices.
type RingProjection = (V3, V3, V3, Vec<(f64, f64)>);

struct SphereRing {
    v: Vec<V3>,
    proj: Option<RingProjection>,
    flat: Vec<(f64, f64)>,
}

impl SphereRing {
    fn new(ring: &[Pt]) -> SphereRing {
        let v: Vec<V3> = ring.iter().map(|p| to_v3(*p)).collect();
        let n = v.len().saturating_sub(1).max(1);
        let c = v[..n]
            .iter()
            .fold(V3(0.0, 0.0, 0.0), |s, x| s.add(*x))
            .unit();
        let proj = if v.iter().all(|x| x.dot(c) > 1e-9) {
            let axis = if c.2.abs() < 0.9 {
                V3(0.0, 0.0, 1.0)
            } else {
                V3(1.0, 0.0, 0.0)
            };
            let e1 = c.cross(axis).unit();
            let e2 = c.cross(e1);
            let pts = v.iter().map(|x| gnomonic(*x, c, e1, e2)).collect();
            Some((c, e1, e2, pts))
        } else {
            None
        };
        SphereRing {
            v,
            proj,
            flat: ring.iter().map(|p| (p.x, p.y)).collect(),
        }
    }

    fn side(&self, p: Pt) -> Side {
        match &self.proj {
            Some((c, e1, e2, pts)) => {
                let pv = to_v3(p);
                if pv.dot(*c) <= 1e-9 {
                    return Side::Outside;
                }
                // Exact boundary test first (the projection's rounding aside).
                if self.v.windows(2).any(|w| on_arc(pv, w[0], w[1])) {
                    return Side::Boundary;
                }
                flat_side(gnomonic(pv, *c, *e1, *e2), pts)
            }
            // A ring of a hemisphere or more: tested in longitude/latitude.
            None => flat_side((p.x, p.y), &self.flat),
        }
    }

    fn edges(&self) -> impl Iterator<Item = (V3, V3)> + '_ {
        self.v.windows(2).map(|w| (w[0], w[1]))
    }
}

fn gnomonic(x: V3, c: V3, e1: V3, e2: V3) -> (f64, f64) {
    let w = x.scale(1.0 / x.dot(c));
    (w.dot(e1), w.dot(e2))
}

struct SpherePolygon {
    rings: Vec<SphereRing>,
}

impl SpherePolygon {
    fn new(rings: &[Vec<Pt>]) -> SpherePolygon {
        SpherePolygon {
            rings: rings.iter().map(|r| SphereRing::new(r)).collect(),
        }
    }

    /// Inside the shell (boundary included) and not strictly inside a hole.
    fn contains(&self, p: Pt) -> bool {
        let Some((shell, holes)) = self.rings.split_first() else {
            return false;
        };
        shell.side(p) != Side::Outside && holes.iter().all(|h| h.side(p) != Side::Inside)
    }

    fn edges(&self) -> impl Iterator<Item = (V3, V3)> + '_ {
        self.rings.iter().flat_map(|r| r.edges())
    }
}

/// The parts of a geometry: points, arcs' polylines, polygons.
struct Parts {
    points: Vec<Pt>,
    lines: Vec<Vec<Pt>>,
    polygons: Vec<Vec<Vec<Pt>>>,
}

fn parts(g: &Geometry) -> Parts {
    let mut p = Parts {
        points: Vec::new(),
        lines: Vec::new(),
        polygons: Vec::new(),
    };
    fn walk(g: &Geometry, p: &mut Parts) {
        match g {
            Geometry::Point(x) => p.points.push(*x),
            Geometry::MultiPoint(xs) => p.points.extend(xs),
            Geometry::LineString(l) => p.lines.push(l.clone()),
            Geometry::MultiLineString(ls) => p.lines.extend(ls.iter().cloned()),
            Geometry::Polygon(r) => p.polygons.push(r.clone()),
            Geometry::MultiPolygon(ps) => p.polygons.extend(ps.iter().cloned()),
            Geometry::Collection(gs) => gs.iter().for_each(|g| walk(g, p)),
        }
    }
    walk(g, &mut p);
    p
}

fn line_edges(l: &[Pt]) -> Vec<(V3, V3)> {
    l.windows(2).map(|w| (to_v3(w[0]), to_v3(w[1]))).collect()
}

/// `$geoIntersects`: do the two geometries share a point?
pub fn intersects(a: &Geometry, b: &Geometry) -> bool {
    let (pa, pb) = (parts(a), parts(b));
    let polys_a: Vec<SpherePolygon> = pa.polygons.iter().map(|r| SpherePolygon::new(r)).collect();
    let polys_b: Vec<SpherePolygon> = pb.polygons.iter().map(|r| SpherePolygon::new(r)).collect();
    let edges = |lines: &[Vec<Pt>], polys: &[SpherePolygon]| -> Vec<(V3, V3)> {
        let mut e: Vec<(V3, V3)> = lines.iter().flat_map(|l| line_edges(l)).collect();
        for p in polys {
            e.extend(p.edges());
        }
        e
    };
    let (ea, eb) = (edges(&pa.lines, &polys_a), edges(&pb.lines, &polys_b));
    // Points against everything.
    for p in &pa.points {
        let v = to_v3(*p);
        if pb.points.iter().any(|q| angle(*p, *q) < 1e-9)
            || eb.iter().any(|(x, y)| on_arc(v, *x, *y))
            || polys_b.iter().any(|poly| poly.contains(*p))
        {
            return true;
        }
    }
    for q in &pb.points {
        let v = to_v3(*q);
        if ea.iter().any(|(x, y)| on_arc(v, *x, *y)) || polys_a.iter().any(|poly| poly.contains(*q))
        {
            return true;
        }
    }
    // Crossing edges.
    for (a1, a2) in &ea {
        for (b1, b2) in &eb {
            if arcs_intersect(*a1, *a2, *b1, *b2) {
                return true;
            }
        }
    }
    // One inside the other without crossing: a vertex of one is inside the other's polygon.
    let verts = |lines: &[Vec<Pt>], polys: &[Vec<Vec<Pt>>]| -> Vec<Pt> {
        lines
            .iter()
            .flatten()
            .chain(polys.iter().flatten().flatten())
            .copied()
            .collect()
    };
    let (va, vb) = (
        verts(&pa.lines, &pa.polygons),
        verts(&pb.lines, &pb.polygons),
    );
    va.iter()
        .any(|p| polys_b.iter().any(|poly| poly.contains(*p)))
        || vb
            .iter()
            .any(|p| polys_a.iter().any(|poly| poly.contains(*p)))
}

/// `$geoWithin` a (multi)polygon: is all of `g` inside `region`?
pub fn within_polygons(g: &Geometry, region: &[Vec<Vec<Pt>>]) -> bool {
    let polys: Vec<SpherePolygon> = region.iter().map(|r| SpherePolygon::new(r)).collect();
    let region_edges: Vec<(V3, V3)> = polys.iter().flat_map(|p| p.edges()).collect();
    let p = parts(g);
    let inside = |pt: &Pt| polys.iter().any(|poly| poly.contains(*pt));
    if !p.points.iter().all(inside) {
        return false;
    }
    let mut shapes: Vec<&[Pt]> = p.lines.iter().map(|l| l.as_slice()).collect();
    for poly in &p.polygons {
        shapes.extend(poly.iter().map(|r| r.as_slice()));
    }
    for shape in shapes {
        if !shape.iter().all(inside) {
            return false;
        }
        // An edge leaving the region crosses its boundary away from the edge's ends.
        for (a, b) in line_edges(shape) {
            for (c, d) in &region_edges {
                if arcs_intersect(a, b, *c, *d)
                    && !on_arc(*c, a, b)
                    && !on_arc(*d, a, b)
                    && !on_arc(a, *c, *d)
                    && !on_arc(b, *c, *d)
                {
                    return false;
                }
            }
        }
    }
    // A hole of the region strictly inside one of g's polygons.
    for poly in &p.polygons {
        let sp = SpherePolygon::new(poly);
        for r in region {
            for hole in r.iter().skip(1) {
                if hole.iter().any(|h| sp.rings[0].side(*h) == Side::Inside) {
                    return false;
                }
            }
        }
    }
    true
}

/// `$centerSphere`: is all of `g` within `radius` radians of `center`? (A cap smaller
/// than a hemisphere is convex, so the vertices decide.)
pub fn within_cap(g: &Geometry, center: Pt, radius: f64) -> bool {
    g.points()
        .iter()
        .all(|p| angle(*p, center) <= radius + 1e-12)
}

/// Distance in radians from `p` to the nearest point of `g` (0 inside a polygon).
pub fn distance(p: Pt, g: &Geometry) -> f64 {
    let parts = parts(g);
    let v = to_v3(p);
    let mut best = f64::INFINITY;
    for q in &parts.points {
        best = best.min(angle(p, *q));
    }
    for l in &parts.lines {
        for (a, b) in line_edges(l) {
            best = best.min(dist_to_arc(v, a, b));
        }
    }
    for poly in &parts.polygons {
        let sp = SpherePolygon::new(poly);
        if sp.contains(p) {
            return 0.0;
        }
        for (a, b) in sp.edges() {
            best = best.min(dist_to_arc(v, a, b));
        }
    }
    best
}

// ------------------------------------------------------------------ flat plane

/// Planar point in polygon (legacy `$polygon`), boundary included.
pub fn flat_in_polygon(p: Pt, poly: &[Pt]) -> bool {
    let mut ring: Vec<(f64, f64)> = poly.iter().map(|q| (q.x, q.y)).collect();
    if ring.first() != ring.last() {
        ring.push(ring[0]);
    }
    flat_side((p.x, p.y), &ring) != Side::Outside
}

pub fn flat_distance(a: Pt, b: Pt) -> f64 {
    ((a.x - b.x).powi(2) + (a.y - b.y).powi(2)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(x: f64, y: f64) -> Pt {
        Pt { x, y }
    }

    fn square(x0: f64, y0: f64, x1: f64, y1: f64) -> Vec<Vec<Pt>> {
        vec![vec![
            pt(x0, y0),
            pt(x1, y0),
            pt(x1, y1),
            pt(x0, y1),
            pt(x0, y0),
        ]]
    }

    #[test]
    fn points_in_polygons_on_the_sphere() {
        let sq = SpherePolygon::new(&square(40.0, 5.0, 41.0, 6.0));
        assert!(sq.contains(pt(40.5, 5.5)));
        assert!(sq.contains(pt(40.0, 5.5))); // on the boundary
        assert!(!sq.contains(pt(42.0, 5.5)));
        assert!(!sq.contains(pt(-139.5, -5.5))); // the antipode
                                                 // a hole
        let mut holed = square(0.0, 0.0, 10.0, 10.0);
        holed.extend(square(4.0, 4.0, 6.0, 6.0));
        let h = SpherePolygon::new(&holed);
        assert!(h.contains(pt(1.0, 1.0)));
        assert!(!h.contains(pt(5.0, 5.0)));
        // a polygon around a pole
        let cap = SpherePolygon::new(&[vec![
            pt(0.0, 80.0),
            pt(90.0, 80.0),
            pt(180.0, 80.0),
            pt(-90.0, 80.0),
            pt(0.0, 80.0),
        ]]);
        assert!(cap.contains(pt(45.0, 89.0)));
        assert!(!cap.contains(pt(45.0, 70.0)));
    }

    #[test]
    fn edges_are_great_circle_arcs() {
        // Along latitude 60 the great-circle arc between (0,60) and (90,60) bulges toward the
        // pole: (45, 61) is south of the arc, hence outside the triangle with the pole.
        let tri = Geometry::Polygon(vec![vec![
            pt(0.0, 60.0),
            pt(90.0, 60.0),
            pt(45.0, 89.0),
            pt(0.0, 60.0),
        ]]);
        assert!(!intersects(&Geometry::Point(pt(45.0, 61.0)), &tri));
        assert!(intersects(&Geometry::Point(pt(45.0, 75.0)), &tri));
    }

    #[test]
    fn intersections_and_within() {
        let region = square(0.0, 0.0, 10.0, 10.0);
        let poly = Geometry::Polygon(region.clone());
        let crossing = Geometry::LineString(vec![pt(-5.0, 5.0), pt(5.0, 5.0)]);
        let outside = Geometry::LineString(vec![pt(-5.0, 5.0), pt(-1.0, 5.0)]);
        assert!(intersects(&crossing, &poly));
        assert!(!intersects(&outside, &poly));
        assert!(!within_polygons(&crossing, std::slice::from_ref(&region)));
        let inner = Geometry::LineString(vec![pt(1.0, 1.0), pt(9.0, 9.0)]);
        assert!(within_polygons(&inner, std::slice::from_ref(&region)));
        assert!(intersects(&inner, &poly));
        // a polygon containing the region intersects it without any crossing edge
        let big = Geometry::Polygon(square(-20.0, -20.0, 20.0, 20.0));
        assert!(intersects(&big, &poly));
        assert!(!within_polygons(&big, &[region]));
    }

    #[test]
    fn distances() {
        // one degree of longitude at the equator
        let d = angle(pt(0.0, 0.0), pt(1.0, 0.0)) * EARTH_RADIUS_M;
        assert!((d - 111_318.845).abs() < 1.0, "{d}");
        let line = Geometry::LineString(vec![pt(-10.0, 1.0), pt(10.0, 1.0)]);
        // the arc bulges poleward: at longitude 0 it is at atan(tan 1° / cos 10°)
        let d = distance(pt(0.0, 0.0), &line).to_degrees();
        let want = (1f64.to_radians().tan() / 10f64.to_radians().cos())
            .atan()
            .to_degrees();
        assert!((d - want).abs() < 1e-9, "{d}");
        assert_eq!(
            distance(
                pt(5.0, 5.0),
                &Geometry::Polygon(square(0.0, 0.0, 10.0, 10.0))
            ),
            0.0
        );
        assert!(within_cap(
            &Geometry::Point(pt(1.0, 0.0)),
            pt(0.0, 0.0),
            0.02
        ));
        assert!(!within_cap(
            &Geometry::Point(pt(2.0, 0.0)),
            pt(0.0, 0.0),
            0.02
        ));
    }

    #[test]
    fn flat_polygon() {
        let tri = [pt(0.0, 0.0), pt(4.0, 0.0), pt(0.0, 4.0)];
        assert!(flat_in_polygon(pt(1.0, 1.0), &tri));
        assert!(flat_in_polygon(pt(2.0, 2.0), &tri)); // on the hypotenuse
        assert!(!flat_in_polygon(pt(3.0, 3.0), &tri));
    }
}

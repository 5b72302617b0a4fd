//! Nearest-first geo reads: the order of `$near`/`$nearSphere` results, and the
//! `$geoNear` aggregation stage (distanceField, spherical, key, query, maxDistance,
//! minDistance, includeLocs, distanceMultiplier).

use crate::catalog::namespace::Namespace;
use crate::read::{self, Scan};
use crate::Engine;
use bson::{doc, Bson, Document};
use tailstream_query::compare::{as_f64, is_number};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::geo::shape::{self, Stored};
use tailstream_query::matcher::Matcher;

/// Documents with their distance to the filter's `$near` point, nearest first (ties in
/// input order); documents without a location in bounds are dropped.
pub(crate) fn by_distance(
    matcher: &Matcher,
    docs: impl Iterator<Item = Document>,
) -> Vec<(f64, Document, Stored)> {
    let mut out: Vec<(f64, Document, Stored)> = docs
        .filter_map(|d| {
            matcher
                .geo_near_distance(&d)
                .map(|(dist, loc)| (dist, d, loc))
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// A parsed `$geoNear` specification.
struct GeoNearSpec {
    near: Bson,
    geojson: bool,
    distance_field: Option<String>,
    spherical: bool,
    max: Option<Bson>,
    min: Option<Bson>,
    query: Document,
    multiplier: f64,
    include_locs: Option<String>,
    key: Option<String>,
}

fn parse_spec(spec: &Bson) -> Result<GeoNearSpec> {
    let d = spec
        .as_document()
        .ok_or_else(|| Error::failed_to_parse("$geoNear argument must be an object"))?;
    let mut s = GeoNearSpec {
        near: Bson::Null,
        geojson: false,
        distance_field: None,
        spherical: false,
        max: None,
        min: None,
        query: Document::new(),
        multiplier: 1.0,
        include_locs: None,
        key: None,
    };
    let number = |v: &Bson, what: &str| -> Result<f64> {
        match as_f64(v) {
            Some(x) if is_number(v) && x >= 0.0 => Ok(x),
            _ => Err(Error::bad_value(format!(
                "{what} must be a non-negative number"
            ))),
        }
    };
    for (k, v) in d {
        match k.as_str() {
            "near" => {
                let point = match v {
                    Bson::Document(nd) if nd.contains_key("type") => {
                        match shape::geojson(nd).map_err(Error::bad_value)? {
                            shape::Geometry::Point(_) => true,
                            _ => {
                                return Err(Error::bad_value(
                                    "$geoNear 'near' must be a GeoJSON Point or a legacy coordinate pair",
                                ))
                            }
                        }
                    }
                    Bson::Array(_) | Bson::Document(_) if shape::legacy_point(v).is_some() => false,
                    _ => {
                        return Err(Error::location(
                            16605,
                            "$geoNear requires a 'near' option as an Array",
                        ))
                    }
                };
                s.geojson = point;
                s.near = v.clone();
            }
            "distanceField" => match v {
                Bson::String(f) => s.distance_field = Some(f.clone()),
                _ => {
                    return Err(Error::location(
                        16606,
                        "$geoNear requires a 'distanceField' option as a String",
                    ))
                }
            },
            "spherical" => s.spherical = tailstream_query::expr::truthy(&Some(v.clone())),
            "maxDistance" => {
                number(v, "maxDistance")?;
                s.max = Some(v.clone());
            }
            "minDistance" => {
                number(v, "minDistance")?;
                s.min = Some(v.clone());
            }
            "query" => {
                s.query = v
                    .as_document()
                    .cloned()
                    .ok_or_else(|| Error::type_mismatch("$geoNear 'query' must be an object"))?
            }
            "distanceMultiplier" => s.multiplier = number(v, "distanceMultiplier")?,
            "includeLocs" => match v {
                Bson::String(f) => s.include_locs = Some(f.clone()),
                _ => {
                    return Err(Error::type_mismatch(
                        "$geoNear 'includeLocs' must be a string",
                    ))
                }
            },
            "key" => match v {
                Bson::String(f) if !f.is_empty() => s.key = Some(f.clone()),
                _ => {
                    return Err(Error::bad_value(
                        "$geoNear parameter 'key' must be a non-empty string",
                    ))
                }
            },
            "num" | "limit" => {
                return Err(Error::failed_to_parse(format!(
                    "$geoNear no longer supports the '{k}' option; use a $limit stage"
                )))
            }
            other => {
                return Err(Error::failed_to_parse(format!(
                    "Unknown argument to $geoNear: {other}"
                )))
            }
        }
    }
    if matches!(s.near, Bson::Null) {
        return Err(Error::location(
            16605,
            "$geoNear requires a 'near' option as an Array",
        ));
    }
    Ok(s)
}

impl Engine {
    /// Runs a leading `$geoNear` stage: the matching documents nearest first, each with
    /// its distance (and location) added.
    pub(crate) fn geo_near_stage(
        &self,
        ns: &Namespace,
        spec: &Bson,
        view: Option<Vec<Document>>,
    ) -> Result<Vec<Document>> {
        let s = parse_spec(spec)?;
        let Some(meta) = self.collection(ns) else {
            return Ok(Vec::new());
        };
        // Which geo index (hence field, and flat or spherical distances).
        let geo: Vec<(String, bool)> = meta
            .indexes
            .iter()
            .filter_map(|i| {
                let (fields, is_2d) = i.plugin.as_ref()?.geo_fields()?;
                Some(
                    fields
                        .into_iter()
                        .map(move |f| (i.pattern.fields[f].0.clone(), is_2d)),
                )
            })
            .flatten()
            .collect();
        let (path, is_2d) = match &s.key {
            Some(k) => geo.iter().find(|(p, _)| p == k).cloned().ok_or_else(|| {
                Error::new(
                    codes::INDEX_NOT_FOUND,
                    format!(
                        "$geoNear requires a 2d or 2dsphere index on '{k}', but none were found"
                    ),
                )
            })?,
            None => {
                let twod: Vec<_> = geo.iter().filter(|(_, d)| *d).collect();
                let sphere: Vec<_> = geo.iter().filter(|(_, d)| !*d).collect();
                match (twod.len(), sphere.len()) {
                    (1, _) => twod[0].clone(),
                    (0, 1) => sphere[0].clone(),
                    (0, 0) => {
                        return Err(Error::new(
                            codes::INDEX_NOT_FOUND,
                            "$geoNear requires a 2d or 2dsphere index, but none were found",
                        ))
                    }
                    (n, _) if n > 1 => {
                        return Err(Error::new(
                            codes::INDEX_NOT_FOUND,
                            format!("There is more than one 2d index on {}; unsure which to use for $geoNear", ns.full()),
                        ))
                    }
                    _ => {
                        return Err(Error::new(
                            codes::INDEX_NOT_FOUND,
                            format!("There is more than one 2dsphere index on {}; unsure which to use for $geoNear", ns.full()),
                        ))
                    }
                }
            }
        };
        if s.geojson && is_2d {
            return Err(Error::bad_value("unable to find index for $geoNear query"));
        }
        let mut near = Document::new();
        // Meters for a GeoJSON point, radians on the sphere, else the 2d plane's units.
        if s.geojson {
            near.insert("$near", doc! {"$geometry": s.near.clone()});
        } else if s.spherical || !is_2d {
            near.insert("$nearSphere", s.near.clone());
        } else {
            near.insert("$near", s.near.clone());
        }
        if let Some(m) = &s.max {
            near.insert("$maxDistance", m.clone());
        }
        if let Some(m) = &s.min {
            near.insert("$minDistance", m.clone());
        }
        let mut filter = doc! {path.clone(): near};
        if !s.query.is_empty() {
            filter = doc! {"$and": [filter, s.query.clone()]};
        }
        let matcher = Matcher::new(&filter)?;
        let docs: Vec<Document> = match view {
            Some(docs) => docs.into_iter().filter(|d| matcher.matches(d)).collect(),
            None => {
                let plan = read::plan(&meta, &matcher, None, None)?;
                Scan::new(plan.access)
                    .collect_all(&self.store, meta.id, &matcher)?
                    .into_iter()
                    .map(|(_, d)| d)
                    .collect()
            }
        };
        Ok(by_distance(&matcher, docs.into_iter())
            .into_iter()
            .map(|(dist, mut d, loc)| {
                if let Some(f) = &s.distance_field {
                    tailstream_query::pipeline::set_path(
                        &mut d,
                        f,
                        Bson::Double(dist * s.multiplier),
                    );
                }
                if let Some(f) = &s.include_locs {
                    tailstream_query::pipeline::set_path(&mut d, f, loc.source);
                }
                d
            })
            .collect())
    }
}

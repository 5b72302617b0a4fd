//! Geospatial data: GeoJSON and legacy coordinate pairs (`shape`), exact predicates on
//! the sphere and the plane (`sphere`), the query operators (`query`) and the `2d` /
//! `2dsphere` index keys (`index`).

pub mod index;
pub mod query;
pub mod shape;
pub mod sphere;

pub use query::{GeoPred, NearKind, NearPred};

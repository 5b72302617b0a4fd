//! Pure document logic shared by the engine: BSON ordering, key encoding,
//! query matching, update operators, projection, sorting and aggregation.
//! Nothing here touches disk or the network, so all of it is unit-tested in isolation.

pub mod args;
pub mod bson_size;
pub mod collation;
pub mod compare;
pub mod error;
pub mod expr;
pub mod geo;
pub mod hashed;
pub mod index_keys;
pub mod index_plugin;
pub mod keystring;
pub mod matcher;
pub mod op_stats;
pub mod path;
pub mod pipeline;
pub mod projection;
pub mod random;
pub mod regex_engine;
pub mod render;
pub mod script;
pub mod sort;
pub mod text;
pub mod types;
pub mod update;
pub mod validation_error;
pub mod value_set;

pub use error::{Error, Result};

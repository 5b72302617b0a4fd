//! mongod's one-line rendering of BSON values in messages, e.g. the
//! `dup key: { _id: 1 }` of an E11000 error: the query crate's renderer, under the
//! names the engine's callers use.

pub use tailstream_query::render::{bson_to_string as value_to_string, doc_to_string};

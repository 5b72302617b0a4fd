//! `$out` and `$merge`: checked here, written by the engine
//! ([`Pipeline::output_stage`](super::super::Pipeline::output_stage)).

use super::{type_name, Stage};
use crate::error::{Error, Result};
use bson::Bson;

/// `$out` / `$merge`: a string or a document (the engine checks the rest).
pub(crate) fn parse_output(name: &str, arg: &Bson) -> Result<Stage> {
    match (name, arg) {
        ("$out", Bson::String(_)) | ("$out", Bson::Document(_)) => {}
        ("$merge", Bson::String(_)) | ("$merge", Bson::Document(_)) => {}
        _ => {
            return Err(Error::failed_to_parse(format!(
                "{name} stage argument must be a string or an object, but found {}",
                type_name(arg)
            )))
        }
    }
    Ok(Stage::Output)
}

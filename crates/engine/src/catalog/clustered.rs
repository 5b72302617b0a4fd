//! The `clusteredIndex` option of `create`. Every collection here is clustered by `_id`
//! already (documents are stored under their `_id`, with no separate `_id` index), so a
//! clustered collection differs only in how its `_id` index is named and listed.

use bson::{doc, Bson, Document};
use tailstream_query::args;
use tailstream_query::error::{codes, Error, Result};

/// Checks `options.clusteredIndex` as mongod does and completes it as `listCollections`
/// reports it (`v: 2`, `name` defaulting to `_id_`).
pub(crate) fn normalize_options(options: &mut Document) -> Result<()> {
    let spec = match options.get("clusteredIndex") {
        None => return Ok(()),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(args::wrong_type("create.clusteredIndex", other, "object")),
    };
    for k in spec.keys() {
        if !matches!(k.as_str(), "key" | "unique" | "name" | "v") {
            return Err(Error::new(
                codes::UNRECOGNIZED_COMMAND_FIELD,
                format!("BSON field 'create.clusteredIndex.{k}' is an unknown field."),
            ));
        }
    }
    if spec.get_bool("unique") != Ok(true) {
        return Err(Error::new(
            5979700,
            "The clusteredIndex option requires unique: true to be specified",
        ));
    }
    let key_on_id = match spec.get_document("key") {
        Ok(key) => {
            key.len() == 1
                && key
                    .get("_id")
                    .and_then(tailstream_query::compare::as_f64)
                    .is_some_and(|v| v == 1.0)
        }
        Err(_) => false,
    };
    if !key_on_id {
        return Err(Error::new(
            codes::INVALID_INDEX_SPECIFICATION_OPTION,
            "The clusteredIndex option is only supported for key: {_id: 1}",
        ));
    }
    let name = match spec.get("name") {
        None => "_id_".to_string(),
        Some(Bson::String(n)) => n.clone(),
        Some(other) => {
            return Err(args::wrong_type(
                "create.clusteredIndex.name",
                other,
                "string",
            ))
        }
    };
    options.insert(
        "clusteredIndex",
        doc! {"v": 2, "key": {"_id": 1}, "name": name, "unique": true},
    );
    Ok(())
}

//! Time-series collections: the `timeseries` options of `create` (checked and completed
//! as mongod does), and the rules their documents follow.
//!
//! mongod stores measurements in buckets behind a view; here a time-series collection
//! is a collection of its own whose documents are stored as inserted, each under a
//! record id of its own (the cluster time of its insert) instead of its `_id`: there is
//! no `_id` index, so measurements may share an `_id`, and reads return the documents as
//! they were inserted. Its writes are logged under `<db>.system.buckets.<name>`, where
//! mongod logs its bucket writes, so change streams never show them (as on mongod).
//! That namespace also reads and writes mongod's bucket documents (`buckets`), made
//! from the measurements on reading, for mongodump and mongorestore.

use bson::{doc, Bson, Document};
use tailstream_query::args;
use tailstream_query::error::{codes, Error, Result};

use crate::catalog::namespace::Namespace;

/// The options `create` accepts with `timeseries` (mongod's
/// timeseries::kAllowedCollectionCreationOptions).
const ALLOWED_WITH_TIMESERIES: &[&str] = &[
    "storageEngine",
    "indexOptionDefaults",
    "collation",
    "timeseries",
    "expireAfterSeconds",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granularity {
    Seconds,
    Minutes,
    Hours,
}

impl Granularity {
    fn parse(command: &str, v: &Bson) -> Result<Granularity> {
        match v {
            Bson::String(s) => match s.as_str() {
                "seconds" => Ok(Granularity::Seconds),
                "minutes" => Ok(Granularity::Minutes),
                "hours" => Ok(Granularity::Hours),
                _ => Err(Error::bad_value(format!(
                    "Enumeration value '{s}' for field '{command}.timeseries.granularity' is not a valid value."
                ))),
            },
            other => Err(args::wrong_type(
                &format!("{command}.timeseries.granularity"),
                other,
                "string",
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Granularity::Seconds => "seconds",
            Granularity::Minutes => "minutes",
            Granularity::Hours => "hours",
        }
    }

    /// mongod's getMaxSpanSecondsFromGranularity.
    fn max_span_seconds(self) -> i32 {
        match self {
            Granularity::Seconds => 60 * 60,
            Granularity::Minutes => 60 * 60 * 24,
            Granularity::Hours => 60 * 60 * 24 * 30,
        }
    }

    /// mongod's getBucketRoundingSecondsFromGranularity.
    fn rounding_seconds(self) -> i32 {
        match self {
            Granularity::Seconds => 60,
            Granularity::Minutes => 60 * 60,
            Granularity::Hours => 60 * 60 * 24,
        }
    }
}

/// A positive whole number of seconds (IDL `safeInt` with `gte: 1`).
fn seconds_field(command: &str, field: &str, v: &Bson) -> Result<i32> {
    let n = match v {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        Bson::Double(d) if d.is_finite() => *d as i64,
        Bson::Double(_) => 0,
        other => {
            return Err(args::wrong_types(
                &format!("{command}.timeseries.{field}"),
                other,
                args::NUMBER_TYPES,
            ))
        }
    };
    if n < 1 {
        return Err(Error::bad_value(format!(
            "BSON field '{field}' value must be >= 1, actual value '{n}'"
        )));
    }
    i32::try_from(n).map_err(|_| {
        Error::bad_value(format!(
            "BSON field '{field}' value must be < 2147483648, actual value '{n}'"
        ))
    })
}

/// Checks `create`'s options of a time-series collection and completes them as
/// `listCollections` reports them: `timeseries` gets its bucketing parameters
/// (`granularity` and `bucketMaxSpanSeconds`, or `bucketRoundingSeconds` and
/// `bucketMaxSpanSeconds`), `expireAfterSeconds` becomes a long.
pub(crate) fn normalize_create_options(ns: &Namespace, options: &mut Document) -> Result<()> {
    for (k, v) in options.iter() {
        if k == "capped" && matches!(v, Bson::Boolean(false)) {
            continue;
        }
        if !ALLOWED_WITH_TIMESERIES.contains(&k.as_str()) {
            return Err(Error::invalid_options(format!(
                "{}: 'timeseries' is not allowed with '{k}'",
                ns.full()
            )));
        }
    }
    options.remove("capped");
    let spec = match options.get("timeseries") {
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => return Err(args::wrong_type("create.timeseries", other, "object")),
        None => return Err(Error::internal("no timeseries options")),
    };
    let normalized = normalize_spec("create", ns, &spec)?;
    options.insert("timeseries", normalized);
    if let Some(v) = options.get("expireAfterSeconds").cloned() {
        options.insert("expireAfterSeconds", expire_after_seconds("create", &v)?);
    }
    Ok(())
}

fn normalize_spec(command: &str, ns: &Namespace, spec: &Document) -> Result<Document> {
    let mut time_field = None;
    let mut meta_field = None;
    let mut granularity = None;
    let mut rounding = None;
    let mut max_span = None;
    for (k, v) in spec {
        let string = |v: &Bson| -> Result<String> {
            args::str_value(&format!("{command}.timeseries.{k}"), v).map(str::to_string)
        };
        match k.as_str() {
            "timeField" => time_field = Some(string(v)?),
            "metaField" => meta_field = Some(string(v)?),
            "granularity" => granularity = Some(Granularity::parse(command, v)?),
            "bucketRoundingSeconds" => rounding = Some(seconds_field(command, k, v)?),
            "bucketMaxSpanSeconds" => max_span = Some(seconds_field(command, k, v)?),
            _ => {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field '{command}.timeseries.{k}' is an unknown field."),
                ))
            }
        }
    }
    let time_field = time_field
        .ok_or_else(|| Error::missing_field(&format!("{command}.timeseries.timeField")))?;
    let top_level = |field: &str| {
        Error::invalid_options(format!(
            "{}: '{field}' must be a top-level field and not contain a '.'",
            ns.full()
        ))
    };
    if time_field.contains('.') {
        return Err(top_level("timeField"));
    }
    if let Some(meta) = &meta_field {
        if meta == "_id" {
            return Err(Error::invalid_options("'metaField' cannot be \"_id\""));
        }
        if *meta == time_field {
            return Err(Error::invalid_options(
                "'metaField' cannot be the same as 'timeField'",
            ));
        }
        if meta.contains('.') {
            return Err(top_level("metaField"));
        }
    }
    // mongod's validateAndSetBucketingParameters.
    let mut out = doc! {"timeField": time_field};
    if let Some(meta) = meta_field {
        out.insert("metaField", meta);
    }
    match (granularity, rounding, max_span) {
        (Some(g), rounding, max_span) => {
            if max_span.is_some_and(|s| s != g.max_span_seconds()) {
                return Err(Error::invalid_options(format!(
                    "Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than the default of {} for the provided granularity",
                    g.max_span_seconds()
                )));
            }
            if rounding.is_some_and(|s| s != g.rounding_seconds()) {
                return Err(Error::invalid_options(format!(
                    "Timeseries 'bucketRoundingSeconds' is not configurable to a value other than the default of {} for the provided granularity",
                    g.rounding_seconds()
                )));
            }
            out.insert("granularity", g.name());
            out.insert("bucketMaxSpanSeconds", g.max_span_seconds());
        }
        (None, None, None) => {
            out.insert("granularity", Granularity::Seconds.name());
            out.insert("bucketMaxSpanSeconds", Granularity::Seconds.max_span_seconds());
        }
        (None, Some(r), Some(s)) if r == s => {
            out.insert("bucketRoundingSeconds", r);
            out.insert("bucketMaxSpanSeconds", s);
        }
        (None, Some(_), Some(_)) => {
            return Err(Error::invalid_options(
                "Timeseries 'bucketRoundingSeconds' needs to be equal to 'bucketMaxSpanSeconds'",
            ))
        }
        (None, _, _) => {
            return Err(Error::invalid_options(
                "Timeseries 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' need to be set alongside each other",
            ))
        }
    }
    Ok(out)
}

/// `expireAfterSeconds` of a time-series (or clustered) collection: a non-negative
/// whole number of seconds, stored as a long.
pub(crate) fn expire_after_seconds(command: &str, v: &Bson) -> Result<i64> {
    let secs = match v {
        Bson::Int32(i) => *i as i64,
        Bson::Int64(i) => *i,
        Bson::Double(d) if d.is_nan() => {
            return Err(Error::invalid_options(
                "TTL index 'expireAfterSeconds' option must not be NaN",
            ))
        }
        Bson::Double(d) => d.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        other => {
            return Err(args::wrong_types(
                &format!("{command}.expireAfterSeconds"),
                other,
                args::NUMBER_TYPES,
            ))
        }
    };
    if secs < 0 {
        return Err(Error::invalid_options(
            "TTL index 'expireAfterSeconds' option cannot be less than 0",
        ));
    }
    // As mongod: the span must fit in milliseconds and not reach back before the epoch.
    let now_ms = bson::DateTime::now().timestamp_millis();
    if secs > i64::MAX / 1000 || secs * 1000 > now_ms {
        return Err(Error::invalid_options(
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
        ));
    }
    Ok(secs)
}

/// Checks that a measurement has its time: the `timeField` must be a BSON date.
pub(crate) fn check_measurement(spec: &Document, doc: &bson::RawDocument) -> Result<()> {
    let field = spec.get_str("timeField").unwrap_or("");
    match doc.get(field) {
        Ok(Some(bson::RawBsonRef::DateTime(_))) => Ok(()),
        _ => Err(Error::bad_value(format!(
            "'{field}' must be present and contain a valid BSON UTC datetime value"
        ))),
    }
}

/// `collMod`'s `timeseries: {granularity}` on a time-series collection: the new
/// options, or None when nothing changes. Only coarser granularities are allowed.
pub(crate) fn modify(current: &Document, change: &Bson) -> Result<Option<Document>> {
    let change = args::doc_value("collMod.timeseries", change)?;
    let mut target = None;
    for (k, v) in change {
        match k.as_str() {
            "granularity" => target = Some(Granularity::parse("collMod", v)?),
            _ => {
                return Err(Error::new(
                    codes::UNRECOGNIZED_COMMAND_FIELD,
                    format!("BSON field 'collMod.timeseries.{k}' is an unknown field."),
                ))
            }
        }
    }
    let Some(target) = target else {
        return Ok(None);
    };
    let current_granularity = match current.get("granularity") {
        Some(g) => Granularity::parse("collMod", g)?,
        None => {
            return Err(Error::invalid_options(
                "Cannot change the granularity of a time-series collection created with custom bucketing parameters",
            ))
        }
    };
    if target == current_granularity {
        return Ok(None);
    }
    let allowed = matches!(
        (current_granularity, target),
        (Granularity::Seconds, _) | (Granularity::Minutes, Granularity::Hours)
    );
    if !allowed {
        return Err(Error::invalid_options(
            "Invalid transition for timeseries.granularity. Can only transition from 'seconds' to 'minutes' or 'minutes' to 'hours'.",
        ));
    }
    let mut out = current.clone();
    out.insert("granularity", target.name());
    out.insert("bucketMaxSpanSeconds", target.max_span_seconds());
    Ok(Some(out))
}

/// The view definition mongod reports for a time-series collection in its change
/// events (`operationDescription` of `create`): the view on its buckets collection.
pub fn view_description(name: &str, options: &Document) -> Document {
    let spec = options
        .get_document("timeseries")
        .cloned()
        .unwrap_or_default();
    let mut unpack = doc! {"timeField": spec.get_str("timeField").unwrap_or("")};
    if let Ok(meta) = spec.get_str("metaField") {
        unpack.insert("metaField", meta);
    }
    unpack.insert(
        "bucketMaxSpanSeconds",
        spec.get("bucketMaxSpanSeconds")
            .cloned()
            .unwrap_or(Bson::Int32(3600)),
    );
    let mut d = doc! {
        "viewOn": format!("system.buckets.{name}"),
        "pipeline": [{"$_internalUnpackBucket": unpack}],
    };
    if let Some(c) = options.get("collation") {
        d.insert("collation", c.clone());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(spec: Document) -> Result<Document> {
        let mut o = doc! {"timeseries": spec};
        normalize_create_options(&Namespace::new("t", "ts"), &mut o)?;
        Ok(o.get_document("timeseries").unwrap().clone())
    }

    #[test]
    fn granularity_fills_in_the_bucket_span() {
        assert_eq!(
            normalized(doc! {"timeField": "time"}).unwrap(),
            doc! {"timeField": "time", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}
        );
        assert_eq!(
            normalized(doc! {"timeField": "t", "metaField": "m", "granularity": "minutes"})
                .unwrap(),
            doc! {"timeField": "t", "metaField": "m", "granularity": "minutes", "bucketMaxSpanSeconds": 86400}
        );
        assert_eq!(
            normalized(
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 3600, "bucketRoundingSeconds": 3600}
            )
            .unwrap(),
            doc! {"timeField": "t", "bucketRoundingSeconds": 3600, "bucketMaxSpanSeconds": 3600}
        );
    }

    #[test]
    fn bad_options_get_mongods_errors() {
        for (spec, code) in [
            (doc! {}, 40414),
            (doc! {"timeField": "a.b"}, 72),
            (doc! {"timeField": "t", "metaField": "_id"}, 72),
            (doc! {"timeField": "t", "metaField": "t"}, 72),
            (doc! {"timeField": "t", "granularity": "days"}, 2),
            (doc! {"timeField": "t", "bucketMaxSpanSeconds": 10}, 72),
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 10, "bucketRoundingSeconds": 5},
                72,
            ),
            (
                doc! {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 10},
                72,
            ),
            (
                doc! {"timeField": "t", "bucketMaxSpanSeconds": 0, "bucketRoundingSeconds": 0},
                2,
            ),
            (doc! {"timeField": "t", "extra": 1}, 40415),
            (doc! {"timeField": 1}, 14),
        ] {
            assert_eq!(normalized(spec.clone()).unwrap_err().code, code, "{spec}");
        }
        let mut o = doc! {"timeseries": {"timeField": "t"}, "capped": true};
        let e = normalize_create_options(&Namespace::new("t", "ts"), &mut o).unwrap_err();
        assert_eq!(e.message, "t.ts: 'timeseries' is not allowed with 'capped'");
        let mut o = doc! {"timeseries": {"timeField": "t"}, "expireAfterSeconds": -1};
        assert_eq!(
            normalize_create_options(&Namespace::new("t", "ts"), &mut o)
                .unwrap_err()
                .code,
            72
        );
    }

    #[test]
    fn measurements_need_a_date() {
        let spec = doc! {"timeField": "time"};
        let ok = bson::rawdoc! {"time": bson::DateTime::now()};
        assert!(check_measurement(&spec, &ok).is_ok());
        let e = check_measurement(&spec, &bson::rawdoc! {"time": 5}).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                2,
                "'time' must be present and contain a valid BSON UTC datetime value"
            )
        );
    }

    #[test]
    fn granularity_only_grows_coarser() {
        let current =
            doc! {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 86400};
        let up = modify(&current, &Bson::Document(doc! {"granularity": "hours"}))
            .unwrap()
            .unwrap();
        assert_eq!(up.get_i32("bucketMaxSpanSeconds").unwrap(), 2_592_000);
        assert!(modify(&current, &Bson::Document(doc! {"granularity": "seconds"})).is_err());
        assert!(
            modify(&current, &Bson::Document(doc! {"granularity": "minutes"}))
                .unwrap()
                .is_none()
        );
    }
}

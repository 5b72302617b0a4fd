//! mongod's one-line rendering of BSON values in messages, e.g. the
//! `dup key: { _id: 1 }` of an E11000 error.

use bson::{Bson, Document};

pub fn doc_to_string(d: &Document) -> String {
    if d.is_empty() {
        return "{}".to_string();
    }
    let parts: Vec<String> = d
        .iter()
        .map(|(k, v)| format!("{k}: {}", value_to_string(v)))
        .collect();
    format!("{{ {} }}", parts.join(", "))
}

pub fn value_to_string(v: &Bson) -> String {
    match v {
        Bson::Double(d) => {
            if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e15 {
                format!("{}.0", *d as i64)
            } else {
                d.to_string()
            }
        }
        Bson::String(s) => format!("\"{s}\""),
        Bson::Document(d) => doc_to_string(d),
        Bson::Array(a) => {
            if a.is_empty() {
                "[]".to_string()
            } else {
                format!(
                    "[ {} ]",
                    a.iter().map(value_to_string).collect::<Vec<_>>().join(", ")
                )
            }
        }
        Bson::Boolean(b) => b.to_string(),
        Bson::Null => "null".to_string(),
        Bson::Undefined => "undefined".to_string(),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::ObjectId(o) => format!("ObjectId('{o}')"),
        Bson::DateTime(d) => format!("new Date({})", d.timestamp_millis()),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::Binary(b) => {
            if b.subtype == bson::spec::BinarySubtype::Uuid {
                if let Ok(u) = b.to_uuid() {
                    return format!("UUID(\"{u}\")");
                }
            }
            let hex: String = b.bytes.iter().map(|x| format!("{x:02X}")).collect();
            format!("BinData({}, {hex})", u8::from(b.subtype))
        }
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::MinKey => "MinKey".to_string(),
        Bson::MaxKey => "MaxKey".to_string(),
        Bson::Decimal128(d) => format!("{d}"),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn renders_like_mongod() {
        assert_eq!(doc_to_string(&doc! {"_id": 1}), "{ _id: 1 }");
        assert_eq!(
            doc_to_string(&doc! {"a": "x", "b": [1, 2.5], "c": {}}),
            "{ a: \"x\", b: [ 1, 2.5 ], c: {} }"
        );
        assert_eq!(value_to_string(&Bson::Double(2.0)), "2.0");
    }
}

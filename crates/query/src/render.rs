//! Values as mongod writes them into error messages. mongod has two renderings and
//! both are here, so every message of the workspace renders a value the one way:
//!
//! - [`bson_to_string`] / [`doc_to_string`]: `BSONElement::toString` and
//!   `BSONObj::toString`, as in `dup key: { _id: 1 }`, collation and index-spec errors
//!   and the update operators' messages (`{ a: [ 1, 2.0 ] }`: doubles keep a `.0`).
//! - [`show`]: the aggregation `Value`'s `operator<<`, as in expression and stage
//!   errors (`[1, 2]`: no spaces inside arrays, whole doubles without `.0`, dates ISO).

use bson::spec::BinarySubtype;
use bson::{Bson, Document};

/// A value as mongod's `BSONElement::toString` writes it without its field name.
/// (mongod also shortens strings over 160 bytes and binaries over 80 in some
/// messages; this writes them whole.)
pub fn bson_to_string(v: &Bson) -> String {
    match v {
        Bson::Double(d) => double_nice(*d),
        Bson::String(s) | Bson::Symbol(s) => format!("\"{s}\""),
        Bson::Document(d) => doc_to_string(d),
        Bson::Array(a) => {
            if a.is_empty() {
                "[]".into()
            } else {
                let items: Vec<String> = a.iter().map(bson_to_string).collect();
                format!("[ {} ]", items.join(", "))
            }
        }
        Bson::Binary(b) => {
            if b.subtype == BinarySubtype::Uuid {
                if let Ok(u) = b.to_uuid() {
                    return format!("UUID(\"{u}\")");
                }
            }
            let hex: String = b.bytes.iter().map(|x| format!("{x:02X}")).collect();
            format!("BinData({}, {hex})", u8::from(b.subtype))
        }
        Bson::Undefined => "undefined".into(),
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        Bson::Boolean(b) => b.to_string(),
        Bson::DateTime(dt) => format!("new Date({})", dt.timestamp_millis()),
        Bson::Null => "null".into(),
        Bson::RegularExpression(r) => format!("/{}/{}", r.pattern, r.options),
        Bson::DbPointer(_) => db_pointer_to_string(v),
        Bson::JavaScriptCode(c) => c.clone(),
        Bson::JavaScriptCodeWithScope(c) => {
            format!("CodeWScope( {}, {})", c.code, doc_to_string(&c.scope))
        }
        Bson::Int32(i) => i.to_string(),
        Bson::Timestamp(t) => format!("Timestamp({}, {})", t.time, t.increment),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::MinKey => "MinKey".into(),
        Bson::MaxKey => "MaxKey".into(),
    }
}

/// A document as mongod's `BSONObj::toString` writes it: `{ a: 1, b: "x" }`, `{}`.
pub fn doc_to_string(d: &Document) -> String {
    if d.is_empty() {
        return "{}".into();
    }
    let items: Vec<String> = d.iter().map(|(k, v)| elem_to_string(k, v)).collect();
    format!("{{ {} }}", items.join(", "))
}

/// `name: value`, as `BSONElement::toString` with its field name.
pub fn elem_to_string(name: &str, v: &Bson) -> String {
    format!("{name}: {}", bson_to_string(v))
}

/// `DBRef('db.coll',<hex id>)`. The bson crate keeps a DBPointer's parts private; its
/// `Display` (`DbPointer(ns, id)`) is the one way to them.
fn db_pointer_to_string(v: &Bson) -> String {
    let shown = v.to_string();
    let inner = shown
        .strip_prefix("DbPointer(")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|s| s.rsplit_once(", "));
    match inner {
        Some((ns, id)) => format!("DBRef('{ns}',{id})"),
        None => shown,
    }
}

/// Significant digits of mongod's double rendering (`%.16g`).
const DOUBLE_DIGITS: i32 = 16;

/// A double as mongod's `StringBuilder::appendDoubleNice` writes it: C's `%.16g`, then
/// `.0` when that has no `.`, `E` or `N` (`2.0`, `0.5`, `1e+20.0`; glibc spells the
/// special values `nan` and `inf`, so they become `nan.0` and `inf.0`).
pub fn double_nice(d: f64) -> String {
    let mut s = printf_g(d, DOUBLE_DIGITS);
    if !s.contains(['.', 'E', 'N']) {
        s.push_str(".0");
    }
    s
}

/// Significant digits of a double written to a C++ stream with its default format.
const STREAM_DIGITS: i32 = 6;

/// A double as a C++ `std::ostream` writes it by default (`%g`: `2`, `0.5`, `inf`), as
/// in the messages mongod builds with `str::stream() << d`.
pub fn stream_double(d: f64) -> String {
    printf_g(d, STREAM_DIGITS)
}

/// C's `printf("%.<precision>g", d)` as glibc writes it.
fn printf_g(d: f64, precision: i32) -> String {
    let sign = if d.is_sign_negative() { "-" } else { "" };
    if d.is_nan() {
        return format!("{sign}nan");
    }
    if d.is_infinite() {
        return format!("{sign}inf");
    }
    if d == 0.0 {
        return format!("{sign}0");
    }
    // The exponent the value has once rounded to `precision` digits decides the style.
    let sci = format!("{:.*e}", (precision - 1) as usize, d);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= precision {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!(
            "{}e{exp_sign}{:02}",
            trim_fraction_zeros(mantissa),
            exp.abs()
        )
    } else {
        let fixed = format!("{:.*}", (precision - 1 - exp) as usize, d);
        trim_fraction_zeros(&fixed).to_string()
    }
}

/// `%g` drops a fraction's trailing zeros, and its point when nothing is left after it.
fn trim_fraction_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A value as the aggregation `Value`'s `operator<<` writes it (expression and stage
/// error messages).
pub fn show(v: &Bson) -> String {
    match v {
        Bson::String(s) => format!("\"{s}\""),
        Bson::Double(d) => format_double(*d),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::DateTime(d) => format_date_iso(d.timestamp_millis()),
        Bson::Document(d) => {
            let parts: Vec<String> = d.iter().map(|(k, v)| format!("{k}: {}", show(v))).collect();
            if parts.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", parts.join(", "))
            }
        }
        Bson::Array(a) => {
            let parts: Vec<String> = a.iter().map(show).collect();
            format!("[{}]", parts.join(", "))
        }
        Bson::Null => "null".into(),
        Bson::Boolean(b) => b.to_string(),
        Bson::ObjectId(o) => format!("ObjectId('{}')", o.to_hex()),
        other => format!("{other}"),
    }
}

/// [`show`] of a possibly missing value.
pub fn show_opt(v: &Option<Bson>) -> String {
    match v {
        Some(v) => show(v),
        None => "missing".into(),
    }
}

/// A double printed the way mongod prints it in strings (`1`, `1.5`, `1e+20`).
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let abs = d.abs();
    if (1e-5..1e21).contains(&abs) {
        let s = format!("{d}");
        return s;
    }
    // Exponent form like "1e+21", "1.5e-07".
    let s = format!("{d:e}");
    let (m, e) = s.split_once('e').unwrap();
    let e: i32 = e.parse().unwrap();
    let sign = if e < 0 { '-' } else { '+' };
    let ea = e.abs();
    if ea < 10 {
        format!("{m}e{sign}0{ea}")
    } else {
        format!("{m}e{sign}{ea}")
    }
}

/// ISO-8601 rendering used by `$toString` and string coercion of dates.
pub fn format_date_iso(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(dt) => dt.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => format!("{ms}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Binary, Timestamp};

    /// The engine's E11000 renderer's own cases, kept from when it was a copy.
    #[test]
    fn renders_like_mongod() {
        assert_eq!(doc_to_string(&doc! {"_id": 1}), "{ _id: 1 }");
        assert_eq!(
            doc_to_string(&doc! {"a": "x", "b": [1, 2.5], "c": {}}),
            "{ a: \"x\", b: [ 1, 2.5 ], c: {} }"
        );
        assert_eq!(bson_to_string(&Bson::Double(2.0)), "2.0");
    }

    #[test]
    fn elements_as_mongod_writes_them() {
        assert_eq!(doc_to_string(&doc! {"_id": 1}), "{ _id: 1 }");
        assert_eq!(doc_to_string(&doc! {}), "{}");
        assert_eq!(
            doc_to_string(&doc! {"a": "x", "b": [1, 2.5], "c": {}, "d": [], "e": null}),
            "{ a: \"x\", b: [ 1, 2.5 ], c: {}, d: [], e: null }"
        );
        let oid = ObjectId::parse_str("5f0c9b1e2a3b4c5d6e7f8091").unwrap();
        assert_eq!(
            bson_to_string(&Bson::ObjectId(oid)),
            "ObjectId('5f0c9b1e2a3b4c5d6e7f8091')"
        );
        assert_eq!(
            bson_to_string(&Bson::Timestamp(Timestamp {
                time: 5,
                increment: 2
            })),
            "Timestamp(5, 2)"
        );
        assert_eq!(bson_to_string(&Bson::Int64(-7)), "-7");
        assert_eq!(bson_to_string(&Bson::Symbol("s".into())), "\"s\"");
        assert_eq!(elem_to_string("k", &Bson::Boolean(true)), "k: true");
    }

    #[test]
    fn binaries_and_uuids() {
        let uuid = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: (0u8..16).collect(),
        };
        assert_eq!(
            bson_to_string(&Bson::Binary(uuid)),
            "UUID(\"00010203-0405-0607-0809-0a0b0c0d0e0f\")"
        );
        let short_uuid = Binary {
            subtype: BinarySubtype::Uuid,
            bytes: vec![0xAB],
        };
        assert_eq!(bson_to_string(&Bson::Binary(short_uuid)), "BinData(4, AB)");
        let user = Binary {
            subtype: BinarySubtype::UserDefined(0x80),
            bytes: vec![0x0f, 0xa0],
        };
        assert_eq!(bson_to_string(&Bson::Binary(user)), "BinData(128, 0FA0)");
    }

    #[test]
    fn decimals_plain_as_decimal128_to_string() {
        let d: bson::Decimal128 = "1.50".parse().unwrap();
        assert_eq!(bson_to_string(&Bson::Decimal128(d)), "1.50");
        let inf: bson::Decimal128 = "-Infinity".parse().unwrap();
        assert_eq!(bson_to_string(&Bson::Decimal128(inf)), "-Infinity");
    }

    #[test]
    fn doubles_as_append_double_nice() {
        let cases = [
            (2.0, "2.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (2.5, "2.5"),
            (0.1 + 0.2, "0.3"),
            (1.0 / 3.0, "0.3333333333333333"),
            (123456.789, "123456.789"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16.0"),
            (1.5e300, "1.5e+300"),
            (1e-5, "1e-05.0"),
            (0.0001, "0.0001"),
            (-2.5e-7, "-2.5e-07"),
            (f64::INFINITY, "inf.0"),
            (f64::NEG_INFINITY, "-inf.0"),
            (f64::NAN, "nan.0"),
            (9007199254740993.0, "9007199254740992.0"),
        ];
        for (d, want) in cases {
            assert_eq!(double_nice(d), want, "{d:e}");
            assert_eq!(bson_to_string(&Bson::Double(d)), want);
        }
    }

    #[test]
    fn code_and_pointers() {
        assert_eq!(
            bson_to_string(&Bson::JavaScriptCode("function() {}".into())),
            "function() {}"
        );
        let cws = Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: "f()".into(),
            scope: doc! {"x": 1},
        });
        assert_eq!(bson_to_string(&cws), "CodeWScope( f(), { x: 1 })");
        // { p: DBPointer("db.c", 5f0c9b1e2a3b4c5d6e7f8091) }, built from its bytes (the
        // bson crate has no constructor for the deprecated type).
        let mut element = vec![0x0C, b'p', 0];
        element.extend(5i32.to_le_bytes());
        element.extend(b"db.c\0");
        element.extend([
            0x5f, 0x0c, 0x9b, 0x1e, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0x80, 0x91,
        ]);
        let mut bytes = ((element.len() + 5) as i32).to_le_bytes().to_vec();
        bytes.extend(element);
        bytes.push(0);
        let d = Document::from_reader(&mut bytes.as_slice()).unwrap();
        assert_eq!(
            doc_to_string(&d),
            "{ p: DBRef('db.c',5f0c9b1e2a3b4c5d6e7f8091) }"
        );
    }

    #[test]
    fn aggregation_values() {
        assert_eq!(
            show(&Bson::Array(vec![Bson::Int32(1), Bson::Double(2.0)])),
            "[1, 2]"
        );
        assert_eq!(show_opt(&None), "missing");
        assert_eq!(format_double(1e21), "1e+21");
        assert_eq!(format_double(1.5e-7), "1.5e-07");
        assert_eq!(format_date_iso(0), "1970-01-01T00:00:00.000Z");
    }
}

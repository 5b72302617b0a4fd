//! BSON ⇄ JavaScript values, as mongod's scope maps them: int32 and double are numbers,
//! int64 a NumberLong, decimal a NumberDecimal, dates Date, ObjectId an ObjectId, ...
//! (the wrapper types are defined in `prelude.js`). Back to BSON, a number is a double
//! and each wrapper its own type; objects deeper than [`MAX_DEPTH`] or larger than
//! [`MAX_RESULT_BYTES`] are refused (cycles included).

use bson::spec::BinarySubtype;
use bson::{Bson, Document};
use rquickjs::convert::Coerced;
use rquickjs::function::Constructor;
use rquickjs::{Array, Ctx, Function, Object, Type, Value};
use tailstream_query::error::{codes, Error, Result};

/// Nesting limit of a value a script returns (mongod's for JS → BSON).
pub const MAX_DEPTH: usize = 150;
/// Size limit of a value a script returns.
pub const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// The constructors conversions use, looked up once per call.
pub struct Types<'js> {
    object_id: Function<'js>,
    number_long: Function<'js>,
    number_decimal: Function<'js>,
    timestamp: Function<'js>,
    bin_data: Function<'js>,
    code: Function<'js>,
    min_key: Value<'js>,
    max_key: Value<'js>,
    date: Constructor<'js>,
    regexp: Constructor<'js>,
}

fn conversion_error(msg: impl std::fmt::Display) -> Error {
    Error::new(
        codes::JS_INTERPRETER_FAILURE,
        format!("Converting from JavaScript to BSON failed: {msg}"),
    )
}

impl<'js> Types<'js> {
    pub fn new(ctx: &Ctx<'js>) -> rquickjs::Result<Self> {
        let g = ctx.globals();
        let min_key: Function = g.get("MinKey")?;
        let max_key: Function = g.get("MaxKey")?;
        Ok(Types {
            object_id: g.get("ObjectId")?,
            number_long: g.get("NumberLong")?,
            number_decimal: g.get("NumberDecimal")?,
            timestamp: g.get("Timestamp")?,
            bin_data: g.get("BinData")?,
            code: g.get("Code")?,
            min_key: min_key.call(())?,
            max_key: max_key.call(())?,
            date: g.get("Date")?,
            regexp: g.get("RegExp")?,
        })
    }

    pub fn document(&self, ctx: &Ctx<'js>, d: &Document) -> rquickjs::Result<Value<'js>> {
        let obj = Object::new(ctx.clone())?;
        for (k, v) in d {
            obj.set(k.as_str(), self.to_js(ctx, v)?)?;
        }
        Ok(obj.into_value())
    }

    pub fn to_js(&self, ctx: &Ctx<'js>, v: &Bson) -> rquickjs::Result<Value<'js>> {
        let c = ctx.clone();
        Ok(match v {
            Bson::Double(f) => Value::new_float(c, *f),
            Bson::Int32(i) => Value::new_int(c, *i),
            Bson::Int64(i) => self.number_long.call((i.to_string(),))?,
            Bson::Decimal128(d) => self.number_decimal.call((d.to_string(),))?,
            Bson::String(s) | Bson::Symbol(s) => {
                rquickjs::String::from_str(c, s.as_str())?.into_value()
            }
            Bson::Boolean(b) => Value::new_bool(c, *b),
            Bson::Null => Value::new_null(c),
            Bson::Undefined => Value::new_undefined(c),
            Bson::Document(d) => self.document(ctx, d)?,
            Bson::Array(a) => {
                let arr = Array::new(c)?;
                for (i, x) in a.iter().enumerate() {
                    arr.set(i, self.to_js(ctx, x)?)?;
                }
                arr.into_value()
            }
            Bson::DateTime(dt) => self.date.construct((dt.timestamp_millis() as f64,))?,
            Bson::ObjectId(o) => self.object_id.call((o.to_hex(),))?,
            Bson::Timestamp(t) => self.timestamp.call((t.time, t.increment))?,
            Bson::Binary(b) => {
                let subtype: u8 = b.subtype.into();
                self.bin_data
                    .call((subtype as i32, base64_encode(&b.bytes)))?
            }
            Bson::RegularExpression(r) => {
                // JavaScript knows the flags i, m, s and u of BSON's imsux (and l).
                let flags: String = r
                    .options
                    .chars()
                    .filter(|c| matches!(c, 'i' | 'm' | 's' | 'u'))
                    .collect();
                match self
                    .regexp
                    .construct::<_, Value>((r.pattern.as_str(), flags.as_str()))
                {
                    Ok(v) => v,
                    Err(_) => {
                        // A pattern JavaScript cannot compile stays visible as its text.
                        let _ = ctx.catch();
                        let obj = Object::new(c)?;
                        obj.set("$regex", r.pattern.as_str())?;
                        obj.set("$options", r.options.as_str())?;
                        obj.into_value()
                    }
                }
            }
            Bson::JavaScriptCode(code) => self.code.call((code.as_str(),))?,
            Bson::JavaScriptCodeWithScope(cws) => self.code.call((cws.code.as_str(),))?,
            Bson::MinKey => self.min_key.clone(),
            Bson::MaxKey => self.max_key.clone(),
            Bson::DbPointer(_) => Value::new_undefined(c),
        })
    }

    /// A script's value as BSON (a conversion of this context's values, hence `self`).
    #[allow(clippy::wrong_self_convention)]
    pub fn from_js(&self, v: &Value<'js>) -> Result<Bson> {
        let mut budget = MAX_RESULT_BYTES;
        self.value(v, 0, &mut budget)
    }

    fn spend(budget: &mut usize, n: usize) -> Result<()> {
        if n > *budget {
            return Err(Error::new(
                codes::BSON_OBJECT_TOO_LARGE,
                format!(
                    "Converting from JavaScript to BSON failed: the value exceeds {MAX_RESULT_BYTES} bytes"
                ),
            ));
        }
        *budget -= n;
        Ok(())
    }

    fn value(&self, v: &Value<'js>, depth: usize, budget: &mut usize) -> Result<Bson> {
        Self::spend(budget, 8)?;
        Ok(match v.type_of() {
            Type::Uninitialized | Type::Undefined => Bson::Undefined,
            Type::Null => Bson::Null,
            Type::Bool => Bson::Boolean(v.as_bool().unwrap_or(false)),
            Type::Int | Type::Float => Bson::Double(v.as_number().unwrap_or(f64::NAN)),
            Type::String => {
                let s = v
                    .as_string()
                    .and_then(|s| s.to_string().ok())
                    .unwrap_or_default();
                Self::spend(budget, s.len())?;
                Bson::String(s)
            }
            Type::BigInt => {
                let n = v
                    .as_big_int()
                    .and_then(|b| b.clone().to_i64().ok())
                    .ok_or_else(|| conversion_error("a BigInt out of the range of int64"))?;
                Bson::Int64(n)
            }
            Type::Symbol => Bson::Undefined,
            Type::Function | Type::Constructor => {
                let s = display(v);
                Self::spend(budget, s.len())?;
                Bson::JavaScriptCode(s)
            }
            Type::Array => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep());
                }
                let arr = v.as_array().expect("an array");
                let mut out = Vec::with_capacity(arr.len());
                for i in 0..arr.len() {
                    let x: Value = arr.get(i).map_err(conversion_error)?;
                    out.push(self.value(&x, depth + 1, budget)?);
                }
                Bson::Array(out)
            }
            _ => match v.as_object() {
                Some(obj) => self.object(obj, depth, budget)?,
                None => Bson::Undefined,
            },
        })
    }

    fn object(&self, obj: &Object<'js>, depth: usize, budget: &mut usize) -> Result<Bson> {
        if obj.is_instance_of(&self.date) {
            let ms = obj
                .as_value()
                .get::<Coerced<f64>>()
                .map(|c| c.0)
                .unwrap_or(f64::NAN);
            let ms = if ms.is_finite() { ms as i64 } else { i64::MIN };
            return Ok(Bson::DateTime(bson::DateTime::from_millis(ms)));
        }
        if obj.is_instance_of(&self.regexp) {
            let pattern: String = obj.get("source").map_err(conversion_error)?;
            let flags: String = obj.get("flags").unwrap_or_default();
            let options: String = flags
                .chars()
                .filter(|c| matches!(c, 'i' | 'm' | 's' | 'u' | 'x'))
                .collect();
            Self::spend(budget, pattern.len())?;
            return Ok(Bson::RegularExpression(bson::Regex { pattern, options }));
        }
        let tag: Option<String> = obj
            .get::<_, Value>("_bsontype")
            .ok()
            .and_then(|t| t.as_string().and_then(|s| s.to_string().ok()));
        if let Some(tag) = tag {
            if let Some(b) = self.tagged(obj, &tag)? {
                return Ok(b);
            }
        }
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        let mut d = Document::new();
        for prop in obj.props::<String, Value>() {
            let (k, x) = prop.map_err(conversion_error)?;
            Self::spend(budget, k.len())?;
            let b = self.value(&x, depth + 1, budget)?;
            d.insert(k, b);
        }
        Ok(Bson::Document(d))
    }

    /// The BSON value of a wrapper made by `prelude.js`.
    fn tagged(&self, obj: &Object<'js>, tag: &str) -> Result<Option<Bson>> {
        let text = |key: &str| -> Result<String> {
            let v: Value = obj.get(key).map_err(conversion_error)?;
            Ok(display(&v))
        };
        Ok(Some(match tag {
            "ObjectId" => {
                let hex = text("str")?;
                Bson::ObjectId(
                    bson::oid::ObjectId::parse_str(&hex)
                        .map_err(|_| conversion_error(format!("invalid ObjectId {hex}")))?,
                )
            }
            "NumberLong" => {
                let s = text("__value")?;
                Bson::Int64(
                    s.parse()
                        .map_err(|_| conversion_error(format!("invalid NumberLong {s}")))?,
                )
            }
            "NumberInt" => {
                let n: f64 = obj.get("__value").map_err(conversion_error)?;
                Bson::Int32(n as i32)
            }
            "NumberDecimal" => {
                let s = text("__value")?;
                Bson::Decimal128(
                    s.parse()
                        .map_err(|_| conversion_error(format!("invalid NumberDecimal {s}")))?,
                )
            }
            "Timestamp" => {
                let t: f64 = obj.get("t").map_err(conversion_error)?;
                let i: f64 = obj.get("i").map_err(conversion_error)?;
                Bson::Timestamp(bson::Timestamp {
                    time: t as u32,
                    increment: i as u32,
                })
            }
            "BinData" => {
                let subtype: f64 = obj.get("__type").map_err(conversion_error)?;
                let b64 = text("__base64")?;
                Bson::Binary(bson::Binary {
                    subtype: BinarySubtype::from(subtype as u8),
                    bytes: base64_decode(&b64)
                        .ok_or_else(|| conversion_error("invalid base64 in BinData"))?,
                })
            }
            "Code" => Bson::JavaScriptCode(text("code")?),
            "MinKey" => Bson::MinKey,
            "MaxKey" => Bson::MaxKey,
            _ => return Ok(None),
        }))
    }
}

fn too_deep() -> Error {
    conversion_error(format!(
        "Object exceeds limit of {MAX_DEPTH} nested objects"
    ))
}

/// `String(v)` of a JavaScript value.
pub fn display(v: &Value<'_>) -> String {
    v.get::<Coerced<String>>().map(|c| c.0).unwrap_or_else(|_| {
        let _ = v.ctx().catch();
        String::from("<unprintable>")
    })
}

/// `s` as a JavaScript string literal.
pub fn js_string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

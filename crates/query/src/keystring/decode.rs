//! Decoding KeyStrings back into values (without mongod's TypeBits: numbers come back
//! in a canonical type).

use super::decimal::{make_decimal, Digits, DEC_EXP_BIAS};
use super::number::{ldexp, pow256};
use super::{
    ctype, format_error, DCM_EQUAL_TO_15, DCM_EQUAL_TO_DOUBLE, END, GREATER, LESS, TWO_POW_63,
};
use crate::error::{codes, Error, Result};
use bson::{oid::ObjectId, spec::BinarySubtype, Binary, Bson, Document};

fn make_db_pointer(ns: &str, oid: [u8; 12]) -> Result<Bson> {
    let mut body = Vec::new();
    body.push(0x0Cu8);
    body.extend_from_slice(b"x\0");
    body.extend_from_slice(&((ns.len() + 1) as i32).to_le_bytes());
    body.extend_from_slice(ns.as_bytes());
    body.push(0);
    body.extend_from_slice(&oid);
    body.push(0);
    let mut bytes = ((body.len() + 4) as i32).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let d = Document::from_reader(&mut bytes.as_slice()).map_err(|e| {
        Error::new(
            codes::INVALID_BSON,
            format!("bad DBPointer in KeyString: {e}"),
        )
    })?;
    d.get("x")
        .cloned()
        .ok_or_else(|| Error::internal("DBPointer decode"))
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }
    fn byte(&mut self, inv: bool) -> Result<u8> {
        let b = *self
            .b
            .get(self.pos)
            .ok_or_else(|| format_error("unexpected end of buffer"))?;
        self.pos += 1;
        Ok(if inv { !b } else { b })
    }
    fn peek(&self, inv: bool) -> Option<u8> {
        self.b.get(self.pos).map(|&b| if inv { !b } else { b })
    }
    fn bytes(&mut self, n: usize, inv: bool) -> Result<Vec<u8>> {
        if self.pos + n > self.b.len() {
            return Err(format_error("unexpected end of buffer"));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(if inv {
            s.iter().map(|b| !b).collect()
        } else {
            s.to_vec()
        })
    }
    fn u64(&mut self, inv: bool) -> Result<u64> {
        let v = self.bytes(8, inv)?;
        Ok(u64::from_be_bytes(v.try_into().unwrap()))
    }
    fn cstring(&mut self, inv: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let c = self.byte(inv)?;
            if c == 0 {
                return Ok(out);
            }
            out.push(c);
        }
    }
    /// A string with `00 FF` escapes.
    fn string_like(&mut self, inv: bool) -> Result<String> {
        let mut out = Vec::new();
        loop {
            let c = self.byte(inv)?;
            if c == 0 {
                if self.peek(inv) == Some(0xff) {
                    self.pos += 1;
                    out.push(0);
                    continue;
                }
                break;
            }
            out.push(c);
        }
        String::from_utf8(out).map_err(|_| format_error("invalid UTF-8 in string"))
    }
}

/// Decodes a sequence of ascending values written by [`KeyStringBuilder::append`],
/// stopping at the end of the buffer or at `kEnd` (a preceding kLess/kGreater
/// discriminator is skipped too).
///
/// The encoding does not carry mongod's TypeBits, so numbers come back in a canonical
/// type: integral values from the integer encodings become `Int32` when they fit, else
/// `Int64` (this includes `-2^63`); non-integral, infinite, NaN values and integral
/// values of magnitude >= 2^63 become `Double`; zero becomes `Int32(0)`; values whose
/// encoding carries a decimal continuation (i.e. that were Decimal128 not exactly
/// representable as a double) become `Decimal128` (numerically equal, exponent
/// normalized). Symbols come back as `String`.
pub fn decode_values(bytes: &[u8]) -> Result<Vec<Bson>> {
    decode_values_directed(bytes, &[])
}

/// Like [`decode_values`] with per-component direction (`descending[i]`, default ascending).
pub fn decode_values_directed(bytes: &[u8], descending: &[bool]) -> Result<Vec<Bson>> {
    let mut r = Reader { b: bytes, pos: 0 };
    let mut out = Vec::new();
    while !r.at_end() {
        let inv = descending.get(out.len()).copied().unwrap_or(false);
        let raw = r.b[r.pos];
        if raw == END || raw == LESS || raw == GREATER {
            break;
        }
        let ct = r.byte(inv)?;
        out.push(decode_value(&mut r, ct, inv, 0)?);
    }
    Ok(out)
}

fn decode_doc_body(r: &mut Reader, inv: bool, depth: u32) -> Result<Document> {
    let mut d = Document::new();
    loop {
        let generic = r.byte(inv)?;
        if generic == 0 {
            return Ok(d);
        }
        let name =
            String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("invalid field name"))?;
        let ct = r.byte(inv)?;
        let v = decode_value(r, ct, inv, depth + 1)?;
        d.insert(name, v);
    }
}

fn int_bson(neg: bool, mag: u64) -> Bson {
    let v: i128 = if neg { -(mag as i128) } else { mag as i128 };
    if let Ok(i) = i32::try_from(v) {
        Bson::Int32(i)
    } else if let Ok(i) = i64::try_from(v) {
        Bson::Int64(i)
    } else {
        Bson::Double(v as f64)
    }
}

fn dec_bson(neg: bool, d: &Digits) -> Bson {
    let (c, e) = if d.d.len() <= 34 {
        d.normalize34()
    } else {
        d.round_up(34).normalize34()
    };
    Bson::Decimal128(make_decimal(neg, c, e))
}

fn read_continuation_34(r: &mut Reader, vinv: bool, neg: bool, bin: f64) -> Result<Bson> {
    let cont = r.u64(vinv)?;
    let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
    Ok(dec_bson(neg, &Digits::from_u128(c + cont as u128, e)))
}

fn decode_value(r: &mut Reader, ct: u8, inv: bool, depth: u32) -> Result<Bson> {
    if depth > 200 {
        return Err(Error::new(
            codes::OVERFLOW,
            "KeyString encoding exceeded maximum nesting depth",
        ));
    }
    Ok(match ct {
        ctype::MIN_KEY => Bson::MinKey,
        ctype::MAX_KEY => Bson::MaxKey,
        ctype::NULLISH => Bson::Null,
        ctype::UNDEFINED => Bson::Undefined,
        ctype::BOOL_TRUE => Bson::Boolean(true),
        ctype::BOOL_FALSE => Bson::Boolean(false),
        ctype::DATE => Bson::DateTime(bson::DateTime::from_millis(
            (r.u64(inv)? ^ (1u64 << 63)) as i64,
        )),
        ctype::TIMESTAMP => {
            let v = r.u64(inv)?;
            Bson::Timestamp(bson::Timestamp {
                time: (v >> 32) as u32,
                increment: v as u32,
            })
        }
        ctype::OID => {
            let b: [u8; 12] = r.bytes(12, inv)?.try_into().unwrap();
            Bson::ObjectId(ObjectId::from_bytes(b))
        }
        ctype::STRING_LIKE => Bson::String(r.string_like(inv)?),
        ctype::CODE => Bson::JavaScriptCode(r.string_like(inv)?),
        ctype::CODE_WITH_SCOPE => {
            let code = r.string_like(inv)?;
            let scope = decode_doc_body(r, inv, depth + 2)?;
            Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope { code, scope })
        }
        ctype::BIN_DATA => {
            let mut len = r.byte(inv)? as usize;
            if len == 0xff {
                len = u32::from_be_bytes(r.bytes(4, inv)?.try_into().unwrap()) as usize;
            }
            let subtype = BinarySubtype::from(r.byte(inv)?);
            Bson::Binary(Binary {
                subtype,
                bytes: r.bytes(len, inv)?,
            })
        }
        ctype::REGEX => {
            let pattern =
                String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("bad regex"))?;
            let options =
                String::from_utf8(r.cstring(inv)?).map_err(|_| format_error("bad regex"))?;
            Bson::RegularExpression(bson::Regex { pattern, options })
        }
        ctype::DBREF => {
            let n = u32::from_be_bytes(r.bytes(4, inv)?.try_into().unwrap()) as usize;
            let ns =
                String::from_utf8(r.bytes(n, inv)?).map_err(|_| format_error("bad DBRef ns"))?;
            let oid: [u8; 12] = r.bytes(12, inv)?.try_into().unwrap();
            make_db_pointer(&ns, oid)?
        }
        ctype::OBJECT => Bson::Document(decode_doc_body(r, inv, depth + 1)?),
        ctype::ARRAY => {
            let mut a = Vec::new();
            loop {
                let c = r.byte(inv)?;
                if c == 0 {
                    break;
                }
                a.push(decode_value(r, c, inv, depth + 1)?);
            }
            Bson::Array(a)
        }
        ctype::NUMERIC_NAN => Bson::Double(f64::NAN),
        ctype::NUMERIC_ZERO => Bson::Int32(0),
        ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE | ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE => {
            let neg = ct == ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE;
            let vinv = inv ^ neg;
            let enc = r.u64(vinv)?;
            if enc == !0u64 {
                Bson::Double(if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                })
            } else if enc >> 63 == 1 {
                let lo = r.u64(vinv)?;
                let hi = enc & !(1u64 << 63);
                let c = (((hi & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
                let e = ((hi >> 49) & 0x3fff) as i32 - DEC_EXP_BIAS;
                Bson::Decimal128(make_decimal(neg, c, e))
            } else {
                let has_cont = enc & 1 == 1;
                let bin = f64::from_bits((enc >> 1) | (1u64 << 62));
                if has_cont {
                    read_continuation_34(r, vinv, neg, bin)?
                } else if neg && bin == TWO_POW_63 {
                    Bson::Int64(i64::MIN)
                } else {
                    Bson::Double(if neg { -bin } else { bin })
                }
            }
        }
        ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE | ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE => {
            let neg = ct == ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE;
            let vinv = inv ^ neg;
            let enc = r.u64(vinv)?;
            let sign = |x: f64| Bson::Double(if neg { -x } else { x });
            match enc >> 62 {
                0 => {
                    let lo = r.u64(vinv)?;
                    let c = (((enc & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
                    let e = ((enc >> 49) & 0x3fff) as i32 - DEC_EXP_BIAS;
                    Bson::Decimal128(make_decimal(neg, c, e))
                }
                1 | 2 => {
                    let has_cont = enc & 1 == 1;
                    let scaled = f64::from_bits((enc - (1u64 << 62)) >> 1);
                    let bin = ldexp(scaled, -256);
                    if !has_cont {
                        sign(bin)
                    } else if bin < f64::MIN_POSITIVE {
                        // our substitute encoding (16-byte continuation)
                        let cont = u128::from_be_bytes(r.bytes(16, vinv)?.try_into().unwrap());
                        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
                        dec_bson(neg, &Digits::from_u128(c + cont, e))
                    } else {
                        read_continuation_34(r, vinv, neg, bin)?
                    }
                }
                _ => {
                    let dcm = enc & 3;
                    let bin = f64::from_bits(enc >> 2);
                    decode_with_dcm(r, dcm, vinv, neg, bin)?
                }
            }
        }
        ctype::NUMERIC_NEGATIVE_8_BYTE_INT..=ctype::NUMERIC_NEGATIVE_1_BYTE_INT
        | ctype::NUMERIC_POSITIVE_1_BYTE_INT..=ctype::NUMERIC_POSITIVE_8_BYTE_INT => {
            let neg = ct <= ctype::NUMERIC_NEGATIVE_1_BYTE_INT;
            let vinv = inv ^ neg;
            let n = if neg {
                (ctype::NUMERIC_NEGATIVE_1_BYTE_INT - ct + 1) as usize
            } else {
                (ct - ctype::NUMERIC_POSITIVE_1_BYTE_INT + 1) as usize
            };
            let mut v = 0u64;
            for b in r.bytes(n, vinv)? {
                v = (v << 8) | b as u64;
            }
            let integer_part = v >> 1;
            if v & 1 == 0 {
                return Ok(int_bson(neg, integer_part));
            }
            if integer_part >= (1u64 << 53) {
                // Decimal with an explicit integer part and a fraction continuation.
                if integer_part < (1u64 << 55) {
                    r.byte(vinv)?; // DCM byte
                }
                let cont = r.u64(vinv)?;
                let k = 34 - integer_part.to_string().len() as i32;
                let c = integer_part as u128 * 10u128.pow(k as u32) + cont as u128;
                return Ok(dec_bson(neg, &Digits::from_u128(c, -k)));
            }
            // A double with a fraction: the remaining 8 - n bytes hold the fraction.
            let fb = 8 - n;
            let rest = r.bytes(fb, vinv)?;
            let mut enc = v;
            for b in rest {
                enc = (enc << 8) | b as u64;
            }
            let dcm = enc & 3;
            let scaled = (enc & !3u64) - ((integer_part + 1) << (fb * 8));
            let bin = scaled as f64 / pow256(fb as i32);
            decode_with_dcm(r, dcm, vinv, neg, bin)?
        }
        other => return Err(format_error(format!("unknown type byte {other}"))),
    })
}

fn decode_with_dcm(r: &mut Reader, dcm: u64, vinv: bool, neg: bool, bin: f64) -> Result<Bson> {
    Ok(match dcm {
        DCM_EQUAL_TO_DOUBLE => Bson::Double(if neg { -bin } else { bin }),
        DCM_EQUAL_TO_15 => dec_bson(neg, &Digits::from_f64(bin).round_up(15)),
        _ => read_continuation_34(r, vinv, neg, bin)?,
    })
}

//! Encoding numbers: int32, int64, double and Decimal128 that are numerically equal
//! encode to the same bytes, as mongod's `_appendInteger`, `_appendDoubleWithoutTypeBits`
//! and `_appendNumberDecimal` (V1) write them.

use super::decimal::{decimal_to_double_toward_zero, parse_decimal, DecKind, Digits, DEC_EXP_BIAS};
use super::{
    ctype, put, put_bytes, put_u64, DCM_CONT_LARGER_THAN_15, DCM_CONT_LESS_THAN_15,
    DCM_EQUAL_TO_15, DCM_EQUAL_TO_DOUBLE, TWO_POW_53, TWO_POW_63,
};
use std::cmp::Ordering as CmpOrdering;

/// int32 / int64 (`_appendInteger`).
pub(super) fn append_integer(buf: &mut Vec<u8>, n: i64, inv: bool) {
    if n == i64::MIN {
        // -2^63 is exactly a double but not a positive int64: encoded as a large double.
        append_large_double(buf, n as f64, DCM_EQUAL_TO_DOUBLE, inv);
        return;
    }
    if n == 0 {
        put(buf, ctype::NUMERIC_ZERO, inv);
        return;
    }
    let neg = n < 0;
    let mag = n.unsigned_abs();
    append_preshifted_integer(buf, mag << 1, neg, inv);
}

/// `_appendPreshiftedIntegerPortion`: ctype says how many bytes follow (big-endian,
/// inverted for negative values).
pub(super) fn append_preshifted_integer(buf: &mut Vec<u8>, value: u64, neg: bool, inv: bool) {
    let bytes_needed = (64 - value.leading_zeros()).div_ceil(8) as usize;
    let be = value.to_be_bytes();
    let used = &be[8 - bytes_needed..];
    if neg {
        put(
            buf,
            ctype::NUMERIC_NEGATIVE_1_BYTE_INT - (bytes_needed as u8 - 1),
            inv,
        );
        put_bytes(buf, used, !inv);
    } else {
        put(
            buf,
            ctype::NUMERIC_POSITIVE_1_BYTE_INT + (bytes_needed as u8 - 1),
            inv,
        );
        put_bytes(buf, used, inv);
    }
}

/// `_appendDoubleWithoutTypeBits` (V1).
pub(super) fn append_double(buf: &mut Vec<u8>, num: f64, dcm: u64, inv: bool) {
    let neg = num < 0.0;
    let mag = num.abs();
    if !(mag >= 1.0) {
        if mag > 0.0 {
            append_small_double(buf, num, dcm, inv);
        } else if num == 0.0 {
            put(buf, ctype::NUMERIC_ZERO, inv); // -0.0 and 0.0 collapse
        } else {
            put(buf, ctype::NUMERIC_NAN, inv);
        }
        return;
    }
    if mag < TWO_POW_63 {
        let integer_part = mag as u64;
        if integer_part as f64 == mag && dcm == DCM_EQUAL_TO_DOUBLE {
            append_preshifted_integer(buf, integer_part << 1, neg, inv);
            return;
        }
        let fractional_bytes = ((integer_part << 1).leading_zeros() / 8) as usize;
        let ct = if neg {
            ctype::NUMERIC_NEGATIVE_8_BYTE_INT + fractional_bytes as u8
        } else {
            ctype::NUMERIC_POSITIVE_8_BYTE_INT - fractional_bytes as u8
        };
        put(buf, ct, inv);
        // Multiplying by 256^k shifts the binary fraction left by k bytes (exact).
        let mut encoding = (mag * pow256(fractional_bytes as i32)) as u64;
        encoding = encoding.wrapping_add((integer_part + 1) << (fractional_bytes * 8));
        debug_assert_eq!(encoding & 3, 0);
        encoding |= dcm;
        put_u64(buf, encoding, if neg { !inv } else { inv });
    } else {
        append_large_double(buf, num, dcm, inv);
    }
}

pub(super) fn pow256(k: i32) -> f64 {
    2f64.powi(8 * k)
}

/// `_appendSmallDouble`: 0 < |value| < 1.
pub(super) fn append_small_double(buf: &mut Vec<u8>, value: f64, dcm: u64, inv: bool) {
    let neg = value < 0.0;
    let mut mag = value.abs();
    put(
        buf,
        if neg {
            ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE
        } else {
            ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE
        },
        inv,
    );
    let encoded = if mag >= ldexp(1.0, -255) {
        // [2^-255, 1): prefix 0b11
        (mag.to_bits() << 2) | dcm
    } else {
        // [denorm_min, 2^-255): scale by 2^256 to avoid subnormals; prefixes 0b01 / 0b10.
        mag *= ldexp(1.0, 256);
        let mut e = mag.to_bits() << 1;
        e |= (dcm != DCM_EQUAL_TO_DOUBLE) as u64;
        e + (1u64 << 62)
    };
    put_u64(buf, encoded, if neg { !inv } else { inv });
}

/// `_appendLargeDouble`: |value| >= 2^63, including infinities.
pub(super) fn append_large_double(buf: &mut Vec<u8>, value: f64, dcm: u64, inv: bool) {
    let pos = value > 0.0;
    put(
        buf,
        if pos {
            ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
        } else {
            ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
        },
        inv,
    );
    let encoded = if value.is_finite() {
        let mut e = value.to_bits() << 1;
        e &= !(1u64 << 63);
        e | (dcm != DCM_EQUAL_TO_DOUBLE) as u64
    } else {
        !0u64
    };
    put_u64(buf, encoded, if pos { inv } else { !inv });
}

/// Exact `x * 2^e` for results that are representable (steps keep intermediates exact).
pub(super) fn ldexp(mut x: f64, mut e: i32) -> f64 {
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e)
}

/// `_appendNumberDecimal` (V1).
pub(super) fn append_decimal(buf: &mut Vec<u8>, dec: &bson::Decimal128, inv: bool) {
    let (neg, coef, exp) = match parse_decimal(dec) {
        DecKind::NaN => return put(buf, ctype::NUMERIC_NAN, inv),
        DecKind::Inf(neg) => {
            put(
                buf,
                if neg {
                    ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
                } else {
                    ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
                },
                inv,
            );
            return put_u64(buf, !0u64, if neg { !inv } else { inv });
        }
        DecKind::Finite { neg, coef, exp } => (neg, coef, exp),
    };
    if coef == 0 {
        return put(buf, ctype::NUMERIC_ZERO, inv);
    }
    let mag = Digits::from_u128(coef, exp);
    let vinv = if neg { !inv } else { inv }; // inversion for magnitude bytes
    let (bin, exact) = decimal_to_double_toward_zero(&mag);
    let signed = |x: f64| if neg { -x } else { x };
    if exact {
        return append_double(buf, signed(bin), DCM_EQUAL_TO_DOUBLE, inv);
    }
    if bin < f64::MIN_POSITIVE {
        if bin == 0.0 {
            // Smaller than the smallest subnormal: store the normalized decimal itself.
            put(
                buf,
                if neg {
                    ctype::NUMERIC_NEGATIVE_SMALL_MAGNITUDE
                } else {
                    ctype::NUMERIC_POSITIVE_SMALL_MAGNITUDE
                },
                inv,
            );
            let (c, e) = mag.normalize34();
            let hi = (((e + DEC_EXP_BIAS) as u64) << 49) | (c >> 64) as u64;
            put_u64(buf, hi, vinv);
            put_u64(buf, c as u64, vinv);
            return;
        }
        // NOT mongod's bytes: mongod scales in the decimal domain here. Order-correct
        // substitute: tiny-double prefix with the continuation bit, then a 16-byte
        // continuation relative to the 34-digit round-up of `bin`.
        append_small_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
        let cont = mag.coef_at(e).saturating_sub(c);
        put_bytes(buf, &cont.to_be_bytes(), vinv);
        return;
    }
    if bin >= f64::MAX {
        // Huge: normalized decimal with the high bit forced, between DBL_MAX and Inf.
        put(
            buf,
            if neg {
                ctype::NUMERIC_NEGATIVE_LARGE_MAGNITUDE
            } else {
                ctype::NUMERIC_POSITIVE_LARGE_MAGNITUDE
            },
            inv,
        );
        let (c, e) = mag.normalize34();
        let hi = (1u64 << 63) | (((e + DEC_EXP_BIAS) as u64) << 49) | (c >> 64) as u64;
        put_u64(buf, hi, vinv);
        put_u64(buf, c as u64, vinv);
        return;
    }
    let continuation_vs_34 = |buf: &mut Vec<u8>| {
        let (c, e) = Digits::from_f64(bin).round_up(34).normalize34();
        let cont = mag.coef_at(e).saturating_sub(c);
        put_u64(buf, cont.min(u64::MAX as u128) as u64, vinv);
    };
    if bin >= TWO_POW_63 {
        append_large_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        continuation_vs_34(buf);
        return;
    }
    if bin < ldexp(1.0, -255) {
        append_small_double(buf, signed(bin), DCM_CONT_LARGER_THAN_15, inv);
        continuation_vs_34(buf);
        return;
    }
    if bin >= TWO_POW_53 {
        // Integer part and fraction handled explicitly (bin lost integer precision).
        let integer_part = mag.coef_at(0) as u64; // truncation toward zero
        let has_fraction = Digits::from_u128(integer_part as u128, 0) != mag;
        append_preshifted_integer(buf, (integer_part << 1) | has_fraction as u64, neg, inv);
        if !has_fraction {
            return;
        }
        if integer_part < (1u64 << 55) {
            put(buf, DCM_CONT_LARGER_THAN_15 as u8, vinv);
        }
        let n = integer_part.to_string().len() as i32;
        let k = 34 - n;
        let total = mag.coef_at(-k);
        let cont = total - (integer_part as u128) * 10u128.pow(k as u32);
        put_u64(buf, cont as u64, vinv);
        return;
    }
    if coef < 1_000_000_000_000_000 {
        // At most 15 digits: the double rounded up to 15 digits gives it back.
        return append_double(buf, signed(bin), DCM_EQUAL_TO_15, inv);
    }
    let bin_digits = Digits::from_f64(bin);
    let from_bin = bin_digits.round_up(15);
    match mag.cmp(&from_bin) {
        CmpOrdering::Equal => append_double(buf, signed(bin), DCM_EQUAL_TO_15, inv),
        o => {
            let dcm = if o == CmpOrdering::Less {
                DCM_CONT_LESS_THAN_15
            } else {
                DCM_CONT_LARGER_THAN_15
            };
            append_double(buf, signed(bin), dcm, inv);
            continuation_vs_34(buf);
        }
    }
}

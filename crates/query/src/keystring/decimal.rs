//! Exact arithmetic on Decimal128 values as decimal digit strings: what the encoder
//! needs to place a decimal among doubles, and the decoder to rebuild it.

use std::cmp::Ordering as CmpOrdering;

pub(super) const DEC_EXP_BIAS: i32 = 6176;

pub(super) enum DecKind {
    NaN,
    Inf(bool),
    Finite { neg: bool, coef: u128, exp: i32 },
}

pub(super) fn parse_decimal(d: &bson::Decimal128) -> DecKind {
    let b = d.bytes();
    let lo = u64::from_le_bytes(b[0..8].try_into().unwrap());
    let hi = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let neg = hi >> 63 == 1;
    let comb = (hi >> 58) & 0x1f;
    if comb == 0x1f {
        return DecKind::NaN;
    }
    if comb == 0x1e {
        return DecKind::Inf(neg);
    }
    let (exp, coef) = if (hi >> 61) & 3 == 3 {
        // "11" form: coefficient >= 2^113 > 10^34 - 1: non-canonical, value is zero.
        (((hi >> 47) & 0x3fff) as i32, 0u128)
    } else {
        let c = (((hi & ((1u64 << 49) - 1)) as u128) << 64) | lo as u128;
        (
            ((hi >> 49) & 0x3fff) as i32,
            if c >= 10u128.pow(34) { 0 } else { c },
        )
    };
    DecKind::Finite {
        neg,
        coef,
        exp: exp - DEC_EXP_BIAS,
    }
}

pub(super) fn make_decimal(neg: bool, coef: u128, exp: i32) -> bson::Decimal128 {
    let biased = (exp + DEC_EXP_BIAS) as u64;
    let hi = ((neg as u64) << 63) | (biased << 49) | (coef >> 64) as u64;
    let lo = coef as u64;
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&lo.to_le_bytes());
    b[8..16].copy_from_slice(&hi.to_le_bytes());
    bson::Decimal128::from_bytes(b)
}

/// A positive decimal `digits × 10^exp` (no leading or trailing zeros), or zero (empty digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Digits {
    pub(super) d: Vec<u8>,
    pub(super) exp: i32,
}

impl Digits {
    pub(super) fn new(mut d: Vec<u8>, mut exp: i32) -> Digits {
        let lead = d.iter().take_while(|&&x| x == 0).count();
        d.drain(..lead);
        while d.last() == Some(&0) {
            d.pop();
            exp += 1;
        }
        if d.is_empty() {
            exp = 0;
        }
        Digits { d, exp }
    }

    pub(super) fn from_u128(c: u128, exp: i32) -> Digits {
        Digits::new(c.to_string().bytes().map(|b| b - b'0').collect(), exp)
    }

    /// Exact decimal expansion of a positive finite double.
    pub(super) fn from_f64(x: f64) -> Digits {
        let bits = x.to_bits();
        let e = ((bits >> 52) & 0x7ff) as i32;
        let f = bits & ((1u64 << 52) - 1);
        let (m, k) = if e == 0 {
            (f, -1074)
        } else {
            (f | (1u64 << 52), e - 1075)
        };
        let mut big = vec![m as u32, (m >> 32) as u32];
        if k >= 0 {
            big_shl(&mut big, k as u32);
            Digits::new(big_to_digits(&big), 0)
        } else {
            // m × 2^k = m × 5^-k × 10^k
            let mut n = -k;
            while n >= 13 {
                big_mul_small(&mut big, 1_220_703_125); // 5^13
                n -= 13;
            }
            big_mul_small(&mut big, 5u32.pow(n as u32));
            Digits::new(big_to_digits(&big), k)
        }
    }

    pub(super) fn is_zero(&self) -> bool {
        self.d.is_empty()
    }

    /// Exponent of the leading digit.
    pub(super) fn adjusted(&self) -> i32 {
        self.exp + self.d.len() as i32 - 1
    }

    pub(super) fn cmp(&self, o: &Digits) -> CmpOrdering {
        match (self.is_zero(), o.is_zero()) {
            (true, true) => return CmpOrdering::Equal,
            (true, false) => return CmpOrdering::Less,
            (false, true) => return CmpOrdering::Greater,
            _ => {}
        }
        self.adjusted()
            .cmp(&o.adjusted())
            .then_with(|| self.d.cmp(&o.d))
    }

    /// Rounded away from zero to at most `n` significant digits.
    pub(super) fn round_up(&self, n: usize) -> Digits {
        if self.d.len() <= n {
            return self.clone();
        }
        let mut head: Vec<u8> = self.d[..n].to_vec();
        let exp = self.exp + (self.d.len() - n) as i32;
        if self.d[n..].iter().any(|&x| x != 0) {
            let mut i = n;
            loop {
                if i == 0 {
                    head.insert(0, 1);
                    break;
                }
                i -= 1;
                if head[i] == 9 {
                    head[i] = 0;
                } else {
                    head[i] += 1;
                    break;
                }
            }
        }
        Digits::new(head, exp)
    }

    /// Normalized to exactly 34 digits (Decimal128::normalize): (coefficient, exponent);
    /// fewer digits where 34 would take the exponent below Decimal128's smallest
    /// (-6176: the value keeps a valid exponent, and (exponent, coefficient) still
    /// orders these values, every one with fewer digits being below 10^(-6176+33)).
    /// Found by the `keystring` fuzz target: 4.36207726E-6168 encoded an exponent that
    /// wrapped around and did not decode.
    pub(super) fn normalize34(&self) -> (u128, i32) {
        let mut c: u128 = 0;
        for &x in &self.d {
            c = c * 10 + x as u128;
        }
        let pad = (34 - self.d.len() as i32)
            .min(self.exp + DEC_EXP_BIAS)
            .max(0);
        (c * 10u128.pow(pad as u32), self.exp - pad)
    }

    /// The value as an integer multiple of 10^e (truncating if not exact).
    pub(super) fn coef_at(&self, e: i32) -> u128 {
        let mut c: u128 = 0;
        let shift = self.exp - e;
        let keep = if shift >= 0 {
            self.d.len()
        } else {
            (self.d.len() as i32 + shift).max(0) as usize
        };
        for &x in &self.d[..keep] {
            c = c.saturating_mul(10).saturating_add(x as u128);
        }
        if shift > 0 {
            c = c.saturating_mul(10u128.saturating_pow(shift as u32));
        }
        c
    }
}

pub(super) fn big_mul_small(a: &mut Vec<u32>, m: u32) {
    let mut carry = 0u64;
    for limb in a.iter_mut() {
        let v = *limb as u64 * m as u64 + carry;
        *limb = v as u32;
        carry = v >> 32;
    }
    if carry > 0 {
        a.push(carry as u32);
    }
}

pub(super) fn big_shl(a: &mut Vec<u32>, k: u32) {
    let words = (k / 32) as usize;
    let bits = k % 32;
    if bits > 0 {
        let mut carry = 0u32;
        for limb in a.iter_mut() {
            let v = (*limb << bits) | carry;
            carry = *limb >> (32 - bits);
            *limb = v;
        }
        if carry > 0 {
            a.push(carry);
        }
    }
    for _ in 0..words {
        a.insert(0, 0);
    }
}

pub(super) fn big_to_digits(a: &[u32]) -> Vec<u8> {
    let mut a: Vec<u32> = a.to_vec();
    let mut chunks: Vec<u32> = Vec::new();
    while a.iter().any(|&x| x != 0) {
        let mut rem = 0u64;
        for limb in a.iter_mut().rev() {
            let cur = (rem << 32) | *limb as u64;
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while a.last() == Some(&0) {
            a.pop();
        }
    }
    let mut s = String::new();
    for (i, c) in chunks.iter().rev().enumerate() {
        if i == 0 {
            s.push_str(&c.to_string());
        } else {
            s.push_str(&format!("{c:09}"));
        }
    }
    s.bytes().map(|b| b - b'0').collect()
}

/// The largest double not above the positive decimal `mag` (round toward zero), and
/// whether it is exactly equal.
pub(super) fn decimal_to_double_toward_zero(mag: &Digits) -> (f64, bool) {
    let s: String = mag.d.iter().map(|&x| (x + b'0') as char).collect();
    let near: f64 = format!("{s}e{}", mag.exp).parse().unwrap_or(f64::INFINITY);
    if near.is_infinite() {
        return (f64::MAX, false);
    }
    if near == 0.0 {
        return (0.0, false);
    }
    match Digits::from_f64(near).cmp(mag) {
        CmpOrdering::Equal => (near, true),
        CmpOrdering::Less => (near, false),
        CmpOrdering::Greater => (f64::from_bits(near.to_bits() - 1), false),
    }
}

use super::decimal::{parse_decimal, DecKind, Digits};
use super::encode::{append_raw_elements, append_simple_element, simple_elements};
use super::number::ldexp;
use super::*;
use crate::compare::cmp_bson;
use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary};
use std::cmp::Ordering as CmpOrdering;

/// The byte walk of raw document keys against the `bson` crate's iterator.
mod raw_key {
    use super::*;
    use bson::doc;

    /// The byte walk of the usual document keys writes what the iterator writes, and
    /// gives up (for the iterator to decide) on anything else, also on thousands of
    /// mutated documents.
    #[test]
    fn simple_walk_matches_the_iterator() {
        let docs = [
            doc! {"_id": bson::oid::ObjectId::new()},
            doc! {"_id": 7, "a": i64::MIN, "b": -0.0, "c": f64::NAN, "d": "a\u{0}é", "e": ""},
            doc! {"_id": 1.5, "sk": {"x": 1}},
            doc! {"_id": true},
        ];
        let mut fast_taken = 0;
        for d in &docs {
            let b = bson::to_vec(d).unwrap();
            for at in 0..b.len() {
                for delta in [0u8, 1, 0x7f, 0xff] {
                    if delta == 0 && at > 0 {
                        continue;
                    }
                    let mut m = b.clone();
                    m[at] = m[at].wrapping_add(delta);
                    let Ok(raw) = bson::RawDocument::from_bytes(&m) else {
                        continue;
                    };
                    let mut general = Vec::new();
                    let general_ok = append_raw_elements(&mut general, raw).is_ok();
                    let mut fast = Vec::new();
                    if simple_elements(raw.as_bytes(), |k, v| {
                        append_simple_element(&mut fast, k, v)
                    }) {
                        fast_taken += 1;
                        assert!(
                            general_ok,
                            "byte {at} + {delta}: the walk took what the iterator refuses"
                        );
                        assert_eq!(fast, general, "byte {at} + {delta}");
                    }
                }
            }
        }
        assert!(fast_taken > 50, "the walk took only {fast_taken} documents");
    }
}

fn dec(s: &str) -> Bson {
    Bson::Decimal128(s.parse().unwrap())
}

fn bin(sub: u8, bytes: Vec<u8>) -> Bson {
    Bson::Binary(Binary {
        subtype: BinarySubtype::from(sub),
        bytes,
    })
}

fn oid(h: &str) -> Bson {
    Bson::ObjectId(ObjectId::parse_str(h).unwrap())
}

// 3.14159 is a double to encode, not an approximation of π.
#[allow(clippy::approx_constant)]
fn sample_values() -> Vec<Bson> {
    let mut v = vec![
        Bson::MinKey,
        Bson::MaxKey,
        Bson::Null,
        Bson::Undefined,
        Bson::Double(f64::NAN),
        Bson::Double(f64::NEG_INFINITY),
        Bson::Double(f64::INFINITY),
        Bson::Double(-f64::MAX),
        Bson::Double(f64::MAX),
        Bson::Double(0.0),
        Bson::Double(-0.0),
        Bson::Double(f64::MIN_POSITIVE),
        Bson::Double(-f64::MIN_POSITIVE),
        Bson::Double(5e-324),
        Bson::Double(-5e-324),
        Bson::Double(1e-300),
        Bson::Double(ldexp(1.0, -255)),
        Bson::Double(ldexp(1.0, -256)),
        Bson::Double(0.1),
        Bson::Double(-0.1),
        Bson::Double(0.5),
        Bson::Double(0.9999999999999999),
        Bson::Double(1.0),
        Bson::Double(1.5),
        Bson::Double(-1.5),
        Bson::Double(2.0),
        Bson::Double(127.5),
        Bson::Double(128.0),
        Bson::Double(-128.25),
        Bson::Double(3.14159),
        Bson::Double(1e15 + 0.5),
        Bson::Double(4503599627370495.5),
        Bson::Double(TWO_POW_53),
        Bson::Double(-TWO_POW_53),
        Bson::Double(TWO_POW_63),
        Bson::Double(-TWO_POW_63),
        Bson::Double(1e19),
        Bson::Double(-1e19),
        Bson::Double(1e300),
        Bson::Int32(0),
        Bson::Int32(1),
        Bson::Int32(-1),
        Bson::Int32(127),
        Bson::Int32(128),
        Bson::Int32(255),
        Bson::Int32(256),
        Bson::Int32(i32::MAX),
        Bson::Int32(i32::MIN),
        Bson::Int64(0),
        Bson::Int64(1),
        Bson::Int64(i64::MAX),
        Bson::Int64(i64::MIN),
        Bson::Int64(i64::MIN + 1),
        Bson::Int64(9_007_199_254_740_993),
        Bson::Int64(-9_007_199_254_740_993),
        Bson::Int64(9_007_199_254_740_992),
        Bson::Int64(1 << 62),
        Bson::Int64((1 << 55) + 3),
        dec("0"),
        dec("-0"),
        dec("1"),
        dec("1.0"),
        dec("0.1"),
        dec("-0.1"),
        dec("2.5"),
        dec("3.14159"),
        dec("1.23456789012345678901234567890"),
        dec("-1.23456789012345678901234567890"),
        dec("1.2345678901234567"),
        dec("9007199254740993"),
        dec("9007199254740993.5"),
        dec("-9007199254740993.25"),
        dec("36028797018963969.125"),
        dec("9223372036854775807.5"),
        dec("9223372036854775809"),
        dec("-9223372036854775809"),
        dec("1E+400"),
        dec("-1E+400"),
        dec("1.797693134862315708145274237317044E+308"),
        dec("1E-400"),
        dec("-1E-400"),
        // Near Decimal128's smallest exponent (the keystring fuzz target's first find).
        dec("4.36207726E-6168"),
        dec("-4.36207726E-6168"),
        dec("1E-6176"),
        dec("9.999999999999999999999999999999999E-6143"),
        dec("1.000000000000000000000000000000001E-300"),
        dec("1.5E-310"),
        dec("-1.5E-310"),
        dec("1E-80"),
        dec("Infinity"),
        dec("-Infinity"),
        dec("NaN"),
        Bson::String(String::new()),
        Bson::String("a".into()),
        Bson::String("a\0".into()),
        Bson::String("a\0b".into()),
        Bson::String("ab".into()),
        Bson::String("b".into()),
        Bson::String("\u{ff}".into()),
        Bson::String("日本語".into()),
        Bson::String("\0".into()),
        Bson::Symbol("ab".into()),
        Bson::Document(doc! {}),
        Bson::Document(doc! {"a": 1}),
        Bson::Document(doc! {"a": 1.0, "b": 2}),
        Bson::Document(doc! {"a": "x"}),
        Bson::Document(doc! {"b": 0}),
        Bson::Document(doc! {"a": {"b": [1, 2]}}),
        Bson::Document(doc! {"a": null}),
        Bson::Document(doc! {"ab": 1}),
        Bson::Array(vec![]),
        Bson::Array(vec![Bson::Int32(1)]),
        Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]),
        Bson::Array(vec![Bson::Int32(2)]),
        Bson::Array(vec![Bson::String("a".into())]),
        Bson::Array(vec![Bson::String("a\0".into())]),
        Bson::Array(vec![Bson::Null]),
        Bson::Array(vec![Bson::Array(vec![])]),
        bin(0, vec![]),
        bin(0, vec![1]),
        bin(4, vec![1]),
        bin(0, vec![2]),
        bin(0, vec![0xff; 300]),
        bin(0, vec![0; 254]),
        bin(0, vec![0; 255]),
        oid("000000000000000000000000"),
        oid("63a81537c7c3f623fd5bc92e"),
        oid("ffffffffffffffffffffffff"),
        Bson::Boolean(false),
        Bson::Boolean(true),
        Bson::DateTime(bson::DateTime::from_millis(i64::MIN)),
        Bson::DateTime(bson::DateTime::from_millis(-1)),
        Bson::DateTime(bson::DateTime::from_millis(0)),
        Bson::DateTime(bson::DateTime::from_millis(1_700_000_000_000)),
        Bson::Timestamp(bson::Timestamp {
            time: 0,
            increment: 0,
        }),
        Bson::Timestamp(bson::Timestamp {
            time: 1,
            increment: 0,
        }),
        Bson::Timestamp(bson::Timestamp {
            time: 0,
            increment: u32::MAX,
        }),
        Bson::Timestamp(bson::Timestamp {
            time: u32::MAX,
            increment: u32::MAX,
        }),
        Bson::RegularExpression(bson::Regex {
            pattern: "a".into(),
            options: "".into(),
        }),
        Bson::RegularExpression(bson::Regex {
            pattern: "a".into(),
            options: "i".into(),
        }),
        Bson::RegularExpression(bson::Regex {
            pattern: "ab".into(),
            options: "".into(),
        }),
        Bson::JavaScriptCode("x".into()),
        Bson::JavaScriptCode("y".into()),
        Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: "x".into(),
            scope: doc! {"a": 1},
        }),
    ];
    // a sweep of numbers of every width around interesting magnitudes
    for e in [-3i32, -1, 0, 1, 7, 8, 15, 16, 31, 52, 53, 54, 55, 56, 62] {
        let p = ldexp(1.0, e);
        v.push(Bson::Double(p));
        v.push(Bson::Double(-p * 1.25));
        if e >= 0 {
            v.push(Bson::Int64((1i64 << e) - 1));
            v.push(Bson::Int64(-(1i64 << e) + 1));
        }
    }
    v
}

fn sign(o: CmpOrdering) -> i32 {
    o as i32
}

/// Exact numeric view (compare.rs compares decimals through f64, which is lossy).
fn exact_num(v: &Bson) -> Option<(i32, bool, Digits)> {
    // (class: 0 NaN, 1 -inf, 2 finite, 3 +inf), negative, magnitude
    let fin = |neg: bool, d: Digits| Some((2, neg && !d.is_zero(), d));
    match v {
        Bson::Int32(i) => fin(*i < 0, Digits::from_u128(i.unsigned_abs() as u128, 0)),
        Bson::Int64(i) => fin(*i < 0, Digits::from_u128(i.unsigned_abs() as u128, 0)),
        Bson::Double(d) if d.is_nan() => Some((0, false, Digits::new(vec![], 0))),
        Bson::Double(d) if d.is_infinite() => {
            Some((if *d > 0.0 { 3 } else { 1 }, false, Digits::new(vec![], 0)))
        }
        Bson::Double(d) if *d == 0.0 => fin(false, Digits::new(vec![], 0)),
        Bson::Double(d) => fin(*d < 0.0, Digits::from_f64(d.abs())),
        Bson::Decimal128(x) => match parse_decimal(x) {
            DecKind::NaN => Some((0, false, Digits::new(vec![], 0))),
            DecKind::Inf(n) => Some((if n { 1 } else { 3 }, false, Digits::new(vec![], 0))),
            DecKind::Finite { neg, coef, exp } => fin(neg, Digits::from_u128(coef, exp)),
        },
        _ => None,
    }
}

fn ref_cmp(a: &Bson, b: &Bson) -> CmpOrdering {
    match (exact_num(a), exact_num(b)) {
        (Some((ca, na, da)), Some((cb, nb, db))) => ca.cmp(&cb).then_with(|| {
            if ca != 2 {
                return CmpOrdering::Equal;
            }
            match (na, nb) {
                (false, true) => CmpOrdering::Greater,
                (true, false) => CmpOrdering::Less,
                (false, false) => da.cmp(&db),
                (true, true) => db.cmp(&da),
            }
        }),
        _ => cmp_bson(a, b),
    }
}

fn key(v: &Bson, desc: bool) -> Vec<u8> {
    let mut b = KeyStringBuilder::new();
    b.append(v, desc);
    b.append_discriminator_end();
    b.into_bytes()
}

/// `ref_cmp` over all pairs, computed once (the exact decimal expansion is slow in debug builds).
fn ref_matrix(vals: &[Bson]) -> Vec<Vec<CmpOrdering>> {
    vals.iter()
        .map(|a| vals.iter().map(|b| ref_cmp(a, b)).collect())
        .collect()
}

#[test]
fn pairwise_order_matches_cmp_bson() {
    let vals = sample_values();
    let m = ref_matrix(&vals);
    let asc: Vec<Vec<u8>> = vals.iter().map(|v| key(v, false)).collect();
    let desc: Vec<Vec<u8>> = vals.iter().map(|v| key(v, true)).collect();
    let raw: Vec<Vec<u8>> = vals.iter().map(encode_value).collect();
    for (i, a) in vals.iter().enumerate() {
        for (j, b) in vals.iter().enumerate() {
            let want = m[i][j];
            // compare.rs agrees with the exact order except for decimals beyond f64 precision
            if !matches!(a, Bson::Decimal128(_)) && !matches!(b, Bson::Decimal128(_)) {
                assert_eq!(cmp_bson(a, b), want, "{a:?} vs {b:?}");
            }
            assert_eq!(
                sign(asc[i].cmp(&asc[j])),
                sign(want),
                "asc {a:?} vs {b:?}: {} vs {}",
                to_hex_upper(&asc[i]),
                to_hex_upper(&asc[j])
            );
            assert_eq!(
                sign(desc[i].cmp(&desc[j])),
                sign(want.reverse()),
                "desc {a:?} vs {b:?}"
            );
            // Without kEnd, ascending order still holds (strings: "a" < "a\0..." by prefix).
            assert_eq!(sign(raw[i].cmp(&raw[j])), sign(want), "raw {a:?} vs {b:?}");
        }
    }
}

#[test]
fn compound_tuples_order_lexicographically() {
    let vals: Vec<Bson> = sample_values().into_iter().step_by(3).collect();
    let m = ref_matrix(&vals);
    let n = vals.len();
    let tuples: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (0..n).step_by(2).map(move |b| (a, b)))
        .collect();
    for (d1, d2) in [(false, false), (false, true), (true, false), (true, true)] {
        let encs: Vec<Vec<u8>> = tuples
            .iter()
            .map(|&(a, b)| {
                let mut k = KeyStringBuilder::new();
                k.append(&vals[a], d1);
                k.append(&vals[b], d2);
                k.append_discriminator_end();
                k.into_bytes()
            })
            .collect();
        for (i, x) in tuples.iter().enumerate() {
            for (j, y) in tuples.iter().enumerate() {
                let c1 = if d1 {
                    m[x.0][y.0].reverse()
                } else {
                    m[x.0][y.0]
                };
                let c2 = if d2 {
                    m[x.1][y.1].reverse()
                } else {
                    m[x.1][y.1]
                };
                assert_eq!(
                    sign(encs[i].cmp(&encs[j])),
                    sign(c1.then(c2)),
                    "{:?} vs {:?} dirs {d1} {d2}",
                    (&vals[x.0], &vals[x.1]),
                    (&vals[y.0], &vals[y.1])
                );
            }
        }
    }
}

#[test]
fn numerically_equal_values_encode_equal() {
    let groups = vec![
        vec![
            Bson::Int32(1),
            Bson::Int64(1),
            Bson::Double(1.0),
            dec("1"),
            dec("1.000"),
        ],
        vec![
            Bson::Int32(0),
            Bson::Int64(0),
            Bson::Double(0.0),
            Bson::Double(-0.0),
            dec("0"),
            dec("-0E+5"),
        ],
        vec![
            Bson::Int32(-300),
            Bson::Int64(-300),
            Bson::Double(-300.0),
            dec("-3E2"),
        ],
        vec![Bson::Double(2.5), dec("2.5"), dec("2.50")],
        vec![
            Bson::Int64(i64::MIN),
            Bson::Double(-TWO_POW_63),
            dec("-9223372036854775808"),
        ],
        vec![Bson::Double(f64::NAN), dec("NaN")],
        vec![Bson::Double(f64::INFINITY), dec("Infinity")],
        vec![Bson::String("ab".into()), Bson::Symbol("ab".into())],
    ];
    for g in groups {
        let e0 = encode_value(&g[0]);
        for v in &g[1..] {
            assert_eq!(encode_value(v), e0, "{:?} vs {:?}", g[0], v);
        }
    }
}

#[test]
fn known_mongod_bytes() {
    let hex = |v: Bson| to_hex_upper(&encode_value(&v));
    assert_eq!(hex(Bson::MinKey), "0A");
    assert_eq!(hex(Bson::MaxKey), "F0");
    assert_eq!(hex(Bson::Null), "14");
    assert_eq!(hex(Bson::Boolean(false)), "6E");
    assert_eq!(hex(Bson::Boolean(true)), "6F");
    assert_eq!(hex(Bson::Int32(0)), "29");
    assert_eq!(hex(Bson::Int32(1)), "2B02");
    assert_eq!(hex(Bson::Int32(2)), "2B04");
    assert_eq!(hex(Bson::Int32(128)), "2C0100");
    assert_eq!(hex(Bson::Int32(-1)), "27FD");
    assert_eq!(hex(Bson::String("ab".into())), "3C616200");
    assert_eq!(hex(Bson::String("a\0b".into())), "3C6100FF6200");
    assert_eq!(
        hex(Bson::Timestamp(bson::Timestamp {
            time: 1,
            increment: 2
        })),
        "820000000100000002"
    );
    assert_eq!(
        hex(Bson::DateTime(bson::DateTime::from_millis(0))),
        "788000000000000000"
    );
    assert_eq!(hex(bin(4, vec![0xAB])), "5A0104AB");
    assert_eq!(hex(Bson::Array(vec![Bson::Int32(1)])), "502B0200");
    assert_eq!(hex(Bson::Document(doc! {"a": 1})), "461E61002B0200");
    // descending = bitwise NOT
    let mut b = KeyStringBuilder::new();
    b.append(&Bson::Int32(1), true);
    assert_eq!(to_hex_upper(b.as_bytes()), "D4FD");
    // 1.5 as a double: 1-byte int ctype, integer part 2*1+1, one fraction bit
    assert_eq!(hex(Bson::Double(1.5)), "2B0380000000000000");
    // 0.5: small magnitude, (bits << 2)
    assert_eq!(
        hex(Bson::Double(0.5)),
        format!("2A{:016X}", 0.5f64.to_bits() << 2)
    );
}

/// Real resume tokens printed by mongod (MongoDB community forum and a public
/// tutorial), together with the decoded event fields shown next to them.
#[test]
fn real_resume_tokens_roundtrip() {
    // insert event, Timestamp(1671959863, 1), version 1, _id ObjectId("63a81537c7c3f623fd5bc92e")
    let t1 = "8263A81537000000012B022C0100296E5A1004199BDC9429644781918CE46FDC2C0DFF46645F6964006463A81537C7C3F623FD5BC92E0004";
    let uuid1 = from_hex("199BDC9429644781918CE46FDC2C0DFF").unwrap();
    let vals1 = vec![
        Bson::Timestamp(bson::Timestamp {
            time: 1671959863,
            increment: 1,
        }),
        Bson::Int32(1),
        Bson::Int32(128),
        Bson::Int32(0),
        Bson::Boolean(false),
        bin(4, uuid1),
        Bson::Document(doc! {"_id": ObjectId::parse_str("63a81537c7c3f623fd5bc92e").unwrap()}),
    ];
    // insert event, Timestamp({t: 1741186978, i: 25}), version 2
    let t2 = "8267C867A2000000192B042C0100296E5A1004D3284E04D8914467A2160201812E4C4C463C6F7065726174696F6E54797065003C696E736572740046646F63756D656E744B65790046645F6964006467C867A2FB1CBCD579F4E4DE000004";
    let uuid2 = from_hex("D3284E04D8914467A2160201812E4C4C").unwrap();
    let vals2 = vec![
        Bson::Timestamp(bson::Timestamp {
            time: 1741186978,
            increment: 25,
        }),
        Bson::Int32(2),
        Bson::Int32(128),
        Bson::Int32(0),
        Bson::Boolean(false),
        bin(4, uuid2),
        Bson::Document(doc! {
            "operationType": "insert",
            "documentKey": {"_id": ObjectId::parse_str("67c867a2fb1cbcd579f4e4de").unwrap()},
        }),
    ];
    // high-water-mark token
    let t3 = "8267C867A3000000012B0429296E1404";
    let vals3 = vec![
        Bson::Timestamp(bson::Timestamp {
            time: 0x67C867A3,
            increment: 1,
        }),
        Bson::Int32(2),
        Bson::Int32(0),
        Bson::Int32(0),
        Bson::Boolean(false),
        Bson::Null,
    ];
    for (hex, vals) in [(t1, vals1), (t2, vals2), (t3, vals3)] {
        let mut b = KeyStringBuilder::new();
        for v in &vals {
            b.append(v, false);
        }
        b.append_discriminator_end();
        assert_eq!(to_hex_upper(b.as_bytes()), hex);
        assert!(hex.starts_with("82"));
        let decoded = decode_values(&from_hex(hex).unwrap()).unwrap();
        assert_eq!(decoded, vals);
    }
}

#[test]
fn decode_roundtrip() {
    for v in sample_values() {
        for desc in [false, true] {
            let enc = key(&v, desc);
            let d = decode_values_directed(&enc, &[desc]).unwrap();
            assert_eq!(d.len(), 1, "{v:?}");
            assert_eq!(
                ref_cmp(&d[0], &v),
                CmpOrdering::Equal,
                "{v:?} decoded as {:?}",
                d[0]
            );
            assert_eq!(key(&d[0], desc), enc, "{v:?} re-encoded from {:?}", d[0]);
            // types that survive exactly
            match &v {
                Bson::Int32(_)
                | Bson::String(_)
                | Bson::Binary(_)
                | Bson::ObjectId(_)
                | Bson::Timestamp(_)
                | Bson::DateTime(_)
                | Bson::Boolean(_)
                | Bson::RegularExpression(_)
                | Bson::JavaScriptCode(_)
                | Bson::Null
                | Bson::MinKey
                | Bson::MaxKey => assert_eq!(d[0], v),
                _ => {}
            }
        }
    }
    let d = decode_values(&encode_values(
        &[Bson::Int64(5), Bson::Double(2.5), Bson::Int64(1 << 40)],
        &[],
    ))
    .unwrap();
    assert_eq!(
        d,
        vec![Bson::Int32(5), Bson::Double(2.5), Bson::Int64(1 << 40)]
    );
    // Tiny decimals come back with a valid exponent (34 digits would go below it).
    for tiny in ["4.36207726E-6168", "1E-6176", "-7E-6175"] {
        let d = decode_values(&encode_value(&dec(tiny))).unwrap();
        assert_eq!(cmp_bson(&d[0], &dec(tiny)), CmpOrdering::Equal, "{tiny}");
    }
    // decimals not representable as doubles come back as (normalized) decimals
    let d = decode_values(&encode_value(&dec("1.23456789012345678901234567890"))).unwrap();
    assert_eq!(
        cmp_bson(&d[0], &dec("1.23456789012345678901234567890")),
        CmpOrdering::Equal
    );
    assert!(matches!(d[0], Bson::Decimal128(_)));
}

#[test]
fn seek_bounds_select_exact_values() {
    let strs = ["a", "a\0", "a\0b", "ab", ""];
    for desc in [false, true] {
        for s in strs {
            let enc = encode_values(&[Bson::String(s.into())], &[desc]);
            let (lo, hi) = seek_bounds(&enc);
            for t in strs {
                for id in [
                    Bson::Int32(1),
                    Bson::MinKey,
                    Bson::MaxKey,
                    Bson::String("z".into()),
                ] {
                    let mut k = encode_values(&[Bson::String(t.into())], &[desc]);
                    k.extend(encode_value(&id));
                    let inside = k >= lo && k < hi;
                    assert_eq!(inside, s == t, "{s:?} {t:?} desc={desc}");
                }
            }
        }
    }
}

#[test]
fn hex_roundtrip() {
    assert_eq!(to_hex_upper(&[0x82, 0x0a, 0xff]), "820AFF");
    assert_eq!(from_hex("820aFF").unwrap(), vec![0x82, 0x0a, 0xff]);
    assert!(from_hex("8").is_err());
    assert!(from_hex("zz").is_err());
}

#[test]
fn collated_keys_order_and_equate_under_the_collation() {
    let c = crate::collation::Collator::parse(&bson::doc! {"locale": "en", "strength": 2})
        .unwrap()
        .unwrap();
    let enc = |v: Bson| {
        let mut k = KeyStringBuilder::new();
        k.append_collated(&v, false, Some(&c));
        k.into_bytes()
    };
    assert_eq!(
        enc(Bson::String("PING".into())),
        enc(Bson::String("ping".into()))
    );
    assert!(enc(Bson::String("a".into())) < enc(Bson::String("B".into())));
    assert_eq!(
        enc(bson::bson!({"x": ["A", 1]})),
        enc(bson::bson!({"x": ["a", 1]}))
    );
    // Non-strings encode as without a collation; types keep their order.
    assert_eq!(enc(Bson::Int32(5)), encode_value(&Bson::Int32(5)));
    assert!(enc(Bson::Int32(5)) < enc(Bson::String(String::new())));
    assert!(enc(Bson::String("zzz".into())) < enc(bson::bson!({})));
}

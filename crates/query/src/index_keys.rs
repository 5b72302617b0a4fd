//! Index key generation with MongoDB's multikey semantics (mongod's
//! `BtreeKeyGenerator`):
//!
//! * a missing field (or a path running into a scalar) yields `null`;
//! * an array met along a path is expanded: one key per element, the rest of the path
//!   being applied to each element (non-document elements then yield `null`);
//! * a path ending at an array yields its elements (a nested array element is indexed
//!   whole); an empty array yields `undefined`;
//! * a numeric path component after an array (`"a.0.b"`) selects that element by
//!   position and does not make the index multikey;
//! * at most one array may be expanded per document across the compound pattern
//!   (several fields through the *same* array are fine): otherwise
//!   `CannotIndexParallelArrays` (171);
//! * keys of one document are deduplicated (by their KeyString, so `1` and `1.0` collapse)
//!   and returned in index order.

use crate::error::{codes, Error, Result};
use crate::keystring::KeyStringBuilder;
use crate::path::parse_index;
use bson::{Bson, Document};
use std::collections::BTreeMap;

/// The special index types (plugins) this server implements: their fields are stored
/// ascending, their keys built by the index_plugin module.
pub fn is_supported_plugin(name: &str) -> bool {
    matches!(name, "hashed" | "text" | "2d" | "2dsphere")
}

/// mongod's `CannotIndexParallelArrays`.
pub const CANNOT_INDEX_PARALLEL_ARRAYS: i32 = 171;
/// mongod's assertion for a numeric field name colliding with a positional path.
pub const AMBIGUOUS_POSITIONAL_FIELD: i32 = 16746;

/// A parsed index key pattern such as `{a: 1, "b.c": -1}`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPattern {
    /// (dotted path, descending)
    pub fields: Vec<(String, bool)>,
}

impl KeyPattern {
    pub fn parse(spec: &Document) -> Result<KeyPattern> {
        if spec.is_empty() {
            return Err(Error::new(
                codes::CANNOT_CREATE_INDEX,
                "Index keys cannot be empty.",
            ));
        }
        let mut fields = Vec::with_capacity(spec.len());
        for (name, v) in spec {
            if name.is_empty() || name.split('.').any(|p| p.is_empty()) {
                return Err(Error::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!("Index key contains an illegal field name: '{name}'"),
                ));
            }
            let desc = match v {
                Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                    let x = crate::compare::as_f64(v).unwrap_or(f64::NAN);
                    if x.is_nan() || x == 0.0 {
                        return Err(Error::new(
                            codes::CANNOT_CREATE_INDEX,
                            format!("Values in the index key pattern can't be 0 or NaN: {{{name}: {v}}}"),
                        ));
                    }
                    x < 0.0
                }
                // Fields of the special index types are stored ascending; their keys come
                // from the index_plugin module (hashes, text terms, geo cells).
                Bson::String(s) if is_supported_plugin(s) => false,
                Bson::String(s) => {
                    return Err(match s.as_str() {
                        "geoHaystack" | "columnstore" => Error::new(
                            codes::CANNOT_CREATE_INDEX,
                            format!("'{s}' index type is not supported (field '{name}')"),
                        ),
                        _ => Error::new(codes::CANNOT_CREATE_INDEX, format!("Unknown index plugin '{s}'")),
                    })
                }
                other => {
                    return Err(Error::new(
                        codes::CANNOT_CREATE_INDEX,
                        format!(
                            "Values in v:2 index key pattern cannot be of type {:?}. Only numbers > 0, numbers < 0, and strings are allowed.",
                            other.element_type()
                        ),
                    ))
                }
            };
            if fields.iter().any(|(n, _): &(String, bool)| n == name) {
                return Err(Error::new(
                    codes::CANNOT_CREATE_INDEX,
                    format!("duplicate key pattern field '{name}'"),
                ));
            }
            fields.push((name.clone(), desc));
        }
        Ok(KeyPattern { fields })
    }

    pub fn descending(&self) -> Vec<bool> {
        self.fields.iter().map(|(_, d)| *d).collect()
    }

    /// The pattern as a document (`{a: 1, b: -1}`).
    pub fn to_document(&self) -> Document {
        let mut d = Document::new();
        for (n, desc) in &self.fields {
            d.insert(n.clone(), if *desc { -1 } else { 1 });
        }
        d
    }
}

/// All index keys of `doc` for `pattern` (each key: one value per pattern field), in
/// index order without duplicates, and whether this document makes the index multikey.
pub fn index_keys(doc: &Document, pattern: &KeyPattern) -> Result<(Vec<Vec<Bson>>, bool)> {
    let (keys, multikey) = generate(doc, pattern)?;
    Ok((keys.into_values().collect(), multikey))
}

/// Like [`index_keys`], each key encoded as KeyString with the pattern's per-field direction
/// (no `kEnd`, no record id), in byte order without duplicates.
pub fn encoded_index_keys(doc: &Document, pattern: &KeyPattern) -> Result<(Vec<Vec<u8>>, bool)> {
    let (keys, multikey) = generate(doc, pattern)?;
    Ok((keys.into_keys().collect(), multikey))
}

/// Encodes one key (values in pattern order) with the pattern's directions.
pub fn encode_key(values: &[Bson], pattern: &KeyPattern) -> Vec<u8> {
    let mut b = KeyStringBuilder::new();
    for (i, v) in values.iter().enumerate() {
        b.append(v, pattern.fields.get(i).map(|f| f.1).unwrap_or(false));
    }
    b.into_bytes()
}

// ----------------------------------------------------------------------------

static NULL: Bson = Bson::Null;
static UNDEFINED: Bson = Bson::Undefined;

/// Positional-path bookkeeping for a field whose next component indexes the array
/// being expanded (`"a.0.b"`).
#[derive(Clone, Default)]
struct Positional<'a> {
    /// The array element selected by position (present iff positional).
    indexed: Option<&'a Bson>,
    /// The value found by following the rest of the path from that element (may be missing).
    dotted: Option<&'a Bson>,
    /// The path left after `dotted` (non-empty if `dotted` is an array met mid-path).
    remaining: String,
    /// Name of the array field, for error messages.
    array_name: String,
}

/// Something that path components can be looked up in: a document or an array.
#[derive(Clone, Copy)]
enum Container<'a> {
    Doc(&'a Document),
    Arr(&'a [Bson]),
    Empty,
}

impl<'a> Container<'a> {
    fn get(self, name: &str) -> Option<&'a Bson> {
        match self {
            Container::Doc(d) => d.get(name),
            Container::Arr(a) => parse_index(name).and_then(|i| a.get(i)),
            Container::Empty => None,
        }
    }
}

/// mongod's `extractElementAtPathOrArrayAlongPath`: follows `path` through documents and
/// stops at the first array met. Returns (value, name of the last component, rest of path).
fn extract_path_or_array<'a>(c: Container<'a>, path: &str) -> (Option<&'a Bson>, String, String) {
    let mut cur = c;
    let mut rest = path;
    loop {
        let (part, tail) = match rest.find('.') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let v = match cur.get(part) {
            Some(v) => v,
            None => return (None, part.to_string(), String::new()),
        };
        match v {
            Bson::Array(_) => return (Some(v), part.to_string(), tail.to_string()),
            _ if tail.is_empty() => return (Some(v), part.to_string(), String::new()),
            Bson::Document(d) => {
                cur = Container::Doc(d);
                rest = tail;
            }
            _ => return (None, part.to_string(), String::new()),
        }
    }
}

struct Gen<'a, 'p> {
    pattern: &'p KeyPattern,
    /// encoded key -> values
    keys: BTreeMap<Vec<u8>, Vec<Bson>>,
    multikey: bool,
    _doc: std::marker::PhantomData<&'a ()>,
}

/// Index keys by their encoding, each with its key values.
type KeysByEncoding = BTreeMap<Vec<u8>, Vec<Bson>>;

fn generate(doc: &Document, pattern: &KeyPattern) -> Result<(KeysByEncoding, bool)> {
    let mut g = Gen {
        pattern,
        keys: BTreeMap::new(),
        multikey: false,
        _doc: std::marker::PhantomData,
    };
    let n = pattern.fields.len();
    let names: Vec<String> = pattern.fields.iter().map(|f| f.0.clone()).collect();
    let fixed: Vec<&Bson> = vec![&NULL; n];
    let positional = vec![Positional::default(); n];
    g.keys_with_array(names, fixed, Container::Doc(doc), &positional)?;
    if g.keys.is_empty() {
        let nulls = vec![Bson::Null; n];
        g.keys.insert(encode_key(&nulls, pattern), nulls);
    }
    Ok((g.keys, g.multikey))
}

impl<'a, 'p> Gen<'a, 'p> {
    /// mongod's `_extractNextElement`: (value, remaining path, array-nested-in-array).
    fn extract_next(
        &self,
        obj: Container<'a>,
        pos: &Positional<'a>,
        field: &str,
    ) -> Result<(Option<&'a Bson>, String, String, bool)> {
        let first = field.split('.').next().unwrap_or("");
        let have_obj_field = obj.get(first).is_some();
        if have_obj_field && pos.indexed.is_some() {
            return Err(Error::location(
                AMBIGUOUS_POSITIONAL_FIELD,
                format!(
                    "Ambiguous field name found in array (do not use numeric field names in embedded elements in an array), field: '{first}' for array: {}",
                    pos.array_name
                ),
            ));
        }
        if have_obj_field {
            let (v, name, rest) = extract_path_or_array(obj, field);
            return Ok((v, rest, name, false));
        }
        if let Some(indexed) = pos.indexed {
            let nested = matches!(indexed, Bson::Array(_));
            return Ok((pos.dotted, pos.remaining.clone(), first.to_string(), nested));
        }
        Ok((None, String::new(), first.to_string(), false))
    }

    /// mongod's `_getKeysWithArray`.
    fn keys_with_array(
        &mut self,
        mut names: Vec<String>,
        mut fixed: Vec<&'a Bson>,
        obj: Container<'a>,
        positional: &[Positional<'a>],
    ) -> Result<()> {
        let mut arr: Option<(&'a Bson, String)> = None;
        let mut arr_idxs: Vec<usize> = Vec::new();
        let mut may_expand = true;
        for i in 0..names.len() {
            if names[i].is_empty() {
                continue;
            }
            let (e, rest, ename, nested) = self.extract_next(obj, &positional[i], &names[i])?;
            names[i] = rest;
            match e {
                None => {
                    fixed[i] = &NULL;
                    names[i].clear();
                }
                Some(e @ Bson::Array(_)) => {
                    arr_idxs.push(i);
                    match &arr {
                        None => arr = Some((e, ename)),
                        Some((a, aname)) if !std::ptr::eq(*a, e) => {
                            return Err(Error::new(
                                CANNOT_INDEX_PARALLEL_ARRAYS,
                                format!("cannot index parallel arrays [{ename}] [{aname}]"),
                            ));
                        }
                        _ => {}
                    }
                    if nested {
                        may_expand = false;
                    }
                }
                Some(e) => {
                    fixed[i] = e;
                    names[i].clear();
                }
            }
        }

        let (arr_val, arr_name) = match arr {
            None => {
                let values: Vec<Bson> = fixed.iter().map(|v| (*v).clone()).collect();
                let enc = encode_key(&values, self.pattern);
                self.keys.entry(enc).or_insert(values);
                return Ok(());
            }
            Some(a) => a,
        };
        let elems: &'a [Bson] = match arr_val {
            Bson::Array(a) => a,
            _ => unreachable!(),
        };

        if elems.is_empty() {
            if may_expand {
                self.multikey = true;
            }
            let empty = vec![Positional::default(); names.len()];
            return self
                .arr_elt_fixed(&names, &fixed, &UNDEFINED, arr_val, &arr_idxs, true, &empty);
        }

        let mut sub = vec![Positional::default(); names.len()];
        for i in 0..names.len() {
            let through_array = arr_idxs.contains(&i);
            if names[i].is_empty() {
                if through_array && may_expand {
                    self.multikey = true;
                }
                continue;
            }
            let part = names[i].split('.').next().unwrap_or("");
            let indexed = Container::Arr(elems).get(part);
            match indexed {
                None => {
                    self.multikey = true;
                }
                Some(el) => {
                    let (dotted, _, rest) = extract_path_or_array(Container::Arr(elems), &names[i]);
                    sub[i] = Positional {
                        indexed: Some(el),
                        dotted,
                        remaining: rest,
                        array_name: arr_name.clone(),
                    };
                }
            }
        }
        for el in elems {
            self.arr_elt_fixed(&names, &fixed, el, arr_val, &arr_idxs, may_expand, &sub)?;
        }
        Ok(())
    }

    /// mongod's `_getKeysArrEltFixed`: fixes the fields ending at the expanded array to the
    /// current element (or to the whole array when it may not be expanded) and recurses
    /// into the element.
    #[allow(clippy::too_many_arguments)]
    fn arr_elt_fixed(
        &mut self,
        names: &[String],
        fixed: &[&'a Bson],
        entry: &'a Bson,
        whole_array: &'a Bson,
        arr_idxs: &[usize],
        may_expand: bool,
        positional: &[Positional<'a>],
    ) -> Result<()> {
        let names = names.to_vec();
        let mut fixed = fixed.to_vec();
        for &i in arr_idxs {
            if names[i].is_empty() {
                fixed[i] = if may_expand { entry } else { whole_array };
            }
        }
        let obj = match entry {
            Bson::Document(d) => Container::Doc(d),
            _ => Container::Empty,
        };
        self.keys_with_array(names, fixed, obj, positional)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keystring;
    use bson::{bson, doc};

    fn pat(d: Document) -> KeyPattern {
        KeyPattern::parse(&d).unwrap()
    }

    fn keys(d: Document, p: Document) -> (Vec<Vec<Bson>>, bool) {
        index_keys(&d, &pat(p)).unwrap()
    }

    fn k1(vals: Vec<Bson>) -> Vec<Vec<Bson>> {
        vals.into_iter().map(|v| vec![v]).collect()
    }

    #[test]
    fn parse_patterns() {
        let p = pat(doc! {"a": 1, "b.c": -1, "d": 2.5, "e": -0.5f64, "f": 1i64});
        assert_eq!(
            p.fields,
            vec![
                ("a".to_string(), false),
                ("b.c".to_string(), true),
                ("d".to_string(), false),
                ("e".to_string(), true),
                ("f".to_string(), false)
            ]
        );
        for bad in [
            doc! {},
            doc! {"a": "geoHaystack"},
            doc! {"a": "foo"},
            doc! {"a": 0},
            doc! {"a": true},
            doc! {"a": {"x": 1}},
            doc! {"": 1},
            doc! {"a..b": 1},
        ] {
            let e = KeyPattern::parse(&bad).unwrap_err();
            assert_eq!(e.code, codes::CANNOT_CREATE_INDEX, "{bad:?}");
        }
        assert!(KeyPattern::parse(&doc! {"a": "geoHaystack"})
            .unwrap_err()
            .message
            .contains("not supported"));
        assert_eq!(
            pat(doc! {"a": "hashed", "b": -1}).fields,
            vec![("a".to_string(), false), ("b".to_string(), true)]
        );
    }

    #[test]
    fn scalar_and_missing_fields() {
        assert_eq!(
            keys(doc! {"a": 5}, doc! {"a": 1}),
            (k1(vec![bson!(5)]), false)
        );
        assert_eq!(
            keys(doc! {"b": 5}, doc! {"a": 1}),
            (k1(vec![Bson::Null]), false)
        );
        assert_eq!(
            keys(doc! {"a": {"b": "x"}}, doc! {"a.b": 1}),
            (k1(vec![bson!("x")]), false)
        );
        // a path running into a scalar is missing
        assert_eq!(
            keys(doc! {"a": 3}, doc! {"a.b": 1}),
            (k1(vec![Bson::Null]), false)
        );
        // an explicit null and a missing field give the same key
        assert_eq!(
            keys(doc! {"a": null}, doc! {"a": 1}),
            (k1(vec![Bson::Null]), false)
        );
        // a whole sub-document
        assert_eq!(
            keys(doc! {"a": {"x": 1}}, doc! {"a": 1}),
            (k1(vec![bson!({"x": 1})]), false)
        );
    }

    #[test]
    fn array_at_end_of_path_yields_elements() {
        let (k, m) = keys(doc! {"a": [3, 1, 2, 1]}, doc! {"a": 1});
        assert_eq!(k, k1(vec![bson!(1), bson!(2), bson!(3)]));
        assert!(m);
        // descending pattern: index order reversed
        let (k, _) = keys(doc! {"a": [3, 1, 2]}, doc! {"a": -1});
        assert_eq!(k, k1(vec![bson!(3), bson!(2), bson!(1)]));
        // numerically equal elements dedupe
        let (k, _) = keys(doc! {"a": [1, 1.0, 1i64]}, doc! {"a": 1});
        assert_eq!(k.len(), 1);
        // single-element array is still multikey
        assert_eq!(
            keys(doc! {"a": [7]}, doc! {"a": 1}),
            (k1(vec![bson!(7)]), true)
        );
    }

    #[test]
    fn empty_array_is_undefined() {
        assert_eq!(
            keys(doc! {"a": []}, doc! {"a": 1}),
            (k1(vec![Bson::Undefined]), true)
        );
        // mid-path empty array: the rest of the path is missing -> null
        assert_eq!(
            keys(doc! {"a": []}, doc! {"a.b": 1}),
            (k1(vec![Bson::Null]), true)
        );
        assert_eq!(
            keys(doc! {"a": {"b": []}}, doc! {"a.b": 1}),
            (k1(vec![Bson::Undefined]), true)
        );
    }

    #[test]
    fn arrays_of_documents() {
        let (k, m) = keys(doc! {"a": [{"b": 1}, {"b": 2}, {"c": 3}]}, doc! {"a.b": 1});
        assert_eq!(k, k1(vec![Bson::Null, bson!(1), bson!(2)]));
        assert!(m);
        // scalars among documents give null for the rest of the path
        let (k, _) = keys(doc! {"a": [1, {"b": 2}]}, doc! {"a.b": 1});
        assert_eq!(k, k1(vec![Bson::Null, bson!(2)]));
        // arrays nested along the path expand too
        let (k, _) = keys(doc! {"a": [{"b": [1, 2]}, {"b": 3}]}, doc! {"a.b": 1});
        assert_eq!(k, k1(vec![bson!(1), bson!(2), bson!(3)]));
        let (k, _) = keys(
            doc! {"a": {"b": [{"c": 1}, {"c": [2, 3]}]}},
            doc! {"a.b.c": 1},
        );
        assert_eq!(k, k1(vec![bson!(1), bson!(2), bson!(3)]));
    }

    #[test]
    fn nested_array_element_is_indexed_whole() {
        let (k, m) = keys(doc! {"a": [[1, 2], 3]}, doc! {"a": 1});
        assert_eq!(k, k1(vec![bson!(3), bson!([1, 2])]));
        assert!(m);
    }

    #[test]
    fn positional_paths() {
        assert_eq!(
            keys(doc! {"a": [{"b": 1}, {"b": 2}]}, doc! {"a.0.b": 1}),
            (k1(vec![bson!(1)]), false)
        );
        assert_eq!(
            keys(doc! {"a": [{"b": 1}, {"b": 2}]}, doc! {"a.1.b": 1}),
            (k1(vec![bson!(2)]), false)
        );
        assert_eq!(
            keys(doc! {"a": [5, 6]}, doc! {"a.1": 1}),
            (k1(vec![bson!(6)]), false)
        );
        // out of range position: missing, but the array may be expanded (elements lack "5")
        assert_eq!(
            keys(doc! {"a": [5, 6]}, doc! {"a.5": 1}),
            (k1(vec![Bson::Null]), true)
        );
        // positional element that is itself an array is indexed whole (not multikey)
        assert_eq!(
            keys(doc! {"a": [[1, 2], 3]}, doc! {"a.0": 1}),
            (k1(vec![bson!([1, 2])]), false)
        );
        // positional element through a further array: that one expands
        let (k, m) = keys(doc! {"a": [{"b": [1, 2]}, {"b": 3}]}, doc! {"a.0.b": 1});
        assert_eq!(k, k1(vec![bson!(1), bson!(2)]));
        assert!(m);
        // a numeric component on a document is a plain field name
        assert_eq!(
            keys(doc! {"a": {"0": {"b": 9}}}, doc! {"a.0.b": 1}),
            (k1(vec![bson!(9)]), false)
        );
        // ambiguous: array element documents with a field named like the position
        let e = index_keys(&doc! {"a": [{"0": 1}]}, &pat(doc! {"a.0": 1})).unwrap_err();
        assert_eq!(e.code, AMBIGUOUS_POSITIONAL_FIELD);
    }

    #[test]
    fn compound_keys() {
        let (k, m) = keys(doc! {"a": 1, "b": [2, 3]}, doc! {"a": 1, "b": -1});
        assert_eq!(k, vec![vec![bson!(1), bson!(3)], vec![bson!(1), bson!(2)]]);
        assert!(m);
        // several fields through the same array are fine
        let (k, _) = keys(
            doc! {"a": [{"b": 1, "c": "x"}, {"b": 2, "c": "y"}]},
            doc! {"a.b": 1, "a.c": 1},
        );
        assert_eq!(
            k,
            vec![vec![bson!(1), bson!("x")], vec![bson!(2), bson!("y")]]
        );
        // missing compound fields are null
        let (k, m) = keys(doc! {"a": 1}, doc! {"a": 1, "z": 1});
        assert_eq!(k, vec![vec![bson!(1), Bson::Null]]);
        assert!(!m);
    }

    #[test]
    fn parallel_arrays_rejected() {
        let e = index_keys(
            &doc! {"a": [1, 2], "b": [3, 4]},
            &pat(doc! {"a": 1, "b": 1}),
        )
        .unwrap_err();
        assert_eq!(e.code, 171);
        assert!(e.message.contains("cannot index parallel arrays"));
        let e = index_keys(
            &doc! {"a": [{"b": [1]}, {"b": [2]}], "x": [1]},
            &pat(doc! {"a.b": 1, "x": 1}),
        )
        .unwrap_err();
        assert_eq!(e.code, 171);
        // only one of them an array: fine
        assert!(index_keys(&doc! {"a": [1, 2], "b": 3}, &pat(doc! {"a": 1, "b": 1})).is_ok());
    }

    #[test]
    fn encoded_keys_follow_directions() {
        let p = pat(doc! {"a": 1, "b": -1});
        let (enc, m) = encoded_index_keys(&doc! {"a": [2, 1], "b": "x"}, &p).unwrap();
        assert!(m);
        assert_eq!(enc.len(), 2);
        assert!(enc[0] < enc[1]);
        let mut want = keystring::KeyStringBuilder::new();
        want.append(&bson!(1), false);
        want.append(&bson!("x"), true);
        assert_eq!(enc[0], want.into_bytes());
        let (vals, _) = index_keys(&doc! {"a": [2, 1], "b": "x"}, &p).unwrap();
        assert_eq!(
            vals.iter().map(|v| encode_key(v, &p)).collect::<Vec<_>>(),
            enc
        );
    }
}

//! The `updateDescription` of an update event, read from the `$v: 2` diff of its oplog
//! entry: `updatedFields` (dotted path -> new value), `removedFields`,
//! `truncatedArrays` (`{field, newSize}`) and `disambiguatedPaths` (for each path with a
//! numeric field name or an array index, its components, indexes as integers).

use bson::{doc, Bson, Document};

#[derive(Clone)]
enum Part {
    Field(String),
    Index(i64),
}

struct Collector {
    updated: Document,
    removed: Vec<Bson>,
    truncated: Vec<Bson>,
    disambiguated: Document,
}

pub(crate) fn update_description(diff: &Document) -> Document {
    let mut c = Collector {
        updated: Document::new(),
        removed: Vec::new(),
        truncated: Vec::new(),
        disambiguated: Document::new(),
    };
    c.object(diff, &[]);
    doc! {
        "updatedFields": c.updated,
        "removedFields": c.removed,
        "truncatedArrays": c.truncated,
        "disambiguatedPaths": c.disambiguated,
    }
}

impl Collector {
    fn path(&mut self, parts: &[Part]) -> String {
        let text: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Part::Field(f) => f.clone(),
                Part::Index(i) => i.to_string(),
            })
            .collect();
        let joined = text.join(".");
        let ambiguous = parts.iter().any(|p| match p {
            Part::Index(_) => true,
            Part::Field(f) => {
                f.contains('.') || (!f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
            }
        });
        if ambiguous {
            let comps: Vec<Bson> = parts
                .iter()
                .map(|p| match p {
                    Part::Field(f) => Bson::String(f.clone()),
                    Part::Index(i) => Bson::Int32(*i as i32),
                })
                .collect();
            self.disambiguated.insert(joined.clone(), comps);
        }
        joined
    }

    fn with(parts: &[Part], p: Part) -> Vec<Part> {
        let mut v = parts.to_vec();
        v.push(p);
        v
    }

    fn object(&mut self, diff: &Document, at: &[Part]) {
        for (k, v) in diff {
            match (k.as_str(), v) {
                ("d", Bson::Document(fields)) => {
                    for f in fields.keys() {
                        let p = self.path(&Self::with(at, Part::Field(f.clone())));
                        self.removed.push(Bson::String(p));
                    }
                }
                ("u" | "i", Bson::Document(fields)) => {
                    for (f, val) in fields {
                        let p = self.path(&Self::with(at, Part::Field(f.clone())));
                        self.updated.insert(p, val.clone());
                    }
                }
                (s, Bson::Document(sub)) if s.starts_with('s') => {
                    let here = Self::with(at, Part::Field(s[1..].to_string()));
                    self.sub(sub, &here);
                }
                _ => {}
            }
        }
    }

    fn sub(&mut self, sub: &Document, at: &[Part]) {
        if sub.get_bool("a").unwrap_or(false) {
            self.array(sub, at);
        } else {
            self.object(sub, at);
        }
    }

    fn array(&mut self, diff: &Document, at: &[Part]) {
        for (k, v) in diff {
            if k == "a" {
                continue;
            }
            if k == "l" {
                let size = match v {
                    Bson::Int32(i) => *i as i64,
                    Bson::Int64(i) => *i,
                    _ => continue,
                };
                let field = self.path(at);
                self.truncated.push(Bson::Document(
                    doc! {"field": field, "newSize": size as i32},
                ));
                continue;
            }
            let (kind, idx) = k.split_at(1);
            let Ok(i) = idx.parse::<i64>() else { continue };
            let here = Self::with(at, Part::Index(i));
            match (kind, v) {
                ("u", val) => {
                    let p = self.path(&here);
                    self.updated.insert(p, val.clone());
                }
                ("s", Bson::Document(sub)) => self.sub(sub, &here),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_arrays_and_truncation() {
        let diff = doc! {
            "d": {"foo": false},
            "u": {"x": 2},
            "i": {"new": 1},
            "sa": {"a": true, "l": 2, "u1": "z"},
            "sb": {"s1": {"u": {"c": 3}}},
        };
        let d = update_description(&diff);
        assert_eq!(
            d.get_document("updatedFields").unwrap(),
            &doc! {"x": 2, "new": 1, "a.1": "z", "b.1.c": 3}
        );
        assert_eq!(
            d.get_array("removedFields").unwrap(),
            &vec![Bson::String("foo".into())]
        );
        assert_eq!(
            d.get_array("truncatedArrays").unwrap(),
            &vec![Bson::Document(doc! {"field": "a", "newSize": 2})]
        );
        let dis = d.get_document("disambiguatedPaths").unwrap();
        assert_eq!(
            dis.get_array("a.1").unwrap(),
            &vec![Bson::String("a".into()), Bson::Int32(1)]
        );
        // "b.1.c": the "1" is a numeric field name of an object.
        assert_eq!(
            dis.get_array("b.1.c").unwrap(),
            &vec![
                Bson::String("b".into()),
                Bson::String("1".into()),
                Bson::String("c".into())
            ]
        );
        assert!(!dis.contains_key("x"));
    }
}

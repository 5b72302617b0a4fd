//! The query language of commands on in-memory documents: a filter, a projection, an
//! update and an aggregation pipeline, taken from one BSON document (`filter`,
//! `projection`, `update`, `pipeline`, and the `docs` they run over), parsed and run.
//! Any of them may be refused with an error; none may panic, hang or exhaust memory.
//! (The engine's dispatch and storage around them are not in this target: RocksDB
//! built under the sanitizer is a second 20-minute build.)
#![no_main]

use bson::{Bson, Document};
use libfuzzer_sys::fuzz_target;
use tailstream_query::expr::Variables;
use tailstream_query::matcher::Matcher;
use tailstream_query::pipeline::{NoCollections, Pipeline};
use tailstream_query::projection::Projection;
use tailstream_query::update::{ApplyContext, ConditionMatcher, UpdateSpec};

/// Documents run through each part at most.
const MAX_DOCS: usize = 16;

/// `$pull`'s conditions, matched as a filter on one field holding the value.
struct FieldMatcher;

impl ConditionMatcher for FieldMatcher {
    fn matches_value(
        &self,
        condition: &Document,
        value: &Bson,
    ) -> tailstream_query::Result<bool> {
        let mut filter = Document::new();
        filter.insert("v", condition.clone());
        let mut doc = Document::new();
        doc.insert("v", value.clone());
        Matcher::new(&filter)?.matches_checked(&doc)
    }
}

fn documents(input: &Document, key: &str) -> Vec<Document> {
    input
        .get_array(key)
        .map(|a| {
            a.iter()
                .filter_map(|b| b.as_document().cloned())
                .take(MAX_DOCS)
                .collect()
        })
        .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Document::from_reader(data) else {
        return;
    };
    let docs = documents(&input, "docs");
    if let Ok(filter) = input.get_document("filter") {
        if let Ok(m) = Matcher::new(filter) {
            for d in &docs {
                let _ = m.matches_checked(d);
            }
        }
        if let Ok(spec) = input.get_document("projection") {
            if let Ok(p) = Projection::new(spec, Some(filter)) {
                for d in &docs {
                    let _ = p.apply(d);
                }
            }
        }
    }
    if let Some(update) = input.get("update") {
        let filters = documents(&input, "arrayFilters");
        let filters = input.contains_key("arrayFilters").then_some(&filters[..]);
        if let Ok(u) = UpdateSpec::parse(update, filters) {
            let ctx = ApplyContext {
                is_insert: input.get_bool("upsert").unwrap_or(false),
                positional: None,
                now: bson::DateTime::from_millis(0),
                matcher: &FieldMatcher,
                collator: None,
            };
            for d in &docs {
                let mut d = d.clone();
                let _ = u.apply(&mut d, &ctx);
            }
        }
    }
    let stages = documents(&input, "pipeline");
    if !stages.is_empty() {
        if let Ok(p) = Pipeline::parse(&stages, "db") {
            let input = Box::new(docs.into_iter().map(Ok));
            let _ = p.run(input, &NoCollections, &Variables::new());
        }
    }
});

//! Views: read-only pipelines over a collection or another view of the same database.
//!
//! A view's definition is a document of `<db>.system.views` (`{_id: "<db>.<name>",
//! viewOn, pipeline, collation?}`), written by `create`, `collMod` and `drop` through
//! the ordinary document write path, so the oplog shows what mongod's shows (an insert,
//! replacement or delete on `<db>.system.views`, after the `create` of `system.views`
//! itself for a database's first view) and the definition is durable in the same
//! atomic batch. The catalog holds the definitions parsed (loaded at startup from every
//! `system.views`). Reads resolve a view to the collection it finally reads and the
//! concatenation of the pipelines on the way (at most 20 views deep, as mongod).

use crate::catalog::namespace::{validate_collection_name, Namespace};
use crate::catalog::{Catalog, ViewMeta};
use bson::{Bson, Document, RawDocumentBuf};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::pipeline::Pipeline;

/// The collection holding a database's view definitions.
pub const SYSTEM_VIEWS: &str = "system.views";
/// Longest chain of views (mongod's ViewGraph::kMaxViewDepth).
pub const MAX_VIEW_DEPTH: usize = 20;
/// Largest resolved pipeline, in BSON bytes (mongod's kMaxViewPipelineSizeBytes).
pub const MAX_VIEW_PIPELINE_BYTES: usize = 16 * 1000 * 1000;

pub const VIEW_DEPTH_LIMIT_EXCEEDED: i32 = 165;
pub const COMMAND_NOT_SUPPORTED_ON_VIEW: i32 = 166;
pub const OPTION_NOT_SUPPORTED_ON_VIEW: i32 = 167;
pub const VIEW_PIPELINE_MAX_SIZE_EXCEEDED: i32 = 195;

/// The error of a command that needs a collection run on a view (or a time-series
/// collection, which mongod implements as a view).
pub fn not_a_collection(ns: &Namespace) -> Error {
    Error::new(
        COMMAND_NOT_SUPPORTED_ON_VIEW,
        format!("Namespace {} is a view, not a collection", ns.full()),
    )
}

/// A view resolved: the collection it finally reads and every pipeline on the way,
/// innermost first.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedView {
    pub base: Namespace,
    pub pipeline: Vec<Document>,
}

impl Catalog {
    /// Resolves `ns` if it is a view (None for anything else).
    pub fn resolve_view(&self, ns: &Namespace) -> Result<Option<ResolvedView>> {
        let mut current = ns.clone();
        let mut pipeline: Vec<Document> = Vec::new();
        // As mongod: the loop looks up at most 20 namespaces, so a chain of 20 views
        // (which creation allows) cannot be read.
        for depth in 0..MAX_VIEW_DEPTH {
            let Some(view) = self.view(&current) else {
                if depth == 0 {
                    return Ok(None);
                }
                let bytes: usize = pipeline.iter().map(bson_size).sum();
                if bytes > MAX_VIEW_PIPELINE_BYTES {
                    return Err(Error::new(
                        VIEW_PIPELINE_MAX_SIZE_EXCEEDED,
                        format!("View pipeline exceeds maximum size; maximum size is {MAX_VIEW_PIPELINE_BYTES}"),
                    ));
                }
                return Ok(Some(ResolvedView {
                    base: current,
                    pipeline,
                }));
            };
            current = Namespace::new(&view.ns.db, &view.view_on);
            let mut combined = view.pipeline.clone();
            combined.append(&mut pipeline);
            pipeline = combined;
            // A view starting with $collStats reports on the collection it names.
            if view
                .pipeline
                .first()
                .is_some_and(|s| s.contains_key("$collStats"))
            {
                return Ok(Some(ResolvedView {
                    base: current,
                    pipeline,
                }));
            }
        }
        Err(Error::new(
            VIEW_DEPTH_LIMIT_EXCEEDED,
            format!(
                "View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"
            ),
        ))
    }
}

fn bson_size(d: &Document) -> usize {
    RawDocumentBuf::from_document(d)
        .map(|r| r.as_bytes().len())
        .unwrap_or(0)
}

fn wrong_type(command: &str, field: &str, v: &Bson, expected: &str) -> Error {
    tailstream_query::args::wrong_type(&format!("{command}.{field}"), v, expected)
}

/// `viewOn`, checked as mongod's `create` and `collMod` check it.
pub(crate) fn parse_view_on(command: &str, v: &Bson) -> Result<String> {
    let Bson::String(s) = v else {
        return Err(wrong_type(command, "viewOn", v, "string"));
    };
    if s.is_empty() {
        return Err(Error::bad_value("'viewOn' cannot be empty"));
    }
    validate_collection_name(s)?;
    Ok(s.clone())
}

/// `pipeline`: an array of stage documents.
pub(crate) fn parse_pipeline(command: &str, v: &Bson) -> Result<Vec<Document>> {
    let Bson::Array(stages) = v else {
        return Err(wrong_type(command, "pipeline", v, "array"));
    };
    stages
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Bson::Document(d) => Ok(d.clone()),
            other => Err(wrong_type(
                command,
                &format!("pipeline.{i}"),
                other,
                "object",
            )),
        })
        .collect()
}

/// `collation`: a document; the simple collation is no collation (mongod omits it).
pub(crate) fn parse_collation(command: &str, v: &Bson) -> Result<Option<Document>> {
    let Bson::Document(d) = v else {
        return Err(wrong_type(command, "collation", v, "object"));
    };
    match d.get("locale") {
        Some(Bson::String(l)) if l == "simple" => Ok(None),
        Some(Bson::String(_)) => Ok(Some(d.clone())),
        Some(other) => Err(wrong_type(command, "collation.locale", other, "string")),
        None => Err(Error::missing_field(&format!("{command}.collation.locale"))),
    }
}

/// Checks a view's pipeline as mongod does before storing it: it must parse, must not
/// write ($out, $merge), start a change stream or produce its own documents.
pub(crate) fn validate_pipeline(view: &ViewMeta) -> Result<()> {
    let invalid = |e: Error| {
        Error::new(
            e.code,
            format!(
                "Invalid pipeline for view {} :: caused by :: {}",
                view.ns.full(),
                e.message
            ),
        )
    };
    let stages = &view.pipeline;
    if stages
        .iter()
        .any(|s| s.len() == 1 && s.contains_key("$changeStream"))
    {
        return Err(invalid(Error::new(
            OPTION_NOT_SUPPORTED_ON_VIEW,
            "$changeStream cannot be used in a view definition",
        )));
    }
    // A leading $collStats is answered from the collection's numbers (see `find`).
    let parsed = match stages.first() {
        Some(s) if s.len() == 1 && s.contains_key("$collStats") => &stages[1..],
        _ => &stages[..],
    };
    if let Err(e) = Pipeline::parse(parsed, &view.ns.db) {
        // Errors of the stage names and shapes come out as they are (mongod finds them
        // in its first, light parse); the others name the view.
        return Err(match e.code {
            40323 | 40324 | 40601 | 40602 => e,
            _ => invalid(e),
        });
    }
    for (i, s) in stages.iter().enumerate() {
        let name = s.keys().next().map(String::as_str).unwrap_or("");
        match name {
            "$out" | "$merge" => {
                return Err(invalid(Error::new(
                    OPTION_NOT_SUPPORTED_ON_VIEW,
                    format!(
                        "The aggregation stage {name} in location {i} of the pipeline cannot be used in the view definition of {} because it writes to disk",
                        view.ns.full()
                    ),
                )))
            }
            "$documents" => {
                return Err(invalid(Error::new(
                    codes::INVALID_NAMESPACE,
                    "'$documents' cannot be used in a view definition",
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The collections and views of its database a view reads: `viewOn` and those its
/// stages name (`$lookup`, `$graphLookup`, `$unionWith`, also inside sub-pipelines).
pub(crate) fn references(view: &ViewMeta) -> Vec<String> {
    fn walk(stages: &[Bson], db: &str, out: &mut Vec<String>) {
        for s in stages {
            let Some(stage) = s.as_document() else {
                continue;
            };
            for (name, arg) in stage {
                let (coll, sub) = match (name.as_str(), arg) {
                    ("$lookup" | "$graphLookup", Bson::Document(d)) => {
                        (from_field(d.get("from"), db), d.get_array("pipeline").ok())
                    }
                    ("$unionWith", Bson::String(c)) => (Some(c.clone()), None),
                    ("$unionWith", Bson::Document(d)) => (
                        d.get_str("coll").ok().map(str::to_string),
                        d.get_array("pipeline").ok(),
                    ),
                    ("$facet", Bson::Document(d)) => {
                        for v in d.values() {
                            if let Bson::Array(a) = v {
                                walk(a, db, out);
                            }
                        }
                        (None, None)
                    }
                    _ => (None, None),
                };
                if let Some(c) = coll {
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
                if let Some(sub) = sub {
                    walk(sub, db, out);
                }
            }
        }
    }
    fn from_field(v: Option<&Bson>, db: &str) -> Option<String> {
        match v {
            Some(Bson::String(c)) => Some(c.clone()),
            Some(Bson::Document(d)) if d.get_str("db") == Ok(db) => {
                d.get_str("coll").ok().map(str::to_string)
            }
            _ => None,
        }
    }
    let mut out = vec![view.view_on.clone()];
    let stages: Vec<Bson> = view.pipeline.iter().cloned().map(Bson::Document).collect();
    walk(&stages, &view.ns.db, &mut out);
    out
}

/// The views of one database as a graph, with `candidate` in place of its current
/// definition: the checks mongod's ViewGraph makes before a view is stored.
struct ViewGraph<'a> {
    db: &'a str,
    /// View name to (the names it reads, its collation).
    nodes: HashMap<String, (Vec<String>, Option<&'a Document>)>,
}

impl<'a> ViewGraph<'a> {
    fn new(views: &'a BTreeMap<String, Arc<ViewMeta>>, candidate: &'a ViewMeta) -> Self {
        let db = candidate.ns.db.as_str();
        let mut nodes = HashMap::new();
        for v in views.values().filter(|v| v.ns.db == db) {
            nodes.insert(v.ns.coll.clone(), (references(v), v.collation.as_ref()));
        }
        nodes.insert(
            candidate.ns.coll.clone(),
            (references(candidate), candidate.collation.as_ref()),
        );
        ViewGraph { db, nodes }
    }

    fn full(&self, name: &str) -> String {
        format!("{}.{name}", self.db)
    }

    fn depth_error() -> Error {
        Error::new(
            VIEW_DEPTH_LIMIT_EXCEEDED,
            format!("View depth limit exceeded; maximum depth is {MAX_VIEW_DEPTH}"),
        )
    }

    fn collation_error(&self, view: &str, other: &str) -> Error {
        Error::new(
            OPTION_NOT_SUPPORTED_ON_VIEW,
            format!(
                "View {} has a collation that does not match the collation of view {}",
                self.full(view),
                self.full(other)
            ),
        )
    }

    /// Height of `name` counted down through the views it reads (a collection is 1),
    /// after checking for a cycle back to `start` and for matching collations.
    fn children_height(
        &self,
        start: &str,
        name: &str,
        depth: usize,
        path: &mut Vec<String>,
        heights: &mut HashMap<String, usize>,
    ) -> Result<usize> {
        path.push(name.to_string());
        if depth > 0 && name == start {
            // mongod's message: the start, then the path walked backwards.
            let mut msg = format!("View cycle detected: {}", self.full(start));
            for n in path.iter().rev() {
                msg.push_str(&format!(" => {}", self.full(n)));
            }
            return Err(Error::new(codes::GRAPH_CONTAINS_CYCLE, msg));
        }
        if depth > MAX_VIEW_DEPTH {
            return Err(Self::depth_error());
        }
        let mut max_child = 0;
        if let Some((children, collation)) = self.nodes.get(name) {
            for child in children {
                if let Some(h) = heights.get(child) {
                    max_child = max_child.max(*h);
                    continue;
                }
                if let Some((_, child_collation)) = self.nodes.get(child) {
                    if child_collation != collation {
                        return Err(self.collation_error(name, child));
                    }
                }
                let h = self.children_height(start, child, depth + 1, path, heights)?;
                max_child = max_child.max(h);
            }
        }
        path.pop();
        let h = max_child + 1;
        heights.insert(name.to_string(), h);
        Ok(h)
    }

    /// Height of `name` counted up through the views that read it (itself is 1).
    fn parents_height(
        &self,
        name: &str,
        depth: usize,
        heights: &mut HashMap<String, usize>,
    ) -> Result<usize> {
        if depth > MAX_VIEW_DEPTH {
            return Err(Self::depth_error());
        }
        let collation = self.nodes.get(name).and_then(|(_, c)| *c);
        let mut max_parent = 0;
        for (parent, (children, parent_collation)) in &self.nodes {
            if !children.iter().any(|c| c == name) {
                continue;
            }
            if self.nodes.contains_key(name) && *parent_collation != collation {
                return Err(self.collation_error(name, parent));
            }
            let h = match heights.get(parent) {
                Some(h) => *h,
                None => self.parents_height(parent, depth + 1, heights)?,
            };
            max_parent = max_parent.max(h);
        }
        let h = max_parent + 1;
        heights.insert(name.to_string(), h);
        Ok(h)
    }
}

/// Checks that storing `candidate` leaves the database's views without a cycle, no
/// chain longer than 20 and matching collations along every chain.
pub(crate) fn check_graph(catalog: &Catalog, candidate: &ViewMeta) -> Result<()> {
    let graph = ViewGraph::new(&catalog.views, candidate);
    let name = candidate.ns.coll.as_str();
    let mut path = Vec::new();
    let children = graph.children_height(name, name, 0, &mut path, &mut HashMap::new())?;
    let parents = graph.parents_height(name, 0, &mut HashMap::new())?;
    // The children's height counts the collection at the bottom; both count the view.
    if parents + (children - 1) - 1 > MAX_VIEW_DEPTH {
        return Err(ViewGraph::depth_error());
    }
    Ok(())
}

/// The options `create` accepts with `viewOn` (the generic arguments are gone already).
const VIEW_CREATE_OPTIONS: &[&str] = &["viewOn", "pipeline", "collation"];

/// A view definition from `create`'s options, fully checked.
pub(crate) fn definition_from_create(ns: &Namespace, options: &Document) -> Result<ViewMeta> {
    if ns.coll == SYSTEM_VIEWS {
        return Err(Error::new(
            codes::INVALID_NAMESPACE,
            format!(
                "Cannot create a view called '{}': this is a reserved system namespace",
                ns.coll
            ),
        ));
    }
    for (k, v) in options {
        if VIEW_CREATE_OPTIONS.contains(&k.as_str()) {
            continue;
        }
        if k == "idIndex" {
            return Err(Error::invalid_options(format!(
                "'idIndex' is not allowed with 'viewOn': {}",
                match v {
                    Bson::Document(d) => crate::core::format::doc_to_string(d),
                    other => crate::core::format::value_to_string(other),
                }
            )));
        }
        // A disabled option is no option (drivers send `changeStreamPreAndPostImages:
        // {enabled: false}` and `capped: false` freely).
        let disabled = match v {
            Bson::Boolean(false) => true,
            Bson::Document(d) => d.get_bool("enabled") == Ok(false),
            _ => false,
        };
        if !disabled {
            return Err(Error::invalid_options(format!(
                "option not supported on a view: {k}"
            )));
        }
    }
    let view_on = parse_view_on(
        "create",
        options.get("viewOn").ok_or_else(|| {
            Error::invalid_options("'pipeline' requires 'viewOn' to also be specified")
        })?,
    )?;
    let pipeline = match options.get("pipeline") {
        Some(p) => parse_pipeline("create", p)?,
        None => Vec::new(),
    };
    let collation = match options.get("collation") {
        Some(c) => parse_collation("create", c)?,
        None => None,
    };
    let view = ViewMeta {
        ns: ns.clone(),
        view_on,
        pipeline,
        collation,
    };
    validate_pipeline(&view)?;
    Ok(view)
}

/// Whether `ns` is a database's `system.views` (the view definitions).
pub(crate) fn is_system_views(ns: &str) -> bool {
    ns.strip_suffix(".system.views")
        .is_some_and(|db| !db.is_empty() && !db.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn view(name: &str, on: &str, pipeline: Vec<Document>) -> ViewMeta {
        ViewMeta {
            ns: Namespace::new("t", name),
            view_on: on.into(),
            pipeline,
            collation: None,
        }
    }

    fn catalog_with(views: &[ViewMeta]) -> Catalog {
        let mut c = Catalog::default();
        for v in views {
            c.views.insert(v.ns.full(), Arc::new(v.clone()));
        }
        c
    }

    #[test]
    fn resolves_views_on_views_innermost_pipeline_first() {
        let c = catalog_with(&[
            view("v1", "src", vec![doc! {"$match": {"g": 1}}]),
            view("v2", "v1", vec![doc! {"$project": {"g": 1}}]),
        ]);
        let r = c.resolve_view(&Namespace::new("t", "v2")).unwrap().unwrap();
        assert_eq!(r.base, Namespace::new("t", "src"));
        assert_eq!(
            r.pipeline,
            vec![doc! {"$match": {"g": 1}}, doc! {"$project": {"g": 1}}]
        );
        assert!(c
            .resolve_view(&Namespace::new("t", "src"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn cycles_are_reported_with_mongods_path() {
        let c = catalog_with(&[view("v4", "v1", vec![])]);
        let e = check_graph(&c, &view("v1", "v4", vec![])).unwrap_err();
        assert_eq!(e.code, codes::GRAPH_CONTAINS_CYCLE);
        assert_eq!(
            e.message,
            "View cycle detected: t.v1 => t.v1 => t.v4 => t.v1"
        );
        let e = check_graph(&Catalog::default(), &view("bad", "bad", vec![])).unwrap_err();
        assert_eq!(e.message, "View cycle detected: t.bad => t.bad => t.bad");
        // Through a $lookup as well.
        let e = check_graph(
            &c,
            &view(
                "v1",
                "src",
                vec![doc! {"$lookup": {"from": "v4", "localField": "a", "foreignField": "a", "as": "x"}}],
            ),
        )
        .unwrap_err();
        assert_eq!(e.code, codes::GRAPH_CONTAINS_CYCLE);
    }

    #[test]
    fn a_chain_of_twenty_views_is_the_limit() {
        let mut views = vec![view("v1", "base", vec![])];
        for i in 2..=20 {
            views.push(view(&format!("v{i}"), &format!("v{}", i - 1), vec![]));
        }
        let c = catalog_with(&views[..19]);
        check_graph(&c, &views[19]).unwrap();
        let c = catalog_with(&views);
        let e = check_graph(&c, &view("v21", "v20", vec![])).unwrap_err();
        assert_eq!(e.code, VIEW_DEPTH_LIMIT_EXCEEDED);
        // Lengthening an existing chain from below counts the views above as well.
        let mut longer = views.clone();
        longer.push(view("w", "base", vec![]));
        let c2 = catalog_with(&longer);
        let e = check_graph(&c2, &view("v1", "w", vec![])).unwrap_err();
        assert_eq!(e.code, VIEW_DEPTH_LIMIT_EXCEEDED, "{e}");
        check_graph(&c2, &view("v1", "base", vec![])).unwrap();
        // Reading resolves at most 19 nested views.
        let e = c.resolve_view(&Namespace::new("t", "v20")).unwrap_err();
        assert_eq!(e.code, VIEW_DEPTH_LIMIT_EXCEEDED);
        assert!(c
            .resolve_view(&Namespace::new("t", "v19"))
            .unwrap()
            .is_some());
    }

    #[test]
    fn collations_must_match_along_a_chain() {
        let mut fr = view("v2", "v1", vec![]);
        fr.collation = Some(doc! {"locale": "fr"});
        let c = catalog_with(&[view("v1", "src", vec![])]);
        let e = check_graph(&c, &fr).unwrap_err();
        assert_eq!(e.code, OPTION_NOT_SUPPORTED_ON_VIEW);
    }

    #[test]
    fn pipelines_that_write_or_stream_are_refused() {
        let ns = Namespace::new("t", "v");
        for (stage, code) in [
            (doc! {"$out": "x"}, OPTION_NOT_SUPPORTED_ON_VIEW),
            (doc! {"$merge": {"into": "x"}}, OPTION_NOT_SUPPORTED_ON_VIEW),
            (doc! {"$changeStream": {}}, OPTION_NOT_SUPPORTED_ON_VIEW),
            (doc! {"$documents": [{"a": 1}]}, codes::INVALID_NAMESPACE),
            (doc! {"$nope": 1}, 40324),
        ] {
            let options = doc! {"viewOn": "src", "pipeline": [stage.clone()]};
            let e = definition_from_create(&ns, &options).unwrap_err();
            assert_eq!(e.code, code, "{stage}: {e}");
        }
        let e = definition_from_create(
            &ns,
            &doc! {"viewOn": "src", "pipeline": [{"$merge": {"into": "x"}}]},
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Invalid pipeline for view t.v :: caused by :: The aggregation stage $merge in location 0 of the pipeline cannot be used in the view definition of t.v because it writes to disk"
        );
        let e = definition_from_create(&ns, &doc! {"viewOn": "", "pipeline": []}).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (2, "'viewOn' cannot be empty")
        );
        let e = definition_from_create(&ns, &doc! {"viewOn": 5, "pipeline": []}).unwrap_err();
        assert_eq!(
            e.message,
            "BSON field 'create.viewOn' is the wrong type 'int', expected type 'string'"
        );
        let e = definition_from_create(&ns, &doc! {"pipeline": []}).unwrap_err();
        assert_eq!(e.code, codes::INVALID_OPTIONS);
        let v = definition_from_create(&ns, &doc! {"viewOn": "src"}).unwrap();
        assert!(v.pipeline.is_empty());
        assert_eq!(
            v.definition(),
            doc! {"_id": "t.v", "viewOn": "src", "pipeline": []}
        );
    }
}

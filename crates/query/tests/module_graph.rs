//! The query crate's modules stay in layers: no module depends on another that depends
//! back on it, directly or through others, at any level (the crate's top-level modules,
//! and the child modules of each module among themselves). The graph is read from the
//! crate's own sources by the dev-only `tailstream-modgraph` crate.

use tailstream_modgraph::ModuleGraph;

fn graph() -> ModuleGraph {
    ModuleGraph::from_crate_dir(env!("CARGO_MANIFEST_DIR")).expect("the crate's sources")
}

#[test]
fn no_import_cycles_between_modules() {
    let cycles = graph().describe_cycles_at_every_level();
    assert!(cycles.is_empty(), "{cycles}");
}

/// The check reads the crate as it is: its modules, and dependencies known to exist
/// (an empty graph would have no cycle either).
#[test]
fn the_graph_is_the_crates() {
    let g = graph();
    for module in [
        "pipeline::group",
        "expr::arith",
        "geo::index",
        "update::util",
    ] {
        assert!(g.modules().any(|m| m == module), "{module} not found");
    }
    let depends = |from: &str, to: &str| g.edges().any(|(a, b, _)| a == from && b == to);
    assert!(depends("collation", "render"));
    assert!(depends("projection", "matcher"));
    // `crate::compare::type_name` is a re-export: the dependency is on where it lives.
    assert!(depends("update::util", "types"));
}

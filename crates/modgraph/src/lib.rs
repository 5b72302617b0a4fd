//! The module import graph of a Rust crate, read from its sources, for tests that keep
//! a crate's modules in layers: module A depends on module B when A's code names B or
//! anything in it (`use crate::b::X`, `crate::b::f()`, `super::b::Y`, `b::Z` for a child
//! module `b`). Names re-exported with `use` are followed to the module that defines
//! them, so `crate::Result` (re-exported by lib.rs) counts as a use of `crate::error`.
//!
//! Dev-only and dependency-free: a crate's test builds the graph from its own
//! `src/lib.rs` and asserts there is no cycle, e.g.
//!
//! ```no_run
//! let graph = tailstream_modgraph::ModuleGraph::from_crate_dir(env!("CARGO_MANIFEST_DIR"))
//!     .unwrap()
//!     .collapse(1);
//! assert!(graph.cycles().is_empty(), "{}", graph.describe_cycles());
//! ```
//!
//! Items under `#[cfg(test)]` are left out by default (tests may reach anywhere);
//! paths in comments, doc links and strings are not imports. Not read: `#[path]`
//! attributes, macros that build paths, and names that reach a module only through a
//! glob import (the glob itself counts as a use of the module it imports from).

mod lex;
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

pub use scan::ModPath;
use scan::{ModuleText, Written};

/// Where a dependency is written: the file, the line and the path as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Site {
    pub file: PathBuf,
    pub line: usize,
    pub written: String,
}

/// Modules (`a::b`, the root is ``) and the dependencies between them, each with the
/// first place it is written.
#[derive(Debug, Clone, Default)]
pub struct ModuleGraph {
    modules: BTreeMap<String, PathBuf>,
    edges: BTreeMap<(String, String), Site>,
}

/// A module as read: its file and its own text.
struct Module {
    file: PathBuf,
    text: ModuleText,
}

/// How many `use` re-exports a path may pass through before it is taken as is.
const MAX_ALIAS_HOPS: usize = 16;

impl ModuleGraph {
    /// The graph of the crate whose manifest directory is `dir` (`src/lib.rs`, or
    /// `src/main.rs` for a binary), items under `#[cfg(test)]` left out.
    pub fn from_crate_dir(dir: impl AsRef<Path>) -> io::Result<ModuleGraph> {
        let src = dir.as_ref().join("src");
        let root = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, "no src/lib.rs or src/main.rs")
            })?;
        Self::from_root_file(&root, false, |p| std::fs::read_to_string(p).ok())
    }

    /// The graph of the crate rooted at `root`, files read by `read` (None: absent).
    /// `include_tests` keeps the items under `#[cfg(test)]`.
    pub fn from_root_file(
        root: &Path,
        include_tests: bool,
        read: impl Fn(&Path) -> Option<String>,
    ) -> io::Result<ModuleGraph> {
        let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
        let mut pending = vec![(Vec::<String>::new(), root.to_path_buf())];
        while let Some((path, file)) = pending.pop() {
            let src = read(&file).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("cannot read {}", file.display()),
                )
            })?;
            for (rel, text) in scan::scan(&src, include_tests) {
                let mut full = path.clone();
                full.extend(rel.iter().cloned());
                let dir = children_dir(&file, &rel);
                for child in &text.file_children {
                    let mut child_path = full.clone();
                    child_path.push(child.clone());
                    let flat = dir.join(format!("{child}.rs"));
                    let nested = dir.join(child).join("mod.rs");
                    let child_file = if read(&flat).is_some() { flat } else { nested };
                    pending.push((child_path, child_file));
                }
                modules.insert(
                    full,
                    Module {
                        file: file.clone(),
                        text,
                    },
                );
            }
        }
        Ok(Self::resolve(&modules))
    }

    fn resolve(modules: &BTreeMap<ModPath, Module>) -> ModuleGraph {
        let resolver = Resolver { modules };
        let mut graph = ModuleGraph::default();
        for (path, m) in modules {
            graph.modules.insert(path.join("::"), m.file.clone());
        }
        for (path, m) in modules {
            let written = m.text.uses.iter().map(|(_, w)| w).chain(&m.text.paths);
            for w in written {
                let Some(target) = resolver.target(path, w) else {
                    continue;
                };
                if &target == path {
                    continue;
                }
                let site = Site {
                    file: m.file.clone(),
                    line: w.line,
                    written: w.segments.join("::") + if w.glob { "::*" } else { "" },
                };
                graph
                    .edges
                    .entry((path.join("::"), target.join("::")))
                    .or_insert(site);
            }
        }
        graph
    }

    /// Every module, by path (`` is the crate root).
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.modules.keys().map(String::as_str)
    }

    /// Every dependency `(from, to)` with the first place it is written.
    pub fn edges(&self) -> impl Iterator<Item = (&str, &str, &Site)> {
        self.edges
            .iter()
            .map(|((a, b), site)| (a.as_str(), b.as_str(), site))
    }

    /// The graph with every module folded into its ancestor `depth` levels down
    /// (1: the crate's top-level modules); dependencies inside one folded module go.
    pub fn collapse(&self, depth: usize) -> ModuleGraph {
        let fold = |m: &str| -> String {
            m.split("::")
                .filter(|s| !s.is_empty())
                .take(depth)
                .collect::<Vec<_>>()
                .join("::")
        };
        let mut out = ModuleGraph::default();
        for (m, file) in &self.modules {
            out.modules.entry(fold(m)).or_insert_with(|| file.clone());
        }
        for ((a, b), site) in &self.edges {
            let (a, b) = (fold(a), fold(b));
            if a != b {
                out.edges.entry((a, b)).or_insert_with(|| site.clone());
            }
        }
        out
    }

    /// The graph of `parent`'s child modules (`` for the crate's top-level modules),
    /// each with its own descendants folded into it; dependencies on `parent` itself
    /// (children that use their parent's types, a parent that dispatches to its
    /// children) and on modules outside `parent` are left out. A cycle here is a cycle
    /// between siblings.
    pub fn within(&self, parent: &str) -> ModuleGraph {
        let prefix = if parent.is_empty() {
            String::new()
        } else {
            format!("{parent}::")
        };
        let child = |m: &str| -> Option<String> {
            let rest = m.strip_prefix(&prefix)?;
            let first = rest.split("::").next().filter(|s| !s.is_empty())?;
            Some(format!("{prefix}{first}"))
        };
        let mut out = ModuleGraph::default();
        for (m, file) in &self.modules {
            if let Some(c) = child(m) {
                out.modules.entry(c).or_insert_with(|| file.clone());
            }
        }
        for ((a, b), site) in &self.edges {
            if let (Some(a), Some(b)) = (child(a), child(b)) {
                if a != b {
                    out.edges.entry((a, b)).or_insert_with(|| site.clone());
                }
            }
        }
        out
    }

    /// [`Self::describe_cycles`] of [`Self::within`] every module: empty when no
    /// module's children depend on each other in a cycle, at any level.
    pub fn describe_cycles_at_every_level(&self) -> String {
        self.modules
            .keys()
            .map(|m| self.within(m).describe_cycles())
            .collect()
    }

    /// The groups of modules that depend on each other (directly or through others),
    /// each sorted: no group means no import cycle.
    pub fn cyclic_groups(&self) -> Vec<Vec<String>> {
        let mut groups = self.strongly_connected();
        groups.retain(|g| g.len() > 1);
        groups
    }

    /// One import cycle per group of [`Self::cyclic_groups`], as a path `[a, b, ..., a]`.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        self.cyclic_groups()
            .iter()
            .map(|g| self.cycle_through(g))
            .collect()
    }

    /// Each group of modules in a cycle, and one cycle through it with where its
    /// dependencies are written, one line per dependency.
    pub fn describe_cycles(&self) -> String {
        let mut s = String::new();
        for group in self.cyclic_groups() {
            let cycle = self.cycle_through(&group);
            let _ = writeln!(s, "modules in a cycle: {}", group.join(", "));
            let _ = writeln!(s, "  for one: {}", cycle.join(" -> "));
            for pair in cycle.windows(2) {
                if let Some(site) = self.edges.get(&(pair[0].clone(), pair[1].clone())) {
                    let _ = writeln!(
                        s,
                        "    {} -> {}: {}:{} {}",
                        pair[0],
                        pair[1],
                        site.file.display(),
                        site.line,
                        site.written
                    );
                }
            }
        }
        s
    }

    fn successors<'a>(&'a self, m: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.edges
            .keys()
            .filter(move |(a, _)| a == m)
            .map(|(_, b)| b.as_str())
    }

    /// Tarjan's strongly connected components.
    fn strongly_connected(&self) -> Vec<Vec<String>> {
        struct State<'g> {
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            groups: Vec<Vec<String>>,
        }
        fn visit<'g>(g: &'g ModuleGraph, v: &'g str, st: &mut State<'g>) {
            let i = st.index.len();
            st.index.insert(v, i);
            st.low.insert(v, i);
            st.stack.push(v);
            st.on_stack.insert(v);
            for w in g.successors(v) {
                if !st.index.contains_key(w) {
                    visit(g, w, st);
                    let lw = st.low[w];
                    let lv = st.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if st.on_stack.contains(w) {
                    let iw = st.index[w];
                    let lv = st.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if st.low[v] == st.index[v] {
                let mut group = Vec::new();
                while let Some(w) = st.stack.pop() {
                    st.on_stack.remove(w);
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                group.sort();
                st.groups.push(group);
            }
        }
        let mut st = State {
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            groups: Vec::new(),
        };
        let nodes: BTreeSet<&str> = self
            .modules
            .keys()
            .map(String::as_str)
            .chain(
                self.edges
                    .keys()
                    .flat_map(|(a, b)| [a.as_str(), b.as_str()]),
            )
            .collect();
        for v in nodes {
            if !st.index.contains_key(v) {
                visit(self, v, &mut st);
            }
        }
        st.groups.sort();
        st.groups
    }

    /// A shortest cycle from the group's first module back to it, inside the group.
    fn cycle_through(&self, group: &[String]) -> Vec<String> {
        let start = group[0].as_str();
        let inside: BTreeSet<&str> = group.iter().map(String::as_str).collect();
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.successors(v).filter(|w| inside.contains(w)) {
                if w == start {
                    let mut path = vec![start.to_string()];
                    let mut at = v;
                    while at != start {
                        path.push(at.to_string());
                        at = came_from[at];
                    }
                    path.push(start.to_string());
                    path.reverse();
                    return path;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        group.to_vec()
    }
}

/// The directory holding the files of the children of module `rel` (relative to the
/// module of `file`): `src/` for lib.rs and mod.rs, `src/x/` for x.rs, plus the inline
/// modules' names.
fn children_dir(file: &Path, rel: &[String]) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let mut dir = if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
        parent.to_path_buf()
    } else {
        parent.join(name.trim_end_matches(".rs"))
    };
    for r in rel {
        dir.push(r);
    }
    dir
}

/// Turns written paths into the modules they name.
struct Resolver<'m> {
    modules: &'m BTreeMap<ModPath, Module>,
}

impl Resolver<'_> {
    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }

    /// The module `w`, written in module `at`, depends on; None for a path outside
    /// the crate (`std::`, `bson::`, a local type's `Self::`).
    fn target(&self, at: &ModPath, w: &Written) -> Option<ModPath> {
        self.resolve(at, &w.segments, MAX_ALIAS_HOPS)
    }

    fn resolve(&self, at: &ModPath, segments: &[String], hops: usize) -> Option<ModPath> {
        let (mut base, rest) = self.anchor(at, segments, hops)?;
        let mut rest = rest.iter();
        for seg in rest.by_ref() {
            let mut next = base.clone();
            next.push(seg.clone());
            if self.is_module(&next) {
                base = next;
                continue;
            }
            // Not a module: an item of `base`, or a name `base` imports from elsewhere.
            if hops > 0 {
                if let Some(alias) = self.alias(&base, seg) {
                    return self
                        .resolve(&base, &alias.segments, hops - 1)
                        .or(Some(base));
                }
            }
            break;
        }
        Some(base)
    }

    /// Where a written path starts: the module its first segment names and the rest.
    fn anchor<'s>(
        &self,
        at: &ModPath,
        segments: &'s [String],
        hops: usize,
    ) -> Option<(ModPath, &'s [String])> {
        let first = segments.first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), &segments[1..])),
            "self" => Some((at.clone(), &segments[1..])),
            "super" => {
                let mut base = at.clone();
                let mut rest = segments;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                Some((base, rest))
            }
            _ => {
                let mut child = at.clone();
                child.push(first.clone());
                if self.is_module(&child) {
                    return Some((at.clone(), segments));
                }
                // A name the module imports (`use crate::expr;` then `expr::f()`).
                let alias = self.alias(at, first).filter(|_| hops > 0)?;
                let mut joined = alias.segments.clone();
                joined.extend(segments[1..].iter().cloned());
                let target = self.resolve(at, &joined, hops - 1)?;
                Some((target, &[]))
            }
        }
    }

    /// The path a module's `use` gives to `name`, if it imports one by that name.
    fn alias(&self, module: &ModPath, name: &str) -> Option<&Written> {
        let m = self.modules.get(module)?;
        m.text
            .uses
            .iter()
            .find(|(n, w)| n.as_deref() == Some(name) && !w.glob)
            .map(|(_, w)| w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> ModuleGraph {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect();
        ModuleGraph::from_root_file(Path::new("src/lib.rs"), false, |p| files.get(p).cloned())
            .unwrap()
    }

    fn edges(g: &ModuleGraph) -> Vec<String> {
        g.edges().map(|(a, b, _)| format!("{a} -> {b}")).collect()
    }

    #[test]
    fn files_children_and_reexports() {
        let g = graph(&[
            (
                "src/lib.rs",
                "pub mod error; pub mod a; mod b; pub use error::Error;",
            ),
            (
                "src/error.rs",
                "pub struct Error; pub mod codes { pub const X: i32 = 1; }",
            ),
            (
                "src/a/mod.rs",
                "mod inner; pub use inner::f; fn g() -> crate::Error { todo!() }",
            ),
            (
                "src/a/inner.rs",
                "use super::super::error::codes::X; pub fn f() {}",
            ),
            (
                "src/b.rs",
                "mod c; fn h() { crate::a::f(); c::k(); std::mem::drop(1); }",
            ),
            (
                "src/b/c.rs",
                "pub fn k() { let _ = crate::error::codes::X; }",
            ),
        ]);
        assert_eq!(
            g.modules().collect::<Vec<_>>(),
            ["", "a", "a::inner", "b", "b::c", "error", "error::codes"]
        );
        assert_eq!(
            edges(&g),
            [
                " -> error",
                "a -> a::inner",
                "a -> error",
                "a::inner -> error::codes",
                "b -> a::inner",
                "b -> b::c",
                "b::c -> error::codes",
            ]
        );
        let site = g.edges().find(|(a, _, _)| *a == "a").unwrap().2;
        assert_eq!((site.file.to_str(), site.line), (Some("src/a/mod.rs"), 1));
        assert!(g.cycles().is_empty());
        assert_eq!(
            edges(&g.collapse(1)),
            [" -> error", "a -> error", "b -> a", "b -> error"]
        );
    }

    #[test]
    fn finds_cycles_direct_and_through_others() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b; mod c; mod d;"),
            ("src/a.rs", "use crate::b::X;"),
            ("src/b.rs", "pub struct X; fn f() { crate::c::g() }"),
            (
                "src/c.rs",
                "pub fn g() { super::a::h() } #[cfg(test)] mod tests { use crate::d; }",
            ),
            ("src/d.rs", "use crate::c;"),
        ]);
        assert_eq!(g.cycles(), [vec!["a", "b", "c", "a"]]);
        let text = g.describe_cycles();
        assert!(text.contains("a -> b: src/a.rs:1 crate::b::X"), "{text}");
        assert!(text.contains("c -> a: src/c.rs:1 super::a::h"), "{text}");
    }

    #[test]
    fn cycles_between_siblings() {
        let g = graph(&[
            ("src/lib.rs", "mod p;"),
            (
                "src/p/mod.rs",
                "mod x; mod y; mod z; pub struct T; fn f() { x::run(); y::run(); }",
            ),
            ("src/p/x.rs", "use super::T; mod deep; pub fn run() {}"),
            ("src/p/x/deep.rs", "fn g() { crate::p::z::h() }"),
            (
                "src/p/y.rs",
                "use super::*; pub fn run() { super::x::run() }",
            ),
            ("src/p/z.rs", "pub fn h() { crate::p::y::run() }"),
        ]);
        // The parent and its children depend on each other: accepted.
        assert_eq!(g.cycles().len(), 1);
        assert!(g.collapse(1).cycles().is_empty());
        assert!(g.within("").cycles().is_empty());
        // x (through its child deep) -> z -> y -> x is a cycle among p's children.
        let inside = g.within("p");
        assert_eq!(
            edges(&inside),
            ["p::x -> p::z", "p::y -> p::x", "p::z -> p::y"]
        );
        assert_eq!(inside.cycles(), [vec!["p::x", "p::z", "p::y", "p::x"]]);
        let all = g.describe_cycles_at_every_level();
        assert!(
            all.starts_with("modules in a cycle: p::x, p::y, p::z\n"),
            "{all}"
        );
        assert!(
            all.contains("p::x -> p::z: src/p/x/deep.rs:1 crate::p::z::h"),
            "{all}"
        );
    }

    #[test]
    fn imported_module_names() {
        let g = graph(&[
            ("src/lib.rs", "mod a; mod b;"),
            ("src/a.rs", "use crate::b; fn f() { b::g(); }"),
            (
                "src/b.rs",
                "pub fn g() {} use crate::a as alias; fn h() { alias::f() }",
            ),
        ]);
        assert_eq!(edges(&g), ["a -> b", "b -> a"]);
    }
}

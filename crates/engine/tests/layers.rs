//! The engine's layers, bottom to top (ARCHITECTURE.md, "The engine's layers"): a
//! module may use its own layer and the layers below it, never one above. This test
//! reads the crate's sources and fails on a `crate::` path that points up, on a path
//! through the old flat module names that `lib.rs` re-exports for other crates, and
//! on an entry of `KNOWN_UPWARD` that no longer happens (the list only shrinks).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom to top.
const LAYERS: [&str; 7] = [
    "core",
    "catalog",
    "oplog",
    "read",
    "write",
    "changestream",
    "repl",
];

/// What a module may name at the crate root: the engine handle (every layer receives
/// it; its definition in lib.rs is the top), its options, the query crate.
const ROOT_ITEMS: [&str; 3] = ["Engine", "EngineOptions", "query"];

/// Upward uses not removed yet, each with why it is there: (file, layer it uses).
const KNOWN_UPWARD: &[(&str, &str)] = &[
    // find's aggregate runs $out/$merge, which write.
    ("read/find.rs", "write"),
];

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments (doc links name other layers in prose).
fn code_lines(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path in `code`, grouped imports included
/// (`use crate::{core::keys, Engine}` gives `core` and `Engine`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `tailstream_query::...` or `$crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            for item in split_top_level(&group[..end]) {
                out.insert(first_segment(item.trim()));
            }
        } else {
            out.insert(first_segment(rest));
        }
    }
    out.remove("");
    out
}

fn matching_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn first_segment(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

#[test]
fn modules_use_only_their_layer_and_the_layers_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();
    let mut upward = BTreeSet::new();
    let mut problems = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "lib.rs" {
            continue; // the facade: defines the handle and re-exports
        }
        let folder = rel.split('/').next().unwrap();
        let Some(own) = layer_of(folder) else {
            problems.push(format!("{rel}: not in a layer folder ({LAYERS:?})"));
            continue;
        };
        let code = code_lines(&std::fs::read_to_string(path).unwrap());
        for name in crate_paths(&code) {
            match layer_of(&name) {
                Some(used) if used > own => {
                    upward.insert((rel.clone(), name.clone()));
                }
                Some(_) => {}
                None if ROOT_ITEMS.contains(&name.as_str()) => {}
                None => problems.push(format!(
                    "{rel}: uses crate::{name}; name it by its layer's path"
                )),
            }
        }
    }
    for (file, layer) in &upward {
        if !KNOWN_UPWARD.contains(&(file.as_str(), layer.as_str())) {
            problems.push(format!("{file}: uses the {layer} layer, above its own"));
        }
    }
    for (file, layer) in KNOWN_UPWARD {
        if !upward.contains(&(file.to_string(), layer.to_string())) {
            problems.push(format!(
                "{file} no longer uses {layer}: remove it from KNOWN_UPWARD"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "layer rules broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_path_reader_sees_grouped_and_nested_imports() {
    let code = "use crate::{core::keys, read::{cursor, find}, Engine};\n\
                let x = crate::write::ddl::f(); tailstream_query::crate_like::g();";
    let got: Vec<String> = crate_paths(code).into_iter().collect();
    assert_eq!(got, ["Engine", "core", "read", "write"]);
    assert_eq!(code_lines("let a = 1; // crate::write"), "let a = 1; ");
}

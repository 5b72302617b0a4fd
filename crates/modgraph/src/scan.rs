//! Reads one source file's tokens into what the graph needs: the modules it declares
//! (inline or in files of their own), each module's `use` declarations and every path
//! that may name a module of the crate (`crate::x`, `super::x`, `self::x`, `child::x`).
//! Items under `#[cfg(test)]` are skipped unless tests are asked for.

use crate::lex::{tokenize, Kind, Token};

/// A module path inside the crate: `[]` is the crate root, `["pipeline", "group"]`
/// is `crate::pipeline::group`.
pub type ModPath = Vec<String>;

/// A path as written: its segments (`crate`, `super`, `self` included) and a glob flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub segments: Vec<String>,
    pub glob: bool,
    pub line: usize,
}

/// What one module's own text (not its children's) says.
#[derive(Debug, Default, Clone)]
pub struct ModuleText {
    /// Child modules declared with `mod name;` (their files still to read).
    pub file_children: Vec<String>,
    /// Child modules declared with `mod name { ... }`.
    pub inline_children: Vec<String>,
    /// `use` declarations: the name each brings into scope and the path it names.
    pub uses: Vec<(Option<String>, Written)>,
    /// Other paths that may name a module of the crate.
    pub paths: Vec<Written>,
}

/// The modules a file defines: its own (`[]` relative) and the inline ones inside it,
/// each keyed by its path relative to the file's module.
pub fn scan(src: &str, include_tests: bool) -> Vec<(ModPath, ModuleText)> {
    let tokens = tokenize(src);
    let mut s = Scanner {
        tokens: &tokens,
        pos: 0,
        include_tests,
        modules: vec![(Vec::new(), ModuleText::default())],
    };
    s.items(&[], 0);
    s.modules
}

struct Scanner<'t> {
    tokens: &'t [Token],
    pos: usize,
    include_tests: bool,
    modules: Vec<(ModPath, ModuleText)>,
}

impl<'t> Scanner<'t> {
    fn tok(&self, ahead: usize) -> Option<&'t Token> {
        self.tokens.get(self.pos + ahead)
    }

    fn ident_at(&self, ahead: usize) -> Option<&'t str> {
        self.tok(ahead).and_then(Token::ident)
    }

    fn module(&mut self, path: &[String]) -> &mut ModuleText {
        let i = self
            .modules
            .iter()
            .position(|(p, _)| p == path)
            .unwrap_or_else(|| {
                self.modules.push((path.to_vec(), ModuleText::default()));
                self.modules.len() - 1
            });
        &mut self.modules[i].1
    }

    /// The tokens of module `path` up to the `}` that closes it (`depth` 0: the file's end).
    fn items(&mut self, path: &[String], depth: usize) {
        let mut cfg_test = false;
        // Braces opened inside this module (function bodies, impls, ...).
        let mut open = 0usize;
        while let Some(t) = self.tok(0) {
            let line = t.line;
            match &t.kind {
                Kind::Punct('{') => open += 1,
                Kind::Punct('}') if open > 0 => open -= 1,
                Kind::Punct('}') if depth > 0 => {
                    self.pos += 1;
                    return;
                }
                Kind::Punct('#') => {
                    cfg_test |= self.attribute();
                    continue;
                }
                _ if cfg_test => {
                    cfg_test = false;
                    if !self.include_tests {
                        self.skip_item();
                        continue;
                    }
                }
                _ => {}
            }
            match self.ident_at(0) {
                Some("mod") if self.ident_at(1).is_some() => self.mod_decl(path),
                Some("use") => {
                    let uses = self.use_decl(line);
                    self.module(path).uses.extend(uses);
                }
                Some(_) if self.starts_path() => {
                    let written = self.path();
                    self.module(path).paths.push(written);
                }
                _ => self.pos += 1,
            }
        }
    }

    /// `#[...]` or `#![...]`; true when it is exactly `#[cfg(test)]`.
    fn attribute(&mut self) -> bool {
        self.pos += 1;
        if self.tok(0).is_some_and(|t| t.is_punct('!')) {
            self.pos += 1;
        }
        if !self.tok(0).is_some_and(|t| t.is_punct('[')) {
            return false;
        }
        let start = self.pos;
        self.skip_group();
        let inner: Vec<&Kind> = self.tokens[start..self.pos]
            .iter()
            .map(|t| &t.kind)
            .collect();
        let cfg_test = [
            Kind::Punct('['),
            Kind::Ident("cfg".into()),
            Kind::Punct('('),
            Kind::Ident("test".into()),
            Kind::Punct(')'),
            Kind::Punct(']'),
        ];
        inner.len() == cfg_test.len() && inner.iter().zip(&cfg_test).all(|(a, b)| *a == b)
    }

    /// From an opening bracket to its closing one, whatever the nesting.
    fn skip_group(&mut self) {
        let mut depth = 0usize;
        while let Some(t) = self.tok(0) {
            self.pos += 1;
            match t.kind {
                Kind::Punct('(' | '[' | '{') => depth += 1,
                Kind::Punct(')' | ']' | '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// One item (or statement) left out: up to its `;` or its closing `}`, or to the
    /// `}` of the block it is in (not consumed).
    fn skip_item(&mut self) {
        while let Some(t) = self.tok(0) {
            match t.kind {
                Kind::Punct(';') => {
                    self.pos += 1;
                    return;
                }
                Kind::Punct('{') => {
                    self.skip_group();
                    return;
                }
                Kind::Punct('(' | '[') => self.skip_group(),
                Kind::Punct(')' | ']' | '}') => return,
                Kind::Punct('#') => {
                    self.attribute();
                }
                _ => self.pos += 1,
            }
        }
    }

    /// `mod name;` or `mod name { ... }`.
    fn mod_decl(&mut self, path: &[String]) {
        let name = self.ident_at(1).unwrap_or_default().to_string();
        self.pos += 2;
        match self.tok(0).map(|t| &t.kind) {
            Some(Kind::Punct(';')) => {
                self.pos += 1;
                self.module(path).file_children.push(name);
            }
            Some(Kind::Punct('{')) => {
                self.pos += 1;
                self.module(path).inline_children.push(name.clone());
                let mut child = path.to_vec();
                child.push(name);
                self.module(&child);
                self.items(&child, 1);
            }
            _ => {}
        }
    }

    /// `use` and its tree, up to the `;`.
    fn use_decl(&mut self, line: usize) -> Vec<(Option<String>, Written)> {
        self.pos += 1;
        let mut out = Vec::new();
        self.use_tree(Vec::new(), &mut out, line);
        while let Some(t) = self.tok(0) {
            self.pos += 1;
            if t.is_punct(';') {
                break;
            }
        }
        out
    }

    /// One use tree under `prefix`: `a::b`, `a::b as c`, `a::*`, `a::{...}`, `self`.
    fn use_tree(
        &mut self,
        mut prefix: Vec<String>,
        out: &mut Vec<(Option<String>, Written)>,
        line: usize,
    ) {
        while let Some(t) = self.tok(0) {
            match &t.kind {
                Kind::Ident(s) if s == "self" && !self.followed_by_sep() => {
                    self.pos += 1;
                    out.push((prefix.last().cloned(), written(prefix, false, line)));
                    self.rename(out);
                    return;
                }
                Kind::Ident(s) => {
                    let s = s.clone();
                    self.pos += 1;
                    prefix.push(s.clone());
                    if !self.followed_by_sep_here() {
                        out.push((Some(s), written(prefix, false, line)));
                        self.rename(out);
                        return;
                    }
                    self.pos += 1;
                }
                Kind::PathSep => self.pos += 1,
                Kind::Punct('*') => {
                    self.pos += 1;
                    out.push((None, written(prefix, true, line)));
                    return;
                }
                Kind::Punct('{') => {
                    self.pos += 1;
                    self.use_group(&prefix, out, line);
                    return;
                }
                _ => return,
            }
        }
    }

    /// The branches of `{a, b::c, ...}` after its `{`, through its `}`.
    fn use_group(
        &mut self,
        prefix: &[String],
        out: &mut Vec<(Option<String>, Written)>,
        line: usize,
    ) {
        while let Some(t) = self.tok(0) {
            match t.kind {
                Kind::Punct('}') => {
                    self.pos += 1;
                    return;
                }
                Kind::Punct(',') => self.pos += 1,
                Kind::Punct(';') => return,
                _ => {
                    let before = self.pos;
                    self.use_tree(prefix.to_vec(), out, line);
                    if self.pos == before {
                        self.pos += 1;
                    }
                }
            }
        }
    }

    /// `as name` after a use path: the name it is known by (`as _` imports no name).
    fn rename(&mut self, out: &mut [(Option<String>, Written)]) {
        if self.ident_at(0) != Some("as") {
            return;
        }
        let alias = self.ident_at(1).map(str::to_string);
        self.pos += 2;
        if let Some((name, _)) = out.last_mut() {
            *name = alias.filter(|a| a != "_");
        }
    }

    fn followed_by_sep(&self) -> bool {
        self.tok(1).is_some_and(|t| t.kind == Kind::PathSep)
    }

    fn followed_by_sep_here(&self) -> bool {
        self.tok(0).is_some_and(|t| t.kind == Kind::PathSep)
    }

    /// An identifier followed by `::` that does not continue an earlier path or a
    /// field access (`a.b::<T>()`).
    fn starts_path(&self) -> bool {
        let next_is_sep = self.tok(1).is_some_and(|t| t.kind == Kind::PathSep);
        let before = self.pos.checked_sub(1).and_then(|i| self.tokens.get(i));
        let continues = before.is_some_and(|t| t.kind == Kind::PathSep || t.is_punct('.'));
        next_is_sep && !continues
    }

    fn path(&mut self) -> Written {
        let line = self.tok(0).map(|t| t.line).unwrap_or(0);
        let mut segments = Vec::new();
        while let Some(name) = self.ident_at(0) {
            segments.push(name.to_string());
            self.pos += 1;
            if self.tok(0).is_some_and(|t| t.kind == Kind::PathSep) && self.ident_at(1).is_some() {
                self.pos += 1;
            } else {
                break;
            }
        }
        written(segments, false, line)
    }
}

fn written(segments: Vec<String>, glob: bool, line: usize) -> Written {
    Written {
        segments,
        glob,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(w: &Written) -> String {
        w.segments.join("::") + if w.glob { "::*" } else { "" }
    }

    #[test]
    fn use_trees() {
        let m = scan(
            "use crate::a::{b, c::{d as e, self}, f::*};\nuse super::g;\npub(crate) use h as _;",
            false,
        );
        let uses: Vec<(Option<String>, String)> = m[0]
            .1
            .uses
            .iter()
            .map(|(n, w)| (n.clone(), segs(w)))
            .collect();
        let named = |n: &str, p: &str| (Some(n.to_string()), p.to_string());
        assert_eq!(
            uses,
            [
                named("b", "crate::a::b"),
                named("e", "crate::a::c::d"),
                named("c", "crate::a::c"),
                (None, "crate::a::f::*".to_string()),
                named("g", "super::g"),
                (None, "h".to_string()),
            ]
        );
        assert_eq!(m[0].1.uses[4].1.line, 2);
    }

    #[test]
    fn modules_paths_and_test_items() {
        let src = "
            mod a;
            pub mod b { use super::a::X; fn f() { crate::c::g(); } }
            #[cfg(test)]
            mod tests { use crate::d; }
            #[cfg(test)]
            use crate::e;
            #[derive(Debug)]
            struct S { x: crate::f::T }
            fn h() { let v = x.y::<u8>(); Vec::<crate::g::U>::new(); }
        ";
        let m = scan(src, false);
        assert_eq!(m.len(), 2);
        let (root, b) = (&m[0].1, &m[1].1);
        assert_eq!(root.file_children, ["a"]);
        assert_eq!(root.inline_children, ["b"]);
        assert_eq!(m[1].0, ["b"]);
        assert_eq!(segs(&b.uses[0].1), "super::a::X");
        assert_eq!(
            b.paths.iter().map(segs).collect::<Vec<_>>(),
            ["crate::c::g"]
        );
        assert!(root.uses.is_empty());
        let root_paths: Vec<String> = root.paths.iter().map(segs).collect();
        assert_eq!(root_paths, ["crate::f::T", "Vec", "crate::g::U"]);

        let with_tests = scan(src, true);
        assert_eq!(with_tests.len(), 3);
        assert_eq!(segs(&with_tests[0].1.uses[0].1), "crate::e");
    }
}

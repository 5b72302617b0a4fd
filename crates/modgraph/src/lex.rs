//! A Rust tokenizer just precise enough for import analysis: identifiers, `::` and
//! single punctuation characters, with comments, string, character and number
//! literals and lifetimes skipped (a path inside a string or a doc comment is no import).

/// One token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword (a raw identifier `r#x` is `x`).
    Ident(String),
    /// `::`
    PathSep,
    /// Any other punctuation character.
    Punct(char),
}

impl Token {
    pub fn ident(&self) -> Option<&str> {
        match &self.kind {
            Kind::Ident(s) => Some(s),
            _ => None,
        }
    }
    pub fn is_punct(&self, c: char) -> bool {
        self.kind == Kind::Punct(c)
    }
}

/// The tokens of `src`.
pub fn tokenize(src: &str) -> Vec<Token> {
    Lexer {
        chars: src.chars().collect(),
        pos: 0,
        line: 1,
        out: Vec::new(),
    }
    .run()
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn push(&mut self, kind: Kind, line: usize) {
        self.out.push(Token { kind, line });
    }

    fn run(mut self) -> Vec<Token> {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match c {
                c if c.is_whitespace() => {
                    self.bump();
                }
                '/' if self.peek(1) == Some('/') => self.line_comment(),
                '/' if self.peek(1) == Some('*') => self.block_comment(),
                '"' => self.quoted('"'),
                '\'' => self.char_or_lifetime(),
                'r' | 'b' | 'c' if self.string_prefix_len().is_some() => self.prefixed_string(),
                c if c.is_ascii_digit() => self.number(),
                c if is_ident_start(c) => {
                    let word = self.ident();
                    self.push(Kind::Ident(word), line);
                }
                ':' if self.peek(1) == Some(':') => {
                    self.pos += 2;
                    self.push(Kind::PathSep, line);
                }
                other => {
                    self.bump();
                    self.push(Kind::Punct(other), line);
                }
            }
        }
        self.out
    }

    fn line_comment(&mut self) {
        while let Some(c) = self.peek(0) {
            if c == '\n' {
                break;
            }
            self.bump();
        }
    }

    /// `/* ... */`, nested as Rust nests them.
    fn block_comment(&mut self) {
        self.pos += 2;
        let mut depth = 1;
        while depth > 0 {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => {
                    self.pos += 2;
                    depth += 1;
                }
                (Some('*'), Some('/')) => {
                    self.pos += 2;
                    depth -= 1;
                }
                (Some(_), _) => {
                    self.bump();
                }
                (None, _) => break,
            }
        }
    }

    /// A string or character literal from its opening quote, escapes honoured.
    fn quoted(&mut self, quote: char) {
        self.bump();
        while let Some(c) = self.bump() {
            if c == '\\' {
                self.bump();
            } else if c == quote {
                break;
            }
        }
    }

    /// `'a'`, `'\n'` and `'\u{..}'` are characters; `'a` (no closing quote) a lifetime.
    fn char_or_lifetime(&mut self) {
        let escaped = self.peek(1) == Some('\\');
        let closed = self.peek(2) == Some('\'');
        if escaped || closed {
            self.quoted('\'');
        } else {
            self.bump();
            if self.peek(0).is_some_and(is_ident_start) {
                self.ident();
            }
        }
    }

    /// The length of a string literal's prefix at the cursor (`r`, `r#`, `b`, `br##`,
    /// `c`, `b'`), when one starts here; None for an identifier such as `r#type`.
    fn string_prefix_len(&self) -> Option<usize> {
        let mut n = 0;
        if matches!(self.peek(0), Some('b') | Some('c')) {
            n += 1;
        }
        if self.peek(n) == Some('r') {
            n += 1;
            while self.peek(n) == Some('#') {
                n += 1;
            }
        }
        match self.peek(n) {
            Some('"') if n > 0 => Some(n),
            Some('\'') if n == 1 && self.peek(0) == Some('b') => Some(n),
            _ => None,
        }
    }

    fn prefixed_string(&mut self) {
        let n = self.string_prefix_len().unwrap_or(0);
        let hashes = (0..n).filter(|i| self.peek(*i) == Some('#')).count();
        let raw = (0..n).any(|i| self.peek(i) == Some('r'));
        self.pos += n;
        if !raw {
            let quote = self.peek(0).unwrap_or('"');
            self.quoted(quote);
            return;
        }
        self.bump();
        while let Some(c) = self.bump() {
            if c == '"' && (0..hashes).all(|i| self.peek(i) == Some('#')) {
                self.pos += hashes;
                break;
            }
        }
    }

    /// A number literal, its suffix and fraction (`1.5e3f64`), but not a range's `..`.
    fn number(&mut self) {
        while let Some(c) = self.peek(0) {
            let fraction = c == '.' && self.peek(1).is_some_and(|d| d.is_ascii_digit());
            if c.is_ascii_alphanumeric() || c == '_' || fraction {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn ident(&mut self) -> String {
        if self.peek(0) == Some('r') && self.peek(1) == Some('#') {
            self.pos += 2;
        }
        let start = self.pos;
        while self
            .peek(0)
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokenize(src)
            .into_iter()
            .filter_map(|t| t.ident().map(str::to_string))
            .collect()
    }

    #[test]
    fn skips_comments_strings_chars_and_lifetimes() {
        let src = r####"
            // crate::a
            /* crate::b /* nested crate::c */ crate::d */
            /// [`crate::e`]
            let s = "crate::f \" crate::g";
            let r = r#"crate::h " crate::i"#;
            let b = b"crate::j"; let bc = b'x'; let c = '\''; let u = '\u{1F600}';
            fn f<'a>(x: &'a str) -> &'a str { x }
            let n = 1.5e3f64; let range = 0..2;
            let r#type = crate::k;
        "####;
        assert_eq!(
            idents(src),
            [
                "let", "s", "let", "r", "let", "b", "let", "bc", "let", "c", "let", "u", "fn", "f",
                "x", "str", "str", "x", "let", "n", "let", "range", "let", "type", "crate", "k"
            ]
        );
    }

    #[test]
    fn path_separators_and_lines() {
        let t = tokenize("a::b\n::c");
        assert_eq!(t[1].kind, Kind::PathSep);
        assert_eq!(t[3].line, 2);
        assert_eq!(t[4].ident(), Some("c"));
    }
}

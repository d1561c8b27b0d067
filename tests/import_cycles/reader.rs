//! The reader of Rust source: comments and literals blanked out, paths
//! collected and resolved in the module tree found on disk.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module by its path from the crate root (`[]` is the root).
pub(crate) type ModPath = Vec<String>;

/// One reference, where it is written.
#[derive(Clone, Debug)]
pub(crate) struct Reference {
    pub(crate) from: ModPath,
    pub(crate) path: Vec<String>,
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
}

/// What the reader found in one crate.
#[derive(Default)]
pub(crate) struct Crate {
    pub(crate) modules: BTreeSet<ModPath>,
    pub(crate) references: Vec<Reference>,
    /// `pub use` names: (module, name) → the path it stands for, as written
    /// in that module.
    pub(crate) reexports: HashMap<(ModPath, String), Vec<String>>,
}

/// Replaces comments, string, byte-string and char literals with spaces
/// (newlines kept, so lines still count right).
pub(crate) fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if (at(0) == 'r' || (at(0) == 'b' && at(1) == 'r')) && !prev_is_ident(&c, i) && {
            let s = if at(0) == 'b' { 2 } else { 1 };
            let mut k = s;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"'
        } {
            // A raw string: r"…", r#"…"#, br"…".
            let s = if at(0) == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(s + hashes) == '#' {
                hashes += 1;
            }
            for _ in 0..s + hashes + 1 {
                out.push(' ');
            }
            i += s + hashes + 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|h| c.get(i + h) == Some(&'#')) {
                    for _ in 0..hashes + 1 {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if at(0) == '"' || (at(0) == 'b' && at(1) == '"' && !prev_is_ident(&c, i)) {
            if at(0) == 'b' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
            while i < c.len() {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                    if i < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                } else if c[i] == '"' {
                    out.push(' ');
                    i += 1;
                    break;
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if at(0) == '\'' {
            // A char literal ('a', '\n', '\u{1F600}', '\''), else a lifetime.
            let end = if at(1) == '\\' {
                (i + 2..c.len().min(i + 12)).find(|&k| c[k] == '\'')
            } else if at(2) == '\'' {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

pub(crate) fn prev_is_ident(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

pub(crate) fn tokens(stripped: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = stripped.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphabetic() || ch == '_' || ch == '$' {
            let s = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let mut word: String = c[s..i].iter().collect();
            // `$crate` in a macro is this crate; raw identifiers are names.
            if word == "$crate" {
                word = "crate".into();
            }
            if let Some(w) = word.strip_prefix("r#") {
                word = w.to_string();
            }
            out.push((Tok::Ident(word), line));
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                i += 1;
            }
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((
                match ch {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    ';' => Tok::Semi,
                    '*' => Tok::Star,
                    other => Tok::Other(other),
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

/// The leaves of a `use` tree starting at `toks[*i]` (after `use`), each as
/// its path and the name it is bound to (`None` for a glob).
pub(crate) fn use_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    while *i < toks.len() {
        match &toks[*i].0 {
            Tok::PathSep => *i += 1,
            Tok::Ident(w) if w == "as" => {
                *i += 1;
                if let Some((Tok::Ident(alias), _)) = toks.get(*i) {
                    *i += 1;
                    let alias = (alias != "_").then(|| alias.clone());
                    out.push((path, alias));
                }
                return;
            }
            Tok::Ident(w) => {
                path.push(w.clone());
                *i += 1;
            }
            Tok::Star => {
                *i += 1;
                out.push((path, None));
                return;
            }
            Tok::Open => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        Some(Tok::Close) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Comma) => *i += 1,
                        None => return,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => break,
        }
    }
    if path.last().map(String::as_str) == Some("self") {
        path.pop();
    }
    let name = path.last().cloned();
    if !path.is_empty() {
        out.push((path, name));
    }
}

/// The module a source file is, from its place under `src/`.
pub(crate) fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

pub(crate) fn read_crate(src: &Path) -> Crate {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f != &src.join("main.rs"));
    let mut krate = Crate::default();
    krate.modules.insert(Vec::new());
    for file in &files {
        let module = module_of(src, file);
        for k in 1..=module.len() {
            krate.modules.insert(module[..k].to_vec());
        }
    }
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        read_file(&mut krate, file, module_of(src, file), &strip(&text));
    }
    krate
}

pub(crate) fn read_file(krate: &mut Crate, file: &Path, module: ModPath, stripped: &str) {
    let toks = tokens(stripped);
    // The inline modules open here: (module, brace depth its body started at).
    let mut scopes: Vec<(ModPath, usize)> = vec![(module, 0)];
    let mut depth = 0;
    let mut i = 0;
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(w), _)) => Some(w.as_str()),
        _ => None,
    };
    while i < toks.len() {
        let here = scopes.last().expect("a scope").0.clone();
        let line = toks[i].1;
        match &toks[i].0 {
            Tok::Open => {
                depth += 1;
                i += 1;
            }
            Tok::Close => {
                if scopes.len() > 1 && scopes.last().expect("a scope").1 == depth {
                    scopes.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Ident(w) if w == "mod" && toks.get(i + 2).map(|t| &t.0) == Some(&Tok::Open) => {
                let name = ident(i + 1).expect("a module name").to_string();
                let mut inner = here.clone();
                inner.push(name);
                krate.modules.insert(inner.clone());
                depth += 1;
                scopes.push((inner, depth));
                i += 3;
            }
            Tok::Ident(w)
                if w == "use" && i.checked_sub(1).is_none_or(|p| toks[p].0 != Tok::PathSep) =>
            {
                // `pub use` / `pub(crate) use` re-export what they name.
                let public = (1..=4).any(|back| {
                    i.checked_sub(back)
                        .and_then(|p| match &toks[p].0 {
                            Tok::Ident(w) => Some(w == "pub"),
                            _ => None,
                        })
                        .unwrap_or(false)
                });
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                for (path, name) in leaves {
                    if public && let Some(name) = name {
                        krate.reexports.insert((here.clone(), name), path.clone());
                    }
                    krate.references.push(Reference {
                        from: here.clone(),
                        path,
                        file: file.to_path_buf(),
                        line,
                    });
                }
            }
            Tok::Ident(first) if toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) => {
                // An inline path `a::b::c` (not the tail of a longer one).
                let preceded = i.checked_sub(1).is_some_and(|p| toks[p].0 == Tok::PathSep);
                let mut path = vec![first.clone()];
                let mut k = i + 1;
                while toks.get(k).map(|t| &t.0) == Some(&Tok::PathSep) {
                    match ident(k + 1) {
                        Some(w) => path.push(w.to_string()),
                        None => break,
                    }
                    k += 2;
                }
                if !preceded {
                    krate.references.push(Reference {
                        from: here.clone(),
                        path,
                        file: file.to_path_buf(),
                        line,
                    });
                }
                i = k;
            }
            _ => i += 1,
        }
    }
}

impl Crate {
    /// The module a path written in `from` leads to (the deepest one it
    /// names), or `None` when it leaves the crate (std, a dependency, a type).
    pub(crate) fn resolve(&self, from: &[String], path: &[String], hops: usize) -> Option<ModPath> {
        let mut segs = path.iter().map(String::as_str).peekable();
        let mut at: ModPath = match *segs.peek()? {
            "crate" => {
                segs.next();
                Vec::new()
            }
            "self" => {
                segs.next();
                from.to_vec()
            }
            "super" => {
                let mut m = from.to_vec();
                while segs.peek() == Some(&"super") {
                    segs.next();
                    m.pop()?;
                }
                m
            }
            first => {
                let mut child = from.to_vec();
                child.push(first.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
                segs.next();
                child
            }
        };
        while let Some(seg) = segs.next() {
            let mut child = at.clone();
            child.push(seg.to_string());
            if self.modules.contains(&child) {
                at = child;
                continue;
            }
            if hops < 8
                && let Some(target) = self.reexports.get(&(at.clone(), seg.to_string()))
            {
                let rest: Vec<String> = segs.map(str::to_string).collect();
                let mut full = target.clone();
                full.extend(rest);
                return self.resolve(&at, &full, hops + 1).or(Some(at));
            }
            break;
        }
        Some(at)
    }
}

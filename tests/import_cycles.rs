//! No import cycle in `src/`: at every level of the module tree, the modules
//! with the same parent (each standing for its whole subtree) must reference
//! each other without a cycle, so each can be read, tested and changed
//! knowing only what it depends on.
//!
//! A small reader of Rust source, not a compiler: comments and literals are
//! blanked out, then every path is collected (`use` trees with nested braces,
//! inline `crate::a::b`, `super::`, `self::`, a child module by its name) and
//! resolved in the module tree found on disk (inline `mod x { … }` blocks
//! included), following `pub use` re-exports. Test modules count as part of
//! their module: a test that needs a sibling's internals is a dependency too.
//! `src/main.rs` is the binary, a crate of its own, and is left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module by its path from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One reference, where it is written.
#[derive(Clone, Debug)]
struct Reference {
    from: ModPath,
    path: Vec<String>,
    file: PathBuf,
    line: usize,
}

/// What the reader found in one crate.
#[derive(Default)]
struct Crate {
    modules: BTreeSet<ModPath>,
    references: Vec<Reference>,
    /// `pub use` names: (module, name) → the path it stands for, as written
    /// in that module.
    reexports: HashMap<(ModPath, String), Vec<String>>,
}

/// Replaces comments, string, byte-string and char literals with spaces
/// (newlines kept, so lines still count right).
fn strip(src: &str) -> String {
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

fn prev_is_ident(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

fn tokens(stripped: &str) -> Vec<(Tok, usize)> {
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
fn use_tree(
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
fn module_of(src: &Path, file: &Path) -> ModPath {
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

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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

fn read_crate(src: &Path) -> Crate {
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

fn read_file(krate: &mut Crate, file: &Path, module: ModPath, stripped: &str) {
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
    fn resolve(&self, from: &[String], path: &[String], hops: usize) -> Option<ModPath> {
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

/// One reference that makes `from` depend on `to`, two modules of one parent.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    file: PathBuf,
    line: usize,
    written: String,
}

/// The cycles found, one per strongly connected set of siblings, each as
/// the parent module and the edges around it (with where each is written).
fn cycles(krate: &Crate) -> Vec<(ModPath, Vec<Edge>, Vec<Edge>)> {
    // parent → (from child → to child → first reference)
    let mut graphs: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, Edge>>> = BTreeMap::new();
    for r in &krate.references {
        let Some(to) = krate.resolve(&r.from, &r.path, 0) else {
            continue;
        };
        let common = r.from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        let (Some(a), Some(b)) = (r.from.get(common), to.get(common)) else {
            continue; // the same module, or one inside the other
        };
        graphs
            .entry(r.from[..common].to_vec())
            .or_default()
            .entry(a.clone())
            .or_default()
            .entry(b.clone())
            .or_insert_with(|| Edge {
                from: a.clone(),
                to: b.clone(),
                file: r.file.clone(),
                line: r.line,
                written: r.path.join("::"),
            });
    }
    let mut found = Vec::new();
    for (parent, graph) in &graphs {
        for scc in strongly_connected(graph) {
            if scc.len() > 1 {
                let cycle = cycle_within(graph, &scc);
                // The other references among the same modules: each is part
                // of a cycle too, and must go for the set to come apart.
                let others = scc
                    .iter()
                    .flat_map(|v| graph.get(v).into_iter().flat_map(|m| m.values()))
                    .filter(|e| scc.contains(&e.to))
                    .filter(|e| !cycle.iter().any(|c| c.from == e.from && c.to == e.to))
                    .cloned()
                    .collect();
                found.push((parent.clone(), cycle, others));
            }
        }
    }
    found
}

/// Tarjan's algorithm over the sibling graph.
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, Edge>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, Edge>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let mut s = State {
        graph,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One cycle through the first member of `scc` (breadth-first, shortest).
fn cycle_within(graph: &BTreeMap<String, BTreeMap<String, Edge>>, scc: &[String]) -> Vec<Edge> {
    let mut members: Vec<&String> = scc.iter().collect();
    members.sort();
    let start = members[0].clone();
    let mut came_from: HashMap<String, Edge> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for (w, e) in graph.get(&v).into_iter().flatten() {
            if !scc.contains(w) || came_from.contains_key(w) {
                continue;
            }
            came_from.insert(w.clone(), e.clone());
            if *w == start {
                let mut path = vec![e.clone()];
                let mut at = v.clone();
                while at != start {
                    let e = &came_from[&at];
                    path.push(e.clone());
                    at = e.from.clone();
                }
                path.reverse();
                return path;
            }
            queue.push_back(w.clone());
        }
    }
    unreachable!("a strongly connected set of more than one has a cycle")
}

fn describe(found: &[(ModPath, Vec<Edge>, Vec<Edge>)], root: &Path) -> String {
    let mut msg = String::new();
    let line = |msg: &mut String, e: &Edge| {
        let file = e.file.strip_prefix(root).unwrap_or(&e.file);
        msg.push_str(&format!(
            "  {} -> {}  ({}:{}: {})\n",
            e.from,
            e.to,
            file.display(),
            e.line,
            e.written
        ));
    };
    for (parent, edges, others) in found {
        let parent = if parent.is_empty() {
            "crate".to_string()
        } else {
            format!("crate::{}", parent.join("::"))
        };
        msg.push_str(&format!("import cycle among the modules of {parent}:\n"));
        for e in edges {
            line(&mut msg, e);
        }
        if !others.is_empty() {
            msg.push_str(" other references among the same modules:\n");
            for e in others {
                line(&mut msg, e);
            }
        }
    }
    msg
}

#[test]
fn src_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = read_crate(&root.join("src"));
    let found = cycles(&krate);
    assert!(found.is_empty(), "{}", describe(&found, root));
}

/// The stages' contract is a leaf: it may use the object model, the
/// bounds of names and JSON lookups, nothing of a stage (nor of metrics,
/// which stages use).
#[test]
fn the_pipeline_depends_on_no_stage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = read_crate(&root.join("src"));
    let allowed = ["pipeline", "model", "bounds", "json"];
    let outside: Vec<String> = krate
        .references
        .iter()
        .filter(|r| r.from.first().map(String::as_str) == Some("pipeline"))
        .filter_map(|r| {
            let to = krate.resolve(&r.from, &r.path, 0)?;
            let top = to.first()?;
            (!allowed.contains(&top.as_str())).then(|| {
                format!(
                    "{}:{}: {}",
                    r.file.strip_prefix(root).unwrap_or(&r.file).display(),
                    r.line,
                    r.path.join("::")
                )
            })
        })
        .collect();
    assert!(outside.is_empty(), "pipeline uses {outside:#?}");
}

/// Writes a small crate under a temporary `src/` and returns its cycles.
type Found = Vec<(ModPath, Vec<Edge>, Vec<Edge>)>;

fn cycles_of(files: &[(&str, &str)]) -> (Found, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    for (name, text) in files {
        let path = src.join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    }
    let found = cycles(&read_crate(&src));
    let msg = describe(&found, dir.path());
    (found, msg)
}

#[test]
fn a_planted_cycle_is_found_with_where_each_edge_is_written() {
    let (found, msg) = cycles_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::b::Thing;\n"),
        (
            "b/mod.rs",
            "pub mod inner;\npub struct Thing;\npub fn f() { let _ = 1; }\n",
        ),
        // The edge back is deep in b's subtree, in an inline path.
        (
            "b/inner.rs",
            "// crate::c is only named in this comment\nfn g() {\n    super::super::c::h();\n}\n",
        ),
        ("c.rs", "pub fn h() {}\nuse crate::{b, a::{self}};\n"),
    ]);
    assert_eq!(found.len(), 1, "{msg}");
    assert!(found[0].0.is_empty(), "{msg}");
    // a → b → c → a, each with its file and line.
    assert!(
        msg.contains("a -> b  (src/a.rs:1: crate::b::Thing)"),
        "{msg}"
    );
    assert!(
        msg.contains("b -> c  (src/b/inner.rs:3: super::super::c::h)"),
        "{msg}"
    );
    assert!(msg.contains("c -> a  (src/c.rs:2: crate::a)"), "{msg}");
}

#[test]
fn comments_strings_and_chains_without_a_cycle_pass() {
    let (found, msg) = cycles_of(&[
        (
            "lib.rs",
            "pub mod a;\npub mod b;\nmod tests {\n    use super::a::*;\n}\n",
        ),
        (
            "a.rs",
            "use crate::b;\n/* crate::b is fine, but /* nested */ crate::a::x */\npub fn x() { b::y(); }\n",
        ),
        (
            "b.rs",
            "pub fn y() {\n    let _ = \"crate::a::x\";\n    let _ = r#\"crate::a\"#;\n    let _ = 'a';\n}\n\
             fn z<'a>(s: &'a str) -> &'a str { s }\n",
        ),
    ]);
    assert!(found.is_empty(), "{msg}");
}

#[test]
fn reexports_and_child_names_count_as_the_module_they_name() {
    // `b` names `a::Processor` through the parent's `pub use`, and `a`
    // names `b` by its child name from the parent file's inline module.
    let (found, msg) = cycles_of(&[
        ("lib.rs", "pub mod p;\n"),
        (
            "p/mod.rs",
            "pub mod a;\npub mod b;\npub use a::Processor;\n",
        ),
        (
            "p/a.rs",
            "pub struct Processor;\nfn f() { super::b::g(); }\n",
        ),
        ("p/b.rs", "use super::Processor;\npub fn g() {}\n"),
    ]);
    assert_eq!(found.len(), 1, "{msg}");
    assert_eq!(found[0].0, vec!["p".to_string()], "{msg}");
    assert!(
        msg.contains("b -> a  (src/p/b.rs:1: super::Processor)"),
        "{msg}"
    );
}

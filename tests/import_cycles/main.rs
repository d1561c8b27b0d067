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

mod graph;
mod reader;

use std::path::Path;

use graph::*;
use reader::*;

#[test]
fn src_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = read_crate(&root.join("src"));
    let found = cycles(&krate);
    assert!(found.is_empty(), "{}", describe(&found, root));
}

/// The stages' contract is a leaf: it may use the object model, the
/// bounds of names, how messages are written and JSON lookups, nothing of a
/// stage (nor of metrics, which stages use).
#[test]
fn the_flow_between_stages_depends_on_no_stage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = read_crate(&root.join("src"));
    let allowed = ["flow", "model", "bounds", "messages", "json"];
    let outside: Vec<String> = krate
        .references
        .iter()
        .filter(|r| r.from.first().map(String::as_str) == Some("flow"))
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
    assert!(outside.is_empty(), "flow uses {outside:#?}");
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

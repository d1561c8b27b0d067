//! ARCHITECTURE.md stays true: every path it names exists, every top-level
//! module of `src/` is in its table, its links resolve, and it stays one
//! page (the details live in docs/internals.md); and no Rust file of the
//! repository outgrows one job (600 lines).

use std::path::{Path, PathBuf};

const ROOTS: [&str; 12] = [
    "src/",
    "tests/",
    "e2e/",
    "docs/",
    "rules/",
    "cpid/",
    "fuzz/",
    "benches/",
    "proto/",
    "deploy/",
    "examples/",
    ".ci/",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// Every token of `text` that starts with one of the repository's top
/// directories: a path as the page names it (a trailing `/` is a folder).
fn named_paths(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`(),;:|".contains(c))
        .filter(|t| ROOTS.iter().any(|r| t.starts_with(r)))
        .map(|t| t.trim_end_matches(['.', '*']).to_string())
        .collect()
}

#[test]
fn every_path_the_architecture_names_exists() {
    let text = architecture();
    let paths = named_paths(&text);
    assert!(paths.len() > 40, "{paths:?}");
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| {
            let path = root().join(p);
            if p.ends_with('/') {
                !path.is_dir()
            } else {
                !path.exists()
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
    // And its links.
    for link in text.split("](").skip(1) {
        let target = link.split(')').next().unwrap().split('#').next().unwrap();
        if !target.starts_with("http") {
            assert!(root().join(target).exists(), "a link to {target}");
        }
    }
}

#[test]
fn every_top_level_module_is_on_the_map() {
    let text = architecture();
    let named = named_paths(&text);
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("src")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let as_named = if path.is_dir() {
            format!("src/{name}/")
        } else {
            format!("src/{name}")
        };
        if !named.contains(&as_named) {
            missing.push(as_named);
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "modules ARCHITECTURE.md does not name: {missing:?}"
    );
}

#[test]
fn the_architecture_is_one_page() {
    let lines = architecture().lines().count();
    assert!(
        lines <= 120,
        "ARCHITECTURE.md has {lines} lines: keep it a one-page map, details in docs/internals.md"
    );
    assert!(Path::new(&root().join("docs/internals.md")).exists());
}

/// Rust files of the repository (build output left out).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// A file does one job that a reader can hold in mind: none, tests
/// included, is longer than 600 lines (split by job or topic, as
/// docs/testing.md says for test programs).
#[test]
fn no_rust_file_is_longer_than_600_lines() {
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 100, "found only {} Rust files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > 600).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "longer than 600 lines: {long:?}");
}

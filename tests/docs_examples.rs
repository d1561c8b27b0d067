//! Every fenced code block of README.md and docs/*.md is run or checked
//! here, so an example that stops working fails the unit stage.
//!
//! A block's info string is its language, then the markers that say what
//! the block needs. How each block is treated:
//!
//! | info string | what this test does |
//! |---|---|
//! | `sh` | run by bash (`-e -o pipefail`) in a scratch directory holding links to the repository's `e2e/`, `examples/`, `rules/` and `deploy/`, with the built `kascade` first on `PATH` (`cargo run --release --` is read as `kascade`); every command must be `kascade`; it must exit 0 |
//! | `sh exit=N` | the same, and it must exit with N |
//! | `sh synopsis` | a usage line with placeholders: every `--flag` in it must be in `kascade <subcommand> --help` |
//! | `yaml` | a rule file: `kascade rules check` must accept it |
//! | `console` | a transcript: each `$ ` line is run as a `sh` block's command (it must exit 0, or N with `exit=N`), and every other line that elides nothing (no `…` or `⋮`) must be a line of what the commands printed |
//! | `text output`, `text diagram` | what a command prints, or a picture: not run |
//! | `… cluster` | needs a live cluster, a running collector, frontend or Jaeger, a CI runner or the network |
//! | `… docker`, `… helm` | needs a Docker engine, or Helm and a cluster |
//! | `… harness` | runs the e2e harness, a benchmark script or `make test` (minutes of builds) |
//! | `… install` | installs or builds kascade |
//! | `… fragment` | part of a larger program |
//!
//! A block marked with one of the last five is not run, but still checked
//! as far as it can be without its surroundings: shell is parsed
//! (`bash -n`), YAML is loaded. A block with no info string, an unknown
//! marker, or a language this table does not name fails the test, so no
//! block is skipped silently.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// How long one block may run: far beyond what an offline command on a
/// bundled log takes, so only a block that never ends reaches it.
const RUN_LIMIT: &str = "120";

/// Markers of blocks that cannot run here, with what each needs.
const NOT_RUN: &[&str] = &[
    "cluster", "docker", "helm", "harness", "install", "fragment",
];

/// One fenced code block.
struct Block {
    file: String,
    /// Line of the opening fence (1-based).
    line: usize,
    language: String,
    markers: Vec<String>,
    body: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    fn has(&self, marker: &str) -> bool {
        self.markers.iter().any(|m| m == marker)
    }

    fn expected_exit(&self) -> Result<i32, String> {
        let mut exit = 0;
        for m in &self.markers {
            if let Some(n) = m.strip_prefix("exit=") {
                exit = n
                    .parse()
                    .map_err(|_| format!("{}: `{m}` is not an exit code", self.at()))?;
            }
        }
        Ok(exit)
    }
}

/// The fenced blocks of one Markdown file (fences may be indented, as in
/// a list item; the indent is taken off the body).
fn blocks_of(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = path
        .strip_prefix(ROOT)
        .unwrap_or(path)
        .display()
        .to_string();
    let mut blocks = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let mut words = info.split_whitespace().map(str::to_string);
                    let block = Block {
                        file: file.clone(),
                        line: i + 1,
                        language: words.next().unwrap_or_default(),
                        markers: words.collect(),
                        body: String::new(),
                    };
                    open = Some((block, indent));
                }
            }
            Some((mut block, fence_indent)) => {
                if trimmed.trim_end() == "```" {
                    blocks.push(block);
                } else {
                    let cut = fence_indent.min(indent);
                    block.body.push_str(&line[cut..]);
                    block.body.push('\n');
                    open = Some((block, fence_indent));
                }
            }
        }
    }
    if let Some((block, _)) = open {
        panic!("{}: a code block is never closed", block.at());
    }
    blocks
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A scratch directory where examples run: the repository's inputs are
/// reachable by the paths the examples use, and what they write stays
/// out of the work tree.
struct Scratch {
    dir: tempfile::TempDir,
    path_var: String,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        for linked in ["e2e", "examples", "rules", "deploy"] {
            std::os::unix::fs::symlink(Path::new(ROOT).join(linked), dir.path().join(linked))
                .unwrap();
        }
        let bin = dir.path().join(".bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kascade"), bin.join("kascade")).unwrap();
        let path_var = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Scratch { dir, path_var }
    }

    /// Runs bash on a script; a command that never ends (a server an
    /// unmarked block starts) is stopped after `RUN_LIMIT` and exits 124.
    fn bash(&self, args: &[&str], script: &str) -> std::process::Output {
        Command::new("timeout")
            .args(["--kill-after=5", RUN_LIMIT, "bash"])
            .args(args)
            .arg(script)
            .current_dir(self.dir.path())
            .env("PATH", &self.path_var)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }
}

/// The commands of a shell block: continuation lines joined, comments and
/// blank lines left out.
fn commands(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// The program a command runs, past `NAME=value` assignments.
fn program(command: &str) -> &str {
    command
        .split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with('-'))
        .unwrap_or("")
}

fn help_of(subcommand: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kascade"))
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "kascade {subcommand:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// Checks one block; `Ok(true)` when it ran, `Ok(false)` when it was only
/// checked because its markers say it cannot run here.
fn check(block: &Block, scratch: &Scratch) -> Result<bool, String> {
    for m in &block.markers {
        let known = NOT_RUN.contains(&m.as_str())
            || m == "synopsis"
            || m == "output"
            || m == "diagram"
            || m.starts_with("exit=");
        if !known {
            return Err(format!(
                "{}: unknown marker `{m}` (see tests/docs_examples.rs)",
                block.at()
            ));
        }
    }
    let not_run = block.markers.iter().any(|m| NOT_RUN.contains(&m.as_str()));
    match block.language.as_str() {
        "" => Err(format!(
            "{}: a code block without an info string: name its language and, if it cannot run here, why (see tests/docs_examples.rs)",
            block.at()
        )),
        "text" if block.has("output") || block.has("diagram") => Ok(false),
        "console" if !not_run => {
            check_transcript(block, scratch)?;
            Ok(true)
        }
        "sh" if block.has("synopsis") => {
            check_synopsis(block)?;
            Ok(false)
        }
        "sh" if not_run => {
            let out = scratch.bash(&["-n", "-c"], &block.body);
            if !out.status.success() {
                return Err(format!(
                    "{}: not valid shell: {}",
                    block.at(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(false)
        }
        "sh" => {
            let script = block.body.replace("cargo run --release -- ", "kascade ");
            for command in commands(&script) {
                if program(&command) != "kascade" {
                    return Err(format!(
                        "{}: `{command}` runs `{}`, which this test cannot run: mark the block cluster, docker, helm, harness or install",
                        block.at(),
                        program(&command)
                    ));
                }
            }
            let expected = block.expected_exit()?;
            let out = scratch.bash(&["-e", "-o", "pipefail", "-c"], &script);
            if out.status.code() == Some(124) {
                return Err(format!(
                    "{}: still running after {RUN_LIMIT} s (it starts a server?): mark it cluster",
                    block.at()
                ));
            }
            if out.status.code() != Some(expected) {
                return Err(format!(
                    "{}: exited with {:?}, the doc implies {expected}\n--- script\n{script}--- stderr\n{}",
                    block.at(),
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(true)
        }
        "yaml" if not_run => {
            serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&block.body)
                .map_err(|e| format!("{}: not valid YAML: {e}", block.at()))?;
            Ok(false)
        }
        "yaml" => {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("example.yaml"), &block.body).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_kascade"))
                .args(["rules", "check"])
                .arg(dir.path())
                .output()
                .unwrap();
            if !out.status.success() {
                return Err(format!(
                    "{}: `kascade rules check` refuses this rule file: {}{}",
                    block.at(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(true)
        }
        _ if not_run => Ok(false),
        other => Err(format!(
            "{}: a `{other}` block this test cannot run: mark it (see tests/docs_examples.rs)",
            block.at()
        )),
    }
}

/// Runs a transcript's commands and finds its printed lines in their output.
fn check_transcript(block: &Block, scratch: &Scratch) -> Result<(), String> {
    let mut printed = String::new();
    let mut expected = Vec::new();
    for line in block.body.lines() {
        match line.strip_prefix("$ ") {
            Some(command) => {
                if program(command) != "kascade" {
                    return Err(format!(
                        "{}: `{command}` runs `{}`, which this test cannot run: mark the block",
                        block.at(),
                        program(command)
                    ));
                }
                let out = scratch.bash(&["-e", "-o", "pipefail", "-c"], command);
                let expected = block.expected_exit()?;
                if out.status.code() != Some(expected) {
                    return Err(format!(
                        "{}: `{command}` exited with {:?}, the doc implies {expected}: {}",
                        block.at(),
                        out.status.code(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                printed.push_str(&String::from_utf8_lossy(&out.stdout));
            }
            None if !line.trim().is_empty() && !line.contains(['…', '⋮']) => {
                expected.push(line)
            }
            None => {}
        }
    }
    for line in expected {
        if !printed.lines().any(|p| p.trim_end() == line.trim_end()) {
            return Err(format!(
                "{}: the transcript shows {line:?}, which its command no longer prints\n--- printed\n{printed}",
                block.at()
            ));
        }
    }
    Ok(())
}

/// Every `--flag` of a usage line must be one its subcommand's help lists.
fn check_synopsis(block: &Block) -> Result<(), String> {
    let text = block.body.replace('\\', " ");
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.first() != Some(&"kascade") || words.len() < 2 {
        return Err(format!(
            "{}: a synopsis starts with `kascade <subcommand>`",
            block.at()
        ));
    }
    let help = help_of(&[words[1]]);
    let flag = regex::Regex::new(r"--[a-z0-9-]+").unwrap();
    for f in flag.find_iter(&text) {
        let listed = help.lines().any(|l| {
            l.trim_start()
                .split([',', ' ', '='])
                .any(|w| w == f.as_str())
        });
        if !listed {
            return Err(format!(
                "{}: `kascade {} --help` has no {}",
                block.at(),
                words[1],
                f.as_str()
            ));
        }
    }
    Ok(())
}

#[test]
fn every_example_in_readme_and_docs_runs_or_is_marked_with_what_it_needs() {
    let scratch = Scratch::new();
    let mut problems = Vec::new();
    let (mut ran, mut checked) = (0, 0);
    for file in documents() {
        for block in blocks_of(&file) {
            match check(&block, &scratch) {
                Ok(true) => ran += 1,
                Ok(false) => checked += 1,
                Err(e) => problems.push(e),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    // The bundled-log tour of README alone runs more than this: fewer means
    // the blocks are no longer found.
    assert!(ran >= 8, "only {ran} examples ran ({checked} checked)");
}

#[test]
fn a_rule_example_with_an_unknown_field_is_refused() {
    // The check above is only worth something if `rules check` refuses a
    // wrong example, as the README's once did with `fieldPath:`.
    let scratch = Scratch::new();
    let block = Block {
        file: "example.md".into(),
        line: 1,
        language: "yaml".into(),
        markers: vec![],
        body: "rules:\n- name: pod-node\n  class: node\n  match: {group: \"\", resource: pods}\n  role: child\n  target: {fieldPath: spec.nodeName, resource: nodes, namespaced: false}\n".into(),
    };
    let err = check(&block, &scratch).unwrap_err();
    assert!(
        err.contains("example.md:1") && err.contains("fieldPath"),
        "{err}"
    );
}

#[test]
fn a_shell_example_running_another_program_must_be_marked() {
    let scratch = Scratch::new();
    let block = Block {
        file: "example.md".into(),
        line: 3,
        language: "sh".into(),
        markers: vec![],
        body: "kubectl get pods\n".into(),
    };
    let err = check(&block, &scratch).unwrap_err();
    assert!(
        err.contains("example.md:3") && err.contains("`kubectl`"),
        "{err}"
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors_of(markdown: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(markdown).unwrap_or_default();
    let mut in_block = false;
    let mut anchors = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            anchors.push(anchor_of(line.trim_start_matches('#')));
        }
    }
    anchors
}

#[test]
fn every_relative_link_in_readme_and_docs_leads_to_a_file_and_heading() {
    // Guides moved out of README: a link left pointing at a section that
    // moved would lead nowhere.
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut problems = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let at = file.strip_prefix(ROOT).unwrap().display().to_string();
        for (i, line) in text.lines().enumerate() {
            for c in link.captures_iter(line) {
                let target = &c[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !resolved.exists() {
                    problems.push(format!("{at}:{}: {target}: no such file", i + 1));
                    continue;
                }
                let markdown = resolved.extension().is_some_and(|e| e == "md");
                if !anchor.is_empty()
                    && markdown
                    && !anchors_of(&resolved).iter().any(|a| a == anchor)
                {
                    problems.push(format!("{at}:{}: {target}: no such heading", i + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

//! The `kascade` binary as a user runs it: replay to OTLP/JSON, bad lines,
//! `--strict`, and `rules check`.

#[path = "../common/mod.rs"]
mod common;

use common::{kascade, succeeded_text};

/// (trace id, span id) of every span in an OTLP/JSON output file.
fn span_ids(out: &std::path::Path) -> std::collections::BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(out).unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for line in text.lines() {
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    ids.insert((
                        s["traceId"].as_str().unwrap().to_string(),
                        s["spanId"].as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    ids
}

/// The flag reference README links to: every subcommand's flag tables.
const CONFIGURATION_REFERENCE: &str = "docs/configuration.md";

fn configuration_reference() -> String {
    let path = format!("{}/{CONFIGURATION_REFERENCE}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A flag's row in one of the configuration reference's tables.
struct ReadmeRow {
    /// The cell of the default, as written (`\|` unescaped).
    default: String,
    line: usize,
}

/// The flag tables of the configuration reference, by the subcommands
/// each applies to ("" for the global flags), read from the caption above
/// each table.
fn configuration_flag_tables()
-> std::collections::HashMap<String, std::collections::HashMap<String, ReadmeRow>> {
    let section = configuration_reference();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains(&format!("]({CONFIGURATION_REFERENCE}")),
        "README.md does not link the configuration reference {CONFIGURATION_REFERENCE}"
    );
    let first_line = 1;
    let flag = regex::Regex::new(r"`(--[a-z0-9-]+)`").unwrap();
    let mut tables: std::collections::HashMap<
        String,
        std::collections::HashMap<String, ReadmeRow>,
    > = Default::default();
    let mut caption = String::new();
    for (i, line) in section.lines().enumerate() {
        if !line.starts_with('|') {
            if !line.trim().is_empty() {
                caption = line.to_string();
            }
            continue;
        }
        // Cells split on `|` not escaped as `\|` (inside code spans).
        let cells: Vec<String> = line
            .replace("\\|", "\u{0}")
            .split('|')
            .map(|c| c.trim().replace('\u{0}', "|"))
            .collect();
        let Some(first) = cells.get(1) else { continue };
        if !first.starts_with("`--") {
            continue;
        }
        let subcommands: Vec<&str> = if caption.starts_with("Global") {
            vec![""]
        } else {
            [
                "collect",
                "replay",
                "frontend",
                "trace",
                "analyze",
                "explain",
                "cpid-webhook",
                "doctor",
                "rules check",
                "rules list",
                "man",
            ]
            .into_iter()
            .filter(|s| {
                caption.contains(&format!("`{s}`")) || caption.contains(&format!("`kascade {s}"))
            })
            .collect()
        };
        assert!(
            !subcommands.is_empty(),
            "{CONFIGURATION_REFERENCE}:{}: the caption {caption:?} above this table names no subcommand",
            first_line + i
        );
        for f in flag.captures_iter(first) {
            for s in &subcommands {
                tables.entry(s.to_string()).or_default().insert(
                    f[1].to_string(),
                    ReadmeRow {
                        default: cells[2].clone(),
                        line: first_line + i,
                    },
                );
            }
        }
    }
    tables
}

/// The flags of `kascade <sub> --help` with the default each shows (clap's
/// `[default: …]`, or one written in the flag's description).
fn help_flags(sub: &[&str]) -> Vec<(String, Option<String>)> {
    let out = common::succeeded(kascade().args(sub).arg("--help"));
    let help = String::from_utf8(out.stdout).unwrap();
    let flag = regex::Regex::new(r"^\s+(?:-\w, )?(--[a-z0-9-]+)").unwrap();
    let inline_default = regex::Regex::new(r"\[default: ([^\]]+)\]").unwrap();
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        if let Some(c) = flag.captures(line) {
            // Short help: the description and default on the flag's line.
            let default = inline_default.captures(line).map(|d| d[1].to_string());
            flags.push((c[1].to_string(), default));
            continue;
        }
        let Some((_, default)) = flags.last_mut() else {
            continue;
        };
        if default.is_some() {
            continue;
        }
        // clap's own line holds the whole value (which may contain `]`).
        let t = line.trim();
        if let Some(v) = t
            .strip_prefix("[default: ")
            .and_then(|v| v.strip_suffix(']'))
        {
            *default = Some(v.to_string());
        } else if let Some(c) = inline_default.captures(t) {
            *default = Some(c[1].to_string());
        }
    }
    flags
}

/// Whether the reference's default cell states `default`: as a code span (a list
/// comma-separated, as typed, where clap shows it space-separated), or in
/// words when the default is described rather than a value.
fn states_default(cell: &str, default: &str) -> bool {
    let spans = regex::Regex::new(r"`([^`]*)`").unwrap();
    spans
        .captures_iter(cell)
        .any(|c| c[1] == *default || c[1].replace(',', " ") == default)
        || (default.contains(' ') && cell.contains(default))
}

/// `THP_enabled` of a running `kascade collect` started with `env`, read
/// once it has logged its first line (so `main` has run); `None` on a
/// kernel that does not report it.
#[cfg(target_os = "linux")]
fn thp_enabled_of_collect(env: &[(&str, &str)]) -> Option<String> {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = kascade()
        .args([
            "collect",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--output")
        .arg(format!(
            "otlp-json={}",
            dir.path().join("out.json").display()
        ))
        .arg("--no-spool")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!first.is_empty(), "collect logged nothing");
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
}

/// `kascade trace`'s text of the captured deployment fixture (two
/// ReplicaSets of five Pods each, Deployment `hello`) with `args` added.
fn trace_text_of_deployment(args: &[&str]) -> String {
    let out = common::succeeded(
        kascade()
            .arg("trace")
            .arg(common::fixture_path("deployment", "audit.log"))
            .args(["--resource", "deployments", "--namespace", "default"])
            .args(["--name", "hello"])
            .args(args),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The tree's text, changes counted only, with `--max-siblings` given.
fn tree_text_of_deployment(max_siblings: &str) -> String {
    trace_text_of_deployment(&["--max-diff-lines", "0", "--max-siblings", max_siblings])
}

/// The tree's object rows (`pods default/x` → `x`) of `resource`, and the
/// rows standing for the rest of a level, each with the line above it.
fn rows_of<'a>(text: &'a str, resource: &str) -> (Vec<&'a str>, Vec<&'a str>) {
    let row = regex::Regex::new(&format!(r"^[│ ├└─]*{resource} [^/ ]+/(\S+)")).unwrap();
    let objects = text
        .lines()
        .filter_map(|l| row.captures(l).map(|c| c.get(1).unwrap().as_str()))
        .collect();
    let rest = text
        .lines()
        .filter(|l| l.contains(&format!("more {resource}")))
        .collect();
    (objects, rest)
}

/// `kascade trace --mode cascade`'s text of the deployment fixture.
fn cascade_text_of_deployment(max_siblings: &str) -> String {
    trace_text_of_deployment(&["--mode", "cascade", "--max-siblings", max_siblings])
}

/// The redaction markers in `text`, as a set.
fn markers(text: &str) -> std::collections::BTreeSet<String> {
    let marker = regex::Regex::new(r"<redacted:[0-9a-f]{8}>").unwrap();
    marker
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The redaction markers in a replay's OTLP/JSON of the config fixture
/// (its Secrets' writes).
fn replay_markers(key_file: Option<&std::path::Path>) -> std::collections::BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut cmd = kascade();
    cmd.args(["replay", "--cluster", "fx", "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(common::fixture_path("config", "audit.log"));
    if let Some(key) = key_file {
        cmd.arg("--redaction-key-file").arg(key);
    }
    let st = cmd.output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    markers(&std::fs::read_to_string(&out).unwrap())
}

/// The names of `part:` items (`rules`, `propagations`, `timers`) in the
/// shipped rule files, with each file's path as `kascade rules list` names
/// the built-in ones (`rules/NAME.yaml`).
fn shipped_names(part: &str) -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut in_part = false;
        for line in text.lines() {
            if !line.starts_with(' ') && !line.starts_with('#') && line.ends_with(':') {
                in_part = line == format!("{part}:");
            } else if in_part && let Some(name) = line.strip_prefix("  - name: ") {
                let file = path.file_name().unwrap().to_string_lossy();
                out.push((name.trim().to_string(), format!("rules/{file}")));
            }
        }
    }
    out
}

const EXTRA_RULE: &str = "rules:\n  - name: team-dashboard\n    description: a ConfigMap naming its dashboard\n    match: {resource: configmaps}\n    class: dashboard\n    role: child\n    target: {annotation: example.com/dashboard}\n";

/// Every span of a replay's OTLP/JSON, each as its JSON text, sorted.
fn replayed_spans(files: &[&std::path::Path]) -> (Vec<String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let (_, stderr) = succeeded_text(
        kascade()
            .args(["replay", "--cluster", "fx", "--workers", "1", "--output"])
            .arg(format!("otlp-json={}", out.display()))
            .args(files),
    );
    let mut spans = Vec::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    spans.push(s.to_string());
                }
            }
        }
    }
    spans.sort();
    (spans, stderr)
}

mod doctor_replay;
mod flags;
mod inputs;
mod offline;
mod redaction;
mod rules;
mod terminal_trees;

//! The `kascade` binary as a user runs it: replay to OTLP/JSON, bad lines,
//! `--strict`, and `rules check`.

mod common;

use common::{kascade, succeeded_text};

#[test]
fn replay_writes_otlp_json_requests_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let log = common::fixture_path("deployment", "audit.log");
    let st = common::succeeded(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", out.display()))
            .arg(&log),
    );
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(stderr.contains("0 malformed lines skipped"), "{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    let mut spans = 0;
    let mut names = std::collections::HashSet::new();
    for line in text.lines() {
        // Each line is an ExportTraceServiceRequest in OTLP/JSON.
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    spans += 1;
                    assert_eq!(s["traceId"].as_str().unwrap().len(), 32, "hex trace id");
                    names.insert(s["name"].as_str().unwrap().to_string());
                }
            }
        }
    }
    assert!(spans > 100, "{spans}");
    assert!(names.contains("deployments default/hello"), "{names:?}");
    assert!(names.contains("kascade-e2e-admin create"));
}

/// What kascade writes for its user can hold what audit events carry: each
/// output file is owner-only, a file that was there before included.
#[test]
fn output_files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("deployment", "audit.log");
    let (spans, changes, report) = (
        dir.path().join("spans.jsonl"),
        dir.path().join("changes.jsonl"),
        dir.path().join("report.html"),
    );
    std::fs::write(&report, "an older report").unwrap();
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o644)).unwrap();
    succeeded_text(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", spans.display()))
            .arg("--output")
            .arg(format!("changelog={}", changes.display()))
            .arg(&log),
    );
    succeeded_text(
        kascade()
            .arg("explain")
            .arg("--output")
            .arg(format!("html={}", report.display()))
            .arg(&log),
    );
    for file in [spans, changes, report] {
        let meta = std::fs::metadata(&file).unwrap();
        assert!(meta.len() > 0, "{} is empty", file.display());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o600,
            "{}",
            file.display()
        );
    }
}

#[test]
fn bad_lines_are_reported_with_file_and_line_and_skipped_unless_strict() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let lines = common::audit_lines("deployment");
    std::fs::write(
        &log,
        format!("{}\n{{\"truncated\": \n{}\n", lines[0], lines[1]),
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");
    let st = kascade()
        .args(["replay", "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(&log)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:2:", log.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("2 events accepted, 1 malformed lines skipped"),
        "{stderr}"
    );

    let st = kascade()
        .args(["replay", "--strict", "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(&log)
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains(&format!("{}:2:", log.display())));

    let st = kascade()
        .args([
            "replay",
            "/nonexistent/audit.log",
            "--output",
            "otlp-json=/dev/null",
        ])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("/nonexistent/audit.log"));
}

/// An empty audit log, or a file that is no audit log, is refused by name
/// with exit 1 by each offline command that reads audit logs: a wrong path
/// or an empty CI artefact must not read as "no problems found". A good
/// log beside an empty one is read as before.
#[test]
fn an_input_without_audit_events_is_refused_by_every_offline_command() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.log");
    std::fs::write(&empty, "\n\n").unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello\nworld\n").unwrap();
    let good = common::fixture_path("rollout-stuck", "audit.log");
    let out = dir.path().join("out.jsonl");
    let output = format!("otlp-json={}", out.display());
    let trace = [
        "trace",
        "--resource",
        "deployments",
        "--namespace",
        "rollout-demo",
        "--name",
        "web",
    ];
    let commands: [&[&str]; 4] = [
        &["explain"],
        &["analyze"],
        &["replay", "--output", &output],
        &trace,
    ];
    for cmd in commands {
        let run = |files: &[&std::path::Path]| {
            let st = kascade().args(cmd).args(files).output().unwrap();
            (
                st.status.code(),
                String::from_utf8_lossy(&st.stderr).into_owned(),
            )
        };
        let (code, stderr) = run(&[&empty]);
        assert_eq!(code, Some(1), "{cmd:?} empty: {stderr}");
        assert!(
            stderr.contains(&format!(
                "no audit events in {}: the file is empty",
                empty.display()
            )),
            "{cmd:?}: {stderr}"
        );
        let (code, stderr) = run(&[&empty, &notes]);
        assert_eq!(code, Some(1), "{cmd:?} notes: {stderr}");
        assert!(
            stderr.contains(&format!(
                "no audit events in {}, {}: {}:1: ",
                empty.display(),
                notes.display(),
                notes.display()
            )),
            "{cmd:?}: {stderr}"
        );
        let (code, stderr) = run(&[&empty, &good]);
        assert_eq!(code, Some(0), "{cmd:?} with a good log: {stderr}");
        assert!(!stderr.contains("no audit events"), "{cmd:?}: {stderr}");
    }
}

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

#[test]
fn a_line_that_is_not_utf8_is_reported_and_skipped_and_the_rest_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = common::fixture_path("deployment", "audit.log");
    let lines = common::audit_lines("deployment");
    assert!(lines.len() > 100);
    // The real log with one line of binary garbage as line 81.
    let log = dir.path().join("garbage.log");
    let mut bytes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if i == 80 {
            bytes.extend_from_slice(b"{\"kind\":\"Event\",\"auditID\":\"\xff\xfe\xc3\x28\"}\n");
        }
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    std::fs::write(&log, bytes).unwrap();
    let replay = |log: &std::path::Path, out: &std::path::Path, strict: bool| {
        let mut cmd = kascade();
        cmd.args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", out.display()));
        if strict {
            cmd.arg("--strict");
        }
        cmd.arg(log).output().unwrap()
    };
    let clean_out = dir.path().join("clean.jsonl");
    let st = replay(&fixture, &clean_out, false);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );

    let out = dir.path().join("out.jsonl");
    let st = replay(&log, &out, false);
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:81: not UTF-8", log.display())),
        "{stderr}"
    );
    assert!(stderr.contains("1 malformed lines skipped"), "{stderr}");
    // Every event, those after the bad line included, became the same spans.
    assert_eq!(span_ids(&out), span_ids(&clean_out));

    let st = replay(&log, &out, true);
    assert!(!st.status.success());
    assert!(
        String::from_utf8_lossy(&st.stderr).contains(&format!("{}:81: not UTF-8", log.display()))
    );

    // `kascade trace` skips that line too (it refused the whole file), names
    // it, and prints the tree of the log without it.
    let trace = |log: &std::path::Path| {
        kascade()
            .arg("trace")
            .arg(log)
            .args(["--resource", "deployments", "--namespace", "default"])
            .args(["--name", "hello"])
            .output()
            .unwrap()
    };
    let (clean, dirty) = (trace(&fixture), trace(&log));
    let stderr = String::from_utf8_lossy(&dirty.stderr);
    assert!(dirty.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:81: ", log.display())),
        "{stderr}"
    );
    assert!(clean.status.success());
    assert_eq!(
        String::from_utf8_lossy(&dirty.stdout),
        String::from_utf8_lossy(&clean.stdout)
    );
}

#[test]
fn rules_check_accepts_the_shipped_rules_and_names_bad_ones() {
    let st = common::succeeded(kascade().args([
        "rules",
        "check",
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules"),
    ]));
    // The shipped directory: its rules and its propagations.
    let out = String::from_utf8_lossy(&st.stdout);
    let propagations = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/propagation.yaml"
    ))
    .unwrap()
    .lines()
    .filter(|l| l.starts_with("  - name:"))
    .count();
    let timers = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/timers.yaml"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  - name:"))
        .count();
    assert!(timers >= 2);
    assert!(
        out.contains(&format!(
            " rules, {propagations} propagations, {timers} timers OK"
        )),
        "{out}"
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "rules:\n  - name: broken\n    match: {resource: pods}\n    class: x\n    role: child\n    target: {nameRegex: '([a-z', resource: nodes}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("typo.yaml"),
        "rules:\n  - name: t\n    matches: {resource: pods}\n",
    )
    .unwrap();
    let st = kascade()
        .args(["rules", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("\"broken\"") && err.contains("target.nameRegex"),
        "{err}"
    );
    assert!(err.contains("typo.yaml:3:"), "{err}");
}

#[test]
fn bad_flags_are_named() {
    let st = kascade()
        .args(["replay", "x.log", "--output", "jaeger"])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("unknown output \"jaeger\""));
    let st = kascade()
        .args(["replay", "x.log", "--exclude-user-agent", "(("])
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("--exclude-user-agent"));
    // A budget of nothing would still load the searched object's chain:
    // refused rather than silently meaning "a little".
    let st = kascade()
        .args(["trace", "x.log", "--resource", "pods", "--name", "p"])
        .args(["--max-trace-bytes", "0"])
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("--max-trace-bytes") && err.contains("'0'"),
        "{err}"
    );
    // The flag, the file and why, each said once (kube's error quotes its
    // cause and gives it as its source too).
    let st = kascade()
        .args(["collect", "--watch-cluster", "east=/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(1));
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("--watch-cluster east=/nonexistent/kubeconfig: not a readable kubeconfig"),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// The flag reference README links to: every subcommand's flag tables.
const CONFIGURATION_REFERENCE: &str = "docs/configuration.md";

fn configuration_reference() -> String {
    let path = format!("{}/{CONFIGURATION_REFERENCE}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn readme_configuration_reference_documents_every_flag_in_help() {
    let reference = configuration_reference();
    let flag = regex::Regex::new(r"^\s+(?:-\w, )?(--[a-z0-9-]+)").unwrap();
    let mut checked = 0;
    for sub in [
        vec![],
        vec!["collect"],
        vec!["replay"],
        vec!["frontend"],
        vec!["trace"],
        vec!["analyze"],
        vec!["explain"],
        vec!["cpid-webhook"],
        vec!["doctor"],
        vec!["rules"],
        vec!["rules", "check"],
        vec!["rules", "list"],
        vec!["completions"],
        vec!["man"],
    ] {
        let out = common::succeeded(kascade().args(&sub).arg("--help"));
        let help = String::from_utf8(out.stdout).unwrap();
        for line in help.lines() {
            if let Some(c) = flag.captures(line) {
                let f = &c[1];
                checked += 1;
                assert!(
                    reference.contains(&format!("`{f}`")) || reference.contains(&format!("`{f} ")),
                    "`kascade {} --help` lists {f}, which {CONFIGURATION_REFERENCE} does not document",
                    sub.join(" ")
                );
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} flags found: the help format changed?"
    );
}

#[test]
fn otlp_settings_from_the_environment_are_checked_and_named() {
    let log = common::fixture_path("deployment", "audit.log");
    // A bad OpenTelemetry variable stops an OTLP export at startup, naming it.
    let st = kascade()
        .args(["replay", "--cluster", "fx"])
        .arg(&log)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_TIMEOUT") && err.contains("milliseconds"),
        "{err}"
    );
    // The flag's variable wins over it; a missing CA file is named too.
    let st = kascade()
        .args([
            "replay",
            "--cluster",
            "fx",
            "--otlp-endpoint",
            "https://127.0.0.1:1",
        ])
        .arg(&log)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")
        .env("KASCADE_OTLP_TIMEOUT", "2s")
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/otlp-ca.pem")
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_CERTIFICATE /nonexistent/otlp-ca.pem"),
        "{err}"
    );
    // Without an OTLP output the OTLP settings are not needed.
    let dir = tempfile::tempdir().unwrap();
    common::succeeded(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!(
                "otlp-json={}",
                dir.path().join("out.jsonl").display()
            ))
            .arg(&log)
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
    );
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

#[test]
fn readme_configuration_reference_tables_match_each_subcommands_help_in_names_and_defaults() {
    let tables = configuration_flag_tables();
    let global = &tables[""];
    let lone = regex::Regex::new(r"^`[^`]*`$").unwrap();
    let mut checked_defaults = 0;
    let mut problems = Vec::new();
    for (sub, key) in [
        (vec![], ""),
        (vec!["collect"], "collect"),
        (vec!["replay"], "replay"),
        (vec!["frontend"], "frontend"),
        (vec!["trace"], "trace"),
        (vec!["analyze"], "analyze"),
        (vec!["explain"], "explain"),
        (vec!["cpid-webhook"], "cpid-webhook"),
        (vec!["doctor"], "doctor"),
        (vec!["rules", "check"], "rules check"),
        (vec!["rules", "list"], "rules list"),
        (vec!["completions"], "completions"),
        (vec!["man"], "man"),
    ] {
        let help = help_flags(&sub);
        let own = tables.get(key);
        for (flag, default) in &help {
            let Some(row) = own.and_then(|t| t.get(flag)).or_else(|| global.get(flag)) else {
                problems.push(format!(
                    "`kascade {key} --help` lists {flag}, which no table of `{key}` in {CONFIGURATION_REFERENCE} documents"
                ));
                continue;
            };
            match default {
                Some(d) => {
                    checked_defaults += 1;
                    if !states_default(&row.default, d) {
                        problems.push(format!(
                            "{CONFIGURATION_REFERENCE}:{}: {flag} of `kascade {key}` defaults to `{d}` (its --help), the table says {:?}",
                            row.line, row.default
                        ));
                    }
                }
                None => {
                    // A lone value would claim a default the flag does not have.
                    if lone.is_match(&row.default) {
                        problems.push(format!(
                            "{CONFIGURATION_REFERENCE}:{}: {flag} of `kascade {key}` has no default in its --help, the table says {:?}",
                            row.line, row.default
                        ));
                    }
                }
            }
        }
        let in_help: std::collections::HashSet<&str> =
            help.iter().map(|(f, _)| f.as_str()).collect();
        let documented = if key.is_empty() { Some(global) } else { own };
        for (flag, row) in documented.into_iter().flatten() {
            if !in_help.contains(flag.as_str()) {
                problems.push(format!(
                    "{CONFIGURATION_REFERENCE}:{}: documents {flag} for `kascade {key}`, whose --help has no such flag",
                    row.line
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked_defaults > 60,
        "only {checked_defaults} defaults found: the help format changed?"
    );
}

#[test]
fn a_bad_value_of_a_choice_flag_names_the_flag_and_the_choices() {
    let log = common::fixture_path("deployment", "audit.log");
    for (flag, value, choices) in [
        ("--format", "yaml", "text, json, otlp-json"),
        ("--mode", "flat", "tracing, tree, timeline, grouped"),
        ("--scope", "all", "full, ancestors, descendants, object"),
        ("--log-format", "xml", "text, json"),
    ] {
        let st = kascade()
            .args(["trace", "--resource", "deployments", "--name", "hello"])
            .args([flag, value])
            .arg(&log)
            .output()
            .unwrap();
        assert!(!st.status.success());
        let err = String::from_utf8_lossy(&st.stderr);
        assert!(
            err.contains(&format!("'{value}'")) && err.contains(flag) && err.contains(choices),
            "{flag} {value}: {err}"
        );
    }
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

#[cfg(target_os = "linux")]
#[test]
fn transparent_huge_pages_are_off_unless_kascade_is_told_otherwise() {
    let Some(default) = thp_enabled_of_collect(&[]) else {
        return; // the kernel does not report it
    };
    assert_eq!(default, "0", "huge pages left on");
    assert_eq!(
        thp_enabled_of_collect(&[("KASCADE_ALLOW_THP", "1")]).as_deref(),
        Some("1")
    );
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

#[test]
fn the_terminal_tree_summarises_a_wide_level_as_the_ui_does() {
    // Every Pod shown: five under each ReplicaSet, nothing summarised.
    let all = tree_text_of_deployment("0");
    let (pods, rest) = rows_of(&all, "pods");
    assert_eq!(pods.len(), 10, "{all}");
    assert!(rest.is_empty(), "{all}");
    // The default (50) shows a level of five whole, as the UI does.
    assert_eq!(tree_text_of_deployment("50"), all);

    let text = tree_text_of_deployment("2");
    let (shown, rest) = rows_of(&text, "pods");
    assert_eq!(shown.len(), 4, "two Pods per ReplicaSet: {text}");
    assert_eq!(
        rest.len(),
        2,
        "one line per ReplicaSet for the rest: {text}"
    );
    for line in &rest {
        assert!(
            line.contains("… 3 more pods  [owner]  (not shown: 3 of 5)"),
            "{line}"
        );
        // The last line under its ReplicaSet, at the Pods' depth.
        assert!(
            line.starts_with("│  └─ … ") || line.starts_with("   └─ … "),
            "{line}"
        );
        assert!(line.contains("active p50 "), "{line}");
        assert!(line.contains("--max-siblings 0 shows all"), "{line}");
        // It names Pods that are not shown, of its own ReplicaSet.
        let first = line
            .split("; first ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(
            pods.contains(&first) && !shown.contains(&first),
            "{first}: {text}"
        );
    }
    // What is left out is left out with everything below it (a Pod's Node).
    let hidden: Vec<&&str> = pods.iter().filter(|p| !shown.contains(p)).collect();
    assert_eq!(hidden.len(), 6);
    for p in hidden {
        assert!(!text.contains(&format!("/{p}  ")), "{p} is shown: {text}");
    }
    let nodes = |t: &str| t.lines().filter(|l| l.contains("nodes kwok-node-")).count();
    assert_eq!(nodes(&text), 4, "{text}");
    assert_eq!(nodes(&all), 10, "{all}");
    // Both ReplicaSets and the Deployment are still there.
    assert_eq!(rows_of(&text, "replicasets").0.len(), 2, "{text}");
}

/// `kascade trace --mode cascade`'s text of the deployment fixture.
fn cascade_text_of_deployment(max_siblings: &str) -> String {
    trace_text_of_deployment(&["--mode", "cascade", "--max-siblings", max_siblings])
}

#[test]
fn the_terminal_cascade_summarises_a_wide_level_as_the_ui_does() {
    let write = regex::Regex::new(r"^[│├└─ ]*\+\d+\.\d{3}s  ").unwrap();
    let rest = regex::Regex::new(
        r"^[│ ]*[├└]─ … (\d+) more ([a-z ]+?)  \(not shown: (\d+) of (\d+)(?:, and the (\d+) writes they caused)?\)",
    )
    .unwrap();
    let writes = |t: &str| t.lines().filter(|l| write.is_match(l)).count();
    let all = cascade_text_of_deployment("0");
    assert!(!all.contains(" more "), "{all}");
    assert_eq!(cascade_text_of_deployment("50"), all);

    let text = cascade_text_of_deployment("2");
    let mut left_out = 0;
    let mut levels = Vec::new();
    for line in text.lines().filter(|l| l.contains("… ")) {
        let c = rest
            .captures(line)
            .unwrap_or_else(|| panic!("not a level's rest: {line}"));
        let n: usize = c[1].parse().unwrap();
        assert_eq!(c[3].parse::<usize>().unwrap(), n, "{line}");
        // Two of each level are printed, as --max-siblings says.
        assert_eq!(c[4].parse::<usize>().unwrap(), n + 2, "{line}");
        left_out += n + c.get(5).map_or(0, |b| b.as_str().parse().unwrap());
        levels.push(c[2].to_string());
        assert!(
            line.contains(" hop p50 ") && line.contains("; duration p50 "),
            "{line}"
        );
        assert!(line.contains("--max-siblings 0 shows all"), "{line}");
        // The first it names is printed in the whole text, not in this one.
        let first = line.split("; first ").nth(1).unwrap();
        let first = first.split([',', ';']).next().unwrap();
        let named = format!("{} {}/{first} ", &c[2], "default");
        assert!(all.contains(&named), "{named}: {all}");
        if c[2].starts_with("create pods") {
            assert!(!text.contains(&named), "{named}: {text}");
        }
    }
    assert!(levels.iter().any(|l| l == "create pods"), "{text}");
    // Every write is printed or counted in exactly one level's rest.
    assert!(writes(&text) < writes(&all), "{text}");
    assert_eq!(writes(&text) + left_out, writes(&all), "{text}");
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

#[test]
fn replays_sharing_a_redaction_key_give_the_same_markers_others_their_own() {
    let dir = tempfile::tempdir().unwrap();
    // One key written with a newline, one without: the same key.
    let (with_newline, without) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&with_newline, "7f3c9a1e5b2d4c6f8e0a1b3c5d7e9f21\n").unwrap();
    std::fs::write(&without, "7f3c9a1e5b2d4c6f8e0a1b3c5d7e9f21").unwrap();
    let keyed = replay_markers(Some(&with_newline));
    assert!(
        !keyed.is_empty(),
        "the config fixture's Secrets give markers"
    );
    assert_eq!(keyed, replay_markers(Some(&without)));
    // Unkeyed runs have a key of their own each.
    let unkeyed = replay_markers(None);
    assert!(keyed.is_disjoint(&unkeyed), "{keyed:?} {unkeyed:?}");
    assert!(unkeyed.is_disjoint(&replay_markers(None)));
    // Offline, `trace` with the key shows the markers the replay exported.
    let st = kascade()
        .args(["trace", "--cluster", "fx", "--resource", "secrets"])
        .args(["--namespace", "config-demo", "--name", "app-secret"])
        .args(["--snapshots", "--redaction-key-file"])
        .arg(&without)
        .arg(common::fixture_path("config", "audit.log"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&st.stdout);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let traced = markers(&stdout);
    assert!(traced.len() >= 2, "the Secret was written twice: {stdout}");
    assert!(traced.is_subset(&keyed), "{traced:?} {keyed:?}");
}

#[test]
fn a_missing_or_short_redaction_key_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short-key");
    std::fs::write(&short, "hunter2\n").unwrap();
    let missing = dir.path().join("missing-key");
    let out = dir.path().join("out.jsonl");
    let replay = [
        "replay",
        "--output",
        &format!("otlp-json={}", out.display()),
    ];
    let trace = ["trace", "--resource", "secrets", "--name", "app-secret"];
    for (file, why) in [
        (&short, "the key has 7 bytes, at least 16 are needed"),
        (&missing, "No such file or directory"),
    ] {
        for command in [&replay[..], &trace[..], &["explain"]] {
            let st = kascade()
                .args(command)
                .arg("--redaction-key-file")
                .arg(file)
                .arg(common::fixture_path("config", "audit.log"))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&st.stderr);
            assert_eq!(st.status.code(), Some(1), "{command:?}: {stderr}");
            let named = format!("--redaction-key-file {}", file.display());
            assert!(stderr.contains(&named), "{command:?}: {stderr}");
            assert!(stderr.contains(why), "{command:?}: {stderr}");
            assert!(!stderr.contains("hunter2"), "the key is shown: {stderr}");
            assert!(st.stdout.is_empty(), "{command:?}");
            assert!(!out.exists(), "nothing replayed");
        }
    }
}

/// A value nested as deep as the apiserver accepts, in an object's
/// annotation or field, or a log line of nothing but brackets: every
/// offline command handles the event as the collector does (the value a
/// marker, the write kept), exits 0 and loses nothing else.
#[test]
fn values_nested_as_deep_as_the_apiserver_accepts_are_markers_in_every_offline_command() {
    let dir = tempfile::tempdir().unwrap();
    let brackets = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    for (name, deep) in [
        (
            "annotation",
            common::with_deep_annotation as fn(&str) -> String,
        ),
        ("field", common::with_deep_field),
    ] {
        let (mut lines, audit_id) = common::config_with_deep_patch(deep);
        lines.push(brackets.clone());
        let log = dir.path().join(format!("{name}.log"));
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let run = |args: &[&str]| succeeded_text(kascade().args(args).arg(&log));
        let out = dir.path().join(format!("{name}.jsonl"));
        let (_, stderr) = run(&[
            "replay",
            "--cluster",
            "fx",
            "--output",
            &format!("otlp-json={}", out.display()),
        ]);
        // Only the line of brackets (not an event) is skipped.
        assert!(
            stderr.contains("1 malformed lines skipped"),
            "{name}: {stderr}"
        );
        let spans = std::fs::read_to_string(&out).unwrap();
        assert!(
            spans.contains(&audit_id),
            "{name}: the deep write lost its span"
        );
        if name == "field" {
            assert!(
                stderr.contains("values nested deeper than 64 levels"),
                "{stderr}"
            );
            assert!(
                spans.contains("nested deeper than 64 levels: "),
                "{name}: no marker"
            );
        }
        let (tree, _) = run(&[
            "trace",
            "--resource",
            "configmaps",
            "--namespace",
            "config-demo",
            "--name",
            "app-config",
        ]);
        assert!(tree.contains("patch"), "{name}: {tree}");
        run(&["explain"]);
        run(&["analyze"]);
    }
}

/// Inputs as CI leaves them: the same log given twice (or rotated logs that
/// overlap) is read once, not counted twice with a trigger invented from
/// the repeat; a gzipped log cut short is read up to its damage, said on
/// stderr, instead of losing the whole report.
#[test]
fn a_log_given_twice_is_read_once_and_a_cut_gz_up_to_its_damage() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("rollout-stuck", "audit.log");
    let explain = |files: &[&std::path::Path]| succeeded_text(kascade().arg("explain").args(files));
    let (once, _) = explain(&[&log]);
    let (twice, stderr) = explain(&[&log, &log]);
    assert!(once.contains("ERROR"), "{once}");
    // Twice the lines are read; the report is the same.
    assert_eq!(
        twice.replacen("80 audit lines read", "40 audit lines read", 1),
        once
    );
    assert!(stderr.contains("counted once"), "{stderr}");

    let text = std::fs::read(&log).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("audit.log.gz");
    std::fs::write(&cut, &gz[..gz.len() * 3 / 4]).unwrap();
    let (report, stderr) = explain(&[&cut]);
    assert!(
        stderr.contains(&format!("{}: damaged after line ", cut.display())),
        "{stderr}"
    );
    assert!(report.contains("deployments"), "{report}");
}

/// A scope that matches nothing — a namespace or object typo, a time range
/// outside the log, `--from` after `--to` — is an error naming it, never
/// "no problems found"; the same scopes spelled right explain as before.
#[test]
fn a_scope_that_matches_nothing_is_an_error_not_an_all_clear() {
    let log = common::fixture_path("quota", "audit.log");
    let explain = |args: &[&str]| {
        let st = kascade()
            .arg("explain")
            .arg(&log)
            .args(args)
            .args(["--fail-on", "error"])
            .output()
            .unwrap();
        (
            st.status.code(),
            String::from_utf8_lossy(&st.stdout).to_string(),
            String::from_utf8_lossy(&st.stderr).to_string(),
        )
    };
    for (args, named) in [
        (vec!["-n", "quota-dem0"], "namespace quota-dem0"),
        (vec!["--object", "deploy/nothere"], "nothere"),
        (
            vec!["--from", "2099-01-01T00:00:00Z"],
            "--from 2099-01-01T00:00:00Z is outside the log",
        ),
        (
            vec!["--to", "2020-01-01T00:00:00Z"],
            "nothing in scope (until 2020-01-01T00:00:00Z)",
        ),
        (
            vec![
                "--from",
                "2026-11-23T16:00:00Z",
                "--to",
                "2026-11-23T15:00:00Z",
            ],
            "later than --to",
        ),
    ] {
        let (code, out, err) = explain(&args);
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!out.contains("no problems found"), "{args:?}: {out}");
    }
    // Spelled right: the quota refusals are found (exit 3 with --fail-on).
    let (code, out, err) = explain(&["-n", "quota-demo"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("ERROR"), "{out}");
}

/// `replay` reads gzipped logs as `explain` does: the same spans as from
/// the plain log, and a log cut short replayed up to its damage.
#[test]
fn replay_reads_gzipped_logs_and_a_cut_one_up_to_its_damage() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let plain = common::fixture_path("deployment", "audit.log");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    let gz = gz.finish().unwrap();
    let whole = dir.path().join("audit.log.gz");
    std::fs::write(&whole, &gz).unwrap();
    let cut = dir.path().join("cut.log.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let replay = |log: &std::path::Path, name: &str| {
        let out = dir.path().join(name);
        let (_, stderr) = succeeded_text(
            kascade()
                .args(["replay", "--cluster", "fx", "--output"])
                .arg(format!("otlp-json={}", out.display()))
                .arg(log),
        );
        (span_ids(&out), stderr)
    };
    let (from_plain, _) = replay(&plain, "plain.jsonl");
    let (from_gz, _) = replay(&whole, "gz.jsonl");
    assert_eq!(from_gz, from_plain);
    let (from_cut, stderr) = replay(&cut, "cut.jsonl");
    assert!(stderr.contains("damaged after line"), "{stderr}");
    assert!(!from_cut.is_empty() && from_cut.len() < from_plain.len());
}

/// `-` reads standard input, as a pipe gives it (`zcat audit.log.gz |
/// kascade explain -`): the same report and the same spans as the file.
#[test]
fn standard_input_is_read_as_the_file_would_be() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let log = common::fixture_path("rollout-stuck", "audit.log");
    let piped = |args: &[&str]| {
        let mut child = kascade()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&std::fs::read(&log).unwrap())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let from_file = common::succeeded(kascade().arg("explain").arg(&log));
    assert_eq!(
        piped(&["explain", "-"]),
        String::from_utf8_lossy(&from_file.stdout)
    );

    let (file_out, stdin_out) = (
        dir.path().join("file.jsonl"),
        dir.path().join("stdin.jsonl"),
    );
    common::succeeded(
        kascade()
            .args(["replay", "--cluster", "fx", "--output"])
            .arg(format!("otlp-json={}", file_out.display()))
            .arg(&log),
    );
    piped(&[
        "replay",
        "--cluster",
        "fx",
        "--output",
        &format!("otlp-json={}", stdin_out.display()),
        "-",
    ]);
    assert_eq!(span_ids(&stdin_out), span_ids(&file_out));
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

#[test]
fn a_rules_directory_adds_to_the_built_in_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("extra.yaml"), EXTRA_RULE).unwrap();
    let propagations = shipped_names("propagations").len();
    assert!(propagations >= 10);

    let check = common::succeeded(kascade().args(["rules", "check"]).arg(dir.path()));
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        out.contains(": 1 rules, 0 propagations, 0 timers OK"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "with the built-in rules: {} rules, {propagations} propagations",
            shipped_names("rules").len() + 1
        )),
        "{out}"
    );

    // The stuck rollout's trigger is the user's patch with or without the
    // extra rule: the built-in propagations still explain the controllers'
    // writes (replacing them made the scheduler's status patch the trigger).
    let out = kascade()
        .args(["explain", "--format", "json", "--rules"])
        .arg(dir.path())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/rollout-stuck/audit.log"
        ))
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        r["findings"][0]["trigger"]["write"],
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
}

#[test]
fn rules_list_names_every_effective_rule_and_where_it_comes_from() {
    let out = common::succeeded(kascade().args(["rules", "list"]));
    let listed = String::from_utf8_lossy(&out.stdout);
    for part in ["rules", "propagations", "timers"] {
        let names = shipped_names(part);
        assert!(!names.is_empty(), "{part}");
        assert!(
            listed.contains(&format!("{} ({})", part.to_uppercase(), names.len())),
            "{part}: {listed}"
        );
        for (name, file) in names {
            assert!(
                listed.lines().any(
                    |l| l.split_whitespace().next() == Some(name.as_str()) && l.contains(&file)
                ),
                "{name} from {file} not listed:\n{listed}"
            );
        }
    }

    // A propagation of a built-in's name replaces it in its place; the
    // list says so, and the count stays the built-in one.
    let (replaced, file) = shipped_names("propagations").remove(0);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ours.yaml"),
        format!("propagations:\n  - name: {replaced}\n    relation: owner\n    cause: parent\n    on: [create]\n    writes: [create]\n    writers: '^system:serviceaccount:team:.+$'\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("extra.yaml"), EXTRA_RULE).unwrap();
    let out = common::succeeded(kascade().args(["rules", "list", "--rules"]).arg(dir.path()));
    let listed = String::from_utf8_lossy(&out.stdout);
    let propagations = shipped_names("propagations").len();
    assert!(
        listed.contains(&format!("PROPAGATIONS ({propagations})")),
        "{listed}"
    );
    let line = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some(replaced.as_str()))
        .unwrap();
    assert!(
        line.contains("ours.yaml") && line.contains(&format!("(replaces {file})")),
        "{line}"
    );
    assert!(listed.contains(&format!("RULES ({})", shipped_names("rules").len() + 1)));

    // Without the built-in rules only the directory's are left.
    let out = kascade()
        .args(["rules", "list", "--no-builtin-rules", "--rules"])
        .arg(dir.path())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("RULES (1)")
            && listed.contains("PROPAGATIONS (1)")
            && listed.contains("TIMERS (0)"),
        "{listed}"
    );
    // --no-builtin-rules alone would leave no rules at all.
    let out = kascade()
        .args(["rules", "list", "--no-builtin-rules"])
        .env_remove("KASCADE_RULES")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rules"));
}

#[test]
fn a_name_given_twice_in_one_rules_directory_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), EXTRA_RULE).unwrap();
    std::fs::write(dir.path().join("b.yaml"), EXTRA_RULE).unwrap();
    let out = kascade()
        .args(["rules", "check"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("b.yaml: rule \"team-dashboard\"")
            && err.contains("duplicate rule name (also in")
            && err.contains("a.yaml"),
        "{err}"
    );
}

/// `kascade doctor`'s bad flags are named; an address nothing listens on
/// is a failed check (exit 3), not an error of doctor's own.
#[test]
fn doctor_names_bad_flags_and_fails_on_an_unreachable_collector() {
    let out = kascade()
        .args(["doctor", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--kubeconfig /nonexistent/kubeconfig"),
        "{err}"
    );

    let out = kascade()
        .args(["doctor", "--admin", "not a url"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin \"not a url\": not a URL"), "{err}");

    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = kascade()
        .args(["doctor", "--format", "json", "--admin"])
        .arg(format!("http://kascade:s3cret-pw@127.0.0.1:{port}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // Credentials in an address are not shown.
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        !shown.contains("s3cret-pw") && shown.contains("***@127.0.0.1"),
        "{shown}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let collector = &report["checks"][0];
    assert_eq!(collector["id"], "collector");
    assert_eq!(collector["status"], "fail");
    assert!(
        collector["fix"]
            .as_str()
            .unwrap()
            .contains("--admin-listen"),
        "{collector}"
    );
}

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

/// Rotated logs given newest first, and a file given twice, replay as the
/// one log does: merged by time, each event once.
#[test]
fn replay_merges_files_by_time_and_replays_a_repeated_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let whole = common::fixture_path("deployment", "audit.log");
    let text = std::fs::read_to_string(&whole).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (older, newer) = lines.split_at(lines.len() / 2);
    let (rotated, current) = (dir.path().join("audit-1.log"), dir.path().join("audit.log"));
    std::fs::write(&rotated, older.join("\n") + "\n").unwrap();
    std::fs::write(&current, newer.join("\n") + "\n").unwrap();

    let (expected, _) = replayed_spans(&[&whole]);
    assert!(expected.len() > 100);
    let (newest_first, _) = replayed_spans(&[&current, &rotated]);
    assert!(newest_first == expected, "rotated logs, newest first");
    let (twice, stderr) = replayed_spans(&[&whole, &whole]);
    assert!(twice == expected, "the same file twice");
    assert!(stderr.contains("logged more than once"), "{stderr}");
    assert!(
        stderr.contains(&format!("replayed {} lines", 2 * lines.len())),
        "{stderr}"
    );
}

//! Rules check, bad flags, the README's configuration reference, OTLP
//! settings, choice flags, transparent huge pages.

use super::*;

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

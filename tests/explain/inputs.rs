//! Inputs as CI leaves them: truncated, rotated, not audit logs, Event
//! lists, two clusters, watch streams; outputs and exit codes.

use super::*;

#[test]
fn a_truncated_log_names_the_line_and_still_explains_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(common::fixture_path("rollout-stuck", "audit.log")).unwrap();
    // Cut in the middle of the last line, as a log copied while written.
    let cut = &text[..text.len() - 40];
    let path = dir.path().join("audit.log");
    std::fs::write(&path, cut).unwrap();
    let r = run(vec![path.clone()], Scope::default());
    assert_eq!(r.inputs.malformed, 1);
    let n = cut.lines().count();
    assert!(
        r.inputs.malformed_examples[0].starts_with(&format!("{}:{n}: ", path.display())),
        "{:?}",
        r.inputs.malformed_examples
    );
    assert!(r.findings[0].title.starts_with("FailedScheduling"));
}

#[test]
fn a_file_that_is_not_an_audit_log_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello\nworld\n").unwrap();
    let out = kascade().arg("explain").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no audit events in") && stderr.contains(&format!("{}:1:", path.display())),
        "{stderr}"
    );
}

#[test]
fn rotated_logs_given_newest_first_are_read_oldest_first() {
    let text = std::fs::read_to_string(common::fixture_path("rollout-stuck", "audit.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (old, new) = lines.split_at(lines.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    let older = dir.path().join("audit-1.log");
    let newer = dir.path().join("audit.log");
    std::fs::write(&older, old.join("\n") + "\n").unwrap();
    std::fs::write(&newer, new.join("\n") + "\n").unwrap();
    let out = common::succeeded(
        kascade()
            .args(["explain", "--format", "json"])
            .arg(&newer)
            .arg(&older),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reading the logs oldest first"), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["findings"][0]["trigger"]["write"],
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
}

#[test]
fn fail_on_sets_the_exit_code_and_outputs_go_to_files() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("summary.md");
    let log = common::fixture_path("quota", "audit.log");
    let out = kascade()
        .args(["explain", "--fail-on", "error", "--output"])
        .arg(format!("markdown={}", md.display()))
        .arg(&log)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("kascade explain everything: 1 error"),
        "{stdout}"
    );
    assert!(!stdout.contains('\u{1b}'), "no colour when piped");
    let summary = std::fs::read_to_string(&md).unwrap();
    assert!(
        summary.starts_with("## ❌ kascade explain: 1 error"),
        "{summary}"
    );
    assert!(summary.contains("exceeded quota"), "{summary}");
    // The run that succeeded passes the same gate.
    let ok = kascade()
        .args(["explain", "--fail-on", "error"])
        .arg(common::fixture_path("deployment", "audit.log"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
}

#[test]
fn an_event_list_gives_the_events_an_audit_log_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(common::fixture_path("unschedulable", "audit.log")).unwrap();
    // An audit policy that drops Events: only the Pod's own writes remain.
    let without: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"resource\":\"events\""))
        .collect();
    let log = dir.path().join("audit.log");
    std::fs::write(&log, without.join("\n") + "\n").unwrap();
    let bare = run(vec![log.clone()], Scope::default());
    assert!(
        bare.findings
            .iter()
            .all(|f| f.kind != FindingKind::WarningEvent),
        "{:#?}",
        bare.findings
    );
    let config = ExplainConfig {
        files: vec![log],
        events: vec![common::fixture_path("unschedulable", "events.json")],
        ..ExplainConfig::default()
    };
    let with = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap();
    let f = &with.findings[0];
    assert_eq!(f.kind, FindingKind::WarningEvent, "{:#?}", with.findings);
    assert!(f.title.starts_with("FailedScheduling: "), "{}", f.title);
    assert_eq!(f.count, 1, "the same occurrence is not counted twice");
    // Given both ways (audit log and list), an occurrence counts once.
    let both = ExplainConfig {
        files: vec![common::fixture_path("unschedulable", "audit.log")],
        events: vec![common::fixture_path("unschedulable", "events.json")],
        ..ExplainConfig::default()
    };
    let r = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&both))
        .unwrap();
    assert_eq!(r.findings[0].count, 1, "{:#?}", r.findings[0]);
}

#[test]
fn logs_of_two_clusters_mixed_are_named_as_such() {
    // A second cluster that ran the same scenario: the same names under
    // other uids, resource versions and audit ids. Made from the captured
    // log by changing just those (the e2e harness's second cluster has no
    // fixture of this scenario).
    let text = std::fs::read_to_string(common::fixture_path("deployment", "audit.log")).unwrap();
    let uid = regex::Regex::new(r#""uid":"([0-9a-f]{8})-"#).unwrap();
    let other = uid.replace_all(&text, r#""uid":"ffffffff-"#);
    let rv = regex::Regex::new(r#"("resourceVersion":")(\d+)""#).unwrap();
    let other = rv.replace_all(&other, r#"${1}9${2}""#);
    let audit_id = regex::Regex::new(r#""auditID":"([0-9a-f]{8})-"#).unwrap();
    let other = audit_id.replace_all(&other, r#""auditID":"eeeeeeee-"#);
    // Their lines interleaved, as a log collector merging both would write them.
    let mixed_text: String = text
        .lines()
        .zip(other.lines())
        .flat_map(|(a, b)| [a, "\n", b, "\n"])
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (a, mixed_log) = (dir.path().join("a.log"), dir.path().join("mixed.log"));
    std::fs::write(&a, &text).unwrap();
    std::fs::write(&mixed_log, mixed_text).unwrap();
    let mixed = run(vec![mixed_log], Scope::default());
    let note = mixed
        .inputs
        .notes
        .iter()
        .find(|n| n.contains("mix several clusters' logs"))
        .unwrap_or_else(|| panic!("{:?}", mixed.inputs.notes));
    assert!(
        note.contains("deployments default/hello") || note.contains(" default/"),
        "{note}"
    );
    // One cluster's log alone has no such note.
    let single = run(vec![a], Scope::default());
    assert!(single.inputs.notes.is_empty(), "{:?}", single.inputs.notes);
}

#[test]
fn watch_streams_give_the_states_a_metadata_level_log_lacks() {
    // The same run under a Metadata-level audit policy: no bodies, so no
    // readiness and no Event text; the captured watch streams have them.
    let dir = tempfile::tempdir().unwrap();
    let meta: Vec<String> =
        std::fs::read_to_string(common::fixture_path("rollout-stuck", "audit.log"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut e: serde_json::Value = serde_json::from_str(l).unwrap();
                e["level"] = "Metadata".into();
                let o = e.as_object_mut().unwrap();
                o.remove("requestObject");
                o.remove("responseObject");
                e.to_string()
            })
            .collect();
    let log = dir.path().join("audit.log");
    std::fs::write(&log, meta.join("\n") + "\n").unwrap();
    let bare = run(vec![log.clone()], Scope::default());
    assert!(bare.findings.is_empty(), "{:#?}", bare.findings);
    let watch = ["core.pods", "apps.replicasets", "apps.deployments"]
        .map(|s| common::fixture_path("rollout-stuck", &format!("watch/{s}.jsonl")))
        .to_vec();
    let config = ExplainConfig {
        files: vec![log],
        watch,
        ..ExplainConfig::default()
    };
    let r = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap();
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.object.resource, "pods");
    assert!(
        f.title.starts_with("Failed: Unschedulable: ")
            && f.title.contains("node affinity/selector"),
        "{}",
        f.title
    );
    assert_eq!(f.chain[0].object.display, "deployments rollout-demo/web");
}

#[test]
fn a_watch_file_that_is_not_one_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("pods.jsonl");
    std::fs::write(&bad, "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\"}}\n").unwrap();
    let out = kascade()
        .arg("explain")
        .arg(common::fixture_path("unschedulable", "audit.log"))
        .arg("--watch")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:1: the object has no apiVersion",
            bad.display()
        )),
        "{stderr}"
    );
}

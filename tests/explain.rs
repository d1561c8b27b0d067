//! `kascade explain` over the audit logs captured from the real control
//! plane (`e2e/fixtures/`): the first finding names the true cause, the
//! run that succeeded has no error, scopes narrow, bad input is named.

mod common;

use std::path::PathBuf;

use kascade::app::explain::{ExplainConfig, explain};
use kascade::test_support::analysis::explain::{FindingKind, Report, Scope, Severity};

fn run(files: Vec<PathBuf>, scope: Scope) -> Report {
    let config = ExplainConfig {
        files,
        scope,
        ..ExplainConfig::default()
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap()
}

fn fixture(name: &str) -> Report {
    run(
        vec![common::fixture_path(name, "audit.log")],
        Scope::default(),
    )
}

use common::kascade;

#[test]
fn a_quota_refusal_is_the_first_finding_on_its_replicaset_under_the_deployment() {
    let r = fixture("quota");
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.kind, FindingKind::DeniedWrite);
    assert!(
        f.title.contains("is forbidden: exceeded quota: pods"),
        "{}",
        f.title
    );
    assert_eq!(f.object.resource, "replicasets");
    assert!(f.object.name.starts_with("capped-"), "{}", f.object.name);
    assert_eq!(f.chain[0].object.display, "deployments quota-demo/capped");
    assert!(
        f.headline.contains("— on replicasets quota-demo/capped-")
            && f.headline
                .ends_with(", under deployments quota-demo/capped"),
        "{}",
        f.headline
    );
    // The refusals and the replicaset-controller's FailedCreate Event are
    // one finding, and the Deployment left unfinished is its symptom.
    assert!(f.count >= 2, "{}", f.count);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.kind == "event" && e.summary.contains("FailedCreate")),
        "{:?}",
        f.evidence
    );
    assert!(
        f.symptoms
            .iter()
            .any(|s| s.object.display == "deployments quota-demo/capped"),
        "{:?}",
        f.symptoms
    );
    assert_eq!(r.totals.error, 1, "{:#?}", r.findings);
    let t = f.trigger.as_ref().expect("the cascade's external write");
    assert_eq!(
        t.write,
        "kascade-e2e-admin create deployments quota-demo/capped"
    );
}

#[test]
fn an_unsatisfiable_node_selector_is_found_on_the_pod_with_the_patch_that_added_it() {
    let r = fixture("rollout-stuck");
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert!(
        f.title.starts_with("FailedScheduling: ") && f.title.contains("node affinity/selector"),
        "{}",
        f.title
    );
    assert_eq!(f.object.resource, "pods");
    let chain: Vec<&str> = f.chain.iter().map(|s| s.object.resource.as_str()).collect();
    assert_eq!(chain, ["deployments", "replicasets", "pods"]);
    let via: Vec<&str> = f.chain.iter().map(|s| s.via.as_str()).collect();
    assert_eq!(via, ["", "owner", "owner"]);
    assert_eq!(f.chain[0].status, "Failed");
    let t = f.trigger.as_ref().expect("the patch");
    assert_eq!(
        t.write,
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
    assert!(
        t.changes
            .iter()
            .any(|c| c.starts_with("+ spec.template.spec.nodeSelector")),
        "{:?}",
        t.changes
    );
    let symptoms: Vec<&str> = f
        .symptoms
        .iter()
        .map(|s| s.object.resource.as_str())
        .collect();
    assert!(
        symptoms.contains(&"deployments") && symptoms.contains(&"replicasets"),
        "{symptoms:?}"
    );
    // The cascade's timeline starts at the patch and is not complete.
    let c = &r.cascades[0];
    assert_eq!(c.root, t.write);
    assert!(c.outcome.starts_with("not complete"), "{}", c.outcome);
    assert_eq!(c.findings, ["F1"]);
    assert!(c.entries.iter().any(|e| e.critical));
}

#[test]
fn an_unschedulable_pod_is_named_with_the_schedulers_reason() {
    let r = fixture("unschedulable");
    let f = &r.findings[0];
    assert_eq!(f.object.display, "pods sched-demo/stuck");
    assert!(
        f.title
            .contains("didn't match Pod's node affinity/selector"),
        "{}",
        f.title
    );
    assert_eq!(f.severity, Severity::Error);
}

#[test]
fn the_deployment_that_succeeded_has_no_error_finding() {
    let r = fixture("deployment");
    assert!(
        r.findings.iter().all(|f| f.severity < Severity::Error),
        "{:#?}",
        r.findings
    );
    assert!(r.inputs.lines > 100);
}

#[test]
fn every_fixture_is_explained_and_serialises() {
    for dir in std::fs::read_dir(common::fixtures_dir()).unwrap() {
        let dir = dir.unwrap().path();
        let log = dir.join("audit.log");
        if !log.exists() {
            continue;
        }
        let r = run(vec![log.clone()], Scope::default());
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["schema_version"], 1, "{}", log.display());
        // Every finding's chain ends at the object it is about.
        for f in &r.findings {
            assert_eq!(
                f.chain.last().unwrap().object,
                f.object,
                "{}",
                log.display()
            );
        }
    }
}

#[test]
fn a_namespace_scope_leaves_the_other_runs_out() {
    let files = vec![
        common::fixture_path("quota", "audit.log"),
        common::fixture_path("rollout-stuck", "audit.log"),
    ];
    let both = run(files.clone(), Scope::default());
    assert_eq!(both.totals.error, 2, "{:#?}", both.findings);
    let only = run(
        files,
        Scope {
            namespace: Some("rollout-demo".into()),
            ..Scope::default()
        },
    );
    assert_eq!(only.findings.len(), 1, "{:#?}", only.findings);
    assert_eq!(only.findings[0].object.namespace, "rollout-demo");
    assert_eq!(only.scope.description, "namespace rollout-demo");
}

#[test]
fn an_object_scope_starts_the_chain_at_that_object() {
    let scope = Scope {
        namespace: Some("rollout-demo".into()),
        object: Some("rs/web-f8bbf54d".parse().unwrap()),
        ..Scope::default()
    };
    let r = run(
        vec![common::fixture_path("rollout-stuck", "audit.log")],
        scope,
    );
    let f = &r.findings[0];
    let chain: Vec<&str> = f.chain.iter().map(|s| s.object.resource.as_str()).collect();
    assert_eq!(chain, ["replicasets", "pods"], "{:#?}", f.chain);
    // The Deployment above the asked object is not in the scope.
    assert!(
        f.symptoms
            .iter()
            .all(|s| s.object.resource != "deployments"),
        "{:?}",
        f.symptoms
    );
}

#[test]
fn a_time_range_before_the_patch_finds_nothing_wrong() {
    let r = fixture("rollout-stuck");
    let patch = humantime::parse_rfc3339(&r.findings[0].trigger.as_ref().unwrap().time).unwrap();
    let before = run(
        vec![common::fixture_path("rollout-stuck", "audit.log")],
        Scope {
            to: Some(patch - std::time::Duration::from_millis(1)),
            ..Scope::default()
        },
    );
    assert!(
        before.findings.iter().all(|f| f.severity < Severity::Error),
        "{:#?}",
        before.findings
    );
}

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

#[test]
fn a_label_selector_scopes_to_the_labelled_objects_and_what_they_own() {
    let log = vec![common::fixture_path("rollout-stuck", "audit.log")];
    let selected = |text: &str| Scope {
        selector: Some((
            text.to_string(),
            kascade::test_support::analysis::explain::parse_selector(text).unwrap(),
        )),
        ..Scope::default()
    };
    // The ReplicaSets and Pods carry app=web; the Deployment has no labels.
    let r = run(log.clone(), selected("app=web"));
    let f = &r.findings[0];
    assert!(f.title.starts_with("FailedScheduling"), "{}", f.title);
    assert!(
        r.findings
            .iter()
            .flat_map(|f| f.symptoms.iter().map(|s| &s.object).chain([&f.object]))
            .all(|o| o.resource != "deployments"),
        "{:#?}",
        r.findings
    );
    assert_eq!(r.scope.description, "objects labelled app=web");
    // A selector that matches nothing is an error naming it, not an
    // all-clear.
    let config = ExplainConfig {
        files: log,
        scope: selected("app=other"),
        ..ExplainConfig::default()
    };
    let err = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(explain(&config))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nothing in scope (objects labelled app=other)"),
        "{err}"
    );
}

#[test]
fn a_failed_jobs_pods_are_the_cause_and_the_job_their_symptom() {
    let r = fixture("job-failed");
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.kind, FindingKind::NotCompleted);
    assert_eq!(f.object.resource, "pods");
    assert!(f.object.name.starts_with("migrate-"), "{}", f.object.name);
    assert!(
        f.title
            .starts_with("Failed: container migrate: Error (exit code 1)"),
        "{}",
        f.title
    );
    // Both Pods (backoffLimit 1) are one finding.
    assert_eq!(f.also_total, 1, "{:#?}", f.also);
    assert_eq!(f.chain[0].object.display, "jobs jobfail-demo/migrate");
    assert!(
        f.symptoms
            .iter()
            .any(|s| s.object.display == "jobs jobfail-demo/migrate"
                && s.title.contains("BackoffLimitExceeded")),
        "{:#?}",
        f.symptoms
    );
    assert_eq!(
        f.trigger.as_ref().unwrap().write,
        "kascade-e2e-admin create jobs jobfail-demo/migrate"
    );
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

#[test]
fn a_pending_claim_is_the_cause_of_its_pods_failed_scheduling() {
    let r = fixture("pvc-pending");
    let f = &r.findings[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.object.display, "persistentvolumeclaims pvc-demo/data");
    assert_eq!(
        f.title,
        "ProvisioningFailed: storageclass.storage.k8s.io \"no-such-class\" not found"
    );
    // Under the Pod that mounts it (link class `pvc`).
    let chain: Vec<(&str, &str)> = f
        .chain
        .iter()
        .map(|s| (s.object.display.as_str(), s.via.as_str()))
        .collect();
    assert_eq!(
        chain,
        [
            ("pods pvc-demo/db", ""),
            ("persistentvolumeclaims pvc-demo/data", "pvc")
        ]
    );
    assert!(
        f.symptoms
            .iter()
            .any(|s| s.object.display == "pods pvc-demo/db"
                && s.title.contains("unbound immediate PersistentVolumeClaims")),
        "{:#?}",
        f.symptoms
    );
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

#[test]
fn a_delete_held_by_a_finalizer_names_the_finalizer_and_the_delete() {
    let r = fixture("finalizer-blocked");
    let f = &r.findings[0];
    assert_eq!(f.object.display, "deployments fin-demo/held");
    assert_eq!(f.kind, FindingKind::NotCompleted);
    assert!(
        f.title.starts_with("deletion requested ")
            && f.title.ends_with(" is held by finalizer kascade.io/hold"),
        "{}",
        f.title
    );
    assert_eq!(f.chain[0].status, "Terminating");
    assert_eq!(
        f.trigger.as_ref().unwrap().write,
        "kascade-e2e-admin delete deployments fin-demo/held"
    );
    // Nothing else went wrong: the ReplicaSet and Pod stay until it goes.
    assert_eq!(r.findings.len(), 1, "{:#?}", r.findings);
}

/// The same log gives the same report, in every process: which of several
/// failing siblings names a group used to follow a map's random order (the
/// corpus's crash-loop run named one of two Pods, now one, now the other).
/// Each run is its own process, with its own hash seeds.
#[test]
fn the_same_whole_cluster_log_gives_the_same_report_every_time() {
    for run in ["crash-loop", "image-pull-error"] {
        let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("e2e/corpus")
            .join(run)
            .join("audit.log.gz");
        let reports: Vec<Vec<u8>> = (0..6)
            .map(|_| {
                let out = common::succeeded(
                    kascade()
                        .arg("explain")
                        .arg(&log)
                        .args(["--format", "json"]),
                );
                out.stdout
            })
            .collect();
        for (i, r) in reports.iter().enumerate().skip(1) {
            assert!(
                *r == reports[0],
                "{run}: report {i} differs from the first:\n{}\n---\n{}",
                String::from_utf8_lossy(&reports[0]),
                String::from_utf8_lossy(r)
            );
        }
    }
}

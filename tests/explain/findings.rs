//! What explain finds first on the captured scenarios, and that it is
//! silent on the healthy one.

use super::*;

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

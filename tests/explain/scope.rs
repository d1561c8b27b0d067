//! Namespace, object, selector and time scopes.

use super::*;

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

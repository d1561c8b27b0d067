//! Change propagation IDs on writes, over the `cpid-annotated` fixture
//! captured from the real control plane: a Deployment created under one CPID
//! (its annotation), its image changed under a second, a ConfigMap with a W3C
//! traceparent, one with a malformed CPID. The built-in controllers are not
//! instrumented: the deployment controller copies the Deployment's
//! annotations onto its ReplicaSets, Pods carry none.

mod common;

use std::sync::Arc;
use std::time::SystemTime;

use kascade::aggregate::ProcessorConfig;
use kascade::aggregate::redact::Redactor;
use kascade::app::load_rules;
use kascade::frontend::raw::string_attr;
use kascade::pipeline::{ChangeRecord, CpidOrigin};
use kascade::source::audit::AuditFilter;
use serde_json::Value;

const SCENARIO: &str = "cpid-annotated";
const FIRST: &str = "6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01";
const SECOND: &str = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f02";

fn raw_events() -> Vec<Value> {
    common::audit_lines(SCENARIO)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn time(v: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap()
}

/// When the user's patch that set the second CPID was received (read from
/// the fixture itself).
fn second_change_received() -> SystemTime {
    let raw = raw_events();
    let patch = raw
        .iter()
        .find(|e| {
            e["verb"] == "patch"
                && e["user"]["username"] == "kascade-e2e-admin"
                && e["objectRef"]["resource"] == "deployments"
        })
        .expect("the user's patch of the Deployment");
    time(&patch["requestReceivedTimestamp"])
}

fn describe(c: &ChangeRecord) -> String {
    format!(
        "{} {} {} {}/{}",
        c.user, c.verb, c.subresource, c.object.resource, c.object.name
    )
}

#[tokio::test]
async fn each_rollout_write_carries_the_cpid_of_the_change_it_belongs_to() {
    let changes = common::changes_of_lines(common::audit_lines(SCENARIO), "fixture").await;
    let patched = second_change_received();
    let rollout: Vec<&ChangeRecord> = changes
        .iter()
        .filter(|c| {
            c.code < 400 && ["deployments", "replicasets", "pods"].contains(&&*c.object.resource)
        })
        .collect();
    assert!(rollout.len() > 40, "{}", rollout.len());
    for c in &rollout {
        let want = if c.received < patched { FIRST } else { SECOND };
        let got = c
            .cpid
            .unwrap_or_else(|| panic!("{} has no CPID", describe(c)));
        assert_eq!(got.cpid.to_string(), want, "{}", describe(c));
        if c.object.resource == "pods" {
            // Pods carry no annotation: the CPID is carried over.
            assert_eq!(got.origin, CpidOrigin::Inferred, "{}", describe(c));
        }
        if c.verb == "create" && c.object.resource != "pods" || c.user == "kascade-e2e-admin" {
            // The user set it; the deployment controller copied it onto
            // the ReplicaSet it created.
            assert_eq!(got.origin, CpidOrigin::Annotation, "{}", describe(c));
        }
    }
    // The old ReplicaSet keeps the first CPID in its annotation while the
    // second rollout scales it down: those writes belong to the second
    // change, carried over from their cause.
    let scale_down: Vec<_> = rollout
        .iter()
        .filter(|c| {
            c.object.resource == "replicasets"
                && c.verb == "update"
                && c.subresource.is_empty()
                && c.received >= patched
        })
        .collect();
    assert!(!scale_down.is_empty());
    let old_rs_writes = scale_down
        .iter()
        .filter(|c| c.cpid.unwrap().origin == CpidOrigin::Inferred)
        .count();
    assert!(
        old_rs_writes > 0,
        "the old ReplicaSet's scale-down is inferred"
    );
}

#[tokio::test]
async fn a_traceparent_is_a_cpid_and_a_malformed_annotation_none() {
    let changes = common::changes_of_lines(common::audit_lines(SCENARIO), "fixture").await;
    let of = |name: &str| {
        changes
            .iter()
            .find(|c| c.object.resource == "configmaps" && c.object.name == name)
            .unwrap_or_else(|| panic!("configmap {name}"))
    };
    let traced = of("traced").cpid.unwrap();
    assert_eq!(
        traced.cpid.to_string(),
        "4bf92f35-77b3-4da6-a3ce-929d0e0e4736"
    );
    assert_eq!(traced.origin, CpidOrigin::Traceparent);
    assert_eq!(of("forged").cpid, None);
    // Writes of objects no change reached carry none.
    assert_eq!(of("kube-root-ca.crt").cpid, None);
}

#[tokio::test]
async fn audit_spans_carry_cpid_attributes_users_can_search() {
    let (spans, errors) = kascade::offline::spans_from_audit_lines(
        common::audit_lines(SCENARIO),
        "fixture",
        Arc::new(load_rules(None).unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let with = |cpid: &str, origin: &str| {
        spans
            .iter()
            .filter(|s| {
                string_attr(&s.attributes, "cpid") == Some(cpid)
                    && string_attr(&s.attributes, "cpid.origin") == Some(origin)
            })
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    let bindings = |names: &[String]| {
        names
            .iter()
            .filter(|n| n.starts_with("system:kube-scheduler create binding"))
            .count()
    };
    // Two Pods per rollout, each bound once.
    assert_eq!(bindings(&with(FIRST, "inferred")), 2);
    assert_eq!(bindings(&with(SECOND, "inferred")), 2);
    assert!(
        with(SECOND, "annotation")
            .iter()
            .any(|n| n == "kascade-e2e-admin patch"),
        "{:?}",
        with(SECOND, "annotation")
    );
}

//! Unit tests of `checks`.

use super::*;

/// What `kascade doctor` gathered from the real harness, healthy and
/// with each fault made (tests/e2e_doctor.rs captures them).
fn captured(name: &str) -> Inputs {
    let path = format!(
        "{}/e2e/fixtures/doctor/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let inputs: Inputs = serde_json::from_str(&text).unwrap();
    assert_eq!(inputs.schema, super::super::INPUTS_SCHEMA);
    inputs
}

const MAX_SKEW_MS: i64 = 2000;

fn get(checks: &[Check], id: &str) -> Check {
    checks.iter().find(|c| c.id == id).cloned().unwrap()
}

/// Each fault fails its own check, and only the checks it affects; the
/// healthy harness fails none (every check judged both ways).
#[test]
fn each_captured_fault_fails_its_check_and_the_healthy_harness_none() {
    let healthy = judge(&captured("healthy"), MAX_SKEW_MS);
    assert!(!broken(&healthy));
    for c in &healthy {
        let want = if c.id == "admission-webhook" {
            Status::Skip
        } else {
            Status::Ok
        };
        assert_eq!(c.status, want, "{c:?}");
    }
    let cases: &[(&str, &[&str])] = &[
        ("metadata-policy", &["audit-level"]),
        ("no-webhook", &["audit-events"]),
        ("wrong-cluster-name", &["audit-events", "cluster-names"]),
        (
            "rbac-denied",
            &["audit-events", "cluster-names", "watch-rbac"],
        ),
        (
            "jaeger-down",
            &["audit-events", "cluster-names", "watch-rbac", "export"],
        ),
    ];
    for (name, failing) in cases {
        let checks = judge(&captured(name), MAX_SKEW_MS);
        assert!(broken(&checks), "{name}");
        for c in &checks {
            if failing.contains(&c.id.as_str()) {
                assert_eq!(c.status, Status::Fail, "{name}: {c:?}");
                assert!(c.fix.is_some(), "{name}: {c:?}");
            } else {
                assert_ne!(c.status, Status::Fail, "{name}: {c:?}");
            }
        }
    }
}

#[test]
fn the_failing_checks_name_the_fault_and_its_fix() {
    let c = get(
        &judge(&captured("metadata-policy"), MAX_SKEW_MS),
        "audit-level",
    );
    assert!(
        c.summary.contains("level Metadata") && c.summary.contains("pods ("),
        "{c:?}"
    );
    assert!(c.fix.unwrap().contains("RequestResponse"));

    let c = get(&judge(&captured("no-webhook"), MAX_SKEW_MS), "audit-events");
    assert!(
        c.summary.starts_with("no audit event from cluster remote"),
        "{c:?}"
    );
    assert!(c.fix.unwrap().contains("/audit/remote"));

    let c = get(
        &judge(&captured("wrong-cluster-name"), MAX_SKEW_MS),
        "cluster-names",
    );
    assert!(
        c.summary.contains("\"remote-typo\"") && c.summary.contains("none as \"remote\""),
        "{c:?}"
    );
    assert!(
        c.fix
            .unwrap()
            .contains("/audit/remote-typo to /audit/remote")
    );

    let c = get(&judge(&captured("rbac-denied"), MAX_SKEW_MS), "watch-rbac");
    assert!(c.summary.contains("configmaps (list, watch)"), "{c:?}");
    assert!(c.fix.unwrap().contains("--resource=configmaps"));

    let c = get(&judge(&captured("jaeger-down"), MAX_SKEW_MS), "export");
    assert!(
        c.summary.contains(": failing") && c.summary.contains("last error"),
        "{c:?}"
    );
    assert!(c.fix.unwrap().contains("is Jaeger up?"));
}

/// The skew is made by moving the captured apiserver reading (a host
/// whose clock is off cannot be made here without root).
#[test]
fn clock_skew_beyond_the_limit_fails_either_way() {
    let inputs = captured("healthy");
    assert_eq!(
        get(&judge(&inputs, MAX_SKEW_MS), "clock-skew").status,
        Status::Ok
    );
    for shift in [10_000i64, -10_000] {
        let mut skewed = inputs.clone();
        let Some(Probe::Ok(r)) = &mut skewed.apiserver_clock else {
            panic!("the capture has the apiserver's clock");
        };
        r.remote_ms = (r.remote_ms as i64 + shift) as u64;
        let c = get(&judge(&skewed, MAX_SKEW_MS), "clock-skew");
        assert_eq!(c.status, Status::Fail, "{shift}: {c:?}");
        let side = if shift > 0 { "ahead of" } else { "behind" };
        assert!(c.summary.contains(side), "{c:?}");
        // A looser limit takes it.
        assert_eq!(
            get(&judge(&skewed, 20_000), "clock-skew").status,
            Status::Ok
        );
    }
}

#[test]
fn an_unreachable_collector_or_frontend_fails_with_where_to_look() {
    let mut inputs = captured("healthy");
    inputs.intake = Probe::Failed("connection refused".to_string());
    let checks = judge(&inputs, MAX_SKEW_MS);
    let c = get(&checks, "collector");
    assert_eq!(c.status, Status::Fail);
    assert!(c.fix.unwrap().contains("--admin-listen"));
    // Nothing is judged of what the collector would have said.
    assert!(checks.iter().all(|c| c.id != "audit-events"));

    let mut inputs = captured("healthy");
    inputs.frontend = Some(Probe::Ok(super::super::FrontendProbe {
        status: 503,
        body: "the raw store does not answer: connection refused".to_string(),
    }));
    let c = get(&judge(&inputs, MAX_SKEW_MS), "frontend");
    assert_eq!(c.status, Status::Fail);
    assert!(c.summary.contains("connection refused"), "{c:?}");
}

/// The resources doctor requires are those the Helm chart grants.
#[test]
fn needed_resources_are_what_the_chart_grants() {
    let path = format!(
        "{}/deploy/helm/kascade/values.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let values: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut granted = Vec::new();
    for rule in values["rbac"]["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                let (g, r) = (group.as_str().unwrap(), r.as_str().unwrap());
                granted.push(if g.is_empty() {
                    r.to_string()
                } else {
                    format!("{r}.{g}")
                });
            }
        }
    }
    granted.sort();
    let mut needed: Vec<String> = NEEDED_RESOURCES.iter().map(|s| s.to_string()).collect();
    needed.sort();
    assert_eq!(needed, granted);
}

/// The admission source judged on the healthy harness's report with the
/// admission fields a collector serving it adds (kascade's own report, not
/// the apiserver's: derived here, as tests/e2e_admission/ exercises the
/// source itself): calls arriving and shown stored, none arriving, most
/// never shown stored.
#[test]
fn the_admission_source_is_ok_when_its_writes_show_stored_and_fails_when_none_arrive() {
    let mut inputs = captured("healthy");
    let cluster = judged_cluster(&inputs);
    let Probe::Ok(report) = &mut inputs.intake else {
        panic!("the healthy harness has an intake report")
    };
    report.admission_source = true;
    if !report.watched_clusters.contains(&cluster) {
        report.watched_clusters.push(cluster.clone());
    }
    let with = |inputs: &mut Inputs, counts: &[(&str, u64)]| {
        let Probe::Ok(report) = &mut inputs.intake else {
            unreachable!()
        };
        report.admitted.insert(
            cluster.clone(),
            counts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        );
        get(&judge(inputs, MAX_SKEW_MS), "admission-webhook")
    };
    let ok = with(
        &mut inputs,
        &[("persisted", 120), ("not_persisted", 3), ("gone", 2)],
    );
    assert_eq!(ok.status, Status::Ok, "{ok:?}");
    assert!(ok.summary.contains("125 admitted writes"), "{ok:?}");
    let none = with(&mut inputs, &[("persisted", 0)]);
    assert_eq!(none.status, Status::Fail, "{none:?}");
    assert!(
        none.fix.as_deref().unwrap().contains("/admission/"),
        "{none:?}"
    );
    let lost = with(&mut inputs, &[("persisted", 5), ("not_persisted", 40)]);
    assert_eq!(lost.status, Status::Warn, "{lost:?}");
    let Probe::Ok(report) = &mut inputs.intake else {
        unreachable!()
    };
    report.watched_clusters.retain(|c| c != &cluster);
    let unwatched = get(&judge(&inputs, MAX_SKEW_MS), "admission-webhook");
    assert_eq!(unwatched.status, Status::Fail, "{unwatched:?}");
}

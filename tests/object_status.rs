//! The readiness each audit and watch span carries (`object.status`,
//! `object.status.message`), over the scenarios captured from the real
//! control plane (e2e/fixtures) run through the offline processor. The
//! expected values are what each scenario did to its objects (read in its
//! audit log and watch streams), not kascade's output.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::{DEFAULT_REDACT_PATHS, Redactor};
use kascade::test_support::offline::spans_from_audit_lines;
use kascade::test_support::source::audit::AuditFilter;
use kascade::test_support::span_model::{Span, attr as key};
use opentelemetry_proto::tonic::common::v1::any_value;
use serde_json::Value;

fn attr(s: &Span, k: &str) -> Option<String> {
    let kv = s.attributes.iter().find(|kv| kv.key == k)?;
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(v) => Some(v.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

async fn build(scenario: &str) -> Vec<Span> {
    let (spans, errors) = spans_from_audit_lines(
        common::audit_lines(scenario),
        "fixture",
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(Some(
            kascade::test_support::aggregate::redact::PathPattern::new(DEFAULT_REDACT_PATHS)
                .unwrap(),
        )),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    spans
}

/// The object span's (resource, name) of each span, by the span's parent.
fn owner<'a>(spans: &'a [Span], s: &Span) -> (&'a str, String) {
    let object = spans
        .iter()
        .find(|o| o.span_id == s.parent_span_id)
        .expect("every audit and watch span has its object span");
    let resource = object
        .attributes
        .iter()
        .find(|kv| kv.key == key::RESOURCE)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(v) => Some(v.as_str()),
            _ => None,
        })
        .unwrap();
    (resource, attr(object, key::NAME).unwrap())
}

/// `(status, message)` of every span of `kind` (`audit`/`watch`) on the
/// object, in emission order (the processor keeps each object's order);
/// `None` where the span carries no status.
fn statuses(
    spans: &[Span],
    kind: &str,
    resource: &str,
    name: &str,
) -> Vec<Option<(String, String)>> {
    spans
        .iter()
        .filter(|s| attr(s, key::SPAN_KIND).as_deref() == Some(kind))
        .filter(|s| owner(spans, s) == (resource, name.to_string()))
        .map(|s| {
            attr(s, key::OBJECT_STATUS)
                .map(|st| (st, attr(s, key::OBJECT_STATUS_MESSAGE).unwrap_or_default()))
        })
        .collect()
}

fn st(status: &str, message: &str) -> Option<(String, String)> {
    Some((status.to_string(), message.to_string()))
}

/// The last status an object's audit spans report.
fn last_status(spans: &[Span], resource: &str, name: &str) -> Option<(String, String)> {
    statuses(spans, "audit", resource, name)
        .into_iter()
        .flatten()
        .last()
}

#[tokio::test]
async fn the_deployment_scenario_ends_with_its_rollout_current() {
    let spans = build("deployment").await;
    // (The scenario starts with a delete of any earlier copy: 404, no status.)
    let deployment: Vec<_> = statuses(&spans, "audit", "deployments", "hello")
        .into_iter()
        .filter(Option::is_some)
        .collect();
    // Created: nothing observed yet. During the image rollout, waiting for
    // updated replicas. At the end (scaled to 2): current.
    assert_eq!(
        deployment[0],
        st(
            "InProgress",
            "generation 1 not yet observed by the controller"
        )
    );
    assert!(
        deployment.contains(&st("InProgress", "3/5 updated")),
        "{deployment:#?}"
    );
    assert_eq!(
        last_status(&spans, "deployments", "hello"),
        st("Current", "2/2 available")
    );
    assert_eq!(
        last_status(&spans, "replicasets", "hello-746c57458c"),
        st("Current", "2/2 available")
    );
    assert_eq!(
        last_status(&spans, "replicasets", "hello-54f9b65d48"),
        st("Current", "scaled to 0")
    );
    // Every Pod: created Pending, then running and ready, then deleted (the
    // scenario deletes them all; the delete answers with the Pod in its
    // grace period).
    let pods = common::created("deployment", "pods");
    assert!(pods.len() >= 8, "{pods:?}");
    for pod in &pods {
        let seen: Vec<_> = statuses(&spans, "audit", "pods", pod)
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(
            seen.first().map(|s| s.1.as_str()),
            Some("Pending: not yet scheduled"),
            "{pod}: {seen:?}"
        );
        assert!(
            seen.contains(&("Current".into(), "Running, ready".into())),
            "{pod}: {seen:?}"
        );
        assert_eq!(
            seen.last().map(|s| s.0.as_str()),
            Some("Terminating"),
            "{pod}: {seen:?}"
        );
    }
}

#[tokio::test]
async fn the_job_scenario_ends_complete_with_its_pods_succeeded() {
    let spans = build("job").await;
    assert_eq!(
        last_status(&spans, "jobs", "pi"),
        st("Current", "complete: 3/3 succeeded")
    );
    let pods = common::created("job", "pods");
    assert_eq!(pods.len(), 3, "{pods:?}");
    for pod in &pods {
        assert_eq!(
            last_status(&spans, "pods", pod),
            st("Current", "Succeeded"),
            "{pod}"
        );
    }
}

#[tokio::test]
async fn the_statefulset_and_service_scenarios_end_current() {
    let spans = build("statefulset").await;
    // Scaled 3 → 1 at the end.
    assert_eq!(
        last_status(&spans, "statefulsets", "db"),
        st("Current", "1/1 ready")
    );
    assert_eq!(
        last_status(&spans, "pods", "db-0"),
        st("Current", "Running, ready")
    );
    let spans = build("service").await;
    assert_eq!(
        last_status(&spans, "deployments", "web"),
        st("Current", "1/1 available")
    );
}

#[tokio::test]
async fn writes_that_leave_no_known_readiness_carry_no_status() {
    for scenario in ["deployment", "config", "service", "statefulset", "job"] {
        let spans = build(scenario).await;
        for s in spans
            .iter()
            .filter(|s| attr(s, key::SPAN_KIND).as_deref() == Some("audit"))
        {
            let (resource, name) = owner(&spans, s);
            let code: i64 = attr(s, key::AUDIT_CODE).unwrap().parse().unwrap();
            let status = attr(s, key::OBJECT_STATUS);
            // Failed writes (404 deletes, 409 conflicts) changed nothing;
            // ConfigMaps, Secrets, ClusterIP Services… have no readiness; a
            // binding answers with a Status (kascade still knows the Pod).
            if code >= 400
                || matches!(
                    resource,
                    "configmaps"
                        | "secrets"
                        | "services"
                        | "endpoints"
                        | "endpointslices"
                        | "namespaces"
                        | "serviceaccounts"
                        | "controllerrevisions"
                        | "ipaddresses"
                )
            {
                assert_eq!(status, None, "{scenario} {resource} {name} ({code})");
            } else if matches!(
                resource,
                "pods" | "deployments" | "replicasets" | "statefulsets" | "jobs"
            ) && attr(s, key::AUDIT_VERB).as_deref() != Some("delete")
            {
                assert!(status.is_some(), "{scenario} {resource} {name} ({code})");
            }
        }
    }
}

/// The deployment scenario with the Pods' writes left out of the audit log
/// (a Metadata-level policy for pods): their changes reach the trace through
/// the list-watch alone, as watch spans.
async fn pods_from_the_watch_only() -> Vec<Span> {
    use kascade::test_support::aggregate::Processor;
    use kascade::test_support::aggregate::span_cache::LocalSpanCache;
    use kascade::test_support::flow::{WatchChange, WatchKind};
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::model::ObjectRef;

    let metrics = Arc::new(Metrics::default());
    let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 16);
    let processor = Processor::new(
        ProcessorConfig {
            // Whatever waits for its audit event is shown by the final flush.
            watch_audit_wait: Duration::from_secs(3600),
            ..ProcessorConfig::default()
        },
        Redactor::new(None),
        Arc::new(RuleSources::default().load().unwrap()),
        Arc::new(LocalSpanCache::new(1 << 16, Duration::from_secs(7200))),
        tx,
        metrics.clone(),
    );
    for line in common::audit_lines("deployment") {
        let raw: Value = serde_json::from_str(&line).unwrap();
        if raw["objectRef"]["resource"] == "pods" {
            continue;
        }
        let ev = kascade::test_support::source::audit::parse_event(&line).unwrap();
        if let Some(item) =
            kascade::test_support::source::accept(ev, "fixture", &AuditFilter::default(), &metrics)
        {
            processor.process(&item).await.unwrap();
        }
    }
    let stream =
        std::fs::read_to_string(common::fixture_path("deployment", "watch/core.pods.jsonl"))
            .unwrap();
    for line in stream.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        let kind = match ev["type"].as_str().unwrap() {
            "ADDED" => WatchKind::Added,
            "MODIFIED" => WatchKind::Modified,
            "DELETED" => WatchKind::Deleted,
            _ => continue,
        };
        let state = ev["object"].clone();
        let object = ObjectRef::new(
            "fixture",
            "",
            "pods",
            state["metadata"]["namespace"].as_str().unwrap(),
            state["metadata"]["name"].as_str().unwrap(),
        );
        processor
            .process_watch(WatchChange {
                object,
                kind,
                state: kascade::test_support::json::parse(&state.to_string()).unwrap(),
                observed: std::time::SystemTime::now(),
            })
            .await
            .unwrap();
    }
    processor.flush_watch(true).await.unwrap();
    drop(processor);
    let mut out = Vec::new();
    while let Some(s) = rx.recv().await {
        out.push(s.decode());
    }
    out
}

#[tokio::test]
async fn watch_spans_carry_the_status_of_the_version_seen() {
    let spans = pods_from_the_watch_only().await;
    let stream =
        std::fs::read_to_string(common::fixture_path("deployment", "watch/core.pods.jsonl"))
            .unwrap();
    let pods: BTreeSet<String> = stream
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|ev| {
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(pods.len() >= 8, "{pods:?}");
    for pod in &pods {
        let seen = statuses(&spans, "watch", "pods", pod);
        // added (Pending) … running and ready … deletion requested, then the
        // deletion itself, which leaves no readiness to report.
        assert_eq!(
            seen.first(),
            Some(&st("InProgress", "Pending: not yet scheduled")),
            "{pod}: {seen:?}"
        );
        assert!(
            seen.contains(&st("Current", "Running, ready")),
            "{pod}: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&None), "{pod}: deleted: {seen:?}");
        assert_eq!(
            seen[seen.len() - 2].as_ref().map(|s| s.0.as_str()),
            Some("Terminating"),
            "{pod}: {seen:?}"
        );
    }
}

/// The message of the `kind` condition in the last response of a write to
/// the object, as its controller or the scheduler wrote it.
fn last_condition_message(scenario: &str, resource: &str, name: &str, kind: &str) -> String {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| {
            e["objectRef"]["resource"] == resource
                && e["responseObject"]["metadata"]["name"] == name
        })
        .filter_map(|e| {
            e["responseObject"]["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == kind)
                .map(|c| c["message"].as_str().unwrap().to_string())
        })
        .next_back()
        .unwrap_or_else(|| panic!("{scenario}: no {kind} condition on {resource} {name}"))
}

#[tokio::test]
async fn an_unschedulable_pod_ends_failed_with_the_schedulers_message() {
    let spans = build("unschedulable").await;
    let message = last_condition_message("unschedulable", "pods", "stuck", "PodScheduled");
    assert_eq!(
        last_status(&spans, "pods", "stuck"),
        st("Failed", &format!("Unschedulable: {message}"))
    );
}

#[tokio::test]
async fn a_quota_denied_deployment_ends_failed_with_the_quota_message() {
    let spans = build("quota").await;
    let message = last_condition_message(
        "quota",
        "replicasets",
        "capped-689c6ccc5c",
        "ReplicaFailure",
    );
    assert!(message.contains("exceeded quota"), "{message}");
    let expected = st("Failed", &format!("FailedCreate: {message}"));
    assert_eq!(
        last_status(&spans, "replicasets", "capped-689c6ccc5c"),
        expected
    );
    assert_eq!(last_status(&spans, "deployments", "capped"), expected);
    // The one Pod the quota let through runs.
    assert_eq!(
        last_status(&spans, "pods", "capped-689c6ccc5c-tbc4b"),
        st("Current", "Running, ready")
    );
}

#[tokio::test]
async fn a_stuck_rollout_ends_failed_past_its_deadline_with_its_pod_unschedulable() {
    let spans = build("rollout-stuck").await;
    let deadline = last_condition_message("rollout-stuck", "deployments", "web", "Progressing");
    assert_eq!(
        last_status(&spans, "deployments", "web"),
        st("Failed", &format!("ProgressDeadlineExceeded: {deadline}"))
    );
    // Before the deadline, the rollout was shown waiting.
    assert!(
        statuses(&spans, "audit", "deployments", "web").contains(&st("InProgress", "1/2 updated"))
    );
    let unschedulable = last_condition_message(
        "rollout-stuck",
        "pods",
        "web-f8bbf54d-8hb4q",
        "PodScheduled",
    );
    assert_eq!(
        last_status(&spans, "pods", "web-f8bbf54d-8hb4q"),
        st("Failed", &format!("Unschedulable: {unschedulable}"))
    );
    // The new ReplicaSet waits for its Pod; the old one keeps serving.
    assert_eq!(
        last_status(&spans, "replicasets", "web-f8bbf54d"),
        st("InProgress", "0/1 ready")
    );
    assert_eq!(
        last_status(&spans, "replicasets", "web-7d876db474"),
        st("Current", "2/2 available")
    );
}

//! Live sources: clusters, searches after new writes, errors, Events
//! from audit and watch, watch diffs, a second cluster.

use super::*;

#[tokio::test]
#[ignore]
async fn a_cluster_list_offers_every_cluster_stored() {
    // Before any trace of cluster B was assembled: the operations (clusters)
    // come from what the raw Jaeger stores.
    let ops: Value = reqwest::get(format!(
        "{}/api/v3/operations?service=tracing",
        env("JAEGER_UI_URL")
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let names: BTreeSet<&str> = ops["operations"]
        .as_array()
        .unwrap_or_else(|| panic!("{ops}"))
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    for c in [env("CLUSTER_NAME"), env("CLUSTER_B_NAME")] {
        assert!(names.contains(c.as_str()), "{c} missing: {ops}");
    }
}

#[tokio::test]
#[ignore]
async fn each_searched_replicaset_shows_its_own_pods_and_names_itself() {
    // rollout-stuck: two ReplicaSets of Deployment web, each with Pods.
    let tags = serde_json::json!({"resource": "replicasets", "namespace": "rollout-demo"});
    let traces = ui_search("tracing", tags, |t| t.len() == 2).await;
    for trace in &traces {
        let spans = trace["spans"].as_array().unwrap();
        let root = spans.iter().find(|s| parent_of(s).is_none()).unwrap();
        let title = root["operationName"].as_str().unwrap();
        let searched = title
            .strip_prefix("rollout-demo/web ▸ replicasets ")
            .unwrap_or_else(|| panic!("result titled {title}"));
        let rs = spans
            .iter()
            .find(|s| s["operationName"] == searched)
            .unwrap();
        let rs_id = rs["spanID"].as_str().unwrap();
        let pods = spans
            .iter()
            .filter(|s| parent_of(s) == Some(rs_id) && service_of(trace, s) == "pods")
            .count();
        assert!(pods >= 1, "{searched} shown without its Pods");
    }
}

#[tokio::test]
#[ignore]
async fn a_second_search_after_new_writes_shows_them() {
    let name = format!("fresh-{}", std::process::id());
    kubectl(&[
        "create",
        "configmap",
        &name,
        "-n",
        "default",
        "--from-literal=k=1",
    ]);
    let tags = serde_json::json!({"resource": "configmaps", "namespace": "default", "name": name});
    let creates = |t: &[Value]| {
        t.len() == 1
            && t[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| log_names(s).iter().any(|n| n.ends_with(" create")))
    };
    let first = ui_search("tracing", tags.clone(), creates).await;
    let first_id = first[0]["traceID"].as_str().unwrap().to_string();
    kubectl(&[
        "label",
        "configmap",
        &name,
        "-n",
        "default",
        "kascade.io/step=2",
    ]);
    // The next searches show the label's patch: not the trace assembled
    // (and cached) at the first search.
    let second = ui_search("tracing", tags, |t| {
        t.len() == 1
            && t[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| log_names(s).iter().any(|n| n.ends_with(" patch")))
    })
    .await;
    assert_ne!(second[0]["traceID"].as_str().unwrap(), first_id);
    kubectl(&["delete", "configmap", &name, "-n", "default"]);
}

#[tokio::test]
#[ignore]
async fn the_ui_shows_the_unschedulable_pod_in_error() {
    let tags = serde_json::json!({"resource": "pods", "namespace": "sched-demo", "name": "stuck"});
    let traces = ui_search("tracing", tags, |t| {
        t.len() == 1 && t[0]["spans"].as_array().unwrap().iter().any(has_error_tag)
    })
    .await;
    let spans = traces[0]["spans"].as_array().unwrap();
    let pod = spans
        .iter()
        .find(|s| {
            s["operationName"]
                .as_str()
                .unwrap()
                .contains("sched-demo/stuck")
        })
        .unwrap();
    assert!(has_error_tag(pod), "{pod}");
}

#[tokio::test]
#[ignore]
async fn an_unschedulable_pod_carries_failed_scheduling_as_an_error() {
    let tags = serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "pods", "namespace": "sched-demo", "name": "stuck"});
    let is_failed = |s: &Value| tag_str(s, "event.reason") == Some("FailedScheduling");
    let traces = search(tags, |t| spans_of(t).iter().any(is_failed)).await;
    let spans = spans_of(&traces);
    let ev = spans.iter().find(|s| is_failed(s)).unwrap();
    assert_eq!(tag_str(ev, "otel.status_code"), Some("ERROR"));
    assert_eq!(tag_str(ev, "event.type"), Some("Warning"));
    assert!(
        tag_str(ev, "event.message").is_some_and(|m| m.contains("didn't match")),
        "{ev}"
    );
}

#[tokio::test]
#[ignore]
async fn writes_carry_the_readiness_they_left_and_failed_ones_are_searchable() {
    let cluster = env("CLUSTER_NAME");
    // The scheduler's status patch leaves the Pod Failed: Unschedulable, with
    // the scheduler's own words.
    let tags = serde_json::json!({"cluster": cluster, "resource": "pods", "namespace": "sched-demo", "name": "stuck"});
    let unschedulable = |s: &Value| {
        tag_str(s, "kascade.span") == Some("audit")
            && tag_str(s, "object.status") == Some("Failed")
            && tag_str(s, "object.status.message")
                .is_some_and(|m| m.starts_with("Unschedulable: 0/") && m.contains("didn't match"))
    };
    search(tags, |t| spans_of(t).iter().any(unschedulable)).await;
    // The raw Jaeger finds it by that tag alone.
    let failed = serde_json::json!({"object.status": "Failed"});
    search(failed, |t| spans_of(t).iter().any(unschedulable)).await;
    // The deployment scenario's Deployment: in progress during its rollout,
    // current at the end (scaled to 2, all available).
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "namespace": "default", "name": "hello"});
    let settled = |s: &Value| {
        tag_str(s, "object.status") == Some("Current")
            && tag_str(s, "object.status.message") == Some("2/2 available")
    };
    let traces = search(tags, |t| spans_of(t).iter().any(settled)).await;
    let spans = spans_of(&traces);
    assert!(
        spans.iter().any(|s| {
            tag_str(s, "object.status") == Some("InProgress")
                && tag_str(s, "object.status.message").is_some_and(|m| m.ends_with(" updated"))
        }),
        "no write during the rollout shows it waiting for updated replicas"
    );
}

#[tokio::test]
#[ignore]
async fn quota_denied_pod_creates_are_error_spans_on_their_replicaset() {
    // e2e/scenarios/quota.sh: the ReplicaSet controller's Pod creates beyond
    // the quota are refused (403) before the Pod has a name.
    let tags = serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "replicasets", "namespace": "quota-demo"});
    let is_denied = |s: &Value| {
        tag_str(s, "kascade.span") == Some("audit")
            && tag(s, "audit.code") == Some(&Value::from(403))
    };
    let is_failed_create = |s: &Value| tag_str(s, "event.reason") == Some("FailedCreate");
    let traces = search(tags, |t| {
        let spans = spans_of(t);
        spans.iter().any(is_denied) && spans.iter().any(is_failed_create)
    })
    .await;
    let spans = spans_of(&traces);
    let denied: Vec<&Value> = spans.iter().filter(|s| is_denied(s)).collect();
    for s in &denied {
        assert_eq!(tag_str(s, "otel.status_code"), Some("ERROR"), "{s}");
        assert!(
            tag_str(s, "otel.status_description").is_some_and(|m| m.contains("exceeded quota")),
            "{s}"
        );
        assert_eq!(tag_str(s, "audit.attempt.resource"), Some("pods"), "{s}");
        let prefix = tag_str(s, "audit.attempt.generate_name").unwrap_or_default();
        assert!(
            s["operationName"]
                .as_str()
                .is_some_and(|n| n.ends_with(&format!(
                    "replicaset-controller create pods (generateName {prefix})"
                ))),
            "{s}"
        );
    }
    assert!(!denied.is_empty());
}

#[tokio::test]
#[ignore]
async fn each_event_occurrence_is_one_span_although_audit_and_watch_both_report_it() {
    // Every Event of the deployment scenario is written through the audit
    // log and seen by the Event watch.
    let tags = serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "deployments", "namespace": "default", "name": "hello"});
    let traces = search(tags, |t| {
        spans_of(t)
            .iter()
            .any(|s| tag_str(s, "event.reason") == Some("ScalingReplicaSet"))
    })
    .await;
    let seen = stored_event_spans(&trace_ids(&traces)).await;
    assert!(!seen.is_empty());
    let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "duplicated Event spans: {dups:?}");
}

#[tokio::test]
#[ignore]
async fn a_service_links_to_its_pods_and_endpointslices() {
    let tags = serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "services", "namespace": "svc-demo", "name": "web"});
    let links = |t: &[Value], resource: &str| -> BTreeSet<String> {
        spans_of(t)
            .iter()
            .filter(|s| {
                tag_str(s, "kascade.span") == Some("link")
                    && tag_str(s, "link.resource") == Some(resource)
            })
            .filter_map(|s| tag_str(s, "link.name").map(str::to_string))
            .collect()
    };
    let traces = search(tags, |t| {
        links(t, "pods").len() >= 2 && !links(t, "endpointslices").is_empty()
    })
    .await;
    let pods = links(&traces, "pods");
    assert!(pods.iter().all(|p| p.starts_with("web-")), "{pods:?}");
}

#[tokio::test]
#[ignore]
async fn a_metadata_level_pod_update_shows_its_diff_from_the_watch() {
    let cluster_b = env("CLUSTER_B_NAME");
    let tags = serde_json::json!({"cluster": cluster_b, "resource": "pods", "namespace": "remote-demo", "name": "labeled"});
    let relabel = |s: &Value| {
        tag_str(s, "kascade.span") == Some("watch")
            && log_fields(s).iter().any(|f| {
                f.get("diff.path").and_then(Value::as_str) == Some("metadata.labels.stage")
            })
    };
    let traces = search(tags, |t| spans_of(t).iter().any(relabel)).await;
    let spans = spans_of(&traces);
    let span = spans.iter().find(|s| relabel(s)).unwrap();
    let f = log_fields(span)
        .into_iter()
        .find(|f| f.get("diff.path").and_then(Value::as_str) == Some("metadata.labels.stage"))
        .unwrap();
    assert_eq!(f["diff.old"], "\"one\"");
    assert_eq!(f["diff.new"], "\"two\"");
    // The Pod spans say which cluster they are in.
    assert!(
        spans
            .iter()
            .filter(|s| tag_str(s, "kascade.span") == Some("object"))
            .all(|s| tag_str(s, "cluster") == Some(cluster_b.as_str()))
    );
}

#[tokio::test]
#[ignore]
async fn an_object_in_cluster_b_linked_to_cluster_a_appears_under_it() {
    let cluster_b = env("CLUSTER_B_NAME");
    let expected = format!("remote-demo/linked (cluster {cluster_b})");
    let traces = ui_search(
        "tracing",
        serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "deployments", "name": "hello"}),
        |t| {
            t.len() == 1
                && t[0]["spans"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["operationName"] == expected.as_str())
        },
    )
    .await;
    let trace = &traces[0];
    let spans = trace["spans"].as_array().unwrap();
    let root = spans.iter().find(|s| parent_of(s).is_none()).unwrap();
    let linked = spans
        .iter()
        .find(|s| s["operationName"] == expected.as_str())
        .unwrap();
    assert_eq!(parent_of(linked), root["spanID"].as_str());
    assert_eq!(service_of(trace, linked), "configmaps");
}

//! The collector's spans in the raw Jaeger, against a real control plane.

use super::*;

#[tokio::test]
#[ignore]
async fn jaeger_finds_the_deployment_span_with_its_audit_spans() {
    let cluster = env("CLUSTER_NAME");
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "namespace": "default", "name": "hello"});
    let has_delete = |traces: &[Value]| {
        spans_of(traces)
            .iter()
            .any(|s| tag_str(s, "audit.verb") == Some("delete"))
    };
    let traces = search(tags, has_delete).await;
    let spans = spans_of(&traces);
    let object = spans
        .iter()
        .find(|s| {
            tag_str(s, "kascade.span") == Some("object") && tag_str(s, "name") == Some("hello")
        })
        .expect("the Deployment's object span");
    assert_eq!(tag_str(object, "k8s.deployment.name"), Some("hello"));
    assert_eq!(tag_str(object, "cluster"), Some(cluster.as_str()));
    // The object's uid reaches Jaeger, even in windows whose first write
    // knew none (the span is sent again with it).
    let with_uid = spans
        .iter()
        .filter(|s| {
            tag_str(s, "kascade.span") == Some("object") && tag_str(s, "name") == Some("hello")
        })
        .find_map(|s| Some((tag_str(s, "uid")?, tag_str(s, "k8s.deployment.uid"))))
        .expect("an object span of hello with the uid");
    assert!(is_uid(with_uid.0), "{with_uid:?}");
    assert_eq!(with_uid.1, Some(with_uid.0));
    let ops: BTreeSet<&str> = spans
        .iter()
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    assert!(ops.contains("kascade-e2e-admin create"), "{ops:?}");
    assert!(ops.contains("kascade-e2e-admin patch scale"), "{ops:?}");
    assert!(ops.contains("kascade-e2e-admin delete"), "{ops:?}");
    assert!(
        ops.iter()
            .any(|o| o.contains("deployment-controller update status")),
        "{ops:?}"
    );
    // The image change is a diff log on the user's patch.
    let image_diff = spans
        .iter()
        .flat_map(|s| s["logs"].as_array().cloned().unwrap_or_default())
        .any(|l| {
            let f: HashMap<String, String> = l["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["key"].as_str().unwrap().to_string(),
                        f["value"].to_string(),
                    )
                })
                .collect();
            f.get("diff.path")
                .is_some_and(|p| p.contains("spec.template.spec.containers[nginx].image"))
                && f.get("diff.new").is_some_and(|v| v.contains("nginx:1.28"))
        });
    assert!(image_diff, "no image diff on the Deployment's writes");
}

#[tokio::test]
#[ignore]
async fn pod_spans_carry_links_to_their_replicaset_and_node() {
    let cluster = env("CLUSTER_NAME");
    let tags = serde_json::json!({"cluster": cluster, "resource": "pods", "namespace": "default", "kascade.span": "object"});
    let enough = |traces: &[Value]| {
        let spans = spans_of(traces);
        let pods = spans
            .iter()
            .filter(|s| {
                tag_str(s, "kascade.span") == Some("object")
                    && tag_str(s, "name").is_some_and(|n| n.starts_with("hello-"))
            })
            .count();
        let node_links = spans
            .iter()
            .filter(|s| tag_str(s, "link.resource") == Some("nodes"))
            .count();
        pods >= 7 && node_links >= 7
    };
    let traces = search(tags, enough).await;
    for trace in &traces {
        let spans = trace["spans"].as_array().unwrap();
        let Some(pod) = spans
            .iter()
            .find(|s| tag_str(s, "kascade.span") == Some("object"))
        else {
            continue;
        };
        let name = tag_str(pod, "name").unwrap();
        if !name.starts_with("hello-") {
            continue;
        }
        let links: Vec<(&str, &str, &str)> = spans
            .iter()
            .filter(|s| tag_str(s, "kascade.span") == Some("link"))
            .map(|s| {
                (
                    tag_str(s, "link.role").unwrap(),
                    tag_str(s, "link.resource").unwrap(),
                    tag_str(s, "link.name").unwrap(),
                )
            })
            .collect();
        assert!(
            links.iter().any(|(role, res, n)| *role == "parent"
                && *res == "replicasets"
                && name.starts_with(&format!("{n}-"))),
            "{name}: {links:?}"
        );
        assert!(
            links.iter().any(|(role, res, n)| *role == "child"
                && *res == "nodes"
                && n.starts_with("kwok-node-")),
            "{name}: {links:?}"
        );
    }
}

#[tokio::test]
#[ignore]
async fn replay_of_the_audit_log_gives_the_same_spans_as_the_webhook() {
    let cluster = env("CLUSTER_NAME");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replay.jsonl");
    replay(&[
        "--cluster",
        &cluster,
        "--output",
        &format!("otlp-json={}", out.display()),
    ]);
    // The Deployment's spans from the replay's OTLP/JSON, by trace: span ids
    // of its writes, Events and object span, and its relations.
    let kind_of = |s: &Value| {
        s["attributes"]
            .as_array()
            .and_then(|a| a.iter().find(|kv| kv["key"] == "kascade.span"))
            .and_then(|kv| kv["value"]["stringValue"].as_str())
            .unwrap_or("")
            .to_string()
    };
    let attr_of = |s: &Value, k: &str| {
        s["attributes"]
            .as_array()
            .and_then(|a| a.iter().find(|kv| kv["key"] == k))
            .and_then(|kv| kv["value"]["stringValue"].as_str())
            .unwrap_or("")
            .to_string()
    };
    let mut replayed: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut replayed_links: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let req: Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    let trace = s["traceId"].as_str().unwrap().to_string();
                    if kind_of(s) == "link" {
                        replayed_links.entry(trace).or_default().insert(format!(
                            "{} {} {}/{}",
                            attr_of(s, "link.role"),
                            attr_of(s, "link.class"),
                            attr_of(s, "link.resource"),
                            attr_of(s, "link.name")
                        ));
                    } else {
                        replayed
                            .entry(trace)
                            .or_default()
                            .insert(s["spanId"].as_str().unwrap().to_string());
                    }
                }
            }
        }
    }
    // ... and from Jaeger, fed by the webhook (and the list-watch).
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "namespace": "default", "name": "hello"});
    let traces = search(tags, |t| !t.is_empty()).await;
    let mut live_links = BTreeSet::new();
    let mut offline_links = BTreeSet::new();
    for trace in traces {
        let id = format!("{:0>32}", trace["traceID"].as_str().unwrap());
        let spans = trace["spans"].as_array().unwrap();
        // Writes, Events and the object span: the same spans, by id. Changes
        // only the list-watch saw are live-only by nature.
        let live: BTreeSet<String> = spans
            .iter()
            .filter(|s| !matches!(tag_str(s, "kascade.span"), Some("watch") | Some("link")))
            .map(|s| s["spanID"].as_str().unwrap().to_string())
            .collect();
        let Some(offline) = replayed.get(&id) else {
            // A window can exist live only: opened by changes only the
            // list-watch saw, or by a link from another cluster's object
            // (scenario crosscluster links to `hello`; when a half-hour
            // boundary falls between the two scenarios, that link opens a
            // window of its own). Anything else must be in the replay.
            let live_only = spans.iter().all(|s| match tag_str(s, "kascade.span") {
                Some("object") | Some("watch") => true,
                Some("link") => tag_str(s, "link.cluster") != Some(cluster.as_str()),
                _ => false,
            });
            assert!(live_only, "replay has no trace {id}: {spans:#?}");
            continue;
        };
        assert_eq!(&live, offline, "trace {id}: webhook and replay differ");
        // Relations: the same set over the object's windows (a relation the
        // watch saw first may sit in the window before a boundary), except
        // links from other clusters, which this audit log cannot know.
        for s in spans
            .iter()
            .filter(|s| tag_str(s, "kascade.span") == Some("link"))
        {
            if tag_str(s, "link.cluster") == Some(cluster.as_str()) {
                live_links.insert(format!(
                    "{} {} {}/{}",
                    tag_str(s, "link.role").unwrap_or(""),
                    tag_str(s, "link.class").unwrap_or(""),
                    tag_str(s, "link.resource").unwrap_or(""),
                    tag_str(s, "link.name").unwrap_or("")
                ));
            }
        }
        offline_links.extend(replayed_links.get(&id).cloned().unwrap_or_default());
    }
    assert_eq!(
        live_links, offline_links,
        "relations differ between webhook and replay"
    );
}

/// deep.sh, through the real apiserver: a ConfigMap annotated with a copy
/// of an object nested 10,000 levels, and a custom resource whose spec nests
/// 9,000. Each of them aborted the collector, for good (its spool replayed
/// the batch at every restart). Now both writes have their spans, the CR's
/// deep part a marker, counted.
#[tokio::test]
#[ignore]
async fn writes_nested_as_deep_as_the_apiserver_accepts_keep_their_spans() {
    let cluster = env("CLUSTER_NAME");
    for (resource, name, verb) in [
        ("configmaps", "deep-cm", "patch"),
        ("deepthings", "deep", "create"),
    ] {
        let tags = serde_json::json!({"cluster": cluster, "resource": resource, "namespace": "deep-demo", "name": name});
        let traces = search(tags, |t| {
            spans_of(t)
                .iter()
                .any(|s| tag_str(s, "audit.verb") == Some(verb))
        })
        .await;
        let spans = spans_of(&traces);
        assert!(
            spans
                .iter()
                .any(|s| tag_str(s, "kascade.span") == Some("object")
                    && tag_str(s, "name") == Some(name)),
            "{resource}/{name} has no object span"
        );
        if resource == "deepthings" {
            let marker = spans
                .iter()
                .any(|s| s.to_string().contains("nested deeper than 64 levels"));
            assert!(marker, "the custom resource's deep spec is not a marker");
        }
    }
    let metrics = kascade_metrics().await;
    let deep = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "kascade_audit_deep_values_total{{source=\"{cluster}\"}} "
            ))
        })
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(deep >= 1.0, "the deep spec was not counted: {metrics}");
}

#[tokio::test]
#[ignore]
async fn kascade_metrics_count_what_it_did() {
    let text = kascade_metrics().await;
    // Summed over the series `prefix` starts (e.g. every drop reason).
    let value = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        value("kascade_audit_events_accepted_total{source=\"webhook\"}") > 100.0,
        "{text}"
    );
    assert!(
        value("kascade_spans_exported_total{output=\"otlp\"}") > 100.0,
        "{text}"
    );
    assert_eq!(
        value("kascade_spans_dropped_total{"),
        0.0,
        "spans were dropped: {text}"
    );
    assert!(
        value("kascade_audit_events_filtered_total{reason=\"verb\"}") > 0.0,
        "reads are filtered: {text}"
    );
    // Both apiservers' policies set omitManagedFields (as
    // deploy/examples/audit-policy.yaml does): no event carried them, so
    // the counter has no series (a family without one is not exported).
    assert_eq!(
        value("kascade_audit_events_with_managed_fields_total"),
        0.0,
        "an apiserver logged managedFields despite omitManagedFields: {text}"
    );
}

//! End-to-end checks against the real harness, run by e2e/suite.sh after it
//! started the control plane, Jaeger and `kascade collect` and ran the
//! scenarios. Ignored in a plain `cargo test` (they need that environment).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::Value;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run these through e2e/suite.sh"))
}

fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

fn tag_str<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    tag(span, key).and_then(Value::as_str)
}

/// Jaeger's own search (`/api/traces`) by tags, polled until `ok` holds for the
/// result: kascade exports asynchronously.
async fn search(tags: Value, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let url = format!("{}/api/traces", env("JAEGER_QUERY_URL"));
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let resp: Value = client
            .get(&url)
            .query(&[
                ("service", "kascade"),
                ("tags", &tags.to_string()),
                ("lookback", "2h"),
                ("limit", "1000"),
            ])
            .send()
            .await
            .expect("Jaeger query API answers")
            .json()
            .await
            .unwrap();
        let traces = resp["data"].as_array().cloned().unwrap_or_default();
        if ok(&traces) {
            return traces;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Jaeger never had traces for {tags} that pass the check; last: {}",
            serde_json::to_string(&traces)
                .unwrap()
                .chars()
                .take(2000)
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn spans_of(traces: &[Value]) -> Vec<Value> {
    traces
        .iter()
        .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

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
    let st = std::process::Command::new(env("KASCADE_BIN"))
        .args(["replay", "--cluster", &cluster, "--output"])
        .arg(format!("otlp-json={}", out.display()))
        .arg(env("AUDIT_LOG"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // Span ids of the Deployment's trace(s), from the replay's OTLP/JSON ...
    let mut replayed: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let req: Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    replayed
                        .entry(s["traceId"].as_str().unwrap().to_string())
                        .or_default()
                        .insert(s["spanId"].as_str().unwrap().to_string());
                }
            }
        }
    }
    // ... and from Jaeger, fed by the webhook.
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "namespace": "default", "name": "hello"});
    let traces = search(tags, |t| !t.is_empty()).await;
    for trace in traces {
        let id = trace["traceID"].as_str().unwrap().to_string();
        let live: BTreeSet<String> = trace["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["spanID"].as_str().unwrap().to_string())
            .collect();
        let offline = replayed
            .get(&id)
            .unwrap_or_else(|| panic!("replay has no trace {id}"));
        assert_eq!(&live, offline, "trace {id}: webhook and replay differ");
    }
}

#[tokio::test]
#[ignore]
async fn kascade_metrics_count_what_it_did() {
    let text = reqwest::get(env("KASCADE_METRICS_URL"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        value("kascade_audit_events_accepted_total{source=\"webhook\"}") > 100.0,
        "{text}"
    );
    assert!(
        value("kascade_spans_exported_total{output=\"otlp\"}") > 100.0,
        "{text}"
    );
    assert_eq!(value("kascade_spans_dropped_total{output=\"otlp\"}"), 0.0);
    assert!(
        value("kascade_audit_events_filtered_total{reason=\"verb\"}") > 0.0,
        "reads are filtered: {text}"
    );
}

// ---- The read side: Jaeger v2 (UI/query tier) → kascade frontend → raw Jaeger.

/// The Jaeger UI's own search (`/api/traces` of the query tier, whose trace
/// storage is the kascade frontend), polled until `ok` holds.
async fn ui_search(service: &str, tags: Value, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let url = format!("{}/api/traces", env("JAEGER_UI_URL"));
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let resp: Value = client
            .get(&url)
            .query(&[
                ("service", service),
                ("tags", &tags.to_string()),
                ("lookback", "2h"),
                ("limit", "20"),
            ])
            .send()
            .await
            .expect("Jaeger query tier answers")
            .json()
            .await
            .unwrap();
        assert!(
            resp["errors"].is_null(),
            "the UI search failed: {}",
            resp["errors"]
        );
        let traces = resp["data"].as_array().cloned().unwrap_or_default();
        if ok(&traces) {
            return traces;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the UI never showed a trace for {tags} that passes the check; last: {}",
            serde_json::to_string(&traces)
                .unwrap()
                .chars()
                .take(2000)
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn service_of<'a>(trace: &'a Value, span: &Value) -> &'a str {
    trace["processes"][span["processID"].as_str().unwrap()]["serviceName"]
        .as_str()
        .unwrap()
}

fn parent_of(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
}

fn log_names(span: &Value) -> Vec<String> {
    span["logs"]
        .as_array()
        .map(|logs| {
            logs.iter()
                .filter_map(|l| {
                    l["fields"]
                        .as_array()?
                        .iter()
                        .find(|f| f["key"] == "event")
                        .and_then(|f| f["value"].as_str())
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
#[ignore]
async fn the_jaeger_ui_shows_one_assembled_trace_for_the_deployment() {
    let client = reqwest::Client::new();
    let ui = env("JAEGER_UI_URL");
    let services: Value = client
        .get(format!("{ui}/api/v3/services"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        services["services"],
        serde_json::json!(["tracing", "tree", "timeline", "grouped"])
    );

    // Complete once the delete (the scenario's last step) is in.
    let has_delete = |traces: &[Value]| {
        traces.len() == 1
            && traces[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| log_names(s).iter().any(|n| n.ends_with(" delete")))
    };
    let traces = ui_search(
        "tracing",
        serde_json::json!({"resource": "deployments", "name": "hello"}),
        has_delete,
    )
    .await;
    let trace = &traces[0];
    let spans = trace["spans"].as_array().unwrap();
    let roots: Vec<&Value> = spans.iter().filter(|s| parent_of(s).is_none()).collect();
    assert_eq!(roots.len(), 1);
    let root = roots[0];
    assert_eq!(service_of(trace, root), "deployments");
    assert_eq!(root["operationName"], "default/hello");
    let root_id = root["spanID"].as_str().unwrap();
    let replicasets: Vec<&Value> = spans
        .iter()
        .filter(|s| parent_of(s) == Some(root_id) && service_of(trace, s) == "replicasets")
        .collect();
    assert_eq!(replicasets.len(), 2, "before and after the image change");
    for rs in &replicasets {
        let rs_id = rs["spanID"].as_str().unwrap();
        let pods = spans
            .iter()
            .filter(|s| parent_of(s) == Some(rs_id) && service_of(trace, s) == "pods")
            .count();
        assert!(pods >= 2, "{} has {pods} pods", rs["operationName"]);
    }
    let logs = log_names(root);
    assert!(logs.iter().any(|n| n.ends_with(" patch scale")), "{logs:?}");
    assert!(
        logs.iter().any(|n| n == "event ScalingReplicaSet"),
        "{logs:?}"
    );
    let text = trace.to_string();
    assert!(text.contains("snapshot"), "the delete carries a snapshot");
    assert!(!text.contains("managedFields"));

    // The UI reloads the trace by id later.
    let id = trace["traceID"].as_str().unwrap();
    let reloaded: Value = client
        .get(format!("{ui}/api/traces/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reloaded["data"][0]["spans"].as_array().unwrap().len(),
        spans.len()
    );

    // Operations of a mode are the clusters.
    let ops: Value = client
        .get(format!("{ui}/api/v3/operations?service=tracing"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(ops.to_string().contains(&env("CLUSTER_NAME")), "{ops}");

    // Scope ancestors from the new ReplicaSet: the Deployment with only it.
    let newest = replicasets
        .iter()
        .max_by_key(|s| s["startTime"].as_u64())
        .unwrap()["operationName"]
        .as_str()
        .unwrap()
        .trim_start_matches("default/")
        .to_string();
    let traces = ui_search(
        "tracing",
        serde_json::json!({"resource": "replicasets", "name": newest, "scope": "ancestors"}),
        |t| t.len() == 1,
    )
    .await;
    let names: BTreeSet<String> = traces[0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["operationName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["default/hello".to_string(), format!("default/{newest}")])
    );

    // A bad tag is refused with a message naming it.
    let resp: Value = client
        .get(format!("{ui}/api/traces"))
        .query(&[
            ("service", "tracing"),
            ("tags", r#"{"kind":"Pod"}"#),
            ("lookback", "1h"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        resp["errors"].to_string().contains("\\\"kind\\\""),
        "{resp}"
    );
}

#[tokio::test]
#[ignore]
async fn redirect_leads_to_a_trace_the_ui_can_open() {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Wait until the Deployment's spans are searchable at all.
    ui_search(
        "tracing",
        serde_json::json!({"resource": "deployments", "name": "hello"}),
        |t| t.len() == 1,
    )
    .await;
    let resp = client
        .get(format!("{}/redirect", env("KASCADE_FRONTEND_URL")))
        .query(&[
            ("cluster", env("CLUSTER_NAME").as_str()),
            ("group", "apps"),
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::FOUND);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let id = location
        .rsplit_once("/trace/")
        .map(|(_, id)| id.to_string())
        .unwrap_or_else(|| panic!("{location}"));
    let trace: Value = client
        .get(format!("{}/api/traces/{id}", env("JAEGER_UI_URL")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let spans = trace["data"][0]["spans"].as_array().expect("a trace");
    assert!(spans.iter().any(|s| s["operationName"] == "default/hello"));

    // The frontend counted what it served.
    let metrics = client
        .get(format!("{}/metrics", env("KASCADE_FRONTEND_URL")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
    };
    assert!(value("kascade_frontend_requests_total{rpc=\"FindTraces\"}") >= 1.0);
    assert!(value("kascade_frontend_requests_total{rpc=\"GetTraces\"}") >= 1.0);
    assert!(value("kascade_frontend_traces_assembled_total") >= 1.0);
    assert!(value("kascade_frontend_raw_reads_total") >= 1.0);
}

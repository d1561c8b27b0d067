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
    search_service("kascade", tags, ok).await
}

async fn search_service(service: &str, tags: Value, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    search_service_until(service, tags, |traces| {
        ok(traces)
            .then_some(())
            .ok_or_else(|| "the check failed".to_string())
    })
    .await
}

/// Like [`search_service`], with a check that says what is missing: the
/// panic after 90 s names it.
async fn search_service_until(
    service: &str,
    tags: Value,
    check: impl Fn(&[Value]) -> Result<(), String>,
) -> Vec<Value> {
    let url = format!("{}/api/traces", env("JAEGER_QUERY_URL"));
    poll_search(&url, "1000", service, &tags, check, |_| {})
        .await
        .unwrap_or_else(|(missing, traces)| {
            panic!(
                "Jaeger never had traces for {tags} that pass the check ({missing}); last: {}",
                serde_json::to_string(&traces)
                    .unwrap()
                    .chars()
                    .take(2000)
                    .collect::<String>()
            )
        })
}

/// Polls a Jaeger search (`url`: an `/api/traces`) by `service` and `tags`
/// every 500 ms until `check` passes: the traces, or after 90 s why the
/// last answer failed and that answer. `each_answer` looks at every whole
/// answer first.
async fn poll_search(
    url: &str,
    limit: &str,
    service: &str,
    tags: &Value,
    check: impl Fn(&[Value]) -> Result<(), String>,
    each_answer: impl Fn(&Value),
) -> Result<Vec<Value>, (String, Vec<Value>)> {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let resp: Value = client
            .get(url)
            .query(&[
                ("service", service),
                ("tags", &tags.to_string()),
                ("lookback", "2h"),
                ("limit", limit),
            ])
            .send()
            .await
            .expect("Jaeger's query API answers")
            .json()
            .await
            .unwrap();
        each_answer(&resp);
        let traces = resp["data"].as_array().cloned().unwrap_or_default();
        match check(&traces) {
            Ok(()) => return Ok(traces),
            Err(why) if std::time::Instant::now() >= deadline => return Err((why, traces)),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// `kascade replay ARGS... $AUDIT_LOG`, which must succeed.
fn replay(args: &[&str]) {
    let st = std::process::Command::new(env("KASCADE_BIN"))
        .arg("replay")
        .args(args)
        .arg(env("AUDIT_LOG"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// A Kubernetes uid: a UUID in its 8-4-4-4-12 hex form.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
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

// ---- The read side: Jaeger v2 (UI/query tier) → kascade frontend → raw Jaeger.

/// The Jaeger UI's own search (`/api/traces` of the query tier, whose trace
/// storage is the kascade frontend), polled until `ok` holds.
async fn ui_search(service: &str, tags: Value, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    ui_search_until(service, tags, |traces| {
        ok(traces)
            .then_some(())
            .ok_or_else(|| "the check failed".to_string())
    })
    .await
}

/// Like [`ui_search`], with a check that says what is missing: the panic
/// after 90 s names it, and lists the last answer's spans.
async fn ui_search_until(
    service: &str,
    tags: Value,
    check: impl Fn(&[Value]) -> Result<(), String>,
) -> Vec<Value> {
    let url = format!("{}/api/traces", env("JAEGER_UI_URL"));
    let no_errors = |resp: &Value| {
        assert!(
            resp["errors"].is_null(),
            "the UI search failed: {}",
            resp["errors"]
        )
    };
    let (why, traces) = match poll_search(&url, "20", service, &tags, check, no_errors).await {
        Ok(traces) => return traces,
        Err(failed) => failed,
    };
    let mut listing = String::new();
    for (i, t) in traces.iter().enumerate() {
        let spans = t["spans"].as_array().map(Vec::as_slice).unwrap_or_default();
        listing += &format!("\ntrace {i} ({} spans):", spans.len());
        for s in spans.iter().take(200) {
            listing += &format!(
                "\n  {} [cpid {}]",
                s["operationName"].as_str().unwrap_or("?"),
                tag_str(s, "cpid").unwrap_or("-")
            );
        }
    }
    panic!(
        "the UI never showed a trace for {tags} that passes the check: {why}; last answer: {} traces{listing}",
        traces.len()
    );
}

/// Whether `span` is kascade's own, not a Kubernetes component's span
/// joined under a write (docs/component-traces.md: service `apiserver`).
fn is_kascade_span(trace: &Value, span: &Value) -> bool {
    service_of(trace, span) != "apiserver"
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

/// Whether `span` roots a cascade in a cascade-mode trace: no cause above
/// it (several cascades hang under one top span naming the one that
/// matters, which has `cascade.count`).
fn is_cascade_root(span: &Value) -> bool {
    tag_str(span, "cascade.edge").is_none()
        && tag_str(span, "cascade.count").is_none()
        && tag_str(span, "writes.not_shown").is_none()
        && tag_str(span, "request.received").is_some()
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
        serde_json::json!(["tracing", "tree", "timeline", "grouped", "cascade"])
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
    let uid = tag_str(root, "uid").expect("the root span shows the Deployment's uid");
    assert!(is_uid(uid), "{uid}");
    assert_eq!(tag_str(root, "k8s.deployment.uid"), Some(uid));
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
    // What the raw Jaeger adds to its copies (warnings about zero-length
    // spans) is not passed on.
    assert!(!text.contains("@jaeger@"), "raw Jaeger's attributes leak");
    // The trace starts with the Deployment's own first write, not with the
    // cluster start-up activity of the Nodes and ServiceAccount it uses.
    let first_write = root["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["timestamp"].as_u64().unwrap())
        .min()
        .unwrap();
    let earliest = spans
        .iter()
        .map(|s| s["startTime"].as_u64().unwrap())
        .min()
        .unwrap();
    assert_eq!(
        earliest, first_write,
        "the trace starts before its own first write"
    );
    // Every span within its parent: Jaeger finds no clock skew to warn of.
    let warned: Vec<&Value> = spans
        .iter()
        .filter(|s| s["warnings"].as_array().is_some_and(|w| !w.is_empty()))
        .collect();
    assert!(warned.is_empty(), "Jaeger warns: {warned:?}");
    // A rollout that completed, with routine conflicts (409) on the way:
    // no object span is in error.
    let in_error: Vec<&str> = spans
        .iter()
        .filter(|s| has_error_tag(s))
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    assert!(in_error.is_empty(), "spans in error: {in_error:?}");

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
        .filter(|s| is_kascade_span(&traces[0], s))
        .map(|s| s["operationName"].as_str().unwrap().to_string())
        .collect();
    // The root names the searched object: the UI titles results by it.
    assert_eq!(
        names,
        BTreeSet::from([
            format!("default/hello ▸ replicasets default/{newest}"),
            format!("default/{newest}")
        ])
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

fn rfc3339_micros(span: &Value, key: &str) -> i128 {
    let t = humantime::parse_rfc3339_weak(tag_str(span, key).unwrap()).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i128
}

#[tokio::test]
#[ignore]
async fn the_jaeger_ui_shows_the_image_change_as_a_cascade_of_writes() {
    const PATCH: &str = " patch deployments default/hello";
    let is_patch_root =
        |s: &Value| is_cascade_root(s) && s["operationName"].as_str().unwrap().ends_with(PATCH);
    let patch_root = |traces: &[Value]| -> Option<Value> {
        if traces.len() != 1 {
            return None;
        }
        traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| is_patch_root(s))
            .cloned()
    };
    let tags =
        serde_json::json!({"resource": "deployments", "namespace": "default", "name": "hello"});
    // Complete once the rollout's last write is in (exported asynchronously).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let traces = loop {
        let traces = ui_search("cascade", tags.clone(), |t| patch_root(t).is_some()).await;
        let root = patch_root(&traces).unwrap();
        if tag_str(&root, "cascade.complete") == Some("true") {
            break traces;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the image change's cascade is not complete: waiting for {:?}; root tags {}",
            tag_str(&root, "cascade.waiting_for"),
            root["tags"]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let trace = &traces[0];
    let spans = trace["spans"].as_array().unwrap();
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["spanID"].as_str().unwrap(), s))
        .collect();
    let root = spans.iter().find(|s| is_patch_root(s)).unwrap();
    assert_eq!(service_of(trace, root), "deployments");
    assert!(tag_str(root, "cascade.completion").is_some());
    // The writes below the patch: every hop of the rollout.
    let root_id = root["spanID"].as_str().unwrap();
    let under_root = |s: &Value| {
        let mut at = parent_of(s);
        while let Some(p) = at {
            if p == root_id {
                return true;
            }
            at = by_id.get(p).and_then(|s| parent_of(s));
        }
        false
    };
    // kascade's writes: the apiserver's spans joined inside them have no
    // cascade of their own.
    let below: Vec<&Value> = spans
        .iter()
        .filter(|s| under_root(s) && is_kascade_span(trace, s))
        .collect();
    let names: Vec<&str> = below
        .iter()
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    for want in [
        "deployment-controller create replicasets default/hello-",
        "replicaset-controller create pods default/hello-",
        "kube-scheduler create binding pods default/hello-",
        " patch status pods default/hello-",
        "deployment-controller update replicasets default/hello-",
        "replicaset-controller delete pods default/hello-",
    ] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "no {want:?} under the patch: {names:#?}"
        );
    }
    // Each hop: the effect's request received minus its cause's response
    // completed; each span from the cause's response on.
    for s in &below {
        let parent = by_id[parent_of(s).unwrap()];
        let hop = tag(s, "cascade.hop_us").and_then(Value::as_i64).unwrap();
        let gap =
            rfc3339_micros(s, "request.received") - rfc3339_micros(parent, "response.completed");
        if tag(s, "cascade.attempt").is_some() {
            // A retry of a refused write (a conflict): its hop is the first
            // attempt's, the rest of the gap its writer's back-off.
            assert!(i128::from(hop) <= gap.max(0), "{}", s["operationName"]);
            assert!(tag(s, "cascade.backoff_us").is_some());
        } else {
            assert_eq!(i128::from(hop), gap.max(0), "{}", s["operationName"]);
        }
        assert!(tag_str(s, "cascade.edge").is_some());
    }
    // The critical path is marked, in the name too.
    let critical: Vec<&&Value> = below
        .iter()
        .filter(|s| tag_str(s, "cascade.critical_path") == Some("true"))
        .collect();
    assert!(!critical.is_empty());
    assert!(
        critical
            .iter()
            .all(|s| s["operationName"].as_str().unwrap().starts_with("★ "))
    );
    // Every span within its parent: Jaeger finds no clock skew to warn of.
    let warned: Vec<&Value> = spans
        .iter()
        .filter(|s| s["warnings"].as_array().is_some_and(|w| !w.is_empty()))
        .collect();
    assert!(warned.is_empty(), "Jaeger warns: {warned:?}");

    // Searching one of the Pods the rollout created finds the same cascade.
    let pod = names
        .iter()
        .find_map(|n| n.split("replicaset-controller create pods default/").nth(1))
        .unwrap()
        .to_string();
    let traces = ui_search(
        "cascade",
        serde_json::json!({"resource": "pods", "namespace": "default", "name": pod}),
        |t| t.len() == 1 && t[0]["spans"].as_array().unwrap().iter().any(&is_patch_root),
    )
    .await;
    assert_eq!(traces.len(), 1);
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
    // Over the raw Jaeger's remote-storage gRPC API (the suite gives this
    // frontend --jaeger-grpc-url) a tree's raw traces are read many per
    // request; over HTTP each would be a request of its own.
    let (reads, requests) = (
        value("kascade_frontend_raw_reads_total"),
        value("kascade_frontend_raw_requests_total"),
    );
    assert!(
        requests >= 1.0 && requests < reads,
        "{requests} requests for {reads} raw traces"
    );
}

// ---- Live sources: list-watch, Events, selectors, a second cluster.

fn tag_of<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    tag(span, key)
}

fn log_fields(span: &Value) -> Vec<HashMap<String, Value>> {
    span["logs"]
        .as_array()
        .map(|logs| {
            logs.iter()
                .map(|l| {
                    l["fields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|f| {
                            (
                                f["key"].as_str().unwrap_or("").to_string(),
                                f["value"].clone(),
                            )
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

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

/// Whether a span of the Jaeger UI's JSON is in error (`error=true`).
fn has_error_tag(span: &Value) -> bool {
    tag(span, "error").is_some_and(|v| v == &Value::Bool(true) || v == "true")
}

/// The collector's metrics as Prometheus serves them.
async fn kascade_metrics() -> String {
    reqwest::get(env("KASCADE_METRICS_URL"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn kubectl(args: &[&str]) -> String {
    let out = std::process::Command::new(env("KUBECTL"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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

/// Event spans of a raw trace as Jaeger stored them, duplicates included
/// (`/api/traces` merges identical spans): (Event uid, count) → copies.
async fn stored_event_spans(trace_ids: &[String]) -> HashMap<(String, i64), usize> {
    let client = reqwest::Client::new();
    let mut m = HashMap::new();
    for id in trace_ids {
        let resp: Value = client
            .get(format!("{}/api/v3/traces/{id}", env("JAEGER_QUERY_URL")))
            .query(&[("raw_traces", "true")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let spans = resp["result"]["resourceSpans"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|rs| rs["scopeSpans"].as_array().cloned().unwrap_or_default())
            .flat_map(|ss| ss["spans"].as_array().cloned().unwrap_or_default());
        for s in spans {
            let attr = |k: &str| {
                s["attributes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|kv| kv["key"] == k))
                    .map(|kv| kv["value"].clone())
            };
            if attr("kascade.span").and_then(|v| v["stringValue"].as_str().map(str::to_string))
                != Some("event".into())
            {
                continue;
            }
            let uid = attr("event.uid")
                .and_then(|v| v["stringValue"].as_str().map(str::to_string))
                .unwrap_or_default();
            let count = attr("event.count")
                .and_then(|v| match &v["intValue"] {
                    Value::String(s) => s.parse().ok(),
                    n => n.as_i64(),
                })
                .unwrap_or(1);
            *m.entry((uid, count)).or_insert(0) += 1;
        }
    }
    m
}

fn trace_ids(traces: &[Value]) -> Vec<String> {
    traces
        .iter()
        .filter_map(|t| t["traceID"].as_str().map(|id| format!("{id:0>32}")))
        .collect()
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

#[tokio::test]
#[ignore]
async fn no_event_is_lost_or_duplicated_across_an_apiserver_restart() {
    // The suite killed and restarted the apiserver before the scenarios: the watchers
    // noticed (errors counted) and re-listed.
    let metrics = kascade_metrics().await;
    let errors: f64 = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "kascade_watch_errors_total{{source=\"{}\"}}",
                env("CLUSTER_NAME")
            ))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(
        errors >= 1.0,
        "the watchers never saw the apiserver go away"
    );

    // Every Event the cluster holds now, as (uid, count).
    let out = std::process::Command::new(env("KUBECTL"))
        .args(["get", "events", "-A", "-o", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected: BTreeSet<(String, i64)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["metadata"]["uid"].as_str().unwrap().to_string(),
                e["count"].as_i64().unwrap_or(1).max(1),
            )
        })
        .collect();
    assert!(expected.len() > 20, "the scenarios made Events");

    let found = |traces: &[Value]| -> HashMap<(String, i64), usize> {
        let mut m = HashMap::new();
        for s in spans_of(traces) {
            if tag_str(&s, "kascade.span") == Some("event") {
                let uid = tag_str(&s, "event.uid").unwrap_or("").to_string();
                let count = tag_of(&s, "event.count")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                *m.entry((uid, count)).or_insert(0) += 1;
            }
        }
        m
    };
    let traces = search_service_until(
        "kascade",
        serde_json::json!({"kascade.span": "event"}),
        |t| {
            let f = found(t);
            let missing: Vec<_> = expected.iter().filter(|k| !f.contains_key(k)).collect();
            match missing.len() {
                0 => Ok(()),
                n => Err(format!(
                    "{n} of {} Events (uid, count) without a span, e.g. {:?}; traces found: {}",
                    expected.len(),
                    &missing[..n.min(5)],
                    t.len()
                )),
            }
        },
    )
    .await;
    let stored = stored_event_spans(&trace_ids(&traces)).await;
    let dups: Vec<_> = stored.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "Event spans stored twice: {dups:?}");
}

#[tokio::test]
#[ignore]
async fn server_dry_runs_leave_no_spans() {
    // validate-deploy.sh dry-run-applies the chart into this namespace; the
    // apiserver audits those requests like real ones.
    let client = reqwest::Client::new();
    let resp: Value = client
        .get(format!("{}/api/traces", env("JAEGER_QUERY_URL")))
        .query(&[
            ("service", "kascade"),
            ("tags", r#"{"namespace":"kascade-deploy-check"}"#),
            ("lookback", "2h"),
            ("limit", "100"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Creating the namespace for real makes the controllers write its
    // kube-root-ca.crt ConfigMap and default ServiceAccount: those are real
    // writes and belong in the trace. The dry runs were sent by the harness's
    // admin user, so no write by anybody but the control plane may show.
    let traces = resp["data"].as_array().cloned().unwrap_or_default();
    let by_users: Vec<(String, String)> = spans_of(&traces)
        .iter()
        .filter(|s| tag_str(s, "kascade.span") == Some("audit"))
        .map(|s| {
            (
                tag_str(s, "audit.user").unwrap_or("").to_string(),
                s["operationName"].as_str().unwrap_or("").to_string(),
            )
        })
        .filter(|(user, _)| !user.starts_with("system:"))
        .collect();
    assert!(
        by_users.is_empty(),
        "dry-run writes became spans: {by_users:?}"
    );
    let objects: BTreeSet<String> = spans_of(&traces)
        .iter()
        .filter(|s| tag_str(s, "kascade.span") == Some("object"))
        .map(|s| tag_str(s, "resource").unwrap_or("").to_string())
        .collect();
    assert!(
        objects
            .iter()
            .all(|r| r == "configmaps" || r == "serviceaccounts"),
        "objects of the dry-run chart got spans: {objects:?}"
    );
    let metrics = kascade_metrics().await;
    assert!(
        metrics.contains("kascade_audit_events_filtered_total{reason=\"dry_run\"}"),
        "no dry run was filtered: did validate-deploy.sh run?"
    );
}

#[tokio::test]
#[ignore]
async fn replay_exports_over_otlp_http_too() {
    // The chart exports over OTLP/HTTP (port 4318): the same spans must
    // reach a real Jaeger that way. A service and cluster of its own keep
    // these spans out of the other checks.
    let cluster = format!("otlp-http-{}", std::process::id());
    replay(&[
        "--cluster",
        &cluster,
        "--service-name",
        "kascade-otlp-http",
        "--otlp-protocol",
        "http",
        "--otlp-endpoint",
        &env("JAEGER_OTLP_HTTP"),
    ]);
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "name": "hello"});
    let traces = search_service("kascade-otlp-http", tags, |t| {
        spans_of(t)
            .iter()
            .any(|s| tag_str(s, "kascade.span") == Some("audit"))
    })
    .await;
    let spans = spans_of(&traces);
    assert!(
        spans
            .iter()
            .any(|s| tag_str(s, "kascade.span") == Some("object")),
        "no object span arrived over OTLP/HTTP"
    );
    assert!(
        spans.iter().any(|s| s["logs"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e.to_string().contains("diff.path")))),
        "the audit spans lost their diffs on the way"
    );
}

#[tokio::test]
#[ignore]
async fn with_full_audit_no_write_is_shown_twice() {
    // Cluster A audits every write with its response and is watched too:
    // each write of the deployment scenario (creates, scheduler bindings,
    // kubectl scale, graceful deletes) shows on its audit span only, never
    // again as a `watch` span of its own.
    let cluster = env("CLUSTER_NAME");
    let traces = search(serde_json::json!({"kascade.span": "watch"}), |_| true).await;
    let twice: Vec<String> = traces
        .iter()
        .filter_map(|t| {
            let spans = t["spans"].as_array()?;
            let object = spans
                .iter()
                .find(|s| tag_str(s, "kascade.span") == Some("object"))?;
            let resource = tag_str(object, "resource")?;
            (tag_str(object, "cluster") == Some(cluster.as_str())
                && tag_str(object, "namespace") == Some("default")
                && matches!(resource, "deployments" | "replicasets" | "pods"))
            .then(|| {
                let watch: Vec<String> = spans
                    .iter()
                    .filter(|s| tag_str(s, "kascade.span") == Some("watch"))
                    .map(|s| {
                        format!(
                            "{} @{}",
                            s["operationName"].as_str().unwrap_or(""),
                            tag_str(s, "watch.resource_version.new").unwrap_or("")
                        )
                    })
                    .collect();
                format!(
                    "{resource} {}: {watch:?}",
                    tag_str(object, "name").unwrap_or("")
                )
            })
        })
        .collect();
    assert!(twice.is_empty(), "writes shown twice: {twice:#?}");
}

/// `kascade replay ARGS... $AUDIT_LOG` with extra environment variables.
fn replay_with_env(args: &[&str], vars: &[(&str, String)]) {
    let st = std::process::Command::new(env("KASCADE_BIN"))
        .arg("replay")
        .args(args)
        .arg(env("AUDIT_LOG"))
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// The deployment's audit spans arrived under `service` for `cluster`, diffs and all.
async fn deployment_arrived(service: &str, cluster: &str) {
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "name": "hello"});
    let traces = search_service(service, tags, |t| {
        spans_of(t)
            .iter()
            .any(|s| tag_str(s, "kascade.span") == Some("audit"))
    })
    .await;
    assert!(
        spans_of(&traces).iter().any(|s| s["logs"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e.to_string().contains("diff.path")))),
        "{service}: the audit spans lost their diffs on the way"
    );
}

#[tokio::test]
#[ignore]
async fn replay_exports_over_tls_with_gzip() {
    // gRPC with mutual TLS (flags), and HTTP with server TLS configured by
    // the OpenTelemetry variables alone; both gzip, to the real Jaeger's
    // TLS receivers (e2e/jaeger/raw-tls.yaml).
    let grpc_cluster = format!("otlp-tls-grpc-{}", std::process::id());
    replay(&[
        "--cluster",
        &grpc_cluster,
        "--service-name",
        "kascade-otlp-tls-grpc",
        "--otlp-endpoint",
        &env("JAEGER_OTLP_TLS_GRPC"),
        "--otlp-ca-file",
        &env("OTLP_CA_FILE"),
        "--otlp-client-cert-file",
        &env("OTLP_CLIENT_CERT_FILE"),
        "--otlp-client-key-file",
        &env("OTLP_CLIENT_KEY_FILE"),
        "--otlp-compression",
        "gzip",
    ]);
    let http_cluster = format!("otlp-tls-http-{}", std::process::id());
    replay_with_env(
        &[
            "--cluster",
            &http_cluster,
            "--service-name",
            "kascade-otlp-tls-http",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", env("JAEGER_OTLP_TLS_HTTP")),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", env("OTLP_CA_FILE")),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip".into()),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-kascade-e2e=tls%20test".into(),
            ),
        ],
    );
    deployment_arrived("kascade-otlp-tls-grpc", &grpc_cluster).await;
    deployment_arrived("kascade-otlp-tls-http", &http_cluster).await;

    // Without the client certificate the gRPC receiver refuses the
    // connection: replay reports the spans it could not export and fails.
    let st = std::process::Command::new(env("KASCADE_BIN"))
        .args([
            "replay",
            "--cluster",
            "otlp-tls-refused",
            "--export-retry-for",
            "2s",
        ])
        .args(["--otlp-endpoint", &env("JAEGER_OTLP_TLS_GRPC")])
        .args(["--otlp-ca-file", &env("OTLP_CA_FILE")])
        .arg(env("AUDIT_LOG"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(!st.status.success(), "{stderr}");
    assert!(stderr.contains("spans could not be exported"), "{stderr}");
}

/// The ConfigMaps of e2e/scenarios/bigobject.sh as `service` stored them for
/// `cluster`: every small one arrived, and the three replacements of the
/// big one with their diffs capped.
async fn oversized_writes_arrived(service: &str, cluster: &str) {
    let small = |traces: &[Value]| {
        spans_of(traces)
            .iter()
            .filter(|s| {
                tag_str(s, "kascade.span") == Some("object")
                    && tag_str(s, "name").is_some_and(|n| n.starts_with("small-"))
            })
            .filter_map(|s| tag_str(s, "name").map(str::to_string))
            .collect::<BTreeSet<_>>()
    };
    let tags =
        serde_json::json!({"cluster": cluster, "namespace": "big-demo", "resource": "configmaps"});
    let traces = search_service(service, tags, |t| small(t).len() == 50).await;
    assert_eq!(small(&traces).len(), 50);

    let tags = serde_json::json!({"cluster": cluster, "namespace": "big-demo", "resource": "configmaps", "name": "big"});
    let is_update = |s: &Value| {
        tag_str(s, "kascade.span") == Some("audit")
            && tag_str(s, "audit.verb") == Some("update")
            && tag(s, "audit.code").and_then(Value::as_i64) == Some(200)
    };
    let traces = search_service(service, tags, |t| {
        spans_of(t).iter().filter(|s| is_update(s)).count() == 3
    })
    .await;
    for update in spans_of(&traces).iter().filter(|s| is_update(s)) {
        let diff = log_fields(update)
            .into_iter()
            .find(|f| f.get("diff.path").and_then(Value::as_str) == Some("data.blob"))
            .unwrap_or_else(|| panic!("no diff of data.blob: {update}"));
        let new = diff["diff.new"].as_str().unwrap();
        assert_eq!(
            new.len(),
            kascade::test_support::span_model::DEFAULT_MAX_VALUE_BYTES,
            "the value is cut to the cap"
        );
        // The JSON text of the 999000-byte value, quotes included.
        let from = &diff["diff.new.truncated_from"];
        assert!(
            from.as_i64() == Some(999_002) || from.as_str() == Some("999002"),
            "{diff:?}"
        );
    }
}

#[tokio::test]
#[ignore]
async fn oversized_writes_are_capped_and_the_writes_around_them_exported() {
    // Live, through the webhook, to Jaeger's gRPC receiver (4 MiB limit).
    let cluster = env("CLUSTER_NAME");
    oversized_writes_arrived("kascade", &cluster).await;
    // The replay sends the whole audit log in full batches: the three
    // replacements and the 50 creates are in one export batch for certain.
    let replayed = format!("big-{}", std::process::id());
    replay(&[
        "--cluster",
        &replayed,
        "--service-name",
        "kascade-big",
        "--otlp-endpoint",
        &env("JAEGER_OTLP_GRPC"),
    ]);
    oversized_writes_arrived("kascade-big", &replayed).await;
}

#[tokio::test]
#[ignore]
async fn system_architecture_shows_resources_linked_as_parent_and_child() {
    let ui = env("JAEGER_UI_URL");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let resp: Value = reqwest::Client::new()
        .get(format!("{ui}/api/dependencies"))
        .query(&[
            ("endTs", now_ms.to_string()),
            ("lookback", "7200000".to_string()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let edges: BTreeSet<(String, String)> = resp["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{resp}"))
        .iter()
        .map(|d| {
            assert!(d["callCount"].as_u64().unwrap() >= 1, "{d}");
            (
                d["parent"].as_str().unwrap().to_string(),
                d["child"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (p, c) in [
        ("deployments", "replicasets"),
        ("replicasets", "pods"),
        ("pods", "nodes"),
    ] {
        assert!(
            edges.contains(&(p.into(), c.into())),
            "{p} → {c} missing: {edges:?}"
        );
    }
}

fn children_named<'a>(trace: &'a Value, parent: &Value, name: &str) -> Vec<&'a Value> {
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["operationName"] == name && parent_of(s) == parent["spanID"].as_str())
        .collect()
}

/// kascade traces itself (the suite runs `collect` and `frontend` with
/// OTEL_TRACES_EXPORTER=otlp into the raw Jaeger, under services of their
/// own): a webhook batch is one trace rooted at its request, and the
/// frontend's spans continue the trace of the Jaeger query service that
/// asked (it traces itself too, e2e/jaeger/query-selftrace.yaml).
#[tokio::test]
#[ignore]
async fn kascade_traces_itself_into_jaeger() {
    // A webhook request with its decode, admit and process below it.
    let cluster = env("CLUSTER_NAME");
    let webhook = |trace: &Value| {
        trace["spans"].as_array().into_iter().flatten().any(|s| {
            s["operationName"] == "webhook request"
                && parent_of(s).is_none()
                && tag_str(s, "cluster") == Some(cluster.as_str())
                && ["decode", "admit", "process"]
                    .iter()
                    .all(|n| children_named(trace, s, n).len() == 1)
        })
    };
    let traces = search_service(
        "kascade-collect",
        serde_json::json!({"cluster": cluster.as_str()}),
        |t| t.iter().any(webhook),
    )
    .await;
    let trace = traces.iter().find(|t| webhook(t)).unwrap();
    for s in trace["spans"].as_array().unwrap() {
        assert_eq!(service_of(trace, s), "kascade-collect", "{s}");
    }
    // Each OTLP export request of the object spans is a span of its own.
    search_service(
        "kascade-collect",
        serde_json::json!({"protocol": "grpc"}),
        |t| {
            spans_of(t).iter().any(|s| {
                s["operationName"] == "export"
                    && parent_of(s).is_none()
                    && tag_str(s, "span.kind") == Some("client")
                    && tag(s, "request.bytes").is_some()
            })
        },
    )
    .await;

    // A search through the Jaeger UI: the query service's trace holds the
    // frontend's FindTraces, its search and the raw reads.
    ui_search(
        "tracing",
        serde_json::json!({"resource": "deployments", "name": "hello"}),
        |t| t.len() == 1,
    )
    .await;
    let continued = |trace: &Value| {
        let spans = trace["spans"].as_array().cloned().unwrap_or_default();
        spans.iter().any(|find| {
            find["operationName"] == "FindTraces"
                && service_of(trace, find) == "kascade-frontend"
                && spans.iter().any(|caller| {
                    Some(caller["spanID"].as_str().unwrap_or_default()) == parent_of(find)
                        && service_of(trace, caller) == "jaeger-query"
                })
                && children_named(trace, find, "search")
                    .iter()
                    .any(|search| !children_named(trace, search, "raw read").is_empty())
        })
    };
    search_service("jaeger-query", serde_json::json!({}), |t| {
        t.iter().any(continued)
    })
    .await;
}

// ---- Explain: findings over what the collector stored in the raw Jaeger.

/// `GET /explain` of a namespace (JSON), polled until `ok` holds: the
/// collector exports asynchronously.
async fn explain_namespace(namespace: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let from = (std::time::SystemTime::now() - Duration::from_secs(7200))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    loop {
        let resp = client
            .get(format!("{}/explain", env("KASCADE_FRONTEND_URL")))
            .query(&[
                ("cluster", env("CLUSTER_NAME").as_str()),
                ("namespace", namespace),
                ("from", from.as_str()),
            ])
            .send()
            .await
            .expect("the frontend answers /explain");
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        let report: Value = resp.json().await.unwrap();
        if ok(&report) {
            return report;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/explain of {namespace} never passed the check; last: {report}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore]
async fn the_frontend_explains_the_stuck_rollout_from_the_stored_spans() {
    let first_is_scheduling = |r: &Value| {
        r["findings"][0]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("FailedScheduling: ") && t.contains("didn't match"))
    };
    let report = explain_namespace("rollout-demo", first_is_scheduling).await;
    let f = &report["findings"][0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["object"]["resource"], "pods");
    assert_eq!(
        f["chain"][0]["object"]["display"],
        "deployments rollout-demo/web"
    );
    assert_eq!(
        f["trigger"]["write"],
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
    assert!(
        f["trigger"]["changes"].as_array().unwrap().iter().any(|c| c
            .as_str()
            .unwrap()
            .starts_with("+ spec.template.spec.nodeSelector")),
        "{f}"
    );
    // The quota scenario: the refusal first, on its ReplicaSet.
    let denied = |r: &Value| r["findings"][0]["kind"] == "denied_write";
    let report = explain_namespace("quota-demo", denied).await;
    let title = report["findings"][0]["title"].as_str().unwrap();
    assert!(title.contains("exceeded quota"), "{title}");
    assert_eq!(report["findings"][0]["object"]["resource"], "replicasets");
}

// ---- Cascades of the scenarios without fixtures (bigobject's megabyte
// values, crosscluster's second control plane), read through the UI tier.

/// The cascade-mode trace of one object, polled until `ok` holds.
async fn cascade_trace(tags: Value, ok: impl Fn(&[&Value]) -> bool) -> Vec<Value> {
    let roots_ok = |t: &[Value]| {
        t.len() == 1 && {
            let roots: Vec<&Value> = t[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| is_cascade_root(s))
                .collect();
            ok(&roots)
        }
    };
    ui_search("cascade", tags, roots_ok).await
}

#[tokio::test]
#[ignore]
async fn each_write_of_the_big_configmap_is_a_complete_cascade_of_its_own() {
    // No controller reacts to a ConfigMap: its create and three replacements
    // (each a megabyte) are four roots with nothing under them, each
    // complete as soon as written.
    let named = |s: &Value, verb: &str| {
        s["operationName"]
            .as_str()
            .unwrap()
            .ends_with(&format!(" {verb} configmaps big-demo/big"))
    };
    let four = |roots: &[&Value]| {
        roots.iter().filter(|s| named(s, "create")).count() == 1
            && roots.iter().filter(|s| named(s, "update")).count() == 3
    };
    let traces = cascade_trace(
        serde_json::json!({"cluster": env("CLUSTER_NAME"), "resource": "configmaps", "namespace": "big-demo", "name": "big"}),
        four,
    )
    .await;
    let spans = traces[0]["spans"].as_array().unwrap();
    // The writes (not the span above the four cascades, named by the latest).
    for s in spans
        .iter()
        .filter(|s| tag_str(s, "cascade.count").is_none())
        .filter(|s| named(s, "create") || named(s, "update"))
    {
        assert!(is_cascade_root(s), "{}", s["operationName"]);
        assert_eq!(
            tag_str(s, "cascade.complete"),
            Some("true"),
            "{}",
            s["tags"]
        );
        let id = s["spanID"].as_str().unwrap();
        assert!(
            spans
                .iter()
                .filter(|c| is_kascade_span(&traces[0], c))
                .all(|c| parent_of(c) != Some(id)),
            "nothing is caused by a ConfigMap write: {}",
            s["operationName"]
        );
    }
}

#[tokio::test]
#[ignore]
async fn the_second_clusters_pod_is_a_cascade_of_scheduling_and_kubelet_writes() {
    let create = |s: &&Value| {
        s["operationName"]
            .as_str()
            .unwrap()
            .ends_with(" create pods remote-demo/labeled")
    };
    let complete_create = |roots: &[&Value]| {
        roots
            .iter()
            .any(|s| create(s) && tag_str(s, "cascade.complete") == Some("true"))
    };
    let traces = cascade_trace(
        serde_json::json!({"cluster": env("CLUSTER_B_NAME"), "resource": "pods", "namespace": "remote-demo", "name": "labeled"}),
        complete_create,
    )
    .await;
    let spans = traces[0]["spans"].as_array().unwrap();
    let root = spans
        .iter()
        .find(|s| is_cascade_root(s) && create(s))
        .unwrap();
    let root_id = root["spanID"].as_str().unwrap();
    let under: Vec<&str> = spans
        .iter()
        .filter(|s| {
            parent_of(s) == Some(root_id) || {
                let p = parent_of(s);
                spans.iter().any(|q| {
                    Some(q["spanID"].as_str().unwrap()) == p && parent_of(q) == Some(root_id)
                })
            }
        })
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    assert!(
        under
            .iter()
            .any(|n| n.contains("kube-scheduler create binding pods remote-demo/labeled")),
        "{under:#?}"
    );
    assert!(
        under
            .iter()
            .any(|n| n.contains(" patch status pods remote-demo/labeled")),
        "{under:#?}"
    );
    // The relabel is a user's write: a root of its own, not under the create.
    assert!(
        spans.iter().any(|s| is_cascade_root(s)
            && s["operationName"]
                .as_str()
                .unwrap()
                .ends_with(" patch pods remote-demo/labeled")),
        "{:#?}",
        spans
            .iter()
            .map(|s| s["operationName"].as_str().unwrap())
            .collect::<Vec<_>>()
    );
}

// ---- Changes by CPID (the cpid-annotated scenario: a Deployment created
// under one CPID, its image changed under a second), read through the UI
// tier after an instrumented controller reported merging the two.

const CPID_FIRST: &str = "6f1c2a4e-0b7d-4c1e-9a3f-5d2e8b7c6a01";

/// A `kascade-cpid` tracer reporting to the suite's collector as an
/// instrumented controller would: over the webhook's mutual TLS, with its
/// bearer token.
fn tracer_of_collector_a(controller: &str) -> kascade_cpid::Tracer {
    let read = |var: &str| std::fs::read(env(var)).unwrap();
    let mut identity = read("KASCADE_WEBHOOK_CLIENT_CERT");
    identity.extend(read("KASCADE_WEBHOOK_CLIENT_KEY"));
    let token = String::from_utf8(read("AUDIT_WEBHOOK_TOKEN_FILE")).unwrap();
    kascade_cpid::Tracer::new(
        kascade_cpid::Config::new(env("KASCADE_WEBHOOK_BASE"))
            .token(token.trim())
            .ca_pem(read("KASCADE_TLS_CLIENT_CA_FILE"))
            .identity_pem(identity)
            .controller(controller)
            .flush_interval(Duration::from_millis(10)),
    )
}
const CPID_SECOND: &str = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f02";

#[tokio::test]
#[ignore]
async fn a_change_is_found_by_its_cpid_and_a_reported_merge_is_named() {
    use kascade_cpid::{ChangeContext, Cpid, Outcome};
    let tracer = tracer_of_collector_a("e2e-merger");
    let (first, second) = (
        Cpid::parse(CPID_FIRST).unwrap(),
        Cpid::parse(CPID_SECOND).unwrap(),
    );
    let mut p = tracer.propagation();
    p.observe_context(ChangeContext::new(first))
        .observe_context(ChangeContext::new(second));
    let decision = p.decide();
    assert_eq!(decision.outcome, Outcome::Merged);
    let merged = decision.cpid().unwrap();
    tracer.flush().await;
    assert_eq!(tracer.stats().sent, 1, "{:?}", tracer.stats());

    let note = format!("change {merged} merged from {first}, {second} by e2e-merger");
    let notes_of = |t: &Value| -> Vec<String> {
        t["spans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["tags"].as_array().cloned().unwrap_or_default())
            .filter(|t| t["key"] == "note")
            .filter_map(|t| t["value"].as_str().map(str::to_string))
            .collect()
    };
    let named = |traces: &[Value]| {
        traces.len() == 1
            && notes_of(&traces[0]).contains(&note)
            && traces[0]["spans"].as_array().unwrap().iter().any(|s| {
                s["operationName"]
                    .as_str()
                    .unwrap()
                    .contains("kube-scheduler create binding pods cpid-demo/")
            })
    };
    let traces = ui_search("cascade", serde_json::json!({ "cpid": CPID_FIRST }), named).await;
    let spans = traces[0]["spans"].as_array().unwrap();
    // Every write shown belongs to the first change: the user's create
    // carries it in its annotation, the Pods' writes inherit it by inference.
    for s in spans {
        assert_eq!(
            tag_str(s, "cpid"),
            Some(CPID_FIRST),
            "{}",
            s["operationName"]
        );
    }
    let origin_of = |op: &str| {
        spans
            .iter()
            .filter(|s| s["operationName"].as_str().unwrap().contains(op))
            .map(|s| tag_str(s, "cpid.origin").unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        origin_of("kascade-e2e-admin create deployments cpid-demo/web"),
        ["annotation"]
    );
    let bindings = origin_of("kube-scheduler create binding pods cpid-demo/");
    assert!(!bindings.is_empty() && bindings.iter().all(|o| *o == "inferred"));
    // The trace's id is the CPID: the UI reloads it from any frontend.
    assert_eq!(traces[0]["traceID"], CPID_FIRST.replace('-', ""));
}

/// A change whose writes lie in more object windows than one raw search
/// returns is searched past `--raw-search-limit` through the real raw
/// Jaeger, over both its APIs: its time range split until each part's
/// search holds fewer (Jaeger's search has no offset). A frontend allowed
/// two windows per search shows the same writes as one allowed 500, and no
/// note of a cut.
#[tokio::test]
#[ignore]
async fn a_change_is_searched_past_the_raw_search_limit_in_the_raw_jaeger() {
    use kascade::test_support::frontend::raw::{
        JaegerGrpc, JaegerHttp, JaegerStore, RawStore as _,
    };
    use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
    // Stored, and read as the UI reads it, before the frontends below look.
    ui_search("cascade", serde_json::json!({ "cpid": CPID_FIRST }), |t| {
        t.len() == 1
            && t[0]["spans"].as_array().unwrap().iter().any(|s| {
                s["operationName"]
                    .as_str()
                    .unwrap()
                    .contains("kube-scheduler create binding pods cpid-demo/")
            })
    })
    .await;
    let service = "kascade";
    let timeout = Duration::from_secs(30);
    let stores = || {
        [
            JaegerStore::Grpc(
                JaegerGrpc::connect(
                    &env("JAEGER_REMOTE_STORAGE_URL"),
                    service,
                    timeout,
                    &Default::default(),
                )
                .unwrap(),
            ),
            JaegerStore::Http(JaegerHttp::new(&env("JAEGER_QUERY_URL"), service, timeout)),
        ]
    };
    let now = std::time::SystemTime::now();
    let query = SearchQuery {
        mode: kascade::test_support::frontend::display::Mode::Cascade,
        scope: kascade::test_support::frontend::assemble::Scope::Object,
        all_siblings: false,
        tags: vec![("cpid".into(), CPID_FIRST.into())],
        range: kascade::test_support::frontend::raw::TimeRange::new(
            now - Duration::from_secs(7200),
            now,
        ),
        limit: 1,
    };
    let writes = |t: &kascade::test_support::frontend::AssembledTrace| {
        let mut w: Vec<(String, String)> = t
            .cascades
            .iter()
            .flat_map(|c| c.changes.iter())
            .map(|c| {
                (
                    format!("{:?}", c.span),
                    format!("{} {} {}", c.verb, c.object.resource, c.object.name),
                )
            })
            .collect();
        w.sort();
        w
    };
    for (whole_store, paged_store) in stores().into_iter().zip(stores()) {
        let what = whole_store.describe();
        let frontend = |store, raw_search_limit| {
            Frontend::new(
                std::sync::Arc::new(store),
                FrontendConfig {
                    raw_search_limit,
                    ..FrontendConfig::default()
                },
            )
        };
        let (whole, paged) = (frontend(whole_store, 500), frontend(paged_store, 2));
        // Compared when the whole change read the same before and after the
        // paged read: a kubelet's late status write would otherwise race.
        let mut rounds = 0;
        let (before, paged, after) = loop {
            let before = whole.search(&query).await.unwrap().remove(0);
            let paged = paged.search(&query).await.unwrap().remove(0);
            let after = whole.search(&query).await.unwrap().remove(0);
            rounds += 1;
            if writes(&before) == writes(&after) || rounds == 10 {
                break (before, paged, after);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert_eq!(writes(&before), writes(&after), "{what}: still changing");
        let objects: std::collections::BTreeSet<_> = before
            .cascades
            .iter()
            .flat_map(|c| c.changes.iter())
            .map(|c| (c.object.resource.clone(), c.object.name.clone()))
            .collect();
        assert!(objects.len() > 2, "{what}: the change wrote {objects:?}");
        assert_eq!(writes(&paged), writes(&before), "{what}");
        assert!(
            !paged
                .assembly
                .notes
                .iter()
                .any(|n| n.contains("object windows")),
            "{what}: {:?}",
            paged.assembly.notes
        );
    }
}

/// The CPID `kubectl` printed as the webhook's warning, in a file the
/// cpid-webhook scenario kept.
fn warned_cpid(file: &str) -> String {
    let path = format!("{}/{file}", env("KASCADE_E2E_RUN_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let re = regex::Regex::new(r"Warning: kascade\.io/cpid=([0-9a-f-]{36})").unwrap();
    // The last: the apiserver retries a patch that met a conflict within
    // the one request, calling the CPID webhook again, and the object
    // keeps the last attempt's CPID (kubectl prints every attempt's).
    re.captures_iter(&text)
        .last()
        .unwrap_or_else(|| panic!("{path}: no CPID warning in {text:?}"))[1]
        .to_string()
}

#[tokio::test]
#[ignore]
async fn the_cpid_webhook_gives_each_user_change_its_own_cpid_and_kubectl_shows_it() {
    let created = warned_cpid("cpid-webhook-create.err");
    let changed = warned_cpid("cpid-webhook-set-image.err");
    assert_ne!(created, changed, "two changes, two CPIDs");
    let ns = "cpidhook-demo";
    let annotation = "{.metadata.annotations.kascade\\.io/cpid}";
    assert_eq!(
        kubectl(&[
            "get",
            "deployment",
            "web",
            "-n",
            ns,
            "-o",
            &format!("jsonpath={annotation}")
        ]),
        changed
    );
    // The deployment controller copied each rollout's CPID onto its ReplicaSet.
    let rs = kubectl(&[
        "get",
        "replicasets",
        "-n",
        ns,
        "-o",
        &format!("jsonpath={{range .items[*]}}{annotation}{{\"\\n\"}}{{end}}"),
    ]);
    let rs: BTreeSet<&str> = rs.lines().collect();
    assert_eq!(rs, BTreeSet::from([created.as_str(), changed.as_str()]));
    // Searching the image change finds its rollout through the UI tier.
    let traces = rollout_change(&changed, "cpidhook-demo", |_| Ok(())).await;
    for s in traces[0]["spans"].as_array().unwrap() {
        assert_eq!(
            tag_str(s, "cpid"),
            Some(changed.as_str()),
            "{}",
            s["operationName"]
        );
    }
}

/// The config-roller scenario's files (its kubectl warnings, the merged CPID).
fn roller_file(name: &str) -> String {
    format!("{}/config-roller/{name}", env("KASCADE_E2E_RUN_DIR"))
}

/// The one change trace the UI shows for `cpid`, once it holds a patch of
/// `<namespace>/web` (a user's or the controller's roll) and a Pod binding
/// of its rollout, and `extra` holds.
async fn rollout_change(
    cpid: &str,
    namespace: &str,
    extra: impl Fn(&[Value]) -> Result<(), String>,
) -> Vec<Value> {
    let patch = format!(" patch deployments {namespace}/web");
    let binding = format!("kube-scheduler create binding pods {namespace}/");
    let rolled = |traces: &[Value]| {
        let ops: Vec<&str> = traces
            .iter()
            .flat_map(|t| t["spans"].as_array().unwrap())
            .map(|s| s["operationName"].as_str().unwrap())
            .collect();
        if traces.len() != 1 {
            return Err(format!("{} traces, not one", traces.len()));
        }
        if !ops.iter().any(|o| o.ends_with(&patch)) {
            return Err(format!("no span ends with {patch:?}"));
        }
        if !ops.iter().any(|o| o.contains(&binding)) {
            return Err(format!("no span contains {binding:?}"));
        }
        extra(traces)
    };
    ui_search_until("cascade", serde_json::json!({ "cpid": cpid }), rolled).await
}

#[tokio::test]
#[ignore]
async fn an_instrumented_controller_passes_a_configmap_edits_cpid_on_to_the_rollout() {
    let edit = warned_cpid("config-roller/edit-configmap.err");
    let traces = rollout_change(&edit, "roller-demo", |_| Ok(())).await;
    let spans = traces[0]["spans"].as_array().unwrap();
    let op = |s: &Value| s["operationName"].as_str().unwrap().to_string();
    // One change from the user's edit to the Pods: every write carries it.
    for s in spans {
        assert_eq!(tag_str(s, "cpid"), Some(edit.as_str()), "{}", op(s));
    }
    let edit_span = spans
        .iter()
        .find(|s| op(s).ends_with(" patch configmaps roller-demo/app-config"))
        .expect("the ConfigMap edit");
    assert_eq!(tag_str(edit_span, "cpid.origin"), Some("annotation"));
    let roll = spans
        .iter()
        .find(|s| op(s).ends_with(" patch deployments roller-demo/web"))
        .unwrap();
    assert_eq!(
        tag_str(roll, "cpid.origin"),
        Some("annotation"),
        "the controller stamped it"
    );
    // The chain: edit → roll (no relation says a Deployment reacts to a
    // ConfigMap: the cause is the CPID's) → the new ReplicaSet → its Pods.
    assert_eq!(
        parent_of(roll),
        edit_span["spanID"].as_str(),
        "{}",
        op(roll)
    );
    assert_eq!(tag_str(roll, "cascade.rule"), Some("cpid"));
    let rs = spans
        .iter()
        .find(|s| op(s).contains(" create replicasets roller-demo/web-"))
        .expect("the new ReplicaSet");
    assert_eq!(parent_of(rs), roll["spanID"].as_str(), "{}", op(rs));
    assert!(
        spans
            .iter()
            .any(|s| op(s).contains(" create pods roller-demo/web-")
                && parent_of(s) == rs["spanID"].as_str())
    );
    let pods: Vec<&Value> = spans
        .iter()
        .filter(|s| op(s).contains(" pods roller-demo/"))
        .collect();
    assert!(!pods.is_empty());
    for p in pods {
        assert_eq!(tag_str(p, "cpid.origin"), Some("inferred"), "{}", op(p));
    }
}

#[tokio::test]
#[ignore]
async fn a_controllers_merge_of_two_changes_is_found_from_either() {
    let deployment_edit = warned_cpid("config-roller/edit-deployment.err");
    let configmap_edit = warned_cpid("config-roller/edit-configmap-again.err");
    let merged = std::fs::read_to_string(roller_file("merged.cpid")).unwrap();
    let merged = merged.trim();
    assert_ne!(merged, configmap_edit);
    assert_ne!(merged, deployment_edit);
    let note =
        format!("change {merged} merged from {configmap_edit}, {deployment_edit} by config-roller");
    let has_note = |traces: &[Value]| {
        let notes: Vec<&str> = traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["tags"].as_array().into_iter().flatten())
            .filter(|t| t["key"] == "note")
            .filter_map(|t| t["value"].as_str())
            .collect();
        if notes.contains(&note.as_str()) {
            Ok(())
        } else {
            Err(format!("no note {note:?} among {notes:?}"))
        }
    };
    for searched in [&configmap_edit, &deployment_edit] {
        let traces = rollout_change(searched, "roller-demo", has_note).await;
        let cpids: BTreeSet<&str> = traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| tag_str(s, "cpid"))
            .collect();
        // The searched change's own writes, and the merged rollout's.
        assert!(
            cpids.contains(searched.as_str()) && cpids.contains(merged),
            "{cpids:?}"
        );
        assert!(cpids.len() == 2, "{cpids:?}");
    }
}

/// A process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_ready(url: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !reqwest::get(url)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(std::time::Instant::now() < deadline, "{url} not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore]
async fn two_collectors_and_two_frontends_answer_the_related_cpid_query_alike() {
    use kascade_cpid::{ChangeContext, Config, Cpid, Tracer};
    // A second collector and a second frontend on the same raw Jaeger.
    let dir = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| {
        Killed(
            std::process::Command::new(env("KASCADE_BIN"))
                .args(args)
                // The suite's KASCADE_* settings (TLS, token) are collector
                // A's: B is configured by its flags alone.
                .env_clear()
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let spool = dir.path().join("spool");
    let (cluster, otlp, raw) = (
        env("CLUSTER_NAME"),
        env("JAEGER_OTLP_GRPC"),
        env("JAEGER_QUERY_URL"),
    );
    let _collector_b = spawn(&[
        "collect",
        "--listen",
        "127.0.0.1:18090",
        "--admin-listen",
        "127.0.0.1:18091",
        "--cluster",
        &cluster,
        "--otlp-endpoint",
        &otlp,
        "--export-batch-timeout",
        "200ms",
        "--spool-dir",
        spool.to_str().unwrap(),
    ]);
    let _frontend_b = spawn(&[
        "frontend",
        "--grpc-listen",
        "127.0.0.1:18093",
        "--http-listen",
        "127.0.0.1:18094",
        "--jaeger-url",
        &raw,
        "--default-cluster",
        &cluster,
    ]);
    wait_ready("http://127.0.0.1:18091/readyz").await;
    wait_ready("http://127.0.0.1:18094/readyz").await;

    // root ← nothing; m1 ← {root, x} reported to collector A; m2 ← {m1, y}
    // reported to collector B.
    let merge = |tracer: &Tracer, a: Cpid, b: Cpid| {
        let mut p = tracer.propagation();
        p.observe_context(ChangeContext::new(a))
            .observe_context(ChangeContext::new(b));
        p.decide().cpid().unwrap()
    };
    let a = tracer_of_collector_a("replica-a");
    let b = Tracer::new(
        Config::new("http://127.0.0.1:18090")
            .controller("replica-b")
            .flush_interval(Duration::from_millis(10)),
    );
    let root = Cpid::new_random();
    let m1 = merge(&a, root, Cpid::new_random());
    a.flush().await;
    let m2 = merge(&b, m1, Cpid::new_random());
    b.flush().await;
    assert_eq!((a.stats().sent, b.stats().sent), (1, 1));

    let related = |frontend: &'static str| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let v: Value = reqwest::get(format!("{frontend}/cpid/related?cpid={root}"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let got: Vec<&str> = v["descendants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["cpid"].as_str().unwrap())
                .collect();
            if got == [root.to_string(), m1.to_string(), m2.to_string()] {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{frontend}: {v}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let from_a = related("http://127.0.0.1:8094").await;
    let from_b = related("http://127.0.0.1:18094").await;
    assert_eq!(from_a, from_b);
    assert_eq!(from_a["descendants"][2]["controller"], "replica-b");
    assert_eq!(from_a["descendants"][1]["controller"], "replica-a");
    // Walking up from m2 reaches the root through both collectors' merges.
    let up: Value = reqwest::get(format!("http://127.0.0.1:18094/cpid/related?cpid={m2}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ancestors: Vec<&str> = up["ancestors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cpid"].as_str().unwrap())
        .collect();
    assert!(ancestors.contains(&root.to_string().as_str()), "{up}");
}

#[tokio::test]
#[ignore]
async fn a_resource_rbac_refuses_is_watched_once_it_is_allowed() {
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::pipeline::{Intake, Work};
    use kascade::test_support::source::watch::{WatchConfig, start};
    // An apiserver that has just started refuses everything until its
    // authorizer has synced, and an operator may grant a resource later:
    // a watcher refused once must try again, not give up.
    let ns = "rbac-later";
    let dir = tempfile::tempdir().unwrap();
    let manifest = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        kubectl(&["apply", "-f", path.to_str().unwrap()]);
    };
    manifest(
        "sa.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: late-watcher, namespace: {ns}}}\n"
        ),
    );
    let token = kubectl(&[
        "create",
        "token",
        "late-watcher",
        "-n",
        ns,
        "--duration",
        "1h",
    ]);
    // kascade's own kubeconfig (server, CA) with the ServiceAccount's token.
    let own = std::fs::read_to_string(env("KASCADE_KUBECONFIG")).unwrap();
    let kubeconfig: String = own
        .lines()
        .map(|l| match l.split_once("token:") {
            Some((indent, _)) => format!("{indent}token: {}\n", token.trim()),
            None => format!("{l}\n"),
        })
        .collect();
    assert!(kubeconfig.contains(token.trim()), "{own}");
    let kubeconfig_path = dir.path().join("late-watcher.kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig).unwrap();

    let metrics = std::sync::Arc::new(Metrics::default());
    let (intake, mut rx) = Intake::new(10_000, Default::default());
    let cfg = WatchConfig {
        cluster: ns.to_string(),
        kubeconfig: kubeconfig_path,
        include: ["configmaps".to_string()].into(),
        exclude: Default::default(),
        event_max_age: Duration::from_secs(3600),
        watch_events: false,
    };
    let tasks = start(cfg, intake, metrics.clone()).await.unwrap();
    assert_eq!(tasks.len(), 1, "configmaps only");
    let refused = || {
        metrics
            .watch_forbidden
            .get_or_create(&Metrics::cluster(ns))
            .get()
    };
    // Refused (403) first: counted while it lasts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while refused() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refusal was never counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Granted now; a ConfigMap written after the grant is watched.
    manifest(
        "rbac.yaml",
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
             metadata: {{name: {ns}-configmaps}}\n\
             rules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: {ns}-configmaps}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-configmaps}}\n\
             subjects: [{{kind: ServiceAccount, name: late-watcher, namespace: {ns}}}]\n"
        ),
    );
    kubectl(&[
        "create",
        "configmap",
        "granted",
        "-n",
        ns,
        "--from-literal=k=v",
    ]);
    let seen = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(work) = rx.recv().await {
            if let Work::Watch(change) = work
                && change.object.namespace == ns
                && change.object.name == "granted"
            {
                return true;
            }
        }
        false
    })
    .await;
    for t in tasks {
        t.abort();
    }
    kubectl(&["delete", "namespace", ns, "--wait=false"]);
    kubectl(&[
        "delete",
        "clusterrolebinding,clusterrole",
        &format!("{ns}-configmaps"),
    ]);
    assert_eq!(
        seen,
        Ok(true),
        "the ConfigMap written after the grant was never watched"
    );
    assert_eq!(
        refused(),
        0,
        "allowed again, the refusal is no longer counted"
    );
}

// ---- Kubernetes' own traces joined to the writes (e2e/scenarios/slow-webhook.sh).

/// The spans of one assembled trace with their services.
fn assembled_spans(
    t: &kascade::test_support::frontend::AssembledTrace,
) -> Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)> {
    use kascade::test_support::frontend::raw::string_attr;
    t.resource_spans
        .iter()
        .flat_map(|rs| {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default()
                .to_string();
            rs.scope_spans
                .iter()
                .flat_map(|ss| ss.spans.clone())
                .map(move |s| (service.clone(), s))
        })
        .collect()
}

/// The audit IDs a span shows: its own write's, or those of the writes it logs.
fn audit_ids_of(s: &opentelemetry_proto::tonic::trace::v1::Span) -> Vec<String> {
    use kascade::test_support::frontend::raw::string_attr;
    let own = string_attr(&s.attributes, "audit.id").map(str::to_string);
    let logged = s
        .events
        .iter()
        .filter_map(|e| string_attr(&e.attributes, "audit.id").map(str::to_string));
    own.into_iter().chain(logged).collect()
}

#[tokio::test]
#[ignore = "needs the e2e environment (e2e/suite.sh)"]
async fn each_traced_write_shows_its_apiserver_spans_and_the_slow_webhook_inside_the_creates() {
    use kascade::test_support::frontend::components::{APISERVER_SERVICE, AUDIT_ID_TAG};
    use kascade::test_support::frontend::raw::{JaegerHttp, RawStore, TimeRange, string_attr};
    use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
    let cluster = env("CLUSTER_NAME");
    // The scenario's Pod creates in kascade's raw spans: every one arrived.
    let pods = search(
        serde_json::json!({"cluster": cluster, "resource": "pods", "namespace": "slow-demo"}),
        |t| t.len() >= 2,
    )
    .await;
    assert!(pods.len() >= 2);
    let store = JaegerHttp::new(&env("JAEGER_QUERY_URL"), "kascade", Duration::from_secs(30));
    let now = std::time::SystemTime::now();
    let range = TimeRange::new(now - Duration::from_secs(7200), now);
    let query = |mode| SearchQuery {
        mode,
        scope: kascade::test_support::frontend::assemble::Scope::Full,
        all_siblings: true,
        tags: vec![
            ("cluster".into(), cluster.clone()),
            ("resource".into(), "deployments".into()),
            ("namespace".into(), "slow-demo".into()),
            ("name".into(), "web".into()),
        ],
        range,
        limit: 1,
    };
    let frontend = Frontend::new(std::sync::Arc::new(store), FrontendConfig::default());
    for mode in kascade::test_support::frontend::display::Mode::ALL {
        // The apiserver's exporter batches every 5 s: poll until every write
        // shown is joined (traced = joined is checked below, once stable).
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        let (t, shown, joined) = loop {
            let found = frontend.search(&query(mode)).await.unwrap();
            assert_eq!(found.len(), 1, "{mode:?}: one trace for deployment web");
            let t = found[0].clone();
            let spans = assembled_spans(&t);
            let shown: BTreeSet<String> = spans
                .iter()
                .filter(|(svc, _)| svc != APISERVER_SERVICE)
                .flat_map(|(_, s)| audit_ids_of(s))
                .collect();
            let joined: BTreeSet<String> = spans
                .iter()
                .filter(|(svc, _)| svc == APISERVER_SERVICE)
                .filter_map(|(_, s)| string_attr(&s.attributes, AUDIT_ID_TAG).map(str::to_string))
                .collect();
            if joined == shown || std::time::Instant::now() > deadline {
                break (t, shown, joined);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // Traced requests counted in the raw store, one search per write shown.
        let mut traced = BTreeSet::new();
        let raw = JaegerHttp::new(&env("JAEGER_QUERY_URL"), "kascade", Duration::from_secs(30));
        for id in &shown {
            let tags = vec![(AUDIT_ID_TAG.to_string(), id.clone())];
            if !raw
                .find_component(APISERVER_SERVICE, &tags, range, 2)
                .await
                .unwrap()
                .is_empty()
            {
                traced.insert(id.clone());
            }
        }
        assert!(
            !traced.is_empty(),
            "{mode:?}: the apiserver traced none of the writes"
        );
        assert_eq!(
            joined, traced,
            "{mode:?}: traced requests = joined requests"
        );
        // None under the wrong write: each request's root hangs under the
        // span that shows its audit ID.
        let spans = assembled_spans(&t);
        let by_id: HashMap<Vec<u8>, &opentelemetry_proto::tonic::trace::v1::Span> =
            spans.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
        for (svc, s) in &spans {
            if svc != APISERVER_SERVICE || s.links.is_empty() {
                continue;
            }
            let parent = by_id
                .get(&s.parent_span_id)
                .expect("a joined root has its parent in the trace");
            // The request's audit ID is on one of its spans (its root may be
            // the apiserver's `authentication` span).
            let mut ids = BTreeSet::new();
            let mut below = vec![s.span_id.clone()];
            while let Some(id) = below.pop() {
                for (sv, x) in &spans {
                    if sv == APISERVER_SERVICE && x.parent_span_id == id {
                        below.push(x.span_id.clone());
                    }
                }
                if let Some(a) = by_id
                    .get(&id)
                    .and_then(|x| string_attr(&x.attributes, AUDIT_ID_TAG))
                {
                    ids.insert(a.to_string());
                }
            }
            assert!(
                audit_ids_of(parent).iter().any(|a| ids.contains(a)),
                "{mode:?}: {} ({ids:?}) hangs under {}, which shows another write",
                s.name,
                parent.name
            );
        }
        if mode == kascade::test_support::frontend::display::Mode::Tree {
            // Each Pod create holds the slow webhook's call: ≥ its 800 ms
            // delay (the webhook sleeps; no claim on this machine's speed),
            // and named as what took the request's time.
            let calls: Vec<_> = spans
                .iter()
                .filter(|(_, s)| {
                    string_attr(&s.attributes, "webhook") == Some("slow-policy.example.com")
                })
                .collect();
            assert!(
                calls.len() >= 2,
                "the slow webhook's calls: {}",
                calls.len()
            );
            for (_, call) in calls {
                assert!(call.end_time_unix_nano - call.start_time_unix_nano >= 800_000_000);
                // Up its parents to the span that shows the write: a Pod create.
                let mut at = call;
                while let Some(p) = by_id.get(&at.parent_span_id) {
                    at = p;
                    if !audit_ids_of(at).is_empty() {
                        break;
                    }
                }
                assert!(
                    at.name.contains("create") && !audit_ids_of(at).is_empty(),
                    "the webhook's call sits under {:?}, not a Pod create",
                    at.name
                );
            }
        }
    }
}

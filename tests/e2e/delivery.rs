//! Delivery: apiserver restarts, dry runs, replay over OTLP/HTTP and TLS,
//! oversized writes, the dependency graph, kascade's own traces.

use super::*;

fn tag_of<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    tag(span, key)
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

fn children_named<'a>(trace: &'a Value, parent: &Value, name: &str) -> Vec<&'a Value> {
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["operationName"] == name && parent_of(s) == parent["spanID"].as_str())
        .collect()
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

//! The log-shipper paths against the real harness, run by e2e/suite.sh
//! after tests/e2e/: the cluster's audit.log shipped by a real
//! OpenTelemetry Collector (filelog receiver → otlphttp exporter to
//! `/v1/logs/<name>` and otlp exporter over gRPC with a `kascade-cluster`
//! header, built by e2e/build.sh with the collector builder), and sent
//! as newline-delimited JSON (what Fluent Bit's and Vector's http outputs
//! send) to `/audit/<name>`, give the Deployment of the deployment scenario
//! the same spans as the apiserver's audit webhook gave it. Each path uses
//! a cluster name of its own, so their spans sit beside the webhook's.
//! Ignored in a plain `cargo test` (they need that environment).

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Killed;
use serde_json::Value;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run these through e2e/suite.sh"))
}

fn tag_str<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .and_then(|t| t["value"].as_str())
}

fn tag_any(span: &Value, key: &str) -> String {
    span["tags"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["key"] == key))
        .map(|t| t["value"].to_string())
        .unwrap_or_default()
}

/// What the spans of `default/hello` in `cluster` say, whatever the
/// cluster name.
#[derive(Debug, PartialEq, Eq)]
struct Signature {
    /// Each write (audit id, name, answer) and each Event (uid, count,
    /// reason).
    spans: BTreeSet<String>,
    /// The same writes with their diffs, snapshots and readiness: what the
    /// write changed is diffed against the last state kascade knew, which
    /// on the webhook's path the list-watch updates too, so these compare
    /// between paths without a watch only.
    detailed: BTreeSet<String>,
    /// Relations within the cluster.
    links: BTreeSet<String>,
}

async fn signature(cluster: &str) -> Signature {
    let url = format!("{}/api/traces", env("JAEGER_QUERY_URL"));
    let tags = serde_json::json!({"cluster": cluster, "resource": "deployments", "namespace": "default", "name": "hello"});
    let resp: Value = reqwest::Client::new()
        .get(&url)
        .query(&[
            ("service", "kascade"),
            ("tags", &tags.to_string()),
            ("lookback", "2h"),
            ("limit", "1000"),
        ])
        .send()
        .await
        .expect("Jaeger's query API answers")
        .json()
        .await
        .unwrap();
    let mut spans = BTreeSet::new();
    let mut detailed = BTreeSet::new();
    let mut links = BTreeSet::new();
    for trace in resp["data"].as_array().cloned().unwrap_or_default() {
        for s in trace["spans"].as_array().unwrap() {
            match tag_str(s, "kascade.span") {
                Some("audit") => {
                    let logs: Vec<String> = s["logs"]
                        .as_array()
                        .map(|l| {
                            l.iter()
                                .map(|log| {
                                    log["fields"]
                                        .as_array()
                                        .map(|f| {
                                            f.iter()
                                                .map(|kv| format!("{}={}", kv["key"], kv["value"]))
                                                .collect::<Vec<_>>()
                                                .join(",")
                                        })
                                        .unwrap_or_default()
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let mut logs = logs;
                    logs.sort();
                    let write = format!(
                        "audit {} {} code={}",
                        tag_any(s, "audit.id"),
                        s["operationName"],
                        tag_any(s, "audit.code"),
                    );
                    detailed.insert(format!(
                        "{write} status={} {}",
                        tag_any(s, "object.status"),
                        logs.join(";")
                    ));
                    spans.insert(write);
                }
                Some("event") => {
                    spans.insert(format!(
                        "event {} {} {}",
                        tag_any(s, "event.uid"),
                        tag_any(s, "event.count"),
                        s["operationName"]
                    ));
                }
                Some("link") if tag_str(s, "link.cluster") == Some(cluster) => {
                    links.insert(format!(
                        "{} {} {}/{}",
                        tag_any(s, "link.role"),
                        tag_any(s, "link.class"),
                        tag_any(s, "link.resource"),
                        tag_any(s, "link.name")
                    ));
                }
                _ => {}
            }
        }
    }
    Signature {
        spans,
        detailed,
        links,
    }
}

/// Polls until `cluster` has the writes, Events and relations of `want`
/// (the shipper delivers and kascade exports asynchronously); panics after
/// 180 s with the difference.
async fn arrives_alike(cluster: &str, want: &Signature) -> Signature {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let got = signature(cluster).await;
        if got.spans == want.spans && got.links == want.links {
            return got;
        }
        if Instant::now() >= deadline {
            let missing: Vec<_> = want.spans.difference(&got.spans).take(5).collect();
            let extra: Vec<_> = got.spans.difference(&want.spans).take(5).collect();
            let links: Vec<_> = want.links.symmetric_difference(&got.links).collect();
            panic!(
                "{cluster}: not the webhook's writes and Events after 180 s: {} of {} spans, \
                 missing {missing:?}, extra {extra:?}; links differing {links:?}",
                got.spans.len(),
                want.spans.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

/// curl over the webhook's mutual TLS with the bearer token, as a shipper
/// configured as docs/deployment.md says.
fn post_lines(path: &str, body: &std::path::Path) {
    let token = std::fs::read_to_string(env("AUDIT_WEBHOOK_TOKEN_FILE")).unwrap();
    let out = Command::new("curl")
        .args(["-s", "--http1.1", "-o", "/dev/stderr", "-w", "%{http_code}"])
        .args(["--cacert", &env("KASCADE_TLS_CLIENT_CA_FILE")])
        .args(["--cert", &env("KASCADE_WEBHOOK_CLIENT_CERT")])
        .args(["--key", &env("KASCADE_WEBHOOK_CLIENT_KEY")])
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", token.trim()))
        .args(["-H", "Content-Type: application/x-ndjson"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(format!("{}{path}", env("KASCADE_WEBHOOK_BASE")))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout);
    let answer = String::from_utf8_lossy(&out.stderr);
    // A line kascade cannot read is named in a 400 and the rest kept, as
    // the webhook's EventList would have had it skipped too.
    assert!(
        code == "200" || (code == "400" && answer.contains("malformed items were skipped")),
        "POST {path}: {code} {answer}"
    );
}

#[tokio::test]
#[ignore]
async fn the_otel_collector_and_ndjson_paths_give_the_webhooks_spans() {
    let cluster = env("CLUSTER_NAME");
    let webhook = signature(&cluster).await;
    assert!(
        webhook.spans.iter().any(|s| s.starts_with("audit ")),
        "the deployment scenario left no audit span of default/hello: {webhook:?}"
    );

    // The OpenTelemetry Collector tails the audit log from its start and
    // sends it both ways: OTLP/HTTP and OTLP/gRPC, as two clusters.
    let otel_cluster = format!("{cluster}-otelcol");
    let grpc_cluster = format!("{cluster}-otelgrpc");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("otelcol.yaml");
    std::fs::write(
        &config,
        format!(
            r#"receivers:
  filelog:
    include: ["{log}"]
    start_at: beginning
    # An audit line can be large (the bigobject scenario's).
    max_log_size: 16MiB
exporters:
  otlphttp:
    logs_endpoint: {base}/v1/logs/{otel_cluster}
    compression: gzip
    headers: {{Authorization: "Bearer ${{env:KASCADE_TOKEN}}"}}
    # In the log's order, as docs/deployment.md says to (concurrent
    # senders reorder batches, and the diffs with them).
    sending_queue: {{num_consumers: 1}}
    tls:
      ca_file: {ca}
      cert_file: {cert}
      key_file: {key}
  otlp:
    endpoint: {authority}
    compression: gzip
    headers: {{Authorization: "Bearer ${{env:KASCADE_TOKEN}}", kascade-cluster: "{grpc_cluster}"}}
    sending_queue: {{num_consumers: 1}}
    tls:
      ca_file: {ca}
      cert_file: {cert}
      key_file: {key}
service:
  telemetry:
    metrics: {{level: none}}
  pipelines:
    logs: {{receivers: [filelog], exporters: [otlphttp, otlp]}}
"#,
            log = env("AUDIT_LOG"),
            base = env("KASCADE_WEBHOOK_BASE"),
            authority = env("KASCADE_WEBHOOK_BASE")
                .split_once("://")
                .map_or(String::new(), |(_, rest)| rest
                    .trim_end_matches('/')
                    .to_string()),
            ca = env("KASCADE_TLS_CLIENT_CA_FILE"),
            cert = env("KASCADE_WEBHOOK_CLIENT_CERT"),
            key = env("KASCADE_WEBHOOK_CLIENT_KEY"),
        ),
    )
    .unwrap();
    let token = std::fs::read_to_string(env("AUDIT_WEBHOOK_TOKEN_FILE")).unwrap();
    let log = std::fs::File::create(dir.path().join("otelcol.log")).unwrap();
    let _otelcol = Killed(
        Command::new(env("OTELCOL_BIN"))
            .arg("--config")
            .arg(format!("file:{}", config.display()))
            .env("KASCADE_TOKEN", token.trim())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    // The same lines as newline-delimited JSON, in bodies of 200 lines.
    let ndjson_cluster = format!("{cluster}-ndjson");
    let text = std::fs::read_to_string(env("AUDIT_LOG")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, chunk) in lines.chunks(200).enumerate() {
        let body = dir.path().join(format!("chunk-{i}.ndjson"));
        std::fs::write(&body, chunk.join("\n") + "\n").unwrap();
        post_lines(&format!("/audit/{ndjson_cluster}"), &body);
    }

    let ndjson = arrives_alike(&ndjson_cluster, &webhook).await;
    let otel = arrives_alike(&otel_cluster, &webhook).await;
    let grpc = arrives_alike(&grpc_cluster, &webhook).await;
    assert_eq!(
        otel.detailed, grpc.detailed,
        "the Collector's OTLP/HTTP and OTLP/gRPC exports differ"
    );
    // Neither has a watch: the same events give the same diffs,
    // snapshots and readiness.
    assert!(
        ndjson.detailed.iter().any(|s| s.contains("diff.path")),
        "no diff: {ndjson:?}"
    );
    assert_eq!(
        ndjson.detailed, otel.detailed,
        "the NDJSON and OpenTelemetry Collector paths differ"
    );
}

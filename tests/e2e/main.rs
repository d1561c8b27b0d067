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

/// A process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

mod component_traces;
mod cpid;
mod delivery;
mod explain;
mod live_sources;
mod read_side;
mod replicas;
mod scenario_cascades;
mod write_side;

//! What explain and `kascade trace` say of the fixture with and without
//! the apiserver's traces, offline and through the frontend's `/explain`.

use super::*;

/// `kascade explain` of the fixture's audit log as JSON, with `args`.
fn explain(args: &[&str]) -> serde_json::Value {
    let audit = common::fixture_path(SCENARIO, "audit.log");
    let out = common::succeeded(
        common::kascade()
            .arg("explain")
            .arg(&audit)
            .args(["--format", "json", "--quiet"])
            .args(args),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn findings_of_kind<'a>(r: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

#[test]
fn explain_names_the_webhook_that_made_the_pod_creates_slow_and_the_one_that_failed_open() {
    let traces = common::fixture_path(SCENARIO, "apiserver-traces.jsonl");
    let r = explain(&["--component-traces", traces.to_str().unwrap()]);
    let slow = findings_of_kind(&r, "slow_write");
    assert_eq!(
        slow.len(),
        1,
        "both Pod creates in one finding: {:#}",
        r["findings"]
    );
    let title = slow[0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("slow write: validating webhook slow-policy.example.com: 8"),
        "{title}"
    );
    assert_eq!(slow[0]["object"]["resource"], "pods");
    assert_eq!(
        slow[0]["also"].as_array().unwrap().len(),
        1,
        "the other Pod"
    );
    let open = findings_of_kind(&r, "webhook_failed_open");
    assert_eq!(open.len(), 1);
    assert!(
        open[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("validating webhook failing-policy.example.com failed open"),
        "{}",
        open[0]["title"]
    );
    assert_eq!(open[0]["severity"], "warning");
    // The traced writes that were quick and past no failing webhook (the
    // Deployment, ReplicaSet, bindings, status updates) say nothing.
    for f in slow.iter().chain(&open) {
        assert_eq!(f["object"]["resource"], "pods", "{f:#}");
    }
}

#[test]
fn explain_without_component_traces_judges_by_the_audit_events_annotations() {
    // The apiserver annotated the slow creates (where their time went) and
    // the failing-open calls (which webhook): the same findings, the slow
    // one naming the layer, not the webhook.
    let r = explain(&[]);
    let slow = findings_of_kind(&r, "slow_write");
    assert_eq!(slow.len(), 1, "{:#}", r["findings"]);
    let title = slow[0]["title"].as_str().unwrap();
    assert!(
        title.starts_with("slow write: validating webhooks: 8"),
        "{title}"
    );
    let open = findings_of_kind(&r, "webhook_failed_open");
    assert_eq!(open.len(), 1);
    assert!(
        open[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("validating webhook failing-policy.example.com failed open")
    );
    assert!(
        !r["inputs"]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with("kube-apiserver's traces")),
        "no traces were given"
    );
}

#[test]
fn explain_refuses_a_component_traces_file_that_is_not_otlp_json() {
    let dir = std::env::temp_dir().join(format!("kascade-ct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"resourceSpans\": 1}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
        .arg("explain")
        .arg(common::fixture_path(SCENARIO, "audit.log"))
        .args(["--component-traces", bad.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--component-traces") && err.contains("line 1: not OTLP/JSON traces"),
        "{err}"
    );
}

fn trace_text(args: &[&str]) -> String {
    let out = common::succeeded(
        common::kascade()
            .arg("trace")
            .arg(common::fixture_path(SCENARIO, "audit.log"))
            .args([
                "-n",
                "slow-demo",
                "--object",
                "deploy/web",
                "--color",
                "never",
            ])
            .args(["--max-diff-lines", "0", "--quiet"])
            .args(args),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn kascade_trace_gives_each_traced_write_a_line_of_its_webhooks_and_etcd_calls() {
    let traces = common::fixture_path(SCENARIO, "apiserver-traces.jsonl");
    let text = trace_text(&["--component-traces", traces.to_str().unwrap()]);
    let lines: Vec<&str> = text.lines().collect();
    let creates: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("replicaset-controller create 201"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(creates.len(), 2, "{text}");
    for i in creates {
        let next = lines[i + 1].trim_start_matches(['│', ' ']);
        assert!(
            next.starts_with("apiserver ")
                && next.contains(": validating webhook slow-policy.example.com 8")
                && next.contains("validating webhook failing-policy.example.com ")
                && next.contains("ms ✗")
                && next.contains("etcd Create "),
            "{next}"
        );
    }
    assert!(!trace_text(&[]).contains("apiserver "), "no file, no lines");
}

/// The frontend's `GET /explain` over the fixture's stored spans, with or
/// without the apiserver's beside them in the raw store.
async fn explain_live(with_apiserver: bool) -> kascade::test_support::analysis::explain::Report {
    use kascade::test_support::frontend::explain::ExplainQuery;
    let store = store(with_apiserver).await;
    let (a, b) = store.time_span().unwrap();
    Frontend::new(Arc::new(store), FrontendConfig::default())
        .explain(&ExplainQuery {
            cluster: "fixture".into(),
            namespace: Some("slow-demo".into()),
            range: TimeRange::new(from_nanos(a), from_nanos(b)),
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn the_frontends_explain_reads_the_stored_apiserver_traces_as_explain_reads_the_file() {
    use kascade::test_support::analysis::explain::FindingKind;
    let traces = common::fixture_path(SCENARIO, "apiserver-traces.jsonl");
    let offline = explain(&["--component-traces", traces.to_str().unwrap()]);
    let live = explain_live(true).await;
    for (kind, name) in [
        (FindingKind::SlowWrite, "slow_write"),
        (FindingKind::WebhookFailedOpen, "webhook_failed_open"),
    ] {
        let titles: Vec<&str> = live
            .findings
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.title.as_str())
            .collect();
        let expected: Vec<&str> = findings_of_kind(&offline, name)
            .iter()
            .map(|f| f["title"].as_str().unwrap())
            .collect();
        assert!(!expected.is_empty(), "{name}");
        assert_eq!(titles, expected, "{name}");
    }
    assert!(
        live.inputs
            .notes
            .iter()
            .any(|n| n.starts_with("kube-apiserver's traces: ")),
        "{:?}",
        live.inputs.notes
    );
    // A store without them: the annotations the write spans carry (the
    // slow layer, the webhook failing open), as offline without the file.
    let without = explain_live(false).await;
    let offline_without = explain(&[]);
    for (kind, name) in [
        (FindingKind::SlowWrite, "slow_write"),
        (FindingKind::WebhookFailedOpen, "webhook_failed_open"),
    ] {
        let titles: Vec<&str> = without
            .findings
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.title.as_str())
            .collect();
        let expected: Vec<&str> = findings_of_kind(&offline_without, name)
            .iter()
            .map(|f| f["title"].as_str().unwrap())
            .collect();
        assert!(!expected.is_empty(), "{name}");
        assert_eq!(titles, expected, "{name}");
    }
    assert!(
        !without
            .inputs
            .notes
            .iter()
            .any(|n| n.starts_with("kube-apiserver's traces")),
        "{:?}",
        without.inputs.notes
    );
}

/// Every write of `kascade trace --format json`'s tree.
fn json_writes(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut todo = vec![&doc["root"]];
    while let Some(o) = todo.pop() {
        out.extend(o["writes"].as_array().unwrap().iter().cloned());
        todo.extend(o["children"].as_array().unwrap());
    }
    out
}

#[test]
fn kascade_trace_json_gives_each_traced_write_its_requests_parts() {
    let traces = common::fixture_path(SCENARIO, "apiserver-traces.jsonl");
    let doc: serde_json::Value = serde_json::from_str(&trace_text(&[
        "--format",
        "json",
        "--component-traces",
        traces.to_str().unwrap(),
    ]))
    .unwrap();
    let writes = json_writes(&doc);
    let creates: Vec<&serde_json::Value> = writes
        .iter()
        .filter(|w| {
            w["verb"] == "create"
                && w["user"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(":replicaset-controller"))
        })
        .collect();
    assert_eq!(creates.len(), 2, "{doc:#}");
    for w in creates {
        let r = &w["request"];
        let parts = r["parts"].as_array().unwrap();
        let part = |name: &str| {
            parts
                .iter()
                .find(|p| p["part"] == name)
                .unwrap_or_else(|| panic!("{name} in {r:#}"))
        };
        let slow = part("validating webhook slow-policy.example.com");
        // The webhook sleeps 800 ms (no claim on this machine's speed).
        assert!(slow["duration_ms"].as_f64().unwrap() >= 800.0, "{r:#}");
        assert!(r["duration_ms"].as_f64().unwrap() >= slow["duration_ms"].as_f64().unwrap());
        assert_eq!(slow["failed"], false);
        assert_eq!(
            part("validating webhook failing-policy.example.com")["failed"],
            true
        );
    }
    // Quick writes are traced too, with their etcd call.
    assert!(
        writes
            .iter()
            .any(|w| w["request"]["parts"].as_array().is_some_and(|p| p
                .iter()
                .any(|p| p["part"].as_str().is_some_and(|n| n.starts_with("etcd ")))))
    );
    // Without the file: no request anywhere.
    let plain: serde_json::Value =
        serde_json::from_str(&trace_text(&["--format", "json"])).unwrap();
    assert!(json_writes(&plain).iter().all(|w| w["request"].is_null()));
}

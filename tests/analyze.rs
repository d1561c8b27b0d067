//! `kascade analyze` and `--output changelog=` over the fixtures captured
//! from the real control plane: edge classes and counts as the raw audit
//! log has them, hop percentiles recomputed here from the fixture's own
//! timestamps, the formats parsing back, the plots valid.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::Redactor;
use kascade::test_support::analysis::report::Report;
use kascade::test_support::analysis::stats::PropagationStats;
use kascade::test_support::flow::ChangeRecord;
use kascade::test_support::offline::changes_from_audit_lines;
use kascade::test_support::source::audit::AuditFilter;
use serde_json::Value;

use common::kascade;

async fn changes(scenario: &str) -> Vec<ChangeRecord> {
    common::changes_of_lines(common::audit_lines(scenario), "fixture").await
}

async fn report(scenario: &str) -> Report {
    let sink = Arc::new(PropagationStats::default());
    let lines = common::audit_lines(scenario);
    let n = lines.len() as u64;
    let errors = changes_from_audit_lines(
        lines,
        "fixture",
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(None),
        sink.clone(),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut stats = Arc::try_unwrap(sink).ok().unwrap().into_stats();
    Report::new(&mut stats, n, 0, false)
}

/// Offline runs decode lines in batches, a batch ahead of the processor:
/// the fixture placed across a batch boundary gives the changes it gives
/// alone, in the same order, and every malformed line is named by its own
/// number, in file order.
#[tokio::test]
async fn changes_and_errors_keep_file_order_across_decode_batches() {
    let fixture = common::audit_lines("deployment");
    let alone = changes("deployment").await;
    let mut lines = Vec::new();
    let mut malformed = Vec::new();
    let mut push_malformed = |lines: &mut Vec<String>, n: usize| {
        for _ in 0..n {
            lines.push("not an audit event".to_string());
            malformed.push(lines.len());
            lines.push(String::new());
        }
    };
    // 450 malformed lines first: the fixture's 172 straddle the first
    // batch's end (512 non-blank lines); 600 more make two more batches.
    push_malformed(&mut lines, 450);
    lines.extend(fixture);
    push_malformed(&mut lines, 600);

    let (changes, errors) = common::changes_and_errors_of_lines(lines, "fixture").await;
    let numbered: Vec<usize> = errors
        .iter()
        .map(|e| e.split_once(": ").unwrap().0.parse().unwrap())
        .collect();
    assert_eq!(numbered, malformed);
    assert_eq!(changes.len(), alone.len());
    for (batched, one) in changes.iter().zip(&alone) {
        assert_eq!(format!("{batched:?}"), format!("{one:?}"));
    }
}

fn raw(scenario: &str) -> Vec<Value> {
    common::audit_lines(scenario)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn time(v: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap()
}

/// Successful completed writes in the raw log by `user` of `verb resource[/sub]`.
fn raw_writes(raw: &[Value], user: &str, verb: &str, resource: &str, sub: &str) -> u64 {
    raw.iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == user
                && e["verb"] == verb
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["subresource"].as_str().unwrap_or("") == sub
                && e["responseStatus"]["code"].as_i64().unwrap() < 400
        })
        .count() as u64
}

/// The fixture's own (requestReceived, stageTimestamp) of a change.
fn raw_times(raw: &[Value], c: &ChangeRecord) -> (SystemTime, SystemTime) {
    let found: Vec<_> = raw
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == c.user.as_str()
                && e["verb"] == c.verb.as_str()
                && e["objectRef"]["resource"] == c.object.resource.as_str()
                && e["objectRef"]["subresource"].as_str().unwrap_or("") == c.subresource
                && time(&e["requestReceivedTimestamp"]) == c.received
        })
        .collect();
    assert_eq!(found.len(), 1, "one audit event for {:?}", c.object);
    (
        time(&found[0]["requestReceivedTimestamp"]),
        time(&found[0]["stageTimestamp"]),
    )
}

fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

const RS: &str = "system:serviceaccount:kube-system:replicaset-controller";
const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const DC: &str = "system:serviceaccount:kube-system:deployment-controller";

#[tokio::test]
async fn the_deployment_fixtures_edges_and_counts_are_those_of_its_audit_log() {
    let report = report("deployment").await;
    let raw = raw("deployment");
    let count = |edge: &str| {
        report
            .edges
            .iter()
            .find(|e| e.edge == edge)
            .unwrap_or_else(|| panic!("no edge {edge:?} in {:?}", report.edges))
            .latency
            .count
    };
    assert_eq!(
        count("replicasets → pods create"),
        raw_writes(&raw, RS, "create", "pods", "")
    );
    assert_eq!(count("replicasets → pods create"), 10);
    // The old ReplicaSet's scale-down, and the garbage collector's after
    // the Deployment's deletion.
    assert_eq!(
        count("replicasets → pods delete"),
        raw_writes(&raw, RS, "delete", "pods", "") + raw_writes(&raw, GC, "delete", "pods", "")
    );
    assert_eq!(
        count("pods binding"),
        raw_writes(&raw, "system:kube-scheduler", "create", "pods", "binding")
    );
    assert_eq!(
        count("deployments → replicasets create"),
        raw_writes(&raw, DC, "create", "replicasets", "")
    );
    // Each conflict (409) the deployment controller met updating a
    // ReplicaSet was followed by its retry: one intent, one hop.
    let conflicts = raw
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["user"]["username"] == DC
                && e["verb"] == "update"
                && e["objectRef"]["resource"] == "replicasets"
                && e["responseStatus"]["code"] == 409
        })
        .count() as u64;
    assert_eq!(
        count("deployments → replicasets update") + conflicts,
        raw_writes(&raw, DC, "update", "replicasets", "")
    );
    for edge in [
        "pods → Running",
        "pods → replicasets status",
        "replicasets → deployments status",
    ] {
        assert!(count(edge) > 0, "{edge}");
    }
    // Every successful effect is a hop of exactly one edge class, except
    // retries of refused writes (their wait is back-off).
    let hops: u64 = report.edges.iter().map(|e| e.latency.count).sum();
    assert_eq!(hops, report.effects);
    assert!(report.retries > 0, "the fixture's conflicts are retried");
    assert_eq!(report.unexplained, 0, "{:?}", report.unexplained_by_class);
    let refused = raw
        .iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && !matches!(e["verb"].as_str(), Some("get" | "list" | "watch"))
                && e["objectRef"]["resource"] != "events"
                && e["responseStatus"]["code"].as_i64().unwrap() >= 400
        })
        .count() as u64;
    assert_eq!(report.refused, refused);
}

#[tokio::test]
async fn hop_percentiles_are_those_of_the_fixtures_timestamps() {
    let all = changes("deployment").await;
    let raw = raw("deployment");
    let by_span: HashMap<_, _> = all.iter().map(|c| (c.span, c)).collect();
    // Hop = the effect's requestReceivedTimestamp − its cause's
    // stageTimestamp (0 when the writer reacted first), from the raw log.
    let mut hops: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    // A retry: its writer's previous write of the object was refused, for
    // the same cause, and answered before this one was sent. Its wait is
    // back-off, not a hop.
    let mut sorted: Vec<_> = all.iter().collect();
    sorted.sort_by_key(|c| c.received);
    let retry = |c: &kascade::test_support::flow::ChangeRecord| {
        let previous = sorted.iter().rev().find(|p| {
            p.received < c.received
                && p.user == c.user
                && p.verb == c.verb
                && p.subresource == c.subresource
                && p.object == c.object
        });
        previous.is_some_and(|p| {
            p.code >= 400
                && p.completed <= c.received
                && p.cause.as_ref().map(|k| k.span) == c.cause.as_ref().map(|k| k.span)
        })
    };
    // A create sent once its writer's earlier create for the same cause was
    // answered (at most 50 ms before, after the cause's answer): the next
    // batch, its hop from that answer.
    let batch_before = |c: &kascade::test_support::flow::ChangeRecord| {
        let (received, _) = raw_times(&raw, c);
        sorted
            .iter()
            .filter(|p| {
                c.verb == "create"
                    && p.verb == "create"
                    && p.span != c.span
                    && p.user == c.user
                    && p.subresource == c.subresource
                    && p.object.resource == c.object.resource
                    && p.object.namespace == c.object.namespace
                    && p.cause.as_ref().map(|k| k.span) == c.cause.as_ref().map(|k| k.span)
            })
            .map(|p| raw_times(&raw, p).1)
            .filter(|done| *done <= received)
            .max()
    };
    for c in all.iter().filter(|c| c.code < 400 && !retry(c)) {
        let Some(cause) = &c.cause else { continue };
        let (received, _) = raw_times(&raw, c);
        let (_, cause_completed) = raw_times(&raw, by_span[&cause.span]);
        let from_cause = received.duration_since(cause_completed).unwrap_or_default();
        let hop = match batch_before(c).map(|done| received.duration_since(done).unwrap()) {
            Some(gap) if gap <= std::time::Duration::from_millis(50) && gap < from_cause => gap,
            _ => from_cause,
        }
        .as_micros() as u64;
        hops.entry(cause.edge.clone()).or_default().push(hop);
    }
    let report = report("deployment").await;
    assert_eq!(report.edges.len(), hops.len());
    for row in &report.edges {
        let mut h = hops[&row.edge].clone();
        h.sort_unstable();
        let l = row.latency;
        assert_eq!(l.count, h.len() as u64, "{}", row.edge);
        assert_eq!(l.p50_us, nearest_rank(&h, 0.50), "{} p50", row.edge);
        assert_eq!(l.p90_us, nearest_rank(&h, 0.90), "{} p90", row.edge);
        assert_eq!(l.p99_us, nearest_rank(&h, 0.99), "{} p99", row.edge);
        assert_eq!(l.max_us, *h.last().unwrap(), "{} max", row.edge);
    }
}

#[test]
fn json_and_csv_parse_back_and_agree() {
    let log = common::fixture_path("deployment", "audit.log");
    let out = common::succeeded(kascade().args(["analyze", "--format", "json"]).arg(&log));
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.edges.len() >= 10, "{:?}", report.edges);
    assert_eq!(report.malformed_lines, 0);
    let out = common::succeeded(kascade().args(["analyze", "--format", "csv"]).arg(&log));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut rows = text.lines();
    assert_eq!(
        rows.next(),
        Some("table,class,count,p50_us,p90_us,p99_us,max_us")
    );
    let edges: Vec<Vec<&str>> = rows
        .map(|r| r.split(',').collect::<Vec<_>>())
        .filter(|f| f[0] == "edge")
        .collect();
    assert_eq!(edges.len(), report.edges.len());
    for (fields, row) in edges.iter().zip(&report.edges) {
        assert_eq!(fields[1], row.edge);
        assert_eq!(fields[2].parse::<u64>().unwrap(), row.latency.count);
        assert_eq!(fields[3].parse::<u64>().unwrap(), row.latency.p50_us);
        assert_eq!(fields[6].parse::<u64>().unwrap(), row.latency.max_us);
    }
}

#[test]
fn text_shows_the_table_and_bars_and_plots_are_valid_png_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let out = common::succeeded(
        kascade()
            .arg("analyze")
            .arg(common::fixture_path("deployment", "audit.log"))
            .arg("--plot")
            .arg(&plots),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("replicasets → pods create"), "{text}");
    assert!(text.contains("│█"), "{text}");
    let png = std::fs::read(plots.join("replicasets-to-pods-create.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(plots.join("replicasets-to-pods-create.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(svg.contains("replicasets → pods create"));
}

#[test]
fn malformed_lines_are_named_by_file_and_line_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = common::audit_lines("deployment");
    lines.insert(2, "{not json".to_string());
    let log = dir.path().join("bad.log");
    std::fs::write(&log, lines.join("\n")).unwrap();
    let out = common::succeeded(kascade().args(["analyze", "--format", "json"]).arg(&log));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:3:", log.display())),
        "{stderr}"
    );
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.malformed_lines, 1);
    // The rest is analysed as without the bad line.
    assert!(
        report
            .edges
            .iter()
            .any(|e| e.edge == "replicasets → pods create" && e.latency.count == 10)
    );
}

#[tokio::test]
async fn the_changelog_has_one_line_per_change_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changes.jsonl");
    common::succeeded(
        kascade()
            .args(["replay", "--output"])
            .arg(format!("changelog={}", path.display()))
            .arg(common::fixture_path("deployment", "audit.log")),
    );
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let all = changes("deployment").await;
    assert_eq!(lines.len(), all.len());
    let create = lines
        .iter()
        .find(|l| {
            l["user"] == RS && l["operation"] == "create" && l["object"]["resource"] == "pods"
        })
        .unwrap();
    assert!(create["old_object"].is_null());
    assert_eq!(create["new_object"]["kind"], "Pod");
    assert_eq!(create["role"], "effect");
    let cause = &create["cause"];
    assert_eq!(cause["edge"], "replicasets → pods create");
    assert_eq!(cause["object"]["resource"], "replicasets");
    assert_eq!(cause["span_id"].as_str().unwrap().len(), 16);
    assert_eq!(cause["trace_id"].as_str().unwrap().len(), 32);
    assert!(cause["name"].as_str().unwrap().contains("replicasets"));
    assert!(cause["hop_us"].is_u64());
    assert_eq!(create["root"]["span_id"].as_str().unwrap().len(), 16);
    assert!(humantime::parse_rfc3339(create["time"].as_str().unwrap()).is_ok());
    let patch = lines
        .iter()
        .find(|l| l["operation"] == "patch" && l["object"]["resource"] == "deployments")
        .unwrap();
    assert_eq!(patch["role"], "root");
    assert!(patch["cause"].is_null());
    assert!(!patch["old_object"].is_null() && !patch["new_object"].is_null());
    assert_ne!(
        patch["old_object"]["spec"]["template"],
        patch["new_object"]["spec"]["template"]
    );
}

#[test]
fn the_changelog_holds_redacted_objects_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changes.jsonl");
    common::succeeded(
        kascade()
            .args(["replay", "--output"])
            .arg(format!("changelog={}", path.display()))
            .arg(common::fixture_path("config", "audit.log")),
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\"resource\":\"secrets\""),
        "the fixture writes a Secret"
    );
    // The Secret's values as the fixture wrote them (base64).
    for secret in [
        "a2FzY2FkZS1maXh0dXJlLXMzY3IzdC12YWx1ZQ==",
        "a2FzY2FkZS1maXh0dXJlLXJvdGF0ZWQtdmFsdWU=",
    ] {
        assert!(!text.contains(secret), "secret value in the change log");
    }
}

/// `kascade collect` live: the propagation histogram on /metrics and the
/// change log, from the deployment fixture posted to the audit webhook.
#[tokio::test]
async fn collect_exports_propagation_seconds_and_writes_the_changelog() {
    use kascade::app::collect::{self, CollectConfig};
    use kascade::test_support::export::OutputSpec;
    let dir = tempfile::tempdir().unwrap();
    let changelog = dir.path().join("changes.jsonl");
    let mut config = CollectConfig::default()
        .cluster("fixture")
        .spool_dir(dir.path().join("spool"));
    config.export.outputs = vec![
        OutputSpec::OtlpJson(dir.path().join("spans.jsonl")),
        OutputSpec::Changelog(changelog.clone()),
    ];
    let (apps, pipeline) = collect::build(&config).unwrap();
    let url =
        common::collector::spawn_server(apps.audit.merge(apps.admin), config.header_read_timeout);
    let lines = common::audit_lines("deployment");
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{url}/audit"))
        .body(common::event_list(&lines))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let raw = raw("deployment");
    let pod_creates = raw_writes(&raw, RS, "create", "pods", "");
    let series = "kascade_propagation_seconds_count{edge=\"replicasets → pods create\"}";
    // Polled until every event is processed (no assumption about speed; the
    // deadline only turns a hang into a failure).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let metrics = loop {
        assert!(std::time::Instant::now() < deadline, "events not processed");
        let m = client
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let processed = m
            .lines()
            .find(|l| l.starts_with("kascade_audit_events_processed_total "))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        let accepted = m
            .lines()
            .filter(|l| l.starts_with("kascade_audit_events_accepted_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        if accepted > 0.0 && processed >= accepted {
            break m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let count = metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok());
    assert_eq!(count, Some(pod_creates), "{metrics}");
    assert!(
        metrics.contains("kascade_changelog_dropped_total 0"),
        "{metrics}"
    );
    pipeline.finish().await;
    let written = std::fs::read_to_string(&changelog).unwrap();
    let all = changes("deployment").await;
    assert_eq!(written.lines().count(), all.len());
}

/// `kascade analyze` in `format`: its stdout.
fn analyze_output(scenario: &str, format: &str) -> String {
    let out = common::succeeded(
        kascade()
            .args(["analyze", "--format", format])
            .arg(common::fixture_path(scenario, "audit.log")),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cascades_that_did_not_complete_are_counted_by_root() {
    // rollout-stuck: the patch's new Pods never become ready; unschedulable:
    // the Pod is never scheduled. Their other cascades complete, and every
    // cascade of the deployment fixture does.
    for (scenario, kind, verb) in [
        ("rollout-stuck", "deployments", "patch"),
        ("unschedulable", "pods", "create"),
    ] {
        let report: Report = serde_json::from_str(&analyze_output(scenario, "json")).unwrap();
        let rows: Vec<_> = report
            .completions
            .iter()
            .map(|c| {
                (
                    c.kind.as_str(),
                    c.verb.as_str(),
                    c.latency.count,
                    c.incomplete,
                )
            })
            .collect();
        assert!(rows.contains(&(kind, verb, 0, 1)), "{scenario}: {rows:?}");
        // The progress deadline's status write is a cascade of its own (a
        // timer's), which leaves the Deployment failed.
        let timer = ("deployments", "update status");
        assert!(
            rows.iter()
                .all(|r| r.3 == 0 || (r.0, r.1) == (kind, verb) || (r.0, r.1) == timer),
            "{scenario}: {rows:?}"
        );
        assert!(rows.iter().any(|r| r.2 > 0), "{scenario}: {rows:?}");
        let text = analyze_output(scenario, "text");
        assert!(
            text.contains(&format!("  {kind} {verb}: 1 did not complete")),
            "{scenario}: {text}"
        );
        let csv = analyze_output(scenario, "csv");
        assert!(
            csv.lines()
                .any(|l| l == format!("incomplete,{kind} {verb},1,,,,")),
            "{scenario}: {csv}"
        );
        assert!(
            !csv.lines()
                .any(|l| l.starts_with(&format!("completion,{kind} {verb},"))),
            "{scenario}: {csv}"
        );
    }
    let report: Report = serde_json::from_str(&analyze_output("deployment", "json")).unwrap();
    assert!(report.completions.len() >= 3, "{:?}", report.completions);
    assert!(
        report
            .completions
            .iter()
            .all(|c| c.incomplete == 0 && c.latency.count > 0),
        "{:?}",
        report.completions
    );
}

//! The kubelet's own pod syncs joined to the Pods they synced, on data
//! captured from a real node (e2e/node.sh: a kubelet v1.36 with containerd
//! and runc beside the kwok nodes; e2e/real-node-fixtures.sh): a crash
//! loop, an image that does not exist, an OOM kill and a failing readiness
//! probe, each with its audit log and the kubelet's traces as its exporter
//! sent them (`syncPod`, `syncTerminatingPod`, … with `k8s.pod.uid`, the
//! CRI calls under them, containerd's spans under those).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kascade::test_support::frontend::assemble::Scope;
use kascade::test_support::frontend::components::{self, KUBELET_SERVICE, POD_UID_TAG};
use kascade::test_support::frontend::display::Mode;
use kascade::test_support::frontend::raw::{MemoryStore, TimeRange, from_nanos, string_attr};
use kascade::test_support::frontend::{AssembledTrace, Frontend, FrontendConfig, SearchQuery};
use opentelemetry_proto::tonic::trace::v1::Span;

const SCENARIOS: [&str; 4] = [
    "real-crashloop",
    "real-image-missing",
    "real-oom",
    "real-readiness",
];

fn kubelet_spans(scenario: &str) -> Vec<Span> {
    let path = common::fixture_path(scenario, "kubelet-traces.jsonl");
    components::spans_from_otlp_json_lines(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The synced Pods of a fixture: (namespace, name, uid), from its
/// kubelet's sync spans, and how many syncs (traces) each had.
fn synced_pods(spans: &[Span]) -> HashMap<(String, String, String), usize> {
    let mut traces: HashMap<(String, String, String), HashSet<Vec<u8>>> = HashMap::new();
    for s in spans {
        let a = &s.attributes;
        if let (Some(ns), Some(name), Some(uid)) = (
            string_attr(a, "k8s.namespace.name"),
            string_attr(a, "k8s.pod.name"),
            string_attr(a, POD_UID_TAG),
        ) {
            traces
                .entry((ns.into(), name.into(), uid.into()))
                .or_default()
                .insert(s.trace_id.clone());
        }
    }
    traces.into_iter().map(|(k, t)| (k, t.len())).collect()
}

async fn store(scenario: &str, with_kubelet: bool) -> MemoryStore {
    let mut store = common::raw_store_of_lines(common::audit_lines(scenario), "fixture").await;
    if with_kubelet {
        store.add(kubelet_spans(scenario));
    }
    store
}

async fn pod_trace(store: MemoryStore, ns: &str, name: &str, mode: Mode) -> Arc<AssembledTrace> {
    let (a, b) = store.time_span().unwrap();
    let f = Frontend::new(Arc::new(store), FrontendConfig::default());
    let found = f
        .search(&SearchQuery {
            mode,
            scope: Scope::Full,
            all_siblings: true,
            tags: vec![
                ("resource".into(), "pods".into()),
                ("namespace".into(), ns.into()),
                ("name".into(), name.into()),
            ],
            range: TimeRange::new(from_nanos(a), from_nanos(b)),
            limit: 5,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{mode:?}: one trace for pod {ns}/{name}");
    found[0].clone()
}

fn spans_of(t: &AssembledTrace) -> Vec<(String, Span)> {
    common::spans_with_service(t)
}

/// The audit IDs of the Pod's writes, from the fixture's audit log.
fn writes_of(scenario: &str, ns: &str, name: &str) -> HashSet<String> {
    common::audit_lines(scenario)
        .iter()
        .filter_map(|l| {
            let ev: serde_json::Value = serde_json::from_str(l).ok()?;
            let r = &ev["objectRef"];
            (r["resource"] == "pods" && r["namespace"] == ns && r["name"] == name)
                .then(|| ev["auditID"].as_str().map(str::to_string))?
        })
        .collect()
}

/// Whether `s` shows the Pod: its object span (by uid) or one of its
/// writes (modes timeline and cascade).
fn shows_pod(s: &Span, uid: &str, writes: &HashSet<String>) -> bool {
    let a = &s.attributes;
    (string_attr(a, "resource") == Some("pods") && string_attr(a, "uid") == Some(uid))
        || string_attr(a, "audit.id").is_some_and(|id| writes.contains(id))
}

#[tokio::test]
async fn each_pod_sync_of_a_real_kubelet_hangs_under_its_pod_in_every_mode() {
    for scenario in SCENARIOS {
        let captured = kubelet_spans(scenario);
        let pods = synced_pods(&captured);
        assert!(!pods.is_empty(), "{scenario}: the kubelet synced no Pod");
        for ((ns, name, uid), syncs) in &pods {
            let writes = writes_of(scenario, ns, name);
            assert!(!writes.is_empty(), "{scenario}: no write of {ns}/{name}");
            for mode in Mode::ALL {
                let t = pod_trace(store(scenario, true).await, ns, name, mode).await;
                let spans = spans_of(&t);
                let by_id: HashMap<&[u8], &Span> = spans
                    .iter()
                    .map(|(_, s)| (s.span_id.as_slice(), s))
                    .collect();
                // The syncs joined: the kubelet's roots, each linked to its
                // own trace.
                let roots: Vec<&Span> = spans
                    .iter()
                    .filter(|(svc, s)| svc == KUBELET_SERVICE && !s.links.is_empty())
                    .map(|(_, s)| s)
                    .collect();
                assert_eq!(
                    roots.len(),
                    (*syncs).min(components::MAX_SYNCS_PER_POD),
                    "{scenario} {mode:?}: every sync of {ns}/{name} joined once"
                );
                for r in &roots {
                    assert_eq!(string_attr(&r.attributes, POD_UID_TAG), Some(uid.as_str()));
                    let parent = by_id
                        .get(r.parent_span_id.as_slice())
                        .unwrap_or_else(|| panic!("{scenario} {mode:?}: {} has no parent", r.name));
                    assert!(
                        shows_pod(parent, uid, &writes),
                        "{scenario} {mode:?}: {} hangs under {:?}, which does not show {ns}/{name}",
                        r.name,
                        parent.name
                    );
                }
                // Nothing outside its parent (Jaeger calls that clock skew):
                // the kubelet's probe calls run long after their sync.
                for (_, s) in &spans {
                    if let Some(p) = by_id.get(s.parent_span_id.as_slice()) {
                        assert!(
                            p.start_time_unix_nano <= s.start_time_unix_nano
                                && s.end_time_unix_nano <= p.end_time_unix_nano,
                            "{scenario} {mode:?}: {} lies outside its parent {}",
                            s.name,
                            p.name
                        );
                    }
                }
                // The CRI calls and containerd's spans come along.
                assert!(
                    spans
                        .iter()
                        .filter(|(svc, _)| svc == KUBELET_SERVICE)
                        .count()
                        > roots.len(),
                    "{scenario} {mode:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_failed_sync_keeps_the_kubelets_error_and_no_kubelet_traces_join_nothing() {
    let captured = kubelet_spans("real-crashloop");
    let ((ns, name, _), _) = synced_pods(&captured).into_iter().next().unwrap();
    let t = pod_trace(
        store("real-crashloop", true).await,
        &ns,
        &name,
        Mode::Tracing,
    )
    .await;
    let failed: Vec<String> = spans_of(&t)
        .into_iter()
        .filter(|(svc, s)| {
            svc == KUBELET_SERVICE
                && s.name == "syncPod"
                && s.status.as_ref().is_some_and(|st| st.code == 2)
        })
        .map(|(_, s)| s.status.unwrap().message)
        .collect();
    assert!(
        failed.iter().any(|m| m.contains("CrashLoopBackOff")),
        "{failed:?}"
    );
    let without = pod_trace(
        store("real-crashloop", false).await,
        &ns,
        &name,
        Mode::Tracing,
    )
    .await;
    assert!(
        spans_of(&without)
            .iter()
            .all(|(svc, _)| svc != KUBELET_SERVICE)
    );
}

fn trace_text(scenario: &str, ns: &str, object: &str, args: &[&str]) -> String {
    let out = common::succeeded(
        common::kascade()
            .arg("trace")
            .arg(common::fixture_path(scenario, "audit.log"))
            .args(["-n", ns, "--object", object, "--color", "never"])
            .args(["--max-diff-lines", "0", "--quiet"])
            .args(args),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn kascade_trace_gives_each_sync_of_a_pod_a_line_among_its_writes() {
    let file = common::fixture_path("real-crashloop", "kubelet-traces.jsonl");
    let text = trace_text(
        "real-crashloop",
        "real-crash",
        "deploy/crasher",
        &["--component-traces", file.to_str().unwrap()],
    );
    let syncs: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("  kubelet syncPod "))
        .collect();
    let captured = synced_pods(&kubelet_spans("real-crashloop"));
    assert_eq!(syncs.len(), captured.values().sum::<usize>(), "{text}");
    // The first sync started the container: its CRI calls.
    assert!(
        syncs[0].contains("RunPodSandbox ") && syncs[0].contains("StartContainer "),
        "{}",
        syncs[0]
    );
    // The back-off: the kubelet's own words.
    assert!(
        syncs
            .iter()
            .any(|l| l.contains("✗ failed to \"StartContainer\" for \"app\" with CrashLoopBackOff")),
        "{text}"
    );
    // Under the Pod, not elsewhere: every sync line follows the Pod's header.
    let pod_header = text
        .lines()
        .position(|l| l.contains("pods real-crash/crasher-"))
        .unwrap();
    let first_sync = text
        .lines()
        .position(|l| l.contains("  kubelet syncPod "))
        .unwrap();
    assert!(first_sync > pod_header, "{text}");
    // An image that does not exist: the pull the kubelet tried, failed.
    let file = common::fixture_path("real-image-missing", "kubelet-traces.jsonl");
    let (ns, name) = synced_pods(&kubelet_spans("real-image-missing"))
        .into_keys()
        .map(|(ns, name, _)| (ns, name))
        .next()
        .unwrap();
    let text = trace_text(
        "real-image-missing",
        &ns,
        &format!("pod/{name}"),
        &["--component-traces", file.to_str().unwrap()],
    );
    assert!(text.contains("PullImage "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("kubelet syncPod ") && l.contains("PullImage") && l.contains(" ✗")),
        "{text}"
    );
    // Without the file: no sync line.
    assert!(
        !trace_text("real-crashloop", "real-crash", "deploy/crasher", &[])
            .contains("kubelet syncPod")
    );
}

//! The frontend over the real fixtures: scopes, display modes, trace ids that
//! survive a replica without cache, the redirect endpoint and bad input.
//! Expected objects are read from the audit log itself (owner references in
//! the apiserver's responses), not from kascade's output.

mod common;

use common::int_attr;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use kascade::test_support::frontend::assemble::{Limits, Scope};
use kascade::test_support::frontend::display::{Mode, render};
use kascade::test_support::frontend::http::{RedirectState, router};
use kascade::test_support::frontend::proto::{
    AnyValue, FindTracesRequest, GetTraceParams, GetTracesRequest, KeyValue, TraceQueryParameters,
    any_value,
};
use kascade::test_support::frontend::raw::{
    JaegerHttp, MemoryStore, RawStore, TimeRange, from_nanos, parse_hex_trace_id, string_attr,
};
use kascade::test_support::frontend::service::{JaegerStorage, parse_query};
use kascade::test_support::frontend::{
    AssembledTrace, Frontend, FrontendConfig, FrontendError, SearchQuery,
};
use opentelemetry_proto::tonic::trace::v1::{Span, TracesData};
use serde_json::Value;
use tower::ServiceExt;

const CLUSTER: &str = "fixture";

async fn store(scenario: &str) -> MemoryStore {
    store_of_lines(common::audit_lines(scenario)).await
}

async fn store_of_lines(lines: Vec<String>) -> MemoryStore {
    common::raw_store_of_lines(lines, CLUSTER).await
}

/// The deployment `hello`'s full tree (tree mode), as `f` finds it.
async fn hello_tree(f: &Frontend<MemoryStore>) -> Arc<AssembledTrace> {
    hello_in(f, Mode::Tree).await
}

/// The id of the deployment `hello`'s full tree, as the UI would reload it
/// on any replica.
async fn hello_tree_id(store: &Arc<MemoryStore>) -> [u8; 16] {
    hello_tree(&Frontend::new(store.clone(), FrontendConfig::default()))
        .await
        .id
}

fn whole_range(store: &MemoryStore) -> TimeRange {
    let (a, b) = store.time_span().expect("spans");
    TimeRange::new(from_nanos(a), from_nanos(b))
}

async fn frontend(scenario: &str) -> (Arc<Frontend<MemoryStore>>, TimeRange) {
    let s = store(scenario).await;
    let range = whole_range(&s);
    (
        Arc::new(Frontend::new(Arc::new(s), FrontendConfig::default())),
        range,
    )
}

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn search_one(
    f: &Frontend<MemoryStore>,
    range: TimeRange,
    mode: Mode,
    scope: Scope,
    t: &[(&str, &str)],
) -> Arc<AssembledTrace> {
    let found = f
        .search(&SearchQuery {
            mode,
            scope,
            all_siblings: false,
            tags: tags(t),
            range,
            limit: 20,
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "one trace for {t:?}");
    found[0].clone()
}

/// ReplicaSets of `hello` and the Pods of each, from the owner references the
/// apiserver returned in the audit log.
fn owned_by_fixture(scenario: &str) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut owned: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for line in common::audit_lines(scenario) {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        let Some(owners) = obj["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        for o in owners {
            if o["controller"] == true {
                owned
                    .entry((
                        o["kind"].as_str().unwrap().to_string(),
                        o["name"].as_str().unwrap().to_string(),
                    ))
                    .or_default()
                    .insert(name.to_string());
            }
        }
    }
    owned
}

fn all_spans(t: &AssembledTrace) -> Vec<(String, Span)> {
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

#[tokio::test]
async fn full_tree_of_the_deployment_has_both_replicasets_and_their_pods() {
    let (f, range) = frontend("deployment").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let owned = owned_by_fixture("deployment");
    let replicasets = &owned[&("Deployment".to_string(), "hello".to_string())];
    assert_eq!(replicasets.len(), 2, "the fixture has two ReplicaSets");

    let asm = &t.assembly;
    let root = &asm.nodes[0];
    assert_eq!(root.history.object.resource, "deployments");
    assert_eq!(root.history.object.name, "hello");
    let children: BTreeSet<String> = root
        .children
        .iter()
        .map(|&c| &asm.nodes[c].history.object)
        .filter(|o| o.resource == "replicasets")
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(&children, replicasets);
    for &c in &root.children {
        let rs = &asm.nodes[c];
        let pods: BTreeSet<String> = rs
            .children
            .iter()
            .map(|&p| &asm.nodes[p].history.object)
            .filter(|o| o.resource == "pods")
            .map(|o| o.name.clone())
            .collect();
        assert_eq!(
            pods,
            owned[&("ReplicaSet".to_string(), rs.history.object.name.clone())],
            "pods under {}",
            rs.history.object.name
        );
    }

    // In tracing mode the writes, Events and diffs are logs of the object span.
    let spans = all_spans(&t);
    let root_span = spans
        .iter()
        .find(|(svc, s)| svc == "deployments" && s.parent_span_id.is_empty())
        .map(|(_, s)| s)
        .expect("root span");
    assert_eq!(root_span.name, "default/hello");
    // The fixture's first write of hello is a refused delete, which names no
    // uid; the span shows the uid its create gave it.
    let created_uid = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "deployments"
                && e["objectRef"]["name"] == "hello"
        })
        .expect("hello's create")["responseObject"]["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    for key in ["uid", "k8s.deployment.uid"] {
        assert_eq!(
            string_attr(&root_span.attributes, key),
            Some(created_uid.as_str()),
            "{key}"
        );
    }
    let log = |pred: &dyn Fn(&opentelemetry_proto::tonic::trace::v1::span::Event) -> bool| {
        root_span.events.iter().any(pred)
    };
    assert!(log(&|e| e.name.ends_with("patch scale")
        && string_attr(&e.attributes, "diff")
            .is_some_and(|d| d.contains("spec.replicas: 3 → 5"))));
    assert!(log(
        &|e| e.name.ends_with(" delete") && string_attr(&e.attributes, "snapshot").is_some()
    ));
    assert!(log(&|e| e.name == "event ScalingReplicaSet"));
    let json = serde_json::to_string(&t.resource_spans).unwrap();
    assert!(
        !json.contains("managedFields"),
        "managedFields leaked into a diff"
    );
    assert!(
        !json.contains("kascade.span"),
        "internal attributes are hidden"
    );
}

#[tokio::test]
async fn ancestors_of_a_replicaset_is_the_deployment_with_only_that_replicaset() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    for rs in &owned[&("Deployment".to_string(), "hello".to_string())] {
        let t = search_one(
            &f,
            range,
            Mode::Tracing,
            Scope::Ancestors,
            &[("resource", "replicasets"), ("name", rs)],
        )
        .await;
        let asm = &t.assembly;
        assert_eq!(asm.nodes.len(), 2);
        assert_eq!(asm.nodes[0].history.object.name, "hello");
        assert_eq!(asm.nodes[0].children, vec![1]);
        assert_eq!(&asm.nodes[1].history.object.name, rs);
        assert_eq!(asm.nodes[1].class.as_deref(), Some("owner"));
        assert_eq!(asm.searched, 1);
    }
}

#[tokio::test]
async fn descendants_and_object_scopes() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let rs = owned[&("Deployment".to_string(), "hello".to_string())]
        .iter()
        .next()
        .unwrap()
        .clone();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Descendants,
        &[("resource", "replicasets"), ("name", &rs)],
    )
    .await;
    let asm = &t.assembly;
    assert_eq!(
        asm.nodes[0].history.object.name, rs,
        "the searched RS is the root"
    );
    let pods: BTreeSet<String> = asm
        .nodes
        .iter()
        .filter(|n| n.history.object.resource == "pods")
        .map(|n| n.history.object.name.clone())
        .collect();
    assert_eq!(pods, owned[&("ReplicaSet".to_string(), rs.clone())]);
    assert!(
        asm.nodes
            .iter()
            .all(|n| n.history.object.resource != "deployments"),
        "descendants never climb"
    );

    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Object,
        &[("resource", "replicasets"), ("name", &rs)],
    )
    .await;
    assert_eq!(t.assembly.nodes.len(), 1);
}

#[tokio::test]
async fn display_modes_lay_out_the_same_entries_differently() {
    let (f, range) = frontend("deployment").await;
    let q = [("resource", "deployments"), ("name", "hello")];
    let tracing = search_one(&f, range, Mode::Tracing, Scope::Full, &q).await;
    let entries: usize = tracing
        .assembly
        .nodes
        .iter()
        .map(|n| n.history.entries.len())
        .sum();
    let objects = tracing.assembly.nodes.len();
    assert!(entries > objects);

    let spans = all_spans(&tracing);
    assert_eq!(spans.len(), objects, "tracing: one span per object");
    let logs: usize = spans.iter().map(|(_, s)| s.events.len()).sum();
    assert_eq!(logs, entries, "tracing: every entry is a log");

    let tree = search_one(&f, range, Mode::Tree, Scope::Full, &q).await;
    let spans = all_spans(&tree);
    assert_eq!(
        spans.len(),
        objects + entries,
        "tree: entries are child spans"
    );

    let timeline = search_one(&f, range, Mode::Timeline, Scope::Full, &q).await;
    let spans = all_spans(&timeline);
    assert_eq!(spans.len(), 1 + entries, "timeline: root plus every entry");
    let root = spans
        .iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert!(
        spans
            .iter()
            .filter(|(_, s)| !s.parent_span_id.is_empty())
            .all(|(_, s)| s.parent_span_id == root.1.span_id),
        "timeline: flat under the root"
    );
    let (first, last) = spans.iter().fold((u64::MAX, 0), |(a, b), (_, s)| {
        (a.min(s.start_time_unix_nano), b.max(s.end_time_unix_nano))
    });
    assert_eq!(
        (root.1.start_time_unix_nano, root.1.end_time_unix_nano),
        (first, last)
    );

    let grouped = search_one(&f, range, Mode::Grouped, Scope::Full, &q).await;
    let spans = all_spans(&grouped);
    let source_spans: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "audit" || s.name == "event")
        .collect();
    let logs: usize = source_spans.iter().map(|s| s.events.len()).sum();
    assert_eq!(logs, entries, "grouped: every entry in its source span");
    assert!(source_spans.iter().any(|s| s.name == "event"));

    // Every mode keeps one trace id and parents that exist.
    for t in [&tracing, &tree, &timeline, &grouped] {
        let spans = all_spans(t);
        let ids: HashSet<Vec<u8>> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
        assert_eq!(ids.len(), spans.len(), "span ids are unique");
        for (_, s) in &spans {
            assert_eq!(s.trace_id, t.id.to_vec());
            assert!(s.parent_span_id.is_empty() || ids.contains(&s.parent_span_id));
        }
    }
}

#[tokio::test]
async fn classes_can_be_grouped_under_a_virtual_span() {
    let (f, range) = frontend("deployment").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let group: HashSet<String> = ["node".to_string()].into();
    let rendered = render(&t.assembly, Mode::Tracing, &t.id, &group, 0);
    let spans: Vec<Span> = rendered
        .iter()
        .flat_map(|rs| rs.scope_spans.iter().flat_map(|ss| ss.spans.clone()))
        .collect();
    let virtuals: Vec<&Span> = spans.iter().filter(|s| s.name == "node").collect();
    assert!(!virtuals.is_empty());
    let nodes: Vec<&Span> = spans
        .iter()
        .filter(|s| string_attr(&s.attributes, "resource") == Some("nodes"))
        .collect();
    assert!(!nodes.is_empty());
    for n in nodes {
        assert!(
            virtuals.iter().any(|v| v.span_id == n.parent_span_id),
            "node {} hangs under a virtual 'node' span",
            n.name
        );
    }
}

#[tokio::test]
async fn a_trace_id_reloads_on_a_replica_without_the_cache() {
    let s = Arc::new(store("deployment").await);
    let a = Frontend::new(s.clone(), FrontendConfig::default());
    let b = Frontend::new(s.clone(), FrontendConfig::default());
    let original = hello_tree(&a).await;
    let reloaded = b
        .get(&original.id)
        .await
        .unwrap()
        .expect("decoded and rebuilt");
    assert_eq!(
        serde_json::to_string(&reloaded.resource_spans).unwrap(),
        serde_json::to_string(&original.resource_spans).unwrap()
    );
    assert!(
        b.get(&[9u8; 16]).await.unwrap().is_none(),
        "foreign ids are not found"
    );
}

/// The deployment `hello`'s full tree in `mode`, searched on `f`.
async fn hello_in(f: &Frontend<MemoryStore>, mode: Mode) -> Arc<AssembledTrace> {
    f.search(&SearchQuery {
        mode,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: whole_range(f.store()),
        limit: 1,
    })
    .await
    .unwrap()
    .remove(0)
}

#[tokio::test]
async fn the_trace_cache_keeps_what_fits_in_cache_bytes() {
    let s = Arc::new(store("deployment").await);
    let sizes = Frontend::new(s.clone(), FrontendConfig::default());
    let tracing_bytes = hello_in(&sizes, Mode::Tracing).await.bytes;
    let tree_bytes = hello_in(&sizes, Mode::Tree).await.bytes;
    assert!(tracing_bytes > 100_000 && tree_bytes > 100_000);
    let counts = |f: &Frontend<MemoryStore>| {
        let m = f.metrics();
        (
            m.traces_assembled.get(),
            m.cache_hits.get(),
            m.cache_evictions.get(),
        )
    };

    // Room for either trace, not both: the one asked for longest ago goes.
    let f = Frontend::new(
        s.clone(),
        FrontendConfig {
            cache_bytes: tracing_bytes.max(tree_bytes) + 4096,
            ..FrontendConfig::default()
        },
    );
    hello_in(&f, Mode::Tracing).await;
    let cached = f.metrics().cache_bytes.get() as u64;
    assert!(
        cached >= tracing_bytes && cached < tracing_bytes + 1024,
        "gauge {cached}, trace {tracing_bytes}"
    );
    hello_in(&f, Mode::Tracing).await;
    assert_eq!(counts(&f), (1, 1, 0), "the second search is a cache hit");
    hello_in(&f, Mode::Tree).await;
    assert_eq!(counts(&f), (2, 1, 1), "the tree evicted the first trace");
    hello_in(&f, Mode::Tree).await;
    hello_in(&f, Mode::Tracing).await;
    assert_eq!(
        counts(&f),
        (3, 2, 2),
        "the tree was kept; the first trace was assembled again"
    );

    // A trace larger than the whole cache is answered every time, never kept.
    let small = Frontend::new(
        s.clone(),
        FrontendConfig {
            cache_bytes: tracing_bytes / 2,
            ..FrontendConfig::default()
        },
    );
    for _ in 0..2 {
        let t = hello_in(&small, Mode::Tracing).await;
        assert_eq!(t.bytes, tracing_bytes, "the same trace");
    }
    assert_eq!(counts(&small), (2, 0, 2));
    assert_eq!(small.metrics().cache_bytes.get(), 0);
}

#[tokio::test]
async fn wide_assemblies_are_assembled_one_at_a_time() {
    use kascade::test_support::frontend::assemble::{Assembler, Clip};
    let s = Arc::new(store_of_lines(common::deployment_with_pods(100)).await);
    let f = Frontend::new(s.clone(), FrontendConfig::default());
    let whole = hello_in(&f, Mode::Tree).await;
    let deployment = whole.assembly.nodes[whole.assembly.searched]
        .history
        .clone();
    let range = whole_range(&s);
    let clip = Clip {
        windows: f.windows_between(range.start, range.end),
        until: u64::MAX,
    };
    // Wide past a quarter of the budget: the whole tree is, and fits it.
    let metrics = Arc::new(kascade::test_support::metrics::FrontendMetrics::default());
    let assembler = Arc::new(Assembler::new(
        s.clone(),
        Limits {
            max_bytes: loaded_bytes(&whole) * 2,
            ..Limits::default()
        },
        metrics.clone(),
    ));
    let (first, held) = assembler
        .assemble(deployment.clone(), Scope::Full, &clip)
        .await
        .unwrap();
    let held = held.expect("a wide assembly holds the permit");
    assert_eq!(first.nodes.len(), whole.assembly.nodes.len());

    // While the first is held (being rendered), a second wide one waits.
    let second = tokio::spawn({
        let (assembler, clip) = (assembler.clone(), clip.clone());
        async move { assembler.assemble(deployment, Scope::Full, &clip).await }
    });
    let mut turns = 0;
    while metrics.wide_assembly_waits.get() == 0 {
        assert!(turns < 100_000, "the second assembly never waited");
        turns += 1;
        tokio::task::yield_now().await;
    }
    assert!(!second.is_finished());
    drop(held);
    let (second, permit) = second.await.unwrap().unwrap();
    assert!(permit.is_some());
    assert_eq!(second.nodes.len(), first.nodes.len());
    assert_eq!(metrics.wide_assembly_waits.get(), 1);
}

#[tokio::test]
async fn the_server_keeps_only_the_stream_it_serves() {
    use kascade::test_support::frontend::assembled::encoded_chunks;
    let s = Arc::new(store_of_lines(common::deployment_with_pods(100)).await);
    for mode in [Mode::Tracing, Mode::Cascade] {
        let whole = hello_in(&Frontend::new(s.clone(), FrontendConfig::default()), mode).await;
        let server = Frontend::new(
            s.clone(),
            FrontendConfig {
                keep_assembly: false,
                ..FrontendConfig::default()
            },
        );
        let served = hello_in(&server, mode).await;
        assert_eq!(served.id, whole.id);
        assert_eq!(
            encoded_chunks(&served),
            encoded_chunks(&whole),
            "{mode:?}: the same bytes on the wire"
        );
        assert!(whole.span_range.is_some());
        assert_eq!(served.span_range, whole.span_range);
        assert_eq!(served.assembly.notes, whole.assembly.notes);
        assert!(served.assembly.nodes.is_empty() && served.resource_spans.is_empty());
        assert!(
            served.bytes * 2 < whole.bytes,
            "{mode:?}: {} bytes served-only, {} whole",
            served.bytes,
            whole.bytes
        );
        // A cache hit streams the same.
        let again = hello_in(&server, mode).await;
        assert_eq!(server.metrics().cache_hits.get(), 1);
        assert_eq!(encoded_chunks(&again), encoded_chunks(&whole));
    }
}

/// Bytes of the histories an assembly loaded: its objects, not the copies
/// of shared objects made from them afterwards.
fn loaded_bytes(t: &AssembledTrace) -> u64 {
    t.assembly
        .nodes
        .iter()
        .filter(|n| n.copy_of.is_none())
        .map(|n| kascade::test_support::frontend::cache_weight::history_bytes(&n.history) as u64)
        .sum()
}

fn pods_in(t: &AssembledTrace) -> usize {
    t.assembly
        .nodes
        .iter()
        .filter(|n| n.copy_of.is_none() && n.history.object.resource == "pods")
        .count()
}

#[tokio::test]
async fn an_assembly_stops_loading_objects_at_max_trace_bytes() {
    use kascade::test_support::metrics::{AssemblyLimit, AssemblyLimitLabel};
    let s = Arc::new(store_of_lines(common::deployment_with_pods(300)).await);
    let whole = hello_in(
        &Frontend::new(s.clone(), FrontendConfig::default()),
        Mode::Tree,
    )
    .await;
    assert!(pods_in(&whole) > 300, "{} Pods", pods_in(&whole));
    assert!(
        whole.assembly.notes.is_empty(),
        "{:?}",
        whole.assembly.notes
    );

    // A third of what the whole tree loads.
    let budget = loaded_bytes(&whole) / 3;
    let f = Frontend::new(
        s.clone(),
        FrontendConfig {
            limits: Limits {
                max_bytes: budget,
                ..Limits::default()
            },
            ..FrontendConfig::default()
        },
    );
    let cut = hello_in(&f, Mode::Tree).await;
    let loaded = loaded_bytes(&cut);
    // The Pods' level is loaded in slices, up to the budget and not far past it.
    assert!(
        loaded >= budget && loaded < budget + budget / 20,
        "loaded {loaded} of a {budget}-byte budget"
    );
    let (pods_cut, pods_whole) = (pods_in(&cut), pods_in(&whole));
    assert!(
        pods_cut > 0 && pods_cut < pods_whole / 2,
        "{pods_cut} of {pods_whole} Pods"
    );
    // What was left out is noted on the root span, counted and named.
    let counted = f
        .metrics()
        .links_not_followed
        .get_or_create(&AssemblyLimitLabel {
            limit: AssemblyLimit::Bytes,
        })
        .get();
    assert!(
        counted as usize >= pods_whole - pods_cut,
        "{counted} links counted, {} Pods left out",
        pods_whole - pods_cut
    );
    let note = format!("{counted} linked objects not shown (max ");
    assert!(
        cut.assembly
            .notes
            .iter()
            .any(|n| n.starts_with(&note) && n.contains("--max-trace-bytes")),
        "{:?}",
        cut.assembly.notes
    );
    let root = all_spans(&cut)
        .into_iter()
        .map(|(_, span)| span)
        .find(|span| span.parent_span_id.is_empty())
        .expect("a root span");
    assert!(
        root.attributes.iter().any(|kv| kv.key == "note"
            && kv
                .value
                .as_ref()
                .is_some_and(|v| format!("{v:?}").contains("--max-trace-bytes"))),
        "the root span {} carries the note",
        root.name
    );
}

#[tokio::test]
async fn an_object_without_activity_in_range_is_an_empty_result() {
    let (f, _) = frontend("deployment").await;
    let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let found = f
        .search(&SearchQuery {
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
            tags: tags(&[("resource", "deployments"), ("name", "hello")]),
            range: TimeRange::new(long_ago, long_ago + Duration::from_secs(3600)),
            limit: 5,
        })
        .await
        .unwrap();
    assert!(found.is_empty());
    let err = f
        .search(&SearchQuery {
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
            tags: tags(&[("kind", "Deployment")]),
            range: TimeRange::new(long_ago, long_ago),
            limit: 5,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, FrontendError::InvalidArgument(m) if m.contains("\"kind\"")));
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
    }
}

#[test]
fn ui_search_form_maps_to_mode_cluster_tags_and_scope() {
    let q = parse_query(
        Some(TraceQueryParameters {
            service_name: "timeline".into(),
            operation_name: "prod".into(),
            attributes: vec![
                kv("resource", "pods"),
                kv("group", "core"),
                kv("scope", "ancestors"),
            ],
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap();
    assert_eq!(q.mode, Mode::Timeline);
    assert_eq!(q.scope, Scope::Ancestors);
    assert!(!q.all_siblings, "wide levels are summarised unless asked");
    assert!(q.tags.contains(&("cluster".into(), "prod".into())));
    assert!(q.tags.contains(&("group".into(), String::new())));

    let err = parse_query(
        Some(TraceQueryParameters {
            attributes: vec![kv("http.status_code", "200")],
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("http.status_code"),
        "{}",
        err.message()
    );

    let err = parse_query(
        Some(TraceQueryParameters {
            service_name: "flamegraph".into(),
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("flamegraph"));

    let siblings = |value: &str| {
        parse_query(
            Some(TraceQueryParameters {
                attributes: vec![kv("resource", "pods"), kv("siblings", value)],
                ..Default::default()
            }),
            Scope::Full,
        )
    };
    assert!(siblings("all").unwrap().all_siblings);
    assert!(!siblings("summary").unwrap().all_siblings);
    let err = siblings("some").unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("siblings") && err.message().contains("some"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn redirect_points_the_ui_at_a_trace_that_assembles() {
    let (f, range) = frontend("deployment").await;
    let app = router(Arc::new(RedirectState {
        frontend: f.clone(),
        ui_url: "http://ui.example:16686/".into(),
        default_cluster: CLUSTER.into(),
    }));
    let secs = range
        .start
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let resp = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/redirect?group=apps&resource=deployments&namespace=default&name=hello&time={secs}&mode=tree"
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let hex = location
        .strip_prefix("http://ui.example:16686/trace/")
        .unwrap_or_else(|| panic!("{location}"));
    let id = parse_hex_trace_id(hex).unwrap();
    let t = f
        .get(&id)
        .await
        .unwrap()
        .expect("the redirect's trace assembles");
    assert_eq!(t.assembly.nodes[0].history.object.name, "hello");

    for (query, needle) in [
        ("/redirect?resource=deployments", "name="),
        (
            "/redirect?resource=deployments&name=hello&time=yesterday",
            "time \"yesterday\"",
        ),
        (
            "/redirect?resource=deployments&name=hello&scope=up",
            "scope",
        ),
        (
            "/redirect?resource=deployments&name=hello&namespace=%00%ff",
            "holds the control character \\u{0}",
        ),
        (
            "/redirect?resource=deployments&name=hel%ffo&view=explain",
            "name: \"hel\u{fffd}o\" holds bytes that are not UTF-8",
        ),
    ] {
        let resp = app
            .clone()
            .oneshot(Request::get(query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
        let body = axum::body::to_bytes(resp.into_body(), 10_000)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(needle), "{query}: {body}");
    }
}

#[tokio::test]
async fn unreachable_raw_jaeger_is_an_error_naming_its_url() {
    // Nothing listens on port 1 of the loopback: a real refused connection.
    let store = JaegerHttp::new("http://127.0.0.1:1", "kascade", Duration::from_secs(2));
    let err = store.get([1; 16]).await.unwrap_err().to_string();
    assert!(err.contains("http://127.0.0.1:1"), "{err}");
    let f = Frontend::new(Arc::new(store), FrontendConfig::default());
    let now = std::time::SystemTime::now();
    let err = f
        .search(&SearchQuery {
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
            tags: tags(&[("name", "hello")]),
            range: TimeRange::new(now - Duration::from_secs(60), now),
            limit: 1,
        })
        .await
        .unwrap_err();
    assert!(matches!(err.root(), FrontendError::Raw(_)), "{err:?}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

#[tokio::test]
async fn secret_values_never_reach_an_assembled_trace() {
    // The config scenario's Secret values (plain and as base64 in Secret data).
    let secret_values = [
        "kascade-fixture-s3cr3t-value",
        "a2FzY2FkZS1maXh0dXJlLXMzY3IzdC12YWx1ZQ==",
        "kascade-fixture-rotated-value",
        "a2FzY2FkZS1maXh0dXJlLXJvdGF0ZWQtdmFsdWU=",
    ];
    let raw = common::audit_lines("config").join("\n");
    assert!(raw.contains(secret_values[1]) && raw.contains(secret_values[3]));
    let s = Arc::new(store("config").await);
    let range = whole_range(&s);
    // Also with every level of more than one object or write summarised:
    // the summary spans name what they stand for and carry its errors.
    let mut summaries = [0; 2];
    for max_siblings in [FrontendConfig::default().max_siblings, 1] {
        let f = Frontend::new(
            s.clone(),
            FrontendConfig {
                limits: Limits::default(),
                max_siblings,
                ..FrontendConfig::default()
            },
        );
        for mode in Mode::ALL {
            let found = f
                .search(&SearchQuery {
                    mode,
                    scope: Scope::Full,
                    all_siblings: false,
                    tags: tags(&[("namespace", "config-demo")]),
                    range,
                    limit: 100,
                })
                .await
                .unwrap();
            assert!(!found.is_empty());
            for t in found {
                let json = serde_json::to_string(&t.resource_spans).unwrap();
                for v in secret_values {
                    assert!(!json.contains(v), "{v} leaked");
                }
                for (i, key) in ["objects.not_shown", "writes.not_shown"].iter().enumerate() {
                    summaries[i] += all_spans(&t)
                        .iter()
                        .filter(|(_, s)| int_attr(s, key).is_some())
                        .count();
                }
            }
        }
    }
    assert!(
        summaries.iter().all(|&n| n > 0),
        "levels of objects and of writes summarised: {summaries:?}"
    );
}

#[tokio::test]
async fn a_service_links_to_the_pods_its_selector_picks_and_its_endpointslices() {
    // Expected from the fixture: the Service's selector and the Pods' labels
    // as the apiserver returned them.
    let mut selector = serde_json::Map::new();
    let mut pods: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    let mut slices = BTreeSet::new();
    for line in common::audit_lines("service") {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match obj["kind"].as_str() {
            Some("Service") if name == "web" => {
                selector = obj["spec"]["selector"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
            }
            Some("Pod") if ns == "svc-demo" => {
                if let Some(l) = obj["metadata"]["labels"].as_object() {
                    pods.insert(name, l.clone());
                }
            }
            Some("EndpointSlice")
                if obj["metadata"]["labels"]["kubernetes.io/service-name"] == "web" =>
            {
                slices.insert(name);
            }
            _ => {}
        }
    }
    assert!(!selector.is_empty() && !slices.is_empty());
    let selected: BTreeSet<String> = pods
        .iter()
        .filter(|(_, labels)| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(selected.len() >= 2, "{selected:?}");

    let (f, range) = frontend("service").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Descendants,
        &[
            ("resource", "services"),
            ("namespace", "svc-demo"),
            ("name", "web"),
        ],
    )
    .await;
    let asm = &t.assembly;
    let children = |resource: &str, class: &str| -> BTreeSet<String> {
        asm.nodes[0]
            .children
            .iter()
            .map(|&c| &asm.nodes[c])
            .filter(|n| n.history.object.resource == resource && n.class.as_deref() == Some(class))
            .map(|n| n.history.object.name.clone())
            .collect()
    };
    assert_eq!(children("pods", "selector"), selected);
    assert_eq!(children("endpointslices", "owner"), slices);

    // The Pod's side records the Service as its parent (selector).
    let pod = selected.iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Object,
        &[
            ("resource", "pods"),
            ("namespace", "svc-demo"),
            ("name", pod),
        ],
    )
    .await;
    assert!(
        t.assembly.nodes[0]
            .history
            .links
            .iter()
            .any(|l| l.other.resource == "services"
                && l.other.name == "web"
                && l.class == "selector")
    );
}

#[tokio::test]
async fn redirect_refuses_times_and_names_beyond_bounds_with_short_400s() {
    let (f, _) = frontend("deployment").await;
    let app = router(Arc::new(RedirectState {
        frontend: f,
        ui_url: "http://ui.example:16686".into(),
        default_cluster: CLUSTER.into(),
    }));
    // URIs stop at 64 KiB (the http crate), so values stop short of that.
    let huge = "n".repeat(60_000);
    let nines = "9".repeat(60_000);
    let base = "/redirect?resource=deployments&namespace=default";
    for (query, needle) in [
        // Panicked: Duration::from_secs_f64 overflow.
        (format!("{base}&name=hello&time=1e30"), "time \"1e30\""),
        (format!("{base}&name=hello&time=1e19"), "after 9999-12-31"),
        (format!("{base}&name=hello&time=inf"), "finite"),
        (format!("{base}&name={huge}"), "name \"nnnn"),
        (format!("{base}&name=hello&cluster={huge}"), "cluster name"),
        (
            format!(
                "/redirect?resource=pods&name=x&namespace={}",
                "s".repeat(64)
            ),
            "namespace",
        ),
        (format!("{base}&name=hello&mode={huge}"), "display mode"),
        (
            format!("{base}&name=hello&siblings={huge}"),
            "siblings: \"nnnn",
        ),
        (format!("{base}&name=hello&time={nines}"), "(60000 bytes)"),
    ] {
        let resp = app
            .clone()
            .oneshot(Request::get(&query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let short = &query[..query.len().min(120)];
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{short}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 22)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(needle), "{short}: {body}");
        assert!(body.len() < 600, "{short}: {} bytes echoed", body.len());
    }
    // `siblings=all` is carried in the trace id the UI is sent to.
    let mut locations = BTreeSet::new();
    for siblings in ["", "&siblings=summary", "&siblings=all"] {
        let query = format!("{base}&name=hello&time=1800000000{siblings}");
        let resp = app
            .clone()
            .oneshot(Request::get(&query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FOUND, "{query}");
        locations.insert(resp.headers()["location"].to_str().unwrap().to_string());
    }
    assert_eq!(locations.len(), 2, "{locations:?}");
}

/// The frontend's gRPC services on a loopback port, as Jaeger query reaches
/// them, and a channel to it.
async fn grpc_frontend<S: RawStore + 'static>(f: Arc<Frontend<S>>) -> tonic::transport::Channel {
    let incoming =
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    let (traces, deps) = JaegerStorage::new(f).servers();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(traces)
            .add_service(deps)
            .serve_with_incoming(incoming),
    );
    // The listener is bound already: connecting needs no wait.
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// FindTraces over the wire (the crate builds no gRPC client: the generic one).
async fn find_traces(
    channel: &tonic::transport::Channel,
    query: TraceQueryParameters,
) -> Result<usize, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    let resp = grpc
        .server_streaming(
            tonic::Request::new(FindTracesRequest { query: Some(query) }),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/jaeger.storage.v2.TraceReader/FindTraces",
            ),
            tonic_prost::ProstCodec::<FindTracesRequest, TracesData>::default(),
        )
        .await?;
    let mut stream = resp.into_inner();
    let mut n = 0;
    while stream.message().await?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// A FindTracesRequest whose query's `service_name` (1) is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct QueryNotUtf8 {
    #[prost(message, optional, tag = "1")]
    query: Option<ServiceNameBytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceNameBytes {
    #[prost(bytes = "vec", tag = "1")]
    service_name: Vec<u8>,
}

/// A FindTracesRequest whose query (1, a message) comes as a fixed64.
#[derive(Clone, PartialEq, prost::Message)]
struct QueryOfTheWrongWireType {
    #[prost(fixed64, tag = "1")]
    query: u64,
}

/// FindTraces with `request` as its message; the status it ends with.
async fn find_traces_raw<M: prost::Message + Default + Send + 'static>(
    channel: &tonic::transport::Channel,
    request: M,
) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let answer = grpc
        .server_streaming(
            tonic::Request::new(request),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/jaeger.storage.v2.TraceReader/FindTraces",
            ),
            tonic_prost::ProstCodec::<M, TracesData>::default(),
        )
        .await;
    match answer {
        Err(status) => status,
        Ok(resp) => {
            let mut stream = resp.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => return tonic::Status::ok(""),
                    Err(status) => return status,
                }
            }
        }
    }
}

/// A request that does not decode is the caller's error: InvalidArgument
/// saying so, not Internal.
#[tokio::test]
async fn grpc_requests_that_do_not_decode_get_invalid_argument() {
    let (f, _) = frontend("deployment").await;
    let channel = grpc_frontend(f).await;
    let not_utf8 = QueryNotUtf8 {
        query: Some(ServiceNameBytes {
            service_name: b"kas\xffcade".to_vec(),
        }),
    };
    let wrong_type = QueryOfTheWrongWireType { query: 7 };
    for status in [
        find_traces_raw(&channel, not_utf8).await,
        find_traces_raw(&channel, wrong_type).await,
    ] {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("does not decode"), "{status:?}");
    }
}

fn ts(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos })
}

#[tokio::test]
async fn grpc_searches_beyond_bounds_get_invalid_argument_with_a_short_message() {
    let (f, range) = frontend("deployment").await;
    let channel = grpc_frontend(f).await;
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
    };
    let good = TraceQueryParameters {
        attributes: vec![kv("name", "hello"), kv("resource", "deployments")],
        start_time_min: ts(secs(range.start), 0),
        start_time_max: ts(secs(range.end) + 1, 0),
        ..Default::default()
    };
    assert_eq!(find_traces(&channel, good.clone()).await.unwrap(), 1);
    // Jaeger sends Go's zero time (year 1) for an open bound: not an error.
    let open = TraceQueryParameters {
        start_time_min: ts(-62_135_596_800, 0),
        ..good.clone()
    };
    assert_eq!(find_traces(&channel, open).await.unwrap(), 1);

    let huge = "n".repeat(1 << 20);
    let cases: Vec<(TraceQueryParameters, &str)> = vec![
        // Panicked: overflow adding the duration to the epoch.
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 1_500_000_000),
                ..good.clone()
            },
            "start_time_max: nanos 1500000000",
        ),
        // Was searched as if the year 292 billion could hold spans.
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 0),
                ..good.clone()
            },
            "start_time_max: 9223372036854775807 s since the epoch is after 9999-12-31",
        ),
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 999_999_999),
                start_time_min: ts(i64::MAX, 0),
                ..good.clone()
            },
            "after 9999-12-31",
        ),
        (
            TraceQueryParameters {
                start_time_min: ts(0, -1),
                ..good.clone()
            },
            "start_time_min: nanos -1",
        ),
        // A 1 MiB value echoed whole made a status too large to send.
        (
            TraceQueryParameters {
                attributes: vec![kv("name", &huge)],
                ..good.clone()
            },
            "(1048576 bytes)",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv(&huge, "x")],
                ..good.clone()
            },
            "unknown tag",
        ),
        (
            TraceQueryParameters {
                service_name: huge.clone(),
                ..good.clone()
            },
            "display mode",
        ),
        (
            TraceQueryParameters {
                operation_name: huge.clone(),
                ..good.clone()
            },
            "cluster name",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv("namespace", &"s".repeat(64))],
                ..good.clone()
            },
            "64 bytes, longer than the 63 allowed",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv("name", "a"); 33],
                ..good.clone()
            },
            "33 tags",
        ),
    ];
    for (query, needle) in cases {
        let err = find_traces(&channel, query).await.unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{needle}: {}",
            &err.message()[..err.message().len().min(300)]
        );
        assert!(
            err.message().contains(needle),
            "{needle}: {}",
            err.message()
        );
        assert!(
            err.message().len() < 2200,
            "{needle}: {}",
            err.message().len()
        );
    }
    // The server is still there.
    assert_eq!(find_traces(&channel, good).await.unwrap(), 1);
}

#[tokio::test]
async fn get_traces_bounds_the_ids_per_request() {
    use kascade::test_support::frontend::proto::trace_reader_server::TraceReader;
    let (f, _) = frontend("deployment").await;
    let storage = JaegerStorage::new(f);
    let ids = |n: usize| GetTracesRequest {
        query: (0..n)
            .map(|i| GetTraceParams {
                trace_id: vec![i as u8; 16],
                ..Default::default()
            })
            .collect(),
    };
    assert!(
        storage
            .get_traces(tonic::Request::new(ids(100)))
            .await
            .is_ok()
    );
    let err = storage
        .get_traces(tonic::Request::new(ids(101)))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("101 trace ids"), "{}", err.message());
}

/// Pods' nodes (from the scheduler's bindings) and service accounts (from
/// the apiserver's responses) in a fixture's audit log.
fn pod_uses(scenario: &str) -> BTreeMap<String, (String, String)> {
    let mut sa: BTreeMap<String, String> = BTreeMap::new();
    for line in common::audit_lines(scenario) {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        if ev["objectRef"]["resource"] == "pods"
            && let (Some(n), Some(s)) = (
                obj["metadata"]["name"].as_str(),
                obj["spec"]["serviceAccountName"].as_str(),
            )
        {
            sa.insert(n.into(), s.into());
        }
    }
    common::bindings(scenario)
        .into_iter()
        .map(|(pod, n)| {
            let s = sa.get(&pod).cloned().unwrap_or_default();
            (pod, (n, s))
        })
        .collect()
}

fn children_of(
    asm: &kascade::test_support::frontend::assemble::Assembly,
    i: usize,
) -> BTreeSet<(String, String)> {
    asm.nodes[i]
        .children
        .iter()
        .map(|&c| {
            let o = &asm.nodes[c].history.object;
            (o.resource.clone(), o.name.clone())
        })
        .collect()
}

#[tokio::test]
async fn full_scope_shows_the_searched_objects_own_subtree() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let uses = pod_uses("deployment");
    // Every ReplicaSet searched: its own Pods under it (not only its sibling's).
    for rs in &owned[&("Deployment".to_string(), "hello".to_string())] {
        let t = search_one(
            &f,
            range,
            Mode::Tracing,
            Scope::Full,
            &[("resource", "replicasets"), ("name", rs)],
        )
        .await;
        let asm = &t.assembly;
        assert_eq!(asm.nodes[0].history.object.name, "hello");
        let pods: BTreeSet<String> = children_of(asm, asm.searched)
            .into_iter()
            .filter(|(r, _)| r == "pods")
            .map(|(_, n)| n)
            .collect();
        assert_eq!(pods, owned[&("ReplicaSet".to_string(), rs.clone())], "{rs}");
    }
    // A Pod searched: its Node and ServiceAccount under it.
    let (pod, (node, sa)) = uses.iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", pod)],
    )
    .await;
    let asm = &t.assembly;
    let below = children_of(asm, asm.searched);
    assert!(below.contains(&("nodes".into(), node.clone())), "{below:?}");
    assert!(
        below.contains(&("serviceaccounts".into(), sa.clone())),
        "{below:?}"
    );
    // And every other Pod shows its own Node too (a shared object under
    // each object that uses it), each copy its own span.
    for (i, n) in asm.nodes.iter().enumerate() {
        if n.history.object.resource != "pods" {
            continue;
        }
        let want = &uses[&n.history.object.name].0;
        assert!(
            children_of(asm, i).contains(&("nodes".into(), want.clone())),
            "{} lacks its node {want}",
            n.history.object.name
        );
    }
    // Copies are leaves: each carries the shared object's entries but not
    // its links (one per user: a Node under 1,000 Pods was copied with its
    // 1,000 links each time, and assembly grew with the square of the Pods).
    let mut copies = 0;
    for n in asm.nodes.iter() {
        let Some(original) = n.copy_of else { continue };
        copies += 1;
        let original = &asm.nodes[original].history;
        assert!(
            n.history.links.is_empty(),
            "{} copied with its links",
            n.history.object
        );
        assert!(
            !original.links.is_empty(),
            "{} has no links",
            original.object
        );
    }
    assert!(copies > 0, "no shared object was shown twice");
    let spans = all_spans(&t);
    let ids: HashSet<Vec<u8>> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");
}

#[tokio::test]
async fn full_scope_of_a_cronjobs_job_shows_the_jobs_pod() {
    let (f, range) = frontend("cronjob").await;
    let owned = owned_by_fixture("cronjob");
    let (job, pods) = owned
        .iter()
        .find(|((kind, _), _)| kind == "Job")
        .map(|((_, n), p)| (n.clone(), p.clone()))
        .unwrap();
    assert!(owned[&("CronJob".to_string(), "tick".to_string())].contains(&job));
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "jobs"), ("name", &job)],
    )
    .await;
    let asm = &t.assembly;
    assert_eq!(
        asm.nodes[0].history.object.name, "tick",
        "the CronJob is the root"
    );
    let got: BTreeSet<String> = children_of(asm, asm.searched)
        .into_iter()
        .filter(|(r, _)| r == "pods")
        .map(|(_, n)| n)
        .collect();
    assert_eq!(got, pods);
    // The result is titled by the Job, not only by its CronJob.
    let root = all_spans(&t)
        .into_iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert_eq!(
        format!("{}: {}", root.0, root.1.name),
        format!("cronjobs: cron-demo/tick ▸ jobs cron-demo/{job}")
    );
}

#[tokio::test]
async fn search_results_are_titled_by_the_searched_object() {
    let (f, range) = frontend("deployment").await;
    let (pod, _) = pod_uses("deployment").into_iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", &pod)],
    )
    .await;
    // The Jaeger UI titles a trace by its root span.
    let root = all_spans(&t)
        .into_iter()
        .find(|(_, s)| s.parent_span_id.is_empty())
        .unwrap();
    assert_eq!(root.0, "deployments");
    assert!(
        root.1.name.ends_with(&format!("▸ pods default/{pod}")),
        "{}",
        root.1.name
    );
}

/// requestReceivedTimestamp of an audit line, in ns since the epoch.
fn received_ns(ev: &Value) -> u64 {
    let t = ev["requestReceivedTimestamp"].as_str().unwrap();
    kascade::test_support::frontend::raw::nanos(humantime::parse_rfc3339(t).unwrap())
}

#[tokio::test]
async fn a_later_search_shows_later_writes_under_a_new_id() {
    let s = store("deployment").await;
    let (f, range) = (
        Frontend::new(Arc::new(s), FrontendConfig::default()),
        None::<()>,
    );
    let _ = range;
    // The Deployment's writes in the audit log: search once half way, once
    // after the last.
    let writes: Vec<u64> = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| {
            ev["objectRef"]["resource"] == "deployments" && ev["responseStatus"]["code"] == 200
        })
        .map(|ev| received_ns(&ev))
        .collect();
    let (first, last) = (writes[0], *writes.last().unwrap());
    // Whole seconds: the clip end is kept to the second.
    let middle = first.div_ceil(1_000_000_000) * 1_000_000_000;
    assert!(
        middle < last,
        "the fixture's writes span more than a second"
    );
    let query = |end: u64| SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Object,
        all_siblings: false,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: TimeRange::new(from_nanos(first - 60_000_000_000), from_nanos(end)),
        limit: 5,
    };
    let early = f.search(&query(middle)).await.unwrap();
    let late = f.search(&query(last + 1_000_000_000)).await.unwrap();
    assert_ne!(early[0].id, late[0].id);
    let count = |t: &AssembledTrace| t.assembly.nodes[0].history.entries.len();
    assert!(count(&early[0]) < count(&late[0]));
    assert!(
        early[0].assembly.nodes[0]
            .history
            .entries
            .iter()
            .all(|e| e.span.start_time_unix_nano <= middle),
        "nothing after the first search's end"
    );
    // The first id still gives the first trace (another replica, no cache).
    let again = Frontend::new(f.store().clone(), FrontendConfig::default())
        .get(&early[0].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(count(&again), count(&early[0]));
}

#[tokio::test]
async fn the_deployment_trace_starts_at_the_first_write_of_its_tree() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let rs: BTreeSet<String> = owned[&("Deployment".to_string(), "hello".to_string())].clone();
    let pods: BTreeSet<String> = rs
        .iter()
        .flat_map(|r| owned[&("ReplicaSet".to_string(), r.clone())].clone())
        .collect();
    let first_write = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| {
            let r = &ev["objectRef"];
            let name = r["name"].as_str().unwrap_or_default();
            match r["resource"].as_str().unwrap_or_default() {
                "deployments" => name == "hello",
                "replicasets" => rs.contains(name),
                "pods" => {
                    pods.contains(name)
                        || ev["responseObject"]["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| pods.contains(n))
                }
                _ => false,
            }
        })
        .map(|ev| received_ns(&ev))
        .min()
        .unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let start = all_spans(&t)
        .iter()
        .map(|(_, s)| s.start_time_unix_nano)
        .min()
        .unwrap();
    assert_eq!(start, first_write);
    assert_eq!(t.assembly.range.unwrap().0, first_write);
}

#[tokio::test]
async fn system_architecture_counts_the_relations_between_resources() {
    let (f, range) = frontend("deployment").await;
    let owned = owned_by_fixture("deployment");
    let replicasets = &owned[&("Deployment".to_string(), "hello".to_string())];
    let pods: usize = replicasets
        .iter()
        .map(|rs| owned[&("ReplicaSet".to_string(), rs.clone())].len())
        .sum();
    let counts = f.dependencies(range).await.unwrap();
    let count = |p: &str, c: &str| counts.get(&(p.to_string(), c.to_string())).copied();
    assert_eq!(
        count("deployments", "replicasets"),
        Some(replicasets.len() as u64)
    );
    assert_eq!(count("replicasets", "pods"), Some(pods as u64));
    assert!(
        count("pods", "nodes").is_some_and(|n| n as usize >= pods),
        "{counts:?}"
    );
    assert_eq!(
        count("pods", "deployments"),
        None,
        "children only: {counts:?}"
    );
}

/// Object spans of an assembled trace in error, by `resource name`, with
/// their status message.
fn spans_in_error(t: &AssembledTrace) -> BTreeMap<String, String> {
    all_spans(t)
        .into_iter()
        .filter(|(_, s)| s.status.as_ref().is_some_and(|st| st.code == 2))
        .map(|(service, s)| {
            let name = s.name.split(" ▸ ").next().unwrap().to_string();
            (format!("{service} {name}"), s.status.unwrap().message)
        })
        .collect()
}

#[tokio::test]
async fn a_stuck_rollout_shows_its_pending_pod_and_the_path_to_it_in_error() {
    let (f, range) = frontend("rollout-stuck").await;
    // The Pod that never got a node, from the audit log: created, never bound.
    let mut created = BTreeSet::new();
    let mut bound = BTreeSet::new();
    for line in common::audit_lines("rollout-stuck") {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let r = &ev["objectRef"];
        if r["resource"] != "pods" {
            continue;
        }
        if r["subresource"] == "binding" {
            bound.insert(r["name"].as_str().unwrap().to_string());
        } else if ev["verb"] == "create"
            && let Some(n) = ev["responseObject"]["metadata"]["name"].as_str()
        {
            created.insert(n.to_string());
        }
    }
    let pending: Vec<&String> = created.difference(&bound).collect();
    assert_eq!(pending.len(), 1, "{created:?} {bound:?}");
    let pending = pending[0];
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "web")],
    )
    .await;
    let errors = spans_in_error(&t);
    let pod = &errors[&format!("pods rollout-demo/{pending}")];
    assert!(pod.contains("Unschedulable"), "{pod}");
    // Its ReplicaSet and the Deployment are in error too; the old
    // ReplicaSet's Pods, which run, are not.
    let owner = owned_by_fixture("rollout-stuck")
        .into_iter()
        .find(|(_, pods)| pods.contains(pending))
        .map(|((_, rs), _)| rs)
        .unwrap();
    assert!(
        errors.contains_key(&format!("replicasets rollout-demo/{owner}")),
        "{errors:?}"
    );
    assert!(
        errors.contains_key("deployments rollout-demo/web"),
        "{errors:?}"
    );
    for bound_pod in &bound {
        assert!(
            !errors.contains_key(&format!("pods rollout-demo/{bound_pod}")),
            "{bound_pod} runs: {errors:?}"
        );
    }
}

#[tokio::test]
async fn a_quota_denied_replicaset_is_in_error_with_the_refused_creates() {
    let (f, range) = frontend("quota").await;
    // The refused creates in the audit log: 403s naming the quota.
    let refused: Vec<String> = common::audit_lines("quota")
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|ev| ev["objectRef"]["resource"] == "pods" && ev["responseStatus"]["code"] == 403)
        .map(|ev| {
            ev["responseStatus"]["message"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|m| m.contains("exceeded quota")));
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "capped")],
    )
    .await;
    let errors = spans_in_error(&t);
    let rs = owned_by_fixture("quota")
        .into_keys()
        .find(|(kind, _)| kind == "ReplicaSet")
        .map(|(_, n)| n)
        .unwrap();
    let msg = &errors[&format!("replicasets quota-demo/{rs}")];
    assert!(msg.contains("exceeded quota"), "{msg}");
    assert!(
        errors.contains_key("deployments quota-demo/capped"),
        "{errors:?}"
    );
    // Each refused create is a log of the ReplicaSet's span, as an error.
    let spans = all_spans(&t);
    let rs_span = spans
        .iter()
        .find(|(svc, s)| svc == "replicasets" && s.name.ends_with(&rs))
        .unwrap();
    let refused_logs = rs_span
        .1
        .events
        .iter()
        .filter(|e| {
            string_attr(&e.attributes, "level") == Some("error")
                && string_attr(&e.attributes, "error.message")
                    .is_some_and(|m| m.contains("exceeded quota"))
                && e.name.contains(" create")
        })
        .count();
    assert_eq!(refused_logs, refused.len());
}

#[tokio::test]
async fn clusters_are_read_from_what_is_stored() {
    let (f, range) = frontend("deployment").await;
    assert!(
        f.clusters().is_empty(),
        "nothing assembled, nothing configured"
    );
    f.read_clusters(range).await.unwrap();
    assert_eq!(f.clusters(), vec![CLUSTER.to_string()]);
}

#[tokio::test]
async fn every_span_lies_within_its_parent_so_jaeger_sees_no_clock_skew() {
    for (scenario, resource, name) in [
        ("deployment", "deployments", "hello"),
        ("rollout-stuck", "deployments", "web"),
        ("job", "jobs", "pi"),
    ] {
        let (f, range) = frontend(scenario).await;
        for mode in Mode::ALL {
            let t = search_one(
                &f,
                range,
                mode,
                Scope::Full,
                &[("resource", resource), ("name", name)],
            )
            .await;
            let spans = all_spans(&t);
            let by_id: BTreeMap<Vec<u8>, &Span> =
                spans.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
            for (_, s) in &spans {
                let Some(p) = by_id.get(&s.parent_span_id) else {
                    continue;
                };
                assert!(
                    s.start_time_unix_nano >= p.start_time_unix_nano
                        && s.end_time_unix_nano <= p.end_time_unix_nano,
                    "{scenario} {mode:?}: {} [{}, {}] outside its parent {} [{}, {}]",
                    s.name,
                    s.start_time_unix_nano,
                    s.end_time_unix_nano,
                    p.name,
                    p.start_time_unix_nano,
                    p.end_time_unix_nano
                );
            }
        }
    }
}

#[tokio::test]
async fn concurrent_requests_for_one_trace_share_one_assembly() {
    let s = Arc::new(store("deployment").await);
    let id = hello_tree_id(&s).await;
    // One request alone: what one assembly reads.
    let alone = Frontend::new(s.clone(), FrontendConfig::default());
    alone.get(&id).await.unwrap().expect("assembled");
    let reads_of_one = alone.metrics().raw_reads.get();
    assert!(reads_of_one > 1, "{reads_of_one}");
    // Four at once on a replica with an empty cache (the UI's search and
    // reload, two users): one assembly, the same trace for all.
    let shared = Arc::new(Frontend::new(s.clone(), FrontendConfig::default()));
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let f = shared.clone();
            tokio::spawn(async move { f.get(&id).await.unwrap().expect("assembled") })
        })
        .collect();
    let mut traces = Vec::new();
    for r in requests {
        traces.push(r.await.unwrap());
    }
    assert!(traces.iter().all(|t| Arc::ptr_eq(t, &traces[0])));
    assert_eq!(shared.metrics().traces_assembled.get(), 1);
    assert_eq!(shared.metrics().raw_reads.get(), reads_of_one);
}

/// The URL of a raw Jaeger that accepts connections and never answers (a
/// real socket): a read from it lasts until its client's timeout.
async fn silent_jaeger_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

#[tokio::test]
async fn an_assembly_past_its_deadline_fails_with_a_timeout_not_a_hang() {
    // Its reads would time out only after a minute.
    let url = silent_jaeger_url().await;
    // A real assembled id, as the UI would reload it.
    let id = hello_tree_id(&Arc::new(store("deployment").await)).await;
    let hanging = JaegerHttp::new(&url, "kascade", Duration::from_secs(60));
    let f = Frontend::new(
        Arc::new(hanging),
        FrontendConfig {
            assembly_timeout: Duration::from_millis(300),
            ..FrontendConfig::default()
        },
    );
    let err = f.get(&id).await.unwrap_err();
    assert!(err.to_string().contains("--assembly-timeout"), "{err}");
    assert_eq!(f.metrics().assembly_timeouts.get(), 1);
    // Not cached: the next request tries again.
    assert!(f.get(&id).await.is_err());
    assert_eq!(f.metrics().assembly_timeouts.get(), 2);
}

#[tokio::test]
async fn assemblies_past_max_assemblies_wait_for_one_in_flight() {
    // An assembly reading from it stays in flight until dropped.
    let url = silent_jaeger_url().await;
    // Two different traces, as the UI would reload them.
    let s = Arc::new(store("deployment").await);
    let offline = Frontend::new(s.clone(), FrontendConfig::default());
    let tree = hello_in(&offline, Mode::Tree).await.id;
    let in_tracing = hello_in(&offline, Mode::Tracing).await.id;
    assert_ne!(tree, in_tracing);
    let f = Arc::new(Frontend::new(
        Arc::new(JaegerHttp::new(&url, "kascade", Duration::from_secs(600))),
        FrontendConfig {
            max_assemblies: 1,
            assembly_timeout: Duration::from_secs(600),
            ..FrontendConfig::default()
        },
    ));
    let get = |id: [u8; 16]| {
        let f = f.clone();
        tokio::spawn(async move { f.get(&id).await })
    };
    // Polled in turns, not time: each turn lets the spawned requests run.
    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..100_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{what} never happened");
    }
    let first = get(tree);
    until("the first assembly reading", || {
        f.metrics().raw_reads.get() > 0
    })
    .await;
    let reads_of_first = f.metrics().raw_reads.get();
    let second = get(in_tracing);
    until("the second assembly waiting", || {
        f.metrics().assembly_waits.get() == 1
    })
    .await;
    assert_eq!(
        f.metrics().raw_reads.get(),
        reads_of_first,
        "it read nothing"
    );
    assert!(!second.is_finished());
    // The first one ends (its request dropped): the second goes ahead.
    first.abort();
    until("the second assembly reading", || {
        f.metrics().raw_reads.get() > reads_of_first
    })
    .await;
    assert_eq!(f.metrics().assembly_waits.get(), 1);
    second.abort();
}

#[tokio::test]
async fn unreachable_remote_storage_is_an_error_naming_its_url() {
    // Nothing listens on port 1 of the loopback: a real refused connection.
    let store = kascade::test_support::frontend::raw::JaegerGrpc::connect(
        "http://127.0.0.1:1",
        "kascade",
        Duration::from_secs(2),
        &kascade::test_support::client_tls::ClientTls::default(),
    )
    .unwrap();
    let err = store.get_many(&[[1; 16], [2; 16]], 4).await.unwrap_err();
    assert!(
        matches!(
            err,
            kascade::test_support::frontend::raw::RawError::Unreachable { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("http://127.0.0.1:1"), "{err}");
    // A URL that is not one fails when the frontend starts, naming it.
    let err = kascade::test_support::frontend::raw::JaegerGrpc::connect(
        "not a url",
        "kascade",
        Duration::from_secs(2),
        &kascade::test_support::client_tls::ClientTls::default(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("not a url"), "{err}");
}

#[tokio::test]
async fn encoded_messages_go_on_the_wire_as_the_message_they_were_encoded_from() {
    use kascade::test_support::frontend::proto::TracesMessage;
    use prost::Message as _;
    let (f, range) = frontend("deployment").await;
    let assembled = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let data = TracesData {
        resource_spans: assembled.resource_spans.clone(),
    };
    assert!(data.resource_spans.len() > 1);
    let decoded = TracesMessage::Decoded(data.clone());
    let encoded = TracesMessage::Encoded(data.encode_to_vec().into());
    assert_eq!(encoded.encoded_len(), decoded.encoded_len());
    assert_eq!(encoded.encode_to_vec(), decoded.encode_to_vec());
    // Read back, either is the same TracesData.
    let read = TracesMessage::decode(encoded.encode_to_vec().as_slice()).unwrap();
    assert_eq!(read, decoded);
    assert_eq!(encoded.clone().into_decoded().unwrap(), data);
    // Fields merged into an encoded message land after its own.
    let mut merged = encoded;
    merged.merge(data.encode_to_vec().as_slice()).unwrap();
    let twice = merged.into_decoded().unwrap();
    let n = data.resource_spans.len();
    assert_eq!(twice.resource_spans.len(), 2 * n);
    assert_eq!(twice.resource_spans[..n], data.resource_spans);
    assert_eq!(twice.resource_spans[n..], data.resource_spans);
}

#[tokio::test]
async fn a_trace_too_big_for_one_grpc_message_streams_in_chunks_jaeger_joins() {
    let store = store_of_lines(common::deployment_with_pods(400)).await;
    let range = whole_range(&store);
    // Every Pod a span of its own: a trace of several MiB.
    let config = FrontendConfig {
        max_siblings: 0,
        ..FrontendConfig::default()
    };
    let f = Arc::new(Frontend::new(Arc::new(store), config));
    let assembled = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let spans_assembled: Vec<&Span> = assembled
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();

    let channel = grpc_frontend(f).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        )
        .max_decoding_message_size(64 << 20);
    // Twice: the first answer encodes the cached trace, the second sends
    // the same bytes again.
    for request in ["first", "second"] {
        let mut stream = client
            .get_traces(GetTracesRequest {
                query: vec![GetTraceParams {
                    trace_id: assembled.id.to_vec(),
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner();
        let mut messages = 0;
        let mut spans: Vec<Span> = Vec::new();
        while let Some(m) = stream.message().await.unwrap() {
            use prost::Message as _;
            messages += 1;
            // Under the 4 MiB a Go gRPC client takes by default.
            assert!(m.encoded_len() < 4 << 20, "{} bytes", m.encoded_len());
            let m = m.into_decoded().unwrap();
            // Each message starts with a span of this trace: how Jaeger joins them.
            let first = &m.resource_spans[0].scope_spans[0].spans[0];
            assert_eq!(first.trace_id, assembled.id.to_vec());
            for rs in m.resource_spans {
                for ss in rs.scope_spans {
                    assert!(ss.spans.iter().all(|s| s.trace_id == assembled.id.to_vec()));
                    spans.extend(ss.spans);
                }
            }
        }
        assert!(messages > 1, "{} spans in one message", spans.len());
        assert_eq!(spans.len(), spans_assembled.len(), "{request} answer");
        assert!(
            spans.iter().zip(&spans_assembled).all(|(a, b)| a == *b),
            "{request} answer: the spans differ from the assembled trace's"
        );
    }
}

#[tokio::test]
async fn a_served_search_assembles_each_trace_once_the_previous_one_is_taken() {
    use futures::StreamExt as _;
    let s = Arc::new(store("deployment").await);
    // Whole seconds, as the gRPC query below gives them.
    let secs =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (start, end) = {
        let r = whole_range(&s);
        (secs(r.start), secs(r.end) + 1)
    };
    let range = TimeRange::new(
        std::time::UNIX_EPOCH + Duration::from_secs(start),
        std::time::UNIX_EPOCH + Duration::from_secs(end),
    );
    let query = SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(&[("resource", "pods")]),
        range,
        limit: 20,
    };
    let all: Vec<[u8; 16]> = Frontend::new(s.clone(), FrontendConfig::default())
        .search(&query)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert!(all.len() >= 2, "{} Pods found", all.len());

    let f = Arc::new(Frontend::new(s.clone(), FrontendConfig::default()));
    let assembled = || f.metrics().traces_assembled.get();
    let found = f.find(&query).await.unwrap();
    assert_eq!(assembled(), 0, "finding assembles nothing");
    let mut stream = std::pin::pin!(f.clone().found_stream(found));
    let mut streamed = Vec::new();
    while let Some(t) = stream.next().await {
        streamed.push(t.unwrap().id);
        // The next trace is not assembled before this one is taken.
        assert_eq!(assembled(), streamed.len() as u64);
    }
    assert_eq!(streamed, all, "the same traces, in the same order");

    // Over gRPC, with nothing cached: every trace streamed, in order.
    let uncached = Arc::new(Frontend::new(
        s,
        FrontendConfig {
            cache_bytes: 1,
            ..FrontendConfig::default()
        },
    ));
    let channel = grpc_frontend(uncached.clone()).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        )
        .max_decoding_message_size(64 << 20);
    let mut stream = client
        .find_traces(FindTracesRequest {
            query: Some(TraceQueryParameters {
                service_name: "tracing".into(),
                attributes: vec![kv("resource", "pods")],
                start_time_min: ts(start as i64, 0),
                start_time_max: ts(end as i64, 0),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids: Vec<[u8; 16]> = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        let m = m.into_decoded().unwrap();
        let id: [u8; 16] = m.resource_spans[0].scope_spans[0].spans[0]
            .trace_id
            .clone()
            .try_into()
            .unwrap();
        if ids.last() != Some(&id) {
            ids.push(id);
        }
    }
    assert_eq!(ids, all);
    assert_eq!(uncached.metrics().traces_assembled.get(), all.len() as u64);
}

#[tokio::test]
async fn an_assembly_failing_while_its_answer_streams_ends_the_stream_with_its_status() {
    use kascade::test_support::metrics::{FrontendMetrics, Rpc};
    // Its reads would time out only after a minute; the assembly's deadline
    // ends them first.
    let url = silent_jaeger_url().await;
    let id = hello_tree_id(&Arc::new(store("deployment").await)).await;
    let f = Arc::new(Frontend::new(
        Arc::new(JaegerHttp::new(&url, "kascade", Duration::from_secs(60))),
        FrontendConfig {
            assembly_timeout: Duration::from_millis(300),
            ..FrontendConfig::default()
        },
    ));
    let channel = grpc_frontend(f.clone()).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        );
    // The call is answered at once; the trace is assembled as its stream is read.
    let mut stream = client
        .get_traces(GetTracesRequest {
            query: vec![GetTraceParams {
                trace_id: id.to_vec(),
                ..Default::default()
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains("--assembly-timeout"),
        "{}",
        err.message()
    );
    let failed = f
        .metrics()
        .errors
        .get_or_create(&FrontendMetrics::rpc(Rpc::GetTraces))
        .get();
    assert_eq!(failed, 1);
    assert_eq!(f.metrics().assembly_timeouts.get(), 1);
}

/// Pods of each ReplicaSet, read from the owner references the apiserver
/// returned in `lines` (its audit log).
fn pods_by_replicaset(lines: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let mut owned: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = &ev["responseObject"];
        let Some(owners) = obj["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        for o in owners {
            if o["controller"] == true && o["kind"] == "ReplicaSet" {
                owned
                    .entry(o["name"].as_str().unwrap().to_string())
                    .or_default()
                    .insert(obj["metadata"]["name"].as_str().unwrap().to_string());
            }
        }
    }
    owned
}

/// How long each Pod in `lines` (an audit log) took to get ready, in ns:
/// from its first write's request to the end of the first write whose
/// response has its `Ready` condition true (kwok's status patch).
fn ready_after_by_pod(lines: &[String]) -> BTreeMap<String, u64> {
    let mut first: BTreeMap<String, u64> = BTreeMap::new();
    let mut ready: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let obj = &ev["responseObject"];
        if ev["stage"] != "ResponseComplete"
            || ev["objectRef"]["resource"] != "pods"
            || obj["kind"] != "Pod"
        {
            continue;
        }
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let ns = |t: &Value| {
            kascade::test_support::frontend::raw::nanos(
                humantime::parse_rfc3339(t.as_str().unwrap()).unwrap(),
            )
        };
        let (received, done) = (
            ns(&ev["requestReceivedTimestamp"]),
            ns(&ev["stageTimestamp"]),
        );
        let f = first.entry(name.clone()).or_insert(received);
        *f = (*f).min(received);
        let is_ready = obj["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if is_ready {
            let r = ready.entry(name).or_insert((received, done));
            if received < r.0 {
                *r = (received, done);
            }
        }
    }
    ready
        .into_iter()
        .map(|(name, (_, done))| {
            let since = first[&name];
            (name, done - since)
        })
        .collect()
}

/// Beyond `max_siblings` Pods under one ReplicaSet, the slowest to get
/// ready are shown and one span stands for the rest, naming each in its logs; the
/// tag `siblings=all` shows every Pod, also when its trace is reloaded by
/// id on a replica without the cache.
#[tokio::test]
async fn a_wide_level_is_summarised_beyond_max_siblings() {
    const MAX: usize = 20;
    let lines = common::deployment_with_pods(120);
    let expected = pods_by_replicaset(&lines);
    let ready_after = ready_after_by_pod(&lines);
    let s = Arc::new(store_of_lines(lines).await);
    let config = FrontendConfig {
        max_siblings: MAX,
        ..FrontendConfig::default()
    };
    let f = Frontend::new(s.clone(), config.clone());
    let search = |all_siblings| SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: whole_range(&s),
        limit: 1,
    };
    let all = f.search(&search(true)).await.unwrap().remove(0);
    let summarised = f.search(&search(false)).await.unwrap().remove(0);
    assert_ne!(all.id, summarised.id);

    let spans_of =
        |t: &AssembledTrace| all_spans(t).into_iter().map(|(_, s)| s).collect::<Vec<_>>();
    let (all_spans_, summary_spans) = (spans_of(&all), spans_of(&summarised));
    let duration = |s: &Span| s.end_time_unix_nano - s.start_time_unix_nano;
    let mut wide = 0;
    for (rs, pods) in &expected {
        let label = |name: &str| format!("default/{name}");
        let rs_span = |spans: &[Span]| {
            spans
                .iter()
                .find(|s| s.name == label(rs))
                .unwrap_or_else(|| panic!("{rs} is shown"))
                .span_id
                .clone()
        };
        let children = |spans: &[Span]| -> Vec<Span> {
            let id = rs_span(spans);
            spans
                .iter()
                .filter(|s| s.parent_span_id == id)
                .cloned()
                .collect()
        };
        // Every Pod of the ReplicaSet under it when all are asked for.
        let names: BTreeSet<String> = children(&all_spans_)
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let want: BTreeSet<String> = pods.iter().map(|p| label(p)).collect();
        assert_eq!(names, want, "{rs}: every Pod with siblings=all");
        if pods.len() <= MAX {
            let shown = children(&summary_spans);
            assert_eq!(
                shown.len(),
                pods.len(),
                "{rs}: a narrow level is shown whole"
            );
            continue;
        }
        wide += 1;
        let under = children(&summary_spans);
        let (summary, shown): (Vec<Span>, Vec<Span>) = under
            .into_iter()
            .partition(|s| s.name.ends_with(" more pods"));
        assert_eq!(summary.len(), 1, "{rs}: one summary span");
        let summary = &summary[0];
        assert_eq!(shown.len(), MAX, "{rs}: {MAX} Pods shown");
        let not_shown = pods.len() - MAX;
        assert_eq!(summary.name, format!("{not_shown} more pods"));
        assert_eq!(
            int_attr(summary, "objects.not_shown"),
            Some(not_shown as i64)
        );
        assert_eq!(int_attr(summary, "objects.shown"), Some(MAX as i64));
        // Its logs name exactly the Pods not shown.
        let logged: BTreeSet<String> = summary.events.iter().map(|e| e.name.clone()).collect();
        let shown_names: BTreeSet<String> = shown.iter().map(|s| s.name.clone()).collect();
        assert_eq!(logged.len(), not_shown);
        assert!(logged.is_disjoint(&shown_names));
        assert_eq!(&logged | &shown_names, want, "{rs}");
        // The shown ones are the slowest to get ready (from the audit log),
        // and among those as slow the longest-lived (from the full trace).
        let rank = |name: &String| {
            let ready = ready_after[name.strip_prefix("default/").unwrap()];
            let lived = all_spans_
                .iter()
                .find(|s| &s.name == name)
                .map(duration)
                .unwrap();
            (ready, lived)
        };
        let last_shown = shown_names.iter().map(rank).min().unwrap();
        let first_hidden = logged.iter().map(rank).max().unwrap();
        assert!(
            last_shown >= first_hidden,
            "{last_shown:?} < {first_hidden:?}"
        );
        // Each log says how long its Pod took to get ready.
        for e in &summary.events {
            let want = ready_after[e.name.strip_prefix("default/").unwrap()];
            assert_eq!(
                string_attr(&e.attributes, "ready_after"),
                Some(
                    kascade::test_support::analysis::cascade::format_duration(
                        Duration::from_nanos(want)
                    )
                    .as_str()
                ),
                "{}",
                e.name
            );
        }
        // Within its parent, as Jaeger expects.
        let parent = summary_spans
            .iter()
            .find(|s| s.span_id == summary.parent_span_id)
            .unwrap();
        assert!(
            summary.start_time_unix_nano >= parent.start_time_unix_nano
                && summary.end_time_unix_nano <= parent.end_time_unix_nano
        );
    }
    assert!(wide >= 1, "the copied Pods make one ReplicaSet wide");
    assert!(summary_spans.len() < all_spans_.len() / 2);

    // The choice travels in the id: a replica without the cache rebuilds both.
    common::assert_rebuilt_alike(&Frontend::new(s.clone(), config), &[&all, &summarised]).await;
}

/// A frontend over `s` showing at most `max` objects of a level.
fn showing_siblings(s: &Arc<MemoryStore>, max: usize) -> Frontend<MemoryStore> {
    Frontend::new(
        s.clone(),
        FrontendConfig {
            max_siblings: max,
            ..FrontendConfig::default()
        },
    )
}

/// With one Pod shown per ReplicaSet, it is the one that took longest to
/// get ready, not the longest-lived: in the rollout's old ReplicaSet the
/// Pod deleted last is not the one that was slowest to get ready.
#[tokio::test]
async fn a_summarised_level_shows_the_slowest_to_get_ready() {
    let lines = common::audit_lines("deployment");
    let by_rs = pods_by_replicaset(&lines);
    let ready_after = ready_after_by_pod(&lines);
    // From a Pod's first write's request to its last write's end.
    let mut span_of: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in &lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let name = ev["responseObject"]["metadata"]["name"]
            .as_str()
            .or(ev["objectRef"]["name"].as_str());
        if ev["stage"] != "ResponseComplete" || ev["objectRef"]["resource"] != "pods" {
            continue;
        }
        let Some(name) = name else { continue };
        let done = kascade::test_support::frontend::raw::nanos(
            humantime::parse_rfc3339(ev["stageTimestamp"].as_str().unwrap()).unwrap(),
        );
        let e = span_of
            .entry(name.to_string())
            .or_insert((received_ns(&ev), done));
        *e = (e.0.min(received_ns(&ev)), e.1.max(done));
    }
    let lived: BTreeMap<String, u64> = span_of.into_iter().map(|(n, (a, b))| (n, b - a)).collect();
    let s = Arc::new(store_of_lines(lines).await);
    let f = showing_siblings(&s, 1);
    let mut differs = false;
    for (rs, pods) in &by_rs {
        // The ReplicaSet searched for is shown (one of the Deployment's two
        // would be summarised); its Pods are the level looked at.
        let trace = f
            .search(&SearchQuery {
                mode: Mode::Tracing,
                scope: Scope::Full,
                all_siblings: false,
                tags: tags(&[("resource", "replicasets"), ("name", rs)]),
                range: whole_range(&s),
                limit: 1,
            })
            .await
            .unwrap()
            .remove(0);
        let spans: Vec<Span> = all_spans(&trace).into_iter().map(|(_, s)| s).collect();
        let rs_id = &spans
            .iter()
            .find(|s| s.name == format!("default/{rs}"))
            .unwrap_or_else(|| panic!("{rs} is shown"))
            .span_id;
        let shown: Vec<&str> = spans
            .iter()
            .filter(|s| &s.parent_span_id == rs_id && !s.name.ends_with(" more pods"))
            .map(|s| s.name.strip_prefix("default/").unwrap())
            .collect();
        let slowest = pods.iter().max_by_key(|p| ready_after[p.as_str()]).unwrap();
        assert_eq!(shown, [slowest.as_str()], "{rs}: {ready_after:?}");
        let longest_lived = pods.iter().max_by_key(|p| lived[p.as_str()]).unwrap();
        differs |= longest_lived != slowest;
    }
    assert!(
        differs,
        "in some ReplicaSet the slowest to get ready is not the longest-lived"
    );
}

/// What is shown of a wide level is first the path to the searched object,
/// then what failed: with one ReplicaSet shown per Deployment, the stuck
/// rollout's failing one is shown when the Deployment is searched, and the
/// running one when its Pod is, the failing one then summarised in error.
#[tokio::test]
async fn a_summarised_level_shows_the_searched_path_then_the_failed() {
    let lines = common::audit_lines("rollout-stuck");
    let by_rs = pods_by_replicaset(&lines);
    let s = Arc::new(store_of_lines(lines).await);
    let f = showing_siblings(&s, 1);
    let range = whole_range(&s);
    // The ReplicaSet of the Pod that never got a node (in error), and the
    // running one.
    let (stuck, running): (Vec<_>, Vec<_>) = by_rs.iter().partition(|(_, pods)| pods.len() == 1);
    let (stuck_rs, stuck_pods) = stuck[0];
    let (running_rs, running_pods) = running[0];

    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "web")],
    )
    .await;
    let errors = spans_in_error(&t);
    let pending = stuck_pods.first().unwrap();
    assert!(
        errors.contains_key(&format!("replicasets rollout-demo/{stuck_rs}")),
        "{errors:?}"
    );
    assert!(
        errors.contains_key(&format!("pods rollout-demo/{pending}")),
        "{errors:?}"
    );
    let names: Vec<String> = all_spans(&t).into_iter().map(|(_, s)| s.name).collect();
    assert!(
        names.contains(&"1 more replicasets".to_string()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains(running_rs.as_str())),
        "{names:?}"
    );

    let pod = running_pods.first().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", pod)],
    )
    .await;
    let spans = all_spans(&t);
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with(&format!("rollout-demo/{running_rs}"))),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains(stuck_rs.as_str())),
        "{names:?}"
    );
    let errors = spans_in_error(&t);
    assert!(
        errors
            .get("replicasets 1 more replicasets")
            .is_some_and(|m| m.contains("failed")),
        "{errors:?}"
    );

    // One tree in every mode: the ReplicaSet not shown has more Pods than
    // shown siblings, and neither they nor a summary of them are left
    // without a parent.
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        let t = search_one(
            &f,
            range,
            mode,
            Scope::Full,
            &[("resource", "deployments"), ("name", "web")],
        )
        .await;
        let spans = all_spans(&t);
        let ids: BTreeSet<&Vec<u8>> = spans.iter().map(|(_, s)| &s.span_id).collect();
        let roots: Vec<&str> = spans
            .iter()
            .filter(|(_, s)| s.parent_span_id.is_empty())
            .map(|(_, s)| s.name.as_str())
            .collect();
        assert_eq!(roots.len(), 1, "{mode:?}: roots {roots:?}");
        for (_, s) in &spans {
            assert!(
                s.parent_span_id.is_empty() || ids.contains(&s.parent_span_id),
                "{mode:?}: {} has no parent in the trace",
                s.name
            );
        }
        assert!(
            !spans
                .iter()
                .any(|(_, s)| s.name.contains(running_rs.as_str())),
            "{mode:?}: the running ReplicaSet's Pods are not shown"
        );
    }
}

/// A raw store whose searches wait until the test lets them through, and
/// count themselves: a real Jaeger cannot be made to hold a read for as
/// long as a test needs (a fake for timing only; the traces are the
/// deployment scenario's, captured).
struct GatedStore {
    inner: MemoryStore,
    gate: tokio::sync::Semaphore,
    finds: std::sync::atomic::AtomicUsize,
}

impl GatedStore {
    fn open(&self) {
        self.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    fn finds(&self) -> usize {
        self.finds.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl RawStore for GatedStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<
        Vec<kascade::test_support::frontend::raw::TraceIdBytes>,
        kascade::test_support::frontend::raw::RawError,
    > {
        self.finds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.gate.acquire().await.unwrap().forget();
        self.inner.find(tags, range, limit).await
    }

    async fn get(
        &self,
        id: kascade::test_support::frontend::raw::TraceIdBytes,
    ) -> Result<Vec<Span>, kascade::test_support::frontend::raw::RawError> {
        self.inner.get(id).await
    }

    async fn relation_counts(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<
        kascade::test_support::frontend::raw::RelationCounts,
        kascade::test_support::frontend::raw::RawError,
    > {
        self.inner.relation_counts(range, limit).await
    }

    async fn clusters(
        &self,
        range: TimeRange,
        limit: usize,
    ) -> Result<BTreeSet<String>, kascade::test_support::frontend::raw::RawError> {
        self.inner.clusters(range, limit).await
    }

    fn describe(&self) -> String {
        "gated memory store".into()
    }
}

async fn gated(cfg: FrontendConfig) -> (Arc<Frontend<GatedStore>>, Arc<GatedStore>, TimeRange) {
    let inner = store("deployment").await;
    let range = whole_range(&inner);
    let s = Arc::new(GatedStore {
        inner,
        gate: tokio::sync::Semaphore::new(0),
        finds: Default::default(),
    });
    (Arc::new(Frontend::new(s.clone(), cfg)), s, range)
}

fn query_of(range: TimeRange, t: &[(&str, &str)]) -> SearchQuery {
    SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(t),
        range,
        limit: 20,
    }
}

/// A burst of 200 identical searches (a dashboard's refresh, many users)
/// is one raw read: every search is answered, none refused.
#[tokio::test]
async fn a_burst_of_identical_searches_shares_one_raw_read() {
    let (f, s, range) = gated(FrontendConfig::default()).await;
    let q = query_of(range, &[("resource", "deployments"), ("name", "hello")]);
    let searches: Vec<_> = (0..200)
        .map(|_| {
            let (f, q) = (f.clone(), q.clone());
            tokio::spawn(async move { f.search(&q).await })
        })
        .collect();
    // Every search has joined the first one's read, held at the gate.
    while f.metrics().searches_shared.get() < 199 {
        tokio::task::yield_now().await;
    }
    s.open();
    for search in searches {
        let found = search.await.unwrap().unwrap();
        assert_eq!(found.len(), 1);
    }
    assert_eq!(s.finds(), 1, "identical searches read the raw store once");
    assert_eq!(f.metrics().searches_shared.get(), 199);
}

/// The UI's searches look back from "now": a burst of the same search asks
/// for ranges milliseconds apart, and shares one raw read all the same.
#[tokio::test]
async fn a_burst_of_the_same_lookback_search_shares_one_raw_read() {
    let (f, s, range) = gated(FrontendConfig::default()).await;
    // Ranges ending 0…99 ms after a whole second past the fixture's last
    // write, as "the last year" asked by 100 users within a tenth of a
    // second.
    let epoch = std::time::UNIX_EPOCH;
    let second =
        epoch + Duration::from_secs(range.end.duration_since(epoch).unwrap().as_secs() + 1);
    let searches: Vec<_> = (0..100u64)
        .map(|ms| {
            let end = second + Duration::from_millis(ms);
            let lookback = TimeRange::new(end - Duration::from_secs(3600 * 24 * 365), end);
            let q = query_of(lookback, &[("resource", "deployments"), ("name", "hello")]);
            let f = f.clone();
            tokio::spawn(async move { f.search(&q).await })
        })
        .collect();
    // Each joins the first one's read, held at the gate (bounded: a search
    // that does not join would wait for a place among --max-searches).
    for _ in 0..100_000 {
        if f.metrics().searches_shared.get() == 99 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(f.metrics().searches_shared.get(), 99);
    s.open();
    for search in searches {
        assert_eq!(search.await.unwrap().unwrap().len(), 1);
    }
    assert_eq!(
        s.finds(),
        1,
        "the same search, milliseconds apart, reads once"
    );
}

/// Searches beyond --max-searches queue: one that waits longer than
/// --search-wait is refused saying why; a burst of 200 different searches
/// is served, late, but served.
#[tokio::test(start_paused = true)]
async fn searches_beyond_the_limit_queue_and_are_refused_only_after_the_wait() {
    let cfg = FrontendConfig {
        max_searches: 1,
        search_wait: Duration::from_secs(60),
        ..FrontendConfig::default()
    };
    let (f, s, range) = gated(cfg).await;
    let first = {
        let f = f.clone();
        tokio::spawn(async move { f.search(&query_of(range, &[("name", "hello")])).await })
    };
    while s.finds() == 0 {
        tokio::task::yield_now().await;
    }
    // The one place is taken: the next waits out --search-wait (paused
    // clock: time passes only when every task waits).
    let err = f
        .search(&query_of(range, &[("resource", "pods")]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, FrontendError::Shared(ref e) if matches!(**e, FrontendError::Busy(_))),
        "{err}"
    );
    assert!(err.to_string().contains("--search-wait"), "{err}");
    assert!(err.to_string().contains("--max-searches"), "{err}");
    assert_eq!(f.metrics().searches_refused.get(), 1);
    s.open();
    assert_eq!(first.await.unwrap().unwrap().len(), 1);
    // 200 different searches, one raw read at a time: all answered.
    let burst: Vec<_> = (0..200)
        .map(|i| {
            let f = f.clone();
            let q = query_of(range, &[("name", &format!("object-{i}"))]);
            tokio::spawn(async move { f.search(&q).await })
        })
        .collect();
    for search in burst {
        search.await.unwrap().unwrap();
    }
    assert_eq!(f.metrics().searches_refused.get(), 1);
}

/// A search answer stops before the trace that would pass
/// --max-search-bytes, with ResourceExhausted naming the flag; the first
/// trace is always answered.
#[tokio::test]
async fn a_search_answer_stops_at_its_byte_bound_saying_so() {
    let s = store("deployment").await;
    let range = whole_range(&s);
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
    };
    let query = TraceQueryParameters {
        attributes: vec![kv("resource", "pods")],
        start_time_min: ts(secs(range.start), 0),
        start_time_max: ts(secs(range.end) + 1, 0),
        ..Default::default()
    };
    let unbounded = grpc_frontend(Arc::new(Frontend::new(
        Arc::new(s),
        FrontendConfig::default(),
    )))
    .await;
    let all = find_traces(&unbounded, query.clone()).await.unwrap();
    assert!(all >= 2, "{all}");
    let cfg = FrontendConfig {
        max_search_bytes: 1,
        ..FrontendConfig::default()
    };
    let bounded = grpc_frontend(Arc::new(Frontend::new(
        Arc::new(store("deployment").await),
        cfg,
    )))
    .await;
    let err = find_traces(&bounded, query).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--max-search-bytes"), "{err:?}");
    assert!(err.message().contains("after 1 traces"), "{err:?}");
}

//! Frontend assembly cost: the full tree of a Deployment with N Pods, read
//! from an in-memory raw store, merged, linked and rendered in tracing mode
//! (the Jaeger UI's default). The spans come from the real deployment
//! fixture run through the real collector pipeline, with one Pod's audit
//! lines (its create, binding, status, Events, deletes) copied under fresh
//! names to reach N Pods. Target: ≤ 300 ms at 1,000 Pods, linear in spans.
//!
//! Run: `cargo bench --bench assemble` (docs/benchmarks.md).

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kascade::app::RuleSources;
use kascade::test_support::aggregate::ProcessorConfig;
use kascade::test_support::aggregate::redact::{DEFAULT_REDACT_PATHS, Redactor};
use kascade::test_support::frontend::assemble::Scope;
use kascade::test_support::frontend::display::Mode;
use kascade::test_support::frontend::offline::store_from_audit_lines;
use kascade::test_support::frontend::raw::{MemoryStore, TimeRange, from_nanos};
use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
use kascade::test_support::source::audit::AuditFilter;

const TEMPLATE_POD: &str = "hello-54f9b65d48-dfv6w";

fn audit_lines(pods: usize) -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/e2e/fixtures/deployment/audit.log"
    );
    let text = std::fs::read_to_string(path).expect("deployment fixture");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let template: Vec<&str> = text.lines().filter(|l| l.contains(TEMPLATE_POD)).collect();
    for i in 0..pods {
        let name = format!("hello-54f9b65d48-b{i:05}");
        for l in &template {
            // Each copy its own requests: an audit ID logged twice is one event.
            lines.push(l.replace(TEMPLATE_POD, &name).replacen(
                r#""auditID":""#,
                &format!(r#""auditID":"{name}-"#),
                1,
            ));
        }
    }
    lines
}

fn store(pods: usize, rt: &tokio::runtime::Runtime) -> (Arc<MemoryStore>, TimeRange, usize) {
    let (store, errors) = rt.block_on(store_from_audit_lines(
        audit_lines(pods),
        "bench",
        Arc::new(RuleSources::default().load().unwrap()),
        &AuditFilter::default(),
        ProcessorConfig::default(),
        Redactor::new(Some(
            kascade::test_support::aggregate::redact::PathPattern::new(DEFAULT_REDACT_PATHS)
                .unwrap(),
        )),
    ));
    assert!(errors.is_empty(), "{errors:?}");
    let (a, b) = store.time_span().unwrap();
    let spans = store.span_count();
    (
        Arc::new(store),
        TimeRange::new(from_nanos(a), from_nanos(b)),
        spans,
    )
}

/// The UI's search for the Deployment's full tree, in tracing mode, every
/// Pod shown (`siblings=all`: the figures before the summary of wide
/// levels measured this).
fn deployment_query(range: TimeRange) -> SearchQuery {
    SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings: true,
        tags: vec![
            ("resource".into(), "deployments".into()),
            ("name".into(), "hello".into()),
        ],
        range,
        limit: 1,
    }
}

fn assemble(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("assemble_deployment_full_tree");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for pods in [250, 500, 1000] {
        let (store, range, spans) = store(pods, &rt);
        group.throughput(Throughput::Elements(spans as u64));
        group.bench_with_input(BenchmarkId::from_parameter(pods), &pods, |b, _| {
            b.to_async(&rt).iter(|| async {
                // A fresh frontend each time: nothing cached.
                let f = Frontend::new(store.clone(), FrontendConfig::default());
                let found = f.search(&deployment_query(range)).await.unwrap();
                assert!(found[0].assembly.nodes.len() > pods);
                found
            })
        });
    }
    group.finish();
}

/// What a warm answer costs the frontend: the cached 1,000-Pod trace turned
/// into the messages of a `FindTraces`/`GetTraces` stream and encoded, as
/// tonic does for each request the cache answers. `clone_and_encode`: every
/// span cloned into its message and encoded, each time (before the encoded
/// messages were kept); `encoded_once`: the messages' bytes, encoded at the
/// first answer, copied.
fn stream_cached(c: &mut Criterion) {
    use prost::Message as _;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let pods = 1000;
    let (store, range, spans) = store(pods, &rt);
    let f = Frontend::new(store, FrontendConfig::default());
    let trace = rt
        .block_on(f.search(&deployment_query(range)))
        .unwrap()
        .remove(0);
    let mut group = c.benchmark_group("stream_cached_trace");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(spans as u64));
    group.bench_with_input(BenchmarkId::new("clone_and_encode", pods), &pods, |b, _| {
        b.iter(|| {
            let messages = kascade::test_support::frontend::assembled::chunks(&trace);
            let bytes: usize = messages.iter().map(|m| m.encode_to_vec().len()).sum();
            assert!(bytes > spans * 100, "{bytes} bytes for {spans} raw spans");
            bytes
        })
    });
    group.bench_with_input(BenchmarkId::new("encoded_once", pods), &pods, |b, _| {
        b.iter(|| {
            let messages = kascade::test_support::frontend::assembled::encoded_chunks(&trace)
                .iter()
                .cloned()
                .map(kascade::test_support::frontend::proto::TracesMessage::Encoded);
            let bytes: usize = messages.map(|m| m.encode_to_vec().len()).sum();
            assert!(bytes > spans * 100, "{bytes} bytes for {spans} raw spans");
            bytes
        })
    });
    group.finish();
}

/// What weighing an assembled trace for the cache costs
/// (`assembled::trace_bytes`): the 1,000-Pod Deployment's whole trace,
/// every Pod shown and as summarised (`--max-siblings`, the default). A
/// server's cold assembly weighed its trace whole, then again once only the
/// served stream was kept; it now weighs it once.
fn weigh(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let pods = 1000;
    let (store, range, _) = store(pods, &rt);
    let f = Frontend::new(store, FrontendConfig::default());
    let mut group = c.benchmark_group("weigh_trace");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for (name, all_siblings) in [("all_pods", true), ("summarised", false)] {
        let query = SearchQuery {
            all_siblings,
            ..deployment_query(range)
        };
        let trace = rt.block_on(f.search(&query)).unwrap().remove(0);
        group.bench_with_input(BenchmarkId::new(name, pods), &pods, |b, _| {
            b.iter(|| kascade::test_support::frontend::assembled::trace_bytes(&trace))
        });
    }
    group.finish();
}

criterion_group!(benches, assemble, stream_cached, weigh);
criterion_main!(benches);

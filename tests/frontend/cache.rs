//! The trace cache and the bounds of one assembly in bytes.

use super::*;

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

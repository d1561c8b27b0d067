//! Raw trace reads shared between assemblies: joined while in flight, and
//! reused for `raw_read_reuse` after they answered (`kascade frontend`'s
//! burst of searches reads a hub object once).

use super::*;

/// The deployment `hello`'s trace in `mode`, reloaded by id on `f`.
async fn reload(f: &Frontend<GatedStore>, id: [u8; 16]) -> Arc<AssembledTrace> {
    f.get(&id).await.unwrap().expect("assembled")
}

/// Ids of the deployment `hello`'s traces in tree and tracing modes: two
/// assemblies of one object tree, reading the same raw traces.
async fn two_modes() -> ([u8; 16], [u8; 16]) {
    let s = Arc::new(store("deployment").await);
    let f = Frontend::new(s, FrontendConfig::default());
    (
        hello_in(&f, Mode::Tree).await.id,
        hello_in(&f, Mode::Tracing).await.id,
    )
}

fn spans_of(t: &AssembledTrace) -> Vec<(String, u64)> {
    let mut spans: Vec<(String, u64)> = t
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| (s.name.clone(), s.start_time_unix_nano))
        .collect();
    spans.sort();
    spans
}

#[tokio::test]
async fn answers_are_reused_within_the_reuse_period_and_not_after_it() {
    let (tree, tracing) = two_modes().await;
    // Reused: an hour (a test's own period, so that no machine is too slow
    // for it); the server's is a second.
    let reusing = Arc::new(gated_store(0, usize::MAX >> 4).await);
    let f = Frontend::new(
        reusing.clone(),
        FrontendConfig {
            raw_read_reuse: Duration::from_secs(3600),
            ..FrontendConfig::default()
        },
    );
    let first = reload(&f, tree).await;
    let read_by_first = reusing.gets();
    assert!(read_by_first > 1, "{read_by_first}");
    assert_eq!(f.metrics().raw_reads_shared.get(), 0);
    let second = reload(&f, tracing).await;
    assert_eq!(
        reusing.gets(),
        read_by_first,
        "the second assembly read the same raw traces again"
    );
    assert!(f.metrics().raw_reads_shared.get() >= read_by_first as u64);

    // Not reused (the library's default): each assembly reads its own.
    let not_reusing = Arc::new(gated_store(0, usize::MAX >> 4).await);
    let g = Frontend::new(not_reusing.clone(), FrontendConfig::default());
    let alone_first = reload(&g, tree).await;
    let alone_second = reload(&g, tracing).await;
    assert_eq!(not_reusing.gets(), 2 * read_by_first);
    assert_eq!(g.metrics().raw_reads_shared.get(), 0);
    // What reuse answers is what a read of its own would have.
    assert_eq!(spans_of(&first), spans_of(&alone_first));
    assert_eq!(spans_of(&second), spans_of(&alone_second));
}

#[tokio::test]
async fn an_assembly_joins_a_read_of_the_same_raw_trace_in_flight() {
    let (tree, tracing) = two_modes().await;
    // Trace reads held: both assemblies reach the searched object's read.
    let s = Arc::new(gated_store(0, 0).await);
    let f = Arc::new(Frontend::new(s.clone(), FrontendConfig::default()));
    let get = |id: [u8; 16]| {
        let f = f.clone();
        tokio::spawn(async move { f.get(&id).await.unwrap().expect("assembled") })
    };
    let first = get(tree);
    let second = get(tracing);
    // Polled in turns, not time: each turn lets the spawned requests run.
    let mut turns = 0;
    while f.metrics().raw_reads_shared.get() == 0 {
        turns += 1;
        assert!(
            turns < 100_000,
            "the second assembly never joined the first's read"
        );
        tokio::task::yield_now().await;
    }
    s.get_gate
        .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    // Alone, each reads every raw trace of the tree once.
    let alone = Arc::new(gated_store(0, usize::MAX >> 4).await);
    let g = Frontend::new(alone.clone(), FrontendConfig::default());
    assert_eq!(spans_of(&first), spans_of(&*reload(&g, tree).await));
    let read_alone = alone.gets();
    assert_eq!(spans_of(&second), spans_of(&*reload(&g, tracing).await));
    assert!(
        s.gets() < 2 * read_alone,
        "{} raw traces read by the two, {read_alone} by one alone",
        s.gets()
    );
}

/// A read failing answers every assembly that joined it with its error;
/// the next read tries the store again.
#[tokio::test]
async fn a_failed_read_is_not_reused() {
    let (tree, _) = two_modes().await;
    let url = silent_jaeger_url().await;
    let f = Frontend::new(
        Arc::new(kascade::test_support::frontend::raw::JaegerHttp::new(
            &url,
            "kascade",
            Duration::from_millis(200),
        )),
        FrontendConfig {
            raw_read_reuse: Duration::from_secs(3600),
            ..FrontendConfig::default()
        },
    );
    assert!(f.get(&tree).await.is_err());
    assert!(f.get(&tree).await.is_err());
    assert_eq!(f.metrics().raw_reads_shared.get(), 0);
    assert_eq!(f.metrics().raw_read_errors.get(), 2);
}

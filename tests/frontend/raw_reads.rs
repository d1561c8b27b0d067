//! Raw reads shared by identical searches, queued past the limit, and
//! bounded in bytes.

use super::*;

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

/// A raw store that cannot serve the traces holding an object span of one
/// resource, answering as `fail` says. The real case is Jaeger v2.13's
/// query API answering 500 for a trace with two spans of one id, which a
/// store keeps after two replicas each sent a link while their shared span
/// cache (etcd) was gone (e2e/faults.sh, scenario `searches`, runs it
/// against a real Jaeger); here the failure is made to order.
struct FailingStore {
    inner: MemoryStore,
    resource: &'static str,
    fail: fn() -> kascade::test_support::frontend::raw::RawError,
}

impl RawStore for FailingStore {
    async fn find(
        &self,
        tags: &[(String, String)],
        range: TimeRange,
        limit: usize,
    ) -> Result<
        Vec<kascade::test_support::frontend::raw::TraceIdBytes>,
        kascade::test_support::frontend::raw::RawError,
    > {
        self.inner.find(tags, range, limit).await
    }

    async fn get(
        &self,
        id: kascade::test_support::frontend::raw::TraceIdBytes,
    ) -> Result<Vec<Span>, kascade::test_support::frontend::raw::RawError> {
        let spans = self.inner.get(id).await?;
        if spans
            .iter()
            .any(|s| string_attr(&s.attributes, "resource") == Some(self.resource))
        {
            return Err((self.fail)());
        }
        Ok(spans)
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
        "memory store failing one resource's traces".into()
    }
}

async fn search_hello_failing(
    resource: &'static str,
    fail: fn() -> kascade::test_support::frontend::raw::RawError,
) -> Result<Vec<Arc<AssembledTrace>>, FrontendError> {
    let inner = store("deployment").await;
    let range = whole_range(&inner);
    let f = Frontend::new(
        Arc::new(FailingStore {
            inner,
            resource,
            fail,
        }),
        FrontendConfig::default(),
    );
    f.search(&query_of(
        range,
        &[("resource", "deployments"), ("name", "hello")],
    ))
    .await
}

fn answered_500() -> kascade::test_support::frontend::raw::RawError {
    kascade::test_support::frontend::raw::RawError::Status {
        url: "http://raw:16686/api/v3/traces/x".into(),
        status: 500,
        body: String::new(),
    }
}

/// One related object's traces the store cannot serve cost that object
/// only: the search is answered, the other objects are whole, and the
/// trace says which object is shown without its traces and why.
#[tokio::test]
async fn a_related_trace_the_store_cannot_serve_costs_that_object_not_the_search() {
    let found = search_hello_failing("replicasets", answered_500)
        .await
        .expect("answered without the ReplicaSets' traces");
    assert_eq!(found.len(), 1);
    let t = &found[0];
    let notes = &t.assembly.notes;
    assert!(
        notes.iter().any(|n| n.contains("replicasets")
            && n.contains("could not be read")
            && n.contains("answered 500")),
        "{notes:?}"
    );
    let resources: BTreeSet<String> = t
        .assembly
        .nodes
        .iter()
        .map(|n| n.history.object.resource.clone())
        .collect();
    assert!(
        resources.contains("deployments") && resources.contains("replicasets"),
        "{resources:?}"
    );

    // The same store serving every trace: no such note.
    let (whole, _) = frontend("deployment").await;
    let t = hello_tree(&whole).await;
    assert!(
        !t.assembly
            .notes
            .iter()
            .any(|n| n.contains("could not be read")),
        "{:?}",
        t.assembly.notes
    );
}

/// A store that cannot be reached fails the search (saying so), and so
/// does the searched object's own trace: an answer without them would
/// look whole.
#[tokio::test]
async fn an_unreachable_store_or_the_searched_objects_trace_fails_the_search() {
    let unreachable = || kascade::test_support::frontend::raw::RawError::Unreachable {
        url: "http://raw:16686".into(),
        message: "connection refused".into(),
    };
    let e = search_hello_failing("replicasets", unreachable)
        .await
        .expect_err("the store is gone");
    assert!(e.to_string().contains("unreachable"), "{e}");
    let e = search_hello_failing("deployments", answered_500)
        .await
        .expect_err("the searched object's trace");
    assert!(e.to_string().contains("answered 500"), "{e}");
}

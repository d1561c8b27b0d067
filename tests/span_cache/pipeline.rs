//! Whole collect replicas fed the same batch through the pipeline.

use super::*;

#[tokio::test]
async fn two_collect_replicas_fed_the_same_batch_emit_each_span_once() {
    let (_fake, url) = start_fake(None).await;
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    // Both replicas at once, as behind one webhook address.
    let (a, b) = tokio::join!(
        run_replica(etcd.clone(), body.clone(), dir.path(), "a"),
        run_replica(etcd, body.clone(), dir.path(), "b"),
    );
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;

    let mut shared = spans_by_kind(&a);
    shared.extend(spans_by_kind(&b));
    let alone = spans_by_kind(&alone);
    // A span sent again is a duplicate only if it matches in carrying the
    // uid too; which spans are sent without it first depends on which
    // worker reaches the object first, so the sets compare span ids.
    let ids = |spans: &[(String, String, String, String)], kind: &str| {
        spans
            .iter()
            .filter(|s| s.0 == kind)
            .map(|s| (s.1.clone(), s.2.clone()))
            .collect::<HashSet<_>>()
    };
    for kind in ["object", "link"] {
        let sends: Vec<_> = shared.iter().filter(|s| s.0 == kind).collect();
        let distinct: HashSet<_> = sends.iter().collect();
        assert_eq!(sends.len(), distinct.len(), "a {kind} span emitted twice");
        let expected = ids(&alone, kind);
        assert!(!expected.is_empty());
        assert_eq!(
            ids(&shared, kind),
            expected,
            "the replicas together emit every {kind} span one replica alone does"
        );
    }
}

/// With a shared span cache a shard goes on with the next writes while a
/// write's reservations wait for etcd: with one shard and etcd answering
/// nothing, the reservations of several writes' objects still reach it. Once etcd answers, the spans are
/// those the local cache gives, each once.
#[tokio::test]
async fn a_shard_goes_on_while_etcd_has_not_answered() {
    let (fake, url) = start_fake(None).await;
    fake.answers_paused.store(true, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    let path = dir.path().to_path_buf();
    let metrics = Arc::new(std::sync::OnceLock::new());
    let run = tokio::spawn({
        let body = body.clone();
        let metrics = metrics.clone();
        async move {
            run_replica_with(
                etcd,
                body,
                &path,
                "one",
                |c| c.pipeline = c.pipeline.clone().workers(1),
                move |m| drop(metrics.set(m)),
            )
            .await
        }
    });
    let object_keys = || {
        fake.kv
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with(b"/kascade/spans/o/"))
            .count()
    };
    // A shard that waited would have sent one object window; four is what
    // the batching lets through unanswered (at most four requests on their
    // way, each with at least one window), however the writes are batched.
    wait_until("reservations of 4 objects' windows", || object_keys() >= 4).await;
    assert!(!run.is_finished());
    let waiting = || metrics.get().unwrap().emissions_waiting.get();
    assert!(waiting() >= 4, "{} writes waiting", waiting());
    fake.answers_paused.store(false, Ordering::SeqCst);
    fake.answers_resumed.notify_waiters();
    let out = run.await.unwrap();
    assert_eq!(waiting(), 0);
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;
    let sent = spans_by_kind(&out);
    let distinct: HashSet<_> = sent.iter().collect();
    assert_eq!(sent.len(), distinct.len(), "a span emitted twice");
    let set = |spans: Vec<(String, String, String, String)>| {
        spans
            .into_iter()
            .map(|(kind, trace, span, _uid)| (kind, trace, span))
            .collect::<HashSet<_>>()
    };
    assert_eq!(set(sent), set(spans_by_kind(&alone)));
}

#[tokio::test]
async fn a_writes_relations_are_reserved_together() {
    // One shard: requests share a transaction when one write asks for
    // several keys at once (its links, then their objects' spans), or
    // writes whose spans are still being sent ask at the same time.
    let (fake, url) = start_fake(None).await;
    let dir = tempfile::tempdir().unwrap();
    let body = common::event_list(&common::audit_lines("deployment"));
    let etcd = patient_etcd(url);
    let out = run_replica_with(
        etcd,
        body.clone(),
        dir.path(),
        "one",
        |c| c.pipeline = c.pipeline.clone().workers(1),
        |_| {},
    )
    .await;
    let keys = fake.kv.lock().unwrap().len() as u64;
    let txns = fake.txns.load(Ordering::SeqCst);
    assert!(
        txns < keys,
        "{keys} keys reserved in {txns} transactions: one per key"
    );
    // The same spans as the local cache gives.
    let alone = run_replica(SpanCacheConfig::default(), body, dir.path(), "alone").await;
    // By span id: which object spans go out without the uid first depends
    // on which worker reaches the object first.
    let set = |p: &std::path::Path| {
        spans_by_kind(p)
            .into_iter()
            .map(|(kind, trace, span, _uid)| (kind, trace, span))
            .collect::<HashSet<_>>()
    };
    assert_eq!(set(&out), set(&alone));
}

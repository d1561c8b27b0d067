//! Dead endpoints, outages, silent etcds, lost leases and rejected tokens.

use super::*;

#[tokio::test]
async fn a_dead_endpoint_is_skipped() {
    let (_fake, url) = start_fake(None).await;
    let (a, m) = replica(config(vec![dead_endpoint(), url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(m.span_cache_fallback.get(), 0);
    assert_eq!(count(&m, "connect"), 1);
    // The endpoint that answered goes first from now on.
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(count(&m, "connect"), 1);
}

#[tokio::test]
async fn an_outage_falls_back_then_recovers_and_republishes() {
    let (fake, url) = start_fake(None).await;
    let mut cfg = config(vec![url.clone()]);
    // etcd answers "unavailable" at once: retried for this long, then the
    // replica decides alone.
    cfg.retry_for = Duration::from_millis(200);
    let (a, ma) = replica(cfg);
    let (b, _) = replica(config(vec![url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(0), true).await.unwrap(),
        Slot::Created
    );

    fake.down.store(true, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(a.falling_back());
    assert_eq!(ma.span_cache_fallback.get(), 1);
    assert!(
        ma.span_cache_etcd_retries
            .get_or_create(&Metrics::op(EtcdOp::Reserve))
            .get()
            >= 1,
        "retried before falling back"
    );
    assert!(a.record_link(&ow(1), 9).await.unwrap());
    // Known before the outage: still known.
    assert_eq!(
        a.fetch_or_reserve(&ow(0), true).await.unwrap(),
        Slot::Existing
    );
    assert_eq!(a.pending_republish(), 2);
    assert_eq!(ma.span_cache_local_reservations.get(), 2);

    fake.down.store(false, Ordering::SeqCst);
    wait_until("recovery", || ma.span_cache_fallback.get() == 0).await;
    wait_until("republishing", || {
        fake.get(&etcd_key("/kascade/spans/", &ow(1), Some(9)))
            .is_some()
    })
    .await;
    assert!(!a.falling_back());
    // What `a` emitted alone is not emitted again by `b`.
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Existing
    );
    assert!(!b.record_link(&ow(1), 9).await.unwrap());
    // And `a` shares new windows again.
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(
        b.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Existing
    );
}

/// etcd answers nothing in time, ever: after retrying for `retry_for` the
/// replica falls back, and from then on asks etcd nothing (no per-event
/// timeout) until the probe finds it again.
#[tokio::test]
async fn a_silent_etcd_is_retried_then_costs_nothing() {
    let (fake, url) = start_fake(None).await;
    fake.hold_all.store(true, Ordering::SeqCst);
    let mut cfg = config(vec![url]);
    cfg.timeout = Duration::from_millis(100);
    cfg.retry_for = Duration::from_millis(500);
    cfg.probe_interval = Duration::from_secs(3600);
    let (a, m) = replica(cfg);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(a.falling_back());
    assert!(count(&m, "timeout") >= 2, "retried before falling back");
    let requests = fake.requests.load(Ordering::SeqCst);
    for i in 2..100 {
        a.fetch_or_reserve(&ow(i), true).await.unwrap();
        a.record_link(&ow(i), 1).await.unwrap();
    }
    assert_eq!(fake.requests.load(Ordering::SeqCst), requests);
    assert_eq!(m.span_cache_local_reservations.get(), 1 + 98 * 2);
}

#[tokio::test]
async fn a_lost_lease_is_replaced_without_falling_back() {
    let (fake, url) = start_fake(None).await;
    let (a, m) = replica(config(vec![url]));
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    fake.leases.lock().unwrap().clear();
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(EtcdOp::Lease))
            .get(),
        2
    );
}

#[tokio::test]
async fn authenticates_and_renews_a_rejected_token() {
    let (fake, url) = start_fake(Some(("kascade", "s3cret"))).await;
    let mut cfg = config(vec![url.clone()]);
    cfg.auth = Some(("kascade".into(), "s3cret".into()));
    let (a, m) = replica(cfg);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    fake.tokens.lock().unwrap().clear();
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    assert!(!a.falling_back());
    assert_eq!(
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(EtcdOp::Auth))
            .get(),
        2
    );
    // A wrong password is an outage like any other: local fallback.
    let mut cfg = config(vec![url]);
    cfg.auth = Some(("kascade".into(), "wrong".into()));
    let (b, _) = replica(cfg);
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(b.falling_back());
}

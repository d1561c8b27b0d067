//! Replicas reserving windows and links once, whoever asks first.

use super::*;

/// 600 concurrent callers on two replicas, with every fifth transaction
/// answered only after the client's timeout (its retry in time) (the write itself happened):
/// the timed-out reservations are retried, so each object window and each
/// link is still reserved exactly once and nobody falls back. This is what
/// a loaded machine did to the test before (202–205 windows reserved).
#[tokio::test]
async fn two_replicas_reserve_each_window_and_link_once() {
    let (fake, url) = start_fake(None).await;
    fake.hold_every.store(5, Ordering::SeqCst);
    let mut cfg = config(vec![url]);
    cfg.timeout = Duration::from_millis(300);
    let (a, ma) = replica(cfg.clone());
    let (b, mb) = replica(cfg);
    let mut tasks = Vec::new();
    for i in 0..200 {
        for c in [a.clone(), b.clone(), a.clone()] {
            tasks.push(tokio::spawn(async move {
                let o = ow(i);
                let slot = c.fetch_or_reserve(&o, true).await.unwrap();
                let link = c.record_link(&o, 42).await.unwrap();
                (slot == Slot::Created, link)
            }));
        }
    }
    let mut created = 0;
    let mut linked = 0;
    for t in tasks {
        let (c, l) = t.await.unwrap();
        created += c as usize;
        linked += l as usize;
    }
    assert!(!a.falling_back() && !b.falling_back());
    assert_eq!(created, 200, "each object window reserved exactly once");
    assert_eq!(linked, 200, "each link recorded exactly once");
    assert!(count(&ma, "timeout") + count(&mb, "timeout") > 0);
    assert_eq!(ma.span_cache_local_reservations.get(), 0);
    assert_eq!(mb.span_cache_local_reservations.get(), 0);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(7), None))
        .unwrap();
    assert!(v["replica"].as_str().unwrap().contains('/'), "{v}");
    assert!(v["at"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(
        fake.get(&etcd_key("/kascade/spans/", &ow(7), Some(42)))
            .is_some()
    );
    // Known windows and links cost no round trip.
    let before = fake.requests.load(Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(7), true).await.unwrap(),
        Slot::Existing
    );
    assert!(!b.record_link(&ow(7), 42).await.unwrap());
    assert_eq!(fake.requests.load(Ordering::SeqCst), before);
}

/// A replica sends an object window's span without the object's uid (its
/// first write there had none, e.g. a refused delete): whichever replica
/// first has the uid sends the span again, once between them — the other
/// replica too, not only the one that sent it without (before, only that
/// one did). A window first sent with the uid is never sent again.
#[tokio::test]
async fn a_span_sent_without_the_uid_is_sent_again_once_by_whichever_replica_has_it() {
    let (fake, url) = start_fake(None).await;
    let (a, _) = replica(config(vec![url.clone()]));
    let (b, _) = replica(config(vec![url]));
    let fetch = |c: &Arc<EtcdSpanCache>, i: usize, has_uid: bool| {
        let c = c.clone();
        async move { c.fetch_or_reserve(&ow(i), has_uid).await.unwrap() }
    };
    // Sent without the uid by a; b has it first.
    assert_eq!(fetch(&a, 1, false).await, Slot::Created);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(1), None))
        .unwrap();
    assert_eq!(v["without_uid"], true, "{v}");
    assert_eq!(fetch(&b, 1, false).await, Slot::Existing);
    assert_eq!(fetch(&b, 1, true).await, Slot::UidMissing);
    assert_eq!(fetch(&b, 1, true).await, Slot::Existing);
    assert_eq!(fetch(&a, 1, true).await, Slot::Existing);
    // Sent without the uid by a; a has it first.
    assert_eq!(fetch(&a, 2, false).await, Slot::Created);
    assert_eq!(fetch(&a, 2, true).await, Slot::UidMissing);
    assert_eq!(fetch(&b, 2, true).await, Slot::Existing);
    // Both have it at once: one of them sends it again.
    assert_eq!(fetch(&b, 3, false).await, Slot::Created);
    let (x, y) = tokio::join!(fetch(&a, 3, true), fetch(&b, 3, true));
    let mut both = [x, y];
    both.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(both, [Slot::Existing, Slot::UidMissing]);
    // Sent with the uid: never again, and the value says nothing of it.
    assert_eq!(fetch(&a, 4, true).await, Slot::Created);
    let v = fake
        .get(&etcd_key("/kascade/spans/", &ow(4), None))
        .unwrap();
    assert!(v.get("without_uid").is_none(), "{v}");
    assert_eq!(fetch(&b, 4, true).await, Slot::Existing);
    assert_eq!(fetch(&a, 4, true).await, Slot::Existing);
}

/// etcd applies a reservation but its answer comes after the client's
/// timeout (outcome unknown): the retry finds the key holding this call's
/// value, so it is this replica's; a window another replica reserved while
/// this one's answer was late is not reserved again; and nobody falls back
/// to deciding alone.
#[tokio::test]
async fn a_reservation_answered_after_the_timeout_is_not_reserved_twice() {
    let (fake, url) = start_fake(None).await;
    let mut slow = config(vec![url.clone()]);
    slow.timeout = Duration::from_millis(200);
    let (a, ma) = replica(slow);
    let (b, mb) = replica(config(vec![url]));

    // Written, answer late: still ours, and only ours.
    fake.hold_next.store(1, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert!(count(&ma, "timeout") >= 1, "the first answer came too late");
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Existing
    );

    // Reserved by `b`; `a`'s answer late: `a` must not emit it too.
    assert_eq!(
        b.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Created
    );
    fake.hold_next.store(1, Ordering::SeqCst);
    assert_eq!(
        a.fetch_or_reserve(&ow(2), true).await.unwrap(),
        Slot::Existing
    );
    assert!(b.record_link(&ow(2), 7).await.unwrap());
    fake.hold_next.store(1, Ordering::SeqCst);
    assert!(!a.record_link(&ow(2), 7).await.unwrap());

    assert!(!a.falling_back(), "a late answer is not an outage");
    assert_eq!(ma.span_cache_fallback.get(), 0);
    assert_eq!(ma.span_cache_local_reservations.get(), 0);
    assert!(
        ma.span_cache_etcd_retries
            .get_or_create(&Metrics::op(EtcdOp::Reserve))
            .get()
            >= 2
    );
    // Later windows are still decided together, once each.
    let mut created = 0;
    for i in 3..20 {
        for c in [&a, &b] {
            created += (c.fetch_or_reserve(&ow(i), true).await.unwrap() == Slot::Created) as usize;
        }
    }
    assert_eq!(created, 17);
    assert_eq!(mb.span_cache_local_reservations.get(), 0);
}

//! Two replicas sharing the span cache on a real etcd, through an outage.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the etcd binary (KASCADE_E2E_BIN); run by e2e/scale-out.sh"]
async fn two_replicas_on_real_etcd_then_an_outage_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path(), None);
    let prefix = "/kascade-it/spans/";
    // Answers are waited for and retried as long as it takes (no fallback
    // however slow the machine), except by the replica that meets the outage.
    let cfg = |retry_for: Duration| {
        let mut c = EtcdConfig::new(vec![etcd.url()], Duration::from_secs(35 * 60));
        c.prefix = prefix.to_string();
        c.probe_interval = Duration::from_millis(200);
        c.timeout = Duration::from_secs(30);
        c.retry_for = retry_for;
        c
    };
    let (a, _) = replica(cfg(Duration::from_secs(3600)));
    let (b, _) = replica(cfg(Duration::from_secs(3600)));

    // Both replicas race for the same 100 object windows and their links.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..100 {
        for c in [a.clone(), b.clone()] {
            tasks.push(tokio::spawn(async move {
                let o = ow(i);
                let s = c.fetch_or_reserve(&o, true).await.unwrap();
                let l = c.record_link(&o, 7).await.unwrap();
                (s == Slot::Created) as usize + 1000 * l as usize
            }));
        }
    }
    let mut sum = 0;
    for t in tasks {
        sum += t.await.unwrap();
    }
    eprintln!(
        "400 reservations by 2 replicas on etcd in {:?}",
        t.elapsed()
    );
    assert_eq!(sum % 1000, 100, "each object window reserved once");
    assert_eq!(sum / 1000, 100, "each link recorded once");
    assert!(!a.falling_back() && !b.falling_back());
    let stored = keys(&etcd, prefix);
    assert_eq!(stored.len(), 200, "{stored:?}");
    assert!(
        stored.iter().all(|(_, lease)| lease != "0"),
        "every key under a lease"
    );
    assert!(
        stored
            .iter()
            .any(|(k, _)| *k == etcd_key(prefix, &ow(3), None))
    );

    // A window sent without the uid by a is sent again with it once, by
    // the first replica with the uid (b here).
    assert_eq!(
        a.fetch_or_reserve(&ow(200), false).await.unwrap(),
        Slot::Created
    );
    assert_eq!(
        b.fetch_or_reserve(&ow(200), true).await.unwrap(),
        Slot::UidMissing
    );
    assert_eq!(
        a.fetch_or_reserve(&ow(200), true).await.unwrap(),
        Slot::Existing
    );
    assert_eq!(keys(&etcd, prefix).len(), 202, "the window and its resend");

    // A third replica, which gives etcd one second, knows one window.
    let (c, mc) = replica(cfg(Duration::from_secs(1)));
    assert_eq!(
        c.fetch_or_reserve(&ow(3), true).await.unwrap(),
        Slot::Existing
    );
    // etcd dies: the next new window is retried, then the replica falls
    // back; later ones never ask etcd.
    etcd.kill();
    assert_eq!(
        c.fetch_or_reserve(&ow(500), true).await.unwrap(),
        Slot::Created
    );
    assert!(c.falling_back());
    assert_eq!(mc.span_cache_fallback.get(), 1);
    assert!(
        mc.span_cache_etcd_retries
            .get_or_create(&Metrics::op(etcd_op("reserve")))
            .get()
            >= 1
    );
    let asked = |m: &Metrics| {
        ["reserve", "link", "lease"]
            .iter()
            .map(|op| {
                m.span_cache_etcd_requests
                    .get_or_create(&Metrics::op(etcd_op(op)))
                    .get()
            })
            .sum::<u64>()
    };
    let requests = asked(&mc);
    for i in 501..600 {
        assert_eq!(
            c.fetch_or_reserve(&ow(i), true).await.unwrap(),
            Slot::Created
        );
    }
    assert!(c.record_link(&ow(500), 7).await.unwrap());
    assert_eq!(
        c.fetch_or_reserve(&ow(3), true).await.unwrap(),
        Slot::Existing
    );
    assert_eq!(asked(&mc), requests, "asked etcd while falling back");

    // etcd returns: the replica notices, and publishes what it reserved alone.
    etcd.spawn(None);
    wait_until("recovery", || mc.span_cache_fallback.get() == 0).await;
    wait_until("republishing", || keys(&etcd, prefix).len() == 303).await;
    assert_eq!(
        b.fetch_or_reserve(&ow(500), true).await.unwrap(),
        Slot::Existing
    );
    assert!(!b.record_link(&ow(500), 7).await.unwrap());
    assert_eq!(
        b.fetch_or_reserve(&ow(700), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(
        c.fetch_or_reserve(&ow(700), true).await.unwrap(),
        Slot::Existing
    );
}

/// Reservations asked for at once go to etcd together (one transaction of
/// nested create-if-absent transactions), each with its own answer: a batch
/// mixing windows another replica holds with new ones decides each alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the etcd binary (KASCADE_E2E_BIN); run by e2e/scale-out.sh"]
async fn concurrent_reservations_share_a_request_and_keep_their_own_answers() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path(), None);
    let prefix = "/kascade-batch/spans/";
    let cfg = || {
        let mut c = EtcdConfig::new(vec![etcd.url()], Duration::from_secs(35 * 60));
        c.prefix = prefix.to_string();
        c.timeout = Duration::from_secs(30);
        c.retry_for = Duration::from_secs(3600);
        c
    };
    let (a, ma) = replica(cfg());
    let (b, mb) = replica(cfg());
    let reserves = |m: &Metrics| {
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(etcd_op("reserve")))
            .get()
    };
    // `a` takes the even windows first, one at a time.
    for i in (0..200).step_by(2) {
        assert_eq!(
            a.fetch_or_reserve(&ow(i), true).await.unwrap(),
            Slot::Created
        );
    }
    assert_eq!(reserves(&ma), 100, "one request each when asked one by one");
    // `b` asks for all 200 at once: the odd ones are its own, the even `a`'s.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move { (i, b.fetch_or_reserve(&ow(i), true).await.unwrap()) })
        })
        .collect();
    for t in tasks {
        let (i, slot) = t.await.unwrap();
        let want = if i % 2 == 0 {
            Slot::Existing
        } else {
            Slot::Created
        };
        assert_eq!(slot, want, "window {i}");
    }
    let requests = reserves(&mb);
    assert!(
        requests < 200,
        "200 concurrent reservations took {requests} requests"
    );
    assert_eq!(keys(&etcd, prefix).len(), 200);
    // And a third ask of both is answered from the local caches.
    for i in 0..200 {
        assert_eq!(
            b.fetch_or_reserve(&ow(i), true).await.unwrap(),
            Slot::Existing
        );
    }
    assert_eq!(reserves(&mb), requests);
}

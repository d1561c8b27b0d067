//! The cluster watcher role held by one replica at a time.

use super::*;

#[tokio::test]
#[ignore = "needs the etcd binary (KASCADE_E2E_BIN); run by e2e/scale-out.sh"]
async fn one_replica_holds_a_clusters_watcher_role_until_it_stops_renewing() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path(), None);
    let prefix = "/kascade-it/roles-test/";
    let metrics = Arc::new(Metrics::default());
    // A short TTL, so the test sees the lease outlive it on its keep-alive
    // stream (renewed every 2 s: only a 4 s stall could fail that).
    let election = |name: &str| {
        let mut c = EtcdConfig::new(vec![etcd.url()], Duration::from_secs(35 * 60));
        c.timeout = Duration::from_secs(30);
        let client = EtcdClient::new(&c.client(), metrics.clone()).unwrap();
        EtcdElection::new(client, prefix, name, c.timeout).with_ttl(Duration::from_secs(6))
    };
    let (a, b) = (election("a"), election("b"));
    let role_key = format!("{prefix}roles/watch/east");
    assert_eq!(a.role_key("watch/east"), role_key);
    let mut a_east = a.campaign("watch/east");
    settles(&mut a_east, Leadership::Leader).await;
    let mut b_east = b.campaign("watch/east");
    settles(&mut b_east, Leadership::Follower).await;
    let mut b_west = b.campaign("watch/west");
    settles(&mut b_west, Leadership::Leader).await;
    // Renewing keeps the role on one lease, kept alive past its TTL.
    let lease = lease_of(&etcd, &role_key);
    let since = Instant::now();
    wait_until("the lease's TTL to pass", || {
        since.elapsed() > Duration::from_secs(8)
    })
    .await;
    assert_eq!(lease_of(&etcd, &role_key), lease);
    assert!(
        metrics
            .span_cache_etcd_requests
            .get_or_create(&Metrics::op(etcd_op("keepalive")))
            .get()
            >= 3
    );
    assert_eq!(a_east.leadership(), Leadership::Leader);
    assert_eq!(b_east.leadership(), Leadership::Follower);
    // `a` stops renewing (it died) and its lease ends: `b`, watching the
    // key, takes over.
    drop(a_east);
    revoke(&etcd, &lease);
    settles(&mut b_east, Leadership::Leader).await;
    assert_ne!(lease_of(&etcd, &role_key), lease);
    let mut a_again = a.campaign("watch/east");
    settles(&mut a_again, Leadership::Follower).await;
    assert_eq!(
        b_east.leadership(),
        Leadership::Leader,
        "the role passed on"
    );
}

/// etcd goes away and comes back: meanwhile both replicas keep what they
/// had (a watcher too many is better than none); afterwards the holder's
/// lease is renewed again on a new stream and the follower watches the key
/// again, so it still takes over when the holder's lease ends.
#[tokio::test]
#[ignore = "needs the etcd binary (KASCADE_E2E_BIN); run by e2e/scale-out.sh"]
async fn the_watcher_role_survives_an_etcd_outage() {
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(dir.path(), None);
    let prefix = "/kascade-it/roles-outage/";
    let election = |name: &str| {
        let metrics = Arc::new(Metrics::default());
        let mut c = EtcdConfig::new(vec![etcd.url()], Duration::from_secs(60));
        c.timeout = Duration::from_secs(5);
        let client = EtcdClient::new(&c.client(), metrics.clone()).unwrap();
        let e = EtcdElection::new(client, prefix, name, c.timeout).with_ttl(Duration::from_secs(6));
        (e, metrics)
    };
    let count = |m: &Metrics, family: &str, label: &str| match family {
        "requests" => m
            .span_cache_etcd_requests
            .get_or_create(&Metrics::op(etcd_op(label)))
            .get(),
        _ => ["timeout", "connect", "status", "decode", "watch_cancelled"]
            .iter()
            .map(|r| {
                m.span_cache_etcd_errors
                    .get_or_create(&Metrics::reason(etcd_reason(r)))
                    .get()
            })
            .sum(),
    };
    let ((a, ma), (b, mb)) = (election("a"), election("b"));
    let mut a_east = a.campaign("watch/east");
    settles(&mut a_east, Leadership::Leader).await;
    let mut b_east = b.campaign("watch/east");
    settles(&mut b_east, Leadership::Follower).await;
    let lease = lease_of(&etcd, &format!("{prefix}roles/watch/east"));

    etcd.kill();
    wait_until("both replicas to meet the outage", || {
        count(&ma, "errors", "") > 0 && count(&mb, "errors", "") > 0
    })
    .await;
    assert_eq!(a_east.leadership(), Leadership::Leader);
    assert_eq!(b_east.leadership(), Leadership::Follower);

    etcd.spawn(None);
    let (renewals, watches) = (
        count(&ma, "requests", "keepalive"),
        count(&mb, "requests", "watch"),
    );
    wait_until("a renewal by a and a new watch by b", || {
        count(&ma, "requests", "keepalive") > renewals + 1
            && count(&mb, "requests", "watch") > watches
    })
    .await;
    assert_eq!(a_east.leadership(), Leadership::Leader);
    assert_eq!(b_east.leadership(), Leadership::Follower);
    assert_eq!(lease_of(&etcd, &format!("{prefix}roles/watch/east")), lease);

    drop(a_east);
    revoke(&etcd, &lease);
    settles(&mut b_east, Leadership::Leader).await;
}

//! etcd's TLS client certificates and password authentication.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the etcd binary (KASCADE_E2E_BIN) and openssl; run by e2e/scale-out.sh"]
async fn tls_client_certificate_and_password_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let etcd = Etcd::start(dir.path(), Some(&pki));
    // Authentication on, with a root user.
    let p = Some(&pki);
    curl(
        &etcd,
        p,
        "/v3/auth/user/add",
        Some(&json!({"name": "root", "password": "rootpw"})),
    )
    .expect("user add");
    curl(
        &etcd,
        p,
        "/v3/auth/user/grant",
        Some(&json!({"user": "root", "role": "root"})),
    )
    .expect("grant");
    curl(&etcd, p, "/v3/auth/enable", Some(&json!({}))).expect("auth enable");

    let tls = EtcdTls {
        ca_file: pki.file("ca.crt"),
        client_cert: Some((pki.file("client.crt"), pki.file("client.key"))),
    };
    let mut cfg = EtcdConfig::new(vec![etcd.url()], Duration::from_secs(60));
    cfg.tls = Some(tls.clone());
    cfg.timeout = Duration::from_secs(30);
    // A refused client certificate is a failed handshake, which is retried
    // like an unreachable etcd: for this long.
    cfg.retry_for = Duration::from_secs(1);
    cfg.auth = Some(("root".into(), "rootpw".into()));
    let (a, m) = replica(cfg.clone());
    let (b, _) = replica(cfg.clone());
    assert_eq!(
        a.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Created
    );
    assert_eq!(
        b.fetch_or_reserve(&ow(1), true).await.unwrap(),
        Slot::Existing
    );
    assert!(a.record_link(&ow(1), 1).await.unwrap());
    assert!(!b.record_link(&ow(1), 1).await.unwrap());
    assert!(!a.falling_back());
    assert_eq!(
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(etcd_op("auth")))
            .get(),
        1
    );
    // The role election over the same TLS and authentication: its watch
    // and keep-alive streams carry the token too.
    let client = EtcdClient::new(&cfg.client(), m.clone()).unwrap();
    let election = EtcdElection::new(client, "/kascade-it/tls/", "a", cfg.timeout)
        .with_ttl(Duration::from_secs(3));
    let mut east = election.campaign("watch/east");
    settles(&mut east, Leadership::Leader).await;
    let requests = |op: &str| {
        m.span_cache_etcd_requests
            .get_or_create(&Metrics::op(etcd_op(op)))
            .get()
    };
    wait_until("a renewal and the watch", || {
        requests("keepalive") >= 2 && requests("watch") >= 1
    })
    .await;
    let errors: u64 = ["timeout", "connect", "status", "decode"]
        .iter()
        .map(|r| {
            m.span_cache_etcd_errors
                .get_or_create(&Metrics::reason(etcd_reason(r)))
                .get()
        })
        .sum();
    assert_eq!(errors, 0, "a request of the election was refused");

    // A wrong password is refused: that replica falls back.
    cfg.auth = Some(("root".into(), "wrong".into()));
    let (c, _) = replica(cfg.clone());
    c.fetch_or_reserve(&ow(2), true).await.unwrap();
    assert!(c.falling_back());
    // So is a client without a certificate (mutual TLS).
    cfg.auth = Some(("root".into(), "rootpw".into()));
    cfg.tls = Some(EtcdTls {
        client_cert: None,
        ..tls
    });
    let (d, _) = replica(cfg);
    d.fetch_or_reserve(&ow(3), true).await.unwrap();
    assert!(d.falling_back());
}

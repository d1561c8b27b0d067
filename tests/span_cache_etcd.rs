//! The span cache shared through a real etcd (the harness's pinned build):
//! exactly-once reservations by two replicas, keys under leases, an outage
//! (etcd killed: local fallback) and the recovery (etcd restarted:
//! republished keys), and TLS with a client certificate plus password
//! authentication. Also the watcher role election on the same etcd: one
//! holder per role on a lease kept alive, the take-over through a watch on
//! the role key, and an outage.
//!
//! Nothing asserts how fast anything is: timeouts that must not fire are far
//! beyond any answer, waits for background work have hang-guard deadlines
//! only, and a lease "expiring" is a lease revoked.
//!
//! Ignored by default: each test starts its own etcd from
//! `$KASCADE_ETCD_BIN` or `$KASCADE_E2E_BIN/etcd` (`e2e/build.sh etcd`) on
//! free loopback ports. e2e/scale-out.sh runs them:
//!
//! ```text
//! KASCADE_E2E_BIN=... cargo test --test span_cache_etcd -- --ignored
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use kascade::test_support::aggregate::span_cache::{
    EtcdConfig, EtcdSpanCache, EtcdTls, Slot, SpanCache, etcd_key,
};
use kascade::test_support::coordination::election::{
    Campaign, EtcdElection, Leadership, RoleElection,
};
use kascade::test_support::coordination::etcd::EtcdClient;
use kascade::test_support::metrics::Metrics;
use kascade::test_support::model::{ObjectRef, ObjectWindow};
use serde_json::{Value, json};

/// The `op` label spelt `name`, as /metrics shows it.
fn etcd_op(name: &str) -> kascade::test_support::metrics::EtcdOp {
    *kascade::test_support::metrics::EtcdOp::ALL
        .iter()
        .find(|o| o.as_str() == name)
        .unwrap_or_else(|| panic!("no etcd op {name:?}"))
}

/// The `reason` label spelt `name`, as /metrics shows it.
fn etcd_reason(name: &str) -> kascade::test_support::metrics::EtcdErrorReason {
    *kascade::test_support::metrics::EtcdErrorReason::ALL
        .iter()
        .find(|r| r.as_str() == name)
        .unwrap_or_else(|| panic!("no etcd error reason {name:?}"))
}

fn etcd_bin() -> PathBuf {
    if let Ok(b) = std::env::var("KASCADE_ETCD_BIN") {
        return b.into();
    }
    let dir = std::env::var("KASCADE_E2E_BIN")
        .expect("set KASCADE_ETCD_BIN or KASCADE_E2E_BIN (e2e/build.sh etcd prints it)");
    Path::new(&dir).join("etcd")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Certificates for etcd over TLS, made with the openssl CLI.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let dir = dir.join("pki");
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let st = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .stderr(Stdio::null())
                .status()
                .expect("openssl");
            assert!(st.success(), "openssl {args:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=etcd-test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        // The client certificate carries a CommonName: over gRPC, etcd takes
        // the token of the password login (its JSON gateway, which kascade
        // used before, refused such a certificate with authentication on).
        for (name, subject) in [("server", "/CN=etcd"), ("client", "/O=kascade/CN=kascade")] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ]);
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ]);
        }
        Pki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// One etcd member in a temporary directory; killed on drop.
struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    tls: bool,
}

impl Etcd {
    fn start(dir: &Path, pki: Option<&Pki>) -> Etcd {
        let mut e = Etcd {
            child: None,
            dir: dir.to_path_buf(),
            client_port: free_port(),
            peer_port: free_port(),
            tls: pki.is_some(),
        };
        e.spawn(pki);
        e
    }

    fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self, pki: Option<&Pki>) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(etcd_bin());
        cmd.args(["--name", "t", "--data-dir"])
            .arg(self.dir.join("data"))
            .args([
                "--listen-client-urls",
                &self.url(),
                "--advertise-client-urls",
                &self.url(),
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--unsafe-no-fsync", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join("etcd.log")).unwrap());
        if let Some(p) = pki {
            cmd.arg("--cert-file").arg(p.file("server.crt"));
            cmd.arg("--key-file").arg(p.file("server.key"));
            cmd.arg("--trusted-ca-file").arg(p.file("ca.crt"));
            cmd.arg("--client-cert-auth");
        }
        self.child = Some(cmd.spawn().expect("cannot start etcd"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while curl(self, pki, "/health", None).is_none() {
            assert!(
                Instant::now() < deadline,
                "etcd not healthy after 30s; see {}/etcd.log",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A request to etcd with curl (GET without a body, else POST JSON).
fn curl(e: &Etcd, pki: Option<&Pki>, path: &str, body: Option<&Value>) -> Option<Value> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sf", "--max-time", "30"]);
    if let Some(p) = pki {
        cmd.arg("--cacert").arg(p.file("ca.crt"));
        cmd.arg("--cert").arg(p.file("client.crt"));
        cmd.arg("--key").arg(p.file("client.key"));
    }
    if let Some(b) = body {
        cmd.args(["-X", "POST", "-d", &b.to_string()]);
    }
    let out = cmd.arg(format!("{}{path}", e.url())).output().ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Keys under `prefix`, with their lease ids.
fn keys(e: &Etcd, prefix: &str) -> Vec<(String, String)> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    let r = curl(
        e,
        None,
        "/v3/kv/range",
        Some(&json!({"key": B64.encode(prefix), "range_end": B64.encode(end)})),
    )
    .expect("range");
    r["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| {
                    let k = String::from_utf8(B64.decode(kv["key"].as_str().unwrap()).unwrap())
                        .unwrap();
                    (k, kv["lease"].as_str().unwrap_or("0").to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn ow(i: usize) -> ObjectWindow {
    ObjectWindow {
        object: ObjectRef::new("it", "apps", "replicasets", "default", format!("rs-{i}")),
        window_start: 1_800_000 + 1800 * (i as u64 % 2),
    }
}

fn replica(cfg: EtcdConfig) -> (Arc<EtcdSpanCache>, Arc<Metrics>) {
    let m = Arc::new(Metrics::default());
    (
        Arc::new(EtcdSpanCache::new(cfg, 10_000, m.clone()).unwrap()),
        m,
    )
}

/// Waits for background work; the deadline only keeps a broken build from
/// hanging the suite.
async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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

/// The lease of the key `key`.
fn lease_of(e: &Etcd, key: &str) -> String {
    let found = keys(e, key);
    assert_eq!(found.len(), 1, "{key}: {found:?}");
    found[0].1.clone()
}

/// Revokes a lease: for a holder, the same as its lease expiring.
fn revoke(e: &Etcd, lease: &str) {
    curl(e, None, "/v3/lease/revoke", Some(&json!({"ID": lease}))).expect("lease revoke");
}

/// Waits until the campaign's leadership is `want`; the deadline only keeps
/// a broken build from hanging the suite.
async fn settles(c: &mut Campaign, want: Leadership) {
    let waited = tokio::time::timeout(Duration::from_secs(120), async {
        while c.leadership() != want {
            c.changed().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "still {:?}, not {want:?}", c.leadership());
}

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

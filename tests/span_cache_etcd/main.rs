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

mod auth;
mod replicas;
mod watcher_role;

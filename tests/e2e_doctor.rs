//! `kascade doctor` against the real harness, run by e2e/suite.sh after
//! tests/e2e/ (it reuses the suite's clusters and collector): all OK on
//! the healthy cluster; and each fault it is meant to find, made for real —
//! cluster B's `Metadata` policy for Pods, a collector no apiserver sends to,
//! cluster B's webhook path naming another cluster, the watch identity's
//! ClusterRole without ConfigMaps, the collector's Jaeger stopped. Cluster B
//! is put back as it was at the end (its apiserver's webhook, its ClusterRole).
//! Ignored in a plain `cargo test` (they need that environment).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Killed, free_port};
use serde_json::Value;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run these through e2e/suite.sh"))
}

/// A variable of a cluster's env file (written by e2e/cluster.sh up).
fn env_of(env_file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(env_file).unwrap_or_else(|e| panic!("{env_file}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .unwrap_or_else(|| panic!("{env_file} has no {name}"))
        .to_string()
}

struct Doctor {
    code: i32,
    text: String,
    report: Value,
    /// What the JSON run gathered (`--save-inputs`).
    inputs: String,
}

/// With KASCADE_DOCTOR_CAPTURE_DIR set, keeps what `d` judged as
/// `NAME.json` there: e2e/fixtures/doctor/ holds such captures, the
/// inputs of the judgement's unit tests (src/doctor/checks.rs).
fn capture(d: &Doctor, name: &str) {
    if let Ok(dir) = std::env::var("KASCADE_DOCTOR_CAPTURE_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(format!("{name}.json")), &d.inputs).unwrap();
    }
}

impl Doctor {
    fn check(&self, id: &str) -> &Value {
        self.report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no check {id}: {}", self.text))
    }
}

/// `kascade doctor ARGS`, once as text and once as JSON.
fn doctor(args: &[&str]) -> Doctor {
    let saved = tempfile::NamedTempFile::new().unwrap();
    let run = |format: &str| {
        let mut cmd = Command::new(env("KASCADE_BIN"));
        cmd.arg("doctor").args(args).args(["--format", format]);
        if format == "json" {
            cmd.arg("--save-inputs").arg(saved.path());
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "kascade doctor {args:?} failed: {stderr}"
        );
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    };
    let (code, text) = run("text");
    // A run a moment later: it may disagree only while a fault is being made.
    let (_, json) = run("json");
    let report: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["schema"], "kascade.doctor/v1");
    let inputs = std::fs::read_to_string(saved.path()).unwrap();
    Doctor {
        code,
        text,
        report,
        inputs,
    }
}

/// Runs doctor until `ok` holds (faults take effect asynchronously: an
/// apiserver restarting, a watch backing off); panics after 90 s with the
/// last report.
fn doctor_until(args: &[&str], what: &str, ok: impl Fn(&Doctor) -> bool) -> Doctor {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let d = doctor(args);
        if ok(&d) {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "kascade doctor never showed {what}; last report:\n{}",
            d.text
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Check `id`'s status, when the text and JSON runs agree on it (they
/// may not while a fault is taking effect): else "changing".
fn status<'a>(d: &'a Doctor, id: &str) -> &'a str {
    let json = d.check(id)["status"].as_str().unwrap();
    let text = line(d, id).split_whitespace().next().unwrap_or_default();
    if text.eq_ignore_ascii_case(json) {
        json
    } else {
        "changing"
    }
}

/// The text line of check `id` (its verdict and summary).
fn line<'a>(d: &'a Doctor, id: &str) -> &'a str {
    d.text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id))
        .unwrap_or_else(|| panic!("no line for {id}:\n{}", d.text))
}

fn kubectl(kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> String {
    try_kubectl(kubeconfig, args, stdin).unwrap_or_else(|e| panic!("{e}"))
}

/// kubectl's output, or why it failed (for a Drop, which must not panic).
fn try_kubectl(kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut child = Command::new(env("KUBECTL"))
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kubectl: {e}"))?;
    if let Some(input) = stdin {
        use std::io::Write as _;
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input.as_bytes())
            .map_err(|e| format!("kubectl {args:?}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("kubectl {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The bearer token of a kubeconfig, which doctor must never print.
fn token_of(kubeconfig: &str) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{kubeconfig} has no token"))
}

#[test]
#[ignore]
fn doctor_says_all_ok_on_the_healthy_harness() {
    let kubeconfig = env("KASCADE_KUBECONFIG");
    let admin = env("KASCADE_ADMIN_URL");
    let frontend = env("KASCADE_FRONTEND_URL");
    let cluster = env("CLUSTER_NAME");
    let args = [
        "--admin",
        &admin,
        "--cluster",
        &cluster,
        "--kubeconfig",
        &kubeconfig,
        "--frontend",
        &frontend,
    ];
    let d = doctor_until(&args, "all OK", |d| d.code == 0);
    capture(&d, "healthy");
    assert!(d.text.ends_with("All OK.\n"), "{}", d.text);
    assert_eq!(d.report["ok"], true);
    for c in d.report["checks"].as_array().unwrap() {
        let want = if c["id"] == "admission-webhook" {
            "skip"
        } else {
            "ok"
        };
        assert_eq!(c["status"], want, "{}", d.text);
    }
    // The list-watch identity's token stays in its kubeconfig.
    let token = token_of(&kubeconfig);
    assert!(!d.text.contains(&token));
    assert!(!d.inputs.contains(&token));
}

#[test]
#[ignore]
fn doctor_names_the_metadata_audit_policy_of_cluster_b() {
    let b_env = env("KASCADE_E2E_ENV_B");
    let b = env("CLUSTER_B_NAME");
    let admin = env("KASCADE_ADMIN_URL");
    // A Pod write in cluster B, whose policy logs Pods at Metadata.
    kubectl(
        &env_of(&b_env, "KUBECONFIG"),
        &["create", "-f", "-"],
        Some(
            r#"{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "doctor-meta-probe-", "namespace": "default"},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}"#,
        ),
    );
    let b_kubeconfig = env_of(&b_env, "KASCADE_KUBECONFIG");
    let args = [
        "--admin",
        &admin,
        "--cluster",
        &b,
        "--kubeconfig",
        &b_kubeconfig,
    ];
    let d = doctor_until(&args, "the Metadata level of Pod writes", |d| {
        status(d, "audit-level") == "fail"
    });
    capture(&d, "metadata-policy");
    assert_eq!(d.code, 3, "{}", d.text);
    let l = line(&d, "audit-level");
    assert!(l.starts_with("FAIL"), "{l}");
    assert!(l.contains("level Metadata") && l.contains("pods ("), "{l}");
    assert!(
        d.text.contains("fix:  log writes at RequestResponse"),
        "{}",
        d.text
    );
    // Nothing else is wrong with cluster B.
    for id in ["audit-events", "cluster-names", "export", "watch-rbac"] {
        assert_eq!(status(&d, id), "ok", "{id}: {}", d.text);
    }
}

fn wait_for(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "{what} never became ready");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn http_ok(url: &str) -> bool {
    Command::new("curl")
        .args(["-sf", "-o", "/dev/null", url])
        .status()
        .is_ok_and(|s| s.success())
}

/// Cluster B's apiserver sends its audit webhook to `url` (a restart).
fn point_webhook_of_b(b_env: &str, url: &str) {
    try_point_webhook_of_b(b_env, url).unwrap_or_else(|e| panic!("{e}"))
}

fn try_point_webhook_of_b(b_env: &str, url: &str) -> Result<(), String> {
    let run_dir = env_of(b_env, "KASCADE_E2E_RUN_DIR");
    let path = Path::new(&run_dir).join("audit-webhook.kubeconfig");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let rewritten: String = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("server: ") {
            Some(_) => format!("{}server: {url}\n", &l[..l.len() - l.trim_start().len()]),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&path, rewritten).map_err(|e| format!("{}: {e}", path.display()))?;
    // A restarted apiserver may find its port still held a moment by the
    // killed one (it then exits at once): the restart is tried again.
    for attempt in 1..=3 {
        let st = Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/cluster.sh"))
            .args([
                "restart",
                "kube-apiserver",
                // Killed: a graceful stop waits for its requests 15 s and more.
                "--crash",
                "--name",
                &env("CLUSTER_B_NAME"),
            ])
            .status()
            .map_err(|e| format!("e2e/cluster.sh: {e}"))?;
        if st.success() {
            return Ok(());
        }
        eprintln!("restarting cluster B's apiserver failed (attempt {attempt} of 3)");
    }
    Err(format!(
        "cluster B's apiserver does not restart (e2e/.run-{}/logs)",
        env("CLUSTER_B_NAME")
    ))
}

/// An object's JSON without `metadata.resourceVersion`, to replace
/// whatever version is current.
fn without_resource_version(json: &str) -> String {
    let mut v: Value = serde_json::from_str(json).unwrap();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    v.to_string()
}

/// Puts cluster B back as the suite left it, even when a check failed.
struct RestoreB {
    b_env: String,
    webhook_url: String,
    cluster_role: String,
}

impl Drop for RestoreB {
    fn drop(&mut self) {
        // The webhook first: its restart does not need the ClusterRole, and
        // the ClusterRole needs a running apiserver. Nothing here may panic
        // while a failed check unwinds (that would abort, unreported).
        let webhook = try_point_webhook_of_b(&self.b_env, &self.webhook_url);
        let role = try_kubectl(
            &env_of(&self.b_env, "KUBECONFIG"),
            &["replace", "-f", "-"],
            Some(&without_resource_version(&self.cluster_role)),
        );
        for e in [webhook.err(), role.err()].into_iter().flatten() {
            eprintln!("cluster B could not be put back as it was: {e}");
            if !std::thread::panicking() {
                panic!("cluster B could not be put back as it was: {e}");
            }
        }
    }
}

#[test]
#[ignore]
fn doctor_names_each_fault_made_in_the_harness() {
    let b_env = env("KASCADE_E2E_ENV_B");
    let b = env("CLUSTER_B_NAME");
    let b_admin_kubeconfig = env_of(&b_env, "KUBECONFIG");
    let b_kubeconfig = env_of(&b_env, "KASCADE_KUBECONFIG");
    let spool = tempfile::tempdir().unwrap();

    // A Jaeger of its own, to stop later.
    let (otlp_port, health_port) = (free_port(), free_port());
    let jaeger = Killed(
        Command::new(PathBuf::from(env("KASCADE_E2E_BIN")).join("jaeger"))
            .arg("--config")
            .arg(format!(
                "file:{}/e2e/jaeger/sink.yaml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .env("JAEGER_OTLP_GRPC_PORT", otlp_port.to_string())
            .env("JAEGER_HEALTH_PORT", health_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the doctor's Jaeger", || {
        std::net::TcpStream::connect(("127.0.0.1", otlp_port)).is_ok()
    });

    // A collector that list-watches cluster B, with the harness's webhook
    // PKI and token, but no apiserver sends it audit events yet.
    let (webhook_port, admin_port) = (free_port(), free_port());
    let _collector = Killed(
        Command::new(env("KASCADE_BIN"))
            .args(["collect", "--cluster", &b])
            .arg("--listen")
            .arg(format!("127.0.0.1:{webhook_port}"))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{admin_port}"))
            .arg("--spool-dir")
            .arg(spool.path())
            .args(["--webhook-token-file", &env("AUDIT_WEBHOOK_TOKEN_FILE")])
            .args(["--tls-cert-file", &env("KASCADE_TLS_CERT_FILE")])
            .args(["--tls-key-file", &env("KASCADE_TLS_KEY_FILE")])
            .args(["--tls-client-ca-file", &env("KASCADE_TLS_CLIENT_CA_FILE")])
            .args(["--watch-cluster", &format!("{b}={b_kubeconfig}")])
            .args([
                "--export-batch-timeout",
                "200ms",
                "--export-retry-for",
                "10m",
            ])
            .arg("--otlp-endpoint")
            .arg(format!("http://127.0.0.1:{otlp_port}"))
            .env_remove("KASCADE_SPOOL_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let admin = format!("http://127.0.0.1:{admin_port}");
    wait_for("the doctor's collector", || {
        http_ok(&format!("{admin}/readyz"))
    });
    let args = [
        "--admin",
        &admin,
        "--cluster",
        &b,
        "--kubeconfig",
        &b_kubeconfig,
    ];

    // 1. No audit webhook sends to this collector.
    let d = doctor(&args);
    capture(&d, "no-webhook");
    assert_eq!(d.code, 3, "{}", d.text);
    let l = line(&d, "audit-events");
    assert!(
        l.starts_with("FAIL") && l.contains(&format!("no audit event from cluster {b}")),
        "{l}"
    );
    assert!(d.text.contains("--audit-webhook-config-file"), "{}", d.text);

    // 2. Cluster B's webhook path names another cluster.
    let restore = RestoreB {
        webhook_url: env_of(&b_env, "AUDIT_WEBHOOK_URL"),
        cluster_role: kubectl(
            &b_admin_kubeconfig,
            &["get", "clusterrole", "kascade-reader", "-o", "json"],
            None,
        ),
        b_env: b_env.clone(),
    };
    let typo = format!("{b}-typo");
    point_webhook_of_b(
        &b_env,
        &format!("https://127.0.0.1:{webhook_port}/audit/{typo}"),
    );
    let d = doctor_until(&args, "events under the wrong name", |d| {
        status(d, "cluster-names") == "fail"
    });
    capture(&d, "wrong-cluster-name");
    let l = line(&d, "cluster-names");
    assert!(
        l.contains(&format!("\"{typo}\"")) && l.contains(&format!("none as \"{b}\"")),
        "{l}"
    );
    assert!(
        d.text.contains(&format!(
            "change the server's path /audit/{typo} to /audit/{b}"
        )),
        "{}",
        d.text
    );
    assert!(line(&d, "audit-events").starts_with("FAIL"), "{}", d.text);

    // 3. The watch identity's ClusterRole loses ConfigMaps.
    let mut role: Value = serde_json::from_str(&restore.cluster_role).unwrap();
    for rule in role["rules"].as_array_mut().unwrap() {
        if let Some(rs) = rule["resources"].as_array_mut() {
            rs.retain(|r| r != "configmaps");
        }
    }
    kubectl(
        &b_admin_kubeconfig,
        &["replace", "-f", "-"],
        Some(&without_resource_version(&role.to_string())),
    );
    let d = doctor_until(&args, "ConfigMaps refused", |d| {
        status(d, "watch-rbac") == "fail"
    });
    capture(&d, "rbac-denied");
    let l = line(&d, "watch-rbac");
    assert!(l.contains("configmaps (list, watch)"), "{l}");
    assert!(d.text.contains("--resource=configmaps"), "{}", d.text);

    // 4. Its Jaeger goes down while spans are being exported.
    drop(jaeger);
    kubectl(
        &b_admin_kubeconfig,
        &[
            "create",
            "configmap",
            "-n",
            "default",
            &format!("doctor-jaeger-down-{otlp_port}"),
        ],
        None,
    );
    let d = doctor_until(&args, "the export failing", |d| {
        status(d, "export") == "fail"
    });
    capture(&d, "jaeger-down");
    let l = line(&d, "export");
    assert!(
        l.contains(&format!("http://127.0.0.1:{otlp_port}: failing")) && l.contains("last error"),
        "{l}"
    );
    assert!(d.text.contains("is Jaeger up?"), "{}", d.text);
    assert_eq!(d.code, 3);

    drop(restore);
}

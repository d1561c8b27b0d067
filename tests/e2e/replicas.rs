//! Two collectors and two frontends; a resource RBAC refuses, then allows.

use super::*;

async fn wait_ready(url: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !reqwest::get(url)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(std::time::Instant::now() < deadline, "{url} not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore]
async fn two_collectors_and_two_frontends_answer_the_related_cpid_query_alike() {
    use kascade_cpid::{ChangeContext, Config, Cpid, Tracer};
    // A second collector and a second frontend on the same raw Jaeger.
    let dir = tempfile::tempdir().unwrap();
    let spawn = |args: &[&str]| {
        Killed(
            std::process::Command::new(env("KASCADE_BIN"))
                .args(args)
                // The suite's KASCADE_* settings (TLS, token) are collector
                // A's: B is configured by its flags alone.
                .env_clear()
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let spool = dir.path().join("spool");
    let (cluster, otlp, raw) = (
        env("CLUSTER_NAME"),
        env("JAEGER_OTLP_GRPC"),
        env("JAEGER_QUERY_URL"),
    );
    let _collector_b = spawn(&[
        "collect",
        "--listen",
        "127.0.0.1:18090",
        "--admin-listen",
        "127.0.0.1:18091",
        "--cluster",
        &cluster,
        "--otlp-endpoint",
        &otlp,
        "--export-batch-timeout",
        "200ms",
        "--spool-dir",
        spool.to_str().unwrap(),
    ]);
    let _frontend_b = spawn(&[
        "frontend",
        "--grpc-listen",
        "127.0.0.1:18093",
        "--http-listen",
        "127.0.0.1:18094",
        "--jaeger-url",
        &raw,
        "--default-cluster",
        &cluster,
    ]);
    wait_ready("http://127.0.0.1:18091/readyz").await;
    wait_ready("http://127.0.0.1:18094/readyz").await;

    // root ← nothing; m1 ← {root, x} reported to collector A; m2 ← {m1, y}
    // reported to collector B.
    let merge = |tracer: &Tracer, a: Cpid, b: Cpid| {
        let mut p = tracer.propagation();
        p.observe_context(ChangeContext::new(a))
            .observe_context(ChangeContext::new(b));
        p.decide().cpid().unwrap()
    };
    let a = tracer_of_collector_a("replica-a");
    let b = Tracer::new(
        Config::new("http://127.0.0.1:18090")
            .controller("replica-b")
            .flush_interval(Duration::from_millis(10)),
    );
    let root = Cpid::new_random();
    let m1 = merge(&a, root, Cpid::new_random());
    a.flush().await;
    let m2 = merge(&b, m1, Cpid::new_random());
    b.flush().await;
    assert_eq!((a.stats().sent, b.stats().sent), (1, 1));

    let related = |frontend: &'static str| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let v: Value = reqwest::get(format!("{frontend}/cpid/related?cpid={root}"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let got: Vec<&str> = v["descendants"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["cpid"].as_str().unwrap())
                .collect();
            if got == [root.to_string(), m1.to_string(), m2.to_string()] {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{frontend}: {v}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let from_a = related("http://127.0.0.1:8094").await;
    let from_b = related("http://127.0.0.1:18094").await;
    assert_eq!(from_a, from_b);
    assert_eq!(from_a["descendants"][2]["controller"], "replica-b");
    assert_eq!(from_a["descendants"][1]["controller"], "replica-a");
    // Walking up from m2 reaches the root through both collectors' merges.
    let up: Value = reqwest::get(format!("http://127.0.0.1:18094/cpid/related?cpid={m2}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ancestors: Vec<&str> = up["ancestors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cpid"].as_str().unwrap())
        .collect();
    assert!(ancestors.contains(&root.to_string().as_str()), "{up}");
}

#[tokio::test]
#[ignore]
async fn a_resource_rbac_refuses_is_watched_once_it_is_allowed() {
    use kascade::test_support::flow::{Intake, Work};
    use kascade::test_support::metrics::Metrics;
    use kascade::test_support::source::watch::{WatchConfig, start};
    // An apiserver that has just started refuses everything until its
    // authorizer has synced, and an operator may grant a resource later:
    // a watcher refused once must try again, not give up.
    let ns = "rbac-later";
    let dir = tempfile::tempdir().unwrap();
    let manifest = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        kubectl(&["apply", "-f", path.to_str().unwrap()]);
    };
    manifest(
        "sa.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: late-watcher, namespace: {ns}}}\n"
        ),
    );
    let token = kubectl(&[
        "create",
        "token",
        "late-watcher",
        "-n",
        ns,
        "--duration",
        "1h",
    ]);
    // kascade's own kubeconfig (server, CA) with the ServiceAccount's token.
    let own = std::fs::read_to_string(env("KASCADE_KUBECONFIG")).unwrap();
    let kubeconfig: String = own
        .lines()
        .map(|l| match l.split_once("token:") {
            Some((indent, _)) => format!("{indent}token: {}\n", token.trim()),
            None => format!("{l}\n"),
        })
        .collect();
    assert!(kubeconfig.contains(token.trim()), "{own}");
    let kubeconfig_path = dir.path().join("late-watcher.kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig).unwrap();

    let metrics = std::sync::Arc::new(Metrics::default());
    let (intake, mut rx) = Intake::new(10_000, Default::default());
    let cfg = WatchConfig::new(ns, kubeconfig_path)
        .include(["configmaps"])
        .events(false);
    let tasks = start(cfg, intake, metrics.clone()).await.unwrap();
    assert_eq!(tasks.len(), 1, "configmaps only");
    let refused = || {
        metrics
            .watch_forbidden
            .get_or_create(&Metrics::cluster(ns))
            .get()
    };
    // Refused (403) first: counted while it lasts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while refused() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refusal was never counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Granted now; a ConfigMap written after the grant is watched.
    manifest(
        "rbac.yaml",
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
             metadata: {{name: {ns}-configmaps}}\n\
             rules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: {ns}-configmaps}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-configmaps}}\n\
             subjects: [{{kind: ServiceAccount, name: late-watcher, namespace: {ns}}}]\n"
        ),
    );
    kubectl(&[
        "create",
        "configmap",
        "granted",
        "-n",
        ns,
        "--from-literal=k=v",
    ]);
    let seen = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(work) = rx.recv().await {
            if let Work::Watch(change) = work
                && change.object.namespace == ns
                && change.object.name == "granted"
            {
                return true;
            }
        }
        false
    })
    .await;
    for t in tasks {
        t.abort();
    }
    kubectl(&["delete", "namespace", ns, "--wait=false"]);
    kubectl(&[
        "delete",
        "clusterrolebinding,clusterrole",
        &format!("{ns}-configmaps"),
    ]);
    assert_eq!(
        seen,
        Ok(true),
        "the ConfigMap written after the grant was never watched"
    );
    assert_eq!(
        refused(),
        0,
        "allowed again, the refusal is no longer counted"
    );
}

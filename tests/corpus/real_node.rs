//! Runs on one real node (a kubelet with containerd and runc beside the
//! kwok nodes, `runs/real-*`): what only a real kubelet reports — its own
//! start-up Warnings on the Node, a Pod that ends Failed — judged right.

use super::*;

#[test]
fn a_nodes_start_up_warnings_do_not_explain_a_pod_bound_after_the_node_was_ready() {
    // The kubelet warns at start (cgroup v1, an image filesystem not yet
    // measured) and the Node is Ready a moment later; the Pod bound to it
    // after that crash-loops. The Node's Warnings are below the Pod in its
    // tree, but they were over before the Pod's problem began.
    for (run, object, title) in [
        (
            "real-crash-loop",
            "pods real-crash/crasher-",
            "BackOff: Back-off restarting failed container",
        ),
        (
            "real-readiness-fail",
            "pods real-ready/web-",
            "Unhealthy: Readiness probe failed",
        ),
    ] {
        let r = explain_run(run);
        let first = &r.findings[0];
        assert!(
            first.object.display.starts_with(object) && first.title.starts_with(title),
            "{run}: {}",
            first.headline
        );
        for f in r.findings.iter().filter(|f| f.object.resource == "nodes") {
            assert_eq!(f.severity, Severity::Info, "{run}: {}", f.headline);
            assert!(
                f.symptoms.is_empty(),
                "{run}: {} explains {:?}",
                f.headline,
                f.symptoms
            );
        }
    }
    // The same Warnings on a healthy run on the real node: a note.
    let r = explain_run("real-healthy");
    assert!(r.worst() < Some(Severity::Warning), "{:#?}", r.findings);
}

#[tokio::test]
async fn a_pod_its_kubelet_left_failed_is_a_failing_cascade_and_a_ready_one_is_not() {
    // OOM-killed under restartPolicy Never: the cascade completes with the
    // Pod Failed, which is what went wrong.
    let (f, range) = frontend("real-oom-killed").await;
    let t = search(&f, range, Mode::Cascade, ("pods", "real-oom", "hog")).await;
    let all = spans(&t);
    let top = top(&all);
    assert!(in_error(top), "{}", top.name);
    assert!(top.name.contains("failing: "), "{}", top.name);
    assert!(
        top.status
            .as_ref()
            .is_some_and(|s| s.message.contains("OOMKilled")),
        "{:?}",
        top.status
    );
    // Two Pods that ran and became Ready on the same node: red in no mode.
    no_error_in_any_mode("real-healthy", ("deployments", "real-healthy", "web")).await;
}

/// A real kubelet registers its Node NotReady and reports it Ready 0.2 s
/// later, after its own start-up; the ttl controller annotates the Node
/// between the two. The Ready report belongs to the kubelet's registration
/// (rule `node-registered`), not to the annotation, so the registration
/// completes with it; the annotation's cascade, which found the Node
/// NotReady and left it so, ends when the Node is Ready — offline and in
/// the live tracker `kascade analyze` counts with.
#[tokio::test]
async fn a_kubelets_node_registration_completes_with_its_ready_report() {
    use kascade::test_support::analysis::cascade::{Completion, build, change_name};
    let changes = common::changes_of_lines(lines("real-healthy"), CLUSTER).await;
    let node = "nodes corpus-real-healthy-real";
    let ready = changes
        .iter()
        .find(|c| {
            change_name(c).ends_with(&format!("patch status {node}"))
                && c.readiness.as_ref().is_some_and(|r| r.status == "Current")
        })
        .expect("the kubelet's Ready report");
    let cause = ready.cause.as_ref().expect("a cause");
    assert_eq!(cause.rule, "node-registered");
    assert!(
        cause.name.ends_with(&format!("create {node}")),
        "{}",
        cause.name
    );
    let cascades = build(changes.clone());
    let of_node: Vec<_> = cascades
        .iter()
        .filter(|c| c.changes.iter().any(|ch| change_name(ch).ends_with(node)))
        .collect();
    assert!(of_node.len() >= 3, "{}", of_node.len());
    for c in &of_node {
        assert!(
            matches!(c.completion, Completion::Complete { .. }),
            "{}: {:?}",
            change_name(c.root()),
            c.completion
        );
    }
    let ttl = of_node
        .iter()
        .find(|c| c.root().user.ends_with(":ttl-controller"))
        .expect("the ttl controller's annotation");
    assert_eq!(
        ttl.completion,
        Completion::Complete {
            at: ready.completed
        }
    );
    // Analyze's live tracker: nothing of the Node's left incomplete.
    let a = analyze_json("real-healthy");
    let nodes: Vec<&serde_json::Value> = a["completions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "nodes")
        .collect();
    assert!(!nodes.is_empty());
    for c in nodes {
        assert_eq!(c["incomplete"], 0, "{c}");
    }
}

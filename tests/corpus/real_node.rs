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
    // Pods that ended Succeeded (a Job's three completions): red in no
    // mode.
    no_error_in_any_mode("job-complete", ("jobs", "job-demo", "pi")).await;
}

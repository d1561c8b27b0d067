//! Whole-cluster runs: the true cause first, start-up as background, no
//! false alarm in explain or any UI mode.

use super::*;

#[test]
fn the_clusters_start_up_is_background_and_the_true_cause_comes_first() {
    // A Pod whose nodeSelector matches no node, in a whole-cluster log that
    // also holds the apiserver's start-up refusals (its own Endpoints 422,
    // namespaces that exist already).
    let r = explain_run("unschedulable-nodeselector");
    let first = &r.findings[0];
    assert!(!first.background);
    assert_eq!(first.object.display, "pods sched-demo/stuck");
    assert!(
        first
            .title
            .contains("didn't match Pod's node affinity/selector"),
        "{}",
        first.title
    );
    let background: Vec<_> = r.findings.iter().filter(|f| f.background).collect();
    assert!(!background.is_empty(), "the start-up refusals are listed");
    // Background is listed last, and is the apiserver's own.
    let first_background = r.findings.iter().position(|f| f.background).unwrap();
    assert!(r.findings[first_background..].iter().all(|f| f.background));
    assert!(
        background.iter().all(|f| f
            .evidence
            .iter()
            .all(|e| !e.summary.starts_with("kascade-e2e-admin"))),
        "{background:#?}"
    );
    assert_eq!(r.totals.background, background.len() as u64);
}

#[test]
fn no_healthy_whole_cluster_run_fails_on_error() {
    let healthy = healthy_runs();
    assert!(healthy.len() >= 8, "{healthy:?}");
    for run in healthy {
        let r = explain_run(&run);
        let errors: Vec<&str> = r
            .findings
            .iter()
            .filter(|f| !f.background && f.severity == Severity::Error)
            .map(|f| f.headline.as_str())
            .collect();
        assert!(errors.is_empty(), "{run}: {errors:#?}");
        assert!(
            r.worst() < Some(Severity::Error),
            "{run}: --fail-on error would fail"
        );
    }
}

#[test]
fn the_whole_cluster_fail_on_error_exit_is_zero_for_a_healthy_run_and_three_for_a_failing_one() {
    let status = |run: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
            .args(["explain", "--fail-on", "error"])
            .arg(corpus_log(run))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .code()
    };
    assert_eq!(status("rolling-update"), Some(0));
    assert_eq!(status("quota-exceeded"), Some(3));
}

#[test]
fn a_warning_the_object_recovered_from_is_a_note() {
    // A StatefulSet Pod reported FailedScheduling (its claim not bound yet)
    // and was scheduled a moment later.
    let r = explain_run("statefulset-volumes");
    let transient: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::WarningEvent)
        .collect();
    assert!(
        transient.iter().all(|f| f.severity == Severity::Info),
        "{transient:#?}"
    );
    assert_eq!(r.totals.error + r.totals.warning, 0, "{:#?}", r.findings);
}

#[test]
fn a_controllers_retries_under_a_quota_are_back_off_not_slow_hops() {
    let r = explain_run("quota-exceeded");
    assert!(
        r.findings.iter().all(|f| f.kind != FindingKind::SlowHop),
        "{:#?}",
        r.findings
    );
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::DeniedWrite);
    assert!(
        f.evidence.iter().any(|e| e
            .summary
            .contains("after the first (its writer's back-off)")),
        "{:#?}",
        f.evidence
    );
}

#[test]
fn a_healthy_config_roll_reports_nothing() {
    let r = explain_run("config-roller");
    let own: Vec<_> = r.findings.iter().filter(|f| !f.background).collect();
    assert!(own.is_empty(), "{own:#?}");
}

#[test]
fn writers_fighting_over_replicas_are_the_first_finding() {
    let r = explain_run("controller-fight");
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::WritersFight);
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.object.display, "deployments fight-demo/web");
    assert!(
        f.title
            .starts_with("spec.replicas is set back and forth by 2 writers"),
        "{}",
        f.title
    );
    // Neither fighter alone is a fight: a healthy scale up and down by one
    // writer raises nothing.
    let r = explain_run("scale-up-down");
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != FindingKind::WritersFight)
    );
}

#[tokio::test]
async fn a_ready_statefulset_with_claims_is_red_in_no_mode() {
    no_error_in_any_mode("statefulset-volumes", ("statefulsets", "vol-demo", "data")).await;
}

#[tokio::test]
async fn a_healthy_rolling_update_is_red_in_no_mode() {
    // The kubelet's second delete of a Pod already gone (404) is routine in
    // every mode.
    no_error_in_any_mode("rolling-update", ("deployments", "catalog", "catalog")).await;
}

#[tokio::test]
async fn a_quota_cascade_names_refused_creates_by_pods_and_draws_no_back_off_as_a_hop() {
    let (f, range) = frontend("quota-exceeded").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("deployments", "quota-demo", "capped"),
    )
    .await;
    let all = spans(&t);
    let refused: Vec<&Span> = all
        .iter()
        .filter(|s| common::int_attr(s, "audit.code") == Some(403))
        .collect();
    let summarised: i64 = all
        .iter()
        .filter(|s| s.name.ends_with(" more create pods"))
        .filter_map(|s| common::int_attr(s, "writes.failed"))
        .sum();
    assert!(
        refused.len() as i64 + summarised >= 2,
        "refused creates shown or summarised"
    );
    for s in &refused {
        assert_eq!(string_attr(s, "resource"), Some("pods"), "{}", s.name);
        assert!(
            s.name
                .contains(" create pods (generateName quota-demo/capped-"),
            "{}",
            s.name
        );
    }
    // Every span of a write lasts no longer than its own request, its
    // back-off aside: retries are spans of their own request, their wait
    // an attribute.
    let retries: Vec<&Span> = all
        .iter()
        .filter(|s| common::int_attr(s, "cascade.attempt").is_some())
        .collect();
    for s in &retries {
        let took = Duration::from_nanos(s.end_time_unix_nano - s.start_time_unix_nano);
        assert!(took < Duration::from_secs(1), "{} spans {took:?}", s.name);
        assert!(string_attr(s, "cascade.backoff").is_some());
        // Its wait is back-off, not a hop: no hop shown on it at all (the
        // first attempt's is `cascade.first_hop`).
        assert!(
            common::int_attr(s, "cascade.hop_us").is_none(),
            "{} shows a hop beside its back-off",
            s.name
        );
        assert!(common::int_attr(s, "cascade.first_hop_us").is_some());
    }
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("deployments", "quota-demo", "capped"),
    )
    .await;
    let longest_hop = spans(&t)
        .iter()
        .filter_map(|s| common::int_attr(s, "cascade.hop_us"))
        .max()
        .unwrap_or(0);
    let longest_backoff = spans(&t)
        .iter()
        .filter_map(|s| common::int_attr(s, "cascade.backoff_us"))
        .max()
        .unwrap_or(0);
    assert!(
        longest_hop <= longest_backoff.max(1_000_000),
        "a hop of {longest_hop} µs, back-off at most {longest_backoff} µs"
    );
    // The critical path ends at the refused create the retries repeat (the
    // cause of the failure), not at the one Pod that was admitted.
    let starred: Vec<&Span> = all
        .iter()
        .filter(|s| s.name.starts_with(CRITICAL_MARK))
        .collect();
    let end = starred
        .iter()
        .max_by_key(|s| s.start_time_unix_nano)
        .expect("a critical path");
    assert!(
        end.name
            .contains("create pods (generateName quota-demo/capped-")
            && in_error(end),
        "{:#?}",
        starred.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    // Its one cascade's root is the title: it says it is failing, in error.
    let root = top(&all);
    assert!(
        root.name.starts_with(&format!(
            "{CRITICAL_MARK}failing: kascade-e2e-admin create deployments quota-demo/capped"
        )),
        "{}",
        root.name
    );
    assert!(in_error(root));
    // A healthy one-cascade trace's title does not.
    let (f, range) = frontend("job-complete").await;
    let t = search(&f, range, Mode::Cascade, ("jobs", "job-demo", "pi")).await;
    let healthy = spans(&t);
    let root = top(&healthy);
    assert!(!root.name.contains("failing"), "{}", root.name);
    assert!(!in_error(root), "{}", root.name);
}

#[tokio::test]
async fn a_stuck_rollouts_cascade_trace_is_titled_by_the_failing_change() {
    // The Deployment was created fine, then patched to an image that does
    // not exist: the trace is named by the patch, in error.
    let (f, range) = frontend("rollout-deadline").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("deployments", "checkout", "checkout"),
    )
    .await;
    let all = spans(&t);
    let tops: Vec<&Span> = all.iter().filter(|s| s.parent_span_id.is_empty()).collect();
    assert_eq!(
        tops.len(),
        1,
        "{:?}",
        tops.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let top = tops[0];
    assert!(
        top.name
            .starts_with("checkout/checkout: 3 cascades, failing: ")
            && top.name.contains(" patch deployments checkout/checkout"),
        "{}",
        top.name
    );
    assert!(in_error(top));
    // Its status says what went wrong, and the critical path is drawn on
    // the failing cascade only, not on the successful create's.
    let why = &top.status.as_ref().unwrap().message;
    assert!(
        why.contains("patch deployments checkout/checkout: not complete: waiting for")
            && why.contains("ErrImagePull"),
        "{why}"
    );
    let starred: Vec<&str> = all
        .iter()
        .filter(|s| s.name.starts_with(CRITICAL_MARK))
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        starred
            .iter()
            .any(|n| n.contains("patch deployments checkout/checkout"))
            && !starred
                .iter()
                .any(|n| n.contains("create deployments checkout/checkout")),
        "{starred:#?}"
    );
    // The kubelet pulls the missing image again and again: its status
    // writes after the first are attempts of that pull, their waits (2 s,
    // 20 s) back-off, not hops; the critical path ends at the first pull,
    // the failure, whose work lasts until the last attempt.
    let kubelet: Vec<&Span> = all
        .iter()
        .filter(|s| {
            s.name
                .contains("kwok-kubelet patch status pods checkout/checkout-")
        })
        .filter(|s| !s.name.contains("-7c557ccfb9-")) // the first version's Pods
        .collect();
    assert!(kubelet.len() >= 3, "{}", kubelet.len());
    let (first, again): (Vec<&Span>, Vec<&Span>) = kubelet
        .iter()
        .partition(|s| common::int_attr(s, "cascade.attempt").is_none());
    assert_eq!(
        first.len(),
        1,
        "{:#?}",
        kubelet.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert!(
        first[0].name.starts_with(CRITICAL_MARK),
        "{}",
        first[0].name
    );
    // The write that left the Pod failed is in error (the path to the
    // cause is red); its attempts again are not new failures.
    assert!(in_error(first[0]), "{}", first[0].name);
    let why = &first[0].status.as_ref().unwrap().message;
    assert!(
        why.starts_with("left pods checkout/checkout-") && why.contains("ErrImagePull"),
        "{why}"
    );
    for s in &again {
        assert!(!in_error(s), "{}", s.name);
        assert!(
            common::int_attr(s, "cascade.hop_us").is_none(),
            "{}",
            s.name
        );
        assert!(
            common::int_attr(s, "cascade.backoff_us").is_some(),
            "{}",
            s.name
        );
        assert!(!s.name.starts_with(CRITICAL_MARK), "{}", s.name);
    }
    // A healthy run's top span is titled by its latest cascade, not in error.
    let (f, range) = frontend("rolling-update").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("deployments", "catalog", "catalog"),
    )
    .await;
    let top = spans(&t)
        .into_iter()
        .find(|s| s.parent_span_id.is_empty())
        .unwrap();
    assert!(top.name.contains(" cascades, latest: "), "{}", top.name);
    assert!(!in_error(&top));
}

#[tokio::test]
async fn writers_fighting_are_red_in_every_mode_and_one_writer_scaling_in_none() {
    let (f, range) = frontend("controller-fight").await;
    for mode in MODES {
        let t = search(&f, range, mode, ("deployments", "fight-demo", "web")).await;
        let red: Vec<String> = spans(&t)
            .iter()
            .filter(|s| in_error(s))
            .filter_map(|s| s.status.as_ref().map(|st| st.message.clone()))
            .collect();
        assert!(
            red.iter()
                .any(|m| m.contains("spec.replicas set back and forth by 2 writers")),
            "{mode:?}: {red:#?}"
        );
    }
    no_error_in_any_mode("scale-up-down", ("deployments", "batch", "worker")).await;
}

/// No mode shows a tag with nothing in it: a cluster-scoped object (the
/// PersistentVolumes, StorageClass and Node a StatefulSet's Pods and claims
/// reach) has no namespace tag, a core object no group tag.
#[tokio::test]
async fn no_mode_shows_an_empty_tag() {
    let (f, range) = frontend("statefulset-volumes").await;
    for mode in [
        Mode::Tracing,
        Mode::Tree,
        Mode::Timeline,
        Mode::Grouped,
        Mode::Cascade,
    ] {
        let t = search(&f, range, mode, ("statefulsets", "vol-demo", "data")).await;
        let all = spans(&t);
        if matches!(mode, Mode::Tracing | Mode::Tree) {
            assert!(
                all.iter().any(|s| matches!(
                    string_attr(s, "resource"),
                    Some("persistentvolumes" | "nodes")
                )),
                "{mode:?}: the trace reaches cluster-scoped objects"
            );
        }
        let empty: Vec<(String, String)> = all
            .iter()
            .flat_map(|s| {
                s.attributes
                    .iter()
                    .filter(|a| string_attr(s, &a.key) == Some(""))
                    .map(|a| (s.name.clone(), a.key.clone()))
            })
            .collect();
        assert!(empty.is_empty(), "{mode:?}: {empty:#?}");
    }
}

#[tokio::test]
async fn a_statefulsets_cascades_leave_out_the_volume_set_up_before_it() {
    // The harness created the PersistentVolumes at cluster start, seconds
    // before the StatefulSet: their creates are not the StatefulSet's
    // cascades, and do not stretch its trace.
    let (f, range) = frontend("statefulset-volumes").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("statefulsets", "vol-demo", "data"),
    )
    .await;
    let roots: Vec<String> = t
        .cascades
        .iter()
        .map(|c| kascade::test_support::analysis::cascade::change_name(c.root()))
        .collect();
    assert!(
        roots.iter().all(|r| !r.contains(" persistentvolumes ")),
        "{roots:#?}"
    );
    assert!(
        roots
            .iter()
            .any(|r| r.ends_with("create statefulsets vol-demo/data")),
        "{roots:#?}"
    );
    // Searched by one of its claims, the one cascade's root (the trace's
    // title) names the claim, as the other modes' roots do.
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("persistentvolumeclaims", "vol-demo", "data-data-1"),
    )
    .await;
    let root = spans(&t)
        .into_iter()
        .find(|s| s.parent_span_id.is_empty())
        .unwrap();
    assert!(
        root.name.ends_with(
            "create statefulsets vol-demo/data ▸ persistentvolumeclaims vol-demo/data-data-1"
        ),
        "{}",
        root.name
    );
    // Its claims' creates are under the StatefulSet's create.
    let c = t
        .cascades
        .iter()
        .find(|c| c.root().object.resource == "statefulsets")
        .unwrap();
    assert!(
        c.changes
            .iter()
            .any(|x| x.object.resource == "persistentvolumeclaims" && x.verb == "create"),
        "{roots:#?}"
    );
}

#[tokio::test]
async fn writers_are_named_short_in_the_name_column_and_in_full_in_a_tag() {
    let (f, range) = frontend("rolling-update").await;
    for mode in [Mode::Cascade, Mode::Tree, Mode::Timeline] {
        let t = search(&f, range, mode, ("deployments", "catalog", "catalog")).await;
        let all = spans(&t);
        let long: Vec<&str> = all
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| n.contains("system:serviceaccount:kube-system:"))
            .collect();
        assert!(long.is_empty(), "{mode:?}: {long:#?}");
        let controller = all
            .iter()
            .find(|s| s.name.contains("replicaset-controller create"))
            .unwrap_or_else(|| panic!("{mode:?}: no Pod create by the ReplicaSet controller"));
        assert_eq!(
            string_attr(controller, "audit.user"),
            Some("system:serviceaccount:kube-system:replicaset-controller"),
            "{mode:?}"
        );
        // A core object's group is not an empty tag.
        assert!(
            all.iter()
                .filter(|s| string_attr(s, "resource") == Some("pods"))
                .all(|s| string_attr(s, "group").is_none()),
            "{mode:?}"
        );
    }
}

/// Several cascades are titled by one that wrote the searched object: a
/// Job's trace by the schedule that made it, not by its CronJob's later
/// suspend patch; a claim's by its own create, not by the Pod's.
#[tokio::test]
async fn several_cascades_are_titled_by_one_that_wrote_the_searched_object() {
    let (f, range) = frontend("cronjob-twice").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("jobs", "reports", "nightly-report-29941361"),
    )
    .await;
    let all = spans(&t);
    let title = top(&all).name.clone();
    assert!(
        title.contains(
            "cascades, latest: cronjob-controller create jobs reports/nightly-report-29941361"
        ),
        "the title names the writer as the rows do: {title}"
    );
    // The full name stays in a tag.
    let tag = top(&all)
        .attributes
        .iter()
        .find(|a| a.key == "cascade.latest")
        .and_then(|a| a.value.as_ref())
        .map(|v| format!("{v:?}"));
    assert!(
        tag.as_deref()
            .is_some_and(|t| t.contains("system:serviceaccount:kube-system:cronjob-controller")),
        "{tag:?}"
    );
    assert!(
        all.iter().any(|s| s.name.starts_with(CRITICAL_MARK)),
        "the titled cascade's critical path is drawn"
    );
    let (f, range) = frontend("pvc-pending").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("persistentvolumeclaims", "pvc-demo", "data"),
    )
    .await;
    let title = top(&spans(&t)).name.clone();
    assert!(
        title.contains("failing: kascade-e2e-admin create persistentvolumeclaims pvc-demo/data"),
        "{title}"
    );
}

//! Cascades of the captured scenarios: roots, hops and completion.

use super::*;

#[tokio::test]
async fn the_image_patch_roots_the_rollout_with_hops_from_the_audit_timestamps() {
    let all = cascades("deployment").await;
    let c = rooted_at(&all, PATCH);
    assert_eq!(c.missing_cause, None);
    let has = |user: &str, verb: &str, sub: &str, resource: &str| {
        c.changes[1..].iter().any(|x| {
            x.user.ends_with(user)
                && x.verb == verb
                && x.subresource == sub
                && x.object.resource == resource
                && x.code < 400
        })
    };
    // The new ReplicaSet, its Pods, their bindings and the kubelet's reports.
    assert!(has(":deployment-controller", "create", "", "replicasets"));
    assert!(has(":replicaset-controller", "create", "", "pods"));
    assert!(has("system:kube-scheduler", "create", "binding", "pods"));
    assert!(has("kwok-kubelet", "patch", "status", "pods"));
    // The old ReplicaSet scaled down and its Pods deleted.
    assert!(has(":deployment-controller", "update", "", "replicasets"));
    assert!(has(":replicaset-controller", "delete", "", "pods"));
    // Every change is under its cause, and each hop is the effect's
    // requestReceived minus the cause's stageTimestamp, both read from the
    // fixture file.
    let raw: Vec<Value> = common::audit_lines("deployment")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut hops = 0;
    for (i, x) in c.changes.iter().enumerate().skip(1) {
        let p = c.parent[i].expect("every change but the root has its cause in the cascade");
        let k = x.cause.as_ref().unwrap();
        assert_eq!(k.span, c.changes[p].span);
        let (received, _) = raw_times(&raw, x);
        let (_, cause_completed) = raw_times(&raw, &c.changes[p]);
        assert_eq!(
            k.hop,
            received.duration_since(cause_completed).unwrap_or_default(),
            "{}",
            change_name(x)
        );
        hops += 1;
    }
    assert!(hops > 40, "{hops} hops");
    // The new ReplicaSet's create comes right under the patch.
    let rs = c.children[0]
        .iter()
        .map(|&i| &c.changes[i])
        .find(|x| x.verb == "create" && x.object.resource == "replicasets")
        .expect("the new ReplicaSet's create under the patch");
    assert_eq!(
        rs.cause.as_ref().unwrap().edge,
        "deployments → replicasets create"
    );
    // Complete when the last object settled (the Deployment available, the
    // old ReplicaSet scaled to 0, the old Pods gone); the critical path ends
    // with the write that ended last.
    let Completion::Complete { at } = c.completion else {
        panic!("{:?}", c.completion)
    };
    let last_end = c.changes.iter().map(|x| x.completed).max().unwrap();
    assert!(at <= last_end && at > c.root().completed);
    assert_eq!(c.critical_path[0], 0);
    assert_eq!(
        c.changes[*c.critical_path.last().unwrap()].completed,
        last_end
    );
    for w in c.critical_path.windows(2) {
        assert_eq!(c.parent[w[1]], Some(w[0]));
    }
    let text = cascade::render_text(std::slice::from_ref(c));
    let (received, _) = raw_times(&raw, rs);
    let (_, patched) = raw_times(&raw, c.root());
    let rs_hop = format_duration(received.duration_since(patched).unwrap());
    for want in [
        format!("cascade 1 of 1: {PATCH}  at "),
        format!(
            "completed after {} (at ",
            format_duration(at.duration_since(c.root().received).unwrap())
        ),
        format!("[deployments → replicasets create, hop {rs_hop}]"),
        "★ critical path".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
}

/// Per scenario with a fixture: the cascade of its main write, complete,
/// or waiting for what the scenario makes it wait for.
#[tokio::test]
async fn every_scenario_cascade_completes_or_says_what_it_waits_for() {
    let complete: &[(&str, &str)] = &[
        (
            "deployment",
            "kascade-e2e-admin create deployments default/hello",
        ),
        (
            "deployment",
            "kascade-e2e-admin delete deployments default/hello",
        ),
        ("service", "kascade-e2e-admin create services svc-demo/web"),
        (
            "service",
            "kascade-e2e-admin create deployments svc-demo/web",
        ),
        ("job", "kascade-e2e-admin create jobs job-demo/pi"),
        (
            "config",
            "kascade-e2e-admin create deployments config-demo/app",
        ),
        (
            "config",
            "kascade-e2e-admin create pods config-demo/config-pod",
        ),
        (
            "statefulset",
            "kascade-e2e-admin create statefulsets sts-demo/db",
        ),
        (
            "statefulset",
            "kascade-e2e-admin patch scale statefulsets sts-demo/db",
        ),
        (
            "volumes",
            "kascade-e2e-admin create statefulsets vol-demo/data",
        ),
        (
            "crosscluster",
            "kascade-e2e-admin create pods remote-demo/labeled",
        ),
    ];
    let mut by_scenario: HashMap<&str, Vec<Cascade>> = HashMap::new();
    for (scenario, root) in complete {
        if !by_scenario.contains_key(scenario) {
            by_scenario.insert(scenario, cascades(scenario).await);
        }
        let c = rooted_at(&by_scenario[scenario], root);
        assert!(
            c.completion.is_complete(),
            "{scenario}: {root}: {:?}",
            c.completion
        );
        assert!(c.changes.len() > 1, "{scenario}: {root} caused nothing");
    }
    // The CronJob's Jobs are made by its schedule, not by the CronJob's
    // create: each roots a cascade of its own, named by its timer, through
    // its Pod to the Job's completion.
    let cron = cascades("cronjob").await;
    let scheduled: Vec<&Cascade> = cron
        .iter()
        .filter(|c| c.root().object.resource == "jobs" && c.root().verb == "create")
        .collect();
    assert!(!scheduled.is_empty());
    for c in scheduled {
        assert_eq!(c.root().timer.as_deref(), Some("cronjob-schedule"));
        assert!(c.root().cause.is_none());
        assert!(c.completion.is_complete(), "{:?}", c.completion);
        assert!(c.changes.iter().any(|x| x.object.resource == "pods"));
    }
    let create = rooted_at(&cron, "kascade-e2e-admin create cronjobs cron-demo/tick");
    assert!(
        create.changes.iter().all(|x| x.object.resource != "jobs"),
        "the CronJob's create did not make its Jobs"
    );

    // The Job's Pod ran to Succeeded: the Job is Complete after it.
    let job = rooted_at(
        &by_scenario["job"],
        "kascade-e2e-admin create jobs job-demo/pi",
    );
    assert!(job.changes.iter().any(|x| x.object.resource == "pods"));
    assert!(job.duration().unwrap() > Duration::from_secs(1));

    // No controller reacts to a ConfigMap: each write of the big one (a
    // megabyte value, created then replaced three times) is a complete
    // cascade of its own, and so is the relabel of the crosscluster Pod.
    let big = cascades("bigobject").await;
    let writes: Vec<&Cascade> = big
        .iter()
        .filter(|c| change_name(c.root()).ends_with(" configmaps big-demo/big"))
        .collect();
    assert_eq!(
        writes.len(),
        4,
        "{:?}",
        big.iter()
            .map(|c| change_name(c.root()))
            .collect::<Vec<_>>()
    );
    for c in writes {
        assert_eq!(c.changes.len(), 1, "{}", change_name(c.root()));
        assert!(c.completion.is_complete());
    }
    let relabel = rooted_at(
        &cascades("crosscluster").await,
        "kascade-e2e-admin patch pods remote-demo/labeled",
    )
    .completion
    .clone();
    assert!(relabel.is_complete(), "{relabel:?}");

    let incomplete: &[(&str, &str, &[&str])] = &[
        (
            "unschedulable",
            "kascade-e2e-admin create pods sched-demo/stuck",
            &["pods sched-demo/stuck Failed (Unschedulable: 0/3 nodes are available"],
        ),
        (
            "rollout-stuck",
            "kascade-e2e-admin patch deployments rollout-demo/web",
            &[
                "deployments rollout-demo/web InProgress",
                "Failed (Unschedulable: ",
            ],
        ),
        // The progress deadline is a timer's cascade of its own, not the
        // last hop of the patch's.
        (
            "rollout-stuck",
            "system:serviceaccount:kube-system:deployment-controller update status deployments rollout-demo/web",
            &["deployments rollout-demo/web Failed (ProgressDeadlineExceeded: "],
        ),
        (
            "quota",
            "kascade-e2e-admin create deployments quota-demo/capped",
            &[
                "deployments quota-demo/capped Failed (FailedCreate: ",
                "exceeded quota: pods",
            ],
        ),
        (
            "job-failed",
            "kascade-e2e-admin create jobs jobfail-demo/migrate",
            &["jobs jobfail-demo/migrate Failed (BackoffLimitExceeded: "],
        ),
        (
            "pvc-pending",
            "kascade-e2e-admin create persistentvolumeclaims pvc-demo/data",
            &["persistentvolumeclaims pvc-demo/data InProgress (Pending"],
        ),
        (
            "pvc-pending",
            "kascade-e2e-admin create pods pvc-demo/db",
            &["pods pvc-demo/db Failed (Unschedulable: "],
        ),
        (
            "finalizer-blocked",
            "kascade-e2e-admin delete deployments fin-demo/held",
            &[
                "deployments fin-demo/held Terminating (deletion requested, waiting for finalizers: kascade.io/hold)",
            ],
        ),
    ];
    for (scenario, root, wants) in incomplete {
        let all = cascades(scenario).await;
        let c = rooted_at(&all, root);
        let w = waiting(c).join("; ");
        for want in *wants {
            assert!(
                w.contains(want),
                "{scenario}: waiting for {w}, not {want:?}"
            );
        }
        let text = cascade::render_text(std::slice::from_ref(c));
        assert!(text.contains("not complete: waiting for "), "{text}");
    }
}

//! Hops that mean propagation: out-of-order logs, explain and analyze
//! agreeing, objects created again.

use super::*;

#[tokio::test]
async fn a_log_that_starts_mid_run_or_comes_out_of_order_points_no_cause_forward() {
    // The last 60 % of the quota run (no start-up, the Deployment's create
    // missing), and the whole run with every 50-line block reversed (out of
    // order the way two apiservers' interleaved logs are).
    let all = lines("quota-exceeded");
    let tail: Vec<String> = all[all.len() * 2 / 5..].to_vec();
    let shuffled: Vec<String> = all
        .chunks(50)
        .flat_map(|c| c.iter().rev().cloned().collect::<Vec<_>>())
        .collect();
    for (what, input) in [("tail", tail), ("out of order", shuffled)] {
        let changes = common::changes_of_lines(input.clone(), CLUSTER).await;
        let by_span: std::collections::HashMap<_, _> =
            changes.iter().map(|c| (c.span, c)).collect();
        for c in &changes {
            if let Some(cause) = c.cause.as_ref().and_then(|k| by_span.get(&k.span)) {
                assert!(
                    cause.received <= c.received,
                    "{what}: {} caused by the later {}",
                    kascade::test_support::analysis::cascade::change_name(c),
                    kascade::test_support::analysis::cascade::change_name(cause)
                );
            }
        }
        // The refusals are still the first finding, whatever else is missing.
        let r = tokio::task::spawn_blocking(move || explain_lines(&input))
            .await
            .unwrap();
        let f = &r.findings[0];
        assert!(f.title.contains("exceeded quota"), "{what}: {}", f.headline);
        assert!(!f.background, "{what}");
        // What may be missing is said, not guessed.
        let out_of_order = r
            .inputs
            .notes
            .iter()
            .any(|n| n.contains("out of time order"));
        assert_eq!(
            out_of_order,
            what == "out of order",
            "{what}: {:?}",
            r.inputs.notes
        );
    }
}

/// `kascade explain` judges a slow hop against the edge's other hops;
/// `kascade analyze` reports the same edges' hops: on whole-cluster runs
/// (start-up, refused writes and retries in them) both count the same hops
/// per edge, the cluster's start-up left out of both.
#[test]
fn explain_and_analyze_count_the_same_hops_per_edge() {
    use kascade::test_support::analysis::explain::ExplainCollector;
    use kascade::test_support::analysis::foreground::{ForegroundScope, ForegroundSink};
    use kascade::test_support::analysis::stats::PropagationStats;
    let rt = tokio::runtime::Runtime::new().unwrap();
    for run in [
        "quota-exceeded",
        "multi-healthy-a",
        "rollout-deadline",
        "statefulset-volumes",
    ] {
        let explain = Arc::new(ExplainCollector::new(Scope::default()));
        let stats = Arc::new(PropagationStats::default());
        let analyze = Arc::new(ForegroundSink::new(
            ForegroundScope::default(),
            vec![stats.clone()],
        ));
        let errors = rt.block_on(kascade::test_support::offline::changes_from_audit_lines(
            lines(run),
            CLUSTER,
            Arc::new(kascade::app::RuleSources::default().load().unwrap()),
            &kascade::test_support::source::audit::AuditFilter::default(),
            kascade::test_support::aggregate::ProcessorConfig::default(),
            kascade::test_support::aggregate::redact::Redactor::new(None),
            Arc::new(Tee(vec![explain.clone(), analyze.clone()])),
        ));
        assert!(errors.is_empty(), "{run}: {errors:?}");
        assert!(analyze.left_out().background > 0, "{run}: no start-up seen");
        let analyzed: std::collections::BTreeMap<String, u64> = stats
            .snapshot()
            .edges
            .iter()
            .map(|(edge, l)| (edge.clone(), l.count()))
            .filter(|(_, n)| *n > 0)
            .collect();
        assert!(!analyzed.is_empty(), "{run}: no hops");
        assert_eq!(explain.hop_counts(), analyzed, "{run}");
    }
}

/// `kascade analyze --selector` counts the cascades of the labelled objects
/// only: on a run with a Deployment (`app=hello`), a Job and a StatefulSet
/// at once, the Deployment's edges and none of the others'; a selector no
/// object matches is an error naming it, not an empty table.
#[test]
fn analyze_by_selector_counts_the_labelled_objects_cascades_only() {
    let analyze = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kascade"))
            .arg("analyze")
            .arg(corpus_log("multi-healthy-a"))
            .args(["--format", "json"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let edges = |json: &str| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["edge"].as_str().unwrap().to_string())
            .collect()
    };
    let (code, all, _) = analyze(&[]);
    assert_eq!(code, Some(0));
    let all = edges(&all);
    assert!(all.iter().any(|e| e.starts_with("jobs → ")), "{all:?}");
    assert!(
        all.iter().any(|e| e.starts_with("statefulsets → ")),
        "{all:?}"
    );
    let (code, hello, _) = analyze(&["-l", "app=hello"]);
    assert_eq!(code, Some(0));
    let hello = edges(&hello);
    assert!(
        hello
            .iter()
            .any(|e| e == "deployments → replicasets create"),
        "{hello:?}"
    );
    assert!(
        hello.iter().any(|e| e == "replicasets → pods create"),
        "{hello:?}"
    );
    assert!(
        !hello.iter().any(|e| e.contains("jobs")
            || e.contains("statefulsets")
            || e.contains("persistentvolume")),
        "{hello:?}"
    );
    let (code, _, err) = analyze(&["--selector", "app=nothere"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--selector"), "{err}");
}

/// An object deleted and created again under its name (Deployment shop/web
/// and ConfigMap shop/settings, each twice) has two lives: the second
/// life's cascade starts at its own create, never at the first life's
/// writes; nothing is a uid conflict, and the healthy run raises nothing.
#[tokio::test]
async fn an_object_created_again_under_its_name_starts_a_cascade_of_its_own() {
    let changes = common::changes_of_lines(lines("recreate-same-name"), CLUSTER).await;
    let of = |resource: &str, verb: &str| -> Vec<&kascade::test_support::flow::ChangeRecord> {
        changes
            .iter()
            .filter(|c| {
                c.object.resource == resource
                    && c.verb == verb
                    && c.code < 300
                    && c.subresource.is_empty()
            })
            .collect()
    };
    let creates = of("deployments", "create");
    assert_eq!(creates.len(), 2, "the run creates shop/web twice");
    assert_ne!(creates[0].uid, creates[1].uid);
    let second = creates[1];
    // The second life's ReplicaSet and Pods are of the second create's cascade.
    let replicasets = of("replicasets", "create");
    let later_rs: Vec<_> = replicasets
        .iter()
        .filter(|c| c.received > second.received)
        .collect();
    assert!(!later_rs.is_empty());
    for rs in &later_rs {
        let cause = rs.cause.as_ref().expect("caused by the Deployment");
        assert_eq!(cause.span, second.span, "{}", cause.name);
        assert_eq!(rs.root, second.span);
    }
    let later_pods: Vec<_> = of("pods", "create")
        .into_iter()
        .filter(|c| c.received > second.received)
        .collect();
    assert_eq!(later_pods.len(), 2);
    for pod in later_pods {
        assert_eq!(pod.root, second.span, "{}", pod.object);
    }
    // No change of the second life points back to the first.
    let first_life_end = of("deployments", "delete")[0].received;
    let by_span: std::collections::HashMap<_, _> = changes.iter().map(|c| (c.span, c)).collect();
    for c in changes.iter().filter(|c| c.received > second.received) {
        if let Some(cause) = c.cause.as_ref().and_then(|k| by_span.get(&k.span))
            && c.object.namespace == "shop"
            && cause.object.namespace == "shop"
        {
            assert!(
                cause.received > first_life_end || cause.object.resource == "namespaces",
                "{} caused by the first life's {}",
                kascade::test_support::analysis::cascade::change_name(c),
                kascade::test_support::analysis::cascade::change_name(cause)
            );
        }
    }
    let r = tokio::task::spawn_blocking(|| explain_run("recreate-same-name"))
        .await
        .unwrap();
    assert!(r.inputs.notes.is_empty(), "{:?}", r.inputs.notes);
    assert_eq!(
        (r.totals.error, r.totals.warning),
        (0, 0),
        "{:?}",
        r.findings.first().map(|f| &f.headline)
    );
}

/// The ReplicaSet controller creates Pods in batches, each once the one
/// before was answered: when a webhook holds the first create ~800 ms, the
/// second Pod is late because of it, not because the controller reacted
/// slowly. Its hop counts from the first create's answer, and the critical
/// path passes through the slow create — offline and in the UI's cascade
/// mode. Writes of one pass (the kubelet's, the scheduler's) and a
/// controller's later passes over one object follow no sibling.
#[tokio::test]
async fn a_create_sent_once_the_slow_create_before_was_answered_follows_it() {
    use kascade::test_support::analysis::cascade::{build, change_name};
    let changes = common::changes_of_lines(lines("slow-webhook"), CLUSTER).await;
    let cascades = build(changes);
    let c = cascades
        .iter()
        .find(|c| change_name(c.root()) == "kascade-e2e-admin create deployments slow-demo/web")
        .expect("the slow Deployment's cascade");
    let creates: Vec<usize> = (0..c.changes.len())
        .filter(|&i| c.changes[i].verb == "create" && c.changes[i].object.resource == "pods")
        .filter(|&i| c.changes[i].subresource.is_empty())
        .collect();
    assert_eq!(creates.len(), 2, "two Pods");
    let (first, second) = (creates[0], creates[1]);
    assert_eq!(c.after_sibling[first], None);
    assert_eq!(c.after_sibling[second], Some(first));
    let gap = c.changes[second]
        .received
        .duration_since(c.changes[first].completed)
        .unwrap();
    assert!(gap < Duration::from_millis(50), "{gap:?}");
    let from_cause = c.changes[second].cause.as_ref().unwrap().hop;
    assert!(from_cause > Duration::from_millis(700), "{from_cause:?}");
    assert!(
        c.is_critical(first) && c.is_critical(second),
        "the critical path {:?} passes through both creates",
        c.critical_path
    );
    // Nothing else in the whole cluster's log follows a sibling but Pod
    // creates of one writer and cause.
    for c in &cascades {
        for (i, after) in c.after_sibling.iter().enumerate() {
            if let Some(j) = after {
                let (a, b) = (&c.changes[i], &c.changes[*j]);
                assert_eq!((a.verb.as_str(), b.verb.as_str()), ("create", "create"));
                assert_eq!(a.user, b.user);
                assert_eq!(
                    a.cause.as_ref().unwrap().span,
                    b.cause.as_ref().unwrap().span
                );
                assert!(b.completed <= a.received);
            }
        }
    }

    // The UI's cascade mode: the second create's hop is the short one, the
    // first create is starred.
    let (f, range) = frontend("slow-webhook").await;
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("deployments", "slow-demo", "web"),
    )
    .await;
    let spans = spans(&t);
    let pod_creates: Vec<&Span> = spans
        .iter()
        .filter(|s| string_attr(s, "resource") == Some("pods") && s.name.contains(" create pods "))
        .collect();
    assert_eq!(
        pod_creates.len(),
        2,
        "{:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    for s in &pod_creates {
        assert!(s.name.starts_with(CRITICAL_MARK), "{}", s.name);
    }
    let after: Vec<&&Span> = pod_creates
        .iter()
        .filter(|s| string_attr(s, "cascade.after").is_some())
        .collect();
    assert_eq!(after.len(), 1);
    let hop_us = common::int_attr(after[0], "cascade.hop_us").unwrap();
    assert!(hop_us < 50_000, "{hop_us}");
    assert!(common::int_attr(after[0], "cascade.cause_hop_us").unwrap() > 700_000);
}

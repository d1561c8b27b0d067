//! Cloud exports, analyze's completion, Jobs' retries, lease timers.

use super::*;

/// Managed clusters' audit logs as their providers export them — EKS's
/// CloudWatch Logs export to S3 (`<time> <event>`), CloudWatch events as
/// read back (the event under `message`), AKS's diagnostic records (the
/// event under `properties.log`) — give the report the native log gives;
/// GKE's Cloud Audit Logs entries (mapped from `protoPayload`) the same
/// findings.
/// The exports are converted here from the corpus's native logs by
/// `e2e/tools/cloud-audit-formats.py`, following each provider's
/// documented schema (no cloud account is used).
#[test]
fn cloud_exports_of_a_log_are_explained_as_the_log_itself() {
    let dir = tempfile::tempdir().unwrap();
    // The run's log as `format` exports it, by the converter.
    let exported = |run: &str, format: &str| {
        let out = dir.path().join(format!("{run}-{format}.log"));
        let status = std::process::Command::new("python3")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/tools/cloud-audit-formats.py"))
            .args([
                format.as_ref(),
                corpus_log(run).as_os_str(),
                out.as_os_str(),
            ])
            .status()
            .unwrap();
        assert!(status.success(), "{format}");
        out
    };
    for run in ["quota-exceeded", "rolling-update"] {
        let native = explain_run(run);
        for format in ["eks-s3", "eks-events", "aks-storage"] {
            let r = explain_file(exported(run, format));
            assert_eq!(
                r.inputs.malformed, 0,
                "{run} {format}: {:?}",
                r.inputs.malformed_examples
            );
            assert_eq!(
                r.inputs.events_in_scope, native.inputs.events_in_scope,
                "{run} {format}"
            );
            assert_eq!(r.totals, native.totals, "{run} {format}");
            assert_eq!(r.findings, native.findings, "{run} {format}");
        }
        // GKE keeps one time per request (its end): the same findings, told
        // with the times the entries keep.
        let r = explain_file(exported(run, "gke"));
        let gist = |r: &Report| -> Vec<(Severity, String, bool)> {
            r.findings
                .iter()
                .map(|f| (f.severity, f.title.clone(), f.background))
                .collect()
        };
        assert_eq!(
            r.inputs.malformed, 0,
            "{run} gke: {:?}",
            r.inputs.malformed_examples
        );
        assert_eq!(
            r.inputs.events_in_scope, native.inputs.events_in_scope,
            "{run} gke"
        );
        assert_eq!(r.totals, native.totals, "{run} gke");
        assert_eq!(gist(&r), gist(&native), "{run} gke");
    }
}

/// analyze judges a cascade done as explain and `trace` do: an object a
/// cascade waits for that a later cascade removes (a finalizer a second
/// actor took away, a Job its TTL deleted and the garbage collector then
/// released, Pods a scale-down removed mid-rollout) has settled. No healthy
/// run has a cascade analyze calls incomplete; a blocked finalizer still is.
#[test]
fn no_healthy_run_has_a_cascade_analyze_calls_incomplete() {
    let incomplete = |run: &str| -> Vec<String> {
        analyze_json(run)["completions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["incomplete"].as_u64() != Some(0))
            .map(|c| format!("{} {}", c["kind"], c["verb"]))
            .collect()
    };
    let healthy = healthy_runs();
    assert!(healthy.len() >= 13, "{healthy:?}");
    for run in &healthy {
        assert_eq!(incomplete(run), Vec::<String>::new(), "{run}");
    }
    assert!(
        incomplete("finalizer-blocked").contains(&"\"deployments\" \"delete\"".to_string()),
        "{:?}",
        incomplete("finalizer-blocked")
    );
}

/// A Job's next Pod is made because one of its Pods finished, not because
/// the Job changed seconds before: with 3 completions 2 at a time, the
/// third Pod's cause is a finished sibling and its hop the Job
/// controller's reaction (under 1.5 s), not the 2 s since the Job's create.
/// The Pod made after one failed is the controller's next attempt: a retry
/// after its back-off (about 10 s), no hop in analyze's table. The
/// ttl-after-finished delete is a timer's and the garbage collector's
/// release of the deleted Job belongs to that delete.
#[tokio::test]
async fn a_jobs_next_pod_follows_the_pod_that_finished_and_one_after_a_failure_is_a_retry() {
    let changes = common::changes_of_lines(lines("job-complete"), CLUSTER).await;
    let creates: Vec<&kascade::test_support::flow::ChangeRecord> = changes
        .iter()
        .filter(|c| {
            c.object.resource == "pods"
                && c.verb == "create"
                && c.subresource.is_empty()
                && c.code < 400
        })
        .collect();
    assert_eq!(creates.len(), 3);
    let third = creates.iter().max_by_key(|c| c.received).unwrap();
    let cause = third.cause.as_ref().expect("the third Pod has a cause");
    assert_eq!(cause.object.resource, "pods", "{cause:?}");
    assert_ne!(cause.object, third.object);
    assert!(cause.name.contains("patch status"), "{cause:?}");
    assert!(cause.hop < Duration::from_millis(1500), "{cause:?}");
    // The tracking finalizer's removal follows the Pod's finish too.
    for c in changes
        .iter()
        .filter(|c| c.object.resource == "pods" && c.verb == "patch" && c.subresource.is_empty())
    {
        let cause = c.cause.as_ref().expect("a cause");
        assert_eq!(cause.object, c.object, "{cause:?}");
        assert!(cause.hop < Duration::from_millis(1500), "{cause:?}");
    }

    let failed = analyze_json("job-backoff-limit");
    assert_eq!(failed["retries"].as_u64(), Some(1), "{failed}");
    for e in failed["edges"].as_array().unwrap() {
        assert!(
            e["max_us"].as_u64().unwrap() < 5_000_000 || e["edge"] == "persistentvolumes status",
            "a back-off counted as a hop: {e}"
        );
    }

    let ttl = common::changes_of_lines(lines("timers"), CLUSTER).await;
    let delete = ttl
        .iter()
        .find(|c| c.object.resource == "jobs" && c.verb == "delete")
        .expect("the TTL's delete");
    assert_eq!(delete.timer.as_deref(), Some("finished-job-ttl"));
    let release = ttl
        .iter()
        .find(|c| {
            c.object.resource == "jobs"
                && c.verb == "patch"
                && c.user.ends_with(":generic-garbage-collector")
        })
        .expect("the garbage collector's release of the Job");
    assert_eq!(release.root, delete.span, "{release:?}");
}

/// Lease renewals (kwok's node heartbeats, the apiserver's identity Lease:
/// the `timers` run's policy logs them) are a clock's writes: with Leases
/// kept (`--exclude-resources` without `leases`), each renewal is a root
/// named by its timer, never an effect of the change logged before it.
#[tokio::test]
async fn lease_renewals_kept_are_timers_not_effects_of_the_change_before() {
    let sink = Arc::new(common::Collect::default());
    let filter = kascade::test_support::source::audit::AuditFilter {
        exclude_resources: Default::default(),
        ..Default::default()
    };
    let errors = kascade::test_support::offline::changes_from_audit_lines(
        lines("timers"),
        CLUSTER,
        Arc::new(kascade::app::RuleSources::default().load().unwrap()),
        &filter,
        kascade::test_support::aggregate::ProcessorConfig::default(),
        kascade::test_support::aggregate::redact::Redactor::new(None),
        sink.clone(),
    )
    .await;
    assert!(errors.is_empty(), "{errors:?}");
    let renewals: Vec<_> = sink
        .take()
        .into_iter()
        .filter(|c| c.object.resource == "leases" && c.verb == "update" && c.code < 400)
        .collect();
    assert!(renewals.len() >= 9, "{}", renewals.len());
    for r in &renewals {
        assert_eq!(r.timer.as_deref(), Some("lease-renewal"), "{r:?}");
        assert!(r.cause.is_none(), "{r:?}");
        assert_eq!(r.root, r.span, "{r:?}");
    }
}

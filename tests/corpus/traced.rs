//! Traced runs (`runs/RUN.traced`: each write's kube-apiserver trace kept
//! beside the log, `apiserver-traces.jsonl.gz`): what the apiserver's own
//! spans make explain say on a whole cluster, start-up included — the
//! webhook that made writes slow, named against how long the log's writes
//! usually take, and nothing slow on a healthy cluster.

use super::*;

fn of_kinds<'a>(
    r: &'a Report,
    kinds: &[FindingKind],
) -> Vec<&'a kascade::test_support::analysis::explain::Finding> {
    r.findings
        .iter()
        .filter(|f| kinds.contains(&f.kind))
        .collect()
}

/// How many writes the report says were traced (its note).
fn traced_writes(r: &Report) -> u64 {
    let note = r
        .inputs
        .notes
        .iter()
        .find(|n| n.starts_with("kube-apiserver's traces: "))
        .expect("a traced run's report says how many writes were traced");
    note.trim_start_matches("kube-apiserver's traces: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"))
}

#[test]
fn a_slow_webhook_is_named_against_the_logs_usual_write_time_and_nothing_else_is_slow() {
    let r = explain_run("slow-webhook");
    let slow = of_kinds(&r, &[FindingKind::SlowWrite]);
    assert_eq!(slow.len(), 1, "{:#?}", slow);
    let f = slow[0];
    assert_eq!(f.severity, Severity::Info);
    assert!(
        f.title
            .starts_with("slow write: validating webhook slow-policy.example.com: "),
        "{}",
        f.title
    );
    // Both Pod creates of slow-demo/web waited for it: one finding, on one
    // Pod, the other listed beside it.
    assert_eq!(
        (f.object.namespace.as_str(), f.object.resource.as_str()),
        ("slow-demo", "pods")
    );
    assert_eq!((f.count, f.also_total), (2, 1), "{f:#?}");
    let summary = &f.evidence[0].summary;
    assert!(
        summary.contains("create writes in this log usually take"),
        "the usual time it is slow against: {summary}"
    );
    let failed_open = of_kinds(&r, &[FindingKind::WebhookFailedOpen]);
    assert!(
        !failed_open.is_empty()
            && failed_open.iter().all(|f| f
                .title
                .starts_with("validating webhook failing-policy.example.com failed open")),
        "{failed_open:#?}"
    );
    // The rollout beside it (default/hello) passed neither webhook.
    for f in of_kinds(
        &r,
        &[FindingKind::SlowWrite, FindingKind::WebhookFailedOpen],
    ) {
        assert_eq!(f.object.namespace, "slow-demo", "{}", f.headline);
    }
    assert!(traced_writes(&r) >= 300);
}

#[test]
fn a_healthy_traced_cluster_has_no_slow_write_and_no_webhook_finding() {
    let r = explain_run("traced-healthy");
    // Its traces were read: hundreds of writes traced (the start-up's
    // before the exporter connected are not).
    assert!(traced_writes(&r) >= 300);
    let judged = of_kinds(
        &r,
        &[FindingKind::SlowWrite, FindingKind::WebhookFailedOpen],
    );
    assert!(judged.is_empty(), "{judged:#?}");
}

/// Explain of a run's audit log alone, without its apiserver traces.
fn explain_log_only(run: &str) -> Report {
    explain_files(corpus_logs(run))
}

#[test]
fn the_audit_logs_own_annotations_name_the_slow_webhooks_and_the_one_failing_open_without_traces() {
    let r = explain_log_only("slow-webhook");
    let slow = of_kinds(&r, &[FindingKind::SlowWrite]);
    assert_eq!(slow.len(), 1, "{slow:#?}");
    // The annotations time every validating webhook together, and name
    // none: the layer is named, not the webhook.
    assert!(
        slow[0]
            .title
            .starts_with("slow write: validating webhooks: 8"),
        "{}",
        slow[0].title
    );
    assert_eq!((slow[0].count, slow[0].also_total), (2, 1));
    assert!(
        slow[0].evidence[0]
            .detail
            .starts_with("the audit event's latency annotations: "),
        "{}",
        slow[0].evidence[0].detail
    );
    let open = of_kinds(&r, &[FindingKind::WebhookFailedOpen]);
    assert_eq!(open.len(), 1, "{open:#?}");
    assert!(
        open[0]
            .title
            .starts_with("validating webhook failing-policy.example.com failed open"),
        "{}",
        open[0].title
    );
    for f in slow.iter().chain(&open) {
        assert_eq!(f.object.namespace, "slow-demo", "{}", f.headline);
    }
    // Healthy clusters: no annotation says anything, in any healthy run.
    for run in healthy_runs() {
        let r = explain_log_only(&run);
        let judged = of_kinds(
            &r,
            &[FindingKind::SlowWrite, FindingKind::WebhookFailedOpen],
        );
        assert!(
            run == "slow-webhook" || judged.is_empty(),
            "{run}: {judged:#?}"
        );
    }
}

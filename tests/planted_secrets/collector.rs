//! Secrets planted in audited and watched objects, and quoted by Events,
//! never leave the collector's pipeline.

use super::*;

#[tokio::test]
async fn planted_secrets_in_audit_objects_never_leave_the_process() {
    let mut all = Vec::new();
    let mut p = Planter::default();
    for scenario in SCENARIOS {
        let spans = run_audit(planted_audit_lines(scenario, &mut p), config()).await;
        assert_nothing_leaks(scenario, &spans, &p);
        all.extend(spans);
        let lines = planted_audit_lines(scenario, &mut p);
        let spans = run_audit(lines, config_all_states_cold()).await;
        assert_nothing_leaks(&format!("{scenario} (states cold)"), &spans, &p);
    }
    // The planted values reached snapshots, diffs of env values (also of
    // lists labelled by index) and of the copies in annotations.
    // Events quoting a credential of the object they are about: shown,
    // with the credential's marker.
    assert!(p.quoting_events > 0, "no Event quotes a planted credential");
    assert!(
        exported_text(&all).contains("(quoting <redacted:"),
        "no Event quoting a credential was shown"
    );
    let snapshots = event_values(&all, "snapshot");
    assert!(snapshots.iter().any(|s| s.contains(VISIBLE)));
    // The last-applied copy is kept as JSON, its credentials redacted.
    let applied: Vec<Value> = snapshots
        .iter()
        .filter_map(|s| serde_json::from_str::<Value>(s).ok())
        .filter_map(|o| {
            o["metadata"]["annotations"][LAST_APPLIED]
                .as_str()
                .map(str::to_string)
        })
        .filter_map(|a| serde_json::from_str(&a).ok())
        .collect();
    assert!(
        applied.iter().any(|a| {
            let text = a.to_string();
            text.contains(VISIBLE) && text.contains("<redacted:")
        }),
        "the last-applied copies are kept, redacted: {applied:?}"
    );
    let paths = event_values(&all, "diff.path");
    assert!(
        paths
            .iter()
            .any(|p| p.contains("].env[") && p.ends_with("].value"))
    );
    assert!(paths.iter().any(|p| p.contains(LAST_APPLIED)));
    let diff_values = event_values(&all, "diff.new");
    assert!(diff_values.iter().any(|v| v.contains(VISIBLE)));
}

#[tokio::test]
async fn planted_secrets_in_watched_objects_never_leave_the_process() {
    let mut p = Planter::default();
    for scenario in SCENARIOS {
        // Watch only (a Metadata-level audit policy): watch spans show it all.
        let watch = planted_watch(scenario, &mut p);
        let spans = run_watch_then_audit(watch, Vec::new(), config()).await;
        assert_nothing_leaks(&format!("{scenario} (watch)"), &spans, &p);
        // Watch first, then the audit events, whose spans take the watch's diffs.
        let watch = planted_watch(scenario, &mut p);
        let audit = planted_audit_lines(scenario, &mut p);
        let spans = run_watch_then_audit(watch, audit, config()).await;
        assert_nothing_leaks(&format!("{scenario} (watch, then audit)"), &spans, &p);
        // Audit only, each write processed without a response parsed ahead.
        let audit = planted_audit_lines(scenario, &mut p);
        let spans = run_watch_then_audit(Vec::new(), audit, config_all_states_cold()).await;
        assert_nothing_leaks(&format!("{scenario} (audit, states cold)"), &spans, &p);
    }
}

/// `kascade explain`'s reports (text, Markdown, JSON, HTML) of the
/// scenarios with markers planted: its findings quote messages, triggers
/// quote what a write changed and fights quote field values, all from the
/// redacted objects.
/// The Event watch: the Events the Event list served (the fixture's
/// `events.json`) about objects the list-watch delivered, each quoting a
/// credential planted in the object it is about.
#[tokio::test]
async fn planted_secrets_quoted_by_watched_events_never_leave_the_process() {
    let mut p = Planter::default();
    let mut shown = String::new();
    for scenario in SCENARIOS {
        let Ok(text) = std::fs::read_to_string(common::fixture_path(scenario, "events.json"))
        else {
            continue;
        };
        let metrics = Arc::new(Metrics::default());
        let (tx, mut rx) = tokio::sync::mpsc::channel(1 << 20);
        let processor = Processor::new(
            config(),
            redactor(),
            Arc::new(RuleSources::default().load().unwrap()),
            Arc::new(LocalSpanCache::new(1 << 16, Duration::from_secs(3600 * 48))),
            tx,
            metrics.clone(),
        );
        for change in planted_watch(scenario, &mut p) {
            processor.process_watch(change).await.unwrap();
        }
        let list: Value = serde_json::from_str(&text).unwrap();
        for mut item in list["items"].as_array().cloned().unwrap_or_default() {
            item["apiVersion"] = "v1".into();
            item["kind"] = "Event".into();
            p.plant(&mut item);
            let Some(event) = kascade::test_support::flow::K8sEvent::from_object(&item) else {
                continue;
            };
            let meta = &item["metadata"];
            let own = ObjectRef::new(
                "fixture",
                "",
                "events",
                meta["namespace"].as_str().unwrap_or(""),
                meta["name"].as_str().unwrap().to_string(),
            );
            let uid = meta["uid"].as_str().unwrap_or("").to_string();
            let at = std::time::SystemTime::now();
            processor
                .process_k8s_event(&own, &uid, event, at)
                .await
                .unwrap();
        }
        processor.flush_watch(true).await.unwrap();
        drop(processor);
        let mut spans = Vec::new();
        while let Some(s) = rx.recv().await {
            spans.push(s.decode());
        }
        assert_nothing_leaks(&format!("{scenario} (Event watch)"), &spans, &p);
        shown.push_str(&exported_text(&spans));
        assert_eq!(
            metrics.event_messages_scrubbed.get() as usize > 0,
            shown.contains("(quoting <redacted:")
        );
    }
    assert!(p.quoting_events > 0, "no Event quotes a planted credential");
    assert!(
        shown.contains("(quoting <redacted:"),
        "no Event quoting a credential was shown"
    );
}

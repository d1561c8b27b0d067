//! Readable traces: where they start, folded repeats, order-independence.

use super::*;

#[tokio::test]
async fn a_statefulsets_trace_starts_at_its_create_not_at_the_volumes_set_up() {
    // The harness created the PersistentVolumes at cluster start, seconds
    // before the StatefulSet whose claims bind them: their creates are
    // hidden (counted in a note), their binding to the claims shown.
    let run = "statefulset-volumes";
    let created = write_time(run, "create", "statefulsets", "vol-demo", "data");
    let (f, range) = frontend(run).await;
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        let t = search(&f, range, mode, ("statefulsets", "vol-demo", "data")).await;
        let (start, _) = t.span_range.unwrap();
        assert!(
            start >= created,
            "{mode:?}: the trace starts {} ms before the StatefulSet's create",
            (created - start) / 1_000_000
        );
        if mode == Mode::Timeline {
            // No object spans: every entry flat under the root.
            continue;
        }
        let all = spans(&t);
        let pv = all
            .iter()
            .find(|s| s.name == "pv-0" && string_attr(s, "relation") == Some("pv"))
            .unwrap_or_else(|| panic!("{mode:?}: no pv-0"));
        assert!(
            pv.attributes.iter().any(|a| a.key == "note"
                && format!("{:?}", a.value).contains("outside this trace's time range")),
            "{mode:?}: {pv:?}"
        );
    }
    // A volume searched for is the trace's own: its set-up is shown, and
    // it still climbs to its claim and the claim's StatefulSet.
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        let t = search_with(
            &f,
            range,
            mode,
            TreeScope::Full,
            &[("resource", "persistentvolumes"), ("name", "pv-0")],
        )
        .await;
        let (start, _) = t.span_range.unwrap();
        assert!(
            start < created - 1_000_000_000,
            "{mode:?}: the volume's create is not shown"
        );
        let all = spans(&t);
        assert!(
            all.iter()
                .any(|s| s.name.starts_with("vol-demo/data ▸ persistentvolumes pv-0")),
            "{mode:?}: {:#?}",
            all.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        // Timeline mode has no object spans, its root names the climb.
        assert!(
            mode == Mode::Timeline || all.iter().any(|s| s.name == "vol-demo/data-data-0"),
            "{mode:?}: no claim"
        );
    }
}

#[tokio::test]
async fn a_repeated_event_after_the_last_write_is_folded_and_does_not_stretch_the_trace() {
    // The claim names a StorageClass that does not exist: the volume
    // binder says so at once and again 13 s later, long after the last
    // write (the Pod's scheduling status). The second says nothing new.
    let run = "pvc-pending";
    let (f, range) = frontend(run).await;
    let last_write = write_time(run, "create", "pods", "pvc-demo", "db");
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        for object in [
            ("persistentvolumeclaims", "pvc-demo", "data"),
            ("pods", "pvc-demo", "db"),
        ] {
            let t = search(&f, range, mode, object).await;
            let (_, end) = t.span_range.unwrap();
            assert!(
                end < last_write + 1_000_000_000,
                "{mode:?} {object:?}: the trace ends {} ms after the last write",
                (end - last_write) / 1_000_000
            );
            let rows = rows(&t);
            let failed: Vec<_> = rows
                .iter()
                .filter(|(n, _, _)| n.contains("ProvisioningFailed"))
                .collect();
            assert_eq!(failed.len(), 1, "{mode:?} {object:?}: {failed:#?}");
            let tag = |k: &str| {
                failed[0]
                    .2
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(tag("repeated.times").as_deref(), Some("1"), "{mode:?}");
            assert_eq!(tag("repeated.count").as_deref(), Some("2"), "{mode:?}");
            assert!(
                tag("repeated").is_some_and(|v| v.starts_with("1 more time until 20")),
                "{mode:?}: {failed:?}"
            );
            // Still the cause, in error.
            assert!(
                tag("error.message").is_some_and(|m| m.contains("no-such-class")),
                "{mode:?} {object:?}: {failed:?}"
            );
        }
    }
    // Cascades show writes, not Events: nothing to fold, nothing to note.
    let t = search(
        &f,
        range,
        Mode::Cascade,
        ("persistentvolumeclaims", "pvc-demo", "data"),
    )
    .await;
    assert!(
        rows(&t)
            .iter()
            .all(|(n, _, tags)| !n.contains("ProvisioningFailed")
                && tags.iter().all(|(_, v)| !v.contains("folded"))),
        "{:#?}",
        rows(&t)
    );
    // `kascade trace --format json` gives the repeats on the Event.
    let out = common::succeeded(
        common::kascade()
            .arg("trace")
            .arg(corpus_log(run))
            .args(["--cluster", CLUSTER, "--resource", "persistentvolumeclaims"])
            .args([
                "--namespace",
                "pvc-demo",
                "--name",
                "data",
                "--format",
                "json",
            ]),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claim = json["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "data")
        .unwrap();
    let failed = &claim["events"][0];
    assert_eq!(failed["reason"], "ProvisioningFailed", "{claim:#}");
    assert_eq!(failed["repeated_times"], 1, "{failed:#}");
    assert_eq!(failed["repeated_count"], 2, "{failed:#}");
    assert!(failed["repeated_until"].as_str().is_some(), "{failed:#}");
    // `kascade trace` says it in one line.
    let t = search(
        &f,
        range,
        Mode::Tree,
        ("persistentvolumeclaims", "pvc-demo", "data"),
    )
    .await;
    let text = kascade::test_support::frontend::text::render_text(&t.assembly, &Default::default());
    assert!(
        text.contains("repeated 1 more time until +13.") && text.contains("(count 2)"),
        "{text}"
    );
}

#[tokio::test]
async fn an_event_new_after_the_last_write_is_shown() {
    // The kubelet's first BackOff comes a millisecond after the last write
    // of the Deployment's tree: something new, shown in every mode.
    let (f, range) = frontend("image-pull-error").await;
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        let t = search(&f, range, mode, ("deployments", "shop", "api")).await;
        let backoffs = rows(&t)
            .into_iter()
            .filter(|(n, _, _)| n.ends_with("BackOff"))
            .count();
        assert!(backoffs >= 2, "{mode:?}: {backoffs}");
    }
}

#[tokio::test]
async fn a_trace_is_the_same_whatever_order_its_raw_spans_come_in() {
    use kascade::test_support::frontend::raw::RawStore as _;
    for (run, object) in [
        ("statefulset-volumes", ("statefulsets", "vol-demo", "data")),
        ("rolling-update", ("deployments", "catalog", "catalog")),
        ("crash-loop", ("deployments", "payments", "worker")),
        ("service-endpoints", ("services", "svc-demo", "web")),
        ("pvc-pending", ("pods", "pvc-demo", "db")),
        ("quota-exceeded", ("deployments", "quota-demo", "capped")),
        ("controller-fight", ("deployments", "fight-demo", "web")),
        ("config-roller", ("configmaps", "roller", "app-config")),
    ] {
        let store = common::raw_store_of_lines(lines(run), CLUSTER).await;
        let (a, b) = store.time_span().unwrap();
        let range = TimeRange::new(from_nanos(a), from_nanos(b));
        let everything = TimeRange::new(from_nanos(0), from_nanos(u64::MAX / 2));
        let mut all = Vec::new();
        for id in store.find(&[], everything, usize::MAX).await.unwrap() {
            all.extend(store.get(id).await.unwrap());
        }
        all.reverse();
        let reversed = MemoryStore::new(all);
        let f = Frontend::new(Arc::new(store), FrontendConfig::default());
        let g = Frontend::new(Arc::new(reversed), FrontendConfig::default());
        for mode in MODES {
            let once = spans(&*search(&f, range, mode, object).await);
            let again = spans(&*search(&g, range, mode, object).await);
            let names = |s: &[Span]| s.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
            assert_eq!(names(&once), names(&again), "{run} {mode:?}");
            assert!(
                once == again,
                "{run} {mode:?}: same spans, not the same content"
            );
        }
    }
}

#[tokio::test]
async fn ten_minutes_of_a_repeated_warning_are_one_row_and_a_new_one_after_them_is_shown() {
    // pvc-pending's claim, still without its StorageClass ten minutes on:
    // the volume binder says so every minute, nothing is written.
    let run = "pvc-pending";
    let event = "data.18ee63218c447888";
    let last_write = write_time(run, "create", "pods", "pvc-demo", "db");
    let claim = ("persistentvolumeclaims", "pvc-demo", "data");
    for then in [
        None,
        Some((
            "FailedBinding",
            "no persistent volumes available for this claim",
        )),
    ] {
        let store = common::raw_store_of_lines(with_repeats(run, event, 10, then), CLUSTER).await;
        let (a, b) = store.time_span().unwrap();
        let range = TimeRange::new(from_nanos(a), from_nanos(b));
        let f = Frontend::new(Arc::new(store), FrontendConfig::default());
        for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
            let t = search(&f, range, mode, claim).await;
            let rows = rows(&t);
            let failed: Vec<&Row> = rows
                .iter()
                .filter(|(n, _, _)| n.contains("ProvisioningFailed"))
                .collect();
            assert_eq!(failed.len(), 1, "{mode:?} {then:?}: {failed:#?}");
            let tag = |k: &str| {
                let tags = &failed[0].2;
                tags.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(tag("repeated.times").as_deref(), Some("11"), "{mode:?}");
            assert_eq!(tag("repeated.count").as_deref(), Some("12"), "{mode:?}");
            let new = rows
                .iter()
                .filter(|(n, _, _)| n.contains("FailedBinding"))
                .count();
            let (_, end) = t.span_range.unwrap();
            match then {
                None => assert!(
                    end < last_write + 1_000_000_000,
                    "{mode:?}: the trace ends {} s after the last write",
                    (end - last_write) / 1_000_000_000
                ),
                Some(_) => {
                    assert_eq!(new, 1, "{mode:?}: the new Warning is not shown");
                    assert!(end > last_write + 600_000_000_000, "{mode:?}");
                }
            }
        }
    }
}

/// The quota run's ReplicaSet controller tries its refused Pod create 13
/// times over 10 s: the cascade shows the first attempts, the first retry
/// and the last, and one span for the attempts between with their
/// back-offs; `siblings=all` shows every attempt. A short run (one retry of
/// a status update after a conflict) is shown whole.
#[tokio::test]
async fn a_long_run_of_retries_is_folded_to_its_first_and_last_attempts() {
    let (f, range) = frontend("quota-exceeded").await;
    let searched = [
        ("resource", "deployments"),
        ("namespace", "quota-demo"),
        ("name", "capped"),
    ];
    let cascade = |all_siblings: bool| {
        let f = &f;
        async move {
            let t = search_siblings(
                f,
                range,
                Mode::Cascade,
                TreeScope::Full,
                &searched,
                all_siblings,
            )
            .await;
            spans(&t)
        }
    };
    let refused = |all: &[Span]| {
        all.iter()
            .filter(|s| common::int_attr(s, "audit.code") == Some(403))
            .count()
    };
    let folded = cascade(false).await;
    let fold: Vec<&Span> = folded
        .iter()
        .filter(|s| s.name.contains(" more attempts of create pods (retries "))
        .collect();
    assert_eq!(
        fold.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["9 more attempts of create pods (retries 3–11)"]
    );
    assert_eq!(common::int_attr(fold[0], "writes.failed"), Some(9));
    assert!(string_attr(fold[0], "cascade.backoff.max").is_some());
    assert!(string_attr(fold[0], "cascade.hop.max").is_none());
    assert_eq!(fold[0].events.len(), 9, "one log per attempt folded");
    // Each log says which attempt it was; the note counts no writes the
    // attempts did not cause.
    let attempts: Vec<i64> = fold[0]
        .events
        .iter()
        .filter_map(|e| {
            e.attributes
                .iter()
                .find(|a| a.key == "cascade.attempt")
                .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                    opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(v) => {
                        Some(*v)
                    }
                    _ => None,
                })
        })
        .collect();
    assert_eq!(attempts, (3..=11).collect::<Vec<i64>>());
    let note = string_attr(fold[0], "note").unwrap_or_default();
    assert!(
        note.starts_with("retries 3–11 of this create pods") && !note.contains("0 writes"),
        "{note}"
    );
    // Two first attempts, the first retry and the last are shown.
    assert_eq!(refused(&folded), 4);
    assert!(
        folded.iter().any(|s| s.name.contains("retry 12: ")),
        "the last attempt is shown"
    );
    let whole = cascade(true).await;
    assert_eq!(refused(&whole), 13);
    assert!(!whole.iter().any(|s| s.name.contains(" more attempts of ")));
    // The Deployment controller's status update retried once after a
    // conflict: shown as it is.
    assert!(
        folded.iter().any(|s| s
            .name
            .contains("retry 2: deployment-controller update status")),
        "{:#?}",
        folded.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    // `kascade trace --mode cascade` folds the same attempts.
    let text = |max_siblings: &str| {
        let out = common::succeeded(
            common::kascade()
                .args(["trace", "--resource", "deploy", "--namespace", "quota-demo"])
                .args(["--name", "capped", "--mode", "cascade"])
                .args(["--max-siblings", max_siblings])
                .arg(corpus_log("quota-exceeded")),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused_lines = |t: &str| t.lines().filter(|l| l.contains(") 403  [")).count();
    let short = text("50");
    assert_eq!(refused_lines(&short), 4, "{short}");
    assert!(
        short.contains("… 9 more attempts of create pods  (not shown: retries 3–11)"),
        "{short}"
    );
    let all = text("0");
    assert_eq!(refused_lines(&all), 13, "{all}");
    assert!(!all.contains("more attempts"), "{all}");
}

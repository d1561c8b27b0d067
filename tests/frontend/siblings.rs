//! Wide levels summarised beyond `max_siblings`.

use super::*;

/// Beyond `max_siblings` Pods under one ReplicaSet, the slowest to get
/// ready are shown and one span stands for the rest, naming each in its logs; the
/// tag `siblings=all` shows every Pod, also when its trace is reloaded by
/// id on a replica without the cache.
#[tokio::test]
async fn a_wide_level_is_summarised_beyond_max_siblings() {
    const MAX: usize = 20;
    let lines = common::deployment_with_pods(120);
    let expected = pods_by_replicaset(&lines);
    let ready_after = ready_after_by_pod(&lines);
    let s = Arc::new(store_of_lines(lines).await);
    let config = FrontendConfig {
        max_siblings: MAX,
        ..FrontendConfig::default()
    };
    let f = Frontend::new(s.clone(), config.clone());
    let search = |all_siblings| SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings,
        tags: tags(&[("resource", "deployments"), ("name", "hello")]),
        range: whole_range(&s),
        limit: 1,
    };
    let all = f.search(&search(true)).await.unwrap().remove(0);
    let summarised = f.search(&search(false)).await.unwrap().remove(0);
    assert_ne!(all.id, summarised.id);

    let spans_of =
        |t: &AssembledTrace| all_spans(t).into_iter().map(|(_, s)| s).collect::<Vec<_>>();
    let (all_spans_, summary_spans) = (spans_of(&all), spans_of(&summarised));
    let duration = |s: &Span| s.end_time_unix_nano - s.start_time_unix_nano;
    let mut wide = 0;
    for (rs, pods) in &expected {
        let label = |name: &str| format!("default/{name}");
        let rs_span = |spans: &[Span]| {
            spans
                .iter()
                .find(|s| s.name == label(rs))
                .unwrap_or_else(|| panic!("{rs} is shown"))
                .span_id
                .clone()
        };
        let children = |spans: &[Span]| -> Vec<Span> {
            let id = rs_span(spans);
            spans
                .iter()
                .filter(|s| s.parent_span_id == id)
                .cloned()
                .collect()
        };
        // Every Pod of the ReplicaSet under it when all are asked for.
        let names: BTreeSet<String> = children(&all_spans_)
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let want: BTreeSet<String> = pods.iter().map(|p| label(p)).collect();
        assert_eq!(names, want, "{rs}: every Pod with siblings=all");
        if pods.len() <= MAX {
            let shown = children(&summary_spans);
            assert_eq!(
                shown.len(),
                pods.len(),
                "{rs}: a narrow level is shown whole"
            );
            continue;
        }
        wide += 1;
        let under = children(&summary_spans);
        let (summary, shown): (Vec<Span>, Vec<Span>) = under
            .into_iter()
            .partition(|s| s.name.ends_with(" more pods"));
        assert_eq!(summary.len(), 1, "{rs}: one summary span");
        let summary = &summary[0];
        assert_eq!(shown.len(), MAX, "{rs}: {MAX} Pods shown");
        let not_shown = pods.len() - MAX;
        assert_eq!(summary.name, format!("{not_shown} more pods"));
        assert_eq!(
            int_attr(summary, "objects.not_shown"),
            Some(not_shown as i64)
        );
        assert_eq!(int_attr(summary, "objects.shown"), Some(MAX as i64));
        // Its logs name exactly the Pods not shown.
        let logged: BTreeSet<String> = summary.events.iter().map(|e| e.name.clone()).collect();
        let shown_names: BTreeSet<String> = shown.iter().map(|s| s.name.clone()).collect();
        assert_eq!(logged.len(), not_shown);
        assert!(logged.is_disjoint(&shown_names));
        assert_eq!(&logged | &shown_names, want, "{rs}");
        // The shown ones are the slowest to get ready (from the audit log),
        // and among those as slow the longest-lived (from the full trace).
        let rank = |name: &String| {
            let ready = ready_after[name.strip_prefix("default/").unwrap()];
            let lived = all_spans_
                .iter()
                .find(|s| &s.name == name)
                .map(duration)
                .unwrap();
            (ready, lived)
        };
        let last_shown = shown_names.iter().map(rank).min().unwrap();
        let first_hidden = logged.iter().map(rank).max().unwrap();
        assert!(
            last_shown >= first_hidden,
            "{last_shown:?} < {first_hidden:?}"
        );
        // Each log says how long its Pod took to get ready.
        for e in &summary.events {
            let want = ready_after[e.name.strip_prefix("default/").unwrap()];
            assert_eq!(
                string_attr(&e.attributes, "ready_after"),
                Some(
                    kascade::test_support::analysis::cascade::format_duration(
                        Duration::from_nanos(want)
                    )
                    .as_str()
                ),
                "{}",
                e.name
            );
        }
        // Within its parent, as Jaeger expects.
        let parent = summary_spans
            .iter()
            .find(|s| s.span_id == summary.parent_span_id)
            .unwrap();
        assert!(
            summary.start_time_unix_nano >= parent.start_time_unix_nano
                && summary.end_time_unix_nano <= parent.end_time_unix_nano
        );
    }
    assert!(wide >= 1, "the copied Pods make one ReplicaSet wide");
    assert!(summary_spans.len() < all_spans_.len() / 2);

    // The choice travels in the id: a replica without the cache rebuilds both.
    common::assert_rebuilt_alike(&Frontend::new(s.clone(), config), &[&all, &summarised]).await;
}

/// With one Pod shown per ReplicaSet, it is the one that took longest to
/// get ready, not the longest-lived: in the rollout's old ReplicaSet the
/// Pod deleted last is not the one that was slowest to get ready.
#[tokio::test]
async fn a_summarised_level_shows_the_slowest_to_get_ready() {
    let lines = common::audit_lines("deployment");
    let by_rs = pods_by_replicaset(&lines);
    let ready_after = ready_after_by_pod(&lines);
    // From a Pod's first write's request to its last write's end.
    let mut span_of: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in &lines {
        let ev: Value = serde_json::from_str(line).unwrap();
        let name = ev["responseObject"]["metadata"]["name"]
            .as_str()
            .or(ev["objectRef"]["name"].as_str());
        if ev["stage"] != "ResponseComplete" || ev["objectRef"]["resource"] != "pods" {
            continue;
        }
        let Some(name) = name else { continue };
        let done = kascade::test_support::frontend::raw::nanos(
            humantime::parse_rfc3339(ev["stageTimestamp"].as_str().unwrap()).unwrap(),
        );
        let e = span_of
            .entry(name.to_string())
            .or_insert((received_ns(&ev), done));
        *e = (e.0.min(received_ns(&ev)), e.1.max(done));
    }
    let lived: BTreeMap<String, u64> = span_of.into_iter().map(|(n, (a, b))| (n, b - a)).collect();
    let s = Arc::new(store_of_lines(lines).await);
    let f = showing_siblings(&s, 1);
    let mut differs = false;
    for (rs, pods) in &by_rs {
        // The ReplicaSet searched for is shown (one of the Deployment's two
        // would be summarised); its Pods are the level looked at.
        let trace = f
            .search(&SearchQuery {
                mode: Mode::Tracing,
                scope: Scope::Full,
                all_siblings: false,
                tags: tags(&[("resource", "replicasets"), ("name", rs)]),
                range: whole_range(&s),
                limit: 1,
            })
            .await
            .unwrap()
            .remove(0);
        let spans: Vec<Span> = all_spans(&trace).into_iter().map(|(_, s)| s).collect();
        let rs_id = &spans
            .iter()
            .find(|s| s.name == format!("default/{rs}"))
            .unwrap_or_else(|| panic!("{rs} is shown"))
            .span_id;
        let shown: Vec<&str> = spans
            .iter()
            .filter(|s| &s.parent_span_id == rs_id && !s.name.ends_with(" more pods"))
            .map(|s| s.name.strip_prefix("default/").unwrap())
            .collect();
        let slowest = pods.iter().max_by_key(|p| ready_after[p.as_str()]).unwrap();
        assert_eq!(shown, [slowest.as_str()], "{rs}: {ready_after:?}");
        let longest_lived = pods.iter().max_by_key(|p| lived[p.as_str()]).unwrap();
        differs |= longest_lived != slowest;
    }
    assert!(
        differs,
        "in some ReplicaSet the slowest to get ready is not the longest-lived"
    );
}

/// What is shown of a wide level is first the path to the searched object,
/// then what failed: with one ReplicaSet shown per Deployment, the stuck
/// rollout's failing one is shown when the Deployment is searched, and the
/// running one when its Pod is, the failing one then summarised in error.
#[tokio::test]
async fn a_summarised_level_shows_the_searched_path_then_the_failed() {
    let lines = common::audit_lines("rollout-stuck");
    let by_rs = pods_by_replicaset(&lines);
    let s = Arc::new(store_of_lines(lines).await);
    let f = showing_siblings(&s, 1);
    let range = whole_range(&s);
    // The ReplicaSet of the Pod that never got a node (in error), and the
    // running one.
    let (stuck, running): (Vec<_>, Vec<_>) = by_rs.iter().partition(|(_, pods)| pods.len() == 1);
    let (stuck_rs, stuck_pods) = stuck[0];
    let (running_rs, running_pods) = running[0];

    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "web")],
    )
    .await;
    let errors = spans_in_error(&t);
    let pending = stuck_pods.first().unwrap();
    assert!(
        errors.contains_key(&format!("replicasets rollout-demo/{stuck_rs}")),
        "{errors:?}"
    );
    assert!(
        errors.contains_key(&format!("pods rollout-demo/{pending}")),
        "{errors:?}"
    );
    let names: Vec<String> = all_spans(&t).into_iter().map(|(_, s)| s.name).collect();
    assert!(
        names.contains(&"1 more replicasets".to_string()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains(running_rs.as_str())),
        "{names:?}"
    );

    let pod = running_pods.first().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "pods"), ("name", pod)],
    )
    .await;
    let spans = all_spans(&t);
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with(&format!("rollout-demo/{running_rs}"))),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains(stuck_rs.as_str())),
        "{names:?}"
    );
    let errors = spans_in_error(&t);
    assert!(
        errors
            .get("replicasets 1 more replicasets")
            .is_some_and(|m| m.contains("failed")),
        "{errors:?}"
    );

    // One tree in every mode: the ReplicaSet not shown has more Pods than
    // shown siblings, and neither they nor a summary of them are left
    // without a parent.
    for mode in [Mode::Tracing, Mode::Tree, Mode::Timeline, Mode::Grouped] {
        let t = search_one(
            &f,
            range,
            mode,
            Scope::Full,
            &[("resource", "deployments"), ("name", "web")],
        )
        .await;
        let spans = all_spans(&t);
        let ids: BTreeSet<&Vec<u8>> = spans.iter().map(|(_, s)| &s.span_id).collect();
        let roots: Vec<&str> = spans
            .iter()
            .filter(|(_, s)| s.parent_span_id.is_empty())
            .map(|(_, s)| s.name.as_str())
            .collect();
        assert_eq!(roots.len(), 1, "{mode:?}: roots {roots:?}");
        for (_, s) in &spans {
            assert!(
                s.parent_span_id.is_empty() || ids.contains(&s.parent_span_id),
                "{mode:?}: {} has no parent in the trace",
                s.name
            );
        }
        assert!(
            !spans
                .iter()
                .any(|(_, s)| s.name.contains(running_rs.as_str())),
            "{mode:?}: the running ReplicaSet's Pods are not shown"
        );
    }
}

//! Wide cascade levels summarised, failures kept in sight.

use super::*;

/// Beyond `max_siblings` writes of one verb on one resource caused by one
/// write, display mode `cascade` shows the critical path and the latest to
/// settle with what they caused, and one span per level names the rest:
/// every write of the whole trace is shown as it is there, named in a
/// summary's logs, or counted there as caused by one of those; a Pod
/// searched for has its writes shown; the choice travels in the trace id.
#[tokio::test]
async fn display_mode_cascade_summarises_a_wide_level() {
    const MAX: usize = 20;
    let store =
        Arc::new(common::raw_store_of_lines(common::deployment_with_pods(120), CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(from_nanos(a), from_nanos(b));
    let config = FrontendConfig {
        max_siblings: MAX,
        ..FrontendConfig::default()
    };
    let f = Frontend::new(store.clone(), config.clone());
    let query = |tags: &[(&str, &str)], all_siblings| SearchQuery {
        mode: Mode::Cascade,
        scope: Scope::Full,
        all_siblings,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        range,
        limit: 1,
    };
    let deployment = [
        ("resource", "deployments"),
        ("namespace", "default"),
        ("name", "hello"),
    ];
    let whole = f.search(&query(&deployment, true)).await.unwrap().remove(0);
    assert_eq!(f.metrics().summarised.get(), 0, "all shown");
    let part = f
        .search(&query(&deployment, false))
        .await
        .unwrap()
        .remove(0);
    assert_ne!(whole.id, part.id);
    let whole_spans: Vec<Span> = spans(&whole).into_iter().map(|(_, s)| s).collect();
    let part_spans: Vec<Span> = spans(&part).into_iter().map(|(_, s)| s).collect();
    let by_id: HashMap<&[u8], &Span> = whole_spans
        .iter()
        .map(|s| (s.span_id.as_slice(), s))
        .collect();
    let (summaries, shown): (Vec<&Span>, Vec<&Span>) = part_spans
        .iter()
        .partition(|s| int_attr(s, "writes.not_shown").is_some());
    assert!(
        !summaries.is_empty(),
        "the 120 Pod creates are a wide level"
    );

    // What is shown is shown as in the whole trace; nothing lacks a parent.
    let part_ids: std::collections::HashSet<&[u8]> =
        part_spans.iter().map(|s| s.span_id.as_slice()).collect();
    for s in &shown {
        let w = by_id
            .get(s.span_id.as_slice())
            .unwrap_or_else(|| panic!("{} is a write of the whole trace", s.name));
        assert_eq!(
            (
                &s.name,
                &s.parent_span_id,
                s.start_time_unix_nano,
                s.end_time_unix_nano
            ),
            (
                &w.name,
                &w.parent_span_id,
                w.start_time_unix_nano,
                w.end_time_unix_nano
            )
        );
    }
    for s in &part_spans {
        assert!(
            s.parent_span_id.is_empty() || part_ids.contains(s.parent_span_id.as_slice()),
            "{} has no parent in the trace",
            s.name
        );
    }
    // The critical path is shown whole.
    for s in whole_spans
        .iter()
        .filter(|s| s.name.starts_with(CRITICAL_MARK))
    {
        assert!(
            part_ids.contains(s.span_id.as_slice()),
            "{} is shown",
            s.name
        );
    }
    // At most MAX shown per level.
    let mut per_level: HashMap<_, usize> = HashMap::new();
    for s in &shown {
        *per_level.entry(level_of(s)).or_default() += 1;
    }
    assert!(per_level.values().all(|&n| n <= MAX), "{per_level:?}");

    // Each summary names exactly its level's writes not shown, counts what
    // they caused, and lies within its parent.
    let below = |root: &Span| {
        let mut n = 0;
        let mut stack = vec![root.span_id.clone()];
        while let Some(id) = stack.pop() {
            for c in whole_spans.iter().filter(|c| c.parent_span_id == id) {
                n += 1;
                stack.push(c.span_id.clone());
            }
        }
        n
    };
    let mut accounted = shown.len();
    for sum in &summaries {
        let level: Vec<&Span> = whole_spans
            .iter()
            .filter(|s| level_of(s) == level_of(sum))
            .collect();
        let (level_shown, level_hidden): (Vec<&Span>, Vec<&Span>) = level
            .iter()
            .partition(|s| part_ids.contains(s.span_id.as_slice()));
        assert_eq!(level_shown.len(), MAX, "{}", sum.name);
        let hidden_names: std::collections::BTreeSet<&str> =
            level_hidden.iter().map(|s| s.name.as_str()).collect();
        let logged: std::collections::BTreeSet<&str> =
            sum.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(logged, hidden_names, "{}", sum.name);
        assert_eq!(sum.events.len(), level_hidden.len());
        let (verb, resource) = (&level_of(sum).2, &level_of(sum).1);
        assert_eq!(
            sum.name,
            format!("{} more {verb} {resource}", level_hidden.len())
        );
        assert_eq!(
            int_attr(sum, "writes.not_shown"),
            Some(level_hidden.len() as i64)
        );
        assert_eq!(int_attr(sum, "writes.shown"), Some(MAX as i64));
        let caused: usize = level_hidden.iter().map(|s| below(s)).sum();
        assert_eq!(int_attr(sum, "writes.below_not_shown"), Some(caused as i64));
        accounted += level_hidden.len() + caused;
        // The latest to settle are shown (besides the critical path).
        let earliest_shown = level_shown
            .iter()
            .map(|s| s.end_time_unix_nano)
            .min()
            .unwrap();
        let latest_hidden = level_hidden
            .iter()
            .map(|s| s.end_time_unix_nano)
            .max()
            .unwrap();
        assert!(earliest_shown >= latest_hidden, "{}", sum.name);
        let parent = by_id[sum.parent_span_id.as_slice()];
        assert!(
            sum.start_time_unix_nano >= parent.start_time_unix_nano
                && sum.end_time_unix_nano <= parent.end_time_unix_nano,
            "{} within its parent",
            sum.name
        );
    }
    assert_eq!(accounted, whole_spans.len(), "every write accounted for");
    let not_shown: i64 = summaries
        .iter()
        .filter_map(|s| int_attr(s, "writes.not_shown"))
        .sum();
    assert_eq!(f.metrics().summarised.get(), not_shown as u64);
    assert!(part_spans.len() < whole_spans.len() / 2);

    // A Pod whose create the Deployment's trace summarised: searched for,
    // its writes are shown.
    let hidden_create = summaries
        .iter()
        .flat_map(|s| &s.events)
        .map(|e| e.name.as_str())
        .find(|n| n.contains(" create pods default/"))
        .expect("a Pod create not shown");
    let pod = hidden_create.rsplit('/').next().unwrap();
    let t = f
        .search(&query(
            &[
                ("resource", "pods"),
                ("namespace", "default"),
                ("name", pod),
            ],
            false,
        ))
        .await
        .unwrap()
        .remove(0);
    let names: Vec<String> = spans(&t).into_iter().map(|(_, s)| s.name).collect();
    assert!(
        names
            .iter()
            .any(|n| n.trim_start_matches(CRITICAL_MARK) == hidden_create),
        "{hidden_create} among {names:?}"
    );

    // Reloaded by id on a replica without the cache: the same either way.
    common::assert_rebuilt_alike(&Frontend::new(store.clone(), config), &[&whole, &part]).await;
}

/// A summarised level's failures stay in sight: the quota scenario's
/// refused Pod creates beyond the one shown make the summary span an error,
/// counted, each named in a log with the apiserver's refusal.
#[tokio::test]
async fn a_summarised_cascade_level_keeps_its_failures_in_sight() {
    let store = Arc::new(common::raw_store_of_lines(common::audit_lines("quota"), CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let f = Frontend::new(
        store.clone(),
        FrontendConfig {
            max_siblings: 1,
            ..FrontendConfig::default()
        },
    );
    let t = f
        .search(&SearchQuery {
            mode: Mode::Cascade,
            scope: Scope::Full,
            all_siblings: false,
            tags: [
                ("resource", "deployments"),
                ("namespace", "quota-demo"),
                ("name", "capped"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            range: TimeRange::new(from_nanos(a), from_nanos(b)),
            limit: 1,
        })
        .await
        .unwrap()
        .remove(0);
    let all = spans(&t);
    // Refused creates are named by what they tried to create (Pods, by
    // their generateName), at the level of the ReplicaSet's other Pod
    // creates: the one shown is the accepted create on the critical path.
    let refused: Vec<&Span> = all
        .iter()
        .map(|(_, s)| s)
        .filter(|s| int_attr(s, attr::AUDIT_CODE) == Some(403))
        .collect();
    assert!(refused.is_empty(), "the refused creates are summarised");
    let shown = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| {
            s.name.contains("create pods quota-demo/capped-")
                && int_attr(s, attr::AUDIT_CODE) == Some(201)
        })
        .expect("the accepted Pod create shown");
    let summary = all
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.parent_span_id == shown.parent_span_id && s.name.ends_with(" more create pods"))
        .expect("the refused creates summarised");
    let failed = int_attr(summary, "writes.failed").unwrap();
    assert_eq!(failed, int_attr(summary, "writes.not_shown").unwrap());
    assert!(failed >= 2, "{failed}");
    assert_eq!(summary.status.as_ref().map(|s| s.code), Some(2), "in error");
    for e in &summary.events {
        let error = string_attr(&e.attributes, "error").unwrap_or_default();
        assert!(error.contains("exceeded quota"), "{}: {error:?}", e.name);
    }
}

/// A rollout whose writes lie in more object windows than
/// `--raw-search-limit` still shows every write on its own Pods: those are
/// taken from the assembled tree, only other objects' windows come from the
/// capped raw search, and a note says that cap was reached.
#[tokio::test]
async fn a_cascade_wider_than_the_raw_search_limit_shows_every_write_of_its_tree() {
    const PODS: usize = 120;
    let lines = common::deployment_with_pods(PODS);
    // The Pods the apiserver created, read from the audit log itself.
    let created: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            let created = v["stage"] == "ResponseComplete"
                && v["verb"] == "create"
                && v["objectRef"]["resource"] == "pods"
                && v["objectRef"].get("subresource").is_none()
                && v["responseStatus"]["code"] == 201;
            created.then(|| {
                v["responseObject"]["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
            })?
        })
        .collect();
    assert!(created.len() > PODS, "{}", created.len());
    let store = Arc::new(common::raw_store_of_lines(lines, CLUSTER).await);
    let (a, b) = store.time_span().unwrap();
    let range = TimeRange::new(from_nanos(a), from_nanos(b));
    let query = SearchQuery {
        mode: Mode::Cascade,
        scope: Scope::Full,
        all_siblings: true,
        tags: [
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        range,
        limit: 1,
    };
    let capped = Frontend::new(
        store.clone(),
        FrontendConfig {
            raw_search_limit: 30,
            ..FrontendConfig::default()
        },
    );
    let trace = capped.search(&query).await.unwrap().remove(0);
    let all = spans(&trace);
    let pod_creates: std::collections::BTreeSet<String> = all
        .iter()
        .filter_map(|(_, s)| {
            let (_, name) = s.name.split_once(" create pods default/")?;
            Some(name.to_string())
        })
        .collect();
    assert_eq!(pod_creates, created);
    let notes: Vec<&str> = all
        .iter()
        .flat_map(|(_, s)| s.attributes.iter())
        .filter_map(|kv| string_attr(std::slice::from_ref(kv), "note"))
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("more than 30 object windows (--raw-search-limit)")),
        "{notes:?}"
    );
    // The same writes as with a search limit above the cascade's width.
    let uncapped = Frontend::new(
        store.clone(),
        FrontendConfig {
            raw_search_limit: 10 * PODS,
            ..FrontendConfig::default()
        },
    );
    let names = |t: &AssembledTrace| {
        let mut v: Vec<(Vec<u8>, String)> = spans(t)
            .into_iter()
            .map(|(_, s)| (s.span_id, s.name))
            .collect();
        v.sort();
        v
    };
    let whole = uncapped.search(&query).await.unwrap().remove(0);
    assert_eq!(names(&trace), names(&whole));
}

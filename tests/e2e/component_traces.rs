//! Kubernetes' own traces joined to the writes (e2e/scenarios/slow-webhook.sh).

use super::*;

/// The spans of one assembled trace with their services.
fn assembled_spans(
    t: &kascade::test_support::frontend::AssembledTrace,
) -> Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)> {
    use kascade::test_support::frontend::raw::string_attr;
    t.resource_spans
        .iter()
        .flat_map(|rs| {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| string_attr(&r.attributes, "service.name"))
                .unwrap_or_default()
                .to_string();
            rs.scope_spans
                .iter()
                .flat_map(|ss| ss.spans.clone())
                .map(move |s| (service.clone(), s))
        })
        .collect()
}

/// The audit IDs a span shows: its own write's, or those of the writes it logs.
fn audit_ids_of(s: &opentelemetry_proto::tonic::trace::v1::Span) -> Vec<String> {
    use kascade::test_support::frontend::raw::string_attr;
    let own = string_attr(&s.attributes, "audit.id").map(str::to_string);
    let logged = s
        .events
        .iter()
        .filter_map(|e| string_attr(&e.attributes, "audit.id").map(str::to_string));
    own.into_iter().chain(logged).collect()
}

#[tokio::test]
#[ignore = "needs the e2e environment (e2e/suite.sh)"]
async fn each_traced_write_shows_its_apiserver_spans_and_the_slow_webhook_inside_the_creates() {
    use kascade::test_support::frontend::components::{APISERVER_SERVICE, AUDIT_ID_TAG};
    use kascade::test_support::frontend::raw::{JaegerHttp, RawStore, TimeRange, string_attr};
    use kascade::test_support::frontend::{Frontend, FrontendConfig, SearchQuery};
    let cluster = env("CLUSTER_NAME");
    // The scenario's Pod creates in kascade's raw spans: every one arrived.
    let pods = search(
        serde_json::json!({"cluster": cluster, "resource": "pods", "namespace": "slow-demo"}),
        |t| t.len() >= 2,
    )
    .await;
    assert!(pods.len() >= 2);
    let store = JaegerHttp::new(&env("JAEGER_QUERY_URL"), "kascade", Duration::from_secs(30));
    let now = std::time::SystemTime::now();
    let range = TimeRange::new(now - Duration::from_secs(7200), now);
    let query = |mode| SearchQuery {
        mode,
        scope: kascade::test_support::frontend::assemble::Scope::Full,
        all_siblings: true,
        tags: vec![
            ("cluster".into(), cluster.clone()),
            ("resource".into(), "deployments".into()),
            ("namespace".into(), "slow-demo".into()),
            ("name".into(), "web".into()),
        ],
        range,
        limit: 1,
    };
    let frontend = Frontend::new(std::sync::Arc::new(store), FrontendConfig::default());
    for mode in kascade::test_support::frontend::display::Mode::ALL {
        // The apiserver's exporter batches every 5 s: poll until every write
        // shown is joined (traced = joined is checked below, once stable).
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        let (t, shown, joined) = loop {
            let found = frontend.search(&query(mode)).await.unwrap();
            assert_eq!(found.len(), 1, "{mode:?}: one trace for deployment web");
            let t = found[0].clone();
            let spans = assembled_spans(&t);
            let shown: BTreeSet<String> = spans
                .iter()
                .filter(|(svc, _)| svc != APISERVER_SERVICE)
                .flat_map(|(_, s)| audit_ids_of(s))
                .collect();
            let joined: BTreeSet<String> = spans
                .iter()
                .filter(|(svc, _)| svc == APISERVER_SERVICE)
                .filter_map(|(_, s)| string_attr(&s.attributes, AUDIT_ID_TAG).map(str::to_string))
                .collect();
            if joined == shown || std::time::Instant::now() > deadline {
                break (t, shown, joined);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        // Traced requests counted in the raw store, one search per write shown.
        let mut traced = BTreeSet::new();
        let raw = JaegerHttp::new(&env("JAEGER_QUERY_URL"), "kascade", Duration::from_secs(30));
        for id in &shown {
            let tags = vec![(AUDIT_ID_TAG.to_string(), id.clone())];
            if !raw
                .find_component(APISERVER_SERVICE, &tags, range, 2)
                .await
                .unwrap()
                .is_empty()
            {
                traced.insert(id.clone());
            }
        }
        assert!(
            !traced.is_empty(),
            "{mode:?}: the apiserver traced none of the writes"
        );
        assert_eq!(
            joined, traced,
            "{mode:?}: traced requests = joined requests"
        );
        // None under the wrong write: each request's root hangs under the
        // span that shows its audit ID.
        let spans = assembled_spans(&t);
        let by_id: HashMap<Vec<u8>, &opentelemetry_proto::tonic::trace::v1::Span> =
            spans.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
        for (svc, s) in &spans {
            if svc != APISERVER_SERVICE || s.links.is_empty() {
                continue;
            }
            let parent = by_id
                .get(&s.parent_span_id)
                .expect("a joined root has its parent in the trace");
            // The request's audit ID is on one of its spans (its root may be
            // the apiserver's `authentication` span).
            let mut ids = BTreeSet::new();
            let mut below = vec![s.span_id.clone()];
            while let Some(id) = below.pop() {
                for (sv, x) in &spans {
                    if sv == APISERVER_SERVICE && x.parent_span_id == id {
                        below.push(x.span_id.clone());
                    }
                }
                if let Some(a) = by_id
                    .get(&id)
                    .and_then(|x| string_attr(&x.attributes, AUDIT_ID_TAG))
                {
                    ids.insert(a.to_string());
                }
            }
            assert!(
                audit_ids_of(parent).iter().any(|a| ids.contains(a)),
                "{mode:?}: {} ({ids:?}) hangs under {}, which shows another write",
                s.name,
                parent.name
            );
        }
        if mode == kascade::test_support::frontend::display::Mode::Tree {
            // Each Pod create holds the slow webhook's call: ≥ its 800 ms
            // delay (the webhook sleeps; no claim on this machine's speed),
            // and named as what took the request's time.
            let calls: Vec<_> = spans
                .iter()
                .filter(|(_, s)| {
                    string_attr(&s.attributes, "webhook") == Some("slow-policy.example.com")
                })
                .collect();
            assert!(
                calls.len() >= 2,
                "the slow webhook's calls: {}",
                calls.len()
            );
            for (_, call) in calls {
                assert!(call.end_time_unix_nano - call.start_time_unix_nano >= 800_000_000);
                // Up its parents to the span that shows the write: a Pod create.
                let mut at = call;
                while let Some(p) = by_id.get(&at.parent_span_id) {
                    at = p;
                    if !audit_ids_of(at).is_empty() {
                        break;
                    }
                }
                assert!(
                    at.name.contains("create") && !audit_ids_of(at).is_empty(),
                    "the webhook's call sits under {:?}, not a Pod create",
                    at.name
                );
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs the e2e environment (e2e/suite.sh)"]
async fn the_frontends_explain_names_the_slow_webhook_from_the_stored_apiserver_traces() {
    let kind_title = |r: &Value, kind: &str| -> Vec<String> {
        r["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["kind"] == kind)
            .filter_map(|f| f["title"].as_str().map(str::to_string))
            .collect()
    };
    // The apiserver's exporter batches every 5 s: until both are judged.
    let r = super::explain::explain_namespace("slow-demo", |r| {
        !kind_title(r, "slow_write").is_empty() && !kind_title(r, "webhook_failed_open").is_empty()
    })
    .await;
    let slow = kind_title(&r, "slow_write");
    assert_eq!(slow.len(), 1, "both Pod creates, one finding: {slow:?}");
    assert!(
        slow[0].starts_with("slow write: validating webhook slow-policy.example.com: "),
        "{slow:?}"
    );
    assert!(
        kind_title(&r, "webhook_failed_open")
            .iter()
            .all(|t| t.starts_with("validating webhook failing-policy.example.com failed open")),
        "{r}"
    );
    // A healthy namespace of the same run, traced too: nothing slow.
    let healthy = super::explain::explain_namespace("default", |r| {
        r["inputs"]["notes"].as_array().is_some_and(|n| {
            n.iter().any(|n| {
                n.as_str()
                    .is_some_and(|n| n.starts_with("kube-apiserver's traces: "))
            })
        })
    })
    .await;
    assert!(kind_title(&healthy, "slow_write").is_empty(), "{healthy}");
    assert!(
        kind_title(&healthy, "webhook_failed_open").is_empty(),
        "{healthy}"
    );
}

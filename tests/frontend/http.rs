//! The UI's search form, the redirect, unreachable storage, secrets, and
//! the HTTP side's bounds.

use super::*;

#[test]
fn ui_search_form_maps_to_mode_cluster_tags_and_scope() {
    let q = parse_query(
        Some(TraceQueryParameters {
            service_name: "timeline".into(),
            operation_name: "prod".into(),
            attributes: vec![
                kv("resource", "pods"),
                kv("group", "core"),
                kv("scope", "ancestors"),
            ],
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap();
    assert_eq!(q.mode, Mode::Timeline);
    assert_eq!(q.scope, Scope::Ancestors);
    assert!(!q.all_siblings, "wide levels are summarised unless asked");
    assert!(q.tags.contains(&("cluster".into(), "prod".into())));
    assert!(q.tags.contains(&("group".into(), String::new())));

    let err = parse_query(
        Some(TraceQueryParameters {
            attributes: vec![kv("http.status_code", "200")],
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("http.status_code"),
        "{}",
        err.message()
    );

    let err = parse_query(
        Some(TraceQueryParameters {
            service_name: "flamegraph".into(),
            ..Default::default()
        }),
        Scope::Full,
    )
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("flamegraph"));

    let siblings = |value: &str| {
        parse_query(
            Some(TraceQueryParameters {
                attributes: vec![kv("resource", "pods"), kv("siblings", value)],
                ..Default::default()
            }),
            Scope::Full,
        )
    };
    assert!(siblings("all").unwrap().all_siblings);
    assert!(!siblings("summary").unwrap().all_siblings);
    let err = siblings("some").unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("siblings") && err.message().contains("some"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn redirect_points_the_ui_at_a_trace_that_assembles() {
    let (f, range) = frontend("deployment").await;
    let app = router(Arc::new(RedirectState {
        frontend: f.clone(),
        ui_url: "http://ui.example:16686/".into(),
        default_cluster: CLUSTER.into(),
    }));
    let secs = range
        .start
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let resp = app
        .clone()
        .oneshot(
            Request::get(format!(
                "/redirect?group=apps&resource=deployments&namespace=default&name=hello&time={secs}&mode=tree"
            ))
            .body(Body::empty())
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let hex = location
        .strip_prefix("http://ui.example:16686/trace/")
        .unwrap_or_else(|| panic!("{location}"));
    let id = parse_hex_trace_id(hex).unwrap();
    let t = f
        .get(&id)
        .await
        .unwrap()
        .expect("the redirect's trace assembles");
    assert_eq!(t.assembly.nodes[0].history.object.name, "hello");

    for (query, needle) in [
        ("/redirect?resource=deployments", "name="),
        (
            "/redirect?resource=deployments&name=hello&time=yesterday",
            "time \"yesterday\"",
        ),
        (
            "/redirect?resource=deployments&name=hello&scope=up",
            "scope",
        ),
        (
            "/redirect?resource=deployments&name=hello&namespace=%00%ff",
            "holds the control character \\u{0}",
        ),
        (
            "/redirect?resource=deployments&name=hel%ffo&view=explain",
            "name: \"hel\u{fffd}o\" holds bytes that are not UTF-8",
        ),
    ] {
        let resp = app
            .clone()
            .oneshot(Request::get(query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{query}");
        let body = axum::body::to_bytes(resp.into_body(), 10_000)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(needle), "{query}: {body}");
    }
}

#[tokio::test]
async fn unreachable_raw_jaeger_is_an_error_naming_its_url() {
    // Nothing listens on port 1 of the loopback: a real refused connection.
    let store = JaegerHttp::new("http://127.0.0.1:1", "kascade", Duration::from_secs(2));
    let err = store.get([1; 16]).await.unwrap_err().to_string();
    assert!(err.contains("http://127.0.0.1:1"), "{err}");
    let f = Frontend::new(Arc::new(store), FrontendConfig::default());
    let now = std::time::SystemTime::now();
    let err = f
        .search(&SearchQuery {
            mode: Mode::Tracing,
            scope: Scope::Full,
            all_siblings: false,
            tags: tags(&[("name", "hello")]),
            range: TimeRange::new(now - Duration::from_secs(60), now),
            limit: 1,
        })
        .await
        .unwrap_err();
    assert!(matches!(err.root(), FrontendError::Raw(_)), "{err:?}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}

#[tokio::test]
async fn secret_values_never_reach_an_assembled_trace() {
    // The config scenario's Secret values (plain and as base64 in Secret data).
    let secret_values = [
        "kascade-fixture-s3cr3t-value",
        "a2FzY2FkZS1maXh0dXJlLXMzY3IzdC12YWx1ZQ==",
        "kascade-fixture-rotated-value",
        "a2FzY2FkZS1maXh0dXJlLXJvdGF0ZWQtdmFsdWU=",
    ];
    let raw = common::audit_lines("config").join("\n");
    assert!(raw.contains(secret_values[1]) && raw.contains(secret_values[3]));
    let s = Arc::new(store("config").await);
    let range = whole_range(&s);
    // Also with every level of more than one object or write summarised:
    // the summary spans name what they stand for and carry its errors.
    let mut summaries = [0; 2];
    for max_siblings in [FrontendConfig::default().max_siblings, 1] {
        let f = Frontend::new(
            s.clone(),
            FrontendConfig {
                limits: Limits::default(),
                max_siblings,
                ..FrontendConfig::default()
            },
        );
        for mode in Mode::ALL {
            let found = f
                .search(&SearchQuery {
                    mode,
                    scope: Scope::Full,
                    all_siblings: false,
                    tags: tags(&[("namespace", "config-demo")]),
                    range,
                    limit: 100,
                })
                .await
                .unwrap();
            assert!(!found.is_empty());
            for t in found {
                let json = serde_json::to_string(&t.resource_spans).unwrap();
                for v in secret_values {
                    assert!(!json.contains(v), "{v} leaked");
                }
                for (i, key) in ["objects.not_shown", "writes.not_shown"].iter().enumerate() {
                    summaries[i] += all_spans(&t)
                        .iter()
                        .filter(|(_, s)| int_attr(s, key).is_some())
                        .count();
                }
            }
        }
    }
    assert!(
        summaries.iter().all(|&n| n > 0),
        "levels of objects and of writes summarised: {summaries:?}"
    );
}

#[tokio::test]
async fn a_service_links_to_the_pods_its_selector_picks_and_its_endpointslices() {
    // Expected from the fixture: the Service's selector and the Pods' labels
    // as the apiserver returned them.
    let mut selector = serde_json::Map::new();
    let mut pods: BTreeMap<String, serde_json::Map<String, Value>> = BTreeMap::new();
    let mut slices = BTreeSet::new();
    for line in common::audit_lines("service") {
        let ev: Value = serde_json::from_str(&line).unwrap();
        let obj = &ev["responseObject"];
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match obj["kind"].as_str() {
            Some("Service") if name == "web" => {
                selector = obj["spec"]["selector"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
            }
            Some("Pod") if ns == "svc-demo" => {
                if let Some(l) = obj["metadata"]["labels"].as_object() {
                    pods.insert(name, l.clone());
                }
            }
            Some("EndpointSlice")
                if obj["metadata"]["labels"]["kubernetes.io/service-name"] == "web" =>
            {
                slices.insert(name);
            }
            _ => {}
        }
    }
    assert!(!selector.is_empty() && !slices.is_empty());
    let selected: BTreeSet<String> = pods
        .iter()
        .filter(|(_, labels)| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(selected.len() >= 2, "{selected:?}");

    let (f, range) = frontend("service").await;
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Descendants,
        &[
            ("resource", "services"),
            ("namespace", "svc-demo"),
            ("name", "web"),
        ],
    )
    .await;
    let asm = &t.assembly;
    let children = |resource: &str, class: &str| -> BTreeSet<String> {
        asm.nodes[0]
            .children
            .iter()
            .map(|&c| &asm.nodes[c])
            .filter(|n| n.history.object.resource == resource && n.class.as_deref() == Some(class))
            .map(|n| n.history.object.name.clone())
            .collect()
    };
    assert_eq!(children("pods", "selector"), selected);
    assert_eq!(children("endpointslices", "owner"), slices);

    // The Pod's side records the Service as its parent (selector).
    let pod = selected.iter().next().unwrap();
    let t = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Object,
        &[
            ("resource", "pods"),
            ("namespace", "svc-demo"),
            ("name", pod),
        ],
    )
    .await;
    assert!(
        t.assembly.nodes[0]
            .history
            .links
            .iter()
            .any(|l| l.other.resource == "services"
                && l.other.name == "web"
                && l.class == "selector")
    );
}

#[tokio::test]
async fn redirect_refuses_times_and_names_beyond_bounds_with_short_400s() {
    let (f, _) = frontend("deployment").await;
    let app = router(Arc::new(RedirectState {
        frontend: f,
        ui_url: "http://ui.example:16686".into(),
        default_cluster: CLUSTER.into(),
    }));
    // URIs stop at 64 KiB (the http crate), so values stop short of that.
    let huge = "n".repeat(60_000);
    let nines = "9".repeat(60_000);
    let base = "/redirect?resource=deployments&namespace=default";
    for (query, needle) in [
        // Panicked: Duration::from_secs_f64 overflow.
        (format!("{base}&name=hello&time=1e30"), "time \"1e30\""),
        (format!("{base}&name=hello&time=1e19"), "after 9999-12-31"),
        (format!("{base}&name=hello&time=inf"), "finite"),
        (format!("{base}&name={huge}"), "name \"nnnn"),
        (format!("{base}&name=hello&cluster={huge}"), "cluster name"),
        (
            format!(
                "/redirect?resource=pods&name=x&namespace={}",
                "s".repeat(64)
            ),
            "namespace",
        ),
        (format!("{base}&name=hello&mode={huge}"), "display mode"),
        (
            format!("{base}&name=hello&siblings={huge}"),
            "siblings: \"nnnn",
        ),
        (format!("{base}&name=hello&time={nines}"), "(60000 bytes)"),
    ] {
        let resp = app
            .clone()
            .oneshot(Request::get(&query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let short = &query[..query.len().min(120)];
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{short}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 22)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(needle), "{short}: {body}");
        assert!(body.len() < 600, "{short}: {} bytes echoed", body.len());
    }
    // `siblings=all` is carried in the trace id the UI is sent to.
    let mut locations = BTreeSet::new();
    for siblings in ["", "&siblings=summary", "&siblings=all"] {
        let query = format!("{base}&name=hello&time=1800000000{siblings}");
        let resp = app
            .clone()
            .oneshot(Request::get(&query).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::FOUND, "{query}");
        locations.insert(resp.headers()["location"].to_str().unwrap().to_string());
    }
    assert_eq!(locations.len(), 2, "{locations:?}");
}

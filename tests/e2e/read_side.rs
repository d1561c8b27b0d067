//! The read side: assembled traces through the query Jaeger, as the UI
//! asks for them.

use super::*;

fn rfc3339_micros(span: &Value, key: &str) -> i128 {
    let t = humantime::parse_rfc3339_weak(tag_str(span, key).unwrap()).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i128
}

#[tokio::test]
#[ignore]
async fn the_jaeger_ui_shows_one_assembled_trace_for_the_deployment() {
    let client = reqwest::Client::new();
    let ui = env("JAEGER_UI_URL");
    let services: Value = client
        .get(format!("{ui}/api/v3/services"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        services["services"],
        serde_json::json!(["tracing", "tree", "timeline", "grouped", "cascade"])
    );

    // Complete once the delete (the scenario's last step) is in.
    let has_delete = |traces: &[Value]| {
        traces.len() == 1
            && traces[0]["spans"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| log_names(s).iter().any(|n| n.ends_with(" delete")))
    };
    let traces = ui_search(
        "tracing",
        serde_json::json!({"resource": "deployments", "name": "hello"}),
        has_delete,
    )
    .await;
    let trace = &traces[0];
    let spans = trace["spans"].as_array().unwrap();
    let roots: Vec<&Value> = spans.iter().filter(|s| parent_of(s).is_none()).collect();
    assert_eq!(roots.len(), 1);
    let root = roots[0];
    assert_eq!(service_of(trace, root), "deployments");
    assert_eq!(root["operationName"], "default/hello");
    let uid = tag_str(root, "uid").expect("the root span shows the Deployment's uid");
    assert!(is_uid(uid), "{uid}");
    assert_eq!(tag_str(root, "k8s.deployment.uid"), Some(uid));
    let root_id = root["spanID"].as_str().unwrap();
    let replicasets: Vec<&Value> = spans
        .iter()
        .filter(|s| parent_of(s) == Some(root_id) && service_of(trace, s) == "replicasets")
        .collect();
    assert_eq!(replicasets.len(), 2, "before and after the image change");
    for rs in &replicasets {
        let rs_id = rs["spanID"].as_str().unwrap();
        let pods = spans
            .iter()
            .filter(|s| parent_of(s) == Some(rs_id) && service_of(trace, s) == "pods")
            .count();
        assert!(pods >= 2, "{} has {pods} pods", rs["operationName"]);
    }
    let logs = log_names(root);
    assert!(logs.iter().any(|n| n.ends_with(" patch scale")), "{logs:?}");
    assert!(
        logs.iter().any(|n| n == "event ScalingReplicaSet"),
        "{logs:?}"
    );
    let text = trace.to_string();
    assert!(text.contains("snapshot"), "the delete carries a snapshot");
    assert!(!text.contains("managedFields"));
    // What the raw Jaeger adds to its copies (warnings about zero-length
    // spans) is not passed on.
    assert!(!text.contains("@jaeger@"), "raw Jaeger's attributes leak");
    // The trace starts with the Deployment's own first write, not with the
    // cluster start-up activity of the Nodes and ServiceAccount it uses.
    let first_write = root["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["timestamp"].as_u64().unwrap())
        .min()
        .unwrap();
    let earliest = spans
        .iter()
        .map(|s| s["startTime"].as_u64().unwrap())
        .min()
        .unwrap();
    assert_eq!(
        earliest, first_write,
        "the trace starts before its own first write"
    );
    // Every span within its parent: Jaeger finds no clock skew to warn of.
    let warned: Vec<&Value> = spans
        .iter()
        .filter(|s| s["warnings"].as_array().is_some_and(|w| !w.is_empty()))
        .collect();
    assert!(warned.is_empty(), "Jaeger warns: {warned:?}");
    // A rollout that completed, with routine conflicts (409) on the way:
    // no object span is in error.
    let in_error: Vec<&str> = spans
        .iter()
        .filter(|s| has_error_tag(s))
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    assert!(in_error.is_empty(), "spans in error: {in_error:?}");

    // The UI reloads the trace by id later.
    let id = trace["traceID"].as_str().unwrap();
    let reloaded: Value = client
        .get(format!("{ui}/api/traces/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reloaded["data"][0]["spans"].as_array().unwrap().len(),
        spans.len()
    );

    // Operations of a mode are the clusters.
    let ops: Value = client
        .get(format!("{ui}/api/v3/operations?service=tracing"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(ops.to_string().contains(&env("CLUSTER_NAME")), "{ops}");

    // Scope ancestors from the new ReplicaSet: the Deployment with only it.
    let newest = replicasets
        .iter()
        .max_by_key(|s| s["startTime"].as_u64())
        .unwrap()["operationName"]
        .as_str()
        .unwrap()
        .trim_start_matches("default/")
        .to_string();
    let traces = ui_search(
        "tracing",
        serde_json::json!({"resource": "replicasets", "name": newest, "scope": "ancestors"}),
        |t| t.len() == 1,
    )
    .await;
    let names: BTreeSet<String> = traces[0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| is_kascade_span(&traces[0], s))
        .map(|s| s["operationName"].as_str().unwrap().to_string())
        .collect();
    // The root names the searched object: the UI titles results by it.
    assert_eq!(
        names,
        BTreeSet::from([
            format!("default/hello ▸ replicasets default/{newest}"),
            format!("default/{newest}")
        ])
    );

    // A bad tag is refused with a message naming it.
    let resp: Value = client
        .get(format!("{ui}/api/traces"))
        .query(&[
            ("service", "tracing"),
            ("tags", r#"{"kind":"Pod"}"#),
            ("lookback", "1h"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        resp["errors"].to_string().contains("\\\"kind\\\""),
        "{resp}"
    );
}

#[tokio::test]
#[ignore]
async fn the_jaeger_ui_shows_the_image_change_as_a_cascade_of_writes() {
    const PATCH: &str = " patch deployments default/hello";
    let is_patch_root =
        |s: &Value| is_cascade_root(s) && s["operationName"].as_str().unwrap().ends_with(PATCH);
    let patch_root = |traces: &[Value]| -> Option<Value> {
        if traces.len() != 1 {
            return None;
        }
        traces[0]["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| is_patch_root(s))
            .cloned()
    };
    let tags =
        serde_json::json!({"resource": "deployments", "namespace": "default", "name": "hello"});
    // Complete once the rollout's last write is in (exported asynchronously).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let traces = loop {
        let traces = ui_search("cascade", tags.clone(), |t| patch_root(t).is_some()).await;
        let root = patch_root(&traces).unwrap();
        if tag_str(&root, "cascade.complete") == Some("true") {
            break traces;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the image change's cascade is not complete: waiting for {:?}; root tags {}",
            tag_str(&root, "cascade.waiting_for"),
            root["tags"]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let trace = &traces[0];
    let spans = trace["spans"].as_array().unwrap();
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["spanID"].as_str().unwrap(), s))
        .collect();
    let root = spans.iter().find(|s| is_patch_root(s)).unwrap();
    assert_eq!(service_of(trace, root), "deployments");
    assert!(tag_str(root, "cascade.completion").is_some());
    // The writes below the patch: every hop of the rollout.
    let root_id = root["spanID"].as_str().unwrap();
    let under_root = |s: &Value| {
        let mut at = parent_of(s);
        while let Some(p) = at {
            if p == root_id {
                return true;
            }
            at = by_id.get(p).and_then(|s| parent_of(s));
        }
        false
    };
    // kascade's writes: the apiserver's spans joined inside them have no
    // cascade of their own.
    let below: Vec<&Value> = spans
        .iter()
        .filter(|s| under_root(s) && is_kascade_span(trace, s))
        .collect();
    let names: Vec<&str> = below
        .iter()
        .map(|s| s["operationName"].as_str().unwrap())
        .collect();
    for want in [
        "deployment-controller create replicasets default/hello-",
        "replicaset-controller create pods default/hello-",
        "kube-scheduler create binding pods default/hello-",
        " patch status pods default/hello-",
        "deployment-controller update replicasets default/hello-",
        "replicaset-controller delete pods default/hello-",
    ] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "no {want:?} under the patch: {names:#?}"
        );
    }
    // Each hop: the effect's request received minus its cause's response
    // completed; each span from the cause's response on.
    for s in &below {
        // A span standing for writes not shown (a wide level's, or a long
        // run of retries folded: under load the controllers' conflicts
        // retry more) is not a write: no request of its own.
        if tag(s, "writes.not_shown").is_some() {
            assert!(
                tag(s, "request.received").is_none(),
                "{}",
                s["operationName"]
            );
            continue;
        }
        let parent = by_id[parent_of(s).unwrap()];
        if tag(parent, "writes.not_shown").is_some() {
            // The attempt after a folded run of retries hangs under the
            // span standing for them.
            assert!(
                tag(s, "cascade.attempt").is_some(),
                "{}",
                s["operationName"]
            );
            continue;
        }
        let gap =
            rfc3339_micros(s, "request.received") - rfc3339_micros(parent, "response.completed");
        if tag(s, "cascade.attempt").is_some() {
            // A retry of a refused write (a conflict): no hop of its own;
            // the first attempt's, then its writer's back-off, make the gap.
            assert!(tag(s, "cascade.hop_us").is_none(), "{}", s["operationName"]);
            let hop = tag(s, "cascade.first_hop_us")
                .and_then(Value::as_i64)
                .unwrap();
            assert!(i128::from(hop) <= gap.max(0), "{}", s["operationName"]);
            assert!(tag(s, "cascade.backoff_us").is_some());
        } else if let Some(after) = tag_str(s, "cascade.after") {
            // A create of its writer's next batch: its hop counts from the
            // answer of the earlier create it waited for; the cause's gap
            // is kept beside it.
            let cause_hop = tag(s, "cascade.cause_hop_us")
                .and_then(Value::as_i64)
                .unwrap();
            assert_eq!(i128::from(cause_hop), gap.max(0), "{}", s["operationName"]);
            let hop = tag(s, "cascade.hop_us").and_then(Value::as_i64).unwrap();
            assert!(
                hop <= 50_000 && i128::from(hop) < gap,
                "{}",
                s["operationName"]
            );
            // The create it waited for, when shown (not summarised).
            if let Some(sibling) = below
                .iter()
                .find(|t| t["operationName"].as_str().unwrap().ends_with(after))
            {
                let from_sibling = rfc3339_micros(s, "request.received")
                    - rfc3339_micros(sibling, "response.completed");
                assert_eq!(i128::from(hop), from_sibling, "{}", s["operationName"]);
            }
        } else {
            let hop = tag(s, "cascade.hop_us").and_then(Value::as_i64).unwrap();
            assert_eq!(i128::from(hop), gap.max(0), "{}", s["operationName"]);
        }
        assert!(tag_str(s, "cascade.edge").is_some());
    }
    // The critical path is marked, in the name too, on the cascade the
    // trace is titled by only (the latest here: the scenario may write
    // `hello` again after the patch).
    let critical: Vec<&Value> = spans
        .iter()
        .filter(|s| tag_str(s, "cascade.critical_path") == Some("true"))
        .collect();
    assert!(
        critical
            .iter()
            .all(|s| s["operationName"].as_str().unwrap().starts_with("★ "))
    );
    let top = spans.iter().find(|s| parent_of(s).is_none()).unwrap();
    let top_name = top["operationName"].as_str().unwrap();
    let on_the_patch = critical
        .iter()
        .filter(|s| s["spanID"] == root["spanID"] || under_root(s))
        .count();
    if top_name.ends_with(PATCH) {
        assert!(on_the_patch > 0, "{top_name}");
    } else {
        assert_eq!(on_the_patch, 0, "titled by another cascade: {top_name}");
    }
    // Every span within its parent: Jaeger finds no clock skew to warn of.
    let warned: Vec<&Value> = spans
        .iter()
        .filter(|s| s["warnings"].as_array().is_some_and(|w| !w.is_empty()))
        .collect();
    assert!(warned.is_empty(), "Jaeger warns: {warned:?}");

    // Searching one of the Pods the rollout created finds the same cascade.
    let pod = names
        .iter()
        .find_map(|n| n.split("replicaset-controller create pods default/").nth(1))
        .unwrap()
        .to_string();
    let traces = ui_search(
        "cascade",
        serde_json::json!({"resource": "pods", "namespace": "default", "name": pod}),
        |t| t.len() == 1 && t[0]["spans"].as_array().unwrap().iter().any(&is_patch_root),
    )
    .await;
    assert_eq!(traces.len(), 1);
}

#[tokio::test]
#[ignore]
async fn redirect_leads_to_a_trace_the_ui_can_open() {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Wait until the Deployment's spans are searchable at all.
    ui_search(
        "tracing",
        serde_json::json!({"resource": "deployments", "name": "hello"}),
        |t| t.len() == 1,
    )
    .await;
    let resp = client
        .get(format!("{}/redirect", env("KASCADE_FRONTEND_URL")))
        .query(&[
            ("cluster", env("CLUSTER_NAME").as_str()),
            ("group", "apps"),
            ("resource", "deployments"),
            ("namespace", "default"),
            ("name", "hello"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::FOUND);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let id = location
        .rsplit_once("/trace/")
        .map(|(_, id)| id.to_string())
        .unwrap_or_else(|| panic!("{location}"));
    let trace: Value = client
        .get(format!("{}/api/traces/{id}", env("JAEGER_UI_URL")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let spans = trace["data"][0]["spans"].as_array().expect("a trace");
    assert!(spans.iter().any(|s| s["operationName"] == "default/hello"));

    // The frontend counted what it served.
    let metrics = client
        .get(format!("{}/metrics", env("KASCADE_FRONTEND_URL")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in\n{metrics}"))
    };
    assert!(value("kascade_frontend_requests_total{rpc=\"FindTraces\"}") >= 1.0);
    assert!(value("kascade_frontend_requests_total{rpc=\"GetTraces\"}") >= 1.0);
    assert!(value("kascade_frontend_traces_assembled_total") >= 1.0);
    assert!(value("kascade_frontend_raw_reads_total") >= 1.0);
    // Over the raw Jaeger's remote-storage gRPC API (the suite gives this
    // frontend --jaeger-grpc-url) a tree's raw traces are read many per
    // request; over HTTP each would be a request of its own.
    let (reads, requests) = (
        value("kascade_frontend_raw_reads_total"),
        value("kascade_frontend_raw_requests_total"),
    );
    assert!(
        requests >= 1.0 && requests < reads,
        "{requests} requests for {reads} raw traces"
    );
}

/// A search whose range starts after the object's window did (a lookback
/// of a few minutes, a custom range from the UI) still finds the object:
/// its window overlaps the range though its span started before it.
#[tokio::test]
#[ignore]
async fn a_search_range_starting_inside_an_objects_window_finds_the_object() {
    let tags =
        serde_json::json!({"resource": "deployments", "namespace": "default", "name": "hello"});
    let traces = ui_search("tracing", tags.clone(), |t| t.len() == 1).await;
    // The trace starts at the Deployment's create.
    let created = traces[0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["startTime"].as_u64())
        .min()
        .expect("spans");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    for mode in ["tracing", "cascade"] {
        let resp: Value = reqwest::Client::new()
            .get(format!("{}/api/traces", env("JAEGER_UI_URL")))
            .query(&[
                ("service", mode),
                ("tags", &tags.to_string()),
                ("start", &(created + 1_000_000).to_string()),
                ("end", &now.to_string()),
                ("limit", "20"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(resp["errors"].is_null(), "{}", resp["errors"]);
        assert_eq!(
            resp["data"].as_array().map_or(0, Vec::len),
            1,
            "{mode}: the Deployment created at {created} µs, searched from a second later"
        );
    }
}

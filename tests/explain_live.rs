//! `GET /explain` on the frontend: the same findings as `kascade explain`,
//! built from the spans the collector stored (here: the fixtures' spans in
//! the in-memory raw store; the e2e suite reads them from the real Jaeger).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use kascade::app::explain::{ExplainConfig, explain};
use kascade::test_support::analysis::explain::{Report, Scope};
use kascade::test_support::frontend::explain::ExplainQuery;
use kascade::test_support::frontend::http::{RedirectState, router};
use kascade::test_support::frontend::raw::{MemoryStore, TimeRange};
use kascade::test_support::frontend::{Frontend, FrontendConfig};
use tower::ServiceExt as _;

const CLUSTER: &str = "fixture";
const SCENARIOS: [&str; 2] = ["quota", "rollout-stuck"];

async fn frontend() -> Arc<Frontend<MemoryStore>> {
    let lines = SCENARIOS.iter().flat_map(|s| common::audit_lines(s));
    let store = common::raw_store_of_lines(lines, CLUSTER).await;
    Arc::new(Frontend::new(Arc::new(store), FrontendConfig::default()))
}

async fn offline(scenario: &str) -> Report {
    explain(&ExplainConfig {
        files: vec![common::fixture_path(scenario, "audit.log")],
        cluster: CLUSTER.into(),
        scope: Scope::default(),
        ..ExplainConfig::default()
    })
    .await
    .unwrap()
}

/// A range around both fixtures (captured on different days).
fn everything() -> TimeRange {
    TimeRange::new(
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        SystemTime::now(),
    )
}

#[tokio::test]
async fn the_stored_spans_give_the_same_first_finding_as_the_audit_log() {
    let f = frontend().await;
    for (scenario, ns) in [("quota", "quota-demo"), ("rollout-stuck", "rollout-demo")] {
        let live = f
            .explain(&ExplainQuery {
                cluster: CLUSTER.into(),
                namespace: Some(ns.into()),
                range: everything(),
            })
            .await
            .unwrap();
        let off = offline(scenario).await;
        let (a, b) = (&live.findings[0], &off.findings[0]);
        assert_eq!(a.kind, b.kind, "{scenario}");
        assert_eq!(a.object, b.object, "{scenario}");
        assert_eq!(a.title, b.title, "{scenario}");
        assert_eq!(a.severity, b.severity, "{scenario}");
        let chain = |r: &kascade::test_support::analysis::explain::Finding| -> Vec<String> {
            r.chain.iter().map(|s| s.object.display.clone()).collect()
        };
        assert_eq!(chain(a), chain(b), "{scenario}");
        assert_eq!(
            a.trigger.as_ref().map(|t| (&t.write, &t.changes)),
            b.trigger.as_ref().map(|t| (&t.write, &t.changes)),
            "{scenario}"
        );
        assert!(live.findings.iter().all(|x| x.object.namespace == ns));
    }
}

async fn get(app: axum::Router, uri: &str, accept: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::get(uri);
    if let Some(a) = accept {
        req = req.header(header::ACCEPT, a);
    }
    let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ctype = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, ctype, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn explain_answers_json_or_html_and_refuses_bad_queries() {
    let app = router(Arc::new(RedirectState {
        frontend: frontend().await,
        ui_url: "http://ui.example:16686".into(),
        default_cluster: CLUSTER.into(),
    }));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let range = format!("from=1700000000&to={now}");
    let (st, ctype, body) = get(
        app.clone(),
        &format!("/explain?namespace=quota-demo&{range}"),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["findings"][0]["kind"], "denied_write");
    assert_eq!(
        v["scope"]["description"]
            .as_str()
            .unwrap()
            .split(',')
            .next(),
        Some("namespace quota-demo")
    );
    let (st, ctype, body) = get(
        app.clone(),
        &format!("/explain?namespace=rollout-demo&{range}"),
        Some("text/html,application/xhtml+xml"),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(
        body.contains("FailedScheduling"),
        "{}",
        &body[..body.len().min(400)]
    );
    // A range with nothing in it: no findings, not an error.
    let (st, _, body) = get(
        app.clone(),
        "/explain?namespace=rollout-demo&from=0&to=10",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 0);
    for (query, says) in [
        ("/explain?from=yesterday", "from: time \"yesterday\""),
        ("/explain?from=20&to=10", "from is after to"),
        (
            "/explain?format=pdf",
            "format \"pdf\": expected json or html",
        ),
        ("/explain?cluster=a%2Fb", "cluster name \"a/b\""),
    ] {
        let (st, _, body) = get(app.clone(), query, None).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
}

#[tokio::test]
async fn a_redirect_with_view_explain_leads_to_the_namespaces_explanation() {
    let app = router(Arc::new(RedirectState {
        frontend: frontend().await,
        ui_url: "http://ui.example:16686".into(),
        default_cluster: CLUSTER.into(),
    }));
    let resp = app
        .oneshot(
            Request::get("/redirect?resource=pods&namespace=rollout-demo&name=x&time=1763910867&view=explain")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    let to = resp.headers()[header::LOCATION].to_str().unwrap();
    assert_eq!(
        to,
        "/explain?namespace=rollout-demo&from=1763907267&to=1763911167&format=html"
    );
}

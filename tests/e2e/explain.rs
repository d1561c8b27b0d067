//! Explain from the stored spans.

use super::*;

/// `GET /explain` of a namespace (JSON), polled until `ok` holds: the
/// collector exports asynchronously.
pub(super) async fn explain_namespace(namespace: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let from = (std::time::SystemTime::now() - Duration::from_secs(7200))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    loop {
        let resp = client
            .get(format!("{}/explain", env("KASCADE_FRONTEND_URL")))
            .query(&[
                ("cluster", env("CLUSTER_NAME").as_str()),
                ("namespace", namespace),
                ("from", from.as_str()),
            ])
            .send()
            .await
            .expect("the frontend answers /explain");
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        let report: Value = resp.json().await.unwrap();
        if ok(&report) {
            return report;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/explain of {namespace} never passed the check; last: {report}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore]
async fn the_frontend_explains_the_stuck_rollout_from_the_stored_spans() {
    let first_is_scheduling = |r: &Value| {
        r["findings"][0]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("FailedScheduling: ") && t.contains("didn't match"))
    };
    let report = explain_namespace("rollout-demo", first_is_scheduling).await;
    let f = &report["findings"][0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["object"]["resource"], "pods");
    assert_eq!(
        f["chain"][0]["object"]["display"],
        "deployments rollout-demo/web"
    );
    assert_eq!(
        f["trigger"]["write"],
        "kascade-e2e-admin patch deployments rollout-demo/web"
    );
    assert!(
        f["trigger"]["changes"].as_array().unwrap().iter().any(|c| c
            .as_str()
            .unwrap()
            .starts_with("+ spec.template.spec.nodeSelector")),
        "{f}"
    );
    // The quota scenario: the refusal first, on its ReplicaSet.
    let denied = |r: &Value| r["findings"][0]["kind"] == "denied_write";
    let report = explain_namespace("quota-demo", denied).await;
    let title = report["findings"][0]["title"].as_str().unwrap();
    assert!(title.contains("exceeded quota"), "{title}");
    assert_eq!(report["findings"][0]["object"]["resource"], "replicasets");
}

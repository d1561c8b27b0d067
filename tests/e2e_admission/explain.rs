//! explain side by side: one namespace's phases as the audit webhook's
//! collector recorded them and as the admission source did, each report
//! from the suite's frontend (`GET /explain` over what that collector
//! stored).

use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::{CLUSTER, env};

/// When each phase of the scenario began (and the stuck rollout's end).
pub(crate) struct Phases {
    pub rollout_started: SystemTime,
    pub quota_set: SystemTime,
    pub stuck_from: SystemTime,
    pub stuck_until: SystemTime,
}

/// Seconds since the epoch, as `/explain` takes its range.
fn epoch_secs(t: SystemTime) -> String {
    t.duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string()
}

/// `GET /explain` of `ns` in `cluster` over [from, to] on the suite's
/// frontend (JSON), polled until `ok` holds (the collectors export
/// asynchronously); panics after 90 s with the last report.
async fn explain_of(
    cluster: &str,
    ns: &str,
    (from, to): (SystemTime, SystemTime),
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let resp = client
            .get(format!("{}/explain", env("KASCADE_FRONTEND_URL")))
            .query(&[
                ("cluster", cluster),
                ("namespace", ns),
                ("from", epoch_secs(from).as_str()),
                ("to", epoch_secs(to).as_str()),
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
            Instant::now() < deadline,
            "/explain of {cluster} {ns} never passed the check; last: {report:#}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A report's findings as `severity kind resource: title` lines.
fn findings(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{} {} {}: {}",
                f["severity"].as_str().unwrap_or_default(),
                f["kind"].as_str().unwrap_or_default(),
                f["object"]["resource"].as_str().unwrap_or_default(),
                f["title"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A healthy rollout with no error in either report; the quota's refused
/// Pod creates first in both; the stuck rollout's `FailedScheduling` first
/// in both, triggered by the user's patch.
pub(crate) async fn side_by_side(ns: &str, me: &str, phases: Phases) {
    let Phases {
        rollout_started,
        quota_set,
        stuck_from,
        stuck_until,
    } = phases;
    let audit_cluster = env("CLUSTER_NAME");
    let first = |r: &Value| findings(r).into_iter().next().unwrap_or_default();
    let errors = |r: &Value| {
        r["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["severity"] == "error")
            .count()
    };
    // The healthy rollout: no error in either.
    let healthy = (rollout_started, quota_set);
    let has_writes = |r: &Value| r["tree"].as_array().is_some_and(|t| !t.is_empty());
    for cluster in [audit_cluster.as_str(), CLUSTER] {
        let r = explain_of(cluster, ns, healthy, has_writes).await;
        assert_eq!(errors(&r), 0, "{cluster}: {:#?}", findings(&r));
    }
    // The quota: the refused Pod creates first, on the ReplicaSet, in both.
    let refused = |r: &Value| first(r).contains("replicasets") && first(r).starts_with("error ");
    let quota = (quota_set, stuck_from);
    let by_audit = explain_of(&audit_cluster, ns, quota, refused).await;
    let by_admission = explain_of(CLUSTER, ns, quota, refused).await;
    eprintln!(
        "quota, audit webhook: {:#?}\nquota, admission source: {:#?}",
        findings(&by_audit),
        findings(&by_admission)
    );
    // The admission source never learns the apiserver's answer: its
    // finding says the creates were not stored, and the ReplicaSet
    // controller's Events beside it say why.
    assert!(
        by_audit["findings"][0]["title"]
            .as_str()
            .is_some_and(|t| t.contains("exceeded quota")),
        "{by_audit:#}"
    );
    assert!(
        by_admission["findings"][0]["title"]
            .as_str()
            .is_some_and(|t| t.contains("not stored"))
            && by_admission["findings"][0]
                .to_string()
                .contains("exceeded quota"),
        "{by_admission:#}"
    );
    // The stuck rollout: the Pods' FailedScheduling first, in both.
    let unschedulable = |r: &Value| first(r).contains("FailedScheduling");
    let stuck = (stuck_from, stuck_until);
    let by_audit = explain_of(&audit_cluster, ns, stuck, unschedulable).await;
    let by_admission = explain_of(CLUSTER, ns, stuck, unschedulable).await;
    eprintln!(
        "stuck, audit webhook: {:#?}\nstuck, admission source: {:#?}",
        findings(&by_audit),
        findings(&by_admission)
    );
    // The same trigger, the user's patch (which a webhook is sent as an
    // update).
    let trigger = |r: &Value| {
        r["findings"][0]["trigger"]["write"]
            .as_str()
            .unwrap_or_default()
            .replace(" patch ", " update ")
    };
    assert_eq!(
        trigger(&by_audit),
        format!("{me} update deployments {ns}/web"),
        "{by_audit:#}"
    );
    assert_eq!(
        trigger(&by_admission),
        trigger(&by_audit),
        "{by_admission:#}"
    );
}

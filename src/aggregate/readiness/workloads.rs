//! The workload controllers (Deployment, ReplicaSet, ReplicationController,
//! StatefulSet, DaemonSet) by their replica counts, and Jobs.

use crate::json::Value;

use super::*;

/// `2/3 updated`.
pub(super) fn ratio(have: i64, want: i64, what: &str) -> String {
    format!("{have}/{want} {what}")
}

/// More replicas than the spec asks for: old ones of a rollout, or a scale-down.
pub(super) fn extra(n: i64) -> String {
    if n == 1 {
        "1 replica to terminate".to_string()
    } else {
        format!("{n} replicas to terminate")
    }
}

pub(super) fn deployment(v: &View) -> Option<ObjectStatus> {
    if let Some(c) = v
        .condition("Progressing")
        .filter(|c| c.reason == "ProgressDeadlineExceeded" && c.status != "True")
    {
        return failed(c.describe("progress deadline exceeded"));
    }
    if let Some(c) = v.condition("ReplicaFailure").filter(Condition::is_true) {
        return failed(c.describe("replica failure"));
    }
    let (spec_node, status_node) = (v.spec, v.status);
    let paused = spec_node
        .and_then(|s| s.get("paused"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let waiting = |message: String| {
        if paused {
            in_progress(format!("rollout paused: {message}"))
        } else {
            in_progress(message)
        }
    };
    // The controller takes 1 when spec.replicas is unset.
    let spec = field_int_or(spec_node, "replicas", 1);
    let replicas = field_int_or(status_node, "replicas", 0);
    let updated = field_int_or(status_node, "updatedReplicas", 0);
    let ready = field_int_or(status_node, "readyReplicas", 0);
    let available = field_int_or(status_node, "availableReplicas", 0);
    if spec > replicas {
        return waiting(ratio(replicas, spec, "replicas"));
    }
    if spec > updated {
        return waiting(ratio(updated, spec, "updated"));
    }
    if replicas > spec {
        return waiting(extra(replicas.saturating_sub(spec)));
    }
    if spec > ready {
        return waiting(ratio(ready, spec, "ready"));
    }
    if updated > available {
        return waiting(ratio(available, updated, "available"));
    }
    // Without a progress deadline the controller never reports progress.
    let deadline = spec_node.and_then(|s| s.get("progressDeadlineSeconds"));
    if deadline.is_some()
        && i64::from(i32::MAX) != deadline.and_then(Value::as_i64).unwrap_or(0)
        && !v
            .condition("Progressing")
            .is_some_and(|c| c.is_true() && c.reason == "NewReplicaSetAvailable")
    {
        return waiting("waiting for the new ReplicaSet to be available".to_string());
    }
    if let Some(c) = v.condition("Available").filter(|c| !c.is_true()) {
        return waiting(format!("not available: {}", c.describe(c.status)));
    }
    current(ratio(available, spec, "available"))
}

pub(super) fn replica_set(v: &View) -> Option<ObjectStatus> {
    if let Some(c) = v.condition("ReplicaFailure").filter(Condition::is_true) {
        return failed(c.describe("replica failure"));
    }
    let (spec_node, status_node) = (v.spec, v.status);
    let spec = field_int_or(spec_node, "replicas", 1);
    let replicas = field_int_or(status_node, "replicas", 0);
    let ready = field_int_or(status_node, "readyReplicas", 0);
    let available = field_int_or(status_node, "availableReplicas", 0);
    if spec > replicas {
        return in_progress(ratio(replicas, spec, "replicas"));
    }
    if spec > ready {
        return in_progress(ratio(ready, spec, "ready"));
    }
    if spec > available {
        return in_progress(ratio(available, spec, "available"));
    }
    if replicas > spec {
        return in_progress(extra(replicas.saturating_sub(spec)));
    }
    if spec == 0 {
        return current("scaled to 0");
    }
    current(ratio(available, spec, "available"))
}

pub(super) fn stateful_set(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    let spec = int_or(state, &["spec", "replicas"], 1);
    let replicas = int_or(state, &["status", "replicas"], 0);
    let ready = int_or(state, &["status", "readyReplicas"], 0);
    let available = int_or(state, &["status", "availableReplicas"], ready);
    let updated = int_or(state, &["status", "updatedReplicas"], 0);
    if spec > replicas {
        return in_progress(ratio(replicas, spec, "replicas"));
    }
    if spec > ready {
        return in_progress(ratio(ready, spec, "ready"));
    }
    if replicas > spec {
        return in_progress(extra(replicas.saturating_sub(spec)));
    }
    if spec > available {
        return in_progress(ratio(available, spec, "available"));
    }
    // Updates roll out by hand (OnDelete): the replicas being there is all
    // the controller promises.
    if str_at(state, &["spec", "updateStrategy", "type"]) == "OnDelete" {
        return current(ratio(ready, spec, "ready (OnDelete updates)"));
    }
    if let Some(partition) = int_at(
        state,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .filter(|p| *p > 0)
    {
        let want = spec.saturating_sub(partition).max(0);
        if updated < want {
            return in_progress(format!(
                "{} (partition {partition})",
                ratio(updated, want, "updated")
            ));
        }
        return current(format!(
            "{} (partition {partition})",
            ratio(updated, want, "updated")
        ));
    }
    if spec > updated {
        return in_progress(ratio(updated, spec, "updated"));
    }
    let update_revision = str_at(state, &["status", "updateRevision"]);
    if str_at(state, &["status", "currentRevision"]) != update_revision {
        return in_progress(format!("rolling out revision {update_revision}"));
    }
    if spec == 0 {
        return current("scaled to 0");
    }
    current(ratio(ready, spec, "ready"))
}

pub(super) fn daemon_set(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    let Some(desired) = int_at(state, &["status", "desiredNumberScheduled"]) else {
        return in_progress("not yet observed by the controller");
    };
    let scheduled = int_or(state, &["status", "currentNumberScheduled"], 0);
    let updated = int_or(state, &["status", "updatedNumberScheduled"], 0);
    let ready = int_or(state, &["status", "numberReady"], 0);
    let available = int_or(state, &["status", "numberAvailable"], 0);
    for (have, what) in [
        (scheduled, "scheduled"),
        (updated, "updated"),
        (ready, "ready"),
        (available, "available"),
    ] {
        if desired > have {
            return in_progress(ratio(have, desired, what));
        }
    }
    current(ratio(available, desired, "available"))
}

pub(super) fn job(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    let succeeded = int_or(state, &["status", "succeeded"], 0);
    let active = int_or(state, &["status", "active"], 0);
    let failed_pods = int_or(state, &["status", "failed"], 0);
    let succeeded_text = match int_at(state, &["spec", "completions"]) {
        Some(c) => ratio(succeeded, c, "succeeded"),
        None => format!("{succeeded} succeeded"),
    };
    // FailureTarget: the controller has decided, and terminates the Pods
    // before it sets Failed.
    for kind in ["Failed", "FailureTarget"] {
        if let Some(c) = v.condition(kind).filter(Condition::is_true) {
            return failed(c.describe("failed"));
        }
    }
    if v.condition("Complete").is_some_and(|c| c.is_true()) {
        return current(format!("complete: {succeeded_text}"));
    }
    let suspended = bool_at(state, &["spec", "suspend"]);
    if suspended && v.condition("Suspended").is_some_and(|c| c.is_true()) {
        return current("suspended");
    }
    if v.condition("SuccessCriteriaMet")
        .is_some_and(|c| c.is_true())
    {
        return in_progress(format!("succeeded, finishing: {succeeded_text}"));
    }
    if str_at(state, &["status", "startTime"]).is_empty() {
        return in_progress("not started");
    }
    in_progress(format!(
        "running: {active} active, {succeeded_text}, {failed_pods} failed"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::testdata::*;
    use super::super::*;
    use crate::json::Value;
    use sonic_rs::json;

    #[test]
    fn the_deployment_fixture_rolls_out_in_progress_then_current() {
        let states = responses("deployment", "deployments", "hello");
        let statuses: Vec<_> = states
            .iter()
            .map(|s| status_of("apps", "deployments", s))
            .collect();
        // Created: the controller has not seen it yet.
        assert_eq!(
            statuses[0],
            ip("generation 1 not yet observed by the controller")
        );
        // The first status write with counts: none of the 3 Pods exist.
        assert!(statuses.contains(&ip("0/3 replicas")), "{statuses:#?}");
        // The image change rolled 5 replicas out, old ones terminated after.
        assert!(statuses.contains(&ip("3/5 updated")), "{statuses:#?}");
        assert!(
            statuses.contains(&ip("2 replicas to terminate")),
            "{statuses:#?}"
        );
        // Scaled to 2 at the end, all available.
        assert_eq!(statuses.last(), Some(&cur("2/2 available")));
        // Current exactly when the controller reports the spec met.
        for (state, status) in states.iter().zip(&statuses) {
            let spec = int(state, "/spec/replicas");
            let settled = crate::json::pointer(state, "/status/observedGeneration")
                == crate::json::pointer(state, "/metadata/generation")
                && [
                    "/status/replicas",
                    "/status/updatedReplicas",
                    "/status/readyReplicas",
                    "/status/availableReplicas",
                ]
                .iter()
                .all(|p| int(state, p) == spec);
            assert_eq!(
                status.0 == Status::Current,
                settled,
                "{status:?} for {}",
                state["status"]
            );
        }
    }

    #[test]
    fn the_deployment_fixture_replicasets_end_current_or_scaled_to_zero() {
        let old = responses("deployment", "replicasets", "hello-54f9b65d48");
        let new = responses("deployment", "replicasets", "hello-746c57458c");
        let last = |s: &[Value]| status_of("apps", "replicasets", s.last().unwrap());
        assert_eq!(last(&old), cur("scaled to 0"));
        assert_eq!(last(&new), cur("2/2 available"));
        let old: Vec<_> = old
            .iter()
            .map(|s| status_of("apps", "replicasets", s))
            .collect();
        assert!(old.contains(&ip("1/3 ready")), "{old:#?}");
        assert!(old.contains(&ip("1 replica to terminate")), "{old:#?}");
    }

    #[test]
    fn the_job_fixture_ends_complete_and_its_pods_succeeded() {
        let job: Vec<_> = responses("job", "jobs", "pi")
            .iter()
            .map(|s| status_of("batch", "jobs", s))
            .collect();
        assert_eq!(job[0], ip("not started"));
        assert!(
            job.contains(&ip("running: 2 active, 0/3 succeeded, 0 failed")),
            "{job:#?}"
        );
        // Complete is the last write; before it, still in progress.
        assert_eq!(job.last(), Some(&cur("complete: 3/3 succeeded")));
        assert!(
            job[..job.len() - 1]
                .iter()
                .all(|s| s.0 == Status::InProgress),
            "{job:#?}"
        );
        for pod in ["pi-ggg2z", "pi-5ldkb", "pi-z2dwl"] {
            let states = watched("job", "core.pods", pod);
            let (_, last) = states.iter().rfind(|(t, _)| t != "DELETED").unwrap();
            assert_eq!(status_of("", "pods", last), cur("Succeeded"), "{pod}");
        }
    }

    #[test]
    fn the_statefulset_fixture_scales_up_then_down() {
        let states = watched("statefulset", "apps.statefulsets", "db");
        let statuses: Vec<_> = states
            .iter()
            .map(|(_, s)| status_of("apps", "statefulsets", s))
            .collect();
        assert_eq!(statuses[0].0, Status::InProgress);
        for expected in [
            ip("1/3 replicas"),
            ip("2/3 ready"),
            cur("3/3 ready"),
            ip("2 replicas to terminate"),
        ] {
            assert!(
                statuses.contains(&expected),
                "{expected:?} in {statuses:#?}"
            );
        }
        assert_eq!(statuses.last(), Some(&cur("1/1 ready")));
    }

    #[test]
    fn a_quota_denied_replicaset_and_its_deployment_fail_with_the_quota_message() {
        // A quota of 1 Pod for a Deployment of 3.
        let rs = responses("quota", "replicasets", "capped-689c6ccc5c");
        let last_rs = rs.last().unwrap();
        let message = condition_message(last_rs, "ReplicaFailure");
        assert!(message.contains("exceeded quota"), "{message}");
        let expected = (Status::Failed, format!("FailedCreate: {message}"));
        assert_eq!(status_of("apps", "replicasets", last_rs), expected);
        let deployment = responses("quota", "deployments", "capped");
        assert_eq!(
            status_of("apps", "deployments", deployment.last().unwrap()),
            expected
        );
        // The same ReplicaSet without the failure: one of three there.
        let mut lifted = last_rs.clone();
        lifted["status"]["conditions"] = json!([]);
        assert_eq!(
            status_of("apps", "replicasets", &lifted),
            ip("1/3 replicas")
        );
    }

    #[test]
    fn a_stuck_rollout_waits_until_its_deadline_then_fails() {
        // A new template whose Pod no node can take, a 10 s progress deadline.
        let states = responses("rollout-stuck", "deployments", "web");
        let statuses: Vec<_> = states
            .iter()
            .map(|s| status_of("apps", "deployments", s))
            .collect();
        assert!(
            statuses.contains(&cur("2/2 available")),
            "before the change: {statuses:#?}"
        );
        let change = statuses
            .iter()
            .position(|s| *s == ip("generation 2 not yet observed by the controller (observed 1)"))
            .expect("the template change");
        assert!(
            statuses[change..].contains(&ip("1/2 updated")),
            "{statuses:#?}"
        );
        let last = states.last().unwrap();
        assert_eq!(
            statuses.last(),
            Some(&(
                Status::Failed,
                format!(
                    "ProgressDeadlineExceeded: {}",
                    condition_message(last, "Progressing")
                )
            ))
        );
        // Waiting, and saying so when paused.
        let mut waiting = states[states.len() - 2].clone();
        assert_eq!(
            status_of("apps", "deployments", &waiting),
            ip("1/2 updated")
        );
        waiting["spec"]["paused"] = json!(true);
        assert_eq!(
            status_of("apps", "deployments", &waiting),
            ip("rollout paused: 1/2 updated")
        );
        // The new ReplicaSet's Pod is the one that fails.
        let pods = responses("rollout-stuck", "pods", "web-f8bbf54d-8hb4q");
        assert_eq!(
            status_of("", "pods", pods.last().unwrap()).0,
            Status::Failed
        );
    }

    #[test]
    fn jobs_fail_by_their_failed_condition() {
        let mut j = json!({"metadata": {"name": "j", "generation": 1}, "spec": {"completions": 1}, "status": {
            "startTime": "2026-01-01T00:00:00Z", "failed": 7, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
        ]}});
        let expected = (
            Status::Failed,
            "BackoffLimitExceeded: Job has reached the specified backoff limit".to_string(),
        );
        assert_eq!(status_of("batch", "jobs", &j), expected);
        j["status"]["conditions"][0]["type"] = json!("Failed");
        assert_eq!(status_of("batch", "jobs", &j), expected);
        j["status"]["conditions"] = json!([{"type": "Suspended", "status": "True"}]);
        j["spec"]["suspend"] = json!(true);
        assert_eq!(status_of("batch", "jobs", &j), cur("suspended"));
    }
}

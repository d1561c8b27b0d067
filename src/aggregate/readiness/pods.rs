//! Pods: scheduled, their containers started (or waiting for a reason that
//! needs a change to recover), their phase.

use crate::json::{JsonContainerTrait as _, Value};

use super::*;

/// The container statuses of a Pod (`status` given), init containers
/// first, each with what to call it in a message.
pub(super) fn container_statuses(
    status: Option<&Value>,
) -> impl Iterator<Item = (&'static str, &Value)> {
    [
        ("init container", "initContainerStatuses"),
        ("container", "containerStatuses"),
    ]
    .into_iter()
    .flat_map(move |(what, key)| {
        status
            .and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(move |c| (what, c))
    })
}

/// `container nginx: ImagePullBackOff: Back-off pulling image "…"`.
pub(super) fn describe_wait(what: &str, c: &Value, reason: &str) -> String {
    let name = str_at(c, &["name"]);
    let message = str_at(c, &["state", "waiting", "message"]);
    if message.is_empty() {
        format!("{what} {name}: {reason}")
    } else {
        format!("{what} {name}: {reason}: {message}")
    }
}

pub(super) fn pod(v: &View) -> Option<ObjectStatus> {
    let phase = v.status_str(&["phase"]);
    match phase {
        "Succeeded" => return current("Succeeded"),
        "Failed" => return failed(pod_failure(v)),
        "Unknown" => {
            return failed(match v.status_str(&["message"]) {
                "" => "phase Unknown: its node does not report",
                m => m,
            });
        }
        "Pending" | "Running" | "" => {}
        _ => return None,
    }
    for (what, c) in container_statuses(v.status) {
        let reason = str_at(c, &["state", "waiting", "reason"]);
        if FAILING_WAIT_REASONS.contains(&reason) {
            return failed(describe_wait(what, c, reason));
        }
    }
    if phase == "Running" {
        return match v.condition("Ready") {
            Some(c) if c.is_true() => current("Running, ready"),
            Some(c) if !c.message.is_empty() => {
                in_progress(format!("Running, not ready: {}", c.message))
            }
            _ => in_progress("Running, not ready"),
        };
    }
    if v.spec_str(&["nodeName"]).is_empty() {
        if let Some(c) = v.condition("PodScheduled").filter(|c| c.status == "False") {
            // The scheduler found no node (it keeps retrying, but the reason
            // is what a reader of the trace looks for); other reasons
            // (scheduling gates) still wait.
            return if c.reason == "Unschedulable" {
                failed(c.describe("Unschedulable"))
            } else {
                in_progress(format!("Pending: {}", c.describe("not scheduled")))
            };
        }
        return in_progress("Pending: not yet scheduled");
    }
    // Bound to a node: an earlier `Unschedulable` is history (kascade maps a
    // binding onto the last state, whose conditions predate it).
    for (what, c) in container_statuses(v.status) {
        let reason = str_at(c, &["state", "waiting", "reason"]);
        if !reason.is_empty() {
            return in_progress(format!("Pending: {}", describe_wait(what, c, reason)));
        }
    }
    in_progress("Pending")
}

/// Why a Pod failed: its own reason (`Evicted`, `DeadlineExceeded`…), else
/// the first container that ended in error.
pub(super) fn pod_failure(v: &View) -> String {
    let reason = v.status_str(&["reason"]);
    let message = v.status_str(&["message"]);
    if !reason.is_empty() || !message.is_empty() {
        return Condition {
            status: "",
            reason,
            message,
            last_transition: "",
        }
        .describe("Failed");
    }
    for (what, c) in container_statuses(v.status) {
        let exit = int_or(c, &["state", "terminated", "exitCode"], 0);
        if exit != 0 {
            let name = str_at(c, &["name"]);
            return match str_at(c, &["state", "terminated", "reason"]) {
                "" => format!("Failed: {what} {name} exited with code {exit}"),
                r => format!("Failed: {what} {name}: {r} (exit code {exit})"),
            };
        }
    }
    "Failed".to_string()
}

#[cfg(test)]
mod tests {
    use super::super::testdata::*;
    use super::super::*;
    use crate::json::JsonValueTrait as _;
    use crate::json::{JsonContainerTrait as _, JsonValueMutTrait as _, Value};
    use sonic_rs::json;

    #[test]
    fn the_deployment_fixture_pods_go_pending_running_terminating() {
        let pod = watched("deployment", "core.pods", "hello-54f9b65d48-dfv6w");
        let statuses: Vec<_> = pod.iter().map(|(_, p)| status_of("", "pods", p)).collect();
        assert_eq!(statuses[0], ip("Pending: not yet scheduled"));
        // Bound to its node, containers not reported yet.
        assert_eq!(statuses[1], ip("Pending"));
        assert_eq!(statuses[2], cur("Running, ready"));
        assert_eq!(
            statuses[3],
            (
                Status::Terminating,
                "deletion requested, grace period 30s".to_string()
            )
        );
        // Every Pod of every version in the stream, judged from its fields.
        for line in fixture("deployment", "watch/core.pods.jsonl").lines() {
            let ev: Value = crate::json::parse(line).unwrap();
            let p = &ev["object"];
            let (status, _) = status_of("", "pods", p);
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let expected = if p["metadata"]["deletionTimestamp"].is_str() {
                Status::Terminating
            } else if p["status"]["phase"] == "Running" && ready {
                Status::Current
            } else {
                assert_eq!(p["status"]["phase"], "Pending");
                Status::InProgress
            };
            assert_eq!(status, expected, "{}", p["metadata"]["name"]);
        }
    }

    #[test]
    fn an_unschedulable_pod_fails_with_the_schedulers_message() {
        // The scenario's Pod asks for a node label no node has.
        let states = responses("unschedulable", "pods", "stuck");
        assert_eq!(
            status_of("", "pods", &states[0]),
            ip("Pending: not yet scheduled")
        );
        let mut last = states.last().unwrap().clone();
        let message = condition_message(&last, "PodScheduled");
        assert!(message.starts_with("0/3 nodes are available"), "{message}");
        assert_eq!(
            status_of("", "pods", &last),
            (Status::Failed, format!("Unschedulable: {message}"))
        );
        // Bound after all (a node came; kascade's state after the binding
        // has the node but still the old condition): no longer failed.
        let mut bound = last.clone();
        bound["spec"]["nodeName"] = json!("kwok-node-0");
        assert_eq!(status_of("", "pods", &bound), ip("Pending"));
        // Scheduling gates hold a Pod back on purpose: it waits.
        let scheduled = last["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["type"] == "PodScheduled")
            .unwrap();
        scheduled["reason"] = json!("SchedulingGated");
        scheduled["message"] = json!("Scheduling is blocked due to non-empty scheduling gates");
        assert_eq!(
            status_of("", "pods", &last),
            ip("Pending: SchedulingGated: Scheduling is blocked due to non-empty scheduling gates")
        );
    }

    #[test]
    fn containers_that_cannot_start_fail_the_pod_and_starting_ones_wait() {
        let waiting = |phase: &str, field: &str, reason: &str, message: &str| {
            pod_with(json!({"phase": phase, field: [
                {"name": "web", "state": {"waiting": {"reason": reason, "message": message}}}
            ]}))
        };
        assert_eq!(
            status_of(
                "",
                "pods",
                &waiting(
                    "Pending",
                    "containerStatuses",
                    "ImagePullBackOff",
                    "Back-off pulling image \"nginx:nope\""
                )
            ),
            (
                Status::Failed,
                "container web: ImagePullBackOff: Back-off pulling image \"nginx:nope\"".into()
            )
        );
        assert_eq!(
            status_of(
                "",
                "pods",
                &waiting("Running", "containerStatuses", "CrashLoopBackOff", "")
            ),
            (Status::Failed, "container web: CrashLoopBackOff".into())
        );
        assert_eq!(
            status_of(
                "",
                "pods",
                &waiting(
                    "Pending",
                    "initContainerStatuses",
                    "CreateContainerConfigError",
                    "secret \"db\" not found"
                )
            ),
            (
                Status::Failed,
                "init container web: CreateContainerConfigError: secret \"db\" not found".into()
            )
        );
        assert_eq!(
            status_of(
                "",
                "pods",
                &waiting("Pending", "containerStatuses", "ContainerCreating", "")
            ),
            ip("Pending: container web: ContainerCreating")
        );
        let not_ready = pod_with(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [web]"}
        ]}));
        assert_eq!(
            status_of("", "pods", &not_ready),
            ip("Running, not ready: containers with unready status: [web]")
        );
    }

    #[test]
    fn failed_pods_say_why() {
        let evicted = pod_with(
            json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
        );
        assert_eq!(
            status_of("", "pods", &evicted),
            (
                Status::Failed,
                "Evicted: The node was low on resource: memory.".into()
            )
        );
        let crashed = pod_with(json!({"phase": "Failed", "containerStatuses": [
            {"name": "ok", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ]}));
        assert_eq!(
            status_of("", "pods", &crashed),
            (
                Status::Failed,
                "Failed: container main: OOMKilled (exit code 137)".into()
            )
        );
        let lost = pod_with(json!({"phase": "Unknown"}));
        assert_eq!(status_of("", "pods", &lost).0, Status::Failed);
    }
}

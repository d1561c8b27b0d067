//! The cluster's own kinds: volumes and claims by phase, Nodes by `Ready`,
//! LoadBalancer Services by their ingress, CRDs by `Established`.

use crate::json::{JsonContainerTrait as _, Value};

use super::*;

pub(super) fn pvc(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    match str_at(state, &["status", "phase"]) {
        "Bound" => current("Bound"),
        "Lost" => failed("Lost: its PersistentVolume no longer exists"),
        "Pending" | "" => in_progress("Pending: waiting for a volume"),
        _ => None,
    }
}

pub(super) fn pv(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    let message = str_at(state, &["status", "message"]);
    match str_at(state, &["status", "phase"]) {
        phase @ ("Available" | "Bound") => current(phase),
        "Released" => current("Released: its claim was deleted"),
        "Failed" if !message.is_empty() => failed(format!("Failed: {message}")),
        "Failed" => failed("Failed: reclamation failed"),
        "Pending" | "" => in_progress("Pending"),
        _ => None,
    }
}

pub(super) fn node(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    let Some(ready) = v.condition("Ready") else {
        return in_progress("not yet reporting");
    };
    if !ready.is_true() {
        return failed(format!("not ready: {}", ready.describe(ready.status)));
    }
    let mut message = String::from("Ready");
    for pressure in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        if v.condition(pressure).is_some_and(|c| c.is_true()) {
            let _ = write!(message, ", {pressure}");
        }
    }
    if bool_at(state, &["spec", "unschedulable"]) {
        message.push_str(", cordoned");
    }
    current(message)
}

pub(super) fn service(v: &View) -> Option<ObjectStatus> {
    let state = v.state;
    if str_at(state, &["spec", "type"]) != "LoadBalancer" {
        return None;
    }
    let ingress = at(state, &["status", "loadBalancer", "ingress"])
        .and_then(Value::as_array)
        .and_then(|i| i.first());
    match ingress {
        Some(i) => {
            let at = [str_at(i, &["ip"]), str_at(i, &["hostname"])]
                .into_iter()
                .find(|s| !s.is_empty())
                .unwrap_or("");
            current(format!("load balancer {at}").trim_end().to_string())
        }
        None => in_progress("waiting for a load balancer"),
    }
}

pub(super) fn crd(v: &View) -> Option<ObjectStatus> {
    if let Some(c) = v.condition("NamesAccepted").filter(|c| c.status == "False") {
        return failed(c.describe("names not accepted"));
    }
    match v.condition("Established") {
        Some(c) if c.is_true() => current("Established"),
        Some(c) if c.status == "False" && c.reason != "Installing" => {
            failed(c.describe("not established"))
        }
        _ => in_progress("installing"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testdata::*;
    use super::super::*;
    use crate::json::Value;
    use sonic_rs::json;

    #[test]
    fn claims_nodes_services_daemonsets() {
        let phase = |p: &str| json!({"metadata": {"name": "c"}, "status": {"phase": p}});
        assert_eq!(
            status_of("", "persistentvolumeclaims", &phase("Pending")),
            ip("Pending: waiting for a volume")
        );
        assert_eq!(
            status_of("", "persistentvolumeclaims", &phase("Bound")),
            cur("Bound")
        );
        assert_eq!(
            status_of("", "persistentvolumeclaims", &phase("Lost")).0,
            Status::Failed
        );
        assert_eq!(
            status_of("", "persistentvolumes", &phase("Released")).0,
            Status::Current
        );

        let node = |ready: Value| {
            json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}, "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"}, ready
            ]}})
        };
        assert_eq!(
            status_of(
                "",
                "nodes",
                &node(
                    json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."})
                )
            ),
            (
                Status::Failed,
                "not ready: NodeStatusUnknown: Kubelet stopped posting node status.".into()
            )
        );
        assert_eq!(
            status_of(
                "",
                "nodes",
                &node(json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady"}))
            )
            .0,
            Status::Failed
        );
        assert_eq!(
            status_of(
                "",
                "nodes",
                &node(json!({"type": "Ready", "status": "True"}))
            ),
            cur("Ready, cordoned")
        );

        let mut lb = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9"}, "status": {"loadBalancer": {}}});
        assert_eq!(
            status_of("", "services", &lb),
            ip("waiting for a load balancer")
        );
        lb["status"]["loadBalancer"]["ingress"] = json!([{"ip": "203.0.113.7"}]);
        assert_eq!(
            status_of("", "services", &lb),
            cur("load balancer 203.0.113.7")
        );

        let ds =
            |status: Value| json!({"metadata": {"name": "d", "generation": 1}, "status": status});
        assert_eq!(
            status_of(
                "apps",
                "daemonsets",
                &ds(
                    json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "currentNumberScheduled": 2, "updatedNumberScheduled": 2, "numberReady": 1, "numberAvailable": 1})
                )
            ),
            ip("1/2 ready")
        );
        assert_eq!(
            status_of("apps", "daemonsets", &ds(json!({}))),
            ip("generation 1 not yet observed by the controller")
        );
    }
}

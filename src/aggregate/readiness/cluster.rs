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
        // A kubelet registers its Node not ready (`KubeletNotReady: CSINode
        // is not yet initialized`) and reports it Ready a moment later: a
        // Node whose Ready condition has not changed since it was created
        // has never been ready yet, which is progress, not failure.
        let created = str_at(state, &["metadata", "creationTimestamp"]);
        if ready.status == "False" && never_changed_since(ready.last_transition, created) {
            return in_progress(format!("not ready yet: {}", ready.describe(ready.status)));
        }
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

/// Whether a condition last changed within a few seconds of the object's
/// creation (both RFC 3339, second precision as the apiserver writes them).
fn never_changed_since(transition: &str, created: &str) -> bool {
    let (Ok(t), Ok(c)) = (
        humantime::parse_rfc3339_weak(transition),
        humantime::parse_rfc3339_weak(created),
    ) else {
        return false;
    };
    t.duration_since(c)
        .is_ok_and(|d| d <= std::time::Duration::from_secs(5))
        || c.duration_since(t).is_ok()
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

    /// A real kubelet's Node as it registered it (e2e/corpus/real-crash-loop:
    /// `Ready=False KubeletNotReady: CSINode is not yet initialized`, the
    /// Node Ready 0.4 s later) is not ready *yet*; the same Node whose
    /// Ready condition turned False ten minutes after it was created
    /// (derived: only that time moved) has failed.
    #[test]
    fn a_node_registering_is_in_progress_and_one_that_stopped_being_ready_failed() {
        use std::io::Read as _;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/corpus/real-crash-loop/audit.log.gz"
        );
        let mut log = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_string(&mut log)
            .unwrap();
        let created = log
            .lines()
            .find(|l| {
                l.contains(r#""verb":"create""#)
                    && l.contains(r#""resource":"nodes""#)
                    && l.contains("system:node:")
            })
            .expect("the kubelet registers its node");
        let event: Value = sonic_rs::from_str(created).unwrap();
        let node = event.get("responseObject").unwrap().clone();
        let (status, message) = status_of("", "nodes", &node);
        assert_eq!(status, Status::InProgress, "{message}");
        assert!(
            message.starts_with("not ready yet: KubeletNotReady"),
            "{message}"
        );
        let later = node.to_string().replace(
            &format!(
                r#""lastTransitionTime":{}"#,
                crate::json::pointer(&node, "/metadata/creationTimestamp").unwrap()
            ),
            r#""lastTransitionTime":"2099-01-01T00:00:00Z""#,
        );
        assert_ne!(later, node.to_string(), "the condition's time was moved");
        let (status, message) = status_of("", "nodes", &sonic_rs::from_str(&later).unwrap());
        assert_eq!(status, Status::Failed, "{message}");
    }

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

//! The readiness of an object after a write, computed from its state alone:
//! whether a rollout still waits, a Pod cannot be scheduled, a ReplicaSet
//! cannot create Pods, a Job failed. Audit and watch spans carry it
//! (`object.status`, `object.status.message`), so readers need not re-derive
//! it from diffs.
//!
//! The rules follow kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status):
//! deletion first, then an unobserved generation, then the standard
//! `Reconciling`/`Stalled` conditions, then rules per kind, then a `Ready`
//! condition. They differ where a trace reader needs more than a deploy tool
//! waiting for convergence:
//! - a state says nothing about kinds without rules of their own and without
//!   a `Ready` condition (ConfigMaps, Secrets, ClusterIP Services…): no status,
//!   where kstatus calls them Current;
//! - a Pod the scheduler marked `Unschedulable` (and not bound since) is
//!   Failed at once, where kstatus waits 15 s (the state carries no clock;
//!   the scheduler's verdict is the failure a reader looks for), and a Pod in
//!   phase `Failed` is Failed (kstatus: Current, "completed");
//! - a container waiting for a reason that needs a change to recover
//!   (`ImagePullBackOff`, `CreateContainerConfigError`, …) fails the Pod, not
//!   only `CrashLoopBackOff`;
//! - `ReplicaFailure=True` fails a ReplicaSet or Deployment (the message is
//!   the cause, e.g. an exceeded quota), a Job runs InProgress until
//!   `Complete`, a Node that is not Ready is Failed, a LoadBalancer Service
//!   is InProgress until it has an ingress point.
//!
//! Pure, no allocation beyond the message: it runs for every audited write
//! and watch change, on the state the processor already holds parsed.

mod cluster;
mod pods;
#[cfg(test)]
mod testdata;
mod workloads;

use std::fmt::Write as _;

use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};

use cluster::{crd, node, pv, pvc, service};
use pods::pod;
use workloads::{daemon_set, deployment, job, replica_set, stateful_set};

/// Longest message, in bytes (scheduler messages on large clusters run long;
/// the span shows the start; nothing is lost, the whole condition is in the
/// object's diff or snapshot and usually in an Event).
pub(crate) const MAX_MESSAGE_BYTES: usize = 400;

/// kstatus's statuses an object can have after a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Reconciled: what the spec asks for is there.
    Current,
    /// Not yet: a rollout under way, a Pod starting, a generation not yet seen
    /// by its controller.
    InProgress,
    /// Will not get there without a change: unschedulable, quota exceeded,
    /// image not pullable, Job failed, Node not ready.
    Failed,
    /// Deletion requested, the object still exists (finalizers, grace period).
    Terminating,
}

impl Status {
    /// The value of the `object.status` attribute.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectStatus {
    pub status: Status,
    /// Short and human, at most [`MAX_MESSAGE_BYTES`] (cut with `…`), on one
    /// line.
    pub message: String,
}

impl ObjectStatus {
    fn new(status: Status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: bounded(message.into()),
        }
    }
}

fn current(message: impl Into<String>) -> Option<ObjectStatus> {
    Some(ObjectStatus::new(Status::Current, message))
}

fn in_progress(message: impl Into<String>) -> Option<ObjectStatus> {
    Some(ObjectStatus::new(Status::InProgress, message))
}

fn failed(message: impl Into<String>) -> Option<ObjectStatus> {
    Some(ObjectStatus::new(Status::Failed, message))
}

/// One line (control characters, newlines included, become spaces) of at
/// most [`MAX_MESSAGE_BYTES`].
fn bounded(mut s: String) -> String {
    if s.chars().any(char::is_control) {
        s = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
    }
    let trimmed = s.trim_end().len();
    s.truncate(trimmed);
    if s.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - '…'.len_utf8();
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// The readiness of an object of `group`/`resource` (kascade's identity,
/// present also where a listed object lacks `kind`) in `state`, or `None`
/// when its state says nothing about readiness.
pub(crate) fn object_status(group: &str, resource: &str, state: &Value) -> Option<ObjectStatus> {
    if !state.is_object() {
        return None;
    }
    let v = View::of(state);
    if let Some(s) = terminating(&v) {
        return Some(s);
    }
    let rules: Option<fn(&View) -> Option<ObjectStatus>> = match (group, resource) {
        ("", "pods") => Some(pod),
        ("apps", "deployments") => Some(deployment),
        ("apps", "replicasets") | ("", "replicationcontrollers") => Some(replica_set),
        ("apps", "statefulsets") => Some(stateful_set),
        ("apps", "daemonsets") => Some(daemon_set),
        ("batch", "jobs") => Some(job),
        ("", "persistentvolumeclaims") => Some(pvc),
        ("", "persistentvolumes") => Some(pv),
        ("", "nodes") => Some(node),
        ("", "services") => Some(service),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Some(crd),
        _ => None,
    };
    // The workload controllers always report the generation they acted on:
    // until they have, the status fields describe nothing yet.
    let controller_reports_generation = matches!(
        (group, resource),
        (
            "apps",
            "deployments" | "replicasets" | "statefulsets" | "daemonsets"
        ) | ("", "replicationcontrollers")
    );
    if let Some(s) = generation_not_observed(&v, controller_reports_generation) {
        return Some(s);
    }
    if let Some(s) = standard_conditions(&v) {
        return Some(s);
    }
    match rules {
        Some(rules) => rules(&v),
        None => ready_condition(&v),
    }
}

/// Conditions indexed by type when a state is viewed; more are looked for
/// one by one (no object has this many).
const INDEXED_CONDITIONS: usize = 12;

/// A state as the rules read it: its `metadata`, `spec` and `status`, and
/// the types of its `status.conditions`, each looked up once. A lookup
/// scans an object's keys, and the rules run for every write and watch
/// change: looking each part up again per field and per condition was
/// a third of their cost.
pub(super) struct View<'a> {
    pub state: &'a Value,
    pub metadata: Option<&'a Value>,
    pub spec: Option<&'a Value>,
    pub status: Option<&'a Value>,
    conditions: &'a [Value],
    /// `type` of the first [`INDEXED_CONDITIONS`] conditions, by position.
    types: [Option<&'a str>; INDEXED_CONDITIONS],
}

impl<'a> View<'a> {
    pub(super) fn of(state: &'a Value) -> View<'a> {
        let (mut metadata, mut spec, mut status) = (None, None, None);
        if let Some(fields) = state.as_object() {
            for (key, value) in fields.iter() {
                match key {
                    "metadata" => metadata = metadata.or(Some(value)),
                    "spec" => spec = spec.or(Some(value)),
                    "status" => status = status.or(Some(value)),
                    _ => {}
                }
            }
        }
        let conditions: &[Value] = status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .map_or(&[], |a| a);
        let mut types = [None; INDEXED_CONDITIONS];
        for (t, c) in types.iter_mut().zip(conditions) {
            *t = condition_type(c);
        }
        View {
            state,
            metadata,
            spec,
            status,
            conditions,
            types,
        }
    }

    /// The first condition of type `kind`.
    pub(super) fn condition(&self, kind: &str) -> Option<Condition<'a>> {
        let c = match self.types.iter().position(|t| *t == Some(kind)) {
            Some(i) => &self.conditions[i],
            None => self
                .conditions
                .iter()
                .skip(INDEXED_CONDITIONS)
                .find(|c| condition_type(c) == Some(kind))?,
        };
        let field = |k| c.get(k).and_then(Value::as_str).unwrap_or("");
        Some(Condition {
            status: field("status"),
            reason: field("reason"),
            message: field("message"),
            last_transition: field("lastTransitionTime"),
        })
    }

    /// The string at `path` under `status`, else "".
    pub(super) fn status_str(&self, path: &[&str]) -> &'a str {
        self.status.map_or("", |s| str_at(s, path))
    }

    /// The string at `path` under `spec`, else "".
    pub(super) fn spec_str(&self, path: &[&str]) -> &'a str {
        self.spec.map_or("", |s| str_at(s, path))
    }
}

fn condition_type(c: &Value) -> Option<&str> {
    c.get("type").and_then(Value::as_str)
}

/// The value at `path` (object keys). Not `Value::pointer`, which allocates
/// for every segment: this runs for every write.
fn at<'a>(state: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(state, |v, key| v.get(key))
}

fn int_at(state: &Value, path: &[&str]) -> Option<i64> {
    at(state, path).and_then(Value::as_i64)
}

fn int_or(state: &Value, path: &[&str], default: i64) -> i64 {
    int_at(state, path).unwrap_or(default)
}

/// The integer field `key` of `node` (`spec`, `status` looked up once by
/// the caller), else `default`.
fn field_int_or(node: Option<&Value>, key: &str, default: i64) -> i64 {
    node.and_then(|n| n.get(key))
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

fn bool_at(state: &Value, path: &[&str]) -> bool {
    at(state, path).and_then(Value::as_bool).unwrap_or(false)
}

fn str_at<'a>(state: &'a Value, path: &[&str]) -> &'a str {
    at(state, path).and_then(Value::as_str).unwrap_or("")
}

/// One entry of `status.conditions`.
pub(super) struct Condition<'a> {
    status: &'a str,
    reason: &'a str,
    message: &'a str,
    /// RFC 3339, as written.
    last_transition: &'a str,
}

impl Condition<'_> {
    fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// `reason: message`, or whichever of them is set, else `fallback`.
    fn describe(&self, fallback: &str) -> String {
        match (self.reason.is_empty(), self.message.is_empty()) {
            (false, false) => format!("{}: {}", self.reason, self.message),
            (false, true) => self.reason.to_string(),
            (true, false) => self.message.to_string(),
            (true, true) => fallback.to_string(),
        }
    }
}

/// Conditions of a namespace being deleted that say what holds it, most
/// telling first.
const NAMESPACE_DELETION_HOLDS: [&str; 5] = [
    "NamespaceFinalizersRemaining",
    "NamespaceDeletionContentFailure",
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceContentRemaining",
];

/// Whether a `Terminating` status message (as [`object_status`] words it)
/// says something holds the deletion: finalizers, or a namespace's content.
/// A graceful deletion in progress holds nothing.
pub(crate) fn deletion_is_held(message: &str) -> bool {
    message.contains(WAITING_FOR_FINALIZERS) || message.contains(HELD_BY)
}

const WAITING_FOR_FINALIZERS: &str = ", waiting for finalizers: ";
/// Separates a namespace's holding conditions from the rest.
const HELD_BY: &str = "; held: ";

fn terminating(v: &View) -> Option<ObjectStatus> {
    let meta = v.metadata?;
    meta.get("deletionTimestamp")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())?;
    let mut message = String::from("deletion requested");
    let finalizers: Vec<&str> = meta
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !finalizers.is_empty() {
        let _ = write!(message, "{WAITING_FOR_FINALIZERS}{}", finalizers.join(", "));
    } else if let Some(grace) = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
    {
        let _ = write!(message, ", grace period {grace}s");
    }
    // A namespace's controller says what holds its deletion: content left,
    // finalizers of that content, content it failed to delete.
    let holds: Vec<&str> = NAMESPACE_DELETION_HOLDS
        .iter()
        .filter_map(|kind| v.condition(kind).filter(Condition::is_true))
        .map(|c| c.message)
        .filter(|m| !m.is_empty())
        .collect();
    if !holds.is_empty() {
        let _ = write!(message, "{HELD_BY}{}", holds.join("; "));
    }
    Some(ObjectStatus::new(Status::Terminating, message))
}

/// A spec change its controller has not acted on yet. `required`: the
/// controller always reports `status.observedGeneration`, so its absence
/// means the same.
fn generation_not_observed(v: &View, required: bool) -> Option<ObjectStatus> {
    let generation = v.metadata?.get("generation").and_then(Value::as_i64)?;
    match v
        .status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64)
    {
        Some(observed) if observed != generation => in_progress(format!(
            "generation {generation} not yet observed by the controller (observed {observed})"
        )),
        None if required => in_progress(format!(
            "generation {generation} not yet observed by the controller"
        )),
        _ => None,
    }
}

/// kstatus's standard conditions, which any controller may set and which
/// decide alone when present.
fn standard_conditions(v: &View) -> Option<ObjectStatus> {
    if let Some(c) = v.condition("Stalled").filter(Condition::is_true) {
        return failed(c.describe("stalled"));
    }
    if let Some(c) = v.condition("Reconciling").filter(Condition::is_true) {
        return in_progress(c.describe("reconciling"));
    }
    None
}

/// The widespread `Ready` condition, for kinds without rules of their own
/// (custom resources): True is Current; False or Unknown is InProgress, as
/// nothing tells a controller still trying from one that gave up.
fn ready_condition(v: &View) -> Option<ObjectStatus> {
    let c = v.condition("Ready")?;
    match c.status {
        "True" => current("Ready"),
        "False" | "Unknown" => in_progress(format!("not ready: {}", c.describe(c.status))),
        _ => None,
    }
}

/// Container waiting reasons that do not clear without a change (image,
/// configuration, a crashing program).
const FAILING_WAIT_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "PreStartHookError",
    "PostStartHookError",
];

#[cfg(test)]
mod tests {
    use super::testdata::*;
    use super::*;
    use crate::json::Value;
    use sonic_rs::json;

    #[test]
    fn objects_without_readiness_have_no_status() {
        for (scenario, resource, name) in [
            ("service", "services", "web"),
            ("service", "endpoints", "web"),
            ("config", "configmaps", "app-config"),
            ("config", "secrets", "app-secret"),
            ("config", "namespaces", "config-demo"),
        ] {
            for state in responses(scenario, resource, name) {
                let group = if resource == "endpointslices" {
                    "discovery.k8s.io"
                } else {
                    ""
                };
                assert_eq!(
                    object_status(group, resource, &state),
                    None,
                    "{resource} {name}"
                );
            }
        }
        assert_eq!(object_status("", "pods", &Value::new_null()), None);
    }

    #[test]
    fn custom_resources_by_their_conditions_and_deletion_before_anything() {
        let cr = |conditions: Value| json!({"metadata": {"name": "cert", "generation": 4}, "status": {"observedGeneration": 4, "conditions": conditions}});
        assert_eq!(
            status_of(
                "cert-manager.io",
                "certificates",
                &cr(json!([{"type": "Ready", "status": "True"}]))
            ),
            cur("Ready")
        );
        assert_eq!(
            status_of(
                "cert-manager.io",
                "certificates",
                &cr(
                    json!([{"type": "Ready", "status": "False", "reason": "Issuing", "message": "Issuing certificate as Secret does not exist"}])
                )
            ),
            ip("not ready: Issuing: Issuing certificate as Secret does not exist")
        );
        assert_eq!(
            status_of(
                "example.com",
                "widgets",
                &cr(
                    json!([{"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "size must be positive"}])
                )
            ),
            (Status::Failed, "InvalidSpec: size must be positive".into())
        );
        assert_eq!(
            object_status("example.com", "widgets", &cr(json!([]))),
            None
        );
        let mut c = cr(json!([]));
        c["status"]["observedGeneration"] = json!(3);
        assert_eq!(
            status_of("example.com", "widgets", &c).0,
            Status::InProgress
        );
        // Deletion decides, whatever the rest says.
        c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        c["metadata"]["finalizers"] =
            json!(["example.com/cleanup", "kubernetes.io/pvc-protection"]);
        assert_eq!(
            status_of("example.com", "widgets", &c),
            (Status::Terminating, "deletion requested, waiting for finalizers: example.com/cleanup, kubernetes.io/pvc-protection".into())
        );
    }

    #[test]
    fn conditions_beyond_the_indexed_ones_and_repeated_types_are_found() {
        let cr = |conditions: Vec<Value>| json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": conditions}});
        let filler = |i: usize| json!({"type": format!("Other{i}"), "status": "True"});
        // `Ready` past the indexed conditions, and given twice: the first counts.
        let mut conditions: Vec<Value> = (0..INDEXED_CONDITIONS).map(filler).collect();
        conditions.push(json!({"type": "Ready", "status": "False", "reason": "Waiting"}));
        conditions.push(json!({"type": "Ready", "status": "True"}));
        assert_eq!(
            status_of("example.com", "widgets", &cr(conditions.clone())),
            ip("not ready: Waiting")
        );
        // The same two among the indexed ones.
        conditions.drain(..INDEXED_CONDITIONS);
        assert_eq!(
            status_of("example.com", "widgets", &cr(conditions)),
            ip("not ready: Waiting")
        );
        // A condition without a string type takes its place and matches nothing.
        let odd = vec![
            json!({"type": 7, "status": "True"}),
            json!({"type": "Ready", "status": "True"}),
        ];
        assert_eq!(status_of("example.com", "widgets", &cr(odd)), cur("Ready"));
    }

    #[test]
    fn absurd_counts_do_not_overflow() {
        let sts = json!({"metadata": {"generation": 1}, "spec": {"replicas": i64::MIN, "updateStrategy": {"rollingUpdate": {"partition": i64::MAX}}},
            "status": {"observedGeneration": 1, "replicas": i64::MAX, "readyReplicas": i64::MAX, "availableReplicas": i64::MAX}});
        for (group, resource) in [
            ("apps", "statefulsets"),
            ("apps", "deployments"),
            ("apps", "replicasets"),
        ] {
            assert_eq!(
                status_of(group, resource, &sts).0,
                Status::InProgress,
                "{resource}"
            );
        }
    }

    #[test]
    fn messages_are_one_bounded_line() {
        let long = format!("line one\nline two é{}", "é".repeat(400));
        let p = pod_with(json!({"phase": "Failed", "reason": "Evicted", "message": long}));
        let (_, message) = status_of("", "pods", &p);
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(
            message.starts_with("Evicted: line one line two é"),
            "{message}"
        );
        assert!(message.ends_with('…'), "{message}");
        assert!(!message.contains('\n'));
    }
}

//! What `kascade explain` says: findings, root cause first, each with the
//! chain from the object asked about to where it happened, the evidence, and
//! the symptoms it explains. Serialized as the JSON output (schema version
//! [`SCHEMA_VERSION`], documented in `docs/explain.md`); the terminal,
//! Markdown and HTML renderings read the same structure.

use serde::Serialize;

/// Bumped when a field changes meaning or goes away (adding one does not).
pub(crate) const SCHEMA_VERSION: u32 = 1;

pub use crate::judgement::Severity;

/// What kind of thing went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A write refused by a policy: quota, admission, RBAC (HTTP 403, 422 …).
    DeniedWrite,
    /// Any other failed write (4xx/5xx), except optimistic-concurrency
    /// conflicts that were retried and 404s of deletes.
    FailedWrite,
    /// A Warning Event (FailedScheduling, FailedCreate, BackOff, …).
    WarningEvent,
    /// An object that had not settled when the log ends: a rollout not
    /// converged, a Pod Pending or never Ready, a Job failed, a claim
    /// Pending, a delete held by finalizers.
    NotCompleted,
    /// A hop far outside its edge's usual latency.
    SlowHop,
    /// A write whose request took long, one part of it (an admission
    /// webhook, etcd) most of the time (kube-apiserver's own trace).
    SlowWrite,
    /// A write admitted although an admission webhook's call failed
    /// (`failurePolicy: Ignore`): the webhook did not judge it.
    WebhookFailedOpen,
    /// A spec field set back and forth by several writers: none of them
    /// gets its way for long.
    WritersFight,
}

impl FindingKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            FindingKind::DeniedWrite => "denied_write",
            FindingKind::FailedWrite => "failed_write",
            FindingKind::WarningEvent => "warning_event",
            FindingKind::NotCompleted => "not_completed",
            FindingKind::SlowHop => "slow_hop",
            FindingKind::SlowWrite => "slow_write",
            FindingKind::WebhookFailedOpen => "webhook_failed_open",
            FindingKind::WritersFight => "writers_fight",
        }
    }
}

/// An object, as the report names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectName {
    pub cluster: String,
    /// Empty for the core group.
    pub group: String,
    /// Plural resource, e.g. `replicasets`.
    pub resource: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// `replicasets rollout-demo/web-5d4f` (cluster-scoped: `nodes n1`).
    pub display: String,
}

/// One step of a chain: the object, and how it relates to the step above
/// (`owner`, `node`, `claim`, … the link class; empty for the first step).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChainStep {
    pub object: ObjectName,
    pub via: String,
    /// The object's readiness at the end of the log (`Current`,
    /// `InProgress`, `Failed`, `Terminating`, or empty when unknown or
    /// when the object has no readiness), and why.
    pub status: String,
    pub status_message: String,
}

/// What shows a finding: a write, an Event, a change, a state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    /// `write`, `event`, `diff`, `status`.
    pub kind: String,
    /// RFC 3339, microseconds.
    pub time: String,
    /// One line: `kube-controller-manager/replicaset-controller create pods
    /// → 403 Forbidden`, `Warning FailedScheduling (×4) by default-scheduler`.
    pub summary: String,
    /// The message, the diff line, … (may be empty).
    pub detail: String,
}

/// The external write that set off the cascade a finding happened in (a
/// user's patch, an external client's create), with what it changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trigger {
    /// `kascade-e2e-admin patch deployments rollout-demo/web`.
    pub write: String,
    pub time: String,
    /// What the write changed (`+ spec.template.spec.nodeSelector = {…}`),
    /// at most a few lines.
    pub changes: Vec<String>,
}

/// A finding folded under another: explained by it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Symptom {
    pub kind: FindingKind,
    pub object: ObjectName,
    pub title: String,
    pub first: String,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// `F1`, `F2`, … in report order (HTML anchors use it).
    pub id: String,
    pub severity: Severity,
    pub kind: FindingKind,
    /// One line a person understands: the message of the refusal, the
    /// Event, the reason the object is stuck.
    pub title: String,
    /// The title with where it happened: `… — on replicasets ns/web-5d4f,
    /// under deployments ns/web` (what the terminal and summaries lead with).
    pub headline: String,
    /// Where it happened.
    pub object: ObjectName,
    /// From the object asked about (or the topmost object above it) down
    /// to [`Finding::object`].
    pub chain: Vec<ChainStep>,
    /// First and last occurrence (RFC 3339).
    pub first: String,
    pub last: String,
    /// How many occurrences were merged into this finding.
    pub count: u64,
    /// Further objects with the same finding (e.g. the other Pods of the
    /// ReplicaSet), at most a few, and how many there were in all.
    pub also: Vec<ObjectName>,
    pub also_total: u64,
    pub evidence: Vec<Evidence>,
    pub trigger: Option<Trigger>,
    /// Findings this one explains.
    pub symptoms: Vec<Symptom>,
    /// The cluster's own problem, there before any user's change and apart
    /// from it (start-up, system components): listed last, never counted
    /// by `--fail-on`.
    pub background: bool,
}

/// One write of a cascade, for the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineEntry {
    /// `kube-controller-manager/replicaset-controller create pods ns/web-…`.
    pub write: String,
    pub object: ObjectName,
    /// From the cascade's root write, milliseconds.
    pub start_ms: f64,
    pub end_ms: f64,
    /// Which attempt of its writer at this write it is (1: the first; a
    /// refused write retried later makes 2, 3, …).
    pub attempt: u32,
    /// For a retry: its writer's back-off since the previous attempt.
    pub backoff_ms: Option<f64>,
    /// Index of the entry that caused it (None for the root).
    pub cause: Option<usize>,
    pub depth: u32,
    /// HTTP status of the write.
    pub code: i32,
    /// Readiness after the write (may be empty).
    pub status: String,
    pub critical: bool,
}

/// A cascade that a finding happened in, as a timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CascadeTimeline {
    /// The root write (a finding's [`Trigger::write`]).
    pub root: String,
    pub start: String,
    /// `complete after 4.2s` or `not complete: waiting for …`.
    pub outcome: String,
    /// The findings (ids) that happened in it.
    pub findings: Vec<String>,
    pub entries: Vec<TimelineEntry>,
    /// Entries left out (a cascade larger than the timeline's bound).
    pub omitted: u64,
}

/// An object of the scope, with the objects under it (owners above what
/// they own, Pods above their claims and nodes).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TreeNode {
    pub object: ObjectName,
    pub via: String,
    pub status: String,
    pub status_message: String,
    /// Ids of the findings on this object.
    pub findings: Vec<String>,
    pub children: Vec<TreeNode>,
}

/// What was read.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Inputs {
    pub files: Vec<String>,
    /// Lines read (not empty).
    pub lines: u64,
    /// Lines that were not audit events, with where (`file:line: why`), at
    /// most a few; `malformed` counts them all.
    pub malformed: u64,
    pub malformed_examples: Vec<String>,
    /// Audit events in the scope.
    pub events_in_scope: u64,
    /// Objects the scope named (or found under them); 0 when an `--object`
    /// or `--selector` matches nothing in the inputs.
    #[serde(skip)]
    pub objects_in_scope: u64,
    /// First and last audit time in the scope (RFC 3339; empty without any).
    pub from: String,
    pub to: String,
    /// What may make the report less reliable (logs of several clusters
    /// mixed, timelines cut by their bound), one line each.
    pub notes: Vec<String>,
}

/// The scope the user asked for, in words (`namespace rollout-demo`,
/// `deployments rollout-demo/web`, `everything`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ScopeSummary {
    pub description: String,
}

/// Counts by severity.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub error: u64,
    pub warning: u64,
    pub info: u64,
    /// Background findings (not in the counts above).
    pub background: u64,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub schema_version: u32,
    /// `kascade <version>`.
    pub generator: String,
    pub scope: ScopeSummary,
    pub inputs: Inputs,
    pub totals: Totals,
    /// Root causes first (by severity, then kind, then time).
    pub findings: Vec<Finding>,
    /// The cascades the findings happened in.
    pub cascades: Vec<CascadeTimeline>,
    /// The scope's objects as a tree (bounded; `tree_omitted` counts the rest).
    pub tree: Vec<TreeNode>,
    pub tree_omitted: u64,
}

impl Report {
    /// The most severe finding's severity, background left out.
    pub fn worst(&self) -> Option<Severity> {
        self.findings
            .iter()
            .filter(|f| !f.background)
            .map(|f| f.severity)
            .max()
    }

    /// JSON (pretty, one document).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

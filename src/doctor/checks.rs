//! The judgement of `kascade doctor`: pure functions from [`Inputs`] to
//! checks, each OK, a warning, broken or skipped, with what to do. The
//! checks of the intake report are here, those made through the cluster
//! and the frontend in `cluster.rs`.

mod cluster;

use serde::{Deserialize, Serialize};

use super::{Inputs, Probe};
use crate::source::arrivals::{ClusterIntake, INTAKE_SCHEMA, IntakeReport};
use cluster::{clock_skew, frontend, rbac};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    /// Skipped: nothing to judge (no kubeconfig, no `--frontend`, not built yet).
    Skip,
    /// Works, but worse than it could.
    Warn,
    /// Broken: the exit code says so.
    Fail,
}

impl Status {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Skip => "SKIP",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Check {
    /// Stable id (`audit-events`, `audit-level`, …).
    pub id: String,
    pub status: Status,
    /// One line: what was found.
    pub summary: String,
    /// More lines, when there is more to say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// What to do about it (every warning and failure has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(id: &str, status: Status, summary: impl Into<String>) -> Check {
    Check {
        id: id.to_string(),
        status,
        summary: summary.into(),
        details: Vec::new(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
    fn detail(mut self, line: impl Into<String>) -> Self {
        self.details.push(line.into());
        self
    }
}

/// What the list-watch reads that matters to traces: the resources the
/// Helm chart's ClusterRole grants (`rbac.rules` in its values.yaml; a
/// test keeps the two equal), as `--watch-exclude` names them. A refusal
/// of any other resource (Secrets above all) is what the chart intends.
pub(crate) const NEEDED_RESOURCES: &[&str] = &[
    "pods",
    "nodes",
    "namespaces",
    "services",
    "endpoints",
    "events",
    "configmaps",
    "serviceaccounts",
    "persistentvolumeclaims",
    "persistentvolumes",
    "replicationcontrollers",
    "deployments.apps",
    "replicasets.apps",
    "statefulsets.apps",
    "daemonsets.apps",
    "controllerrevisions.apps",
    "jobs.batch",
    "cronjobs.batch",
    "endpointslices.discovery.k8s.io",
    "ingresses.networking.k8s.io",
    "networkpolicies.networking.k8s.io",
    "storageclasses.storage.k8s.io",
    "volumeattachments.storage.k8s.io",
    "events.events.k8s.io",
    "poddisruptionbudgets.policy",
    "leases.coordination.k8s.io",
];

/// Judges everything gathered.
pub(crate) fn judge(inputs: &Inputs, max_skew_ms: i64) -> Vec<Check> {
    let mut out = Vec::new();
    let intake = match &inputs.intake {
        Probe::Ok(r) if r.schema == INTAKE_SCHEMA => {
            out.push(check(
                "collector",
                Status::Ok,
                format!("reached {} ({})", inputs.admin_url, r.schema),
            ));
            Some(r)
        }
        Probe::Ok(r) => {
            out.push(
                check(
                    "collector",
                    Status::Fail,
                    format!(
                        "{} answers /intake with schema {:?}, not {INTAKE_SCHEMA}",
                        inputs.admin_url, r.schema
                    ),
                )
                .fix("run a kascade doctor of the collector's version"),
            );
            None
        }
        Probe::Failed(e) => {
            out.push(
                check(
                    "collector",
                    Status::Fail,
                    format!("cannot read {}/intake: {e}", inputs.admin_url),
                )
                .fix(
                    "--admin must be the collector's admin listener (`kascade collect --admin-listen`, \
                     default port 8091, plain HTTP); a collector older than `kascade doctor` has no /intake",
                ),
            );
            None
        }
    };
    let cluster = judged_cluster(inputs);
    if let Some(r) = intake {
        out.push(audit_events(r, &cluster, inputs.now_ms));
        out.push(cluster_names(r, &cluster));
        out.push(audit_level(r, &cluster));
        out.push(managed_fields(r, &cluster));
        out.push(export(r, inputs.now_ms));
    }
    out.push(rbac(inputs, intake, &cluster));
    out.push(clock_skew(inputs, max_skew_ms));
    out.push(frontend(inputs));
    match intake {
        Some(r) => out.push(admission_webhook(r, &cluster)),
        None => out.push(check(
            "admission-webhook",
            Status::Skip,
            "the collector's intake report is needed to judge the admission source",
        )),
    }
    out
}

/// The admission source (`--admission-listen`), for clusters whose audit
/// log cannot be received: calls arriving, and their writes shown stored.
fn admission_webhook(r: &IntakeReport, cluster: &str) -> Check {
    const ID: &str = "admission-webhook";
    if !r.admission_source {
        return check(
            ID,
            Status::Skip,
            "the collector serves no admission source (--admission-listen): it takes the audit webhook",
        );
    }
    if !r.watched_clusters.iter().any(|c| c == cluster) {
        return check(
            ID,
            Status::Fail,
            format!(
                "cluster {cluster} is not list-watched, and the admission source shows only writes the list-watch shows stored"
            ),
        )
        .fix(format!(
            "add --watch-cluster {cluster}=KUBECONFIG to the collector (the chart does it with collector.admissionSource.enabled)"
        ));
    }
    let by = r.admitted.get(cluster);
    let n = |outcome: &str| by.and_then(|b| b.get(outcome)).copied().unwrap_or(0);
    let total: u64 = by.map(|b| b.values().sum()).unwrap_or(0);
    if total == 0 {
        return check(
            ID,
            Status::Fail,
            format!("no admitted write of cluster {cluster} has reached the collector's admission source"),
        )
        .fix(format!(
            "install the ValidatingWebhookConfiguration that sends writes to https://<collector>:8443/admission/{cluster} \
             (the chart: collector.admissionSource.enabled=true; README, \"Managed clusters: the admission source\"); \
             with failurePolicy Ignore an apiserver that cannot reach kascade admits writes silently, and its log says \
             `failed calling webhook \"admission-source.kascade.io\"`"
        ));
    }
    let not_stored = n("not_persisted");
    let summary = format!(
        "{total} admitted writes from {cluster}: {} shown stored, {} changed nothing, {not_stored} not stored, \
         {} lost a conflict, {} found their object gone",
        n("persisted"),
        n("no_change"),
        n("conflict"),
        n("gone"),
    );
    // Refusals after admission happen (quotas), but not to most writes.
    if total >= 20 && not_stored * 2 > total {
        return check(ID, Status::Warn, summary).fix(format!(
            "most admitted writes never showed up stored: check that the list-watch of {cluster} runs \
             (watch-rbac) and that --admission-persist-wait covers its lag"
        ));
    }
    check(ID, Status::Ok, summary)
}

/// The cluster judged: `--cluster`, else the collector's default.
pub(crate) fn judged_cluster(inputs: &Inputs) -> String {
    match (&inputs.intake, inputs.cluster.is_empty()) {
        (Probe::Ok(r), true) => r.default_cluster.clone(),
        _ => inputs.cluster.clone(),
    }
}

fn seen<'a>(r: &'a IntakeReport, cluster: &str) -> Option<&'a ClusterIntake> {
    r.clusters
        .iter()
        .find(|c| c.name == cluster && c.events > 0)
}

fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..=119 => format!("{s}s ago"),
        120..=7199 => format!("{}min ago", s / 60),
        _ => format!("{}h ago", s / 3600),
    }
}

/// Names seen that the collector is not configured with.
fn unconfigured(r: &IntakeReport) -> Vec<&ClusterIntake> {
    r.clusters
        .iter()
        .filter(|c| c.events > 0 && !r.configured_clusters.contains(&c.name))
        .collect()
}

/// After this long without an event, a cluster's webhook may have stopped.
const QUIET_MS: u64 = 15 * 60 * 1000;

fn audit_events(r: &IntakeReport, cluster: &str, now_ms: u64) -> Check {
    const ID: &str = "audit-events";
    if let Some(c) = seen(r, cluster) {
        let when = ago(now_ms, c.last_seen_ms);
        if now_ms.saturating_sub(c.last_seen_ms) > QUIET_MS {
            return check(
                ID,
                Status::Warn,
                format!(
                    "{} audit events from cluster {cluster}, but the last {when}",
                    c.events
                ),
            )
            .fix(
                "a live cluster writes every few minutes: check the apiserver's log for \
                 `Error in audit plugin 'webhook'` (it cannot reach the collector) and that the \
                 apiserver still runs with --audit-webhook-config-file",
            );
        }
        return check(
            ID,
            Status::Ok,
            format!(
                "{} audit events from cluster {cluster}, the last {when}",
                c.events
            ),
        );
    }
    let c = check(
        ID,
        Status::Fail,
        format!("no audit event from cluster {cluster} has reached the collector"),
    );
    let others = unconfigured(r);
    if !others.is_empty() {
        return c
            .detail(format!("events do arrive under {}", names(&others)))
            .fix("the apiserver does send audit events, under another cluster name: see cluster-names");
    }
    c.fix(format!(
        "give the kube-apiserver an audit webhook: --audit-webhook-config-file=<kubeconfig whose server is \
         https://<collector>:8090/audit/{cluster}>, --audit-webhook-mode=batch and an --audit-policy-file \
         (docs/deployment.md, \"Running the collector against a cluster\"); its log says \
         `Error in audit plugin 'webhook'` when it cannot reach the collector, and the collector's \
         kascade_audit_events_rejected_total{{reason=\"unauthorized\"}} counts a wrong token"
    ))
}

fn names(cs: &[&ClusterIntake]) -> String {
    cs.iter()
        .map(|c| format!("{:?} ({} events)", c.name, c.events))
        .collect::<Vec<_>>()
        .join(", ")
}

fn cluster_names(r: &IntakeReport, cluster: &str) -> Check {
    const ID: &str = "cluster-names";
    let others = unconfigured(r);
    let configured = r.configured_clusters.join(", ");
    let mut c = if seen(r, cluster).is_none() && !others.is_empty() {
        let first = &others[0].name;
        check(
            ID,
            Status::Fail,
            format!(
                "audit events arrive as {} but none as {cluster:?}",
                names(&others)
            ),
        )
        .detail(format!("the collector is configured with: {configured}"))
        .fix(format!(
            "the webhook's URL path names the cluster: in the apiserver's audit webhook kubeconfig, \
             change the server's path /audit/{first} to /audit/{cluster} (or, if {first:?} is the \
             name you want, use it in --cluster / --watch-cluster and in kascade doctor --cluster)"
        ))
    } else if !r.configured_clusters.iter().any(|n| n == cluster) && seen(r, cluster).is_none() {
        check(
            ID,
            Status::Fail,
            format!("cluster {cluster:?} is not configured in the collector, and nothing arrived under it"),
        )
        .detail(format!("the collector is configured with: {configured}"))
        .fix(format!(
            "check the name: kascade doctor --cluster must be the name in the webhook's path \
             (/audit/NAME), which is also --watch-cluster NAME=… of the collector; configured: {configured}"
        ))
    } else if !others.is_empty() {
        check(
            ID,
            Status::Ok,
            format!("{cluster} is as configured; other names also arrive: {}", names(&others)),
        )
        .detail(format!(
            "names not in --cluster/--watch-cluster get audit spans but no list-watch (configured: {configured})"
        ))
    } else {
        check(
            ID,
            Status::Ok,
            format!("every name seen is configured ({configured})"),
        )
    };
    if r.untracked_events > 0 {
        c = check(
            ID,
            c.status.max(Status::Warn),
            format!(
                "{}; {} events came under more names than the collector tracks",
                c.summary, r.untracked_events
            ),
        )
        .fix(c.fix.clone().unwrap_or_else(|| {
            "many distinct names in webhook paths: check that senders name their cluster, not a per-node or random value"
                .to_string()
        }));
    }
    c
}

fn audit_level(r: &IntakeReport, cluster: &str) -> Check {
    const ID: &str = "audit-level";
    let Some(c) = seen(r, cluster) else {
        return check(
            ID,
            Status::Skip,
            format!("no audit event from {cluster} to judge"),
        );
    };
    let total: u64 = c.writes_by_level.values().sum();
    if total == 0 {
        return check(ID, Status::Skip, format!("no write from {cluster} yet"));
    }
    let at = |l: &str| c.writes_by_level.get(l).copied().unwrap_or(0);
    let (metadata, request) = (at("Metadata"), at("Request"));
    if metadata == 0 && request == 0 {
        return check(
            ID,
            Status::Ok,
            format!("all {total} writes from {cluster} arrive at RequestResponse"),
        );
    }
    let watched = r.watched_clusters.iter().any(|w| w == cluster);
    let mut out = if metadata > 0 {
        let mut by: Vec<(&String, &u64)> = c.metadata_writes.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut list = by
            .iter()
            .map(|(r, n)| format!("{r} ({n})"))
            .collect::<Vec<_>>()
            .join(", ");
        if c.metadata_writes_unnamed > 0 {
            list.push_str(&format!(", {} more", c.metadata_writes_unnamed));
        }
        check(
            ID,
            Status::Fail,
            format!("{metadata} of {total} writes from {cluster} arrive at level Metadata: {list}"),
        )
        .detail(
            "a Metadata-level event carries no object: kascade cannot show what the write changed \
             (no diff, no snapshot) nor judge the object's readiness after it",
        )
    } else {
        check(
            ID,
            Status::Fail,
            format!("{request} of {total} writes from {cluster} arrive at level Request"),
        )
        .detail("a Request-level event has no response: the object as stored is missing")
    };
    if watched {
        out = out.detail(
            "the collector list-watches this cluster, so those objects' changes come from the watch, \
             without who made them or which request",
        );
    }
    out.fix(
        "log writes at RequestResponse: in the apiserver's audit policy, a rule \
         `- level: RequestResponse` with `verbs: [create, update, patch, delete, deletecollection]` \
         before any rule that puts these resources at Metadata or Request \
         (deploy/examples/audit-policy.yaml); the apiserver reads the policy at start",
    )
}

fn managed_fields(r: &IntakeReport, cluster: &str) -> Check {
    const ID: &str = "managed-fields";
    let Some(c) = seen(r, cluster) else {
        return check(
            ID,
            Status::Skip,
            format!("no audit event from {cluster} to judge"),
        );
    };
    if c.managed_fields == 0 {
        return check(ID, Status::Ok, "audit events come without managedFields");
    }
    check(
        ID,
        Status::Warn,
        format!(
            "{} of {} audit events from {cluster} carry metadata.managedFields",
            c.managed_fields, c.events
        ),
    )
    .detail("kascade never shows them; they are about a fifth of each event's bytes")
    .fix("set `omitManagedFields: true` in the apiserver's audit policy (Kubernetes ≥ 1.23)")
}

fn export(r: &IntakeReport, now_ms: u64) -> Check {
    const ID: &str = "export";
    if r.outputs.is_empty() {
        return check(ID, Status::Skip, "the collector has no export output");
    }
    let mut worst = Status::Ok;
    let mut lines = Vec::new();
    let mut fix = None;
    for o in &r.outputs {
        if o.failing > 0 {
            worst = Status::Fail;
            let since = if o.last_success_ms == 0 {
                "never succeeded".to_string()
            } else {
                format!("last success {}", ago(now_ms, o.last_success_ms))
            };
            lines.push(format!(
                "{}: failing, {} attempts since the last success ({since}); last error {}: {}",
                o.target,
                o.failing,
                ago(now_ms, o.last_failure_ms),
                o.last_error
            ));
            fix = Some(format!(
                "make the OTLP receiver at {} reachable (is Jaeger up? the endpoint and --otlp-protocol right?); \
                 until then accepted audit batches wait in the spool and spans are retried for \
                 --export-retry-for, then counted in kascade_spans_dropped_total",
                o.target
            ));
        } else if o.succeeded == 0 {
            lines.push(format!("{}: nothing sent yet", o.target));
        } else {
            let last_err = if o.failed > 0 {
                format!(
                    "; {} failed attempts in all, the last {}",
                    o.failed,
                    ago(now_ms, o.last_failure_ms)
                )
            } else {
                String::new()
            };
            lines.push(format!(
                "{}: healthy, {} requests, the last {}{last_err}",
                o.target,
                o.succeeded,
                ago(now_ms, o.last_success_ms)
            ));
        }
    }
    let summary = if lines.len() == 1 {
        lines.remove(0)
    } else {
        format!("{} outputs", r.outputs.len())
    };
    let mut c = check(ID, worst, summary);
    c.details = lines;
    c.fix = fix;
    c
}

/// Whether anything is broken.
pub(crate) fn broken(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

#[cfg(test)]
mod tests;

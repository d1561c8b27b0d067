//! The judgement of `kascade doctor`: pure functions from [`Inputs`] to
//! checks, each OK, a warning, broken or skipped, with what to do.

use serde::{Deserialize, Serialize};

use super::{Inputs, Probe};
use crate::source::arrivals::{ClusterIntake, INTAKE_SCHEMA, IntakeReport};

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
    out.push(check(
        "admission-webhook",
        Status::Skip,
        "the admission-webhook source does not exist yet: nothing to check",
    ));
    out
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

fn rbac(inputs: &Inputs, intake: Option<&IntakeReport>, cluster: &str) -> Check {
    const ID: &str = "watch-rbac";
    let Some(probe) = &inputs.rbac else {
        return check(
            ID,
            Status::Skip,
            "no --kubeconfig: list-watch permissions not checked",
        );
    };
    let access = match probe {
        Probe::Ok(a) => a,
        Probe::Failed(e) => {
            return check(ID, Status::Fail, format!("cannot ask the apiserver: {e}")).fix(
                "--kubeconfig must reach the cluster's apiserver as the identity the collector watches with \
                 (its --watch-cluster NAME=KUBECONFIG)",
            );
        }
    };
    let denied: Vec<&super::ResourceAccess> =
        access.iter().filter(|a| !(a.list && a.watch)).collect();
    let (broken, on_purpose): (Vec<_>, Vec<_>) = denied
        .into_iter()
        .partition(|a| NEEDED_RESOURCES.contains(&a.resource.as_str()));
    let forbidden_now = intake
        .and_then(|r| r.watch_forbidden.get(cluster))
        .copied()
        .unwrap_or(0);
    let mut c = if broken.is_empty() {
        check(
            ID,
            Status::Ok,
            format!(
                "list and watch allowed on every resource traces need ({} of {} served)",
                access.len() - on_purpose.len(),
                access.len()
            ),
        )
    } else {
        let list = broken
            .iter()
            .map(|a| {
                let verbs = match (a.list, a.watch) {
                    (false, false) => "list, watch",
                    (false, true) => "list",
                    _ => "watch",
                };
                format!("{} ({verbs})", a.resource)
            })
            .collect::<Vec<_>>()
            .join(", ");
        check(
            ID,
            Status::Fail,
            format!("the watch's identity may not list/watch: {list}"),
        )
        .detail("those objects' changes are missing from traces unless audit logs them")
        .fix(format!(
            "grant get, list and watch on them to the identity of --kubeconfig (the Helm chart's \
             ClusterRole `kascade-reader` (`<fullname>-reader`) has them): e.g. `kubectl create clusterrole kascade-extra --verb=get,list,watch --resource={}` \
             and bind it to that user or ServiceAccount; the collector checks again with backoff (≤ 5 min)",
            broken.iter().map(|a| a.resource.as_str()).collect::<Vec<_>>().join(",")
        ))
    };
    if !on_purpose.is_empty() {
        const SHOWN: usize = 8;
        let mut list = on_purpose
            .iter()
            .take(SHOWN)
            .map(|a| a.resource.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if on_purpose.len() > SHOWN {
            list.push_str(&format!(" and {} more", on_purpose.len() - SHOWN));
        }
        c = c.detail(format!(
            "not readable, as the Helm chart's ClusterRole intends (Secrets on purpose): {list}"
        ));
    }
    if let Some(r) = intake {
        if !r.watched_clusters.iter().any(|w| w == cluster) {
            c = c.detail(format!(
                "the collector does not list-watch {cluster} (no --watch-cluster {cluster}=KUBECONFIG): \
                 traces show audit writes only, no Events"
            ));
        } else {
            c = c.detail(format!(
                "the collector's list-watch of {cluster} is refused {forbidden_now} resources right now, \
                 those not readable on purpose included (kascade_watch_forbidden_resources)"
            ));
        }
    }
    c
}

fn clock_skew(inputs: &Inputs, max_skew_ms: i64) -> Check {
    const ID: &str = "clock-skew";
    let Some(api) = &inputs.apiserver_clock else {
        return check(
            ID,
            Status::Skip,
            "no --kubeconfig: apiserver clock not read",
        );
    };
    let api = match api {
        Probe::Ok(r) => r,
        Probe::Failed(e) => {
            return check(ID, Status::Skip, format!("apiserver clock not read: {e}"));
        }
    };
    let Some(col) = &inputs.collector_clock else {
        return check(ID, Status::Skip, "collector clock not read");
    };
    // apiserver − collector = (apiserver − doctor) − (collector − doctor).
    let (a_lo, a_hi) = api.offset_range();
    let (c_lo, c_hi) = col.offset_range();
    let (lo, hi) = (a_lo - c_hi, a_hi - c_lo);
    if lo > max_skew_ms || hi < -max_skew_ms {
        let (ahead, by) = if lo > 0 {
            ("ahead of", lo)
        } else {
            ("behind", -hi)
        };
        return check(
            ID,
            Status::Fail,
            format!(
                "the apiserver's clock is {ahead} the collector's by at least {:.1}s (more than {:.1}s)",
                by as f64 / 1000.0,
                max_skew_ms as f64 / 1000.0
            ),
        )
        .detail(
            "audit times are the apiserver's, watch and Event delivery times the collector's: \
             skew misorders causes and effects",
        )
        .fix("synchronise both hosts' clocks (NTP, chrony or systemd-timesyncd)");
    }
    check(
        ID,
        Status::Ok,
        format!(
            "apiserver − collector between {:.1}s and {:.1}s (the apiserver's Date header has whole seconds)",
            lo as f64 / 1000.0,
            hi as f64 / 1000.0
        ),
    )
}

fn frontend(inputs: &Inputs) -> Check {
    const ID: &str = "frontend";
    let (Some(url), Some(probe)) = (&inputs.frontend_url, &inputs.frontend) else {
        return check(ID, Status::Skip, "no --frontend: not checked");
    };
    match probe {
        Probe::Ok(p) if p.status == 200 => {
            check(ID, Status::Ok, format!("{url} reaches its raw store"))
        }
        Probe::Ok(p) => check(
            ID,
            Status::Fail,
            format!("{url} cannot read its raw store: {}", p.body.trim()),
        )
        .fix(
            "the frontend's --jaeger-grpc-url (remote storage API) or --jaeger-url must reach the Jaeger \
             the collector exports to; see its log",
        ),
        Probe::Failed(e) => check(ID, Status::Fail, format!("cannot reach {url}: {e}")).fix(
            "--frontend must be the frontend's --http-listen address (/readyz/raw; a frontend older than \
             kascade doctor lacks it)",
        ),
    }
}

/// Whether anything is broken.
pub(crate) fn broken(checks: &[Check]) -> bool {
    checks.iter().any(|c| c.status == Status::Fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `kascade doctor` gathered from the real harness, healthy and
    /// with each fault made (tests/e2e_doctor.rs captures them).
    fn captured(name: &str) -> Inputs {
        let path = format!(
            "{}/e2e/fixtures/doctor/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let inputs: Inputs = serde_json::from_str(&text).unwrap();
        assert_eq!(inputs.schema, super::super::INPUTS_SCHEMA);
        inputs
    }

    const MAX_SKEW_MS: i64 = 2000;

    fn get(checks: &[Check], id: &str) -> Check {
        checks.iter().find(|c| c.id == id).cloned().unwrap()
    }

    /// Each fault fails its own check, and only the checks it affects; the
    /// healthy harness fails none (every check judged both ways).
    #[test]
    fn each_captured_fault_fails_its_check_and_the_healthy_harness_none() {
        let healthy = judge(&captured("healthy"), MAX_SKEW_MS);
        assert!(!broken(&healthy));
        for c in &healthy {
            let want = if c.id == "admission-webhook" {
                Status::Skip
            } else {
                Status::Ok
            };
            assert_eq!(c.status, want, "{c:?}");
        }
        let cases: &[(&str, &[&str])] = &[
            ("metadata-policy", &["audit-level"]),
            ("no-webhook", &["audit-events"]),
            ("wrong-cluster-name", &["audit-events", "cluster-names"]),
            (
                "rbac-denied",
                &["audit-events", "cluster-names", "watch-rbac"],
            ),
            (
                "jaeger-down",
                &["audit-events", "cluster-names", "watch-rbac", "export"],
            ),
        ];
        for (name, failing) in cases {
            let checks = judge(&captured(name), MAX_SKEW_MS);
            assert!(broken(&checks), "{name}");
            for c in &checks {
                if failing.contains(&c.id.as_str()) {
                    assert_eq!(c.status, Status::Fail, "{name}: {c:?}");
                    assert!(c.fix.is_some(), "{name}: {c:?}");
                } else {
                    assert_ne!(c.status, Status::Fail, "{name}: {c:?}");
                }
            }
        }
    }

    #[test]
    fn the_failing_checks_name_the_fault_and_its_fix() {
        let c = get(
            &judge(&captured("metadata-policy"), MAX_SKEW_MS),
            "audit-level",
        );
        assert!(
            c.summary.contains("level Metadata") && c.summary.contains("pods ("),
            "{c:?}"
        );
        assert!(c.fix.unwrap().contains("RequestResponse"));

        let c = get(&judge(&captured("no-webhook"), MAX_SKEW_MS), "audit-events");
        assert!(
            c.summary.starts_with("no audit event from cluster remote"),
            "{c:?}"
        );
        assert!(c.fix.unwrap().contains("/audit/remote"));

        let c = get(
            &judge(&captured("wrong-cluster-name"), MAX_SKEW_MS),
            "cluster-names",
        );
        assert!(
            c.summary.contains("\"remote-typo\"") && c.summary.contains("none as \"remote\""),
            "{c:?}"
        );
        assert!(
            c.fix
                .unwrap()
                .contains("/audit/remote-typo to /audit/remote")
        );

        let c = get(&judge(&captured("rbac-denied"), MAX_SKEW_MS), "watch-rbac");
        assert!(c.summary.contains("configmaps (list, watch)"), "{c:?}");
        assert!(c.fix.unwrap().contains("--resource=configmaps"));

        let c = get(&judge(&captured("jaeger-down"), MAX_SKEW_MS), "export");
        assert!(
            c.summary.contains(": failing") && c.summary.contains("last error"),
            "{c:?}"
        );
        assert!(c.fix.unwrap().contains("is Jaeger up?"));
    }

    /// The skew is made by moving the captured apiserver reading (a host
    /// whose clock is off cannot be made here without root).
    #[test]
    fn clock_skew_beyond_the_limit_fails_either_way() {
        let inputs = captured("healthy");
        assert_eq!(
            get(&judge(&inputs, MAX_SKEW_MS), "clock-skew").status,
            Status::Ok
        );
        for shift in [10_000i64, -10_000] {
            let mut skewed = inputs.clone();
            let Some(Probe::Ok(r)) = &mut skewed.apiserver_clock else {
                panic!("the capture has the apiserver's clock");
            };
            r.remote_ms = (r.remote_ms as i64 + shift) as u64;
            let c = get(&judge(&skewed, MAX_SKEW_MS), "clock-skew");
            assert_eq!(c.status, Status::Fail, "{shift}: {c:?}");
            let side = if shift > 0 { "ahead of" } else { "behind" };
            assert!(c.summary.contains(side), "{c:?}");
            // A looser limit takes it.
            assert_eq!(
                get(&judge(&skewed, 20_000), "clock-skew").status,
                Status::Ok
            );
        }
    }

    #[test]
    fn an_unreachable_collector_or_frontend_fails_with_where_to_look() {
        let mut inputs = captured("healthy");
        inputs.intake = Probe::Failed("connection refused".to_string());
        let checks = judge(&inputs, MAX_SKEW_MS);
        let c = get(&checks, "collector");
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.unwrap().contains("--admin-listen"));
        // Nothing is judged of what the collector would have said.
        assert!(checks.iter().all(|c| c.id != "audit-events"));

        let mut inputs = captured("healthy");
        inputs.frontend = Some(Probe::Ok(super::super::FrontendProbe {
            status: 503,
            body: "the raw store does not answer: connection refused".to_string(),
        }));
        let c = get(&judge(&inputs, MAX_SKEW_MS), "frontend");
        assert_eq!(c.status, Status::Fail);
        assert!(c.summary.contains("connection refused"), "{c:?}");
    }

    /// The resources doctor requires are those the Helm chart grants.
    #[test]
    fn needed_resources_are_what_the_chart_grants() {
        let path = format!(
            "{}/deploy/helm/kascade/values.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let values: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut granted = Vec::new();
        for rule in values["rbac"]["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    let (g, r) = (group.as_str().unwrap(), r.as_str().unwrap());
                    granted.push(if g.is_empty() {
                        r.to_string()
                    } else {
                        format!("{r}.{g}")
                    });
                }
            }
        }
        granted.sort();
        let mut needed: Vec<String> = NEEDED_RESOURCES.iter().map(|s| s.to_string()).collect();
        needed.sort();
        assert_eq!(needed, granted);
    }
}

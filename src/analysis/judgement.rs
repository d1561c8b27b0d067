//! What counts as a problem, decided once for every output: `kascade
//! explain`'s findings, the frontend's error marks in all five display
//! modes, `kascade trace` and `kascade analyze` all ask this module.
//!
//! Three questions:
//! - **A refused write** ([`Refusal`]): routine (a conflict its writer
//!   retries, the delete of something already gone), denied by a policy,
//!   or failed.
//! - **A Warning Event** ([`warning_severity`]): a failure the object did
//!   not recover from is an error; one it recovered from (a Pod
//!   `FailedScheduling` a moment before its claim bound) is worth a note,
//!   never an error or a warning.
//! - **The cluster's background** ([`Writer`], [`is_background`]): what the
//!   cluster's own components did wrong before any user's change and
//!   unrelated to it (an apiserver's start-up conflicts, a component
//!   retrying a write it is not allowed) is listed apart, never an error.
//!   It is decided by who wrote, when, and in relation to what — never by a
//!   message text or an object name, so it holds for the start-up of any
//!   distribution.

use serde::Serialize;

/// How bad a problem is. Ordered: `Info` < `Warning` < `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing, not wrong: a hop far slower than its edge's usual, a
    /// Warning the object recovered from.
    Info,
    /// Something did not finish, without a failure that says why.
    Warning,
    /// A refused write, a failure reported by a controller, an object
    /// that ended failed.
    Error,
}

impl Severity {
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// Who made a write: the cluster's own components or its users (people,
/// CI jobs, and the workloads and operators they run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    Cluster,
    User,
}

/// Namespaces whose service accounts are the cluster's own components.
const CLUSTER_NAMESPACES: &[&str] = &["kube-system", "kube-public", "kube-node-lease"];

/// Identities of managed control planes' own components (EKS, AKS), which
/// do not use the `system:` prefix.
const MANAGED_CONTROL_PLANE_PREFIXES: &[&str] = &["eks:", "aksService", "masterclient"];

impl Writer {
    /// Classifies an audit user name: `system:` identities (the apiserver,
    /// controllers, scheduler, nodes, kube-system service accounts) and
    /// managed control planes' components are the cluster; `system:admin`
    /// (a person with the admin credentials), service accounts of other
    /// namespaces (workloads, operators) and everyone else are users.
    pub fn of(user: &str) -> Writer {
        if user.is_empty() {
            // A change only a watch saw: nothing says who made it.
            return Writer::User;
        }
        if let Some(sa) = user.strip_prefix("system:serviceaccount:") {
            let namespace = sa.split(':').next().unwrap_or_default();
            return if CLUSTER_NAMESPACES.contains(&namespace) {
                Writer::Cluster
            } else {
                Writer::User
            };
        }
        if user == "system:admin" {
            return Writer::User;
        }
        if user.starts_with("system:")
            || MANAGED_CONTROL_PLANE_PREFIXES
                .iter()
                .any(|p| user.starts_with(p))
        {
            Writer::Cluster
        } else {
            Writer::User
        }
    }
}

/// What a refused write (HTTP status ≥ 400) was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// An optimistic-concurrency conflict on an update or patch: its
    /// writer reads the newer version and tries again.
    Conflict,
    /// The delete of an object already gone, or a write to an object
    /// already removed (a kubelet's late status update): the goal holds.
    AlreadyGone,
    /// Refused by a policy: quota, admission, Pod Security, RBAC.
    Denied(&'static str),
    /// Anything else: invalid (422), already exists (409 on a create),
    /// not found, server errors.
    Failed,
}

impl Refusal {
    /// Judges a refused write from its status code, verb, the apiserver's
    /// message, and whether the object was already gone.
    pub fn of(code: i32, verb: &str, message: &str, target_gone: bool) -> Refusal {
        if code == 404 && (verb == "delete" || verb == "deletecollection" || target_gone) {
            return Refusal::AlreadyGone;
        }
        if code == 409 && matches!(verb, "update" | "patch") {
            return Refusal::Conflict;
        }
        if let Some(policy) = denial(code, message) {
            return Refusal::Denied(policy);
        }
        Refusal::Failed
    }

    /// Expected and handled by its writer.
    pub fn is_routine(self) -> bool {
        matches!(self, Refusal::Conflict | Refusal::AlreadyGone)
    }

    /// Whether the refused write is shown in error (red in every display
    /// mode, an error in explain): only when its severity is
    /// [`Severity::Error`].
    pub fn is_error(self, code: i32) -> bool {
        self.severity(code) == Some(Severity::Error)
    }

    /// How bad it is, before knowing whether it was retried: a policy's
    /// refusal and failures are errors; a conflict is a warning until its
    /// writer's next write succeeds (then it is not reported at all); a
    /// create of something that exists (409) or of something missing (404)
    /// is a warning; a delete of something gone is nothing.
    pub fn severity(self, code: i32) -> Option<Severity> {
        match self {
            Refusal::AlreadyGone => None,
            Refusal::Conflict => Some(Severity::Warning),
            Refusal::Denied(_) => Some(Severity::Error),
            Refusal::Failed if code == 409 || code == 404 => Some(Severity::Warning),
            Refusal::Failed => Some(Severity::Error),
        }
    }
}

/// Which policy refused a write, if one did.
fn denial(code: i32, message: &str) -> Option<&'static str> {
    if message.contains("exceeded quota") {
        Some("quota")
    } else if message.contains("admission webhook") || message.contains("denied the request") {
        Some("admission")
    } else if message.contains("violates PodSecurity") {
        Some("Pod Security admission")
    } else if code == 403 && message.contains(" cannot ") {
        Some("RBAC")
    } else if code == 403 {
        Some("policy")
    } else {
        None
    }
}

/// Event reasons that report a failure (an error when the object did not
/// recover); other Warning Events are warnings.
const FAILURE_REASONS: &[&str] = &[
    "FailedScheduling",
    "FailedCreate",
    "FailedDelete",
    "FailedMount",
    "FailedAttachVolume",
    "FailedMapVolume",
    "ProvisioningFailed",
    "BackOff",
    "Failed",
    "ErrImagePull",
    "ImagePullBackOff",
    "InspectFailed",
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedKillPod",
    "FailedCreatePodSandBox",
    "Evicted",
    "OOMKilling",
    "FailedBinding",
    "ExceededGracePeriod",
];

/// How bad a Warning Event is: a failure the object did not recover from
/// is an error, another Warning it did not recover from a warning, and
/// any Warning the object recovered from (it became ready, or settled,
/// after it) a note.
pub fn warning_severity(reason: &str, recovered: bool) -> Severity {
    if recovered {
        Severity::Info
    } else if FAILURE_REASONS.contains(&reason) {
        Severity::Error
    } else {
        Severity::Warning
    }
}

/// Whether a problem belongs to the cluster's background: the cascade it
/// happened in was started by the cluster itself (or by nothing the log
/// shows), it began before the first cascade a user started, and no
/// user-started cascade ever touched its object. Such problems are listed
/// last and are never errors: they were there before the run and stayed
/// out of its way.
pub fn is_background(
    started_by: Option<Writer>,
    began: std::time::SystemTime,
    first_user_cascade: Option<std::time::SystemTime>,
    touched_by_user_cascade: bool,
) -> bool {
    started_by != Some(Writer::User)
        && first_user_cascade.is_none_or(|t| began < t)
        && !touched_by_user_cascade
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn writers_are_told_apart_by_identity() {
        for cluster in [
            "system:apiserver",
            "system:kube-controller-manager",
            "system:kube-scheduler",
            "system:node:node-1",
            "system:serviceaccount:kube-system:replicaset-controller",
            "system:serviceaccount:kube-node-lease:x",
            "eks:addon-manager",
        ] {
            assert_eq!(Writer::of(cluster), Writer::Cluster, "{cluster}");
        }
        for user in [
            "kascade-e2e-admin",
            "kubernetes-admin",
            "system:admin",
            "system:serviceaccount:argocd:argocd-application-controller",
            "alice@example.com",
            "",
        ] {
            assert_eq!(Writer::of(user), Writer::User, "{user}");
        }
    }

    #[test]
    fn routine_refusals_are_conflicts_and_deletes_of_what_is_gone() {
        assert_eq!(Refusal::of(409, "update", "", false), Refusal::Conflict);
        assert_eq!(Refusal::of(409, "patch", "", false), Refusal::Conflict);
        assert_eq!(Refusal::of(404, "delete", "", false), Refusal::AlreadyGone);
        assert_eq!(Refusal::of(404, "update", "", true), Refusal::AlreadyGone);
        assert!(Refusal::of(404, "delete", "", false).is_routine());
        assert!(!Refusal::of(404, "delete", "", false).is_error(404));
        assert!(!Refusal::of(409, "update", "", false).is_error(409));
        // A create of something that exists, a write to something missing:
        // not routine, but not an error either.
        let exists = Refusal::of(409, "create", "already exists", false);
        assert!(!exists.is_routine());
        assert_eq!(exists.severity(409), Some(Severity::Warning));
        assert_eq!(
            Refusal::of(404, "update", "not found", false).severity(404),
            Some(Severity::Warning)
        );
        assert!(!exists.is_error(409));
        let invalid = Refusal::of(422, "create", "is invalid", false);
        assert_eq!(invalid.severity(422), Some(Severity::Error));
        assert!(invalid.is_error(422));
        assert!(Refusal::of(500, "update", "etcdserver: timeout", false).is_error(500));
    }

    #[test]
    fn denials_name_their_policy() {
        let quota = "pods \"a\" is forbidden: exceeded quota: pods, requested: pods=1";
        assert_eq!(
            Refusal::of(403, "create", quota, false),
            Refusal::Denied("quota")
        );
        let rbac = "pods is forbidden: User \"x\" cannot create resource \"pods\"";
        assert_eq!(
            Refusal::of(403, "create", rbac, false),
            Refusal::Denied("RBAC")
        );
        let webhook = "admission webhook \"deny.example.com\" denied the request: no";
        assert_eq!(
            Refusal::of(400, "create", webhook, false),
            Refusal::Denied("admission")
        );
        assert_eq!(
            Refusal::Denied("quota").severity(403),
            Some(Severity::Error)
        );
    }

    #[test]
    fn a_recovered_warning_is_a_note_and_an_unrecovered_failure_an_error() {
        assert_eq!(warning_severity("FailedScheduling", true), Severity::Info);
        assert_eq!(warning_severity("FailedScheduling", false), Severity::Error);
        assert_eq!(warning_severity("Unhealthy", false), Severity::Warning);
    }

    #[test]
    fn background_is_the_clusters_own_before_and_apart_from_users() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let later = t0 + Duration::from_secs(10);
        let cluster = Some(Writer::Cluster);
        assert!(is_background(cluster, t0, Some(later), false));
        assert!(is_background(None, t0, None, false));
        // Started by a user, after a user's first change, or touching what
        // a user's change touched: the run's own.
        assert!(!is_background(Some(Writer::User), t0, Some(later), false));
        assert!(!is_background(cluster, later, Some(t0), false));
        assert!(!is_background(cluster, t0, Some(later), true));
    }
}

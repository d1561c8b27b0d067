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
pub(crate) enum Writer {
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
    pub(crate) fn of(user: &str) -> Writer {
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
pub(crate) enum Refusal {
    /// An optimistic-concurrency conflict on an update or patch: its
    /// writer reads the newer version and tries again.
    Conflict,
    /// The delete of an object already gone, or a write to an object
    /// already removed (a kubelet's late status update): the goal holds.
    AlreadyGone,
    /// A create of something that exists: a controller's idempotent
    /// create (it treats the answer as success), a user's failed command.
    AlreadyExists,
    /// Refused because its namespace is being deleted (a controller
    /// recreating content): what the namespace's own state says, not a
    /// failure of its own.
    NamespaceTerminating,
    /// Refused by a policy: quota, admission, Pod Security, RBAC.
    Denied(&'static str),
    /// A write of an object that does not exist (an update, patch or
    /// status write answered 404).
    NotFound,
    /// Anything else: invalid (422), a create answered 404 (the resource
    /// is not served), server errors.
    Failed,
}

impl Refusal {
    /// Judges a refused write from its status code, verb, the apiserver's
    /// message, and whether the object was already gone.
    pub(crate) fn of(code: i32, verb: &str, message: &str, target_gone: bool) -> Refusal {
        if code == 404 && (verb == "delete" || verb == "deletecollection" || target_gone) {
            return Refusal::AlreadyGone;
        }
        if code == 409 && matches!(verb, "update" | "patch") {
            return Refusal::Conflict;
        }
        if code == 404 && verb != "create" {
            return Refusal::NotFound;
        }
        if code == 409 && verb == "create" {
            return Refusal::AlreadyExists;
        }
        if code == 403 && message.contains("because it is being terminated") {
            return Refusal::NamespaceTerminating;
        }
        if let Some(policy) = denial(code, message) {
            return Refusal::Denied(policy);
        }
        Refusal::Failed
    }

    /// Expected and handled by its writer.
    #[cfg(test)]
    pub(crate) fn is_routine(self) -> bool {
        matches!(
            self,
            Refusal::Conflict | Refusal::AlreadyGone | Refusal::NamespaceTerminating
        )
    }

    /// Whether the refused write is shown in error (red in every display
    /// mode, an error in explain): only when its severity is
    /// [`Severity::Error`].
    pub(crate) fn is_error(self) -> bool {
        self.severity(Writer::User) == Some(Severity::Error)
    }

    /// How bad it is, before knowing whether it was retried: a policy's
    /// refusal and failures are errors; a conflict is a warning until its
    /// writer's next write succeeds (then it is not reported at all); a
    /// user's create of something that exists and a write of something
    /// missing are warnings; a delete of something gone, a cluster
    /// component's idempotent create and content refused in a namespace
    /// being deleted are nothing.
    pub(crate) fn severity(self, writer: Writer) -> Option<Severity> {
        match self {
            Refusal::AlreadyGone | Refusal::NamespaceTerminating => None,
            Refusal::AlreadyExists if writer == Writer::Cluster => None,
            Refusal::Conflict | Refusal::AlreadyExists | Refusal::NotFound => {
                Some(Severity::Warning)
            }
            Refusal::Denied(_) | Refusal::Failed => Some(Severity::Error),
        }
    }
}

/// A refusal the apiserver gave no message for, in words: a create
/// answered 404 means no API serves the resource (for a custom resource:
/// its CustomResourceDefinition is missing).
pub(crate) fn unexplained_refusal(resource: &str, group: &str, verb: &str, code: i32) -> String {
    if code == 404 && verb == "create" {
        let resource = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        // Custom resources' groups have a dot (CRDs require one).
        let hint = if group.contains('.') {
            ": is its CustomResourceDefinition installed?"
        } else {
            ""
        };
        format!("the apiserver does not serve {resource} (HTTP 404 on create){hint}")
    } else {
        format!("HTTP {code}")
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
pub(crate) fn warning_severity(reason: &str, recovered: bool) -> Severity {
    if recovered {
        Severity::Info
    } else if FAILURE_REASONS.contains(&reason) {
        Severity::Error
    } else {
        Severity::Warning
    }
}

/// How bad a write that left its object failed (readiness `Failed`: an
/// image that cannot be pulled, a Job past its back-off limit) is: an
/// error unless the object recovered later (none then), as a Warning
/// Event's failure is.
pub(crate) fn left_failed_severity(recovered: bool) -> Option<Severity> {
    (!recovered).then_some(Severity::Error)
}

/// Who set one field of an object, write by write: tells writers fighting
/// over it (the field changing hands back and forth between writers that
/// each set it again and again) from a new owner taking over or a person
/// correcting a controller once.
#[derive(Clone, Debug)]
pub(crate) struct FieldOwnership<W> {
    last: Option<W>,
    handovers: u64,
    /// (writer, times it set the field), at most [`FIELD_WRITERS`].
    writers: Vec<(W, u64)>,
}

impl<W> Default for FieldOwnership<W> {
    fn default() -> Self {
        Self {
            last: None,
            handovers: 0,
            writers: Vec::new(),
        }
    }
}

/// Writers remembered per field.
const FIELD_WRITERS: usize = 4;
/// A field that changed hands this often, between at least two writers
/// that each set it twice or more, is fought over.
const FIGHT_HANDOVERS: u64 = 4;

impl<W: PartialEq + Clone> FieldOwnership<W> {
    /// `writer` changed the field.
    pub(crate) fn set(&mut self, writer: &W) {
        if self.last.as_ref().is_some_and(|l| l != writer) {
            self.handovers += 1;
        }
        self.last = Some(writer.clone());
        match self.writers.iter().position(|(w, _)| w == writer) {
            Some(i) => self.writers[i].1 += 1,
            None if self.writers.len() < FIELD_WRITERS => self.writers.push((writer.clone(), 1)),
            None => {}
        }
    }

    /// Times the field changed hands.
    pub(crate) fn handovers(&self) -> u64 {
        self.handovers
    }

    /// The writers that set it twice or more, with how often.
    pub(crate) fn repeat_writers(&self) -> impl Iterator<Item = (&W, u64)> {
        self.writers
            .iter()
            .filter(|(_, n)| *n >= 2)
            .map(|(w, n)| (w, *n))
    }

    /// Whether the writers fight over the field: an error wherever shown.
    pub(crate) fn is_fight(&self) -> bool {
        self.handovers >= FIGHT_HANDOVERS && self.repeat_writers().count() >= 2
    }
}

/// Whether a problem belongs to the cluster's background: the cascade it
/// happened in was started by the cluster itself (or by nothing the log
/// shows), it began before the first cascade a user started, and no
/// user-started cascade ever touched its object. Such problems are listed
/// last and are never errors: they were there before the run and stayed
/// out of its way.
pub(crate) fn is_background(
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
        assert!(!Refusal::of(404, "delete", "", false).is_error());
        assert!(!Refusal::of(409, "update", "", false).is_error());
        // A create of something that exists, a write to something missing:
        // not routine, but not an error either.
        let exists = Refusal::of(409, "create", "already exists", false);
        assert_eq!(exists, Refusal::AlreadyExists);
        assert_eq!(exists.severity(Writer::User), Some(Severity::Warning));
        assert_eq!(exists.severity(Writer::Cluster), None);
        assert_eq!(
            Refusal::of(404, "update", "not found", false).severity(Writer::User),
            Some(Severity::Warning)
        );
        // A create answered 404: the resource is not served.
        assert!(Refusal::of(404, "create", "", false).is_error());
        let terminating = "pods \"a-\" is forbidden: unable to create new content in namespace x because it is being terminated";
        assert_eq!(
            Refusal::of(403, "create", terminating, false),
            Refusal::NamespaceTerminating
        );
        assert!(!Refusal::NamespaceTerminating.is_error());
        assert!(!exists.is_error());
        let invalid = Refusal::of(422, "create", "is invalid", false);
        assert_eq!(invalid.severity(Writer::User), Some(Severity::Error));
        assert!(invalid.is_error());
        assert!(Refusal::of(500, "update", "etcdserver: timeout", false).is_error());
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
            Refusal::Denied("quota").severity(Writer::Cluster),
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
    fn a_field_fought_over_changes_hands_again_and_again() {
        let mut f = FieldOwnership::default();
        for w in ["a", "b", "a", "b", "a"] {
            f.set(&w);
        }
        assert!(f.is_fight());
        // A person correcting a controller once, then the controller alone.
        let mut g = FieldOwnership::default();
        for w in ["ctl", "ctl", "person", "ctl", "ctl", "ctl"] {
            g.set(&w);
        }
        assert_eq!(g.handovers(), 2);
        assert!(!g.is_fight());
        // Many writers each taking over once (a rolling owner): no fight.
        let mut h = FieldOwnership::default();
        for w in ["a", "b", "c", "d", "e", "f"] {
            h.set(&w);
        }
        assert!(!h.is_fight());
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

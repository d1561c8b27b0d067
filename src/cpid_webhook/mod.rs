//! `kascade cpid-webhook`: a mutating admission webhook that gives each
//! user change a fresh change propagation ID, without touching any client.
//!
//! A create or update (a `kubectl patch`/`apply`/`edit` arrives as an
//! update) by a user — not a control-plane component — of an object whose
//! new state carries no CPID of its own gets `kascade.io/cpid` = a new UUID
//! and loses a stale `kascade.io/cpid-ancestors`. "Of its own": a CPID the
//! object already had (`kubectl edit` sends the whole object back) is not
//! the new change's; one the request set differently is kept (an
//! instrumented client chose it). The answer carries a warning naming the
//! CPID, which `kubectl` prints, so the user can search for it.
//!
//! Which users are components is configured ([`StampPolicy`]); the default
//! skips the built-in controllers, scheduler, kubelets and every service
//! account of `kube-system`.

use kascade_cpid::{ANCESTORS_ANNOTATION, CPID_ANNOTATION, ChangeContext, Cpid};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use regex::Regex;

/// Whose writes are stamped.
#[derive(Clone, Debug)]
pub(crate) struct StampPolicy {
    /// Users whose writes are never stamped (anchored regexes).
    pub skip_users: Vec<Regex>,
    /// Members of these groups are never stamped.
    pub skip_groups: Vec<String>,
}

/// The default `--skip-users`: the control plane's own writers.
pub(crate) const DEFAULT_SKIP_USERS: &[&str] = &[
    "system:serviceaccount:kube-system:.*",
    "system:kube-controller-manager",
    "system:kube-scheduler",
    "system:node:.*",
    "system:apiserver",
];

/// The default `--skip-groups`.
pub(crate) const DEFAULT_SKIP_GROUPS: &[&str] = &["system:nodes"];

impl Default for StampPolicy {
    fn default() -> Self {
        Self::new(DEFAULT_SKIP_USERS, DEFAULT_SKIP_GROUPS).expect("default patterns compile")
    }
}

impl StampPolicy {
    /// A policy from user patterns (each anchored at both ends) and groups;
    /// an invalid pattern is an error naming it.
    pub(crate) fn new(
        skip_users: &[impl AsRef<str>],
        skip_groups: &[impl AsRef<str>],
    ) -> Result<Self, String> {
        let skip_users = skip_users
            .iter()
            .map(|p| {
                Regex::new(&format!("^(?:{})$", p.as_ref()))
                    .map_err(|e| format!("--skip-users {:?}: {e}", p.as_ref()))
            })
            .collect::<Result<_, _>>()?;
        Ok(StampPolicy {
            skip_users,
            skip_groups: skip_groups.iter().map(|g| g.as_ref().to_string()).collect(),
        })
    }

    fn skips(&self, user: &str, groups: &[String]) -> bool {
        self.skip_users.iter().any(|r| r.is_match(user))
            || groups.iter().any(|g| self.skip_groups.contains(g))
    }
}

/// What the webhook decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    /// A new CPID was added.
    Stamped(Cpid),
    /// The request set a CPID of its own: kept.
    Kept,
    /// Not a user's create/update of an object (a component, a delete, a
    /// subresource): left alone.
    Skipped,
}

fn annotations(o: Option<&DynamicObject>) -> Option<&std::collections::BTreeMap<String, String>> {
    o.and_then(|o| o.metadata.annotations.as_ref())
}

/// The answer to one admission request: always allowed (the webhook never
/// blocks a write), with a patch adding a fresh CPID when due.
pub(crate) fn review(
    policy: &StampPolicy,
    req: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, Stamp) {
    let allowed = AdmissionResponse::from(req);
    let user = req.user_info.username.as_deref().unwrap_or("");
    let groups = req.user_info.groups.as_deref().unwrap_or(&[]);
    if !matches!(req.operation, Operation::Create | Operation::Update)
        || req.sub_resource.is_some()
        || policy.skips(user, groups)
    {
        return (allowed, Stamp::Skipped);
    }
    let Some(object) = req.object.as_ref() else {
        return (allowed, Stamp::Skipped);
    };
    let new = ChangeContext::read(annotations(Some(object))).context;
    let old = ChangeContext::read(annotations(req.old_object.as_ref())).context;
    if let Some(n) = &new
        && old.as_ref().is_none_or(|o| o.cpid != n.cpid)
    {
        return (allowed, Stamp::Kept);
    }
    let cpid = Cpid::new_random();
    let mut ops = Vec::new();
    match &object.metadata.annotations {
        None => ops.push(serde_json::json!({
            "op": "add", "path": "/metadata/annotations",
            "value": { CPID_ANNOTATION: cpid.to_string() },
        })),
        Some(a) => {
            ops.push(serde_json::json!({
                "op": "add", "path": pointer(CPID_ANNOTATION), "value": cpid.to_string(),
            }));
            if a.contains_key(ANCESTORS_ANNOTATION) {
                ops.push(
                    serde_json::json!({ "op": "remove", "path": pointer(ANCESTORS_ANNOTATION) }),
                );
            }
        }
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("a valid JSON patch");
    match allowed.clone().with_patch(patch) {
        Ok(mut r) => {
            r.warnings = Some(vec![format!(
                "{CPID_ANNOTATION}={cpid}: search cpid={cpid} in the Jaeger UI"
            )]);
            (r, Stamp::Stamped(cpid))
        }
        Err(_) => (allowed, Stamp::Skipped),
    }
}

/// The JSON pointer of an annotation (`/` in the key escaped as `~1`).
fn pointer(annotation: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        annotation.replace('~', "~0").replace('/', "~1")
    )
}

#[cfg(test)]
mod tests;

//! Resource names as a user types them, the way kubectl reads them: plural
//! (`deployments`), singular (`deployment`), kind (`Deployment`, any case),
//! short name (`deploy`) and `resource.group` (`deployments.apps`). One
//! registry of the built-in resources serves every subcommand that takes an
//! object (`trace`, `explain`, `analyze`) and the owner references' kinds
//! (`aggregate::relations::KindRegistry`); resources the audit log itself
//! holds (custom resources) resolve by their plural, singular or kind.

use std::collections::BTreeSet;

use crate::model::ObjectRef;

/// A built-in resource as the apiserver serves it.
#[derive(Debug)]
pub(crate) struct BuiltinResource {
    pub(crate) group: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) plural: &'static str,
    /// kubectl's short names (`kubectl api-resources`).
    pub(crate) short: &'static [&'static str],
    pub(crate) namespaced: bool,
}

const fn r(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
) -> BuiltinResource {
    BuiltinResource {
        group,
        kind,
        plural,
        short,
        namespaced,
    }
}

/// The resources of a Kubernetes 1.3x apiserver that users name or
/// objects reference, with kubectl's short names.
pub(crate) const BUILTIN_RESOURCES: &[BuiltinResource] = &[
    r("", "Pod", "pods", &["po"], true),
    r("", "Node", "nodes", &["no"], false),
    r("", "Namespace", "namespaces", &["ns"], false),
    r("", "Service", "services", &["svc"], true),
    r("", "Endpoints", "endpoints", &["ep"], true),
    r("", "ConfigMap", "configmaps", &["cm"], true),
    r("", "Secret", "secrets", &[], true),
    r("", "ServiceAccount", "serviceaccounts", &["sa"], true),
    r("", "PersistentVolume", "persistentvolumes", &["pv"], false),
    r(
        "",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        &["pvc"],
        true,
    ),
    r(
        "",
        "ReplicationController",
        "replicationcontrollers",
        &["rc"],
        true,
    ),
    r("", "ResourceQuota", "resourcequotas", &["quota"], true),
    r("", "LimitRange", "limitranges", &["limits"], true),
    r("", "Event", "events", &["ev"], true),
    r("apps", "Deployment", "deployments", &["deploy"], true),
    r("apps", "ReplicaSet", "replicasets", &["rs"], true),
    r("apps", "StatefulSet", "statefulsets", &["sts"], true),
    r("apps", "DaemonSet", "daemonsets", &["ds"], true),
    r(
        "apps",
        "ControllerRevision",
        "controllerrevisions",
        &[],
        true,
    ),
    r("batch", "Job", "jobs", &[], true),
    r("batch", "CronJob", "cronjobs", &["cj"], true),
    r(
        "discovery.k8s.io",
        "EndpointSlice",
        "endpointslices",
        &[],
        true,
    ),
    r("events.k8s.io", "Event", "events", &["ev"], true),
    r(
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        &["pdb"],
        true,
    ),
    r(
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        &["hpa"],
        true,
    ),
    r("networking.k8s.io", "Ingress", "ingresses", &["ing"], true),
    r(
        "networking.k8s.io",
        "NetworkPolicy",
        "networkpolicies",
        &["netpol"],
        true,
    ),
    r(
        "networking.k8s.io",
        "IngressClass",
        "ingressclasses",
        &[],
        false,
    ),
    r(
        "storage.k8s.io",
        "StorageClass",
        "storageclasses",
        &["sc"],
        false,
    ),
    r(
        "storage.k8s.io",
        "VolumeAttachment",
        "volumeattachments",
        &[],
        false,
    ),
    r("storage.k8s.io", "CSIDriver", "csidrivers", &[], false),
    r("storage.k8s.io", "CSINode", "csinodes", &[], false),
    r("coordination.k8s.io", "Lease", "leases", &[], true),
    r(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        &[],
        false,
    ),
    r(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        &[],
        false,
    ),
    r("rbac.authorization.k8s.io", "Role", "roles", &[], true),
    r(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        &[],
        true,
    ),
    r(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        false,
    ),
    r(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        &[],
        false,
    ),
    r(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        &[],
        false,
    ),
    r(
        "scheduling.k8s.io",
        "PriorityClass",
        "priorityclasses",
        &["pc"],
        false,
    ),
    r(
        "certificates.k8s.io",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        &["csr"],
        false,
    ),
];

impl BuiltinResource {
    /// Whether `name` (lower case, no group) names this resource.
    fn is_named(&self, name: &str) -> bool {
        name == self.plural || name == self.kind.to_ascii_lowercase() || self.short.contains(&name)
    }

    fn qualified(&self) -> String {
        qualified(self.group, self.plural)
    }
}

/// `resource.group`, or `resource` for the core group.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

/// How Kubernetes pluralises a kind (`Foo` → `foos`, `Policy` →
/// `policies`, `Ingress` → `ingresses`), lower case.
pub(crate) fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else if lower.ends_with('s') || lower.ends_with("ch") || lower.ends_with('x') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// Whether `name` (lower case) names the resource `plural` that is not
/// built in: its plural, its singular, or its kind.
fn names_seen(name: &str, plural: &str) -> bool {
    name == plural || guess_plural(name) == plural
}

/// A resource as given on the command line, not yet matched to an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceArg {
    /// As typed, for messages.
    given: String,
    /// Lower case, without the group.
    name: String,
    /// The group after the first dot (`apps` of `deployments.apps`).
    group: Option<String>,
    /// The built-in resources it names (two for `events`: the core and
    /// `events.k8s.io` ones); empty for a resource not built in.
    builtin: Vec<usize>,
}

/// The resource a [`ResourceArg`] names among those known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedResource {
    /// The plural (`deployments`).
    pub resource: String,
    /// Its group; `None` when several groups serve the resource (`events`).
    pub group: Option<String>,
}

impl std::str::FromStr for ResourceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let given = s.trim();
        let lower = given.to_ascii_lowercase();
        let (name, group) = match lower.split_once('.') {
            Some((n, g)) => (n.to_string(), Some(g.to_string())),
            None => (lower.clone(), None),
        };
        if name.is_empty() || group.as_ref().is_some_and(|g| g.is_empty()) || name.contains('/') {
            return Err(format!(
                "{s:?}: expected a resource: plural, singular, kind or short name, optionally with its group (deployments, deployment, Deployment, deploy, deployments.apps)"
            ));
        }
        let builtin = BUILTIN_RESOURCES
            .iter()
            .enumerate()
            .filter(|(_, b)| b.is_named(&name) && group.as_ref().is_none_or(|g| g == b.group))
            .map(|(i, _)| i)
            .collect();
        Ok(ResourceArg {
            given: given.to_string(),
            name,
            group,
            builtin,
        })
    }
}

impl std::fmt::Display for ResourceArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.given)
    }
}

impl ResourceArg {
    /// The same resource, in `group` (`--group`); an error when it names
    /// another group already.
    pub fn in_group(self, group: &str) -> Result<Self, String> {
        match &self.group {
            Some(g) if g != group => Err(format!(
                "resource {:?} is in group {g:?}, --group says {group:?}",
                self.given
            )),
            _ => format!("{}.{group}", self.name)
                .parse()
                .map(|r: ResourceArg| ResourceArg {
                    given: self.given.clone(),
                    ..r
                }),
        }
    }

    fn builtins(&self) -> impl Iterator<Item = &'static BuiltinResource> + '_ {
        self.builtin.iter().map(|&i| &BUILTIN_RESOURCES[i])
    }

    /// Whether this names a built-in resource.
    pub fn is_builtin(&self) -> bool {
        !self.builtin.is_empty()
    }

    /// Whether an object of `resource` in `group` is of this resource.
    pub fn matches(&self, resource: &str, group: &str) -> bool {
        if self.is_builtin() {
            self.builtins()
                .any(|b| b.plural == resource && b.group == group)
        } else {
            names_seen(&self.name, resource) && self.group.as_ref().is_none_or(|g| g == group)
        }
    }

    /// The resource this names among the built-in ones and `seen` (the
    /// audit log's `(group, resource)` pairs); an unknown one is an error
    /// naming close candidates, an ambiguous one the choices.
    pub fn resolve<'a>(
        &self,
        seen: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Result<ResolvedResource, String> {
        let found: BTreeSet<(String, String)> = if self.is_builtin() {
            self.builtins()
                .map(|b| (b.group.to_string(), b.plural.to_string()))
                .collect()
        } else {
            seen.clone()
                .into_iter()
                .filter(|(g, r)| self.matches(r, g))
                .map(|(g, r)| (g.to_string(), r.to_string()))
                .collect()
        };
        let resources: BTreeSet<&str> = found.iter().map(|(_, r)| r.as_str()).collect();
        match resources.len() {
            0 => Err(self.unknown(seen)),
            1 => Ok(ResolvedResource {
                resource: resources.into_iter().next().unwrap_or_default().to_string(),
                group: (found.len() == 1)
                    .then(|| found.iter().next().map(|(g, _)| g.clone()))
                    .flatten(),
            }),
            _ => Err(format!(
                "resource {:?} is ambiguous: it names {}; say which",
                self.given,
                found
                    .iter()
                    .map(|(g, r)| qualified(g, r))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The error of a resource neither built in nor among `seen`, with the
    /// closest names of those.
    pub fn unknown<'a>(&self, seen: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        let mut scored: Vec<(usize, String)> = Vec::new();
        let close = |candidate: &str| {
            let d = strsim::levenshtein(&self.name, candidate);
            let near = d <= (self.name.len() / 3).max(1)
                || self.name.len() >= 3 && candidate.starts_with(&self.name);
            near.then_some(d)
        };
        for b in BUILTIN_RESOURCES {
            let names = [b.plural.to_string(), b.kind.to_ascii_lowercase()];
            let best = names
                .iter()
                .map(String::as_str)
                .chain(b.short.iter().copied())
                .filter_map(close)
                .min();
            if let Some(d) = best {
                scored.push((d, b.qualified()));
            }
        }
        for (g, r) in seen {
            if let Some(d) = close(r).or_else(|| close(r.trim_end_matches('s'))) {
                scored.push((d, qualified(g, r)));
            }
        }
        scored.sort();
        let mut names: Vec<String> = Vec::new();
        for (_, n) in scored {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names.truncate(5);
        let hint = if names.is_empty() {
            String::new()
        } else {
            format!("; did you mean {}?", names.join(", "))
        };
        format!(
            "unknown resource {:?}: neither a built-in resource nor one in the audit log{hint}",
            self.given
        )
    }
}

/// An object as given on the command line: `RESOURCE/NAME`
/// (`deploy/web`, `deployments.apps/web`), in the namespace of `-n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectArg {
    pub resource: ResourceArg,
    pub name: String,
}

impl std::str::FromStr for ObjectArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (res, name) = s
            .split_once('/')
            .filter(|(r, n)| !r.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| format!("{s:?}: expected RESOURCE/NAME, e.g. deploy/web"))?;
        Ok(ObjectArg {
            resource: res.parse()?,
            name: name.to_string(),
        })
    }
}

impl ObjectArg {
    /// Whether `o` is this object (in `namespace` when one is given).
    pub fn names(&self, o: &ObjectRef, namespace: Option<&str>) -> bool {
        self.name == o.name
            && namespace.is_none_or(|ns| o.namespace == ns)
            && self.resource.matches(&o.resource, &o.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(given: &str, seen: &[(&str, &str)]) -> Result<ResolvedResource, String> {
        given
            .parse::<ResourceArg>()?
            .resolve(seen.iter().map(|(g, r)| (*g, *r)))
    }

    fn resolved(resource: &str, group: Option<&str>) -> Result<ResolvedResource, String> {
        Ok(ResolvedResource {
            resource: resource.to_string(),
            group: group.map(str::to_string),
        })
    }

    #[test]
    fn built_in_resources_resolve_as_kubectl_reads_them() {
        for given in [
            "deploy",
            "deployment",
            "deployments",
            "Deployment",
            "DEPLOYMENTS",
            "deployments.apps",
            "deploy.apps",
        ] {
            assert_eq!(
                resolve(given, &[]),
                resolved("deployments", Some("apps")),
                "{given}"
            );
        }
        for (given, plural, group) in [
            ("rs", "replicasets", "apps"),
            ("replicasets.apps", "replicasets", "apps"),
            ("po", "pods", ""),
            ("svc", "services", ""),
            ("cm", "configmaps", ""),
            ("pvc", "persistentvolumeclaims", ""),
            ("sts", "statefulsets", "apps"),
            ("ds", "daemonsets", "apps"),
            ("ns", "namespaces", ""),
            ("Endpoints", "endpoints", ""),
            ("ingress", "ingresses", "networking.k8s.io"),
        ] {
            assert_eq!(
                resolve(given, &[]),
                resolved(plural, Some(group)),
                "{given}"
            );
        }
        // Served by two groups: either.
        assert_eq!(resolve("events", &[]), resolved("events", None));
        assert_eq!(
            resolve("events.events.k8s.io", &[]),
            resolved("events", Some("events.k8s.io"))
        );
    }

    #[test]
    fn resources_of_the_audit_log_resolve_by_plural_singular_and_kind() {
        let seen = [("example.com", "widgets"), ("apps", "deployments")];
        for given in ["widgets", "widget", "Widget", "widgets.example.com"] {
            assert_eq!(
                resolve(given, &seen),
                resolved("widgets", Some("example.com")),
                "{given}"
            );
        }
        assert!(
            resolve("widgets.other.io", &seen)
                .unwrap_err()
                .contains("unknown resource")
        );
    }

    #[test]
    fn an_unknown_resource_is_named_with_close_candidates() {
        let e = resolve("deplyo", &[]).unwrap_err();
        assert!(e.contains("unknown resource \"deplyo\""), "{e}");
        assert!(e.contains("deployments.apps"), "{e}");
        let e = resolve("widgts", &[("example.com", "widgets")]).unwrap_err();
        assert!(e.contains("widgets.example.com"), "{e}");
        let e = resolve("zzzzzz", &[]).unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn an_object_is_resource_slash_name() {
        let o: ObjectArg = "deploy/web".parse().unwrap();
        assert_eq!(o.name, "web");
        assert!(o.resource.matches("deployments", "apps"));
        assert!(!o.resource.matches("deployments", "example.com"));
        for bad in ["web", "deployments/", "/web", "a/b/c", ".apps/web"] {
            assert!(bad.parse::<ObjectArg>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn every_builtin_kind_pluralises_as_kubernetes_does_but_the_irregular_ones() {
        for b in BUILTIN_RESOURCES {
            if b.kind != "Endpoints" {
                assert_eq!(guess_plural(b.kind), b.plural, "{}", b.kind);
            }
        }
    }
}

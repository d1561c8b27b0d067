//! Relations of an object: owner references, then the declarative rules.

use crate::model::FastHashMap;
use std::sync::RwLock;

use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};

use super::rules::{Relation, Role, RuleSet};
use crate::model::ObjectRef;

pub(crate) const CLASS_OWNER: &str = "owner";
pub(crate) const CLASS_NON_CONTROLLER_OWNER: &str = "owner-ref";

/// Maps an owner reference's kind to its resource and scope. Seeded with the
/// built-in kinds, and taught by every audit event that names both.
pub(crate) struct KindRegistry {
    map: RwLock<FastHashMap<(String, String), (String, bool)>>,
}

impl Default for KindRegistry {
    fn default() -> Self {
        let map = crate::resources::BUILTIN_RESOURCES
            .iter()
            .map(|b| {
                (
                    (b.group.to_string(), b.kind.to_string()),
                    (b.plural.to_string(), b.namespaced),
                )
            })
            .collect();
        Self {
            map: RwLock::new(map),
        }
    }
}

impl KindRegistry {
    /// Records that `kind` in `group` is served as `resource`.
    pub(crate) fn learn(&self, group: &str, kind: &str, resource: &str, namespaced: bool) {
        if kind.is_empty() || resource.is_empty() {
            return;
        }
        let key = (group.to_string(), kind.to_string());
        if self.map.read().unwrap().contains_key(&key) {
            return;
        }
        self.map
            .write()
            .unwrap()
            .insert(key, (resource.to_string(), namespaced));
    }

    /// Resource and scope of `kind`; unknown kinds are guessed the way
    /// Kubernetes pluralises (`Foo` → `foos`, `Policy` → `policies`) and assumed namespaced.
    pub(crate) fn resolve(&self, group: &str, kind: &str) -> (String, bool) {
        if let Some(v) = self
            .map
            .read()
            .unwrap()
            .get(&(group.to_string(), kind.to_string()))
        {
            return v.clone();
        }
        (crate::resources::guess_plural(kind), true)
    }

    /// The object a reference by `apiVersion` and `kind` names (an owner
    /// reference, an Event's involved object): in `namespace` when its kind
    /// is namespaced, cluster-scoped otherwise.
    pub(crate) fn referenced_object(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> ObjectRef {
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let (resource, namespaced) = self.resolve(group, kind);
        ObjectRef::new(
            cluster,
            group,
            resource,
            if namespaced { namespace } else { "" },
            name,
        )
    }
}

/// Relations from `metadata.ownerReferences`: each owner is a parent; the
/// controller owner with class `owner`, others with `owner-ref`. Returns the
/// owners' uids alongside, for their object spans.
pub(crate) fn owner_relations(
    obj: &ObjectRef,
    state: &Value,
    kinds: &KindRegistry,
    out: &mut Vec<(Relation, String)>,
) {
    let Some(refs) =
        crate::json::pointer(state, "/metadata/ownerReferences").and_then(Value::as_array)
    else {
        return;
    };
    for r in refs {
        let (Some(api_version), Some(kind), Some(name)) = (
            r.get("apiVersion").and_then(Value::as_str),
            r.get("kind").and_then(Value::as_str),
            r.get("name").and_then(Value::as_str),
        ) else {
            continue;
        };
        let controller = r
            .get("controller")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let uid = r
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        out.push((
            Relation {
                target: kinds.referenced_object(
                    &obj.cluster,
                    api_version,
                    kind,
                    &obj.namespace,
                    name,
                ),
                role: Role::Parent,
                class: if controller {
                    CLASS_OWNER
                } else {
                    CLASS_NON_CONTROLLER_OWNER
                }
                .into(),
            },
            uid,
        ));
    }
}

/// Every relation of `obj`: owners first, then rule matches; deduplicated.
pub(crate) fn all_relations(
    obj: &ObjectRef,
    state: &Value,
    kinds: &KindRegistry,
    rules: &RuleSet,
) -> Vec<(Relation, String)> {
    let mut out = Vec::new();
    owner_relations(obj, state, kinds, &mut out);
    let mut by_rules = Vec::new();
    rules.relations(obj, state, &mut by_rules);
    out.extend(by_rules.into_iter().map(|r| (r, String::new())));
    // The first of each relation, judged by reference: most objects have
    // one or two, and cloning each into a set cost more than the rest.
    let keep: Vec<bool> = {
        let mut seen =
            crate::model::FastHashSet::with_capacity_and_hasher(out.len(), Default::default());
        out.iter()
            .map(|(r, _)| {
                if !crate::bounds::object_within_bounds(&r.target) {
                    // Named in a forged object: no span is made up for it.
                    tracing::debug!(object = %crate::messages::quote(&obj.key()), "relation to a name beyond Kubernetes' bounds ignored");
                    return false;
                }
                r.target != *obj && seen.insert(r)
            })
            .collect()
    };
    let mut keep = keep.into_iter();
    out.retain(|_| keep.next().unwrap_or(false));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::json;

    #[test]
    fn relations_to_names_beyond_bounds_are_ignored() {
        let pod = ObjectRef::new("c", "", "pods", "default", "p");
        let state = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r".repeat(254), "uid": "u1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r".repeat(253), "uid": "u2"}]}});
        let rels = all_relations(&pod, &state, &KindRegistry::default(), &RuleSet::default());
        assert_eq!(rels.len(), 1);
        assert_eq!(rels[0].1, "u2");
    }

    #[test]
    fn owner_refs_become_parent_relations() {
        let pod = ObjectRef::new("c", "", "pods", "default", "hello-abc-xyz");
        let state = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hello-abc", "uid": "u1", "controller": true},
            {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u2"},
            {"apiVersion": "example.com/v1", "kind": "NetworkPolicy", "name": "np", "uid": "u3"}]}});
        let kinds = KindRegistry::default();
        let rels = all_relations(&pod, &state, &kinds, &RuleSet::default());
        assert_eq!(rels.len(), 3);
        assert_eq!(
            rels[0].0.target,
            ObjectRef::new("c", "apps", "replicasets", "default", "hello-abc")
        );
        assert_eq!(rels[0].0.class, CLASS_OWNER);
        assert_eq!(rels[0].1, "u1");
        assert_eq!(rels[1].0.target.namespace, "", "nodes are cluster-scoped");
        assert_eq!(rels[1].0.class, CLASS_NON_CONTROLLER_OWNER);
        assert_eq!(rels[2].0.target.resource, "networkpolicies");
        assert!(rels.iter().all(|(r, _)| r.role == Role::Parent));
    }

    #[test]
    fn learned_kinds_override_guesses() {
        let kinds = KindRegistry::default();
        assert_eq!(kinds.resolve("x.io", "Moose").0, "mooses");
        kinds.learn("x.io", "Moose", "moose", false);
        assert_eq!(kinds.resolve("x.io", "Moose"), ("moose".to_string(), false));
    }
}

//! Label-selector links: which objects a selector (a Service's, a
//! PodDisruptionBudget's, any `selector` rule's) picks. The index holds the
//! labels of selectable objects and the selectors of selecting ones, per
//! cluster and namespace, fed by every state the processor sees (audit
//! responses and the list-watch), so a link is found whichever side changes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::json::Value;

use super::rules::{LabelSelector, Relation, RuleSet, SelectorRule};
use crate::model::{FastHashMap as HashMap, FastHashSet as HashSet, ObjectRef};

type Scope = (String, String, String, String); // cluster, namespace, group, resource

#[derive(Default)]
struct Inner {
    /// Labels of selectable objects: scope → name → labels.
    labels: HashMap<Scope, HashMap<String, BTreeMap<String, String>>>,
    /// Selectors: scope of the *targets* → selecting object → (rule, selector).
    selectors: HashMap<Scope, HashMap<ObjectRef, Vec<(SelectorRule, LabelSelector)>>>,
}

pub(crate) struct SelectorIndex {
    targets: HashSet<(String, String)>,
    /// What selector rules match, as a list: a handful, compared in place.
    holders: Vec<(String, String)>,
    inner: Mutex<Inner>,
}

/// A relation found by a selector, seen from the selecting object.
pub(crate) struct SelectorLink {
    pub holder: ObjectRef,
    pub relation: Relation,
}

fn labels_of(state: &Value) -> BTreeMap<String, String> {
    super::rules::labels_of(state).unwrap_or_default()
}

impl SelectorIndex {
    pub(crate) fn new(rules: &RuleSet) -> Self {
        Self {
            targets: rules.selector_targets().into_iter().collect(),
            holders: rules.selector_holders().into_iter().collect(),
            inner: Mutex::default(),
        }
    }

    /// Records `obj`'s new state and returns the selector links it makes:
    /// as a selected object (selectors in its namespace that match its
    /// labels) and as a selecting object (indexed objects its selectors match).
    pub(crate) fn update(
        &self,
        rules: &RuleSet,
        obj: &ObjectRef,
        state: &Value,
    ) -> Vec<SelectorLink> {
        if self.targets.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut inner = self.inner.lock().expect("selector index");
        let own_scope = (
            obj.cluster.clone(),
            obj.namespace.clone(),
            obj.group.clone(),
            obj.resource.clone(),
        );
        if self
            .targets
            .contains(&(obj.group.clone(), obj.resource.clone()))
        {
            let labels = labels_of(state);
            Self::selecting(&inner, &own_scope, obj, &labels, &mut out);
            inner
                .labels
                .entry(own_scope)
                .or_default()
                .insert(obj.name.clone(), labels);
        }
        let selectors = rules.selectors(obj, state);
        // Forget this object's old selectors (they may have changed).
        self.forget_selectors(&mut inner, obj);
        for (rule, sel) in selectors {
            let scope = (
                obj.cluster.clone(),
                obj.namespace.clone(),
                rule.target_group.clone(),
                rule.target_resource.clone(),
            );
            if let Some(objects) = inner.labels.get(&scope) {
                for (name, labels) in objects {
                    if sel.matches(labels) {
                        out.push(SelectorLink {
                            holder: obj.clone(),
                            relation: Relation {
                                target: ObjectRef::new(
                                    &obj.cluster,
                                    &rule.target_group,
                                    &rule.target_resource,
                                    &obj.namespace,
                                    name,
                                ),
                                role: rule.role,
                                class: rule.class.clone(),
                            },
                        });
                    }
                }
            }
            inner
                .selectors
                .entry(scope)
                .or_default()
                .entry(obj.clone())
                .or_default()
                .push((rule, sel));
        }
        out
    }

    /// The selectors that pick `obj` in its new `state`, as links, without
    /// recording anything: what [`Self::update`] found as a selected
    /// object, asked again once others' selectors may have been indexed.
    pub(crate) fn selected_by(&self, obj: &ObjectRef, state: &Value) -> Vec<SelectorLink> {
        let mut out = Vec::new();
        if !self
            .targets
            .contains(&(obj.group.clone(), obj.resource.clone()))
        {
            return out;
        }
        let scope = (
            obj.cluster.clone(),
            obj.namespace.clone(),
            obj.group.clone(),
            obj.resource.clone(),
        );
        let inner = self.inner.lock().expect("selector index");
        Self::selecting(&inner, &scope, obj, &labels_of(state), &mut out);
        out
    }

    /// Links from every selector of `scope` that matches `labels` to `obj`.
    fn selecting(
        inner: &Inner,
        scope: &Scope,
        obj: &ObjectRef,
        labels: &BTreeMap<String, String>,
        out: &mut Vec<SelectorLink>,
    ) {
        let Some(holders) = inner.selectors.get(scope) else {
            return;
        };
        for (holder, sels) in holders {
            for (rule, sel) in sels {
                if sel.matches(labels) {
                    out.push(SelectorLink {
                        holder: holder.clone(),
                        relation: Relation {
                            target: obj.clone(),
                            role: rule.role,
                            class: rule.class.clone(),
                        },
                    });
                }
            }
        }
    }

    /// The object is gone: it selects and is selected no more.
    pub(crate) fn remove(&self, obj: &ObjectRef) {
        if self.targets.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().expect("selector index");
        let scope = (
            obj.cluster.clone(),
            obj.namespace.clone(),
            obj.group.clone(),
            obj.resource.clone(),
        );
        if let Some(m) = inner.labels.get_mut(&scope) {
            m.remove(&obj.name);
        }
        self.forget_selectors(&mut inner, obj);
    }

    /// Drops `obj`'s selectors. A selector picks objects of its own cluster
    /// and namespace, of a target resource: only those scopes are looked
    /// at, not every namespace's (one lookup per target resource per write,
    /// however many namespaces hold selectors).
    fn forget_selectors(&self, inner: &mut Inner, obj: &ObjectRef) {
        let holds = |(group, resource): &(String, String)| {
            resource == "*" || (*group == obj.group && *resource == obj.resource)
        };
        if !self.holders.iter().any(holds) {
            // Not a kind selector rules match (a Pod, a ReplicaSet): it holds none.
            return;
        }
        let mut scope = (
            obj.cluster.clone(),
            obj.namespace.clone(),
            String::new(),
            String::new(),
        );
        for (group, resource) in &self.targets {
            group.clone_into(&mut scope.2);
            resource.clone_into(&mut scope.3);
            if let Some(holders) = inner.selectors.get_mut(&scope) {
                holders.remove(obj);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonic_rs::json;

    fn rules() -> RuleSet {
        let mut r = RuleSet::default();
        r.add_yaml(
            "t.yaml",
            "rules:\n  - name: svc\n    match: {resource: services}\n    class: selector\n    role: child\n    target: {selector: spec.selector, resource: pods}\n  - name: pdb\n    match: {group: policy, resource: poddisruptionbudgets}\n    class: pdb\n    role: child\n    target: {selector: spec.selector, resource: pods}\n",
        )
        .unwrap();
        r
    }

    #[test]
    fn links_are_found_whichever_side_comes_first() {
        let r = rules();
        let idx = SelectorIndex::new(&r);
        let pod = ObjectRef::new("c", "", "pods", "ns", "web-1");
        let other = ObjectRef::new("c", "", "pods", "ns", "db-1");
        let svc = ObjectRef::new("c", "", "services", "ns", "web");
        let pdb = ObjectRef::new("c", "policy", "poddisruptionbudgets", "ns", "web");
        assert!(
            idx.update(
                &r,
                &pod,
                &json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}})
            )
            .is_empty()
        );
        idx.update(&r, &other, &json!({"metadata": {"labels": {"app": "db"}}}));
        let links = idx.update(&r, &svc, &json!({"spec": {"selector": {"app": "web"}}}));
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].relation.target, pod);
        // A pod created after the Service is linked from the Service.
        let late = ObjectRef::new("c", "", "pods", "ns", "web-2");
        let links = idx.update(&r, &late, &json!({"metadata": {"labels": {"app": "web"}}}));
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].holder, svc);
        // matchExpressions.
        let links = idx.update(
            &r,
            &pdb,
            &json!({"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}}}),
        );
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].relation.target, pod);
        // Another namespace is another world.
        let elsewhere = ObjectRef::new("c", "", "pods", "other", "web-9");
        let links = idx.update(
            &r,
            &elsewhere,
            &json!({"metadata": {"labels": {"app": "web"}}}),
        );
        assert!(links.is_empty());
        // A removed Service selects nothing.
        idx.remove(&svc);
        let links = idx.update(
            &r,
            &ObjectRef::new("c", "", "pods", "ns", "web-3"),
            &json!({"metadata": {"labels": {"app": "web"}}}),
        );
        assert!(links.is_empty());
    }

    #[test]
    fn a_changed_selector_replaces_the_old_one_in_its_namespace_only() {
        let r = rules();
        let idx = SelectorIndex::new(&r);
        let svc = ObjectRef::new("c", "", "services", "ns", "web");
        let twin = ObjectRef::new("c", "", "services", "other", "web");
        let web = json!({"spec": {"selector": {"app": "web"}}});
        idx.update(&r, &svc, &web);
        idx.update(&r, &twin, &web);
        // The Service now selects `api`: `web` Pods are not its any more.
        idx.update(&r, &svc, &json!({"spec": {"selector": {"app": "api"}}}));
        let pod = |ns: &str, name: &str| ObjectRef::new("c", "", "pods", ns, name);
        let labels = |app: &str| json!({"metadata": {"labels": {"app": app}}});
        assert!(
            idx.update(&r, &pod("ns", "web-1"), &labels("web"))
                .is_empty()
        );
        let links = idx.update(&r, &pod("ns", "api-1"), &labels("api"));
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].holder, svc);
        // The Service of the same name in another namespace kept its own.
        let links = idx.update(&r, &pod("other", "web-1"), &labels("web"));
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].holder, twin);
        // Removing one leaves the other.
        idx.remove(&svc);
        assert!(
            idx.update(&r, &pod("ns", "api-2"), &labels("api"))
                .is_empty()
        );
        assert_eq!(
            idx.update(&r, &pod("other", "web-2"), &labels("web")).len(),
            1
        );
    }

    #[test]
    fn empty_selectors_select_nothing() {
        assert!(LabelSelector::from_value(&json!({})).is_none());
        assert!(LabelSelector::from_value(&json!({"matchLabels": {}})).is_none());
    }
}

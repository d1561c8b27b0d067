//! What `kascade analyze` counts: the changes of a run's own cascades in
//! the scope asked for. The cluster's background — cascades the cluster
//! itself started before any user's (its start-up: the apiserver creating
//! its namespaces, controllers filling in defaults as they come up) — is
//! left out, as `kascade explain` leaves it out (`crate::judgement`), unless
//! asked for; so are changes outside `--namespace` and `--from`/`--to`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::flow::{CascadeRole, ChangeRecord, ChangeSink, SpanRef};
use crate::judgement::Writer;

/// Which changes count.
#[derive(Clone, Debug, Default)]
pub struct ForegroundScope {
    /// Only this namespace's objects (and cluster-scoped ones its
    /// cascades write: nodes, volumes).
    pub namespace: Option<String>,
    /// Only this object's cascades: its own changes, and from each of them
    /// on, the rest of the cascade that made it.
    pub object: Option<crate::resources::ObjectArg>,
    /// Only the cascades of objects these labels select (before or after
    /// a change): their own changes and, from each, the rest of the
    /// cascade that made it. The text as given, and the selector.
    pub selector: Option<(String, crate::aggregate::rules::LabelSelector)>,
    /// Only changes requested from then on.
    pub from: Option<SystemTime>,
    /// Only changes requested until then.
    pub to: Option<SystemTime>,
    /// Count the cluster's start-up cascades too.
    pub with_background: bool,
}

/// Counts of what was left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Changes of cascades the cluster started before any user's.
    pub background: u64,
    /// Changes outside the namespace or the time range.
    pub out_of_scope: u64,
    /// Start-up cascades not remembered as background (bound reached):
    /// their changes were counted.
    pub background_untracked: u64,
}

/// The cluster's start-up as changes arrive in log order: the cascades the
/// cluster itself started before any user's. What `kascade analyze` leaves
/// out, and what `kascade explain` keeps out of its hop statistics.
#[derive(Default)]
pub(crate) struct StartUp {
    /// Roots of the start-up's cascades (bounded by what a cluster does
    /// before its first user).
    roots: HashSet<SpanRef>,
    user_seen: bool,
    /// Start-up roots not remembered (bound reached): their changes count
    /// as the run's.
    pub untracked: u64,
}

impl StartUp {
    /// Notes `c` if it starts a cascade.
    pub(crate) fn observe(&mut self, c: &ChangeRecord) {
        if !matches!(c.role, CascadeRole::Root | CascadeRole::Unexplained) {
            return;
        }
        match Writer::of(&c.user) {
            Writer::User if !c.user.is_empty() => self.user_seen = true,
            Writer::Cluster if !self.user_seen => {
                if self.roots.len() < MAX_BACKGROUND_ROOTS {
                    self.roots.insert(c.span);
                } else {
                    self.untracked += 1;
                }
            }
            _ => {}
        }
    }

    /// Whether the cascade rooted at `root` is the cluster's start-up.
    pub(crate) fn started(&self, root: &SpanRef) -> bool {
        self.roots.contains(root)
    }
}

#[derive(Default)]
struct State {
    start_up: StartUp,
    /// Roots of cascades that touched the namespace.
    in_namespace: HashSet<SpanRef>,
    /// Roots of cascades that wrote an object named by `--object` or
    /// `--selector`.
    of_object: HashSet<SpanRef>,
    /// The `(group, resource)` pairs changed, to resolve `--object`'s.
    resources_seen: std::collections::BTreeSet<(String, String)>,
    left_out: LeftOut,
}

/// A [`ChangeSink`] that hands the changes in scope to `sinks`.
pub struct ForegroundSink {
    scope: ForegroundScope,
    sinks: Vec<Arc<dyn ChangeSink>>,
    state: Mutex<State>,
}

/// The cluster's start-up cascades remembered at most (a log with no
/// user's write at all would otherwise keep every root); past it, their
/// changes are counted as the run's.
const MAX_BACKGROUND_ROOTS: usize = 1 << 20;

/// Cascades remembered as touching the namespace (or as writing
/// `--object`) at most (past it, a cascade's later changes on
/// cluster-scoped objects, or after the object's, are left out).
const MAX_NAMESPACE_ROOTS: usize = 1 << 20;

impl ForegroundSink {
    pub fn new(scope: ForegroundScope, sinks: Vec<Arc<dyn ChangeSink>>) -> Self {
        Self {
            scope,
            sinks,
            state: Mutex::new(State::default()),
        }
    }

    /// The `(group, resource)` pairs of the changes seen so far (kept
    /// only when `--object` is given).
    pub fn resources_seen(&self) -> std::collections::BTreeSet<(String, String)> {
        self.lock().resources_seen.clone()
    }

    /// What was left out so far.
    pub fn left_out(&self) -> LeftOut {
        let st = self.lock();
        LeftOut {
            background_untracked: st.start_up.untracked,
            ..st.left_out
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn admits(&self, c: &ChangeRecord) -> bool {
        let mut st = self.lock();
        st.start_up.observe(c);
        if !self.scope.with_background && st.start_up.started(&c.root) {
            st.left_out.background += 1;
            return false;
        }
        let in_time = self.scope.from.is_none_or(|f| c.received >= f)
            && self.scope.to.is_none_or(|t| c.received <= t);
        let in_namespace = match &self.scope.namespace {
            None => true,
            Some(ns)
                if c.object.namespace == *ns
                    || (c.object.resource == "namespaces" && c.object.name == *ns) =>
            {
                if st.in_namespace.len() < MAX_NAMESPACE_ROOTS {
                    st.in_namespace.insert(c.root);
                }
                true
            }
            // A cluster-scoped object a cascade of the namespace wrote.
            Some(_) => c.object.namespace.is_empty() && st.in_namespace.contains(&c.root),
        };
        let of_object = if self.scope.object.is_none() && self.scope.selector.is_none() {
            true
        } else {
            if self.scope.object.is_some() {
                let resource = (c.object.group.to_string(), c.object.resource.to_string());
                st.resources_seen.insert(resource);
            }
            if self.names(c) {
                if st.of_object.len() < MAX_NAMESPACE_ROOTS {
                    st.of_object.insert(c.root);
                }
                true
            } else {
                st.of_object.contains(&c.root)
            }
        };
        if !(in_time && in_namespace && of_object) {
            st.left_out.out_of_scope += 1;
            return false;
        }
        true
    }
}

impl ForegroundSink {
    /// Whether `--object` and `--selector` name the changed object itself.
    fn names(&self, c: &ChangeRecord) -> bool {
        if let Some(o) = &self.scope.object
            && !o.names(&c.object, self.scope.namespace.as_deref())
        {
            return false;
        }
        if let Some((_, selector)) = &self.scope.selector {
            let labelled = |state: &Option<Arc<crate::json::Value>>| {
                state
                    .as_deref()
                    .and_then(crate::aggregate::rules::labels_of)
                    .is_some_and(|labels| selector.matches(&labels))
            };
            return labelled(&c.new) || labelled(&c.old);
        }
        true
    }
}

impl ChangeSink for ForegroundSink {
    fn wants_objects(&self) -> bool {
        self.scope.selector.is_some() || self.sinks.iter().any(|s| s.wants_objects())
    }

    fn record(&self, change: &ChangeRecord) {
        if self.admits(change) {
            for s in &self.sinks {
                s.record(change);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cascade::testing::{caused_by, change, obj};

    struct Count(Mutex<Vec<String>>);
    impl ChangeSink for Count {
        fn record(&self, c: &ChangeRecord) {
            self.0.lock().unwrap().push(c.object.name.clone());
        }
    }

    #[test]
    fn the_clusters_start_up_is_left_out_and_the_users_cascades_counted() {
        let count = Arc::new(Count(Mutex::new(Vec::new())));
        let sink = ForegroundSink::new(ForegroundScope::default(), vec![count.clone()]);
        let mut boot = change(1, obj("namespaces", "kube-system"), "create", 0, 1, None);
        boot.user = "system:apiserver".into();
        let mut sa = change(
            2,
            obj("serviceaccounts", "default"),
            "create",
            3_000,
            3_001,
            None,
        );
        sa.user = "system:serviceaccount:kube-system:service-account-controller".into();
        let sa = caused_by(sa, &boot, "namespaces → serviceaccounts create");
        let user = change(3, obj("deployments", "web"), "create", 5_000, 5_001, None);
        let mut rs = change(4, obj("replicasets", "web-1"), "create", 5_002, 5_003, None);
        rs.user = "system:serviceaccount:kube-system:deployment-controller".into();
        let rs = caused_by(rs, &user, "deployments → replicasets create");
        // After the first user's cascade, a cascade the cluster starts is the run's.
        let mut later = change(5, obj("nodes", "n1"), "patch", 6_000, 6_001, None);
        later.user = "system:node:n1".into();
        for c in [&boot, &sa, &user, &rs, &later] {
            sink.record(c);
        }
        assert_eq!(*count.0.lock().unwrap(), ["web", "web-1", "n1"]);
        assert_eq!(sink.left_out().background, 2);
    }

    #[test]
    fn a_namespace_keeps_its_objects_and_the_cluster_scoped_ones_its_cascades_write() {
        let count = Arc::new(Count(Mutex::new(Vec::new())));
        let scope = ForegroundScope {
            namespace: Some("default".into()),
            with_background: true,
            ..ForegroundScope::default()
        };
        let sink = ForegroundSink::new(scope, vec![count.clone()]);
        let pod = change(1, obj("pods", "p"), "create", 0, 1, None);
        let mut pv = change(2, obj("persistentvolumes", "pv-1"), "update", 5, 6, None);
        pv.object.namespace.clear();
        let pv = caused_by(pv, &pod, "pods → persistentvolumes update");
        let mut other = change(3, obj("pods", "q"), "create", 10, 11, None);
        other.object.namespace = "other".into();
        let mut lone = change(4, obj("nodes", "n1"), "patch", 12, 13, None);
        lone.object.namespace.clear();
        for c in [&pod, &pv, &other, &lone] {
            sink.record(c);
        }
        assert_eq!(*count.0.lock().unwrap(), ["p", "pv-1"]);
        assert_eq!(sink.left_out().out_of_scope, 2);
    }
}

//! The explain collector as the processor (or the frontend) feeds it.

use std::sync::{Mutex, MutexGuard};

use super::collect::State;
use super::scope::Scope;
use crate::model::ObjectRef;
use crate::pipeline::{ChangeRecord, ChangeSink, EventRecord};

/// Collects what `kascade explain` needs from the processor's changes and
/// Events (see the module docs).
pub struct ExplainCollector {
    state: Mutex<State>,
}

impl ExplainCollector {
    pub fn new(scope: Scope) -> Self {
        Self {
            state: Mutex::new(State::new(scope)),
        }
    }

    /// The `(group, resource)` pairs of the objects seen, for resolving
    /// a resource the user named.
    pub fn resources_seen(&self) -> std::collections::BTreeSet<(String, String)> {
        self.lock()
            .objects
            .iter()
            .map(|o| (o.object.group.to_string(), o.object.resource.to_string()))
            .collect()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Relates two objects (for inputs whose changes do not carry their
    /// relations, e.g. the frontend's raw spans with their link spans).
    pub fn relate(&self, object: &ObjectRef, other: &crate::pipeline::RelatedObject) {
        let mut st = self.lock();
        if !st.scope.may_concern(object) {
            return;
        }
        let a = st.obj(object);
        let b = st.obj(&other.object);
        if other.is_parent {
            st.relate(b, a, &other.class);
        } else {
            st.relate(a, b, &other.class);
        }
    }

    /// What the external write `root` changed, when its change record had
    /// no objects to compare (see [`change_lines`]).
    pub fn set_root_changes(&self, root: crate::pipeline::SpanRef, changes: Vec<String>) {
        if let Some(info) = self.lock().roots.get_mut(&root) {
            info.changes = changes;
        }
    }

    /// Hops counted per edge (`cascade.edge`) so far: the baseline of
    /// slow-hop findings, the cluster's start-up and retries left out as
    /// `kascade analyze` leaves them out.
    pub fn hop_counts(&self) -> std::collections::BTreeMap<String, u64> {
        self.lock()
            .edges
            .iter()
            .map(|(edge, e)| (edge.clone(), e.latencies.count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub(super) fn into_state(self) -> State {
        self.state.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl ChangeSink for ExplainCollector {
    fn wants_objects(&self) -> bool {
        true
    }

    fn record(&self, change: &ChangeRecord) {
        self.lock().record(change);
    }

    fn wants_events(&self) -> bool {
        true
    }

    fn event(&self, event: &EventRecord) {
        self.lock().record_event(event);
    }
}

//! The explain collector as the processor (or the frontend) feeds it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::collect::State;
use super::scope::Scope;
use crate::flow::{ChangeRecord, ChangeSink, EventRecord};
use crate::model::ObjectRef;

/// Collects what `kascade explain` needs from the processor's changes and
/// Events (see the module docs).
pub struct ExplainCollector {
    state: Arc<Mutex<State>>,
    /// With [`ExplainCollector::on_own_thread`]: the thread recording what
    /// arrives, until the first read of the state ends it.
    recorder: Mutex<Option<Recorder>>,
}

/// A thread of its own that records changes and Events in arrival order.
struct Recorder {
    tx: std::sync::mpsc::SyncSender<Arrived>,
    thread: std::thread::JoinHandle<()>,
}

enum Arrived {
    Change(Box<ChangeRecord>),
    Event(Box<EventRecord>),
}

/// What the processor may hand the recording thread ahead of it.
const RECORDER_QUEUE: usize = 4096;

impl ExplainCollector {
    pub fn new(scope: Scope) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::new(scope))),
            recorder: Mutex::new(None),
        }
    }

    /// Reads kube-apiserver's own traces of the requests (`explain
    /// --component-traces`): the part that made a write slow, a webhook
    /// that failed open.
    pub fn with_components(self, components: crate::component_spans::ComponentSpans) -> Self {
        self.lock().components = Some(Arc::new(components));
        self
    }

    /// A collector that records on a thread of its own, beside the
    /// processor's (an offline run: a sixth of its CPU leaves the thread
    /// that processes). Reading the state (e.g. [`Self::resources_seen`])
    /// first waits for everything handed to it; what arrives later is
    /// recorded in place.
    pub fn on_own_thread(scope: Scope) -> Self {
        let c = Self::new(scope);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arrived>(RECORDER_QUEUE);
        let state = c.state.clone();
        let thread = std::thread::Builder::new()
            .name("kascade-explain".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    // Whatever queued meanwhile, under one lock.
                    for arrived in std::iter::once(first).chain(rx.try_iter()) {
                        match arrived {
                            Arrived::Change(c) => st.record(&c),
                            Arrived::Event(e) => st.record_event(&e),
                        }
                    }
                }
            })
            .expect("a thread to record explain's input");
        *c.recorder.lock().unwrap_or_else(|e| e.into_inner()) = Some(Recorder { tx, thread });
        c
    }

    /// Hands `arrived` to the recording thread; gives it back when there is
    /// none (any more).
    fn hand_over(&self, arrived: impl FnOnce() -> Arrived) -> Option<()> {
        let recorder = self.recorder.lock().unwrap_or_else(|e| e.into_inner());
        let r = recorder.as_ref()?;
        r.tx.send(arrived()).ok()
    }

    /// Ends the recording thread once it has recorded everything handed to
    /// it (a panic there is raised here).
    fn finish_recording(&self) {
        let recorder = self
            .recorder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(Recorder { tx, thread }) = recorder {
            drop(tx);
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
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
        self.finish_recording();
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Relates two objects (for inputs whose changes do not carry their
    /// relations, e.g. the frontend's raw spans with their link spans).
    pub fn relate(&self, object: &ObjectRef, other: &crate::flow::RelatedObject) {
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
    pub fn set_root_changes(&self, root: crate::flow::SpanRef, changes: Vec<String>) {
        if let Some(info) = self.lock().roots.get_mut(&root) {
            info.changes = changes;
        }
    }

    /// Hops counted per edge (`cascade.edge`) so far: the baseline of
    /// slow-hop findings, the cluster's start-up and retries left out as
    /// `kascade analyze` leaves them out.
    #[cfg(feature = "test-support")]
    pub fn hop_counts(&self) -> std::collections::BTreeMap<String, u64> {
        self.lock()
            .edges
            .iter()
            .map(|(edge, e)| (edge.clone(), e.latencies.count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub(super) fn into_state(self) -> State {
        self.finish_recording();
        match Arc::try_unwrap(self.state) {
            Ok(state) => state.into_inner().unwrap_or_else(|e| e.into_inner()),
            // The recording thread has ended: nobody else holds it.
            Err(shared) => std::mem::replace(
                &mut *shared.lock().unwrap_or_else(|e| e.into_inner()),
                State::new(Scope::default()),
            ),
        }
    }
}

impl ChangeSink for ExplainCollector {
    fn wants_objects(&self) -> bool {
        true
    }

    fn record(&self, change: &ChangeRecord) {
        if self
            .hand_over(|| Arrived::Change(Box::new(change.clone())))
            .is_none()
        {
            self.lock().record(change);
        }
    }

    fn wants_events(&self) -> bool {
        true
    }

    fn event(&self, event: &EventRecord) {
        if self
            .hand_over(|| Arrived::Event(Box::new(event.clone())))
            .is_none()
        {
            self.lock().record_event(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cascade::testing::{caused_by, change, obj};
    use crate::analysis::explain::{Inputs, report};

    fn changes() -> Vec<ChangeRecord> {
        let deploy = change(1, obj("deployments", "web"), "create", 0, 1, None);
        let mut rs = change(2, obj("replicasets", "web-1"), "create", 5, 6, None);
        rs.user = "system:serviceaccount:kube-system:deployment-controller".into();
        let rs = caused_by(rs, &deploy, "deployments → replicasets create");
        let mut pod = change(3, obj("pods", "web-1-a"), "create", 9, 10, None);
        pod.user = "system:serviceaccount:kube-system:replicaset-controller".into();
        pod.code = 403;
        pod.failure = Some("pods \"web-1-a\" is forbidden: exceeded quota".into());
        let pod = caused_by(pod, &rs, "replicasets → pods create");
        vec![deploy, rs, pod]
    }

    /// Recording on a thread of its own gives the report recording in
    /// place gives; a change arriving after the state was read is still
    /// recorded (in place).
    #[test]
    fn recording_on_its_own_thread_reports_what_recording_in_place_does() {
        let changes = changes();
        let (last, first) = changes.split_last().unwrap();
        let in_place = ExplainCollector::new(Scope::default());
        let threaded = ExplainCollector::on_own_thread(Scope::default());
        for c in first {
            in_place.record(c);
            threaded.record(c);
        }
        assert_eq!(threaded.resources_seen(), in_place.resources_seen());
        in_place.record(last);
        threaded.record(last);
        let (a, b) = (
            report(in_place, Inputs::default()),
            report(threaded, Inputs::default()),
        );
        assert!(!a.findings.is_empty(), "the refused create is a finding");
        assert_eq!(a, b);
    }
}

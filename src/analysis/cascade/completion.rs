//! When a cascade is done: every object it touched has settled.
//!
//! An object settles with a write after which it is `Current` (the
//! controllers' own signals, as `aggregate/readiness` reads them: generation
//! observed, replicas ready and updated, `Available`/`Complete`…), removed,
//! a Pod in a terminal phase (Succeeded is `Current`; Failed is known from a
//! `pods → Failed` edge or the new object's phase), or an object without
//! readiness (ConfigMaps, Services, EndpointSlices: settled with the write).
//! It settled *for good* at the first write of its last run of settled
//! writes; a write stored before one already applied (its resourceVersion
//! older: its response finished late) tells nothing of the object now and
//! is skipped; a refused write (code ≥ 400) changed nothing and is skipped,
//! except a delete answered 404 that the processor marks `deleted` (the
//! object is gone: the kubelet's confirmation after a graceful delete).

use std::collections::HashMap;
use std::time::SystemTime;

use crate::flow::ChangeRecord;
use crate::model::ObjectRef;

/// Whether a cascade is done.
#[derive(Clone, Debug, PartialEq)]
pub enum Completion {
    /// Every object touched settled; `at` is when the last one did.
    Complete { at: SystemTime },
    /// Objects still not settled after their last write in the cascade, in
    /// the order the cascade first touched them.
    Waiting(Vec<Waiting>),
    /// Objects not settled after their last write in the cascade, each of
    /// them also written by writes logged before the changes they react to
    /// (two apiservers' clocks disagree, or the logs are out of order):
    /// those writes have no cause, so whether they settled the objects in
    /// this cascade is not known. Neither complete nor gone wrong: said.
    NotKnown(Vec<Waiting>),
}

impl Completion {
    #[cfg(feature = "test-support")]
    pub fn is_complete(&self) -> bool {
        matches!(self, Completion::Complete { .. })
    }
}

/// An object a cascade still waits for: its readiness after its last write.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    pub object: ObjectRef,
    /// `InProgress`, `Failed`, `Terminating`.
    pub status: String,
    pub message: String,
    /// The last write's response completed.
    pub since: SystemTime,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", super::object_name(&self.object), self.status)?;
        if !self.message.is_empty() {
            write!(f, " ({})", self.message)?;
        }
        Ok(())
    }
}

/// A Pod write that left the Pod in a terminal phase (it never leaves it).
pub(super) fn pod_terminal(c: &ChangeRecord) -> bool {
    if c.object.resource != "pods" || !c.object.group.is_empty() {
        return false;
    }
    let by_edge = c
        .cause
        .as_ref()
        .is_some_and(|k| k.edge.ends_with("→ Succeeded") || k.edge.ends_with("→ Failed"));
    let by_state = c.new.as_ref().is_some_and(|n| {
        matches!(
            crate::json::pointer(&**n, "/status/phase")
                .and_then(crate::json::JsonValueTrait::as_str),
            Some("Succeeded" | "Failed")
        )
    });
    by_edge || by_state
}

/// Whether `c` tells about the object's state: a successful write, or a
/// failed one that found the object gone.
pub(crate) fn counts(c: &ChangeRecord) -> bool {
    c.code < 400 || c.deleted
}

/// Whether the object is settled after `c`; `terminal_pod`: the object is a
/// Pod known to be in a terminal phase.
pub(crate) fn settles(c: &ChangeRecord, terminal_pod: bool) -> bool {
    if c.deleted {
        return true;
    }
    match &c.readiness {
        None => true,
        Some(r) => r.status == "Current" || (terminal_pod && r.status == "Failed"),
    }
}

/// How one object settles, change by change (in order of completion).
#[derive(Default)]
pub(crate) struct Settling {
    terminal_pod: bool,
    /// A change removed it: a write that completed later (other than a
    /// create) was applied before the removal, its response just came late.
    removed: bool,
    /// The newest resourceVersion applied: a change stored before it (its
    /// response finished late) tells nothing of the object now.
    newest: Option<u64>,
    pub(crate) settled_since: Option<SystemTime>,
    /// The live tracker's: the object's readiness (a hash of status and
    /// message) when this cascade first wrote it, if unsettled then, and
    /// after its last write here — equal, the cascade changed nothing of it
    /// (see [`settle_unchanged`]).
    pub(crate) found_unsettled: Option<u64>,
    pub(crate) left: Option<u64>,
}

impl Settling {
    /// Applies a change that [`counts`]; whether the object is settled after it.
    pub(crate) fn apply(&mut self, c: &ChangeRecord) -> bool {
        if self.removed && c.verb != "create" && !c.deleted {
            return true;
        }
        // Stored before a change already applied: its response finished
        // late (a create's, after the scheduler bound the object and the
        // kubelet started it). A new object under the name has newer ones.
        if let (Some(v), Some(newest)) = (c.version, self.newest)
            && v < newest
        {
            return self.settled_since.is_some();
        }
        self.newest = self.newest.max(c.version);
        if c.verb == "create" {
            self.removed = false;
            self.terminal_pod = false;
        }
        self.removed |= c.deleted;
        self.terminal_pod |= pod_terminal(c);
        if settles(c, self.terminal_pod) {
            self.settled_since.get_or_insert(c.completed);
            true
        } else {
            self.settled_since = None;
            false
        }
    }
}

/// A readiness as the live tracker compares it: status and message.
pub(crate) fn readiness_key(c: &ChangeRecord) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Some(r) = &c.readiness {
        r.status.hash(&mut h);
        r.message.hash(&mut h);
    }
    h.finish()
}

impl Settling {
    /// Whether the cascade found the object unsettled and left it as it
    /// found it (see [`settle_unchanged`]).
    pub(crate) fn left_as_found(&self) -> bool {
        self.settled_since.is_none()
            && self.found_unsettled.is_some()
            && self.found_unsettled == self.left
    }

    /// Another cascade settled the object at `at`, which this one found
    /// unsettled and left so: its wait ended then.
    pub(crate) fn settled_elsewhere(&mut self, at: SystemTime) {
        self.settled_since.get_or_insert(at);
    }

    /// Another cascade removed the object at `at` while this one waited
    /// for it (the write that took away a deleted object's last finalizer;
    /// a Pod a later scale-down deleted): its wait ended then.
    pub(crate) fn removed_elsewhere(&mut self, at: SystemTime) {
        self.removed = true;
        self.settled_since.get_or_insert(at);
    }
}

/// Per object: how it settles, and what it waits for.
#[derive(Default)]
struct ObjectState {
    first_seen: usize,
    settling: Settling,
    waiting: Option<Waiting>,
}

/// The completion of a cascade's changes (any order).
pub(super) fn completion(changes: &[ChangeRecord]) -> Completion {
    let mut order: Vec<&ChangeRecord> = changes.iter().filter(|c| counts(c)).collect();
    order.sort_by_key(|c| (c.completed, c.received));
    let mut objects: HashMap<&ObjectRef, ObjectState> = HashMap::new();
    for (i, c) in order.iter().enumerate() {
        let st = objects.entry(&c.object).or_insert_with(|| ObjectState {
            first_seen: i,
            ..ObjectState::default()
        });
        if st.settling.apply(c) {
            st.waiting = None;
        } else {
            let (status, message) = c
                .readiness
                .as_ref()
                .map(|r| (r.status.clone(), r.message.clone()))
                .unwrap_or_default();
            st.waiting = Some(Waiting {
                object: c.object.clone(),
                status,
                message,
                since: c.completed,
            });
        }
    }
    let mut waiting: Vec<(usize, Waiting)> = objects
        .values_mut()
        .filter_map(|s| s.waiting.take().map(|w| (s.first_seen, w)))
        .collect();
    if !waiting.is_empty() {
        waiting.sort_by_key(|(i, _)| *i);
        return Completion::Waiting(waiting.into_iter().map(|(_, w)| w).collect());
    }
    let at = objects
        .values()
        .filter_map(|s| s.settling.settled_since)
        .max()
        .or_else(|| changes.iter().map(|c| c.completed).max())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Completion::Complete { at }
}

/// An object a cascade waits for although its writes changed nothing of
/// the object's readiness — they found it unsettled by other work and left
/// it so (the ttl controller annotating a Node its kubelet is still
/// registering) — waits for that other work: its wait ends when a later
/// write, of any cascade, settles the object. A cascade whose writes made
/// the object unsettled (a rollout) keeps waiting whatever came later.
pub(super) fn settle_unchanged(cascades: &mut [super::Cascade]) {
    let waited: std::collections::HashSet<&ObjectRef> = cascades
        .iter()
        .filter_map(|c| match &c.completion {
            Completion::Waiting(w) => Some(w.iter().map(|w| &w.object)),
            _ => None,
        })
        .flatten()
        .collect();
    if waited.is_empty() {
        return;
    }
    // Each waited-for object's writes that tell its state: (completed,
    // readiness after it, settled by it), in order of completion.
    type State = (SystemTime, Option<(String, String)>, bool);
    let mut history: HashMap<ObjectRef, Vec<State>> = HashMap::new();
    for ch in cascades.iter().flat_map(|c| &c.changes) {
        if waited.contains(&ch.object) && counts(ch) {
            let readiness = ch
                .readiness
                .as_ref()
                .map(|r| (r.status.clone(), r.message.clone()));
            history.entry(ch.object.clone()).or_default().push((
                ch.completed,
                readiness,
                settles(ch, false),
            ));
        }
    }
    for states in history.values_mut() {
        states.sort_by_key(|s| s.0);
    }
    for c in cascades.iter_mut() {
        let Completion::Waiting(waiting) = &mut c.completion else {
            continue;
        };
        let mut at = c.changes.iter().map(|ch| ch.completed).max();
        waiting.retain(|w| {
            let Some(states) = history.get(&w.object) else {
                return true;
            };
            let Some(first) = c
                .changes
                .iter()
                .filter(|ch| ch.object == w.object && counts(ch))
                .map(|ch| ch.received)
                .min()
            else {
                return true;
            };
            let before = states.iter().rev().find(|s| s.0 <= first);
            let unchanged = before.is_some_and(|(_, r, settled)| {
                !settled
                    && r.as_ref().is_some_and(|(status, message)| {
                        *status == w.status && *message == w.message
                    })
            });
            if !unchanged {
                return true;
            }
            match states.iter().find(|s| s.0 > w.since && s.2) {
                Some(&(t, _, _)) => {
                    at = at.max(Some(t));
                    false
                }
                None => true,
            }
        });
        if waiting.is_empty()
            && let Some(at) = at
        {
            c.completion = Completion::Complete { at };
        }
    }
}

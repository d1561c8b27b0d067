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

impl Settling {
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

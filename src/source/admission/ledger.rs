//! Admitted writes waiting for the list-watch to show them persisted.
//!
//! A validating webhook sees a write before it is stored and never learns
//! the answer: a later webhook, validation, a quota or a conflict may
//! still refuse it. The watch of the same object says what was stored. So
//! each admitted write waits here, by object, until a version the watch
//! delivers is the one it wrote (the same content; for a binding the node
//! set, for a scale the replicas, for a delete the deletion begun or done),
//! and is then shown as a write of that version, from admission to watch
//! delivery. One the watch never shows within the wait was not persisted.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::flow::{AuditEvent, WatchChange, WatchKind};
use crate::json::{JsonContainerTrait as _, JsonValueTrait as _, Value};
use crate::metrics::AdmittedWriteOutcome as Outcome;
use crate::model::ObjectRef;

use super::event;
use super::review::Admitted;

/// Admission calls of one write retried by the apiserver (a storage
/// conflict re-runs admission) come within this of each other: an earlier
/// call of the same writer, verb and object is an attempt of the write the
/// watch showed, not a refused write.
const ATTEMPTS_WITHIN: Duration = Duration::from_secs(2);

/// What the watch must show for an admitted write to be persisted.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// An object created with this uid (empty: any).
    Created { uid: String },
    /// A version with the admitted content.
    Content,
    /// The Pod bound to this node.
    Bound { node: String },
    /// The parent with these replicas.
    Scaled { replicas: Option<i64> },
    /// Its deletion begun (`deletionTimestamp` set) or done; `begun` when
    /// it had begun before this delete.
    Deleting { begun: bool },
    /// A Pod's deletion begun by an eviction.
    Evicted,
}

struct Pending {
    admitted: Box<Admitted>,
    expect: Expect,
    seq: u64,
    /// Another version of the object was stored after this write was
    /// admitted: an update not stored then lost a conflict.
    raced: bool,
    /// The object was deleted after this write was admitted.
    gone: bool,
}

/// Why an admission request was not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotHeld {
    /// Its cluster and resource are not watched: what was stored cannot be
    /// known, so nothing is shown.
    Unwatched,
}

#[derive(Default)]
struct State {
    by_object: HashMap<ObjectRef, VecDeque<Pending>>,
    /// `(due, object, seq)` in admission order; entries of writes already
    /// shown are skipped when they come up.
    due: VecDeque<(Instant, ObjectRef, u64)>,
    pending: usize,
    /// The reviews' sizes of the writes waiting.
    bytes: usize,
    next_seq: u64,
    /// `(cluster, group, resource)` the list-watch delivers.
    watched: HashSet<(String, String, String)>,
}

/// The admitted writes of every cluster, bounded by count.
pub(crate) struct AdmittedWrites {
    state: Mutex<State>,
    /// How long an admitted write waits for the watch.
    wait: Duration,
    max_pending: usize,
    max_bytes: usize,
}

/// An admitted write made into an audit event, and what became of it.
pub(crate) struct Shown {
    pub cluster: Arc<str>,
    /// `None` only if it could not be written as one (said).
    pub event: Option<AuditEvent>,
    pub outcome: Outcome,
}

impl AdmittedWrites {
    /// Holds writes for `wait`, at most `max_pending` of them and
    /// `max_bytes` of their reviews.
    pub(crate) fn new(wait: Duration, max_pending: usize, max_bytes: usize) -> Self {
        Self {
            state: Mutex::default(),
            wait,
            max_pending: max_pending.max(1),
            max_bytes,
        }
    }

    /// Whether the list-watch of `cluster` delivers `group`/`resource`.
    pub(crate) fn watching(&self, cluster: &str, group: &str, resource: &str, delivers: bool) {
        let key = (cluster.into(), group.into(), resource.into());
        let mut st = self.lock();
        if delivers {
            st.watched.insert(key);
        } else {
            st.watched.remove(&key);
        }
    }

    /// Admitted writes waiting for the watch.
    pub(crate) fn pending(&self) -> usize {
        self.lock().pending
    }

    /// Entries of the expiry queue, stale ones included.
    #[cfg(test)]
    pub(crate) fn due_entries(&self) -> usize {
        self.lock().due.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it cannot leave the maps half-changed in a
        // way that matters more than losing them: go on with what is there.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds an admitted write until the watch shows what became of it. An
    /// update that changes nothing is shown at once (nothing will be
    /// stored). Returns what is to be shown now, and the writes shed to
    /// stay within the bound (oldest first).
    pub(crate) fn admit(
        &self,
        admitted: Box<Admitted>,
        now: Instant,
    ) -> Result<(Option<Shown>, usize), NotHeld> {
        let o = &admitted.object;
        let mut st = self.lock();
        if !st
            .watched
            .contains(&(o.cluster.clone(), o.group.clone(), o.resource.clone()))
        {
            return Err(NotHeld::Unwatched);
        }
        if let Some(unchanged) = unchanged(&admitted) {
            let cluster: Arc<str> = admitted.object.cluster.as_str().into();
            return Ok((
                Some(Shown {
                    cluster,
                    event: event::unchanged(&admitted, unchanged),
                    outcome: Outcome::NoChange,
                }),
                0,
            ));
        }
        let expect = expectation(&admitted);
        let mut shed = 0;
        let bytes = admitted.bytes;
        while st.pending >= self.max_pending
            || (st.pending > 0 && st.bytes + bytes > self.max_bytes)
        {
            let Some((_, key, seq)) = st.due.pop_front() else {
                break;
            };
            if take(&mut st, &key, |p| p.seq == seq).is_some() {
                shed += 1;
            }
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.due
            .push_back((now + self.wait, admitted.object.clone(), seq));
        st.by_object
            .entry(admitted.object.clone())
            .or_default()
            .push_back(Pending {
                admitted,
                expect,
                seq,
                raced: false,
                gone: false,
            });
        st.pending += 1;
        st.bytes += bytes;
        // Entries of writes already shown wait in `due` until their time:
        // when they outnumber the writes waiting, they are dropped, so the
        // deque stays within the bound too.
        if st.due.len() > 2 * st.pending + 1024 {
            let st = &mut *st;
            let by_object = &st.by_object;
            st.due.retain(|(_, key, seq)| {
                by_object
                    .get(key)
                    .is_some_and(|q| q.iter().any(|p| p.seq == *seq))
            });
        }
        Ok((None, shed))
    }

    /// The admitted write a watched version shows persisted, made into the
    /// audit event of that write; earlier admissions of the same write
    /// (retried by the apiserver) are dropped and counted by the caller
    /// (`attempts`).
    pub(crate) fn pair(&self, change: &WatchChange) -> Option<(Shown, usize)> {
        let mut st = self.lock();
        let queue = st.by_object.get_mut(&change.object)?;
        let Some(at) = queue.iter().position(|p| shows(&p.expect, p, change)) else {
            // A version none of them wrote: each, if never stored, lost a
            // conflict to it.
            if change.kind != WatchKind::Listed {
                let gone = change.kind == WatchKind::Deleted;
                queue.iter_mut().for_each(|p| {
                    p.raced = true;
                    p.gone |= gone;
                });
            }
            return None;
        };
        let found = queue.remove(at)?;
        // Every other write waiting on this object was admitted before
        // another version was stored.
        let gone = change.kind == WatchKind::Deleted;
        for p in queue.iter_mut() {
            p.raced = true;
            p.gone |= gone;
        }
        let a = &found.admitted;
        let mut attempts = 0;
        let mut freed = a.bytes;
        queue.retain(|p| {
            let b = &p.admitted;
            let attempt = b.verb == a.verb
                && b.subresource == a.subresource
                && b.user == a.user
                && p.expect_kind() == found.expect_kind()
                && b.received <= a.received
                && a.received.duration_since(b.received).unwrap_or_default() <= ATTEMPTS_WITHIN;
            if attempt {
                attempts += 1;
                freed += b.bytes;
            }
            !attempt
        });
        if queue.is_empty() {
            st.by_object.remove(&change.object);
        }
        st.pending -= 1 + attempts;
        st.bytes -= freed;
        drop(st);
        let shown = Shown {
            cluster: found.admitted.object.cluster.as_str().into(),
            event: event::persisted(&found.admitted, &change.state, change.observed),
            outcome: Outcome::Persisted,
        };
        Some((shown, attempts))
    }

    /// The admitted writes whose wait is over (every one when `all`): not
    /// persisted, or refused by a conflict.
    pub(crate) fn expired(&self, now: Instant, all: bool) -> Vec<Shown> {
        let mut out = Vec::new();
        let mut st = self.lock();
        while let Some((due, _, _)) = st.due.front() {
            if !all && *due > now {
                break;
            }
            let (_, key, seq) = st.due.pop_front().expect("front exists");
            let Some(p) = take(&mut st, &key, |p| p.seq == seq) else {
                continue;
            };
            out.push(not_persisted(&p, self.wait));
        }
        out
    }
}

impl Pending {
    fn expect_kind(&self) -> std::mem::Discriminant<Expect> {
        std::mem::discriminant(&self.expect)
    }
}

/// Removes the first pending write of `key` that `which` picks.
fn take(st: &mut State, key: &ObjectRef, which: impl Fn(&Pending) -> bool) -> Option<Pending> {
    let queue = st.by_object.get_mut(key)?;
    let at = queue.iter().position(which)?;
    let p = queue.remove(at);
    if queue.is_empty() {
        st.by_object.remove(key);
    }
    if let Some(p) = &p {
        st.pending -= 1;
        st.bytes -= p.admitted.bytes;
    }
    p
}

/// How a write not seen persisted is shown.
fn not_persisted(p: &Pending, wait: Duration) -> Shown {
    let a = &p.admitted;
    let cluster: Arc<str> = a.object.cluster.as_str().into();
    // A delete of an object whose deletion had begun (its finalizers not
    // done) changes nothing when nothing else does: answered, not refused.
    if p.expect == (Expect::Deleting { begun: true })
        && !p.gone
        && let Some(old) = &a.old
    {
        return Shown {
            cluster,
            event: event::unchanged(a, old),
            outcome: Outcome::NoChange,
        };
    }
    let (refusal, outcome) = if p.gone {
        (event::Refusal::Gone, Outcome::Gone)
    } else if p.raced && a.verb == "update" {
        (event::Refusal::Conflict, Outcome::Conflict)
    } else {
        (event::Refusal::NotPersisted, Outcome::NotPersisted)
    };
    Shown {
        cluster,
        event: event::not_persisted(a, refusal, wait),
        outcome,
    }
}

/// The object an update leaves as it was (content the same as before):
/// the apiserver stores nothing and answers with the object as it is.
fn unchanged(a: &Admitted) -> Option<&Value> {
    if !matches!(a.verb, "update" | "patch") {
        return None;
    }
    let (new, old) = (a.new.as_ref()?, a.old.as_ref()?);
    if a.subresource.is_empty() || a.subresource == "status" {
        same_content(new, old).then_some(old)
    } else {
        None
    }
}

fn str_at<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    crate::json::pointer(v, path).and_then(Value::as_str)
}

fn expectation(a: &Admitted) -> Expect {
    let new = a.new.as_ref();
    match (a.verb, a.subresource.as_str()) {
        ("create", "binding") => Expect::Bound {
            node: new
                .and_then(|b| str_at(b, "/target/name"))
                .unwrap_or_default()
                .to_string(),
        },
        ("create", "eviction") => Expect::Evicted,
        ("create", _) => Expect::Created {
            uid: new
                .and_then(|o| str_at(o, "/metadata/uid"))
                .unwrap_or_default()
                .to_string(),
        },
        (_, "scale") => Expect::Scaled {
            replicas: new.and_then(|s| crate::json::pointer(s, "/spec/replicas")?.as_i64()),
        },
        ("delete", _) => Expect::Deleting {
            begun: a
                .old
                .as_ref()
                .is_some_and(|o| crate::json::pointer(o, "/metadata/deletionTimestamp").is_some()),
        },
        _ => Expect::Content,
    }
}

/// Whether the watched `change` is the version the write `p` stored.
fn shows(expect: &Expect, p: &Pending, change: &WatchChange) -> bool {
    let state = &change.state;
    let deleting = crate::json::pointer(state, "/metadata/deletionTimestamp").is_some();
    match (expect, change.kind) {
        // kube's watcher reports an object's first version as applied, as
        // any later one (kascade's watcher: Modified): the uid tells.
        (Expect::Created { uid }, WatchKind::Added | WatchKind::Listed) => {
            uid.is_empty() || str_at(state, "/metadata/uid") == Some(uid)
        }
        (Expect::Created { uid }, WatchKind::Modified) => {
            !uid.is_empty() && str_at(state, "/metadata/uid") == Some(uid)
        }
        (Expect::Content, WatchKind::Modified | WatchKind::Listed) => p
            .admitted
            .new
            .as_ref()
            .is_some_and(|new| same_content(new, state)),
        (Expect::Bound { node }, WatchKind::Modified | WatchKind::Listed) => {
            str_at(state, "/spec/nodeName") == Some(node)
        }
        (Expect::Scaled { replicas }, WatchKind::Modified | WatchKind::Listed) => {
            replicas.is_some()
                && crate::json::pointer(state, "/spec/replicas").and_then(Value::as_i64)
                    == *replicas
        }
        (Expect::Deleting { .. } | Expect::Evicted, WatchKind::Deleted) => true,
        (Expect::Deleting { begun: false } | Expect::Evicted, WatchKind::Modified) => deleting,
        _ => false,
    }
}

/// Whether two versions of an object hold the same content: everything
/// but `metadata.resourceVersion` (set when stored) and managedFields.
fn same_content(a: &Value, b: &Value) -> bool {
    use crate::json::Object;
    const STORED: [&str; 2] = ["resourceVersion", "managedFields"];
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return false;
    };
    // Both compared as sets of fields: kascade's own edits (managedFields
    // removed) reorder an object's keys.
    fn same_fields(a: &Object, b: &Object, skip: &dyn Fn(&str) -> bool) -> bool {
        let count = |o: &Object| o.iter().filter(|(k, _)| !skip(k)).count();
        count(a) == count(b)
            && a.iter()
                .filter(|(k, _)| !skip(k))
                .all(|(k, v)| b.get(&k).is_some_and(|w| crate::json::same(v, w)))
    }
    fn meta(o: &Object) -> Option<&Object> {
        o.get(&"metadata").and_then(|m| m.as_object())
    }
    same_fields(a, b, &|k| k == "metadata")
        && match (meta(a), meta(b)) {
            (Some(ma), Some(mb)) => same_fields(ma, mb, &|k| STORED.contains(&k)),
            (None, None) => true,
            _ => false,
        }
}

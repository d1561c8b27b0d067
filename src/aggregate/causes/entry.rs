//! One write as a candidate cause, kept small: the index holds one for
//! every write of the last seconds and the newest of each kind for every
//! object written in the last 15 minutes.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::flow::{SpanRef, WriteCpid};

use super::super::rules::ChangeClass;

/// The cascade a change belongs to, once its shard has inferred its cause.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resolved {
    pub root: SpanRef,
    pub depth: u32,
    /// The change's CPID (its object's, or carried over from its cause).
    pub cpid: Option<WriteCpid>,
    /// A Pod status write that finished the Pod: how it ended.
    pub pod_end: Option<PodEnd>,
}

/// How a Pod finished (`status.phase` Succeeded or Failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PodEnd {
    Succeeded,
    Failed,
}

impl PodEnd {
    /// Of a Pod status write's new phase, if it finished the Pod.
    pub(crate) fn of(new_phase: Option<&str>) -> Option<Self> {
        match new_phase? {
            "Succeeded" => Some(PodEnd::Succeeded),
            "Failed" => Some(PodEnd::Failed),
            _ => None,
        }
    }
}

/// A time as nanoseconds since the Unix epoch (earlier ones as the epoch):
/// 8 bytes where `SystemTime` takes 16, in every entry of the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Nanos(u64);

impl Nanos {
    pub(crate) fn of(t: SystemTime) -> Self {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
        Nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.0)
    }

    pub(crate) fn minus(self, d: Duration) -> Self {
        Nanos(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

/// One successful write, as a candidate cause. 112 bytes (an `Arc` of it
/// fills a 128-byte allocation): the index holds one for every write of the
/// last seconds and the newest of each kind for every object written in the
/// last 15 minutes.
pub(crate) struct ChangeEntry {
    pub span: SpanRef,
    /// Its place in arrival order ([`CauseIndex::next_arrival`](super::CauseIndex::next_arrival)).
    pub arrival: u64,
    pub class: ChangeClass,
    /// The writer, interned: few distinct users write most changes (a
    /// `String` behind the `Arc` to keep the pointer thin).
    pub user: Arc<String>,
    pub op: Op,
    pub received: Nanos,
    /// Microseconds from `received` to the response's completion, saturated
    /// at 71 minutes: audit times are microseconds, and 4 bytes leave room
    /// for `revision` in the entry's allocation.
    completed_after_us: u32,
    pub revision: Revision,
    resolved: OnceLock<Resolved>,
}

/// Wakes whoever waits for a change's cascade, by the change's slot of
/// arrival order: a resolution wakes only the waits on its slot. (One
/// `Notify` shared by all changes woke every waiting shard on every
/// resolution, each then checked and waited again: under load the wakeups
/// were ≈ 1 % of the collector's CPU.)
pub(crate) struct ResolvedWakers([tokio::sync::Notify; WAKER_SLOTS]);

/// Slots of [`ResolvedWakers`]: far more than shards can wait on at once.
const WAKER_SLOTS: usize = 64;

impl Default for ResolvedWakers {
    fn default() -> Self {
        Self(std::array::from_fn(|_| tokio::sync::Notify::new()))
    }
}

impl ResolvedWakers {
    fn slot(&self, change: &ChangeEntry) -> &tokio::sync::Notify {
        &self.0[(change.arrival % WAKER_SLOTS as u64) as usize]
    }
}

/// The revision etcd gave a stored write (its `resourceVersion`), by its low
/// 32 bits: only writes in flight together are ordered by it, whose
/// revisions lie close, so comparing them modulo 2³² (serial number
/// arithmetic, RFC 1982) is exact. 0 when not known: a failed write, a
/// response without the object, another storage's opaque version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Revision(u32);

impl Revision {
    pub(crate) fn of(resource_version: Option<u64>) -> Self {
        // Truncated on purpose: see the type's comment.
        Revision(resource_version.map_or(0, |v| v as u32))
    }

    /// Whether this revision is later than `other`; `None` when either is
    /// not known.
    pub(crate) fn after(self, other: Revision) -> Option<bool> {
        (self.0 != 0 && other.0 != 0 && self != other)
            .then(|| (self.0.wrapping_sub(other.0) as i32) > 0)
    }
}

/// A change for tests: `class` by user `u`, received and completed at those
/// microseconds since the epoch, its span id and arrival `i`, stored as
/// revision `rv` (0: not known).
#[cfg(test)]
pub(super) fn test_entry(
    i: u64,
    class: ChangeClass,
    received_us: u64,
    completed_us: u64,
    rv: u64,
) -> Arc<ChangeEntry> {
    let at = |us: u64| UNIX_EPOCH + Duration::from_micros(us);
    Arc::new(ChangeEntry::new(
        SpanRef {
            trace_id: [1; 16],
            span_id: i.to_be_bytes(),
        },
        i,
        class,
        Arc::new("u".to_string()),
        Op::of("update", ""),
        at(received_us),
        at(completed_us),
        Revision::of((rv != 0).then_some(rv)),
    ))
}

/// `<verb>[ <subresource>]` of a write, as an index into [`Op::NAMES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Op(u8);

impl Op {
    const NAMES: [&'static str; 14] = [
        "create binding",
        "create",
        "update scale",
        "patch scale",
        "update status",
        "patch status",
        "update",
        "patch",
        "deletecollection",
        "delete",
        "watch added",
        "watch deleted",
        "watch modified",
        "write",
    ];

    /// The op of a write [`ChangeClass::of`] classifies, or of a watch
    /// change (`added`, `modified`, `deleted`).
    pub(crate) fn of(verb: &str, subresource: &str) -> Self {
        Op(match (verb, subresource) {
            ("create", "binding") => 0,
            ("create", _) => 1,
            ("update", "scale") => 2,
            ("patch", "scale") => 3,
            ("update", "status") => 4,
            ("patch", "status") => 5,
            ("update", _) => 6,
            ("patch", _) => 7,
            ("deletecollection", _) => 8,
            ("delete", _) => 9,
            ("added", _) => 10,
            ("deleted", _) => 11,
            ("modified", _) => 12,
            _ => 13,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        Self::NAMES[self.0 as usize]
    }
}

impl ChangeEntry {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        span: SpanRef,
        arrival: u64,
        class: ChangeClass,
        user: Arc<String>,
        op: Op,
        received: SystemTime,
        completed: SystemTime,
        revision: Revision,
    ) -> Self {
        let took = completed.duration_since(received).unwrap_or_default();
        Self {
            span,
            arrival,
            class,
            user,
            op,
            received: Nanos::of(received),
            completed_after_us: u32::try_from(took.as_micros()).unwrap_or(u32::MAX),
            revision,
            resolved: OnceLock::new(),
        }
    }

    /// When the write's response completed (to the microsecond).
    pub(crate) fn completed(&self) -> Nanos {
        Nanos(
            self.received
                .0
                .saturating_add(u64::from(self.completed_after_us) * 1_000),
        )
    }

    /// Whether this change was stored after `other`. Their completions order
    /// them, unless both were in flight together in one cluster (one etcd's
    /// revisions) and both revisions are known: then the revisions do (a
    /// loaded apiserver finishes a response tens of ms after the write was
    /// stored and watchers saw it; a write that changed nothing keeps its
    /// object's old revision, but it stored nothing for a watcher to see).
    /// Among equals, the larger span id.
    pub(crate) fn stored_after(&self, other: &ChangeEntry, same_cluster: bool) -> bool {
        if same_cluster
            && let Some(after) = self.revision.after(other.revision)
            && self.received <= other.completed()
            && other.received <= self.completed()
        {
            return after;
        }
        (self.completed(), self.span) > (other.completed(), other.span)
    }

    /// Sets the cascade of this change and wakes whoever waits for one
    /// on its slot of `ready`.
    pub(crate) fn resolve(&self, r: Resolved, ready: &ResolvedWakers) {
        if self.resolved.set(r).is_ok() {
            ready.slot(self).notify_waiters();
        }
    }

    /// The cascade of this change if its shard has inferred it.
    pub(crate) fn resolved_now(&self) -> Option<Resolved> {
        self.resolved.get().copied()
    }

    /// The cascade of this change, waiting up to `wait` for its shard.
    pub(crate) async fn resolved(
        &self,
        wait: Duration,
        ready: &ResolvedWakers,
    ) -> Option<Resolved> {
        if let Some(r) = self.resolved.get() {
            return Some(*r);
        }
        let deadline = tokio::time::Instant::now() + wait;
        let ready = ready.slot(self);
        loop {
            let notified = ready.notified();
            if let Some(r) = self.resolved.get() {
                return Some(*r);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.resolved.get().copied();
            }
        }
    }
}

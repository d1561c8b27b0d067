//! Cause inference: which earlier write made a controller write this one.
//!
//! Every write is recorded here when it *arrives* (the dispatcher calls
//! [`CauseIndex::note_arrival`] before sharding, in arrival order), so a
//! write processed in another shard still finds every change that arrived
//! before it. Its shard then [`infers`](CauseIndex::infer) its cause: of the
//! changes of related objects that the propagations in `rules/` say its
//! writer reacts to, the latest whose response completed before this request
//! was received. A cause is never later than its effect; a write with no
//! cause is a cascade root, or `unexplained` when a controller wrote it.
//!
//! Relations come from the effect's own state (its owners, rule targets);
//! relations other objects hold towards it (a Pod's owner reference, seen
//! from the ReplicaSet) are registered here as the processor sees them.
//!
//! The cascade an effect belongs to (its root and depth) comes from its
//! cause, which another shard may still be processing: the effect waits for
//! it, at most [`RESOLVE_WAIT`], but only for a cause that arrived before it
//! (shards process in arrival order, so every wait points to an earlier
//! arrival: it cannot form a cycle, nor wait for a write queued behind the
//! effect in its own shard). A cause that arrived later (out-of-order input)
//! stands for its cascade, and counts only if the dispatcher had noted it
//! when it handed the effect to its shard: so a log gives the same causes
//! and cascades whatever the number of shards and however far the
//! dispatcher ran ahead of them.

mod entry;
mod index;
mod infer;
mod writers;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::flow::{CascadeRole, Cause, SpanRef, WriteCpid};
use crate::internal_events::{
    CauseCandidateDropped, CauseHolderDropped, CreatedCpidForgotten, InternalEvent,
};
use crate::metrics::Metrics;
use crate::model::ObjectRef;

use super::rules::{ChangeClass, Propagation, Relation, RuleSet};
use entry::ResolvedWakers;
pub(crate) use entry::{ChangeEntry, Op, PodEnd, Resolved, Revision};
use writers::WriterPatterns;

/// Longest wait for a cause's cascade to be known before the effect is
/// shown under the cause alone (counted).
pub(crate) const RESOLVE_WAIT: Duration = Duration::from_secs(10);

/// Default number of objects whose recent changes are kept.
pub(crate) const DEFAULT_CAUSE_OBJECTS: u64 = 1 << 18;
/// How long an object's changes stay candidates after its last write.
pub(crate) const CAUSE_IDLE: Duration = Duration::from_secs(15 * 60);

/// A write whose cause is sought.
pub(crate) struct Effect<'a> {
    pub object: &'a ObjectRef,
    pub span: SpanRef,
    /// Its place in arrival order ([`CauseIndex::next_arrival`]): its own
    /// entry's, or the one the dispatcher gave it.
    pub arrival: u64,
    /// The last place in arrival order noted when it was handed to its
    /// shard; 0 when no dispatcher noted writes ahead of it. Changes that
    /// arrived after are not candidates: which of them a shard saw would
    /// depend on how far the dispatcher ran ahead.
    pub noted_through: u64,
    /// The audit user; `None` for a change only the list-watch saw.
    pub writer: Option<&'a str>,
    /// `None` for a write no propagation covers (never has a cause).
    pub class: Option<ChangeClass>,
    /// The subresource if any, else the verb: how the edge names the write.
    pub op: &'a str,
    pub received: SystemTime,
    pub completed: SystemTime,
    /// The revision the write stored (its own entry's), if known.
    pub revision: Revision,
    /// A Pod status write that changed `status.phase`: the new phase.
    pub new_phase: Option<&'a str>,
    /// The CPID the object carries after the write (its annotation).
    pub cpid: Option<WriteCpid>,
    /// The object carried that same CPID before the write: the write kept
    /// it rather than set it (an uninstrumented writer keeps a stale one).
    pub cpid_kept: bool,
    /// A timer rule says a clock made this write: it roots a cascade of its
    /// own, whatever changed before it.
    pub timer: Option<&'a str>,
}

/// What was inferred for one write.
#[derive(Clone, Debug)]
pub(crate) struct Inference {
    pub role: CascadeRole,
    pub cause: Option<Cause>,
    pub root: SpanRef,
    pub depth: u32,
    /// The object's own CPID, else its cause's (marked inferred).
    pub cpid: Option<WriteCpid>,
    /// The timer that made the write (a root then).
    pub timer: Option<String>,
    /// No cause found, but a change its writer reacts to was received only
    /// after it (see [`ChangeRecord::cause_logged_after`]).
    pub cause_logged_after: bool,
}

pub(crate) struct CauseIndex {
    objects: index::Objects,
    /// The last place in arrival order given out.
    arrivals: std::sync::atomic::AtomicU64,
    /// Woken whenever a change's cascade becomes known.
    ready: ResolvedWakers,
    /// Writers' names, shared by their changes (bounded).
    users: std::sync::Mutex<crate::model::FastHashMap<Box<str>, Arc<String>>>,
    propagations: Vec<Propagation>,
    /// Which `writers:` patterns each writer matches.
    writers: WriterPatterns,
    metrics: Arc<Metrics>,
    /// Entries the dispatcher noted, by place in arrival order, until their
    /// shard has processed them ([`Self::settle`]): the shard completes the
    /// very entry effects may already wait on, even when the index
    /// compacted or evicted it meanwhile (a shard more than [`CAUSE_IDLE`]
    /// behind); and a write that finds no cause waits for the earlier ones
    /// still here ([`Self::wait_for_earlier`]). Holds only work in flight
    /// between the dispatcher and the end of its processing (bounded by the
    /// shards' queues).
    in_flight: std::sync::Mutex<std::collections::BTreeMap<u64, Arc<ChangeEntry>>>,
    /// The CPIDs creates gave their objects, by place in arrival order, from
    /// arrival until the create is resolved: an effect that finds the create
    /// not resolved yet (it arrived later) carries this one on. Bounded.
    created_cpids: std::sync::Mutex<std::collections::BTreeMap<u64, WriteCpid>>,
}

/// Creates' CPIDs kept until resolved, at most (work in flight between the
/// dispatcher and the shards holds far fewer).
const MAX_CREATED_CPIDS: usize = 1 << 14;

impl CauseIndex {
    pub(crate) fn new(rules: &RuleSet, max_objects: u64, metrics: &Arc<Metrics>) -> Self {
        Self {
            objects: index::Objects::new(max_objects, CAUSE_IDLE, metrics),
            arrivals: Default::default(),
            users: Default::default(),
            ready: ResolvedWakers::default(),
            propagations: rules.propagations().to_vec(),
            writers: WriterPatterns::new(rules.propagations()),
            metrics: metrics.clone(),
            in_flight: Default::default(),
            created_cpids: Default::default(),
        }
    }

    /// Keeps the CPID a create gave its object until the create is resolved.
    pub(crate) fn note_own_cpid(&self, entry: &ChangeEntry, cpid: WriteCpid) {
        let mut m = self.created_cpids.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(entry.arrival, cpid);
        if m.len() > MAX_CREATED_CPIDS {
            // The oldest: a create whose processing failed, never resolved.
            m.pop_first();
            CreatedCpidForgotten {
                kept: MAX_CREATED_CPIDS,
            }
            .emit(&self.metrics);
        }
    }

    fn resolve_own(&self, own: &ChangeEntry, r: Resolved) {
        own.resolve(r, &self.ready);
        // Only creates' CPIDs are kept (most writes are not creates).
        if own.class == ChangeClass::Create {
            self.created_cpids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&own.arrival);
        }
    }

    /// A cause's cascade when it is not known: the cause stands for it, with
    /// the CPID it gave its object if it is a create.
    fn unresolved(&self, cause: &ChangeEntry) -> Option<Resolved> {
        let cpid = self
            .created_cpids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cause.arrival)
            .copied();
        // Resolved meanwhile (and forgotten here): the cascade is known.
        if let Some(r) = cause.resolved_now() {
            return Some(r);
        }
        cpid.map(|cpid| Resolved {
            root: cause.span,
            depth: 0,
            cpid: Some(cpid),
            pod_end: None,
        })
    }

    /// Keeps the dispatcher's entry of a write for the shard that processes
    /// it ([`Self::take_noted`]) until that shard has done so
    /// ([`Self::settle`]).
    pub(crate) fn hand_to_shard(&self, entry: &Arc<ChangeEntry>) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        in_flight.insert(entry.arrival, entry.clone());
        self.metrics
            .cascade_writes_in_flight
            .set(in_flight.len() as i64);
    }

    /// The entry the dispatcher noted for the write that arrived `arrival`-th.
    pub(crate) fn take_noted(&self, arrival: u64) -> Option<Arc<ChangeEntry>> {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&arrival)
            .cloned()
    }

    /// Ends the processing of the write that arrived `arrival`-th, however
    /// it ended: its entry leaves the writes in flight, and if its cascade
    /// was never inferred (its processing failed) the write stands for its
    /// own, so that no effect waits for it longer.
    pub(crate) fn settle(&self, arrival: u64) {
        if arrival == 0 {
            return;
        }
        let entry = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            let entry = in_flight.remove(&arrival);
            self.metrics
                .cascade_writes_in_flight
                .set(in_flight.len() as i64);
            entry
        };
        if let Some(entry) = entry
            && entry.resolved_now().is_none()
        {
            let r = self.unresolved(&entry).unwrap_or(Resolved {
                root: entry.span,
                depth: 0,
                cpid: None,
                pod_end: None,
            });
            self.resolve_own(&entry, r);
        }
    }

    /// When the oldest write still being processed was received: changes
    /// of its last seconds are kept for it whatever arrived since.
    fn oldest_in_flight_received(&self) -> Option<entry::Nanos> {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first_key_value()
            .map(|(_, e)| e.received)
    }

    /// The earliest write that arrived before the `arrival`-th and whose
    /// cascade is not inferred yet (its shard has not got to it).
    fn earlier_unresolved(&self, arrival: u64) -> Option<Arc<ChangeEntry>> {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(..arrival)
            .find(|(_, e)| e.resolved_now().is_none())
            .map(|(_, e)| e.clone())
    }

    /// Waits until every write that arrived before the `arrival`-th is
    /// placed in its cascade, at most [`RESOLVE_WAIT`]; false when the wait
    /// ran out. Shards process in arrival order, so every wait points to an
    /// earlier arrival: no cycle.
    async fn wait_for_earlier(&self, arrival: u64) -> bool {
        let deadline = tokio::time::Instant::now() + RESOLVE_WAIT;
        while let Some(entry) = self.earlier_unresolved(arrival) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if entry.resolved(left, &self.ready).await.is_none() {
                return false;
            }
        }
        true
    }

    /// Compacts every object of the index as if it had been idle long enough.
    #[cfg(test)]
    pub(crate) fn compact_all_now(&self) -> usize {
        (0..index::SHARDS)
            .map(|shard| self.objects.compact_shard(shard, u32::MAX - 1))
            .sum()
    }

    /// The last place in arrival order given out (0: none yet).
    pub(crate) fn arrivals_noted(&self) -> u64 {
        self.arrivals.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next place in arrival order (from 1), for a write that is not
    /// recorded as a candidate cause but has a cause of its own (a refused
    /// write).
    pub(crate) fn next_arrival(&self) -> u64 {
        self.arrivals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Records a successful write as a candidate cause, once (the shard calls
    /// it again for writes that did not come through the dispatcher); true
    /// when this call recorded it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note_arrival(
        &self,
        object: &ObjectRef,
        span: SpanRef,
        class: ChangeClass,
        user: &str,
        op: Op,
        received: SystemTime,
        completed: SystemTime,
        revision: Revision,
    ) -> (Arc<ChangeEntry>, bool) {
        let processing = self.oldest_in_flight_received();
        let changes = self.objects.get_or_insert(object.hash());
        let entry = {
            let mut c = changes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = c.find(class, span) {
                return (e, false);
            }
            let user = self.intern(user);
            let entry = Arc::new(ChangeEntry::new(
                span,
                self.next_arrival(),
                class,
                user,
                op,
                received,
                completed,
                revision,
            ));
            if !c.push(entry.clone(), self.objects.now_secs(), processing) {
                CauseCandidateDropped {
                    object,
                    kept: index::MAX_PER_CLASS,
                }
                .emit(&self.metrics);
            }
            entry
        };
        self.objects.maintain();
        (entry, true)
    }

    fn intern(&self, user: &str) -> Arc<String> {
        /// Distinct writers kept; beyond, each change holds its own copy.
        const MAX_USERS: usize = 4096;
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = users.get(user) {
            return u.clone();
        }
        let u = Arc::new(user.to_string());
        if users.len() < MAX_USERS {
            users.insert(user.into(), u.clone());
        }
        u
    }

    /// Registers the relations `holder` has, on the other side, so that an
    /// effect on a target finds its holders (the ReplicaSet finds its Pods).
    pub(crate) fn register_relations(&self, holder: &ObjectRef, relations: &[(Relation, String)]) {
        for (rel, _) in relations {
            if !self.propagates(&rel.class) {
                continue;
            }
            let changes = self.objects.get_or_insert(rel.target.hash());
            let mut c = changes.lock().unwrap_or_else(|p| p.into_inner());
            if !c.add_holder(holder, rel.role.reverse(), &rel.class) {
                CauseHolderDropped {
                    holder,
                    target: &rel.target,
                    kept: index::MAX_HOLDERS,
                }
                .emit(&self.metrics);
            }
        }
    }

    fn propagates(&self, class: &str) -> bool {
        self.propagations
            .iter()
            .any(|p| p.via.class() == Some(class))
    }

    pub(crate) fn entry_count(&self) -> u64 {
        self.objects.entry_count()
    }
}

#[cfg(test)]
mod tests;

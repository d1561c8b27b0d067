//! The recent changes of each object, by change class, and the objects that
//! hold a relation towards it: bounded (objects by count and idle time,
//! changes per class, holders per object).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::flow::SpanRef;
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::ObjectRef;

use super::super::rules::{ChangeClass, Propagation, Role};
use super::entry::{ChangeEntry, Nanos, Revision};

/// Changes kept per object and class: all of the [`KEEP_FOR`] before the
/// oldest write still being processed, and the last few before that, up to
/// a hard cap. The dispatcher notes writes before the shards process them,
/// any number ahead, so "recent" is measured from the processing, not from
/// the newest noted: else how many of an effect's candidates were kept (and
/// so which cause it got) depended on how far the dispatcher ran ahead.
const MIN_PER_CLASS: usize = 4;
const KEEP_FOR: Duration = Duration::from_secs(10);
pub(super) const MAX_PER_CLASS: usize = 256;
/// Objects holding a relation towards one object (a ReplicaSet's Pods).
pub(super) const MAX_HOLDERS: usize = 4096;

/// What [`ObjectChanges::latest_before`] needs of an effect.
#[derive(Clone, Copy)]
pub(super) struct EffectTimes {
    pub span: SpanRef,
    pub arrival: u64,
    /// See [`Effect::noted_through`](super::Effect::noted_through).
    pub noted_through: u64,
    pub received: Nanos,
    pub completed: Nanos,
    /// Unknown when asking about another cluster's object (another etcd).
    pub revision: Revision,
}

pub(super) struct Candidate<'p> {
    pub entry: Arc<ChangeEntry>,
    pub object: ObjectRef,
    pub rule: &'p str,
}

/// The changes of one object, and the objects holding relations towards it.
/// Kept small: one is kept for every object written in the last
/// [`CAUSE_IDLE`](super::CAUSE_IDLE), so at 100,000 objects each byte here
/// is 100 kB.
#[derive(Default)]
pub(super) struct ObjectChanges {
    /// All classes in one list (an object has a handful of changes).
    changes: Vec<Arc<ChangeEntry>>,
    /// (object hash, object, the role it plays for this one, relation class).
    holders: Vec<(u64, Arc<ObjectRef>, Role, Arc<str>)>,
    /// Hashes of (holder, role, class), to register each once, built only
    /// once there are more holders than a scan of the list is cheap for.
    #[allow(clippy::box_collection)] // 8 bytes in every object, not 48
    holder_keys: Option<Box<crate::model::FastHashSet<u64>>>,
    /// When a change was last kept ([`Objects`]' clock, seconds), or
    /// [`COMPACTED`] once [`compact`](Self::compact) has run since.
    touched: u32,
}

/// Holders found by scanning the list, below this count.
const HOLDER_SCAN: usize = 32;
const COMPACTED: u32 = u32::MAX;

impl ObjectChanges {
    fn of_class(&self, class: ChangeClass) -> impl Iterator<Item = &Arc<ChangeEntry>> {
        self.changes.iter().filter(move |e| e.class == class)
    }

    pub(super) fn find(&self, class: ChangeClass, span: SpanRef) -> Option<Arc<ChangeEntry>> {
        self.of_class(class).find(|e| e.span == span).cloned()
    }

    /// Keeps `entry`; false when the class was at its cap and a change was
    /// forgotten early (the oldest by completion; input may be out of order).
    /// `processing` is when the oldest write still being processed was
    /// received (none in flight: `None`).
    pub(super) fn push(
        &mut self,
        entry: Arc<ChangeEntry>,
        now: u32,
        processing: Option<Nanos>,
    ) -> bool {
        self.touched = now.min(COMPACTED - 1);
        let class = entry.class;
        let newest = self
            .of_class(class)
            .map(|e| e.completed())
            .chain([entry.completed()])
            .max()
            .unwrap_or(entry.completed());
        if self.of_class(class).count() >= MIN_PER_CLASS {
            // Whatever is recent, and the last few received by then (the
            // cause of a write that follows a quiet spell): newest first.
            let horizon = processing.map_or(newest, |p| p.min(newest)).minus(KEEP_FOR);
            let ahead = |e: &ChangeEntry| processing.is_some_and(|p| e.received > p);
            self.changes
                .sort_by_key(|e| (e.class.index(), std::cmp::Reverse(e.completed())));
            let mut index = 0;
            self.changes.retain(|e| {
                if e.class != class {
                    return true;
                }
                if !ahead(e) {
                    index += 1;
                }
                (index < MIN_PER_CLASS && !ahead(e)) || e.completed() >= horizon
            });
        }
        let mut complete = true;
        if self.of_class(class).count() >= MAX_PER_CLASS {
            let (oldest, _) = self
                .changes
                .iter()
                .enumerate()
                .filter(|(_, e)| e.class == class)
                .min_by_key(|(_, e)| e.completed())
                .expect("full class");
            if self.changes[oldest].completed() > entry.completed() {
                return false;
            }
            self.changes.swap_remove(oldest);
            complete = false;
        }
        self.changes.push(entry);
        complete
    }

    /// Forgets what an object left alone since `idle_since` (its last
    /// change kept before then) can no longer need: every change but the
    /// newest of each class — a later effect reacts to the object's latest
    /// state, and effects of earlier changes arrive within [`KEEP_FOR`] —
    /// and, once its newest change is a delete, everything but that delete
    /// (the garbage collector's deletes of its dependents follow it) and its
    /// holders (nothing writes a deleted object). False when it was touched
    /// since, or compacted already.
    pub(super) fn compact(&mut self, idle_since: u32) -> bool {
        if self.touched == COMPACTED || self.touched > idle_since {
            return false;
        }
        self.touched = COMPACTED;
        let newest = |e: &Arc<ChangeEntry>| (e.completed(), e.span);
        let deleted = self
            .changes
            .iter()
            .max_by_key(|e| newest(e))
            .is_some_and(|e| e.class == ChangeClass::Delete);
        let mut kept: Vec<Arc<ChangeEntry>> = Vec::with_capacity(ChangeClass::ALL.len());
        for class in ChangeClass::ALL {
            if deleted && class != ChangeClass::Delete {
                continue;
            }
            if let Some(e) = self.of_class(class).max_by_key(|e| newest(e)) {
                kept.push(e.clone());
            }
        }
        kept.shrink_to_fit();
        self.changes = kept;
        if deleted {
            self.holders = Vec::new();
            self.holder_keys = None;
        } else {
            self.holders.shrink_to_fit();
        }
        true
    }

    /// False when the holder list is full (the relation is not registered).
    pub(super) fn add_holder(&mut self, holder: &ObjectRef, role: Role, class: &str) -> bool {
        let hash = holder.hash();
        let key = |hash: u64, role: Role, class: &str| {
            xxhash_rust::xxh3::xxh3_64_with_seed(
                class.as_bytes(),
                hash ^ (role == Role::Parent) as u64,
            )
        };
        let known = match &self.holder_keys {
            Some(keys) => keys.contains(&key(hash, role, class)),
            None => self
                .holders
                .iter()
                .any(|(h, _, r, c)| *h == hash && *r == role && c.as_ref() == class),
        };
        if known {
            return true;
        }
        if self.holders.len() >= MAX_HOLDERS {
            return false;
        }
        self.holders
            .push((hash, Arc::new(holder.clone()), role, class.into()));
        if let Some(keys) = &mut self.holder_keys {
            keys.insert(key(hash, role, class));
        } else if self.holders.len() > HOLDER_SCAN {
            self.holder_keys = Some(Box::new(
                self.holders
                    .iter()
                    .map(|(h, _, r, c)| key(*h, *r, c))
                    .collect(),
            ));
        }
        true
    }

    /// Holders that play `role` for this object through a relation of
    /// `class`, with their hashes.
    pub(super) fn holders(&self, class: &str, role: Role) -> Vec<(u64, Arc<ObjectRef>)> {
        self.holders
            .iter()
            .filter(|(_, _, r, c)| *r == role && c.as_ref() == class)
            .map(|(h, o, _, _)| (*h, o.clone()))
            .collect()
    }

    /// The latest change `p` is triggered by that the effect's writer could
    /// have seen: received no later than the effect was, and stored before
    /// it — completed no later than the effect did, or, while both were in
    /// flight, given an earlier revision by etcd (a controller sees a change
    /// in its watch once it is stored, which may be before the apiserver
    /// finished the response). Not `effect` itself, nor a change noted after
    /// the effect was handed to its shard; received at the same instant,
    /// only if it arrived first (identical timestamps say nothing of order,
    /// arrival does; so no two changes are each other's cause); with
    /// `same_object`, not before the object's latest create (an earlier
    /// object of the same name). "Latest" is [`ChangeEntry::stored_after`].
    /// Also whether a triggering change was received only after the effect.
    pub(super) fn latest_before(
        &self,
        p: &Propagation,
        effect: &EffectTimes,
        same_object: bool,
    ) -> Found {
        let received_first = |e: &ChangeEntry| {
            e.span != effect.span
                && (effect.noted_through == 0 || e.arrival <= effect.noted_through)
                && e.received <= effect.received
                && (e.received < effect.received || e.arrival < effect.arrival)
        };
        // A response finished after the effect's was stored first if etcd
        // gave it an earlier revision. Only ever a yes: a write that changed
        // nothing answers with the object's old revision.
        let seen = |e: &ChangeEntry| {
            received_first(e)
                && (e.completed() <= effect.completed
                    || effect.revision.after(e.revision) == Some(true))
        };
        let floor = if same_object {
            self.of_class(ChangeClass::Create)
                .filter(|e| seen(e))
                .map(|e| e.completed())
                .max()
        } else {
            None
        };
        let mut found = Found::default();
        for class in ChangeClass::ALL {
            if !p.triggered_by(class) {
                continue;
            }
            // A status write counts only once its shard said it finished a
            // Pod; one that arrived later counts not at all (whether its
            // shard got to it first is chance), one that arrived earlier and
            // is still being processed is waited for (`Found::undecided`).
            let finished_only = class == ChangeClass::Status && p.finished_pods_only();
            for e in self.of_class(class) {
                if e.span == effect.span {
                    continue;
                }
                if finished_only {
                    match e.resolved_now() {
                        _ if e.arrival > effect.arrival => continue,
                        None => {
                            if seen(e)
                                && found
                                    .undecided
                                    .as_ref()
                                    .is_none_or(|u| e.arrival > u.arrival)
                            {
                                found.undecided = Some(e.clone());
                            }
                            continue;
                        }
                        Some(r) if r.pod_end.is_none() => continue,
                        Some(_) => {}
                    }
                }
                if !seen(e) {
                    if received_first(e) {
                        // Stored before the effect was received, its response
                        // finished after the effect's: a cause when nothing
                        // else is (a loaded apiserver can take tens of ms to
                        // finish the response of a write watchers already saw).
                        if found
                            .late
                            .as_ref()
                            .is_none_or(|b| (e.received, e.span) > (b.received, b.span))
                        {
                            found.late = Some(e.clone());
                        }
                    } else {
                        found.later |= e.received > effect.received;
                    }
                    continue;
                }
                if floor.is_some_and(|f| e.completed() < f) {
                    continue;
                }
                if found.seen.as_ref().is_none_or(|b| e.stored_after(b, true)) {
                    found.seen = Some(e.clone());
                }
            }
        }
        found
    }
}

/// The candidates [`ObjectChanges::latest_before`] found for an effect.
#[derive(Default)]
pub(super) struct Found {
    /// The latest change stored before the effect.
    pub seen: Option<Arc<ChangeEntry>>,
    /// The latest change received before the effect whose response
    /// completed only after the effect's, with no earlier revision to say
    /// it was stored first.
    pub late: Option<Arc<ChangeEntry>>,
    /// A triggering change was received after the effect.
    pub later: bool,
    /// A status write that arrived before the effect and may have finished
    /// a Pod, still being processed: only then is it known whether it counts.
    pub undecided: Option<Arc<ChangeEntry>>,
}

/// Objects by hash, bounded without a per-access cost: each of 64 shards
/// keeps two generations; a lookup that finds an object in the older one
/// moves it to the newer; when the newer is full or older than half the idle
/// time, the older is dropped whole (its objects counted as evicted: by size
/// or by age) and the newer takes its place. So an object written within
/// the idle time, among at most `max_objects`, is kept.
pub(super) struct Objects {
    shards: Vec<Mutex<Generations>>,
    per_shard: usize,
    half_idle: Duration,
    evictions: CacheEvictions,
    /// The clock of [`ObjectChanges::touched`].
    started: std::time::Instant,
    /// When (ms on that clock) the next shard is due for compaction, and
    /// which one: each shard once per [`KEEP_FOR`].
    next_sweep_ms: AtomicU64,
    sweep_cursor: AtomicUsize,
}

/// How often one shard is compacted: all of them once per [`KEEP_FOR`].
const SWEEP_EVERY: Duration = Duration::from_millis(KEEP_FOR.as_millis() as u64 / SHARDS as u64);

pub(super) const SHARDS: usize = 64;

type Changes = Arc<Mutex<ObjectChanges>>;

struct Generations {
    current: crate::model::FastHashMap<u64, Changes>,
    previous: crate::model::FastHashMap<u64, Changes>,
    since: std::time::Instant,
}

impl Objects {
    pub(super) fn new(max_objects: u64, idle: Duration, metrics: &Arc<Metrics>) -> Self {
        let evictions = CacheEvictions::new(
            metrics,
            Cache::Causes,
            "writes of objects evicted from it can no longer be found as causes; raise --cascade-objects",
        );
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Generations {
                        current: Default::default(),
                        previous: Default::default(),
                        since: std::time::Instant::now(),
                    })
                })
                .collect(),
            // Two generations of half the bound each.
            per_shard: ((max_objects as usize) / SHARDS / 2).max(1),
            half_idle: idle / 2,
            evictions,
            started: std::time::Instant::now(),
            next_sweep_ms: AtomicU64::new(SWEEP_EVERY.as_millis() as u64),
            sweep_cursor: AtomicUsize::new(0),
        }
    }

    /// Seconds on the clock of [`ObjectChanges::touched`].
    pub(super) fn now_secs(&self) -> u32 {
        self.started
            .elapsed()
            .as_secs()
            .min(u64::from(COMPACTED - 1)) as u32
    }

    /// Compacts the next shard when one is due (called as writes arrive, so
    /// an idle collector does no work and a busy one a little at a time).
    pub(super) fn maintain(&self) {
        self.maintain_at(self.started.elapsed().as_millis() as u64);
    }

    /// [`Self::maintain`] at `now_ms` on its clock.
    fn maintain_at(&self, now_ms: u64) {
        // In the first seconds nothing can have been idle long enough (a
        // saturated "since second 0" would take every object written in the
        // first second as idle: a replay, done in under a second, lost
        // candidates depending on how fast it ran).
        let Some(idle_since) = (now_ms / 1000).checked_sub(KEEP_FOR.as_secs()) else {
            return;
        };
        let due = self.next_sweep_ms.load(Ordering::Relaxed);
        if now_ms < due
            || self
                .next_sweep_ms
                .compare_exchange(
                    due,
                    now_ms + SWEEP_EVERY.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let shard = self.sweep_cursor.fetch_add(1, Ordering::Relaxed) % SHARDS;
        self.compact_shard(shard, idle_since.min(u64::from(COMPACTED - 1)) as u32);
    }

    /// Compacts the objects of one shard left alone since `idle_since`;
    /// returns how many were compacted. An object another thread holds is
    /// left for the next round.
    pub(super) fn compact_shard(&self, shard: usize, idle_since: u32) -> usize {
        let g = self.shards[shard].lock().unwrap_or_else(|p| p.into_inner());
        g.current
            .values()
            .chain(g.previous.values())
            .filter(|c| c.try_lock().is_ok_and(|mut c| c.compact(idle_since)))
            .count()
    }

    fn shard(&self, object_hash: u64) -> std::sync::MutexGuard<'_, Generations> {
        self.shards[(object_hash >> 58) as usize % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(&self, object_hash: u64) -> Option<Changes> {
        let mut g = self.shard(object_hash);
        if let Some(c) = g.current.get(&object_hash) {
            return Some(c.clone());
        }
        let c = g.previous.remove(&object_hash)?;
        self.insert(&mut g, object_hash, c.clone());
        Some(c)
    }

    pub(super) fn get_or_insert(&self, object_hash: u64) -> Changes {
        if let Some(c) = self.get(object_hash) {
            return c;
        }
        let mut g = self.shard(object_hash);
        let c = Changes::default();
        self.insert(&mut g, object_hash, c.clone());
        c
    }

    fn insert(&self, g: &mut Generations, object_hash: u64, c: Changes) {
        let full = g.current.len() >= self.per_shard;
        if full || g.since.elapsed() >= self.half_idle {
            let dropped = std::mem::replace(&mut g.previous, std::mem::take(&mut g.current));
            if !dropped.is_empty() {
                let cause = if full {
                    moka::notification::RemovalCause::Size
                } else {
                    moka::notification::RemovalCause::Expired
                };
                self.evictions.record_many(cause, dropped.len() as u64);
            }
            g.since = std::time::Instant::now();
        }
        g.current.insert(object_hash, c);
    }

    pub(super) fn entry_count(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let g = s.lock().unwrap_or_else(|p| p.into_inner());
                (g.current.len() + g.previous.len()) as u64
            })
            .sum()
    }
}

#[cfg(test)]
mod tests;

//! The recent changes of each object, by change class, and the objects that
//! hold a relation towards it: bounded (objects by count and idle time,
//! changes per class, holders per object).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::ObjectRef;
use crate::pipeline::{SpanRef, WriteCpid};

use super::super::rules::{ChangeClass, Propagation, Role};

/// Changes kept per object and class: at least the last few, and all of the
/// last [`KEEP_FOR`] — the dispatcher notes writes before the shards process
/// them, so the newest entries may be later than the effect being
/// processed, and must not push out the one it needs — up to a hard cap.
const MIN_PER_CLASS: usize = 4;
const KEEP_FOR: Duration = Duration::from_secs(10);
pub(super) const MAX_PER_CLASS: usize = 256;
/// Objects holding a relation towards one object (a ReplicaSet's Pods).
const MAX_HOLDERS: usize = 4096;

/// The cascade a change belongs to, once its shard has inferred its cause.
#[derive(Clone, Copy, Debug)]
pub struct Resolved {
    pub root: SpanRef,
    pub depth: u32,
    /// The change's CPID (its object's, or carried over from its cause).
    pub cpid: Option<WriteCpid>,
}

/// One successful write, as a candidate cause.
pub struct ChangeEntry {
    pub span: SpanRef,
    pub class: ChangeClass,
    /// The writer (interned: few distinct users write most changes).
    pub user: Arc<str>,
    /// `<verb>[ <subresource>]`.
    pub op: &'static str,
    pub received: SystemTime,
    pub completed: SystemTime,
    resolved: OnceLock<Resolved>,
}

impl ChangeEntry {
    pub fn new(
        span: SpanRef,
        class: ChangeClass,
        user: Arc<str>,
        op: &'static str,
        received: SystemTime,
        completed: SystemTime,
    ) -> Self {
        Self {
            span,
            class,
            user,
            op,
            received,
            completed,
            resolved: OnceLock::new(),
        }
    }

    /// Sets the cascade of this change and wakes whoever waits for one
    /// (`ready` is shared by all changes: waits are rare and short).
    pub fn resolve(&self, r: Resolved, ready: &tokio::sync::Notify) {
        if self.resolved.set(r).is_ok() {
            ready.notify_waiters();
        }
    }

    /// The cascade of this change, waiting up to `wait` for its shard.
    pub async fn resolved(&self, wait: Duration, ready: &tokio::sync::Notify) -> Option<Resolved> {
        if let Some(r) = self.resolved.get() {
            return Some(*r);
        }
        let deadline = tokio::time::Instant::now() + wait;
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

pub(super) struct Candidate<'p> {
    pub entry: Arc<ChangeEntry>,
    pub object: ObjectRef,
    pub rule: &'p str,
}

#[derive(Default)]
pub(super) struct ObjectChanges {
    by_class: [Vec<Arc<ChangeEntry>>; ChangeClass::ALL.len()],
    /// (object hash, object, the role it plays for this one, relation class).
    holders: Vec<(u64, Arc<ObjectRef>, Role, Arc<str>)>,
    /// Hashes of (holder, role, class), to register each once.
    holder_keys: HashSet<u64>,
}

impl ObjectChanges {
    pub fn find(&self, class: ChangeClass, span: SpanRef) -> Option<Arc<ChangeEntry>> {
        self.by_class[class.index()]
            .iter()
            .find(|e| e.span == span)
            .cloned()
    }

    /// Keeps `entry`; false when the class was at its cap and a change was
    /// forgotten early (the oldest by completion; input may be out of order).
    pub fn push(&mut self, entry: Arc<ChangeEntry>) -> bool {
        let ring = &mut self.by_class[entry.class.index()];
        let newest = ring
            .iter()
            .map(|e| e.completed)
            .chain([entry.completed])
            .max()
            .unwrap_or(entry.completed);
        if ring.len() >= MIN_PER_CLASS {
            // Newest first; keep the last few, and whatever is recent.
            let horizon = newest.checked_sub(KEEP_FOR).unwrap_or(newest);
            ring.sort_by_key(|e| std::cmp::Reverse(e.completed));
            let mut index = 0;
            ring.retain(|e| {
                index += 1;
                index < MIN_PER_CLASS || e.completed >= horizon
            });
        }
        let mut complete = true;
        if ring.len() >= MAX_PER_CLASS {
            let (oldest, _) = ring
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.completed)
                .expect("full ring");
            if ring[oldest].completed > entry.completed {
                return false;
            }
            ring.swap_remove(oldest);
            complete = false;
        }
        ring.push(entry);
        complete
    }

    /// False when the holder list is full (the relation is not registered).
    pub fn add_holder(&mut self, holder: &ObjectRef, role: Role, class: &str) -> bool {
        let hash = holder.hash();
        let key = xxhash_rust::xxh3::xxh3_64_with_seed(
            class.as_bytes(),
            hash ^ (role == Role::Parent) as u64,
        );
        if self.holder_keys.contains(&key) {
            return true;
        }
        if self.holders.len() >= MAX_HOLDERS {
            return false;
        }
        self.holder_keys.insert(key);
        self.holders
            .push((hash, Arc::new(holder.clone()), role, class.into()));
        true
    }

    /// Holders that play `role` for this object through a relation of
    /// `class`, with their hashes.
    pub fn holders(&self, class: &str, role: Role) -> Vec<(u64, Arc<ObjectRef>)> {
        self.holders
            .iter()
            .filter(|(_, _, r, c)| *r == role && c.as_ref() == class)
            .map(|(h, o, _, _)| (*h, o.clone()))
            .collect()
    }

    /// The latest change `p` is triggered by that the effect's writer could
    /// have seen: received no later than the effect was, and completed no
    /// later than the effect did (a controller sees a change in its watch
    /// once it is stored, which may be before the apiserver finished the
    /// response), not `effect` itself; with `same_object`, not before the
    /// object's latest create (an earlier object of the same name). Also
    /// whether a triggering change was received only after the effect.
    pub fn latest_before(
        &self,
        p: &Propagation,
        effect: (SpanRef, SystemTime, SystemTime),
        same_object: bool,
    ) -> (Option<Arc<ChangeEntry>>, bool) {
        let (effect, received, completed) = effect;
        let seen = |e: &ChangeEntry| {
            e.span != effect && e.received <= received && e.completed <= completed
        };
        let floor = if same_object {
            self.by_class[ChangeClass::Create.index()]
                .iter()
                .filter(|e| seen(e))
                .map(|e| e.completed)
                .max()
        } else {
            None
        };
        let mut best: Option<&Arc<ChangeEntry>> = None;
        let mut later = false;
        for class in ChangeClass::ALL {
            if !p.triggered_by(class) {
                continue;
            }
            for e in &self.by_class[class.index()] {
                if e.span == effect {
                    continue;
                }
                if !seen(e) {
                    later |= e.received > received;
                    continue;
                }
                if floor.is_some_and(|f| e.completed < f) {
                    continue;
                }
                if best.is_none_or(|b| (e.completed, e.span) > (b.completed, b.span)) {
                    best = Some(e);
                }
            }
        }
        (best.cloned(), later)
    }
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
}

const SHARDS: usize = 64;

type Changes = Arc<Mutex<ObjectChanges>>;

struct Generations {
    current: std::collections::HashMap<u64, Changes>,
    previous: std::collections::HashMap<u64, Changes>,
    since: std::time::Instant,
}

impl Objects {
    pub fn new(max_objects: u64, idle: Duration, metrics: &Arc<Metrics>) -> Self {
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
        }
    }

    fn shard(&self, object_hash: u64) -> std::sync::MutexGuard<'_, Generations> {
        self.shards[(object_hash >> 58) as usize % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, object_hash: u64) -> Option<Changes> {
        let mut g = self.shard(object_hash);
        if let Some(c) = g.current.get(&object_hash) {
            return Some(c.clone());
        }
        let c = g.previous.remove(&object_hash)?;
        self.insert(&mut g, object_hash, c.clone());
        Some(c)
    }

    pub fn get_or_insert(&self, object_hash: u64) -> Changes {
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

    pub fn entry_count(&self) -> u64 {
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
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn entry(i: u64, at_ms: u64) -> Arc<ChangeEntry> {
        let t = UNIX_EPOCH + Duration::from_millis(at_ms);
        let span = SpanRef {
            trace_id: [1; 16],
            span_id: i.to_be_bytes(),
        };
        Arc::new(ChangeEntry::new(
            span,
            ChangeClass::Status,
            "u".into(),
            "update status",
            t,
            t,
        ))
    }

    #[test]
    fn changes_of_the_last_seconds_are_kept_up_to_a_cap_and_the_last_few_always() {
        let mut c = ObjectChanges::default();
        // Ten changes a minute apart: only the last few stay.
        for i in 0..10 {
            assert!(c.push(entry(i, i * 60_000)));
        }
        assert_eq!(c.by_class[ChangeClass::Status.index()].len(), MIN_PER_CLASS);
        // A burst within 10 s: all kept up to the cap, then the oldest goes.
        for i in 0..MAX_PER_CLASS as u64 {
            assert!(c.push(entry(100 + i, 600_000 + i)));
        }
        assert!(!c.push(entry(999, 600_000 + MAX_PER_CLASS as u64)));
        let ring = &c.by_class[ChangeClass::Status.index()];
        assert_eq!(ring.len(), MAX_PER_CLASS);
        assert!(ring.iter().any(|e| e.span.span_id == 999u64.to_be_bytes()));
        assert!(ring.iter().all(|e| e.span.span_id != 100u64.to_be_bytes()));
    }

    #[tokio::test]
    async fn a_change_not_yet_processed_is_waited_for_and_then_known() {
        let e = entry(1, 0);
        let ready = Arc::new(tokio::sync::Notify::new());
        let waiter = {
            let (e, ready) = (e.clone(), ready.clone());
            tokio::spawn(async move { e.resolved(Duration::from_secs(60), &ready).await })
        };
        tokio::task::yield_now().await;
        let root = SpanRef {
            trace_id: [2; 16],
            span_id: [3; 8],
        };
        e.resolve(
            Resolved {
                root,
                depth: 4,
                cpid: None,
            },
            &ready,
        );
        let r = waiter
            .await
            .unwrap()
            .expect("resolved before the wait ended");
        assert_eq!((r.root, r.depth), (root, 4));
    }
}

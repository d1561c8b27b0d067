//! The in-process span cache (also the front and the fallback of the etcd one).

use crate::model::FastHashMap as HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::{Slot, SpanCache, SpanCacheError};
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::model::ObjectWindow;

/// Shards: workers touching different objects rarely share a lock.
const SHARDS: usize = 16;

/// In-process span cache: which object windows have their span, and which
/// links each carries. Entries are grouped by window: a window nobody wrote
/// to for `ttl` (the window width plus a grace period, so late audit events
/// for a window still find its span) is forgotten at once. Each shard holds
/// at most `max_entries / SHARDS` object windows; over that, its least
/// recently written windows go first.
///
/// A plain map per window costs ~100 bytes per object window where a `moka`
/// entry (two eviction queues, a timer wheel node, an `Arc` per value) cost
/// ~700: with 100,000 objects that was a third of the collector's memory.
pub struct LocalSpanCache {
    shards: Vec<Mutex<Shard>>,
    ttl: Duration,
    /// Counts object windows evicted for room before their time (a later
    /// event in such a window emits its object span again).
    evictions: Option<CacheEvictions>,
}

struct Shard {
    /// Object windows by window start.
    windows: HashMap<u64, Window>,
    len: usize,
    capacity: usize,
    last_sweep: Instant,
    /// Object windows evicted for room and not yet counted.
    evicted: u64,
}

struct Window {
    /// What is known of each object window's span, by object digest.
    objects: HashMap<u128, ObjectEntry>,
    touched: Instant,
}

#[derive(Default)]
struct ObjectEntry {
    /// Link keys recorded on the span.
    links: Vec<u64>,
    /// This process emitted the span without the object's uid: the first
    /// write of the window that has it emits the span again.
    uid_missing: bool,
}

/// An object window as the cache files it, its digest taken once per call
/// (it was taken twice: for the shard, and again in it).
#[derive(Clone, Copy)]
struct WindowKey {
    window_start: u64,
    digest: u128,
}

impl WindowKey {
    fn of(ow: &ObjectWindow) -> Self {
        Self {
            window_start: ow.window_start,
            digest: ow.cache_digest(),
        }
    }
}

impl Shard {
    /// The object window's entry, creating it (`true`) if it was not known.
    fn entry(&mut self, key: &WindowKey, now: Instant, ttl: Duration) -> (&mut ObjectEntry, bool) {
        self.sweep(now, ttl);
        let WindowKey {
            window_start,
            digest,
        } = *key;
        let known = self
            .windows
            .get(&window_start)
            .is_some_and(|w| w.objects.contains_key(&digest));
        if !known {
            self.len += 1;
            if self.len > self.capacity {
                self.evict(window_start);
            }
        }
        let window = self.windows.entry(window_start).or_insert_with(|| Window {
            objects: HashMap::default(),
            touched: now,
        });
        window.touched = now;
        (window.objects.entry(digest).or_default(), !known)
    }

    fn get(&self, key: &WindowKey) -> Option<&ObjectEntry> {
        self.windows
            .get(&key.window_start)?
            .objects
            .get(&key.digest)
    }

    fn get_mut(&mut self, key: &WindowKey) -> Option<&mut ObjectEntry> {
        self.windows
            .get_mut(&key.window_start)?
            .objects
            .get_mut(&key.digest)
    }

    /// Forgets windows untouched for `ttl` (checked at most once a second).
    fn sweep(&mut self, now: Instant, ttl: Duration) {
        if now.duration_since(self.last_sweep) < Duration::from_secs(1) {
            return;
        }
        self.last_sweep = now;
        let mut forgotten = 0;
        self.windows.retain(|_, w| {
            let keep = now.duration_since(w.touched) < ttl;
            if !keep {
                forgotten += w.objects.len();
            }
            keep
        });
        self.len -= forgotten;
    }

    /// Makes room for one more entry: the least recently written other
    /// window goes whole; if `current` is the only one, an eighth of it.
    fn evict(&mut self, current: u64) {
        while self.len > self.capacity {
            let oldest = self
                .windows
                .iter()
                .filter(|(start, _)| **start != current)
                .min_by_key(|(_, w)| w.touched)
                .map(|(start, _)| *start);
            if let Some(start) = oldest {
                if let Some(w) = self.windows.remove(&start) {
                    self.len -= w.objects.len();
                    self.evicted += w.objects.len() as u64;
                }
                continue;
            }
            let Some(w) = self.windows.get_mut(&current) else {
                return;
            };
            let drop = (w.objects.len() / 8).max(1);
            let victims: Vec<u128> = w.objects.keys().take(drop).copied().collect();
            for v in victims {
                w.objects.remove(&v);
            }
            self.len -= drop.min(self.len);
            self.evicted += drop as u64;
            return;
        }
    }
}

impl LocalSpanCache {
    pub fn new(max_entries: u64, ttl: Duration) -> Self {
        let capacity = (max_entries as usize).div_ceil(SHARDS).max(1);
        let now = Instant::now();
        Self {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        windows: HashMap::default(),
                        len: 0,
                        capacity,
                        last_sweep: now,
                        evicted: 0,
                    })
                })
                .collect(),
            ttl,
            evictions: None,
        }
    }

    /// Counts the object windows evicted for room in
    /// `kascade_cache_evictions_total{cache="span_cache"}` (and warns).
    pub fn count_evictions(mut self, metrics: &Metrics) -> Self {
        self.evictions = Some(CacheEvictions::new(
            metrics,
            Cache::SpanCache,
            "an object window seen again after it went gets its object span again; raise --span-cache-entries",
        ));
        self
    }

    /// Counts what `shard` evicted (called with it locked, after a write).
    fn report_evictions(&self, shard: &mut Shard) {
        if shard.evicted > 0 {
            if let Some(e) = &self.evictions {
                e.record_many(moka::notification::RemovalCause::Size, shard.evicted);
            }
            shard.evicted = 0;
        }
    }

    fn shard(&self, key: &WindowKey) -> std::sync::MutexGuard<'_, Shard> {
        let i = (key.digest % SHARDS as u128) as usize;
        // Every mutation leaves the shard consistent: a panic elsewhere while
        // holding the lock does not make it unusable.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the object window here alone: `Created` the first time;
    /// `has_uid`: the caller knows the object's uid (see [`Slot::UidMissing`]).
    pub fn reserve(&self, ow: &ObjectWindow, has_uid: bool) -> Slot {
        self.reserve_at(ow, Instant::now(), has_uid)
    }

    fn reserve_at(&self, ow: &ObjectWindow, now: Instant, has_uid: bool) -> Slot {
        let key = WindowKey::of(ow);
        let mut shard = self.shard(&key);
        let (entry, created) = shard.entry(&key, now, self.ttl);
        let slot = if created {
            entry.uid_missing = !has_uid;
            Slot::Created
        } else {
            existing_slot(entry, has_uid)
        };
        self.report_evictions(&mut shard);
        slot
    }

    /// The slot of an object window known here (`None` if it is not).
    pub fn existing(&self, ow: &ObjectWindow, has_uid: bool) -> Option<Slot> {
        let key = WindowKey::of(ow);
        self.shard(&key)
            .get_mut(&key)
            .map(|entry| existing_slot(entry, has_uid))
    }

    /// Whether the object window is known to have its span.
    #[cfg(test)]
    fn contains(&self, ow: &ObjectWindow) -> bool {
        let key = WindowKey::of(ow);
        self.shard(&key).get(&key).is_some()
    }

    /// Remembers that the object window has its span (somebody else's or
    /// ours; ours sent `without_uid`).
    pub fn mark(&self, ow: &ObjectWindow, without_uid: bool) {
        let key = WindowKey::of(ow);
        let mut shard = self.shard(&key);
        let (entry, created) = shard.entry(&key, Instant::now(), self.ttl);
        if created {
            entry.uid_missing = without_uid;
        }
        self.report_evictions(&mut shard);
    }

    /// Whether the link is known to be recorded on the object window's span.
    pub fn has_link(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        let key = WindowKey::of(ow);
        self.shard(&key)
            .get(&key)
            .is_some_and(|entry| entry.links.contains(&link_key))
    }

    /// Records the link here alone; true if it was not recorded before.
    pub fn add_link(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        let key = WindowKey::of(ow);
        let mut shard = self.shard(&key);
        let (entry, _) = shard.entry(&key, Instant::now(), self.ttl);
        let new = !entry.links.contains(&link_key);
        if new {
            entry.links.push(link_key);
        }
        self.report_evictions(&mut shard);
        new
    }

    pub fn len(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().map(|s| s.len).unwrap_or(0) as u64)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The slot of a known object window: `UidMissing` once, for the first
/// caller with the uid of a span this process sent without it.
fn existing_slot(entry: &mut ObjectEntry, has_uid: bool) -> Slot {
    if has_uid && entry.uid_missing {
        entry.uid_missing = false;
        Slot::UidMissing
    } else {
        Slot::Existing
    }
}

impl SpanCache for LocalSpanCache {
    fn fetch_or_reserve<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        has_uid: bool,
    ) -> BoxFuture<'a, Result<Slot, SpanCacheError>> {
        Box::pin(std::future::ready(Ok(self.reserve(ow, has_uid))))
    }

    fn record_link<'a>(
        &'a self,
        ow: &'a ObjectWindow,
        link_key: u64,
    ) -> BoxFuture<'a, Result<bool, SpanCacheError>> {
        Box::pin(std::future::ready(Ok(self.add_link(ow, link_key))))
    }

    fn has_link_here(&self, ow: &ObjectWindow, link_key: u64) -> bool {
        self.has_link(ow, link_key)
    }

    fn entry_count(&self) -> u64 {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    #[tokio::test]
    async fn reserves_once_and_records_links_once() {
        let c = LocalSpanCache::new(100, Duration::from_secs(60));
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 0,
        };
        assert_eq!(c.fetch_or_reserve(&ow, true).await.unwrap(), Slot::Created);
        assert_eq!(c.fetch_or_reserve(&ow, true).await.unwrap(), Slot::Existing);
        let next = ObjectWindow {
            window_start: 1800,
            ..ow.clone()
        };
        assert_eq!(
            c.fetch_or_reserve(&next, true).await.unwrap(),
            Slot::Created
        );
        assert!(c.record_link(&ow, 7).await.unwrap());
        assert!(!c.record_link(&ow, 7).await.unwrap());
        assert!(c.record_link(&next, 7).await.unwrap());
    }

    #[test]
    fn a_span_sent_without_the_uid_is_asked_for_once_by_a_caller_with_it() {
        let c = LocalSpanCache::new(100, Duration::from_secs(60));
        let t = Instant::now();
        let (without, with) = (window("a", 0), window("b", 0));
        assert_eq!(c.reserve_at(&without, t, false), Slot::Created);
        assert_eq!(c.reserve_at(&without, t, false), Slot::Existing);
        assert_eq!(c.reserve_at(&without, t, true), Slot::UidMissing);
        assert_eq!(c.reserve_at(&without, t, true), Slot::Existing);
        assert_eq!(c.reserve_at(&with, t, true), Slot::Created);
        assert_eq!(c.existing(&with, true), Some(Slot::Existing));
        // Known from another replica (etcd): never asked for again here.
        let theirs = window("c", 0);
        assert_eq!(c.existing(&theirs, true), None);
        c.mark(&theirs, false);
        assert_eq!(c.existing(&theirs, true), Some(Slot::Existing));
        // Ours, sent without it.
        let ours = window("d", 0);
        c.mark(&ours, true);
        assert_eq!(c.existing(&ours, false), Some(Slot::Existing));
        assert_eq!(c.existing(&ours, true), Some(Slot::UidMissing));
    }

    fn window(name: &str, window_start: u64) -> ObjectWindow {
        ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", name),
            window_start,
        }
    }

    #[test]
    fn windows_untouched_for_the_ttl_are_forgotten() {
        let c = LocalSpanCache::new(1000, Duration::from_secs(60));
        let t0 = Instant::now();
        let old = window("a", 0);
        let current = window("b", 1800);
        assert_eq!(c.reserve_at(&old, t0, true), Slot::Created);
        assert_eq!(c.reserve_at(&current, t0, true), Slot::Created);
        // Writes to the current window keep it; the old one ages out.
        let later = t0 + Duration::from_secs(45);
        assert_eq!(c.reserve_at(&current, later, true), Slot::Existing);
        let t = t0 + Duration::from_secs(61);
        for i in 0..SHARDS * 4 {
            c.reserve_at(&window(&format!("x{i}"), 1800), t, true);
        }
        assert!(!c.contains(&old), "the old window outlived its ttl");
        assert!(c.contains(&current));
        assert_eq!(c.reserve_at(&old, t, true), Slot::Created);
        assert_eq!(c.len(), 2 + SHARDS as u64 * 4);
    }

    #[test]
    fn entries_stay_within_the_bound_and_old_windows_go_first() {
        let max = 160;
        let metrics = Metrics::default();
        let c = LocalSpanCache::new(max, Duration::from_secs(3600)).count_evictions(&metrics);
        let t = Instant::now();
        for i in 0..100 {
            c.reserve_at(&window(&format!("old{i}"), 0), t, true);
        }
        let t = t + Duration::from_secs(1);
        for i in 0..1000 {
            c.reserve_at(&window(&format!("new{i}"), 1800), t, true);
            assert!(c.len() <= max, "{} entries after {i}", c.len());
        }
        assert!((0..100).all(|i| !c.contains(&window(&format!("old{i}"), 0))));
        // The newest entries of the current window are still known.
        assert!(c.contains(&window("new999", 1800)));
        // Every entry that went for room is counted.
        let evicted = metrics
            .cache_evictions
            .get_or_create(&crate::metrics::CacheEvictionLabel {
                cache: crate::metrics::Cache::SpanCache,
                cause: crate::metrics::EvictionCause::Size,
            })
            .get();
        assert_eq!(evicted, 1100 - c.len());
    }

    #[test]
    fn mark_and_links_make_the_window_known() {
        let c = LocalSpanCache::new(100, Duration::from_secs(60));
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "apps", "deployments", "ns", "d"),
            window_start: 1800,
        };
        assert!(!c.contains(&ow));
        assert!(!c.has_link(&ow, 1));
        c.mark(&ow, false);
        assert!(c.contains(&ow));
        assert_eq!(c.reserve(&ow, true), Slot::Existing);
        assert!(c.add_link(&ow, 1));
        assert!(c.has_link(&ow, 1));
        assert!(!c.add_link(&ow, 1));
    }
}

//! The last seen state of each object, which the next write is diffed
//! against. Two tiers: a small hot tier of parsed states for the objects
//! written most recently (a rollout writes each Pod several times within
//! seconds, and re-parsing the state for each write was a tenth of the
//! collector's CPU), over a large cold tier of LZ4-compressed JSON (object
//! JSON compresses about 4:1, so the byte budget holds four times the
//! objects). An object is in at most one tier; the hot tier's least recently
//! written state moves to the cold tier when the hot tier is full, as the
//! JSON it was parsed from when that is exactly the state (writing the
//! state out again cost more than its compression).
//!
//! Callers must not touch one object from two tasks at once (the pipeline
//! routes all work about an object to one worker); different objects may be
//! used concurrently.

use crate::model::FastHashMap as HashMap;
use std::sync::{Arc, Mutex};

use crate::flow::FieldHashes;
use crate::json::Value;
use xxhash_rust::xxh3::xxh3_64;

use crate::metrics::{Cache, CacheEvictions, Metrics};

/// A state that could not be kept (serialized for the compressed tier).
#[derive(Debug, thiserror::Error)]
#[error("cannot keep the state of {key}: {source}")]
pub struct StateError {
    key: String,
    source: sonic_rs::Error,
}

/// Hot-tier partitions: workers writing different objects rarely share a lock.
const PARTITIONS: usize = 16;

pub(crate) struct StateStore {
    hot: Vec<Mutex<HotPartition>>,
    cold: moka::sync::Cache<String, Arc<[u8]>>,
}

#[derive(Default)]
struct HotPartition {
    entries: HashMap<String, HotState>,
    tick: u64,
    capacity: usize,
}

struct HotState {
    state: Arc<Value>,
    /// The JSON `state` was parsed from, when it is exactly that.
    text: Option<Arc<str>>,
    /// The hashes of `text`'s top-level fields.
    fields: Option<Arc<FieldHashes>>,
    /// The partition's tick of the last write.
    tick: u64,
}

impl StateStore {
    /// `cold_bytes` bounds the compressed tier; `hot_entries` (0 disables the
    /// hot tier) the parsed one. States the cold tier evicts for room are
    /// counted in `metrics` (the next write of such an object has no diff).
    pub(crate) fn new(cold_bytes: u64, hot_entries: usize, metrics: &Metrics) -> Self {
        let evictions = CacheEvictions::new(
            metrics,
            Cache::States,
            "the next write of such an object shows no diff; raise --state-cache-bytes",
        );
        // Least recently used first: moka's default (TinyLFU) may refuse a
        // new state outright when full, and the newest states are the ones
        // the next writes need.
        let cold = moka::sync::Cache::builder()
            .weigher(|k: &String, v: &Arc<[u8]>| (k.len() + v.len()).min(u32::MAX as usize) as u32)
            .max_capacity(cold_bytes)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .eviction_listener(move |_, _, cause| evictions.record(cause))
            .build();
        let capacity = hot_entries.div_ceil(PARTITIONS);
        Self {
            hot: (0..PARTITIONS)
                .map(|_| {
                    Mutex::new(HotPartition {
                        capacity,
                        ..Default::default()
                    })
                })
                .collect(),
            cold,
        }
    }

    fn partition(&self, key: &str) -> std::sync::MutexGuard<'_, HotPartition> {
        let i = (xxh3_64(key.as_bytes()) % PARTITIONS as u64) as usize;
        // A panic while holding the lock leaves the map consistent (every
        // mutation is a single insert or remove): keep using it.
        self.hot[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.get_with_fields(key).map(|(state, _)| state)
    }

    /// [`StateStore::get`], with the hashes of the state's top-level fields
    /// as logged when it was kept with them (hot states only).
    pub(crate) fn get_with_fields(
        &self,
        key: &str,
    ) -> Option<(Arc<Value>, Option<Arc<FieldHashes>>)> {
        if let Some(hot) = self.partition(key).entries.get(key) {
            return Some((hot.state.clone(), hot.fields.clone()));
        }
        let packed = self.cold.get(key)?;
        let json = lz4_flex::decompress_size_prepended(&packed).ok()?;
        sonic_rs::from_slice(&json)
            .ok()
            .map(|state| (Arc::new(state), None))
    }

    /// Keeps `state` as the object's last. `text`, when given, must be
    /// JSON that parses to `state` exactly (the response as logged, when
    /// nothing of it was redacted): moving the state to the cold tier then
    /// compresses it as it is instead of writing the state out again.
    pub(crate) fn put(
        &self,
        key: String,
        state: Arc<Value>,
        text: Option<Arc<str>>,
    ) -> Result<(), StateError> {
        self.put_with_fields(key, state, text, None)
    }

    /// [`StateStore::put`], with the hashes of the top-level fields of
    /// `text` (given only with it: they describe that text).
    pub(crate) fn put_with_fields(
        &self,
        key: String,
        state: Arc<Value>,
        text: Option<Arc<str>>,
        fields: Option<Arc<FieldHashes>>,
    ) -> Result<(), StateError> {
        let mut part = self.partition(&key);
        if part.capacity == 0 {
            drop(part);
            return self.put_cold(key, &state, text.as_deref());
        }
        part.tick += 1;
        let tick = part.tick;
        let fields = fields.filter(|_| text.is_some());
        let hot = HotState {
            state,
            text,
            fields,
            tick,
        };
        if let Some(entry) = part.entries.get_mut(&key) {
            *entry = hot;
            return Ok(());
        }
        // The cold copy, if any, is older now.
        self.cold.invalidate(&key);
        part.entries.insert(key, hot);
        if part.entries.len() > part.capacity {
            let oldest = part
                .entries
                .iter()
                .min_by_key(|(_, hot)| hot.tick)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest
                && let Some(hot) = part.entries.remove(&k)
            {
                // Still under the partition lock: a reader that misses the hot
                // tier finds the state in the cold one.
                self.put_cold(k, &hot.state, hot.text.as_deref())?;
            }
        }
        Ok(())
    }

    fn put_cold(&self, key: String, state: &Value, text: Option<&str>) -> Result<(), StateError> {
        let written;
        let json = match text {
            Some(text) => text.as_bytes(),
            None => {
                written = sonic_rs::to_vec(state).map_err(|source| StateError {
                    key: key.clone(),
                    source,
                })?;
                &written
            }
        };
        self.cold
            .insert(key, lz4_flex::compress_prepend_size(json).into());
        Ok(())
    }

    pub(crate) fn remove(&self, key: &str) {
        self.partition(key).entries.remove(key);
        self.cold.invalidate(key);
    }

    /// Objects whose state is kept (both tiers).
    pub(crate) fn entry_count(&self) -> u64 {
        self.cold.run_pending_tasks();
        self.cold.entry_count() + self.hot_entries() as u64
    }

    pub(crate) fn hot_entries(&self) -> usize {
        self.hot
            .iter()
            .map(|p| p.lock().map(|p| p.entries.len()).unwrap_or(0))
            .sum()
    }

    /// Bytes of the cold tier (the hot tier is bounded by entries).
    pub(crate) fn cold_bytes(&self) -> u64 {
        self.cold.weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::CacheEvictionLabel;
    use sonic_rs::json;

    fn state(rv: u64) -> Arc<Value> {
        Arc::new(json!({"metadata": {"resourceVersion": rv.to_string()}, "spec": {"replicas": rv}}))
    }

    #[test]
    fn states_moved_to_the_cold_tier_read_back_equal() {
        // One hot entry per partition: most of 64 objects go cold.
        let store = StateStore::new(1 << 20, PARTITIONS, &Metrics::default());
        for i in 0..64 {
            store.put(format!("obj-{i}"), state(i), None).unwrap();
        }
        assert!(store.hot_entries() <= PARTITIONS);
        assert_eq!(store.entry_count(), 64);
        for i in 0..64 {
            assert_eq!(store.get(&format!("obj-{i}")), Some(state(i)), "obj-{i}");
        }
    }

    #[test]
    fn a_state_given_with_its_text_goes_cold_as_that_text() {
        // Written otherwise than the state would be (indented): the cold
        // tier holds these bytes, and they read back as the state.
        let text: Arc<str> = serde_json::to_string_pretty(&*state(7)).unwrap().into();
        let store = StateStore::new(1 << 20, 0, &Metrics::default());
        store
            .put("obj".into(), state(7), Some(text.clone()))
            .unwrap();
        store.cold.run_pending_tasks();
        let packed = lz4_flex::compress_prepend_size(text.as_bytes()).len() + "obj".len();
        assert_eq!(store.cold_bytes(), packed as u64);
        assert_eq!(store.get("obj"), Some(state(7)));
        // Through the hot tier too, once it makes room.
        let store = StateStore::new(1 << 20, PARTITIONS, &Metrics::default());
        store.put("obj".into(), state(7), Some(text)).unwrap();
        for i in 0..64 {
            store.put(format!("other-{i}"), state(i), None).unwrap();
        }
        assert_eq!(store.get("obj"), Some(state(7)));
    }

    #[test]
    fn a_newer_state_wins_over_a_cold_copy() {
        let store = StateStore::new(1 << 20, PARTITIONS, &Metrics::default());
        for i in 0..64 {
            store.put(format!("obj-{i}"), state(i), None).unwrap();
        }
        // obj-0 went cold long ago; its new state must shadow the old one,
        // also after the new one goes cold in turn.
        store.put("obj-0".into(), state(1000), None).unwrap();
        assert_eq!(store.get("obj-0"), Some(state(1000)));
        for i in 1..64 {
            store.put(format!("obj-{i}"), state(i + 1), None).unwrap();
        }
        assert_eq!(store.get("obj-0"), Some(state(1000)));
        assert_eq!(store.entry_count(), 64);
    }

    #[test]
    fn a_full_cold_tier_keeps_the_newest_states_and_counts_what_it_evicts() {
        // Room for about 20 states, no hot tier: 200 written one after the
        // other. The most recently written must be there (moka's default
        // admission policy refused most new ones), the oldest are gone, and
        // every state evicted for room is counted.
        let one = serde_json::to_vec(&*state(1000)).unwrap();
        let packed = lz4_flex::compress_prepend_size(&one).len() + "obj-000".len();
        let metrics = Metrics::default();
        let store = StateStore::new(20 * packed as u64, 0, &metrics);
        for i in 0..200 {
            store
                .put(format!("obj-{i:03}"), state(1000 + i), None)
                .unwrap();
        }
        let kept = store.entry_count();
        assert!((10..=20).contains(&kept), "{kept} states kept");
        for i in 190..200 {
            assert_eq!(
                store.get(&format!("obj-{i:03}")),
                Some(state(1000 + i)),
                "obj-{i:03}, one of the newest"
            );
        }
        assert_eq!(store.get("obj-000"), None);
        let evicted = metrics
            .cache_evictions
            .get_or_create(&CacheEvictionLabel {
                cache: crate::metrics::Cache::States,
                cause: crate::metrics::EvictionCause::Size,
            })
            .get();
        assert_eq!(evicted, 200 - kept);
    }

    #[test]
    fn removed_objects_are_gone_from_both_tiers() {
        for hot in [0, PARTITIONS, 1024] {
            let store = StateStore::new(1 << 20, hot, &Metrics::default());
            for i in 0..64 {
                store.put(format!("obj-{i}"), state(i), None).unwrap();
            }
            for i in 0..64 {
                store.remove(&format!("obj-{i}"));
                assert_eq!(store.get(&format!("obj-{i}")), None, "hot={hot} obj-{i}");
            }
            assert_eq!(store.entry_count(), 0, "hot={hot}");
        }
    }
}

//! The clusters the frontend offers as operations: configured, seen in
//! assembled traces, and named by the raw store's recent object spans.

use std::time::{Duration, Instant, SystemTime};

use super::FrontendError;
use super::raw::{RawStore, TimeRange};

/// How often the clusters offered as operations are read from the raw
/// store again, and how far back.
const CLUSTERS_REFRESH: Duration = Duration::from_secs(60);
const CLUSTERS_LOOKBACK: Duration = Duration::from_secs(24 * 3600);

/// Cluster names known (bounded), and when they were last read.
pub(super) struct Clusters {
    known: moka::sync::Cache<String, ()>,
    /// When the clusters were last read from the raw store.
    read_at: std::sync::Mutex<Option<Instant>>,
}

impl Clusters {
    pub(super) fn new(configured: &[String]) -> Self {
        // Least recently used first: moka's default (TinyLFU) may refuse a
        // newly seen cluster outright when full, and that is what the UI
        // asks for next.
        let known = moka::sync::Cache::builder()
            .max_capacity(10_000)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .build();
        for c in configured {
            known.insert(c.clone(), ());
        }
        Self {
            known,
            read_at: std::sync::Mutex::new(None),
        }
    }

    /// The clusters known, after reading the raw store's object spans of
    /// the last day when a minute has passed since the last read (a failed
    /// read is logged and leaves what is known).
    pub(super) async fn stored<S: RawStore>(&self, store: &S, limit: usize) -> Vec<String> {
        let due = {
            let mut last = self.read_at.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| t.elapsed() >= CLUSTERS_REFRESH);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            let now = SystemTime::now();
            let range = TimeRange::new(
                now.checked_sub(CLUSTERS_LOOKBACK)
                    .unwrap_or(std::time::UNIX_EPOCH),
                now,
            );
            if let Err(e) = self.read(store, range, limit).await {
                tracing::warn!(error = %e, "cannot read the clusters from the raw store");
            }
        }
        self.sorted()
    }

    /// Adds the clusters the raw store's object spans in `range` name.
    pub(super) async fn read<S: RawStore>(
        &self,
        store: &S,
        range: TimeRange,
        limit: usize,
    ) -> Result<(), FrontendError> {
        for c in store.clusters(range, limit).await? {
            self.known.insert(c, ());
        }
        Ok(())
    }

    /// Notes a cluster an assembled trace named.
    pub(super) fn seen(&self, cluster: &str) {
        if !self.known.contains_key(cluster) {
            self.known.insert(cluster.to_string(), ());
        }
    }

    /// Clusters known, sorted.
    pub(super) fn sorted(&self) -> Vec<String> {
        let mut v: Vec<String> = self.known.iter().map(|(k, _)| (*k).clone()).collect();
        v.sort();
        v
    }
}

//! The mergelog stage: mergelogs from instrumented controllers, each
//! admitted once (a sender retries), to be shown as a `merge` span in the
//! trace of the CPID it minted and a `merged_into` span in the trace of each
//! CPID it merged (`span_model::merge_spans`).

use std::time::Duration;

use moka::policy::EvictionPolicy;

use std::sync::Arc;

use crate::metrics::{Cache, CacheEvictions, Metrics};

/// Mergelogs remembered to show a retried one once.
const SEEN_MERGELOGS: u64 = 100_000;
/// How long a sender may retry one (its retries end within seconds).
const SEEN_FOR: Duration = Duration::from_secs(3600);

fn seen_mergelogs(metrics: &Metrics) -> moka::sync::Cache<[u8; 16], ()> {
    let evictions = CacheEvictions::new(
        metrics,
        Cache::SeenMergelogs,
        "a mergelog received again after its entry went is shown twice",
    );
    moka::sync::Cache::builder()
        .max_capacity(SEEN_MERGELOGS)
        .time_to_live(SEEN_FOR)
        .eviction_policy(EvictionPolicy::lru())
        .eviction_listener(move |_, _, cause| evictions.record(cause))
        .build()
}

/// Admits each mergelog once: owns the mergelogs seen (by new CPID).
pub(super) struct MergelogStage {
    seen: moka::sync::Cache<[u8; 16], ()>,
    metrics: Arc<Metrics>,
}

impl MergelogStage {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        MergelogStage {
            seen: seen_mergelogs(&metrics),
            metrics,
        }
    }

    /// Whether `m` is seen for the first time; a retried one is counted.
    pub(super) fn admit(&self, m: &kascade_cpid::Mergelog) -> bool {
        let key = m.cpid.to_bytes();
        if self.seen.contains_key(&key) {
            self.metrics.mergelogs_duplicate.inc();
            return false;
        }
        self.seen.insert(key, ());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_mergelog_is_admitted_once_and_counted() {
        let metrics = Arc::new(Metrics::default());
        let stage = MergelogStage::new(metrics.clone());
        let merged = |cpid| kascade_cpid::Mergelog {
            cpid,
            sources: vec![
                kascade_cpid::Cpid::new_random(),
                kascade_cpid::Cpid::new_random(),
            ],
            time: std::time::SystemTime::now(),
            controller: String::new(),
        };
        let m = merged(kascade_cpid::Cpid::new_random());
        assert!(stage.admit(&m));
        assert!(!stage.admit(&m), "a retry");
        assert_eq!(metrics.mergelogs_duplicate.get(), 1);
        assert!(stage.admit(&merged(kascade_cpid::Cpid::new_random())));
    }
}

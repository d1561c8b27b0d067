//! Mergelogs from instrumented controllers: each shown once, as a `merge`
//! span in the trace of the CPID it minted and a `merged_into` span in the
//! trace of each CPID it merged (`span_model::merge_spans`).

use std::time::Duration;

use moka::policy::EvictionPolicy;

use super::{ProcessError, Processor};
use crate::metrics::{Cache, CacheEvictions, Metrics};
use crate::span_model;

/// Mergelogs remembered to show a retried one once.
const SEEN_MERGELOGS: u64 = 100_000;
/// How long a sender may retry one (its retries end within seconds).
const SEEN_FOR: Duration = Duration::from_secs(3600);

pub(super) fn seen_mergelogs(metrics: &Metrics) -> moka::sync::Cache<[u8; 16], ()> {
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

impl Processor {
    pub async fn process_mergelog(
        &self,
        cluster: &str,
        m: &kascade_cpid::Mergelog,
    ) -> Result<(), ProcessError> {
        let key = m.cpid.to_bytes();
        if self.seen_mergelogs.contains_key(&key) {
            self.metrics.mergelogs_duplicate.inc();
            return Ok(());
        }
        self.seen_mergelogs.insert(key, ());
        if self.cfg.changes_only {
            return Ok(());
        }
        for span in span_model::merge_spans(cluster, m) {
            self.emitter.emit(span).await?;
        }
        Ok(())
    }
}

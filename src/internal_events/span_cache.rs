//! The shared span cache's occurrences (`aggregate/span_cache/etcd`): etcd
//! lost and found again, each a change of `kascade_span_cache_fallback`.

use std::time::Duration;

use super::InternalEvent;
use crate::metrics::Metrics;

/// etcd could not be reached: this replica decides alone until it is.
pub(crate) struct SpanCacheFallingBack<'a> {
    pub endpoints: &'a str,
    pub error: &'a dyn std::fmt::Display,
    pub probe_every: Duration,
    pub retried_for: Duration,
}

impl InternalEvent for SpanCacheFallingBack<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.span_cache_fallback.set(1);
        tracing::warn!(
            endpoints = self.endpoints,
            error = %self.error,
            probe_every = ?self.probe_every,
            retried_for = ?self.retried_for,
            "etcd span cache unavailable: FALLING BACK to this replica's local span cache; \
             until etcd returns, replicas may emit the same object and link spans twice"
        );
    }
}

/// etcd answers again after `outage`: `republishing` spans reserved alone
/// meanwhile are published.
pub(crate) struct SpanCacheRecovered<'a> {
    pub endpoints: &'a str,
    pub outage: Duration,
    pub republishing: usize,
}

impl InternalEvent for SpanCacheRecovered<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.span_cache_fallback.set(0);
        tracing::info!(
            endpoints = self.endpoints,
            outage = ?self.outage,
            republishing = self.republishing,
            "etcd span cache is reachable again: spans are deduplicated across replicas again"
        );
    }
}

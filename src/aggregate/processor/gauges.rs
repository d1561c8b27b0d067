//! The processor's gauges: how full its stages' caches are, set when the
//! metrics are scraped.

use super::super::last_states::StateStore;
use super::emit::Emitter;
use crate::metrics::Metrics;

/// Sets the gauges of the cause index (`cause_objects` objects), the last
/// states and the span cache.
pub(super) fn report(
    metrics: &Metrics,
    cause_objects: u64,
    states: &StateStore,
    emitter: &Emitter,
) {
    metrics.cascade_objects.set(cause_objects as i64);
    metrics.state_cache_entries.set(states.entry_count() as i64);
    metrics
        .state_cache_hot_entries
        .set(states.hot_entries() as i64);
    metrics.state_cache_bytes.set(states.cold_bytes() as i64);
    metrics
        .span_cache_entries
        .set(emitter.span_cache_entries() as i64);
}

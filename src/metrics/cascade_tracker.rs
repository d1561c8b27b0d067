//! Metrics of cascade tracking (`analysis::cascade::CascadeTracker`).

use std::collections::HashSet;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Distinct `kind` label values at most; roots of other resources are
/// counted under `other` (and in `cascade_kinds_folded`).
pub(crate) const MAX_CASCADE_KINDS: usize = 32;
/// The `kind` of roots beyond [`MAX_CASCADE_KINDS`].
pub(crate) const OTHER_KIND: &str = "other";

/// The `kind` of `kascade_cascade_completion_seconds`: the resource of the
/// cascade's root write, from a bounded set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CascadeKindLabel {
    pub kind: String,
}

type HistogramFamily = Family<CascadeKindLabel, Histogram, fn() -> Histogram>;

fn completion_histogram() -> Histogram {
    // 10 ms to ~22 min.
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

pub(crate) struct CascadeMetrics {
    /// Root request received → last object settled, by root resource.
    pub completion_seconds: HistogramFamily,
    /// Cascades followed, not yet complete (or complete and still quiet).
    pub open: Gauge,
    /// Open cascades dropped to stay within the bound, never observed.
    pub evicted: Counter,
    /// Cascades closed incomplete after no change for the stall time, by
    /// root resource: a rollout stuck, a Pod never scheduled.
    pub stalled: Family<CascadeKindLabel, Counter>,
    /// Roots whose resource was counted under `other`.
    pub kinds_folded: Counter,
    /// Effects recorded before their cause (its response finished late),
    /// dropped while waiting for it to stay within the bound.
    pub early_effects_dropped: Counter,
    /// Unsettled objects whose readiness was forgotten to stay within the
    /// bound: a cascade that left one as it found it waits for its own
    /// writes again.
    pub unsettled_forgotten: Counter,
    kinds: std::sync::Mutex<HashSet<String>>,
}

impl Default for CascadeMetrics {
    fn default() -> Self {
        Self {
            completion_seconds: Family::new_with_constructor(completion_histogram),
            open: Gauge::default(),
            evicted: Counter::default(),
            stalled: Family::default(),
            kinds_folded: Counter::default(),
            early_effects_dropped: Counter::default(),
            unsettled_forgotten: Counter::default(),
            kinds: Default::default(),
        }
    }
}

impl CascadeMetrics {
    /// The label of a root of `resource`: itself while fewer than
    /// [`MAX_CASCADE_KINDS`] kinds have been seen, else `other` (counted).
    pub(crate) fn kind(&self, resource: &str) -> CascadeKindLabel {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let kind = if kinds.contains(resource) {
            resource.to_string()
        } else if kinds.len() < MAX_CASCADE_KINDS && resource != OTHER_KIND {
            kinds.insert(resource.to_string());
            resource.to_string()
        } else {
            self.kinds_folded.inc();
            OTHER_KIND.to_string()
        };
        CascadeKindLabel { kind }
    }

    pub(crate) fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("kascade");
        r.register(
            "cascade_completion_seconds",
            "Cascade completion: root write received until every object it touched settled, by root resource",
            self.completion_seconds.clone(),
        );
        r.register(
            "cascades_open",
            "Cascades followed and not yet complete",
            self.open.clone(),
        );
        r.register(
            "cascades_evicted",
            "Open cascades dropped to stay within the bound (never observed)",
            self.evicted.clone(),
        );
        r.register(
            "cascades_stalled",
            "Cascades closed incomplete: no change of them for the stall time (10 min) while some object they touched had not settled, by root resource",
            self.stalled.clone(),
        );
        r.register(
            "cascade_early_effects_dropped",
            "Changes recorded before their cause (its response finished late) dropped while they waited for it, to stay within the bound (their cascade misses them)",
            self.early_effects_dropped.clone(),
        );
        r.register(
            "cascade_unsettled_forgotten",
            "Unsettled objects whose readiness the tracker forgot to stay within the bound (100,000): a cascade that left one as it found it no longer ends when other work settles it",
            self.unsettled_forgotten.clone(),
        );
        r.register(
            "cascade_kinds_folded",
            "Cascade roots counted under kind=\"other\" (more root resources than the label bound)",
            self.kinds_folded.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_bounded_and_the_rest_is_other() {
        let m = CascadeMetrics::default();
        for i in 0..MAX_CASCADE_KINDS {
            assert_eq!(m.kind(&format!("r{i}")).kind, format!("r{i}"));
        }
        assert_eq!(m.kind("r0").kind, "r0");
        assert_eq!(m.kind("deployments").kind, OTHER_KIND);
        assert_eq!(m.kinds_folded.get(), 1);
    }
}

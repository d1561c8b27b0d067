//! `kascade_propagation_seconds{edge}`: hop latency per edge class, live.
//! The edge label's values are bounded: the first [`MAX_EDGES`] distinct
//! classes get their own series, later ones go to `other` (counted in
//! `kascade_propagation_edges_folded_total`).

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Distinct edge label values at most (then `other`).
pub(crate) const MAX_EDGES: usize = 64;

/// The label value of classes past [`MAX_EDGES`].
pub(crate) const OTHER_EDGE: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EdgeLabel {
    pub edge: String,
}

fn propagation_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

pub(crate) struct PropagationMetrics {
    pub seconds: Family<EdgeLabel, Histogram, fn() -> Histogram>,
    /// Hops whose edge class was folded into `other`.
    pub folded: Counter,
    edges: Mutex<HashSet<String>>,
}

impl Default for PropagationMetrics {
    fn default() -> Self {
        Self {
            seconds: Family::new_with_constructor(propagation_histogram),
            folded: Counter::default(),
            edges: Mutex::new(HashSet::new()),
        }
    }
}

impl PropagationMetrics {
    pub(crate) fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("kascade");
        r.register(
            "propagation_seconds",
            "Hop latency of inferred cascades (effect request received minus cause response completed), by edge class",
            self.seconds.clone(),
        );
        r.register(
            "propagation_edges_folded",
            "Hops counted under edge=\"other\" because the distinct edge classes reached their cap",
            self.folded.clone(),
        );
    }

    /// Observes one hop of class `edge`.
    pub(crate) fn observe(&self, edge: &str, seconds: f64) {
        let label = {
            let mut edges = self.edges.lock().unwrap_or_else(|e| e.into_inner());
            if edges.contains(edge) {
                edge.to_string()
            } else if edges.len() < MAX_EDGES {
                edges.insert(edge.to_string());
                edge.to_string()
            } else {
                self.folded.inc();
                OTHER_EDGE.to_string()
            }
        };
        self.seconds
            .get_or_create(&EdgeLabel { edge: label })
            .observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(m: &PropagationMetrics) -> String {
        let mut r = Registry::default();
        m.register(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn edge_values_are_capped_and_the_rest_counted_as_other() {
        let m = PropagationMetrics::default();
        for i in 0..MAX_EDGES + 3 {
            m.observe(&format!("edge {i}"), 0.01);
        }
        m.observe("edge 0", 0.02);
        let text = exposition(&m);
        assert!(
            text.contains("kascade_propagation_seconds_count{edge=\"edge 0\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kascade_propagation_seconds_count{edge=\"other\"} 3"),
            "{text}"
        );
        assert!(!text.contains(&format!("edge=\"edge {MAX_EDGES}\"")));
        assert!(
            text.contains("kascade_propagation_edges_folded_total 3"),
            "{text}"
        );
    }
}

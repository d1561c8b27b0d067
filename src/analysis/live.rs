//! The live propagation metric: a [`ChangeSink`] for `kascade collect` that
//! observes every successful hop in `kascade_propagation_seconds{edge}`.

use std::sync::Arc;

use crate::metrics::PropagationMetrics;
use crate::pipeline::{ChangeRecord, ChangeSink};

pub struct PropagationSink {
    metrics: Arc<PropagationMetrics>,
}

impl PropagationSink {
    pub fn new(metrics: Arc<PropagationMetrics>) -> Self {
        Self { metrics }
    }
}

impl ChangeSink for PropagationSink {
    fn record(&self, change: ChangeRecord) {
        if change.code >= 400 {
            return;
        }
        if let Some(cause) = &change.cause {
            self.metrics.observe(&cause.edge, cause.hop.as_secs_f64());
        }
    }
}

/// Hands every change to each of several sinks (the collector may have a
/// change log, the live metric and the cascade tracker at once).
pub struct FanOut(pub Vec<Arc<dyn ChangeSink>>);

impl ChangeSink for FanOut {
    fn wants_objects(&self) -> bool {
        self.0.iter().any(|s| s.wants_objects())
    }

    fn record(&self, change: ChangeRecord) {
        if let Some((last, rest)) = self.0.split_last() {
            for s in rest {
                s.record(change.clone());
            }
            last.record(change);
        }
    }
}

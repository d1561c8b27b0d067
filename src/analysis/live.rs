//! The live propagation metric: a [`ChangeSink`] for `kascade collect` that
//! observes every successful hop in `kascade_propagation_seconds{edge}`.

use std::sync::Arc;

use crate::flow::{ChangeRecord, ChangeSink};
use crate::metrics::PropagationMetrics;

pub(crate) struct PropagationSink {
    metrics: Arc<PropagationMetrics>,
}

impl PropagationSink {
    pub(crate) fn new(metrics: Arc<PropagationMetrics>) -> Self {
        Self { metrics }
    }
}

impl ChangeSink for PropagationSink {
    fn record(&self, change: &ChangeRecord) {
        if change.code >= 400 {
            return;
        }
        if let Some(cause) = &change.cause {
            self.metrics.observe(&cause.edge, cause.hop.as_secs_f64());
        }
    }
}

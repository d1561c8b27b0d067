//! The cause index's occurrences (`aggregate/causes`): what it had to
//! forget to stay bounded, and causes whose cascade was not known in time.

use super::{InternalEvent, rate_limited};
use crate::metrics::Metrics;
use crate::model::ObjectRef;

/// A change of `object` forgotten early as a candidate cause: `kept` of
/// its changes of one kind are kept already.
pub(crate) struct CauseCandidateDropped<'a> {
    pub object: &'a ObjectRef,
    pub kept: usize,
}

impl InternalEvent for CauseCandidateDropped<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.cascade_candidates_dropped.inc();
        rate_limited!(tracing::warn!(
            object = %self.object,
            kept = self.kept,
            "forgot a change of an object as a candidate cause: `kept` of its changes of one kind are kept already (the seconds before the oldest write being processed); writes it caused are shown without their cause (further ones within 10 s are only counted)"
        ));
    }
}

/// A relation `holder` has towards `target` not registered: `target`
/// already has `kept` holders.
pub(crate) struct CauseHolderDropped<'a> {
    pub holder: &'a ObjectRef,
    pub target: &'a ObjectRef,
    pub kept: usize,
}

impl InternalEvent for CauseHolderDropped<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.cascade_holders_dropped.inc();
        rate_limited!(tracing::warn!(
            holder = %self.holder,
            target = %self.target,
            kept = self.kept,
            "the target holds relations from `kept` objects already: changes of the holder are not found as causes through it (further ones within 10 s are only counted)"
        ));
    }
}

/// The CPID of a create not resolved yet forgotten: `kept` are waiting.
pub(crate) struct CreatedCpidForgotten {
    pub kept: usize,
}

impl InternalEvent for CreatedCpidForgotten {
    fn emit(self, metrics: &Metrics) {
        metrics.cascade_cpids_forgotten.inc();
        rate_limited!(tracing::warn!(
            kept = self.kept,
            "forgot the CPID of a create not resolved yet: effects processed before it carry none (further ones within 10 s are only counted)"
        ));
    }
}

/// The cascade of an effect's cause (which arrived first) was not known
/// within the wait: the cause stands for it.
pub(crate) struct CauseNotKnownInTime<'a> {
    pub effect: &'a ObjectRef,
}

impl InternalEvent for CauseNotKnownInTime<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics.cascade_resolve_timeouts.inc();
        tracing::debug!(object = %self.effect, "cause's cascade not known in time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_beyond_the_bound_is_counted_every_time_and_logged_once_in_ten_seconds() {
        let metrics = Metrics::default();
        let target = ObjectRef::new("c", "apps", "replicasets", "ns", "web-1");
        let holders: Vec<ObjectRef> = (0..3)
            .map(|i| ObjectRef::new("c", "", "pods", "ns", format!("web-1-{i}")))
            .collect();
        let log = super::super::tests::logged(|| {
            for holder in &holders {
                CauseHolderDropped {
                    holder,
                    target: &target,
                    kept: 4096,
                }
                .emit(&metrics);
            }
        });
        assert_eq!(metrics.cascade_holders_dropped.get(), 3);
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 1, "{log}");
        assert!(
            warnings[0].contains("holder=c:pods ns/web-1-0")
                && warnings[0].contains("target=c:replicasets/apps ns/web-1")
                && warnings[0].contains("kept=4096"),
            "{log}"
        );
    }
}

//! The admission source's occurrences (`source/admission`): requests it
//! could not read or did not hold, and what became of the writes it held.

use super::{InternalEvent, rate_limited};
use crate::metrics::{
    AdmissionRequestLabel, AdmissionRequestOutcome, AdmittedWriteLabel, AdmittedWriteOutcome,
    Metrics,
};

/// An admission request read: counted by what became of it. One kascade
/// cannot read (answered 400; the apiserver's failurePolicy Ignore admits
/// the write anyway) or held, then shed, is also said, at most once per
/// 10 s per kind; one not watched is said once per 10 s at INFO.
pub(crate) struct AdmissionRequestHandled<'a> {
    pub cluster: &'a str,
    pub outcome: AdmissionRequestOutcome,
    pub requests: u64,
    /// What was wrong with it, for the refusals (`Malformed`, `TooLarge`,
    /// `TimedOut`, `Busy`).
    pub error: &'a str,
}

impl InternalEvent for AdmissionRequestHandled<'_> {
    fn emit(self, metrics: &Metrics) {
        if self.requests == 0 {
            return;
        }
        metrics
            .admission_requests
            .get_or_create(&AdmissionRequestLabel {
                cluster: self.cluster.to_string(),
                outcome: self.outcome,
            })
            .inc_by(self.requests);
        let (cluster, requests) = (self.cluster, self.requests);
        match self.outcome {
            AdmissionRequestOutcome::Malformed => {
                let error = crate::messages::clip_message(self.error.to_string());
                rate_limited!(tracing::warn!(
                    cluster,
                    error,
                    "refused an admission request kascade cannot read; the write is not recorded (further ones within 10 s are only counted)"
                ))
            }
            AdmissionRequestOutcome::Shed => rate_limited!(tracing::warn!(
                cluster,
                requests,
                "admitted writes dropped unshown: more were waiting for the list-watch than --admission-max-pending allows (further ones within 10 s are only counted)"
            )),
            AdmissionRequestOutcome::TooLarge
            | AdmissionRequestOutcome::TimedOut
            | AdmissionRequestOutcome::Busy => {
                let error = crate::messages::clip_message(self.error.to_string());
                rate_limited!(tracing::warn!(
                    cluster,
                    outcome = self.outcome.as_str(),
                    error,
                    "refused an admission request unread; the write is not recorded (further ones within 10 s are only counted)"
                ))
            }
            AdmissionRequestOutcome::Unwatched => rate_limited!(tracing::info!(
                cluster,
                "an admitted write of a cluster or resource the list-watch does not deliver is not shown: what was stored cannot be known (add the cluster with --watch-cluster, or leave the resource out of the webhook's rules)"
            )),
            AdmissionRequestOutcome::Recorded
            | AdmissionRequestOutcome::DryRun
            | AdmissionRequestOutcome::NotAWrite => {}
        }
    }
}

/// An admitted write shown, or dropped as an earlier attempt of one.
pub(crate) struct AdmittedWriteShown<'a> {
    pub cluster: &'a str,
    pub outcome: AdmittedWriteOutcome,
    pub writes: u64,
}

impl InternalEvent for AdmittedWriteShown<'_> {
    fn emit(self, metrics: &Metrics) {
        if self.writes == 0 {
            return;
        }
        metrics
            .admitted_writes
            .get_or_create(&AdmittedWriteLabel {
                cluster: self.cluster.to_string(),
                outcome: self.outcome,
            })
            .inc_by(self.writes);
        tracing::debug!(
            cluster = self.cluster,
            outcome = self.outcome.as_str(),
            writes = self.writes,
            "admitted writes shown"
        );
    }
}

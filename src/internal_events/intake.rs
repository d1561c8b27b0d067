//! The audit webhook's occurrences (`source/webhook`): requests and events
//! it refused, and why. The client is answered the same message (a 4xx or
//! 5xx with it); the log says it to the collector's operator, at most once
//! per 10 s per reason.

use super::{InternalEvent, rate_limited};
use crate::metrics::{Metrics, RejectReason};

/// A webhook request, or audit events in it, refused: `events` counted
/// under `reason` (1 for a request refused before its events were read).
/// `cluster` is empty before the request is authenticated.
pub(crate) struct AuditEventsRejected<'a> {
    pub reason: RejectReason,
    pub events: u64,
    pub cluster: &'a str,
    pub error: &'a str,
}

impl InternalEvent for AuditEventsRejected<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .events_rejected
            .get_or_create(&Metrics::rejected(self.reason))
            .inc_by(self.events);
        let AuditEventsRejected {
            events,
            cluster,
            error,
            ..
        } = self;
        let error = crate::messages::clip_message(error.to_string());
        // A rate limit per reason: a flood of one kind does not hide another.
        match self.reason {
            RejectReason::Unauthorized => rate_limited!(tracing::warn!(
                error,
                "refused a webhook request: missing or wrong bearer token (further ones within 10 s are only counted)"
            )),
            RejectReason::BadBody => rate_limited!(tracing::warn!(
                cluster,
                error,
                "refused a webhook body that could not be read (further ones within 10 s are only counted)"
            )),
            RejectReason::Malformed => rate_limited!(tracing::warn!(
                cluster,
                events,
                error,
                "rejected audit events kascade cannot use (further ones within 10 s are only counted)"
            )),
            RejectReason::Overload => rate_limited!(tracing::warn!(
                cluster,
                events,
                error,
                "refused an audit batch, to be sent again (further refusals within 10 s are only counted)"
            )),
        }
    }
}

/// A request of Kubernetes components' own spans refused
/// (`--component-traces-listen`): counted in
/// `kascade_component_requests_refused_total` by reason.
pub(crate) struct ComponentRequestRefused<'a> {
    pub reason: RejectReason,
    pub error: &'a str,
}

impl InternalEvent for ComponentRequestRefused<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .component_requests_refused
            .get_or_create(&Metrics::rejected(self.reason))
            .inc();
        let error = crate::messages::clip_message(self.error.to_string());
        match self.reason {
            RejectReason::Unauthorized => rate_limited!(tracing::warn!(
                error,
                "refused a component trace request: missing or wrong bearer token (further ones within 10 s are only counted)"
            )),
            RejectReason::BadBody | RejectReason::Overload => rate_limited!(tracing::warn!(
                error,
                "refused a component trace request that could not be read (further ones within 10 s are only counted)"
            )),
            RejectReason::Malformed => rate_limited!(tracing::warn!(
                error,
                "refused a component trace request that is not OTLP (further ones within 10 s are only counted)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_component_request_is_counted_and_said_with_its_error() {
        let metrics = Metrics::default();
        let log = super::super::tests::logged(|| {
            ComponentRequestRefused {
                reason: RejectReason::Malformed,
                error: "invalid wire type",
            }
            .emit(&metrics);
        });
        assert_eq!(
            metrics
                .component_requests_refused
                .get_or_create(&Metrics::rejected(RejectReason::Malformed))
                .get(),
            1
        );
        assert!(
            log.contains("WARN") && log.contains("invalid wire type"),
            "{log}"
        );
    }

    #[test]
    fn refusals_are_counted_each_and_logged_once_in_ten_seconds_per_reason() {
        let metrics = Metrics::default();
        let log = super::super::tests::logged(|| {
            for _ in 0..3 {
                AuditEventsRejected {
                    reason: RejectReason::Unauthorized,
                    events: 1,
                    cluster: "",
                    error: "missing or wrong bearer token",
                }
                .emit(&metrics);
            }
            AuditEventsRejected {
                reason: RejectReason::Overload,
                events: 40,
                cluster: "east",
                error: "the queue stayed full for 2s: retry",
            }
            .emit(&metrics);
        });
        let count = |reason| {
            metrics
                .events_rejected
                .get_or_create(&Metrics::rejected(reason))
                .get()
        };
        assert_eq!(count(RejectReason::Unauthorized), 3);
        assert_eq!(count(RejectReason::Overload), 40);
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warnings.len(), 2, "{log}");
        assert!(warnings[0].contains("bearer token"), "{log}");
        assert!(
            warnings[1].contains("cluster=\"east\"") || warnings[1].contains("cluster=east"),
            "{log}"
        );
        assert!(warnings[1].contains("events=40"), "{log}");
    }
}

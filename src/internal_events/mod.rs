//! What kascade counts and logs about itself, one typed event per
//! occurrence: its [`emit`](InternalEvent::emit) increments the metric and
//! writes the log line together, so no count lacks its explanation and no
//! log line its count. Occurrences that can repeat with every audit event
//! log at most once per [`LOG_EVERY`] per kind (the count keeps every
//! one). Labels come from the bounded enums of `metrics::labels`. One file
//! per component, as its metrics are.

mod admission;
mod causes;
mod export;
mod intake;
mod span_cache;
mod spool;

pub(crate) use admission::{AdmissionRequestHandled, AdmittedWriteShown};
pub(crate) use causes::{
    CauseCandidateDropped, CauseHolderDropped, CauseNotKnownInTime, CreatedCpidForgotten,
};
pub(crate) use export::{DropCause, SpansDropped};
pub(crate) use intake::{AuditEventsRejected, ComponentRequestRefused};
pub(crate) use span_cache::{SpanCacheFallingBack, SpanCacheRecovered};
pub(crate) use spool::{SpoolBatchQuarantined, SpoolSegmentDamaged};

use crate::metrics::Metrics;

/// One occurrence, counted and logged.
pub(crate) trait InternalEvent {
    /// Counts the occurrence in `metrics` and logs it.
    fn emit(self, metrics: &Metrics);
}

/// How often a kind of event that repeats is logged at most.
pub(crate) const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A rate limit of its own for each kind of event, e.g.
/// `rate_limited!(tracing::warn!(...))`: logs when due for this call site.
/// (In the crate's unit tests, one per thread: a test sees its own first
/// occurrence logged whatever other tests emitted.)
macro_rules! rate_limited {
    ($log:expr) => {{
        #[cfg(not(test))]
        let due = {
            static LIMIT: std::sync::LazyLock<crate::messages::LogEvery> =
                std::sync::LazyLock::new(|| {
                    crate::messages::LogEvery::new(crate::internal_events::LOG_EVERY)
                });
            LIMIT.should_log()
        };
        #[cfg(test)]
        let due = {
            thread_local! {
                static LIMIT: crate::messages::LogEvery =
                    crate::messages::LogEvery::new(crate::internal_events::LOG_EVERY);
            }
            LIMIT.with(|l| l.should_log())
        };
        if due {
            $log;
        }
    }};
}
pub(crate) use rate_limited;

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::{Arc, Mutex};

    /// What `f` logs at DEBUG and above, as text lines (shared by the
    /// crate's unit tests that look at logs).
    pub(crate) fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }
}

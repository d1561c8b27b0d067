//! The exporter's occurrences (`export`): spans given up, each counted in
//! `kascade_spans_dropped_total{output,reason}` and said with why.

use std::time::Duration;

use super::InternalEvent;
use crate::metrics::{DropReason, ExportOutput, Metrics};

/// Spans given up by outputs: `spans` for each of `outputs`.
pub(crate) struct SpansDropped<'a> {
    pub outputs: &'a [ExportOutput],
    /// The output's receiver or file (empty when the batch was dropped for
    /// every output before reaching one).
    pub target: &'a str,
    pub spans: usize,
    pub cause: DropCause<'a>,
}

/// Why spans were given up: one occurrence each.
pub(crate) enum DropCause<'a> {
    /// The receiver took the request but rejected some of its spans.
    PartlyRejected { message: &'a str },
    /// The receiver refuses even the trimmed span as too large.
    TooLargeForReceiver {
        bytes: usize,
        span: &'a str,
        error: &'a str,
    },
    /// Too large for `--export-max-batch-bytes` even without its events
    /// and values.
    TooLargeForBatch {
        bytes: usize,
        max_batch_bytes: usize,
        span: &'a str,
    },
    /// The receiver refused the request for good (not retried).
    Refused { error: &'a str },
    /// The batch could not be written as OTLP/JSON.
    NotConvertible { error: &'a str },
    /// The output's task has stopped (a panic).
    OutputStopped,
    /// Retryable failures outlasted `--export-retry-for`.
    RetriesExhausted { error: &'a str, retry_for: Duration },
    /// The output was given up already (said once, then): counted only.
    OutputGivenUp,
}

impl DropCause<'_> {
    fn reason(&self) -> DropReason {
        match self {
            DropCause::PartlyRejected { .. } => DropReason::PartialRejection,
            DropCause::TooLargeForReceiver { .. } | DropCause::TooLargeForBatch { .. } => {
                DropReason::TooLarge
            }
            DropCause::Refused { .. }
            | DropCause::NotConvertible { .. }
            | DropCause::OutputStopped => DropReason::Rejected,
            DropCause::RetriesExhausted { .. } | DropCause::OutputGivenUp => {
                DropReason::RetriesExhausted
            }
        }
    }
}

impl InternalEvent for SpansDropped<'_> {
    fn emit(self, metrics: &Metrics) {
        let reason = self.cause.reason();
        for output in self.outputs {
            metrics
                .spans_dropped
                .get_or_create(&Metrics::dropped(*output, reason))
                .inc_by(self.spans as u64);
        }
        let (output, spans) = (self.target, self.spans);
        // Each is an outage or a span kascade cannot send: rare, and each
        // loses data, so each is said.
        match self.cause {
            DropCause::PartlyRejected { message } => tracing::error!(
                output,
                rejected = spans,
                message,
                "the OTLP receiver accepted a request but rejected some of its spans"
            ),
            DropCause::TooLargeForReceiver { bytes, span, error } => tracing::error!(
                output,
                bytes,
                span,
                error,
                "the receiver refuses even the trimmed span as too large; dropped"
            ),
            DropCause::TooLargeForBatch {
                bytes,
                max_batch_bytes,
                span,
            } => tracing::error!(
                bytes,
                max_batch_bytes,
                span,
                "span too large for --export-max-batch-bytes even without its events and values: dropped"
            ),
            DropCause::Refused { error } => tracing::error!(
                output,
                spans,
                error,
                "the receiver refused the request for good (not retried); spans dropped"
            ),
            DropCause::NotConvertible { error } => tracing::error!(
                output,
                spans,
                error,
                "cannot convert a batch to OTLP/JSON; dropped"
            ),
            DropCause::OutputStopped => {
                tracing::error!(output, spans, "the output has stopped; batch dropped")
            }
            DropCause::RetriesExhausted { error, retry_for } => tracing::error!(
                output,
                spans,
                error,
                "export kept failing for {retry_for:?} (--export-retry-for); spans dropped"
            ),
            DropCause::OutputGivenUp => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_counts_its_spans_for_each_output_under_its_reason_and_says_why_once() {
        let metrics = Metrics::default();
        let outputs = [ExportOutput::Otlp, ExportOutput::OtlpJson];
        let log = super::super::tests::logged(|| {
            SpansDropped {
                outputs: &outputs,
                target: "",
                spans: 1,
                cause: DropCause::TooLargeForBatch {
                    bytes: 9_000_000,
                    max_batch_bytes: 4_000_000,
                    span: "c:configmaps ns/big",
                },
            }
            .emit(&metrics);
            SpansDropped {
                outputs: &outputs[..1],
                target: "http://jaeger:4317",
                spans: 7,
                cause: DropCause::OutputGivenUp,
            }
            .emit(&metrics);
        });
        let count = |output, reason| {
            metrics
                .spans_dropped
                .get_or_create(&Metrics::dropped(output, reason))
                .get()
        };
        assert_eq!(count(ExportOutput::Otlp, DropReason::TooLarge), 1);
        assert_eq!(count(ExportOutput::OtlpJson, DropReason::TooLarge), 1);
        assert_eq!(count(ExportOutput::Otlp, DropReason::RetriesExhausted), 7);
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
        assert_eq!(errors.len(), 1, "{log}");
        assert!(
            errors[0].contains("--export-max-batch-bytes") && errors[0].contains("bytes=9000000"),
            "{log}"
        );
    }
}

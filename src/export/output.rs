//! One output task per configured output: its batches in order, each sent
//! with retries, split when too large, or written to the OTLP/JSON file.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::batcher::{Batch, RequestFramer, count_trimmed, span_name};
use super::failure::Accepted;
use super::otlp::{self, Transport};
use super::{ExportConfig, ExportProgress, Failure, OutputSpec, SetupError, trim};
use crate::internal_events::{DropCause, InternalEvent, SpansDropped};
use crate::metrics::{ExportOutput, Metrics, TrimReason};
use crate::span_model::EncodedSpan;

pub(super) enum Output {
    Otlp(otlp::OtlpSender),
    Json {
        writer: BufWriter<File>,
        path: PathBuf,
    },
    /// A receiver that answers in a scripted order (tests of timing and order).
    #[cfg(test)]
    Scripted(super::test_support::ScriptedReceiver),
}

impl Output {
    pub(super) fn label(&self) -> ExportOutput {
        match self {
            Output::Otlp(_) => ExportOutput::Otlp,
            Output::Json { .. } => ExportOutput::OtlpJson,
            #[cfg(test)]
            Output::Scripted(_) => ExportOutput::Otlp,
        }
    }
}

pub(super) fn build_outputs(
    cfg: &ExportConfig,
    specs: &[OutputSpec],
) -> Result<Vec<(Output, String)>, SetupError> {
    let mut outputs = Vec::new();
    for spec in specs {
        match spec {
            OutputSpec::Otlp => {
                let otlp = cfg.otlp.as_ref().ok_or(SetupError::NoOtlpSettings)?;
                outputs.push((
                    Output::Otlp(otlp::OtlpSender::new(otlp)?),
                    otlp.endpoint.clone(),
                ));
            }
            OutputSpec::OtlpJson(path) => {
                let file =
                    crate::output_file::create(path).map_err(|source| SetupError::OutputFile {
                        path: path.clone(),
                        source,
                    })?;
                outputs.push((
                    Output::Json {
                        writer: BufWriter::new(file),
                        path: path.clone(),
                    },
                    path.display().to_string(),
                ));
            }
            // Written by the pipeline's change sink, not the exporter.
            OutputSpec::Changelog(_) => {}
        }
    }
    Ok(outputs)
}

/// What one output needs to write and count.
pub(super) struct OutputContext {
    pub(super) label: ExportOutput,
    /// This output's place in `ExportProgress`.
    pub(super) index: usize,
    pub(super) progress: Arc<ExportProgress>,
    pub(super) target: String,
    pub(super) retry_for: Duration,
    /// Set once a batch exhausted its retries, when later batches are to be
    /// dropped without retrying (`ExportConfig::give_up_once_lost`).
    pub(super) gone: Option<std::sync::atomic::AtomicBool>,
    pub(super) framer: Arc<RequestFramer>,
    pub(super) metrics: Arc<Metrics>,
}

impl OutputContext {
    pub(super) fn exported(&self, n: usize) {
        self.metrics
            .spans_exported
            .get_or_create(&Metrics::output(self.label))
            .inc_by(n as u64);
    }

    /// Counts and says `n` spans given up for `cause`.
    pub(super) fn dropped(&self, n: usize, cause: DropCause<'_>) {
        SpansDropped {
            outputs: std::slice::from_ref(&self.label),
            target: &self.target,
            spans: n,
            cause,
        }
        .emit(&self.metrics);
    }

    /// Whether this output gave up on its receiver (or file) for good: then
    /// the `n` spans of a batch are counted as dropped and true returned.
    pub(super) fn dropped_as_gone(&self, n: usize) -> bool {
        let gone = self
            .gone
            .as_ref()
            .is_some_and(|g| g.load(std::sync::atomic::Ordering::Relaxed));
        if gone {
            self.dropped(n, DropCause::OutputGivenUp);
        }
        gone
    }

    /// Counts `n` spans dropped after exhausted retries (said with the
    /// last `error`; none for the rest of a batch given up with it), and
    /// gives up on the receiver when that is asked for.
    pub(super) fn retries_exhausted(&self, n: usize, error: Option<&str>) {
        self.dropped(
            n,
            match error {
                Some(error) => DropCause::RetriesExhausted {
                    error,
                    retry_for: self.retry_for,
                },
                None => DropCause::OutputGivenUp,
            },
        );
        if let Some(g) = &self.gone
            && !g.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::error!(output = %self.target,
                "giving up on this output: the spans still queued for it are dropped without retrying");
        }
    }

    pub(super) fn failed_attempt(&self) {
        self.metrics
            .export_errors
            .get_or_create(&Metrics::output(self.label))
            .inc();
    }
}

pub(super) const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why a request was given up.
pub(super) enum GiveUp {
    TooLarge(String),
    Permanent(String),
    RetriesExhausted(String),
}

/// Sends `body` until it is accepted, refused for good, or retryable
/// failures outlast `deadline`.
pub(super) async fn send_with_retries<T: Transport>(
    transport: &mut T,
    body: &Bytes,
    spans: usize,
    deadline: Instant,
    ctx: &OutputContext,
) -> Result<Accepted, GiveUp> {
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let e = match transport.send(body.clone()).await {
            Ok(accepted) => {
                ctx.progress.succeeded(ctx.index);
                return Ok(accepted);
            }
            Err(e) => e,
        };
        ctx.failed_attempt();
        ctx.progress.failed(ctx.index, &e.to_string());
        match e.failure {
            Failure::TooLarge => return Err(GiveUp::TooLarge(e.message)),
            Failure::Permanent => return Err(GiveUp::Permanent(e.message)),
            Failure::Retryable { after } => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(GiveUp::RetriesExhausted(e.message));
                }
                // The receiver's own delay when it gave one; never past the deadline
                // (one last attempt is made there).
                let wait = after.unwrap_or(backoff).min(deadline - now);
                tracing::warn!(output = %ctx.target, spans, error = %e, retry_in = ?wait, "export failed; retrying");
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One request's worth of spans: a batch, or a part of one that was split.
pub(super) struct Part {
    pub(super) spans: Vec<EncodedSpan>,
    pub(super) body: Bytes,
}

/// Exports one batch over OTLP: retried, split or trimmed as the receiver's
/// answers require; every span ends exported or counted as dropped.
pub(super) async fn export_batch<T: Transport>(
    transport: &mut T,
    batch: &Batch,
    ctx: &OutputContext,
) {
    if ctx.dropped_as_gone(batch.spans.len()) {
        return;
    }
    let deadline = Instant::now() + ctx.retry_for;
    let mut parts = VecDeque::from([Part {
        spans: batch.spans.clone(),
        body: batch.protobuf.clone(),
    }]);
    while let Some(part) = parts.pop_front() {
        let n = part.spans.len();
        match send_with_retries(transport, &part.body, n, deadline, ctx).await {
            Ok(accepted) => {
                let rejected = (accepted.rejected_spans as usize).min(n);
                ctx.exported(n - rejected);
                if rejected > 0 {
                    ctx.dropped(
                        rejected,
                        DropCause::PartlyRejected {
                            message: &accepted.message,
                        },
                    );
                }
            }
            Err(GiveUp::TooLarge(message)) if n > 1 => {
                // In halves, in order: the left half is sent first.
                ctx.metrics
                    .export_splits
                    .get_or_create(&Metrics::output(ctx.label))
                    .inc();
                tracing::info!(output = %ctx.target, spans = n, bytes = part.body.len(), error = %message,
                    "the receiver refused a request as too large; sending it in halves");
                let mut left = part.spans;
                let right = left.split_off(n / 2);
                for spans in [right, left] {
                    let body = ctx.framer.frame(&spans);
                    parts.push_front(Part { spans, body });
                }
            }
            Err(GiveUp::TooLarge(message)) => {
                let span = &part.spans[0];
                // Half its size, again until the receiver takes it or nothing
                // but the bare span is left.
                match trim::trim_span(span, span.0.len() / 2) {
                    Some((trimmed, report)) => {
                        count_trimmed(&ctx.metrics, TrimReason::ReceiverLimit, &report);
                        tracing::warn!(output = %ctx.target, bytes = span.0.len(), events_dropped = report.events_dropped,
                            span = %span_name(span), error = %message,
                            "the receiver refused a single span as too large; trimmed");
                        let body = ctx.framer.frame(std::slice::from_ref(&trimmed));
                        parts.push_front(Part {
                            spans: vec![trimmed],
                            body,
                        });
                    }
                    None => ctx.dropped(
                        1,
                        DropCause::TooLargeForReceiver {
                            bytes: span.0.len(),
                            span: &span_name(span),
                            error: &message,
                        },
                    ),
                }
            }
            Err(GiveUp::Permanent(message)) => {
                ctx.dropped(n, DropCause::Refused { error: &message });
            }
            Err(GiveUp::RetriesExhausted(message)) => {
                ctx.retries_exhausted(n, Some(&message));
                // The rest of this batch goes the same way.
                if ctx.gone.is_some() {
                    for part in parts.drain(..) {
                        ctx.retries_exhausted(part.spans.len(), None);
                    }
                }
            }
        }
    }
}

/// Appends one batch as an OTLP/JSON line, retrying a failed write (a full
/// disk may get room) until `--export-retry-for`.
pub(super) async fn write_json(writer: &mut BufWriter<File>, batch: &Batch, ctx: &OutputContext) {
    if ctx.dropped_as_gone(batch.spans.len()) {
        return;
    }
    let deadline = Instant::now() + ctx.retry_for;
    let line = match ExportTraceServiceRequest::decode(batch.protobuf.as_ref())
        .map_err(|e| e.to_string())
        .and_then(|request| serde_json::to_string(&request).map_err(|e| e.to_string()))
    {
        Ok(line) => line,
        Err(e) => {
            ctx.dropped(batch.spans.len(), DropCause::NotConvertible { error: &e });
            return;
        }
    };
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let written = writer
            .write_all(line.as_bytes())
            .and_then(|()| writer.write_all(b"\n"));
        match written {
            Ok(()) => {
                ctx.exported(batch.spans.len());
                ctx.progress.succeeded(ctx.index);
                return;
            }
            Err(e) => {
                ctx.failed_attempt();
                ctx.progress.failed(ctx.index, &e.to_string());
                let now = Instant::now();
                if now >= deadline {
                    ctx.retries_exhausted(batch.spans.len(), Some(&e.to_string()));
                    return;
                }
                tracing::warn!(output = %ctx.target, error = %e, retry_in = ?backoff, "cannot write; retrying");
                tokio::time::sleep(backoff.min(deadline - now)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One output's task: its batches in order, until the batcher is done.
pub(super) async fn run_output(
    mut out: Output,
    mut queue: mpsc::Receiver<Arc<Batch>>,
    ctx: OutputContext,
) {
    while let Some(batch) = queue.recv().await {
        if !batch.spans.is_empty() {
            match &mut out {
                Output::Otlp(sender) => export_batch(sender, &batch, &ctx).await,
                Output::Json { writer, .. } => write_json(writer, &batch, &ctx).await,
                #[cfg(test)]
                Output::Scripted(receiver) => export_batch(receiver, &batch, &ctx).await,
            }
        }
        ctx.progress
            .add_finished(ctx.index, (batch.spans.len() + batch.also_finishes) as u64);
        ctx.metrics
            .export_output_queue_depth
            .get_or_create(&Metrics::output(ctx.label))
            .set(queue.len() as i64);
    }
    if let Output::Json { writer, path } = &mut out
        && let Err(e) = writer.flush()
    {
        tracing::error!(path = %path.display(), error = %e, "cannot flush output file");
    }
}

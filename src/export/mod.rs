//! Export: batches spans and writes them to every configured output (OTLP
//! over gRPC or HTTP, and/or an OTLP/JSON file).
//!
//! ```text
//! span channel ─▶ batcher ──▶ queue ─▶ output task (OTLP)       retry / split / trim
//!  (--export-      │ bounded by spans  └▶ queue ─▶ output task (OTLP/JSON file)
//!   queue-size)    │ and encoded bytes
//! ```
//!
//! The batcher frames each batch once; every output has its own bounded
//! queue and task, so a receiver that is down or slow delays only its own
//! output until its queue is full, and then holds the batcher (backpressure
//! up to the webhook: nothing is dropped for a full queue). Batches reach
//! each output in the order they were made, so a marker flowing in order
//! through the span channel (e.g. "everything before this is written") can
//! be forwarded through the same queues.
//!
//! A failed request is classified as the OTLP specification says
//! (`otlp::Failure`): retried with backoff (or after the receiver's
//! `RetryInfo` / `Retry-After`) for up to `--export-retry-for`; refused as
//! too large, split in halves down to single spans, and a single span
//! trimmed; refused for good, dropped at once. Every span not exported is
//! counted in `kascade_spans_dropped_total{output,reason}` and logged.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub mod config;
mod otlp;
pub mod trim;

use anyhow::Context;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use config::{Compression, OtlpConfig, OtlpFlags};
pub use otlp::{Failure, SendError, classify_grpc, classify_http};

use crate::metrics::Metrics;
use crate::span_model::{self, EncodedSpan, Span};
use otlp::{Accepted, Transport};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf` in OpenTelemetry's terms).
    #[value(alias = "http/protobuf")]
    Http,
}

/// Where spans go: `otlp` (the configured OTLP endpoint) or `otlp-json=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputSpec {
    Otlp,
    OtlpJson(PathBuf),
}

impl std::str::FromStr for OutputSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "otlp" {
            Ok(OutputSpec::Otlp)
        } else if let Some(p) = s.strip_prefix("otlp-json=") {
            if p.is_empty() {
                return Err("otlp-json= needs a file path".into());
            }
            Ok(OutputSpec::OtlpJson(PathBuf::from(p)))
        } else {
            Err(format!(
                "unknown output {s:?}: expected `otlp` or `otlp-json=PATH`"
            ))
        }
    }
}

/// Default bound of one export request's encoded size: half of the 4 MiB
/// gRPC message limit of Jaeger and the OpenTelemetry Collector, so a batch
/// is never refused for its size by a receiver with default settings.
pub const DEFAULT_MAX_BATCH_BYTES: usize = 2 << 20;
/// Smallest `--export-max-batch-bytes`: room for a span with its attributes.
pub const MIN_MAX_BATCH_BYTES: usize = 16 << 10;
/// Default number of batches each output may have waiting.
pub const DEFAULT_OUTPUT_QUEUE_BATCHES: usize = 8;

#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// The OTLP receiver; `None` when no output is `otlp`.
    pub otlp: Option<OtlpConfig>,
    /// Most spans per export request.
    pub batch_size: usize,
    /// Most encoded bytes per export request.
    pub max_batch_bytes: usize,
    pub batch_timeout: Duration,
    /// Spans that may wait in the span channel.
    pub queue_capacity: usize,
    /// Batches that may wait for each output.
    pub output_queue_batches: usize,
    /// How long a failing batch is retried before it is dropped (and counted).
    pub retry_for: Duration,
    /// Cap of every attribute and span-event value (`span_model`).
    pub max_value_bytes: usize,
    pub service_name: String,
}

/// Why spans were not exported: the `reason` of `kascade_spans_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A retryable failure lasted longer than `--export-retry-for`.
    RetriesExhausted,
    /// The receiver refused the request for good (HTTP 400, gRPC
    /// INVALID_ARGUMENT, unauthenticated, …).
    Rejected,
    /// The receiver took the request but rejected these spans.
    PartialRejection,
    /// Even the span trimmed to its bare attributes was too large.
    TooLarge,
}

impl DropReason {
    pub const ALL: [DropReason; 4] = [
        DropReason::RetriesExhausted,
        DropReason::Rejected,
        DropReason::PartialRejection,
        DropReason::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::RetriesExhausted => "retries_exhausted",
            DropReason::Rejected => "rejected",
            DropReason::PartialRejection => "partial_rejection",
            DropReason::TooLarge => "too_large",
        }
    }
}

/// Output labels of the export metrics.
pub const OUTPUT_LABELS: [&str; 2] = ["otlp", "otlp-json"];

/// Spans exported, over every output.
pub fn spans_exported(metrics: &Metrics) -> u64 {
    OUTPUT_LABELS
        .iter()
        .map(|o| {
            metrics
                .spans_exported
                .get_or_create(&Metrics::output(o))
                .get()
        })
        .sum()
}

/// Spans dropped, over every output and reason.
pub fn spans_dropped(metrics: &Metrics) -> u64 {
    OUTPUT_LABELS
        .iter()
        .flat_map(|o| DropReason::ALL.map(|r| (*o, r)))
        .map(|(o, r)| {
            metrics
                .spans_dropped
                .get_or_create(&Metrics::output_reason(o, r.as_str()))
                .get()
        })
        .sum()
}

enum Output {
    Otlp(otlp::OtlpSender),
    Json {
        writer: BufWriter<File>,
        path: PathBuf,
    },
    /// A receiver that answers in a scripted order (tests of timing and order).
    #[cfg(test)]
    Scripted(tests::ScriptedReceiver),
}

impl Output {
    fn label(&self) -> &'static str {
        match self {
            Output::Otlp(_) => "otlp",
            Output::Json { .. } => "otlp-json",
            #[cfg(test)]
            Output::Scripted(_) => "otlp",
        }
    }
}

fn build_outputs(
    cfg: &ExportConfig,
    specs: &[OutputSpec],
) -> anyhow::Result<Vec<(Output, String)>> {
    let mut outputs = Vec::new();
    for spec in specs {
        match spec {
            OutputSpec::Otlp => {
                let otlp = cfg
                    .otlp
                    .as_ref()
                    .context("the otlp output has no OTLP settings")?;
                outputs.push((
                    Output::Otlp(otlp::OtlpSender::new(otlp)?),
                    otlp.endpoint.clone(),
                ));
            }
            OutputSpec::OtlpJson(path) => {
                let file = File::create(path)
                    .with_context(|| format!("cannot create output file {}", path.display()))?;
                outputs.push((
                    Output::Json {
                        writer: BufWriter::new(file),
                        path: path.clone(),
                    },
                    path.display().to_string(),
                ));
            }
        }
    }
    Ok(outputs)
}

/// The resource every span is reported under: the service name Jaeger lists.
pub fn resource(service_name: &str) -> Resource {
    Resource {
        attributes: vec![span_model::kv("service.name", service_name)],
        ..Default::default()
    }
}

/// Serialises spans as one OTLP/JSON `ExportTraceServiceRequest`.
pub fn to_otlp_json(spans: Vec<Span>, resource: &Resource) -> anyhow::Result<String> {
    Ok(serde_json::to_string(&to_request(spans, resource))?)
}

/// Every span kascade writes shares one resource and one scope.
pub fn to_request(spans: Vec<Span>, resource: &Resource) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(span_model::scope()),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

pub use crate::pipeline::ExportProgress;

/// One batch, framed once into a protobuf request for every output and
/// every retry (the JSON output decodes it again). The spans stay at hand
/// for a request that must be split.
struct Batch {
    spans: Vec<EncodedSpan>,
    protobuf: Bytes,
    /// Spans taken from the queue with this batch but dropped before it
    /// (too large even when trimmed): finished along with it, in order.
    also_finishes: usize,
}

/// Frames spans encoded one by one into an encoded
/// `ExportTraceServiceRequest`, all under one resource and kascade's scope
/// (both encoded once).
struct RequestFramer {
    resource: Vec<u8>,
    scope: Vec<u8>,
}

impl RequestFramer {
    fn new(resource: &Resource) -> Self {
        Self {
            resource: resource.encode_to_vec(),
            scope: span_model::scope().encode_to_vec(),
        }
    }

    /// The encoded size of a request whose spans take `spans_len` bytes
    /// framed (each `framed_len(span.len())`).
    fn request_len(&self, spans_len: usize) -> usize {
        use span_model::wire::framed_len;
        let scope_spans_len = framed_len(self.scope.len()) + spans_len;
        let resource_spans_len = framed_len(self.resource.len()) + framed_len(scope_spans_len);
        framed_len(resource_spans_len)
    }

    /// The largest span that fits alone in a request of `max_request` bytes.
    fn max_span_len(&self, max_request: usize) -> usize {
        use span_model::wire::framed_len;
        let mut len = max_request;
        loop {
            let total = self.request_len(framed_len(len));
            if total <= max_request || len == 0 {
                break;
            }
            len = len.saturating_sub(total - max_request);
        }
        // A length prefix one byte shorter may leave room for a byte more.
        while self.request_len(framed_len(len + 1)) <= max_request {
            len += 1;
        }
        len
    }

    fn frame(&self, spans: &[EncodedSpan]) -> Bytes {
        use span_model::wire::{bytes, framed_len, len_prefix};
        let scope_spans_len = framed_len(self.scope.len())
            + spans.iter().map(|s| framed_len(s.0.len())).sum::<usize>();
        let resource_spans_len = framed_len(self.resource.len()) + framed_len(scope_spans_len);
        let mut out = Vec::with_capacity(framed_len(resource_spans_len));
        // ExportTraceServiceRequest.resource_spans (1) → ResourceSpans.resource
        // (1), .scope_spans (2) → ScopeSpans.scope (1), .spans (2).
        len_prefix(&mut out, 1, resource_spans_len);
        bytes(&mut out, 1, &self.resource);
        len_prefix(&mut out, 2, scope_spans_len);
        bytes(&mut out, 1, &self.scope);
        for s in spans {
            bytes(&mut out, 2, &s.0);
        }
        out.into()
    }
}

/// Collects spans into batches bounded by count and by encoded bytes and
/// hands each batch to every output's queue.
struct Batcher {
    framer: Arc<RequestFramer>,
    max_spans: usize,
    max_bytes: usize,
    max_span_len: usize,
    spans: Vec<EncodedSpan>,
    /// Sum of the framed lengths of `spans`.
    spans_len: usize,
    /// Spans dropped since the last batch (see `Batch::also_finishes`).
    dropped_since_flush: usize,
    queues: Vec<(&'static str, mpsc::Sender<Arc<Batch>>)>,
    progress: Arc<ExportProgress>,
    metrics: Arc<Metrics>,
}

impl Batcher {
    /// Adds a span, first sending the batch if the span would make it too
    /// large, and after it if the batch is full. A span too large for any
    /// batch is trimmed to fit.
    async fn add(&mut self, span: EncodedSpan) {
        let Some(span) = self.fit(span) else {
            self.dropped_since_flush += 1;
            return;
        };
        let framed = span_model::wire::framed_len(span.0.len());
        if !self.spans.is_empty()
            && self.framer.request_len(self.spans_len + framed) > self.max_bytes
        {
            self.flush().await;
        }
        self.spans.push(span);
        self.spans_len += framed;
        if self.spans.len() >= self.max_spans {
            self.flush().await;
        }
    }

    fn fit(&self, span: EncodedSpan) -> Option<EncodedSpan> {
        if span.0.len() <= self.max_span_len {
            return Some(span);
        }
        match trim::trim_span(&span, self.max_span_len) {
            Some((trimmed, report)) => {
                self.count_trimmed("batch_bytes", &report);
                tracing::warn!(
                    bytes = report.from_bytes,
                    max_batch_bytes = self.max_bytes,
                    events_dropped = report.events_dropped,
                    values_cut = report.values_cut,
                    links_dropped = report.links_dropped,
                    span = %span_name(&trimmed),
                    "span larger than --export-max-batch-bytes: trimmed to fit"
                );
                Some(trimmed)
            }
            None => {
                for (label, _) in &self.queues {
                    self.metrics
                        .spans_dropped
                        .get_or_create(&Metrics::output_reason(
                            label,
                            DropReason::TooLarge.as_str(),
                        ))
                        .inc();
                }
                tracing::error!(
                    bytes = span.0.len(),
                    max_batch_bytes = self.max_bytes,
                    span = %span_name(&span),
                    "span too large for --export-max-batch-bytes even without its events and values: dropped"
                );
                None
            }
        }
    }

    fn count_trimmed(&self, reason: &str, report: &trim::Trimmed) {
        count_trimmed(&self.metrics, reason, report);
    }

    /// Nothing waits to be sent or accounted for.
    fn is_idle(&self) -> bool {
        self.spans.is_empty() && self.dropped_since_flush == 0
    }

    async fn flush(&mut self) {
        if self.is_idle() {
            return;
        }
        let spans = std::mem::take(&mut self.spans);
        self.spans_len = 0;
        let batch = Arc::new(Batch {
            protobuf: self.framer.frame(&spans),
            spans,
            also_finishes: std::mem::take(&mut self.dropped_since_flush),
        });
        for (index, (label, queue)) in self.queues.iter().enumerate() {
            // A full queue waits here: backpressure, not loss.
            if queue.send(batch.clone()).await.is_err() {
                self.progress
                    .add_finished(index, (batch.spans.len() + batch.also_finishes) as u64);
                // Only when that output's task ended abnormally (a panic).
                self.metrics
                    .spans_dropped
                    .get_or_create(&Metrics::output_reason(
                        label,
                        DropReason::Rejected.as_str(),
                    ))
                    .inc_by(batch.spans.len() as u64);
                tracing::error!(
                    output = label,
                    spans = batch.spans.len(),
                    "the output has stopped; batch dropped"
                );
            }
            self.metrics
                .export_output_queue_depth
                .get_or_create(&Metrics::output(label))
                .set((queue.max_capacity() - queue.capacity()) as i64);
        }
    }
}

fn count_trimmed(metrics: &Metrics, reason: &str, report: &trim::Trimmed) {
    metrics
        .spans_trimmed
        .get_or_create(&Metrics::reason(reason))
        .inc();
    metrics
        .span_events_trimmed
        .inc_by(report.events_dropped as u64);
}

/// The span's name, for logs.
fn span_name(span: &EncodedSpan) -> String {
    Span::decode(span.0.as_ref())
        .map(|s| s.name)
        .unwrap_or_default()
}

/// What one output needs to write and count.
struct OutputContext {
    label: &'static str,
    /// This output's place in `ExportProgress`.
    index: usize,
    progress: Arc<ExportProgress>,
    target: String,
    retry_for: Duration,
    framer: Arc<RequestFramer>,
    metrics: Arc<Metrics>,
}

impl OutputContext {
    fn exported(&self, n: usize) {
        self.metrics
            .spans_exported
            .get_or_create(&Metrics::output(self.label))
            .inc_by(n as u64);
    }

    fn dropped(&self, reason: DropReason, n: usize) {
        self.metrics
            .spans_dropped
            .get_or_create(&Metrics::output_reason(self.label, reason.as_str()))
            .inc_by(n as u64);
    }

    fn failed_attempt(&self) {
        self.metrics
            .export_errors
            .get_or_create(&Metrics::output(self.label))
            .inc();
    }
}

const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why a request was given up.
enum GiveUp {
    TooLarge(String),
    Permanent(String),
    RetriesExhausted(String),
}

/// Sends `body` until it is accepted, refused for good, or retryable
/// failures outlast `deadline`.
async fn send_with_retries<T: Transport>(
    transport: &mut T,
    body: &Bytes,
    spans: usize,
    deadline: Instant,
    ctx: &OutputContext,
) -> Result<Accepted, GiveUp> {
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let e = match transport.send(body.clone()).await {
            Ok(accepted) => return Ok(accepted),
            Err(e) => e,
        };
        ctx.failed_attempt();
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
struct Part {
    spans: Vec<EncodedSpan>,
    body: Bytes,
}

/// Exports one batch over OTLP: retried, split or trimmed as the receiver's
/// answers require; every span ends exported or counted as dropped.
async fn export_batch<T: Transport>(transport: &mut T, batch: &Batch, ctx: &OutputContext) {
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
                    ctx.dropped(DropReason::PartialRejection, rejected);
                    tracing::error!(output = %ctx.target, rejected, message = %accepted.message,
                        "the OTLP receiver accepted a request but rejected some of its spans");
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
                        count_trimmed(&ctx.metrics, "receiver_limit", &report);
                        tracing::warn!(output = %ctx.target, bytes = span.0.len(), events_dropped = report.events_dropped,
                            span = %span_name(span), error = %message,
                            "the receiver refused a single span as too large; trimmed");
                        let body = ctx.framer.frame(std::slice::from_ref(&trimmed));
                        parts.push_front(Part {
                            spans: vec![trimmed],
                            body,
                        });
                    }
                    None => {
                        ctx.dropped(DropReason::TooLarge, 1);
                        tracing::error!(output = %ctx.target, bytes = span.0.len(), span = %span_name(span), error = %message,
                            "the receiver refuses even the trimmed span as too large; dropped");
                    }
                }
            }
            Err(GiveUp::Permanent(message)) => {
                ctx.dropped(DropReason::Rejected, n);
                tracing::error!(output = %ctx.target, spans = n, error = %message,
                    "the receiver refused the request for good (not retried); spans dropped");
            }
            Err(GiveUp::RetriesExhausted(message)) => {
                ctx.dropped(DropReason::RetriesExhausted, n);
                tracing::error!(output = %ctx.target, spans = n, error = %message,
                    "export kept failing for {:?} (--export-retry-for); spans dropped", ctx.retry_for);
            }
        }
    }
}

/// Appends one batch as an OTLP/JSON line, retrying a failed write (a full
/// disk may get room) until `--export-retry-for`.
async fn write_json(writer: &mut BufWriter<File>, batch: &Batch, ctx: &OutputContext) {
    let deadline = Instant::now() + ctx.retry_for;
    let line = match ExportTraceServiceRequest::decode(batch.protobuf.as_ref())
        .map_err(anyhow::Error::from)
        .and_then(|request| Ok(serde_json::to_string(&request)?))
    {
        Ok(line) => line,
        Err(e) => {
            ctx.dropped(DropReason::Rejected, batch.spans.len());
            tracing::error!(output = %ctx.target, error = %e, "cannot convert a batch to OTLP/JSON; dropped");
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
                return;
            }
            Err(e) => {
                ctx.failed_attempt();
                let now = Instant::now();
                if now >= deadline {
                    ctx.dropped(DropReason::RetriesExhausted, batch.spans.len());
                    tracing::error!(output = %ctx.target, spans = batch.spans.len(), error = %e,
                        "writing kept failing for {:?}; batch dropped", ctx.retry_for);
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
async fn run_output(mut out: Output, mut queue: mpsc::Receiver<Arc<Batch>>, ctx: OutputContext) {
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

/// Starts the export tasks. They end, after exporting what is queued, when
/// every sender is dropped or `stop` fires (once nothing more will be sent).
pub fn start(
    cfg: ExportConfig,
    specs: &[OutputSpec],
    metrics: Arc<Metrics>,
    progress: Arc<ExportProgress>,
) -> anyhow::Result<Started> {
    let outputs = build_outputs(&cfg, specs)?;
    Ok(start_outputs(cfg, outputs, metrics, progress))
}

pub type Started = (
    mpsc::Sender<EncodedSpan>,
    crate::pipeline::Shutdown,
    JoinHandle<()>,
);

fn start_outputs(
    cfg: ExportConfig,
    outputs: Vec<(Output, String)>,
    metrics: Arc<Metrics>,
    progress: Arc<ExportProgress>,
) -> Started {
    progress.set_outputs(outputs.len());
    span_model::set_max_value_bytes(cfg.max_value_bytes);
    let framer = Arc::new(RequestFramer::new(&resource(&cfg.service_name)));
    let mut queues = Vec::with_capacity(outputs.len());
    let mut tasks = Vec::with_capacity(outputs.len());
    for (index, (out, target)) in outputs.into_iter().enumerate() {
        let label = out.label();
        let (tx, rx) = mpsc::channel(cfg.output_queue_batches.max(1));
        let ctx = OutputContext {
            label,
            index,
            progress: progress.clone(),
            target,
            retry_for: cfg.retry_for,
            framer: framer.clone(),
            metrics: metrics.clone(),
        };
        tasks.push((label, tokio::spawn(run_output(out, rx, ctx))));
        queues.push((label, tx));
    }
    let (tx, mut rx) = mpsc::channel::<EncodedSpan>(cfg.queue_capacity.max(1));
    let (stop, mut stop_rx) = crate::pipeline::Shutdown::new();
    let mut batcher = Batcher {
        max_span_len: framer.max_span_len(cfg.max_batch_bytes),
        framer,
        max_spans: cfg.batch_size.max(1),
        max_bytes: cfg.max_batch_bytes,
        spans: Vec::new(),
        spans_len: 0,
        dropped_since_flush: 0,
        queues,
        progress: progress.clone(),
        metrics: metrics.clone(),
    };
    let batch_timeout = cfg.batch_timeout;
    let handle = tokio::spawn(async move {
        // Armed when a batch gets its first span: no span waits longer.
        let deadline = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                biased;
                _ = &mut deadline, if !batcher.is_idle() => batcher.flush().await,
                got = rx.recv() => match got {
                    Some(span) => {
                        let was_idle = batcher.is_idle();
                        batcher.add(span).await;
                        if was_idle || batcher.spans.len() == 1 {
                            deadline.as_mut().reset(Instant::now() + batch_timeout);
                        }
                        metrics.export_queue_depth.set(rx.len() as i64);
                    }
                    None => break,
                },
                _ = &mut stop_rx, if !stop_rx.is_terminated() => rx.close(),
            }
        }
        batcher.flush().await;
        metrics.export_queue_depth.set(0);
        // The outputs finish what is queued once their queues close.
        drop(batcher);
        for (label, task) in tasks {
            if let Err(e) = task.await {
                tracing::error!(output = label, error = %e, "an export output failed");
            }
        }
    });
    (tx, stop, handle)
}

#[cfg(test)]
mod receivers;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ObjectRef, ObjectWindow};
    use crate::span_model::{AuditWrite, LinkFields};
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn framed_requests_decode_to_the_spans_under_one_resource_and_scope() {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_123);
        let pod = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 1_800_000_000,
        };
        let node = ObjectWindow {
            object: ObjectRef::new("c", "", "nodes", "", "n"),
            window_start: 1_800_000_000,
        };
        let mut write = crate::span_model::audit_span(
            &pod,
            &AuditWrite {
                audit_id: "a-1",
                user: "system:kube-scheduler",
                impersonated_user: None,
                user_agent: "kube-scheduler/v1.36.3",
                verb: "create",
                subresource: "binding",
                code: 409,
                source_ip: "127.0.0.1",
                old_rv: "",
                new_rv: "",
                error: Some("Operation cannot be fulfilled".into()),
                start: at,
                end: at + Duration::from_millis(3),
            },
        );
        write.event(
            "diff",
            at,
            &[("diff.path", "spec.nodeName"), ("diff.new", "\"n\"")],
        );
        write.attr_int("kascade.diff.truncated", 7);
        let link = LinkFields {
            target: &node,
            role: "parent",
            class: "node",
            at,
        };
        let spans = vec![
            crate::span_model::object_span(&pod, "uid-1", at).finish(),
            write.finish(),
            crate::span_model::link_span(&pod, &link, 42).finish(),
        ];
        let resource = resource("kascade-test");
        let framed = RequestFramer::new(&resource).frame(&spans);
        let decoded = ExportTraceServiceRequest::decode(framed.as_ref()).unwrap();
        let expected = to_request(spans.iter().map(EncodedSpan::decode).collect(), &resource);
        assert_eq!(decoded, expected);
        let s = &decoded.resource_spans[0].scope_spans[0].spans;
        assert_eq!(s[1].events.len(), 1);
        assert_eq!(
            s[1].attributes.last().unwrap().key,
            "kascade.diff.truncated"
        );
        assert_eq!(
            s[1].status.as_ref().unwrap().message,
            "Operation cannot be fulfilled"
        );
        assert_eq!(s[2].links[0].span_id, node.span_id().to_bytes());
        assert_eq!(s[0].parent_span_id, Vec::<u8>::new());
        assert_eq!(s[1].parent_span_id, pod.span_id().to_bytes());
    }

    // ---- Helpers: spans as the processor writes them, and a receiver that
    // answers in a scripted order. The receiver is a fake so that timing
    // (retry delays, deadlines) runs on tokio's paused clock and order is
    // exact; the same logic against real gRPC and HTTP receivers is tested
    // in `receivers.rs`.

    pub(super) const JAEGER_GRPC_LIMIT: usize = 4 << 20;

    pub(super) fn window(resource: &str, name: &str) -> ObjectWindow {
        ObjectWindow {
            object: ObjectRef::new("c", "", resource, "ns", name),
            window_start: 1_800_000_000,
        }
    }

    /// The object span of a small ConfigMap, as a create makes it.
    pub(super) fn small_span(i: usize) -> EncodedSpan {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_100);
        crate::span_model::object_span(&window("configmaps", &format!("small-{i}")), "uid", at)
            .finish()
    }

    /// The audit span of an update of ConfigMap `name` that changed
    /// `changes` keys, each from and to a value of `value_len` bytes.
    pub(super) fn big_update(
        name: &str,
        audit_id: &str,
        changes: usize,
        value_len: usize,
    ) -> EncodedSpan {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_100);
        let mut s = crate::span_model::audit_span(
            &window("configmaps", name),
            &AuditWrite {
                audit_id,
                user: "kascade-e2e-admin",
                impersonated_user: None,
                user_agent: "kubectl/v1.36.3",
                verb: "update",
                subresource: "",
                code: 200,
                source_ip: "127.0.0.1",
                old_rv: "1",
                new_rv: "2",
                error: None,
                start: at,
                end: at,
            },
        );
        let (old, new) = ("o".repeat(value_len), "n".repeat(value_len));
        for i in 0..changes {
            let path = format!("data.key{i:03}");
            s.event(
                crate::span_model::EVENT_DIFF,
                at,
                &[
                    ("diff.op", "replace"),
                    ("diff.path", &path),
                    ("diff.old", &old),
                    ("diff.new", &new),
                ],
            );
        }
        s.finish()
    }

    pub(super) fn test_config() -> ExportConfig {
        ExportConfig {
            otlp: None,
            batch_size: 2048,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            batch_timeout: Duration::from_secs(1),
            queue_capacity: 10_000,
            output_queue_batches: DEFAULT_OUTPUT_QUEUE_BATCHES,
            retry_for: Duration::from_secs(300),
            // Tests never change the process-wide cap: spans written by
            // other tests running at the same time depend on it.
            max_value_bytes: crate::span_model::DEFAULT_MAX_VALUE_BYTES,
            service_name: "kascade-test".into(),
        }
    }

    pub(super) fn int_attr(
        attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
        key: &str,
    ) -> Option<i64> {
        crate::frontend::raw::int_attr(attrs, key)
    }

    /// What a scripted receiver saw.
    #[derive(Default)]
    pub(super) struct ReceiverLog {
        pub attempts: usize,
        pub request_sizes: Vec<usize>,
        pub spans: Vec<Span>,
    }

    /// Refuses requests over `limit` as Jaeger (grpc-go) does, answers the
    /// scripted failures first, and may hold every request until the test
    /// opens `gate`.
    pub(super) struct ScriptedReceiver {
        limit: usize,
        script: VecDeque<SendError>,
        gate: Option<Arc<tokio::sync::Semaphore>>,
        log: Arc<std::sync::Mutex<ReceiverLog>>,
    }

    impl ScriptedReceiver {
        pub(super) fn new(limit: usize) -> (Self, Arc<std::sync::Mutex<ReceiverLog>>) {
            let log = Arc::new(std::sync::Mutex::new(ReceiverLog::default()));
            (
                Self {
                    limit,
                    script: VecDeque::new(),
                    gate: None,
                    log: log.clone(),
                },
                log,
            )
        }
    }

    impl Transport for ScriptedReceiver {
        async fn send(&mut self, body: Bytes) -> Result<Accepted, SendError> {
            self.log.lock().unwrap().attempts += 1;
            if let Some(gate) = &self.gate {
                gate.acquire().await.unwrap().forget();
            }
            if let Some(e) = self.script.pop_front() {
                return Err(e);
            }
            if body.len() > self.limit {
                // grpc-go's answer to a message over its limit.
                return Err(classify_grpc(&tonic::Status::resource_exhausted(format!(
                    "grpc: received message larger than max ({} vs. {})",
                    body.len(),
                    self.limit
                ))));
            }
            let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
            let mut log = self.log.lock().unwrap();
            log.request_sizes.push(body.len());
            log.spans
                .extend(crate::frontend::raw::spans_of(request.resource_spans));
            Ok(Accepted::default())
        }
    }

    fn exported(m: &Metrics, output: &str) -> u64 {
        m.spans_exported
            .get_or_create(&Metrics::output(output))
            .get()
    }

    fn dropped(m: &Metrics, output: &str, reason: DropReason) -> u64 {
        m.spans_dropped
            .get_or_create(&Metrics::output_reason(output, reason.as_str()))
            .get()
    }

    /// Runs the exporter with `outputs` over `spans` and waits until it has
    /// written everything.
    async fn export_all(
        cfg: ExportConfig,
        outputs: Vec<(Output, String)>,
        spans: Vec<EncodedSpan>,
    ) -> Arc<Metrics> {
        let metrics = Arc::new(Metrics::default());
        let (tx, _stop, done) = start_outputs(cfg, outputs, metrics.clone(), Default::default());
        for s in spans {
            tx.send(s).await.unwrap();
        }
        drop(tx);
        done.await.unwrap();
        metrics
    }

    fn names_and_markers(spans: &[Span]) -> Vec<(String, Option<i64>, Option<i64>)> {
        let mut v: Vec<_> = spans
            .iter()
            .map(|s| {
                let truncated_from = s
                    .events
                    .first()
                    .and_then(|e| int_attr(&e.attributes, "diff.new.truncated_from"));
                (
                    crate::frontend::raw::string_attr(&s.attributes, "audit.id")
                        .or(crate::frontend::raw::string_attr(&s.attributes, "name"))
                        .unwrap_or("")
                        .to_string(),
                    truncated_from,
                    int_attr(&s.attributes, trim::TRIMMED_EVENTS_DROPPED),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Issue 10, defect 2: three updates of a 1.5 MB ConfigMap and 50 small
    /// creates in one batch made a 9.1 MB request; Jaeger refused it
    /// (ResourceExhausted, larger than max 4194304), the exporter retried it
    /// for --export-retry-for and then dropped all 53 spans.
    #[tokio::test(start_paused = true)]
    async fn updates_of_a_huge_configmap_are_capped_and_the_spans_around_them_exported() {
        let mut spans: Vec<EncodedSpan> = (0..25).map(small_span).collect();
        for i in 0..3 {
            spans.push(big_update("big", &format!("update-{i}"), 1, 1_500_000));
        }
        spans.extend((25..50).map(small_span));
        let (receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        let started = Instant::now();
        let metrics = export_all(
            test_config(),
            vec![(Output::Scripted(receiver), "jaeger".into())],
            spans,
        )
        .await;
        let log = log.lock().unwrap();
        assert_eq!(log.spans.len(), 53, "every span arrives");
        assert_eq!(log.attempts, log.request_sizes.len(), "no request refused");
        assert!(
            log.request_sizes
                .iter()
                .all(|&n| n <= DEFAULT_MAX_BATCH_BYTES)
        );
        let got = names_and_markers(&log.spans);
        for i in 0..3 {
            assert!(
                got.contains(&(format!("update-{i}"), Some(1_500_000), None)),
                "update-{i}: {got:?}"
            );
        }
        assert_eq!(exported(&metrics, "otlp"), 53);
        assert_eq!(spans_dropped(&metrics), 0);
        // Within the batch timeout, not after minutes of retries.
        assert!(started.elapsed() <= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_span_too_large_for_any_batch_is_trimmed_and_marked_not_dropped() {
        // 100 changed keys of 30 KB each: every value is under the cap, the
        // span is 6 MB.
        let mut spans: Vec<EncodedSpan> = (0..50).map(small_span).collect();
        spans.insert(10, big_update("many-keys", "update-many", 100, 30_000));
        let (receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        let metrics = export_all(
            test_config(),
            vec![(Output::Scripted(receiver), "jaeger".into())],
            spans,
        )
        .await;
        let log = log.lock().unwrap();
        assert_eq!(log.spans.len(), 51);
        assert_eq!(log.attempts, log.request_sizes.len(), "no request refused");
        let big = log
            .spans
            .iter()
            .find(|s| s.name == "kascade-e2e-admin update")
            .unwrap();
        let dropped_events = int_attr(&big.attributes, trim::TRIMMED_EVENTS_DROPPED).unwrap();
        assert!(dropped_events > 0);
        assert_eq!(big.events.len() as i64 + dropped_events, 100);
        assert_eq!(big.dropped_events_count as i64, dropped_events);
        assert!(int_attr(&big.attributes, trim::TRIMMED_FROM_BYTES).unwrap() > 6_000_000);
        assert_eq!(
            metrics
                .spans_trimmed
                .get_or_create(&Metrics::reason("batch_bytes"))
                .get(),
            1
        );
        assert_eq!(metrics.span_events_trimmed.get(), dropped_events as u64);
        assert_eq!(spans_dropped(&metrics), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_receiver_with_a_smaller_limit_gets_halves_down_to_trimmed_single_spans() {
        // The receiver takes 200 KB; kascade's bound is 2 MiB: batches are
        // refused as too large, split, and the 300 KB spans trimmed.
        let mut spans: Vec<EncodedSpan> = (0..40).map(small_span).collect();
        for i in 0..3 {
            spans.insert(i * 13, big_update("big", &format!("update-{i}"), 5, 30_000));
        }
        let (receiver, log) = ScriptedReceiver::new(200_000);
        let metrics = export_all(
            test_config(),
            vec![(Output::Scripted(receiver), "collector".into())],
            spans,
        )
        .await;
        let log = log.lock().unwrap();
        assert_eq!(log.spans.len(), 43);
        assert!(log.request_sizes.iter().all(|&n| n <= 200_000));
        // Order is kept through the splits.
        let order: Vec<&str> = log
            .spans
            .iter()
            .filter_map(|s| crate::frontend::raw::string_attr(&s.attributes, "audit.id"))
            .collect();
        assert_eq!(order, ["update-0", "update-1", "update-2"]);
        for s in log.spans.iter().filter(|s| !s.events.is_empty()) {
            assert!(int_attr(&s.attributes, trim::TRIMMED_EVENTS_DROPPED).unwrap() > 0);
        }
        assert!(
            metrics
                .export_splits
                .get_or_create(&Metrics::output("otlp"))
                .get()
                > 0
        );
        assert_eq!(
            metrics
                .spans_trimmed
                .get_or_create(&Metrics::reason("receiver_limit"))
                .get(),
            3
        );
        assert_eq!(spans_dropped(&metrics), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_refusals_are_dropped_at_once_and_counted_with_their_reason() {
        let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        receiver.script.push_back(classify_http(
            400,
            None,
            "bad request",
            std::time::SystemTime::now(),
        ));
        let started = Instant::now();
        let metrics = export_all(
            test_config(),
            vec![(Output::Scripted(receiver), "r".into())],
            (0..7).map(small_span).collect(),
        )
        .await;
        assert_eq!(log.lock().unwrap().attempts, 1, "not retried");
        assert_eq!(dropped(&metrics, "otlp", DropReason::Rejected), 7);
        assert_eq!(exported(&metrics, "otlp"), 0);
        assert!(started.elapsed() <= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_failures_wait_as_long_as_the_receiver_asks() {
        let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        let now = std::time::SystemTime::now();
        receiver
            .script
            .push_back(classify_http(503, Some("7"), "", now));
        receiver
            .script
            .push_back(classify_http(429, Some("3"), "", now));
        receiver.script.push_back(classify_http(502, None, "", now));
        let started = Instant::now();
        let metrics = export_all(
            test_config(),
            vec![(Output::Scripted(receiver), "r".into())],
            (0..5).map(small_span).collect(),
        )
        .await;
        assert_eq!(log.lock().unwrap().attempts, 4);
        assert_eq!(exported(&metrics, "otlp"), 5);
        // 7 s and 3 s as asked, then the backoff, which doubled on each
        // failure from 100 ms: 400 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(10_400));
        assert_eq!(
            metrics
                .export_errors
                .get_or_create(&Metrics::output("otlp"))
                .get(),
            3
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_end_at_the_deadline_and_the_spans_are_counted() {
        let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        for _ in 0..1000 {
            receiver.script.push_back(SendError {
                failure: Failure::Retryable { after: None },
                message: "connection refused".into(),
            });
        }
        let mut cfg = test_config();
        cfg.retry_for = Duration::from_secs(60);
        let started = Instant::now();
        let metrics = export_all(
            cfg,
            vec![(Output::Scripted(receiver), "r".into())],
            (0..4).map(small_span).collect(),
        )
        .await;
        assert_eq!(dropped(&metrics, "otlp", DropReason::RetriesExhausted), 4);
        // Attempts at 0, then after backoffs of 0.1, 0.2 … 3.2 s (6.3 s),
        // then every 5 s up to 56.3 s, and a last one at the deadline.
        assert_eq!(log.lock().unwrap().attempts, 18);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn rejected_spans_of_an_accepted_request_are_counted() {
        struct PartlyRejecting;
        impl Transport for PartlyRejecting {
            async fn send(&mut self, _: Bytes) -> Result<Accepted, SendError> {
                Ok(Accepted {
                    rejected_spans: 2,
                    message: "2 spans without a name".into(),
                })
            }
        }
        let metrics = Arc::new(Metrics::default());
        let ctx = OutputContext {
            label: "otlp",
            index: 0,
            progress: Default::default(),
            target: "r".into(),
            retry_for: Duration::from_secs(1),
            framer: Arc::new(RequestFramer::new(&resource("t"))),
            metrics: metrics.clone(),
        };
        let spans: Vec<EncodedSpan> = (0..5).map(small_span).collect();
        let batch = Batch {
            protobuf: ctx.framer.frame(&spans),
            spans,
            also_finishes: 0,
        };
        export_batch(&mut PartlyRejecting, &batch, &ctx).await;
        assert_eq!(exported(&metrics, "otlp"), 3);
        assert_eq!(dropped(&metrics, "otlp", DropReason::PartialRejection), 2);
    }

    /// One output's failure never blocks another: while the OTLP receiver
    /// holds every request, the file output writes all spans.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_receiver_does_not_hold_up_the_file_output() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        receiver.gate = Some(gate.clone());
        let outputs = vec![
            (Output::Scripted(receiver), "jaeger".into()),
            (
                Output::Json {
                    writer: BufWriter::new(File::create(&path).unwrap()),
                    path: path.clone(),
                },
                path.display().to_string(),
            ),
        ];
        let metrics = Arc::new(Metrics::default());
        let mut cfg = test_config();
        cfg.batch_size = 10;
        let (tx, _stop, done) = start_outputs(cfg, outputs, metrics.clone(), Default::default());
        for i in 0..30 {
            tx.send(small_span(i)).await.unwrap();
        }
        drop(tx);
        // Virtual time only moves while every task waits.
        let mut waited = 0;
        while exported(&metrics, "otlp-json") < 30 {
            waited += 1;
            assert!(
                waited < 10_000,
                "the file output waits for the stalled receiver"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(exported(&metrics, "otlp"), 0);
        assert_eq!(log.lock().unwrap().attempts, 1);
        gate.add_permits(100);
        done.await.unwrap();
        assert_eq!(exported(&metrics, "otlp"), 30);
        let lines = std::fs::read_to_string(&path).unwrap();
        assert_eq!(lines.lines().count(), 3);
    }

    /// A full output queue holds the batcher and then the span channel, so
    /// the processor waits (and the webhook answers 429): nothing is lost.
    #[tokio::test(start_paused = true)]
    async fn a_full_output_queue_is_backpressure_not_loss() {
        let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        receiver.gate = Some(gate.clone());
        let metrics = Arc::new(Metrics::default());
        let mut cfg = test_config();
        cfg.batch_size = 1;
        cfg.output_queue_batches = 1;
        cfg.queue_capacity = 2;
        let (tx, _stop, done) = start_outputs(
            cfg,
            vec![(Output::Scripted(receiver), "r".into())],
            metrics.clone(),
            Default::default(),
        );
        // In the receiver (1), in the output queue (1), in the batcher (1),
        // in the span channel (2): the sixth waits.
        let mut sent = 0;
        for i in 0..6 {
            match tx.try_send(small_span(i)) {
                Ok(()) => sent += 1,
                Err(mpsc::error::TrySendError::Full(_)) => break,
                Err(e) => panic!("{e}"),
            }
            // Virtual time moves once every task waits: the pipeline has
            // taken what it can.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(sent, 5);
        assert_eq!(
            metrics
                .export_output_queue_depth
                .get_or_create(&Metrics::output("otlp"))
                .get(),
            1
        );
        gate.add_permits(1000);
        tx.send(small_span(5)).await.unwrap();
        drop(tx);
        done.await.unwrap();
        assert_eq!(log.lock().unwrap().spans.len(), 6);
        assert_eq!(spans_dropped(&metrics), 0);
    }

    #[test]
    fn batches_are_bounded_by_bytes_and_keep_the_order_of_spans() {
        let framer = Arc::new(RequestFramer::new(&resource("t")));
        let max_bytes = 300_000;
        let (tx, mut rx) = mpsc::channel(100);
        let mut batcher = Batcher {
            max_span_len: framer.max_span_len(max_bytes),
            framer,
            max_spans: 2048,
            max_bytes,
            spans: Vec::new(),
            spans_len: 0,
            dropped_since_flush: 0,
            queues: vec![("otlp", tx)],
            progress: Default::default(),
            metrics: Arc::new(Metrics::default()),
        };
        let spans: Vec<EncodedSpan> = (0..60)
            .map(|i| {
                if i % 7 == 0 {
                    big_update("b", &format!("u{i}"), 1, 40_000)
                } else {
                    small_span(i)
                }
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            for s in spans.clone() {
                batcher.add(s).await;
            }
            batcher.flush().await;
        });
        drop(batcher);
        let mut seen = Vec::new();
        let mut batches = 0;
        while let Ok(b) = rx.try_recv() {
            batches += 1;
            assert!(
                b.protobuf.len() <= max_bytes,
                "{} > {max_bytes}",
                b.protobuf.len()
            );
            let decoded = ExportTraceServiceRequest::decode(b.protobuf.as_ref()).unwrap();
            assert_eq!(
                decoded.resource_spans[0].scope_spans[0].spans.len(),
                b.spans.len()
            );
            seen.extend(b.spans.iter().map(|s| s.0.clone()));
        }
        assert!(batches >= 2);
        assert_eq!(seen, spans.iter().map(|s| s.0.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn the_largest_single_span_fills_a_request_exactly() {
        let framer = RequestFramer::new(&resource("kascade"));
        for max in [16 << 10, 100_000, 2 << 20, 4 << 20] {
            let len = framer.max_span_len(max);
            let framed = span_model::wire::framed_len(len);
            assert!(framer.request_len(framed) <= max);
            assert!(framer.request_len(span_model::wire::framed_len(len + 1)) > max);
        }
    }
    #[tokio::test(start_paused = true)]
    async fn progress_counts_every_span_once_all_outputs_are_done_with_it() {
        // Two outputs, one of them a receiver that refuses everything (its
        // spans are dropped and counted, so they are done too), and a span
        // too large even when trimmed (dropped by the batcher).
        let mut cfg = test_config();
        cfg.max_batch_bytes = 4096;
        let progress = Arc::new(ExportProgress::default());
        let metrics = Arc::new(Metrics::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let (refusing, _) = ScriptedReceiver::new(0);
        let outputs = vec![
            (
                Output::Json {
                    writer: BufWriter::new(File::create(&path).unwrap()),
                    path: path.clone(),
                },
                path.display().to_string(),
            ),
            (Output::Scripted(refusing), "refusing".into()),
        ];
        let (tx, stop, done) = start_outputs(cfg, outputs, metrics.clone(), progress.clone());
        assert_eq!(progress.finished(), 0);
        let mut unfit = small_span(0);
        unfit.0 = vec![0x0a; 1 << 20].into();
        let spans: Vec<EncodedSpan> = (1..=20).map(small_span).chain([unfit]).collect();
        let n = spans.len() as u64;
        for s in spans {
            tx.send(s).await.unwrap();
            progress.add_sent(1);
        }
        // Paused clock: a wait that could never end fails at once.
        tokio::time::timeout(
            Duration::from_secs(3600),
            progress.wait_finished(progress.sent()),
        )
        .await
        .expect("some spans were never counted as done");
        assert_eq!(progress.finished(), n);
        stop.close();
        drop(tx);
        done.await.unwrap();
    }
}

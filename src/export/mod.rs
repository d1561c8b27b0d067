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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod batcher;
pub(crate) mod config;
mod failure;
mod forward;
mod otlp;
mod output;
pub(crate) mod trim;

use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub(crate) use config::Compression;
pub(crate) use config::OtlpConfig;
pub(crate) use failure::Failure;
pub(crate) use forward::start_forwarder;
pub(crate) use otlp::grpc_channel;

use crate::metrics::{ExportOutput, Metrics};
#[cfg(feature = "test-support")]
use crate::span_model::Span;
use crate::span_model::{self, EncodedSpan};
use batcher::{Batcher, RequestFramer};
use output::Output;
use output::{OutputContext, build_outputs, run_output};

/// The OTLP transport of export requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf` in OpenTelemetry's terms).
    #[value(alias = "http/protobuf")]
    Http,
}

/// Where spans go: `otlp` (the configured OTLP endpoint) or `otlp-json=PATH`;
/// or `changelog=PATH`: not spans but one JSON line per change (see
/// `analysis::changelog`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputSpec {
    /// The configured OTLP endpoint.
    Otlp,
    /// OTLP/JSON lines written to this file.
    OtlpJson(PathBuf),
    /// One JSON line per change written to this file.
    Changelog(PathBuf),
}

impl OutputSpec {
    /// Whether spans are sent to it (a change log gets change records).
    pub fn takes_spans(&self) -> bool {
        !matches!(self, OutputSpec::Changelog(_))
    }
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
        } else if let Some(p) = s.strip_prefix("changelog=") {
            if p.is_empty() {
                return Err("changelog= needs a file path".into());
            }
            Ok(OutputSpec::Changelog(PathBuf::from(p)))
        } else {
            Err(format!(
                "unknown output {s:?}: expected `otlp`, `otlp-json=PATH` or `changelog=PATH`"
            ))
        }
    }
}

/// Default bound of one export request's encoded size: half of the 4 MiB
/// gRPC message limit of Jaeger and the OpenTelemetry Collector, so a batch
/// is never refused for its size by a receiver with default settings.
pub(crate) const DEFAULT_MAX_BATCH_BYTES: usize = 2 << 20;
/// Smallest `--export-max-batch-bytes`: room for a span with its attributes.
pub(crate) const MIN_MAX_BATCH_BYTES: usize = 16 << 10;
/// Default number of batches each output may have waiting.
pub(crate) const DEFAULT_OUTPUT_QUEUE_BATCHES: usize = 8;

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
    /// After one batch is dropped for exhausted retries, drop the later
    /// ones at once (`ExportSettings::give_up_once_lost`).
    pub give_up_once_lost: bool,
    /// Cap of every attribute and span-event value (`span_model`).
    pub max_value_bytes: usize,
    pub service_name: String,
}

/// Why spans were not exported (defined among the metrics' labels).
pub(crate) use crate::metrics::DropReason;

/// Spans exported, over every output.
pub(crate) fn spans_exported(metrics: &Metrics) -> u64 {
    ExportOutput::ALL
        .iter()
        .map(|o| {
            metrics
                .spans_exported
                .get_or_create(&Metrics::output(*o))
                .get()
        })
        .sum()
}

/// Spans dropped, over every output and reason.
pub(crate) fn spans_dropped(metrics: &Metrics) -> u64 {
    DropReason::ALL
        .iter()
        .map(|r| spans_dropped_for(metrics, *r))
        .sum()
}

/// Spans dropped for `reason`, over every output.
pub(crate) fn spans_dropped_for(metrics: &Metrics, reason: DropReason) -> u64 {
    ExportOutput::ALL
        .iter()
        .map(|o| {
            metrics
                .spans_dropped
                .get_or_create(&Metrics::dropped(*o, reason))
                .get()
        })
        .sum()
}

/// The resource every span is reported under: the service name Jaeger lists.
pub fn resource(service_name: &str) -> Resource {
    Resource {
        attributes: vec![span_model::kv("service.name", service_name)],
        ..Default::default()
    }
}

/// Serialises spans as one OTLP/JSON `ExportTraceServiceRequest`.
#[cfg(feature = "test-support")]
pub fn to_otlp_json(spans: Vec<Span>, resource: &Resource) -> serde_json::Result<String> {
    serde_json::to_string(&to_request(spans, resource))
}

/// Every span kascade writes shares one resource and one scope.
#[cfg(feature = "test-support")]
pub(crate) fn to_request(
    spans: Vec<Span>,
    resource: &Resource,
) -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
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

pub(crate) use crate::flow::ExportProgress;

/// One batch, framed once into a protobuf request for every output and
/// every retry (the JSON output decodes it again). The spans stay at hand
/// for a request that must be split.
/// An output that cannot be set up; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error("the otlp output has no OTLP settings")]
    NoOtlpSettings,
    #[error("cannot create output file {}", path.display())]
    OutputFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{setting} {value:?} is not a valid URL")]
    Url {
        setting: String,
        value: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("OTLP header {message}")]
    Header {
        message: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("TLS for the OTLP endpoint {endpoint} ({setting})")]
    Tls {
        endpoint: String,
        setting: String,
        #[source]
        source: Box<crate::client_tls::TlsError>,
    },
    #[error("the OTLP endpoint has no host")]
    NoHost,
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
    #[error("the OTLP endpoint's host and port")]
    Endpoint(#[source] tonic::transport::Error),
    #[error("cannot build the OTLP HTTP client")]
    HttpClient(#[source] reqwest::Error),
}

impl SetupError {
    fn url(setting: &str, value: &str, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Url {
            setting: setting.to_string(),
            value: value.to_string(),
            source: Box::new(e),
        }
    }

    fn header(message: String, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Header {
            message,
            source: Box::new(e),
        }
    }

    fn tls(setting: &str, endpoint: &str, source: crate::client_tls::TlsError) -> Self {
        Self::Tls {
            endpoint: endpoint.to_string(),
            setting: setting.to_string(),
            source: Box::new(source),
        }
    }
}

/// Starts the export tasks. They end, after exporting what is queued, when
/// every sender is dropped or `stop` fires (once nothing more will be sent).
pub(crate) fn start(
    cfg: ExportConfig,
    specs: &[OutputSpec],
    metrics: Arc<Metrics>,
    progress: Arc<ExportProgress>,
) -> Result<Started, SetupError> {
    let outputs = build_outputs(&cfg, specs)?;
    Ok(start_outputs(cfg, outputs, metrics, progress))
}

pub(crate) type Started = (
    mpsc::Sender<EncodedSpan>,
    crate::flow::Shutdown,
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
        progress.set_target(index, &target);
        let (tx, rx) = mpsc::channel(cfg.output_queue_batches.max(1));
        let ctx = OutputContext {
            label,
            index,
            progress: progress.clone(),
            target,
            retry_for: cfg.retry_for,
            gone: cfg
                .give_up_once_lost
                .then(|| std::sync::atomic::AtomicBool::new(false)),
            framer: framer.clone(),
            metrics: metrics.clone(),
        };
        tasks.push((label, tokio::spawn(run_output(out, rx, ctx))));
        queues.push((label, tx));
    }
    let (tx, mut rx) = mpsc::channel::<EncodedSpan>(cfg.queue_capacity.max(1));
    let (stop, mut stop_rx) = crate::flow::Shutdown::new();
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
                tracing::error!(output = label.as_str(), error = %e, "an export output failed");
            }
        }
    });
    (tx, stop, handle)
}

#[cfg(test)]
mod receivers;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

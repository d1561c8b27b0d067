//! Export: batches spans and writes them to every configured output (OTLP
//! over gRPC or HTTP, and/or an OTLP/JSON file), retrying a failed batch so a
//! Jaeger restart does not lose spans.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod otlp;

use anyhow::Context;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::span_model::{self, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    Grpc,
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

#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub batch_size: usize,
    pub batch_timeout: Duration,
    pub queue_capacity: usize,
    /// How long a failing batch is retried before it is dropped (and counted).
    pub retry_for: Duration,
    pub service_name: String,
}

enum Output {
    Otlp {
        sender: otlp::OtlpSender,
        endpoint: String,
    },
    Json {
        writer: BufWriter<File>,
        path: PathBuf,
    },
}

impl Output {
    fn label(&self) -> &'static str {
        match self {
            Output::Otlp { .. } => "otlp",
            Output::Json { .. } => "otlp-json",
        }
    }
}

fn build_outputs(cfg: &ExportConfig, specs: &[OutputSpec]) -> anyhow::Result<Vec<Output>> {
    let mut outputs = Vec::new();
    for spec in specs {
        match spec {
            OutputSpec::Otlp => outputs.push(Output::Otlp {
                sender: otlp::OtlpSender::new(cfg)?,
                endpoint: cfg.endpoint.clone(),
            }),
            OutputSpec::OtlpJson(path) => {
                let file = File::create(path)
                    .with_context(|| format!("cannot create output file {}", path.display()))?;
                outputs.push(Output::Json {
                    writer: BufWriter::new(file),
                    path: path.clone(),
                });
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

/// One batch, converted once and encoded once per format, for every output
/// and every retry.
struct EncodedBatch {
    spans: usize,
    request: ExportTraceServiceRequest,
    protobuf: Option<Bytes>,
}

impl EncodedBatch {
    fn protobuf(&mut self) -> Bytes {
        self.protobuf
            .get_or_insert_with(|| Bytes::from(self.request.encode_to_vec()))
            .clone()
    }
}

async fn write_batch(
    out: &mut Output,
    batch: &mut EncodedBatch,
    cfg: &ExportConfig,
    metrics: &Metrics,
) {
    let label = Metrics::output(out.label());
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = match out {
            Output::Otlp { sender, .. } => sender.send(batch.protobuf()).await,
            Output::Json { writer, .. } => serde_json::to_string(&batch.request)
                .map_err(anyhow::Error::from)
                .and_then(|line| {
                    writer.write_all(line.as_bytes())?;
                    writer.write_all(b"\n")?;
                    Ok(())
                }),
        };
        match result {
            Ok(()) => {
                metrics
                    .spans_exported
                    .get_or_create(&label)
                    .inc_by(batch.spans as u64);
                return;
            }
            Err(e) => {
                metrics.export_errors.get_or_create(&label).inc();
                let target = match out {
                    Output::Otlp { endpoint, .. } => endpoint.clone(),
                    Output::Json { path, .. } => path.display().to_string(),
                };
                if started.elapsed() >= cfg.retry_for {
                    metrics
                        .spans_dropped
                        .get_or_create(&label)
                        .inc_by(batch.spans as u64);
                    tracing::error!(output = %target, spans = batch.spans, error = %e,
                        "export kept failing for {:?}; batch dropped", cfg.retry_for);
                    return;
                }
                tracing::warn!(output = %target, spans = batch.spans, error = %e, retry_in = ?backoff, "export failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Starts the export task. It ends, after exporting what is queued, when every
/// sender is dropped or `stop` fires (once nothing more will be sent).
pub fn start(
    cfg: ExportConfig,
    specs: &[OutputSpec],
    metrics: Arc<Metrics>,
) -> anyhow::Result<(
    mpsc::Sender<Span>,
    crate::aggregate::Shutdown,
    JoinHandle<()>,
)> {
    let resource = resource(&cfg.service_name);
    let mut outputs = build_outputs(&cfg, specs)?;
    let (tx, mut rx) = mpsc::channel::<Span>(cfg.queue_capacity);
    let (stop, mut stop_rx) = crate::aggregate::Shutdown::new();
    let handle = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(cfg.batch_size);
        loop {
            let deadline = tokio::time::sleep(cfg.batch_timeout);
            tokio::pin!(deadline);
            let mut closed = false;
            while batch.len() < cfg.batch_size {
                tokio::select! {
                    biased;
                    got = rx.recv() => match got {
                        Some(s) => batch.push(s),
                        None => { closed = true; break; }
                    },
                    _ = &mut stop_rx, if !stop_rx.is_terminated() => rx.close(),
                    _ = &mut deadline => break,
                }
            }
            metrics.export_queue_depth.set(rx.len() as i64);
            if !batch.is_empty() {
                let spans = std::mem::replace(&mut batch, Vec::with_capacity(cfg.batch_size));
                let mut encoded = EncodedBatch {
                    spans: spans.len(),
                    request: to_request(spans, &resource),
                    protobuf: None,
                };
                for out in outputs.iter_mut() {
                    write_batch(out, &mut encoded, &cfg, &metrics).await;
                }
            }
            if closed {
                break;
            }
        }
        for out in outputs.iter_mut() {
            match out {
                Output::Otlp { .. } => {}
                Output::Json { writer, path } => {
                    if let Err(e) = writer.flush() {
                        tracing::error!(path = %path.display(), error = %e, "cannot flush output file");
                    }
                }
            }
        }
    });
    Ok((tx, stop, handle))
}

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
use crate::span_model::{self, EncodedSpan, Span};

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

/// How far export has got, in spans: `sent` into the export queue by the
/// processor, `finished` (written by every output, or dropped and counted)
/// by the exporter. The queue is FIFO, so once `finished ≥` a value `sent`
/// had, every span sent before that moment is done: the durable intake
/// releases spooled batches on that basis.
#[derive(Default)]
pub struct ExportProgress {
    sent: std::sync::atomic::AtomicU64,
    finished: std::sync::atomic::AtomicU64,
    advanced: tokio::sync::Notify,
}

impl ExportProgress {
    pub fn add_sent(&self, n: u64) {
        self.sent.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Acquire)
    }

    fn add_finished(&self, n: u64) {
        self.finished
            .fetch_add(n, std::sync::atomic::Ordering::AcqRel);
        self.advanced.notify_waiters();
    }

    /// Waits until `n` spans are finished.
    pub async fn wait_finished(&self, n: u64) {
        loop {
            let advanced = self.advanced.notified();
            tokio::pin!(advanced);
            advanced.as_mut().enable();
            if self.finished.load(std::sync::atomic::Ordering::Acquire) >= n {
                return;
            }
            advanced.await;
        }
    }
}

/// One batch, framed once into a protobuf request for every output and
/// every retry (the JSON output decodes it again).
struct EncodedBatch {
    spans: usize,
    protobuf: Bytes,
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

async fn write_batch(
    out: &mut Output,
    batch: &EncodedBatch,
    cfg: &ExportConfig,
    metrics: &Metrics,
) {
    let label = Metrics::output(out.label());
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = match out {
            Output::Otlp { sender, .. } => sender.send(batch.protobuf.clone()).await,
            Output::Json { writer, .. } => {
                ExportTraceServiceRequest::decode(batch.protobuf.as_ref())
                    .map_err(anyhow::Error::from)
                    .and_then(|request| Ok(serde_json::to_string(&request)?))
                    .and_then(|line| {
                        writer.write_all(line.as_bytes())?;
                        writer.write_all(b"\n")?;
                        Ok(())
                    })
            }
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
    progress: Arc<ExportProgress>,
) -> anyhow::Result<(
    mpsc::Sender<EncodedSpan>,
    crate::aggregate::Shutdown,
    JoinHandle<()>,
)> {
    let framer = RequestFramer::new(&resource(&cfg.service_name));
    let mut outputs = build_outputs(&cfg, specs)?;
    let (tx, mut rx) = mpsc::channel::<EncodedSpan>(cfg.queue_capacity);
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
                let encoded = EncodedBatch {
                    spans: batch.len(),
                    protobuf: framer.frame(&batch),
                };
                batch.clear();
                for out in outputs.iter_mut() {
                    write_batch(out, &encoded, &cfg, &metrics).await;
                }
                progress.add_finished(encoded.spans as u64);
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
}

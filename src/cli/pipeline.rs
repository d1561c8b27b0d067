//! Flags of the pipeline and the exporter, shared by `collect` and `replay`.

use std::path::PathBuf;

use clap::Args;
use humantime::Duration;

use crate::app::PipelineConfig;
use crate::export::config::ExportSettings;
use crate::export::{Compression, OtlpProtocol, OutputSpec};

fn pipeline() -> PipelineConfig {
    PipelineConfig::default()
}

fn export() -> ExportSettings {
    ExportSettings::default()
}

#[derive(Args, Debug)]
pub struct PipelineArgs {
    /// Width of the time window: each object gets one span per window.
    #[arg(long, default_value_t = pipeline().window.into(), env = "KASCADE_WINDOW")]
    pub window: Duration,
    #[command(flatten)]
    pub rules: super::RulesArgs,
    /// Audit verbs that become spans (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = pipeline().verbs, env = "KASCADE_VERBS")]
    pub verbs: Vec<String>,
    /// Resources to ignore, as `resource` or `resource.group` (comma-separated); Events (`events,events.events.k8s.io`) otherwise become event spans on the objects they are about.
    #[arg(long, value_delimiter = ',', default_values_t = pipeline().exclude_resources, env = "KASCADE_EXCLUDE_RESOURCES")]
    pub exclude_resources: Vec<String>,
    /// Ignore events whose user agent matches this regex.
    #[arg(long, env = "KASCADE_EXCLUDE_USER_AGENT")]
    pub exclude_user_agent: Option<String>,
    /// Redact values whose diff path matches this regex (Secret data is always redacted).
    #[arg(long, default_value_t = pipeline().redact_paths, env = "KASCADE_REDACT_PATHS")]
    pub redact_paths: String,
    /// File holding a secret key (at least 16 bytes) for the redaction markers, so that replicas and restarts sharing it show one value with one marker; default: a random key per process.
    #[arg(long, env = "KASCADE_REDACTION_KEY_FILE")]
    pub redaction_key_file: Option<PathBuf>,
    /// Bytes of last-seen object states kept for diffs (least recently used are evicted).
    #[arg(long, default_value_t = pipeline().state_cache_bytes, env = "KASCADE_STATE_CACHE_BYTES")]
    pub state_cache_bytes: u64,
    /// Recently written objects whose last state is also kept parsed, so a
    /// burst of writes to one object is not re-parsed for each (0 disables).
    #[arg(long, default_value_t = pipeline().state_hot_entries, env = "KASCADE_STATE_HOT_ENTRIES")]
    pub state_hot_entries: usize,
    /// Object windows remembered by the span cache.
    #[arg(long, default_value_t = pipeline().span_cache_entries, env = "KASCADE_SPAN_CACHE_ENTRIES")]
    pub span_cache_entries: u64,
    /// How long after its window ends an object window stays in the span cache.
    #[arg(long, default_value_t = pipeline().span_cache_grace.into(), env = "KASCADE_SPAN_CACHE_GRACE")]
    pub span_cache_grace: Duration,
    /// Accepted audit events that may wait for processing; a full queue answers 429.
    #[arg(long, default_value_t = pipeline().queue_size, env = "KASCADE_QUEUE_SIZE")]
    pub queue_size: usize,
    /// Parallel workers (events of one object always go to the same worker) [default: the number of cores].
    // The default depends on the machine: the help names it instead of showing this machine's count.
    #[arg(long, default_value_t = pipeline().workers, hide_default_value = true, env = "KASCADE_WORKERS")]
    pub workers: usize,
    /// Most changed paths recorded per write.
    #[arg(long, default_value_t = pipeline().max_diff_changes, env = "KASCADE_MAX_DIFF_CHANGES")]
    pub max_diff_changes: usize,
    /// Objects whose recent changes are kept as candidate causes of later writes (cascades); least recently written forgotten first.
    #[arg(long, default_value_t = pipeline().cascade_objects, value_parser = clap::value_parser!(u64).range(1..), env = "KASCADE_CASCADE_OBJECTS")]
    pub cascade_objects: u64,
}

impl From<PipelineArgs> for PipelineConfig {
    fn from(a: PipelineArgs) -> Self {
        PipelineConfig {
            window: a.window.into(),
            rules: a.rules.into(),
            verbs: a.verbs,
            exclude_resources: a.exclude_resources,
            exclude_user_agent: a.exclude_user_agent,
            redact_paths: a.redact_paths,
            redaction_key_file: a.redaction_key_file,
            state_cache_bytes: a.state_cache_bytes,
            state_hot_entries: a.state_hot_entries,
            span_cache_entries: a.span_cache_entries,
            span_cache_grace: a.span_cache_grace.into(),
            queue_size: a.queue_size,
            workers: a.workers,
            max_diff_changes: a.max_diff_changes,
            cascade_objects: a.cascade_objects,
            // Not flags of the pipeline: `collect` sets them from its watch flags.
            ..PipelineConfig::default()
        }
    }
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Where spans go: `otlp`, `otlp-json=PATH`; `changelog=PATH` writes one JSON line per change; repeat for several.
    #[arg(
        long = "output",
        default_values_t = export().outputs,
        env = "KASCADE_OUTPUT",
        value_delimiter = ','
    )]
    pub outputs: Vec<OutputSpec>,
    /// OTLP endpoint, http:// or https:// (default http://127.0.0.1:4317 for grpc, :4318 for http); else from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT.
    #[arg(long, env = "KASCADE_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: grpc or http (http/protobuf) [default: grpc]; else from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL.
    #[arg(long, value_enum, env = "KASCADE_OTLP_PROTOCOL")]
    pub otlp_protocol: Option<OtlpProtocol>,
    /// Extra header sent with every export, `key=value`; repeatable; added to (and replacing) those of OTEL_EXPORTER_OTLP_[TRACES_]HEADERS.
    #[arg(long = "otlp-header", value_parser = parse_header)]
    pub otlp_headers: Vec<(String, String)>,
    /// Timeout of one export request [default: 10s]; else from OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT (milliseconds).
    #[arg(long, env = "KASCADE_OTLP_TIMEOUT")]
    pub otlp_timeout: Option<Duration>,
    /// Compression of export requests, gzip or none [default: none]; else from OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION.
    #[arg(long, value_enum, env = "KASCADE_OTLP_COMPRESSION")]
    pub otlp_compression: Option<Compression>,
    /// CA certificates (PEM) trusted for an https:// endpoint instead of the system's; else from OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE.
    #[arg(long, env = "KASCADE_OTLP_CA_FILE")]
    pub otlp_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS with the receiver; else from OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE.
    #[arg(long, env = "KASCADE_OTLP_CLIENT_CERT_FILE")]
    pub otlp_client_cert_file: Option<PathBuf>,
    /// Private key (PEM) of the client certificate; else from OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_KEY.
    #[arg(long, env = "KASCADE_OTLP_CLIENT_KEY_FILE")]
    pub otlp_client_key_file: Option<PathBuf>,
    /// Most spans per export request.
    #[arg(long, default_value_t = export().batch_size, env = "KASCADE_EXPORT_BATCH_SIZE")]
    pub export_batch_size: usize,
    /// Most encoded bytes per export request (uncompressed); a span larger on its own is trimmed. Below the receiver's limit (Jaeger, OpenTelemetry Collector: 4 MiB over gRPC).
    #[arg(long, default_value_t = export().max_batch_bytes, env = "KASCADE_EXPORT_MAX_BATCH_BYTES")]
    pub export_max_batch_bytes: usize,
    /// Longest a span waits for its batch to fill.
    #[arg(long, default_value_t = export().batch_timeout.into(), env = "KASCADE_EXPORT_BATCH_TIMEOUT")]
    pub export_batch_timeout: Duration,
    /// Spans that may wait for export before processing slows down.
    #[arg(long, default_value_t = export().queue_size, env = "KASCADE_EXPORT_QUEUE_SIZE")]
    pub export_queue_size: usize,
    /// Batches that may wait for each output (each output sends on its own); a full queue slows processing down.
    #[arg(long, default_value_t = export().output_queue, env = "KASCADE_EXPORT_OUTPUT_QUEUE")]
    pub export_output_queue: usize,
    /// How long a failing export is retried before its spans are dropped (and counted).
    #[arg(long, default_value_t = export().retry_for.into(), env = "KASCADE_EXPORT_RETRY_FOR")]
    pub export_retry_for: Duration,
    /// Longest attribute or span-event value (a diff side, a snapshot, a message), in bytes; longer ones are cut and marked `<key>.truncated_from`.
    #[arg(long, default_value_t = export().max_value_bytes, env = "KASCADE_EXPORT_MAX_VALUE_BYTES")]
    pub export_max_value_bytes: usize,
    /// service.name of the exported spans.
    #[arg(long, default_value_t = export().service_name, env = "KASCADE_SERVICE_NAME")]
    pub service_name: String,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not key=value"))?;
    if k.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}

impl From<ExportArgs> for ExportSettings {
    fn from(a: ExportArgs) -> Self {
        ExportSettings {
            outputs: a.outputs,
            otlp_endpoint: a.otlp_endpoint,
            otlp_protocol: a.otlp_protocol,
            otlp_headers: a.otlp_headers,
            otlp_timeout: a.otlp_timeout.map(Into::into),
            otlp_compression: a.otlp_compression,
            otlp_ca_file: a.otlp_ca_file,
            otlp_client_cert_file: a.otlp_client_cert_file,
            otlp_client_key_file: a.otlp_client_key_file,
            batch_size: a.export_batch_size,
            max_batch_bytes: a.export_max_batch_bytes,
            batch_timeout: a.export_batch_timeout.into(),
            queue_size: a.export_queue_size,
            output_queue: a.export_output_queue,
            retry_for: a.export_retry_for.into(),
            // A choice of the command (replay), not a flag.
            give_up_once_lost: false,
            max_value_bytes: a.export_max_value_bytes,
            service_name: a.service_name,
        }
    }
}

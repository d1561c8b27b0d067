//! Command line: `kascade collect`, `kascade replay`, `kascade rules check`
//! (the read side, `frontend` and `trace`, is in cli_frontend.rs).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use prometheus_client::registry::Registry;
use regex::Regex;

use crate::aggregate::redact::{DEFAULT_REDACT_PATHS, Redactor};
use crate::aggregate::rules::RuleSet;
use crate::aggregate::span_cache::LocalSpanCache;
use crate::aggregate::{self, Processor, ProcessorConfig};
use crate::export::{self, ExportConfig, OtlpProtocol, OutputSpec};
use crate::metrics::Metrics;
use crate::model::Windowing;
use crate::source::audit::{AuditFilter, DEFAULT_EXCLUDED_RESOURCES, DEFAULT_VERBS};
use crate::source::spool::{Spool, SpoolConfig};
use crate::source::{replay, validate_cluster_name, webhook};

/// The rules shipped in `rules/`, used when `--rules` is not given.
pub const BUILTIN_RULES: &[(&str, &str)] = &[
    ("rules/links.yaml", include_str!("../rules/links.yaml")),
    (
        "rules/networking.yaml",
        include_str!("../rules/networking.yaml"),
    ),
    ("rules/pods.yaml", include_str!("../rules/pods.yaml")),
    ("rules/policy.yaml", include_str!("../rules/policy.yaml")),
    ("rules/storage.yaml", include_str!("../rules/storage.yaml")),
];

#[derive(Parser, Debug)]
#[command(
    name = "kascade",
    version,
    about = "Kubernetes control-plane activity as distributed traces"
)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "KASCADE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Receive the kube-apiserver audit webhook and export object traces.
    Collect(Box<CollectArgs>),
    /// Feed audit log files (JSON lines) through the pipeline, flush, exit.
    Replay(ReplayArgs),
    /// Serve assembled object traces to the Jaeger UI (Jaeger remote storage API v2) and /redirect.
    Frontend(crate::cli_frontend::FrontendArgs),
    /// Print the assembled trace of one object from audit log files, offline.
    Trace(crate::cli_frontend::TraceArgs),
    /// Work with relation rule files.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Validate every rule file in DIR; exits non-zero naming each bad rule.
    Check {
        /// Directory of *.yaml rule files.
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
pub struct CollectArgs {
    /// Address of the audit webhook (HTTPS with --tls-cert-file).
    #[arg(long, default_value = "0.0.0.0:8090", env = "KASCADE_LISTEN")]
    pub listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8091", env = "KASCADE_ADMIN_LISTEN")]
    pub admin_listen: SocketAddr,
    /// Cluster name for events posted to /audit (without a cluster in the path).
    #[arg(long, default_value = "default", env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// File holding the bearer token the apiserver must send (Authorization: Bearer ...).
    #[arg(long, env = "KASCADE_WEBHOOK_TOKEN_FILE")]
    pub webhook_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate (PEM chain). The apiserver sends bearer tokens only over HTTPS.
    #[arg(long, env = "KASCADE_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert-file.
    #[arg(long, env = "KASCADE_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS with the apiserver.
    #[arg(long, env = "KASCADE_TLS_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Largest accepted webhook body, in bytes (after gzip decompression); larger gets 413.
    #[arg(long, default_value_t = 32 << 20, env = "KASCADE_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// How long a webhook batch may wait for room in a full queue before it is refused with 429
    /// (the apiserver retries it). Waiting spares decoding a batch again after each refusal.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration, env = "KASCADE_ADMISSION_WAIT")]
    pub admission_wait: std::time::Duration,
    /// A client must send its request headers within this time, else the connection is closed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "KASCADE_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: std::time::Duration,
    /// A client must send its whole request body within this time, else 408.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration, env = "KASCADE_BODY_READ_TIMEOUT")]
    pub body_read_timeout: std::time::Duration,
    /// Durable intake: accepted webhook batches are written here (and flushed) before the 200,
    /// and replayed at start until their spans are exported. Default: $XDG_STATE_HOME/kascade/spool
    /// (else ~/.local/state/kascade/spool). One directory per process.
    #[arg(long, env = "KASCADE_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Most bytes of accepted batches waiting on disk for export; beyond it batches get 429.
    #[arg(long, default_value_t = 1 << 30, env = "KASCADE_SPOOL_BYTES")]
    pub spool_bytes: u64,
    /// Keep accepted batches only in memory: a crash loses what was answered 200 but not yet exported
    /// (wins over --spool-dir, e.g. the image's KASCADE_SPOOL_DIR).
    #[arg(long, env = "KASCADE_NO_SPOOL")]
    pub no_spool: bool,
    #[command(flatten)]
    pub span_cache: Box<SpanCacheArgs>,
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: Box<ExportArgs>,
}

/// List-watch of objects and Events (in addition to the audit webhook).
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Watch a cluster: `NAME=KUBECONFIG` (read-only credentials suffice); repeat or comma-separate for several.
    #[arg(long = "watch-cluster", value_delimiter = ',', value_parser = crate::source::watch::parse_cluster_kubeconfig, env = "KASCADE_WATCH_CLUSTERS")]
    pub clusters: Vec<(String, PathBuf)>,
    /// Resources to watch, as `resource` or `resource.group` (comma-separated); default: every listable, watchable one.
    #[arg(long, value_delimiter = ',', env = "KASCADE_WATCH_RESOURCES")]
    pub watch_resources: Vec<String>,
    /// Resources never watched (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = crate::source::watch::DEFAULT_WATCH_EXCLUDE.iter().map(|s| s.to_string()).collect::<Vec<_>>(), env = "KASCADE_WATCH_EXCLUDE")]
    pub watch_exclude: Vec<String>,
    /// Watch Kubernetes Events and show them on the objects they are about.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "KASCADE_WATCH_EVENTS")]
    pub watch_events: bool,
    /// Events older than this, listed when a watch (re)starts, are not shown (again).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, env = "KASCADE_EVENT_MAX_AGE")]
    pub event_max_age: Duration,
    /// How long a change seen by the watch waits for the audit event of the same write before it is shown alone.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, env = "KASCADE_WATCH_AUDIT_WAIT")]
    pub watch_audit_wait: Duration,
    /// Entries of the audit/watch ledger (≈ 300 bytes each, kept 10 minutes) that lets a write seen by both be shown once; the default is full at ≈ 440 writes/s.
    #[arg(long, default_value_t = crate::aggregate::processor::DEFAULT_LEDGER_ENTRIES, value_parser = clap::value_parser!(u64).range(1..), env = "KASCADE_WATCH_LEDGER_ENTRIES")]
    pub watch_ledger_entries: u64,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Audit log files, one JSON event per line.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Cluster name recorded on every span.
    #[arg(long, default_value = "default", env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// Fail on the first malformed line instead of reporting and skipping it.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: Box<ExportArgs>,
}

#[derive(Args, Debug)]
pub struct PipelineArgs {
    /// Width of the time window: each object gets one span per window.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration, env = "KASCADE_WINDOW")]
    pub window: Duration,
    /// Directory of relation rule files (*.yaml); default: the rules built into the binary.
    #[arg(long, env = "KASCADE_RULES")]
    pub rules: Option<PathBuf>,
    /// Audit verbs that become spans (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_VERBS.iter().map(|s| s.to_string()).collect::<Vec<_>>(), env = "KASCADE_VERBS")]
    pub verbs: Vec<String>,
    /// Resources to ignore, as `resource` or `resource.group` (comma-separated); Events (`events,events.events.k8s.io`) otherwise become event spans on the objects they are about.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_EXCLUDED_RESOURCES.iter().map(|s| s.to_string()).collect::<Vec<_>>(), env = "KASCADE_EXCLUDE_RESOURCES")]
    pub exclude_resources: Vec<String>,
    /// Ignore events whose user agent matches this regex.
    #[arg(long, env = "KASCADE_EXCLUDE_USER_AGENT")]
    pub exclude_user_agent: Option<String>,
    /// Redact values whose diff path matches this regex (Secret data is always redacted).
    #[arg(long, default_value = DEFAULT_REDACT_PATHS, env = "KASCADE_REDACT_PATHS")]
    pub redact_paths: String,
    /// Bytes of last-seen object states kept for diffs (least recently used are evicted).
    #[arg(long, default_value_t = 128 << 20, env = "KASCADE_STATE_CACHE_BYTES")]
    pub state_cache_bytes: u64,
    /// Recently written objects whose last state is also kept parsed, so a
    /// burst of writes to one object is not re-parsed for each (0 disables).
    #[arg(long, default_value_t = 256, env = "KASCADE_STATE_HOT_ENTRIES")]
    pub state_hot_entries: usize,
    /// Object windows remembered by the span cache.
    #[arg(long, default_value_t = 500_000, env = "KASCADE_SPAN_CACHE_ENTRIES")]
    pub span_cache_entries: u64,
    /// How long after its window ends an object window stays in the span cache.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, env = "KASCADE_SPAN_CACHE_GRACE")]
    pub span_cache_grace: Duration,
    /// Accepted audit events that may wait for processing; a full queue answers 429.
    #[arg(long, default_value_t = 4_000, env = "KASCADE_QUEUE_SIZE")]
    pub queue_size: usize,
    /// Parallel workers (events of one object always go to the same worker).
    #[arg(long, default_value_t = default_workers(), env = "KASCADE_WORKERS")]
    pub workers: usize,
    /// Most changed paths recorded per write.
    #[arg(long, default_value_t = 100, env = "KASCADE_MAX_DIFF_CHANGES")]
    pub max_diff_changes: usize,
    /// Set from `collect --watch-audit-wait`.
    #[arg(skip = Duration::from_secs(5))]
    pub watch_audit_wait: Duration,
    /// Set when `collect` also runs a list-watch.
    #[arg(skip = false)]
    pub has_watch: bool,
    /// Set from `collect --watch-ledger-entries`.
    #[arg(skip = crate::aggregate::processor::DEFAULT_LEDGER_ENTRIES)]
    pub watch_ledger_entries: u64,
}

fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Where spans go: `otlp`, `otlp-json=PATH`; repeat for several.
    #[arg(
        long = "output",
        default_value = "otlp",
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
    #[arg(long, value_parser = humantime::parse_duration, env = "KASCADE_OTLP_TIMEOUT")]
    pub otlp_timeout: Option<Duration>,
    /// Compression of export requests, gzip or none [default: none]; else from OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION.
    #[arg(long, value_enum, env = "KASCADE_OTLP_COMPRESSION")]
    pub otlp_compression: Option<export::Compression>,
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
    #[arg(long, default_value_t = 2048, env = "KASCADE_EXPORT_BATCH_SIZE")]
    pub export_batch_size: usize,
    /// Most encoded bytes per export request (uncompressed); a span larger on its own is trimmed. Below the receiver's limit (Jaeger, OpenTelemetry Collector: 4 MiB over gRPC).
    #[arg(long, default_value_t = export::DEFAULT_MAX_BATCH_BYTES, env = "KASCADE_EXPORT_MAX_BATCH_BYTES")]
    pub export_max_batch_bytes: usize,
    /// Longest a span waits for its batch to fill.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration, env = "KASCADE_EXPORT_BATCH_TIMEOUT")]
    pub export_batch_timeout: Duration,
    /// Spans that may wait for export before processing slows down.
    #[arg(long, default_value_t = 10_000, env = "KASCADE_EXPORT_QUEUE_SIZE")]
    pub export_queue_size: usize,
    /// Batches that may wait for each output (each output sends on its own); a full queue slows processing down.
    #[arg(long, default_value_t = export::DEFAULT_OUTPUT_QUEUE_BATCHES, env = "KASCADE_EXPORT_OUTPUT_QUEUE")]
    pub export_output_queue: usize,
    /// How long a failing export is retried before its spans are dropped (and counted).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration, env = "KASCADE_EXPORT_RETRY_FOR")]
    pub export_retry_for: Duration,
    /// Longest attribute or span-event value (a diff side, a snapshot, a message), in bytes; longer ones are cut and marked `<key>.truncated_from`.
    #[arg(long, default_value_t = crate::span_model::DEFAULT_MAX_VALUE_BYTES, env = "KASCADE_EXPORT_MAX_VALUE_BYTES")]
    pub export_max_value_bytes: usize,
    /// service.name of the exported spans.
    #[arg(long, default_value = "kascade", env = "KASCADE_SERVICE_NAME")]
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

pub fn load_rules(dir: Option<&Path>) -> anyhow::Result<RuleSet> {
    let result = match dir {
        Some(d) => RuleSet::load_dir(d),
        None => {
            let mut set = RuleSet::default();
            let mut errors = Vec::new();
            for (name, text) in BUILTIN_RULES {
                if let Err(mut e) = set.add_yaml(name, text) {
                    errors.append(&mut e);
                }
            }
            if errors.is_empty() {
                Ok(set)
            } else {
                Err(errors)
            }
        }
    };
    result.map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("invalid rules:\n  {}", lines.join("\n  "))
    })
}

impl PipelineArgs {
    pub fn filter(&self) -> anyhow::Result<AuditFilter> {
        let exclude_user_agents = self
            .exclude_user_agent
            .as_deref()
            .map(Regex::new)
            .transpose()
            .context("--exclude-user-agent is not a valid regex")?;
        Ok(AuditFilter {
            verbs: self.verbs.iter().cloned().collect(),
            exclude_resources: self.exclude_resources.iter().cloned().collect(),
            exclude_user_agents,
        })
    }

    pub fn processor_config(&self) -> anyhow::Result<ProcessorConfig> {
        if self.window < Duration::from_secs(1) {
            bail!("--window must be at least 1s");
        }
        Ok(ProcessorConfig {
            windowing: Windowing::new(self.window),
            state_cache_bytes: self.state_cache_bytes,
            hot_states: self.state_hot_entries,
            max_diff_changes: self.max_diff_changes,
            watch_audit_wait: self.watch_audit_wait,
            has_watch: self.has_watch,
            ledger_entries: self.watch_ledger_entries,
        })
    }
}

impl ExportArgs {
    /// The exporter's settings: these flags, then the `OTEL_EXPORTER_OTLP_*`
    /// environment variables (see `export::config`).
    pub fn config(&self) -> anyhow::Result<ExportConfig> {
        self.config_with_env(&|k| std::env::var(k).ok())
    }

    pub fn config_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<ExportConfig> {
        if self.export_max_batch_bytes < export::MIN_MAX_BATCH_BYTES {
            bail!(
                "--export-max-batch-bytes {} is below the minimum {}",
                self.export_max_batch_bytes,
                export::MIN_MAX_BATCH_BYTES
            );
        }
        if self.export_max_value_bytes < crate::span_model::MIN_MAX_VALUE_BYTES {
            bail!(
                "--export-max-value-bytes {} is below the minimum {}",
                self.export_max_value_bytes,
                crate::span_model::MIN_MAX_VALUE_BYTES
            );
        }
        let otlp = if self.outputs.contains(&OutputSpec::Otlp) {
            let flags = export::OtlpFlags {
                endpoint: self.otlp_endpoint.as_deref(),
                protocol: self.otlp_protocol,
                headers: &self.otlp_headers,
                timeout: self.otlp_timeout,
                compression: self.otlp_compression,
                ca_file: self.otlp_ca_file.as_deref(),
                client_cert_file: self.otlp_client_cert_file.as_deref(),
                client_key_file: self.otlp_client_key_file.as_deref(),
            };
            Some(export::config::resolve(&flags, env)?)
        } else {
            None
        };
        Ok(ExportConfig {
            otlp,
            batch_size: self.export_batch_size.max(1),
            max_batch_bytes: self.export_max_batch_bytes,
            batch_timeout: self.export_batch_timeout,
            queue_capacity: self.export_queue_size.max(1),
            output_queue_batches: self.export_output_queue.max(1),
            retry_for: self.export_retry_for,
            max_value_bytes: self.export_max_value_bytes,
            service_name: self.service_name.clone(),
        })
    }
}

/// A running pipeline: the intake for sources, and what to await on shutdown.
pub struct Pipeline {
    pub intake: crate::pipeline::Intake,
    pub processor: Arc<Processor>,
    pub spans: Arc<dyn crate::aggregate::span_cache::SpanCache>,
    pub metrics: Arc<Metrics>,
    shutdown: crate::pipeline::Shutdown,
    export_shutdown: crate::pipeline::Shutdown,
    aggregate_done: tokio::task::JoinHandle<()>,
    export_done: tokio::task::JoinHandle<()>,
    pub export_progress: Arc<export::ExportProgress>,
    /// The durable intake, when `collect` runs with one.
    pub spool: Option<Arc<Spool>>,
}

impl Pipeline {
    pub fn start(p: &PipelineArgs, e: &ExportArgs, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let spans = Arc::new(
            LocalSpanCache::new(p.span_cache_entries, p.window + p.span_cache_grace)
                .count_evictions(&metrics),
        );
        Self::start_with(p, e, spans, metrics)
    }

    /// `start` with the given span cache (`collect` may share it through etcd).
    pub fn start_with(
        p: &PipelineArgs,
        e: &ExportArgs,
        spans: Arc<dyn crate::aggregate::span_cache::SpanCache>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let rules = Arc::new(load_rules(p.rules.as_deref())?);
        tracing::info!(rules = rules.len(), "relation rules loaded");
        let redact = Regex::new(&p.redact_paths).context("--redact-paths is not a valid regex")?;
        let cfg = p.processor_config()?;
        let export_progress = Arc::new(export::ExportProgress::default());
        let (span_tx, export_shutdown, export_done) = export::start(
            e.config()?,
            &e.outputs,
            metrics.clone(),
            export_progress.clone(),
        )?;
        let processor = Arc::new(
            Processor::new(
                cfg,
                Redactor::new(Some(redact)),
                rules,
                spans.clone(),
                span_tx,
                metrics.clone(),
            )
            .with_export_progress(export_progress.clone()),
        );
        let (intake, shutdown, aggregate_done) = aggregate::start(
            processor.clone(),
            p.queue_size.max(1),
            p.workers,
            metrics.clone(),
        );
        Ok(Self {
            intake,
            processor,
            spans,
            metrics,
            export_progress,
            spool: None,
            shutdown,
            export_shutdown,
            aggregate_done,
            export_done,
        })
    }

    /// Processes everything already accepted, exports it, and stops.
    pub async fn finish(self) {
        let Pipeline {
            intake,
            processor,
            shutdown,
            export_shutdown,
            aggregate_done,
            export_done,
            spool,
            ..
        } = self;
        shutdown.close();
        drop(intake);
        let _ = aggregate_done.await;
        // Every worker has ended, so nothing more is sent to the exporter.
        drop(processor);
        export_shutdown.close();
        let _ = export_done.await;
        // Everything accepted was exported (or dropped and counted).
        if let Some(spool) = spool {
            spool.release_all();
        }
    }
}

/// Builds the collector's HTTP app and the pipeline behind it (used by
/// `run_collect` and by tests that serve it on an ephemeral port).
/// The collector's two HTTP apps: the audit webhook and the admin endpoints.
pub struct CollectApps {
    pub audit: axum::Router,
    pub admin: axum::Router,
}

pub fn build_collect(args: &CollectArgs) -> anyhow::Result<(CollectApps, Pipeline)> {
    validate_cluster_name(&args.cluster).map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
    let token = match &args.webhook_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --webhook-token-file {}", p.display()))?
                .trim()
                .to_string();
            if t.is_empty() {
                bail!("--webhook-token-file {} is empty", p.display());
            }
            Some(t)
        }
        None => {
            tracing::warn!(
                "no --webhook-token-file: the audit webhook accepts unauthenticated requests"
            );
            None
        }
    };
    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let filter = args.pipeline.filter()?;
    let (spool, spooled) = match args.spool_config()? {
        None => {
            tracing::warn!(
                "--no-spool: accepted audit batches are kept in memory only; a crash loses those not yet exported"
            );
            (None, Vec::new())
        }
        Some(cfg) => {
            let dir = cfg.dir.clone();
            let (spool, pending) = Spool::open(cfg, metrics.clone())
                .map_err(|e| anyhow::anyhow!("--spool-dir: {e}"))?;
            tracing::info!(dir = %dir.display(), max_bytes = args.spool_bytes, "durable intake: accepted batches are flushed to disk before the 200");
            (Some(spool), pending)
        }
    };
    let spans = args.span_cache.build(&args.pipeline, metrics.clone())?;
    let mut pipeline = Pipeline::start_with(&args.pipeline, &args.export, spans, metrics.clone())?;
    pipeline.spool = spool.clone();
    let state = Arc::new(webhook::WebhookState {
        intake: pipeline.intake.clone(),
        filter,
        default_cluster: args.cluster.clone(),
        token,
        max_body_bytes: args.max_body_bytes,
        body_timeout: args.body_read_timeout,
        admission_wait: args.admission_wait,
        decode_slots: Arc::new(tokio::sync::Semaphore::new(args.pipeline.workers.max(1))),
        spool: spool.clone(),
        last_refusal_log: Default::default(),
        metrics,
        registry,
        processor: pipeline.processor.clone(),
    });
    if let Some(spool) = spool {
        tokio::spawn(webhook::replay_spool(state.clone(), spooled));
        tokio::spawn(webhook::release_spool(
            spool,
            pipeline.intake.clone(),
            pipeline.export_progress.clone(),
            std::time::Duration::from_millis(500),
        ));
    }
    Ok((
        CollectApps {
            audit: webhook::audit_router(state.clone()),
            admin: webhook::admin_router(state),
        },
        pipeline,
    ))
}

impl CollectArgs {
    /// The durable intake's settings; `None` with `--no-spool`.
    pub fn spool_config(&self) -> anyhow::Result<Option<SpoolConfig>> {
        if self.no_spool {
            return Ok(None);
        }
        let dir = match &self.spool_dir {
            Some(d) => d.clone(),
            None => {
                let state = std::env::var_os("XDG_STATE_HOME")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state"))
                    })
                    .context("no --spool-dir, and neither XDG_STATE_HOME nor HOME is set (or use --no-spool)")?;
                state.join("kascade/spool")
            }
        };
        let mut cfg = SpoolConfig::new(dir);
        cfg.max_bytes = self.spool_bytes;
        if self.spool_bytes < self.max_body_bytes as u64 {
            bail!(
                "--spool-bytes {} is smaller than --max-body-bytes {}: a full-size batch could never be accepted",
                self.spool_bytes,
                self.max_body_bytes
            );
        }
        Ok(Some(cfg))
    }
}

pub use crate::source::server::{serve_webhook, tls_config};

pub async fn run_collect(mut args: CollectArgs) -> anyhow::Result<()> {
    args.pipeline.watch_audit_wait = args.watch.watch_audit_wait;
    args.pipeline.has_watch = !args.watch.clusters.is_empty();
    args.pipeline.watch_ledger_entries = args.watch.watch_ledger_entries;
    for (cluster, kubeconfig) in &args.watch.clusters {
        crate::source::watch::check_kubeconfig(cluster, kubeconfig)?;
    }
    let (apps, pipeline) = build_collect(&args)?;
    let mut watchers = Vec::new();
    for (cluster, kubeconfig) in &args.watch.clusters {
        let cfg = crate::source::watch::WatchConfig {
            cluster: cluster.clone(),
            kubeconfig: kubeconfig.clone(),
            include: args.watch.watch_resources.iter().cloned().collect(),
            exclude: args.watch.watch_exclude.iter().cloned().collect(),
            event_max_age: args.watch.event_max_age,
            watch_events: args.watch.watch_events,
        };
        watchers.push(tokio::spawn(crate::source::watch::supervise(
            cfg,
            pipeline.intake.clone(),
            pipeline.metrics.clone(),
            pipeline.spans.clone(),
        )));
    }
    let app = apps.audit;
    let admin_listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("cannot listen on --admin-listen {}", args.admin_listen))?;
    tracing::info!(admin_listen = %args.admin_listen, "serving /metrics, /healthz, /readyz");
    let admin = tokio::spawn(async move {
        axum::serve(admin_listener, apps.admin)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => Some(crate::source::server::tls_config(
            cert,
            key,
            args.tls_client_ca_file.as_deref(),
        )?),
        _ => {
            if args.webhook_token_file.is_some() {
                tracing::warn!(
                    "--webhook-token-file without --tls-cert-file: the apiserver sends bearer tokens only over HTTPS"
                );
            }
            None
        }
    };
    tracing::info!(listen = %args.listen, cluster = %args.cluster, https = tls.is_some(), mtls = args.tls_client_ca_file.is_some(),
        "kascade collect is serving the audit webhook");
    crate::source::server::serve_webhook(
        listener,
        tls,
        app,
        args.header_read_timeout,
        shutdown_signal(),
    )
    .await
    .with_context(|| format!("webhook server on {} failed", args.listen))?;
    tracing::info!("shutting down: processing and exporting what was accepted");
    for w in &watchers {
        w.abort();
    }
    pipeline.finish().await;
    admin.abort();
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}

pub async fn run_replay(args: ReplayArgs) -> anyhow::Result<()> {
    validate_cluster_name(&args.cluster).map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
    let metrics = Arc::new(Metrics::default());
    let filter = args.pipeline.filter()?;
    let pipeline = Pipeline::start(&args.pipeline, &args.export, metrics.clone())?;
    let result = replay::replay_files(
        &args.files,
        &args.cluster,
        &filter,
        &pipeline.intake,
        args.strict,
        &metrics,
    )
    .await;
    pipeline.finish().await;
    let stats = result?;
    let exported = export::spans_exported(&metrics);
    let dropped = export::spans_dropped(&metrics);
    eprintln!(
        "replayed {} lines: {} events accepted, {} malformed lines skipped; {} spans exported{}",
        stats.lines,
        stats.accepted,
        stats.bad_lines,
        exported,
        if dropped > 0 {
            format!(", {dropped} DROPPED")
        } else {
            String::new()
        }
    );
    if dropped > 0 {
        bail!("{dropped} spans could not be exported");
    }
    Ok(())
}

pub fn run_rules_check(dir: &Path) -> anyhow::Result<()> {
    let set = load_rules(Some(dir))?;
    println!("{}: {} rules OK", dir.display(), set.len());
    Ok(())
}

/// The span cache of `collect`: local to the process, or shared by replicas
/// through etcd (see `aggregate::span_cache`).
#[derive(Args, Debug, Clone)]
pub struct SpanCacheArgs {
    /// etcd client URLs (comma-separated) of a span cache shared by replicas, so each object span and link is emitted once; empty: local cache only.
    #[arg(long, value_delimiter = ',', env = "KASCADE_ETCD_ENDPOINTS")]
    pub etcd_endpoints: Vec<String>,
    /// Prefix of every etcd key kascade writes.
    #[arg(long, default_value = "/kascade/spans/", env = "KASCADE_ETCD_PREFIX")]
    pub etcd_prefix: String,
    /// Longest one etcd request may take at first; a request that timed out is retried with twice as long each time (up to 8x).
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration, env = "KASCADE_ETCD_TIMEOUT")]
    pub etcd_timeout: Duration,
    /// How long a failed etcd request (timeout, unreachable, unavailable) is retried, with the same reservation, before kascade falls back to its local span cache.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "KASCADE_ETCD_RETRY_FOR")]
    pub etcd_retry_for: Duration,
    /// While falling back, how often etcd is probed.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, env = "KASCADE_ETCD_PROBE_INTERVAL")]
    pub etcd_probe_interval: Duration,
    /// CA (PEM) of etcd's serving certificate; needed for https:// endpoints.
    #[arg(long, env = "KASCADE_ETCD_CA_FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd.
    #[arg(
        long,
        env = "KASCADE_ETCD_CERT_FILE",
        requires = "etcd_key_file",
        requires = "etcd_ca_file"
    )]
    pub etcd_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --etcd-cert-file.
    #[arg(long, env = "KASCADE_ETCD_KEY_FILE", requires = "etcd_cert_file")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user (etcd authentication enabled).
    #[arg(long, env = "KASCADE_ETCD_USERNAME", requires = "etcd_password_file")]
    pub etcd_username: Option<String>,
    /// File holding the password of --etcd-username.
    #[arg(long, env = "KASCADE_ETCD_PASSWORD_FILE", requires = "etcd_username")]
    pub etcd_password_file: Option<PathBuf>,
}

impl SpanCacheArgs {
    /// The local cache, or the etcd one (which starts checking etcd in the
    /// background when called inside a Tokio runtime).
    pub fn build(
        &self,
        p: &PipelineArgs,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Arc<dyn crate::aggregate::span_cache::SpanCache>> {
        use crate::aggregate::span_cache::{EtcdConfig, EtcdSpanCache, EtcdTls};
        let ttl = p.window + p.span_cache_grace;
        let endpoints: Vec<String> = self
            .etcd_endpoints
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() {
            return Ok(Arc::new(
                LocalSpanCache::new(p.span_cache_entries, ttl).count_evictions(&metrics),
            ));
        }
        let mut cfg = EtcdConfig::new(endpoints, ttl);
        cfg.prefix = self.etcd_prefix.clone();
        if !cfg.prefix.starts_with('/') {
            bail!("--etcd-prefix must start with /");
        }
        if self.etcd_timeout.is_zero() {
            bail!("--etcd-timeout must be positive");
        }
        cfg.timeout = self.etcd_timeout;
        cfg.retry_for = self.etcd_retry_for;
        cfg.probe_interval = self.etcd_probe_interval;
        cfg.tls = self.etcd_ca_file.as_ref().map(|ca| EtcdTls {
            ca_file: ca.clone(),
            client_cert: self.etcd_cert_file.clone().zip(self.etcd_key_file.clone()),
        });
        if let (Some(user), Some(file)) = (&self.etcd_username, &self.etcd_password_file) {
            let password = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read --etcd-password-file {}", file.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_string();
            cfg.auth = Some((user.clone(), password));
        }
        let cache =
            EtcdSpanCache::new(cfg, p.span_cache_entries, metrics).context("--etcd-endpoints")?;
        cache.start();
        Ok(Arc::new(cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(argv: &[&str]) -> CollectArgs {
        let mut full = vec!["kascade", "collect"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Collect(args) => *args,
            _ => unreachable!(),
        }
    }

    #[test]
    fn no_spool_wins_over_a_spool_dir_and_a_spool_smaller_than_a_batch_is_refused() {
        // The image sets KASCADE_SPOOL_DIR; the chart's spool.enabled=false
        // adds KASCADE_NO_SPOOL: that must start, without a spool.
        let args = collect(&["--spool-dir", "/var/lib/kascade/spool", "--no-spool"]);
        assert!(args.spool_config().unwrap().is_none());
        let cfg = collect(&["--spool-dir", "/tmp/s", "--spool-bytes", "4096"])
            .spool_config()
            .unwrap_err()
            .to_string();
        assert!(cfg.contains("--spool-bytes 4096"), "{cfg}");
        let cfg = collect(&["--spool-dir", "/tmp/s"])
            .spool_config()
            .unwrap()
            .unwrap();
        assert_eq!(cfg.dir, PathBuf::from("/tmp/s"));
        assert_eq!(cfg.max_bytes, 1 << 30);
    }
}

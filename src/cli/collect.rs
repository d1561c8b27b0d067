//! Flags of `kascade collect`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use humantime::Duration;

use super::{ExportArgs, PipelineArgs};
use crate::app::{CollectConfig, SpanCacheConfig, WatchersConfig};

fn collect() -> CollectConfig {
    CollectConfig::default()
}

#[derive(Args, Debug)]
pub struct CollectArgs {
    /// Address of the audit webhook (HTTPS with --tls-cert-file).
    #[arg(long, default_value_t = collect().listen, env = "KASCADE_LISTEN")]
    pub listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz (plain HTTP).
    #[arg(long, default_value_t = collect().admin_listen, env = "KASCADE_ADMIN_LISTEN")]
    pub admin_listen: SocketAddr,
    /// Cluster name for events posted to /audit (without a cluster in the path).
    #[arg(long, default_value_t = collect().cluster, env = "KASCADE_CLUSTER")]
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
    #[arg(long, default_value_t = collect().max_body_bytes, env = "KASCADE_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// How long a webhook batch may wait for room in a full queue before it is refused with 429
    /// (the apiserver retries it). Waiting spares decoding a batch again after each refusal.
    #[arg(long, default_value_t = collect().admission_wait.into(), env = "KASCADE_ADMISSION_WAIT")]
    pub admission_wait: Duration,
    /// A client must send its request headers within this time, else the connection is closed.
    #[arg(long, default_value_t = collect().header_read_timeout.into(), env = "KASCADE_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Duration,
    /// A client must send its whole request body within this time, else 408.
    #[arg(long, default_value_t = collect().body_read_timeout.into(), env = "KASCADE_BODY_READ_TIMEOUT")]
    pub body_read_timeout: Duration,
    /// Webhook connections open at once; one more is answered 429 (Retry-After) and closed unread
    /// (over TLS, closed). kascade raises its open-files limit to the hard limit at start.
    #[arg(long, default_value_t = collect().max_connections, env = "KASCADE_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// Bytes of webhook bodies being read and decoded at once (a body counts by its Content-Length,
    /// or --max-body-bytes when it announces none; a gzipped one adds --max-body-bytes). A request
    /// that would pass it is answered 429 (Retry-After) before its body is read.
    #[arg(long, default_value_t = collect().max_intake_bytes, env = "KASCADE_MAX_INTAKE_BYTES")]
    pub max_intake_bytes: u64,
    /// Durable intake: accepted webhook batches are written here (and flushed) before the 200,
    /// and replayed at start until their spans are exported. Default: $XDG_STATE_HOME/kascade/spool
    /// (else ~/.local/state/kascade/spool). One directory per process.
    #[arg(long, env = "KASCADE_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Most bytes of accepted batches waiting on disk for export; beyond it batches get 429.
    #[arg(long, default_value_t = collect().spool_bytes, env = "KASCADE_SPOOL_BYTES")]
    pub spool_bytes: u64,
    /// Bytes of exported batches kept on disk (the last 15 minutes' at most) and read again at a
    /// restart, sending nothing: the batches replayed after them then find the object states, causes
    /// and Events they followed, as in an uninterrupted run. 0: none.
    #[arg(long, default_value_t = collect().spool_context_bytes, env = "KASCADE_SPOOL_CONTEXT_BYTES")]
    pub spool_context_bytes: u64,
    /// Keep accepted batches only in memory: a crash loses what was answered 200 but not yet exported
    /// (wins over --spool-dir, e.g. the image's KASCADE_SPOOL_DIR).
    #[arg(long, env = "KASCADE_NO_SPOOL")]
    pub no_spool: bool,
    /// No live cascade metrics (kascade_propagation_seconds, kascade_cascade_completion_seconds):
    /// saves the change record each write would build for them. Cause inference stays on.
    #[arg(long, env = "KASCADE_NO_CASCADE_METRICS")]
    pub no_cascade_metrics: bool,
    /// Address where Kubernetes components (kube-apiserver's, the kubelet's TracingConfiguration
    /// `endpoint`) send their own traces: OTLP gRPC and HTTP (`/v1/traces`), plaintext, with the
    /// webhook's bearer token; forwarded to the raw store (the `otlp` output) and joined to the
    /// object traces by audit ID. Unset: not served.
    #[arg(long, env = "KASCADE_COMPONENT_TRACES_LISTEN")]
    pub component_traces_listen: Option<SocketAddr>,
    /// Encoded bytes of component trace requests waiting to be forwarded; past it requests are
    /// refused (gRPC UNAVAILABLE, HTTP 503: the components retry) and counted as shed.
    #[arg(long, default_value_t = collect().component_traces_queue_bytes, env = "KASCADE_COMPONENT_TRACES_QUEUE_BYTES")]
    pub component_traces_queue_bytes: usize,
    /// Address of the admission source: a validating admission webhook (HTTPS with --tls-cert-file;
    /// `POST /admission/CLUSTER`) that records writes where the apiserver's audit log cannot be
    /// received (managed clusters). It always allows; each admitted write is shown once the
    /// list-watch (--watch-cluster) delivers the version it stored. Unset: not served.
    #[arg(long, env = "KASCADE_ADMISSION_LISTEN", requires = "tls_cert_file")]
    pub admission_listen: Option<SocketAddr>,
    /// Require the apiserver's client certificate, signed by this CA, on the admission webhook.
    #[arg(
        long,
        env = "KASCADE_ADMISSION_CLIENT_CA_FILE",
        requires = "admission_listen"
    )]
    pub admission_client_ca_file: Option<PathBuf>,
    /// How long an admitted write waits for the list-watch to deliver the version it stored;
    /// then it is shown as not stored (refused after admission, or lost to a conflict).
    #[arg(long, default_value_t = collect().admission_persist_wait.into(), env = "KASCADE_ADMISSION_PERSIST_WAIT")]
    pub admission_persist_wait: Duration,
    /// Admitted writes waiting for the list-watch at most; beyond, the oldest are dropped (counted
    /// in kascade_admission_requests_total{outcome="shed"}).
    #[arg(long, default_value_t = collect().admission_max_pending, value_parser = clap::value_parser!(u64).range(1..), env = "KASCADE_ADMISSION_MAX_PENDING")]
    pub admission_max_pending: u64,
    /// Bytes of the waiting writes' AdmissionReviews held at most; beyond, the oldest are dropped
    /// (counted as shed). Default 256 MiB.
    #[arg(long, default_value_t = collect().admission_max_pending_bytes, value_parser = clap::value_parser!(u64).range(1..), env = "KASCADE_ADMISSION_MAX_PENDING_BYTES")]
    pub admission_max_pending_bytes: u64,
    #[command(flatten)]
    pub span_cache: Box<SpanCacheArgs>,
    #[command(flatten)]
    pub watch: WatchArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: Box<ExportArgs>,
}

impl From<CollectArgs> for CollectConfig {
    fn from(a: CollectArgs) -> Self {
        CollectConfig {
            listen: a.listen,
            admin_listen: a.admin_listen,
            cluster: a.cluster,
            webhook_token_file: a.webhook_token_file,
            tls_cert_file: a.tls_cert_file,
            tls_key_file: a.tls_key_file,
            tls_client_ca_file: a.tls_client_ca_file,
            max_body_bytes: a.max_body_bytes,
            admission_wait: a.admission_wait.into(),
            header_read_timeout: a.header_read_timeout.into(),
            body_read_timeout: a.body_read_timeout.into(),
            max_connections: a.max_connections,
            max_intake_bytes: a.max_intake_bytes,
            spool_dir: a.spool_dir,
            spool_bytes: a.spool_bytes,
            spool_context_bytes: a.spool_context_bytes,
            no_spool: a.no_spool,
            no_cascade_metrics: a.no_cascade_metrics,
            component_traces_listen: a.component_traces_listen,
            component_traces_queue_bytes: a.component_traces_queue_bytes,
            admission_listen: a.admission_listen,
            admission_client_ca_file: a.admission_client_ca_file,
            admission_persist_wait: a.admission_persist_wait.into(),
            admission_max_pending: a.admission_max_pending,
            admission_max_pending_bytes: a.admission_max_pending_bytes,
            span_cache: (*a.span_cache).into(),
            watch: a.watch.into(),
            pipeline: a.pipeline.into(),
            export: (*a.export).into(),
        }
    }
}

fn watch() -> WatchersConfig {
    WatchersConfig::default()
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
    #[arg(long, value_delimiter = ',', default_values_t = watch().exclude, env = "KASCADE_WATCH_EXCLUDE")]
    pub watch_exclude: Vec<String>,
    /// Watch Kubernetes Events and show them on the objects they are about.
    #[arg(long, default_value_t = watch().events, action = clap::ArgAction::Set, env = "KASCADE_WATCH_EVENTS")]
    pub watch_events: bool,
    /// Events older than this, listed when a watch (re)starts, are not shown (again).
    #[arg(long, default_value_t = watch().event_max_age.into(), env = "KASCADE_EVENT_MAX_AGE")]
    pub event_max_age: Duration,
    /// How long a change seen by the watch waits for the audit event of the same write before it is shown alone.
    #[arg(long, default_value_t = watch().audit_wait.into(), env = "KASCADE_WATCH_AUDIT_WAIT")]
    pub watch_audit_wait: Duration,
    /// Entries of the audit/watch ledger (≈ 300 bytes each, kept 10 minutes) that lets a write seen by both be shown once; the default is full at ≈ 440 writes/s.
    #[arg(long, default_value_t = watch().ledger_entries, value_parser = clap::value_parser!(u64).range(1..), env = "KASCADE_WATCH_LEDGER_ENTRIES")]
    pub watch_ledger_entries: u64,
}

impl From<WatchArgs> for WatchersConfig {
    fn from(a: WatchArgs) -> Self {
        WatchersConfig {
            clusters: a.clusters,
            resources: a.watch_resources,
            exclude: a.watch_exclude,
            events: a.watch_events,
            event_max_age: a.event_max_age.into(),
            audit_wait: a.watch_audit_wait.into(),
            ledger_entries: a.watch_ledger_entries,
        }
    }
}

fn span_cache() -> SpanCacheConfig {
    SpanCacheConfig::default()
}

/// The span cache of `collect`: local to the process, or shared by replicas
/// through etcd (see `aggregate::span_cache`).
#[derive(Args, Debug, Clone)]
pub struct SpanCacheArgs {
    /// etcd client URLs (comma-separated) of a span cache shared by replicas, so each object span and link is emitted once; empty: local cache only.
    #[arg(long, value_delimiter = ',', env = "KASCADE_ETCD_ENDPOINTS")]
    pub etcd_endpoints: Vec<String>,
    /// Prefix of every etcd key kascade writes.
    #[arg(long, default_value_t = span_cache().etcd_prefix, env = "KASCADE_ETCD_PREFIX")]
    pub etcd_prefix: String,
    /// Longest one etcd request may take at first; a request that timed out is retried with twice as long each time (up to 8x).
    #[arg(long, default_value_t = span_cache().etcd_timeout.into(), env = "KASCADE_ETCD_TIMEOUT")]
    pub etcd_timeout: Duration,
    /// How long a failed etcd request (timeout, unreachable, unavailable) is retried, with the same reservation, before kascade falls back to its local span cache.
    #[arg(long, default_value_t = span_cache().etcd_retry_for.into(), env = "KASCADE_ETCD_RETRY_FOR")]
    pub etcd_retry_for: Duration,
    /// While falling back, how often etcd is probed.
    #[arg(long, default_value_t = span_cache().etcd_probe_interval.into(), env = "KASCADE_ETCD_PROBE_INTERVAL")]
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

impl From<SpanCacheArgs> for SpanCacheConfig {
    fn from(a: SpanCacheArgs) -> Self {
        SpanCacheConfig {
            etcd_endpoints: a.etcd_endpoints,
            etcd_prefix: a.etcd_prefix,
            etcd_timeout: a.etcd_timeout.into(),
            etcd_retry_for: a.etcd_retry_for.into(),
            etcd_probe_interval: a.etcd_probe_interval.into(),
            etcd_ca_file: a.etcd_ca_file,
            etcd_cert_file: a.etcd_cert_file,
            etcd_key_file: a.etcd_key_file,
            etcd_username: a.etcd_username,
            etcd_password_file: a.etcd_password_file,
        }
    }
}

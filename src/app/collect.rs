//! `kascade collect`: the audit webhook, the optional list-watches, and the
//! pipeline behind them, built from a [`CollectConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use super::{PipelineConfig, SpanCacheConfig, shutdown_signal};
use crate::export::config::ExportSettings;
use crate::source::spool::SpoolConfig;
use crate::source::watch::{self, DEFAULT_WATCH_EXCLUDE, WatchConfig};

mod build;

pub use crate::source::server::{serve_webhook, tls_config};
pub use build::{CollectApps, build};

/// Everything `kascade collect` runs with. The defaults are the flags'
/// defaults, except that `spool_dir` is found from the environment when it
/// is `None` (see [`CollectConfig::spool_config`]).
///
/// ```no_run
/// use kascade::app::collect::{self, CollectConfig};
///
/// # async fn run() -> anyhow::Result<()> {
/// let mut config = CollectConfig::default()
///     .cluster("prod-eu")
///     .webhook_token_file("/etc/kascade/token")
///     .spool_dir("/var/lib/kascade/spool");
/// config.pipeline = config.pipeline.workers(4);
/// collect::run(config).await
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CollectConfig {
    /// Address of the audit webhook.
    pub listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    pub admin_listen: SocketAddr,
    /// Cluster name for events posted to /audit (without a cluster in the path).
    pub cluster: String,
    /// File holding the bearer token the apiserver must send.
    pub webhook_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate (PEM chain) and `tls_key_file`.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Require client certificates signed by this CA (mutual TLS).
    pub tls_client_ca_file: Option<PathBuf>,
    /// Largest accepted webhook body, in bytes, after decompression.
    pub max_body_bytes: usize,
    /// How long a batch may wait for room in a full queue before a 429.
    pub admission_wait: Duration,
    /// A client must send its request headers within this time.
    pub header_read_timeout: Duration,
    /// A client must send its whole request body within this time.
    pub body_read_timeout: Duration,
    /// Webhook connections open at once; one more is answered 429.
    pub max_connections: usize,
    /// Bytes of webhook bodies being read and decoded at once; a request
    /// that would pass it is answered 429 before its body is read.
    pub max_intake_bytes: u64,
    /// Durable intake directory; `None`: under `$XDG_STATE_HOME` (or `~/.local/state`).
    pub spool_dir: Option<PathBuf>,
    /// Most bytes of accepted batches waiting on disk for export.
    pub spool_bytes: u64,
    /// Bytes of exported batches kept on disk (at most 15 minutes' worth)
    /// and read again at a restart, sending nothing, so that the batches
    /// replayed after them are shown as an uninterrupted run shows them; 0:
    /// none.
    pub spool_context_bytes: u64,
    /// Keep accepted batches in memory only (wins over `spool_dir`).
    pub no_spool: bool,
    /// No live cascade metrics (`kascade_propagation_seconds`,
    /// `kascade_cascade_completion_seconds`): the collector then skips
    /// building a change record per write (docs/benchmarks.md: what they cost).
    pub no_cascade_metrics: bool,
    /// Where Kubernetes components send their own traces (OTLP gRPC and
    /// HTTP); `None`: not served.
    pub component_traces_listen: Option<SocketAddr>,
    /// Encoded bytes of component trace requests waiting to be forwarded.
    pub component_traces_queue_bytes: usize,
    /// Where the admission source's validating webhook listens (HTTPS with
    /// `tls_cert_file`), for clusters whose audit log cannot be received;
    /// `None`: not served. Needs the cluster's list-watch.
    pub admission_listen: Option<SocketAddr>,
    /// Require the apiserver's client certificate, signed by this CA, on
    /// the admission webhook.
    pub admission_client_ca_file: Option<PathBuf>,
    /// How long an admitted write waits for the list-watch to show it
    /// stored before it is shown as not stored.
    pub admission_persist_wait: Duration,
    /// Admitted writes waiting for the list-watch at most; beyond, the
    /// oldest are dropped (counted).
    pub admission_max_pending: u64,
    /// Bytes of the waiting writes' reviews held at most; beyond, the
    /// oldest are dropped (counted).
    pub admission_max_pending_bytes: u64,
    /// Where object spans are remembered between writes (local or etcd).
    pub span_cache: SpanCacheConfig,
    /// The list-watch of every resource, and the Event watch.
    pub watch: WatchersConfig,
    /// The processing pipeline: windows, redaction, rules, bounds.
    pub pipeline: PipelineConfig,
    /// Where spans go (OTLP, OTLP/JSON files) and how they are batched.
    pub export: ExportSettings,
}

impl Default for CollectConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8090)),
            admin_listen: SocketAddr::from(([0, 0, 0, 0], 8091)),
            cluster: "default".to_string(),
            webhook_token_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            max_body_bytes: 32 << 20,
            admission_wait: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: crate::source::server::DEFAULT_MAX_CONNECTIONS,
            max_intake_bytes: 512 << 20,
            spool_dir: None,
            spool_bytes: 1 << 30,
            spool_context_bytes: crate::source::spool::DEFAULT_CONTEXT_BYTES,
            no_spool: false,
            no_cascade_metrics: false,
            component_traces_listen: None,
            component_traces_queue_bytes: 64 << 20,
            admission_listen: None,
            admission_client_ca_file: None,
            admission_persist_wait: Duration::from_secs(30),
            admission_max_pending: 100_000,
            admission_max_pending_bytes: 256 << 20,
            span_cache: SpanCacheConfig::default(),
            watch: WatchersConfig::default(),
            pipeline: PipelineConfig::default(),
            export: ExportSettings::default(),
        }
    }
}

/// List-watch of objects and Events of other clusters, in addition to the
/// audit webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchersConfig {
    /// `(cluster name, kubeconfig)` of every watched cluster.
    pub clusters: Vec<(String, PathBuf)>,
    /// Resources watched (`resource` or `resource.group`); empty: every
    /// listable, watchable one.
    pub resources: Vec<String>,
    /// Resources never watched.
    pub exclude: Vec<String>,
    /// Watch Kubernetes Events too.
    pub events: bool,
    /// Events older than this, listed when a watch (re)starts, are not shown.
    pub event_max_age: Duration,
    /// How long a change seen by the watch waits for the audit event of the
    /// same write before it is shown alone.
    pub audit_wait: Duration,
    /// Entries of the audit/watch ledger.
    pub ledger_entries: u64,
}

impl Default for WatchersConfig {
    fn default() -> Self {
        let pipeline = PipelineConfig::default();
        Self {
            clusters: Vec::new(),
            resources: Vec::new(),
            exclude: DEFAULT_WATCH_EXCLUDE
                .iter()
                .map(|s| s.to_string())
                .collect(),
            events: true,
            event_max_age: Duration::from_secs(10 * 60),
            audit_wait: pipeline.watch_audit_wait,
            ledger_entries: pipeline.watch_ledger_entries,
        }
    }
}

impl CollectConfig {
    /// Sets the cluster name of events posted to /audit.
    pub fn cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// Requires this bearer token (read from `file`) on every webhook request.
    pub fn webhook_token_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.webhook_token_file = Some(file.into());
        self
    }

    /// Keeps the durable intake in this directory.
    pub fn spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }

    /// Keeps accepted batches in memory only.
    pub fn no_spool(mut self) -> Self {
        self.no_spool = true;
        self
    }

    /// Turns the live cascade metrics off.
    pub fn no_cascade_metrics(mut self) -> Self {
        self.no_cascade_metrics = true;
        self
    }

    /// Watches a cluster through `kubeconfig`.
    pub fn watch_cluster(
        mut self,
        name: impl Into<String>,
        kubeconfig: impl Into<PathBuf>,
    ) -> Self {
        self.watch.clusters.push((name.into(), kubeconfig.into()));
        self
    }

    /// The durable intake's settings; `None` with `no_spool`.
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
        cfg.context_bytes = self.spool_context_bytes;
        if self.spool_bytes < self.max_body_bytes as u64 {
            bail!(
                "--spool-bytes {} is smaller than --max-body-bytes {}: a full-size batch could never be accepted",
                self.spool_bytes,
                self.max_body_bytes
            );
        }
        Ok(Some(cfg))
    }

    /// The pipeline settings with those the watches decide.
    fn pipeline_config(&self) -> PipelineConfig {
        PipelineConfig {
            watch_audit_wait: self.watch.audit_wait,
            has_watch: !self.watch.clusters.is_empty(),
            watch_ledger_entries: self.watch.ledger_entries,
            ..self.pipeline.clone()
        }
    }
}

/// Runs the collector until SIGINT or SIGTERM, then processes and exports
/// what was accepted.
pub async fn run(config: CollectConfig) -> anyhow::Result<()> {
    match crate::source::server::raise_open_files_limit() {
        Ok((before, after)) => {
            if after > before {
                tracing::info!(
                    from = before,
                    to = after,
                    "raised the open-files limit to its hard limit"
                );
            }
            if (config.max_connections as u64).saturating_add(256) > after {
                tracing::warn!(
                    max_connections = config.max_connections,
                    open_files = after,
                    "--max-connections leaves under 256 of the open-files limit for everything else: lower it, or raise the hard limit (ulimit -Hn)"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-files limit"),
    }
    if config.tls_cert_file.is_some() != config.tls_key_file.is_some() {
        bail!("--tls-cert-file and --tls-key-file go together");
    }
    if config.tls_client_ca_file.is_some() && config.tls_cert_file.is_none() {
        bail!("--tls-client-ca-file needs --tls-cert-file");
    }
    for (cluster, kubeconfig) in &config.watch.clusters {
        watch::check_kubeconfig(cluster, kubeconfig)?;
    }
    if config.admission_listen.is_some() && config.tls_cert_file.is_none() {
        bail!(
            "--admission-listen needs --tls-cert-file and --tls-key-file: the apiserver calls admission webhooks over HTTPS only"
        );
    }
    if config.admission_client_ca_file.is_some() && config.admission_listen.is_none() {
        bail!("--admission-client-ca-file needs --admission-listen");
    }
    let (apps, pipeline) = build(&config)?;
    let roles = config
        .span_cache
        .role_election(&config.pipeline, pipeline.metrics.clone())?;
    let mut watchers = Vec::new();
    for (cluster, kubeconfig) in &config.watch.clusters {
        let cfg = WatchConfig {
            cluster: cluster.clone(),
            kubeconfig: kubeconfig.clone(),
            include: config.watch.resources.iter().cloned().collect(),
            exclude: config.watch.exclude.iter().cloned().collect(),
            event_max_age: config.watch.event_max_age,
            watch_events: config.watch.events,
            admissions: apps.admissions.clone(),
        };
        watchers.push(tokio::spawn(watch::supervise(
            cfg,
            pipeline.intake.clone(),
            pipeline.metrics.clone(),
            roles.clone(),
        )));
    }
    let components = match (config.component_traces_listen, apps.component_traces) {
        (Some(addr), Some(app)) => {
            let listener = std::net::TcpListener::bind(addr)
                .with_context(|| format!("cannot listen on --component-traces-listen {addr}"))?;
            tracing::info!(component_traces_listen = %addr, "serving component traces (OTLP gRPC and HTTP /v1/traces)");
            let limits = crate::source::server::ConnectionLimits {
                header_read_timeout: config.header_read_timeout,
                max_connections: config.max_connections,
                refused: pipeline.metrics.webhook_connections_refused.clone(),
            };
            Some(tokio::spawn(async move {
                serve_webhook(listener, None, app, limits, shutdown_signal()).await
            }))
        }
        _ => None,
    };
    let admission = match (
        config.admission_listen,
        apps.admission,
        &config.tls_cert_file,
        &config.tls_key_file,
    ) {
        (Some(addr), Some(app), Some(cert), Some(key)) => {
            let listener = std::net::TcpListener::bind(addr)
                .with_context(|| format!("cannot listen on --admission-listen {addr}"))?;
            let tls = tls_config(cert, key, config.admission_client_ca_file.as_deref())?;
            tracing::info!(admission_listen = %addr, mtls = config.admission_client_ca_file.is_some(),
                "serving the admission source's validating webhook (POST /admission/{{cluster}})");
            let limits = crate::source::server::ConnectionLimits {
                header_read_timeout: config.header_read_timeout,
                max_connections: config.max_connections,
                refused: pipeline.metrics.webhook_connections_refused.clone(),
            };
            Some(tokio::spawn(async move {
                serve_webhook(listener, Some(tls), app, limits, shutdown_signal()).await
            }))
        }
        _ => None,
    };
    let listener = std::net::TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let tls = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => {
            Some(tls_config(cert, key, config.tls_client_ca_file.as_deref())?)
        }
        _ => {
            if config.webhook_token_file.is_some() {
                tracing::warn!(
                    "--webhook-token-file without --tls-cert-file: the apiserver sends bearer tokens only over HTTPS"
                );
            }
            None
        }
    };
    // The admin listener serves /readyz: it starts last, so that ready means
    // every listener is bound (a client told "ready" is never refused).
    let admin_listener = tokio::net::TcpListener::bind(config.admin_listen)
        .await
        .with_context(|| format!("cannot listen on --admin-listen {}", config.admin_listen))?;
    tracing::info!(admin_listen = %config.admin_listen, "serving /metrics, /healthz, /readyz");
    let admin = tokio::spawn(async move {
        axum::serve(admin_listener, apps.admin)
            .with_graceful_shutdown(shutdown_signal())
            .await
    });
    tracing::info!(listen = %config.listen, cluster = %config.cluster, https = tls.is_some(), mtls = config.tls_client_ca_file.is_some(),
        "kascade collect is serving the audit webhook");
    serve_webhook(
        listener,
        tls,
        apps.audit,
        crate::source::server::ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            max_connections: config.max_connections,
            refused: pipeline.metrics.webhook_connections_refused.clone(),
        },
        shutdown_signal(),
    )
    .await
    .with_context(|| format!("webhook server on {} failed", config.listen))?;
    tracing::info!("shutting down: processing and exporting what was accepted");
    for w in &watchers {
        w.abort();
    }
    pipeline.finish().await;
    admin.abort();
    if let Some(c) = components {
        c.abort();
    }
    if let Some(a) = admission {
        a.abort();
    }
    Ok(())
}

#[cfg(test)]
mod tests;

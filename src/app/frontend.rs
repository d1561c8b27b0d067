//! `kascade frontend`: assembled traces for the Jaeger UI (Jaeger remote
//! storage API v2 over gRPC) and `/redirect`, built from a
//! [`FrontendServerConfig`].

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::shutdown_signal;
use crate::client_tls::{ClientTls, FileSetting};
use crate::frontend::assemble::{DEFAULT_SHARED_CLASSES, Limits, Scope};
use crate::frontend::http::{RedirectState, router};
use crate::frontend::raw::{JaegerGrpc, JaegerHttp, JaegerStore, RawStore as _};
use crate::frontend::service::JaegerStorage;
use crate::frontend::{Frontend, FrontendConfig};
use crate::metrics::FrontendMetrics;

/// How linked objects are followed and shown (shared by `frontend` and `trace`).
///
/// ```no_run
/// use std::time::Duration;
/// use kascade::app::AssemblyConfig;
///
/// let assembly = AssemblyConfig::default()
///     .window(Duration::from_secs(15 * 60))
///     .max_depth(4);
/// let frontend = assembly.frontend_config()?;
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssemblyConfig {
    /// Window width the collector uses; whole minutes.
    pub window: Duration,
    /// Scope when the search does not name one.
    pub default_scope: Scope,
    /// Levels of links followed up and down from the searched object.
    pub max_depth: usize,
    /// Objects in one assembled trace.
    pub max_objects: usize,
    /// Bytes of object histories one assembly loads.
    pub max_trace_bytes: u64,
    /// Raw reads in flight at once.
    pub concurrency: usize,
    /// Link classes whose targets are shared by many objects: shown below,
    /// never climbed from.
    pub shared_classes: Vec<String>,
    /// Link classes whose objects are grouped under a virtual span.
    pub group_classes: Vec<String>,
    /// Objects of one resource and link class shown under one object;
    /// the rest are summarised by one span (0 shows all).
    pub max_siblings: usize,
}

impl Default for AssemblyConfig {
    fn default() -> Self {
        let limits = Limits::default();
        Self {
            window: Duration::from_secs(30 * 60),
            default_scope: Scope::Full,
            max_depth: limits.max_depth,
            max_objects: limits.max_objects,
            max_trace_bytes: limits.max_bytes,
            concurrency: limits.concurrency,
            shared_classes: DEFAULT_SHARED_CLASSES.map(str::to_string).to_vec(),
            group_classes: Vec::new(),
            max_siblings: crate::frontend::display::DEFAULT_MAX_SIBLINGS,
        }
    }
}

impl AssemblyConfig {
    /// Sets the window width (the collector's).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets the scope of searches that name none.
    pub fn default_scope(mut self, scope: Scope) -> Self {
        self.default_scope = scope;
        self
    }

    /// Sets how many levels of links are followed up and down.
    pub fn max_depth(mut self, levels: usize) -> Self {
        self.max_depth = levels;
        self
    }

    /// Sets the bytes of object histories one assembly loads (the
    /// memory one trace in flight holds is about 2.5 times this).
    pub fn max_trace_bytes(mut self, bytes: u64) -> Self {
        self.max_trace_bytes = bytes;
        self
    }

    /// Sets how many objects of one resource and link class are shown
    /// under one object before the rest are summarised (0 shows all).
    pub fn max_siblings(mut self, objects: usize) -> Self {
        self.max_siblings = objects;
        self
    }

    /// The frontend's settings (checks that the window is whole minutes).
    pub fn frontend_config(&self) -> anyhow::Result<FrontendConfig> {
        if self.window.as_secs() < 60 || !self.window.as_secs().is_multiple_of(60) {
            bail!(
                "--window {}: must be whole minutes (and equal the collector's --window)",
                humantime::format_duration(self.window)
            );
        }
        Ok(FrontendConfig {
            window: self.window,
            default_scope: self.default_scope,
            limits: Limits {
                max_depth: self.max_depth.max(1),
                max_objects: self.max_objects.max(1),
                max_bytes: self.max_trace_bytes,
                concurrency: self.concurrency.max(1),
                shared_classes: self.shared_classes.iter().cloned().collect(),
            },
            group_classes: self.group_classes.iter().cloned().collect::<HashSet<_>>(),
            max_siblings: self.max_siblings,
            ..FrontendConfig::default()
        })
    }
}

/// Everything `kascade frontend` runs with.
///
/// ```no_run
/// use kascade::app::frontend::{self, FrontendServerConfig};
///
/// # async fn run() -> anyhow::Result<()> {
/// let config = FrontendServerConfig::default()
///     .jaeger_url("http://jaeger-raw:16686")
///     .ui_url("https://jaeger.example");
/// frontend::run(config).await
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendServerConfig {
    /// Address of the Jaeger remote storage API v2 (gRPC).
    pub grpc_listen: SocketAddr,
    /// Address of /redirect, /healthz and /readyz.
    pub http_listen: SocketAddr,
    /// Query URL of the Jaeger that stores the collector's raw spans.
    pub jaeger_url: String,
    /// Remote-storage gRPC endpoint of the same Jaeger: when set, raw
    /// traces are read from it, many per request, instead of from
    /// `jaeger_url` one GET each.
    pub jaeger_grpc_url: Option<String>,
    /// CA certificates (PEM) trusted for an https:// `jaeger_url` or
    /// `jaeger_grpc_url`.
    pub jaeger_ca_file: Option<PathBuf>,
    /// Service name of the raw spans (the collector's service name).
    pub raw_service: String,
    /// Timeout of one raw read.
    pub raw_timeout: Duration,
    /// Raw object windows read per search.
    pub raw_search_limit: usize,
    /// Service name of kube-apiserver's own traces in the raw store;
    /// empty: they are not joined.
    pub component_service: String,
    /// Service name of the kubelets' traces in the raw store; empty: no join.
    pub kubelet_service: String,
    /// Public URL of the Jaeger UI backed by this frontend.
    pub ui_url: String,
    /// Cluster assumed by /redirect links that name none.
    pub default_cluster: String,
    /// Clusters listed as operations before a search has seen them.
    pub clusters: Vec<String>,
    /// How long an assembled trace stays cached for reloads.
    pub cache_ttl: Duration,
    /// Bytes of assembled traces kept in the cache.
    pub cache_bytes: u64,
    /// Longest one trace's assembly may take.
    pub assembly_timeout: Duration,
    /// Assemblies in flight at once.
    pub max_assemblies: usize,
    /// Searches reading the raw store at once.
    pub max_searches: usize,
    /// Longest a search queues for one of `max_searches`.
    pub search_wait: Duration,
    /// Bytes one search's answer may stream.
    pub max_search_bytes: u64,
    /// How traces are assembled: bounds, cache, display defaults.
    pub assembly: AssemblyConfig,
}

impl Default for FrontendServerConfig {
    fn default() -> Self {
        Self {
            grpc_listen: SocketAddr::from(([0, 0, 0, 0], 17271)),
            http_listen: SocketAddr::from(([0, 0, 0, 0], 8092)),
            jaeger_url: "http://127.0.0.1:16686".to_string(),
            jaeger_grpc_url: None,
            jaeger_ca_file: None,
            raw_service: "kascade".to_string(),
            raw_timeout: Duration::from_secs(10),
            raw_search_limit: 500,
            component_service: crate::frontend::components::APISERVER_SERVICE.to_string(),
            kubelet_service: crate::frontend::components::KUBELET_SERVICE.to_string(),
            ui_url: "http://localhost:16686".to_string(),
            default_cluster: "default".to_string(),
            clusters: Vec::new(),
            cache_ttl: Duration::from_secs(10 * 60),
            cache_bytes: crate::frontend::DEFAULT_CACHE_BYTES,
            assembly_timeout: Duration::from_secs(30),
            max_assemblies: crate::frontend::DEFAULT_MAX_ASSEMBLIES,
            max_searches: crate::frontend::DEFAULT_MAX_SEARCHES,
            search_wait: Duration::from_secs(60),
            max_search_bytes: crate::frontend::DEFAULT_MAX_SEARCH_BYTES,
            assembly: AssemblyConfig::default(),
        }
    }
}

impl FrontendServerConfig {
    /// Reads raw spans from the Jaeger query at `url`.
    pub fn jaeger_url(mut self, url: impl Into<String>) -> Self {
        self.jaeger_url = url.into();
        self
    }

    /// Reads raw spans over the Jaeger remote-storage gRPC API at `url`
    /// (Jaeger v2's `remote_storage` extension) instead of the query HTTP API.
    pub fn jaeger_grpc_url(mut self, url: impl Into<String>) -> Self {
        self.jaeger_grpc_url = Some(url.into());
        self
    }

    /// Sets the public URL of the Jaeger UI that `/redirect` sends to.
    pub fn ui_url(mut self, url: impl Into<String>) -> Self {
        self.ui_url = url.into();
        self
    }

    /// Sets how linked objects are followed and shown.
    pub fn assembly(mut self, assembly: AssemblyConfig) -> Self {
        self.assembly = assembly;
        self
    }
}

/// How soon the frontend's freed pages go back to the OS
/// ([`crate::return_freed_pages_after`]).
const RETURN_FREED_PAGES_AFTER_MS: u32 = 1000;

/// Serves the frontend until SIGINT or SIGTERM.
pub async fn run(config: FrontendServerConfig) -> anyhow::Result<()> {
    match crate::return_freed_pages_after(RETURN_FREED_PAGES_AFTER_MS) {
        Ok(ms) => tracing::debug!(dirty_decay_ms = ms, "freed pages go back to the OS after"),
        Err(e) => tracing::warn!(error = %e, "cannot set how soon freed pages go back to the OS"),
    }
    reqwest::Url::parse(&config.jaeger_url)
        .with_context(|| format!("--jaeger-url {:?} is not a URL", config.jaeger_url))?;
    let mut cfg = config.assembly.frontend_config()?;
    cfg.raw_search_limit = config.raw_search_limit.max(1);
    cfg.component_service = config.component_service.clone();
    cfg.kubelet_service = config.kubelet_service.clone();
    cfg.cache_ttl = config.cache_ttl;
    cfg.cache_bytes = config.cache_bytes;
    cfg.clusters = config.clusters.clone();
    cfg.assembly_timeout = config.assembly_timeout;
    cfg.max_assemblies = config.max_assemblies;
    cfg.max_searches = config.max_searches;
    cfg.search_wait = config.search_wait;
    cfg.max_search_bytes = config.max_search_bytes;
    // The server answers from the encoded stream only.
    cfg.keep_assembly = false;
    cfg.raw_read_reuse = crate::frontend::RAW_READ_REUSE;
    let tls = ClientTls {
        ca_file: config
            .jaeger_ca_file
            .as_ref()
            .map(|p| FileSetting::new(p, "--jaeger-ca-file")),
        identity: None,
    };
    let metrics = Arc::new(FrontendMetrics::default());
    let store = Arc::new(match &config.jaeger_grpc_url {
        Some(url) => JaegerStore::Grpc(
            JaegerGrpc::connect(url, &config.raw_service, config.raw_timeout, &tls)
                .with_context(|| format!("--jaeger-grpc-url {url}"))?
                .counting(metrics.raw_requests.clone()),
        ),
        None => JaegerStore::Http(
            JaegerHttp::with_tls(
                &config.jaeger_url,
                &config.raw_service,
                config.raw_timeout,
                &tls,
            )
            .with_context(|| format!("--jaeger-url {}", config.jaeger_url))?
            .counting(metrics.raw_requests.clone()),
        ),
    });
    let raw_store = store.describe();
    let frontend = Arc::new(Frontend::with_metrics(store, cfg, metrics));
    let http = router(Arc::new(RedirectState {
        frontend: frontend.clone(),
        ui_url: config.ui_url.clone(),
        default_cluster: config.default_cluster.clone(),
    }));
    // Both listeners are bound before either serves: /readyz answering means
    // the gRPC port accepts too.
    let grpc_incoming = tonic::transport::server::TcpIncoming::bind(config.grpc_listen)
        .with_context(|| format!("cannot listen on --grpc-listen {}", config.grpc_listen))?
        .with_nodelay(Some(true));
    let listener = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .with_context(|| format!("cannot listen on --http-listen {}", config.http_listen))?;
    let http_task = tokio::spawn(async move { axum::serve(listener, http).await });
    let (traces, deps) = JaegerStorage::new(frontend).servers();
    tracing::info!(grpc_listen = %config.grpc_listen, http_listen = %config.http_listen, raw_store = %raw_store,
        "kascade frontend is serving the Jaeger remote storage API");
    tonic::transport::Server::builder()
        .trace_fn(crate::self_trace::grpc_request_span)
        .add_service(traces)
        .add_service(deps)
        .serve_with_incoming_shutdown(grpc_incoming, shutdown_signal())
        .await
        .with_context(|| format!("gRPC server on {} failed", config.grpc_listen))?;
    http_task.abort();
    Ok(())
}

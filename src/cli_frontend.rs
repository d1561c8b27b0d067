//! Command line of the read side: `kascade frontend` (Jaeger remote storage
//! + redirect) and `kascade trace` (offline: audit log → assembled tree).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::aggregate::redact::Redactor;
use crate::cli::{PipelineArgs, load_rules};
use crate::frontend::assemble::{Limits, Scope};
use crate::frontend::display::Mode;
use crate::frontend::http::{RedirectState, router};
use crate::frontend::offline::store_from_audit_lines;
use crate::frontend::raw::{JaegerHttp, TimeRange, from_nanos};
use crate::frontend::service::JaegerStorage;
use crate::frontend::text::{TextOptions, render_text};
use crate::frontend::{Frontend, FrontendConfig, SearchQuery};
use anyhow::{Context, bail};
use clap::Args;

/// How linked objects are followed and shown (shared by `frontend` and `trace`).
#[derive(Args, Debug, Clone)]
pub struct AssemblyArgs {
    /// Window width the collector uses (its --window); whole minutes.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration, env = "KASCADE_WINDOW")]
    pub window: Duration,
    /// Scope when the search does not name one: full, ancestors, descendants, object.
    #[arg(long, default_value = "full", env = "KASCADE_DEFAULT_SCOPE")]
    pub default_scope: Scope,
    /// Levels of links followed up and down from the searched object.
    #[arg(long, default_value_t = 8, env = "KASCADE_MAX_DEPTH")]
    pub max_depth: usize,
    /// Objects in one assembled trace; further links are noted on the root span.
    #[arg(long, default_value_t = 5000, env = "KASCADE_MAX_OBJECTS")]
    pub max_objects: usize,
    /// Raw reads in flight at once.
    #[arg(long, default_value_t = 16, env = "KASCADE_CONCURRENCY")]
    pub concurrency: usize,
    /// Link classes whose targets are shared by many objects: shown below, never climbed from (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "node,configmap,secret,serviceaccount,storageclass,backend",
        env = "KASCADE_SHARED_CLASSES"
    )]
    pub shared_classes: Vec<String>,
    /// Link classes whose objects are grouped under a virtual span named by the class (comma-separated).
    #[arg(long, value_delimiter = ',', env = "KASCADE_GROUP_CLASSES")]
    pub group_classes: Vec<String>,
}

impl AssemblyArgs {
    pub fn config(&self) -> anyhow::Result<FrontendConfig> {
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
                concurrency: self.concurrency.max(1),
                shared_classes: self.shared_classes.iter().cloned().collect(),
            },
            group_classes: self.group_classes.iter().cloned().collect::<HashSet<_>>(),
            ..FrontendConfig::default()
        })
    }
}

#[derive(Args, Debug)]
pub struct FrontendArgs {
    /// Address of the Jaeger remote storage API v2 (gRPC) that Jaeger query uses.
    #[arg(long, default_value = "0.0.0.0:17271", env = "KASCADE_GRPC_LISTEN")]
    pub grpc_listen: SocketAddr,
    /// Address of /redirect, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8092", env = "KASCADE_HTTP_LISTEN")]
    pub http_listen: SocketAddr,
    /// Query URL of the Jaeger that stores the collector's raw spans.
    #[arg(
        long,
        default_value = "http://127.0.0.1:16686",
        env = "KASCADE_JAEGER_URL"
    )]
    pub jaeger_url: String,
    /// CA certificates (PEM) trusted for an https:// --jaeger-url instead of the system's.
    #[arg(long, env = "KASCADE_JAEGER_CA_FILE")]
    pub jaeger_ca_file: Option<PathBuf>,
    /// Service name of the raw spans (the collector's --service-name).
    #[arg(long, default_value = "kascade", env = "KASCADE_RAW_SERVICE")]
    pub raw_service: String,
    /// Timeout of one raw read.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "KASCADE_RAW_TIMEOUT")]
    pub raw_timeout: Duration,
    /// Raw object windows read per search.
    #[arg(long, default_value_t = 500, env = "KASCADE_RAW_SEARCH_LIMIT")]
    pub raw_search_limit: usize,
    /// Public URL of the Jaeger UI backed by this frontend (target of /redirect).
    #[arg(long, default_value = "http://localhost:16686", env = "KASCADE_UI_URL")]
    pub ui_url: String,
    /// Cluster assumed by /redirect links that name none.
    #[arg(long, default_value = "default", env = "KASCADE_DEFAULT_CLUSTER")]
    pub default_cluster: String,
    /// Clusters listed as operations before a search has seen them (comma-separated).
    #[arg(long, value_delimiter = ',', env = "KASCADE_CLUSTERS")]
    pub clusters: Vec<String>,
    /// How long an assembled trace stays cached for reloads.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, env = "KASCADE_CACHE_TTL")]
    pub cache_ttl: Duration,
    /// Assembled traces kept in the cache.
    #[arg(long, default_value_t = 1000, env = "KASCADE_CACHE_ENTRIES")]
    pub cache_entries: u64,
    #[command(flatten)]
    pub assembly: AssemblyArgs,
}

pub async fn run_frontend(args: FrontendArgs) -> anyhow::Result<()> {
    reqwest::Url::parse(&args.jaeger_url)
        .with_context(|| format!("--jaeger-url {:?} is not a URL", args.jaeger_url))?;
    let mut cfg = args.assembly.config()?;
    cfg.raw_search_limit = args.raw_search_limit.max(1);
    cfg.cache_ttl = args.cache_ttl;
    cfg.cache_entries = args.cache_entries;
    cfg.clusters = args.clusters.clone();
    let tls = crate::client_tls::ClientTls {
        ca_file: args
            .jaeger_ca_file
            .as_ref()
            .map(|p| crate::client_tls::FileSetting::new(p, "--jaeger-ca-file")),
        identity: None,
    };
    let store = Arc::new(
        JaegerHttp::with_tls(&args.jaeger_url, &args.raw_service, args.raw_timeout, &tls)
            .with_context(|| format!("--jaeger-url {}", args.jaeger_url))?,
    );
    let frontend = Arc::new(Frontend::new(store, cfg));
    let http = router(Arc::new(RedirectState {
        frontend: frontend.clone(),
        ui_url: args.ui_url.clone(),
        default_cluster: args.default_cluster.clone(),
    }));
    let listener = tokio::net::TcpListener::bind(args.http_listen)
        .await
        .with_context(|| format!("cannot listen on --http-listen {}", args.http_listen))?;
    let http_task = tokio::spawn(async move { axum::serve(listener, http).await });
    let (traces, deps) = JaegerStorage::new(frontend).servers();
    tracing::info!(grpc_listen = %args.grpc_listen, http_listen = %args.http_listen, jaeger_url = %args.jaeger_url,
        "kascade frontend is serving the Jaeger remote storage API");
    tonic::transport::Server::builder()
        .trace_fn(crate::telemetry::grpc_request_span)
        .add_service(traces)
        .add_service(deps)
        .serve_with_shutdown(args.grpc_listen, crate::cli::shutdown_signal())
        .await
        .with_context(|| format!("gRPC server on {} failed", args.grpc_listen))?;
    http_task.abort();
    Ok(())
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Audit log files (JSON lines) to build the trace from.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Resource of the object, e.g. deployments.
    #[arg(long)]
    pub resource: String,
    /// Name of the object.
    #[arg(long)]
    pub name: String,
    /// Namespace of the object (omit for cluster-scoped objects).
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// API group of the object (empty for the core group); default: any.
    #[arg(long)]
    pub group: Option<String>,
    /// Cluster name given to the audit log's objects.
    #[arg(long, default_value = "default", env = "KASCADE_CLUSTER")]
    pub cluster: String,
    /// Scope of the tree: full, ancestors, descendants, object; default: --default-scope.
    #[arg(long)]
    pub scope: Option<Scope>,
    /// `text` (a tree for the terminal) or `otlp-json` (the assembled trace in a display mode).
    #[arg(long, default_value = "text")]
    pub format: String,
    /// Display mode for --format otlp-json: tracing, tree, timeline, grouped.
    #[arg(long, default_value = "tracing")]
    pub mode: Mode,
    /// Changed paths shown per write in text output.
    #[arg(long, default_value_t = 8)]
    pub max_diff_lines: usize,
    /// Show the create/delete snapshots in text output.
    #[arg(long)]
    pub snapshots: bool,
    /// Directory of relation rule files (*.yaml); default: the rules built into the binary.
    #[arg(long, env = "KASCADE_RULES")]
    pub rules: Option<PathBuf>,
    #[command(flatten)]
    pub assembly: AssemblyArgs,
}

/// The collector's pipeline settings at their defaults.
#[derive(clap::Parser)]
struct DefaultPipeline {
    #[command(flatten)]
    pipeline: PipelineArgs,
}

pub async fn run_trace(args: TraceArgs) -> anyhow::Result<()> {
    if args.format != "text" && args.format != "otlp-json" {
        bail!("--format {:?}: expected text or otlp-json", args.format);
    }
    let mut lines = Vec::new();
    for f in &args.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        lines.extend(text.lines().map(str::to_string));
    }
    let mut pipeline = <DefaultPipeline as clap::Parser>::parse_from(["kascade"]).pipeline;
    pipeline.window = args.assembly.window;
    pipeline.rules = args.rules.clone();
    let rules = Arc::new(load_rules(pipeline.rules.as_deref())?);
    let redact =
        regex::Regex::new(&pipeline.redact_paths).context("--redact-paths is not a valid regex")?;
    let (store, errors) = store_from_audit_lines(
        lines,
        &args.cluster,
        rules,
        &pipeline.filter()?,
        pipeline.processor_config()?,
        Redactor::new(Some(redact)),
    )
    .await;
    for e in errors.iter().take(10) {
        eprintln!("skipped line {e}");
    }
    let Some((first, last)) = store.time_span() else {
        bail!("the audit log yielded no spans");
    };
    let store = Arc::new(store);
    let frontend = Frontend::new(store, args.assembly.config()?);
    let mut tags = vec![
        ("cluster".to_string(), args.cluster.clone()),
        ("resource".to_string(), args.resource.clone()),
        ("namespace".to_string(), args.namespace.clone()),
        ("name".to_string(), args.name.clone()),
    ];
    if let Some(g) = &args.group {
        tags.push(("group".to_string(), g.clone()));
    }
    let found = frontend
        .search(&SearchQuery {
            mode: args.mode,
            scope: args.scope.unwrap_or(args.assembly.default_scope),
            tags,
            range: TimeRange::new(from_nanos(first), from_nanos(last)),
            limit: 10,
        })
        .await?;
    let Some(trace) = found.first() else {
        bail!(
            "no {} {}{} in the audit log (cluster {})",
            args.resource,
            if args.namespace.is_empty() {
                String::new()
            } else {
                format!("{}/", args.namespace)
            },
            args.name,
            args.cluster
        );
    };
    if args.format == "text" {
        print!(
            "{}",
            render_text(
                &trace.assembly,
                &TextOptions {
                    max_diff_lines: args.max_diff_lines,
                    snapshots: args.snapshots,
                }
            )
        );
    } else {
        let data = opentelemetry_proto::tonic::trace::v1::TracesData {
            resource_spans: trace.resource_spans.clone(),
        };
        println!("{}", serde_json::to_string(&data)?);
    }
    Ok(())
}

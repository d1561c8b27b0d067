//! The collector's parts, built from a [`CollectConfig`]: the pipeline,
//! the durable spool, the webhook's state and the HTTP apps that serve
//! them (the audit webhook, the admin endpoints, the component traces'
//! intake, the admission source).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use prometheus_client::registry::Registry;

use super::super::Pipeline;
use super::CollectConfig;
use crate::flow::{SentLinks, SentLinksMetrics};
use crate::metrics::Metrics;
use crate::source::admission;
use crate::source::spool::Spool;
use crate::source::{validate_cluster_name, webhook};

/// The collector's HTTP apps: the audit webhook, the admin endpoints and,
/// with `component_traces_listen`, the component traces' intake.
pub struct CollectApps {
    /// The intake: audit events (`/audit`, `/audit/{cluster}`), OTLP logs
    /// (`/v1/logs`, gRPC) and mergelogs (`/cpid/mergelogs`).
    pub audit: axum::Router,
    /// `/metrics`, `/healthz`, `/readyz`, `/intake`.
    pub admin: axum::Router,
    /// Kubernetes components' own traces (OTLP), when served.
    pub component_traces: Option<axum::Router>,
    /// The admission source's webhook (`/admission`, `/admission/{cluster}`),
    /// when served.
    pub admission: Option<axum::Router>,
    /// Its admitted writes, for the list-watch to pair.
    pub(crate) admissions: Option<Arc<crate::source::admission::Admissions>>,
}

/// Builds the collector's HTTP apps and the pipeline behind them (used by
/// [`run`](super::run) and by tests that serve them on an ephemeral port).
pub fn build(config: &CollectConfig) -> anyhow::Result<(CollectApps, Pipeline)> {
    validate_cluster_name(&config.cluster).map_err(|e| anyhow::anyhow!("--cluster: {e}"))?;
    if config.max_intake_bytes < 2 * config.max_body_bytes as u64 {
        bail!(
            "--max-intake-bytes {} is smaller than twice --max-body-bytes {}: a full-size gzipped body (and its inflated copy) could never be read",
            config.max_intake_bytes,
            config.max_body_bytes
        );
    }
    let token = match &config.webhook_token_file {
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
    let pipeline_config = config.pipeline_config();
    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let propagation = Arc::new(crate::metrics::PropagationMetrics::default());
    propagation.register(&mut registry);
    let cascades = Arc::new(crate::metrics::CascadeMetrics::default());
    cascades.register(&mut registry);
    let filter = pipeline_config.filter()?;
    let (spool, spooled) = match config.spool_config()? {
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
            tracing::info!(dir = %dir.display(), max_bytes = config.spool_bytes, "durable intake: accepted batches are flushed to disk before the 200");
            (Some(spool), pending)
        }
    };
    let spans = config.span_cache.build(&pipeline_config, metrics.clone())?;
    let sent_links = match &spool {
        None => None,
        Some(spool) => Some(Arc::new(
            SentLinks::open(
                spool.dir(),
                pipeline_config.span_cache_ttl(),
                SentLinksMetrics {
                    persisted: metrics.sent_links_persisted.clone(),
                    dropped: metrics.sent_links_dropped.clone(),
                },
            )
            .context("--spool-dir")?,
        )),
    };
    let mut pipeline = Pipeline::start_with_sinks(
        &pipeline_config,
        &config.export,
        spans,
        metrics.clone(),
        if config.no_cascade_metrics {
            Vec::new()
        } else {
            vec![
                Arc::new(crate::analysis::live::PropagationSink::new(propagation)),
                Arc::new(crate::analysis::cascade::CascadeTracker::new(
                    crate::analysis::cascade::TrackerConfig::default(),
                    cascades,
                )),
            ]
        },
        sent_links.clone(),
    )?;
    pipeline.spool = spool.clone();
    let (replayed_tx, replayed) = tokio::sync::watch::channel(spool.is_none());
    let state = Arc::new(webhook::WebhookState {
        intake: pipeline.intake.clone(),
        filter,
        default_cluster: config.cluster.clone(),
        token,
        max_body_bytes: config.max_body_bytes,
        body_timeout: config.body_read_timeout,
        admission_wait: config.admission_wait,
        decode_slots: Arc::new(tokio::sync::Semaphore::new(pipeline_config.workers.max(1))),
        intake_bytes: Arc::new(tokio::sync::Semaphore::new(
            usize::try_from(config.max_intake_bytes.div_ceil(1024))
                .unwrap_or(usize::MAX)
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        spool: spool.clone(),
        replayed,
        metrics,
        registry,
        processor: pipeline.processor.clone(),
        arrivals: Default::default(),
        admission_source: config.admission_listen.is_some(),
        export_progress: pipeline.export_progress.clone(),
        configured_clusters: {
            let mut names = vec![config.cluster.clone()];
            for (c, _) in &config.watch.clusters {
                if !names.contains(c) {
                    names.push(c.clone());
                }
            }
            names
        },
        watched_clusters: config
            .watch
            .clusters
            .iter()
            .map(|(c, _)| c.clone())
            .collect(),
    });
    if let Some(spool) = spool {
        tokio::spawn(webhook::replay_spool(state.clone(), spooled, replayed_tx));
        tokio::spawn(webhook::release_spool(
            spool,
            sent_links,
            pipeline.intake.clone(),
            pipeline.export_progress.clone(),
            Duration::from_millis(500),
        ));
    }
    let component_traces = match config.component_traces_listen {
        None => None,
        Some(addr) => {
            let export = config.export.resolve()?;
            let Some((forwarder, _task)) = crate::export::start_forwarder(
                &export,
                config.component_traces_queue_bytes,
                state.metrics.clone(),
            )?
            else {
                bail!(
                    "--component-traces-listen {addr}: component traces are forwarded to the raw store, and no --output is otlp"
                );
            };
            Some(webhook::component_traces_router(
                state.clone(),
                Arc::new(forwarder),
            ))
        }
    };
    let admissions = match config.admission_listen {
        None => None,
        Some(addr) => {
            if config.watch.clusters.is_empty() {
                bail!(
                    "--admission-listen {addr}: an admitted write is shown once the list-watch shows what it stored; add the cluster's --watch-cluster"
                );
            }
            let admissions = admission::Admissions::new(
                admission::AdmissionConfig {
                    default_cluster: config.cluster.clone(),
                    max_body_bytes: config.max_body_bytes,
                    body_timeout: config.body_read_timeout,
                    persist_wait: config.admission_persist_wait,
                    max_pending: usize::try_from(config.admission_max_pending)
                        .unwrap_or(usize::MAX),
                    max_pending_bytes: usize::try_from(config.admission_max_pending_bytes)
                        .unwrap_or(usize::MAX),
                },
                pipeline.intake.clone(),
                state.filter.clone(),
                state.metrics.clone(),
                state.arrivals.clone(),
                admission::IntakeLimits {
                    intake_bytes: state.intake_bytes.clone(),
                    decode_slots: state.decode_slots.clone(),
                },
            );
            tokio::spawn(admission::expire_loop(admissions.clone()));
            Some(admissions)
        }
    };
    Ok((
        CollectApps {
            audit: webhook::audit_router(state.clone()),
            admin: webhook::admin_router(state),
            component_traces,
            admission: admissions
                .as_ref()
                .map(|a| admission::admission_router(a.clone())),
            admissions,
        },
        pipeline,
    ))
}

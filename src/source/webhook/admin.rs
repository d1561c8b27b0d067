//! The admin listener: metrics, health, readiness and the intake report,
//! on their own listener so that probes and Prometheus need no client
//! certificate even when the webhook requires one.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{WebhookState, error};
use crate::metrics::Metrics;

/// Metrics and health, on their own listener: probes and Prometheus need no
/// client certificate even when the webhook requires one.
pub(crate) fn admin_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/intake", get(intake))
        .with_state(state)
}

async fn metrics(State(st): State<Arc<WebhookState>>) -> Response {
    st.processor.update_gauges();
    st.metrics.queue_depth.set(st.intake.depth() as i64);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &st.registry) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}"),
        );
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// `GET /intake`: per-cluster intake state and the export's health, as
/// JSON (`kascade doctor` reads it; schema in `source::arrivals`).
async fn intake(State(st): State<Arc<WebhookState>>) -> Response {
    let (clusters, untracked_events) = st.arrivals.snapshot();
    let watch_forbidden = st
        .watched_clusters
        .iter()
        .map(|c| {
            let n = st
                .metrics
                .watch_forbidden
                .get_or_create(&Metrics::cluster(c))
                .get();
            (c.clone(), n)
        })
        .collect();
    let report = crate::source::arrivals::IntakeReport {
        schema: crate::source::arrivals::INTAKE_SCHEMA.to_string(),
        now_ms: crate::flow::unix_ms(std::time::SystemTime::now()),
        default_cluster: st.default_cluster.clone(),
        configured_clusters: st.configured_clusters.clone(),
        watched_clusters: st.watched_clusters.clone(),
        watch_forbidden,
        clusters,
        untracked_events,
        outputs: st.export_progress.health(),
        admission_source: st.admission_source,
        admitted: if st.admission_source {
            st.watched_clusters
                .iter()
                .map(|c| {
                    let by_outcome = crate::metrics::AdmittedWriteOutcome::ALL
                        .iter()
                        .map(|o| {
                            let n = st
                                .metrics
                                .admitted_writes
                                .get_or_create(&crate::metrics::AdmittedWriteLabel {
                                    cluster: c.clone(),
                                    outcome: *o,
                                })
                                .get();
                            (o.as_str().to_string(), n)
                        })
                        .collect();
                    (c.clone(), by_outcome)
                })
                .collect()
        } else {
            Default::default()
        },
    };
    axum::Json(report).into_response()
}

/// Not ready while the queue is nearly full, so a load balancer sends the
/// apiserver's retries to another replica.
async fn readyz(State(st): State<Arc<WebhookState>>) -> Response {
    let depth = st.intake.depth();
    let cap = st.intake.capacity();
    if depth * 10 >= cap * 9 {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("queue {depth}/{cap} is nearly full"),
        )
    } else {
        (StatusCode::OK, "ok\n").into_response()
    }
}

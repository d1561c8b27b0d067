//! `kascade collect`'s HTTP server: the audit webhook (`POST /audit`,
//! `POST /audit/{cluster}`), Prometheus `/metrics`, `/healthz` and `/readyz`.

use std::borrow::Cow;
use std::io::Read;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use prometheus_client::registry::Registry;

use super::audit::{AuditFilter, decode_event_list};
use crate::aggregate::{AdmitError, Intake, Processor};
use crate::metrics::Metrics;

pub struct WebhookState {
    pub intake: Intake,
    pub filter: AuditFilter,
    pub default_cluster: String,
    /// Bearer token the apiserver must present, if set.
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// How long a batch may wait for room in a full queue before 429.
    pub admission_wait: std::time::Duration,
    /// When a refusal was last logged: under sustained overload every
    /// apiserver retry is refused, so refusals are logged at most every 10 s
    /// (each is counted in kascade_audit_events_rejected_total).
    pub last_refusal_log: std::sync::Mutex<Option<std::time::Instant>>,
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    pub processor: Arc<Processor>,
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into() + "\n").into_response()
}

/// The audit webhook: `POST /audit` and `POST /audit/{cluster}`.
pub fn audit_router(state: Arc<WebhookState>) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/audit", post(audit_default))
        .route("/audit/{cluster}", post(audit_cluster))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Metrics and health, on their own listener: probes and Prometheus need no
/// client certificate even when the webhook requires one.
pub fn admin_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn audit_default(
    State(st): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let cluster = st.default_cluster.clone();
    handle_audit(&st, &cluster, &headers, &body).await
}

async fn audit_cluster(
    State(st): State<Arc<WebhookState>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = super::validate_cluster_name(&cluster) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    handle_audit(&st, &cluster, &headers, &body).await
}

fn authorized(st: &WebhookState, headers: &HeaderMap) -> bool {
    let Some(expected) = &st.token else {
        return true;
    };
    let Some(got) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Constant-time comparison: the token is a credential.
    got.len() == expected.len()
        && got
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A refusal: status and message for the client.
type Refusal = (StatusCode, String);

fn decompress<'a>(
    st: &WebhookState,
    headers: &HeaderMap,
    body: &'a Bytes,
) -> Result<Cow<'a, [u8]>, Refusal> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    match encoding {
        "identity" | "" => Ok(Cow::Borrowed(&body[..])),
        "gzip" => {
            let mut out = Vec::new();
            let limit = st.max_body_bytes as u64;
            flate2::read::GzDecoder::new(&body[..])
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    (
                        StatusCode::BAD_REQUEST,
                        format!("body is not valid gzip: {e}"),
                    )
                })?;
            if out.len() as u64 > limit {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("decompressed body exceeds {limit} bytes (--max-body-bytes)"),
                ));
            }
            Ok(Cow::Owned(out))
        }
        other => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {other:?} is not supported (use gzip or none)"),
        )),
    }
}

async fn handle_audit(
    st: &WebhookState,
    cluster: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    if !authorized(st, headers) {
        st.metrics
            .events_rejected
            .get_or_create(&Metrics::reason("unauthorized"))
            .inc();
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    let body = match decompress(st, headers, body) {
        Ok(b) => b,
        Err((status, msg)) => {
            st.metrics
                .events_rejected
                .get_or_create(&Metrics::reason("bad_body"))
                .inc();
            return error(status, msg);
        }
    };
    let batch = match decode_event_list(&body) {
        Ok(b) => b,
        Err(e) => {
            st.metrics
                .events_rejected
                .get_or_create(&Metrics::reason("malformed"))
                .inc();
            tracing::warn!(cluster, error = %e, "rejected audit webhook body");
            return error(StatusCode::BAD_REQUEST, e);
        }
    };
    let source = Metrics::source("webhook");
    st.metrics
        .events_received
        .get_or_create(&source)
        .inc_by((batch.events.len() + batch.errors.len()) as u64);
    if !batch.errors.is_empty() {
        st.metrics
            .events_rejected
            .get_or_create(&Metrics::reason("malformed"))
            .inc_by(batch.errors.len() as u64);
    }
    let accepted: Vec<_> = batch
        .events
        .into_iter()
        .filter_map(|ev| super::accept(ev, cluster, &st.filter, &st.metrics))
        .collect();
    let n = accepted.len();
    match st.intake.submit_batch(accepted, st.admission_wait).await {
        Ok(()) => {
            st.metrics
                .events_accepted
                .get_or_create(&source)
                .inc_by(n as u64);
        }
        Err(e) => {
            st.metrics
                .events_rejected
                .get_or_create(&Metrics::reason("overload"))
                .inc_by(n as u64);
            let status = match e {
                AdmitError::Full { .. } => StatusCode::TOO_MANY_REQUESTS,
                AdmitError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                AdmitError::Closed => StatusCode::SERVICE_UNAVAILABLE,
            };
            let log_now = st.last_refusal_log.lock().is_ok_and(|mut last| {
                let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10));
                if due {
                    *last = Some(std::time::Instant::now());
                }
                due
            });
            if log_now {
                tracing::warn!(cluster, events = n, error = %e,
                    "refused an audit batch (further refusals within 10 s are only counted)");
            }
            let mut resp = error(status, e.to_string());
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
    }
    if batch.errors.is_empty() {
        (StatusCode::OK, format!("accepted {n} events\n")).into_response()
    } else {
        tracing::warn!(cluster, bad = batch.errors.len(), first = %batch.errors[0], "audit batch had malformed items");
        error(
            StatusCode::BAD_REQUEST,
            format!(
                "accepted {n} events; {} malformed items were skipped:\n{}",
                batch.errors.len(),
                batch.errors.join("\n")
            ),
        )
    }
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

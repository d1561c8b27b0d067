//! `kascade collect`'s HTTP server: the audit webhook (`POST /audit`,
//! `POST /audit/{cluster}`; also OTLP/HTTP logs of audit log lines, `POST
//! /v1/logs[/{cluster}]`), mergelogs of instrumented controllers
//! (`POST /cpid/mergelogs[/{cluster}]`, same authentication), Prometheus `/metrics`, `/healthz` and `/readyz`.

use std::borrow::Cow;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;
use tracing::{Instrument as _, field};

use super::audit::AuditFilter;
use super::spool::{BodyEncoding, Spool, SpoolError};
use crate::flow::{Accepted, AdmitError, ExportProgress, Gauges, Intake};
use crate::internal_events::{AuditEventsRejected, InternalEvent};
use crate::metrics::{Metrics, RejectReason, Source};
use crate::self_trace::TARGET;

mod admin;
mod body;
mod component_traces;
mod grpc;
mod mergelogs;
mod otlp_logs;
mod restart;

pub(crate) use admin::admin_router;
use body::*;
pub(in crate::source) use body::{read_bounded, try_reserve_intake};
pub(crate) use component_traces::component_traces_router;
pub(crate) use restart::{release_spool, replay_spool};

#[cfg(fuzzing)]
pub(crate) mod fuzzing;

pub(crate) struct WebhookState {
    pub intake: Intake,
    pub filter: AuditFilter,
    pub default_cluster: String,
    /// Bearer token the apiserver must present, if set.
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// How long a client may take to send its whole body (slow senders
    /// would otherwise hold a connection and its buffer indefinitely).
    pub body_timeout: Duration,
    /// How long a batch may wait for room in a full queue before 429.
    pub admission_wait: Duration,
    /// Bytes of bodies being read and decoded at once, in KiB permits
    /// (`--max-intake-bytes`; see [`body::reserve_intake`]).
    pub intake_bytes: Arc<Semaphore>,
    /// Bounds the batches being decompressed and decoded at once; that work
    /// runs on blocking threads so `/healthz` and other requests stay quick.
    pub decode_slots: Arc<Semaphore>,
    /// The durable intake: a batch is on disk before it is answered 200.
    pub spool: Option<Arc<Spool>>,
    /// True once the start has fed the spool's batches through the pipeline
    /// again (at once without a spool): new batches wait for it, so that
    /// they are processed after what came before them.
    pub replayed: tokio::sync::watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    /// The processor's gauges, refreshed on each scrape.
    pub processor: Arc<dyn Gauges>,
    /// What has arrived per cluster (`GET /intake`, for `kascade doctor`).
    pub arrivals: Arc<super::arrivals::Arrivals>,
    /// The admission source is served (`--admission-listen`).
    pub admission_source: bool,
    /// The export outputs' progress and health.
    pub export_progress: Arc<ExportProgress>,
    /// `--cluster` and the `--watch-cluster` names.
    pub configured_clusters: Vec<String>,
    /// The `--watch-cluster` names.
    pub watched_clusters: Vec<String>,
}

/// The answer to a batch the intake did not admit.
fn admit_status(e: &AdmitError) -> StatusCode {
    match e {
        AdmitError::Full { .. } => StatusCode::TOO_MANY_REQUESTS,
        AdmitError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        AdmitError::Closed => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, msg.into() + "\n").into_response()
}

/// The audit webhook: `POST /audit` and `POST /audit/{cluster}`. The bearer
/// token is checked before a byte of the body is read.
pub(crate) fn audit_router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/audit", post(audit_default))
        .route("/audit/{cluster}", post(audit_cluster))
        .route("/v1/logs", post(otlp_logs_default))
        .route("/v1/logs/{cluster}", post(otlp_logs_cluster))
        .route(otlp_logs::GRPC_LOGS_PATH, post(otlp_logs_grpc))
        .route("/cpid/mergelogs", post(mergelogs::mergelogs_default))
        .route(
            "/cpid/mergelogs/{cluster}",
            post(mergelogs::mergelogs_cluster),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

async fn authenticate(State(st): State<Arc<WebhookState>>, req: Request, next: Next) -> Response {
    if !authorized(&st, req.headers()) {
        let msg = "missing or wrong bearer token";
        AuditEventsRejected {
            reason: RejectReason::Unauthorized,
            events: 1,
            cluster: "",
            error: msg,
        }
        .emit(&st.metrics);
        return if grpc::is_grpc(req.headers()) {
            grpc::grpc_error(grpc::GrpcCode::Unauthenticated, msg)
        } else {
            error(StatusCode::UNAUTHORIZED, msg)
        };
    }
    next.run(req).await
}

async fn audit_default(
    State(st): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cluster = st.default_cluster.clone();
    handle_audit(&st, &cluster, &headers, body, Carrier::Audit).await
}

async fn audit_cluster(
    State(st): State<Arc<WebhookState>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = super::validate_cluster_name(&cluster) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    handle_audit(&st, &cluster, &headers, body, Carrier::Audit).await
}

/// `POST /v1/logs` (OTLP/HTTP logs, the cluster from `--cluster`).
async fn otlp_logs_default(
    State(st): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let format = match otlp_logs::Format::of(&headers) {
        Ok(f) => f,
        Err(r) => return refuse(&st, &st.default_cluster, RejectReason::BadBody, r),
    };
    let cluster = st.default_cluster.clone();
    handle_audit(&st, &cluster, &headers, body, Carrier::OtlpLogs(format)).await
}

/// OTLP/gRPC logs (`LogsService/Export`, what the OpenTelemetry
/// Collector's `otlp` exporter sends); the cluster from the
/// `kascade-cluster` header, else `--cluster`. Answered as gRPC, refusals
/// included (a full queue is `UNAVAILABLE`: the exporter retries).
async fn otlp_logs_grpc(
    State(st): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cluster = match headers.get(component_traces::CLUSTER_HEADER) {
        None => st.default_cluster.clone(),
        Some(v) => match v
            .to_str()
            .map_err(|_| "not text".to_string())
            .and_then(|name| super::validate_cluster_name(name).map(|()| name.to_string()))
        {
            Ok(name) => name,
            Err(e) => {
                return grpc::grpc_error(
                    grpc::GrpcCode::InvalidArgument,
                    &format!("{}: {e}", component_traces::CLUSTER_HEADER),
                );
            }
        },
    };
    let resp = handle_audit(
        &st,
        &cluster,
        &headers,
        body,
        Carrier::OtlpLogs(otlp_logs::Format::Grpc),
    )
    .await;
    if grpc::is_grpc(resp.headers()) {
        resp
    } else {
        grpc::as_grpc(resp).await
    }
}

/// `POST /v1/logs/{cluster}`.
async fn otlp_logs_cluster(
    State(st): State<Arc<WebhookState>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = super::validate_cluster_name(&cluster) {
        return error(StatusCode::BAD_REQUEST, e);
    }
    let format = match otlp_logs::Format::of(&headers) {
        Ok(f) => f,
        Err(r) => return refuse(&st, &cluster, RejectReason::BadBody, r),
    };
    handle_audit(&st, &cluster, &headers, body, Carrier::OtlpLogs(format)).await
}

fn authorized(st: &WebhookState, headers: &HeaderMap) -> bool {
    let Some(expected) = &st.token else {
        return true;
    };
    // The scheme is case-insensitive (RFC 7235 §2.1), then one or more spaces.
    let Some(got) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim_start_matches(' '))
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
pub(in crate::source) type Refusal = (StatusCode, String);

fn refuse(
    st: &WebhookState,
    cluster: &str,
    reason: RejectReason,
    (status, msg): Refusal,
) -> Response {
    AuditEventsRejected {
        reason,
        events: 1,
        cluster,
        error: &msg,
    }
    .emit(&st.metrics);
    error(status, msg)
}

/// One `webhook request` span of self-tracing (crate::telemetry) per batch,
/// with `decode` and `admit` below it, and `process` once it is admitted.
async fn handle_audit(
    st: &Arc<WebhookState>,
    cluster: &str,
    headers: &HeaderMap,
    body: Body,
    carrier: Carrier,
) -> Response {
    let span = tracing::info_span!(target: TARGET, "webhook request",
        otel.kind = "server", cluster, events = field::Empty,
        http.response.status_code = field::Empty,
        otel.status_code = field::Empty, otel.status_description = field::Empty);
    let response = answer_audit(st, cluster, headers, body, carrier, &span)
        .instrument(span.clone())
        .await;
    if !span.is_disabled() {
        let status = response.status();
        span.record("http.response.status_code", status.as_u16());
        if status.is_client_error() || status.is_server_error() {
            crate::self_trace::record_error(&span, &format!("answered {status}"));
        }
    }
    response
}

/// How a body carries its audit events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carrier {
    /// The audit webhook's `EventList`, or the events as shippers send them
    /// (`exports::decode_body`).
    Audit,
    /// OTLP/HTTP logs whose records' bodies are audit log lines
    /// (`otlp_logs`), answered as OTLP answers.
    OtlpLogs(otlp_logs::Format),
}

/// What became of a batch that was read.
enum Outcome {
    /// `accepted` events queued; `malformed` items skipped, one message each.
    Queued {
        accepted: usize,
        malformed: Vec<String>,
    },
    Refused(Response),
}

async fn answer_audit(
    st: &Arc<WebhookState>,
    cluster: &str,
    headers: &HeaderMap,
    body: Body,
    carrier: Carrier,
    request_span: &tracing::Span,
) -> Response {
    match queue_batch(st, cluster, headers, body, carrier, request_span).await {
        Outcome::Refused(resp) => resp,
        Outcome::Queued {
            accepted,
            malformed,
        } => {
            if !malformed.is_empty() {
                tracing::warn!(cluster, bad = malformed.len(), first = %crate::messages::clip_message(malformed[0].clone()), "audit batch had malformed items");
            }
            match carrier {
                Carrier::Audit if malformed.is_empty() => {
                    (StatusCode::OK, format!("accepted {accepted} events\n")).into_response()
                }
                Carrier::Audit => error(
                    StatusCode::BAD_REQUEST,
                    crate::messages::clip_message(format!(
                        "accepted {accepted} events; {} malformed items were skipped:\n{}",
                        malformed.len(),
                        malformed.join("\n")
                    )),
                ),
                Carrier::OtlpLogs(format) => otlp_logs::answer(format, &malformed),
            }
        }
    }
}

/// Reads, decodes and queues one batch (on disk first, with a spool).
async fn queue_batch(
    st: &Arc<WebhookState>,
    cluster: &str,
    headers: &HeaderMap,
    body: Body,
    carrier: Carrier,
    request_span: &tracing::Span,
) -> Outcome {
    let encoding = match carrier {
        // gRPC compresses the message, not the body: `grpc-encoding`.
        Carrier::OtlpLogs(otlp_logs::Format::Grpc) => match grpc::grpc_encoding(headers) {
            "gzip" => Ok(BodyEncoding::Gzip),
            "" | "identity" => Ok(BodyEncoding::Identity),
            other => Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "grpc-encoding {} is not supported (use gzip or none)",
                    crate::messages::quote(other)
                ),
            )),
        },
        _ => body_encoding(headers),
    };
    let encoding = match encoding {
        Ok(e) => e,
        Err(r) => return Outcome::Refused(refuse(st, cluster, RejectReason::BadBody, r)),
    };
    // Held until the batch is queued or refused: its bytes, and what
    // decoding makes of them, count against --max-intake-bytes.
    let _intake = match reserve_intake(st, cluster, headers, encoding) {
        Ok(permit) => permit,
        Err(resp) => return Outcome::Refused(*resp),
    };
    let raw = match read_body(st, headers, body).await {
        Ok(b) => b,
        Err(r) => return Outcome::Refused(refuse(st, cluster, RejectReason::BadBody, r)),
    };
    // OTLP records become the audit lines they hold: the spool keeps (and
    // a restart replays) a body of lines, as a shipper's.
    let (raw, encoding, mut unreadable) = match carrier {
        Carrier::Audit => (raw, encoding, Vec::new()),
        Carrier::OtlpLogs(format) => {
            match otlp_logs::lines_off_runtime(st, format, encoding, raw).await {
                Ok((lines, unreadable)) => {
                    otlp_logs::count_unreadable(st, cluster, &unreadable);
                    (lines, BodyEncoding::Identity, unreadable)
                }
                Err(r) => return Outcome::Refused(refuse(st, cluster, RejectReason::BadBody, r)),
            }
        }
    };
    let Decoded {
        accepted,
        mut errors,
    } = if raw.is_empty() {
        Decoded {
            accepted: Vec::new(),
            errors: Vec::new(),
        }
    } else {
        match decode_off_runtime(st, cluster, encoding, raw.clone(), false).await {
            Ok(d) => d,
            Err((status, msg)) => return Outcome::Refused(error(status, msg)),
        }
    };
    unreadable.append(&mut errors);
    let n = accepted.len();
    request_span.record("events", n);
    if n > 0
        && let Err(resp) = admit(st, cluster, encoding, &raw, accepted, request_span)
            .instrument(tracing::info_span!(target: TARGET, "admit", events = n))
            .await
    {
        return Outcome::Refused(resp);
    }
    st.metrics
        .events_accepted
        .get_or_create(&Metrics::source(Source::Webhook))
        .inc_by(n as u64);
    Outcome::Queued {
        accepted: n,
        malformed: unreadable,
    }
}

/// Room in the queue, then the batch on disk (durable intake), then into the
/// queue: an answer of 200 means the batch survives a crash.
async fn admit(
    st: &WebhookState,
    cluster: &str,
    encoding: BodyEncoding,
    raw: &Bytes,
    mut accepted: Vec<Accepted>,
    request_span: &tracing::Span,
) -> Result<(), Response> {
    let n = accepted.len();
    let refused = |status: StatusCode, msg: String| {
        AuditEventsRejected {
            reason: RejectReason::Overload,
            events: n as u64,
            cluster,
            error: &msg,
        }
        .emit(&st.metrics);
        let mut resp = error(status, msg);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        resp
    };
    // After what a previous run left (restart context, unexported batches):
    // waited for as for room in the queue, holding none of it.
    if !*st.replayed.borrow() {
        let mut replayed = st.replayed.clone();
        let done = tokio::time::timeout(st.admission_wait, replayed.wait_for(|done| *done)).await;
        if !matches!(done, Ok(Ok(_))) {
            return Err(refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "still replaying the batches a previous run left in the spool; retry".to_string(),
            ));
        }
    }
    let reserved = match st.intake.reserve(n, st.admission_wait).await {
        Ok(r) => r,
        Err(e) => return Err(refused(admit_status(&e), e.to_string())),
    };
    let seq = match &st.spool {
        None => None,
        Some(spool) => match spool.append(cluster, encoding, raw.clone()).await {
            Ok(seq) => Some(seq),
            Err(e @ SpoolError::Full { .. }) => {
                return Err(refused(StatusCode::TOO_MANY_REQUESTS, e.to_string()));
            }
            Err(e) => return Err(refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
        },
    };
    // Ends when the last of the batch's events is processed (each holds it).
    let process = tracing::info_span!(target: TARGET, parent: request_span, "process", events = n);
    if !process.is_disabled() {
        for item in &mut accepted {
            item.batch_span = process.clone();
        }
    }
    if let (Some(spool), Some(seq)) = (&st.spool, seq) {
        spool.processing(seq);
    }
    reserved.send(accepted);
    if let (Some(spool), Some(seq)) = (&st.spool, seq) {
        spool.mark_enqueued(seq);
    }
    Ok(())
}

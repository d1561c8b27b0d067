//! The admission source (`kascade collect --admission-listen`): a
//! validating admission webhook that records the writes of clusters whose
//! audit log kascade cannot receive (managed control planes).
//!
//! It always allows, answering before anything is processed, so a slow or
//! failing kascade never slows or blocks a write (and the webhook is
//! installed with `failurePolicy: Ignore` and a short timeout). A webhook
//! sees a write before it is stored, so the admitted write waits
//! ([`ledger`]) for the list-watch of the same cluster to deliver the
//! version it stored; it is then processed as the audit event the
//! apiserver would have logged ([`event`]): its span lasts from admission
//! to watch delivery and carries `audit.recorded_by = admission-webhook`.
//! A write never seen stored is shown as refused after admission.

#[cfg(test)]
mod bounds_tests;
mod event;
#[cfg(fuzzing)]
pub(crate) mod fuzzing;
mod ledger;
mod review;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::audit::AuditFilter;
use crate::flow::{Intake, WatchChange, Work};
use crate::internal_events::{AdmissionRequestHandled, AdmittedWriteShown, InternalEvent as _};
use crate::metrics::{AdmissionRequestOutcome, AdmittedWriteOutcome, Metrics};

pub(crate) use ledger::Shown;
use ledger::{AdmittedWrites, NotHeld};
use review::Review;

/// The admission source's settings.
#[derive(Clone, Debug)]
pub(crate) struct AdmissionConfig {
    /// The cluster of `POST /admission` (`/admission/{cluster}` names its own).
    pub default_cluster: String,
    /// Largest AdmissionReview read (the object and its old version).
    pub max_body_bytes: usize,
    /// How long a review's body may take to arrive (`--body-read-timeout`).
    pub body_timeout: Duration,
    /// How long an admitted write waits for the list-watch to show it
    /// stored before it is shown as not stored.
    pub persist_wait: Duration,
    /// Admitted writes waiting at most; beyond, the oldest are dropped.
    pub max_pending: usize,
    /// Bytes of their reviews held at most; beyond, the oldest are dropped.
    pub max_pending_bytes: usize,
}

/// The admitted writes and where they go once the watch has shown what
/// became of them: shared by the webhook, the watchers and the expiry
/// task.
pub(crate) struct Admissions {
    writes: AdmittedWrites,
    config: AdmissionConfig,
    intake: Intake,
    filter: AuditFilter,
    metrics: Arc<Metrics>,
    /// What arrived per cluster (`GET /intake`): admitted writes count as
    /// the audit events they are made into.
    arrivals: Arc<super::arrivals::Arrivals>,
    /// Bodies being read and decoded, shared with the audit webhook
    /// (`--max-intake-bytes`, KiB permits), and the decodes at once.
    limits: IntakeLimits,
}

/// What the webhooks' bodies share: room for bodies being read and decoded
/// (`--max-intake-bytes`, in KiB permits), and slots for decoding off the
/// async runtime.
#[derive(Clone)]
pub(crate) struct IntakeLimits {
    pub intake_bytes: Arc<tokio::sync::Semaphore>,
    pub decode_slots: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Admissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admissions")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Admissions {
    pub(crate) fn new(
        config: AdmissionConfig,
        intake: Intake,
        filter: AuditFilter,
        metrics: Arc<Metrics>,
        arrivals: Arc<super::arrivals::Arrivals>,
        limits: IntakeLimits,
    ) -> Arc<Self> {
        Arc::new(Self {
            writes: AdmittedWrites::new(
                config.persist_wait,
                config.max_pending,
                config.max_pending_bytes,
            ),
            config,
            intake,
            filter,
            metrics,
            arrivals,
            limits,
        })
    }

    /// Whether the list-watch of `cluster` delivers `group`/`resource` (its
    /// list answered; not while refused): an admitted write is held until
    /// the watch shows what became of it only while it does — a write whose
    /// resource nobody can watch would otherwise be judged never stored.
    pub(crate) fn watching(&self, cluster: &str, group: &str, resource: &str, delivers: bool) {
        self.writes.watching(cluster, group, resource, delivers);
    }

    /// A version the list-watch delivered: the admitted write that stored
    /// it, if one waits, made into its audit event, to be
    /// [submitted](Self::submit) after the watch change itself (as an audit
    /// event usually trails the watch: its write then claims the watch's
    /// diff, a binding's too).
    pub(crate) fn paired(&self, change: &WatchChange) -> Option<Shown> {
        let (shown, attempts) = self.writes.pair(change)?;
        AdmittedWriteShown {
            cluster: &shown.cluster,
            outcome: AdmittedWriteOutcome::Attempt,
            writes: attempts as u64,
        }
        .emit(&self.metrics);
        self.refresh_gauge();
        Some(shown)
    }

    fn refresh_gauge(&self) {
        self.metrics
            .admission_pending
            .set(i64::try_from(self.writes.pending()).unwrap_or(i64::MAX));
    }

    /// Queues an admitted write for processing, as an audit event.
    pub(crate) async fn submit(&self, shown: Shown) {
        AdmittedWriteShown {
            cluster: &shown.cluster,
            outcome: shown.outcome,
            writes: 1,
        }
        .emit(&self.metrics);
        let Some(event) = shown.event else {
            return;
        };
        self.arrivals.note(
            &shown.cluster,
            std::slice::from_ref(&event),
            SystemTime::now(),
        );
        if let Some(accepted) = super::accept(event, &shown.cluster, &self.filter, &self.metrics) {
            // The intake is closed only when shutting down.
            let _ = self
                .intake
                .submit_work(Work::Audit(Box::new(accepted)))
                .await;
        }
    }

    /// Shows the admitted writes whose wait is over (all when `all`).
    pub(crate) async fn expire(&self, all: bool) {
        for shown in self.writes.expired(Instant::now(), all) {
            self.submit(shown).await;
        }
        self.refresh_gauge();
    }

    /// Decodes one review off the async runtime (one of the decode slots
    /// the audit webhook's batches take too).
    async fn decode(
        &self,
        cluster: &str,
        body: axum::body::Bytes,
    ) -> Result<(String, Review), String> {
        let slot = self
            .limits
            .decode_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "shutting down".to_string())?;
        let cluster: Arc<str> = cluster.into();
        let received = SystemTime::now();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let body = crate::json::utf8(&body).map_err(|e| format!("body is not UTF-8: {e}"))?;
            review::decode(body, &cluster, received)
        })
        .await
        .unwrap_or_else(|e| Err(format!("decoding the review failed: {e}")))
    }

    /// Holds or shows a decoded review's write; the answer allowing it.
    async fn record(&self, cluster: &str, uid: &str, review: Review) -> String {
        let outcome = match review {
            Review::DryRun => AdmissionRequestOutcome::DryRun,
            Review::NotAWrite => AdmissionRequestOutcome::NotAWrite,
            Review::Write(admitted) => match self.writes.admit(admitted, Instant::now()) {
                Err(NotHeld::Unwatched) => AdmissionRequestOutcome::Unwatched,
                Ok((now, shed)) => {
                    AdmissionRequestHandled {
                        cluster,
                        outcome: AdmissionRequestOutcome::Shed,
                        requests: shed as u64,
                        error: "",
                    }
                    .emit(&self.metrics);
                    if let Some(shown) = now {
                        self.submit(shown).await;
                    }
                    self.refresh_gauge();
                    AdmissionRequestOutcome::Recorded
                }
            },
        };
        AdmissionRequestHandled {
            cluster,
            outcome,
            requests: 1,
            error: "",
        }
        .emit(&self.metrics);
        review::allowed(uid)
    }
}

/// Shows the admitted writes whose wait is over, every half second, until
/// the process ends.
pub(crate) async fn expire_loop(admissions: Arc<Admissions>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if admissions.intake.is_closed() {
            return;
        }
        admissions.expire(false).await;
    }
}

/// `POST /admission`, `POST /admission/{cluster}` and `GET /healthz`.
pub(crate) fn admission_router(admissions: Arc<Admissions>) -> Router {
    Router::new()
        .route("/admission", post(review_default))
        .route("/admission/{cluster}", post(review_named))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(admissions)
}

async fn review_default(
    State(a): State<Arc<Admissions>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cluster = a.config.default_cluster.clone();
    answer(&a, &cluster, &headers, body).await
}

async fn review_named(
    State(a): State<Arc<Admissions>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = super::validate_cluster_name(&cluster) {
        return (StatusCode::BAD_REQUEST, format!("cluster name: {e}\n")).into_response();
    }
    answer(&a, &cluster, &headers, body).await
}

/// Reads a review within the bounds the audit webhook's bodies have (room
/// among `--max-intake-bytes` taken before any of it is read, then at most
/// `--max-body-bytes` within `--body-read-timeout`), decodes it off the
/// runtime and records its write. Every refusal is counted and says why;
/// the apiserver's `failurePolicy: Ignore` then admits the write unrecorded.
async fn answer(a: &Admissions, cluster: &str, headers: &HeaderMap, body: Body) -> Response {
    let refused = |outcome, status: StatusCode, error: String| {
        AdmissionRequestHandled {
            cluster,
            outcome,
            requests: 1,
            error: &error,
        }
        .emit(&a.metrics);
        (status, format!("{error}\n")).into_response()
    };
    let limit = a.config.max_body_bytes;
    let _room = match super::webhook::try_reserve_intake(
        &a.limits.intake_bytes,
        &a.metrics,
        headers,
        limit as u64,
        0,
    ) {
        Ok(permit) => permit,
        Err(error) => {
            let mut resp = refused(
                AdmissionRequestOutcome::Busy,
                StatusCode::TOO_MANY_REQUESTS,
                error,
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
    };
    let body = match super::webhook::read_bounded(headers, body, limit, a.config.body_timeout).await
    {
        Ok(body) => body,
        Err((status, error)) => {
            let outcome = match status {
                StatusCode::PAYLOAD_TOO_LARGE => AdmissionRequestOutcome::TooLarge,
                StatusCode::REQUEST_TIMEOUT => AdmissionRequestOutcome::TimedOut,
                _ => AdmissionRequestOutcome::Malformed,
            };
            return refused(outcome, status, error);
        }
    };
    match a.decode(cluster, body).await {
        Ok((uid, review)) => {
            let answer = a.record(cluster, &uid, review).await;
            ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
        }
        Err(error) => refused(
            AdmissionRequestOutcome::Malformed,
            StatusCode::BAD_REQUEST,
            error,
        ),
    }
}

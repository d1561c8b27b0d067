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
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
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
        })
    }

    /// The list-watch of `cluster` delivers `group`/`resource`: its
    /// admitted writes are held until it shows them.
    pub(crate) fn watching(&self, cluster: &str, group: &str, resource: &str) {
        self.writes.watching(cluster, group, resource);
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

    /// Reads one review and holds or shows its write.
    async fn review(&self, cluster: &str, body: &[u8]) -> Result<String, String> {
        let body = crate::json::utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
        let cluster_name: Arc<str> = cluster.into();
        let (uid, review) = review::decode(body, &cluster_name, SystemTime::now())?;
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
        Ok(review::allowed(&uid))
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
    let limit = admissions.config.max_body_bytes;
    Router::new()
        .route("/admission", post(review_default))
        .route("/admission/{cluster}", post(review_named))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(admissions)
}

async fn review_default(State(a): State<Arc<Admissions>>, body: Bytes) -> Response {
    let cluster = a.config.default_cluster.clone();
    answer(&a, &cluster, &body).await
}

async fn review_named(
    State(a): State<Arc<Admissions>>,
    Path(cluster): Path<String>,
    body: Bytes,
) -> Response {
    if let Err(e) = super::validate_cluster_name(&cluster) {
        return (StatusCode::BAD_REQUEST, format!("cluster name: {e}\n")).into_response();
    }
    answer(&a, &cluster, &body).await
}

async fn answer(a: &Admissions, cluster: &str, body: &[u8]) -> Response {
    match a.review(cluster, body).await {
        Ok(review) => ([(header::CONTENT_TYPE, "application/json")], review).into_response(),
        Err(error) => {
            AdmissionRequestHandled {
                cluster,
                outcome: AdmissionRequestOutcome::Malformed,
                requests: 1,
                error: &error,
            }
            .emit(&a.metrics);
            (StatusCode::BAD_REQUEST, format!("{error}\n")).into_response()
        }
    }
}

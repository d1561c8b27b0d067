//! The admission webhook's bodies under the audit webhook's bounds: room
//! among `--max-intake-bytes` before reading, `--max-body-bytes`,
//! `--body-read-timeout`; each refusal answered and counted. The reviews
//! are those the real apiserver sent (e2e/fixtures/admission/).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt as _;

use super::*;
use crate::metrics::AdmissionRequestLabel;

/// A real review of the deployment run (a ReplicaSet's create).
fn a_review() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("e2e/fixtures/admission/deployment/admission.jsonl"),
    )
    .unwrap()
    .lines()
    .find(|l| l.contains("\"operation\":\"CREATE\""))
    .expect("a create")
    .to_string()
}

/// The admission router with `max_body_bytes`, a body timeout and
/// `intake_kib` KiB of room for bodies.
fn router(max_body_bytes: usize, intake_kib: usize) -> (Router, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let (intake, _rx) = Intake::new(16, metrics.queue_depth.clone());
    let admissions = Admissions::new(
        AdmissionConfig {
            default_cluster: "c".into(),
            max_body_bytes,
            body_timeout: Duration::from_secs(5),
            persist_wait: Duration::from_secs(30),
            max_pending: 1000,
            max_pending_bytes: 1 << 20,
        },
        intake,
        crate::source::audit::AuditFilter::default(),
        metrics.clone(),
        Arc::default(),
        IntakeLimits {
            intake_bytes: Arc::new(tokio::sync::Semaphore::new(intake_kib)),
            decode_slots: Arc::new(tokio::sync::Semaphore::new(1)),
        },
    );
    (admission_router(admissions), metrics)
}

fn counted(metrics: &Metrics, outcome: AdmissionRequestOutcome) -> u64 {
    metrics
        .admission_requests
        .get_or_create(&AdmissionRequestLabel {
            cluster: "c".into(),
            outcome,
        })
        .get()
}

fn post(body: Body, length: Option<usize>) -> Request<Body> {
    let mut r = Request::post("/admission").header(header::CONTENT_TYPE, "application/json");
    if let Some(n) = length {
        r = r.header(header::CONTENT_LENGTH, n);
    }
    r.body(body).unwrap()
}

/// A body that sends its first bytes and then nothing, never ending.
fn stalled(
    first: &str,
) -> (
    Body,
    tokio::sync::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.try_send(Ok(axum::body::Bytes::from(first.to_string())))
        .unwrap();
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    (Body::from_stream(stream), tx)
}

#[tokio::test]
async fn a_review_within_the_bounds_is_allowed_and_counted() {
    let review = a_review();
    let (app, metrics) = router(1 << 20, 1 << 20);
    let resp = app
        .oneshot(post(Body::from(review.clone()), Some(review.len())))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("\"allowed\":true"));
    // Nothing watches the cluster here: what was stored cannot be known.
    assert_eq!(counted(&metrics, AdmissionRequestOutcome::Unwatched), 1);
    assert_eq!(metrics.intake_bytes.get(), 0, "its room is given back");
}

#[tokio::test]
async fn a_review_over_max_body_bytes_is_refused_413_and_counted() {
    let review = a_review();
    for length in [Some(review.len()), None] {
        let (app, metrics) = router(review.len() - 1, 1 << 20);
        let resp = app
            .oneshot(post(Body::from(review.clone()), length))
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "Content-Length {length:?}"
        );
        assert_eq!(counted(&metrics, AdmissionRequestOutcome::TooLarge), 1);
    }
}

/// Without room among --max-intake-bytes the answer is 429 with
/// Retry-After, before any of the body is read (the body here never ends:
/// reading it would hang).
#[tokio::test]
async fn without_room_for_bodies_a_review_is_refused_429_unread() {
    let (app, metrics) = router(1 << 20, 0);
    let (body, _sender) = stalled("{");
    let resp = tokio::time::timeout(Duration::from_secs(60), app.oneshot(post(body, Some(4096))))
        .await
        .expect("answered without reading the body")
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
    assert_eq!(counted(&metrics, AdmissionRequestOutcome::Busy), 1);
}

/// A body that stops arriving is given up after --body-read-timeout (the
/// clock is paused: the timeout passes at once).
#[tokio::test(start_paused = true)]
async fn a_review_whose_body_stops_arriving_is_refused_408_and_counted() {
    let (app, metrics) = router(1 << 20, 1 << 20);
    let (body, _sender) = stalled("{\"kind\":");
    let resp = app.oneshot(post(body, None)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(counted(&metrics, AdmissionRequestOutcome::TimedOut), 1);
    assert_eq!(metrics.intake_bytes.get(), 0, "its room is given back");
}

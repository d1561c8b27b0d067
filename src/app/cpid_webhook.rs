//! `kascade cpid-webhook`: serves the mutating admission webhook of
//! `crate::cpid_webhook` over HTTPS (`POST /mutate`), with `/healthz` and
//! `/metrics` on the same listener.
//!
//! ```no_run
//! # async fn run() -> anyhow::Result<()> {
//! let config = kascade::app::CpidWebhookConfig::default()
//!     .tls("/etc/kascade/tls.crt".into(), "/etc/kascade/tls.key".into());
//! kascade::app::cpid_webhook::run(config).await
//! # }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::collect::{serve_webhook, tls_config};
use super::shutdown_signal;
use crate::cpid_webhook::{DEFAULT_SKIP_GROUPS, DEFAULT_SKIP_USERS, Stamp, StampPolicy, review};

/// Everything `kascade cpid-webhook` runs with.
#[derive(Clone, Debug)]
pub struct CpidWebhookConfig {
    /// Address the webhook serves on.
    pub listen: SocketAddr,
    /// The apiserver calls admission webhooks over HTTPS only.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// Users never stamped (regexes, anchored).
    pub skip_users: Vec<String>,
    /// Groups whose members are never stamped.
    pub skip_groups: Vec<String>,
    /// Largest AdmissionReview body (the object and its old version).
    pub max_body_bytes: usize,
    /// Longest a client may take to send its request headers.
    pub header_read_timeout: Duration,
}

impl Default for CpidWebhookConfig {
    fn default() -> Self {
        CpidWebhookConfig {
            listen: ([0, 0, 0, 0], 8443).into(),
            tls_cert_file: None,
            tls_key_file: None,
            skip_users: DEFAULT_SKIP_USERS.iter().map(|s| s.to_string()).collect(),
            skip_groups: DEFAULT_SKIP_GROUPS.iter().map(|s| s.to_string()).collect(),
            max_body_bytes: 8 << 20,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

impl CpidWebhookConfig {
    /// Serves HTTPS with this certificate chain and key (PEM).
    pub fn tls(mut self, cert: PathBuf, key: PathBuf) -> Self {
        self.tls_cert_file = Some(cert);
        self.tls_key_file = Some(key);
        self
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

struct WebhookState {
    policy: StampPolicy,
    reviews: Family<OutcomeLabel, Counter>,
    registry: Registry,
}

/// The webhook's routes (also for tests).
pub fn router(config: &CpidWebhookConfig) -> anyhow::Result<axum::Router> {
    let policy =
        StampPolicy::new(&config.skip_users, &config.skip_groups).map_err(anyhow::Error::msg)?;
    let reviews = Family::<OutcomeLabel, Counter>::default();
    let mut registry = Registry::with_prefix("kascade");
    registry.register(
        "cpid_webhook_reviews",
        "Admission reviews answered, by outcome: stamped (a fresh CPID added), kept (the request set its own), skipped (a component, a delete, a subresource), invalid (400)",
        reviews.clone(),
    );
    let state = Arc::new(WebhookState {
        policy,
        reviews,
        registry,
    });
    Ok(axum::Router::new()
        .route("/mutate", post(mutate))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        // Larger bodies are refused with 413 before they are read whole.
        .layer(axum::extract::DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state))
}

async fn mutate(State(st): State<Arc<WebhookState>>, body: Bytes) -> Response {
    let count = |outcome| {
        st.reviews.get_or_create(&OutcomeLabel { outcome }).inc();
    };
    let review_in: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            count("invalid");
            return (
                StatusCode::BAD_REQUEST,
                crate::messages::clip_message(format!("body is not an AdmissionReview: {e}\n")),
            )
                .into_response();
        }
    };
    let req: AdmissionRequest<DynamicObject> = match review_in.try_into() {
        Ok(r) => r,
        Err(_) => {
            count("invalid");
            return (
                StatusCode::BAD_REQUEST,
                "AdmissionReview without a request\n",
            )
                .into_response();
        }
    };
    let (resp, stamp): (AdmissionResponse, Stamp) = review(&st.policy, &req);
    match stamp {
        Stamp::Stamped(cpid) => {
            count("stamped");
            tracing::debug!(%cpid, user = req.user_info.username.as_deref().unwrap_or(""),
                resource = %req.resource.resource, name = %req.name, "stamped a CPID");
        }
        Stamp::Kept => count("kept"),
        Stamp::Skipped => count("skipped"),
    }
    axum::Json(resp.into_review()).into_response()
}

async fn metrics(State(st): State<Arc<WebhookState>>) -> Response {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &st.registry).is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
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

/// Serves the webhook until SIGTERM/SIGINT.
pub async fn run(config: CpidWebhookConfig) -> anyhow::Result<()> {
    let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_key_file) else {
        bail!(
            "--tls-cert-file and --tls-key-file are required: the apiserver calls admission webhooks over HTTPS only"
        );
    };
    let tls = tls_config(cert, key, None)?;
    let app = router(&config)?;
    let listener = std::net::TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    tracing::info!(listen = %config.listen, skip_users = ?config.skip_users,
        "kascade cpid-webhook is serving POST /mutate");
    serve_webhook(
        listener,
        Some(tls),
        app,
        crate::source::server::ConnectionLimits {
            header_read_timeout: config.header_read_timeout,
            max_connections: crate::source::server::DEFAULT_MAX_CONNECTIONS,
            refused: Default::default(),
        },
        shutdown_signal(),
    )
    .await
    .with_context(|| format!("cpid-webhook server on {} failed", config.listen))
}

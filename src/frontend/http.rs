//! The frontend's HTTP side: `/redirect` for links from dashboards and CI
//! logs, plus health and metrics.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::Frontend;
use super::assemble::Scope;
use super::display::Mode;
use super::raw::{RawStore, hex_trace_id};
use crate::model::ObjectRef;

pub struct RedirectState<S> {
    pub frontend: Arc<Frontend<S>>,
    /// Public URL of the Jaeger UI that uses kascade as its storage.
    pub ui_url: String,
    /// Cluster assumed when a link names none.
    pub default_cluster: String,
}

#[derive(Deserialize)]
pub struct RedirectParams {
    cluster: Option<String>,
    group: Option<String>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    /// RFC 3339, or seconds since the epoch; default: now.
    time: Option<String>,
    mode: Option<String>,
    scope: Option<String>,
}

fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{msg}\n")).into_response()
}

pub fn parse_time(s: &str) -> Result<SystemTime, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
        return Err(format!("time {s:?}: must not be negative"));
    }
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| format!("time {s:?}: expected RFC 3339 or seconds since the epoch ({e})"))
}

async fn redirect<S: RawStore>(
    State(st): State<Arc<RedirectState<S>>>,
    Query(p): Query<RedirectParams>,
) -> Response {
    let (Some(resource), Some(name)) = (
        p.resource.filter(|r| !r.is_empty()),
        p.name.filter(|n| !n.is_empty()),
    ) else {
        return bad(
            "redirect needs at least resource= and name= (and namespace= for namespaced objects)"
                .into(),
        );
    };
    let at = match p.time.as_deref().map(parse_time).transpose() {
        Ok(t) => t.unwrap_or_else(SystemTime::now),
        Err(e) => return bad(e),
    };
    let mode = match p.mode.as_deref().map(str::parse::<Mode>).transpose() {
        Ok(m) => m.unwrap_or(Mode::ALL[0]),
        Err(e) => return bad(format!("mode: {e}")),
    };
    let scope = match p.scope.as_deref().map(str::parse::<Scope>).transpose() {
        Ok(s) => s.unwrap_or(st.frontend.config().default_scope),
        Err(e) => return bad(format!("scope: {e}")),
    };
    let group = p.group.unwrap_or_default();
    let group = if group == "core" {
        String::new()
    } else {
        group
    };
    let object = ObjectRef::new(
        p.cluster
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| st.default_cluster.clone()),
        group,
        resource,
        p.namespace.unwrap_or_default(),
        name,
    );
    let id = st.frontend.id_for(&object, at, mode, scope);
    let location = format!(
        "{}/trace/{}",
        st.ui_url.trim_end_matches('/'),
        hex_trace_id(&id)
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

async fn metrics<S: RawStore>(State(st): State<Arc<RedirectState<S>>>) -> Response {
    let mut registry = prometheus_client::registry::Registry::default();
    st.frontend.metrics().register(&mut registry);
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            out,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}"),
        )
            .into_response(),
    }
}

/// `/redirect`, `/metrics`, `/healthz`, `/readyz`.
pub fn router<S: RawStore>(state: Arc<RedirectState<S>>) -> Router {
    Router::new()
        .route("/redirect", get(redirect::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }))
        .with_state(state)
}

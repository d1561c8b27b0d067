//! The frontend's HTTP side: `/redirect` for links from dashboards and CI
//! logs, `/explain` (findings over the stored spans), health and metrics.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use tracing::Instrument as _;

use super::Frontend;
use super::assemble::Scope;
use super::display::{Mode, parse_siblings};
use super::raw::{RawStore, hex_trace_id};
use crate::bounds::{check_len, max_name_bytes};
use crate::messages::{clip_message, quote};
use crate::model::ObjectRef;

pub struct RedirectState<S> {
    pub frontend: Arc<Frontend<S>>,
    /// Public URL of the Jaeger UI that uses kascade as its storage.
    pub ui_url: String,
    /// Cluster assumed when a link names none.
    pub default_cluster: String,
}

#[derive(Deserialize)]
pub(crate) struct RedirectParams {
    cluster: Option<String>,
    group: Option<String>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    /// RFC 3339, or seconds since the epoch; default: now.
    time: Option<String>,
    mode: Option<String>,
    scope: Option<String>,
    /// `all`: every object of a wide level shown, none summarised.
    siblings: Option<String>,
    /// `explain`: to the findings of the object's namespace around `time`
    /// (`/explain`) instead of the trace.
    view: Option<String>,
}

/// Query of `/explain`.
#[derive(Deserialize)]
pub(crate) struct ExplainParams {
    cluster: Option<String>,
    namespace: Option<String>,
    /// RFC 3339 or seconds since the epoch; default: `to` − 1 h, `to` = now.
    from: Option<String>,
    to: Option<String>,
    /// `json` (default) or `html`; an `Accept: text/html` asks for HTML too.
    format: Option<String>,
}

fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, format!("{}\n", clip_message(msg))).into_response()
}

/// The latest time accepted: RFC 3339's last second, 9999-12-31T23:59:59Z
/// (assembled ids count minutes in 32 bits, which lasts until year 10135).
pub(crate) const MAX_TIME_SECS: u64 = 253_402_300_799;

/// A time from a request: RFC 3339, or seconds since the epoch, between
/// the epoch and [`MAX_TIME_SECS`].
pub(crate) fn parse_time(s: &str) -> Result<SystemTime, String> {
    // Longer than any RFC 3339 time or number of seconds worth writing.
    if s.len() > 64 {
        return Err(format!(
            "time {}: expected RFC 3339 or seconds since the epoch",
            quote(s)
        ));
    }
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!(
                "time {}: must be a finite, non-negative number of seconds",
                quote(s)
            ));
        }
        if secs > MAX_TIME_SECS as f64 {
            return Err(format!(
                "time {}: after 9999-12-31T23:59:59Z, the latest time kascade accepts",
                quote(s)
            ));
        }
        return UNIX_EPOCH
            .checked_add(Duration::from_secs_f64(secs))
            .ok_or_else(|| format!("time {}: out of range", quote(s)));
    }
    humantime::parse_rfc3339_weak(s).map_err(|e| {
        format!(
            "time {}: expected RFC 3339 or seconds since the epoch ({e})",
            quote(s)
        )
    })
}

/// The object fields of a redirect within Kubernetes' bounds.
fn check_object_fields(fields: &[(&str, &str)]) -> Result<(), String> {
    for (field, value) in fields {
        check_len(field, value, max_name_bytes(field))?;
    }
    Ok(())
}

/// Self-tracing (crate::telemetry): one `redirect` span per request,
/// continuing the caller's trace.
async fn redirect<S: RawStore>(
    State(st): State<Arc<RedirectState<S>>>,
    headers: HeaderMap,
    Query(p): Query<RedirectParams>,
) -> Response {
    let span = tracing::info_span!(target: crate::self_trace::TARGET, "redirect",
        otel.kind = "server", http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty);
    crate::self_trace::continue_trace(&span, &headers);
    let response = span.in_scope(|| answer_redirect(&st, p));
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_client_error() {
        crate::self_trace::record_error(&span, "bad redirect request");
    }
    response
}

/// A parameter holding a control character, or bytes that were not UTF-8
/// (decoded as U+FFFD): no Kubernetes name, time or choice holds one.
fn check_printable(params: &[(&str, &Option<String>)]) -> Result<(), String> {
    for (field, value) in params {
        let Some(value) = value else { continue };
        if let Some(c) = value
            .chars()
            .find(|c| c.is_control() || *c == char::REPLACEMENT_CHARACTER)
        {
            let what = if c == char::REPLACEMENT_CHARACTER {
                "bytes that are not UTF-8".to_string()
            } else {
                format!("the control character {}", c.escape_unicode())
            };
            return Err(format!("{field}: {} holds {what}", quote(value)));
        }
    }
    Ok(())
}

fn answer_redirect<S: RawStore>(st: &RedirectState<S>, p: RedirectParams) -> Response {
    if let Err(e) = check_printable(&[
        ("cluster", &p.cluster),
        ("group", &p.group),
        ("resource", &p.resource),
        ("namespace", &p.namespace),
        ("name", &p.name),
        ("time", &p.time),
        ("mode", &p.mode),
        ("scope", &p.scope),
        ("siblings", &p.siblings),
        ("view", &p.view),
    ]) {
        return bad(e);
    }
    if p.view.as_deref() == Some("explain") {
        return redirect_to_explain(p);
    }
    if let Some(v) = p.view.as_deref().filter(|v| !v.is_empty() && *v != "trace") {
        return bad(format!("view {}: expected trace or explain", quote(v)));
    }
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
    let all_siblings = match p.siblings.as_deref().map(parse_siblings).transpose() {
        Ok(all) => all.unwrap_or(false),
        Err(e) => return bad(format!("siblings: {e}")),
    };
    if let Err(e) = check_object_fields(&[
        ("group", p.group.as_deref().unwrap_or("")),
        ("resource", &resource),
        ("namespace", p.namespace.as_deref().unwrap_or("")),
        ("name", &name),
    ]) {
        return bad(e);
    }
    if let Some(c) = p.cluster.as_deref().filter(|c| !c.is_empty())
        && let Err(e) = crate::source::validate_cluster_name(c)
    {
        return bad(e);
    }
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
    let id = st
        .frontend
        .id_for(&object, at, SystemTime::now(), mode, scope, all_siblings);
    let location = format!(
        "{}/trace/{}",
        st.ui_url.trim_end_matches('/'),
        hex_trace_id(&id)
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

/// How far around a redirect's `time` its explanation looks.
const EXPLAIN_BEFORE: Duration = Duration::from_secs(3600);
const EXPLAIN_AFTER: Duration = Duration::from_secs(300);

/// `/redirect?…&view=explain` → `/explain` of the object's namespace from an
/// hour before `time` to five minutes after it.
fn redirect_to_explain(p: RedirectParams) -> Response {
    let at = match p.time.as_deref().map(parse_time).transpose() {
        Ok(t) => t.unwrap_or_else(SystemTime::now),
        Err(e) => return bad(e),
    };
    let secs = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
            .to_string()
    };
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(c) = p.cluster.as_deref().filter(|c| !c.is_empty()) {
        q.append_pair("cluster", c);
    }
    if let Some(ns) = p.namespace.as_deref().filter(|n| !n.is_empty()) {
        q.append_pair("namespace", ns);
    }
    q.append_pair(
        "from",
        &secs(at.checked_sub(EXPLAIN_BEFORE).unwrap_or(UNIX_EPOCH)),
    );
    q.append_pair("to", &secs(at + EXPLAIN_AFTER));
    q.append_pair("format", "html");
    let location = format!("/explain?{}", q.finish());
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

/// `/explain`: findings over the stored spans (see `frontend::explain`).
async fn explain<S: RawStore>(
    State(st): State<Arc<RedirectState<S>>>,
    headers: HeaderMap,
    Query(p): Query<ExplainParams>,
) -> Response {
    let span = tracing::info_span!(target: crate::self_trace::TARGET, "explain",
        otel.kind = "server", http.response.status_code = tracing::field::Empty);
    crate::self_trace::continue_trace(&span, &headers);
    let response = answer_explain(&st, &headers, p)
        .instrument(span.clone())
        .await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

async fn answer_explain<S: RawStore>(
    st: &RedirectState<S>,
    headers: &HeaderMap,
    p: ExplainParams,
) -> Response {
    let time = |v: Option<&str>, field: &str| {
        v.filter(|s| !s.is_empty())
            .map(parse_time)
            .transpose()
            .map_err(|e| format!("{field}: {e}"))
    };
    let (from, to) = match (time(p.from.as_deref(), "from"), time(p.to.as_deref(), "to")) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) | (_, Err(e)) => return bad(e),
    };
    let range = super::explain::range_of(from, to);
    if range.start > range.end {
        return bad("from is after to".into());
    }
    let html = match p.format.as_deref() {
        Some("html") => true,
        Some("json") => false,
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html")),
        Some(other) => return bad(format!("format {}: expected json or html", quote(other))),
    };
    let cluster = p
        .cluster
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| st.default_cluster.clone());
    if let Err(e) = crate::source::validate_cluster_name(&cluster) {
        return bad(e);
    }
    let namespace = p.namespace.filter(|n| !n.is_empty());
    if let Some(ns) = &namespace
        && let Err(e) = check_object_fields(&[("namespace", ns)])
    {
        return bad(e);
    }
    let q = super::explain::ExplainQuery {
        cluster,
        namespace,
        range,
    };
    match st.frontend.explain(&q).await {
        Ok(report) if html => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            crate::analysis::explain::html::render_html(&report),
        )
            .into_response(),
        Ok(report) => (
            [(header::CONTENT_TYPE, "application/json")],
            report.to_json(),
        )
            .into_response(),
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            clip_message(format!("cannot read the stored spans: {e}")),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
pub(crate) struct RelatedParams {
    cpid: Option<String>,
}

/// `GET /cpid/related?cpid=<id>`: the CPIDs merged from it and those it was
/// merged from, as JSON.
async fn related_cpids<S: RawStore>(
    State(st): State<Arc<RedirectState<S>>>,
    Query(p): Query<RelatedParams>,
) -> Response {
    let Some(raw) = p.cpid.filter(|c| !c.is_empty()) else {
        return bad(
            "cpid: required (a CPID, e.g. cpid=3f2b8c1e-7d4a-4e6f-9a1b-2c3d4e5f6a7b)".into(),
        );
    };
    let cpid = match kascade_cpid::Cpid::parse(raw.trim()) {
        Ok(c) => c,
        Err(e) => return bad(format!("cpid: {e}")),
    };
    match st.frontend.related_cpids(cpid).await {
        Ok(r) => axum::Json(r).into_response(),
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            clip_message(format!("cannot read the stored spans: {e}")),
        )
            .into_response(),
    }
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
            clip_message(format!("cannot encode metrics: {e}")),
        )
            .into_response(),
    }
}

/// `/redirect`, `/explain`, `/cpid/related`, `/metrics`, `/healthz`, `/readyz`.
pub fn router<S: RawStore>(state: Arc<RedirectState<S>>) -> Router {
    Router::new()
        .route("/redirect", get(redirect::<S>))
        .route("/explain", get(explain::<S>))
        .route("/cpid/related", get(related_cpids::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ok\n" }))
        .route("/readyz/raw", get(raw_ready::<S>))
        .with_state(state)
}

/// `GET /readyz/raw`: whether the raw store answers a search (the last
/// minute's object spans, one id at most): 200 `ok`, else 503 with the
/// store's error (`kascade doctor --frontend`).
async fn raw_ready<S: RawStore>(State(st): State<Arc<RedirectState<S>>>) -> Response {
    let now = SystemTime::now();
    let range = super::raw::TimeRange::new(now - Duration::from_secs(60), now);
    let tags = [("kascade.span".to_string(), "object".to_string())];
    match st.frontend.store().find(&tags, range, 1).await {
        Ok(_) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            crate::messages::clip_message(format!("the raw store does not answer: {e}\n")),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_beyond_range_are_errors_not_panics() {
        for bad in [
            "1e30",
            "1e19",
            "1.8446744073709552e19",
            "inf",
            "NaN",
            "-1",
            "253402300800",
        ] {
            let e = parse_time(bad).unwrap_err();
            assert!(e.starts_with(&format!("time {bad:?}")), "{bad}: {e}");
        }
        let long = "9".repeat(1 << 20);
        let e = parse_time(&long).unwrap_err();
        assert!(e.len() < 400 && e.contains("1048576 bytes"), "{}", &e[..80]);
        assert_eq!(
            parse_time("253402300799").unwrap(),
            UNIX_EPOCH + Duration::from_secs(MAX_TIME_SECS)
        );
        assert_eq!(
            parse_time("9999-12-31T23:59:59Z").unwrap(),
            UNIX_EPOCH + Duration::from_secs(MAX_TIME_SECS)
        );
        assert_eq!(
            parse_time("1.5").unwrap(),
            UNIX_EPOCH + Duration::from_millis(1500)
        );
    }
}

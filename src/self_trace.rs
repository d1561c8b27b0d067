//! The spans of kascade's own work, as the stages write them: the target
//! every self-tracing span has, a caller's W3C `traceparent` continued, and
//! the error status. How they are exported (the OpenTelemetry SDK, `OTEL_*`
//! settings) is `crate::telemetry`'s job; this module depends on no stage, so
//! every stage can use it.

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target of every self-tracing span.
pub(crate) const TARGET: &str = "kascade::self_trace";

/// The span of a request to a server of kascade, continuing the caller's
/// trace when its headers carry a W3C `traceparent` (the Jaeger query
/// service sends one when it traces itself).
pub(crate) fn continue_trace(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    if span.is_disabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    // Only fails when no OpenTelemetry layer is installed.
    let _ = span.set_parent(cx);
}

/// The span of one gRPC request to the frontend (tonic's `trace_fn`):
/// named by its method, continuing the caller's trace.
pub fn grpc_request_span(request: &axum::http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    let method = path.rsplit('/').next().unwrap_or(path);
    let span = tracing::info_span!(target: TARGET, "grpc request",
        otel.name = method, otel.kind = "server", rpc.system = "grpc", rpc.method = path,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty);
    continue_trace(&span, request.headers());
    span
}

/// Marks `span` as failed (OpenTelemetry's error status).
pub(crate) fn record_error(span: &tracing::Span, message: &str) {
    span.record("otel.status_code", "ERROR");
    span.record(
        "otel.status_description",
        crate::messages::clip_message(message.to_string()).as_str(),
    );
}

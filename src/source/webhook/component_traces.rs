//! Kubernetes components' own traces (`kascade collect
//! --component-traces-listen`): kube-apiserver's requests (each root span
//! carries the request's `audit-id`), the kubelet's pod syncs. OTLP over
//! gRPC (`TraceService/Export`, what the components' exporter speaks:
//! plaintext HTTP/2, their TracingConfiguration has no TLS) and over HTTP
//! (`POST /v1/traces[/{cluster}]`, protobuf or JSON) on one port.
//!
//! Authenticated as the audit webhook is (its bearer token, checked before
//! a byte of the body is read; the components send it from
//! `OTEL_EXPORTER_OTLP_TRACES_HEADERS`), bounded as it is (`--max-body-bytes`
//! after decompression, `--body-read-timeout`, a few requests read at
//! once), then forwarded unchanged but for the resource's
//! `k8s.cluster.name` to the raw store (`export::Forwarder`), where the
//! frontend finds a request's spans by its `audit-id` tag. They never enter
//! the audit pipeline: a slow raw store sheds them, never the audit path.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;

use super::grpc::{GrpcCode, grpc_answer, grpc_error, grpc_message, is_grpc};
use super::otlp_logs::Format;
use super::*;
use crate::flow::ComponentTraceSink;
use crate::internal_events::ComponentRequestRefused;

/// The gRPC method the OTLP exporters call.
pub(crate) const GRPC_EXPORT_PATH: &str =
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// The resource attribute naming the cluster a component runs in.
pub(crate) const CLUSTER_ATTRIBUTE: &str = "k8s.cluster.name";
/// The request header naming the cluster when the path cannot (gRPC): the
/// components send it beside the token (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`).
pub(crate) const CLUSTER_HEADER: &str = "kascade-cluster";
/// Requests read and decoded at once (each up to `--max-body-bytes`).
const READING_AT_ONCE: usize = 4;

pub(crate) struct ComponentTraces {
    webhook: Arc<WebhookState>,
    forwarder: Arc<dyn ComponentTraceSink>,
    reading: Semaphore,
}

/// The component-trace listener's routes: gRPC and HTTP export, behind the
/// webhook's bearer token.
pub(crate) fn component_traces_router(
    webhook: Arc<WebhookState>,
    forwarder: Arc<dyn ComponentTraceSink>,
) -> Router {
    let state = Arc::new(ComponentTraces {
        webhook,
        forwarder,
        reading: Semaphore::new(READING_AT_ONCE),
    });
    Router::new()
        .route(GRPC_EXPORT_PATH, post(grpc_export))
        .route("/v1/traces", post(http_default))
        .route("/v1/traces/{cluster}", post(http_cluster))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            authenticate_component,
        ))
        .with_state(state)
}

fn refused(st: &ComponentTraces, reason: RejectReason, error: &str) {
    ComponentRequestRefused { reason, error }.emit(&st.webhook.metrics);
}

async fn authenticate_component(
    State(st): State<Arc<ComponentTraces>>,
    req: Request,
    next: Next,
) -> Response {
    if !authorized(&st.webhook, req.headers()) {
        let msg = "missing or wrong bearer token";
        refused(&st, RejectReason::Unauthorized, msg);
        return if is_grpc(req.headers()) {
            grpc_error(GrpcCode::Unauthenticated, msg)
        } else {
            error(StatusCode::UNAUTHORIZED, msg)
        };
    }
    next.run(req).await
}

/// Decodes a request, stamps the cluster on each resource that names none,
/// and encodes it again for the raw store; with its span count.
pub(crate) fn prepare(
    format: Format,
    body: &[u8],
    cluster: &str,
) -> Result<(Bytes, usize), String> {
    let mut request = match format {
        // prost bounds its own recursion: an error, never an overflow. (A
        // gRPC request reaches here unframed.)
        Format::Protobuf | Format::Grpc => ExportTraceServiceRequest::decode(body)
            .map_err(|e| format!("body is not an OTLP ExportTraceServiceRequest: {e}"))?,
        Format::Json => {
            let text = crate::json::utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
            let capped = crate::json::depth::cap(text, crate::json::depth::MAX_OBJECT_DEPTH, 8);
            serde_json::from_str::<ExportTraceServiceRequest>(&capped.text).map_err(|e| {
                crate::messages::clip_message(format!(
                    "body is not an OTLP/JSON ExportTraceServiceRequest: {e}"
                ))
            })?
        }
    };
    let mut spans = 0usize;
    for rs in &mut request.resource_spans {
        spans += rs.scope_spans.iter().map(|s| s.spans.len()).sum::<usize>();
        let resource = rs.resource.get_or_insert_with(Default::default);
        if !resource
            .attributes
            .iter()
            .any(|kv| kv.key == CLUSTER_ATTRIBUTE)
        {
            resource
                .attributes
                .push(crate::span_model::kv(CLUSTER_ATTRIBUTE, cluster));
        }
    }
    Ok((Bytes::from(request.encode_to_vec()), spans))
}

/// Reads, prepares and queues one request's body; the refusal is an HTTP
/// status and message (mapped onto gRPC codes by the gRPC handler).
async fn accept(
    st: &Arc<ComponentTraces>,
    headers: &HeaderMap,
    body: Body,
    cluster: &str,
    grpc: bool,
    format: Format,
) -> Result<(), Refusal> {
    let _reading = st
        .reading
        .acquire()
        .await
        .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_string()))?;
    let raw = read_body(&st.webhook, headers, body)
        .await
        .inspect_err(|(_, msg)| {
            refused(st, RejectReason::BadBody, msg);
        })?;
    let message = if grpc {
        grpc_message(st.webhook.max_body_bytes, headers, &raw).map_err(|(code, msg)| {
            refused(st, RejectReason::BadBody, &msg);
            let status = match code {
                GrpcCode::ResourceExhausted => StatusCode::PAYLOAD_TOO_LARGE,
                GrpcCode::Unimplemented => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, msg)
        })?
    } else {
        let encoding = body_encoding(headers)
            .inspect_err(|(_, msg)| refused(st, RejectReason::BadBody, msg))?;
        decompress(st.webhook.max_body_bytes, encoding, &raw)
            .inspect_err(|(_, msg)| refused(st, RejectReason::BadBody, msg))?
    };
    let message = message.into_owned();
    let cluster_owned = cluster.to_string();
    let prepared =
        tokio::task::spawn_blocking(move || prepare(format, &message, &cluster_owned)).await;
    let (encoded, spans) = match prepared {
        Ok(Ok(p)) => p,
        Ok(Err(msg)) => {
            refused(st, RejectReason::Malformed, &msg);
            return Err((StatusCode::BAD_REQUEST, msg));
        }
        Err(e) => {
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the OTLP request failed: {e}"),
            ));
        }
    };
    if spans == 0 {
        return Ok(());
    }
    st.forwarder
        .offer(encoded, spans)
        .map_err(|full| (StatusCode::SERVICE_UNAVAILABLE, full.to_string()))
}

/// The cluster the `kascade-cluster` header names, else `--cluster`.
fn cluster_of(st: &ComponentTraces, headers: &HeaderMap) -> Result<String, String> {
    match headers.get(CLUSTER_HEADER) {
        None => Ok(st.webhook.default_cluster.clone()),
        Some(v) => {
            let name = v
                .to_str()
                .map_err(|_| format!("{CLUSTER_HEADER} is not text"))?;
            super::super::validate_cluster_name(name)
                .map_err(|e| {
                    let msg = format!("{CLUSTER_HEADER}: {e}");
                    refused(st, RejectReason::BadBody, &msg);
                    msg
                })
                .map(|()| name.to_string())
        }
    }
}

async fn grpc_export(
    State(st): State<Arc<ComponentTraces>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let cluster = match cluster_of(&st, &headers) {
        Ok(c) => c,
        Err(msg) => return grpc_error(GrpcCode::InvalidArgument, &msg),
    };
    match accept(&st, &headers, body, &cluster, true, Format::Protobuf).await {
        Ok(()) => grpc_answer(&ExportTraceServiceResponse::default().encode_to_vec()),
        Err((status, msg)) => grpc_error(GrpcCode::of_status(status), &msg),
    }
}

async fn http_default(
    State(st): State<Arc<ComponentTraces>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match cluster_of(&st, &headers) {
        Ok(cluster) => http_export(&st, &headers, body, &cluster).await,
        Err(msg) => error(StatusCode::BAD_REQUEST, msg),
    }
}

async fn http_cluster(
    State(st): State<Arc<ComponentTraces>>,
    Path(cluster): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = super::super::validate_cluster_name(&cluster) {
        refused(&st, RejectReason::BadBody, &e);
        return error(StatusCode::BAD_REQUEST, e);
    }
    http_export(&st, &headers, body, &cluster).await
}

async fn http_export(
    st: &Arc<ComponentTraces>,
    headers: &HeaderMap,
    body: Body,
    cluster: &str,
) -> Response {
    let format = match Format::of(headers) {
        Ok(f) => f,
        Err((status, msg)) => {
            refused(st, RejectReason::BadBody, &msg);
            return error(status, msg);
        }
    };
    match accept(st, headers, body, cluster, false, format).await {
        Ok(()) => {
            let response = ExportTraceServiceResponse::default();
            let body = match format {
                Format::Protobuf | Format::Grpc => response.encode_to_vec(),
                Format::Json => serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec()),
            };
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, format.content_type())],
                body,
            )
                .into_response()
        }
        Err((status, msg)) => {
            let mut resp = error(status, msg);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The captured apiserver traces (e2e/fixtures/slow-webhook), one
    /// OTLP/JSON TracesData per line as Jaeger's /api/v3 returned them.
    fn captured() -> Vec<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/slow-webhook/apiserver-traces.jsonl"
        );
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_captured_apiserver_trace_is_forwarded_with_its_ids_and_the_cluster_stamped() {
        let line = &captured()[0];
        let (encoded, spans) = prepare(Format::Json, line.as_bytes(), "prod").unwrap();
        let original: ExportTraceServiceRequest = serde_json::from_str(line).unwrap();
        let forwarded = ExportTraceServiceRequest::decode(encoded.as_ref()).unwrap();
        let n: usize = original
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(spans, n);
        assert!(n > 1);
        for (a, b) in original
            .resource_spans
            .iter()
            .zip(&forwarded.resource_spans)
        {
            assert_eq!(a.scope_spans, b.scope_spans, "spans forwarded unchanged");
            let res = b.resource.as_ref().unwrap();
            assert!(res.attributes.iter().any(|kv| kv.key == CLUSTER_ATTRIBUTE));
        }
        // A resource naming its cluster keeps it.
        let (again, _) = prepare(Format::Protobuf, &encoded, "other").unwrap();
        assert_eq!(again, encoded);
    }

    #[test]
    fn bad_bodies_are_refused_with_what_is_wrong() {
        let err = prepare(Format::Protobuf, b"\xff\xff\xff", "c").unwrap_err();
        assert!(
            err.contains("not an OTLP ExportTraceServiceRequest"),
            "{err}"
        );
        let err = prepare(Format::Json, b"{\"resourceSpans\": 3}", "c").unwrap_err();
        assert!(err.contains("OTLP/JSON"), "{err}");
        let deep = "[".repeat(100_000);
        assert!(prepare(Format::Json, deep.as_bytes(), "c").is_err());
        let headers = HeaderMap::new();
        let (_, msg) = grpc_message(1 << 20, &headers, b"\0\0").unwrap_err();
        assert!(msg.contains("shorter than a gRPC message prefix"), "{msg}");
        let (_, msg) = grpc_message(1 << 20, &headers, b"\0\0\0\0\x09abc").unwrap_err();
        assert!(msg.contains("announces 9 bytes, the body holds 3"), "{msg}");
        let (_, msg) = grpc_message(1 << 20, &headers, b"\x01\0\0\0\x01a").unwrap_err();
        assert!(msg.contains("grpc-encoding"), "{msg}");
    }
}

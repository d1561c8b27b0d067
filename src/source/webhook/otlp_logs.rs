//! Audit events as OTLP/HTTP logs: what the OpenTelemetry Collector sends
//! when its `filelog` receiver tails the apiserver's `audit.log` and its
//! `otlphttp` exporter points here. Each log record's body is one audit log
//! line; the records become a body of lines (what the spool keeps and the
//! decoder reads, as a shipper's), and the answer is OTLP's: 200 with an
//! `ExportLogsServiceResponse`, records that hold no audit event counted in
//! its `partial_success`.

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;

use super::*;

/// How the request (and so the answer) is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    /// `application/x-protobuf` (the exporters' default).
    Protobuf,
    /// `application/json` (OTLP/JSON).
    Json,
    /// OTLP/gRPC (`LogsService/Export`): one length-prefixed protobuf
    /// message, compressed as `grpc-encoding` says.
    Grpc,
}

/// The gRPC method the OTLP exporters call for logs.
pub(super) const GRPC_LOGS_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

impl Format {
    /// The format `Content-Type` names; 415 for any other.
    pub(super) fn of(headers: &HeaderMap) -> Result<Self, Refusal> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media.to_ascii_lowercase().as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Self::Protobuf),
            "application/json" => Ok(Self::Json),
            _ => Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Type {} is not OTLP/HTTP (application/x-protobuf or application/json)",
                    crate::messages::quote(content_type)
                ),
            )),
        }
    }

    pub(super) fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/x-protobuf",
            Self::Json => "application/json",
            Self::Grpc => "application/grpc",
        }
    }
}

/// Counts the records of a request to `cluster` that held no audit line
/// (received, and rejected as malformed).
pub(super) fn count_unreadable(st: &WebhookState, cluster: &str, unreadable: &[String]) {
    if let Some(first) = unreadable.first() {
        st.metrics
            .events_received
            .get_or_create(&Metrics::source(Source::Webhook))
            .inc_by(unreadable.len() as u64);
        AuditEventsRejected {
            reason: RejectReason::Malformed,
            events: unreadable.len() as u64,
            cluster,
            error: first,
        }
        .emit(&st.metrics);
    }
}

/// The audit lines a request's records hold, one per line, and one message
/// per record that holds none (its body is not text): the request unframed,
/// inflated within `limit` (`--max-body-bytes`) and decoded.
pub(super) fn records_to_lines(
    limit: usize,
    format: Format,
    encoding: BodyEncoding,
    body: &[u8],
) -> Result<(Bytes, Vec<String>), Refusal> {
    let body = match format {
        // The message's own flag says whether it is compressed; the
        // request's `grpc-encoding` (here `encoding`) how.
        Format::Grpc => {
            let gzip = if encoding == BodyEncoding::Gzip {
                "gzip"
            } else {
                ""
            };
            super::grpc::unframe(limit, gzip, body)
                .map_err(|(code, msg)| (code.as_status(), msg))?
        }
        _ => decompress(limit, encoding, body)?,
    };
    let request = match format {
        // prost bounds its own recursion (nested values): an error, never
        // an overflow.
        // Its message names every field on the way down: clipped.
        Format::Protobuf | Format::Grpc => {
            ExportLogsServiceRequest::decode(body.as_ref()).map_err(|e| {
                crate::messages::clip_message(format!(
                    "body is not an OTLP ExportLogsServiceRequest: {e}"
                ))
            })
        }
        Format::Json => {
            // Nesting bounded before serde_json reads it (its own limit
            // would refuse the whole request).
            crate::json::utf8(&body)
                .map_err(|e| format!("body is not UTF-8: {e}"))
                .and_then(|text| {
                    let capped =
                        crate::json::depth::cap(text, crate::json::depth::MAX_OBJECT_DEPTH, 8);
                    serde_json::from_str::<ExportLogsServiceRequest>(&capped.text).map_err(|e| {
                        crate::messages::clip_message(format!(
                            "body is not an OTLP/JSON ExportLogsServiceRequest: {e}"
                        ))
                    })
                })
        }
    }
    .map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    let mut lines = Vec::with_capacity(body.len());
    let mut unreadable = Vec::new();
    let mut n = 0usize;
    for resource in &request.resource_logs {
        for scope in &resource.scope_logs {
            for record in &scope.log_records {
                match record.body.as_ref().and_then(|b| b.value.as_ref()) {
                    Some(AnyValue::StringValue(line)) if !line.trim().is_empty() => {
                        // One line each: a record's own line breaks end it.
                        lines.extend_from_slice(line.trim_end().as_bytes());
                        lines.push(b'\n');
                    }
                    Some(AnyValue::BytesValue(line)) if !line.trim_ascii().is_empty() => {
                        lines.extend_from_slice(line.trim_ascii_end());
                        lines.push(b'\n');
                    }
                    _ => unreadable.push(format!(
                        "log record {n}: its body is not an audit log line (text)"
                    )),
                }
                n += 1;
            }
        }
    }
    Ok((Bytes::from(lines), unreadable))
}

/// [`records_to_lines`] on a blocking thread, within the decode slots.
pub(super) async fn lines_off_runtime(
    st: &Arc<WebhookState>,
    format: Format,
    encoding: BodyEncoding,
    body: Bytes,
) -> Result<(Bytes, Vec<String>), Refusal> {
    let slot = st
        .decode_slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_string()))?;
    let st = st.clone();
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        records_to_lines(st.max_body_bytes, format, encoding, &body)
    })
    .await
    .unwrap_or_else(|e| {
        Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the OTLP request failed: {e}"),
        ))
    })
}

/// OTLP's answer to a request whose records were queued: 200, the records
/// that held no audit event counted as rejected with the first reasons.
pub(super) fn answer(format: Format, malformed: &[String]) -> Response {
    let partial_success = (!malformed.is_empty()).then(|| ExportLogsPartialSuccess {
        rejected_log_records: malformed.len() as i64,
        error_message: crate::messages::clip_message(malformed.join("\n")),
    });
    let response = ExportLogsServiceResponse { partial_success };
    let body = match format {
        Format::Grpc => return super::grpc::grpc_answer(&response.encode_to_vec()),
        Format::Protobuf => response.encode_to_vec(),
        Format::Json => serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec()),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

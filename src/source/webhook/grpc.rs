//! Unary gRPC over the webhook's HTTP/2 server, as the OTLP exporters
//! speak it: one length-prefixed message in, one out, the status in the
//! trailers (or, for a refusal, in the headers: "Trailers-Only").

use super::*;

/// gRPC status codes used here (grpc/doc/statuscodes.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GrpcCode {
    InvalidArgument = 3,
    ResourceExhausted = 8,
    Unimplemented = 12,
    /// Retryable for OTLP exporters (a full queue).
    Unavailable = 14,
    Unauthenticated = 16,
}

pub(super) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

impl GrpcCode {
    /// The code for an HTTP refusal (gRPC's own HTTP-to-gRPC mapping, with
    /// a full queue retryable).
    pub(super) fn of_status(status: StatusCode) -> Self {
        match status {
            StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::REQUEST_TIMEOUT => GrpcCode::Unavailable,
            StatusCode::PAYLOAD_TOO_LARGE => GrpcCode::ResourceExhausted,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => GrpcCode::Unimplemented,
            StatusCode::UNAUTHORIZED => GrpcCode::Unauthenticated,
            _ => GrpcCode::InvalidArgument,
        }
    }
}

/// A unary answer: `msg` framed, then `grpc-status: 0` in the trailers.
pub(super) fn grpc_answer(msg: &[u8]) -> Response {
    let mut framed = Vec::with_capacity(5 + msg.len());
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(msg);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from(framed))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    let body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(
        frames,
    )));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// A gRPC answer without a message ("Trailers-Only"): the status in the headers.
pub(super) fn grpc_error(code: GrpcCode, message: &str) -> Response {
    let mut resp = StatusCode::OK.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(code as u16));
    // grpc-message is percent-encoded; anything outside printable ASCII
    // (and '%') is escaped.
    let encoded: String = message
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        h.insert("grpc-message", v);
    }
    resp
}

/// The one message of a unary gRPC request body: its 5-byte prefix
/// (compressed flag, big-endian length) and the message, inflated when the
/// `grpc-encoding` says gzip.
pub(super) fn grpc_message<'a>(
    limit: usize,
    headers: &HeaderMap,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, (GrpcCode, String)> {
    unframe(limit, grpc_encoding(headers), body)
}

/// The request's `grpc-encoding` (how a message flagged compressed is).
pub(super) fn grpc_encoding(headers: &HeaderMap) -> &str {
    headers
        .get("grpc-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// [`grpc_message`] with the request's `grpc-encoding` given.
pub(super) fn unframe<'a>(
    limit: usize,
    encoding: &str,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, (GrpcCode, String)> {
    let Some((prefix, rest)) = body.split_first_chunk::<5>() else {
        return Err((
            GrpcCode::InvalidArgument,
            format!(
                "the body ({} bytes) is shorter than a gRPC message prefix",
                body.len()
            ),
        ));
    };
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len != rest.len() {
        return Err((
            GrpcCode::InvalidArgument,
            format!(
                "the gRPC prefix announces {len} bytes, the body holds {} (one message per export)",
                rest.len()
            ),
        ));
    }
    match prefix[0] {
        0 => Ok(Cow::Borrowed(rest)),
        1 => {
            if encoding != "gzip" {
                return Err((
                    GrpcCode::Unimplemented,
                    format!(
                        "grpc-encoding {} is not supported (use gzip or none)",
                        crate::messages::quote(encoding)
                    ),
                ));
            }
            decompress(limit, BodyEncoding::Gzip, rest).map_err(|(status, msg)| {
                let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    GrpcCode::ResourceExhausted
                } else {
                    GrpcCode::InvalidArgument
                };
                (code, msg)
            })
        }
        flag => Err((
            GrpcCode::InvalidArgument,
            format!("gRPC compressed flag {flag} is neither 0 nor 1"),
        )),
    }
}

impl GrpcCode {
    /// The HTTP status that stands for the code until the answer is made
    /// (the inverse of [`GrpcCode::of_status`]).
    pub(super) fn as_status(self) -> StatusCode {
        match self {
            GrpcCode::InvalidArgument => StatusCode::BAD_REQUEST,
            GrpcCode::ResourceExhausted => StatusCode::PAYLOAD_TOO_LARGE,
            GrpcCode::Unimplemented => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            GrpcCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            GrpcCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// A refusal made for HTTP clients, answered as gRPC: its status as the
/// code, its text as the message.
pub(super) async fn as_grpc(resp: Response) -> Response {
    let code = GrpcCode::of_status(resp.status());
    let text = axum::body::to_bytes(resp.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim_end().to_string())
        .unwrap_or_default();
    grpc_error(code, &text)
}

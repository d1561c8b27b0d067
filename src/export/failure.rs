//! Export failures classified as the OTLP specification says: what may
//! succeed later is retried (honouring the receiver's `RetryInfo` /
//! `Retry-After`), what is too large is split, what will fail again is not.

use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;
use tonic::Code;

/// Longest part of a receiver's error message kept for logs.
const MAX_MESSAGE_CHARS: usize = 500;

/// What a failed export request tells the exporter to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Try again, after `after` when the receiver said how long to wait.
    Retryable { after: Option<Duration> },
    /// The request is larger than the receiver takes: send it in parts.
    TooLarge,
    /// The same request would fail again (malformed, unauthorised, …).
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendError {
    pub failure: Failure,
    pub message: String,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl SendError {
    pub(super) fn transport(message: String) -> Self {
        Self {
            failure: Failure::Retryable { after: None },
            message,
        }
    }
}

/// A request the receiver took; it may still have refused some spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Accepted {
    pub rejected_spans: u64,
    pub message: String,
}

/// A receiver may accept a request but reject some of its spans; that is not
/// worth a retry (it would reject them again) but must not pass silently.
pub(super) fn accepted(response: &ExportTraceServiceResponse) -> Accepted {
    match &response.partial_success {
        Some(p) => Accepted {
            rejected_spans: p.rejected_spans.max(0) as u64,
            message: shorten(&p.error_message),
        },
        None => Accepted::default(),
    }
}

/// `google.rpc.Status`, the error detail of gRPC and the error body of OTLP/HTTP.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// `google.rpc.RetryInfo`: how long the receiver asks the client to wait.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<prost_types::Duration>,
}

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The delay of a `RetryInfo` among the status details, if there is one.
fn retry_info(details: &[u8]) -> Option<Duration> {
    let status = RpcStatus::decode(details).ok()?;
    status
        .details
        .iter()
        .filter(|a| a.type_url == RETRY_INFO_TYPE)
        .find_map(|a| RetryInfo::decode(a.value.as_slice()).ok())
        .map(|r| {
            r.retry_delay
                .map(|d| {
                    Duration::from_secs(d.seconds.max(0) as u64)
                        + Duration::from_nanos(d.nanos.max(0) as u64)
                })
                .unwrap_or_default()
        })
}

/// Whether a receiver's message says the request was too large (grpc-go:
/// `received message larger than max`; tonic: `decoded message length too
/// large`; HTTP servers: `request body too large`).
fn says_too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("larger than max") || m.contains("too large")
}

/// A gRPC status, classified per the OTLP specification: retryable are
/// CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
/// DATA_LOSS, and RESOURCE_EXHAUSTED when the receiver sent RetryInfo;
/// everything else is permanent. A status tonic made from a local error (no
/// answer from the receiver: connection refused or reset, timeout) is a
/// transport failure, always retried. "Too large", whatever its code, is
/// answered by sending smaller requests.
pub(crate) fn classify_grpc(status: &tonic::Status) -> SendError {
    let local = std::error::Error::source(status);
    let message = match local {
        // What tonic saw, e.g. `tcp connect error: Connection refused`.
        Some(e) => format!(
            "gRPC {:?}: {}: {}",
            status.code(),
            status.message(),
            chain(e)
        ),
        None => format!("gRPC {:?}: {}", status.code(), shorten(status.message())),
    };
    let delay = retry_info(status.details());
    let failure = if local.is_some() {
        Failure::Retryable { after: None }
    } else {
        match status.code() {
            Code::ResourceExhausted if delay.is_some() => Failure::Retryable { after: delay },
            Code::ResourceExhausted | Code::OutOfRange if says_too_large(status.message()) => {
                Failure::TooLarge
            }
            Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::OutOfRange
            | Code::Unavailable
            | Code::DataLoss => Failure::Retryable { after: delay },
            _ => Failure::Permanent,
        }
    };
    SendError { failure, message }
}

/// An HTTP answer, classified per the OTLP specification: 429, 502, 503 and
/// 504 are retried (after `Retry-After`, in seconds or as an HTTP date, when
/// given); 413 means too large; everything else is permanent.
pub(crate) fn classify_http(
    status: u16,
    retry_after: Option<&str>,
    message: &str,
    now: SystemTime,
) -> SendError {
    let failure = match status {
        429 | 502 | 503 | 504 => Failure::Retryable {
            after: retry_after.and_then(|v| parse_retry_after(v, now)),
        },
        413 => Failure::TooLarge,
        _ => Failure::Permanent,
    };
    SendError {
        failure,
        message: format!("HTTP {status}: {message}"),
    }
}

fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// The message of an OTLP/HTTP error body: a `google.rpc.Status` when it is
/// protobuf, else the text.
pub(super) fn http_error_message(body: &[u8], is_protobuf: bool) -> String {
    if is_protobuf && let Ok(s) = RpcStatus::decode(body) {
        return shorten(&s.message);
    }
    shorten(String::from_utf8_lossy(body).trim())
}

pub(super) fn shorten(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

pub(super) fn chain(e: &dyn std::error::Error) -> String {
    shorten(&crate::messages::error_chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_retry_info(code: Code, message: &str, delay: Duration) -> tonic::Status {
        let info = RetryInfo {
            retry_delay: Some(prost_types::Duration {
                seconds: delay.as_secs() as i64,
                nanos: delay.subsec_nanos() as i32,
            }),
        };
        let details = RpcStatus {
            code: code as i32,
            message: message.into(),
            details: vec![prost_types::Any {
                type_url: RETRY_INFO_TYPE.into(),
                value: info.encode_to_vec(),
            }],
        };
        tonic::Status::with_details(code, message, details.encode_to_vec().into())
    }

    #[test]
    fn grpc_codes_are_classified_per_the_otlp_specification() {
        let class =
            |code: Code, message: &str| classify_grpc(&tonic::Status::new(code, message)).failure;
        let retry = Failure::Retryable { after: None };
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ] {
            assert_eq!(class(code, "try again"), retry, "{code:?}");
        }
        for code in [
            Code::Unknown,
            Code::InvalidArgument,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::FailedPrecondition,
            Code::Unimplemented,
            Code::Internal,
            Code::Unauthenticated,
        ] {
            assert_eq!(class(code, "no"), Failure::Permanent, "{code:?}");
        }
        // RESOURCE_EXHAUSTED is retried only when the receiver says when.
        assert_eq!(
            class(Code::ResourceExhausted, "quota exceeded"),
            Failure::Permanent
        );
        assert_eq!(
            classify_grpc(&with_retry_info(
                Code::ResourceExhausted,
                "memory limit",
                Duration::from_millis(1500)
            ))
            .failure,
            Failure::Retryable {
                after: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            classify_grpc(&with_retry_info(
                Code::Unavailable,
                "restarting",
                Duration::from_secs(3)
            ))
            .failure,
            Failure::Retryable {
                after: Some(Duration::from_secs(3))
            }
        );
        // Jaeger's (grpc-go's) and tonic's answers to a request over the limit.
        assert_eq!(
            class(
                Code::ResourceExhausted,
                "grpc: received message larger than max (9100000 vs. 4194304)"
            ),
            Failure::TooLarge
        );
        assert_eq!(
            class(
                Code::OutOfRange,
                "Error, decoded message length too large: found 9100000 bytes, the limit is: 4194304 bytes"
            ),
            Failure::TooLarge
        );
    }

    #[test]
    fn a_status_made_from_a_local_error_is_a_transport_failure() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let status = tonic::Status::from_error(Box::new(refused));
        assert_eq!(status.code(), Code::Unknown);
        assert_eq!(
            classify_grpc(&status).failure,
            Failure::Retryable { after: None }
        );
    }

    #[test]
    fn http_statuses_are_classified_and_retry_after_read_both_ways() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for code in [429, 502, 503, 504] {
            assert_eq!(
                classify_http(code, None, "", now).failure,
                Failure::Retryable { after: None }
            );
        }
        for code in [400, 401, 403, 404, 405, 415, 500, 501] {
            assert_eq!(
                classify_http(code, None, "", now).failure,
                Failure::Permanent,
                "{code}"
            );
        }
        assert_eq!(classify_http(413, None, "", now).failure, Failure::TooLarge);
        assert_eq!(
            classify_http(503, Some("120"), "", now).failure,
            Failure::Retryable {
                after: Some(Duration::from_secs(120))
            }
        );
        let in_90s = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            classify_http(429, Some(&in_90s), "", now).failure,
            Failure::Retryable {
                after: Some(Duration::from_secs(90))
            }
        );
        // A date in the past or garbage: retried with the usual backoff.
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(
            classify_http(429, Some(&past), "", now).failure,
            Failure::Retryable {
                after: Some(Duration::ZERO)
            }
        );
        assert_eq!(
            classify_http(429, Some("soon"), "", now).failure,
            Failure::Retryable { after: None }
        );
    }

    #[test]
    fn long_receiver_messages_are_shortened() {
        let e = classify_http(400, None, &shorten(&"x".repeat(5000)), SystemTime::now());
        assert!(e.message.len() < 600, "{}", e.message.len());
        assert!(e.message.contains("(5000 bytes)"));
    }
}

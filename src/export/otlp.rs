//! OTLP trace export (gRPC or HTTP/protobuf, plain or TLS, optionally gzip)
//! of a request encoded once: a retry resends the same bytes, so a batch is
//! never cloned span by span to survive a failed attempt.
//!
//! Every failure is classified as the OpenTelemetry protocol specification
//! says (`Failure`): what may succeed later is retried, honouring the
//! receiver's `RetryInfo` / `Retry-After`; what will fail again is not.

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;
use tonic::Code;
use tonic::codec::{Codec, CompressionEncoding, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tracing::Instrument as _;

use super::OtlpProtocol;
use super::config::{Compression, OtlpConfig};
use crate::client_tls;

const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// Longest part of a receiver's error message kept for logs.
const MAX_MESSAGE_CHARS: usize = 500;

/// What a failed export request tells the exporter to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Try again, after `after` when the receiver said how long to wait.
    Retryable { after: Option<Duration> },
    /// The request is larger than the receiver takes: send it in parts.
    TooLarge,
    /// The same request would fail again (malformed, unauthorised, …).
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    pub failure: Failure,
    pub message: String,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl SendError {
    fn transport(message: String) -> Self {
        Self {
            failure: Failure::Retryable { after: None },
            message,
        }
    }
}

/// A request the receiver took; it may still have refused some spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    pub rejected_spans: u64,
    pub message: String,
}

/// Sends one encoded `ExportTraceServiceRequest`. The exporter's retry,
/// split and trim logic is written against this, so it can be tested with a
/// receiver that answers in a scripted order.
pub trait Transport: Send {
    fn send(&mut self, body: Bytes) -> impl Future<Output = Result<Accepted, SendError>> + Send;
}

pub struct OtlpSender {
    transport: Inner,
}

enum Inner {
    Grpc {
        grpc: Box<tonic::client::Grpc<Channel>>,
        metadata: tonic::metadata::MetadataMap,
    },
    Http {
        client: reqwest::Client,
        url: String,
        gzip: bool,
    },
}

impl OtlpSender {
    /// Connects lazily: the receiver may come up after kascade. TLS files
    /// are read now, so a bad one fails at startup.
    pub fn new(cfg: &OtlpConfig) -> anyhow::Result<Self> {
        let src = &cfg.endpoint_source;
        let tls = client_tls::is_https(&cfg.endpoint);
        let transport = match cfg.protocol {
            OtlpProtocol::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &cfg.headers {
                    let key =
                        tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                            .with_context(|| {
                                format!("OTLP header {k:?}: not a valid gRPC metadata key")
                            })?;
                    let val = v
                        .parse()
                        .with_context(|| format!("OTLP header {k}: value is not valid ASCII"))?;
                    metadata.insert(key, val);
                }
                let mut grpc = tonic::client::Grpc::new(grpc_channel(cfg)?);
                if cfg.compression == Compression::Gzip {
                    grpc = grpc
                        .send_compressed(CompressionEncoding::Gzip)
                        .accept_compressed(CompressionEncoding::Gzip);
                }
                Inner::Grpc {
                    grpc: Box::new(grpc),
                    metadata,
                }
            }
            OtlpProtocol::Http => {
                reqwest::Url::parse(&cfg.endpoint)
                    .with_context(|| format!("{src} {:?} is not a valid URL", cfg.endpoint))?;
                let mut headers = reqwest::header::HeaderMap::new();
                for (k, v) in &cfg.headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .with_context(|| format!("OTLP header {k:?}: not a valid header name"))?;
                    let mut value = reqwest::header::HeaderValue::from_str(v)
                        .with_context(|| format!("OTLP header {k}: not a valid header value"))?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                headers.insert(
                    reqwest::header::CONTENT_TYPE,
                    reqwest::header::HeaderValue::from_static("application/x-protobuf"),
                );
                let mut builder = reqwest::Client::builder()
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout.min(Duration::from_secs(5)))
                    .default_headers(headers);
                if tls {
                    let rustls = cfg.tls.rustls_config(&[b"http/1.1"]).with_context(|| {
                        format!("TLS for the OTLP endpoint {} ({src})", cfg.endpoint)
                    })?;
                    builder = builder.use_preconfigured_tls(rustls);
                }
                let client = builder
                    .build()
                    .context("cannot build the OTLP HTTP client")?;
                Inner::Http {
                    client,
                    url: cfg.endpoint.clone(),
                    gzip: cfg.compression == Compression::Gzip,
                }
            }
        };
        Ok(Self { transport })
    }
}

impl Transport for OtlpSender {
    /// One `export` span of self-tracing (crate::telemetry) per request.
    async fn send(&mut self, body: Bytes) -> Result<Accepted, SendError> {
        let protocol = match self.transport {
            Inner::Grpc { .. } => "grpc",
            Inner::Http { .. } => "http/protobuf",
        };
        let span = tracing::info_span!(target: crate::telemetry::TARGET, "export",
            otel.kind = "client", protocol, request.bytes = body.len(),
            rejected_spans = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty);
        let result = self.send_request(body).instrument(span.clone()).await;
        match &result {
            Ok(a) => {
                span.record("rejected_spans", a.rejected_spans);
            }
            Err(e) => crate::telemetry::record_error(&span, &e.message),
        }
        result
    }
}

impl OtlpSender {
    async fn send_request(&mut self, body: Bytes) -> Result<Accepted, SendError> {
        match &mut self.transport {
            Inner::Grpc { grpc, metadata } => {
                grpc.ready()
                    .await
                    .map_err(|e| SendError::transport(format!("cannot connect: {}", chain(&e))))?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() = metadata.clone();
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(GRPC_EXPORT_PATH);
                let response = grpc
                    .unary(request, path, PreEncoded)
                    .await
                    .map_err(|s| classify_grpc(&s))?;
                Ok(accepted(response.get_ref()))
            }
            Inner::Http { client, url, gzip } => {
                let mut request = client.post(url.as_str());
                let body = if *gzip {
                    request = request.header(reqwest::header::CONTENT_ENCODING, "gzip");
                    // Off the async workers: a 2 MiB request takes milliseconds.
                    tokio::task::spawn_blocking(move || gzip_bytes(&body))
                        .await
                        .map_err(|e| SendError::transport(format!("gzip failed: {e}")))?
                } else {
                    body
                };
                let response = request
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| SendError::transport(chain(&e)))?;
                let status = response.status();
                let headers = response.headers().clone();
                let is_protobuf = headers
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("application/x-protobuf"));
                let body = read_limited(response, MAX_RESPONSE_BYTES).await;
                if status.is_success() {
                    return Ok(if is_protobuf {
                        ExportTraceServiceResponse::decode(body.as_ref())
                            .map(|r| accepted(&r))
                            .unwrap_or_default()
                    } else {
                        Accepted::default()
                    });
                }
                Err(classify_http(
                    status.as_u16(),
                    headers
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok()),
                    &http_error_message(&body, is_protobuf),
                    SystemTime::now(),
                ))
            }
        }
    }
}

/// Longest part of a receiver's answer read: a status or partial success is
/// small, an error page need not be read whole.
const MAX_RESPONSE_BYTES: usize = 64 << 10;

async fn read_limited(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < max {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(max - body.len())]),
            _ => break,
        }
    }
    body
}

fn gzip_bytes(body: &[u8]) -> Bytes {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::default(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default().into()
}

/// The gRPC channel to `cfg.endpoint`, over TLS for `https://` (also
/// used by self-tracing, crate::telemetry). Connects lazily.
pub fn grpc_channel(cfg: &OtlpConfig) -> anyhow::Result<Channel> {
    let src = &cfg.endpoint_source;
    let uri: tonic::codegen::http::Uri = cfg
        .endpoint
        .parse()
        .with_context(|| format!("{src} {:?} is not a valid URL", cfg.endpoint))?;
    Ok(if client_tls::is_https(&cfg.endpoint) {
        let rustls = cfg
            .tls
            .rustls_config(&[b"h2"])
            .with_context(|| format!("TLS for the OTLP endpoint {} ({src})", cfg.endpoint))?;
        grpc_tls_channel(uri, Arc::new(rustls), cfg.timeout)?
    } else {
        endpoint_with_timeouts(Endpoint::from(uri), cfg.timeout).connect_lazy()
    })
}

/// gRPC over TLS with kascade's rustls configuration (system roots or the CA
/// file, client certificate): a TCP connection wrapped by tokio-rustls.
/// The channel connects to `http://host:port` so that tonic never attempts
/// TLS of its own; the `https` origin keeps the requests' scheme and
/// authority right.
fn grpc_tls_channel(
    origin: tonic::codegen::http::Uri,
    config: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    let authority = origin
        .authority()
        .context("the OTLP endpoint has no host")?
        .clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(443);
    let server_name = rustls::pki_types::ServerName::try_from(host.clone())
        .with_context(|| format!("{host:?} is not a valid TLS server name"))?;
    let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
        let tls = tokio_rustls::TlsConnector::from(config.clone());
        let (host, server_name) = (host.clone(), server_name.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connect(server_name, tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let plain = Endpoint::from_shared(format!("http://{authority}"))
        .context("the OTLP endpoint's host and port")?;
    Ok(endpoint_with_timeouts(plain, timeout)
        .origin(origin)
        .connect_with_connector_lazy(connector))
}

fn endpoint_with_timeouts(endpoint: Endpoint, timeout: Duration) -> Endpoint {
    endpoint
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .tcp_nodelay(true)
}

/// A receiver may accept a request but reject some of its spans; that is not
/// worth a retry (it would reject them again) but must not pass silently.
fn accepted(response: &ExportTraceServiceResponse) -> Accepted {
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
pub fn classify_grpc(status: &tonic::Status) -> SendError {
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
pub fn classify_http(
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
fn http_error_message(body: &[u8], is_protobuf: bool) -> String {
    if is_protobuf && let Ok(s) = RpcStatus::decode(body) {
        return shorten(&s.message);
    }
    shorten(String::from_utf8_lossy(body).trim())
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], s.len()),
        None => s.to_string(),
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    shorten(&s)
}

/// A gRPC codec whose requests are already protobuf-encoded.
#[derive(Clone, Copy)]
struct PreEncoded;

impl Codec for PreEncoded {
    type Encode = Bytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = BytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<ExportTraceServiceResponse>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
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

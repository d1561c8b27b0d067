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

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message as _;
use tonic::codec::{Codec, CompressionEncoding, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tracing::Instrument as _;

use super::config::{Compression, OtlpConfig};
use super::failure::{
    Accepted, SendError, accepted, chain, classify_grpc, classify_http, http_error_message,
};
use super::{OtlpProtocol, SetupError};
use crate::client_tls;

const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Sends one encoded `ExportTraceServiceRequest`. The exporter's retry,
/// split and trim logic is written against this, so it can be tested with a
/// receiver that answers in a scripted order.
pub(super) trait Transport: Send {
    fn send(&mut self, body: Bytes) -> impl Future<Output = Result<Accepted, SendError>> + Send;
}

pub(super) struct OtlpSender {
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
    pub(super) fn new(cfg: &OtlpConfig) -> Result<Self, SetupError> {
        let src = &cfg.endpoint_source;
        let tls = client_tls::is_https(&cfg.endpoint);
        let transport =
            match cfg.protocol {
                OtlpProtocol::Grpc => {
                    let mut metadata = tonic::metadata::MetadataMap::new();
                    for (k, v) in &cfg.headers {
                        let key = tonic::metadata::MetadataKey::from_bytes(
                            k.to_ascii_lowercase().as_bytes(),
                        )
                        .map_err(|e| {
                            SetupError::header(format!("{k:?}: not a valid gRPC metadata key"), e)
                        })?;
                        let val = v.parse().map_err(|e| {
                            SetupError::header(format!("{k}: value is not valid ASCII"), e)
                        })?;
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
                        .map_err(|e| SetupError::url(src, &cfg.endpoint, e))?;
                    let mut headers = reqwest::header::HeaderMap::new();
                    for (k, v) in &cfg.headers {
                        let name =
                            reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                                SetupError::header(format!("{k:?}: not a valid header name"), e)
                            })?;
                        let mut value = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
                            SetupError::header(format!("{k}: not a valid header value"), e)
                        })?;
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
                        let rustls = cfg
                            .tls
                            .rustls_config(&[b"http/1.1"])
                            .map_err(|e| SetupError::tls(src, &cfg.endpoint, e))?;
                        builder = builder.use_preconfigured_tls(rustls);
                    }
                    let client = builder.build().map_err(SetupError::HttpClient)?;
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
        let span = tracing::info_span!(target: crate::self_trace::TARGET, "export",
            otel.kind = "client", protocol, request.bytes = body.len(),
            rejected_spans = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty);
        let result = self.send_request(body).instrument(span.clone()).await;
        match &result {
            Ok(a) => {
                span.record("rejected_spans", a.rejected_spans);
            }
            Err(e) => crate::self_trace::record_error(&span, &e.message),
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
pub(crate) fn grpc_channel(cfg: &OtlpConfig) -> Result<Channel, SetupError> {
    let src = &cfg.endpoint_source;
    let uri: tonic::codegen::http::Uri = cfg
        .endpoint
        .parse()
        .map_err(|e| SetupError::url(src, &cfg.endpoint, e))?;
    Ok(if client_tls::is_https(&cfg.endpoint) {
        let rustls = cfg
            .tls
            .rustls_config(&[b"h2"])
            .map_err(|e| SetupError::tls(src, &cfg.endpoint, e))?;
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
) -> Result<Channel, SetupError> {
    let authority = origin.authority().ok_or(SetupError::NoHost)?.clone();
    let connector =
        client_tls::grpc_tls_connector(&authority, 443, config).map_err(|e| match e {
            client_tls::TlsError::ServerName(host) => SetupError::ServerName(host),
            other => SetupError::Tls {
                endpoint: origin.to_string(),
                setting: "OTLP endpoint".into(),
                source: Box::new(other),
            },
        })?;
    let plain =
        Endpoint::from_shared(format!("http://{authority}")).map_err(SetupError::Endpoint)?;
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

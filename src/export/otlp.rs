//! OTLP trace export (gRPC or HTTP/protobuf) of a request encoded once: a
//! retry resends the same bytes, so a batch is never cloned span by span to
//! survive a failed attempt (that clone cost a tenth of the collector's CPU).

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};

use super::{ExportConfig, OtlpProtocol};

const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

pub struct OtlpSender {
    transport: Transport,
}

enum Transport {
    Grpc {
        grpc: Box<tonic::client::Grpc<Channel>>,
        metadata: tonic::metadata::MetadataMap,
    },
    Http {
        client: reqwest::Client,
        url: String,
    },
}

impl OtlpSender {
    /// Connects lazily: the receiver may come up after kascade.
    pub fn new(cfg: &ExportConfig) -> anyhow::Result<Self> {
        // No trust store is built in: fail at startup rather than at every export.
        if cfg.endpoint.starts_with("https://") {
            anyhow::bail!(
                "--otlp-endpoint {}: OTLP over TLS is not supported; export to a plaintext endpoint \
                 (an OpenTelemetry Collector beside kascade can forward over TLS)",
                cfg.endpoint
            );
        }
        let transport = match cfg.protocol {
            OtlpProtocol::Grpc => {
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (k, v) in &cfg.headers {
                    let key =
                        tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                            .with_context(|| {
                                format!("--otlp-header {k:?}: not a valid gRPC metadata key")
                            })?;
                    let val = v
                        .parse()
                        .with_context(|| format!("--otlp-header {k}: value is not valid ASCII"))?;
                    metadata.insert(key, val);
                }
                let channel = Endpoint::from_shared(cfg.endpoint.clone())
                    .with_context(|| {
                        format!("--otlp-endpoint {:?} is not a valid URL", cfg.endpoint)
                    })?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout.min(Duration::from_secs(5)))
                    .connect_lazy();
                Transport::Grpc {
                    grpc: Box::new(tonic::client::Grpc::new(channel)),
                    metadata,
                }
            }
            OtlpProtocol::Http => {
                let mut url = cfg.endpoint.trim_end_matches('/').to_string();
                if !url.ends_with("/v1/traces") {
                    url.push_str("/v1/traces");
                }
                reqwest::Url::parse(&url).with_context(|| {
                    format!("--otlp-endpoint {:?} is not a valid URL", cfg.endpoint)
                })?;
                let mut headers = reqwest::header::HeaderMap::new();
                for (k, v) in &cfg.headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .with_context(|| format!("--otlp-header {k:?}: not a valid header name"))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .with_context(|| format!("--otlp-header {k}: not a valid header value"))?;
                    headers.insert(name, value);
                }
                headers.insert(
                    reqwest::header::CONTENT_TYPE,
                    reqwest::header::HeaderValue::from_static("application/x-protobuf"),
                );
                let client = reqwest::Client::builder()
                    .timeout(cfg.timeout)
                    .default_headers(headers)
                    .build()
                    .context("cannot build the OTLP HTTP client")?;
                Transport::Http { client, url }
            }
        };
        Ok(Self { transport })
    }

    /// Sends one encoded `ExportTraceServiceRequest`.
    pub async fn send(&mut self, body: Bytes) -> anyhow::Result<()> {
        match &mut self.transport {
            Transport::Grpc { grpc, metadata } => {
                grpc.ready()
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot connect: {e}"))?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() = metadata.clone();
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(GRPC_EXPORT_PATH);
                let response = grpc
                    .unary(request, path, PreEncoded)
                    .await
                    .map_err(|s| anyhow::anyhow!("gRPC {:?}: {}", s.code(), s.message()))?;
                rejected_spans(response.get_ref())
            }
            Transport::Http { client, url } => {
                let response = client
                    .post(url.as_str())
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let status = response.status();
                if !status.is_success() {
                    let text = response.text().await.unwrap_or_default();
                    anyhow::bail!("HTTP {status}: {}", text.trim());
                }
                Ok(())
            }
        }
    }
}

/// A receiver may accept a request but reject some of its spans; that is not
/// worth a retry (it would reject them again) but must not pass silently.
fn rejected_spans(response: &ExportTraceServiceResponse) -> anyhow::Result<()> {
    if let Some(p) = &response.partial_success
        && p.rejected_spans > 0
    {
        tracing::warn!(
            rejected = p.rejected_spans,
            message = %p.error_message,
            "the OTLP receiver rejected part of a batch"
        );
    }
    Ok(())
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

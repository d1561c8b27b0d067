//! The exporter against real OTLP receivers in the process: a tonic gRPC
//! server that refuses requests over its limit exactly as Jaeger's
//! (grpc-go's) does — in process, so that sizes can be asserted exactly and
//! the limit set below the exporter's bound — and an HTTP server; both also
//! over TLS with client certificates. The same scenarios against the real
//! Jaeger are in tests/e2e/.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes as AxumBytes;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codec::CompressionEncoding;
use tonic::transport::server::Connected;

use super::config::{Compression, OtlpConfig};
use super::failure::Failure;
use super::otlp::{OtlpSender, Transport};
use super::test_support::{JAEGER_GRPC_LIMIT, big_update, int_attr, small_span, test_config};
use super::{EncodedSpan, OtlpProtocol, Output, RequestFramer, Span, resource, spans_dropped};
use crate::client_tls::test_pki::TestPki;
use crate::client_tls::{ClientTls, FileSetting};
use crate::metrics::{Metrics, TrimReason};

#[derive(Default)]
struct GrpcLog {
    request_sizes: Vec<usize>,
    refused: usize,
    encodings: Vec<String>,
    spans: Vec<Span>,
}

/// Refuses a request over `limit` with grpc-go's status and message.
struct JaegerLike {
    limit: usize,
    log: Arc<Mutex<GrpcLog>>,
}

#[tonic::codegen::async_trait]
impl TraceService for JaegerLike {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut log = self.log.lock().unwrap();
        let len = request.get_ref().encoded_len();
        if len > self.limit {
            log.refused += 1;
            return Err(tonic::Status::resource_exhausted(format!(
                "grpc: received message larger than max ({len} vs. {})",
                self.limit
            )));
        }
        log.encodings.push(
            request
                .metadata()
                .get("grpc-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("identity")
                .to_string(),
        );
        log.request_sizes.push(len);
        let request = request.into_inner();
        log.spans.extend(
            request
                .resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans),
        );
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A TLS connection as tonic's server wants it.
struct TlsIo(tokio_rustls::server::TlsStream<TcpStream>);

impl Connected for TlsIo {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Serves a Jaeger-like OTLP gRPC receiver on an ephemeral port.
async fn serve_grpc(
    limit: usize,
    tls: Option<rustls::ServerConfig>,
) -> (SocketAddr, Arc<Mutex<GrpcLog>>) {
    let log = Arc::new(Mutex::new(GrpcLog::default()));
    let service = TraceServiceServer::new(JaegerLike {
        limit,
        log: log.clone(),
    })
    // The size check is the handler's, as grpc-go's is before decoding.
    .max_decoding_message_size(256 << 20)
    .accept_compressed(CompressionEncoding::Gzip);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = tonic::transport::Server::builder().add_service(service);
    match tls {
        None => {
            let incoming = futures::stream::unfold(listener, |l| async move {
                let conn = l.accept().await.map(|(s, _)| s);
                Some((conn, l))
            });
            tokio::spawn(router.serve_with_incoming(incoming));
        }
        Some(cfg) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
            let incoming = futures::stream::unfold((listener, acceptor), |(l, a)| async move {
                let conn = match l.accept().await {
                    Ok((s, _)) => a.accept(s).await.map(TlsIo),
                    Err(e) => Err(e),
                };
                Some((conn, (l, a)))
            });
            tokio::spawn(router.serve_with_incoming(incoming));
        }
    }
    (addr, log)
}

fn otlp_config(
    endpoint: String,
    protocol: OtlpProtocol,
    compression: Compression,
    tls: ClientTls,
) -> OtlpConfig {
    OtlpConfig {
        endpoint,
        endpoint_source: "--otlp-endpoint".into(),
        protocol,
        headers: vec![("x-tenant".into(), "test".into())],
        timeout: Duration::from_secs(30),
        compression,
        tls,
    }
}

/// Exports `spans` through the real sender and waits until all is written.
async fn export_all(
    otlp: OtlpConfig,
    retry_for: Duration,
    spans: Vec<EncodedSpan>,
) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::default());
    let mut cfg = test_config();
    cfg.retry_for = retry_for;
    let sender = OtlpSender::new(&otlp).unwrap();
    let (tx, _stop, done) = super::start_outputs(
        cfg,
        vec![(Output::Otlp(sender), otlp.endpoint.clone())],
        metrics.clone(),
        Default::default(),
    );
    for s in spans {
        tx.send(s).await.unwrap();
    }
    drop(tx);
    done.await.unwrap();
    metrics
}

fn the_issue_batch() -> Vec<EncodedSpan> {
    let mut spans: Vec<EncodedSpan> = (0..50).map(small_span).collect();
    for i in 0..3 {
        spans.insert(
            i * 20,
            big_update("big", &format!("update-{i}"), 1, 1_500_000),
        );
    }
    spans
}

/// Issue 10, defect 2, over real gRPC with Jaeger's 4 MiB limit. A short
/// --export-retry-for so that the unfixed exporter fails this quickly.
#[tokio::test]
async fn the_issue_batch_reaches_a_receiver_with_jaegers_limit_over_grpc() {
    let (addr, log) = serve_grpc(JAEGER_GRPC_LIMIT, None).await;
    let otlp = otlp_config(
        format!("http://{addr}"),
        OtlpProtocol::Grpc,
        Compression::None,
        ClientTls::default(),
    );
    let metrics = export_all(otlp, Duration::from_secs(2), the_issue_batch()).await;
    let log = log.lock().unwrap();
    assert_eq!(log.refused, 0);
    assert_eq!(log.spans.len(), 53);
    let capped: Vec<i64> = log
        .spans
        .iter()
        .filter_map(|s| s.events.first())
        .filter_map(|e| int_attr(&e.attributes, "diff.new.truncated_from"))
        .collect();
    assert_eq!(capped, [1_500_000; 3]);
    assert_eq!(spans_dropped(&metrics), 0);
}

#[tokio::test]
async fn a_grpc_receiver_refusing_large_requests_gets_them_in_halves_gzipped() {
    let (addr, log) = serve_grpc(200_000, None).await;
    let otlp = otlp_config(
        format!("http://{addr}"),
        OtlpProtocol::Grpc,
        Compression::Gzip,
        ClientTls::default(),
    );
    let mut spans: Vec<EncodedSpan> = (0..40).map(small_span).collect();
    for i in 0..3 {
        spans.insert(i * 13, big_update("big", &format!("update-{i}"), 5, 30_000));
    }
    let metrics = export_all(otlp, Duration::from_secs(300), spans).await;
    let log = log.lock().unwrap();
    assert!(log.refused > 0, "the first request was too large");
    assert_eq!(log.spans.len(), 43);
    assert!(log.request_sizes.iter().all(|&n| n <= 200_000));
    assert!(
        log.encodings.iter().all(|e| e == "gzip"),
        "{:?}",
        log.encodings
    );
    assert_eq!(
        metrics
            .spans_trimmed
            .get_or_create(&Metrics::trimmed(TrimReason::ReceiverLimit))
            .get(),
        3
    );
    assert_eq!(spans_dropped(&metrics), 0);
}

fn pki_tls(pki: &TestPki, ca: &std::path::Path, with_identity: bool) -> ClientTls {
    ClientTls {
        ca_file: Some(FileSetting::new(ca, "--otlp-ca-file")),
        identity: with_identity.then(|| {
            (
                FileSetting::new(&pki.client_cert, "--otlp-client-cert-file"),
                FileSetting::new(&pki.client_key, "--otlp-client-key-file"),
            )
        }),
    }
}

fn one_request() -> bytes::Bytes {
    let spans: Vec<EncodedSpan> = (0..3).map(small_span).collect();
    RequestFramer::new(&resource("kascade-test")).frame(&spans)
}

#[tokio::test]
async fn grpc_export_over_mutual_tls_with_gzip() {
    let pki = TestPki::generate();
    let (addr, log) = serve_grpc(JAEGER_GRPC_LIMIT, Some(pki.server_config(true))).await;
    let endpoint = format!("https://127.0.0.1:{}", addr.port());

    let otlp = otlp_config(
        endpoint.clone(),
        OtlpProtocol::Grpc,
        Compression::Gzip,
        pki_tls(&pki, &pki.ca, true),
    );
    let metrics = export_all(
        otlp,
        Duration::from_secs(300),
        (0..20).map(small_span).collect(),
    )
    .await;
    assert_eq!(log.lock().unwrap().spans.len(), 20);
    assert_eq!(log.lock().unwrap().encodings, ["gzip"]);
    assert_eq!(spans_dropped(&metrics), 0);

    // Without a client certificate, or trusting another CA: no connection,
    // which is a transport failure (retried, the receiver may be fixed).
    for tls in [
        pki_tls(&pki, &pki.ca, false),
        pki_tls(&pki, &pki.other_ca, true),
    ] {
        let mut sender = OtlpSender::new(&otlp_config(
            endpoint.clone(),
            OtlpProtocol::Grpc,
            Compression::None,
            tls,
        ))
        .unwrap();
        let e = sender.send(one_request()).await.unwrap_err();
        assert_eq!(e.failure, Failure::Retryable { after: None }, "{e}");
    }
    assert_eq!(log.lock().unwrap().spans.len(), 20);
}

#[derive(Default)]
struct HttpLog {
    encodings: Vec<String>,
    tenants: Vec<String>,
    spans: usize,
}

/// A scripted answer: status, headers, body.
type HttpAnswer = (StatusCode, Vec<(&'static str, String)>, Vec<u8>);

/// An OTLP/HTTP receiver answering `script` in order, then 200.
async fn serve_http(
    script: Vec<HttpAnswer>,
    tls: Option<rustls::ServerConfig>,
) -> (SocketAddr, Arc<Mutex<HttpLog>>) {
    let log = Arc::new(Mutex::new(HttpLog::default()));
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
    let handler_log = log.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: AxumBytes| {
            let (log, script) = (handler_log.clone(), script.clone());
            async move {
                let header = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string()
                };
                let mut log = log.lock().unwrap();
                log.encodings.push(header("content-encoding"));
                log.tenants.push(header("x-tenant"));
                if let Some((status, headers, body)) = script.lock().unwrap().pop_front() {
                    let mut response = axum::response::Response::builder().status(status);
                    for (k, v) in headers {
                        response = response.header(k, v);
                    }
                    return response.body(axum::body::Body::from(body)).unwrap();
                }
                let raw = if header("content-encoding") == "gzip" {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(body.as_ref()),
                        &mut out,
                    )
                    .unwrap();
                    out
                } else {
                    body.to_vec()
                };
                let request = ExportTraceServiceRequest::decode(raw.as_slice()).unwrap();
                log.spans += crate::frontend::raw::spans_of(request.resource_spans).len();
                axum::response::Response::builder()
                    .header("content-type", "application/x-protobuf")
                    .body(axum::body::Body::from(
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    ))
                    .unwrap()
            }
        }),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    match tls {
        Some(cfg) => {
            let config = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(cfg));
            let server = axum_server::from_tcp_rustls(listener, config).unwrap();
            tokio::spawn(server.serve(app.into_make_service()));
        }
        None => {
            let listener = TcpListener::from_std(listener).unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
    }
    (addr, log)
}

/// `google.rpc.Status` as an OTLP/HTTP receiver sends it in an error body.
fn rpc_status(code: i32, message: &str) -> Vec<u8> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let mut out = Vec::new();
    encode_key(1, WireType::Varint, &mut out);
    encode_varint(code as u64, &mut out);
    encode_key(2, WireType::LengthDelimited, &mut out);
    encode_varint(message.len() as u64, &mut out);
    out.extend_from_slice(message.as_bytes());
    out
}

#[tokio::test]
async fn http_export_over_mutual_tls_with_gzip_honours_retry_after() {
    let pki = TestPki::generate();
    let (addr, log) = serve_http(
        vec![(
            StatusCode::SERVICE_UNAVAILABLE,
            vec![("retry-after", "2".into())],
            Vec::new(),
        )],
        Some(pki.server_config(true)),
    )
    .await;
    let otlp = otlp_config(
        format!("https://localhost:{}/v1/traces", addr.port()),
        OtlpProtocol::Http,
        Compression::Gzip,
        pki_tls(&pki, &pki.ca, true),
    );
    let mut sender = OtlpSender::new(&otlp).unwrap();
    let e = sender.send(one_request()).await.unwrap_err();
    assert_eq!(
        e.failure,
        Failure::Retryable {
            after: Some(Duration::from_secs(2))
        },
        "{e}"
    );
    sender.send(one_request()).await.unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.spans, 3);
    assert_eq!(log.encodings, ["gzip", "gzip"]);
    assert_eq!(log.tenants, ["test", "test"]);
}

#[tokio::test]
async fn http_answers_are_classified_per_the_otlp_specification() {
    let (addr, _log) = serve_http(
        vec![
            (
                StatusCode::BAD_REQUEST,
                vec![("content-type", "application/x-protobuf".into())],
                rpc_status(3, "span has no trace id"),
            ),
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                vec![],
                b"request body too large".to_vec(),
            ),
            (StatusCode::TOO_MANY_REQUESTS, vec![], Vec::new()),
            (StatusCode::UNAUTHORIZED, vec![], Vec::new()),
            (StatusCode::GATEWAY_TIMEOUT, vec![], Vec::new()),
        ],
        None,
    )
    .await;
    let otlp = otlp_config(
        format!("http://{addr}/v1/traces"),
        OtlpProtocol::Http,
        Compression::None,
        ClientTls::default(),
    );
    let mut sender = OtlpSender::new(&otlp).unwrap();
    let mut next = async || sender.send(one_request()).await.unwrap_err();
    let e = next().await;
    assert_eq!(e.failure, Failure::Permanent);
    assert!(
        e.message.contains("400") && e.message.contains("span has no trace id"),
        "{e}"
    );
    assert_eq!(next().await.failure, Failure::TooLarge);
    assert_eq!(next().await.failure, Failure::Retryable { after: None });
    assert_eq!(next().await.failure, Failure::Permanent);
    assert_eq!(next().await.failure, Failure::Retryable { after: None });
    // Nothing listens here: a transport failure, retried.
    let closed = otlp_config(
        "http://127.0.0.1:1".into(),
        OtlpProtocol::Http,
        Compression::None,
        ClientTls::default(),
    );
    let e = OtlpSender::new(&closed)
        .unwrap()
        .send(one_request())
        .await
        .unwrap_err();
    assert_eq!(e.failure, Failure::Retryable { after: None }, "{e}");
}

//! Self-tracing (src/telemetry.rs) in process: the spans of a real webhook
//! batch and of its export, the frontend continuing a caller's
//! `traceparent`, and the SDK exporter (opentelemetry-otlp) delivering to
//! OTLP receivers over gRPC and HTTP. The spans are caught by the SDK's
//! in-memory exporter behind kascade's own layer; the e2e suite finds the
//! same traces in a real Jaeger (tests/e2e/).

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::Parser;
use kascade::app::collect::{self, CollectConfig};
use kascade::test_support::cli::{Cli, Command};
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt as _;

/// The process-wide subscriber with kascade's self-tracing layer, exporting
/// to memory (each test picks its own spans out by trace).
fn spans() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(
            kascade::test_support::telemetry::self_tracing_layer(&provider),
        );
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        // Keeps the provider (and so the exporter) alive for the process.
        std::mem::forget(provider);
        exporter
    })
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// Polls the finished spans until `found` picks what it needs (spans end
/// asynchronously: the batch's `process` when its last event is done).
async fn wait_for<T>(what: &str, found: impl Fn(&[SpanData]) -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let all = spans().get_finished_spans().unwrap();
        if let Some(t) = found(&all) {
            return t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} among {:?}",
            all.iter()
                .map(|s| (s.name.to_string(), s.attributes.clone()))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn children<'a>(all: &'a [SpanData], parent: &SpanData) -> Vec<&'a SpanData> {
    all.iter()
        .filter(|s| {
            s.span_context.trace_id() == parent.span_context.trace_id()
                && s.parent_span_id == parent.span_context.span_id()
        })
        .collect()
}

/// An OTLP/HTTP receiver that takes everything and keeps the bodies.
async fn http_receiver() -> (String, Arc<Mutex<Vec<axum::body::Bytes>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(body);
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_batch_is_one_trace_of_decode_admit_and_process_and_exports_are_spans() {
    spans();
    let (receiver, bodies) = http_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool").display().to_string();
    let Command::Collect(args) = Cli::parse_from([
        "kascade",
        "collect",
        "--output",
        "otlp",
        "--otlp-protocol",
        "http",
        "--otlp-endpoint",
        &receiver,
        "--spool-dir",
        &spool,
    ])
    .command
    else {
        unreachable!()
    };
    let config: CollectConfig = (*args).into();
    let (apps, _pipeline) = collect::build(&config).unwrap();
    let url = common::collector::spawn_server(apps.audit, config.header_read_timeout);

    let lines = common::audit_lines("deployment");
    let r = reqwest::Client::new()
        .post(format!("{url}/audit/selftrace-webhook"))
        .body(common::event_list(&lines))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let is_request = |s: &SpanData| {
        s.name == "webhook request" && attr(s, "cluster").as_deref() == Some("selftrace-webhook")
    };
    let (request, process) = wait_for("process span of the batch", |all| {
        let request = all.iter().find(|s| is_request(s))?;
        let process = children(all, request)
            .into_iter()
            .find(|s| s.name == "process")?;
        Some((request.clone(), process.clone()))
    })
    .await;
    // The request is the root of its trace.
    assert_eq!(request.parent_span_id, SpanId::INVALID);
    assert_eq!(request.span_kind, SpanKind::Server);
    assert_eq!(
        attr(&request, "http.response.status_code").as_deref(),
        Some("200")
    );
    let events = attr(&request, "events").expect("events counted");
    assert!(events.parse::<usize>().unwrap() > 0, "{events}");
    let all = spans().get_finished_spans().unwrap();
    let names: Vec<&str> = children(&all, &request)
        .iter()
        .map(|s| s.name.as_ref())
        .collect();
    for name in ["decode", "admit", "process"] {
        assert_eq!(
            names.iter().filter(|n| **n == name).count(),
            1,
            "{name} under the request: {names:?}"
        );
    }
    // One span for the batch's processing, not one per event.
    assert_eq!(attr(&process, "events"), Some(events.clone()));
    let decode = children(&all, &request)
        .into_iter()
        .find(|s| s.name == "decode")
        .unwrap();
    assert_eq!(attr(decode, "events"), Some(events));
    assert!(process.end_time >= process.start_time);

    // The spans reach the receiver in OTLP requests, each an `export` span.
    let export = wait_for("export span", |all| {
        all.iter()
            .find(|s| s.name == "export" && attr(s, "protocol").as_deref() == Some("http/protobuf"))
            .cloned()
    })
    .await;
    assert_eq!(export.span_kind, SpanKind::Client);
    assert!(!bodies.lock().unwrap().is_empty());
    assert!(
        attr(&export, "request.bytes")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frontend_continues_the_callers_trace() {
    use kascade::test_support::frontend::proto::{GetTraceParams, GetTracesRequest};
    use kascade::test_support::frontend::raw::MemoryStore;
    use kascade::test_support::frontend::service::JaegerStorage;
    use kascade::test_support::frontend::{Frontend, FrontendConfig};

    spans();
    let frontend = Arc::new(Frontend::new(
        Arc::new(MemoryStore::default()),
        FrontendConfig::default(),
    ));
    let (traces, deps) = JaegerStorage::new(frontend).servers();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .trace_fn(kascade::test_support::self_trace::grpc_request_span)
            .add_service(traces)
            .add_service(deps)
            .serve_with_incoming(tokio_stream_of(listener)),
    );

    let caller_trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let caller_span = SpanId::from_hex("00f067aa0ba902b7").unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(GetTracesRequest {
        query: vec![GetTraceParams {
            trace_id: vec![7; 16],
            ..Default::default()
        }],
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{caller_trace}-{caller_span}-01")
            .parse()
            .unwrap(),
    );
    let mut stream = grpc
        .server_streaming::<_, opentelemetry_proto::tonic::trace::v1::TracesData, _>(
            request,
            "/jaeger.storage.v2.TraceReader/GetTraces".parse().unwrap(),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    while stream.message().await.unwrap().is_some() {}

    let (request, get) = wait_for("GetTraces span in the caller's trace", |all| {
        let request = all
            .iter()
            .find(|s| s.name == "GetTraces" && s.span_context.trace_id() == caller_trace)?;
        let get = children(all, request)
            .into_iter()
            .find(|s| s.name == "get")?;
        Some((request.clone(), get.clone()))
    })
    .await;
    assert_eq!(request.parent_span_id, caller_span);
    assert!(request.parent_span_is_remote);
    assert_eq!(request.span_kind, SpanKind::Server);
    assert_eq!(attr(&get, "cached").as_deref(), Some("false"));
}

/// The listener as the stream of connections tonic serves.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    })
}

fn self_trace_config(vars: &[(&str, &str)]) -> kascade::test_support::telemetry::SelfTraceConfig {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    kascade::test_support::telemetry::config_from_env(
        &move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        kascade::test_support::telemetry::Role {
            component: "test",
            object_service: Some(("kascade", "--service-name")),
        },
    )
    .unwrap()
    .expect("self-tracing on")
}

/// Ends one span through the SDK pipeline of `cfg` and flushes it (the
/// batch processor exports from a thread of its own).
async fn export_one_span(cfg: &kascade::test_support::telemetry::SelfTraceConfig) {
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    let provider = kascade::test_support::telemetry::tracer_provider(cfg).unwrap();
    provider.tracer("test").in_span("exported", |_| {});
    tokio::task::spawn_blocking(move || {
        provider.force_flush().unwrap();
        provider.shutdown().unwrap();
    })
    .await
    .unwrap();
}

fn service_and_spans(
    req: &opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
) -> (Vec<String>, Vec<String>) {
    let services = req
        .resource_spans
        .iter()
        .flat_map(|rs| rs.resource.iter().flat_map(|r| r.attributes.iter()))
        .filter(|kv| kv.key == "service.name")
        .map(|kv| format!("{:?}", kv.value))
        .collect();
    let names = req
        .resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter().flat_map(|ss| ss.spans.iter()))
        .map(|s| s.name.clone())
        .collect();
    (services, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_exports_over_otlp_http() {
    use prost::Message as _;
    let (receiver, bodies) = http_receiver().await;
    let cfg = self_trace_config(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver),
    ]);
    export_one_span(&cfg).await;
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 1);
    let req = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
        bodies[0].as_ref(),
    )
    .unwrap();
    let (services, names) = service_and_spans(&req);
    assert_eq!(names, ["exported"]);
    assert_eq!(services.len(), 1);
    assert!(services[0].contains("\"kascade-test\""), "{services:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_exports_over_otlp_grpc() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    #[derive(Clone, Default)]
    struct Receiver(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);
    #[tonic::async_trait]
    impl TraceService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap().push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream_of(listener)),
    );
    let endpoint = format!("http://{addr}");
    let cfg = self_trace_config(&[
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
        ("OTEL_SERVICE_NAME", "kascade-grpc-test"),
    ]);
    export_one_span(&cfg).await;
    let got = receiver.0.lock().unwrap();
    assert_eq!(got.len(), 1);
    let (services, names) = service_and_spans(&got[0]);
    assert_eq!(names, ["exported"]);
    assert!(
        services[0].contains("\"kascade-grpc-test\""),
        "{services:?}"
    );
}

//! Bodies as shippers send them: lines, arrays, wrapped records, OTLP
//! logs; component traces.

use super::*;

/// Shippers post audit events as the log has them: one per line (Fluent
/// Bit's `http` output with `format json_lines`, Vector's `http` sink), as
/// a JSON array (Fluent Bit's `format json`, each record with the `date`
/// key Fluent Bit adds), or as records holding the log line as text (`log`:
/// Fluent Bit's `tail` without a parser; `message`: Vector's `file`
/// source). The records are made here from the fixture's lines, as those
/// shippers make them (no shipper runs in this test). Each form is accepted
/// as the EventList of the same lines is: the same audit spans; a bad line
/// is named by its number and the rest is kept.
#[tokio::test]
async fn shippers_bodies_of_lines_arrays_and_wrapped_records_are_accepted() {
    let lines = common::audit_lines("deployment");
    // Writes of Events become Event spans, not audit spans: left out.
    let ids = audit_ids_of_writes(&lines);
    assert!(ids.len() > 20);
    let chunk = lines.len() / 4;
    let (a, rest) = lines.split_at(chunk);
    let (b, rest) = rest.split_at(chunk);
    let (c, d) = rest.split_at(chunk);
    let ndjson = a.join("\n") + "\n";
    let array = format!(
        "[{}]",
        b.iter()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["date"] = serde_json::json!(1733400000.123);
                v.to_string()
            })
            .collect::<Vec<_>>()
            .join(",")
    );
    let wrapped_log = c
        .iter()
        .map(|l| serde_json::json!({"date": 1733400000.5, "log": format!("{l}\n")}).to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let wrapped_message = d
        .iter()
        .map(|l| serde_json::json!({"message": l, "source_type": "file"}).to_string())
        .collect::<Vec<_>>()
        .join("\n");

    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    for (what, body) in [
        ("lines", ndjson),
        ("array", array),
        ("log records", wrapped_log),
        ("message records", wrapped_message),
    ] {
        let r = client
            .post(format!("{}/audit", srv.url))
            .header("Content-Type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{what}: {}", r.text().await.unwrap());
    }
    // One bad line among good ones: 400 naming it, the others kept.
    let extra = common::audit_lines("config");
    let mixed = format!("{}\nnot an event\n{}\n", extra[0], extra[1]);
    let r = client
        .post(format!("{}/audit", srv.url))
        .body(mixed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("accepted 2 events") && text.contains("line 2"),
        "{text}"
    );

    let m = metrics_text(&srv.url).await;
    assert_eq!(
        metric(
            &m,
            "kascade_audit_events_received_total{source=\"webhook\"}"
        ),
        lines.len() as u64 + 3
    );
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
}

/// The OpenTelemetry Collector's `filelog` receiver tailing `audit.log`,
/// exported with `otlphttp`: one log record per line, its body the line.
/// The requests are made here from the fixture's lines as that pipeline
/// makes them (no OpenTelemetry Collector runs in this test), protobuf and
/// OTLP/JSON. Accepted as the EventList of the same lines is; a record
/// whose body is no text is counted in OTLP's partial success; a body that
/// is not OTLP is a 400, another media type a 415.
#[tokio::test]
async fn otlp_logs_of_audit_lines_are_accepted_and_answered_as_otlp() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::Message as _;
    let request = common::otlp_logs_of;
    let lines = common::audit_lines("deployment");
    let ids = audit_ids_of_writes(&lines);
    let half = lines.len() / 2;
    let (srv, pipeline) = serve(|_| {}).await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "application/x-protobuf")
        .body(request(&lines[..half], Some(any_value::Value::IntValue(7))).encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer = ExportLogsServiceResponse::decode(r.bytes().await.unwrap()).unwrap();
    let partial = answer.partial_success.expect("the int body is rejected");
    assert_eq!(partial.rejected_log_records, 1);
    assert!(
        partial.error_message.contains("log record 1"),
        "{}",
        partial.error_message
    );
    let json = serde_json::to_string(&request(&lines[half..], None)).unwrap();
    let r = client
        .post(format!("{}/v1/logs/other-cluster", srv.url))
        .header("Content-Type", "application/json")
        .body(json)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "application/x-protobuf")
        .body("not protobuf at all, surely")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = client
        .post(format!("{}/v1/logs", srv.url))
        .header("Content-Type", "text/plain")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
    assert!(
        out.contains("\"stringValue\":\"other-cluster\""),
        "cluster from the path"
    );
}

/// The OpenTelemetry Collector's `otlp` exporter (gRPC, `LogsService/
/// Export`) with the filelog receiver's records: here tonic's client of the
/// same generated OTLP service (no Collector runs in this test; the e2e
/// shippers test runs one). Authenticated before the body is read
/// (`UNAUTHENTICATED`), gzip as `grpc-encoding`, the cluster from the
/// `kascade-cluster` header, a record that holds no line counted in the
/// partial success, and every write becomes its span.
#[tokio::test]
async fn otlp_logs_over_grpc_are_accepted_and_answered_as_grpc() {
    use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
    use opentelemetry_proto::tonic::common::v1::any_value;
    let lines = common::audit_lines("deployment");
    let ids = audit_ids_of_writes(&lines);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "grpc-secret\n").unwrap();
    let (srv, pipeline) = serve(|c| c.webhook_token_file = Some(token)).await;
    let channel = tonic::transport::Channel::from_shared(srv.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = LogsServiceClient::new(channel);
    let err = client
        .export(common::otlp_logs_of(&lines, None))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let half = lines.len() / 2;
    let authorized = |req, cluster: Option<&str>| {
        let mut req = tonic::Request::new(req);
        req.metadata_mut()
            .insert("authorization", "Bearer grpc-secret".parse().unwrap());
        if let Some(c) = cluster {
            req.metadata_mut()
                .insert("kascade-cluster", c.parse().unwrap());
        }
        req
    };
    let answer = client
        .export(authorized(
            common::otlp_logs_of(&lines[..half], Some(any_value::Value::IntValue(7))),
            Some("grpc-cluster"),
        ))
        .await
        .unwrap()
        .into_inner();
    let partial = answer.partial_success.expect("the int body is rejected");
    assert_eq!(partial.rejected_log_records, 1);
    let mut gzipped = client
        .clone()
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let answer = gzipped
        .export(authorized(common::otlp_logs_of(&lines[half..], None), None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);
    let err = client
        .export(authorized(
            common::otlp_logs_of(&lines, None),
            Some("no/slash"),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    pipeline.finish().await;
    let out = std::fs::read_to_string(&srv.out).unwrap();
    for id in &ids {
        assert!(out.contains(id.as_str()), "audit span of {id} missing");
    }
    assert!(
        out.contains("\"stringValue\":\"grpc-cluster\""),
        "cluster from the header"
    );
}

#[tokio::test]
async fn component_traces_are_authenticated_first_and_shed_when_the_raw_store_stalls() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    // A raw store that accepts connections and never answers: what is
    // forwarded stays queued.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let lines = captured_trace_lines();
    let first: ExportTraceServiceRequest = serde_json::from_str(&lines[0]).unwrap();
    let encoded = first.encode_to_vec();
    let mut config = CollectConfig::default()
        .cluster("test")
        .webhook_token_file(&token)
        .spool_dir(dir.path().join("spool"));
    config.export = config.export.output(OutputSpec::Otlp);
    config.export.otlp_endpoint = Some(format!("http://{}", stalled.local_addr().unwrap()));
    config.export.otlp_timeout = Some(Duration::from_secs(60));
    config.component_traces_listen = Some("127.0.0.1:0".parse().unwrap());
    // Room for one request (as forwarded: the cluster stamped), not two.
    config.component_traces_queue_bytes = encoded.len() + 200;
    let (apps, _pipeline) = collect::build(&config).unwrap();
    let url = spawn_server(
        apps.component_traces.unwrap().merge(apps.admin),
        config.header_read_timeout,
    );
    let client = reqwest::Client::new();
    let grpc_path = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    framed.extend_from_slice(&encoded);
    // No token: refused before the body is read, in each protocol's terms.
    let r = client
        .post(format!("{url}/v1/traces"))
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client
        .post(format!("{url}{grpc_path}"))
        .header("content-type", "application/grpc")
        .body(framed.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "16", "UNAUTHENTICATED");
    // A bad cluster name is refused with what is wrong.
    let r = client
        .post(format!("{url}/v1/traces/not%20a%20cluster"))
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Accepted over HTTP (OTLP/JSON) …
    let r = client
        .post(format!("{url}/v1/traces"))
        .bearer_auth("s3cret")
        .header("content-type", "application/json")
        .body(lines[0].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // … then the queue is full: gRPC UNAVAILABLE and HTTP 503, both retried
    // by the exporters, counted as shed.
    let r = client
        .post(format!("{url}{grpc_path}"))
        .bearer_auth("s3cret")
        .header("content-type", "application/grpc")
        .body(framed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "14", "UNAVAILABLE");
    let r = client
        .post(format!("{url}/v1/traces"))
        .bearer_auth("s3cret")
        .header("content-type", "application/x-protobuf")
        .body(encoded.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(r.text().await.unwrap().contains("forwarding queue is full"));
    let spans: usize = first
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum();
    let text = metrics_text(&url).await;
    assert_eq!(
        metric(&text, "kascade_component_spans_total{outcome=\"received\"}"),
        spans as u64
    );
    assert_eq!(
        metric(&text, "kascade_component_spans_total{outcome=\"shed\"}"),
        2 * spans as u64
    );
    assert_eq!(
        metric(
            &text,
            "kascade_component_trace_requests_refused_total{reason=\"unauthorized\"}"
        ),
        2
    );
    drop(stalled);
}

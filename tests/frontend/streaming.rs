//! Assemblies shared, bounded in time and number, and streamed in chunks
//! Jaeger joins.

use super::*;

#[tokio::test]
async fn every_span_lies_within_its_parent_so_jaeger_sees_no_clock_skew() {
    for (scenario, resource, name) in [
        ("deployment", "deployments", "hello"),
        ("rollout-stuck", "deployments", "web"),
        ("job", "jobs", "pi"),
    ] {
        let (f, range) = frontend(scenario).await;
        for mode in Mode::ALL {
            let t = search_one(
                &f,
                range,
                mode,
                Scope::Full,
                &[("resource", resource), ("name", name)],
            )
            .await;
            let spans = all_spans(&t);
            let by_id: BTreeMap<Vec<u8>, &Span> =
                spans.iter().map(|(_, s)| (s.span_id.clone(), s)).collect();
            for (_, s) in &spans {
                let Some(p) = by_id.get(&s.parent_span_id) else {
                    continue;
                };
                assert!(
                    s.start_time_unix_nano >= p.start_time_unix_nano
                        && s.end_time_unix_nano <= p.end_time_unix_nano,
                    "{scenario} {mode:?}: {} [{}, {}] outside its parent {} [{}, {}]",
                    s.name,
                    s.start_time_unix_nano,
                    s.end_time_unix_nano,
                    p.name,
                    p.start_time_unix_nano,
                    p.end_time_unix_nano
                );
            }
        }
    }
}

#[tokio::test]
async fn concurrent_requests_for_one_trace_share_one_assembly() {
    let s = Arc::new(store("deployment").await);
    let id = hello_tree_id(&s).await;
    // One request alone: what one assembly reads.
    let alone = Frontend::new(s.clone(), FrontendConfig::default());
    alone.get(&id).await.unwrap().expect("assembled");
    let reads_of_one = alone.metrics().raw_reads.get();
    assert!(reads_of_one > 1, "{reads_of_one}");
    // Four at once on a replica with an empty cache (the UI's search and
    // reload, two users): one assembly, the same trace for all.
    let shared = Arc::new(Frontend::new(s.clone(), FrontendConfig::default()));
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let f = shared.clone();
            tokio::spawn(async move { f.get(&id).await.unwrap().expect("assembled") })
        })
        .collect();
    let mut traces = Vec::new();
    for r in requests {
        traces.push(r.await.unwrap());
    }
    assert!(traces.iter().all(|t| Arc::ptr_eq(t, &traces[0])));
    assert_eq!(shared.metrics().traces_assembled.get(), 1);
    assert_eq!(shared.metrics().raw_reads.get(), reads_of_one);
}

#[tokio::test]
async fn an_assembly_past_its_deadline_fails_with_a_timeout_not_a_hang() {
    // Its reads would time out only after a minute.
    let url = silent_jaeger_url().await;
    // A real assembled id, as the UI would reload it.
    let id = hello_tree_id(&Arc::new(store("deployment").await)).await;
    let hanging = JaegerHttp::new(&url, "kascade", Duration::from_secs(60));
    let f = Frontend::new(
        Arc::new(hanging),
        FrontendConfig {
            assembly_timeout: Duration::from_millis(300),
            ..FrontendConfig::default()
        },
    );
    let err = f.get(&id).await.unwrap_err();
    assert!(err.to_string().contains("--assembly-timeout"), "{err}");
    assert_eq!(f.metrics().assembly_timeouts.get(), 1);
    // Not cached: the next request tries again.
    assert!(f.get(&id).await.is_err());
    assert_eq!(f.metrics().assembly_timeouts.get(), 2);
}

#[tokio::test]
async fn assemblies_past_max_assemblies_wait_for_one_in_flight() {
    // An assembly reading from it stays in flight until dropped.
    let url = silent_jaeger_url().await;
    // Two different traces, as the UI would reload them.
    let s = Arc::new(store("deployment").await);
    let offline = Frontend::new(s.clone(), FrontendConfig::default());
    let tree = hello_in(&offline, Mode::Tree).await.id;
    let in_tracing = hello_in(&offline, Mode::Tracing).await.id;
    assert_ne!(tree, in_tracing);
    let f = Arc::new(Frontend::new(
        Arc::new(JaegerHttp::new(&url, "kascade", Duration::from_secs(600))),
        FrontendConfig {
            max_assemblies: 1,
            assembly_timeout: Duration::from_secs(600),
            ..FrontendConfig::default()
        },
    ));
    let get = |id: [u8; 16]| {
        let f = f.clone();
        tokio::spawn(async move { f.get(&id).await })
    };
    // Polled in turns, not time: each turn lets the spawned requests run.
    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..100_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{what} never happened");
    }
    let first = get(tree);
    until("the first assembly reading", || {
        f.metrics().raw_reads.get() > 0
    })
    .await;
    let reads_of_first = f.metrics().raw_reads.get();
    let second = get(in_tracing);
    until("the second assembly waiting", || {
        f.metrics().assembly_waits.get() == 1
    })
    .await;
    assert_eq!(
        f.metrics().raw_reads.get(),
        reads_of_first,
        "it read nothing"
    );
    assert!(!second.is_finished());
    // The first one ends (its request dropped): the second goes ahead.
    first.abort();
    until("the second assembly reading", || {
        f.metrics().raw_reads.get() > reads_of_first
    })
    .await;
    assert_eq!(f.metrics().assembly_waits.get(), 1);
    second.abort();
}

#[tokio::test]
async fn unreachable_remote_storage_is_an_error_naming_its_url() {
    // Nothing listens on port 1 of the loopback: a real refused connection.
    let store = kascade::test_support::frontend::raw::JaegerGrpc::connect(
        "http://127.0.0.1:1",
        "kascade",
        Duration::from_secs(2),
        &kascade::test_support::client_tls::ClientTls::default(),
    )
    .unwrap();
    let err = store.get_many(&[[1; 16], [2; 16]], 4).await.unwrap_err();
    assert!(
        matches!(
            err,
            kascade::test_support::frontend::raw::RawError::Unreachable { .. }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("http://127.0.0.1:1"), "{err}");
    // A URL that is not one fails when the frontend starts, naming it.
    let err = kascade::test_support::frontend::raw::JaegerGrpc::connect(
        "not a url",
        "kascade",
        Duration::from_secs(2),
        &kascade::test_support::client_tls::ClientTls::default(),
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("not a url"), "{err}");
}

#[tokio::test]
async fn encoded_messages_go_on_the_wire_as_the_message_they_were_encoded_from() {
    use kascade::test_support::frontend::proto::TracesMessage;
    use prost::Message as _;
    let (f, range) = frontend("deployment").await;
    let assembled = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let data = TracesData {
        resource_spans: assembled.resource_spans.clone(),
    };
    assert!(data.resource_spans.len() > 1);
    let decoded = TracesMessage::Decoded(data.clone());
    let encoded = TracesMessage::Encoded(data.encode_to_vec().into());
    assert_eq!(encoded.encoded_len(), decoded.encoded_len());
    assert_eq!(encoded.encode_to_vec(), decoded.encode_to_vec());
    // Read back, either is the same TracesData.
    let read = TracesMessage::decode(encoded.encode_to_vec().as_slice()).unwrap();
    assert_eq!(read, decoded);
    assert_eq!(encoded.clone().into_decoded().unwrap(), data);
    // Fields merged into an encoded message land after its own.
    let mut merged = encoded;
    merged.merge(data.encode_to_vec().as_slice()).unwrap();
    let twice = merged.into_decoded().unwrap();
    let n = data.resource_spans.len();
    assert_eq!(twice.resource_spans.len(), 2 * n);
    assert_eq!(twice.resource_spans[..n], data.resource_spans);
    assert_eq!(twice.resource_spans[n..], data.resource_spans);
}

#[tokio::test]
async fn a_trace_too_big_for_one_grpc_message_streams_in_chunks_jaeger_joins() {
    let store = store_of_lines(common::deployment_with_pods(400)).await;
    let range = whole_range(&store);
    // Every Pod a span of its own: a trace of several MiB.
    let config = FrontendConfig {
        max_siblings: 0,
        ..FrontendConfig::default()
    };
    let f = Arc::new(Frontend::new(Arc::new(store), config));
    let assembled = search_one(
        &f,
        range,
        Mode::Tracing,
        Scope::Full,
        &[("resource", "deployments"), ("name", "hello")],
    )
    .await;
    let spans_assembled: Vec<&Span> = assembled
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .collect();

    let channel = grpc_frontend(f).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        )
        .max_decoding_message_size(64 << 20);
    // Twice: the first answer encodes the cached trace, the second sends
    // the same bytes again.
    for request in ["first", "second"] {
        let mut stream = client
            .get_traces(GetTracesRequest {
                query: vec![GetTraceParams {
                    trace_id: assembled.id.to_vec(),
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner();
        let mut messages = 0;
        let mut spans: Vec<Span> = Vec::new();
        while let Some(m) = stream.message().await.unwrap() {
            use prost::Message as _;
            messages += 1;
            // Under the 4 MiB a Go gRPC client takes by default.
            assert!(m.encoded_len() < 4 << 20, "{} bytes", m.encoded_len());
            let m = m.into_decoded().unwrap();
            // Each message starts with a span of this trace: how Jaeger joins them.
            let first = &m.resource_spans[0].scope_spans[0].spans[0];
            assert_eq!(first.trace_id, assembled.id.to_vec());
            for rs in m.resource_spans {
                for ss in rs.scope_spans {
                    assert!(ss.spans.iter().all(|s| s.trace_id == assembled.id.to_vec()));
                    spans.extend(ss.spans);
                }
            }
        }
        assert!(messages > 1, "{} spans in one message", spans.len());
        assert_eq!(spans.len(), spans_assembled.len(), "{request} answer");
        assert!(
            spans.iter().zip(&spans_assembled).all(|(a, b)| a == *b),
            "{request} answer: the spans differ from the assembled trace's"
        );
    }
}

#[tokio::test]
async fn a_served_search_assembles_each_trace_once_the_previous_one_is_taken() {
    use futures::StreamExt as _;
    let s = Arc::new(store("deployment").await);
    // Whole seconds, as the gRPC query below gives them.
    let secs =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (start, end) = {
        let r = whole_range(&s);
        (secs(r.start), secs(r.end) + 1)
    };
    let range = TimeRange::new(
        std::time::UNIX_EPOCH + Duration::from_secs(start),
        std::time::UNIX_EPOCH + Duration::from_secs(end),
    );
    let query = SearchQuery {
        mode: Mode::Tracing,
        scope: Scope::Full,
        all_siblings: false,
        tags: tags(&[("resource", "pods")]),
        range,
        limit: 20,
    };
    let all: Vec<[u8; 16]> = Frontend::new(s.clone(), FrontendConfig::default())
        .search(&query)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert!(all.len() >= 2, "{} Pods found", all.len());

    let f = Arc::new(Frontend::new(s.clone(), FrontendConfig::default()));
    let assembled = || f.metrics().traces_assembled.get();
    let found = f.find(&query).await.unwrap();
    assert_eq!(assembled(), 0, "finding assembles nothing");
    let mut stream = std::pin::pin!(f.clone().found_stream(found));
    let mut streamed = Vec::new();
    while let Some(t) = stream.next().await {
        streamed.push(t.unwrap().id);
        // The next trace is not assembled before this one is taken.
        assert_eq!(assembled(), streamed.len() as u64);
    }
    assert_eq!(streamed, all, "the same traces, in the same order");

    // Over gRPC, with nothing cached: every trace streamed, in order.
    let uncached = Arc::new(Frontend::new(
        s,
        FrontendConfig {
            cache_bytes: 1,
            ..FrontendConfig::default()
        },
    ));
    let channel = grpc_frontend(uncached.clone()).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        )
        .max_decoding_message_size(64 << 20);
    let mut stream = client
        .find_traces(FindTracesRequest {
            query: Some(TraceQueryParameters {
                service_name: "tracing".into(),
                attributes: vec![kv("resource", "pods")],
                start_time_min: ts(start as i64, 0),
                start_time_max: ts(end as i64, 0),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids: Vec<[u8; 16]> = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        let m = m.into_decoded().unwrap();
        let id: [u8; 16] = m.resource_spans[0].scope_spans[0].spans[0]
            .trace_id
            .clone()
            .try_into()
            .unwrap();
        if ids.last() != Some(&id) {
            ids.push(id);
        }
    }
    assert_eq!(ids, all);
    assert_eq!(uncached.metrics().traces_assembled.get(), all.len() as u64);
}

#[tokio::test]
async fn an_assembly_failing_while_its_answer_streams_ends_the_stream_with_its_status() {
    use kascade::test_support::metrics::{FrontendMetrics, Rpc};
    // Its reads would time out only after a minute; the assembly's deadline
    // ends them first.
    let url = silent_jaeger_url().await;
    let id = hello_tree_id(&Arc::new(store("deployment").await)).await;
    let f = Arc::new(Frontend::new(
        Arc::new(JaegerHttp::new(&url, "kascade", Duration::from_secs(60))),
        FrontendConfig {
            assembly_timeout: Duration::from_millis(300),
            ..FrontendConfig::default()
        },
    ));
    let channel = grpc_frontend(f.clone()).await;
    let mut client =
        kascade::test_support::frontend::proto::trace_reader_client::TraceReaderClient::new(
            channel,
        );
    // The call is answered at once; the trace is assembled as its stream is read.
    let mut stream = client
        .get_traces(GetTracesRequest {
            query: vec![GetTraceParams {
                trace_id: id.to_vec(),
                ..Default::default()
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let err = stream.message().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message().contains("--assembly-timeout"),
        "{}",
        err.message()
    );
    let failed = f
        .metrics()
        .errors
        .get_or_create(&FrontendMetrics::rpc(Rpc::GetTraces))
        .get();
    assert_eq!(failed, 1);
    assert_eq!(f.metrics().assembly_timeouts.get(), 1);
}

//! The Jaeger remote storage API: requests that do not decode, bounds.

use super::*;

/// A request that does not decode is the caller's error: InvalidArgument
/// saying so, not Internal.
#[tokio::test]
async fn grpc_requests_that_do_not_decode_get_invalid_argument() {
    let (f, _) = frontend("deployment").await;
    let channel = grpc_frontend(f).await;
    let not_utf8 = QueryNotUtf8 {
        query: Some(ServiceNameBytes {
            service_name: b"kas\xffcade".to_vec(),
        }),
    };
    let wrong_type = QueryOfTheWrongWireType { query: 7 };
    for status in [
        find_traces_raw(&channel, not_utf8).await,
        find_traces_raw(&channel, wrong_type).await,
    ] {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("does not decode"), "{status:?}");
    }
}

#[tokio::test]
async fn grpc_searches_beyond_bounds_get_invalid_argument_with_a_short_message() {
    let (f, range) = frontend("deployment").await;
    let channel = grpc_frontend(f).await;
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
    };
    let good = TraceQueryParameters {
        attributes: vec![kv("name", "hello"), kv("resource", "deployments")],
        start_time_min: ts(secs(range.start), 0),
        start_time_max: ts(secs(range.end) + 1, 0),
        ..Default::default()
    };
    assert_eq!(find_traces(&channel, good.clone()).await.unwrap(), 1);
    // Jaeger sends Go's zero time (year 1) for an open bound: not an error.
    let open = TraceQueryParameters {
        start_time_min: ts(-62_135_596_800, 0),
        ..good.clone()
    };
    assert_eq!(find_traces(&channel, open).await.unwrap(), 1);

    let huge = "n".repeat(1 << 20);
    let cases: Vec<(TraceQueryParameters, &str)> = vec![
        // Panicked: overflow adding the duration to the epoch.
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 1_500_000_000),
                ..good.clone()
            },
            "start_time_max: nanos 1500000000",
        ),
        // Was searched as if the year 292 billion could hold spans.
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 0),
                ..good.clone()
            },
            "start_time_max: 9223372036854775807 s since the epoch is after 9999-12-31",
        ),
        (
            TraceQueryParameters {
                start_time_max: ts(i64::MAX, 999_999_999),
                start_time_min: ts(i64::MAX, 0),
                ..good.clone()
            },
            "after 9999-12-31",
        ),
        (
            TraceQueryParameters {
                start_time_min: ts(0, -1),
                ..good.clone()
            },
            "start_time_min: nanos -1",
        ),
        // A 1 MiB value echoed whole made a status too large to send.
        (
            TraceQueryParameters {
                attributes: vec![kv("name", &huge)],
                ..good.clone()
            },
            "(1048576 bytes)",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv(&huge, "x")],
                ..good.clone()
            },
            "unknown tag",
        ),
        (
            TraceQueryParameters {
                service_name: huge.clone(),
                ..good.clone()
            },
            "display mode",
        ),
        (
            TraceQueryParameters {
                operation_name: huge.clone(),
                ..good.clone()
            },
            "cluster name",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv("namespace", &"s".repeat(64))],
                ..good.clone()
            },
            "64 bytes, longer than the 63 allowed",
        ),
        (
            TraceQueryParameters {
                attributes: vec![kv("name", "a"); 33],
                ..good.clone()
            },
            "33 tags",
        ),
    ];
    for (query, needle) in cases {
        let err = find_traces(&channel, query).await.unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{needle}: {}",
            &err.message()[..err.message().len().min(300)]
        );
        assert!(
            err.message().contains(needle),
            "{needle}: {}",
            err.message()
        );
        assert!(
            err.message().len() < 2200,
            "{needle}: {}",
            err.message().len()
        );
    }
    // The server is still there.
    assert_eq!(find_traces(&channel, good).await.unwrap(), 1);
}

#[tokio::test]
async fn get_traces_bounds_the_ids_per_request() {
    use kascade::test_support::frontend::proto::trace_reader_server::TraceReader;
    let (f, _) = frontend("deployment").await;
    let storage = JaegerStorage::new(f);
    let ids = |n: usize| GetTracesRequest {
        query: (0..n)
            .map(|i| GetTraceParams {
                trace_id: vec![i as u8; 16],
                ..Default::default()
            })
            .collect(),
    };
    assert!(
        storage
            .get_traces(tonic::Request::new(ids(100)))
            .await
            .is_ok()
    );
    let err = storage
        .get_traces(tonic::Request::new(ids(101)))
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("101 trace ids"), "{}", err.message());
}

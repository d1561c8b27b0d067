//! The exporter end to end over scripted receivers: size limits, trimming,
//! retries, deadlines, stalled outputs, backpressure and progress.

use super::batcher::Batch;
use super::failure::{Accepted, SendError, classify_http};
use super::otlp::Transport;
use super::output::{OutputContext, export_batch};
use super::test_support::*;
use super::*;
use crate::metrics::{ExportOutput, TrimReason};
use bytes::Bytes;
use std::fs::File;
use std::io::BufWriter;
use std::time::Duration;

/// Issue 10, defect 2: three updates of a 1.5 MB ConfigMap and 50 small
/// creates in one batch made a 9.1 MB request; Jaeger refused it
/// (ResourceExhausted, larger than max 4194304), the exporter retried it
/// for --export-retry-for and then dropped all 53 spans.
#[tokio::test(start_paused = true)]
async fn updates_of_a_huge_configmap_are_capped_and_the_spans_around_them_exported() {
    let mut spans: Vec<EncodedSpan> = (0..25).map(small_span).collect();
    for i in 0..3 {
        spans.push(big_update("big", &format!("update-{i}"), 1, 1_500_000));
    }
    spans.extend((25..50).map(small_span));
    let (receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    let started = Instant::now();
    let metrics = export_all(
        test_config(),
        vec![(Output::Scripted(receiver), "jaeger".into())],
        spans,
    )
    .await;
    let log = log.lock().unwrap();
    assert_eq!(log.spans.len(), 53, "every span arrives");
    assert_eq!(log.attempts, log.request_sizes.len(), "no request refused");
    assert!(
        log.request_sizes
            .iter()
            .all(|&n| n <= DEFAULT_MAX_BATCH_BYTES)
    );
    let got = names_and_markers(&log.spans);
    for i in 0..3 {
        assert!(
            got.contains(&(format!("update-{i}"), Some(1_500_000), None)),
            "update-{i}: {got:?}"
        );
    }
    assert_eq!(exported(&metrics, "otlp"), 53);
    assert_eq!(spans_dropped(&metrics), 0);
    // Within the batch timeout, not after minutes of retries.
    assert!(started.elapsed() <= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_span_too_large_for_any_batch_is_trimmed_and_marked_not_dropped() {
    // 100 changed keys of 30 KB each: every value is under the cap, the
    // span is 6 MB.
    let mut spans: Vec<EncodedSpan> = (0..50).map(small_span).collect();
    spans.insert(10, big_update("many-keys", "update-many", 100, 30_000));
    let (receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    let metrics = export_all(
        test_config(),
        vec![(Output::Scripted(receiver), "jaeger".into())],
        spans,
    )
    .await;
    let log = log.lock().unwrap();
    assert_eq!(log.spans.len(), 51);
    assert_eq!(log.attempts, log.request_sizes.len(), "no request refused");
    let big = log
        .spans
        .iter()
        .find(|s| s.name == "kascade-e2e-admin update")
        .unwrap();
    let dropped_events = int_attr(&big.attributes, trim::TRIMMED_EVENTS_DROPPED).unwrap();
    assert!(dropped_events > 0);
    assert_eq!(big.events.len() as i64 + dropped_events, 100);
    assert_eq!(big.dropped_events_count as i64, dropped_events);
    assert!(int_attr(&big.attributes, trim::TRIMMED_FROM_BYTES).unwrap() > 6_000_000);
    assert_eq!(
        metrics
            .spans_trimmed
            .get_or_create(&Metrics::trimmed(TrimReason::BatchBytes))
            .get(),
        1
    );
    assert_eq!(metrics.span_events_trimmed.get(), dropped_events as u64);
    assert_eq!(spans_dropped(&metrics), 0);
}

#[tokio::test(start_paused = true)]
async fn a_receiver_with_a_smaller_limit_gets_halves_down_to_trimmed_single_spans() {
    // The receiver takes 200 KB; kascade's bound is 2 MiB: batches are
    // refused as too large, split, and the 300 KB spans trimmed.
    let mut spans: Vec<EncodedSpan> = (0..40).map(small_span).collect();
    for i in 0..3 {
        spans.insert(i * 13, big_update("big", &format!("update-{i}"), 5, 30_000));
    }
    let (receiver, log) = ScriptedReceiver::new(200_000);
    let metrics = export_all(
        test_config(),
        vec![(Output::Scripted(receiver), "collector".into())],
        spans,
    )
    .await;
    let log = log.lock().unwrap();
    assert_eq!(log.spans.len(), 43);
    assert!(log.request_sizes.iter().all(|&n| n <= 200_000));
    // Order is kept through the splits.
    let order: Vec<&str> = log
        .spans
        .iter()
        .filter_map(|s| crate::frontend::raw::string_attr(&s.attributes, "audit.id"))
        .collect();
    assert_eq!(order, ["update-0", "update-1", "update-2"]);
    for s in log.spans.iter().filter(|s| !s.events.is_empty()) {
        assert!(int_attr(&s.attributes, trim::TRIMMED_EVENTS_DROPPED).unwrap() > 0);
    }
    assert!(
        metrics
            .export_splits
            .get_or_create(&Metrics::output(ExportOutput::Otlp))
            .get()
            > 0
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

#[tokio::test(start_paused = true)]
async fn permanent_refusals_are_dropped_at_once_and_counted_with_their_reason() {
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    receiver.script.push_back(classify_http(
        400,
        None,
        "bad request",
        std::time::SystemTime::now(),
    ));
    let started = Instant::now();
    let metrics = export_all(
        test_config(),
        vec![(Output::Scripted(receiver), "r".into())],
        (0..7).map(small_span).collect(),
    )
    .await;
    assert_eq!(log.lock().unwrap().attempts, 1, "not retried");
    assert_eq!(dropped(&metrics, "otlp", DropReason::Rejected), 7);
    assert_eq!(exported(&metrics, "otlp"), 0);
    assert!(started.elapsed() <= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn retryable_failures_wait_as_long_as_the_receiver_asks() {
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    let now = std::time::SystemTime::now();
    receiver
        .script
        .push_back(classify_http(503, Some("7"), "", now));
    receiver
        .script
        .push_back(classify_http(429, Some("3"), "", now));
    receiver.script.push_back(classify_http(502, None, "", now));
    let started = Instant::now();
    let metrics = export_all(
        test_config(),
        vec![(Output::Scripted(receiver), "r".into())],
        (0..5).map(small_span).collect(),
    )
    .await;
    assert_eq!(log.lock().unwrap().attempts, 4);
    assert_eq!(exported(&metrics, "otlp"), 5);
    // 7 s and 3 s as asked, then the backoff, which doubled on each
    // failure from 100 ms: 400 ms.
    assert_eq!(started.elapsed(), Duration::from_millis(10_400));
    assert_eq!(
        metrics
            .export_errors
            .get_or_create(&Metrics::output(ExportOutput::Otlp))
            .get(),
        3
    );
}

#[tokio::test(start_paused = true)]
async fn retries_end_at_the_deadline_and_the_spans_are_counted() {
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    for _ in 0..1000 {
        receiver.script.push_back(SendError {
            failure: Failure::Retryable { after: None },
            message: "connection refused".into(),
        });
    }
    let mut cfg = test_config();
    cfg.retry_for = Duration::from_secs(60);
    let started = Instant::now();
    let metrics = export_all(
        cfg,
        vec![(Output::Scripted(receiver), "r".into())],
        (0..4).map(small_span).collect(),
    )
    .await;
    assert_eq!(dropped(&metrics, "otlp", DropReason::RetriesExhausted), 4);
    // Attempts at 0, then after backoffs of 0.1, 0.2 … 3.2 s (6.3 s),
    // then every 5 s up to 56.3 s, and a last one at the deadline.
    assert_eq!(log.lock().unwrap().attempts, 18);
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

/// Three batches of two spans to a receiver that never answers, each
/// retried for 60 s unless the exporter gives up once lost.
async fn three_batches_to_a_lost_receiver(
    give_up_once_lost: bool,
) -> (Arc<Metrics>, usize, Duration) {
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    for _ in 0..1000 {
        receiver.script.push_back(SendError {
            failure: Failure::Retryable { after: None },
            message: "connection refused".into(),
        });
    }
    let mut cfg = test_config();
    cfg.retry_for = Duration::from_secs(60);
    cfg.batch_size = 2;
    cfg.give_up_once_lost = give_up_once_lost;
    let started = Instant::now();
    let metrics = export_all(
        cfg,
        vec![(Output::Scripted(receiver), "r".into())],
        (0..6).map(small_span).collect(),
    )
    .await;
    let attempts = log.lock().unwrap().attempts;
    (metrics, attempts, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn an_exporter_that_gives_up_once_lost_retries_one_batch_only() {
    // As collect exports: each batch has its own 60 s.
    let (metrics, attempts, took) = three_batches_to_a_lost_receiver(false).await;
    assert_eq!(dropped(&metrics, "otlp", DropReason::RetriesExhausted), 6);
    assert_eq!(attempts, 3 * 18);
    assert_eq!(took, Duration::from_secs(180));
    // As replay exports: the first batch's 60 s, then the rest dropped.
    let (metrics, attempts, took) = three_batches_to_a_lost_receiver(true).await;
    assert_eq!(dropped(&metrics, "otlp", DropReason::RetriesExhausted), 6);
    assert_eq!(attempts, 18);
    assert_eq!(took, Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn rejected_spans_of_an_accepted_request_are_counted() {
    struct PartlyRejecting;
    impl Transport for PartlyRejecting {
        async fn send(&mut self, _: Bytes) -> Result<Accepted, SendError> {
            Ok(Accepted {
                rejected_spans: 2,
                message: "2 spans without a name".into(),
            })
        }
    }
    let metrics = Arc::new(Metrics::default());
    let ctx = OutputContext {
        label: ExportOutput::Otlp,
        index: 0,
        progress: Default::default(),
        target: "r".into(),
        retry_for: Duration::from_secs(1),
        gone: None,
        framer: Arc::new(RequestFramer::new(&resource("t"))),
        metrics: metrics.clone(),
    };
    let spans: Vec<EncodedSpan> = (0..5).map(small_span).collect();
    let batch = Batch {
        protobuf: ctx.framer.frame(&spans),
        spans,
        also_finishes: 0,
    };
    export_batch(&mut PartlyRejecting, &batch, &ctx).await;
    assert_eq!(exported(&metrics, "otlp"), 3);
    assert_eq!(dropped(&metrics, "otlp", DropReason::PartialRejection), 2);
}

/// One output's failure never blocks another: while the OTLP receiver
/// holds every request, the file output writes all spans.
#[tokio::test(start_paused = true)]
async fn a_stalled_receiver_does_not_hold_up_the_file_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    receiver.gate = Some(gate.clone());
    let outputs = vec![
        (Output::Scripted(receiver), "jaeger".into()),
        (
            Output::Json {
                writer: BufWriter::new(File::create(&path).unwrap()),
                path: path.clone(),
            },
            path.display().to_string(),
        ),
    ];
    let metrics = Arc::new(Metrics::default());
    let mut cfg = test_config();
    cfg.batch_size = 10;
    let (tx, _stop, done) = start_outputs(cfg, outputs, metrics.clone(), Default::default());
    for i in 0..30 {
        tx.send(small_span(i)).await.unwrap();
    }
    drop(tx);
    // Virtual time only moves while every task waits.
    let mut waited = 0;
    while exported(&metrics, "otlp-json") < 30 {
        waited += 1;
        assert!(
            waited < 10_000,
            "the file output waits for the stalled receiver"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(exported(&metrics, "otlp"), 0);
    assert_eq!(log.lock().unwrap().attempts, 1);
    gate.add_permits(100);
    done.await.unwrap();
    assert_eq!(exported(&metrics, "otlp"), 30);
    let lines = std::fs::read_to_string(&path).unwrap();
    assert_eq!(lines.lines().count(), 3);
}

/// A full output queue holds the batcher and then the span channel, so
/// the processor waits (and the webhook answers 429): nothing is lost.
#[tokio::test(start_paused = true)]
async fn a_full_output_queue_is_backpressure_not_loss() {
    let (mut receiver, log) = ScriptedReceiver::new(JAEGER_GRPC_LIMIT);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    receiver.gate = Some(gate.clone());
    let metrics = Arc::new(Metrics::default());
    let mut cfg = test_config();
    cfg.batch_size = 1;
    cfg.output_queue_batches = 1;
    cfg.queue_capacity = 2;
    let (tx, _stop, done) = start_outputs(
        cfg,
        vec![(Output::Scripted(receiver), "r".into())],
        metrics.clone(),
        Default::default(),
    );
    // In the receiver (1), in the output queue (1), in the batcher (1),
    // in the span channel (2): the sixth waits.
    let mut sent = 0;
    for i in 0..6 {
        match tx.try_send(small_span(i)) {
            Ok(()) => sent += 1,
            Err(mpsc::error::TrySendError::Full(_)) => break,
            Err(e) => panic!("{e}"),
        }
        // Virtual time moves once every task waits: the pipeline has
        // taken what it can.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(sent, 5);
    assert_eq!(
        metrics
            .export_output_queue_depth
            .get_or_create(&Metrics::output(ExportOutput::Otlp))
            .get(),
        1
    );
    gate.add_permits(1000);
    tx.send(small_span(5)).await.unwrap();
    drop(tx);
    done.await.unwrap();
    assert_eq!(log.lock().unwrap().spans.len(), 6);
    assert_eq!(spans_dropped(&metrics), 0);
}

#[tokio::test(start_paused = true)]
async fn progress_counts_every_span_once_all_outputs_are_done_with_it() {
    // Two outputs, one of them a receiver that refuses everything (its
    // spans are dropped and counted, so they are done too), and a span
    // too large even when trimmed (dropped by the batcher).
    let mut cfg = test_config();
    cfg.max_batch_bytes = 4096;
    let progress = Arc::new(ExportProgress::default());
    let metrics = Arc::new(Metrics::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let (refusing, _) = ScriptedReceiver::new(0);
    let outputs = vec![
        (
            Output::Json {
                writer: BufWriter::new(File::create(&path).unwrap()),
                path: path.clone(),
            },
            path.display().to_string(),
        ),
        (Output::Scripted(refusing), "refusing".into()),
    ];
    let (tx, stop, done) = start_outputs(cfg, outputs, metrics.clone(), progress.clone());
    assert_eq!(progress.finished(), 0);
    let mut unfit = small_span(0);
    unfit.0 = vec![0x0a; 1 << 20].into();
    let spans: Vec<EncodedSpan> = (1..=20).map(small_span).chain([unfit]).collect();
    let n = spans.len() as u64;
    for s in spans {
        tx.send(s).await.unwrap();
        progress.add_sent(1);
    }
    // Paused clock: a wait that could never end fails at once.
    tokio::time::timeout(
        Duration::from_secs(3600),
        progress.wait_finished(progress.sent()),
    )
    .await
    .expect("some spans were never counted as done");
    assert_eq!(progress.finished(), n);
    stop.close();
    drop(tx);
    done.await.unwrap();
}

//! Test helpers: spans as the processor writes them, and a receiver that
//! answers in a scripted order. The receiver is a fake so that timing
//! (retry delays, deadlines) runs on tokio's paused clock and order is
//! exact; the same logic against real gRPC and HTTP receivers is tested in
//! `receivers.rs`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;

use super::failure::{Accepted, SendError, classify_grpc};
use super::otlp::Transport;
use super::*;
use crate::metrics::ExportOutput;
use crate::model::{ObjectRef, ObjectWindow};
use crate::span_model::{AuditWrite, EncodedSpan};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;

pub(super) const JAEGER_GRPC_LIMIT: usize = 4 << 20;

pub(super) fn window(resource: &str, name: &str) -> ObjectWindow {
    ObjectWindow {
        object: ObjectRef::new("c", "", resource, "ns", name),
        window_start: 1_800_000_000,
    }
}

/// The object span of a small ConfigMap, as a create makes it.
pub(super) fn small_span(i: usize) -> EncodedSpan {
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_100);
    crate::span_model::object_span(&window("configmaps", &format!("small-{i}")), "uid", at).finish()
}

/// The audit span of an update of ConfigMap `name` that changed
/// `changes` keys, each from and to a value of `value_len` bytes.
pub(super) fn big_update(
    name: &str,
    audit_id: &str,
    changes: usize,
    value_len: usize,
) -> EncodedSpan {
    let at = UNIX_EPOCH + Duration::from_secs(1_800_000_100);
    let mut s = crate::span_model::audit_span(
        &window("configmaps", name),
        &AuditWrite {
            audit_id,
            user: "kascade-e2e-admin",
            impersonated_user: None,
            user_agent: "kubectl/v1.36.3",
            verb: "update",
            subresource: "",
            code: 200,
            source_ip: "127.0.0.1",
            old_rv: "1",
            new_rv: "2",
            error: None,
            start: at,
            end: at,
            recorded_by: None,
            annotations: &crate::flow::NO_ANNOTATIONS,
        },
    );
    let (old, new) = ("o".repeat(value_len), "n".repeat(value_len));
    for i in 0..changes {
        let path = format!("data.key{i:03}");
        s.event(
            crate::span_model::EVENT_DIFF,
            at,
            &[
                ("diff.op", "replace"),
                ("diff.path", &path),
                ("diff.old", &old),
                ("diff.new", &new),
            ],
        );
    }
    s.finish()
}

pub(super) fn test_config() -> ExportConfig {
    ExportConfig {
        otlp: None,
        batch_size: 2048,
        max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
        batch_timeout: Duration::from_secs(1),
        queue_capacity: 10_000,
        output_queue_batches: DEFAULT_OUTPUT_QUEUE_BATCHES,
        retry_for: Duration::from_secs(300),
        give_up_once_lost: false,
        // Tests never change the process-wide cap: spans written by
        // other tests running at the same time depend on it.
        max_value_bytes: crate::span_model::DEFAULT_MAX_VALUE_BYTES,
        service_name: "kascade-test".into(),
    }
}

pub(super) fn int_attr(
    attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<i64> {
    crate::frontend::raw::int_attr(attrs, key)
}

/// What a scripted receiver saw.
#[derive(Default)]
pub(super) struct ReceiverLog {
    pub attempts: usize,
    pub request_sizes: Vec<usize>,
    pub spans: Vec<Span>,
}

/// Refuses requests over `limit` as Jaeger (grpc-go) does, answers the
/// scripted failures first, and may hold every request until the test
/// opens `gate`.
pub(super) struct ScriptedReceiver {
    pub(super) limit: usize,
    pub(super) script: VecDeque<SendError>,
    pub(super) gate: Option<Arc<tokio::sync::Semaphore>>,
    pub(super) log: Arc<std::sync::Mutex<ReceiverLog>>,
}

impl ScriptedReceiver {
    pub(super) fn new(limit: usize) -> (Self, Arc<std::sync::Mutex<ReceiverLog>>) {
        let log = Arc::new(std::sync::Mutex::new(ReceiverLog::default()));
        (
            Self {
                limit,
                script: VecDeque::new(),
                gate: None,
                log: log.clone(),
            },
            log,
        )
    }
}

impl Transport for ScriptedReceiver {
    async fn send(&mut self, body: Bytes) -> Result<Accepted, SendError> {
        self.log.lock().unwrap().attempts += 1;
        if let Some(gate) = &self.gate {
            gate.acquire().await.unwrap().forget();
        }
        if let Some(e) = self.script.pop_front() {
            return Err(e);
        }
        if body.len() > self.limit {
            // grpc-go's answer to a message over its limit.
            return Err(classify_grpc(&tonic::Status::resource_exhausted(format!(
                "grpc: received message larger than max ({} vs. {})",
                body.len(),
                self.limit
            ))));
        }
        let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        let mut log = self.log.lock().unwrap();
        log.request_sizes.push(body.len());
        log.spans
            .extend(crate::frontend::raw::spans_of(request.resource_spans));
        Ok(Accepted::default())
    }
}

/// The output whose label is `name`, as /metrics spells it.
fn output(name: &str) -> ExportOutput {
    *ExportOutput::ALL
        .iter()
        .find(|o| o.as_str() == name)
        .unwrap()
}

pub(super) fn exported(m: &Metrics, output: &str) -> u64 {
    m.spans_exported
        .get_or_create(&Metrics::output(self::output(output)))
        .get()
}

pub(super) fn dropped(m: &Metrics, output: &str, reason: DropReason) -> u64 {
    m.spans_dropped
        .get_or_create(&Metrics::dropped(self::output(output), reason))
        .get()
}

/// Runs the exporter with `outputs` over `spans` and waits until it has
/// written everything.
pub(super) async fn export_all(
    cfg: ExportConfig,
    outputs: Vec<(Output, String)>,
    spans: Vec<EncodedSpan>,
) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::default());
    let (tx, _stop, done) = start_outputs(cfg, outputs, metrics.clone(), Default::default());
    for s in spans {
        tx.send(s).await.unwrap();
    }
    drop(tx);
    done.await.unwrap();
    metrics
}

pub(super) fn names_and_markers(spans: &[Span]) -> Vec<(String, Option<i64>, Option<i64>)> {
    let mut v: Vec<_> = spans
        .iter()
        .map(|s| {
            let truncated_from = s
                .events
                .first()
                .and_then(|e| int_attr(&e.attributes, "diff.new.truncated_from"));
            (
                crate::frontend::raw::string_attr(&s.attributes, "audit.id")
                    .or(crate::frontend::raw::string_attr(&s.attributes, "name"))
                    .unwrap_or("")
                    .to_string(),
                truncated_from,
                int_attr(&s.attributes, trim::TRIMMED_EVENTS_DROPPED),
            )
        })
        .collect();
    v.sort();
    v
}

//! Forwarding of other programs' spans as they came: Kubernetes components'
//! own traces (kube-apiserver requests, kubelet pod syncs), received by
//! `kascade collect --component-traces-listen`, go to the same OTLP receiver
//! as kascade's spans, each request as one export request (its resources,
//! scopes and span ids unchanged), with the exporter's retries.
//!
//! The queue is bounded by encoded bytes: a request that does not fit is
//! refused at once (the sender's exporter retries it), counted as shed and
//! logged at most every 10 s; the audit path never waits for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::batcher::RequestFramer;
use super::output::{GiveUp, OutputContext, send_with_retries};
use super::{ExportConfig, SetupError, otlp};
use crate::flow::{ComponentTraceSink, QueueFull};
use crate::metrics::{ComponentSpanOutcome, ExportOutput, Metrics};

/// One encoded `ExportTraceServiceRequest` and how many spans it holds.
struct Request {
    body: Bytes,
    spans: usize,
}

/// The intake's handle: offers requests to the forwarding task.
pub(crate) struct Forwarder {
    tx: mpsc::UnboundedSender<Request>,
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    metrics: Arc<Metrics>,
    shed_log: crate::messages::LogEvery,
}

impl ComponentTraceSink for Forwarder {
    fn offer(&self, body: Bytes, spans: usize) -> Result<(), QueueFull> {
        // An empty request still takes a place.
        let len = body.len().max(64);
        let reserved = self
            .queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q + len <= self.max_bytes).then_some(q + len)
            });
        if let Err(queued) = reserved {
            self.count(ComponentSpanOutcome::Shed, spans);
            if self.shed_log.should_log() {
                tracing::warn!(
                    queued,
                    max = self.max_bytes,
                    spans,
                    "component traces shed: the forwarding queue is full (the raw store is slow or down); their senders retry"
                );
            }
            return Err(QueueFull {
                queued,
                max: self.max_bytes,
            });
        }
        self.metrics
            .component_forward_queue_bytes
            .set(self.queued_bytes.load(Ordering::Acquire) as i64);
        self.count(ComponentSpanOutcome::Received, spans);
        if self.tx.send(Request { body, spans }).is_err() {
            // The task ended (shutdown): nothing will send it.
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.count(ComponentSpanOutcome::Dropped, spans);
        }
        Ok(())
    }
}

impl Forwarder {
    fn count(&self, outcome: ComponentSpanOutcome, spans: usize) {
        self.metrics
            .component_spans
            .get_or_create(&Metrics::component(outcome))
            .inc_by(spans as u64);
    }
}

/// Starts the forwarding task towards the `otlp` output of `cfg`; `None`
/// when there is none (component traces need a raw store to be joined from).
pub(crate) fn start_forwarder(
    cfg: &ExportConfig,
    max_bytes: usize,
    metrics: Arc<Metrics>,
) -> Result<Option<(Forwarder, JoinHandle<()>)>, SetupError> {
    let Some(otlp_cfg) = &cfg.otlp else {
        return Ok(None);
    };
    let mut sender = otlp::OtlpSender::new(otlp_cfg)?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Request>();
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let ctx = OutputContext {
        label: ExportOutput::Otlp,
        index: 0,
        progress: Arc::new(crate::flow::ExportProgress::default()),
        target: format!("{} (component traces)", otlp_cfg.endpoint),
        retry_for: cfg.retry_for,
        // The collector forwards through outages; it never gives up.
        gone: None,
        framer: Arc::new(RequestFramer::new(&super::resource(&cfg.service_name))),
        metrics: metrics.clone(),
    };
    let queued = queued_bytes.clone();
    let task_metrics = metrics.clone();
    let task = tokio::spawn(async move {
        while let Some(req) = rx.recv().await {
            let deadline = Instant::now() + ctx.retry_for;
            let outcome = match send_with_retries(&mut sender, &req.body, req.spans, deadline, &ctx)
                .await
            {
                Ok(accepted) if accepted.rejected_spans == 0 => ComponentSpanOutcome::Forwarded,
                Ok(accepted) => {
                    tracing::error!(output = %ctx.target, rejected = accepted.rejected_spans, message = %accepted.message,
                        "the raw store rejected some component spans");
                    ComponentSpanOutcome::Dropped
                }
                Err(
                    GiveUp::TooLarge(message)
                    | GiveUp::Permanent(message)
                    | GiveUp::RetriesExhausted(message),
                ) => {
                    tracing::error!(output = %ctx.target, spans = req.spans, error = %message,
                        "component spans not forwarded to the raw store; dropped");
                    ComponentSpanOutcome::Dropped
                }
            };
            task_metrics
                .component_spans
                .get_or_create(&Metrics::component(outcome))
                .inc_by(req.spans as u64);
            let len = req.body.len().max(64);
            let left = queued.fetch_sub(len, Ordering::AcqRel) - len;
            task_metrics.component_forward_queue_bytes.set(left as i64);
        }
    });
    Ok(Some((
        Forwarder {
            tx,
            queued_bytes,
            max_bytes,
            metrics,
            shed_log: crate::messages::LogEvery::new(Duration::from_secs(10)),
        },
        task,
    )))
}

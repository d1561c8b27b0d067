//! The batcher: spans into batches bounded by count and encoded bytes,
//! each framed once into an OTLP request for every output.

use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use tokio::sync::mpsc;

use super::{ExportProgress, trim};
use crate::internal_events::{DropCause, InternalEvent, SpansDropped};
use crate::metrics::{ExportOutput, Metrics, TrimReason};
use crate::span_model::{self, EncodedSpan, Span};

pub(super) struct Batch {
    pub(super) spans: Vec<EncodedSpan>,
    pub(super) protobuf: Bytes,
    /// Spans taken from the queue with this batch but dropped before it
    /// (too large even when trimmed): finished along with it, in order.
    pub(super) also_finishes: usize,
}

/// Frames spans encoded one by one into an encoded
/// `ExportTraceServiceRequest`, all under one resource and kascade's scope
/// (both encoded once).
pub(super) struct RequestFramer {
    pub(super) resource: Vec<u8>,
    pub(super) scope: Vec<u8>,
}

impl RequestFramer {
    pub(super) fn new(resource: &Resource) -> Self {
        Self {
            resource: resource.encode_to_vec(),
            scope: span_model::scope().encode_to_vec(),
        }
    }

    /// The encoded size of a request whose spans take `spans_len` bytes
    /// framed (each `framed_len(span.len())`).
    pub(super) fn request_len(&self, spans_len: usize) -> usize {
        use span_model::wire::framed_len;
        let scope_spans_len = framed_len(self.scope.len()) + spans_len;
        let resource_spans_len = framed_len(self.resource.len()) + framed_len(scope_spans_len);
        framed_len(resource_spans_len)
    }

    /// The largest span that fits alone in a request of `max_request` bytes.
    pub(super) fn max_span_len(&self, max_request: usize) -> usize {
        use span_model::wire::framed_len;
        let mut len = max_request;
        loop {
            let total = self.request_len(framed_len(len));
            if total <= max_request || len == 0 {
                break;
            }
            len = len.saturating_sub(total - max_request);
        }
        // A length prefix one byte shorter may leave room for a byte more.
        while self.request_len(framed_len(len + 1)) <= max_request {
            len += 1;
        }
        len
    }

    pub(super) fn frame(&self, spans: &[EncodedSpan]) -> Bytes {
        use span_model::wire::{bytes, framed_len, len_prefix};
        let scope_spans_len = framed_len(self.scope.len())
            + spans.iter().map(|s| framed_len(s.0.len())).sum::<usize>();
        let resource_spans_len = framed_len(self.resource.len()) + framed_len(scope_spans_len);
        let mut out = Vec::with_capacity(framed_len(resource_spans_len));
        // ExportTraceServiceRequest.resource_spans (1) → ResourceSpans.resource
        // (1), .scope_spans (2) → ScopeSpans.scope (1), .spans (2).
        len_prefix(&mut out, 1, resource_spans_len);
        bytes(&mut out, 1, &self.resource);
        len_prefix(&mut out, 2, scope_spans_len);
        bytes(&mut out, 1, &self.scope);
        for s in spans {
            bytes(&mut out, 2, &s.0);
        }
        out.into()
    }
}

/// Collects spans into batches bounded by count and by encoded bytes and
/// hands each batch to every output's queue.
pub(super) struct Batcher {
    pub(super) framer: Arc<RequestFramer>,
    pub(super) max_spans: usize,
    pub(super) max_bytes: usize,
    pub(super) max_span_len: usize,
    pub(super) spans: Vec<EncodedSpan>,
    /// Sum of the framed lengths of `spans`.
    pub(super) spans_len: usize,
    /// Spans dropped since the last batch (see `Batch::also_finishes`).
    pub(super) dropped_since_flush: usize,
    pub(super) queues: Vec<(ExportOutput, mpsc::Sender<Arc<Batch>>)>,
    pub(super) progress: Arc<ExportProgress>,
    pub(super) metrics: Arc<Metrics>,
}

impl Batcher {
    /// Adds a span, first sending the batch if the span would make it too
    /// large, and after it if the batch is full. A span too large for any
    /// batch is trimmed to fit.
    pub(super) async fn add(&mut self, span: EncodedSpan) {
        let Some(span) = self.fit(span) else {
            self.dropped_since_flush += 1;
            return;
        };
        let framed = span_model::wire::framed_len(span.0.len());
        if !self.spans.is_empty()
            && self.framer.request_len(self.spans_len + framed) > self.max_bytes
        {
            self.flush().await;
        }
        self.spans.push(span);
        self.spans_len += framed;
        if self.spans.len() >= self.max_spans {
            self.flush().await;
        }
    }

    pub(super) fn fit(&self, span: EncodedSpan) -> Option<EncodedSpan> {
        if span.0.len() <= self.max_span_len {
            return Some(span);
        }
        match trim::trim_span(&span, self.max_span_len) {
            Some((trimmed, report)) => {
                self.count_trimmed(TrimReason::BatchBytes, &report);
                tracing::warn!(
                    bytes = report.from_bytes,
                    max_batch_bytes = self.max_bytes,
                    events_dropped = report.events_dropped,
                    values_cut = report.values_cut,
                    links_dropped = report.links_dropped,
                    span = %span_name(&trimmed),
                    "span larger than --export-max-batch-bytes: trimmed to fit"
                );
                Some(trimmed)
            }
            None => {
                let outputs: Vec<ExportOutput> =
                    self.queues.iter().map(|(label, _)| *label).collect();
                SpansDropped {
                    outputs: &outputs,
                    target: "",
                    spans: 1,
                    cause: DropCause::TooLargeForBatch {
                        bytes: span.0.len(),
                        max_batch_bytes: self.max_bytes,
                        span: &span_name(&span),
                    },
                }
                .emit(&self.metrics);
                None
            }
        }
    }

    pub(super) fn count_trimmed(&self, reason: TrimReason, report: &trim::Trimmed) {
        count_trimmed(&self.metrics, reason, report);
    }

    /// Nothing waits to be sent or accounted for.
    pub(super) fn is_idle(&self) -> bool {
        self.spans.is_empty() && self.dropped_since_flush == 0
    }

    pub(super) async fn flush(&mut self) {
        if self.is_idle() {
            return;
        }
        let spans = std::mem::take(&mut self.spans);
        self.spans_len = 0;
        let batch = Arc::new(Batch {
            protobuf: self.framer.frame(&spans),
            spans,
            also_finishes: std::mem::take(&mut self.dropped_since_flush),
        });
        self.progress.before_batch_leaves();
        for (index, (label, queue)) in self.queues.iter().enumerate() {
            // A full queue waits here: backpressure, not loss.
            if queue.send(batch.clone()).await.is_err() {
                self.progress
                    .add_finished(index, (batch.spans.len() + batch.also_finishes) as u64);
                // Only when that output's task ended abnormally (a panic).
                SpansDropped {
                    outputs: std::slice::from_ref(label),
                    target: label.as_str(),
                    spans: batch.spans.len(),
                    cause: DropCause::OutputStopped,
                }
                .emit(&self.metrics);
            }
            self.metrics
                .export_output_queue_depth
                .get_or_create(&Metrics::output(*label))
                .set((queue.max_capacity() - queue.capacity()) as i64);
        }
    }
}

pub(super) fn count_trimmed(metrics: &Metrics, reason: TrimReason, report: &trim::Trimmed) {
    metrics
        .spans_trimmed
        .get_or_create(&Metrics::trimmed(reason))
        .inc();
    metrics
        .span_events_trimmed
        .inc_by(report.events_dropped as u64);
}

/// The span's name, for logs.
pub(super) fn span_name(span: &EncodedSpan) -> String {
    Span::decode(span.0.as_ref())
        .map(|s| s.name)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::test_support::{big_update, small_span};
    use crate::export::{resource, to_request};
    use crate::model::{ObjectRef, ObjectWindow};
    use crate::span_model::{AuditWrite, LinkFields};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn framed_requests_decode_to_the_spans_under_one_resource_and_scope() {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_123);
        let pod = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 1_800_000_000,
        };
        let node = ObjectWindow {
            object: ObjectRef::new("c", "", "nodes", "", "n"),
            window_start: 1_800_000_000,
        };
        let mut write = crate::span_model::audit_span(
            &pod,
            &AuditWrite {
                audit_id: "a-1",
                user: "system:kube-scheduler",
                impersonated_user: None,
                user_agent: "kube-scheduler/v1.36.3",
                verb: "create",
                subresource: "binding",
                code: 409,
                source_ip: "127.0.0.1",
                old_rv: "",
                new_rv: "",
                error: Some("Operation cannot be fulfilled".into()),
                start: at,
                end: at + Duration::from_millis(3),
                recorded_by: None,
                annotations: &crate::flow::NO_ANNOTATIONS,
            },
        );
        write.event(
            "diff",
            at,
            &[("diff.path", "spec.nodeName"), ("diff.new", "\"n\"")],
        );
        write.attr_int("kascade.diff.truncated", 7);
        let link = LinkFields {
            target: &node,
            role: "parent",
            class: "node",
            at,
        };
        let spans = vec![
            crate::span_model::object_span(&pod, "uid-1", at).finish(),
            write.finish(),
            crate::span_model::link_span(&pod, &link, 42).finish(),
        ];
        let resource = resource("kascade-test");
        let framed = RequestFramer::new(&resource).frame(&spans);
        let decoded = ExportTraceServiceRequest::decode(framed.as_ref()).unwrap();
        let expected = to_request(spans.iter().map(EncodedSpan::decode).collect(), &resource);
        assert_eq!(decoded, expected);
        let s = &decoded.resource_spans[0].scope_spans[0].spans;
        assert_eq!(s[1].events.len(), 1);
        assert_eq!(
            s[1].attributes.last().unwrap().key,
            "kascade.diff.truncated"
        );
        assert_eq!(
            s[1].status.as_ref().unwrap().message,
            "Operation cannot be fulfilled"
        );
        assert_eq!(s[2].links[0].span_id, node.span_id().to_bytes());
        assert_eq!(s[0].parent_span_id, Vec::<u8>::new());
        assert_eq!(s[1].parent_span_id, pod.span_id().to_bytes());
    }

    #[test]
    fn batches_are_bounded_by_bytes_and_keep_the_order_of_spans() {
        let framer = Arc::new(RequestFramer::new(&resource("t")));
        let max_bytes = 300_000;
        let (tx, mut rx) = mpsc::channel(100);
        let mut batcher = Batcher {
            max_span_len: framer.max_span_len(max_bytes),
            framer,
            max_spans: 2048,
            max_bytes,
            spans: Vec::new(),
            spans_len: 0,
            dropped_since_flush: 0,
            queues: vec![(ExportOutput::Otlp, tx)],
            progress: Default::default(),
            metrics: Arc::new(Metrics::default()),
        };
        let spans: Vec<EncodedSpan> = (0..60)
            .map(|i| {
                if i % 7 == 0 {
                    big_update("b", &format!("u{i}"), 1, 40_000)
                } else {
                    small_span(i)
                }
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            for s in spans.clone() {
                batcher.add(s).await;
            }
            batcher.flush().await;
        });
        drop(batcher);
        let mut seen = Vec::new();
        let mut batches = 0;
        while let Ok(b) = rx.try_recv() {
            batches += 1;
            assert!(
                b.protobuf.len() <= max_bytes,
                "{} > {max_bytes}",
                b.protobuf.len()
            );
            let decoded = ExportTraceServiceRequest::decode(b.protobuf.as_ref()).unwrap();
            assert_eq!(
                decoded.resource_spans[0].scope_spans[0].spans.len(),
                b.spans.len()
            );
            seen.extend(b.spans.iter().map(|s| s.0.clone()));
        }
        assert!(batches >= 2);
        assert_eq!(seen, spans.iter().map(|s| s.0.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn the_largest_single_span_fills_a_request_exactly() {
        let framer = RequestFramer::new(&resource("kascade"));
        for max in [16 << 10, 100_000, 2 << 20, 4 << 20] {
            let len = framer.max_span_len(max);
            let framed = span_model::wire::framed_len(len);
            assert!(framer.request_len(framed) <= max);
            assert!(framer.request_len(span_model::wire::framed_len(len + 1)) > max);
        }
    }
}

//! Kubernetes components' own traces between their intake (`source`) and
//! their forwarding to the raw store (`export`): requests as they came, one
//! encoded `ExportTraceServiceRequest` each. They never enter the audit
//! pipeline.

use bytes::Bytes;

/// Takes component trace requests for the raw store, or refuses one at once
/// when it has no room (the component's exporter retries it).
pub(crate) trait ComponentTraceSink: Send + Sync {
    /// Queues `body` (an encoded `ExportTraceServiceRequest` of `spans`
    /// spans).
    fn offer(&self, body: Bytes, spans: usize) -> Result<(), QueueFull>;
}

/// The forwarding queue had no room for a request.
#[derive(Debug, thiserror::Error)]
#[error(
    "kascade's forwarding queue is full ({queued} of {max} bytes waiting for the raw store); retry later"
)]
pub(crate) struct QueueFull {
    pub queued: usize,
    pub max: usize,
}

//! One change to an object as the cascade analysis sees it: what was written,
//! when, by whom, the object's readiness after it, and the write it was
//! inferred to be caused by. The processor hands these to a [`ChangeSink`]
//! (the change-log output, `kascade analyze`, the live propagation metrics,
//! `kascade explain`, which also takes the Events).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::json::Value;

use crate::model::ObjectRef;

/// A span, by its ids (the raw trace of an object window, and the span in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanRef {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl SpanRef {
    pub fn trace_hex(&self) -> String {
        lower_hex(&self.trace_id)
    }
    pub fn span_hex(&self) -> String {
        lower_hex(&self.span_id)
    }
}

/// Bytes as lowercase hex, as OTLP/JSON and Jaeger write ids (a formatter
/// with padding cost several times more, for several ids per write).
pub(super) fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// Where the change was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeSource {
    /// An audit event (possibly with the list-watch's diff).
    Audit,
    /// Only the list-watch saw it (no audit event claimed it).
    Watch,
}

/// How a write relates to the cascade it belongs to (`cascade.role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CascadeRole {
    /// No related change before it that its writer reacts to.
    Root,
    /// Caused by [`ChangeRecord::cause`].
    Effect,
    /// A controller's write whose cause was not found (counted): its own
    /// root, but not an external change.
    Unexplained,
}

impl CascadeRole {
    /// The value of the `cascade.role` span attribute.
    pub const fn as_str(self) -> &'static str {
        match self {
            CascadeRole::Root => "root",
            CascadeRole::Effect => "effect",
            CascadeRole::Unexplained => "unexplained",
        }
    }
}

/// How a write's change propagation ID (CPID) is known (`cpid.origin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpidOrigin {
    /// The object's `kascade.io/cpid` annotation (an instrumented
    /// controller or the CPID webhook put it there).
    Annotation,
    /// The object's W3C `traceparent` annotation (its trace id).
    Traceparent,
    /// The object carries none: carried over from its inferred cause (an
    /// uninstrumented controller acting on an object that has one).
    Inferred,
}

impl CpidOrigin {
    pub const fn as_str(self) -> &'static str {
        match self {
            CpidOrigin::Annotation => "annotation",
            CpidOrigin::Traceparent => "traceparent",
            CpidOrigin::Inferred => "inferred",
        }
    }
}

/// The change a write belongs to, by CPID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriteCpid {
    pub cpid: kascade_cpid::Cpid,
    pub origin: CpidOrigin,
}

/// The write a change was inferred to be caused by.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    pub span: SpanRef,
    pub object: ObjectRef,
    /// `<user> <verb>[ <subresource>] <resource> <ns>/<name>`.
    pub name: String,
    /// e.g. `replicasets → pods create` (see `span_model::attr::CASCADE_EDGE`).
    pub edge: String,
    /// The propagation rule that related them.
    pub rule: String,
    /// This change's request received minus the cause's response completed
    /// (zero when the writer reacted before that response was finished).
    pub hop: Duration,
}

/// What an edge name says between the cause's resource and the effect's
/// when the cause was a Pod that failed: the effect is the writer's next
/// attempt (a Job's replacement Pod), and the wait before it is the
/// writer's back-off, not a hop's latency.
pub(super) const AFTER_FAILURE: &str = " failed → ";

/// The edge of an effect written after its cause, a Pod, failed:
/// `pods failed → pods create`.
pub(crate) fn edge_after_failure(cause_resource: &str, effect_resource: &str, op: &str) -> String {
    format!("{cause_resource}{AFTER_FAILURE}{effect_resource} {op}")
}

/// Whether an edge names an effect written after its cause failed.
pub(crate) fn is_after_failure(edge: &str) -> bool {
    edge.contains(AFTER_FAILURE)
}

/// The object's readiness after the write (`object.status` and its message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub status: String,
    pub message: String,
}

/// One change (a successful write, or a refused one: `code` ≥ 400).
#[derive(Clone, Debug)]
pub struct ChangeRecord {
    pub object: ObjectRef,
    pub uid: String,
    pub source: ChangeSource,
    /// The audit user; empty for a change only the watch saw.
    pub user: String,
    /// `create`, `update`, `patch`, `delete`, … (`added`/`modified`/`deleted`
    /// for a watch-only change).
    pub verb: String,
    pub subresource: String,
    /// HTTP status of the request (200 for a watch-only change).
    pub code: i32,
    /// Request received (a watch-only change: when the watch delivered it).
    pub received: SystemTime,
    /// Response completed (audit stageTimestamp; watch: delivered).
    pub completed: SystemTime,
    /// The audit (or watch) span that shows this change.
    pub span: SpanRef,
    /// A controller's write with no cause found, while a change it reacts
    /// to was logged as received only after it: the clocks of several
    /// apiservers disagree, or the input is out of order. Said, not guessed.
    pub cause_logged_after: bool,
    /// The object's resourceVersion after the change, when known and etcd's
    /// (an integer): orders one object's changes by when they were stored,
    /// which their completion times may not (a create's response finished
    /// after the binding the scheduler made of it).
    pub version: Option<u64>,
    pub readiness: Option<Readiness>,
    /// The write removed the object.
    pub deleted: bool,
    pub role: CascadeRole,
    pub cause: Option<Cause>,
    /// The cascade's root (this change's own span for a root).
    pub root: SpanRef,
    /// The timer rule that says a clock made this write (a root of its
    /// own): `cronjob-schedule`, `progress-deadline`.
    pub timer: Option<String>,
    /// Hops from the root.
    pub depth: u32,
    /// The change propagation ID the object carries after the write, or
    /// carried over from the cause.
    pub cpid: Option<WriteCpid>,
    /// The Status message of a refused write (`code` ≥ 400), e.g.
    /// `pods "web-…" is forbidden: exceeded quota: …`.
    pub failure: Option<String>,
    /// The request's audit ID (joins the apiserver's own trace of it);
    /// empty for a change only the watch saw.
    pub audit_id: String,
    /// What the apiserver noted of the request: webhooks that failed open,
    /// where a slow request's time went.
    pub annotations: super::RequestAnnotations,
    /// The object before and after (redacted), only for sinks that
    /// [`ChangeSink::wants_objects`].
    pub old: Option<Arc<Value>>,
    pub new: Option<Arc<Value>>,
    /// The objects the object's state relates it to (owners, the Pod's
    /// node and claims, …), only for sinks that [`ChangeSink::wants_objects`];
    /// a refused create: the owner its request names.
    pub related: Vec<RelatedObject>,
}

/// An object related to a changed one, as the relation rules found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelatedObject {
    pub object: ObjectRef,
    /// The link class (`owner`, `node`, `claim`, …).
    pub class: String,
    /// Whether the other object is the parent (an owner) rather than a
    /// child (the Pod's node) in an assembled trace.
    pub is_parent: bool,
}

/// One occurrence of a Kubernetes Event, for sinks that
/// [`ChangeSink::wants_events`].
#[derive(Clone, Debug)]
pub struct EventRecord {
    /// The object the Event is about.
    pub involved: ObjectRef,
    pub event: super::K8sEvent,
    /// When it occurred (as the event span shows it).
    pub at: SystemTime,
}

/// Where the processor sends change records. Implementations: the change-log
/// file output, `kascade analyze`'s collector, the live propagation metrics.
pub trait ChangeSink: Send + Sync {
    /// Whether records should carry the objects before and after (costly).
    fn wants_objects(&self) -> bool {
        false
    }
    /// Called on the processor's shard: must not block (queue and return).
    fn record(&self, change: &ChangeRecord);
    /// Whether the sink wants the Events too ([`ChangeSink::event`]).
    fn wants_events(&self) -> bool {
        false
    }
    /// One Event occurrence (each once, however often it is seen).
    fn event(&self, _event: &EventRecord) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_hex_as_a_padded_formatter_writes_them() {
        for (trace, span) in [
            (0u128, 0u64),
            (1, 0xff),
            (u128::MAX, u64::MAX),
            (0x0a << 120, 0xabc),
        ] {
            let r = SpanRef {
                trace_id: trace.to_be_bytes(),
                span_id: span.to_be_bytes(),
            };
            assert_eq!(r.trace_hex(), format!("{trace:032x}"));
            assert_eq!(r.span_hex(), format!("{span:016x}"));
        }
    }
}

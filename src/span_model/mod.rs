//! The span/attribute model: the contract between the collector and the
//! frontend (documented in docs/internals.md). Every span kascade writes is
//! built here.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::{SpanFlags, span, status};

use crate::model::{ObjectWindow, derived_span_id, derived_span_id_of};

/// Attribute keys. The bare object keys (`cluster`, `resource`…) are what
/// users type into Jaeger's tag search (compatible with Kelemetry).
pub mod attr {
    pub const CLUSTER: &str = "cluster";
    pub const GROUP: &str = "group";
    pub const RESOURCE: &str = "resource";
    pub const NAMESPACE: &str = "namespace";
    pub const NAME: &str = "name";
    pub const UID: &str = "uid";
    /// `object`, `audit`, `link`, `event`: what a span stands for.
    pub const SPAN_KIND: &str = "kascade.span";
    pub const WINDOW_START: &str = "kascade.window.start";

    pub const AUDIT_USER: &str = "audit.user";
    pub const AUDIT_USER_AGENT: &str = "audit.user_agent";
    pub const AUDIT_VERB: &str = "audit.verb";
    pub const AUDIT_SUBRESOURCE: &str = "audit.subresource";
    pub const AUDIT_CODE: &str = "audit.code";
    pub const AUDIT_SOURCE_IP: &str = "audit.source_ip";
    pub const AUDIT_ID: &str = "audit.id";
    /// The admission webhooks that failed open on the request
    /// (`validating webhook policy.example.com, …`).
    pub const AUDIT_WEBHOOKS_FAILED_OPEN: &str = "audit.webhooks.failed_open";
    /// Where a request over 500 ms spent its time, as the apiserver noted
    /// it: `total=848.98ms validating-webhook=845.75ms …`.
    pub const AUDIT_LATENCY: &str = "audit.latency";
    pub const AUDIT_RV_OLD: &str = "audit.resource_version.old";
    pub const AUDIT_RV_NEW: &str = "audit.resource_version.new";
    pub const AUDIT_IMPERSONATED_USER: &str = "audit.impersonated_user";
    /// `admission-webhook` on a write recorded by the admission source (its
    /// span lasts from admission to the list-watch's delivery of the
    /// version it stored); absent on writes from the audit log.
    pub const AUDIT_RECORDED_BY: &str = "audit.recorded_by";
    /// The Status message of a write refused by optimistic concurrency
    /// (409 Conflict): routine, retried by its writer, so not an error.
    pub const AUDIT_CONFLICT: &str = "audit.conflict";
    /// A create that failed before its object had a name (`generateName`),
    /// shown on its owner's span: what it tried to create.
    pub const AUDIT_ATTEMPT_GROUP: &str = "audit.attempt.group";
    pub const AUDIT_ATTEMPT_RESOURCE: &str = "audit.attempt.resource";
    pub const AUDIT_ATTEMPT_NAMESPACE: &str = "audit.attempt.namespace";
    pub const AUDIT_ATTEMPT_GENERATE_NAME: &str = "audit.attempt.generate_name";
    /// The name the apiserver generated for it (the refusal's `details.name`).
    pub const AUDIT_ATTEMPT_NAME: &str = "audit.attempt.name";
    pub const DIFF_TRUNCATED: &str = "kascade.diff.truncated";

    /// The object's readiness after the write (audit and watch spans, when
    /// its state tells it; `aggregate/readiness/`): `Current`, `InProgress`,
    /// `Failed` or `Terminating`, as kstatus names them.
    pub const OBJECT_STATUS: &str = "object.status";
    /// Why, short and human: `2/3 updated`, `Unschedulable: 0/2 nodes are available: …`.
    pub const OBJECT_STATUS_MESSAGE: &str = "object.status.message";
    /// `true` on the write that removed its object: a delete with nothing
    /// to wait for, or the update that took away a deleted object's last
    /// finalizer.
    pub const OBJECT_REMOVED: &str = "object.removed";

    pub const WATCH_TYPE: &str = "watch.type";
    pub const WATCH_RV_OLD: &str = "watch.resource_version.old";
    pub const WATCH_RV_NEW: &str = "watch.resource_version.new";

    pub const LINK_ROLE: &str = "link.role";
    pub const LINK_CLASS: &str = "link.class";
    pub const LINK_CLUSTER: &str = "link.cluster";
    pub const LINK_GROUP: &str = "link.group";
    pub const LINK_RESOURCE: &str = "link.resource";
    pub const LINK_NAMESPACE: &str = "link.namespace";
    pub const LINK_NAME: &str = "link.name";

    pub const DIFF_OP: &str = "diff.op";
    pub const DIFF_PATH: &str = "diff.path";
    pub const DIFF_OLD: &str = "diff.old";
    pub const DIFF_NEW: &str = "diff.new";
    pub const SNAPSHOT: &str = "snapshot";

    /// Event spans (a Kubernetes Event about the object).
    pub const EVENT_REASON: &str = "event.reason";
    pub const EVENT_MESSAGE: &str = "event.message";
    /// `Normal` or `Warning`.
    pub const EVENT_TYPE: &str = "event.type";
    pub const EVENT_COMPONENT: &str = "event.component";
    pub const EVENT_COUNT: &str = "event.count";
    /// Name and uid of the Event object itself.
    pub const EVENT_NAME: &str = "event.name";
    pub const EVENT_UID: &str = "event.uid";
    pub const EVENT_ACTION: &str = "event.action";

    /// Cascades (`aggregate/causes/`), on audit and watch spans: which write
    /// caused this one, inferred from the propagations declared in `rules/`.
    /// `root` (nothing related changed before it that its writer reacts to:
    /// a user, an external client), `effect` (a cause was found), or
    /// `unexplained` (a controller's write whose cause was not found:
    /// counted, never guessed).
    pub const CASCADE_ROLE: &str = "cascade.role";
    /// The cause's span (hex ids); the span also carries an OTel link to it.
    pub const CASCADE_CAUSE_TRACE_ID: &str = "cascade.cause.trace_id";
    pub const CASCADE_CAUSE_SPAN_ID: &str = "cascade.cause.span_id";
    /// The cause for people: `<user> <verb>[ <subresource>] <resource> <ns>/<name>`.
    pub const CASCADE_CAUSE_NAME: &str = "cascade.cause.name";
    /// Hop latency in microseconds: this write's requestReceived minus the
    /// cause's stageTimestamp (response completed), 0 when the writer
    /// reacted before the cause's response was finished (it saw the stored
    /// change in its watch first).
    pub const CASCADE_HOP_US: &str = "cascade.hop_us";
    /// The edge class the hop is counted under, e.g.
    /// `replicasets → pods create`, `pods binding`, `pods → Running`.
    pub const CASCADE_EDGE: &str = "cascade.edge";
    /// The propagation (`rules/`) that related cause and effect.
    pub const CASCADE_RULE: &str = "cascade.rule";
    /// The cascade's root write (a root names itself): searching the raw
    /// store by it finds every object window the cascade touched.
    pub const CASCADE_ROOT_TRACE_ID: &str = "cascade.root.trace_id";
    pub const CASCADE_ROOT_SPAN_ID: &str = "cascade.root.span_id";
    /// Hops from the root (a root is 0).
    pub const CASCADE_DEPTH: &str = "cascade.depth";
    /// The timer rule that made a cascade's root write (`rules/`,
    /// `timers:`): a clock, not a change, started the cascade.
    pub const CASCADE_TIMER: &str = "cascade.timer";
    /// `true` on an `unexplained` write logged before a change it reacts
    /// to (two apiservers' clocks disagree, or the input is out of order):
    /// left without a cause rather than given one from its future.
    pub const CASCADE_CAUSE_LOGGED_AFTER: &str = "cascade.cause_logged_after";

    /// The change propagation ID of the change the write belongs to (on
    /// audit and watch spans): users search `cpid=<id>`.
    pub const CPID: &str = "cpid";
    /// How it is known: `annotation`, `traceparent` or `inferred` (carried
    /// over from the inferred cause: the writer is not instrumented).
    pub const CPID_ORIGIN: &str = "cpid.origin";
    /// Merge spans: the merged CPIDs, comma-separated, and who merged.
    pub const CPID_SOURCES: &str = "cpid.sources";
    pub const CPID_CONTROLLER: &str = "cpid.controller";
    /// Merged-into spans: the CPID this one was merged into.
    pub const CPID_MERGED_INTO: &str = "cpid.merged_into";
}

/// [`attr::AUDIT_RECORDED_BY`] of a write the admission source recorded.
pub(crate) const RECORDED_BY_ADMISSION: &str = "admission-webhook";

/// Values of [`attr::CASCADE_ROLE`].
pub(crate) const CASCADE_ROLE_EFFECT: &str = crate::flow::CascadeRole::Effect.as_str();
pub(crate) const CASCADE_ROLE_UNEXPLAINED: &str = crate::flow::CascadeRole::Unexplained.as_str();

pub(crate) const SPAN_KIND_OBJECT: &str = "object";
pub(crate) const SPAN_KIND_AUDIT: &str = "audit";
pub(crate) const SPAN_KIND_LINK: &str = "link";
pub(crate) const SPAN_KIND_WATCH: &str = "watch";
pub(crate) const SPAN_KIND_EVENT: &str = "event";
/// A mergelog, in the trace of the CPID it minted (`merges.rs`).
pub(crate) const SPAN_KIND_MERGE: &str = "merge";
/// A mergelog, in the trace of each CPID it merged.
pub(crate) const SPAN_KIND_MERGED_INTO: &str = "merged_into";
pub(crate) const EVENT_DIFF: &str = "diff";
pub(crate) const EVENT_SNAPSHOT: &str = "snapshot";

/// Default cap of one attribute or span-event value (a diff side, a
/// snapshot, an Event message), in bytes: a 1.5 MB ConfigMap value must not
/// make a span larger than a receiver takes (Jaeger's gRPC limit is 4 MiB),
/// and Jaeger's badger storage indexes every span-event field as a key of at
/// most 65,000 bytes, refusing the write (and the spans batched with it)
/// beyond that: e2e/faults.sh, scenario oversized.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 32 << 10;
/// Smallest cap `set_max_value_bytes` accepts: a cap must leave a value
/// recognisable.
pub(crate) const MIN_MAX_VALUE_BYTES: usize = 64;
/// Suffix of the integer attribute that marks a truncated value with its
/// original length in bytes: `diff.new` cut → `diff.new.truncated_from`.
pub(crate) const TRUNCATED_FROM_SUFFIX: &str = ".truncated_from";
/// Marks a span name cut to the value cap (its original length in bytes).
pub(crate) const NAME_TRUNCATED_FROM: &str = "kascade.name.truncated_from";
/// Marks a status message cut to the value cap (its original length in bytes).
pub(crate) const STATUS_MESSAGE_TRUNCATED_FROM: &str = "kascade.status_message.truncated_from";

/// The cap every `SpanBuf` applies. Process-wide, because spans are written
/// all over the processor; set once at start from `--export-max-value-bytes`.
static MAX_VALUE_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_VALUE_BYTES);

/// Values cut to the cap, over the process (`kascade_span_values_truncated_total`).
pub(crate) static VALUES_TRUNCATED: LazyLock<prometheus_client::metrics::counter::Counter> =
    LazyLock::new(Default::default);

/// Sets the cap of attribute and span-event values for spans written from now on.
pub fn set_max_value_bytes(max: usize) {
    MAX_VALUE_BYTES.store(max.max(MIN_MAX_VALUE_BYTES), Ordering::Relaxed);
}

pub(crate) fn max_value_bytes() -> usize {
    MAX_VALUE_BYTES.load(Ordering::Relaxed)
}

/// `s` cut to at most `max` bytes on a UTF-8 character boundary.
pub(crate) fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// The key marking `key` as truncated: `<key>.truncated_from`.
pub(crate) fn truncated_from_key(key: &str) -> String {
    format!("{key}{TRUNCATED_FROM_SUFFIX}")
}

/// Span-id salts: distinct spans derived from the same input.
const SALT_AUDIT: u64 = 1;
const SALT_LINK: u64 = 2;
const SALT_EVENT: u64 = 3;
const SALT_WATCH: u64 = 4;
const SALT_MERGE: u64 = 5;
const SALT_MERGED_INTO: u64 = 6;

/// A string attribute.
pub(crate) fn kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// An integer attribute.
pub(crate) fn kv_int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

pub fn nanos(t: SystemTime) -> u64 {
    // Saturates (after 2554) rather than wrapping round to 1970.
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos()).unwrap_or(u64::MAX)
}

mod merges;
mod spans;
pub(crate) mod wire;
mod writer;

pub use merges::merge_spans;
pub(crate) use spans::*;
pub(crate) use writer::{EncodedSpan, SpanBuf};

//! The span/attribute model: the contract between the collector and the
//! frontend (documented in ARCHITECTURE.md). Every span kascade writes is
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
    pub const AUDIT_RV_OLD: &str = "audit.resource_version.old";
    pub const AUDIT_RV_NEW: &str = "audit.resource_version.new";
    pub const AUDIT_IMPERSONATED_USER: &str = "audit.impersonated_user";
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
    /// its state tells it; `aggregate/status/`): `Current`, `InProgress`,
    /// `Failed` or `Terminating`, as kstatus names them.
    pub const OBJECT_STATUS: &str = "object.status";
    /// Why, short and human: `2/3 updated`, `Unschedulable: 0/2 nodes are available: …`.
    pub const OBJECT_STATUS_MESSAGE: &str = "object.status.message";

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
}

pub const SPAN_KIND_OBJECT: &str = "object";
pub const SPAN_KIND_AUDIT: &str = "audit";
pub const SPAN_KIND_LINK: &str = "link";
pub const SPAN_KIND_WATCH: &str = "watch";
pub const SPAN_KIND_EVENT: &str = "event";
pub const EVENT_DIFF: &str = "diff";
pub const EVENT_SNAPSHOT: &str = "snapshot";

/// Default cap of one attribute or span-event value (a diff side, a
/// snapshot, an Event message), in bytes: a 1.5 MB ConfigMap value must not
/// make a span larger than a receiver takes (Jaeger's gRPC limit is 4 MiB),
/// and Jaeger's badger storage indexes every span-event field as a key of at
/// most 65,000 bytes, refusing the write (and the spans batched with it)
/// beyond that: e2e/faults.sh, scenario oversized.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 32 << 10;
/// Smallest cap `set_max_value_bytes` accepts: a cap must leave a value
/// recognisable.
pub const MIN_MAX_VALUE_BYTES: usize = 64;
/// Suffix of the integer attribute that marks a truncated value with its
/// original length in bytes: `diff.new` cut → `diff.new.truncated_from`.
pub const TRUNCATED_FROM_SUFFIX: &str = ".truncated_from";
/// Marks a span name cut to the value cap (its original length in bytes).
pub const NAME_TRUNCATED_FROM: &str = "kascade.name.truncated_from";
/// Marks a status message cut to the value cap (its original length in bytes).
pub const STATUS_MESSAGE_TRUNCATED_FROM: &str = "kascade.status_message.truncated_from";

/// The cap every `SpanBuf` applies. Process-wide, because spans are written
/// all over the processor; set once at start from `--export-max-value-bytes`.
static MAX_VALUE_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_VALUE_BYTES);

/// Values cut to the cap, over the process (`kascade_span_values_truncated_total`).
pub static VALUES_TRUNCATED: LazyLock<prometheus_client::metrics::counter::Counter> =
    LazyLock::new(Default::default);

/// Sets the cap of attribute and span-event values for spans written from now on.
pub fn set_max_value_bytes(max: usize) {
    MAX_VALUE_BYTES.store(max.max(MIN_MAX_VALUE_BYTES), Ordering::Relaxed);
}

pub fn max_value_bytes() -> usize {
    MAX_VALUE_BYTES.load(Ordering::Relaxed)
}

/// `s` cut to at most `max` bytes on a UTF-8 character boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
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
pub fn truncated_from_key(key: &str) -> String {
    format!("{key}{TRUNCATED_FROM_SUFFIX}")
}

/// Span-id salts: distinct spans derived from the same input.
const SALT_AUDIT: u64 = 1;
const SALT_LINK: u64 = 2;
const SALT_EVENT: u64 = 3;
const SALT_WATCH: u64 = 4;

/// A string attribute.
pub fn kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// An integer attribute.
pub fn kv_int(key: &str, value: i64) -> KeyValue {
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

/// Protobuf fields as kascade writes them (spans here, requests in the
/// exporter), on prost's wire-format primitives.
pub(crate) mod wire {
    use prost::encoding::{
        WireType, encode_key, encode_varint, encoded_len_varint, fixed32, fixed64,
    };

    /// Length of a length-delimited field of `len` bytes with a one-byte key
    /// (field numbers up to 15).
    pub fn framed_len(len: usize) -> usize {
        1 + encoded_len_varint(len as u64) + len
    }

    /// The key and length of a length-delimited field whose `len` bytes follow.
    pub fn len_prefix(buf: &mut Vec<u8>, field: u32, len: usize) {
        encode_key(field, WireType::LengthDelimited, buf);
        encode_varint(len as u64, buf);
    }

    pub fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
        len_prefix(buf, field, data.len());
        buf.extend_from_slice(data);
    }

    pub fn varint(buf: &mut Vec<u8>, field: u32, v: u64) {
        encode_key(field, WireType::Varint, buf);
        encode_varint(v, buf);
    }

    pub fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
        fixed64::encode(field, &v, buf);
    }

    pub fn fixed32(buf: &mut Vec<u8>, field: u32, v: u32) {
        fixed32::encode(field, &v, buf);
    }

    /// A `KeyValue` with a string value as field `field`.
    pub fn kv_str(buf: &mut Vec<u8>, field: u32, k: &str, v: &str) {
        let any = framed_len(v.len());
        len_prefix(buf, field, framed_len(k.len()) + framed_len(any));
        bytes(buf, 1, k.as_bytes());
        len_prefix(buf, 2, any);
        bytes(buf, 1, v.as_bytes());
    }

    /// A `KeyValue` with an integer value as field `field`.
    pub fn kv_int(buf: &mut Vec<u8>, field: u32, k: &str, v: i64) {
        let any = 1 + encoded_len_varint(v as u64);
        len_prefix(buf, field, framed_len(k.len()) + framed_len(any));
        bytes(buf, 1, k.as_bytes());
        len_prefix(buf, 2, any);
        varint(buf, 3, v as u64);
    }
}

/// A span written straight into its protobuf encoding
/// (`opentelemetry.proto.trace.v1.Span`), attributes, events and links
/// appended as they come. Building message structs first cost more than
/// everything else the exporter did: every span's many small strings were
/// allocated, measured and copied twice, then freed.
///
/// Every string value (attributes, span-event attributes, name, status
/// message) is cut to the value cap on a character boundary; a cut value is
/// followed by `<key>.truncated_from` = its original length in bytes.
pub struct SpanBuf {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    error: Option<String>,
    max_value: usize,
}

/// A finished span, protobuf-encoded.
#[derive(Clone, Debug)]
pub struct EncodedSpan(pub bytes::Bytes);

impl EncodedSpan {
    /// The span as a message (tests, offline tools, JSON output).
    pub fn decode(&self) -> Span {
        use prost::Message as _;
        // Only ever built by SpanBuf: a failure is a bug in the writer.
        Span::decode(self.0.as_ref()).expect("SpanBuf writes valid protobuf")
    }
}

// Field numbers of opentelemetry.proto.trace.v1.Span and its parts.
const SPAN_TRACE_ID: u32 = 1;
const SPAN_SPAN_ID: u32 = 2;
const SPAN_PARENT_SPAN_ID: u32 = 4;
const SPAN_NAME: u32 = 5;
const SPAN_KIND: u32 = 6;
const SPAN_START: u32 = 7;
const SPAN_END: u32 = 8;
const SPAN_ATTRIBUTES: u32 = 9;
const SPAN_EVENTS: u32 = 11;
const SPAN_LINKS: u32 = 13;
const SPAN_STATUS: u32 = 15;
const SPAN_FLAGS: u32 = 16;

/// Sampled, and the parent is known to be local (as the SDK marks it).
fn span_flags() -> u32 {
    TraceFlags::SAMPLED.to_u8() as u32 | SpanFlags::ContextHasIsRemoteMask as u32
}

impl SpanBuf {
    fn new(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        start: SystemTime,
        end: SystemTime,
    ) -> Self {
        Self::with_max_value(
            trace_id,
            span_id,
            parent,
            name,
            (start, end),
            max_value_bytes(),
        )
    }

    fn with_max_value(
        trace_id: TraceId,
        span_id: SpanId,
        parent: SpanId,
        name: &str,
        (start, end): (SystemTime, SystemTime),
        max_value: usize,
    ) -> Self {
        let mut buf = Vec::with_capacity(512);
        wire::bytes(&mut buf, SPAN_TRACE_ID, &trace_id.to_bytes());
        wire::bytes(&mut buf, SPAN_SPAN_ID, &span_id.to_bytes());
        if parent != SpanId::INVALID {
            wire::bytes(&mut buf, SPAN_PARENT_SPAN_ID, &parent.to_bytes());
        }
        let short_name = truncate_str(name, max_value);
        wire::bytes(&mut buf, SPAN_NAME, short_name.as_bytes());
        wire::varint(&mut buf, SPAN_KIND, span::SpanKind::Internal as u64);
        wire::fixed64(&mut buf, SPAN_START, nanos(start));
        wire::fixed64(&mut buf, SPAN_END, nanos(end));
        let mut s = Self {
            buf,
            scratch: Vec::new(),
            error: None,
            max_value,
        };
        if short_name.len() < name.len() {
            VALUES_TRUNCATED.inc();
            s.attr_int(NAME_TRUNCATED_FROM, name.len() as i64);
        }
        s
    }

    pub fn attr(&mut self, key: &str, value: &str) {
        let short = truncate_str(value, self.max_value);
        wire::kv_str(&mut self.buf, SPAN_ATTRIBUTES, key, short);
        if short.len() < value.len() {
            VALUES_TRUNCATED.inc();
            wire::kv_int(
                &mut self.buf,
                SPAN_ATTRIBUTES,
                &truncated_from_key(key),
                value.len() as i64,
            );
        }
    }

    pub fn attr_int(&mut self, key: &str, value: i64) {
        wire::kv_int(&mut self.buf, SPAN_ATTRIBUTES, key, value);
    }

    /// A span event (a diff entry, a snapshot) with string attributes.
    pub fn event(&mut self, name: &str, at: SystemTime, attrs: &[(&str, &str)]) {
        self.scratch.clear();
        wire::fixed64(&mut self.scratch, 1, nanos(at));
        wire::bytes(&mut self.scratch, 2, name.as_bytes());
        for (k, v) in attrs {
            let short = truncate_str(v, self.max_value);
            wire::kv_str(&mut self.scratch, 3, k, short);
            if short.len() < v.len() {
                VALUES_TRUNCATED.inc();
                wire::kv_int(&mut self.scratch, 3, &truncated_from_key(k), v.len() as i64);
            }
        }
        wire::bytes(&mut self.buf, SPAN_EVENTS, &self.scratch);
    }

    fn link(&mut self, to: &ObjectWindow, attrs: &[(&str, &str)]) {
        self.scratch.clear();
        wire::bytes(&mut self.scratch, 1, &to.trace_id().to_bytes());
        wire::bytes(&mut self.scratch, 2, &to.span_id().to_bytes());
        for (k, v) in attrs {
            wire::kv_str(&mut self.scratch, 4, k, v);
        }
        wire::fixed32(&mut self.scratch, 6, span_flags());
        wire::bytes(&mut self.buf, SPAN_LINKS, &self.scratch);
    }

    /// Marks the span failed with `message`.
    pub fn set_error(&mut self, message: String) {
        self.error = Some(message);
    }

    pub fn finish(mut self) -> EncodedSpan {
        self.scratch.clear();
        if let Some(message) = self.error.take() {
            let short = truncate_str(&message, self.max_value);
            if !short.is_empty() {
                wire::bytes(&mut self.scratch, 2, short.as_bytes());
            }
            wire::varint(&mut self.scratch, 3, status::StatusCode::Error as u64);
            if short.len() < message.len() {
                VALUES_TRUNCATED.inc();
                self.attr_int(STATUS_MESSAGE_TRUNCATED_FROM, message.len() as i64);
            }
        }
        wire::bytes(&mut self.buf, SPAN_STATUS, &self.scratch);
        wire::fixed32(&mut self.buf, SPAN_FLAGS, span_flags());
        EncodedSpan(self.buf.into())
    }
}

/// The instrumentation scope every span is reported under.
pub fn scope() -> opentelemetry_proto::tonic::common::v1::InstrumentationScope {
    opentelemetry_proto::tonic::common::v1::InstrumentationScope {
        name: "kascade".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    }
}

/// OpenTelemetry semantic-convention attribute prefix for a resource, where one exists.
fn semconv_prefix(group: &str, resource: &str) -> Option<&'static str> {
    Some(match (group, resource) {
        ("", "pods") => "k8s.pod",
        ("", "nodes") => "k8s.node",
        ("", "replicationcontrollers") => "k8s.replicationcontroller",
        ("apps", "deployments") => "k8s.deployment",
        ("apps", "replicasets") => "k8s.replicaset",
        ("apps", "statefulsets") => "k8s.statefulset",
        ("apps", "daemonsets") => "k8s.daemonset",
        ("batch", "jobs") => "k8s.job",
        ("batch", "cronjobs") => "k8s.cronjob",
        ("autoscaling", "horizontalpodautoscalers") => "k8s.hpa",
        _ => return None,
    })
}

/// The span of one object in one window: the root of that window's trace,
/// covering the whole window.
pub fn object_span(ow: &ObjectWindow, uid: &str, window_end: SystemTime) -> SpanBuf {
    let o = &ow.object;
    let start = UNIX_EPOCH + std::time::Duration::from_secs(ow.window_start);
    let name = if o.namespace.is_empty() {
        format!("{} {}", o.resource, o.name)
    } else {
        format!("{} {}/{}", o.resource, o.namespace, o.name)
    };
    let mut s = SpanBuf::new(
        ow.trace_id(),
        ow.span_id(),
        SpanId::INVALID,
        &name,
        start,
        window_end,
    );
    s.attr(attr::SPAN_KIND, SPAN_KIND_OBJECT);
    s.attr(attr::CLUSTER, &o.cluster);
    s.attr(attr::GROUP, &o.group);
    s.attr(attr::RESOURCE, &o.resource);
    s.attr(attr::NAMESPACE, &o.namespace);
    s.attr(attr::NAME, &o.name);
    s.attr_int(attr::WINDOW_START, ow.window_start as i64);
    s.attr("k8s.cluster.name", &o.cluster);
    if !uid.is_empty() {
        s.attr(attr::UID, uid);
    }
    if !o.namespace.is_empty() {
        s.attr("k8s.namespace.name", &o.namespace);
    } else if o.group.is_empty() && o.resource == "namespaces" {
        s.attr("k8s.namespace.name", &o.name);
    }
    if let Some(p) = semconv_prefix(&o.group, &o.resource) {
        s.attr(&format!("{p}.name"), &o.name);
        if !uid.is_empty() {
            s.attr(&format!("{p}.uid"), uid);
        }
    }
    s
}

/// The fields of one audited write, as the audit span shows them.
pub struct AuditWrite<'a> {
    pub audit_id: &'a str,
    pub user: &'a str,
    pub impersonated_user: Option<&'a str>,
    pub user_agent: &'a str,
    pub verb: &'a str,
    pub subresource: &'a str,
    pub code: i32,
    pub source_ip: &'a str,
    pub old_rv: &'a str,
    pub new_rv: &'a str,
    pub error: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
}

/// A child span of the object span of `ow`.
fn child_span(
    ow: &ObjectWindow,
    id: SpanId,
    name: &str,
    start: SystemTime,
    end: SystemTime,
) -> SpanBuf {
    SpanBuf::new(ow.trace_id(), id, ow.span_id(), name, start, end)
}

/// One write, as a child of the object span: `<user> <verb>[ <subresource>]`.
pub fn audit_span(ow: &ObjectWindow, w: &AuditWrite<'_>) -> SpanBuf {
    let mut name = format!("{} {}", w.user, w.verb);
    if !w.subresource.is_empty() {
        name.push(' ');
        name.push_str(w.subresource);
    }
    audit_span_named(ow, w, &name)
}

/// [`audit_span`] under a name of the caller's (a write shown on another
/// object's span says what it wrote).
pub fn audit_span_named(ow: &ObjectWindow, w: &AuditWrite<'_>, name: &str) -> SpanBuf {
    // The hash of `<audit id>|<cache key>`.
    let id = derived_span_id_of(SALT_AUDIT, |h| {
        h.update(w.audit_id.as_bytes());
        h.update(b"|");
        ow.hash_cache_key(h);
    });
    let mut s = child_span(ow, id, name, w.start, w.end.max(w.start));
    s.attr(attr::SPAN_KIND, SPAN_KIND_AUDIT);
    s.attr(attr::AUDIT_ID, w.audit_id);
    s.attr(attr::AUDIT_USER, w.user);
    s.attr(attr::AUDIT_USER_AGENT, w.user_agent);
    s.attr(attr::AUDIT_VERB, w.verb);
    s.attr_int(attr::AUDIT_CODE, w.code as i64);
    s.attr_int("http.response.status_code", w.code as i64);
    s.attr("user_agent.original", w.user_agent);
    if !w.subresource.is_empty() {
        s.attr(attr::AUDIT_SUBRESOURCE, w.subresource);
    }
    if let Some(u) = w.impersonated_user {
        s.attr(attr::AUDIT_IMPERSONATED_USER, u);
    }
    if !w.source_ip.is_empty() {
        s.attr(attr::AUDIT_SOURCE_IP, w.source_ip);
        s.attr("client.address", w.source_ip);
    }
    if !w.old_rv.is_empty() {
        s.attr(attr::AUDIT_RV_OLD, w.old_rv);
    }
    if !w.new_rv.is_empty() {
        s.attr(attr::AUDIT_RV_NEW, w.new_rv);
    }
    if let Some(msg) = &w.error {
        s.set_error(msg.clone());
    }
    s
}

/// A relation recorded on `ow`'s span: `target` plays `role` (class `class`).
pub struct LinkFields<'a> {
    pub target: &'a ObjectWindow,
    pub role: &'a str,
    pub class: &'a str,
    pub at: SystemTime,
}

/// A zero-length child of the object span naming the linked object; it also
/// carries an OpenTelemetry link to the linked object's span.
pub fn link_span(ow: &ObjectWindow, l: &LinkFields<'_>, link_key: u64) -> SpanBuf {
    // The hash of the cache key followed by the link key.
    let id = derived_span_id_of(SALT_LINK, |h| {
        ow.hash_cache_key(h);
        h.update(&link_key.to_be_bytes());
    });
    let t = &l.target.object;
    let name = format!("link {} {} {}", l.role, l.class, t.group_resource());
    let mut s = child_span(ow, id, &name, l.at, l.at);
    s.attr(attr::SPAN_KIND, SPAN_KIND_LINK);
    s.attr(attr::LINK_ROLE, l.role);
    s.attr(attr::LINK_CLASS, l.class);
    s.attr(attr::LINK_CLUSTER, &t.cluster);
    s.attr(attr::LINK_GROUP, &t.group);
    s.attr(attr::LINK_RESOURCE, &t.resource);
    s.attr(attr::LINK_NAMESPACE, &t.namespace);
    s.attr(attr::LINK_NAME, &t.name);
    s.link(
        l.target,
        &[(attr::LINK_ROLE, l.role), (attr::LINK_CLASS, l.class)],
    );
    s
}

/// One occurrence of a Kubernetes Event, as its event span shows it.
pub struct EventFields<'a> {
    /// What identifies the Event across sources: its uid (or, when the uid is
    /// not known, the Event object's key, `cluster/group/events/namespace/name`).
    pub identity: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub event_type: &'a str,
    pub component: &'a str,
    pub action: &'a str,
    pub count: i64,
    /// The occurrence time: the span starts and ends there.
    pub at: SystemTime,
}

/// The span id of an Event occurrence: the same Event seen twice (a retried
/// webhook batch, another source) gets the same id; each new count a new one.
pub fn event_span_id(identity: &str, count: i64) -> SpanId {
    derived_span_id(format!("{identity}|{count}").as_bytes(), SALT_EVENT)
}

/// A Kubernetes Event about the object, as a zero-length child of the
/// object's span named after the Event's reason; an error when it is a Warning.
pub fn event_span(ow: &ObjectWindow, e: &EventFields<'_>) -> SpanBuf {
    let name = if e.reason.is_empty() {
        SPAN_KIND_EVENT
    } else {
        e.reason
    };
    let mut s = child_span(ow, event_span_id(e.identity, e.count), name, e.at, e.at);
    s.attr(attr::SPAN_KIND, SPAN_KIND_EVENT);
    s.attr(attr::EVENT_REASON, e.reason);
    s.attr(attr::EVENT_MESSAGE, e.message);
    s.attr(attr::EVENT_TYPE, e.event_type);
    s.attr(attr::EVENT_COMPONENT, e.component);
    s.attr_int(attr::EVENT_COUNT, e.count);
    s.attr(attr::EVENT_NAME, e.name);
    if !e.uid.is_empty() {
        s.attr(attr::EVENT_UID, e.uid);
    }
    if !e.action.is_empty() {
        s.attr(attr::EVENT_ACTION, e.action);
    }
    if e.event_type == "Warning" {
        let message = if e.message.is_empty() {
            e.reason
        } else {
            e.message
        };
        s.set_error(message.to_string());
    }
    s
}

/// A change seen only by the list-watch (no audit event showed it): a
/// zero-length child of the object span at the time it was observed, named
/// `watch <added|modified|deleted|listed>`; the diff or snapshot are its events.
pub fn watch_span(
    ow: &ObjectWindow,
    kind: &str,
    old_rv: &str,
    new_rv: &str,
    at: SystemTime,
) -> SpanBuf {
    // The hash of `<cache key>|<kind>|<new resourceVersion>`.
    let id = derived_span_id_of(SALT_WATCH, |h| {
        ow.hash_cache_key(h);
        for part in [kind, new_rv] {
            h.update(b"|");
            h.update(part.as_bytes());
        }
    });
    let mut s = child_span(ow, id, &format!("watch {kind}"), at, at);
    s.attr(attr::SPAN_KIND, SPAN_KIND_WATCH);
    s.attr(attr::WATCH_TYPE, kind);
    if !old_rv.is_empty() {
        s.attr(attr::WATCH_RV_OLD, old_rv);
    }
    if !new_rv.is_empty() {
        s.attr(attr::WATCH_RV_NEW, new_rv);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    #[test]
    fn event_span_ids_follow_uid_and_count() {
        let a = event_span_id("uid-1", 2);
        assert_eq!(a, event_span_id("uid-1", 2));
        assert_ne!(a, event_span_id("uid-1", 3));
        assert_ne!(a, event_span_id("uid-2", 2));
    }

    #[test]
    fn warnings_are_errors_with_the_message() {
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 0,
        };
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(7);
        let f = EventFields {
            identity: "u",
            name: "p.1",
            uid: "u",
            reason: "FailedScheduling",
            message: "0/3 nodes are available",
            event_type: "Warning",
            component: "default-scheduler",
            action: "Scheduling",
            count: 1,
            at,
        };
        let s = event_span(&ow, &f).finish().decode();
        assert_eq!(s.name, "FailedScheduling");
        assert_eq!(s.parent_span_id, ow.span_id().to_bytes());
        assert_eq!(s.trace_id, ow.trace_id().to_bytes());
        assert_eq!(
            (s.start_time_unix_nano, s.end_time_unix_nano),
            (nanos(at), nanos(at))
        );
        let st = s.status.unwrap();
        assert_eq!(st.code, status::StatusCode::Error as i32);
        assert_eq!(st.message, "0/3 nodes are available");
        let normal = event_span(
            &ow,
            &EventFields {
                event_type: "Normal",
                ..f
            },
        )
        .finish()
        .decode();
        assert_eq!(
            normal.status.unwrap().code,
            status::StatusCode::Unset as i32
        );
    }

    fn attr_value<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
        attrs
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    #[test]
    fn values_over_the_cap_are_cut_on_a_char_boundary_and_marked_with_their_length() {
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "configmaps", "ns", "big"),
            window_start: 0,
        };
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(7);
        // 100 bytes of 'a', then 'é' (2 bytes) straddling the 101-byte cap.
        let long = format!("{}é{}", "a".repeat(100), "b".repeat(500));
        let exact = "x".repeat(101);
        let mut buf = SpanBuf::with_max_value(
            ow.trace_id(),
            SpanId::from_bytes([1; 8]),
            ow.span_id(),
            &format!("n{}", "m".repeat(200)),
            (at, at),
            101,
        );
        buf.attr("event.message", &long);
        buf.attr("audit.user", &exact);
        buf.event(
            EVENT_DIFF,
            at,
            &[("diff.path", "data.blob"), ("diff.new", &long)],
        );
        buf.set_error(long.clone());
        let s = buf.finish().decode();

        let text = |v: Option<&any_value::Value>| match v {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            other => panic!("not a string: {other:?}"),
        };
        let int = |v: Option<&any_value::Value>| match v {
            Some(any_value::Value::IntValue(i)) => *i,
            other => panic!("not an int: {other:?}"),
        };
        // Cut before the 2-byte character rather than through it.
        assert_eq!(
            text(attr_value(&s.attributes, "event.message")),
            "a".repeat(100)
        );
        assert_eq!(
            int(attr_value(&s.attributes, "event.message.truncated_from")),
            long.len() as i64
        );
        // A value of exactly the cap is whole and unmarked.
        assert_eq!(text(attr_value(&s.attributes, "audit.user")), exact);
        assert!(attr_value(&s.attributes, "audit.user.truncated_from").is_none());
        // Span-event values carry their own marker inside the event.
        let diff = &s.events[0].attributes;
        assert_eq!(text(attr_value(diff, "diff.new")), "a".repeat(100));
        assert_eq!(
            int(attr_value(diff, "diff.new.truncated_from")),
            long.len() as i64
        );
        assert_eq!(text(attr_value(diff, "diff.path")), "data.blob");
        // The name and the status message too.
        assert_eq!(s.name.len(), 101);
        assert_eq!(int(attr_value(&s.attributes, NAME_TRUNCATED_FROM)), 201);
        assert_eq!(s.status.as_ref().unwrap().message, "a".repeat(100));
        assert_eq!(
            int(attr_value(&s.attributes, STATUS_MESSAGE_TRUNCATED_FROM)),
            long.len() as i64
        );
    }

    #[test]
    fn the_default_cap_leaves_ordinary_spans_untouched() {
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 0,
        };
        let at = std::time::UNIX_EPOCH;
        let value = "v".repeat(DEFAULT_MAX_VALUE_BYTES);
        let mut buf = SpanBuf::with_max_value(
            ow.trace_id(),
            ow.span_id(),
            SpanId::INVALID,
            "pods ns/p",
            (at, at),
            DEFAULT_MAX_VALUE_BYTES,
        );
        buf.attr("k", &value);
        let s = buf.finish().decode();
        assert_eq!(s.attributes.len(), 1);
        assert_eq!(
            attr_value(&s.attributes, "k"),
            Some(&any_value::Value::StringValue(value))
        );
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let s = "ééé"; // 6 bytes
        assert_eq!(truncate_str(s, 6), s);
        assert_eq!(truncate_str(s, 5), "éé");
        assert_eq!(truncate_str(s, 1), "");
        assert_eq!(truncate_str("abc", 0), "");
    }
}

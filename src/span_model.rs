//! The span/attribute model: the contract between the collector and the
//! frontend (documented in ARCHITECTURE.md). Every span kascade writes is
//! built here.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::{SpanFlags, Status, span, status};

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
    pub const DIFF_TRUNCATED: &str = "kascade.diff.truncated";

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
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// Spans are built directly as OTLP protobuf messages: the exporter encodes
/// them as they are, with no per-span conversion (which, through the SDK's
/// `SpanData`, copied every string once more).
fn span(
    trace_id: TraceId,
    span_id: SpanId,
    parent: SpanId,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: trace_id.to_bytes().to_vec(),
        span_id: span_id.to_bytes().to_vec(),
        parent_span_id: if parent == SpanId::INVALID {
            Vec::new()
        } else {
            parent.to_bytes().to_vec()
        },
        // Sampled, and the parent is known to be local (as the SDK marks it).
        flags: TraceFlags::SAMPLED.to_u8() as u32 | SpanFlags::ContextHasIsRemoteMask as u32,
        name,
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: nanos(start),
        end_time_unix_nano: nanos(end),
        attributes,
        status: Some(Status::default()),
        ..Default::default()
    }
}

/// Marks a span failed with `message`.
pub fn set_error(span: &mut Span, message: String) {
    span.status = Some(Status {
        message,
        code: status::StatusCode::Error as i32,
    });
}

/// A span event (a diff entry or a snapshot) at `at`.
pub fn span_event(name: &str, at: SystemTime, attributes: Vec<KeyValue>) -> span::Event {
    span::Event {
        time_unix_nano: nanos(at),
        name: name.to_string(),
        attributes,
        dropped_attributes_count: 0,
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
pub fn object_span(ow: &ObjectWindow, uid: &str, window_end: SystemTime) -> Span {
    let o = &ow.object;
    let start = UNIX_EPOCH + std::time::Duration::from_secs(ow.window_start);
    let mut attrs = vec![
        kv(attr::SPAN_KIND, SPAN_KIND_OBJECT),
        kv(attr::CLUSTER, o.cluster.as_str()),
        kv(attr::GROUP, o.group.as_str()),
        kv(attr::RESOURCE, o.resource.as_str()),
        kv(attr::NAMESPACE, o.namespace.as_str()),
        kv(attr::NAME, o.name.as_str()),
        kv_int(attr::WINDOW_START, ow.window_start as i64),
        kv("k8s.cluster.name", o.cluster.as_str()),
    ];
    if !uid.is_empty() {
        attrs.push(kv(attr::UID, uid));
    }
    if !o.namespace.is_empty() {
        attrs.push(kv("k8s.namespace.name", o.namespace.as_str()));
    } else if o.group.is_empty() && o.resource == "namespaces" {
        attrs.push(kv("k8s.namespace.name", o.name.as_str()));
    }
    if let Some(p) = semconv_prefix(&o.group, &o.resource) {
        attrs.push(kv(&format!("{p}.name"), o.name.as_str()));
        if !uid.is_empty() {
            attrs.push(kv(&format!("{p}.uid"), uid));
        }
    }
    let name = if o.namespace.is_empty() {
        format!("{} {}", o.resource, o.name)
    } else {
        format!("{} {}/{}", o.resource, o.namespace, o.name)
    };
    span(
        ow.trace_id(),
        ow.span_id(),
        SpanId::INVALID,
        name,
        start,
        window_end,
        attrs,
    )
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
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) -> Span {
    span(
        ow.trace_id(),
        id,
        ow.span_id(),
        name,
        start,
        end,
        attributes,
    )
}

/// One write, as a child of the object span: `<user> <verb>[ <subresource>]`.
pub fn audit_span(ow: &ObjectWindow, w: &AuditWrite<'_>) -> Span {
    // The hash of `<audit id>|<cache key>`.
    let id = derived_span_id_of(SALT_AUDIT, |h| {
        h.update(w.audit_id.as_bytes());
        h.update(b"|");
        ow.hash_cache_key(h);
    });
    let mut name = format!("{} {}", w.user, w.verb);
    if !w.subresource.is_empty() {
        name.push(' ');
        name.push_str(w.subresource);
    }
    let mut attrs = vec![
        kv(attr::SPAN_KIND, SPAN_KIND_AUDIT),
        kv(attr::AUDIT_ID, w.audit_id),
        kv(attr::AUDIT_USER, w.user),
        kv(attr::AUDIT_USER_AGENT, w.user_agent),
        kv(attr::AUDIT_VERB, w.verb),
        kv_int(attr::AUDIT_CODE, w.code as i64),
        kv_int("http.response.status_code", w.code as i64),
        kv("user_agent.original", w.user_agent),
    ];
    if !w.subresource.is_empty() {
        attrs.push(kv(attr::AUDIT_SUBRESOURCE, w.subresource));
    }
    if let Some(u) = w.impersonated_user {
        attrs.push(kv(attr::AUDIT_IMPERSONATED_USER, u));
    }
    if !w.source_ip.is_empty() {
        attrs.push(kv(attr::AUDIT_SOURCE_IP, w.source_ip));
        attrs.push(kv("client.address", w.source_ip));
    }
    if !w.old_rv.is_empty() {
        attrs.push(kv(attr::AUDIT_RV_OLD, w.old_rv));
    }
    if !w.new_rv.is_empty() {
        attrs.push(kv(attr::AUDIT_RV_NEW, w.new_rv));
    }
    let mut s = child_span(ow, id, name, w.start, w.end.max(w.start), attrs);
    if let Some(msg) = &w.error {
        set_error(&mut s, msg.clone());
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
pub fn link_span(ow: &ObjectWindow, l: &LinkFields<'_>, link_key: u64) -> Span {
    // The hash of the cache key followed by the link key.
    let id = derived_span_id_of(SALT_LINK, |h| {
        ow.hash_cache_key(h);
        h.update(&link_key.to_be_bytes());
    });
    let t = &l.target.object;
    let attrs = vec![
        kv(attr::SPAN_KIND, SPAN_KIND_LINK),
        kv(attr::LINK_ROLE, l.role),
        kv(attr::LINK_CLASS, l.class),
        kv(attr::LINK_CLUSTER, t.cluster.as_str()),
        kv(attr::LINK_GROUP, t.group.as_str()),
        kv(attr::LINK_RESOURCE, t.resource.as_str()),
        kv(attr::LINK_NAMESPACE, t.namespace.as_str()),
        kv(attr::LINK_NAME, t.name.as_str()),
    ];
    let name = format!("link {} {} {}", l.role, l.class, t.group_resource());
    let mut s = child_span(ow, id, name, l.at, l.at, attrs);
    s.links.push(span::Link {
        trace_id: l.target.trace_id().to_bytes().to_vec(),
        span_id: l.target.span_id().to_bytes().to_vec(),
        attributes: vec![kv(attr::LINK_ROLE, l.role), kv(attr::LINK_CLASS, l.class)],
        flags: s.flags,
        ..Default::default()
    });
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
pub fn event_span(ow: &ObjectWindow, e: &EventFields<'_>) -> Span {
    let mut attrs = vec![
        kv(attr::SPAN_KIND, SPAN_KIND_EVENT),
        kv(attr::EVENT_REASON, e.reason),
        kv(attr::EVENT_MESSAGE, e.message),
        kv(attr::EVENT_TYPE, e.event_type),
        kv(attr::EVENT_COMPONENT, e.component),
        kv_int(attr::EVENT_COUNT, e.count),
        kv(attr::EVENT_NAME, e.name),
    ];
    if !e.uid.is_empty() {
        attrs.push(kv(attr::EVENT_UID, e.uid));
    }
    if !e.action.is_empty() {
        attrs.push(kv(attr::EVENT_ACTION, e.action));
    }
    let name = if e.reason.is_empty() {
        SPAN_KIND_EVENT.to_string()
    } else {
        e.reason.to_string()
    };
    let mut s = child_span(
        ow,
        event_span_id(e.identity, e.count),
        name,
        e.at,
        e.at,
        attrs,
    );
    if e.event_type == "Warning" {
        let message = if e.message.is_empty() {
            e.reason
        } else {
            e.message
        };
        set_error(&mut s, message.to_string());
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
) -> Span {
    // The hash of `<cache key>|<kind>|<new resourceVersion>`.
    let id = derived_span_id_of(SALT_WATCH, |h| {
        ow.hash_cache_key(h);
        for part in [kind, new_rv] {
            h.update(b"|");
            h.update(part.as_bytes());
        }
    });
    let mut attrs = vec![
        kv(attr::SPAN_KIND, SPAN_KIND_WATCH),
        kv(attr::WATCH_TYPE, kind),
    ];
    if !old_rv.is_empty() {
        attrs.push(kv(attr::WATCH_RV_OLD, old_rv));
    }
    if !new_rv.is_empty() {
        attrs.push(kv(attr::WATCH_RV_NEW, new_rv));
    }
    child_span(ow, id, format!("watch {kind}"), at, at, attrs)
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
        let s = event_span(&ow, &f);
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
        );
        assert_eq!(
            normal.status.unwrap().code,
            status::StatusCode::Unset as i32
        );
    }
}

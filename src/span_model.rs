//! The span/attribute model: the contract between the collector and the
//! frontend (documented in ARCHITECTURE.md). Every span kascade writes is
//! built here.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use crate::model::{ObjectWindow, derived_span_id};

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

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("kascade")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

pub fn span_context(ow: &ObjectWindow) -> SpanContext {
    SpanContext::new(
        ow.trace_id(),
        ow.span_id(),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    )
}

fn span(
    ctx: SpanContext,
    parent: SpanId,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
) -> SpanData {
    SpanData {
        span_context: ctx,
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: scope(),
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
pub fn object_span(ow: &ObjectWindow, uid: &str, window_end: SystemTime) -> SpanData {
    let o = &ow.object;
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_secs(ow.window_start);
    let mut attrs = vec![
        KeyValue::new(attr::SPAN_KIND, SPAN_KIND_OBJECT),
        KeyValue::new(attr::CLUSTER, o.cluster.clone()),
        KeyValue::new(attr::GROUP, o.group.clone()),
        KeyValue::new(attr::RESOURCE, o.resource.clone()),
        KeyValue::new(attr::NAMESPACE, o.namespace.clone()),
        KeyValue::new(attr::NAME, o.name.clone()),
        KeyValue::new(attr::WINDOW_START, ow.window_start as i64),
        KeyValue::new("k8s.cluster.name", o.cluster.clone()),
    ];
    if !uid.is_empty() {
        attrs.push(KeyValue::new(attr::UID, uid.to_string()));
    }
    if !o.namespace.is_empty() {
        attrs.push(KeyValue::new("k8s.namespace.name", o.namespace.clone()));
    } else if o.group.is_empty() && o.resource == "namespaces" {
        attrs.push(KeyValue::new("k8s.namespace.name", o.name.clone()));
    }
    if let Some(p) = semconv_prefix(&o.group, &o.resource) {
        attrs.push(KeyValue::new(format!("{p}.name"), o.name.clone()));
        if !uid.is_empty() {
            attrs.push(KeyValue::new(format!("{p}.uid"), uid.to_string()));
        }
    }
    let name = if o.namespace.is_empty() {
        format!("{} {}", o.resource, o.name)
    } else {
        format!("{} {}/{}", o.resource, o.namespace, o.name)
    };
    span(
        span_context(ow),
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

/// One write, as a child of the object span: `<user> <verb>[ <subresource>]`.
pub fn audit_span(ow: &ObjectWindow, w: &AuditWrite<'_>) -> SpanData {
    let parent = span_context(ow);
    let id = derived_span_id(
        format!("{}|{}", w.audit_id, ow.cache_key()).as_bytes(),
        SALT_AUDIT,
    );
    let ctx = SpanContext::new(
        parent.trace_id(),
        id,
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    );
    let mut name = format!("{} {}", w.user, w.verb);
    if !w.subresource.is_empty() {
        name.push(' ');
        name.push_str(w.subresource);
    }
    let mut attrs = vec![
        KeyValue::new(attr::SPAN_KIND, SPAN_KIND_AUDIT),
        KeyValue::new(attr::AUDIT_ID, w.audit_id.to_string()),
        KeyValue::new(attr::AUDIT_USER, w.user.to_string()),
        KeyValue::new(attr::AUDIT_USER_AGENT, w.user_agent.to_string()),
        KeyValue::new(attr::AUDIT_VERB, w.verb.to_string()),
        KeyValue::new(attr::AUDIT_CODE, w.code as i64),
        KeyValue::new("http.response.status_code", w.code as i64),
        KeyValue::new("user_agent.original", w.user_agent.to_string()),
    ];
    if !w.subresource.is_empty() {
        attrs.push(KeyValue::new(
            attr::AUDIT_SUBRESOURCE,
            w.subresource.to_string(),
        ));
    }
    if let Some(u) = w.impersonated_user {
        attrs.push(KeyValue::new(attr::AUDIT_IMPERSONATED_USER, u.to_string()));
    }
    if !w.source_ip.is_empty() {
        attrs.push(KeyValue::new(
            attr::AUDIT_SOURCE_IP,
            w.source_ip.to_string(),
        ));
        attrs.push(KeyValue::new("client.address", w.source_ip.to_string()));
    }
    if !w.old_rv.is_empty() {
        attrs.push(KeyValue::new(attr::AUDIT_RV_OLD, w.old_rv.to_string()));
    }
    if !w.new_rv.is_empty() {
        attrs.push(KeyValue::new(attr::AUDIT_RV_NEW, w.new_rv.to_string()));
    }
    let mut s = span(
        ctx,
        parent.span_id(),
        name,
        w.start,
        w.end.max(w.start),
        attrs,
    );
    if let Some(msg) = &w.error {
        s.status = Status::error(msg.clone());
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
pub fn link_span(ow: &ObjectWindow, l: &LinkFields<'_>, link_key: u64) -> SpanData {
    let parent = span_context(ow);
    let mut seed = ow.cache_key().into_bytes();
    seed.extend_from_slice(&link_key.to_be_bytes());
    let ctx = SpanContext::new(
        parent.trace_id(),
        derived_span_id(&seed, SALT_LINK),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    );
    let t = &l.target.object;
    let attrs = vec![
        KeyValue::new(attr::SPAN_KIND, SPAN_KIND_LINK),
        KeyValue::new(attr::LINK_ROLE, l.role.to_string()),
        KeyValue::new(attr::LINK_CLASS, l.class.to_string()),
        KeyValue::new(attr::LINK_CLUSTER, t.cluster.clone()),
        KeyValue::new(attr::LINK_GROUP, t.group.clone()),
        KeyValue::new(attr::LINK_RESOURCE, t.resource.clone()),
        KeyValue::new(attr::LINK_NAMESPACE, t.namespace.clone()),
        KeyValue::new(attr::LINK_NAME, t.name.clone()),
    ];
    let name = format!("link {} {} {}", l.role, l.class, t.group_resource());
    let mut s = span(ctx, parent.span_id(), name, l.at, l.at, attrs);
    s.links.links.push(opentelemetry::trace::Link::new(
        span_context(l.target),
        vec![
            KeyValue::new(attr::LINK_ROLE, l.role.to_string()),
            KeyValue::new(attr::LINK_CLASS, l.class.to_string()),
        ],
        0,
    ));
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
pub fn event_span(ow: &ObjectWindow, e: &EventFields<'_>) -> SpanData {
    let parent = span_context(ow);
    let ctx = SpanContext::new(
        parent.trace_id(),
        event_span_id(e.identity, e.count),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    );
    let mut attrs = vec![
        KeyValue::new(attr::SPAN_KIND, SPAN_KIND_EVENT),
        KeyValue::new(attr::EVENT_REASON, e.reason.to_string()),
        KeyValue::new(attr::EVENT_MESSAGE, e.message.to_string()),
        KeyValue::new(attr::EVENT_TYPE, e.event_type.to_string()),
        KeyValue::new(attr::EVENT_COMPONENT, e.component.to_string()),
        KeyValue::new(attr::EVENT_COUNT, e.count),
        KeyValue::new(attr::EVENT_NAME, e.name.to_string()),
    ];
    if !e.uid.is_empty() {
        attrs.push(KeyValue::new(attr::EVENT_UID, e.uid.to_string()));
    }
    if !e.action.is_empty() {
        attrs.push(KeyValue::new(attr::EVENT_ACTION, e.action.to_string()));
    }
    let name = if e.reason.is_empty() {
        SPAN_KIND_EVENT.to_string()
    } else {
        e.reason.to_string()
    };
    let mut s = span(ctx, parent.span_id(), name, e.at, e.at, attrs);
    if e.event_type == "Warning" {
        s.status = Status::error(if e.message.is_empty() {
            e.reason.to_string()
        } else {
            e.message.to_string()
        });
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
) -> SpanData {
    let parent = span_context(ow);
    let id = derived_span_id(
        format!("{}|{kind}|{new_rv}", ow.cache_key()).as_bytes(),
        SALT_WATCH,
    );
    let ctx = SpanContext::new(
        parent.trace_id(),
        id,
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    );
    let mut attrs = vec![
        KeyValue::new(attr::SPAN_KIND, SPAN_KIND_WATCH),
        KeyValue::new(attr::WATCH_TYPE, kind.to_string()),
    ];
    if !old_rv.is_empty() {
        attrs.push(KeyValue::new(attr::WATCH_RV_OLD, old_rv.to_string()));
    }
    if !new_rv.is_empty() {
        attrs.push(KeyValue::new(attr::WATCH_RV_NEW, new_rv.to_string()));
    }
    span(
        ctx,
        parent.span_id(),
        format!("watch {kind}"),
        at,
        at,
        attrs,
    )
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
        assert_eq!(s.parent_span_id, ow.span_id());
        assert_eq!(s.span_context.trace_id(), ow.trace_id());
        assert_eq!((s.start_time, s.end_time), (at, at));
        assert_eq!(s.status, Status::error("0/3 nodes are available"));
        let normal = event_span(
            &ow,
            &EventFields {
                event_type: "Normal",
                ..f
            },
        );
        assert_eq!(normal.status, Status::Unset);
    }
}

//! The spans kascade writes, one constructor per span kind (the contract
//! in docs/internals.md).

use super::*;

/// The instrumentation scope every span is reported under.
pub(crate) fn scope() -> opentelemetry_proto::tonic::common::v1::InstrumentationScope {
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
pub(crate) fn object_span(ow: &ObjectWindow, uid: &str, window_end: SystemTime) -> SpanBuf {
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
pub(crate) struct AuditWrite<'a> {
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
    /// What recorded the write when not the apiserver's audit log
    /// (`audit.recorded_by`): the admission source.
    pub recorded_by: Option<&'static str>,
    /// The apiserver's annotations of the request (`audit.webhooks.failed_open`,
    /// `audit.latency`).
    pub annotations: &'a crate::flow::RequestAnnotations,
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
pub(crate) fn audit_span(ow: &ObjectWindow, w: &AuditWrite<'_>) -> SpanBuf {
    let mut name = [w.user, w.verb].join(" ");
    if !w.subresource.is_empty() {
        name.push(' ');
        name.push_str(w.subresource);
    }
    audit_span_named(ow, w, &name)
}

/// The id of the audit span of `audit_id` in `ow` (known before the write
/// is processed, so a later write can name it as its cause).
pub(crate) fn audit_span_id(ow: &ObjectWindow, audit_id: &str) -> SpanId {
    audit_span_id_of(&ow.object, ow.window_start, audit_id)
}

/// [`audit_span_id`] from the object and window start.
pub(crate) fn audit_span_id_of(
    object: &crate::model::ObjectRef,
    window_start: u64,
    audit_id: &str,
) -> SpanId {
    // The hash of `<audit id>|<cache key>`.
    derived_span_id_of(SALT_AUDIT, |h| {
        h.update(audit_id.as_bytes());
        h.update(b"|");
        crate::model::hash_window_key(object, window_start, h);
    })
}

/// [`audit_span`] under a name of the caller's (a write shown on another
/// object's span says what it wrote).
pub(crate) fn audit_span_named(ow: &ObjectWindow, w: &AuditWrite<'_>, name: &str) -> SpanBuf {
    let id = audit_span_id(ow, w.audit_id);
    // Sized for the usual audit span: from 512 bytes, nearly every one grew
    // twice (its attributes are 0.6-1 KB, with a write's diffs 1-2 KB; the
    // few larger reserve for their diffs at once).
    let mut s = SpanBuf::with_capacity(
        ow.trace_id(),
        id,
        ow.span_id(),
        name,
        (w.start, w.end.max(w.start)),
        2048,
    );
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
    if let Some(by) = w.recorded_by {
        s.attr(attr::AUDIT_RECORDED_BY, by);
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
    if !w.annotations.failed_open.is_empty() {
        s.attr(
            attr::AUDIT_WEBHOOKS_FAILED_OPEN,
            &w.annotations.failed_open.join(", "),
        );
    }
    if w.annotations.total.is_some() {
        s.attr(attr::AUDIT_LATENCY, &w.annotations.latency_text());
    }
    if let Some(msg) = &w.error {
        s.set_error(msg.clone());
    }
    s
}

/// A relation recorded on `ow`'s span: `target` plays `role` (class `class`).
pub(crate) struct LinkFields<'a> {
    pub target: &'a ObjectWindow,
    pub role: &'a str,
    pub class: &'a str,
    pub at: SystemTime,
}

/// A zero-length child of the object span naming the linked object; it also
/// carries an OpenTelemetry link to the linked object's span.
pub(crate) fn link_span(ow: &ObjectWindow, l: &LinkFields<'_>, link_key: u64) -> SpanBuf {
    // The hash of the cache key, the link key and the start: a span id
    // stands for one content. Two processes that each found the link (two
    // replicas deciding alone while etcd is gone) send two spans, not two
    // versions of one id, which Jaeger's query API cannot serve (500).
    let id = derived_span_id_of(SALT_LINK, |h| {
        ow.hash_cache_key(h);
        h.update(&link_key.to_be_bytes());
        h.update(&super::nanos(l.at).to_be_bytes());
    });
    let t = &l.target.object;
    let name = ["link", l.role, l.class, &t.group_resource()].join(" ");
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
pub(crate) struct EventFields<'a> {
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
pub(crate) fn event_span_id(identity: &str, count: i64) -> SpanId {
    derived_span_id(format!("{identity}|{count}").as_bytes(), SALT_EVENT)
}

/// A Kubernetes Event about the object, as a zero-length child of the
/// object's span named after the Event's reason; an error when it is a Warning.
pub(crate) fn event_span(ow: &ObjectWindow, e: &EventFields<'_>) -> SpanBuf {
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

/// The id of the watch span of a `kind` change to version `new_rv` in `ow`.
pub(crate) fn watch_span_id(ow: &ObjectWindow, kind: &str, new_rv: &str) -> SpanId {
    // The hash of `<cache key>|<kind>|<new resourceVersion>`.
    derived_span_id_of(SALT_WATCH, |h| {
        ow.hash_cache_key(h);
        for part in [kind, new_rv] {
            h.update(b"|");
            h.update(part.as_bytes());
        }
    })
}

/// A change seen only by the list-watch (no audit event showed it): a
/// zero-length child of the object span at the time it was observed, named
/// `watch <added|modified|deleted|listed>`; the diff or snapshot are its events.
pub(crate) fn watch_span(
    ow: &ObjectWindow,
    kind: &str,
    old_rv: &str,
    new_rv: &str,
    at: SystemTime,
) -> SpanBuf {
    let id = watch_span_id(ow, kind, new_rv);
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

    /// A Pod's object span at `at` with the default cap on values (not the
    /// process's, which the environment may change).
    fn pod_span(at: std::time::SystemTime) -> SpanBuf {
        let ow = ObjectWindow {
            object: ObjectRef::new("c", "", "pods", "ns", "p"),
            window_start: 0,
        };
        SpanBuf::with_max_value(
            ow.trace_id(),
            ow.span_id(),
            SpanId::INVALID,
            "pods ns/p",
            (at, at),
            DEFAULT_MAX_VALUE_BYTES,
        )
    }

    #[test]
    fn events_and_links_written_in_place_decode_whatever_their_lengths() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(3);
        // Lengths around the varint steps of the fields' length prefixes.
        for n in [
            0, 1, 90, 100, 110, 127, 128, 200, 16_300, 16_383, 16_384, 20_000,
        ] {
            let value = "v".repeat(n);
            let mut buf = pod_span(at);
            buf.event(
                EVENT_DIFF,
                at,
                &[("diff.path", "spec"), ("diff.new", &value)],
            );
            buf.link_ids(&[7; 16], &[8; 8], &[("link.role", &value)]);
            buf.event(&value, at, &[]);
            buf.set_error(value.clone());
            let s = buf.finish().decode();
            let string = |v: Option<&any_value::Value>| match v {
                Some(any_value::Value::StringValue(s)) => s.len(),
                other => panic!("{n}: not a string: {other:?}"),
            };
            assert_eq!(s.events.len(), 2, "{n}");
            assert_eq!(string(attr_value(&s.events[0].attributes, "diff.new")), n);
            assert_eq!(s.events[1].name.len(), n);
            assert_eq!(s.links.len(), 1, "{n}");
            assert_eq!(s.links[0].span_id, [8; 8]);
            assert_eq!(string(attr_value(&s.links[0].attributes, "link.role")), n);
            assert_eq!(s.status.as_ref().unwrap().message.len(), n);
            assert_eq!(s.status.as_ref().unwrap().code, 2, "{n}: error");
        }
    }

    #[test]
    fn the_default_cap_leaves_ordinary_spans_untouched() {
        let value = "v".repeat(DEFAULT_MAX_VALUE_BYTES);
        let mut buf = pod_span(std::time::UNIX_EPOCH);
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

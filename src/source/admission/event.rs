//! An admitted write as the audit event the apiserver would have logged
//! for it: the processor then shows it as any audited write (its diff, its
//! cause, its cascade), claiming the watch's version of it.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::flow::AuditEvent;
use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value};

use super::review::Admitted;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: String,
    verb: &'a str,
    user: &'a Value,
    object_ref: ObjectRefOut<'a>,
    response_status: Status<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Cow<'a, Value>>,
    request_received_timestamp: String,
    stage_timestamp: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRefOut<'a> {
    resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    api_group: &'a str,
    api_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    resource_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
}

#[derive(Serialize)]
struct Status<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    api_version: Option<&'static str>,
    metadata: Empty,
    #[serde(skip_serializing_if = "str::is_empty")]
    status: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details<'a>>,
    code: i32,
}

#[derive(Serialize)]
struct Details<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct Empty {}

fn status(code: i32) -> Status<'static> {
    Status {
        kind: None,
        api_version: None,
        metadata: Empty {},
        status: "",
        message: "",
        reason: "",
        details: None,
        code,
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    crate::json::pointer(v, path)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The URI the request was sent to.
fn request_uri(a: &Admitted) -> String {
    let o = &a.object;
    let mut uri = if o.group.is_empty() {
        format!("/api/{}", a.version)
    } else {
        format!("/apis/{}/{}", o.group, a.version)
    };
    if !o.namespace.is_empty() {
        uri.push_str("/namespaces/");
        uri.push_str(&o.namespace);
    }
    uri.push('/');
    uri.push_str(&o.resource);
    if a.verb != "create" || !a.subresource.is_empty() {
        uri.push('/');
        uri.push_str(&o.name);
    }
    if !a.subresource.is_empty() {
        uri.push('/');
        uri.push_str(&a.subresource);
    }
    uri
}

fn object_ref<'a>(a: &'a Admitted, uid: &'a str, resource_version: &'a str) -> ObjectRefOut<'a> {
    let o = &a.object;
    ObjectRefOut {
        resource: &o.resource,
        namespace: &o.namespace,
        name: &o.name,
        uid,
        api_group: &o.group,
        api_version: &a.version,
        resource_version,
        subresource: &a.subresource,
    }
}

/// Made into the audit event kascade reads, marked as recorded by
/// admission. An event that does not decode (it cannot: the fields are
/// the review's, bounded when it was read) is said and dropped.
fn finish(ev: &Event<'_>) -> Option<AuditEvent> {
    let text = match sonic_rs::to_string(ev) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(audit_id = ev.audit_id, error = %e, "an admitted write could not be written as an audit event");
            return None;
        }
    };
    match crate::source::audit::parse_event(&text) {
        Ok(mut event) => {
            event.recorded_by_admission = true;
            Some(event)
        }
        Err(e) => {
            tracing::warn!(audit_id = ev.audit_id, error = %e, "an admitted write could not be read as an audit event");
            None
        }
    }
}

/// The write of the version `state` the watch delivered at `observed`.
pub(super) fn persisted(a: &Admitted, state: &Value, observed: SystemTime) -> Option<AuditEvent> {
    let rv = str_at(state, "/metadata/resourceVersion");
    let uid = str_at(state, "/metadata/uid");
    let (code, request_object, response_object) = match a.subresource.as_str() {
        // As the apiserver answers these: a Status; the object written is
        // the request's.
        "binding" | "eviction" => (201, a.new.as_ref(), Some(Cow::Owned(success_status(201)))),
        // A Scale, carrying the parent's new version.
        "scale" => {
            let mut scale = a.new.clone().unwrap_or_default();
            if let Some(meta) = scale.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.insert(&"resourceVersion", rv);
            }
            (200, None, Some(Cow::Owned(scale)))
        }
        _ => (
            if a.verb == "create" { 201 } else { 200 },
            None,
            Some(Cow::Borrowed(state)),
        ),
    };
    finish(&Event {
        request_object,
        response_object,
        ..base(a, uid, rv, status(code), observed)
    })
}

/// An update (or a delete of an object already being deleted) that stored
/// nothing: answered with the object as it was.
pub(super) fn unchanged(a: &Admitted, current: &Value) -> Option<AuditEvent> {
    let rv = str_at(current, "/metadata/resourceVersion");
    let uid = str_at(current, "/metadata/uid");
    finish(&Event {
        response_object: Some(Cow::Borrowed(current)),
        ..base(a, uid, rv, status(200), a.received)
    })
}

/// Why an admitted write was not stored, as far as the watch can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Refused after admission (a later webhook, validation, a quota), or
    /// its version never delivered.
    NotPersisted,
    /// Another write changed the object first: an update that lost an
    /// optimistic conflict (its writer tries again).
    Conflict,
    /// The object was deleted first.
    Gone,
}

/// A write the watch never showed stored within `wait`.
pub(super) fn not_persisted(a: &Admitted, refusal: Refusal, wait: Duration) -> Option<AuditEvent> {
    let wait = humantime::format_duration(wait);
    let (code, reason, message) = match refusal {
        Refusal::Conflict => (
            409,
            "Conflict",
            format!(
                "admitted, but not stored: another write changed the object first (a conflict; its writer tries again); the list-watch did not show this write within {wait}"
            ),
        ),
        Refusal::Gone => (
            404,
            "NotFound",
            format!(
                "admitted, but not stored: the object was deleted first; the list-watch did not show this write within {wait}"
            ),
        ),
        Refusal::NotPersisted => (
            400,
            "NotPersisted",
            format!(
                "admitted by kascade's webhook, but not stored: refused afterwards (by a later admission webhook or plugin, validation or a quota), or its version was never delivered by the list-watch within {wait}"
            ),
        ),
    };
    // A create named by `generateName` that was refused is logged by the
    // apiserver without a name (the generated one is in the Status): it is
    // then shown on its owner, as on the audit path.
    let generated = a.verb == "create"
        && a.subresource.is_empty()
        && a.new
            .as_ref()
            .is_some_and(|o| !str_at(o, "/metadata/generateName").is_empty());
    let st = Status {
        status: "Failure",
        message: &message,
        reason,
        details: generated.then_some(Details {
            name: &a.object.name,
        }),
        ..status(code)
    };
    let mut response = Value::new_object();
    if let Some(o) = response.as_object_mut() {
        o.insert(&"kind", "Status");
        o.insert(&"apiVersion", "v1");
        o.insert(&"status", "Failure");
        o.insert(&"message", message.as_str());
        o.insert(&"reason", reason);
        o.insert(&"code", code);
    }
    let uid = a
        .old
        .as_ref()
        .or(a.new.as_ref())
        .map(|o| str_at(o, "/metadata/uid"))
        .unwrap_or("");
    let mut ev = Event {
        // A refused create is read from its request (its name, owner).
        request_object: a.new.as_ref(),
        response_object: Some(Cow::Owned(response)),
        ..base(a, uid, "", st, a.received)
    };
    if generated {
        ev.object_ref.name = "";
        ev.object_ref.uid = "";
    }
    finish(&ev)
}

fn base<'a>(
    a: &'a Admitted,
    uid: &'a str,
    rv: &'a str,
    response_status: Status<'a>,
    completed: SystemTime,
) -> Event<'a> {
    Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level: "RequestResponse",
        audit_id: &a.uid,
        stage: "ResponseComplete",
        request_uri: request_uri(a),
        verb: a.verb,
        user: &a.user,
        object_ref: object_ref(a, uid, rv),
        response_status,
        request_object: None,
        response_object: None,
        request_received_timestamp: rfc3339(a.received),
        stage_timestamp: rfc3339(completed.max(a.received)),
    }
}

fn success_status(code: i32) -> Value {
    let mut v = Value::new_object();
    if let Some(o) = v.as_object_mut() {
        o.insert(&"kind", "Status");
        o.insert(&"apiVersion", "v1");
        o.insert(&"status", "Success");
        o.insert(&"code", code);
    }
    v
}

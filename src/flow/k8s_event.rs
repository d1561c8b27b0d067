//! Kubernetes Events (core/v1 and events.k8s.io/v1) as the audited write of
//! an Event carries them: what happened, to which object, when, how often.
//!
//! The two APIs name the same things differently (`involvedObject`/`regarding`,
//! `message`/`note`, `count`/`series.count`/`deprecatedCount`, …); this reads
//! either, so an occurrence looks the same whichever API wrote or served it.

use std::time::{Duration, SystemTime};

use serde_json::Value;

pub(crate) const EVENTS_GROUP: &str = "events.k8s.io";
pub(crate) const EVENTS_RESOURCE: &str = "events";

/// Whether (group, resource) is one of the two Event APIs.
pub(crate) fn is_event_resource(group: &str, resource: &str) -> bool {
    resource == EVENTS_RESOURCE && (group.is_empty() || group == EVENTS_GROUP)
}

/// The object an Event is about: core/v1 `involvedObject`, events.k8s.io/v1 `regarding`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvolvedObject {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One Event, read from an Event object.
#[derive(Debug, Clone, PartialEq)]
pub struct K8sEvent {
    /// The Event object's own name, namespace and uid (empty when not known,
    /// e.g. in the request of a create).
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub involved: InvolvedObject,
    pub reason: String,
    pub message: String,
    /// `Normal` or `Warning`.
    pub event_type: String,
    pub component: String,
    pub action: String,
    /// How many times it has occurred so far (at least 1).
    pub count: i64,
    /// The latest occurrence, when the Event says.
    pub occurred: Option<SystemTime>,
}

fn text(v: &Value, path: &str) -> Option<String> {
    crate::json::pointer(v, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn first_text(v: &Value, paths: &[&str]) -> String {
    paths.iter().find_map(|p| text(v, p)).unwrap_or_default()
}

fn time(v: &Value, path: &str) -> Option<SystemTime> {
    text(v, path).and_then(|s| humantime::parse_rfc3339_weak(&s).ok())
}

impl K8sEvent {
    /// Reads an Event object of either API. `None` when `obj` is not an Event
    /// (a `Status`, a partial patch body) or names no involved object.
    pub fn from_object(obj: &Value) -> Option<Self> {
        if let Some(kind) = obj.get("kind").and_then(Value::as_str)
            && kind != "Event"
        {
            return None;
        }
        let events_api = match obj.get("apiVersion").and_then(Value::as_str) {
            Some(v) => v.starts_with("events.k8s.io/"),
            None => obj.get("involvedObject").is_none() && obj.get("regarding").is_some(),
        };
        let involved = obj
            .get("involvedObject")
            .filter(|v| v.is_object())
            .or_else(|| obj.get("regarding").filter(|v| v.is_object()))?;
        let involved = InvolvedObject {
            api_version: text(involved, "/apiVersion").unwrap_or_default(),
            kind: text(involved, "/kind")?,
            namespace: text(involved, "/namespace").unwrap_or_default(),
            name: text(involved, "/name")?,
            uid: text(involved, "/uid").unwrap_or_default(),
        };
        // A name beyond Kubernetes' bounds names no object that can exist
        // (a forged Event): no object span is made up for it.
        use crate::bounds::{MAX_NAME_BYTES, MAX_NAMESPACE_BYTES};
        if [
            &involved.api_version,
            &involved.kind,
            &involved.name,
            &involved.uid,
        ]
        .iter()
        .any(|f| f.len() > MAX_NAME_BYTES)
            || involved.namespace.len() > MAX_NAMESPACE_BYTES
        {
            return None;
        }
        let count = ["/count", "/series/count", "/deprecatedCount"]
            .iter()
            .find_map(|p| {
                crate::json::pointer(obj, p)
                    .and_then(Value::as_i64)
                    .filter(|c| *c > 0)
            })
            .unwrap_or(1);
        // events.k8s.io: the series' last observation, else the event time;
        // core/v1: lastTimestamp, else the event time, else firstTimestamp.
        // The other API's (deprecated) fields come last, for Events written
        // through one API and read through the other.
        let times: &[&str] = if events_api {
            &[
                "/series/lastObservedTime",
                "/eventTime",
                "/deprecatedLastTimestamp",
                "/deprecatedFirstTimestamp",
            ]
        } else {
            &[
                "/lastTimestamp",
                "/series/lastObservedTime",
                "/eventTime",
                "/firstTimestamp",
            ]
        };
        Some(Self {
            name: first_text(obj, &["/metadata/name"]),
            namespace: first_text(obj, &["/metadata/namespace"]),
            uid: first_text(obj, &["/metadata/uid"]),
            involved,
            reason: first_text(obj, &["/reason"]),
            message: first_text(obj, &["/message", "/note"]),
            event_type: first_text(obj, &["/type"]),
            component: first_text(
                obj,
                &[
                    "/reportingComponent",
                    "/reportingController",
                    "/source/component",
                    "/deprecatedSource/component",
                ],
            ),
            action: first_text(obj, &["/action"]),
            count,
            occurred: times.iter().find_map(|p| time(obj, p)),
        })
    }
}

/// core/v1 Event timestamps have whole-second precision (the time cut down
/// to its second), which would sort an Event before the writes it reports.
/// The occurrence lies in `[t, t + 1 s)` and no later than `seen`, when the
/// Event was written (its audit event) or delivered (the Event watch): the
/// latest time both allow, `min(seen, t + 1 s - 1 µs)`, never precedes a
/// write the Event reports. A precise time, or one seen earlier than it
/// (another clock), is kept.
pub(crate) fn precise_occurrence(occurred: Option<SystemTime>, seen: SystemTime) -> SystemTime {
    let Some(t) = occurred else {
        return seen;
    };
    let whole_second = t
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.subsec_nanos() == 0);
    if !whole_second || seen < t {
        return t;
    }
    seen.min(t + Duration::from_secs(1) - Duration::from_micros(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_apis_are_core_and_events_k8s_io_only() {
        assert!(is_event_resource("", "events"));
        assert!(is_event_resource("events.k8s.io", "events"));
        assert!(!is_event_resource("example.com", "events"));
        assert!(!is_event_resource("", "pods"));
    }

    #[test]
    fn not_an_event_is_none() {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure"});
        assert!(K8sEvent::from_object(&status).is_none());
        // A merge patch body: no involved object.
        let patch = serde_json::json!({"count": 3, "lastTimestamp": "2026-01-01T00:00:00Z"});
        assert!(K8sEvent::from_object(&patch).is_none());
    }

    #[test]
    fn an_involved_object_beyond_name_bounds_is_none() {
        let event = |name: &str, namespace: &str| {
            serde_json::json!({"kind": "Event", "apiVersion": "v1", "reason": "Started",
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name}})
        };
        assert!(K8sEvent::from_object(&event(&"p".repeat(253), "default")).is_some());
        assert!(K8sEvent::from_object(&event(&"p".repeat(5 << 20), "default")).is_none());
        assert!(K8sEvent::from_object(&event("p", &"n".repeat(64))).is_none());
    }
}

//! What a write did to an object: the new state applied onto the last one
//! known (redacted, without noise), the changed paths or a snapshot, and the
//! resource versions around it.

use std::sync::Arc;

use crate::json::{JsonContainerTrait as _, JsonValueMutTrait as _, JsonValueTrait as _, Value};

use super::super::diff::{self, Change};
use super::super::redact::{HiddenValues, Redactor};
use super::super::relations::KindRegistry;
use super::ParsedResponse;
use crate::flow::{AuditEvent, FieldHashes};
use crate::model::ObjectRef;

/// What one write did to the object.
#[derive(Default, Debug)]
pub(super) struct Outcome {
    /// The object after the write, when the response tells it (shared with
    /// the state store, and with `snapshot` for a create).
    pub state: Option<Arc<Value>>,
    /// `state` as the JSON it was parsed from (the response as logged,
    /// nothing redacted or carried over): the state store keeps it instead
    /// of writing the state out again.
    pub state_text: Option<Arc<str>>,
    /// The hashes of `state_text`'s top-level fields.
    pub state_fields: Option<Arc<FieldHashes>>,
    pub changes: Vec<Change>,
    /// The whole object, for a create or a delete.
    pub snapshot: Option<Arc<Value>>,
    /// The values redaction replaced in the response (hashed).
    pub hidden: HiddenValues,
}

fn set_path(state: &mut Value, path: &[&str], v: Value) {
    let mut cur = state;
    for (i, key) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::new_object();
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == path.len() {
            map.insert(key, v);
            return;
        }
        if !map.contains_key(key) {
            map.insert(key, Value::new_null());
        }
        let Some(next) = map.get_mut(key) else {
            return;
        };
        cur = next;
    }
}

/// Applies the write to the last known state `old`, yielding the new state
/// and what changed. Learns the object's kind on the way (for owner
/// references to it). Without a `redactor` (only changes are wanted, and
/// nothing of the objects leaves the process) nothing is redacted and no
/// diff or snapshot is made.
pub(super) fn apply(
    ev: &AuditEvent,
    obj: &ObjectRef,
    old: Option<&Arc<Value>>,
    old_fields: Option<&FieldHashes>,
    kinds: &KindRegistry,
    redactor: Option<&Redactor>,
    parsed: Option<ParsedResponse>,
) -> Outcome {
    let code = ev.code();
    if code >= 400 {
        return Outcome::default();
    }
    // Parsed ahead, the response may be redacted already: a Scale's
    // replicas are then carried over as redaction left them.
    let mut out = Outcome::default();
    let (response, redacted, mut as_logged) = match parsed {
        Some(ParsedResponse {
            object,
            hidden,
            redacted,
            changed,
        }) => {
            out.hidden = hidden;
            (object, redacted, !changed)
        }
        None => (
            ev.response_object.as_ref().and_then(|r| r.parse().ok()),
            false,
            true,
        ),
    };
    let kind = response
        .as_ref()
        .and_then(|r| r.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = kind.as_str();
    let subresource = ev.subresource();
    // The one field a Scale or a binding writes onto the last state.
    let mut written_field: Option<&[&str]> = None;
    let new_state = match (kind, subresource) {
        // `kubectl scale` answers with a Scale: carry its replicas onto the object.
        ("Scale", _) => {
            let replicas = response
                .as_ref()
                .and_then(|r| crate::json::pointer(r, "/spec/replicas"))
                .cloned()
                .unwrap_or_default();
            let mut s = old
                .map(|o| Value::clone(o))
                .unwrap_or_else(Value::new_object);
            set_path(&mut s, &["spec", "replicas"], replicas);
            written_field = Some(&["spec", "replicas"]);
            // The Scale's resourceVersion is the object's new one: the
            // watch's copy of this write is matched by it.
            if let Some(rv) = response
                .as_ref()
                .and_then(|r| crate::json::pointer(r, "/metadata/resourceVersion"))
            {
                set_path(&mut s, &["metadata", "resourceVersion"], rv.clone());
            }
            Some(s)
        }
        // The scheduler's binding answers with a Status; the request names the node.
        (_, "binding") => {
            let node = ev
                .request_object
                .as_ref()
                .and_then(|r| r.parse().ok())
                .and_then(|b| crate::json::pointer(&b, "/target/name").cloned());
            node.map(|n| {
                let mut s = old
                    .map(|o| Value::clone(o))
                    .unwrap_or_else(Value::new_object);
                set_path(&mut s, &["spec", "nodeName"], n);
                written_field = Some(&["spec", "nodeName"]);
                s
            })
        }
        ("Status", _) | ("", _) => None,
        // Only a response of the object's own kind is a new state of the
        // object: a TokenRequest (serviceaccounts/token) must never be.
        (_, sub)
            if sub.is_empty()
                || sub == "status"
                || old.and_then(|o| o.get("kind")).and_then(Value::as_str) == Some(kind) =>
        {
            as_logged &= response.is_some();
            let mut r = response.unwrap_or_default();
            kinds.learn(&obj.group, kind, &obj.resource, !obj.namespace.is_empty());
            // No managedFields to strip: cut when decoded.
            if let Some(redactor) = redactor.filter(|_| !redacted) {
                // Without a response `r` is null: nothing to redact.
                let text = ev.response_object.as_ref().map_or("", |t| t.get());
                let (changed, hidden) =
                    redactor.redact_parsed_noting(&obj.group, &obj.resource, &mut r, text);
                as_logged &= !changed;
                out.hidden = hidden;
            }
            if as_logged {
                out.state_text = ev.response_object.as_ref().map(|t| t.get().into());
                out.state_fields = ev
                    .response_object
                    .as_ref()
                    .and_then(|t| t.field_hashes().cloned());
            }
            Some(r)
        }
        _ => None,
    };
    let new_state = new_state.map(Arc::new);
    let creates_object = ev.verb == "create" && subresource.is_empty();
    if redactor.is_none() {
        out.state = new_state;
        return out;
    }
    match ev.verb.as_str() {
        _ if creates_object => out.snapshot = new_state.clone(),
        "delete" | "deletecollection" => {
            out.snapshot = new_state.clone().or_else(|| old.cloned());
        }
        _ => {
            if let (Some(o), Some(n)) = (old, new_state.as_ref()) {
                // Only one field written onto the last state (besides its
                // resourceVersion, never shown): only it is compared.
                let of_field = written_field.and_then(|f| diff::diff_of_field(o, n, f));
                out.changes = match (of_field, old_fields, out.state_fields.as_deref()) {
                    (Some(changes), _, _) => changes,
                    // Both states as logged: fields written alike are equal.
                    (None, Some(a), Some(b)) => diff::diff_unless(o, n, |key| a.same_field(b, key)),
                    _ => diff::diff(o, n),
                };
            }
        }
    }
    out.state = new_state;
    out
}

/// A state the list-watch delivered, made comparable with the audit side's:
/// its kind learned, noise stripped, secrets redacted; the values redaction
/// replaced.
pub(super) fn prepare_watched(
    obj: &ObjectRef,
    state: &mut Value,
    kinds: &KindRegistry,
    redactor: &Redactor,
) -> HiddenValues {
    if let Some(kind) = state.get("kind").and_then(Value::as_str) {
        kinds.learn(&obj.group, kind, &obj.resource, !obj.namespace.is_empty());
    }
    diff::strip_noise(state);
    redactor.redact_noting(&obj.group, &obj.resource, state)
}

/// Whether this write removed the object (not only requested its deletion):
/// then it has no readiness left to report, and no state to keep.
/// A delete with no grace period left and no finalizer removes the object
/// even though its response still carries `deletionTimestamp` (a kubelet's
/// final delete of a Pod).
pub(super) fn removes_object(ev: &AuditEvent, outcome: &Outcome) -> bool {
    // Deleted with nothing left to wait for: no grace period, no finalizer.
    let nothing_holds = |s: &Value| {
        let meta = s.get("metadata");
        let field = |k: &str| meta.and_then(|m| m.get(k));
        field("deletionTimestamp").is_some()
            && field("deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0)
            && field("finalizers")
                .and_then(Value::as_array)
                .is_none_or(|f| f.is_empty())
    };
    match ev.verb.as_str() {
        "delete" | "deletecollection" => outcome.state.as_ref().is_none_or(|s| {
            s.get("metadata")
                .and_then(|m| m.get("deletionTimestamp"))
                .is_none()
                || nothing_holds(s)
        }),
        // The write that removed the last finalizer of an object being
        // deleted: the apiserver removes it then, with no delete of its own.
        "update" | "patch" => {
            ev.code() < 300 && outcome.state.as_ref().is_some_and(|s| nothing_holds(s))
        }
        _ => false,
    }
}

/// The version a write replaced, reported only when it is known to
/// precede `new_rv`: the version the request itself names (an update's
/// precondition), else the one the watch saw before `new_rv`, else the
/// last state's — which is the written version itself, or a later one,
/// when the list-watch got ahead of the audit event. Without a new
/// version (a failed write) only the request's own is reported. `last`:
/// the last state's version ("" without one).
pub(super) fn old_resource_version(
    ev: &AuditEvent,
    watch_old: &str,
    last: &str,
    new_rv: &str,
) -> String {
    let requested = ev
        .object_ref
        .as_ref()
        .map(|r| r.resource_version.as_str())
        .unwrap_or("");
    if new_rv.is_empty() {
        return requested.to_string();
    }
    [requested, watch_old, last]
        .into_iter()
        .find(|rv| is_older(rv, new_rv))
        .unwrap_or("")
        .to_string()
}

pub(super) fn resource_version(state: &Value) -> &str {
    state
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Resource versions are opaque strings, but etcd-backed ones are integers:
/// `a` is older than `b` only when both are and `a < b`.
pub(super) fn is_older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

#[cfg(test)]
mod tests;

//! An AdmissionReview (`admission.k8s.io/v1`) as the apiserver sends it to
//! a validating webhook, read into the write it admitted.

use std::sync::Arc;
use std::time::SystemTime;

use crate::json::{JsonValueMutTrait as _, JsonValueTrait as _, Value, depth};
use crate::model::ObjectRef;

/// What the apiserver asked about: a write it is about to persist (after
/// every mutating webhook and its own defaulting, before the write is
/// stored), or something kascade does not record.
#[derive(Debug)]
pub(crate) enum Review {
    /// A write to record.
    Write(Box<Admitted>),
    /// A dry run (`dryRun: true`): never persisted, not shown.
    DryRun,
    /// An operation that writes nothing kascade shows (`CONNECT`: exec,
    /// attach, port-forward).
    NotAWrite,
}

/// An admitted write, as a validating webhook sees it: what, by whom, and
/// the object the apiserver is about to store.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The object written (for a subresource, its parent).
    pub object: ObjectRef,
    /// The admission request's uid (unique per call): the write's span
    /// carries it as its audit ID.
    pub uid: String,
    /// `create`, `update` (a patch too: webhooks cannot tell them apart) or
    /// `delete`, as the audit log names it.
    pub verb: &'static str,
    pub version: String,
    pub subresource: String,
    /// The request's `userInfo`, as sent.
    pub user: Value,
    /// The object after the write (a `Binding`, `Scale` or `Eviction` for
    /// those subresources), without `metadata.managedFields`.
    pub new: Option<Value>,
    /// The object before an update or delete, without managedFields.
    pub old: Option<Value>,
    pub received: SystemTime,
    /// The review's size: what holding it costs, about.
    pub bytes: usize,
}

/// The nesting of a review's objects below its root: `request.object`.
const OBJECT_LEVEL: usize = 2;

/// Reads an AdmissionReview: its request's uid (to answer with) and the
/// write it asks about. Objects nested deeper than kascade reads are cut
/// to a marker first ([`depth::cap`]), as in an audit event.
pub(crate) fn decode(
    body: &str,
    cluster: &Arc<str>,
    received: SystemTime,
) -> Result<(String, Review), String> {
    let capped = depth::cap(body, depth::MAX_OBJECT_DEPTH, OBJECT_LEVEL);
    let review = crate::json::parse_capped(&capped.text)
        .map_err(|e| format!("not JSON: {}", crate::messages::clip_message(e.to_string())))?;
    let text = |v: &Value, path: &str| {
        crate::json::pointer(v, path)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match (text(&review, "/kind"), text(&review, "/apiVersion")) {
        (Some(k), Some(v)) if k == "AdmissionReview" && v == "admission.k8s.io/v1" => {}
        (k, v) => {
            return Err(format!(
                "not an AdmissionReview of admission.k8s.io/v1 (kind {:?}, apiVersion {:?}); configure the webhook with admissionReviewVersions [\"v1\"]",
                crate::messages::clip_message(k.unwrap_or_default()),
                crate::messages::clip_message(v.unwrap_or_default()),
            ));
        }
    }
    let Some(request) = review.get("request") else {
        return Err("AdmissionReview without a request".into());
    };
    let uid = text(request, "/uid").ok_or("request.uid missing")?;
    if uid.is_empty() || uid.len() > 128 {
        return Err("request.uid empty or longer than 128 bytes".into());
    }
    if request.get("dryRun").and_then(Value::as_bool) == Some(true) {
        return Ok((uid, Review::DryRun));
    }
    let operation = text(request, "/operation").unwrap_or_default();
    // The apiserver passes a patch to webhooks as an UPDATE (its options
    // made UpdateOptions): a patch is recorded as an update.
    let verb = match operation.as_str() {
        "CREATE" => "create",
        "UPDATE" => "update",
        "DELETE" => "delete",
        "CONNECT" => return Ok((uid, Review::NotAWrite)),
        other => {
            return Err(format!(
                "request.operation {:?} is none of CREATE, UPDATE, DELETE, CONNECT",
                crate::messages::clip_message(other.to_string())
            ));
        }
    };
    let field = |path: &str| text(request, path).unwrap_or_default();
    let (group, version, resource) = (
        field("/resource/group"),
        field("/resource/version"),
        field("/resource/resource"),
    );
    if resource.is_empty() {
        return Err("request.resource.resource missing".into());
    }
    let subresource = field("/subResource");
    let new = request.get("object").filter(|v| v.is_object()).cloned();
    let old = request.get("oldObject").filter(|v| v.is_object()).cloned();
    // A create with generateName is named by the time validating webhooks
    // see it; the request's own name may still be empty.
    let mut name = field("/name");
    if name.is_empty() && subresource.is_empty() {
        name = new
            .as_ref()
            .or(old.as_ref())
            .and_then(|o| crate::json::pointer(o, "/metadata/name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
    }
    if name.is_empty() {
        return Err(format!("request names no object ({verb} {resource})"));
    }
    use crate::bounds::{MAX_NAME_BYTES, check_len};
    for (what, value) in [
        ("request.resource.group", &group),
        ("request.resource.version", &version),
        ("request.resource.resource", &resource),
        ("request.subResource", &subresource),
        ("request.name", &name),
    ] {
        check_len(what, value, MAX_NAME_BYTES)?;
    }
    // A Namespace is cluster-scoped, but the apiserver names it as its own
    // namespace: one object, as the watch and the audit path key it.
    let namespace = if group.is_empty() && resource == "namespaces" {
        String::new()
    } else {
        field("/namespace")
    };
    check_len("request.namespace", &namespace, MAX_NAME_BYTES)?;
    let object = ObjectRef::new(&**cluster, &group, &resource, &namespace, name);
    let user = request.get("userInfo").cloned().unwrap_or_default();
    Ok((
        uid.clone(),
        Review::Write(Box::new(Admitted {
            object,
            uid,
            verb,
            version,
            subresource,
            user,
            new: new.map(without_managed_fields),
            old: old.map(without_managed_fields),
            received,
            bytes: body.len(),
        })),
    ))
}

/// `v` without `metadata.managedFields`: the watch's versions have none,
/// and they are most of an object's bytes.
fn without_managed_fields(mut v: Value) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove(&"managedFields");
    }
    v
}

/// The answer to a review: always allowed. kascade only records; a slow or
/// failing kascade must never block a write.
pub(crate) fn allowed(uid: &str) -> String {
    let mut out = String::with_capacity(128 + uid.len());
    out.push_str(
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    out.push_str(&crate::json::to_text(&Value::from(uid)));
    out.push_str(r#","allowed":true}}"#);
    out
}

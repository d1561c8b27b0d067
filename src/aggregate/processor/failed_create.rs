//! A create refused before its object was named (a ReplicaSet's Pod denied
//! by a quota): shown on the owner it names. The object that holds its span
//! and the span itself; [`super::Processor`] composes them with the cause
//! stage and the emitter.

use super::super::causes::Inference;
use super::super::redact::Redactor;
use super::super::relations::{CLASS_OWNER, KindRegistry};
use super::super::rules::{Relation, Role};
use super::plan;
use super::plan::add_snapshot;
use crate::model::{ObjectWindow, Windowing};
use crate::pipeline::{Accepted, FailedCreate};
use crate::span_model::{self, AuditWrite, SpanBuf, attr};

/// The object window whose span shows the attempt: the owner the request
/// names, else the object named by the `generateName` prefix; the owner's
/// uid; the relation to the owner (its cause is the owner's change the
/// controller acted on).
pub(super) fn holder<'a>(
    kinds: &KindRegistry,
    windowing: Windowing,
    item: &Accepted,
    attempt: &'a FailedCreate,
) -> (ObjectWindow, &'a str, Vec<(Relation, String)>) {
    let ev = &item.event;
    let tried = &item.object;
    let (holder, holder_uid) = match &attempt.owner {
        Some(o) => (
            kinds.referenced_object(
                &tried.cluster,
                &o.api_version,
                &o.kind,
                &tried.namespace,
                &o.name,
            ),
            o.uid.as_str(),
        ),
        None => (tried.clone(), ""),
    };
    let ow = ObjectWindow {
        object: holder,
        window_start: windowing.window_start(ev.request_received_timestamp),
    };
    let relations: Vec<(Relation, String)> = attempt
        .owner
        .as_ref()
        .map(|_| {
            let rel = Relation {
                target: ow.object.clone(),
                role: Role::Parent,
                class: CLASS_OWNER.to_string(),
            };
            (rel, holder_uid.to_string())
        })
        .into_iter()
        .collect();
    (ow, holder_uid, relations)
}

/// The attempt's audit span in error on `ow`, saying what it tried to
/// create, with the request object (redacted) as its snapshot.
pub(super) fn attempt_span(
    item: &Accepted,
    attempt: &FailedCreate,
    ow: &ObjectWindow,
    write: &AuditWrite<'_>,
    inference: &Inference,
    redactor: &Redactor,
) -> SpanBuf {
    let ev = &item.event;
    let tried = &item.object;
    let name = if attempt.generate_name.is_empty() {
        format!(
            "{} {} {} (unnamed)",
            ev.user.username,
            ev.verb,
            tried.group_resource()
        )
    } else {
        format!(
            "{} {} {} (generateName {})",
            ev.user.username,
            ev.verb,
            tried.group_resource(),
            attempt.generate_name
        )
    };
    let mut span = span_model::audit_span_named(ow, write, &name);
    plan::add_cascade(&mut span, inference);
    if !tried.group.is_empty() {
        span.attr(attr::AUDIT_ATTEMPT_GROUP, &tried.group);
    }
    span.attr(attr::AUDIT_ATTEMPT_RESOURCE, &tried.resource);
    if !tried.namespace.is_empty() {
        span.attr(attr::AUDIT_ATTEMPT_NAMESPACE, &tried.namespace);
    }
    span.attr(attr::AUDIT_ATTEMPT_GENERATE_NAME, &attempt.generate_name);
    if !attempt.attempted_name.is_empty() {
        span.attr(attr::AUDIT_ATTEMPT_NAME, &attempt.attempted_name);
    }
    if let Some((text, mut requested)) = ev
        .request_object
        .as_ref()
        .and_then(|r| Some((r.get(), r.parse().ok()?)))
    {
        crate::aggregate::diff::strip_noise(&mut requested);
        redactor.redact_parsed(&tried.group, &tried.resource, &mut requested, text);
        add_snapshot(&mut span, &requested, ev.stage_timestamp);
    }
    span
}

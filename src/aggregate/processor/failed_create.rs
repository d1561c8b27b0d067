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
use crate::flow::{Accepted, FailedCreate};
use crate::model::{ObjectWindow, Windowing};
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

#[cfg(test)]
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{attr as attr_of, refused_pod_create};
    use super::*;
    use crate::flow::{CascadeRole, SpanRef};

    fn root() -> Inference {
        Inference {
            role: CascadeRole::Root,
            cause: None,
            root: SpanRef {
                trace_id: [1; 16],
                span_id: [2; 8],
            },
            depth: 0,
            cpid: None,
            timer: None,
            cause_logged_after: false,
        }
    }

    #[test]
    fn a_refused_create_with_an_owner_is_held_by_the_owner_it_names() {
        let (item, attempt) = refused_pod_create();
        let owner = attempt.owner.clone().expect("a ReplicaSet's Pod");
        let (ow, uid, relations) = holder(
            &KindRegistry::default(),
            ProcessorConfig::default().windowing,
            &item,
            &attempt,
        );
        assert_eq!(ow.object.resource, "replicasets");
        assert_eq!(ow.object.group, "apps");
        assert_eq!(ow.object.name, owner.name);
        assert_eq!(ow.object.namespace, item.object.namespace);
        assert_eq!(uid, owner.uid);
        let [(rel, rel_uid)] = relations.as_slice() else {
            panic!("one relation: {relations:?}");
        };
        assert_eq!(rel.target, ow.object);
        assert_eq!(rel.role, Role::Parent);
        assert_eq!(rel.class, CLASS_OWNER);
        assert_eq!(rel_uid, &owner.uid);
    }

    #[test]
    fn a_refused_create_without_an_owner_is_held_by_its_generate_name() {
        // The quota scenario's attempt with its owner taken away: a user's
        // `kubectl create` of a generateName object sends no owner.
        let (item, mut attempt) = refused_pod_create();
        attempt.owner = None;
        let (ow, uid, relations) = holder(
            &KindRegistry::default(),
            ProcessorConfig::default().windowing,
            &item,
            &attempt,
        );
        assert_eq!(ow.object, item.object);
        assert_eq!(ow.object.name, attempt.generate_name);
        assert_eq!(uid, "");
        assert!(relations.is_empty(), "{relations:?}");
    }

    #[test]
    fn the_attempts_span_names_what_it_tried_and_keeps_the_request() {
        let (item, attempt) = refused_pod_create();
        let (ow, _, _) = holder(
            &KindRegistry::default(),
            ProcessorConfig::default().windowing,
            &item,
            &attempt,
        );
        let write = plan::audit_write(&item.event, "", "", "", Some("refused".into()));
        let redactor = Redactor::new(None);
        let span = attempt_span(&item, &attempt, &ow, &write, &root(), &redactor)
            .finish()
            .decode();
        let user = &item.event.user.username;
        assert_eq!(
            span.name,
            format!(
                "{user} create pods (generateName {})",
                attempt.generate_name
            )
        );
        assert_eq!(
            attr_of(&span, attr::AUDIT_ATTEMPT_RESOURCE).as_deref(),
            Some("pods")
        );
        assert_eq!(
            attr_of(&span, attr::AUDIT_ATTEMPT_GROUP),
            None,
            "core: no group"
        );
        assert_eq!(
            attr_of(&span, attr::AUDIT_ATTEMPT_NAMESPACE).as_deref(),
            Some(item.object.namespace.as_str())
        );
        assert!(
            span.events
                .iter()
                .any(|e| e.name == span_model::EVENT_SNAPSHOT),
            "the requested Pod as a snapshot"
        );

        // Refused before its body was read: nothing to name it by.
        let unnamed = FailedCreate {
            generate_name: String::new(),
            attempted_name: String::new(),
            owner: None,
        };
        let span = attempt_span(&item, &unnamed, &ow, &write, &root(), &redactor)
            .finish()
            .decode();
        assert_eq!(span.name, format!("{user} create pods (unnamed)"));
    }
}

//! A create refused before its object was named (a ReplicaSet's Pod denied
//! by a quota): shown on the owner it names.

use super::super::relations::CLASS_OWNER;
use super::super::rules::{Relation, Role};
use super::emit::{add_snapshot, audit_write};
use super::{ProcessError, Processor, cause};
use crate::model::ObjectWindow;
use crate::pipeline::{Accepted, FailedCreate};
use crate::span_model::{self, attr};

impl Processor {
    /// A create refused before its object was named (e.g. a ReplicaSet's Pod
    /// denied by a quota): an audit span in error on the span of the owner
    /// the request names, else of an object named by the `generateName`
    /// prefix, saying what it tried to create, with the request object as
    /// its snapshot. Nothing was written, so no state or relation changes.
    pub(super) async fn process_failed_create(
        &self,
        item: &Accepted,
        attempt: &FailedCreate,
    ) -> Result<(), ProcessError> {
        let ev = &item.event;
        let tried = &item.object;
        let (holder, holder_uid) = match &attempt.owner {
            Some(o) => (
                self.kinds.referenced_object(
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
            window_start: self
                .cfg
                .windowing
                .window_start(ev.request_received_timestamp),
        };
        // Its cause is the owner's change the controller acted on.
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
        let inference = self
            .cause
            .infer_cause(
                self.applier.selectors(),
                &cause::Write::audit(
                    ev,
                    tried,
                    cause::audit_span_ref(&ow, &ev.audit_id),
                    self.cause.arrival_of(item),
                    "",
                    false,
                ),
                None,
                &relations,
                None,
                None,
                None,
            )
            .await;
        if self.cfg.changes_only {
            self.metrics.events_processed.inc();
            return Ok(());
        }
        self.emitter
            .ensure_object_span(&ow, holder_uid, item.replayed)
            .await?;
        let write = audit_write(ev, "", "", "", Some(self.failure_message(ev)));
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
        let mut span = span_model::audit_span_named(&ow, &write, &name);
        cause::add_cascade(&mut span, &inference);
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
            self.applier.redactor().redact_parsed(
                &tried.group,
                &tried.resource,
                &mut requested,
                text,
            );
            add_snapshot(&mut span, &requested, ev.stage_timestamp);
        }
        self.emitter.emit(span).await?;
        self.metrics.events_processed.inc();
        Ok(())
    }
}

//! The list-watch's side of the processor: each version diffed against the
//! last state, filed in the [ledger](super::reconcile) for the audit event
//! of the same write, and shown as a `watch` span when none claims it
//! ([`super::Processor::process_watch`] and `flush_watch` compose the
//! stages). Here: the parts of a watch change's span.

use super::super::causes::Inference;
use super::super::diff::Change;
use super::super::readiness::{self, ObjectStatus};
use super::super::rules::ChangeClass;
use super::handoff::Write;
use super::plan::add_cascade;
use super::plan::{self, add_snapshot, add_status};
use super::reconcile::PendingWatch;
use crate::flow::WatchKind;
use crate::flow::{ChangeSource, SpanRef};
use crate::json::{JsonValueTrait as _, Value};
use crate::span_model::{self, SpanBuf};

impl<'a> Write<'a> {
    /// A change only the list-watch saw, shown by the span `span`.
    pub(super) fn watched(
        p: &'a super::reconcile::PendingWatch,
        span: SpanRef,
        arrival: u64,
        class: ChangeClass,
    ) -> Self {
        let at = p.change.observed;
        Write {
            object: &p.ow.object,
            span,
            arrival,
            noted_through: 0,
            user: "",
            verb: p.change.kind.as_str(),
            subresource: "",
            class: Some(class),
            code: 200,
            received: at,
            completed: at,
            source: ChangeSource::Watch,
            uid: crate::json::pointer(&p.change.state, "/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or(""),
            deleted: p.change.kind == WatchKind::Deleted,
            failure: None,
            audit_id: "",
            annotations: &crate::flow::NO_ANNOTATIONS,
            version: super::applied::resource_version(&p.change.state)
                .parse()
                .ok(),
            context: false,
        }
    }
}

/// The readiness of the object after a watch change (none once deleted).
pub(super) fn readiness(p: &PendingWatch) -> Option<ObjectStatus> {
    if p.change.kind == WatchKind::Deleted {
        return None;
    }
    readiness::object_status(&p.ow.object.group, &p.ow.object.resource, &p.change.state)
}

/// The `watch` span of a change no audit event claimed, with what was
/// inferred of its cause, its readiness, snapshot and diff (at most
/// `max_diff_changes` events).
pub(super) fn watch_span(
    p: &PendingWatch,
    new_rv: &str,
    inference: &Inference,
    readiness: Option<&ObjectStatus>,
    max_diff_changes: usize,
) -> SpanBuf {
    let at = p.change.observed;
    let kind = p.change.kind.as_str();
    let mut span = span_model::watch_span(&p.ow, kind, &p.old_rv, new_rv, at);
    add_cascade(&mut span, inference);
    if let Some(st) = readiness {
        add_status(&mut span, st);
    }
    if let Some(snap) = &p.snapshot {
        add_snapshot(&mut span, snap, at);
    }
    plan::add_changes(&mut span, &p.entry.changes, max_diff_changes, at);
    span
}

/// The class of a change only the watch saw: a modification that touched
/// nothing but `status` is a status write.
pub(super) fn watch_class(kind: WatchKind, changes: &[Change]) -> ChangeClass {
    match kind {
        WatchKind::Added | WatchKind::Listed => ChangeClass::Create,
        WatchKind::Deleted => ChangeClass::Delete,
        WatchKind::Modified
            if !changes.is_empty()
                && changes
                    .iter()
                    .all(|c| c.path.as_ref() == "status" || c.path.starts_with("status.")) =>
        {
            ChangeClass::Status
        }
        WatchKind::Modified => ChangeClass::Update,
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{accepted, attr, audit_values, drain, fixture, processor};
    use crate::flow::{WatchChange, WatchKind};
    use crate::json::JsonValueTrait as _;
    use crate::model::ObjectRef;
    use crate::span_model::{EVENT_DIFF, EVENT_SNAPSHOT, SPAN_KIND_AUDIT, SPAN_KIND_WATCH, attr};

    /// The deployment scenario's Deployment as the list-watch delivered it.
    fn watched_deployment() -> Vec<WatchChange> {
        fixture("deployment", "watch/apps.deployments.jsonl")
            .lines()
            .map(|l| crate::json::parse(l).unwrap())
            .filter_map(|ev| {
                let kind = match ev["type"].as_str()? {
                    "ADDED" => WatchKind::Added,
                    "MODIFIED" => WatchKind::Modified,
                    "DELETED" => WatchKind::Deleted,
                    _ => return None,
                };
                let state = ev.get("object")?.clone();
                let object = ObjectRef::new(
                    "c",
                    "apps",
                    "deployments",
                    state["metadata"]["namespace"].as_str()?,
                    state["metadata"]["name"].as_str()?.to_string(),
                );
                Some(WatchChange {
                    object,
                    kind,
                    state,
                    observed: std::time::SystemTime::now(),
                })
            })
            .collect()
    }

    fn of_kind<'a>(
        spans: &'a [crate::span_model::Span],
        k: &str,
    ) -> Vec<&'a crate::span_model::Span> {
        spans
            .iter()
            .filter(|s| attr(s, attr::SPAN_KIND).as_deref() == Some(k))
            .collect()
    }

    #[tokio::test]
    async fn without_audit_events_each_version_is_a_watch_span_once_due() {
        let cfg = ProcessorConfig {
            watch_audit_wait: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let (p, mut rx, _) = processor(cfg);
        let changes = watched_deployment();
        let versions = changes.len();
        assert!(versions > 3, "a rollout has several versions");
        for c in changes {
            p.process_watch(c).await.unwrap();
        }
        // Not due yet: they wait for their audit events.
        p.flush_watch(false).await.unwrap();
        assert!(of_kind(&drain(&mut rx), SPAN_KIND_WATCH).is_empty());
        assert_eq!(p.pending_watch(), versions);
        p.flush_watch(true).await.unwrap();
        let spans = drain(&mut rx);
        let watch = of_kind(&spans, SPAN_KIND_WATCH);
        assert_eq!(watch.len(), versions);
        for s in watch {
            let shows = if attr(s, attr::WATCH_TYPE).as_deref() == Some("modified") {
                EVENT_DIFF
            } else {
                EVENT_SNAPSHOT
            };
            assert!(s.events.iter().any(|e| e.name == shows), "{s:#?}");
        }
    }

    #[tokio::test]
    async fn a_write_seen_by_both_is_shown_once_by_its_audit_span() {
        let (p, mut rx, _) = processor(ProcessorConfig::default());
        for c in watched_deployment() {
            p.process_watch(c).await.unwrap();
        }
        for raw in audit_values("deployment") {
            if raw["objectRef"]["resource"] == "deployments"
                && let Some(item) = accepted(&raw)
            {
                p.process(&item).await.unwrap();
            }
        }
        p.flush_watch(true).await.unwrap();
        let spans = drain(&mut rx);
        let audit = of_kind(&spans, SPAN_KIND_AUDIT);
        assert!(!audit.is_empty());
        // Every version the watch saw was written by an audited request.
        assert!(of_kind(&spans, SPAN_KIND_WATCH).is_empty(), "{spans:#?}");
    }
}

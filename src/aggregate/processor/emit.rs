//! The last stage: spans out. Each object span once per window (the span
//! cache decides), link spans for every relation not yet recorded in the
//! window, on both sides, each span counted as sent; and the parts of an
//! audit or watch span (diff events, snapshot, readiness, failure).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;

use crate::json::Value;
use crate::metrics::Metrics;
use crate::model::{KeyHasher, Windowing};

use super::super::diff::Change;
use super::super::rules::Relation;
use super::super::span_cache::{Slot, SpanCache};
use super::super::status;
use super::ProcessError;
use crate::model::{ObjectRef, ObjectWindow};
use crate::pipeline::{AuditEvent, ExportProgress};
use crate::span_model::{
    self, AuditWrite, EVENT_DIFF, EVENT_SNAPSHOT, EncodedSpan, LinkFields, SpanBuf, attr,
};

/// Sends spans to the exporter: owns the span cache (which object and link
/// spans a window has already) and the exporter's channel.
pub(super) struct Emitter {
    spans: Arc<dyn SpanCache>,
    out: mpsc::Sender<EncodedSpan>,
    export_progress: Option<Arc<ExportProgress>>,
    windowing: Windowing,
    metrics: Arc<Metrics>,
}

impl Emitter {
    pub(super) fn new(
        spans: Arc<dyn SpanCache>,
        out: mpsc::Sender<EncodedSpan>,
        windowing: Windowing,
        metrics: Arc<Metrics>,
    ) -> Self {
        Emitter {
            spans,
            out,
            export_progress: None,
            windowing,
            metrics,
        }
    }

    /// Counts every span sent to the exporter (for the durable intake).
    pub(super) fn count_sent_in(&mut self, progress: Arc<ExportProgress>) {
        self.export_progress = Some(progress);
    }

    /// Whether the span cache is shared (its answers take a round trip).
    pub(super) fn is_remote(&self) -> bool {
        self.spans.is_remote()
    }

    /// Object windows the span cache holds.
    pub(super) fn span_cache_entries(&self) -> u64 {
        self.spans.entry_count()
    }

    pub(super) async fn emit(&self, span: SpanBuf) -> Result<(), ProcessError> {
        self.out
            .send(span.finish())
            .await
            .map_err(|_| ProcessError::ExportStopped)?;
        if let Some(p) = &self.export_progress {
            p.add_sent(1);
        }
        Ok(())
    }

    /// Emits the object span of `ow` unless it already exists (or again when
    /// `force`: see [`Accepted::replayed`](crate::pipeline::Accepted::replayed)).
    pub(super) async fn ensure_object_span(
        &self,
        ow: &ObjectWindow,
        uid: &str,
        force: bool,
    ) -> Result<(), ProcessError> {
        let slot = self
            .spans
            .fetch_or_reserve(ow, !uid.is_empty())
            .await
            .map_err(ProcessError::span_cache)?;
        // Sent again when it went out without the uid this write has: the
        // frontend's merge takes the uid from any of the object's spans.
        if slot != Slot::Existing || force {
            let (_, end) = self.windowing.bounds(ow.window_start);
            if slot != Slot::UidMissing {
                self.metrics.object_spans.inc();
            }
            self.emit(span_model::object_span(ow, uid, end)).await?;
        }
        Ok(())
    }

    /// Records `relations` (computed by the caller), in `ow`'s window; with a
    /// shared span cache all at once, so that it asks for their links (and
    /// then their objects' spans) in one round trip, not one per relation.
    /// (The local cache answers at once: one after the other costs less.)
    pub(super) async fn record_relation_list(
        &self,
        ow: &ObjectWindow,
        relations: &[(Relation, String)],
        at: SystemTime,
        force: bool,
    ) -> Result<(), ProcessError> {
        self.record_each(relations.iter(), |(rel, uid)| {
            self.record_relation(ow, rel, uid, at, force)
        })
        .await
    }

    /// Runs `record` for each item: one after the other with the local span
    /// cache (it answers at once; that costs less), all at once with a
    /// shared one (so that their reservations go to it together).
    async fn record_each<T, F, Fut>(
        &self,
        items: impl ExactSizeIterator<Item = T>,
        record: F,
    ) -> Result<(), ProcessError>
    where
        F: Fn(T) -> Fut,
        Fut: std::future::Future<Output = Result<(), ProcessError>>,
    {
        if items.len() < 2 || !self.spans.is_remote() {
            for item in items {
                record(item).await?;
            }
            return Ok(());
        }
        futures::future::try_join_all(items.map(record))
            .await
            .map(drop)
    }

    /// A link span on each side of `rel`, unless the window has it already
    /// (again when `force`), and the other object's span if it has none.
    async fn record_relation(
        &self,
        ow: &ObjectWindow,
        rel: &Relation,
        target_uid: &str,
        at: SystemTime,
        force: bool,
    ) -> Result<(), ProcessError> {
        // The hash of `<role>|<class>|<other object's key>`.
        let link_key = |role: &str, class: &str, other: &ObjectRef| {
            let mut h = KeyHasher::new();
            h.update(role.as_bytes());
            h.update(b"|");
            h.update(class.as_bytes());
            h.update(b"|");
            other.hash_key(&mut h);
            h.digest()
        };
        let forward = link_key(rel.role.as_str(), &rel.class, &rel.target);
        let recorded = self
            .spans
            .record_link(ow, forward)
            .await
            .map_err(ProcessError::span_cache)?;
        if !recorded && !force {
            return Ok(());
        }
        let target = ObjectWindow {
            object: rel.target.clone(),
            window_start: ow.window_start,
        };
        self.ensure_object_span(&target, target_uid, force).await?;
        self.metrics.link_spans.inc();
        let f = LinkFields {
            target: &target,
            role: rel.role.as_str(),
            class: &rel.class,
            at,
        };
        self.emit(span_model::link_span(ow, &f, forward)).await?;
        let reverse_role = rel.role.reverse();
        let backward = link_key(reverse_role.as_str(), &rel.class, &ow.object);
        let recorded = self
            .spans
            .record_link(&target, backward)
            .await
            .map_err(ProcessError::span_cache)?;
        if recorded || force {
            self.metrics.link_spans.inc();
            let b = LinkFields {
                target: ow,
                role: reverse_role.as_str(),
                class: &rel.class,
                at,
            };
            self.emit(span_model::link_span(&target, &b, backward))
                .await?;
        }
        Ok(())
    }

    /// Records selector links the label index returned, in the window of `at`.
    pub(super) async fn record_selector_link_list(
        &self,
        links: Vec<super::super::selectors::SelectorLink>,
        at: SystemTime,
    ) -> Result<(), ProcessError> {
        let window_start = self.windowing.window_start(at);
        self.record_each(links.into_iter(), |link| async move {
            let ow = ObjectWindow {
                object: link.holder,
                window_start,
            };
            self.ensure_object_span(&ow, "", false).await?;
            self.record_relation(&ow, &link.relation, "", at, false)
                .await
        })
        .await
    }
}

/// The diff as span events, one per changed path, at most `max` (the rest
/// are counted by the caller).
pub(super) fn add_changes(span: &mut SpanBuf, changes: &[Change], max: usize, at: SystemTime) {
    for c in changes.iter().take(max) {
        let mut attrs = [("", ""); 4];
        attrs[0] = (attr::DIFF_OP, c.op());
        attrs[1] = (attr::DIFF_PATH, &*c.path);
        let mut n = 2;
        if let Some(o) = &c.old {
            attrs[n] = (attr::DIFF_OLD, o);
            n += 1;
        }
        if let Some(v) = &c.new {
            attrs[n] = (attr::DIFF_NEW, v);
            n += 1;
        }
        span.event(EVENT_DIFF, at, &attrs[..n]);
    }
}

/// The fields of an audit span of `ev`.
pub(super) fn audit_write<'a>(
    ev: &'a AuditEvent,
    subresource: &'a str,
    old_rv: &'a str,
    new_rv: &'a str,
    error: Option<String>,
) -> AuditWrite<'a> {
    AuditWrite {
        audit_id: &ev.audit_id,
        user: &ev.user.username,
        impersonated_user: ev.impersonated_user.as_ref().map(|u| u.username.as_str()),
        user_agent: &ev.user_agent,
        verb: &ev.verb,
        subresource,
        code: ev.code(),
        source_ip: ev.source_ips.first().map(String::as_str).unwrap_or(""),
        old_rv,
        new_rv,
        error,
        start: ev.request_received_timestamp,
        end: ev.stage_timestamp,
    }
}

/// The object as one `snapshot` event.
pub(super) fn add_snapshot(span: &mut SpanBuf, snapshot: &Value, at: SystemTime) {
    add_snapshot_text(span, &crate::json::to_text(snapshot), at);
}

/// [`add_snapshot`] of an object whose JSON text is at hand (the response
/// as logged, when nothing of it was redacted). A long one is cut by the
/// span writer (`--export-max-value-bytes`), which records its real length.
pub(super) fn add_snapshot_text(span: &mut SpanBuf, text: &str, at: SystemTime) {
    span.event(EVENT_SNAPSHOT, at, &[(attr::SNAPSHOT, text)]);
}

/// The object's readiness after the write (`status::object_status`) as
/// `object.status` and `object.status.message`.
pub(super) fn add_status(span: &mut SpanBuf, st: &status::ObjectStatus) {
    span.attr(attr::OBJECT_STATUS, st.status.as_str());
    if !st.message.is_empty() {
        span.attr(attr::OBJECT_STATUS_MESSAGE, &st.message);
    }
}

/// The Status message of a failed write, else its reason and code.
pub(super) fn failure_message(ev: &AuditEvent) -> String {
    let code = ev.code();
    let st = ev.response_status.as_ref();
    let msg = st.map(|s| s.message.as_str()).unwrap_or("");
    let reason = st.map(|s| s.reason.as_str()).unwrap_or("");
    match (reason.is_empty(), msg.is_empty()) {
        (true, true) => {
            let (resource, group) = ev
                .object_ref
                .as_ref()
                .map_or(("", ""), |r| (r.resource.as_str(), r.api_group.as_str()));
            crate::judgement::unexplained_refusal(resource, group, &ev.verb, code)
        }
        (false, true) => format!("{reason} (HTTP {code})"),
        (_, false) => msg.to_string(),
    }
}

/// An update or patch refused with 409 Conflict ("the object has been
/// modified"): optimistic concurrency, which controllers meet and retry all
/// the time. Not a create's 409 AlreadyExists.
pub(super) fn is_conflict(ev: &AuditEvent) -> bool {
    let reason = ev
        .response_status
        .as_ref()
        .map(|s| s.reason.as_str())
        .unwrap_or("");
    ev.code() == 409
        && matches!(ev.verb.as_str(), "update" | "patch")
        && (reason == "Conflict" || reason.is_empty())
}

#[cfg(test)]
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{
        accepted, attr, audit_values, drain, emitter, parse, processor, repository_rules,
    };
    use super::*;
    use crate::json::JsonValueTrait as _;
    use crate::pipeline::Accepted;
    use crate::span_model::{SPAN_KIND_LINK, SPAN_KIND_OBJECT, Span};
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

    fn kind(s: &Span) -> String {
        attr(s, attr::SPAN_KIND).unwrap_or_default()
    }

    fn status(s: &Span) -> StatusCode {
        s.status.as_ref().map(|st| st.code()).unwrap_or_default()
    }

    /// The first successful create of `resource` in the deployment scenario.
    fn created(resource: &str) -> Accepted {
        audit_values("deployment")
            .iter()
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == resource
                    && e["responseStatus"]["code"] == 201
            })
            .and_then(accepted)
            .expect("the scenario creates it")
    }

    /// The deployment scenario deletes `hello` before creating it: the
    /// refused delete (404) names no uid, and it is the window's first
    /// write. The create that follows sends the object span again, with the
    /// uid; later writes do not.
    #[tokio::test]
    async fn an_object_span_sent_without_the_uid_is_sent_again_by_the_first_write_with_it() {
        let events: Vec<serde_json::Value> = audit_values("deployment")
            .into_iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "deployments" && e["objectRef"]["name"] == "hello"
            })
            .collect();
        assert_eq!(
            (&events[0]["verb"], &events[0]["responseStatus"]["code"]),
            (
                &serde_json::Value::from("delete"),
                &serde_json::Value::from(404)
            ),
            "the scenario's first write of hello"
        );
        let uid = events[1]["responseObject"]["metadata"]["uid"]
            .as_str()
            .expect("the create's uid")
            .to_string();
        let writes: Vec<Accepted> = events.iter().filter_map(accepted).collect();
        let (p, mut rx, metrics) = processor(ProcessorConfig::default());
        for w in &writes {
            p.process(w).await.unwrap();
        }
        let spans = drain(&mut rx);
        // Counted once per object window, not per send.
        let windows: std::collections::HashSet<_> = spans
            .iter()
            .filter(|s| kind(s) == SPAN_KIND_OBJECT)
            .map(|s| s.trace_id.clone())
            .collect();
        assert_eq!(metrics.object_spans.get(), windows.len() as u64);
        let objects: Vec<Option<String>> = spans
            .iter()
            .filter(|s| {
                kind(s) == SPAN_KIND_OBJECT && attr(s, attr::NAME).as_deref() == Some("hello")
            })
            .map(|s| attr(s, attr::UID))
            .collect();
        assert_eq!(
            objects,
            vec![None, Some(uid.clone())],
            "hello's object spans, in order"
        );
        assert!(writes.len() > 10, "later writes, which have the uid too");
    }

    #[tokio::test]
    async fn an_object_span_once_per_window_and_again_when_replayed() {
        let (p, mut rx, _) = emitter();
        let item = created("deployments");
        let ow = ObjectWindow {
            object: item.object.clone(),
            window_start: 1800,
        };
        p.ensure_object_span(&ow, &item.uid, false).await.unwrap();
        p.ensure_object_span(&ow, &item.uid, false).await.unwrap();
        assert_eq!(drain(&mut rx).len(), 1);
        p.ensure_object_span(&ow, &item.uid, true).await.unwrap();
        let next = ObjectWindow {
            window_start: 3600,
            ..ow.clone()
        };
        p.ensure_object_span(&next, &item.uid, false).await.unwrap();
        let spans = drain(&mut rx);
        assert_eq!(spans.len(), 2, "forced, then the next window's");
        assert!(spans.iter().all(|s| kind(s) == SPAN_KIND_OBJECT));
        assert_eq!(spans[0].trace_id.len(), 16);
        assert_ne!(spans[0].trace_id, spans[1].trace_id, "a trace per window");
    }

    #[tokio::test]
    async fn an_owner_is_linked_on_both_sides_once_per_window() {
        let (p, mut rx, _) = emitter();
        let rs = created("replicasets");
        let state: Value =
            crate::json::parse(rs.event.response_object.as_ref().unwrap().get()).unwrap();
        let ow = ObjectWindow {
            object: rs.object.clone(),
            window_start: 1800,
        };
        let at = rs.event.stage_timestamp;
        let rules = repository_rules();
        let kinds = crate::aggregate::relations::KindRegistry::default();
        let relations =
            crate::aggregate::relations::all_relations(&ow.object, &state, &kinds, &rules);
        p.record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        let spans = drain(&mut rx);
        let links: Vec<_> = spans.iter().filter(|s| kind(s) == SPAN_KIND_LINK).collect();
        let owner = state["metadata"]["ownerReferences"][0]["name"]
            .as_str()
            .unwrap();
        // The Deployment's object span (the window had none), then a link
        // on each side: the Deployment is the parent, the ReplicaSet the child.
        assert!(
            spans
                .iter()
                .any(|s| kind(s) == SPAN_KIND_OBJECT
                    && attr(s, attr::NAME).as_deref() == Some(owner))
        );
        let roles: Vec<_> = links
            .iter()
            .filter(|l| attr(l, attr::LINK_CLASS).as_deref() == Some("owner"))
            .map(|l| attr(l, attr::LINK_ROLE).unwrap())
            .collect();
        assert_eq!(roles, ["parent", "child"], "{spans:#?}");
        // Known in this window: nothing again, unless replayed.
        p.record_relation_list(&ow, &relations, at, false)
            .await
            .unwrap();
        assert!(drain(&mut rx).is_empty());
        p.record_relation_list(&ow, &relations, at, true)
            .await
            .unwrap();
        assert_eq!(drain(&mut rx).len(), spans.len());
    }

    #[tokio::test]
    async fn diff_events_beyond_the_cap_are_counted() {
        let cfg = ProcessorConfig {
            max_diff_changes: 1,
            ..Default::default()
        };
        let (p, mut rx, _) = processor(cfg);
        for raw in audit_values("deployment") {
            if let Some(item) = accepted(&raw) {
                p.process(&item).await.unwrap();
            }
        }
        let spans = drain(&mut rx);
        let capped = spans
            .iter()
            .find(|s| attr(s, attr::DIFF_TRUNCATED).is_some())
            .expect("a write with more than one change");
        let diffs = capped
            .events
            .iter()
            .filter(|e| e.name == EVENT_DIFF)
            .count();
        assert_eq!(diffs, 1);
        assert!(
            spans
                .iter()
                .all(|s| s.events.iter().filter(|e| e.name == EVENT_DIFF).count() <= 1)
        );
    }

    #[tokio::test]
    async fn a_conflict_is_shown_without_error_other_refusals_with_their_message() {
        let values = audit_values("deployment");
        let conflict = values
            .iter()
            .find(|e| e["responseStatus"]["code"] == 409 && e["verb"] == "update")
            .expect("a controller's conflicting update");
        let ev = parse(conflict);
        assert!(is_conflict(&ev));
        let message = conflict["responseStatus"]["message"].as_str().unwrap();
        assert_eq!(failure_message(&ev), message);
        let (p, mut rx, _) = processor(ProcessorConfig::default());
        p.process(&accepted(conflict).unwrap()).await.unwrap();
        let spans = drain(&mut rx);
        let audit = spans.iter().find(|s| kind(s) == "audit").unwrap();
        assert_eq!(attr(audit, attr::AUDIT_CONFLICT).as_deref(), Some(message));
        assert_ne!(status(audit), StatusCode::Error);

        // The same refusal of a create is AlreadyExists, an error.
        let mut exists = conflict.clone();
        exists["verb"] = "create".into();
        let ev = parse(&exists);
        assert!(!is_conflict(&ev));
        // Without a message, the reason and code say why.
        let mut bare = conflict.clone();
        bare["responseStatus"]["message"] = "".into();
        assert_eq!(failure_message(&parse(&bare)), "Conflict (HTTP 409)");
    }

    /// The real Secret create of the `config` scenario, refused by an
    /// admission webhook whose denial quotes its value: the audit span's
    /// status says why without the value; an unquoting refusal is kept.
    #[tokio::test]
    async fn a_refusal_quoting_a_redacted_value_shows_its_marker() {
        let values = audit_values("config");
        let created = values
            .iter()
            .find(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "secrets")
            .unwrap();
        for (message, secret_shown) in [
            (
                "admission webhook \"policy.example.com\" denied the request: password \"kascade-fixture-s3cr3t-value\" is on the breach list",
                false,
            ),
            (
                "admission webhook \"policy.example.com\" denied the request: no label team",
                true,
            ),
        ] {
            let mut refused = created.clone();
            refused["responseStatus"] =
                serde_json::json!({"code": 400, "status": "Failure", "message": message});
            refused.as_object_mut().unwrap().remove("responseObject");
            let (p, mut rx, _) = processor(ProcessorConfig::default());
            p.process(&accepted(&refused).unwrap()).await.unwrap();
            let spans = drain(&mut rx);
            let audit = spans.iter().find(|s| kind(s) == "audit").unwrap();
            let shown = &audit.status.as_ref().unwrap().message;
            assert_eq!(status(audit), StatusCode::Error);
            assert!(
                shown.starts_with("admission webhook \"policy.example.com\" denied"),
                "{shown}"
            );
            assert!(!shown.contains("s3cr3t"), "{shown}");
            assert_eq!(
                shown.contains(crate::aggregate::redact::MARKER_PREFIX),
                !secret_shown,
                "{shown}"
            );
            assert_eq!(shown == message, secret_shown);
        }
    }
}

//! Span planning: the audit, watch and failed-create spans of a write, and
//! their parts (diff events, snapshot, readiness, failure), built from the
//! values the earlier stages handed on. Nothing here holds state.

use std::sync::Arc;
use std::time::SystemTime;

use crate::flow::{Accepted, AuditEvent};
use crate::json::Value;
use crate::span_model::{self, AuditWrite, EVENT_DIFF, EVENT_SNAPSHOT, SpanBuf, attr};

use super::super::causes::Inference;
use super::super::diff::Change;
use super::super::readiness;
use super::handoff::AppliedWrite;
use crate::flow::CascadeRole;

/// The audit span of an applied write, without its cascade and status;
/// `failure` gives a refused write's message (without hidden values).
pub(super) fn audit_span(
    item: &Accepted,
    w: &AppliedWrite,
    failure: impl Fn(&AuditEvent) -> String,
    max_diff_changes: usize,
) -> SpanBuf {
    let ev = &item.event;
    // A write refused by optimistic concurrency is routine: its writer
    // reads the object again and retries. Shown, but not as an error.
    let conflict = is_conflict(ev).then(|| failure(ev));
    let error = (ev.code() >= 400 && conflict.is_none()).then(|| failure(ev));
    let write = audit_write(ev, ev.subresource(), &w.old_rv, &w.new_rv, error);
    let mut span = span_model::audit_span(&w.ow, &write);
    if let Some(msg) = &conflict {
        span.attr(attr::AUDIT_CONFLICT, msg);
    }
    let at = ev.stage_timestamp;
    match (&w.outcome.snapshot, &w.outcome.state, &w.outcome.state_text) {
        // The new state, and its text as logged: written as it is.
        (Some(snap), Some(state), Some(text)) if Arc::ptr_eq(snap, state) => {
            add_snapshot_text(&mut span, text, at);
        }
        (Some(snap), _, _) => add_snapshot(&mut span, snap, at),
        (None, _, _) => {}
    }
    add_changes(&mut span, &w.outcome.changes, max_diff_changes, at);
    if w.outcome.changes.len() > max_diff_changes {
        span.attr_int(
            attr::DIFF_TRUNCATED,
            (w.outcome.changes.len() - max_diff_changes) as i64,
        );
    }
    span
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
        recorded_by: ev
            .recorded_by_admission
            .then_some(crate::span_model::RECORDED_BY_ADMISSION),
        annotations: &ev.annotations,
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

/// The object's readiness after the write (`readiness::object_status`) as
/// `object.status` and `object.status.message`.
pub(super) fn add_status(span: &mut SpanBuf, st: &readiness::ObjectStatus) {
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

/// Shows what was inferred on the write's span.
pub(super) fn add_cascade(span: &mut SpanBuf, inference: &Inference) {
    span.attr(attr::CASCADE_ROLE, inference.role.as_str());
    span.attr(attr::CASCADE_ROOT_TRACE_ID, &inference.root.trace_hex());
    span.attr(attr::CASCADE_ROOT_SPAN_ID, &inference.root.span_hex());
    span.attr_int(attr::CASCADE_DEPTH, inference.depth as i64);
    if let Some(timer) = &inference.timer {
        span.attr(attr::CASCADE_TIMER, timer);
    }
    if inference.cause_logged_after {
        span.attr(attr::CASCADE_CAUSE_LOGGED_AFTER, "true");
    }
    if let Some(c) = &inference.cause {
        span.attr(attr::CASCADE_CAUSE_TRACE_ID, &c.span.trace_hex());
        span.attr(attr::CASCADE_CAUSE_SPAN_ID, &c.span.span_hex());
        span.attr(attr::CASCADE_CAUSE_NAME, &c.name);
        span.attr_int(attr::CASCADE_HOP_US, c.hop.as_micros() as i64);
        span.attr(attr::CASCADE_EDGE, &c.edge);
        span.attr(attr::CASCADE_RULE, &c.rule);
        span.link_ids(
            &c.span.trace_id,
            &c.span.span_id,
            &[(attr::LINK_CLASS, "cause")],
        );
    }
    debug_assert!(inference.role != CascadeRole::Effect || inference.cause.is_some());
    if let Some(c) = &inference.cpid {
        span.attr(attr::CPID, &c.cpid.to_string());
        span.attr(attr::CPID_ORIGIN, c.origin.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProcessorConfig;
    use super::super::test_support::{accepted, attr, audit_values, drain, parse, processor};
    use super::*;
    use crate::span_model::Span;
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

    fn kind(s: &Span) -> String {
        attr(s, attr::SPAN_KIND).unwrap_or_default()
    }

    fn status(s: &Span) -> StatusCode {
        s.status.as_ref().map(|st| st.code()).unwrap_or_default()
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

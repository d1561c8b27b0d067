//! `GET /explain`: the findings of `kascade explain` over what the
//! collector stored, for a namespace (or a cluster) and a time range: the
//! raw object windows in range are read, their writes, Events and links
//! turned back into what the explain collector takes, and the report
//! built as offline.

use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::trace::v1::Span;

use super::cascade_reads::record_from_span;
use super::merge::{ObjectHistory, Role, Source, merge};
use super::raw::{RawStore, TimeRange, from_nanos, int_attr, string_attr};
use super::{Frontend, FrontendError, components};
use crate::analysis::explain::{self, ExplainCollector, Inputs, Report, Scope, change_lines};
use crate::flow::{
    CascadeRole, ChangeRecord, ChangeSink, ChangeSource, EventRecord, InvolvedObject, K8sEvent,
    RelatedObject,
};
use crate::model::ObjectRef;
use crate::span_model::{EVENT_DIFF, attr, nanos};

/// Range looked at when a request gives none: the last hour.
pub(crate) const DEFAULT_RANGE: Duration = Duration::from_secs(3600);

/// What `/explain` was asked.
#[derive(Clone, Debug)]
pub struct ExplainQuery {
    pub cluster: String,
    pub namespace: Option<String>,
    pub range: TimeRange,
}

/// An Event occurrence from an event span's attributes.
fn event_from_span(involved: &ObjectRef, s: &Span) -> Option<EventRecord> {
    let a = &s.attributes;
    let text = |k| string_attr(a, k).unwrap_or_default().to_string();
    let event = K8sEvent {
        name: text(attr::EVENT_NAME),
        namespace: involved.namespace.clone(),
        uid: text(attr::EVENT_UID),
        involved: InvolvedObject {
            namespace: involved.namespace.clone(),
            name: involved.name.clone(),
            ..InvolvedObject::default()
        },
        reason: string_attr(a, attr::EVENT_REASON)?.to_string(),
        message: text(attr::EVENT_MESSAGE),
        event_type: text(attr::EVENT_TYPE),
        component: text(attr::EVENT_COMPONENT),
        action: text(attr::EVENT_ACTION),
        count: int_attr(a, attr::EVENT_COUNT).unwrap_or(1),
        occurred: Some(from_nanos(s.start_time_unix_nano)),
    };
    Some(EventRecord {
        involved: involved.clone(),
        at: from_nanos(s.start_time_unix_nano),
        event,
    })
}

/// What an audit span's `diff` events say the write changed.
fn changes_of(s: &Span) -> Vec<String> {
    let diffs: Vec<(&str, &str, &str, &str)> = s
        .events
        .iter()
        .filter(|e| e.name == EVENT_DIFF)
        .map(|e| {
            let a = &e.attributes;
            (
                string_attr(a, attr::DIFF_OP).unwrap_or("replace"),
                string_attr(a, attr::DIFF_PATH).unwrap_or(""),
                string_attr(a, attr::DIFF_OLD).unwrap_or(""),
                string_attr(a, attr::DIFF_NEW).unwrap_or(""),
            )
        })
        .collect();
    change_lines(diffs.into_iter())
}

/// A create refused before it had a name is recorded on its owner's span:
/// the change is about the attempted object, which the owner relates to.
fn attempted(h: &ObjectHistory, s: &Span, r: &mut ChangeRecord) {
    let a = &s.attributes;
    let Some(resource) = string_attr(a, attr::AUDIT_ATTEMPT_RESOURCE) else {
        return;
    };
    let name = string_attr(a, attr::AUDIT_ATTEMPT_GENERATE_NAME).unwrap_or_default();
    r.object = ObjectRef::new(
        &h.object.cluster,
        string_attr(a, attr::AUDIT_ATTEMPT_GROUP).unwrap_or_default(),
        resource,
        string_attr(a, attr::AUDIT_ATTEMPT_NAMESPACE).unwrap_or_default(),
        name.to_string(),
    );
    r.related.push(RelatedObject {
        object: h.object.clone(),
        class: crate::aggregate::relations::CLASS_OWNER.to_string(),
        is_parent: true,
    });
}

impl<S: RawStore> Frontend<S> {
    /// The report over the object windows of `q`'s cluster (and namespace)
    /// that overlap its range; at most `--raw-search-limit` windows are read
    /// (the report's inputs say when the limit was reached).
    pub async fn explain(&self, q: &ExplainQuery) -> Result<Report, FrontendError> {
        let mut tags = vec![(attr::CLUSTER.to_string(), q.cluster.clone())];
        if let Some(ns) = &q.namespace {
            tags.push((attr::NAMESPACE.to_string(), ns.clone()));
        }
        let limit = self.cfg.raw_search_limit;
        let ids = self.searches.search(self.store(), &tags, q.range).await?;
        let read = self.assembler.read_each(&ids).await?;
        let why_unread = read.first_error().map(|why| {
            format!(
                "; {} could not be read and are left out: {why}",
                read.unreadable.len()
            )
        });
        if read.unreadable.len() == ids.len()
            && let Some(e) = read.unreadable.into_values().next()
        {
            // Nothing read: no report rather than one that finds nothing.
            return Err(e.into());
        }
        let mut traces = read.traces;
        let histories: Vec<_> = ids
            .iter()
            .filter_map(|id| traces.remove(id).and_then(merge))
            .collect();
        let scope = Scope {
            namespace: q.namespace.clone(),
            from: Some(q.range.start),
            to: Some(q.range.end),
            ..Scope::default()
        };
        let mut collector = ExplainCollector::new(scope);
        let mut records: Vec<(ChangeRecord, Vec<String>)> = Vec::new();
        let mut events = Vec::new();
        for h in &histories {
            for l in &h.links {
                let other = RelatedObject {
                    object: l.other.clone(),
                    class: l.class.clone(),
                    is_parent: l.role == Role::Parent,
                };
                collector.relate(&h.object, &other);
            }
            for e in &h.entries {
                match e.source {
                    Source::Audit | Source::Watch => {
                        if let Some(mut r) = record_from_span(&h.object, &h.uid, e.source, &e.span)
                        {
                            attempted(h, &e.span, &mut r);
                            let changes = if r.role == CascadeRole::Effect {
                                Vec::new()
                            } else {
                                changes_of(&e.span)
                            };
                            records.push((r, changes));
                        }
                    }
                    Source::Event => events.extend(event_from_span(&h.object, &e.span)),
                    Source::Other => {}
                }
            }
        }
        // The collector follows each object's state in time order.
        records.sort_by_key(|(r, _)| (r.completed, r.received, r.span));
        records.dedup_by_key(|(r, _)| r.span);
        let mut notes = Vec::new();
        match self.explain_component_spans(&records).await {
            Ok(Some(spans)) => collector = collector.with_components(spans),
            Ok(None) => {}
            // The report without them rather than none.
            Err(e) => notes.push(format!(
                "kube-apiserver's traces could not be read, slow writes are not judged: {e}"
            )),
        }
        let lines = (records.len() + events.len()) as u64;
        for (r, changes) in records {
            let span = r.span;
            collector.record(&r);
            if !changes.is_empty() {
                collector.set_root_changes(span, changes);
            }
        }
        for e in &events {
            collector.event(e);
        }
        let mut inputs = Inputs {
            files: vec![format!(
                "raw store: {} object windows{}{}",
                ids.len(),
                if ids.len() >= limit {
                    format!(" (the --raw-search-limit of {limit} was reached: some left out)")
                } else {
                    String::new()
                },
                why_unread.unwrap_or_default()
            )],
            lines,
            ..Inputs::default()
        };
        inputs.malformed_examples.clear();
        let mut report = explain::report(collector, inputs);
        report.inputs.notes.extend(notes);
        Ok(report)
    }

    /// The apiserver's own spans of the report's writes (`None` when the
    /// store holds none in their range, or `--component-service` is
    /// empty): at most [`components::MAX_EXPLAINED_WRITES`] writes are looked
    /// up, the longest first (a slow write is a long one; the report's
    /// inputs say how many were not).
    async fn explain_component_spans(
        &self,
        records: &[(ChangeRecord, Vec<String>)],
    ) -> Result<Option<components::ComponentSpans>, FrontendError> {
        let service = &self.cfg.component_service;
        let writes: Vec<components::Write> = records
            .iter()
            .filter(|(r, _)| r.source == ChangeSource::Audit && !r.audit_id.is_empty())
            .map(|(r, _)| components::Write {
                audit_id: r.audit_id.clone(),
                received: nanos(r.received),
                completed: nanos(r.completed),
                failed: r.code >= 400 && r.code != 409,
                root: r.role == crate::flow::CascadeRole::Root,
            })
            .collect();
        if service.is_empty() || writes.is_empty() {
            return Ok(None);
        }
        let spans = components::read(
            self.assembler.store().as_ref(),
            components::Lookups {
                apiserver_service: service,
                writes,
                max_writes: components::MAX_EXPLAINED_WRITES,
                budget: None,
                kubelet_service: "",
                pods: Vec::new(),
            },
            self.cfg.limits.concurrency,
        )
        .await?;
        if spans.is_empty() {
            return Ok(None);
        }
        Ok(Some(spans))
    }
}

/// The range of a request: `from`/`to` when given, else the hour up to
/// `to` (or now).
pub(crate) fn range_of(from: Option<SystemTime>, to: Option<SystemTime>) -> TimeRange {
    let end = to.unwrap_or_else(SystemTime::now);
    let start = from.unwrap_or_else(|| {
        end.checked_sub(DEFAULT_RANGE)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    });
    TimeRange::new(start, end)
}

//! Kubernetes components' own traces joined to the writes they served.
//!
//! kube-apiserver exports one trace per request (sent to `kascade collect
//! --component-traces-listen`, forwarded to the raw store unchanged); its
//! root span (`POST /api/v1/namespaces/{:namespace}/pods`) and the handler
//! span (`Create`) carry the request's audit ID as the tag `audit-id`. An
//! audit span names the same ID (`audit.id`), so the join is exact: one
//! search of the raw store by `audit-id` per write shown. The joined spans
//! keep their span ids; only their trace id becomes the assembled trace's,
//! the root's parent becomes the span that shows the write, and the root
//! links back to the apiserver's own trace.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Link;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::raw::{RawError, RawStore, TimeRange, TraceIdBytes, kv, string_attr};
use crate::span_model::attr;

pub use crate::component_spans::APISERVER_SERVICE;
pub use crate::component_spans::AUDIT_ID_TAG;
pub(crate) use crate::component_spans::ComponentSpans;
#[cfg(feature = "test-support")]
pub use crate::component_spans::parts;
#[cfg(feature = "test-support")]
pub use crate::component_spans::spans_from_otlp_json_lines;
/// Most writes of one assembled trace whose component spans are read: each
/// is one search of the raw store.
pub(crate) const MAX_JOINED_WRITES: usize = 256;
/// How far around a write its request's spans are searched (the apiserver
/// starts its root span as the request arrives; clocks are one host's).
const SLACK: Duration = Duration::from_secs(5);

/// A write to look up: its audit ID and its request's times (ns).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Write {
    pub audit_id: String,
    pub received: u64,
    pub completed: u64,
}

/// Reads the apiserver's spans of `writes` (the first
/// [`MAX_JOINED_WRITES`]) from `store`, `concurrency` searches at a time;
/// one search over their whole time range first, so a store without
/// component traces costs one search.
pub(crate) async fn read<S: RawStore>(
    store: &S,
    service: &str,
    mut writes: Vec<Write>,
    concurrency: usize,
) -> Result<ComponentSpans, RawError> {
    use futures::StreamExt as _;
    writes.sort_by(|a, b| a.audit_id.cmp(&b.audit_id));
    writes.dedup_by(|a, b| a.audit_id == b.audit_id);
    if writes.is_empty() || service.is_empty() {
        return Ok(ComponentSpans::default());
    }
    let at = |ns: u64| std::time::UNIX_EPOCH + Duration::from_nanos(ns);
    let from = writes.iter().map(|w| w.received).min().unwrap_or(0);
    let to = writes.iter().map(|w| w.completed).max().unwrap_or(0);
    let all = TimeRange::new(
        at(from).checked_sub(SLACK).unwrap_or(at(from)),
        at(to) + SLACK,
    );
    if store.find_component(service, &[], all, 1).await?.is_empty() {
        return Ok(ComponentSpans::default());
    }
    let not_read = writes.len().saturating_sub(MAX_JOINED_WRITES);
    writes.truncate(MAX_JOINED_WRITES);
    let searches: Vec<_> = writes
        .iter()
        .map(|w| {
            let tags = vec![(AUDIT_ID_TAG.to_string(), w.audit_id.clone())];
            let range = TimeRange::new(
                at(w.received).checked_sub(SLACK).unwrap_or(at(w.received)),
                at(w.completed) + SLACK,
            );
            async move { store.find_component(service, &tags, range, 2).await }
        })
        .collect();
    let found: Vec<Result<Vec<TraceIdBytes>, RawError>> = futures::stream::iter(searches)
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut ids = Vec::new();
    for f in found {
        ids.extend(f?);
    }
    ids.sort();
    ids.dedup();
    let traces = store.get_many(&ids, concurrency).await?;
    let mut spans = ComponentSpans::from_spans(traces.into_values().flatten());
    spans.not_read = not_read;
    Ok(spans)
}

/// Hangs each request's component spans under the span that shows its
/// write in `out` (a span with `audit.id`, or one with a log naming it:
/// modes tracing and grouped show writes as logs), once each. Returns the
/// requests joined.
pub(crate) fn join(
    out: &mut Vec<ResourceSpans>,
    trace_id: &TraceIdBytes,
    comps: &ComponentSpans,
) -> usize {
    if comps.is_empty() {
        return 0;
    }
    let mut holders: HashMap<&str, Vec<u8>> = HashMap::new();
    for s in out
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        let own = string_attr(&s.attributes, attr::AUDIT_ID);
        let logged = s
            .events
            .iter()
            .filter_map(|e| string_attr(&e.attributes, attr::AUDIT_ID));
        for id in own.into_iter().chain(logged) {
            if let Some(key) = comps.key_of(id) {
                holders.entry(key).or_insert_with(|| s.span_id.clone());
            }
        }
    }
    let mut joined = Vec::new();
    let mut requests = 0;
    let mut enclose: Vec<(Vec<u8>, u64, u64)> = Vec::new();
    for (audit_id, holder) in &holders {
        let Some(spans) = comps.of(audit_id) else {
            continue;
        };
        requests += 1;
        let start = spans.iter().map(|s| s.start_time_unix_nano).min();
        let end = spans.iter().map(|s| s.end_time_unix_nano).max();
        if let (Some(start), Some(end)) = (start, end) {
            enclose.push((holder.clone(), start, end));
        }
        let mut request = under(spans, holder, trace_id);
        enclose_children(&mut request);
        joined.extend(request);
    }
    widen(out, &enclose);
    if !joined.is_empty() {
        joined.sort_by_key(|s| (s.start_time_unix_nano, s.span_id.clone()));
        out.push(ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", APISERVER_SERVICE)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "kascade-frontend".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans: joined,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    requests
}

/// Widens each holder span, and its ancestors, to enclose its request's
/// spans: kube-apiserver ends a request's spans after the audit event's
/// `stageTimestamp` (by 50–400 µs in the harness), and a child outside its
/// parent is clock skew to Jaeger.
fn widen(out: &mut [ResourceSpans], enclose: &[(Vec<u8>, u64, u64)]) {
    let mut at: HashMap<Vec<u8>, (usize, usize, usize)> = HashMap::new();
    for (r, rs) in out.iter().enumerate() {
        for (c, ss) in rs.scope_spans.iter().enumerate() {
            for (i, s) in ss.spans.iter().enumerate() {
                at.insert(s.span_id.clone(), (r, c, i));
            }
        }
    }
    fn span_at(out: &mut [ResourceSpans], (r, c, i): (usize, usize, usize)) -> &mut Span {
        &mut out[r].scope_spans[c].spans[i]
    }
    for (holder, start, end) in enclose {
        enclose_upwards(out, &at, span_at, holder.clone(), (*start, *end));
    }
}

/// Widens each of one request's spans to enclose its children: on a busy
/// kube-apiserver a request's span can end after its `authentication`
/// parent (by 49 µs in the e2e suite, the harness beside a fuzzer), and a
/// child outside its parent is clock skew to Jaeger.
fn enclose_children(spans: &mut [Span]) {
    let at: HashMap<Vec<u8>, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id.clone(), i))
        .collect();
    fn span_at(spans: &mut [Span], i: usize) -> &mut Span {
        &mut spans[i]
    }
    for i in 0..spans.len() {
        let range = (spans[i].start_time_unix_nano, spans[i].end_time_unix_nano);
        let parent = spans[i].parent_span_id.clone();
        enclose_upwards(spans, &at, span_at, parent, range);
    }
}

/// Widens the span `id` to enclose `range`, then each of its ancestors to
/// enclose the span below it, up to the first that already does. Only a
/// start or an end moves outward; nothing is shortened. `at` finds a span
/// of `spans` by id.
fn enclose_upwards<C: ?Sized, K: Copy>(
    spans: &mut C,
    at: &HashMap<Vec<u8>, K>,
    span_at: fn(&mut C, K) -> &mut Span,
    mut id: Vec<u8>,
    (mut start, mut end): (u64, u64),
) {
    // Bounded by the spans there are: a parent cycle cannot loop.
    for _ in 0..at.len() {
        let Some(&k) = at.get(&id) else {
            break;
        };
        let s = span_at(spans, k);
        if s.start_time_unix_nano <= start && s.end_time_unix_nano >= end {
            break;
        }
        s.start_time_unix_nano = s.start_time_unix_nano.min(start);
        s.end_time_unix_nano = s.end_time_unix_nano.max(end);
        (start, end) = (s.start_time_unix_nano, s.end_time_unix_nano);
        id = s.parent_span_id.clone();
    }
}

/// One request's spans in the assembled trace: its roots (no parent among
/// them) under `holder`, each linked to the apiserver's own trace.
fn under(spans: &[Span], holder: &[u8], trace_id: &TraceIdBytes) -> Vec<Span> {
    let own: std::collections::HashSet<&[u8]> =
        spans.iter().map(|s| s.span_id.as_slice()).collect();
    spans
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if !own.contains(s.parent_span_id.as_slice()) {
                s.links.push(Link {
                    trace_id: s.trace_id.clone(),
                    span_id: s.span_id.clone(),
                    attributes: vec![kv("link.role", "apiserver trace")],
                    ..Default::default()
                });
                s.parent_span_id = holder.to_vec();
            }
            s.trace_id = trace_id.to_vec();
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u8, parent: u8, start: u64, end: u64) -> Span {
        Span {
            span_id: vec![id],
            parent_span_id: if parent == 0 { vec![] } else { vec![parent] },
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            ..Default::default()
        }
    }

    /// A holder widened on one side must still lie inside its parent, even
    /// when the parent already enclosed the request's own range.
    #[test]
    fn an_ancestor_encloses_the_widened_span_below_it_not_only_the_request() {
        let parent = span(1, 0, 10, 100);
        let holder = span(2, 1, 5, 50);
        let mut out = vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![parent, holder],
                ..Default::default()
            }],
            ..Default::default()
        }];
        // The request runs 20..60: the holder becomes 5..60, and its parent
        // (10..100, which holds 20..60) must widen to start at 5.
        widen(&mut out, &[(vec![2], 20, 60)]);
        let spans = &out[0].scope_spans[0].spans;
        assert_eq!(
            (spans[1].start_time_unix_nano, spans[1].end_time_unix_nano),
            (5, 60)
        );
        assert_eq!(
            (spans[0].start_time_unix_nano, spans[0].end_time_unix_nano),
            (5, 100)
        );
    }
}

//! The join itself: each request's spans under the span that shows its
//! write, each kubelet sync under the span that shows its Pod, the holders
//! widened to enclose what they hold.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Link;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::{
    ALWAYS_JOINED_WRITES, APISERVER_SERVICE, ComponentSpans, JOIN_BUDGET, KUBELET_SERVICE,
    MAX_JOINED_WRITES, NOT_JOINED_TAG, Pod,
};
use crate::frontend::raw::{TraceIdBytes, kv, string_attr};
use crate::span_model::attr;

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
    // What made a slow request slow, by audit ID.
    let mut slow: HashMap<String, String> = HashMap::new();
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
        let (total, parts) = crate::component_spans::parts(spans);
        if let Some(p) = crate::component_spans::slowest_part(total, &parts) {
            let ms = |d: Duration| format!("{:.0}ms", d.as_secs_f64() * 1e3);
            slow.insert(
                audit_id.to_string(),
                format!("{} {} of {}", p.label, ms(p.took), ms(total)),
            );
        }
        let mut request = under(spans, holder, trace_id, "apiserver trace");
        crate::component_spans::name_webhook_calls(&mut request);
        enclose_children(&mut request);
        joined.extend(request);
    }
    mark_slow(out, &slow);
    widen(out, &enclose);
    push_service(out, APISERVER_SERVICE, joined);
    if comps.not_read > 0
        && let Some(top) = out
            .iter_mut()
            .flat_map(|rs| &mut rs.scope_spans)
            .flat_map(|ss| &mut ss.spans)
            .find(|s| s.parent_span_id.is_empty())
    {
        top.attributes.push(kv(
            NOT_JOINED_TAG,
            format!(
                "{} of the writes shown: the apiserver's traces are read for at most {MAX_JOINED_WRITES} writes a trace, past the first {ALWAYS_JOINED_WRITES} for {}s of searching: the slow ones first, then the cascades' roots, the refused, the longest",
                comps.not_read,
                JOIN_BUDGET.as_secs()
            ),
        ));
    }
    requests
}

/// Tags each slow write in `out` (its span, or its log in modes tracing and
/// grouped) with what made it slow, `request.slowest` (`validating webhook
/// policy.example.com 807ms of 858ms`): the row says it without opening
/// the request.
fn mark_slow(out: &mut [ResourceSpans], slow: &HashMap<String, String>) {
    if slow.is_empty() {
        return;
    }
    for s in out
        .iter_mut()
        .flat_map(|rs| &mut rs.scope_spans)
        .flat_map(|ss| &mut ss.spans)
    {
        if let Some(what) = string_attr(&s.attributes, attr::AUDIT_ID).and_then(|id| slow.get(id)) {
            s.attributes.push(kv(REQUEST_SLOWEST, what));
            continue;
        }
        for e in &mut s.events {
            if let Some(what) =
                string_attr(&e.attributes, attr::AUDIT_ID).and_then(|id| slow.get(id))
            {
                e.attributes.push(kv(REQUEST_SLOWEST, what));
            }
        }
    }
}

/// The tag of a slow write naming what made it slow.
pub(crate) const REQUEST_SLOWEST: &str = "request.slowest";

/// `spans` as one service's resource spans of `out` (none when empty).
fn push_service(out: &mut Vec<ResourceSpans>, service: &str, mut spans: Vec<Span>) {
    if spans.is_empty() {
        return;
    }
    spans.sort_by_key(|s| (s.start_time_unix_nano, s.span_id.clone()));
    out.push(ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", service)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "kascade-frontend".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            }),
            spans,
            schema_url: String::new(),
        }],
        schema_url: String::new(),
    });
}

/// Hangs each of the kubelet's syncs of a Pod under the span that shows
/// the Pod in `out`: its object span (modes tracing, tree, grouped; found
/// by uid), else (modes timeline and cascade, a span per write) the span of
/// its latest write made before the sync began, or of its first. The
/// sync's spans keep their ids (containerd's under the kubelet's CRI calls
/// included: one service, `kubelet`, shows them all); its root links to
/// the kubelet's own trace. Returns the syncs joined.
pub(crate) fn join_syncs(
    out: &mut Vec<ResourceSpans>,
    trace_id: &TraceIdBytes,
    comps: &ComponentSpans,
    pods: &[Pod],
) -> usize {
    let pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| !comps.syncs_of(&p.uid).is_empty())
        .collect();
    if pods.is_empty() {
        return 0;
    }
    let uids: std::collections::HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
    let audit_ids: std::collections::HashSet<&str> = pods
        .iter()
        .flat_map(|p| p.writes.iter().map(String::as_str))
        .collect();
    let mut objects: HashMap<String, Vec<u8>> = HashMap::new();
    let mut writes: HashMap<String, (u64, Vec<u8>)> = HashMap::new();
    for s in out
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        let a = &s.attributes;
        if let Some(id) = string_attr(a, attr::AUDIT_ID).filter(|id| audit_ids.contains(id)) {
            writes
                .entry(id.to_string())
                .or_insert_with(|| (s.start_time_unix_nano, s.span_id.clone()));
        } else if string_attr(a, attr::RESOURCE) == Some("pods")
            && let Some(uid) = string_attr(a, attr::UID).filter(|u| uids.contains(u))
        {
            objects
                .entry(uid.to_string())
                .or_insert_with(|| s.span_id.clone());
        }
    }
    let mut joined = Vec::new();
    let mut enclose = Vec::new();
    let mut syncs = 0;
    for pod in pods {
        let mut shown: Vec<&(u64, Vec<u8>)> =
            pod.writes.iter().filter_map(|id| writes.get(id)).collect();
        shown.sort();
        for sync in comps.syncs_of(&pod.uid) {
            let Some(root) = sync.first() else {
                continue;
            };
            let holder = objects.get(&pod.uid).or_else(|| {
                shown
                    .iter()
                    .rev()
                    .find(|(start, _)| *start <= root.start_time_unix_nano)
                    .or(shown.first())
                    .map(|(_, id)| id)
            });
            let Some(holder) = holder else {
                continue;
            };
            syncs += 1;
            let start = sync.iter().map(|s| s.start_time_unix_nano).min();
            let end = sync.iter().map(|s| s.end_time_unix_nano).max();
            if let (Some(start), Some(end)) = (start, end) {
                enclose.push((holder.clone(), start, end));
            }
            let mut spans = under(sync, holder, trace_id, "kubelet trace");
            enclose_children(&mut spans);
            joined.extend(spans);
        }
    }
    widen(out, &enclose);
    push_service(out, KUBELET_SERVICE, joined);
    syncs
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
fn under(spans: &[Span], holder: &[u8], trace_id: &TraceIdBytes, role: &str) -> Vec<Span> {
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
                    attributes: vec![kv("link.role", role)],
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

    /// Writes whose requests were not read are said on the top span.
    #[test]
    fn the_top_span_says_how_many_writes_were_not_looked_up() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/e2e/fixtures/real-crashloop/apiserver-traces.jsonl"
        );
        let spans = crate::component_spans::spans_from_otlp_json_lines(
            &std::fs::read_to_string(path).unwrap(),
        )
        .unwrap();
        let mut comps = ComponentSpans::from_spans(spans);
        let mut out = vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span(1, 0, 10, 100)],
                ..Default::default()
            }],
            ..Default::default()
        }];
        let tag = |out: &[ResourceSpans]| {
            string_attr(&out[0].scope_spans[0].spans[0].attributes, NOT_JOINED_TAG)
                .map(str::to_string)
        };
        join(&mut out, &[0; 16], &comps);
        assert_eq!(tag(&out), None);
        comps.not_read = 7;
        join(&mut out, &[0; 16], &comps);
        let said = tag(&out).expect("the tag");
        assert!(said.starts_with("7 of the writes shown"), "{said}");
    }
}

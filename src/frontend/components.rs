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

/// The service kube-apiserver's traces are stored under.
pub const APISERVER_SERVICE: &str = "apiserver";
/// The tag kube-apiserver's request spans carry the audit ID in.
pub const AUDIT_ID_TAG: &str = "audit-id";
/// Most writes of one assembled trace whose component spans are read: each
/// is one search of the raw store.
pub const MAX_JOINED_WRITES: usize = 256;
/// How far around a write its request's spans are searched (the apiserver
/// starts its root span as the request arrives; clocks are one host's).
const SLACK: Duration = Duration::from_secs(5);

/// Component spans by the audit ID of the request they served.
#[derive(Default, Debug)]
pub struct ComponentSpans {
    by_audit_id: HashMap<String, Vec<Span>>,
    /// Writes not looked up: past [`MAX_JOINED_WRITES`].
    pub not_read: usize,
}

impl ComponentSpans {
    /// Groups spans (of any traces) by the audit ID their trace carries.
    pub fn from_spans(spans: impl IntoIterator<Item = Span>) -> Self {
        let mut by_trace: HashMap<Vec<u8>, Vec<Span>> = HashMap::new();
        for s in spans {
            by_trace.entry(s.trace_id.clone()).or_default().push(s);
        }
        let mut by_audit_id: HashMap<String, Vec<Span>> = HashMap::new();
        for (_, mut spans) in by_trace {
            let Some(id) = spans
                .iter()
                .find_map(|s| string_attr(&s.attributes, AUDIT_ID_TAG))
                .map(str::to_string)
            else {
                continue;
            };
            spans.sort_by_key(|s| (s.start_time_unix_nano, s.span_id.clone()));
            by_audit_id.entry(id).or_default().extend(spans);
        }
        Self {
            by_audit_id,
            not_read: 0,
        }
    }

    /// The spans of the request with this audit ID, earliest first.
    pub fn of(&self, audit_id: &str) -> Option<&[Span]> {
        self.by_audit_id.get(audit_id).map(Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_audit_id.is_empty()
    }

    pub fn requests(&self) -> usize {
        self.by_audit_id.len()
    }
}

/// A write to look up: its audit ID and its request's times (ns).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Write {
    pub audit_id: String,
    pub received: u64,
    pub completed: u64,
}

/// Reads the apiserver's spans of `writes` (the first
/// [`MAX_JOINED_WRITES`]) from `store`, `concurrency` searches at a time;
/// one search over their whole time range first, so a store without
/// component traces costs one search.
pub async fn read<S: RawStore>(
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
pub fn join(
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
            if let Some((key, _)) = comps.by_audit_id.get_key_value(id) {
                holders
                    .entry(key.as_str())
                    .or_insert_with(|| s.span_id.clone());
            }
        }
    }
    let mut joined = Vec::new();
    let mut requests = 0;
    for (audit_id, holder) in &holders {
        let Some(spans) = comps.of(audit_id) else {
            continue;
        };
        requests += 1;
        joined.extend(under(spans, holder, trace_id));
    }
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

/// What took a request's time, by the parts a person acts on: admission
/// webhooks, conversion webhooks, etcd (a request's compact line in
/// `kascade trace`, and what explain names for a slow write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// `validating webhook policy.example.com`, `etcd Create`, …
    pub label: String,
    pub took: Duration,
    /// The part failed (its span, or its HTTP call's, in error).
    pub failed: bool,
}

/// The parts of one request's spans, earliest first; and the request's own
/// duration (its root span's).
pub fn parts(spans: &[Span]) -> (Duration, Vec<Part>) {
    let own: std::collections::HashSet<&[u8]> =
        spans.iter().map(|s| s.span_id.as_slice()).collect();
    let took = |s: &Span| {
        Duration::from_nanos(s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano))
    };
    let total = spans
        .iter()
        .filter(|s| !own.contains(s.parent_span_id.as_slice()))
        .map(took)
        .max()
        .unwrap_or_default();
    let in_error = |s: &Span| {
        s.status.as_ref().is_some_and(|st| st.code == 2)
            || spans
                .iter()
                .filter(|c| c.parent_span_id == s.span_id)
                .any(|c| c.status.as_ref().is_some_and(|st| st.code == 2))
    };
    let parts = spans
        .iter()
        .filter_map(|s| {
            let label = if let Some(kind) = s
                .name
                .strip_prefix("Call ")
                .and_then(|n| n.strip_suffix(" webhook"))
            {
                let name = string_attr(&s.attributes, "webhook").unwrap_or("?");
                format!("{kind} webhook {name}")
            } else if let Some(op) = s.name.strip_suffix(" etcd3") {
                format!("etcd {op}")
            } else {
                return None;
            };
            Some(Part {
                label,
                took: took(s),
                failed: in_error(s),
            })
        })
        .collect();
    (total, parts)
}

/// The spans of a file of OTLP/JSON traces, one `TracesData` (or
/// `ExportTraceServiceRequest`, the same shape) per line: what the
/// OpenTelemetry Collector's `file` exporter writes and Jaeger's
/// `/api/v3/traces/{id}` answers (its `result`). Errors name the line.
pub fn spans_from_otlp_json_lines(text: &str) -> Result<Vec<Span>, String> {
    let mut spans = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let capped = crate::json::depth::cap(line, crate::json::depth::MAX_OBJECT_DEPTH, 8);
        let data: opentelemetry_proto::tonic::trace::v1::TracesData =
            serde_json::from_str(&capped.text).map_err(|e| {
                crate::bounds::clip_message(format!(
                    "line {}: not OTLP/JSON traces (a TracesData per line): {e}",
                    i + 1
                ))
            })?;
        spans.extend(
            data.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans),
        );
    }
    Ok(spans)
}
